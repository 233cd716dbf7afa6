/* Private declarations of the models module: the per-family graph builders
 * (transformer.c, cnn.c, json_graph.c), the config setters shared by zoo
 * overrides and model JSON files (zoo.c), and small building helpers. */
#ifndef WEFT_MODELS_IMPL_H
#define WEFT_MODELS_IMPL_H

#include "weft/models.h"

struct cJSON;

/* Builders: each adds the forward graph (with the loss) for `batch` samples to
 * an initialized, empty graph g and returns g->status (or a config error). */
wf_status wf_build_gpt(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_llama(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_bert(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_vgg(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_resnet(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_densenet(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_inception(const wf_model_config *m, int64_t batch, wf_graph *g);
/* 1 when depth names a DenseNet layout; the list of those depths for messages. */
int wf_densenet_valid(int64_t depth);
const char *wf_densenet_depths(void);
/* Building blocks of the CNN builders (cnn.c): a conv2d with weight
 * [Cout,Cin,kh,kw] (and a bias when asked), a batchnorm with its eps, a pool. */
int wf_cnn_conv(wf_graph *g, const char *name, int x, int64_t cin, int64_t cout, int kh, int kw, int stride,
                int ph, int pw, int bias, wf_dtype dt);
int wf_cnn_batchnorm(wf_graph *g, const char *name, int x, int64_t c, double eps, wf_dtype dt);
int wf_cnn_pool(wf_graph *g, wf_op_kind k, const char *name, int x, int kernel, int stride, int pad);
wf_status wf_build_cnn(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_mlp(const wf_model_config *m, int64_t batch, wf_graph *g);
/* swin_t5_af2.c: Swin Transformer, T5 and AlphaFold2's Evoformer. */
wf_status wf_build_swin(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_t5(const wf_model_config *m, int64_t batch, wf_graph *g);
wf_status wf_build_alphafold(const wf_model_config *m, int64_t batch, wf_graph *g);

/* Explicit op-list model files. wf_graph_json_check tells the two JSON forms
 * apart (1 when the object has "ops" or "tensors"). wf_build_json_graph builds
 * the op list of the parsed file `j` (ctx names it in messages) for `batch`
 * samples; every problem in the file is WF_FORMAT naming the bad field. */
int wf_graph_json_is_oplist(const struct cJSON *j);
/* Hugging Face config.json (hf_config.c): 1 when j has "architectures"; the
 * family spec it describes ("llama:layers=32,...") with the overrides ovr
 * (may be NULL; "config.json:seq=2048" gives seq=2048) merged in, into
 * spec, or one error naming the architecture or field. The training
 * sequence, unless ovr names one, is WF_HF_DEFAULT_SEQ capped at the
 * model's longest (docs/model-format.md); note gets the line that says so
 * (or that an override exceeds the longest; "" when neither), for the
 * caller to print once the model is read. */
#define WF_HF_DEFAULT_SEQ 4096
int wf_hf_is_config(const struct cJSON *j);
wf_status wf_hf_config_spec(const struct cJSON *j, const char *path, const wf_spec *ovr, char *spec, size_t cap,
                           char *note, size_t note_cap);
wf_status wf_build_json_graph(const struct cJSON *j, const char *ctx, int64_t batch, wf_graph *g);

/* Name helper: snprintf into a WF_NAME_LEN buffer (names that do not fit are
 * caught by the graph, which rejects over-long names). */
const char *wf_model_name(char buf[WF_NAME_LEN], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A parameter tensor of rank 1..4, named by printf. */
int wf_model_param(wf_graph *g, wf_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                   int64_t d3, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* A deterministic dropout seed for the next op of g. */
uint64_t wf_model_seed(const wf_graph *g);

/* Builders' short-hands (builders.c), each returning its output tensor, -1
 * once the graph's sticky status is set: one op of up to four inputs (-1 ends
 * the list); x[...,K] -> [...,N] by W[K,N] (and bias[N]); the norms with
 * their parameters; dropout seeded by wf_model_seed. */
int wf_model_op(wf_graph *g, wf_op_kind k, const char *name, int a, int b, int c, int d,
                const wf_op_attrs *attr);
int wf_model_unary(wf_graph *g, wf_op_kind k, const char *name, int x);
int wf_model_binary(wf_graph *g, wf_op_kind k, const char *name, int x, int y);
int wf_model_linear(wf_graph *g, const char *name, int x, int64_t K, int64_t N, int bias, wf_dtype dt);
int wf_model_layernorm(wf_graph *g, const char *name, int x, int64_t H, double eps, wf_dtype dt);
int wf_model_rmsnorm(wf_graph *g, const char *name, int x, int64_t H, double eps, wf_dtype dt);
int wf_model_dropout(wf_graph *g, const char *name, int x, double p);

#endif
