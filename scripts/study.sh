#!/usr/bin/env bash
# The positional-encoding study of docs/RESULTS.md, resumable. Run from the repository root:
#   bash scripts/study.sh runs       # SCHEMES x SEEDS: train with experiment=fmnist_cpu, then evaluate
#                                    # at 28/44/56 px with no fine-tune (both modes where a scheme has two)
#   bash scripts/study.sh finetune   # a short fine-tune at 56 px of every finished run (FINETUNE_SEEDS)
#   bash scripts/study.sh mixed      # MIXED_SCHEMES x SEEDS trained at each list of MIXED_SIZES (one size
#                                    # per step), evaluated at 20/28/44/56 px in the scheme's default
#                                    # resize mode; their single-size twins (from `runs`) at 20 px as well
#   bash scripts/study.sh tables     # docs/results/fmnist_cpu*/ from the logs, and the logs' light files
#                                    # (no checkpoints) archived to docs/results/study_logs/
#   bash scripts/study.sh all
# Each step whose result exists (a run's results.json, an evaluation's resolution.csv) is skipped,
# so the study can stop at any point and continue later, or be spread over machines with SEEDS= or
# SCHEMES= (copy LOGS between them). Needs Debian's dataset-fashion-mnist (or network access once).
# A run of experiment=fmnist_cpu uses 2 processes (both cores of a 2-core CPU): one study.sh at a time.
set -euo pipefail
SCHEMES=${SCHEMES:-none,1d_learned,2d_sin,rel_bias,cpb,rope_axial,rope_mixed,cpe}
SEEDS=${SEEDS:-0,1,2}
FINETUNE_SEEDS=${FINETUNE_SEEDS:-$SEEDS}
MIXED_SCHEMES=${MIXED_SCHEMES:-2d_sin,1d_learned,rel_bias,cpb,rope_mixed,cpe}
# 0.71x..1.57x of 28 px, and the same extended to 2x; tokens per step capped at a 28 px step's (batch_by_tokens)
MIXED_SIZES=${MIXED_SIZES:-"[20,28,36,44] [20,28,36,44,56]"}
MIXED_EVAL="[20,28,44,56]"    # 0.71x, 1x, 1.57x, 2x
TWIN_EVAL="[20]"              # the twins' 28/44/56 px results are in their transfer_default/
LOGS=${LOGS:-logs}
STUDY=$LOGS/fmnist_cpu
FINETUNED=$LOGS/fmnist_finetune
SIZES="[28,44,56]"        # 1x (7x7 grid), 1.57x (11x11: 42 px is no multiple of the patch), 2x (14x14)
TWO_MODES=" 1d_sin 2d_sin rope_axial rope_mixed "   # schemes with an extrapolate/interpolate choice
QUIET="trainer.enable_progress_bar=false figures_at_end=false"

finished() { compgen -G "$1/version_*/results.json" > /dev/null; }
latest() { ls -d "$1"/version_* | sort -t_ -k2 -n | tail -n 1; }
say() { echo "[study $(date +%H:%M:%S)] $*"; }

evaluate() {  # run folder, scheme[, sizes, output prefix, modes]: no-fine-tune transfer, logged into the run's TensorBoard
  local version mode sizes=${3:-$SIZES} prefix=${4:-transfer} modes=${5:-default interpolate}
  version=$(latest "$1")
  for mode in $modes; do
    [ $mode = default ] || [[ $TWO_MODES == *" $2 "* ]] || continue
    [ -f "$version/${prefix}_$mode/resolution.csv" ] && continue
    say "evaluate $version ($mode, $sizes)"
    python -m vitpos.evaluate ckpt="$(ls "$version"/checkpoints/best-*.ckpt)" img_sizes="$sizes" \
      out="$version/${prefix}_$mode" $([ $mode = default ] || echo resize_mode=$mode)
  done
}

runs() {
  local seed pos run
  for seed in ${SEEDS//,/ }; do          # seed-major: every scheme has a result before any has three
    for pos in ${SCHEMES//,/ }; do
      run=$STUDY/${pos}_fashion_mnist_28px_seed$seed
      if ! finished "$run"; then
        say "train $run"
        python train.py experiment=fmnist_cpu pos="$pos" seed="$seed" paths.log_dir="$LOGS" $QUIET
      fi
      evaluate "$run" "$pos"
    done
  done
}

finetune() {
  local seed pos run
  for seed in ${FINETUNE_SEEDS//,/ }; do
    for pos in ${SCHEMES//,/ }; do
      run=$STUDY/${pos}_fashion_mnist_28px_seed$seed
      finished "$run" || continue
      finished "$FINETUNED/${pos}_fashion_mnist_56px_from_28px_seed$seed" && continue
      say "fine-tune $run at 56 px"
      python train.py experiment=fmnist_finetune pos="$pos" seed="$seed" paths.log_dir="$LOGS" $QUIET \
        finetune_from="$(ls "$(latest "$run")"/checkpoints/best-*.ckpt)"
    done
  done
}

mixed() {
  local lists sizes tag seed pos run
  read -ra lists <<< "$MIXED_SIZES"     # split on spaces without globbing the brackets
  for sizes in "${lists[@]}"; do
    tag=train$(echo "$sizes" | tr -d '[]' | tr , -)px    # the run-name tag train.py gives these sizes
    for seed in ${SEEDS//,/ }; do
      for pos in ${MIXED_SCHEMES//,/ }; do
        run=$STUDY/${pos}_fashion_mnist_28px_${tag}_seed$seed
        if ! finished "$run"; then
          say "train $run"
          python train.py experiment=fmnist_cpu pos="$pos" seed="$seed" paths.log_dir="$LOGS" $QUIET \
            train_img_sizes="$sizes" batch_by_tokens=true
        fi
        evaluate "$run" "$pos" "$MIXED_EVAL" mixed_eval default
        finished "$STUDY/${pos}_fashion_mnist_28px_seed$seed" &&
          evaluate "$STUDY/${pos}_fashion_mnist_28px_seed$seed" "$pos" "$TWIN_EVAL" mixed_eval default
      done
    done
  done
}

tables() {
  local archive=docs/results/study_logs
  rm -rf "$archive" && mkdir -p "$archive"
  (cd "$LOGS" && find $(ls -d fmnist_cpu fmnist_finetune 2> /dev/null) -path '*/checkpoints' -prune -o -type f \
     -print | grep -v -e '\.ckpt$' -e '\.png$' | tar -cf - -T -) | tar -xf - -C "$archive"
  python -m vitpos.compare "$archive/fmnist_cpu" out=docs/results/fmnist_cpu
  if [ -d "$archive/fmnist_finetune" ]; then
    python -m vitpos.compare "$archive/fmnist_finetune" out=docs/results/fmnist_finetune
  fi
}

case ${1:-all} in
  runs) runs ;;
  finetune) finetune ;;
  mixed) mixed ;;
  tables) tables ;;
  all) runs; finetune; tables ;;
  *) echo "error: unknown step '${1}'; use one of runs, finetune, mixed, tables, all" >&2; exit 2 ;;
esac
