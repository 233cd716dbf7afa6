/* weft layout: the op-level plan's meaning (src/layout/). Lowering a
 * whole-model plan to the per-op SBP layouts that run it and raising them
 * back, and the layout descriptor of the cost model (wf_cost_layout,
 * weft/cost_records.h) an op-level plan's signatures give. It sits between
 * the cost model and SBP below and its consumers above (the estimate of an
 * op-level plan, the searches, the simulator, the runtime): none of them
 * derives a plan's layouts any other way (docs/architecture.md). */
#ifndef WEFT_LAYOUT_H
#define WEFT_LAYOUT_H

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/cost_records.h"
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/sbp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lowers a whole-model plan to the op-level plan of the same layouts
 * (src/layout/lower.c, docs/plan-format.md "Lowering"): mesh dp x tp (outer
 * axis dp), pp stages by layer ranges, batch / (mbs x dp) micro-batches,
 * Megatron's signature for every forward op (column/row splits, per-head
 * ops, the vocabulary-parallel embedding, logits and loss, sequence
 * parallelism as S1 between them, the batch split on the dp axis). out must
 * be initialized. The keys that are not layouts (recompute, zero, overlap,
 * the schedules, vpp, the profile's) go into out->keys; cp is WF_INVAL. */
wf_status wf_plan_lower(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int64_t batch,
                        wf_plan_oplevel *out);

/* ==== one cost model (src/layout/layout_cost.c) ==================================
 * The estimate of op-level plan ol: its layouts read as the cost model's
 * layout descriptor (wf_cost_layout: per op what the layouts divide, which
 * collectives they need and what those may hide behind), its keys as the
 * rest of the plan, composed by wf_estimate_layouts exactly as a whole-model
 * plan (docs/cost-model.md, "One cost model"). The mesh has a data-parallel
 * axis (outer), a model-parallel one, or both; a transformer's layers run
 * one layout and its stages equal layer ranges; models other than
 * transformers take data-parallel layouts. What a plan breaks of these is
 * WF_INVAL naming it. ctx is a context of model m on cluster c; as_plan (may
 * be NULL) receives the plan composed (dp, tp, pp, mbs, sp from the layouts,
 * the rest from the keys). */
wf_status wf_oplevel_plan_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_plan_oplevel *ol, wf_estimate *out, wf_plan *as_plan);
/* The descriptor and the plan wf_oplevel_plan_cost composes (free out with
 * wf_cost_layout_free). */
wf_status wf_oplevel_plan_layout(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                 const wf_plan_oplevel *ol, wf_cost_layout *out, wf_plan *as_plan);

/* The whole-model plan whose lowering is op-level plan ol (mesh dp x tp, or
 * one of them, with or without sequence parallelism; for a mixture of
 * experts also edp x ep, ep x tp and edp x ep x tp, etp 1 or tp), into out;
 * WF_INVAL
 * naming the first op whose layout no whole-model plan gives. What lets the
 * simulator and the runtime take op-level plans of Megatron's family. */
wf_status wf_plan_raise(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan_oplevel *ol,
                        wf_plan *out);

#ifdef __cplusplus
}
#endif
#endif
