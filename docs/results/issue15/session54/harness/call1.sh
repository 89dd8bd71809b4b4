#!/usr/bin/env bash
# Session 54 call 1 (GPU machine, CPU only): OLMoE streaming decode at cap 48 on 16 threads, priced 13-21% slow in
# sessions 52-53 with its reads as predicted: the op-level breakdown (expert I/O wait beside compute) at cap 48 pins
# 0 and 24 and at cap all, each beside coli-plan's terms of the same configuration; then --retime against runs:
# coli-plan --retime (its drift line: kernels and RAM re-timed) and a resident decode-bench right after, twice.
set -uo pipefail
out=$1; mkdir -p $out/o
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli-plan coli coli-sweep coli-decode-bench coli-make-synthetic
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz|L3" > $out/o/lscpu.txt
m=/tmp/olmoe-predict.coli
[[ -f $m ]] || $B/tools/bench/coli-make-synthetic --out $m --experts q4_g64 --dense q4_g64 >/dev/null 2>&1
sync; sleep 15
P=/tmp/predict-profile.toml; mkdir -p /tmp/diskprobe
[[ -s $P ]] || $B/tools/coli-probe --disk-dir /tmp/diskprobe --out $P >$out/o/probe.log 2>&1
cp $P $out/o/profile.toml
echo "probe at $(( $(date +%s) - t0 )) s"
U=/tmp/s54-rec/sweep.usage
[[ -s $U ]] || timeout 120 $B/tools/bench/coli-sweep --model $m --profile $P --gpu none --threads 16 --caps all --pins off,on \
  --kernels auto -p 512 -n 16 -d 0,512 -r 1 --out /tmp/s54-rec >$out/o/sweep-rec.log 2>&1
cp $U $out/o/rec.usage
echo "recorded at $(( $(date +%s) - t0 )) s"
for cfg in "48 0" "48 24" "all 0"; do
  set -- $cfg; cap=$1; pins=$2
  $B/tools/bench/coli-decode-bench --model $m --threads 16 -p 512 -n 16 -d 0 -r 1 --cap $cap --profile $P \
    --usage $U --pins $pins --op-times --op-depth 512 --op-tokens 64 --op-prefills 1 >$out/o/op-times-c$cap-p$pins.txt 2>&1
  $B/tools/coli-plan --profile $P --model $m --threads 16 $([[ $cap == all ]] || echo --cap $cap --pin $pins) --gpu none \
    --usage $U --prompt-ids --prompt-tokens 512 --ctx 528 --json >$out/o/plan-c$cap-p$pins.json 2>$out/o/plan-c$cap-p$pins.err
  grep -E "per token|expert I/O|experts \(compute\)" $out/o/op-times-c$cap-p$pins.txt | head -8
done
echo "op-times at $(( $(date +%s) - t0 )) s"
for i in 1 2; do
  $B/tools/coli-plan --profile $P --model $m --threads 16 --gpu none --retime --prompt-ids --prompt-tokens 512 --ctx 528 \
    --json >$out/o/plan-retime-$i.json 2>$out/o/plan-retime-$i.err
  grep -i "re-timed\|drift\|RAM read" $out/o/plan-retime-$i.err | head -5
  $B/tools/bench/coli-decode-bench --model $m --threads 16 -p 512 -n 16 -d 0,512 -r 3 --profile $P >$out/o/bench-after-retime-$i.txt 2>&1
  grep -E "pp512|tg16" $out/o/bench-after-retime-$i.txt | head -6
done
echo "done at $(( $(date +%s) - t0 )) s"
cp $out/build.log $out/o/ 2>/dev/null
tar czf $out/s54-call1.tgz -C $out o && rm -rf $out/o
