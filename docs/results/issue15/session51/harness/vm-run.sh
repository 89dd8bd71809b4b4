#!/usr/bin/env bash
set -uo pipefail
cd /work/main
O=/tmp/s51/vm2; S=build/tools/bench/coli-sweep
common="--gpu none --kernels auto -p 512 -n 16 -d 0,512"
date > $O/times.txt
build/tools/coli-probe --out $O/profile.toml > $O/probe.log 2>&1
date >> $O/times.txt
$S --model /tmp/tiny-demo.coli --profile $O/profile.toml $common --retime --threads 1,2 --caps all,4 --pins off,on -r 2 --usage /tmp/s51/vm1/tiny/sweep.usage --out $O/tiny > $O/sweep-tiny.log 2>&1
date >> $O/times.txt
$S --model /tmp/olmoe-predict.coli --profile $O/profile.toml $common --threads 2 --caps all --pins off,on -r 1 --out $O/olmoe-rec > $O/sweep-olmoe-rec.log 2>&1
date >> $O/times.txt
$S --model /tmp/olmoe-predict.coli --profile $O/profile.toml $common --retime --threads 1,2 --caps all,48 --pins off,on -r 2 --usage $O/olmoe-rec/sweep.usage --out $O/olmoe > $O/sweep-olmoe.log 2>&1
date >> $O/times.txt
$S --model /tmp/qwen3-30b-q4.coli --profile $O/profile.toml $common --threads 2 --ram 16G --caps all,64 --pins off -r 1 --usage /tmp/qwen3-recorded.usage --out $O/qwen > $O/sweep-qwen.log 2>&1
date >> $O/times.txt
echo finished >> $O/times.txt
