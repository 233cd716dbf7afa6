#!/usr/bin/env bash
# `weft simulate --plan FILE` of an op-level plan (issue 9, item 4): a plan
# the op-level search writes for a model that is not a transformer (its
# layouts split the classifier over a model-parallel axis, its stages
# pipelined) is played from its layouts; the output says so, keeps the
# simulate contract (JSON fields, a breakdown that adds up, --trace), and
# agrees with `weft estimate --plan FILE` within 3%, and its trace shows the
# layouts' boxing collectives on the model-parallel channel. A file whose layouts the
# one cost model does not take exits 1 with one line. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
C=dgx-a100:nodes=1
for spec in "mlp-tiny --mesh 4" "cnn-tiny --mesh 4" "mlp --mesh 2"; do
  set -- $spec
  m=$1
  shift
  "$WEFT" plan --model "$m" --cluster $C --batch 64 --op-level "$@" -o "$tmp/$m.json" >/dev/null 2>&1
  check "$m: weft plan --op-level $* writes a plan" test -s "$tmp/$m.json"
  "$WEFT" estimate --model "$m" --cluster $C --batch 64 --plan "$tmp/$m.json" --json >"$tmp/e.json" 2>/dev/null
  check "$m: estimate exits 0" test $? -eq 0
  "$WEFT" simulate --model "$m" --cluster $C --batch 64 --plan "$tmp/$m.json" --json --trace "$tmp/t.json" \
    >"$tmp/s.json" 2>"$tmp/s.err"
  check "$m: simulate exits 0" test $? -eq 0
  check "$m: played from its layouts" grep -q "played from its layouts" "$tmp/s.err"
  check "$m: simulated within 3% of the estimate, the contract kept" "$PY" - "$tmp/s.json" "$tmp/e.json" \
    "$tmp/t.json" <<'PYEOF'
import json, sys
s, e, t = (json.load(open(p)) for p in sys.argv[1:4])
assert s["op_level_plan"].startswith("mesh="), s.get("op_level_plan")
assert s["plan"] == e["plan"], (s["plan"], e["plan"])
a, b = s["iteration_time_s"], e["iteration_time_s"]
assert abs(a / b - 1) <= 0.03, (a, b)
for bd in [s["breakdown"]] + [x["breakdown"] for x in s["stages"]]:
    total = bd["compute"] + bd["recompute"] + bd["bubble"] + bd["optimizer"] + bd["exposed_comm"]
    assert abs(total - a) <= 1e-6 * a, (total, a)
# The boxing collectives of the model-parallel axis, on channel 0 (tid 1).
comm = [x for x in t["traceEvents"] if x.get("ph") == "X" and x.get("tid") == 1 and x["name"].startswith("tp ")]
assert comm, "no collective of the model-parallel axis in the trace"
PYEOF
done
"$WEFT" simulate --model mlp --cluster $C --batch 64 --plan "$tmp/mlp.json" >"$tmp/h.txt" 2>&1
check "the human table names the op-level plan" grep -q "op-level plan mesh=2,pp=.*played from its layouts" "$tmp/h.txt"
# Both mesh axes model-parallel: each axis's collectives on its sub-group, as the estimate.
"$WEFT" plan --model mlp --cluster $C --batch 64 --op-level --mesh 2x4 -o "$tmp/2d.json" >/dev/null 2>&1
"$WEFT" estimate --model mlp --cluster $C --batch 64 --plan "$tmp/2d.json" --json >"$tmp/2de.json" 2>/dev/null
"$WEFT" simulate --model mlp --cluster $C --batch 64 --plan "$tmp/2d.json" --json >"$tmp/2ds.json" 2>/dev/null
check "two model-parallel axes: simulated within 3% of the estimate" "$PY" - "$tmp/2de.json" "$tmp/2ds.json" <<'PYEOF'
import json, sys
e, s = (json.load(open(f))["iteration_time_s"] for f in sys.argv[1:3])
assert abs(s / e - 1) < 0.03, (e, s)
PYEOF
# Three mesh axes: the one cost model does not take them.
"$WEFT" plan --model mlp-tiny --cluster $C --batch 64 --op-level --mesh 2x2x2 -o "$tmp/3d.json" >/dev/null 2>&1
expect_fail "layouts the cost model does not take" "the simulator plays the layouts the one cost model takes" \
  simulate --model mlp-tiny --cluster $C --batch 64 --plan "$tmp/3d.json"
# Operator fusion of an op-level plan: its one candidate (fc1+relu1) fused.
"$WEFT" simulate --model mlp-tiny --cluster $C --batch 64 --plan "$tmp/mlp-tiny.json" --fuse auto --json \
  >"$tmp/olfuse.json" 2>"$tmp/olfuse.err"
check "op-level fusion exits 0" test $? -eq 0
check "op-level fusion report" $PY -c "
import json,sys
j=json.load(open(sys.argv[1])); f=j['fusion']
assert f['candidates'] == 1 and f['fused'] == 1 and f['ops'] == 'fc1+relu1', f
assert f['gain'] > 0 and 0 < f['ideal_time_s'] <= j['iteration_time_s'], f" "$tmp/olfuse.json"
# A mixture of experts on a mesh of three axes (edp x ep x tp): estimated and
# simulated as the plan string it is the lowering of.
MP="dp=4,ep=2,tp=2"
"$WEFT" plan --verify "$MP" --model moe-tiny --cluster dgx-a100:nodes=1 --batch 64 -o "$tmp/moe.json" >/dev/null 2>&1
for v in estimate simulate; do
  "$WEFT" $v --model moe-tiny --cluster dgx-a100:nodes=1 --batch 64 --plan "$tmp/moe.json" --json >"$tmp/moe-$v-f.json" 2>"$tmp/moe-$v.err"
  "$WEFT" $v --model moe-tiny --cluster dgx-a100:nodes=1 --batch 64 --plan "$MP" --json >"$tmp/moe-$v-s.json" 2>/dev/null
done
check "expert plan file: mesh of three axes" grep -q '"plan":.*mesh=2x2x2' "$tmp/moe.json"
check "expert plan file: no fallback warning" sh -c "! grep -q 'instead' '$tmp/moe-estimate.err'"
check "expert plan file: estimated and simulated as its plan string" "$PY" - "$tmp"/moe-estimate-f.json \
  "$tmp"/moe-estimate-s.json "$tmp"/moe-simulate-f.json "$tmp"/moe-simulate-s.json <<'PYEOF'
import json, sys
a, b, c, d = (json.load(open(f)) for f in sys.argv[1:5])
assert a["iteration_time_s"] == b["iteration_time_s"] and a["breakdown"] == b["breakdown"], (a, b)
assert a["memory_per_device_bytes"] == b["memory_per_device_bytes"]
assert abs(c["iteration_time_s"] / d["iteration_time_s"] - 1) < 1e-9, (c["iteration_time_s"], d["iteration_time_s"])
assert a["breakdown"]["ep_comm"] > 0
PYEOF
finish simulate_oplevel
