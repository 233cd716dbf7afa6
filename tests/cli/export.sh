#!/usr/bin/env bash
# Plans exported to frameworks (issue 13): for every plan of the calibration
# files (Korthikanti et al. 2022 on A100s; NVIDIA's H100 runs), `weft export
# --to megatron|deepspeed|torchtitan|fsdp` writes each framework's settings,
# checked field by field against the plan, or refuses in one line naming what
# the framework lacks. `weft plan --emit` prints the same as `weft export` of
# the plan it chose. Tokens and days: `weft estimate` prints tokens/s per
# device and days per trillion tokens, `weft plan --tokens --days` the deadline
# they imply. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
DATA="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data"

cat >"$tmp/rows.py" <<'PYEOF'
# One line per calibration plan: id, model spec, cluster, batch, plan string.
import json, sys
k = json.load(open(sys.argv[1] + "/calibration-korthikanti2022.json"))
for r in k["iteration_time_s"]:
    sel = r["mode"] == "seqsel"
    plan = "dp=%d,tp=%d,pp=%d,mbs=%d,vpp=%d,recompute=%s,sp=%d" % (
        r["dp"], r["tp"], r["pp"], r["mbs"], r["vpp"], "selective" if sel else "full", 1 if sel else 0)
    nodes = (r["gpus"] + 7) // 8
    print("%s-%s-%d %s dgx-a100:nodes=%d %d %s" % (r["model"], r["mode"], r["gpus"], r["model"], nodes, r["batch"], plan))
h = json.load(open(sys.argv[1] + "/calibration-h100.json"))
for r in h["rows"]:
    p = r["plan"]
    plan = "dp=%d,tp=%d,pp=%d,mbs=%d,vpp=%d,recompute=none,sp=%d,zero=1" % (p["dp"], p["tp"], p["pp"], p["mbs"], p["vpp"], p["sp"])
    nodes = (r["gpus"] + 7) // 8
    print("%s %s dgx-h100:nodes=%d %d %s" % (r["id"], r["model"]["spec"], nodes, r["batch"], plan))
PYEOF

cat >"$tmp/check.py" <<'PYEOF'
# check.py FORMAT MODEL_JSON BATCH PLAN OUT ERR RC: the export against the plan.
import json, re, sys
fmt, model, batch, plan, out, err, rc = sys.argv[1:8]
m = json.load(open(model)); batch = int(batch); rc = int(rc)
p = dict(kv.split("=") for kv in plan.split(","))
dp, tp, pp, vpp = (int(p.get(k, 1)) for k in ("dp", "tp", "pp", "vpp"))
# a plan without mbs: the whole per-rank batch at pp = 1, Megatron's 1 with pipelining (docs/plan-format.md)
mbs = int(p["mbs"]) if "mbs" in p else (batch // dp if pp == 1 else 1)
sp, zero = int(p.get("sp", 0)), int(p.get("zero", 0))
rec = p.get("recompute", "none")
text, errtext = open(out).read(), open(err).read()
accum = batch // (dp * mbs)
def refused(word):
    assert rc == 1 and not text and len(errtext.strip().splitlines()) == 1 and word in errtext, (fmt, plan, rc, errtext)
if fmt == "megatron":
    assert rc == 0, errtext
    toks = text.replace("\\\n", " ").split()
    a = {}
    i = 0
    while i < len(toks):
        assert toks[i].startswith("--"), toks[i]
        if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            a[toks[i]] = toks[i + 1]; i += 2
        else:
            a[toks[i]] = True; i += 1
    want = {"--tensor-model-parallel-size": str(tp), "--pipeline-model-parallel-size": str(pp),
            "--micro-batch-size": str(mbs), "--global-batch-size": str(batch),
            "--num-layers": str(m["layers"]), "--hidden-size": str(m["hidden"]),
            "--num-attention-heads": str(m["heads"]), "--seq-length": str(m["seq"]),
            "--max-position-embeddings": str(m["seq"]), "--ffn-hidden-size": str(m["ffn"]),
            "--overlap-grad-reduce": True}
    if vpp > 1: want["--num-layers-per-virtual-pipeline-stage"] = str(m["layers"] // (pp * vpp))
    if sp: want["--sequence-parallel"] = True
    if rec == "full": want.update({"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": "1"})
    if rec == "selective": want["--recompute-granularity"] = "selective"
    if zero >= 1: want.update({"--use-distributed-optimizer": True, "--overlap-param-gather": True})
    if m["kv_heads"] < m["heads"]: want.update({"--group-query-attention": True, "--num-query-groups": str(m["kv_heads"])})
    want[{"fp16": "--fp16", "bf16": "--bf16"}[m["dtype"]]] = True
    # The default profile, megatron-core: Transformer Engine with flash
    # attention, userbuffers with sp, overlapped interleaved sends.
    want.update({"--transformer-impl": "transformer_engine", "--attention-backend": "flash"})
    if sp and tp > 1: want["--tp-comm-overlap"] = True
    # zero=3: Megatron-FSDP sharding parameters, gradients and optimizer state.
    if zero >= 3: want.update({"--use-megatron-fsdp": True, "--data-parallel-sharding-strategy": "optim_grads_params",
                               "--ckpt-format": "fsdp_dtensor"})
    # The architecture flags (--normalization, --swiglu, ...) are checked by
    # tests/cli/export-frameworks.sh against the models' published configs.
    arch = {"--normalization", "--position-embedding-type", "--swiglu", "--rotary-base", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights", "--attention-dropout", "--hidden-dropout",
            "--apply-residual-connection-post-layernorm"}
    a = {k: v for k, v in a.items() if k not in arch}
    assert a == want, (plan, sorted(set(a.items()) ^ set(want.items())))
elif fmt == "deepspeed":
    if vpp > 1: refused("interleaved"); sys.exit()
    if pp > 1 and zero >= 2: refused("ZeRO stage 2 and 3"); sys.exit()
    if rec == "selective": refused("recompute=full or none"); sys.exit()
    assert rc == 0, errtext
    j = json.loads(text)
    want = {"train_batch_size": batch, "train_micro_batch_size_per_gpu": mbs, "gradient_accumulation_steps": accum,
            "zero_optimization": {"stage": zero, "overlap_comm": True},
            "bf16": {"enabled": m["dtype"] == "bf16"}, "fp16": {"enabled": m["dtype"] == "fp16"}}
    assert j == want, (j, want)
    assert j["train_batch_size"] == j["train_micro_batch_size_per_gpu"] * j["gradient_accumulation_steps"] * dp
    assert not errtext, errtext  # Megatron-DeepSpeed's arguments: --to megatron-deepspeed
elif fmt == "torchtitan":
    # torchtitan@0.2's TOML (fields checked in export_torchtitan.sh): the
    # zoo's fp16 models are refused first, naming bf16.
    if m["dtype"] == "fp16": refused("bfloat16 or float32"); sys.exit()
    assert rc == 0 or zero == 1, errtext
elif fmt == "fsdp":
    # the FSDP2 script (checked in export_pytorch.sh): refusals in order
    if tp > 1 or pp > 1: refused("pure (sharded) data parallelism"); sys.exit()
    if zero == 1: refused("optimizer-only sharding"); sys.exit()
    if zero == 0: refused("--to ddp"); sys.exit()
    if m["dtype"] == "fp16": refused("dtype=bf16"); sys.exit()
    assert rc == 0 and text.startswith("#!/usr/bin/env python3"), errtext
PYEOF

shape() { # keeps what the checks need of `weft show --json`
  "$PY" - "$1" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); s = j["config"]
json.dump({k: s[k] for k in ("layers", "hidden", "heads", "kv_heads", "seq", "ffn")} | {"dtype": j["dtype"]},
          open(sys.argv[1], "w"))
PYEOF
}
run_export() { # fmt model cluster batch plan
  "$WEFT" export "$5" --to "$1" --model "$2" --cluster "$3" --batch "$4" >"$tmp/o" 2>"$tmp/e"
  echo $?
}
n=0
while read -r id model cluster batch plan; do
  "$WEFT" show "$model" --json >"$tmp/m.json" 2>/dev/null
  shape "$tmp/m.json"
  for fmt in megatron deepspeed torchtitan fsdp; do
    f=$fmt; [ $fmt = torchtitan ] && f=torchtitan@0.2
    rc=$(run_export $f "$model" "$cluster" "$batch" "$plan")
    check "$id $fmt" "$PY" "$tmp/check.py" $fmt "$tmp/m.json" "$batch" "$plan" "$tmp/o" "$tmp/e" "$rc"
    n=$((n + 1))
  done
done < <("$PY" "$tmp/rows.py" "$DATA")
check "every calibration row exported ($n checks)" test "$n" -eq 60

# Plans the calibration rows do not cover: FSDP and torchtitan fields, and refusals.
"$WEFT" show gpt2 --json >"$tmp/m.json" 2>/dev/null
shape "$tmp/m.json"
for plan in dp=8,zero=3 dp=8,zero=2,mbs=2 dp=8,zero=0,recompute=full dp=2,tp=2,pp=2,sp=1,zero=2,vpp=2,recompute=selective \
  dp=4,pp=2,zero=3; do
  for fmt in megatron deepspeed torchtitan fsdp; do
    f=$fmt; [ $fmt = torchtitan ] && f=torchtitan@0.2
    rc=$(run_export $f gpt2 dgx-a100:nodes=1 64 "$plan")
    check "gpt2 $plan $fmt" "$PY" "$tmp/check.py" $fmt "$tmp/m.json" 64 "$plan" "$tmp/o" "$tmp/e" "$rc"
  done
done
# The profile keys (issue 11) and expert parallelism (issue 15) in the exports.
"$WEFT" export dp=16,tp=2,cp=2,ep=8,etp=1,sp=1,zero=1,fp8=1,mbs=1 --to megatron --model mixtral-8x7b:dtype=bf16 \
  --cluster dgx-h100:nodes=8 --batch 256 >"$tmp/moe.txt" 2>/dev/null
for flag in "--context-parallel-size 2" "--expert-model-parallel-size 8" "--expert-tensor-parallel-size 1" \
  "--num-experts 8" "--moe-router-topk 2" "--fp8-format hybrid"; do
  check "megatron: $flag" grep -q -- "$flag" "$tmp/moe.txt"
done
# torchtitan has no Mixtral flavor: main gets a custom MoE flavor (tests/cli/export_frameworks.sh checks it), 0.2 a refusal.
"$WEFT" export dp=16,tp=2,cp=2,ep=8,etp=1,sp=1,zero=2,mbs=1,recompute=full --to torchtitan --model mixtral-8x7b:dtype=bf16 \
  --cluster dgx-h100:nodes=8 --batch 256 >"$tmp/ttmoe.py" 2>/dev/null
check "torchtitan: Mixtral as a custom MoE flavor" grep -q "expert_parallel_degree=8," "$tmp/ttmoe.py"
check "torchtitan: Mixtral's experts" grep -q "num_experts=8," "$tmp/ttmoe.py"
expect_fail "torchtitan@0.2: no Mixtral flavor" "flavor" export dp=16,tp=2,cp=2,ep=8,etp=1,sp=1,zero=2 --to torchtitan@0.2 \
  --model mixtral-8x7b:dtype=bf16 --cluster dgx-h100:nodes=8 --batch 256
expect_fail "deepspeed refuses cp" "context parallelism" export dp=4,cp=2 --to deepspeed --model llama2-7b --cluster dgx-h100:nodes=1 --batch 8
expect_fail "fsdp refuses fp8" "FP8" export dp=8,zero=3,fp8=1 --to fsdp --model llama2-7b --cluster dgx-h100:nodes=1 --batch 8
expect_fail "unknown format" "did you mean 'megatron'" export dp=8 --to megatrn --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "megatron: gpipe" "GPipe" export dp=2,pp=2,pipe=gpipe --to megatron --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "megatron: dear" "comm schedule 'dear'" export dp=8,comm=dear --to megatron --model gpt2 \
  --cluster dgx-a100:nodes=1 --batch 64
expect_fail "invalid plan" "heads" export dp=1,tp=5 --to megatron --model gpt2 --cluster dgx-a100:nodes=1 --batch 5
"$WEFT" plan --model mlp-tiny --cluster dgx-a100:nodes=1 --batch 64 -o "$tmp/ol.json" >/dev/null 2>&1
expect_fail "op-level plan file" "op-level" export "$tmp/ol.json" --to megatron --model mlp-tiny \
  --cluster dgx-a100:nodes=1 --batch 64

# plan --emit = export of the chosen plan
"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 --json >"$tmp/p.json" 2>/dev/null
best=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$tmp/p.json")
"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 --emit megatron >"$tmp/emit" 2>/dev/null
"$WEFT" export "$best" --to megatron --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 >"$tmp/exp" 2>/dev/null
check "plan --emit = export of the best plan" cmp -s "$tmp/emit" "$tmp/exp"
check "plan --emit: megatron args" grep -q -- "--tensor-model-parallel-size" "$tmp/emit"

# tokens and days
"$WEFT" estimate --model gpt3-175b --cluster dgx-a100:nodes=8 --batch 64 \
  --plan dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full --json >"$tmp/est.json" 2>/dev/null
check "estimate: tokens/s per device and days per 1e12 tokens" "$PY" - "$tmp/est.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
tps = j["samples_per_s"] * 2048 / j["devices"]
assert abs(j["tokens_per_s_per_device"] - tps) <= 1e-9 * tps, (j["tokens_per_s_per_device"], tps)
assert abs(j["days_per_trillion_tokens"] - 1e12 / (tps * j["devices"]) / 86400) <= 1e-9 * j["days_per_trillion_tokens"]
PYEOF
"$WEFT" plan --model gpt3-175b --cluster dgx-a100:nodes=128 --batch 1536 --tokens 300e9 --days 30 \
  --devices-range 256-1024 --json >"$tmp/td.json" 2>"$tmp/td.err"
check "plan --tokens --days: the deadline they imply" "$PY" - "$tmp/td.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
want = 30 * 86400 / (300e9 / (1536 * 2048))
assert abs(j["deadline_s"] - want) <= 1e-9 * want, (j["deadline_s"], want)
b = [p for p in j["per_devices"] if p["devices"] == j["fewest_devices_meeting_deadline"]][0]
assert b["best"]["iteration_time_s"] <= want
PYEOF
check "plan --tokens --days: the conversion is printed" grep -q "tokens in 30 days at batch 1536 x sequence 2048" "$tmp/td.err"
expect_fail "--tokens without --days" "go together" plan --model gpt2 --cluster dgx-a100:nodes=1 --batch 8 --tokens 1e9
finish export.sh
