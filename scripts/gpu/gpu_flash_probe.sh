#!/usr/bin/env bash
# Kernel iteration on a GPU machine without a CMake build: runs the prebuilt tools/flash_probe
# (scripts/gpu/build_flash_probe.sh; carry build-probe) — correctness of every backward variant against an
# fp64 CPU reference, timings on the leaderboard shape and a smaller one (head dim 64, plus any
# build-probe/flash_probe_d<D>), and an Nsight Compute report of chosen kernels. Usage: scripts/gpu/gpu_flash_probe.sh OUT [ncu-kernel-regex ...]
# With build-probe/flash_hopper_probe (build_flash_probe.sh hopper) it also runs the sm_90a backward's
# check, its compute-sanitizer runs and its timings beside SDPA flash / cuDNN (sdpa_attention_time.py).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
P=build-probe/flash_probe
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >"$OUT/probe.txt" 2>&1
"$P" check >>"$OUT/probe.txt" 2>&1
for shape in "1 16 16384 64 1" "1 16 16384 64 0" "4 16 4096 64 1" "1 1 4096 64 1"; do
  "$P" time $shape 20 >>"$OUT/probe.txt" 2>&1
done
# Other head dims, if built (scripts/gpu/build_flash_probe.sh 128): check, then the leaderboard shape.
for Pd in build-probe/flash_probe_d*; do
  [[ -x $Pd ]] || continue
  d=${Pd##*_d}
  { "$Pd" check; "$Pd" time 1 16 16384 "$d" 1 20; } >>"$OUT/probe.txt" 2>&1
done
H=build-probe/flash_hopper_probe
if [[ -x $H ]]; then
  { "$H" bwd_check; "$H" bwd_variants; } >"$OUT/hopper_bwd_check.txt" 2>&1
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool "$H" bwd_small >"$OUT/hopper_bwd_$tool.txt" 2>&1
  done
  for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "1 16 16384 64 0" "4 32 2048 80 0"; do
    "$H" bwd_time $shape bf16 10
  done >"$OUT/hopper_bwd_time.txt" 2>&1
  python3 tools/probes/sdpa/sdpa_attention_time.py >"$OUT/sdpa_time.txt" 2>&1
fi
i=0
for k in "$@"; do
  i=$((i + 1))
  ncu --kernel-name "regex:$k" --launch-count 1 --set full --import-source no -f -o "$OUT/ncu_$i" \
    "$P" time 1 16 16384 64 1 1 >"$OUT/ncu_$i.log" 2>&1
  ncu -i "$OUT/ncu_$i.ncu-rep" --page details >"$OUT/ncu_$i.txt" 2>&1
  # Per-instruction SASS with stall samples: where the warps wait.
  ncu -i "$OUT/ncu_$i.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu_${i}_sass.csv" 2>&1
  rm -f "$OUT/ncu_$i.ncu-rep"
done
cat "$OUT/probe.txt"
