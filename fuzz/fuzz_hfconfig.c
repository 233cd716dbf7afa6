/* Fuzzes the Hugging Face config.json reader (src/models/hf_config.c) as
 * `weft show --model config.json` reaches it: the file is looked up as a model
 * and built into a graph. Byte 0 picks an architecture weft reads; when the
 * rest parses as a JSON object without "architectures", that one is added, so
 * mutations reach every architecture's fields rather than stopping at the
 * first check; a layer count above 4 is cut to 4 (the reader is fuzzed, not
 * the graph builder). Any other input is passed through unchanged. */
#include "fuzz.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "weft/graph.h"
#include "weft/models.h"

static const char *const ARCHS[] = {"LlamaForCausalLM",   "MistralForCausalLM",    "Qwen2ForCausalLM",
                                    "MixtralForCausalLM", "Qwen2MoeForCausalLM",   "DeepseekV3ForCausalLM",
                                    "GPT2LMHeadModel",    "BertForMaskedLM"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    char *owned = NULL;
    cJSON *j = cJSON_ParseWithLength((const char *)body, n);
    int changed = 0;
    if (cJSON_IsObject(j) && !cJSON_GetObjectItemCaseSensitive(j, "architectures")) {
        cJSON *a = cJSON_AddArrayToObject(j, "architectures");
        if (a)
            cJSON_AddItemToArray(a, cJSON_CreateString(ARCHS[data[0] % (sizeof ARCHS / sizeof ARCHS[0])]));
        changed = 1;
    }
    /* At most 4 layers: the reader is what is fuzzed, and building a
     * 61-layer graph per input under the sanitizers ran 1 input a second. */
    static const char *const layer_keys[] = {"num_hidden_layers", "n_layer"};
    for (int k = 0; k < 2 && cJSON_IsObject(j); k++) {
        cJSON *l = cJSON_GetObjectItemCaseSensitive(j, layer_keys[k]);
        if (cJSON_IsNumber(l) && l->valuedouble > 4) {
            cJSON_SetNumberValue(l, 4);
            changed = 1;
        }
    }
    if (changed) {
        owned = cJSON_PrintUnformatted(j);
        if (owned) {
            body = (const uint8_t *)owned;
            n = strlen(owned);
        }
    }
    cJSON_Delete(j);
    const char *path = fuzz_write_temp(0, ".json", body, n);
    wf_model_config m;
    if (path && wf_model_lookup(path, &m) == WF_OK) {
        wf_graph g;
        if (wf_model_build(&m, 1, &g) == WF_OK) {
            double params;
            (void)wf_model_params(&m, &params);
        }
        wf_graph_free(&g);
    }
    wf_clear_error();
    free(owned);
    return 0;
}
