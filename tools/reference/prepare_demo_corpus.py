#!/usr/bin/env python3
"""The demo model's corpus: English prose from Debian's python3.11-doc package.

Source: Debian 12 package python3.11-doc (3.11.2-6+deb12u9), the reStructuredText
sources of the Python documentation under /usr/share/doc/python3.11/html/_sources/
(Python Software Foundation License 2.0, /usr/share/doc/python3.11-doc/copyright).
Files: every *.rst.txt of tutorial/, reference/, howto/, faq/, library/ and
whatsnew/, in sorted order. Held out for evaluation (never trained on):
HELD_OUT below.

The markup is thinned so the text reads as prose: directive lines
(".. note::", ".. code-block::"), their option lines, section underlines and
reST roles (":func:`len`" -> "len") are dropped.

Standard library only. Usage:
  apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb pkg
  prepare_demo_corpus.py pkg/usr/share/doc/python3.11/html/_sources OUT_DIR
writes OUT_DIR/train.txt, OUT_DIR/heldout.txt and OUT_DIR/manifest.json (every
file with its sha256 and where it went).
"""
import hashlib
import json
import os
import re
import sys

SECTIONS = ["tutorial", "reference", "howto", "faq", "library", "whatsnew"]
HELD_OUT = ["tutorial/controlflow.rst.txt", "faq/design.rst.txt"]

ROLE = re.compile(r":[a-z:]+:`[~!]?([^`<]*?)(?:\s*<[^>]*>)?`")
DIRECTIVE = re.compile(r"^\s*\.\. ")
OPTION = re.compile(r"^\s+:[a-z-]+:")
UNDERLINE = re.compile(r"^([=\-~^*#+\"'`])\1{3,}\s*$")


def thin(text):
    lines = []
    for line in text.splitlines():
        if DIRECTIVE.match(line) or OPTION.match(line) or UNDERLINE.match(line):
            continue
        line = ROLE.sub(r"\1", line).replace("``", "")
        lines.append(line.rstrip())
    prose = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", prose).strip() + "\n"


def main(sources, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest = {"package": "python3.11-doc", "version": "3.11.2-6+deb12u9",
                "license": "PSF-2.0 (/usr/share/doc/python3.11-doc/copyright)", "files": []}
    parts = {"train": [], "heldout": []}
    for section in SECTIONS:
        for root, _, names in sorted(os.walk(os.path.join(sources, section))):
            for name in sorted(names):
                if not name.endswith(".rst.txt"):
                    continue
                path = os.path.join(root, name)
                relative = os.path.relpath(path, sources)
                raw = open(path, "rb").read()
                split = "heldout" if relative in HELD_OUT else "train"
                parts[split].append(thin(raw.decode("utf-8")))
                manifest["files"].append({"file": relative, "sha256": hashlib.sha256(raw).hexdigest(), "split": split})
    for split, texts in parts.items():
        with open(os.path.join(out_dir, split + ".txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(texts))
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"train {sum(map(len, parts['train']))} chars, heldout {sum(map(len, parts['heldout']))} chars, "
          f"{len(manifest['files'])} files")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
