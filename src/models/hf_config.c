/* Hugging Face model configs (config.json): the architectures weft builds are
 * read into a zoo family spec ("llama:layers=32,hidden=4096,..."), so the model
 * is the same as the family's. Fields by architecture (docs/model-format.md):
 *
 *   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM -> llama:
 *     num_hidden_layers, hidden_size, num_attention_heads,
 *     num_key_value_heads (default: the heads), intermediate_size, vocab_size,
 *     max_position_embeddings (the longest sequence), tie_word_embeddings
 *     (true: the head is the embedding's matrix), torch_dtype
 *   MixtralForCausalLM -> llama with experts: the llama fields, plus
 *     num_local_experts, num_experts_per_tok (experts as wide as
 *     intermediate_size)
 *   Qwen2MoeForCausalLM -> llama with experts: the llama fields, plus
 *     num_experts, num_experts_per_tok, moe_intermediate_size,
 *     shared_expert_intermediate_size (optional), decoder_sparse_step (must
 *     be 1: experts in every layer) and mlp_only_layers (must be empty)
 *   DeepseekV3ForCausalLM -> llama with experts and latent attention: the
 *     llama fields, plus n_routed_experts, num_experts_per_tok,
 *     moe_intermediate_size, n_shared_experts, first_k_dense_replace,
 *     moe_layer_freq, q_lora_rank (null: none), kv_lora_rank,
 *     qk_nope_head_dim, qk_rope_head_dim, v_head_dim, scoring_func
 *     (default sigmoid); the multi-token-prediction layers
 *     (num_nextn_predict_layers) are not part of the model
 *   GPT2LMHeadModel -> gpt: n_layer, n_embd, n_head, vocab_size, n_positions
 *     (or n_ctx), n_inner (default 4 x n_embd), torch_dtype
 *   BertForMaskedLM -> bert: num_hidden_layers, hidden_size,
 *     num_attention_heads, intermediate_size, vocab_size,
 *     max_position_embeddings, torch_dtype
 *
 * The training sequence is not the longest the model takes: it is
 * WF_HF_DEFAULT_SEQ tokens, or max_position_embeddings (n_positions) when
 * that is shorter, said on stderr, unless the spec's overrides name one
 * ("config.json:seq=8192"; docs/model-format.md). Overrides replace the
 * file's values, key by key, in the family's keys (layers, hidden, ...).
 *
 * Any other architecture, a missing field or a bad value is one line naming it. */
#include "models/models-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wf_hf_is_config(const cJSON *j)
{
    return cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "architectures") != NULL;
}

/* key=value of an integer field (at least lo) into the spec; required fields must be there. */
static wf_status put_int_from(const cJSON *j, const char *path, const char *field, const char *key, int required,
                              int lo, char *spec, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", path, field);
        return WF_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > 9e15)
        return wf_errorf(WF_FORMAT, "%s: \"%s\" must be a%s integer", path, field,
                         lo > 0 ? " positive" : " non-negative");
    size_t n = strlen(spec);
    snprintf(spec + n, cap - n, "%s%s=%lld", spec[n - 1] == ':' ? "" : ",", key, (long long)v->valuedouble);
    return WF_OK;
}

static wf_status put_int(const cJSON *j, const char *path, const char *field, const char *key, int required,
                         char *spec, size_t cap)
{
    return put_int_from(j, path, field, key, required, 1, spec, cap);
}

/* A field that must hold one value weft builds (decoder_sparse_step 1): absent is fine. */
static wf_status need_value(const cJSON *j, const char *path, const char *field, double want, const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == want))
        return WF_OK;
    return wf_errorf(WF_INVAL, "%s: \"%s\" other than %g: %s", path, field, want, why);
}

/* The training sequence: the overrides' seq, else WF_HF_DEFAULT_SEQ capped
 * at the longest the model takes (field, required), said in note. An
 * override above the longest is noted too (training past the positions the
 * model was made for, e.g. a context extension). */
static wf_status put_seq(const cJSON *j, const char *path, const char *field, const wf_spec *ovr, char *spec,
                         size_t cap, char *note, size_t note_cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!v || cJSON_IsNull(v))
        return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", path, field);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 9e15)
        return wf_errorf(WF_FORMAT, "%s: \"%s\" must be a positive integer", path, field);
    long long longest = (long long)v->valuedouble;
    for (int i = 0; ovr && i < ovr->nkv; i++)
        if (strcmp(ovr->key[i], "seq") == 0) {
            char *end = NULL;
            long long seq = strtoll(ovr->val[i], &end, 10);
            if (end && !*end && seq > longest)
                snprintf(note, note_cap, "%s: seq=%lld is longer than %s=%lld, the longest sequence the model was "
                                         "made for", path, seq, field, longest);
            return WF_OK; /* merged with the other overrides */
        }
    long long seq = longest < WF_HF_DEFAULT_SEQ ? longest : WF_HF_DEFAULT_SEQ;
    snprintf(note, note_cap, "%s: training sequence %lld tokens (%s=%lld is the longest the model takes; "
                             "%s:seq=N sets it; docs/model-format.md)", path, seq, field, longest, path);
    size_t n = strlen(spec);
    snprintf(spec + n, cap - n, "%sseq=%lld", spec[n - 1] == ':' ? "" : ",", seq);
    return WF_OK;
}

/* The llama fields every llama-shaped architecture has. */
static wf_status put_llama(const cJSON *j, const char *path, const wf_spec *ovr, char *spec, size_t cap, char *note,
                           size_t note_cap)
{
    wf_status st;
    snprintf(spec, cap, "llama:");
    if ((st = put_int(j, path, "num_hidden_layers", "layers", 1, spec, cap)) ||
        (st = put_int(j, path, "hidden_size", "hidden", 1, spec, cap)) ||
        (st = put_int(j, path, "num_attention_heads", "heads", 1, spec, cap)) ||
        (st = put_int(j, path, "num_key_value_heads", "kv_heads", 0, spec, cap)) ||
        (st = put_int(j, path, "intermediate_size", "ffn", 1, spec, cap)) ||
        (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
        (st = put_seq(j, path, "max_position_embeddings", ovr, spec, cap, note, note_cap)))
        return st;
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta"); /* absent: LlamaConfig's 10000 */
    if (theta && !cJSON_IsNull(theta)) {
        if (!cJSON_IsNumber(theta) || !(theta->valuedouble >= 1) || theta->valuedouble > 1e12)
            return wf_errorf(WF_FORMAT, "%s: \"rope_theta\" must be a number in [1, 1e12]", path);
        size_t n = strlen(spec);
        snprintf(spec + n, cap - n, ",rope_base=%.17g", theta->valuedouble);
    }
    /* Tied head: LlamaConfig, MistralConfig, Qwen2Config, MixtralConfig and
     * the MoE configs default to untied (tie_word_embeddings=False). */
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings"))) {
        size_t n = strlen(spec);
        snprintf(spec + n, cap - n, ",tie_embeddings=1");
    }
    return WF_OK;
}

/* The overrides of ovr merged into spec ("family:k=v,..."): a key the file
 * gave takes the override's value, a new key is appended (an unknown one is
 * refused by the family's lookup, naming the keys it takes). */
static wf_status merge_overrides(const char *path, const wf_spec *ovr, char *spec, size_t cap)
{
    if (!ovr || ovr->nkv == 0)
        return WF_OK;
    wf_spec s;
    wf_status st = wf_spec_parse(spec, &s);
    if (st != WF_OK)
        return st;
    for (int i = 0; i < ovr->nkv; i++) {
        int k = 0;
        while (k < s.nkv && strcmp(s.key[k], ovr->key[i]) != 0)
            k++;
        if (k == s.nkv) {
            if (s.nkv == WF_SPEC_MAX_KV)
                return wf_errorf(WF_INVAL, "%s: too many overrides", path);
            snprintf(s.key[k], sizeof s.key[k], "%s", ovr->key[i]);
            s.nkv++;
        }
        snprintf(s.val[k], sizeof s.val[k], "%s", ovr->val[i]);
    }
    size_t n = (size_t)snprintf(spec, cap, "%s:", s.name);
    for (int k = 0; k < s.nkv && n < cap; k++)
        n += (size_t)snprintf(spec + n, cap - n, "%s%s=%s", k ? "," : "", s.key[k], s.val[k]);
    if (n >= cap)
        return wf_errorf(WF_INVAL, "%s: model spec too long with its overrides", path);
    return WF_OK;
}

/* DeepSeek-V3's experts and multi-head latent attention. */
static wf_status put_deepseek(const cJSON *j, const char *path, char *spec, size_t cap)
{
    wf_status st;
    if ((st = put_int(j, path, "n_routed_experts", "experts", 1, spec, cap)) ||
        (st = put_int(j, path, "num_experts_per_tok", "top_k", 1, spec, cap)) ||
        (st = put_int(j, path, "moe_intermediate_size", "moe_ffn", 1, spec, cap)) ||
        (st = put_int_from(j, path, "n_shared_experts", "shared_experts", 1, 0, spec, cap)) ||
        (st = put_int_from(j, path, "first_k_dense_replace", "first_dense", 1, 0, spec, cap)) ||
        (st = put_int(j, path, "moe_layer_freq", "moe_freq", 0, spec, cap)) ||
        (st = put_int(j, path, "q_lora_rank", "q_lora", 0, spec, cap)) ||
        (st = put_int(j, path, "kv_lora_rank", "kv_lora", 1, spec, cap)) ||
        (st = put_int(j, path, "qk_nope_head_dim", "qk_nope", 1, spec, cap)) ||
        (st = put_int(j, path, "qk_rope_head_dim", "qk_rope", 1, spec, cap)) ||
        (st = put_int(j, path, "v_head_dim", "v_head", 1, spec, cap)))
        return st;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "scoring_func");
    const char *score = "sigmoid"; /* DeepseekV3Config's default */
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "sigmoid") && strcmp(f->valuestring, "softmax")))
            return wf_errorf(WF_FORMAT, "%s: \"scoring_func\" must be \"sigmoid\" or \"softmax\"", path);
        score = f->valuestring;
    }
    size_t n = strlen(spec);
    snprintf(spec + n, cap - n, ",router=%s", score);
    return WF_OK;
}

static wf_status put_dtype(const cJSON *j, const char *path, char *spec, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "torch_dtype");
    const char *d = "fp32"; /* transformers' default */
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v))
            return wf_errorf(WF_FORMAT, "%s: \"torch_dtype\" must be a string", path);
        if (strcmp(v->valuestring, "bfloat16") == 0)
            d = "bf16";
        else if (strcmp(v->valuestring, "float16") == 0)
            d = "fp16";
        else if (strcmp(v->valuestring, "float32") != 0)
            return wf_errorf(WF_FORMAT, "%s: torch_dtype \"%s\" (expected bfloat16, float16 or float32)", path,
                             v->valuestring);
    }
    size_t n = strlen(spec);
    snprintf(spec + n, cap - n, ",dtype=%s", d);
    return WF_OK;
}

/* Types of the fields read besides the integers (put_int checks those): a
 * mistyped value is refused by name rather than read as absent or false
 * ("tie_word_embeddings": "yes" is not false). One architecture only: with
 * two, which one the file describes is ambiguous. */
static wf_status hf_check_types(const cJSON *j, const char *path)
{
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    if (!cJSON_IsArray(arch) || cJSON_GetArraySize(arch) == 0)
        return wf_errorf(WF_FORMAT, "%s: \"architectures\" must be a list of one name", path);
    for (const cJSON *a = arch->child; a; a = a->next)
        if (!cJSON_IsString(a) || !a->valuestring[0])
            return wf_errorf(WF_FORMAT, "%s: \"architectures\" must be a list of one name", path);
    if (cJSON_GetArraySize(arch) > 1)
        return wf_errorf(WF_INVAL, "%s: \"architectures\" names %d architectures (%s, %s%s): ambiguous, give one",
                         path, cJSON_GetArraySize(arch), arch->child->valuestring, arch->child->next->valuestring,
                         cJSON_GetArraySize(arch) > 2 ? ", ..." : "");
    static const char *const bools[] = {"tie_word_embeddings"};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, bools[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
            return wf_errorf(WF_FORMAT, "%s: \"%s\" must be true or false", path, bools[i]);
    }
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
    if (only && !cJSON_IsNull(only)) {
        int ok = cJSON_IsArray(only);
        for (const cJSON *x = ok ? only->child : NULL; x; x = x->next)
            ok &= cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble == floor(x->valuedouble);
        if (!ok)
            return wf_errorf(WF_FORMAT, "%s: \"mlp_only_layers\" must be a list of layer numbers", path);
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "decoder_sparse_step");
    if (step && !cJSON_IsNull(step) && (!cJSON_IsNumber(step) || step->valuedouble != floor(step->valuedouble)))
        return wf_errorf(WF_FORMAT, "%s: \"decoder_sparse_step\" must be an integer", path);
    return WF_OK;
}

wf_status wf_hf_config_spec(const cJSON *j, const char *path, const wf_spec *ovr, char *spec, size_t cap, char *note,
                           size_t note_cap)
{
    note[0] = 0;
    wf_status tst = hf_check_types(j, path);
    if (tst != WF_OK)
        return tst;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (!cJSON_IsString(a0))
        return wf_errorf(WF_FORMAT, "%s: \"architectures\" must be a list of names", path);
    const char *a = a0->valuestring;
    wf_status st;
    if (strcmp(a, "LlamaForCausalLM") == 0 || strcmp(a, "MistralForCausalLM") == 0 ||
        strcmp(a, "Qwen2ForCausalLM") == 0) {
        if ((st = put_llama(j, path, ovr, spec, cap, note, note_cap)))
            return st;
    } else if (strcmp(a, "MixtralForCausalLM") == 0) {
        /* Experts as wide as intermediate_size, softmax router. */
        if ((st = put_llama(j, path, ovr, spec, cap, note, note_cap)) ||
            (st = put_int(j, path, "num_local_experts", "experts", 1, spec, cap)) ||
            (st = put_int(j, path, "num_experts_per_tok", "top_k", 1, spec, cap)))
            return st;
    } else if (strcmp(a, "Qwen2MoeForCausalLM") == 0) {
        const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (cJSON_IsArray(only) && cJSON_GetArraySize(only) > 0)
            return wf_errorf(WF_INVAL, "%s: \"mlp_only_layers\" is not empty: weft puts experts in every layer "
                                       "(or the first N, first_k_dense_replace style)", path);
        if ((st = need_value(j, path, "decoder_sparse_step", 1, "weft puts experts in every layer")) ||
            (st = put_llama(j, path, ovr, spec, cap, note, note_cap)) ||
            (st = put_int(j, path, "num_experts", "experts", 1, spec, cap)) ||
            (st = put_int(j, path, "num_experts_per_tok", "top_k", 1, spec, cap)) ||
            (st = put_int(j, path, "moe_intermediate_size", "moe_ffn", 1, spec, cap)) ||
            (st = put_int(j, path, "shared_expert_intermediate_size", "shared_ffn", 0, spec, cap)))
            return st;
    } else if (strcmp(a, "DeepseekV3ForCausalLM") == 0) {
        if ((st = put_llama(j, path, ovr, spec, cap, note, note_cap)) || (st = put_deepseek(j, path, spec, cap)))
            return st;
    } else if (strcmp(a, "GPT2LMHeadModel") == 0) {
        snprintf(spec, cap, "gpt:");
        const char *seq = cJSON_GetObjectItemCaseSensitive(j, "n_positions") ? "n_positions" : "n_ctx";
        if ((st = put_int(j, path, "n_layer", "layers", 1, spec, cap)) ||
            (st = put_int(j, path, "n_embd", "hidden", 1, spec, cap)) ||
            (st = put_int(j, path, "n_head", "heads", 1, spec, cap)) ||
            (st = put_int(j, path, "n_inner", "ffn", 0, spec, cap)) ||
            (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
            (st = put_seq(j, path, seq, ovr, spec, cap, note, note_cap)))
            return st;
    } else if (strcmp(a, "BertForMaskedLM") == 0) {
        snprintf(spec, cap, "bert:");
        if ((st = put_int(j, path, "num_hidden_layers", "layers", 1, spec, cap)) ||
            (st = put_int(j, path, "hidden_size", "hidden", 1, spec, cap)) ||
            (st = put_int(j, path, "num_attention_heads", "heads", 1, spec, cap)) ||
            (st = put_int(j, path, "intermediate_size", "ffn", 1, spec, cap)) ||
            (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
            (st = put_seq(j, path, "max_position_embeddings", ovr, spec, cap, note, note_cap)))
            return st;
    } else {
        return wf_errorf(WF_INVAL, "%s: architecture %s is not one weft reads (LlamaForCausalLM, MistralForCausalLM, "
                                   "MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, DeepseekV3ForCausalLM, "
                                   "GPT2LMHeadModel, BertForMaskedLM)", path, a);
    }
    if ((st = put_dtype(j, path, spec, cap)) != WF_OK)
        return st;
    return merge_overrides(path, ovr, spec, cap);
}
