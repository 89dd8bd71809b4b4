#!/usr/bin/env bash
# Runs each libFuzzer harness for a bounded time on its seed corpus and fails
# on the first crash, leak, timeout or out-of-memory (docs/fuzzing.md).
#   tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS_EACH [HARNESS...]
# BUILD_DIR is a COLI_FUZZ=ON build; no HARNESS runs them all. New inputs and
# any crash reproducer go to $COLI_FUZZ_WORK (default BUILD_DIR/fuzz-work), never
# into the checked-in corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="$1"
seconds="$2"
shift 2
harnesses=("$@")
if [[ ${#harnesses[@]} -eq 0 ]]; then
  for dir in tests/fuzz/corpus/*/; do harnesses+=("$(basename "$dir")"); done
fi
work="${COLI_FUZZ_WORK:-$build_dir/fuzz-work}"
# The harnesses write their input to a scratch file: keep that off the disk.
[[ -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm

failed=()
for harness in "${harnesses[@]}"; do
  binary="$build_dir/tests/fuzz/$harness"
  [[ -x "$binary" ]] || { echo "run_fuzzers: $binary is missing (build with -DCOLI_FUZZ=ON)" >&2; exit 2; }
  mkdir -p "$work/$harness"
  log="$work/$harness.log"
  status=0
  # -rss_limit_mb: a parser that allocates past 2 GiB on a small input is a finding too.
  "$binary" "$work/$harness" "tests/fuzz/corpus/$harness" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/$harness-" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "$harness: ${runs:-0} executions in ${seconds} s, exit $status"
  if [[ $status -ne 0 ]]; then
    failed+=("$harness")
    grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error)" "$log" | head -5 >&2 || true
    echo "  log: $log; reproducer: $(ls "$work/$harness"-* 2>/dev/null | head -1)" >&2
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run_fuzzers: findings in ${failed[*]}" >&2
  exit 1
fi
