#!/usr/bin/env bash
# coli run's first pass priced (8d5436a) on the GPU machine: the demo model's pp512 (ids seeded 1, 3..999) and 32
# decode tokens in three fresh processes from PROFILE, then the profile's fresh_page_us, into OUTFILE.
# Needs $B (tools/fixtures/device_env.sh) and /tmp/tiny-demo.coli.
profile=$1 outfile=$2
ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(3,1000)) for _ in range(512)))")
for i in 1 2 3; do
  timeout 20 $B/tools/coli run --model /tmp/tiny-demo.coli --profile $profile --prompt-ids $ids --max-tokens 32 \
    --ignore-eos 2>&1 >/dev/null | grep -E "^  prefill|^  decode|page faults|^load"
done > $outfile 2>&1
grep fresh_page_us $profile >> $outfile
cut -c1-220 $outfile
