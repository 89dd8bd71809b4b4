#!/usr/bin/env bash
# cmake/GitCommit.cmake: the commit --version reports, from a git checkout and
# from a tarball without .git (the configured fallback, else "unknown").
# usage: git_commit_test.sh PATH/TO/cmake SOURCE_DIR
set -u
cmake="$1"
source_dir="$2"
source "$(dirname "$0")/check.sh"

commit_of() {  # commit_of SOURCE_DIR FALLBACK -> the COLI_GIT_COMMIT the script writes
  rm -f "$work/commit.h"
  "$cmake" -DSOURCE_DIR="$1" -DOUT="$work/commit.h" -DCOMMIT_FALLBACK="$2" -P "$source_dir/cmake/GitCommit.cmake" &&
    sed -n 's/^#define COLI_GIT_COMMIT "\(.*\)"$/\1/p' "$work/commit.h"
}

if command -v git >/dev/null && git -C "$source_dir" rev-parse HEAD >/dev/null 2>&1; then
  head="$(git -C "$source_dir" rev-parse --short=12 HEAD)"
  check "a checkout reports its commit" grep -qE "^$head(\+dirty)?$" <<<"$(commit_of "$source_dir" unknown)"
fi
mkdir -p "$work/tarball"
check "a tarball without .git reports the fallback" test "$(commit_of "$work/tarball" unknown)" = unknown
check "a configured commit is reported" test "$(commit_of "$work/tarball" 1a2b3c4d)" = 1a2b3c4d
commit_of "$work/tarball" 1a2b3c4d >/dev/null
touch -d '2000-01-01' "$work/commit.h"
"$cmake" -DSOURCE_DIR="$work/tarball" -DOUT="$work/commit.h" -DCOMMIT_FALLBACK=1a2b3c4d -P "$source_dir/cmake/GitCommit.cmake"
check "an unchanged commit leaves the header alone (nothing recompiles)" test "$(stat -c %Y "$work/commit.h")" -lt 1000000000
finish
