#!/usr/bin/env bash
# coli convert / coli run as a user runs them: files, output, bad input.
# usage: coli_cli_test.sh PATH/TO/coli PATH/TO/tests/fixtures
set -u
coli="$1"
fixtures="$2"
source "$(dirname "$0")/check.sh"

"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/demo.coli" --experts q4_g64 >"$work/c.out" 2>&1
check "convert exits 0" test $? -eq 0
check "convert reports the experts" contains "$work/c.out" "16 experts"
check "no partial files left" test "$(ls "$work" | grep -c partial)" -eq 0
check "convert says it read the file back" contains "$work/c.out" "read back against its checksums"
check "convert says the container carries no tokenizer" contains "$work/c.out" "carries for running: no tokenizer"

# The container carries its tokenizer (coli convert --tokenizer): one file runs.
"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/carried.coli" \
  --tokenizer "$fixtures/tokenizer/ggml-vocab-gpt-2.gguf" >"$work/ct.out" 2>&1
check "convert --tokenizer says what the container carries" contains "$work/ct.out" "carries for running: tokenizer.gguf"
"$coli" run --model "$work/carried.coli" --prompt "Hello world" --max-tokens 6 >"$work/carried.txt" 2>"$work/carried.err"
check "a container with its tokenizer runs from a text prompt alone" test $? -eq 0
"$coli" run --model "$work/demo.coli" --tokenizer "$fixtures/tokenizer/ggml-vocab-gpt-2.gguf" --prompt "Hello world" \
  --max-tokens 6 >"$work/beside.txt" 2>/dev/null
check "with the same text as the tokenizer given beside it" cmp -s "$work/carried.txt" "$work/beside.txt"
"$coli" run --model "$work/demo.coli" --prompt "Hello world" --max-tokens 2 >/dev/null 2>"$work/none.err"
check "a container without one asks for --tokenizer" contains "$work/none.err" "carries no tokenizer.*--tokenizer"
printf 'not a vocabulary' >"$work/bad.gguf"
"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/bad.coli" --tokenizer "$work/bad.gguf" >/dev/null 2>"$work/bt.err"
check "a broken --tokenizer is refused at conversion" test $? -eq 1
check "naming it" contains "$work/bt.err" "--tokenizer: .*bad.gguf"
check "and no container is left" test ! -e "$work/bad.coli"

# --verify: every tensor and expert record against its checksum; one byte
# changed in the weights is named and the run refused (exit 1).
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 --max-tokens 2 --verify >"$work/v1.out" 2>&1
check "run --verify of a good container exits 0" test $? -eq 0
check "run --verify says what it checked" contains "$work/v1.out" "verified .* tensors and 16 expert records"
cp "$work/demo.coli" "$work/damaged.coli"
printf '\x5a' | dd of="$work/damaged.coli" bs=1 seek=$(( $(stat -c %s "$work/demo.coli") / 2 )) conv=notrunc status=none
"$coli" run --model "$work/damaged.coli" --prompt-ids 1 2 --max-tokens 2 --verify >"$work/v2.out" 2>&1
check "run --verify of a damaged container exits 1" test $? -eq 1
check "run --verify names the damage" contains "$work/v2.out" "do not match their checksum"
"$coli" run --model /dev/zero --prompt-ids 1 --max-tokens 1 >"$work/z.out" 2>&1
check "an endless --model is refused" test $? -eq 1
check "the refusal says it is not a regular file" contains "$work/z.out" "/dev/zero is not a regular file"

"$coli" run --model "$work/demo.coli" --tokenizer "$fixtures/tokenizer/ggml-vocab-gpt-2.gguf" --prompt "Hello world" \
  --max-tokens 8 --cap 3 --pin 1 >"$work/r.out" 2>&1
check "run exits 0" test $? -eq 0
check "run prints the summary" contains "$work/r.out" "TTFT"
check "run prints the hit rate" contains "$work/r.out" "hit rate"
check "run prints peak RSS" contains "$work/r.out" "peak RSS"

# Same tokens whatever the cache: greedy ids with all experts vs 2 slots.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 12 >"$work/a.out" 2>"$work/a.err"
check "stdout holds the generated text only" lacks "$work/a.out" "TTFT\|hit rate\|peak RSS\|^---"
check "the statistics go to stderr" contains "$work/a.err" "TTFT"
"$coli" run --model "$work/demo.coli" --prompt-ids 1,2,3 --max-tokens 12 >"$work/comma.out" 2>/dev/null
check "--prompt-ids takes comma-separated ids as space-separated ones" cmp -s "$work/a.out" "$work/comma.out"
# Generation ends at the end-of-sequence token (--eos-id here: the demo's
# random weights never pick the GPT-2 vocabulary's own), which is not printed.
first=$(awk '{ print $1 }' "$work/a.out")
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 12 --eos-id "$first" >"$work/eos.out" 2>"$work/eos.err"
check "--eos-id stops generation at that token, unprinted" test -z "$(tr -d ' \n' <"$work/eos.out")"
check "and says it stopped there" contains "$work/eos.err" "stopped at the end-of-sequence token $first"
check "after 0 tokens" contains "$work/eos.err" "decode .* (0 tokens)"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --eos-id 1 --ignore-eos >/dev/null 2>&1
check "--ignore-eos with --eos-id is a usage error" test $? -eq 2
# The prompt from a file or stdin, as --prompt gives it; llama.cpp's samplers.
vocab="$fixtures/tokenizer/ggml-vocab-gpt-2.gguf"
printf 'Hello world' >"$work/prompt.txt"
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --prompt "Hello world" --max-tokens 6 >"$work/pt.out" 2>/dev/null
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --prompt-file "$work/prompt.txt" --max-tokens 6 >"$work/pf.out" 2>/dev/null
check "--prompt-file gives --prompt's tokens" cmp -s "$work/pt.out" "$work/pf.out"
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --prompt-file - --max-tokens 6 <"$work/prompt.txt" >"$work/ps.out" 2>/dev/null
check "--prompt-file - reads stdin" cmp -s "$work/pt.out" "$work/ps.out"
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --prompt-file "$work/missing.txt" --max-tokens 2 >/dev/null 2>"$work/pm.err"
check "a missing --prompt-file is an error naming it" contains "$work/pm.err" "prompt-file .*missing.txt"
# --json: the statistics as one JSON object on stderr, the text still alone on stdout.
"$coli" run --model "$work/carried.coli" --prompt "Hello world" --max-tokens 6 --json >"$work/json.txt" 2>"$work/json.err"
check "--json runs" test $? -eq 0
check "--json leaves stdout to the text" cmp -s "$work/json.txt" "$work/carried.txt"
check "--json's last stderr line is the statistics object" python3 -c '
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["schema_version"] == 1 and d["prompt_tokens"] == 2 and d["generated_tokens"] <= 6, d
assert d["stop"] in ("eos", "max_tokens") and d["decode_tok_s"] >= 0 and d["peak_rss_bytes"] > 0, d
assert isinstance(d["prompt_page_faults"], int) and d["prompt_page_faults"] >= 0, d
' "$work/json.err"
check "and no summary lines beside it" lacks "$work/json.err" "^load .* TTFT"
# --chat: the prompt as the user's message in the model's chat format.
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --chat --prompt "Hello" --max-tokens 2 >/dev/null 2>"$work/chat0.err"
check "--chat without a template in sight is a usage error" test $? -eq 2
check "that names --chat-template and the formats" contains "$work/chat0.err" "no chat template found.*--chat-template chatml, llama3"
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --chat-template chatml --prompt "Hello" --max-tokens 2 >/dev/null 2>"$work/chat1.err"
check "--chat-template chatml runs" test $? -eq 0
check "and says which format it used" contains "$work/chat1.err" "chat format chatml (--chat-template)"
check "the user's message wrapped in the format's markers (spelled out: GPT-2 has no <|im_start|>)" contains "$work/chat1.err" "prefill .* ([2-9][0-9] tokens)"
"$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --chat-template jinja --prompt "Hello" --max-tokens 2 >/dev/null 2>"$work/chat2.err"
check "an unknown --chat-template is refused by name" contains "$work/chat2.err" "'jinja' is not a chat format"
# --chat without a prompt: a conversation, one user turn per line of stdin; each turn reuses the KV cache of the ones before.
printf 'Hello\nHow are you\n/exit\nnever read\n' | "$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --chat-template chatml \
  --max-tokens 3 >"$work/conv.out" 2>"$work/conv.err"
check "a conversation from stdin runs" test $? -eq 0
check "one summary per turn, /exit ends it" test "$(grep -c '^\[prompt' "$work/conv.err")" -eq 2
check "the second turn reuses the first's tokens" test "$(grep '^\[prompt' "$work/conv.err" | tail -1 | sed 's/.*(\([0-9]*\) reused).*/\1/')" -gt 20
# --stop: the text ends before the stop string, which is not printed.
"$coli" run --model "$work/carried.coli" --prompt "Hello world" --max-tokens 6 --stop "d w" >"$work/stop.txt" 2>"$work/stop.err"
check "--stop cuts the text before it" test "$(cat "$work/stop.txt")" = "$(head -c -1 "$work/carried.txt" | sed 's/d w.*//')"
check "and says so" contains "$work/stop.err" 'stopped at the stop string "d w"'
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 --stop x >/dev/null 2>"$work/stopids.err"
check "--stop with --prompt-ids (no tokenizer) is a usage error" contains "$work/stopids.err" "--stop needs a tokenizer"
# Without --max-tokens generation runs to an end token or the full context.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --ctx 16 --ignore-eos >"$work/full.out" 2>"$work/full.err"
check "no --max-tokens: until the context is full" contains "$work/full.err" "the context of 16 positions is full"
check "13 positions after the prompt, and the last token needs none" test "$(wc -w <"$work/full.out")" -eq 14
# The model's sampling defaults (generation_config.json, carried by the container) for what the command line leaves unset.
cp -r "$fixtures/models/tiny-demo" "$work/sampled-model"
printf '{"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 1e12}' >"$work/sampled-model/generation_config.json"
"$coli" convert --model "$work/sampled-model" --out "$work/sampled.coli" --tokenizer "$vocab" >/dev/null 2>&1
"$coli" run --model "$work/sampled.coli" --prompt "Hello" --max-tokens 2 >/dev/null 2>"$work/gen1.err"
check "generation_config.json's sampling applies, and run says so" contains "$work/gen1.err" "generation_config.json says: temperature 0.7, top_p 0.8, top_k 50 (transformers' default) (options override)"
"$coli" run --model "$work/sampled.coli" --prompt "Hello" --max-tokens 2 --temperature 0 --top-k 5 >/dev/null 2>"$work/gen2.err"
check "an option given overrides it" contains "$work/gen2.err" "generation_config.json says: top_p 0.8 (options"
# do_sample alone samples as transformers does: temperature 1 and top_k 50 (not greedy).
printf '{"do_sample": true}' >"$work/sampled-model/generation_config.json"
"$coli" convert --model "$work/sampled-model" --out "$work/sampled2.coli" --tokenizer "$vocab" >/dev/null 2>&1
"$coli" run --model "$work/sampled2.coli" --prompt "Hello" --max-tokens 2 >/dev/null 2>"$work/gen3.err"
check "do_sample alone takes transformers' defaults" contains "$work/gen3.err" "says: temperature 1 (transformers' default), top_k 50 (transformers' default) (options"
# A SentencePiece vocabulary (Llama 2's: its ids fit the demo's 50257) asks for BOS first.
spm="$fixtures/tokenizer/ggml-vocab-llama-spm.gguf"
"$coli" run --model "$work/demo.coli" --tokenizer "$spm" --prompt "Hello world" --max-tokens 2 >/dev/null 2>"$work/bos.err"
check "a SentencePiece prompt starts with BOS, and run says so" contains "$work/bos.err" "prompt starts with BOS (token 1)"
check "with its prompt's tokens counted (BOS, ▁Hello, ▁world)" contains "$work/bos.err" "prefill .* (3 tokens)"
"$coli" run --model "$work/demo.coli" --tokenizer "$spm" --prompt "Hello world" --max-tokens 2 --no-bos >/dev/null 2>"$work/nobos.err"
check "--no-bos leaves it out" lacks "$work/nobos.err" "prompt starts with BOS"
check "one token fewer" contains "$work/nobos.err" "prefill .* (2 tokens)"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 12 --temperature 1.5 --top-k 1 >"$work/k1.out" 2>/dev/null
check "--top-k 1 samples the greedy tokens" test "$(head -1 "$work/k1.out")" = "$(head -1 "$work/a.out")"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --min-p 2 >/dev/null 2>"$work/mp.err"
check "--min-p outside [0, 1] is refused by name" contains "$work/mp.err" "min-p"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 12 --cap 2 --threads 2 >"$work/b.out" 2>"$work/b.err"
check "tokens independent of cap and threads" test "$(head -1 "$work/a.out")" = "$(head -1 "$work/b.out")"

# Usage history: a run records it, the next one pins from it; a broken or
# foreign history is reported, ignored and left untouched.
check "usage history written beside the model" contains "$work/demo.coli.usage" "coli-usage-history"
"$coli" run --model "$work/demo.coli" --prompt-ids 5 6 7 8 --max-tokens 8 --cap 4 --pin 2 --usage "$work/u" >"$work/h1.out" 2>&1
check "first run without history says so" contains "$work/h1.out" "no usage history"
"$coli" run --model "$work/demo.coli" --prompt-ids 5 6 7 8 --max-tokens 8 --cap 4 --pin 2 --usage "$work/u" >"$work/h2.out" 2>&1
check "second run pins from history" test $? -eq 0
check "second run does not complain" test "$(grep -c 'no usage history\|ignoring usage history' "$work/h2.out")" -eq 0
check "second run preloads from it" contains "$work/h2.out" "preloaded .* the usage history's most used"
echo "not a history" >"$work/bad.usage"
"$coli" run --model "$work/demo.coli" --prompt-ids 5 --max-tokens 2 --cap 4 --pin "$work/bad.usage" >"$work/h3.out" 2>&1
check "broken history is not fatal" test $? -eq 0
check "broken history is reported" contains "$work/h3.out" "ignoring usage history"
check "broken history left untouched" test "$(cat "$work/bad.usage")" = "not a history"

# Knobs from a device profile or a plan, and plan vs actual at the end.
"$(dirname "$coli")/coli-probe" --quick --out "$work/profile.toml" >/dev/null 2>&1
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --profile "$work/profile.toml" >"$work/p1.out" 2>&1
check "run --profile exits 0" test $? -eq 0
check "run --profile says where its knobs come from" contains "$work/p1.out" "knobs from profile"
check "run --profile reports plan vs actual" contains "$work/p1.out" "plan vs actual"
check "dense weights match the plan exactly" contains "$work/p1.out" "dense weights .*(+0.0%)"
check "the f16 KV cache matches the plan exactly" contains "$work/p1.out" "KV cache (f16) .*(+0.0%)"
check "a quick profile's run says why it has no speed prediction" contains "$work/p1.out" "speed: the plan has no prediction (no measured bandwidth"
# With measured rates (the shortest full probe) the run sets its speed beside a prediction for its own prompt and depth.
"$(dirname "$coli")/coli-probe" --budget 2 --disk-dir "$work" --out "$work/full-profile.toml" >/dev/null 2>&1
check "a full probe exits 0" test $? -eq 0
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --ignore-eos --profile "$work/full-profile.toml" >"$work/p3.out" 2>&1
check "run --profile with rates exits 0" test $? -eq 0
check "its speed is predicted for this run" contains "$work/p3.out" "predicted from the profile for this run's prompt and depth"
check "the prefill for its 3-token prompt" contains "$work/p3.out" "measured pp3, planned pp3"
check "the decode at its mean depth" contains "$work/p3.out" "planned at KV depth 5, measured at 4.5 on average"
check "and the page faults of the prompt's pass" contains "$work/p3.out" "the prompt's pass took [0-9][0-9]* page faults"
check "beside the fresh pages it priced for them (the probe's first touch)" contains "$work/p3.out" "as the process's first it was priced [0-9.]* ms more than a warm pass for .* fresh pages x [0-9.]* us"
check "the prefill figure as a first pass" contains "$work/p3.out" "planned pp3 in rounds of the plan as a first pass"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --ignore-eos --profile "$work/full-profile.toml" --json >/dev/null 2>"$work/p3.json"
check "--json's prediction: the first pass beside the warm prefill figure" python3 -c '
import json, sys
p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["predicted"]
assert p["first_pass_s"] > 0 and p["first_pass_fresh_bytes"] > 0, p
assert abs(3 / p["prefill_tok_s"] - (3 / p["prefill_warm_tok_s"] + p["first_pass_s"])) < 1e-9, p
' "$work/p3.json"
printf 'Hello\nHow are you\n/exit\n' | "$coli" run --model "$work/demo.coli" --tokenizer "$vocab" --chat-template chatml \
  --max-tokens 3 --profile "$work/full-profile.toml" --json >/dev/null 2>"$work/conv-json.err"
check "a conversation prices only its first turn as the process's first pass" python3 -c '
import json, sys
turns = [json.loads(l)["predicted"] for l in open(sys.argv[1]) if l.startswith("{")]
assert len(turns) == 2 and turns[0]["first_pass_s"] > 0 and turns[1]["first_pass_s"] == 0, turns
assert turns[1]["prefill_tok_s"] == turns[1]["prefill_warm_tok_s"], turns[1]
' "$work/conv-json.err"
# A plan file predicts again from the profile it names while that is unchanged; without it, the plan's own figures.
"$(dirname "$coli")/coli-plan" --profile "$work/full-profile.toml" --model "$work/demo.coli" --out "$work/full.plan" >"$work/full-plan.out" 2>&1
check "coli-plan sets a process's first prompt beside the warm prefill" contains "$work/full-plan.out" "first pass [0-9.]* tok/s  a process's first prompt (coli run's): the warm figure above plus [0-9.]* ms for .* fresh pages"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --ignore-eos --plan "$work/full.plan" >"$work/p4.out" 2>&1
check "run --plan predicts for this run from the plan's profile" contains "$work/p4.out" "predicted from the profile for this run's prompt and depth"
mv "$work/full-profile.toml" "$work/full-profile.moved"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --ignore-eos --plan "$work/full.plan" >"$work/p5.out" 2>&1
check "without its profile the plan's own figures, saying so" contains "$work/p5.out" "the plan's figures, for its own prompt and depth"
check "and which prompt they are for" contains "$work/p5.out" "measured pp3, planned pp512"
check "whose first pass is not priced, saying why" contains "$work/p5.out" "which the prediction does not price (the plan's own figures stand"
check "the plan file carries the band" contains "$work/full.plan" "^decode_slowest_tok_per_s = [0-9]"
mv "$work/full-profile.moved" "$work/full-profile.toml"
"$(dirname "$coli")/coli-plan" --profile "$work/full-profile.toml" --model "$work/demo.coli" >"$work/band.out" 2>&1
check "coli-plan prints the band, or why it has none" contains "$work/band.out" "band       \(decode [0-9.]*-[0-9.]* tok/s, prefill\|none: the rates this prediction rests on were each timed in one round\)"
# A streaming plan's run sets the expert reads it made beside the ones predicted, prompt and decode apart.
"$(dirname "$coli")/coli-plan" --profile "$work/full-profile.toml" --model "$work/demo.coli" --cap 2 --out "$work/cap2.plan" >/dev/null 2>&1
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --ignore-eos --plan "$work/cap2.plan" >"$work/r2.out" 2>&1
check "a streaming plan's run exits 0" test $? -eq 0
check "it sets the prompt's reads beside the plan's" contains "$work/r2.out" "expert reads, the prompt *planned *[0-9.]* *measured *[0-9]* *(pp3 planned, pp3 measured)"
check "and a decode token's" contains "$work/r2.out" "expert reads a decode token *planned *[0-9.]* *measured *[0-9.]*"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --ignore-eos --plan "$work/cap2.plan" --json >/dev/null 2>"$work/r2.json"
check "--json counts the prompt's misses" contains "$work/r2.json" '"prompt_expert_misses":[0-9]'
check "and the decode's apart" contains "$work/r2.json" '"decode_expert_misses":[0-9]'
# coli run sets its figures against the band of its own prediction: every mention in full, none of no width.
check "run --profile names where its figures lie in the band" test "$(grep -c "the probe's band" "$work/p3.out")" -eq \
  "$(grep -c "\(inside\|below\|above\) the probe's band [0-9.]*-[0-9.]*$" "$work/p3.out")"
check "and shows no band of no width" lacks "$work/p3.out" "the probe's band \([0-9.]*\)-\1$"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --profile "$work/profile.toml" --kv-type f32 >/dev/null 2>"$work/kv1.err"
check "--kv-type with a plan refused" test $? -eq 2
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 4 --kv-type bf16 --report >"$work/kv2.out" 2>&1
check "--kv-type bf16 runs" test $? -eq 0
check "and its KV cache is bf16" contains "$work/kv2.out" "KV cache (bf16)"
# A resident run reads every expert at load (no misses while running);
# --no-preload reads on first use; neither, nor --speculative-prefetch on a
# streaming cache, changes the tokens.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 >"$work/pre1.out" 2>"$work/pre1.err"
check "a resident run misses no expert" contains "$work/pre1.err" "(.* hits, 0 misses)"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --no-preload >"$work/pre2.out" 2>"$work/pre2.err"
check "--no-preload reads experts on first use" lacks "$work/pre2.err" "(.* hits, 0 misses)"
check "--no-preload gives the same tokens" test "$(head -1 "$work/pre1.out")" = "$(head -1 "$work/pre2.out")"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --cap 2 >"$work/spec1.out" 2>"$work/spec1.err"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --cap 2 --speculative-prefetch >"$work/spec2.out" 2>"$work/spec2.err"
check "--speculative-prefetch runs" test $? -eq 0
check "both streaming runs finished" contains "$work/spec1.err" "experts:"
check "--speculative-prefetch gives the same tokens" test "$(head -1 "$work/spec1.out")" = "$(head -1 "$work/spec2.out")"
# A streaming cache starts with the usage history's most used experts (the
# history beside the model is there by now); --no-preload starts it empty.
check "a streaming run preloads the history's most used experts" contains "$work/spec1.err" "preloaded [0-9]* experts, the usage history.s most used of each of [0-9]* MoE layers"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --cap 2 --json >"$work/spec3.out" 2>"$work/spec3.err"
check "its --json counts them" contains "$work/spec3.err" '"preloaded_experts":[1-9]'
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 6 --cap 2 --json --no-preload >"$work/spec4.out" 2>"$work/spec4.err"
check "--no-preload on a streaming cache reads none at load" contains "$work/spec4.err" '"preloaded_experts":0'
check "and gives the same tokens" test "$(head -1 "$work/spec3.out")" = "$(head -1 "$work/spec4.out")"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --kv-type f8 >/dev/null 2>"$work/kv3.err"
check "--kv-type f8 is a usage error" test $? -eq 2
check "and the error names the option" contains "$work/kv3.err" "kv-type"
# Without a CUDA device (or in a build without nvcc) --backend cuda is an error that says why.
if ! nvidia-smi -L >/dev/null 2>&1; then
  "$coli" run --model "$work/demo.coli" --prompt-ids 1 --backend cuda >/dev/null 2>"$work/cuda.err"
  check "--backend cuda without a device exits 1" test $? -eq 1
  check "and says why" contains "$work/cuda.err" "no CUDA backend\|needs CUDA device 0, but"
fi
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --profile "$work/profile.toml" --cap 3 >/dev/null 2>"$work/p2.err"
check "explicit knobs with a plan refused" test $? -eq 2
check "the refusal says to use coli-plan" contains "$work/p2.err" "coli-plan"

# coli-plan plans from the history coli run left beside the model, as run --profile does, and says so;
# --usage none plans by uniform routing; a history of another model beside it is passed over, saying why.
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/demo.coli" --cap 4 --prompt-ids \
  --prompt-tokens 3 --toml >"$work/ph.toml" 2>"$work/ph.err"
check "coli-plan with demo.coli.usage beside the model exits 0" test $? -eq 0
check "coli-plan names the default history it used" contains "$work/ph.err" "usage history .*demo.coli.usage (the default"
check "its hit rate replays the history" contains "$work/ph.toml" "^hit_rate_inputs = .the usage history's routing"
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/demo.coli" --cap 4 --prompt-ids \
  --prompt-tokens 3 --usage none --toml >"$work/pn.toml" 2>"$work/pn.err"
check "--usage none exits 0" test $? -eq 0
check "--usage none uses no history" lacks "$work/pn.err" "usage history"
check "--usage none: uniform routing" contains "$work/pn.toml" "^hit_rate_inputs = 'uniform routing"
cp "$work/demo.coli" "$work/other.coli" && echo "not a history" >"$work/other.coli.usage"
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/other.coli" --cap 4 --prompt-ids \
  --prompt-tokens 3 >/dev/null 2>"$work/po.err"
check "a broken default history is not fatal to coli-plan" test $? -eq 0
check "coli-plan says it passed over the broken default history" contains "$work/po.err" "passing over the usage history .*other.coli.usage"
"$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/other.coli" --cap 4 --prompt-ids \
  --prompt-tokens 3 --usage "$work/other.coli.usage" >/dev/null 2>"$work/pu.err"
check "a broken --usage given by name is an error" test $? -eq 1

# The plan is enforced: its kernel and thread placement reach the engine, the
# RSS watchdog arms at the plan's RAM plus margin (--rss-limit overrides it),
# and a Vulkan plan runs the whole decoder on the GPU.
plan="$(dirname "$coli")/coli-plan"
timeout 20 "$plan" --profile "$work/profile.toml" --model /dev/zero >/dev/null 2>"$work/pz.err"
rc=$?
check "coli-plan refuses an endless --model at once (not 0, not killed by timeout)" test "$rc" -ne 0 -a "$rc" -ne 124
check "the refusal names the file" contains "$work/pz.err" "/dev/zero is neither a regular file nor a directory"
"$plan" --profile "$work/profile.toml" --model "$work/demo.coli" --prompt-ids --prompt-tokens 3 --kernel scalar \
  --out "$work/scalar.plan" >/dev/null 2>&1
check "coli-plan plans a container with --kernel scalar" test $? -eq 0
"$coli" run --model "$work/demo.coli" --plan "$work/scalar.plan" --prompt-ids 1 2 3 --max-tokens 2 >"$work/k.out" 2>&1
check "run --plan uses the plan's kernel" contains "$work/k.out" "kernel scalar"
check "run --plan reports the RSS watchdog's limit" contains "$work/k.out" "RSS watchdog: limit .*; shrank the expert cache 0 time"
# A prefill set this process may not use is refused before the load (it
# failed when the first prompt pinned the team there).
sed -e '/^prefill_threads =/d' -e '/^prefill_pus =/d' -e "/^\[knobs\]$/a prefill_threads = 1\nprefill_pus = '4095'" \
  "$work/scalar.plan" >"$work/far.plan"
"$coli" run --model "$work/demo.coli" --plan "$work/far.plan" --prompt-ids 1 2 3 --max-tokens 2 >"$work/far.out" 2>"$work/far.err"
check "a plan whose prefill set lies outside this process's CPUs is refused" test $? -eq 1
check "and the refusal names the set" contains "$work/far.err" "pins its prefill threads to CPUs 4095, but this process may use"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --rss-limit 1 >"$work/w.out" 2>&1
check "the RSS watchdog warns past its limit" contains "$work/w.out" "WARNING: RSS .* is past the plan's limit"
# Issue 12: without a plan the run's memory is checked before loading (it was
# OOM-killed in a 2 GiB cgroup) and the watchdog armed at it, as with a plan.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 >"$work/m0.out" 2>"$work/m0.err"
check "a run without a plan that fits exits 0" test $? -eq 0
check "and says its memory and watchdog" contains "$work/m0.err" "coli run: memory: .* RSS watchdog at"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --ram 64M >"$work/m1.out" 2>"$work/m1.err"
check "a run without a plan that does not fit is refused (exit 3)" test $? -eq 3
check "the refusal names needed and available" contains "$work/m1.err" "need .* of RAM .* but 64.0 MiB is available (--ram)"
check "the refusal says what to do" contains "$work/m1.err" "--cap .* --ctx"
check "nothing was generated" test ! -s "$work/m1.out"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --ram 64M --no-memory-check >"$work/m2.out" 2>&1
check "--no-memory-check runs anyway" test $? -eq 0
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --ram 64 >/dev/null 2>"$work/m3.err"
check "--ram without a unit is a usage error" test $? -eq 2
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --report >"$work/r.out" 2>&1
check "--report prints the engine's accounting without a plan" contains "$work/r.out" "process RSS (peak)"
if grep -q "^Vulkan *[1-9]" <("$(dirname "$coli")/coli-probe" --quick 2>/dev/null); then
  # The whole decoder on the GPU, every knob from the plan, VRAM plan vs actual.
  "$plan" --profile "$work/profile.toml" --model "$work/demo.coli" --gpu 0 --prompt-ids --prompt-tokens 3 \
    --out "$work/gpu.plan" >"$work/gp.out" 2>&1
  check "coli-plan --gpu 0 plans the Vulkan decoder" grep -q "^whole_decoder = true" "$work/gpu.plan"
  check "coli-plan prints the VRAM lines" contains "$work/gp.out" "GPU KV cache"
  "$coli" run --model "$work/demo.coli" --plan "$work/gpu.plan" --prompt-ids 1 2 3 --max-tokens 12 >"$work/g.out" 2>"$work/g.err"
  check "a Vulkan plan runs end to end" test $? -eq 0
  check "the run says its backend" contains "$work/g.err" "backend vulkan"
  check "VRAM as planned" contains "$work/g.err" "VRAM (without the reserve) .*(+0.0%)"
  "$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 12 --kernel exact >"$work/x.out" 2>/dev/null
  check "GPU tokens equal the CPU's (f32 activations)" test "$(head -1 "$work/g.out")" = "$(head -1 "$work/x.out")"
elif [[ "${COLI_REQUIRE_VULKAN:-0}" == 1 ]]; then
  check "COLI_REQUIRE_VULKAN=1 but coli-probe found no Vulkan device" false
else
  "$plan" --profile "$work/profile.toml" --model "$work/demo.coli" --gpu 0 >/dev/null 2>"$work/g.err"
  check "--gpu 0 without a Vulkan device is refused" contains "$work/g.err" "Vulkan device"
fi

# The CUDA decoder planned on the H200's recorded profile (a replay: --offline
# plans for the machine the profile describes); a build without nvcc plans
# it as a preview.
h200_profile="$fixtures/../../profiles/h200-xeon-16c.toml"
"$plan" --profile "$h200_profile" --offline --model "$work/demo.coli" --gpu 0 --gpu-backend cuda --prompt-ids \
  --prompt-tokens 3 --out "$work/cuda.plan" >"$work/cp.out" 2>&1
check "coli-plan --gpu-backend cuda plans the CUDA decoder" grep -q "^backend = 'cuda'" "$work/cuda.plan"
cuda_uuid=$(awk '/^\[\[gpus.cuda\]\]/ { in_cuda = 1 } in_cuda && /^uuid/ { print $3; exit }' "$h200_profile")
check "on the CUDA device by its UUID" grep -qF "device_uuid = $cuda_uuid" "$work/cuda.plan"
check "with the CUDA decoder's pinned buffers" contains "$work/cp.out" "pinned"
check "and its default prefill batch of 512 tokens" grep -q "^batch_tokens = 512" "$work/cuda.plan"
"$plan" --profile "$h200_profile" --offline --model "$work/demo.coli" --gpu 0 --gpu-backend cuda --prompt-ids \
  --prompt-tokens 3 --gpu-batch 64 --out "$work/cuda64.plan" >/dev/null 2>&1
check "--gpu-batch 64 is the plan's batch" grep -q "^batch_tokens = 64" "$work/cuda64.plan"
"$plan" --profile "$h200_profile" --offline --model "$work/demo.coli" --gpu 0 --gpu-backend cuda --gpu-batch 0 \
  >/dev/null 2>"$work/gb.err"
check "--gpu-batch 0 is a usage error" test $? -eq 2
check "naming --gpu-batch" contains "$work/gb.err" "--gpu-batch"
"$plan" --profile "$h200_profile" --offline --model "$work/demo.coli" --gpu 3 --gpu-backend cuda >/dev/null 2>"$work/c3.err"
check "a CUDA device the profile lacks is refused" contains "$work/c3.err" "1 CUDA device"

# Bad input: clear errors, never a crash.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --cap 1 >/dev/null 2>"$work/e1"
rc=$?
check "cap below top_k refused" test $rc -eq 1
check "cap error names the numbers" contains "$work/e1" "cap"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --cap 4 --pin 4 >/dev/null 2>"$work/e2"
check "pins filling the cache refused" test $? -eq 1
check "pin error says what to change" contains "$work/e2" "pin"
# Issue 12: top_p 0 and NaN read past the sampler's candidates; a directory
# given as a profile reported a missing field.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --temperature 0.8 --top-p 0 >/dev/null 2>"$work/e7"
check "top_p 0 refused as a usage error" test $? -eq 2
check "top_p error names the option" contains "$work/e7" "--top-p"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --temperature nan >/dev/null 2>"$work/e8"
check "NaN temperature refused" test $? -eq 2
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --usage-decay nan >/dev/null 2>"$work/e11"
check "NaN usage decay refused" test $? -eq 2
"$plan" --profile "$work/profile.toml" --model "$work/demo.coli" --gpu-variant foo >/dev/null 2>"$work/e12"
check "an unknown --gpu-variant is refused" test $? -ne 0
check "the refusal names the option" contains "$work/e12" "gpu-variant"
"$coli" profile show "$work" >/dev/null 2>"$work/e9"
check "a directory as a profile is named as one" contains "$work/e9" "is a directory"
"$plan" --profile /dev/zero --model "$work/demo.coli" >/dev/null 2>"$work/e10"
check "an endless device as a profile is refused, not read forever" contains "$work/e10" "not a regular file"
head -c 100000 "$work/demo.coli" >"$work/cut.coli"
"$coli" run --model "$work/cut.coli" --prompt-ids 1 >/dev/null 2>"$work/e3"
check "truncated container refused" test $? -eq 1
check "truncated container explained" contains "$work/e3" "truncated"
"$coli" run --model "$work/demo.coli" --prompt-ids 999999 >/dev/null 2>"$work/e4"
check "token outside the vocabulary refused" contains "$work/e4" "outside the vocabulary"
"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/x.coli" --experts int3 >/dev/null 2>"$work/e5"
check "unknown expert format refused" contains "$work/e5" "unknown expert format 'int3'"
mkdir -p "$work/broken" && cp "$fixtures/models/olmoe/config.json" "$work/broken/" &&
  head -c 5000 "$fixtures/models/olmoe/model.safetensors" >"$work/broken/model.safetensors"
"$coli" convert --model "$work/broken" --out "$work/y.coli" >/dev/null 2>"$work/e6"
check "truncated safetensors refused" test $? -eq 1
check "no container from a failed conversion" test ! -e "$work/y.coli"

# Issue 12: one kernel spelling, --version, and the default profile.
"$coli" run --model "$work/demo.coli" --prompt-ids 1 --kernel avx512_vnni >/dev/null 2>&1
check "--kernel avx512_vnni is a usage error" test $? -eq 2
"$coli" run --help >"$work/help.out" 2>&1
check "run --help spells the kernels as the parser does" contains "$work/help.out" "avx512vnni, amx or exact"
check "run --help never says avx512_vnni" test "$(grep -c avx512_vnni "$work/help.out")" -eq 0
"$coli" --version >"$work/version.out" 2>&1
check "coli --version exits 0 with the commit" contains "$work/version.out" "^coli [0-9.]* (commit "
XDG_CONFIG_HOME="$work/empty-config" "$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 \
  >/dev/null 2>"$work/nodefault.err"
check "no profile: runs with the engine's defaults" test $? -eq 0
check "no profile: says so" contains "$work/nodefault.err" "running with the engine's defaults"
mkdir -p "$XDG_CONFIG_HOME/coli"
cp "$work/profile.toml" "$XDG_CONFIG_HOME/coli/device-profile.toml"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 >/dev/null 2>"$work/default.err"
check "the default profile: run exits 0" test $? -eq 0
check "the default profile: says which file" contains "$work/default.err" "profile $XDG_CONFIG_HOME/coli/device-profile.toml"
check "the default profile: knobs planned from it" contains "$work/default.err" "knobs from profile"
"$coli" run --model "$work/demo.coli" --prompt-ids 1 2 3 --max-tokens 2 --threads 1 >/dev/null 2>"$work/knobs.err"
check "explicit knobs: no default profile" test "$(grep -c 'knobs from profile' "$work/knobs.err")" -eq 0

finish
