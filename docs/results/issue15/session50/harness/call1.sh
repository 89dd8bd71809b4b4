#!/usr/bin/env bash
# Session 50 call 1 (H100 box): build, fresh probe, the demo model's grid (8/16t x all/4 x pins, 3 repeats,
# re-timed) and OLMoE's (8/16t x all/48 x pins, its routing recorded first) through gpu_machine_session.sh
# predict; then, while time is left, the demo model's attention and projections harnesses at its shape
# (4 heads of 16, 64 x 64 bf16) at 4/8/16 threads and its op-times at 16 threads.
set -uo pipefail
out=$1; mkdir -p $out
source tools/fixtures/device_env.sh
B=build-device
cat >>tools/bench/CMakeLists.txt <<'CM'
add_executable(s50-attention-slices ${PROJECT_SOURCE_DIR}/s50-harness/attention_slices.cpp)
target_link_libraries(s50-attention-slices PRIVATE coli_forward coli_base OpenMP::OpenMP_CXX)
add_executable(s50-dense-narrow ${PROJECT_SOURCE_DIR}/s50-harness/dense_narrow.cpp)
target_link_libraries(s50-dense-narrow PRIVATE coli_forward coli_base OpenMP::OpenMP_CXX)
CM
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic s50-attention-slices s50-dense-narrow >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz" > $out/lscpu.txt
PREDICT_MODELS="tiny olmoe" OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=${GRID_TIMEOUT:-120} SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/grid predict 2>&1 | grep -E "worst|planned|takes" | tail -20
echo "grids done at $(( $(date +%s) - t0 )) s"
profile=/tmp/predict-profile.toml tiny=/tmp/tiny-demo.coli
if (( $(date +%s) - t0 < 540 )); then
  { for t in 16 8 4; do echo "== attention, demo shape, $t threads"; timeout 10 $B/tools/bench/s50-attention-slices $t 200 2 4 16
      echo "== projections, demo shape, $t threads"; timeout 10 $B/tools/bench/s50-dense-narrow $t 2000; done; } >$out/harness.txt 2>&1
  timeout 15 $B/tools/bench/coli-decode-bench --model $tiny --threads 16 -p 512 -n 16 -d 0 -r 1 --profile $profile \
    --op-times --op-depth 512 --op-tokens 16 --op-prefills 10 >$out/ops-tiny-16t.txt 2>&1
  $B/tools/coli-plan --profile $profile --model $tiny --threads 16 --gpu none --offline --prompt-ids --prompt-tokens 512 --ctx 528 --toml >$out/plan-tiny-16t.toml 2>/dev/null
fi
echo "done at $(( $(date +%s) - t0 )) s"
