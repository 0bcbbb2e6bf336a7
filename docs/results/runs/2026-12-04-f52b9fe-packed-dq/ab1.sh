#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/bins.txz && mv prebuilt prebuilt-old && tar xJf .gpu-carry/new.txz
ROOT=$PWD; RES=$OUT; source scripts/gpu/timed_stages.sh; prebuilt_loads
export PYTHONPATH=$PWD/python
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
( timeout 300 prebuilt/lmscale_tests --gtest_filter='*Flash*:*Hopper*:*Packed*' ; echo rc=$? ) > $OUT/tests.txt 2>&1; tail -4 $OUT/tests.txt
( timeout 200 compute-sanitizer --tool memcheck prebuilt/lmscale_tests --gtest_filter='FlashMasksCuda.Packed*'; echo rc=$? ) > $OUT/memcheck.txt 2>&1; tail -3 $OUT/memcheck.txt
for i in 1 2; do for b in old new; do
  d=prebuilt; [[ $b == old ]] && d=prebuilt-old
  LMSCALE_BUILD_DIR=$PWD/$d timeout 120 python3 tools/probes/call_gap/call_gap.py --cases packed-d64,packed-d128 --out $OUT/ab_${b}_$i.json > $OUT/ab_${b}_$i.txt 2>&1
  echo "== $b $i"; grep -E "^packed" $OUT/ab_${b}_$i.txt | cut -c1-330
done; done
