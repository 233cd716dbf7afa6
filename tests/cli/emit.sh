#!/usr/bin/env bash
# `weft plan --emit X` searches the plans framework X runs (issue 22, item 5),
# priced under X's profile, and `weft export` refuses a plan that does not fit
# (item 6). For Llama 3 70B and Mixtral 8x7B on 64 H100s and every target:
# plan --emit X exits 0; its output is `weft export` of the best plan; every
# plan of the top K and of the frontier carries X's profile and exports to X
# with exit 0 (the search and the writers share one refusal rule,
# wf_export_accepts). The best plan under --emit megatron is the best of the
# unfiltered megatron-core plans that Megatron runs (the first of those in the
# unfiltered ranking, which is not the unfiltered best). $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"

CL=dgx-h100:nodes=8
declare -A SW=([megatron]=megatron-core [deepspeed]=deepspeed [torchtitan]=fsdp [fsdp]=fsdp)

# bf16 models: torchtitan and the FSDP2 script train in bf16 (no fp16 loss
# scaling there). torchtitan has no Mixtral flavor at the pinned commit: its
# export builds a custom MoE flavor (docs/export.md).
for spec in "llama3-70b:dtype=bf16 512" "mixtral-8x7b:dtype=bf16 256"; do
  read -r M B <<<"$spec"
  for X in megatron deepspeed torchtitan fsdp; do
    tag="$M --emit $X"
    "$WEFT" plan --model "$M" --cluster $CL --batch "$B" --top 3 --emit "$X" >"$tmp/emit.out" 2>"$tmp/emit.err"
    rc=$?
    check "$tag: exit 0 (got $rc: $(tail -1 "$tmp/emit.err"))" test $rc -eq 0
    check "$tag: says what it searched" grep -q "searching the plans $X runs (sw=${SW[$X]}" "$tmp/emit.err"
    # The JSON of the same search: the best, the top K and the frontier.
    "$WEFT" plan --model "$M" --cluster $CL --batch "$B" --top 8 --pareto --emit "$X" --json >"$tmp/emit.json" 2>/dev/null
    check "$tag --json: exit 0" test $? -eq 0
    $PY - "$tmp/emit.json" >"$tmp/plans" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["best"]["plan"] == j["top"][0]["plan"]
seen = set()
for p in [j["best"]] + j["top"] + j["pareto"]:
    if p["plan"] not in seen:
        seen.add(p["plan"]); print(p["plan"])
PYEOF
    check "$tag: best, top and frontier listed" test -s "$tmp/plans"
    best=$(head -1 "$tmp/plans")
    # plan --emit prints what export prints for the best plan.
    "$WEFT" export "$best" --to "$X" --model "$M" --cluster $CL --batch "$B" >"$tmp/exp.out" 2>/dev/null
    check "$tag: output is export of the best plan" cmp -s "$tmp/emit.out" "$tmp/exp.out"
    n=0
    while read -r plan; do
      n=$((n + 1))
      want="sw=${SW[$X]}"
      [ "$want" = sw=megatron-core ] && want=""   # the default profile is not written
      if [ -n "$want" ]; then
        check "$tag: $plan has $want" grep -q -- ",$want" <<<"$plan"
      else
        check "$tag: $plan has the default profile" bash -c "! grep -q ',sw=' <<<'$plan'"
      fi
      "$WEFT" export "$plan" --to "$X" --model "$M" --cluster $CL --batch "$B" >/dev/null 2>"$tmp/x.err"
      rc=$?
      check "$tag: export of $plan exits 0 (got $rc: $(cat "$tmp/x.err"))" test $rc -eq 0
    done <"$tmp/plans"
    check "$tag: several plans checked ($n)" test "$n" -ge 3
  done
done

# Without the filter, Megatron cannot run the best Llama 3 70B plan of every
# profile... the filtered best is the fastest megatron-core plan Megatron runs:
# the first of the unfiltered ranking that export accepts.
"$WEFT" plan --model llama3-70b --cluster $CL --batch 512 --top 400 --json >"$tmp/all.json" 2>/dev/null
check "unfiltered search: exit 0" test $? -eq 0
$PY -c 'import json,sys; [print(p["plan"]) for p in json.load(open(sys.argv[1]))["top"]]' "$tmp/all.json" >"$tmp/all"
first=""
rank=0
while read -r plan; do
  rank=$((rank + 1))
  if "$WEFT" export "$plan" --to megatron --model llama3-70b --cluster $CL --batch 512 >/dev/null 2>&1; then
    first=$plan
    break
  fi
done <"$tmp/all"
check "some unfiltered plan runs on Megatron" test -n "$first"
"$WEFT" plan --model llama3-70b --cluster $CL --batch 512 --top 1 --emit megatron --json >"$tmp/m.json" 2>/dev/null
got=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$tmp/m.json")
check "--emit megatron best ($got) = first runnable of the unfiltered ranking (rank $rank: $first)" test "$got" = "$first"

# The prunings keep their promise inside a target's space: the pruned search
# under --emit X finds the exhaustive one's top K and frontier.
for X in megatron deepspeed torchtitan fsdp; do
  for e in "" --exhaustive; do
    "$WEFT" plan --model llama2-7b:dtype=bf16 --cluster dgx-h100:nodes=1 --batch 64 --top 5 --pareto --emit "$X" $e --json \
      >"$tmp/ex$e.json" 2>/dev/null
  done
  check "--emit $X: pruned = exhaustive (top 5 and frontier)" "$PY" - "$tmp/ex.json" "$tmp/ex--exhaustive.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
# The frontier by its numbers: at dp=1 overlap=0 and overlap=1 are one plan
# (pruning 3), which the exhaustive search names by the smaller string.
key = lambda j: ([(p["plan"], p["iteration_time_s"]) for p in j["top"]],
                 [(p["iteration_time_s"], p["memory_per_device_bytes"]) for p in j["pareto"]])
assert key(a) == key(b), (key(a), key(b))
assert a["searched"] < b["searched"], (a["searched"], b["searched"])
PYEOF
done

# The filter narrows the space: fsdp (tp = pp = 1) searches fewer candidates.
sp_all=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["space"])' "$tmp/all.json")
"$WEFT" plan --model llama3-70b:dtype=bf16 --cluster $CL --batch 512 --emit fsdp --json >"$tmp/f.json" 2>/dev/null
sp_f=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["space"])' "$tmp/f.json")
check "--emit fsdp space ($sp_f) below the whole space ($sp_all)" test "$sp_f" -lt "$sp_all"

# A target that runs none of the plans asked for says so in one line.
expect_fail "deepspeed with fp8" "deepspeed" plan --model llama3-70b --cluster $CL --batch 512 --fp8 --emit deepspeed
check "deepspeed with fp8: names FP8" grep -q "FP8" "$tmp/f.err"
expect_fail "unknown target" "unknown export format" plan --model llama3-70b --cluster $CL --batch 512 --emit megatorn
expect_fail "too small for any fsdp plan" "fits" plan --model llama3-70b:dtype=bf16 --cluster dgx-h100:nodes=1 --batch 8 --emit fsdp

# No silent misfit: Llama 3 70B at dp=64 needs terabytes per GPU.
expect_fail "export of a misfit" "GiB per device" export dp=64 --to megatron --model llama3-70b --cluster $CL --batch 512
check "misfit: needed and available" grep -Eq "needs [0-9]+\.[0-9]+ GiB per device, the H100[^ ]* has 79\.18 GiB" "$tmp/f.err"
"$WEFT" export dp=64 --to megatron --model llama3-70b --cluster $CL --batch 512 --force >"$tmp/force.out" 2>"$tmp/force.err"
check "--force: exit 0" test $? -eq 0
check "--force: the settings written" grep -q -- "--tensor-model-parallel-size 1" "$tmp/force.out"
check "--force: a warning on stderr" grep -q "warning: .*does not fit\|warning: .*will not fit" "$tmp/force.err"
# The memory named is the estimate's.
"$WEFT" estimate --model llama3-70b --cluster $CL --batch 512 --plan dp=64 --json >"$tmp/est.json" 2>/dev/null
need=$($PY -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["memory_per_device_bytes"] / 2**30))' "$tmp/est.json")
check "misfit names the estimate's $need GiB" grep -q "needs $need GiB" "$tmp/force.err"

finish emit.sh
