#!/usr/bin/env bash
# A mixture of experts trains on the CPU runtime (issue 15, item 4): moe-tiny
# (softmax top-2 router, four SwiGLU experts and a shared one per layer) on
# the fortunes corpus; the loss falls, in one process and with its experts
# split over 2 ranks (`--plan ep=2` under mpiexec -n 2: dp left out is the
# ranks, and the ep ranks are carved out of them), where every step's loss
# is the single process's (relative 1e-5). $1 is the weft binary; $MPIEXEC
# (set by CTest) launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
common=(--model moe-tiny --data text:fortunes --batch 16 --steps 40 --lr 3e-3)
# Capacity (factor 1: tokens beyond it are dropped) counts the tokens of one
# micro-batch, so the single process takes a rank's 8 samples at a time.
"$WEFT" train "${common[@]}" --plan mbs=8 --log "$tmp/one.jsonl" --json >"$tmp/moe.json" 2>"$tmp/moe.err"
check "moe-tiny trains" test $? -eq 0
check "its loss falls by a fifth" "$PY" - "$tmp/moe.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
first, last = j["first_loss"], j["final_loss"]
assert last < 0.8 * first, (first, last)
PYEOF
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --plan ep=2 --log "$tmp/ep.jsonl" --json >"$tmp/ep.json" 2>"$tmp/ep.err"
check "moe-tiny trains with ep=2 on 2 ranks" test $? -eq 0
check "ep=2: 40 steps logged" test "$(losses "$tmp/ep.jsonl" | wc -l)" -eq 40
check "ep=2: every loss within 1e-5 of one process" awk '
  NR == FNR { one[FNR] = $1; next }
  { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
  END { exit bad }' <(losses "$tmp/one.jsonl") <(losses "$tmp/ep.jsonl")
check "ep=2: its loss falls by a fifth" "$PY" - "$tmp/ep.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ranks"] == 2, j["ranks"]
assert j["final_loss"] < 0.8 * j["first_loss"], (j["first_loss"], j["final_loss"])
PYEOF
# The op-level form of ep=2 (`weft plan --verify -o`: the experts split on
# the mesh's axis, the all-to-all between) trains as the plan string.
"$WEFT" plan --verify dp=2,ep=2 --model moe-tiny --cluster local --batch 16 -o "$tmp/ep-ol.json" >/dev/null 2>&1
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 5 --plan "$tmp/ep-ol.json" --log "$tmp/epol.jsonl" \
  >/dev/null 2>"$tmp/epol.err"
check "ep=2's op-level plan file trains" test $? -eq 0
check "ep=2's op-level plan file: the plan string's losses" cmp <(losses "$tmp/ep.jsonl" | head -5) \
  <(losses "$tmp/epol.jsonl")
expect_fail "ep must divide the ranks" "must divide" train --model moe-tiny --data text:fortunes --batch 16 \
  --plan dp=1,ep=2 --steps 1
"$MPIEXEC" -n 4 "$WEFT" train --model moe-tiny --data text:fortunes --batch 16 --plan dp=2,ep=2 --steps 1 \
  >"$tmp/f.out" 2>"$tmp/f.err"
check "dp=2,ep=2 on 4 ranks is refused" test $? -eq 1
check "the refusal says dp=4,ep=2" grep -q "dp=4,ep=2 here" "$tmp/f.err"
expect_fail "etp is not run" "etp=2" train --model moe-tiny --data text:fortunes --batch 16 --plan ep=1,etp=2 \
  --steps 1
finish train_moe.sh
