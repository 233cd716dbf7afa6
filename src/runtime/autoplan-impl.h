/* Private interface of `--plan auto` (autoplan.c) for the trainer. */
#ifndef WEFT_RUNTIME_AUTOPLAN_IMPL_H
#define WEFT_RUNTIME_AUTOPLAN_IMPL_H

#include "weft/models.h"
#include "weft/plan.h"

/* 1 when the runtime executes plan p (the trainer's own check, without the
 * world's rank count, which the search already fixes). */
typedef int (*wf_runnable_fn)(const wf_plan *p, void *user);

/* The planner's fastest plan for model m on `nranks` devices of cluster
 * `spec` (NULL: the `local` preset, one device per rank when the job has more
 * ranks than the preset has devices) at the global batch, among the plans
 * runnable(p) accepts: wf_outer_search over the whole space (every key, every
 * plan that fits the budget), taken in its order (time, memory, plan string),
 * so every rank picks the same plan. Writes the plan and a line saying how it
 * was chosen into note. WF_NOFIT or WF_INVAL with one line when no plan fits
 * or none is runnable. */
wf_status wf_runtime_auto_plan(const wf_model_config *m, const char *spec, int nranks, int64_t batch,
                               wf_runnable_fn runnable, void *user, wf_plan *out, char *note, size_t cap);

#endif
