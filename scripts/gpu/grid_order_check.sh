#!/usr/bin/env bash
# The product's attention goals on a second H100 with prebuilt binaries, and the grid in both head-dim orders (the
# 16k x 128 cell loses to cuDNN only inside the full grid: docs/flash_notes.md, "Through the product, v5.4").
# Usage: scripts/gpu/grid_order_check.sh OUT   (carry prebuilt)
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
RES=$OUT/grid_order
mkdir -p "$RES"
TARBALL=grid_order.tgz
STAGES=" all "
source "$(dirname "$0")/timed_stages.sh"
prebuilt_loads >"$RES/prebuilt.log" 2>&1 || { cat "$RES/prebuilt.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,serial --format=csv >"$RES/nvidia-smi.txt" 2>&1
log_clocks "$RES/clocks.csv"
BIN=$LMSCALE_BUILD_DIR/lmscale
IMPLS=lmscale-flash,sdpa-flash,sdpa-cudnn
GRID=(bench attention --context 1024,4096,16384,65536 --precision bf16 --heads 16 --impl $IMPLS --warmup 3 --iters 10)
stage leaderboard 60 "$BIN" bench attention --leaderboard --impl $IMPLS --out leaderboard
stage d128_16k 60 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --precision bf16 --impl $IMPLS --out d128_16k
stage grid_128_first 150 "$BIN" "${GRID[@]}" --head-dim 128,80,64 --out grid_128_first
stage grid 150 "$BIN" "${GRID[@]}" --head-dim 64,80,128 --out grid
pack
for d in leaderboard d128_16k; do grep -E '\| bf16' "$RES/$d/attention.md"; done
for d in grid_128_first grid; do echo "== $d"; grep -E '128 +\| 16384' "$RES/$d/attention.md"; done
