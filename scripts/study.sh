#!/usr/bin/env bash
# The positional-encoding study of docs/RESULTS.md: SCHEMES x SEEDS trained with experiment=fmnist_cpu,
# evaluated at 1x, 1.5x and 2x without fine-tuning (both modes where a scheme has two), fine-tuned
# briefly at 2x, and tabulated by vitpos.compare. Run from the repository root:
#   bash scripts/study.sh train       # SCHEMES x SEEDS training runs (~6 min each on 2 CPU cores)
#   bash scripts/study.sh transfer    # every finished run at 28/42/56 px, no fine-tune
#   bash scripts/study.sh finetune    # a short fine-tune of every finished run at 56 px
#   bash scripts/study.sh tables      # docs/results/fmnist_cpu*/ from the logs
#   bash scripts/study.sh all
# Resumable: a step whose result exists (results.json of a run, transfer/ of an evaluation) is
# skipped, so the study can be stopped at any time, and spread over machines by SEEDS= or SCHEMES=
# (copy logs/ between them). Needs Debian's dataset-fashion-mnist (or network access once).
set -euo pipefail
SCHEMES=${SCHEMES:-none,1d_learned,2d_sin,rel_bias,cpb,rope_axial,rope_mixed,cpe}
SEEDS=${SEEDS:-0,1,2}
LOGS=${LOGS:-logs}
STUDY=$LOGS/fmnist_cpu
FINETUNED=$LOGS/fmnist_finetune
SIZES="[28,42,56]"                          # 1x, 1.5x, 2x of the 28 px training size
TWO_MODES=" 1d_sin 2d_sin rope_axial rope_mixed "  # schemes with an extrapolate/interpolate choice
QUIET="trainer.enable_progress_bar=false"

finished() { compgen -G "$1/version_*/results.json" > /dev/null; }
best() { ls "$1"/version_*/checkpoints/best-*.ckpt | tail -n 1; }
say() { echo "[study $(date +%H:%M:%S)] $*"; }

train() {
  local seed pos run
  for seed in ${SEEDS//,/ }; do          # seed-major: every scheme has a result before any has three
    for pos in ${SCHEMES//,/ }; do
      run=$STUDY/${pos}_fashion_mnist_28px_seed$seed
      if finished "$run"; then say "skip $run (finished)"; continue; fi
      say "train $run"
      python train.py experiment=fmnist_cpu pos="$pos" seed="$seed" paths.log_dir="$LOGS" $QUIET
    done
  done
}

transfer() {
  local run mode out
  for run in "$STUDY"/*_seed*; do
    finished "$run" || continue
    for mode in default interpolate; do
      [ "$mode" = default ] || [[ $TWO_MODES == *" $(basename "$run" | sed 's/_fashion_mnist.*//') "* ]] || continue
      out=$run/transfer_$mode
      if [ -f "$out/resolution.csv" ]; then say "skip $out"; continue; fi
      say "evaluate $run ($mode)"
      python -m vitpos.evaluate ckpt="$(best "$run")" img_sizes="$SIZES" out="$out" \
        $([ "$mode" = default ] || echo resize_mode=$mode)
    done
  done
}

finetune() {
  local run name
  for run in "$STUDY"/*_seed*; do
    finished "$run" || continue
    name=$(basename "$run")
    if finished "$FINETUNED/${name/_28px_/_56px_from_28px_}"; then say "skip fine-tune of $name"; continue; fi
    say "fine-tune $run at 56 px"
    python train.py experiment=fmnist_finetune pos="${name%%_fashion_mnist*}" seed="${name##*_seed}" \
      finetune_from="$(best "$run")" paths.log_dir="$LOGS" $QUIET
  done
}

tables() {
  python -m vitpos.compare "$STUDY" out=docs/results/fmnist_cpu
  if [ -d "$FINETUNED" ]; then python -m vitpos.compare "$FINETUNED" out=docs/results/fmnist_finetune; fi
}

case ${1:-all} in
  train) train ;;
  transfer) transfer ;;
  finetune) finetune ;;
  tables) tables ;;
  all) train; transfer; finetune; tables ;;
  *) echo "error: unknown step '${1}'; use one of train, transfer, finetune, tables, all" >&2; exit 2 ;;
esac
