#!/usr/bin/env bash
# Re-runs the results faults of issue 21 on a CPU machine and prints every command with its output
# and exit status, as a transcript to commit under docs/results/:
#   1. the results folder's disk fills up during a sweep (a 12 KiB tmpfs; needs root and mount,
#      else /dev/full stands in for the records file);
#   2. `lmscale report` over a folder with a line cut short, garbage and an empty file;
#   3. paths with quotes, spaces, $() and ; through `report --out` (and the plot subprocess);
#   4. no std::system / popen left in src/.
# Usage: scripts/fault_transcript.sh [> docs/results/fault_transcript.md]
# Needs a built binary ($LMSCALE_BUILD_DIR/lmscale, default build/lmscale).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${LMSCALE_BUILD_DIR:-$ROOT/build}/lmscale
[[ -x $BIN ]] || { echo "no binary at $BIN: run ./lmscale build first (or set LMSCALE_BUILD_DIR)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lmscale-faults-XXXXXX")
MNT=""
cleanup() { [[ -n $MNT ]] && umount "$MNT" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
cd "$T" || exit 1
export LMSCALE_COMMIT=${LMSCALE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
lmscale() { "$BIN" "$@"; }
# Prints a command as typed (the temp folder as $T), runs it, prints its output and exit status.
run() {
  echo '```'
  { printf '$'; printf ' %q' "$@"; echo; } | sed -e "s|$T|\$T|g" -e "s|$ROOT/||g"
  "$@" 2>&1 | sed -e "s|$T|\$T|g" -e "s|$ROOT/||g"
  echo "[exit status ${PIPESTATUS[0]}]"
  echo '```'
  echo
}
# Every line of a .jsonl is a whole JSON object?
check_lines() {
  python3 - "$1" <<'EOF'
import json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
tail = lines.pop()  # after the last newline: empty when every line is whole
bad = [n for n, l in enumerate(lines, 1) if l.strip() and not isinstance(json.loads(l), dict)]
print(f"{len(lines)} lines, all whole JSON objects" if not bad and not tail
      else f"damaged: lines {bad}, trailing partial line {tail[:60]!r}")
EOF
}
TINY=(--device cpu --size tiny --precision fp32 --mode train-step --batch 2 --warmup 1 --steps 2)

echo "# Results faults, re-run ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $LMSCALE_COMMIT, CPU)"
echo
echo "Commands as run by \`scripts/fault_transcript.sh\`; \`\$T\` is a fresh temporary folder."
echo

echo "## 1. The results folder's disk fills up during a sweep"
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
run lmscale bench "${TINY[@]}" --context 16,32,64,128,256,512 --out "$T/full"
[[ -f full/e2e.jsonl && ! -L full/e2e.jsonl ]] && run check_lines "$T/full/e2e.jsonl"
[[ -n $MNT ]] && { umount "$MNT"; MNT=""; }

echo "## 2. \`lmscale report\` over damaged records"
echo
run lmscale bench "${TINY[@]}" --context 16 --out "$T/run1"
mkdir -p run2
cp run1/e2e.jsonl run2/e2e.jsonl
head -c 200 run1/e2e.jsonl >> run2/e2e.jsonl  # a line cut short, as a full disk left it before
printf '\x00\x01 not a record\n' > run2/garbage.jsonl
: > run2/empty.jsonl
echo "\`\$T/run2/e2e.jsonl\` ends in a line cut after 200 bytes; \`garbage.jsonl\` is not JSON; \`empty.jsonl\` is empty."
echo
run lmscale report --in "$T/run1" --in "$T/run2" --out "$T/report" --no-plots
run ls "$T/report"
run cat "$T/report/index.md"

echo "## 3. Paths with quotes, spaces, \$() and ; through \`report --out\` and the plot subprocess"
echo
OUT1="$T/x';touch $T/PWNED;'"
OUT2="$T/a b \$(touch $T/PWNED2) ; c\`touch $T/PWNED3\`"
run lmscale report --in "$T/run1" --out "$OUT1"
run lmscale report --in "$T/run1" --out "$OUT2"
run ls -A "$T"
for f in PWNED PWNED2 PWNED3; do
  [[ -e $T/$f ]] && echo "**$f exists: a shell read a path**" || echo "- \`\$T/$f\` does not exist: no shell read the path."
done
echo

echo "## 4. No shell in src/"
echo
run grep -rnE 'std::system|popen\(' "$ROOT/src"
