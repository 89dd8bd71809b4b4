#!/usr/bin/env python3
"""Writes a random-initialised OLMoE-architecture Hugging Face checkpoint
(config.json, model.safetensors in bf16) with GPT-2's tokenizer files
(vocab.json, merges.txt, tokenizer_config.json, read from llama.cpp's
ggml-vocab-gpt-2.gguf with gguf-py): the one checkpoint both engines convert
in llama_side_by_side.sh. With torch + transformers it is OlmoeForCausalLM's
own random init (save_pretrained); without them numpy writes the same tensor
names and shapes (random bf16 bits: random sign and mantissa at the exponent
of 2^-6, so |w| is in [0.0156, 0.031), std ~0.023 like OLMoE's 0.02 init;
norms 1), three times faster than drawing normals, and speed does not depend
on the values.

usage: make_hf_checkpoint.py OUT_DIR --shape olmoe-1b-7b|olmoe-4-layers|small --vocab-gguf GGUF --gguf-py DIR
"""
import argparse
import json
import struct
import sys
from pathlib import Path

SHAPES = {  # OlmoeConfig fields
    "olmoe-1b-7b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_experts=64,
                        num_experts_per_tok=8, intermediate_size=1024, vocab_size=50304),
    # The 7B shape's layers, only 4 of them: a 2-core machine converts and benches it in minutes.
    "olmoe-4-layers": dict(hidden_size=2048, num_hidden_layers=4, num_attention_heads=16, num_experts=64,
                           num_experts_per_tok=8, intermediate_size=1024, vocab_size=50304),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_experts=16,
                  num_experts_per_tok=4, intermediate_size=128, vocab_size=50304),
}


def config_of(shape):
    s = SHAPES[shape]
    return {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", **s,
            "num_key_value_heads": s["num_attention_heads"], "norm_topk_prob": False, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "max_position_embeddings": 8192, "tie_word_embeddings": False,
            "attention_bias": False, "clip_qkv": None, "hidden_act": "silu", "torch_dtype": "bfloat16",
            "bos_token_id": 50256, "eos_token_id": 50256, "pad_token_id": 50256}


def write_tokenizer(out, vocab_gguf, gguf_py):
    sys.path.insert(0, str(gguf_py))
    import gguf  # llama.cpp's own reader
    reader = gguf.GGUFReader(vocab_gguf)

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    eos = tokens[50256]
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": eos, "eos_token": eos, "unk_token": eos,
        "add_prefix_space": False, "model_max_length": 8192}, indent=2) + "\n")


def with_transformers(out, config):
    import torch
    from transformers import OlmoeConfig, OlmoeForCausalLM
    torch.manual_seed(20261201)
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    model = OlmoeForCausalLM(OlmoeConfig(**fields)).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="100GB")


def tensor_shapes(c):
    h, w, e = c["hidden_size"], c["intermediate_size"], c["num_experts"]
    yield "model.embed_tokens.weight", [c["vocab_size"], h]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", [h]
        yield p + "post_attention_layernorm.weight", [h]
        for name in ("q", "k", "v", "o"):
            yield p + f"self_attn.{name}_proj.weight", [h, h]
        yield p + "self_attn.q_norm.weight", [h]
        yield p + "self_attn.k_norm.weight", [h]
        yield p + "mlp.gate.weight", [e, h]
        for x in range(e):
            for name, shape in (("gate_proj", [w, h]), ("up_proj", [w, h]), ("down_proj", [h, w])):
                yield p + f"mlp.experts.{x}.{name}.weight", shape
    yield "model.norm.weight", [h]
    yield "lm_head.weight", [c["vocab_size"], h]


def with_numpy(out, config):
    import numpy as np
    rng = np.random.default_rng(20261201)
    shapes = list(tensor_shapes(config))
    header, offset = {}, 0
    for name, shape in shapes:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt", "source": "tools/bench/make_hf_checkpoint.py (numpy)"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    partial = out / "model.safetensors.partial"
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes:
            if name.endswith("norm.weight"):
                f.write(np.full(shape, 0x3F80, dtype=np.uint16).tobytes())  # 1.0
            else:  # random sign and mantissa, exponent of 2^-6: |w| in [0.0156, 0.031), std ~0.023
                bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
                f.write(((bits & np.uint16(0x807F)) | np.uint16(121 << 7)).tobytes())
    partial.rename(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="olmoe-1b-7b")
    ap.add_argument("--vocab-gguf", required=True)
    ap.add_argument("--gguf-py", required=True, help="LLAMA_SRC_DIR/gguf-py")
    ap.add_argument("--writer", choices=["auto", "transformers", "numpy"], default="auto")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = config_of(args.shape)
    # "auto" is numpy: transformers' own init of the 7B shape took 448 s on
    # the 16-core GPU machine (f32 first, 26.7 GB), numpy's writer seconds,
    # and it writes the per-expert tensor names of the published checkpoints.
    writer = "numpy" if args.writer == "auto" else args.writer
    (with_transformers if writer == "transformers" else with_numpy)(out, config)
    write_tokenizer(out, args.vocab_gguf, args.gguf_py)
    print(f"checkpoint {out}: shape {args.shape}, written by {writer}")


if __name__ == "__main__":
    main()
