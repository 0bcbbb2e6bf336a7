#!/usr/bin/env bash
# One backward variant of the probe (bwd_variants(D), e.g. stmdq; dqred was measured with this script at 245162a)
# against the shipped kernel: correctness (bwd_variants), sustained alternation at issue 26's shapes with clocks
# logged, bursts (bwd_compare) and ncu at fixed clocks.
# Usage: OUT=<dir> VARIANT=<name> scripts/gpu/bwd_variant_call.sh   (carry build-probe/flash_hopper_probe)
H=build-probe/flash_hopper_probe
V=${VARIANT:?VARIANT=<a bwd_variants name>}
BINS="$H $H@$V" SHAPES="1 16 16384 128 1;1 16 16384 64 1;4 32 2048 80 1;1 16 16384 64 0" SUSTAIN_S=1.0 \
  scripts/gpu/bwd_iterate.sh $OUT/$V sustain
for shape in "1 16 16384 128 1" "1 16 16384 64 1" "4 32 2048 80 1" "1 16 8192 128 1" "4 16 4096 64 1" "4 25 512 64 1"; do
  $H bwd_compare $shape 10 4
done > $OUT/compare.txt 2>&1
for shape in "1 16 16384 128 1" "1 16 16384 64 1"; do
  for v in shipped $V; do
    echo "== $shape $v"
    ncu -k regex:flash_bwd_hopper_kernel --launch-count 1 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sectors_op_red.sum,lts__t_sectors.sum $H bwd_sustain $shape 0.05 $([[ $v != shipped ]] && echo $v) 2>&1 | grep -E 'gpu__time|cycles_elapsed|hmma|inst_exec|lts__|rror'
  done
done > $OUT/ncu.txt 2>&1
tail -3 $OUT/$V/checks.txt; grep bwd_sustain $OUT/$V/sustain.txt; grep -E 'shipped|variant|bwd_compare|b=' $OUT/compare.txt | tail -40; cat $OUT/ncu.txt
