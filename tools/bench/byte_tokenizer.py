#!/usr/bin/env python3
"""Writes a byte-level tokenizer.json of 256 tokens (one per byte, ids in byte
order, no merges), so a model with a 256-entry vocabulary, such as the
random-weight reference models of tests/fixtures/models, can be given text:
coli convert --tokenizer THIS, then coli perplexity (tools/bench/coli_quality.sh
TOKENIZER=THIS). Standard library only.

usage: byte_tokenizer.py OUT.json
"""
import json
import sys


def bytes_to_unicode():
    """GPT-2's printable stand-in for every byte (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


if len(sys.argv) != 2:
    sys.exit(__doc__)
alphabet = bytes_to_unicode()
tokenizer = {
    "version": "1.0",
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": {alphabet[b]: b for b in range(256)}, "merges": []},
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False)
