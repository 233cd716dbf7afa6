/* sw=pytorch's time terms against closed forms: the alignment rule and the
 * alignment-1 fallback's time (src/cluster/gemm_align.c), checked by
 * simulating each lane's address; the exported script's eager chains
 * (src/cost/framework.c): RMSNorm's 28 + 92 bytes, rotary's 38 + 48 bytes
 * per element under autocast, autocast's casts, GQA's repeat, no dropout;
 * other profiles untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cost/cost-impl.h"
#include "weft/models.h"
#include "weft/plan.h"

#define REL(a, b, tol) (fabs((a) - (b)) <= (tol) * fabs(b))

static void test_align_rule(void **state)
{
    (void)state;
    assert_int_equal(wf_gemm_align_elems(WF_GEMM_HALF), 8);
    assert_int_equal(wf_gemm_align_elems(WF_GEMM_TF32), 4);
    assert_int_equal(wf_gemm_align_elems(WF_GEMM_FP8), 16);
    assert_int_equal(wf_gemm_align_elems(WF_GEMM_FP32), 1);
    wf_gemm_layout L[3];
    wf_gemm_linear_layouts(768, 50257, L); /* GPT-2's head */
    for (int i = 0; i < 3; i++) {
        assert_false(wf_gemm_layout_aligned(WF_GEMM_HALF, &L[i]));
        assert_true(wf_gemm_layout_aligned(WF_GEMM_FP32, &L[i]));
    }
    wf_gemm_linear_layouts(768, 50304, L); /* padded to a multiple of 128 (Megatron) */
    for (int i = 0; i < 3; i++)
        assert_true(wf_gemm_layout_aligned(WF_GEMM_HALF, &L[i]));
    wf_gemm_linear_layouts(1026, 4096, L); /* 1026 = 2 x 513: tf32 no, 16 bits no */
    assert_false(wf_gemm_layout_aligned(WF_GEMM_TF32, &L[0]));
    wf_gemm_linear_layouts(1028, 4096, L); /* 4 x 257: tf32 yes, 16 bits no */
    assert_true(wf_gemm_layout_aligned(WF_GEMM_TF32, &L[0]));
    assert_false(wf_gemm_layout_aligned(WF_GEMM_HALF, &L[0]));
}

/* Distinct 128-byte lines of one scalar warp load, lane by lane: `rows`
 * rows of leading dimension ld (16-bit), `lanes` lanes per row 16 bytes
 * apart, element v of each lane's vector; averaged over rows and v. */
static double lanes_lines(double ld, int rows, int lanes)
{
    double sum = 0;
    for (int r0 = 0; r0 < 128; r0++)
        for (int v = 0; v < 8; v++) {
            /* one instruction per row here (the rows' lines are distinct:
             * ld x 2 bytes > 128) */
            long long seen[64];
            int n = 0;
            for (int j = 0; j < lanes; j++) {
                long long a = (long long)r0 * (long long)ld * 2 + 16LL * j + 2LL * v;
                long long line = a / 128;
                int dup = 0;
                for (int q = 0; q < n; q++)
                    dup |= seen[q] == line;
                if (!dup)
                    seen[n++] = line;
            }
            sum += n;
        }
    return rows * sum / (128.0 * 8.0);
}

/* Lines of a warp store of 32 consecutive 16-bit elements, lane by lane. */
static double store_lines_lanes(double ld)
{
    double sum = 0;
    for (int r0 = 0; r0 < 128; r0++) {
        long long first = (long long)r0 * (long long)ld * 2, last = first + 63;
        sum += (double)(last / 128 - first / 128 + 1);
    }
    return sum / 128.0;
}

static double fallback_closed(const wf_device *d, double M, double N, double K, double la, double lb, double lc)
{
    static const double T[][2] = {{128, 128}, {256, 128}, {128, 256}};
    double best = HUGE_VAL;
    for (int i = 0; i < 3; i++) {
        double waves = ceil(ceil(M / T[i][0]) * ceil(N / T[i][1]) / d->sms);
        double t = waves * (K * (T[i][0] * la + T[i][1] * lb) / 32.0 + T[i][0] * T[i][1] / 32.0 * lc) / 1980e6;
        best = t < best ? t : best;
    }
    return best;
}

static void test_align1_time(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-h100:nodes=1,devices_per_node=1", &c), WF_OK);
    const wf_device *d = &c.dev;
    const double T = 16384, H = 768, V = 50257;
    wf_gemm_layout L[3];
    wf_gemm_linear_layouts(H, V, L);
    /* ld 768 (1536 bytes, whole lines): one line per row, 8 rows of a
     * K-contiguous operand, 4 of an M/N-contiguous one */
    assert_true(REL(lanes_lines(H, 8, 4), 8.0, 1e-12));
    assert_true(REL(lanes_lines(H, 4, 8), 4.0, 1e-12));
    /* ld 50257: the row offsets step by 34 bytes mod 128 (all even
     * offsets, twice): a 64-byte store span crosses a line from offset 66 */
    assert_true(REL(store_lines_lanes(V), 1.0 + 31.0 / 64.0, 1e-12));
    double la[3] = {lanes_lines(H, 8, 4), lanes_lines(V, 8, 4), lanes_lines(H, 4, 8)};
    double lb[3] = {lanes_lines(H, 8, 4), lanes_lines(H, 4, 8), lanes_lines(V, 4, 8)};
    double lc[3] = {store_lines_lanes(V), store_lines_lanes(H), store_lines_lanes(H)};
    const double shape[3][3] = {{T, V, H}, {T, H, V}, {H, V, T}};
    double total = 0;
    for (int i = 0; i < 3; i++) {
        double want = fallback_closed(d, shape[i][0], shape[i][1], shape[i][2], la[i], lb[i], lc[i]);
        double got = wf_gemm_align1_time(d, WF_GEMM_HALF, 1, shape[i][0], shape[i][1], shape[i][2], &L[i]);
        assert_true(REL(got, want, 1e-12));
        /* slower than the aligned kernels by several times */
        assert_true(got > 2.0 * wf_gemm_time(d, WF_GEMM_HALF, 1, shape[i][0], shape[i][1], shape[i][2]));
        total += got;
    }
    printf("gpt2 head at 16 x 1024 tokens, alignment-1 kernels: %.2f ms (the profile measured 32.3 ms)\n",
           total * 1e3);
    /* fp32 (SIMT) has no penalty; an unknown device has no model */
    assert_true(wf_gemm_align1_time(d, WF_GEMM_FP32, 1, T, V, H, &L[0]) == 0);
    wf_device u = *d;
    snprintf(u.name, sizeof u.name, "unknown");
    assert_true(wf_gemm_align1_time(&u, WF_GEMM_HALF, 1, T, V, H, &L[0]) == 0);
}

static wf_cost_ctx *ctx_for(const char *model, const char *plan, wf_plan *p)
{
    wf_model_config m;
    wf_cluster c;
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-h100:nodes=1,devices_per_node=1", &c), WF_OK);
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    assert_int_equal(wf_plan_parse(plan, p), WF_OK);
    wf_cost_ctx_use(ctx, p);
    return ctx;
}

static double ev(const wf_device *d, double bytes, int kernels, int bwd)
{
    double t = bytes / (d->mem_bw_bps * d->mb_eff[WF_MB_ELEM][bwd]);
    return t > kernels * d->op_overhead_s ? t : kernels * d->op_overhead_s;
}

static void test_eager_chains(void **state)
{
    (void)state;
    const char *llama = "llama:layers=2,hidden=1024,heads=16,kv_heads=4,ffn=4096,vocab=32000,seq=1024";
    wf_plan p;
    wf_cost_ctx *ctx = ctx_for(llama, "dp=1,mbs=2,sw=pytorch", &p);
    const wf_device *d = &ctx->cluster.dev;
    const double b = 2, e = 2, tok = b * 1024, H = 1024, kvH = 256;
    const double gap = ctx->cluster.op_gap_s; /* the framework's idle time per op and pass */
    int seen_norm = 0, seen_rot = 0, seen_attn = 0, seen_cast = 0;
    for (int i = 0; i < ctx->nops; i++) {
        const wf_cost_op *r = &ctx->ops[i];
        wf_cost_op_time t = wf_cost_op_time_of(ctx, r, b, 1, 1);
        ctx->var.eager_elem = 0;
        wf_cost_op_time t0 = wf_cost_op_time_of(ctx, r, b, 1, 1);
        ctx->var.eager_elem = 1;
        if (r->kind == WF_OP_RMSNORM) {
            double n = tok * H;
            assert_true(REL(t.fwd_s, ev(d, 28 * n, 6, 0) + gap, 1e-12));
            assert_true(REL(t.bwd_in_s, ev(d, 92 * n, 12, 1) + gap, 1e-12));
            assert_true(t.bwd_w_s == 0);
            seen_norm++;
        } else if (r->kind == WF_OP_ROTARY) {
            double n = tok * (r->out_bytes >= H * 1024 * e ? H : kvH); /* q or k */
            assert_true(REL(t.fwd_s, ev(d, 38 * n, 8, 0) + gap, 1e-12));
            assert_true(REL(t.bwd_in_s, ev(d, 48 * n, 9, 1) + gap, 1e-12));
            seen_rot++;
        } else if (r->kind == WF_OP_ATTENTION) {
            /* k and v repeated from 4 heads to 16: read kv, write q-sized */
            double q = tok * H, kv = tok * kvH;
            assert_true(REL(t.fwd_s - t0.fwd_s, 2 * ev(d, e * (q + kv), 1, 0), 1e-9));
            assert_true(REL(t.bwd_in_s - t0.bwd_in_s, 2 * ev(d, e * (q + kv), 1, 1), 1e-9));
            seen_attn++;
        } else if (r->matrix && r->in_casts > 0) {
            /* the casts of the fp32 norm output: wq and wkv (weft's fused
             * qkv) two, each of gate, up and the head one */
            double n = tok * H, k = r->in_casts;
            assert_true(k == 1 || (k == 2 && r->gn == H + 2 * kvH));
            assert_true(REL(t.fwd_s - t0.fwd_s, k * ev(d, n * (4 + e), 1, 0), 1e-9));
            double back = k * ev(d, n * (4 + e), 1, 1) + (k > 1 ? ev(d, 12 * n, 1, 1) : 0);
            assert_true(REL(t.bwd_in_s - t0.bwd_in_s, back, 1e-9));
            seen_cast++;
        }
    }
    /* one layer's ops (costed once for all layers) and the final norm and head */
    assert_int_equal(seen_norm, 2 + 1);
    assert_int_equal(seen_rot, 2);
    assert_int_equal(seen_attn, 1);
    assert_int_equal(seen_cast, 3 + 1);
    wf_cost_ctx_free(ctx);
    /* Megatron-Core's fused kernels are not the script's: its norm is one kernel */
    ctx = ctx_for(llama, "dp=1,mbs=2", &p);
    assert_false(ctx->var.eager_elem || ctx->var.unpadded);
    for (int i = 0; i < ctx->nops; i++)
        if (ctx->ops[i].kind == WF_OP_RMSNORM) {
            wf_cost_op_time t = wf_cost_op_time_of(ctx, &ctx->ops[i], b, 1, 1);
            assert_true(t.fwd_s < ev(&ctx->cluster.dev, 28 * tok * H, 6, 0) + ctx->cluster.op_gap_s);
        }
    wf_cost_ctx_free(ctx);
}

/* GPT-2 under sw=pytorch: its dropouts cost nothing (the script has none)
 * and its head takes the alignment-1 kernels; under Megatron-Core (a padded
 * vocabulary) the head keeps the aligned kernels' time. */
static void test_gpt2_head(void **state)
{
    (void)state;
    wf_plan p;
    const double b = 4, tok = b * 1024, H = 768, V = 50257;
    for (int sw = 0; sw < 2; sw++) {
        wf_cost_ctx *ctx = ctx_for("gpt2", sw ? "dp=1,mbs=4,sw=pytorch" : "dp=1,mbs=4", &p);
        const wf_device *d = &ctx->cluster.dev;
        int heads = 0, drops = 0;
        for (int i = 0; i < ctx->nops; i++) {
            const wf_cost_op *r = &ctx->ops[i];
            wf_cost_op_time t = wf_cost_op_time_of(ctx, r, b, 1, 1);
            if (r->kind == WF_OP_DROPOUT) {
                drops++;
                assert_true(sw ? t.fwd_s == 0 && t.bwd_in_s == 0 : t.fwd_s > 0);
            }
            if (r->matrix && r->gn == V) {
                heads++;
                wf_gemm_layout L[3];
                wf_gemm_linear_layouts(H, V, L);
                double al[3] = {wf_gemm_time(d, WF_GEMM_HALF, 1, tok, V, H), wf_gemm_time(d, WF_GEMM_HALF, 1, tok, H, V),
                                wf_gemm_time(d, WF_GEMM_HALF, 1, H, V, tok)};
                double a1[3] = {wf_gemm_align1_time(d, WF_GEMM_HALF, 1, tok, V, H, &L[0]),
                                wf_gemm_align1_time(d, WF_GEMM_HALF, 1, tok, H, V, &L[1]),
                                wf_gemm_align1_time(d, WF_GEMM_HALF, 1, H, V, tok, &L[2])};
                double got[3] = {t.fwd_s, t.bwd_in_s, t.bwd_w_s};
                for (int k = 0; k < 3; k++) {
                    double want = sw ? fmax(al[k], a1[k]) : al[k];
                    if (sw && k == 0) /* the head reads the final norm's output: its cast */
                        want += ev(d, tok * H * 6, 1, 0);
                    if (sw && k == 1)
                        want += ev(d, tok * H * 6, 1, 1);
                    assert_true(REL(got[k], want + ctx->cluster.op_gap_s, 1e-9));
                }
            }
        }
        assert_int_equal(heads, 1);
        assert_true(drops > 0);
        wf_cost_ctx_free(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_align_rule),
        cmocka_unit_test(test_align1_time),
        cmocka_unit_test(test_eager_chains),
        cmocka_unit_test(test_gpt2_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
