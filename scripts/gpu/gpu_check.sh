#!/usr/bin/env bash
# The GPU check, in one device call: build (or carried prebuilt/ binaries), the C++ and Python tests
# on the GPU, and the benchmarks, by stage. Each stage is cut off at its own limit, logged and packed
# into OUT/gpu_check.tgz as it ends (with a line in OUT/summary.txt), so a time limit loses only the
# stage it stopped.
#
#   scripts/gpu/gpu_check.sh OUT [stage ...]        (carry .deps; default: build tests bench)
#
# Stages, in the order given (each `NAME` runs at most NAME_S seconds, the default in brackets):
#   build          build the CLI, the tests and the Python extension, unless prebuilt/ loads      [BUILD_S 420]
#   tests          every C++ test, GPU ones included (lmscale_tests)                              [TESTS_S 300]
#   gpu-tests      the GPU tests alone (GPU_TESTS: a gtest filter, the GPU suites by default)     [GPU_TESTS_S 150]
#   ctest          the rest through ctest, 8 at a time (the machine has 16 cores)                 [CTEST_S 200]
#   python-gpu     the Python tests, GPU ones made to fail rather than skip (gpu_python.sh)       [PY_S 120]
#   capture-fault  a sweep with injected CUDA-graph capture failures: recorded, later configs run  [CAPTURE_S 90]
#   bench          the default `lmscale bench`                                                    [BENCH_S 120]
#   e2e            the default step at small, xl and 2.7B, context 512                            [E2E_S 90]
#   e2e-table      5 sizes x context 128-1024 x fp32/bf16 x 3 modes, lmscale alone                [E2E_TABLE_S 540]
#   e2e-compare    the same beside PyTorch eager and torch.compile, resumable (--resume); the whole
#                  table takes ~24 minutes: gpu_sweep.sh runs it as one invocation               [E2E_TIMEOUT 540]
#   warmup graph baselines flash-e2e memory lab   the studies of docs/results (their stage names)   [STUDY_S 300]
#   profile        `lmscale profile` at PROFILE_SIZE (xl), PROFILE_PRECISION (bf16), flash        [PROFILE_S 120]
#   attention      the attention leaderboard beside SDPA (ATTN_ARGS replaces its arguments)      [ATTN_S 60]
#   attention-shapes  the attention goal shapes (16k x 128, 2048 x 80, 8k x 128, 4096 x 64 b4, xl) [SHAPES_S 120]
#   attention-grid the causal grid: seq 1024-65536 x d 64/80/128 beside SDPA flash and cuDNN     [GRID_S 240]
#   attention-layouts  GQA, packed documents, sliding window, each size's step shape beside SDPA cuDNN,
#                  flash and jagged nested tensors (python -m lmscale.attention_layouts_bench)      [LAYOUTS_S 240]
#   fp8-tests      the FP8, optimizer-overlap and fused-path GPU tests                            [GPU_TESTS_S 150]
#   fp8-bench      bf16 and fp8 at BENCH_SIZES (small,xl,2.7B), optimizer overlap off             [FP8_S 150]
#   fp8-dynamic fp8-overlap   fp8 with dynamic scaling; bf16 and fp8 with the overlap on          [FP8_S 150]
#   fp8-ablate     `bench --ablate` in fp8 at ABLATE_SIZES (xl): what each piece buys             [ABLATE_S 200]
#   float8         torchao float8 + torch.compile beside lmscale fp8 (carry .whl with torchao)    [FLOAT8_S 400]
# Groups: `session` = build gpu-tests capture-fault python-gpu ctest e2e attention (a merged tree on
# one GPU); `attention-check` = build gpu-tests attention attention-shapes attention-grid profile (with
# GPU_TESTS='*Flash*:*Hopper*:*KernelSupport*'); `fp8-check` = build fp8-tests fp8-bench fp8-ablate.
# Benchmarks run inside OUT/gpu_check with relative --out folders, so recorded commands name no
# machine's folders. LMSCALE_COMMIT names the commit in every record (the GPU machine gets no .git).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
STAGES=()
for s in "${@:-build tests bench}"; do
  case $s in
    session) STAGES+=(build gpu-tests capture-fault python-gpu ctest e2e attention) ;;
    attention-check) STAGES+=(build gpu-tests attention attention-shapes attention-grid profile)
                     GPU_TESTS=${GPU_TESTS:-'*Flash*:*Hopper*:*KernelSupport*'} ;;
    fp8-check) STAGES+=(build fp8-tests fp8-bench fp8-ablate) ;;
    *) read -r -a words <<<"$s"; STAGES+=("${words[@]}") ;;
  esac
done
RES=$OUT/gpu_check
mkdir -p "$RES"
TARBALL=gpu_check.tgz
source "$(dirname "$0")/timed_stages.sh"
GPU_TESTS=${GPU_TESTS:-'*Flash*:*Hopper*:*Fused*:*CudaGraph*:*Rope*:*AdamW*:*Gpu*:*Nccl*:*RmsNorm*:*SwiGlu*:*CrossEntropy*:*Qkv*:*Bf16*:*OptimizerInBackward*:*KernelSupport*:*Ablation*:*Fp8*'}
FP8_TESTS='*Fp8*:*OptimizerOverlap*:*OptimizerInBackward*:*FusedModel*:*Bf16*:*Ablation*'
COMMON=(--context 512 --batch 4 --mode train-step --warmup "${WARMUP:-3}" --steps "${STEPS:-10}")
SIZES=${BENCH_SIZES:-small,xl,2.7B}
ATTN_IMPLS=lmscale-flash,sdpa-flash,sdpa-cudnn
read -r -a attn_args <<<"${ATTN_ARGS:---leaderboard --impl $ATTN_IMPLS}"
if [[ -d $ROOT/.whl ]]; then  # carried wheels (torchao for float8): no registry on the GPU machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; echo "commit ${LMSCALE_COMMIT:-unknown}"; } \
  >"$RES/nvidia-smi.txt" 2>&1
log_clocks "$RES/clocks.csv"

for s in "${STAGES[@]}"; do
  case $s in
    build)
      if prebuilt_loads >"$RES/prebuilt.log" 2>&1; then  # timed_stages.sh: binaries built elsewhere
        echo "prebuilt binaries load: no build" | tee -a "$OUT/summary.txt"
        BIN=$LMSCALE_BUILD_DIR/lmscale
      else
        unset LMSCALE_PYTHONPATH
        stage build "${BUILD_S:-420}" "$ROOT/lmscale" build || { tail -40 "$RES/build.log"; exit 1; }
      fi ;;
    tests) stage tests "${TESTS_S:-300}" "$LMSCALE_BUILD_DIR/lmscale_tests" --gtest_output=json:tests.json ;;
    gpu-tests) stage gpu-tests "${GPU_TESTS_S:-150}" "$LMSCALE_BUILD_DIR/lmscale_tests" --gtest_filter="$GPU_TESTS" \
                 --gtest_output=json:gpu_tests.json ;;
    ctest) stage ctest "${CTEST_S:-200}" ctest --test-dir "$LMSCALE_BUILD_DIR" -j 8 --output-on-failure \
             -E "$(tr -d '*' <<<"$GPU_TESTS" | tr ':' '|')" --output-junit "$RES/ctest.xml" ;;
    python-gpu) LMSCALE_PYTEST_K=${LMSCALE_PYTEST_K:-cuda or fp32 or gpu} stage python-gpu "${PY_S:-120}" \
                  bash "$ROOT/scripts/gpu/gpu_python.sh" "$RES/python" ;;
    # small: a real capture failure (a synchronize inside the capture) -> eager fallback with a note;
    # medium: a capture error that escapes -> recorded capture-failed; large still measured after both.
    capture-fault) LMSCALE_INJECT_FAULT=capture-sync@small,capture@medium stage capture-fault "${CAPTURE_S:-90}" \
                     "$BIN" bench --size small,medium,large --context 128 --warmup 1 --steps 3 --out capture_fault ;;
    bench) stage bench "${BENCH_S:-120}" "$BIN" bench --out . ;;
    e2e) stage e2e "${E2E_S:-90}" "$BIN" bench --size small,xl,2.7B --context 512 --warmup 3 --steps 10 --out e2e ;;
    e2e-table) stage e2e-table "${E2E_TABLE_S:-540}" "$BIN" bench --all-sizes --context 128,256,512,1024 \
                 --precision fp32,bf16 --mode forward,forward-backward,train-step --warmup 2 --steps 5 --out . ;;
    e2e-compare) stage e2e-compare "${E2E_TIMEOUT:-540}" "$BIN" bench --size "${E2E_SIZES:-small,medium,large,xl,2.7B}" \
                   --context 128,256,512,1024 --precision fp32,bf16 --mode forward,forward-backward,train-step \
                   --warmup "${E2E_WARMUP:-2}" --steps "${E2E_STEPS:-5}" --compare torch-eager,torch-compile \
                   --resume --out e2e_compare ;;
    warmup) stage warmup "${STUDY_S:-300}" "$BIN" bench --size small --context 512 --precision bf16 --warmup-study --out . ;;
    baselines) stage baselines "${STUDY_S:-300}" "$BIN" bench --size "${BASELINE_SIZES:-small}" --context 512 \
                 --impl lmscale,torch-eager,torch-compile,torch-compile-ro --warmup 3 --steps 10 --out baselines ;;
    graph) stage graph "${STUDY_S:-300}" "$BIN" bench --size small,medium --context 512 --precision bf16 --cuda-graph \
             --out graph ;;
    flash-e2e) stage flash-e2e "${STUDY_S:-300}" "$BIN" bench --all-sizes --attention naive,flash \
                 --context 512,4096,8192,16384 --precision bf16 --mode train-step --warmup 2 --steps 5 --out flash_e2e ;;
    memory) stage memory "${STUDY_S:-300}" "$BIN" memory --size 2.7B --contexts 128 256 512 --precisions fp32 bf16 \
              --modes forward train-step --out . ;;
    lab) stage lab-accumulation "${STUDY_S:-300}" "$BIN" lab accumulation --out .
         stage lab-autocast "${STUDY_S:-300}" "$BIN" lab autocast --device all --out . ;;
    profile) stage profile "${PROFILE_S:-120}" "$BIN" profile --size "${PROFILE_SIZE:-xl}" --context 512 \
               --precision "${PROFILE_PRECISION:-bf16}" --attention flash --top 25 --out profile ;;
    attention) stage attention "${ATTN_S:-60}" "$BIN" bench attention "${attn_args[@]}" --out attention ;;
    attention-shapes)
      shape() { "$BIN" bench attention --precision bf16 --impl $ATTN_IMPLS "$@"; }
      stage attention-shapes "${SHAPES_S:-120}" bash -c "$(declare -f shape); BIN='$BIN' ATTN_IMPLS='$ATTN_IMPLS'
        shape --context 16384 --head-dim 128 --heads 16 --out d128_16k &&
        shape --context 2048 --head-dim 80 --heads 32 --batch 4 --out d80_2048 &&
        shape --context 8192 --head-dim 128 --heads 16 --out d128_8k &&
        shape --context 4096 --head-dim 64 --heads 16 --batch 4 --out d64_4096_b4 &&
        shape --context 512 --head-dim 64 --heads 25 --batch 4 --out xl_attention" ;;
    attention-grid) stage attention-grid "${GRID_S:-240}" "$BIN" bench attention --context 1024,4096,16384,65536 \
                      --head-dim 64,80,128 --precision bf16 --heads 16 --impl $ATTN_IMPLS --warmup 3 --iters 10 --out grid ;;
    attention-layouts) PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" stage attention-layouts "${LAYOUTS_S:-240}" \
                         "${LMSCALE_PYTHON:-python3}" -m lmscale.attention_layouts_bench --out layouts/attention_layouts.jsonl ;;
    fp8-tests) stage fp8-tests "${GPU_TESTS_S:-150}" "$LMSCALE_BUILD_DIR/lmscale_tests" --gtest_filter="$FP8_TESTS" \
                 --gtest_output=json:fp8_tests.json ;;
    fp8-bench) stage fp8-bench "${FP8_S:-150}" "$BIN" bench --size "$SIZES" --precision bf16,fp8 "${COMMON[@]}" \
                 --no-optimizer-overlap --out bench_serial ;;
    fp8-dynamic) stage fp8-dynamic "${FP8_S:-150}" "$BIN" bench --size "$SIZES" --precision fp8 --fp8-scaling dynamic \
                   "${COMMON[@]}" --no-optimizer-overlap --out bench_dynamic ;;
    fp8-overlap) stage fp8-overlap "${FP8_S:-150}" "$BIN" bench --size "$SIZES" --precision bf16,fp8 "${COMMON[@]}" \
                   --optimizer-overlap --out bench_overlap ;;
    fp8-ablate) stage fp8-ablate "${ABLATE_S:-200}" "$BIN" bench --size "${ABLATE_SIZES:-xl}" --precision fp8 \
                  "${COMMON[@]}" --ablate --out ablate ;;
    float8) stage float8 "${FLOAT8_S:-400}" "$BIN" bench --size "${FLOAT8_SIZES:-small,xl}" --precision fp8 "${COMMON[@]}" \
              --impl lmscale,torch-float8,torch-float8-ro --out float8 ;;
    *) echo "unknown stage $s (the stages are listed at the top of $0)" | tee -a "$OUT/summary.txt"; exit 2 ;;
  esac
done
pack
cat "$OUT/summary.txt"
for f in "$RES"/*.md "$RES"/*/*.md; do [[ -f $f ]] && { echo "== ${f#"$RES"/}"; head -c 2500 "$f"; }; done 2>/dev/null |
  tail -c 6000
# Exit status: 1 when a stage failed (summary.txt names it), else 0.
! grep -q " rc=[1-9]" "$OUT/summary.txt"
