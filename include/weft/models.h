/* weft model zoo: named models, families with overrides, model JSON files,
 * and the builders that turn a model description into a graph.
 *
 * A model is described by a wf_model_config (what the user named) and built
 * into a wf_graph for a micro-batch size. Transformer families also expose
 * their shape numbers so the cost model can cost one block and multiply. */
#ifndef WEFT_MODELS_H
#define WEFT_MODELS_H

#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    WF_FAMILY_GPT,    /* decoder-only, LayerNorm, GELU MLP, learned positions */
    WF_FAMILY_LLAMA,  /* decoder-only, RMSNorm, SwiGLU, rotary, grouped-query attention */
    WF_FAMILY_BERT,   /* encoder, LayerNorm, GELU, learned positions, MLM head */
    WF_FAMILY_VGG,
    WF_FAMILY_RESNET,
    WF_FAMILY_MLP,
    WF_FAMILY_GRAPH,  /* an explicit op list from a model JSON file */
    WF_FAMILY_CNN,    /* small conv net: (conv3x3-relu-maxpool2) per width in sizes[], then linear */
    WF_FAMILY_DENSENET,  /* DenseNet-BC (torchvision layout), depth 121/161/169/201 */
    WF_FAMILY_INCEPTION, /* Inception-v4 */
    WF_FAMILY_ONNX,   /* an ONNX file (weft/onnx.h): path; name is the spec "PATH.onnx[:dims]" */
    WF_FAMILY_SWIN,   /* Swin Transformer v1: shifted windows, relative-position bias, patch merging */
    WF_FAMILY_T5,     /* T5 v1.0 encoder-decoder: RMS norms, relative-position buckets, ReLU, tied head */
    WF_FAMILY_ALPHAFOLD /* AlphaFold2's Evoformer trunk with a distogram head (no structure module) */
} wf_family;

/* "gpt", "llama", ..., "graph", "cnn", "onnx". */
const char *wf_family_name(wf_family f);

#define WF_MLP_MAX_SIZES 16

typedef struct {
    char name[128];      /* canonical name, e.g. "gpt3-175b" or "gpt:layers=2,..." */
    wf_family family;
    wf_dtype dtype;      /* of activations and weights (fp16 for the large zoo, fp32 for tiny ones) */
    /* transformers */
    int64_t layers, hidden, heads, kv_heads, seq, vocab, ffn;
    int causal;          /* decoder attention mask */
    int nsp;             /* bert: BertForPreTraining's pooler and next-sentence head (1) or the masked-LM head alone (0) */
    int tie_embeddings;  /* 1: the output head is the token embedding's matrix (one [V,H] parameter,
                            its gradient the sum of both uses): gpt and bert always, llama when
                            tie_embeddings=1 (Hugging Face's tie_word_embeddings); 0: an untied head
                            (llama's default; Megatron-LM's --untie-embeddings-and-output-weights) */
    /* llama mixtures of experts (experts 0: dense). Layer i has experts when
     * i >= first_dense and i % moe_freq == 0 (DeepSeek's rule); its MLP is a
     * router over `experts` SwiGLU experts of width moe_ffn, top_k per token,
     * plus a shared SwiGLU expert of width shared_ffn (0: none) on every
     * token; the other layers keep the dense MLP of width ffn. */
    int64_t experts, top_k, moe_ffn, shared_experts, shared_ffn, first_dense, moe_freq;
    double capacity_factor; /* tokens per expert = cf x the even share (0 = 1) */
    int moe_score;       /* a wf_moe_score: softmax (Mixtral) or sigmoid (DeepSeek-V3) */
    /* llama multi-head latent attention (DeepSeek-V2/V3; kv_lora 0: standard
     * attention): q through a rank-q_lora bottleneck (0: a plain projection),
     * keys and values through a rank-kv_lora latent, per head qk_nope + qk_rope
     * query/key dims and v_head value dims. */
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
    /* llama rotary embedding base (theta; config.json's rope_theta): 10000
     * unless the preset or rope_base=X says otherwise. Costs nothing; the
     * framework exports write it (Megatron-LM's --rotary-base). */
    double rope_base;
    /* swin: window (W, 7), heads in the first stage (doubling per stage), hidden
     * the first stage's channels, sizes[] the blocks per stage; t5: head_dim
     * (d_kv: heads x head_dim is the attention width), dec_seq the decoder's
     * sequence; alphafold: msa sequences (S), seq residues (N), hidden the MSA
     * channels, pair_dim the pair channels, layers Evoformer blocks, recycle
     * the no-gradient forwards before the learning one (AF2 trains with 3) */
    int64_t window, head_dim, dec_seq, msa, pair_dim, recycle;
    /* CNNs */
    int64_t depth;       /* vgg 11/13/16/19, resnet 18/34/50/101/152, densenet 121/161/169/201 */
    int64_t image, channels, classes;
    /* mlp: sizes[0] inputs ... sizes[n-1] classes; cnn: conv widths per stage */
    int nsizes;
    int64_t sizes[WF_MLP_MAX_SIZES];
    /* explicit graphs */
    char path[512];
} wf_model_config;

/* A zoo name ("gpt3-175b"), a family with overrides ("gpt:layers=2,hidden=64"),
 * a zoo name with overrides ("gpt2:seq=512"), a path to a model JSON file, or
 * an ONNX file ("model.onnx", "model.onnx:seq=128" for its symbolic dims).
 * An unknown name or key, or a bad value, is WF_INVAL naming it. */
wf_status wf_model_lookup(const char *spec, wf_model_config *out);

/* 1 for gpt, llama and bert. */
int wf_model_is_transformer(const wf_model_config *m);

/* Builds the forward graph (with the loss) for `mbs` samples: the graph one
 * micro-batch runs (the runtime and the searches build it per micro-batch;
 * the cost model at 1 and scales). Transformer
 * layers are stamped block 0, layer i; CNN stages/blocks likewise, so later
 * modules can cost one instance and multiply. g is initialized here; free it
 * with wf_graph_free, also after an error. */
wf_status wf_model_build(const wf_model_config *m, int64_t mbs, wf_graph *g);

/* Parameter count from the shapes (builds the graph at batch 1). */
wf_status wf_model_params(const wf_model_config *m, double *params);
/* Parameters one token uses (builds the graph at batch 1): everything but
 * the routed experts in full, the routed experts top_k/experts of theirs.
 * Equals wf_model_params for a dense model. */
wf_status wf_model_active_params(const wf_model_config *m, double *active);
/* 1 when some layer of m has experts. */
int wf_model_is_moe(const wf_model_config *m);

/* The constant inputs of the Swin, T5 and AlphaFold2 graphs (src/models/
 * constants.c): Swin's relative-position index and shifted-window mask
 * (torchvision's), T5's relative-position buckets (Hugging Face's), and
 * AlphaFold2's relative-position one-hot of a single chain. 1 when tensor t
 * of graph g (built from m) is one of them. */
int wf_model_is_constant_input(const wf_model_config *m, const wf_graph *g, int t);
/* Its values into out (the tensor's elements: int32 indices, fp32 masks and
 * one-hots); WF_INVAL naming a data input, or a float dtype other than fp32. */
wf_status wf_model_constant_input(const wf_model_config *m, const wf_graph *g, int t, void *out);

/* AlphaFold2's recycling (recycle=N, src/models/constants.c): for a recycled
 * input t of g ("prev_*"), the activation whose values after one forward the
 * next forward takes as t (per sample, the first numel(t)/batch values of
 * each sample of that activation: the first MSA row of the final MSA, the
 * final pair); -1 for a recycled input that stays zero (the previous
 * positions' distogram: the graph has no structure module to make
 * positions); -2 when t is not a recycled input; -3 when the graph lacks
 * the op the source is found by (a graph not built by the zoo's builder). */
int wf_model_recycled_source(const wf_model_config *m, const wf_graph *g, int t);
/* 1 when input t of g takes the labels shifted right by one position with
 * the start token 0 in front (T5's decoder ids under teacher forcing). */
int wf_model_shifted_labels_input(const wf_model_config *m, const wf_graph *g, int t);

/* The zoo, for `weft models`: name, family and a one-line description. */
typedef struct {
    const char *name;
    const char *family;
    const char *summary;
} wf_zoo_entry;
int wf_zoo_count(void);
const wf_zoo_entry *wf_zoo_entry_at(int i);

#ifdef __cplusplus
}
#endif
#endif
