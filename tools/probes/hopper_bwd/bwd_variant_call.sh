#!/usr/bin/env bash
# Backward variants of the probe (bwd_variants(D)) against the shipped
# kernel in one call (carry build-probe/flash_hopper_probe): correctness of every variant (bwd_variants), the
# sustained alternation (shipped, variants, then reversed; clocks logged), bursts (bwd_compare, COMPARE=0 skips them)
# and ncu at fixed clocks (time, clock, tensor pipe, instructions, shared-memory banks, L2 reduction sectors).
# Usage: OUT=<dir> VARIANTS="<name> ..." [SHAPES="B H S D causal;..."] [BASE=<probe>] tools/probes/hopper_bwd/bwd_variant_call.sh
# BASE: a probe built from an earlier tree, timed first in the sustained alternation (a change to shared code).
# Each variant must exist at every shape's head dim. The attribution calls of docs/flash_history.md ("Where a backward
# tile's time goes") and backward v5.4's comparison were made with this script's earlier forms (the results READMEs
# name their commits).
H=build-probe/flash_hopper_probe
read -r -a vs <<<"${VARIANTS:?VARIANTS=<bwd variant names>}"
SHAPES=${SHAPES:-"1 16 16384 128 1;1 16 16384 64 1;4 32 2048 80 1;1 16 16384 64 0"}
IFS=';' read -r -a shapes <<<"$SHAPES"
BINS="${BASE:+$BASE }$H${vs[*]/#/ $H@}" SHAPES="$SHAPES" SUSTAIN_S=1.0 tools/probes/hopper_bwd/bwd_iterate.sh "$OUT/sustain" sustain
if [[ ${COMPARE:-1} != 0 ]]; then
  for shape in "${shapes[@]}"; do $H bwd_compare $shape 10 4; done >"$OUT/compare.txt" 2>&1
fi
METRICS=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
METRICS+=,smsp__inst_executed.sum,l1tex__data_bank_reads.sum,l1tex__data_bank_writes.sum,lts__t_sectors_op_red.sum
for shape in "${shapes[@]}"; do
  for v in shipped "${vs[@]}"; do
    echo "== $shape $v"
    ncu -k regex:flash_bwd_hopper_kernel --launch-count 1 --metrics "$METRICS" $H bwd_sustain $shape 0.05 \
      $([[ $v != shipped ]] && echo "$v") 2>&1 | grep -E 'gpu__time|cycles_elapsed|hmma|inst_exec|bank_|lts__|rror'
  done
done >"$OUT/ncu.txt" 2>&1
tail -1 "$OUT/sustain/checks.txt"; grep bwd_sustain "$OUT/sustain/sustain.txt"; cat "$OUT/compare.txt" "$OUT/ncu.txt" 2>/dev/null
