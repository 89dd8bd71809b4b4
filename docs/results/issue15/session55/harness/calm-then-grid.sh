#!/usr/bin/env bash
# Session 55: wait for a calm spell of this VM (the demo model's decode-bench at 2 threads, 5 repeats, spread
# of decode under 6% and of prefill under 8%, checked once a minute, at most WAIT minutes), then vm-run.sh.
set -uo pipefail
out=$1; wait_min=${WAIT:-40}
mkdir -p $out
for ((i = 0; i < wait_min; i++)); do
  line=$(build/tools/bench/coli-decode-bench --model /tmp/tiny-demo.coli --threads 2 -p 512 -n 16 -d 0 -r 5 --cap all 2>&1 |
         awk '$4 == "pp512" {print $5, $6} $4 == "tg16" {print $7, $8}' | tail -2 | tr '\n' ' ')
  echo "$(date -u +%T) canary (pp tok/s spread, tg tok/s spread): $line" | tee -a $out/canary.txt
  read pp pps tg tgs <<<"$line"
  if [[ -n ${tgs:-} && ${tgs%\%} -lt 6 && ${pps%\%} -lt 8 ]]; then break; fi
  sleep 60
done
R=3 bash s55-harness/vm-run.sh $out
