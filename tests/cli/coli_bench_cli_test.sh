#!/usr/bin/env bash
# coli-decode-bench and coli-speed-bench as a user runs them on the tiny
# fixture model: llama-bench's tests by default (pp512, tg at depths 0 and
# 512), -p/-n/-d/-r honoured, the op-level breakdown's three tables, the
# JSON for scripts; coli run --op-times. Shapes only: nothing here is timed.
# usage: coli_bench_cli_test.sh PATH/TO/coli PATH/TO/coli-decode-bench PATH/TO/coli-speed-bench PATH/TO/tests/fixtures
set -u
coli="$1"
decode_bench="$2"
speed_bench="$3"
fixtures="$4"
source "$(dirname "$0")/check.sh"

"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/demo.coli" --experts q4_g64 >/dev/null 2>&1
check "convert exits 0" test $? -eq 0

"$decode_bench" --model "$work/demo.coli" -r 1 --bandwidth 10 >"$work/d.out" 2>"$work/d.err"
check "decode-bench exits 0 with the default tests" test $? -eq 0
check "default prefill test is pp512" grep -qE "^ +1 +all +[a-z0-9]+ +pp512 +[0-9.]+ " "$work/d.out"
check "default decode depth 0 with its bound" grep -qE "^ +1 +all +[a-z0-9]+ +tg64 @ d0 .* [0-9.]+%" "$work/d.out"
check "default decode depth 512" grep -qE "tg64 @ d512 " "$work/d.out"

"$decode_bench" --model "$work/demo.coli" -p 8 -n 2 -d 0,5,9 -r 2 --op-times --op-depth 20 --op-tokens 3 >"$work/o.out" 2>"$work/o.err"
check "decode-bench -p -n -d -r --op-times exits 0" test $? -eq 0
check "one row per test" test "$(grep -cE "^ +1 +all .*(pp8|tg2 @ d[059]) " "$work/o.out")" -eq 4
check "two repeats run" test "$(grep -c "repeat " "$work/o.err")" -eq 2
check "op table: decode at depth 0" contains "$work/o.out" "decode tokens at depth 0..2: 3 pass(es), 3 token(s)"
check "op table: decode at --op-depth" contains "$work/o.out" "decode tokens at depth 20..22: 3 pass(es), 3 token(s)"
check "op table: one prefill pass" contains "$work/o.out" "one prefill pass of 8 tokens: 1 pass(es), 8 token(s)"
check "op tables list every category" test "$(grep -cE "^\| (attention q/k/v projections|experts \(compute\)|expert I/O wait|lm_head|other) " "$work/o.out")" -eq 15

"$speed_bench" --model "$work/demo.coli" -p 6 -n 3 -d 0,4 -r 2 --json "$work/s.json" >"$work/s.out" 2>&1
check "speed-bench exits 0" test $? -eq 0
check "speed-bench prints pp and tg rows" test "$(grep -cE "^cpu +1.00 (pp6|tg3 @ d[04]) " "$work/s.out")" -eq 3
check "speed-bench JSON: every repeat per test" python3 - "$work/s.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["decode_bytes_per_token"]) == 2 and 0 < d["decode_bytes_per_token"][0] < d["decode_bytes_per_token"][1]
assert d["prefill_tokens"] == 6 and d["decode_tokens"] == 3 and d["depths"] == [0, 4] and d["repeats"] == 2
tests = d["configs"][0]["tests"]
assert [t["test"] for t in tests] == ["pp6", "tg3 @ d0", "tg3 @ d4"], tests
assert [t["n_depth"] for t in tests] == [0, 0, 4]
assert all(len(t["tok_s"]) == 2 and min(t["tok_s"]) > 0 for t in tests)
PY

# Half the experts in VRAM, split per expert and as llama.cpp's --n-cpu-moe (whole layers), in one
# run on the Vulkan device (lavapipe in CI); skipped without one unless COLI_REQUIRE_VULKAN=1.
"$speed_bench" --model "$work/demo.coli" --backend vulkan --vram-share 0.5 --split expert,layer -p 4 -n 2 -d 0 -r 1 \
  >"$work/split.out" 2>&1
split_rc=$?
if [[ $split_rc -ne 0 && "${COLI_REQUIRE_VULKAN:-0}" != 1 ]] && grep -qi "vulkan" "$work/split.out"; then
  echo "skip: speed-bench --split (no Vulkan device: $(tail -1 "$work/split.out"))"
else
  check "speed-bench --split exits 0" test $split_rc -eq 0
  check "speed-bench --split: a row per split" test "$(grep -cE "^vulkan(/layer)? +0.50 tg2 @ d0 " "$work/split.out")" -eq 2
  check "speed-bench --split: the same VRAM for the experts" test \
    "$(grep -oE "experts [0-9.]+ [KMG]iB" "$work/split.out" | sort -u | wc -l)" -eq 1
fi
"$speed_bench" --model "$work/demo.coli" --split diagonal >"$work/bad-split.out" 2>&1
check "an unknown split is a usage error" test $? -ne 0

"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 3 --op-times >"$work/r.out" 2>&1
check "coli run --op-times exits 0" test $? -eq 0
check "coli run --op-times: the prefill's table" contains "$work/r.out" "^prefill: 1 pass(es), 3 token(s)"
check "coli run --op-times: the decode steps' table" contains "$work/r.out" "^decode: 2 pass(es), 2 token(s)"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 3 >"$work/r0.out" 2>&1
check "no tables without --op-times" test "$(grep -c "pass(es)" "$work/r0.out")" -eq 0

# Pins as a plan's: the most used experts of each layer in a usage history (coli run wrote demo.coli.usage).
check "coli run wrote a usage history" test -s "$work/demo.coli.usage"
"$decode_bench" --model "$work/demo.coli" --cap 4 --pins 2 -p 4 -n 2 -d 0 -r 1 >"$work/nousage.out" 2>&1
check "--pins without --usage is a usage error" test $? -eq 2
check "--pins without --usage says why" contains "$work/nousage.out" "--pins needs --usage"
"$decode_bench" --model "$work/demo.coli" --cap 4,all --pins 2 --usage "$work/demo.coli.usage" -p 4 -n 2 -d 0 -r 1 \
  >"$work/pins.out" 2>&1
check "decode-bench --pins --usage exits 0" test $? -eq 0
check "a row per cap" test "$(grep -cE "^ +1 +(4|all) .*tg2 @ d0 " "$work/pins.out")" -eq 2
"$decode_bench" --model "$work/demo.coli" --cap 4 --pins 3 --usage "$work/demo.coli.usage" -p 4 -n 2 -d 0 -r 1 \
  >"$work/toomany.out" 2>&1
check "more pins than the cap leaves room for fail" test $? -ne 0
check "...naming how many may be pinned" contains "$work/toomany.out" "pin at most 2"

"$decode_bench" --model "$work/demo.coli" -d 0,-1 >"$work/bad.out" 2>&1
check "a negative depth is a usage error" test $? -ne 0
finish
