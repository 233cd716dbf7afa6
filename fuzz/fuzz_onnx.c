/* Fuzzes the ONNX importer: the bytes are a ModelProto file, opened and built
 * into a graph at batch 2 as `weft show model.onnx` does. */
#include "fuzz.h"

#include "weft/graph.h"
#include "weft/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_temp(0, ".onnx", data, size);
    if (!path)
        return 0;
    wf_graph g;
    (void)wf_onnx_load(path, 2, &g);
    wf_graph_free(&g);
    wf_clear_error();
    return 0;
}
