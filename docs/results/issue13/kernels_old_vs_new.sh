#!/bin/sh
# Old vs new CPU kernels in one session: runs two builds of coli_gemv_bench
# (same bench source, old and new kernels) alternately, ROUNDS times, and
# prints one line per benchmark and build: the median over rounds of
# items/s or bytes/s computed from CPU time (real time on a busy machine
# counts the time other processes held the core).
#   kernels_old_vs_new.sh OLD_BENCH NEW_BENCH [FILTER] > figures.txt
# The old build (kernels of abd0240 with this branch's bench source), as run
# for docs/benchmarks.md:
#   mkdir -p /tmp/old && git archive abd0240 kernels probe/include probe/base | tar -x -C /tmp/old
#   cp kernels/bench/gemv_bench.cpp /tmp/old/kernels/bench/ && cd /tmp/old
#   g++ -std=gnu++20 -O3 -DNDEBUG -fopenmp -Ikernels -Iprobe/include kernels/bench/gemv_bench.cpp \
#     $(ls kernels/cpu/*.cpp | grep -v thread_placement) kernels/reference/gemv_reference.cpp \
#     probe/base/weight_format.cpp -lbenchmark -o gemv_bench_old
set -eu
old=$1 new=$2
filter=${3:-'(decode|in_cache|prefill)/q[48]_[a-z0-9]+/avx512vnni/threads:1'}
rounds=${ROUNDS:-3}
out=$(mktemp -d)
for round in $(seq "$rounds"); do
  for build in old new; do
    eval bench=\$$build
    "$bench" --benchmark_filter="$filter" --benchmark_min_time=0.5 --benchmark_format=csv 2>/dev/null |
      grep -E '^"(decode|in_cache|prefill|decode_layer)' | sed "s/^/$build,/" >> "$out/all.csv"
  done
done
# csv: build,"name",iterations,real_time,cpu_time,time_unit,bytes_per_second,items_per_second,...
python3 - "$out/all.csv" <<'PY'
import csv, statistics, sys
rows = {}
for r in csv.reader(open(sys.argv[1])):
    build, name, cpu_ns = r[0], r[1], float(r[4])
    tokens = int(name.split("tokens:")[1].split("/")[0]) if "tokens:" in name else None
    rows.setdefault((name, build), []).append((cpu_ns, tokens))
names = sorted({n for n, _ in rows})
print("benchmark | old per call (CPU us) | new per call (CPU us) | new/old speed")
for n in names:
    o = statistics.median(c for c, _ in rows[(n, "old")]) / 1e3
    w = statistics.median(c for c, _ in rows[(n, "new")]) / 1e3
    print(f"{n} | {o:.1f} | {w:.1f} | {o / w:.2f}x")
PY
rm -r "$out"
