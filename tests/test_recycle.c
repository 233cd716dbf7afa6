/* What the replica engine feeds a model's inputs besides the loader's
 * (src/runtime/feed_inputs.c, wf_model_recycled_source and
 * wf_model_shifted_labels_input):
 *   - AlphaFold2's recycled inputs take the MSA after the last Evoformer
 *     block's MSA transition and the pair after its pair transition (the
 *     order of AF2's Evoformer: the MSA stack, the outer product mean, then
 *     the pair stack), found independently here by the ops that make them;
 *     after a forward the saved values are row 0 of each sample's MSA
 *     (indexed by hand over [B,S,N,c]) and the whole pair, the previous
 *     positions' distogram stays zero, and the next forward with them loads
 *     them and computes another loss;
 *   - T5's decoder ids are the labels shifted right behind the start token 0
 *     (Hugging Face's _shift_right);
 *   - a data input the loader does not fill (AlphaFold2's msa_feat) gets
 *     noise that is a function of the global sample alone, so pieces and
 *     ranks draw what one process draws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "runtime/engine-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int tensor(const wf_graph *g, const char *name)
{
    for (int t = 0; t < g->ntensors; t++)
        if (strcmp(g->tensors[t].name, name) == 0)
            return t;
    return -1;
}

static int output_of(const wf_graph *g, const char *op)
{
    for (int o = 0; o < g->nfwd; o++)
        if (strcmp(g->ops[o].name, op) == 0)
            return g->ops[o].out[0];
    return -1;
}

static const wf_feed_input *input(const wf_feed_graph *f, int t)
{
    for (int k = 0; k < f->n; k++)
        if (f->x[k].t == t)
            return &f->x[k];
    return NULL;
}

/* A feed of `rows` samples with seeded features and labels. */
static void make_feed(wf_engine_feed *fd, const wf_graph *g, const wf_feed_graph *f, int64_t rows)
{
    memset(fd, 0, sizeof *fd);
    assert_int_equal(wf_data_layout_from_input(g, f->in_t, &fd->layout), WF_OK);
    fd->b = rows;
    fd->in_numel = wf_data_layout_input_numel(&fd->layout);
    fd->lab_numel = wf_data_layout_label_numel(&fd->layout);
    assert_int_equal(wf_engine_feed_alloc(fd), WF_OK);
    int64_t classes = fd->layout.classes;
    for (int64_t i = 0; i < rows * fd->in_numel; i++) {
        if (fd->layout.input_dtype == WF_DTYPE_INT32)
            ((int32_t *)fd->inbuf)[i] = (int32_t)((i * 7 + 3) % fd->layout.vocab);
        else
            ((float *)fd->inbuf)[i] = (float)sin((double)i * 0.37);
    }
    for (int64_t i = 0; i < rows * fd->lab_numel; i++)
        fd->labbuf[i] = (int32_t)((i * 5 + 1) % classes);
}

static void test_alphafold_recycling(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("alphafold:layers=2,seq=6,msa=3,hidden=8,pair=4,recycle=1,dtype=fp32", &m),
                     WF_OK);
    const int64_t B = 2, S = 3, N = 6, CM = 8, CZ = 4;
    wf_graph g;
    assert_int_equal(wf_model_build(&m, B, &g), WF_OK);
    wf_feed_graph f;
    assert_int_equal(wf_feed_graph_plan(&m, &g, &f), WF_OK);
    assert_int_equal(f.recycle, 1);
    assert_int_equal(f.in_t, tensor(&g, "target_feat"));
    int msa_final = output_of(&g, "evoformer.1.msa_transition.residual");
    int pair_final = output_of(&g, "evoformer.1.pair_transition.residual");
    assert_true(msa_final >= 0 && pair_final >= 0);
    const wf_feed_input *pm = input(&f, tensor(&g, "prev_msa_first_row"));
    const wf_feed_input *pz = input(&f, tensor(&g, "prev_pair"));
    const wf_feed_input *pd = input(&f, tensor(&g, "prev_pos_distogram"));
    const wf_feed_input *mf = input(&f, tensor(&g, "msa_feat"));
    const wf_feed_input *rp = input(&f, tensor(&g, "relpos_onehot"));
    assert_non_null(pm);
    assert_non_null(pz);
    assert_non_null(pd);
    assert_non_null(mf);
    assert_non_null(rp);
    assert_int_equal(pm->kind, WF_FEED_RECYCLED);
    assert_int_equal(pm->src, msa_final);
    assert_int_equal(pz->src, pair_final);
    assert_int_equal(pd->kind, WF_FEED_RECYCLED);
    assert_int_equal(pd->src, -1);
    assert_int_equal(mf->kind, WF_FEED_NOISE);
    assert_int_equal(rp->kind, WF_FEED_CONST);
    assert_int_equal(f.rec_floats, N * CM + N * N * CZ + N * N * 15);

    wf_exec_opts eo = {1, 9};
    wf_exec *e = NULL;
    assert_int_equal(wf_exec_create_keeping(&g, &eo, f.keep, f.nkeep, &e), WF_OK);
    assert_int_equal(wf_feed_graph_constants(&f, &m, e), WF_OK);
    wf_engine_feed fd;
    make_feed(&fd, &g, &f, B);
    float *rec = calloc((size_t)(B * f.rec_floats), sizeof(float));
    assert_non_null(rec);
    /* First pass: the recycled inputs are zeros. */
    wf_feed_graph_rows(&f, e, &fd, 0, 0, 9);
    wf_feed_graph_recycled_load(&f, e, rec);
    float loss0 = 0, loss1 = 0;
    assert_int_equal(wf_exec_forward(e, &loss0), WF_OK);
    assert_int_equal(wf_feed_graph_recycled_save(&f, e, rec), WF_OK);
    const float *msa = wf_exec_kept_data(e, msa_final), *pair = wf_exec_kept_data(e, pair_final);
    assert_non_null(msa);
    assert_non_null(pair);
    double norm = 0;
    for (int64_t b = 0; b < B; b++) {
        const float *r = rec + b * f.rec_floats;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < CM; c++)
                assert_true(r[pm->off + n * CM + c] == msa[((b * S + 0) * N + n) * CM + c]);
        for (int64_t k = 0; k < N * N * CZ; k++) {
            assert_true(r[pz->off + k] == pair[b * N * N * CZ + k]);
            norm += fabs((double)r[pz->off + k]);
        }
        for (int64_t k = 0; k < N * N * 15; k++)
            assert_true(r[pd->off + k] == 0.0f);
    }
    assert_true(norm > 0);
    /* The next pass takes them, and computes another loss. */
    wf_feed_graph_rows(&f, e, &fd, 0, 0, 9);
    wf_feed_graph_recycled_load(&f, e, rec);
    const float *leaf = wf_exec_leaf_data(e, pz->t);
    for (int64_t b = 0; b < B; b++)
        assert_memory_equal(leaf + b * pz->numel, rec + b * f.rec_floats + pz->off, (size_t)pz->numel * sizeof(float));
    assert_int_equal(wf_exec_forward(e, &loss1), WF_OK);
    assert_true(isfinite(loss0) && isfinite(loss1) && loss0 != loss1);

    /* Noise of global sample 7: the same as row 1 of a feed starting at 6. */
    wf_feed_graph_rows(&f, e, &fd, 0, 6, 9);
    const float *noise = wf_exec_leaf_data(e, mf->t);
    float *copy = malloc((size_t)mf->numel * sizeof(float));
    assert_non_null(copy);
    memcpy(copy, noise + mf->numel, (size_t)mf->numel * sizeof(float));
    wf_feed_graph_rows(&f, e, &fd, 0, 7, 9);
    assert_memory_equal(copy, noise, (size_t)mf->numel * sizeof(float));
    for (int64_t k = 0; k < mf->numel; k++)
        assert_true(copy[k] >= -0.5f && copy[k] < 0.5f);
    free(copy);
    free(rec);
    wf_engine_feed_free(&fd);
    wf_exec_free(e);
    wf_feed_graph_free(&f);
    wf_graph_free(&g);
}

static void test_t5_decoder_ids(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(
        wf_model_lookup("t5:layers=1,hidden=16,heads=2,head_dim=8,ffn=32,seq=5,dec_seq=5,vocab=40,dtype=fp32", &m),
        WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    wf_feed_graph f;
    assert_int_equal(wf_feed_graph_plan(&m, &g, &f), WF_OK);
    assert_int_equal(f.in_t, tensor(&g, "ids"));
    assert_int_equal(f.recycle, 0);
    assert_int_equal(f.nkeep, 0);
    const wf_feed_input *d = input(&f, tensor(&g, "decoder_ids"));
    assert_non_null(d);
    assert_int_equal(d->kind, WF_FEED_SHIFTED);
    wf_exec_opts eo = {1, 3};
    wf_exec *e = NULL;
    assert_int_equal(wf_exec_create(&g, &eo, &e), WF_OK);
    wf_engine_feed fd;
    make_feed(&fd, &g, &f, 4);
    /* rows 2 and 3 of the feed */
    wf_feed_graph_rows(&f, e, &fd, 2, 0, 3);
    const int32_t *dec = wf_exec_leaf_data(e, d->t);
    for (int64_t r = 0; r < 2; r++) {
        assert_int_equal(dec[r * 5], 0);
        for (int64_t j = 1; j < 5; j++)
            assert_int_equal(dec[r * 5 + j], fd.labbuf[(2 + r) * 5 + j - 1]);
    }
    float loss = 0;
    assert_int_equal(wf_feed_graph_constants(&f, &m, e), WF_OK);
    assert_int_equal(wf_exec_forward(e, &loss), WF_OK);
    assert_true(isfinite(loss));
    wf_engine_feed_free(&fd);
    wf_exec_free(e);
    wf_feed_graph_free(&f);
    wf_graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alphafold_recycling),
        cmocka_unit_test(test_t5_decoder_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
