/* weft CLI: one file per verb (cmd_<verb>.c), each with one option table that
 * drives both its parser and its --help. A verb returns a wf_status; main()
 * prints the message and maps it to the exit code (0 ok, 1 user error, 2
 * internal error). Only this directory calls exit(). */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include "weft/cost.h"
#include "weft/runtime.h"

#include <stdio.h>

/* Each verb: argv[0] is the verb name. On --help it prints usage to stdout and
 * returns WF_OK. */
#define WF_CLI_VERBS(X)                                                       \
    X(models, "list the model zoo")                                           \
    X(show, "a model's parameters, FLOPs and layer table, or a cluster")      \
    X(clusters, "list cluster presets")                                       \
    X(estimate, "predict the iteration time and memory of a plan")            \
    X(plan, "search for the fastest plan that fits, and the frontier")        \
    X(simulate, "play one iteration out event by event, with a trace")        \
    X(train, "train for real on CPUs (under mpiexec for several ranks)")      \
    X(calibrate, "measure this machine into a cluster file")                  \
    X(export, "write a plan as a framework's settings (Megatron-LM, DeepSpeed, torchtitan, FSDP)")

#define WF_X(verb, help) wf_status wf_cmd_##verb(int argc, char **argv);
WF_CLI_VERBS(WF_X)
#undef WF_X

/* `weft plan --verify FILE` (cmd_plan.c): checks a plan file of either kind
 * against the model, the cluster and the batch and prints its numbers (an
 * op-level file as `weft plan --op-level` reported it; a whole-model one as
 * `weft estimate` does). `weft estimate --plan FILE` can hand op-level files
 * here (wf_plan_is_oplevel_file in plan.h). max_memory_gib <= 0: the device's. */
/* `weft plan --verify PLAN [-o FILE]`: a whole-model plan (string or file) is
 * estimated, lowered to its op-level form (wf_plan_lower), checked and costed
 * as an op-level plan, and with out written as an op-level plan file; an
 * op-level file is checked and costed. */
wf_status wf_cli_verify_plan(const char *model, const char *cluster, int64_t batch, const char *path,
                             double max_memory_gib, int json, const char *out);
wf_status wf_cli_verify_oplevel(const char *model, const char *cluster, int64_t batch,
                                const char *path, double max_memory_gib, int json);

/* A per-layer plan file of a mixture of experts (src/cli/perlayer_cli.c,
 * layout.h wf_layout_perlayer): wf_cli_perlayer_read returns 1 with m, c,
 * ol (initialized by the caller) and pl filled when path is one, 0 when it is
 * not (not an op-level file, no experts, one whole-model plan's lowering), -1
 * with *st on an error (named in one line); cluster NULL: this machine's
 * (wf_cluster_of_job). wf_cli_perlayer_report prints
 * its price (`weft estimate`, `weft plan --verify`) or its simulation (`weft
 * simulate`, simulate 1), as a table or one JSON object. */
struct wf_layout_perlayer_s;
int wf_cli_perlayer_read(const char *path, const char *model, const char *cluster, int64_t batch,
                         wf_model_config *m, wf_cluster *c, wf_layout *ol, struct wf_layout_perlayer_s *pl,
                         wf_status *st);
wf_status wf_cli_perlayer_report(int json, int simulate, const char *path, const wf_model_config *m,
                                 const wf_cluster *c, int64_t batch, const wf_layout *ol,
                                 const struct wf_layout_perlayer_s *pl);
/* Both in one: 1 when path is a per-layer plan (printed, or *st the error),
 * 0 when it is not (the caller goes on). */
int wf_cli_perlayer_try(const char *path, const char *model, const char *cluster, int64_t batch, int json,
                        int simulate, wf_status *st);

/* `weft calibrate --gpu` (cmd_calibrate_gpu.c): measures the GPUs of this node or
 * MPI job and writes a cluster file fitted on `base_spec`'s unmeasured factors. */
wf_status wf_cli_calibrate_gpu(const char *out, int quick, const char *base_spec, int64_t max_devices);

/* Prints a cJSON value on stdout as the one JSON object of a --json run. */
struct cJSON;
wf_status wf_cli_print_json(const struct cJSON *j);

/* ---- what the verbs that evaluate one plan share (cli_common.c) ------------------
 * The option rows, so that every verb words --model, --cluster, --batch, --plan
 * and --json the same in its table and --help. */
#define WF_CLI_OPT_MODEL(var) {"model", 0, WF_OPT_STR, (var), "M", "zoo name, family with overrides, or model JSON file", 1}
#define WF_CLI_OPT_CLUSTER(var)                                                                                        \
    {"cluster", 0, WF_OPT_STR, (var), "C", "preset with overrides (dgx-a100:nodes=16) or cluster JSON file", 1}
#define WF_CLI_OPT_BATCH(var) {"batch", 0, WF_OPT_INT, (var), "B", "global batch size (samples per iteration)", 1}
#define WF_CLI_OPT_PLAN(var)                                                                                           \
    {"plan", 0, WF_OPT_STR, (var), "P", "dp=..,tp=..,pp=..,mbs=..,vpp=..,recompute=..,sp=..,zero=..,cp=..,fp8=..,attn=..,sw=.. or a plan file; sw is the framework profile: megatron-core (default), megatron-2022, megatron-2021, deepspeed, fsdp, weft (this runtime), pytorch (plain DDP + autocast)", 1}
#define WF_CLI_OPT_JSON(var) {"json", 0, WF_OPT_FLAG, (var), NULL, "print one JSON object on stdout", 0}

/* A model, a cluster, a batch and a plan as the options gave them, and what
 * they name. */
typedef struct {
    const char *model, *cluster, *plan; /* the options' text */
    int64_t batch;
    wf_model_config mc;
    wf_cluster c;
    wf_plan p;
    char canon[512];                    /* the plan in canonical form */
    char assumed[512];                  /* what defaults were filled in ("" when none) */
} wf_cli_plan_input;

/* "cluster dgx-a100: the preset's 64 nodes x 8 = 512 devices (add :nodes=N)"
 * when spec names a multi-node preset without nodes=, else "". */
void wf_cli_cluster_note(const char *spec, const wf_cluster *c, char *buf, size_t cap);

/* --batch at least 1, then the model and the cluster looked up. */
/* Tokens per second per device of an estimate (samples/s x sequence length /
 * devices) for models that read token sequences (transformers); 0 otherwise. */
double wf_cli_tokens_per_s_per_device(const wf_model_config *m, const wf_estimate *e);
/* v with 4 significant digits in fixed notation (0.5629, 113.7, 14550) into
 * buf: the figures of the human tables. */
const char *wf_cli_sig(double v, char *buf, size_t cap);
/* WF_OK when format names an export writer, else one line ("WHAT: unknown
 * export format ...") with a did-you-mean; checked before any work. */
wf_status wf_cli_export_check_format(const char *format, const char *what);
/* Writes plan p as FORMAT's settings on f (export.c, docs/export.md):
 * megatron, deepspeed, torchtitan or fsdp; WF_INVAL naming what the framework
 * lacks when it cannot express the plan. */
wf_status wf_cli_export(FILE *f, const char *format, const wf_plan *p, const wf_model_config *m,
                        const wf_cluster *c, int64_t batch);
/* Export targets (export.c): WF_OK when target names one (megatron,
 * deepspeed, torchtitan, fsdp), with *sw (may be NULL) the framework profile
 * `plan --emit` prices its plans under; else WF_INVAL naming the choices. */
wf_status wf_export_target(const char *target, wf_sw *sw);
/* 1 when target can run plan p of model m, else 0 with "TARGET cannot run
 * this plan: WHY" in why (may be NULL). The one statement of each
 * framework's refusals: wf_cli_export refuses exactly these, and `weft plan
 * --emit` searches only the plans accepted (wf_search_outer_opts.accept). */
int wf_export_accepts(const char *target, const wf_plan *p, const wf_model_config *m, char *why, size_t cap);
/* ---- pictures (plot.c) ------------------------------------------------------------- */
/* One series of the frontier: n plans (label: the plan string; short_label,
 * may be NULL, what is drawn beside the point) on `devices` devices. */
typedef struct {
    int64_t devices;
    int n;
    const double *time_s, *mem_gib;
    const char *const *label;
    const char *const *short_label;
} wf_plot_series;
/* The time/memory frontier as SVG (svg_path) and/or CSV (csv_path), either may
 * be NULL: a point per plan, a line per series, the chosen plan circled, the
 * memory budget as a dashed line (budget_gib <= 0: none). */
wf_status wf_plot_frontier(const char *svg_path, const char *csv_path, const wf_plot_series *s, int ns,
                           int chosen_series, int chosen_point, double budget_gib, const char *title);
/* The timeline of a simulated iteration from its Chrome trace (weft's own
 * trace file): a lane per stream, tasks coloured by category, idle gaps of
 * compute streams drawn as the bubble; CSV: one row per task. */
wf_status wf_plot_timeline(const char *trace_path, const char *svg_path, const char *csv_path, const char *title);
/* --batch within [1, WF_MAX_BATCH], or WF_INVAL naming it. */
wf_status wf_cli_check_batch(int64_t batch);
wf_status wf_cli_load_model_cluster(const char *model, const char *cluster, int64_t batch, wf_model_config *mc,
                                    wf_cluster *c);

/* Fills in->mc, c, p and canon from in->model, cluster, batch and plan (a
 * plan spec with '=' or a plan file; a file made for another model, cluster
 * or batch is warned about, `verb_ing` naming what is done with it:
 * "estimating"). The plan is validated later, by the verb's library call. */
wf_status wf_cli_load_plan_input(wf_cli_plan_input *in, const char *verb_ing);

/* The first two lines of a plan's human table: model, cluster, batch; the
 * plan, its devices and micro-batches. */
void wf_cli_print_plan_header(FILE *f, const wf_cli_plan_input *in, int64_t devices, int64_t micro_batches);

/* Adds plan (canonical), model, cluster and batch to a --json object. */
void wf_cli_add_plan_fields(struct cJSON *j, const wf_cli_plan_input *in);

/* A cluster's description: device, peaks, efficiency table, levels, and
 * every factor settable by name with its value and meaning (`weft clusters
 * CLUSTER`). */
void wf_cli_print_cluster(FILE *f, const wf_cluster *c);

/* `weft train --plan auto` (src/cli/autoplan.c): the planner's fastest plan
 * (wf_search_outer, every key) for c->model at c->batch on the job's ranks
 * (wf_train_world_size) of its cluster (wf_cluster_of_job), among the plans
 * the runtime executes (wf_runtime_runs_plan) with c->comm. Not collective:
 * every rank computes the same plan from the same inputs. Writes the
 * canonical plan string and a line saying how it was chosen. */
wf_status wf_cli_auto_plan(const wf_train_config *c, char *plan, size_t cap, char *note, size_t note_cap);
/* `weft train --comm auto` of a data-parallel run (a wf_comm_auto_fn): the
 * fastest of sched's candidates (wf_comm_candidates, the full sweep) in the
 * simulator's data-parallel iteration. */
wf_status wf_cli_comm_auto(const wf_model_config *m, const char *cluster, int64_t mbs, int nranks,
                           wf_comm_sched *out, char *note, size_t cap);

#endif
