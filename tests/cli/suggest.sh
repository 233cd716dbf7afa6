#!/usr/bin/env bash
# Suggestions for misspelt names (issue 13): every unknown name gets "did you
# mean X?" when a close one exists (model, family key, cluster, cluster key,
# data set, option, plan key, comm schedule), and spelling variants (case,
# '-'/'_', llama-2/llama2) resolve to the name outright. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"

suggests() { # name, the suggestion expected, then weft's arguments
  local name=$1 want=$2
  shift 2
  expect_fail "$name" "did you mean '$want'?" "$@"
}
suggests "model" "gpt3-175b" show gpt3-175
suggests "family key" "layers" show gpt:layrs=2
suggests "cluster" "dgx-a100" show --cluster dgx-a10
suggests "cluster key" "nodes" show --cluster dgx-a100:node=16
suggests "data set" "text:fortunes" train --model gpt-tiny --data text:fortune --batch 4 --plan dp=1 --steps 1
suggests "data set name" "fashion-mnist" train --model mlp-tiny --data fashon-mnist --batch 4 --plan dp=1 --steps 1
suggests "option" "--batch" estimate --model gpt2 --cluster dgx-a100:nodes=1 --global-batch-size 8 --plan dp=8
suggests "option typo" "--pareto" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --paretto
suggests "plan key" "tp" estimate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8,tpp=1
suggests "comm schedule" "dear" simulate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8 --comm deer
expect_fail "nothing close: no suggestion" "unknown model" show zzzzzzzzzz
check "nothing close: no 'did you mean'" test "$(grep -c "did you mean" "$tmp/f.err")" -eq 0

# Variants resolve: the same model, cluster, data set and schedule.
"$WEFT" show llama2-7b --json >a.json 2>/dev/null
for v in llama-2-7b Llama-2-7B LLAMA2_7B; do
  "$WEFT" show "$v" --json >b.json 2>/dev/null
  check "model variant $v resolves" "$PY" -c "
import json,sys; a=json.load(open('a.json')); b=json.load(open('b.json'))
assert a['params'] == b['params'] and a['name'] == b['name'] == 'llama2-7b', (a['name'], b['name'])"
done
"$WEFT" estimate --model gpt2 --cluster DGX_A100:nodes=1 --batch 8 --plan dp=8 --json >c.json 2>/dev/null
"$WEFT" estimate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8 --json >d.json 2>/dev/null
check "cluster variant resolves" "$PY" -c "
import json; a=json.load(open('c.json')); b=json.load(open('d.json'))
assert a['iteration_time_s'] == b['iteration_time_s']"
"$WEFT" simulate --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --plan dp=8 --comm DeAR:10 --json >e.json 2>/dev/null
check "comm variant resolves" "$PY" -c "
import json; assert 'comm=dear:10' in json.load(open('e.json'))['plan']"
check "data variant resolves" sh -c '"$0" train --model mlp-tiny --data Fashion_MNIST:split=test --batch 4 \
  --plan dp=1 --steps 1 >/dev/null 2>&1' "$WEFT"
finish suggest.sh
