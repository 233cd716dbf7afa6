/* Hugging Face model configs (config.json): the architectures weft builds are
 * read into a zoo family spec ("llama:layers=32,hidden=4096,..."), so the model
 * is the same as the family's. Fields by architecture (docs/model-format.md):
 *
 *   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM -> llama:
 *     num_hidden_layers, hidden_size, num_attention_heads,
 *     num_key_value_heads (default: the heads), intermediate_size, vocab_size,
 *     max_position_embeddings (the sequence), torch_dtype
 *   GPT2LMHeadModel -> gpt: n_layer, n_embd, n_head, vocab_size, n_positions
 *     (or n_ctx), n_inner (default 4 x n_embd), torch_dtype
 *   BertForMaskedLM -> bert: num_hidden_layers, hidden_size,
 *     num_attention_heads, intermediate_size, vocab_size,
 *     max_position_embeddings, torch_dtype
 *
 * Mixture-of-experts architectures (MixtralForCausalLM, Qwen2MoeForCausalLM,
 * DeepseekV3ForCausalLM) are named and refused: weft has no expert layers yet.
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

/* key=value of an integer field into the spec; required fields must be there. */
static wf_status put_int(const cJSON *j, const char *path, const char *field, const char *key, int required,
                         char *spec, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", path, field);
        return WF_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 9e15)
        return wf_errorf(WF_FORMAT, "%s: \"%s\" must be a positive integer", path, field);
    size_t n = strlen(spec);
    snprintf(spec + n, cap - n, "%s%s=%lld", spec[n - 1] == ':' ? "" : ",", key, (long long)v->valuedouble);
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
    static const char *const moe[] = {"MixtralForCausalLM", "Qwen2MoeForCausalLM", "DeepseekV3ForCausalLM"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if (strcmp(a, moe[i]) == 0)
            return wf_errorf(WF_INVAL, "%s: architecture %s is a mixture of experts, and weft has no expert layers "
                                       "yet", path, a);
    wf_status st;
    if (strcmp(a, "LlamaForCausalLM") == 0 || strcmp(a, "MistralForCausalLM") == 0 ||
        strcmp(a, "Qwen2ForCausalLM") == 0) {
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
                                   "Qwen2ForCausalLM, GPT2LMHeadModel, BertForMaskedLM)", path, a);
    }
    return put_dtype(j, path, spec, cap);
}
