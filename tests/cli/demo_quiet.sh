#!/usr/bin/env bash
# `make demo` is quiet (issue 26): the set-up and the build go to
# BUILD/demo-build.log, and only a failure prints it. A stand-in cmake (first
# on PATH) prints 400 build lines and succeeds or fails, so the Makefile's rule
# is checked without rebuilding; the demo itself runs the real weft ($1).
source "$(dirname "$0")/lib.sh" "$1"
SRC=${WEFT_SOURCE_DIR:-$(pwd)}
mkdir -p "$tmp/bin" "$tmp/b"
ln -s "$WEFT" "$tmp/b/weft"
cat >"$tmp/bin/cmake" <<'FAKE'
#!/bin/sh
i=0
while [ $i -lt 400 ]; do echo "[ 50%] Building C object line $i"; i=$((i + 1)); done
exit "${FAKE_CMAKE_RC:-0}"
FAKE
chmod +x "$tmp/bin/cmake"
PATH="$tmp/bin:$PATH" make -s -C "$SRC" demo BUILD="$tmp/b" >"$tmp/out" 2>&1
rc=$?
check "make demo: exit 0 (got $rc)" test $rc -eq 0
check "make demo: no build line on the terminal" sh -c '! grep -q "Building C object" "$0"' "$tmp/out"
check "make demo: one line before the demo, naming the log" sh -c \
  'head -1 "$0" | grep -q "^built .*/weft (set-up and build log: .*demo-build.log)$"' "$tmp/out"
check "make demo: the demo ran" test "$(wc -l <"$tmp/out")" -gt 20
check "make demo: the build lines are in the log" test "$(grep -c "Building C object" "$tmp/b/demo-build.log")" -eq 800
FAKE_CMAKE_RC=1 PATH="$tmp/bin:$PATH" make -s -C "$SRC" demo BUILD="$tmp/b" >"$tmp/out" 2>&1
rc=$?
check "failed build: make demo fails (got $rc)" test $rc -ne 0
check "failed build: the log is printed" grep -q "Building C object line 399" "$tmp/out"
check "failed build: says so in one line" grep -q "^make demo: the set-up or the build failed" "$tmp/out"
finish demo_quiet.sh
