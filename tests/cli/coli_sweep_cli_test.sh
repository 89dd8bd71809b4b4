#!/usr/bin/env bash
# coli-sweep as a user runs it on the tiny fixture model: the files it writes
# parse, the planned configuration is marked and ranked, every configuration
# produced the same tokens, and bad input is refused with a clear message.
# usage: coli_sweep_cli_test.sh PATH/TO/coli-sweep PATH/TO/coli PATH/TO/tests/fixtures
set -u
sweep="$1"
coli="$2"
fixtures="$3"
source "$(dirname "$0")/check.sh"

"$coli" convert --model "$fixtures/models/tiny-demo" --out "$work/demo.coli" --experts q4_g64 >/dev/null 2>&1
check "convert exits 0" test $? -eq 0
"$(dirname "$coli")/coli-probe" --quick --out "$work/profile.toml" >/dev/null 2>&1
check "probe exits 0" test $? -eq 0

# A tiny grid: 1 thread (plus the plan's set), resident and 4 of 8 slots, pins off and on.
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps all,4 --pins off,on \
  --kernels auto -p 5 -n 4 -d 0,3 --repeats 2 --min-time 0.05 --out "$work/out" >"$work/s.out" 2>"$work/s.err"
check "sweep exits 0" test $? -eq 0
check "no history: one recorded from the workload" contains "$work/s.out" "recorded one from this workload"
check "history written into --out" contains "$work/out/sweep.usage" "coli-usage-history"
check "the history has read rounds beside the grid's 1-thread team" grep -q "^read_rounds 1 " "$work/out/sweep.usage"
# Each traced pass's first KV position: decode at depth 0 starts a fresh context, at depth 3 it follows its prompt.
check "the history's trace keeps each pass's first position, fresh (0) and later ones" python3 - "$work/out/sweep.usage" <<'EOF'
import sys
line = next(l for l in open(sys.argv[1]) if l.startswith("trace_starts "))
starts = [int(v) for v in line.split()[2:]]
assert 0 in starts and any(s > 0 for s in starts), starts
EOF
check "the table marks the planned row" grep -qE "^ +[0-9]+ \* " "$work/s.out"
check "the table has a decode column per depth, each beside its prediction" grep -qE "kernel +tg@d0 predicted  tg@d3 predicted$" "$work/s.out"
check "the workload is llama-bench's tests" contains "$work/s.out" "workload: pp5, then 4 greedy decode tokens at depths 0 3"
check "decode rank and % of best printed" grep -qE "^decode: +planned: rank [0-9]+ of [0-9]+, [0-9.]+% of the best" "$work/s.out"
check "decode's standing repeat by repeat printed" \
  grep -qE "^decode: +planned: .*; repeat by repeat [0-9.]+% of its closest rival \(.*\), as fast or faster in [0-2] of 2 repeats; runs of one configuration moved [0-9]+% between repeats" "$work/s.out"
check "prefill rank and % of best printed" grep -qE "^prefill: planned: rank [0-9]+ of [0-9]+, [0-9.]+% of the best" "$work/s.out"
check "no prediction without a measured bandwidth, and why" grep -qE "^decode: +predicted: none \(the profile lacks" "$work/s.out"
check "token check passed" contains "$work/s.out" "token check: all [0-9]* runs produced the same tokens"
check "progress on stderr" contains "$work/s.err" "repeat 2/2"
check "each repeat's time on stderr" contains "$work/s.err" "repeat 1/2  took [0-9.]* [a-z]* (the predictions: "
check "no estimate of the grid's time where no configuration has a prediction, and it says so" \
  contains "$work/s.out" "no estimate of the grid's time: none of its [0-9]* configuration(s) has a prediction"
check "disk reads listed for the streaming configurations" contains "$work/s.out" "expert records read from disk, measured"
check "no temporary files left" test "$(ls "$work/out" | grep -c '\.tmp')" -eq 0

check "CSV: one row per configuration x repeat, one planned configuration" python3 - "$work/out/sweep.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
configs = {r["config"] for r in rows}
assert len(rows) == 2 * len(configs) >= 6, len(rows)
assert {r["config"] for r in rows if r["planned"] == "1"} and len({r["config"] for r in rows if r["planned"] == "1"}) == 1
assert all(float(r["decode_tok_s"]) > 0 and float(r["prefill_tok_s"]) > 0 for r in rows)
assert {r["cap"] for r in rows} >= {"8", "4"} and any(int(r["pins"]) > 0 for r in rows)
EOF
check "JSON: schema, planned, ranking, token check" python3 - "$work/out/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema_version"] == 14
# --min-time 0.05: a run repeats its pass until that was timed (how many passes that takes is the machine's).
assert d["workload"]["min_timed_seconds"] == 0.05
assert d["workload"]["repeats"] == d["workload"]["repeats_asked"] == 2 and d["stopped_early"] == ""
assert d["machine_changes"] == [], d["machine_changes"]  # its own quick profile: this machine
assert all(1 <= r["passes"] <= 32 for c in d["configs"] for r in c["runs"]), [r["passes"] for c in d["configs"] for r in c["runs"]]
# The prefill pass's expert reads per run: none where every expert is resident, and byte counts
# that go with the misses (a resident configuration reads nothing).
for c in d["configs"]:
    for r in c["runs"]:
        assert r["prefill_expert_misses"] >= 0 and (r["prefill_expert_bytes_read"] > 0) == (r["prefill_expert_misses"] > 0), r
        assert not c["resident"] or r["prefill_expert_misses"] == 0, (c["label"], r)
        # The I/O threads' read time: some where a record was read, none where none was.
        assert (r["prefill_expert_read_seconds"] > 0) == (r["prefill_expert_misses"] > 0), r
        # The compute thread's wake-ups after a round's last landing: only where rounds read.
        for phase in ("decode", "prefill"):
            w = r[phase + "_wakes"]
            assert w["rounds"] >= 0 and w["seconds"] >= 0 and (w["seconds"] > 0) <= (w["rounds"] > 0), (phase, r)
            assert not c["resident"] or w["rounds"] == 0, (c["label"], phase, r)
        assert (r["expert_read_seconds"] > 0) == (r["expert_misses"] > 0), r
assert all(c["gpu"] == "cpu" and c["vram_experts"] == [] for c in d["configs"]), "no --gpu: every expert on the CPU"
# Every configuration says what the planner predicted for it; a --quick profile has no measured
# bandwidth, so here each says why it has no prediction (the values are checked in sweep_test).
assert all("coli-probe" in c["predicted"]["unavailable"] for c in d["configs"]), d["configs"][0]["predicted"]
assert d["prediction"]["decode"]["points"] == 0
assert d["workload"]["prompt_tokens"] == 5 and d["workload"]["depths"] == [0, 3]
assert all([x["depth"] for x in c["decode_at_depth"]] == [0, 3] and x["median_tok_s"] > 0 for c in d["configs"] for x in c["decode_at_depth"])
assert all(len(r["decode_tok_s_at_depth"]) == 2 for c in d["configs"] for r in c["runs"])
planned = [c for c in d["configs"] if c["planned"]]
assert len(planned) == 1 and planned[0]["id"] == d["planned_config"]
assert d["token_check"]["passed"] and d["token_check"]["mismatches"] == []
for m in ("decode", "prefill"):
    r = d["ranking"][m]
    assert 1 <= r["rank"] <= r["of"] == len(d["configs"]) and 0 < r["percent_of_best"] <= 100
    # Repeat by repeat against the rival it trails most (2 repeats each), and the repeats' own motion.
    p = r["paired"]
    assert p["repeats"] == 2 and 0 <= p["as_fast_or_faster"] <= 2 and p["percent_of_rival"] > 0, p
    assert d["configs"][p["rival_config"]]["label"] == p["rival_label"] and p["rival_config"] != d["planned_config"], p
    n = r["repeat_noise"]
    assert n["configs"] == len(d["configs"]) and 0 <= n["median_spread"] <= n["widest_spread"], n
assert all(len(c["runs"]) == 2 and c[m]["median_tok_s"] > 0 for c in d["configs"] for m in ("decode", "prefill"))
assert any(x.startswith("cap = ") for x in d["plan_decisions"])
EOF
check "SVG: well-formed, a bar per configuration in both panels, planned one highlighted" \
  python3 - "$work/out/sweep.svg" "$work/out/sweep.json" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
configs = len(json.load(open(sys.argv[2]))["configs"])
rects = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") in ("planned", "config")]
assert len([e for e in rects if e.get("class") == "planned"]) == 2
assert len(rects) == 2 * configs
assert any("(planned)" in (e.text or "") for e in root.iter("{http://www.w3.org/2000/svg}text"))
EOF

# A second sweep reads the history it is given instead of recording one,
# and times the kernels again before its repeat (--retime, really measured).
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps 4 --kernels auto \
  -p 3 -n 2 -d 0 --repeats 1 --min-time 1000 --usage "$work/out/sweep.usage" --retime --retime-seconds 0.5 \
  --out "$work/out2" >"$work/s2.out" 2>&1
check "second sweep exits 0" test $? -eq 0
check "--retime: the repeat's drift printed" grep -qE "^  repeat 1 \([0-9.]+ s\): " "$work/s2.out"
check "--retime: the JSON has the repeat and each configuration's re-timed prediction" python3 - "$work/out2/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["repeat"] for r in d["retimed"]["repeats"]] == [0] and d["retimed"]["repeats"][0]["seconds"] > 0, d["retimed"]
# A --quick profile has no memory bandwidth: the re-timed figures cannot price a configuration either, and say why.
assert all("unavailable" in c["predicted_retimed"] for c in d["configs"]), d["configs"][0]["predicted_retimed"]
EOF
check "a minimum time no run reaches: every run stops at 32 passes" python3 - "$work/out2/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["workload"]["min_timed_seconds"] == 1000
assert all(r["passes"] == 32 for c in d["configs"] for r in c["runs"]), [r["passes"] for c in d["configs"] for r in c["runs"]]
EOF
check "second sweep pins from the given history" contains "$work/s2.out" "pins from the usage history"

# "auto" is the engine's choice on this CPU (COLI_CPU_KERNEL forces it): with
# that variant named too, the two are one configuration, and the sweep says so.
COLI_CPU_KERNEL=scalar "$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps 4 --pins off \
  --kernels auto,scalar -p 3 -n 2 -d 0 --repeats 1 --out "$work/out3" >"$work/s3.out" 2>&1
check "auto and its variant: sweep exits 0" test $? -eq 0
check "auto and its variant merged, said so" contains "$work/s3.out" "kernels: auto and scalar are scalar .*merged"
# A streaming cap wants the workload's routing even with pins off: the history is recorded all the same.
check "a streaming cap without pins records a history" contains "$work/s3.out" "recorded one from this workload .*at cap 4, which streams"
check "its history is in --out" contains "$work/out3/sweep.usage" "coli-usage-history"
check "auto and its variant run once" python3 - "$work/out3/sweep.json" <<'EOF'
import json, sys
configs = json.load(open(sys.argv[1]))["configs"]
labels = [c["label"] for c in configs]
assert not any(l.endswith("| auto") for l in labels), labels
assert len(labels) == len(set(labels)), labels
EOF

# --record-usage off: no history, so no pins and uniform routing for the streaming cap.
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps 4 --pins off,on --kernels auto \
  --record-usage off -p 3 -n 2 -d 0 --repeats 1 --out "$work/out4" >"$work/s4.out" 2>&1
check "--record-usage off: sweep exits 0" test $? -eq 0
check "--record-usage off records nothing" lacks "$work/s4.out" "recorded one from this workload"
check "--record-usage off leaves no history in --out" test ! -e "$work/out4/sweep.usage"
check "--record-usage off runs no pins" python3 - "$work/out4/sweep.json" <<'EOF'
import json, sys
configs = json.load(open(sys.argv[1]))["configs"]
assert configs and all(c["pins"] == 0 for c in configs), [c["label"] for c in configs]
EOF
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --record-usage sometimes --out "$work/e" >/dev/null 2>&1
check "bad --record-usage is a usage error" test $? -eq 2

# --gpu: the expert placements are a dimension of the grid, run on the Vulkan
# device (lavapipe in CI; skipped without one unless COLI_REQUIRE_VULKAN=1):
# every expert on the CPU, all in VRAM, and a budget that holds half the
# experts split per expert and by whole layers. The budget is read off a
# plan: the reserve (256 MiB at this size) + what else the tier holds + half
# of the expert slots.
if "$(dirname "$coli")/coli-plan" --profile "$work/profile.toml" --model "$work/demo.coli" --gpu 0 \
    --gpu-backend vulkan --ctx 8 --prompt-tokens 5 --out "$work/gpu.plan" >/dev/null 2>"$work/gpu-plan.err"; then
  half=$(python3 - "$work/gpu.plan" <<'EOF'
import sys, tomllib
lines = tomllib.load(open(sys.argv[1], "rb"))["memory"]["lines"]
vram = {l["component"]: l["bytes"] for l in lines if l["tier"] == "vram"}
slots = vram.pop("expert tier: VRAM slots")
vram.pop("VRAM reserve")
print((256 * 2**20 + sum(vram.values()) + slots // 2) // 1024)
EOF
)
  "$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps all --pins off --kernels auto \
    -p 5 -n 2 -d 0 --repeats 1 --gpu 0 --gpu-backend vulkan --vram "all,${half}K" --out "$work/gpu" \
    >"$work/g.out" 2>"$work/g.err"
  check "sweep --gpu exits 0" test $? -eq 0
  check "sweep --gpu: placements cpu, all in VRAM, per expert and by layer at half" python3 - "$work/gpu/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
gpu = {c["gpu"]: c["vram_experts"] for c in d["configs"]}
assert gpu.pop("cpu") == [], gpu
assert any(label.endswith("expert") and experts == [8, 8] for label, experts in gpu.items()), gpu
half = [e for label, e in gpu.items() if label.endswith("expert") and e != [8, 8]]
assert half and 0 < sum(half[0]) < 16, gpu
assert [e for label, e in gpu.items() if label.endswith("layer")] == [[0, 8]], gpu
assert d["configs"][d["planned_config"]]["gpu"].startswith("vulkan"), "the plan takes the GPU"
assert d["token_check"]["passed"]
EOF
  "$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --gpu 0 --gpu-backend vulkan --split rows \
    --out "$work/e" >/dev/null 2>"$work/e8"
  check "bad --split is a usage error" test $? -eq 2
  check "bad --split named" contains "$work/e8" "--split: 'rows' is not expert or layer"
elif [[ "${COLI_REQUIRE_VULKAN:-0}" == 1 ]]; then
  check "coli-plan --gpu 0 on the Vulkan device (COLI_REQUIRE_VULKAN=1)" false
  cat "$work/gpu-plan.err" >&2
fi

# Bad input: a message that says what is wrong (exit 1 error, 2 usage, 3 the
# planner refused), never a crash.
"$sweep" --model "$work/none.coli" --profile "$work/profile.toml" --out "$work/e" >/dev/null 2>"$work/e1"
check "missing model exits 1" test $? -eq 1
check "missing model named" contains "$work/e1" "none.coli: no such file"
head -c 200 "$work/profile.toml" >"$work/broken.toml"
"$sweep" --model "$work/demo.coli" --profile "$work/broken.toml" --out "$work/e" >/dev/null 2>"$work/e2"
check "broken profile exits 1" test $? -eq 1
check "broken profile named" contains "$work/e2" "broken.toml"
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --caps 1 --out "$work/e" >/dev/null 2>"$work/e3"
check "cap below top_k is a usage error" test $? -eq 2
check "cap error names top_k" contains "$work/e3" "cap 1 is outside \[top_k 2"
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 999 --out "$work/e" >/dev/null 2>"$work/e4"
check "empty grid is a usage error" test $? -eq 2
check "empty grid explained" contains "$work/e4" "no thread set"
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --pins maybe --out "$work/e" >/dev/null 2>"$work/e5"
check "bad --pins is a usage error" test $? -eq 2
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --ram 100M --out "$work/e" >/dev/null 2>"$work/e7"
check "a plan that does not fit exits 3" test $? -eq 3
check "the planner's refusal is shown" contains "$work/e7" "the planner refused: .*raise --ram"
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --threads 1 --caps all --pins off -p 5 -n 4 \
  --max-minutes 0.00001 --out "$work/e" >/dev/null 2>"$work/e8"
check "a sweep that cannot end within --max-minutes is refused before its runs" test $? -eq 3
check "the refusal says the limit, the time passed and the repeat's" \
  contains "$work/e8" "--max-minutes allows .* have passed and the next repeat would take about .*raise --max-minutes"
# The untimed recording passes are checked just before they run: a usage
# history's by uniform routing (none recorded yet), the read rounds' by the
# history (given here, so only they are left). Their prices need a tuned
# profile: a recorded one (tests/fixtures/profiles/h200-tuned/SOURCE.md).
tuned="$fixtures/profiles/h200-tuned/device-profile.toml"
"$sweep" --model "$work/demo.coli" --profile "$tuned" --threads 1 --caps 4 --pins on -p 5 -n 4 \
  --max-minutes 0.00001 --out "$work/e" >/dev/null 2>"$work/e10"
check "recording a usage history past --max-minutes is refused before it" test $? -eq 3
check "priced by uniform routing" contains "$work/e10" "recording 2 untimed passes at cap 4 .*(uniform routing: no usage history yet)"
"$sweep" --model "$work/demo.coli" --profile "$tuned" --threads 1 --caps 4 --pins on -p 5 -n 4 \
  --usage "$work/out/sweep.usage" --max-minutes 0.00001 --out "$work/e" >/dev/null 2>"$work/e11"
check "recording read rounds past --max-minutes is refused before them" test $? -eq 3
check "priced with the history given" contains "$work/e11" "recording 2 untimed passes at cap 4 .*(with the usage history)"
"$sweep" --model "$work/demo.coli" --profile "$work/profile.toml" --max-minutes -1 --out "$work/e" >/dev/null 2>"$work/e9"
check "a negative --max-minutes is a usage error" test $? -eq 2
# A profile of another machine (a replayed dual-socket EPYC: its plan runs
# 128 threads) is refused before any run, not after the first configuration.
"$(dirname "$coli")/coli-probe" --quick --replay-machine "$fixtures/machines/amd-epyc-2s" --out "$work/epyc.toml" >/dev/null 2>&1
"$sweep" --model "$work/demo.coli" --profile "$work/epyc.toml" --threads 1 --caps all --pins off -p 5 -n 4 \
  --out "$work/e" >"$work/e10.out" 2>"$work/e10"
check "a grid this machine cannot run exits 3" test $? -eq 3
check "the refusal names the configuration and the profile" contains "$work/e10" "128t .*describes another machine"
check "no run started" test "$(grep -c 'repeat 1/' "$work/e10")" -eq 0
# The same profile where the grid would record a usage history first (pins
# on, a streaming cap): refused before the recording pins a thread to a CPU
# this process lacks (it failed there, exit 1, "cannot pin a thread").
"$sweep" --model "$work/demo.coli" --profile "$work/epyc.toml" --threads 1 --caps 4 --pins on -p 5 -n 4 \
  --out "$work/e" >/dev/null 2>"$work/e12"
check "recording on another machine's CPUs exits 3" test $? -eq 3
check "the refusal names the recording's CPUs and the profile" \
  contains "$work/e12" "recording a usage history: the profile's decode threads run on CPUs .*describes another machine"
head -c 100000 "$work/demo.coli" >"$work/cut.coli"
"$sweep" --model "$work/cut.coli" --profile "$work/profile.toml" --out "$work/e" >/dev/null 2>"$work/e6"
check "truncated container exits 1" test $? -eq 1
check "truncated container explained" test -s "$work/e6"
check "no output from refused sweeps" test ! -e "$work/e/sweep.csv"

finish
