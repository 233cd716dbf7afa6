/* The model zoo: named presets, family specs with key=value overrides, model
 * JSON files (a family with keys, or an explicit op list), and the dispatch
 * from a model config to its graph builder.
 *
 * A spec resolves in three steps: pick the base (a zoo entry, or a family's
 * base entry when the name is a family), apply the overrides with the
 * family's setter (each key validated), then fill the derived defaults
 * (ffn = 4h for gpt/bert, the SwiGLU width for llama, kv_heads = heads) and
 * check the shape rules (heads divide hidden, ...). Sources of the preset
 * numbers are listed in docs/model-format.md. */
#include "models/models-impl.h"
#include "weft/onnx.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the zoo table ------------------------------------------------------------ */

typedef struct {
    wf_zoo_entry e;      /* name, family name, summary */
    wf_family family;
    wf_dtype dtype;
    /* transformers (ffn 0: derived from hidden; kv_heads 0: = heads) */
    int64_t layers, hidden, heads, kv_heads, seq, vocab, ffn;
    /* CNNs */
    int64_t depth, image, channels, classes;
    /* mlp layer sizes / cnn conv widths, "a-b-c" */
    const char *sizes;
    /* llama mixtures of experts and latent attention, NULL for dense models */
    const struct zoo_moe *moe;
    int nsp; /* bert: the pretraining heads (pooler and next-sentence prediction) */
    const struct zoo_ext *ext; /* swin, t5, alphafold: their own numbers, else NULL */
} zoo_preset;

/* The numbers of the Swin, T5 and AlphaFold2 presets beyond the common
 * fields (fields as in wf_model_config). */
typedef struct zoo_ext {
    int64_t window, head_dim, dec_seq, msa, pair_dim, recycle;
} zoo_ext;

/* The expert and MLA numbers of a llama preset (fields as in wf_model_config). */
typedef struct zoo_moe {
    int64_t experts, top_k, moe_ffn, shared_experts, first_dense;
    wf_moe_score score;
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
} zoo_moe;

/* Mixtral (Jiang et al. 2024): 8 SwiGLU experts of the dense width, top-2, softmax router. */
static const zoo_moe g_mixtral = {.experts = 8, .top_k = 2, .score = WF_MOE_SCORE_SOFTMAX};
/* DeepSeek-V3 (DeepSeek-AI 2024, Table and config.json): 256 routed experts of
 * width 2048, top-8 by sigmoid scores, 1 shared expert, the first 3 layers
 * dense (width 18432); MLA with q_lora 1536, kv_lora 512, per head 128 + 64
 * query/key dims and 128 value dims. */
static const zoo_moe g_deepseek_v3 = {.experts = 256, .top_k = 8, .moe_ffn = 2048,
                                      .shared_experts = 1, .first_dense = 3,
                                      .score = WF_MOE_SCORE_SIGMOID, .q_lora = 1536,
                                      .kv_lora = 512, .qk_nope = 128, .qk_rope = 64,
                                      .v_head = 128};
/* Tiny fp32 mixtures for tests: 4 experts top-2 with a shared expert; and a
 * DeepSeek-shaped one (MLA, a dense first layer, sigmoid routing). */
static const zoo_moe g_moe_tiny = {.experts = 4, .top_k = 2, .moe_ffn = 96, .shared_experts = 1,
                                   .score = WF_MOE_SCORE_SOFTMAX};
static const zoo_moe g_deepseek_tiny = {.experts = 8, .top_k = 2, .moe_ffn = 32,
                                        .shared_experts = 1, .first_dense = 1,
                                        .score = WF_MOE_SCORE_SIGMOID, .q_lora = 32,
                                        .kv_lora = 16, .qk_nope = 16, .qk_rope = 8,
                                        .v_head = 16};

#define FP16 WF_DTYPE_FP16
#define FP32 WF_DTYPE_FP32
#define GPT(nm, sum, L, H, A, S, V, dt) \
    {{nm, "gpt", sum}, WF_FAMILY_GPT, dt, L, H, A, 0, S, V, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL}
#define LLAMA(nm, sum, L, H, A, AKV, S, V, F) \
    {{nm, "llama", sum}, WF_FAMILY_LLAMA, FP16, L, H, A, AKV, S, V, F, 0, 0, 0, 0, NULL, NULL, 0, NULL}
#define MOE(nm, sum, L, H, A, AKV, S, V, F, dt, moe) \
    {{nm, "llama", sum}, WF_FAMILY_LLAMA, dt, L, H, A, AKV, S, V, F, 0, 0, 0, 0, NULL, moe, 0, NULL}
#define BERT(nm, sum, L, H, A, S, V, dt) \
    {{nm, "bert", sum}, WF_FAMILY_BERT, dt, L, H, A, 0, S, V, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL}
#define BERT_PT(nm, sum, L, H, A, S, V, dt) \
    {{nm, "bert", sum}, WF_FAMILY_BERT, dt, L, H, A, 0, S, V, 0, 0, 0, 0, 0, NULL, NULL, 1, NULL}
#define CNN(nm, fam, famname, sum, D, I, C, K, dt, sz) \
    {{nm, famname, sum}, fam, dt, 0, 0, 0, 0, 0, 0, 0, D, I, C, K, sz, NULL, 0, NULL}

/* Swin (torchvision swin_t/swin_b; timm swin_large_patch4_window7_224): patch 4, window 7. */
static const zoo_ext g_swin = {.window = 7};
/* T5 v1.0 (Hugging Face t5-*): 32 relative-position buckets; d_kv 64, or 128 for 3b and 11b. */
static const zoo_ext g_t5_64 = {.head_dim = 64, .dec_seq = 512};
static const zoo_ext g_t5_128 = {.head_dim = 128, .dec_seq = 512};
/* AlphaFold2 monomer training (Jumper et al. 2021, Suppl. 1.11.3; config.py): crops of
 * 256 residues and 128 MSA sequences, MSA 256 and pair 128 channels, 3 recycles. */
static const zoo_ext g_af2 = {.msa = 128, .pair_dim = 128, .recycle = 3};
#define SWIN(nm, sum, C, A, depths, dt) \
    {{nm, "swin", sum}, WF_FAMILY_SWIN, dt, 0, C, A, 0, 0, 0, 0, 0, 224, 3, 1000, depths, NULL, 0, &g_swin}
#define T5(nm, sum, L, H, A, F, ext) \
    {{nm, "t5", sum}, WF_FAMILY_T5, WF_DTYPE_BF16, L, H, A, 0, 512, 32128, F, 0, 0, 0, 0, NULL, NULL, 0, ext}
#define AF2(nm, sum, L, CM, N, dt) \
    {{nm, "alphafold", sum}, WF_FAMILY_ALPHAFOLD, dt, L, CM, 8, 0, N, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, &g_af2}

static const zoo_preset g_zoo[] = {
    /* GPT-2 (Radford et al. 2019): vocabulary 50257, context 1024. */
    GPT("gpt2", "GPT-2 small: 12 layers, hidden 768, 12 heads, seq 1024", 12, 768, 12, 1024, 50257, FP16),
    GPT("gpt2-medium", "GPT-2 medium: 24 layers, hidden 1024, 16 heads, seq 1024", 24, 1024, 16, 1024, 50257, FP16),
    GPT("gpt2-large", "GPT-2 large: 36 layers, hidden 1280, 20 heads, seq 1024", 36, 1280, 20, 1024, 50257, FP16),
    GPT("gpt2-xl", "GPT-2 XL: 48 layers, hidden 1600, 25 heads, seq 1024", 48, 1600, 25, 1024, 50257, FP16),
    /* GPT-3 (Brown et al. 2020, Table 2.1); vocabulary padded to 51200 as in
     * Megatron-LM, seq 2048. 1.3B uses 16 heads (the table's 24 do not divide
     * 2048); 13B uses hidden 5120 (the table's 5140 is a typo: 40 x 128). */
    GPT("gpt3-125m", "GPT-3 Small: 12 layers, hidden 768, 12 heads, seq 2048", 12, 768, 12, 2048, 51200, FP16),
    GPT("gpt3-350m", "GPT-3 Medium: 24 layers, hidden 1024, 16 heads, seq 2048", 24, 1024, 16, 2048, 51200, FP16),
    GPT("gpt3-760m", "GPT-3 Large: 24 layers, hidden 1536, 16 heads, seq 2048", 24, 1536, 16, 2048, 51200, FP16),
    GPT("gpt3-1.3b", "GPT-3 XL: 24 layers, hidden 2048, 16 heads, seq 2048", 24, 2048, 16, 2048, 51200, FP16),
    GPT("gpt3-2.7b", "GPT-3 2.7B: 32 layers, hidden 2560, 32 heads, seq 2048", 32, 2560, 32, 2048, 51200, FP16),
    GPT("gpt3-6.7b", "GPT-3 6.7B: 32 layers, hidden 4096, 32 heads, seq 2048", 32, 4096, 32, 2048, 51200, FP16),
    GPT("gpt3-13b", "GPT-3 13B: 40 layers, hidden 5120, 40 heads, seq 2048", 40, 5120, 40, 2048, 51200, FP16),
    GPT("gpt3-175b", "GPT-3 175B: 96 layers, hidden 12288, 96 heads, seq 2048", 96, 12288, 96, 2048, 51200, FP16),
    /* Megatron-LM GPT sizes (Narayanan et al. SC21, Table 1), seq 2048, vocab 51200. */
    GPT("megatron-1.7b", "Megatron GPT 1.7B: 24 layers, hidden 2304, 24 heads", 24, 2304, 24, 2048, 51200, FP16),
    GPT("megatron-3.6b", "Megatron GPT 3.6B: 30 layers, hidden 3072, 32 heads", 30, 3072, 32, 2048, 51200, FP16),
    GPT("megatron-7.5b", "Megatron GPT 7.5B: 36 layers, hidden 4096, 32 heads", 36, 4096, 32, 2048, 51200, FP16),
    GPT("megatron-18b", "Megatron GPT 18B: 40 layers, hidden 6144, 48 heads", 40, 6144, 48, 2048, 51200, FP16),
    GPT("megatron-22b", "Megatron GPT 22B (Korthikanti et al. 2022): 48 layers, hidden 6144, 64 heads", 48, 6144, 64, 2048, 51200, FP16),
    GPT("megatron-39b", "Megatron GPT 39B: 48 layers, hidden 8192, 64 heads", 48, 8192, 64, 2048, 51200, FP16),
    GPT("megatron-76b", "Megatron GPT 76B: 60 layers, hidden 10240, 80 heads", 60, 10240, 80, 2048, 51200, FP16),
    GPT("megatron-145b", "Megatron GPT 145B: 80 layers, hidden 12288, 96 heads", 80, 12288, 96, 2048, 51200, FP16),
    GPT("megatron-310b", "Megatron GPT 310B: 96 layers, hidden 16384, 128 heads", 96, 16384, 128, 2048, 51200, FP16),
    GPT("megatron-530b", "Megatron GPT 530B: 105 layers, hidden 20480, 128 heads", 105, 20480, 128, 2048, 51200, FP16),
    GPT("megatron-1t", "Megatron GPT 1T: 128 layers, hidden 25600, 160 heads", 128, 25600, 160, 2048, 51200, FP16),
    GPT("turing-530b", "Megatron-Turing NLG 530B: 105 layers, hidden 20480, 128 heads", 105, 20480, 128, 2048, 51200, FP16),
    /* Llama 2 (Touvron et al. 2023): RMSNorm, SwiGLU, rotary, no biases, untied head. */
    LLAMA("llama2-7b", "Llama 2 7B: 32 layers, hidden 4096, 32 heads, ffn 11008, seq 4096", 32, 4096, 32, 0, 4096, 32000, 11008),
    LLAMA("llama2-13b", "Llama 2 13B: 40 layers, hidden 5120, 40 heads, ffn 13824, seq 4096", 40, 5120, 40, 0, 4096, 32000, 13824),
    LLAMA("llama2-70b", "Llama 2 70B: 80 layers, hidden 8192, 64 heads (8 kv), ffn 28672, seq 4096", 80, 8192, 64, 8, 4096, 32000, 28672),
    LLAMA("llama3-8b", "Llama 3 8B: 32 layers, hidden 4096, 32 heads (8 kv), ffn 14336, seq 8192, vocab 128256", 32, 4096, 32, 8, 8192, 128256, 14336),
    LLAMA("llama3-70b", "Llama 3 70B: 80 layers, hidden 8192, 64 heads (8 kv), ffn 28672, seq 8192, vocab 128256", 80, 8192, 64, 8, 8192, 128256, 28672),
    LLAMA("llama3-405b", "Llama 3.1 405B: 126 layers, hidden 16384, 128 heads (8 kv), ffn 53248, seq 8192, vocab 128256", 126, 16384, 128, 8, 8192, 128256, 53248),
    /* Mixtures of experts (llama layers with experts; sources in docs/model-format.md).
     * Mixtral 8x7B: 46.7B total, 12.9B active; 8x22B: 141B, 39B (model cards). */
    MOE("mixtral-8x7b", "Mixtral 8x7B: 32 layers, hidden 4096, 32 heads (8 kv), 8 experts of ffn 14336, top-2, seq 4096", 32, 4096, 32, 8, 4096, 32000, 14336, FP16, &g_mixtral),
    MOE("mixtral-8x22b", "Mixtral 8x22B: 56 layers, hidden 6144, 48 heads (8 kv), 8 experts of ffn 16384, top-2, seq 4096", 56, 6144, 48, 8, 4096, 32768, 16384, FP16, &g_mixtral),
    /* DeepSeek-V3: 671B total, 37B active, without the 14B multi-token-prediction module. */
    MOE("deepseek-v3", "DeepSeek-V3: 61 layers, hidden 7168, MLA with 128 heads, 256 experts of ffn 2048 top-8 + 1 shared, first 3 dense, seq 4096", 61, 7168, 128, 128, 4096, 129280, 18432, FP16, &g_deepseek_v3),
    MOE("moe-tiny", "tiny mixture of experts for tests: 2 layers, hidden 64, 4 heads, 4 experts of ffn 96 top-2 + 1 shared, seq 32, vocab 96, fp32", 2, 64, 4, 4, 32, 96, 128, FP32, &g_moe_tiny),
    MOE("deepseek-tiny", "tiny DeepSeek-shaped model for tests: 3 layers (first dense), hidden 64, MLA, 8 experts top-2 + 1 shared, sigmoid router, fp32", 3, 64, 4, 4, 32, 96, 128, FP32, &g_deepseek_tiny),
    /* BERT (Devlin et al. 2019): vocabulary 30522, 2 token types, seq 512. */
    BERT("bert-base", "BERT base: 12 layers, hidden 768, 12 heads, seq 512, MLM head", 12, 768, 12, 512, 30522, FP16),
    BERT("bert-large", "BERT large: 24 layers, hidden 1024, 16 heads, seq 512, MLM head", 24, 1024, 16, 512, 30522, FP16),
    /* BertForPreTraining (Hugging Face transformers): the MLM head plus the pooler and the
     * next-sentence head: 110,106,428 and 336,226,108 parameters (decoder tied). */
    BERT_PT("bert-base-pretrain", "BERT base for pretraining: MLM + pooler + NSP heads, seq 512", 12, 768, 12, 512, 30522, FP16),
    BERT_PT("bert-large-pretrain", "BERT large for pretraining: MLM + pooler + NSP heads, seq 512", 24, 1024, 16, 512, 30522, FP16),
    /* CNNs on ImageNet (224x224x3, 1000 classes). */
    CNN("vgg16", WF_FAMILY_VGG, "vgg", "VGG-16 (Simonyan & Zisserman 2015), 224x224, 1000 classes", 16, 224, 3, 1000, FP16, NULL),
    CNN("vgg19", WF_FAMILY_VGG, "vgg", "VGG-19, 224x224, 1000 classes", 19, 224, 3, 1000, FP16, NULL),
    CNN("resnet18", WF_FAMILY_RESNET, "resnet", "ResNet-18 (He et al. 2016), basic blocks, 224x224", 18, 224, 3, 1000, FP16, NULL),
    CNN("resnet50", WF_FAMILY_RESNET, "resnet", "ResNet-50 v1.5, bottleneck blocks, 224x224", 50, 224, 3, 1000, FP16, NULL),
    CNN("resnet101", WF_FAMILY_RESNET, "resnet", "ResNet-101 v1.5, bottleneck blocks, 224x224", 101, 224, 3, 1000, FP16, NULL),
    CNN("resnet152", WF_FAMILY_RESNET, "resnet", "ResNet-152 v1.5, bottleneck blocks, 224x224", 152, 224, 3, 1000, FP16, NULL),
    /* The DeAR paper's image models (Zhang et al. 2023): DenseNet-201 as in
     * torchvision (20,013,928 parameters), Inception-v4 at the 224x224 input
     * and 1000 classes DeAR's imagenet_benchmark.py feeds it. */
    CNN("densenet121", WF_FAMILY_DENSENET, "densenet", "DenseNet-121 (Huang et al. 2017), growth 32, 224x224", 121, 224, 3, 1000, FP16, NULL),
    CNN("densenet201", WF_FAMILY_DENSENET, "densenet", "DenseNet-201, growth 32, blocks 6-12-48-32, 224x224", 201, 224, 3, 1000, FP16, NULL),
    CNN("inception-v4", WF_FAMILY_INCEPTION, "inception", "Inception-v4 (Szegedy et al. 2017), 224x224 as DeAR feeds it, 1000 classes", 4, 224, 3, 1000, FP16, NULL),
    CNN("mlp", WF_FAMILY_MLP, "mlp", "MLP 784-1024-10 with ReLU (Fashion-MNIST sized), fp32", 0, 0, 0, 0, FP32, "784-1024-10"),
    /* SuperScaler's models (sources in docs/model-format.md). Swin-T and -B have
     * torchvision's 28,288,354 and 87,768,224 parameters, Swin-L timm's 196.5M;
     * T5 v1.0 222,903,552 / 737,668,096 / 2,851,598,336 / 11,307,321,344. */
    SWIN("swin-t", "Swin-T (Liu et al. 2021): C 96, depths 2-2-6-2, heads 3-6-12-24, window 7, 224x224", 96, 3, "2-2-6-2", FP16),
    SWIN("swin-b", "Swin-B: C 128, depths 2-2-18-2, heads 4-8-16-32, window 7, 224x224", 128, 4, "2-2-18-2", FP16),
    SWIN("swin-l", "Swin-L: C 192, depths 2-2-18-2, heads 6-12-24-48, window 7, 224x224", 192, 6, "2-2-18-2", FP16),
    T5("t5-base", "T5 v1.0 base: 12+12 layers, d_model 768, 12 heads, ffn 3072 ReLU, seq 512+512, tied head", 12, 768, 12, 3072, &g_t5_64),
    T5("t5-large", "T5 v1.0 large: 24+24 layers, d_model 1024, 16 heads, ffn 4096 ReLU, seq 512+512", 24, 1024, 16, 4096, &g_t5_64),
    T5("t5-3b", "T5 v1.0 3B: 24+24 layers, d_model 1024, 32 heads of 128, ffn 16384 ReLU, seq 512+512", 24, 1024, 32, 16384, &g_t5_128),
    T5("t5-11b", "T5 v1.0 11B: 24+24 layers, d_model 1024, 128 heads of 128, ffn 65536 ReLU, seq 512+512", 24, 1024, 128, 65536, &g_t5_128),
    AF2("alphafold2", "AlphaFold2 Evoformer (Jumper et al. 2021): 48 blocks, MSA 128x256 ch 256, pair 128, 3 recycles; no structure module", 48, 256, 256, WF_DTYPE_BF16),
    /* Tiny fp32 models for runtime tests on CPUs. */
    GPT("gpt-tiny", "tiny GPT for runtime tests: 2 layers, hidden 64, 4 heads, seq 32, vocab 96, fp32", 2, 64, 4, 32, 96, FP32),
    BERT("bert-tiny", "tiny BERT for runtime tests: 2 layers, hidden 64, 4 heads, seq 32, vocab 96, fp32", 2, 64, 4, 32, 96, FP32),
    CNN("cnn-tiny", WF_FAMILY_CNN, "cnn", "tiny CNN for 28x28x1 (Fashion-MNIST): 2x (conv3x3-relu-maxpool) 8,16 ch, linear; fp32", 0, 28, 1, 10, FP32, "8-16"),
    CNN("mlp-tiny", WF_FAMILY_MLP, "mlp", "tiny MLP 784-64-10 for runtime tests, fp32", 0, 0, 0, 0, FP32, "784-64-10"),
};

#define ZOO_N ((int)(sizeof g_zoo / sizeof g_zoo[0]))

int wf_zoo_count(void) { return ZOO_N; }

const wf_zoo_entry *wf_zoo_entry_at(int i)
{
    if (i < 0 || i >= ZOO_N)
        return NULL;
    return &g_zoo[i].e;
}

/* A family name used as a spec name starts from this zoo entry. */
static const struct {
    const char *family;
    const char *base;
} g_family_base[] = {
    {"gpt", "gpt2"},        {"llama", "llama2-7b"}, {"bert", "bert-base"}, {"vgg", "vgg16"},
    {"resnet", "resnet50"}, {"mlp", "mlp"},         {"cnn", "cnn-tiny"},
    {"densenet", "densenet201"}, {"inception", "inception-v4"},
    {"swin", "swin-t"}, {"t5", "t5-base"}, {"alphafold", "alphafold2"},
};

static const zoo_preset *find_preset(const char *name)
{
    for (int i = 0; i < ZOO_N; i++)
        if (strcmp(g_zoo[i].e.name, name) == 0)
            return &g_zoo[i];
    return NULL;
}

static const zoo_preset *find_family_base(const char *name)
{
    for (size_t i = 0; i < sizeof g_family_base / sizeof g_family_base[0]; i++)
        if (strcmp(g_family_base[i].family, name) == 0)
            return find_preset(g_family_base[i].base);
    return NULL;
}

/* ---- config <-> text ------------------------------------------------------------- */

/* "784-1024-10" -> sizes[]; `key` names the value in messages. */
static wf_status parse_sizes(const char *key, const char *text, int min_n, int64_t *sizes,
                             int *n)
{
    *n = 0;
    const char *p = text;
    if (!*p)
        return wf_errorf(WF_INVAL, "%s='': expected sizes like 784-1024-10", key);
    while (*p) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item)
            return wf_errorf(WF_INVAL, "%s=%s: expected positive integers joined by '-'", key,
                             text);
        memcpy(item, p, len);
        item[len] = 0;
        if (*n >= WF_MLP_MAX_SIZES)
            return wf_errorf(WF_INVAL, "%s=%s: more than %d sizes", key, text, WF_MLP_MAX_SIZES);
        int64_t v;
        char *end = NULL;
        long long ll = strtoll(item, &end, 10);
        if (*end || ll < 1 || ll > (1LL << 30))
            return wf_errorf(WF_INVAL, "%s=%s: '%s' is not an integer in [1, %lld]", key, text,
                             item, 1LL << 30);
        v = ll;
        sizes[(*n)++] = v;
        p += len;
        if (*p == '-') {
            p++;
            if (!*p)
                return wf_errorf(WF_INVAL, "%s=%s: trailing '-'", key, text);
        }
    }
    if (*n < min_n)
        return wf_errorf(WF_INVAL, "%s=%s: needs at least %d sizes", key, text, min_n);
    return WF_OK;
}

static const char *family_name(wf_family f)
{
    switch (f) {
    case WF_FAMILY_GPT: return "gpt";
    case WF_FAMILY_LLAMA: return "llama";
    case WF_FAMILY_BERT: return "bert";
    case WF_FAMILY_VGG: return "vgg";
    case WF_FAMILY_RESNET: return "resnet";
    case WF_FAMILY_MLP: return "mlp";
    case WF_FAMILY_CNN: return "cnn";
    case WF_FAMILY_DENSENET: return "densenet";
    case WF_FAMILY_INCEPTION: return "inception";
    case WF_FAMILY_GRAPH: return "graph";
    case WF_FAMILY_ONNX: return "onnx";
    case WF_FAMILY_SWIN: return "swin";
    case WF_FAMILY_T5: return "t5";
    case WF_FAMILY_ALPHAFOLD: return "alphafold";
    }
    return "?";
}

const char *wf_family_name(wf_family f) { return family_name(f); }

/* Rotary bases of the llama presets other than 10000 (each model's
 * config.json, rope_theta): Llama 3 and 3.1 500000 (Meta's
 * Meta-Llama-3-8B/70B, Llama-3.1-405B), Mixtral 1000000 (mistralai's
 * Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1). Llama 2 and DeepSeek-V3 use 10000. */
static const struct {
    const char *name;
    double base;
} g_rope_base[] = {
    {"llama3-8b", 500000}, {"llama3-70b", 500000}, {"llama3-405b", 500000},
    {"mixtral-8x7b", 1000000}, {"mixtral-8x22b", 1000000},
};
#define LLAMA_ROPE_BASE 10000.0 /* Hugging Face LlamaConfig's rope_theta default */

static void from_preset(const zoo_preset *p, wf_model_config *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", p->e.name);
    m->family = p->family;
    m->dtype = p->dtype;
    m->layers = p->layers;
    m->hidden = p->hidden;
    m->heads = p->heads;
    m->kv_heads = p->kv_heads;
    m->seq = p->seq;
    m->vocab = p->vocab;
    m->ffn = p->ffn;
    m->causal = p->family == WF_FAMILY_GPT || p->family == WF_FAMILY_LLAMA;
    m->nsp = p->nsp;
    m->tie_embeddings = p->family == WF_FAMILY_GPT || p->family == WF_FAMILY_BERT;
    if (p->family == WF_FAMILY_LLAMA) {
        m->rope_base = LLAMA_ROPE_BASE;
        for (size_t i = 0; i < sizeof g_rope_base / sizeof g_rope_base[0]; i++)
            if (strcmp(g_rope_base[i].name, p->e.name) == 0)
                m->rope_base = g_rope_base[i].base;
    }
    m->depth = p->depth;
    m->image = p->image;
    m->channels = p->channels;
    m->classes = p->classes;
    if (p->sizes)
        parse_sizes("sizes", p->sizes, 1, m->sizes, &m->nsizes);
    if (p->ext) {
        m->window = p->ext->window;
        m->head_dim = p->ext->head_dim;
        m->dec_seq = p->ext->dec_seq;
        m->msa = p->ext->msa;
        m->pair_dim = p->ext->pair_dim;
        m->recycle = p->ext->recycle;
    }
    if (p->moe) {
        m->experts = p->moe->experts;
        m->top_k = p->moe->top_k;
        m->moe_ffn = p->moe->moe_ffn;
        m->shared_experts = p->moe->shared_experts;
        m->first_dense = p->moe->first_dense;
        m->moe_score = p->moe->score;
        m->q_lora = p->moe->q_lora;
        m->kv_lora = p->moe->kv_lora;
        m->qk_nope = p->moe->qk_nope;
        m->qk_rope = p->moe->qk_rope;
        m->v_head = p->moe->v_head;
    }
}

/* Reads an integer key; 1 = set, 0 = absent, <0 = bad value (message set). */
static wf_status get_i64(wf_spec *s, const char *key, int64_t lo, int64_t hi, int64_t *dst)
{
    int r = wf_spec_get_int(s, key, lo, hi, dst);
    return r < 0 ? (wf_status)r : WF_OK;
}

static wf_status get_dtype(wf_spec *s, wf_dtype *dst)
{
    const char *v = NULL;
    if (!wf_spec_get_str(s, "dtype", &v))
        return WF_OK;
    wf_dtype t;
    if (wf_dtype_parse(v, &t) != WF_OK || !(t == WF_DTYPE_FP32 || t == WF_DTYPE_FP16 ||
                                             t == WF_DTYPE_BF16))
        return wf_errorf(WF_INVAL, "dtype=%s: expected fp32, fp16 or bf16", v);
    *dst = t;
    return WF_OK;
}

#define LIM_BIG ((int64_t)1 << 30)

/* The llama keys of experts and latent attention. experts=0 makes the model
 * dense; kv_lora=0 gives it standard attention. */
static wf_status moe_overrides(wf_spec *s, wf_model_config *m)
{
    wf_status st;
    if ((st = get_i64(s, "experts", 0, 1 << 20, &m->experts)) ||
        (st = get_i64(s, "top_k", 1, 1 << 20, &m->top_k)) ||
        (st = get_i64(s, "moe_ffn", 1, LIM_BIG, &m->moe_ffn)) ||
        (st = get_i64(s, "shared_experts", 0, 1 << 20, &m->shared_experts)) ||
        (st = get_i64(s, "shared_ffn", 0, LIM_BIG, &m->shared_ffn)) ||
        (st = get_i64(s, "first_dense", 0, WF_MAX_LAYERS, &m->first_dense)) ||
        (st = get_i64(s, "moe_freq", 1, WF_MAX_LAYERS, &m->moe_freq)) ||
        (st = get_i64(s, "q_lora", 0, LIM_BIG, &m->q_lora)) ||
        (st = get_i64(s, "kv_lora", 0, LIM_BIG, &m->kv_lora)) ||
        (st = get_i64(s, "qk_nope", 1, 1 << 20, &m->qk_nope)) ||
        (st = get_i64(s, "qk_rope", 1, 1 << 20, &m->qk_rope)) ||
        (st = get_i64(s, "v_head", 1, 1 << 20, &m->v_head)))
        return st;
    const char *v = NULL;
    if (wf_spec_get_str(s, "rope_base", &v)) {
        char *end = NULL;
        double b = strtod(v, &end);
        if (end == v || *end || !(b >= 1) || b > 1e12)
            return wf_errorf(WF_INVAL, "rope_base=%s: expected a rotary base in [1, 1e12]", v);
        m->rope_base = b;
    }
    if (wf_spec_get_str(s, "capacity", &v)) {
        char *end = NULL;
        double cf = strtod(v, &end);
        if (end == v || *end || !(cf > 0) || cf > 1e6)
            return wf_errorf(WF_INVAL, "capacity=%s: expected a capacity factor in (0, 1e6]", v);
        m->capacity_factor = cf;
    }
    if (wf_spec_get_str(s, "router", &v)) {
        if (strcmp(v, "softmax") == 0)
            m->moe_score = WF_MOE_SCORE_SOFTMAX;
        else if (strcmp(v, "sigmoid") == 0)
            m->moe_score = WF_MOE_SCORE_SIGMOID;
        else
            return wf_errorf(WF_INVAL, "router=%s: expected softmax or sigmoid", v);
    }
    return WF_OK;
}

/* Applies the overrides of s to m (family already set) and rejects unknown keys. */
static wf_status apply_overrides(wf_spec *s, wf_model_config *m)
{
    wf_status st = WF_OK;
    const char *hint = "";
    switch (m->family) {
    case WF_FAMILY_GPT:
    case WF_FAMILY_LLAMA:
    case WF_FAMILY_BERT: {
        int64_t ffn = -1, kv = -1;
        if ((st = get_i64(s, "layers", 1, WF_MAX_LAYERS, &m->layers)) ||
            (st = get_i64(s, "hidden", 1, LIM_BIG, &m->hidden)) ||
            (st = get_i64(s, "heads", 1, 1 << 20, &m->heads)) ||
            (st = get_i64(s, "seq", 1, LIM_BIG, &m->seq)) ||
            (st = get_i64(s, "vocab", 1, LIM_BIG, &m->vocab)) ||
            (st = get_i64(s, "ffn", 1, LIM_BIG, &ffn)) || (st = get_dtype(s, &m->dtype)))
            return st;
        int64_t tie = -1;
        if (m->family == WF_FAMILY_LLAMA && ((st = get_i64(s, "kv_heads", 1, 1 << 20, &kv)) ||
                                             (st = get_i64(s, "tie_embeddings", 0, 1, &tie)) ||
                                             (st = moe_overrides(s, m))))
            return st;
        if (m->family == WF_FAMILY_BERT) {
            int64_t nsp = m->nsp;
            if ((st = get_i64(s, "nsp", 0, 1, &nsp)))
                return st;
            m->nsp = (int)nsp;
        }
        if (tie >= 0)
            m->tie_embeddings = (int)tie;
        if (ffn > 0)
            m->ffn = ffn;
        if (kv > 0)
            m->kv_heads = kv;
        hint = m->family == WF_FAMILY_LLAMA
                   ? "layers, hidden, heads, kv_heads, seq, vocab, ffn, dtype, tie_embeddings (0 or 1); experts, top_k, "
                     "moe_ffn, shared_experts, shared_ffn, first_dense, moe_freq, capacity, "
                     "router (softmax or sigmoid); q_lora, kv_lora, qk_nope, qk_rope, v_head; rope_base"
                   : m->family == WF_FAMILY_BERT ? "layers, hidden, heads, seq, vocab, ffn, dtype, nsp (0 or 1)"
                                                 : "layers, hidden, heads, seq, vocab, ffn, dtype";
        break;
    }
    case WF_FAMILY_VGG:
    case WF_FAMILY_RESNET:
    case WF_FAMILY_DENSENET:
    case WF_FAMILY_INCEPTION:
    case WF_FAMILY_CNN: {
        if ((st = get_i64(s, "image", 1, 65536, &m->image)) ||
            (st = get_i64(s, "channels", 1, 65536, &m->channels)) ||
            (st = get_i64(s, "classes", 1, LIM_BIG, &m->classes)) || (st = get_dtype(s, &m->dtype)))
            return st;
        if (m->family == WF_FAMILY_CNN) {
            const char *v = NULL;
            if (wf_spec_get_str(s, "sizes", &v) &&
                (st = parse_sizes("sizes", v, 1, m->sizes, &m->nsizes)))
                return st;
            hint = "sizes (conv widths, e.g. 8-16), image, channels, classes, dtype";
        } else {
            if ((st = get_i64(s, "depth", 1, 1000, &m->depth)))
                return st;
            hint = "depth, image, channels, classes, dtype";
        }
        break;
    }
    case WF_FAMILY_MLP: {
        const char *v = NULL;
        if (wf_spec_get_str(s, "sizes", &v) &&
            (st = parse_sizes("sizes", v, 2, m->sizes, &m->nsizes)))
            return st;
        if ((st = get_dtype(s, &m->dtype)))
            return st;
        hint = "sizes (e.g. 784-1024-10), dtype";
        break;
    }
    case WF_FAMILY_GRAPH:
    case WF_FAMILY_ONNX:
        hint = "none (explicit op lists take no overrides)";
        break;
    case WF_FAMILY_SWIN: {
        const char *v = NULL;
        if (wf_spec_get_str(s, "depths", &v) && (st = parse_sizes("depths", v, 1, m->sizes, &m->nsizes)))
            return st;
        if ((st = get_i64(s, "hidden", 1, LIM_BIG, &m->hidden)) || (st = get_i64(s, "heads", 1, 1 << 20, &m->heads)) ||
            (st = get_i64(s, "window", 1, 4096, &m->window)) || (st = get_i64(s, "image", 4, 65536, &m->image)) ||
            (st = get_i64(s, "channels", 1, 65536, &m->channels)) ||
            (st = get_i64(s, "classes", 1, LIM_BIG, &m->classes)) || (st = get_dtype(s, &m->dtype)))
            return st;
        hint = "hidden (first stage's channels), heads (first stage's), depths (e.g. 2-2-6-2), window, image, "
               "channels, classes, dtype";
        break;
    }
    case WF_FAMILY_T5:
        if ((st = get_i64(s, "layers", 1, WF_MAX_LAYERS, &m->layers)) ||
            (st = get_i64(s, "hidden", 1, LIM_BIG, &m->hidden)) || (st = get_i64(s, "heads", 1, 1 << 20, &m->heads)) ||
            (st = get_i64(s, "head_dim", 1, 1 << 20, &m->head_dim)) || (st = get_i64(s, "ffn", 1, LIM_BIG, &m->ffn)) ||
            (st = get_i64(s, "seq", 1, LIM_BIG, &m->seq)) || (st = get_i64(s, "dec_seq", 1, LIM_BIG, &m->dec_seq)) ||
            (st = get_i64(s, "vocab", 1, LIM_BIG, &m->vocab)) || (st = get_dtype(s, &m->dtype)))
            return st;
        hint = "layers (each of encoder and decoder), hidden, heads, head_dim, ffn, seq, dec_seq, vocab, dtype";
        break;
    case WF_FAMILY_ALPHAFOLD:
        if ((st = get_i64(s, "layers", 1, WF_MAX_LAYERS, &m->layers)) ||
            (st = get_i64(s, "hidden", 1, LIM_BIG, &m->hidden)) || (st = get_i64(s, "pair", 1, LIM_BIG, &m->pair_dim)) ||
            (st = get_i64(s, "msa", 1, LIM_BIG, &m->msa)) || (st = get_i64(s, "seq", 1, LIM_BIG, &m->seq)) ||
            (st = get_i64(s, "recycle", 0, 1000, &m->recycle)) || (st = get_dtype(s, &m->dtype)))
            return st;
        hint = "layers (Evoformer blocks), hidden (MSA channels), pair (pair channels), msa (sequences), "
               "seq (residues), recycle (no-gradient forwards before the learning one), dtype";
        break;
    }
    char what[160];
    snprintf(what, sizeof what, "%s model", family_name(m->family));
    return wf_spec_check_unused(s, what, hint);
}

/* Derived defaults and shape rules of llama experts and latent attention:
 * an expert is as wide as the dense MLP unless moe_ffn says otherwise; the
 * shared expert is shared_experts experts wide unless shared_ffn says so. */
static wf_status finish_moe(wf_model_config *m)
{
    if (m->experts > 0) {
        if (m->top_k == 0)
            m->top_k = 1;
        if (m->top_k > m->experts)
            return wf_errorf(WF_INVAL, "%s: top_k=%" PRId64 " exceeds experts=%" PRId64, m->name,
                             m->top_k, m->experts);
        if (m->experts > (1 << 24))
            return wf_errorf(WF_INVAL, "%s: experts=%" PRId64 " is more than %d", m->name,
                             m->experts, 1 << 24);
        if (m->moe_ffn == 0)
            m->moe_ffn = m->ffn;
        if (m->shared_ffn == 0)
            m->shared_ffn = m->shared_experts * m->moe_ffn;
        if (m->moe_freq == 0)
            m->moe_freq = 1;
        if (m->first_dense >= m->layers)
            return wf_errorf(WF_INVAL, "%s: first_dense=%" PRId64 " leaves none of the %" PRId64
                                       " layers with experts",
                             m->name, m->first_dense, m->layers);
    } else if (m->shared_experts > 0 || m->shared_ffn > 0 || m->first_dense > 0) {
        return wf_errorf(WF_INVAL, "%s: shared experts or first_dense without experts (set experts=N)",
                         m->name);
    }
    if (m->kv_lora > 0) {
        if (m->qk_nope == 0 || m->qk_rope == 0 || m->v_head == 0)
            return wf_errorf(WF_INVAL, "%s: kv_lora=%" PRId64 " needs qk_nope, qk_rope and v_head",
                             m->name, m->kv_lora);
        if (m->v_head != m->qk_nope)
            return wf_errorf(WF_INVAL,
                             "%s: v_head=%" PRId64 " differs from qk_nope=%" PRId64
                             " (weft's latent attention runs its core at one head dim)",
                             m->name, m->v_head, m->qk_nope);
        m->kv_heads = m->heads;
    } else if (m->q_lora > 0) {
        return wf_errorf(WF_INVAL, "%s: q_lora without kv_lora (latent attention needs kv_lora=N)",
                         m->name);
    }
    return WF_OK;
}

/* Fills derived defaults and checks the shape rules. */
static wf_status finish_config(wf_model_config *m)
{
    switch (m->family) {
    case WF_FAMILY_GPT:
    case WF_FAMILY_LLAMA:
    case WF_FAMILY_BERT:
        if (m->hidden % m->heads != 0)
            return wf_errorf(WF_INVAL, "%s: heads=%" PRId64 " does not divide hidden=%" PRId64,
                             m->name, m->heads, m->hidden);
        if (m->kv_heads == 0)
            m->kv_heads = m->heads;
        if (m->heads % m->kv_heads != 0)
            return wf_errorf(WF_INVAL, "%s: kv_heads=%" PRId64 " does not divide heads=%" PRId64,
                             m->name, m->kv_heads, m->heads);
        if (m->family == WF_FAMILY_LLAMA && (m->hidden / m->heads) % 2 != 0)
            return wf_errorf(WF_INVAL,
                             "%s: head dim %" PRId64 " (hidden=%" PRId64 " / heads=%" PRId64
                             ") must be even for rotary embeddings",
                             m->name, m->hidden / m->heads, m->hidden, m->heads);
        if (m->ffn == 0) {
            if (m->family == WF_FAMILY_LLAMA) /* 2/3 of 4h, rounded up to 256 (Llama) */
                m->ffn = (8 * m->hidden / 3 + 255) / 256 * 256;
            else
                m->ffn = 4 * m->hidden;
        }
        if (m->family == WF_FAMILY_LLAMA) {
            wf_status st = finish_moe(m);
            if (st != WF_OK)
                return st;
        }
        m->causal = m->family != WF_FAMILY_BERT;
        break;
    case WF_FAMILY_VGG:
        if (m->depth != 11 && m->depth != 13 && m->depth != 16 && m->depth != 19)
            return wf_errorf(WF_INVAL, "%s: depth=%" PRId64 " (vgg has 11, 13, 16 or 19)", m->name,
                             m->depth);
        if (m->image < 32)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is below 32 (five 2x2 poolings)",
                             m->name, m->image);
        break;
    case WF_FAMILY_RESNET:
        if (m->depth != 18 && m->depth != 34 && m->depth != 50 && m->depth != 101 &&
            m->depth != 152)
            return wf_errorf(WF_INVAL,
                             "%s: depth=%" PRId64 " (resnet has 18, 34, 50, 101 or 152)", m->name,
                             m->depth);
        if (m->image < 32)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is below 32 (stride 32 overall)",
                             m->name, m->image);
        break;
    case WF_FAMILY_DENSENET:
        if (!wf_densenet_valid(m->depth))
            return wf_errorf(WF_INVAL, "%s: depth=%" PRId64 " (densenet has %s)", m->name, m->depth,
                             wf_densenet_depths());
        if (m->image < 32)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is below 32 (stride 32 overall)",
                             m->name, m->image);
        break;
    case WF_FAMILY_INCEPTION:
        if (m->depth != 4)
            return wf_errorf(WF_INVAL, "%s: depth=%" PRId64 " (inception has 4: Inception-v4)", m->name,
                             m->depth);
        if (m->image < 139)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is below 139 (the smallest input whose "
                             "last block is 1x1 or larger)", m->name, m->image);
        break;
    case WF_FAMILY_CNN:
        if (m->nsizes < 1 || m->nsizes > 8)
            return wf_errorf(WF_INVAL, "%s: %d conv stages (1 to 8)", m->name, m->nsizes);
        if ((m->image >> m->nsizes) < 1)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is too small for %d 2x2 poolings",
                             m->name, m->image, m->nsizes);
        break;
    case WF_FAMILY_MLP:
        if (m->nsizes < 2)
            return wf_errorf(WF_INVAL, "%s: an mlp needs at least 2 sizes", m->name);
        break;
    case WF_FAMILY_GRAPH:
    case WF_FAMILY_ONNX:
        break;
    case WF_FAMILY_SWIN: {
        /* Every stage's resolution a multiple of its window (a stage at or
         * below the window is one window); patch 4, then halving per stage. */
        if (m->nsizes < 1 || m->nsizes > 6)
            return wf_errorf(WF_INVAL, "%s: %d stages (1 to 6)", m->name, m->nsizes);
        int64_t R = m->image, A = m->heads, C = m->hidden;
        if (R % 4 != 0)
            return wf_errorf(WF_INVAL, "%s: image=%" PRId64 " is not a multiple of the patch size 4", m->name, R);
        R /= 4;
        for (int s = 0; s < m->nsizes; s++) {
            if (s > 0) {
                if (R % 2 != 0)
                    return wf_errorf(WF_INVAL, "%s: stage %d's resolution %" PRId64 " is odd (patch merging halves it)",
                                     m->name, s, R);
                R /= 2, A *= 2, C *= 2;
            }
            int64_t W = m->window < R ? m->window : R;
            if (R % W != 0)
                return wf_errorf(WF_INVAL, "%s: stage %d's resolution %" PRId64 " is not a multiple of window=%" PRId64,
                                 m->name, s, R, W);
            if (C % A != 0)
                return wf_errorf(WF_INVAL, "%s: stage %d's heads %" PRId64 " do not divide its %" PRId64 " channels",
                                 m->name, s, A, C);
        }
        break;
    }
    case WF_FAMILY_T5:
        if (m->dec_seq == 0)
            m->dec_seq = m->seq;
        m->kv_heads = m->heads;
        break;
    case WF_FAMILY_ALPHAFOLD:
        if (m->hidden % 8 != 0 || m->pair_dim % 4 != 0)
            return wf_errorf(WF_INVAL, "%s: hidden=%" PRId64 " must split into 8 MSA heads and pair=%" PRId64
                                       " into 4 triangle heads",
                             m->name, m->hidden, m->pair_dim);
        break;
    }
    return WF_OK;
}

/* ---- model JSON files ------------------------------------------------------------------ */

/* Turns the keys of a family-form JSON object into a spec ("family" and
 * "name" excluded) so the same setter validates both forms. */
static wf_status json_to_spec(const cJSON *j, const char *ctx, wf_spec *s)
{
    memset(s, 0, sizeof *s);
    for (const cJSON *it = j->child; it; it = it->next) {
        if (!it->string)
            continue;
        if (strcmp(it->string, "family") == 0 || strcmp(it->string, "name") == 0)
            continue;
        if (s->nkv == WF_SPEC_MAX_KV)
            return wf_errorf(WF_FORMAT, "%s: too many fields", ctx);
        if (strlen(it->string) >= sizeof s->key[0])
            return wf_errorf(WF_FORMAT, "%s: unknown field \"%.40s...\"", ctx, it->string);
        char *val = s->val[s->nkv];
        size_t cap = sizeof s->val[0];
        if (cJSON_IsString(it)) {
            if (strlen(it->valuestring) >= cap)
                return wf_errorf(WF_FORMAT, "%s.%s: value too long", ctx, it->string);
            snprintf(val, cap, "%s", it->valuestring);
        } else if (cJSON_IsNumber(it)) {
            double v = it->valuedouble;
            if (!isfinite(v) || v != floor(v) || fabs(v) > 9e15)
                return wf_errorf(WF_FORMAT, "%s.%s=%g: expected an integer", ctx, it->string, v);
            snprintf(val, cap, "%.0f", v);
        } else if (cJSON_IsArray(it)) {
            /* [784, 1024, 10] -> "784-1024-10" */
            size_t n = 0;
            val[0] = 0;
            for (const cJSON *e = it->child; e; e = e->next) {
                if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
                    e->valuedouble < 1 || e->valuedouble > 9e15)
                    return wf_errorf(WF_FORMAT, "%s.%s: expected an array of positive integers",
                                     ctx, it->string);
                int w = snprintf(val + n, cap - n, "%s%.0f", n ? "-" : "", e->valuedouble);
                if (w < 0 || (size_t)w >= cap - n)
                    return wf_errorf(WF_FORMAT, "%s.%s: too many sizes", ctx, it->string);
                n += (size_t)w;
            }
            if (n == 0)
                return wf_errorf(WF_FORMAT, "%s.%s: empty array", ctx, it->string);
        } else {
            return wf_errorf(WF_FORMAT, "%s.%s: expected a number, a string or an array", ctx,
                             it->string);
        }
        for (int i = 0; i < s->nkv; i++)
            if (strcmp(s->key[i], it->string) == 0)
                return wf_errorf(WF_FORMAT, "%s: field \"%s\" given twice", ctx, it->string);
        snprintf(s->key[s->nkv], sizeof s->key[0], "%s", it->string);
        s->nkv++;
    }
    return WF_OK;
}

/* Re-labels a config error from a file as WF_FORMAT, prefixed with the path. */
static wf_status as_format(wf_status st, const char *ctx)
{
    if (st == WF_OK || st == WF_FORMAT)
        return st;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    if (st != WF_INVAL)
        return wf_errorf(st, "%s", msg);
    return wf_errorf(WF_FORMAT, "%s: %s", ctx, msg);
}

/* A model file; ovr (may be NULL) holds the overrides after "file.json:",
 * which replace the file's values key by key. */
static wf_status lookup_json(const char *path, const wf_spec *ovr, const char *spec_text, wf_model_config *out)
{
    cJSON *j = NULL;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return wf_errorf(WF_FORMAT, "%s: expected a JSON object", path);
    }
    const char *name = NULL;
    if (wf_hf_is_config(j)) {
        /* A Hugging Face config.json: the family spec it describes, named after the file. */
        char spec[1024], note[1024];
        st = wf_hf_config_spec(j, path, ovr, spec, sizeof spec, note, sizeof note);
        if (st == WF_OK)
            st = wf_model_lookup(spec, out);
        /* The sequence chosen, on stderr once per model and process (a command
         * may read its model more than once). */
        static char said[1024];
        if (st == WF_OK && note[0] && strcmp(said, note) != 0) {
            snprintf(said, sizeof said, "%s", note);
            wf_log(WF_LOG_WARN, "%s", note);
        }
        if (st == WF_OK) {
            snprintf(out->name, sizeof out->name, "%s", spec_text);
            snprintf(out->path, sizeof out->path, "%s", path);
        }
        goto done;
    }
    if ((st = wf_json_get_str(j, path, "name", 0, &name)))
        goto done;

    if (wf_graph_json_is_oplist(j)) {
        if (ovr && ovr->nkv > 0) {
            st = wf_errorf(WF_INVAL, "%s: an op list takes no overrides (%s=...)", path, ovr->key[0]);
            goto done;
        }
        memset(out, 0, sizeof *out);
        out->family = WF_FAMILY_GRAPH;
        snprintf(out->name, sizeof out->name, "%s", name ? name : path);
        if (strlen(path) >= sizeof out->path) {
            st = wf_errorf(WF_INVAL, "model path too long: %s", path);
            goto done;
        }
        snprintf(out->path, sizeof out->path, "%s", path);
        /* Validate the whole file now so a bad file fails at lookup. */
        wf_graph g;
        wf_graph_init(&g, out->name);
        st = wf_build_json_graph(j, path, 1, &g);
        out->dtype = WF_DTYPE_FP32;
        for (int i = 0; st == WF_OK && i < g.ntensors; i++)
            if (g.tensors[i].role == WF_ROLE_PARAM) {
                out->dtype = g.tensors[i].dtype;
                break;
            }
        wf_graph_free(&g);
        goto done;
    }

    const char *fam = NULL;
    if ((st = wf_json_get_str(j, path, "family", 1, &fam)))
        goto done;
    const zoo_preset *base = find_family_base(fam);
    if (!base) {
        st = wf_errorf(WF_FORMAT,
                       "%s: unknown family \"%s\" (expected gpt, llama, bert, vgg, resnet, densenet, "
                       "inception, mlp or cnn, or an op list with \"tensors\" and \"ops\")",
                       path, fam);
        goto done;
    }
    wf_spec s;
    if ((st = json_to_spec(j, path, &s)))
        goto done;
    /* The overrides after "file.json:" replace the file's values. */
    for (int i = 0; ovr && i < ovr->nkv; i++) {
        int k = 0;
        while (k < s.nkv && strcmp(s.key[k], ovr->key[i]) != 0)
            k++;
        if (k == s.nkv) {
            if (s.nkv == WF_SPEC_MAX_KV) {
                st = wf_errorf(WF_INVAL, "%s: too many overrides", path);
                goto done;
            }
            snprintf(s.key[k], sizeof s.key[k], "%s", ovr->key[i]);
            s.nkv++;
        }
        snprintf(s.val[k], sizeof s.val[k], "%s", ovr->val[i]);
    }
    from_preset(base, out);
    snprintf(out->name, sizeof out->name, "%s", ovr && ovr->nkv ? spec_text : name ? name : path);
    snprintf(out->path, sizeof out->path, "%s", path);
    if (wf_model_is_transformer(out))
        out->ffn = 0; /* derived from hidden unless the file gives it */
    st = apply_overrides(&s, out);
    if (st == WF_OK)
        st = finish_config(out);
    /* Unknown keys and bad values in a file are format errors. */
    st = as_format(st, path);
done:
    cJSON_Delete(j);
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* An ONNX file: the spec is the name, the file the path; the file is read
 * and built now, so a bad file fails at lookup. */
static wf_status lookup_onnx(const char *spec, wf_model_config *out)
{
    memset(out, 0, sizeof *out);
    out->family = WF_FAMILY_ONNX;
    char dims[128];
    wf_status st = wf_onnx_split_spec(spec, out->path, sizeof out->path, dims, sizeof dims);
    if (st != WF_OK)
        return st;
    if (strlen(spec) >= sizeof out->name)
        return wf_errorf(WF_INVAL, "model spec too long: %s", spec);
    snprintf(out->name, sizeof out->name, "%s", spec);
    wf_graph g;
    st = wf_onnx_build_spec(spec, 1, &g);
    out->dtype = WF_DTYPE_FP32;
    for (int i = 0; st == WF_OK && i < g.ntensors; i++)
        if (g.tensors[i].role == WF_ROLE_PARAM) {
            out->dtype = g.tensors[i].dtype;
            break;
        }
    wf_graph_free(&g);
    return st;
}

wf_status wf_model_lookup(const char *spec, wf_model_config *out)
{
    if (!spec || !*spec)
        return wf_errorf(WF_INVAL, "empty model name (see weft models)");
    if (ends_with(spec, ".json"))
        return lookup_json(spec, NULL, spec, out);
    /* "config.json:seq=2048,layers=4": a model file with overrides. */
    const char *sep = strstr(spec, ".json:");
    for (const char *q = sep; q; q = strstr(q + 1, ".json:"))
        sep = q;
    if (sep) {
        char path[512];
        size_t n = (size_t)(sep - spec) + 5;
        if (n >= sizeof path)
            return wf_errorf(WF_INVAL, "model path too long: %.*s", (int)n, spec);
        memcpy(path, spec, n);
        path[n] = 0;
        if (!sep[6])
            return wf_errorf(WF_INVAL, "'%s': expected key=value after ':'", spec);
        wf_spec ovr;
        char text[WF_SPEC_MAX_KV * 130 + 8];
        snprintf(text, sizeof text, "o:%s", sep + 6);
        wf_status st = wf_spec_parse(text, &ovr);
        if (st != WF_OK)
            return st;
        return lookup_json(path, &ovr, spec, out);
    }
    if (wf_onnx_is_spec(spec))
        return lookup_onnx(spec, out);
    wf_spec s;
    wf_status st = wf_spec_parse(spec, &s);
    if (st != WF_OK)
        return st;
    const zoo_preset *p = find_preset(s.name);
    int is_family = 0;
    if (!p && (p = find_family_base(s.name)) != NULL)
        is_family = 1;
    if (!p && access(spec, F_OK) == 0)
        return lookup_json(spec, NULL, spec, out); /* a model file without the .json suffix */
    /* Spelling variants resolve ("Llama-2-7B" is llama2-7b); other names get a
     * suggestion. Candidates: the zoo's names, then the families. */
    enum { NFAM = (int)(sizeof g_family_base / sizeof g_family_base[0]) };
    const char *cands[ZOO_N + NFAM];
    for (int i = 0; i < ZOO_N; i++)
        cands[i] = g_zoo[i].e.name;
    for (int i = 0; i < NFAM; i++)
        cands[ZOO_N + i] = g_family_base[i].family;
    if (!p) {
        int k = wf_resolve_fold(s.name, cands, ZOO_N + NFAM);
        if (k >= 0 && k < ZOO_N) {
            p = &g_zoo[k];
        } else if (k >= ZOO_N) {
            p = find_family_base(cands[k]);
            is_family = 1;
        }
    }
    if (!p) {
        char dym[96];
        return wf_errorf(WF_INVAL,
                         "unknown model '%s' (see weft models; families: gpt, llama, bert, vgg, "
                         "resnet, densenet, inception, mlp, cnn; or a .json file)%s",
                         s.name, wf_did_you_mean(wf_suggest(s.name, cands, ZOO_N + NFAM), dym, sizeof dym));
    }
    from_preset(p, out);
    /* The canonical name is the spec itself when it overrides anything. */
    if (s.nkv > 0 || is_family)
        snprintf(out->name, sizeof out->name, "%s", spec);
    /* A family spec derives ffn from its hidden size (gpt/bert: 4h, llama:
     * the SwiGLU width); so does a zoo llama whose hidden size is overridden. */
    if (p->family == WF_FAMILY_LLAMA && is_family)
        out->ffn = 0;
    for (int i = 0; p->family == WF_FAMILY_LLAMA && i < s.nkv; i++)
        if (strcmp(s.key[i], "hidden") == 0)
            out->ffn = 0;
    if ((st = apply_overrides(&s, out)) != WF_OK)
        return st;
    return finish_config(out);
}

/* ---- building ------------------------------------------------------------------------ */

int wf_model_is_transformer(const wf_model_config *m)
{
    return m->family == WF_FAMILY_GPT || m->family == WF_FAMILY_LLAMA ||
           m->family == WF_FAMILY_BERT;
}

wf_status wf_model_build(const wf_model_config *m, int64_t mbs, wf_graph *g)
{
    wf_graph_init(g, m->name);
    if (mbs < 1 || mbs > ((int64_t)1 << 40))
        return g->status = wf_errorf(WF_INVAL, "batch=%" PRId64 " must be positive", mbs);
    wf_status st;
    switch (m->family) {
    case WF_FAMILY_GPT: st = wf_build_gpt(m, mbs, g); break;
    case WF_FAMILY_LLAMA: st = wf_build_llama(m, mbs, g); break;
    case WF_FAMILY_BERT: st = wf_build_bert(m, mbs, g); break;
    case WF_FAMILY_VGG: st = wf_build_vgg(m, mbs, g); break;
    case WF_FAMILY_RESNET: st = wf_build_resnet(m, mbs, g); break;
    case WF_FAMILY_CNN: st = wf_build_cnn(m, mbs, g); break;
    case WF_FAMILY_DENSENET: st = wf_build_densenet(m, mbs, g); break;
    case WF_FAMILY_INCEPTION: st = wf_build_inception(m, mbs, g); break;
    case WF_FAMILY_MLP: st = wf_build_mlp(m, mbs, g); break;
    case WF_FAMILY_SWIN: st = wf_build_swin(m, mbs, g); break;
    case WF_FAMILY_T5: st = wf_build_t5(m, mbs, g); break;
    case WF_FAMILY_ALPHAFOLD: st = wf_build_alphafold(m, mbs, g); break;
    case WF_FAMILY_ONNX: st = wf_onnx_build_spec(m->name, mbs, g); break;
    case WF_FAMILY_GRAPH: {
        cJSON *j = NULL;
        st = wf_json_read_file(m->path, &j);
        if (st == WF_OK)
            st = wf_build_json_graph(j, m->path, mbs, g);
        cJSON_Delete(j);
        break;
    }
    default:
        st = wf_errorf(WF_INVAL, "model '%s': unknown family %d", m->name, (int)m->family);
    }
    if (st != WF_OK && g->status == WF_OK)
        g->status = st;
    if (st == WF_OK && g->loss < 0)
        st = g->status = wf_errorf(WF_INTERNAL, "model '%s': the graph has no loss", m->name);
    return st;
}

int wf_model_is_moe(const wf_model_config *m)
{
    return m->family == WF_FAMILY_LLAMA && m->experts > 0;
}

wf_status wf_model_active_params(const wf_model_config *m, double *active)
{
    wf_graph g;
    wf_status st = wf_model_build(m, 1, &g);
    if (st == WF_OK) {
        wf_graph_totals t;
        wf_graph_totals_of(&g, &t);
        *active = t.active_params;
    }
    wf_graph_free(&g);
    return st;
}

wf_status wf_model_params(const wf_model_config *m, double *params)
{
    wf_graph g;
    wf_status st = wf_model_build(m, 1, &g);
    if (st == WF_OK) {
        wf_graph_totals t;
        wf_graph_totals_of(&g, &t);
        *params = t.params;
    }
    wf_graph_free(&g);
    return st;
}

/* ---- helpers shared by the builders ----------------------------------------------------- */

const char *wf_model_name(char buf[WF_NAME_LEN], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, WF_NAME_LEN, fmt, ap);
    va_end(ap);
    return buf;
}

int wf_model_param(wf_graph *g, wf_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                   int64_t d3, const char *fmt, ...)
{
    char name[WF_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[4] = {d0, d1, d2, d3};
    return wf_graph_add_tensor(g, name, dt, WF_ROLE_PARAM, ndim, shape);
}

uint64_t wf_model_seed(const wf_graph *g)
{
    /* splitmix64 of the op index: distinct, fixed seeds per dropout op. */
    uint64_t z = (uint64_t)g->nops + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
