#!/usr/bin/env bash
# Session 54 call 2 (GPU machine, CPU only), tree with the narrow expert batch's idle copies
# (expert_q4_prefill_narrow_idle1ms, _idle4ms) and the in-pass factor: a fresh probe (its idle copies beside
# back to back), the demo model's grid (8/16t x all/4 x pins, 3 repeats) with its op-times and plan terms at
# 8 and 16 threads, then OLMoE resident (8/16t, 2 repeats).
set -uo pipefail
out=$1; mkdir -p $out/o
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s"
rm -f /tmp/predict-profile.toml
lscpu | grep -E "Model name|MHz|L3" > $out/o/lscpu.txt
PREDICT_MODELS="tiny olmoe" TINY_THREADS=8,16 OP_TIMES=tiny OP_TIMES_TINY_CAP=all OP_TIMES_THREADS="8 16" OP_PREFILLS=100 \
  OLMOE_THREADS=8,16 OLMOE_CAPS=all PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=150 PROBE_SETTLE=10 \
  bash tools/fixtures/gpu_machine_session.sh $out/o predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -12
grep -E "narrow(_idle.ms)?'" -A12 $out/o/profile.toml | grep -E "kernel =|threads =|^median = " | paste - - - | head -12
for t in 8 16; do grep -A13 "prefill passes" $out/o/op-times-tiny-${t}t.txt | grep -E "passes|experts \(" ; done
echo "done at $(( $(date +%s) - t0 )) s"
cp $out/build.log $out/o/ 2>/dev/null
tar czf $out/s54-call2.tgz -C $out o && rm -rf $out/o
