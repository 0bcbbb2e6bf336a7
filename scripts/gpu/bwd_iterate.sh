#!/usr/bin/env bash
# One device call of the Hopper backward's iteration loop (docs/flash_notes.md, backward v5+): a prebuilt
# tools/flash_hopper_probe (scripts/gpu/build_flash_probe.sh hopper; carry build-probe) checks every
# backward variant against fp64, times them on issue 26's shapes beside SDPA flash / cuDNN, and profiles
# the shipped d = 64 main kernel with Nsight Compute. Usage: scripts/gpu/bwd_iterate.sh OUT [quick]
# Every result goes straight under OUT, one file per step, so a time limit keeps what finished.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
H=${PROBE:-build-probe/flash_hopper_probe}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
"$H" bwd_variants >"$OUT/bwd_variants.txt" 2>&1
for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "1 16 8192 128 1" "4 16 4096 64 1" \
             "1 16 16384 64 0" "4 32 2048 80 0"; do
  "$H" bwd_time $shape bf16 10
done >"$OUT/bwd_time.txt" 2>&1
[[ ${2:-} == quick ]] && exit 0
python3 scripts/gpu/sdpa_attention_time.py >"$OUT/sdpa_time.txt" 2>&1
"$H" bwd_check >"$OUT/bwd_check.txt" 2>&1
ncu --kernel-name "regex:flash_bwd_hopper_kernel" --launch-count 1 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis "$H" bwd_time 1 16 16384 64 1 bf16 1 >"$OUT/ncu_d64.txt" 2>&1
