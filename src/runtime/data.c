/* Data loaders for the runtime: a seeded synthetic generator, Fashion-MNIST
 * (IDX gz files from Debian's dataset-fashion-mnist), and character-level text
 * (any file, or the Debian `fortunes` corpus).
 *
 * Every loader maps a global sample number p (counted from 0 over the whole
 * run) to one sample by a pure function of (p, seed): counter-based hashing for
 * the synthetic and text loaders, a seeded per-epoch permutation for
 * Fashion-MNIST. So a rank fills only its contiguous slice of a global batch,
 * and N ranks together see exactly what one process sees; the loader's whole
 * state is its position, which checkpoints store.
 *
 * This file is not the training loop: it only fills caller-owned buffers. */
#include "weft/runtime_io.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define FORTUNES_DIR "/usr/share/games/fortunes"
#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_BYTES ((int64_t)1 << 34)

/* Distinct stream constants, so the hashes of one seed do not collide across uses. */
#define STREAM_SAMPLE 0x5a4d504c45ull /* per-sample noise / window start */
#define STREAM_PERM 0x5045524dull     /* synthetic token permutation */
#define STREAM_PROTO 0x50524f54ull    /* class prototypes */
#define STREAM_EPOCH 0x45504f43ull    /* fashion-mnist epoch shuffles */

typedef enum { KIND_SYNTHETIC, KIND_FASHION, KIND_TEXT } data_kind;

struct wf_data {
    data_kind kind;
    wf_data_layout layout;
    uint64_t seed;
    int64_t pos; /* global samples drawn so far */
    char desc[256];
    /* synthetic tokens: a permutation of [0, ntok_range) (next token = perm[token]) */
    int32_t *perm;
    int64_t tok_range;
    /* fashion-mnist */
    uint8_t *images; /* [n, 784] */
    uint8_t *labels; /* [n] */
    int64_t n;
    int32_t *epoch_perm; /* [n], the shuffle of epoch `perm_epoch` */
    int64_t perm_epoch;
    /* text: token ids of the whole corpus */
    uint8_t *text; /* [ntext] */
    int64_t ntext;
};

/* ---- counter-based randomness (splitmix64) ----------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t s;
} rng64;

static rng64 rng_for(uint64_t seed, uint64_t stream, uint64_t index)
{
    rng64 r = {mix64(seed ^ mix64(stream ^ mix64(index)))};
    return r;
}

static uint64_t rng_next(rng64 *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n >= 1), without modulo bias worth speaking of: 64-bit
 * source, n far below 2^32 in practice. */
static uint64_t rng_below(rng64 *r, uint64_t n)
{
    return rng_next(r) % n;
}

/* Uniform float in [0, 1) with 24 random bits. */
static float rng_unit(rng64 *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* ---- text vocabulary ----------------------------------------------------------- */

int wf_text_token(unsigned char c)
{
    if (c == '\n')
        return 0;
    if (c >= 32 && c <= 126)
        return c - 31;
    return ' ' - 31;
}

char wf_text_char(int id)
{
    if (id == 0)
        return '\n';
    if (id >= 1 && id < WF_TEXT_VOCAB)
        return (char)(id + 31);
    return '?';
}

/* ---- layout ----------------------------------------------------------------------------- */

int64_t wf_data_layout_input_numel(const wf_data_layout *l)
{
    int64_t n = 1;
    for (int i = 0; i < l->input_ndim; i++)
        n *= l->input_shape[i];
    return n;
}

int64_t wf_data_layout_label_numel(const wf_data_layout *l)
{
    int64_t n = 1;
    for (int i = 0; i < l->label_ndim; i++)
        n *= l->label_shape[i];
    return n;
}

static int64_t tensor_numel(const wf_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

wf_status wf_data_layout_from_graph(const wf_graph *g, wf_data_layout *out)
{
    memset(out, 0, sizeof *out);
    int in = -1, nin = 0, nlab = 0, ids = -1;
    for (int i = 0; i < g->ntensors; i++) {
        if (g->tensors[i].role == WF_ROLE_INPUT) {
            in = i;
            nin++;
            if (strcmp(g->tensors[i].name, "ids") == 0)
                ids = i;
        } else if (g->tensors[i].role == WF_ROLE_LABEL) {
            nlab++;
        }
    }
    /* With several inputs (BERT's ids and token_types) the loader feeds "ids". */
    if (nin > 1 && ids >= 0)
        in = ids;
    if ((nin != 1 && ids < 0) || nlab != 1)
        return wf_errorf(WF_INVAL,
                         "graph %s has %d input and %d label tensors; the data loaders feed one input (or "
                         "the one named ids) and one label tensor",
                         g->name, nin, nlab);
    return wf_data_layout_from_input(g, in, out);
}

wf_status wf_data_layout_from_input(const wf_graph *g, int in, wf_data_layout *out)
{
    memset(out, 0, sizeof *out);
    int lab = -1, nlab = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].role == WF_ROLE_LABEL) {
            lab = i;
            nlab++;
        }
    if (in < 0 || in >= g->ntensors || g->tensors[in].role != WF_ROLE_INPUT || nlab != 1)
        return wf_errorf(WF_INVAL, "graph %s: the loader's input is not an input, or the graph has %d label "
                                   "tensors (one expected)", g->name, nlab);
    const wf_tensor *ti = &g->tensors[in], *tl = &g->tensors[lab];
    if (ti->ndim < 1 || ti->shape[0] < 1)
        return wf_errorf(WF_INVAL, "graph %s: input %s has no batch axis", g->name, ti->name);
    int64_t mbs = ti->shape[0];
    switch (ti->dtype) {
    case WF_DTYPE_FP32:
    case WF_DTYPE_FP16:
    case WF_DTYPE_BF16:
        out->input_dtype = WF_DTYPE_FP32;
        break;
    case WF_DTYPE_INT32:
    case WF_DTYPE_INT64:
        out->input_dtype = WF_DTYPE_INT32;
        break;
    default:
        return wf_errorf(WF_INVAL, "graph %s: input %s has a dtype the data loaders cannot fill",
                         g->name, ti->name);
    }
    out->input_ndim = ti->ndim - 1;
    for (int i = 1; i < ti->ndim; i++)
        out->input_shape[i - 1] = ti->shape[i];
    if (tl->dtype != WF_DTYPE_INT32 && tl->dtype != WF_DTYPE_INT64)
        return wf_errorf(WF_INVAL, "graph %s: labels %s are not integers", g->name, tl->name);
    if (tl->ndim >= 1 && tl->shape[0] == mbs) {
        out->label_ndim = tl->ndim - 1;
        for (int i = 1; i < tl->ndim; i++)
            out->label_shape[i - 1] = tl->shape[i];
    } else {
        /* Labels flattened over batch and positions, e.g. [B*S]. */
        int64_t n = tensor_numel(tl);
        if (n % mbs != 0)
            return wf_errorf(WF_INVAL, "graph %s: labels %s (%lld elements) do not split into batch %lld",
                             g->name, tl->name, (long long)n, (long long)mbs);
        out->label_ndim = n / mbs == 1 ? 0 : 1;
        out->label_shape[0] = n / mbs;
    }
    for (int o = 0; o < g->nops; o++) {
        const wf_op *op = &g->ops[o];
        if (op->pass != WF_PASS_FORWARD)
            continue;
        if (op->kind == WF_OP_CROSS_ENTROPY && op->nin >= 2 && op->in[1] == lab && op->in[0] >= 0) {
            const wf_tensor *logits = &g->tensors[op->in[0]];
            out->classes = logits->shape[logits->ndim - 1];
        }
        if (op->kind == WF_OP_EMBEDDING && op->nin >= 2 && op->in[0] == in && op->in[1] >= 0)
            out->vocab = g->tensors[op->in[1]].shape[0];
    }
    if (out->classes < 1)
        return wf_errorf(WF_INVAL, "graph %s: no cross-entropy op reads the labels %s", g->name, tl->name);
    if (out->input_dtype == WF_DTYPE_INT32 && out->vocab < 1)
        return wf_errorf(WF_INVAL, "graph %s: no embedding op reads the token ids %s", g->name, ti->name);
    return WF_OK;
}

/* ---- IDX files -------------------------------------------------------------------------- */

void wf_idx_free(wf_idx *x)
{
    free(x->data);
    memset(x, 0, sizeof *x);
}

static wf_status open_gz(const char *path, const char *hint, gzFile *out, size_t *size_out)
{
    int fd;
    size_t size;
    if (access(path, F_OK) != 0)
        return wf_errorf(WF_IO, "cannot open %s: %s%s", path, strerror(errno), hint);
    wf_status st = wf_file_open_input(path, WF_FILE_DATA, &fd, &size);
    if (st != WF_OK)
        return st;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return wf_errorf(WF_IO, "cannot open %s: gzdopen failed", path);
    }
    if (size_out)
        *size_out = size;
    gzbuffer(f, 1 << 17);
    *out = f;
    return WF_OK;
}

/* Reads exactly len bytes; returns the count read (short on EOF) or -1 on a
 * gzip error. */
static int64_t gz_read_full(gzFile f, void *buf, int64_t len)
{
    int64_t got = 0;
    while (got < len) {
        int64_t want = len - got;
        if (want > (1 << 30))
            want = 1 << 30;
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static wf_status idx_read_hint(const char *path, uint32_t expect_magic, const char *hint, wf_idx *out)
{
    memset(out, 0, sizeof *out);
    gzFile f = NULL;
    size_t file_bytes = 0;
    wf_status st = open_gz(path, hint, &f, &file_bytes);
    if (st != WF_OK)
        return st;
    unsigned char hdr[4 * 5];
    int errnum = 0;
    int64_t got = gz_read_full(f, hdr, 4);
    if (got < 0) {
        st = wf_errorf(WF_FORMAT, "%s: not a readable gzip/IDX file (%s)", path, gzerror(f, &errnum));
        goto done;
    }
    if (got < 4) {
        st = wf_errorf(WF_FORMAT, "%s: truncated IDX header (%lld of 4 magic bytes)", path, (long long)got);
        goto done;
    }
    uint32_t magic = be32(hdr);
    int ndim = (int)(magic & 0xff);
    if (expect_magic != 0 && magic != expect_magic) {
        st = wf_errorf(WF_FORMAT, "%s: IDX magic 0x%08x, expected 0x%08x", path, (unsigned)magic,
                       (unsigned)expect_magic);
        goto done;
    }
    if ((magic >> 8) != 0x08 || ndim < 1 || ndim > 4) {
        st = wf_errorf(WF_FORMAT, "%s: IDX magic 0x%08x is not an unsigned-byte array of 1 to 4 dimensions",
                       path, (unsigned)magic);
        goto done;
    }
    got = gz_read_full(f, hdr + 4, 4 * ndim);
    if (got != 4 * ndim) {
        st = wf_errorf(WF_FORMAT, "%s: truncated IDX header (%d dimensions announced)", path, ndim);
        goto done;
    }
    int64_t total = 1;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        out->dims[i] = be32(hdr + 4 + 4 * i);
        if (out->dims[i] == 0) {
            st = wf_errorf(WF_FORMAT, "%s: IDX dimension %d is 0", path, i);
            goto done;
        }
        if (wf_mul_i64(total, out->dims[i], &total) != 0 || total > IDX_MAX_BYTES) {
            st = wf_errorf(WF_FORMAT, "%s: IDX dimensions announce more than %lld bytes", path,
                           (long long)IDX_MAX_BYTES);
            goto done;
        }
    }
    /* Deflate expands at most 1032:1, so a file this small cannot hold what its
     * header announces: refuse before allocating. */
    if ((uint64_t)total > (uint64_t)file_bytes * 1032u + 64u) {
        st = wf_errorf(WF_FORMAT, "%s: IDX header announces %lld bytes, more than a %zu-byte gzip file can hold",
                       path, (long long)total, file_bytes);
        goto done;
    }
    out->data = malloc((size_t)total);
    if (!out->data) {
        st = wf_errorf(WF_NOMEM, "out of memory reading %s (%lld bytes)", path, (long long)total);
        goto done;
    }
    got = gz_read_full(f, out->data, total);
    if (got < 0) {
        st = wf_errorf(WF_FORMAT, "%s: corrupt gzip data (%s)", path, gzerror(f, &errnum));
        goto done;
    }
    if (got < total) {
        st = wf_errorf(WF_FORMAT, "%s: truncated: %lld of %lld data bytes", path, (long long)got,
                       (long long)total);
        goto done;
    }
    unsigned char extra;
    got = gz_read_full(f, &extra, 1);
    if (got != 0) {
        st = wf_errorf(WF_FORMAT, "%s: %s after the %lld data bytes the header announces", path,
                       got < 0 ? "corrupt gzip data" : "trailing bytes", (long long)total);
        goto done;
    }
done:
    gzclose(f);
    if (st != WF_OK)
        wf_idx_free(out);
    return st;
}

wf_status wf_idx_read(const char *path, uint32_t expect_magic, wf_idx *out)
{
    return idx_read_hint(path, expect_magic, "", out);
}

/* ---- opening ---------------------------------------------------------------------------- */

static wf_status open_fashion(wf_data *d, const char *dir, int test_split)
{
    const wf_data_layout *l = &d->layout;
    int64_t fe = wf_data_layout_input_numel(l);
    if (l->input_dtype != WF_DTYPE_FP32 || fe != 784 || l->label_ndim != 0 || l->classes < 10)
        return wf_errorf(WF_INVAL,
                         "data fashion-mnist gives 784 pixels and one label in 0..9 per sample; the model "
                         "takes %lld %s per sample, %lld labels per sample, %lld classes",
                         (long long)fe, l->input_dtype == WF_DTYPE_FP32 ? "features" : "token ids",
                         (long long)wf_data_layout_label_numel(l), (long long)l->classes);
    const char *pre = test_split ? "t10k" : "train";
    const char *hint = strcmp(dir, FASHION_DIR) == 0
                           ? " (install the Debian package dataset-fashion-mnist: scripts/setup-deps)"
                           : "";
    char ipath[1024], lpath[1024];
    if (snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, pre) >= (int)sizeof ipath ||
        snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, pre) >= (int)sizeof lpath)
        return wf_errorf(WF_INVAL, "fashion-mnist directory path too long: %s", dir);
    wf_idx im, lb;
    wf_status st = idx_read_hint(ipath, IDX_MAGIC_IMAGES, hint, &im);
    if (st != WF_OK)
        return st;
    st = idx_read_hint(lpath, IDX_MAGIC_LABELS, hint, &lb);
    if (st != WF_OK) {
        wf_idx_free(&im);
        return st;
    }
    if (im.dims[1] != 28 || im.dims[2] != 28) {
        st = wf_errorf(WF_FORMAT, "%s: images are %lldx%lld, expected 28x28", ipath, (long long)im.dims[1],
                       (long long)im.dims[2]);
        goto fail;
    }
    if (lb.dims[0] != im.dims[0]) {
        st = wf_errorf(WF_FORMAT, "%s has %lld labels but %s has %lld images", lpath, (long long)lb.dims[0],
                       ipath, (long long)im.dims[0]);
        goto fail;
    }
    for (int64_t i = 0; i < lb.dims[0]; i++)
        if (lb.data[i] > 9) {
            st = wf_errorf(WF_FORMAT, "%s: label %d at index %lld is outside 0..9", lpath, lb.data[i],
                           (long long)i);
            goto fail;
        }
    d->kind = KIND_FASHION;
    d->images = im.data;
    d->labels = lb.data;
    d->n = im.dims[0];
    d->perm_epoch = -1;
    d->epoch_perm = malloc((size_t)d->n * sizeof *d->epoch_perm);
    if (!d->epoch_perm)
        return wf_errorf(WF_NOMEM, "out of memory for the fashion-mnist shuffle");
    snprintf(d->desc, sizeof d->desc, "fashion-mnist %s (%lld images of 28x28)", test_split ? "test" : "train",
             (long long)d->n);
    return WF_OK;
fail:
    wf_idx_free(&im);
    wf_idx_free(&lb);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The fortunes corpus: files without an extension, sorted, concatenated. */
static wf_status read_fortunes(char **text, size_t *len)
{
    const char *hint = " (install the Debian package fortunes: scripts/setup-deps)";
    DIR *dp = opendir(FORTUNES_DIR);
    if (!dp)
        return wf_errorf(WF_IO, "cannot open %s: %s%s", FORTUNES_DIR, strerror(errno), hint);
    char **names = NULL;
    size_t nn = 0;
    int cap = 0;
    wf_status st = WF_OK;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.' || strchr(e->d_name, '.'))
            continue;
        if (wf_grow(&names, &cap, (int64_t)nn + 1, sizeof *names, 64) != 0) {
            st = wf_errorf(WF_NOMEM, "out of memory listing %s", FORTUNES_DIR);
            goto out;
        }
        names[nn] = strdup(e->d_name);
        if (!names[nn]) {
            st = wf_errorf(WF_NOMEM, "out of memory listing %s", FORTUNES_DIR);
            goto out;
        }
        nn++;
    }
    qsort(names, nn, sizeof *names, cmp_str);
    char *all = NULL;
    size_t total = 0;
    for (size_t i = 0; i < nn; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FORTUNES_DIR, names[i]);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        char *part;
        size_t plen;
        st = wf_file_read_kind(path, WF_FILE_DATA, &part, &plen);
        if (st != WF_OK) {
            free(all);
            goto out;
        }
        char *nb = realloc(all, total + plen + 1);
        if (!nb) {
            free(part);
            free(all);
            st = wf_errorf(WF_NOMEM, "out of memory reading %s", path);
            goto out;
        }
        all = nb;
        memcpy(all + total, part, plen);
        total += plen;
        all[total] = 0;
        free(part);
    }
    if (total == 0) {
        free(all);
        st = wf_errorf(WF_IO, "no fortune files in %s%s", FORTUNES_DIR, hint);
        goto out;
    }
    *text = all;
    *len = total;
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    closedir(dp);
    return st;
}

static wf_status open_text(wf_data *d, const char *path)
{
    const wf_data_layout *l = &d->layout;
    int64_t seq = wf_data_layout_input_numel(l);
    if (l->input_dtype != WF_DTYPE_INT32 || l->input_ndim != 1 || wf_data_layout_label_numel(l) != seq ||
        l->label_ndim != 1)
        return wf_errorf(WF_INVAL,
                         "data text:%s gives a window of token ids with the next token as label at each "
                         "position; the model takes %s with %lld labels per sample",
                         path, l->input_dtype == WF_DTYPE_FP32 ? "features" : "token ids",
                         (long long)wf_data_layout_label_numel(l));
    if (l->vocab < WF_TEXT_VOCAB || l->classes < WF_TEXT_VOCAB)
        return wf_errorf(WF_INVAL, "data text:%s needs a vocabulary of at least %d characters; the model has "
                                   "vocab=%lld and %lld classes",
                         path, WF_TEXT_VOCAB, (long long)l->vocab, (long long)l->classes);
    char *raw = NULL;
    size_t len = 0;
    wf_status st;
    int fortunes = strcmp(path, "fortunes") == 0;
    if (fortunes) {
        st = read_fortunes(&raw, &len);
    } else {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return wf_errorf(WF_IO, "cannot open text data %s: %s", path, strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return wf_errorf(WF_IO, "text data %s is not a regular file", path);
        st = wf_file_read_kind(path, WF_FILE_DATA, &raw, &len);
    }
    if (st != WF_OK)
        return st;
    if ((int64_t)len < seq + 1) {
        free(raw);
        return wf_errorf(WF_INVAL, "text data %s has %zu characters, fewer than seq+1 = %lld", path, len,
                         (long long)(seq + 1));
    }
    d->text = malloc(len);
    if (!d->text) {
        free(raw);
        return wf_errorf(WF_NOMEM, "out of memory for text data %s", path);
    }
    for (size_t i = 0; i < len; i++)
        d->text[i] = (uint8_t)wf_text_token((unsigned char)raw[i]);
    free(raw);
    d->ntext = (int64_t)len;
    d->kind = KIND_TEXT;
    snprintf(d->desc, sizeof d->desc, "text %s (%lld characters, vocabulary %d)",
             fortunes ? "fortunes corpus " FORTUNES_DIR : path, (long long)d->ntext, WF_TEXT_VOCAB);
    return WF_OK;
}

static wf_status open_synthetic(wf_data *d)
{
    const wf_data_layout *l = &d->layout;
    int64_t nin = wf_data_layout_input_numel(l), nlab = wf_data_layout_label_numel(l);
    d->kind = KIND_SYNTHETIC;
    if (l->input_dtype == WF_DTYPE_FP32) {
        if (l->label_ndim != 0)
            snprintf(d->desc, sizeof d->desc, "synthetic: %lld features, %lld labels of %lld classes per sample "
                     "(prototype + noise; label k = (class + k) mod classes)", (long long)nin, (long long)nlab,
                     (long long)l->classes);
        else
            snprintf(d->desc, sizeof d->desc, "synthetic: %lld features, %lld classes (prototype + noise)",
                     (long long)nin, (long long)l->classes);
        return WF_OK;
    }
    d->tok_range = l->vocab < l->classes || l->label_ndim == 0 ? l->vocab : l->classes;
    if (d->tok_range > ((int64_t)1 << 30))
        return wf_errorf(WF_INVAL, "data synthetic: vocabulary %lld too large", (long long)d->tok_range);
    d->perm = malloc((size_t)d->tok_range * sizeof *d->perm);
    if (!d->perm)
        return wf_errorf(WF_NOMEM, "out of memory for the synthetic token permutation");
    for (int64_t i = 0; i < d->tok_range; i++)
        d->perm[i] = (int32_t)i;
    rng64 r = rng_for(d->seed, STREAM_PERM, 0);
    for (int64_t i = d->tok_range - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    snprintf(d->desc, sizeof d->desc, "synthetic: %lld tokens from %lld ids (seeded permutation chain)",
             (long long)nin, (long long)d->tok_range);
    return WF_OK;
}

wf_status wf_data_open(const char *spec, const wf_data_layout *layout, uint64_t seed, wf_data **out)
{
    *out = NULL;
    if (!spec || !spec[0])
        return wf_errorf(WF_INVAL, "empty data spec (expected synthetic, fashion-mnist, text:PATH or fortunes)");
    if (layout->input_ndim < 0 || layout->input_ndim > WF_MAX_DIMS || layout->label_ndim < 0 ||
        layout->label_ndim > WF_MAX_DIMS || layout->classes < 1 ||
        (layout->input_dtype == WF_DTYPE_INT32 && layout->vocab < 1) ||
        (layout->input_dtype != WF_DTYPE_INT32 && layout->input_dtype != WF_DTYPE_FP32) ||
        wf_data_layout_input_numel(layout) < 1 || wf_data_layout_label_numel(layout) < 1)
        return wf_errorf(WF_INVAL, "data %s: invalid sample layout (%d input dims, %d label dims, %lld classes)",
                         spec, layout->input_ndim, layout->label_ndim, (long long)layout->classes);
    wf_data *d = calloc(1, sizeof *d);
    if (!d)
        return wf_errorf(WF_NOMEM, "out of memory opening data %s", spec);
    d->layout = *layout;
    d->seed = seed;
    wf_status st;
    struct stat sb;
    /* Spelling variants of the named sets resolve ("Fashion_MNIST"). */
    static const char *const named[] = {"synthetic", "fashion-mnist", "fortunes"};
    char fixed[1024], head[64];
    const char *colon = strchr(spec, ':');
    size_t hn = colon ? (size_t)(colon - spec) : strlen(spec);
    snprintf(head, sizeof head, "%.*s", (int)(hn < sizeof head ? hn : sizeof head - 1), spec);
    int k = strncmp(spec, "text:", 5) == 0 || stat(spec, &sb) == 0 ? -1 : wf_resolve_fold(head, named, 3);
    if (k >= 0) {
        snprintf(fixed, sizeof fixed, "%s%s", named[k], colon ? colon : "");
        spec = fixed;
    }
    char dym[96];
    if (strncmp(spec, "text:", 5) == 0 && spec[5] && strcmp(spec + 5, "fortunes") != 0 &&
        stat(spec + 5, &sb) != 0 && wf_suggest(spec + 5, named + 2, 1)) {
        st = wf_errorf(WF_INVAL, "data %s: no such file%s", spec,
                       wf_did_you_mean("text:fortunes", dym, sizeof dym));
    } else if (strcmp(spec, "synthetic") == 0) {
        st = open_synthetic(d);
    } else if (strncmp(spec, "text:", 5) == 0) {
        st = spec[5] ? open_text(d, spec + 5) : wf_errorf(WF_INVAL, "data text: needs a path (text:PATH)");
    } else if (strcmp(spec, "fortunes") == 0) {
        st = open_text(d, "fortunes");
    } else if (strncmp(spec, "fashion-mnist", 13) == 0 && (spec[13] == 0 || spec[13] == ':')) {
        wf_spec s;
        st = wf_spec_parse(spec, &s);
        const char *split = "train", *dir = FASHION_DIR;
        if (st == WF_OK) {
            wf_spec_get_str(&s, "split", &split);
            wf_spec_get_str(&s, "dir", &dir);
            st = wf_spec_check_unused(&s, "data fashion-mnist", "split, dir");
        }
        if (st == WF_OK && strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
            st = wf_errorf(WF_INVAL, "data fashion-mnist: split=%s (expected train or test)", split);
        if (st == WF_OK)
            st = open_fashion(d, dir, strcmp(split, "test") == 0);
    } else if (stat(spec, &sb) == 0 && S_ISREG(sb.st_mode)) {
        st = open_text(d, spec);
    } else {
        st = wf_errorf(WF_INVAL,
                       "unknown data '%s' (expected synthetic, fashion-mnist, text:PATH, fortunes or an "
                       "existing text file)%s",
                       spec, wf_did_you_mean(wf_suggest(spec, named, 3), dym, sizeof dym));
    }
    if (st != WF_OK) {
        wf_data_close(d);
        return st;
    }
    *out = d;
    return WF_OK;
}

void wf_data_close(wf_data *d)
{
    if (!d)
        return;
    free(d->perm);
    free(d->images);
    free(d->labels);
    free(d->epoch_perm);
    free(d->text);
    free(d);
}

/* ---- drawing samples -------------------------------------------------------------------- */

void wf_data_slice(int64_t global_batch, int rank, int nranks, int64_t *first, int64_t *count)
{
    int64_t lo = global_batch * rank / nranks, hi = global_batch * (rank + 1) / nranks;
    *first = lo;
    *count = hi - lo;
}

/* Synthetic features: class c has a fixed +-0.5 prototype; a sample adds
 * uniform noise in [-0.5, 0.5) to its class's prototype. */
static void synth_features(const wf_data *d, int64_t p, float *x, int32_t *label)
{
    int64_t nf = wf_data_layout_input_numel(&d->layout);
    rng64 r = rng_for(d->seed, STREAM_SAMPLE, (uint64_t)p);
    int64_t c = (int64_t)rng_below(&r, (uint64_t)d->layout.classes);
    uint64_t bits = 0;
    for (int64_t j = 0; j < nf; j++) {
        if (j % 64 == 0)
            bits = mix64(d->seed ^ mix64(STREAM_PROTO ^ mix64((uint64_t)c * 0x100000001ull + (uint64_t)j / 64)));
        float proto = (bits >> (j % 64)) & 1 ? 0.5f : -0.5f;
        x[j] = proto + rng_unit(&r) - 0.5f;
    }
    /* Per-position labels (AlphaFold2's distogram bins): a function of the
     * class and the position, so the features and the positions predict them. */
    int64_t nl = wf_data_layout_label_numel(&d->layout);
    for (int64_t k = 0; k < (d->layout.label_ndim != 0 ? nl : 1); k++)
        label[k] = (int32_t)((c + k) % d->layout.classes);
}

/* Synthetic tokens: a random first token, then next = perm[current]; the
 * chain t_0, t_1, ... gives ids[j] = t_j (j < the input's n tokens) and
 * labels[j] = t_(j+1) (j < the labels' count, which an encoder-decoder's
 * decoder length may make longer or shorter than n: T5 with dec_seq != seq). */
static void synth_tokens(const wf_data *d, int64_t p, int32_t *ids, int32_t *labels)
{
    int64_t n = wf_data_layout_input_numel(&d->layout);
    int64_t nl = d->layout.label_ndim != 0 ? wf_data_layout_label_numel(&d->layout) : 0;
    rng64 r = rng_for(d->seed, STREAM_SAMPLE, (uint64_t)p);
    int32_t t = (int32_t)rng_below(&r, (uint64_t)d->tok_range);
    for (int64_t j = 0; j < (n > nl ? n : nl); j++) {
        if (j < n)
            ids[j] = t;
        t = d->perm[t];
        if (j < nl)
            labels[j] = t;
    }
    if (d->layout.label_ndim == 0)
        labels[0] = (int32_t)(d->perm[ids[0]] % d->layout.classes);
}

static void fashion_epoch(wf_data *d, int64_t epoch)
{
    if (d->perm_epoch == epoch)
        return;
    for (int64_t i = 0; i < d->n; i++)
        d->epoch_perm[i] = (int32_t)i;
    rng64 r = rng_for(d->seed, STREAM_EPOCH, (uint64_t)epoch);
    for (int64_t i = d->n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int32_t t = d->epoch_perm[i];
        d->epoch_perm[i] = d->epoch_perm[j];
        d->epoch_perm[j] = t;
    }
    d->perm_epoch = epoch;
}

static void fashion_sample(wf_data *d, int64_t p, float *x, int32_t *label)
{
    fashion_epoch(d, p / d->n);
    int64_t idx = d->epoch_perm[p % d->n];
    const uint8_t *px = d->images + idx * 784;
    for (int j = 0; j < 784; j++)
        x[j] = (float)px[j] / 255.0f;
    *label = d->labels[idx];
}

static void text_sample(const wf_data *d, int64_t p, int32_t *ids, int32_t *labels)
{
    int64_t seq = wf_data_layout_input_numel(&d->layout);
    rng64 r = rng_for(d->seed, STREAM_SAMPLE, (uint64_t)p);
    int64_t start = (int64_t)rng_below(&r, (uint64_t)(d->ntext - seq));
    for (int64_t j = 0; j < seq; j++) {
        ids[j] = d->text[start + j];
        labels[j] = d->text[start + j + 1];
    }
}

wf_status wf_data_next(wf_data *d, int64_t global_batch, int rank, int nranks, void *inputs,
                       int32_t *labels)
{
    if (global_batch < 1)
        return wf_errorf(WF_INVAL, "data: global batch %lld must be at least 1", (long long)global_batch);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return wf_errorf(WF_INVAL, "data: rank %d of %d is out of range", rank, nranks);
    int64_t first, count;
    wf_data_slice(global_batch, rank, nranks, &first, &count);
    if (count > 0 && (!inputs || !labels))
        return wf_errorf(WF_INVAL, "data: no buffer for the batch");
    int64_t nin = wf_data_layout_input_numel(&d->layout), nlab = wf_data_layout_label_numel(&d->layout);
    for (int64_t i = 0; i < count; i++) {
        int64_t p = d->pos + first + i;
        int32_t *lab = labels + i * nlab;
        if (d->layout.input_dtype == WF_DTYPE_FP32) {
            float *x = (float *)inputs + i * nin;
            if (d->kind == KIND_FASHION)
                fashion_sample(d, p, x, lab);
            else
                synth_features(d, p, x, lab);
        } else {
            int32_t *ids = (int32_t *)inputs + i * nin;
            if (d->kind == KIND_TEXT)
                text_sample(d, p, ids, lab);
            else
                synth_tokens(d, p, ids, lab);
        }
    }
    d->pos += global_batch;
    return WF_OK;
}

int64_t wf_data_position(const wf_data *d)
{
    return d->pos;
}

wf_status wf_data_seek(wf_data *d, int64_t position)
{
    if (position < 0)
        return wf_errorf(WF_INVAL, "data: position %lld is negative", (long long)position);
    d->pos = position;
    return WF_OK;
}

int64_t wf_data_size(const wf_data *d)
{
    switch (d->kind) {
    case KIND_FASHION:
        return d->n;
    case KIND_TEXT:
        return d->ntext - wf_data_layout_input_numel(&d->layout);
    default:
        return 0;
    }
}

const char *wf_data_describe(const wf_data *d)
{
    return d->desc;
}
