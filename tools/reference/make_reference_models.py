#!/usr/bin/env python3
"""Builds the tiny random MoE models and Hugging Face transformers reference
outputs under tests/fixtures/models/<arch>/ (see tests/fixtures/models/SOURCE.md).

Runs only where torch and transformers are installed (the GPU machine); the
models themselves run on the CPU in float32 with eager attention and eager
experts, so the results do not depend on the accelerator.

For each architecture (qwen3_moe, olmoe, mixtral, qwen2_moe) it
  1. builds a tiny config from scratch and a model with seeded random weights,
  2. save_pretrained()s it (config.json + model.safetensors) and reloads it
     with from_pretrained(), checking the reload gives the same logits,
  3. records, for the reloaded f32 model: the logits of every prompt position,
     32 greedy tokens from generate(do_sample=False, use_cache=True) and the
     raw logits of each generated step (reference.json + reference.f32),
  4. quantises the routed experts' gate/up/down weights of the saved
     checkpoint with coli's q8_row and q4_g64 layouts
     (kernels/reference/gemv_reference.cpp), dequantises them to float32,
     loads that checkpoint with from_pretrained() and records the same
     outputs (reference_q8.json/.f32, reference_q4.json/.f32).

Usage: make_reference_models.py --out DIR [--arch NAME ...]
Writes DIR/<arch>/... and DIR/_meta/ (versions, class names, the router /
experts source code of the installed transformers, a log).
"""
import argparse
import inspect
import json
import os
import platform
import re
import shutil
import struct
import sys
import tempfile
import time

import torch
import transformers
from safetensors.torch import load_file, save_file

from cpp_float import f32, float_to_half

VOCAB = 256
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16  # = HIDDEN / HEADS, so no config needs an explicit head_dim
EXPERTS = 8
TOP_K = 2
EXPERT_FF = 64  # expert intermediate size (multiple of 64 for q4_g64 on down_proj)
SHARED_FF = 128  # qwen2_moe shared expert intermediate size
ROPE_THETA = 10000.0
RMS_EPS = 1e-6
MAX_POS = 256
NEW_TOKENS = 32

# Fixed prompt, spread over the vocabulary. Same for every architecture.
PROMPT_IDS = [1, 17, 42, 99, 128, 7, 201, 255, 63, 150, 88, 230]

WEIGHT_STD = 0.08
ROUTER_STD = 0.5
SHARED_GATE_STD = 0.2
NORM_JITTER = 0.1  # RMSNorm weights = 1 + N(0, NORM_JITTER)

ARCHS = {
    "qwen3_moe": dict(seed=1001),
    "olmoe": dict(seed=1002),
    "mixtral": dict(seed=1003),
    "qwen2_moe": dict(seed=1004),
}

EXPERT_KEY = re.compile(r"\.experts\.(\d+)\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.weight$")
FUSED_KEY = re.compile(r"^(.*)\.(mlp|block_sparse_moe)\.experts\.(gate_up_proj|down_proj)$")

LOG_LINES = []


def log(*args):
    line = " ".join(str(a) for a in args)
    LOG_LINES.append(line)
    print(line, flush=True)


def rope_kwargs():
    return {"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}}


def common_kwargs():
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        hidden_act="silu",
        max_position_embeddings=MAX_POS,
        rms_norm_eps=RMS_EPS,
        tie_word_embeddings=False,
        use_cache=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    kw.update(rope_kwargs())
    return kw


def make_config(arch):
    kw = common_kwargs()
    if arch == "qwen3_moe":
        cls = transformers.Qwen3MoeConfig
        kw.update(
            intermediate_size=128,  # dense MLP size; unused since every layer is sparse
            moe_intermediate_size=EXPERT_FF,
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            attention_bias=False,
            use_sliding_window=False,
        )
    elif arch == "olmoe":
        cls = transformers.OlmoeConfig
        # Like the real OLMoE-1B-7B: no GQA (num_key_value_heads left at its
        # default, = num_attention_heads). GQA is covered by the other three.
        kw.pop("num_key_value_heads")
        kw.update(
            intermediate_size=EXPERT_FF,  # OLMoE's expert size is intermediate_size
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            norm_topk_prob=False,
            attention_bias=False,
            clip_qkv=None,
        )
    elif arch == "mixtral":
        cls = transformers.MixtralConfig
        kw.update(
            intermediate_size=EXPERT_FF,  # Mixtral's expert size is intermediate_size
            num_local_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            sliding_window=None,
            router_jitter_noise=0.0,
        )
    elif arch == "qwen2_moe":
        cls = transformers.Qwen2MoeConfig
        kw.update(
            intermediate_size=128,  # dense MLP size; unused since every layer is sparse
            moe_intermediate_size=EXPERT_FF,
            shared_expert_intermediate_size=SHARED_FF,
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            use_sliding_window=False,
        )
    else:
        raise ValueError(arch)
    try:
        config = cls(**kw)
    except Exception as e:  # noqa: BLE001 - older configs: rope_theta instead of rope_parameters
        log(f"[{arch}] config with rope_parameters failed ({e}); retrying with rope_theta")
        kw.pop("rope_parameters")
        kw["rope_theta"] = ROPE_THETA
        config = cls(**kw)
    return config


def check_config(arch, config):
    d = config.to_dict()
    assert d["model_type"] == arch, d["model_type"]
    assert config.vocab_size == VOCAB and config.hidden_size == HIDDEN
    assert config.num_hidden_layers == LAYERS
    assert config.num_attention_heads == HEADS
    assert config.num_key_value_heads == (HEADS if arch == "olmoe" else KV_HEADS), config.num_key_value_heads
    assert config.num_experts_per_tok == TOP_K
    if getattr(config, "head_dim", None) not in (None, HEAD_DIM):
        log(f"WARNING [{arch}] head_dim = {config.head_dim}")
    rp = getattr(config, "rope_parameters", None)
    theta = (rp or {}).get("rope_theta", getattr(config, "rope_theta", None))
    if theta != ROPE_THETA:
        log(f"WARNING [{arch}] rope theta {theta!r} (rope_parameters {rp!r})")
    if arch in ("qwen3_moe", "qwen2_moe"):
        assert config.decoder_sparse_step == 1 and list(config.mlp_only_layers) == []


def init_weights(model, seed):
    """Deterministic init, by sorted parameter name, from one generator."""
    gen = torch.Generator().manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if re.search(r"norm\.weight$", name) or name.endswith("layernorm.weight"):
                kind, val = "norm", 1.0 + NORM_JITTER * torch.randn(p.shape, generator=gen)
            elif re.search(r"\.(mlp|block_sparse_moe)\.gate\.weight$", name):
                kind, val = "router", ROUTER_STD * torch.randn(p.shape, generator=gen)
            elif name.endswith("shared_expert_gate.weight"):
                kind, val = "shared_gate", SHARED_GATE_STD * torch.randn(p.shape, generator=gen)
            else:
                kind, val = "normal", WEIGHT_STD * torch.randn(p.shape, generator=gen)
            p.copy_(val.to(p.dtype))
            kinds[name] = kind
    return kinds


def set_eager_experts(model):
    impl = None
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:  # noqa: BLE001
            log("  set_experts_implementation('eager') failed:", repr(e))
    impl = getattr(model.config, "_experts_implementation", None)
    return impl


def load_model(path):
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    model.to("cpu")
    impl = set_eager_experts(model)
    return model, impl


# ---------------------------------------------------------------- checkpoints


def canonical_expert_names(arch, prefix, e):
    """Original (per-expert) checkpoint names for gate, up, down of expert e."""
    if arch == "mixtral":
        base = f"{prefix}.block_sparse_moe.experts.{e}"
        return f"{base}.w1.weight", f"{base}.w3.weight", f"{base}.w2.weight"
    base = f"{prefix}.mlp.experts.{e}"
    return f"{base}.gate_proj.weight", f"{base}.up_proj.weight", f"{base}.down_proj.weight"


def canonicalize_checkpoint(arch, path):
    """If save_pretrained left fused expert tensors, split them into the
    original per-expert layout (what published checkpoints use)."""
    sd = load_file(path)
    fused = [k for k in sd if FUSED_KEY.match(k)]
    if not fused:
        return False
    log(f"  [{arch}] save_pretrained wrote fused expert tensors; splitting them per expert")
    out = {}
    for k, v in sd.items():
        m = FUSED_KEY.match(k)
        if not m:
            if arch == "mixtral" and ".mlp.gate.weight" in k:
                k = k.replace(".mlp.gate.weight", ".block_sparse_moe.gate.weight")
            out[k] = v
            continue
        prefix, _, which = m.groups()
        for e in range(v.shape[0]):
            g, u, d = canonical_expert_names(arch, prefix, e)
            if which == "gate_up_proj":
                assert v.shape == (EXPERTS, 2 * EXPERT_FF, HIDDEN), v.shape
                out[g] = v[e, :EXPERT_FF].contiguous()
                out[u] = v[e, EXPERT_FF:].contiguous()
            else:
                assert v.shape == (EXPERTS, HIDDEN, EXPERT_FF), v.shape
                out[d] = v[e].contiguous()
    save_file(out, path, metadata={"format": "pt"})
    return True


# --------------------------------------------------------------- quantisation
# Exactly kernels/reference/gemv_reference.cpp, in float32 torch ops.


def quantize_q8_row(w):
    """w [rows, cols] f32 -> (int8 [rows, cols], f32 scales [rows])."""
    max_abs = w.abs().amax(dim=1)
    scale = torch.where(max_abs > 0, max_abs / 127.0, torch.ones_like(max_abs))
    q = torch.clamp(torch.round(w / scale[:, None]), -127.0, 127.0)
    return q.to(torch.int8), scale


def dequantize_q8_row(q, scale):
    return q.to(torch.float32) * scale[:, None]


def quantize_q4_g64(w):
    """w [rows, cols] f32 -> (int values -8..7 [rows, cols], f16 scales [rows, cols/64])."""
    rows, cols = w.shape
    assert cols % 64 == 0, cols
    g = w.reshape(rows, cols // 64, 64)
    max_abs = g.abs().amax(dim=2)
    s = torch.where(max_abs > 0, max_abs / 7.0, torch.ones_like(max_abs))
    half = s.to(torch.float16)
    scale = half.to(torch.float32)
    q = torch.clamp(torch.round(g / scale[..., None]), -8.0, 7.0)
    return q.to(torch.int8).reshape(rows, cols), half


def dequantize_q4_g64(q, half):
    rows, cols = q.shape
    g = q.to(torch.float32).reshape(rows, cols // 64, 64) * half.to(torch.float32)[..., None]
    return g.reshape(rows, cols)


def cross_check_q4_scales(w, half):
    """torch's f32->f16 conversion must equal the C++ float_to_half."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // 64, 64)
    s = torch.where(g.abs().amax(dim=2) > 0, g.abs().amax(dim=2) / 7.0, torch.ones(rows, cols // 64))
    bits = half.view(torch.int16).to(torch.int32) & 0xFFFF
    for sv, hb in zip(s.flatten().tolist(), bits.flatten().tolist()):
        want = float_to_half(f32(sv))
        assert want == hb, (sv, want, hb)


def quantize_checkpoint(arch, src_path, dst_path, mode):
    sd = load_file(src_path)
    out = {}
    names = []
    stats = {"sum_q": 0, "sum_q2": 0, "max_abs_err": 0.0, "sum_scale": 0.0, "sum_scale_bits": 0}
    probe = None
    for k in sorted(sd):
        v = sd[k]
        if not EXPERT_KEY.search(k):
            out[k] = v
            continue
        assert v.dtype == torch.float32 and v.dim() == 2, (k, v.dtype, v.shape)
        names.append(k)
        if mode == "q8_row":
            q, scale = quantize_q8_row(v)
            deq = dequantize_q8_row(q, scale)
            stats["sum_scale"] += float(scale.double().sum())
        else:
            q, half = quantize_q4_g64(v)
            cross_check_q4_scales(v, half)
            deq = dequantize_q4_g64(q, half)
            stats["sum_scale_bits"] += int((half.view(torch.int16).to(torch.int64) & 0xFFFF).sum())
        qi = q.to(torch.int64)
        stats["sum_q"] += int(qi.sum())
        stats["sum_q2"] += int((qi * qi).sum())
        stats["max_abs_err"] = max(stats["max_abs_err"], float((deq - v).abs().max()))
        out[k] = deq.contiguous()
        if probe is None and ".layers.0." in k and ".experts.0." in k and (
            k.endswith("gate_proj.weight") or k.endswith("w1.weight")
        ):
            probe = {"tensor": k, "rows": int(v.shape[0]), "cols": int(v.shape[1])}
            probe["row0_weights"] = [float(x) for x in v[0].tolist()]
            probe["row0_q"] = [int(x) for x in q[0].tolist()]
            if mode == "q8_row":
                probe["scales_rows0to3"] = [float(x) for x in scale[:4].tolist()]
            else:
                probe["scale_bits_rows0to3"] = [
                    int(x) & 0xFFFF for x in half[:4].view(torch.int16).flatten().tolist()
                ]
            probe["row0_dequantized"] = [float(x) for x in deq[0].tolist()]
    save_file(out, dst_path, metadata={"format": "pt"})
    return names, stats, probe


# ------------------------------------------------------------------ reference


def router_hooks(model, store):
    handles = []
    for name, mod in model.named_modules():
        if re.search(r"layers\.(\d+)\.(mlp|block_sparse_moe)\.gate$", name):
            layer = int(re.search(r"layers\.(\d+)\.", name).group(1))

            def hook(_m, _inp, out, layer=layer):
                if layer in store:
                    return
                entry = {}
                if isinstance(out, tuple) and len(out) == 3:
                    logits, scores, idx = out
                    entry["experts"] = idx.tolist()
                    if scores.shape == idx.shape:
                        entry["weights"] = [[float(x) for x in r] for r in scores.tolist()]
                else:
                    logits = out[0] if isinstance(out, tuple) else out
                    entry["experts"] = torch.topk(logits, TOP_K, dim=-1).indices.tolist()
                entry["router_logits"] = [[float(x) for x in r] for r in logits.reshape(-1, EXPERTS).tolist()]
                store[layer] = entry

            handles.append(mod.register_forward_hook(hook))
    return handles


def margins(logits):
    top2 = torch.topk(logits, 2, dim=-1).values
    return (top2[..., 0] - top2[..., 1]).tolist()


def run_reference(model, variant, out_dir, stem, extra):
    prompt = torch.tensor([PROMPT_IDS], dtype=torch.long)
    routing = {}
    handles = router_hooks(model, routing)
    with torch.no_grad():
        prompt_logits = model(input_ids=prompt, use_cache=False).logits[0].float()
    for h in handles:
        h.remove()
    assert prompt_logits.shape == (len(PROMPT_IDS), VOCAB), prompt_logits.shape

    t0 = time.time()
    with torch.no_grad():
        gen = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
            eos_token_id=None,
            pad_token_id=0,
        )
    gen_time = time.time() - t0
    seq = gen.sequences[0].tolist()
    assert seq[: len(PROMPT_IDS)] == PROMPT_IDS
    new_ids = seq[len(PROMPT_IDS):]
    assert len(new_ids) == NEW_TOKENS, len(new_ids)
    gen_logits = torch.cat([l.float() for l in gen.logits], dim=0)
    assert gen_logits.shape == (NEW_TOKENS, VOCAB), gen_logits.shape
    assert gen_logits.argmax(dim=-1).tolist() == new_ids

    # KV-cache decode vs one no-cache forward over prompt + generated tokens.
    full = torch.tensor([seq[:-1]], dtype=torch.long)
    with torch.no_grad():
        full_logits = model(input_ids=full, use_cache=False).logits[0].float()
    nocache = full_logits[len(PROMPT_IDS) - 1:]
    decode_diff = float((nocache - gen_logits).abs().max())
    prefill_diff = float((full_logits[: len(PROMPT_IDS)] - prompt_logits).abs().max())
    rel = decode_diff / float(gen_logits.abs().max())

    flat = prompt_logits.flatten().tolist() + gen_logits.flatten().tolist()
    with open(os.path.join(out_dir, stem + ".f32"), "wb") as f:
        f.write(struct.pack("<%df" % len(flat), *flat))

    ref = {
        "schema": "coli-moe-reference/1",
        "arch": extra["arch"],
        "variant": variant,
        "model_class": type(model).__name__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "seed": extra["seed"],
        "vocab_size": VOCAB,
        "prompt_ids": PROMPT_IDS,
        "generated_ids": new_ids,
        "generate": {
            "do_sample": False,
            "max_new_tokens": NEW_TOKENS,
            "use_cache": True,
            "eos_token_id": None,
            "logits": "raw model logits (GenerateOutput.logits), no processors",
        },
        "logits_file": stem + ".f32",
        "logits_encoding": "float32 little-endian, row-major",
        "prompt_logits": {"offset_floats": 0, "shape": [len(PROMPT_IDS), VOCAB],
                          "meaning": "row i = logits after prompt_ids[0..i] (one no-cache forward)"},
        "generated_logits": {"offset_floats": len(PROMPT_IDS) * VOCAB, "shape": [NEW_TOKENS, VOCAB],
                             "meaning": "row j = logits from which generated_ids[j] was chosen "
                                        "(row 0: prefill; rows 1..: one-token KV-cache decode steps)"},
        "prompt_argmax": prompt_logits.argmax(dim=-1).tolist(),
        "prompt_logits_row0_head": [float(x) for x in prompt_logits[0, :8].tolist()],
        "generated_logits_row0_head": [float(x) for x in gen_logits[0, :8].tolist()],
        "min_top2_margin_prompt": min(margins(prompt_logits)),
        "min_top2_margin_generated": min(margins(gen_logits)),
        "top2_margin_generated": margins(gen_logits),
        "decode_vs_nocache_max_abs_diff": decode_diff,
        "decode_vs_nocache_max_rel_diff": rel,
        "prefill_vs_longer_nocache_max_abs_diff": prefill_diff,
        "prompt_routing": [
            dict(layer=l, **routing[l]) for l in sorted(routing)
        ],
        "experts_implementation": extra.get("experts_implementation"),
        "attn_implementation": "eager",
        "device": "cpu",
        "dtype": "float32",
    }
    for k in ("quantization", "quantized_tensors", "quantized_tensor_count", "quant_stats", "quant_probe"):
        if k in extra:
            ref[k] = extra[k]
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    log(f"  [{extra['arch']}/{variant}] tokens={new_ids}")
    log(f"  [{extra['arch']}/{variant}] min margin prompt={ref['min_top2_margin_prompt']:.3e} "
        f"gen={ref['min_top2_margin_generated']:.3e} decode-vs-nocache={decode_diff:.3e} (rel {rel:.3e}) "
        f"generate {gen_time:.2f}s")
    return prompt_logits, gen_logits, new_ids


def class_names(model):
    layer = model.model.layers[0]
    moe = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
    names = {
        "model": type(model).__name__,
        "decoder_layer": type(layer).__name__,
        "attention": type(layer.self_attn).__name__,
        "moe_block": type(moe).__name__,
    }
    for attr in ("gate", "experts", "shared_expert", "shared_expert_gate"):
        sub = getattr(moe, attr, None)
        if sub is not None:
            names[attr] = type(sub).__name__
    return names, moe


def dump_sources(moe, path):
    chunks = []
    for obj in [type(moe)] + [type(getattr(moe, a)) for a in ("gate", "experts") if hasattr(moe, a)]:
        try:
            chunks.append(f"# ---- {obj.__module__}.{obj.__qualname__}\n" + inspect.getsource(obj))
        except (OSError, TypeError) as e:
            chunks.append(f"# ---- {obj}: source unavailable: {e}\n")
    with open(path, "a") as f:
        f.write("\n".join(chunks) + "\n")


def build_arch(arch, out_root, meta_dir):
    seed = ARCHS[arch]["seed"]
    out_dir = os.path.join(out_root, arch)
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    torch.manual_seed(seed)
    config = make_config(arch)
    check_config(arch, config)
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", torch_dtype=torch.float32)
    model.float()
    model.eval()
    kinds = init_weights(model, seed)
    impl = set_eager_experts(model)
    names, moe = class_names(model)
    log(f"[{arch}] classes {json.dumps(names)} experts_implementation={impl}")
    log(f"[{arch}] in-memory params: " + ", ".join(
        f"{n}{list(p.shape)}" for n, p in model.named_parameters() if ".layers.0." in n or ".layers." not in n))
    log(f"[{arch}] init kinds: " + json.dumps({k: sum(1 for v in kinds.values() if v == k)
                                              for k in sorted(set(kinds.values()))}))
    dump_sources(moe, os.path.join(meta_dir, f"{arch}_moe_source.py.txt"))
    dump_sources(model.model.layers[0].self_attn, os.path.join(meta_dir, f"{arch}_moe_source.py.txt"))

    prompt = torch.tensor([PROMPT_IDS], dtype=torch.long)
    with torch.no_grad():
        mem_logits = model(input_ids=prompt, use_cache=False).logits[0].float()

    try:
        model.save_pretrained(out_dir, safe_serialization=True)
    except TypeError:  # safetensors is the only format in newer versions
        model.save_pretrained(out_dir)
    for extra_file in os.listdir(out_dir):
        if extra_file not in ("config.json", "model.safetensors"):
            log(f"  [{arch}] removing {extra_file} written by save_pretrained")
            os.remove(os.path.join(out_dir, extra_file))
    st_path = os.path.join(out_dir, "model.safetensors")
    assert os.path.exists(st_path), os.listdir(out_dir)
    split = canonicalize_checkpoint(arch, st_path)
    keys = sorted(load_file(st_path).keys())
    log(f"[{arch}] checkpoint keys ({len(keys)}; layer 0 / non-layer shown): " + ", ".join(
        k for k in keys if ".layers.0." in k and ".experts." not in k or ".layers." not in k))
    log(f"[{arch}] expert keys e.g.: " + ", ".join(k for k in keys if ".layers.0." in k and ".experts.0." in k))

    # Reference from what is on disk.
    disk_model, impl = load_model(out_dir)
    with torch.no_grad():
        disk_logits = disk_model(input_ids=prompt, use_cache=False).logits[0].float()
    reload_diff = float((disk_logits - mem_logits).abs().max())
    log(f"[{arch}] reload max abs diff vs in-memory model: {reload_diff:.3e} (split fused: {split})")
    if reload_diff > 1e-6:
        log(f"WARNING [{arch}] reloaded checkpoint differs from the in-memory model; references use the reload")
    extra = {"arch": arch, "seed": seed, "experts_implementation": impl}
    run_reference(disk_model, "f32", out_dir, "reference", extra)

    tmp = tempfile.mkdtemp(prefix=f"coli_{arch}_q_")
    try:
        for mode, stem in (("q8_row", "reference_q8"), ("q4_g64", "reference_q4")):
            qdir = os.path.join(tmp, mode)
            os.makedirs(qdir)
            shutil.copy(os.path.join(out_dir, "config.json"), qdir)
            qnames, stats, probe = quantize_checkpoint(arch, st_path, os.path.join(qdir, "model.safetensors"), mode)
            assert len(qnames) == LAYERS * EXPERTS * 3, len(qnames)
            log(f"  [{arch}/{mode}] quantised {len(qnames)} tensors, max |deq - w| = {stats['max_abs_err']:.3e}")
            qmodel, qimpl = load_model(qdir)
            qextra = dict(extra)
            qextra.update(
                experts_implementation=qimpl,
                quantization=mode,
                quantized_tensor_count=len(qnames),
                quantized_tensors="every routed expert gate/up/down weight "
                                  "(checkpoint keys matching " + EXPERT_KEY.pattern + ")",
                quant_stats=stats,
                quant_probe=probe,
            )
            run_reference(qmodel, mode, out_dir, stem, qextra)
            del qmodel
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    names["reload_max_abs_diff"] = reload_diff
    names["checkpoint_split_by_script"] = split
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", action="append", choices=sorted(ARCHS))
    args = ap.parse_args()
    archs = args.arch or list(ARCHS)
    torch.set_num_threads(4)
    os.makedirs(args.out, exist_ok=True)
    meta_dir = os.path.join(args.out, "_meta")
    os.makedirs(meta_dir, exist_ok=True)
    meta = {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seeds": {a: ARCHS[a]["seed"] for a in archs},
        "classes": {},
        "failures": {},
    }
    log("torch", torch.__version__, "transformers", transformers.__version__, "python", platform.python_version())
    t_all = time.time()
    for arch in archs:
        t0 = time.time()
        try:
            meta["classes"][arch] = build_arch(arch, args.out, meta_dir)
        except Exception as e:  # noqa: BLE001 - keep going so one run reports every arch
            import traceback
            tb = traceback.format_exc()
            log(f"[{arch}] FAILED: {e!r}\n{tb}")
            meta["failures"][arch] = tb
        log(f"[{arch}] {time.time() - t0:.1f}s")
    meta["seconds"] = time.time() - t_all
    with open(os.path.join(meta_dir, "run.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(meta_dir, "log.txt"), "w") as f:
        f.write("\n".join(LOG_LINES) + "\n")
    return 1 if meta["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
