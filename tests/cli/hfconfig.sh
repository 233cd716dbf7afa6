#!/usr/bin/env bash
# Hugging Face config.json files as models (issue 15, item 5) and the Llama 3
# zoo entries: parameter counts (and, for mixtures of experts, the active
# ones) against the published totals; unknown architectures and missing
# fields are one line naming them; a config plans and estimates like a zoo
# name. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
HF="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/hf"
cd "$tmp"

params() { "$WEFT" show "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["params"])'; }
active() { "$WEFT" show "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(int(json.load(sys.stdin)["active_params"]))'; }
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
assert j["dtype"] == "bf16" and c["kv_heads"] == 8 and c["seq"] == 4096 and c["vocab"] == 128256, (j["dtype"], c)
assert c["tie_embeddings"] is False, c
PYEOF
"$WEFT" estimate --model "$HF/llama3-8b.json:seq=8192" --cluster dgx-h100:nodes=1 --batch 8 --plan tp=8 --json >e.json 2>/dev/null
check "a config estimates like the zoo name" "$PY" - e.json <<PYEOF
import json, subprocess, sys
a = json.load(open(sys.argv[1]))
b = json.loads(subprocess.run(["$WEFT", "estimate", "--model", "llama3-8b:dtype=bf16", "--cluster", "dgx-h100:nodes=1",
    "--batch", "8", "--plan", "tp=8", "--json"], capture_output=True, text=True).stdout)
assert a["iteration_time_s"] == b["iteration_time_s"], (a["iteration_time_s"], b["iteration_time_s"])
PYEOF
check "a config plans" sh -c '"$0" plan --model "$1" --cluster dgx-a100:nodes=1 --batch 64 --json -o p.json >/dev/null 2>&1' \
  "$WEFT" "$HF/gpt2.json"
# Mixtures of experts. Mixtral 8x7B: 46.7B total, 12.9B active (model card),
# exactly those of the mixtral-8x7b zoo entry.
check "mixtral-8x7b config: 46,702,792,704" test "$(params "$HF/mixtral-8x7b.json")" = 46702792704
check "mixtral-8x7b config: 12,879,925,248 active" test "$(active "$HF/mixtral-8x7b.json")" = 12879925248
check "mixtral-8x7b zoo = its config" test "$(params mixtral-8x7b)" = 46702792704
# Qwen1.5-MoE-A2.7B publishes 14.3B total and 2.7B active; weft's llama has
# no q/k/v biases and no shared-expert gate (a [H,1] linear): 24 layers x
# (3 x 2048 + 2048) fewer than the checkpoint's 14,315,784,192.
check "qwen1.5-moe-a2.7b config: 14,315,784,192 less qkv biases and shared gates" \
  test "$(params "$HF/qwen1.5-moe-a2.7b.json")" = $((14315784192 - 24 * (3 * 2048 + 2048)))
check "qwen1.5-moe-a2.7b config: 2.7B active" "$PY" -c "assert abs($(active "$HF/qwen1.5-moe-a2.7b.json") / 2.7e9 - 1) < 0.01"
# DeepSeek-V3: 671B without its multi-token-prediction module; = the zoo entry.
check "deepseek-v3 config: 671,026,404,352" test "$(params "$HF/deepseek-v3.json")" = 671026404352
check "deepseek-v3 config = zoo" test "$(active "$HF/deepseek-v3.json")" = "$(active deepseek-v3)"
"$WEFT" show "$HF/deepseek-v3.json" --json >d.json 2>/dev/null
check "deepseek-v3 config fields" "$PY" - d.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))["config"]
want = dict(experts=256, top_k=8, moe_ffn=2048, shared_ffn=2048, first_dense=3, router="sigmoid", q_lora=1536,
            kv_lora=512, qk_nope=128, qk_rope=64, v_head=128, ffn=18432)
assert all(c[k] == v for k, v in want.items()), c
PYEOF
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["num_local_experts"]; json.dump(j, open("noexp.json","w"))' \
  "$HF/mixtral-8x7b.json"
expect_fail "mixtral missing experts" "missing field \"num_local_experts\"" show noexp.json
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["kv_lora_rank"]; json.dump(j, open("nokv.json","w"))' \
  "$HF/deepseek-v3.json"
expect_fail "deepseek missing kv_lora_rank" "missing field \"kv_lora_rank\"" show nokv.json
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); j["decoder_sparse_step"]=2; json.dump(j, open("sparse.json","w"))' \
  "$HF/qwen1.5-moe-a2.7b.json"
expect_fail "qwen2-moe sparse step" "\"decoder_sparse_step\" other than 1" show sparse.json
printf '{"architectures": ["FalconForCausalLM"], "hidden_size": 4544}' >falcon.json
expect_fail "unknown architecture" "architecture FalconForCausalLM" show falcon.json
printf '{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 2}' >short.json
expect_fail "missing field" "missing field \"num_attention_heads\"" show short.json

# The training sequence (issue 22, item 8): WF_HF_DEFAULT_SEQ = 4096 tokens,
# capped at max_position_embeddings, said on stderr; config.json:seq=N sets it.
"$WEFT" show "$HF/llama3.2-1b.json" --json >s.json 2>s.err
check "default seq 4096, not max_position_embeddings 131072" \
  "$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["config"]["seq"] == 4096' s.json
check "the sequence is said on stderr, once" test "$(grep -c "training sequence 4096 tokens (max_position_embeddings=131072" s.err)" -eq 1
"$WEFT" show "$HF/gpt2.json" --json >g.json 2>g.err
check "gpt2: the default capped at n_positions 1024" \
  "$PY" -c 'import json,sys; assert json.load(open(sys.argv[1]))["config"]["seq"] == 1024' g.json
check "gpt2: said" grep -q "training sequence 1024 tokens (n_positions=1024" g.err
"$WEFT" show "$HF/llama3.2-1b.json:seq=8192,layers=4,dtype=fp16" --json >o.json 2>o.err
check "overrides: seq, layers, dtype" "$PY" - o.json <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); c = j["config"]
assert c["seq"] == 8192 and c["layers"] == 4 and j["dtype"] == "fp16" and c["hidden"] == 2048, (j["dtype"], c)
assert c["tie_embeddings"] is True
# 4 of the 16 layers of 60,821,504 parameters, one tied [128256, 2048] table, the final norm
assert j["params"] == 128256 * 2048 + 4 * 60821504 + 2048, j["params"]
PYEOF
check "overrides: nothing said when seq is given" test ! -s o.err
"$WEFT" show "$HF/gpt2.json:seq=2048" >/dev/null 2>l.err
check "seq above n_positions: a warning" grep -q "seq=2048 is longer than n_positions=1024" l.err
expect_fail "unknown override" "kv_head" show "$HF/llama3.2-1b.json:kv_head=4"
expect_fail "bad override value" "layers" show "$HF/llama3.2-1b.json:layers=0"
expect_fail "empty override" "key=value" show "$HF/llama3.2-1b.json:"
# Overrides on weft's own model files too.
printf '{"name": "small", "family": "llama", "layers": 2, "hidden": 256, "heads": 4, "seq": 128, "vocab": 1000}' >small.json
"$WEFT" show "small.json:layers=3,tie_embeddings=1" --json >w.json 2>/dev/null
check "model file overrides" "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))["config"]; assert c["layers"] == 3 and c["tie_embeddings"], c' w.json

# Tied embeddings: Llama 3.2 1B has exactly 1,235,814,400 parameters (model
# card): the 128256 x 2048 embedding, shared with the head; 16 layers of
# 60,821,504 (q and o 2048 x 2048, k and v 2048 x 512 for 8 kv heads of 64,
# SwiGLU 3 x 2048 x 8192, two RMSNorms of 2048); the final RMSNorm.
check "llama3.2-1b config (tied): 1,235,814,400" test "$(params "$HF/llama3.2-1b.json")" = 1235814400
check "llama3.2-1b untied: one more 128256 x 2048 matrix" \
  test "$(params "$HF/llama3.2-1b.json:tie_embeddings=0")" = $((1235814400 + 128256 * 2048))
# Qwen2.5-0.5B publishes 494,032,768 with q/k/v biases, which weft's llama has
# not: 24 layers x (896 + 2 x 128) fewer.
check "qwen2.5-0.5b config (tied): 494,032,768 less its qkv biases" \
  test "$(params "$HF/qwen2.5-0.5b.json")" = $((494032768 - 24 * (896 + 2 * 128)))
# Memory: one table fewer. With dp only (zero=0, fp16/bf16 weights with Adam:
# 2 weight + 2 gradient + 12 optimizer bytes per parameter) the tied model
# needs 16 x 128256 x 2048 bytes less; with pp=2 the first stage holds the
# embedding and the last the head either way (the same memory), and the tied
# copies' gradients are summed across the two (more data-parallel traffic).
est() { "$WEFT" estimate --model "$HF/llama3.2-1b.json:tie_embeddings=$1" --cluster dgx-h100:nodes=1 --batch 64 \
  --plan "$2" --json 2>/dev/null; }
est 1 dp=8 >t8.json; est 0 dp=8 >u8.json; est 1 dp=4,pp=2 >t2.json; est 0 dp=4,pp=2 >u2.json
check "tied: memory and traffic" "$PY" - t8.json u8.json t2.json u2.json <<'PYEOF'
import json, sys
t8, u8, t2, u2 = (json.load(open(f)) for f in sys.argv[1:5])
d = u8["memory_per_device_bytes"] - t8["memory_per_device_bytes"]
assert abs(d - 16 * 128256 * 2048) <= 1e-6 * d, d
assert t2["memory_per_device_bytes"] == u2["memory_per_device_bytes"], (t2["memory_per_device_bytes"], u2["memory_per_device_bytes"])
assert t2["breakdown"]["dp_comm"] > u2["breakdown"]["dp_comm"], (t2["breakdown"], u2["breakdown"])
PYEOF
finish hfconfig.sh
