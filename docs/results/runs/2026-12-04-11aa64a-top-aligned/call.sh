#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/bins4.txz
ROOT=$PWD; RES=$OUT; source scripts/gpu/timed_stages.sh; prebuilt_loads >/dev/null
export PYTHONPATH=$PWD/python
O=build-probe/flash_hopper_probe; N=build-probe/flash_hopper_probe_new
( timeout 90 $N check 64; echo rc=$? ) > $OUT/check.txt 2>&1; grep -ciE "fail|mismatch" $OUT/check.txt; tail -1 $OUT/check.txt
( timeout 60 compute-sanitizer --tool memcheck $N small 64; echo rc=$? ) > $OUT/memcheck.txt 2>&1; tail -2 $OUT/memcheck.txt | head -1
( timeout 90 compute-sanitizer --tool racecheck $N small 64; echo rc=$? ) > $OUT/racecheck.txt 2>&1; tail -2 $OUT/racecheck.txt | head -1
( timeout 150 prebuilt/lmscale_tests --gtest_filter='*Flash*:*Hopper*:*KernelSupport*:*Packed*'; echo rc=$? ) > $OUT/tests.txt 2>&1; grep -E "PASSED|FAILED" $OUT/tests.txt | tail -3
ab() { local envs=$1 args=$2; echo "## $envs $args"; for r in 1 2 3; do for b in $O $N; do
  echo "$(basename $b) $(env PROBE_BSHD=1 PROBE_QUEUED=1 $envs $b $args 2>&1 | grep -E '^time' | sed -e 's/ mma.sync.*//' -e 's/.*hopper/hopper/')"
done; done; }
ab PROBE_HEADS_K=4 "time 2 32 4096 64 1 bf16 40"
ab "" "time 4 16 4096 64 1 bf16 40"
ab "" "time 2 16 8192 64 1 bf16 30"
ab "" "time 1 16 16384 64 1 bf16 20"
ab PROBE_DOCS=4 "time 1 16 16384 64 1 bf16 40"
ab "" "time 4 16 3072 64 1 bf16 40"
(cd $OUT && timeout 60 python3 -m lmscale.attention_layouts_bench --cases gqa-4k,gqa-8k --out layouts.jsonl > layouts.txt 2>&1); cat $OUT/layouts.txt
