/* Hugging Face model configs (config.json): the architectures weft builds are
 * read into a zoo family spec ("llama:layers=32,hidden=4096,..."), so the model
 * is the same as the family's. Fields by architecture (docs/model-format.md):
 *
 *   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM -> llama:
 *     num_hidden_layers, hidden_size, num_attention_heads,
 *     num_key_value_heads (default: the heads), intermediate_size, vocab_size,
 *     max_position_embeddings (the sequence), torch_dtype
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
 * Any other architecture, a missing field or a bad value is one line naming it. */
#include "models/models-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
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

/* The llama fields every llama-shaped architecture has. */
static wf_status put_llama(const cJSON *j, const char *path, char *spec, size_t cap)
{
    wf_status st;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    if (cJSON_IsTrue(tie))
        return wf_errorf(WF_INVAL, "%s: tie_word_embeddings=true: weft's llama family has an untied output "
                                   "head", path);
    snprintf(spec, cap, "llama:");
    if ((st = put_int(j, path, "num_hidden_layers", "layers", 1, spec, cap)) ||
        (st = put_int(j, path, "hidden_size", "hidden", 1, spec, cap)) ||
        (st = put_int(j, path, "num_attention_heads", "heads", 1, spec, cap)) ||
        (st = put_int(j, path, "num_key_value_heads", "kv_heads", 0, spec, cap)) ||
        (st = put_int(j, path, "intermediate_size", "ffn", 1, spec, cap)) ||
        (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
        (st = put_int(j, path, "max_position_embeddings", "seq", 1, spec, cap)))
        return st;
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta"); /* absent: LlamaConfig's 10000 */
    if (theta && !cJSON_IsNull(theta)) {
        if (!cJSON_IsNumber(theta) || !(theta->valuedouble >= 1) || theta->valuedouble > 1e12)
            return wf_errorf(WF_FORMAT, "%s: \"rope_theta\" must be a number in [1, 1e12]", path);
        size_t n = strlen(spec);
        snprintf(spec + n, cap - n, ",rope_base=%.17g", theta->valuedouble);
    }
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

wf_status wf_hf_config_spec(const cJSON *j, const char *path, char *spec, size_t cap)
{
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (!cJSON_IsString(a0))
        return wf_errorf(WF_FORMAT, "%s: \"architectures\" must be a list of names", path);
    const char *a = a0->valuestring;
    wf_status st;
    if (strcmp(a, "LlamaForCausalLM") == 0 || strcmp(a, "MistralForCausalLM") == 0 ||
        strcmp(a, "Qwen2ForCausalLM") == 0) {
        if ((st = put_llama(j, path, spec, cap)))
            return st;
    } else if (strcmp(a, "MixtralForCausalLM") == 0) {
        /* Experts as wide as intermediate_size, softmax router. */
        if ((st = put_llama(j, path, spec, cap)) ||
            (st = put_int(j, path, "num_local_experts", "experts", 1, spec, cap)) ||
            (st = put_int(j, path, "num_experts_per_tok", "top_k", 1, spec, cap)))
            return st;
    } else if (strcmp(a, "Qwen2MoeForCausalLM") == 0) {
        const cJSON *only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (cJSON_IsArray(only) && cJSON_GetArraySize(only) > 0)
            return wf_errorf(WF_INVAL, "%s: \"mlp_only_layers\" is not empty: weft puts experts in every layer "
                                       "(or the first N, first_k_dense_replace style)", path);
        if ((st = need_value(j, path, "decoder_sparse_step", 1, "weft puts experts in every layer")) ||
            (st = put_llama(j, path, spec, cap)) ||
            (st = put_int(j, path, "num_experts", "experts", 1, spec, cap)) ||
            (st = put_int(j, path, "num_experts_per_tok", "top_k", 1, spec, cap)) ||
            (st = put_int(j, path, "moe_intermediate_size", "moe_ffn", 1, spec, cap)) ||
            (st = put_int(j, path, "shared_expert_intermediate_size", "shared_ffn", 0, spec, cap)))
            return st;
    } else if (strcmp(a, "DeepseekV3ForCausalLM") == 0) {
        if ((st = put_llama(j, path, spec, cap)) || (st = put_deepseek(j, path, spec, cap)))
            return st;
    } else if (strcmp(a, "GPT2LMHeadModel") == 0) {
        snprintf(spec, cap, "gpt:");
        const char *seq = cJSON_GetObjectItemCaseSensitive(j, "n_positions") ? "n_positions" : "n_ctx";
        if ((st = put_int(j, path, "n_layer", "layers", 1, spec, cap)) ||
            (st = put_int(j, path, "n_embd", "hidden", 1, spec, cap)) ||
            (st = put_int(j, path, "n_head", "heads", 1, spec, cap)) ||
            (st = put_int(j, path, "n_inner", "ffn", 0, spec, cap)) ||
            (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
            (st = put_int(j, path, seq, "seq", 1, spec, cap)))
            return st;
    } else if (strcmp(a, "BertForMaskedLM") == 0) {
        snprintf(spec, cap, "bert:");
        if ((st = put_int(j, path, "num_hidden_layers", "layers", 1, spec, cap)) ||
            (st = put_int(j, path, "hidden_size", "hidden", 1, spec, cap)) ||
            (st = put_int(j, path, "num_attention_heads", "heads", 1, spec, cap)) ||
            (st = put_int(j, path, "intermediate_size", "ffn", 1, spec, cap)) ||
            (st = put_int(j, path, "vocab_size", "vocab", 1, spec, cap)) ||
            (st = put_int(j, path, "max_position_embeddings", "seq", 1, spec, cap)))
            return st;
    } else {
        return wf_errorf(WF_INVAL, "%s: architecture %s is not one weft reads (LlamaForCausalLM, MistralForCausalLM, "
                                   "MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, DeepseekV3ForCausalLM, "
                                   "GPT2LMHeadModel, BertForMaskedLM)", path, a);
    }
    return put_dtype(j, path, spec, cap);
}
