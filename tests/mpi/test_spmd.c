/* The SPMD executor (op-level plans over MPI) against one process (issue
 * 10; run by CTest under mpiexec -n 2 and -n 4).
 *
 * Every rank first trains the single-process reference alone (on
 * MPI_COMM_SELF: the same seed, data and global batch, one micro-batch,
 * dropout on), then all ranks train together under the plan. 20 steps each;
 * checks: every step's loss within relative 1e-5 of the reference; the
 * final parameters gathered to their full shapes identical on every rank
 * and equal to the reference's within 1e-5 (relative to the tensor's
 * largest value).
 *
 *   2 ranks   gpt-tiny tp=2 (Megatron: column/row splits, heads, the
 *             vocabulary-parallel embedding, logits and loss) and tp=2,sp=1
 *             (the sequence split between them: reduce-scatter / all-gather);
 *   4 ranks   gpt-tiny tp=2,dp=2 and tp=2,dp=2,sp=1; op-level plans on the
 *             2x2 mesh for mlp-tiny and cnn-tiny (files written here, with
 *             column / row / channel splits on the inner axis and the batch
 *             on the outer one);
 *   llama     a GQA llama (unequal parts of the fused qkv) with tp=2,sp=1
 *             (2 ranks) and tp=2,dp=2 (4 ranks);
 *   vocabulary  gpt with a vocabulary of 101 at tp=2 (2 ranks) and tp=4 (4
 *             ranks): padded as Megatron pads it, the padding masked out of
 *             the loss: the losses of the unpadded single process;
 *   refusals  a mesh of 8 devices on this job, a split that does not divide
 *             a tensor, an MLP width tp does not divide: WF_INVAL on every
 *             rank. */
#include "harness.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS 20
#define BATCH 8

static const char *g_comm = "wfbp"; /* the data-parallel axis's schedule */
static double g_clip = 1.0; /* the clipping norm */

static void config(wf_train_config *c, const char *model, const char *plan, int self)
{
    memset(c, 0, sizeof *c);
    c->model = model;
    c->data = "synthetic";
    c->batch = BATCH;
    c->plan = plan;
    c->comm = g_comm;
    /* SGD with momentum: AdamW's normalization would turn rounding noise in
     * near-zero gradients into whole steps and hide the comparison of the
     * parameters. Clipping on: the norm sums the shards. */
    wf_optim_defaults(WF_OPTIM_SGD, &c->optim);
    c->optim.lr = 0.05;
    c->optim.weight_decay = 0.01;
    c->optim.clip_norm = g_clip;
    c->seed = 29;
    c->self = self;
}

static wf_train_info g_info; /* of the last run */
static char g_dir[64];       /* where the plan and model files go (rank 0's temporary directory) */

static const char *path_of(const char *name)
{
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

/* Trains STEPS steps: losses[] and the gathered parameters (*params, *n). */
static int train(const wf_train_config *c, double *losses, float **params, int64_t *n)
{
    wf_train *t = NULL;
    wf_status st = wf_train_create(c, &t);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        return -1;
    }
    if (harness_steps(t, 0, STEPS, losses) != 0)
        st = WF_INTERNAL;
    if (st == WF_OK)
        wf_train_info_of(t, &g_info);
    if (st == WF_OK)
        st = wf_train_gather_params(t, NULL, 0, n);
    *params = st == WF_OK ? malloc((size_t)*n * sizeof(float)) : NULL;
    if (st == WF_OK)
        st = wf_train_gather_params(t, *params, *n, n);
    if (st != WF_OK)
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
    wf_train_free(t);
    return st == WF_OK ? 0 : -1;
}

/* Trains model under plan against the single process. */
static void check(const char *model, const char *plan)
{
    double ref[STEPS], run[STEPS];
    float *pref = NULL, *prun = NULL;
    int64_t nref = 0, nrun = 0;
    wf_train_config c;
    config(&c, model, "auto", 1);
    CHECK(train(&c, ref, &pref, &nref) == 0, "%s: single-process reference failed", model);
    config(&c, model, plan, 0);
    CHECK(train(&c, run, &prun, &nrun) == 0, "%s %s: SPMD run failed", model, plan);
    double worst = 0, pworst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(run[i] - ref[i]) / fabs(ref[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s %s step %d: loss %.9g, one process %.9g (relative %.3g)", model, plan, i + 1, run[i],
              ref[i], rel);
    }
    CHECK(nref == nrun && pref && prun, "%s %s: %lld parameters gathered, the reference has %lld", model, plan,
          (long long)nrun, (long long)nref);
    if (nref == nrun && pref && prun) {
        double big = 0;
        for (int64_t i = 0; i < nref; i++)
            big = fabs(pref[i]) > big ? fabs(pref[i]) : big;
        for (int64_t i = 0; i < nref; i++) {
            double d = fabs((double)prun[i] - (double)pref[i]) / (big > 0 ? big : 1);
            pworst = d > pworst ? d : pworst;
        }
        CHECK(pworst <= 1e-5, "%s %s: gathered parameters differ from one process's by %.3g", model, plan, pworst);
        uint64_t lo, hi;
        CHECK(wf_world_minmax_u64(harness_fnv(prun, nrun), &lo, &hi) == WF_OK && lo == hi,
              "%s %s: gathered parameters differ across ranks", model, plan);
    }
    CHECK(ref[STEPS - 1] < ref[0], "%s: loss did not fall (%g -> %g)", model, ref[0], ref[STEPS - 1]);
    /* Megatron's collectives: all-reduces (forward g, backward f) without
     * sequence parallelism; reduce-scatters and all-gathers with it. */
    const wf_train_info *in = &g_info;
    if (strstr(plan, "sp=1"))
        CHECK(in->spmd_reduce_scatters > 0 && in->spmd_allgathers > 0, "%s %s: %lld reduce-scatters, %lld all-gathers",
              model, plan, (long long)in->spmd_reduce_scatters, (long long)in->spmd_allgathers);
    else if (strstr(plan, "tp="))
        CHECK(in->spmd_reduce_scatters == 0 && in->spmd_allreduces > 0 && in->spmd_inop_allreduces > 0,
              "%s %s: %lld reduce-scatters, %lld all-reduces, %lld in-op", model, plan,
              (long long)in->spmd_reduce_scatters, (long long)in->spmd_allreduces,
              (long long)in->spmd_inop_allreduces);
    if (g_rank == 0)
        printf("%-10s plan %-22s comm %-9s ranks %d: losses %.5f -> %.5f, worst relative loss difference %.2e, parameters "
               "%.2e; per step %lld all-gathers, %lld reduce-scatters, %lld all-reduces, %lld in-op, %lld all-to-alls\n",
               model, plan, g_comm, g_nranks, run[0], run[STEPS - 1], worst, pworst, (long long)in->spmd_allgathers,
               (long long)in->spmd_reduce_scatters, (long long)in->spmd_allreduces,
               (long long)in->spmd_inop_allreduces, (long long)in->spmd_alltoalls);
    free(pref);
    free(prun);
}

/* A vocabulary tp does not divide (101): the run pads it as Megatron does
 * (to a multiple of 128 x tp) and masks the padding's logits out of the
 * loss, so every step's loss is the unpadded single process's; the padded
 * model holds (padded - 101) x hidden more parameters (the tied table's
 * rows), and the padding's rows get no gradient. */
static void check_padded(const char *model, const char *plan, int64_t hidden, int64_t padded)
{
    double ref[STEPS], run[STEPS];
    float *pref = NULL, *prun = NULL;
    int64_t nref = 0, nrun = 0;
    wf_train_config c;
    config(&c, model, "auto", 1);
    CHECK(train(&c, ref, &pref, &nref) == 0, "%s: single-process reference failed", model);
    config(&c, model, plan, 0);
    CHECK(train(&c, run, &prun, &nrun) == 0, "%s %s: padded SPMD run failed", model, plan);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(run[i] - ref[i]) / fabs(ref[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s %s step %d: loss %.9g, one process (unpadded) %.9g (relative %.3g)", model, plan,
              i + 1, run[i], ref[i], rel);
    }
    CHECK(nrun - nref == (padded - 101) * hidden, "%s %s: %lld parameters, the unpadded model %lld (expected %lld more)",
          model, plan, (long long)nrun, (long long)nref, (long long)((padded - 101) * hidden));
    CHECK(ref[STEPS - 1] < ref[0], "%s: loss did not fall (%g -> %g)", model, ref[0], ref[STEPS - 1]);
    if (g_rank == 0)
        printf("%-10s plan %-22s ranks %d: vocabulary 101 padded to %lld, losses %.5f -> %.5f, worst relative loss "
               "difference %.2e\n", model, plan, g_nranks, (long long)padded, run[0], run[STEPS - 1], worst);
    free(pref);
    free(prun);
}

/* A plan that the job cannot run: WF_INVAL on every rank, one line. */
static void refuse(const char *model, const char *plan, const char *what)
{
    wf_train_config c;
    config(&c, model, plan, 0);
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    const char *msg = wf_last_error();
    CHECK(st == WF_INVAL, "%s: %s gave status %d (%s), expected WF_INVAL", what, plan, (int)st, msg);
    CHECK(strchr(msg, '\n') == NULL && strlen(msg) > 0, "%s: the message is not one line: '%s'", what, msg);
    uint64_t lo, hi;
    wf_world_minmax_u64((uint64_t)(int64_t)st, &lo, &hi);
    CHECK(lo == hi, "%s: the ranks disagree on the status", what);
    if (g_rank == 0)
        printf("refused    %-30s %s\n", what, msg);
    wf_train_free(t);
}

/* Writes an op-level plan file (rank 0) for mesh with the given layouts. */
static void write_plan(const char *name, const char *model, const char *mesh, const char *const *ops,
                       const char *const *sigs, int n)
{
    if (g_rank == 0) {
        FILE *f = fopen(path_of(name), "w");
        if (f) {
            fprintf(f, "{\"format\": \"weft-plan\", \"version\": 1, \"plan\": \"mesh=%s,pp=1,micro_batches=1\",\n"
                       " \"model\": \"%s\", \"batch\": %d, \"stages\": [\"%s\"], \"layouts\": {",
                    mesh, model, BATCH, ops[0]);
            for (int i = 0; i < n; i++)
                fprintf(f, "%s\n  \"%s\": \"%s\"", i ? "," : "", ops[i], sigs[i]);
            fprintf(f, "}}\n");
            fclose(f);
        }
    }
    wf_world_barrier();
}

/* A small CNN with batchnorm (batch statistics) as a model file. */
static const char bn_model[] =
    "{\"name\": \"cnn-bn-tiny\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"images\", \"dtype\": \"fp32\", \"shape\": [\"B\", 1, 28, 28], \"role\": \"input\"},\n"
    "  {\"name\": \"labels\", \"dtype\": \"int32\", \"shape\": [\"B\"], \"role\": \"label\"},\n"
    "  {\"name\": \"conv1.weight\", \"dtype\": \"fp32\", \"shape\": [8, 1, 3, 3], \"role\": \"param\"},\n"
    "  {\"name\": \"bn1.weight\", \"dtype\": \"fp32\", \"shape\": [8], \"role\": \"param\"},\n"
    "  {\"name\": \"bn1.bias\", \"dtype\": \"fp32\", \"shape\": [8], \"role\": \"param\"},\n"
    "  {\"name\": \"fc.weight\", \"dtype\": \"fp32\", \"shape\": [1568, 10], \"role\": \"param\"},\n"
    "  {\"name\": \"fc.bias\", \"dtype\": \"fp32\", \"shape\": [10], \"role\": \"param\"}],\n"
    " \"ops\": [\n"
    "  {\"kind\": \"conv2d\", \"name\": \"conv1\", \"inputs\": [\"images\", \"conv1.weight\"], \"attrs\": {\"stride\": 1, \"pad\": 1}},\n"
    "  {\"kind\": \"batchnorm\", \"name\": \"bn1\", \"inputs\": [\"conv1\", \"bn1.weight\", \"bn1.bias\"], \"attrs\": {\"eps\": 1e-5}},\n"
    "  {\"kind\": \"relu\", \"name\": \"relu1\", \"inputs\": [\"bn1\"]},\n"
    "  {\"kind\": \"maxpool\", \"name\": \"pool1\", \"inputs\": [\"relu1\"], \"attrs\": {\"kernel\": 2, \"stride\": 2}},\n"
    "  {\"kind\": \"flatten\", \"name\": \"flatten\", \"inputs\": [\"pool1\"]},\n"
    "  {\"kind\": \"linear\", \"name\": \"fc\", \"inputs\": [\"flatten\", \"fc.weight\", \"fc.bias\"]},\n"
    "  {\"kind\": \"cross_entropy\", \"name\": \"loss\", \"inputs\": [\"fc\", \"labels\"]}]}\n";

static void write_text(const char *name, const char *text)
{
    if (g_rank == 0) {
        FILE *f = fopen(path_of(name), "w");
        if (f) {
            fputs(text, f);
            fclose(f);
        }
    }
    wf_world_barrier();
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    if (g_nranks != 2 && g_nranks != 4) {
        if (g_rank == 0)
            fprintf(stderr, "run with 2 or 4 ranks\n");
        wf_mpi_stop(started);
        return 1;
    }
    /* Rank 0's temporary directory, named by its pid (the world's maximum). */
    uint64_t lo, hi;
    wf_world_minmax_u64(g_rank == 0 ? (uint64_t)getpid() : 0, &lo, &hi);
    snprintf(g_dir, sizeof g_dir, "/tmp/weft-test-spmd-%llu", (unsigned long long)hi);
    if (g_rank == 0 && mkdir(g_dir, 0700) != 0)
        fprintf(stderr, "cannot create %s\n", g_dir);
    wf_world_barrier();
    const char *only = getenv("WEFT_SPMD_ONLY");
#define WANT(name) (!only || strstr(name, only) != NULL)
    /* A llama with grouped-query attention: RMSNorm, rotary, SwiGLU, an
     * untied head, and the fused qkv split into unequal parts (4 query, 2
     * key/value heads), each part's shard on every rank. */
    static const char llama[] = "llama:layers=2,hidden=64,heads=4,kv_heads=2,seq=32,vocab=96,ffn=128,dtype=fp32";
    if (WANT("llama"))
        check(llama, g_nranks == 2 ? "tp=2,sp=1" : "tp=2,dp=2");
    static const char odd_vocab[] = "gpt:layers=2,hidden=32,heads=4,seq=16,vocab=101,dtype=fp32";
    if (WANT("vocab"))
        check_padded(odd_vocab, g_nranks == 2 ? "tp=2" : "tp=4", 32, g_nranks == 2 ? 256 : 512);
    if (g_nranks == 2) {
        if (WANT("tp=2"))
            check("gpt-tiny", "tp=2");
        if (WANT("tp=2,sp=1"))
            check("gpt-tiny", "tp=2,sp=1");
    } else {
        if (WANT("tp=2,dp=2"))
            check("gpt-tiny", "tp=2,dp=2");
        if (WANT("tp=2,dp=2,sp=1"))
            check("gpt-tiny", "tp=2,dp=2,sp=1");
        /* The data-parallel axis under ddp and dear (whose clipping norm sums
         * reduce-scattered shards, weighted per float). */
        if (WANT("ddp")) {
            g_comm = "ddp:0.05";
            check("gpt-tiny", "tp=2,dp=2,sp=1");
        }
        if (WANT("dear")) {
            g_comm = "dear:0.05";
            check("gpt-tiny", "tp=2,dp=2");
        }
        g_comm = "wfbp";
    }
    if (g_nranks == 4) {
        /* The op-level planner's choices on the 2x2 mesh (weft plan --op-level
         * --mesh 2x2 --pp 1 -o FILE, batch 8 on local:devices_per_node=4),
         * written out so that the test does not follow the cost model:
         * mlp-tiny: fc1's columns split over both axes (four ways), fc2
         * replicated (an all-gather between them); cnn-tiny: conv1's output
         * channels, conv2's input channels on the outer axis (a partial sum,
         * reduce-scattered into a batch split) and output channels on the
         * inner one, the classifier's rows on the inner axis and the loss's
         * batch on it. Then a Megatron-style MLP: the batch on the outer axis,
         * fc1 by columns and fc2 by rows on the inner. */
        static const char *const mlp_ops[] = {"fc1", "relu1", "fc2", "loss"};
        static const char *const mlp_planned[] = {"B,S1,S0->S1|B,S1,S0->S1", "S1->S1|S1->S1", "B,B,B->B|B,B,B->B",
                                                  "B,B->B|B,B->B"};
        static const char *const mlp_megatron[] = {"S0,B,B->S0|B,S1,S0->S1", "S0->S0|S1->S1",
                                                   "S0,B,B->S0|S1,S0,P->P", "S0,S0->P|B,B->B"};
        static const char *const cnn_ops[] = {"conv1", "relu1", "pool1",   "conv2", "relu2",
                                              "pool2", "flatten", "fc", "loss"};
        static const char *const cnn_planned[] = {"B,S0,S0->S1|B,S0,S0->S1", "S1->S1|S1->S1", "S1->S1|S1->S1",
                                                  "S1,S1,P->P|B,S0,S0->S1",  "S0->S0|S1->S1", "S0->S0|S1->S1",
                                                  "S0->S0|S1->S1",           "B,B,B->B|S1,S0,P->P",
                                                  "B,B->B|S0,S0->P"};
        if (WANT("mlp-planned")) {
            write_plan("spmd_mlp_planned.json", "mlp-tiny", "2x2", mlp_ops, mlp_planned, 4);
            check("mlp-tiny", path_of("spmd_mlp_planned.json"));
        }
        if (WANT("mlp-megatron")) {
            write_plan("spmd_mlp_megatron.json", "mlp-tiny", "2x2", mlp_ops, mlp_megatron, 4);
            check("mlp-tiny", path_of("spmd_mlp_megatron.json"));
        }
        if (WANT("cnn-planned")) {
            write_plan("spmd_cnn_planned.json", "cnn-tiny", "2x2", cnn_ops, cnn_planned, 9);
            check("cnn-tiny", path_of("spmd_cnn_planned.json"));
        }
    }
    /* An all-to-all: fc1's columns split, the rest by the batch (S1 -> S0
     * between them, and back in backward); no parameter is B on the axis,
     * so fc2's partial gradients are all-reduced in their carriers. */
    if (WANT("alltoall")) {
        static const char *const ops[] = {"fc1", "relu1", "fc2", "loss"};
        static const char *const sigs[] = {"B,S1,S0->S1", "S0->S0", "S0,B,B->S0", "S0,S0->P"};
        char mesh[8];
        snprintf(mesh, sizeof mesh, "%d", g_nranks);
        write_plan("spmd_mlp_alltoall.json", "mlp-tiny", mesh, ops, sigs, 4);
        check("mlp-tiny", path_of("spmd_mlp_alltoall.json"));
        /* The step is wf_sbp_boxing_path's: one all-to-all each way, or (where
         * its cost model finds it cheaper) an all-gather and a local slice. */
        CHECK((g_info.spmd_alltoalls == 2 && g_info.spmd_allgathers == 0) ||
                  (g_info.spmd_alltoalls == 0 && g_info.spmd_allgathers == 2),
              "S1 -> S0 and back: %lld all-to-alls, %lld all-gathers per step", (long long)g_info.spmd_alltoalls,
              (long long)g_info.spmd_allgathers);
    }
    /* Batchnorm with the batch split: the statistics and their gradient
     * terms all-reduced inside the op; on 4 ranks the channels split too
     * (conv1's filters, bn1's gamma and beta, fc's rows: a partial sum). */
    if (WANT("batchnorm")) {
        static const char *const bn_ops[] = {"conv1", "bn1", "relu1", "pool1", "flatten", "fc", "loss"};
        static const char *const bn_dp[] = {"S0,B->S0", "S0,B,B->S0", "S0->S0", "S0->S0",
                                            "S0->S0",   "S0,B,B->S0", "S0,S0->P"};
        static const char *const bn_2x2[] = {"S0,B->S0|B,S0->S1",       "S0,B,B->S0|S1,S0,S0->S1",
                                             "S0->S0|S1->S1",            "S0->S0|S1->S1",
                                             "S0->S0|S1->S1",            "S0,B,B->S0|S1,S0,P->P",
                                             "S0,S0->P|B,B->B"};
        char mesh[8];
        snprintf(mesh, sizeof mesh, "%d", g_nranks);
        write_text("spmd_bn_model.json", bn_model);
        write_plan("spmd_bn_dp.json", path_of("spmd_bn_model.json"), mesh, bn_ops, bn_dp, 7);
        check(path_of("spmd_bn_model.json"), path_of("spmd_bn_dp.json"));
        if (g_nranks == 4) {
            write_plan("spmd_bn_2x2.json", path_of("spmd_bn_model.json"), "2x2", bn_ops, bn_2x2, 7);
            check(path_of("spmd_bn_model.json"), path_of("spmd_bn_2x2.json"));
        }
    }
    if (WANT("refuse")) {
        refuse("gpt-tiny", "tp=8", "a mesh of 8 devices");
        static const char *const ops[] = {"fc1", "relu1", "fc2", "loss"};
        static const char *const sigs[] = {"B,S1,S0->S1", "S1->S1", "S1,S0,P->P", "B,B->B"};
        char mesh[8], eight[] = "8";
        snprintf(mesh, sizeof mesh, "%d", g_nranks);
        write_plan("spmd_mesh8.json", "mlp-tiny", eight, ops, sigs, 4);
        refuse("mlp-tiny", path_of("spmd_mesh8.json"), "an op-level mesh of 8");
        write_plan("spmd_nodivide.json", "mlp-tiny:sizes=784-63-10", mesh, ops, sigs, 4);
        refuse("mlp-tiny:sizes=784-63-10", path_of("spmd_nodivide.json"), "a split that does not divide");
        /* A vocabulary runs padded (check_padded); an MLP width is not padded. */
        refuse("gpt-tiny:ffn=255", "tp=2", "an MLP width tp=2 does not divide");
    }
    if (g_rank == 0) {
        static const char *const files[] = {"spmd_mlp_planned.json", "spmd_mlp_megatron.json", "spmd_cnn_planned.json",
                                            "spmd_bn_model.json",    "spmd_bn_dp.json",         "spmd_bn_2x2.json",
                                            "spmd_mesh8.json",       "spmd_nodivide.json",     "spmd_mlp_alltoall.json"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            remove(path_of(files[i]));
        rmdir(g_dir);
    }
    return harness_finish(started);
}
