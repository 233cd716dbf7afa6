/* Fuzzes the plan readers: plan strings ("dp=2,tp=2,..."), whole-model plan
 * files and op-level plan files, each then checked against a small model and
 * cluster as `weft estimate` and `weft plan --verify` do (the whole-model
 * ones also lowered to their op-level form). Byte 0 picks the
 * reader (even: string, odd: file). */
#include "fuzz.h"

#include <stdlib.h>

#include "weft/cost.h"
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/search.h"

static void check_whole(const wf_plan *p, const char *model)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup("dgx-a100:nodes=1", &c) != WF_OK)
        return;
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    if (wf_cost_ctx_create(&m, &c, &ctx) == WF_OK)
        (void)wf_estimate_plan(ctx, p, 16, &e);
    wf_cost_ctx_free(ctx);
    /* Its lowering to the op-level form (weft plan --verify PLAN). */
    wf_layout pl;
    wf_layout_init(&pl);
    (void)wf_plan_lower(&m, &c, p, 16, &pl);
    wf_layout_free(&pl);
}

static void check_oplevel(const wf_layout *pl)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup("mlp-tiny", &m) != WF_OK || wf_cluster_lookup("dgx-a100:nodes=1", &c) != WF_OK)
        return;
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    wf_search_opplan_result r;
    (void)wf_search_opplan_verify(&m, &c, 16, pl, &o, &r);
    wf_search_opplan_result_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    wf_plan whole;
    if (data[0] % 2 == 0) {
        char *text = fuzz_strndup(data + 1, size - 1);
        if (text && wf_plan_parse(text, &whole) == WF_OK) {
            check_whole(&whole, "gpt-tiny");
            check_whole(&whole, "mlp-tiny");
            check_whole(&whole, "moe-tiny");
        }
        free(text);
    } else {
        const char *path = fuzz_write_temp(0, ".json", data + 1, size - 1);
        wf_layout pl;
        wf_layout_init(&pl);
        wf_plan_meta meta;
        int is_ol = 0;
        if (path && wf_plan_read_file_any(path, &whole, &pl, &meta, &is_ol) == WF_OK) {
            if (is_ol)
                check_oplevel(&pl);
            else
                check_whole(&whole, "gpt-tiny");
        }
        wf_layout_free(&pl);
    }
    wf_clear_error();
    return 0;
}
