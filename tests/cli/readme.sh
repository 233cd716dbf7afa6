#!/usr/bin/env bash
# Runs every example of README.md: each line starting with "$ " inside a
# ```console block, with "weft" replaced by the built binary. Each must exit 0.
set -uo pipefail
WEFT=$(readlink -f "$1")
SRC=${WEFT_SOURCE_DIR:-$(pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0; n=0
inblock=0
while IFS= read -r line; do
  case "$line" in
    '```console'*) inblock=1; continue ;;
    '```'*) inblock=0; continue ;;
  esac
  [ $inblock -eq 1 ] || continue
  case "$line" in
    '$ '*) ;;
    *) continue ;;
  esac
  cmd=${line#'$ '}
  # Replace the program name where it stands as a word at the start or after mpiexec -n N.
  cmd=$(printf '%s' "$cmd" | sed -E "s#(^|[[:space:]])weft([[:space:]]|$)#\1$WEFT\2#g")
  n=$((n+1))
  if ! bash -c "$cmd" >"$tmp/out.$n" 2>"$tmp/err.$n"; then
    echo "README example failed: $line"
    tail -5 "$tmp/err.$n"
    fail=$((fail+1))
  fi
done < "$SRC/README.md"
echo "$((n-fail)) passed, $fail failed"
[ $n -gt 0 ] && [ $fail -eq 0 ]
