#!/usr/bin/env bash
# Why the grid's 16k x 128 cell loses to cuDNN while the same shape alone wins (docs/flash_notes.md, backward v5.4):
# the shape alone with the grid's 10 iterations and with 50, then the grid's d = 128 row alone, clocks logged.
# Usage: scripts/gpu/grid_cell_check.sh OUT   (carry prebuilt)
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
RES=$OUT/grid_cell
mkdir -p "$RES"
TARBALL=grid_cell.tgz
STAGES=" all "
source "$(dirname "$0")/timed_stages.sh"
prebuilt_loads >"$RES/prebuilt.log" 2>&1 || { cat "$RES/prebuilt.log"; exit 1; }
log_clocks "$RES/clocks.csv"
BIN=$LMSCALE_BUILD_DIR/lmscale
IMPLS=lmscale-flash,sdpa-cudnn
stage alone10 120 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --impl $IMPLS --warmup 3 --iters 10 --out alone10
stage alone50 120 "$BIN" bench attention --context 16384 --head-dim 128 --heads 16 --impl $IMPLS --warmup 3 --iters 50 --out alone50
stage row128 180 "$BIN" bench attention --context 1024,4096,16384,65536 --head-dim 128 --heads 16 --impl $IMPLS --warmup 3 --iters 10 --out row128
pack
for d in alone10 alone50 row128; do grep -E '\| bf16' "$RES/$d/attention.md"; done
