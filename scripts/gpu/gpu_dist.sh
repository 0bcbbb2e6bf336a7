#!/usr/bin/env bash
# GPU run of the distributed part (2 or 4 GPUs): build, NCCL equivalence tests, `bench ddp` (the
# designs on the default step; + PyTorch's DDP and FSDP2 on the same model, eager and compiled),
# `bench comm` (NCCL, then Gloo), `bench zero`. Results (JSONL, MD), logs and gzipped Perfetto traces
# land in OUT as two archives. Run through the device tool on nvidia-h200-x2 / -x4 (carry .deps), e.g.
#   scripts/gpu/gpu_dist.sh OUT build tests ddp torch comm zero
# Phases run in the order given and each is cut off at DEADLINE_S seconds after the start (default
# 440), so the results of the finished ones always come back. BUILD_TARGETS limits the build.
# NPROC (default 2) sets the number of processes, one GPU each; DDP_ARGS replaces bench ddp's design
# flags. Benchmarks run inside OUT/res with relative --out folders, so recorded commands name no
# machine path. With prebuilt/ carried (lmscale, liblmscale.so, lmscale_tests built elsewhere against
# the same torch and CUDA) the build phase only checks that they load (prebuilt_loads, timed_stages.sh).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"  # OUT, ROOT, LMSCALE_BUILD_DIR, BIN: the convention
shift
source "$ROOT/scripts/gpu/timed_stages.sh"  # prebuilt_loads
RES=$OUT/res
mkdir -p "$RES" "$OUT/logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LMSCALE_COMMIT=${LMSCALE_COMMIT:-unknown} PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE_S:-440}
B=$LMSCALE_BUILD_DIR
L=$BIN
log() { echo "[gpu_dist ${SECONDS}s] $*"; }
left() { echo $((DEADLINE - SECONDS > 5 ? DEADLINE - SECONDS : 5)); }
run() { timeout -k 5 "$(left)" "$@"; }

phase_build() {
  if [[ -x $ROOT/prebuilt/lmscale_tests ]] && prebuilt_loads; then
    B=$ROOT/prebuilt L=$ROOT/prebuilt/lmscale
    log "prebuilt binaries in $B (no build)"
    return 0
  fi
  # The bootstrap (its compiler choice included), building only the targets and kernels this run needs.
  log "build ($ROOT) targets: ${BUILD_TARGETS:-lmscale_cli lmscale_tests}"
  LMSCALE_PYTHON=$(command -v python3) LMSCALE_JOBS=${LMSCALE_JOBS:-30} \
    LMSCALE_BUILD_TARGETS="${BUILD_TARGETS:-lmscale_cli lmscale_tests}" \
    LMSCALE_CMAKE_ARGS="-DLMSCALE_FA_HEADDIMS=64 -DLMSCALE_FA_DTYPES=bf16" "$ROOT/lmscale" build \
    >"$OUT/logs/build.log" 2>&1 || grep -B2 -A12 "FAILED\|error:" "$OUT/logs/build.log" | head -n 60
  [[ -x $L ]] || { log "no CLI binary"; return 1; }
  python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
  nvidia-smi topo -m 2>/dev/null | head -n 6 || true  # head closes the pipe early: not a failure
}
phase_tests() {
  log "dist tests (Gloo and NCCL)"
  (cd $B && run ./lmscale_tests --gtest_filter='Dist*:Bucketing*:GradDestination*:DistributedOptimizer*' >>"$OUT/logs/tests.log" 2>&1)
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==" "$OUT/logs/tests.log"
}
phase_ddp() {
  # The designs on the default step (bf16), the single-GPU step first in the same process group.
  # DDP_ARGS replaces the design flags, e.g. DDP_ARGS="--impls single,zero1 --bucket-mb 25,100,250".
  log "bench ddp on ${NPROC:-2} ranks"
  (cd "$RES" && run $L launch -n ${NPROC:-2} -- bench ddp --size ${DDP_SIZE:-xl} --precision bf16 --trace-dir ../logs \
    ${DDP_ARGS:---impls single,bucketed,zero1,zero2 --bucket-mb 100 --first-bucket-mb 1 --comm-dtype fp32,bf16 \
    --trace-impls zero1-100MB-bf16 --trace-gpu-only} \
    --out .) 2>&1 | tee -a "$OUT/logs/ddp.log" | grep -v "^\[rank [1-9]"
  gzip -f "$OUT"/logs/*.json 2>/dev/null
}
phase_torch() {
  log "PyTorch baselines: DDP fp32, DDP bf16-compressed, FSDP2"
  (cd "$RES" && PYTHONPATH=$ROOT/python run python3 -m torch.distributed.run --nproc_per_node ${NPROC:-2} \
    --master_port 29555 -m lmscale.baseline.ddp --size ${DDP_SIZE:-xl} --precision ${TORCH_PRECISION:-bf16} \
    --impls ${TORCH_IMPLS:-torch-single,torch-ddp,torch-fsdp2} --out .) 2>&1 \
    | tee -a "$OUT/logs/torch_ddp.log" | grep "^\[torch-\|Error"
}
phase_torch_compile() {
  # What a PyTorch user would pick: DDP and FSDP2 over a torch.compile'd model (bf16; compiling xl
  # takes minutes on every rank).
  log "PyTorch baselines compiled: single, DDP, FSDP2"
  (cd "$RES" && PYTHONPATH=$ROOT/python run python3 -m torch.distributed.run --nproc_per_node ${NPROC:-2} \
    --master_port 29556 -m lmscale.baseline.ddp --size ${DDP_SIZE:-xl} --precision bf16 --compile \
    --impls ${TORCH_IMPLS:-torch-single,torch-ddp,torch-fsdp2} --out .) 2>&1 \
    | tee -a "$OUT/logs/torch_ddp.log" | grep "^\[torch-\|Error"
}
phase_tuning() {
  # NCCL given fewer SMs and a high-priority stream, both ways, on the bf16 step (issue 18.1).
  log "bench ddp: NCCL CTA limits and stream priority"
  for knobs in "" "--nccl-high-priority" "--nccl-max-ctas 4" "--nccl-max-ctas 8" "--nccl-max-ctas 4 --nccl-high-priority"; do
    (cd "$RES" && run $L launch -n ${NPROC:-2} -- bench ddp --size ${DDP_SIZE:-xl} --precision bf16 \
      --impls single,bucketed --bucket-mb 25,100 --first-bucket-mb 1 --comm-dtype fp32,bf16 $knobs --out .) 2>&1 \
      | tee -a "$OUT/logs/ddp_tuning.log" | grep -v "^\[rank [1-9]"
  done
}
phase_comm() {
  log "bench comm (NCCL, then Gloo)"
  (cd "$RES" && run $L launch -n ${NPROC:-2} -- bench comm --backend nccl --out .) 2>&1 | tee "$OUT/logs/comm_nccl.log" | grep -v "^\[rank [1-9]"
  (cd "$RES" && run $L launch -n ${NPROC:-2} -- bench comm --backend gloo --warmup 2 --out .) 2>&1 | tee "$OUT/logs/comm_gloo.log" \
    | grep -v "^\[rank [1-9]"
}
phase_zero() {
  log "bench zero"
  (cd "$RES" && run $L launch -n ${NPROC:-2} -- bench zero --size ${DDP_SIZE:-xl} \
    --impls unsharded,zero1-reduce-scatter,zero2 --out .) 2>&1 | tee "$OUT/logs/zero.log" | grep -v "^\[rank [1-9]"
}
phases=("$@")
((${#phases[@]})) || phases=(build tests ddp)
for p in "${phases[@]}"; do
  if (( SECONDS >= DEADLINE - 10 )); then log "skipping $p: deadline"; continue; fi
  "phase_$p" || { log "phase $p failed"; [[ $p == build ]] && break; }
done
# At most 8 files come back: results and logs as two archives (traces are inside logs, gzipped).
(cd "$OUT" && tar czf res.tgz res && tar czf logs.tgz logs && rm -rf res logs)
ls -la "$OUT"
