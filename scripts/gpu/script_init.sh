# Sourced by the scripts that run on a GPU machine and write into an output folder:
#   source "$(dirname "$0")/script_init.sh" "$@"
# Sets ROOT (the repo) and OUT (the first argument, created, made absolute; a relative one is taken
# from the repo root, as the device tool runs commands there), and cds into ROOT, so
# every script resolves its paths the same way whatever folder it was started from.
OUT=${1:?usage: $0 OUT}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
