/* Tests of the model zoo: parameter counts against published numbers and
 * closed forms, training FLOPs against Megatron's formula, saved activation
 * bytes against Korthikanti et al.'s per-layer count, block and tensor-parallel
 * stamps, every zoo entry building into a valid graph, spec errors, and model
 * JSON files (including every example in docs/model-format.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "weft/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static wf_model_config lookup(const char *spec)
{
    wf_model_config m;
    wf_status st = wf_model_lookup(spec, &m);
    if (st != WF_OK)
        fail_msg("lookup %s: %s", spec, wf_last_error());
    return m;
}

static double params_of(const char *spec)
{
    wf_model_config m = lookup(spec);
    double p = 0;
    wf_status st = wf_model_params(&m, &p);
    if (st != WF_OK)
        fail_msg("params %s: %s", spec, wf_last_error());
    return p;
}

static void assert_rel(double got, double want, double tol, const char *what)
{
    if (!(fabs(got - want) <= tol * fabs(want)))
        fail_msg("%s: got %.6g, want %.6g (tolerance %.3g%%)", what, got, want, tol * 100);
}

/* GPT with learned positions, biases, tied head: V h + s h + l (12 h^2 + 13 h) + 2 h. */
static double gpt_params_closed(double l, double h, double s, double V)
{
    return V * h + s * h + l * (12 * h * h + 13 * h) + 2 * h;
}

static void test_cnn_params_exact(void **state)
{
    (void)state;
    /* torchvision's counts. */
    assert_true(params_of("resnet50") == 25557032.0);
    assert_true(params_of("vgg16") == 138357544.0);
    assert_true(params_of("vgg19") == 143667240.0);
    assert_true(params_of("resnet18") == 11689512.0);
    assert_true(params_of("resnet101") == 44549160.0);
    assert_true(params_of("resnet152") == 60192808.0);
    /* torchvision's densenet121 / densenet201 (sum of p.numel() over
     * model.parameters(): running statistics are buffers, not parameters)
     * and Inception-v4 with 1000 classes (42,679,816, the "42.68M" of the
     * DeAR paper's model table). */
    assert_true(params_of("densenet121") == 7978856.0);
    assert_true(params_of("densenet201") == 20013928.0);
    assert_true(params_of("inception-v4") == 42679816.0);
    /* mlp 784-1024-10: 784*1024+1024 + 1024*10+10 */
    assert_true(params_of("mlp") == 784.0 * 1024 + 1024 + 1024 * 10 + 10);
    /* cnn-tiny: conv 1->8 (72+8), conv 8->16 (1152+16), fc 784->10 (7840+10) */
    assert_true(params_of("cnn-tiny") == 80 + 1168 + 7850);
}

static void test_transformer_params(void **state)
{
    (void)state;
    double gpt2 = params_of("gpt2");
    assert_rel(gpt2, 124e6, 0.005, "gpt2");
    assert_true(gpt2 == gpt_params_closed(12, 768, 1024, 50257)); /* 124,439,808 */
    double g175 = params_of("gpt3-175b");
    assert_rel(g175, 174.6e9, 0.005, "gpt3-175b");
    assert_true(g175 == gpt_params_closed(96, 12288, 2048, 51200));
    assert_true(params_of("megatron-22b") == gpt_params_closed(48, 6144, 2048, 51200));
    /* Llama 2: 6,738,415,616 / 13,015,864,320 / 68,976,648,192 (Hugging Face counts). */
    assert_rel(params_of("llama2-7b"), 6.74e9, 0.005, "llama2-7b");
    assert_true(params_of("llama2-7b") == 6738415616.0);
    assert_true(params_of("llama2-13b") == 13015864320.0);
    assert_true(params_of("llama2-70b") == 68976648192.0);
    /* BERT base with the MLM head: 109,514,298 (BertForMaskedLM). */
    assert_rel(params_of("bert-base"), 110e6, 0.01, "bert-base");
    assert_true(params_of("bert-base") == 109514298.0);
    assert_rel(params_of("bert-large"), 335e6, 0.01, "bert-large");
    /* BertForPreTraining = BertModel (with its pooler) + the MLM transform and
     * decoder bias (decoder weight tied) + the next-sentence head: BertModel
     * base 109,482,240 + 768*768+768 + 2*768 + 30522 + 768*2+2; large
     * 335,141,888 + 1024*1024+1024 + 2*1024 + 30522 + 1024*2+2. */
    assert_true(params_of("bert-base-pretrain") == 109482240.0 + 768.0 * 768 + 768 + 2 * 768 + 30522 + 768 * 2 + 2);
    assert_true(params_of("bert-base-pretrain") == 110106428.0);
    assert_true(params_of("bert-large-pretrain") ==
                335141888.0 + 1024.0 * 1024 + 1024 + 2 * 1024 + 30522 + 1024 * 2 + 2);
    assert_true(params_of("bert-large-pretrain") == 336226108.0);
    assert_true(params_of("bert-base:nsp=1") == params_of("bert-base-pretrain"));
    /* Megatron SC21 Table 1: exactly the closed form, and the published sizes
     * (billions, printed with one decimal: they agree to the rounding; the
     * paper prints 1.7 for the first row, whose shapes give 1.652). */
    static const struct {
        const char *name;
        double l, h, billions;
    } meg[] = {{"megatron-1.7b", 24, 2304, 1.65},   {"megatron-3.6b", 30, 3072, 3.6},
               {"megatron-7.5b", 36, 4096, 7.5},    {"megatron-18b", 40, 6144, 18.4},
               {"megatron-39b", 48, 8192, 39.1},    {"megatron-76b", 60, 10240, 76.1},
               {"megatron-145b", 80, 12288, 145.6}, {"megatron-310b", 96, 16384, 310.1},
               {"megatron-530b", 105, 20480, 529.6}, {"megatron-1t", 128, 25600, 1008.0},
               {"turing-530b", 105, 20480, 529.6}};
    for (size_t i = 0; i < sizeof meg / sizeof meg[0]; i++) {
        double p = params_of(meg[i].name);
        assert_true(p == gpt_params_closed(meg[i].l, meg[i].h, 2048, 51200));
        assert_rel(p, meg[i].billions * 1e9, 0.051 / meg[i].billions, meg[i].name);
    }
}

/* SuperScaler's models against published counts:
 * - Swin-T 28,288,354 and Swin-B 87,768,224: torchvision's weight metadata
 *   ("num_params" of Swin_T_Weights / Swin_B_Weights.IMAGENET1K_V1,
 *   torchvision/models/swin_transformer.py, pytorch/vision b3054b4d).
 * - Swin-L 196.53M: timm's results/results-imagenet.csv, param_count of
 *   swin_large_patch4_window7_224 (huggingface/pytorch-image-models aa4b5850);
 *   the exact count is the torchvision layout at C 192, heads 6, 1000 classes.
 * - T5 v1.0 base 222,903,552, large 737,668,096, 3B 2,851,598,336: the
 *   "params" of KerasHub's T5 presets (keras-team/keras-hub 0ce2274f,
 *   keras_nlp/models/t5/t5_presets.py), the Hugging Face checkpoints' counts;
 *   11B 11,307,321,344 is the same layout at the t5-11b config's d_kv 128,
 *   128 heads, d_ff 65536 (1024 x 32128 shared + 24 encoder layers of
 *   4*1024*16384 + 2*1024*65536 + 2*1024, 24 decoder layers with a second
 *   attention and norm, 2 bias tables of 32 x 128, 2 final norms).
 * - AlphaFold2: no published count covers the trunk alone (the whole model
 *   with templates, the extra-MSA stack and the structure module is ~93M), so
 *   the Evoformer block is checked against the parameter shapes AF2's haiku
 *   modules create (google-deepmind/alphafold c77e5d2a, modules.py):
 *   row attention with pair bias 2*256 + 2*128 + 128*8 + 3*256*256 +
 *   (256*256+256) gating + (256*256+256) output; column attention the same
 *   without the pair terms; MSA transition 2*256 + 256*1024+1024 +
 *   1024*256+256; outer product mean 2*256 + 2*(256*32+32) + 32*32*128+128;
 *   each triangle multiplication 2*128 + 6*(128*128+128) + 2*128; each
 *   triangle attention 2*128 + 128*4 + 3*128*128 + 2*(128*128+128); the pair
 *   transition 2*128 + 128*512+512 + 512*128+128. */
static int find_op(const wf_graph *g, const char *name);

static void test_superscaler_params(void **state)
{
    (void)state;
    assert_true(params_of("swin-t") == 28288354.0);
    assert_true(params_of("swin-b") == 87768224.0);
    double swl = params_of("swin-l");
    assert_rel(swl, 196.53e6, 0.005 / 196.53, "swin-l"); /* 196.53M to the printed digits (+-0.005M) */
    assert_true(params_of("t5-base") == 222903552.0);
    assert_true(params_of("t5-large") == 737668096.0);
    assert_true(params_of("t5-3b") == 2851598336.0);
    assert_true(params_of("t5-11b") == 11307321344.0);
    const double row = 2 * 256 + 2 * 128 + 128 * 8 + 3 * 256 * 256 + 2 * (256 * 256 + 256);
    const double col = 2 * 256 + 3 * 256 * 256 + 2 * (256 * 256 + 256);
    const double msa_tr = 2 * 256 + 256 * 1024 + 1024 + 1024 * 256 + 256;
    const double opm = 2 * 256 + 2 * (256 * 32 + 32) + 32 * 32 * 128 + 128;
    const double tri_mul = 2 * 128 + 6 * (128 * 128 + 128) + 2 * 128;
    const double tri_att = 2 * 128 + 128 * 4 + 3 * 128 * 128 + 2 * (128 * 128 + 128);
    const double pair_tr = 2 * 128 + 128 * 512 + 512 + 512 * 128 + 128;
    const double block = row + col + msa_tr + opm + 2 * tri_mul + 2 * tri_att + pair_tr;
    assert_true(block == 1829952.0);
    wf_model_config m = lookup("alphafold2");
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
    wf_graph_totals t;
    wf_graph_block_totals_of(&g, 0, 7, &t);
    assert_true(t.params == block);
    wf_graph_free(&g);
    /* Embedders (preprocess_1d 22->256, preprocess_msa 49->256, left/right
     * single 22->128, relative positions 65->128, all with biases), the
     * recycling embedder (two LayerNorms, prev_pos_linear 15->128) and the
     * distogram head 128->64 around 48 blocks. */
    const double embed = (22 * 256 + 256) + (49 * 256 + 256) + 2 * (22 * 128 + 128) + (65 * 128 + 128);
    const double recycle = 2 * 256 + 2 * 128 + 15 * 128 + 128, head = 128 * 64 + 64;
    assert_true(params_of("alphafold2") == embed + recycle + 48 * block + head);
}

/* The structure the parameter counts cannot see: Swin's odd blocks roll and
 * mask, its last stage (7x7 = one window) does neither; T5's layers share
 * one bias table per stack and the decoder's cross-attention reads the
 * encoder; AlphaFold2's row attention takes a per-protein pair bias. */
static void test_superscaler_structure(void **state)
{
    (void)state;
    wf_model_config m = lookup("swin-t");
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    assert_int_equal(find_op(&g, "stages.0.blocks.0.attn.shift"), -1);
    int sh = find_op(&g, "stages.0.blocks.1.attn.shift");
    assert_true(sh >= 0);
    assert_int_equal(g.ops[sh].kind, WF_OP_ROLL);
    assert_true(g.ops[sh].attr.shifts[1] == -3 && g.ops[sh].attr.shifts[2] == -3);
    int core = find_op(&g, "stages.0.blocks.1.attn.core");
    assert_int_equal(g.ops[core].nin, 4);
    const wf_tensor *bias = &g.tensors[g.ops[core].in[3]], *q = &g.tensors[g.ops[core].in[0]];
    assert_true(bias->shape[0] == 64 && bias->shape[1] == 3 && bias->shape[2] == 49); /* 8x8 windows */
    assert_true(q->shape[0] == 64 * 2 && q->shape[1] == 49);
    assert_int_equal(find_op(&g, "stages.3.blocks.1.attn.shift"), -1);
    assert_true(g.tensors[g.ops[find_op(&g, "stages.3.blocks.1.attn.core")].in[3]].shape[0] == 1);
    wf_graph_free(&g);

    m = lookup("t5:layers=2,hidden=64,heads=4,head_dim=8,ffn=128,seq=16,dec_seq=8,vocab=100");
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    int e0 = find_op(&g, "encoder.layers.0.attn.core"), e1 = find_op(&g, "encoder.layers.1.attn.core");
    assert_int_equal(g.ops[e0].in[3], g.ops[e1].in[3]);
    assert_true(g.ops[e0].attr.scale == 1.0);
    int x = find_op(&g, "decoder.layers.1.cross_attn.core"), s1 = find_op(&g, "decoder.layers.1.self_attn.core");
    assert_int_equal(g.ops[x].nin, 3);
    assert_int_equal(g.ops[s1].attr.causal, 1);
    assert_true(g.tensors[g.ops[x].in[0]].shape[1] == 8 && g.tensors[g.ops[x].in[1]].shape[1] == 16);
    int k = find_op(&g, "decoder.layers.1.cross_attn.k"), enc = find_op(&g, "encoder.final_dropout");
    assert_true(k >= 0 && enc >= 0);
    assert_int_equal(g.ops[k].in[0], g.ops[enc].out[0]);
    wf_graph_free(&g);

    m = lookup("alphafold:layers=1,msa=4,seq=6,hidden=32,pair=16");
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    int r = find_op(&g, "evoformer.0.msa_row_attn.attention.core");
    const wf_tensor *rb = &g.tensors[g.ops[r].in[3]];
    assert_true(rb->shape[0] == 2 && rb->shape[1] == 8 && rb->shape[2] == 6); /* one per protein */
    assert_true(g.tensors[g.ops[r].in[0]].shape[0] == 2 * 4);                  /* rows: proteins x sequences */
    int t = find_op(&g, "evoformer.0.tri_att_end.attention.core");
    assert_true(g.tensors[g.ops[t].in[3]].shape[1] == 4 && g.tensors[g.ops[t].in[0]].shape[0] == 2 * 6);
    assert_int_equal(g.ops[find_op(&g, "evoformer.0.tri_mul_in.triangle")].attr.trans_a, 1);
    assert_int_equal(g.ops[find_op(&g, "evoformer.0.tri_mul_out.triangle")].attr.trans_b, 1);
    assert_true(m.recycle == 3);
    wf_graph_free(&g);
}

/* Training FLOPs per sequence (B=1, no recompute) vs Narayanan et al. eq. 3
 * with factor 72: 72 s l h^2 (1 + s/(6h) + V/(12 l h)). */
static void test_training_flops(void **state)
{
    (void)state;
    const char *names[] = {"gpt2", "gpt3-175b", "megatron-22b", "gpt3-1.3b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        wf_model_config m = lookup(names[i]);
        wf_graph g;
        assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
        wf_graph_totals t;
        wf_graph_totals_of(&g, &t);
        double s = (double)m.seq, l = (double)m.layers, h = (double)m.hidden, V = (double)m.vocab;
        double want = 72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
        assert_rel(t.fwd_flops + t.bwd_flops, want, 0.01, names[i]);
        /* Forward alone is a third. */
        assert_rel(t.fwd_flops, want / 3, 0.01, names[i]);
        wf_graph_free(&g);
    }
}

/* One GPT layer saves 34 s b h + 5 a s^2 b bytes (fp16, Korthikanti et al.). */
static void test_gpt_layer_saved_bytes(void **state)
{
    (void)state;
    wf_model_config m = lookup("gpt:layers=3,hidden=256,heads=8,seq=128,vocab=1000");
    assert_int_equal(m.dtype, WF_DTYPE_FP16);
    for (int64_t b = 1; b <= 4; b *= 2) {
        wf_graph g;
        assert_int_equal(wf_model_build(&m, b, &g), WF_OK);
        double s = 128, h = 256, a = 8;
        double want = 34 * s * (double)b * h + 5 * a * s * s * (double)b;
        for (int layer = 0; layer < 3; layer++) {
            wf_graph_totals t;
            wf_graph_block_totals_of(&g, 0, layer, &t);
            assert_rel(t.saved_bytes, want, 1e-12, "gpt layer saved bytes");
            assert_rel(t.params, 12 * h * h + 13 * h, 1e-12, "gpt layer params");
        }
        wf_graph_free(&g);
    }
}

static int find_op(const wf_graph *g, const char *name)
{
    for (int i = 0; i < g->nops; i++)
        if (strcmp(g->ops[i].name, name) == 0)
            return i;
    return -1;
}

static void assert_stamp(const wf_graph *g, const char *op, int block, int layer, wf_tp_role tp)
{
    int i = find_op(g, op);
    if (i < 0)
        fail_msg("no op '%s'", op);
    if (g->ops[i].block != block || g->ops[i].layer != layer || g->ops[i].tp != tp)
        fail_msg("op '%s': block %d layer %d tp %d, want %d %d %d", op, g->ops[i].block,
                 g->ops[i].layer, (int)g->ops[i].tp, block, layer, (int)tp);
}

static void test_stamps(void **state)
{
    (void)state;
    wf_model_config m = lookup("gpt-tiny");
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    assert_stamp(&g, "embed.tokens", -1, -1, WF_TP_VOCAB);
    assert_stamp(&g, "embed.add_positions", -1, -1, WF_TP_NONE);
    assert_stamp(&g, "layers.1.ln1", 0, 1, WF_TP_NONE);
    assert_stamp(&g, "layers.1.attn.qkv", 0, 1, WF_TP_COL);
    assert_stamp(&g, "layers.1.attn.split", 0, 1, WF_TP_SHARD);
    assert_stamp(&g, "layers.1.attn.core", 0, 1, WF_TP_SHARD);
    assert_stamp(&g, "layers.1.attn.proj", 0, 1, WF_TP_ROW);
    assert_stamp(&g, "layers.1.attn.dropout", 0, 1, WF_TP_NONE);
    assert_stamp(&g, "layers.1.attn.residual", 0, 1, WF_TP_NONE);
    assert_stamp(&g, "layers.0.mlp.fc1", 0, 0, WF_TP_COL);
    assert_stamp(&g, "layers.0.mlp.gelu", 0, 0, WF_TP_SHARD);
    assert_stamp(&g, "layers.0.mlp.fc2", 0, 0, WF_TP_ROW);
    assert_stamp(&g, "head.logits", -1, -1, WF_TP_VOCAB);
    /* The logits share the embedding table (one parameter, counted once). */
    int lo = find_op(&g, "head.logits"), em = find_op(&g, "embed.tokens");
    assert_int_equal(g.ops[lo].in[1], g.ops[em].in[1]);
    assert_int_equal(g.ops[lo].attr.trans_b, 1);
    /* Every layer has the same op sequence. */
    int n0 = 0, n1 = 0;
    for (int i = 0; i < g.nops; i++) {
        n0 += g.ops[i].block == 0 && g.ops[i].layer == 0;
        n1 += g.ops[i].block == 0 && g.ops[i].layer == 1;
    }
    assert_int_equal(n0, 13);
    assert_int_equal(n1, 13);
    wf_graph_free(&g);

    m = lookup("llama:layers=2,hidden=128,heads=4,kv_heads=2,seq=16,vocab=100");
    assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
    assert_int_equal(m.ffn, 512); /* 8*128/3 = 341.3 -> 512 (multiple of 256) */
    assert_stamp(&g, "layers.0.attn.rotary_k", 0, 0, WF_TP_SHARD);
    assert_stamp(&g, "layers.1.mlp.gate", 0, 1, WF_TP_COL);
    assert_stamp(&g, "layers.1.mlp.up", 0, 1, WF_TP_COL);
    assert_stamp(&g, "layers.1.mlp.mul", 0, 1, WF_TP_SHARD);
    assert_stamp(&g, "layers.1.mlp.down", 0, 1, WF_TP_ROW);
    assert_stamp(&g, "head.logits", -1, -1, WF_TP_VOCAB);
    int core = find_op(&g, "layers.0.attn.core");
    assert_int_equal(g.ops[core].attr.kv_heads, 2);
    assert_int_equal(g.tensors[g.ops[core].in[1]].shape[2], 64); /* k: 2 kv heads x 32 */
    wf_graph_free(&g);

    /* ResNet-50: stage 3 has 6 blocks: block 4 layer 0, then block 5 layers 0..4. */
    m = lookup("resnet50");
    assert_int_equal(wf_model_build(&m, 1, &g), WF_OK);
    assert_stamp(&g, "conv1", -1, -1, WF_TP_NONE);
    assert_stamp(&g, "layer3.0.downsample.conv", 4, 0, WF_TP_NONE);
    assert_stamp(&g, "layer3.1.conv2", 5, 0, WF_TP_NONE);
    assert_stamp(&g, "layer3.5.conv3", 5, 4, WF_TP_NONE);
    assert_stamp(&g, "fc", -1, -1, WF_TP_NONE);
    wf_graph_totals a, b;
    wf_graph_block_totals_of(&g, 5, 0, &a);
    wf_graph_block_totals_of(&g, 5, 4, &b);
    assert_true(a.fwd_flops == b.fwd_flops && a.params == b.params && a.params > 0);
    wf_graph_free(&g);
}

static void test_zoo_builds(void **state)
{
    (void)state;
    assert_true(wf_zoo_count() >= 40);
    for (int i = 0; i < wf_zoo_count(); i++) {
        const wf_zoo_entry *e = wf_zoo_entry_at(i);
        assert_non_null(e);
        wf_model_config m = lookup(e->name);
        assert_string_equal(m.name, e->name);
        assert_string_equal(wf_family_name(m.family), e->family);
        wf_graph g;
        wf_status st = wf_model_build(&m, 1, &g);
        if (st != WF_OK)
            fail_msg("build %s: %s", e->name, wf_last_error());
        st = wf_graph_validate(&g);
        if (st != WF_OK)
            fail_msg("validate %s: %s", e->name, wf_last_error());
        assert_true(g.loss >= 0);
        /* The graph is differentiable end to end (the runtime and the search need it). */
        st = wf_graph_autodiff(&g);
        if (st == WF_OK)
            st = wf_graph_validate(&g);
        if (st != WF_OK)
            fail_msg("autodiff %s: %s", e->name, wf_last_error());
        assert_true(g.nops > g.nfwd);
        /* tiny models are fp32, T5 and AlphaFold2 bf16 (as they were trained),
         * the rest fp16 (mlp is fp32 too) */
        int tiny = strstr(e->name, "tiny") != NULL || strcmp(e->name, "mlp") == 0;
        int bf16 = m.family == WF_FAMILY_T5 || m.family == WF_FAMILY_ALPHAFOLD;
        assert_int_equal(m.dtype, tiny ? WF_DTYPE_FP32 : bf16 ? WF_DTYPE_BF16 : WF_DTYPE_FP16);
        assert_int_equal(wf_model_is_transformer(&m),
                         m.family == WF_FAMILY_GPT || m.family == WF_FAMILY_LLAMA ||
                             m.family == WF_FAMILY_BERT);
        wf_graph_free(&g);
    }
    assert_null(wf_zoo_entry_at(wf_zoo_count()));
    assert_null(wf_zoo_entry_at(-1));
}

static void test_batch_scales(void **state)
{
    (void)state;
    const char *names[] = {"gpt-tiny", "bert-tiny", "cnn-tiny", "mlp-tiny", "resnet18"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        wf_model_config m = lookup(names[i]);
        wf_graph g1, g4;
        assert_int_equal(wf_model_build(&m, 1, &g1), WF_OK);
        assert_int_equal(wf_model_build(&m, 4, &g4), WF_OK);
        wf_graph_totals t1, t4;
        wf_graph_totals_of(&g1, &t1);
        wf_graph_totals_of(&g4, &t4);
        assert_true(t1.params == t4.params);
        /* every FLOP and saved byte is per sample */
        assert_rel(t4.fwd_flops, 4 * t1.fwd_flops, 0.02, names[i]);
        assert_rel(t4.saved_bytes, 4 * t1.saved_bytes, 1e-9, names[i]);
        wf_graph_free(&g1);
        wf_graph_free(&g4);
    }
}

static void test_overrides(void **state)
{
    (void)state;
    wf_model_config m = lookup("gpt2:seq=512");
    assert_int_equal(m.seq, 512);
    assert_int_equal(m.layers, 12);
    assert_string_equal(m.name, "gpt2:seq=512");
    assert_true(params_of("gpt2:seq=512") == gpt_params_closed(12, 768, 512, 50257));
    m = lookup("gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200");
    assert_int_equal(m.ffn, 4 * 12288);
    assert_true(params_of("gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200") ==
                params_of("gpt3-175b"));
    m = lookup("gpt:layers=2,hidden=64,heads=4,ffn=100,dtype=bf16");
    assert_int_equal(m.ffn, 100);
    assert_int_equal(m.dtype, WF_DTYPE_BF16);
    m = lookup("llama2-70b:layers=2");
    assert_int_equal(m.ffn, 28672);
    assert_int_equal(m.kv_heads, 8);
    m = lookup("llama2-7b:hidden=2048,heads=16");
    assert_int_equal(m.ffn, 5632); /* re-derived: 8*2048/3 = 5461.3 -> 5632 */
    m = lookup("resnet:depth=101");
    assert_true(params_of("resnet:depth=101") == 44549160.0);
    m = lookup("vgg:depth=16,image=32,classes=10");
    assert_int_equal(m.image, 32);
    assert_true(params_of("vgg:depth=16,image=32,classes=10") ==
                138357544.0 - (25088.0 - 512) * 4096 - 4096.0 * 990 - 990);
    m = lookup("mlp:sizes=10-20-30-5");
    assert_int_equal(m.nsizes, 4);
    assert_true(params_of("mlp:sizes=10-20-30-5") == 10 * 20 + 20 + 20 * 30 + 30 + 30 * 5 + 5);
    m = lookup("cnn-tiny:sizes=4");
    assert_true(params_of("cnn-tiny:sizes=4") == 4 * 9 + 4 + 4 * 14 * 14 * 10 + 10);
    m = lookup("bert:layers=1,hidden=64,heads=2,seq=16,vocab=50");
    assert_false(m.causal);
    m = lookup("gpt-tiny");
    assert_true(m.causal);
}

static void expect_inval(const char *spec, const char *needle)
{
    wf_model_config m;
    wf_clear_error();
    wf_status st = wf_model_lookup(spec, &m);
    if (st != WF_INVAL)
        fail_msg("'%s': status %d, want WF_INVAL", spec, (int)st);
    if (!strstr(wf_last_error(), needle))
        fail_msg("'%s': message '%s' does not name '%s'", spec, wf_last_error(), needle);
}

static void test_errors(void **state)
{
    (void)state;
    expect_inval("gpt5", "gpt5");
    expect_inval("", "empty");
    expect_inval("gpt2:layrs=3", "layrs");
    expect_inval("gpt2:layers=abc", "abc");
    expect_inval("gpt2:layers=0", "layers=0");
    expect_inval("gpt2:heads=7", "heads=7");
    expect_inval("gpt2:dtype=int8", "int8");
    expect_inval("gpt:hidden=-5", "-5");
    expect_inval("llama2-7b:kv_heads=5", "kv_heads=5");
    expect_inval("gpt2:kv_heads=4", "kv_heads"); /* not a gpt key */
    expect_inval("resnet:depth=51", "depth=51");
    expect_inval("vgg16:depth=12", "depth=12");
    expect_inval("vgg16:image=16", "image=16");
    expect_inval("resnet50:sizes=3", "sizes");
    expect_inval("mlp:sizes=784", "784");
    expect_inval("mlp:sizes=784-x-10", "x");
    expect_inval("mlp:sizes=784--10", "784--10");
    expect_inval("mlp:sizes=784-10,dtype=fp8", "fp8");
    expect_inval("cnn:sizes=8-16,image=2", "image=2");
    expect_inval("gpt2:seq=", "seq");
    /* batch */
    wf_model_config m = lookup("gpt-tiny");
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 0, &g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "batch=0"));
    wf_graph_free(&g);
}

/* ---- model JSON files ------------------------------------------------------------- */

static char g_tmpdir[256];

static const char *write_tmp(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_format(const char *name, const char *text, const char *needle)
{
    const char *path = write_tmp(name, text);
    wf_model_config m;
    wf_clear_error();
    wf_status st = wf_model_lookup(path, &m);
    if (st != WF_FORMAT)
        fail_msg("%s: status %d (%s), want WF_FORMAT", text, (int)st, wf_last_error());
    if (!strstr(wf_last_error(), needle))
        fail_msg("%s: message '%s' does not name '%s'", text, wf_last_error(), needle);
}

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/weft-test-models-XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_json_family(void **state)
{
    (void)state;
    const char *p = write_tmp("fam.json", "{\"family\":\"gpt\",\"name\":\"my-gpt\",\"layers\":96,"
                                          "\"hidden\":12288,\"heads\":96,\"seq\":2048,"
                                          "\"vocab\":51200,\"dtype\":\"fp16\"}");
    wf_model_config m = lookup(p);
    assert_string_equal(m.name, "my-gpt");
    double a = 0;
    assert_int_equal(wf_model_params(&m, &a), WF_OK);
    assert_true(a == params_of("gpt3-175b"));
    p = write_tmp("mlp.json", "{\"family\":\"mlp\",\"sizes\":[784,100,10]}");
    m = lookup(p);
    assert_int_equal(wf_model_params(&m, &a), WF_OK);
    assert_true(a == 784 * 100 + 100 + 100 * 10 + 10);

    expect_format("bad1.json", "{\"family\":\"gpt\",\"layerz\":3}", "layerz");
    expect_format("bad2.json", "{\"family\":\"gpt\",\"layers\":2.5}", "layers");
    expect_format("bad3.json", "{\"family\":\"gpt\",\"heads\":7}", "heads=7");
    expect_format("bad4.json", "{\"family\":\"transformer\"}", "transformer");
    expect_format("bad5.json", "{\"family\":\"gpt\",", "malformed");
    expect_format("bad6.json", "[1,2]", "object");
    expect_format("bad7.json", "{\"layers\":3}", "family");
    expect_format("bad8.json", "{\"family\":\"gpt\",\"layers\":{}}", "layers");
    /* a missing file is an I/O error naming it */
    wf_model_config m2;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.json", g_tmpdir);
    assert_int_equal(wf_model_lookup(missing, &m2), WF_IO);
    assert_non_null(strstr(wf_last_error(), "nope.json"));
}

static const char *OPLIST =
    "{\"name\":\"two-layer\",\n"
    " \"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[\"B\",8],\"role\":\"input\"},\n"
    "   {\"name\":\"y\",\"dtype\":\"int32\",\"shape\":[\"B\"],\"role\":\"label\"},\n"
    "   {\"name\":\"w1\",\"dtype\":\"fp32\",\"shape\":[8,16],\"role\":\"param\"},\n"
    "   {\"name\":\"b1\",\"dtype\":\"fp32\",\"shape\":[16],\"role\":\"param\"},\n"
    "   {\"name\":\"w2\",\"dtype\":\"fp32\",\"shape\":[16,4],\"role\":\"param\"}],\n"
    " \"ops\":[{\"kind\":\"linear\",\"name\":\"fc1\",\"inputs\":[\"x\",\"w1\",\"b1\"],\"tp\":\"col\","
    "\"block\":0,\"layer\":0},\n"
    "   {\"kind\":\"relu\",\"name\":\"act\",\"inputs\":[\"fc1\"]},\n"
    "   {\"kind\":\"matmul\",\"name\":\"fc2\",\"inputs\":[\"act\",\"w2\"]},\n"
    "   {\"kind\":\"cross_entropy\",\"name\":\"loss\",\"inputs\":[\"fc2\",\"y\"]}],\n"
    " \"loss\":\"loss\"}\n";

static void test_json_oplist(void **state)
{
    (void)state;
    const char *p = write_tmp("ops.json", OPLIST);
    wf_model_config m = lookup(p);
    assert_int_equal(m.family, WF_FAMILY_GRAPH);
    assert_string_equal(m.name, "two-layer");
    assert_false(wf_model_is_transformer(&m));
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 5, &g), WF_OK);
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    assert_int_equal(g.nops, 4);
    assert_int_equal(g.tensors[g.ops[0].in[0]].shape[0], 5);
    assert_int_equal(g.ops[0].tp, WF_TP_COL);
    assert_int_equal(g.ops[0].block, 0);
    assert_int_equal(g.ops[1].block, -1);
    assert_int_equal(g.tensors[g.loss].ndim, 0);
    wf_graph_free(&g);
    double params = 0;
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    assert_true(params == 8 * 16 + 16 + 16 * 4);

    /* A reshape target and split sizes with "B" and -1. */
    p = write_tmp("ops2.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[\"B\",2,6],"
                  "\"role\":\"input\"},{\"name\":\"y\",\"dtype\":\"int32\",\"shape\":[\"B\"],"
                  "\"role\":\"label\"},{\"name\":\"w\",\"dtype\":\"fp32\",\"shape\":[4,3],"
                  "\"role\":\"param\"}],"
                  "\"ops\":[{\"kind\":\"split\",\"name\":\"s\",\"inputs\":[\"x\"],"
                  "\"attrs\":{\"axis\":-1,\"sizes\":[2,4]}},"
                  "{\"kind\":\"reshape\",\"name\":\"r\",\"inputs\":[\"s.1\"],"
                  "\"attrs\":{\"shape\":[\"B\",-1]}},"
                  "{\"kind\":\"reshape\",\"name\":\"r2\",\"inputs\":[\"r\"],"
                  "\"attrs\":{\"shape\":[-1,4]}},"
                  "{\"kind\":\"matmul\",\"name\":\"m\",\"inputs\":[\"r2\",\"w\"]},"
                  "{\"kind\":\"reshape\",\"name\":\"r3\",\"inputs\":[\"m\"],"
                  "\"attrs\":{\"shape\":[\"B\",6]}},"
                  "{\"kind\":\"cross_entropy\",\"name\":\"ce\",\"inputs\":[\"r3\",\"y\"]}]}");
    m = lookup(p);
    assert_string_equal(m.name, p);
    assert_int_equal(wf_model_build(&m, 3, &g), WF_OK);
    assert_int_equal(g.tensors[g.loss].producer, 5);
    wf_graph_free(&g);

    expect_format("o1.json", "{\"tensors\":[],\"ops\":[{\"kind\":\"conv3d\",\"name\":\"c\","
                             "\"inputs\":[]}]}",
                  "conv3d");
    expect_format("o2.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"input\",\"color\":1}],\"ops\":[]}",
                  "color");
    expect_format("o3.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"input\"}],\"ops\":[{\"kind\":\"relu\",\"name\":\"r\",\"inputs\":[\"z\"]}]}",
                  "\"z\"");
    expect_format("o4.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2,3],\"role\":"
                  "\"input\"},{\"name\":\"w\",\"dtype\":\"fp32\",\"shape\":[4,5],\"role\":"
                  "\"param\"}],\"ops\":[{\"kind\":\"matmul\",\"name\":\"mm\",\"inputs\":[\"x\","
                  "\"w\"]}]}",
                  "mm");
    expect_format("o5.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp33\",\"shape\":[2],\"role\":"
                  "\"input\"}],\"ops\":[]}",
                  "fp33");
    expect_format("o6.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"input\"}],\"ops\":[{\"kind\":\"relu\",\"name\":\"r\",\"inputs\":[\"x\"],"
                  "\"attrs\":{\"heads\":0}}]}",
                  "heads");
    expect_format("o7.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"input\"}],\"ops\":[{\"kind\":\"relu\",\"name\":\"r\",\"inputs\":[\"x\"],"
                  "\"attrs\":{\"colour\":0}}]}",
                  "colour");
    expect_format("o8.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"input\"}],\"ops\":[{\"kind\":\"relu\",\"name\":\"r\",\"inputs\":[\"x\"]}]}",
                  "no loss");
    expect_format("o9.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[0],\"role\":"
                  "\"input\"}],\"ops\":[]}",
                  "dimension");
    expect_format("o10.json",
                  "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"fp32\",\"shape\":[2],\"role\":"
                  "\"weights\"}],\"ops\":[]}",
                  "weights");
    expect_format("o11.json", "{\"tensors\":[],\"ops\":[],\"extra\":1}", "extra");
    expect_format("o12.json", "{\"ops\":[]}", "tensors");
}

/* Every ```json block in docs/model-format.md is a model file that loads and builds. */
static void test_doc_examples(void **state)
{
    (void)state;
    const char *src = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/model-format.md", src ? src : ".");
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char line[1024], buf[16384];
    size_t n = 0;
    int in = 0, count = 0;
    while (fgets(line, sizeof line, f)) {
        if (!in && strncmp(line, "```json", 7) == 0) {
            in = 1;
            n = 0;
            continue;
        }
        if (in && strncmp(line, "```", 3) == 0) {
            in = 0;
            buf[n] = 0;
            char name[32];
            snprintf(name, sizeof name, "doc%d.json", count++);
            const char *p = write_tmp(name, buf);
            wf_model_config m = lookup(p);
            wf_graph g;
            if (wf_model_build(&m, 2, &g) != WF_OK)
                fail_msg("doc example %d: %s", count, wf_last_error());
            assert_int_equal(wf_graph_validate(&g), WF_OK);
            wf_graph_free(&g);
            continue;
        }
        if (in) {
            size_t l = strlen(line);
            assert_true(n + l < sizeof buf);
            memcpy(buf + n, line, l);
            n += l;
        }
    }
    fclose(f);
    assert_true(count >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cnn_params_exact),
        cmocka_unit_test(test_transformer_params),
        cmocka_unit_test(test_superscaler_params),
        cmocka_unit_test(test_superscaler_structure),
        cmocka_unit_test(test_training_flops),
        cmocka_unit_test(test_gpt_layer_saved_bytes),
        cmocka_unit_test(test_stamps),
        cmocka_unit_test(test_zoo_builds),
        cmocka_unit_test(test_batch_scales),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_json_family),
        cmocka_unit_test(test_json_oplist),
        cmocka_unit_test(test_doc_examples),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
