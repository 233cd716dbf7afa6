/* Plans exported to the frameworks that run them (docs/export.md): Megatron-LM
 * arguments, a DeepSpeed config, a torchtitan job TOML, or a torchrun command
 * with PyTorch FSDP's sharding strategy. Each writer maps every key of the
 * plan to the framework's own setting, or refuses the plan in one line naming
 * what the framework lacks (GPipe in Megatron-LM, interleaving in DeepSpeed's
 * pipeline engine, optimizer-only sharding in FSDP, ...). The model's shape
 * and dtype and the cluster's node size are written too where the framework
 * needs them to launch. */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <string.h>

static const char *const FORMATS[] = {"megatron", "deepspeed", "torchtitan", "fsdp"};
#define NFORMATS ((int)(sizeof FORMATS / sizeof FORMATS[0]))

/* What every writer needs, derived once. */
typedef struct {
    const wf_plan *p;
    const wf_model_config *m;
    const wf_cluster *c;
    int64_t batch;
    int64_t devices, per_node, nodes;
    int64_t accum; /* micro-batches per step per data-parallel rank */
    const char *fw;
} ectx;

static wf_status refuse(const ectx *e, const char *what)
{
    return wf_errorf(WF_INVAL, "%s cannot run this plan: %s", e->fw, what);
}

static const char *dtype_flag(wf_dtype t)
{
    return t == WF_DTYPE_BF16 ? "--bf16" : t == WF_DTYPE_FP16 ? "--fp16" : NULL;
}

/* ---- Megatron-LM ------------------------------------------------------------------- */

/* Recomputation per stage has no flag in any of the frameworks exported (each
 * recomputes alike on every stage); the block method is Megatron-LM's. */
static wf_status refuse_rc(const ectx *e, const wf_plan *p, int block_ok)
{
    if (p->rc_n > 0)
        return refuse(e, "recomputation per stage has no flag there (every stage recomputes alike; give one "
                         "recompute value)");
    if (p->rc_layers > 0 && !block_ok)
        return refuse(e, "rc_layers (Megatron-LM's block method) has no flag there (recompute=full or none)");
    return WF_OK;
}

static wf_status emit_megatron(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = refuse_rc(e, p, 1);
    if (rc_st != WF_OK)
        return rc_st;
    const wf_model_config *m = e->m;
    if (!wf_model_is_transformer(m))
        return refuse(e, "Megatron-LM trains transformers only");
    if (p->pipe == WF_PIPE_GPIPE)
        return refuse(e, "Megatron-LM has no GPipe schedule (it runs 1F1B; use pipe=1f1b)");
    if (p->zero >= 3)
        return refuse(e, "zero=3 (parameter sharding) has no Megatron-LM flag (its distributed optimizer "
                         "shards optimizer state and gradients: zero=1 or 2)");
    if (p->comm.kind != WF_COMM_DDP)
        return wf_errorf(WF_INVAL, "megatron cannot run this plan: comm schedule '%s' has no Megatron-LM equivalent (its "
                                   "DDP reduces gradients in buckets: comm=ddp)",
                         wf_comm_name(p->comm.kind));
    if (p->sw == WF_SW_MEGATRON_2021 && p->zero >= 1)
        return refuse(e, "Megatron-LM 2021 has no distributed optimizer (zero=0, or sw=megatron-core)");
    fprintf(f, "--tensor-model-parallel-size %d \\\n", p->tp);
    fprintf(f, "--pipeline-model-parallel-size %d \\\n", p->pp);
    if (p->cp > 1)
        fprintf(f, "--context-parallel-size %d \\\n", p->cp);
    if (p->ep > 1)
        fprintf(f, "--expert-model-parallel-size %d \\\n", p->ep);
    if (p->etp > 0 && wf_model_is_moe(m))
        fprintf(f, "--expert-tensor-parallel-size %d \\\n", p->etp);
    if (wf_model_is_moe(m))
        fprintf(f, "--num-experts %lld \\\n--moe-router-topk %lld \\\n--moe-grouped-gemm \\\n",
                (long long)m->experts, (long long)m->top_k);
    /* Attention and precision as the profile resolved them. */
    int flash = p->attn == WF_ATTN_AUTO ? (p->sw == WF_SW_MEGATRON_CORE || p->sw == WF_SW_FSDP) : p->attn == WF_ATTN_FLASH;
    if (p->sw == WF_SW_MEGATRON_CORE)
        fprintf(f, "--transformer-impl transformer_engine \\\n");
    if (flash)
        fprintf(f, "--attention-backend flash \\\n");
    if (p->fp8)
        fprintf(f, "--fp8-format hybrid \\\n");
    if (p->sw == WF_SW_MEGATRON_CORE && p->sp && p->tp > 1)
        fprintf(f, "--tp-comm-overlap \\\n");
    if (p->sw == WF_SW_MEGATRON_CORE && p->vpp > 1)
        fprintf(f, "--overlap-p2p-communication \\\n");
    if (p->grad_dtype == WF_DTYPE_FP32 || (p->grad_dtype < 0 && p->sw == WF_SW_MEGATRON_2022))
        fprintf(f, "--accumulate-allreduce-grads-in-fp32 \\\n");
    if (p->vpp > 1)
        fprintf(f, "--num-layers-per-virtual-pipeline-stage %lld \\\n", (long long)(m->layers / (p->pp * p->vpp)));
    fprintf(f, "--micro-batch-size %d \\\n", p->mbs);
    fprintf(f, "--global-batch-size %lld \\\n", (long long)e->batch);
    if (p->sp)
        fprintf(f, "--sequence-parallel \\\n");
    if (p->recompute == WF_RECOMPUTE_FULL && p->rc_layers > 0)
        fprintf(f, "--recompute-granularity full \\\n--recompute-method block \\\n--recompute-num-layers %d \\\n",
                p->rc_layers);
    else if (p->recompute == WF_RECOMPUTE_FULL)
        fprintf(f, "--recompute-granularity full \\\n--recompute-method uniform \\\n--recompute-num-layers 1 \\\n");
    else if (p->recompute == WF_RECOMPUTE_SELECTIVE)
        fprintf(f, "--recompute-granularity selective \\\n");
    if (p->zero >= 1)
        fprintf(f, "--use-distributed-optimizer \\\n");
    if (p->overlap) {
        fprintf(f, "--overlap-grad-reduce \\\n");
        if (p->zero >= 1)
            fprintf(f, "--overlap-param-gather \\\n");
    }
    if (p->comm.threshold_bytes > 0) /* Megatron counts the bucket in elements (fp32 main grads) */
        fprintf(f, "--ddp-bucket-size %lld \\\n", (long long)(p->comm.threshold_bytes / 4));
    fprintf(f, "--num-layers %lld \\\n--hidden-size %lld \\\n--num-attention-heads %lld \\\n", (long long)m->layers,
            (long long)m->hidden, (long long)m->heads);
    if (m->kv_heads > 0 && m->kv_heads < m->heads)
        fprintf(f, "--group-query-attention \\\n--num-query-groups %lld \\\n", (long long)m->kv_heads);
    fprintf(f, "--ffn-hidden-size %lld \\\n--seq-length %lld \\\n--max-position-embeddings %lld", (long long)m->ffn,
            (long long)m->seq, (long long)m->seq);
    if (dtype_flag(m->dtype))
        fprintf(f, " \\\n%s", dtype_flag(m->dtype));
    fprintf(f, "\n");
    return WF_OK;
}

/* ---- DeepSpeed (config JSON; the degrees for Megatron-DeepSpeed) ------------------------ */

static wf_status emit_deepspeed(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = refuse_rc(e, p, 0);
    if (rc_st != WF_OK)
        return rc_st;
    if (p->vpp > 1)
        return refuse(e, "DeepSpeed's pipeline engine has no interleaved schedule (vpp=1)");
    if (p->pp > 1 && p->zero >= 2)
        return refuse(e, "DeepSpeed runs ZeRO stage 2 and 3 without pipeline parallelism only (zero<=1 with pp>1)");
    if (p->pipe == WF_PIPE_GPIPE && p->pp > 1)
        return refuse(e, "DeepSpeed's pipeline engine runs 1F1B, not GPipe");
    if (p->recompute == WF_RECOMPUTE_SELECTIVE)
        return refuse(e, "Megatron-DeepSpeed checkpoints whole layers (recompute=full or none)");
    if (p->cp > 1)
        return refuse(e, "this export has no DeepSpeed form of context parallelism (cp=1; Ulysses is another scheme)");
    if (p->fp8)
        return refuse(e, "DeepSpeed's config has no FP8 matrix products (fp8=0)");
    if (p->ep > 1)
        return refuse(e, "expert parallelism is set in DeepSpeed's MoE layer constructor (ep_size), not its config (ep=1)");
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    cJSON_AddNumberToObject(j, "train_batch_size", (double)e->batch);
    cJSON_AddNumberToObject(j, "train_micro_batch_size_per_gpu", p->mbs);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", (double)e->accum);
    cJSON *z = cJSON_AddObjectToObject(j, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", p->zero);
    cJSON_AddBoolToObject(z, "overlap_comm", p->overlap != 0);
    if (p->comm.threshold_bytes > 0)
        cJSON_AddNumberToObject(z, "reduce_bucket_size", (double)(int64_t)(p->comm.threshold_bytes / 2));
    cJSON *bf = cJSON_AddObjectToObject(j, "bf16");
    cJSON_AddBoolToObject(bf, "enabled", e->m->dtype == WF_DTYPE_BF16);
    cJSON *fp = cJSON_AddObjectToObject(j, "fp16");
    cJSON_AddBoolToObject(fp, "enabled", e->m->dtype == WF_DTYPE_FP16);
    wf_status st = wf_cli_print_json(j);
    cJSON_Delete(j);
    if (st != WF_OK)
        return st;
    /* Megatron-DeepSpeed takes the model-parallel degrees as arguments; a note. */
    fprintf(stderr, "Megatron-DeepSpeed: --tensor-model-parallel-size %d --pipeline-model-parallel-size %d%s%s "
                    "--deepspeed --deepspeed_config ds_config.json\n",
            p->tp, p->pp, p->sp ? " --sequence-parallel" : "",
            p->recompute == WF_RECOMPUTE_FULL ? " --checkpoint-activations" : "");
    return WF_OK;
}

/* ---- torchtitan (job TOML) ------------------------------------------------------------- */

static wf_status emit_torchtitan(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = refuse_rc(e, p, 0);
    if (rc_st != WF_OK)
        return rc_st;
    const wf_model_config *m = e->m;
    if (!wf_model_is_transformer(m))
        return refuse(e, "torchtitan trains transformers only");
    if (p->zero == 1)
        return refuse(e, "FSDP2 has no optimizer-only sharding (zero=0 replicates, 2 or 3 shard)");
    if (p->tp > 1 && !p->sp)
        return refuse(e, "torchtitan runs tensor parallelism with sequence parallelism (sp=1 with tp>1)");
    if (p->comm.kind != WF_COMM_DDP)
        return wf_errorf(WF_INVAL, "torchtitan cannot run this plan: comm schedule '%s' has no torchtitan setting (comm=ddp)",
                         wf_comm_name(p->comm.kind));
    const char *sched = p->pp == 1 ? NULL : p->vpp > 1 ? "Interleaved1F1B"
                                        : p->pipe == WF_PIPE_GPIPE ? "GPipe" : "1F1B";
    fprintf(f, "# torchtitan job config for weft's plan (see docs/export.md)\n");
    fprintf(f, "[training]\nlocal_batch_size = %lld\nglobal_batch_size = %lld\nseq_len = %lld\n",
            (long long)(e->batch / p->dp), (long long)e->batch, (long long)m->seq);
    if (m->dtype == WF_DTYPE_BF16 || m->dtype == WF_DTYPE_FP16)
        fprintf(f, "mixed_precision_param = \"%s\"\n", m->dtype == WF_DTYPE_BF16 ? "bfloat16" : "float16");
    fprintf(f, "\n[parallelism]\n");
    fprintf(f, "data_parallel_replicate_degree = %d\n", p->zero == 0 ? p->dp : 1);
    fprintf(f, "data_parallel_shard_degree = %d\n", p->zero == 0 ? 1 : p->dp);
    if (p->zero >= 2)
        fprintf(f, "fsdp_reshard_after_forward = \"%s\"\n", p->zero == 3 ? "always" : "never");
    fprintf(f, "tensor_parallel_degree = %d\n", p->tp);
    fprintf(f, "pipeline_parallel_degree = %d\n", p->pp);
    if (sched) {
        fprintf(f, "pipeline_parallel_schedule = \"%s\"\n", sched);
        fprintf(f, "pipeline_parallel_microbatch_size = %d\n", p->mbs);
        if (p->vpp > 1)
            fprintf(f, "pipeline_parallel_layers_per_stage = %lld\n", (long long)(m->layers / (p->pp * p->vpp)));
    }
    fprintf(f, "context_parallel_degree = %d\n", p->cp > 1 ? p->cp : 1);
    if (p->ep > 1)
        fprintf(f, "expert_parallel_degree = %d\n", p->ep);
    if (p->fp8)
        fprintf(f, "\n[model]\nconverters = [\"float8\"]\n");
    fprintf(f, "\n[activation_checkpoint]\nmode = \"%s\"\n",
            p->recompute == WF_RECOMPUTE_FULL ? "full" : p->recompute == WF_RECOMPUTE_SELECTIVE ? "selective" : "none");
    if (p->recompute == WF_RECOMPUTE_SELECTIVE)
        fprintf(f, "selective_ac_option = \"op\"\n");
    return WF_OK;
}

/* ---- PyTorch FSDP (torchrun + sharding strategy) -------------------------------------- */

static wf_status emit_fsdp(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = refuse_rc(e, p, 0);
    if (rc_st != WF_OK)
        return rc_st;
    if (p->tp > 1 || p->pp > 1)
        return refuse(e, "FSDP plans are pure (sharded) data parallelism (tp=1, pp=1)");
    if (p->zero == 1)
        return refuse(e, "FSDP has no optimizer-only sharding (zero=0 is NO_SHARD, 2 SHARD_GRAD_OP, 3 FULL_SHARD)");
    if (p->cp > 1 || p->ep > 1)
        return refuse(e, "plain FSDP has no context or expert parallelism (cp=1, ep=1; torchtitan has both)");
    if (p->fp8)
        return refuse(e, "plain FSDP runs no FP8 products (fp8=0; torchtitan's float8 converter does)");
    if (p->comm.kind != WF_COMM_DDP)
        return wf_errorf(WF_INVAL, "fsdp cannot run this plan: comm schedule '%s' has no FSDP setting (comm=ddp)",
                         wf_comm_name(p->comm.kind));
    const char *strategy = p->zero == 3 ? "FULL_SHARD" : p->zero == 2 ? "SHARD_GRAD_OP" : "NO_SHARD";
    fprintf(f, "torchrun --nnodes %lld --nproc_per_node %lld train.py\n", (long long)e->nodes, (long long)e->per_node);
    fprintf(f, "sharding_strategy = ShardingStrategy.%s\n", strategy);
    fprintf(f, "backward_prefetch = BackwardPrefetch.%s\n", p->overlap ? "BACKWARD_PRE" : "NONE");
    fprintf(f, "forward_prefetch = %s\n", p->overlap ? "True" : "False");
    if (e->m->dtype == WF_DTYPE_BF16 || e->m->dtype == WF_DTYPE_FP16)
        fprintf(f, "mixed_precision = MixedPrecision(param_dtype=torch.%s, reduce_dtype=torch.float32)\n",
                e->m->dtype == WF_DTYPE_BF16 ? "bfloat16" : "float16");
    fprintf(f, "per_gpu_batch_size = %d\n", p->mbs);
    fprintf(f, "gradient_accumulation_steps = %lld\n", (long long)e->accum);
    fprintf(f, "activation_checkpointing = %s\n", p->recompute == WF_RECOMPUTE_NONE ? "none"
                                                  : p->recompute == WF_RECOMPUTE_FULL ? "every layer" : "selective");
    return WF_OK;
}

wf_status wf_cli_export(FILE *f, const char *format, const wf_plan *p, const wf_model_config *m,
                        const wf_cluster *c, int64_t batch)
{
    int k = -1;
    for (int i = 0; i < NFORMATS; i++)
        if (strcmp(format, FORMATS[i]) == 0)
            k = i;
    if (k < 0) {
        char dym[96];
        return wf_errorf(WF_INVAL, "unknown export format '%s' (megatron, deepspeed, torchtitan, fsdp)%s", format,
                         wf_did_you_mean(wf_suggest(format, FORMATS, NFORMATS), dym, sizeof dym));
    }
    ectx e = {p, m, c, batch, 0, 0, 0, 0, FORMATS[k]};
    e.devices = (int64_t)p->dp * p->tp * p->pp;
    e.per_node = c->level[0].size < e.devices ? c->level[0].size : e.devices;
    e.nodes = (e.devices + e.per_node - 1) / e.per_node;
    if (batch % ((int64_t)p->dp * p->mbs) != 0)
        return wf_errorf(WF_INVAL, "%s: batch %lld is not a multiple of dp x mbs = %lld", e.fw,
                         (long long)batch, (long long)p->dp * p->mbs);
    e.accum = batch / ((int64_t)p->dp * p->mbs);
    switch (k) {
    case 0:
        return emit_megatron(f, &e);
    case 1:
        return emit_deepspeed(f, &e);
    case 2:
        return emit_torchtitan(f, &e);
    default:
        return emit_fsdp(f, &e);
    }
}

/* ---- weft export PLAN --to FORMAT ---------------------------------------------------- */

wf_status wf_cmd_export(int argc, char **argv)
{
    wf_cli_plan_input in;
    memset(&in, 0, sizeof in);
    const char *to = NULL, *pos[1];
    int help = 0, npos = 0;
    const wf_opt opts[] = {
        {"to", 0, WF_OPT_STR, &to, "FORMAT", "megatron, deepspeed, torchtitan or fsdp", 1},
        WF_CLI_OPT_MODEL(&in.model),
        WF_CLI_OPT_CLUSTER(&in.cluster),
        WF_CLI_OPT_BATCH(&in.batch),
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, pos, 1, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft export PLAN",
                      "Writes what a framework needs to run PLAN (a plan string or a plan file):\n"
                      "Megatron-LM arguments, a DeepSpeed config, a torchtitan job TOML, or a torchrun\n"
                      "command with FSDP's sharding strategy. A plan the framework cannot express is\n"
                      "refused in one line naming what it lacks (docs/export.md).",
                      opts);
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    if (npos != 1)
        return wf_errorf(WF_INVAL, "missing PLAN (a plan string such as dp=8,tp=8 or a plan file)");
    in.plan = pos[0];
    if (wf_plan_is_oplevel_file(in.plan))
        return wf_errorf(WF_INVAL, "%s: an op-level plan (per-op layouts) has no framework form: Megatron-LM, "
                                   "DeepSpeed, torchtitan and FSDP take whole-model degrees (dp, tp, pp)",
                         in.plan);
    if ((st = wf_cli_load_plan_input(&in, "exporting")) != WF_OK)
        return st;
    /* The plan must be a valid one for this model, cluster and batch. */
    if ((st = wf_plan_validate(&in.p, &in.mc, &in.c, in.batch)) != WF_OK)
        return st;
    st = wf_cli_export(stdout, to, &in.p, &in.mc, &in.c, in.batch);
    if (st == WF_OK && fflush(stdout) != 0)
        st = wf_errorf(WF_IO, "cannot write standard output");
    return st;
}
