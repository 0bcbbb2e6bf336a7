#!/usr/bin/env bash
# Re-runs every fault of issues 21, 29 and 41 on a CPU machine (Gloo for the distributed rows) and prints
# each command with its output and exit status, and a verdict per row computed from that row's own
# run (never copied, never typed), as a transcript to commit under docs/results/. Exits 1 when any row
# is ✗, so CI (ctest Faults.Transcript) fails on a fault that no longer holds. Rows that need a GPU
# (21.6: a CUDA-graph capture failure) say "not run" with the command that runs them.
# Usage: scripts/fault_transcript.sh [--rows 21.1,29.4,41.2,...] [> docs/results/fault_transcript.md]
#        scripts/fault_transcript.sh --out FILE    # the transcript into FILE, its table on stdout (CI)
#        scripts/fault_transcript.sh --self-test   # one row ✗ by construction: must exit 1
# Needs a built binary and test binary ($LMSCALE_BUILD_DIR, default build/); an interpreter with torch
# in $LMSCALE_PYTHON for row 21.12's Python line (else skipped). Root (a real 12 KiB tmpfs in row
# 21.2) is optional.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ONLY=""
SELF_TEST=0
OUT_FILE=""
while (($#)); do
  case $1 in
    --rows) ONLY=",$2,"; shift 2 ;;
    --out) OUT_FILE=$2; shift 2 ;;
    --self-test) SELF_TEST=1; shift ;;
    *) echo "fault_transcript.sh: unknown argument '$1' (use --rows 21.1,29.4 or --self-test)" >&2; exit 2 ;;
  esac
done
[[ -n $OUT_FILE && $OUT_FILE != /* ]] && OUT_FILE=$PWD/$OUT_FILE  # the rows run in other folders
BUILD=$(cd "${LMSCALE_BUILD_DIR:-$ROOT/build}" 2>/dev/null && pwd)
BIN=${BUILD:-/nonexistent}/lmscale
[[ -x $BIN ]] || { echo "no binary at $BIN: run ./lmscale build first (or set LMSCALE_BUILD_DIR)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lmscale-faults-XXXXXX")
MNT=""
BODY=$T/body.md
cleanup() { [[ -n $MNT ]] && umount "$MNT" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
cd "$T" || exit 1
export LMSCALE_COMMIT=${LMSCALE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
unset LMSCALE_INJECT_FAULT LMSCALE_INJECT_OOM
lmscale() { "$BIN" "$@"; }
# The transcript names no machine's folders: the temp folder, the repo, the build and the interpreter.
hide_paths() {
  sed -e "s|$T|\$T|g" -e "s|$BUILD/|<build>/|g" -e "s|$ROOT/||g" ${LMSCALE_PYTHON:+-e "s|$LMSCALE_PYTHON|<python>|g"}
}
declare -A VERDICT ROWNAME
declare -a ORDER
wanted() { [[ -z $ONLY || $ONLY == *",$1,"* ]]; }
# row ID NAME: starts a section (and says whether it runs).
row() {
  ORDER+=("$1")
  ROWNAME[$1]=$2
  wanted "$1" || return 1
  echo "## $1. $2"
  echo
}
verdict() { VERDICT[$1]=$2; echo "**Verdict: $2**"; echo; }
# check ID OK-TEXT FAIL-TEXT COND...: the verdict from a condition evaluated now.
check() {
  local id=$1 yes=$2 no=$3
  shift 3
  if "$@"; then verdict "$id" "✓ $yes"; else verdict "$id" "✗ $no"; fi
}
has() { grep -qF -- "$2" "$1"; }        # has FILE TEXT
lacks() { ! grep -qF -- "$2" "$1"; }    # lacks FILE TEXT

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
# run_env "VAR=value ..." CMD...: run with variables set, shown as typed.
run_env() {
  local vars=$1
  shift
  echo '```'
  { printf '$ %s' "$vars"; printf ' %q' "$@"; echo; } | hide_paths
  local cmd=("$@")
  [[ ${cmd[0]} == lmscale ]] && cmd[0]=$BIN
  env $vars "${cmd[@]}" >"$T/last.out" 2>&1
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
# Alive = a process that still runs (a zombie waiting for its new parent to reap it has ended).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }
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
# jq-free field reads of a .jsonl: values FILE FIELD → one value per record.
values() { python3 -c "import json,sys; [print(json.loads(l).get(sys.argv[2], '')) for l in open(sys.argv[1]) if l.strip()]" "$1" "$2"; }
TINY=(--device cpu --size tiny --precision fp32 --batch 2 --warmup 1 --steps 2)  # --mode train-step unless said
DDP=(bench ddp --backend gloo --size tiny --context 64 --precision fp32 --impl bucketed --warmup 1)
# start_ddp NAME OUT [launch options]: `launch -n 2 -- bench ddp` in the background for many steps,
# returning once its ranks are 8 s into the run (rendezvous and the overhead model take a few).
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
  echo "(SIG$2 sent to rank $3 while it trained)"
  finish_bg "$1"
  TOOK=$((SECONDS - t0))
  echo "The launcher returned $TOOK s after the SIG$2."
  echo
}
free_port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
# A stand-in for the Python interpreter that records its pid and sleeps (tests of a running baseline).
sleeper() { printf '#!/bin/sh\necho $$ > %q\nexec sleep 120\n' "$2" >"$1"; chmod +x "$1"; }

self_test() {
  row self.1 "a row that holds" && check self.1 "true is true" "true is false" true
  row self.2 "a row that does not hold" && check self.2 "false is true" "false is false, as it must be" false
}

issue21() {
if row 21.1 "SIGTERM in the middle of a 16-config sweep"; then
  run_bg term lmscale bench "${TINY[@]}" --mode forward,train-step --context 16,24,32,40,48,56,64,72 --out "$T/term"
  until_seen "$T/term.out" "^\[6/16"
  kill -TERM "$BG"
  finish_bg term
  # Which cell ran when the signal came: the last progress line without an outcome, read from the run.
  running=$(grep -o '^\[[0-9]*/16' "$T/term.out" | tail -1 | tr -d '[')
  said=$(grep -o 'stopped by SIGTERM: [0-9]* of 16 cells' "$T/term.out" | grep -o '[0-9]* of' | tr -d ' of')
  run check_lines "$T/term/e2e.jsonl"
  kept=$(grep -o '^[0-9]* configs' "$T/last.out" | tr -d ' configs')
  echo "The signal came while cell ${running:-?} ran; the stop line says ${said:-nothing} cells were kept; e2e.jsonl holds $kept."
  echo
  run lmscale bench "${TINY[@]}" --mode forward,train-step --context 16,24,32,40,48,56,64,72 --out "$T/term" --resume
  remeasured=$(grep -c "^\[[0-9]*/" "$T/last.out")
  resumed=$(grep -o 'resume: [0-9]* of 16' "$T/last.out" | grep -o '[0-9]* of' | tr -d ' of')
  run check_lines "$T/term/e2e.jsonl"
  check 21.1 "$kept cells kept (as the stop line said), the --resume run measured the other $remeasured, no cell twice" \
    "kept $kept, said ${said:-?}, resume read ${resumed:-?}, re-measured $remeasured" \
    eval '[[ $said == "$kept" && $resumed == "$kept" ]] && ((kept + remeasured == 16)) && has "$T/last.out" "16 configs: " && lacks "$T/last.out" " x2"'
fi

if row 21.2 "the results folder's disk fills up during a sweep"; then
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
  check 21.2 "the loss is reported with the path and ENOSPC, exit status $full_rc, only whole lines on disk" \
    "exit status $full_rc, reported: $full_said, whole lines: $whole" eval '((full_rc != 0 && full_said > 0 && whole))'
fi

if row 21.3 "\`lmscale report\` over damaged records"; then
  run lmscale bench "${TINY[@]}" --mode train-step --context 16 --out "$T/run1"
  mkdir -p run2
  cp run1/e2e.jsonl run2/e2e.jsonl
  head -c 200 run1/e2e.jsonl >>run2/e2e.jsonl  # a line cut short, as a full disk left it before
  printf '\x00\x01 not a record\n' >run2/garbage.jsonl
  : >run2/empty.jsonl
  echo "\`\$T/run2/e2e.jsonl\` ends in a line cut after 200 bytes; \`garbage.jsonl\` is not JSON; \`empty.jsonl\` is empty."
  echo
  lines=$(wc -l <run1/e2e.jsonl)
  run lmscale report --in "$T/run1" --in "$T/run2" --out "$T/report" --no-plots
  check 21.3 "each bad line skipped with file:line, the rest merged, the count said at the end" "exit status $RC (see above)" \
    eval '((RC == 0)) && has "$T/last.out" "e2e.jsonl:$((lines + 1)): not valid JSON" && has "$T/last.out" "2 damaged lines of --in folders skipped"'
fi

if row 21.4 "\`lmscale report --out\` with a quote, spaces, \$() and ; in the path"; then
  [[ -d run1 ]] || lmscale bench "${TINY[@]}" --mode train-step --context 16 --out "$T/run1" >/dev/null 2>&1
  OUT1="$T/x';touch $T/PWNED;'"
  OUT2="$T/a b \$(touch $T/PWNED2) ; c\`touch $T/PWNED3\`"
  run lmscale report --in "$T/run1" --out "$OUT1"
  run lmscale report --in "$T/run1" --out "$OUT2"
  pwned=0
  for f in PWNED PWNED2 PWNED3; do
    if [[ -e $T/$f ]]; then echo "**$f exists: a shell read a path**"; pwned=1; else echo "- \`\$T/$f\` does not exist: no shell read the path."; fi
  done
  echo
  check 21.4 "both folders written under their literal names, nothing executed" "(see above)" \
    eval '[[ -d $OUT1 && -d $OUT2 ]] && ((pwned == 0))'
fi

if row 21.5 "CPU out of memory (\`--context 100000\`)"; then
  run lmscale bench "${TINY[@]}" --mode train-step --context 16,100000,32 --out "$T/oom"
  oom_rc=$RC
  run check_lines "$T/oom/e2e.jsonl"
  check 21.5 "the CPU allocator's error is an oom cell with its reason on its own line, the next config measured, exit status 0 (out of memory is a result)" \
    "exit status $oom_rc (see above)" \
    eval '((oom_rc == 0)) && has "$T/last.out" "100000/train-step/lmscale oom" && has "$T/last.out" "16/train-step/lmscale ok" && has "$T/last.out" "32/train-step/lmscale ok"'
fi

if row 21.6 "CUDA-graph capture fails (GPU)"; then
  # A CPU machine cannot make a capture fail, and a verdict must come from its own run: not run here.
  echo "Needs a GPU: \`scripts/gpu/gpu_check.sh\` (stage capture-fault) runs it on an H100 and keeps its"
  echo "records in \`docs/results/runs/2026-11-23-c44913e-session/capture_fault/\`. This CPU run does not judge them."
  echo
  VERDICT[21.6]="– not run (needs a GPU: scripts/gpu/gpu_check.sh, stage capture-fault)"
fi

if row 21.7 "the PyTorch baseline process fails (no torch in the interpreter)"; then
  python3 -m venv --without-pip "$T/no-torch" >/dev/null 2>&1
  echo "\`\$T/no-torch\` is a fresh virtual environment: a Python without torch."
  echo
  run_env "LMSCALE_PYTHON=$T/no-torch/bin/python" lmscale bench "${TINY[@]}" --mode train-step --context 16 --impl lmscale,torch-eager --out "$T/nobase"
  base_rc=$RC
  cp "$T/last.out" "$T/nobase.out"
  run check_lines "$T/nobase/e2e.jsonl"
  check 21.7 "an error cell with the real exit code and the fix (LMSCALE_PYTHON), lmscale measured, exit status $base_rc" \
    "exit status $base_rc (see above)" \
    eval '((base_rc != 0)) && has "$T/nobase.out" "exited with code 1" && has "$T/nobase.out" "set LMSCALE_PYTHON" && has "$T/last.out" "16/train-step/lmscale ok" && has "$T/last.out" "16/train-step/torch-eager error"'
fi

if row 21.8 "a rank stops answering (SIGSTOP on rank 1, \`LMSCALE_DIST_TIMEOUT_S=10\`)"; then
  LMSCALE_DIST_TIMEOUT_S=10 start_ddp stuck "$T/stuck"
  signal_rank stuck STOP 1
  kill -CONT "$TARGET" 2>/dev/null; kill -KILL "$TARGET" 2>/dev/null
  check 21.8 "rank 0 stops after the timeout naming itself, the collective and the setting; the launcher stops rank 1" \
    "exit status $RC after $TOOK s (see above)" \
    eval '((RC != 0 && TOOK < 60)) && grep -q "rank 0 of 2: .* timed out" "$T/stuck.out" && has "$T/stuck.out" LMSCALE_DIST_TIMEOUT_S && has "$T/stuck.out" "rank 0 failed first"'
fi

if row 21.9 "a rank is killed"; then
  start_ddp killed "$T/killed"
  R0=$(rank_pid "$BG" 0)
  signal_rank killed KILL 1
  sleep 1
  echo "Rank 0 (pid $R0) is $(alive "$R0" && echo 'still running' || echo 'gone')."
  echo
  check 21.9 "the other rank stopped, the launcher names the rank and the signal" "exit status $RC after $TOOK s (see above)" \
    eval '((RC != 0 && TOOK < 30)) && has "$T/killed.out" "rank 1 failed first (killed by signal" && ! alive "$R0"'
fi

if row 21.10 "SIGTERM to \`launch\`"; then
  PORT=$(free_port)
  start_ddp term_launch "$T/tl" --master-port "$PORT"
  RANKS=$(pgrep -P "$BG" | tr '\n' ' ')
  # Row 21.11 looks at the same run: rank 0's listening sockets while it trains.
  ss -ltnp 2>/dev/null | grep "pid=$(rank_pid "$BG" 0)," >"$T/listen.txt"
  kill -TERM "$BG"
  echo "(SIGTERM sent to the launcher while its ranks, pids $RANKS, trained)"
  finish_bg term_launch
  left=""
  for _ in $(seq 1 25); do
    left=""
    for p in $RANKS; do alive "$p" && left+="$p "; done
    [[ -z $left ]] && break
    sleep 0.2
  done
  echo "Ranks still running: ${left:-none} (the launcher signals and waits for them; they also die with it: PR_SET_PDEATHSIG)."
  echo
  check 21.10 "every rank gone, no orphans" "left: $left" eval '[[ -z $left ]]'
fi

if row 21.11 "the rendezvous store's address"; then
  if [[ -s $T/listen.txt ]]; then
    echo "Rank 0's listening TCP sockets during the run of section 21.10 (\`ss -ltnp\`; the store is on port $PORT):"
    echo
    echo '```'
    sed -e 's/users:.*//' "$T/listen.txt"
    echo '```'
    echo
    check 21.11 "the store listens on 127.0.0.1 only (every rank is local)" "the store's port $PORT is not bound to loopback only (see above)" \
      eval 'grep -q "127.0.0.1:$PORT " "$T/listen.txt" && ! grep -Eq "(\*|0\.0\.0\.0|\[::\]):$PORT " "$T/listen.txt"'
  else
    echo "(No \`ss\` here, or row 21.10 did not run: nothing to judge.)"
    echo
    VERDICT[21.11]="– not run (needs ss and row 21.10)"
  fi
fi

if row 21.12 "bad values through the CLI and the Python API"; then
  ok12=1
  for args in "bench --size huge" "bench --context 0" "bench --precision int4" "launch -n 0 -- bench"; do
    # shellcheck disable=SC2086
    run lmscale $args
    ((RC == 2)) && (($(wc -l <"$T/last.out") <= 3)) && grep -q "error" "$T/last.out" || ok12=0
  done
  PY=${LMSCALE_PYTHON:-}
  if [[ -n $PY ]] && "$PY" -c "import torch" 2>/dev/null; then
    run_env "PYTHONPATH=$ROOT/python LMSCALE_BUILD_DIR=$BUILD" "$PY" -c "import torch, lmscale
try:
    lmscale.flash_attention(torch.randn(2, 8, 16), torch.randn(2, 8, 32), torch.randn(2, 8, 32))
except Exception as e:
    print(type(e).__name__ + ':', e)"
    grep -q "Error:" "$T/last.out" && (($(wc -l <"$T/last.out") <= 3)) || ok12=0
  else
    echo "(No interpreter with torch in LMSCALE_PYTHON: the Python line is skipped.)"
    echo
  fi
  check 21.12 "one-line errors that name the value and what is allowed, exit status 2" "(see above)" eval '((ok12))'
fi

if row 21.13 "the test suite's temporary folders"; then
  mkdir -p "$T/tmp13"
  TESTS=$BUILD/lmscale_tests
  if [[ -x $TESTS ]]; then
    run_env "TMPDIR=$T/tmp13" "$TESTS" --gtest_filter='Record*:Results*:Report*:SweepFaults*:CliUsage*' --gtest_brief=1
    tests_rc=$RC
    run ls -A "$T/tmp13"
    check 13 "" "" true >/dev/null
    check 21.13 "the tests pass and leave nothing in their temporary directory" \
      "exit status $tests_rc, left: $(ls -A "$T/tmp13" | head -3 | tr '\n' ' ')" eval '[[ -z $(ls -A "$T/tmp13") && $tests_rc == 0 ]]'
  else
    echo "(No test binary at <build>/lmscale_tests: build it with \`./lmscale test\`.)"
    echo
    VERDICT[21.13]="– not run (no test binary)"
  fi
fi

if row 21.14 "nothing in src/ calls std::system or popen"; then
  run grep -rnE '(^|[^_a-zA-Z])system\(|popen\(' "$ROOT/src"
  check 21.14 "no system( or popen( call anywhere in src/" "(see above)" eval '((RC == 1))'
fi
}

issue29() {
if row 29.1 "\`lmscale report --out D\` where \`D/e2e.jsonl\` has damaged lines"; then
  mkdir -p "$T/r29/D"
  lmscale bench "${TINY[@]}" --mode forward,train-step --context 16,24 --out "$T/r29/in" >/dev/null 2>&1
  python3 - "$T/r29/in/e2e.jsonl" "$T/r29/D/e2e.jsonl" <<'EOF'
import sys
lines = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
# Two records glued together (a lost newline) and a merge-conflict block among the others.
out = lines[2:] + [lines[0] + lines[1], "<<<<<<< HEAD", "=======", ">>>>>>> other"]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
  records=$(grep -c . "$T/r29/in/e2e.jsonl")
  echo "\`\$T/r29/D/e2e.jsonl\` holds the $records records of a run, two of them glued into one line, and a merge-conflict block (3 lines)."
  echo
  run lmscale report --in "$T/r29/in" --out "$T/r29/D" --no-plots
  cp "$T/last.out" "$T/r29.out"
  on_disk=$(grep -c . "$T/r29/D/e2e.jsonl")
  run cat "$T/r29/D/e2e.jsonl.damaged"
  moved=$(grep -c . "$T/r29/D/e2e.jsonl.damaged" 2>/dev/null)
  echo "e2e.jsonl now holds $on_disk records; e2e.jsonl.damaged the ${moved:-0} lines moved aside."
  echo
  check 29.1 "no line lost: the 4 damaged lines moved, as they were, to e2e.jsonl.damaged (named in the message), the $((records - 2)) whole records kept and the 2 glued ones merged back from --in; the summary counts kept, merged and moved" \
    "(see above)" \
    eval '((on_disk == records && moved == 4)) && has "$T/r29.out" "4 damaged lines of $T/r29/D/e2e.jsonl moved to $T/r29/D/e2e.jsonl.damaged" && has "$T/r29.out" "$((records - 2)) records kept from" && has "$T/r29.out" "2 merged from --in, 4 damaged lines moved aside"'
fi

if row 29.2 "\`lmscale bench --out ''\`"; then
  run lmscale bench "${TINY[@]}" --context 16 --out ''
  check 29.2 "refused before anything runs, exit status 2, the flag and the fix named; nothing written in /" "exit status $RC" \
    eval '((RC == 2)) && has "$T/last.out" "--out '"''"' is empty" && [[ ! -e /e2e.jsonl ]] && lacks "$T/last.out" "[1/"'
fi

if row 29.3 "\`lmscale launch\` asked for more ranks than the machine holds"; then
  cores=$(nproc)
  n=$((4 * cores + 1 > 64 ? 4 * cores + 1 : 64))
  echo "This machine: $cores cores, $(awk '/MemAvailable/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) available; $n ranks asked for."
  echo
  t0=$SECONDS
  run lmscale launch -n "$n" -- bench ddp --backend gloo --size tiny --context 64 --precision fp32 --steps 1000 --out "$T/r29_3"
  took=$((SECONDS - t0))
  check 29.3 "refused in $took s before any rank started, with the numbers (cores, memory per rank) and the override flag --oversubscribe, exit status 2" \
    "exit status $RC after $took s" \
    eval '((RC == 2 && took < 20)) && has "$T/last.out" "does not fit this machine" && has "$T/last.out" "--oversubscribe" && lacks "$T/last.out" "[rank "'
fi

if row 29.4 "SIGTERM to \`bench\` while the PyTorch baseline runs"; then
  mkdir -p "$T/tmp4"
  PY=${LMSCALE_PYTHON:-}
  if [[ -n $PY ]] && "$PY" -c "import torch" 2>/dev/null; then
    printf '#!/bin/sh\necho $$ > %q\nexec %q "$@"\n' "$T/baseline.pid" "$PY" >"$T/python4"  # the real one, its pid noted
    chmod +x "$T/python4"
    echo "\`\$T/python4\` notes its pid, then runs the real interpreter (with torch)."
  else
    sleeper "$T/python4" "$T/baseline.pid"
    echo "(No interpreter with torch here: \`\$T/python4\` notes its pid and sleeps, standing in for the baseline.)"
  fi
  echo
  LMSCALE_PYTHON=$T/python4 TMPDIR=$T/tmp4 run_bg term4 lmscale bench "${TINY[@]}" --context 16 --impl lmscale,torch-eager --out "$T/r29_4"
  for _ in $(seq 1 600); do [[ -s $T/baseline.pid ]] && break; sleep 0.1; done
  child=$(cat "$T/baseline.pid" 2>/dev/null)
  sleep 1
  temp_during=$(ls "$T/tmp4" | grep -c lmscale-baseline)
  kill -TERM "$BG"
  echo "(SIGTERM sent while the baseline, pid ${child:-?}, ran; $temp_during config file in \$TMPDIR then)"
  finish_bg term4
  left=$(ls -A "$T/tmp4")
  child_alive=0
  [[ -n $child ]] && alive "$child" && child_alive=1
  echo "The baseline is $( ((child_alive)) && echo 'still running' || echo 'gone'); \$TMPDIR holds: ${left:-nothing}."
  echo
  check 29.4 "the baseline got the signal and was waited for, its temporary file removed, one line says what was kept and the --resume command, exit status $RC" \
    "exit status $RC, baseline alive: $child_alive, left: ${left:-nothing}" \
    eval '((RC == 143 && child_alive == 0 && temp_during == 1)) && [[ -n $child && -z $left ]] && has "$T/term4.out" "stopped by SIGTERM: 1 of 2 cells are kept" && has "$T/term4.out" "--resume"'
fi

if row 29.5 "\`LMSCALE_INJECT_FAULT=nonsense\`, \`oom@nosuchsize\`"; then
  run_env "LMSCALE_INJECT_FAULT=nonsense" lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_5"
  rc1=$RC
  cp "$T/last.out" "$T/r29_5a.out"
  run_env "LMSCALE_INJECT_FAULT=oom@nosuchsize" lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_5"
  check 29.5 "both refused at start, exit status 2, naming the allowed faults and sizes; nothing measured or recorded" \
    "exit status $rc1 and $RC" \
    eval '((rc1 == 2 && RC == 2)) && has "$T/r29_5a.out" "<fault>@<size>" && has "$T/last.out" "is not a model size" && [[ ! -e $T/r29_5/e2e.jsonl ]]'
fi

if row 29.6 "\`LMSCALE_INJECT_OOM=tiny\`"; then
  run_env "LMSCALE_INJECT_OOM=tiny" lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_6"
  run python3 -c "import json, sys; [print(r['status'], r.get('injected_fault'), '|', r['command']) for r in map(json.loads, open(sys.argv[1]))]" "$T/r29_6/e2e.jsonl"
  check 29.6 "the oom record says injected_fault oom, and its command starts with LMSCALE_INJECT_OOM=tiny" "(see above)" \
    eval 'has "$T/last.out" "oom oom | LMSCALE_INJECT_OOM=tiny lmscale bench"'
fi

if row 29.7 "two sweeps writing to one \`--out\` at once"; then
  echo '```'
  echo "\$ lmscale bench ${TINY[*]} --context 16,40 --out \$T/r29_7 & lmscale bench ${TINY[*]} --context 24,32 --out \$T/r29_7; wait"
  "$BIN" bench "${TINY[@]}" --context 16,40 --out "$T/r29_7" >"$T/r29_7a.out" 2>&1 &
  first=$!
  "$BIN" bench "${TINY[@]}" --context 24,32 --out "$T/r29_7" >"$T/r29_7b.out" 2>&1
  rc_b=$?
  wait $first
  rc_a=$?
  echo "[exit status $rc_a and $rc_b]"
  echo '```'
  echo
  runs=$(values "$T/r29_7/e2e.jsonl" run | sort -u | grep -c .)
  dates=$(values "$T/r29_7/e2e.jsonl" date | sort -u | grep -c .)
  ids=0
  for id in $(values "$T/r29_7/e2e.jsonl" run | sort -u); do grep -q "$id" "$T/r29_7/e2e.md" && ids=$((ids + 1)); done
  contexts=0
  for c in 16 24 32 40; do grep -Eq "\| $c +\||context $c[,. ]" "$T/r29_7/e2e.md" && contexts=$((contexts + 1)); done
  echo "e2e.jsonl: $runs run ids ($dates distinct dates); e2e.md names $ids of the run ids and shows $contexts of the 4 contexts."
  echo
  check 29.7 "two run ids in the records, and the page (rebuilt from the records on disk under a lock) holds both runs' rows" \
    "runs $runs, ids named $ids, contexts $contexts of 4" eval '((rc_a == 0 && rc_b == 0 && runs == 2 && ids == 2 && contexts == 4))'
fi

if row 29.8 "\`lmscale bench\` on a CPU (the README's first command)"; then
  run lmscale bench --device cpu --out "$T/r29_8"
  graphs=$(values "$T/r29_8/e2e.jsonl" cuda_graph | sort -u | tr '\n' ' ')
  echo "The records' cuda_graph: $graphs"
  echo
  check 29.8 "the page says nothing of CUDA graphs where every record says cuda_graph false" "(see above)" \
    eval '((RC == 0)) && [[ $graphs == "False " ]] && lacks "$T/r29_8/e2e.md" "CUDA graph"'
fi

if row 29.9 "a link in a \`report --in\` folder pointing outside it"; then
  mkdir -p "$T/r29_9/in" "$T/r29_9/outside"
  lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_9/in" >/dev/null 2>&1
  echo '{"secret": "do not copy"}' >"$T/r29_9/outside/key.json"
  ln -s "$T/r29_9/outside/key.json" "$T/r29_9/in/.key.json"
  run lmscale report --in "$T/r29_9/in" --out "$T/r29_9/out" --no-plots
  check 29.9 "the link is skipped with its target named, nothing of the target copied" "(see above)" \
    eval '((RC == 0)) && has "$T/last.out" "a link (to" && ! grep -rq "do not copy" "$T/r29_9/out"'
fi

if row 29.10 "\`LMSCALE_DIST_TIMEOUT_S=abc\`"; then
  run_env "LMSCALE_DIST_TIMEOUT_S=abc" lmscale launch -n 2 -- bench ddp --backend gloo --size tiny --context 16 --impl single --steps 1 --warmup 0 --out "$T/r29_10"
  check 29.10 "the variable, its range and a value that is allowed; no unrelated hint; exit status 2" "exit status $RC" \
    eval '((RC == 2)) && has "$T/last.out" "LMSCALE_DIST_TIMEOUT_S=abc is not a whole number in [1, 86400]" && lacks "$T/last.out" "TIMEOUT_S=0" && lacks "$T/last.out" "RANK/WORLD_SIZE"'
fi

if row 29.11 "usage errors: \`--context ''\`, \`--context abc\`, \`--device nosuch\`, \`--check-consistency -1\`, \`report --in nosuch\`"; then
  ok11=1
  for args in "bench --context ''" "bench --context abc" "bench --device nosuch" "bench ddp --check-consistency -1" "report --in nosuch"; do
    eval "run lmscale $args"
    flag=$(echo "$args" | grep -o -- '--[a-z-]*' | tail -1)
    ((RC == 2)) && has "$T/last.out" "$flag" && (($(wc -l <"$T/last.out") <= 3)) || ok11=0
  done
  check 29.11 "each exits 2 naming the flag and the allowed form" "(see above)" eval '((ok11))'
fi

if row 29.12 "a cell cut between two of its record writes, then \`--resume\`"; then
  lmscale bench "${TINY[@]}" --context 16,24 --out "$T/r29_12" >/dev/null 2>&1
  python3 - "$T/r29_12/e2e.jsonl" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
# As an older lmscale left a cell killed between two of its writes: context 24 lost its last records.
keep = [l for l in lines if json.loads(l)["context"] == 16 or json.loads(l)["metric"] not in ("tokens_per_s", "all_step_ms")]
open(sys.argv[1], "w").write("".join(keep))
EOF
  echo "Context 24's tokens_per_s and all_step_ms records are removed from \`\$T/r29_12/e2e.jsonl\`."
  echo
  run lmscale report --in "$T/r29_12" --out "$T/r29_12_report" --no-plots
  run grep "incomplete" "$T/r29_12_report/e2e.md"
  marked=$RC
  run lmscale bench "${TINY[@]}" --context 16,24 --out "$T/r29_12" --resume
  tokens=$(python3 -c "import json, sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)['context'] == 24 and json.loads(l)['metric'] == 'tokens_per_s'))" "$T/r29_12/e2e.jsonl")
  check 29.12 "the cut cell is marked incomplete by report (never tokens/s 0) and measured again, whole, by --resume" "(see above)" \
    eval '((marked == 0 && tokens == 1)) && has "$T/last.out" "1 incomplete"'
fi

if row 29.13 "\`report\` over an input folder with no records; over a 2 MB binary \`.jsonl\`"; then
  mkdir -p "$T/r29_13/empty" "$T/r29_13/binary"
  echo "notes" >"$T/r29_13/empty/notes.txt"
  head -c 2000000 /dev/urandom >"$T/r29_13/binary/blob.jsonl"
  run lmscale report --in "$T/r29_13/empty" --in "$T/r29_13/binary" --out "$T/r29_13/out" --no-plots
  lines=$(grep -c "blob.jsonl" "$T/last.out")
  check 29.13 "the empty folder is warned about; the binary file gives $lines lines (a few warnings and a count), not thousands" "(see above)" \
    eval '((RC == 0 && lines <= 8)) && has "$T/last.out" "holds no records" && has "$T/last.out" "more damaged lines not listed"'
fi

if row 29.14 "\`bench zero --check-consistency\` with one rank made to diverge"; then
  ZERO=(bench zero --backend gloo --size tiny --context 16 --batch 2 --precision fp32 --impl zero1-reduce-scatter --warmup 0 --steps 3 --check-consistency 1)
  run_env "LMSCALE_INJECT_FAULT=diverge@tiny" lmscale launch -n 2 -- "${ZERO[@]}" --out "$T/r29_14a"
  rc1=$RC
  cp "$T/last.out" "$T/r29_14a.out"
  run lmscale launch -n 2 -- "${ZERO[@]}" --out "$T/r29_14b"
  checks=$(values "$T/r29_14b/zero.jsonl" consistency_checks | sort -u | tr '\n' ' ')
  echo "The records' consistency_checks: $checks"
  echo
  check 29.14 "the divergence is named (parameter, rank 1, step 1) and the run stops; without it the 3 checks passed are in every record" \
    "exit status $rc1 / $RC, checks: $checks" \
    eval '((rc1 != 0 && RC == 0)) && has "$T/r29_14a.out" "consistency check at step 1" && has "$T/r29_14a.out" "differs between rank 0 and rank(s) 1" && [[ $checks == "3 " ]]'
fi

if row 29.15 "\`scripts/fault_transcript.sh\` fails when a row fails"; then
  run_env "LMSCALE_BUILD_DIR=$BUILD" "$ROOT/scripts/fault_transcript.sh" --self-test
  check 29.15 "a ✗ row makes the script exit 1 (every verdict here is computed from its own row's run)" "exit status $RC" \
    eval '((RC == 1)) && has "$T/last.out" "✗ false is false"'
fi

if row 29.16 "an \`--out\` that cannot be written (a file; a folder below a file)"; then
  echo x >"$T/r29_16_file"
  run lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_16_file"
  rc1=$RC
  cp "$T/last.out" "$T/r29_16a.out"
  run lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_16_file/sub"
  check 29.16 "both refused before the first cell is measured, exit status 2, with the fix" "exit status $rc1 / $RC" \
    eval '((rc1 == 2 && RC == 2)) && has "$T/r29_16a.out" "is a file, not a folder" && has "$T/last.out" "cannot create the folder" && lacks "$T/r29_16a.out" "[1/" && lacks "$T/last.out" "[1/"'
fi

if row 29.17 "\`bench\` over 2 steps; the CPU's threads and load"; then
  run lmscale bench "${TINY[@]}" --context 16 --out "$T/r29_17"
  bench_rc=$RC
  run grep -A4 "not to be trusted" "$T/r29_17/e2e.md"
  fields=$(python3 -c "import json, sys; r = json.loads(open(sys.argv[1]).readline()); print('cpu_threads' in r and 'load' in r)" "$T/r29_17/e2e.jsonl")
  echo "Records carry cpu_threads and load: $fields."
  echo
  check 29.17 "the cell is flagged (too few steps, or spread) with the command that measures it properly; records carry cpu_threads and load" \
    "(see above)" eval '((bench_rc == 0)) && [[ $fields == True ]] && has "$T/r29_17/e2e.md" "--steps 20"'
fi
}

# A corpus of no download (lmscale train corpus --from): 30 small, regular "source files"; SALT
# changes every file, so two salts are two corpora of one name ("files") and nearly one size.
make_corpus() {  # make_corpus DIR SALT
  mkdir -p "$1.src"
  local f i
  for f in $(seq 0 29); do
    for i in $(seq 0 49); do
      printf 'def f%d(x):\n    return x * %d + %d\n' $(((i * 7 + f + $2) % 23)) $(((i + $2) % 5)) $((f % 3))
    done >"$1.src/mod$f.py"
  done
  "$BIN" train corpus --from "$1.src" --out "$1" --val-percent 20 >/dev/null 2>&1
}
TRAIN=(train --device cpu --context 32 --eval-batches 1)  # and --steps/--eval-every per run (a flag twice is refused)
S8=(--steps 8 --eval-every 4)
# statuses FILE: the records of a .jsonl counted by metric/status, whether every line is whole, how
# many null values are marked ok, and how many corpora (corpus_hash) they hold.
statuses() {
  python3 - "$1" <<'EOF'
import collections, json, sys
raw = open(sys.argv[1], "rb").read()
lines = raw.split(b"\n")
tail = lines.pop()
recs, bad = [], 0
for l in lines:
    try:
        recs.append(json.loads(l))
    except ValueError:
        bad += 1
c = collections.Counter(f"{r.get('metric')}/{r.get('status')}" for r in recs)
print(f"{len(recs)} records ({', '.join(f'{k} x{v}' for k, v in sorted(c.items()))}); "
      + ("every line whole" if not bad and not tail else f"damaged: {bad} bad lines, trailing {tail[:40]!r}"))
print("null values marked ok:", sum(1 for r in recs if r.get("status") == "ok" and r.get("value") is None))
print("corpus hashes:", len({r.get("corpus_hash") for r in recs if "corpus_hash" in r}))
EOF
}

issue41() {
make_corpus "$T/c41" 0 || true
if row 41.1 "\`train --lr 1e30\` (divergence)"; then
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --lr 1e30 --out "$T/r41_1"
  rc1=$RC
  cp "$T/last.out" "$T/r41_1.out"
  run statuses "$T/r41_1/train.jsonl"
  cp "$T/last.out" "$T/r41_1s.out"
  lmscale report --in "$T/r41_1" --out "$T/r41_1" --no-plots >/dev/null 2>&1
  run grep -c "diverged" "$T/r41_1/train.md"
  shown=$RC
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --lr 1e30 --out "$T/r41_1" --resume
  check 41.1 "stopped at the first non-finite value, naming the step and the cause (--lr), exit status 1; the record says diverged, report shows it, --resume trains it again (not done)" \
    "exit status $rc1 / $RC (see above)" \
    eval '((rc1 == 1 && RC == 1 && shown == 0)) && has "$T/r41_1.out" "diverged at step" && has "$T/r41_1.out" "learning rate, --lr 1e+30" && lacks "$T/r41_1.out" "step 8/8" && has "$T/r41_1s.out" "status/diverged x1" && has "$T/r41_1s.out" "null values marked ok: 0" && lacks "$T/last.out" "not run"'
fi

if row 41.2 "\`--resume\` (train and bench) on a file whose last line was cut"; then
  lmscale "${TRAIN[@]}" --corpus "$T/c41" --steps 4 --eval-every 2 --out "$T/r41_2" >/dev/null 2>&1
  lmscale bench "${TINY[@]}" --mode train-step --context 16,24 --out "$T/r41_2b" >/dev/null 2>&1
  for f in "$T/r41_2/train.jsonl" "$T/r41_2b/e2e.jsonl"; do
    python3 - "$f" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l]
# The first cell whole (step 0; context 16), then 60 bytes of the next line: a run cut mid-write.
key = lambda l: (json.loads(l).get("step"), json.loads(l).get("context"))
first = [l for l in lines if key(l) == key(lines[0])]
open(sys.argv[1], "w").write("".join(l + "\n" for l in first) + lines[len(first)][:60])
EOF
  done
  echo "\`\$T/r41_2/train.jsonl\` and \`\$T/r41_2b/e2e.jsonl\` keep their first cell and 60 bytes of the next line (no newline)."
  echo
  run lmscale "${TRAIN[@]}" --corpus "$T/c41" --steps 4 --eval-every 2 --out "$T/r41_2" --resume
  cp "$T/last.out" "$T/r41_2a.out"
  run lmscale bench "${TINY[@]}" --mode train-step --context 16,24 --out "$T/r41_2b" --resume
  cp "$T/last.out" "$T/r41_2b.out"
  run statuses "$T/r41_2/train.jsonl"
  cp "$T/last.out" "$T/r41_2s.out"
  run check_lines "$T/r41_2b/e2e.jsonl"
  cp "$T/last.out" "$T/r41_2c.out"
  run lmscale "${TRAIN[@]}" --corpus "$T/c41" --steps 4 --eval-every 2 --out "$T/r41_2" --resume
  check 41.2 "the cut line moved to <file>.damaged (named), then the records appended: every line whole, nothing measured twice" "(see above)" \
    eval 'has "$T/r41_2a.out" "moved to $T/r41_2/train.jsonl.damaged" && has "$T/r41_2b.out" "moved to $T/r41_2b/e2e.jsonl.damaged" && has "$T/r41_2s.out" "every line whole" && has "$T/r41_2s.out" "train_loss/ok x2" && has "$T/r41_2c.out" "all whole JSON objects" && lacks "$T/r41_2c.out" " x2" && has "$T/last.out" "not run"'
fi

if row 41.3 "\`--resume\` after switching \`--corpus\`"; then
  make_corpus "$T/c41b" 1
  lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --out "$T/r41_3" >/dev/null 2>&1
  echo "\`\$T/c41\` and \`\$T/c41b\` are two corpora of one name (\`files\`); \`\$T/r41_3\` holds a complete run on the first."
  echo
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41b" --out "$T/r41_3" --resume
  cp "$T/last.out" "$T/r41_3.out"
  run statuses "$T/r41_3/train.jsonl"
  check 41.3 "the second corpus is trained (the key holds the token counts and a content hash), both curves kept" "(see above)" \
    eval 'lacks "$T/r41_3.out" "not run" && has "$T/r41_3.out" "step 8/8" && has "$T/last.out" "corpus hashes: 2" && has "$T/last.out" "val_loss/ok x6"'
fi

if row 41.4 "non-finite and out-of-range numbers (\`--clip inf\`, \`--lr inf\`, \`--steps 99999999999999999999\`, \`--seed -1\`)"; then
  ok4=1
  for args in "--clip inf" "--lr inf" "--steps 99999999999999999999" "--seed -1"; do
    # shellcheck disable=SC2086
    run lmscale "${TRAIN[@]}" --corpus "$T/c41" $args --out "$T/r41_4"
    flag=${args%% *}
    ((RC == 2)) && has "$T/last.out" "$flag" && (($(wc -l <"$T/last.out") <= 3)) || ok4=0
  done
  check 41.4 "each refused before anything runs, exit status 2, naming the flag; nothing written" "(see above)" \
    eval '((ok4)) && [[ ! -e $T/r41_4 ]]'
fi

if row 41.5 "\`train --out <file>\`, \`train --out ''\`"; then
  echo x >"$T/r41_5_file"
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --out "$T/r41_5_file"
  rc1=$RC
  cp "$T/last.out" "$T/r41_5a.out"
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --out ''
  check 41.5 "both refused before the model is built, exit status 2, with the fix; nothing written in /" "exit status $rc1 / $RC" \
    eval '((rc1 == 2 && RC == 2)) && has "$T/r41_5a.out" "is a file, not a folder" && has "$T/last.out" "is empty" && lacks "$T/r41_5a.out" "step 0/" && lacks "$T/last.out" "step 0/" && [[ ! -e /train.jsonl ]]'
fi

if row 41.6 "SIGTERM during \`train --impl torch-eager\`"; then
  mkdir -p "$T/tmp6"
  sleeper "$T/python6" "$T/ref6.pid"
  echo "\`\$T/python6\` notes its pid and sleeps, standing in for the reference's interpreter."
  echo
  LMSCALE_PYTHON=$T/python6 TMPDIR=$T/tmp6 run_bg term6 lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --impl torch-eager --out "$T/r41_6"
  for _ in $(seq 1 600); do [[ -s $T/ref6.pid ]] && break; sleep 0.1; done
  during=$(ls "$T/tmp6" | wc -l)
  kill -TERM "$BG"
  echo "(SIGTERM sent while the reference ran; \$TMPDIR then held $during files)"
  finish_bg term6
  left=$(ls -A "$T/tmp6")
  echo "\$TMPDIR now holds: ${left:-nothing}."
  echo
  check 41.6 "the run file, the fp32 weights and their index removed, exit status 143" "exit status $RC, left: ${left:-nothing}" \
    eval '((RC == 143 && during == 3)) && [[ -z $left ]]'
fi

if row 41.7 "a token file truncated under a running \`train\`"; then
  cp -r "$T/c41" "$T/c41_7"
  run_bg trunc lmscale train --device cpu --context 32 --steps 100000 --eval-every 50000 --eval-batches 1 --corpus "$T/c41_7" --out "$T/r41_7"
  until_seen "$T/trunc.out" "step 0/" 120
  sleep 1
  truncate -s 4096 "$T/c41_7/train.bin"
  echo "(\`\$T/c41_7/train.bin\` truncated to 4096 bytes while the run trained)"
  finish_bg trunc
  check 41.7 "one message naming the file and that it changed while training, exit status 1 (not a bare SIGBUS, 135)" "exit status $RC" \
    eval '((RC == 1)) && has "$T/trunc.out" "token file $T/c41_7/train.bin changed while training"'
fi

if row 41.8 "\`train corpus\`: \`--ext py\` (no dot), \`--out\` a file, a missing \`--from\`"; then
  ok8=1
  echo x >"$T/r41_8_file"
  run lmscale train corpus --from "$T/c41.src" --out "$T/r41_8a" --ext py
  ((RC == 2)) && has "$T/last.out" "--ext .py" || ok8=0
  run lmscale train corpus --from "$T/c41.src" --out "$T/r41_8_file"
  ((RC == 2)) && has "$T/last.out" "is a file, not a folder" && lacks "$T/last.out" "filesystem error" || ok8=0
  run lmscale train corpus --from "$T/nosuch" --out "$T/r41_8b"
  ((RC == 2)) && has "$T/last.out" "--from" || ok8=0
  check 41.8 "each a usage error (exit status 2) in a sentence naming the flag and the fix (the dot), no library text, nothing written" \
    "(see above)" eval '((ok8)) && [[ ! -e $T/r41_8a && ! -e $T/r41_8b ]]'
fi

# rows 41.9-41.12: the Python ops, run by the build's interpreter (skipped without one).
PY=${LMSCALE_PYTHON:-}
py_row() {  # py_row ID OK-TEXT NEEDLE CODE: the snippet prints one line, which must hold NEEDLE
  local id=$1 yes=$2 needle=$3 code=$4
  if [[ -n $PY ]] && "$PY" -c "import torch" 2>/dev/null; then
    run_env "PYTHONPATH=$ROOT/python LMSCALE_BUILD_DIR=$BUILD" "$PY" -c "$code"
    check "$id" "$yes" "(see above)" eval "((RC == 0)) && has \"\$T/last.out\" \"$needle\""
  else
    echo "(No interpreter with torch in LMSCALE_PYTHON: the row is skipped.)"
    echo
    verdict "$id" "✓ skipped: no interpreter with torch (tests/python covers it)"
  fi
}
if row 41.9 "a Python op with one input on \`meta\`"; then
  py_row 41.9 "refused, naming the two devices, as PyTorch does" "two devices" "import torch, lmscale.nn as lnn
try:
    lnn.rms_norm(torch.randn(2, 8), torch.ones(8, device='meta')); print('no error')
except RuntimeError as e:
    print(str(e).splitlines()[0])"
fi
if row 41.10 "\`RMSNorm\` on integer input"; then
  py_row 41.10 "refused, as torch.nn.RMSNorm does" "floating-point" "import torch, lmscale.nn as lnn
try:
    lnn.RMSNorm(8)(torch.ones(2, 8, dtype=torch.long)); print('no error')
except RuntimeError as e:
    print(str(e).splitlines()[0])"
fi
if row 41.11 "\`cross_entropy\` with target -100 and with a target past the vocabulary"; then
  py_row 41.11 "-100 ignored as PyTorch ignores it (equal losses); the out-of-range target named" "equal; outside the vocabulary" "import torch, torch.nn.functional as F, lmscale.nn as lnn
torch.manual_seed(0)
x = torch.randn(4, 50)
same = torch.allclose(lnn.cross_entropy(x, torch.tensor([1, -100, 7, 3])), F.cross_entropy(x, torch.tensor([1, -100, 7, 3])))
try:
    lnn.cross_entropy(x, torch.tensor([1, 2, 57, 3])); named = 'no error'
except RuntimeError as e:
    named = 'outside the vocabulary' if 'outside the vocabulary' in str(e) else str(e)
print(('equal' if same else 'different') + '; ' + named)"
fi
if row 41.12 "meta-device init, \`to_empty\`, \`load_state_dict\`"; then
  py_row 41.12 "the loaded model gives the real model's output (the RoPE table recomputed), both layers have reset_parameters()" "same output" "import torch, lmscale.nn as lnn
torch.manual_seed(0)
make = lambda: torch.nn.ModuleDict({'norm': lnn.RMSNorm(16), 'rope': lnn.RotaryQKV(2, 8, 32)})
real = make()
with torch.device('meta'):
    lazy = make()
lazy.to_empty(device='cpu'); lazy.load_state_dict(real.state_dict())
qkv = torch.randn(1, 5, 48)
a = real['rope'](qkv); b = lazy['rope'](qkv)
ok = all(torch.equal(x, y) for x, y in zip(a, b)) and all(hasattr(m, 'reset_parameters') for m in lazy.values())
print('same output' if ok else 'different output')"
fi

if row 41.13 "\`launch\` flags: \`--master-port 70000\`, \`-5\`, \`--timeout -1\`, \`nan\`, \`--master-addr ''\`, \`--node-rank 3\`"; then
  ok13=1
  for args in "--master-port 70000" "--master-port -5" "--timeout -1" "--timeout nan" "--master-addr ''" "--node-rank 3"; do
    eval "run lmscale launch -n 2 $args -- bench comm --backend gloo --sizes-mb 1 --iters 1 --out \"\$T/r41_13\""
    flag=${args%% *}
    ((RC == 2)) && has "$T/last.out" "$flag" && lacks "$T/last.out" "[rank " || ok13=0
  done
  check 41.13 "each refused before a rank starts, exit status 2, naming the flag" "(see above)" eval '((ok13))'
fi

if row 41.14 "\`launch --master-port\` on a port already in use"; then
  python3 -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(120)" >"$T/port14" &
  holder=$!
  for _ in $(seq 1 50); do [[ -s $T/port14 ]] && break; sleep 0.1; done
  P14=$(cat "$T/port14")
  echo "Another program listens on 127.0.0.1:$P14."
  echo
  run lmscale launch -n 2 --master-port "$P14" -- bench comm --backend gloo --sizes-mb 1 --iters 1 --out "$T/r41_14"
  kill "$holder" 2>/dev/null
  check 41.14 "one message: the port is taken, pass another --master-port or 0; exit status 2" "exit status $RC" \
    eval '((RC == 2)) && has "$T/last.out" "--master-port $P14 is taken" && has "$T/last.out" "or 0 to pick a free one" && lacks "$T/last.out" "firewall" && (($(wc -l <"$T/last.out") <= 2))'
fi

if row 41.15 "an unresolvable \`--master-addr\`; a store that never answers"; then
  t0=$SECONDS
  run lmscale launch -n 2 --master-addr no-such-host.invalid -- bench comm --backend gloo --sizes-mb 1 --iters 1 --out "$T/r41_15"
  rc1=$RC took1=$((SECONDS - t0))
  cp "$T/last.out" "$T/r41_15a.out"
  P15=$(free_port)
  echo "Node 1 of 2 with no node 0: its rank waits for a store on 127.0.0.1:$P15, where nothing listens."
  echo
  t0=$SECONDS
  run_env "LMSCALE_DIST_TIMEOUT_S=3" lmscale launch --nnodes 2 --node-rank 1 -n 1 --master-port "$P15" -- bench comm --backend gloo --sizes-mb 1 --iters 1 --out "$T/r41_15"
  took2=$((SECONDS - t0))
  check 41.15 "the name refused in $took1 s (exit status 2); the timeout said after $took2 s in $(wc -l <"$T/last.out") lines naming the address, the port, the flags and LMSCALE_DIST_TIMEOUT_S, no stack trace" \
    "exit status $rc1 / $RC after $took1 / $took2 s" \
    eval '((rc1 == 2 && took1 < 60 && RC != 0 && took2 < 60)) && has "$T/r41_15a.out" "--master-addr no-such-host.invalid does not resolve" && has "$T/last.out" "127.0.0.1:$P15" && has "$T/last.out" "--master-addr" && has "$T/last.out" "LMSCALE_DIST_TIMEOUT_S" && lacks "$T/last.out" "frame #" && (($(wc -l <"$T/last.out") <= 8))'
fi

if row 41.16 "torchrun's agent (the store) dies mid-run"; then
  PY=${LMSCALE_PYTHON:-python3}
  if "$PY" -c "import torch.distributed.run" 2>/dev/null; then
    echo '```'
    P16=$(free_port)
    echo "\$ <python> -m torch.distributed.run --nproc-per-node 2 --master-port $P16 --no-python lmscale ${DDP[*]} --steps 100000 --out \$T/r41_16 &"
    "$PY" -m torch.distributed.run --nproc-per-node 2 --master-port "$P16" --no-python "$BIN" "${DDP[@]}" --steps 100000 --out "$T/r41_16" >"$T/agent.out" 2>&1 &
    agent=$!
    for _ in $(seq 1 600); do (($(pgrep -P $agent | wc -l) >= 2)) && break; sleep 0.1; done
    sleep 8
    ranks=$(pgrep -P $agent | tr '\n' ' ')
    kill -KILL $agent
    left=""
    for _ in $(seq 1 150); do
      left=""
      for p in $ranks; do alive "$p" && left+="$p "; done
      [[ -z $left ]] && break
      sleep 0.1
    done
    wait $agent 2>/dev/null
    sleep 1
    tail -4 "$T/agent.out" | hide_paths
    echo '```'
    echo
    echo "(SIGKILL sent to the agent while its ranks, pids ${ranks:-none}, trained; still running after it: ${left:-none})"
    echo
    recorded=0
    [[ -f $T/r41_16/ddp.jsonl ]] && recorded=$(grep -c '"status": *"ok"' "$T/r41_16/ddp.jsonl")
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    check 41.16 "every rank stopped with the agent (SIGTERM on its death), nothing recorded as a clean measurement" \
      "left: ${left:-none}, ok records: $recorded" eval '[[ -n $ranks && -z $left ]] && ((recorded == 0))'
  else
    echo "(No torch.distributed.run in $PY: torchrun's agent cannot be started here.)"
    echo
    VERDICT[41.16]="– not run (no torchrun in LMSCALE_PYTHON)"
  fi
fi

if row 41.17 "\`report\` over a \`train\` run"; then
  lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/c41" --out "$T/r41_17" >/dev/null 2>&1
  run lmscale report --in "$T/r41_17" --out "$T/r41_17" --no-plots
  run grep -c "incomplete" "$T/r41_17/train.md"
  check 41.17 "step 0 is complete with its validation loss: no cell called incomplete" "(see above)" \
    eval '((RC == 1)) && has "$T/r41_17/train.md" "val_loss"'
fi

if row 41.18 "\`report\` away from \`./lmscale\`; \`train\` on a missing corpus"; then
  mkdir -p "$T/away"
  run sh -c 'cd "$1" && "$2" report --in "$3"' _ "$T/away" "$BIN" "$T/r41_17"
  rc1=$RC
  cp "$T/last.out" "$T/r41_18a.out"
  run_env "LMSCALE_PYTHON=" lmscale report --in "$T/r41_17" --out "$T/r41_18"
  rc2=$RC
  cp "$T/last.out" "$T/r41_18b.out"
  run lmscale "${TRAIN[@]}" "${S8[@]}" --corpus "$T/no-corpus" --out "$T/r41_18c"
  plotted=0
  [[ -f $T/r41_18/train.png ]] && plotted=1
  echo "Plots drawn with LMSCALE_PYTHON unset: $plotted."
  echo
  check 41.18 "no default --out away from a checkout (exit status 2); the build's interpreter draws the plots (or exit status 1 saying why); a missing corpus refused with nothing written" \
    "exit status $rc1 / $rc2 / $RC" \
    eval '((rc1 == 2 && RC == 2)) && has "$T/r41_18a.out" "--out is needed here" && [[ ! -e $T/away/docs ]] && { ((rc2 == 0 && plotted)) || { ((rc2 == 1)) && has "$T/r41_18b.out" "--no-plots"; }; } && has "$T/last.out" "no-corpus/train.bin" && [[ ! -e $T/r41_18c ]]'
fi

if row 41.19 "\`bench attention\` and \`profile\`: spread and the noise guard"; then
  run lmscale bench attention --device cpu --context 32 --head-dim 16 --precision fp32 --impl torch-naive --warmup 1 --iters 2 --out "$T/r41_19"
  run grep -E "^## |± |not to be trusted" "$T/r41_19/attention.md"
  cp "$T/last.out" "$T/r41_19a.out"
  lmscale profile --device cpu --size tiny --context 16 --batch 1 --warmup 1 --steps 2 --out "$T/r41_19p" >/dev/null 2>&1
  run grep -E "^## |Not to be trusted" "$T/r41_19p/profile.md"
  check 41.19 "times carry their spread, 2-step cells are flagged with the command that measures them properly, the CPU header says host-clock timings" \
    "(see above)" \
    eval 'lacks "$T/r41_19/attention.md" "CUDA-event" && has "$T/r41_19a.out" "host-clock timings on the CPU" && has "$T/r41_19a.out" " ± " && has "$T/r41_19a.out" "not to be trusted" && has "$T/last.out" "Not to be trusted" && has "$T/last.out" " ± "'
fi

if row 41.19b "\`bench ddp\` and \`bench zero\`: spread and the noise guard"; then
  DIST=(--backend gloo --size tiny --context 16 --batch 2 --precision fp32 --warmup 1 --steps 2)
  run lmscale launch -n 2 -- bench ddp "${DIST[@]}" --impl single,zero1 --bucket-mb 1 --out "$T/r41_19b"
  cp "$T/last.out" "$T/r41_19b_ddp.out"
  run lmscale launch -n 2 -- bench zero "${DIST[@]}" --impl unsharded,zero2 --out "$T/r41_19b"
  check 41.19b "step times carry their spread, 2-step cells are flagged with the --steps advice, the timing is named (host clock on the CPU), bench zero says n/a for the allocator on the CPU" \
    "(see above)" eval 'has "$T/r41_19b_ddp.out" " ± " && has "$T/r41_19b_ddp.out" "not to be trusted** (2 timed steps" && has "$T/r41_19b_ddp.out" "--steps 20" && has "$T/r41_19b_ddp.out" "host clock on the CPU" && has "$T/last.out" "| n/a" && has "$T/last.out" "host clock on the CPU" && lacks "$T/last.out" "| 0 B"'
fi
}

{
if ((SELF_TEST)); then self_test; else issue21; issue29; issue41; fi
} >"$BODY"

if [[ -n $OUT_FILE ]]; then  # the transcript into the file, its table (and the exit status) here
  exec 3>&1 >"$OUT_FILE"
fi
failed=0
title="Issues 21, 29 and 41: faults, re-run"
((SELF_TEST)) && title="fault_transcript.sh --self-test"
echo "# $title ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $LMSCALE_COMMIT, CPU, Gloo)"
echo
echo "Written by \`scripts/fault_transcript.sh\`; \`\$T\` is a fresh temporary folder, \`<build>\` the build folder."
echo "Every verdict is computed by the script from that row's own run (the checks are in the script); the script"
echo "exits 1 when any row is ✗, and CI runs it (ctest Faults.Transcript). Rows 21.x are issue 21's table, 29.x issue 29's,"
echo "41.x issue 41's (rows 41.9-41.12 run the Python ops with \$LMSCALE_PYTHON when it has torch)."
echo
echo "| # | fault | verdict |"
echo "|---|---|---|"
for id in "${ORDER[@]}"; do
  wanted "$id" || continue
  v=${VERDICT[$id]:-✗ no verdict (the row did not finish)}
  [[ $v == ✗* ]] && failed=1
  echo "| $id | ${ROWNAME[$id]} | $v |"
done
echo
cat "$BODY"
[[ -n $OUT_FILE ]] && awk '/^\|---/ {t = 1; next} t && !/^\|/ {exit} t' "$OUT_FILE" >&3
exit $failed
