/* Private to the export writers (src/cli/export*.c): the context every writer
 * is given and the refusal helpers they share. */
#ifndef WF_CLI_EXPORT_IMPL_H
#define WF_CLI_EXPORT_IMPL_H

#include "cli/cli.h"

#include <stdio.h>

/* What every writer needs, derived once. */
typedef struct {
    const wf_plan *p;
    const wf_model_config *m;
    const wf_cluster *c;
    int64_t batch;
    int64_t devices, per_node, nodes;
    int64_t accum; /* micro-batches per step per data-parallel rank */
    const char *fw;
    const char *version; /* the VERSION of --to FORMAT@VERSION, NULL without one */
} ectx;

/* What a framework refuses is its writer's checks, which come before its first
 * write. A writer called with f NULL runs its checks and writes nothing;
 * wf_export_accepts asks it, and wf_cli_export and `weft plan --emit` ask
 * that, so the search never picks a plan the writer then refuses. */

/* "FW cannot run this plan: WHAT" as a WF_INVAL status. */
wf_status wf_export_refuse(const ectx *e, const char *what);
/* Refuses per-stage recomputation, and rc_layers unless block_ok. */
wf_status wf_export_refuse_rc(const ectx *e, const wf_plan *p, int block_ok);
/* Megatron-style precision flag for the model dtype, or NULL for fp32. */
const char *wf_export_dtype_flag(wf_dtype t);

wf_status wf_export_megatron(FILE *f, const ectx *e);
wf_status wf_export_deepspeed(FILE *f, const ectx *e);
wf_status wf_export_megatron_deepspeed(FILE *f, const ectx *e);
wf_status wf_export_torchtitan(FILE *f, const ectx *e);
wf_status wf_export_fsdp(FILE *f, const ectx *e);
wf_status wf_export_ddp(FILE *f, const ectx *e);

#endif
