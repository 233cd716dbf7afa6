/* Pictures (issue 13): the time/memory frontier of `weft plan --plot` and the
 * timeline of `weft simulate --plot`, as SVG written by hand (no library: a few
 * element kinds), and the same data as CSV (--csv). Every mark carries a class
 * ("pt", "chosen", "budget", "task", "bubble") so tests can count them. Files
 * are built in memory and written atomically. */
#include "cli/cli.h"
#include "weft/sim.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------ */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* A CSV field: quoted, with quotes doubled (plan strings hold commas). */
static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Writes what a memstream built to path (atomically), freeing it. */
static wf_status finish(FILE *f, char **buf, size_t *len, const char *path)
{
    /* fclose sets *buf and *len, so they are read only after it. */
    if (fclose(f) != 0) {
        free(*buf);
        return wf_errorf(WF_NOMEM, "out of memory writing %s", path);
    }
    wf_status st = wf_file_write_atomic(path, *buf, *len);
    free(*buf);
    return st;
}

/* The title, centred; a '\n' starts a second, smaller line. */
static void title_text(FILE *f, double W, const char *title)
{
    const char *nl = strchr(title, '\n');
    char first[512];
    size_t n = nl ? (size_t)(nl - title) : strlen(title);
    if (n >= sizeof first)
        n = sizeof first - 1; /* a longer first line is cut: it is a figure's title */
    memcpy(first, title, n);
    first[n] = '\0';
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    xml_text(f, first);
    fprintf(f, "</text>\n");
    if (nl) {
        fprintf(f, "<text x=\"%.0f\" y=\"38\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">", W / 2);
        xml_text(f, nl + 1);
        fprintf(f, "</text>\n");
    }
}

/* A "nice" step for about n ticks over [0, hi]. */
static double nice_step(double hi, int n)
{
    double raw = hi / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static const char *const PALETTE[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* ---- the frontier -------------------------------------------------------------------- */

/* Label placement: a label goes beside its point where it overlaps no label
 * placed before (right-above, right-below, left-above, left-below), else it
 * is left out (the point keeps its tooltip). Width from ~5.4 px a character. */
typedef struct {
    double x0, y0, x1, y1;
} box;

static int overlaps(const box *b, int n, box c)
{
    for (int i = 0; i < n; i++)
        if (c.x0 < b[i].x1 && b[i].x0 < c.x1 && c.y0 < b[i].y1 && b[i].y0 < c.y1)
            return 1;
    return 0;
}

wf_status wf_plot_frontier(const char *svg_path, const char *csv_path, const wf_plot_series *s, int ns,
                           int chosen_series, int chosen_point, double budget_gib, const char *title)
{
    double xmin = 1e300, xmax = budget_gib > 0 ? budget_gib : 0, ymax = 0;
    int npts = 0;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            xmin = fmin(xmin, s[k].mem_gib[i]);
            xmax = fmax(xmax, s[k].mem_gib[i]);
            ymax = fmax(ymax, s[k].time_s[i]);
            npts++;
        }
    if (npts == 0)
        return wf_errorf(WF_INVAL, "--plot: no plan to draw");
    if (csv_path) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
            return wf_errorf(WF_NOMEM, "out of memory");
        fprintf(f, "series,devices,plan,iteration_time_s,memory_gib,chosen\n");
        for (int k = 0; k < ns; k++)
            for (int i = 0; i < s[k].n; i++) {
                fprintf(f, "%d,%lld,", k, (long long)s[k].devices);
                csv_field(f, s[k].label[i]);
                fprintf(f, ",%.9g,%.9g,%d\n", s[k].time_s[i], s[k].mem_gib[i], k == chosen_series && i == chosen_point);
            }
        wf_status st = finish(f, &buf, &len, csv_path);
        if (st != WF_OK)
            return st;
    }
    if (!svg_path)
        return WF_OK;
    /* The x axis spans the plans and the budget, not from zero. */
    double span = xmax - xmin > 1e-9 ? xmax - xmin : fmax(xmax, 1.0);
    double xs = nice_step(span * 1.2, 8);
    double x_lo = floor((xmin - 0.1 * span) / xs) * xs;
    if (x_lo < 0)
        x_lo = 0;
    double x_hi = xmax + 0.08 * span;
    ymax *= 1.12;
    const double W = 960, H = 600, L = 80, R = 30, T = 50, B = 60;
    const double pw = W - L - R, ph = H - T - B;
#define PX(x) (L + ((x) - x_lo) / (x_hi - x_lo) * pw)
#define PY(y) (T + ph - (y) / ymax * ph)
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return wf_errorf(WF_NOMEM, "out of memory");
    box *placed = malloc((size_t)(npts + 8) * sizeof *placed);
    if (!placed) {
        fclose(f);
        free(buf);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    int nplaced = 0;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    title_text(f, W, title);
    fprintf(f, "<g class=\"axes\" stroke=\"#333\">\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n"
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n</g>\n",
            L, T + ph, L + pw, T + ph, L, T, L, T + ph);
    double ys = nice_step(ymax, 6);
    for (double x = x_lo; x <= x_hi + 1e-9; x += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                PX(x), T, PX(x), T + ph, PX(x), T + ph + 16, x);
    for (double y = 0; y <= ymax + 1e-9; y += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, PY(y), L + pw, PY(y), L - 6, PY(y) + 4, y);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">memory per device (GiB)</text>\n", L + pw / 2,
            H - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">iteration time "
               "(s)</text>\n", T + ph / 2, T + ph / 2);
    if (budget_gib > 0) {
        fprintf(f, "<line class=\"budget\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" "
                   "stroke-dasharray=\"6 4\"/>\n", PX(budget_gib), T, PX(budget_gib), T + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\" text-anchor=\"end\">memory budget %.1f GiB</text>\n",
                PX(budget_gib) - 4, T + 12, budget_gib);
        placed[nplaced++] = (box){PX(budget_gib) - 150, T, PX(budget_gib), T + 16};
    }
    if (ns > 1) /* the legend's corner */
        placed[nplaced++] = (box){L + pw - 115, T + 20, L + pw, T + 36 + 16 * ns};
    for (int k = 0; k < ns; k++) {
        const char *col = PALETTE[k % 10];
        if (s[k].n > 1) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-opacity=\"0.5\" points=\"", col);
            for (int i = 0; i < s[k].n; i++)
                fprintf(f, "%.1f,%.1f ", PX(s[k].mem_gib[i]), PY(s[k].time_s[i]));
            fprintf(f, "\"/>\n");
        }
        for (int i = 0; i < s[k].n; i++) {
            double x = PX(s[k].mem_gib[i]), y = PY(s[k].time_s[i]);
            fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>", x, y, col);
            xml_text(f, s[k].label[i]);
            fprintf(f, ": %.4g s, %.2f GiB</title></circle>\n", s[k].time_s[i], s[k].mem_gib[i]);
        }
    }
    /* labels after every point, so none hides one */
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            double x = PX(s[k].mem_gib[i]), y = PY(s[k].time_s[i]);
            const char *t = s[k].short_label ? s[k].short_label[i] : s[k].label[i];
            double w = 5.4 * (double)strlen(t);
            const box tries[4] = {{x + 6, y - 15, x + 6 + w, y - 4}, {x + 6, y + 3, x + 6 + w, y + 14},
                                  {x - 6 - w, y - 15, x - 6, y - 4}, {x - 6 - w, y + 3, x - 6, y + 14}};
            for (int q = 0; q < 4; q++) {
                box c = tries[q];
                if (c.x0 < L || c.x1 > W - 4 || overlaps(placed, nplaced, c))
                    continue;
                placed[nplaced++] = c;
                fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#333\">", c.x0,
                        c.y1 - 2);
                xml_text(f, t);
                fprintf(f, "</text>\n");
                break;
            }
        }
    if (chosen_series >= 0 && chosen_series < ns && chosen_point >= 0 && chosen_point < s[chosen_series].n) {
        double x = PX(s[chosen_series].mem_gib[chosen_point]), y = PY(s[chosen_series].time_s[chosen_point]);
        fprintf(f, "<circle class=\"chosen\" cx=\"%.1f\" cy=\"%.1f\" r=\"9\" fill=\"none\" stroke=\"#000\" "
                   "stroke-width=\"2\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" text-anchor=\"end\">chosen"
                   "</text>\n", x, y, x - 10, y + 22);
    }
    if (ns > 1) {
        for (int k = 0; k < ns; k++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%lld "
                       "devices</text>\n",
                    L + pw - 105, T + 30 + 16 * k, PALETTE[k % 10], L + pw - 95, T + 34 + 16 * k,
                    (long long)s[k].devices);
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    free(placed);
    return finish(f, &buf, &len, svg_path);
}

/* ---- the timeline (from the simulator's own trace) ----------------------------------- */

typedef struct {
    int pid, tid;
    char name[160];
    int compute;
} lane;

typedef struct {
    int lane, cat;
    double ts, dur; /* microseconds */
    const char *name;
} ev;

static int cmp_ev(const void *a, const void *b)
{
    const ev *x = a, *y = b;
    if (x->lane != y->lane)
        return x->lane < y->lane ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static const char *cat_colour(int c)
{
    static const char *const col[WF_SIM_CAT_COUNT] = {"#4e79a7", "#59a14f", "#edc948", "#b07aa1", "#f28e2b",
                                                       "#e15759", "#76b7b2", "#999999", "#bab0ac"};
    return c >= 0 && c < WF_SIM_CAT_COUNT ? col[c] : "#bab0ac";
}

static int lane_of(lane *lanes, int *nl, int cap, int pid, int tid)
{
    for (int i = 0; i < *nl; i++)
        if (lanes[i].pid == pid && lanes[i].tid == tid)
            return i;
    if (*nl >= cap)
        return -1;
    lanes[*nl] = (lane){pid, tid, "", tid == 0};
    return (*nl)++;
}

wf_status wf_plot_timeline(const char *trace_path, const char *svg_path, const char *csv_path, const char *title)
{
    cJSON *root = NULL;
    wf_status st = wf_json_read_file(trace_path, &root);
    if (st != WF_OK)
        return st;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    enum { MAXL = 256 };
    lane lanes[MAXL];
    int nl = 0;
    char pname[64][160];
    int npname = 0;
    memset(pname, 0, sizeof pname);
    size_t n = 0;
    int cap = 1024;
    ev *e = malloc((size_t)cap * sizeof *e);
    if (!e) {
        cJSON_Delete(root);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    double end = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, evs)
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(it, "ph");
        int pid = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "pid"));
        int tid = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "tid"));
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "name"));
        if (!cJSON_IsString(ph) || !nm)
            continue;
        if (strcmp(ph->valuestring, "M") == 0) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "args");
            const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "name"));
            if (!v)
                continue;
            if (strcmp(nm, "process_name") == 0 && pid >= 0 && pid < 64) {
                snprintf(pname[pid], sizeof pname[pid], "%s", v);
                npname = pid + 1 > npname ? pid + 1 : npname;
            } else if (strcmp(nm, "thread_name") == 0) {
                int l = lane_of(lanes, &nl, MAXL, pid, tid);
                if (l >= 0)
                    snprintf(lanes[l].name, sizeof lanes[l].name, "%s", v);
            }
            continue;
        }
        if (strcmp(ph->valuestring, "X") != 0)
            continue;
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "cat"));
        int c = WF_SIM_CAT_OTHER;
        for (int k = 0; cat && k < WF_SIM_CAT_COUNT; k++)
            if (strcmp(cat, wf_sim_cat_name((wf_sim_cat)k)) == 0)
                c = k;
        if (c == WF_SIM_CAT_MARKER)
            continue;
        int l = lane_of(lanes, &nl, MAXL, pid, tid);
        if (l < 0)
            continue;
        if (wf_grow(&e, &cap, (int64_t)n + 1, sizeof *e, 1024) != 0) {
            free(e);
            cJSON_Delete(root);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
        double ts = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "ts"));
        double dur = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "dur"));
        e[n++] = (ev){l, c, ts, dur, nm};
        if (ts + dur > end)
            end = ts + dur;
    }
    (void)npname;
    qsort(e, n, sizeof *e, cmp_ev);
    st = WF_OK;
    if (csv_path) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
            st = wf_errorf(WF_NOMEM, "out of memory");
        if (f) {
            fprintf(f, "device,stream,category,name,start_s,duration_s\n");
            for (size_t i = 0; i < n; i++) {
                const lane *ln = &lanes[e[i].lane];
                fprintf(f, "%d,", ln->pid);
                csv_field(f, ln->name);
                fprintf(f, ",%s,", wf_sim_cat_name((wf_sim_cat)e[i].cat));
                csv_field(f, e[i].name);
                fprintf(f, ",%.9g,%.9g\n", e[i].ts * 1e-6, e[i].dur * 1e-6);
            }
            st = finish(f, &buf, &len, csv_path);
        }
    }
    if (st == WF_OK && svg_path) {
        const double LW = 230, W = 1200, LH = 20, T = 56;
        const double pw = W - LW - 20, H = T + LH * nl + 70;
        double scale = end > 0 ? pw / end : 1;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f) {
            free(e);
            cJSON_Delete(root);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
                   "%.0f\" font-family=\"sans-serif\" font-size=\"11\">\n<rect x=\"0\" y=\"0\" width=\"%.0f\" "
                   "height=\"%.0f\" fill=\"white\"/>\n", W, H, W, H, W, H);
        title_text(f, W, title);
        for (int l = 0; l < nl; l++) {
            double y = T + LH * l;
            char label[200];
            snprintf(label, sizeof label, "%s%s%s", lanes[l].pid < 64 && pname[lanes[l].pid][0] ? pname[lanes[l].pid] : "",
                     lanes[l].pid < 64 && pname[lanes[l].pid][0] ? ": " : "", lanes[l].name);
            if (strlen(label) > 36)
                snprintf(label + 33, sizeof label - 33, "...");
            fprintf(f, "<text x=\"4\" y=\"%.1f\">", y + 14);
            xml_text(f, label);
            fprintf(f, "</text>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f6f6f6\"/>\n", LW,
                    y + 2, pw, LH - 4);
        }
        /* Tasks: neighbours of one category closer than half a pixel merge into
         * one mark, so a long run stays a small file. Bubbles: a compute
         * stream's idle time between 0 and the end. */
        size_t i = 0;
        while (i < n) {
            size_t j = i;
            double x0 = e[i].ts * scale, x1 = (e[i].ts + e[i].dur) * scale;
            while (j + 1 < n && e[j + 1].lane == e[i].lane && e[j + 1].cat == e[i].cat &&
                   e[j + 1].ts * scale <= x1 + 0.5) {
                j++;
                x1 = fmax(x1, (e[j].ts + e[j].dur) * scale);
            }
            double y = T + LH * e[i].lane;
            fprintf(f, "<rect class=\"task\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
                       "<title>", LW + x0, y + 3, fmax(x1 - x0, 0.3), LH - 6, cat_colour(e[i].cat));
            xml_text(f, e[i].name);
            fprintf(f, "%s (%s) %.3f ms</title></rect>\n", j > i ? " ..." : "", wf_sim_cat_name((wf_sim_cat)e[i].cat),
                    (x1 - x0) / scale * 1e-3);
            i = j + 1;
        }
        for (int l = 0; l < nl; l++) {
            if (!lanes[l].compute)
                continue;
            double busy_to = 0;
            double y = T + LH * l;
            for (size_t k = 0; k <= n; k++) {
                if (k < n && e[k].lane != l)
                    continue;
                double start = k < n ? e[k].ts : end;
                if (start - busy_to > 0.002 * end)
                    fprintf(f, "<rect class=\"bubble\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                               "fill=\"url(#hatch)\" stroke=\"#c99\" stroke-width=\"0.5\"/>\n",
                            LW + busy_to * scale, y + 3, (start - busy_to) * scale, LH - 6);
                if (k < n)
                    busy_to = fmax(busy_to, e[k].ts + e[k].dur);
            }
        }
        fprintf(f, "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                   "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbeaea\"/><line x1=\"0\" "
                   "y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#e0a0a0\" stroke-width=\"2\"/></pattern></defs>\n");
        /* time axis and legend */
        double ly = T + LH * nl + 8, st_ms = nice_step(end * 1e-3, 10);
        for (double t = 0; t <= end * 1e-3 + 1e-9; t += st_ms)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/><text x=\"%.1f\" "
                       "y=\"%.1f\" text-anchor=\"middle\">%g ms</text>\n",
                    LW + t * 1e3 * scale, ly, LW + t * 1e3 * scale, ly + 5, LW + t * 1e3 * scale, ly + 17, t);
        double lx = LW;
        for (int c = 0; c < WF_SIM_CAT_COUNT; c++) {
            if (c == WF_SIM_CAT_MARKER)
                continue;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.1f\" "
                       "y=\"%.1f\">%s</text>\n", lx, ly + 30, cat_colour(c), lx + 16, ly + 40,
                    wf_sim_cat_name((wf_sim_cat)c));
            lx += 95;
        }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"url(#hatch)\"/><text x=\"%.1f\" "
                   "y=\"%.1f\">bubble (idle)</text>\n</svg>\n", lx, ly + 30, lx + 16, ly + 40);
        st = finish(f, &buf, &len, svg_path);
    }
    free(e);
    cJSON_Delete(root);
    return st;
}
