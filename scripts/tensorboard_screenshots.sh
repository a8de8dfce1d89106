#!/usr/bin/env bash
# Screenshots of TensorBoard's three tabs for docs/tensorboard/, from two short runs of two schemes:
#   bash scripts/tensorboard_screenshots.sh [out folder]
# Needs a headless Chromium (apt-get install chromium). tests/test_tensorboard.py checks the same
# content through TensorBoard's HTTP data API, without a browser.
set -euo pipefail
OUT=${1:-docs/tensorboard}
LOGS=$(mktemp -d)
TB=; trap 'kill $TB 2>/dev/null || true; rm -rf "$LOGS"' EXIT
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then echo "error: no Chromium found; apt-get install chromium" >&2; exit 2; fi
for pos in none rel_bias; do
  python train.py data=synthetic model=vit_70k pos=$pos trainer.max_steps=120 \
    trainer.val_check_interval=20 trainer.log_every_n_steps=5 paths.log_dir="$LOGS" \
    trainer.enable_progress_bar=false > /dev/null
done
python -m tensorboard.main --logdir "$LOGS" --host 127.0.0.1 --port 6123 > /dev/null 2>&1 & TB=$!
sleep 8
mkdir -p "$OUT"
for tab in hparams custom_scalars timeseries; do
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1500,950 \
    --virtual-time-budget=15000 --screenshot="$OUT/$tab.png" "http://127.0.0.1:6123/#$tab" 2>/dev/null
  echo "wrote $OUT/$tab.png"
done
