#!/usr/bin/env bash
# What quantisation costs in coli: a Hugging Face checkpoint converted with
# every expert format (q8_row, q4_g64) and dense format (source, q8_row,
# q4_g64), each measured by coli perplexity against the f32 container (f32
# experts, dense as in the checkpoint) over the same text: perplexity, mean /
# p99 KL divergence, top-1 agreement. JOBS runs in parallel (default 2, one
# thread each). TOKENIZER=FILE converts with that tokenizer carried (e.g.
# byte_tokenizer.py's for the 256-token reference models). Writes
# OUT/coli_quality.json and prints a markdown table.
#
# usage: tools/bench/coli_quality.sh COLI MODEL_DIR TEXT OUT [CTX [CHUNKS]]
#   e.g. tools/bench/coli_quality.sh build/tools/coli tests/fixtures/models/trained-demo \
#          tests/fixtures/models/trained-demo/heldout.txt /tmp/coli-quality 256
set -euo pipefail
[[ $# -ge 4 ]] || { sed -n '/^# usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 2; }
coli=$1 model=$2 text=$3 out=$4 ctx=${5:-256} chunks=${6:-}
tokenizer=(${TOKENIZER:+--tokenizer "$TOKENIZER"})
mkdir -p "$out"
"$coli" convert --model "$model" --out "$out/f32.coli" --experts f32 "${tokenizer[@]}" >/dev/null 2>&1
run_one() {  # run_one EXPERTS DENSE
  local name="$1-$2"
  "$coli" convert --model "$model" --out "$out/$name.coli" --experts "$1" --dense "$2" "${tokenizer[@]}" >/dev/null 2>&1
  "$coli" perplexity --model "$out/$name.coli" --base "$out/f32.coli" --text "$text" --ctx "$ctx" --threads 1 \
    ${chunks:+--chunks "$chunks"} >"$out/$name.json" 2>"$out/$name.log"
  rm -f "$out/$name.coli"
}
pids=()
for experts in q8_row q4_g64; do
  for dense in source q8_row q4_g64; do
    run_one $experts $dense &
    pids+=($!)
    while [[ $(jobs -rp | wc -l) -ge ${JOBS:-2} ]]; do sleep 1; done
  done
done
for pid in "${pids[@]}"; do wait "$pid"; done
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for experts in ["q8_row", "q4_g64"]:
    for dense in ["source", "q8_row", "q4_g64"]:
        d = json.load(open(os.path.join(out, f"{experts}-{dense}.json")))
        rows.append({"experts": experts, "dense": dense, "perplexity": d["perplexity"], "base_perplexity": d["base_perplexity"],
                     "kld_mean": d["kld"]["mean"], "kld_p99": d["kld"]["p99"], "top1_agreement": d["top1_agreement"],
                     "tokens": d["tokens"]})
json.dump({"schema_version": 1, "rows": rows}, open(os.path.join(out, "coli_quality.json"), "w"), indent=1)
print(f"f32 perplexity {rows[0]['base_perplexity']:.4f} over {rows[0]['tokens']} tokens\n")
print("| experts | dense | PPL | mean KLD | p99 KLD | top-1 agreement |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['experts']} | {r['dense']} | {r['perplexity']:.4f} | {r['kld_mean']:.5f} | {r['kld_p99']:.4f} | {100 * r['top1_agreement']:.2f}% |")
PY
