#!/usr/bin/env bash
# CLI tests of `weft calibrate --quick`: the cluster file it writes parses, is
# accepted by the library's reader (`weft clusters FILE`), holds plausible
# measured numbers (an efficiency table sorted by FLOPs with the peak at 1);
# under mpiexec -n 2 it measures the link too; without -o the JSON goes to
# stdout; bad options exit 1 with one line. When `weft estimate` exists, it
# must accept the calibrated cluster. $1 is the weft binary.
set -uo pipefail
WEFT=$(readlink -f "$1")
PY=/usr/bin/python3
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || true)}
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

# check.py FILE RANKS: the cluster file's format and measured numbers.
cat >"$tmp/check.py" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
assert c["format"] == "weft-cluster", c["format"]
assert c["name"] == "local-calibrated:ranks=%d,nodes=1" % ranks, c["name"]
d = c["device"]
peak = d["matrix_flops"]["fp32"]
assert 1e9 < peak < 1e13, peak
# the vector rate is the runtime's own GELU kernel: a Debug/sanitizer build
# (unoptimized, instrumented) runs it near 1e8 FLOP/s
assert 1e7 < d["vector_flops"]["fp32"] < 1e13, d["vector_flops"]
assert 1e8 < d["mem_bw_bps"] < 1e13, d["mem_bw_bps"]
assert d["mem_eff"] == 1 and d["vector_eff"] == 1
eff = d["matrix_eff"]
assert len(eff) >= 5, eff
flops = [e["min_flops"] for e in eff]
assert flops == sorted(flops, reverse=True) and len(set(flops)) == len(flops), flops
assert all(0 < e["eff"] <= 1 for e in eff), eff
assert max(e["eff"] for e in eff) == 1, eff  # the peak is one of the measured sizes
assert min(flops) == 2 * 32 ** 3, flops      # the smallest measured sgemm
l0 = c["levels"][0]
assert l0["name"] == "node", l0
if ranks > 1:
    assert l0["size"] == ranks, l0
    # plausible, not fast: on a loaded 2-core machine two busy-polling ranks
    # wait for the CPU, and a round trip can take milliseconds
    assert 0 < l0["latency_s"] < 0.1, l0
    assert 1e6 < l0["bw_bps"] < 1e12 and 0 < l0["eff"] <= 1, l0
    assert c["reduce_bps"] == 0  # the all-reduce fit already includes the reduction
PYEOF

# ---- one process ----------------------------------------------------------------------
start=$(date +%s%N)
"$WEFT" calibrate --quick -o "$tmp/c.json" >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
took_ms=$((($(date +%s%N) - start) / 1000000))
check "calibrate --quick exits 0" test $rc -eq 0
check "calibrate -o writes nothing on stdout" test ! -s "$tmp/c.out"
check "calibrate prints the table on stderr" grep -q "sgemm peak" "$tmp/c.err"
check "calibrate says the BLAS and its kernels" grep -Eq "^BLAS: .+, core [A-Za-z0-9]+" "$tmp/c.err"
check "calibrate --quick takes the median of 3 repeats" grep -q "each the median of 3 repeats" "$tmp/c.err"
# the noise verdict agrees with the spread it prints (warning exactly when over 10%)
check "the noise warning matches the spread" "$PY" -c '
import os, re, sys
t = open(sys.argv[1]).read()
m = re.search(r"the widest spread: [^,]+, (\d+)%", t)
assert m, t
warned = "too noisy to calibrate: " in t and " varied by " in t
assert warned == (int(m.group(1)) > 10) or int(m.group(1)) == 10, (m.group(0), warned)
# the load verdict: printed exactly when the load average at the start exceeds the cores it names
ml = re.search(r"too noisy to calibrate: load average ([0-9.]+) on (\d+) cores", t)
if ml:
    assert float(ml.group(1)) > int(ml.group(2)), ml.group(0)
mload = re.search(r"load average ([0-9.]+)\)", t)
assert mload, t
assert (ml is not None) == (float(mload.group(1)) > os.cpu_count()), (mload.group(0), ml)
' "$tmp/c.err"
# How long it took is a benchmark, not a check (bench/, docs/runtime.md): printed only.
echo "calibrate --quick took $took_ms ms"
check "cluster file from one process" "$PY" "$tmp/check.py" "$tmp/c.json" 1
"$WEFT" clusters "$tmp/c.json" --json >"$tmp/back.json" 2>"$tmp/back.err"
check "weft clusters accepts the calibrated file" test $? -eq 0
check "the file reads back unchanged" "$PY" -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["device"] == b["device"] and a["levels"] == b["levels"], (a, b)
' "$tmp/c.json" "$tmp/back.json"

# ---- the JSON on stdout without -o ------------------------------------------------------
"$WEFT" calibrate --quick >"$tmp/s.json" 2>/dev/null
check "calibrate without -o exits 0" test $? -eq 0
check "calibrate without -o prints the cluster on stdout" "$PY" "$tmp/check.py" "$tmp/s.json" 1

# ---- two ranks --------------------------------------------------------------------------
if [ -n "$MPIEXEC" ]; then
  "$MPIEXEC" -n 2 "$WEFT" calibrate --quick -o "$tmp/c2.json" >"$tmp/c2.out" 2>"$tmp/c2.err"
  check "mpiexec -n 2 calibrate exits 0" test $? -eq 0
  check "mpiexec -n 2 prints the message table once" test "$(grep -c 'p2p in node:' "$tmp/c2.err")" -eq 1
  check "cluster file from two ranks" "$PY" "$tmp/check.py" "$tmp/c2.json" 2
  "$WEFT" clusters "$tmp/c2.json" >/dev/null 2>&1
  check "weft clusters accepts the two-rank file" test $? -eq 0
else
  echo "skipping the mpiexec part: no mpiexec"
fi

# ---- errors -------------------------------------------------------------------------------
for args in "--threads 0" "--bogus" "extra-positional" "-o /nonexistent-dir/c.json --quick"; do
  # shellcheck disable=SC2086
  "$WEFT" calibrate $args >"$tmp/e.out" 2>"$tmp/e.err"
  check "calibrate $args exits 1" test $? -eq 1
  check "calibrate $args prints one line" test "$(wc -l <"$tmp/e.err")" -eq 1
done
check "an unwritable -o is named" grep -q "/nonexistent-dir" "$tmp/e.err"

# ---- estimate accepts it (once estimate exists) -----------------------------------------------
if "$WEFT" estimate --help >/dev/null 2>&1; then
  "$WEFT" estimate --model mlp-tiny --cluster "$tmp/c.json" --batch 64 --plan dp=1 --json \
    >"$tmp/est.json" 2>"$tmp/est.err"
  check "estimate accepts the calibrated cluster ($(head -c 300 "$tmp/est.err"))" test $? -eq 0
  check "estimate on the calibrated cluster predicts a time" "$PY" -c \
    'import json,sys; e=json.load(open(sys.argv[1])); assert e["iteration_time_s"] > 0, e' "$tmp/est.json"
  if [ -f "$tmp/c2.json" ]; then
    "$WEFT" estimate --model mlp-tiny --cluster "$tmp/c2.json" --batch 64 --plan dp=2 --json \
      >/dev/null 2>"$tmp/est2.err"
    check "estimate accepts the two-rank cluster with dp=2 ($(head -c 300 "$tmp/est2.err"))" test $? -eq 0
  fi
else
  echo "skipping the estimate part: weft estimate is not built yet"
fi

if [ $fail -ne 0 ]; then
  echo "$fail check(s) failed"
  exit 1
fi
echo "calibrate: all checks passed"
