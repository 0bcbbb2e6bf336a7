#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/bins3.txz
export PYTHONPATH=$PWD/python
LMSCALE_COMMIT=ecb4b11 scripts/gpu/gpu_check.sh $OUT build attention-shapes attention-grid
cat $OUT/summary.txt
ROOT=$PWD; RES=$OUT; source scripts/gpu/timed_stages.sh; prebuilt_loads >/dev/null
mkdir -p $OUT/gqa
timeout 90 python3 tools/probes/call_gap/call_gap.py --cases gqa-4k,gqa-8k --out $OUT/gqa/call_gap.json > $OUT/gqa/call_gap.txt 2>&1
cut -c1-140 $OUT/gqa/call_gap.txt
for i in 1 2; do (cd $OUT && timeout 60 python3 -m lmscale.attention_layouts_bench --cases gqa-4k,gqa-8k --out gqa/layouts_$i.jsonl > $OUT/gqa/layouts_$i.txt 2>&1); cat $OUT/gqa/layouts_$i.txt; done
