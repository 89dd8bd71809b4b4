#!/usr/bin/env bash
# Session 51 call 1 (H100 box): build, the attention shapes harness at 16/8/4 threads (one call against
# the engine's slices, beside the planner's units), then a fresh probe and the Qwen3-30B-A3B-shaped grid
# (8/16t x caps all/64, --ram 16G, pins off, recorded routing, re-timed) through gpu_machine_session.sh
# predict, cut by --max-minutes to what is left of LIMIT seconds.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-570}
source tools/fixtures/device_env.sh
B=build-device
cat >>tools/bench/CMakeLists.txt <<'CM'
add_executable(s51-attention-shapes ${PROJECT_SOURCE_DIR}/s51-harness/attention_shapes.cpp)
target_link_libraries(s51-attention-shapes PRIVATE coli_forward coli_base OpenMP::OpenMP_CXX)
CM
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic s51-attention-shapes >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
{ lscpu; echo; for c in 0 1 8; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null) core $(cat /sys/devices/system/cpu/cpu$c/topology/core_id 2>/dev/null)"; done; env | grep -E "^OMP|^GOMP"; } > $out/lscpu.txt 2>&1
for t in 16 8 4; do timeout 30 $B/tools/bench/s51-attention-shapes $t 100; done > $out/attention-shapes.txt 2>&1
cat $out/attention-shapes.txt
echo "harness done at $(( $(date +%s) - t0 )) s"
# The synthetic container first, so the grid's --max-minutes sees only the probe and the grid.
B2=$B; m=/tmp/qwen3-30b-q4.coli
QWEN_SHAPE="--layers 48 --num-experts 128 --top-k 8 --hidden 2048 --width 768 --heads 32 --kv-heads 4 --vocab 151936"
$B/tools/bench/coli-make-synthetic --out $m --experts q4_g64 --dense q4_g64 $QWEN_SHAPE >/dev/null 2>&1; sync
echo "container done at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) - 60 ))  # the probe's minute comes off too
echo "grid timeout $left s"
PREDICT_MODELS=qwen QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=64 PREDICT_PINS=off PREDICT_REPEATS=2 PREDICT_TIMEOUT=$left \
  SWEEP_ARGS=--retime bash tools/fixtures/gpu_machine_session.sh $out/grid predict 2>&1 | grep -E "worst|planned|takes|refus|error" | tail -20
echo "done at $(( $(date +%s) - t0 )) s"
