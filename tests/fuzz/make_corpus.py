#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<harness>/): small
files copied from tests/fixtures and profiles/, plus small valid files of the
binary and JSON formats the fixtures hold only as large files. The plan seeds
(corpus/plan_fuzz) are coli-plan's output and are left alone (docs/fuzzing.md).
The output is checked in: run this only to change seeds."""
import hashlib, json, os, shutil, struct, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
MAX_SEED_BYTES = 32 * 1024


def put(harness, name, data):
    os.makedirs(os.path.join(CORPUS, harness), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_SEED_BYTES, (harness, name, len(data))
    with open(os.path.join(CORPUS, harness, name), "wb") as out:
        out.write(data)


def copy(harness, path, name=None):
    with open(os.path.join(ROOT, path), "rb") as f:
        put(harness, name or os.path.basename(path), f.read())


def safetensors(tensors):
    """tensors: (name, dtype, shape, bytes per element)"""
    header, offset = {}, 0
    for name, dtype, shape, size in tensors:
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count * size]}
        offset += count * size
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode: every byte as a printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def small_vocabulary():
    tokens = byte_level_alphabet()
    merges = [("H", "e"), ("l", "l"), ("He", "ll"), ("Hell", "o"), ("\u0120", "w"), ("o", "r"), ("\u0120w", "or")]
    tokens += [a + b for a, b in merges]
    return tokens, merges


def tokenizer_json(qwen):
    tokens, merges = small_vocabulary()
    model = {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)},
             "merges": [[a, b] for a, b in merges] if qwen else [a + " " + b for a, b in merges]}
    root = {"version": "1.0", "model": model,
            "added_tokens": [{"id": len(tokens), "content": "<|endoftext|>", "special": True}]}
    if qwen:
        root["normalizer"] = {"type": "NFC"}
        root["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    else:
        root["normalizer"] = None
        root["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    return json.dumps(root, ensure_ascii=False)


def gguf(pre):
    def string(text):
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    tokens, merges = small_vocabulary()
    tokens = tokens + ["<|endoftext|>"]
    kvs = [("tokenizer.ggml.model", struct.pack("<I", 8) + string("gpt2")),
           ("tokenizer.ggml.pre", struct.pack("<I", 8) + string(pre)),
           ("tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(string(t) for t in tokens)),
           ("tokenizer.ggml.token_type", struct.pack("<IIQ", 9, 5, len(tokens)) +
            b"".join(struct.pack("<i", 3 if t.startswith("<|") else 1) for t in tokens)),
           ("tokenizer.ggml.merges", struct.pack("<IIQ", 9, 8, len(merges)) +
            b"".join(string(a + " " + b) for a, b in merges)),
           ("tokenizer.ggml.eos_token_id", struct.pack("<II", 4, len(tokens) - 1)),
           ("general.alignment", struct.pack("<II", 4, 32))]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, value in kvs:
        out += string(key) + value
    return out


def usage_history(layers, experts, top_k, version=1):
    body = "coli-usage-history\nformat_version %d\nn_layers %d\nn_experts %d\ntop_k %d\n" % (
        version, layers, experts, top_k)
    body += "model fnv1a64:00000000deadbeef\ntotal_tokens 12.5\n"
    for layer in range(layers):
        body += "layer %d %s\n" % (layer, " ".join(str(layer + e * 0.5) for e in range(experts)))
    for tag in ("reuse", "decode_reuse")[:max(0, version - 1)]:
        for layer in range(layers):
            body += "%s %d %s\n" % (tag, layer, " ".join(str(d % 3) for d in range(experts + 1)))
    if version >= 4:  # a 2-token prompt and one generated token
        body += "trace_passes 2 2 1\n"
        if version >= 8:  # the prompt began the context, the generated token followed it
            body += "trace_starts 2 0 2\n"
        for layer in range(layers):
            body += "trace %d %s\n" % (layer, " ".join(str((layer + i) % experts) for i in range(3 * top_k)))
    if version == 5:  # read rounds: 3 of one read, one of three
        body += "read_rounds 8192 4 3 3 0.006 0 0 1 0.0045\n"
    if version == 6:  # the same beside 2 compute threads, and one read beside 1
        body += "read_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045\nread_rounds 1 8192 4 1 3 0.0018\n"
    if version >= 9:  # and two that waited, and a generated token's one-read round apart
        body += "read_rounds 2 8192 4 3 3 0.006 0 0 1 0.0045 2 5e-05 1 1 0.001\nread_rounds 1 8192 4 1 3 0.0018 0 0 0\n"
    digest = 0xCBF29CE484222325
    for byte in body.encode():
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return body + "checksum fnv1a64:%016x\n" % digest


def main():
    for harness in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        # plans are written by coli-plan, the container by make_container_seed (docs/fuzzing.md)
        # and the request, quality and saved-logits seeds are written by hand
        if harness not in ("plan_fuzz", "container_fuzz", "openai_request_fuzz", "quality_fuzz", "saved_logits_fuzz"):
            shutil.rmtree(os.path.join(CORPUS, harness))
    for name in sorted(os.listdir(os.path.join(ROOT, "profiles"))):
        if name.endswith(".toml"):
            copy("profile_fuzz", os.path.join("profiles", name))
    for gpu in sorted(os.listdir(os.path.join(ROOT, "tests/fixtures/gpus"))):
        if not os.path.isdir(os.path.join(ROOT, "tests/fixtures/gpus", gpu)):
            continue  # the script that made them
        copy("gpu_record_fuzz", os.path.join("tests/fixtures/gpus", gpu, "gpus.toml"), gpu + ".toml")
    for name in sorted(os.listdir(os.path.join(ROOT, "tests/fixtures/model-configs"))):
        if not name.endswith(".json"):
            continue
        # The real configs, shrunk to 4 layers of 8 experts: each input is laid
        # out tensor by tensor, and 61 x 256 experts would slow every run.
        with open(os.path.join(ROOT, "tests/fixtures/model-configs", name)) as f:
            config = json.load(f)
        config["num_hidden_layers"] = min(config["num_hidden_layers"], 4)
        for field in ("num_experts", "num_local_experts", "n_routed_experts"):
            if field in config:
                config[field] = min(config[field], 8)
                config["num_experts_per_tok"] = min(config["num_experts_per_tok"], config[field])
        put("config_json_fuzz", name, json.dumps(config, indent=2))
    for model in sorted(os.listdir(os.path.join(ROOT, "tests/fixtures/models"))):
        if not os.path.isdir(os.path.join(ROOT, "tests/fixtures/models", model)):
            continue
        copy("config_json_fuzz", os.path.join("tests/fixtures/models", model, "config.json"), model + ".json")
    put("safetensors_header_fuzz", "two-tensors.safetensors",
        safetensors([("model.norm.weight", "F32", [4], 4), ("model.embed_tokens.weight", "BF16", [3, 4], 2)]))
    put("safetensors_header_fuzz", "dtypes.safetensors",
        safetensors([("a", "F16", [2, 2], 2), ("b", "I64", [1], 8), ("c", "U8", [0], 1), ("d", "F64", [], 8)]))
    put("shard_index_fuzz", "index.json", json.dumps(
        {"metadata": {"total_size": 12}, "weight_map": {"a": "model-00001-of-00001.safetensors",
                                                        "b": "model-00001-of-00001.safetensors"}}, indent=2))
    put("tokenizer_json_fuzz", "gpt2-style.json", tokenizer_json(qwen=False))
    put("tokenizer_json_fuzz", "qwen2-style.json", tokenizer_json(qwen=True))
    put("gguf_fuzz", "gpt2.gguf", gguf("gpt-2"))
    put("gguf_fuzz", "qwen2.gguf", gguf("qwen2"))
    put("usage_history_fuzz", "3x4.coli_usage", usage_history(3, 4, 2))
    put("usage_history_fuzz", "3x4-v4.coli_usage", usage_history(3, 4, 2, 4))
    put("usage_history_fuzz", "3x4-v5.coli_usage", usage_history(3, 4, 2, 5))
    put("usage_history_fuzz", "3x4-v6.coli_usage", usage_history(3, 4, 2, 6))
    put("usage_history_fuzz", "3x4-v9.coli_usage", usage_history(3, 4, 2, 9))


if __name__ == "__main__":
    sys.exit(main())
