/* Fuzzes the plan keys (every key of PLAN_KEYS, with the per-stage
 * recompute and rc_layers lists, sw=, ep/etp/imb/epo added after the first
 * campaign) with values chosen where parsers and arithmetic break: 0, -1, 1,
 * powers of two up to 2^63, 2^31, 2^32 + 1, signs, spaces, per-stage lists
 * and control bytes. Each input is a sequence of (key, value) byte pairs
 * assembled into a plan string; a parsed plan is estimated, lowered, printed
 * back and re-parsed (the canonical form must parse and print the same), and
 * simulated when it is small. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/cost.h"
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/search.h"
#include "weft/sim.h"

static const char *const KEYS[] = {"dp",  "tp",  "pp",  "mbs",  "vpp",  "recompute", "rc_layers", "sp",
                                   "zero", "overlap", "pipe", "comm", "cp", "ep",        "etp",       "imb",
                                   "epo", "fp8", "attn", "grad", "loss", "sw",         "mesh",      "DP"};
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const char *const VALUES[] = {
    "0", "-1", "1", "2", "3", "4", "8", "16", "65536", "16777216", "2147483648", "4294967297",
    "9223372036854775808", "18446744073709551617", "+8", " 8", "8 ", "0x10", "1e3", "2.5", "", "all",
    "full", "selective", "none", "full*3", "full/none", "selective*2/full", "full*65535", "65534", "65534/1",
    "all/0", "1/2/3/4", "2*4", "1f1b", "gpipe", "ddp", "dear", "auto", "zero:4", "megatron-core", "deepspeed",
    "fsdp", "weft", "bf16", "fp16", "fp32", "fp8", "flash", "unfused", "1.5", "64", "64.0001", "\x01", "\x1b[2J"};
#define NVALUES ((int)(sizeof VALUES / sizeof VALUES[0]))

static const char *const MODELS[] = {"gpt-tiny", "moe-tiny", "llama:layers=8,hidden=256,heads=8,kv_heads=2,ffn=512"};

static void check(const wf_plan *p, const char *model)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup("dgx-a100:nodes=2", &c) != WF_OK)
        return;
    const int64_t batch = 64;
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    int ok = 0;
    if (wf_cost_ctx_create(&m, &c, &ctx) == WF_OK)
        ok = wf_estimate_plan(ctx, p, batch, &e) == WF_OK;
    wf_cost_ctx_free(ctx);
    wf_layout pl;
    wf_layout_init(&pl);
    (void)wf_plan_lower(&m, &c, p, batch, &pl);
    wf_layout_free(&pl);
    if (ok && (int64_t)p->dp * p->tp * p->pp * p->cp <= 16) {
        wf_sim_plan_opts o;
        memset(&o, 0, sizeof o);
        o.detail = 2;
        wf_sim_plan_result r;
        (void)wf_sim_plan(&m, &c, p, batch, &o, &r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[1024];
    size_t n = 0;
    text[0] = 0;
    for (size_t i = 0; i + 1 < size && n < sizeof text - 64; i += 2) {
        const char *k = KEYS[data[i] % NKEYS];
        const char *v = VALUES[data[i + 1] % NVALUES];
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%s=%s", n ? "," : "", k, v);
    }
    wf_plan p;
    if (wf_plan_parse(text, &p) == WF_OK) {
        char back[512], again[512];
        if (wf_plan_format(&p, back, sizeof back) > 0) {
            wf_plan q;
            if (wf_plan_parse(back, &q) != WF_OK || wf_plan_format(&q, again, sizeof again) <= 0 ||
                strcmp(back, again) != 0) {
                fprintf(stderr, "plan '%s' prints as '%s', which %s\n", text, back,
                        wf_plan_parse(back, &q) != WF_OK ? wf_last_error() : "prints differently");
                abort();
            }
        }
        for (int i = 0; i < 3; i++)
            check(&p, MODELS[i]);
    }
    wf_clear_error();
    return 0;
}
