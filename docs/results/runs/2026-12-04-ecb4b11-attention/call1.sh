#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/bins3.txz
export PYTHONPATH=$PWD/python
P=build-probe/flash_hopper_probe; mkdir -p $OUT/probe
( timeout 120 $P check; echo rc=$? ) > $OUT/probe/check.txt 2>&1; tail -1 $OUT/probe/check.txt; grep -ciE "fail" $OUT/probe/check.txt
( timeout 150 compute-sanitizer --tool memcheck $P small; echo rc=$? ) > $OUT/probe/memcheck.txt 2>&1; tail -2 $OUT/probe/memcheck.txt
( timeout 150 compute-sanitizer --tool racecheck $P small; echo rc=$? ) > $OUT/probe/racecheck.txt 2>&1; tail -2 $OUT/probe/racecheck.txt
GPU_TESTS='*Flash*:*Hopper*:*KernelSupport*:*Packed*' GPU_TESTS_S=150 LAYOUTS_S=260 LMSCALE_COMMIT=ecb4b11 \
  scripts/gpu/gpu_check.sh $OUT build gpu-tests attention attention-layouts
cat $OUT/summary.txt; grep -E "PASSED|FAILED" $OUT/gpu_check/gpu-tests.log | tail -3
grep -E "leaderboard|16384" $OUT/gpu_check/attention.log | tail -8; grep -E "gqa|packed|window" $OUT/gpu_check/attention-layouts.log | cut -c1-120
