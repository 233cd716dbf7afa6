/* Fuzzes the model readers: zoo specs with overrides ("gpt:layers=2,...") and
 * model JSON files (family or explicit op list), each built into a graph as
 * `weft show` does. Byte 0 picks the reader (even: spec string, odd: JSON
 * file); the rest is the input. */
#include "fuzz.h"

#include <stdlib.h>

#include "weft/graph.h"
#include "weft/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text;
    const char *spec = fuzz_spec_or_path(data, size, ".json", &text);
    wf_model_config m;
    if (spec && wf_model_lookup(spec, &m) == WF_OK) {
        wf_graph g;
        if (wf_model_build(&m, 2, &g) == WF_OK) {
            double params;
            (void)wf_model_params(&m, &params);
        }
        wf_graph_free(&g);
    }
    wf_clear_error();
    free(text);
    return 0;
}
