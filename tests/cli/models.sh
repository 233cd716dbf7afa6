#!/usr/bin/env bash
# CLI tests of `weft models` and `weft show`: the JSON of show parses and its
# numbers match closed forms (GPT-3 175B parameters and Megatron's training
# FLOPs), errors exit 1 with one line on stderr, and the listing has the zoo.
# $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"

# ---- weft show gpt3-175b --json --------------------------------------------------
"$WEFT" show gpt3-175b --json >"$tmp/g.json" 2>"$tmp/g.err"
check "show --json exits 0" test $? -eq 0
check "show --json writes nothing on stderr" test ! -s "$tmp/g.err"
check "show --json fields and values" "$PY" - "$tmp/g.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("name", "family", "params", "forward_flops_per_sample", "training_flops_per_sample",
          "activation_bytes_per_sample", "layers"):
    assert k in j, k
assert j["name"] == "gpt3-175b" and j["family"] == "gpt", j["name"]
s, l, h, V = 2048, 96, 12288, 51200
p = 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h
assert j["params"] == p, (j["params"], p)
want = 72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
got = j["training_flops_per_sample"]
assert abs(got - want) / want < 0.01, (got, want)
assert abs(j["forward_flops_per_sample"] * 3 - got) / got < 0.01
# 34 s h + 5 a s^2 bytes per layer and sequence (fp16), plus embedding and head
a = 96
layer = 34 * s * h + 5 * a * s * s
assert layer * l <= j["activation_bytes_per_sample"] <= layer * l * 1.05, j["activation_bytes_per_sample"]
ops = j["layers"]
assert len(ops) == j["forward_ops"]
blk = [o for o in ops if o["block"] == 0 and o["layer"] == 0]
assert len(blk) == 13, len(blk)
assert {o["layer"] for o in ops if o["block"] == 0} == set(range(96))
qkv = [o for o in blk if o["name"] == "layers.0.attn.qkv"][0]
assert qkv["kind"] == "linear" and qkv["tp"] == "col" and qkv["shape"] == [1, 2048, 3 * h]
assert qkv["params"] == h * 3 * h + 3 * h
assert qkv["fwd_flops"] >= 2 * s * h * 3 * h
assert sum(o["params"] for o in ops) >= j["params"]  # the tied table is read twice
EOF

# ---- --batch and --seq ------------------------------------------------------------------
"$WEFT" show gpt2 --json --batch 4 --seq 256 >"$tmp/b.json"
check "show --batch --seq" "$PY" - "$tmp/b.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["batch"] == 4 and j["config"]["seq"] == 256
s, l, h, V = 256, 12, 768, 50257
want = 72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
assert abs(j["training_flops_per_sample"] - want) / want < 0.01
assert j["layers"][0]["shape"] == [4, 256, 768]
EOF

# ---- human output goes to stdout ------------------------------------------------------------
"$WEFT" show gpt2 >"$tmp/h.out" 2>"$tmp/h.err"
check "show human exits 0" test $? -eq 0
check "show human on stdout" grep -q "x 12 layers" "$tmp/h.out"
check "show human params" grep -q "124439808" "$tmp/h.out"
check "show human quiet stderr" test ! -s "$tmp/h.err"
"$WEFT" show resnet50 --json >"$tmp/r.json"
check "show resnet50 params" "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["params"]==25557032, j["params"]' "$tmp/r.json"

# ---- errors: exit 1, one line on stderr, nothing on stdout ----------------------------------
err_case() { # name, args...
  local name=$1
  shift
  "$WEFT" "$@" >"$tmp/e.out" 2>"$tmp/e.err"
  local rc=$?
  check "$name: exit 1 (got $rc)" test $rc -eq 1
  check "$name: one line on stderr" test "$(wc -l <"$tmp/e.err")" -eq 1
  check "$name: nothing on stdout" test ! -s "$tmp/e.out"
}
err_case "unknown model" show gpt5
check "unknown model is named" grep -q "gpt5" "$tmp/e.err"
err_case "unknown key" show gpt2:layrs=3 --json
check "unknown key is named" grep -q "layrs" "$tmp/e.err"
err_case "bad value" show gpt2:heads=7
err_case "bad batch" show gpt2 --batch 0
err_case "seq on a cnn" show resnet50 --seq 128
err_case "missing model" show
err_case "unknown option" show gpt2 --frobnicate
echo '{"family": "gpt", "layerz": 2}' >"$tmp/bad.json"
err_case "bad model file" show "$tmp/bad.json"
check "bad model file names the field" grep -q "layerz" "$tmp/e.err"

# ---- weft models -------------------------------------------------------------------------------
"$WEFT" models >"$tmp/m.out"
check "models exits 0" test $? -eq 0
check "models lists gpt3-175b" grep -qE '^gpt3-175b +gpt +174\.6B' "$tmp/m.out"
check "models lists resnet50" grep -qE '^resnet50 ' "$tmp/m.out"
"$WEFT" models --json >"$tmp/m.json"
check "models --json" "$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
names = {m["name"]: m for m in j["models"]}
assert names["gpt3-175b"]["params"] == 174615846912
assert names["vgg16"]["params"] == 138357544
assert names["gpt-tiny"]["dtype"] == "fp32"
' "$tmp/m.json"

# ---- show --cluster ----------------------------------------------------------------------------------
"$WEFT" show --cluster dgx-a100:nodes=2 --json >"$tmp/c.json"
check "show --cluster --json" "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert "dgx-a100" in j["name"]' "$tmp/c.json"
"$WEFT" show --cluster dgx-a100 >"$tmp/c.out"
check "show --cluster human" grep -q "devices" "$tmp/c.out"
err_case "unknown cluster" show --cluster nosuch
err_case "model and cluster" show gpt2 --cluster dgx-a100

if [ $fail -ne 0 ]; then
  echo "$fail check(s) failed"
  exit 1
fi
echo "models CLI: all checks passed"
