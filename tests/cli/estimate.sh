#!/usr/bin/env bash
# CLI tests of `weft estimate` and `weft clusters`: the --json object parses
# and carries every contract field with sane values (the breakdown adds up to
# the iteration time); the human table goes to stdout (stderr with --json); a plan file works
# like a plan string; invalid plans and bad options exit 1 with one stderr
# line naming the bad value; `weft clusters` lists the presets with their
# calibration factors and describes one cluster with every factor. $1 is the
# weft binary.
source "$(dirname "$0")/lib.sh" "$1"

cat >"$tmp/check.py" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ["iteration_time_s", "samples_per_s", "model_flops_per_iteration",
          "tflops_per_device", "mfu", "memory_per_device_bytes"]:
    assert isinstance(j[k], (int, float)) and j[k] > 0, (k, j.get(k))
assert isinstance(j["fits"], bool), j["fits"]
b = j["breakdown"]
for k in ["compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble",
          "optimizer", "exposed_comm"]:
    assert isinstance(b[k], (int, float)) and b[k] >= 0, (k, b.get(k))
total = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + b["exposed_comm"]
assert abs(total - j["iteration_time_s"]) <= 1e-9 * j["iteration_time_s"], (total, j)
assert abs(j["samples_per_s"] * j["iteration_time_s"] - j["batch"]) < 1e-6 * j["batch"]
assert 0 < j["mfu"] < 1, j["mfu"]
m = j["memory"]
parts = m["weights_bytes"] + m["activation_bytes"] + m["buffer_bytes"]
assert abs(parts - j["memory_per_device_bytes"]) <= 1e-6 * parts
for k, v in [a.split("=", 1) for a in sys.argv[2:]]:
    assert str(j[k]) == v, (k, j[k], v)
PYEOF

# The contract example: GPT-3 175B on 64 A100s, as the 2022 code ran it.
"$WEFT" estimate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 \
  --plan dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full,sw=megatron-2022 --json >"$tmp/out.json" 2>"$tmp/err.txt"
check "estimate exits 0" test $? -eq 0
check "estimate json" $PY "$tmp/check.py" "$tmp/out.json" batch=64 devices=64 micro_batches=64 \
  plan=dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full,sp=0,zero=0,overlap=1,pipe=1f1b,comm=ddp,sw=megatron-2022
check "framework named" $PY -c "
import json,sys; f=json.load(open(sys.argv[1]))['framework']; assert f.startswith('megatron-2022: unfused attention'), f" "$tmp/out.json"
check "human table on stderr" grep -q "iteration time" "$tmp/err.txt"
check "stdout is one JSON object" $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/out.json"
# Calibrated region: within 10% of Korthikanti et al.'s 18.13 s.
check "175B full near 18.13 s" $PY -c "
import json,sys; t=json.load(open(sys.argv[1]))['iteration_time_s']; assert 16.3 < t < 19.9, t" "$tmp/out.json"

# Without --json the table is the result: on stdout, and nothing on stderr.
"$WEFT" estimate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 \
  --plan dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full >"$tmp/out2.txt" 2>"$tmp/err2.txt"
check "table exits 0" test $? -eq 0
check "table: empty stderr" test ! -s "$tmp/err2.txt"
check "table: breakdown on stdout" grep -q "exposed_comm" "$tmp/out2.txt"

# Non-transformers take dp and pp.
"$WEFT" estimate --model resnet50 --cluster dgx-a100 --batch 256 --plan dp=4,pp=2,mbs=32 --json \
  >"$tmp/cnn.json" 2>/dev/null
check "resnet50 dp+pp" $PY "$tmp/check.py" "$tmp/cnn.json" devices=8

# A plan file (the format weft plan -o writes) works like the string.
cat >"$tmp/plan.json" <<'EOF'
{"format": "weft-plan", "version": 1, "plan": "dp=2,tp=4,pp=1,mbs=2,recompute=selective,sp=1",
 "model": "gpt3-13b", "cluster": "dgx-a100", "batch": 32}
EOF
"$WEFT" estimate --model gpt3-13b --cluster dgx-a100 --batch 32 --plan "$tmp/plan.json" --json \
  >"$tmp/file.json" 2>/dev/null
check "plan file" $PY "$tmp/check.py" "$tmp/file.json" devices=8 \
  plan=dp=2,tp=4,pp=1,mbs=2,vpp=1,recompute=selective,sp=1,zero=0,overlap=1,pipe=1f1b,comm=ddp
"$WEFT" estimate --model gpt3-13b --cluster dgx-a100 --batch 32 \
  --plan dp=2,tp=4,pp=1,mbs=2,recompute=selective,sp=1 --json >"$tmp/str.json" 2>/dev/null
check "plan file = plan string" cmp -s "$tmp/file.json" "$tmp/str.json"

E="estimate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64"
expect_fail "tp vs heads" "tp=7" $E --plan dp=1,tp=7,pp=8 --json
expect_fail "layers vs pp" "layers=96" $E --plan dp=1,tp=8,pp=5 --json
expect_fail "batch vs mbs*dp" "batch=64" $E --plan dp=2,tp=4,pp=8,mbs=3 --json
expect_fail "too many devices" "128 devices" $E --plan dp=2,tp=8,pp=8 --json
expect_fail "bad plan key" "bogus" $E --plan dp=1,bogus=2
expect_fail "bad plan value" "recompute=most" $E --plan recompute=most
expect_fail "bad model" "no-such-model" estimate --model no-such-model --cluster dgx-a100 --batch 8 --plan dp=1
expect_fail "bad cluster" "no-such-cluster" estimate --model gpt2 --cluster no-such-cluster --batch 8 --plan dp=1
expect_fail "cluster override" "nodes" estimate --model gpt2 --cluster dgx-a100:nodes=0 --batch 8 --plan dp=1
expect_fail "missing option" "--plan" estimate --model gpt2 --cluster dgx-a100 --batch 8
expect_fail "bad batch" "--batch" estimate --model gpt2 --cluster dgx-a100 --batch x --plan dp=1
expect_fail "tp on a CNN" "tp=2" estimate --model resnet50 --cluster dgx-a100:nodes=1 --batch 64 --plan tp=2

# weft clusters: the list, and one cluster as a cluster file usable by estimate.
"$WEFT" clusters --json >"$tmp/cl.json" 2>/dev/null
check "clusters json" $PY -c "
import json,sys; j=json.load(open(sys.argv[1])); names=[c['name'] for c in j['clusters']]
assert {'dgx-a100','dgx-h100','v100-10gbe','v100-ib100','local'} <= set(names), names
assert all(c['devices'] >= 1 for c in j['clusters'])" "$tmp/cl.json"
"$WEFT" clusters dgx-a100:nodes=2 --json >"$tmp/c.json" 2>/dev/null
check "cluster file" $PY -c "
import json,sys; j=json.load(open(sys.argv[1])); assert j['format']=='weft-cluster' and j['levels'][1]['size']==2" "$tmp/c.json"
"$WEFT" estimate --model gpt3-13b --cluster "$tmp/c.json" --batch 32 \
  --plan dp=2,tp=4,pp=1,mbs=2,recompute=selective,sp=1 --json >"$tmp/cf.json" 2>/dev/null
check "estimate on a cluster file" $PY "$tmp/check.py" "$tmp/cf.json" devices=8
check "cluster file = preset" $PY -c "
import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
assert a['iteration_time_s']==b['iteration_time_s'], (a['iteration_time_s'], b['iteration_time_s'])" "$tmp/cf.json" "$tmp/str.json"
"$WEFT" clusters >"$tmp/list.out" 2>"$tmp/list.err"
check "clusters table on stdout" grep -q "dgx-a100" "$tmp/list.out"
check "clusters: empty stderr" test ! -s "$tmp/list.err"
# The calibration factors that differ between presets, in the list (text and
# JSON), and every factor with its value in a cluster's description.
check "clusters table: factor columns" grep -q "overlap grad B  p2p us" "$tmp/list.out"
check "clusters table: dgx-a100 factors" grep -Eq "^dgx-a100 .* 1\.300 +4 +50\.0 " "$tmp/list.out"
check "clusters json: factors" $PY -c "
import json,sys; c={x['name']: x for x in json.load(open(sys.argv[1]))['clusters']}
a=c['dgx-a100']; assert (a['overlap_slowdown'], a['grad_bytes'], a['p2p_overhead_s']) == (1.3, 4, 5e-05), a
assert c['v100-10gbe']['grad_bytes'] == 2 and c['local']['p2p_overhead_s'] == 0" "$tmp/cl.json"
"$WEFT" clusters v100-10gbe:p2p_overhead_s=2e-4,grad_bytes=4 >"$tmp/one.out" 2>"$tmp/one.err"
check "cluster description: empty stderr" test ! -s "$tmp/one.err"
for row in "p2p_overhead_s +200 us" "grad_bytes +4 " "overlap_slowdown +1.3 " "op_overhead_s +4 us" \
  "mem_reserved_bytes +2.00 GiB"; do
  check "cluster description: $row" grep -Eq "^ +$row" "$tmp/one.out"
done
expect_fail "unknown cluster key" "bogus" clusters dgx-a100:bogus=1

# Framework profiles (issue 11): FSDP with flash attention trains a 13B model
# on eight 80 GB GPUs without recomputation; the unfused kernels' score
# matrices would not fit. The default profile is named in --help.
fits() { "$WEFT" estimate --model llama2-13b:dtype=bf16 --cluster dgx-a100:nodes=1 --batch 8 --plan "$1" --json 2>/dev/null |
  $PY -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['fits'] == (sys.argv[1] == 'yes') else 1)" "$2"; }
check "fsdp + flash: llama2-13b fits on 8 x 80 GB" fits dp=8,mbs=1,sw=fsdp yes
check "fsdp + unfused attention: does not fit" fits dp=8,mbs=1,sw=fsdp,attn=unfused no
check "--help names the default profile" sh -c '"$0" estimate --help | grep -q "megatron-core (default)"' "$WEFT"
expect_fail "fp8 on A100" "no FP8 unit" estimate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8,fp8=1
expect_fail "fp8 with the 2022 code" "megatron-2022 has no FP8" estimate --model gpt2 --cluster dgx-h100:nodes=1 --batch 8 --plan dp=8,fp8=1,sw=megatron-2022
expect_fail "unknown profile" "megatron-core" estimate --model gpt2 --cluster dgx-h100:nodes=1 --batch 8 --plan dp=8,sw=megatron-2020
expect_fail "cp needs a sequence split" "cp=3" estimate --model gpt2 --cluster dgx-h100:nodes=1 --batch 8 --plan dp=2,cp=3
expect_fail "ep needs experts" "has no experts" estimate --model gpt2 --cluster dgx-h100:nodes=1 --batch 8 --plan dp=8,ep=2

finish estimate.sh
