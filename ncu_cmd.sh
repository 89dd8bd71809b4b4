TESTS=1 BACKENDS=cuda GPU_KERNELS=auto REPEATS=3 bash tools/fixtures/gpu_machine_session.sh $OUT cuda-decoder > $OUT/session.log 2>&1; echo rc=$?
grep -E "PASSED|FAILED|^cuda|Failure" $OUT/session.log | head; grep -B2 -A12 "Failure" $OUT/cuda_*test.log | head -40
M=/tmp/olmoe-cuda-q4_g64.coli; SB=build-device/tools/bench/coli-speed-bench
COLI_CUDA_PDL=off $SB --model $M --backend cuda --threads 16 -p 512 -n 128 -d 0,512 --repeats 3 2>&1 | grep -E "^cuda" | sed 's/^/[PDL off] /'
$SB --model $M --backend cuda --threads 16 -p 512 -n 128 -d 0,512 --repeats 3 2>&1 | grep -E "^cuda" | sed 's/^/[PDL on] /'
timeout 200 /usr/local/cuda/bin/ncu --csv --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed --cache-control none --clock-control none --launch-skip 700 --launch-count 140 $SB --model $M --backend cuda -p 8 -n 16 -d 0 --repeats 1 > $OUT/ncu.csv 2>&1; echo ncu rc=$?
python3 - <<'P'
import csv, os, collections
rows=[r for r in csv.reader(open(os.environ['OUT']+'/ncu.csv')) if len(r)>10]
h=rows[0]; data=rows[1:]
ki=h.index('Kernel Name'); mi=h.index('Metric Name'); vi=h.index('Metric Value'); ii=h.index('ID'); ui=h.index('Metric Unit')
per=collections.defaultdict(dict)
for r in data: per[(r[ii], r[ki][:60])][r[mi]]=(r[vi],r[ui])
agg=collections.defaultdict(list)
for (i,k),m in per.items(): agg[k].append(m)
f=lambda m,n: float(m.get(n,('0',''))[0].replace(',',''))
for k,ms in sorted(agg.items(), key=lambda kv:-sum(f(m,'gpu__time_duration.sum') for m in kv[1])):
  t=[f(m,'gpu__time_duration.sum') for m in ms]; d=[f(m,'dram__throughput.avg.pct_of_peak_sustained_elapsed') for m in ms]
  print(f"{k:60s} n={len(ms):3d} mean {sum(t)/len(t):8.2f} {ms[0]['gpu__time_duration.sum'][1]} dram {sum(d)/len(d):5.1f}%")
P
