#!/usr/bin/env bash
# Session 55's GPU-machine call (CPU only), tree 5fa1239, as prepared: `call.sh OUT olmoe` (call 1) or
# `call.sh OUT qwen` (call 2), each on a fresh machine and disk. A full probe, the demo model's grid (8/16t x
# all/4 x pins, 3 repeats) with the read rounds recorded until they settle (a2fe374; session 54's call 2 priced
# cap 4 74-77% slow from a first recording on a disk still warming), then
#   olmoe: OLMoE 8/16t x all/48 x pins from a resident recording (2 repeats);
#   qwen:  the Qwen3-30B-A3B shape under --ram 16G, 8/16t x all/64, pins off, the recorded routing (2 repeats),
# both through gpu_machine_session.sh predict, cut to what is left of LIMIT seconds. Outputs in OUT/o, packed
# into one tarball at exit (the machine returns at most 8 files).
set -uo pipefail
out=$1 second=${2:-}
[[ $second == olmoe || $second == qwen ]] || { echo "usage: call.sh OUT olmoe|qwen" >&2; exit 2; }
mkdir -p $out/o
trap 'tar czf $out/s55-$second.tgz -C $out o 2>/dev/null' EXIT
limit=${LIMIT:-550}
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz|L3" > $out/o/lscpu.txt
if [[ $second == qwen ]]; then  # the container first, its writeback done before the probe times anything
  QWEN_SHAPE="--layers 48 --num-experts 128 --top-k 8 --hidden 2048 --width 768 --heads 32 --kv-heads 4 --vocab 151936"
  $B/tools/bench/coli-make-synthetic --out /tmp/qwen3-30b-q4.coli --experts q4_g64 --dense q4_g64 $QWEN_SHAPE >/dev/null 2>&1; sync
  echo "container at $(( $(date +%s) - t0 )) s"
fi
rm -f /tmp/predict-profile.toml
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=150 PROBE_SETTLE=10 \
  bash tools/fixtures/gpu_machine_session.sh $out/o/tiny predict 2>&1 | grep -E "worst|planned:|takes|refus|stopped" | tail -8
grep -E "recorded|rounds that read" $out/o/tiny/sweep-tiny.log | cut -c1-220 | head -8
echo "probe and tiny grid at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) - 30 ))
echo "$second timeout $left s"
case $second in
  olmoe) grid=(PREDICT_MODELS=olmoe OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 PREDICT_PINS=off,on) ;;
  qwen) grid=(PREDICT_MODELS=qwen QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=all,64 PREDICT_PINS=off) ;;
esac
env "${grid[@]}" PREDICT_REPEATS=2 PREDICT_TIMEOUT=$left bash tools/fixtures/gpu_machine_session.sh $out/o/$second predict 2>&1 \
  | grep -E "worst|planned:|takes|refus|stopped" | tail -10
for j in $out/o/tiny/sweep-tiny.json $out/o/$second/sweep-$second.json; do
  [[ -f $j ]] && python3 tools/bench/sweep_prediction_table.py $j > ${j%.json}-table.md 2>&1
done
echo "done at $(( $(date +%s) - t0 )) s"
