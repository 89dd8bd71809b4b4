#!/usr/bin/env bash
# Session 54 call 3 (GPU machine, CPU only), tree e59eb0b: read rounds recorded until they settle, on a fresh machine
# and a fresh container: a short probe (--budget 10), then the demo model's grid at 8 threads (all/4 x pins, 3
# repeats), as call 2's grid met the disk (its cap-4 prompts priced 74-77% slow from a first recording of 0.24 ms
# rounds, the runs' 0.08-0.11). Every output straight into OUT (a call cut short still returns them).
set -uo pipefail
out=$1
t0=$(date +%s)
source tools/fixtures/device_env.sh
device_build -- coli-probe coli coli-sweep
echo "built in $(( $(date +%s) - t0 )) s"
$B/tools/coli convert --model tests/fixtures/models/tiny-demo --out /tmp/tiny-demo.coli --experts q4_g64 >/dev/null 2>&1
mkdir -p /tmp/diskprobe
$B/tools/coli-probe --disk-dir /tmp/diskprobe --budget 10 --out $out/profile.toml >$out/probe.log 2>&1
echo "probed at $(( $(date +%s) - t0 )) s"
timeout 70 $B/tools/bench/coli-sweep --model /tmp/tiny-demo.coli --profile $out/profile.toml --gpu none --threads 8 \
  --caps all,4 --pins off,on --kernels auto -p 512 -n 16 -d 0,512 -r 3 --out /tmp/sw >$out/sweep-tiny.log 2>&1
cp /tmp/sw/sweep.json $out/sweep-tiny.json 2>/dev/null
grep -E "recorded|rounds that read|repeat [0-9]/3  8t k0 \| cap 4|worst" $out/sweep-tiny.log | cut -c1-200
echo "done at $(( $(date +%s) - t0 )) s"
