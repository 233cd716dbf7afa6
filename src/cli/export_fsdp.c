/* weft export: a PyTorch FSDP launch for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <string.h>

/* ---- PyTorch FSDP (torchrun + sharding strategy) -------------------------------------- */

wf_status wf_export_fsdp(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p; /* what FSDP refuses: refuses_fsdp in export.c */
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
