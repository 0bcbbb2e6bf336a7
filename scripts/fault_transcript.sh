#!/usr/bin/env bash
# Re-runs every fault of issue 21's table on a CPU machine (Gloo for the distributed rows) and prints
# each command with its output and exit status, and a verdict per row computed from what happened,
# as a transcript to commit under docs/results/. The GPU row (a CUDA-graph capture failure on an
# H100) is left as a section for a GPU run to fill.
#   1 SIGTERM in the middle of a sweep        8 a rank stops answering (SIGSTOP)
#   2 the results folder's disk fills up      9 a rank is killed
#   3 `report` over damaged records          10 SIGTERM to `launch`
#   4 hostile paths through every subprocess 11 the rendezvous store's address
#   5 CPU out of memory in a sweep           12 bad values through the CLI and the Python API
#   6 CUDA-graph capture failure (GPU)       13 the test suite's temporary folders
#   7 the baseline interpreter has no torch  14 no shell in src/
# Usage: scripts/fault_transcript.sh [> docs/results/fault_transcript.md]
# Needs a built binary and test binary ($LMSCALE_BUILD_DIR, default build/) and, for row 12's Python
# line, an interpreter with torch ($LMSCALE_PYTHON). Root (for a real 12 KiB tmpfs in row 2) is optional.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${LMSCALE_BUILD_DIR:-$ROOT/build}" 2>/dev/null && pwd)
BIN=$BUILD/lmscale
[[ -x $BIN ]] || { echo "no binary at $BIN: run ./lmscale build first (or set LMSCALE_BUILD_DIR)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lmscale-faults-XXXXXX")
MNT=""
BODY=$T/body.md
cleanup() { [[ -n $MNT ]] && umount "$MNT" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
cd "$T" || exit 1
export LMSCALE_COMMIT=${LMSCALE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
lmscale() { "$BIN" "$@"; }
# The transcript names no machine's folders: the temp folder, the repo, the build and the interpreter.
hide_paths() {
  sed -e "s|$T|\$T|g" -e "s|$BUILD/|<build>/|g" -e "s|$ROOT/||g" ${LMSCALE_PYTHON:+-e "s|$LMSCALE_PYTHON|<python>|g"}
}
declare -a VERDICT ROWNAME
verdict() { VERDICT[$1]=$2; echo "**Verdict: $2**"; echo; }

# Prints a command as typed (the temp folder as $T), runs it, prints its output and exit status.
RC=0
run() {
  echo '```'
  { printf '$'; printf ' %q' "$@"; echo; } | hide_paths
  "$@" >"$T/last.out" 2>&1
  RC=$?
  hide_paths <"$T/last.out"
  echo "[exit status $RC]"
  echo '```'
  echo
}
# run_bg NAME CMD...: starts CMD in the background (output into $T/NAME.out), its pid in BG.
BG=0
run_bg() {
  local name=$1
  shift
  echo '```'
  { printf '$'; printf ' %q' "$@"; echo ' &'; } | hide_paths
  local cmd=("$@")
  [[ ${cmd[0]} == lmscale ]] && cmd[0]=$BIN  # the binary itself, so BG is its pid (signals reach it)
  "${cmd[@]}" >"$T/$name.out" 2>&1 &
  BG=$!
}
# finish_bg NAME: waits for the background command, prints its output and exit status.
finish_bg() {
  wait "$BG"
  RC=$?
  hide_paths <"$T/$1.out"
  echo "[exit status $RC]"
  echo '```'
  echo
}
# until_seen FILE PATTERN [SECONDS]: waits until FILE holds a line matching PATTERN (gives up when
# the background command ended or after SECONDS).
until_seen() {
  local t0=$SECONDS
  until grep -q -- "$2" "$1" 2>/dev/null; do
    ((SECONDS - t0 > ${3:-180})) && return 1
    kill -0 "$BG" 2>/dev/null || return 1
    sleep 0.2
  done
}
# rank_pid LAUNCH_PID RANK: the pid of that rank among the launcher's children.
rank_pid() {
  local c
  for c in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$c"; return; }
  done
}
# Every line of a .jsonl is a whole JSON object? (Also prints the records' statuses by config.)
check_lines() {
  python3 - "$@" <<'EOF'
import collections, json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
tail = lines.pop()  # after the last newline: empty when every line is whole
bad, configs = [], collections.Counter()
for n, l in enumerate(lines, 1):
    try:
        r = json.loads(l)
        configs[(r.get("context"), r.get("mode"), r.get("impl"), r.get("status", "ok"))] += r.get("metric") in ("step_ms", "status")
    except ValueError:
        bad.append(n)
print(f"{len(lines)} lines, all whole JSON objects" if not bad and not tail
      else f"damaged: lines {bad}, trailing partial line {tail[:60]!r}")
print(f"{len(configs)} configs: " + ", ".join(f"{c}/{m}/{i} {s}" + (f" x{k}" if k != 1 else "")
                                           for (c, m, i, s), k in sorted(configs.items(), key=str)))
EOF
}
TINY=(--device cpu --size tiny --precision fp32 --batch 2 --warmup 1 --steps 2)  # --mode train-step unless said
DDP=(bench ddp --backend gloo --size tiny --context 64 --precision fp32 --impl bucketed --warmup 1)
# start_ddp NAME OUT [launch options]: `launch -n 2 -- bench ddp` in the background for many steps,
# returning once its ranks are 8 s into the run.
start_ddp() {
  local name=$1 out=$2
  shift 2
  run_bg "$name" lmscale launch -n 2 "$@" -- "${DDP[@]}" --steps 100000 --out "$out"
  until_seen "$T/$name.out" "OMP_NUM_THREADS" 60
  sleep 8
}
# signal_rank NAME SIGNAL RANK: sends SIGNAL to that rank of the start_ddp run, then waits for the
# launcher (finish_bg); sets TARGET (the rank's pid) and TOOK (seconds from the signal to the end).
TARGET=0 TOOK=0
signal_rank() {
  TARGET=$(rank_pid "$BG" "$3")
  kill "-$2" "$TARGET"
  local t0=$SECONDS
  echo "(SIG$2 sent to rank $3 after 8 s)"
  finish_bg "$1"
  TOOK=$((SECONDS - t0))
  echo "The launcher returned $TOOK s after the SIG$2."
  echo
}
free_port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

{
ROWNAME[1]="SIGTERM in the middle of a 16-config sweep"
echo "## 1. ${ROWNAME[1]}"
echo
run_bg term lmscale bench "${TINY[@]}" --mode forward,train-step --context 16,24,32,40,48,56,64,72 --out "$T/term"
until_seen "$T/term.out" "^\[6/16"
kill -TERM "$BG"
echo "(SIGTERM sent while config 6 of 16 ran)"
finish_bg term
run check_lines "$T/term/e2e.jsonl"
kept=$(grep -c "^| tiny" "$T/term/e2e.md" 2>/dev/null)
echo "The markdown table has $kept rows."
echo
run lmscale bench "${TINY[@]}" --mode forward,train-step --context 16,24,32,40,48,56,64,72 --out "$T/term" --resume
remeasured=$(grep -c "^\[[0-9]*/" "$T/last.out")
run check_lines "$T/term/e2e.jsonl"
if grep -q "16 configs: " "$T/last.out" && ! grep -q " x[0-9]" "$T/last.out" && ((kept + remeasured == 16)); then
  verdict 1 "✓ $kept configs kept, the --resume run measured the other $remeasured, no config twice"
else
  verdict 1 "✗ kept $kept, re-measured $remeasured (see above)"
fi

ROWNAME[2]="the results folder's disk fills up during a sweep"
echo "## 2. The results folder's disk fills up during a sweep"
echo
mkdir -p full
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=12k tmpfs full 2>/dev/null; then
  MNT=$T/full
  echo "A 12 KiB tmpfs is mounted on \`\$T/full\`."
else
  ln -s /dev/full full/e2e.jsonl
  echo "(No root or no mount here: \`\$T/full/e2e.jsonl\` is a link to /dev/full, whose writes fail with ENOSPC.)"
fi
echo
run lmscale bench "${TINY[@]}" --mode train-step --context 16,32,64,128,256,512 --out "$T/full"
full_rc=$RC
full_said=$(grep -c "No space left on device" "$T/last.out")
whole=1
if [[ -f full/e2e.jsonl && ! -L full/e2e.jsonl ]]; then
  run check_lines "$T/full/e2e.jsonl"
  grep -q "all whole JSON objects" "$T/last.out" || whole=0
fi
[[ -n $MNT ]] && { umount "$MNT"; MNT=""; }
((full_rc != 0 && full_said > 0 && whole)) && verdict 2 "✓ the loss is reported with the path and ENOSPC, exit status $full_rc, only whole lines on disk" ||
  verdict 2 "✗ exit status $full_rc, reported: $full_said, whole lines: $whole"

ROWNAME[3]="\`lmscale report\` over a folder with a truncated line"
echo "## 3. \`lmscale report\` over damaged records"
echo
run lmscale bench "${TINY[@]}" --mode train-step --context 16 --out "$T/run1"
mkdir -p run2
cp run1/e2e.jsonl run2/e2e.jsonl
head -c 200 run1/e2e.jsonl >>run2/e2e.jsonl  # a line cut short, as a full disk left it before
printf '\x00\x01 not a record\n' >run2/garbage.jsonl
: >run2/empty.jsonl
echo "\`\$T/run2/e2e.jsonl\` ends in a line cut after 200 bytes; \`garbage.jsonl\` is not JSON; \`empty.jsonl\` is empty."
echo
run lmscale report --in "$T/run1" --in "$T/run2" --out "$T/report" --no-plots
report_rc=$RC
grep -q "e2e.jsonl:7: not valid JSON" "$T/last.out" && grep -q "2 damaged lines skipped" "$T/last.out" && ok3=1 || ok3=0
run ls "$T/report"
((report_rc == 0 && ok3)) && verdict 3 "✓ each bad line skipped with file:line, the rest merged, the count said at the end" ||
  verdict 3 "✗ exit status $report_rc (see above)"

ROWNAME[4]="\`lmscale report --out\` with a quote, spaces, \$() and ; in the path"
echo "## 4. Paths with quotes, spaces, \$() and ; through \`report --out\` and the plot subprocess"
echo
OUT1="$T/x';touch $T/PWNED;'"
OUT2="$T/a b \$(touch $T/PWNED2) ; c\`touch $T/PWNED3\`"
run lmscale report --in "$T/run1" --out "$OUT1"
run lmscale report --in "$T/run1" --out "$OUT2"
run ls -A "$T"
pwned=0
for f in PWNED PWNED2 PWNED3; do
  if [[ -e $T/$f ]]; then echo "**$f exists: a shell read a path**"; pwned=1; else echo "- \`\$T/$f\` does not exist: no shell read the path."; fi
done
echo
[[ -d $OUT1 && -d $OUT2 ]] && ((pwned == 0)) && verdict 4 "✓ both folders written under their literal names, nothing executed" ||
  verdict 4 "✗ (see above)"

ROWNAME[5]="CPU out of memory (\`--context 100000\`)"
echo "## 5. CPU out of memory in a sweep"
echo
run lmscale bench "${TINY[@]}" --mode train-step --context 16,100000,32 --out "$T/oom"
oom_rc=$RC
run check_lines "$T/oom/e2e.jsonl"
grep -q "100000/train-step/lmscale oom" "$T/last.out" && grep -q "16/train-step/lmscale ok" "$T/last.out" &&
  grep -q "32/train-step/lmscale ok" "$T/last.out" && ok5=1 || ok5=0
((oom_rc == 0 && ok5)) && verdict 5 "✓ the CPU allocator's error is an oom cell with its reason on its own line, the next config measured, exit status 0 (out of memory is a result)" ||
  verdict 5 "✗ exit status $oom_rc (see above)"

ROWNAME[6]="CUDA-graph capture fails (H100)"
echo "## 6. CUDA-graph capture fails (2.7B, \`--cuda-graph\`, H100)"
echo
# This CPU machine cannot make a capture fail: the row reads the records of the last H100 run
# (scripts/gpu/session_check.sh, stage capture-fault, copied into docs/results/h100_check/capture_fault/).
H100=$ROOT/docs/results/h100_check/capture_fault
echo "From the last H100 run, \`docs/results/h100_check/capture_fault/\` (its README names the commit and command):"
echo
echo '```'
echo "\$ LMSCALE_INJECT_FAULT=capture-sync@small,capture@medium lmscale bench --size small,medium,large --context 128 --warmup 1 --steps 3 --out capture_fault"
cat "$H100/stderr.log" 2>/dev/null || echo "(no H100 run recorded: run the capture-fault stage of scripts/gpu/session_check.sh)"
echo '```'
echo
# small: eager after a failed capture (a note, measured); medium: capture-failed; large: measured with its graph.
if python3 - "$H100/e2e.jsonl" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def cell(size):
    return [r for r in rows if r.get("size") == size and r.get("metric") == "step_ms"]
small, medium, large = cell("small"), cell("medium"), cell("large")
ok = (small and not small[0].get("cuda_graph") and "capture failed" in small[0].get("cuda_graph_note", "")
      and any(r.get("status") == "capture-failed" for r in rows if r.get("size") == "medium")
      and large and large[0].get("cuda_graph") and large[0].get("status", "ok") == "ok")
sys.exit(0 if ok else 1)
PY
then
  VERDICT[6]="✓ a real capture failure falls back to eager with a note, an escaping one is a \`capture-failed\` cell, the next config is measured with its graph (H100 records)"
else
  VERDICT[6]="✗ or not run: see section 6"
fi

ROWNAME[7]="the PyTorch baseline process fails (no torch in the interpreter)"
echo "## 7. The baseline interpreter has no torch"
echo
python3 -m venv --without-pip "$T/no-torch" >/dev/null 2>&1
echo "\`\$T/no-torch\` is a fresh virtual environment: a Python without torch."
echo
LMSCALE_PYTHON=$T/no-torch/bin/python run lmscale bench "${TINY[@]}" --mode train-step --context 16 --impl lmscale,torch-eager --out "$T/nobase"
base_rc=$RC
grep -q "exited with code 1" "$T/last.out" && grep -q "set LMSCALE_PYTHON" "$T/last.out" && ok7=1 || ok7=0
run check_lines "$T/nobase/e2e.jsonl"
grep -q "16/train-step/lmscale ok" "$T/last.out" && grep -q "16/train-step/torch-eager error" "$T/last.out" || ok7=0
((base_rc != 0 && ok7)) && verdict 7 "✓ an error cell with the real exit code and the fix (LMSCALE_PYTHON), lmscale measured, exit status $base_rc" ||
  verdict 7 "✗ exit status $base_rc (see above)"

ROWNAME[8]="a rank stops answering (SIGSTOP on rank 1, \`LMSCALE_DIST_TIMEOUT_S=10\`)"
echo "## 8. A rank stops answering"
echo
LMSCALE_DIST_TIMEOUT_S=10 start_ddp stuck "$T/stuck"
signal_rank stuck STOP 1
kill -CONT "$TARGET" 2>/dev/null; kill -KILL "$TARGET" 2>/dev/null
grep -q "rank 0 of 2: .* timed out" "$T/stuck.out" && grep -q "LMSCALE_DIST_TIMEOUT_S" "$T/stuck.out" &&
  grep -q "rank 0 failed first" "$T/stuck.out" && ok8=1 || ok8=0
((RC != 0 && ok8 && TOOK < 60)) && verdict 8 "✓ rank 0 stops after the timeout naming itself, the collective and the setting; the launcher stops rank 1" ||
  verdict 8 "✗ exit status $RC after $TOOK s (see above)"

ROWNAME[9]="a rank is killed (Gloo here; NCCL on 2×H200 before)"
echo "## 9. A rank is killed"
echo
start_ddp killed "$T/killed"
R0=$(rank_pid "$BG" 0)
signal_rank killed KILL 1
echo "Rank 0 (pid $R0) is $(kill -0 "$R0" 2>/dev/null && echo 'still running' || echo 'gone')."
echo
grep -q "rank 1 failed first (killed by signal" "$T/killed.out" && ! kill -0 "$R0" 2>/dev/null && ok9=1 || ok9=0
((RC != 0 && ok9 && TOOK < 30)) && verdict 9 "✓ the other rank stopped, the launcher names the rank and the signal" ||
  verdict 9 "✗ exit status $RC after $TOOK s (see above)"

ROWNAME[10]="SIGTERM to \`launch\`"
echo "## 10. SIGTERM to \`launch\`"
echo
PORT=$(free_port)
start_ddp term_launch "$T/tl" --master-port "$PORT"
RANKS=$(pgrep -P "$BG" | tr '\n' ' ')
# Row 11 looks at the same run: rank 0's listening sockets while it trains.
ss -ltnp 2>/dev/null | grep "pid=$(rank_pid "$BG" 0)," >"$T/listen.txt"
kill -TERM "$BG"
echo "(SIGTERM sent to the launcher after 8 s; its ranks were pids $RANKS)"
finish_bg term_launch
# Alive = a process that still runs (a zombie waiting for its new parent to reap it has ended).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }
left=""
for _ in $(seq 1 25); do
  left=""
  for p in $RANKS; do alive "$p" && left+="$p "; done
  [[ -z $left ]] && break
  sleep 0.2
done
echo "Ranks still running: ${left:-none} (the ranks die with their launcher: PR_SET_PDEATHSIG)."
echo
[[ -z $left ]] && verdict 10 "✓ every rank gone, no orphans" || verdict 10 "✗ left: $left"

ROWNAME[11]="the rendezvous store's address"
echo "## 11. The rendezvous store's address"
echo
echo "Rank 0's listening TCP sockets during the run of section 10 (\`ss -ltnp\`; the store is on port $PORT):"
echo
echo '```'
sed -e 's/users:.*//' "$T/listen.txt"
echo '```'
echo
if grep -q "127.0.0.1:$PORT " "$T/listen.txt" && ! grep -Eq "(\*|0\.0\.0\.0|\[::\]):$PORT " "$T/listen.txt"; then
  verdict 11 "✓ the store listens on 127.0.0.1 only (every rank is local)"
else
  verdict 11 "✗ the store's port $PORT is not bound to loopback only (see above)"
fi

ROWNAME[12]="bad values through the CLI and the Python API"
echo "## 12. Bad values through the CLI and the Python API"
echo
ok12=1
for args in "bench --size huge" "bench --context 0" "bench --precision fp8" "launch -n 0 -- bench"; do
  # shellcheck disable=SC2086
  run lmscale $args
  ((RC != 0)) && (($(wc -l <"$T/last.out") <= 3)) && grep -q "error" "$T/last.out" || ok12=0
done
PY=${LMSCALE_PYTHON:-}
if [[ -n $PY ]] && "$PY" -c "import torch" 2>/dev/null; then
  PYTHONPATH=$ROOT/python LMSCALE_BUILD_DIR=$BUILD run "$PY" -c "import torch, lmscale
try:
    lmscale.flash_attention(torch.randn(2, 8, 16), torch.randn(2, 8, 16), torch.randn(2, 8, 32))
except Exception as e:
    print(type(e).__name__ + ':', e)"
  grep -q "Error:" "$T/last.out" && (($(wc -l <"$T/last.out") <= 3)) || ok12=0
else
  echo "(No interpreter with torch in LMSCALE_PYTHON: the Python line is skipped.)"
  echo
fi
((ok12)) && verdict 12 "✓ one-line errors that name the value and what is allowed" || verdict 12 "✗ (see above)"

ROWNAME[13]="the test suite's temporary folders"
echo "## 13. The test suite's temporary folders"
echo
mkdir -p "$T/tmp"
TESTS=$BUILD/lmscale_tests
if [[ -x $TESTS ]]; then
  TMPDIR=$T/tmp run "$TESTS" --gtest_filter='Record*:Results*:Report*:SweepFaults*:CliUsage*' --gtest_brief=1
  tests_rc=$RC
  run ls -A "$T/tmp"
  [[ -z $(ls -A "$T/tmp") && $tests_rc == 0 ]] && verdict 13 "✓ the tests pass and leave nothing in their temporary directory" ||
    verdict 13 "✗ exit status $tests_rc, left: $(ls -A "$T/tmp" | head -3 | tr '\n' ' ')"
else
  echo "(No test binary at <build>/lmscale_tests: build it with \`./lmscale test\` or LMSCALE_BUILD_TARGETS=lmscale_tests.)"
  echo
  VERDICT[13]="(not run: no test binary)"
fi

ROWNAME[14]="nothing in src/ calls std::system or popen"
echo "## 14. No shell in src/"
echo
run grep -rnE '(^|[^_a-zA-Z])system\(|popen\(' "$ROOT/src"
((RC == 1)) && verdict 14 "✓ no system( or popen( call anywhere in src/" || verdict 14 "✗ (see above)"
} >"$BODY"

echo "# Issue 21's faults, re-run ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $LMSCALE_COMMIT, CPU, Gloo)"
echo
echo "Commands as run by \`scripts/fault_transcript.sh\`; \`\$T\` is a fresh temporary folder, \`<build>\` the build"
echo "folder. Each verdict is computed by the script from what happened (the checks are in the script)."
echo
echo "| # | fault | verdict |"
echo "|---|---|---|"
for i in $(seq 1 14); do echo "| $i | ${ROWNAME[$i]} | ${VERDICT[$i]:-?} |"; done
echo
cat "$BODY"
