#!/usr/bin/env bash
# One device call of the Hopper backward's iteration loop (docs/flash_history.md, backward v5): a prebuilt
# tools/flash_hopper_probe (scripts/gpu/build_flash_probe.sh hopper; carry build-probe) checks every
# backward variant against fp64, times them on issue 26's shapes and on the attention grid's causal
# shapes (batch 1, 16 heads) beside SDPA flash / cuDNN, and lists the per-kernel durations of one
# backward. Usage: tools/probes/hopper_bwd/bwd_iterate.sh OUT [quick|full|compare|ab|sustain|checks]
#   quick: variants check + issue 26's shapes; default adds the grid shapes and kernel durations;
#   full adds SDPA, bwd_check (default and deterministic), rerun repeatability and compute-sanitizer;
#   compare: variants check, then the shipped backward against every variant in alternating order
#   (bwd_compare) on issue 26's shapes, and ncu's kernel durations and instruction counts of each at
#   the leaderboard shape;
#   ab: a kernel change against the probe built before it (BASE, default build-probe/flash_hopper_probe_base):
#   the forward and backward checks of the new one, then bwd_time / time of both, alternating
#   base, new, new, base per shape, and ncu of both at the leaderboard shape; then what full adds;
#   sustain: the same alternation timed as the product's benchmark does (bwd_sustain), clocks logged;
#   (the cut variants that attributed a tile's time, docs/flash_history.md, left the kernel at commit 6343002's
#   successor: check out 6343002 to run them again);
#   checks: the forward and backward correctness suites and compute-sanitizer, nothing timed.
# Results go straight under OUT in five files (the device tool returns at most eight), so a time limit
# keeps what finished.
set -uo pipefail
source "$(dirname "$0")/../../../scripts/gpu/script_init.sh" "$@"
H=${PROBE:-build-probe/flash_hopper_probe}
MODE=${2:-}
# compute-sanitizer's memcheck, racecheck and synccheck on one small backward and forward per kernel.
sanitize() {
  for tool in memcheck racecheck synccheck; do
    echo "== $tool"
    compute-sanitizer --tool $tool "$H" bwd_small 2>&1 | tail -3
    compute-sanitizer --tool $tool "$H" small 2>&1 | tail -3
  done >"$OUT/sanitizer.txt" 2>&1
}
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; "$H" bwd_variants; } >"$OUT/checks.txt" 2>&1
if [[ $MODE == checks ]]; then
  { "$H" check; "$H" bwd_check; "$H" bwd_check_deterministic; "$H" bwd_repeatable; } >>"$OUT/checks.txt" 2>&1
  sanitize
  exit 0
fi
if [[ $MODE == sustain ]]; then
  # Probes in turn (BINS, default the base and the new one; run in the given order, then reversed), each shape's
  # fwd + bwd, bwd and fwd run back to back for SUSTAIN_S seconds (bwd_sustain), as the product's benchmark times
  # a phase, with the clocks and power logged. SHAPES: "B H S D causal" entries separated by ';'. A BINS entry
  # PROBE@VARIANT runs the backward variant VARIANT of that probe (e.g. "$H $H@kregs": one binary, two kernels).
  BASE=${BASE:-build-probe/flash_hopper_probe_base}
  read -r -a bins <<<"${BINS:-$BASE $H}"
  IFS=';' read -r -a shapes <<<"${SHAPES:-1 16 16384 64 1;1 16 16384 128 1;1 16 16384 64 0;4 32 2048 80 1}"
  order=("${bins[@]}")
  for ((i = ${#bins[@]} - 1; i >= 0; --i)); do order+=("${bins[i]}"); done
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
    -lms 250 >"$OUT/clocks.csv" 2>&1 &
  logger=$!
  {
    nvidia-smi --query-gpu=name --format=csv,noheader
    for shape in "${shapes[@]}"; do
      # An entry PROBE@VARIANT times that variant of bwd_variants(D) in place of the shipped backward.
      for bin in "${order[@]}"; do
        echo "[$bin] $(date +%T.%N)"
        "${bin%@*}" bwd_sustain $shape "${SUSTAIN_S:-1.5}" $([[ $bin == *@* ]] && echo "${bin#*@}")
      done
    done
  } >"$OUT/sustain.txt" 2>&1
  [[ -n ${FLOOR:-} ]] && python3 tools/probes/sdpa/sustained_floor.py "${SUSTAIN_S:-1.5}" >"$OUT/floor.txt" 2>&1
  kill "$logger"
  exit 0
fi
if [[ $MODE == ab ]]; then
  BASE=${BASE:-build-probe/flash_hopper_probe_base}
  { "$H" check; "$H" bwd_check; "$H" bwd_check_deterministic; "$H" bwd_repeatable; } >>"$OUT/checks.txt" 2>&1
  {
    nvidia-smi --query-gpu=name --format=csv,noheader
    for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "4 16 4096 64 1" "1 16 8192 128 1" \
                 "1 16 16384 64 0" "4 25 512 64 1"; do
      for bin in "$BASE" "$H" "$H" "$BASE"; do echo "[$bin]"; "$bin" bwd_time $shape bf16 10; done
    done
    for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1"; do
      for bin in "$BASE" "$H" "$H" "$BASE"; do echo "[$bin]"; "$bin" time $shape bf16 20; done
    done
  } >"$OUT/ab.txt" 2>&1
  for bin in "$BASE" "$H"; do
    echo "== $bin"
    ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      "$bin" bwd_compare 1 16 16384 64 1 1 1 2>&1 | grep -E "^  void|gpu__time|inst_exec|hmma"
  done >"$OUT/ncu.txt" 2>&1
  sanitize
  exit 0
fi
if [[ $MODE == compare ]]; then
  {
    nvidia-smi --query-gpu=name --format=csv,noheader
    for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "4 16 4096 64 1" "1 16 8192 128 1" \
                 "1 16 16384 64 0" "4 25 512 64 1"; do
      "$H" bwd_compare $shape 10 4
    done
  } >"$OUT/compare.txt" 2>&1
  ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    "$H" bwd_compare 1 16 16384 64 1 1 1 >"$OUT/ncu.txt" 2>&1
  exit 0
fi
{
  nvidia-smi --query-gpu=name --format=csv,noheader
  for shape in "1 16 16384 64 1" "1 16 16384 128 1" "4 32 2048 80 1" "1 16 8192 128 1" "4 16 4096 64 1" \
               "1 16 16384 64 0" "4 32 2048 80 0" "4 25 512 64 1"; do
    "$H" bwd_time $shape bf16 10
  done
} >"$OUT/time.txt" 2>&1
[[ $MODE == quick ]] && exit 0
{
  for d in 64 80 128; do
    for s in 1024 4096 65536; do "$H" bwd_time 1 16 $s $d 1 bf16 5; done
  done
  for shape in "4 32 2048 80 1" "1 16 1024 64 1"; do
    ncu --metrics gpu__time_duration.sum "$H" bwd_time $shape bf16 1 2>&1 | grep -E "^\s+void|gpu__time" | head -8
  done
} >"$OUT/grid.txt" 2>&1
[[ $MODE == full ]] || exit 0
python3 tools/probes/sdpa/sdpa_attention_time.py >"$OUT/sdpa.txt" 2>&1
{ "$H" bwd_check; "$H" bwd_check_deterministic; "$H" bwd_repeatable; } >>"$OUT/checks.txt" 2>&1
sanitize
