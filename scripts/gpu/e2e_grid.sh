#!/usr/bin/env bash
# The issue-16 grid on one GPU, one size per invocation: lmscale against the strongest PyTorch paths
# (torch-eager with SDPA, torch.compile of the whole model in default and reduce-overhead mode), bf16,
# train step, contexts 128-1024, each size's ratios from one run. A size can take longer than one
# 10-minute call of the device tool (whole-model compiles of xl and 2.7B), so the sweep runs in its
# own process session on the GPU machine and outlives the call; `wait` follows it and copies what it
# has into OUT, so every call brings back the results so far.
#
#   scripts/gpu/e2e_grid.sh OUT build                build the CLI into $LMSCALE_BUILD_DIR (script_init.sh)
#   scripts/gpu/e2e_grid.sh OUT start SIZE           start SIZE's sweep in the background (one at a time)
#   scripts/gpu/e2e_grid.sh OUT wait [SECONDS]       follow it for up to SECONDS (default 540); exit 0 once
#                                                    it ended, 3 while it still runs (call wait again)
#   scripts/gpu/e2e_grid.sh OUT status               what runs, and the last lines of its log
#
# e.g. one device call: scripts/gpu/e2e_grid.sh $OUT build && scripts/gpu/e2e_grid.sh $OUT start small &&
#      scripts/gpu/e2e_grid.sh $OUT wait 480     (then `wait 570` in the next calls until it says ended)
#
# OUT receives e2e_grid/e2e.{jsonl,md} (every size run on this machine so far) and SIZE.log. Results stay
# in $LMSCALE_BUILD_DIR/results/e2e_grid while the machine is held; on a fresh machine, put the last
# OUT/e2e_grid folder into .gpu-carry/e2e_grid, carry it, and `start` goes on from it (--resume: a size
# cut between two machines gets its cross-run ratios marked † in the table, so run it again whole).
# Knobs: CONTEXTS (128,256,512,1024), IMPLS (torch-eager,torch-compile,torch-compile-ro), ATTENTION
# (flash), WARMUP / STEPS (5 / 10), LMSCALE_COMMIT (the GPU machine has no .git), LMSCALE_PYTHON.
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
ACTION=${2:?usage: $0 OUT build|start SIZE|wait [SECONDS]|status}
RES=$LMSCALE_BUILD_DIR/results
PIDFILE=$RES/e2e_grid.pid
source "$ROOT/scripts/gpu/background_job.sh"
CONTEXTS=${CONTEXTS:-128,256,512,1024}
IMPLS=${IMPLS:-torch-eager,torch-compile,torch-compile-ro}
mkdir -p "$RES/e2e_grid"

size_of_run() { cat "$RES/e2e_grid.size" 2>/dev/null; }
bring_back() {
  cp -r "$RES/e2e_grid" "$OUT/" 2>/dev/null
  local size; size=$(size_of_run)
  [[ -n $size ]] && cp "$RES/$size.log" "$OUT/" 2>/dev/null && tail -n 25 "$RES/$size.log"
}

case $ACTION in
  build)
    LMSCALE_BUILD_TARGETS=lmscale_cli "$ROOT/lmscale" build >"$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; exit 1; }
    echo "built $LMSCALE_BUILD_DIR/lmscale"
    ;;
  start)
    SIZE=${3:?usage: $0 OUT start SIZE (small, medium, large, xl, 2.7B)}
    job_running && { echo "the $(size_of_run) sweep is still running (pid $(cat "$PIDFILE")): wait for it first"; exit 2; }
    [[ -x $LMSCALE_BUILD_DIR/lmscale ]] || { echo "no $LMSCALE_BUILD_DIR/lmscale: run '$0 OUT build' first"; exit 2; }
    job_resume_from_carry e2e_grid "$RES/e2e_grid"
    # The interpreter with torch that ./lmscale would pick (the GPU machines have it as python3).
    export LMSCALE_PYTHON=${LMSCALE_PYTHON:-$(command -v python3)}
    echo "$SIZE" >"$RES/e2e_grid.size"
    cd "$RES" || exit 1  # so the recorded command names a relative --out (no machine's folders)
    job_start "$RES/$SIZE.log" "$LMSCALE_BUILD_DIR/lmscale" bench --size "$SIZE" --context "$CONTEXTS" \
      --precision bf16 --mode train-step --attention "${ATTENTION:-flash}" --warmup "${WARMUP:-5}" \
      --steps "${STEPS:-10}" --impl "lmscale,$IMPLS" --resume --out e2e_grid
    echo "started $SIZE (pid $(cat "$PIDFILE")): contexts $CONTEXTS, bf16 train step, baselines $IMPLS"
    ;;
  wait)
    job_wait "${3:-540}" bring_back "$(size_of_run)"
    ;;
  status)
    if job_running; then echo "running: $(size_of_run) (pid $(cat "$PIDFILE"))"; else echo "nothing running"; fi
    bring_back
    ;;
  *) echo "unknown action '$ACTION': use build, start SIZE, wait [SECONDS] or status"; exit 2 ;;
esac
