#!/usr/bin/env bash
# Build what scripts/gpu_check.sh needs on a GPU machine without network (docs/PERFORMANCE.md,
# "Running the GPU check") into the git-ignored folder .gpu_carry/, and check that it travels:
#   .gpu_carry/whl/                  wheels of what such a machine lacks: hydra-core, omegaconf,
#                                    antlr4-python3-runtime (built here from its sdist),
#                                    hydra-joblib-launcher (pure Python; the loaned H200 has joblib)
#   .gpu_carry/cifar10-jpeg.tar.gz   a CIFAR-10 copy (CIFAR10_SOURCE, default ../shared/data/cifar10-jpeg.tar.gz)
# then prints the size of the checkout (tracked and untracked-not-ignored files) plus .gpu_carry/,
# and fails when it is over the 64 MiB that travel. Run from the repository root (needs network).
set -euo pipefail
[ -f train.py ] && [ -d vitpos ] || { echo "error: run from the vitpos repository root" >&2; exit 2; }
PY=${PYTHON:-python3}
SOURCE=${CIFAR10_SOURCE:-../shared/data/cifar10-jpeg.tar.gz}
[ -f "$SOURCE" ] || { echo "error: no CIFAR-10 copy at $SOURCE; set CIFAR10_SOURCE=<archive>" >&2; exit 2; }
# the versions this checkout's tests pass with
PINS="hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 hydra-joblib-launcher==1.2.0"
rm -rf .gpu_carry/whl
mkdir -p .gpu_carry/whl
# shellcheck disable=SC2086  # PINS is a list of words
$PY -m pip wheel -q --no-deps -w .gpu_carry/whl $PINS
install -m 644 "$SOURCE" .gpu_carry/cifar10-jpeg.tar.gz
bytes=$( { git ls-files -z -co --exclude-standard; find .gpu_carry -type f -print0; } | xargs -0 stat -c %s | paste -sd+ | bc)
# shellcheck disable=SC2012  # wheel names: ls lists them as they are
echo "built .gpu_carry/: $(ls .gpu_carry/whl | tr '\n' ' ')+ cifar10-jpeg.tar.gz"
echo "travels: $((bytes / 1024 / 1024)) MiB of 64 MiB (checkout + .gpu_carry/)"
[ "$bytes" -le $((64 * 1024 * 1024)) ] || { echo "error: over 64 MiB: carry less or ignore large untracked files" >&2; exit 1; }
