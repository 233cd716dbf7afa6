#!/usr/bin/env bash
# src/kernels/ holds the fp32 kernels with no MPI: no file there includes
# mpi.h, directly or through a project header it includes (followed to any
# depth), and none names an MPI symbol.
set -uo pipefail
SRC=${WEFT_SOURCE_DIR:-$(pwd)}
cd "$SRC" || exit 1
fail=0
seen=" "
queue=$(ls src/kernels/*.c src/kernels/*.h)
while [ -n "$queue" ]; do
  next=""
  for f in $queue; do
    case "$seen" in *" $f "*) continue ;; esac
    seen="$seen$f "
    if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]' "$f"; then
      echo "FAIL: $f includes mpi.h"; fail=1
    fi
    for h in $(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$f"); do
      for d in include src; do
        [ -f "$d/$h" ] && next="$next $d/$h"
      done
    done
  done
  queue=$next
done
if grep -nE '\bMPI_[A-Za-z]' src/kernels/*; then
  echo "FAIL: src/kernels/ names an MPI symbol"; fail=1
fi
n=$(echo "$seen" | wc -w)
[ "$n" -ge 9 ] || { echo "FAIL: only $n files checked"; fail=1; }
[ $fail -eq 0 ] && echo "ok: $n files (src/kernels/ and the headers it includes) free of MPI"
exit $fail
