#!/usr/bin/env bash
# Planned vs measured peak RSS (issue 5): one synthetic model of >= 1 GiB,
# several plans (all resident, a cap that streams from disk, pins from a
# recorded routing history, a --ram limit), each run by `coli run --plan` with
# the same prompt. The plan's RAM total is compared with the process's peak
# RSS (getrusage ru_maxrss, as `coli run` prints it). Target: within 3%, and
# never more than 1% under.
#
#   tools/bench/plan_rss_bench.sh BUILD_DIR WORK_DIR [LAYERS]
#
# WORK_DIR gets the container (~1.4 GiB with 5 layers; deleted at the end),
# a quick profile and the plans. Needs coli, coli-plan, coli-probe and
# coli-make-synthetic built in BUILD_DIR.
set -euo pipefail
build=${1:?usage: plan_rss_bench.sh BUILD_DIR WORK_DIR [LAYERS]}
work=${2:?usage: plan_rss_bench.sh BUILD_DIR WORK_DIR [LAYERS]}
layers=${3:-5}
mkdir -p "$work"
model="$work/synthetic.coli"
trap 'rm -f "$model" "$model.usage"' EXIT

"$build/tools/bench/coli-make-synthetic" --out "$model" --layers "$layers" --experts q4_g64 --dense q8_row >/dev/null
"$build/tools/coli-probe" --quick --out "$work/profile.toml" >/dev/null
size=$(stat -c %s "$model")
echo "model: $model, $((size / 1048576)) MiB, $layers layers x 64 experts (q4_g64), dense q8_row"

prompt_ids=$(seq -s" " 1 3 190)   # 64 token ids
prompt_tokens=64
threads=${THREADS:-2}

# plan NAME [coli-plan flags...]: writes $work/NAME.plan
plan() {
  local name=$1
  shift
  "$build/tools/coli-plan" --profile "$work/profile.toml" --model "$model" --threads "$threads" \
    --prompt-tokens "$prompt_tokens" --prompt-ids --out "$work/$name.plan" "$@" >/dev/null
}

# run NAME: prints "NAME planned measured" in bytes, from coli run's report
run() {
  local name=$1 out
  out=$("$build/tools/coli" run --model "$model" --plan "$work/$name.plan" --prompt-ids $prompt_ids \
    --max-tokens 32 2>&1)
  local planned measured
  planned=$(grep -m1 '^planned_ram_bytes' "$work/$name.plan" | tr -dc 0-9)
  measured=$(printf '%s\n' "$out" | sed -n 's/.*peak RSS bytes: \([0-9]*\).*/\1/p' | head -1)
  if [[ -z $measured ]]; then
    printf '%s\n' "$out" >&2
    echo "$name: coli run printed no peak RSS" >&2
    exit 1
  fi
  local cap pins
  cap=$(sed -n 's/^cap = \([0-9]*\)/\1/p' "$work/$name.plan" | head -1)
  pins=$(sed -n 's/^pins = \([0-9]*\)/\1/p' "$work/$name.plan" | head -1)
  awk -v n="$name" -v c="$cap" -v p="$pins" -v a="$planned" -v b="$measured" 'BEGIN {
    printf "| %-22s | %3d | %3d | %9.1f MiB | %9.1f MiB | %+6.2f%% |\n", n, c, p, a / 1048576, b / 1048576, (a - b) / b * 100 }'
}

plan resident
# A first run records the routing history that the pinned plan reads.
"$build/tools/coli" run --model "$model" --plan "$work/resident.plan" --prompt-ids $prompt_ids --max-tokens 32 \
  >/dev/null 2>&1
plan streaming --cap 16
plan pinned --cap 24 --usage "$model.usage"
plan ram-limited --ram "$(( (size * 9 / 10) / 1048576 ))M"

echo "| plan                   | cap | pins |   planned RAM |   peak RSS    | plan - RSS |"
echo "|------------------------|-----|------|---------------|---------------|------------|"
for name in resident streaming pinned ram-limited; do run "$name"; done
