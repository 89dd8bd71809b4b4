#!/usr/bin/env bash
# A streaming plan run inside a memory cgroup whose limit is the plan's RAM
# plus its margin (issue 12): the run must finish without an OOM kill, and the
# RSS watchdog's figures are printed beside the cgroup's own peak.
#
#   tools/bench/cgroup_limited_run.sh BUILD_DIR MODEL.coli PLAN [EXTRA_BYTES]
#   LIMIT=BYTES tools/bench/cgroup_limited_run.sh BUILD_DIR MODEL.coli - [coli run flags...]
#
# EXTRA_BYTES (default 0) is added to the limit on top of the plan's RAM and
# margin. With PLAN "-", `coli run` runs without a plan (its own memory check
# against the cgroup's headroom) inside a cgroup of LIMIT bytes, with the
# flags given. Uses cgroup v2 (memory.max, memory.peak, memory.events) where the
# memory controller is there, else cgroup v1 (memory.limit_in_bytes,
# memory.max_usage_in_bytes, memory.oom_control). Needs root (or a delegated
# cgroup). The page cache of the streamed experts is charged to the cgroup
# too: the kernel reclaims it before it kills, which is what this shows.
set -euo pipefail
build=${1:?usage: cgroup_limited_run.sh BUILD_DIR MODEL.coli PLAN [EXTRA_BYTES]}
model=${2:?usage: cgroup_limited_run.sh BUILD_DIR MODEL.coli PLAN [EXTRA_BYTES]}
plan=${3:?usage: cgroup_limited_run.sh BUILD_DIR MODEL.coli PLAN [EXTRA_BYTES]}
shift 3
if [[ "$plan" == - ]]; then
  limit=${LIMIT:?with PLAN -, set LIMIT to the cgroup limit in bytes}
  run_flags=("$@")
  describe="LIMIT, a run without a plan: ${run_flags[*]}"
else
  extra=${1:-0}
  # The plan's RAM total and margin, in bytes, from its own fields.
  field() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$plan" | head -1; }
  planned=$(field planned_ram_bytes)
  margin=$(field margin_bytes)
  [[ -n "$planned" && -n "$margin" ]] || { echo "cgroup_limited_run: $plan has no planned_ram_bytes/margin_bytes" >&2; exit 2; }
  limit=$((planned + margin + extra))
  run_flags=(--plan "$plan")
  describe="plan RAM $planned + margin $margin + extra $extra"
fi

name="coli-limited-$$"
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  version=2
  parent=/sys/fs/cgroup
  # A v2 child gets the memory controller only if its parent delegates it.
  echo +memory > "$parent/cgroup.subtree_control" 2>/dev/null || true
  group="$parent/$name"
  mkdir "$group"
  echo "$limit" > "$group/memory.max"
  echo 0 > "$group/memory.swap.max" 2>/dev/null || true
elif [[ -d /sys/fs/cgroup/memory ]]; then
  version=1
  group="/sys/fs/cgroup/memory/$name"
  mkdir "$group"
  echo "$limit" > "$group/memory.limit_in_bytes"
else
  echo "cgroup_limited_run: no writable memory cgroup (neither v2 memory.max nor v1 memory controller)" >&2
  exit 1
fi
trap 'rmdir "$group" 2>/dev/null || true' EXIT
echo "cgroup v$version $group: limit $limit B = $describe"

# The run joins the cgroup before it execs, so every byte it touches is charged.
log=$(mktemp)
set +e
bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$group" \
  "$build/tools/coli" run --model "$model" "${run_flags[@]}" --prompt-ids $(seq -s" " 1 3 190) \
  --max-tokens "${TOKENS:-64}" >"$log" 2>&1
status=$?
set -e
if [[ $status -ne 0 ]]; then tail -5 "$log"; else grep -E "RSS|watchdog|planned|peak|tok/s" "$log" || true; fi

if [[ $version == 2 ]]; then
  peak=$(cat "$group/memory.peak" 2>/dev/null || echo unknown)
  oom_kills=$(sed -n 's/^oom_kill //p' "$group/memory.events")
else
  peak=$(cat "$group/memory.max_usage_in_bytes")
  oom_kills=$(sed -n 's/^oom_kill //p' "$group/memory.oom_control")
  oom_kills=${oom_kills:-$(cat "$group/memory.failcnt") limit hits}
fi
echo "exit status $status; cgroup peak (RSS + page cache) $peak B of limit $limit B; OOM kills ${oom_kills:-0}"
rm -f "$log"
exit "$status"
