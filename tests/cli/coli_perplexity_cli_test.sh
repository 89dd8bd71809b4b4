#!/usr/bin/env bash
# coli perplexity on the trained demo model: the f32 container reproduces the
# perplexity transformers computed (reference_perplexity.json, window by
# window); the KL divergence of a model against itself is 0 with full top-1
# agreement; int4 experts diverge a little; bad input is refused by name.
# Usage: coli_perplexity_cli_test.sh COLI FIXTURES
set -uo pipefail
coli="$1"
fixtures="$2"
source "$(dirname "$0")/check.sh"
model="$fixtures/models/trained-demo"

"$coli" convert --model "$model" --out "$work/f32.coli" --experts f32 >/dev/null 2>&1
"$coli" convert --model "$model" --out "$work/q4.coli" --experts q4_g64 >/dev/null 2>&1
# Six windows of 256 against the reference's first six (f32 KV, as transformers computes).
"$coli" perplexity --model "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 6 --kv-type f32 --threads 2 \
  >"$work/f32.json" 2>"$work/f32.err"
check "perplexity exits 0" test $? -eq 0
check "progress on stderr" contains "$work/f32.err" '^\[6/6\] perplexity'
check "the JSON result on stdout" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/f32.json"
check "transformers' negative log-likelihood, window by window (1e-6 relative)" python3 -c '
import json, sys
ours, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
expected = sum(ref["window_nll_sums"][:6]) / (6 * (ref["ctx"] - ref["first_scored_position"]))
assert ours["tokens"] == 6 * 127 and ours["ctx"] == 256, ours
assert abs(ours["mean_nll"] - expected) <= 1e-6 * expected, (ours["mean_nll"], expected)' "$work/f32.json" "$model/reference_perplexity.json"
"$coli" perplexity --model "$work/f32.coli" --base "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 2 \
  --threads 2 >"$work/self.json" 2>/dev/null
check "KL divergence against itself: 0, top-1 agreement 1" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kld"]["mean"] == 0 and d["kld"]["max"] == 0 and d["top1_agreement"] == 1 and d["perplexity"] == d["base_perplexity"], d' "$work/self.json"
"$coli" perplexity --model "$work/q4.coli" --base "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 2 \
  --threads 2 >"$work/q4.json" 2>/dev/null
check "int4 experts against f32: a small divergence" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert 0 < d["kld"]["mean"] < 0.1 and d["kld"]["p99"] >= d["kld"]["median"] and 0.8 < d["top1_agreement"] < 1, d' "$work/q4.json"
# The base's logits saved once (--save-logits), then the base: the same figures as the container beside.
"$coli" perplexity --model "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 2 --threads 2 \
  --save-logits "$work/base.logits" >/dev/null 2>"$work/save.err"
check "--save-logits says where" contains "$work/save.err" "saved the logits of 2 windows in $work/base.logits"
"$coli" perplexity --model "$work/q4.coli" --base "$work/base.logits" --text "$model/heldout.txt" --ctx 256 --chunks 2 \
  --threads 2 >"$work/q4-saved.json" 2>/dev/null
check "a saved base gives the figures the container base gave" python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["kld"] == b["kld"] and a["top1_agreement"] == b["top1_agreement"] and a["perplexity"] == b["perplexity"], (a, b)' \
  "$work/q4.json" "$work/q4-saved.json"
"$coli" perplexity --model "$work/q4.coli" --base "$work/base.logits" --text "$model/heldout.txt" --ctx 256 --chunks 3 \
  >/dev/null 2>"$work/saved3.err"
check "a saved base of fewer windows is refused, saying how many" contains "$work/saved3.err" "holds 2 windows, fewer than the 3 asked"
head -c 100000 "$work/base.logits" >"$work/cut.logits"
"$coli" perplexity --model "$work/q4.coli" --base "$work/cut.logits" --text "$model/heldout.txt" --ctx 256 --chunks 1 \
  >/dev/null 2>"$work/cut.err"
check "a cut-off saved base is refused" contains "$work/cut.err" "cut off? save it again"
# --record: the checkpoint's quality file, which coli-plan --quality reads.
"$coli" perplexity --model "$work/q4.coli" --base "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 1 \
  --threads 2 --record "$work/quality.json" >/dev/null 2>"$work/rec1.err"
check "--record says where" contains "$work/rec1.err" "recorded in $work/quality.json"
"$coli" perplexity --model "$work/q4.coli" --base "$work/base.logits" --text "$model/heldout.txt" --ctx 256 --chunks 1 \
  --threads 2 --record "$work/quality-saved.json" >/dev/null 2>&1
check "--record works from a saved f32 base too" contains "$work/quality-saved.json" '"experts": "q4_g64"'
"$coli" perplexity --model "$work/f32.coli" --base "$work/f32.coli" --text "$model/heldout.txt" --ctx 256 --chunks 1 \
  --threads 2 --record "$work/quality.json" >/dev/null 2>&1
check "a second representation joins the first" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema_version"] == 1 and sorted(e["experts"] for e in d["entries"]) == ["f32", "q4_g64"], d' "$work/quality.json"
"$(dirname "$coli")/coli-probe" --quick --out "$work/profile.toml" >/dev/null 2>&1
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/q4.coli" --quality "$work/quality.json" >"$work/plan.out" 2>&1
check "coli-plan --quality prints the planned representation's cost" contains "$work/plan.out" "planned      experts q4_g64, dense source: mean KLD"
check "and the other measured one, planned: it fits" contains "$work/plan.out" "alternative  experts f32, dense source: mean KLD 0.00000.*fits in"
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$fixtures/models/tiny-demo" --quality "$work/quality.json" >/dev/null 2>"$work/plan2.err"
check "a quality file of another checkpoint is refused" contains "$work/plan2.err" "measured another checkpoint"
"$coli" perplexity --model "$work/q4.coli" --text "$model/heldout.txt" --record "$work/q.json" >/dev/null 2>"$work/rec2.err"
check "--record without --base: usage error" test $? -eq 2
# Bad input.
head -c 300 "$model/heldout.txt" >"$work/short.txt"
"$coli" perplexity --model "$work/f32.coli" --text "$work/short.txt" --ctx 256 >/dev/null 2>"$work/short.err"
check "a text shorter than one window: usage error" test $? -eq 2
check "naming its length and the window" contains "$work/short.err" "tokens, less than one window of 256 (--ctx)"
"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/other.coli" --tokenizer "$fixtures/tokenizer/ggml-vocab-gpt-2.gguf" >/dev/null 2>&1
"$coli" perplexity --model "$work/f32.coli" --base "$work/other.coli" --text "$model/heldout.txt" --ctx 256 --chunks 1 >/dev/null 2>"$work/other.err"
check "a base of another checkpoint is refused" contains "$work/other.err" "is not the same checkpoint's (vocabulary 50257 against 4096)"
finish
