#!/usr/bin/env bash
# The shared prologue of the CLI tests, sourced as
#   source "$(dirname "$0")/lib.sh" "$1"
# with $1 the weft binary. It sets WEFT (that binary, absolute), PY (the
# system python3, for JSON checks), tmp (a directory removed on exit) and
# fail (the count of failed checks), and defines:
#   check NAME CMD...             runs CMD; a non-zero exit is a failed check
#   expect_fail NAME WORD ARGS... weft ARGS exits 1 with nothing on stdout and
#                                 one stderr line that contains WORD
#   finish NAME                   prints the summary and exits 1 if any failed
# Run directly (as CTest does with every tests/cli/*.sh), it checks itself:
# the helpers count failures and expect_fail holds a command to its contract.
set -uo pipefail
WEFT=$(readlink -f "$1")
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

check() { # name, then a command; counts failures
  local name=$1
  shift
  if ! "$@"; then
    echo "FAIL: $name"
    fail=$((fail + 1))
  fi
}

expect_fail() { # name, word, then weft's arguments
  local name=$1 word=$2
  shift 2
  "$WEFT" "$@" >"$tmp/f.out" 2>"$tmp/f.err"
  local rc=$?
  check "$name: exit 1 (got $rc)" test $rc -eq 1
  check "$name: empty stdout" test ! -s "$tmp/f.out"
  check "$name: one stderr line" test "$(wc -l <"$tmp/f.err")" -eq 1
  check "$name: names '$word'" grep -q -- "$word" "$tmp/f.err"
}

finish() { # the script's name
  if [ "$fail" -ne 0 ]; then
    echo "$1: $fail check(s) failed"
    exit 1
  fi
  echo "$1: all checks passed"
  exit 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Self-test: a passing and a failing check; expect_fail on a real user
  # error (passes) and on a success (four failed checks).
  check "true passes" true
  check "false fails (expected)" false >/dev/null
  [ "$fail" -eq 1 ] || { echo "FAIL: check did not count one failure ($fail)"; exit 1; }
  fail=0
  expect_fail "bad model" "no-such-model" estimate --model no-such-model --cluster dgx-a100 --batch 8 --plan dp=1
  [ "$fail" -eq 0 ] || { echo "FAIL: expect_fail on a user error"; exit 1; }
  expect_fail "a success" "zzz-not-there" models --json >/dev/null
  [ "$fail" -eq 4 ] || { echo "FAIL: expect_fail on a success counted $fail failures, not 4"; exit 1; }
  fail=0
  finish lib.sh
fi
