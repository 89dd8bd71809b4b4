#!/usr/bin/env python3
"""The fallback of llama_side_by_side.sh where llama.cpp's convert_hf_to_gguf.py
cannot run (it needs torch and transformers): an OLMoE Hugging Face checkpoint
(make_hf_checkpoint.py's) to a bf16 GGUF with llama.cpp's own gguf-py. What
llama.cpp decides comes from llama.cpp: tensor names from gguf.TensorNameMap
for MODEL_ARCH.OLMOE, the experts stacked per layer as OlmoeModel does, the
hyperparameters its TextModel writes (OLMoE's rms eps 1e-5), merges and
special tokens through gguf.SpecialVocab, the vocabulary padded with [PADn]
UNUSED tokens like get_vocab_base. One input is not llama.cpp's: the
pre-tokenizer name, which convert_hf_to_gguf.py finds by hashing
transformers' tokenization of a test text; here it is read from llama.cpp's
ggml-vocab-gpt-2.gguf (its tokenizer.ggml.pre), the file the tokenizer came from.

usage: gguf_from_hf.py HF_DIR OUT.gguf --gguf-py LLAMA_SRC_DIR/gguf-py --vocab-gguf ggml-vocab-gpt-2.gguf
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np


def safetensors_index(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    return header, data


def bf16_of(header, data, name):
    entry = header[name]
    if entry["dtype"] != "BF16":
        sys.exit(f"gguf_from_hf: {name} is {entry['dtype']}, this fallback reads BF16 checkpoints only")
    begin, end = entry["data_offsets"]
    return data[begin:end].view(np.uint16).reshape(entry["shape"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--gguf-py", required=True)
    ap.add_argument("--vocab-gguf", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf

    hf = Path(args.hf_dir)
    c = json.loads((hf / "config.json").read_text())
    if c.get("model_type") != "olmoe":
        sys.exit(f"gguf_from_hf: {hf}/config.json: model_type {c.get('model_type')!r}; this fallback converts olmoe only")
    header, data = safetensors_index(hf / "model.safetensors")
    layers, experts = c["num_hidden_layers"], c["num_experts"]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.OLMOE, layers)

    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.OLMOE])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(hf.name)
    w.add_block_count(layers)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(1e-5)  # OlmoeModel.set_gguf_parameters
    w.add_expert_count(experts)
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

    vocab = gguf.GGUFReader(args.vocab_gguf)
    field = lambda key: [bytes(vocab.fields[key].parts[i]).decode("utf-8") for i in vocab.fields[key].data]
    tokens = field("tokenizer.ggml.tokens")
    types = [int(vocab.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in vocab.fields["tokenizer.ggml.token_type"].data]
    tokens += [f"[PAD{i}]" for i in range(len(tokens), c["vocab_size"])]
    types += [gguf.TokenType.UNUSED] * (c["vocab_size"] - len(types))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(field("tokenizer.ggml.pre")[0])
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(hf, load_merges=True).add_to_gguf(w)

    # (gguf name, numpy shape, producer of the bf16 array): llama.cpp's names for every tensor.
    def mapped(hf_name):
        name = names.get_name(hf_name, try_suffixes=(".weight",))
        if name is None:
            sys.exit(f"gguf_from_hf: llama.cpp's OLMoE map has no name for {hf_name}")
        return name
    plan = [(mapped(n), e["shape"], lambda n=n: bf16_of(header, data, n)) for n, e in header.items() if ".mlp.experts." not in n]
    for l in range(layers):
        for proj in ("gate_proj", "up_proj", "down_proj"):  # stacked per layer, as OlmoeModel.modify_tensors does
            one = f"model.layers.{l}.mlp.experts.{{}}.{proj}.weight"
            stack = lambda one=one: np.stack([bf16_of(header, data, one.format(x)) for x in range(experts)])
            plan.append((mapped(f"model.layers.{l}.mlp.experts.{proj}.weight"), [experts] + header[one.format(0)]["shape"], stack))
    # Kept in f32 as convert_hf_to_gguf.py keeps them: 1-D tensors, norms, the router (FFN_GATE_INP).
    f32 = lambda name, shape: len(shape) <= 1 or name.endswith("_norm.weight") or ".ffn_gate_inp." in name
    for name, shape, _ in plan:
        if f32(name, shape):
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), 2 * int(np.prod(shape)), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, produce in plan:
        bits = np.ascontiguousarray(produce())
        w.write_tensor_data((bits.astype(np.uint32) << 16).view(np.float32) if f32(name, shape) else bits)
    w.close()
    print(f"wrote {args.out}: {len(plan)} tensors, names from gguf.TensorNameMap(OLMOE)")


if __name__ == "__main__":
    main()
