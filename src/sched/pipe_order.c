/* Pipeline schedules as orderings: the sequence of (forward|backward,
 * micro-batch, chunk) one stage executes. The simulator chains them on the
 * stage's compute stream; the runtime executes them in this order.
 *
 * GPipe: all forwards, then all backwards (the last micro-batch first, as in
 * the GPipe paper). 1F1B (PipeDream-Flush): stage i of p runs min(p-i-1, m)
 * warm-up forwards, then forward/backward pairs, then the remaining
 * backwards, so at most min(p-i, m) micro-batches are in flight. Interleaved
 * 1F1B follows Megatron-LM's schedule (Narayanan et al., SC21): the k-th
 * forward of a stage is micro-batch (k / (p v)) p + k mod p of chunk
 * (k mod p v) / p, backwards walk the chunks in reverse, warm-up is
 * (p-i-1)*2 + (v-1)*p forwards (capped at m v). */
#include "weft/sched.h"

const char *wf_sched_pipe_name(wf_pipe_kind k)
{
    switch (k) {
    case WF_PIPE_1F1B:
        return "1f1b";
    case WF_PIPE_GPIPE:
        return "gpipe";
    }
    return "?";
}

/* The k-th forward (or backward) of a stage under the interleaved mapping;
 * with v = 1 it is micro-batch k of chunk 0. */
static wf_pipe_op interleaved_op(int k, int p, int v, int bwd)
{
    int in_group = k % (p * v);
    int chunk = in_group / p;
    if (bwd)
        chunk = v - 1 - chunk;
    wf_pipe_op op = {bwd, (k / (p * v)) * p + k % p, chunk};
    return op;
}

wf_status wf_pipe_order(wf_pipe_kind kind, int p, int m, int v, int stage, wf_pipe_op *out, int cap, int *n)
{
    if (p < 1)
        return wf_errorf(WF_INVAL, "pipeline: p=%d stages must be >= 1", p);
    if (m < 1)
        return wf_errorf(WF_INVAL, "pipeline: m=%d micro-batches must be >= 1", m);
    if (v < 1)
        return wf_errorf(WF_INVAL, "pipeline: v=%d chunks must be >= 1", v);
    if (stage < 0 || stage >= p)
        return wf_errorf(WF_INVAL, "pipeline: stage=%d must be in 0..%d", stage, p - 1);
    if (kind != WF_PIPE_1F1B && kind != WF_PIPE_GPIPE)
        return wf_errorf(WF_INVAL, "pipeline: schedule kind %d unknown", (int)kind);
    if (v > 1 && m % p != 0)
        return wf_errorf(WF_INVAL, "pipeline: interleaving (v=%d) needs m=%d a multiple of p=%d", v, m, p);
    if ((int64_t)2 * m * v > cap)
        return wf_errorf(WF_INVAL, "pipeline: %lld ops do not fit the %d given", (long long)2 * m * v, cap);
    int total = m * v;
    int k = 0;
    if (kind == WF_PIPE_GPIPE) {
        if (v == 1) {
            for (int i = 0; i < m; i++)
                out[k++] = (wf_pipe_op){0, i, 0};
            for (int i = m - 1; i >= 0; i--)
                out[k++] = (wf_pipe_op){1, i, 0};
        } else {
            for (int i = 0; i < total; i++)
                out[k++] = interleaved_op(i, p, v, 0);
            for (int i = 0; i < total; i++)
                out[k++] = interleaved_op(i, p, v, 1);
        }
        *n = k;
        return WF_OK;
    }
    int warmup;
    if (v == 1)
        warmup = p - stage - 1;
    else
        warmup = (p - stage - 1) * 2 + (v - 1) * p;
    if (warmup > total)
        warmup = total;
    int steady = total - warmup;
    int f = 0, b = 0;
    for (; f < warmup; f++)
        out[k++] = interleaved_op(f, p, v, 0);
    for (int i = 0; i < steady; i++) {
        out[k++] = interleaved_op(f++, p, v, 0);
        out[k++] = interleaved_op(b++, p, v, 1);
    }
    while (b < total)
        out[k++] = interleaved_op(b++, p, v, 1);
    *n = k;
    return WF_OK;
}

int wf_pipe_peak_inflight(const wf_pipe_op *ops, int n)
{
    int cur = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        cur += ops[i].bwd ? -1 : 1;
        if (cur > peak)
            peak = cur;
    }
    return peak;
}
