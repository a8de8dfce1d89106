#!/usr/bin/env bash
# The recipes measured side by side: each recipe of RECIPES x SEEDS trained one after the other on
# this machine, seed by seed (seed 0 of every recipe, then seed 1, ...), so the runs that are compared
# train back to back on the same CPU. Run from the repository root, on otherwise idle cores:
#   bash scripts/recipes.sh runs     # train every run not yet finished (an interrupted one resumes)
#   bash scripts/recipes.sh tables   # the comparison of every finished run in LOGS, written to OUT
#   bash scripts/recipes.sh all      # runs, then tables (the default)
# Variables:
#   RECIPES  configs/experiment names, comma-separated (default cifar10_cpu,cifar10_curriculum)
#   SEEDS    comma-separated seeds (default 0,1,2)
#   POS      the positional scheme of every run, a configs/pos name (default cpe, the scheme
#            cifar10_cpu was measured with)
#   REACH    the validation accuracy in percent whose wall-clock minutes OUT tabulates (default 80)
#   ARGS     extra train.py overrides for every run, e.g. "ema_decay=0.999 test_flip=true"; needs TAG
#   TAG      a word added to the run names of such runs, e.g. ema (default none)
#   LOGS     where the runs train (default ~/vitpos-recipes, outside the checkout)
#   OUT      the tables and accuracy_vs_minutes.png (default docs/results/cifar10_recipes)
#   CIFAR10_ROOT  CIFAR-10 for data.root (an archive, folder or image tree); default: found in data/
# A run is <LOGS>/<recipe>/<recipe>_<POS>[_<TAG>]_seed<seed>/version_N. One with results.json is done and
# skipped; one with last.ckpt and no results.json resumes. Each sitting of a run appends the machine
# to its machine.txt (lscpu's model name, the bf16/AMX flags, the load average at its start), and
# `tables` gathers those lines into OUT/machines.md. A run uses both cores of a 2-core CPU: one
# recipes.sh or study.sh trains into a LOGS at a time.
set -euo pipefail
RECIPES=${RECIPES:-cifar10_cpu,cifar10_curriculum}
SEEDS=${SEEDS:-0,1,2}
POS=${POS:-cpe}
REACH=${REACH:-80}
ARGS=${ARGS:-}
TAG=${TAG:-}
LOGS=${LOGS:-$HOME/vitpos-recipes}
OUT=${OUT:-docs/results/cifar10_recipes}
DATA_ARGS=${CIFAR10_ROOT:+data.root=$CIFAR10_ROOT}
QUIET="trainer.enable_progress_bar=false callbacks.figures=null"

fail() { echo "error: $*" >&2; exit 2; }
say() { echo "[recipes $(date +%H:%M:%S)] $*"; }
IFS=, read -ra RECIPE_LIST <<< "$RECIPES"
IFS=, read -ra SEED_LIST <<< "$SEEDS"
[ ${#RECIPE_LIST[@]} -gt 0 ] || fail "RECIPES is empty; name configs/experiment files, e.g. RECIPES=cifar10_cpu,cifar10_curriculum"
for recipe in "${RECIPE_LIST[@]}"; do
  [ -f "configs/experiment/$recipe.yaml" ] \
    || fail "RECIPES: no configs/experiment/$recipe.yaml; use names from configs/experiment/, e.g. RECIPES=cifar10_cpu"
  grep -qx "experiment: $recipe" "configs/experiment/$recipe.yaml" \
    || fail "RECIPES: configs/experiment/$recipe.yaml does not set 'experiment: $recipe'; add that line"
done
[[ $POS =~ ^[A-Za-z0-9_]+$ && -f configs/pos/$POS.yaml ]] \
  || fail "POS=$POS: no configs/pos/$POS.yaml; use a name from configs/pos/, e.g. POS=cpe"
[ ${#SEED_LIST[@]} -gt 0 ] || fail "SEEDS is empty; give comma-separated integers, e.g. SEEDS=0,1,2"
for seed in "${SEED_LIST[@]}"; do
  [[ $seed =~ ^[0-9]+$ ]] || fail "SEEDS=$SEEDS must be comma-separated non-negative integers, e.g. SEEDS=0,1,2"
done
if ! [[ $REACH =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk "BEGIN { exit !($REACH > 0 && $REACH <= 100) }"; then
  fail "REACH=$REACH must be a validation accuracy in percent, e.g. REACH=80"
fi
[ -z "$ARGS" ] || [ -n "$TAG" ] || fail "ARGS=\"$ARGS\" needs TAG=<word> so its runs are not taken for the plain ones, e.g. TAG=ema"
[[ -z $TAG || $TAG =~ ^[A-Za-z0-9_-]+$ ]] || fail "TAG=$TAG must be one word of letters, digits, _ or -, e.g. TAG=ema"

run_name() { echo "$1_$POS${TAG:+_$TAG}_seed$2"; }    # recipe, seed
# shellcheck disable=SC2012  # run folders: names vitpos writes
latest() { ls -d "$1"/version_* 2> /dev/null | sort -V | tail -n 1; }
finished() { compgen -G "$1/version_*/results.json" > /dev/null; }
resume_arg() { local v; v=$(latest "$1"); [ -n "$v" ] && [ -f "$v/checkpoints/last.ckpt" ] && echo resume=true || true; }
machine() {  # one line: the time, CPU model, its bf16/AMX flags and the load average (idle cores read ~0)
  local model flags
  model=$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  flags=$(grep -owE 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo 2> /dev/null | sort -u | tr '\n' ' ' || true)
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) | ${model:-unknown CPU} | ${flags:-no avx512_bf16/amx} | load $(cut -d' ' -f1 /proc/loadavg)"
}

runs() {
  local seed recipe run
  for seed in "${SEED_LIST[@]}"; do
    for recipe in "${RECIPE_LIST[@]}"; do
      run=$LOGS/$recipe/$(run_name "$recipe" "$seed")
      if finished "$run"; then say "done $run"; continue; fi
      mkdir -p "$run"
      machine >> "$run/machine.txt"
      say "train $run ($(tail -n 1 "$run/machine.txt"))"
      # shellcheck disable=SC2046,SC2086  # none or several words: $DATA_ARGS, $QUIET, $ARGS, $(resume_arg)
      python train.py experiment="$recipe" pos="$POS" seed="$seed" run_name="$(run_name "$recipe" "$seed")" \
        paths.log_dir="$LOGS" $DATA_ARGS $QUIET $ARGS $(resume_arg "$run")
      finished "$run" || { echo "error: training left no results.json in $run" >&2; exit 1; }
    done
  done
}

tables() {
  mkdir -p "$OUT"
  python -m vitpos.compare "$LOGS" out="$OUT" reach="$REACH"
  {
    echo "Machines the runs trained on, one line per sitting: time (UTC), CPU, bf16/AMX flags, load average at its start."
    echo
    echo "| run | started | CPU | flags | load |"
    echo "|---|---|---|---|---|"
    for file in "$LOGS"/*/*/machine.txt; do
      [ -f "$file" ] || continue
      sed "s#^#| $(basename "$(dirname "$file")") | #; s#\$# |#" "$file"
    done
  } > "$OUT/machines.md"
  say "wrote $OUT/machines.md"
}

case ${1:-all} in
  runs | all)
    mkdir -p "$LOGS"
    exec 9> "$LOGS/.study.lock"    # the lock study.sh takes too: one training script per LOGS
    flock -n 9 || fail "another recipes.sh or study.sh is training into $LOGS; wait for it, or give this one another LOGS="
    runs
    [ "${1:-all}" = runs ] || tables ;;
  tables) tables ;;
  *) fail "unknown step '${1}'; use one of runs, tables, all" ;;
esac
