#!/usr/bin/env bash
# Runs here (the development machine), not on the GPU machine: builds tools/flash_probe.cu (CMake
# targets flash_probe / flash_probe_d<D>: the kernels' own architecture and flags, no libtorch linked)
# and copies the binaries into build-probe/, the small folder to carry for scripts/gpu/gpu_flash_probe.sh.
#   scripts/gpu/build_flash_probe.sh [head_dim ...]   default 64 -> build-probe/flash_probe, others flash_probe_d<D>
#   scripts/gpu/build_flash_probe.sh hopper           tools/flash_hopper_probe.cu (sm_90a forward and backward,
#                                                     nvcc alone, no CMake) -> build-probe/flash_hopper_probe
# Uses the build folder of ./lmscale (LMSCALE_BUILD_DIR, default build); configures it if needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == hopper ]]; then
  mkdir -p build-probe
  nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 --use_fast_math --expt-relaxed-constexpr -lineinfo \
    -Isrc tools/flash_hopper_probe.cu src/kernels/hopper/*.cu -o build-probe/flash_hopper_probe
  ls -l build-probe/flash_hopper_probe
  exit 0
fi
BUILD=${LMSCALE_BUILD_DIR:-build}
dims=("$@")
((${#dims[@]})) || dims=(64)
targets=()
for d in "${dims[@]}"; do
  [[ $d =~ ^[0-9]+$ ]] || { echo "build_flash_probe: head dim '$d' is not a number" >&2; exit 2; }
  if [[ $d == 64 ]]; then targets+=(flash_probe); else targets+=("flash_probe_d$d"); fi
done
LMSCALE_BUILD_DIR=$BUILD LMSCALE_BUILD_TARGETS="${targets[*]}" ./lmscale build
mkdir -p build-probe
for t in "${targets[@]}"; do cp "$BUILD/probe/$t" build-probe/; done
ls -l build-probe
