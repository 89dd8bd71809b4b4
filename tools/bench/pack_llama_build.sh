#!/usr/bin/env bash
# Gathers what llama_side_by_side.sh needs of a llama.cpp build into one
# folder, for carrying to a machine that cannot build it in its time limit
# (the GPU machine: llama.cpp's CUDA backend takes ~40 minutes on 2 cores
# but the device allows 10 per call). The build must be static
# (BUILD_SHARED_LIBS=OFF) so that the two programs carry their libraries.
#
# OUT_DIR gets bin/llama-bench and bin/llama-quantize (stripped),
# convert_hf_to_gguf.py with the conversion/ and gguf-py/ packages it
# imports, and VERSION ("<git describe> (<build options>)" from the source
# checkout and the build's CMakeCache.txt).
#
# usage: tools/bench/pack_llama_build.sh LLAMA_BUILD_DIR LLAMA_SRC_DIR OUT_DIR
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '/^# usage:/s/^# //p' "$0"; exit 2; }
build=$(realpath "$1") src=$(realpath "$2") out=$3
for f in "$build/bin/llama-bench" "$build/bin/llama-quantize" "$src/convert_hf_to_gguf.py" "$src/gguf-py/gguf"; do
  [[ -e $f ]] || { echo "pack_llama_build.sh: $f is missing" >&2; exit 1; }
done
if ldd "$build/bin/llama-bench" | grep -q "libllama\|libggml"; then
  echo "pack_llama_build.sh: $build links llama.cpp's libraries dynamically; configure it with -DBUILD_SHARED_LIBS=OFF" >&2
  exit 1
fi
tmp="$out.partial"
rm -rf "$tmp" && mkdir -p "$tmp/bin"
for p in llama-bench llama-quantize; do strip -o "$tmp/bin/$p" "$build/bin/$p"; done
cp "$src/convert_hf_to_gguf.py" "$tmp/"
[[ -d $src/conversion ]] && cp -r "$src/conversion" "$tmp/"
cp -r "$src/gguf-py" "$tmp/"
options=$(grep -E "^(GGML_CUDA|CMAKE_CUDA_ARCHITECTURES|GGML_NATIVE|GGML_AVX512|GGML_AMX_INT8|CMAKE_BUILD_TYPE):" \
  "$build/CMakeCache.txt" | sed 's/:[A-Z]*=/=/' | tr '\n' ' ')
echo "$(git -C "$src" describe --tags --always 2>/dev/null || echo unknown) (${options% })" >"$tmp/VERSION"
rm -rf "$out" && mv "$tmp" "$out"
du -sh "$out"
cat "$out/VERSION"
