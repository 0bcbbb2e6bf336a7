#!/usr/bin/env bash
# Issue 27's FP8 and optimizer-overlap work checked on one H100, in one device call: build (sm_90, in
# /tmp so a warm machine keeps it between calls), the GPU tests of the FP8 path and the overlap, then
# the benchmarks the issue's goals name (batch 4, context 512, train step), each stage cut off at its
# own limit and packed into OUT/fp8.tgz as it finishes, so a time limit loses only one stage.
#
#   LMSCALE_COMMIT=<sha> scripts/gpu/fp8_check.sh OUT        (carry .deps, and .whl for torch-float8)
# LMSCALE_BUILD_DIR=/tmp/lmscale-build reuses what session_check.sh or attention_check.sh built on this machine.
#
# With prebuilt/ (lmscale, liblmscale.so and a test binary built elsewhere against the same torch
# 2.11 and CUDA 13, sm_90) the build stage only checks that they load: a GPU machine goes back 30 s
# after a call, so every call would otherwise rebuild from scratch (~5 minutes of the 9). The test
# binary is prebuilt/lmscale_tests, or prebuilt/mini_tests (the FP8, overlap and AdamW test files).
#
# STAGES picks the stages (default: tests bench). Stages:
#   tests      the FP8, overlap and fused-path GPU tests (TESTS_FILTER: another gtest filter)
#   bench      lmscale bf16 and fp8 at small, xl, 2.7B (BENCH_SIZES), optimizer overlap off
#   bench-dynamic  lmscale fp8 with --fp8-scaling dynamic at BENCH_SIZES (the bench stage's fp8 is the
#              default scaling, delayed): the two scalings and bf16 in one call
#   bench-overlap  the same with the optimizer overlap on
#   ablate     `bench --ablate` at ABLATE_SIZES (default xl) in fp8: what each piece and FP8 group buys
#   ablate-small  the same for small (where FP8 falls back to bf16)
#   profile    `lmscale profile` of the fp8 step at PROFILE_SIZE (default xl)
#   float8     torchao float8 + torch.compile (both modes) beside lmscale fp8 at FLOAT8_SIZES (small,xl)
#   compile    torch.compile reduce-overhead (bf16) beside lmscale bf16 at COMPILE_SIZES (small,xl)
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
export LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-/tmp/fp8-build}
export LMSCALE_CMAKE_ARGS=${LMSCALE_CMAKE_ARGS:--DLMSCALE_CUDA_ARCHS=90}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
RES=$OUT/fp8
mkdir -p "$RES"
BIN=$LMSCALE_BUILD_DIR/lmscale
STAGES=" ${STAGES:-tests bench} "
TARBALL=fp8.tgz
source "$(dirname "$0")/timed_stages.sh"
if [[ -d $ROOT/.whl ]]; then  # torchao, pinned, for the torch-float8 baselines (no registry on the GPU machine)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$RES/nvidia-smi.txt" 2>&1
log_clocks "$RES/clocks.csv"
if prebuilt_loads >"$RES/prebuilt.log" 2>&1; then
  echo "prebuilt binaries load: no build" | tee -a "$OUT/summary.txt"
  BIN=$LMSCALE_BUILD_DIR/lmscale
else
  unset LMSCALE_PYTHONPATH
  export LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-/tmp/fp8-build}
  BIN=$LMSCALE_BUILD_DIR/lmscale
  stage build "${BUILD_S:-330}" "$ROOT/lmscale" build || { tail -40 "$RES/build.log"; exit 1; }
fi
TESTS_BIN=$LMSCALE_BUILD_DIR/lmscale_tests
[[ -x $TESTS_BIN ]] || TESTS_BIN=$LMSCALE_BUILD_DIR/mini_tests
want tests && stage tests "${TESTS_S:-120}" "$TESTS_BIN" \
  --gtest_filter="${TESTS_FILTER:-*Fp8*:*OptimizerOverlap*:*OptimizerInBackward*:*FusedModel*:*Bf16*:*Ablation*}" \
  --gtest_output=json:tests.json
COMMON=(--context 512 --batch 4 --mode train-step --warmup "${WARMUP:-3}" --steps "${STEPS:-10}")
want bench && stage bench "${BENCH_S:-150}" "$BIN" bench --size "${BENCH_SIZES:-small,xl,2.7B}" --precision bf16,fp8 \
  "${COMMON[@]}" --no-optimizer-overlap --out bench_serial
want bench-dynamic && stage bench-dynamic "${BENCH_S:-150}" "$BIN" bench --size "${BENCH_SIZES:-small,xl,2.7B}" \
  --precision fp8 --fp8-scaling dynamic "${COMMON[@]}" --no-optimizer-overlap --out bench_dynamic
want bench-overlap && stage bench-overlap "${BENCH_S:-150}" "$BIN" bench --size "${BENCH_SIZES:-small,xl,2.7B}" \
  --precision bf16,fp8 "${COMMON[@]}" --optimizer-overlap --out bench_overlap
want ablate && stage ablate "${ABLATE_S:-200}" "$BIN" bench --size "${ABLATE_SIZES:-xl}" --precision fp8 "${COMMON[@]}" \
  --ablate --out ablate
want ablate-small && stage ablate-small "${ABLATE_S:-120}" "$BIN" bench --size small --precision fp8 "${COMMON[@]}" \
  --ablate --out ablate_small
want profile && stage profile "${PROFILE_S:-120}" "$BIN" profile --size "${PROFILE_SIZE:-xl}" --context 512 \
  --precision fp8 --attention flash --top 25 --out profile
want float8 && stage float8 "${FLOAT8_S:-400}" "$BIN" bench --size "${FLOAT8_SIZES:-small,xl}" --precision fp8 \
  "${COMMON[@]}" --impl lmscale,torch-float8,torch-float8-ro --out float8
want compile && stage compile "${COMPILE_S:-300}" "$BIN" bench --size "${COMPILE_SIZES:-small,xl}" --precision bf16 \
  "${COMMON[@]}" --impl lmscale,torch-compile-ro --out compile
pack
for f in "$RES"/*/*.md; do [[ -f $f ]] && { echo "== $f"; head -c 2500 "$f"; }; done 2>/dev/null | tail -c 9000
