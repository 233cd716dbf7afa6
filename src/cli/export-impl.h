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
} ectx;

/* What a framework refuses is not decided in its writer: each target's rules
 * are one function in export.c (refuses_megatron, ...), behind
 * wf_export_accepts, which wf_cli_export asks before it calls a writer and
 * `weft plan --emit` uses to search only plans the target runs. A refusal
 * written in a writer instead would let the search choose plans the writer
 * then refuses: add it to the target's function in export.c. */

/* "FW cannot run this plan: WHAT" as a WF_INVAL status. */
wf_status wf_export_refuse(const ectx *e, const char *what);
/* Refuses per-stage recomputation, and rc_layers unless block_ok. */
wf_status wf_export_refuse_rc(const ectx *e, const wf_plan *p, int block_ok);
/* Megatron-style precision flag for the model dtype, or NULL for fp32. */
const char *wf_export_dtype_flag(wf_dtype t);

wf_status wf_export_megatron(FILE *f, const ectx *e);
wf_status wf_export_deepspeed(FILE *f, const ectx *e);
wf_status wf_export_torchtitan(FILE *f, const ectx *e);
wf_status wf_export_fsdp(FILE *f, const ectx *e);

#endif
