#!/usr/bin/env bash
# Session 53 on the 2-core VM: a fresh probe, then the demo model's grid (1/2t x all/4 x pins, 3 repeats,
# re-timed) and OLMoE's (routing recorded first; 1/2t x all/48 x pins, 2 repeats, re-timed).
set -uo pipefail
out=${1:-/tmp/s53vm}; mkdir -p $out/tiny $out/olmoe
B=build
$B/tools/coli-probe --disk-dir /tmp/diskprobe --out $out/profile.toml >$out/probe.log 2>&1
sweep() { local dir=$1; shift; $B/tools/bench/coli-sweep --profile $out/profile.toml --gpu none --kernels auto -p 512 -n 16 -d 0,512 --out $dir "$@" >$dir.log 2>&1; }
sweep $out/tiny --model /tmp/tiny-demo.coli --retime --threads 1,2 --caps all,4 --pins off,on -r 3
[[ ${OLMOE:-1} == 0 ]] && exit 0
sweep $out/olmoe-rec --model /tmp/olmoe-predict.coli --threads 2 --caps all --pins off,on -r 1
sweep $out/olmoe --model /tmp/olmoe-predict.coli --retime --threads 1,2 --caps all,48 --pins off,on -r 2 --usage $out/olmoe-rec/sweep.usage
# Qwen3 streaming (run apart, after the two grids above): --ram 16G, 2t x all/64, one repeat, the recorded routing.
if [[ ${QWEN:-0} == 1 ]]; then
  gunzip -c tools/fixtures/predict/qwen3-synthetic-sweep.usage.gz >/tmp/qwen3-recorded.usage
  sweep $out/qwen --model /tmp/qwen3-30b-q4.coli --retime --threads 2 --ram 16G --caps all,64 --pins off -r 1 --usage /tmp/qwen3-recorded.usage
fi
