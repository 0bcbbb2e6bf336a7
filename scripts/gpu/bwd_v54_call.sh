#!/usr/bin/env bash
# Backward v5.4 checked on one H100 in one call: the correctness suites and compute-sanitizer on the shipped kernels,
# then the shipped kernel (stmatrix dQ staging) against f2dq (the float2 staging before it) through bwd_variant_call.sh.
# Usage: OUT=<dir> scripts/gpu/bwd_v54_call.sh   (carry build-probe/flash_hopper_probe)
H=build-probe/flash_hopper_probe
scripts/gpu/bwd_iterate.sh $OUT/checks checks
VARIANT=f2dq bash scripts/gpu/bwd_variant_call.sh
grep -E 'failure|SUMMARY' $OUT/checks/checks.txt $OUT/checks/sanitizer.txt; grep -c ' ok$' $OUT/checks/checks.txt
