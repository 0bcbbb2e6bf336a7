#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tar xJf .gpu-carry/probe.txz; P=build-probe/flash_hopper_probe
t() { echo "## $*" >> $OUT/sweep.log; env PROBE_BSHD=1 PROBE_QUEUED=1 PROBE_ROUNDS=4 "$@" >> $OUT/sweep.log 2>&1; }
V64=PROBE_VARIANTS=n176c2pp_q2,n128c3_q2
t $V64 PROBE_HEADS_K=4 $P time 2 32 4096 64 1 bf16 40 all
t $V64 $P time 1 16 16384 64 1 bf16 20 all
t $V64 $P time 2 16 8192 64 1 bf16 30 all
t $V64 $P time 4 16 4096 64 1 bf16 40 all
t $V64 $P time 4 16 3072 64 1 bf16 40 all
t $V64 $P time 4 16 4096 64 0 bf16 40 all
t $V64 $P time 1 16 16384 64 0 bf16 20 all
t $V64 $P time 8 16 2048 64 0 bf16 40 all
t $V64 $P time 4 25 512 64 0 bf16 100 all
t PROBE_VARIANTS=n128c2_q2,n128c2pp_q2,n160c2_q2 PROBE_HEADS_K=8 $P time 1 32 8192 128 1 bf16 30 all
grep -E "^##|hopper|variant|shipped" $OUT/sweep.log | sed -e 's/ mma.sync.*//'
