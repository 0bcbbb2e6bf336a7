#!/usr/bin/env bash
# Issue 26's check through the product, in one call: build the CLI and the C++ tests, run the GPU flash
# tests, then `lmscale bench attention` (lmscale's automatic dispatch beside SDPA's FlashAttention-2 and
# cuDNN backends, in one process) over the causal grid (batch 1, 16 heads, seq 1024-65536 x d 64/80/128)
# and issue 26's shapes, the xl training-step profile at context 512, and SDPA's timings of the xl
# attention shape for the same comparison. Stages are cut off at their own limits and packed into
# OUT/attention_check.tgz after each, so a time limit loses only the stage it stopped.
#   scripts/gpu/attention_check.sh OUT        (carry .deps; or carry prebuilt/ to skip the build: timed_stages.sh)
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
export LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-/tmp/lmscale-build}
export LMSCALE_CMAKE_ARGS=${LMSCALE_CMAKE_ARGS:--DLMSCALE_CUDA_ARCHS=90}
export LMSCALE_BUILD_TARGETS=${LMSCALE_BUILD_TARGETS:-lmscale_cli lmscale_tests}
export PYTHONUNBUFFERED=1
RES=$OUT/attention_check
mkdir -p "$RES"
BIN=$LMSCALE_BUILD_DIR/lmscale
TARBALL=attention_check.tgz
source "$(dirname "$0")/timed_stages.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$RES/nvidia-smi.txt" 2>&1
echo "commit ${LMSCALE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)}" >>"$RES/nvidia-smi.txt"
if prebuilt_loads >"$RES/prebuilt.log" 2>&1; then  # timed_stages.sh: binaries built elsewhere, no build
  echo "prebuilt binaries load: no build" | tee -a "$OUT/summary.txt"
  BIN=$LMSCALE_BUILD_DIR/lmscale
else
  unset LMSCALE_PYTHONPATH
  stage build "${BUILD_S:-420}" "$ROOT/lmscale" build || { tail -40 "$RES/build.log"; exit 1; }
fi
stage gpu-tests "${GPU_TESTS_S:-120}" "$LMSCALE_BUILD_DIR/lmscale_tests" --gtest_filter='*Flash*:*Hopper*:*KernelSupport*'
stage leaderboard "${LB_S:-60}" "$BIN" bench attention --leaderboard --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out leaderboard
stage shapes "${SHAPES_S:-120}" bash -c "
  '$BIN' bench attention --context 16384 --head-dim 128 --heads 16 --precision bf16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out d128_16k &&
  '$BIN' bench attention --context 2048 --head-dim 80 --heads 32 --batch 4 --precision bf16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out d80_2048 &&
  '$BIN' bench attention --context 8192 --head-dim 128 --heads 16 --precision bf16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out d128_8k &&
  '$BIN' bench attention --context 4096 --head-dim 64 --heads 16 --batch 4 --precision bf16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out d64_4096_b4 &&
  '$BIN' bench attention --context 512 --head-dim 64 --heads 25 --batch 4 --precision bf16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --out xl_attention"
# The grid after the goal shapes: a time limit then cuts the grid, not them.
stage grid "${GRID_S:-240}" "$BIN" bench attention --context 1024,4096,16384,65536 --head-dim 64,80,128 \
  --precision bf16 --heads 16 --impl lmscale-flash,sdpa-flash,sdpa-cudnn --warmup 3 --iters 10 --out grid
stage profile "${PROFILE_S:-120}" "$BIN" profile --size xl --context 512 --precision bf16 --attention flash --top 25 --out profile
stage sdpa "${SDPA_S:-90}" python3 "$ROOT/scripts/gpu/sdpa_attention_time.py"
pack
cat "$OUT/summary.txt"
