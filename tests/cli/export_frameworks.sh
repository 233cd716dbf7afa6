#!/usr/bin/env bash
# Exports checked against the frameworks' own definitions (issue 22, item 7),
# offline: every key, keyword argument and import of `weft export --to
# torchtitan` (main's Python config) and `--to torchtitan@0.2` (the v0.2.2 job
# TOML) must be in the lists scripts/extract-torchtitan-config extracted from
# torchtitan's source at the pinned commits (tests/data/frameworks/); layers
# per stage pass torchtitan's stage counting (pipeline_parallel.py); the batch
# fields give the plan's micro-batch and accumulation. The FSDP2 and DDP
# scripts compile, call only keyword arguments of the PyTorch signatures read
# at pinned commits (below), and, where torch is installed, the DDP script
# trains two steps on 2 CPU processes. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
DATA="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/frameworks"

cat >"$tmp/tt.py" <<'PYEOF'
# tt.py KIND DATA OUT MODEL_JSON BATCH PLAN: one torchtitan export against the extracted lists.
import ast, json, math, sys, tomllib
kind, data, out, model, batch, plan = sys.argv[1:7]
m = json.load(open(model)); batch = int(batch)
p = {k: v for k, v in (kv.split("=") for kv in plan.split(","))}
dp, tp, pp, vpp, mbs, zero = (int(p.get(k, 1 if k != "zero" else 0)) for k in ("dp", "tp", "pp", "vpp", "mbs", "zero"))
accum = batch // (dp * mbs)
rec = p.get("recompute", "none")
facts = [l.split() for l in open(data) if l.strip() and not l.startswith("#")]
fields = {(f[1], f[2]) for f in facts if f[0] == "field"}
literal = {f[1]: f[2:] for f in facts if f[0] == "literal"}
names = {(f[1], f[2]) for f in facts if f[0] == "name"}
kwargs = {f[1]: f[2:] for f in facts if f[0] == "kwargs"}
flavors = {(f[1], f[2]) for f in facts if f[0] == "flavor"}
shapes = {(f[1], f[2]): dict(kv.split("=") for kv in f[3:]) for f in facts if f[0] == "shape"}
converters = {f[1] for f in facts if f[0] == "converter"}
text = open(out).read()

def stages_ok(layers, lps, first, last, pp, vpp):
    """torchtitan's stage counting (pipeline_llm and generate_llm_fqn_per_model_part,
    torchtitan/distributed/pipeline_parallel.py at both pins), restated: the
    stages are ceil((layers + first + last) / lps); they must divide over pp
    ranks (one per rank for single-stage schedules, 2 or more for looped ones);
    the effective layers spread evenly, the first stage and last stage giving
    up `first` and `last` slots to the embedding and the head. Returns the
    blocks per stage, or None where torchtitan raises."""
    n = math.ceil((layers + first + last) / lps)
    if n % pp or (vpp == 1 and n // pp != 1) or (vpp > 1 and n // pp < 2):
        return None
    eff = layers + first + last
    base, extra = divmod(eff, n)
    if base == 0 or first > base or last > base:
        return None
    per = [base + (i < extra) - (first if i == 0 else 0) - (last if i == n - 1 else 0) for i in range(n)]
    return per if sum(per) == layers else None

if kind == "toml":
    t = tomllib.loads(text)
    for sec, kv in t.items():
        for k, v in kv.items():
            assert (sec, k) in fields, "torchtitan 0.2 has no %s.%s" % (sec, k)
            if sec + "." + k in literal:
                assert v in literal[sec + "." + k], (sec, k, v)
    tr, par = t["training"], t["parallelism"]
    assert ("llama3" if t["model"]["name"] == "llama3" else t["model"]["name"], t["model"]["flavor"]) in flavors
    for c in t["model"].get("converters", []):
        assert c in converters, c
    shape = shapes[(t["model"]["name"], t["model"]["flavor"])]
    assert int(shape["n_layers"]) == m["layers"] and int(shape["dim"]) == m["hidden"], shape
    if "multiple_of" in shape:  # llama3's FFN width rule (models/llama3/model/args.py)
        d = int(2 * 4 * m["hidden"] / 3)
        d = int(float(shape["ffn_dim_multiplier"]) * d)
        mo = int(shape["multiple_of"])
        assert mo * ((d + mo - 1) // mo) == m["ffn"], (d, m["ffn"])
    # train.py: accumulation = global / (local x dp); pipelining splits local into micro-batches
    dpdeg = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert dpdeg == dp and tr["global_batch_size"] == batch and tr["seq_len"] == m["seq"]
    if pp == 1:
        assert tr["local_batch_size"] == mbs and tr["global_batch_size"] // (mbs * dp) == accum
    else:
        assert par["pipeline_parallel_microbatch_size"] == mbs
        assert tr["local_batch_size"] // mbs == accum and tr["global_batch_size"] == tr["local_batch_size"] * dp
    lps, first, last = (par.get(k) for k in ("pipeline_parallel_layers_per_stage",
                        "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"))
    assert t["activation_checkpoint"]["mode"] == rec
else:
    tree = ast.parse(text)
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("torchtitan"):
            for a in node.names:
                assert (node.module, a.name) in names, "torchtitan main has no %s.%s" % (node.module, a.name)
                imported[a.name] = node.module
    calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            kws = {k.arg: k.value for k in node.keywords}
            calls.setdefault(fn, []).append(kws)
            cls = fn if (fn, "") else None
            if any(c == fn for c, _ in fields):
                for k in kws:
                    assert (fn, k) in fields, "torchtitan main: %s has no field %s" % (fn, k)
                    if fn + "." + k in literal and isinstance(kws[k], ast.Constant):
                        assert kws[k].value in literal[fn + "." + k], (fn, k, kws[k].value)
            elif fn in imported:  # every torchtitan function called: its parameters, their values
                key = imported[fn] + "." + fn
                assert key in kwargs, "the extracted list lacks %s's parameters" % key
                assert len(node.args) <= len(kwargs[key]), key
                for k, v in list(kws.items()) + list(zip(kwargs[key], node.args)):
                    assert k in kwargs[key], "torchtitan main: %s has no parameter %s" % (key, k)
                    if key + "." + k in literal and isinstance(v, ast.Constant):
                        assert v.value in literal[key + "." + k], (key, k, v.value)
                if fn == "model_registry":
                    assert (imported[fn].split(".")[-1], node.args[0].value) in flavors
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).startswith("config."):
            path = ast.unparse(node.targets[0]).split(".")[1:]
            if len(path) == 1:
                assert ("Trainer.Config", path[0]) in fields, path
            else:
                cls = {"training": "TrainingConfig", "parallelism": "ParallelismConfig"}[path[0]]
                assert (cls, path[1]) in fields, path
                if cls + "." + path[1] in literal:
                    assert node.value.value in literal[cls + "." + path[1]], path
    assign = {ast.unparse(n.targets[0]): n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)}
    seq = m["seq"]
    assert assign["config.training.max_context_length"].value == seq
    # trainer.py: accumulation = tokens per step / (tokens per micro-batch x pp micro-batches x dp)
    mb_tokens = assign["config.training.num_tokens_per_microbatch_per_dp_rank"].value
    step_tokens = assign["config.training.num_tokens_per_train_step"].value
    par = {k: v.value for k, v in calls["ParallelismConfig"][0].items()}
    pp_micro = par.get("num_pp_microbatches", 1) if pp > 1 else 1
    dpdeg = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert mb_tokens == mbs * seq and dpdeg == dp and step_tokens == batch * seq
    assert step_tokens // (mb_tokens * pp_micro * dpdeg) == (1 if pp > 1 else accum) and pp_micro * mbs * dp * (1 if pp > 1 else accum) == batch
    lps, first, last = (par.get(k) for k in ("pipeline_parallel_layers_per_stage",
                        "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"))
    if "make_moe_config" in calls:  # a custom MoE flavor: the model's shape and routing
        const = lambda fn, k: [c[k].value for c in calls.get(fn, [])]
        assert const("make_moe_config", "num_experts") == [m["experts"]]
        assert const("make_router_config", "num_experts") == [m["experts"]]
        assert const("make_router_config", "top_k") == const("make_routed_experts_config", "top_k") == [m["top_k"]]
        assert const("make_router_config", "score_func") == [m["router"]]
        assert const("make_router_config", "route_norm") == [True]
        assert const("make_routed_experts_config", "hidden_dim") == [m["moe_ffn"]]
        assert const("make_gqa_config", "n_heads") == [m["heads"]] and const("make_gqa_config", "n_kv_heads") == [m["kv_heads"]]
        assert const("make_gqa_config", "head_dim") == [m["hidden"] // m["heads"]]
        assert ("qk_norm" not in calls["make_gqa_config"][0]) and const("make_gqa_config", "fuse_qkv") == [True]
        shared = [c["shared_experts"] for c in calls["make_moe_config"] if "shared_experts" in c]
        assert len(shared) == (1 if m["shared_ffn"] else 0)
        ffn = sorted(const("make_ffn_config", "hidden_dim"))  # the shared expert's width and the dense MLP's
        assert ffn == sorted(([m["shared_ffn"]] if m["shared_ffn"] else []) +
                             ([m["ffn"]] if m["first_dense"] or m["moe_freq"] > 1 else [])), ffn
        loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
        assert ast.unparse(loop.iter) == "range(%d)" % m["layers"]
        # the layer rule (docs/models.md): experts from first_dense on, every moe_freq-th layer
        rule = next((ast.unparse(n.test) for n in ast.walk(loop) if isinstance(n, ast.If)), None)
        want = None if not m["first_dense"] and m["moe_freq"] == 1 else "layer_id >= %d" % m["first_dense"]
        want = want if m["moe_freq"] == 1 else want + " and layer_id %% %d == 0" % m["moe_freq"]
        assert rule == want, (rule, want)
        spec = {k: ast.unparse(v) for k, v in calls["ModelSpec"][0].items()}
        assert spec["parallelize_fn"] == "parallelize_qwen3" and spec["model"] == "config", spec
        assert ast.unparse(calls["Qwen3Model.Config"][0]["layers"]) == "weft_layers(dim)"
        ep = int(p.get("ep", 1))
        assert par.get("expert_parallel_degree", 1) == ep
    ac = assign["config.activation_checkpoint"]
    assert {"full": "FullAC.Config()", "selective": "SelectiveAC.Config()", "none": "None"}[rec] == ast.unparse(ac)
if pp > 1:
    per = stages_ok(m["layers"], lps, first, last, pp, vpp)
    assert per == [m["layers"] // (pp * vpp)] * (pp * vpp), (lps, first, last, per)
    # the old export (layers per stage with torchtitan's default weights 1 and 1) fails the count here
    if vpp > 1 and m["layers"] in (80, 96):
        assert stages_ok(m["layers"], m["layers"] // (pp * vpp), 1, 1, pp, vpp) is None
PYEOF

shape() { # keeps what the checks need of `weft show --json`
  "$PY" - "$1" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); s = j["config"]
moe = {k: s.get(k, 0) for k in ("experts", "top_k", "moe_ffn", "shared_ffn", "first_dense", "moe_freq")}
json.dump({k: s[k] for k in ("layers", "hidden", "heads", "kv_heads", "seq", "ffn")} | moe |
          {"router": s.get("router"), "dtype": j["dtype"]},
          open(sys.argv[1], "w"))
PYEOF
}
n=0
tt() { # kind model cluster batch plan
  local to=torchtitan data=$DATA/torchtitan-main.txt
  [ "$1" = toml ] && to=torchtitan@0.2 data=$DATA/torchtitan-0.2.txt
  "$WEFT" show "$2" --json >"$tmp/m.json" 2>/dev/null
  shape "$tmp/m.json"
  "$WEFT" export "$5" --to $to --model "$2" --cluster "$3" --batch "$4" >"$tmp/o" 2>"$tmp/e"
  check "$to $2 $5: exit 0 ($(head -c 300 "$tmp/e"))" test $? -eq 0
  [ "$1" = py ] && check "$to $2 $5: compiles" "$PY" -m py_compile "$tmp/o"
  check "$to $2 $5: every key in torchtitan's definitions" "$PY" "$tmp/tt.py" "$1" "$data" "$tmp/o" "$tmp/m.json" "$4" "$5"
  n=$((n + 1))
}
L70=llama3-70b:dtype=bf16
G175=gpt3-175b:dtype=bf16
for kind in py toml; do
  # Llama 3 70B on 64 H100s: FSDP x TP, FSDP x TP x PP interleaved (80 layers / (4 x 5) = 4), pure FSDP
  tt $kind $L70 dgx-h100:nodes=8 64 dp=8,tp=8,mbs=1,sp=1,zero=3,recompute=full
  tt $kind $L70 dgx-h100:nodes=8 64 dp=2,tp=8,pp=4,vpp=5,mbs=1,sp=1,zero=2,recompute=selective
  tt $kind $L70 dgx-h100:nodes=8 64 dp=2,tp=8,pp=4,vpp=2,mbs=1,sp=1,zero=3,recompute=full
  tt $kind $L70 dgx-h100:nodes=8 128 dp=64,mbs=1,zero=3,recompute=full
  tt $kind $L70 dgx-h100:nodes=8 64 dp=2,tp=8,pp=4,mbs=2,sp=1,zero=3,pipe=gpipe,recompute=full
  tt $kind llama3-8b:dtype=bf16 dgx-h100:nodes=1 64 dp=8,mbs=1,zero=3,fp8=1
  # DeepSeek-V3 as torchtitan's deepseek_v3 671B flavor, experts over 8 ranks
  tt $kind deepseek-v3:dtype=bf16 dgx-h100:nodes=32 256 dp=256,ep=8,mbs=1,zero=3,recompute=full
done
# GPT-3 175B (a custom flavor; main only): interleaved 96 / (8 x 3) = 4 and 96 / (8 x 2) = 6
tt py $G175 dgx-a100:nodes=8 64 dp=1,tp=8,pp=8,mbs=1,vpp=3,sp=1,recompute=full
tt py $G175 dgx-a100:nodes=16 128 dp=2,tp=8,pp=8,mbs=1,vpp=2,sp=1,zero=3,recompute=full
tt py llama3-8b:dtype=bf16 dgx-h100:nodes=1 64 dp=2,tp=4,mbs=1,sp=0,zero=0,fp8=1
# Mixtral 8x7B (a custom MoE flavor; main only): experts over 8 ranks with FSDP, with TP, with PP
MX=mixtral-8x7b:dtype=bf16
tt py $MX dgx-h100:nodes=8 256 dp=64,ep=8,mbs=2,zero=3
tt py $MX dgx-h100:nodes=8 256 dp=32,tp=2,sp=1,ep=8,etp=1,mbs=4,zero=3,recompute=selective
tt py $MX dgx-h100:nodes=8 256 dp=16,pp=4,vpp=2,ep=8,mbs=1,zero=3,recompute=full
# a dense first layer and a shared expert (the layer rule and shared_experts)
tt py moe-tiny:first_dense=1,layers=3 dgx-h100:nodes=1 64 dp=8,ep=4,mbs=1,zero=3
tt py moe-tiny:moe_freq=2,layers=4 dgx-h100:nodes=1 64 dp=8,ep=2,mbs=1,zero=2
check "torchtitan exports checked ($n)" test "$n" -eq 22
# the rotary base (rope.py RoPE.Config.theta): Mixtral's 1e6, an override, Llama 2's default
"$WEFT" export dp=64,ep=8,mbs=2,zero=3 --to torchtitan --model $MX --cluster dgx-h100:nodes=8 --batch 256 2>/dev/null \
  | grep -c "ComplexRoPE.Config(dim=128, max_context_length=4096, theta=1000000.0)" >/dev/null
check "torchtitan: Mixtral's rotary base" test $? -eq 0
"$WEFT" export dp=8,ep=4,mbs=1,zero=3 --to torchtitan --model moe-tiny:rope_base=5000.25 --cluster dgx-h100:nodes=1 \
  --batch 64 2>/dev/null | grep -c "theta=5000.25)" >/dev/null
check "torchtitan: rope_base reaches theta" test $? -eq 0
"$WEFT" export dp=8,mbs=1,zero=3 --to torchtitan --model llama2-7b:dtype=bf16 --cluster dgx-h100:nodes=1 --batch 64 \
  2>/dev/null | grep -c "max_context_length=4096, theta=10000.0)" >/dev/null
check "torchtitan: a dense custom flavor's rotary base" test $? -eq 0
grep -q '"quantize.linear.float8"' <("$WEFT" export dp=8,mbs=1,zero=3,fp8=1 --to torchtitan@0.2 --model llama3-8b:dtype=bf16 \
  --cluster dgx-h100:nodes=1 --batch 64 2>/dev/null)
check "torchtitan@0.2: float8 converter name" test $? -eq 0

expect_fail "torchtitan: fp16 refused" "bfloat16 or float32" export dp=8,zero=3 --to torchtitan --model llama3-8b \
  --cluster dgx-h100:nodes=1 --batch 64
expect_fail "torchtitan@0.2: DDP with TP" "DDP has not supported" export dp=2,tp=4,sp=1,zero=0 --to torchtitan@0.2 \
  --model llama3-8b:dtype=bf16 --cluster dgx-h100:nodes=1 --batch 64
expect_fail "torchtitan@0.2: no flavor for GPT-3" "flavor" export dp=1,tp=8,pp=8,vpp=3,sp=1 --to torchtitan@0.2 \
  --model $G175 --cluster dgx-a100:nodes=8 --batch 64
expect_fail "torchtitan@0.2: tp without sp" "sequence parallelism" export dp=8,tp=8,zero=3 --to torchtitan@0.2 \
  --model $L70 --cluster dgx-h100:nodes=8 --batch 64
expect_fail "torchtitan@0.3" "torchtitan@0.2" export dp=64,zero=3 --to torchtitan@0.3 --model $L70 \
  --cluster dgx-h100:nodes=8 --batch 64
expect_fail "fsdp@1" "no versioned targets" export dp=64,zero=3 --to fsdp@1 --model $L70 --cluster dgx-h100:nodes=8 --batch 64
expect_fail "torchtitan@0.2: mixtral" "flavor" export dp=64,ep=8,zero=3 --to torchtitan@0.2 --model mixtral-8x7b:dtype=bf16 \
  --cluster dgx-h100:nodes=8 --batch 64
expect_fail "torchtitan: latent attention without a flavor" "latent attention" export dp=8,zero=3 --to torchtitan \
  --model deepseek-tiny --cluster dgx-h100:nodes=1 --batch 64
finish export_frameworks.sh
