#!/usr/bin/env bash
# cmake --install into a temporary prefix: every program, the curated
# profiles where the search path reads them, man pages, completions, and the
# planner library that a program outside the project builds against (CMake
# package and pkg-config).
# usage: install_test.sh BUILD_DIR SOURCE_DIR CXX_COMPILER HAVE_MAN(0|1) HAVE_BENCH(0|1)
set -u
build="$1"
source_dir="$2"
cxx="$3"
have_man="$4"
have_bench="$5"
source "$source_dir/tests/cli/check.sh"
prefix="$work/prefix"
fixtures="$source_dir/tests/fixtures"

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1
check "cmake --install exits 0" test $? -eq 0

programs="coli coli-plan coli-probe"
[[ "$have_bench" == 1 ]] && programs="$programs coli-sweep coli-make-synthetic coli-decode-bench coli-speed-bench"
for program in $programs; do
  check "$program installed" test -x "$prefix/bin/$program"
  "$prefix/bin/$program" --version >"$work/version.out" 2>&1
  check "$program --version exits 0" test $? -eq 0
  check "$program --version names itself and the schemas" \
    grep -qzE "^$program [0-9.]+ \(commit [^)]+\)"$'\n'"schemas: device profile" "$work/version.out"
  if [[ "$have_man" == 1 ]]; then
    check "$program man page installed, with its options" grep -qF -- '\-\-version' "$prefix/share/man/man1/$program.1"
  fi
  check "$program bash completion installed" contains "$prefix/share/bash-completion/completions/$program" "complete "
  check "$program zsh completion installed" contains "$prefix/share/zsh/site-functions/_$program" "^#compdef $program"
done

# The installed coli-plan plans with an installed profile.
installed_profiles="$prefix/share/coli/profiles"
check "curated profiles installed" test -s "$installed_profiles/h200-xeon-16c.toml"
"$prefix/bin/coli-plan" --profile "$installed_profiles/h200-xeon-16c.toml" --model "$fixtures/model-configs/Qwen3-30B-A3B.json" \
  --ram 16G --gpu none --offline --json >"$work/plan.json" 2>"$work/plan.err"
check "installed coli-plan plans with an installed profile" test $? -eq 0
check "the plan fits and streams" python3 -c \
  "import json,sys; d=json.load(sys.stdin); assert d['fits'] and d['knobs']['cap'] < d['knobs']['n_experts']" <"$work/plan.json"
# The profile search path reads the installed profiles (origin "installed").
"$prefix/bin/coli" profile list >"$work/list.out" 2>&1
check "the search path lists the installed profiles" contains "$work/list.out" "$installed_profiles/h200-xeon-16c.toml \[installed\]"

# Completions complete what the parser takes.
check "bash completion offers the kernel names" bash -c "
  source '$prefix/share/bash-completion/completions/coli'
  COMP_WORDS=(coli run --kernel ''); COMP_CWORD=3; _coli
  [[ \" \${COMPREPLY[*]} \" == *' avx512vnni '* && \" \${COMPREPLY[*]} \" == *' exact '* ]]"
check "bash completion offers coli-plan's options" bash -c "
  source '$prefix/share/bash-completion/completions/coli-plan'
  COMP_WORDS=(coli-plan --pro); COMP_CWORD=1; _coli_plan
  [[ \" \${COMPREPLY[*]} \" == *' --profile '* ]]"
if command -v zsh >/dev/null; then
  check "zsh completion parses" zsh -n "$prefix/share/zsh/site-functions/_coli"
fi

# The planner library: headers, CMake package and pkg-config.
check "planner headers installed" test -s "$prefix/include/coli/planner/plan.h"
check "CMake package installed" test -s "$prefix/lib/cmake/coli/coliConfig.cmake"
cmake -S "$source_dir/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >"$work/consumer.log" 2>&1 &&
  cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1
check "a program builds against find_package(coli) and coli::planner" test $? -eq 0
"$work/consumer/consumer" "$installed_profiles/h200-xeon-16c.toml" "$fixtures/model-configs/Qwen3-30B-A3B.json" >"$work/c.out" 2>&1
check "and plans" contains "$work/c.out" "^cap [0-9]* of 128 experts"
pkg="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs coli-planner)"
check "pkg-config knows coli-planner" test -n "$pkg"
# shellcheck disable=SC2086
"$cxx" -std=c++20 -O1 "$source_dir/tests/install/consumer/main.cpp" -o "$work/pc-consumer" $pkg >"$work/pc.log" 2>&1
check "a program builds with pkg-config --cflags --libs coli-planner" test $? -eq 0
"$work/pc-consumer" "$installed_profiles/h200-xeon-16c.toml" "$fixtures/model-configs/Qwen3-30B-A3B.json" >"$work/pc.out" 2>&1
check "and plans the same" cmp -s "$work/c.out" "$work/pc.out"

[[ "$failed" -gt 0 ]] && cat "$work/install.log" "$work/consumer.log" "$work/pc.log" >&2
finish
