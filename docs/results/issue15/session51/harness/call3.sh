#!/usr/bin/env bash
# Session 51 call 3 (H100 box), the final code: build, a fresh probe and the demo model's grid (8/16t x
# all/4 x pins, 4 repeats, re-timed), then the Qwen3-30B-A3B-shaped grid (8/16t x all/64, --ram 16G,
# pins off, the recorded routing, 2 repeats), both through gpu_machine_session.sh predict, the second cut
# by --max-minutes to what is left of LIMIT seconds.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-570}
source tools/fixtures/device_env.sh
B=build-device
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-make-synthetic >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
QWEN_SHAPE="--layers 48 --num-experts 128 --top-k 8 --hidden 2048 --width 768 --heads 32 --kv-heads 4 --vocab 151936"
$B/tools/bench/coli-make-synthetic --out /tmp/qwen3-30b-q4.coli --experts q4_g64 --dense q4_g64 $QWEN_SHAPE >/dev/null 2>&1
echo "container at $(( $(date +%s) - t0 )) s"
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=4 PREDICT_TIMEOUT=120 SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/tiny predict 2>&1 | grep -E "worst|planned|takes|refus" | tail -12
echo "probe and tiny grid at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) ))
echo "qwen grid timeout $left s"
PREDICT_MODELS=qwen QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=all,64 PREDICT_PINS=off PREDICT_REPEATS=2 PREDICT_TIMEOUT=$left \
  bash tools/fixtures/gpu_machine_session.sh $out/qwen predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -14
echo "done at $(( $(date +%s) - t0 )) s"
