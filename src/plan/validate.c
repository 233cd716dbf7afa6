/* weft plan validation: whether a plan can run a model on a cluster with a
 * global batch. Each failed rule is WF_INVAL with a one-line message naming
 * the values that disagree, so `weft estimate` can print it as is.
 *
 * Rules (Megatron-LM's, where they come from there): tensor parallelism
 * divides heads, key/value heads, hidden and ffn widths; layers divide into
 * pp x vpp equal chunks; the batch divides into mbs x dp; dp x tp x pp devices
 * exist in the cluster; interleaving needs a pipeline, the 1F1B schedule and a
 * micro-batch count divisible by pp; sequence parallelism needs tp > 1;
 * non-transformer models take data and pipeline parallelism only. */
#include "weft/plan.h"

#include <string.h>

wf_status wf_plan_validate(const wf_plan *p, const wf_model_config *m, const wf_cluster *c,
                           int64_t batch)
{
    if (p->dp < 1 || p->tp < 1 || p->pp < 1 || p->mbs < 1 || p->vpp < 1)
        return wf_errorf(WF_INVAL, "plan degrees must be >= 1 (dp=%d, tp=%d, pp=%d, mbs=%d, vpp=%d)",
                         p->dp, p->tp, p->pp, p->mbs, p->vpp);
    if (p->zero < 0 || p->zero > 3)
        return wf_errorf(WF_INVAL, "zero=%d: expected 0..3", p->zero);
    if ((p->sp != 0 && p->sp != 1) || (p->overlap != 0 && p->overlap != 1))
        return wf_errorf(WF_INVAL, "sp=%d and overlap=%d must be 0 or 1", p->sp, p->overlap);
    if (batch < 1)
        return wf_errorf(WF_INVAL, "batch=%lld must be >= 1", (long long)batch);
    if (p->cp < 0)
        return wf_errorf(WF_INVAL, "cp=%d: expected >= 1", p->cp);
    int64_t devices = wf_plan_devices(p), have = wf_cluster_devices(c);
    if (devices > have && p->dap > 1)
        return wf_errorf(WF_INVAL, "plan needs dp*tp*pp*dap = %d*%d*%d*%d = %lld devices, cluster '%s' has %lld",
                         p->dp, p->tp, p->pp, p->dap, (long long)devices, c->name, (long long)have);
    if (devices > have && p->cp > 1)
        return wf_errorf(WF_INVAL, "plan needs dp*tp*pp*cp = %d*%d*%d*%d = %lld devices, cluster '%s' has %lld",
                         p->dp, p->tp, p->pp, p->cp, (long long)devices, c->name, (long long)have);
    if (devices > have)
        return wf_errorf(WF_INVAL, "plan needs dp*tp*pp = %d*%d*%d = %lld devices, cluster '%s' has %lld",
                         p->dp, p->tp, p->pp, (long long)devices, c->name, (long long)have);
    /* Expert parallelism (Megatron-Core's folding): the expert layers lay
     * etp x ep x expert-dp over the same tp x cp x dp ranks. */
    if (p->ep < 0 || p->etp < 0)
        return wf_errorf(WF_INVAL, "ep=%d, etp=%d: expected >= 1", p->ep, p->etp);
    if (p->epo && p->ep <= 1)
        return wf_errorf(WF_INVAL, "epo=1 overlaps the experts' all-to-alls, which need ep > 1 (ep=%d)", p->ep);
    if (p->epo && p->sw != WF_SW_MEGATRON_CORE)
        return wf_errorf(WF_INVAL, "epo=1: sw=%s has no overlapped expert all-to-all (megatron-core has)", wf_sw_name(p->sw));
    if (p->ep > 1 || p->etp > 0) {
        int64_t etp = p->etp > 0 ? p->etp : p->tp, ranks = (int64_t)p->tp * (p->cp > 1 ? p->cp : 1) * p->dp;
        if (!wf_model_is_moe(m))
            return wf_errorf(WF_INVAL, "ep=%d, etp=%lld: model '%s' has no experts", p->ep, (long long)etp, m->name);
        if (m->experts % p->ep != 0)
            return wf_errorf(WF_INVAL, "ep=%d does not divide the %lld experts of model '%s'", p->ep,
                             (long long)m->experts, m->name);
        if (ranks % ((int64_t)p->ep * etp) != 0)
            return wf_errorf(WF_INVAL, "ep x etp = %d x %lld does not divide tp x cp x dp = %lld (the ranks a "
                                       "stage's expert layers are laid over)", p->ep, (long long)etp, (long long)ranks);
        if (m->moe_ffn > 0 && m->moe_ffn % etp != 0)
            return wf_errorf(WF_INVAL, "etp=%lld does not divide the experts' ffn=%lld of model '%s'", (long long)etp,
                             (long long)m->moe_ffn, m->name);
    }
    /* What each framework profile can run (docs/cost-model.md). */
    const char *sw = wf_sw_name(p->sw);
    if (p->fp8 && (p->sw == WF_SW_MEGATRON_2021 || p->sw == WF_SW_MEGATRON_2022))
        return wf_errorf(WF_INVAL, "fp8=1: sw=%s has no FP8 (Transformer Engine came with Megatron-Core; "
                                   "use sw=megatron-core)", sw);
    if (p->fp8 && !(c->dev.fp8_flops > 0))
        return wf_errorf(WF_INVAL, "fp8=1: device %s of cluster '%s' has no FP8 unit (fp8_flops=0)",
                         c->dev.name, c->name);
    if (p->fp8 && m->dtype == WF_DTYPE_FP32)
        return wf_errorf(WF_INVAL, "fp8=1: model '%s' trains in fp32; FP8 products come with bf16 or fp16 "
                                   "mixed precision (dtype=bf16)", m->name);
    if (p->cp > 1 && p->sw != WF_SW_MEGATRON_CORE && p->sw != WF_SW_FSDP)
        return wf_errorf(WF_INVAL, "cp=%d: sw=%s has no context parallelism (megatron-core and fsdp do)",
                         p->cp, sw);
    if (p->zero >= 1 && p->sw == WF_SW_MEGATRON_2021)
        return wf_errorf(WF_INVAL, "zero=%d: sw=megatron-2021 has no optimizer sharding (megatron-2022 has "
                                   "zero=1, megatron-core, deepspeed and fsdp up to 3)", p->zero);
    if (p->zero >= 2 && p->sw == WF_SW_MEGATRON_2022)
        return wf_errorf(WF_INVAL, "zero=%d: sw=megatron-2022 shards the optimizer state only (zero=1, its "
                                   "distributed optimizer)", p->zero);
    if (p->sw == WF_SW_DEEPSPEED && p->pp > 1 && p->zero >= 2)
        return wf_errorf(WF_INVAL, "zero=%d with pp=%d: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only",
                         p->zero, p->pp);
    if (p->sw == WF_SW_FSDP && p->vpp > 1)
        return wf_errorf(WF_INVAL, "vpp=%d: the fsdp profile models FSDP with a plain 1F1B or GPipe pipeline, "
                                   "not an interleaved one (vpp=1)", p->vpp);
    /* Plain PyTorch is DDP over whole-model replicas (torchtitan, sw=fsdp,
     * is PyTorch with tensor and pipeline parallelism and sharding). */
    if (p->sw == WF_SW_PYTORCH && (p->tp > 1 || p->pp > 1 || p->cp > 1 || p->ep > 1))
        return wf_errorf(WF_INVAL, "tp=%d, pp=%d, cp=%d, ep=%d: sw=pytorch is data parallelism alone (DDP); "
                                   "use sw=fsdp (torchtitan) or sw=megatron-core for model parallelism",
                         p->tp, p->pp, p->cp, p->ep);
    if (p->sw == WF_SW_PYTORCH && p->zero > 0)
        return wf_errorf(WF_INVAL, "zero=%d: sw=pytorch keeps whole optimizer states (DDP); use sw=fsdp to shard",
                         p->zero);
    if (p->sw == WF_SW_PYTORCH && p->fp8)
        return wf_errorf(WF_INVAL, "fp8=1: sw=pytorch runs torch.autocast, which has no FP8 products "
                                   "(sw=megatron-core runs them through Transformer Engine)");
    if (p->sw == WF_SW_DEEPSPEED && p->vpp > 1)
        return wf_errorf(WF_INVAL, "vpp=%d: DeepSpeed's pipeline engine has no interleaved schedule (vpp=1)",
                         p->vpp);
    int64_t per_step = (int64_t)p->mbs * p->dp;
    if (batch % per_step != 0)
        return wf_errorf(WF_INVAL, "batch=%lld is not divisible by mbs*dp = %d*%d = %lld",
                         (long long)batch, p->mbs, p->dp, (long long)per_step);
    int64_t micro = batch / per_step;
    if (p->sp && p->tp < 2)
        return wf_errorf(WF_INVAL, "sp=1 (sequence parallelism) needs tp > 1 (tp=%d)", p->tp);
    if (p->vpp > 1) {
        if (p->pp < 2)
            return wf_errorf(WF_INVAL, "vpp=%d (interleaved pipeline) needs pp > 1 (pp=%d)", p->vpp,
                             p->pp);
        if (p->pipe != WF_PIPE_1F1B)
            return wf_errorf(WF_INVAL, "vpp=%d needs pipe=1f1b (interleaved 1F1B), not pipe=%s",
                             p->vpp, wf_pipe_name(p->pipe));
        if (micro % p->pp != 0)
            return wf_errorf(WF_INVAL, "vpp=%d: micro-batches per pipeline batch/(mbs*dp) = %lld must "
                                       "be divisible by pp=%d", p->vpp, (long long)micro, p->pp);
    }
    if (p->rc_n > 0 && p->rc_n != p->pp)
        return wf_errorf(WF_INVAL, "recompute per stage: %d values for pp=%d stages", p->rc_n, p->pp);
    if (p->nf1b && m->recycle < 1)
        return wf_errorf(WF_INVAL, "nf1b=1: model '%s' has no recycling (recycle=0): there are no forwards "
                                   "without gradient to schedule (nf1b=0)", m->name);
    if (p->dap > 1) {
        /* FastFold's DAP shards the Evoformer's MSA along its sequences and
         * residues and the pair along its residues (no padding here: the
         * axes must divide). */
        if (m->family != WF_FAMILY_ALPHAFOLD)
            return wf_errorf(WF_INVAL, "dap=%d: model '%s' is not AlphaFold2-shaped; Dynamic Axial Parallelism "
                                       "shards the Evoformer's MSA and pair representations (dap=1)",
                             p->dap, m->name);
        if (m->seq % p->dap != 0 || m->msa % p->dap != 0)
            return wf_errorf(WF_INVAL, "dap=%d must divide the residues (seq=%lld) and the MSA sequences (msa=%lld)",
                             p->dap, (long long)m->seq, (long long)m->msa);
    }
    if (p->coshard > 1) {
        if (wf_model_is_transformer(m))
            return wf_errorf(WF_INVAL, "coshard=%d: model '%s' is a transformer; co-shard runs the ops of "
                                       "other models (Swin, AlphaFold2, CNNs) in pieces (coshard=1)",
                             p->coshard, m->name);
        /* Per-op co-shard (coshard=K@PATTERN) replays each chosen op's own
         * pieces, so it needs no recomputation of the rest. */
        if (p->recompute != WF_RECOMPUTE_FULL && !wf_plan_coshard_per_op(p))
            return wf_errorf(WF_INVAL, "coshard=%d needs recompute=full: each piece's forward is replayed "
                                       "just before its backward (or co-shard chosen ops only: coshard=%d@PATTERN)",
                             p->coshard, p->coshard);
    }
    if (!wf_model_is_transformer(m)) {
        if (p->rc_n > 0 || p->rc_layers > 0)
            return wf_errorf(WF_INVAL, "recompute per stage or rc_layers: model '%s' is not a transformer; "
                                       "it has no repeated layers to recompute by stage (one recompute value)",
                             m->name);
        if (p->stage_n > 0)
            return wf_errorf(WF_INVAL, "stages=: model '%s' is not a transformer; its pipeline stages are cut by "
                                       "time, not by layers (leave stages out)", m->name);
        if (p->interlace)
            return wf_errorf(WF_INVAL, "interlace=1: model '%s' is not a dense transformer (the interlaced pipeline "
                                       "splits a transformer's embedding and head over every stage)", m->name);
        if (p->cp > 1)
            return wf_errorf(WF_INVAL, "cp=%d: model '%s' is not a transformer; context parallelism splits "
                                       "a sequence (cp=1)", p->cp, m->name);
        if (p->tp != 1)
            return wf_errorf(WF_INVAL, "tp=%d: model '%s' is not a transformer; it takes data and "
                                       "pipeline parallelism only (tp=1)", p->tp, m->name);
        if (p->vpp != 1)
            return wf_errorf(WF_INVAL, "vpp=%d: model '%s' is not a transformer; interleaving needs "
                                       "repeated layers (vpp=1)", p->vpp, m->name);
        if (p->recompute == WF_RECOMPUTE_SELECTIVE)
            return wf_errorf(WF_INVAL, "recompute=selective recomputes attention, which model '%s' "
                                       "does not have (use none or full)", m->name);
        return WF_OK;
    }
    if (m->heads % p->tp != 0)
        return wf_errorf(WF_INVAL, "tp=%d does not divide heads=%lld of model '%s'", p->tp,
                         (long long)m->heads, m->name);
    if (m->kv_heads > 0 && m->kv_heads % p->tp != 0)
        return wf_errorf(WF_INVAL, "tp=%d does not divide kv_heads=%lld of model '%s'", p->tp,
                         (long long)m->kv_heads, m->name);
    if (m->hidden % p->tp != 0)
        return wf_errorf(WF_INVAL, "tp=%d does not divide hidden=%lld of model '%s'", p->tp,
                         (long long)m->hidden, m->name);
    if (m->ffn > 0 && m->ffn % p->tp != 0)
        return wf_errorf(WF_INVAL, "tp=%d does not divide ffn=%lld of model '%s'", p->tp,
                         (long long)m->ffn, m->name);
    if (p->cp > 1 && m->seq % (2 * (int64_t)p->cp) != 0)
        return wf_errorf(WF_INVAL, "cp=%d: seq=%lld of model '%s' must divide into 2 x cp chunks (the causal "
                                   "load balancing)", p->cp, (long long)m->seq, m->name);
    if (p->sp && m->seq % p->tp != 0)
        return wf_errorf(WF_INVAL, "sp=1: tp=%d does not divide seq=%lld of model '%s'", p->tp,
                         (long long)m->seq, m->name);
    if (p->interlace) {
        /* The interlaced pipeline (docs/planner.md): the layers split evenly
         * over pp stages of one chunk each, 1F1B, the embedding and the head
         * tensor-parallel over the tp x pp ranks of a pipeline. */
        if (!wf_model_is_transformer(m) || wf_model_is_moe(m))
            return wf_errorf(WF_INVAL, "interlace=1: model '%s' is not a dense transformer (the interlaced pipeline "
                                       "splits a transformer's embedding and head over every stage)", m->name);
        if (p->pp < 2)
            return wf_errorf(WF_INVAL, "interlace=1 needs a pipeline (pp >= 2, pp=%d)", p->pp);
        if (p->stage_n > 0)
            return wf_errorf(WF_INVAL, "interlace=1 with stages=: the interlaced pipeline splits the layers evenly "
                                       "(its stages hold no embedding or head to balance)");
        if (p->vpp != 1)
            return wf_errorf(WF_INVAL, "interlace=1 with vpp=%d: the interlaced pipeline runs one model chunk per "
                                       "stage (vpp=1)", p->vpp);
        if (p->pipe != WF_PIPE_1F1B)
            return wf_errorf(WF_INVAL, "interlace=1 with pipe=%s: the interlaced pipeline is 1F1B's (pipe=1f1b)",
                             wf_pipe_name(p->pipe));
        if (p->cp > 1 || p->ep > 1)
            return wf_errorf(WF_INVAL, "interlace=1 with %s=%d: not modelled (cp=1, ep=1)", p->cp > 1 ? "cp" : "ep",
                             p->cp > 1 ? p->cp : p->ep);
        if (p->zero >= 3)
            return wf_errorf(WF_INVAL, "interlace=1 with zero=3: not modelled (zero 0, 1 or 2)");
        if (p->comm.kind == WF_COMM_BYTESCHEDULER)
            return wf_errorf(WF_INVAL, "interlace=1 with comm=bytescheduler: not modelled (its gradients carried into "
                                       "the next forward meet the embedding's forwards that open the iteration)");
        if (p->rc_n > 0 || p->rc_layers > 0)
            return wf_errorf(WF_INVAL, "interlace=1 with %s: the interlaced pipeline takes one recompute value for "
                                       "every layer", p->rc_n > 0 ? "recompute per stage" : "rc_layers");
        int64_t all = (int64_t)p->tp * p->pp;
        if (m->vocab % all != 0)
            return wf_errorf(WF_INVAL, "interlace=1: tp x pp = %lld does not divide vocab=%lld of model '%s' (the "
                                       "embedding and the head split the vocabulary over every device of a pipeline)",
                             (long long)all, (long long)m->vocab, m->name);
        if (p->sp && m->seq % all != 0)
            return wf_errorf(WF_INVAL, "interlace=1 with sp=1: tp x pp = %lld does not divide seq=%lld of model '%s'",
                             (long long)all, (long long)m->seq, m->name);
    }
    if (p->stage_n > 0) {
        /* Uneven stages: one chunk per stage, the layers all placed. */
        if (p->stage_n != p->pp)
            return wf_errorf(WF_INVAL, "stages=: %d stages for pp=%d", p->stage_n, p->pp);
        if (p->vpp != 1)
            return wf_errorf(WF_INVAL, "stages= with vpp=%d: uneven stages with interleaving are not modelled (uneven stages run one "
                                       "model chunk per stage, vpp=1)",
                             p->vpp);
        int64_t sum = 0;
        for (int s = 0; s < p->stage_n; s++) {
            if (p->stage_layers[s] < 1)
                return wf_errorf(WF_INVAL, "stages=: stage %d has %d layers (at least 1)", s, p->stage_layers[s]);
            sum += p->stage_layers[s];
        }
        /* The estimate and the simulator agree on uneven stages that
         * recompute alike; a per-stage mix is not modelled on them yet. */
        if (p->rc_n > 0 || p->rc_layers > 0)
            return wf_errorf(WF_INVAL, "stages= with %s: uneven stages take one recompute value for every layer "
                                       "(none, selective or full)",
                             p->rc_n > 0 ? "recompute per stage" : "rc_layers (the block method)");
        if (sum != m->layers)
            return wf_errorf(WF_INVAL, "stages= places %lld layers, model '%s' has %lld", (long long)sum, m->name,
                             (long long)m->layers);
        return WF_OK;
    }
    int64_t chunks = (int64_t)p->pp * p->vpp;
    if (m->layers % chunks != 0)
        return wf_errorf(WF_INVAL, "layers=%lld of model '%s' is not divisible by pp*vpp = %d*%d = %lld",
                         (long long)m->layers, m->name, p->pp, p->vpp, (long long)chunks);
    int64_t per_chunk = m->layers / chunks;
    for (int s = 0; s < (p->rc_n > 0 ? p->rc_n : 1); s++) {
        int n = p->rc_n > 0 ? p->rc_layers_at[s] : p->rc_layers;
        if (n > per_chunk)
            return wf_errorf(WF_INVAL, "rc_layers=%d: a model chunk of '%s' holds %lld layers (layers / (pp x vpp) "
                                       "= %lld / %lld)", n, m->name, (long long)per_chunk, (long long)m->layers,
                             (long long)chunks);
    }
    return WF_OK;
}

/* ---- rank groups (plan.h): Megatron-Core's RankGenerator, order tp-cp-ep-dp-pp ---- */

void wf_rank_generator(const int64_t size[WF_AXIS_COUNT], wf_axis_ranks out[WF_AXIS_COUNT])
{
    int64_t stride = 1;
    for (int a = 0; a < WF_AXIS_COUNT; a++) {
        out[a].size = size[a] >= 1 ? size[a] : 1;
        out[a].stride = stride;
        stride *= out[a].size;
    }
}

void wf_rank_axes_dense(int64_t tp, int64_t cp, int64_t dp, int64_t pp, wf_axis_ranks out[WF_AXIS_COUNT])
{
    const int64_t size[WF_AXIS_COUNT] = {tp, cp, 1, dp, pp};
    wf_rank_generator(size, out);
}

void wf_rank_axes_expert(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep, int64_t etp,
                         wf_axis_ranks out[WF_AXIS_COUNT])
{
    int64_t epx = (ep >= 1 ? ep : 1) * (etp >= 1 ? etp : 1);
    int64_t edp = (tp >= 1 ? tp : 1) * (cp >= 1 ? cp : 1) * (dp >= 1 ? dp : 1) / epx;
    const int64_t size[WF_AXIS_COUNT] = {etp, 1, ep, edp >= 1 ? edp : 1, pp};
    wf_rank_generator(size, out);
}

wf_axis_ranks wf_rank_axes_join(const wf_axis_ranks ax[WF_AXIS_COUNT], wf_axis lo, wf_axis hi)
{
    wf_axis_ranks j = {1, ax[lo].stride};
    for (int a = lo; a <= (int)hi; a++)
        j.size *= ax[a].size;
    return j;
}

void wf_rank_axis_split(wf_axis_ranks a, int64_t inner, wf_axis_ranks out[2])
{
    if (inner < 1)
        inner = 1;
    out[1].size = inner;
    out[1].stride = a.stride;
    out[0].size = a.size / inner >= 1 ? a.size / inner : 1;
    out[0].stride = a.stride * inner;
}

int64_t wf_rank_coord(wf_axis_ranks a, int64_t r)
{
    return r / a.stride % a.size;
}

int64_t wf_rank_group_first(wf_axis_ranks a, int64_t r)
{
    return r - wf_rank_coord(a, r) * a.stride;
}
