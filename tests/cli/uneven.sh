#!/usr/bin/env bash
# CLI tests of uneven pipeline stages (stages=a/b/...): the planner finds them
# for GPT-3 13B with a 256k vocabulary on 64 V100s over 10 GbE and beats the
# best even plan, `weft plan` names the pipeline kind, the simulator agrees
# with the estimate within 3%, the exports write Megatron-LM's
# --decoder-first/last-pipeline-num-layers and torchtitan's stage weights (the
# split torchtitan's own rule makes from them is checked here), and what a
# framework cannot express is refused by name.
# $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"

M="gpt3-13b:vocab=256000"
C="v100-10gbe"
"$WEFT" plan --model $M --cluster $C --batch 64 --max-memory 14 --top 40 --json >"$tmp/u.json" 2>/dev/null
check "plan exits 0" test $? -eq 0
# Since the interlaced pipeline and the chunked pricing of interleaved stages
# (tests/cli/interlace.sh) the best plans are interleaved (above 22 GiB) and
# interlaced; under 14 GiB uneven stages come next and beat every plain 1F1B
# plan by more than 5%.
check "plan: uneven stages beat every even 1F1B plan" "$PY" - "$tmp/u.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["best"]["iteration_time_s"] < 10.35, j["best"]["iteration_time_s"]
uneven = [t for t in j["top"] if t["plan_kind"] == "uneven 1F1B"]
assert uneven and all(",stages=" in t["plan"] for t in uneven)
plain = [t for t in j["top"] if t["plan_kind"] == "1F1B"]
if plain:
    assert plain[0]["iteration_time_s"] > 1.05 * uneven[0]["iteration_time_s"]
open(sys.argv[1] + ".best", "w").write(uneven[0]["plan"])
EOF
best=$(cat "$tmp/u.json.best")
"$WEFT" simulate --model $M --cluster $C --batch 64 --plan "$best" --json >"$tmp/s.json" 2>/dev/null
check "simulate the uneven plan" test $? -eq 0
check "simulator within 3% of the estimate" "$PY" - "$tmp/s.json" "$tmp/u.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["iteration_time_s"]
e = [t for t in json.load(open(sys.argv[2]))["top"] if t["plan_kind"] == "uneven 1F1B"][0]["iteration_time_s"]
assert abs(s / e - 1) < 0.03, (s, e)
EOF
"$WEFT" estimate --model $M --cluster $C --batch 64 --plan "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=1,stages=2/6*6/2" --json >"$tmp/e.json" 2>/dev/null
check "estimate names the kind" "$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["plan_kind"] == "uneven 1F1B"' "$tmp/e.json"

# ---- exports ----------------------------------------------------------------------------------
MB="$M,dtype=bf16"
"$WEFT" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=1/6*6/3" --to megatron --model $MB --cluster $C --batch 64 >"$tmp/m.out"
check "megatron export exits 0" test $? -eq 0
check "megatron: first stage 1 layer" grep -q -- "--decoder-first-pipeline-num-layers 1" "$tmp/m.out"
check "megatron: last stage 3 layers" grep -q -- "--decoder-last-pipeline-num-layers 3" "$tmp/m.out"
"$WEFT" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=6*7/-2" --to megatron --model $MB --cluster $C --batch 64 >/dev/null 2>&1
check "a bad list is an error" test $? -eq 1
"$WEFT" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=1/6*6/3" --to megatron@core_r0.8.0 --model $MB --cluster $C --batch 64 >/dev/null 2>"$tmp/r.err"
check "megatron r0.8.0 lacks the flags" grep -q "decoder-first-pipeline-num-layers" "$tmp/r.err"
err_case() { # name, args...
  local name=$1
  shift
  "$WEFT" "$@" >"$tmp/x.out" 2>"$tmp/x.err"
  local rc=$?
  check "$name: exit 1 (got $rc)" test $rc -eq 1
  check "$name: one line on stderr" test "$(wc -l <"$tmp/x.err")" -eq 1
}
err_case "megatron refuses uneven middles" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=2/6*4/5*2/4" --to megatron --model $MB --cluster $C --batch 64
check "megatron refusal names the layout flag" grep -q "pipeline-model-parallel-layout" "$tmp/x.err"
"$WEFT" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=1/6*6/3" --to torchtitan --model $MB --cluster $C --batch 64 >"$tmp/t.py"
check "torchtitan export exits 0" test $? -eq 0
check "torchtitan's rule rebuilds the stages" "$PY" - "$tmp/t.py" <<'EOF'
import re, sys, math
t = open(sys.argv[1]).read()
lps = int(re.search(r"pipeline_parallel_layers_per_stage=(\d+)", t).group(1))
a = int(re.search(r"pipeline_parallel_first_stage_less_layers=(\d+)", t).group(1))
b = int(re.search(r"pipeline_parallel_last_stage_less_layers=(\d+)", t).group(1))
L, pp = 40, 8
S = math.ceil((L + a + b) / lps)  # torchtitan _get_pipeline_metadata
assert S == pp, S
# torchtitan _generate_llm_fqn_per_model_part (b5bcd76c), layer counts only
eff = L + a + b
each, extra = eff // S, eff % S
assert a <= each and b <= each
got, cur = [], 0
for k in range(S):
    share = each + (1 if k < extra else 0) - (a if k == 0 else b if k == S - 1 else 0)
    n = max(0, min(share, L - cur))
    got.append(n)
    cur += n
assert got == [1] + [6] * 6 + [3], got
EOF
err_case "torchtitan refuses what its weights cannot give" export "dp=2,tp=4,pp=8,mbs=1,sp=1,zero=2,stages=6/4/6*4/3/3" --to torchtitan --model $MB --cluster $C --batch 64
check "torchtitan refusal names module_fqns_per_model_part" grep -q "module_fqns_per_model_part" "$tmp/x.err"
err_case "vpp with stages" estimate --model $M --cluster $C --batch 64 --plan "dp=2,tp=4,pp=8,vpp=2,stages=2/6*6/2"
err_case "layers do not add up" estimate --model $M --cluster $C --batch 64 --plan "dp=2,tp=4,stages=2/6*6/3"
err_case "non-transformer" estimate --model resnet50 --cluster $C --batch 64 --plan "dp=8,stages=1/1"

finish uneven
