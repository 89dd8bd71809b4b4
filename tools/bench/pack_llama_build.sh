#!/usr/bin/env bash
# Packs what llama_side_by_side.sh needs of a llama.cpp build into one
# xz-compressed tar, for carrying to a machine that cannot build it in its
# time limit (the GPU machine: llama.cpp's CUDA backend takes ~1 hour on 2
# cores, the device allows 10 minutes per call, and a call carries at most
# 64 MiB). The builds must be static (BUILD_SHARED_LIBS=OFF) so that the
# programs carry llama.cpp's own libraries; --quantize-build takes
# llama-quantize from a second, CPU-only build (the CUDA one links every
# CUDA kernel into it too: 64 MB that quantising never runs).
#
# Two packs, since a call carries the working tree too: OUT-tools.tar.xz
# holds bin/llama-quantize (stripped), convert_hf_to_gguf.py with the
# conversion/ and gguf-py/ packages it imports, VERSION ("<git describe>
# (<build options>)" from the source checkout and the CUDA build's
# CMakeCache.txt) and BENCH_PARTS; OUT-bench.tar.xz.partNN (at most 24 MiB
# each) hold bin/llama-bench, to be joined in order once every part is there.
#
# usage: tools/bench/pack_llama_build.sh LLAMA_BUILD_DIR LLAMA_SRC_DIR OUT [--quantize-build DIR]
set -euo pipefail
usage() { sed -n '/^# usage:/s/^# //p' "$0"; exit 2; }
[[ $# -eq 3 || $# -eq 5 ]] || usage
build=$(realpath "$1") src=$(realpath "$2") out=$3 quantize_build=$(realpath "$1")
if [[ $# -eq 5 ]]; then
  [[ $4 == --quantize-build ]] || usage
  quantize_build=$(realpath "$5")
fi
for f in "$build/bin/llama-bench" "$quantize_build/bin/llama-quantize" "$src/convert_hf_to_gguf.py" "$src/gguf-py/gguf"; do
  [[ -e $f ]] || { echo "pack_llama_build.sh: $f is missing" >&2; exit 1; }
done
for p in "$build/bin/llama-bench" "$quantize_build/bin/llama-quantize"; do
  if ldd "$p" | grep -q "libllama\|libggml"; then
    echo "pack_llama_build.sh: $p links llama.cpp's libraries dynamically; configure with -DBUILD_SHARED_LIBS=OFF" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools/bin" "$tmp/bench/bin" "$tmp/parts"
strip -o "$tmp/bench/bin/llama-bench" "$build/bin/llama-bench"
strip -o "$tmp/tools/bin/llama-quantize" "$quantize_build/bin/llama-quantize"
cp "$src/convert_hf_to_gguf.py" "$tmp/tools/"
[[ -d $src/conversion ]] && cp -r "$src/conversion" "$tmp/tools/"
cp -r "$src/gguf-py" "$tmp/tools/"
options=$(grep -E "^(GGML_CUDA|CMAKE_CUDA_ARCHITECTURES|GGML_NATIVE|GGML_AVX512|GGML_AMX_INT8|CMAKE_BUILD_TYPE):" \
  "$build/CMakeCache.txt" | sed 's/:[A-Z]*=/=/' | tr '\n' ' ')
echo "$(git -C "$src" describe --tags --always 2>/dev/null || echo unknown) (${options% })" >"$tmp/tools/VERSION"
tar -C "$tmp/bench" -cf - . | xz -T0 -6 | split -b 24M -d - "$tmp/parts/bench.tar.xz.part"
ls "$tmp/parts" | wc -l >"$tmp/tools/BENCH_PARTS"
tar -C "$tmp/tools" -cf - . | xz -T0 -6 >"$tmp/parts/tools.tar.xz"
rm -f "$out"-tools.tar.xz "$out"-bench.tar.xz.part*
for f in "$tmp"/parts/*; do mv "$f" "$out-$(basename "$f")"; done
ls -la "$out"-*
cat "$tmp/tools/VERSION"
