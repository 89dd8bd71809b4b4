for i in 1 2 3 4; do
  for s in 128M 1G; do
    /work/main/build/tools/coli-probe --out /tmp/poolab/r3/p-$s-$i.toml --disk-dir /tmp --tuning-pool $s > /tmp/poolab/r3/log-$s-$i.txt 2>&1
    /work/main/build/tools/bench/coli-sweep --model /tmp/olmoe-predict.coli --profile /tmp/poolab/r3/p-$s-$i.toml --gpu none --threads 1,2 --caps all --pins off --kernels auto -p 128 -n 32 -d 0 -r 1 --out /tmp/poolab/r3/sw-$s-$i > /tmp/poolab/r3/sw-$s-$i.log 2>&1
  done
done
