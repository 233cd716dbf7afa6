/* The model of PyTorch's CUDA caching allocator (src/cost/alloc.c) against
 * sequences worked out by hand from c10/cuda/CUDACachingAllocator.cpp at
 * 001074d25084fdb87a799823e395a50f5ec044d3: rounding to 512 bytes, the
 * small pool's 2 MiB segments, 20 MiB segments shared by requests under
 * 10 MiB, larger ones rounded to 2 MiB, best fit, splitting only when more
 * than 1 MiB remains in the large pool, merging of free neighbours, the
 * release of cached whole segments and the retry, and the out-of-memory
 * error. Then sw=pytorch's replayed step (src/cost/alloc_step.c): its
 * persistent state in closed form, its steady state, the estimate and the
 * simulator agreeing with it, and the plain-PyTorch steps measured on an
 * H100 (tests/data/h100-pytorch-steps-2026-11-26.json): the configuration
 * that ran out of memory is predicted not to fit, the others to fit, each
 * within 10% of the measured peak reserve plus the CUDA context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/alloc.h"
#include "weft/sim.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define GIB (1024.0 * 1024.0 * 1024.0)
#define REL(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * fabs((double)(b)))

static void test_sizes(void **state)
{
    (void)state;
    assert_true(wf_alloc_round(1) == 512);
    assert_true(wf_alloc_round(512) == 512);
    assert_true(wf_alloc_round(513) == 1024);
    assert_true(wf_alloc_segment_size(512) == 2 * MIB);
    assert_true(wf_alloc_segment_size(1 * MIB) == 2 * MIB);
    assert_true(wf_alloc_segment_size(1 * MIB + 512) == 20 * MIB);
    assert_true(wf_alloc_segment_size(10 * MIB - 512) == 20 * MIB);
    assert_true(wf_alloc_segment_size(10 * MIB) == 10 * MIB);
    assert_true(wf_alloc_segment_size(10 * MIB + 512) == 12 * MIB);
}

/* Small requests pack into 2 MiB segments, split down to 512 bytes. */
static void test_small_pool(void **state)
{
    (void)state;
    wf_alloc *a = wf_alloc_new(0);
    int64_t h[5];
    for (int i = 0; i < 4; i++)
        h[i] = wf_alloc_malloc(a, 512 * KIB);
    const wf_alloc_stats *s = wf_alloc_stats_of(a);
    assert_true(s->reserved == 2 * MIB && s->allocated == 2 * MIB && s->segments == 1);
    h[4] = wf_alloc_malloc(a, 100); /* rounds to 512 in a new segment */
    assert_true(s->reserved == 4 * MIB && s->allocated == 2 * MIB + 512 && s->segments == 2);
    /* freeing two neighbours merges them: a 1 MiB request reuses the hole */
    wf_alloc_release(a, h[1]);
    wf_alloc_release(a, h[2]);
    int64_t x = wf_alloc_malloc(a, 1 * MIB);
    assert_true(x >= 0 && wf_alloc_block_size(a, x) == 1 * MIB);
    assert_true(s->reserved == 4 * MIB && s->allocated == 2 * MIB + 512 && s->segments == 2);
    (void)h[0];
    wf_alloc_free_all(a);
}

/* Requests between 1 and 10 MiB share 20 MiB segments; a remainder of at
 * most 1 MiB is not split off and counts as allocated. */
static void test_large_buffer(void **state)
{
    (void)state;
    wf_alloc *a = wf_alloc_new(0);
    const wf_alloc_stats *s = wf_alloc_stats_of(a);
    int64_t x = wf_alloc_malloc(a, 6 * MIB), y = wf_alloc_malloc(a, 6 * MIB), z = wf_alloc_malloc(a, 6 * MIB);
    assert_true(s->reserved == 20 * MIB && s->allocated == 18 * MIB && s->segments == 1);
    int64_t w = wf_alloc_malloc(a, 3 * MIB / 2); /* the 2 MiB remainder, whole */
    assert_true(wf_alloc_block_size(a, w) == 2 * MIB);
    assert_true(s->reserved == 20 * MIB && s->allocated == 20 * MIB);
    /* free everything: one 20 MiB block again, which a 19 MiB request takes
     * whole (1 MiB would remain: not split) */
    wf_alloc_release(a, y);
    wf_alloc_release(a, x);
    wf_alloc_release(a, w);
    wf_alloc_release(a, z);
    assert_true(s->allocated == 0 && s->reserved == 20 * MIB);
    int64_t big = wf_alloc_malloc(a, 19 * MIB);
    assert_true(wf_alloc_block_size(a, big) == 20 * MIB && s->reserved == 20 * MIB && s->device_allocs == 1);
    assert_true(s->peak_allocated == 20 * MIB && s->peak_reserved == 20 * MIB);
    wf_alloc_free_all(a);
}

/* Best fit: the smallest cached block that holds the request. A freed
 * block without free neighbours stays a hole (fragmentation). */
static void test_best_fit(void **state)
{
    (void)state;
    wf_alloc *a = wf_alloc_new(0);
    const wf_alloc_stats *s = wf_alloc_stats_of(a);
    int64_t p = wf_alloc_malloc(a, 30 * MIB), q = wf_alloc_malloc(a, 12 * MIB), r = wf_alloc_malloc(a, 24 * MIB);
    assert_true(s->reserved == 66 * MIB);
    wf_alloc_release(a, p);
    wf_alloc_release(a, r);
    /* 22 MiB: the 24 MiB block (best), split? 2 MiB > 1 MiB remains: yes */
    int64_t t = wf_alloc_malloc(a, 22 * MIB);
    assert_true(wf_alloc_block_size(a, t) == 22 * MIB && s->reserved == 66 * MIB);
    /* 26 MiB: only the 30 MiB block holds it */
    int64_t u = wf_alloc_malloc(a, 26 * MIB);
    assert_true(wf_alloc_block_size(a, u) == 26 * MIB && s->reserved == 66 * MIB);
    /* 3 MiB: the 2 MiB remainder is too small, the 4 MiB one holds it whole
     * (1 MiB would remain) */
    int64_t v = wf_alloc_malloc(a, 3 * MIB);
    assert_true(wf_alloc_block_size(a, v) == 4 * MIB && s->reserved == 66 * MIB);
    assert_true(s->allocated == 12 * MIB + 22 * MIB + 26 * MIB + 4 * MIB);
    (void)q;
    wf_alloc_free_all(a);
}

/* The device refuses beyond the capacity: cached whole segments are
 * released and the allocation retried; split segments stay. */
static void test_release_retry(void **state)
{
    (void)state;
    wf_alloc *a = wf_alloc_new(40 * MIB);
    const wf_alloc_stats *s = wf_alloc_stats_of(a);
    wf_alloc_release(a, wf_alloc_malloc(a, 30 * MIB)); /* cached */
    int64_t b = wf_alloc_malloc(a, 32 * MIB);           /* 30 + 32 > 40: release, retry */
    assert_true(b >= 0 && s->retries == 1 && s->device_frees == 1);
    assert_true(s->reserved == 32 * MIB && s->peak_reserved == 32 * MIB && s->ooms == 0);
    /* now a 6 MiB request takes a 20 MiB segment: 52 > 40, nothing cached
     * whole: out of memory, nothing changes */
    int64_t c = wf_alloc_malloc(a, 6 * MIB);
    assert_true(c == -1 && s->ooms == 1 && s->oom_request == 20 * MIB && s->oom_reserved == 32 * MIB);
    assert_true(s->reserved == 32 * MIB && s->allocated == 32 * MIB);
    wf_alloc_release(a, b);
    /* 36 MiB: the cached 32 MiB goes back first */
    int64_t d = wf_alloc_malloc(a, 36 * MIB);
    assert_true(d >= 0 && s->retries == 3 && s->reserved == 36 * MIB && s->device_frees == 2);
    /* a split segment is not released: 6 MiB from the cached 36 MiB block
     * (30 MiB remain free in it), then 32 MiB cannot be had */
    wf_alloc_release(a, d);
    int64_t e = wf_alloc_malloc(a, 6 * MIB);
    assert_true(e >= 0 && wf_alloc_block_size(a, e) == 6 * MIB && s->reserved == 36 * MIB);
    assert_true(wf_alloc_malloc(a, 32 * MIB) == -1 && s->ooms == 2 && s->reserved == 36 * MIB);
    assert_true(s->peak_reserved == 36 * MIB);
    wf_alloc_free_all(a);
}

static wf_cost_ctx *make_ctx(const char *model, const char *cluster)
{
    wf_model_config m;
    wf_cluster c;
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    return ctx;
}

static wf_plan use(wf_cost_ctx *ctx, const char *plan)
{
    wf_plan p;
    assert_int_equal(wf_plan_parse(plan, &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    return p;
}

/* The replayed step: persistent state 16 bytes per parameter (fp32 weight,
 * its bucket, two moments; each tensor rounded to 512 bytes); the peak
 * holds at least every layer's saved tensors; iteration 3 is the steady
 * state; the estimate and the simulator report the replay. */
static void test_step(void **state)
{
    (void)state;
    const char *model = "gpt2:dtype=bf16", *cluster = "dgx-h100:nodes=1";
    wf_cost_ctx *ctx = make_ctx(model, cluster);
    wf_plan p = use(ctx, "dp=1,mbs=8,sw=pytorch");
    wf_model_config m;
    double P = 0;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_model_params(&m, &P), WF_OK);
    wf_pt_step_memory r3, r4, r5;
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &p, 8, 3, 0, &r3), WF_OK);
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &p, 8, 4, 0, &r4), WF_OK);
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &p, 8, 5, 0, &r5), WF_OK);
    assert_true(r3.applies && r3.fits);
    /* 12 layers x 12 parameter tensors and 4 outside, and the buckets (one
     * of 1 MiB, then 25 MiB each): a block keeps at most 1 MiB it does not
     * use (a remainder of 1 MiB is not split off) */
    const double tensors = 12 * 12 + 4 + 2 + ceil(4 * P / (25.0 * MIB));
    const double Pscript = P + 50257.0 * 768; /* the script's untied head */
    assert_true(r3.persistent >= 16.0 * Pscript && r3.persistent <= 16.0 * Pscript + (tensors + 1) * (double)MIB);
    printf("gpt2 bf16 mbs 8: peak allocated %.4f GiB, reserved %.4f GiB (persistent %.4f)\n",
           r3.peak_allocated / GIB, r3.peak_reserved / GIB, r3.persistent / GIB);
    assert_true(r3.peak_reserved == r4.peak_reserved && r4.peak_reserved == r5.peak_reserved);
    /* a block handed out whole (an unsplit remainder) may move by one
     * iteration's reuse: well under a MiB */
    assert_true(fabs(r3.peak_allocated - r4.peak_allocated) < (double)MIB && r4.peak_allocated == r5.peak_allocated);
    assert_true(r3.peak_reserved >= r3.peak_allocated);
    /* At the end of the forward every layer keeps, per token of the 8 x 1024:
     * the fp32 residual at ln1 and ln2 (4 + 4 of h), the 16-bit casts of
     * ln1's output that wq and wkv each make (2 + 2) and their outputs (6,
     * q k v), SDPA's output, which proj reads as a view (2), fc1's 16-bit
     * input (2), gelu's input and fc2's (2 x 4h x 2): 38 h bytes (the
     * exported script has no dropout); the 16-bit weight copies. The script's
     * head is its own parameter: 16 bytes per element more than weft's tied
     * GPT-2. */
    const double tok = 8 * 1024, H = 768, L = 12;
    const double lin = 3 * H * H + H * H + 2 * 4 * H * H;
    double floor_bytes = 16 * (P + 50257 * H) + L * 38 * H * tok + 2 * (L * lin + 50257 * H);
    assert_true(r3.peak_allocated >= floor_bytes);
    /* and not much more: the loss's fp32 buffers (log-probabilities and two
     * gradients, 12 bytes per logit), the 16-bit logits of this step and the
     * last (4), the head's input cast and gradient: within 5% */
    double loss_bytes = 8 * 1024 * 50257.0 * 16;
    assert_true(r3.peak_allocated <= 1.05 * (floor_bytes + loss_bytes));
    /* the estimate and the simulator: the replay's peak reserve plus the
     * CUDA context */
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &p, 8, &e), WF_OK);
    double t = wf_cost_pytorch_memory(ctx, &p, 8);
    assert_true(REL(t, r3.peak_reserved + WF_PT_CONTEXT_BYTES, 1e-12));
    assert_true(REL(e.memory_per_device_bytes, t, 1e-9));
    assert_true(REL(e.mem_weights_bytes, 16 * P, 1e-12));
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    wf_sim_plan_result sr;
    assert_int_equal(wf_sim_plan(&m, &c, &p, 8, NULL, &sr), WF_OK);
    assert_true(REL(sr.peak_memory_bytes, t, 1e-6));
    /* a larger micro-batch needs more; checkpointing less, the whole block
     * less than the attention core alone, and each is steady too; unfused
     * attention keeps the bound */
    wf_pt_step_memory r16, f3, f5, s3;
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &p, 16, 3, 0, &r16), WF_OK);
    assert_true(r16.peak_reserved > r3.peak_reserved);
    wf_plan q = use(ctx, "dp=1,mbs=8,recompute=full,sw=pytorch");
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &q, 8, 3, 0, &f3), WF_OK);
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &q, 8, 5, 0, &f5), WF_OK);
    assert_true(f3.applies && f3.peak_reserved == f5.peak_reserved && fabs(f3.peak_allocated - f5.peak_allocated) < (double)MIB);
    /* the block keeps its fp32 input alone: at most 4 h bytes per token and layer */
    assert_true(f3.peak_allocated < r3.peak_allocated - L * 30 * H * tok);
    q = use(ctx, "dp=1,mbs=8,recompute=selective,sw=pytorch");
    assert_int_equal(wf_cost_pytorch_step_memory(ctx, &q, 8, 3, 0, &s3), WF_OK);
    assert_true(s3.applies && s3.peak_allocated < r3.peak_allocated && s3.peak_allocated > f3.peak_allocated);
    /* the estimate reports the replay under checkpointing too (the
     * simulator counts a recomputing layer's activations its own way, as
     * before the replay: its peak is not asserted here) */
    const char *rcp[] = {"dp=1,mbs=8,recompute=full,sw=pytorch", "dp=1,mbs=8,recompute=selective,sw=pytorch"};
    for (int k = 0; k < 2; k++) {
        q = use(ctx, rcp[k]);
        double tq = wf_cost_pytorch_memory(ctx, &q, 8);
        assert_true(tq > 16 * P);
        assert_int_equal(wf_estimate_plan(ctx, &q, 8, &e), WF_OK);
        assert_true(REL(e.memory_per_device_bytes, tq, 1e-9));
    }
    q = use(ctx, "dp=1,mbs=8,attn=unfused,sw=pytorch");
    assert_true(wf_cost_pytorch_memory(ctx, &q, 8) < 0);
    wf_cost_ctx_free(ctx);
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(x))
        fail_msg("steps file: missing string \"%s\"", k);
    return x->valuestring;
}

/* The H100's capacity is what CUDA reports, and the measured steps: the
 * one that ran out of memory does not fit, the others do. */
static void test_h100_steps(void **state)
{
    (void)state;
    const char *root = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s%stests/data/h100-pytorch-steps-2026-11-26.json", root ? root : "",
             root ? "/" : "");
    cJSON *j = NULL;
    if (wf_json_read_file(path, &j) != WF_OK)
        fail_msg("%s", wf_last_error());
    const char *cluster = "dgx-h100:nodes=1,devices_per_node=1";
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(j, "device_total_bytes");
    assert_true(cJSON_IsNumber(total));
    assert_true(c.dev.mem_bytes == total->valuedouble);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    assert_true(cJSON_IsArray(rows));
    int n = 0, ooms = 0;
    for (const cJSON *r = rows->child; r; r = r->next, n++) {
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(r, "memory");
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(mem, "oom");
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(mem, "reserved");
        const cJSON *batch = cJSON_GetObjectItemCaseSensitive(r, "batch");
        assert_true(cJSON_IsBool(oom) && cJSON_IsNumber(res) && cJSON_IsNumber(batch));
        wf_cost_ctx *ctx = make_ctx(str(r, "model"), cluster);
        wf_plan p;
        assert_int_equal(wf_plan_parse(str(r, "plan"), &p), WF_OK);
        wf_estimate e;
        if (wf_estimate_plan(ctx, &p, (int64_t)batch->valuedouble, &e) != WF_OK)
            fail_msg("%s: %s", str(r, "model"), wf_last_error());
        double meas = res->valuedouble + WF_PT_CONTEXT_BYTES;
        printf("%-20.20s b%-3d predicted %6.2f GiB %-8s measured reserved + context %6.2f GiB%s (%+.1f%%)\n",
               str(r, "model"), (int)batch->valuedouble, e.memory_per_device_bytes / GIB,
               e.fits ? "fits" : "no fit", meas / GIB, cJSON_IsTrue(oom) ? " at the OOM" : "",
               100.0 * (e.memory_per_device_bytes / meas - 1.0));
        if (cJSON_IsTrue(oom)) {
            ooms++;
            assert_false(e.fits);
        } else {
            assert_true(e.fits);
            assert_true(REL(e.memory_per_device_bytes, meas, 0.10));
        }
        wf_cost_ctx_free(ctx);
    }
    assert_int_equal(n, 8);
    assert_int_equal(ooms, 1);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),        cmocka_unit_test(test_small_pool), cmocka_unit_test(test_large_buffer),
        cmocka_unit_test(test_best_fit),     cmocka_unit_test(test_release_retry), cmocka_unit_test(test_step),
        cmocka_unit_test(test_h100_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
