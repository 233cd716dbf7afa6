/* The interlaced pipeline's schedule (SuperScaler's 1F1B+, Lin et al.,
 * arXiv 2301.08984): the order of tasks on each device, and a player that
 * times those orders. The estimate plays the orders with its per-stage and
 * per-segment times; the simulator builds its task graph in the same
 * orders; `weft plan --detail` prints them.
 *
 * A pipeline of p stages runs its layers in 1F1B (PipeDream-Flush: stage i
 * runs min(p-i-1, m) warm-up forwards, then a forward and a backward in
 * turn, then the backwards left). Three segments per micro-batch hold every
 * device of the pipeline at once: the embedding's forward (EF), the head's
 * forward, loss and backward (H), the embedding's backward (EB). Their
 * place in every device's order comes from one ideal clock: 1F1B played
 * with a forward of 1 and a backward of 2 and no segments: H(j) takes the
 * end of the last stage's forward of j (a segment goes before a stage task
 * of the same time). The embedding's segments are not interlaced: every
 * EF opens the iteration and every EB closes it, where no stage has work
 * they would interrupt (interlacing them too puts three all-device
 * barriers in each 1F1B period, and each costs the stages' misalignment:
 * on GPT-3 13B with a 256k vocabulary on 64 V100s over InfiniBand the
 * iteration went from 4.01 s to 4.57 s). Every dependency goes from an
 * earlier clock time to a later one, so the orders cannot deadlock. */
#include "weft/plan.h"

#include <stdlib.h>
#include <string.h>

int wf_ptask_all_devices(int kind)
{
    return kind == WF_PTASK_EMB_FWD || kind == WF_PTASK_HEAD || kind == WF_PTASK_EMB_BWD;
}

const char *wf_ptask_name(int kind)
{
    static const char *const names[WF_PTASK_COUNT] = {"F", "B", "EF", "H", "EB"};
    return kind >= 0 && kind < WF_PTASK_COUNT ? names[kind] : "?";
}

/* Stage s's 1F1B order of its own forwards and backwards (2m tasks). */
static int order_1f1b(int p, int m, int s, wf_plan_task *out)
{
    int warm = p - s - 1 < m ? p - s - 1 : m, k = 0, f = 0, b = 0;
    for (; f < warm; f++)
        out[k++] = (wf_plan_task){WF_PTASK_FWD, f};
    while (f < m) {
        out[k++] = (wf_plan_task){WF_PTASK_FWD, f++};
        out[k++] = (wf_plan_task){WF_PTASK_BWD, b++};
    }
    while (b < m)
        out[k++] = (wf_plan_task){WF_PTASK_BWD, b++};
    return k;
}

/* The player. orders[s] holds n[s] tasks; a segment must appear in every
 * order. Stage tasks: F(s,j) after F(s-1,j) (s = 0: after EF(j)), B(s,j)
 * after B(s+1,j) (the last stage: after H(j)); H(j) after F(p-1,j); EB(j)
 * after B(0,j). fs/bs per stage, the segments' times in seg[kind]. start
 * and end ([p][5m], may be NULL) receive each task's times. */
typedef struct {
    int p, m;
    const wf_plan_task *const *orders;
    const int *n;
    const double *fs, *bs;
    double seg[WF_PTASK_COUNT];
} play_in;

static wf_status play(const play_in *in, double *task_end, double *dev_end, double *makespan)
{
    const int p = in->p, m = in->m;
    /* Ends of F(s,j), B(s,j) at [s*m+j]; of the segments at [kind*m+j]. */
    double *fend = malloc(sizeof(double) * (size_t)p * (size_t)m * 2 + sizeof(double) * WF_PTASK_COUNT * (size_t)m);
    int *pos = calloc((size_t)p, sizeof *pos);
    double *free_t = calloc((size_t)p, sizeof *free_t);
    if (!fend || !pos || !free_t) {
        free(fend);
        free(pos);
        free(free_t);
        return wf_errorf(WF_NOMEM, "out of memory playing an interlaced pipeline");
    }
    double *bend = fend + (size_t)p * m, *send = bend + (size_t)p * m;
    for (size_t i = 0; i < (size_t)p * m * 2 + WF_PTASK_COUNT * (size_t)m; i++)
        fend[i] = -1;
    int left = 0;
    for (int s = 0; s < p; s++)
        left += in->n[s];
    wf_status st = WF_OK;
    while (left > 0) {
        int moved = 0;
        for (int s = 0; s < p; s++) {
            while (pos[s] < in->n[s]) {
                wf_plan_task t = in->orders[s][pos[s]];
                double ready;
                if (t.kind == WF_PTASK_FWD) {
                    ready = s == 0 ? send[WF_PTASK_EMB_FWD * m + t.mb] : fend[(s - 1) * m + t.mb];
                } else if (t.kind == WF_PTASK_BWD) {
                    ready = s == p - 1 ? send[WF_PTASK_HEAD * m + t.mb] : bend[(s + 1) * m + t.mb];
                } else {
                    /* A segment: every device at it, its input made. */
                    int all = 1;
                    for (int d = 0; d < p && all; d++)
                        all = pos[d] < in->n[d] && in->orders[d][pos[d]].kind == t.kind &&
                              in->orders[d][pos[d]].mb == t.mb;
                    if (!all)
                        break;
                    ready = t.kind == WF_PTASK_EMB_FWD ? 0
                          : t.kind == WF_PTASK_HEAD    ? fend[(p - 1) * m + t.mb]
                                                       : bend[t.mb];
                    if (ready < 0)
                        break;
                    double start = ready;
                    for (int d = 0; d < p; d++)
                        start = free_t[d] > start ? free_t[d] : start;
                    double end = start + in->seg[t.kind];
                    send[t.kind * m + t.mb] = end;
                    for (int d = 0; d < p; d++) {
                        if (task_end)
                            task_end[(size_t)d * 5 * m + pos[d]] = end;
                        free_t[d] = end;
                        pos[d]++;
                    }
                    left -= p;
                    moved = 1;
                    continue;
                }
                if (ready < 0)
                    break;
                double start = free_t[s] > ready ? free_t[s] : ready;
                double end = start + (t.kind == WF_PTASK_FWD ? in->fs[s] : in->bs[s]);
                (t.kind == WF_PTASK_FWD ? fend : bend)[s * m + t.mb] = end;
                if (task_end)
                    task_end[(size_t)s * 5 * m + pos[s]] = end;
                free_t[s] = end;
                pos[s]++;
                left--;
                moved = 1;
            }
        }
        if (!moved) {
            st = wf_errorf(WF_INTERNAL, "interlaced pipeline: the orders wait on each other");
            break;
        }
    }
    double mk = 0;
    for (int s = 0; s < p; s++) {
        if (dev_end)
            dev_end[s] = free_t[s];
        mk = free_t[s] > mk ? free_t[s] : mk;
    }
    if (makespan)
        *makespan = mk;
    free(fend);
    free(pos);
    free(free_t);
    return st;
}

wf_status wf_plan_interlace_order(int p, int m, int stage, wf_plan_task *out, int cap, int *n)
{
    if (p < 2 || p > (1 << 16))
        return wf_errorf(WF_INVAL, "interlaced pipeline: pp=%d (at least 2 stages)", p);
    if (m < 1)
        return wf_errorf(WF_INVAL, "interlaced pipeline: m=%d micro-batches (at least 1)", m);
    if (stage < 0 || stage >= p)
        return wf_errorf(WF_INVAL, "interlaced pipeline: stage %d of %d", stage, p);
    if ((int64_t)5 * m > cap)
        return wf_errorf(WF_INVAL, "interlaced pipeline: %lld tasks do not fit the %d given", (long long)5 * m, cap);
    /* The ideal clock: plain 1F1B of every stage, forward 1, backward 2. */
    wf_plan_task *plain = malloc(sizeof *plain * (size_t)p * 2 * (size_t)m);
    const wf_plan_task **orders = malloc(sizeof *orders * (size_t)p);
    int *cnt = malloc(sizeof *cnt * (size_t)p);
    double *end = malloc(sizeof *end * (size_t)p * 5 * (size_t)m);
    wf_status st = WF_OK;
    if (!plain || !orders || !cnt || !end) {
        st = wf_errorf(WF_NOMEM, "out of memory ordering an interlaced pipeline");
        goto out;
    }
    for (int s = 0; s < p; s++) {
        orders[s] = plain + (size_t)s * 2 * m;
        cnt[s] = order_1f1b(p, m, s, plain + (size_t)s * 2 * m);
    }
    /* The clock plays the segments as instantaneous: EF(j) at 0, H(j) at
     * the last stage's forward's end. */
    {
        double *fend = malloc(sizeof(double) * (size_t)p * m * 2);
        int *pos = calloc((size_t)p, sizeof *pos);
        double *free_t = calloc((size_t)p, sizeof *free_t);
        if (!fend || !pos || !free_t) {
            free(fend);
            free(pos);
            free(free_t);
            st = wf_errorf(WF_NOMEM, "out of memory ordering an interlaced pipeline");
            goto out;
        }
        double *bend = fend + (size_t)p * m;
        for (size_t i = 0; i < (size_t)p * m * 2; i++)
            fend[i] = -1;
        int left = 2 * m * p;
        while (left > 0 && st == WF_OK) {
            int moved = 0;
            for (int s = 0; s < p; s++)
                while (pos[s] < cnt[s]) {
                    wf_plan_task t = orders[s][pos[s]];
                    double ready = t.kind == WF_PTASK_FWD ? (s == 0 ? 0 : fend[(s - 1) * m + t.mb])
                                                          : (s == p - 1 ? fend[s * m + t.mb] : bend[(s + 1) * m + t.mb]);
                    if (ready < 0)
                        break;
                    double start = free_t[s] > ready ? free_t[s] : ready;
                    double e = start + (t.kind == WF_PTASK_FWD ? 1.0 : 2.0);
                    (t.kind == WF_PTASK_FWD ? fend : bend)[s * m + t.mb] = e;
                    end[(size_t)s * 5 * m + pos[s]] = e;
                    free_t[s] = e;
                    pos[s]++;
                    left--;
                    moved = 1;
                }
            if (!moved)
                st = wf_errorf(WF_INTERNAL, "interlaced pipeline: 1F1B waits on itself");
        }
        /* Merge: the stage's tasks keyed by their start (class 1), the
         * segments by their clock time (class 0, before a stage task of the
         * same time; among themselves EF, H, EB, then by micro-batch). */
        int k = 0, a = 0, j[3] = {0, 0, 0};
        const int kinds[3] = {WF_PTASK_EMB_FWD, WF_PTASK_HEAD, WF_PTASK_EMB_BWD};
        while (st == WF_OK && k < 5 * m) {
            double best = 1e300;
            int pick = -1; /* 0..2 a segment kind, 3 the stage's next task */
            for (int q = 0; q < 3; q++) {
                if (j[q] >= m)
                    continue;
                double key = q == 0 ? -1.0 : q == 1 ? fend[(p - 1) * m + j[q]] : 1e299;
                if (key < best) {
                    best = key;
                    pick = q;
                }
            }
            if (a < cnt[stage]) {
                wf_plan_task t = orders[stage][a];
                double dur = t.kind == WF_PTASK_FWD ? 1.0 : 2.0;
                double key = end[(size_t)stage * 5 * m + a] - dur;
                if (key < best)
                    pick = 3;
            }
            if (pick == 3)
                out[k++] = orders[stage][a++];
            else
                out[k++] = (wf_plan_task){kinds[pick], j[pick]++};
        }
        *n = k;
        free(fend);
        free(pos);
        free(free_t);
    }
out:
    free(plain);
    free(orders);
    free(cnt);
    free(end);
    return st;
}

wf_status wf_plan_interlace_play(int p, int m, const double *f_s, const double *b_s, double ef_s, double h_s,
                                 double eb_s, double *end_s, double *makespan_s)
{
    if (p < 2 || m < 1)
        return wf_errorf(WF_INVAL, "interlaced pipeline: pp=%d, m=%d", p, m);
    wf_plan_task *all = malloc(sizeof *all * (size_t)p * 5 * (size_t)m);
    const wf_plan_task **orders = malloc(sizeof *orders * (size_t)p);
    int *cnt = malloc(sizeof *cnt * (size_t)p);
    wf_status st = WF_OK;
    if (!all || !orders || !cnt) {
        st = wf_errorf(WF_NOMEM, "out of memory playing an interlaced pipeline");
        goto out;
    }
    for (int s = 0; s < p && st == WF_OK; s++) {
        orders[s] = all + (size_t)s * 5 * m;
        st = wf_plan_interlace_order(p, m, s, all + (size_t)s * 5 * m, 5 * m, &cnt[s]);
    }
    if (st == WF_OK) {
        play_in in = {p, m, orders, cnt, f_s, b_s, {0}};
        in.seg[WF_PTASK_EMB_FWD] = ef_s;
        in.seg[WF_PTASK_HEAD] = h_s;
        in.seg[WF_PTASK_EMB_BWD] = eb_s;
        st = play(&in, NULL, end_s, makespan_s);
    }
out:
    free(all);
    free(orders);
    free(cnt);
    return st;
}
