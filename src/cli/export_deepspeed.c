/* weft export: a DeepSpeed config and the Megatron-DeepSpeed launch for a plan (docs/export.md). */
#include "cli/export-impl.h"

#include <cjson/cJSON.h>
#include <string.h>

/* ---- DeepSpeed (config JSON; the degrees for Megatron-DeepSpeed) ------------------------ */

wf_status wf_export_deepspeed(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p; /* what DeepSpeed refuses: refuses_deepspeed in export.c */
    if (!f)
        return WF_OK;
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
