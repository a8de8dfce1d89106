#!/usr/bin/env bash
# The positional-encoding studies of docs/RESULTS.md, resumable. Run from the repository root:
#   bash scripts/study.sh runs       # SCHEMES x SEEDS: train with the study's recipe, then evaluate at
#                                    # 1x/1.5x/2x with no fine-tune (both modes where a scheme has two)
#   bash scripts/study.sh finetune   # a short fine-tune at 2x of every finished run (FINETUNE_SEEDS)
#   bash scripts/study.sh mixed      # MIXED_SCHEMES x SEEDS trained at each list of MIXED_SIZES (one size per
#                                    # step, tokens per step capped at a 1x step's); fmnist: evaluated at MIXED_EVAL
#                                    # in the scheme's default mode, their single-size twins at 20 px too
#   bash scripts/study.sh fuzzy      # FUZZY_SCHEMES x SEEDS trained with fuzzy positions (pos.fuzzy=true),
#                                    # evaluated as `runs` evaluates
#   bash scripts/study.sh extrapolation  # every finished run of `runs`, `fuzzy`, `mixed` at EXTRAP_SIZES (1x..3x) with
#                                    # every resize mode of its scheme, each without and with attn_temperature=log
#                                    # (evaluate resize_mode=all), on EXTRAP_LIMIT test images (default 2000, the
#                                    # same random ones every time)
#   bash scripts/study.sh tables     # docs/results/<study>*/ from the logs, and the logs' light files
#                                    # (no checkpoints) archived to docs/results/study_logs/
#   bash scripts/study.sh all        # seed by seed: runs, fuzzy, (cifar10) mixed, extrapolation, finetune; then tables
# DATASET picks the study:
#   cifar10 (default)  experiment=cifar10_study at 32 px, evaluated at 32/48/64 px, fine-tuned at 64 px;
#                      reads CIFAR-10 from CIFAR10_ROOT (data.root: an archive, folder or image tree of it)
#                      or finds it in data/; logs and checkpoints in LOGS (default ~/vitpos-study, outside
#                      the checkout, so a new checkout continues the study)
#   fmnist             experiment=fmnist_cpu at 28 px, evaluated at 28/44/56 px, fine-tuned at 56 px
#                      (Debian's dataset-fashion-mnist); LOGS default logs/
# Each step whose result exists (a run's results.json, an evaluation's resolution.csv) is skipped, and
# a run whose checkpoint is gone is trained again, so the study can stop at any point and continue
# later, or be spread over machines with SEEDS= or SCHEMES= (copy LOGS between them).
# A study run uses 2 processes (both cores of a 2-core CPU): one study.sh at a time.
set -euo pipefail
DATASET=${DATASET:-cifar10}
case $DATASET in
  cifar10)
    SCHEMES=${SCHEMES:-none,1d_learned,2d_learned,2d_sin,rel_bias,rel_shaw,cpb,rope_axial,rope_mixed,cpe}
    EXPERIMENT=cifar10_study; FT_EXPERIMENT=cifar10_finetune; RUN_TAG=cifar10_32px; FT_TAG=cifar10_64px_from_32px
    SIZES="[32,48,64]"    # 1x (8x8 grid), 1.5x (12x12), 2x (16x16)
    EXTRAP_SIZES="[32,48,64,96]"    # 1x, 1.5x, 2x, 3x (24x24)
    MIXED_SCHEMES=${MIXED_SCHEMES:-2d_sin,rope_mixed,1d_learned}
    MIXED_SIZES=${MIXED_SIZES:-"[32,48,64]"}    # 1x..2x; the training-free methods' 1x..3x is the comparison
    MIXED_EVAL=""                   # the mixed runs and their twins are evaluated by `extrapolation`
    TWIN_EVAL=""
    LOGS=${LOGS:-$HOME/vitpos-study}
    DATA_ARGS=${CIFAR10_ROOT:+data.root=$CIFAR10_ROOT} ;;
  fmnist)
    SCHEMES=${SCHEMES:-none,1d_learned,2d_sin,rel_bias,cpb,rope_axial,rope_mixed,cpe}
    EXPERIMENT=fmnist_cpu; FT_EXPERIMENT=fmnist_finetune; RUN_TAG=fashion_mnist_28px; FT_TAG=fashion_mnist_56px_from_28px
    SIZES="[28,44,56]"    # 1x (7x7 grid), 1.57x (11x11: 42 px is no multiple of the patch), 2x (14x14)
    EXTRAP_SIZES="[28,44,56,84]"    # 1x, 1.57x, 2x, 3x
    MIXED_SCHEMES=${MIXED_SCHEMES:-2d_sin,1d_learned,rel_bias,cpb,rope_mixed,cpe}
    # 0.71x..1.57x of 28 px, and the same extended to 2x
    MIXED_SIZES=${MIXED_SIZES:-"[20,28,36,44] [20,28,36,44,56]"}
    MIXED_EVAL="[20,28,44,56]"    # 0.71x, 1x, 1.57x, 2x
    TWIN_EVAL="[20]"              # the twins' 28/44/56 px results are in their transfer_default/
    LOGS=${LOGS:-logs}
    DATA_ARGS= ;;
  *) echo "error: DATASET=$DATASET is not a study; use DATASET=cifar10 or DATASET=fmnist" >&2; exit 2 ;;
esac
SEEDS=${SEEDS:-0,1,2}
FINETUNE_SEEDS=${FINETUNE_SEEDS:-$SEEDS}
FUZZY_SCHEMES=${FUZZY_SCHEMES:-2d_sin,rope_mixed,1d_learned}
EXTRAP_LIMIT=${EXTRAP_LIMIT:-2000}  # 3x costs ~9x the tokens of 1x per image: a fixed random fifth of the test split
read -ra MIXED_LISTS <<< "$MIXED_SIZES"    # split on spaces without globbing the brackets
STUDY=$LOGS/$EXPERIMENT
FINETUNED=$LOGS/$FT_EXPERIMENT
TWO_MODES=" 1d_sin 2d_sin rope_axial rope_mixed "   # schemes with an extrapolate/interpolate choice
QUIET="trainer.enable_progress_bar=false callbacks.figures=null"

# a finished run: results.json and its best checkpoint (a run whose checkpoint is gone is trained again)
finished() { compgen -G "$1/version_*/results.json" > /dev/null && compgen -G "$1/version_*/checkpoints/best-*.ckpt" > /dev/null; }
# shellcheck disable=SC2012  # run folders and checkpoints: names vitpos writes
latest() { ls -d "$1"/version_* 2> /dev/null | sort -V | tail -n 1; }
# continue an interrupted run (its newest version has last.ckpt and no results.json) instead of restarting it
resume_arg() { local v; v=$(latest "$1"); [ -n "$v" ] && [ -f "$v/checkpoints/last.ckpt" ] && [ ! -f "$v/results.json" ] && echo resume=true || true; }
# the newest best checkpoint of the newest version (a best file is written only when validation improves;
# an interrupted run can leave an earlier one behind); sort -V orders version_9 < version_10, epoch9 < epoch12
# shellcheck disable=SC2012  # run folders and checkpoints: names vitpos writes
best() { ls "$1"/version_*/checkpoints/best-*.ckpt | sort -V | tail -n 1; }
say() { echo "[study $(date +%H:%M:%S)] $*"; }

evaluate() {  # run folder, scheme[, sizes, output prefix, modes]: no-fine-tune transfer, logged into the run's TensorBoard
  local version mode sizes=${3:-$SIZES} prefix=${4:-transfer} modes=${5:-default interpolate}
  version=$(dirname "$(dirname "$(best "$1")")")
  for mode in $modes; do
    [ "$mode" = default ] || [[ $TWO_MODES == *" $2 "* ]] || continue
    [ -f "$version/${prefix}_$mode/resolution.csv" ] && continue
    say "evaluate $version ($mode, $sizes)"
    # shellcheck disable=SC2046  # no resize_mode argument for the default mode
    python -m vitpos.evaluate ckpt="$(best "$1")" img_sizes="$sizes" \
      out="$version/${prefix}_$mode" $([ "$mode" = default ] || echo "resize_mode=$mode")
  done
}

runs() {
  local seed pos run
  for seed in ${SEEDS//,/ }; do          # seed-major: every scheme has a result before any has three
    for pos in ${SCHEMES//,/ }; do
      run=$STUDY/${pos}_${RUN_TAG}_seed$seed
      if ! finished "$run"; then
        say "train $run"
        # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $(resume_arg)
        python train.py experiment=$EXPERIMENT pos="$pos" seed="$seed" paths.log_dir="$LOGS" $DATA_ARGS $QUIET \
          $(resume_arg "$run")
      fi
      evaluate "$run" "$pos"
    done
  done
}

fuzzy() {
  local seed pos run
  for seed in ${SEEDS//,/ }; do
    for pos in ${FUZZY_SCHEMES//,/ }; do
      run=$STUDY/${pos}_fuzzy_${RUN_TAG}_seed$seed
      if ! finished "$run"; then
        say "train $run"
        # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $(resume_arg)
        python train.py experiment=$EXPERIMENT pos="$pos" pos.fuzzy=true seed="$seed" paths.log_dir="$LOGS" \
          $DATA_ARGS $QUIET $(resume_arg "$run")
      fi
      evaluate "$run" "$pos"
    done
  done
}

extrapolation() {  # every conversion of a run into <version>/extrapolation/ (TensorBoard: resolution/test_acc_[<mode>_]t<temperature>)
  local seed run version
  for seed in ${SEEDS//,/ }; do
    for run in $(for pos in ${SCHEMES//,/ }; do echo "$STUDY/${pos}_${RUN_TAG}_seed$seed"; done) \
               $(for pos in ${FUZZY_SCHEMES//,/ }; do echo "$STUDY/${pos}_fuzzy_${RUN_TAG}_seed$seed"; done) \
               $(for sizes in "${MIXED_LISTS[@]}"; do for pos in ${MIXED_SCHEMES//,/ }; do
                   echo "$STUDY/${pos}_${RUN_TAG}_$(mixed_tag "$sizes")_seed$seed"; done; done); do
      finished "$run" || continue
      version=$(dirname "$(dirname "$(best "$run")")")
      [ -f "$version/extrapolation/resolution.csv" ] && continue
      say "extrapolate $version (every conversion, $EXTRAP_SIZES)"
      python -m vitpos.evaluate ckpt="$(best "$run")" img_sizes="$EXTRAP_SIZES" resize_mode=all \
        limit="$EXTRAP_LIMIT" out="$version/extrapolation"
    done
  done
}

finetune() {
  local seed pos run
  for seed in ${FINETUNE_SEEDS//,/ }; do
    for pos in ${SCHEMES//,/ }; do
      run=$STUDY/${pos}_${RUN_TAG}_seed$seed
      finished "$run" || continue
      finished "$FINETUNED/${pos}_${FT_TAG}_seed$seed" && continue
      say "fine-tune $run at 2x"
      # shellcheck disable=SC2086  # none or several words: $DATA_ARGS, $QUIET
      python train.py experiment=$FT_EXPERIMENT pos="$pos" seed="$seed" paths.log_dir="$LOGS" $DATA_ARGS $QUIET \
        finetune_from="$(best "$run")"
    done
  done
}

mixed_tag() { echo "train$(echo "$1" | tr -d '[]' | tr , -)px"; }    # the run-name tag train.py gives these sizes

mixed() {
  local sizes seed pos run
  for sizes in "${MIXED_LISTS[@]}"; do
    for seed in ${SEEDS//,/ }; do
      for pos in ${MIXED_SCHEMES//,/ }; do
        run=$STUDY/${pos}_${RUN_TAG}_$(mixed_tag "$sizes")_seed$seed
        if ! finished "$run"; then
          say "train $run"
          # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $(resume_arg)
          python train.py experiment=$EXPERIMENT pos="$pos" seed="$seed" paths.log_dir="$LOGS" $DATA_ARGS $QUIET \
            train_img_sizes="$sizes" batch_by_tokens=true $(resume_arg "$run")
        fi
        [ -z "$MIXED_EVAL" ] || evaluate "$run" "$pos" "$MIXED_EVAL" mixed_eval default
        [ -z "$TWIN_EVAL" ] || ! finished "$STUDY/${pos}_${RUN_TAG}_seed$seed" ||
          evaluate "$STUDY/${pos}_${RUN_TAG}_seed$seed" "$pos" "$TWIN_EVAL" mixed_eval default
      done
    done
  done
}

tables() {
  local archive=docs/results/study_logs study
  mkdir -p "$archive"
  for study in $EXPERIMENT $FT_EXPERIMENT; do
    [ -d "$LOGS/$study" ] || continue
    rm -rf "${archive:?}/$study"
    (cd "$LOGS" && find "$study" -path '*/checkpoints' -prune -o -type f -print | grep -v -e '\.ckpt$' -e '\.png$' |
       tar -cf - -T -) | tar -xf - -C "$archive"
    python -m vitpos.compare "$archive/$study" out="docs/results/$study"
  done
}

case ${1:-all} in
  runs) runs ;;
  finetune) finetune ;;
  mixed) mixed ;;
  tables) tables ;;
  fuzzy) fuzzy ;;
  extrapolation) extrapolation ;;
  all) for seed in ${SEEDS//,/ }; do
         SEEDS=$seed FINETUNE_SEEDS=$seed
         runs; fuzzy; [ "$DATASET" = fmnist ] || mixed; extrapolation; finetune
       done
       tables ;;
  *) echo "error: unknown step '${1}'; use one of runs, finetune, fuzzy, extrapolation, mixed, tables, all" >&2
     exit 2 ;;
esac
