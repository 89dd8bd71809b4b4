#!/usr/bin/env bash
# Session 49 call 1: prefill attention and expert compute at 8/16 threads on the 16-core machine.
set -uo pipefail
out=$1; mkdir -p $out
source tools/fixtures/device_env.sh
B=build-device
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli-probe coli-plan coli coli-decode-bench coli-make-synthetic s49-attention-slices >>$out/build.log 2>&1 ||
  { tail -30 $out/build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
lscpu | grep -E "Model name|MHz" > $out/lscpu.txt
m=/tmp/olmoe-predict.coli
[[ -f $m ]] || $B/tools/bench/coli-make-synthetic --out $m --experts q4_g64 --dense q4_g64 >/dev/null 2>&1
tiny=/tmp/tiny-demo.coli
[[ -f $tiny ]] || $B/tools/coli convert --model tests/fixtures/models/tiny-demo --out $tiny --experts q4_g64 >/dev/null 2>&1
sync; sleep 3
for t in 16 8; do $B/tools/bench/s49-attention-slices $t 40 16; done | tee $out/attention-slices.txt
profile=/tmp/predict-profile.toml
mkdir -p /tmp/diskprobe
[[ -s $profile ]] || $B/tools/coli-probe --disk-dir /tmp/diskprobe --out $profile >$out/probe.log 2>&1
cp $profile $out/profile.toml
echo "probe done at $(( $(date +%s) - t0 )) s"
for k in amx avx512vnni; do
  for t in 16 8; do
    $B/tools/bench/coli-decode-bench --model $m --threads $t --kernel $k -p 512 -n 4 -d 0 -r 1 --op-times --op-depth 16 --op-tokens 4 --op-prefills 3 >$out/ops-olmoe-$k-${t}t.txt 2>&1
    $B/tools/bench/coli-decode-bench --model $tiny --threads $t --kernel $k -p 512 -n 4 -d 0 -r 1 --op-times --op-depth 16 --op-tokens 4 --op-prefills 10 >$out/ops-tiny-$k-${t}t.txt 2>&1
  done
done
for t in 16 8; do
  for name in olmoe tiny; do mm=$m; [[ $name == tiny ]] && mm=$tiny
    $B/tools/coli-plan --profile $profile --model $mm --threads $t --gpu none --offline --prompt-ids --prompt-tokens 512 --ctx 528 --toml >$out/plan-$name-${t}t.toml 2>/dev/null
  done
done
$B/tools/bench/s49-attention-slices 16 40 16 | tee -a $out/attention-slices.txt
echo "done at $(( $(date +%s) - t0 )) s"
for f in $out/ops-*.txt; do echo "== $f"; sed -n '/prefill pass/,/other/p' $f | grep -E "pass|attention core|experts \(|projections"; done
