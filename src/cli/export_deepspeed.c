/* weft export: a DeepSpeed config and the Megatron-DeepSpeed launch for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

/* ---- DeepSpeed (config JSON) and Megatron-DeepSpeed (its arguments) ------------------ */

/* What DeepSpeed's engines cannot run, for both outputs. */
static wf_status deepspeed_refusals(const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = wf_export_refuse_rc(e, p, 0);
    if (rc_st != WF_OK)
        return rc_st;
    if (p->vpp > 1)
        return wf_export_refuse(e, "DeepSpeed's pipeline engine has no interleaved schedule (vpp=1)");
    if (p->pp > 1 && p->zero >= 2)
        return wf_export_refuse(e, "DeepSpeed runs ZeRO stage 2 and 3 without pipeline parallelism only (zero<=1 with pp>1)");
    if (p->pipe == WF_PIPE_GPIPE && p->pp > 1)
        return wf_export_refuse(e, "DeepSpeed's pipeline engine runs 1F1B, not GPipe");
    if (p->recompute == WF_RECOMPUTE_SELECTIVE)
        return wf_export_refuse(e, "Megatron-DeepSpeed checkpoints whole layers (recompute=full or none)");
    if (p->cp > 1)
        return wf_export_refuse(e, "this export has no DeepSpeed form of context parallelism (cp=1; Ulysses is another scheme)");
    if (p->fp8)
        return wf_export_refuse(e, "DeepSpeed's config has no FP8 matrix products (fp8=0)");
    if (p->ep > 1)
        return wf_export_refuse(e, "expert parallelism is set in DeepSpeed's MoE layer constructor (ep_size), not its config (ep=1)");
    return WF_OK;
}

wf_status wf_export_deepspeed(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status st = deepspeed_refusals(e);
    if (st != WF_OK || !f) /* without a file: the checks alone (wf_export_accepts) */
        return st;
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
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return wf_errorf(WF_NOMEM, "out of memory");
    fprintf(f, "%s\n", text);
    cJSON_free(text);
    return WF_OK;
}

/* The arguments of Megatron-DeepSpeed's pretrain_gpt.py (its
 * megatron/arguments.py, and DeepSpeed's own --deepspeed and
 * --deepspeed_config from deepspeed/__init__.py's add_config_arguments), one a
 * line, for the config `--to deepspeed` writes as ds_config.json. Megatron-
 * DeepSpeed asserts --micro-batch-size; at pp=1 --no-pipeline-parallel keeps
 * it off DeepSpeed's pipeline engine, which takes ZeRO stage 0 and 1 only;
 * --zero-stage makes pretrain_gpt.py build the model under zero.Init at stage 3. */
wf_status wf_export_megatron_deepspeed(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    wf_status st = deepspeed_refusals(e);
    if (st != WF_OK)
        return st;
    if (!wf_model_is_transformer(m))
        return wf_export_refuse(e, "Megatron-DeepSpeed's pretrain_gpt.py trains transformers only");
    if (m->family == WF_FAMILY_BERT)
        return wf_export_refuse(e, "this export writes pretrain_gpt.py's arguments (decoder models: gpt, llama), not BERT's");
    if (wf_model_is_moe(m) || m->kv_lora > 0)
        return wf_export_refuse(e, "this export writes dense models for Megatron-DeepSpeed (its MoE is DeepSpeed's "
                                   "layer with --num-experts/--topk, and it has no latent attention)");
    if (m->rope_base != floor(m->rope_base) || m->rope_base > 2147483647.0)
        return wf_export_refuse(e, "Megatron-DeepSpeed's --rotary-position-embeddings-theta takes an integer");
    if (!f) /* the checks alone (wf_export_accepts) */
        return WF_OK;
    fprintf(f, "--tensor-model-parallel-size %d \\\n", p->tp);
    fprintf(f, "--pipeline-model-parallel-size %d \\\n", p->pp);
    if (p->pp == 1)
        fprintf(f, "--no-pipeline-parallel \\\n");
    if (p->sp)
        fprintf(f, "--sequence-parallel \\\n");
    fprintf(f, "--micro-batch-size %d \\\n", p->mbs);
    fprintf(f, "--global-batch-size %lld \\\n", (long long)e->batch);
    if (p->recompute == WF_RECOMPUTE_FULL)
        fprintf(f, "--checkpoint-activations \\\n");
    fprintf(f, "--zero-stage %d \\\n", p->zero);
    if (wf_export_dtype_flag(m->dtype))
        fprintf(f, "%s \\\n", wf_export_dtype_flag(m->dtype));
    fprintf(f, "--num-layers %lld \\\n--hidden-size %lld \\\n--num-attention-heads %lld \\\n", (long long)m->layers,
            (long long)m->hidden, (long long)m->heads);
    fprintf(f, "--ffn-hidden-size %lld \\\n--seq-length %lld \\\n--max-position-embeddings %lld \\\n", (long long)m->ffn,
            (long long)m->seq, (long long)m->seq);
    if (m->family == WF_FAMILY_LLAMA) {
        /* As Megatron-DeepSpeed's examples_deepspeed/pretrain_llama2_distributed.sh. */
        fprintf(f, "--normalization rmsnorm \\\n--swiglu \\\n--use-rotary-position-embeddings \\\n"
                   "--no-position-embedding \\\n--rotary-position-embeddings-theta %.0f \\\n"
                   "--disable-bias-linear \\\n%s"
                   "--attention-dropout 0.0 \\\n--hidden-dropout 0.0 \\\n",
                m->rope_base > 0 ? m->rope_base : 10000.0,
                m->tie_embeddings ? "" : "--untie-embeddings-and-output-weights \\\n");
        if (m->kv_heads > 0 && m->kv_heads < m->heads)
            fprintf(f, "--num-key-value-heads %lld \\\n", (long long)m->kv_heads);
    } else {
        fprintf(f, "--normalization layernorm \\\n");
    }
    fprintf(f, "--deepspeed \\\n--deepspeed_config ds_config.json\n");
    return WF_OK;
}
