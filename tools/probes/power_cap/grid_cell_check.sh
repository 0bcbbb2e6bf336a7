#!/usr/bin/env bash
# The grid's 16k x 128 cell, which lost to cuDNN inside the full grid while the same shape alone won (docs/flash_history.md,
# "Through the product, v5.4"), with prebuilt binaries (carry prebuilt), clocks logged. Modes:
#   cell  (default) the shape alone with the grid's 10 iterations and with 50, then the grid's d = 128 row alone;
#   order  the leaderboard and 16k x 128 goals, then the whole grid twice: head dims 128, 80, 64 and 64, 80, 128.
# Usage: tools/probes/power_cap/grid_cell_check.sh OUT [cell|order]
set -uo pipefail
source "$(dirname "$0")/../../../scripts/gpu/script_init.sh" "$@"
MODE=${2:-cell}
RES=$OUT/grid_$MODE
mkdir -p "$RES"
TARBALL=grid_$MODE.tgz
STAGES=" all "
source "$(dirname "$0")/../../../scripts/gpu/timed_stages.sh"
prebuilt_loads >"$RES/prebuilt.log" 2>&1 || { cat "$RES/prebuilt.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$RES/nvidia-smi.txt" 2>&1
log_clocks "$RES/clocks.csv"
BIN=$LMSCALE_BUILD_DIR/lmscale
if [[ $MODE == order ]]; then
  IMPLS=lmscale-flash,sdpa-flash,sdpa-cudnn
  GRID=(bench attention --context 1024,4096,16384,65536 --precision bf16 --heads 16 --impl $IMPLS --warmup 3 --iters 10)
  stage leaderboard 60 "$BIN" bench attention --leaderboard --impl $IMPLS --out leaderboard
  stage d128_16k 60 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --precision bf16 --impl $IMPLS --out d128_16k
  stage grid_128_first 150 "$BIN" "${GRID[@]}" --head-dim 128,80,64 --out grid_128_first
  stage grid 150 "$BIN" "${GRID[@]}" --head-dim 64,80,128 --out grid
  runs=(leaderboard d128_16k grid_128_first grid)
else
  IMPLS=lmscale-flash,sdpa-cudnn
  stage alone10 120 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --impl $IMPLS --warmup 3 --iters 10 --out alone10
  stage alone50 120 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --impl $IMPLS --warmup 3 --iters 50 --out alone50
  stage row128 180 "$BIN" bench attention --context 1024,4096,16384,65536 --head-dim 128 --heads 16 --precision bf16 \
    --impl $IMPLS --warmup 3 --iters 10 --out row128
  runs=(alone10 alone50 row128)
fi
pack
for d in "${runs[@]}"; do echo "== $d"; grep -E '\| bf16' "$RES/$d/attention.md"; done
