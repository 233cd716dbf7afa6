/* Fuzzes the data readers: IDX files (gzip'd or plain, as Fashion-MNIST
 * ships them) and character-level text corpora. Byte 0 picks the reader (even:
 * IDX, odd: text, then one batch drawn from it). */
#include "fuzz.h"

#include <stdio.h>
#include <string.h>

#include "weft/runtime_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0) {
        const char *path = fuzz_write_temp(0, ".gz", data + 1, size - 1);
        wf_idx x;
        if (path && wf_idx_read(path, 0, &x) == WF_OK)
            wf_idx_free(&x);
    } else {
        const char *path = fuzz_write_temp(0, ".txt", data + 1, size - 1);
        char spec[300];
        snprintf(spec, sizeof spec, "text:%s", path ? path : "");
        wf_data_layout l;
        memset(&l, 0, sizeof l);
        l.input_dtype = WF_DTYPE_INT32;
        l.input_ndim = 1;
        l.input_shape[0] = 8;
        l.label_ndim = 1;
        l.label_shape[0] = 8;
        l.classes = WF_TEXT_VOCAB;
        l.vocab = WF_TEXT_VOCAB;
        wf_data *d = NULL;
        if (path && wf_data_open(spec, &l, 1, &d) == WF_OK) {
            int32_t in[2 * 8], lab[2 * 8];
            (void)wf_data_next(d, 2, 0, 1, in, lab);
            wf_data_close(d);
        }
    }
    wf_clear_error();
    return 0;
}
