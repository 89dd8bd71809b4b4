#!/usr/bin/env bash
# Session 56's third GPU-machine call (CPU only), tree 8d5436a, for the ~400 device seconds left: a full probe,
# the demo model streaming (cap 4, pins off) at 8/16t, 3 repeats, with coli-decode-bench's op-level
# breakdown at both (where the first call's cap-4 passes spent 150-450 ms of 200-600 outside compute);
# then coli run's first pass priced (8d5436a), pp512 in three fresh processes. Outputs in OUT/o, one tarball.
set -uo pipefail
out=$1
mkdir -p $out/o
trap 'tar czf $out/s56-diag.tgz -C $out o 2>/dev/null' EXIT
t0=$(date +%s)
rm -f /tmp/predict-profile.toml
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off PREDICT_REPEATS=3 PREDICT_TIMEOUT=90 PROBE_SETTLE=10 \
  OP_TIMES=tiny OP_TIMES_TINY_CAP=4 OP_TIMES_THREADS="8 16" TINY_CAPS=4 \
  bash tools/fixtures/gpu_machine_session.sh $out/o/tiny predict 2>&1 | grep -E "worst|planned:|takes|refus|stopped" | tail -8
echo "probe and grid at $(( $(date +%s) - t0 )) s"
source tools/fixtures/device_env.sh
[[ -f $out/o/tiny/sweep-tiny.json ]] && python3 tools/bench/sweep_prediction_table.py $out/o/tiny/sweep-tiny.json > $out/o/tiny/sweep-tiny-table.md 2>&1
B=$B bash "$(dirname "$0")/first-pass-runs.sh" /tmp/predict-profile.toml $out/o/coli-run-first-pass.txt
grep -E "^ *(prefill|decode|expert|attention|wait|read)" $out/o/tiny/op-times-tiny-*t.txt | head -40
echo "done at $(( $(date +%s) - t0 )) s"
