/* weft export: torchtitan configs for a plan (docs/export.md).
 *
 * Two targets, each checked against torchtitan's source at a pinned commit
 * (the field lists are in tests/data/frameworks/, made by
 * scripts/extract-torchtitan-config):
 *   --to torchtitan      main at TT_MAIN: since February 2026 a run is a Python
 *                        function returning a Trainer.Config
 *                        (torchtitan/config/README.md), started with
 *                        `-m torchtitan.train --module M --config F`.
 *   --to torchtitan@0.2  v0.2.2 (TT_V02), the last release that reads a job
 *                        TOML (torchtitan/config/job_config.py, manager.py). */
#include "cli/export-impl.h"

#include <string.h>

#define TT_MAIN "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
#define TT_V02 "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce"

/* torchtitan's model flavors that weft's zoo shapes match, the same names at
 * both pins (torchtitan/models/llama3/__init__.py, models/deepseek_v3/
 * __init__.py), with the shipped run each derives from at main
 * (models/<name>/config_registry.py). */
typedef struct {
    int64_t layers, hidden, heads, kv_heads, ffn, vocab;
    int64_t experts, top_k, moe_ffn, shared, first_dense, q_lora, kv_lora;
    const char *name, *flavor, *baseline;
} tt_flavor;

static const tt_flavor TT_FLAVORS[] = {
    {32, 4096, 32, 8, 14336, 128256, 0, 0, 0, 0, 0, 0, 0, "llama3", "8B", "llama3_8b"},
    {80, 8192, 64, 8, 28672, 128256, 0, 0, 0, 0, 0, 0, 0, "llama3", "70B", "llama3_70b"},
    {126, 16384, 128, 8, 53248, 128256, 0, 0, 0, 0, 0, 0, 0, "llama3", "405B", "llama3_405b"},
    {61, 7168, 128, 128, 18432, 129280, 256, 8, 2048, 1, 3, 1536, 512, "deepseek_v3", "671B", "deepseek_v3_671b"},
};
#define NFLAVORS ((int)(sizeof TT_FLAVORS / sizeof TT_FLAVORS[0]))

static const tt_flavor *tt_match(const wf_model_config *m)
{
    if (m->family != WF_FAMILY_LLAMA)
        return NULL;
    int64_t kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    for (int i = 0; i < NFLAVORS; i++) {
        const tt_flavor *t = &TT_FLAVORS[i];
        if (t->layers == m->layers && t->hidden == m->hidden && t->heads == m->heads && t->kv_heads == kv &&
            t->ffn == m->ffn && t->vocab == m->vocab && t->experts == m->experts &&
            (t->experts == 0 || (t->top_k == m->top_k && t->moe_ffn == m->moe_ffn &&
                                 t->shared == m->shared_experts && t->first_dense == m->first_dense)) &&
            t->q_lora == m->q_lora && t->kv_lora == m->kv_lora)
            return t;
    }
    return NULL;
}

/* A Python float literal for the rotary base (%.15g, with ".0" if integral). */
static const char *tt_float(char *buf, size_t n, double v)
{
    snprintf(buf, n, "%.15g", v);
    if (!strpbrk(buf, ".en"))
        snprintf(buf + strlen(buf), n - strlen(buf), ".0");
    return buf;
}

/* The checks both targets share; *v02 says which target. */
/* torchtitan's stage split (torchtitan/distributed/pipeline_parallel.py at
 * b5bcd76c, _generate_llm_fqn_per_model_part): the embedding counts as
 * `in` layers and the norm and head as `out`; the L + in + out effective
 * layers go over the S stages evenly, the first (L + in + out) % S stages one
 * more; the first stage's transformer layers are its share less `in`, the
 * last's its share less `out` (or what is left). Fills per[S]; 0 when a
 * weight exceeds the even share (torchtitan raises). */
static int tt_split(int S, int L, int in, int out, int *per)
{
    int eff = L + in + out, each = eff / S, extra = eff % S, cur = 0;
    if (S < 2 || each == 0 || in > each || out > each)
        return 0;
    for (int k = 0; k < S; k++) {
        int share = each + (k < extra) - (k == 0 ? in : k == S - 1 ? out : 0);
        int n = share < L - cur ? share : L - cur;
        per[k] = n > 0 ? n : 0;
        cur += per[k];
    }
    return cur == L;
}

/* The first/last-stage weights (torchtitan's *_stage_less_layers) and the
 * layers per stage that make torchtitan build plan p's uneven stages, one
 * per rank; 0 when none do (module_fqns_per_model_part, a list of module
 * names per stage, could: weft does not write it). */
static int tt_uneven(const wf_plan *p, int L, int *in, int *out, int *lps)
{
    int per[WF_PLAN_RC_STAGES];
    for (int a = 0; a <= L; a++)
        for (int b = 0; b <= L; b++) {
            if (!tt_split(p->pp, L, a, b, per) || memcmp(per, p->stage_layers, sizeof per[0] * (size_t)p->pp) != 0)
                continue;
            /* _get_pipeline_metadata: stages = ceil((L + in + out) / layers_per_stage) must be pp */
            int eff = L + a + b, l = (eff + p->pp - 1) / p->pp;
            if ((eff + l - 1) / l != p->pp)
                continue;
            *in = a, *out = b, *lps = l;
            return 1;
        }
    return 0;
}

static wf_status tt_check(const ectx *e, int *v02)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    if (e->version && strcmp(e->version, "0.2") != 0 && strncmp(e->version, "0.2.", 4) != 0)
        return wf_errorf(WF_INVAL, "torchtitan@%s: the versioned target is torchtitan@0.2 (v0.2.x, the last job-TOML "
                                   "release); --to torchtitan writes main's Python config",
                         e->version);
    *v02 = e->version != NULL;
    wf_status st = wf_export_refuse_rc(e, p, 0);
    if (st != WF_OK)
        return st;
    if (!wf_model_is_transformer(m) || m->family == WF_FAMILY_BERT)
        return wf_export_refuse(e, "torchtitan trains decoder-only transformers only");
    int in, out, lps;
    if (p->stage_n > 0 && !tt_uneven(p, (int)m->layers, &in, &out, &lps))
        return wf_export_refuse(e, "torchtitan's pipeline_parallel_first/last_stage_less_layers weights cannot "
                                   "give these stages= (its even split moves whole layers only at the ends; "
                                   "module_fqns_per_model_part, which weft does not write, could)");
    if (m->dtype == WF_DTYPE_FP16)
        return wf_export_refuse(e, "training.mixed_precision_param takes bfloat16 or float32 only (torchtitan has no "
                                   "fp16 loss scaling): give the model dtype=bf16, e.g. MODEL:dtype=bf16");
    if (p->zero == 1)
        return wf_export_refuse(e, "FSDP2 has no optimizer-only sharding (zero=0 replicates, 2 or 3 shard)");
    if (p->comm.kind != WF_COMM_DDP)
        return wf_errorf(WF_INVAL, "torchtitan cannot run this plan: comm schedule '%s' has no torchtitan setting "
                                   "(comm=ddp)",
                         wf_comm_name(p->comm.kind));
    if (*v02 && p->tp > 1 && !p->sp)
        return wf_export_refuse(e, "torchtitan 0.2 runs tensor parallelism with sequence parallelism only (sp=1 with "
                                   "tp>1; main has enable_sequence_parallel)");
    /* v0.2.2 models/llama3/infra/parallelize.py: with data_parallel_shard_degree
     * 1 it applies DDP, which raises "DDP has not supported > 1D parallelism"
     * unless the replicas are the whole world; main applies fully_shard over
     * the (replicate, shard=1) mesh, which combines with TP, PP and CP. */
    if (*v02 && p->zero == 0 && p->dp > 1 && e->devices != p->dp)
        return wf_export_refuse(e, "torchtitan 0.2 runs DDP (zero=0) only as the sole parallelism (its parallelize "
                                   "raises 'DDP has not supported > 1D parallelism'): zero=2 or 3, or --to torchtitan");
    /* main torchtitan/config/configs.py: EP borrows ranks from dp_shard x cp x tp. */
    int64_t dense = (int64_t)(p->zero == 0 ? 1 : p->dp) * (p->cp > 1 ? p->cp : 1) * p->tp;
    if (p->ep > 1 && dense % p->ep != 0)
        return wf_export_refuse(e, "expert_parallel_degree must divide dp_shard x cp x tp (torchtitan's experts borrow "
                                   "those ranks; with zero=0 dp_shard is 1)");
    /* weft's etp defaults to tp (docs/plan-format.md). v0.2.2 parallel_dims.py
     * asserts ETP=TP or ETP=1; main's experts borrow the TP ranks (etp=1). */
    int etp = p->etp > 0 ? p->etp : p->tp;
    if (*v02 && p->ep > 1 && etp != 1 && etp != p->tp)
        return wf_export_refuse(e, "torchtitan 0.2 supports expert tensor parallelism equal to tp or 1 (etp)");
    if (!*v02 && p->ep > 1 && etp > 1)
        return wf_export_refuse(e, "main has no expert tensor parallelism (its experts borrow the FSDP and TP ranks: "
                                   "etp=1)");
    const tt_flavor *t = tt_match(m);
    if (!t && *v02)
        return wf_export_refuse(e, "torchtitan 0.2's TOML names a flavor from its registry (llama3 8B, 70B, 405B; "
                                   "deepseek_v3 671B; ...) and none has this model's shape (--to torchtitan builds one)");
    if (!t && m->kv_lora > 0)
        return wf_export_refuse(e, "no torchtitan flavor has this model's shape, and weft builds custom flavors with "
                                   "standard attention only (torchtitan's latent attention is deepseek_v3's own)");
    return WF_OK;
}

static const char *tt_schedule(const wf_plan *p)
{
    return p->pp == 1 ? NULL : p->vpp > 1 ? "Interleaved1F1B" : p->pipe == WF_PIPE_GPIPE ? "GPipe" : "1F1B";
}

static const char *tt_ac_mode(const wf_plan *p)
{
    return p->recompute == WF_RECOMPUTE_FULL ? "full" : p->recompute == WF_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

/* The launch, in a comment: torchtitan's run_train.sh is a single-node torchrun. */
static void tt_launch(FILE *f, const ectx *e, const char *args)
{
    fprintf(f, "# Run on each of the %lld node(s), with MASTER_ADDR the first node's address:\n", (long long)e->nodes);
    fprintf(f, "#   torchrun --nnodes %lld --nproc_per_node %lld --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 \\\n"
               "#     -m torchtitan.train %s\n",
            (long long)e->nodes, (long long)e->per_node, args);
}

/* ---- torchtitan@0.2: the job TOML of v0.2.2 --------------------------------------------- */

static void tt_write_toml(FILE *f, const ectx *e, const tt_flavor *t)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    const char *sched = tt_schedule(p);
    fprintf(f, "# torchtitan 0.2 job config for weft's plan (docs/export.md), checked against torchtitan v0.2.2 (%s).\n",
            TT_V02);
    tt_launch(f, e, "--job.config_file weft_plan.toml");
    fprintf(f, "\n[model]\nname = \"%s\"\nflavor = \"%s\"\n", t->name, t->flavor);
    if (p->fp8)
        fprintf(f, "converters = [\"quantize.linear.float8\"]\n");
    /* train.py: gradient accumulation = global / (local x dp); with pipelining
     * the local batch is split into micro-batches of the pipeline's size. */
    int64_t local = p->pp > 1 ? e->batch / p->dp : p->mbs;
    fprintf(f, "\n[training]\nlocal_batch_size = %lld\nglobal_batch_size = %lld\nseq_len = %lld\n", (long long)local,
            (long long)e->batch, (long long)m->seq);
    fprintf(f, "mixed_precision_param = \"%s\"\n", m->dtype == WF_DTYPE_BF16 ? "bfloat16" : "float32");
    fprintf(f, "\n[parallelism]\n");
    fprintf(f, "data_parallel_replicate_degree = %d\n", p->zero == 0 ? p->dp : 1);
    fprintf(f, "data_parallel_shard_degree = %d\n", p->zero == 0 ? 1 : p->dp);
    if (p->zero >= 2)
        fprintf(f, "fsdp_reshard_after_forward = \"%s\"\n", p->zero == 3 ? "always" : "never");
    fprintf(f, "tensor_parallel_degree = %d\n", p->tp);
    fprintf(f, "pipeline_parallel_degree = %d\n", p->pp);
    if (sched) {
        /* pipeline_parallel.py: stages = ceil((layers + first_less + last_less)
         * / layers_per_stage); with both "less" weights 0 every stage holds
         * layers / (pp x vpp) blocks, as weft priced. */
        fprintf(f, "pipeline_parallel_schedule = \"%s\"\n", sched);
        fprintf(f, "pipeline_parallel_microbatch_size = %d\n", p->mbs);
        int in = 0, out = 0, lps = (int)(m->layers / (p->pp * p->vpp));
        if (p->stage_n > 0)
            tt_uneven(p, (int)m->layers, &in, &out, &lps); /* checked by tt_check */
        fprintf(f, "pipeline_parallel_layers_per_stage = %d\n", lps);
        fprintf(f, "pipeline_parallel_first_stage_less_layers = %d\npipeline_parallel_last_stage_less_layers = %d\n",
                in, out);
    }
    fprintf(f, "context_parallel_degree = %d\n", p->cp > 1 ? p->cp : 1);
    if (p->ep > 1)
        fprintf(f, "expert_parallel_degree = %d\n", p->ep);
    if (p->ep > 1)
        fprintf(f, "expert_tensor_parallel_degree = %d\n", p->etp > 0 ? p->etp : p->tp);
    fprintf(f, "\n[activation_checkpoint]\nmode = \"%s\"\n", tt_ac_mode(p));
    if (p->recompute == WF_RECOMPUTE_SELECTIVE)
        fprintf(f, "selective_ac_option = \"op\"\n");
}

/* ---- torchtitan (main): a Python function returning Trainer.Config ------------------------- */

/* A custom flavor from the model's shape: Llama 3 blocks (RMSNorm, SwiGLU,
 * rotary) built as torchtitan/models/llama3/__init__.py builds its flavors. */
static void tt_write_custom(FILE *f, const ectx *e, int64_t swiglu)
{
    const wf_model_config *m = e->m;
    int64_t kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    fprintf(f, "\n\ndef weft_model_spec() -> ModelSpec:\n");
    fprintf(f, "    \"\"\"A custom flavor with the shape of %s (no torchtitan flavor has it).\"\"\"\n", m->name);
    fprintf(f, "    dim, n_heads, vocab_size = %lld, %lld, %lld\n", (long long)m->hidden, (long long)m->heads,
            (long long)m->vocab);
    fprintf(f, "    config = Llama3Model.Config(\n");
    fprintf(f, "        dim=dim,\n        vocab_size=vocab_size,\n");
    fprintf(f, "        tok_embeddings=Embedding.Config(\n            num_embeddings=vocab_size, embedding_dim=dim,\n"
               "            param_init={\"weight\": partial(nn.init.normal_, std=1.0)},\n        ),\n");
    fprintf(f, "        norm=RMSNorm.Config(normalized_shape=dim, param_init={\"weight\": nn.init.ones_}),\n");
    fprintf(f, "        lm_head=Linear.Config(\n            in_features=dim, out_features=vocab_size,\n"
               "            param_init={\"weight\": partial(nn.init.trunc_normal_, std=dim**-0.5)},\n        ),\n");
    fprintf(f, "        layers=_build_llama3_layers(\n            n_layers=%lld,\n            dim=dim,\n"
               "            n_heads=n_heads,\n            n_kv_heads=%lld,\n            hidden_dim=%lld,\n",
            (long long)m->layers, (long long)kv, (long long)swiglu);
    /* rope.py RoPE.Config: theta defaults to 10000.0; GPT has no rotary base (its blocks are stood in for). */
    char theta[40];
    if (m->rope_base > 0)
        fprintf(f, "            rope=ComplexRoPE.Config(dim=dim // n_heads, max_context_length=%lld, theta=%s),\n",
                (long long)m->seq, tt_float(theta, sizeof theta, m->rope_base));
    else
        fprintf(f, "            rope=ComplexRoPE.Config(dim=dim // n_heads, max_context_length=%lld),\n",
                (long long)m->seq);
    fprintf(f, "            attn_backend=\"flex\",\n        ),\n    )\n");
    if (e->p->fp8)
        fprintf(f, "    config = Float8LinearConverter.Config().build().convert(config)\n");
    fprintf(f, "    return ModelSpec(\n        name=\"llama3\",\n        flavor=\"weft_custom\",\n        model=config,\n"
               "        parallelize_fn=parallelize_llama,\n        pipelining_fn=pipeline_llm,\n"
               "        post_optimizer_build_fn=None,\n        state_dict_adapter=Llama3StateDictAdapter,\n    )\n");
}

/* A custom mixture-of-experts flavor (Mixtral-like: standard GQA attention
 * with rotary, every moe_freq-th layer from first_dense on a routed MoE of
 * SwiGLU experts, the others a dense SwiGLU MLP). torchtitan main's llama3
 * blocks take no MoE (Llama3TransformerBlock builds feed_forward only, and
 * parallelize_llama applies no expert parallelism); its qwen3 blocks are the
 * pre-norm attention + (MoE or MLP) block with optional qk-norm
 * (torchtitan/models/qwen3/model.py Qwen3TransformerBlock; qwen3/sharding.py
 * shards qk_norm only when set), and parallelize_qwen3 applies EP. The layers
 * are built here with torchtitan's common builders as
 * torchtitan/models/qwen3/__init__.py _build_qwen3_moe_layers and
 * deepseek_v3/__init__.py build_mla_moe_layers build theirs
 * (models/common/config_utils.py make_gqa_config, make_ffn_config,
 * make_moe_config, make_router_config, make_routed_experts_config), with
 * deepseek_v3's (= llama3's) depth-scaled inits, no qk-norm, and head_dim
 * given (Qwen3Model.Config.get_nparams_and_flops asserts it). The router:
 * scores over all experts (softmax or sigmoid), top_k, the chosen weights
 * renormalized (route_norm; moe.py TokenChoiceTopKRouter), as Mixtral's and
 * DeepSeek-V3's. torchtitan has no auxiliary balancing loss: make_moe_config's
 * default load_balance_coeff (1e-3) balances by its loss-free expert bias,
 * updated by register_moe_load_balancing_hook as in its MoE flavors. */
static void tt_write_custom_moe(FILE *f, const ectx *e)
{
    const wf_model_config *m = e->m;
    int64_t kv = m->kv_heads > 0 ? m->kv_heads : m->heads;
    int64_t head_dim = m->hidden / m->heads;
    int64_t first = m->first_dense, freq = m->moe_freq > 0 ? m->moe_freq : 1;
    const char *score = m->moe_score == WF_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax";
    fprintf(f, "\n_LINEAR_INIT = {\"weight\": partial(nn.init.trunc_normal_, std=0.02), \"bias\": nn.init.zeros_}\n");
    fprintf(f, "_NORM_INIT = {\"weight\": nn.init.ones_}\n");
    fprintf(f, "\n\ndef _depth_init(layer_id: int) -> dict:\n"
               "    std = depth_scaled_std(0.02, layer_id)\n"
               "    return {\"weight\": partial(nn.init.trunc_normal_, std=std), \"bias\": nn.init.zeros_}\n");
    fprintf(f, "\n\ndef _experts_init(layer_id: int) -> dict:\n"
               "    std = depth_scaled_std(0.02, layer_id)\n"
               "    return {\n        \"w1_EFD\": partial(nn.init.trunc_normal_, std=0.02),\n"
               "        \"w2_EDF\": partial(nn.init.trunc_normal_, std=std),\n"
               "        \"w3_EFD\": partial(nn.init.trunc_normal_, std=std),\n    }\n");
    fprintf(f, "\n\ndef weft_layers(dim: int) -> list:\n");
    fprintf(f, "    \"\"\"%lld blocks: GQA attention (%lld heads, %lld kv) with rotary, then %s.\"\"\"\n",
            (long long)m->layers, (long long)m->heads, (long long)kv,
            first == 0 && freq == 1 ? "a mixture of experts" : "a mixture of experts or a dense MLP");
    char theta[40];
    fprintf(f, "    rope = ComplexRoPE.Config(dim=%lld, max_context_length=%lld, theta=%s)\n", (long long)head_dim,
            (long long)m->seq, tt_float(theta, sizeof theta, m->rope_base > 0 ? m->rope_base : 10000.0));
    fprintf(f, "    layers = []\n    for layer_id in range(%lld):\n", (long long)m->layers);
    /* All layers experts: one branch; else the layer rule of docs/models.md. */
    int all = first == 0 && freq == 1;
    int in = all ? 8 : 12; /* the MoE's indent */
    if (all)
        fprintf(f, "        feed_forward = None\n");
    else if (freq == 1)
        fprintf(f, "        feed_forward, moe = None, None\n        if layer_id >= %lld:\n", (long long)first);
    else
        fprintf(f, "        feed_forward, moe = None, None\n"
                   "        if layer_id >= %lld and layer_id %% %lld == 0:\n",
                (long long)first, (long long)freq);
    fprintf(f, "%*smoe = make_moe_config(\n%*snum_experts=%lld,\n", in, "", in + 4, "", (long long)m->experts);
    fprintf(f, "%*srouter=make_router_config(\n%*sdim=dim,\n%*snum_experts=%lld,\n"
               "%*sgate_param_init=_depth_init(layer_id),\n%*stop_k=%lld,\n%*sscore_func=\"%s\",\n"
               "%*sroute_norm=True,\n%*s),\n",
            in + 4, "", in + 8, "", in + 8, "", (long long)m->experts, in + 8, "", in + 8, "", (long long)m->top_k,
            in + 8, "", score, in + 8, "", in + 4, "");
    fprintf(f, "%*srouted_experts=make_routed_experts_config(\n%*sdim=dim,\n%*shidden_dim=%lld,\n"
               "%*snum_experts=%lld,\n%*stop_k=%lld,\n%*sparam_init=_experts_init(layer_id),\n"
               "%*scomm_backend=\"standard\",\n%*s),\n",
            in + 4, "", in + 8, "", in + 8, "", (long long)m->moe_ffn, in + 8, "", (long long)m->experts, in + 8, "",
            (long long)m->top_k, in + 8, "", in + 8, "", in + 4, "");
    if (m->shared_ffn > 0)
        fprintf(f, "%*sshared_experts=make_ffn_config(\n%*sdim=dim,\n%*shidden_dim=%lld,\n"
                   "%*sw1_param_init=_LINEAR_INIT,\n%*sw2w3_param_init=_depth_init(layer_id),\n%*s),\n",
                in + 4, "", in + 8, "", in + 8, "", (long long)m->shared_ffn, in + 8, "", in + 8, "", in + 4, "");
    fprintf(f, "%*s)\n", in, "");
    if (!all)
        fprintf(f, "        else:\n"
                   "            feed_forward = make_ffn_config(\n                dim=dim,\n                hidden_dim=%lld,\n"
                   "                w1_param_init=_LINEAR_INIT,\n                w2w3_param_init=_depth_init(layer_id),\n"
                   "            )\n",
                (long long)m->ffn);
    fprintf(f, "        layers.append(\n            Qwen3TransformerBlock.Config(\n"
               "                attention_norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),\n"
               "                ffn_norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),\n");
    fprintf(f, "                attention=make_gqa_config(\n                    dim=dim,\n"
               "                    n_heads=%lld,\n                    n_kv_heads=%lld,\n                    head_dim=%lld,\n"
               "                    wqkv_param_init=_LINEAR_INIT,\n                    wo_param_init=_depth_init(layer_id),\n"
               "                    inner_attention=get_attention_config(\"flex\"),\n"
               "                    fuse_qkv=True,\n                    rope=rope,\n                ),\n",
            (long long)m->heads, (long long)kv, (long long)head_dim);
    fprintf(f, "                feed_forward=feed_forward,\n                moe=moe,\n            )\n        )\n"
               "    return layers\n");
    fprintf(f, "\n\ndef weft_model_spec() -> ModelSpec:\n");
    fprintf(f, "    \"\"\"A custom flavor with the shape of %s (no torchtitan flavor has it).\"\"\"\n", m->name);
    fprintf(f, "    dim, vocab_size = %lld, %lld\n", (long long)m->hidden, (long long)m->vocab);
    fprintf(f, "    config = Qwen3Model.Config(\n        dim=dim,\n        vocab_size=vocab_size,\n");
    fprintf(f, "        tok_embeddings=Embedding.Config(\n            num_embeddings=vocab_size, embedding_dim=dim,\n"
               "            param_init={\"weight\": partial(nn.init.normal_, std=1.0)},\n        ),\n");
    fprintf(f, "        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),\n");
    fprintf(f, "        lm_head=Linear.Config(\n            in_features=dim, out_features=vocab_size,\n"
               "            param_init={\"weight\": partial(nn.init.trunc_normal_, std=dim**-0.5)},\n        ),\n");
    fprintf(f, "        layers=weft_layers(dim),\n    )\n");
    if (e->p->fp8)
        fprintf(f, "    config = Float8LinearConverter.Config().build().convert(config)\n");
    fprintf(f, "    return ModelSpec(\n        name=\"qwen3\",\n        flavor=\"weft_custom\",\n        model=config,\n"
               "        parallelize_fn=parallelize_qwen3,\n        pipelining_fn=pipeline_llm,\n"
               "        post_optimizer_build_fn=register_moe_load_balancing_hook,\n"
               "        state_dict_adapter=None,\n    )\n");
}

static void tt_write_python(FILE *f, const ectx *e, const tt_flavor *t)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    const char *sched = tt_schedule(p);
    const char *name = t ? t->name : "llama3";
    int moe = !t && wf_model_is_moe(m);
    int64_t ffn = m->ffn > 0 ? m->ffn : 4 * m->hidden;
    /* GPT's GELU MLP (2 x h x ffn weights) as SwiGLU's 3 x h x hidden: the same parameters and FLOPs. */
    int64_t swiglu = m->family == WF_FAMILY_GPT ? (2 * ffn + 1) / 3 : ffn;
    fprintf(f, "# torchtitan config for weft's plan (docs/export.md), checked against torchtitan main at\n"
               "# %s. Save as weft_plan.py in torchtitan's checkout.\n",
            TT_MAIN);
    tt_launch(f, e, "--module weft_plan --config weft_plan");
    if (t)
        fprintf(f, "# Model: torchtitan's %s flavor \"%s\".\n", t->name, t->flavor);
    else if (moe)
        fprintf(f, "# Model: no torchtitan flavor has the shape of %s; weft_model_spec builds one from\n"
                   "# torchtitan's common blocks (RMSNorm, GQA attention with rotary, SwiGLU experts behind a\n"
                   "# top-%lld %s router) in qwen3's block without qk-norm, parallelized (EP too) by parallelize_qwen3.\n",
                m->name, (long long)m->top_k, m->moe_score == WF_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax");
    if (!t) {
        if (!moe)
            fprintf(f, "# Model: no torchtitan flavor has the shape of %s; weft_model_spec builds one from Llama 3\n"
                       "# blocks (RMSNorm, SwiGLU, rotary) with its layers, width, heads and vocabulary.\n",
                    m->name);
        if (m->family == WF_FAMILY_GPT)
            fprintf(f, "# torchtitan has no GPT blocks (LayerNorm, GELU, learned positions): SwiGLU's hidden width\n"
                       "# %lld = 2/3 x ffn %lld keeps the MLP's parameters and FLOPs.\n",
                    (long long)swiglu, (long long)ffn);
        fprintf(f, "# The tokenizer at hf_assets_path must have at most %lld ids (the model's vocabulary).\n",
                (long long)m->vocab);
    }
    fprintf(f, "\n");
    if (!t)
        fprintf(f, "from functools import partial\n\nimport torch.nn as nn\n\n");
    if (!t)
        fprintf(f, "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n");
    if (moe)
        fprintf(f, "from torchtitan.components.optimizer import register_moe_load_balancing_hook\n");
    if (p->fp8)
        fprintf(f, "from torchtitan.components.quantization import Float8LinearConverter\n");
    fprintf(f, "from torchtitan.config import ParallelismConfig\n");
    if (p->recompute != WF_RECOMPUTE_NONE)
        fprintf(f, "from torchtitan.distributed.activation_checkpoint import %s\n",
                p->recompute == WF_RECOMPUTE_FULL ? "FullAC" : "SelectiveAC");
    if (moe) {
        fprintf(f, "from torchtitan.distributed.pipeline_parallel import pipeline_llm\n");
        fprintf(f, "from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm\n");
        fprintf(f, "from torchtitan.models.common.config_utils import (\n    decoder_vocab_size,\n"
                   "    get_attention_config,\n    make_ffn_config,\n    make_gqa_config,\n    make_moe_config,\n"
                   "    make_routed_experts_config,\n    make_router_config,\n)\n");
        fprintf(f, "from torchtitan.models.common.param_init import depth_scaled_std\n");
        fprintf(f, "from torchtitan.models.llama3.config_registry import llama3_8b\n");
        fprintf(f, "from torchtitan.models.qwen3 import parallelize_qwen3\n");
        fprintf(f, "from torchtitan.models.qwen3.model import Qwen3Model, Qwen3TransformerBlock\n");
        fprintf(f, "from torchtitan.protocols.model_spec import ModelSpec\n");
    } else if (!t) {
        fprintf(f, "from torchtitan.distributed.pipeline_parallel import pipeline_llm\n");
        fprintf(f, "from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm\n");
        fprintf(f, "from torchtitan.models.common.config_utils import decoder_vocab_size\n");
        fprintf(f, "from torchtitan.models.llama3 import _build_llama3_layers, parallelize_llama\n");
        fprintf(f, "from torchtitan.models.llama3.config_registry import llama3_8b\n");
        fprintf(f, "from torchtitan.models.llama3.model import Llama3Model\n");
        fprintf(f, "from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter\n");
        fprintf(f, "from torchtitan.protocols.model_spec import ModelSpec\n");
    } else {
        fprintf(f, "from torchtitan.models.%s import model_registry\n", name);
        fprintf(f, "from torchtitan.models.%s.config_registry import %s\n", name, t->baseline);
    }
    fprintf(f, "from torchtitan.trainer import Trainer\n");
    if (moe)
        tt_write_custom_moe(f, e);
    else if (!t)
        tt_write_custom(f, e, swiglu);
    fprintf(f, "\n\ndef weft_plan() -> Trainer.Config:\n");
    if (t) {
        fprintf(f, "    config = %s()  # torchtitan's own run of this flavor: data, tokenizer, optimizer, loss\n",
                t->baseline);
        fprintf(f, "    config.model_spec = model_registry(\"%s\"%s)\n", t->flavor,
                p->fp8 ? ", converters=[Float8LinearConverter.Config()]" : "");
    } else {
        fprintf(f, "    config = llama3_8b()  # data, optimizer and schedule of torchtitan's Llama 3 8B run\n");
        fprintf(f, "    config.model_spec = weft_model_spec()\n");
        fprintf(f, "    config.loss = ChunkedLossWrapper.Config(\n        loss_fn=CrossEntropyLoss.Config(\n"
                   "            global_vocab_size=decoder_vocab_size(config.model_spec),\n        ),\n    )\n");
    }
    /* trainer.py: gradient accumulation = tokens per step / (tokens per
     * micro-batch x pipeline micro-batches x dp). */
    fprintf(f, "    config.training.num_tokens_per_microbatch_per_dp_rank = %lld  # mbs %d x seq %lld\n",
            (long long)p->mbs * m->seq, p->mbs, (long long)m->seq);
    fprintf(f, "    config.training.num_tokens_per_train_step = %lld  # batch %lld x seq %lld\n",
            (long long)(e->batch * m->seq), (long long)e->batch, (long long)m->seq);
    fprintf(f, "    config.training.max_context_length = %lld\n", (long long)m->seq);
    fprintf(f, "    config.training.mixed_precision_param = \"%s\"\n",
            m->dtype == WF_DTYPE_BF16 ? "bfloat16" : "float32");
    fprintf(f, "    config.parallelism = ParallelismConfig(\n");
    fprintf(f, "        data_parallel_replicate_degree=%d,\n", p->zero == 0 ? p->dp : 1);
    fprintf(f, "        data_parallel_shard_degree=%d,\n", p->zero == 0 ? 1 : p->dp);
    if (p->zero >= 2)
        fprintf(f, "        fsdp_reshard_after_forward=\"%s\",\n", p->zero == 3 ? "always" : "never");
    fprintf(f, "        tensor_parallel_degree=%d,\n", p->tp);
    if (p->tp > 1)
        fprintf(f, "        enable_sequence_parallel=%s,\n", p->sp ? "True" : "False");
    fprintf(f, "        pipeline_parallel_degree=%d,\n", p->pp);
    if (sched) {
        fprintf(f, "        pipeline_parallel_schedule=\"%s\",\n", sched);
        fprintf(f, "        num_pp_microbatches=%lld,\n", (long long)e->accum);
        int in = 0, out = 0, lps = (int)(m->layers / (p->pp * p->vpp));
        if (p->stage_n > 0)
            tt_uneven(p, (int)m->layers, &in, &out, &lps); /* checked by tt_check */
        fprintf(f, "        pipeline_parallel_layers_per_stage=%d,\n", lps);
        fprintf(f, "        pipeline_parallel_first_stage_less_layers=%d,\n"
                   "        pipeline_parallel_last_stage_less_layers=%d,\n", in, out);
    }
    fprintf(f, "        context_parallel_degree=%d,\n", p->cp > 1 ? p->cp : 1);
    if (p->ep > 1)
        fprintf(f, "        expert_parallel_degree=%d,\n", p->ep);
    fprintf(f, "    )\n");
    fprintf(f, "    config.activation_checkpoint = %s\n", p->recompute == WF_RECOMPUTE_FULL        ? "FullAC.Config()"
                                                         : p->recompute == WF_RECOMPUTE_SELECTIVE ? "SelectiveAC.Config()"
                                                                                                 : "None");
    fprintf(f, "    return config\n");
}

wf_status wf_export_torchtitan(FILE *f, const ectx *e)
{
    int v02 = 0;
    wf_status st = tt_check(e, &v02);
    if (st != WF_OK || !f)
        return st;
    const tt_flavor *t = tt_match(e->m);
    if (v02)
        tt_write_toml(f, e, t);
    else
        tt_write_python(f, e, t);
    return WF_OK;
}
