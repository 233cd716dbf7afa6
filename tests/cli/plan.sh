#!/usr/bin/env bash
# CLI tests of `weft plan`: the plan written with -o round-trips through
# `weft estimate --plan FILE --json` to the same iteration time as the plan's
# own JSON; the --json object has best/top/pareto/searched/search_time_s with
# the estimate's fields; the frontier is sorted; --max-memory binds; an
# impossible budget exits 1 with one line naming the smallest memory and the
# budget; --devices-range reports each count and the fewest devices meeting a
# deadline; bad values exit 1. Op-level plans: --op-level (and the default for
# models that are not transformers) prints best/top/pareto with per-op
# layouts; -o writes an op-level plan file that `weft plan --verify` reads back
# to the same numbers, as does weft estimate --plan FILE; a plan
# file that does not match the model exits 1 naming the op; a pipelined plan
# comes out for a deep MLP on slow links. $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"

M=gpt3-175b
C=dgx-a100:nodes=8
B=64

# ---- plan --json -o, then estimate the file ----------------------------------------
"$WEFT" plan --model $M --cluster $C --batch $B --json -o "$tmp/p.json" >"$tmp/plan.json" 2>"$tmp/plan.err"
check "plan --json -o exits 0" test $? -eq 0
check "plan file written" test -s "$tmp/p.json"
check "plan --json fields" "$PY" - "$tmp/plan.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("best", "top", "pareto", "searched", "search_time_s", "space", "devices"):
    assert k in j, k
b = j["best"]
for k in ("plan", "iteration_time_s", "samples_per_s", "mfu", "memory_per_device_bytes", "fits",
          "breakdown", "tflops_per_device", "model_flops_per_iteration"):
    assert k in b, k
for k in ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "exposed_comm"):
    assert k in b["breakdown"], k
assert b["fits"] is True
assert b["memory_per_device_bytes"] <= 80 * 2**30
assert j["searched"] > 0 and j["searched"] <= j["space"]
assert j["search_time_s"] >= 0 and j["devices"] == 64
assert len(j["top"]) == 10 and j["top"][0] == b
t = [p["iteration_time_s"] for p in j["top"]]
assert t == sorted(t)
par = j["pareto"]
assert par[0]["iteration_time_s"] == b["iteration_time_s"]
for x, y in zip(par, par[1:]):
    assert x["iteration_time_s"] <= y["iteration_time_s"]
    assert x["memory_per_device_bytes"] > y["memory_per_device_bytes"]
assert abs(b["samples_per_s"] - 64 / b["iteration_time_s"]) < 1e-9 * b["samples_per_s"]
EOF

"$WEFT" estimate --model $M --cluster $C --batch $B --plan "$tmp/p.json" --json >"$tmp/est.json" 2>"$tmp/est.err"
check "estimate --plan file exits 0" test $? -eq 0
check "estimate of the plan file = plan's best" "$PY" - "$tmp/plan.json" "$tmp/est.json" "$tmp/p.json" <<'EOF'
import json, sys
best = json.load(open(sys.argv[1]))["best"]
est = json.load(open(sys.argv[2]))
pf = json.load(open(sys.argv[3]))
assert est["iteration_time_s"] == best["iteration_time_s"], (est["iteration_time_s"], best["iteration_time_s"])
assert est["memory_per_device_bytes"] == best["memory_per_device_bytes"]
assert est["breakdown"] == best["breakdown"]
assert est["plan"] == best["plan"]
assert pf["format"] == "weft-plan" and pf["plan"] == best["plan"]
assert pf["model"] == "gpt3-175b" and pf["batch"] == 64
assert pf["estimate"]["iteration_time_s"] == best["iteration_time_s"]
EOF

# ---- plain run: tables on stdout ending with the best plan string; stderr quiet ----------
"$WEFT" plan --model $M --cluster $C --batch $B --top 3 --pareto >"$tmp/plain.out" 2>"$tmp/plain.err"
check "plain plan exits 0" test $? -eq 0
check "nothing on stderr (no progress bar off a terminal)" test ! -s "$tmp/plain.err"
tail -n 1 "$tmp/plain.out" >"$tmp/plain.best"
check "stdout's last line plan = --json best" "$PY" - "$tmp/plan.json" "$tmp/plain.best" <<'EOF'
import json, sys
assert open(sys.argv[2]).read().strip() == json.load(open(sys.argv[1]))["best"]["plan"]
EOF
check "top 3 table" test "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+  (no pipeline|1F1B|GPipe|interleaved 1F1B|uneven 1F1B|uneven GPipe) +dp=' "$tmp/plain.out")" -gt 3
check "frontier table" grep -q "frontier" "$tmp/plain.out"
"$WEFT" estimate --model $M --cluster $C --batch $B --plan "$(cat "$tmp/plain.best")" --json >"$tmp/est2.json" 2>/dev/null
check "estimate of the plan string = plan's best" "$PY" - "$tmp/plan.json" "$tmp/est2.json" <<'EOF'
import json, sys
assert json.load(open(sys.argv[2]))["iteration_time_s"] == json.load(open(sys.argv[1]))["best"]["iteration_time_s"]
EOF

# ---- --max-memory binds; an impossible budget exits 1 -------------------------------------
"$WEFT" plan --model $M --cluster $C --batch $B --max-memory 55 --json >"$tmp/m55.json" 2>/dev/null
check "--max-memory 55 exits 0" test $? -eq 0
check "--max-memory 55: fits and is not faster" "$PY" - "$tmp/plan.json" "$tmp/m55.json" <<'EOF'
import json, sys
full = json.load(open(sys.argv[1]))["best"]
b = json.load(open(sys.argv[2]))["best"]
assert b["memory_per_device_bytes"] <= 55 * 2**30
assert b["iteration_time_s"] >= full["iteration_time_s"]
EOF
"$WEFT" plan --model $M --cluster $C --batch $B --max-memory 10 --json >"$tmp/nofit.out" 2>"$tmp/nofit.err"
check "impossible budget exits 1" test $? -eq 1
check "impossible budget: nothing on stdout" test ! -s "$tmp/nofit.out"
check "impossible budget message" grep -q "smallest memory found is .* GiB.*budget is 10.00 GiB" "$tmp/nofit.err"

# ---- --devices-range with a deadline -------------------------------------------------------
"$WEFT" plan --model gpt3-13b --cluster dgx-a100:nodes=8 --batch 256 --devices-range 8-64 --deadline 30 --json \
  -o "$tmp/d.json" >"$tmp/range.json" 2>"$tmp/range.err"
check "--devices-range exits 0" test $? -eq 0
check "--devices-range fields" "$PY" - "$tmp/range.json" "$tmp/d.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
per = j["per_devices"]
assert [p["devices"] for p in per] == [8, 16, 24, 32, 40, 48, 56, 64], [p["devices"] for p in per]
ok = [p for p in per if p["best"] and p["best"]["iteration_time_s"] <= 30]
assert ok and j["fewest_devices_meeting_deadline"] == ok[0]["devices"]
assert j["best"]["plan"] == ok[0]["best"]["plan"]
assert json.load(open(sys.argv[2]))["plan"] == j["best"]["plan"]
fastest = min((p for p in per if p["best"]), key=lambda p: p["best"]["iteration_time_s"])
assert j["fastest_devices"] == fastest["devices"]
EOF
"$WEFT" plan --model gpt3-13b --cluster dgx-a100:nodes=8 --batch 256 --devices-range 8-16 --deadline 0.001 \
  >/dev/null 2>"$tmp/dl.err"
check "unmet deadline exits 1" test $? -eq 1
check "unmet deadline message" grep -q "meets the deadline" "$tmp/dl.err"

# ---- a CNN with --whole-model: data and pipeline parallelism only ------------------------------
"$WEFT" plan --model resnet50 --cluster dgx-a100:nodes=1 --batch 256 --whole-model --json >"$tmp/cnn.json" 2>/dev/null
check "resnet50 plan exits 0" test $? -eq 0
check "resnet50 plan has tp=1" "$PY" - "$tmp/cnn.json" <<'EOF'
import json, sys
for p in json.load(open(sys.argv[1]))["top"]:
    assert ",tp=1," in p["plan"] and ",vpp=1," in p["plan"], p["plan"]
EOF

# ---- op-level plans ------------------------------------------------------------------------------
OM=vgg16
OC=dgx-a100:nodes=2
"$WEFT" plan --model $OM --cluster $OC --batch 64 --json --pareto -o "$tmp/ol.json" >"$tmp/olplan.json" 2>"$tmp/olplan.err"
check "op-level plan (default for a CNN) exits 0" test $? -eq 0
check "op-level plan --json fields" "$PY" - "$tmp/olplan.json" "$tmp/ol.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mode"] == "op-level"
for k in ("best", "top", "pareto", "searched", "search_time_s", "devices", "budget_bytes"):
    assert k in j, k
b = j["best"]
for k in ("plan", "iteration_time_s", "memory_per_device_bytes", "fits", "layouts", "breakdown", "mesh", "pp"):
    assert k in b, k
assert b["fits"] is True and j["devices"] == 16 and j["searched"] > 1
assert b["plan"].startswith("mesh=") and b["plan"] == j["top"][0]["plan"]
assert j["top"][0]["iteration_time_s"] == b["iteration_time_s"]
bd = b["breakdown"]
own = ("compute", "comm", "pp_comm", "bubble", "grad_sync")  # the op-level model's parts; the rest alias them
assert abs(sum(bd[k] for k in own) - b["iteration_time_s"]) <= 1e-9 * b["iteration_time_s"]
lay = b["layouts"]
assert len(lay) == 40 and lay[0]["op"] == "conv1_1" and lay[0]["kind"] == "conv2d"
axes = b["mesh"].count("x") + 1
for e in lay:
    assert e["signature"].count("|") == axes - 1 and "->" in e["signature"], e
# One price: the best, the ranking and the frontier are the one cost model's
# figures (what estimate of each plan's file reports); the frontier's head is the best.
assert b["priced_by"] == "one_model" and abs(b["one_model"]["iteration_time_s"] - b["iteration_time_s"]) <= 1e-12
assert all(t["priced_by"] == "one_model" for t in j["top"])
assert all("proxy_time_s" not in t for t in j["top"] + j["pareto"] + [b])
par = j["pareto"]
assert par[0]["plan"] == b["plan"] and par[0]["iteration_time_s"] == b["iteration_time_s"]
for x, y in zip(par, par[1:]):
    assert x["iteration_time_s"] <= y["iteration_time_s"] or x["priced_by"] != y["priced_by"]
    assert x["memory_per_device_bytes"] > y["memory_per_device_bytes"]
f = json.load(open(sys.argv[2]))
assert f["format"] == "weft-plan" and f["version"] == 1 and f["plan"] == b["plan"]
assert f["layouts"] == {e["op"]: e["signature"] for e in lay}
assert f["stages"][0] == "conv1_1" and f["estimate"]["iteration_time_s"] == b["iteration_time_s"]
EOF
check "op-level: no per-op table without --detail" test "$(grep -c "conv2d" "$tmp/olplan.err")" -eq 0
"$WEFT" plan --model $OM --cluster $OC --batch 64 --detail >"$tmp/oldetail.out" 2>/dev/null
check "op-level --detail table on stdout" grep -q "^conv1_1 .*conv2d .* S0" "$tmp/oldetail.out"
check "op-level frontier on stderr" grep -q "frontier" "$tmp/olplan.err"

"$WEFT" plan --verify "$tmp/ol.json" --model $OM --cluster $OC --batch 64 --json >"$tmp/olver.json" 2>"$tmp/olver.err"
check "--verify exits 0" test $? -eq 0
check "--verify numbers = the plan's" "$PY" - "$tmp/olplan.json" "$tmp/olver.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]
v = json.load(open(sys.argv[2]))
for k in ("plan", "iteration_time_s", "memory_per_device_bytes", "fits", "breakdown", "layouts", "stages"):
    assert v[k] == b[k], k
EOF
"$WEFT" plan --verify "$tmp/p.json" --model $M --cluster $C --batch $B --json >"$tmp/wver.json" 2>/dev/null
check "--verify of a whole-model file = estimate, and its lowering" "$PY" - "$tmp/est.json" "$tmp/wver.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[2]))
assert v["whole_model"]["iteration_time_s"] == json.load(open(sys.argv[1]))["iteration_time_s"]
assert v["plan"].startswith("mesh="), v["plan"]
EOF
"$WEFT" estimate --model $OM --cluster $OC --batch 64 --plan "$tmp/ol.json" --json >"$tmp/olest.json" 2>"$tmp/olest.err"
check "estimate of an op-level file exits 0" test $? -eq 0
check "estimate of an op-level file = the one cost model's numbers of the plan, with the contract's fields" \
  "$PY" - "$tmp/olplan.json" "$tmp/olest.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]["one_model"]
e = json.load(open(sys.argv[2]))
for k in ("iteration_time_s", "memory_per_device_bytes", "fits"):
    assert e[k] == b[k], k
for k in ("samples_per_s", "model_flops_per_iteration", "tflops_per_device", "mfu"):
    assert k in e, k
bd = e["breakdown"]
for k in ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "exposed_comm"):
    assert k in bd, k
assert abs(bd["exposed_comm"] - (bd["tp_comm"] + bd["pp_comm"] + bd["dp_comm"])) <= 1e-12 * max(1.0, bd["exposed_comm"])
EOF
"$WEFT" plan --verify "$tmp/ol.json" --model resnet18 --cluster $OC --batch 64 >/dev/null 2>"$tmp/olbad.err"
check "--verify against another model exits 1" test $? -eq 1
check "--verify names the op" grep -q "op 'conv1_1' is not an op of model" "$tmp/olbad.err"
sed 's/"relu1_1":[^,]*,/"relu1_1": "S3->S0|B->B",/' "$tmp/ol.json" >"$tmp/olsig.json"
"$WEFT" plan --verify "$tmp/olsig.json" --model $OM --cluster $OC --batch 64 >/dev/null 2>"$tmp/olsig.err"
check "--verify of an illegal signature exits 1" test $? -eq 1
check "--verify names the signature" grep -q "op 'relu1_1' (relu): signature 'S3->S0|B->B'" "$tmp/olsig.err"
"$WEFT" plan --verify "$tmp/ol.json" --model $OM --cluster dgx-a100:nodes=1 --batch 64 >/dev/null 2>"$tmp/olc.err"
check "--verify on a smaller cluster exits 1" test $? -eq 1

# A transformer with --op-level, a given mesh and no sequence splits.
"$WEFT" plan --model gpt:layers=2,hidden=256,heads=8,seq=128,vocab=1024 --cluster dgx-a100:nodes=1 --batch 8 \
  --op-level --mesh 2x4 --no-seq-split --json >"$tmp/olgpt.json" 2>/dev/null
check "--op-level --mesh --no-seq-split exits 0" test $? -eq 0
check "--mesh is the plan's mesh" "$PY" - "$tmp/olgpt.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["best"]["mesh"] == "2x4" and j["best"]["pp"] == 1, j["best"]["plan"]
assert all(p["mesh"] == "2x4" for p in j["top"])
EOF

# A deep MLP on nodes joined by 10 GbE whose weights do not fit data parallelism: pipelined.
MLP=mlp:sizes=8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192
"$WEFT" plan --model $MLP --cluster v100-10gbe:nodes=8,devices_per_node=1 --batch 512 --max-memory 8 --json \
  -o "$tmp/pipe.json" >"$tmp/pipe.out" 2>"$tmp/pipe.err"
check "pipelined MLP exits 0" test $? -eq 0
check "pipelined MLP has pp > 1 and stages" "$PY" - "$tmp/pipe.out" "$tmp/pipe.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))["best"]
assert b["pp"] > 1 and b["fits"], b["plan"]
st = b["stages"]
assert len(st) == b["pp"] and st[0]["first_op"] == "fc1" and st[-1]["last_op"] == "loss"
assert all(s["memory_bytes"] <= 8 * 2**30 for s in st)
f = json.load(open(sys.argv[2]))
assert f["stages"] == [s["first_op"] for s in st]
EOF
check "pipelined MLP stage table" grep -q "^ *0 fc1 " "$tmp/pipe.err"
"$WEFT" plan --verify "$tmp/pipe.json" --model $MLP --cluster v100-10gbe:nodes=8,devices_per_node=1 --batch 512 \
  --max-memory 8 --json >"$tmp/pipever.json" 2>/dev/null
check "pipelined plan verifies to the same time" "$PY" - "$tmp/pipe.out" "$tmp/pipever.json" <<'EOF'
import json, sys
assert json.load(open(sys.argv[2]))["iteration_time_s"] == json.load(open(sys.argv[1]))["best"]["iteration_time_s"]
EOF

for args in "--op-level --whole-model" "--op-level --devices-range 8-16" "--whole-model --mesh 8" "--mesh 3x3 --op-level" \
  "--pp 0 --op-level" "--op-level --no-seq-split --model vgg16" "--verify /nonexistent.json"; do
  # shellcheck disable=SC2086
  "$WEFT" plan --model $M --cluster $C --batch $B $args >/dev/null 2>"$tmp/bad.err"
  rc=$?
  check "bad '$args' exits 1" test $rc -eq 1
  check "bad '$args' one line" test "$(wc -l <"$tmp/bad.err")" -eq 1
done

# ---- one search space: --op-level alone ---------------------------------------------------------
# Megatron's layouts and the op-level search's, on one cost model: never slower than the whole-model
# search's best; a wide MLP on 10 Gb/s Ethernet takes layouts outside Megatron's family, and the
# file written estimates as reported.
W="mlp:sizes=1024-16384-16384-10"
"$WEFT" plan --model "$W" --cluster v100-10gbe:nodes=4 --batch 256 --op-level -o "$tmp/one.json" --json \
  >"$tmp/one.out" 2>/dev/null
check "one space: exits 0" test $? -eq 0
"$WEFT" plan --model "$W" --cluster v100-10gbe:nodes=4 --batch 256 --whole-model --json >"$tmp/onew.json" 2>/dev/null
"$WEFT" estimate --model "$W" --cluster v100-10gbe:nodes=4 --batch 256 --plan "$tmp/one.json" --json \
  >"$tmp/onee.json" 2>/dev/null
check "one space: op-level layouts, faster than the whole-model best, estimated as reported" "$PY" - \
  "$tmp/one.out" "$tmp/onew.json" "$tmp/onee.json" <<'EOF'
import json, sys
o, w, e = (json.load(open(f)) for f in sys.argv[1:4])
assert o["mode"] == "one-space" and not o["best"]["megatron_layouts"], o["best"]
t = o["best"]["iteration_time_s"]
assert t < 0.5 * w["best"]["iteration_time_s"], (t, w["best"]["iteration_time_s"])
assert abs(e["iteration_time_s"] / t - 1) < 0.01, (e["iteration_time_s"], t)
assert o["budget_bytes"] == 32 * 2**30
EOF
"$WEFT" plan --model megatron-22b --cluster dgx-a100:nodes=1 --batch 4 --op-level >"$tmp/one22.txt" 2>&1
check "one space: megatron-22b at batch 4 fits (accumulated micro-batches)" grep -q "^best: .* GiB per device" \
  "$tmp/one22.txt"

# ---- bad input exits 1 with one line -----------------------------------------------------------
for args in "--max-memory -3" "--max-memory 0" "--devices-range 9-3" "--devices-range x" "--devices 100" \
  "--top 0" "--deadline -1" "--bogus" "--devices 8 --devices-range 8-16"; do
  # shellcheck disable=SC2086
  "$WEFT" plan --model $M --cluster $C --batch $B $args >/dev/null 2>"$tmp/bad.err"
  rc=$?
  check "bad '$args' exits 1" test $rc -eq 1
  check "bad '$args' one line" test "$(wc -l <"$tmp/bad.err")" -eq 1
done
"$WEFT" plan --model $M --cluster $C >/dev/null 2>&1
check "missing --batch exits 1" test $? -eq 1
"$WEFT" plan --help >"$tmp/help" 2>&1
check "--help lists --devices-range" grep -q -- "--devices-range" "$tmp/help"

if [ $fail -ne 0 ]; then
  echo "$fail check(s) failed"
  exit 1
fi
echo "plan.sh: all checks passed"
