#!/usr/bin/env bash
# One device call of the Hopper backward's iteration loop (docs/flash_notes.md, backward v5+): a prebuilt
# tools/flash_hopper_probe (scripts/gpu/build_flash_probe.sh hopper; carry build-probe) checks every
# backward variant against fp64, times them on issue 26's shapes and on the attention grid's causal
# shapes (batch 1, 16 heads) beside SDPA flash / cuDNN, and lists the per-kernel durations of one
# backward. Usage: scripts/gpu/bwd_iterate.sh OUT [quick|full]
#   quick: variants check + issue 26's shapes; default adds the grid shapes and kernel durations;
#   full adds SDPA, bwd_check of the shipped kernels and compute-sanitizer.
# Every result goes straight under OUT, one file per step, so a time limit keeps what finished.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
H=${PROBE:-build-probe/flash_hopper_probe}
MODE=${2:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
"$H" bwd_variants >"$OUT/bwd_variants.txt" 2>&1
for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "1 16 8192 128 1" "4 16 4096 64 1" \
             "1 16 16384 64 0" "4 32 2048 80 0" "4 25 512 64 1"; do
  "$H" bwd_time $shape bf16 10
done >"$OUT/bwd_time.txt" 2>&1
[[ $MODE == quick ]] && exit 0
for d in 64 80 128; do
  for s in 1024 4096 65536; do "$H" bwd_time 1 16 $s $d 1 bf16 5; done
done >"$OUT/bwd_grid.txt" 2>&1
for shape in "4 32 2048 80 1" "1 16 1024 64 1"; do
  ncu --metrics gpu__time_duration.sum "$H" bwd_time $shape bf16 1 2>&1 | grep -E "^\s+void|gpu__time" | head -8
done >"$OUT/durations.txt" 2>&1
[[ $MODE == full ]] || exit 0
python3 scripts/gpu/sdpa_attention_time.py >"$OUT/sdpa_time.txt" 2>&1
"$H" bwd_check >"$OUT/bwd_check.txt" 2>&1
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool $tool "$H" bwd_small >"$OUT/bwd_$tool.txt" 2>&1
done
