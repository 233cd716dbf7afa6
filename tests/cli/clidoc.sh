#!/usr/bin/env bash
# docs/cli.md must equal what scripts/gen-cli-doc writes from the option tables.
set -euo pipefail
WEFT=$(readlink -f "$1")
SRC=${WEFT_SOURCE_DIR:-$(pwd)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs"
(cd "$tmp" && bash "$SRC/scripts/gen-cli-doc" "$WEFT")
if diff -u "$SRC/docs/cli.md" "$tmp/docs/cli.md" > "$tmp/diff"; then
  echo "1 passed, 0 failed"
else
  head -40 "$tmp/diff"; echo "docs/cli.md is stale: run scripts/gen-cli-doc build/weft"; echo "0 passed, 1 failed"; exit 1
fi
# Every verb's usage line lists every option of its table (issue 13: the
# usage line is generated from the table, as the option list is).
for v in $("$WEFT" --help | awk '/^verbs:/{f=1;next} f&&NF{print $1}'); do
  "$WEFT" "$v" --help >"$tmp/h"
  usage=$(awk '/^usage:/{f=1} f&&/^$/{exit} f' "$tmp/h")
  for opt in $(awk '/^options:/{f=1;next} f' "$tmp/h" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    [ "$opt" = "--help" ] && continue
    if ! grep -q -- "$opt\b" <<<"$usage"; then
      echo "FAIL: weft $v: usage line lacks $opt"; exit 1
    fi
  done
done
echo "usage lines: every option listed"
