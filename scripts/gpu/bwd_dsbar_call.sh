#!/usr/bin/env bash
# What the groups' dS barrier (phase-locking) and the dQ staging cost the Hopper backward: the shipped kernel against
# the cut variants cut-dsbar and cut-dsbar-dqstage (bwd_energy_variants; results wrong by construction), sustained and
# under ncu's fixed clocks. Usage: OUT=<dir> scripts/gpu/bwd_dsbar_call.sh   (carry build-probe/flash_hopper_probe)
H=build-probe/flash_hopper_probe
BINS="$H $H@cut-dsbar $H@cut-dsbar-dqstage" SHAPES="1 16 16384 128 1;1 16 16384 64 1" SUSTAIN_S=1.0 \
  scripts/gpu/bwd_iterate.sh $OUT/dsbar sustain
for shape in "1 16 16384 128 1" "1 16 16384 64 1"; do
  for v in shipped cut-dsbar cut-dsbar-dqstage; do
    echo "== $shape $v"
    ncu -k regex:flash_bwd_hopper_kernel --launch-count 1 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum $H bwd_sustain $shape 0.05 $([[ $v != shipped ]] && echo $v) 2>&1 | grep -E 'gpu__time|cycles_elapsed|hmma|inst_exec|rror'
  done
done > $OUT/ncu.txt 2>&1
grep bwd_sustain $OUT/dsbar/sustain.txt; cat $OUT/ncu.txt
