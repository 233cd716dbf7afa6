/* Fuzzes `weft export`: a plan string parsed, validated against a model and
 * cluster as the CLI does, then written by one of the four framework writers
 * (src/cli/export*.c) to a scratch stream. Byte 0 picks the format (low two
 * bits), the model (next two) and the batch (the rest); the remaining bytes
 * are the plan. A writer may refuse the plan; it must never crash or print a
 * setting out of range. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "weft/cost.h"
#include "weft/models.h"
#include "weft/plan.h"

static const char *const FORMATS[] = {"megatron", "deepspeed", "torchtitan", "fsdp"};
static const char *const MODELS[] = {"gpt-tiny", "moe-tiny", "llama:layers=8,hidden=512,heads=8,kv_heads=2,ffn=1024",
                                     "mlp-tiny"};
static const int64_t BATCHES[] = {1, 8, 16, 64, 512, 3, 1024, 4096};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static FILE *sink;
    if (!sink)
        sink = fopen("/dev/null", "w");
    char *text = fuzz_strndup(data + 1, size - 1);
    wf_plan p;
    wf_model_config m;
    wf_cluster c;
    int64_t batch = BATCHES[(data[0] >> 4) % 8];
    if (text && sink && wf_plan_parse(text, &p) == WF_OK && wf_model_lookup(MODELS[(data[0] >> 2) % 4], &m) == WF_OK &&
        wf_cluster_lookup("dgx-a100:nodes=4", &c) == WF_OK && wf_plan_validate(&p, &m, &c, batch) == WF_OK)
        (void)wf_cli_export(sink, FORMATS[data[0] % 4], &p, &m, &c, batch);
    wf_clear_error();
    free(text);
    return 0;
}
