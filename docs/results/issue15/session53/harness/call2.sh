#!/usr/bin/env bash
# Session 53 call 2 (H100 box, warm after call 1, or fresh): the OLMoE-shaped grid (8/16t x all/48 x pins,
# routing recorded first, 2 repeats, re-timed) on call 1's settled probe (a fresh machine: the build, the
# container, its writeback settled and a probe first), in what is left of LIMIT seconds.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-560}
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s; profile $(ls -la /tmp/predict-profile.toml 2>&1)"
[[ -f /tmp/olmoe-predict.coli ]] || { $B/tools/bench/coli-make-synthetic --out /tmp/olmoe-predict.coli --experts q4_g64 --dense q4_g64 >/dev/null 2>&1; sync; sleep 20; }
left=$(( limit - ($(date +%s) - t0) ))
echo "grid timeout $left s"
PREDICT_MODELS=olmoe OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 PREDICT_PINS=off,on PREDICT_REPEATS=2 \
  PREDICT_TIMEOUT=$(( left - 90 )) SWEEP_ARGS=--retime PROBE_SETTLE=1 \
  bash tools/fixtures/gpu_machine_session.sh $out/olmoe predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -14
echo "done at $(( $(date +%s) - t0 )) s"
