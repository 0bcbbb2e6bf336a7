#!/usr/bin/env bash
# One device call of the Hopper forward's design loop (README.md beside it): a prebuilt tools/flash_hopper_probe
# (carry build-probe) checks every forward variant against fp64, runs compute-sanitizer on the shipped kernels and
# the variants, and times the shipped forward beside each variant at issue 40's shapes and the leaderboard's.
#   tools/probes/hopper_fwd/fwd_variants.sh OUT [ROUNDS]      (PROBE: the binary, default build-probe/flash_hopper_probe)
# PROBE_VARIANTS=a,b checks, sanitises and times only those variants (the shipped kernels always); shapes are (B, S, H,
# D) rows, as the product's callers pass them (PROBE_BSHD=1).
# Results go straight under OUT in three files (checks.txt, sanitizer.txt, time.txt), so a time limit keeps what
# finished.
set -uo pipefail
source "$(dirname "$0")/../../../scripts/gpu/script_init.sh" "$@"
H=${PROBE:-build-probe/flash_hopper_probe}
ROUNDS=${2:-2}
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; "$H" variants; "$H" check; } >"$OUT/checks.txt" 2>&1
for tool in memcheck racecheck synccheck; do
  for mode in small variants; do
    echo "== $tool $mode"
    timeout "${SANITIZE_S:-240}" compute-sanitizer --tool $tool "$H" $mode 2>&1 | tail -3
  done
done >"$OUT/sanitizer.txt" 2>&1
for ((r = 1; r <= ROUNDS; ++r)); do
  echo "== round $r"
  for shape in "1 16 16384 64 1" "4 25 512 64 1" "4 32 2048 80 1" "1 16 16384 128 1" "16 16 1024 128 1" \
               "16 16 1024 64 1" "32 16 512 128 1"; do
    PROBE_BSHD=1 "$H" time $shape bf16 30 all
  done
  PROBE_BSHD=1 PROBE_HEADS_K=4 "$H" time 2 32 4096 64 1 bf16 30 all
  PROBE_BSHD=1 PROBE_HEADS_K=8 "$H" time 1 32 8192 128 1 bf16 30 all
  PROBE_BSHD=1 PROBE_DOCS=16 "$H" time 1 16 16384 64 1 bf16 30 all
  PROBE_BSHD=1 PROBE_DOCS=16 "$H" time 1 16 16384 128 1 bf16 30 all
done >"$OUT/time.txt" 2>&1
tail -3 "$OUT/checks.txt"
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/sanitizer.txt"
