# Shared by the CLI test scripts (source it): a scratch directory removed on
# exit, check NAME COMMAND... counting passes and failures, contains FILE PATTERN,
# lacks FILE PATTERN, and finish, which prints the closing "N passed, N failed" line and sets the exit code.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Hermetic: no profile of the user's or the system's is found by default
# (coli-plan and coli run look for one when --profile is not given).
export XDG_CONFIG_HOME="$work/config" COLI_SYSTEM_PROFILE_DIR="$work/system-profiles"
unset COLI_PROFILE_PATH
passed=0
failed=0

check() {  # check NAME CONDITION-COMMAND...
  local name="$1"
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name" >&2
  fi
}

contains() { grep -q -- "$2" "$1"; }
lacks() { ! grep -q -- "$2" "$1"; }

finish() {
  echo "$passed passed, $failed failed"
  test "$failed" -eq 0
}
