/* Fuzzes the cluster readers: preset specs with overrides ("dgx-a100:nodes=2")
 * and cluster JSON files. Byte 0 picks the reader (even: spec, odd: file). */
#include "fuzz.h"

#include <stdlib.h>

#include "weft/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text;
    const char *spec = fuzz_spec_or_path(data, size, ".json", &text);
    wf_cluster c;
    if (spec && wf_cluster_lookup(spec, &c) == WF_OK)
        (void)wf_cluster_devices(&c);
    wf_clear_error();
    free(text);
    return 0;
}
