#!/usr/bin/env bash
# Lowering (issue 9, item 1): a whole-model plan string becomes the op-level
# plan of the same layouts. `weft plan --verify PLAN -o FILE` writes it; the
# file is an op-level plan every reader of op-level plans accepts; Megatron's
# signatures are checked op by op; a CNN's lowering costs as its estimate
# does (within 5%); the keys that are not layouts travel with the file, and
# the one cost model estimates the file as the plan. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
M=gpt:layers=4,hidden=256,heads=8,seq=128,vocab=512
"$WEFT" plan --model "$M" --cluster dgx-a100:nodes=2 --batch 16 --verify dp=2,tp=4,pp=2,mbs=2,sp=1 \
  -o "$tmp/low.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
check "lowering exits 0" test $? -eq 0
check "the op-level form is named" grep -q "lowered to the op-level plan mesh=2x4,pp=2,micro_batches=4" "$tmp/out.txt"
check "Megatron's layouts" $PY - "$tmp/low.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["plan"] == "mesh=2x4,pp=2,micro_batches=4", j["plan"]
L = j["layouts"]
want = {"layers.0.attn.qkv": "S0,B,B->S0|B,S1,S0->S2", "layers.0.attn.proj": "S0,B,B->S0|S2,S0,P->P",
        "layers.0.attn.core": "S0,S0,S0->S0|S2,S2,S2->S2", "layers.0.mlp.fc1": "S0,B,B->S0|B,S1,S0->S2",
        "layers.0.mlp.fc2": "S0,B,B->S0|S2,S0,P->P", "layers.0.ln1": "S0,B,B->S0|S1,B,B->S1",
        "embed.tokens": "S0,B->S0|B,S0->P"}
for op, sig in want.items():
    assert L[op].replace(" ", "") == sig, (op, L[op], sig)
assert j["stages"] == ["embed.tokens", "layers.2.ln1"], j["stages"]
PYEOF
check "the file verifies" sh -c '"$0" plan --model "$1" --cluster dgx-a100:nodes=2 --batch 16 --verify "$2" >/dev/null 2>&1' \
  "$WEFT" "$M" "$tmp/low.json"
check "estimate reads it" sh -c '"$0" estimate --model "$1" --cluster dgx-a100:nodes=2 --batch 16 --plan "$2" >/dev/null 2>&1' \
  "$WEFT" "$M" "$tmp/low.json"
# Other models: dp on the mesh, the estimate's stage cut; both models agree.
"$WEFT" plan --model resnet50 --cluster dgx-a100:nodes=1 --batch 64 --verify dp=4,pp=2,mbs=8 --json >"$tmp/r.json" 2>/dev/null
check "resnet50 lowered: op-level and estimate within 5%" $PY - "$tmp/r.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
a, b = j["iteration_time_s"], j["whole_model"]["iteration_time_s"]
assert abs(a / b - 1) < 0.05, (a, b)
PYEOF
"$WEFT" plan --model "$M" --cluster dgx-a100:nodes=1 --batch 16 --verify dp=8,recompute=full,zero=1,overlap=0 \
  -o "$tmp/k.json" >"$tmp/d.txt" 2>&1
check "the keys that are not layouts are named" grep -q "with keys vpp=1,recompute=full,zero=1,overlap=0" "$tmp/d.txt"
check "the op-level file carries them" "$PY" -c \
  'import json,sys; k=json.load(open(sys.argv[1]))["keys"]; assert "recompute=full" in k and "zero=1" in k and "overlap=0" in k, k' \
  "$tmp/k.json"
# One cost model: the op-level file estimates as the plan it lowers.
"$WEFT" estimate --model "$M" --cluster dgx-a100:nodes=1 --batch 16 --plan "$tmp/k.json" --json >"$tmp/k1.json" 2>/dev/null
"$WEFT" estimate --model "$M" --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8,recompute=full,zero=1,overlap=0 \
  --json >"$tmp/k2.json" 2>/dev/null
check "estimate of the op-level file = estimate of the plan string (1%)" "$PY" - "$tmp/k1.json" "$tmp/k2.json" <<'PYEOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["plan"] == b["plan"], (a["plan"], b["plan"])
assert abs(a["iteration_time_s"] / b["iteration_time_s"] - 1) < 0.01, (a["iteration_time_s"], b["iteration_time_s"])
assert abs(a["memory_per_device_bytes"] / b["memory_per_device_bytes"] - 1) < 0.01
for k, v in b["breakdown"].items():
    assert abs(a["breakdown"][k] - v) <= 0.01 * abs(v) + 1e-6 * b["iteration_time_s"], k
assert a["op_level_plan"].startswith("mesh="), a
PYEOF
# Expert parallelism: an expert axis carved out of the data-parallel ranks.
"$WEFT" plan --model moe-tiny --cluster dgx-a100:nodes=1 --batch 16 --verify dp=8,ep=4 -o "$tmp/ep.json" \
  >"$tmp/ep.txt" 2>/dev/null
check "ep lowers to mesh edp x ep" grep -q "op-level plan mesh=2x4,pp=1" "$tmp/ep.txt"
check "experts split on the ep axis, tokens' rows on the other" "$PY" - "$tmp/ep.json" <<'PYEOF'
import json, sys
L = {k: v.replace(" ", "") for k, v in json.load(open(sys.argv[1]))["layouts"].items()}
assert L["layers.0.moe.dispatch"] == "S0,S0->S1|S0,S0->S1", L["layers.0.moe.dispatch"]
assert L["layers.0.moe.experts"] == "S1,B,B->S1|S0,S0,S0->S0", L["layers.0.moe.experts"]
assert L["layers.0.moe.combine"] == "S1,S0,S0->S0|S1,S0,S0->S0", L["layers.0.moe.combine"]
PYEOF
expect_fail "cp has no op-level form" "no op-level form" plan --model "$M" --cluster dgx-h100:nodes=1 --batch 16 \
  --verify dp=4,cp=2 -o "$tmp/x.json"
expect_fail "-o of an op-level file" "already" plan --model "$M" --cluster dgx-a100:nodes=2 --batch 16 \
  --verify "$tmp/low.json" -o "$tmp/y.json"
finish lower.sh
