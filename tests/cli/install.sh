#!/usr/bin/env bash
# `cmake --install BUILD --prefix P` puts the weft binary in P/bin and the docs
# in P/share/doc/weft (issue 22, item 8), and the installed binary runs;
# `weft --version` and `weft version` print project()'s version and, in a git
# checkout, the commit built. $1 is the weft binary (in the build directory).
source "$(dirname "$0")/lib.sh" "$1"
SRC="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
BUILD=$(dirname "$WEFT")
CMAKE=${CMAKE:-cmake}

want=$(sed -n 's/^project(weft VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
check "project() has a version ($want)" test -n "$want"
# In a git checkout the line names a commit of it (the one built: HEAD unless
# commits were made since the build), else the version alone.
ingit=0
[ -e "$SRC/.git" ] && command -v git >/dev/null && git -C "$SRC" rev-parse HEAD >/dev/null 2>&1 && ingit=1
version_ok() { # the line printed
  if [ $ingit -eq 1 ]; then
    [[ "$1" =~ ^weft\ $want\ \(commit\ ([0-9a-f]{12})\)$ ]] && git -C "$SRC" cat-file -e "${BASH_REMATCH[1]}^{commit}"
  else
    [ "$1" = "weft $want" ]
  fi
}

"$CMAKE" --install "$BUILD" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1
check "cmake --install --prefix exits 0 ($(tail -1 "$tmp/install.log"))" test $? -eq 0
check "the binary lands in PREFIX/bin" test -x "$tmp/prefix/bin/weft"
check "the docs land in PREFIX/share/doc/weft" test -f "$tmp/prefix/share/doc/weft/export.md" -a -f "$tmp/prefix/share/doc/weft/README.md"
v=$("$tmp/prefix/bin/weft" --version)
check "--version: $v" version_ok "$v"
check "version = --version" test "$("$tmp/prefix/bin/weft" version)" = "$v"
expect_fail "version takes no arguments" "no arguments" version --json
# The installed binary runs on PATH, from anywhere (no file of the build or source tree needed).
(cd "$tmp" && PATH="$tmp/prefix/bin:$PATH" weft plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 64 --top 1) >"$tmp/plan.out" 2>"$tmp/plan.err"
check "installed weft plans from PATH ($(tail -1 "$tmp/plan.err"))" test $? -eq 0
check "installed weft prints the best plan last" grep -q "^dp=" <(tail -1 "$tmp/plan.out")
finish install.sh
