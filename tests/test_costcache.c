/* The cost model's section cache: a plan estimated in a context that has
 * costed many other plans (its cache full of other variants: profiles,
 * gradient and loss dtypes, overlap, ZeRO, attention kernels, FP8, tp, sp,
 * recomputation, pipelining) gives exactly the estimate of a fresh context
 * (the reference: nothing cached). The cache compares its keys whole
 * (wf_cost_key), so no two variants can share an entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cost/cost-impl.h"

static const char *const PLANS[] = {
    "dp=4,tp=2,pp=1,mbs=1",
    "dp=4,tp=2,pp=1,mbs=1,grad=fp32",
    "dp=4,tp=2,pp=1,mbs=1,loss=bf16",
    "dp=4,tp=2,pp=1,mbs=1,overlap=0",
    "dp=4,tp=2,pp=1,mbs=1,zero=1",
    "dp=4,tp=2,pp=1,mbs=1,zero=3,sw=fsdp",
    "dp=4,tp=2,pp=1,mbs=1,sw=megatron-2021",
    "dp=4,tp=2,pp=1,mbs=1,sw=megatron-2022",
    "dp=4,tp=2,pp=1,mbs=1,sw=deepspeed,zero=2",
    "dp=4,tp=2,pp=1,mbs=1,sw=weft",
    "dp=8,tp=1,pp=1,mbs=1,sw=pytorch",
    "dp=4,tp=2,pp=1,mbs=1,attn=unfused",
    "dp=4,tp=2,pp=1,mbs=1,fp8=1",
    "dp=4,tp=2,pp=1,mbs=1,sp=1",
    "dp=4,tp=2,pp=1,mbs=2,recompute=selective",
    "dp=2,tp=2,pp=2,mbs=1,recompute=full",
    "dp=2,tp=2,pp=2,mbs=1,vpp=2,sw=megatron-2021",
    "dp=2,tp=2,pp=2,mbs=1,sw=deepspeed",
    "dp=8,tp=1,pp=1,mbs=1,grad=bf16,sw=fsdp",
    "dp=2,tp=4,pp=1,mbs=1,sp=1,fp8=1,grad=fp32,loss=fp32",
};
/* Models without transformer layers run no tensor parallelism here. */
static const char *const GENERIC_PLANS[] = {
    "dp=8,pp=1,mbs=8",          "dp=8,pp=1,mbs=8,grad=fp32",   "dp=8,pp=1,mbs=8,overlap=0",
    "dp=8,pp=1,mbs=8,zero=1",   "dp=8,pp=1,mbs=8,sw=fsdp",     "dp=8,pp=1,mbs=8,sw=pytorch",
    "dp=8,pp=1,mbs=8,sw=weft",  "dp=8,pp=1,mbs=4,sw=deepspeed,zero=2",
    "dp=4,pp=2,mbs=4",          "dp=4,pp=2,mbs=2,recompute=full", "dp=2,pp=4,mbs=2,sw=megatron-2021",
    "dp=8,pp=1,mbs=8,sw=megatron-2022",
};
#define COUNT(a) ((int)(sizeof(a) / sizeof(a)[0]))

static wf_status estimate_in(wf_cost_ctx *ctx, const char *text, wf_estimate *e)
{
    wf_plan p;
    wf_status st = wf_plan_parse(text, &p);
    if (st != WF_OK)
        return st;
    return wf_estimate_plan(ctx, &p, 64, e);
}

static void check_model(const char *model, const char *cluster, const char *const *plans, int n)
{
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    wf_cost_ctx *shared = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &shared), WF_OK);
    int compared = 0;
    /* Twice over, forward then backward, so that every plan follows others. */
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < n; k++) {
            const char *text = plans[round ? n - 1 - k : k];
            wf_cost_ctx *fresh = NULL;
            assert_int_equal(wf_cost_ctx_create(&m, &c, &fresh), WF_OK);
            wf_estimate a, b;
            wf_status sa = estimate_in(shared, text, &a), sb = estimate_in(fresh, text, &b);
            wf_cost_ctx_free(fresh);
            if (sa != sb)
                fail_msg("%s %s: status %d with a used cache, %d fresh", model, text, sa, sb);
            if (sa != WF_OK)
                continue;
            if (a.iteration_time_s != b.iteration_time_s || a.memory_per_device_bytes != b.memory_per_device_bytes ||
                a.mem_activation_bytes != b.mem_activation_bytes)
                fail_msg("%s %s: %.17g s %.17g B with a used cache, %.17g s %.17g B fresh", model, text,
                         a.iteration_time_s, a.memory_per_device_bytes, b.iteration_time_s,
                         b.memory_per_device_bytes);
            compared++;
        }
    wf_cost_ctx_free(shared);
    /* Every plan is valid for its model: the test compares estimates, not errors. */
    if (compared != 2 * n)
        fail_msg("%s: %d of %d estimates compared (%s)", model, compared, 2 * n, wf_last_error());
}

static void test_cache_transformer(void **state)
{
    (void)state;
    check_model("gpt3-1.3b", "dgx-h100", PLANS, COUNT(PLANS));
}

static void test_cache_llama(void **state)
{
    (void)state;
    check_model("llama2-7b", "dgx-h100-kernels", PLANS, COUNT(PLANS));
}

static void test_cache_generic(void **state)
{
    (void)state;
    check_model("resnet50", "v100-ib100", GENERIC_PLANS, COUNT(GENERIC_PLANS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_transformer),
        cmocka_unit_test(test_cache_llama),
        cmocka_unit_test(test_cache_generic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
