#!/usr/bin/env bash
# One GPU-machine call for FlashAttention work: build, run the GPU kernel tests, compute-sanitizer
# memcheck + racecheck on a small config, then the attention benchmark. Everything lands in OUT:
# build.log, tests.log, sanitizer.log, bench.log, lb/attention.{jsonl,md} (leaderboard) and
# attention.{jsonl,md} (the grid given by the extra arguments).
#
#   scripts/gpu/gpu_flash.sh OUT [all|test|bench] [extra `bench attention` args...]
#
# LMSCALE_CMAKE_ARGS (e.g. "-DLMSCALE_FA_HEADDIMS=64 -DLMSCALE_FA_DTYPES=bf16") makes a quick build.
# Benchmarks run inside OUT with relative --out folders, so the recorded commands name no machine's paths.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
STAGE=${1:-all}
shift || true
export LMSCALE_JOBS=${LMSCALE_JOBS:-16}
B=$LMSCALE_BUILD_DIR

echo "== build $(date -u +%FT%TZ)"
if ! "$ROOT/lmscale" build >"$OUT/build.log" 2>&1; then
  grep -m 20 -B2 -A8 "error" "$OUT/build.log"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader

if [[ $STAGE == all || $STAGE == test ]]; then
  echo "== GPU tests"
  "$B/lmscale_tests" --gtest_filter='Flash*' >"$OUT/tests.log" 2>&1
  echo "tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure" "$OUT/tests.log" | head -40
  echo "== compute-sanitizer (memcheck, racecheck) on small configs"
  : >"$OUT/sanitizer.log"
  for tool in memcheck racecheck; do
    for causal in "" $([[ $tool == memcheck ]] && echo --no-causal); do
      compute-sanitizer --tool $tool --error-exitcode 7 "$B/lmscale" bench attention --impl lmscale-flash \
        --seq 193 --head-dim 64 --dtype bf16 --heads 2 --warmup 0 --iters 1 $causal --out "$OUT/san" \
        >>"$OUT/sanitizer.log" 2>&1
      echo "$tool ${causal:-causal} rc=$?"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
fi

if [[ $STAGE == all || $STAGE == bench ]]; then
  echo "== benchmark"
  # The leaderboard goes to $OUT/lb/ so the optional grid's attention.md does not overwrite its table.
  (cd "$OUT" && "$B/lmscale" bench attention --leaderboard --out lb) >>"$OUT/bench.log" 2>&1
  cat "$OUT/lb/attention.md"
  # The leaderboard shape at head dim 128 (the issue asks for it beside d = 64).
  (cd "$OUT" && "$B/lmscale" bench attention --seq 16384 --head-dim 128 --heads 16 --dtype bf16 --iters 20 \
    --out lb128) >>"$OUT/bench.log" 2>&1
  # Plain-attention sweep (docs/spec.md §2.5): where the T x T scores run out of memory.
  (cd "$OUT" && "$B/lmscale" bench attention --sweep --out sweep) >>"$OUT/bench.log" 2>&1
  if (($# > 0)); then
    (cd "$OUT" && "$B/lmscale" bench attention "$@" --out .) >>"$OUT/bench.log" 2>&1
    cat "$OUT/attention.md"
  fi
fi
