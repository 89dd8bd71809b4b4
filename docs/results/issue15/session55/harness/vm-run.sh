#!/usr/bin/env bash
# Session 55 on the 2-core VM (tree 5fa1239): a fresh probe, then the three shapes' grids from it: the demo
# model (1/2t x all/4 x pins, 3 repeats), OLMoE (routing recorded first; 1/2t x all/48 x pins, 2 repeats) and
# the Qwen3-30B-A3B shape under --ram 16G (2t x all/64, pins off, the recorded routing, 2 repeats).
# R=3 takes 3 repeats of OLMoE and Qwen3 (the second run, /tmp/s55vm2).
set -uo pipefail
out=${1:-/tmp/s55vm}; mkdir -p $out
B=build
date -u +%T > $out/times.txt
$B/tools/coli-probe --disk-dir /tmp/diskprobe --out $out/profile.toml >$out/probe.log 2>&1
sweep() { local dir=$1; shift; $B/tools/bench/coli-sweep --profile $out/profile.toml --gpu none --kernels auto -p 512 -n 16 -d 0,512 --out $dir "$@" >$dir.log 2>&1; date -u +"%T $dir" >> $out/times.txt; }
sweep $out/tiny --model /tmp/tiny-demo.coli --threads 1,2 --caps all,4 --pins off,on -r 3
sweep $out/olmoe-rec --model /tmp/olmoe-predict.coli --threads 2 --caps all --pins off,on -r 1
sweep $out/olmoe --model /tmp/olmoe-predict.coli --threads 1,2 --caps all,48 --pins off,on -r ${R:-2} --usage $out/olmoe-rec/sweep.usage
[[ -s /tmp/qwen3-recorded.usage ]] || gunzip -c tools/fixtures/predict/qwen3-synthetic-sweep.usage.gz >/tmp/qwen3-recorded.usage
sweep $out/qwen --model /tmp/qwen3-30b-q4.coli --threads 2 --ram 16G --caps all,64 --pins off -r ${R:-2} --usage /tmp/qwen3-recorded.usage
echo finished >> $out/times.txt
