#!/usr/bin/env bash
# Session 46 H100 call: OLMoE + tiny grids on the v9 usage history (decode read rounds apart), probe twice,
# then the per-token decode times after a prompt (tiny, cap all / 4, after no sleep / 50 ms sleep) and the memory ramp harness.
set -u
out=$1
start=$SECONDS
PREDICT_MODELS="olmoe tiny" OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=150 PROBE_AGAIN=1 bash tools/fixtures/gpu_machine_session.sh $out predict
echo "grids done at $((SECONDS - start)) s"
B=build-device
cmake --build $B -j16 --target s46-token-times >$out/harness_build.txt 2>&1 || tail $out/harness_build.txt
for t in 8 16; do
  for cap in 8 4; do
    for s in 0 50; do
      echo "threads $t cap $cap sleep $s"
      timeout 40 $B/tools/bench/s46-token-times /tmp/tiny-demo.coli $t $cap $s
    done
  done
done 2>&1 | tee $out/token_times.txt | grep -E "threads|mean"
g++ -O2 -o /tmp/ramp_mem s46-harness/ramp_mem.cpp && for b in 1048576 6500000 64000000; do for s in 0 1 10 50; do /tmp/ramp_mem $b $s; done; done 2>&1 | tee $out/ramp_mem.txt
lscpu >$out/lscpu.txt 2>&1
echo "all done at $((SECONDS - start)) s"
