#!/usr/bin/env python3
"""Writes the bundled tiny demo model: a random-initialised OLMoE-architecture
checkpoint (config.json + model.safetensors, bf16) whose vocabulary is GPT-2's,
so `coli run --tokenizer tests/fixtures/tokenizer/ggml-vocab-gpt-2.gguf` turns
text into tokens and back. Python standard library only; deterministic.

usage: tools/reference/make_tiny_demo_model.py OUT_DIR
"""
import json
import random
import struct
import sys
from pathlib import Path

VOCAB = 50257  # GPT-2's vocabulary (ggml-vocab-gpt-2.gguf)
HIDDEN, LAYERS, HEADS, EXPERTS, TOP_K, WIDTH = 64, 2, 4, 8, 2, 64
HEAD_DIM = HIDDEN // HEADS


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        out += struct.pack("<H", (bits >> 16) & 0xFFFF)
    return bytes(out)


def tensors(rng):
    def normal(n, std):
        return [rng.gauss(0.0, std) for _ in range(n)]

    def ones_ish(n):
        return [1.0 + rng.gauss(0.0, 0.05) for _ in range(n)]

    yield "model.embed_tokens.weight", [VOCAB, HIDDEN], normal(VOCAB * HIDDEN, 0.5)
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        yield p + "input_layernorm.weight", [HIDDEN], ones_ish(HIDDEN)
        yield p + "post_attention_layernorm.weight", [HIDDEN], ones_ish(HIDDEN)
        for name in ("q", "k", "v", "o"):
            yield p + f"self_attn.{name}_proj.weight", [HIDDEN, HIDDEN], normal(HIDDEN * HIDDEN, 0.1)
        yield p + "self_attn.q_norm.weight", [HIDDEN], ones_ish(HIDDEN)
        yield p + "self_attn.k_norm.weight", [HIDDEN], ones_ish(HIDDEN)
        yield p + "mlp.gate.weight", [EXPERTS, HIDDEN], normal(EXPERTS * HIDDEN, 0.5)
        for e in range(EXPERTS):
            q = p + f"mlp.experts.{e}."
            yield q + "gate_proj.weight", [WIDTH, HIDDEN], normal(WIDTH * HIDDEN, 0.1)
            yield q + "up_proj.weight", [WIDTH, HIDDEN], normal(WIDTH * HIDDEN, 0.1)
            yield q + "down_proj.weight", [HIDDEN, WIDTH], normal(HIDDEN * WIDTH, 0.1)
    yield "model.norm.weight", [HIDDEN], ones_ish(HIDDEN)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261129)
    header, blobs, offset = {}, [], 0
    for name, shape, values in tensors(rng):
        data = bf16_bytes(values)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt", "source": "tools/reference/make_tiny_demo_model.py"}
    header_text = json.dumps(header, separators=(",", ":")).encode()
    header_text += b" " * (-len(header_text) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header_text)))
        f.write(header_text)
        for blob in blobs:
            f.write(blob)
    config = {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": VOCAB,
        "hidden_size": HIDDEN, "intermediate_size": WIDTH, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "num_experts": EXPERTS,
        "num_experts_per_tok": TOP_K, "norm_topk_prob": False, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "max_position_embeddings": 2048, "tie_word_embeddings": True,
        "attention_bias": False, "clip_qkv": None, "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
