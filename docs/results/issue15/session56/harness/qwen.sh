#!/usr/bin/env bash
# Session 56's second GPU-machine call (CPU only), tree 8d5436a, cut to the device time left (~580 s): the
# Qwen3-30B-A3B shape's container, a full probe, then its grid under --ram 16G at 8/16t x all/64, pins off,
# the recorded routing (2 repeats), through gpu_machine_session.sh predict, cut to LIMIT; then coli run's
# first pass priced (8d5436a) on the demo model, pp512 in three fresh processes. Outputs in OUT/o, packed
# into one tarball at exit.
set -uo pipefail
out=$1
mkdir -p $out/o
trap 'tar czf $out/s56-qwen.tgz -C $out o 2>/dev/null' EXIT
limit=${LIMIT:-400}
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s"
QWEN_SHAPE="--layers 48 --num-experts 128 --top-k 8 --hidden 2048 --width 768 --heads 32 --kv-heads 4 --vocab 151936"
$B/tools/bench/coli-make-synthetic --out /tmp/qwen3-30b-q4.coli --experts q4_g64 --dense q4_g64 $QWEN_SHAPE >/dev/null 2>&1; sync
$B/tools/coli convert --model tests/fixtures/models/tiny-demo --out /tmp/tiny-demo.coli --experts q4_g64 >/dev/null 2>&1
echo "containers at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) - 15 ))
echo "qwen timeout $left s (probe included)"
rm -f /tmp/predict-profile.toml
PREDICT_MODELS=qwen QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=all,64 PREDICT_PINS=off PREDICT_REPEATS=2 PROBE_SETTLE=10 \
  PREDICT_TIMEOUT=$(( left - 60 )) bash tools/fixtures/gpu_machine_session.sh $out/o/qwen predict 2>&1 \
  | grep -E "worst|planned:|takes|refus|stopped" | tail -10
[[ -f $out/o/qwen/sweep-qwen.json ]] && python3 tools/bench/sweep_prediction_table.py $out/o/qwen/sweep-qwen.json > $out/o/qwen/sweep-qwen-table.md 2>&1
B=$B bash "$(dirname "$0")/first-pass-runs.sh" /tmp/predict-profile.toml $out/o/coli-run-first-pass.txt
echo "done at $(( $(date +%s) - t0 )) s"
