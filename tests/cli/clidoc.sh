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
