/* Plans exported to the frameworks that run them (docs/export.md): Megatron-LM
 * arguments, a DeepSpeed config, a torchtitan job TOML, or a torchrun command
 * with PyTorch FSDP's sharding strategy. Each writer maps every key of the
 * plan to the framework's own setting, or refuses the plan in one line naming
 * what the framework lacks (GPipe in Megatron-LM, interleaving in DeepSpeed's
 * pipeline engine, optimizer-only sharding in FSDP, ...). The model's shape
 * and dtype and the cluster's node size are written too where the framework
 * needs them to launch. */
#include "cli/export-impl.h"

#include <string.h>

static const char *const FORMATS[] = {"megatron", "deepspeed", "torchtitan", "fsdp", "megatron-deepspeed"};
#define NFORMATS ((int)(sizeof FORMATS / sizeof FORMATS[0]))

wf_status wf_export_refuse(const ectx *e, const char *what)
{
    return wf_errorf(WF_INVAL, "%s cannot run this plan: %s", e->fw, what);
}

const char *wf_export_dtype_flag(wf_dtype t)
{
    return t == WF_DTYPE_BF16 ? "--bf16" : t == WF_DTYPE_FP16 ? "--fp16" : NULL;
}

/* Recomputation per stage has no flag in any of the frameworks exported (each
 * recomputes alike on every stage); the block method is Megatron-LM's. */
wf_status wf_export_refuse_rc(const ectx *e, const wf_plan *p, int block_ok)
{
    if (p->rc_n > 0)
        return wf_export_refuse(e, "recomputation per stage has no flag there (every stage recomputes alike; give one "
                         "recompute value)");
    if (p->rc_layers > 0 && !block_ok)
        return wf_export_refuse(e, "rc_layers (Megatron-LM's block method) has no flag there (recompute=full or none)");
    return WF_OK;
}

wf_status wf_cli_export(FILE *f, const char *format, const wf_plan *p, const wf_model_config *m,
                        const wf_cluster *c, int64_t batch)
{
    /* FORMAT or FORMAT@VERSION (a framework release the writer knows, docs/export.md). */
    char name[32];
    const char *at = strchr(format, '@');
    size_t len = at ? (size_t)(at - format) : strlen(format);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), format);
    int k = -1;
    for (int i = 0; i < NFORMATS; i++)
        if (len < sizeof name && strcmp(name, FORMATS[i]) == 0)
            k = i;
    if (k < 0) {
        char dym[96];
        return wf_errorf(WF_INVAL, "unknown export format '%s' (megatron, deepspeed, megatron-deepspeed, torchtitan, fsdp)%s", format,
                         wf_did_you_mean(wf_suggest(name, FORMATS, NFORMATS), dym, sizeof dym));
    }
    if (at && k != 0)
        return wf_errorf(WF_INVAL, "export format '%s': %s takes no @VERSION (only megatron@VERSION)", format,
                         FORMATS[k]);
    ectx e = {p, m, c, batch, 0, 0, 0, 0, FORMATS[k], at ? at + 1 : NULL};
    e.devices = (int64_t)p->dp * p->tp * p->pp;
    e.per_node = c->level[0].size < e.devices ? c->level[0].size : e.devices;
    e.nodes = (e.devices + e.per_node - 1) / e.per_node;
    if (batch % ((int64_t)p->dp * p->mbs) != 0)
        return wf_errorf(WF_INVAL, "%s: batch %lld is not a multiple of dp x mbs = %lld", e.fw,
                         (long long)batch, (long long)p->dp * p->mbs);
    e.accum = batch / ((int64_t)p->dp * p->mbs);
    switch (k) {
    case 0:
        return wf_export_megatron(f, &e);
    case 1:
        return wf_export_deepspeed(f, &e);
    case 2:
        return wf_export_torchtitan(f, &e);
    case 4:
        return wf_export_megatron_deepspeed(f, &e);
    default:
        return wf_export_fsdp(f, &e);
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
        {"to", 0, WF_OPT_STR, &to, "FORMAT", "megatron[@VERSION], deepspeed (ds_config.json), megatron-deepspeed (its arguments), torchtitan or fsdp", 1},
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
