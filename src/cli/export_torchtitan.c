/* weft export: a torchtitan job config for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <string.h>

/* ---- torchtitan (job TOML) ------------------------------------------------------------- */

wf_status wf_export_torchtitan(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m; /* what torchtitan refuses: refuses_torchtitan in export.c */
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
