#!/usr/bin/env bash
# Prove and measure vitpos on one GPU machine in one command (at most 9 minutes on one H200):
#   bash scripts/gpu_check.sh [--out DIR]   # needs a CUDA GPU and CIFAR-10 (see CIFAR10 below)
#   bash scripts/gpu_check.sh --cpu-smoke   # every step at toy sizes on the CPU, on a tiny stand-in (~2 min)
# Steps, in this order, each with its own time budget (timeout), each writing its figures into the
# output folder as soon as it ends, so a step that fails or times out later loses nothing earlier:
#   a. tests       tests/test_device.py with CUDA visible                                      55 s
#   b. throughput  vitpos vs timm at equal size (vit_800k, vit_tiny), batch 1024, bf16, eager,
#                  then torch.compile default and reduce-overhead (CUDA graphs)               130 s
#   c. ablation    experiment=cifar10_published (the published small-ViT ablation's recipe), 9 schemes at
#                  once through Hydra's joblib launcher, the epochs that fit (said in the output) 190 s
#   d. strongest   experiment=cifar10 (ViT-Ti/4, 2.7M), the epochs that fit: accuracy per GPU minute 70 s
#   e. transfer    step c's checkpoints at 32/48/64 px (vitpos.evaluate); a trainer=ddp launch    65 s
# Output folder (default benchmarks/results/<gpu name>/), at most 8 files: check.log (everything),
# summary.json (each step's status, time, budget and GPU use, and every table), throughput.csv,
# ablation.csv, strongest.csv (a row per run), epochs.csv (accuracy per epoch), resolution.csv,
# gpu_util.csv (nvidia-smi every second). Run logs and checkpoints stay in WORK_DIR (default a /tmp folder).
# Environment: CIFAR10 (a CIFAR-10 copy, default .gpu_carry/cifar10-jpeg.tar.gz, else
# ../shared/data/cifar10-jpeg.tar.gz), ABLATION_SCHEMES, ABLATION_EPOCHS (25), STRONGEST_POS (rel_shaw),
# STRONGEST_EPOCHS (15), PYTHON (python3), WORK_DIR. Needs torch, torchvision, lightning, timm,
# torchmetrics, tensorboard, matplotlib, hydra-core, omegaconf, hydra-joblib-launcher, pytest; on a
# machine without them or without network: docs/PERFORMANCE.md, "Running the GPU check".
set -uo pipefail
SMOKE=0 OUT_DIR=
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-smoke) SMOKE=1 ;;
    --out) [ $# -ge 2 ] || { echo "error: --out needs a folder, e.g. --out \$OUT" >&2; exit 2; }; OUT_DIR=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1'; use --cpu-smoke, --out DIR or --help" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-python3}
[ -f train.py ] && [ -d vitpos ] || { echo "error: run from the vitpos repository root" >&2; exit 2; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# --- requirements: say everything that is missing at once --------------------------------------
missing=$($PY - <<'EOF'
import importlib.util
need = {"torch": "torch", "torchvision": "torchvision", "lightning": "lightning", "timm": "timm",
        "torchmetrics": "torchmetrics", "hydra": "hydra-core", "omegaconf": "omegaconf",
        "hydra_plugins.hydra_joblib_launcher": "hydra-joblib-launcher", "joblib": "joblib",
        "tensorboard": "tensorboard", "matplotlib": "matplotlib", "pytest": "pytest"}
def found(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False
print(" ".join(pip for module, pip in need.items() if not found(module)))
EOF
) || { echo "error: '$PY' does not run; set PYTHON=<python with torch>" >&2; exit 2; }
if [ -n "$missing" ]; then
  echo "error: missing Python packages: $missing. Offline: bash scripts/gpu_carry.sh on a machine with" \
       "network, carry .gpu_carry/ and install its wheels (docs/PERFORMANCE.md, \"Running the GPU check\")" >&2
  exit 2
fi
if [ $SMOKE = 0 ]; then
  CIFAR10=${CIFAR10:-$(for f in .gpu_carry/cifar10-jpeg.tar.gz ../shared/data/cifar10-jpeg.tar.gz; do [ -f "$f" ] && echo "$f" && break; done)}
  [ -n "$CIFAR10" ] && [ -e "$CIFAR10" ] ||
    { echo "error: no CIFAR-10 copy: set CIFAR10=<archive, folder or image tree> or carry .gpu_carry/ (scripts/gpu_carry.sh)" >&2; exit 2; }
  read -r NGPU GPU < <($PY -c "import torch; n = torch.cuda.device_count(); print(n, torch.cuda.get_device_name(0) if n else '')")
  [ "${NGPU:-0}" -gt 0 ] || { echo "error: no CUDA device visible to torch; on a CPU machine use --cpu-smoke" >&2; exit 2; }
  DEVICE=cuda TRAINER=gpu NCPU=$(nproc)
  B_TESTS=55 B_EAGER=20 B_COMPILED=45 B_ABLATION=190 B_STRONGEST=70 B_EVAL=35 B_DDP=30
  TBATCH=1024 TSTEPS=10 TREPEATS=3 MODES=default,reduce-overhead
  SCHEMES=${ABLATION_SCHEMES:-none,1d_learned,2d_sin,rel_shaw,rope_axial,rel_bias,cpe,cpb,rope_mixed}
  C_EPOCHS=${ABLATION_EPOCHS:-25} C_MARGIN=50        # start-up of the jobs and the final test: not fit time
  D_EPOCHS=${STRONGEST_EPOCHS:-15} D_MARGIN=30
  TOY="" EVAL="batch_size=1024" DDP="trainer=ddp trainer.devices=$NGPU" DDP_STEPS=20
fi
WORK=${WORK_DIR:-$(mktemp -d /tmp/vitpos-gpu-check.XXXX)}
mkdir -p "$WORK"
SAMPLER=
cleanup() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null
  [ $SMOKE = 1 ] && [ -z "${WORK_DIR:-}" ] && rm -rf "$WORK"  # the smoke run's toy logs and checkpoints
}
trap cleanup EXIT
if [ $SMOKE = 1 ]; then
  GPU="cpu-smoke" NGPU=0 DEVICE=cpu TRAINER=default NCPU=2
  # budgets catch a hung step, not a slow or shared CPU (an AVX2-only one trains in fp32)
  B_TESTS=120 B_EAGER=150 B_COMPILED=0 B_ABLATION=120 B_STRONGEST=60 B_EVAL=60 B_DDP=90
  TBATCH=16 TSTEPS=1 TREPEATS=1 MODES=
  SCHEMES=${ABLATION_SCHEMES:-none,rel_shaw}
  C_EPOCHS=2 C_MARGIN=60 D_EPOCHS=1 D_MARGIN=40
  # toy sizes: a few batches of a tiny stand-in, CPU bf16 where supported; one process per run (the
  # ablation's runs already share the cores)
  TOY="data.batch_size=16 data.val_size=40 trainer.limit_train_batches=3 trainer.limit_val_batches=2 trainer.limit_test_batches=2 trainer.devices=1"
  EVAL="batch_size=64 limit=64" DDP="trainer=cpu_ddp trainer.precision=32-true" DDP_STEPS=4
  CIFAR10=$WORK/cifar10-jpeg.tar.gz   # a CIFAR-10-like JPEG tree: 10 classes, 16 train / 8 test images each
  $PY - "$CIFAR10" <<'EOF' || { echo "error: cannot write the stand-in CIFAR-10 under $WORK" >&2; exit 2; }
import io, sys, tarfile
import torch
from torchvision.io import encode_jpeg
from vitpos.data import CIFAR10_CLASSES
generator = torch.Generator().manual_seed(0)
with tarfile.open(sys.argv[1], "w:gz") as archive:
    for split, count in (("train", 16), ("test", 8)):
        for label in CIFAR10_CLASSES:
            for i in range(count):
                data = encode_jpeg(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=generator)).numpy().tobytes()
                info = tarfile.TarInfo(f"cifar10-jpeg/{split}/{label}/{i:04d}.jpg")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
EOF
fi
CIFAR10=$(realpath "$CIFAR10") CACHE=$WORK/cache LOGS=$WORK/logs
SLUG=$(echo "$GPU" | tr -cs 'A-Za-z0-9' '_' | sed 's/_$//' | tr '[:upper:]' '[:lower:]')
OUT_DIR=${OUT_DIR:-benchmarks/results/$SLUG}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/check.log
: > "$LOG"
: > "$WORK/steps.tsv"
FAILED=()
hms() { printf '00:00:%02d:%02d' $(($1 / 60)) $(($1 % 60)); }  # seconds as Lightning's max_time DD:HH:MM:SS
say() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
report() {  # step [planned epochs]: its figures into the output folder, and summary.json
  local name=$1; shift
  $PY scripts/gpu_check_report.py "$name" "$WORK" "$OUT_DIR" "$@" 2>&1 | tee -a "$LOG" ||
    { say "report $name: FAILED"; FAILED+=("report_$name"); }
}
step() {  # name, budget in seconds, command...: run under timeout, log, remember failures, go on
  local name=$1 budget=$2; shift 2
  say "$name (budget $budget s): $*"
  local start rc=0
  start=$(date +%s)
  timeout -k 15 "$budget" "$@" >> "$LOG" 2>&1 || rc=$?
  local status=ok
  case $rc in 0) ;; 124|137) status=TIMEOUT; FAILED+=("$name") ;; *) status="FAILED(rc $rc)"; FAILED+=("$name") ;; esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$start" "$(date +%s)" "$budget" >> "$WORK/steps.tsv"
  say "$name: $status ($(( $(date +%s) - start )) s)"
}
versions=$($PY - "$WORK/device.json" "$GPU" "$NGPU" "$NCPU" "$CIFAR10" <<'EOF'
import json, sys
import torch
path, gpu, ngpu, ncpu, data = sys.argv[1:]
json.dump(dict(device=gpu, gpus=int(ngpu), cpus=int(ncpu), torch=torch.__version__, cuda=torch.version.cuda,
               data=data), open(path, "w"))
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
)
say "device: $GPU x $NGPU, $NCPU CPUs | $versions | data $CIFAR10 | output $OUT_DIR | work $WORK"
if [ $SMOKE = 0 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,clocks.sm \
    --format=csv,nounits -l 1 > "$OUT_DIR/gpu_util.csv" 2>> "$LOG" &
  SAMPLER=$!
else
  say "gpu_util: skipped ($([ $SMOKE = 1 ] && echo 'CPU smoke run' || echo 'no nvidia-smi'))"
fi
# decode the CIFAR-10 copy into the cache while the tests run (the training jobs then load tensors)
$PY -c "import sys; from vitpos.data import load_image_tree; load_image_tree(sys.argv[1], sys.argv[2], (32, 32))" \
  "$CIFAR10" "$CACHE" >> "$LOG" 2>&1 &
DECODE=$!
QUIET="trainer.enable_progress_bar=false callbacks.figures=null data.root=$CIFAR10 data.cache_dir=$CACHE"

# --- a. the device tests --------------------------------------------------------------------------
# shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
step tests "$B_TESTS" $PY -m pytest -q -p no:cacheprovider tests/test_device.py
report tests
wait $DECODE || say "decode: FAILED (see $LOG); the training steps decode the copy themselves"

# --- b. throughput: vitpos vs timm at equal size, eager, then compiled ------------------------------
for model in vit_800k vit_tiny; do
  # shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
  step "throughput_${model}_eager" "$B_EAGER" $PY benchmarks/throughput.py --device "$DEVICE" --model "$model" \
    --batch "$TBATCH" --steps "$TSTEPS" --warmup 2 --repeats "$TREPEATS" --schemes none,1d_learned \
    --loader-images "$([ "$model" = vit_800k ] && echo $((TBATCH * 40)) || echo 0)" --out "$WORK/throughput_${model}_eager.json"
  report throughput
done
if [ -n "$MODES" ]; then
  for model in vit_800k vit_tiny; do
    # shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
    step "throughput_${model}_compiled" "$B_COMPILED" $PY benchmarks/throughput.py --device "$DEVICE" --model "$model" \
      --batch "$TBATCH" --steps "$TSTEPS" --warmup 3 --repeats "$TREPEATS" --schemes 1d_learned --loader-images 0 \
      --compile --compile-modes "$MODES" --out "$WORK/throughput_${model}_compiled.json"
    report throughput
  done
else
  say "throughput compiled: skipped (CPU smoke run: torch.compile takes minutes on a CPU, reduce-overhead needs CUDA)"
fi

# --- c. the published ablation at its own recipe, all schemes at once on the one GPU --------------
IFS=, read -ra scheme_list <<< "$SCHEMES"
JOBS=${#scheme_list[@]}
say "ablation: ${JOBS} runs at once, ${C_EPOCHS} epochs planned (the schedule's length), fit stopped after" \
    "$((B_ABLATION - C_MARGIN)) s if not done; RandAugment batched on the GPU"
# shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
step ablation "$B_ABLATION" env OMP_NUM_THREADS=1 $PY train.py -m hydra/launcher=joblib hydra.launcher.n_jobs="$JOBS" \
  experiment=cifar10_published "pos=$SCHEMES" seed=0 trainer="$TRAINER" trainer.max_epochs="$C_EPOCHS" \
  trainer.max_time="$(hms $((B_ABLATION - C_MARGIN)))" $QUIET $TOY \
  paths.log_dir="$LOGS/ablation" hydra.sweep.dir="$LOGS/ablation/hydra"
report ablation "$C_EPOCHS"

# --- d. the strongest CIFAR-10 ViT that fits (<= 10M parameters) -----------------------------------
STRONGEST_POS=${STRONGEST_POS:-rel_shaw}
# shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
step strongest "$B_STRONGEST" $PY train.py experiment=cifar10 pos="$STRONGEST_POS" seed=0 trainer="$TRAINER" \
  trainer.max_epochs="$D_EPOCHS" trainer.max_time="$(hms $((B_STRONGEST - D_MARGIN)))" \
  $QUIET $TOY paths.log_dir="$LOGS/strongest"
report strongest "$D_EPOCHS"

# --- e. step c's checkpoints at 32/48/64 px, and a DDP launch over all visible devices -------------
# shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
step transfer "$B_EVAL" $PY -m vitpos.evaluate ckpt="$LOGS/ablation/cifar10_published" "img_sizes=[32,48,64]" \
  device="$DEVICE" out="$WORK/evaluate" $EVAL
report transfer
# shellcheck disable=SC2086  # split into words on purpose: $PY, $QUIET, $TOY, $EVAL, $DDP
step ddp "$B_DDP" $PY train.py data=synthetic model=vit_70k pos=rel_bias $DDP trainer.max_steps="$DDP_STEPS" \
  run_name=ddp_check callbacks.figures=null trainer.enable_progress_bar=false paths.log_dir="$LOGS/ddp"
report ddp

# shellcheck disable=SC2012  # the output folder holds the files this script names
files=$(ls "$OUT_DIR" | wc -l)
# shellcheck disable=SC2012
say "output: $files files in $OUT_DIR ($(ls "$OUT_DIR" | tr '\n' ' '))"
if [ ${#FAILED[@]} -gt 0 ]; then
  say "FAILED steps: ${FAILED[*]}"
  exit 1
fi
say "all steps ok"
