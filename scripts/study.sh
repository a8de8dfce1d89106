#!/usr/bin/env bash
# The positional-encoding studies of docs/RESULTS.md, resumable across sessions and machines. Run from
# the repository root:
#   bash scripts/study.sh runs     # SCHEMES x SEEDS, the study's recipe
#   bash scripts/study.sh fuzzy    # FUZZY_SCHEMES x SEEDS trained with fuzzy positions (pos.fuzzy=true)
#   bash scripts/study.sh mixed    # MIXED_SCHEMES x MIXED_SEEDS trained at each list of MIXED_SIZES (one size
#                                  # per step, tokens per step capped at a 1x step's)
#   bash scripts/study.sh long     # cifar10: LONG_SCHEMES x LONG_SEEDS on the longer LONG_EXPERIMENT (whether
#                                  # the ranking moves with the training budget; test accuracy only)
#   bash scripts/study.sh published  # cifar10: PUBLISHED_SCHEMES x PUBLISHED_SEEDS on the published ablation's own
#                                  # recipe, 200 epochs (experiment=cifar10_published; test accuracy only)
#   bash scripts/study.sh native   # cifar10, train low, infer native: NATIVE_SCHEMES trained at each size of NATIVE_SIZES
#                                  # (`<size>:<seeds>` words; default 16 px seeds 0-2, 24 px seed 0) on the images
#                                  # downsampled once, evaluated at 16/24/32 px native with every conversion,
#                                  # seeds in NATIVE_FINETUNE_SEEDS fine-tuned at 32 px; NATIVE_RRC_SCHEMES twins
#                                  # trained with data.augment=rrc at NATIVE_RRC_SIZES (16 px, seed 0); runs in
#                                  # LOGS/native/ and ARCHIVE/native/, apart from the 32 px study's
#   bash scripts/study.sh curriculum  # cifar10: CURRICULUM_SCHEMES x CURRICULUM_SEEDS on the study recipe under the
#                                  # resolution curriculum CURRICULUM (default 5 epochs each at 16, 24, 32 px),
#                                  # evaluated at 32/48/64 px: which schemes lose accuracy to it, beside the runs
#   bash scripts/study.sh park     # each interrupted run in LOGS (last.ckpt, no results.json) copied to PARKED,
#                                  # checkpoints included, so a run of many hours continues on another machine
#   bash scripts/study.sh tables   # docs/results/<study>*/ from the archived runs (vitpos.compare; cifar10:
#                                  # ranking.md sets the study beside the published ablation in RESULTS/published/;
#                                  # cifar10_published_beside_study/ the two recipes' curves for its schemes;
#                                  # the native study's in cifar10_native/ and cifar10_native_finetune/)
#   bash scripts/study.sh all      # seed by seed: runs, fuzzy, mixed; then long, published, native, curriculum, then tables
#   bash scripts/study.sh status   # each run of `all`, in its order: done, trained, interrupted or to do (reads only)
# Each run goes through every step that needs its checkpoint, one after the other:
#   train -> evaluate at SIZES with no fine-tune (both modes where a scheme has two; runs, fuzzy)
#         -> every conversion of its scheme at EXTRAP_SIZES (cifar10: 1x..3x), each without and with
#            attn_temperature=log (evaluate resize_mode=all), on EXTRAP_LIMIT test images (default
#            2000, the same random ones every time)
#         -> a short fine-tune at 2x (runs, seeds in FINETUNE_SEEDS); fmnist: MIXED_EVAL/TWIN_EVAL sizes
#            (native: every conversion at NATIVE_EVAL on EXTRAP_LIMIT test images, then a fine-tune at the native 32 px)
#         -> its light files (logs, results, CSVs: no checkpoints) archived to ARCHIVE
# ARCHIVE (default docs/results/study_logs, committed with the results) is what outlives a machine:
# a run archived with every output is done and needs no checkpoint; any other run is continued from
# LOGS (an interrupted one resumes from its last.ckpt, a missing evaluation is run) or, where its
# checkpoint is gone, trained again. So the study can stop at any point and continue on another day
# or machine from a checkout that holds the archive, or be spread over machines with SEEDS= or SCHEMES=.
# A run too long for one sitting is parked: stop the study (SIGTERM: the run saves last.ckpt), then
# `park` and commit PARKED (default docs/results/study_parked); a run missing from LOGS continues from
# its parked copy, which its archive replaces once it is done.
# DATASET picks the study:
#   cifar10 (default)  experiment=cifar10_study at 32 px, evaluated at 32/48/64 px, fine-tuned at 64 px;
#                      reads CIFAR-10 from CIFAR10_ROOT (data.root: an archive, folder or image tree of it)
#                      or finds it in data/; checkpoints in LOGS (default ~/vitpos-study, outside the checkout)
#   fmnist             experiment=fmnist_cpu at 28 px, evaluated at 28/44/56 px, fine-tuned at 56 px
#                      (Debian's dataset-fashion-mnist); LOGS default logs/
# RESULTS (default docs/results) is where `tables` writes and ARCHIVE lies, so a study can run from
# another checkout of the same code (RESULTS=<checkout>/docs/results) while this one is edited.
# A study run uses 2 processes (both cores of a 2-core CPU): one study.sh trains into a LOGS at a time.
# RUNS_AT_ONCE=2 trains two runs at once instead, each as one process of one thread with the recipe's global
# batch (the same optimisation: tests/test_ddp.py). It pays where a step is short, e.g. the native study's
# 16 px runs (docs/PERFORMANCE.md); a run interrupted in one layout resumes in it.
set -euo pipefail
# every scheme of configs/pos/ (run from the repository root), comma-separated
every_scheme() { local file names=(); for file in configs/pos/*.yaml; do file=${file##*/}; names+=("${file%.yaml}"); done; (IFS=,; echo "${names[*]}"); }
DATASET=${DATASET:-cifar10}
case $DATASET in
  cifar10)
    SCHEMES=${SCHEMES:-none,1d_learned,2d_learned,2d_sin,rel_bias,rel_shaw,cpb,rope_axial,rope_mixed,cpe}
    EXPERIMENT=cifar10_study; FT_EXPERIMENT=cifar10_finetune; RUN_TAG=cifar10_32px; FT_TAG=cifar10_64px_from_32px
    SIZES="[32,48,64]"    # 1x (8x8 grid), 1.5x (12x12), 2x (16x16)
    EXTRAP_SIZES=${EXTRAP_SIZES-"[32,48,64,96]"}    # 1x, 1.5x, 2x, 3x (24x24)
    MIXED_SCHEMES=${MIXED_SCHEMES:-2d_sin,rope_mixed,1d_learned}
    MIXED_SIZES=${MIXED_SIZES:-"[32,48,64]"}    # 1x..2x; the training-free methods' 1x..3x is the comparison
    # seed 0 only: each twin is read against the seed spread of the training-free conversions (docs/RESULTS.md)
    MIXED_SEEDS=${MIXED_SEEDS:-0}
    MIXED_EVAL=""                   # the mixed runs and their twins: by the extrapolation step
    TWIN_EVAL=""
    LOGS=${LOGS:-$HOME/vitpos-study}
    PUBLISHED=published/cifar10_small_vit_ablation.csv    # in RESULTS: the ablation the study is read beside
    LONG_EXPERIMENT=cifar10_cpu    # 35 epochs instead of 15, for three of the published ablation's schemes
    LONG_SCHEMES=${LONG_SCHEMES-none,1d_learned,rel_shaw}
    PUBLISHED_EXPERIMENT=cifar10_published    # the published ablation's recipe: 200 epochs, RandAugment, test every epoch
    PUBLISHED_SCHEMES=${PUBLISHED_SCHEMES-none,1d_learned,2d_sin,rel_shaw,rope_axial}
    # the native study: trained on the images downsampled once to a size below 32 px, evaluated up to their
    # native 32 px (docs/resolution.md); every scheme, 3 seeds at 16 px (2x to native), one at 24 px (1.33x)
    NATIVE_SCHEMES=${NATIVE_SCHEMES-$(every_scheme)}
    NATIVE_SIZES=${NATIVE_SIZES-"16:0,1,2 24:0"}    # <training size>:<seeds> words
    NATIVE_EVAL="[16,24,32]"; NATIVE_SIZE=32; NATIVE_TAG=cifar10    # the run names' data tag
    NATIVE_FINETUNE_SEEDS=${NATIVE_FINETUNE_SEEDS-0}
    # the scale-augmentation twins (data.augment=rrc), one scheme per way a grid is converted: recomputed absolute
    # positions (2d_sin), rotations with learned frequencies (rope_mixed), a bias MLP of normalised offsets that
    # needs no conversion (cpb), distance penalties built to extrapolate (lookhere); seed 0, read against the
    # seed spread of their plain runs at 16 px
    NATIVE_RRC_SCHEMES=${NATIVE_RRC_SCHEMES-2d_sin,rope_mixed,cpb,lookhere}
    NATIVE_RRC_SIZES=${NATIVE_RRC_SIZES-"16:0"}
    # the study recipe under a resolution curriculum (the same 15 epochs): [size, epochs] phases ending at 32 px
    CURRICULUM_SCHEMES=${CURRICULUM_SCHEMES-$SCHEMES}
    CURRICULUM=${CURRICULUM:-"[[16,5],[24,5],[32,5]]"}
    DATA_ARGS=${CIFAR10_ROOT:+data.root=$CIFAR10_ROOT} ;;
  fmnist)
    SCHEMES=${SCHEMES:-none,1d_learned,2d_sin,rel_bias,cpb,rope_axial,rope_mixed,cpe}
    EXPERIMENT=fmnist_cpu; FT_EXPERIMENT=fmnist_finetune; RUN_TAG=fashion_mnist_28px; FT_TAG=fashion_mnist_56px_from_28px
    SIZES="[28,44,56]"    # 1x (7x7 grid), 1.57x (11x11: 42 px is no multiple of the patch), 2x (14x14)
    EXTRAP_SIZES=${EXTRAP_SIZES-}    # none unless asked for (the study predates it): [28,44,56,84] is 1x..3x
    MIXED_SCHEMES=${MIXED_SCHEMES:-2d_sin,1d_learned,rel_bias,cpb,rope_mixed,cpe}
    # 0.71x..1.57x of 28 px, and the same extended to 2x
    MIXED_SIZES=${MIXED_SIZES:-"[20,28,36,44] [20,28,36,44,56]"}
    MIXED_EVAL="[20,28,44,56]"    # 0.71x, 1x, 1.57x, 2x
    TWIN_EVAL="[20]"              # the twins' 28/44/56 px results are in their transfer_default/
    LOGS=${LOGS:-logs}
    PUBLISHED=
    LONG_EXPERIMENT=
    LONG_SCHEMES=${LONG_SCHEMES-}
    PUBLISHED_EXPERIMENT=
    PUBLISHED_SCHEMES=
    NATIVE_SCHEMES=; NATIVE_SIZES=; NATIVE_RRC_SCHEMES=; NATIVE_RRC_SIZES=    # the native study is cifar10's
    NATIVE_FINETUNE_SEEDS=; NATIVE_EVAL=; NATIVE_SIZE=; NATIVE_TAG=
    CURRICULUM_SCHEMES=; CURRICULUM=    # the curriculum study is cifar10's
    DATA_ARGS= ;;
  *) echo "error: DATASET=$DATASET is not a study; use DATASET=cifar10 or DATASET=fmnist" >&2; exit 2 ;;
esac
SEEDS=${SEEDS:-0,1,2}
MIXED_SEEDS=${MIXED_SEEDS:-$SEEDS}    # those of SEEDS the mixed-resolution twins train (cifar10: seed 0)
LONG_SEEDS=${LONG_SEEDS:-0}
PUBLISHED_SEEDS=${PUBLISHED_SEEDS:-0}
CURRICULUM_SEEDS=${CURRICULUM_SEEDS:-0}
FINETUNE_SEEDS=${FINETUNE_SEEDS:-$SEEDS}
FUZZY_SCHEMES=${FUZZY_SCHEMES:-2d_sin,rope_mixed,1d_learned}
EXTRAP_LIMIT=${EXTRAP_LIMIT:-2000}  # 3x costs ~9x the tokens of 1x per image: a fixed random fifth of the test split
RUNS_AT_ONCE=${RUNS_AT_ONCE:-1}    # runs trained at the same time, each one process (1: each run uses every core)
STATUS=""    # set by the status step: each run reports its state instead of running
RESULTS=${RESULTS:-docs/results}
ARCHIVE=${ARCHIVE:-$RESULTS/study_logs}
PARKED=${PARKED:-$RESULTS/study_parked}

# every setting checked before anything runs: one `error:` line and exit 2, nothing trained or written
refuse() { echo "error: $*" >&2; exit 2; }
SCHEME_NAMES=$(for config in "$(dirname "$0")"/../configs/pos/*.yaml; do basename "$config" .yaml; done | paste -sd, -)
check_seeds() {  # variable name: comma-separated integers 0..2**32-1 (what numpy's RNG takes)
  local item items
  [[ ${!1} =~ ^([0-9]+(,[0-9]+)*)?$ ]] || refuse "$1=${!1} must list seeds 0..4294967295 separated by commas, e.g. $1=0,1,2"
  IFS=, read -ra items <<< "${!1}"
  for item in "${items[@]}"; do
    if ! [[ $item =~ ^[0-9]{1,10}$ ]] || (( 10#$item >= 4294967296 )); then
      refuse "$1=${!1} must list seeds 0..4294967295 separated by commas, e.g. $1=0,1,2 (seed $item is too large)"
    fi
  done
}
check_schemes() {  # variable name: comma-separated scheme names of configs/pos/
  local item items
  [[ ${!1} =~ ^([A-Za-z0-9_]+(,[A-Za-z0-9_]+)*)?$ ]] || refuse "$1=${!1} must list schemes separated by commas, e.g. $1=none,2d_sin"
  IFS=, read -ra items <<< "${!1}"
  for item in "${items[@]}"; do
    [[ ,$SCHEME_NAMES, == *",$item,"* ]] || refuse "$1=${!1} names no scheme '$item'; the schemes are $SCHEME_NAMES"
  done
}
check_sizes() {  # variable name: lists of positive integers in brackets, separated by spaces
  [[ ${!1} =~ ^(\[[1-9][0-9]*(,[1-9][0-9]*)*\]( |$))*$ ]] ||
    refuse "$1=${!1} must be lists of positive sizes in brackets, separated by spaces, e.g. $1=[32,48,64]"
}
for variable in SEEDS MIXED_SEEDS LONG_SEEDS PUBLISHED_SEEDS FINETUNE_SEEDS CURRICULUM_SEEDS; do check_seeds "$variable"; done
[ -n "$SEEDS" ] || refuse "SEEDS is empty; list the seeds to train, e.g. SEEDS=0,1,2"
for variable in SCHEMES FUZZY_SCHEMES MIXED_SCHEMES LONG_SCHEMES PUBLISHED_SCHEMES CURRICULUM_SCHEMES; do check_schemes "$variable"; done
# [[size,epochs],...]: train.py checks the sizes and that the epochs add up to the recipe's
[ -z "$CURRICULUM" ] || [[ $CURRICULUM =~ ^\[(\[[1-9][0-9]*,[1-9][0-9]*\],)*\[[1-9][0-9]*,[1-9][0-9]*\]\]$ ]] ||
  refuse "CURRICULUM=$CURRICULUM must be [size,epochs] phases in brackets, e.g. CURRICULUM=[[16,5],[24,5],[32,5]]"
for variable in EXTRAP_SIZES MIXED_SIZES; do check_sizes "$variable"; done
check_native_sizes() {  # variable name: <training size>:<seeds> words, each size below the data's own
  local entry
  for entry in ${!1}; do
    if ! [[ $entry =~ ^([1-9][0-9]*):[0-9]+(,[0-9]+)*$ ]] || (( BASH_REMATCH[1] >= NATIVE_SIZE )); then
      refuse "$1=${!1} must be <size>:<seeds> words with sizes below the native ${NATIVE_SIZE}px, e.g. $1=\"16:0,1,2 24:0\""
    fi
  done
}
for variable in NATIVE_SIZES NATIVE_RRC_SIZES; do check_native_sizes "$variable"; done
for variable in NATIVE_SCHEMES NATIVE_RRC_SCHEMES; do check_schemes "$variable"; done
check_seeds NATIVE_FINETUNE_SEEDS
[[ $EXTRAP_LIMIT =~ ^[1-9][0-9]{0,8}$ ]] ||
  refuse "EXTRAP_LIMIT=$EXTRAP_LIMIT must be a positive number of test images, e.g. EXTRAP_LIMIT=2000"
if ! [[ $RUNS_AT_ONCE =~ ^[1-9][0-9]{0,3}$ ]] || (( RUNS_AT_ONCE > $(nproc) )); then
  refuse "RUNS_AT_ONCE=$RUNS_AT_ONCE must be a number of runs from 1 to the $(nproc) cores, e.g. RUNS_AT_ONCE=2"
fi
[ -z "${CIFAR10_ROOT:-}" ] || [ -e "$CIFAR10_ROOT" ] ||
  refuse "CIFAR10_ROOT=$CIFAR10_ROOT does not exist; pass the CIFAR-10 archive, folder or image tree, or unset it"
case ${1:-all} in runs|fuzzy|mixed|long|published|native|curriculum|park|tables|all|status) ;;
  *) refuse "unknown step '${1}'; use one of runs, fuzzy, mixed, long, published, native, curriculum, park, tables, all, status" ;;
esac
read -ra MIXED_LISTS <<< "$MIXED_SIZES"    # split on spaces without globbing the brackets
TWO_MODES=" 1d_sin 2d_sin rope_axial rope_mixed "   # schemes with an extrapolate/interpolate choice
QUIET="trainer.enable_progress_bar=false callbacks.figures=null"

# a trained run in LOGS: results.json and its best checkpoint (a run whose checkpoint is gone is trained again)
finished() { compgen -G "$1/version_*/results.json" > /dev/null && compgen -G "$1/version_*/checkpoints/best-*.ckpt" > /dev/null; }
# shellcheck disable=SC2012  # run folders and checkpoints: names vitpos writes
latest() { ls -d "$1"/version_* 2> /dev/null | sort -V | tail -n 1; }
# continue an interrupted run (its newest version has last.ckpt and no results.json) instead of restarting it
resume_arg() { local v; v=$(latest "$1"); [ -n "$v" ] && [ -f "$v/checkpoints/last.ckpt" ] && [ ! -f "$v/results.json" ] && echo resume=true || true; }
# the newest best checkpoint of the newest version (a best file is written only when validation improves;
# an interrupted run can leave an earlier one behind); sort -V orders version_9 < version_10, epoch9 < epoch12
# shellcheck disable=SC2012  # run folders and checkpoints: names vitpos writes
best() { ls "$1"/version_*/checkpoints/best-*.ckpt | sort -V | tail -n 1; }
version_of() { dirname "$(dirname "$(best "$1")")"; }    # the version folder that holds a run's best checkpoint
# the process layout a run trains with: a resumed run's own (its config.yaml: it continues as it started);
# with RUNS_AT_ONCE > 1 a new run's is one process of the recipe's global batch; else the recipe's (no words)
layout() {  # experiment, run folder
  local saved=""
  [ -z "$(resume_arg "$2")" ] || saved=$(latest "$2")/config.yaml
  if [ -f "$saved" ]; then python scripts/process_layout.py saved "$saved"
  elif (( RUNS_AT_ONCE > 1 )); then python scripts/process_layout.py recipe "$1"; fi
}
# with RUNS_AT_ONCE > 1: true for the one copy that takes the run (mkdir is atomic); a lone study.sh takes all
claim() { [ -z "$WORKER" ] || mkdir "$CLAIMS/${1//\//%}" 2> /dev/null; }
WORKER=""    # with RUNS_AT_ONCE > 1: this copy's number, in its lines
say() { echo "[study $(date +%H:%M:%S)${WORKER:+ worker $WORKER}] $*"; }
two_modes() { [[ $TWO_MODES == *" $1 "* ]]; }
listed() { [[ ,$2, == *",$1,"* ]]; }    # item, comma-separated list

# the evaluations a finished run of this kind and scheme gets, one a line: <output folder> <sizes> [resize_mode];
# each leaves <version>/<output folder>/resolution.csv (and its accuracies in the run's TensorBoard)
evaluations() {  # kind (runs, fuzzy, mixed, long, published, native, native_rrc, curriculum), scheme
  [ "$1" != long ] && [ "$1" != published ] || return 0    # test accuracy at the training size only
  if [ "$1" = curriculum ]; then echo "transfer_default $SIZES"; return; fi    # beside the runs' own transfer_default
  if [ "$1" = native ] || [ "$1" = native_rrc ]; then    # every conversion, without and with log temperature
    echo "transfer_native $NATIVE_EVAL all"
    return
  fi
  if [ "$1" = mixed ]; then
    [ -z "$MIXED_EVAL" ] || echo "mixed_eval_default $MIXED_EVAL"
  else
    echo "transfer_default $SIZES"
    ! two_modes "$2" || echo "transfer_interpolate $SIZES interpolate"
    [ "$1" != runs ] || [ -z "$TWIN_EVAL" ] || ! listed "$2" "$MIXED_SCHEMES" || echo "mixed_eval_default $TWIN_EVAL"
  fi
  [ -z "$EXTRAP_SIZES" ] || echo "extrapolation $EXTRAP_SIZES all"    # every conversion, each without and with log temperature
}

archived() {  # run (relative to LOGS and ARCHIVE), evaluations...: its archived version has results.json and each one's
  local version line
  version=$(latest "$ARCHIVE/$1")
  [ -n "$version" ] && [ -f "$version/results.json" ] || return 1
  shift
  for line in "$@"; do [ -f "$version/${line%% *}/resolution.csv" ] || return 1; done
}

archive() {  # run (relative to LOGS): its best version's light files replace its archived ones
  local version
  version=$(version_of "$LOGS/$1")
  rm -rf "${ARCHIVE:?}/$1" && mkdir -p "$ARCHIVE"
  (cd "$LOGS" && find "$1/$(basename "$version")" -path '*/checkpoints' -prune -o -type f -print |
     grep -v -e '\.ckpt$' -e '\.png$' | tar -cf - -T -) | tar -xf - -C "$ARCHIVE"
  rm -rf "${PARKED:?}/$1"    # done: its parked copy is no longer needed
  say "archived $1 to $ARCHIVE"
}

unpark() {  # run (relative to LOGS and PARKED): a parked run that LOGS does not hold is copied back to continue there
  [ -d "$PARKED/$1" ] && [ -z "$(latest "$LOGS/$1")" ] || return 0
  mkdir -p "$LOGS/$1" && cp -r "$PARKED/$1"/version_* "$LOGS/$1"/
  say "unparked $1 from $PARKED"
}

park() {  # each interrupted run in LOGS, checkpoints and light files (no figures), replaces its parked copy
  local last version run
  while IFS= read -r last; do
    version=$(dirname "$(dirname "$last")")
    [ ! -f "$version/results.json" ] || continue
    run=${version#"$LOGS"/}; run=$(dirname "$run")
    [ "$version" = "$(latest "$LOGS/$run")" ] || continue    # its newest version only: the one resume continues
    rm -rf "${PARKED:?}/$run" && mkdir -p "$PARKED/$run"
    (cd "$LOGS" && find "$run/$(basename "$version")" -type f ! -name '*.png' -print | tar -cf - -T -) | tar -xf - -C "$PARKED"
    say "parked $run in $PARKED ($(du -sh "$PARKED/$run" | cut -f1))"
  done < <(find "$LOGS" -path '*/checkpoints/last.ckpt' 2> /dev/null | sort)
}

evaluate() {  # run folder, evaluations...: each one whose resolution.csv is missing
  local checkpoint version folder sizes mode line
  checkpoint=$(best "$1")
  version=$(dirname "$(dirname "$checkpoint")")
  shift
  for line in "$@"; do
    read -r folder sizes mode <<< "$line"
    [ -f "$version/$folder/resolution.csv" ] && continue
    if [ "$mode" = all ]; then
      say "extrapolate $version (every conversion, $sizes)"
      python -m vitpos.evaluate ckpt="$checkpoint" img_sizes="$sizes" resize_mode=all limit="$EXTRAP_LIMIT" \
        out="$version/$folder"
    else
      say "evaluate $version (${mode:-default}, $sizes)"
      python -m vitpos.evaluate ckpt="$checkpoint" img_sizes="$sizes" out="$version/$folder" ${mode:+"resize_mode=$mode"}
    fi
  done
}

study_run() {  # kind (runs, fuzzy, mixed, long, published, native, native_rrc, curriculum), scheme, seed[, training size(s)]:
              # the run, then each step that needs its checkpoint
  local kind=$1 pos=$2 seed=$3 sizes=${4:-} run finetuned="" args=() steps experiment=$EXPERIMENT log_dir=$LOGS
  local ft_args=() ft_size=2x
  case $kind in
    long) experiment=$LONG_EXPERIMENT; run=$experiment/${pos}_${RUN_TAG}_seed$seed ;;
    published) experiment=$PUBLISHED_EXPERIMENT; run=$experiment/${pos}_${RUN_TAG}_seed$seed ;;
    runs) run=$EXPERIMENT/${pos}_${RUN_TAG}_seed$seed ;;
    # named by its phases, so that another CURRICULUM is another run
    curriculum) run=$EXPERIMENT/${pos}_${RUN_TAG}_curriculum$(dashed "$CURRICULUM")_seed$seed
                args=(curriculum="$CURRICULUM" run_name="${run##*/}") ;;
    fuzzy) run=$EXPERIMENT/${pos}_fuzzy_${RUN_TAG}_seed$seed; args=(pos.fuzzy=true) ;;
    mixed) run=$EXPERIMENT/${pos}_${RUN_TAG}_$(mixed_tag "$sizes")_seed$seed
           args=(train_img_sizes="$sizes" batch_by_tokens=true) ;;
    # the native study's runs share LOGS/native/ (and ARCHIVE/native/), so the 32 px study's folders keep only its own
    native) log_dir=$LOGS/native; args=(img_size="$sizes")
            run=native/$EXPERIMENT/${pos}_${NATIVE_TAG}_${sizes}px_seed$seed
            ! listed "$seed" "$NATIVE_FINETUNE_SEEDS" ||
              finetuned=native/$FT_EXPERIMENT/${pos}_${NATIVE_TAG}_${NATIVE_SIZE}px_from_${sizes}px_seed$seed
            ft_size=${NATIVE_SIZE}px; ft_args=(img_size="$NATIVE_SIZE") ;;
    # the twins' run name says rrc (train.py's would be their plain runs'); no fine-tune: its recipe's standard
    # augmentation would replace the one the twin measures
    native_rrc) log_dir=$LOGS/native; run=native/$EXPERIMENT/${pos}_rrc_${NATIVE_TAG}_${sizes}px_seed$seed
                args=(img_size="$sizes" data.augment=rrc run_name="${run##*/}") ;;
  esac
  [ "$kind" != runs ] || ! listed "$seed" "$FINETUNE_SEEDS" || finetuned=$FT_EXPERIMENT/${pos}_${FT_TAG}_seed$seed
  mapfile -t steps < <(evaluations "$kind" "$pos")
  if archived "$run" "${steps[@]}" && { [ -z "$finetuned" ] || archived "$finetuned"; }; then
    [ -z "$STATUS" ] || report "done" "$run"
    return    # done: its results are in the archive
  fi
  if [ -n "$STATUS" ]; then
    if [ -d "$PARKED/$run" ] && [ -z "$(latest "$LOGS/$run")" ]; then report parked "$run" "(continues from $PARKED)"
    elif finished "$LOGS/$run"; then report trained "$run" "(in $LOGS: its evaluations, fine-tune or archive to run)"
    elif [ -n "$(resume_arg "$LOGS/$run")" ]; then report interrupted "$run" "(resumes from its last.ckpt in $LOGS)"
    else report "to do" "$run"; fi
    return
  fi
  claim "$run" || return 0    # another copy trains it
  unpark "$run"
  if ! finished "$LOGS/$run"; then
    say "train $LOGS/$run"
    # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $(resume_arg), $(layout)
    python train.py experiment="$experiment" pos="$pos" seed="$seed" paths.log_dir="$log_dir" $DATA_ARGS $QUIET "${args[@]}" \
      $(resume_arg "$LOGS/$run") $(layout "$experiment" "$LOGS/$run")
    finished "$LOGS/$run" || { echo "error: training left no results.json and best checkpoint in $LOGS/$run" >&2; exit 1; }
  fi
  evaluate "$LOGS/$run" "${steps[@]}"
  if [ -n "$finetuned" ] && ! archived "$finetuned"; then
    if ! finished "$LOGS/$finetuned"; then
      say "fine-tune $LOGS/$run at $ft_size"
      # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $(layout)
      python train.py experiment=$FT_EXPERIMENT pos="$pos" seed="$seed" paths.log_dir="$log_dir" $DATA_ARGS $QUIET \
        "${ft_args[@]}" finetune_from="$(best "$LOGS/$run")" $(layout "$FT_EXPERIMENT" "$LOGS/$finetuned")
    fi
    archive "$finetuned"
  fi
  archive "$run"
}

declare -A COUNT=()
report() {  # state, run[, note]: one line of `status`
  printf '%-12s %s%s\n' "$1" "$2" "${3:+ $3}"
  COUNT[$1]=$(( ${COUNT[$1]:-0} + 1 ))
}

dashed() { tr -d '[]' <<< "$1" | tr , -; }    # [[16,5],[32,5]] -> 16-5-32-5: a list in a run's name
mixed_tag() { echo "train$(dashed "$1")px"; }    # the run-name tag train.py gives these sizes

runs() { local seed pos; for seed in ${SEEDS//,/ }; do for pos in ${SCHEMES//,/ }; do study_run runs "$pos" "$seed"; done; done; }
fuzzy() { local seed pos; for seed in ${SEEDS//,/ }; do for pos in ${FUZZY_SCHEMES//,/ }; do study_run fuzzy "$pos" "$seed"; done; done; }
long() { local seed pos; for seed in ${LONG_SEEDS//,/ }; do for pos in ${LONG_SCHEMES//,/ }; do study_run long "$pos" "$seed"; done; done; }
curriculum() { local seed pos; for seed in ${CURRICULUM_SEEDS//,/ }; do for pos in ${CURRICULUM_SCHEMES//,/ }; do study_run curriculum "$pos" "$seed"; done; done; }
published() {
  local seed pos
  for seed in ${PUBLISHED_SEEDS//,/ }; do for pos in ${PUBLISHED_SCHEMES//,/ }; do study_run published "$pos" "$seed"; done; done
}
mixed() {
  local sizes seed pos
  for sizes in "${MIXED_LISTS[@]}"; do
    for seed in ${SEEDS//,/ }; do
      listed "$seed" "$MIXED_SEEDS" || continue
      for pos in ${MIXED_SCHEMES//,/ }; do study_run mixed "$pos" "$seed" "$sizes"; done
    done
  done
}

native() {  # seed by seed, so that every question has one seed's answer first: NATIVE_SIZES, then the rrc twins
  local entry listing seeds="" seed pos
  for entry in $NATIVE_SIZES $NATIVE_RRC_SIZES; do
    listing=${entry#*:}
    for seed in ${listing//,/ }; do listed "$seed" "$seeds" || seeds+=${seeds:+,}$seed; done
  done
  for seed in ${seeds//,/ }; do
    for entry in $NATIVE_SIZES; do
      listed "$seed" "${entry#*:}" || continue
      for pos in ${NATIVE_SCHEMES//,/ }; do study_run native "$pos" "$seed" "${entry%%:*}"; done
    done
    for entry in $NATIVE_RRC_SIZES; do
      listed "$seed" "${entry#*:}" || continue
      for pos in ${NATIVE_RRC_SCHEMES//,/ }; do study_run native_rrc "$pos" "$seed" "${entry%%:*}"; done
    done
  done
}

every_run() {  # what `all` trains, in its order
  local seeds=$SEEDS seed
  for seed in ${seeds//,/ }; do    # seed-major: every run has a result before any has three
    SEEDS=$seed
    runs; fuzzy; mixed
  done
  SEEDS=$seeds
  long
  published
  native    # after the 32 px study: the native study is read against its upsampled transfer
  curriculum
}

CLAIMS=$LOGS/.claims
in_copies() {  # step: with RUNS_AT_ONCE > 1, that many copies of it at once, each taking the next run none has
               # claimed, with the cores shared out as threads; else the step itself
  if (( RUNS_AT_ONCE == 1 )); then "$1"; return; fi
  local worker pids=() failed=0 pid threads=$(( $(nproc) / RUNS_AT_ONCE ))
  rm -rf "$CLAIMS" && mkdir -p "$CLAIMS"    # one study.sh per LOGS (the lock): earlier claims are stale
  # the threads in each copy only: `all`'s tables afterwards keep every core
  for (( worker = 1; worker <= RUNS_AT_ONCE; worker++ )); do
    (WORKER=$worker; export OMP_NUM_THREADS=$threads; "$1") & pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  rm -rf "$CLAIMS"
  return "$failed"
}

tables() {
  local study
  for study in $EXPERIMENT $FT_EXPERIMENT $LONG_EXPERIMENT $PUBLISHED_EXPERIMENT; do
    [ -d "$ARCHIVE/$study" ] || continue
    # shellcheck disable=SC2046  # none or one word: the published table beside the study's own
    python -m vitpos.compare "$ARCHIVE/$study" out="$RESULTS/$study" \
      $([ "$study" = "$FT_EXPERIMENT" ] || [ -z "$PUBLISHED" ] || echo "reference=$RESULTS/$PUBLISHED")
  done
  # the published recipe's curves beside the study's, its schemes only: where the 15-epoch ranking turns into the 200-epoch one
  if [ -n "$PUBLISHED_EXPERIMENT" ] && [ -d "$ARCHIVE/$PUBLISHED_EXPERIMENT" ] && [ -d "$ARCHIVE/$EXPERIMENT" ]; then
    python -m vitpos.compare "$ARCHIVE/$EXPERIMENT" "$ARCHIVE/$PUBLISHED_EXPERIMENT" pos="[$PUBLISHED_SCHEMES]" \
      out="$RESULTS/${PUBLISHED_EXPERIMENT}_beside_study" reference="$RESULTS/$PUBLISHED"
  fi
  # the native study, its fine-tunes apart as the 32 px study's (the published ablation is at 32 px: no reference)
  [ ! -d "$ARCHIVE/native/$EXPERIMENT" ] ||
    python -m vitpos.compare "$ARCHIVE/native/$EXPERIMENT" out="$RESULTS/${NATIVE_TAG}_native"
  [ ! -d "$ARCHIVE/native/$FT_EXPERIMENT" ] ||
    python -m vitpos.compare "$ARCHIVE/native/$FT_EXPERIMENT" out="$RESULTS/${NATIVE_TAG}_native_finetune"
}

if [[ " runs fuzzy mixed long published native curriculum park all " == *" ${1:-all} "* ]]; then    # the steps that train or park: one at a time per LOGS
  mkdir -p "$LOGS"
  exec 9> "$LOGS/.study.lock"
  flock -n 9 || { echo "error: another study.sh is training into $LOGS; wait for it, or give this one another LOGS=" >&2; exit 2; }
fi
case ${1:-all} in
  runs|fuzzy|mixed|long|published|native|curriculum) in_copies "$1" ;;
  park) park ;;
  tables) tables ;;
  all) in_copies every_run
       tables ;;
  status) STATUS=1
          if [ -e "$LOGS/.study.lock" ] && ! flock -n "$LOGS/.study.lock" true; then
            echo "a study.sh is training into $LOGS now (the runs it trains show as interrupted or trained)"
          fi
          every_run
          total=0; for state in "${!COUNT[@]}"; do total=$(( total + COUNT[$state] )); done
          echo "$total runs in $ARCHIVE and $LOGS: ${COUNT[done]:-0} done, ${COUNT[trained]:-0} trained," \
            "${COUNT[interrupted]:-0} interrupted, ${COUNT[parked]:-0} parked, ${COUNT[to do]:-0} to do" ;;
esac
