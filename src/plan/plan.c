/* weft plan: the plan value, its string form ("dp=8,tp=4,...", every key
 * optional), the canonical string, gradient-communication schedules
 * ("ddp:25"), and plan JSON files (docs/plan-format.md).
 *
 * Parsing checks each value's range and names the bad key; whether a plan
 * fits a model, a cluster and a batch is wf_plan_validate's job.
 *
 * Op-level plan files (per-op SBP signatures on a mesh, pipeline stages) are
 * read and written here too (wf_layout_*); whether one matches a model
 * graph and a cluster is checked by the search module. The whole-model
 * readers refuse them with a message that says where they go. */
#include "weft/plan.h"
#include "weft/graph.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLAN_FORMAT "weft-plan"
#define PLAN_VERSION 1
#define MIB (1024.0 * 1024.0)

static const char *const COMM_NAMES[WF_COMM_COUNT] = {
#define WF_X(e, name) name,
    WF_COMM_LIST(WF_X)
#undef WF_X
};

const char *wf_comm_name(wf_comm_kind k)
{
    if ((int)k < 0 || k >= WF_COMM_COUNT)
        return "?";
    return COMM_NAMES[k];
}

/* Schedules that group gradients by a size threshold accept ":MiB" (2^20 bytes). */
static int comm_takes_threshold(wf_comm_kind k)
{
    return k == WF_COMM_DDP || k == WF_COMM_HOROVOD || k == WF_COMM_DEAR ||
           k == WF_COMM_BYTESCHEDULER;
}

wf_status wf_comm_parse(const char *text, wf_comm_sched *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty comm schedule (one of wfbp, ddp[:MiB], horovod[:MiB], "
                                   "bytescheduler[:MiB], mgwfbp, dear[:MiB], auto)");
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    for (int k = 0; k < WF_COMM_COUNT; k++) {
        if (strlen(COMM_NAMES[k]) != n || strncmp(text, COMM_NAMES[k], n) != 0)
            continue;
        out->kind = (wf_comm_kind)k;
        out->threshold_bytes = 0;
        if (!colon)
            return WF_OK;
        if (!comm_takes_threshold(out->kind))
            return wf_errorf(WF_INVAL, "comm schedule '%s': %s takes no size threshold", text,
                             COMM_NAMES[k]);
        double mb = 0;
        wf_status st = wf_parse_num(colon + 1, "comm threshold (MiB)", 0, 1e6, &mb);
        if (st != WF_OK)
            return st;
        if (mb == 0 && out->kind == WF_COMM_BYTESCHEDULER)
            return wf_errorf(WF_INVAL, "comm schedule '%s': bytescheduler's chunk must be > 0 MiB", text);
        if (mb == 0 && out->kind != WF_COMM_DEAR)
            return wf_errorf(WF_INVAL, "comm schedule '%s': a threshold of 0 (no tensor fusion) is dear's alone; "
                                       "%s takes >= 0.001 MiB", text, COMM_NAMES[k]);
        if (mb > 0 && mb < 1e-3)
            return wf_errorf(WF_INVAL, "comm schedule '%s': threshold %g MiB must be 0 (no fusion) or >= 0.001",
                             text, mb);
        /* dear:0: no fusion, every gradient its own collective. */
        out->threshold_bytes = mb > 0 ? mb * MIB : WF_SCHED_UNFUSED_BYTES;
        return WF_OK;
    }
    char given[64], dym[96];
    snprintf(given, sizeof given, "%.*s", (int)(n < sizeof given ? n : sizeof given - 1), text);
    int k = wf_resolve_fold(given, COMM_NAMES, WF_COMM_COUNT);
    if (k >= 0) { /* "DeAR:25" is dear:25 */
        char fixed[128];
        snprintf(fixed, sizeof fixed, "%s%s", COMM_NAMES[k], colon ? colon : "");
        return wf_comm_parse(fixed, out);
    }
    return wf_errorf(WF_INVAL, "unknown comm schedule '%s' (one of wfbp, ddp[:MiB], horovod[:MiB], "
                               "bytescheduler[:MiB], mgwfbp, dear[:MiB], auto)%s", text,
                     wf_did_you_mean(wf_suggest(given, COMM_NAMES, WF_COMM_COUNT), dym, sizeof dym));
}

static const char *const SW_NAMES[WF_SW_COUNT] = {
#define WF_X(e, name) name,
    WF_SW_LIST(WF_X)
#undef WF_X
};

const char *wf_sw_name(wf_sw s)
{
    if ((int)s < 0 || s >= WF_SW_COUNT)
        return "?";
    return SW_NAMES[s];
}

wf_status wf_sw_parse(const char *text, wf_sw *out)
{
    int k = text ? wf_resolve_fold(text, SW_NAMES, WF_SW_COUNT) : -1;
    if (k >= 0) {
        *out = (wf_sw)k;
        return WF_OK;
    }
    char dym[96];
    return wf_errorf(WF_INVAL, "sw=%s: unknown framework profile (one of megatron-core, megatron-2022, "
                               "megatron-2021, deepspeed, fsdp, weft)%s", text ? text : "",
                     wf_did_you_mean(wf_suggest(text ? text : "", SW_NAMES, WF_SW_COUNT), dym, sizeof dym));
}

static const char *attn_name(wf_attn a)
{
    return a == WF_ATTN_FLASH ? "flash" : a == WF_ATTN_UNFUSED ? "unfused" : "auto";
}

const char *wf_recompute_name(wf_recompute r)
{
    switch (r) {
    case WF_RECOMPUTE_NONE:
        return "none";
    case WF_RECOMPUTE_SELECTIVE:
        return "selective";
    case WF_RECOMPUTE_FULL:
        return "full";
    }
    return "?";
}

const char *wf_pipe_name(wf_pipe_kind k)
{
    return k == WF_PIPE_GPIPE ? "gpipe" : k == WF_PIPE_1F1B ? "1f1b" : "?";
}

void wf_plan_default(wf_plan *p)
{
    memset(p, 0, sizeof *p);
    p->dp = p->tp = p->pp = p->mbs = p->vpp = 1;
    p->recompute = WF_RECOMPUTE_NONE;
    p->rc_layers = 0;
    p->sp = 0;
    p->zero = 0;
    p->overlap = 1;
    p->pipe = WF_PIPE_1F1B;
    p->comm.kind = WF_COMM_DDP;
    p->comm.threshold_bytes = 0;
    p->cp = 1;
    p->ep = 1;
    p->etp = 0;
    p->imb = 1.0;
    p->fp8 = 0;
    p->attn = WF_ATTN_AUTO;
    p->sw = WF_SW_MEGATRON_CORE;
    p->grad_dtype = -1;
    p->loss_dtype = -1;
    p->given = WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
    p->coshard = 1;
    p->coshard_on[0] = 0;
    p->dap = 1;
    p->nf1b = 0;
}

wf_status wf_plan_complete(wf_plan *p, int64_t devices, int64_t batch, char *note, size_t cap)
{
    note[0] = 0;
    size_t n = 0;
    if (!(p->given & WF_PLAN_GIVEN_DP)) {
        int64_t other = (int64_t)p->tp * p->pp * p->cp;
        const char *what = p->cp > 1 ? "tp x pp x cp" : "tp x pp";
        if (devices < other || devices % other != 0)
            return wf_errorf(WF_INVAL, "plan without dp: %s = %lld does not divide the %lld devices (give dp)",
                             what, (long long)other, (long long)devices);
        if (devices / other > (int64_t)1 << 24)
            return wf_errorf(WF_INVAL, "plan without dp: %lld devices / %s is too many (give dp)",
                             (long long)devices, what);
        p->dp = (int)(devices / other);
        n += (size_t)snprintf(note + n, cap - n, "dp=%d (the %lld devices / %s = %lld)", p->dp,
                              (long long)devices, what, (long long)other);
    }
    if (!(p->given & WF_PLAN_GIVEN_MBS) && n < cap) {
        const char *sep = n ? "; " : "";
        if (p->pp > 1) {
            p->mbs = 1;
            n += (size_t)snprintf(note + n, cap - n, "%smbs=1 (Megatron's micro-batch with pipelining)", sep);
        } else if (batch % p->dp == 0 && batch / p->dp <= (int64_t)1 << 24) {
            p->mbs = (int)(batch / p->dp);
            n += (size_t)snprintf(note + n, cap - n, "%smbs=%d (batch / dp: no gradient accumulation)", sep, p->mbs);
        }
    }
    p->given |= WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
    return WF_OK;
}

int64_t wf_plan_devices(const wf_plan *p)
{
    /* Saturates at INT64_MAX instead of wrapping (plans built in code are not
     * parsed, so the product is checked here too). */
    int64_t f[5] = {p->dp, p->tp, p->pp, p->cp > 0 ? p->cp : 1, p->dap > 0 ? p->dap : 1}, n = 1;
    for (int i = 0; i < 5; i++) {
        if (f[i] < 1)
            return 0;
        if (n > INT64_MAX / f[i])
            return INT64_MAX;
        n *= f[i];
    }
    return n;
}

/* grad= and loss=: a floating dtype (fp32, bf16, fp16). */
static wf_status get_dtype_key(wf_spec *s, const char *key, int *dst)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, key, &v) != 1)
        return WF_OK;
    wf_dtype d;
    if (wf_dtype_parse(v, &d) != WF_OK || (d != WF_DTYPE_FP32 && d != WF_DTYPE_BF16 && d != WF_DTYPE_FP16))
        return wf_errorf(WF_INVAL, "%s=%s: expected fp32, bf16 or fp16", key, v);
    *dst = (int)d;
    return WF_OK;
}

static wf_status get_int_key(wf_spec *s, const char *key, int64_t lo, int64_t hi, int *dst)
{
    int64_t v = 0;
    int r = wf_spec_get_int(s, key, lo, hi, &v);
    if (r < 0)
        return (wf_status)r;
    if (r == 1)
        *dst = (int)v;
    return WF_OK;
}

/* ---- recomputation per stage ---------------------------------------------------------
 * recompute=K or recompute=K0/K1/... (one per pipeline stage; "full*3" repeats
 * a value), rc_layers=N or N0/N1/... (Megatron's block method: N layers of
 * each chunk of a full stage recomputed, the rest not). Stored normalized, so
 * that equal plans are equal values and the canonical string parses back to
 * the same plan: a full stage with N = 0 is a stage without recomputation,
 * stages that are not full carry N = -1, and lists of equal values collapse
 * to the uniform form. */

static int rc_kind_of(const char *t, size_t n)
{
    static const char *const names[] = {"none", "selective", "full"};
    for (int k = 0; k < 3; k++)
        if (strlen(names[k]) == n && strncmp(names[k], t, n) == 0)
            return k;
    return -1;
}

/* The n bytes at t as a plain decimal count 0..max (digits only: no sign, no
 * space), or -1. */
static long plain_count(const char *t, size_t n, long max)
{
    if (n == 0 || n > 9)
        return -1;
    long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return -1;
        x = x * 10 + (t[i] - '0');
    }
    return x <= max ? x : -1;
}

/* Splits "a/b*3/c" into at most WF_PLAN_RC_STAGES values, each parsed by
 * kind (1: a recompute kind) or as a count (0: an integer 0..WF_MAX_LAYERS). */
static wf_status rc_list(const char *key, const char *text, int kind, int *vals, int *n)
{
    *n = 0;
    for (const char *t = text;;) {
        const char *end = strchr(t, '/');
        size_t len = end ? (size_t)(end - t) : strlen(t);
        const char *star = memchr(t, '*', len);
        size_t vlen = star ? (size_t)(star - t) : len;
        long rep = 1;
        if (star) {
            rep = plain_count(star + 1, len - vlen - 1, WF_PLAN_RC_STAGES);
            if (rep < 1)
                return wf_errorf(WF_INVAL, "%s=%s: '%.*s' repeats a value 1..%d times (full*3)", key, text,
                                 (int)len, t, WF_PLAN_RC_STAGES);
        }
        int v = -1;
        if (kind) {
            v = rc_kind_of(t, vlen);
            if (v < 0)
                return wf_errorf(WF_INVAL, "%s=%s: '%.*s' is not none, selective or full", key, text, (int)vlen, t);
        } else if (vlen == 3 && strncmp(t, "all", 3) == 0) {
            v = -1;
        } else {
            long x = plain_count(t, vlen, WF_MAX_LAYERS);
            if (x < 0)
                return wf_errorf(WF_INVAL, "%s=%s: '%.*s' is not a layer count 0..%d or all", key, text,
                                 (int)vlen, t, WF_MAX_LAYERS);
            v = (int)x;
        }
        if (*n + rep > WF_PLAN_RC_STAGES)
            return wf_errorf(WF_INVAL, "%s=%s: more than %d stages", key, text, WF_PLAN_RC_STAGES);
        for (long r = 0; r < rep; r++)
            vals[(*n)++] = v;
        if (!end)
            break;
        t = end + 1;
    }
    return WF_OK;
}

/* Runs of equal values in a list of n. */
static int rc_runs(const int *v, int n)
{
    int r = n > 0;
    for (int i = 1; i < n; i++)
        r += v[i] != v[i - 1];
    return r;
}

/* rc_layers=0 as parsed (no layer recomputed; stored values: 0 = every layer). */
#define RC_ZERO (-2)

/* Normalizes the recomputation of p as parsed (see above). */
static void rc_normalize(wf_plan *p)
{
    if (p->rc_n == 0) {
        if (p->recompute != WF_RECOMPUTE_FULL)
            p->rc_layers = 0;
        else if (p->rc_layers == RC_ZERO) {
            p->recompute = WF_RECOMPUTE_NONE;
            p->rc_layers = 0;
        }
        return;
    }
    int strongest = WF_RECOMPUTE_NONE, same = 1;
    for (int s = 0; s < p->rc_n; s++) {
        if (p->rc_kind_at[s] != WF_RECOMPUTE_FULL)
            p->rc_layers_at[s] = 0;
        else if (p->rc_layers_at[s] == RC_ZERO) {
            p->rc_kind_at[s] = WF_RECOMPUTE_NONE;
            p->rc_layers_at[s] = 0;
        }
        if (p->rc_kind_at[s] > strongest)
            strongest = p->rc_kind_at[s];
        same &= p->rc_kind_at[s] == p->rc_kind_at[0] && p->rc_layers_at[s] == p->rc_layers_at[0];
    }
    p->recompute = (wf_recompute)strongest;
    if (same) {
        p->recompute = (wf_recompute)p->rc_kind_at[0];
        p->rc_layers = p->rc_layers_at[0];
        p->rc_n = 0;
        memset(p->rc_kind_at, 0, sizeof p->rc_kind_at);
        memset(p->rc_layers_at, 0, sizeof p->rc_layers_at);
        return;
    }
    /* The list's N when every full stage has the same one (the canonical
     * form writes it once), else 0. */
    p->rc_layers = -1;
    for (int s = 0; s < p->rc_n; s++) {
        if (p->rc_kind_at[s] != WF_RECOMPUTE_FULL)
            continue;
        if (p->rc_layers == -1)
            p->rc_layers = p->rc_layers_at[s];
        else if (p->rc_layers != p->rc_layers_at[s])
            p->rc_layers = -3;
    }
    if (p->rc_layers < 0)
        p->rc_layers = 0;
}

static wf_status parse_recompute(wf_spec *s, wf_plan *p)
{
    const char *v = NULL, *nl = NULL;
    int kinds[WF_PLAN_RC_STAGES], layers[WF_PLAN_RC_STAGES], nk = 0, nn = 0;
    wf_status st;
    if (wf_spec_get_str(s, "recompute", &v) == 1 && (st = rc_list("recompute", v, 1, kinds, &nk)) != WF_OK)
        return st;
    if (wf_spec_get_str(s, "rc_layers", &nl) == 1 && (st = rc_list("rc_layers", nl, 0, layers, &nn)) != WF_OK)
        return st;
    if (nk > 1 && rc_runs(kinds, nk) > WF_PLAN_RC_RUNS)
        return wf_errorf(WF_INVAL, "recompute=%s: more than %d runs of equal values", v, WF_PLAN_RC_RUNS);
    if (nn > 1 && rc_runs(layers, nn) > WF_PLAN_RC_RUNS)
        return wf_errorf(WF_INVAL, "rc_layers=%s: more than %d runs of equal values", nl, WF_PLAN_RC_RUNS);
    if (nk > 1 && nn > 1 && nk != nn)
        return wf_errorf(WF_INVAL, "recompute=%s has %d stages, rc_layers=%s %d", v, nk, nl, nn);
    int full = 0;
    for (int i = 0; i < nk; i++)
        full |= kinds[i] == WF_RECOMPUTE_FULL;
    if (nn > 0 && !full)
        return wf_errorf(WF_INVAL, "rc_layers=%s: needs recompute=full on some stage (the block method "
                                   "recomputes N layers of a stage fully)", nl);
    /* Parsed counts: 0 is no layer, "all" (-1) every layer (stored as 0). */
    for (int i = 0; i < nn; i++)
        layers[i] = layers[i] == 0 ? RC_ZERO : layers[i] < 0 ? 0 : layers[i];
    int n = nk > nn ? nk : nn;
    /* A list names every stage: with pp in the same string its length must
     * be pp, before equal values collapse to one (an op-level file's keys
     * are checked against its stages when read). */
    int64_t pp_given;
    int have_pp = wf_spec_get_int(s, "pp", 1, 1 << 16, &pp_given) == 1;
    if (n > 1 && have_pp && n != p->pp)
        return wf_errorf(WF_INVAL, "recompute per stage: %d values for pp=%d stages", n, p->pp);
    /* Without pp, a list names the stages: its length is pp (so the
     * canonical string, which always writes pp, parses back to the same
     * plan; found by fuzz_plankeys). */
    if (n > 1 && !have_pp)
        p->pp = n;
    if (nk == 1)
        p->recompute = (wf_recompute)kinds[0];
    if (n <= 1) {
        p->rc_layers = nn == 1 ? layers[0] : 0;
    } else {
        p->rc_n = n;
        for (int i = 0; i < n; i++) {
            p->rc_kind_at[i] = (unsigned char)(nk > 1 ? kinds[i] : kinds[0]);
            p->rc_layers_at[i] = (nn > 1 ? layers[i] : nn == 1 ? layers[0] : 0);
        }
    }
    rc_normalize(p);
    return WF_OK;
}

/* stages=9/11/11/9 (or 9/11*2/9): the layers of each pipeline stage. The
 * values are separated by '/' because ',' separates the plan's keys. A list
 * names every stage: with pp in the string its length must be pp, without
 * it the list sets pp. */
static wf_status parse_stages(wf_spec *s, wf_plan *p)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, "stages", &v) != 1)
        return WF_OK;
    int vals[WF_PLAN_RC_STAGES], n = 0;
    wf_status st = rc_list("stages", v, 0, vals, &n);
    if (st != WF_OK)
        return st;
    for (int i = 0; i < n; i++)
        if (vals[i] < 1)
            return wf_errorf(WF_INVAL, "stages=%s: stage %d has %s layers (each stage holds at least one)", v, i,
                             vals[i] == 0 ? "0" : "'all'");
    if (n < 2)
        return wf_errorf(WF_INVAL, "stages=%s: one stage (uneven stages need pp >= 2)", v);
    int64_t pp_given;
    if (wf_spec_get_int(s, "pp", 1, 1 << 16, &pp_given) == 1 && pp_given != n)
        return wf_errorf(WF_INVAL, "stages=%s: %d stages for pp=%lld", v, n, (long long)pp_given);
    if (p->rc_n > 0 && p->rc_n != n)
        return wf_errorf(WF_INVAL, "stages=%s: %d stages, but recompute per stage names %d", v, n, p->rc_n);
    p->pp = n;
    p->stage_n = n;
    for (int i = 0; i < n; i++)
        p->stage_layers[i] = vals[i];
    return WF_OK;
}

int wf_plan_stage_layers(const wf_plan *p, int64_t layers, int s)
{
    if (p->stage_n > 0 && s >= 0 && s < p->stage_n)
        return p->stage_layers[s];
    return (int)(layers / (p->pp > 0 ? p->pp : 1));
}

int wf_plan_stage_first_layer(const wf_plan *p, int64_t layers, int s)
{
    int first = 0;
    for (int k = 0; k < s; k++)
        first += wf_plan_stage_layers(p, layers, k);
    return first;
}

static const char *pipeline_kind(const wf_plan *p)
{
    if (p->pp <= 1)
        return "no pipeline";
    if (p->stage_n > 0)
        return p->pipe == WF_PIPE_GPIPE ? "uneven GPipe" : "uneven 1F1B";
    if (p->interlace)
        return "interlaced 1F1B";
    if (p->vpp > 1)
        return "interleaved 1F1B";
    return p->pipe == WF_PIPE_GPIPE ? "GPipe" : "1F1B";
}

/* The pipeline kinds a plan with NF1B or co-shard may have (no uneven or
 * interleaved stages: those are transformers'), each as the four strings
 * of (nf1b, co-shard). */
static const char *const KIND_EXT[][4] = {
    {"no pipeline", "co-shard", "NF1B", "NF1B + co-shard"},
    {"1F1B", "1F1B + co-shard", "NF1B 1F1B", "NF1B 1F1B + co-shard"},
    {"GPipe", "GPipe + co-shard", "NF1B GPipe", "NF1B GPipe + co-shard"},
};

/* The same with DAP (dap > 1): " + DAP" after each; "DAP" alone without a
 * pipeline, NF1B or co-shard. */
static const char *const KIND_EXT_DAP[][4] = {
    {"DAP", "co-shard + DAP", "NF1B + DAP", "NF1B + co-shard + DAP"},
    {"1F1B + DAP", "1F1B + co-shard + DAP", "NF1B 1F1B + DAP", "NF1B 1F1B + co-shard + DAP"},
    {"GPipe + DAP", "GPipe + co-shard + DAP", "NF1B GPipe + DAP", "NF1B GPipe + co-shard + DAP"},
};

const char *wf_plan_kind(const wf_plan *p)
{
    const char *base = pipeline_kind(p);
    int ext = (p->coshard > 1) + 2 * (p->nf1b != 0);
    if (ext == 0 && p->dap <= 1)
        return base;
    for (size_t i = 0; i < sizeof KIND_EXT / sizeof KIND_EXT[0]; i++)
        if (strcmp(KIND_EXT[i][0], base) == 0)
            return p->dap > 1 ? KIND_EXT_DAP[i][ext] : KIND_EXT[i][ext];
    return base;
}

/* "full*2/none*6" into buf: the n values run-length coded. */
static int rc_format_list(const int *v, int n, int kind, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k < cap;) {
        int j = i;
        while (j < n && v[j] == v[i])
            j++;
        char val[16];
        if (kind)
            snprintf(val, sizeof val, "%s", wf_recompute_name((wf_recompute)v[i]));
        else if (v[i] < 0)
            snprintf(val, sizeof val, "all");
        else
            snprintf(val, sizeof val, "%d", v[i]);
        if (j - i > 1)
            k += (size_t)snprintf(buf + k, cap - k, "%s%s*%d", i ? "/" : "", val, j - i);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? "/" : "", val);
        i = j;
    }
    return (int)k;
}

/* ",rc_layers=..." and the recompute value of plan p's canonical form. */
static void rc_format(const wf_plan *p, char *kind, size_t kcap, char *layers, size_t lcap)
{
    layers[0] = 0;
    if (p->rc_n == 0) {
        snprintf(kind, kcap, "%s", wf_recompute_name(p->recompute));
        if (p->recompute == WF_RECOMPUTE_FULL && p->rc_layers > 0)
            snprintf(layers, lcap, ",rc_layers=%d", p->rc_layers);
        return;
    }
    int k[WF_PLAN_RC_STAGES] = {0}, n[WF_PLAN_RC_STAGES] = {0}, one = 1, any = 0;
    for (int s = 0; s < p->rc_n; s++) {
        k[s] = p->rc_kind_at[s];
        /* Full stages of every layer write "all", the others 0. */
        n[s] = k[s] != WF_RECOMPUTE_FULL ? 0 : p->rc_layers_at[s] > 0 ? p->rc_layers_at[s] : -1;
        if (k[s] == WF_RECOMPUTE_FULL) {
            any |= p->rc_layers_at[s] > 0;
            one &= p->rc_layers_at[s] == p->rc_layers;
        }
    }
    int same = 1;
    for (int s = 1; s < p->rc_n; s++)
        same &= k[s] == k[0];
    if (same)
        snprintf(kind, kcap, "%s", wf_recompute_name((wf_recompute)k[0]));
    else
        rc_format_list(k, p->rc_n, 1, kind, kcap);
    if (!any)
        return;
    if (one) {
        snprintf(layers, lcap, ",rc_layers=%d", p->rc_layers);
        return;
    }
    /* Stages that are not full write 0 (they recompute no layer fully). */
    size_t m = (size_t)snprintf(layers, lcap, ",rc_layers=");
    if (m < lcap)
        rc_format_list(n, p->rc_n, 0, layers + m, lcap - m);
}

void wf_plan_stage_rc(const wf_plan *p, int s, int chunk_layers, int *full, int *sel)
{
    int kind = p->recompute, n = p->rc_layers;
    if (p->rc_n > 0) {
        s = s < 0 ? 0 : s >= p->rc_n ? p->rc_n - 1 : s;
        kind = p->rc_kind_at[s];
        n = p->rc_layers_at[s];
    }
    *full = *sel = 0;
    if (kind == WF_RECOMPUTE_SELECTIVE)
        *sel = chunk_layers;
    else if (kind == WF_RECOMPUTE_FULL)
        *full = n <= 0 || n > chunk_layers ? chunk_layers : n;
}

int wf_plan_rc_uniform(const wf_plan *p, int chunk_layers)
{
    if (p->rc_n > 0)
        return 0;
    return p->recompute != WF_RECOMPUTE_FULL || p->rc_layers <= 0 || p->rc_layers >= chunk_layers;
}

/* ---- the plan's keys -----------------------------------------------------------------
 * One row per key of the plan string, in the canonical string's order. The
 * table drives parsing, the canonical string, the list of keys that messages
 * name (and an unknown key is checked against) and the keys an op-level
 * plan's layouts say.
 *
 *   X(name, read, write, lo, hi, member, layout)
 *   read    key_int: an integer lo..hi into member; key_dtype: fp32, bf16 or
 *           fp16 into member; else the key's own reader. Integer and dtype
 *           keys are read first, the others after them, in the table's order
 *           (recompute needs pp; a message names the first bad key of that
 *           order).
 *   write   how the canonical string writes it (0 characters: left out, the
 *           key has its default)
 *   layout  1: the mesh, the stages or the micro-batches of an op-level plan
 *           say it, so its keys do not */
typedef struct plan_key plan_key;
typedef wf_status (*key_reader)(wf_spec *s, const plan_key *k, wf_plan *p);
typedef int (*key_writer)(const plan_key *k, const wf_plan *p, char *buf, size_t cap);
struct plan_key {
    const char *name;
    key_reader read;
    key_writer write;
    int64_t lo, hi;
    size_t off; /* offsetof(wf_plan, member) */
    int layout;
};

static int *key_int_at(const plan_key *k, wf_plan *p) { return (int *)(void *)((char *)p + k->off); }
static int key_int_of(const plan_key *k, const wf_plan *p)
{
    return *(const int *)(const void *)((const char *)p + k->off);
}

static wf_status key_int(wf_spec *s, const plan_key *k, wf_plan *p)
{
    return get_int_key(s, k->name, k->lo, k->hi, key_int_at(k, p));
}

static wf_status key_dtype(wf_spec *s, const plan_key *k, wf_plan *p)
{
    return get_dtype_key(s, k->name, key_int_at(k, p));
}

static wf_status key_recompute(wf_spec *s, const plan_key *k, wf_plan *p) { return parse_recompute(s, p); }

/* rc_layers is read with recompute. */
static wf_status key_with_recompute(wf_spec *s, const plan_key *k, wf_plan *p) { return WF_OK; }

static wf_status key_pipe(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, k->name, &v) != 1)
        return WF_OK;
    if (strcmp(v, "1f1b") == 0)
        p->pipe = WF_PIPE_1F1B;
    else if (strcmp(v, "gpipe") == 0)
        p->pipe = WF_PIPE_GPIPE;
    else
        return wf_errorf(WF_INVAL, "pipe=%s: expected 1f1b or gpipe", v);
    return WF_OK;
}

static wf_status key_comm(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    return wf_spec_get_str(s, k->name, &v) == 1 ? wf_comm_parse(v, &p->comm) : WF_OK;
}

static wf_status key_imb(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, k->name, &v) != 1)
        return WF_OK;
    return wf_parse_num(v, "imb (expert load imbalance)", (double)k->lo, (double)k->hi, &p->imb);
}

static wf_status key_attn(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, k->name, &v) != 1)
        return WF_OK;
    if (strcmp(v, "flash") == 0)
        p->attn = WF_ATTN_FLASH;
    else if (strcmp(v, "unfused") == 0)
        p->attn = WF_ATTN_UNFUSED;
    else
        return wf_errorf(WF_INVAL, "attn=%s: expected flash or unfused", v);
    return WF_OK;
}

static wf_status key_sw(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    return wf_spec_get_str(s, k->name, &v) == 1 ? wf_sw_parse(v, &p->sw) : WF_OK;
}

static int fmt_int(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s=%d", k->name, key_int_of(k, p));
}

static int fmt_above1(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return key_int_of(k, p) > 1 ? fmt_int(k, p, buf, cap) : 0;
}

static int fmt_set(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return key_int_of(k, p) ? fmt_int(k, p, buf, cap) : 0;
}

/* etp: written when it is not tp (0 is tp). */
static int fmt_etp(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return p->etp > 0 && p->etp != p->tp ? fmt_int(k, p, buf, cap) : 0;
}

static int fmt_dtype(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    int d = key_int_of(k, p);
    return d >= 0 ? snprintf(buf, cap, "%s=%s", k->name, wf_dtype_name((wf_dtype)d)) : 0;
}

static int fmt_recompute(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    char rk[160], rl[96];
    rc_format(p, rk, sizeof rk, rl, sizeof rl);
    return snprintf(buf, cap, "%s=%s", k->name, rk);
}

static int fmt_rc_layers(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    char rk[160], rl[96];
    rc_format(p, rk, sizeof rk, rl, sizeof rl);
    return rl[0] ? snprintf(buf, cap, "%s", rl + 1) : 0; /* rl is ",rc_layers=..." */
}

static wf_status key_stages(wf_spec *s, const plan_key *k, wf_plan *p) { (void)k; return parse_stages(s, p); }

static int fmt_stages(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    if (p->stage_n <= 0)
        return 0;
    int n = snprintf(buf, cap, "%s=", k->name);
    return n + rc_format_list(p->stage_layers, p->stage_n, 0, buf + n, cap - (size_t)n);
}

static int fmt_pipe(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s=%s", k->name, wf_pipe_name(p->pipe));
}

static int fmt_comm(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    if (p->comm.threshold_bytes == WF_SCHED_UNFUSED_BYTES) /* dear:0, no tensor fusion */
        return snprintf(buf, cap, "%s=%s:0", k->name, wf_comm_name(p->comm.kind));
    if (p->comm.threshold_bytes > 0)
        return snprintf(buf, cap, "%s=%s:%.15g", k->name, wf_comm_name(p->comm.kind), p->comm.threshold_bytes / MIB);
    return snprintf(buf, cap, "%s=%s", k->name, wf_comm_name(p->comm.kind));
}

static int fmt_imb(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return p->imb > 1.0 ? snprintf(buf, cap, "%s=%.15g", k->name, p->imb) : 0;
}

static int fmt_attn(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return p->attn != WF_ATTN_AUTO ? snprintf(buf, cap, "%s=%s", k->name, attn_name(p->attn)) : 0;
}

static int fmt_sw(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    return p->sw != WF_SW_MEGATRON_CORE ? snprintf(buf, cap, "%s=%s", k->name, wf_sw_name(p->sw)) : 0;
}

/* ---- co-shard: coshard=K (whole stage) or coshard=K@PATTERN (per op) ---------------
 * A pattern is one or more op kinds or op-name globs joined by '+'
 * ("attention", "tri_*+opm*"), since ',' separates the plan's keys. */

/* A glob of '*' (any run) and '?' (one character) against s, whole. */
static int glob_match(const char *pat, size_t n, const char *s)
{
    if (n == 0)
        return *s == 0;
    if (*pat == '*') {
        for (;; s++) {
            if (glob_match(pat + 1, n - 1, s))
                return 1;
            if (!*s)
                return 0;
        }
    }
    return *s && (*pat == '?' || *pat == *s) && glob_match(pat + 1, n - 1, s + 1);
}

static int coshard_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-' || c == '*' || c == '?' || c == '+' || c == '/';
}

static wf_status key_coshard(wf_spec *s, const plan_key *k, wf_plan *p)
{
    const char *v = NULL;
    if (wf_spec_get_str(s, k->name, &v) != 1)
        return WF_OK;
    const char *at = strchr(v, '@');
    char num[24];
    size_t nl = at ? (size_t)(at - v) : strlen(v);
    char *end = NULL;
    long K = 0;
    if (nl > 0 && nl < sizeof num) {
        memcpy(num, v, nl);
        num[nl] = 0;
        K = strtol(num, &end, 10);
    }
    if (!end || *end || K < k->lo || K > k->hi)
        return wf_errorf(WF_INVAL, "coshard=%s: expected a piece count %d..%d, optionally @PATTERN (op kinds or "
                                   "op-name globs joined by '+', e.g. coshard=4@attention)", v, (int)k->lo, (int)k->hi);
    p->coshard = (int)K;
    memset(p->coshard_on, 0, sizeof p->coshard_on);
    if (!at)
        return WF_OK;
    const char *pat = at + 1;
    size_t n = strlen(pat);
    if (n == 0 || n >= sizeof p->coshard_on || pat[0] == '+' || pat[n - 1] == '+' || strstr(pat, "++"))
        return wf_errorf(WF_INVAL, "coshard=%s: the pattern after '@' must be 1..%d characters of op kinds or "
                                   "op-name globs joined by '+'", v, (int)sizeof p->coshard_on - 1);
    for (size_t i = 0; i < n; i++)
        if (!coshard_char_ok(pat[i]))
            return wf_errorf(WF_INVAL, "coshard=%s: '%c' in the pattern (letters, digits, '_', '.', '-', '/', "
                                       "'*', '?', and '+' between patterns)", v, pat[i]);
    if (K < 2)
        return wf_errorf(WF_INVAL, "coshard=%s: a per-op co-shard needs at least 2 pieces", v);
    memcpy(p->coshard_on, pat, n + 1);
    return WF_OK;
}

static int fmt_coshard(const plan_key *k, const wf_plan *p, char *buf, size_t cap)
{
    if (p->coshard <= 1)
        return 0;
    if (p->coshard_on[0])
        return snprintf(buf, cap, "%s=%d@%s", k->name, p->coshard, p->coshard_on);
    return snprintf(buf, cap, "%s=%d", k->name, p->coshard);
}

int wf_plan_coshard_per_op(const wf_plan *p) { return p->coshard > 1 && p->coshard_on[0] != 0; }

int wf_plan_coshard_op(const wf_plan *p, const char *name, int kind)
{
    if (p->coshard <= 1)
        return 0;
    if (!p->coshard_on[0])
        return 1;
    const char *kn = wf_op_name((wf_op_kind)kind);
    for (const char *q = p->coshard_on; *q;) {
        const char *e = strchr(q, '+');
        size_t n = e ? (size_t)(e - q) : strlen(q);
        if ((kn && strlen(kn) == n && strncmp(kn, q, n) == 0) || (name && glob_match(q, n, name)))
            return 1;
        q += n + (e ? 1 : 0);
    }
    return 0;
}

/*      name       read                write          lo  hi       member      layout */
#define PLAN_KEY_LIST(X)                                                                 \
    X(dp,        key_int,            fmt_int,       1, 1 << 24, dp,         1)          \
    X(tp,        key_int,            fmt_int,       1, 1 << 16, tp,         1)          \
    X(pp,        key_int,            fmt_int,       1, 1 << 16, pp,         1)          \
    X(mbs,       key_int,            fmt_int,       1, 1 << 24, mbs,        1)          \
    X(vpp,       key_int,            fmt_int,       1, 1 << 10, vpp,        0)          \
    X(recompute, key_recompute,      fmt_recompute, 0, 0,       recompute,  0)          \
    X(rc_layers, key_with_recompute, fmt_rc_layers, 0, 0,       rc_layers,  0)          \
    X(stages,    key_stages,         fmt_stages,    0, 0,       stage_n,    1)          \
    X(interlace, key_int,            fmt_set,       0, 1,       interlace,  0)          \
    X(sp,        key_int,            fmt_int,       0, 1,       sp,         1)          \
    X(zero,      key_int,            fmt_int,       0, 3,       zero,       0)          \
    X(overlap,   key_int,            fmt_int,       0, 1,       overlap,    0)          \
    X(pipe,      key_pipe,           fmt_pipe,      0, 0,       pipe,       0)          \
    X(comm,      key_comm,           fmt_comm,      0, 0,       comm,       0)          \
    X(cp,        key_int,            fmt_above1,    1, 1 << 16, cp,         1)          \
    X(ep,        key_int,            fmt_above1,    1, 1 << 16, ep,         1)          \
    X(etp,       key_int,            fmt_etp,       1, 1 << 16, etp,        1)          \
    X(imb,       key_imb,            fmt_imb,       1, 64,      imb,        0)          \
    X(epo,       key_int,            fmt_set,       0, 1,       epo,        0)          \
    X(fp8,       key_int,            fmt_set,       0, 1,       fp8,        0)          \
    X(attn,      key_attn,           fmt_attn,      0, 0,       attn,       0)          \
    X(grad,      key_dtype,          fmt_dtype,     0, 0,       grad_dtype, 0)          \
    X(loss,      key_dtype,          fmt_dtype,     0, 0,       loss_dtype, 0)          \
    X(sw,        key_sw,             fmt_sw,        0, 0,       sw,         0)          \
    X(coshard,   key_coshard,        fmt_coshard,   1, 1 << 12, coshard,    0)          \
    X(dap,       key_int,            fmt_above1,    1, 1 << 12, dap,        1)          \
    X(nf1b,      key_int,            fmt_set,       0, 1,       nf1b,       0)

static const plan_key PLAN_KEY_TABLE[] = {
#define WF_X(name, read, write, lo, hi, member, layout) \
    {#name, read, write, lo, hi, offsetof(wf_plan, member), layout},
    PLAN_KEY_LIST(WF_X)
#undef WF_X
};
#define NKEYS ((int)(sizeof PLAN_KEY_TABLE / sizeof PLAN_KEY_TABLE[0]))

/* "dp, tp, ...": the allowed keys as messages name them (the text after ", "). */
static const char PLAN_KEYS_TEXT[] =
#define WF_X(name, read, write, lo, hi, member, layout) ", " #name
    PLAN_KEY_LIST(WF_X)
#undef WF_X
    ;
#define PLAN_KEYS (PLAN_KEYS_TEXT + 2)

/* Integer and dtype keys are read in the first pass, the others in the second. */
static int key_pass(const plan_key *k) { return k->read == key_int || k->read == key_dtype ? 0 : 1; }

static wf_status parse_string(const char *text, wf_plan *out)
{
    wf_spec s;
    wf_status st = wf_spec_parse(text, &s);
    if (st != WF_OK)
        return st;
    if (s.name[0])
        return wf_errorf(WF_INVAL, "plan '%s': expected key=value pairs (%s), or a plan file",
                         text, PLAN_KEYS);
    const char *mesh = NULL;
    if (wf_spec_get_str(&s, "mesh", &mesh) == 1)
        return wf_errorf(WF_INVAL, "plan '%s' is an op-level plan (mesh=%s): it needs its per-op "
                                   "layouts, so it is given as the plan file `weft plan --op-level "
                                   "-o FILE` writes, and checked with `weft plan --verify FILE`",
                         text, mesh);
    wf_plan p;
    wf_plan_default(&p);
    p.given = 0;
    int64_t probe;
    if (wf_spec_get_int(&s, "dp", 1, 1 << 24, &probe) == 1)
        p.given |= WF_PLAN_GIVEN_DP;
    if (wf_spec_get_int(&s, "mbs", 1, 1 << 24, &probe) == 1)
        p.given |= WF_PLAN_GIVEN_MBS;
    int zero_given = wf_spec_get_int(&s, "zero", 0, 3, &probe) == 1;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < NKEYS; k++)
            if (key_pass(&PLAN_KEY_TABLE[k]) == pass && (st = PLAN_KEY_TABLE[k].read(&s, &PLAN_KEY_TABLE[k], &p)) != WF_OK)
                return st;
    /* PyTorch FSDP shards fully unless told otherwise (zero=0 NO_SHARD,
     * zero=2 SHARD_GRAD_OP, zero=3 FULL_SHARD). */
    if (p.sw == WF_SW_FSDP && !zero_given)
        p.zero = 3;
    if ((st = wf_spec_check_unused(&s, "plan", PLAN_KEYS)) != WF_OK)
        return st;
    /* Each degree is in range; their product must be too (it sizes groups
     * and divides batches: 2^24 x 2^16 x 2^16 x 2^16 wraps an int64). */
    if (wf_plan_devices(&p) > WF_MAX_DEVICES)
        return wf_errorf(WF_INVAL, "plan '%s': dp*tp*pp*cp*dap = %d*%d*%d*%d*%d is more than %lld devices", text,
                         p.dp, p.tp, p.pp, p.cp, p.dap, (long long)WF_MAX_DEVICES);
    *out = p;
    return WF_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

wf_status wf_plan_parse(const char *text, wf_plan *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty plan (expected %s=... pairs, or a plan file)", "dp");
    if (!strchr(text, '=') && (ends_with(text, ".json") || access(text, F_OK) == 0))
        return wf_plan_read_file(text, out, NULL);
    if (!strchr(text, '='))
        return wf_errorf(WF_INVAL, "plan '%s': not a plan string (key=value pairs: %s) and no "
                                   "such file", text, PLAN_KEYS);
    return parse_string(text, out);
}

int wf_plan_format(const wf_plan *p, char *buf, size_t cap)
{
    char text[1024];
    size_t n = 0;
    for (int k = 0; k < NKEYS && n + 1 < sizeof text; k++) {
        char one[320];
        int m = PLAN_KEY_TABLE[k].write(&PLAN_KEY_TABLE[k], p, one, sizeof one);
        if (m > 0)
            n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", n ? "," : "", one);
    }
    return snprintf(buf, cap, "%s", text);
}

int wf_plan_nkeys(void) { return NKEYS; }

void wf_plan_key_view_of(int k, const wf_plan *p, wf_plan_key_view *out)
{
    const plan_key *key = &PLAN_KEY_TABLE[k];
    out->name = key->name;
    out->degree = key->layout && key->lo >= 1;
    out->text[0] = 0;
    if (key->write(key, p, out->text, sizeof out->text) <= 0)
        out->text[0] = 0;
}

/* ---- files ------------------------------------------------------------------------ */

/* A plan file's object with the fields both kinds share: format, version,
 * plan (the plan string `text`), and model, cluster, batch where meta has
 * them; NULL when out of memory. */
static cJSON *json_head(const char *text, const wf_plan_meta *meta)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "format", PLAN_FORMAT);
    cJSON_AddNumberToObject(j, "version", PLAN_VERSION);
    cJSON_AddStringToObject(j, "plan", text);
    if (meta && meta->model[0])
        cJSON_AddStringToObject(j, "model", meta->model);
    if (meta && meta->cluster[0])
        cJSON_AddStringToObject(j, "cluster", meta->cluster);
    if (meta && meta->batch > 0)
        cJSON_AddNumberToObject(j, "batch", (double)meta->batch);
    return j;
}

/* j with a copy of `estimate` (when given) as its last field; on running out
 * of memory j is freed and the result is NULL. */
static cJSON *json_add_estimate(cJSON *j, const cJSON *estimate)
{
    if (estimate) {
        cJSON *e = cJSON_Duplicate(estimate, 1);
        if (!e) {
            cJSON_Delete(j);
            return NULL;
        }
        cJSON_AddItemToObject(j, "estimate", e);
    }
    return j;
}

/* Writes plan object j (NULL: out of memory) to `path` and frees it. */
static wf_status write_json(const char *path, cJSON *j)
{
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory writing plan file %s", path);
    wf_status st = wf_json_write_file(path, j);
    cJSON_Delete(j);
    return st;
}

/* The error of a plan string that does not parse, as a format error of the
 * file's "plan" field. */
static wf_status plan_string_error(const char *ctx)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    return wf_errorf(WF_FORMAT, "%s.plan: %s", ctx, msg);
}

cJSON *wf_plan_to_json(const wf_plan *p, const wf_plan_meta *meta, const cJSON *estimate)
{
    char text[512];
    wf_plan_format(p, text, sizeof text);
    cJSON *j = json_head(text, meta);
    if (!j)
        return NULL;
    return json_add_estimate(j, estimate);
}

/* The fields both kinds of plan file share: format, version, plan (into
 * *text), model, cluster, batch, estimate; first, j may have no key but
 * those of `keys` (NULL-terminated). */
static wf_status read_common(const cJSON *j, const char *ctx, const char *const *keys,
                             const char **text, wf_plan_meta *meta)
{
    const char *fmt = NULL, *model = "", *cluster = "";
    int64_t version = 0, batch = 0;
    wf_status st = wf_json_check_keys(j, ctx, keys);
    if (st != WF_OK)
        return st;
    if ((st = wf_json_get_str(j, ctx, "format", 1, &fmt)) != WF_OK)
        return st;
    if (strcmp(fmt, PLAN_FORMAT) != 0)
        return wf_errorf(WF_FORMAT, "%s.format: \"%s\", expected \"%s\"", ctx, fmt, PLAN_FORMAT);
    if ((st = wf_json_get_int(j, ctx, "version", 1, 1, 1000, &version)) != WF_OK)
        return st;
    if (version != PLAN_VERSION)
        return wf_errorf(WF_FORMAT, "%s.version: %lld, this weft reads version %d", ctx,
                         (long long)version, PLAN_VERSION);
    if ((st = wf_json_get_str(j, ctx, "plan", 1, text)) != WF_OK ||
        (st = wf_json_get_str(j, ctx, "model", 0, &model)) != WF_OK ||
        (st = wf_json_get_str(j, ctx, "cluster", 0, &cluster)) != WF_OK ||
        (st = wf_json_get_int(j, ctx, "batch", 0, 1, WF_MAX_BATCH, &batch)) != WF_OK)
        return st;
    const cJSON *est = cJSON_GetObjectItemCaseSensitive(j, "estimate");
    if (est && !cJSON_IsObject(est))
        return wf_errorf(WF_FORMAT, "%s.estimate: expected an object", ctx);
    if (!strchr(*text, '='))
        return wf_errorf(WF_FORMAT, "%s.plan: '%s' is not a plan string (key=value pairs)", ctx,
                         *text);
    if (meta) {
        memset(meta, 0, sizeof *meta);
        if (strlen(model) >= sizeof meta->model || strlen(cluster) >= sizeof meta->cluster)
            return wf_errorf(WF_FORMAT, "%s: model or cluster name longer than %zu characters", ctx,
                             sizeof meta->model - 1);
        snprintf(meta->model, sizeof meta->model, "%s", model);
        snprintf(meta->cluster, sizeof meta->cluster, "%s", cluster);
        meta->batch = batch;
    }
    return WF_OK;
}

static wf_status oplevel_refused(const char *ctx)
{
    return wf_errorf(WF_INVAL, "%s is an op-level plan (per-op layouts): this command takes "
                               "whole-model plans (dp=..,tp=..,pp=..); check it with `weft plan "
                               "--verify %s --model M --cluster C --batch B`", ctx, ctx);
}

wf_status wf_plan_from_json(const cJSON *j, const char *ctx, wf_plan *out, wf_plan_meta *meta)
{
    if (cJSON_GetObjectItemCaseSensitive(j, "layouts"))
        return oplevel_refused(ctx);
    static const char *const keys[] = {"format", "version", "plan",     "model",
                                       "cluster", "batch",  "estimate", NULL};
    const char *text = NULL;
    wf_status st = read_common(j, ctx, keys, &text, meta);
    if (st != WF_OK)
        return st;
    if ((st = parse_string(text, out)) != WF_OK)
        return plan_string_error(ctx);
    return WF_OK;
}

wf_status wf_plan_read_file(const char *path, wf_plan *out, wf_plan_meta *meta)
{
    int is_oplevel = 0;
    return wf_plan_read_file_any(path, out, NULL, meta, &is_oplevel);
}

wf_status wf_plan_read_file_any(const char *path, wf_plan *whole, wf_layout *ol,
                                wf_plan_meta *meta, int *is_oplevel)
{
    cJSON *j = NULL;
    *is_oplevel = 0;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    if (cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "layouts")) {
        *is_oplevel = 1;
        st = ol ? wf_layout_from_json(j, path, ol, meta) : oplevel_refused(path);
    } else {
        st = wf_plan_from_json(j, path, whole, meta);
    }
    cJSON_Delete(j);
    return st;
}

int wf_plan_is_oplevel_file(const char *text)
{
    if (!text || strchr(text, '=') || access(text, R_OK) != 0)
        return 0;
    cJSON *j = NULL;
    int yes = 0;
    if (wf_json_read_file(text, &j) == WF_OK)
        yes = cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "layouts") != NULL;
    cJSON_Delete(j);
    wf_clear_error(); /* a file that does not read is the caller's to report */
    return yes;
}

wf_status wf_plan_write_file(const char *path, const wf_plan *p, const wf_plan_meta *meta,
                             const cJSON *estimate)
{
    cJSON *j = wf_plan_to_json(p, meta, estimate);
    return write_json(path, j);
}

/* ---- op-level plans ------------------------------------------------------------------ */

void wf_layout_init(wf_layout *p)
{
    memset(p, 0, sizeof *p);
    p->pp = 1;
    p->micro_batches = 1;
}

static void free_strs(char **v, int n)
{
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void wf_layout_free(wf_layout *p)
{
    free_strs(p->op, p->nlayouts);
    free_strs(p->sig, p->nlayouts);
    free_strs(p->tensor, p->nstorage);
    free_strs(p->layout, p->nstorage);
    free(p->storage_stage);
    free_strs(p->stage_first, p->pp);
    wf_layout_init(p);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

wf_status wf_layout_set(wf_layout *p, const char *mesh, int pp, int64_t micro_batches)
{
    if (!mesh || !*mesh || strlen(mesh) >= sizeof p->mesh)
        return wf_errorf(WF_INVAL, "op-level plan: mesh '%s' is empty or longer than %zu characters",
                         mesh ? mesh : "", sizeof p->mesh - 1);
    if (pp < 1 || pp > 4096)
        return wf_errorf(WF_INVAL, "op-level plan: pp=%d outside [1, 4096]", pp);
    if (micro_batches < 1)
        return wf_errorf(WF_INVAL, "op-level plan: micro_batches=%lld must be >= 1",
                         (long long)micro_batches);
    char **stages = calloc((size_t)pp, sizeof *stages);
    if (!stages)
        return wf_errorf(WF_NOMEM, "op-level plan: out of memory");
    free_strs(p->stage_first, p->pp);
    p->stage_first = stages;
    snprintf(p->mesh, sizeof p->mesh, "%s", mesh);
    p->pp = pp;
    p->micro_batches = micro_batches;
    return WF_OK;
}

/* Appends (a, b) to the parallel arrays va, vb of *n entries (capacity *cap),
 * and the stage to vs when given (names are unique per stage). */
static wf_status push_pair(char ***va, char ***vb, int **vs, int stage, int *n, int *cap,
                           const char *a, const char *b, const char *what)
{
    for (int i = 0; i < *n; i++)
        if (strcmp((*va)[i], a) == 0 && (!vs || (*vs)[i] == stage))
            return wf_errorf(WF_INVAL, "op-level plan: %s '%s' appears twice", what, a);
    if (*n == *cap) {
        /* Three arrays of one capacity: each grows from a copy of it. */
        int ca = *cap, cb = *cap, cs = *cap;
        if (wf_grow(va, &ca, (int64_t)*n + 1, sizeof **va, 64) != 0 ||
            wf_grow(vb, &cb, (int64_t)*n + 1, sizeof **vb, 64) != 0 ||
            (vs && wf_grow(vs, &cs, (int64_t)*n + 1, sizeof **vs, 64) != 0))
            return wf_errorf(WF_NOMEM, "op-level plan: out of memory");
        *cap = ca;
    }
    if (vs)
        (*vs)[*n] = stage;
    char *da = dup_str(a), *db = dup_str(b);
    if (!da || !db) {
        free(da);
        free(db);
        return wf_errorf(WF_NOMEM, "op-level plan: out of memory");
    }
    (*va)[*n] = da;
    (*vb)[*n] = db;
    (*n)++;
    return WF_OK;
}

wf_status wf_layout_add_sig(wf_layout *p, const char *op, const char *sig)
{
    return push_pair(&p->op, &p->sig, NULL, 0, &p->nlayouts, &p->cap_layouts, op, sig, "op");
}

wf_status wf_layout_add_storage(wf_layout *p, int stage, const char *tensor,
                                const char *layout)
{
    if (stage < 0 || stage >= p->pp)
        return wf_errorf(WF_INVAL, "op-level plan: storage of '%s' in stage %d outside [0, %d)",
                         tensor, stage, p->pp);
    return push_pair(&p->tensor, &p->layout, &p->storage_stage, stage, &p->nstorage,
                     &p->cap_storage, tensor, layout, "tensor");
}

wf_status wf_layout_set_stage(wf_layout *p, int s, const char *first_op)
{
    if (s < 0 || s >= p->pp || !p->stage_first)
        return wf_errorf(WF_INVAL, "op-level plan: stage %d outside [0, %d)", s, p->pp);
    char *d = dup_str(first_op);
    if (!d)
        return wf_errorf(WF_NOMEM, "op-level plan: out of memory");
    free(p->stage_first[s]);
    p->stage_first[s] = d;
    return WF_OK;
}

const char *wf_layout_sig_of(const wf_layout *p, const char *op)
{
    for (int i = 0; i < p->nlayouts; i++)
        if (strcmp(p->op[i], op) == 0)
            return p->sig[i];
    return NULL;
}

/* The keys an op-level plan's layouts say (mesh, stages, micro-batches). */
static int layout_key(const char *k, size_t n)
{
    for (int i = 0; i < NKEYS; i++)
        if (PLAN_KEY_TABLE[i].layout && strlen(PLAN_KEY_TABLE[i].name) == n && strncmp(PLAN_KEY_TABLE[i].name, k, n) == 0)
            return 1;
    return 0;
}

wf_status wf_layout_set_keys(wf_layout *p, const wf_plan *keys)
{
    char text[512];
    wf_plan_format(keys, text, sizeof text);
    size_t n = 0;
    p->keys[0] = 0;
    for (const char *k = text; *k;) {
        const char *end = strchr(k, ',');
        size_t len = end ? (size_t)(end - k) : strlen(k);
        const char *eq = memchr(k, '=', len);
        if (eq && !layout_key(k, (size_t)(eq - k))) {
            if (n + len + 2 > sizeof p->keys)
                return wf_errorf(WF_INVAL, "op-level plan: keys '%s' too long", text);
            n += (size_t)snprintf(p->keys + n, sizeof p->keys - n, "%s%.*s", n ? "," : "", (int)len, k);
        }
        k += len + (end ? 1 : 0);
    }
    return WF_OK;
}

wf_status wf_layout_keys(const wf_layout *p, wf_plan *out)
{
    wf_plan_default(out);
    for (const char *k = p->keys; *k;) {
        const char *end = strchr(k, ',');
        size_t len = end ? (size_t)(end - k) : strlen(k);
        const char *eq = memchr(k, '=', len);
        if (eq && layout_key(k, (size_t)(eq - k)))
            return wf_errorf(WF_INVAL, "op-level plan keys '%s': %.*s is the layouts' (the mesh, stages and "
                                       "micro-batches say it)", p->keys, (int)(eq - k), k);
        k += len + (end ? 1 : 0);
    }
    if (!p->keys[0])
        return WF_OK;
    wf_status st = wf_plan_parse(p->keys, out);
    if (st != WF_OK)
        return st;
    return WF_OK;
}

int wf_layout_format(const wf_layout *p, char *buf, size_t cap)
{
    return snprintf(buf, cap, "mesh=%s,pp=%d,micro_batches=%lld", p->mesh, p->pp,
                    (long long)p->micro_batches);
}

cJSON *wf_layout_to_json(const wf_layout *p, const wf_plan_meta *meta,
                         const cJSON *estimate)
{
    char text[512];
    wf_layout_format(p, text, sizeof text);
    cJSON *j = json_head(text, meta);
    if (!j)
        return NULL;
    if (p->keys[0])
        cJSON_AddStringToObject(j, "keys", p->keys);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (int s = 0; st && s < p->pp; s++)
        cJSON_AddItemToArray(st, cJSON_CreateString(p->stage_first[s] ? p->stage_first[s] : ""));
    cJSON *lay = cJSON_AddObjectToObject(j, "layouts");
    for (int i = 0; lay && i < p->nlayouts; i++)
        cJSON_AddStringToObject(lay, p->op[i], p->sig[i]);
    if (p->nstorage > 0) {
        cJSON *sto = cJSON_AddArrayToObject(j, "storage");
        for (int s = 0; sto && s < p->pp; s++) {
            cJSON *o = cJSON_CreateObject();
            if (!o)
                break;
            for (int i = 0; i < p->nstorage; i++)
                if (p->storage_stage[i] == s)
                    cJSON_AddStringToObject(o, p->tensor[i], p->layout[i]);
            cJSON_AddItemToArray(sto, o);
        }
    }
    return json_add_estimate(j, estimate);
}

/* The op-level plan string "mesh=8x8,pp=2,micro_batches=8". */
static wf_status parse_oplevel_string(const char *text, wf_layout *out)
{
    wf_spec s;
    wf_status st = wf_spec_parse(text, &s);
    if (st != WF_OK)
        return st;
    const char *mesh = NULL;
    int64_t pp = 1, micro = 1;
    if (s.name[0] || wf_spec_get_str(&s, "mesh", &mesh) != 1)
        return wf_errorf(WF_INVAL, "op-level plan '%s': expected mesh=..,pp=..,micro_batches=..",
                         text);
    int r;
    if ((r = wf_spec_get_int(&s, "pp", 1, 4096, &pp)) < 0 ||
        (r = wf_spec_get_int(&s, "micro_batches", 1, WF_MAX_BATCH, &micro)) < 0)
        return (wf_status)r;
    if ((st = wf_spec_check_unused(&s, "op-level plan", "mesh, pp, micro_batches")) != WF_OK)
        return st;
    return wf_layout_set(out, mesh, (int)pp, micro);
}

/* An object of name -> string pairs (ctx.key), appended as layouts, or as
 * storage of `stage` when stage >= 0. */
static wf_status read_pairs(const cJSON *o, const char *ctx, const char *key, int stage,
                            wf_layout *out)
{
    if (!cJSON_IsObject(o))
        return wf_errorf(WF_FORMAT, "%s.%s: expected an object of name: \"layout\" pairs", ctx, key);
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        if (!cJSON_IsString(it))
            return wf_errorf(WF_FORMAT, "%s.%s.%s: expected a string", ctx, key, it->string);
        wf_status st = stage < 0 ? wf_layout_add_sig(out, it->string, it->valuestring)
                                 : wf_layout_add_storage(out, stage, it->string,
                                                               it->valuestring);
        if (st != WF_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", wf_last_error());
            return wf_errorf(st == WF_NOMEM ? st : WF_FORMAT, "%s.%s: %s", ctx, key, msg);
        }
    }
    return WF_OK;
}

wf_status wf_layout_from_json(const cJSON *j, const char *ctx, wf_layout *out,
                              wf_plan_meta *meta)
{
    static const char *const keys[] = {"format",   "version", "plan",    "model",   "cluster",
                                       "batch",    "estimate", "stages", "layouts", "storage",
                                       "keys",     NULL};
    wf_layout_free(out);
    const char *text = NULL;
    wf_status st = read_common(j, ctx, keys, &text, meta);
    if (st != WF_OK)
        return st;
    if ((st = parse_oplevel_string(text, out)) != WF_OK)
        return plan_string_error(ctx);
    const cJSON *kj = cJSON_GetObjectItemCaseSensitive(j, "keys");
    if (kj) {
        if (!cJSON_IsString(kj) || strlen(kj->valuestring) >= sizeof out->keys)
            return wf_errorf(WF_FORMAT, "%s.keys: expected a plan string of the keys that are not layouts "
                                        "(\"recompute=selective,zero=1\")", ctx);
        snprintf(out->keys, sizeof out->keys, "%s", kj->valuestring);
        wf_plan kp;
        if ((st = wf_layout_keys(out, &kp)) != WF_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", wf_last_error());
            return wf_errorf(WF_FORMAT, "%s.keys: %s", ctx, msg);
        }
    }
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    if (stages) {
        if (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) != out->pp)
            return wf_errorf(WF_FORMAT, "%s.stages: expected an array of %d op names (pp=%d)", ctx,
                             out->pp, out->pp);
        int s = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, stages)
        {
            if (!cJSON_IsString(it) || !it->valuestring[0])
                return wf_errorf(WF_FORMAT, "%s.stages[%d]: expected an op name", ctx, s);
            if ((st = wf_layout_set_stage(out, s++, it->valuestring)) != WF_OK)
                return st;
        }
    } else if (out->pp > 1) {
        return wf_errorf(WF_FORMAT, "%s: pp=%d needs \"stages\" (the first op of each)", ctx,
                         out->pp);
    }
    if ((st = read_pairs(cJSON_GetObjectItemCaseSensitive(j, "layouts"), ctx, "layouts", -1,
                         out)) != WF_OK)
        return st;
    if (out->nlayouts == 0)
        return wf_errorf(WF_FORMAT, "%s.layouts: empty", ctx);
    const cJSON *sto = cJSON_GetObjectItemCaseSensitive(j, "storage");
    if (sto) {
        if (!cJSON_IsArray(sto) || cJSON_GetArraySize(sto) != out->pp)
            return wf_errorf(WF_FORMAT, "%s.storage: expected an array of %d objects (one per "
                                        "stage)", ctx, out->pp);
        int s = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, sto)
        {
            char key[32];
            snprintf(key, sizeof key, "storage[%d]", s);
            if ((st = read_pairs(it, ctx, key, s++, out)) != WF_OK)
                return st;
        }
    }
    return WF_OK;
}

wf_status wf_layout_write_file(const char *path, const wf_layout *p,
                               const wf_plan_meta *meta, const cJSON *estimate)
{
    cJSON *j = wf_layout_to_json(p, meta, estimate);
    return write_json(path, j);
}
