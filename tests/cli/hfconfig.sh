#!/usr/bin/env bash
# Hugging Face config.json files as models (issue 15, item 5, dense
# architectures) and the Llama 3 zoo entries: parameter counts against the
# published totals; mixture-of-experts, unknown architectures and missing
# fields are one line naming them; a config plans and estimates like a zoo
# name. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
HF="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/hf"
cd "$tmp"

params() { "$WEFT" show "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["params"])'; }
# published totals (model cards / the papers)
check "llama2-7b config: 6,738,415,616" test "$(params "$HF/llama2-7b.json")" = 6738415616
check "llama3-8b config: 8,030,261,248" test "$(params "$HF/llama3-8b.json")" = 8030261248
check "mistral-7b config: 7,241,732,096" test "$(params "$HF/mistral-7b.json")" = 7241732096
check "gpt2 config: 124,439,808" test "$(params "$HF/gpt2.json")" = 124439808
check "bert-base-uncased config (BertForMaskedLM): 109,514,298" test "$(params "$HF/bert-base-uncased.json")" = 109514298
# Qwen2-7B publishes 7,615,616,512 with biases on q, k and v, which weft's
# llama family does not have: 28 layers x (3584 + 2 x 512) = 129,024 fewer.
check "qwen2-7b config: 7,615,616,512 less its qkv biases" test "$(params "$HF/qwen2-7b.json")" = \
  $((7615616512 - 28 * (3584 + 2 * 512)))
check "llama3-8b zoo = its config" test "$(params llama3-8b)" = 8030261248
check "llama3-70b zoo: 70,553,706,496" test "$(params llama3-70b)" = 70553706496
check "llama3-405b zoo: 405,853,388,800" test "$(params llama3-405b)" = 405853388800
"$WEFT" show "$HF/llama3-8b.json" --json >a.json 2>/dev/null
check "config dtype and shape" "$PY" - a.json <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
c = j["config"]
assert j["dtype"] == "bf16" and c["kv_heads"] == 8 and c["seq"] == 8192 and c["vocab"] == 128256, (j["dtype"], c)
PYEOF
"$WEFT" estimate --model "$HF/llama3-8b.json" --cluster dgx-h100:nodes=1 --batch 8 --plan tp=8 --json >e.json 2>/dev/null
check "a config estimates like the zoo name" "$PY" - e.json <<PYEOF
import json, subprocess, sys
a = json.load(open(sys.argv[1]))
b = json.loads(subprocess.run(["$WEFT", "estimate", "--model", "llama3-8b:dtype=bf16", "--cluster", "dgx-h100:nodes=1",
    "--batch", "8", "--plan", "tp=8", "--json"], capture_output=True, text=True).stdout)
assert a["iteration_time_s"] == b["iteration_time_s"], (a["iteration_time_s"], b["iteration_time_s"])
PYEOF
check "a config plans" sh -c '"$0" plan --model "$1" --cluster dgx-a100:nodes=1 --batch 64 --json -o p.json >/dev/null 2>&1' \
  "$WEFT" "$HF/gpt2.json"
expect_fail "mixture of experts" "MixtralForCausalLM is a mixture of experts" show "$HF/mixtral-8x7b.json"
printf '{"architectures": ["FalconForCausalLM"], "hidden_size": 4544}' >falcon.json
expect_fail "unknown architecture" "architecture FalconForCausalLM" show falcon.json
printf '{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 2}' >short.json
expect_fail "missing field" "missing field \"num_attention_heads\"" show short.json
finish hfconfig.sh
