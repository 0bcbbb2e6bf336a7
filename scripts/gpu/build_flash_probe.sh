#!/usr/bin/env bash
# Builds tools/flash_probe.cu into build-probe/ with nvcc alone (seconds; no libtorch), for
# scripts/gpu/gpu_flash_probe.sh. Same flags as the kernel library (CMakeLists.txt).
#   scripts/gpu/build_flash_probe.sh [head_dim] [extra nvcc flags]   -> build-probe/flash_probe (64) or flash_probe_d<D>
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build-probe
D=64
if [[ ${1:-} =~ ^[0-9]+$ ]]; then D=$1; shift; fi
name=flash_probe
[[ $D == 64 ]] || name=flash_probe_d$D
nvcc -std=c++17 -arch=sm_90 -O3 --use_fast_math --expt-relaxed-constexpr -lineinfo -Isrc \
  -DLMSCALE_PROBE_HEAD_DIM="$D" tools/flash_probe.cu -o "build-probe/$name" "$@"
