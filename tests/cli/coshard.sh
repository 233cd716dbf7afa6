#!/usr/bin/env bash
# CLI tests of SuperScaler's plan kinds for models other than transformers:
# co-shard (coshard=K) and NF1B (nf1b=1, a model with recycle=N). `weft plan
# --whole-model` proposes co-shard where nothing else fits (AlphaFold2 on one
# A100) and NF1B for AlphaFold2's recycling on a pipeline, names the kinds in
# its JSON, the simulator agrees with the estimate within 3%, and what cannot
# run (the runtime, the framework exports, bad combinations) is refused in
# one line naming the key.
# $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"

M="alphafold:layers=8,seq=128,msa=64,recycle=3"
C="dgx-a100:nodes=1"
"$WEFT" plan --whole-model --model alphafold2 --cluster $C --devices 1 --batch 4 --top 3 --json >"$tmp/c.json" 2>/dev/null
check "plan on one device exits 0" test $? -eq 0
check "plan on one device: best is co-sharded and fits" "$PY" - "$tmp/c.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]
assert b["plan_kind"] in ("co-shard", "NF1B + co-shard"), b["plan_kind"]
assert ",coshard=" in b["plan"] and b["fits"], b
EOF
"$WEFT" plan --whole-model --model alphafold2 --cluster $C --batch 128 --top 3 --json >"$tmp/n.json" 2>/dev/null
check "plan with recycling exits 0" test $? -eq 0
check "plan with recycling: best runs NF1B" "$PY" - "$tmp/n.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]
assert b["plan_kind"].startswith("NF1B"), b["plan_kind"]
assert ",nf1b=1" in b["plan"], b["plan"]
EOF
best=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$tmp/n.json")
"$WEFT" simulate --model alphafold2 --cluster $C --batch 128 --plan "$best" --json >"$tmp/s.json" 2>/dev/null
check "simulate the NF1B plan" test $? -eq 0
check "simulator within 3% of the estimate" "$PY" - "$tmp/s.json" "$tmp/n.json" <<'EOF'
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
expect_fail "the runtime refuses co-shard on stages" coshard train --model mlp-tiny --data synthetic --batch 8 --plan "pp=2,dp=1,recompute=full,coshard=2" --steps 1

finish coshard
