#!/usr/bin/env bash
# Session 54 on the 2-core VM (tree c7d2774: the idle copies, the in-pass factor): a fresh probe, then the demo
# model's grid (1/2t x all/4 x pins, 3 repeats) from the profile and again re-timed; OLMOE=1 adds OLMoE's
# (routing recorded first; 1/2t x all/48 x pins, 2 repeats).
set -uo pipefail
out=${1:-/tmp/s54vm}; mkdir -p $out
B=build
$B/tools/coli-probe --disk-dir /tmp/diskprobe --out $out/profile.toml >$out/probe.log 2>&1
sweep() { local dir=$1; shift; $B/tools/bench/coli-sweep --profile $out/profile.toml --gpu none --kernels auto -p 512 -n 16 -d 0,512 --out $dir "$@" >$dir.log 2>&1; }
sweep $out/tiny --model /tmp/tiny-demo.coli --threads 1,2 --caps all,4 --pins off,on -r 3
sweep $out/tiny-retimed --model /tmp/tiny-demo.coli --retime --threads 1,2 --caps all,4 --pins off,on -r 3
[[ ${OLMOE:-0} == 1 ]] || exit 0
sweep $out/olmoe-rec --model /tmp/olmoe-predict.coli --threads 2 --caps all --pins off,on -r 1
sweep $out/olmoe --model /tmp/olmoe-predict.coli --threads 1,2 --caps all,48 --pins off,on -r 2 --usage $out/olmoe-rec/sweep.usage
