#!/usr/bin/env bash
# Defaults a user expects (issue 9, item 5): a plan string that leaves dp out
# fills the devices (devices / tp x pp); without mbs, pp = 1 means no gradient
# accumulation (mbs = batch / dp) and pp > 1 Megatron's micro-batch of 1; a
# preset cluster named without nodes= is its full size; and the output says
# what was assumed (the table's "assumed" line, --json's "assumed"). In
# `weft train`, dp left out is the ranks launched. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"

"$WEFT" estimate --model gpt3-175b --cluster dgx-a100:nodes=16 --batch 64 --plan tp=8,pp=2 --json >a.json 2>/dev/null
check "dp fills the 128 devices" "$PY" - <<'PYEOF'
import json
j = json.load(open("a.json"))
assert j["devices"] == 128 and j["plan"].startswith("dp=8,tp=8,pp=2,mbs=1,"), (j["devices"], j["plan"])
assert "dp=8 (the 128 devices / tp x pp = 16)" in j["assumed"] and "mbs=1" in j["assumed"], j["assumed"]
assert j["micro_batches"] == 8, j["micro_batches"]
PYEOF
"$WEFT" estimate --model gpt2 --cluster dgx-a100:nodes=8 --batch 4096 --plan dp=64 --json >b.json 2>/dev/null
check "pp=1 without mbs: no gradient accumulation" "$PY" - <<'PYEOF'
import json
j = json.load(open("b.json"))
assert j["plan"].startswith("dp=64,tp=1,pp=1,mbs=64,") and j["micro_batches"] == 1, (j["plan"], j["micro_batches"])
assert j["assumed"] == "mbs=64 (batch / dp: no gradient accumulation)", j["assumed"]
PYEOF
"$WEFT" estimate --model gpt2 --cluster dgx-a100:nodes=8 --batch 4096 --plan dp=64,mbs=64 --json >c.json 2>/dev/null
check "the same plan given in full: same numbers, nothing assumed" "$PY" - <<'PYEOF'
import json
b, c = json.load(open("b.json")), json.load(open("c.json"))
assert b["iteration_time_s"] == c["iteration_time_s"] and "assumed" not in c
PYEOF
"$WEFT" estimate --model gpt2 --cluster dgx-a100 --batch 512 --plan dp=8 >d.txt 2>/dev/null
check "a preset without nodes= says its size" grep -q "^assumed .*cluster dgx-a100: the preset's 64 nodes x 8 = 512 devices" d.txt
"$WEFT" plan --model gpt2 --cluster dgx-a100 --batch 512 >e.txt 2>/dev/null
check "plan says the preset's size" grep -q "^assumed cluster dgx-a100: the preset's 64 nodes" e.txt
expect_fail "tp x pp that does not divide the devices" "does not divide the 8 devices" estimate --model gpt3-175b \
  --cluster dgx-a100:nodes=1 --batch 64 --plan tp=3
"$WEFT" train --model mlp-tiny --data synthetic --batch 32 --plan dp=1 --steps 1 --json >t.json 2>t.err
check "train: mbs = the whole per-rank batch" grep -q "global batch 32 = 1 x 1 micro-batch(es) of 32" t.err
check "train: says what it assumed" grep -q "^assumed    mbs=32" t.err
if [ -n "${MPIEXEC:-}" ] && command -v "$MPIEXEC" >/dev/null; then
  "$MPIEXEC" -n 2 "$WEFT" train --model mlp-tiny --data synthetic --batch 32 --plan mbs=4 --steps 1 >/dev/null 2>m.err
  check "train under mpiexec -n 2: dp is the ranks" grep -q "ranks      2, global batch 32 = 2 x 4 micro-batch(es) of 4" m.err
fi
finish defaults.sh
