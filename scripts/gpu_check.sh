#!/usr/bin/env bash
# Prove and measure vitpos on one GPU machine, in one command (about 8 minutes on one H200):
#   bash scripts/gpu_check.sh               # needs a CUDA GPU
#   bash scripts/gpu_check.sh --cpu-smoke   # the same steps at toy sizes on the CPU (a minute or two)
# Steps: requirements -> the device tests (tests/test_device.py, CUDA visible) -> throughput of
# vitpos vs timm, every scheme, batch 256 and 1024, with torch.compile modes -> Fashion-MNIST
# training of 2d_sin and rope_mixed (device-resident data, GPU utilisation sampled) -> evaluation
# at 32/48/64 px -> a trainer=ddp launch over all visible GPUs.
# Writes into OUT_DIR (default benchmarks/results/<gpu name>/): check.log, throughput_b*.json,
# gpu_util.csv, and <gpu name>.json, the summary docs/PERFORMANCE.md quotes.
# Needs: python3 with torch (>= 2.4), torchvision, lightning, timm, torchmetrics, hydra-core,
# omegaconf, tensorboard, matplotlib (and pytest for the tests step); Fashion-MNIST's four .gz files in FMNIST_DIR
# (default /usr/share/datasets/fashion-mnist). Run from the repository root.
set -uo pipefail
SMOKE=0
for arg in "$@"; do
  case $arg in
    --cpu-smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option '$arg'; use --cpu-smoke or --help" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
FMNIST_DIR=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f train.py ] && [ -d vitpos ] || { echo "error: run from the vitpos repository root" >&2; exit 2; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# --- requirements: say everything that is missing at once --------------------------------------
missing=$($PY - <<'EOF'
import importlib.util
need = {"torch": "torch", "torchvision": "torchvision", "lightning": "lightning", "timm": "timm",
        "torchmetrics": "torchmetrics", "hydra": "hydra-core", "omegaconf": "omegaconf",
        "tensorboard": "tensorboard", "matplotlib": "matplotlib"}
print(" ".join(pip for module, pip in need.items() if importlib.util.find_spec(module) is None))
EOF
) || { echo "error: '$PY' does not run; set PYTHON=<python with torch>" >&2; exit 2; }
if [ -n "$missing" ]; then
  echo "error: missing Python packages: $missing. Offline, build wheels on a machine with network" \
       "(pip wheel --no-deps -w .whl $missing; antlr4-python3-runtime==4.9.3 for hydra-core) and install" \
       "them here (pip install --no-index --no-deps --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site)" >&2
  exit 2
fi
FMNIST_FILES="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"
for f in $FMNIST_FILES; do
  [ -f "$FMNIST_DIR/$f" ] && continue
  if [ $SMOKE = 1 ]; then  # toy sizes need no real images: a random stand-in in the same IDX format
    FMNIST_DIR=$(mktemp -d /tmp/vitpos-fmnist-standin.XXXX)
    trap 'rm -rf "$FMNIST_DIR"' EXIT
    $PY - "$FMNIST_DIR" <<'EOF2'
import gzip, sys
import numpy as np
rng = np.random.default_rng(0)
for prefix, count in (("train", 8000), ("t10k", 1000)):
    for kind, shape, high in (("images-idx3", (count, 28, 28), 256), ("labels-idx1", (count,), 10)):
        header = bytes([0, 0, 8, len(shape)]) + b"".join(n.to_bytes(4, "big") for n in shape)
        with gzip.open(f"{sys.argv[1]}/{prefix}-{kind}-ubyte.gz", "wb") as f:
            f.write(header + rng.integers(0, high, shape, dtype=np.uint8).tobytes())
EOF2
    echo "Fashion-MNIST not found: the smoke run uses a random stand-in in $FMNIST_DIR (accuracy meaningless)"
    break
  fi
  echo "error: $FMNIST_DIR/$f is missing; copy Fashion-MNIST's four .gz files there" \
       "(Debian: dataset-fashion-mnist) or set FMNIST_DIR=<folder>" >&2
  exit 2
done
if [ $SMOKE = 0 ]; then
  $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
    { echo "error: no CUDA device visible to torch; on a CPU machine use --cpu-smoke" >&2; exit 2; }
  GPU=$($PY -c "import torch; print(torch.cuda.get_device_name(0))")
  NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
  DEVICE=cuda TRAINER=gpu BATCHES="256 1024" STEPS=20 REPEATS=3 EPOCHS=3 SUBSET=null TRAIN_BATCH=512
  COMPILE="--compile --compile-modes default,max-autotune-no-cudagraphs,reduce-overhead"
  DDP="trainer=ddp trainer.devices=$NGPU" EXTRA=""
else
  GPU="cpu-smoke" NGPU=2
  DEVICE=cpu TRAINER=default BATCHES="32" STEPS=1 REPEATS=1 EPOCHS=1 SUBSET=1024 TRAIN_BATCH=128
  EXTRA="trainer.limit_val_batches=4 trainer.limit_test_batches=4"
  COMPILE="" DDP="trainer=cpu_ddp trainer.precision=32-true"
fi
SLUG=$(echo "$GPU" | tr -cs 'A-Za-z0-9' '_' | sed 's/_$//' | tr 'A-Z' 'a-z')
OUT_DIR=${OUT_DIR:-benchmarks/results/$SLUG}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/check.log
: > "$LOG"
FAILED=()
say() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
step() {  # name, command...: run, log, remember failures, go on
  local name=$1; shift
  say "$name: $*"
  local start=$SECONDS
  if "$@" >> "$LOG" 2>&1; then say "$name: ok ($((SECONDS - start)) s)"; else say "$name: FAILED ($((SECONDS - start)) s, see $LOG)"; FAILED+=("$name"); fi
}
say "device: $GPU x $NGPU | $($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')"
LOGS=$OUT_DIR/logs
rm -rf "$LOGS"
QUIET="trainer.enable_progress_bar=false paths.log_dir=$LOGS"

# --- 1. the device tests (the other steps still run without pytest; the check then ends FAILED) -
if $PY -c "import pytest" 2> /dev/null; then
  step tests $PY -m pytest -q -p no:cacheprovider tests/test_device.py
else
  say "tests: FAILED (pytest is not installed: carry its wheels, pip wheel --no-deps pytest pluggy iniconfig)"
  FAILED+=(tests)
fi

# --- 2. throughput: vitpos vs timm, every scheme, compile modes ---------------------------------
for batch in $BATCHES; do
  schemes=$([ $SMOKE = 1 ] && echo "none,rope_mixed" || $PY -c "import vitpos; print(','.join(vitpos.list_pos()))")
  step "throughput_b$batch" $PY benchmarks/throughput.py --device $DEVICE --batch "$batch" --steps $STEPS \
    --repeats $REPEATS --schemes "$schemes" --loader-images $((batch * 20)) \
    $([ "$batch" = "${BATCHES##* }" ] && echo "$COMPILE") --out "$OUT_DIR/throughput_b$batch.json"
done

# --- 3. Fashion-MNIST training with GPU utilisation sampled, 4. evaluation at 32/48/64 px ------
if [ $SMOKE = 0 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,nounits -l 1 > "$OUT_DIR/gpu_util.csv" &
  SAMPLER=$!
fi
for pos in 2d_sin rope_mixed; do
  step "train_$pos" $PY train.py experiment=fmnist_cpu pos=$pos seed=0 img_size=32 trainer=$TRAINER \
    trainer.max_epochs=$EPOCHS data.batch_size=$TRAIN_BATCH data.train_subset=$SUBSET data.system_dir="$FMNIST_DIR" \
    figures_at_end=false $EXTRA $QUIET
  step "evaluate_$pos" $PY -m vitpos.evaluate ckpt="$LOGS/fmnist_cpu/${pos}_fashion_mnist_32px_seed0" \
    img_sizes=[32,48,64] device=$DEVICE \
    out="$OUT_DIR/evaluate_$pos" $([ $SMOKE = 1 ] && echo limit=256)
done
[ -n "${SAMPLER:-}" ] && kill "$SAMPLER"

# --- 5. a DDP launch over all visible devices ---------------------------------------------------
step ddp $PY train.py data=synthetic model=vit_micro pos=rel_bias $DDP trainer.max_steps=20 \
  run_name=ddp_check figures_at_end=false $QUIET

# --- summary ----------------------------------------------------------------------------------
$PY - "$OUT_DIR" "$GPU" "$SLUG" "${FAILED[*]:-}" <<'EOF' | tee -a "$LOG"
import json, sys
from pathlib import Path
out, gpu, slug, failed = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split()
summary = {"device": gpu, "failed_steps": failed, "throughput": {}, "training": {}, "evaluation": {}}
for path in sorted(out.glob("throughput_b*.json")):
    summary["throughput"][path.stem] = json.loads(path.read_text())
for results in sorted((out / "logs").glob("*/*/version_*/results.json")):
    metrics = json.loads(results.read_text())
    summary["training"][results.parent.parent.name] = {k: metrics.get(k) for k in
                                                      ("val/acc_best", "test/acc", "fit_seconds", "params")}
for csv in sorted(out.glob("evaluate_*/resolution.csv")):
    summary["evaluation"][csv.parent.name] = csv.read_text().splitlines()
util = out / "gpu_util.csv"
if util.exists():
    rows = [line.split(", ") for line in util.read_text().splitlines()[1:] if line.count(",") == 2]
    busy = [float(r[1]) for r in rows]
    summary["gpu_utilisation_mean_pct"] = sum(busy) / len(busy) if busy else None
    summary["gpu_memory_max_mib"] = max((float(r[2]) for r in rows), default=None)
(out / f"{slug}.json").write_text(json.dumps(summary, indent=1))
for name, rows in summary["training"].items():
    print(f"  {name}: test acc {rows['test/acc']}, fit {rows['fit_seconds']} s")
print(f"wrote {out / (slug + '.json')}")
EOF
if [ ${#FAILED[@]} -gt 0 ]; then
  say "FAILED steps: ${FAILED[*]}"
  exit 1
fi
say "all steps ok"
