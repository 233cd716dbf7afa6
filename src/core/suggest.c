/* "Did you mean X?": the closest known name to a misspelt one, and the
 * spelling variants that resolve to a name outright. One place for every
 * unknown name weft reports: models, family keys, clusters, cluster keys, data
 * sets, options, plan keys and comm schedules.
 *
 * Two names are variants of each other when they agree after folding: case is
 * ignored and '-', '_' and '.' are dropped ("Llama-2-7B", "llama2_7b" and
 * "llama2-7b" fold alike). Otherwise the suggestion is the candidate at the
 * smallest edit distance (Levenshtein over folded names) when that distance is
 * small for the name's length, or a candidate that is one of the name's
 * '-'-separated words ("--global-batch-size" suggests "--batch"). Ties go to the
 * earlier candidate, so suggestions are deterministic. */
#include "weft/core.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

void wf_name_fold(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 1 < cap; in++) {
        if (*in == '-' || *in == '_' || *in == '.')
            continue;
        out[n++] = (char)tolower((unsigned char)*in);
    }
    if (cap)
        out[n] = 0;
}

int wf_edit_distance(const char *a, const char *b)
{
    char fa[128], fb[128];
    wf_name_fold(a, fa, sizeof fa);
    wf_name_fold(b, fb, sizeof fb);
    size_t na = strlen(fa), nb = strlen(fb);
    int row[128];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (fa[i - 1] != fb[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

int wf_resolve_fold(const char *name, const char *const *cands, int n)
{
    char fn[128], fc[128];
    wf_name_fold(name, fn, sizeof fn);
    int found = -1;
    for (int i = 0; i < n; i++) {
        wf_name_fold(cands[i], fc, sizeof fc);
        if (strcmp(fn, fc) != 0)
            continue;
        if (found >= 0)
            return -1; /* ambiguous: resolve nothing */
        found = i;
    }
    return found;
}

/* 1 when cand is one of the '-'/'_'-separated words of name (at least 3 letters). */
static int is_word_of(const char *name, const char *cand)
{
    size_t m = strlen(cand);
    if (m < 3)
        return 0;
    for (const char *p = name; *p;) {
        while (*p == '-' || *p == '_')
            p++;
        const char *e = p;
        while (*e && *e != '-' && *e != '_')
            e++;
        if ((size_t)(e - p) == m && strncasecmp(p, cand, m) == 0)
            return 1;
        p = e;
    }
    return 0;
}

const char *wf_suggest(const char *name, const char *const *cands, int n)
{
    if (!name || !*name)
        return NULL;
    char fn[128];
    wf_name_fold(name, fn, sizeof fn);
    int len = (int)strlen(fn);
    int limit = len <= 3 ? 1 : len <= 8 ? 2 : 3;
    int best = -1, best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        if (strcmp(name, cands[i]) == 0)
            continue; /* the name itself is no suggestion (a list's prose may hold it) */
        int d = wf_edit_distance(name, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = i;
        }
    }
    if (best >= 0)
        return cands[best];
    for (int i = 0; i < n; i++)
        if (is_word_of(name, cands[i]))
            return cands[i];
    return NULL;
}

const char *wf_suggest_in_list(const char *name, const char *list, char *buf, size_t cap)
{
    /* Split "a, b, c" (or "a b c") into at most 64 candidates. */
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", list ? list : "");
    const char *cands[64];
    int n = 0;
    for (char *p = copy; *p && n < 64;) {
        while (*p == ',' || *p == ' ')
            *p++ = 0;
        if (!*p)
            break;
        char *w = p;
        while (*p && *p != ',' && *p != ' ')
            p++;
        if (*p)
            *p++ = 0;
        if (!strchr(w, '<')) /* "<level>_bw_bps" is a pattern, not a name */
            cands[n++] = w;
    }
    const char *s = wf_suggest(name, cands, n);
    if (!s)
        return NULL;
    snprintf(buf, cap, "%s", s);
    return buf;
}

const char *wf_did_you_mean(const char *suggestion, char *buf, size_t cap)
{
    if (!suggestion) {
        if (cap)
            buf[0] = 0;
        return buf;
    }
    snprintf(buf, cap, "; did you mean '%s'?", suggestion);
    return buf;
}
