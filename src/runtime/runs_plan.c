/* What the runtime executes: one table of the plans each engine refuses
 * (weft/runtime.h: wf_runtime_engine_of, wf_runtime_engine_check,
 * wf_runtime_schedule_check, wf_runtime_runs_plan).
 *
 * Each row names the engine it belongs to, the plans it refuses and the one
 * line that says why. The engines check their rows where they read the plan
 * (the replica engine, wf_pipe_check, the SPMD engine's reading of a
 * whole-model plan, wf_dist_create for the schedule's rows), and
 * wf_runtime_runs_plan asks the same rows before any run, so `--plan auto`
 * never picks a plan that `weft train` refuses. Rows that need the model are
 * skipped when none is given (a search's candidates). The rank count, the
 * batch and the model's shapes are the engines' own checks. */
#include "weft/runtime.h"

#include <stdio.h>
#include <string.h>

/* A row: does it refuse plan p (on model m, NULL: unknown)? It then writes
 * the reason into msg. */
typedef int (*refuses_fn)(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap);

typedef struct {
    wf_engine_kind engine;
    int needs_model;
    refuses_fn refuses;
} rule;

/* ---- the replica engine (one replica per rank, experts over ep ranks) ---- */

static int r_cp_fp8(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->cp > 1 || p->fp8))
        return 0;
    snprintf(msg, cap, "the runtime executes data and expert parallelism only (cp=%d, fp8=%d: context "
                       "parallelism and FP8 are planned and simulated, not run)", p->cp, p->fp8);
    return 1;
}

/* Expert tensor parallelism: no engine runs it. */
static int any_etp(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (p->etp <= 1)
        return 0;
    snprintf(msg, cap, "etp=%d: the runtime splits whole experts over the ep ranks (expert tensor "
                       "parallelism is planned and simulated, not run)", p->etp);
    return 1;
}

static int r_experts(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (p->ep <= 1 || wf_model_is_moe(m))
        return 0;
    snprintf(msg, cap, "ep=%d: model '%s' has no experts", p->ep, m->name);
    return 1;
}

/* recompute=full runs as a replay of each forward (or co-shard piece)
 * just before its backward; selective recomputation has no replay here. */
static int r_sp_recompute(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->sp || p->recompute == WF_RECOMPUTE_SELECTIVE))
        return 0;
    snprintf(msg, cap, "the runtime executes data parallelism without sp and with recompute=none or full (sp=%d, "
                       "recompute=%s)", p->sp, wf_recompute_name(p->recompute));
    return 1;
}

/* ZeRO-3 gathers each parameter for a forward and frees it after the
 * backward: the extra forwards of a replay, a co-shard piece or recycling
 * are not in its schedule. */
static int r_zero3_extra(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (p->zero != 3 || !(p->coshard > 1 || p->recompute == WF_RECOMPUTE_FULL || (m && m->recycle > 0)))
        return 0;
    snprintf(msg, cap, "zero=3 with %s: ZeRO-3's gathers follow one forward per backward (use zero=0, 1 or 2)",
             p->coshard > 1 ? "coshard" : p->recompute == WF_RECOMPUTE_FULL ? "recompute=full" : "recycling");
    return 1;
}

static int r_zero_ep(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->zero && p->ep > 1))
        return 0;
    snprintf(msg, cap, "zero=%d with ep=%d: the runtime shards the state of plain data parallelism only", p->zero,
             p->ep);
    return 1;
}

/* ---- the pipeline engine (stages, tensor parallelism inside them) ---- */

static int p_cp_ep(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->cp > 1 || p->ep > 1))
        return 0;
    snprintf(msg, cap, "pp=%d: the runtime pipelines data- and tensor-parallel stages only (cp=%d, ep=%d must be "
                       "1)", p->pp, p->cp, p->ep);
    return 1;
}

/* recompute=full on stages (and co-shard, which needs it) runs as
 * pipeline.c's replayed stages (play_pieces): one chunk per stage, no tp
 * inside it, not interlaced, no ZeRO-3 (its gathers follow one forward per
 * backward), every layer of every stage (no per-stage values, no block
 * method). Selective recomputation and FP8 are not run. */
static int p_recompute_fp8(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (p->recompute == WF_RECOMPUTE_SELECTIVE || p->fp8) {
        snprintf(msg, cap, "pp=%d: the runtime pipelines stages with recompute=none or full (recompute=%s, fp8=%d)",
                 p->pp, wf_recompute_name(p->recompute), p->fp8);
        return 1;
    }
    if (p->recompute != WF_RECOMPUTE_NONE && (p->rc_n > 0 || p->rc_layers > 0)) {
        snprintf(msg, cap, "pp=%d with recompute per stage or rc_layers: the runtime replays every layer of every "
                           "stage (recompute=full; per-stage values and Megatron's block method are planned and "
                           "simulated, not run)", p->pp);
        return 1;
    }
    if (p->recompute != WF_RECOMPUTE_FULL || (p->tp <= 1 && p->vpp <= 1 && !p->interlace && p->zero < 3))
        return 0;
    snprintf(msg, cap, "pp=%d with recompute=full%s: the runtime replays stages with tp=1, vpp=1, zero < 3 and "
                       "no interlace (tp=%d, vpp=%d, zero=%d, interlace=%d)", p->pp,
             p->coshard > 1 ? " and coshard" : "", p->tp, p->vpp, p->zero, p->interlace);
    return 1;
}

static int p_stages(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (p->pp >= 2)
        return 0;
    snprintf(msg, cap, "vpp=%d needs pp >= 2 stages (pp=%d)", p->vpp, p->pp);
    return 1;
}

static int p_sp(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->sp && p->tp < 2))
        return 0;
    snprintf(msg, cap, "pp=%d with sp=1: sequence parallelism needs tp > 1", p->pp);
    return 1;
}

static int p_transformer(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (p->tp <= 1 || wf_model_is_transformer(m))
        return 0;
    snprintf(msg, cap, "pp=%d,tp=%d: model '%s' is not a transformer (Megatron's layout has no form for it)", p->pp,
             p->tp, m->name);
    return 1;
}

/* The interlaced pipeline (interlace=1) runs without sequence parallelism:
 * its embedding and head are lowered replicated over the sequence. */
static int p_interlace_sp(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->interlace && p->sp))
        return 0;
    snprintf(msg, cap, "interlace=1 with sp=1: the runtime runs the interlaced pipeline without sequence "
                       "parallelism (planned and simulated, not run)");
    return 1;
}

/* The interlaced pipeline runs GPT's and Llama's families. GPT's embedding
 * makes its output whole before the first layer (positions added, dropout):
 * the one tensor both the vocabulary-parallel ends (tp x pp) and the
 * stages' layers pass. Llama's first layer reads the embedding's output
 * directly, which the ends leave as a partial sum plus its all-reduced
 * whole; pipeline.c (whole_outputs) hands the layers the whole value, and
 * under tp the partial sum they also read as the whole on tp rank 0 and
 * zeros on the others. BERT's interlaced run does not reproduce one
 * process's losses (its first step does, its gradients differ; tp=2 and
 * pp=2 alone do), so it is refused with the other families. */
static int p_interlace_family(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (!p->interlace || m->family == WF_FAMILY_GPT || m->family == WF_FAMILY_LLAMA)
        return 0;
    snprintf(msg, cap, "interlace=1: model '%s' is neither GPT- nor Llama-shaped: the runtime runs the interlaced "
                       "pipeline on those two families (planned and simulated for the others, not run)", m->name);
    return 1;
}

/* The interlaced pipeline's embedding and head are lowered with Megatron's
 * layouts at tp x pp (a vocabulary it does not divide padded as Megatron
 * pads it), which splits the layers' heads, hidden size and MLP width tp x
 * pp ways in the graph the ends are cut from. */
static int p_interlace_dims(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (!p->interlace)
        return 0;
    int all = (p->tp > 1 ? p->tp : 1) * p->pp;
    const char *what[] = {"heads", "key-value heads", "hidden size", "MLP width"};
    int64_t dims[] = {m->heads, m->kv_heads, m->hidden, m->ffn};
    for (int k = 0; k < 4; k++)
        if (dims[k] > 0 && all > 0 && dims[k] % all != 0) {
            snprintf(msg, cap, "interlace=1: tp x pp = %d does not divide the %s of %s (%lld; the runtime lowers "
                               "the embedding and the head at tp x pp)", all, what[k], m->name, (long long)dims[k]);
            return 1;
        }
    return 0;
}

/* ZeRO-3 under the interlaced pipeline: neither planned (wf_plan_validate)
 * nor run (the vocabulary-parallel ends' units are not gathered per op). */
static int p_interlace_zero3(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->interlace && p->zero >= 3))
        return 0;
    snprintf(msg, cap, "interlace=1 with zero=3: the runtime shards the interlaced pipeline's state with zero=1 or 2");
    return 1;
}

/* ---- the SPMD engine (a whole-model plan with tp or sp, lowered to its layouts) ---- */

static int s_transformer(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (wf_model_is_transformer(m))
        return 0;
    snprintf(msg, cap, "tp=%d: model '%s' is not a transformer (Megatron's layout has no form for it; write an "
                       "op-level plan with weft plan --op-level)", p->tp, m->name);
    return 1;
}

static int s_combined(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!(p->pp > 1 || p->vpp > 1 || p->recompute != WF_RECOMPUTE_NONE || p->cp > 1 || p->ep > 1 || p->fp8))
        return 0;
    snprintf(msg, cap, "plan with tp=%d: the SPMD runtime runs tp, sp, dp and zero (pp=%d, vpp=%d, recompute=%s, "
                       "cp=%d, ep=%d, fp8=%d are not combined with it)", p->tp, p->pp, p->vpp,
             wf_recompute_name(p->recompute), p->cp, p->ep, p->fp8);
    return 1;
}

/* SuperScaler's co-shard and NF1B (docs/planner.md): the replica engine
 * runs both (engine_replica.c), pipeline stages without tensor parallelism
 * both (pipeline.c: co-shard on the replayed stages, p_recompute_fp8's
 * row); the rest is refused. */
static int staged_coshard_nf1b(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (p->coshard > 1 && !(p->pp > 1 && p->tp <= 1)) {
        snprintf(msg, cap, "coshard with pp=%d, tp=%d: the runtime co-shards data-parallel replicas and pipeline "
                           "stages without tensor parallelism (tp=1)", p->pp, p->tp);
        return 1;
    }
    /* NF1B needs recycling, which only AlphaFold2 has, and the runtime's
     * tensor parallelism is Megatron's layout of a transformer's layers:
     * AlphaFold2's Evoformer has no tp split here (its DAP is planned and
     * simulated, any_dap), so nf1b with tp > 1 has no model to run. */
    if (!p->nf1b || (p->pp > 1 && p->tp <= 1))
        return 0;
    snprintf(msg, cap, "nf1b with pp=%d, tp=%d: the runtime runs NF1B on data-parallel replicas and on pipeline "
                       "stages without tensor parallelism (tp=1; AlphaFold2's Evoformer, the model that recycles, "
                       "has no tensor-parallel split in the runtime)", p->pp, p->tp);
    return 1;
}

/* The inputs a model's graph declares besides data and labels (constants,
 * recycled activations, T5's decoder ids) are fed by the replica engine and
 * by pipeline stages without tensor parallelism. */
static int staged_model_inputs(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    if (m->family != WF_FAMILY_SWIN && m->family != WF_FAMILY_T5 && m->family != WF_FAMILY_ALPHAFOLD)
        return 0;
    if (p->tp <= 1 && p->pp > 1)
        return 0;
    snprintf(msg, cap, "pp=%d, tp=%d: model '%s' takes constant%s inputs, which the runtime feeds to data-parallel "
                       "replicas and to pipeline stages without tensor parallelism (tp=1)", p->pp, p->tp, m->name,
             m->family == WF_FAMILY_ALPHAFOLD ? " and recycled" : "");
    return 1;
}

/* AlphaFold2's DAP (dap=K, docs/planner.md) is planned, estimated and
 * simulated; no engine shards the Evoformer's axes. */
static int any_dap(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (p->dap <= 1)
        return 0;
    snprintf(msg, cap, "dap=%d: Dynamic Axial Parallelism is planned and simulated, not run by the runtime", p->dap);
    return 1;
}

/* Per-op co-shard (coshard=K@PATTERN): every engine builds its executors
 * for one piece's rows, so each splits every op alike. */
static int any_coshard_per_op(const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    (void)m;
    if (!wf_plan_coshard_per_op(p))
        return 0;
    snprintf(msg, cap, "coshard=%d@%s: the runtime runs whole-stage co-shard only (every op in pieces); per-op "
                       "co-shard is priced by estimate, simulate and plan but not run", p->coshard, p->coshard_on);
    return 1;
}

/* Each engine's rows in the order it checks them. */
static const rule RULES[] = {
    {WF_ENGINE_REPLICA, 0, any_dap},
    {WF_ENGINE_PIPELINE, 0, any_dap},
    {WF_ENGINE_SPMD, 0, any_dap},
    {WF_ENGINE_REPLICA, 0, any_coshard_per_op},
    {WF_ENGINE_PIPELINE, 0, any_coshard_per_op},
    {WF_ENGINE_SPMD, 0, any_coshard_per_op},
    {WF_ENGINE_PIPELINE, 0, staged_coshard_nf1b},
    {WF_ENGINE_SPMD, 0, staged_coshard_nf1b},
    {WF_ENGINE_PIPELINE, 1, staged_model_inputs},
    {WF_ENGINE_SPMD, 1, staged_model_inputs},
    {WF_ENGINE_REPLICA, 0, r_cp_fp8},
    {WF_ENGINE_REPLICA, 0, any_etp},
    {WF_ENGINE_REPLICA, 1, r_experts},
    {WF_ENGINE_REPLICA, 0, r_sp_recompute},
    {WF_ENGINE_REPLICA, 0, r_zero_ep},
    {WF_ENGINE_REPLICA, 0, r_zero3_extra},
    {WF_ENGINE_PIPELINE, 0, p_cp_ep},
    {WF_ENGINE_PIPELINE, 0, p_recompute_fp8},
    {WF_ENGINE_PIPELINE, 0, p_stages},
    {WF_ENGINE_PIPELINE, 0, p_sp},
    {WF_ENGINE_PIPELINE, 0, any_etp},
    {WF_ENGINE_PIPELINE, 1, p_transformer},
    {WF_ENGINE_PIPELINE, 0, p_interlace_sp},
    {WF_ENGINE_PIPELINE, 0, p_interlace_zero3},
    {WF_ENGINE_PIPELINE, 1, p_interlace_family},
    {WF_ENGINE_PIPELINE, 1, p_interlace_dims},
    {WF_ENGINE_SPMD, 1, s_transformer},
    {WF_ENGINE_SPMD, 0, s_combined},
    {WF_ENGINE_SPMD, 0, any_etp},
};

wf_engine_kind wf_runtime_engine_of(const wf_plan *p)
{
    if ((p->tp > 1 || p->sp) && p->pp <= 1)
        return WF_ENGINE_SPMD;
    /* Stages, or interleaved chunks without tensor parallelism (which the
     * pipeline engine refuses: vpp needs pp >= 2). */
    if (p->pp > 1 || (p->vpp > 1 && p->tp <= 1))
        return WF_ENGINE_PIPELINE;
    return WF_ENGINE_REPLICA;
}

/* The first row of `engine` that refuses p (on m), its reason in msg: 1; else 0. */
static int refused(wf_engine_kind engine, const wf_plan *p, const wf_model_config *m, char *msg, size_t cap)
{
    for (size_t k = 0; k < sizeof RULES / sizeof RULES[0]; k++)
        if (RULES[k].engine == engine && (m || !RULES[k].needs_model) && RULES[k].refuses(p, m, msg, cap))
            return 1;
    return 0;
}

/* The schedule's rows (every engine's data-parallel groups, dist.c). */
static int schedule_refused(int zero, wf_comm_kind kind, char *msg, size_t cap)
{
    if (zero == 3 && kind == WF_COMM_DEAR) {
        snprintf(msg, cap, "zero=3 with dear: ZeRO-3 gathers the parameters per op in every pass (dear runs with "
                           "zero=0, 1 or 2)");
        return 1;
    }
    if (zero && kind == WF_COMM_BYTESCHEDULER) {
        snprintf(msg, cap, "zero=%d with bytescheduler: its chunks split tensors across collectives, which the "
                           "shards do not follow (use wfbp, ddp, dear, horovod or mgwfbp)", zero);
        return 1;
    }
    return 0;
}

wf_status wf_runtime_engine_check(wf_engine_kind engine, const wf_plan *p, const wf_model_config *m)
{
    char msg[320];
    return refused(engine, p, m, msg, sizeof msg) ? wf_errorf(WF_INVAL, "%s", msg) : WF_OK;
}

wf_status wf_runtime_schedule_check(int zero, wf_comm_kind kind)
{
    char msg[320];
    return schedule_refused(zero, kind, msg, sizeof msg) ? wf_errorf(WF_INVAL, "%s", msg) : WF_OK;
}

int wf_runtime_runs_plan(const wf_plan *p, const wf_comm_sched *comm)
{
    return wf_runtime_runs_model_plan(p, NULL, comm);
}

int wf_runtime_runs_model_plan(const wf_plan *p, const wf_model_config *m, const wf_comm_sched *comm)
{
    char msg[320];
    return !refused(wf_runtime_engine_of(p), p, m, msg, sizeof msg) &&
           !schedule_refused(p->zero, comm ? comm->kind : p->comm.kind, msg, sizeof msg);
}
