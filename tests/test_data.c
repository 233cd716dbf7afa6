/* Data loaders: IDX parsing of small gzip files written here (and refusal of
 * malformed ones), rank slices that concatenate to the single-process batch,
 * determinism and seeking, learnable synthetic labels, text windows, layouts
 * read from zoo graphs, and the real Fashion-MNIST and fortunes corpora when
 * installed (skipped with a message otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "weft/models.h"
#include "weft/runtime_io.h"

/* ---- helpers ------------------------------------------------------------------- */

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes an IDX file (gzip'd) with the given magic, dims and payload of
 * `payload` bytes (which may disagree with the dims, to make bad files). */
static void write_idx(const char *path, uint32_t magic, int ndim, const uint32_t *dims, const uint8_t *data,
                      size_t payload)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    unsigned char hdr[4 * 5];
    put_be32(hdr, magic);
    for (int i = 0; i < ndim; i++)
        put_be32(hdr + 4 + 4 * i, dims[i]);
    assert_int_equal(gzwrite(f, hdr, (unsigned)(4 + 4 * ndim)), 4 + 4 * ndim);
    if (payload)
        assert_int_equal(gzwrite(f, data, (unsigned)payload), (int)payload);
    assert_int_equal(gzclose(f), Z_OK);
}

#define NIMG 5
static uint8_t g_pixels[NIMG * 784];
static uint8_t g_labels[NIMG] = {3, 0, 9, 3, 7};

/* A small fashion-mnist directory: NIMG images whose pixel j of image i is
 * (i * 31 + j) % 256. */
static void make_fashion_dir(char *dir)
{
    strcpy(dir, "/tmp/weft-test-data-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < NIMG; i++)
        for (int j = 0; j < 784; j++)
            g_pixels[i * 784 + j] = (uint8_t)((i * 31 + j) % 256);
    char p[512];
    uint32_t idims[3] = {NIMG, 28, 28}, ldims[1] = {NIMG};
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    write_idx(p, 0x803, 3, idims, g_pixels, sizeof g_pixels);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    write_idx(p, 0x801, 1, ldims, g_labels, sizeof g_labels);
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static wf_data_layout features_layout(int64_t nf, int64_t classes)
{
    wf_data_layout l;
    memset(&l, 0, sizeof l);
    l.input_dtype = WF_DTYPE_FP32;
    l.input_ndim = 1;
    l.input_shape[0] = nf;
    l.classes = classes;
    return l;
}

static wf_data_layout tokens_layout(int64_t seq, int64_t vocab)
{
    wf_data_layout l;
    memset(&l, 0, sizeof l);
    l.input_dtype = WF_DTYPE_INT32;
    l.input_ndim = 1;
    l.input_shape[0] = seq;
    l.label_ndim = 1;
    l.label_shape[0] = seq;
    l.classes = vocab;
    l.vocab = vocab;
    return l;
}

/* Draws `steps` global batches with one process and with nranks processes
 * (one loader per rank, as ranks would hold), and checks that the ranks'
 * slices concatenate to the single-process batch, byte for byte. */
static void check_slices(const char *spec, const wf_data_layout *l, int64_t batch, int nranks, int steps)
{
    int64_t nin = wf_data_layout_input_numel(l), nlab = wf_data_layout_label_numel(l);
    size_t esz = 4; /* float and int32 alike */
    wf_data *one;
    assert_int_equal(wf_data_open(spec, l, 42, &one), WF_OK);
    wf_data *ranks[8];
    for (int r = 0; r < nranks; r++)
        assert_int_equal(wf_data_open(spec, l, 42, &ranks[r]), WF_OK);
    unsigned char *in1 = malloc((size_t)(batch * nin) * esz), *inr = malloc((size_t)(batch * nin) * esz);
    int32_t *lab1 = malloc(sizeof(int32_t) * (size_t)(batch * nlab)),
            *labr = malloc(sizeof(int32_t) * (size_t)(batch * nlab));
    for (int s = 0; s < steps; s++) {
        assert_int_equal(wf_data_next(one, batch, 0, 1, in1, lab1), WF_OK);
        int64_t expect_first = 0;
        for (int r = 0; r < nranks; r++) {
            int64_t first, count;
            wf_data_slice(batch, r, nranks, &first, &count);
            assert_int_equal(first, expect_first);
            expect_first += count;
            assert_int_equal(wf_data_next(ranks[r], batch, r, nranks, inr + (size_t)(first * nin) * esz,
                                          labr + first * nlab),
                             WF_OK);
        }
        assert_int_equal(expect_first, batch);
        assert_memory_equal(in1, inr, (size_t)(batch * nin) * esz);
        assert_memory_equal(lab1, labr, sizeof(int32_t) * (size_t)(batch * nlab));
    }
    for (int r = 0; r < nranks; r++) {
        assert_int_equal(wf_data_position(ranks[r]), batch * steps);
        wf_data_close(ranks[r]);
    }
    wf_data_close(one);
    free(in1);
    free(inr);
    free(lab1);
    free(labr);
}

/* ---- IDX -------------------------------------------------------------------------- */

static void test_idx_parse(void **state)
{
    (void)state;
    char dir[64], p[512];
    make_fashion_dir(dir);
    wf_idx x;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    assert_int_equal(wf_idx_read(p, 0x803, &x), WF_OK);
    assert_int_equal(x.ndim, 3);
    assert_int_equal(x.dims[0], NIMG);
    assert_int_equal(x.dims[1], 28);
    assert_int_equal(x.dims[2], 28);
    assert_memory_equal(x.data, g_pixels, sizeof g_pixels);
    wf_idx_free(&x);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    assert_int_equal(wf_idx_read(p, 0x801, &x), WF_OK);
    assert_int_equal(x.ndim, 1);
    assert_int_equal(x.dims[0], NIMG);
    assert_memory_equal(x.data, g_labels, NIMG);
    wf_idx_free(&x);

    /* The loader: one epoch of NIMG samples is a permutation of the images,
     * each pixel byte/255, each with its own label. */
    wf_data_layout l = features_layout(784, 10);
    char spec[256];
    snprintf(spec, sizeof spec, "fashion-mnist:dir=%s", dir);
    wf_data *d;
    assert_int_equal(wf_data_open(spec, &l, 1, &d), WF_OK);
    assert_int_equal(wf_data_size(d), NIMG);
    float *img = malloc(sizeof(float) * NIMG * 784);
    int32_t lab[NIMG];
    assert_int_equal(wf_data_next(d, NIMG, 0, 1, img, lab), WF_OK);
    int seen[NIMG] = {0};
    for (int s = 0; s < NIMG; s++) {
        /* image i is identified by its first pixel (i * 31) */
        int i = (int)lrintf(img[s * 784] * 255.0f) / 31;
        assert_true(i >= 0 && i < NIMG);
        seen[i]++;
        assert_int_equal(lab[s], g_labels[i]);
        for (int j = 0; j < 784; j++)
            assert_true(img[s * 784 + j] == (float)g_pixels[i * 784 + j] / 255.0f);
    }
    for (int i = 0; i < NIMG; i++)
        assert_int_equal(seen[i], 1);
    free(img);
    wf_data_close(d);

    /* The slices of several ranks concatenate, across epoch boundaries too. */
    check_slices(spec, &l, 3, 2, 4);
    check_slices(spec, &l, 7, 3, 3);
    remove_dir(dir);
}

static void expect_open_error(const char *spec, const wf_data_layout *l, wf_status want, const char *needle1,
                              const char *needle2)
{
    wf_data *d = (wf_data *)1;
    assert_int_equal(wf_data_open(spec, l, 1, &d), want);
    assert_null(d);
    const char *msg = wf_last_error();
    if (!strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
        fail_msg("message '%s' lacks '%s' / '%s'", msg, needle1, needle2 ? needle2 : "");
}

static void test_idx_malformed(void **state)
{
    (void)state;
    char dir[64], p[512], spec[256];
    make_fashion_dir(dir);
    snprintf(spec, sizeof spec, "fashion-mnist:dir=%s", dir);
    wf_data_layout l = features_layout(784, 10);
    uint32_t idims[3] = {NIMG, 28, 28}, ldims[1] = {NIMG};
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);

    /* wrong magic (labels' magic on the images file) */
    write_idx(p, 0x801, 1, ldims, g_labels, NIMG);
    wf_idx x;
    assert_int_equal(wf_idx_read(p, 0x803, &x), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), p));
    assert_non_null(strstr(wf_last_error(), "magic 0x00000801"));
    expect_open_error(spec, &l, WF_FORMAT, p, "magic");

    /* not an unsigned-byte IDX at all */
    write_idx(p, 0x0d03, 3, idims, g_pixels, sizeof g_pixels);
    assert_int_equal(wf_idx_read(p, 0, &x), WF_FORMAT);

    /* truncated payload */
    write_idx(p, 0x803, 3, idims, g_pixels, sizeof g_pixels - 100);
    expect_open_error(spec, &l, WF_FORMAT, p, "truncated");

    /* trailing bytes */
    uint32_t fewer[3] = {NIMG - 1, 28, 28};
    write_idx(p, 0x803, 3, fewer, g_pixels, sizeof g_pixels);
    expect_open_error(spec, &l, WF_FORMAT, p, "trailing");

    /* a zero dimension */
    uint32_t zero[3] = {NIMG, 0, 28};
    write_idx(p, 0x803, 3, zero, g_pixels, 0);
    expect_open_error(spec, &l, WF_FORMAT, p, "dimension 1 is 0");

    /* images of the wrong size */
    uint32_t small[3] = {NIMG, 14, 56};
    write_idx(p, 0x803, 3, small, g_pixels, sizeof g_pixels);
    expect_open_error(spec, &l, WF_FORMAT, p, "28x28");

    /* label count disagrees with the image count */
    write_idx(p, 0x803, 3, fewer, g_pixels, (NIMG - 1) * 784);
    expect_open_error(spec, &l, WF_FORMAT, "labels", "images");

    /* a label out of range */
    write_idx(p, 0x803, 3, idims, g_pixels, sizeof g_pixels);
    char lp[512];
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte.gz", dir);
    uint8_t bad[NIMG] = {1, 2, 12, 3, 4};
    write_idx(lp, 0x801, 1, ldims, bad, NIMG);
    expect_open_error(spec, &l, WF_FORMAT, lp, "label 12 at index 2");

    /* not gzip and not IDX: plain text */
    FILE *f = fopen(lp, "w");
    fputs("hello", f);
    fclose(f);
    expect_open_error(spec, &l, WF_FORMAT, lp, NULL);

    /* missing file */
    unlink(lp);
    expect_open_error(spec, &l, WF_IO, lp, "No such file");

    /* the split that is absent */
    char tspec[300];
    snprintf(tspec, sizeof tspec, "fashion-mnist:split=test,dir=%s", dir);
    expect_open_error(tspec, &l, WF_IO, "t10k-images-idx3-ubyte.gz", NULL);
    remove_dir(dir);
}

/* ---- specs and layouts ------------------------------------------------------------------- */

static void test_bad_specs(void **state)
{
    (void)state;
    wf_data_layout f = features_layout(784, 10), t = tokens_layout(16, 96);
    expect_open_error("imagenet", &f, WF_INVAL, "imagenet", "synthetic");
    expect_open_error("", &f, WF_INVAL, "empty", NULL);
    expect_open_error("fashion-mnist:split=dev", &f, WF_INVAL, "split=dev", NULL);
    expect_open_error("fashion-mnist:colour=1", &f, WF_INVAL, "colour", NULL);
    expect_open_error("text:", &t, WF_INVAL, "needs a path", NULL);
    expect_open_error("text:/nonexistent/corpus.txt", &t, WF_IO, "/nonexistent/corpus.txt", NULL);
    /* a loader the model cannot consume */
    expect_open_error("fashion-mnist", &t, WF_INVAL, "784", NULL);
    expect_open_error("text:/etc/hostname", &f, WF_INVAL, "features", NULL);
    wf_data_layout small = tokens_layout(16, 50);
    expect_open_error("text:/etc/hostname", &small, WF_INVAL, "vocab=50", NULL);
    /* Features with labels per position (AlphaFold2's distogram bins):
     * label k of a sample is (its class + k) mod classes, its class the
     * one-label layout's label of the same sample. */
    wf_data_layout one = features_layout(8, 4), perpos = one;
    perpos.label_ndim = 1;
    perpos.label_shape[0] = 6;
    wf_data *d1 = NULL, *dp = NULL;
    assert_int_equal(wf_data_open("synthetic", &one, 1, &d1), WF_OK);
    assert_int_equal(wf_data_open("synthetic", &perpos, 1, &dp), WF_OK);
    float x1[3 * 8], xp[3 * 8];
    int32_t y1[3], yp[3 * 6];
    assert_int_equal(wf_data_next(d1, 3, 0, 1, x1, y1), WF_OK);
    assert_int_equal(wf_data_next(dp, 3, 0, 1, xp, yp), WF_OK);
    assert_memory_equal(x1, xp, sizeof x1);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 6; k++)
            assert_int_equal(yp[i * 6 + k], (y1[i] + k) % 4);
    wf_data_close(d1);
    wf_data_close(dp);

    /* bad calls */
    wf_data *d;
    assert_int_equal(wf_data_open("synthetic", &f, 1, &d), WF_OK);
    float x[784];
    int32_t y[1];
    assert_int_equal(wf_data_next(d, 0, 0, 1, x, y), WF_INVAL);
    assert_int_equal(wf_data_next(d, 1, 2, 2, x, y), WF_INVAL);
    assert_int_equal(wf_data_seek(d, -1), WF_INVAL);
    wf_data_close(d);
}

static void test_layout_from_zoo(void **state)
{
    (void)state;
    struct {
        const char *model;
        wf_dtype dtype;
        int input_ndim;
        int64_t input_numel, label_numel, classes, vocab;
    } cases[] = {
        {"mlp-tiny", WF_DTYPE_FP32, 1, 784, 1, 10, 0},
        {"cnn-tiny", WF_DTYPE_FP32, 3, 784, 1, 10, 0},
        {"gpt-tiny", WF_DTYPE_INT32, 1, 32, 32, 96, 96},
        {"bert-tiny", WF_DTYPE_INT32, 1, 32, 32, 96, 96},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wf_model_config m;
        assert_int_equal(wf_model_lookup(cases[i].model, &m), WF_OK);
        wf_graph g;
        wf_graph_init(&g, cases[i].model);
        assert_int_equal(wf_model_build(&m, 4, &g), WF_OK);
        wf_data_layout l;
        if (wf_data_layout_from_graph(&g, &l) != WF_OK)
            fail_msg("%s: %s", cases[i].model, wf_last_error());
        assert_int_equal(l.input_dtype, cases[i].dtype);
        assert_int_equal(l.input_ndim, cases[i].input_ndim);
        assert_int_equal(wf_data_layout_input_numel(&l), cases[i].input_numel);
        assert_int_equal(wf_data_layout_label_numel(&l), cases[i].label_numel);
        assert_int_equal(l.classes, cases[i].classes);
        assert_int_equal(l.vocab, cases[i].vocab);
        /* synthetic data fits every zoo layout */
        wf_data *d;
        assert_int_equal(wf_data_open("synthetic", &l, 3, &d), WF_OK);
        wf_data_close(d);
        wf_graph_free(&g);
    }
}

/* ---- determinism and slices ----------------------------------------------------------------- */

static void test_slices_and_determinism(void **state)
{
    (void)state;
    wf_data_layout f = features_layout(20, 5), t = tokens_layout(12, 96);
    for (int n = 1; n <= 4; n++) {
        check_slices("synthetic", &f, 8, n, 3);
        check_slices("synthetic", &f, 7, n, 3); /* uneven slices */
        check_slices("synthetic", &t, 6, n, 3);
    }
    char path[] = "/tmp/weft-test-text-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *txt = "It was the best of times,\nit was the worst of times.\n\tThe end\xc3\xa9.\n";
    assert_int_equal(write(fd, txt, strlen(txt)), (ssize_t)strlen(txt));
    close(fd);
    char spec[64];
    snprintf(spec, sizeof spec, "text:%s", path);
    for (int n = 1; n <= 4; n++)
        check_slices(spec, &t, 5, n, 3);

    /* Same seed, same stream; another seed, another stream; seek replays. */
    wf_data *a, *b, *c;
    assert_int_equal(wf_data_open("synthetic", &f, 7, &a), WF_OK);
    assert_int_equal(wf_data_open("synthetic", &f, 7, &b), WF_OK);
    assert_int_equal(wf_data_open("synthetic", &f, 8, &c), WF_OK);
    float xa[4 * 20], xb[4 * 20], xc[4 * 20];
    int32_t ya[4], yb[4], yc[4];
    for (int s = 0; s < 3; s++) {
        assert_int_equal(wf_data_next(a, 4, 0, 1, xa, ya), WF_OK);
        assert_int_equal(wf_data_next(b, 4, 0, 1, xb, yb), WF_OK);
        assert_int_equal(wf_data_next(c, 4, 0, 1, xc, yc), WF_OK);
        assert_memory_equal(xa, xb, sizeof xa);
        assert_memory_equal(ya, yb, sizeof ya);
        assert_memory_not_equal(xa, xc, sizeof xa);
    }
    assert_int_equal(wf_data_position(b), 12);
    assert_int_equal(wf_data_seek(b, 4), WF_OK);
    assert_int_equal(wf_data_next(a, 4, 0, 1, xa, ya), WF_OK); /* a: samples 12..15 */
    assert_int_equal(wf_data_next(b, 4, 0, 1, xb, yb), WF_OK); /* b: samples 4..7 again */
    assert_memory_not_equal(xa, xb, sizeof xa);
    wf_data_close(a);
    assert_int_equal(wf_data_open("synthetic", &f, 7, &a), WF_OK);
    assert_int_equal(wf_data_next(a, 4, 0, 1, xa, ya), WF_OK);
    assert_int_equal(wf_data_next(a, 4, 0, 1, xa, ya), WF_OK); /* samples 4..7 */
    assert_memory_equal(xa, xb, sizeof xa);
    assert_memory_equal(ya, yb, sizeof ya);
    wf_data_close(a);
    wf_data_close(b);
    wf_data_close(c);

    /* Text windows: labels are the inputs shifted by one, and each window is
     * a substring of the file in the fixed vocabulary. */
    wf_data *d;
    assert_int_equal(wf_data_open(spec, &t, 3, &d), WF_OK);
    assert_int_equal(wf_data_size(d), (int64_t)strlen(txt) - 12);
    int32_t ids[8 * 12], lab[8 * 12];
    assert_int_equal(wf_data_next(d, 8, 0, 1, ids, lab), WF_OK);
    size_t tl = strlen(txt);
    for (int s = 0; s < 8; s++) {
        int found = 0;
        for (size_t start = 0; start + 12 < tl && !found; start++) {
            int ok = 1;
            for (int j = 0; j < 12 && ok; j++)
                ok = ids[s * 12 + j] == wf_text_token((unsigned char)txt[start + j]) &&
                     lab[s * 12 + j] == wf_text_token((unsigned char)txt[start + j + 1]);
            found = ok;
        }
        assert_true(found);
        for (int j = 0; j < 12; j++)
            assert_true(ids[s * 12 + j] >= 0 && ids[s * 12 + j] < WF_TEXT_VOCAB);
    }
    wf_data_close(d);
    wf_data_layout longseq = tokens_layout((int64_t)tl, 96);
    snprintf(spec, sizeof spec, "%s", path); /* a bare path is text */
    expect_open_error(spec, &longseq, WF_INVAL, "fewer than seq+1", NULL);
    unlink(path);
}

static void test_text_vocab(void **state)
{
    (void)state;
    assert_int_equal(wf_text_token('\n'), 0);
    assert_int_equal(wf_text_token(' '), 1);
    assert_int_equal(wf_text_token('~'), 95);
    assert_int_equal(wf_text_token('\t'), 1);
    assert_int_equal(wf_text_token(0xc3), 1);
    for (int c = 32; c <= 126; c++)
        assert_int_equal(wf_text_char(wf_text_token((unsigned char)c)), c);
    assert_int_equal(wf_text_char(0), '\n');
    assert_int_equal(wf_text_char(96), '?');
    assert_int_equal(wf_text_char(-1), '?');
}

/* ---- synthetic labels are learnable ------------------------------------------------------------ */

static void test_synthetic_learnable(void **state)
{
    (void)state;
    /* Features: the nearest class mean (estimated on 400 samples) classifies
     * 400 fresh samples almost perfectly. */
    enum { F = 32, C = 6, N = 400 };
    wf_data_layout l = features_layout(F, C);
    wf_data *d;
    assert_int_equal(wf_data_open("synthetic", &l, 11, &d), WF_OK);
    float *x = malloc(sizeof(float) * N * F);
    int32_t y[N];
    double mean[C][F] = {{0}};
    int cnt[C] = {0};
    assert_int_equal(wf_data_next(d, N, 0, 1, x, y), WF_OK);
    for (int s = 0; s < N; s++) {
        assert_true(y[s] >= 0 && y[s] < C);
        cnt[y[s]]++;
        for (int j = 0; j < F; j++)
            mean[y[s]][j] += x[s * F + j];
    }
    for (int c = 0; c < C; c++) {
        assert_true(cnt[c] > N / C / 3); /* every class occurs */
        for (int j = 0; j < F; j++)
            mean[c][j] /= cnt[c];
    }
    assert_int_equal(wf_data_next(d, N, 0, 1, x, y), WF_OK);
    int correct = 0;
    for (int s = 0; s < N; s++) {
        int best = 0;
        double bd = INFINITY;
        for (int c = 0; c < C; c++) {
            double dist = 0;
            for (int j = 0; j < F; j++)
                dist += (x[s * F + j] - mean[c][j]) * (x[s * F + j] - mean[c][j]);
            if (dist < bd) {
                bd = dist;
                best = c;
            }
        }
        correct += best == y[s];
    }
    assert_true(correct >= N * 95 / 100);
    free(x);
    wf_data_close(d);

    /* Tokens: the next token is a function of the current one. */
    wf_data_layout t = tokens_layout(16, 40);
    assert_int_equal(wf_data_open("synthetic", &t, 5, &d), WF_OK);
    int32_t ids[50 * 16], lab[50 * 16], next[40];
    for (int i = 0; i < 40; i++)
        next[i] = -1;
    assert_int_equal(wf_data_next(d, 50, 0, 1, ids, lab), WF_OK);
    for (int s = 0; s < 50; s++)
        for (int j = 0; j < 16; j++) {
            int32_t a = ids[s * 16 + j], b = lab[s * 16 + j];
            assert_true(a >= 0 && a < 40 && b >= 0 && b < 40);
            if (j + 1 < 16)
                assert_int_equal(ids[s * 16 + j + 1], b);
            if (next[a] < 0)
                next[a] = b;
            assert_int_equal(next[a], b);
        }
    wf_data_close(d);
}

/* ---- the real corpora ------------------------------------------------------------------------------ */

static void test_real_fashion_mnist(void **state)
{
    (void)state;
    const char *ip = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const char *lp = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
    if (access(ip, R_OK) != 0 || access(lp, R_OK) != 0) {
        print_message("skipping: %s absent (install dataset-fashion-mnist: scripts/setup-deps)\n", ip);
        skip();
    }
    wf_idx im, lb;
    assert_int_equal(wf_idx_read(ip, 0x803, &im), WF_OK);
    assert_int_equal(im.ndim, 3);
    assert_int_equal(im.dims[0], 60000);
    assert_int_equal(im.dims[1], 28);
    assert_int_equal(im.dims[2], 28);
    assert_int_equal(wf_idx_read(lp, 0x801, &lb), WF_OK);
    assert_int_equal(lb.ndim, 1);
    assert_int_equal(lb.dims[0], 60000);
    int count[10] = {0};
    for (int i = 0; i < 60000; i++) {
        assert_true(lb.data[i] <= 9);
        count[lb.data[i]]++;
    }
    for (int c = 0; c < 10; c++)
        assert_int_equal(count[c], 6000); /* Fashion-MNIST is balanced */
    wf_idx_free(&im);

    wf_data_layout l = features_layout(784, 10);
    wf_data *d;
    assert_int_equal(wf_data_open("fashion-mnist", &l, 1, &d), WF_OK);
    assert_int_equal(wf_data_size(d), 60000);
    float *x = malloc(sizeof(float) * 64 * 784);
    int32_t y[64];
    assert_int_equal(wf_data_next(d, 64, 0, 1, x, y), WF_OK);
    for (int i = 0; i < 64 * 784; i++)
        assert_true(x[i] >= 0.0f && x[i] <= 1.0f);
    for (int i = 0; i < 64; i++)
        assert_true(y[i] >= 0 && y[i] <= 9);
    free(x);
    wf_data_close(d);
    wf_idx_free(&lb);

    assert_int_equal(wf_data_open("fashion-mnist:split=test", &l, 1, &d), WF_OK);
    assert_int_equal(wf_data_size(d), 10000);
    wf_data_close(d);
}

static void test_real_fortunes(void **state)
{
    (void)state;
    if (access("/usr/share/games/fortunes/fortunes", R_OK) != 0) {
        print_message("skipping: /usr/share/games/fortunes absent (install fortunes: scripts/setup-deps)\n");
        skip();
    }
    wf_data_layout t = tokens_layout(128, 96);
    wf_data *a, *b;
    assert_int_equal(wf_data_open("text:fortunes", &t, 1, &a), WF_OK);
    assert_int_equal(wf_data_open("fortunes", &t, 1, &b), WF_OK);
    assert_true(wf_data_size(a) > 1000000);
    assert_int_equal(wf_data_size(a), wf_data_size(b));
    int32_t ia[4 * 128], la[4 * 128], ib[4 * 128], lb[4 * 128];
    assert_int_equal(wf_data_next(a, 4, 0, 1, ia, la), WF_OK);
    assert_int_equal(wf_data_next(b, 4, 0, 1, ib, lb), WF_OK);
    assert_memory_equal(ia, ib, sizeof ia);
    wf_data_close(a);
    wf_data_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_parse),
        cmocka_unit_test(test_idx_malformed),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_layout_from_zoo),
        cmocka_unit_test(test_slices_and_determinism),
        cmocka_unit_test(test_text_vocab),
        cmocka_unit_test(test_synthetic_learnable),
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test(test_real_fortunes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
