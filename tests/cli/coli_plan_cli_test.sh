#!/usr/bin/env bash
# coli-plan as a user runs it: exit codes, the table, the plan file, refusals.
# usage: coli_plan_cli_test.sh PATH/TO/coli-plan PATH/TO/tests/fixtures PATH/TO/profiles
set -u
plan="$1"
fixtures="$2"
profiles="$3"
model="$fixtures/model-configs/Qwen3-30B-A3B.json"
profile="$profiles/h200-xeon-16c.toml"
source "$(dirname "$0")/check.sh"

# The H200 profile and a Qwen3-30B-A3B config in 16 GiB on the CPU: a streaming plan.
# --offline: plan for the H200 the profile describes (this machine is not one; docs/fleet.md).
"$plan" --profile "$profile" --model "$model" --ram 16G --gpu none --offline >"$work/h.out" 2>"$work/h.err"
check "16G plan exits 0" test $? -eq 0
check "table has the tier columns" contains "$work/h.out" "VRAM .* RAM .* disk"
check "expert slots with a bar" contains "$work/h.out" "^expert cache: evictable slots .*####"
check "streaming cap shown" contains "$work/h.out" "cap [0-9]* of 128 experts per MoE layer .*streaming"
check "margin against the headroom" contains "$work/h.out" "^needs .* of 16.00 GiB headroom"
check "every choice has a reason" contains "$work/h.out" "^  threads .*from the profile"
check "decode speed predicted" contains "$work/h.out" "decode .* tok/s"
check "planning time printed" contains "$work/h.out" "^planned in [0-9.]* ms"

# --json parses; --toml and --out write the same plan, with its schema version.
"$plan" --profile "$profile" --model "$model" --ram 16G --json >"$work/p.json" 2>/dev/null
check "--json exits 0" test $? -eq 0
check "--json parses" python3 -c "import json,sys; d=json.load(sys.stdin); assert d['schema_version']==7 and d['fits'] and d['knobs']['cap']<128" <"$work/p.json"
"$plan" --profile "$profile" --model "$model" --ram 16G --toml --out "$work/p.toml" >"$work/p.stdout" 2>/dev/null
check "--out writes the plan" contains "$work/p.toml" "^schema_version = 7$"
check "the plan names the profile it was made for" contains "$work/p.toml" "^profile_fingerprint = 'fnv1a64:"
check "--toml prints the plan" contains "$work/p.stdout" "^\[knobs\]$"
check "no temporary files left" test "$(ls "$work" | grep -c '\.tmp')" -eq 0

# --kv-type: f16 by default with its reason; bf16 on request, its KV line half of f32's; a bad name is a usage error.
"$plan" --profile "$profile" --model "$model" --ram 16G --gpu none --offline --json >"$work/kv16.json" 2>/dev/null
"$plan" --profile "$profile" --model "$model" --ram 16G --gpu none --offline --json --kv-type bf16 >"$work/kvbf.json" 2>/dev/null
"$plan" --profile "$profile" --model "$model" --ram 16G --gpu none --offline --json --kv-type f32 >"$work/kv32.json" 2>/dev/null
check "KV f16 by default, with a reason" python3 -c "import json,sys; d=json.load(sys.stdin); assert d['knobs']['kv_type']=='f16'; assert [x for x in d['decisions'] if x['knob']=='kv_type' and 'default' in x['reason']]" <"$work/kv16.json"
kv_line="import json,sys; kv=lambda f: [l['bytes'] for l in json.load(open(f))['memory']['lines'] if l['component']=='KV cache'][0]"
check "--kv-type bf16 halves the priced KV" python3 -c "$kv_line; assert kv('$work/kvbf.json')*2 == kv('$work/kv32.json') == kv('$work/kv16.json')*2 > 0"
check "--kv-type f32 recorded" python3 -c "import json; assert json.load(open('$work/kv32.json'))['knobs']['kv_type']=='f32'"
"$plan" --profile "$profile" --model "$model" --ram 16G --offline --kv-type f8 >/dev/null 2>"$work/kvbad.err"
check "--kv-type f8 is a usage error" test $? -eq 2
check "and the error lists the KV types" grep -q "f32" "$work/kvbad.err"

# 1 GiB cannot hold the dense weights: refused, saying what to change.
"$plan" --profile "$profile" --model "$model" --ram 1G >"$work/r.out" 2>"$work/r.err"
check "1G plan refused with 3" test $? -eq 3
check "refusal says refused" contains "$work/r.err" "refused"
check "refusal names what to change" grep -qiE -- "--ram|raise|use " "$work/r.err"
check "refusal prints no table" test ! -s "$work/r.out"

# A broken profile: exit 1 naming the file.
head -c 300 "$profile" >"$work/broken.toml"
"$plan" --profile "$work/broken.toml" --model "$model" >/dev/null 2>"$work/b.err"
check "broken profile exits 1" test $? -eq 1
check "broken profile named" contains "$work/b.err" "broken.toml"

# Bad arguments: a size that is not one, an override that would crash.
"$plan" --profile "$profile" --model "$model" --ram 16 --offline >/dev/null 2>"$work/s16.err"
check "a bare --ram number is a usage error (2)" test $? -eq 2
check "a bare --ram number (16 bytes?) is refused" contains "$work/s16.err" "give a unit"
"$plan" --profile "$profile" --model "$model" --ram 16g --gpu none --offline >/dev/null 2>&1
check "--ram 16g is 16 GiB" test $? -eq 0
"$plan" --profile "$profile" --model "$model" --ram lots >/dev/null 2>"$work/s.err"
check "bad --ram is a usage error (2)" test $? -eq 2
check "bad --ram explained" contains "$work/s.err" "not a size"
"$plan" --profile "$profile" --model "$model" --ctx 10000000 >/dev/null 2>"$work/c.err"
check "--ctx past the trained range refused (3)" test $? -eq 3
check "--ctx refusal names the fix" contains "$work/c.err" "use --ctx"

# Issue 12: outcomes a script can tell apart.
check "--json: numbers beside the formatted decisions" python3 - "$work/p.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
by_knob = {x["knob"]: x for x in d["decisions"]}
assert by_knob["cap"]["number"] == d["knobs"]["cap"] and by_knob["cap"]["unit"] == "slots"
assert by_knob["ram"]["number"] == d["memory"]["headroom_bytes"] and by_knob["ram"]["unit"] == "bytes"
assert by_knob["margin"]["number"] == d["memory"]["margin_bytes"]
assert "number" not in by_knob["kernel"]
EOF
"$plan" --profile "$profile" --model "$model" --ram 1G --offline --json >"$work/r.json" 2>"$work/rj.err"
check "--json refusal exits 3" test $? -eq 3
check "--json refusal is JSON on stdout: fits false, bytes per tier, advice" python3 - "$work/r.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fits"] is False and d["does_not_fit"] is True
ram = d["tiers"]["ram"]
assert ram["available_bytes"] == 1 << 30 and ram["needed_bytes"] > ram["available_bytes"]
assert any("raise --ram" in a for a in d["advice"]) and d["refused"].startswith("the model does not fit")
EOF
check "--json refusal also on stderr" contains "$work/rj.err" "refused"
"$plan" --model "$model" --ram 16G >/dev/null 2>"$work/np.err"
check "no profile anywhere: exit 1" test $? -eq 1
check "no profile anywhere: says to run coli-probe" contains "$work/np.err" "run coli-probe"
mkdir -p "$XDG_CONFIG_HOME/coli"
cp "$profile" "$XDG_CONFIG_HOME/coli/device-profile.toml"
"$plan" --model "$model" --ram 16G --gpu none --offline --json >"$work/d.json" 2>"$work/d.err"
check "without --profile the default profile is used" test $? -eq 0
check "and coli-plan says which file" contains "$work/d.err" "profile $XDG_CONFIG_HOME/coli/device-profile.toml"
check "the plan was made from it" python3 -c "import json,sys; assert json.load(sys.stdin)['made_for']['profile_path'].endswith('coli/device-profile.toml')" <"$work/d.json"
"$plan" --version >"$work/v.out" 2>&1
check "--version exits 0" test $? -eq 0
check "--version: program, version and commit" contains "$work/v.out" "^coli-plan [0-9.]* (commit [0-9a-z+]*)"
check "--version: schema versions" contains "$work/v.out" "device profile [0-9]*, plan 7, container [0-9]*, usage history [0-9]*"
"$plan" --profile "$profile" --model "$model" --kernel avx512_vnni >/dev/null 2>&1
check "a kernel name the parser does not know is a usage error" test $? -eq 2
"$plan" --help >"$work/help.out" 2>&1
check "--help names the kernel as the parser spells it" contains "$work/help.out" "avx512vnni, amx or exact"
check "--help never says avx512_vnni" test "$(grep -c avx512_vnni "$work/help.out")" -eq 0
"$plan" --no-such-option >/dev/null 2>&1
check "an unknown option is a usage error" test $? -eq 2

# Expert parallel on the replayed 8-GPU host (issue 18): DeepSeek-V3 at int4
# spread over every GPU, each GPU's share, NUMA node and the all-reduce
# printed; --json carries the placement; its quick profile has no GPU
# self-test, so the speed says what to measure. A bad --gpus list is refused.
hgx="$profiles/hgx-h200-8gpu.toml"
deepseek="$fixtures/model-configs/DeepSeek-V3.json"
"$plan" --profile "$hgx" --model "$deepseek" --gpu-backend cuda --gpus all --offline >"$work/ep.out" 2>"$work/ep.err"
check "8-GPU plan exits 0" test $? -eq 0
check "expert parallel over 8 GPUs" contains "$work/ep.out" "^expert parallel over 8 GPUs"
check "each GPU its share and NUMA node" contains "$work/ep.out" "^  GPU 7 .*1856 experts (32..32 per layer).*NUMA node 1, CPUs 64-127,192-255"
check "each GPU its dense copy" contains "$work/ep.out" "^GPU 5 dense weights"
check "the all-reduce's traffic" contains "$work/ep.out" "^  exchange  2.8 MiB per token per GPU"
check "no host cache when every expert is on a GPU" contains "$work/ep.out" "expert cache: none on the host"
check "a preview on this build" contains "$work/ep.out" "preview: this build's engine does not run it"
check "speed needs the self-test" contains "$work/ep.out" "run coli-probe --gpu-selftest"
"$plan" --profile "$hgx" --model "$deepseek" --gpu-backend cuda --gpus all --offline --json >"$work/ep.json" 2>/dev/null
check "--json carries expert_gpu" python3 -c "
import json,sys; d=json.load(sys.stdin); ep=d['expert_parallel']
assert len(ep['gpus'])==8 and len(ep['layers'])==58
assert all(sorted(l['expert_gpu'])==sorted(list(range(8))*32) for l in ep['layers'])
assert ep['exchange']['bytes_per_token']==58*2*7*7168*4//8" <"$work/ep.json"
"$plan" --profile "$hgx" --model "$deepseek" --gpu-backend cuda --gpus 0,9 --offline >/dev/null 2>"$work/ep9.err"
check "--gpus 0,9 refused" test $? -ne 0
check "--gpus names the bad ordinal" contains "$work/ep9.err" "'9' is not a CUDA ordinal"

# --retime on this machine: a quick profile (no kernel timings) of it, then
# the plan times one thread set's kernels and OpenMP's costs now and predicts
# from them; the plan file says so. --offline plans another machine: refused.
"$(dirname "$plan")/coli-probe" --quick --out "$work/here.toml" >/dev/null 2>&1
check "quick probe of this machine" test $? -eq 0
tiny="$fixtures/models/tiny-demo"
"$plan" --profile "$work/here.toml" --model "$tiny" --gpu none --threads 1 --retime --retime-seconds 1.5 \
  --out "$work/retimed.toml" >"$work/rt.out" 2>"$work/rt.err"
check "--retime plans, exit 0" test $? -eq 0
check "--retime says what it timed" contains "$work/rt.err" "^coli-plan: --retime: 1 thread set timed again in [0-9.]* s: "
check "the prediction says it is re-timed" contains "$work/rt.out" "^predicted speed (--retime: kernels timed again here, timed now"
check "a quick profile's kernels timed now" contains "$work/rt.err" "timed now, the profile had no kernel timings: kind[0-9]*:1c"
check "the plan file records the re-timing" contains "$work/retimed.toml" "^retimed = .*timed now"
"$plan" --profile "$work/here.toml" --model "$tiny" --gpu none --retime --offline >/dev/null 2>"$work/rt2.err"
check "--retime with --offline is a usage error" test $? -eq 2
"$plan" --profile "$work/here.toml" --model "$tiny" --gpu none --threads 999 --retime >/dev/null 2>"$work/rt3.err"
check "--retime at a thread count the probe cannot time fails" test $? -eq 1
check "and says which counts it can" contains "$work/rt3.err" "no thread set of 999 threads to time on this machine"

finish
