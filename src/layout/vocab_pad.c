/* Megatron-LM's padded vocabulary (docs/plan-format.md, "Lowering"): Megatron
 * pads the tokenizer's vocabulary up to a multiple of
 * --make-vocab-size-divisible-by (default 128) times the tensor-parallel size,
 * so that the vocabulary-parallel embedding, logits and loss split evenly
 * (NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553:
 * megatron/training/arguments.py, `--make-vocab-size-divisible-by`, default
 * 128; megatron/core/tokenizers/utils/build_tokenizer.py,
 * vocab_size_with_padding: multiple = make_vocab_size_divisible_by *
 * tensor_model_parallel_size, after = ceil(orig / multiple) * multiple). */
#include "weft/layout.h"

#include <stdio.h>
#include <string.h>

int64_t wf_megatron_padded_vocab(int64_t vocab, int tp, int divisible_by)
{
    if (vocab <= 0 || tp < 1 || divisible_by < 1)
        return vocab;
    int64_t multiple = (int64_t)divisible_by * tp;
    return (vocab + multiple - 1) / multiple * multiple;
}

int wf_megatron_pad_model(const wf_model_config *m, int tp, wf_model_config *out)
{
    *out = *m;
    if (!wf_model_is_transformer(m) || tp <= 1 || m->vocab <= 0 || m->vocab % tp == 0)
        return 0;
    out->vocab = wf_megatron_padded_vocab(m->vocab, tp, WF_MEGATRON_VOCAB_DIVISIBLE_BY);
    /* The padded model by the name its override spells ("bert-base-pretrain:
     * vocab=30720"); a name too long for that keeps the model's. */
    char tail[48];
    int n = snprintf(tail, sizeof tail, "%svocab=%lld", strchr(m->name, ':') ? "," : ":", (long long)out->vocab);
    size_t len = strlen(m->name);
    if (n > 0 && len + (size_t)n < sizeof out->name)
        memcpy(out->name + len, tail, (size_t)n + 1);
    return 1;
}
