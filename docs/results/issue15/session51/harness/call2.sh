#!/usr/bin/env bash
# Session 51 call 2 (H100 box), on the new probe points (attention in the pass's slices, the narrow one at
# 4 heads of 16; bf16 projections as the pass runs them): build, a fresh probe and the demo model's grid
# (8/16t x all/4 x pins, 3 repeats, re-timed) through gpu_machine_session.sh predict; then op-level
# breakdowns beside the plan's terms: the Qwen3-30B-A3B-shaped model resident at 16 threads and
# streaming at cap 64 (--ram 16G, the recorded routing) at 8; the demo model resident at 8 threads.
set -uo pipefail
out=$1; mkdir -p $out
source tools/fixtures/device_env.sh
B=build-device
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
profile=/tmp/predict-profile.toml q=/tmp/qwen3-30b-q4.coli tiny=/tmp/tiny-demo.coli usage=/tmp/qwen3-recorded.usage
QWEN_SHAPE="--layers 48 --num-experts 128 --top-k 8 --hidden 2048 --width 768 --heads 32 --kv-heads 4 --vocab 151936"
[[ -f $q ]] || $B/tools/bench/coli-make-synthetic --out $q --experts q4_g64 --dense q4_g64 $QWEN_SHAPE >/dev/null 2>&1
gunzip -c tools/fixtures/predict/qwen3-synthetic-sweep.usage.gz >$usage
echo "container at $(( $(date +%s) - t0 )) s"
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=120 SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/grid predict 2>&1 | grep -E "worst|planned|takes|refus" | tail -12
echo "probe and tiny grid at $(( $(date +%s) - t0 )) s"
ops() {  # name model threads cap extra...
  local name=$1 m=$2 t=$3 cap=$4; shift 4
  timeout 100 $B/tools/bench/coli-decode-bench --model $m --threads $t -p 512 -n 16 -d 0 -r 1 --cap $cap --profile $profile \
    --op-times --op-depth 512 --op-tokens 16 "$@" >$out/ops-$name-${t}t.txt 2>&1
  echo "$name ${t}t at $(( $(date +%s) - t0 )) s"
}
plan() {  # name model threads plan-args...
  local name=$1 m=$2 t=$3; shift 3
  $B/tools/coli-plan --profile $profile --model $m --threads $t --gpu none --offline --prompt-ids --prompt-tokens 512 --ctx 528 --toml "$@" \
    >$out/plan-$name-${t}t.toml 2>$out/plan-$name-${t}t.err
}
ops qwen-all $q 16 all --op-prefills 2; plan qwen-all $q 16 --ram 16G --usage $usage
ops qwen-64 $q 8 64 --usage $usage --pins 0; plan qwen-64 $q 8 --ram 16G --cap 64 --pin 0 --usage $usage
ops tiny-all $tiny 8 all --op-prefills 20; plan tiny-all $tiny 8
echo "done at $(( $(date +%s) - t0 )) s"
