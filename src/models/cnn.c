/* CNN and MLP builders: VGG, ResNet (v1.5), the tiny CNN and the MLP.
 *
 * Symbols: N batch, C channels, Hi/Wi image height/width, K classes.
 * Inputs are images[N,C,Hi,Wi] (MLP: images[N,sizes[0]], a flattened image)
 * and labels[N] (int32). No tensor parallelism is stamped (WF_TP_NONE): the
 * SBP search decides how to split convolutions. ResNet blocks are stamped so
 * that identical blocks share a block id (see wf_build_resnet); VGG and the
 * small nets are unstamped. */
#include "models/models-impl.h"

#include <string.h>

#define BN_EPS 1e-5
#define CLASSIFIER_DROPOUT 0.5

static int op1(wf_graph *g, wf_op_kind k, const char *name, int a, int b, int c,
               const wf_op_attrs *attr)
{
    int in[3] = {a, b, c};
    int n = c >= 0 ? 3 : b >= 0 ? 2 : 1;
    if (g->status != WF_OK)
        return -1;
    return wf_graph_op1(g, k, name, in, n, attr);
}

/* x[N,Cin,Hi,Wi] -> [N,Cout,Ho,Wo] with w[Cout,Cin,kh,kw] (and bias[Cout]);
 * shared with cnn_deep.c (models-impl.h). */
int wf_cnn_conv(wf_graph *g, const char *name, int x, int64_t cin, int64_t cout, int kh, int kw, int stride,
                int ph, int pw, int bias, wf_dtype dt)
{
    int w = wf_model_param(g, dt, 4, cout, cin, kh, kw, "%s.weight", name);
    int b = bias ? wf_model_param(g, dt, 1, cout, 0, 0, 0, "%s.bias", name) : -1;
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.kernel[0] = kh, a.kernel[1] = kw;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = ph, a.pad[1] = pw;
    return op1(g, WF_OP_CONV2D, name, x, w, b, &a);
}

int wf_cnn_batchnorm(wf_graph *g, const char *name, int x, int64_t c, double eps, wf_dtype dt)
{
    int gam = wf_model_param(g, dt, 1, c, 0, 0, 0, "%s.weight", name);
    int bet = wf_model_param(g, dt, 1, c, 0, 0, 0, "%s.bias", name);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.eps = eps;
    return op1(g, WF_OP_BATCHNORM, name, x, gam, bet, &a);
}

int wf_cnn_pool(wf_graph *g, wf_op_kind k, const char *name, int x, int kernel, int stride, int pad)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.kernel[0] = a.kernel[1] = kernel;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    return op1(g, k, name, x, -1, -1, &a);
}

/* Square kernels with the same padding on both sides. */
static int conv(wf_graph *g, const char *name, int x, int64_t cin, int64_t cout, int k, int stride,
                int pad, int bias, wf_dtype dt)
{
    return wf_cnn_conv(g, name, x, cin, cout, k, k, stride, pad, pad, bias, dt);
}

static int linear(wf_graph *g, const char *name, int x, int64_t K, int64_t N, wf_dtype dt)
{
    int w = wf_model_param(g, dt, 2, K, N, 0, 0, "%s.weight", name);
    int b = wf_model_param(g, dt, 1, N, 0, 0, 0, "%s.bias", name);
    return op1(g, WF_OP_LINEAR, name, x, w, b, NULL);
}

static int relu(wf_graph *g, const char *name, int x)
{
    return op1(g, WF_OP_RELU, name, x, -1, -1, NULL);
}

static void image_inputs(wf_graph *g, const wf_model_config *m, int64_t batch, int *x, int *labels)
{
    int64_t ishape[4] = {batch, m->channels, m->image, m->image};
    *x = wf_graph_add_tensor(g, "images", m->dtype, WF_ROLE_INPUT, 4, ishape);
    *labels = wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, &batch);
}

/* Feature width of the last dim of tensor t (0 when the graph failed). */
static int64_t last_dim(const wf_graph *g, int t)
{
    if (t < 0 || g->status != WF_OK)
        return 0;
    return g->tensors[t].shape[g->tensors[t].ndim - 1];
}

/* VGG (Simonyan & Zisserman 2015, configurations A, B, D, E): 3x3 convs with
 * bias and ReLU in five stages each ended by a 2x2 max-pool, then
 * fc6/fc7 (4096, ReLU, dropout 0.5) and fc8 (classes). The classifier's input
 * is 512 x (image/32)^2 (25088 at 224x224; no adaptive pooling). */
wf_status wf_build_vgg(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    static const int convs_per_stage[4][5] = {
        {1, 1, 2, 2, 2}, /* 11 */
        {2, 2, 2, 2, 2}, /* 13 */
        {2, 2, 3, 3, 3}, /* 16 */
        {2, 2, 4, 4, 4}, /* 19 */
    };
    static const int64_t widths[5] = {64, 128, 256, 512, 512};
    int cfg = m->depth == 11 ? 0 : m->depth == 13 ? 1 : m->depth == 16 ? 2 : 3;
    char n[WF_NAME_LEN];
    int x, labels;
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    image_inputs(g, m, batch, &x, &labels);
    int64_t c = m->channels;
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < convs_per_stage[cfg][s]; i++) {
            x = conv(g, wf_model_name(n, "conv%d_%d", s + 1, i + 1), x, c, widths[s], 3, 1, 1, 1,
                     m->dtype);
            x = relu(g, wf_model_name(n, "relu%d_%d", s + 1, i + 1), x);
            c = widths[s];
        }
        x = wf_cnn_pool(g, WF_OP_MAXPOOL, wf_model_name(n, "pool%d", s + 1), x, 2, 2, 0);
    }
    x = op1(g, WF_OP_FLATTEN, "flatten", x, -1, -1, NULL); /* [N, 512*(image/32)^2] */
    int64_t feat = last_dim(g, x);
    wf_op_attrs drop;
    memset(&drop, 0, sizeof drop);
    drop.p = CLASSIFIER_DROPOUT;
    x = linear(g, "fc6", x, feat, 4096, m->dtype);
    x = relu(g, "relu6", x);
    drop.seed = wf_model_seed(g);
    x = op1(g, WF_OP_DROPOUT, "drop6", x, -1, -1, &drop);
    x = linear(g, "fc7", x, 4096, 4096, m->dtype);
    x = relu(g, "relu7", x);
    drop.seed = wf_model_seed(g);
    x = op1(g, WF_OP_DROPOUT, "drop7", x, -1, -1, &drop);
    x = linear(g, "fc8", x, 4096, m->classes, m->dtype);
    op1(g, WF_OP_CROSS_ENTROPY, "loss", x, labels, -1, NULL);
    return g->status;
}

/* One residual block of stage s (torchvision naming "layer<s>.<i>").
 * Bottleneck (v1.5): 1x1 (w) - 3x3 stride (w) - 1x1 (4w), each with
 * batchnorm, ReLU after the first two and after the residual add. Basic:
 * 3x3 stride (w) - 3x3 (w). A 1x1 strided conv + batchnorm projects the
 * shortcut when the shape changes. Convolutions have no bias. */
static int res_block(wf_graph *g, const wf_model_config *m, int x, int s, int i, int64_t cin,
                     int64_t w, int stride, int bottleneck)
{
    char n[WF_NAME_LEN], p[WF_NAME_LEN];
    wf_dtype dt = m->dtype;
    int64_t cout = bottleneck ? 4 * w : w;
    wf_model_name(p, "layer%d.%d", s + 1, i);
    int y;
    if (bottleneck) {
        y = conv(g, wf_model_name(n, "%s.conv1", p), x, cin, w, 1, 1, 0, 0, dt);
        y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn1", p), y, w, BN_EPS, dt);
        y = relu(g, wf_model_name(n, "%s.relu1", p), y);
        y = conv(g, wf_model_name(n, "%s.conv2", p), y, w, w, 3, stride, 1, 0, dt);
        y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn2", p), y, w, BN_EPS, dt);
        y = relu(g, wf_model_name(n, "%s.relu2", p), y);
        y = conv(g, wf_model_name(n, "%s.conv3", p), y, w, cout, 1, 1, 0, 0, dt);
        y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn3", p), y, cout, BN_EPS, dt);
    } else {
        y = conv(g, wf_model_name(n, "%s.conv1", p), x, cin, w, 3, stride, 1, 0, dt);
        y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn1", p), y, w, BN_EPS, dt);
        y = relu(g, wf_model_name(n, "%s.relu1", p), y);
        y = conv(g, wf_model_name(n, "%s.conv2", p), y, w, w, 3, 1, 1, 0, dt);
        y = wf_cnn_batchnorm(g, wf_model_name(n, "%s.bn2", p), y, w, BN_EPS, dt);
    }
    int sc = x;
    if (stride != 1 || cin != cout) {
        sc = conv(g, wf_model_name(n, "%s.downsample.conv", p), x, cin, cout, 1, stride, 0, 0, dt);
        sc = wf_cnn_batchnorm(g, wf_model_name(n, "%s.downsample.bn", p), sc, cout, BN_EPS, dt);
    }
    y = op1(g, WF_OP_ADD, wf_model_name(n, "%s.add", p), y, sc, -1, NULL);
    return relu(g, wf_model_name(n, "%s.relu", p), y);
}

/* ResNet (He et al. 2016) as in torchvision: stem 7x7/2 conv, batchnorm,
 * ReLU, 3x3/2 max-pool; four stages of widths 64..512 (stride 2 from the
 * second stage, on the 3x3 conv: v1.5); global average pool; fc.
 * Stamps: stage s's first block (which changes the shape) is block 2s,
 * layer 0; its other blocks, identical to each other, are block 2s+1,
 * layers 0, 1, ... in order. */
wf_status wf_build_resnet(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    static const int blocks[5][4] = {
        {2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}, {3, 8, 36, 3}};
    int cfg = m->depth == 18    ? 0
              : m->depth == 34  ? 1
              : m->depth == 50  ? 2
              : m->depth == 101 ? 3
                                : 4;
    int bottleneck = m->depth >= 50;
    int x, labels;
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    image_inputs(g, m, batch, &x, &labels);
    x = conv(g, "conv1", x, m->channels, 64, 7, 2, 3, 0, m->dtype);
    x = wf_cnn_batchnorm(g, "bn1", x, 64, BN_EPS, m->dtype);
    x = relu(g, "relu", x);
    x = wf_cnn_pool(g, WF_OP_MAXPOOL, "maxpool", x, 3, 2, 1);
    int64_t c = 64;
    for (int s = 0; s < 4; s++) {
        int64_t w = (int64_t)64 << s;
        for (int i = 0; i < blocks[cfg][s]; i++) {
            wf_graph_set_block(g, 2 * s + (i > 0), i > 0 ? i - 1 : 0);
            x = res_block(g, m, x, s, i, c, w, (s > 0 && i == 0) ? 2 : 1, bottleneck);
            c = bottleneck ? 4 * w : w;
        }
    }
    wf_graph_set_block(g, -1, -1);
    x = op1(g, WF_OP_GLOBAL_AVGPOOL, "avgpool", x, -1, -1, NULL); /* [N,C] */
    x = linear(g, "fc", x, c, m->classes, m->dtype);
    op1(g, WF_OP_CROSS_ENTROPY, "loss", x, labels, -1, NULL);
    return g->status;
}

/* The tiny CNN: per width w in sizes[]: 3x3 conv (pad 1, bias), ReLU, 2x2
 * max-pool; then flatten and one linear layer to the classes. */
wf_status wf_build_cnn(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    char n[WF_NAME_LEN];
    int x, labels;
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    image_inputs(g, m, batch, &x, &labels);
    int64_t c = m->channels;
    for (int s = 0; s < m->nsizes; s++) {
        x = conv(g, wf_model_name(n, "conv%d", s + 1), x, c, m->sizes[s], 3, 1, 1, 1, m->dtype);
        x = relu(g, wf_model_name(n, "relu%d", s + 1), x);
        x = wf_cnn_pool(g, WF_OP_MAXPOOL, wf_model_name(n, "pool%d", s + 1), x, 2, 2, 0);
        c = m->sizes[s];
    }
    x = op1(g, WF_OP_FLATTEN, "flatten", x, -1, -1, NULL);
    x = linear(g, "fc", x, last_dim(g, x), m->classes, m->dtype);
    op1(g, WF_OP_CROSS_ENTROPY, "loss", x, labels, -1, NULL);
    return g->status;
}

/* MLP: images[N,sizes[0]] -> linear + ReLU per hidden size -> linear to
 * sizes[n-1] classes -> cross-entropy with labels[N]. */
wf_status wf_build_mlp(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    char n[WF_NAME_LEN];
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    int64_t ishape[2] = {batch, m->sizes[0]};
    int x = wf_graph_add_tensor(g, "images", m->dtype, WF_ROLE_INPUT, 2, ishape);
    int labels = wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, &batch);
    for (int i = 0; i + 1 < m->nsizes; i++) {
        x = linear(g, wf_model_name(n, "fc%d", i + 1), x, m->sizes[i], m->sizes[i + 1], m->dtype);
        if (i + 2 < m->nsizes)
            x = relu(g, wf_model_name(n, "relu%d", i + 1), x);
    }
    op1(g, WF_OP_CROSS_ENTROPY, "loss", x, labels, -1, NULL);
    return g->status;
}
