#!/usr/bin/env bash
# Hostile input at the command line (issue 12): each row of the issue's table
# that a user can reach from the CLI, as a regression test. Every case exits 1
# with one line naming the bad value (expect_fail), quickly: a FIFO or a device
# given as an input is refused without blocking, an output that is not a
# regular file is refused before any work, oversized batches are rejected, a
# diverging run stops with the last checkpoint intact, a resume names what
# differs and cuts the log back. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
H="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/hostile"
cd "$tmp"

# rows 1, 2, 10: crafted ONNX models
expect_fail "row 1: SCE fed by an input-less Transpose" "missing input" show "$H/row01-sce-transpose-no-input.onnx"
expect_fail "row 2: Split with no outputs" "Split with no outputs" show "$H/row02-split-no-outputs.onnx"
expect_fail "row 10: Gather index 1e30" "out of range" show "$H/row10-gather-huge-index.onnx"
expect_fail "row 10: Reshape product overflow" "more than" show "$H/row10-reshape-overflow.onnx"
check "row 10: a scalar Gemm bias imports" "$WEFT" show "$H/row10-gemm-scalar-bias.onnx" --json >/dev/null 2>&1

# row 3 and 11: batches past the limit are rejected at once
expect_fail "row 3: plan --batch 2^62" "--batch=4611686018427387904" plan --model mlp-tiny \
  --cluster v100-ib100:nodes=1 --whole-model --batch 4611686018427387904
expect_fail "row 3: estimate --batch 2^61" "--batch" estimate --model mlp-tiny --cluster v100-ib100:nodes=1 \
  --batch 2305843009213693952 --plan dp=1,pp=2
expect_fail "row 11: plan --batch INT64_MAX" "--batch" plan --model gpt2 --cluster dgx-a100:nodes=1 \
  --batch 9223372036854775807
start=$(date +%s)
check "row 11: the largest batch plans" "$WEFT" plan --model mlp-tiny --cluster v100-ib100:nodes=1 --whole-model \
  --batch 4294967296 --json >/dev/null 2>&1
check "row 11: ... within 30 s" test $(($(date +%s) - start)) -le 30

# rows 4 and 5: FIFOs and devices as inputs (timeout: a hang fails the check)
mkfifo fifo
for args in "show --cluster fifo" "show fifo" "estimate --model gpt2 --cluster fifo --batch 8 --plan dp=8" \
  "estimate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan fifo" \
  "show --cluster /dev/zero" "show --cluster /dev/null"; do
  # shellcheck disable=SC2086
  timeout 10 "$WEFT" $args >out 2>err
  rc=$?
  check "rows 4/5: weft $args exits 1 (got $rc)" test $rc -eq 1
  check "rows 4/5: weft $args says why" grep -q "not a regular file" err
done
expect_fail "row 4: --verify FIFO" "not a regular file" plan --model mlp-tiny --cluster dgx-a100:nodes=1 \
  --batch 8 --verify fifo

# row 6: outputs that are not regular files are refused, before the work
expect_fail "row 6: -o FIFO" "not a regular file" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 -o fifo
check "row 6: the FIFO is still there" test -p fifo
expect_fail "row 6: -o /dev/null" "not a regular file" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 \
  -o /dev/null
check "row 6: /dev/null is still a device" test -c /dev/null
"$WEFT" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 -o p.json >/dev/null 2>&1
chmod 600 p.json
"$WEFT" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 16 -o p.json >/dev/null 2>&1
check "row 6: the plan file keeps its mode" test "$(stat -c %a p.json)" = 600

# row 8: element counts past the limit
expect_fail "row 8: mlp of 2^30 wide at batch 2^40" "--batch" show mlp:sizes=1073741824-1073741824-10 \
  --batch 1099511627776
expect_fail "row 8: mlp of 2^30 wide" "elements" show mlp:sizes=1073741824-1073741824-10 --batch 1048576

# row 12: --cluster is checked; a diverging run stops with exit 1
expect_fail "row 12: train --cluster nonsense" "nonsense" train --model mlp-tiny --data synthetic --batch 8 \
  --plan dp=1 --steps 2 --cluster nonsense
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 2 --checkpoint ck >/dev/null 2>&1
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 6 --lr 1e30 --clip 0 \
  --checkpoint ck --resume --checkpoint-every 1 >out 2>err
rc=$?
check "row 12: a non-finite loss exits 1 (got $rc)" test $rc -eq 1
check "row 12: ... naming the loss" grep -q "the loss is" err
bad=$(grep 'the loss is' err | grep -o 'step [0-9]*' | grep -o '[0-9]*')
saved=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' ck/manifest.json)
check "row 12: ... the checkpoint is of a step before the failing one ($saved < $bad)" test "$saved" -lt "$bad"

# row 13: output paths are checked before any work
touch afile
expect_fail "row 13: --checkpoint on a file" "not a directory" train --model mlp-tiny --data synthetic \
  --batch 8 --plan dp=1 --steps 2 --checkpoint afile
expect_fail "row 13: --checkpoint with a missing parent" "does not exist" train --model mlp-tiny \
  --data synthetic --batch 8 --plan dp=1 --steps 2 --checkpoint nodir/ck
expect_fail "row 13: --log on a device" "not a regular file" train --model mlp-tiny --data synthetic \
  --batch 8 --plan dp=1 --steps 2 --log /dev/null
expect_fail "row 13: -o ''" "empty" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 -o ""
expect_fail "row 13: --trace in a missing directory" "does not exist" simulate --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8 --trace nodir/t.json

# row 14: the log is cut back on resume; every mismatch is named
rm -rf ck
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 3 --checkpoint ck --log log \
  >/dev/null 2>&1
tail -n 1 log | sed 's/"step":3/"step":4/' >>log # a row written after the checkpoint, then a crash
printf '{"step":5,"lo' >>log
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 5 --checkpoint ck --resume \
  --log log >/dev/null 2>&1
check "row 14: every step once in the log" test "$(grep -o '"step":[0-9]*' log | tr '\n' ' ')" = \
  '"step":1 "step":2 "step":3 "step":4 "step":5 '
expect_fail "row 14: resume with other data" "data=fashion-mnist" train --model mlp-tiny --data fashion-mnist \
  --batch 8 --plan dp=1 --steps 9 --checkpoint ck --resume
expect_fail "row 14: resume with another optimizer" "optimizer=sgd" train --model mlp-tiny --data synthetic \
  --optimizer sgd --batch 8 --plan dp=1 --steps 9 --checkpoint ck --resume

# row 15: the sentinel cannot be typed; duplicate keys; --threads 0
expect_fail "row 15: --seq INT64_MIN" "--seq" show gpt-tiny --seq -9223372036854775808
expect_fail "row 15: --threads 0" "--threads" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 \
  --steps 2 --threads 0
expect_fail "row 15: dp given twice" "twice" estimate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 \
  --plan dp=8,dp=4
"$WEFT" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 -o dup.json >/dev/null 2>&1
sed -i '0,/"plan":/s//"plan": "dp=1", "plan":/' dup.json
expect_fail "row 15: a plan file with a duplicate key" "appears twice" estimate --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 8 --plan dup.json
"$WEFT" clusters dgx-a100 --json >c.json
sed -i '0,/"name":/s//"name": "x", "name":/' c.json
expect_fail "row 15: a cluster file with a duplicate key" "appears twice" show --cluster c.json

finish hostile.sh
