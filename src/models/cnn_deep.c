/* Deeper CNN builders for the DeAR paper's image models: DenseNet (Huang et
 * al. 2017, torchvision's layout) and Inception-v4 (Szegedy et al. 2017, the
 * layout of the inceptionv4 module DeAR's benchmarks import).
 *
 * Symbols: N batch, C channels, Hi/Wi image height/width, K classes.
 * Inputs are images[N,C,Hi,Wi] and labels[N] (int32). As for ResNet, no
 * tensor parallelism is stamped (WF_TP_NONE): the SBP search decides how to
 * split convolutions. Blocks of the same shape share a block id, so the
 * searches treat them as repeats. */
#include "models/models-impl.h"

#include <string.h>

#define BN_EPS 1e-5
#define INCEPTION_BN_EPS 1e-3 /* the inceptionv4 module's BatchNorm2d(eps=0.001) */

static int op(wf_graph *g, wf_op_kind k, const char *name, const int *in, int n, const wf_op_attrs *attr)
{
    if (g->status != WF_OK)
        return -1;
    return wf_graph_op1(g, k, name, in, n, attr);
}

static int unary(wf_graph *g, wf_op_kind k, const char *name, int x, const wf_op_attrs *attr)
{
    return op(g, k, name, &x, 1, attr);
}

static int concat(wf_graph *g, const char *name, const int *xs, int n)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.axis = 1;
    return op(g, WF_OP_CONCAT, name, xs, n, &a);
}

static int classifier(wf_graph *g, const wf_model_config *m, int x, int64_t c, int labels)
{
    x = unary(g, WF_OP_GLOBAL_AVGPOOL, "avgpool", x, NULL); /* [N,C] */
    int in[3] = {x, wf_model_param(g, m->dtype, 2, c, m->classes, 0, 0, "fc.weight"),
                 wf_model_param(g, m->dtype, 1, m->classes, 0, 0, 0, "fc.bias")};
    x = op(g, WF_OP_LINEAR, "fc", in, 3, NULL);
    int l[2] = {x, labels};
    op(g, WF_OP_CROSS_ENTROPY, "loss", l, 2, NULL);
    return g->status;
}

static void image_inputs(wf_graph *g, const wf_model_config *m, int64_t batch, int *x, int *labels)
{
    int64_t ishape[4] = {batch, m->channels, m->image, m->image};
    *x = wf_graph_add_tensor(g, "images", m->dtype, WF_ROLE_INPUT, 4, ishape);
    *labels = wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, &batch);
}

/* ---- DenseNet ----------------------------------------------------------------------- */

/* torchvision.models.densenet: (growth, stem width, layers per dense block). */
typedef struct {
    int depth, growth, stem, blocks[4];
} densenet_cfg;

static const densenet_cfg g_densenet[] = {
    {121, 32, 64, {6, 12, 24, 16}},
    {161, 48, 96, {6, 12, 36, 24}},
    {169, 32, 64, {6, 12, 32, 32}},
    {201, 32, 64, {6, 12, 48, 32}},
};

const char *wf_densenet_depths(void) { return "121, 161, 169 or 201"; }

int wf_densenet_valid(int64_t depth)
{
    for (size_t i = 0; i < sizeof g_densenet / sizeof g_densenet[0]; i++)
        if (g_densenet[i].depth == depth)
            return 1;
    return 0;
}

/* DenseNet-BC: stem 7x7/2 conv, BN, ReLU, 3x3/2 max-pool; four dense blocks
 * whose layers are BN-ReLU-conv1x1 (to 4 x growth) - BN-ReLU-conv3x3 (to
 * growth), each layer's output concatenated to its input; between blocks a
 * transition BN-ReLU-conv1x1 (halving the channels) and a 2x2/2 average pool;
 * a final BN and ReLU, global average pool and the classifier. The dense
 * block's concatenation is one concat per layer, as torchvision's
 * torch.cat(features, 1) in each _DenseLayer. Stamps: dense layers of one
 * block differ in input width, so each layer is its own block id (no
 * repeats); transitions are unstamped. */
wf_status wf_build_densenet(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    const densenet_cfg *cfg = NULL;
    for (size_t i = 0; i < sizeof g_densenet / sizeof g_densenet[0]; i++)
        if (g_densenet[i].depth == m->depth)
            cfg = &g_densenet[i];
    if (!cfg)
        return wf_errorf(WF_INVAL, "%s: depth=%lld (densenet has %s)", m->name, (long long)m->depth,
                         wf_densenet_depths());
    wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], p[WF_NAME_LEN];
    int x, labels;
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    image_inputs(g, m, batch, &x, &labels);
    x = wf_cnn_conv(g, "features.conv0", x, m->channels, cfg->stem, 7, 7, 2, 3, 3, 0, dt);
    x = wf_cnn_batchnorm(g, "features.norm0", x, cfg->stem, BN_EPS, dt);
    x = unary(g, WF_OP_RELU, "features.relu0", x, NULL);
    x = wf_cnn_pool(g, WF_OP_MAXPOOL, "features.pool0", x, 3, 2, 1);
    int64_t c = cfg->stem, bottleneck = 4 * (int64_t)cfg->growth;
    for (int b = 0; b < 4; b++) {
        for (int l = 0; l < cfg->blocks[b]; l++) {
            wf_model_name(p, "features.denseblock%d.denselayer%d", b + 1, l + 1);
            int y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.norm1", p), x, c, BN_EPS, dt);
            y = unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu1", p), y, NULL);
            y = wf_cnn_conv(g, wf_model_name(n, "%s.conv1", p), y, c, bottleneck, 1, 1, 1, 0, 0, 0, dt);
            y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.norm2", p), y, bottleneck, BN_EPS, dt);
            y = unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu2", p), y, NULL);
            y = wf_cnn_conv(g, wf_model_name(n, "%s.conv2", p), y, bottleneck, cfg->growth, 3, 3, 1, 1, 1, 0, dt);
            int xs[2] = {x, y};
            x = concat(g, wf_model_name(n, "%s.cat", p), xs, 2);
            c += cfg->growth;
        }
        if (b < 3) {
            wf_model_name(p, "features.transition%d", b + 1);
            x = wf_cnn_batchnorm(g, wf_model_name(n, "%s.norm", p), x, c, BN_EPS, dt);
            x = unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu", p), x, NULL);
            x = wf_cnn_conv(g, wf_model_name(n, "%s.conv", p), x, c, c / 2, 1, 1, 1, 0, 0, 0, dt);
            x = wf_cnn_pool(g, WF_OP_AVGPOOL, wf_model_name(n, "%s.pool", p), x, 2, 2, 0);
            c /= 2;
        }
    }
    x = wf_cnn_batchnorm(g, "features.norm5", x, c, BN_EPS, dt);
    x = unary(g, WF_OP_RELU, "features.relu5", x, NULL);
    return classifier(g, m, x, c, labels);
}

/* ---- Inception-v4 ------------------------------------------------------------------- */

/* BasicConv2d: conv (no bias), BatchNorm (eps 1e-3), ReLU. */
static int bconv(wf_graph *g, const char *pfx, const char *nm, int x, int64_t cin, int64_t cout, int kh, int kw,
                 int stride, int ph, int pw, wf_dtype dt)
{
    char n[WF_NAME_LEN], b[WF_NAME_LEN];
    wf_model_name(b, "%s.%s", pfx, nm);
    x = wf_cnn_conv(g, wf_model_name(n, "%s.conv", b), x, cin, cout, kh, kw, stride, ph, pw, 0, dt);
    x = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn", b), x, cout, INCEPTION_BN_EPS, dt);
    return unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu", b), x, NULL);
}

/* The 3x3/1 average pool (padding 1) of the A, B and C blocks' fourth branch. */
static int avg3(wf_graph *g, const char *pfx, int x)
{
    char n[WF_NAME_LEN];
    return wf_cnn_pool(g, WF_OP_AVGPOOL, wf_model_name(n, "%s.branch3.pool", pfx), x, 3, 1, 1);
}

static int inception_a(wf_graph *g, const char *p, int x, wf_dtype dt)
{
    int b[4];
    b[0] = bconv(g, p, "branch0", x, 384, 96, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.0", x, 384, 64, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.1", b[1], 64, 96, 3, 3, 1, 1, 1, dt);
    b[2] = bconv(g, p, "branch2.0", x, 384, 64, 1, 1, 1, 0, 0, dt);
    b[2] = bconv(g, p, "branch2.1", b[2], 64, 96, 3, 3, 1, 1, 1, dt);
    b[2] = bconv(g, p, "branch2.2", b[2], 96, 96, 3, 3, 1, 1, 1, dt);
    b[3] = bconv(g, p, "branch3.1", avg3(g, p, x), 384, 96, 1, 1, 1, 0, 0, dt);
    char n[WF_NAME_LEN];
    return concat(g, wf_model_name(n, "%s.cat", p), b, 4); /* 384 */
}

static int inception_b(wf_graph *g, const char *p, int x, wf_dtype dt)
{
    int b[4];
    b[0] = bconv(g, p, "branch0", x, 1024, 384, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.0", x, 1024, 192, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.1", b[1], 192, 224, 1, 7, 1, 0, 3, dt);
    b[1] = bconv(g, p, "branch1.2", b[1], 224, 256, 7, 1, 1, 3, 0, dt);
    b[2] = bconv(g, p, "branch2.0", x, 1024, 192, 1, 1, 1, 0, 0, dt);
    b[2] = bconv(g, p, "branch2.1", b[2], 192, 192, 7, 1, 1, 3, 0, dt);
    b[2] = bconv(g, p, "branch2.2", b[2], 192, 224, 1, 7, 1, 0, 3, dt);
    b[2] = bconv(g, p, "branch2.3", b[2], 224, 224, 7, 1, 1, 3, 0, dt);
    b[2] = bconv(g, p, "branch2.4", b[2], 224, 256, 1, 7, 1, 0, 3, dt);
    b[3] = bconv(g, p, "branch3.1", avg3(g, p, x), 1024, 128, 1, 1, 1, 0, 0, dt);
    char n[WF_NAME_LEN];
    return concat(g, wf_model_name(n, "%s.cat", p), b, 4); /* 1024 */
}

static int inception_c(wf_graph *g, const char *p, int x, wf_dtype dt)
{
    int b[6];
    b[0] = bconv(g, p, "branch0", x, 1536, 256, 1, 1, 1, 0, 0, dt);
    int t = bconv(g, p, "branch1.0", x, 1536, 384, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.1a", t, 384, 256, 1, 3, 1, 0, 1, dt);
    b[2] = bconv(g, p, "branch1.1b", t, 384, 256, 3, 1, 1, 1, 0, dt);
    t = bconv(g, p, "branch2.0", x, 1536, 384, 1, 1, 1, 0, 0, dt);
    t = bconv(g, p, "branch2.1", t, 384, 448, 3, 1, 1, 1, 0, dt);
    t = bconv(g, p, "branch2.2", t, 448, 512, 1, 3, 1, 0, 1, dt);
    b[3] = bconv(g, p, "branch2.3a", t, 512, 256, 1, 3, 1, 0, 1, dt);
    b[4] = bconv(g, p, "branch2.3b", t, 512, 256, 3, 1, 1, 1, 0, dt);
    b[5] = bconv(g, p, "branch3.1", avg3(g, p, x), 1536, 256, 1, 1, 1, 0, 0, dt);
    char n[WF_NAME_LEN];
    return concat(g, wf_model_name(n, "%s.cat", p), b, 6); /* 1536 */
}

/* Inception-v4 (Szegedy et al. 2017, Figures 3-9): the stem (three convs,
 * Mixed_3a/4a/5a), 4 Inception-A, Reduction-A, 7 Inception-B, Reduction-B, 3
 * Inception-C, global average pool and the classifier. Every conv is a
 * BasicConv2d (conv without bias, BatchNorm, ReLU); branch order and widths as
 * the paper's figures. The blocks of each kind repeat (block ids 0, 1, 2). */
wf_status wf_build_inception(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    wf_dtype dt = m->dtype;
    char p[WF_NAME_LEN], n[WF_NAME_LEN];
    int x, labels, b[4];
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    image_inputs(g, m, batch, &x, &labels);
    x = bconv(g, "features", "0", x, m->channels, 32, 3, 3, 2, 0, 0, dt);
    x = bconv(g, "features", "1", x, 32, 32, 3, 3, 1, 0, 0, dt);
    x = bconv(g, "features", "2", x, 32, 64, 3, 3, 1, 1, 1, dt);
    /* Mixed_3a: max-pool and a strided conv side by side (64 + 96). */
    b[0] = wf_cnn_pool(g, WF_OP_MAXPOOL, "features.3.maxpool", x, 3, 2, 0);
    b[1] = bconv(g, "features.3", "conv", x, 64, 96, 3, 3, 2, 0, 0, dt);
    x = concat(g, "features.3.cat", b, 2); /* 160 */
    /* Mixed_4a: two conv towers (96 + 96). */
    b[0] = bconv(g, "features.4", "branch0.0", x, 160, 64, 1, 1, 1, 0, 0, dt);
    b[0] = bconv(g, "features.4", "branch0.1", b[0], 64, 96, 3, 3, 1, 0, 0, dt);
    b[1] = bconv(g, "features.4", "branch1.0", x, 160, 64, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, "features.4", "branch1.1", b[1], 64, 64, 1, 7, 1, 0, 3, dt);
    b[1] = bconv(g, "features.4", "branch1.2", b[1], 64, 64, 7, 1, 1, 3, 0, dt);
    b[1] = bconv(g, "features.4", "branch1.3", b[1], 64, 96, 3, 3, 1, 0, 0, dt);
    x = concat(g, "features.4.cat", b, 2); /* 192 */
    /* Mixed_5a: a strided conv and a max-pool (192 + 192). */
    b[0] = bconv(g, "features.5", "conv", x, 192, 192, 3, 3, 2, 0, 0, dt);
    b[1] = wf_cnn_pool(g, WF_OP_MAXPOOL, "features.5.maxpool", x, 3, 2, 0);
    x = concat(g, "features.5.cat", b, 2); /* 384 */
    int k = 6;
    for (int i = 0; i < 4; i++, k++) {
        wf_graph_set_block(g, 0, i);
        x = inception_a(g, wf_model_name(p, "features.%d", k), x, dt);
    }
    wf_graph_set_block(g, -1, -1);
    /* Reduction-A (k=192, l=224, m=256, n=384): 384 + 256 + 384 = 1024. */
    wf_model_name(p, "features.%d", k++);
    b[0] = bconv(g, p, "branch0", x, 384, 384, 3, 3, 2, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.0", x, 384, 192, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.1", b[1], 192, 224, 3, 3, 1, 1, 1, dt);
    b[1] = bconv(g, p, "branch1.2", b[1], 224, 256, 3, 3, 2, 0, 0, dt);
    b[2] = wf_cnn_pool(g, WF_OP_MAXPOOL, wf_model_name(n, "%s.branch2", p), x, 3, 2, 0);
    x = concat(g, wf_model_name(n, "%s.cat", p), b, 3);
    for (int i = 0; i < 7; i++, k++) {
        wf_graph_set_block(g, 1, i);
        x = inception_b(g, wf_model_name(p, "features.%d", k), x, dt);
    }
    wf_graph_set_block(g, -1, -1);
    /* Reduction-B: 192 + 320 + 1024 = 1536. */
    wf_model_name(p, "features.%d", k++);
    b[0] = bconv(g, p, "branch0.0", x, 1024, 192, 1, 1, 1, 0, 0, dt);
    b[0] = bconv(g, p, "branch0.1", b[0], 192, 192, 3, 3, 2, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.0", x, 1024, 256, 1, 1, 1, 0, 0, dt);
    b[1] = bconv(g, p, "branch1.1", b[1], 256, 256, 1, 7, 1, 0, 3, dt);
    b[1] = bconv(g, p, "branch1.2", b[1], 256, 320, 7, 1, 1, 3, 0, dt);
    b[1] = bconv(g, p, "branch1.3", b[1], 320, 320, 3, 3, 2, 0, 0, dt);
    b[2] = wf_cnn_pool(g, WF_OP_MAXPOOL, wf_model_name(n, "%s.branch2", p), x, 3, 2, 0);
    x = concat(g, wf_model_name(n, "%s.cat", p), b, 3);
    for (int i = 0; i < 3; i++, k++) {
        wf_graph_set_block(g, 2, i);
        x = inception_c(g, wf_model_name(p, "features.%d", k), x, dt);
    }
    wf_graph_set_block(g, -1, -1);
    return classifier(g, m, x, 1536, labels);
}
