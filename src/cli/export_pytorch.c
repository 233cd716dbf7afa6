/* weft export: plain PyTorch training scripts for a plan (docs/export.md).
 *
 *   --to fsdp  an FSDP2 script: fully_shard per transformer block and on the
 *              root with a MixedPrecisionPolicy, reshard_after_forward as the
 *              plan's ZeRO stage, activation checkpointing, micro-batches and
 *              gradient accumulation (set_requires_gradient_sync).
 *   --to ddp   a DistributedDataParallel script for plain data parallelism:
 *              bucket_cap_mb from the plan's comm threshold, torch.autocast
 *              over fp32 master weights, no_sync() accumulation.
 *
 * Both build the model from weft's shape (a self-contained GPT or Llama module
 * written into the script: embedding, blocks with F.scaled_dot_product_attention,
 * GELU MLP or SwiGLU, experts for a mixture, norm, head), feed synthetic tokens,
 * and start with a multi-node torchrun line. Every API called is checked
 * against PyTorch's source (tests/data/frameworks/pytorch-api.txt): fully_shard
 * and MixedPrecisionPolicy live in torch.distributed.fsdp from 2.6 and in
 * torch.distributed._composable.fsdp in 2.4 and 2.5; the script takes either. */
#include "cli/export-impl.h"

#include <string.h>

/* The checks both scripts share: one data-parallel group over whole blocks. */
static wf_status pt_check(const ectx *e)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    wf_status st = wf_export_refuse_rc(e, p, 0);
    if (st != WF_OK)
        return st;
    if (!wf_model_is_transformer(m) || m->family == WF_FAMILY_BERT)
        return wf_export_refuse(e, "the script builds decoder-only transformers (GPT and Llama families) only");
    if (m->kv_lora > 0)
        return wf_export_refuse(e, "the script's attention is multi-head or grouped-query; latent attention (MLA) "
                                   "has no form there (torchtitan's deepseek_v3 has it)");
    if (p->tp > 1 || p->pp > 1)
        return wf_export_refuse(e, "the script is pure (sharded) data parallelism (tp=1, pp=1; torchtitan runs tp and "
                                   "pp)");
    if (p->cp > 1 || p->ep > 1)
        return wf_export_refuse(e, "the script has no context or expert parallelism (cp=1, ep=1; torchtitan has both)");
    if (p->fp8)
        return wf_export_refuse(e, "the script runs no FP8 products (fp8=0; torchtitan's float8 converter does)");
    if (p->comm.kind != WF_COMM_DDP)
        return wf_errorf(WF_INVAL, "%s cannot run this plan: comm schedule '%s' has no setting there (comm=ddp)",
                         e->fw, wf_comm_name(p->comm.kind));
    return WF_OK;
}

/* The header: what the script runs and how to launch it. */
static void pt_header(FILE *f, const ectx *e, const char *what, const char *file)
{
    const wf_plan *p = e->p;
    fprintf(f, "#!/usr/bin/env python3\n");
    fprintf(f, "# weft: %s for the plan dp=%d,mbs=%d,zero=%d,recompute=%s of %s\n", what, p->dp, p->mbs, p->zero,
            p->recompute == WF_RECOMPUTE_FULL ? "full" : p->recompute == WF_RECOMPUTE_SELECTIVE ? "selective" : "none",
            e->m->name);
    fprintf(f, "# at batch %lld (docs/export.md). Needs PyTorch >= 2.4 and GPUs (CPU and gloo for tests).\n",
            (long long)e->batch);
    fprintf(f, "# Run on each of the %lld node(s), with MASTER_ADDR the first node's address:\n", (long long)e->nodes);
    fprintf(f, "#   torchrun --nnodes %lld --nproc_per_node %lld --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 "
               "--rdzv_id weft %s\n",
            (long long)e->nodes, (long long)e->per_node, file);
    fprintf(f, "# WEFT_STEPS sets the number of optimizer steps (default 20).\n");
}

/* The model's shape and the plan, as the script's constants. */
static void pt_constants(FILE *f, const ectx *e, const char *dtype)
{
    const wf_model_config *m = e->m;
    const wf_plan *p = e->p;
    int gpt = m->family == WF_FAMILY_GPT;
    int64_t ffn = m->ffn > 0 ? m->ffn : 4 * m->hidden;
    int64_t ew = m->moe_ffn > 0 ? m->moe_ffn : ffn;
    int64_t shared = m->shared_ffn > 0 ? m->shared_ffn : m->shared_experts * ew;
    fprintf(f, "\n# ---- the model (%s) and the plan ----\n", m->name);
    fprintf(f, "ARCH = \"%s\"  # gpt: LayerNorm, GELU MLP, learned positions; llama: RMSNorm, SwiGLU, rotary\n",
            gpt ? "gpt" : "llama");
    fprintf(f, "LAYERS, HIDDEN, HEADS, KV_HEADS = %lld, %lld, %lld, %lld\n", (long long)m->layers,
            (long long)m->hidden, (long long)m->heads, (long long)(m->kv_heads > 0 ? m->kv_heads : m->heads));
    fprintf(f, "FFN, VOCAB, SEQ = %lld, %lld, %lld\n", (long long)ffn, (long long)m->vocab, (long long)m->seq);
    fprintf(f, "EXPERTS, TOP_K, EXPERT_FFN, SHARED_FFN = %lld, %lld, %lld, %lld\n", (long long)m->experts,
            (long long)m->top_k, (long long)ew, (long long)shared);
    fprintf(f, "FIRST_DENSE, MOE_FREQ, ROUTER = %lld, %lld, \"%s\"\n", (long long)m->first_dense,
            (long long)(m->moe_freq > 0 ? m->moe_freq : 1), m->moe_score == WF_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax");
    fprintf(f, "MICRO_BATCH = %d  # samples per rank per forward (mbs)\n", p->mbs);
    fprintf(f, "ACCUM = %lld  # micro-batches per optimizer step: batch / (dp x mbs)\n", (long long)e->accum);
    fprintf(f, "DP = %d\n", p->dp);
    fprintf(f, "RECOMPUTE = \"%s\"  # full: every block; selective: the attention core\n",
            p->recompute == WF_RECOMPUTE_FULL ? "full" : p->recompute == WF_RECOMPUTE_SELECTIVE ? "selective" : "none");
    fprintf(f, "DTYPE = %s\n", dtype);
}

/* Writes a NULL-terminated list of script text. */
static void pt_lines(FILE *f, const char *const *text)
{
    for (; *text; text++)
        fputs(*text, f);
}

/* The model, written once for both scripts. */
static const char *const PT_MODEL[] = {
    "\n\nclass RMSNorm(nn.Module):\n",
    "    def __init__(self, dim, eps=1e-5):\n",
    "        super().__init__()\n",
    "        self.eps = eps\n",
    "        self.weight = nn.Parameter(torch.ones(dim))\n",
    "\n",
    "    def forward(self, x):\n",
    "        y = x.float()\n",
    "        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)\n",
    "        return y.type_as(x) * self.weight\n",
    "\n",
    "\n",
    "def norm(dim):\n",
    "    return nn.LayerNorm(dim) if ARCH == \"gpt\" else RMSNorm(dim)\n",
    "\n",
    "\n",
    "class MLP(nn.Module):\n",
    "    \"\"\"GELU MLP (gpt) or SwiGLU (llama) of width `width`.\"\"\"\n",
    "\n",
    "    def __init__(self, width):\n",
    "        super().__init__()\n",
    "        gpt = ARCH == \"gpt\"\n",
    "        self.up = nn.Linear(HIDDEN, width, bias=gpt)\n",
    "        self.gate = None if gpt else nn.Linear(HIDDEN, width, bias=False)\n",
    "        self.down = nn.Linear(width, HIDDEN, bias=gpt)\n",
    "\n",
    "    def forward(self, x):\n",
    "        if self.gate is None:\n",
    "            return self.down(F.gelu(self.up(x)))\n",
    "        return self.down(F.silu(self.gate(x)) * self.up(x))\n",
    "\n",
    "\n",
    "class MoE(nn.Module):\n",
    "    \"\"\"Top-k routed experts (and a shared expert); every expert runs, on its tokens or none.\"\"\"\n",
    "\n",
    "    def __init__(self):\n",
    "        super().__init__()\n",
    "        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)\n",
    "        self.experts = nn.ModuleList(MLP(EXPERT_FFN) for _ in range(EXPERTS))\n",
    "        self.shared = MLP(SHARED_FFN) if SHARED_FFN else None\n",
    "\n",
    "    def forward(self, x):\n",
    "        shape = x.shape\n",
    "        x = x.reshape(-1, HIDDEN)\n",
    "        scores = self.router(x).float()\n",
    "        scores = torch.sigmoid(scores) if ROUTER == \"sigmoid\" else scores.softmax(dim=-1)\n",
    "        weight, index = scores.topk(TOP_K, dim=-1)\n",
    "        weight = (weight / weight.sum(dim=-1, keepdim=True)).to(x.dtype)\n",
    "        y = torch.zeros_like(x)\n",
    "        for e, expert in enumerate(self.experts):\n",
    "            token, slot = (index == e).nonzero(as_tuple=True)\n",
    "            y = y.index_add(0, token, expert(x[token]) * weight[token, slot].unsqueeze(-1))\n",
    "        if self.shared is not None:\n",
    "            y = y + self.shared(x)\n",
    "        return y.reshape(shape)\n",
    "\n",
    "\n",
    "def rotary(x, cos, sin):\n",
    "    x1, x2 = x.chunk(2, dim=-1)\n",
    "    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).type_as(x)\n",
    "\n",
    "\n",
    "def attention_core(q, k, v):\n",
    "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
    "\n",
    "\n",
    "class Block(nn.Module):\n",
    "    def __init__(self, layer):\n",
    "        super().__init__()\n",
    "        gpt = ARCH == \"gpt\"\n",
    "        self.head_dim = HIDDEN // HEADS\n",
    "        self.attention_norm = norm(HIDDEN)\n",
    "        self.wq = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=gpt)\n",
    "        self.wkv = nn.Linear(HIDDEN, 2 * KV_HEADS * self.head_dim, bias=gpt)\n",
    "        self.wo = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=gpt)\n",
    "        self.mlp_norm = norm(HIDDEN)\n",
    "        moe = EXPERTS > 0 and layer >= FIRST_DENSE and layer % MOE_FREQ == 0\n",
    "        self.mlp = MoE() if moe else MLP(FFN)\n",
    "\n",
    "    def attention(self, x, cos, sin):\n",
    "        b, s, _ = x.shape\n",
    "        q = self.wq(x).view(b, s, HEADS, self.head_dim).transpose(1, 2)\n",
    "        k, v = self.wkv(x).view(b, s, 2, KV_HEADS, self.head_dim).unbind(dim=2)\n",
    "        k, v = k.transpose(1, 2), v.transpose(1, 2)\n",
    "        if cos is not None:\n",
    "            q, k = rotary(q, cos, sin), rotary(k, cos, sin)\n",
    "        if KV_HEADS != HEADS:\n",
    "            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)\n",
    "            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)\n",
    "        if RECOMPUTE == \"selective\":\n",
    "            y = checkpoint(attention_core, q, k, v, use_reentrant=False)\n",
    "        else:\n",
    "            y = attention_core(q, k, v)\n",
    "        return self.wo(y.transpose(1, 2).reshape(b, s, HEADS * self.head_dim))\n",
    "\n",
    "    def layer(self, x, cos, sin):\n",
    "        x = x + self.attention(self.attention_norm(x), cos, sin)\n",
    "        return x + self.mlp(self.mlp_norm(x))\n",
    "\n",
    "    def forward(self, x, cos, sin):\n",
    "        # inside the module's hooks, so FSDP gathers before the checkpointed region (as torchtitan wraps)\n",
    "        if RECOMPUTE == \"full\":\n",
    "            return checkpoint(self.layer, x, cos, sin, use_reentrant=False)\n",
    "        return self.layer(x, cos, sin)\n",
    "\n",
    "\n",
    "class Model(nn.Module):\n",
    "    def __init__(self):\n",
    "        super().__init__()\n",
    "        self.embedding = nn.Embedding(VOCAB, HIDDEN)\n",
    "        self.positions = nn.Embedding(SEQ, HIDDEN) if ARCH == \"gpt\" else None\n",
    "        self.layers = nn.ModuleList(Block(i) for i in range(LAYERS))\n",
    "        self.norm = norm(HIDDEN)\n",
    "        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)\n",
    "\n",
    "    def init_weights(self):\n",
    "        with torch.no_grad():\n",
    "            for name, p in self.named_parameters():\n",
    "                if name.endswith(\"bias\"):\n",
    "                    nn.init.zeros_(p)\n",
    "                elif \"norm\" in name:\n",
    "                    nn.init.ones_(p)\n",
    "                else:\n",
    "                    nn.init.normal_(p, std=0.02)\n",
    "\n",
    "    def forward(self, tokens):\n",
    "        s = tokens.shape[1]\n",
    "        x = self.embedding(tokens)\n",
    "        cos = sin = None\n",
    "        if self.positions is not None:\n",
    "            x = x + self.positions(torch.arange(s, device=tokens.device))\n",
    "        else:\n",
    "            half = (HIDDEN // HEADS) // 2\n",
    "            freq = 10000.0 ** (-torch.arange(half, device=tokens.device, dtype=torch.float32) / half)\n",
    "            angle = torch.outer(torch.arange(s, device=tokens.device, dtype=torch.float32), freq)\n",
    "            cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)\n",
    "        for block in self.layers:\n",
    "            x = block(x, cos, sin)\n",
    "        return self.head(self.norm(x))\n",
    "\n",
    "\n",
    "def batches(device, rank):\n",
    "    \"\"\"Synthetic tokens: MICRO_BATCH sequences of SEQ + 1 per micro-batch.\"\"\"\n",
    "    g = torch.Generator().manual_seed(1234 + rank)\n",
    "    while True:\n",
    "        t = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ + 1), generator=g).to(device)\n",
    "        yield t[:, :-1], t[:, 1:]\n",
    "\n",
    "\n",
    "def setup():\n",
    "    cuda = torch.cuda.is_available()\n",
    "    dist.init_process_group(\"nccl\" if cuda else \"gloo\")\n",
    "    rank, world = dist.get_rank(), dist.get_world_size()\n",
    "    if world != DP:\n",
    "        raise SystemExit(f\"the plan has dp={DP} ranks; torchrun started {world}\")\n",
    "    local = int(os.environ.get(\"LOCAL_RANK\", \"0\"))\n",
    "    device = torch.device(\"cuda\", local) if cuda else torch.device(\"cpu\")\n",
    "    if cuda:\n",
    "        torch.cuda.set_device(device)\n",
    "    return rank, world, device\n",
    "\n",
    "\n",
    "def report(rank, step, loss, seconds):\n",
    "    if rank == 0:\n",
    "        tokens = DP * ACCUM * MICRO_BATCH * SEQ\n",
    "        print(f\"step {step} loss {loss:.4f} time {seconds:.3f} s tokens/s {tokens / seconds:.0f}\", flush=True)\n",
    NULL,
};

static const char *const PT_FSDP_MAIN[] = {
    "\n\ndef main():\n",
    "    rank, world, device = setup()\n",
    "    torch.manual_seed(0)\n",
    "    with torch.device(\"meta\"):\n",
    "        model = Model()\n",
    "    mesh = init_device_mesh(device.type, (world,))\n",
    "    mp = MixedPrecisionPolicy(param_dtype=DTYPE, reduce_dtype=torch.float32)\n",
    "    for block in model.layers:\n",
    "        fully_shard(block, mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD, mp_policy=mp)\n",
    "    fully_shard(model, mesh=mesh, reshard_after_forward=RESHARD_AFTER_FORWARD, mp_policy=mp)\n",
    "    model.to_empty(device=device)\n",
    "    model.init_weights()\n",
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == \"cuda\")\n",
    "    data = batches(device, rank)\n",
    "    for step in range(1, int(os.environ.get(\"WEFT_STEPS\", \"20\")) + 1):\n",
    "        start = time.perf_counter()\n",
    "        total = 0.0\n",
    "        for micro in range(ACCUM):\n",
    "            model.set_requires_gradient_sync(micro == ACCUM - 1)\n",
    "            inputs, labels = next(data)\n",
    "            logits = model(inputs)\n",
    "            loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten()) / ACCUM\n",
    "            loss.backward()\n",
    "            total += loss.detach()\n",
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "        optimizer.step()\n",
    NULL,
};

static const char *const PT_DDP_MAIN[] = {
    "\n\ndef main():\n",
    "    rank, world, device = setup()\n",
    "    torch.manual_seed(0)\n",
    "    model = Model().to(device)  # fp32 master weights; autocast computes in DTYPE\n",
    "    model.init_weights()\n",
    "    model = DistributedDataParallel(\n",
    "        model,\n",
    "        device_ids=[device.index] if device.type == \"cuda\" else None,\n",
    "        bucket_cap_mb=BUCKET_CAP_MB,\n",
    "        gradient_as_bucket_view=True,\n",
    "    )\n",
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == \"cuda\")\n",
    "    scaler = torch.amp.GradScaler(\"cuda\", enabled=DTYPE == torch.float16)\n",
    "    data = batches(device, rank)\n",
    "    for step in range(1, int(os.environ.get(\"WEFT_STEPS\", \"20\")) + 1):\n",
    "        start = time.perf_counter()\n",
    "        total = 0.0\n",
    "        for micro in range(ACCUM):\n",
    "            inputs, labels = next(data)\n",
    "            sync = contextlib.nullcontext() if micro == ACCUM - 1 else model.no_sync()\n",
    "            with sync:\n",
    "                fp32 = DTYPE == torch.float32\n",
    "                with contextlib.nullcontext() if fp32 else torch.autocast(device.type, dtype=DTYPE):\n",
    "                    logits = model(inputs)\n",
    "                loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten()) / ACCUM\n",
    "                scaler.scale(loss).backward()\n",
    "            total += loss.detach()\n",
    "        scaler.unscale_(optimizer)\n",
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "        scaler.step(optimizer)\n",
    "        scaler.update()\n",
    NULL,
};

/* The end of both scripts' step loop and the entry point. */
static const char *const PT_MAIN_TAIL[] = {
    "        optimizer.zero_grad(set_to_none=True)\n",
    "        dist.all_reduce(total)\n",
    "        report(rank, step, total.item() / world, time.perf_counter() - start)\n",
    "    dist.destroy_process_group()\n",
    "\n",
    "\n",
    "if __name__ == \"__main__\":\n",
    "    main()\n",
    NULL,
};

/* ---- FSDP2 ----------------------------------------------------------------------------- */

wf_status wf_export_fsdp(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status st = pt_check(e);
    if (st != WF_OK)
        return st;
    if (p->zero == 1)
        return wf_export_refuse(e, "FSDP has no optimizer-only sharding (zero=2 keeps parameters gathered from forward "
                                   "to backward, zero=3 reshards them; zero=0 is --to ddp)");
    if (p->zero == 0)
        return wf_export_refuse(e, "zero=0 replicates everything: that is DDP (--to ddp), not FSDP");
    if (e->m->dtype == WF_DTYPE_FP16)
        return wf_export_refuse(e, "the FSDP2 script trains in bf16 (fp16 needs loss scaling over sharded gradients): "
                                   "give the model dtype=bf16, e.g. MODEL:dtype=bf16");
    if (!f)
        return WF_OK;
    pt_header(f, e, "FSDP2 (fully_shard) training script", "train_fsdp.py");
    fprintf(f, "import os\nimport time\n\nimport torch\nimport torch.distributed as dist\nimport torch.nn as nn\n"
               "import torch.nn.functional as F\nfrom torch.distributed.device_mesh import init_device_mesh\n"
               "from torch.utils.checkpoint import checkpoint\n\n"
               "try:  # PyTorch >= 2.6\n"
               "    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard\n"
               "except ImportError:  # PyTorch 2.4 and 2.5\n"
               "    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard\n");
    pt_constants(f, e, e->m->dtype == WF_DTYPE_BF16 ? "torch.bfloat16" : "torch.float32");
    fprintf(f, "RESHARD_AFTER_FORWARD = %s  # zero=3 frees gathered parameters after forward; zero=2 keeps them\n",
            p->zero == 3 ? "True" : "False");
    pt_lines(f, PT_MODEL);
    pt_lines(f, PT_FSDP_MAIN);
    pt_lines(f, PT_MAIN_TAIL);
    return WF_OK;
}

/* ---- DDP ------------------------------------------------------------------------------- */

/* The export for sw=pytorch plans (plain data parallelism); taken for any
 * profile whose plan is zero=0, tp=1, pp=1. */
wf_status wf_export_ddp(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status st = pt_check(e);
    if (st != WF_OK)
        return st;
    if (p->zero != 0)
        return wf_export_refuse(e, "DDP replicates parameters, gradients and optimizer state (zero=0; zero=2 or 3 is "
                                   "--to fsdp)");
    if (!f)
        return WF_OK;
    double mib = p->comm.threshold_bytes > 0 ? p->comm.threshold_bytes / 1048576.0 : 25.0;
    pt_header(f, e, "DistributedDataParallel training script", "train_ddp.py");
    fprintf(f, "import contextlib\nimport os\nimport time\n\nimport torch\nimport torch.distributed as dist\n"
               "import torch.nn as nn\nimport torch.nn.functional as F\n"
               "from torch.nn.parallel import DistributedDataParallel\n"
               "from torch.utils.checkpoint import checkpoint\n");
    pt_constants(f, e, e->m->dtype == WF_DTYPE_BF16   ? "torch.bfloat16"
                       : e->m->dtype == WF_DTYPE_FP16 ? "torch.float16"
                                                      : "torch.float32");
    fprintf(f, "BUCKET_CAP_MB = %.6g  # the plan's gradient bucket (comm=ddp:X MiB; DDP's default 25)\n", mib);
    pt_lines(f, PT_MODEL);
    pt_lines(f, PT_DDP_MAIN);
    pt_lines(f, PT_MAIN_TAIL);
    return WF_OK;
}
