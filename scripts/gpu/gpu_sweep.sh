#!/usr/bin/env bash
# The full e2e table with PyTorch baselines (stage e2e-compare of gpu_check.sh) as ONE invocation that
# outlives the device tool's 10-minute calls: `start` launches the sweep in its own process session
# on the GPU machine (it runs on between calls while the machine is held), `wait` follows it for at
# most N seconds and sends back what it has. One invocation means every ratio in the table is
# measured in one run, on one machine: none is marked † (docs/bench_compare.md).
#
#   scripts/gpu/gpu_sweep.sh OUT start [SIZES]   build first (gpu_check.sh OUT build); SIZES default all five
#   scripts/gpu/gpu_sweep.sh OUT wait [SECONDS]  follow the running sweep (default 560 s); rc 0 once it ended
#
# A machine given back mid-sweep loses the process. To go on from a fresh machine, unpack the last
# results.tgz into .gpu-carry/ here, carry it, and `start` again: it copies those results in, drops
# the records of any size the lost run had not finished (so a size is never split over two runs,
# i.e. two machines), and resumes. LMSCALE_COMMIT names the commit (the GPU machine has no .git).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"
ACTION=${2:?usage: $0 OUT start|wait [arg]}
RES=$LMSCALE_BUILD_DIR/results
SWEEP=$RES/e2e_compare
PIDFILE=$RES/sweep.pid
source "$ROOT/scripts/gpu/background_job.sh"
CONTEXTS=128,256,512,1024 PRECISIONS=fp32,bf16 MODES=forward,forward-backward,train-step
IMPLS=torch-eager,torch-compile
count() { tr , '\n' <<<"$1" | wc -l; }
CELLS=$(( $(count $CONTEXTS) * $(count $PRECISIONS) * $(count $MODES) * (1 + $(count $IMPLS)) ))  # per size
mkdir -p "$SWEEP"
pack() {
  tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null
  tail -c 4000 "$RES/sweep.log" 2>/dev/null
}

case $ACTION in
  start)
    job_running && { echo "a sweep is already running (pid $(cat "$PIDFILE"))"; exit 0; }
    SIZES=${3:-small,medium,large,xl,2.7B}
    echo "$SIZES" >"$RES/sweep.sizes"
    job_resume_from_carry e2e_compare "$SWEEP"
    if [[ -s $SWEEP/e2e.jsonl ]]; then
      # Keep only sizes with every cell (configs × impls); the rest is measured again, whole.
      python3 - "$SWEEP/e2e.jsonl" "$CELLS" <<'EOF'
import collections, json, sys
path = sys.argv[1]
lines = open(path).read().splitlines()
records = []
for line in lines:
    try:
        records.append((line, json.loads(line)))
    except ValueError:
        pass  # a line cut by the lost machine
cells = collections.defaultdict(set)
for _, r in records:
    if r.get("metric") == "step_ms" or r.get("status") == "oom":
        cells[r["size"]].add((r["context"], r["precision"], r["mode"], r["impl"]))
whole = {s for s, c in cells.items() if len(c) == int(sys.argv[2])}
open(path, "w").write("".join(line + "\n" for line, r in records if r.get("size") in whole))
print("kept whole sizes:", sorted(whole) or "none", "; dropped:", sorted(set(cells) - whole) or "none")
EOF
    fi
    cd "$RES" || exit 1  # so the recorded command names a relative --out (no machine's folders)
    job_start "$RES/sweep.log" timeout 3000 "$LMSCALE_BUILD_DIR/lmscale" bench --size "$SIZES" \
      --context "$CONTEXTS" --precision "$PRECISIONS" --mode "$MODES" --warmup 2 --steps 5 \
      --impl "lmscale,$IMPLS" --resume --out e2e_compare
    echo "sweep started (pid $(cat "$PIDFILE"), sizes $SIZES)"
    ;;
  wait)
    job_wait "${3:-560}" pack "sizes $(cat "$RES/sweep.sizes" 2>/dev/null)"
    ;;
  *) echo "unknown action $ACTION: use start or wait"; exit 2 ;;
esac
