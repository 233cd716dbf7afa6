#!/usr/bin/env bash
# Every source file under src/ has a base name of its own (a stack trace, a
# profile or a grep names one file), headers included.
set -uo pipefail
SRC=${WEFT_SOURCE_DIR:-$(pwd)}
cd "$SRC" || exit 1
n=$(find src -name '*.c' -o -name '*.h' | wc -l)
dups=$(find src \( -name '*.c' -o -name '*.h' \) -printf '%f\n' | sort | uniq -d)
if [ -n "$dups" ]; then
  for b in $dups; do echo "FAIL: $b: $(find src -name "$b" | sort | tr '\n' ' ')"; done
  exit 1
fi
[ "$n" -ge 100 ] || { echo "FAIL: only $n files found under src/"; exit 1; }
echo "ok: $n files under src/, every base name unique"
