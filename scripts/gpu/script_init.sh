# Sourced by every GPU script that writes into an output folder, first (the convention, README.md):
#   source "$(dirname "$0")/script_init.sh" "$@"
# Output: OUT is the first argument (created, made absolute; a relative one is taken from the repo
# root, as the device tool runs commands there). ROOT is the repo, and the script runs from it, so
# every script resolves its paths the same way whatever folder it was started from.
# Build: one folder, LMSCALE_BUILD_DIR (default build-gpu/ in the checkout: ignored by git, and kept
# between calls while the machine is held), for sm_90 (LMSCALE_CUDA_ARCHS, default 90: the lent H100
# and H200 machines); BIN is its CLI. A script builds it with `"$ROOT/lmscale" build`, or runs carried
# binaries instead (prebuilt_loads, timed_stages.sh).
OUT=${1:?usage: $0 OUT [...]}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-$ROOT/build-gpu}
export LMSCALE_CUDA_ARCHS=${LMSCALE_CUDA_ARCHS:-90}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BIN=$LMSCALE_BUILD_DIR/lmscale
