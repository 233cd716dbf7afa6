/* SuperScaler's plan kinds for models other than transformers (Lin et al.,
 * OSDI'23): co-shard (plan key coshard=K, an op as K pieces run in turn with
 * recomputation) and NF1B (plan key nf1b, a model's recycle=N forwards
 * without gradient pipelined before the pipeline that learns). Each is
 * checked against a reference: the plan keys against their definitions; the
 * estimate against closed forms built from the per-op primitive
 * (wf_cost_op_times_layout) and the model's recycled tensors; the simulator's
 * task graph (its own event engine) against the estimate within 3% in time
 * and memory; the planner's choice against the plans it ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cost/cost-impl.h"
#include "weft/cost.h"
#include "weft/cost_records.h"
#include "weft/plan.h"
#include "weft/search.h"
#include "weft/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small AlphaFold2 (4 Evoformer blocks, 64 residues, 32 sequences) and
 * the same without recycling. */
#define AF2 "alphafold:layers=4,seq=64,msa=32,recycle=3"
#define AF2_NOREC "alphafold:layers=4,seq=64,msa=32,recycle=0"

static void parse(const char *text, wf_plan *p) { assert_int_equal(wf_plan_parse(text, p), WF_OK); }

static void estimate(const char *model, const char *cluster, const char *plan, int64_t batch, wf_estimate *e)
{
    wf_model_config m;
    wf_cluster c;
    wf_plan p;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    parse(plan, &p);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    assert_int_equal(wf_estimate_plan(ctx, &p, batch, e), WF_OK);
    wf_cost_ctx_free(ctx);
}

/* The keys: parsed, written back only when set, named by the plan kind, and
 * checked against the model. */
static void test_keys(void **state)
{
    (void)state;
    wf_plan p, q;
    parse("dp=2,pp=4,recompute=full,coshard=8,nf1b=1", &p);
    assert_int_equal(p.coshard, 8);
    assert_int_equal(p.nf1b, 1);
    assert_string_equal(wf_plan_kind(&p), "NF1B 1F1B + co-shard");
    char buf[512];
    wf_plan_format(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, ",coshard=8,nf1b=1"));
    parse(buf, &q);
    q.given = p.given;
    assert_memory_equal(&p, &q, sizeof p);
    parse("dp=2,pp=4", &p);
    wf_plan_format(&p, buf, sizeof buf);
    assert_null(strstr(buf, "coshard"));
    assert_null(strstr(buf, "nf1b"));
    assert_string_equal(wf_plan_kind(&p), "1F1B");
    parse("dp=8,recompute=full,coshard=2", &p);
    assert_string_equal(wf_plan_kind(&p), "co-shard");
    parse("dp=8,nf1b=1", &p);
    assert_string_equal(wf_plan_kind(&p), "NF1B");
    parse("pp=2,pipe=gpipe,nf1b=1", &p);
    assert_string_equal(wf_plan_kind(&p), "NF1B GPipe");
    assert_int_equal(wf_plan_parse("coshard=0", &p), WF_INVAL);
    assert_int_equal(wf_plan_parse("nf1b=2", &p), WF_INVAL);

    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
    assert_int_equal(wf_model_lookup(AF2, &m), WF_OK);
    parse("dp=8,mbs=1,recompute=full,coshard=4,nf1b=1", &p);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 16), WF_OK);
    parse("dp=8,mbs=1,coshard=4", &p); /* the pieces are replayed: full recomputation */
    assert_int_equal(wf_plan_validate(&p, &m, &c, 16), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "recompute=full"));
    assert_int_equal(wf_model_lookup("resnet50", &m), WF_OK);
    parse("dp=8,nf1b=1", &p); /* no recycling */
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "recycle=0"));
    assert_int_equal(wf_model_lookup("gpt-tiny", &m), WF_OK);
    parse("dp=8,recompute=full,coshard=2", &p);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "transformer"));
}

/* Co-shard's closed forms on one device (no communication): compute plus
 * recomputation is m x K x (forward + backward + forward again) of every op
 * at 1/K of its rows, from the per-op primitive; the memory a full
 * recomputation replays is divided by K exactly. */
static void test_coshard_closed_form(void **state)
{
    (void)state;
    static const char *const MODELS[] = {AF2_NOREC, "swin-t"};
    const int64_t batch = 8;
    for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++) {
        wf_model_config m;
        wf_cluster c;
        assert_int_equal(wf_model_lookup(MODELS[k], &m), WF_OK);
        assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_estimate none, full, cs[3];
        wf_plan p;
        parse("dp=1,mbs=2", &p);
        assert_int_equal(wf_estimate_plan(ctx, &p, batch, &none), WF_OK);
        parse("dp=1,mbs=2,recompute=full", &p);
        assert_int_equal(wf_estimate_plan(ctx, &p, batch, &full), WF_OK);
        for (int j = 0; j < 3; j++) {
            const int K = 2 << j;
            char text[64];
            snprintf(text, sizeof text, "dp=1,mbs=2,recompute=full,coshard=%d", K);
            parse(text, &p);
            assert_int_equal(wf_estimate_plan(ctx, &p, batch, &cs[j]), WF_OK);
            /* The reference: every op's times as K ops on 1/K of it. */
            wf_cost_layout L;
            assert_int_equal(wf_cost_layout_init(ctx, 1, &L), WF_OK);
            for (int i = 0; i < L.nops; i++)
                L.div[i] = K;
            wf_cost_op_time *t = malloc((size_t)L.nops * sizeof *t);
            assert_non_null(t);
            assert_int_equal(wf_cost_op_times_layout(ctx, 2, &L, t), WF_OK);
            double fwd = 0, bwd = 0;
            for (int i = 0; i < L.nops; i++) {
                fwd += K * t[i].fwd_s;
                bwd += K * (t[i].bwd_in_s + t[i].bwd_w_s);
            }
            free(t);
            wf_cost_layout_free(&L);
            const double mb = (double)batch / 2;
            assert_true(fabs(cs[j].breakdown.compute / (mb * (fwd + bwd)) - 1) < 1e-9);
            assert_true(fabs(cs[j].breakdown.recompute / (mb * fwd) - 1) < 1e-9);
            /* The replayed activations, exactly 1/K of full recomputation's. */
            double replay1 = full.mem_buffer_bytes - none.mem_buffer_bytes;
            double replayK = cs[j].mem_buffer_bytes - none.mem_buffer_bytes;
            assert_true(replay1 > 0);
            assert_true(fabs(replayK * K / replay1 - 1) < 1e-9);
            assert_true(cs[j].mem_activation_bytes == full.mem_activation_bytes);
            printf("%-36s coshard=%-2d %8.4f s (full recompute %8.4f s), replayed %7.3f GiB (%7.3f GiB)\n",
                   MODELS[k], K, cs[j].iteration_time_s, full.iteration_time_s, replayK / 1073741824.0,
                   replay1 / 1073741824.0);
        }
        /* Smaller pieces are only slower. */
        assert_true(cs[0].iteration_time_s > full.iteration_time_s);
        assert_true(cs[2].iteration_time_s > cs[1].iteration_time_s && cs[1].iteration_time_s > cs[0].iteration_time_s);
        wf_cost_ctx_free(ctx);
    }
}

/* NF1B without a pipeline: N more forwards per micro-batch (nothing kept,
 * no recomputation), against the same model without recycling; the first
 * stage keeps each micro-batch's recycled tensors (first MSA row, pair,
 * previous distogram) from its first forward to the one that learns: all
 * of them under NF1B, one at a time otherwise. */
static void test_nf1b_closed_form(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup(AF2, &m), WF_OK);
    const double rec_per_sample = (64.0 * 256 + 64.0 * 64 * 128 + 64.0 * 64 * 15) * 2; /* bf16 */
    assert_true(wf_cost_recycle_bytes(&m) == rec_per_sample);
    wf_estimate plain, inl, nf;
    estimate(AF2_NOREC, "dgx-a100:nodes=1", "dp=1,mbs=2", 8, &plain);
    estimate(AF2, "dgx-a100:nodes=1", "dp=1,mbs=2", 8, &inl);
    estimate(AF2, "dgx-a100:nodes=1", "dp=1,mbs=2,nf1b=1", 8, &nf);
    wf_estimate fwd_only; /* one forward per micro-batch: full recomputation's term */
    estimate(AF2_NOREC, "dgx-a100:nodes=1", "dp=1,mbs=2,recompute=full", 8, &fwd_only);
    const double N = 3, micro = 4;
    double extra = N * fwd_only.breakdown.recompute;
    assert_true(fabs((inl.iteration_time_s - plain.iteration_time_s) / extra - 1) < 1e-9);
    assert_true(fabs(nf.iteration_time_s / inl.iteration_time_s - 1) < 1e-12);
    assert_true(fabs(inl.mem_activation_bytes - plain.mem_activation_bytes - 2 * rec_per_sample) < 1);
    assert_true(fabs(nf.mem_activation_bytes - plain.mem_activation_bytes - micro * 2 * rec_per_sample) < 1);
    assert_true(fabs(inl.breakdown.compute - plain.breakdown.compute - extra) < 1e-9 * inl.breakdown.compute);
}

static void sim_and_estimate(const char *model, const char *cluster, const char *plan, int64_t batch,
                             wf_sim_plan_result *sr, wf_estimate *e)
{
    wf_model_config m;
    wf_cluster c;
    wf_plan p;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    parse(plan, &p);
    wf_sim_plan_opts o = {0};
    assert_int_equal(wf_sim_plan(&m, &c, &p, batch, &o, sr), WF_OK);
    estimate(model, cluster, plan, batch, e);
}

/* The simulator plays the same plans as a task graph on its own event
 * engine (the forwards without gradient as tasks with their dependencies
 * around the pipeline, the recycled tensors as buffers, co-shard's pieces
 * in the units): within 3% of the estimate in time and memory. NF1B beats
 * recycling inside each micro-batch's step on a pipeline, and it is the
 * one-pipeline-fill closed form on equal stages. */
static void test_sim_agrees(void **state)
{
    (void)state;
    static const struct {
        const char *model, *plan;
        int64_t batch;
    } CASES[] = {
        {AF2, "dp=8,mbs=1,recompute=full,coshard=4", 16},
        {AF2, "dp=4,pp=2,mbs=1,recompute=full", 32},
        {AF2, "dp=4,pp=2,mbs=1,recompute=full,nf1b=1", 32},
        {AF2, "dp=2,pp=4,mbs=1,recompute=full,nf1b=1", 32},
        {AF2, "dp=2,pp=4,mbs=1,recompute=full", 32},
        {AF2, "dp=2,pp=4,mbs=2,pipe=gpipe,nf1b=1", 32},
        {AF2, "dp=1,pp=8,mbs=1,recompute=full,coshard=2,nf1b=1", 16},
        {"swin-t", "dp=4,pp=2,mbs=8,recompute=full,coshard=4", 256},
        {"swin-t", "dp=8,mbs=16,recompute=full,coshard=8", 256},
    };
    double t_inline = 0, t_nf = 0;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        wf_sim_plan_result sr;
        wf_estimate e;
        sim_and_estimate(CASES[k].model, "dgx-a100:nodes=1", CASES[k].plan, CASES[k].batch, &sr, &e);
        double dt = sr.iteration_time_s / e.iteration_time_s - 1, dm = sr.peak_memory_bytes / e.memory_per_device_bytes - 1;
        printf("%-36s %-48s est %8.4f s sim %8.4f s (%+.2f%%), memory %6.2f GiB (%+.2f%%)\n", CASES[k].model,
               CASES[k].plan, e.iteration_time_s, sr.iteration_time_s, 100 * dt, e.memory_per_device_bytes / 1073741824.0,
               100 * dm);
        assert_true(fabs(dt) < 0.03 && fabs(dm) < 0.03);
        if (k == 3)
            t_nf = e.iteration_time_s;
        if (k == 4)
            t_inline = e.iteration_time_s;
    }
    assert_true(t_nf < 0.8 * t_inline);
}

/* Block checkpoints (full recomputation of a model with repeated blocks,
 * AlphaFold2's own: every Evoformer block checkpointed): one stage keeps
 * each block's inputs, the MSA [S, N, 256] and the pair [N, N, 128] in
 * bf16, and the head's (the last block's pair), per micro-batch in flight;
 * the replay holds one block's activations at a time, so the buffers do
 * not grow with the blocks. The simulator keeps the same bytes. */
static void test_block_checkpoints(void **state)
{
    (void)state;
    const double msa = 32.0 * 64 * 256 * 2, pair = 64.0 * 64 * 128 * 2;
    wf_estimate e4, e8, e8m;
    estimate("alphafold:layers=4,seq=64,msa=32,recycle=0", "dgx-a100:nodes=1", "dp=1,mbs=1,recompute=full", 1, &e4);
    estimate("alphafold:layers=8,seq=64,msa=32,recycle=0", "dgx-a100:nodes=1", "dp=1,mbs=1,recompute=full", 1, &e8);
    estimate("alphafold:layers=8,seq=64,msa=32,recycle=0", "dgx-a100:nodes=1", "dp=1,mbs=2,recompute=full", 4, &e8m);
    printf("checkpoints: 4 blocks %.0f B (expected %.0f), 8 blocks %.0f B (expected %.0f); buffers %.0f / %.0f B\n",
           e4.mem_activation_bytes, 4 * (msa + pair) + pair, e8.mem_activation_bytes, 8 * (msa + pair) + pair,
           e4.mem_buffer_bytes, e8.mem_buffer_bytes);
    assert_true(fabs(e4.mem_activation_bytes - (4 * (msa + pair) + pair)) < 1);
    assert_true(fabs(e8.mem_activation_bytes - (8 * (msa + pair) + pair)) < 1);
    /* A micro-batch of 2: twice the checkpoints. */
    assert_true(fabs(e8m.mem_activation_bytes - 2 * (8 * (msa + pair) + pair)) < 1);
    /* Without recomputation every block's activations are kept: far more;
     * four more blocks replayed one at a time add next to nothing to the
     * buffers (a whole-stage replay would add four blocks' activations). */
    wf_estimate en;
    estimate("alphafold:layers=8,seq=64,msa=32,recycle=0", "dgx-a100:nodes=1", "dp=1,mbs=1", 1, &en);
    assert_true(en.mem_activation_bytes > 8 * e8.mem_activation_bytes);
    assert_true(fabs(e8.mem_buffer_bytes - e4.mem_buffer_bytes) < 0.05 * en.mem_activation_bytes / 8);
    wf_sim_plan_result sr;
    wf_estimate e;
    sim_and_estimate("alphafold:layers=8,seq=64,msa=32,recycle=0", "dgx-a100:nodes=1", "dp=2,pp=2,mbs=1,recompute=full",
                     8, &sr, &e);
    assert_true(fabs(sr.peak_memory_bytes / e.memory_per_device_bytes - 1) < 0.03);
}

/* ---- per-op co-shard (coshard=K@PATTERN) ------------------------------------------ */

/* The key: K@PATTERN parses, is written back as given and matches ops by
 * kind name or by a glob of their names; what is not a pattern is refused
 * naming it; a per-op co-shard needs no full recomputation. */
static void test_per_op_keys(void **state)
{
    (void)state;
    wf_plan p, q;
    parse("dp=8,coshard=4@attention+*.tri_mul_?ut", &p);
    assert_int_equal(p.coshard, 4);
    assert_string_equal(p.coshard_on, "attention+*.tri_mul_?ut");
    assert_true(wf_plan_coshard_per_op(&p));
    char buf[512];
    wf_plan_format(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, ",coshard=4@attention+*.tri_mul_?ut"));
    parse(buf, &q);
    q.given = p.given;
    assert_memory_equal(&p, &q, sizeof p);
    assert_int_equal(wf_plan_coshard_op(&p, "x.attn.core", WF_OP_ATTENTION), 1);
    assert_int_equal(wf_plan_coshard_op(&p, "evo.3.tri_mul_out", WF_OP_MATMUL), 1);
    assert_int_equal(wf_plan_coshard_op(&p, "evo.3.tri_mul_in", WF_OP_MATMUL), 0);
    assert_int_equal(wf_plan_coshard_op(&p, "x.attn.proj", WF_OP_LINEAR), 0);
    /* Whole-stage co-shard: every op; none without co-shard. */
    parse("dp=8,recompute=full,coshard=4", &p);
    assert_false(wf_plan_coshard_per_op(&p));
    assert_int_equal(wf_plan_coshard_op(&p, "x.attn.proj", WF_OP_LINEAR), 1);
    parse("dp=8", &p);
    assert_int_equal(wf_plan_coshard_op(&p, "x.attn.core", WF_OP_ATTENTION), 0);
    static const char *const BAD[] = {"coshard=4@", "coshard=1@attention", "coshard=4@a#b", "coshard=4@+a",
                                      "coshard=4@a++b", "coshard=x@attention", "coshard=@attention"};
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        assert_int_equal(wf_plan_parse(BAD[k], &p), WF_INVAL);
        assert_non_null(strstr(wf_last_error(), "coshard="));
    }
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
    assert_int_equal(wf_model_lookup("swin-t", &m), WF_OK);
    parse("dp=8,mbs=4,coshard=4@attention", &p);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 32), WF_OK);
    assert_int_equal(wf_model_lookup("gpt-tiny", &m), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 32), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "transformer"));
    /* A pattern that matches no op of the model is an error naming it. */
    assert_int_equal(wf_model_lookup("swin-t", &m), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_estimate e;
    parse("dp=8,mbs=4,coshard=4@no_such_op", &p);
    assert_int_equal(wf_estimate_plan(ctx, &p, 32, &e), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "no_such_op"));
    wf_cost_ctx_free(ctx);
}

/* Per-op co-shard's closed forms on one device: a chosen op runs as K ops
 * on 1/K of its rows, forward, backward and its forward again (the
 * piecewise recomputation), the others as they are; the chosen ops keep
 * none of their saved activations between forward and backward, and the
 * largest one's piece, its saved activations / K, lives while its backward
 * runs. Chosen by kind (Swin's attention) and by name (AlphaFold2's
 * triangle ops). A pattern that matches every op under recompute=full is
 * the whole-stage co-shard. */
static void test_per_op_closed_form(void **state)
{
    (void)state;
    static const struct {
        const char *model, *pattern;
    } CASES[] = {{"swin-t", "attention"}, {AF2_NOREC, "*.tri_*"}, {AF2_NOREC, "attention+*.outer.*"}};
    const int64_t batch = 8, mbs = 2;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        wf_model_config m;
        wf_cluster c;
        assert_int_equal(wf_model_lookup(CASES[k].model, &m), WF_OK);
        assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_plan p;
        wf_estimate none, cs;
        parse("dp=1,mbs=2", &p);
        assert_int_equal(wf_estimate_plan(ctx, &p, batch, &none), WF_OK);
        for (int K = 2; K <= 8; K *= 2) {
            char text[128];
            snprintf(text, sizeof text, "dp=1,mbs=2,coshard=%d@%s", K, CASES[k].pattern);
            parse(text, &p);
            assert_int_equal(wf_estimate_plan(ctx, &p, batch, &cs), WF_OK);
            wf_cost_layout L1, LK;
            assert_int_equal(wf_cost_layout_init(ctx, 1, &L1), WF_OK);
            assert_int_equal(wf_cost_layout_init(ctx, 1, &LK), WF_OK);
            for (int i = 0; i < LK.nops; i++)
                LK.div[i] = K;
            wf_cost_op_time *t1 = malloc((size_t)L1.nops * sizeof *t1), *tk = malloc((size_t)L1.nops * sizeof *tk);
            assert_true(t1 && tk);
            assert_int_equal(wf_cost_op_times_layout(ctx, mbs, &L1, t1), WF_OK);
            assert_int_equal(wf_cost_op_times_layout(ctx, mbs, &LK, tk), WF_OK);
            double fb = 0, rec = 0, kept = 0, piece = 0;
            int chosen = 0;
            for (int i = 0; i < ctx->nops; i++) {
                const int on = wf_plan_coshard_op(&p, ctx->ops[i].name, ctx->ops[i].kind);
                const wf_cost_op_time *t = on ? &tk[i] : &t1[i];
                const double n = on ? K : 1;
                fb += n * (t->fwd_s + t->bwd_in_s + t->bwd_w_s);
                rec += on ? n * t->fwd_s : 0;
                double sv[3];
                wf_cost_op_saved(ctx, i, sv);
                const double a = (sv[0] + sv[1] + sv[2]) * ctx->saved_dedup * (double)mbs;
                if (on) {
                    chosen++;
                    kept += a;
                    piece = a / K > piece ? a / K : piece;
                }
            }
            free(t1);
            free(tk);
            wf_cost_layout_free(&L1);
            wf_cost_layout_free(&LK);
            assert_true(chosen > 0 && chosen < ctx->nops);
            const double mb = (double)(batch / mbs);
            assert_true(fabs(cs.breakdown.compute / (mb * fb) - 1) < 1e-9);
            assert_true(fabs(cs.breakdown.recompute / (mb * rec) - 1) < 1e-9);
            /* The chosen ops' activations leave the kept ones; one piece
             * of the largest is a buffer while its backward runs. */
            assert_true(fabs((none.mem_activation_bytes - cs.mem_activation_bytes) / kept - 1) < 1e-9);
            assert_true(fabs((cs.mem_buffer_bytes - none.mem_buffer_bytes) / piece - 1) < 1e-9);
            printf("%-36s coshard=%d@%-18s %3d ops: %8.4f s (none %8.4f s), kept %7.3f GiB less, piece %7.4f GiB\n",
                   CASES[k].model, K, CASES[k].pattern, chosen, cs.iteration_time_s, none.iteration_time_s,
                   kept / 1073741824.0, piece / 1073741824.0);
        }
        /* Every op chosen under recompute=full: whole-stage co-shard. */
        wf_estimate whole, all;
        parse("dp=1,mbs=2,recompute=full,coshard=4", &p);
        assert_int_equal(wf_estimate_plan(ctx, &p, batch, &whole), WF_OK);
        parse("dp=1,mbs=2,recompute=full,coshard=4@*", &p);
        assert_int_equal(wf_estimate_plan(ctx, &p, batch, &all), WF_OK);
        assert_true(fabs(all.iteration_time_s / whole.iteration_time_s - 1) < 1e-12);
        assert_true(fabs(all.memory_per_device_bytes / whole.memory_per_device_bytes - 1) < 1e-12);
        wf_cost_ctx_free(ctx);
    }
}

/* The simulator plays per-op co-shard (the chosen units in pieces with
 * their replay, one piece's activations as a buffer of their backward):
 * within 3% of the estimate in time and memory, with and without a
 * pipeline, with and without full recomputation. */
static void test_per_op_sim_agrees(void **state)
{
    (void)state;
    static const struct {
        const char *model, *plan;
        int64_t batch;
    } CASES[] = {
        {"swin-t", "dp=8,mbs=32,coshard=4@attention", 256},
        {"swin-t", "dp=4,pp=2,mbs=8,coshard=8@attention", 256},
        {"swin-t", "dp=8,mbs=16,recompute=full,coshard=4@attention", 256},
        {AF2_NOREC, "dp=8,mbs=1,coshard=4@*.tri_*", 16},
        {AF2, "dp=4,pp=2,mbs=1,coshard=2@attention+*.outer.*,nf1b=1", 32},
        {AF2_NOREC, "dp=8,mbs=1,recompute=full,coshard=4@*.tri_*", 16},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        wf_sim_plan_result sr;
        wf_estimate e;
        sim_and_estimate(CASES[k].model, "dgx-a100:nodes=1", CASES[k].plan, CASES[k].batch, &sr, &e);
        double dt = sr.iteration_time_s / e.iteration_time_s - 1, dm = sr.peak_memory_bytes / e.memory_per_device_bytes - 1;
        printf("%-36s %-48s est %8.4f s sim %8.4f s (%+.2f%%), memory %6.2f GiB (%+.2f%%)\n", CASES[k].model,
               CASES[k].plan, e.iteration_time_s, sr.iteration_time_s, 100 * dt, e.memory_per_device_bytes / 1073741824.0,
               100 * dm);
        assert_true(fabs(dt) < 0.03 && fabs(dm) < 0.03);
    }
}

/* The planner: a model with recycling, searched over pipelined plans, runs
 * NF1B; on one device, where no plan without pieces fits AlphaFold2's
 * Evoformer at 1280 residues (one block's activations of one sample exceed
 * an A100, block checkpoints or not), the best plan is co-sharded, and the
 * pieces are the fewest that fit. */
static int pipelined(const wf_plan *p, void *user)
{
    (void)user;
    return p->pp > 1;
}

static void test_planner(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("alphafold2", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.top_k = 5;
    o.accept = pipelined;
    wf_search_outer_result r;
    assert_int_equal(wf_search_outer(&m, &c, 128, &o, &r), WF_OK);
    assert_true(r.ntop > 0);
    assert_int_equal(r.top[0].plan.nf1b, 1);
    assert_true(r.top[0].plan.pp > 1);
    assert_true(r.top[0].est.fits);
    wf_search_outer_result_free(&r);
    o.accept = NULL;
    o.devices = 1;
    assert_int_equal(wf_model_lookup("alphafold2:seq=1280", &m), WF_OK);
    assert_int_equal(wf_search_outer(&m, &c, 4, &o, &r), WF_OK);
    assert_true(r.ntop > 0);
    const wf_plan *best = &r.top[0].plan;
    assert_true(best->coshard > 1);
    assert_true(r.top[0].est.fits);
    /* Half the pieces (at the same micro-batch) do not fit. */
    wf_plan fewer = *best;
    fewer.coshard /= 2;
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &fewer, 4, &e), WF_OK);
    assert_false(e.fits);
    /* Nothing without co-shard fits one device. */
    wf_plan none = *best;
    none.coshard = 1;
    none.mbs = 1;
    assert_int_equal(wf_estimate_plan(ctx, &none, 4, &e), WF_OK);
    assert_false(e.fits);
    wf_cost_ctx_free(ctx);
    wf_search_outer_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_coshard_closed_form),
        cmocka_unit_test(test_nf1b_closed_form),
        cmocka_unit_test(test_block_checkpoints),
        cmocka_unit_test(test_sim_agrees),
        cmocka_unit_test(test_planner),
        cmocka_unit_test(test_per_op_keys),
        cmocka_unit_test(test_per_op_closed_form),
        cmocka_unit_test(test_per_op_sim_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
