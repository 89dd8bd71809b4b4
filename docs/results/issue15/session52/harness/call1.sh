#!/usr/bin/env bash
# Session 52 call 1 (H100 box), tree 0a59385 (session 51's code + the VNNI lanes change): the build, a fresh probe and the
# OLMoE-shaped grid (8/16t x all/48 x pins, routing recorded first, 2 repeats, re-timed) through
# gpu_machine_session.sh predict; then pass_tail.cpp (empty regions' and prompt passes' median against
# their mean) for the demo model at 16 and 8 threads and OLMoE at 16, and the demo model's op-times at 16
# threads beside its plan's terms; expert_topk.cpp (a 64-wide expert batch by routed tokens) at 16 and 8.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-570}
source tools/fixtures/device_env.sh
B=build-device
cat >>tools/bench/CMakeLists.txt <<'CM'
add_executable(s52-pass-tail ${PROJECT_SOURCE_DIR}/s52-harness/pass_tail.cpp)
target_link_libraries(s52-pass-tail PRIVATE coli_runtime coli_runtime_plan coli_probe_tuning coli_container coli_base OpenMP::OpenMP_CXX)
target_include_directories(s52-pass-tail PRIVATE ${PROJECT_SOURCE_DIR}/probe)
add_executable(s52-expert-topk ${PROJECT_SOURCE_DIR}/s52-harness/expert_topk.cpp)
target_link_libraries(s52-expert-topk PRIVATE coli_probe_tuning coli_base)
target_include_directories(s52-expert-topk PRIVATE ${PROJECT_SOURCE_DIR}/probe)
CM
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic s52-pass-tail s52-expert-topk >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz" > $out/lscpu.txt
$B/tools/bench/coli-make-synthetic --out /tmp/olmoe-predict.coli --experts q4_g64 --dense q4_g64 >/dev/null 2>&1
$B/tools/coli convert --model tests/fixtures/models/tiny-demo --out /tmp/tiny-demo.coli --experts q4_g64 >/dev/null 2>&1
ls -la /tmp/*.coli
echo "containers at $(( $(date +%s) - t0 )) s"
PREDICT_MODELS=olmoe OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 PREDICT_PINS=off,on PREDICT_REPEATS=2 \
  PREDICT_TIMEOUT=${GRID_TIMEOUT:-250} SWEEP_ARGS=--retime \
  bash tools/fixtures/gpu_machine_session.sh $out/grid predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -14
echo "probe and grid at $(( $(date +%s) - t0 )) s"
profile=/tmp/predict-profile.toml tiny=/tmp/tiny-demo.coli
{ for t in 16 8; do timeout 30 $B/tools/bench/s52-pass-tail $tiny $t 400; done
  S52_FTZ=1 timeout 30 $B/tools/bench/s52-pass-tail $tiny 16 400
  timeout 40 $B/tools/bench/s52-pass-tail /tmp/olmoe-predict.coli 16 30; } >$out/pass-tail.txt 2>&1
{ for t in 16 8; do timeout 30 $B/tools/bench/s52-expert-topk $t amx 0; timeout 30 $B/tools/bench/s52-expert-topk $t amx 16; done; } >$out/expert-topk.txt 2>&1
grep -E "threads|demo|narrow" $out/expert-topk.txt
cat $out/pass-tail.txt
echo "pass tails at $(( $(date +%s) - t0 )) s"
for t in 16 8; do
  timeout 30 $B/tools/bench/coli-decode-bench --model $tiny --threads $t -p 512 -n 16 -d 0 -r 1 --profile $profile \
    --op-times --op-depth 512 --op-tokens 16 --op-prefills 20 --batch-log $out/batches-tiny-${t}t.txt >$out/ops-tiny-${t}t.txt 2>&1
  $B/tools/coli-plan --profile $profile --model $tiny --threads $t --gpu none --offline --prompt-ids --prompt-tokens 512 --ctx 528 \
    --json >$out/plan-tiny-${t}t.json 2>/dev/null
done
echo "done at $(( $(date +%s) - t0 )) s"
