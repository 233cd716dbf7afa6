#!/usr/bin/env bash
# The PyTorch exports (issue 22, items 4 and 7): `weft export --to fsdp` writes
# an FSDP2 script and `--to ddp` a DDP script. Each compiles; its calls use
# only the keyword arguments of the PyTorch signatures in
# tests/data/frameworks/pytorch-api.txt; fully_shard comes from
# torch.distributed.fsdp (>= 2.6) or torch.distributed._composable.fsdp (2.4);
# the plan's micro-batch, accumulation, resharding, recomputation and bucket
# are its constants; the header launches torchrun with c10d rendezvous. Where
# torch is installed the DDP script of a tiny model trains 2 steps on 2 CPU
# processes (gloo); without torch that part is skipped. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
DATA="${WEFT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/frameworks"

cat >"$tmp/pt.py" <<'PYEOF'
# pt.py KIND API OUT PLAN BATCH NODES PER_NODE: one script against the API list and the plan.
import ast, re, sys
kind, api, out, plan, batch, nodes, per = sys.argv[1:8]
p = dict(kv.split("=") for kv in plan.split(","))
dp, mbs, zero = int(p["dp"]), int(p.get("mbs", 1)), int(p.get("zero", 0))
text = open(out).read()
tree = ast.parse(text)
facts = [l.split() for l in open(api) if l.strip() and not l.startswith("#")]
def params(api):  # the parameters an API takes in every source that has it
    sets = [set(f[3:]) for f in facts if f[0] in ("kwargs", "fields") and f[2].split(".")[-1] == api.split(".")[-1]
            and (f[2] == api or "." not in api)]
    assert sets, "no source lists %s" % api
    return set.intersection(*sets)
kw = {"fully_shard": params("fully_shard"), "MixedPrecisionPolicy": params("MixedPrecisionPolicy"),
      "DistributedDataParallel": params("torch.nn.parallel.DistributedDataParallel"),
      "AdamW": {x for f in facts if f[0] == "kwargs" and f[2] == "torch.optim.AdamW" and "fused" in f for x in f[3:]},
      "checkpoint": params("torch.utils.checkpoint.checkpoint"),
      "clip_grad_norm_": params("torch.nn.utils.clip_grad_norm_")}
assert "set_requires_gradient_sync" not in text or params("set_requires_gradient_sync") >= {"requires_gradient_sync"}
const = {ast.unparse(n.targets[0]): ast.literal_eval(n.value) for n in tree.body
         if isinstance(n, ast.Assign) and not isinstance(n.value, (ast.Call, ast.Attribute))}
seen = set()
for n in ast.walk(tree):
    if isinstance(n, ast.Call):
        name = ast.unparse(n.func).split(".")[-1]
        if name in kw:
            seen.add(name)
            for k in n.keywords:
                assert k.arg in kw[name], "%s has no keyword %s in every source checked" % (name, k.arg)
    if isinstance(n, ast.ImportFrom) and n.module == "torch.distributed._composable.fsdp":
        exports = [set(f[3:]) for f in facts if f[0] == "exports" and f[2] == n.module][0]
        assert {a.name for a in n.names} <= exports, n.module
torchrun = [l for l in text.splitlines() if l.startswith("#   torchrun ")][0]
options = [set(f[3:]) for f in facts if f[0] == "option"][0]
for o in re.findall(r"(--[a-z_-]+)", torchrun):
    assert o in options, "torchrun has no option %s" % o
assert const["MICRO_BATCH"] == mbs and const["ACCUM"] == int(batch) // (dp * mbs) and const["DP"] == dp
assert const["RECOMPUTE"] == p.get("recompute", "none")
launch = "torchrun --nnodes %s --nproc_per_node %s --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500" % (nodes, per)
assert launch in text, launch
if kind == "fsdp":
    assert seen == {"fully_shard", "MixedPrecisionPolicy", "AdamW", "checkpoint", "clip_grad_norm_"}, seen
    assert "from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard" in text
    assert "from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard" in text
    assert const["RESHARD_AFTER_FORWARD"] == (zero == 3)
    assert "for block in model.layers:\n        fully_shard(block" in text  # one group per transformer block
    assert "set_requires_gradient_sync(micro == ACCUM - 1)" in text
else:
    assert seen == {"DistributedDataParallel", "AdamW", "checkpoint", "clip_grad_norm_"}, seen
    assert const["BUCKET_CAP_MB"] == float(p["comm"].split(":")[1]) if "comm" in p else const["BUCKET_CAP_MB"] == 25
    assert "model.no_sync()" in text and "clip_grad_norm_" in text and "fused=" in text
PYEOF

n=0
pt() { # kind model cluster batch plan nodes per_node
  "$WEFT" export "$5" --to "$1" --model "$2" --cluster "$3" --batch "$4" >"$tmp/s.py" 2>"$tmp/e"
  check "$1 $2 $5: exit 0 ($(head -c 300 "$tmp/e"))" test $? -eq 0
  check "$1 $2 $5: compiles" "$PY" -m py_compile "$tmp/s.py"
  check "$1 $2 $5: APIs and plan" "$PY" "$tmp/pt.py" "$1" "$DATA/pytorch-api.txt" "$tmp/s.py" "$5" "$4" "$6" "$7"
  n=$((n + 1))
}
pt fsdp llama3-70b:dtype=bf16 dgx-h100:nodes=8 128 dp=64,mbs=1,zero=3,recompute=full 8 8
pt fsdp llama3-8b:dtype=bf16,seq=2048 dgx-h100:nodes=1 64 dp=8,mbs=1,zero=2,recompute=selective 1 8
pt fsdp mixtral-8x7b:dtype=bf16 dgx-h100:nodes=8 128 dp=64,mbs=1,zero=3,recompute=full 8 8
pt fsdp gpt3-175b:dtype=bf16 dgx-a100:nodes=8 64 dp=64,mbs=1,zero=3,recompute=full 8 8
pt ddp gpt2 dgx-a100:nodes=1 64 dp=8,mbs=2,zero=0 1 8
pt ddp gpt2-xl:dtype=bf16 dgx-h100:nodes=2 64 dp=16,mbs=1,zero=0,comm=ddp:50,recompute=full 2 8
pt ddp moe-tiny dgx-h100:nodes=1 16 dp=8,mbs=1,zero=0 1 8
check "pytorch exports checked ($n)" test "$n" -eq 7
expect_fail "fsdp: zero=0 is ddp" "--to ddp" export dp=8,zero=0 --to fsdp --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
expect_fail "fsdp: fp16" "dtype=bf16" export dp=8,zero=3 --to fsdp --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
expect_fail "ddp: zero=3" "--to fsdp" export dp=8,zero=3 --to ddp --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
expect_fail "ddp: tp" "tp=1, pp=1" export dp=4,tp=2 --to ddp --model gpt2 --cluster dgx-a100:nodes=1 --batch 64
expect_fail "fsdp: MLA" "MLA" export dp=8,zero=3 --to fsdp --model deepseek-tiny --cluster dgx-h100:nodes=1 --batch 64

# A CPU run of the DDP script (2 gloo processes, a tiny Llama), where torch is
# installed. Debian's torch 1.13 predates three calls the script makes for
# >= 2.4 (F.scaled_dot_product_attention, torch.amp.GradScaler, AdamW's fused
# flag): the test supplies reference versions of those only, and starts the two
# ranks with torchrun's environment (1.13's launcher fails on Python 3.11).
if "$PY" -c "import torch" 2>/dev/null; then
  mkdir -p "$tmp/shim"
  cat >"$tmp/shim/sitecustomize.py" <<'SHIM'
import inspect, math, torch, torch.nn.functional as F
if not hasattr(F, "scaled_dot_product_attention"):
    def sdpa(q, k, v, is_causal=False):  # softmax(q k^T / sqrt(d) + causal mask) v
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")) if is_causal else s
        return s.softmax(-1) @ v
    F.scaled_dot_product_attention = sdpa
if not hasattr(torch.amp, "GradScaler"):
    class GradScaler(torch.cuda.amp.GradScaler):
        def __init__(self, device="cuda", **kw):
            super().__init__(**kw)
    torch.amp.GradScaler = GradScaler
if "fused" not in inspect.signature(torch.optim.AdamW.__init__).parameters:
    _AdamW = torch.optim.AdamW
    class AdamW(_AdamW):
        def __init__(self, params, fused=False, **kw):
            assert not fused
            super().__init__(params, **kw)
    torch.optim.AdamW = AdamW
SHIM
  # a Llama, a mixture (every expert must get a gradient, or DDP stops) and a GPT
  for spec in "full llama:layers=2,hidden=64,heads=4,ffn=128,seq=32,vocab=96,dtype=fp32" "selective moe-tiny" \
    "none gpt:layers=2,hidden=64,heads=4,seq=32,vocab=96,dtype=fp32"; do
    set -- $spec
    "$WEFT" export dp=2,mbs=2,zero=0,recompute=$1 --to ddp --model "$2" --cluster dgx-a100:nodes=1 --batch 8 >"$tmp/tiny.py" 2>"$tmp/e"
    port=$((29500 + RANDOM % 1000))
    for r in 0 1; do
      WEFT_STEPS=2 OMP_NUM_THREADS=1 PYTHONPATH="$tmp/shim" RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port timeout 300 "$PY" "$tmp/tiny.py" >"$tmp/run$r" 2>&1 &
    done
    wait
    # synthetic uniform tokens over 96 ids: the loss starts near ln 96 = 4.56
    check "ddp $2 recompute=$1: 2 CPU processes train 2 steps ($(tail -2 "$tmp/run0"))" "$PY" -c '
import math, re, sys
steps = re.findall(r"^step (\d+) loss ([0-9.]+)", open(sys.argv[1]).read(), re.M)
assert [s for s, _ in steps] == ["1", "2"] and all(abs(float(l) - math.log(96)) < 0.5 for _, l in steps), steps
' "$tmp/run0"
  done
else
  echo "export_pytorch.sh: torch is not installed; the CPU run of the DDP script is skipped"
fi
finish export_pytorch.sh
