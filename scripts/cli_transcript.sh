#!/usr/bin/env bash
# Re-runs the CLI error list of issue 20 (plus `lmscale info` and the help texts it named) and prints
# each command with its output and exit code, as a markdown transcript:
#   scripts/cli_transcript.sh > docs/results/cli_transcript.md
# Uses the built binary ($LMSCALE_BUILD_DIR, default build/); nothing is measured, nothing is written
# except a scratch results folder that is removed at the end.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${LMSCALE_BUILD_DIR:-$ROOT/build}/lmscale
[[ -x $BIN ]] || { echo "cli_transcript: $BIN not found; run ./lmscale build first" >&2; exit 1; }
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
# The binary is shown as `lmscale` (what a user on PATH types); it runs from a scratch folder.
lmscale() { (cd "$SCRATCH" && "$BIN" "$@"); }

# No machine's folders in a committed transcript: the checkout reads <repo>, the scratch folder $TMP,
# an interpreter's path <python3>.
anonymise() { sed -e "s#$ROOT#<repo>#g" -e "s#$SCRATCH#\$TMP#g" -e 's#/[^ ]*/bin/python3[.0-9]*#<python3>#g'; }

show() {
  echo '```console'
  echo "\$ lmscale $*" | anonymise
  local out rc
  out=$(lmscale "$@" 2>&1); rc=$?
  printf '%s\n' "$out" | anonymise
  echo "[exit $rc]"
  echo '```'
  echo
}

echo "# lmscale CLI transcript"
echo
echo "The error list of issue 20, re-run by \`scripts/cli_transcript.sh\` at commit" \
     "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%d)."
echo "Usage errors exit 2 and start \`lmscale: error:\`; old spellings still work with a one-line note."
echo
echo "## Typos: the nearest flag or subcommand"
echo
show bench --contxt 128
show benhc
show memory --size smal --no-table --no-snapshot
show bench --device cpu --precision bf61
echo "## launch: the program's arguments go after \`--\`; torchrun's spelling works"
echo
show launch -n 2 bench comm --backend gloo
show launch --nproc-per-node 2 -- info
echo "## A comparison between processes, started as one process"
echo
show bench ddp --size tiny
show bench comm
echo "## Old spellings (one release of grace)"
echo
show memory --device cpu --size tiny --contexts 8 16 --precisions fp32 --modes forward --no-snapshot --no-plot \
  --out "$SCRATCH/old"
echo "## Help: \`lmscale\` in usage lines, integer flags typed INT, no \`{false}\` defaults, an example each"
echo
show account --help
show memory --help
echo "## What this build holds"
echo
show info
