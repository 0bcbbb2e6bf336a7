#!/usr/bin/env bash
# The template for a new GPU script: copy it, say here in one line what the script does in one
# device call, add its row to README.md (tests/house/check_scripts.py fails until it has one). A job
# bound to one question belongs in tools/probes/<topic>/ instead, with the question it answers.
#
#   scripts/gpu/template.sh OUT [stage ...]        (carry .deps; default: build info)
#
# OUT receives summary.txt (one line per stage: status and seconds) and template.tgz (every stage's
# log and results, packed as each stage ends, so a call cut off by its time limit keeps what finished).
set -uo pipefail
source "$(dirname "$0")/script_init.sh" "$@"  # OUT, ROOT, LMSCALE_BUILD_DIR, BIN: the convention
shift
STAGES=("${@:-build info}")
read -r -a STAGES <<<"${STAGES[*]}"
RES=$OUT/template
mkdir -p "$RES"
TARBALL=template.tgz
source "$(dirname "$0")/timed_stages.sh"  # stage, pack, want, log_clocks, prebuilt_loads
for s in "${STAGES[@]}"; do
  case $s in
    build) prebuilt_loads >"$RES/prebuilt.log" 2>&1 ||
             stage build "${BUILD_S:-420}" "$ROOT/lmscale" build || { tail -40 "$RES/build.log"; exit 1; } ;;
    info) stage info "${INFO_S:-30}" "$BIN" info ;;  # runs inside RES: give benchmarks relative --out folders
    *) echo "unknown stage $s" | tee -a "$OUT/summary.txt"; exit 2 ;;
  esac
done
pack
cat "$OUT/summary.txt"
! grep -q " rc=[1-9]" "$OUT/summary.txt"  # exit 1 when a stage failed
