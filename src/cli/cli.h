/* weft CLI: one file per verb (cmd_<verb>.c), each with one option table that
 * drives both its parser and its --help. A verb returns a wf_status; main()
 * prints the message and maps it to the exit code (0 ok, 1 user error, 2
 * internal error). Only this directory calls exit(). */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include "weft/core.h"

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
    X(calibrate, "measure this machine into a cluster file")

#define WF_X(verb, help) wf_status wf_cmd_##verb(int argc, char **argv);
WF_CLI_VERBS(WF_X)
#undef WF_X

/* `weft plan --verify FILE` (cmd_plan.c): checks a plan file of either kind
 * against the model, the cluster and the batch and prints its numbers (an
 * op-level file as `weft plan --op-level` reported it; a whole-model one as
 * `weft estimate` does). `weft estimate --plan FILE` can hand op-level files
 * here (wf_plan_is_oplevel_file in plan.h). max_memory_gib <= 0: the device's. */
wf_status wf_cli_verify_oplevel(const char *model, const char *cluster, int64_t batch,
                                const char *path, double max_memory_gib, int json);

/* Prints a cJSON value on stdout as the one JSON object of a --json run. */
struct cJSON;
wf_status wf_cli_print_json(const struct cJSON *j);

#endif
