#!/usr/bin/env bash
# Fills .deps/ (ignored by git) with the pinned header-only dependencies: CLI11, nlohmann-json, Gloo's
# headers and GoogleTest's sources, downloaded and SHA-256-checked by cmake/fetch_deps.cmake (no apt:
# any Linux with CMake and the network). The same folder is carried to the offline GPU machines
# (device tool `carry: [".deps"]`), so both sides compile against identical headers. Idempotent:
# does nothing once .deps/ holds these pins. A CMake configure without it fetches them itself.
#
#   scripts/bundle_deps.sh            # into <repo>/.deps
#   scripts/bundle_deps.sh /some/dir  # elsewhere
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.deps}
command -v cmake >/dev/null || { echo "bundle_deps: cmake not found; install CMake 3.22 or later (pip install cmake works too)" >&2; exit 1; }
cmake -DLMSCALE_DEPS="$DEST" -P "$ROOT/cmake/fetch_deps.cmake" >&2
