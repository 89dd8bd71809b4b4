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
    # The main job, end to end on the bundled demo model (trained on the
    # Python documentation, tests/fixtures/models/trained-demo): measure this
    # machine, convert the checkpoint (int4 experts; its tokenizer and
    # generation settings carried), plan (memory per component before
    # loading; --cap 4 of 8 experts so they stream), generate text with every
    # knob from the plan, then plan vs actual; last, what int4 costs: the
    # perplexity of held-out text against the f32 container.
    out="$build_dir/demo"
    model=tests/fixtures/models/trained-demo
    mkdir -p "$out"
    "$build_dir/tools/coli-probe" --out "$out/device-profile.toml" --disk-dir "$out"
    "$build_dir/tools/coli" convert --model "$model" --out "$out/demo.coli" --experts q4_g64
    "$build_dir/tools/coli-plan" --profile "$out/device-profile.toml" --model "$out/demo.coli" --cap 4 \
      --prompt-tokens 64 --out "$out/demo.plan"
    "$build_dir/tools/coli" run --model "$out/demo.coli" --prompt "The Python tutorial" --max-tokens 80 --seed 7 \
      --plan "$out/demo.plan"
    "$build_dir/tools/coli" convert --model "$model" --out "$out/demo-f32.coli" --experts f32 >/dev/null
    "$build_dir/tools/coli" perplexity --model "$out/demo.coli" --base "$out/demo-f32.coli" --text "$model/heldout.txt" \
      --ctx 256 --chunks 8 --profile "$out/device-profile.toml"
    echo "bootstrap: profile $out/device-profile.toml, plan $out/demo.plan, container $out/demo.coli"
    ;;
esac
