#!/usr/bin/env bash
# Session 52 VM grids on 0a59385: a fresh probe, the demo model (1/2t x all/4 x pins, its own recorded
# routing, 3 repeats, re-timed), OLMoE (routing recorded first; 1/2t x all/48 x pins, 2 repeats, re-timed),
# Qwen3-30B-A3B-shaped (2t, --ram 16G, caps all/64, the recorded routing of tools/fixtures/predict, 1 repeat).
set -uo pipefail
cd /work/main
O=${1:-/tmp/s52/vm2}; S=build/tools/bench/coli-sweep
mkdir -p $O
common="--gpu none --kernels auto -p 512 -n 16 -d 0,512"
date > $O/times.txt
build/tools/coli-probe --out $O/profile.toml > $O/probe.log 2>&1
date >> $O/times.txt
$S --model /tmp/tiny-demo.coli --profile $O/profile.toml $common --retime --threads 1,2 --caps all,4 --pins off,on -r 3 --out $O/tiny > $O/sweep-tiny.log 2>&1
date >> $O/times.txt
$S --model /tmp/olmoe-predict.coli --profile $O/profile.toml $common --threads 2 --caps all --pins off,on -r 1 --out $O/olmoe-rec > $O/sweep-olmoe-rec.log 2>&1
date >> $O/times.txt
$S --model /tmp/olmoe-predict.coli --profile $O/profile.toml $common --retime --threads 1,2 --caps all,48 --pins off,on -r 2 --usage $O/olmoe-rec/sweep.usage --out $O/olmoe > $O/sweep-olmoe.log 2>&1
date >> $O/times.txt
$S --model /tmp/qwen3-30b-q4.coli --profile $O/profile.toml $common --threads 2 --ram 16G --caps all,64 --pins off -r 1 --usage /tmp/qwen3-recorded.usage --out $O/qwen > $O/sweep-qwen.log 2>&1
date >> $O/times.txt
echo finished >> $O/times.txt
