/* bench_superscaler: SuperScaler's cases (Lin et al., "SuperScaler:
 * Supporting Flexible DNN Parallelization via a Unified Abstraction",
 * OSDI'23: co-shard on Swin Transformer, NF1B on AlphaFold2) as weft
 * predicts and simulates them (a benchmark of the planner's choices, never a
 * test; the numbers go in docs/planner.md, "Co-shard and NF1B").
 *
 * For each model and cluster the whole-model planner runs over four plan
 * spaces, each the best fitting plan of its space:
 *   megatron   data and pipeline parallelism, recompute none or full, ZeRO
 *              0 or 1 (Megatron-LM's for a model it cannot split by tensor
 *              parallelism), no co-shard, recycling in each micro-batch's step;
 *   deepspeed  data parallelism with ZeRO-3 (DeepSpeed's stage 3 with
 *              activation checkpointing), no pipeline, no co-shard;
 *   before     every plan weft had (the two above and everything between);
 *   stage      the same with whole-stage co-shard, NF1B and (AlphaFold2) DAP;
 *   now        the same with per-op co-shard too (coshard=K@PATTERN: only
 *              Swin's attention, AlphaFold2's attentions, triangle ops and
 *              outer product mean in pieces).
 * Each winner is simulated too (wf_sim_plan); the speedups are the before
 * plan's time over the now plan's, and the stage plan's over the now
 * plan's (what per-op co-shard adds), predicted and simulated. */
#include "weft/search.h"
#include "weft/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SPACE_MEGATRON, SPACE_DEEPSPEED, SPACE_BEFORE, SPACE_STAGE, SPACE_NOW, SPACE_COUNT };
static const char *const SPACE_NAME[SPACE_COUNT] = {"megatron", "deepspeed", "before", "stage", "now"};

static int accept(const wf_plan *p, void *user)
{
    int space = *(const int *)user;
    if (space == SPACE_NOW)
        return 1;
    if (space == SPACE_STAGE)
        return !wf_plan_coshard_per_op(p);
    if (p->coshard > 1 || p->nf1b || p->dap > 1)
        return 0;
    if (space == SPACE_MEGATRON)
        return p->zero <= 1;
    if (space == SPACE_DEEPSPEED)
        return p->pp == 1 && p->zero == 3;
    return 1;
}

typedef struct {
    int found;
    wf_plan plan;
    wf_estimate est;
    double sim_s;
    char why[512]; /* when none fits */
} best;

static int search(const wf_model_config *m, const wf_cluster *c, int64_t batch, int space, best *out)
{
    memset(out, 0, sizeof *out);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.top_k = 1;
    o.accept = accept;
    o.accept_user = &space;
    wf_search_outer_result r;
    if (wf_search_outer(m, c, batch, &o, &r) != WF_OK) {
        /* No plan of the space fits: the search says so (and the least
         * memory it found). */
        snprintf(out->why, sizeof out->why, "%s", wf_last_error());
        wf_clear_error();
        wf_search_outer_result_free(&r);
        return 0;
    }
    if (r.ntop > 0 && r.top[0].est.fits) {
        out->found = 1;
        out->plan = r.top[0].plan;
        out->est = r.top[0].est;
        wf_sim_plan_opts so;
        memset(&so, 0, sizeof so);
        wf_sim_plan_result sr;
        if (wf_sim_plan(m, c, &out->plan, batch, &so, &sr) != WF_OK) {
            fprintf(stderr, "bench_superscaler: %s\n", wf_last_error());
            wf_search_outer_result_free(&r);
            return 1;
        }
        out->sim_s = sr.iteration_time_s;
    }
    wf_search_outer_result_free(&r);
    return 0;
}

static int run(const char *label, const char *model, const char *cluster, int64_t batch)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup(cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_superscaler: %s\n", wf_last_error());
        return 1;
    }
    best b[SPACE_COUNT];
    for (int s = 0; s < SPACE_COUNT; s++)
        if (search(&m, &c, batch, s, &b[s]))
            return 1;
    printf("%s on %s, batch %lld\n", label, cluster, (long long)batch);
    for (int s = 0; s < SPACE_COUNT; s++) {
        if (!b[s].found) {
            printf("  %-9s  no plan fits (%s)\n", SPACE_NAME[s], b[s].why);
            continue;
        }
        char text[512];
        wf_plan_format(&b[s].plan, text, sizeof text);
        printf("  %-9s  %-22s est %9.4f s  sim %9.4f s  %7.2f GiB  %s\n", SPACE_NAME[s], wf_plan_kind(&b[s].plan),
               b[s].est.iteration_time_s, b[s].sim_s, b[s].est.memory_per_device_bytes / 1073741824.0, text);
    }
    if (b[SPACE_BEFORE].found && b[SPACE_NOW].found)
        printf("  speedup    predicted %.3fx, simulated %.3fx\n",
               b[SPACE_BEFORE].est.iteration_time_s / b[SPACE_NOW].est.iteration_time_s,
               b[SPACE_BEFORE].sim_s / b[SPACE_NOW].sim_s);
    else
        printf("  speedup    n/a (%s)\n", b[SPACE_NOW].found ? "only the new plans fit" : "nothing fits");
    if (b[SPACE_STAGE].found && b[SPACE_NOW].found)
        printf("  per-op     predicted %.3fx, simulated %.3fx over whole-stage co-shard's space\n",
               b[SPACE_STAGE].est.iteration_time_s / b[SPACE_NOW].est.iteration_time_s,
               b[SPACE_STAGE].sim_s / b[SPACE_NOW].sim_s);
    return 0;
}

int main(void)
{
    /* Swin-L (C 192, depths 2-2-18-2, heads 6-12-24-48) at 1536x1536 with
     * 48x48 windows (Swin V2's high-resolution setting), and at 224x224. */
    const char *swin_l_1536 = "swin:hidden=192,heads=6,depths=2-2-18-2,image=1536,window=48";
    int rc = 0;
    rc |= run("swin-l 1536", swin_l_1536, "v100-ib100:nodes=2", 64);
    rc |= run("swin-l 1536", swin_l_1536, "dgx-a100:nodes=1", 256);
    rc |= run("swin-l 1536", swin_l_1536, "v100-10gbe:nodes=2", 64);
    rc |= run("swin-l", "swin-l", "dgx-a100:nodes=1", 4096);
    rc |= run("alphafold2", "alphafold2", "dgx-a100:nodes=1", 128);
    rc |= run("alphafold2", "alphafold2", "v100-ib100:nodes=4", 128);
    rc |= run("alphafold2 (512 residues)", "alphafold2:seq=512", "dgx-a100:nodes=2", 128);
    /* Block checkpoints make one sample of 256 or 512 residues fit data
     * parallelism; at 1024 and 1280 residues one sample's block does not
     * fit a 32 GB V100 or an 80 GB A100 without pieces. */
    rc |= run("alphafold2 (1024 residues)", "alphafold2:seq=1024", "v100-ib100:nodes=4", 64);
    rc |= run("alphafold2 (1280 residues)", "alphafold2:seq=1280", "dgx-a100:nodes=1", 64);
    return rc;
}
