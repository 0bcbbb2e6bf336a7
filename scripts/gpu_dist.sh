#!/usr/bin/env bash
# GPU run of the distributed part (2 GPUs): build, NCCL equivalence tests, `bench comm` (NCCL and
# Gloo), `bench ddp` (+ PyTorch DDP baseline), `bench zero`. Everything lands in $OUT (JSONL, MD,
# logs, traces tarred). Called through the device tool on nvidia-h200-x2, e.g.
#   LMSCALE_COMMIT=abc1234 bash scripts/gpu_dist.sh build tests comm ddp torch zero
# Phases run in the order given; BUILD_TARGETS limits the build (e.g. lmscale_cli only).
# LMSCALE_SRC: source tree to build (default: this checkout; a clean snapshot can be carried).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${LMSCALE_SRC:-$ROOT}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT/res" "$OUT/traces"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LMSCALE_COMMIT=${LMSCALE_COMMIT:-unknown} PYTHONUNBUFFERED=1
B=/tmp/b
L=$B/lmscale
log() { echo "[gpu_dist $(date +%T)] $*"; }
phase_build() {
  # Configure as ./lmscale build does, but build only the targets this run needs.
  log "build ($SRC) targets: ${BUILD_TARGETS:-lmscale_cli lmscale_tests}"
  [[ -e $SRC/.deps ]] || ln -s "$ROOT/.deps" "$SRC/.deps"
  bash "$SRC/scripts/bundle_deps.sh" >/dev/null
  local prefix; prefix=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
  { cmake -S "$SRC" -B $B -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$(command -v python3)" \
      -DLMSCALE_PYTHON_EXE="$(command -v python3)" -DLMSCALE_FA_HEADDIMS=64 &&
    cmake --build $B -j "${LMSCALE_JOBS:-30}" --target ${BUILD_TARGETS:-lmscale_cli lmscale_tests}; } \
    >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
  python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
  nvidia-smi topo -m 2>/dev/null | head -n 5
}
phase_tests() {
  log "dist tests (Gloo + NCCL)"
  (cd $B && ./lmscale_tests --gtest_filter='Dist*:Bucketing*' 2>&1 | tail -n 30) | tee "$OUT/tests.log"
}
phase_comm() {
  log "bench comm"
  $L launch -n 2 -- bench comm --backend nccl,gloo --out "$OUT/res" 2>&1 | tee "$OUT/comm.log"
}
phase_ddp() {
  log "bench ddp"
  $L launch -n 2 -- bench ddp --size ${DDP_SIZE:-xl} --precision fp32,bf16 --trace-dir "$OUT/traces" \
    --out "$OUT/res" 2>&1 | tee "$OUT/ddp.log"
}
phase_torch() {
  log "PyTorch DDP baseline"
  python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29555 "$SRC/scripts/torch_ddp_baseline.py" \
    --size ${DDP_SIZE:-xl} --precision fp32,bf16 --out "$OUT/res" 2>&1 | grep -v "^W1\|OMP_NUM" | tee "$OUT/torch_ddp.log"
}
phase_zero() {
  log "bench zero"
  $L launch -n 2 -- bench zero --size ${DDP_SIZE:-xl} --out "$OUT/res" 2>&1 | tee "$OUT/zero.log"
}
for p in "$@"; do
  "phase_$p"
done
# At most 8 files come back: tar the traces, keep results and logs as they are.
if compgen -G "$OUT/traces/*.json" >/dev/null; then
  (cd "$OUT" && tar czf traces.tgz traces && rm -rf traces)
fi
(cd "$OUT" && tar czf logs.tgz ./*.log 2>/dev/null && rm -f ./*.log; tar czf res.tgz res && true)
ls -la "$OUT"
