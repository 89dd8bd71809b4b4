#!/usr/bin/env bash
# Session 47 H100 call 1: fresh probe (per-team greedy_sample point), tiny + OLMoE grids with --retime,
# op-level breakdowns at 8 and 16 threads (tiny cap all, OLMoE cap all), then the per-miss token cost harness.
set -u
out=$1
start=$SECONDS
PREDICT_MODELS="tiny olmoe" OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=170 SWEEP_ARGS=--retime OP_TIMES="tiny olmoe" OP_TIMES_THREADS="8 16" OP_TIMES_TINY_CAP=all \
  bash tools/fixtures/gpu_machine_session.sh $out predict
echo "grids done at $((SECONDS - start)) s"
B=build-device
cmake --build $B -j16 --target s47-miss-cost >$out/harness_build.txt 2>&1 || tail $out/harness_build.txt
for t in 8 16; do for cap in 4 8; do
  echo "threads $t cap $cap"; timeout 60 $B/tools/bench/s47-miss-cost /tmp/tiny-demo.coli $t $cap 128 10
done; done 2>&1 | tee $out/miss_cost.txt
lscpu >$out/lscpu.txt 2>&1
echo "all done at $((SECONDS - start)) s"
