/* weft export: Megatron-LM arguments for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <string.h>

/* ---- Megatron-LM ------------------------------------------------------------------- */

wf_status wf_export_megatron(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m; /* what Megatron-LM refuses: refuses_megatron in export.c */
    if (!f)
        return WF_OK;
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
    if (wf_export_dtype_flag(m->dtype))
        fprintf(f, " \\\n%s", wf_export_dtype_flag(m->dtype));
    fprintf(f, "\n");
    return WF_OK;
}
