#!/usr/bin/env bash
# One price per plan (issue 23, item 2): any plan the op-level search returns,
# written to a file and estimated by `weft estimate`, gives the search's own
# figure within 0.1%; `weft plan --verify` of that file prints the same
# figure, and only that one. Models: an MLP, a CNN, BERT-Large on 64 V100s
# (mesh 8x8) and Megatron 22B at tp=8 (mesh 8); tests/test_oneprice.c checks
# every plan of the ranking and the frontier too. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
n=0
one() { # model cluster batch, then the search's extra options
  local model=$1 cluster=$2 batch=$3
  shift 3
  n=$((n + 1))
  local f="$tmp/p$n.json"
  "$WEFT" plan --model "$model" --cluster "$cluster" --batch "$batch" "$@" --json -o "$f" \
    >"$tmp/s$n.json" 2>/dev/null
  check "$model: op-level search exits 0" test $? -eq 0
  "$WEFT" estimate --model "$model" --cluster "$cluster" --batch "$batch" --plan "$f" --json \
    >"$tmp/e$n.json" 2>/dev/null
  check "$model: estimate of the search's file exits 0" test $? -eq 0
  "$WEFT" plan --model "$model" --cluster "$cluster" --batch "$batch" --verify "$f" --json \
    >"$tmp/v$n.json" 2>/dev/null
  check "$model: --verify of the search's file exits 0" test $? -eq 0
  check "$model: search = estimate = --verify (0.1%)" "$PY" - "$model" "$tmp/s$n.json" "$tmp/e$n.json" \
    "$tmp/v$n.json" <<'PYEOF'
import json, sys
model = sys.argv[1]
b = json.load(open(sys.argv[2]))["best"]
e = json.load(open(sys.argv[3]))
v = json.load(open(sys.argv[4]))
s, t, w = b["iteration_time_s"], e["iteration_time_s"], v["iteration_time_s"]
print(f"{model}: {b['plan']}: search {s:.6g} s, estimate {t:.6g} s, verify {w:.6g} s")
assert "proxy_time_s" not in b
assert b["priced_by"] == "one_model", b["priced_by"]
assert abs(s - t) <= 1e-3 * t, (s, t)
assert abs(w - t) <= 1e-3 * t, (w, t)
assert abs(b["memory_per_device_bytes"] - e["memory_per_device_bytes"]) <= 1e-3 * e["memory_per_device_bytes"]
PYEOF
}
one mlp dgx-a100:nodes=1 64
# --verify prints one figure: the plan's time appears once, in its "best:" line.
f="$tmp/p1.json"
"$WEFT" plan --model mlp --cluster dgx-a100:nodes=1 --batch 64 --verify "$f" >"$tmp/v1.txt" 2>&1
check "--verify prints one time per plan" test "$(grep -c "s per iteration" "$tmp/v1.txt")" -eq 1
check "--verify names no second price" test "$(grep -c "proxy" "$tmp/v1.txt")" -eq 0
one resnet50 dgx-a100:nodes=1 256
one bert-large v100-ib100:nodes=16 512 --op-level --mesh 8x8
one megatron-22b dgx-a100:nodes=1 8 --op-level --mesh 8 --max-memory 400
finish oneprice
