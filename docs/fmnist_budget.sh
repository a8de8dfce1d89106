#!/usr/bin/env bash
# Reproduces the early-learning Fashion-MNIST numbers of docs/RESULTS.md (section 2) on a CPU. Run from the repository root:
#   bash docs/fmnist_budget.sh train          # every scheme at 32 px (3 epochs of a 10k-image subset)
#   bash docs/fmnist_budget.sh finetune POS   # fine-tune POS's 32 px checkpoint at 48 and 64 px
#   bash docs/fmnist_budget.sh tables         # evaluate everything, write docs/results/
# or `bash docs/fmnist_budget.sh all`. Needs Debian's dataset-fashion-mnist (or network access).
set -euo pipefail
SCHEMES=${SCHEMES:-none,1d_learned,2d_learned,1d_sin,2d_sin,rel_bias,cpe,rope_axial,rope_mixed,alibi_2d,cpb}
TRAIN=logs/fmnist_budget
BUDGET=(data=fashion_mnist data.train_subset=10000 trainer.max_epochs=3 trainer.enable_progress_bar=false)
FINETUNE=(data=fashion_mnist data.train_subset=4000 data.val_size=1000 trainer.max_epochs=1 optim.lr=5e-4
          scheduler.warmup_steps=10 test_after_fit=false trainer.enable_progress_bar=false)
EVAL=(limit=5000 split=test data=fashion_mnist)

# shellcheck disable=SC2012  # checkpoints: names vitpos writes
best() { ls "$1"/checkpoints/best-*.ckpt | head -n 1; }

train() {
  python train.py -m pos="$SCHEMES" "${BUDGET[@]}" paths.log_dir=$TRAIN
}

finetune() {
  local pos=$1 size
  for size in 48 64; do
    python train.py pos="$pos" img_size=$size finetune_from="$(best "$TRAIN/${pos}_fashion_mnist_32px_seed42/version_0")" \
      "${FINETUNE[@]}" paths.log_dir=logs/fmnist_finetune_$size
  done
}

tables() {
  python -m vitpos.compare $TRAIN out=docs/results/train_32px
  python -m vitpos.evaluate ckpt=$TRAIN "img_sizes=[32,48,64]" "${EVAL[@]}" out=docs/results/resolution_no_finetune
  local interp=(1d_sin 2d_sin rope_axial rope_mixed)  # the schemes with an extrapolate/interpolate mode
  python -m vitpos.evaluate ckpt="[$(printf "$TRAIN/%s_fashion_mnist_32px_seed42," "${interp[@]}" | sed 's/,$//')]" \
    "img_sizes=[32,48,64]" resize_mode=interpolate "${EVAL[@]}" out=docs/results/resolution_no_finetune_interpolate
  python -m vitpos.evaluate ckpt=logs/fmnist_finetune_48 "img_sizes=[48]" "${EVAL[@]}" out=docs/results/finetuned_48px
  python -m vitpos.evaluate ckpt=logs/fmnist_finetune_64 "img_sizes=[64]" "${EVAL[@]}" out=docs/results/finetuned_64px
  python docs/results_table.py
}

case ${1:-all} in
  train) train ;;
  finetune) finetune "$2" ;;
  tables) tables ;;
  all) train; for pos in ${SCHEMES//,/ }; do finetune "$pos"; done; tables ;;
  *) echo "usage: bash docs/fmnist_budget.sh [train|finetune POS|tables|all]" >&2; exit 2 ;;
esac
