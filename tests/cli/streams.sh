#!/usr/bin/env bash
# The streams contract (issue 13, docs/cli.md): in every verb the result goes
# to stdout (the human table without --json, one JSON object with it) and
# nothing but progress, warnings and notes goes to stderr, so
# `weft estimate ... > out.txt` keeps the answer and `weft clusters | grep dgx`
# finds it. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"
E="--model gpt2 --cluster dgx-a100:nodes=1 --batch 8"
verbs=(
  "models"
  "show gpt2"
  "show --cluster dgx-a100"
  "clusters"
  "clusters dgx-a100"
  "estimate $E --plan dp=8"
  "plan $E"
  "simulate $E --plan dp=8"
)
for v in "${verbs[@]}"; do
  # shellcheck disable=SC2086
  "$WEFT" $v >out 2>err
  check "weft $v: exit 0" test $? -eq 0
  check "weft $v: the result on stdout" test -s out
  check "weft $v: stderr quiet" test ! -s err
  # shellcheck disable=SC2086
  "$WEFT" $v --json >out.json 2>/dev/null
  check "weft $v --json: one JSON object on stdout" "$PY" -c "import json,sys; json.load(open('out.json'))"
done
"$WEFT" clusters | grep -c dgx-a100 >/dev/null
check "weft clusters | grep dgx finds it" test $? -eq 0
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 2 >out 2>err
check "train: the summary on stdout" grep -q "^done " out
check "train: step lines (progress) on stderr" grep -q "^step " err
finish streams.sh
