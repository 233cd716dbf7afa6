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

wf_status wf_export_refuse(const ectx *e, const char *what)
{
    return wf_errorf(WF_INVAL, "%s cannot run this plan: %s", e->fw, what);
}

const char *wf_export_dtype_flag(wf_dtype t)
{
    return t == WF_DTYPE_BF16 ? "--bf16" : t == WF_DTYPE_FP16 ? "--fp16" : NULL;
}

/* ---- what each framework runs --------------------------------------------------------
 * Each writer's checks, run before its first write, are its framework's rules;
 * called without a file it runs them alone. wf_cli_export asks before it
 * writes, and `weft plan --emit X` searches only the plans X's writer accepts
 * (wf_search_outer_opts.accept), so the writers and the search cannot disagree. */

/* Recomputation per stage has no flag in any of the frameworks exported (each
 * recomputes alike on every stage); the block method is Megatron-LM's. */
static const char *refuses_rc(const wf_plan *p, int block_ok)
{
    if (p->rc_n > 0)
        return "recomputation per stage has no flag there (every stage recomputes alike; give one recompute value)";
    if (p->rc_layers > 0 && !block_ok)
        return "rc_layers (Megatron-LM's block method) has no flag there (recompute=full or none)";
    return NULL;
}

wf_status wf_export_refuse_rc(const ectx *e, const wf_plan *p, int block_ok)
{
    const char *why = refuses_rc(p, block_ok);
    return why ? wf_export_refuse(e, why) : WF_OK;
}

/* One row per export target: its name (--to, --emit), whether it takes
 * FORMAT@VERSION, the framework profile `plan --emit` prices its plans under
 * (docs/cost-model.md, "Framework profiles") and its writer. A writer called
 * with no file (f NULL) runs its checks only and writes nothing:
 * wf_export_accepts asks it, so what `--emit X` finds is what `export --to X`
 * writes. */
typedef struct {
    const char *name;
    int versioned;
    wf_sw sw;
    wf_status (*write)(FILE *f, const ectx *e);
} export_target;

static const export_target TARGETS[] = {
    {"megatron", 1, WF_SW_MEGATRON_CORE, wf_export_megatron},
    {"deepspeed", 0, WF_SW_DEEPSPEED, wf_export_deepspeed},
    {"megatron-deepspeed", 0, WF_SW_DEEPSPEED, wf_export_megatron_deepspeed},
    {"torchtitan", 1, WF_SW_FSDP, wf_export_torchtitan},
    {"fsdp", 0, WF_SW_FSDP, wf_export_fsdp},
    {"ddp", 0, WF_SW_PYTORCH, wf_export_ddp},
};
#define NTARGETS ((int)(sizeof TARGETS / sizeof TARGETS[0]))

/* The row of "NAME" or "NAME@VERSION" (*version set to VERSION or NULL). */
static const export_target *find_target(const char *name, const char **version)
{
    if (version)
        *version = NULL;
    if (!name)
        return NULL;
    const char *at = strchr(name, '@');
    size_t n = at ? (size_t)(at - name) : strlen(name);
    for (int i = 0; i < NTARGETS; i++)
        if (strlen(TARGETS[i].name) == n && strncmp(name, TARGETS[i].name, n) == 0) {
            if (version)
                *version = at ? at + 1 : NULL;
            return &TARGETS[i];
        }
    return NULL;
}

wf_status wf_export_target(const char *target, wf_sw *sw)
{
    const char *version = NULL;
    const export_target *t = find_target(target, &version);
    if (t) {
        if (version && !t->versioned)
            return wf_errorf(WF_INVAL, "export format '%s' has no versioned targets (drop '@%s')", t->name, version);
        if (version && !*version)
            return wf_errorf(WF_INVAL, "export format '%s': empty version after '@'", target);
        if (sw)
            *sw = t->sw;
        return WF_OK;
    }
    const char *names[NTARGETS];
    char list[128] = "";
    size_t n = 0;
    for (int i = 0; i < NTARGETS; i++) {
        names[i] = TARGETS[i].name;
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", names[i]);
    }
    char dym[96];
    return wf_errorf(WF_INVAL, "unknown export format '%s' (%s)%s", target ? target : "", list,
                     wf_did_you_mean(wf_suggest(target ? target : "", names, NTARGETS), dym, sizeof dym));
}

/* The context of a writer; without a cluster (the search's check) the node
 * counts stay 0, which no check reads. */
static ectx make_ctx(const export_target *t, const char *version, const wf_plan *p, const wf_model_config *m,
                     const wf_cluster *c, int64_t batch)
{
    ectx e = {p, m, c, batch, 0, 0, 0, 0, t->name, version};
    e.devices = wf_plan_devices(p);
    if (c) {
        e.per_node = c->level[0].size < e.devices ? c->level[0].size : e.devices;
        e.nodes = (e.devices + e.per_node - 1) / e.per_node;
    }
    if (batch > 0 && p->dp > 0 && p->mbs > 0)
        e.accum = batch / ((int64_t)p->dp * p->mbs);
    return e;
}

int wf_export_accepts(const char *target, const wf_plan *p, const wf_model_config *m, char *why, size_t cap)
{
    const char *version = NULL;
    const export_target *t = find_target(target, &version);
    if (!t) {
        if (why && cap > 0)
            snprintf(why, cap, "unknown export format '%s'", target ? target : "");
        return 0;
    }
    /* SuperScaler's plan kinds: none of the frameworks runs an op in pieces
     * with their replay, or schedules recycling forwards apart. */
    if (p->coshard > 1 || p->nf1b) {
        if (why && cap > 0)
            snprintf(why, cap, "%s cannot express %s (SuperScaler's plan kind)", t->name,
                     wf_plan_coshard_per_op(p) ? "per-op coshard (chosen ops run in pieces)"
                     : p->coshard > 1          ? "coshard (ops run in pieces)"
                                               : "nf1b (recycling forwards pipelined apart)");
        return 0;
    }
    /* FastFold's DAP has no form in the frameworks exported to (their
     * tensor parallelism splits weights, not the Evoformer's axes). */
    if (p->dap > 1) {
        if (why && cap > 0)
            snprintf(why, cap, "%s cannot express dap=%d (AlphaFold2's Dynamic Axial Parallelism)", t->name, p->dap);
        return 0;
    }
    ectx e = make_ctx(t, version, p, m, NULL, 0);
    /* The interlaced pipeline has no form in any framework exported to: each
     * keeps the embedding on the first pipeline stage and the head with the
     * loss on the last. Megatron-LM can count them as layers of those stages
     * (--account-for-embedding-in-pipeline-split, --account-for-loss-in-
     * pipeline-split: megatron/core/transformer/transformer_block.py at
     * d98e8a64ddf34856e74b24714e3bedb2f5a39553), not spread them over every
     * stage between the 1F1B steps. */
    if (p->interlace) {
        wf_export_refuse(&e, strncmp(t->name, "megatron", 8) == 0
                                 ? "interlace=1 (the embedding and the head tensor-parallel over every pipeline stage): "
                                   "Megatron-LM keeps them on the first and the last stage (its "
                                   "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split "
                                   "only count them in that split); export the uneven form (stages=) instead"
                                 : "interlace=1 (the embedding and the head tensor-parallel over every pipeline stage): "
                                   "its pipeline keeps them on the first and the last stage");
        if (why && cap > 0)
            snprintf(why, cap, "%s", wf_last_error());
        wf_clear_error();
        return 0;
    }
    if (t->write(NULL, &e) != WF_OK) {
        if (why && cap > 0)
            snprintf(why, cap, "%s", wf_last_error());
        wf_clear_error();
        return 0;
    }
    return 1;
}

/* The format named before any work (plan --emit, export --to), with what
 * named it ("--emit") prefixed to the message. */
wf_status wf_cli_export_check_format(const char *format, const char *what)
{
    wf_status st = wf_export_target(format, NULL);
    return st == WF_OK ? WF_OK : wf_error_prefix(st, "%s", what);
}

wf_status wf_cli_export(FILE *f, const char *format, const wf_plan *p, const wf_model_config *m,
                        const wf_cluster *c, int64_t batch)
{
    wf_status st = wf_export_target(format, NULL);
    if (st != WF_OK)
        return st;
    const char *version = NULL;
    const export_target *t = find_target(format, &version);
    char why[512];
    if (!wf_export_accepts(format, p, m, why, sizeof why))
        return wf_errorf(WF_INVAL, "%s", why);
    if (batch % ((int64_t)p->dp * p->mbs) != 0)
        return wf_errorf(WF_INVAL, "%s: batch %lld is not a multiple of dp x mbs = %lld", t->name,
                         (long long)batch, (long long)p->dp * p->mbs);
    ectx e = make_ctx(t, version, p, m, c, batch);
    return t->write(f, &e);
}

/* ---- weft export PLAN --to FORMAT ---------------------------------------------------- */

wf_status wf_cmd_export(int argc, char **argv)
{
    wf_cli_plan_input in;
    memset(&in, 0, sizeof in);
    const char *to = NULL, *pos[1];
    int help = 0, npos = 0, force = 0;
    const wf_opt opts[] = {
        {"to", 0, WF_OPT_STR, &to, "FORMAT", "megatron[@VERSION], deepspeed (ds_config.json), megatron-deepspeed (its arguments), torchtitan[@0.2], fsdp or ddp", 1},
        WF_CLI_OPT_MODEL(&in.model),
        WF_CLI_OPT_CLUSTER(&in.cluster),
        WF_CLI_OPT_BATCH(&in.batch),
        {"force", 0, WF_OPT_FLAG, &force, NULL, "write the settings of a plan that does not fit in the device's memory (a warning instead of the refusal)", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, pos, 1, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft export PLAN",
                      "Writes what a framework needs to run PLAN (a plan string or a plan file):\n"
                      "Megatron-LM arguments, a DeepSpeed config, a torchtitan Python config (or a\n"
                      "torchtitan 0.2 job TOML), or a PyTorch FSDP2 or DDP training script. A plan the\n"
                      "framework cannot express is refused in one line naming what it lacks, and so is\n"
                      "a plan that does not fit in the device's memory, unless --force (docs/export.md).",
                      opts);
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    if (npos != 1)
        return wf_errorf(WF_INVAL, "missing PLAN (a plan string such as dp=8,tp=8 or a plan file)");
    in.plan = pos[0];
    if ((st = wf_cli_export_check_format(to, "--to")) != WF_OK)
        return st;
    if (wf_plan_is_oplevel_file(in.plan))
        return wf_errorf(WF_INVAL, "%s: an op-level plan (per-op layouts) has no framework form: Megatron-LM, "
                                   "DeepSpeed, torchtitan and FSDP take whole-model degrees (dp, tp, pp)",
                         in.plan);
    if ((st = wf_cli_load_plan_input(&in, "exporting")) != WF_OK)
        return st;
    /* The plan must be a valid one for this model, cluster and batch. */
    if ((st = wf_plan_validate(&in.p, &in.mc, &in.c, in.batch)) != WF_OK)
        return st;
    if ((st = wf_export_target(to, NULL)) != WF_OK)
        return st;
    char why[512];
    if (!wf_export_accepts(to, &in.p, &in.mc, why, sizeof why))
        return wf_errorf(WF_INVAL, "%s", why);
    /* A plan that does not fit would fail on the cluster with an out-of-memory
     * error: refused with the memory it needs, unless --force. */
    wf_cost_ctx *ctx = NULL;
    wf_estimate est;
    if ((st = wf_cost_ctx_create(&in.mc, &in.c, &ctx)) == WF_OK)
        st = wf_estimate_plan(ctx, &in.p, in.batch, &est);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        return st;
    if (!est.fits) {
        const double gib = 1024.0 * 1024.0 * 1024.0;
        if (!force)
            return wf_errorf(WF_NOFIT, "plan %s needs %.2f GiB per device, the %s has %.2f GiB: it does not fit "
                                       "(a plan that fits: weft plan --emit %s; --force writes it anyway)",
                             in.canon, est.memory_per_device_bytes / gib, in.c.dev.name, in.c.dev.mem_bytes / gib, to);
        wf_log(WF_LOG_WARN, "plan %s needs %.2f GiB per device, the %s has %.2f GiB: it will not fit (written "
                            "anyway: --force)",
               in.canon, est.memory_per_device_bytes / gib, in.c.dev.name, in.c.dev.mem_bytes / gib);
    }
    st = wf_cli_export(stdout, to, &in.p, &in.mc, &in.c, in.batch);
    if (st == WF_OK && fflush(stdout) != 0)
        st = wf_errorf(WF_IO, "cannot write standard output");
    return st;
}
