#!/usr/bin/env bash
# Packs the part of a llama.cpp source checkout that llama-bench,
# llama-quantize and convert_hf_to_gguf.py need into one xz-compressed tar
# (~7.5 MB, against ~60 MB with models, tests, docs and examples), for the
# GPU machine, which builds llama.cpp's CUDA backend from it in one device
# call (gpu_machine_session.sh's build_llama_cuda). The tar has no .git, so
# it carries VERSION ("<git describe> (<note>)"), which llama_side_by_side.sh
# prints as the llama.cpp version.
#
# usage: tools/bench/pack_llama_source.sh LLAMA_SRC_DIR OUT.tar.xz [NOTE]
#   e.g. tools/bench/pack_llama_source.sh /work/llama/src .deps/llama-src.tar.xz "node-llama-cpp 3.21.1"
set -euo pipefail
[[ $# -eq 2 || $# -eq 3 ]] || { sed -n '/^# usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 2; }
src=$(realpath "$1") out=$2 note=${3:-}
parts=(CMakeLists.txt cmake common ggml src include tools vendor convert_hf_to_gguf.py gguf-py conversion LICENSE licenses)
for p in "${parts[@]}"; do
  [[ -e $src/$p ]] || { echo "pack_llama_source.sh: $src/$p is missing (is $src llama.cpp's source?)" >&2; exit 1; }
done
stage=$(mktemp -d) tmp="$out.partial.$$"
trap 'rm -rf "$stage" "$tmp"' EXIT
version=$(git -C "$src" describe --tags --always 2>/dev/null || echo unknown)
echo "$version${note:+ ($note)}" >"$stage/VERSION"
# the parts that exist of the optional ones (newer trees dropped some)
for p in requirements app pocs; do [[ -e $src/$p ]] && parts+=("$p"); done
tar --exclude=.git -C "$src" -cf - "${parts[@]}" | tar -C "$stage" -xf -
tar -C "$stage" -cJf "$tmp" . && mv -f "$tmp" "$out"  # atomic: no half-written pack under OUT's name
echo "$out: llama.cpp $(cat "$stage/VERSION"), $(du -h "$out" | cut -f1)"
