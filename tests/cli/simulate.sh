#!/usr/bin/env bash
# CLI tests of `weft simulate`: the --json object carries the contract fields
# (iteration_time_s, memory_per_device_bytes, the key estimate uses, breakdown, comm) and each stage's
# breakdown adds up to the iteration time; it agrees with `weft estimate`
# within 3% on a calibration plan; --trace writes a Chrome trace (named
# events with ts/dur/pid/tid, one row per stage stream and channel);
# --comm overrides the plan's schedule and `auto` picks one; the human table
# goes to stdout (stderr with --json); bad options exit 1 with one line naming the value.
# $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"

cat >"$tmp/check.py" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ["iteration_time_s", "samples_per_s", "memory_per_device_bytes"]:
    assert isinstance(j[k], (int, float)) and j[k] > 0, (k, j.get(k))
assert isinstance(j["fits"], bool)
keys = ["compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "exposed_comm"]
for b in [j["breakdown"]] + [s["breakdown"] for s in j["stages"]]:
    for k in keys:
        assert isinstance(b[k], (int, float)) and b[k] >= -1e-12, (k, b.get(k))
    total = b["compute"] + b["recompute"] + b["bubble"] + b["optimizer"] + b["exposed_comm"]
    assert abs(total - j["iteration_time_s"]) <= 1e-6 * j["iteration_time_s"], (total, j["iteration_time_s"])
c = j["comm"]
for k in ["schedule", "threshold_bytes", "collectives", "dp_comm_s", "dp_exposed_s"]:
    assert k in c, k
for k, v in [a.split("=", 1) for a in sys.argv[2:]]:
    got = c[k[5:]] if k.startswith("comm.") else j[k]
    assert str(got) == v, (k, got, v)
PYEOF

cat >"$tmp/trace.py" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) > 100, len(x)
for e in x:
    for k in ["name", "ts", "dur", "pid", "tid", "args"]:
        assert k in e, (k, e)
    assert e["dur"] >= 0 and e["ts"] >= 0
procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
stages = int(sys.argv[2])
assert len(procs) == stages, procs
for p in range(stages):
    assert procs[p].startswith("stage %d" % p), procs[p]
    assert threads[(p, 0)] == "compute" and threads[(p, 1)] == "comm 0" and threads[(p, 2)] == "comm 1"
names = {e["name"] for e in x}
for n in sys.argv[3:]:
    assert n in names, (n, sorted(names))
PYEOF

# A calibration plan: within 3% of the estimate.
"$WEFT" simulate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 \
  --plan dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full --json >"$tmp/sim.json" 2>"$tmp/err.txt"
check "simulate exits 0" test $? -eq 0
check "simulate json" $PY "$tmp/check.py" "$tmp/sim.json" devices=64 micro_batches=64
check "human table on stderr" grep -q "iteration time" "$tmp/err.txt"
"$WEFT" estimate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 \
  --plan dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full --json >"$tmp/est.json" 2>/dev/null
check "simulate within 3% of estimate" $PY -c "
import json,sys
s=json.load(open(sys.argv[1]))['iteration_time_s']; e=json.load(open(sys.argv[2]))['iteration_time_s']
assert abs(s/e-1) < 0.03, (s, e)" "$tmp/sim.json" "$tmp/est.json"

# A trace: two stages, tensor- and data-parallel collectives, sends.
"$WEFT" simulate --model gpt:layers=4,hidden=512,heads=8,seq=256,vocab=8000 --cluster dgx-a100:nodes=1 \
  --batch 32 --plan dp=2,tp=2,pp=2,mbs=2 --trace "$tmp/trace.json" >"$tmp/out.txt" 2>"$tmp/err2.txt"
check "trace exits 0" test $? -eq 0
check "trace: the table on stdout without --json" grep -q "iteration time" "$tmp/out.txt"
check "trace is a Chrome trace" $PY "$tmp/trace.py" "$tmp/trace.json" 2 \
  "tp all-reduce" "dp all-reduce" "send activation" "send gradient" "optimizer step"

# --comm overrides the plan; auto chooses among several.
"$WEFT" simulate --model resnet50 --cluster v100-10gbe --batch 4096 --plan dp=64,mbs=64 \
  --comm dear --json >"$tmp/dear.json" 2>/dev/null
check "comm dear" $PY "$tmp/check.py" "$tmp/dear.json" comm.schedule=dear
"$WEFT" simulate --model resnet50 --cluster v100-10gbe --batch 4096 --plan dp=64,mbs=64 \
  --comm wfbp --json >"$tmp/wfbp.json" 2>/dev/null
check "comm wfbp: one all-reduce per tensor" $PY "$tmp/check.py" "$tmp/wfbp.json" comm.schedule=wfbp comm.collectives=161
"$WEFT" simulate --model resnet50 --cluster v100-10gbe --batch 4096 --plan dp=64,mbs=64 \
  --comm auto --json >"$tmp/auto.json" 2>/dev/null
check "auto is no slower than dear or wfbp" $PY -c "
import json,sys
a,d,w=[json.load(open(f)) for f in sys.argv[1:4]]
assert a['comm']['candidates'] > 5
assert a['iteration_time_s'] <= min(d['iteration_time_s'], w['iteration_time_s']) + 1e-12
assert d['iteration_time_s'] < w['iteration_time_s']" "$tmp/auto.json" "$tmp/dear.json" "$tmp/wfbp.json"

# --fuse auto: the fusions chosen and their gain.
"$WEFT" simulate --model resnet50 --cluster v100-ib100 --batch 4096 --plan dp=64,mbs=64 \
  --comm dear --fuse auto --json >"$tmp/fuse.json" 2>"$tmp/fuse.txt"
check "fuse exits 0" test $? -eq 0
check "fuse report" $PY -c "
import json,sys
f=json.load(open(sys.argv[1]))['fusion']
assert f['candidates'] == 102 and f['fused'] == 102, f
assert 'layer1.0.conv1+layer1.0.bn1' in f['ops'] and 'layer1.0.bn1+layer1.0.relu1' in f['ops'], f['ops']
assert 0 < f['ideal_time_s'] <= json.load(open(sys.argv[1]))['iteration_time_s'], f
assert f['gain'] > 0, f" "$tmp/fuse.json"
check "fuse table" grep -q "operator fusion" "$tmp/fuse.txt"
check "fuse ideal" grep -q "full-overlap ideal" "$tmp/fuse.txt"
expect_fail "bad --fuse" "always" simulate --model resnet50 --cluster v100-ib100 --batch 4096 --plan dp=64,mbs=64 \
  --fuse always

# Bad input: exit 1, nothing on stdout, one line naming the value.
S="simulate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64"
expect_fail "bad --comm" "sometimes" $S --plan dp=1,tp=8,pp=8 --comm sometimes
expect_fail "bad --detail" "extreme" $S --plan dp=1,tp=8,pp=8 --detail extreme
expect_fail "invalid plan" "tp=7" $S --plan dp=1,tp=7,pp=8
expect_fail "bad --batch" "--batch=0" simulate --model gpt2 --cluster dgx-a100 --batch 0 --plan dp=1
"$WEFT" simulate --help >"$tmp/o" 2>&1
check "help exits 0" test $? -eq 0
check "help lists --trace" grep -q -- "--trace" "$tmp/o"

finish simulate.sh
