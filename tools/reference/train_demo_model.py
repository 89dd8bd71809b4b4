#!/usr/bin/env python3
"""Trains coli's demo model: a small OLMoE-architecture MoE (3 layers, 8 experts,
top-2) and a byte-level BPE tokenizer of 4096 tokens, both on the corpus
prepare_demo_corpus.py makes from Debian's python3.11-doc (PSF-2.0).

Runs where PyTorch, transformers and tokenizers are (the GPU machine):
  train_demo_model.py --corpus DIR --out DIR [--steps 3000 --device cuda]
DIR holds train.txt and heldout.txt. Writes to --out:
  config.json, model.safetensors (bf16), tokenizer.json, tokenizer_config.json,
  generation_config.json       the checkpoint coli convert reads
  reference_perplexity.json    perplexity of heldout.txt computed here in f32
                               from the bf16 weights, windowed as llama-perplexity
                               (and coli perplexity) window it
  tokenizer_vectors.json       heldout lines and their ids by this tokenizer
  train_log.txt                the whole log: settings, losses, samples
Early stopping watches a validation slice cut from the end of train.txt,
never heldout.txt. Deterministic for a seed on one machine.
"""
import argparse
import json
import math
import os
import re
import time

import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import OlmoeConfig, OlmoeForCausalLM

EOS = "<|endoftext|>"
log_file = None


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    log_file.write(line + "\n")
    log_file.flush()


def train_tokenizer(train_path, vocab_size, out):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([train_path], trainer)
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    return tokenizer


def model_config(vocab_size, ctx):
    return OlmoeConfig(vocab_size=vocab_size, hidden_size=192, intermediate_size=192, num_hidden_layers=3,
                       num_attention_heads=3, num_key_value_heads=3, num_experts=8, num_experts_per_tok=2,
                       max_position_embeddings=4 * ctx, rope_theta=10000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, norm_topk_prob=False, router_aux_loss_coef=0.01,
                       output_router_logits=True, eos_token_id=0, bos_token_id=None, pad_token_id=None)


def batches(ids, ctx, batch, generator, device):
    starts = torch.randint(0, len(ids) - ctx - 1, (batch,), generator=generator)
    rows = torch.stack([ids[s:s + ctx + 1] for s in starts.tolist()])
    return rows.to(device)


@torch.no_grad()
def mean_loss(model, ids, ctx, device, limit=64):
    model.eval()
    losses = []
    for start in range(0, min(len(ids) - ctx - 1, limit * ctx), ctx):
        row = ids[start:start + ctx + 1].unsqueeze(0).to(device)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=device != "cpu"):
            logits = model(row[:, :-1]).logits.float()
        losses.append(torch.nn.functional.cross_entropy(logits[0], row[0, 1:]).item())
    model.train()
    return sum(losses) / len(losses)


def train(model, train_ids, valid_ids, args):
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = lambda step: min(1.0, (step + 1) / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = torch.Generator().manual_seed(args.seed)
    best, best_state, start = float("inf"), None, time.time()
    for step in range(args.steps):
        rows = batches(train_ids, args.ctx, args.batch, generator, args.device)
        with torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.device != "cpu"):
            out = model(rows[:, :-1])  # the aux (load-balancing) loss comes with output_router_logits
        loss = torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1), rows[:, 1:].flatten())
        total = loss + model.config.router_aux_loss_coef * out.aux_loss
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 100 == 0 or step == args.steps - 1:
            log(f"step {step} loss {loss.item():.4f} aux {out.aux_loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e} "
                f"{time.time() - start:.0f} s")
        out_of_time = time.time() - start > args.max_seconds
        if step % 250 == 249 or step == args.steps - 1 or out_of_time:
            valid = mean_loss(model, valid_ids, args.ctx, args.device)
            log(f"step {step} validation loss {valid:.4f} (perplexity {math.exp(valid):.2f})")
            if valid < best:
                best, best_state = valid, {k: v.detach().clone() for k, v in model.state_dict().items()}
        if out_of_time:
            log(f"stopped at step {step}: --max-seconds {args.max_seconds} reached")
            break
    model.load_state_dict(best_state)
    log(f"kept the weights of the best validation loss {best:.4f}")


@torch.no_grad()
def reference_perplexity(model, ids, ctx):
    """llama-perplexity's windows: non-overlapping windows of ctx tokens; in each,
    the tokens after the first half are scored, each from the logits before it."""
    first = ctx // 2
    windows = len(ids) // ctx
    nll_sums, scored = [], 0
    for w in range(windows):
        row = ids[w * ctx:(w + 1) * ctx].unsqueeze(0)
        logits = model(row).logits[0].double()
        logprobs = torch.log_softmax(logits[first:ctx - 1], dim=-1)
        targets = row[0, first + 1:ctx]
        nll_sums.append(-logprobs.gather(1, targets.unsqueeze(1)).sum().item())
        scored += ctx - 1 - first
    mean = sum(nll_sums) / scored
    return {"schema_version": 1, "ctx": ctx, "first_scored_position": first + 1, "windows": windows,
            "scored_tokens": scored, "mean_nll": mean, "perplexity": math.exp(mean), "window_nll_sums": nll_sums,
            "computed_by": f"transformers {transformers.__version__}, torch {torch.__version__}, f32 on the CPU "
                           "from the bf16 weights"}


FUSED_KEY = re.compile(r"^(.*)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def canonicalize_experts(path):
    """transformers 5 may save fused expert tensors ([E, 2I, H] gate_up, [E, H, I]
    down); published OLMoE checkpoints (and coli convert) hold one tensor per
    expert and projection: split them so."""
    tensors = load_file(path)
    if not any(FUSED_KEY.match(k) for k in tensors):
        return
    out = {}
    for key, value in tensors.items():
        match = FUSED_KEY.match(key)
        if not match:
            out[key] = value
            continue
        prefix, which = match.groups()
        for e in range(value.shape[0]):
            base = f"{prefix}.mlp.experts.{e}"
            if which == "gate_up_proj":
                half = value.shape[1] // 2
                out[f"{base}.gate_proj.weight"] = value[e, :half].contiguous()
                out[f"{base}.up_proj.weight"] = value[e, half:].contiguous()
            else:
                out[f"{base}.down_proj.weight"] = value[e].contiguous()
    save_file(out, path, metadata={"format": "pt"})
    log("split the fused expert tensors save_pretrained wrote into one per expert")


def load_as_users_do(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    return model.to("cpu").eval()


def write_runtime_files(out, tokenizer, ctx):
    # PreTrainedTokenizerFast: without a class, AutoTokenizer takes OLMoE's (GPT-NeoX's), which adds a
    # padding token past the vocabulary (llama.cpp's converter then refuses the vocabulary).
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "bos_token": None, "unk_token": None,
               "pad_token": None, "model_max_length": 4 * ctx, "add_bos_token": False},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    json.dump({"eos_token_id": tokenizer.token_to_id(EOS), "do_sample": True, "temperature": 0.7, "top_k": 40,
               "top_p": 0.95}, open(os.path.join(out, "generation_config.json"), "w"), indent=1)


def main():
    global log_file
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=360, help="stop training early (best weights kept)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    log_file = open(os.path.join(args.out, "train_log.txt"), "w")
    log("settings", vars(args), "torch", torch.__version__, "transformers", transformers.__version__)
    torch.manual_seed(args.seed)
    train_path = os.path.join(args.corpus, "train.txt")
    heldout_text = open(os.path.join(args.corpus, "heldout.txt"), encoding="utf-8").read()
    tokenizer = train_tokenizer(train_path, args.vocab, args.out)
    all_ids = torch.tensor(tokenizer.encode(open(train_path, encoding="utf-8").read()).ids, dtype=torch.long)
    cut = int(len(all_ids) * 0.98)
    train_ids, valid_ids = all_ids[:cut], all_ids[cut:]
    heldout_ids = torch.tensor(tokenizer.encode(heldout_text).ids, dtype=torch.long)
    log(f"tokens: train {len(train_ids)}, validation {len(valid_ids)}, heldout {len(heldout_ids)}")
    model = OlmoeForCausalLM(model_config(args.vocab, args.ctx)).to(args.device)
    log(f"parameters: {sum(p.numel() for p in model.parameters())}")
    train(model, train_ids, valid_ids, args)
    model = model.to(torch.bfloat16)
    model.config.output_router_logits = False
    model.save_pretrained(args.out)  # safetensors
    canonicalize_experts(os.path.join(args.out, "model.safetensors"))
    write_runtime_files(args.out, tokenizer, args.ctx)
    model = load_as_users_do(args.out)  # the bf16 weights, exactly, computed in f32
    reference = reference_perplexity(model, heldout_ids, args.ctx)
    json.dump(reference, open(os.path.join(args.out, "reference_perplexity.json"), "w"), indent=1)
    log(f"heldout perplexity (f32, ctx {args.ctx}): {reference['perplexity']:.3f} over {reference['scored_tokens']} tokens")
    lines = [line for line in heldout_text.splitlines() if line.strip()][:200]
    json.dump({"source": "heldout.txt", "lines": [{"text": l, "ids": tokenizer.encode(l).ids} for l in lines]},
              open(os.path.join(args.out, "tokenizer_vectors.json"), "w"), indent=0)
    for prompt in ["The Python tutorial", "A list is", "def main():"]:
        ids = torch.tensor([tokenizer.encode(prompt).ids])
        greedy = model.generate(ids, max_new_tokens=48, do_sample=False, eos_token_id=0)
        sampled = model.generate(ids, max_new_tokens=48, do_sample=True, temperature=0.7, top_k=40, eos_token_id=0)
        log(f"greedy  {prompt!r}: {tokenizer.decode(greedy[0].tolist())!r}")
        log(f"sampled {prompt!r}: {tokenizer.decode(sampled[0].tolist())!r}")


if __name__ == "__main__":
    main()
