#!/usr/bin/env bash
# Bundles the header-only Debian packages lmscale builds against into .deps/ (ignored by git).
# The same folder is carried to the offline GPU machines (device tool `carry: [".deps"]`),
# so both sides compile against identical headers. Idempotent: does nothing once .deps/ is complete.
#
#   scripts/bundle_deps.sh            # into <repo>/.deps
#   scripts/bundle_deps.sh /some/dir  # elsewhere
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.deps}
# libgloo-dev: ProcessGroupGloo headers (symbols come from libtorch); CLI11 and nlohmann-json: CLI
# and results; googletest: built from source so the GPU machines (no gtest there) get the same one.
PACKAGES=(libgloo-dev libcli11-dev nlohmann-json3-dev googletest)

if [[ -f "$DEST/.complete" ]]; then exit 0; fi
command -v apt-get >/dev/null || { echo "bundle_deps: apt-get not found; copy a .deps/ folder made on a Debian machine" >&2; exit 1; }
mkdir -p "$DEST/debs"
cd "$DEST/debs"
echo "bundle_deps: downloading ${PACKAGES[*]} (header-only, under 1 MB) into $DEST; nothing is installed" >&2
if ! apt-get download "${PACKAGES[@]}" 2>/dev/null; then
  # A fresh machine may have empty package lists; refreshing them needs root.
  echo "bundle_deps: the package lists do not know them yet: running apt-get update first" >&2
  if [[ $(id -u) -eq 0 ]]; then apt-get update -qq; else sudo apt-get update -qq; fi
  apt-get download "${PACKAGES[@]}"
fi
for deb in ./*.deb; do dpkg -x "$deb" "$DEST"; done
touch "$DEST/.complete"
echo "bundle_deps: headers unpacked into $DEST/usr/{include,src}"
