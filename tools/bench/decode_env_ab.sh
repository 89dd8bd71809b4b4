#!/usr/bin/env bash
# A/B of environment settings on one model: coli-decode-bench once per
# setting per round, settings interleaved (their order alternating per round),
# then per setting the median and range of pp and tg over the rounds. For the
# engine's environment overrides (COLI_HUGE_PAGES, COLI_PREFETCH_BYTES,
# COLI_CPU_KERNEL): which default a machine should get, measured side by side;
# with BUILD=DIR in a setting, two builds of coli (a change against its
# parent). Then each setting against the first, round by round: the median
# over rounds of their ratio in one round (the machine's drift between rounds
# cancels in it; the order alternates, so a first-run advantage cancels too).
# usage: tools/bench/decode_env_ab.sh BUILD_DIR MODEL ROUNDS "SETTING" ["SETTING" ...] [-- decode-bench flags]
#   AB_LOG=FILE keeps every run's full output (the bound and ratio columns too).
#   SETTING: space-separated VAR=value pairs ("" or "default" = the environment as it is);
#   BUILD=DIR among them runs DIR's coli-decode-bench instead of BUILD_DIR's
#   default flags: --threads 16 -p 512 -n 64 -d 0 --bandwidth 1
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR MODEL ROUNDS SETTING... [-- flags]} model=${2:?model} rounds=${3:?rounds}
shift 3
settings=()
while [[ $# -gt 0 && "$1" != "--" ]]; do settings+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
flags=("$@")
[[ ${#flags[@]} -gt 0 ]] || flags=(--threads 16 -p 512 -n 64 -d 0 --bandwidth 1)
[[ ${#settings[@]} -gt 0 ]] || { echo "$0: give at least one SETTING" >&2; exit 2; }
bench="$build/tools/bench/coli-decode-bench"
[[ -x "$bench" ]] || { echo "$0: no $bench (build the coli-decode-bench target)" >&2; exit 2; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$rounds"); do
  order=$(seq 0 $((${#settings[@]} - 1)))
  (( round % 2 == 0 )) && order=$(echo "$order" | tac)
  for i in $order; do
    setting="" run="$bench"
    for pair in ${settings[$i]}; do
      case $pair in
        default) ;;
        BUILD=*) run="${pair#BUILD=}/tools/bench/coli-decode-bench" ;;
        *) setting="$setting $pair" ;;
      esac
    done
    [[ -x "$run" ]] || { echo "$0: no $run (build the coli-decode-bench target there)" >&2; exit 2; }
    # The bench's table rows: "threads cap kernel test... tok/s ..."; keep test name and tok/s.
    echo "== round $round, setting: ${settings[$i]}" >>"${AB_LOG:-/dev/null}"
    env $setting "$run" --model "$model" -r 1 "${flags[@]}" 2>&1 | tee -a "${AB_LOG:-/dev/null}" |
      awk -v s="$i" -v r="$round" '$1 ~ /^[0-9]+$/ && ($4 ~ /^pp/ || $4 ~ /^tg/) {
        name = $4; for (f = 5; f <= NF && $f !~ /^[0-9.]+$/; ++f) name = name " " $f; print s "\t" name "\t" $f "\t" r }' >>"$results"
  done
done
printf '%-48s %-14s %10s %22s\n' setting test median "range (tok/s)"
for i in "${!settings[@]}"; do
  for test in $(awk -F'\t' -v s="$i" '$1 == s { print $2 }' "$results" | tr ' ' '_' | sort -u); do
    awk -F'\t' -v s="$i" -v t="$test" '$1 == s { n = $2; gsub(/ /, "_", n); if (n == t) print $3 }' "$results" | sort -g |
      awk -v name="${settings[$i]:-default}" -v t="$test" '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%-48s %-14s %10.2f %10.2f .. %-10.2f\n", name, t, m, v[1], v[NR] }'
  done
done
# Round by round against the first setting: the median of setting / first over
# the rounds where both ran a test, and the ratios themselves.
(( ${#settings[@]} > 1 )) || exit 0
printf '\n%-48s %-14s %10s  %s\n' "setting / ${settings[0]:-default}" test "paired" "per round"
for i in "${!settings[@]}"; do
  (( i > 0 )) || continue
  awk -F'\t' -v s="$i" -v name="${settings[$i]:-default}" '
    { key = $2 SUBSEP $4 }
    $1 == 0 { first[key] = $3 }
    $1 == s { mine[key] = $3; tests[$2] = 1 }
    END {
      for (t in tests) {
        n = 0; text = ""
        for (k in mine) {
          split(k, part, SUBSEP)
          if (part[1] != t || !(k in first) || first[k] <= 0) continue
          v = mine[k] / first[k]
          for (j = ++n; j > 1 && ratio[j - 1] > v; --j) ratio[j] = ratio[j - 1]  # insertion sort (mawk has no asort)
          ratio[j] = v
        }
        for (j = 1; j <= n; ++j) text = text sprintf("%.3f ", ratio[j])
        m = n % 2 ? ratio[(n + 1) / 2] : (ratio[n / 2] + ratio[n / 2 + 1]) / 2
        if (n > 0) { gsub(/ /, "_", t); printf "%-48s %-14s %10.3f  %s(sorted)\n", name, t, m, text }
        split("", ratio)
      }
    }' "$results"
done
