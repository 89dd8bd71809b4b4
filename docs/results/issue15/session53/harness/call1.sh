#!/usr/bin/env bash
# Session 53 call 1 (H100 box), tree 5beb6db (the region mean, RAM re-timed): device_build's first run; pass_tail.cpp's interleaved FTZ/DAZ A/B
# (odd passes with flush-to-zero on every thread) for the demo model at 16 and 8 threads and OLMoE at 16;
# llc_retention.cpp (how much of a 4/32/128 MiB buffer the L3 keeps over 0-50 ms of register-only work); the
# containers' writeback settled (sync, 20 s) before a fresh probe; OLMoE's op-times at 8 and 16 threads beside
# its plan's terms (cap all: which decode term the box runs faster than priced); then the demo model's grid
# (8/16t x all/4 x pins, re-timed) in what is left of LIMIT seconds.
set -uo pipefail
out=$1; mkdir -p $out
limit=${LIMIT:-430}
t0=$(date +%s)
source tools/fixtures/device_env.sh
cat >>tools/bench/CMakeLists.txt <<'CM'
add_executable(s53-pass-tail ${PROJECT_SOURCE_DIR}/s53-harness/pass_tail.cpp)
target_link_libraries(s53-pass-tail PRIVATE coli_runtime coli_runtime_plan coli_probe_tuning coli_container coli_base OpenMP::OpenMP_CXX)
target_include_directories(s53-pass-tail PRIVATE ${PROJECT_SOURCE_DIR}/probe)
CM
device_build -- coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic s53-pass-tail
echo "built in $(( $(date +%s) - t0 )) s (B=$B)"
lscpu | grep -E "Model name|MHz|L3" > $out/lscpu.txt
[[ -f /tmp/olmoe-predict.coli ]] || $B/tools/bench/coli-make-synthetic --out /tmp/olmoe-predict.coli --experts q4_g64 --dense q4_g64 >/dev/null 2>&1
[[ -f /tmp/tiny-demo.coli ]] || $B/tools/coli convert --model tests/fixtures/models/tiny-demo --out /tmp/tiny-demo.coli --experts q4_g64 >/dev/null 2>&1
echo "containers at $(( $(date +%s) - t0 )) s"
{ for t in 16 8; do S52_FTZ_AB=1 timeout 25 $B/tools/bench/s53-pass-tail /tmp/tiny-demo.coli $t 600; done
  S52_FTZ_AB=1 timeout 40 $B/tools/bench/s53-pass-tail /tmp/olmoe-predict.coli 16 24; } >$out/ftz-ab.txt 2>&1
grep -E "^threads|pass us|logits" $out/ftz-ab.txt | sed -E 's/ +p10 .*//'
echo "FTZ A/B at $(( $(date +%s) - t0 )) s"
g++ -O2 -o /tmp/s53-llc-retention s53-harness/llc_retention.cpp &&
  for m in 4 32 128; do /tmp/s53-llc-retention $m 4; done >$out/llc-retention.txt 2>&1
cat $out/llc-retention.txt
sync; sleep 20
PREDICT_MODELS=olmoe OLMOE_SWEEP=0 OP_TIMES=olmoe OP_TIMES_THREADS="8 16" OP_PREFILLS=2 PROBE_SETTLE=1 \
  bash tools/fixtures/gpu_machine_session.sh $out/olmoe predict >$out/olmoe-session.log 2>&1
grep -E "per token|experts \(compute\)|lm_head|attention core" $out/olmoe/op-times-olmoe-*t.txt | head -30
echo "probe and OLMoE op-times at $(( $(date +%s) - t0 )) s"
left=$(( limit - ($(date +%s) - t0) ))
if (( left > 60 )); then
  echo "tiny grid timeout $left s"
  PREDICT_MODELS=tiny TINY_THREADS=8,16 PREDICT_PINS=off,on PREDICT_REPEATS=3 PREDICT_TIMEOUT=$(( left - 15 )) SWEEP_ARGS=--retime \
    bash tools/fixtures/gpu_machine_session.sh $out/tiny predict 2>&1 | grep -E "worst|planned|takes|refus|stopped" | tail -12
fi
echo "done at $(( $(date +%s) - t0 )) s"
