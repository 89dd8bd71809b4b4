#!/usr/bin/env bash
# Session 45 H100 call (as run, tiny grid only after seven failed starts): tiny grid, op times, probe twice, lm_head harness
set -u
out=$1
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=150 OP_TIMES=tiny OP_TIMES_THREADS="8 16" OP_TIMES_TINY_CAP=all PROBE_AGAIN=1 \
  bash tools/fixtures/gpu_machine_session.sh $out predict
D=/opt/deps; export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-device
g++ -O2 -std=c++20 -fopenmp -Iengine/forward/include -Iprobe/include -Ikernels -Iengine/model/include -I. docs/results/issue15/session45/vm/lm_gap.cpp \
  $B/engine/forward/libcoli_forward.a $B/kernels/libcoli_kernels_cpu.a $B/kernels/libcoli_kernels_reference.a $B/probe/libcoli_base.a \
  -L$D/usr/lib/x86_64-linux-gnu -lhwloc -o /tmp/lm_gap >$out/lm_gap_build.txt 2>&1 || tail $out/lm_gap_build.txt
lscpu >$out/lscpu.txt 2>&1; cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list >>$out/lscpu.txt 2>&1
for t in 1 8 16; do
  for m in 0 1; do /tmp/lm_gap 50257 64 $t $m 0 0; /tmp/lm_gap 32768 64 $t $m 0 0; done
done 2>&1 | tee $out/lm_gap.txt
