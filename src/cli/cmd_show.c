/* weft show: what a model is (parameters, FLOPs per sample, saved activation
 * bytes and its op table), or what a cluster is (--cluster).
 *
 * All numbers come from the graph the model builder produces at --batch
 * (default 1): FLOPs and saved bytes are the graph's per-op costs summed over
 * the forward ops (training = forward + backward, no recomputation), divided
 * by the batch for the per-sample figures. The human output is the result,
 * so it goes to stdout; with --json exactly one JSON object goes there. For a
 * transformer the human table shows the ops outside the layers and one row
 * per op of layer 0 ("x L layers"); --json lists every forward op. */
#include "cli/cli.h"
#include "weft/cluster.h"
#include "weft/models.h"
#include "weft/onnx.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *tp_name(wf_tp_role tp)
{
    switch (tp) {
    case WF_TP_NONE: return "none";
    case WF_TP_COL: return "col";
    case WF_TP_ROW: return "row";
    case WF_TP_SHARD: return "shard";
    case WF_TP_VOCAB: return "vocab";
    }
    return "?";
}

/* 1.2345e12 with unit "FLOP" -> "1.23 TFLOP". */
static const char *human(double v, const char *unit, char *buf, size_t cap)
{
    static const char *pre[] = {"", "K", "M", "G", "T", "P", "E"};
    int u = 0;
    while (v >= 1000 && u < 6) {
        v /= 1000;
        u++;
    }
    snprintf(buf, cap, "%.3g %s%s", v, pre[u], unit);
    return buf;
}

static const char *human_bytes(double v, char *buf, size_t cap)
{
    static const char *pre[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%.3g %s", v, pre[u]);
    return buf;
}

/* ---- JSON ---------------------------------------------------------------------- */

static cJSON *shape_json(const wf_tensor *t)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < t->ndim; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->shape[i]));
    return a;
}

static cJSON *config_json(const wf_model_config *m)
{
    cJSON *c = cJSON_CreateObject();
    if (!c)
        return NULL;
    if (wf_model_is_transformer(m)) {
        cJSON_AddNumberToObject(c, "layers", (double)m->layers);
        cJSON_AddNumberToObject(c, "hidden", (double)m->hidden);
        cJSON_AddNumberToObject(c, "heads", (double)m->heads);
        cJSON_AddNumberToObject(c, "kv_heads", (double)m->kv_heads);
        cJSON_AddNumberToObject(c, "seq", (double)m->seq);
        cJSON_AddNumberToObject(c, "vocab", (double)m->vocab);
        cJSON_AddNumberToObject(c, "ffn", (double)m->ffn);
        cJSON_AddBoolToObject(c, "causal", m->causal);
        cJSON_AddBoolToObject(c, "tie_embeddings", m->tie_embeddings);
        if (wf_model_is_moe(m)) {
            cJSON_AddNumberToObject(c, "experts", (double)m->experts);
            cJSON_AddNumberToObject(c, "top_k", (double)m->top_k);
            cJSON_AddNumberToObject(c, "moe_ffn", (double)m->moe_ffn);
            cJSON_AddNumberToObject(c, "shared_ffn", (double)m->shared_ffn);
            cJSON_AddNumberToObject(c, "first_dense", (double)m->first_dense);
            cJSON_AddNumberToObject(c, "moe_freq", (double)m->moe_freq);
            cJSON_AddNumberToObject(c, "capacity_factor",
                                    m->capacity_factor > 0 ? m->capacity_factor : 1.0);
            cJSON_AddStringToObject(c, "router",
                                    m->moe_score == WF_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax");
        }
        if (m->family == WF_FAMILY_LLAMA && m->kv_lora > 0) {
            cJSON_AddNumberToObject(c, "q_lora", (double)m->q_lora);
            cJSON_AddNumberToObject(c, "kv_lora", (double)m->kv_lora);
            cJSON_AddNumberToObject(c, "qk_nope", (double)m->qk_nope);
            cJSON_AddNumberToObject(c, "qk_rope", (double)m->qk_rope);
            cJSON_AddNumberToObject(c, "v_head", (double)m->v_head);
        }
    } else if (m->family == WF_FAMILY_VGG || m->family == WF_FAMILY_RESNET || m->family == WF_FAMILY_DENSENET ||
               m->family == WF_FAMILY_INCEPTION ||
               m->family == WF_FAMILY_CNN) {
        if (m->family != WF_FAMILY_CNN)
            cJSON_AddNumberToObject(c, "depth", (double)m->depth);
        cJSON_AddNumberToObject(c, "image", (double)m->image);
        cJSON_AddNumberToObject(c, "channels", (double)m->channels);
        cJSON_AddNumberToObject(c, "classes", (double)m->classes);
    } else if (m->family == WF_FAMILY_GRAPH || m->family == WF_FAMILY_ONNX) {
        cJSON_AddStringToObject(c, "path", m->path);
    }
    if (m->family == WF_FAMILY_MLP || m->family == WF_FAMILY_CNN) {
        cJSON *s = cJSON_AddArrayToObject(c, "sizes");
        for (int i = 0; s && i < m->nsizes; i++)
            cJSON_AddItemToArray(s, cJSON_CreateNumber((double)m->sizes[i]));
    }
    return c;
}

static wf_status print_model_json(const wf_model_config *m, const wf_graph *g, int64_t batch,
                                  const wf_graph_totals *t, const char *patterns)
{
    double b = (double)batch;
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    cJSON_AddStringToObject(j, "name", m->name);
    cJSON_AddStringToObject(j, "family", wf_family_name(m->family));
    cJSON_AddStringToObject(j, "dtype", wf_dtype_name(m->dtype));
    cJSON_AddItemToObject(j, "config", config_json(m));
    cJSON_AddNumberToObject(j, "batch", b);
    cJSON_AddNumberToObject(j, "params", t->params);
    if (wf_model_is_moe(m))
        cJSON_AddNumberToObject(j, "active_params", t->active_params);
    cJSON_AddNumberToObject(j, "forward_flops_per_sample", t->fwd_flops / b);
    cJSON_AddNumberToObject(j, "backward_flops_per_sample", t->bwd_flops / b);
    cJSON_AddNumberToObject(j, "training_flops_per_sample", (t->fwd_flops + t->bwd_flops) / b);
    if (wf_model_is_transformer(m)) {
        double tokens = b * (double)m->seq;
        cJSON_AddNumberToObject(j, "forward_flops_per_token", t->fwd_flops / tokens);
        cJSON_AddNumberToObject(j, "training_flops_per_token",
                                (t->fwd_flops + t->bwd_flops) / tokens);
    }
    cJSON_AddNumberToObject(j, "activation_bytes_per_sample", t->saved_bytes / b);
    cJSON_AddNumberToObject(j, "forward_ops", g->nfwd);
    if (m->family == WF_FAMILY_ONNX)
        cJSON_AddStringToObject(j, "patterns", patterns);
    cJSON *arr = cJSON_AddArrayToObject(j, "layers");
    for (int i = 0; arr && i < g->nfwd; i++) {
        const wf_op *o = &g->ops[i];
        wf_op_cost c;
        wf_op_cost_of(g, i, &c);
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddItemToArray(arr, e);
        cJSON_AddStringToObject(e, "name", o->name);
        cJSON_AddStringToObject(e, "kind", wf_op_name(o->kind));
        cJSON_AddNumberToObject(e, "block", o->block);
        cJSON_AddNumberToObject(e, "layer", o->layer);
        cJSON_AddStringToObject(e, "tp", tp_name(o->tp));
        cJSON_AddItemToObject(e, "shape", shape_json(&g->tensors[o->out[0]]));
        cJSON_AddNumberToObject(e, "params", c.params);
        cJSON_AddNumberToObject(e, "fwd_flops", c.fwd_flops);
        cJSON_AddNumberToObject(e, "bwd_flops", c.bwd_in_flops + c.bwd_w_flops);
        cJSON_AddNumberToObject(e, "saved_bytes", c.saved_bytes);
    }
    wf_status st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}

/* ---- human output ------------------------------------------------------------------ */

static void op_row(const wf_graph *g, int i, const char *indent)
{
    const wf_op *o = &g->ops[i];
    wf_op_cost c;
    wf_op_cost_of(g, i, &c);
    char shape[96], pbuf[32], fbuf[32], sbuf[32];
    wf_shape_str(&g->tensors[o->out[0]], shape, sizeof shape);
    printf("%s%-*s %-14s %-5s %-20s %10s %12s %11s\n", indent, 30 - (int)strlen(indent), o->name,
           wf_op_name(o->kind), tp_name(o->tp), shape,
           c.params > 0 ? human(c.params, "", pbuf, sizeof pbuf) : "-",
           human(c.fwd_flops, "FLOP", fbuf, sizeof fbuf),
           c.saved_bytes > 0 ? human_bytes(c.saved_bytes, sbuf, sizeof sbuf) : "-");
}

static void print_model_human(const wf_model_config *m, const wf_graph *g, int64_t batch,
                              const wf_graph_totals *t, const char *patterns)
{
    double b = (double)batch;
    char a[32], c[32], d[32];
    printf("model        %s (%s, %s)\n", m->name, wf_family_name(m->family),
           wf_dtype_name(m->dtype));
    if (wf_model_is_transformer(m))
        printf("shape        %" PRId64 " layers, hidden %" PRId64 ", %" PRId64 " heads (%" PRId64
               " kv), ffn %" PRId64 ", seq %" PRId64 ", vocab %" PRId64 "%s%s\n",
               m->layers, m->hidden, m->heads, m->kv_heads, m->ffn, m->seq, m->vocab,
               m->causal ? ", causal" : "", m->tie_embeddings ? ", tied embeddings" : "");
    else if (m->family == WF_FAMILY_VGG || m->family == WF_FAMILY_RESNET || m->family == WF_FAMILY_DENSENET ||
             m->family == WF_FAMILY_INCEPTION)
        printf("shape        depth %" PRId64 ", %" PRId64 "x%" PRId64 "x%" PRId64
               " images, %" PRId64 " classes\n",
               m->depth, m->image, m->image, m->channels, m->classes);
    if (wf_model_is_moe(m)) {
        int64_t nmoe = 0; /* layers with experts: i >= first_dense, i % moe_freq == 0 */
        for (int64_t i = m->first_dense; i < m->layers; i++)
            nmoe += i % (m->moe_freq > 0 ? m->moe_freq : 1) == 0;
        printf("experts      %" PRId64 " of ffn %" PRId64 ", top-%" PRId64 " (%s router)%s, in %" PRId64
               " of %" PRId64 " layers\n",
               m->experts, m->moe_ffn, m->top_k,
               m->moe_score == WF_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax",
               m->shared_ffn > 0 ? ", a shared expert" : "", nmoe, m->layers);
    }
    printf("params       %s (%.0f)\n", human(t->params, "", a, sizeof a), t->params);
    if (wf_model_is_moe(m))
        printf("active       %s (%.0f) per token\n", human(t->active_params, "", a, sizeof a),
               t->active_params);
    printf("FLOPs/sample forward %s, training %s (forward + backward, no recompute)\n",
           human(t->fwd_flops / b, "FLOP", a, sizeof a),
           human((t->fwd_flops + t->bwd_flops) / b, "FLOP", c, sizeof c));
    if (wf_model_is_transformer(m))
        printf("FLOPs/token  forward %s, training %s\n",
               human(t->fwd_flops / (b * (double)m->seq), "FLOP", a, sizeof a),
               human((t->fwd_flops + t->bwd_flops) / (b * (double)m->seq), "FLOP", c, sizeof c));
    printf("activations  %s per sample saved for backward (no recompute)\n",
           human_bytes(t->saved_bytes / b, d, sizeof d));
    if (m->family == WF_FAMILY_ONNX)
        printf("patterns     %s\n", *patterns ? patterns : "none recognized");
    printf("\nops at batch %" PRId64 ":\n", batch);
    printf("%-30s %-14s %-5s %-20s %10s %12s %11s\n", "name", "kind", "tp", "output", "params",
           "fwd", "saved");
    /* Transformers: ops before layer 0, layer 0 once, then the ops after the layers. */
    int compact = wf_model_is_transformer(m) && m->layers > 1;
    int in_layers = 0;
    for (int i = 0; i < g->nfwd; i++) {
        const wf_op *o = &g->ops[i];
        if (!compact || o->block < 0) {
            if (in_layers) {
                printf("  x %" PRId64 " layers\n", m->layers);
                in_layers = 0;
            }
            op_row(g, i, "");
        } else if (o->block == 0 && o->layer == 0) {
            in_layers = 1;
            op_row(g, i, "  ");
        }
    }
    if (in_layers)
        printf("  x %" PRId64 " layers\n", m->layers);
}

/* ---- clusters ------------------------------------------------------------------------- */

static wf_status show_cluster(const char *spec, int json)
{
    wf_cluster c;
    wf_status st = wf_cluster_lookup(spec, &c);
    if (st != WF_OK)
        return st;
    if (json) {
        cJSON *j = wf_cluster_to_json(&c);
        if (!j)
            return wf_errorf(WF_NOMEM, "out of memory");
        st = wf_cli_print_json(j);
        cJSON_Delete(j);
        return st;
    }
    wf_cli_print_cluster(stdout, &c);
    return fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
}

wf_status wf_cmd_show(int argc, char **argv)
{
    int json = 0, help = 0, npos = 0;
    int64_t batch = 1, seq = INT64_MIN; /* INT64_MIN: --seq not given */
    const char *cluster = NULL;
    const char *pos[1] = {NULL};
    const wf_opt opts[] = {
        {"json", 0, WF_OPT_FLAG, &json, NULL, "print one JSON object on stdout", 0},
        {"batch", 'b', WF_OPT_INT, &batch, "B", "samples the graph is built for (default 1)", 0},
        {"seq", 0, WF_OPT_INT, &seq, "S", "sequence length of a transformer (default: the model's)", 0},
        {"cluster", 'c', WF_OPT_STR, &cluster, "C", "show a cluster (preset, overrides or JSON file) instead", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, pos, 1, &npos, &help);
    if (st != WF_OK)
        return st;
    if (help) {
        wf_opts_usage(stdout, "weft show [MODEL]",
                      "Shows a model's parameters, FLOPs per sample (forward, and training =\n"
                      "forward + backward without recomputation), activation bytes saved for\n"
                      "backward, and its op table. MODEL is a zoo name (weft models), a family\n"
                      "with keys (gpt:layers=2,hidden=64), or a model JSON file.\n"
                      "With --json, \"layers\" lists every forward op (FLOPs at --batch).",
                      opts);
        return WF_OK;
    }
    if (cluster) {
        if (npos > 0)
            return wf_errorf(WF_INVAL, "give a model or --cluster, not both ('%s')", pos[0]);
        return show_cluster(cluster, json);
    }
    if (npos == 0)
        return wf_errorf(WF_INVAL, "missing MODEL (see weft models, or weft show --help)");
    if ((st = wf_cli_check_batch(batch)) != WF_OK)
        return st;
    wf_model_config m;
    if ((st = wf_model_lookup(pos[0], &m)) != WF_OK)
        return st;
    if (seq != INT64_MIN) {
        if (!wf_model_is_transformer(&m))
            return wf_errorf(WF_INVAL, "--seq %" PRId64 ": '%s' is not a transformer", seq, m.name);
        if (seq < 1 || seq > ((int64_t)1 << 30))
            return wf_errorf(WF_INVAL, "--seq %" PRId64 ": must be a positive integer", seq);
        m.seq = seq;
    }
    wf_graph g;
    st = wf_model_build(&m, batch, &g);
    if (st == WF_OK)
        st = wf_graph_validate(&g);
    /* ONNX: the multi-node patterns the import recognized (a second build) */
    char patterns[512] = "";
    if (st == WF_OK && m.family == WF_FAMILY_ONNX) {
        wf_graph g2;
        st = wf_onnx_build_spec_patterns(m.name, batch, &g2, patterns, sizeof patterns);
        wf_graph_free(&g2);
    }
    if (st == WF_OK) {
        wf_graph_totals t;
        wf_graph_totals_of(&g, &t);
        if (json) {
            st = print_model_json(&m, &g, batch, &t, patterns);
        } else {
            print_model_human(&m, &g, batch, &t, patterns);
            if (fflush(stdout) != 0)
                st = wf_errorf(WF_IO, "cannot write standard output");
        }
    }
    wf_graph_free(&g);
    return st;
}
