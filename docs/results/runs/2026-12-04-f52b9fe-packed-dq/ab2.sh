#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/bins.txz && rm -rf prebuilt && tar xJf .gpu-carry/new.txz && mv prebuilt prebuilt-prev && tar xJf .gpu-carry/new2.txz
ROOT=$PWD; RES=$OUT; source scripts/gpu/timed_stages.sh; prebuilt_loads >/dev/null
export PYTHONPATH=$PWD/python
( timeout 300 prebuilt/lmscale_tests --gtest_filter='*Flash*:*Hopper*:*Packed*' ; echo rc=$? ) > $OUT/tests.log 2>&1; tail -3 $OUT/tests.log
( timeout 200 compute-sanitizer --tool memcheck prebuilt/lmscale_tests --gtest_filter='FlashMasksCuda.Packed*'; echo rc=$? ) > $OUT/memcheck.log 2>&1; tail -3 $OUT/memcheck.log
for i in 1 2; do for b in prev new2; do
  d=prebuilt; [[ $b == prev ]] && d=prebuilt-prev
  LMSCALE_BUILD_DIR=$PWD/$d timeout 120 python3 tools/probes/call_gap/call_gap.py --cases packed-d64,packed-d128 --out $OUT/ab_${b}_$i.json > $OUT/ab_${b}_$i.log 2>&1
  echo "== $b $i"; grep -E "^packed" $OUT/ab_${b}_$i.log | cut -c1-100
done; done
