#!/usr/bin/env bash
# Per-layer plans of a mixture of experts (docs/planner.md, "Per-layer
# plans"). deepseek-tiny's layer 0 is dense, layers 1-2 have experts. A plan
# file whose expert layers (and embedding and head) run the lowering of
# dp=8,ep=4 and whose dense layer runs that of dp=2,tp=4 (both on mesh 2x4)
# is written from two lowered files (weft plan --verify -o). Then:
#   - weft estimate prices it layer by layer (plan_kind per-layer) at another
#     time than either whole-model plan;
#   - weft simulate agrees with it within 3%;
#   - weft plan --verify prints the estimate's number (within 0.1%);
#   - weft train and weft export refuse it in one line;
#   - a dense layer whose layouts are no whole-model plan's is refused in one
#     line;
#   - weft plan and weft plan --op-level report the fastest per-layer plan
#     on the one price (--json: per_layer).
# $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
M=deepseek-tiny
C=dgx-a100:nodes=1
B=64
"$WEFT" plan --verify dp=8,ep=4 --model $M --cluster $C --batch $B -o "$tmp/moe.json" >/dev/null 2>&1
check "the expert plan's lowering written" test -s "$tmp/moe.json"
"$WEFT" plan --verify dp=2,tp=4 --model $M --cluster $C --batch $B -o "$tmp/dense.json" >/dev/null 2>&1
check "the dense plan's lowering written" test -s "$tmp/dense.json"
check "per-layer file spliced" "$PY" - "$tmp/moe.json" "$tmp/dense.json" "$tmp/pl.json" "$tmp/bad.json" <<'PYEOF'
import json, sys
moe, dense = (json.load(open(p)) for p in sys.argv[1:3])
assert moe["plan"] == dense["plan"], (moe["plan"], dense["plan"])
for k, v in dense["layouts"].items():
    if k.startswith("layers.0."):
        moe["layouts"][k] = v
json.dump(moe, open(sys.argv[3], "w"), indent=1)
moe["layouts"]["layers.0.mlp.down"] = "S0,B->S0|S0,B->S0"
json.dump(moe, open(sys.argv[4], "w"), indent=1)
PYEOF
run() { "$WEFT" "$@" --model $M --cluster $C --batch $B; }
run estimate --plan "$tmp/pl.json" --json >"$tmp/e.json" 2>"$tmp/e.err"
check "estimate exits 0" test $? -eq 0
run estimate --plan dp=8,ep=4 --json >"$tmp/em.json" 2>/dev/null
run estimate --plan dp=2,tp=4 --json >"$tmp/ed.json" 2>/dev/null
run simulate --plan "$tmp/pl.json" --json >"$tmp/s.json" 2>"$tmp/s.err"
check "simulate exits 0" test $? -eq 0
run plan --verify "$tmp/pl.json" >"$tmp/v.txt" 2>&1
check "plan --verify exits 0" test $? -eq 0
check "estimate, simulate and verify agree" "$PY" - "$tmp/e.json" "$tmp/em.json" "$tmp/ed.json" "$tmp/s.json" \
  "$tmp/v.txt" <<'PYEOF'
import json, re, sys
e, em, ed, s = (json.load(open(p)) for p in sys.argv[1:5])
v = open(sys.argv[5]).read()
assert e["plan_kind"] == "per-layer", e.get("plan_kind")
assert "dense layers dp=2 tp=4" in e["per_layer"], e["per_layer"]
assert "ep=4" in e["expert_plan"], e["expert_plan"]
t = e["iteration_time_s"]
for w in (em, ed):
    assert abs(t / w["iteration_time_s"] - 1) > 1e-6, (t, w["iteration_time_s"])
assert s["plan_kind"] == "per-layer"
assert abs(s["iteration_time_s"] / t - 1) <= 0.03, (s["iteration_time_s"], t)
assert abs(s["estimate_s"] / t - 1) <= 1e-12
m = re.search(r"([0-9.]+) s per iteration", v)
assert m, v
assert abs(float(m.group(1)) / t - 1) <= 1e-3, (m.group(1), t)
PYEOF
expect_fail "train refuses a per-layer plan" "per-layer plan" train --model $M --data synthetic --batch $B \
  --plan "$tmp/pl.json" --steps 1
expect_fail "export refuses an op-level plan" "no framework form" export --to megatron "$tmp/pl.json" --model $M \
  --cluster $C --batch $B
expect_fail "a dense layer in no plan's layouts" "dense layers are the lowering of no whole-model plan" \
  estimate --plan "$tmp/bad.json" --model $M --cluster $C --batch $B
"$WEFT" plan --op-level --model $M --cluster $C --batch $B --json >"$tmp/u.json" 2>/dev/null
check "plan --op-level exits 0" test $? -eq 0
"$WEFT" plan --model $M --cluster $C --batch $B --json >"$tmp/p.json" 2>/dev/null
check "plan exits 0" test $? -eq 0
check "both searches report the fastest per-layer plan" "$PY" - "$tmp/u.json" "$tmp/p.json" <<'PYEOF'
import json, sys
u, p = (json.load(open(x)) for x in sys.argv[1:3])
for pl in (u["per_layer"], p["per_layer"]):
    assert pl["iteration_time_s"] > 0 and pl["costed"] >= 1, pl
    assert "dense layers" in pl["layers"], pl
assert u["best"]["plan_kind"] in ("per-layer", "no pipeline"), u["best"]["plan_kind"]
PYEOF
finish perlayer
