#!/usr/bin/env bash
# The README's two set-up commands. On a fresh Debian 12 machine:
#   tools/bootstrap.sh demo   install what is missing, build, run the main job end to end
#   tools/bootstrap.sh test   install what is missing, build, run every test, then a short fuzzing
#                             run of every parser (clang build in BUILD_DIR-fuzz, COLI_FUZZ_SECONDS
#                             each, default 6; docs/fuzzing.md)
# and, beside them, tools/bootstrap.sh fuzz: only the fuzzing step (longer runs: COLI_FUZZ_SECONDS).
# Environment: COLI_BUILD_DIR (default build), COLI_JOBS (default nproc).
set -euo pipefail

mode="${1:-}"
if [[ "$mode" != demo && "$mode" != test && "$mode" != fuzz ]]; then
  echo "usage: $0 demo|test|fuzz" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
build_dir="${COLI_BUILD_DIR:-build}"
jobs="${COLI_JOBS:-$(nproc)}"

# Every build and test dependency, from Debian's own packages.
packages=(
  build-essential cmake ninja-build pkg-config git
  libhwloc-dev hwloc libtomlplusplus-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libvulkan-dev libvulkan1 glslc libspirv-cross-c-shared-dev mesa-vulkan-drivers nlohmann-json3-dev
  libxxhash-dev libpcre2-dev
  libcpp-httplib-dev curl  # coli serve's HTTP server; its test drives it with curl
  help2man python3  # man pages and shell completions, generated from --help at build time
  clang libclang-rt-14-dev  # fuzz: libFuzzer and the sanitizers' runtimes
)

install_missing() {
  local missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  echo "bootstrap: installing ${missing[*]}" >&2
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build() {
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLI_WERROR=ON
  cmake --build "$build_dir" -j "$jobs"
}

fuzz() {
  local fuzz_dir="$build_dir-fuzz"
  # -O1 with line tables only: sanitizer reports keep file:line and the build takes far less time than -O2 -g.
  cmake -S . -B "$fuzz_dir" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_COMPILER=clang -DCOLI_FUZZ=ON -DCOLI_BUILD_TESTS=OFF -DCOLI_BUILD_BENCHMARKS=OFF -DCOLI_WERROR=ON
  cmake --build "$fuzz_dir" -j "$jobs" --target coli_fuzzers
  tests/fuzz/run_fuzzers.sh "$fuzz_dir" "${COLI_FUZZ_SECONDS:-6}"
}

install_missing
if [[ "$mode" == fuzz ]]; then
  fuzz
  exit 0
fi
build
case "$mode" in
  test)
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
    fuzz
    ;;
  demo)
    # The main job, end to end on the bundled tiny model: measure this
    # machine, convert the checkpoint (int4 experts, its tokenizer carried), plan (memory per
    # component before loading; --cap 4 of 16 experts so they stream), and
    # generate text with every knob from the plan, then plan vs actual.
    out="$build_dir/demo"
    mkdir -p "$out"
    "$build_dir/tools/coli-probe" --out "$out/device-profile.toml" --disk-dir "$out"
    "$build_dir/tools/coli" convert --model tests/fixtures/models/tiny-demo --out "$out/tiny-demo.coli" --experts q4_g64 \
      --tokenizer tests/fixtures/tokenizer/ggml-vocab-gpt-2.gguf  # carried in the container: one file runs
    "$build_dir/tools/coli-plan" --profile "$out/device-profile.toml" --model "$out/tiny-demo.coli" --cap 4 \
      --prompt-tokens 64 --out "$out/tiny-demo.plan"
    "$build_dir/tools/coli" run --model "$out/tiny-demo.coli" \
      --prompt "A planner that measures the machine" --max-tokens 32 --temperature 0.8 --seed 7 \
      --plan "$out/tiny-demo.plan"
    echo "bootstrap: profile $out/device-profile.toml, plan $out/tiny-demo.plan, container $out/tiny-demo.coli"
    ;;
esac
