#!/usr/bin/env bash
# coli profile / coli-probe / coli-plan as a fleet admin runs them (docs/fleet.md).
# usage: coli_profile_cli_test.sh PATH/TO/coli PATH/TO/coli-probe PATH/TO/coli-plan PATH/TO/tests/fixtures PATH/TO/profiles
set -u
coli="$1"
probe="$2"
plan="$3"
fixtures="$4"
profiles="$5"
source "$(dirname "$0")/check.sh"
export XDG_CONFIG_HOME="$work/config" COLI_SYSTEM_PROFILE_DIR="$work/system"
unset COLI_PROFILE_PATH
h200=(--replay-machine "$fixtures/machines/h200-xeon-16c" --replay-gpus "$fixtures/gpus/nvidia-h200/gpus.toml")

reseal() {  # recompute the checksum of an edited file, so only the field checks can refuse it
  local body sum
  body=$(grep -v '^content_sha256 = ' "$1"; echo x)
  sum=$(printf '%s' "${body%x}" | sha256sum | cut -d' ' -f1)
  sed -i "s/^content_sha256 = .*/content_sha256 = 'sha256:$sum'/" "$1"
}

# Probe one machine, export it, drop it in the system dir: its twin finds it.
"$probe" --quick "${h200[@]}" --out "$work/first.toml" >/dev/null 2>&1
check "first probe exits 0" test $? -eq 0
check "profile carries its class" contains "$work/first.toml" "^equivalence_class = 'class-v1:"
"$coli" profile export "$work/first.toml" --out "$work/h200.toml" >"$work/e.out" 2>&1
check "export exits 0" test $? -eq 0
check "export adds a checksum" contains "$work/h200.toml" "^content_sha256 = 'sha256:"
check "export drops the GPU UUIDs" test "$(grep -c "^uuid = '[0-9a-f]" "$work/h200.toml")" -eq 0
mkdir -p "$work/system" && cp "$work/h200.toml" "$work/system/"
"$probe" --quick "${h200[@]}" --out "$work/twin.toml" >"$work/twin.out" 2>&1
check "twin: coli-probe --quick finds the shared profile" contains "$work/twin.out" "shared profile of this machine's class .* found: $work/system/h200.toml"
"$probe" --quick --replay-machine "$fixtures/machines/dev-vm-2core" --out "$work/vm.toml" >"$work/vm.out" 2>&1
check "another machine finds none" contains "$work/vm.out" "no shared profile of this machine's class"
"$coli" profile list "${h200[@]}" >"$work/list.out" 2>&1
check "list marks the match" contains "$work/list.out" "$work/system/h200.toml \[system\] class-v1:.*MATCHES this machine"

# validate re-validates against the live facts; a different driver major is named.
sed 's/^driver_version = 13000$/driver_version = 12040/' "$fixtures/gpus/nvidia-h200/gpus.toml" >"$work/gpus-12.toml"
"$coli" profile validate "$work/h200.toml" --replay-machine "$fixtures/machines/h200-xeon-16c" --replay-gpus "$work/gpus-12.toml" >"$work/v.out" 2>&1
check "validate exits 0 for a valid file of another class" test $? -eq 0
check "checksum verified" contains "$work/v.out" "checksum verified"
check "driver mismatch named" contains "$work/v.out" "gpus.cuda\[0\].driver_version: profile 13.0, this machine 12.4"
check "advice to re-probe" contains "$work/v.out" "re-probe"

# Import: all or nothing; tampered, out-of-bounds and future files refused with the field named.
"$coli" profile import "$work/h200.toml" >"$work/i.out" 2>&1
check "import exits 0" test $? -eq 0
check "import writes into the user's profile dir" test -s "$work/config/coli/profiles/h200.toml"
sed 's/^headroom_bytes = .*/headroom_bytes = 128849018880/' "$work/h200.toml" >"$work/tampered.toml"
"$coli" profile import "$work/tampered.toml" >/dev/null 2>"$work/t.err"
check "tampered import exits 1" test $? -eq 1
check "tampered import names the checksum field" contains "$work/t.err" "tampered.toml: field 'export.content_sha256'"
sed 's/^swap_total_bytes = .*/swap_total_bytes = 9007199254740993/' "$work/h200.toml" >"$work/oob.toml" && reseal "$work/oob.toml"
sed 's/^schema_version = .*/schema_version = 99/' "$work/h200.toml" >"$work/future.toml" && reseal "$work/future.toml"
cp "$work/h200.toml" "$work/fresh.toml"
"$coli" profile import "$work/fresh.toml" "$work/oob.toml" "$work/future.toml" --dir "$work/dest" >/dev/null 2>"$work/o.err"
check "out-of-bounds import exits 1" test $? -eq 1
check "out-of-bounds field named" contains "$work/o.err" "'memory.swap_total_bytes' = 9007199254740993 is out of range"
check "future schema named" contains "$work/o.err" "'schema_version' = 99 is newer than this build"
check "all or nothing: the good file was not imported" test ! -e "$work/dest/fresh.toml"
"$coli" profile import "$work/h200.toml" >/dev/null 2>"$work/again.err"
check "existing profile is not replaced without --force" contains "$work/again.err" "exists: pass --force"

# diff, show.
"$coli" profile diff "$work/first.toml" "$work/h200.toml" >"$work/d.out" 2>&1
check "diff exits 1 when fields differ" test $? -eq 1
check "diff names the dropped UUID" contains "$work/d.out" "^gpus.cuda\[0\].uuid: '[0-9a-f]*' -> ''$"
"$coli" profile show "$work/h200.toml" >"$work/s.out" 2>&1
check "show prints the class" contains "$work/s.out" "^class *class-v1:"

# merge five profiles of one class, one of them 30% slower: flagged by name.
for i in 1 2 3 4 5; do
  factor=1.0; [ $i -eq 3 ] && factor=0.7
  awk -v f=$factor '/^\[\[measurements.memory_bandwidth.points\]\]/{m=1} /^\[\[measurements.disk/{m=0}
    m && /^(median|best|worst)_gb_per_s = /{split($0,a," = "); printf "%s = %.6f\n", a[1], a[2]*f; next} {print}' \
    "$profiles/h200-xeon-16c.toml" >"$work/node$i.toml"
  reseal "$work/node$i.toml"  # as if each machine exported its own measurements
done
"$coli" profile merge "$work"/node{1,2,3,4,5}.toml --out "$work/merged.toml" >"$work/m.out" 2>&1
check "merge exits 0" test $? -eq 0
check "outlier flagged by name" contains "$work/m.out" "^FINDING: node3.toml is 30% slower than its peers in memory_bandwidth"
check "only one finding" test "$(grep -c '^FINDING' "$work/m.out")" -eq 1
check "merged file is a valid export" "$coli" profile validate --no-live "$work/merged.toml"

# coli-plan re-validates: memory is this machine's, never the file's.
"$plan" --profile "$work/h200.toml" --model "$fixtures/model-configs/Qwen3-30B-A3B.json" --toml >"$work/p.toml" 2>"$work/p.err"
check "coli-plan on a shared profile exits 0" test $? -eq 0
check "coli-plan names the class mismatch" contains "$work/p.err" "does not match this machine's class"
live_kib=$(awk '/^MemAvailable:/{print $2}' /proc/meminfo)
planned=$(awk -F' = ' '/^headroom_bytes = /{print $2; exit}' "$work/p.toml")
check "plan headroom is at most this machine's MemAvailable" test "$planned" -le $((live_kib * 1024 + (1 << 30)))
finish
