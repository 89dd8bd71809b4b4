#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a checkpoint whose byte-level BPE
tokenizer was trained here (tests/fixtures/models/trained-demo): the
converter recognises a pre-tokenizer only by the hash of a known vocabulary's
tokens and refuses new ones, though ours is GPT-2's (tokenizers' ByteLevel
with its default regex). This names it "gpt-2" where the converter finds no
match; nothing of llama.cpp is copied or changed on disk.

usage: llama_convert_trained_vocab.py LLAMA_SRC MODEL_DIR OUT.gguf [--outtype f32]
"""
import sys
from pathlib import Path

if len(sys.argv) < 4:
    sys.exit(__doc__)
source, model, out, rest = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
sys.path.insert(0, str(source))
sys.path.insert(1, str(source / "gguf-py"))
import conversion.base as base  # noqa: E402  (llama.cpp's, from LLAMA_SRC)

recognised = base.TextModel.get_vocab_base_pre


def gpt2_when_unrecognised(self, tokenizer):
    try:
        return recognised(self, tokenizer)
    except NotImplementedError:
        print("llama_convert_trained_vocab: pre-tokenizer not among the converter's hashes: gpt-2 (ByteLevel's regex)")
        return "gpt-2"


base.TextModel.get_vocab_base_pre = gpt2_when_unrecognised
import convert_hf_to_gguf  # noqa: E402

sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out] + (rest or ["--outtype", "f32"])
convert_hf_to_gguf.main()
