#!/usr/bin/env bash
# The third call of the backward energy / cycle attribution (docs/flash_notes.md, "Where a backward tile's time goes"):
# the cut variants sustained and under ncu's fixed clocks. Usage: OUT=<dir> scripts/gpu/bwd_energy_call.sh (carry build-probe/flash_hopper_probe)
H=build-probe/flash_hopper_probe
BINS="$H $H@cut-dqstage $H@gemms-only-ksmem $H@ksmem" SHAPES="1 16 16384 128 1" SUSTAIN_S=1.0 scripts/gpu/bwd_iterate.sh $OUT/energy3_d128 sustain
BINS="$H $H@cut-dqstage $H@gemms-only" SHAPES="1 16 16384 64 1" SUSTAIN_S=1.0 scripts/gpu/bwd_iterate.sh $OUT/energy3_d64 sustain
for shape in "1 16 16384 128 1" "1 16 16384 64 1"; do
  vs="cut-dqadd cut-load cut-softmax cut-dsstore cut-dqstage cut-dqgemm gemms-only"
  [[ $shape == *128* ]] && vs="$vs ksmem gemms-only-ksmem"
  for v in shipped $vs; do
    echo "== $shape $v"
    ncu -k regex:flash_bwd_hopper_kernel --launch-count 1 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_bank_reads.sum,l1tex__data_bank_writes.sum $H bwd_sustain $shape 0.05 $([[ $v != shipped ]] && echo $v) 2>&1 | grep -E 'gpu__time|cycles_elapsed|hmma|inst_exec|bank_|rror'
  done
done > $OUT/ncu_cuts.txt 2>&1
cat $OUT/energy3_d128/sustain.txt $OUT/energy3_d64/sustain.txt $OUT/ncu_cuts.txt
