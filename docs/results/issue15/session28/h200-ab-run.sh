#!/usr/bin/env bash
# A/B of gemv_dense_many's work split: this tree (new) against the previous ops.cpp/ops.h (old), one machine, interleaved.
set -uo pipefail
out=$1; mkdir -p $out
source tools/fixtures/device_env.sh
cfg() { cmake -S $1 -B $1/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$D/usr -DGTest_DIR=$ML/cmake/GTest >>$out/build.log 2>&1 && cmake --build $1/build-ab -j16 --target coli-decode-bench coli >>$out/build.log 2>&1; }
[[ -d /tmp/old/engine ]] || { mkdir -p /tmp/old && tar cf - --exclude=./.deps --exclude='./build*' . | tar xf - -C /tmp/old; }
cp .deps/ab/engine/forward/src/ops.cpp /tmp/old/engine/forward/src/ops.cpp
cp .deps/ab/engine/forward/include/coli/forward/ops.h /tmp/old/engine/forward/include/coli/forward/ops.h
[[ -x build-ab/tools/bench/coli-decode-bench ]] || cfg $PWD || { tail -20 $out/build.log; exit 1; }
[[ -x /tmp/old/build-ab/tools/bench/coli-decode-bench ]] || cfg /tmp/old || { tail -20 $out/build.log; exit 1; }
m=/tmp/tiny-demo.coli
build-ab/tools/coli convert --model tests/fixtures/models/tiny-demo --out $m --experts q4_g64 >/dev/null 2>&1
for round in 1 2 3 4 5 6; do
  for v in new old; do
    b=build-ab; [[ $v == old ]] && b=/tmp/old/build-ab
    for t in 16 8; do
      echo "round $round $v ${t}t: $($b/tools/bench/coli-decode-bench --model $m --threads $t -p 512 -n 16 -d 0,512 -r 3 --cap all 2>&1 | grep -E '^ +[0-9]+ +all' | awk '{ if ($4 ~ /^pp/) printf "%s %s  ", $4, $5; else printf "%s%s %s  ", $4, $6, $7 }')" >>$out/ab.txt
    done
  done
done
for i in 1 2; do
for v in new old; do
  b=build-ab; [[ $v == old ]] && b=/tmp/old/build-ab
  $b/tools/bench/coli-decode-bench --model $m --threads 16 -p 512 -n 16 -d 0 -r 1 --cap all --op-times --op-depth 512 --op-tokens 64 --op-prefills 40 >$out/op-$v-16t-$i.txt 2>&1
done
done
cat $out/ab.txt
