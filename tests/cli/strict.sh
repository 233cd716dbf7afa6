#!/usr/bin/env bash
# Issue 26: every message whole and true, user numbers checked, strict input,
# failing early. $1 is the weft binary.
#  - context is added once and the innermost cause kept (wf_error_prefix):
#    an ONNX model whose external weights are missing, --plan auto with no
#    fitting plan;
#  - every plan key with 0, -1, 2^31, 2^63 and device products that overflow:
#    exit 1 and one line (the valid 0s of flags excepted); per-stage
#    rc_layers 65534 refused (was wrapped in a short); --batch 2^31 refused
#    before any allocation, naming the batch;
#  - plan values are plain integers (no sign, no spaces), control bytes are
#    escaped in messages;
#  - Hugging Face configs with mistyped fields, a NUL in a name or two
#    architectures are refused by name; JSON errors give line and column;
#  - outputs (-o DIR/), checkpoint directories and --emit formats are checked
#    before any work; --resume --log is linear in the log;
#  - every verb exits 1 when standard output cannot be written;
#  - a mistyped verb gets a did-you-mean.
SRC=$(readlink -f "${WEFT_SOURCE_DIR:-$(dirname "$0")/../..}")
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"
export OPENBLAS_NUM_THREADS=1
est=(estimate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16)

# ---- context once, cause kept ----------------------------------------------------------
expect_fail "missing external weights" "issue26-missing-weights.bin" train \
  --model "$SRC/tests/data/hostile/issue26-external-missing.onnx" --data synthetic --batch 2 --steps 1 --plan dp=1
check "external weights: the whole message" grep -qx \
  "weft train: tensor 'w': external data: cannot open $SRC/tests/data/hostile/issue26-missing-weights.bin: No such file or directory" \
  "$tmp/f.err"
expect_fail "--plan auto, nothing fits" "no plan fits" train \
  --model llama:layers=2,hidden=8192,heads=64,ffn=32768,vocab=32000,seq=4096 --data synthetic --batch 8 --steps 1 \
  --plan auto
check "--plan auto: the context once" test "$(grep -o -- '--plan auto on' "$tmp/f.err" | wc -l)" -eq 1
check "--plan auto: the whole message" grep -q \
  "^weft train: --plan auto on 1 rank of cluster local: no plan fits: the smallest memory found is [0-9.]* GiB per device (dp=1,.*), the budget is [0-9.]* GiB$" \
  "$tmp/f.err"

# ---- every plan key with hostile numbers -------------------------------------------------
for key in dp tp pp mbs vpp cp ep etp zero sp overlap epo fp8 imb recompute rc_layers pipe comm attn grad loss sw; do
  for v in 0 -1 2147483648 9223372036854775808 18446744073709551617; do
    case "$key=$v" in
    sp=0 | overlap=0 | zero=0 | epo=0 | fp8=0 | rc_layers=0) continue ;; # valid
    esac
    plan="$key=$v"
    [ $key = rc_layers ] && plan="recompute=full,$plan"
    "$WEFT" "${est[@]}" --plan "$plan" >out 2>err
    rc=$?
    check "$plan: exit 1 (got $rc)" test $rc -eq 1
    check "$plan: one line" test "$(wc -l <err)" -eq 1 -a ! -s out
    check "$plan: no sanitizer report" test -z "$(grep -l 'runtime error\|Sanitizer' err)"
  done
done
for plan in dp=16777216,tp=65536,pp=4096,cp=4096 tp=65536,pp=65536,cp=65536 dp=16777216,tp=2 \
  dp=2,tp=65536,pp=65536,cp=65536,ep=65536,etp=65536; do
  expect_fail "$plan" "more than 16777216 devices" "${est[@]}" --plan "$plan"
done
expect_fail "rc_layers 65534 per stage" "'65534' is not a layer count 0..4096" estimate --model gpt-tiny \
  --cluster dgx-a100:nodes=1 --batch 16 --plan pp=2,recompute=full*2,rc_layers=65534/1
expect_fail "rc_layers repeat with a sign" "repeats a value" "${est[@]}" --plan pp=2,recompute=full*+2
expect_fail "--batch 2^31" "--batch 2147483648 on 1 rank: the input buffers of 2147483648 samples" train \
  --model mlp-tiny --data synthetic --batch 2147483648 --steps 1 --plan dp=1

# ---- plain integers; control bytes escaped --------------------------------------------------
expect_fail "dp=+8" "dp=+8: expected an integer" "${est[@]}" --plan dp=+8
expect_fail "dp=8 (space)" "dp=8 : expected an integer" "${est[@]}" --plan "dp=8 "
expect_fail "dp= 8" "dp= 8: expected an integer" "${est[@]}" --plan "dp= 8"
expect_fail "dp=0x8" "dp=0x8: expected an integer" "${est[@]}" --plan "dp=0x8"
expect_fail "--batch +16" "expected an integer" estimate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch +16 \
  --plan dp=1
expect_fail "imb= 2" "imb (expert load imbalance)= 2: expected a number" "${est[@]}" --plan "imb= 2"
"$WEFT" "${est[@]}" --plan "$(printf 'dp=\033[2J\001')" >out 2>err
check "control bytes: exit 1" test $? -eq 1
check "control bytes escaped" grep -qF 'dp=\x1b[2J\x01' err
check "control bytes: none raw" test -z "$(tr -d '\n' <err | tr -d '[:print:]')"
"$WEFT" "$(printf 'x\033y')" >out 2>err
check "a verb's control bytes escaped" grep -qF "unknown verb 'x\\x1by'" err

# ---- strict configs ---------------------------------------------------------------------------
hf() { # name, JSON members merged into the Qwen1.5-MoE config
  "$PY" - "$SRC/tests/data/hf/qwen1.5-moe-a2.7b.json" "$2" >"$1.json" <<'EOP'
import json, sys
d = json.load(open(sys.argv[1]))
d.update(json.loads("{" + sys.argv[2] + "}"))
print(json.dumps(d, indent=1))
EOP
}
hf tie '"tie_word_embeddings": "yes"'
expect_fail "tie_word_embeddings yes" '"tie_word_embeddings" must be true or false' show tie.json
hf mlp '"mlp_only_layers": "x"'
expect_fail "mlp_only_layers x" '"mlp_only_layers" must be a list of layer numbers' show mlp.json
hf mlp2 '"mlp_only_layers": [1, "x"]'
expect_fail "mlp_only_layers [1, x]" '"mlp_only_layers" must be a list of layer numbers' show mlp2.json
hf two '"architectures": ["Qwen2MoeForCausalLM", "LlamaForCausalLM"]'
expect_fail "two architectures" '"architectures" names 2 architectures (Qwen2MoeForCausalLM, LlamaForCausalLM)' \
  show two.json
hf none '"architectures": []'
expect_fail "no architecture" '"architectures" must be a list of one name' show none.json
sed 's/"Qwen2MoeForCausalLM"/"Qwen2MoeForCausalLM\\u0000junk"/' "$SRC/tests/data/hf/qwen1.5-moe-a2.7b.json" >nul.json
expect_fail "NUL in a name" 'a string holds a NUL character (\\u0000) at line 1, column 40' show nul.json
printf '{\n  "architectures": ["GPT2LMHeadModel"],\n  "n_layer": 2,,\n}\n' >bad.json
expect_fail "JSON error: line and column" "bad.json: malformed JSON at line 3, column 17" show bad.json

# ---- fail early -----------------------------------------------------------------------------------
big=(plan --model gpt3-175b --cluster dgx-a100:nodes=64 --batch 1536)
for args in "-o p.json/" "--emit BOGUS"; do
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  "$WEFT" "${big[@]}" $args >out 2>err
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  check "plan $args: exit 1 (got $rc)" test $rc -eq 1
  check "plan $args: before the search ($ms ms)" test $ms -lt 1500
  check "plan $args: one line" test "$(wc -l <err)" -eq 1
done
check "--emit BOGUS: did you mean" grep -q "unknown export format 'BOGUS'" err
expect_fail "export --to BOGUS" "--to: unknown export format 'megatrn'" export dp=1 --to megatrn --model gpt-tiny \
  --cluster dgx-a100:nodes=1 --batch 8
# /proc takes no new entries, not even from root: a checkpoint there cannot be made.
expect_fail "unwritable checkpoint parent" "parent directory /proc is not writable" train --model mlp-tiny \
  --data synthetic --batch 8 --steps 1000000 --plan dp=1 --checkpoint /proc/weft-ck
if [ "$(id -u)" != 0 ]; then
  mkdir ro && chmod 555 ro
  expect_fail "read-only checkpoint directory" "directory is not writable" train --model mlp-tiny --data synthetic \
    --batch 8 --steps 1000000 --plan dp=1 --checkpoint ro
fi

# --resume --log: linear in the log (200,000 lines; quadratic took 3.75 s for 40,000)
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --steps 2 --plan dp=1 --checkpoint ck >/dev/null 2>&1
check "a checkpoint to resume" test -f ck/manifest.json
"$PY" -c '
import sys
with open("long.log", "w") as f:
    for i in range(200000):
        f.write("{\"step\":%d,\"loss\":1.0,\"time_s\":0.001}\n" % (1 if i < 199999 else 2))
'
start=$(date +%s%N)
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --steps 3 --plan dp=1 --checkpoint ck --resume \
  --log long.log >/dev/null 2>err
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
echo "resume with a 200,000-line log: $ms ms"
check "resume with a long log: exit 0 (got $rc: $(tail -n 1 err))" test $rc -eq 0
check "resume with a long log: fast ($ms ms)" test $ms -lt 10000
check "resume with a long log: every line kept, one added" test "$(wc -l <long.log)" -eq 200001

# ---- standard output that cannot be written -----------------------------------------------------------
while read -r verb args; do
  # shellcheck disable=SC2086
  "$WEFT" $verb $args >/dev/full 2>err
  rc=$?
  check "$verb > /dev/full: exit 1 (got $rc)" test $rc -eq 1
  check "$verb > /dev/full: says so" grep -q "cannot write standard output" err
done <<EOT
models
show gpt-tiny
clusters
estimate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8
plan --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16
simulate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8
train --model mlp-tiny --data synthetic --batch 8 --steps 1 --plan dp=1
export dp=8 --to megatron --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16
calibrate --quick
EOT

# ---- true output -------------------------------------------------------------------------------------------
# One plan per (time, memory) point in the top list and the frontier (Mixtral's top 5 had 2 distinct plans).
"$WEFT" plan --model mixtral-8x7b --cluster dgx-h100:nodes=8 --batch 512 --top 5 --pareto --json >plan.json 2>/dev/null
check "plan --json: exit 0" test $? -eq 0
check "top 5 and frontier: distinct (time, memory) points, integer bytes" "$PY" -c '
import json
j = json.load(open("plan.json"))
for key in ("top", "pareto"):
    pts = [(p["iteration_time_s"], p["memory_per_device_bytes"]) for p in j[key]]
    assert len(pts) == len(set(pts)), (key, pts)
    assert all(isinstance(p["memory_per_device_bytes"], int) for p in j[key]), key
assert len(j["top"]) == 5
'
# The schedule played is said: ZeRO-1 under megatron-core is DeAR's schedule.
"$WEFT" simulate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8,zero=1 >sim.txt
check "simulate: says the plan is played as dear" grep -q "^played as comm=dear: ZeRO-1 under megatron-core" sim.txt
check "simulate: the schedule line agrees" grep -q "dp comm schedule   dear" sim.txt
# The plan table's rows say it too; a zero=0 row (played as written) does not.
"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 --top 40 >plan.txt 2>&1
check "plan: zero=1 rows say they are played as dear" grep -q "zero=1,.*comm=ddp (played as comm=dear)$" plan.txt
check "plan: zero=0 rows are played as written" sh -c '! grep -q "zero=0,.*(played as" plan.txt'
"$WEFT" estimate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8,zero=2 --json >est.json
"$WEFT" simulate --model gpt-tiny --cluster dgx-a100:nodes=1 --batch 16 --plan dp=8,zero=2 --json >simj.json
check "estimate and simulate: one key for memory, integer bytes, comm_played, subtotals" "$PY" -c '
import json
e, s = json.load(open("est.json")), json.load(open("simj.json"))
for j in (e, s):
    assert isinstance(j["memory_per_device_bytes"], int), j["memory_per_device_bytes"]
    assert "peak_memory_bytes" not in j
    assert j["comm_played"] == "dear"
    assert "exposed_comm" in j["breakdown_subtotals"]
    b = j["breakdown"]
    parts = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + b["exposed_comm"]
    assert abs(parts - j["iteration_time_s"]) <= 1e-6 * j["iteration_time_s"], (parts, j["iteration_time_s"])
for st in s["stages"]:
    assert isinstance(st["memory_per_device_bytes"], int)
'
"$WEFT" estimate --model gpt3-1.3b --cluster dgx-a100:nodes=2 --batch 64 --plan dp=4,tp=2,pp=2 >est.txt
check "estimate: exposed_comm marked as a subtotal" grep -q "exposed_comm .*subtotal of:" est.txt
check "estimate: the parts add up to 100%" "$PY" -c '
import re
rows = [l.split() for l in open("est.txt") if re.match(r"    (compute|recompute|bubble|optimizer|exposed_comm) ", l)]
assert len(rows) == 5, rows
assert abs(sum(float(r[2].rstrip("%")) for r in rows) - 100) < 0.6, rows
'
check "estimate: at most 4 significant digits" "$PY" -c '
import re
for l in open("est.txt"):
    m = re.match(r"  (iteration time|throughput|tokens|per device|memory per device) +([0-9.]+)", l)
    if m:
        digits = m.group(2).replace(".", "").lstrip("0").rstrip("0") or "0"
        assert len(digits) <= 4, l
'

# ---- did you mean ----------------------------------------------------------------------------------------
"$WEFT" estimat >out 2>err
check "estimat: exit 1" test $? -eq 1
check "estimat: did you mean 'estimate'" grep -q "unknown verb 'estimat'; did you mean 'estimate'?" err
"$WEFT" simulat >/dev/null 2>err
check "simulat: did you mean 'simulate'" grep -q "did you mean 'simulate'" err

finish strict
