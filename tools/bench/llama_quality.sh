#!/usr/bin/env bash
# What quantisation costs in llama.cpp, on the checkpoint coli measures with
# coli perplexity: the Hugging Face directory converted by llama.cpp's own
# converter to f32, quantised to Q8_0 and Q4_0 (llama-quantize), then
# llama-perplexity over the same text in the same windows: the f32 run saves
# its logits (--kl-divergence-base), each quantised run reports perplexity,
# KL divergence and top-1 agreement against them. Two mixes match coli's
# layout for an equal-mixture comparison: Q4_0-mix (experts Q4_0, attention
# and output Q8_0, token embedding F16: coli's q4_g64 experts with q8_row
# dense) and Q8_0-mix (Q8_0 with an F16 token embedding: coli's q8_row with
# q8_row dense; coli never quantises the embedding). Prints llama.cpp's
# lines and writes OUT/llama_quality.json.
#
# usage: tools/bench/llama_quality.sh LLAMA_BUILD LLAMA_SRC MODEL_DIR TEXT OUT [CTX [CHUNKS]]
#   e.g. tools/bench/llama_quality.sh /tmp/llama/build /tmp/llama/src tests/fixtures/models/trained-demo \
#          tests/fixtures/models/trained-demo/heldout.txt /tmp/quality 256
set -euo pipefail
[[ $# -ge 5 ]] || { sed -n '/^# usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 2; }
build=$1 src=$2 model=$3 text=$4 out=$5 ctx=${6:-256} chunks=${7:--1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/llama_convert_trained_vocab.py" "$src" "$model" "$out/f32.gguf" >"$out/convert.log" 2>&1 \
  || { tail -20 "$out/convert.log"; exit 1; }
quantize() {  # quantize NAME TYPE [OPTIONS...]
  local name=$1 type=$2
  shift 2
  "$build/bin/llama-quantize" "$@" "$out/f32.gguf" "$out/$name.gguf" "$type" >"$out/quantize-$name.log" 2>&1 \
    || { tail -5 "$out/quantize-$name.log"; exit 1; }
}
quantize Q8_0 Q8_0
quantize Q4_0 Q4_0
quantize Q8_0-mix Q8_0 --token-embedding-type f16
quantize Q4_0-mix Q4_0 --token-embedding-type f16 --output-tensor-type q8_0 --tensor-type attn_q=q8_0 \
  --tensor-type attn_k=q8_0 --tensor-type attn_v=q8_0 --tensor-type attn_output=q8_0
types=(Q8_0 Q4_0 Q8_0-mix Q4_0-mix)
common=(-f "$text" -c "$ctx" --chunks "$chunks" -b "$ctx" -t "$(nproc)")
"$build/bin/llama-perplexity" -m "$out/f32.gguf" "${common[@]}" --kl-divergence-base "$out/f32.kld" >"$out/f32.log" 2>&1 \
  || { tail -20 "$out/f32.log"; exit 1; }
for type in "${types[@]}"; do
  "$build/bin/llama-perplexity" -m "$out/$type.gguf" "${common[@]}" --kl-divergence-base "$out/f32.kld" --kl-divergence \
    >"$out/$type.log" 2>&1 || { tail -20 "$out/$type.log"; exit 1; }
done
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
result = {"schema_version": 1}
f32 = open(f"{out}/f32.log").read()
m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", f32)
result["f32"] = {"perplexity": float(m.group(1))} if m else {"log_tail": f32[-400:]}
types = ["Q8_0", "Q4_0", "Q8_0-mix", "Q4_0-mix"]
for t in types:
    log = open(f"{out}/{t}.log").read()
    entry = {}
    for key, pattern in [("perplexity", r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"), ("base_perplexity", r"Mean PPL\(base\)\s*:\s*([0-9.]+)"),
                         ("kld_mean", r"Mean\s+KLD:\s*([0-9.]+)"), ("kld_p99", r"99\.0%\s+KLD:\s*([0-9.]+)"),
                         ("kld_median", r"Median\s+KLD:\s*([0-9.]+)"), ("kld_max", r"Maximum KLD:\s*([0-9.]+)"),
                         ("top1_agreement_pct", r"Same top p:\s*([0-9.]+)")]:
        m = re.search(pattern, log)
        if m:
            entry[key] = float(m.group(1))
    size = re.search(r"quant size\s*=\s*([0-9.]+) MiB \(([0-9.]+) BPW\)", open(f"{out}/quantize-{t}.log").read())
    if size:
        entry["size_mib"], entry["bits_per_weight"] = float(size.group(1)), float(size.group(2))
    entry["log_tail"] = log[-1500:]
    result[t] = entry
json.dump(result, open(f"{out}/llama_quality.json", "w"), indent=1)
for t in types:
    print(t, {k: v for k, v in result[t].items() if k != "log_tail"})
print("f32", result["f32"])
PY
