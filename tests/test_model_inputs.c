/* The constant inputs of the Swin, T5 and AlphaFold2 graphs
 * (wf_model_constant_input) against their references' values: torchvision's
 * 2x2-window relative-position index and shifted-window mask worked by hand
 * from its region slices, Hugging Face's T5 buckets at distances worked from
 * _relative_position_bucket's formula, AlphaFold2's clipped one-hot; and
 * every constant input of the zoo's models is filled (no data input is). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "weft/models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int find(const wf_graph *g, const char *name)
{
    for (int t = 0; t < g->ntensors; t++)
        if (strcmp(g->tensors[t].name, name) == 0)
            return t;
    return -1;
}

static void *fill(const wf_model_config *m, const wf_graph *g, int t)
{
    assert_true(t >= 0);
    assert_true(wf_model_is_constant_input(m, g, t));
    void *buf = calloc((size_t)wf_tensor_numel(&g->tensors[t]), 4);
    assert_non_null(buf);
    assert_int_equal(wf_model_constant_input(m, g, t, buf), WF_OK);
    return buf;
}

/* Swin with 2x2 windows on an 8x8 image (patches 4x4: a 2x2 grid, then 1x1
 * after merging): torchvision's index for a 2x2 window (coordinates (0,0),
 * (0,1), (1,0), (1,1)) is [[4,3,1,0],[5,4,2,1],[7,6,4,3],[8,7,5,4]]. */
static void test_swin(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("swin:hidden=8,heads=2,depths=2-2,window=2,image=16,classes=4,dtype=fp32", &m),
                     WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    int nconst = 0, nmask = 0;
    for (int t = 0; t < g.ntensors; t++)
        if (wf_model_is_constant_input(&m, &g, t)) {
            void *v = fill(&m, &g, t);
            free(v);
            nconst++;
            nmask += strstr(g.tensors[t].name, ".attn.mask") != NULL;
        }
    /* 4 blocks, each with an index; the shifted ones (odd) on a grid larger than the window, a mask. */
    assert_true(nconst >= 4);
    assert_true(nmask >= 1);
    static const int32_t REF[16] = {4, 3, 1, 0, 5, 4, 2, 1, 7, 6, 4, 3, 8, 7, 5, 4};
    int t = -1;
    for (int i = 0; i < g.ntensors && t < 0; i++)
        if (strstr(g.tensors[i].name, ".attn.relpos.index") && g.tensors[i].shape[0] == 16)
            t = i;
    int32_t *idx = fill(&m, &g, t);
    assert_memory_equal(idx, REF, sizeof REF);
    free(idx);
    /* The mask of a 4x4 grid (16 / 4 patches), window 2, shift 1: regions
     * rows/cols {0,1}, {2}, {3}; window 0 (rows 0-1, cols 0-1) one region
     * (all 0); window 1 (rows 0-1, cols 2-3) labels 1,2,1,2; window 3 four
     * regions (0 on the diagonal only). */
    t = -1;
    for (int i = 0; i < g.ntensors && t < 0; i++)
        if (strstr(g.tensors[i].name, ".attn.mask") && g.tensors[i].shape[0] == 4)
            t = i;
    float *mask = fill(&m, &g, t);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            assert_true(mask[(0 * 4 + a) * 4 + b] == 0.0f);
            assert_true(mask[(1 * 4 + a) * 4 + b] == ((a % 2) == (b % 2) ? 0.0f : -100.0f));
            assert_true(mask[(3 * 4 + a) * 4 + b] == (a == b ? 0.0f : -100.0f));
        }
    free(mask);
    /* Data is not a constant. */
    int img = find(&g, "images");
    assert_false(wf_model_is_constant_input(&m, &g, img));
    float dummy;
    assert_int_equal(wf_model_constant_input(&m, &g, img, &dummy), WF_INVAL);
    wf_graph_free(&g);
}

/* T5's buckets (memory - query; 32 buckets, distance 128): the encoder's
 * -1 -> 1, +1 -> 17, -20 -> 8 + floor(ln 2.5 / ln 16 x 8) = 10, -200 -> 15;
 * the decoder's +5 -> 0, -5 -> 5, -20 -> 16 + floor(ln 1.25 / ln 8 x 16) = 17. */
static void test_t5(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("t5:layers=1,hidden=16,heads=2,ffn=32,seq=256,dec_seq=256,vocab=64,dtype=fp32", &m),
                     WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
    const int64_t S = 256;
    int32_t *e = fill(&m, &g, find(&g, "encoder.relative_attention_bias.index"));
    int32_t *d = fill(&m, &g, find(&g, "decoder.relative_attention_bias.index"));
    const int64_t q = 210;
    assert_int_equal(e[q * S + q], 0);
    assert_int_equal(e[q * S + q - 1], 1);
    assert_int_equal(e[q * S + q + 1], 17);
    assert_int_equal(e[q * S + q - 20], 10);
    assert_int_equal(e[q * S + q - 200], 15);
    assert_int_equal(d[q * S + q + 5], 0);
    assert_int_equal(d[q * S + q - 5], 5);
    assert_int_equal(d[q * S + q - 20], 17);
    for (int64_t i = 0; i < S * S; i++)
        assert_true(e[i] >= 0 && e[i] < 32 && d[i] >= 0 && d[i] < 32);
    free(e);
    free(d);
    wf_graph_free(&g);
}

/* AlphaFold2's relative positions: one_hot(clip(i - j + 32, 0, 64), 65). */
static void test_alphafold(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("alphafold:layers=1,seq=70,msa=4,hidden=8,pair=4,dtype=fp32", &m), WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    float *r = fill(&m, &g, find(&g, "relpos_onehot"));
    const int64_t N = 70, C = 65;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++) {
                const float *v = &r[((b * N + i) * N + j) * C];
                float sum = 0;
                for (int64_t c = 0; c < C; c++)
                    sum += v[c];
                assert_true(sum == 1.0f);
            }
    assert_true(r[(0 * N + 0) * C + 32] == 1.0f);
    assert_true(r[(0 * N + 69) * C + 0] == 1.0f);
    assert_true(r[(69 * N + 0) * C + 64] == 1.0f);
    assert_true(r[(40 * N + 10) * C + 62] == 1.0f);
    free(r);
    /* The recycled inputs and the features are data. */
    assert_false(wf_model_is_constant_input(&m, &g, find(&g, "msa_feat")));
    assert_false(wf_model_is_constant_input(&m, &g, find(&g, "prev_pair")));
    wf_graph_free(&g);
    /* A bf16 graph's one-hot is refused by name. */
    assert_int_equal(wf_model_lookup("alphafold:layers=1,seq=8,msa=4,hidden=8,pair=4", &m), WF_OK);
    assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
    float buf[8 * 8 * 65];
    assert_int_equal(wf_model_constant_input(&m, &g, find(&g, "relpos_onehot"), buf), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "fp32"));
    wf_graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swin),
        cmocka_unit_test(test_t5),
        cmocka_unit_test(test_alphafold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
