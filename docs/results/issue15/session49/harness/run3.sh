#!/usr/bin/env bash
# Session 49 call 3: the demo shape's prefill attention by slicing at 4/8/16 threads, its op-times,
# then the tiny grid (8/16 x all/4, pins off) on a fresh probe. Everything into one tarball by the caller.
set -uo pipefail
out=$1; mkdir -p $out
source tools/fixtures/device_env.sh
B=build-device
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build0.log 2>&1 &&
  cmake --build $B -j16 --target coli coli-decode-bench s49-attention-slices coli-probe coli-plan coli-sweep coli-make-synthetic >>$out/build0.log 2>&1 ||
  { tail -30 $out/build0.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
tiny=/tmp/tiny-demo.coli
[[ -f $tiny ]] || $B/tools/coli convert --model tests/fixtures/models/tiny-demo --out $tiny --experts q4_g64 >/dev/null 2>&1
sync; sleep 2
for t in 16 8 4; do
  $B/tools/bench/s49-attention-slices $t 400 2 4 16
  $B/tools/bench/s49-attention-slices $t 200 2 16 16
done > $out/attention-slices.txt 2>&1
for t in 16 8; do
  $B/tools/bench/coli-decode-bench --model $tiny --threads $t -p 512 -n 4 -d 0 -r 3 --op-times --op-depth 16 --op-tokens 4 --op-prefills 40 >$out/ops-tiny-${t}t.txt 2>&1
done
echo "harness done at $(( $(date +%s) - t0 )) s"
PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off PREDICT_REPEATS=3 PREDICT_TIMEOUT=120 SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/g predict >$out/g-tiny.txt 2>&1
echo "tiny grid done at $(( $(date +%s) - t0 )) s"
