#!/usr/bin/env bash
# CLI tests of SuperScaler's plan kinds for models other than transformers:
# co-shard (coshard=K) and NF1B (nf1b=1, a model with recycle=N). `weft plan
# --whole-model` proposes co-shard where nothing else fits (AlphaFold2 at 1280
# residues on one A100), the default `weft plan` ranks co-shard and NF1B with
# the op-level best, the kinds are named in the JSON, the simulator agrees with the estimate within 3%, and what cannot
# run (the runtime, the framework exports, bad combinations) is refused in
# one line naming the key.
# $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"

M="alphafold:layers=8,seq=128,msa=64,recycle=3"
AF2S="alphafold:layers=4,seq=64,msa=32,recycle=3"
C="dgx-a100:nodes=1"
# At 1280 residues one sample's Evoformer block does not fit an A100 even
# with every block checkpointed: only pieces fit.
"$WEFT" plan --whole-model --model alphafold2:seq=1280 --cluster $C --devices 1 --batch 4 --top 3 --json >"$tmp/c.json" 2>/dev/null
check "plan on one device exits 0" test $? -eq 0
check "plan on one device: best is co-sharded and fits" "$PY" - "$tmp/c.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]
assert b["plan_kind"] in ("co-shard", "NF1B + co-shard"), b["plan_kind"]
assert ",coshard=" in b["plan"] and b["fits"], b
EOF
# The default search (op-level for models other than transformers) ranks the
# whole-model plans with co-shard or NF1B on the one price: the only plan
# that fits one device here is co-sharded.
"$WEFT" plan --model alphafold:layers=2,seq=1536 --cluster $C --devices 1 --batch 4 --json >"$tmp/d.json" 2>/dev/null
check "default plan on one device exits 0" test $? -eq 0
check "default plan proposes co-shard where nothing else fits" "$PY" - "$tmp/d.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
w = j["whole_model_best"]
assert w["plan_kind"] == "co-shard" and w["fits"], w
assert j["answer"] == w["plan"], j["answer"]
EOF
plain=$("$WEFT" plan --model alphafold:layers=2,seq=1536 --cluster $C --devices 1 --batch 4 2>/dev/null)
check "default plan's answer on stdout is the co-sharded plan" "$PY" -c 'import sys; assert ",coshard=" in sys.argv[1], sys.argv[1]' "$plain"
# With recycling on 8 devices: NF1B against the op-level best, one price.
"$WEFT" plan --model $AF2S --cluster $C --batch 64 --json >"$tmp/n.json" 2>/dev/null
check "default plan with recycling exits 0" test $? -eq 0
check "default plan ranks NF1B with the op-level best" "$PY" - "$tmp/n.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
w, b = j["whole_model_best"], j["best"]
assert w["plan_kind"].startswith("NF1B") and ",nf1b=1" in w["plan"], w
o = b["one_model"]["iteration_time_s"] if b.get("one_model") else b["iteration_time_s"]
assert (j.get("answer") == w["plan"]) == (w["iteration_time_s"] < o), (j.get("answer"), w["iteration_time_s"], o)
EOF
"$WEFT" plan --whole-model --model alphafold2 --cluster $C --batch 128 --top 3 --json >"$tmp/w.json" 2>/dev/null
check "whole-model plan of AlphaFold2 exits 0" test $? -eq 0
best=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$tmp/w.json")
"$WEFT" simulate --model alphafold2 --cluster $C --batch 128 --plan "$best" --json >"$tmp/s.json" 2>/dev/null
check "simulate the best plan" test $? -eq 0
check "simulator within 3% of the estimate" "$PY" - "$tmp/s.json" "$tmp/w.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))["best"]
assert abs(s["iteration_time_s"] / e["iteration_time_s"] - 1) < 0.03, (s["iteration_time_s"], e["iteration_time_s"])
assert abs(s["memory_per_device_bytes"] / e["memory_per_device_bytes"] - 1) < 0.03
EOF
"$WEFT" estimate --model $M --cluster $C --batch 64 --plan "dp=2,pp=4,mbs=1,recompute=full,coshard=4,nf1b=1" --json >"$tmp/e.json" 2>/dev/null
check "estimate names the kind" "$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["plan_kind"] == "NF1B 1F1B + co-shard"' "$tmp/e.json"

expect_fail "co-shard without full recomputation" recompute estimate --model $M --cluster $C --batch 64 --plan "dp=8,mbs=1,coshard=4"
expect_fail "co-shard of a transformer" transformer estimate --model gpt-tiny --cluster $C --batch 64 --plan "dp=8,recompute=full,coshard=2"
expect_fail "NF1B without recycling" recycle estimate --model resnet50 --cluster $C --batch 64 --plan "dp=8,nf1b=1"
expect_fail "coshard=0" coshard estimate --model $M --cluster $C --batch 64 --plan "dp=8,coshard=0"
expect_fail "export refuses NF1B" nf1b export "dp=8,nf1b=1" --to ddp --model $M --cluster $C --batch 64
expect_fail "the runtime refuses co-shard on stages with tp" coshard train --model mlp-tiny --data synthetic --batch 8 --plan "pp=2,tp=2,dp=1,mbs=2,recompute=full,coshard=2" --steps 1
expect_fail "dap of a model other than AlphaFold2" dap estimate --model resnet50 --cluster $C --batch 64 --plan "dp=4,dap=2"
expect_fail "export refuses DAP" dap export "dp=4,dap=2" --to megatron --model $M --cluster $C --batch 64
expect_fail "the runtime refuses DAP" dap train --model alphafold:layers=2,seq=64,msa=32,recycle=0 --data synthetic --batch 8 --plan "dp=1,dap=2" --steps 1

finish coshard
