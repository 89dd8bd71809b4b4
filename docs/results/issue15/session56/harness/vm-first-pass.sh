#!/usr/bin/env bash
# coli run's first pass on this VM (tree 449f84a): the demo model's pp512 (ids seeded 1, 3..999) and 32 decode
# tokens, three fresh processes from a fresh probe's profile (fresh_page_us measured), then three from the same
# profile with that line removed (the pass not priced, as before 8d5436a).
set -uo pipefail
B=${B:-build} model=${MODEL:-/tmp/tiny-demo.coli} out=$1
$B/tools/coli-probe --disk-dir /tmp --out /tmp/s56-fp.toml >/dev/null 2>&1
grep -v "^fresh_page_us" /tmp/s56-fp.toml > /tmp/s56-fp-unpriced.toml
ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(3,1000)) for _ in range(512)))")
{
  grep "^fresh_page_us" /tmp/s56-fp.toml
  for profile in /tmp/s56-fp.toml /tmp/s56-fp-unpriced.toml; do
    echo "== $profile"
    for i in 1 2 3; do
      $B/tools/coli run --model $model --profile $profile --prompt-ids $ids --max-tokens 32 --ignore-eos 2>&1 >/dev/null \
        | grep -E "^load|^  prefill|^  decode|page faults"
    done
  done
} > $out
