#!/usr/bin/env bash
# coli-probe as a user runs it: exit codes, files written, errors printed.
# usage: coli_probe_cli_test.sh PATH/TO/coli-probe PATH/TO/tests/fixtures
set -u
probe="$1"
fixtures="$2"
source "$(dirname "$0")/check.sh"

# Quick probe of this machine writes a versioned, fingerprinted profile.
"$probe" --quick --out "$work/quick.toml" >"$work/quick.out" 2>"$work/quick.err"
check "quick probe exits 0" test $? -eq 0
check "quick profile written" test -s "$work/quick.toml"
check "profile has schema_version" contains "$work/quick.toml" "^schema_version = [0-9]"
check "profile has fingerprint" contains "$work/quick.toml" "^fingerprint = 'fnv1a64:"
check "quick mode recorded" contains "$work/quick.toml" "^mode = 'quick'"
check "summary names the thread rule" contains "$work/quick.out" "rule "

# Writing again replaces the file atomically and leaves no temporary behind.
"$probe" --quick --out "$work/quick.toml" >/dev/null 2>&1
check "no temporary files left" test "$(ls "$work" | grep -c '\.tmp\.')" -eq 0

# --out - prints the TOML; --json prints JSON.
"$probe" --quick --out - >"$work/stdout.toml" 2>/dev/null
check "--out - prints TOML" contains "$work/stdout.toml" "^schema_version = [0-9]"
"$probe" --quick --json --out "$work/j.toml" >"$work/j.json" 2>/dev/null
check "--json prints JSON" contains "$work/j.json" '"schema_version" : [0-9]'

# Issue 12: --json --out - prints JSON (it printed TOML); --version.
"$probe" --quick --json --out - >"$work/stdout.json" 2>/dev/null
check "--json --out - prints JSON" python3 -c "import json,sys; assert json.load(sys.stdin)['schema_version'] >= 3" <"$work/stdout.json"
"$probe" --version >"$work/version.out"
check "--version names the schemas" contains "$work/version.out" "^schemas: device profile [0-9]*, plan [0-9]*"

# Issue 12: a quick probe never replaces a full profile in the default
# location, and a replay writes nothing there (both lost tuned profiles).
xdg="$(mktemp -d)"; mkdir -p "$xdg/coli"
cp "$fixtures/../../profiles/h200-xeon-16c-tuned.toml" "$xdg/coli/device-profile.toml"
XDG_CONFIG_HOME="$xdg" "$probe" --quick >/dev/null 2>"$work/keep.err"
check "quick probe beside a full profile exits 0" test $? -eq 0
check "the full profile is untouched" cmp -s "$fixtures/../../profiles/h200-xeon-16c-tuned.toml" "$xdg/coli/device-profile.toml"
check "the quick one is written beside it" contains "$xdg/coli/device-profile.quick.toml" "^mode = 'quick'"
check "and the user is told where" contains "$work/keep.err" "never replaces"
XDG_CONFIG_HOME="$xdg" "$probe" --replay-machine "$fixtures/machines/apple-m-3tier" >/dev/null 2>"$work/replay.err"
check "a replay without --out is a usage error" test $? -eq 2
check "the replay says why" contains "$work/replay.err" "writes nothing"
check "the full profile is still untouched" cmp -s "$fixtures/../../profiles/h200-xeon-16c-tuned.toml" "$xdg/coli/device-profile.toml"
rm -rf "$xdg"

# Replays: the 3-tier Apple CPU gets 6 threads, the 8 GiB container its cgroup headroom.
"$probe" --replay-machine "$fixtures/machines/apple-m-3tier" --out - >"$work/m.toml" 2>/dev/null
check "3-tier replay: 6 decode threads" contains "$work/m.toml" "^decode_threads = 6$"
"$probe" --replay-machine "$fixtures/machines/container-cgroup-8g" --out - >"$work/c.toml" 2>/dev/null
check "container replay: headroom from the cgroup" contains "$work/c.toml" "^headroom_source = 'cgroup"

# Issue 12: a replay reads only recorded sources. The 2-socket EPYC's topology
# alone gives its 128 cores and its NUMA memory, never this machine's affinity,
# ISA or /proc/meminfo, and stderr says what was not recorded.
mkdir -p "$work/epyc-topology-only"
cp "$fixtures/machines/amd-epyc-2s/topology.xml" "$work/epyc-topology-only/"
"$probe" --replay-machine "$work/epyc-topology-only" --out - >"$work/epyc.toml" 2>"$work/epyc.err"
check "topology-only replay exits 0" test $? -eq 0
check "topology-only replay: 128 decode threads" contains "$work/epyc.toml" "^decode_threads = 128$"
check "topology-only replay: no ISA" contains "$work/epyc.toml" "^isa = \[\]"
check "topology-only replay: memory from the topology" contains "$work/epyc.toml" "^total_bytes = 540773502976$"
check "topology-only replay names what was not recorded" contains "$work/epyc.err" "not recorded: .*epyc-topology-only/root/proc/cpuinfo"
"$probe" --replay-hwloc-xml "$fixtures/machines/amd-epyc-2s/topology.xml" --out - >"$work/epyc2.toml" 2>/dev/null
check "--replay-hwloc-xml alone: 128 decode threads" contains "$work/epyc2.toml" "^decode_threads = 128$"
"$probe" --replay-root "$fixtures/machines/amd-epyc-2s/root" --out - >/dev/null 2>"$work/rootonly.err"
check "--replay-root without a topology is refused" test $? -eq 1
check "and says the topology is missing" contains "$work/rootonly.err" "recorded CPU topology"
rm -rf "$work/epyc-topology-only"

# A short full probe measures memory and disk bandwidth within its budget.
"$probe" --budget 4 --disk-dir "$work" --out "$work/full.toml" >"$work/full.out" 2>&1
check "full probe exits 0" test $? -eq 0
check "full mode recorded" contains "$work/full.toml" "^mode = 'full'"
check "memory bandwidth measured" contains "$work/full.toml" "^\[measurements.memory_bandwidth\]"
check "disk bandwidth measured" contains "$work/full.toml" "^\[measurements.disk\]"
check "reads beside compute measured" contains "$work/full.toml" "^\[measurements.read_interference\]"
check "and summarised" contains "$work/full.out" "^reads       expert_q4_decode slower by"
check "disk test file removed" test "$(ls "$work" | grep -vc -E '\.(toml|out|err|json)$')" -eq 0

check "the tuning pool is 16 last-level caches here" python3 - "$work/full.toml" <<'EOF'
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
llc = max(c["level"] for c in d["cpu"]["caches"])
size = sum(c["size_bytes"] * c["instances"] for c in d["cpu"]["caches"] if c["level"] == llc)
pool = d["measurements"]["kernel_tuning"]["pool_bytes"]
want = min(max(16 * size, 1 << 30), 4 << 30, d["memory"]["headroom_bytes"] // 8)
assert 32 << 20 <= pool <= want, (pool, want)  # filled up to the budget's share
EOF
"$probe" --budget 4 --tuning-pool 5M --out "$work/pool.toml" >/dev/null 2>"$work/pool.err"
check "a --tuning-pool below 32M is a usage error" test $? -eq 2
check "and says the range" contains "$work/pool.err" "--tuning-pool '5M' is not a size between 32M and 1T"

# Issue 12: a --disk-dir that cannot be measured is an error naming it and the
# reason (it used to exit 0 with no disk figure and no word); /proc/self has no
# free space even for root. A default directory that fails is a note in the profile.
"$probe" --budget 2 --disk-dir /proc/self --out "$work/nodisk.toml" >/dev/null 2>"$work/nodisk.err"
check "unmeasurable --disk-dir fails with 1" test $? -eq 1
check "unmeasurable --disk-dir is named with the reason" contains "$work/nodisk.err" "disk-dir /proc/self: .*free"
check "and nothing is written" test ! -e "$work/nodisk.toml"
probe_path=$(realpath "$probe")
(cd /proc/self && "$probe_path" --budget 2 --out "$work/nodisk.toml" >/dev/null 2>"$work/nodisk2.err")
check "an unmeasurable default directory still writes the profile" test $? -eq 0
check "the profile records why the disk was not measured" contains "$work/nodisk.toml" "^note = 'not measured: .*free"
check "and stderr says so" contains "$work/nodisk2.err" "disk bandwidth not measured"
rm -f "$work/nodisk.toml"
unwritable="$work/unwritable"
mkdir "$unwritable" && chmod 555 "$unwritable"
touch "$unwritable/x" 2>/dev/null && { rm -f "$unwritable/x"; chattr +i "$unwritable" 2>/dev/null; }
if ! touch "$unwritable/x" 2>/dev/null; then  # root: only where chattr +i works
  "$probe" --budget 2 --disk-dir "$unwritable" --out "$work/nodisk.toml" >/dev/null 2>"$work/nodisk3.err"
  check "unwritable --disk-dir fails with 1" test $? -eq 1
  check "unwritable --disk-dir gives the OS reason" contains "$work/nodisk3.err" "cannot create a test file: .*$unwritable"
fi
chattr -i "$unwritable" 2>/dev/null; rm -f "$unwritable/x"

# Bad input: clear errors, non-zero exit, never a crash.
"$probe" --quick --out /proc/coli-nope/p.toml >/dev/null 2>"$work/e1"
rc=$?
check "unwritable --out fails with 1" test $rc -eq 1
check "unwritable --out names the path" contains "$work/e1" "/proc/coli-nope"
"$probe" --replay-hwloc-xml "$fixtures/machines/dev-vm-2core/root/proc/meminfo" --out - >/dev/null 2>"$work/e2"
rc=$?
check "non-XML topology fails with 1" test $rc -eq 1
check "non-XML topology names the file" contains "$work/e2" "meminfo"
"$probe" --replay-machine "$work/does-not-exist" >/dev/null 2>"$work/e3"
rc=$?
check "missing replay dir is a usage error, not a crash" test $rc -ne 0 -a $rc -lt 128
check "missing replay dir is named" contains "$work/e3" "does-not-exist"
"$probe" --budget 100000 >/dev/null 2>&1
check "absurd budget refused" test $? -ne 0

# No GPU stack: the binary links no Vulkan or CUDA library (both are opened at
# run time), and with both hidden it still probes and says why there is no GPU.
check "coli-probe does not link libvulkan, libcuda or NVML" test "$(ldd "$probe" | grep -cE 'libvulkan|libcuda|libnvidia-ml')" -eq 0
COLI_VULKAN_LIBRARY=/nonexistent/libvulkan.so.1 COLI_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
  "$probe" --quick --out "$work/nogpu.toml" >"$work/nogpu.out" 2>&1
check "probe runs with Vulkan and CUDA hidden" test $? -eq 0
check "summary says no Vulkan loader" contains "$work/nogpu.out" "no Vulkan loader"
check "summary says no CUDA driver" contains "$work/nogpu.out" "no CUDA driver"
check "profile records the missing loader" contains "$work/nogpu.toml" "^vulkan_status = 'no Vulkan loader"
COLI_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$probe" --quick --out "$work/nonvml.toml" >"$work/nonvml.out" 2>&1
check "probe runs with NVML hidden" test $? -eq 0
check "profile says why there is no topology" contains "$work/nonvml.toml" "^topology_status = '\(no NVML (/nonexistent/libnvidia-ml.so.1 not found)\|no CUDA device: no topology\)"

# Issue 18: a replayed 8-GPU host prints where each GPU hangs off and every pair's link.
"$probe" --quick --replay-machine "$fixtures/machines/amd-epyc-2s" --replay-gpus "$fixtures/gpus/hgx-h200-8gpu/gpus.toml" \
  --out "$work/hgx.toml" >"$work/hgx.out" 2>&1
check "8-GPU replay exits 0" test $? -eq 0
check "summary prints a GPU's NUMA node and local CPUs" contains "$work/hgx.out" "GPU 4: bus 00000000:9D:00.0, NUMA node 1, local CPUs 64-127,192-255, PCIe gen 5 x16"
check "summary prints each pair's link" contains "$work/hgx.out" "GPU 6 <-> 7: nvlink x18, spec 450.0 GB/s per direction, not measured"
check "the profile carries the links" test "$(grep -c '^\[\[gpus.links\]\]' "$work/hgx.toml")" -eq 28
"$probe" --quick --replay-machine "$fixtures/machines/h200-xeon-16c" --replay-gpus "$fixtures/gpus/hgx-h200-8gpu/gpus.toml" \
  --out "$work/mixed.toml" >"$work/mixed.out" 2>&1
check "a GPU record of another machine is refused" test $? -eq 1
check "the refusal names the record" contains "$work/mixed.out" "hgx-h200-8gpu/gpus.toml: local_cpus"

# --validate: a good profile passes, a damaged copy is refused with its line named.
"$probe" --validate "$work/quick.toml" >"$work/v1" 2>&1
check "--validate accepts a written profile" test $? -eq 0
sed 's/^decode_threads = .*/decode_threads = 100000/' "$work/quick.toml" >"$work/bad.toml"
"$probe" --validate "$work/bad.toml" >/dev/null 2>"$work/v2"
check "--validate refuses an absurd profile" test $? -eq 1
check "--validate names file and field" contains "$work/v2" "bad.toml:[0-9]*:[0-9]*: field 'threads.decode_threads'"

finish
