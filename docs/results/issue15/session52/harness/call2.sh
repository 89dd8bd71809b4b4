#!/usr/bin/env bash
# Session 52 call 2 (H100 box), tree 0a59385: the build; pass_tail.cpp's interleaved FTZ/DAZ A/B (odd passes
# with flush-to-zero on every thread) for the demo model at 16 and 8 threads and OLMoE at 16; then the
# containers' writeback settled (sync, 20 s) before a fresh probe, and the OLMoE-shaped grid (8/16t x all/48
# x pins, routing recorded first, 2 repeats, re-timed), then the demo model's grid (8/16t x all/4 x pins,
# re-timed) in what is left of LIMIT seconds.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-570}
source tools/fixtures/device_env.sh
B=build-device
cat >>tools/bench/CMakeLists.txt <<'CM'
add_executable(s52-pass-tail ${PROJECT_SOURCE_DIR}/s52-harness/pass_tail.cpp)
target_link_libraries(s52-pass-tail PRIVATE coli_runtime coli_runtime_plan coli_probe_tuning coli_container coli_base OpenMP::OpenMP_CXX)
target_include_directories(s52-pass-tail PRIVATE ${PROJECT_SOURCE_DIR}/probe)
CM
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-make-synthetic s52-pass-tail >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz|L3" > $out/lscpu.txt
[[ -f /tmp/olmoe-predict.coli ]] || $B/tools/bench/coli-make-synthetic --out /tmp/olmoe-predict.coli --experts q4_g64 --dense q4_g64 >/dev/null 2>&1
[[ -f /tmp/tiny-demo.coli ]] || $B/tools/coli convert --model tests/fixtures/models/tiny-demo --out /tmp/tiny-demo.coli --experts q4_g64 >/dev/null 2>&1
echo "containers at $(( $(date +%s) - t0 )) s"
{ for t in 16 8; do S52_FTZ_AB=1 timeout 25 $B/tools/bench/s52-pass-tail /tmp/tiny-demo.coli $t 600; done
  S52_FTZ_AB=1 timeout 40 $B/tools/bench/s52-pass-tail /tmp/olmoe-predict.coli 16 24; } >$out/ftz-ab.txt 2>&1
grep -E "^threads|pass us|logits" $out/ftz-ab.txt
echo "FTZ A/B at $(( $(date +%s) - t0 )) s"
sync; sleep 20
PREDICT_MODELS=olmoe OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 PREDICT_PINS=off,on PREDICT_REPEATS=2 \
  PREDICT_TIMEOUT=${GRID_TIMEOUT:-250} SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/olmoe predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -14
echo "probe and OLMoE grid at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) ))
if (( left > 45 )); then
  echo "tiny grid timeout $left s"
  PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=$left SWEEP_ARGS=--retime \
    bash tools/fixtures/gpu_machine_session.sh $out/tiny predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -12
fi
echo "done at $(( $(date +%s) - t0 )) s"
