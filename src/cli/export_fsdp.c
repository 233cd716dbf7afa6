/* weft export: a PyTorch FSDP launch for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <string.h>

/* ---- PyTorch FSDP (torchrun + sharding strategy) -------------------------------------- */

wf_status wf_export_fsdp(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    wf_status rc_st = wf_export_refuse_rc(e, p, 0);
    if (rc_st != WF_OK)
        return rc_st;
    if (p->tp > 1 || p->pp > 1)
        return wf_export_refuse(e, "FSDP plans are pure (sharded) data parallelism (tp=1, pp=1)");
    if (p->zero == 1)
        return wf_export_refuse(e, "FSDP has no optimizer-only sharding (zero=0 is NO_SHARD, 2 SHARD_GRAD_OP, 3 FULL_SHARD)");
    if (p->cp > 1 || p->ep > 1)
        return wf_export_refuse(e, "plain FSDP has no context or expert parallelism (cp=1, ep=1; torchtitan has both)");
    if (p->fp8)
        return wf_export_refuse(e, "plain FSDP runs no FP8 products (fp8=0; torchtitan's float8 converter does)");
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
