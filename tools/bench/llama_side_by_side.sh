#!/usr/bin/env bash
# coli vs llama.cpp on the same Hugging Face checkpoint, one command.
#
# 1. A random-initialised OLMoE checkpoint (make_hf_checkpoint.py: --shape
#    olmoe-1b-7b = hidden 2048, 16 layers, 16 heads, 64 experts, top-8, expert
#    width 1024, vocab 50304; or small) with GPT-2's tokenizer files.
# 2. llama.cpp side: LLAMA_SRC_DIR/convert_hf_to_gguf.py --outtype bf16 where
#    python3 has torch and transformers ("converter: convert_hf_to_gguf.py");
#    else gguf_from_hf.py, which writes the bf16 GGUF with llama.cpp's own
#    gguf-py (tensor names from gguf.TensorNameMap for MODEL_ARCH.OLMOE, the
#    same f32/bf16 choices and expert stacking; "converter: gguf_from_hf.py").
#    The path taken is written to OUT_DIR/side_by_side.md. Then llama-quantize
#    to Q4_0 and Q8_0; the bf16 GGUF is deleted.
# 3. coli side: coli convert to int4 experts + int4 dense (q4_g64/q4_g64,
#    against Q4_0) and int8 + int8 (q8_row/q8_row, against Q8_0).
# 4. Rounds (interleaved, engine order alternating per round): llama-bench
#    -p P -n 0 and -p 0 -n N -d DEPTHS (-t THREADS -r 1 -o json: the figures
#    of -p P -n N -d DEPTHS without pp at every depth), and coli-speed-bench
#    -p P -n N -d DEPTHS -r 1 --json. Then side_by_side_report.py: per pair,
#    medians and min-max over the rounds, coli / llama.cpp, and coli int4's
#    decode bandwidth bound (bytes per token at depth 0 / coli-probe's read
#    bandwidth at THREADS) with the fraction achieved.
# --gpu: both engines all on the GPU (llama-bench -ngl 99 -fa 1, coli-speed-bench
# --backend cuda); --ncmoe 4,8,12 adds hybrid Q4_0/int4 pairs at equal expert
# VRAM: llama.cpp -ncmoe N (the experts of N whole layers on the CPU) against
# coli --vram-share (L - N) / L (that share of every layer's experts in VRAM,
# chosen per expert), L the checkpoint's layers.
# Converted files are kept in --work and reused by the next call (--reconvert
# redoes them); OUT_DIR gets side_by_side.md, side_by_side.json, the raw
# JSON of every round (raw/) and the conversion log.
#
# usage: tools/bench/llama_side_by_side.sh LLAMA_BUILD_DIR LLAMA_SRC_DIR OUT_DIR [--threads N] [--depths 0,512,4096]
#          [--rounds 3] [--shape olmoe-1b-7b|olmoe-4-layers|small] [-p 512] [-n 64] [--work DIR] [--coli-build DIR]
#          [--bandwidth GB/S] [--reconvert] [--skip-build] [--convert-only] [--gpu] [--ncmoe 4,8,12]
set -euo pipefail
usage() { sed -n '/^# usage:/,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[[ $# -ge 3 ]] || usage
call="$0 $*"
llama_build=$(realpath "$1") llama_src=$(realpath "$2") out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
threads=$(nproc) depths=0,512,4096 rounds=3 shape=olmoe-1b-7b prompt=512 gen=64
work="" coli_build="$repo/build" bandwidth="" bandwidth_source="coli-probe" reconvert=0 skip_build=0 convert_only=0 gpu=0 ncmoe=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --depths) depths=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    -p) prompt=$2; shift 2 ;;
    -n) gen=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --coli-build) coli_build=$(realpath "$2"); shift 2 ;;
    --bandwidth) bandwidth=$2 bandwidth_source="given"; shift 2 ;;
    --reconvert) reconvert=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --gpu) gpu=1; shift ;;
    --ncmoe) ncmoe=$2; shift 2 ;;
    --convert-only) convert_only=1; shift ;;  # stop after converting and measuring the bandwidth (a first call)  # every converted file must already be in --work
    *) echo "llama_side_by_side.sh: unknown option $1" >&2; usage ;;
  esac
done
case "$shape" in olmoe-1b-7b|olmoe-4-layers|small) ;; *) echo "llama_side_by_side.sh: --shape is olmoe-1b-7b, olmoe-4-layers or small" >&2; exit 2 ;; esac
work=${work:-/tmp/coli-side-by-side-$shape}
py=${PYTHON:-}  # the first python3 with numpy (torch + transformers, where present, make it llama.cpp's converter)
if [[ -z $py ]]; then
  for candidate in python3 /usr/bin/python3; do "$candidate" -c "import numpy" 2>/dev/null && { py=$candidate; break; }; done
fi
vocab="$repo/tests/fixtures/tokenizer/ggml-vocab-gpt-2.gguf"  # llama.cpp's GPT-2 vocabulary
for tool in "$llama_build/bin/llama-bench" "$llama_build/bin/llama-quantize" "$coli_build/tools/coli" \
            "$coli_build/tools/bench/coli-speed-bench" "$coli_build/tools/coli-probe"; do
  [[ $convert_only == 1 && $tool == */llama-bench ]] && continue  # converting needs no benchmark
  [[ -x $tool ]] || { echo "llama_side_by_side.sh: $tool is missing: build it first" >&2; exit 1; }
done
[[ -f $vocab ]] || { echo "llama_side_by_side.sh: $vocab is missing" >&2; exit 1; }
[[ -n $py ]] || { echo "llama_side_by_side.sh: no python3 with numpy (Debian: python3-numpy; or set PYTHON)" >&2; exit 1; }
mkdir -p "$out/raw" "$work"
[[ $reconvert == 1 ]] && rm -rf "${work:?}"/*
log="$out/conversion.log"
echo "== $(date -u +%FT%TZ): $call" >>"$log"  # appended: a reusing call keeps the conversion's lines
need() {  # need FILE: with --skip-build, a missing converted file is an error
  [[ -s $1 ]] && return 1
  [[ $skip_build == 1 ]] && { echo "llama_side_by_side.sh: --skip-build but $1 is missing" >&2; exit 1; }
  return 0
}

hf="$work/hf"
if need "$hf/tokenizer_config.json"; then  # written last
  rm -rf "$hf"
  "$py" "$here/make_hf_checkpoint.py" "$hf" --shape "$shape" --vocab-gguf "$vocab" --gguf-py "$llama_src/gguf-py" | tee -a "$log"
fi
converter=$(cat "$work/converter" 2>/dev/null || true)
if need "$work/model-Q4_0.gguf" || need "$work/model-Q8_0.gguf"; then
  bf16="$work/model-bf16.gguf"
  converter=""
  if "$py" -c "import torch, transformers" 2>/dev/null; then
    if PYTHONPATH="$llama_src/gguf-py" "$py" "$llama_src/convert_hf_to_gguf.py" "$hf" --outtype bf16 --outfile "$bf16" >>"$log" 2>&1; then
      converter="convert_hf_to_gguf.py (llama.cpp's converter)"
    else
      converter="gguf_from_hf.py (llama.cpp's gguf-py), because convert_hf_to_gguf.py failed: see conversion.log"
    fi
  else
    converter="gguf_from_hf.py (llama.cpp's gguf-py: no torch/transformers for convert_hf_to_gguf.py here)"
  fi
  if [[ $converter == gguf_from_hf* ]]; then
    "$py" "$here/gguf_from_hf.py" "$hf" "$bf16" --gguf-py "$llama_src/gguf-py" --vocab-gguf "$vocab" >>"$log" 2>&1
  fi
  echo "$converter" >"$work/converter"
  for q in Q4_0 Q8_0; do
    "$llama_build/bin/llama-quantize" "$bf16" "$work/model-$q.gguf.partial" $q "$threads" >>"$log" 2>&1
    mv "$work/model-$q.gguf.partial" "$work/model-$q.gguf"
  done
  rm -f "$bf16"
fi
for spec in "int4 q4_g64" "int8 q8_row"; do
  set -- $spec
  if need "$work/model-$1.coli"; then
    "$coli_build/tools/coli" convert --model "$hf" --out "$work/model-$1.coli" --experts $2 --dense $2 >>"$log" 2>&1
  fi
done
echo "converter: $converter" | tee -a "$log"

if [[ -z $bandwidth ]]; then  # read bandwidth at these threads, from coli-probe (at most 25 s; kept in --work)
  [[ -s $work/bandwidth-profile.toml ]] || "$coli_build/tools/coli-probe" --disk-dir "$work" --out "$work/bandwidth-profile.toml" >>"$log" 2>&1
  bandwidth=$("$py" - "$work/bandwidth-profile.toml" "$threads" <<'PY'
import sys, tomllib
points = tomllib.load(open(sys.argv[1], "rb")).get("measurements", {}).get("memory_bandwidth", {}).get("points", [])
reads = [p for p in points if p["kernel"] == "read" and p["kind_rank"] == -1]
print(min(reads, key=lambda p: abs(p["threads"] - int(sys.argv[2])))["median_gb_per_s"] if reads else 0)
PY
)
fi

if [[ $convert_only == 1 ]]; then
  echo "converted into $work (read bandwidth $bandwidth GB/s); no rounds (--convert-only)" | tee -a "$log"
  exit 0
fi

# The pairs: NAME QUANT FORMAT N_CPU_MOE VRAM_SHARE (- for none).
pairs=("q4 Q4_0 int4 - -" "q8 Q8_0 int8 - -")
if [[ -n $ncmoe ]]; then
  layers=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' "$hf/config.json")
  for n in ${ncmoe//,/ }; do
    (( n > 0 && n < layers )) || { echo "llama_side_by_side.sh: --ncmoe $n is outside 1..$((layers - 1))" >&2; exit 2; }
    pairs+=("q4-ncmoe$n Q4_0 int4 $n $("$py" -c "print(round(($layers - $n) / $layers, 4))")")
  done
fi
llama_gpu=() coli_gpu=()
[[ $gpu == 1 ]] && llama_gpu=(-ngl 99 -fa 1) coli_gpu=(--backend cuda)
llama_round() {  # llama_round PAIR QUANT N_CPU_MOE ROUND
  local m="$work/model-$2.gguf" raw="$out/raw/llama-$1-r$4" extra=("${llama_gpu[@]}")
  [[ $3 != - ]] && extra+=(-ncmoe "$3")
  "$llama_build/bin/llama-bench" -m "$m" -p "$prompt" -n 0 -t "$threads" -r 1 "${extra[@]}" -o json >"$raw-pp.json" 2>>"$log"
  "$llama_build/bin/llama-bench" -m "$m" -p 0 -n "$gen" -d "$depths" -t "$threads" -r 1 "${extra[@]}" -o json \
    >"$raw-tg.json" 2>>"$log"
}
coli_round() {  # coli_round PAIR FORMAT VRAM_SHARE ROUND
  local extra=("${coli_gpu[@]}")
  [[ $3 != - ]] && extra+=(--vram-share "$3")
  "$coli_build/tools/bench/coli-speed-bench" --model "$work/model-$2.coli" --threads "$threads" -p "$prompt" -n "$gen" \
    -d "$depths" -r 1 "${extra[@]}" --json "$out/raw/coli-$1-r$4.json" >>"$log" 2>&1
}
rm -f "$out"/raw/*.json
for round in $(seq 1 "$rounds"); do
  for pair in "${pairs[@]}"; do
    set -- $pair
    echo "round $round/$rounds: $1 ($2 vs $3)" >&2
    if (( round % 2 )); then llama_round $1 $2 $4 $round; coli_round $1 $3 $5 $round
    else coli_round $1 $3 $5 $round; llama_round $1 $2 $4 $round; fi
  done
done
# llama-bench's two JSON lists per round as one.
for f in "$out"/raw/llama-*-pp.json; do
  "$py" -c 'import json,sys; json.dump(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2])), open(sys.argv[3], "w"), indent=1)' \
    "$f" "${f%-pp.json}-tg.json" "${f%-pp.json}.json" && rm -f "$f" "${f%-pp.json}-tg.json"
done
notes="shape $shape, $threads threads, $rounds interleaved round(s), -p $prompt -n $gen -d $depths; converter: $converter; "
[[ $gpu == 1 ]] && notes+="all on the GPU: llama-bench -ngl 99 -fa 1, coli-speed-bench --backend cuda ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)); "
llama_version=$(cat "$llama_src/VERSION" 2>/dev/null || git -C "$llama_src" describe --tags --always 2>/dev/null || basename "$llama_src")
notes+="llama.cpp $llama_version; "
notes+="coli ${COLI_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')}; read bandwidth ${bandwidth} GB/s ($bandwidth_source); $(nproc) CPUs, $(uname -m)"
report_pairs=""
for pair in "${pairs[@]}"; do
  set -- $pair
  if [[ $4 == - ]]; then report_pairs+="$1:$2:$3,"; else report_pairs+="$1:$2 -ncmoe $4:$3 --vram-share $5,"; fi
done
"$py" "$here/side_by_side_report.py" "$out/raw" "$out" --pairs "${report_pairs%,}" --bandwidth "$bandwidth" --notes "$notes"
