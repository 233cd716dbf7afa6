#!/usr/bin/env bash
# The seed papers' settings through the CLI (docs/seeds.md): ByteScheduler as
# `weft simulate` plays it differs from WFBP on 64 V100s over 10 GbE and is
# faster; dear:0 (DeAR without tensor fusion) runs one reduce-scatter and one
# all-gather per gradient; bytescheduler:0 is refused in one line; Megatron's
# layout of BERT (vocabulary 30522) at tp=4 lowers as Megatron's padded model
# (30720) and the file it writes is evaluated with that model; --op-level
# --devices-range runs the op-level search per device count. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
R="--model resnet50:dtype=fp32 --cluster v100-10gbe --batch 2048"
for s in wfbp bytescheduler dear dear:0; do
  "$WEFT" simulate $R --plan "dp=64,mbs=32,sw=pytorch,comm=$s" --json >"$tmp/$s.json" 2>"$tmp/$s.err"
  check "simulate comm=$s exits 0" test $? -eq 0
done
check "bytescheduler beats wfbp on 10 GbE" $PY -c "
import json,sys
w=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
assert b['comm']['schedule'] == 'bytescheduler', b['comm']
assert b['iteration_time_s'] < 0.9 * w['iteration_time_s'], (b['iteration_time_s'], w['iteration_time_s'])" \
  "$tmp/wfbp.json" "$tmp/bytescheduler.json"
check "dear:0 one reduce-scatter and all-gather per tensor" $PY -c "
import json,sys
w=json.load(open(sys.argv[1])); d0=json.load(open(sys.argv[2])); d=json.load(open(sys.argv[3]))
assert d0['comm']['collectives'] == 2 * w['comm']['collectives'], (d0['comm'], w['comm'])
assert d['comm']['collectives'] < d0['comm']['collectives'], d['comm']" \
  "$tmp/wfbp.json" "$tmp/dear:0.json" "$tmp/dear.json"
"$WEFT" simulate $R --plan dp=64,mbs=32,sw=pytorch --comm dear:0 >"$tmp/d0.txt" 2>&1
check "dear:0 printed as no tensor fusion" grep -q "dear (no tensor fusion)" "$tmp/d0.txt"
expect_fail "bytescheduler:0" "chunk must be > 0" simulate $R --plan dp=64,mbs=32 --comm bytescheduler:0

B="--model bert-base-pretrain --cluster v100-ib100 --batch 512"
"$WEFT" plan --verify dp=16,tp=4 $B -o "$tmp/bert.json" >"$tmp/v.txt" 2>&1
check "bert tp=4 lowers" test $? -eq 0
check "padded as Megatron pads" grep -q "vocabulary 30522 padded to 30720" "$tmp/v.txt"
"$WEFT" estimate --model bert-base-pretrain:vocab=30720 --cluster v100-ib100 --batch 512 --plan "$tmp/bert.json" \
  >"$tmp/e.txt" 2>&1
check "the padded model's plan file estimates" test $? -eq 0
# TensorOpt: --devices-range drives the op-level search (its FT frontier) per count.
"$WEFT" plan --model mlp-tiny --cluster dgx-a100:nodes=1 --batch 64 --op-level --devices-range 2-8 --json \
  >"$tmp/range.json" 2>"$tmp/range.err"
check "op-level devices-range exits 0" test $? -eq 0
check "op-level devices-range per count" $PY -c "
import json,sys
j=json.load(open(sys.argv[1]))
d=[e['devices'] for e in j['per_devices']]
assert d == [2, 4, 8], d
for e in j['per_devices']:
    assert e['best']['iteration_time_s'] > 0 and len(e['pareto']) >= 1, e
    assert all(a['iteration_time_s'] <= b['iteration_time_s'] for a, b in zip(e['pareto'], e['pareto'][1:])), e
assert j['fastest_devices'] in d, j" "$tmp/range.json"
expect_fail "op-level devices-range with -o" "take one device count" \
  plan --model mlp-tiny --cluster dgx-a100:nodes=1 --batch 64 --op-level --devices-range 2-8 -o "$tmp/x.json"
finish seeds.sh
