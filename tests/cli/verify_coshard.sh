#!/usr/bin/env bash
# `weft plan --verify` of a co-shard plan (issue 24): an op-level plan has no
# co-shard, so verify prices the whole-model plan on the estimate's model (one
# number, `weft estimate`'s own within 0.1%) instead of lowering it without its
# pieces, and refuses to write the op-level form (-o) by name. Whole-stage and
# per-op co-shard, an AlphaFold2 of 8 blocks and Swin-L. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"

CL=dgx-a100:nodes=1
while read -r M B P; do
  "$WEFT" estimate --model "$M" --cluster $CL --batch "$B" --plan "$P" --json >"$tmp/e.json" 2>/dev/null
  check "$M $P: estimate" test $? -eq 0
  "$WEFT" plan --verify "$P" --model "$M" --cluster $CL --batch "$B" --json >"$tmp/v.json" 2>"$tmp/v.err"
  check "$M $P: verify" test $? -eq 0
  check "$M $P: one number, the estimate's within 0.1%, not lowered" "$PY" - "$tmp/e.json" "$tmp/v.json" <<'PY'
import json, sys
e, v = (json.load(open(f)) for f in sys.argv[1:3])
assert v["lowered"] is False, v
w = v["whole_model"]
assert abs(w["iteration_time_s"] / e["iteration_time_s"] - 1) < 1e-3, (w["iteration_time_s"], e["iteration_time_s"])
assert abs(w["memory_per_device_bytes"] / e["memory_per_device_bytes"] - 1) < 1e-3
assert "coshard=" in v["plan"], v["plan"]
PY
  "$WEFT" plan --verify "$P" --model "$M" --cluster $CL --batch "$B" >"$tmp/h.out" 2>&1
  check "$M $P: the human answer names the whole-model price" grep -q "priced as the whole-model plan" "$tmp/h.out"
  expect_fail "$M $P: -o refused" "co-shard" plan --verify "$P" --model "$M" --cluster $CL --batch "$B" -o "$tmp/ol.json"
  check "$M $P: no op-level file written" test ! -e "$tmp/ol.json"
done <<'CASES'
alphafold:layers=8,seq=256 8 dp=8,mbs=1,recompute=full,coshard=2
swin-l 256 dp=8,mbs=32,recompute=full,coshard=2
swin-l 256 dp=8,mbs=32,coshard=4@attention
alphafold:layers=8,seq=256 8 dp=8,mbs=1,recompute=full,coshard=4@*.tri_*
CASES

finish verify_coshard
