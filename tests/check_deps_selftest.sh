#!/usr/bin/env bash
# scripts/check-deps must fail on an edge docs/architecture.md does not allow:
# a copy of src/, include/ and docs/ passes as it is, then fails once the
# simulator includes the search (the edge issue 23 removed), once the runtime
# declares a search function by hand, and once a module other than the
# runtime includes mpi.h.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh() { rm -rf "$tmp/r"; mkdir -p "$tmp/r"; cp -r "$root/src" "$root/include" "$root/docs" "$tmp/r/"; }
check() { python3 "$root/scripts/check-deps" "$tmp/r" >"$tmp/out" 2>&1; }
fresh
check || { cat "$tmp/out"; echo "FAIL: the tree as it is does not pass"; exit 1; }
fresh
echo '#include "weft/search.h"' >>"$tmp/r/src/sim/dp.c"
if check; then echo "FAIL: sim -> search passed"; exit 1; fi
grep -q 'src/sim/dp.c:[0-9]*: sim includes weft/search.h' "$tmp/out" || { cat "$tmp/out"; exit 1; }
fresh
echo 'wf_status wf_search_outer(void);' >>"$tmp/r/src/runtime/data.c"
if check; then echo "FAIL: runtime declaring wf_search_outer passed"; exit 1; fi
grep -q 'runtime declares wf_search_outer of search by hand' "$tmp/out" || { cat "$tmp/out"; exit 1; }
fresh
echo '#include <mpi.h>' >>"$tmp/r/src/sched/comm.c"
if check; then echo "FAIL: sched including mpi.h passed"; exit 1; fi
grep -q 'src/sched/comm.c:[0-9]*: includes <mpi.h>' "$tmp/out" || { cat "$tmp/out"; exit 1; }
echo "check-deps: catches sim -> search, a hand-declared search call and mpi.h outside the runtime"
