#!/usr/bin/env bash
# Exports checked against the frameworks' own definitions (issue 22): every
# flag `weft export --to megatron[@VERSION]` and `--to megatron-deepspeed`
# write must be one that the framework's parser accepts at a pinned commit,
# with a value where the flag takes one and a value among its choices; every
# key of `--to deepspeed` must be a key DeepSpeed reads. The flag and key
# lists are tests/data/frameworks/*, extracted from the frameworks'
# repositories by scripts/extract-megatron-args and
# scripts/extract-deepspeed-config (their commits are in the files' headers).
# The model shape flags must reproduce each model as its publisher gives it
# (config.json of Meta's Llama 3, Mistral's Mixtral, DeepSeek-V3; GPT-3's
# Table 2.1), and the plan's degrees must be the plan's. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
FW="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/frameworks"

cat >"$tmp/flags.py" <<'PYEOF'
# flags.py LIST[,LIST...] OUT JSON: OUT (weft's arguments, one flag a line,
# joined by backslash-newlines, values shell-quoted) against the parser's flag
# lists; writes the flags and values as JSON for the shape checks.
import json, shlex, sys
lists, out, dst = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
known = {}
for path in lists:
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        choices = None
        for extra in f[2:]:
            if extra.startswith("choices="):
                choices = extra[len("choices="):].split(",")
        known[f[0]] = (f[1], choices)
text = open(out).read()
lines = text.splitlines()
assert lines, "empty output"
for i, l in enumerate(lines):  # one flag a line, each but the last continued
    assert l.startswith("--"), ("not a flag line", l)
    assert l.endswith(" \\") == (i + 1 < len(lines)), ("continuation", l)
toks = shlex.split(text.replace("\\\n", " "))
args, i = {}, 0
while i < len(toks):
    t = toks[i]
    assert t in known, "flag %s is not accepted by the parser (%s)" % (t, ", ".join(lists))
    assert t not in args, "flag %s given twice" % t
    kind, choices = known[t]
    has_value = i + 1 < len(toks) and not toks[i + 1].startswith("--")
    if kind == "value":
        assert has_value, "flag %s takes a value" % t
    elif kind == "flag":
        assert not has_value, "flag %s takes no value, got %s" % (t, toks[i + 1])
    if has_value:
        if choices:
            assert toks[i + 1] in choices, "%s %s: not one of %s" % (t, toks[i + 1], choices)
        args[t] = toks[i + 1]
        i += 2
    else:
        args[t] = True
        i += 1
json.dump(args, open(dst, "w"))
PYEOF

cat >"$tmp/shape.py" <<'PYEOF'
# shape.py FORMAT MODEL PLAN BATCH ARGS_JSON: the model and the plan in the
# arguments. The model numbers are the publishers' (config.json, GPT-3 paper).
import json, sys
fmt, model, plan, batch, path = sys.argv[1:6]
a = json.load(open(path))
p = dict(kv.split("=") for kv in plan.split(","))
MODELS = {
    # GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, ffn 4 x d_model, context 2048.
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, ffn=49152, seq=2048, llama=False),
    # meta-llama/Meta-Llama-3-70B config.json: rope_theta 500000, 8 key-value heads.
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv=8, ffn=28672, seq=8192, rope=500000, llama=True),
    # mistralai/Mixtral-8x7B-v0.1 config.json: 8 local experts, 2 per token, rope_theta 1e6.
    "mixtral-8x7b": dict(layers=32, hidden=4096, heads=32, kv=8, ffn=14336, seq=4096, rope=1000000, llama=True,
                         experts=8, topk=2, moe_ffn=14336, score="softmax", pattern=[1] * 32),
    # deepseek-ai/DeepSeek-V3 config.json: 256 routed experts of 2048, 8 per token, 1 shared, first 3 layers
    # dense (18432), sigmoid scores; MLA q_lora_rank 1536, kv_lora_rank 512, qk 128 + 64, v 128; rope_theta 10000.
    "deepseek-v3": dict(layers=61, hidden=7168, heads=128, ffn=18432, seq=4096, rope=10000, llama=True,
                        experts=256, topk=8, moe_ffn=2048, shared=2048, score="sigmoid", pattern=[0] * 3 + [1] * 58,
                        mla=dict(q=1536, kv=512, qk=128, rope=64, v=128)),
}
m = MODELS[model]
def want(flag, value=True):
    got = a.get(flag)
    assert got == (value if value is True else str(value)), "%s %s: %s expected %s" % (model, plan, flag, value)
def absent(flag):
    assert flag not in a, "%s %s: %s should not be there" % (model, plan, flag)
tp, pp = int(p.get("tp", 1)), int(p.get("pp", 1))
want("--tensor-model-parallel-size", tp)
want("--pipeline-model-parallel-size", pp)
want("--micro-batch-size", p["mbs"])
want("--global-batch-size", batch)
for flag, key in (("--num-layers", "layers"), ("--hidden-size", "hidden"), ("--num-attention-heads", "heads"),
                  ("--ffn-hidden-size", "ffn"), ("--seq-length", "seq"), ("--max-position-embeddings", "seq")):
    want(flag, m[key])
zero = int(p.get("zero", 0))
if fmt == "megatron-deepspeed":
    want("--deepspeed")
    want("--deepspeed_config", "ds_config.json")
    want("--zero-stage", zero)
    (want if pp == 1 else absent)("--no-pipeline-parallel")
    if m["llama"]:
        for f in ("--swiglu", "--use-rotary-position-embeddings", "--no-position-embedding", "--disable-bias-linear",
                  "--untie-embeddings-and-output-weights"):
            want(f)
        want("--normalization", "rmsnorm")
        want("--rotary-position-embeddings-theta", m["rope"])
        want("--num-key-value-heads", m["kv"])
    else:
        want("--normalization", "layernorm")
        absent("--swiglu")
    sys.exit()
# Megatron-LM
absent("--overlap-p2p-communication")  # removed in 2023; the parser has allow_abbrev=False
if "ep" in p: want("--expert-model-parallel-size", p["ep"])
if "cp" in p: want("--context-parallel-size", p["cp"])
if int(p.get("vpp", 1)) > 1: want("--num-layers-per-virtual-pipeline-stage", m["layers"] // (pp * int(p["vpp"])))
if zero == 3:
    want("--data-parallel-sharding-strategy", "optim_grads_params")
    assert a.get("--use-megatron-fsdp") or a.get("--use-custom-fsdp"), "zero=3 without Megatron-FSDP"
if 1 <= zero:
    want("--use-distributed-optimizer")
if not m["llama"]:
    want("--normalization", "LayerNorm")
    want("--position-embedding-type", "learned_absolute")
    for f in ("--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--num-experts"):
        absent(f)
    sys.exit()
want("--normalization", "RMSNorm")
want("--swiglu")
want("--position-embedding-type", "rope")
want("--rotary-base", m["rope"])
want("--disable-bias-linear")
want("--untie-embeddings-and-output-weights")
if "kv" in m:
    want("--group-query-attention")
    want("--num-query-groups", m["kv"])
if "mla" in m:
    x = m["mla"]
    want("--multi-latent-attention")
    for flag, v in (("--q-lora-rank", x["q"]), ("--kv-lora-rank", x["kv"]), ("--qk-head-dim", x["qk"]),
                    ("--qk-pos-emb-head-dim", x["rope"]), ("--v-head-dim", x["v"])):
        want(flag, v)
    absent("--group-query-attention")
if "experts" not in m:
    absent("--num-experts")
    sys.exit()
want("--num-experts", m["experts"])
want("--moe-router-topk", m["topk"])
want("--moe-grouped-gemm")
want("--moe-token-dispatcher-type", "alltoall")
# Older releases lack some MoE flags; their defaults must then be the model's.
if "--moe-ffn-hidden-size" in a: want("--moe-ffn-hidden-size", m["moe_ffn"])
else: assert m["moe_ffn"] == m["ffn"], "expert width %d left at ffn %d" % (m["moe_ffn"], m["ffn"])
if "--moe-router-score-function" in a: want("--moe-router-score-function", m["score"])
else: assert m["score"] == "softmax"
if "shared" in m: want("--moe-shared-expert-intermediate-size", m["shared"])
else: absent("--moe-shared-expert-intermediate-size")
# Megatron-LM's --moe-layer-freq: an int N (layer i has experts when i % N == 0)
# or a Python list expression (megatron/training/arguments.py, moe_freq_type).
f = a.get("--moe-layer-freq", "1")
pattern = eval(f, {"__builtins__": {}}) if "[" in f else [int(i % int(f) == 0) for i in range(m["layers"])]
assert pattern == m["pattern"], (model, f, pattern)
PYEOF

cat >"$tmp/dsconfig.py" <<'PYEOF'
# dsconfig.py KEYS OUT PLAN BATCH: every leaf of the config is a key DeepSpeed
# reads, the stage one of its ZeroStageEnum, and the batch arithmetic DeepSpeed
# asserts holds (train_batch_size = micro x accumulation x data-parallel ranks).
import json, sys
keys_path, out, plan, batch = sys.argv[1:5]
keys, stages = set(), []
for line in open(keys_path):
    if line.startswith("#"): continue
    f = line.split()
    keys.add(f[0])
    if len(f) > 1 and f[1].startswith("values="): stages = [int(x) for x in f[1][7:].split(",")]
j = json.load(open(out))
def leaves(d, pre=""):
    for k, v in d.items():
        if isinstance(v, dict): yield from leaves(v, pre + k + ".")
        else: yield pre + k
for k in leaves(j):
    assert k in keys, "ds_config key %s is not one DeepSpeed reads" % k
assert j["zero_optimization"]["stage"] in stages
p = dict(kv.split("=") for kv in plan.split(","))
dp, mbs = int(p.get("dp", 1)), int(p["mbs"])
assert j["train_batch_size"] == int(batch) == mbs * j["gradient_accumulation_steps"] * dp, j
assert j["train_micro_batch_size_per_gpu"] == mbs and j["zero_optimization"]["stage"] == int(p.get("zero", 0))
PYEOF

# model cluster batch plan: the plans checked, for every format and version.
cat >"$tmp/plans" <<'EOF'
gpt3-175b dgx-a100:nodes=8 64 dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full
gpt3-175b dgx-h100:nodes=8 64 dp=8,tp=8,mbs=1,zero=3,recompute=full
llama3-70b dgx-h100:nodes=8 128 dp=8,tp=8,mbs=1,zero=3,sp=1,recompute=full
llama3-70b dgx-h100:nodes=8 128 dp=2,tp=8,pp=4,vpp=5,mbs=1,zero=1,sp=1,recompute=selective
llama3-70b dgx-h100:nodes=8 128 dp=4,tp=4,pp=4,mbs=1,zero=1,sp=1,recompute=full
mixtral-8x7b dgx-h100:nodes=8 256 dp=16,tp=2,cp=2,ep=8,etp=1,sp=1,zero=1,mbs=1
mixtral-8x7b dgx-h100:nodes=8 256 dp=32,tp=2,ep=8,sp=1,zero=1,mbs=1
deepseek-v3 dgx-h100:nodes=32 1024 dp=128,tp=2,mbs=8,recompute=full,sp=1,zero=3,ep=8,etp=1
EOF
VERSIONS="core_r0.8.0 core_r0.9.0 core_r0.10.0 core_r0.11.0 core_v0.12.0 core_v0.13.0 core_v0.14.0 core_v0.15.0
core_v0.16.0 core_v0.17.0 core_v0.18.0 core_v0.19.0 main"
n=0
while read -r model cluster batch plan; do
  for v in $VERSIONS; do
    to=megatron@$v
    [ "$v" = main ] && to=megatron
    list="$FW/megatron-lm@$v.flags"
    "$WEFT" export "$plan" --to "$to" --model "$model" --cluster "$cluster" --batch "$batch" >"$tmp/o" 2>"$tmp/e"
    rc=$?
    if [ $rc -eq 1 ] && [ "$v" != main ] && grep -q "has no --" "$tmp/e"; then
      # A release without a flag the plan needs: the refusal names the flag,
      # which that release's list lacks, and the first release that has it.
      flag=$(grep -o -- "has no --[a-z0-9-]*" "$tmp/e" | cut -c8-)
      since=$(grep -o -- "--to megatron@[a-z0-9_.]*" "$tmp/e" | cut -d@ -f2)
      check "$to $model $plan: refused flag $flag not in $v" sh -c '! grep -q -- "^$0 " "$1"' "$flag" "$list"
      check "$to $model $plan: $flag in $since" grep -q -- "^$flag " "$FW/megatron-lm@$since.flags"
      echo "refused: $to $model $plan: $flag (since $since)"
      n=$((n + 1))
      continue
    fi
    check "$to $model $plan: exit 0 ($(cat "$tmp/e"))" test $rc -eq 0
    check "$to $model $plan: flags in the $v parser" "$PY" "$tmp/flags.py" "$list" "$tmp/o" "$tmp/a.json"
    check "$to $model $plan: model and plan" "$PY" "$tmp/shape.py" megatron "$model" "$plan" "$batch" "$tmp/a.json"
    n=$((n + 1))
  done
  # Megatron-DeepSpeed and DeepSpeed (no interleaving, no MoE in this export, ZeRO-2/3 only at pp=1).
  case "$plan" in *vpp=*|*ep=*) continue ;; esac
  case "$model" in mixtral*|deepseek*) continue ;; esac
  "$WEFT" export "$plan" --to megatron-deepspeed --model "$model" --cluster "$cluster" --batch "$batch" >"$tmp/o" 2>"$tmp/e"
  check "megatron-deepspeed $model $plan: exit 0 ($(cat "$tmp/e"))" test $? -eq 0
  check "megatron-deepspeed $model $plan: flags in its parser" "$PY" "$tmp/flags.py" \
    "$FW/megatron-deepspeed.flags,$FW/deepspeed-launcher.flags" "$tmp/o" "$tmp/a.json"
  check "megatron-deepspeed $model $plan: model and plan" "$PY" "$tmp/shape.py" megatron-deepspeed "$model" "$plan" \
    "$batch" "$tmp/a.json"
  "$WEFT" export "$plan" --to deepspeed --model "$model" --cluster "$cluster" --batch "$batch" >"$tmp/o" 2>"$tmp/e"
  check "deepspeed $model $plan: exit 0" test $? -eq 0
  check "deepspeed $model $plan: keys DeepSpeed reads" "$PY" "$tmp/dsconfig.py" "$FW/deepspeed-config.keys" "$tmp/o" \
    "$plan" "$batch"
  n=$((n + 1))
done <"$tmp/plans"
check "every plan exported or refused ($n)" test "$n" -eq 107

# The best plan weft finds, as `plan --emit` writes it: flags, model and plan.
while read -r model cluster batch; do
  "$WEFT" plan --model "$model" --cluster "$cluster" --batch "$batch" --json >"$tmp/p.json" 2>/dev/null
  best=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$tmp/p.json")
  "$WEFT" plan --model "$model" --cluster "$cluster" --batch "$batch" --emit megatron >"$tmp/o" 2>/dev/null
  check "plan --emit megatron $model: exit 0" test $? -eq 0
  check "plan --emit megatron $model: flags in the main parser" "$PY" "$tmp/flags.py" "$FW/megatron-lm@main.flags" \
    "$tmp/o" "$tmp/a.json"
  check "plan --emit megatron $model ($best): model and plan" "$PY" "$tmp/shape.py" megatron "$model" "$best" \
    "$batch" "$tmp/a.json"
done <<'EOF'
gpt3-175b dgx-a100:nodes=8 64
llama3-70b dgx-h100:nodes=8 128
mixtral-8x7b dgx-h100:nodes=8 256
EOF

# The data are what the scripts extracted: each list names its commit, and
# the main list has the flags the issue names and not the removed one.
for f in "$FW"/megatron-lm@*.flags "$FW"/megatron-deepspeed.flags "$FW"/deepspeed-launcher.flags \
  "$FW"/deepspeed-config.keys; do
  check "$(basename "$f") names its commit" grep -Eq "^# commit [0-9a-f]{40} " "$f"
done
check "main: --no-overlap-p2p-communication, no --overlap-p2p-communication" sh -c \
  'grep -q "^--no-overlap-p2p-communication flag" "$0" && ! grep -q "^--overlap-p2p-communication " "$0"' \
  "$FW/megatron-lm@main.flags"

# The rotary base from a Hugging Face config (rope_theta) and from rope_base=.
HF="$(dirname "$FW")/hf/llama3-8b.json"
"$WEFT" export dp=8,zero=1,recompute=full --to megatron --model "$HF" --cluster dgx-h100:nodes=1 --batch 8 >"$tmp/o" 2>&1
check "config.json rope_theta 500000" grep -qx -- "--rotary-base 500000 \\\\" "$tmp/o"
"$WEFT" export dp=8 --to megatron-deepspeed --model "llama:layers=2,hidden=64,heads=4,rope_base=250000" \
  --cluster dgx-h100:nodes=1 --batch 8 >"$tmp/o" 2>&1
check "rope_base=250000" grep -qx -- "--rotary-position-embeddings-theta 250000 \\\\" "$tmp/o"
expect_fail "rope_base below 1" "rope_base=0.5" export dp=8 --to megatron --model "llama:rope_base=0.5" \
  --cluster dgx-h100:nodes=1 --batch 8
expect_fail "rope_base not an integer" "takes an integer" export dp=8 --to megatron \
  --model "llama:layers=2,hidden=64,heads=4,rope_base=10000.5" --cluster dgx-h100:nodes=1 --batch 8

# Refusals: versions, and what Megatron-DeepSpeed cannot take.
expect_fail "unknown version" "unknown Megatron-LM version" export dp=8 --to megatron@core_v9 --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "version on another format" "has no versioned targets" export dp=8 --to deepspeed@0.16 --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "fsdp before core_v0.12.0" "core_v0.12.0" export dp=8,zero=3 --to megatron@core_r0.11.0 --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "MLA before core_r0.10.0" "core_r0.10.0" export dp=128,tp=2,mbs=8,recompute=full,sp=1,zero=1 \
  --to megatron@core_r0.9.0 --model deepseek-v3 --cluster dgx-h100:nodes=32 --batch 1024
expect_fail "megatron-deepspeed: experts" "dense models" export dp=8,zero=1 --to megatron-deepspeed \
  --model mixtral-8x7b --cluster dgx-h100:nodes=1 --batch 64
expect_fail "megatron-deepspeed: interleaving" "interleaved" export dp=1,pp=2,vpp=2 --to megatron-deepspeed \
  --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
expect_fail "megatron-deepspeed: zero=3 with pp" "ZeRO stage 2 and 3" export dp=2,pp=4,zero=3 \
  --to megatron-deepspeed --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
finish export-frameworks
