#!/usr/bin/env bash
# CLI tests of `weft calibrate --gpu` on a machine without a GPU, and of the
# cluster file it writes. Without a GPU (or in a build without CUDA) the
# command exits 1 with one line and writes nothing. The file format is
# checked on tests/data/cluster-gpu-synthetic.json (what the fit writes from
# synthetic points; tests/test_gpu.c keeps it current): every verb that takes
# a cluster accepts it, a single-GPU plan is estimated on it with the fitted
# numbers, and a hand-edited point that no longer matches its bandwidths is
# refused with one line naming the field. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
SRC=${WEFT_SOURCE_DIR:-.}
FIX="$SRC/tests/data/cluster-gpu-synthetic.json"

# ---- the refusal ------------------------------------------------------------------------
if [ -e /dev/nvidia0 ] || [ -e /dev/nvidiactl ]; then
  echo "a GPU device node is present: the refusal checks do not apply here"
else
  expect_fail "calibrate --gpu without a GPU" "--gpu" calibrate --gpu
  expect_fail "calibrate --gpu -o without a GPU" "--gpu" calibrate --gpu --quick -o "$tmp/never.json"
  check "no file written without a GPU" test ! -e "$tmp/never.json"
  # the message is the build's: no CUDA, or CUDA with no driver/device
  check "the refusal says why" grep -q -E "built without CUDA|cudaGetDeviceCount" "$tmp/f.err"
  # under mpiexec every rank stops with the same message, no rank hangs
  MPIEXEC=${MPIEXEC:-$(command -v mpiexec || true)}
  if [ -n "$MPIEXEC" ]; then
    timeout 120 "$MPIEXEC" -n 2 "$WEFT" calibrate --gpu -o "$tmp/never2.json" >"$tmp/m.out" 2>"$tmp/m.err"
    rc=$?
    check "mpiexec -n 2 calibrate --gpu: exit 1 (got $rc)" test $rc -eq 1
    check "mpiexec -n 2: the refusal on stderr" grep -q -E "built without CUDA|cudaGetDeviceCount" "$tmp/m.err"
    check "mpiexec -n 2: no file" test ! -e "$tmp/never2.json"
  fi
fi
expect_fail "--base without --gpu" "--base" calibrate --base dgx-a100
expect_fail "--devices without --gpu" "--devices" calibrate --devices 2
expect_fail "--threads with --gpu" "--threads" calibrate --gpu --threads 4

# ---- the file ---------------------------------------------------------------------------
"$WEFT" clusters "$FIX" >"$tmp/show.out" 2>"$tmp/show.err"
check "weft clusters accepts a calibrated file" test $? -eq 0
"$WEFT" clusters "$FIX" --json >"$tmp/back.json" 2>/dev/null
check "weft clusters --json reads it back" "$PY" -c '
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
for k in ("levels", "overlap_slowdown", "p2p_overhead_s", "reduce_bps"):
    assert a[k] == b[k], k
for k in ("matrix_flops", "mem_bw_bps", "mem_bytes", "matrix_eff", "fp8_flops", "op_overhead_s"):
    assert a["device"][k] == b["device"][k], k
m = a["measured"]
assert m["devices"] == 8 and len(m["kernels"]) > 30 and len(m["collectives"]) == 70
' "$FIX" "$tmp/back.json"

# A single-GPU step on the calibrated device: the estimate runs and uses its peak.
"$WEFT" estimate --model gpt:layers=2,hidden=1024,heads=16,seq=1024,vocab=32000 --cluster "$FIX" --batch 8 \
  --plan dp=1 --json >"$tmp/est.json" 2>"$tmp/est.err"
check "estimate on the calibrated file ($(head -c 200 "$tmp/est.err"))" test $? -eq 0
check "the estimate is a positive time" "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))
assert 0 < e["iteration_time_s"] < 10, e["iteration_time_s"]
assert e["fits"]
' "$tmp/est.json"
"$WEFT" plan --model gpt:layers=2,hidden=1024,heads=16,seq=1024,vocab=32000 --cluster "$FIX" --batch 16 \
  --json >"$tmp/plan.json" 2>"$tmp/plan.err"
check "plan on the calibrated file" test $? -eq 0
"$WEFT" simulate --model gpt:layers=2,hidden=1024,heads=16,seq=1024,vocab=32000 --cluster "$FIX" --batch 16 \
  --plan dp=8 --json >"$tmp/sim.json" 2>"$tmp/sim.err"
check "simulate on the calibrated file" test $? -eq 0

# ---- refusals of the measured section -----------------------------------------------------
"$PY" - "$FIX" "$tmp/bad.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["measured"]["collectives"][5]["busbw_bps"] *= 2
json.dump(c, open(sys.argv[2], "w"))
PYEOF
expect_fail "a bus bandwidth that bytes / seconds does not give" "measured.collectives\[5\].busbw_bps" \
  clusters "$tmp/bad.json"
"$PY" - "$FIX" "$tmp/bad2.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["measured"]["kernels"][0]["dtype"] = "int4"
json.dump(c, open(sys.argv[2], "w"))
PYEOF
expect_fail "an unknown dtype" "measured.kernels\[0\].dtype" estimate --model mlp-tiny --cluster "$tmp/bad2.json" \
  --batch 8 --plan dp=1

finish calibrate_gpu
