#!/usr/bin/env bash
# Session 54 call 3 (GPU machine, CPU only), tree a2fe374: read rounds recorded until they settle. A fresh probe and
# container, then the demo model's grid (8/16t x all/4 x pins, 3 repeats), as call 2 ran it before the change
# (its cap-4 prompts priced 74-77% slow from a recording of 0.24 ms rounds, the runs' 0.08-0.11).
set -uo pipefail
out=$1; mkdir -p $out/o
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s"
rm -f /tmp/predict-profile.toml
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=100 PROBE_SETTLE=10 \
  bash tools/fixtures/gpu_machine_session.sh $out/o predict 2>&1 | grep -E "worst|planned|refus|stopped" | tail -8
grep -E "recorded|rounds that read|repeat [0-9]/3  8t k0 \| cap 4" $out/o/sweep-tiny.log | cut -c1-220
echo "done at $(( $(date +%s) - t0 )) s"
tar czf $out/s54-call3.tgz -C $out o && rm -rf $out/o
