#!/usr/bin/env bash
# Why the product's d = 128 backward measured slower than the probe's (docs/flash_history.md, "Through the
# product, v5.1"): one call that times the same shapes through both with the GPU's clocks and power logged
# beside them, then the kernels' durations under ncu, which fixes the clocks at base, so the probe and the
# product can be compared kernel by kernel without the clock drift. The probe runs while the product builds
# (the build uses the CPUs, the probe the GPU).
#   tools/probes/power_cap/attention_clocks.sh OUT        (carry .deps build-probe)
# Results: OUT/clocks.csv (nvidia-smi every 100 ms, through the ncu runs too), OUT/phases.txt (when each phase began), OUT/probe.txt,
# OUT/product.txt, OUT/ncu.txt, OUT/build.log.
set -uo pipefail
source "$(dirname "$0")/../../../scripts/gpu/script_init.sh" "$@"
export LMSCALE_BUILD_TARGETS=${LMSCALE_BUILD_TARGETS:-lmscale_cli}
H=${PROBE:-build-probe/flash_hopper_probe}
BIN=$LMSCALE_BUILD_DIR/lmscale
phase() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >>"$OUT/phases.txt"; }

nvidia-smi -q -d POWER,CLOCK,PERFORMANCE >"$OUT/nvidia-smi.txt" 2>&1
source "$(dirname "$0")/../../../scripts/gpu/timed_stages.sh"  # log_clocks
log_clocks "$OUT/clocks.csv" 100

phase build-start
"$ROOT/lmscale" build >"$OUT/build.log" 2>&1 &
BUILD=$!
{
  for shape in "1 16 16384 128 1" "1 16 16384 64 1"; do
    phase "probe bwd_time $shape"; "$H" bwd_time $shape bf16 10
    phase "probe time $shape"; "$H" time $shape bf16 20
  done
} >"$OUT/probe.txt" 2>&1
wait $BUILD || { phase build-failed; tail -30 "$OUT/build.log"; exit 1; }
phase build-done
{
  phase "product d128"
  "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --precision bf16 --impl lmscale-flash,sdpa-cudnn --out "$OUT/res_d128"
  phase "product leaderboard"
  "$BIN" bench attention --leaderboard --impl lmscale-flash,sdpa-cudnn --out "$OUT/res_lb"
  phase "product done"
} >"$OUT/product.txt" 2>&1
{
  echo "== probe, 1 x 16 x 16384 x 128 causal backward"
  ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second "$H" bwd_time 1 16 16384 128 1 bf16 1 2>&1 |
    grep -E "^\s+void|^\s+[a-z_]+kernel|gpu__time|per_second" | head -12
  echo "== product, the same shape (bench attention, one warm-up, one iteration)"
  ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --kernel-name regex:flash "$BIN" bench attention \
    --context 16384 --head-dim 128 --heads 16 --precision bf16 --impl lmscale-flash --warmup 1 --iters 1 --out /tmp/ncu_res 2>&1 |
    grep -E "^\s+void|^\s+[a-z_]+kernel|gpu__time|per_second" | head -40
} >"$OUT/ncu.txt" 2>&1
cat "$OUT/phases.txt"
