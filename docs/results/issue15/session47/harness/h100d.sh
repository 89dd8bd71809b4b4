#!/usr/bin/env bash
# Session 47 H100 call 4: where a decode miss token's time goes: op-level tables of the tiny model's first 16
# decode tokens at cap 4 and cap all (8 and 16 threads), and the per-miss token times.
set -u
out=$1
mkdir -p $out
source tools/fixtures/device_env.sh
B=build-device
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >$out/build.log 2>&1 &&
  cmake --build $B -j16 --target coli coli-decode-bench s47-miss-cost >>$out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
m=/tmp/tiny-demo.coli
[[ -f $m ]] || $B/tools/coli convert --model tests/fixtures/models/tiny-demo --out $m --experts q4_g64 >/dev/null 2>&1
for t in 8 16; do for cap in 4 all; do
  echo "threads $t cap $cap"
  $B/tools/bench/coli-decode-bench --model $m --threads $t --cap $cap -n 16 -d 0 -r 1 --op-times --op-tokens 16 --op-depth 64 2>&1 | grep -A13 "depth 0\.\."
done; done | tee $out/op-times-first16.txt | grep -E "threads|lm_head|I/O wait|per token"
for t in 8 16; do echo "threads $t cap 4"; timeout 60 $B/tools/bench/s47-miss-cost $m $t 4 128 10; done 2>&1 | tee $out/miss_cost.txt
