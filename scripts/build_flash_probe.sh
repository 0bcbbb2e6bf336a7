#!/usr/bin/env bash
# Builds tools/flash_probe.cu into build-probe/ with nvcc alone (seconds; no libtorch), for
# scripts/gpu_flash_probe.sh. Same flags as the kernel library (CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-probe
nvcc -std=c++17 -arch=sm_90 -O3 --use_fast_math --expt-relaxed-constexpr -lineinfo -Isrc \
  tools/flash_probe.cu -o build-probe/flash_probe "$@"
