#!/usr/bin/env bash
# GPU check, in one call on a GPU machine (device tool): build with CUDA, run every test (GPU ones
# included), then a short end-to-end benchmark; everything lands in OUT as one tarball (the device
# tool returns at most 8 files) plus summary.txt. Stages are separate so a time limit loses little.
#
#   scripts/gpu/gpu_check.sh OUT [stage ...]     stages: build tests bench e2e-table e2e-compare warmup baselines
#                                            graph flash-e2e profile memory lab attention (default: build tests bench)
#
# e2e-compare: the full e2e table (5 sizes × context 128-1024 × fp32/bf16 × 3 modes) with PyTorch eager
# and torch.compile in the same run (size by size: lmscale, then one Python process per baseline), stopped cleanly after
# E2E_TIMEOUT seconds (default 540, under a 600 s command limit) with what it measured kept; running
# the stage again continues where it stopped (--resume).
# E2E_WARMUP / E2E_STEPS (default 2 / 5) change the steps. The sweep goes size by size (lmscale, then
# each baseline), and a ratio across two invocations is marked † in the table. The whole table takes
# about 24 minutes on an H100: scripts/gpu/gpu_sweep.sh runs it as one invocation across device calls.
# Run from the repo root; carry .deps (scripts/bundle_deps.sh makes it). LMSCALE_COMMIT names the
# commit in every record (the GPU machine gets no .git).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
shift
STAGES=("$@")
((${#STAGES[@]})) || STAGES=(build tests bench)
export LMSCALE_BUILD_DIR=${LMSCALE_BUILD_DIR:-$ROOT/build-gpu}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
RES=${LMSCALE_GPU_RESULTS:-$LMSCALE_BUILD_DIR/results}
mkdir -p "$OUT" "$RES"
BIN=$LMSCALE_BUILD_DIR/lmscale
pack() { tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }
stage() {  # stage NAME CMD... : run, log to RES/NAME.log, record status and seconds in summary.txt
  local name=$1; shift
  local t0=$SECONDS
  # Run inside RES with relative --out paths, so recorded commands name no machine's folders.
  (cd "$RES" && "$@") >"$RES/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
  pack
  return $rc
}

nvidia-smi >"$RES/nvidia-smi.txt" 2>&1
for s in "${STAGES[@]}"; do
  case $s in
    build) stage build "$ROOT/lmscale" build || { tail -50 "$RES/build.log"; exit 1; } ;;
    tests) stage tests timeout 240 "$LMSCALE_BUILD_DIR/lmscale_tests" --gtest_output=json:tests.json ;;
    bench) stage bench "$BIN" bench --out . ;;
    e2e-table) stage e2e-table "$BIN" bench --all-sizes --context 128,256,512,1024 --precision fp32,bf16 \
                 --mode forward,forward-backward,train-step --warmup 2 --steps 5 --out . ;;
    e2e-compare) stage e2e-compare timeout -k 10 "${E2E_TIMEOUT:-540}" "$BIN" bench --size "${E2E_SIZES:-small,medium,large,xl,2.7B}" \
                   --context 128,256,512,1024 --precision fp32,bf16 --mode forward,forward-backward,train-step \
                   --warmup "${E2E_WARMUP:-2}" --steps "${E2E_STEPS:-5}" --compare torch-eager,torch-compile \
                   --resume --out e2e_compare ;;
    warmup) stage warmup "$BIN" bench --size small --context 512 --precision bf16 --warmup-study --out . ;;
    baselines) stage baselines "$BIN" bench --size small,medium --context 512 --precision bf16 \
                 --compare torch-eager,torch-compile --out baselines ;;
    graph) stage graph "$BIN" bench --size small,medium --context 512 --precision bf16 --cuda-graph --out graph ;;
    flash-e2e) stage flash-e2e "$BIN" bench --all-sizes --attention naive,flash --context 512,4096,8192,16384 \
                 --precision bf16 --mode train-step --warmup 2 --steps 5 --out flash_e2e ;;
    profile) stage profile-small "$BIN" profile --size small --context 512 --precision bf16 --steps 3 --top 12 \
               --trace trace_small_bf16.json --out profile_small
             stage profile-2.7B "$BIN" profile --size 2.7B --context 256 --precision bf16 --steps 2 --top 12 \
               --out profile_2.7B ;;
    memory) stage memory "$BIN" memory --size 2.7B --contexts 128 256 512 --precisions fp32 bf16 \
              --modes forward train-step --out . ;;
    lab) stage lab-accumulation "$BIN" lab accumulation --out .
         stage lab-autocast "$BIN" lab autocast --device all --out . ;;
    attention) stage attention-lb "$BIN" bench attention --leaderboard --out attention_lb
               stage attention "$BIN" bench attention --out attention ;;
    *) echo "unknown stage $s" | tee -a "$OUT/summary.txt" ;;
  esac
done
pack
for f in "$RES"/*.md; do [[ -f $f ]] && { echo "== $f"; cat "$f"; }; done 2>/dev/null | tail -c 6000
