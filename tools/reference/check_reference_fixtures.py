#!/usr/bin/env python3
"""Validates the MoE reference fixtures under tests/fixtures/models/.

Python 3 standard library only (json, struct): no torch needed. For every
architecture directory it checks
  config.json         model_type, the sizes the references rely on
  model.safetensors   header parses, every tensor F32 with a consistent
                      byte range, the expected per-expert layout and shapes
  reference*.json     schema, ids in range, 12 prompt ids, 32 generated ids,
  reference*.f32      size = (prompt + generated) * vocab floats, all finite,
                      argmax(generated_logits[j]) == generated_ids[j],
                      argmax(prompt_logits[i]) == prompt_argmax[i],
                      generated_logits[0] == prompt_logits[-1] (prefill),
                      head samples equal the binary,
  q8/q4 probes        re-quantises the probe row with a float32-exact port of
                      kernels/reference/gemv_reference.cpp and compares the
                      integers, scales and de-quantised values.

Usage: check_reference_fixtures.py [DIR]   (default tests/fixtures/models)
Exit status 0 when everything holds; prints one line per check group.
"""
import json
import math
import os
import re
import struct
import sys

from cpp_float import f32, float_to_half, half_to_float

ARCHS = ("qwen3_moe", "olmoe", "mixtral", "qwen2_moe")
VARIANTS = (("reference", "f32"), ("reference_q8", "q8_row"), ("reference_q4", "q4_g64"))
PROMPT_LEN = 12
NEW_TOKENS = 32
EXPERT_KEY = re.compile(r"^model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.experts\.(\d+)\."
                        r"(w1|w2|w3|gate_proj|up_proj|down_proj)\.weight$")

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def quant_q8_row(row):
    # float32 / float32 is correctly rounded when done in double then rounded to float32.
    max_abs = max(abs(x) for x in row)
    scale = f32(max_abs / 127.0) if max_abs > 0 else 1.0
    q = [int(clamp(round(f32(x / scale)), -127, 127)) for x in row]
    return q, scale, [f32(v * scale) for v in q]


def quant_q4_g64(row):
    qs, bits, deq = [], [], []
    for g in range(0, len(row), 64):
        group = row[g:g + 64]
        max_abs = max(abs(x) for x in group)
        h = float_to_half(f32(max_abs / 7.0) if max_abs > 0 else 1.0)
        scale = half_to_float(h)
        q = [int(clamp(round(f32(x / scale)), -8, 7)) for x in group]
        qs += q
        bits.append(h)
        deq += [f32(v * scale) for v in q]
    return qs, bits, deq


def read_safetensors(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    data_len = size - 8 - n
    end = 0
    for name, t in header.items():
        lo, hi = t["data_offsets"]
        numel = 1
        for d in t["shape"]:
            numel *= d
        check(t["dtype"] == "F32", f"{path}: {name} dtype {t['dtype']}")
        check(hi - lo == numel * 4, f"{path}: {name} byte range {hi - lo} != {numel * 4}")
        end = max(end, hi)
    check(end == data_len, f"{path}: data ends at {end}, file holds {data_len}")
    return header, meta


def read_f32(path):
    with open(path, "rb") as f:
        raw = f.read()
    return list(struct.unpack("<%df" % (len(raw) // 4), raw)), len(raw)


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def check_arch(root, arch):
    d = os.path.join(root, arch)
    print(f"[{arch}]")
    cfg_path = os.path.join(d, "config.json")
    if not check(os.path.exists(cfg_path), f"{arch}: config.json missing"):
        return
    cfg = json.load(open(cfg_path))
    check(cfg.get("model_type") == arch, f"{arch}: model_type {cfg.get('model_type')}")
    vocab, hidden, layers = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
    experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    top_k = cfg["num_experts_per_tok"]
    ff = cfg["intermediate_size"] if arch in ("olmoe", "mixtral") else cfg["moe_intermediate_size"]
    check(hidden % 64 == 0 and ff % 64 == 0, f"{arch}: hidden {hidden} / expert ff {ff} not multiples of 64")
    check(cfg.get("tie_word_embeddings") is False, f"{arch}: tie_word_embeddings {cfg.get('tie_word_embeddings')}")
    if arch in ("qwen3_moe", "qwen2_moe"):
        check(cfg.get("decoder_sparse_step") == 1 and cfg.get("mlp_only_layers") == [],
              f"{arch}: not every layer sparse")
    print(f"  config: vocab {vocab} hidden {hidden} layers {layers} heads {cfg['num_attention_heads']}"
          f"/{cfg['num_key_value_heads']} experts {experts} top-{top_k} expert_ff {ff}"
          f" norm_topk_prob {cfg.get('norm_topk_prob', '(n/a)')}"
          + (f" shared_ff {cfg.get('shared_expert_intermediate_size')}" if arch == "qwen2_moe" else ""))

    st_path = os.path.join(d, "model.safetensors")
    if check(os.path.exists(st_path), f"{arch}: model.safetensors missing"):
        header, _ = read_safetensors(st_path)
        check(header.get("model.embed_tokens.weight", {}).get("shape") == [vocab, hidden], f"{arch}: embed shape")
        check(header.get("lm_head.weight", {}).get("shape") == [vocab, hidden], f"{arch}: lm_head shape")
        n_expert = 0
        for name, t in header.items():
            m = EXPERT_KEY.match(name)
            if not m:
                continue
            n_expert += 1
            want = [hidden, ff] if m.group(4) in ("w2", "down_proj") else [ff, hidden]
            check(t["shape"] == want, f"{arch}: {name} shape {t['shape']} != {want}")
        check(n_expert == layers * experts * 3, f"{arch}: {n_expert} expert tensors, want {layers * experts * 3}")
        print(f"  model.safetensors: {len(header)} tensors, {n_expert} expert tensors, "
              f"{os.path.getsize(st_path)} bytes")

    tokens = {}
    logits0 = {}
    for stem, variant in VARIANTS:
        jp = os.path.join(d, stem + ".json")
        if not check(os.path.exists(jp), f"{arch}: {stem}.json missing"):
            continue
        ref = json.load(open(jp))
        tag = f"{arch}/{stem}"
        check(ref.get("schema") == "coli-moe-reference/1", f"{tag}: schema {ref.get('schema')}")
        check(ref.get("arch") == arch and ref.get("variant") == variant, f"{tag}: arch/variant")
        check(ref.get("vocab_size") == vocab, f"{tag}: vocab_size {ref.get('vocab_size')} != {vocab}")
        p, g = ref["prompt_ids"], ref["generated_ids"]
        check(len(p) == PROMPT_LEN and len(g) == NEW_TOKENS, f"{tag}: {len(p)} prompt / {len(g)} generated ids")
        check(all(isinstance(t, int) and 0 <= t < vocab for t in p + g), f"{tag}: id out of range")
        pl, gl = ref["prompt_logits"], ref["generated_logits"]
        check(pl["shape"] == [len(p), vocab] and gl["shape"] == [len(g), vocab], f"{tag}: logits shapes")
        check(pl["offset_floats"] == 0 and gl["offset_floats"] == len(p) * vocab, f"{tag}: logits offsets")
        fp = os.path.join(d, ref["logits_file"])
        if not check(os.path.exists(fp), f"{tag}: {ref['logits_file']} missing"):
            continue
        vals, nbytes = read_f32(fp)
        if not check(nbytes == (len(p) + len(g)) * vocab * 4, f"{tag}: logits file {nbytes} bytes"):
            continue
        check(all(math.isfinite(v) for v in vals), f"{tag}: non-finite logits")
        rows = [vals[i * vocab:(i + 1) * vocab] for i in range(len(p) + len(g))]
        prow, grow = rows[:len(p)], rows[len(p):]
        check([argmax(r) for r in grow] == g, f"{tag}: argmax(generated_logits) != generated_ids")
        check([argmax(r) for r in prow] == ref["prompt_argmax"], f"{tag}: prompt_argmax")
        check(g[0] == argmax(prow[-1]), f"{tag}: first generated id != argmax of last prompt row")
        diff0 = max(abs(a - b) for a, b in zip(grow[0], prow[-1]))
        scale = max(abs(v) for v in prow[-1])
        check(diff0 <= 1e-4 * scale, f"{tag}: prefill row differs from prompt row by {diff0}")
        check(ref["prompt_logits_row0_head"] == prow[0][:8], f"{tag}: prompt head sample != binary")
        check(ref["generated_logits_row0_head"] == grow[0][:8], f"{tag}: generated head sample != binary")
        routing = ref.get("prompt_routing", [])
        check(len(routing) == layers, f"{tag}: prompt_routing has {len(routing)} layers")
        for r in routing:
            check(len(r["experts"]) == len(p) and all(len(e) == top_k and len(set(e)) == top_k
                                                       and all(0 <= x < experts for x in e) for e in r["experts"]),
                  f"{tag}: routing layer {r['layer']}")
        distinct = {tuple(sorted(e)) for r in routing for e in r["experts"]}
        tokens[variant] = g
        logits0[variant] = prow
        line = (f"  {stem}: tokens {g[:8]}... min top-2 margin prompt {ref['min_top2_margin_prompt']:.2e}"
                f" generated {ref['min_top2_margin_generated']:.2e}; decode-vs-nocache rel"
                f" {ref['decode_vs_nocache_max_rel_diff']:.1e}; {len(distinct)} distinct expert sets")
        if variant != "f32":
            check(ref.get("quantization") == variant, f"{tag}: quantization {ref.get('quantization')}")
            check(ref.get("quantized_tensor_count") == layers * experts * 3, f"{tag}: quantized_tensor_count")
            probe = ref["quant_probe"]
            row = probe["row0_weights"]
            check(len(row) == probe["cols"] == hidden, f"{tag}: probe row length")
            if variant == "q8_row":
                q, s, deq = quant_q8_row(row)
                check(q == probe["row0_q"], f"{tag}: probe q8 ints differ from the C++ algorithm")
                check(s == probe["scales_rows0to3"][0], f"{tag}: probe q8 scale {s} != {probe['scales_rows0to3'][0]}")
            else:
                q, bits, deq = quant_q4_g64(row)
                check(q == probe["row0_q"], f"{tag}: probe q4 ints differ from the C++ algorithm")
                groups = probe["cols"] // 64
                check(bits == probe["scale_bits_rows0to3"][:groups], f"{tag}: probe q4 half scales {bits}")
            check(deq == probe["row0_dequantized"], f"{tag}: probe de-quantised row differs")
            if "f32" in logits0:
                d_max = max(abs(a - b) for ra, rb in zip(prow, logits0["f32"]) for a, b in zip(ra, rb))
                same = sum(1 for a, b in zip(g, tokens["f32"]) if a == b)
                line += f"; |prompt logits - f32| max {d_max:.2e}; {same}/32 tokens as f32"
        print(line)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "models")
    root = os.path.normpath(root)
    total = 0
    for arch in ARCHS:
        check_arch(root, arch)
        ad = os.path.join(root, arch)
        if os.path.isdir(ad):
            total += sum(os.path.getsize(os.path.join(ad, f)) for f in os.listdir(ad))
    print(f"total size of the four fixture directories: {total} bytes")
    check(total <= 5 * 1024 * 1024, f"fixtures total {total} bytes > 5 MiB")
    if failures:
        print(f"{len(failures)} failed")
        return 1
    print("all reference fixture checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
