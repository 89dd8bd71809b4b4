#!/bin/bash
# Issue 11 (the seam): the engine before and after, interleaved on one
# synthetic model. Usage: before_after.sh BEFORE_BUILD AFTER_BUILD MODEL OUT_DIR [ORDER]
# ORDER "before after" (default) or "after before". Decode: coli-decode-bench
# (--repeats 3 per call), two calls per side; prefill: coli run on a 64-token
# prompt, one call per side and round. summarize.py OUT_DIR prints medians and spread.
set -e
B=$1/tools; A=$2/tools; M=$3; OUT=$4; ORDER=${5:-before after}; THREADS=${THREADS:-1}; ROUNDS=${ROUNDS:-6}
IDS=$(python3 -c "print(' '.join(str((i*7919)%50000+10) for i in range(64)))")
mkdir -p "$OUT"; cd "$OUT"; uptime > load_start.txt
for round in 1 2; do
  for side in $ORDER; do
    D=$B; [ $side = after ] && D=$A
    $D/bench/coli-decode-bench --model $M --threads $THREADS --cap 0 --tokens 32 --repeats 3 --bandwidth 10 > decode_${side}_$round.log 2>&1
    grep "repeat" decode_${side}_$round.log | sed "s/^/$side $round /" >> decode_samples.txt
  done
done
for round in $(seq 1 $ROUNDS); do
  for side in $ORDER; do
    D=$B; [ $side = after ] && D=$A
    $D/coli run --model $M --prompt-ids $IDS --max-tokens 1 --threads $THREADS --cap 0 > prefill_${side}_$round.log 2>&1
    echo "$side $round $(grep -o 'prefill [0-9.]* tok/s' prefill_${side}_$round.log)" >> prefill_samples.txt
  done
done
uptime > load_end.txt
