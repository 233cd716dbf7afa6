#!/usr/bin/env bash
# A mixture of experts trains on the CPU runtime (issue 15, item 4, without
# expert parallelism): moe-tiny (softmax top-2 router, four SwiGLU experts and
# a shared one per layer) on the fortunes corpus; the loss falls. $1 is the
# weft binary.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
"$WEFT" train --model moe-tiny --data text:fortunes --batch 16 --plan auto --steps 40 --lr 3e-3 --json \
  >"$tmp/moe.json" 2>"$tmp/moe.err"
check "moe-tiny trains" test $? -eq 0
check "its loss falls by a fifth" "$PY" - "$tmp/moe.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
first, last = j["first_loss"], j["final_loss"]
assert last < 0.8 * first, (first, last)
PYEOF
expect_fail "ep must divide the ranks" "must divide" train --model moe-tiny --data text:fortunes --batch 16 \
  --plan dp=1,ep=2 --steps 1
finish train_moe.sh
