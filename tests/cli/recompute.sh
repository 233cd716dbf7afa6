#!/usr/bin/env bash
# CLI tests of recomputation per pipeline stage and by block (rc_layers):
# the plan string prints back canonically (runs as full*2) and parses to the
# same numbers; rc_layers=all-layers is recompute=full and rc_layers=0 is
# none; a per-stage plan fits where none does not and is faster than full
# recomputation everywhere; `weft plan --verify PLAN -o FILE` carries it
# into the op-level file, which `weft estimate` reads to the same numbers;
# `weft simulate` plays it; bad values exit 1 naming them. $1 is the weft
# binary.
source "$(dirname "$0")/lib.sh" "$1"

M="--model gpt3-175b --cluster dgx-a100:nodes=32 --batch 512"
est() { # plan, output file
  "$WEFT" estimate $M --plan "$1" --json >"$2" 2>/dev/null
}
field() { # file, field
  $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"
}

est dp=8,tp=8,pp=4,recompute=full/full/none/none,rc_layers=12/6 "$tmp/a.json"
check "per-stage list: lengths differ" test $? -ne 0
est dp=8,tp=8,pp=4,recompute=full*2/none*2,rc_layers=12/6/0/0 "$tmp/a.json"
check "per-stage estimate exits 0" test $? -eq 0
check "canonical form" test "$(field "$tmp/a.json" plan)" = \
  "dp=8,tp=8,pp=4,mbs=1,vpp=1,recompute=full*2/none*2,rc_layers=12/6/0*2,sp=0,zero=0,overlap=1,pipe=1f1b,comm=ddp"
est "$(field "$tmp/a.json" plan)" "$tmp/b.json"
check "canonical form parses to the same numbers" test "$(field "$tmp/a.json" iteration_time_s)" = \
  "$(field "$tmp/b.json" iteration_time_s)"

# N = every layer of a chunk (96 / 4) is full, N = 0 is none.
est dp=8,tp=8,pp=4,recompute=full,rc_layers=24 "$tmp/n24.json"
est dp=8,tp=8,pp=4,recompute=full "$tmp/full.json"
check "rc_layers=24 is full" test "$(field "$tmp/n24.json" iteration_time_s)" = "$(field "$tmp/full.json" iteration_time_s)"
est dp=8,tp=8,pp=4,recompute=full,rc_layers=0 "$tmp/n0.json"
check "rc_layers=0 is none" test "$(field "$tmp/n0.json" plan)" = \
  "dp=8,tp=8,pp=4,mbs=1,vpp=1,recompute=none,sp=0,zero=0,overlap=1,pipe=1f1b,comm=ddp"

# mbs=2, unfused attention: no recomputation does not fit 80 GiB, full does,
# and recomputing 6/6/5/4/3/2/1/0 of the 12 layers per stage fits and is
# faster (stage s holds 8 - s micro-batches).
P=dp=4,tp=8,pp=8,mbs=2,zero=1,attn=unfused
RC=full,rc_layers=6/6/5/4/3/2/1/0
est $P,recompute=none "$tmp/none.json"
est $P,recompute=full "$tmp/full.json"
est $P,recompute=$RC "$tmp/ps.json"
check "none does not fit" test "$(field "$tmp/none.json" fits)" = False
check "full fits" test "$(field "$tmp/full.json" fits)" = True
check "per stage fits" test "$(field "$tmp/ps.json" fits)" = True
check "per stage is faster than full" $PY -c "
import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
assert a['iteration_time_s'] < 0.9 * b['iteration_time_s'], (a['iteration_time_s'], b['iteration_time_s'])" \
  "$tmp/ps.json" "$tmp/full.json"

# Lowered into an op-level file, estimated from it to the same numbers.
"$WEFT" plan $M --verify $P,recompute=$RC -o "$tmp/ol.json" >/dev/null 2>"$tmp/verify.err"
check "verify -o exits 0" test $? -eq 0
check "the file keeps the recomputation" $PY -c "
import json,sys; k=json.load(open(sys.argv[1]))['keys']; assert 'recompute=full*7/none' in k and 'rc_layers=6*2/5/4/3/2/1/0' in k, k" "$tmp/ol.json"
"$WEFT" estimate $M --plan "$tmp/ol.json" --json >"$tmp/ol_est.json" 2>/dev/null
check "estimate of the file exits 0" test $? -eq 0
check "the file costs as the string (1%)" $PY -c "
import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
assert abs(a['iteration_time_s'] - b['iteration_time_s']) <= 0.01 * a['iteration_time_s']
assert abs(a['memory_per_device_bytes'] - b['memory_per_device_bytes']) <= 0.01 * a['memory_per_device_bytes']" \
  "$tmp/ps.json" "$tmp/ol_est.json"

# The simulator plays it: more recomputation than none, less than full.
for f in ps full; do
  case $f in ps) rc=$RC ;; full) rc=full ;; esac
  "$WEFT" simulate $M --plan $P,recompute=$rc --json >"$tmp/sim_$f.json" 2>/dev/null
  check "simulate $f exits 0" test $? -eq 0
done
check "simulated recomputation per stage is less" $PY -c "
import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
ra=a['breakdown']['recompute']; rb=b['breakdown']['recompute']
assert 0 < ra < 0.7 * rb, (ra, rb)
assert a['iteration_time_s'] < b['iteration_time_s']" "$tmp/sim_ps.json" "$tmp/sim_full.json"

expect_fail "bad kind" "fast" estimate $M --plan dp=8,tp=8,pp=4,recompute=full/fast/none/none
expect_fail "stage count" "pp=4" estimate $M --plan dp=8,tp=8,pp=4,recompute=full/none
expect_fail "a list of equal values names every stage" "3 values for pp=4" estimate $M --plan dp=8,tp=8,pp=4,recompute=full*3
expect_fail "rc_layers without full" "rc_layers" estimate $M --plan dp=8,tp=8,pp=4,recompute=selective,rc_layers=2
expect_fail "rc_layers too many" "holds 24 layers" estimate $M --plan dp=8,tp=8,pp=4,recompute=full,rc_layers=30
expect_fail "rc_layers not a count" "x" estimate $M --plan dp=8,tp=8,pp=4,recompute=full,rc_layers=x
expect_fail "not a transformer" "not a transformer" estimate --model resnet50 --cluster dgx-a100:nodes=1 --batch 64 \
  --plan dp=4,pp=2,recompute=full/none
expect_fail "the runtime refuses it" "recompute" train --model gpt-tiny --data synthetic --batch 8 --steps 1 \
  --plan dp=1,pp=2,recompute=full/none
# Exported: the block method is Megatron-LM's --recompute-method block;
# recomputation per stage has no framework flag.
"$WEFT" export $P,recompute=full,rc_layers=6 --to megatron $M >"$tmp/meg" 2>/dev/null
check "export block exits 0" test $? -eq 0
check "megatron block flags" grep -q -- "--recompute-method block" "$tmp/meg"
check "megatron block layers" grep -q -- "--recompute-num-layers 6" "$tmp/meg"
expect_fail "export per stage" "per stage" export $P,recompute=$RC --to megatron $M
expect_fail "export block to deepspeed" "rc_layers" export $P,recompute=full,rc_layers=6 --to deepspeed $M
finish recompute.sh
