/* weft export: Megatron-LM arguments for a plan (docs/export.md).
 *
 * The arguments of pretrain_gpt.py, one a line, as Megatron-LM's parser
 * (megatron/training/arguments.py, allow_abbrev=False) takes them at the
 * commit docs/export.md names, or at an older release with
 * `--to megatron@VERSION`. Every flag the writer can emit is checked by
 * tests/cli/export-frameworks.sh against the flag lists that
 * scripts/extract-megatron-args took from each release
 * (tests/data/frameworks/megatron-lm-*.flags). */
#include "cli/export-impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The Megatron-LM releases `--to megatron@VERSION` knows, oldest first: tags
 * of github:NVIDIA/Megatron-LM, and "main" (the pinned main commit, what
 * plain `--to megatron` writes). */
static const char *const VERSIONS[] = {
    "core_r0.8.0",  "core_r0.9.0",  "core_r0.10.0", "core_r0.11.0", "core_v0.12.0",
    "core_v0.13.0", "core_v0.14.0", "core_v0.15.0", "core_v0.16.0", "core_v0.17.0",
    "core_v0.18.0", "core_v0.19.0", "main",
};
enum { R08, R09, R010, R011, V012, V013, V014, V015, V016, V017, V018, V019, MAIN, NVERSIONS };

/* The flags this writer emits that some of those releases lack: the first
 * release that has each and the last (MAIN: still there), read off the
 * extracted lists. A flag not here is in every release. */
static const struct {
    const char *flag;
    int since, until;
} SPAN[] = {
    {"--expert-tensor-parallel-size", R010, MAIN},
    {"--moe-ffn-hidden-size", R010, MAIN},
    {"--moe-shared-expert-intermediate-size", R010, MAIN},
    {"--moe-layer-freq", R010, MAIN},
    {"--multi-latent-attention", R010, MAIN},
    {"--q-lora-rank", R010, MAIN},
    {"--kv-lora-rank", R010, MAIN},
    {"--qk-head-dim", R010, MAIN},
    {"--qk-pos-emb-head-dim", R010, MAIN},
    {"--v-head-dim", R010, MAIN},
    {"--moe-router-score-function", R011, MAIN},
    {"--attention-backend", R011, MAIN},
    {"--data-parallel-sharding-strategy", V012, MAIN},
    {"--use-custom-fsdp", V012, V013},
    {"--use-megatron-fsdp", V014, MAIN},
    {"--decoder-first-pipeline-num-layers", R09, MAIN},
    {"--decoder-last-pipeline-num-layers", R09, MAIN},
};

#define MAX_ARGS 96
#define ARG_LEN 1024

typedef struct {
    const ectx *e;
    int ver;
    int n;
    char line[MAX_ARGS][ARG_LEN];
    wf_status st;
} margs;

static int has(const margs *a, const char *flag)
{
    for (size_t i = 0; i < sizeof SPAN / sizeof SPAN[0]; i++)
        if (strcmp(SPAN[i].flag, flag) == 0)
            return a->ver >= SPAN[i].since && a->ver <= SPAN[i].until;
    return 1;
}

/* Appends FLAG [VALUE]; refuses (once) when the target release lacks FLAG. */
static void arg(margs *a, const char *flag, const char *fmt, ...)
{
    if (a->st != WF_OK)
        return;
    if (!has(a, flag)) {
        int since = -1;
        for (size_t i = 0; i < sizeof SPAN / sizeof SPAN[0]; i++)
            if (strcmp(SPAN[i].flag, flag) == 0)
                since = SPAN[i].since;
        char what[256];
        snprintf(what, sizeof what, "Megatron-LM %s has no %s (it came in %s: --to megatron@%s or later)",
                 VERSIONS[a->ver], flag, VERSIONS[since], VERSIONS[since]);
        a->st = wf_export_refuse(a->e, what);
        return;
    }
    if (a->n >= MAX_ARGS) {
        a->st = wf_errorf(WF_INTERNAL, "megatron export: more than %d arguments", MAX_ARGS);
        return;
    }
    char *l = a->line[a->n++];
    int k = snprintf(l, ARG_LEN, "%s", flag);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l + k, ARG_LEN - (size_t)k, fmt, ap);
        va_end(ap);
    }
}

/* Megatron-LM's --moe-layer-freq for weft's rule (layer i has experts when
 * i >= first_dense and i % moe_freq == 0): the integer N when no layer is
 * dense up front (Megatron's int N means i % N == 0, the same rule), else a
 * Python list expression of runs ("[0]*3+[1]*58") that Megatron evaluates,
 * single-quoted for the shell. Empty when every layer has experts. */
static int moe_layer_freq(const wf_model_config *m, char *out, size_t cap)
{
    out[0] = 0;
    int64_t f = m->moe_freq > 0 ? m->moe_freq : 1;
    if (m->first_dense == 0) {
        if (f > 1)
            snprintf(out, cap, " %" PRId64, f);
        return 0;
    }
    size_t n = (size_t)snprintf(out, cap, " '");
    int64_t i = 0;
    while (i < m->layers && n < cap) {
        int v = i >= m->first_dense && i % f == 0;
        int64_t j = i;
        while (j < m->layers && (j >= m->first_dense && j % f == 0) == v)
            j++;
        n += (size_t)snprintf(out + n, cap - n, "%s[%d]*%" PRId64, i ? "+" : "", v, j - i);
        i = j;
    }
    if (n + 2 > cap)
        return -1;
    snprintf(out + n, cap - n, "'");
    return 0;
}

/* The model: shape, then the family's architecture. */
static void model_args(margs *a, const wf_model_config *m)
{
    arg(a, "--num-layers", " %" PRId64, m->layers);
    arg(a, "--hidden-size", " %" PRId64, m->hidden);
    arg(a, "--num-attention-heads", " %" PRId64, m->heads);
    arg(a, "--ffn-hidden-size", " %" PRId64, m->ffn);
    arg(a, "--seq-length", " %" PRId64, m->seq);
    arg(a, "--max-position-embeddings", " %" PRId64, m->seq);
    if (m->family != WF_FAMILY_LLAMA) {
        /* GPT and BERT: LayerNorm, GELU, learned positions, biases, the head
         * tied to the word embedding (Megatron-LM's defaults, written out). */
        arg(a, "--normalization", " LayerNorm");
        arg(a, "--position-embedding-type", " learned_absolute");
        if (m->family == WF_FAMILY_BERT) /* weft's BERT is post-LN, as Devlin et al. */
            arg(a, "--apply-residual-connection-post-layernorm", NULL);
        return;
    }
    /* Llama: RMSNorm, SwiGLU, rotary positions, no biases, no dropout, an
     * untied output head unless the model ties it (tie_embeddings). */
    arg(a, "--normalization", " RMSNorm");
    arg(a, "--swiglu", NULL);
    arg(a, "--position-embedding-type", " rope");
    if (a->st == WF_OK && (m->rope_base != floor(m->rope_base) || m->rope_base > 2147483647.0)) {
        char what[128];
        snprintf(what, sizeof what, "rope_base=%g: Megatron-LM's --rotary-base takes an integer", m->rope_base);
        a->st = wf_export_refuse(a->e, what);
        return;
    }
    arg(a, "--rotary-base", " %.0f", m->rope_base > 0 ? m->rope_base : 10000.0);
    arg(a, "--disable-bias-linear", NULL);
    if (!m->tie_embeddings) /* Llama 3.2 1B/3B and small Qwen2.5 tie the head to the embedding */
        arg(a, "--untie-embeddings-and-output-weights", NULL);
    arg(a, "--attention-dropout", " 0.0");
    arg(a, "--hidden-dropout", " 0.0");
    if (m->kv_lora > 0) {
        /* Multi-head latent attention (DeepSeek-V2/V3); --qk-layernorm gives
         * MLA's norms of the q and kv latents (megatron/core/transformer/
         * multi_latent_attention.py: q_layernorm, kv_layernorm). */
        arg(a, "--multi-latent-attention", NULL);
        if (m->q_lora > 0)
            arg(a, "--q-lora-rank", " %" PRId64, m->q_lora);
        arg(a, "--kv-lora-rank", " %" PRId64, m->kv_lora);
        arg(a, "--qk-head-dim", " %" PRId64, m->qk_nope);
        arg(a, "--qk-pos-emb-head-dim", " %" PRId64, m->qk_rope);
        arg(a, "--v-head-dim", " %" PRId64, m->v_head);
        arg(a, "--qk-layernorm", NULL);
    } else if (m->kv_heads > 0 && m->kv_heads < m->heads) {
        arg(a, "--group-query-attention", NULL);
        arg(a, "--num-query-groups", " %" PRId64, m->kv_heads);
    }
    if (!wf_model_is_moe(m))
        return;
    arg(a, "--num-experts", " %" PRId64, m->experts);
    arg(a, "--moe-router-topk", " %" PRId64, m->top_k);
    /* Releases before these flags size every expert as the dense MLP, score
     * by softmax and put experts in every layer: leave out what says so. */
    if (m->moe_ffn != m->ffn || has(a, "--moe-ffn-hidden-size"))
        arg(a, "--moe-ffn-hidden-size", " %" PRId64, m->moe_ffn);
    if (m->shared_ffn > 0)
        arg(a, "--moe-shared-expert-intermediate-size", " %" PRId64, m->shared_ffn);
    char freq[ARG_LEN - 32];
    if (moe_layer_freq(m, freq, sizeof freq) != 0) {
        if (a->st == WF_OK)
            a->st = wf_export_refuse(a->e, "the pattern of layers with experts is too long for one --moe-layer-freq");
        return;
    }
    if (freq[0])
        arg(a, "--moe-layer-freq", "%s", freq);
    int sig = m->moe_score == WF_MOE_SCORE_SIGMOID;
    if (sig || has(a, "--moe-router-score-function"))
        arg(a, "--moe-router-score-function", " %s", sig ? "sigmoid" : "softmax");
    if (m->capacity_factor > 0)
        arg(a, "--moe-expert-capacity-factor", " %g", m->capacity_factor);
    arg(a, "--moe-grouped-gemm", NULL);
    arg(a, "--moe-token-dispatcher-type", " alltoall");
}

wf_status wf_export_megatron(FILE *f, const ectx *e)
{
    const wf_plan *p = e->p;
    const wf_model_config *m = e->m;
    margs *a = calloc(1, sizeof *a);
    if (!a)
        return wf_errorf(WF_NOMEM, "out of memory");
    a->e = e;
    a->ver = MAIN;
    if (e->version) {
        a->ver = -1;
        for (int i = 0; i < NVERSIONS; i++)
            if (strcmp(e->version, VERSIONS[i]) == 0)
                a->ver = i;
        if (a->ver < 0) {
            free(a);
            return wf_errorf(WF_INVAL, "megatron@%s: unknown Megatron-LM version (core_r0.8.0 to core_r0.11.0, "
                                       "core_v0.12.0 to core_v0.19.0, main)",
                             e->version);
        }
    }
    wf_status st = wf_export_refuse_rc(e, p, 1);
    if (st == WF_OK && !wf_model_is_transformer(m))
        st = wf_export_refuse(e, "Megatron-LM trains transformers only");
    if (st == WF_OK && p->pipe == WF_PIPE_GPIPE)
        st = wf_export_refuse(e, "Megatron-LM has no GPipe schedule (it runs 1F1B; use pipe=1f1b)");
    if (st == WF_OK && p->comm.kind != WF_COMM_DDP)
        st = wf_errorf(WF_INVAL, "megatron cannot run this plan: comm schedule '%s' has no Megatron-LM equivalent (its "
                                 "DDP reduces gradients in buckets: comm=ddp)",
                       wf_comm_name(p->comm.kind));
    if (st == WF_OK && p->sw == WF_SW_MEGATRON_2021 && p->zero >= 1)
        st = wf_export_refuse(e, "Megatron-LM 2021 has no distributed optimizer (zero=0, or sw=megatron-core)");
    if (st != WF_OK) {
        free(a);
        return st;
    }
    a->st = WF_OK;

    /* Parallelism. */
    arg(a, "--tensor-model-parallel-size", " %d", p->tp);
    arg(a, "--pipeline-model-parallel-size", " %d", p->pp);
    if (p->cp > 1)
        arg(a, "--context-parallel-size", " %d", p->cp);
    if (p->ep > 1)
        arg(a, "--expert-model-parallel-size", " %d", p->ep);
    if (p->etp > 0 && p->etp != p->tp && wf_model_is_moe(m)) /* equal: the default, as the plan string omits it */
        arg(a, "--expert-tensor-parallel-size", " %d", p->etp);
    if (p->stage_n > 0) {
        /* Uneven stages: Megatron-LM gives the first and the last stage their
         * own layer counts and splits the rest evenly over the middle stages
         * (TransformerConfig.__post_init__, "Uneven PP", and
         * --decoder-first/last-pipeline-num-layers in
         * megatron/training/arguments.py at d98e8a64); a list whose middle
         * stages differ needs --pipeline-model-parallel-layout, which weft
         * does not write. */
        const int n = p->stage_n, mid = n > 2 ? p->stage_layers[1] : 0;
        for (int k = 2; k + 1 < n; k++)
            if (p->stage_layers[k] != mid) {
                char what[256];
                snprintf(what, sizeof what,
                         "Megatron-LM's --decoder-first/last-pipeline-num-layers split the middle stages evenly, and "
                         "stages= gives middle stages %d and %d layers (its --pipeline-model-parallel-layout, which "
                         "weft does not write, could)", mid, p->stage_layers[k]);
                a->st = wf_export_refuse(e, what);
                break;
            }
        if (n == 2 || p->stage_layers[0] != mid)
            arg(a, "--decoder-first-pipeline-num-layers", " %d", p->stage_layers[0]);
        if (n == 2 || p->stage_layers[n - 1] != mid)
            arg(a, "--decoder-last-pipeline-num-layers", " %d", p->stage_layers[n - 1]);
    }
    if (p->vpp > 1) {
        arg(a, "--num-layers-per-virtual-pipeline-stage", " %lld", (long long)(m->layers / (p->pp * p->vpp)));
        /* The interleaved schedule overlaps its sends by default (only
         * --no-overlap-p2p-communication exists); the older profiles priced
         * no overlap. Megatron-LM refuses that at pp=2 (its validate_args). */
        if (p->sw != WF_SW_MEGATRON_CORE && p->pp > 2)
            arg(a, "--no-overlap-p2p-communication", NULL);
    }
    arg(a, "--micro-batch-size", " %d", p->mbs);
    arg(a, "--global-batch-size", " %lld", (long long)e->batch);
    if (p->sp)
        arg(a, "--sequence-parallel", NULL);
    if (p->recompute == WF_RECOMPUTE_FULL && p->rc_layers > 0) {
        arg(a, "--recompute-granularity", " full");
        arg(a, "--recompute-method", " block");
        arg(a, "--recompute-num-layers", " %d", p->rc_layers);
    } else if (p->recompute == WF_RECOMPUTE_FULL) {
        arg(a, "--recompute-granularity", " full");
        arg(a, "--recompute-method", " uniform");
        arg(a, "--recompute-num-layers", " 1");
    } else if (p->recompute == WF_RECOMPUTE_SELECTIVE) {
        arg(a, "--recompute-granularity", " selective");
    }
    /* Sharding: the distributed optimizer (optimizer state and gradients),
     * or Megatron-FSDP for parameters too (zero=3): --use-megatron-fsdp since
     * core_v0.14.0, which asserts --ckpt-format fsdp_dtensor; --use-custom-fsdp
     * in core_v0.12/0.13, which asserts the distributed optimizer and no
     * gradient-accumulation fusion with optim_grads_params. */
    if (p->zero >= 3) {
        if (has(a, "--use-megatron-fsdp")) {
            arg(a, "--use-megatron-fsdp", NULL);
            arg(a, "--data-parallel-sharding-strategy", " optim_grads_params");
            arg(a, "--ckpt-format", " fsdp_dtensor");
        } else {
            arg(a, "--use-custom-fsdp", NULL); /* refused, naming core_v0.12.0, before it */
            arg(a, "--data-parallel-sharding-strategy", " optim_grads_params");
            arg(a, "--no-gradient-accumulation-fusion", NULL);
        }
    }
    if (p->zero >= 1)
        arg(a, "--use-distributed-optimizer", NULL);
    if (p->overlap) {
        arg(a, "--overlap-grad-reduce", NULL);
        if (p->zero >= 1)
            arg(a, "--overlap-param-gather", NULL);
    }
    if (p->comm.threshold_bytes > 0) /* Megatron counts the bucket in elements (fp32 main grads) */
        arg(a, "--ddp-bucket-size", " %lld", (long long)(p->comm.threshold_bytes / 4));

    /* Kernels and precision as the profile resolved them. */
    int flash = p->attn == WF_ATTN_AUTO ? (p->sw == WF_SW_MEGATRON_CORE || p->sw == WF_SW_FSDP) : p->attn == WF_ATTN_FLASH;
    if (p->sw == WF_SW_MEGATRON_CORE)
        arg(a, "--transformer-impl", " transformer_engine");
    if (flash)
        arg(a, has(a, "--attention-backend") ? "--attention-backend" : "--use-flash-attn",
            has(a, "--attention-backend") ? " flash" : NULL);
    if (p->sw == WF_SW_MEGATRON_CORE && p->sp && p->tp > 1)
        arg(a, "--tp-comm-overlap", NULL);
    if (p->grad_dtype == WF_DTYPE_FP32 || (p->grad_dtype < 0 && p->sw == WF_SW_MEGATRON_2022))
        arg(a, "--accumulate-allreduce-grads-in-fp32", NULL);
    if (wf_export_dtype_flag(m->dtype))
        arg(a, wf_export_dtype_flag(m->dtype), NULL);
    if (p->fp8)
        arg(a, "--fp8-format", " hybrid");

    model_args(a, m);
    st = a->st;
    if (st == WF_OK && f) /* without a file: the checks alone (wf_export_accepts) */
        for (int i = 0; i < a->n; i++)
            fprintf(f, "%s%s\n", a->line[i], i + 1 < a->n ? " \\" : "");
    free(a);
    return st;
}
