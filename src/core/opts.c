/* CLI option tables: one table drives the parser and the --help text. */
#include "weft/core.h"

#include <string.h>

static const wf_opt *find_long(const wf_opt *opts, const char *name, size_t n)
{
    for (const wf_opt *o = opts; o->name; o++)
        if (strlen(o->name) == n && strncmp(o->name, name, n) == 0)
            return o;
    return NULL;
}

static const wf_opt *find_short(const wf_opt *opts, char c)
{
    for (const wf_opt *o = opts; o->name; o++)
        if (o->short_name && o->short_name == c)
            return o;
    return NULL;
}

/* "; did you mean '--batch'?" for an unknown option (name without dashes). */
static const char *option_hint(const wf_opt *opts, const char *name, size_t n, char *buf, size_t cap)
{
    const char *cands[64];
    int k = 0;
    for (const wf_opt *o = opts; o->name && k < 64; o++)
        cands[k++] = o->name;
    char given[128];
    snprintf(given, sizeof given, "%.*s", (int)(n < sizeof given ? n : sizeof given - 1), name);
    const char *s = wf_suggest(given, cands, k);
    if (!s) {
        buf[0] = 0;
        return buf;
    }
    snprintf(buf, cap, "; did you mean '--%s'?", s);
    return buf;
}

static wf_status set_value(const wf_opt *o, const char *val)
{
    char what[64];
    snprintf(what, sizeof what, "--%s", o->name);
    switch (o->type) {
    case WF_OPT_INT:
        /* INT64_MIN is the tables' "not given" sentinel: it cannot be typed. */
        return wf_parse_int(val, what, INT64_MIN + 1, INT64_MAX, (int64_t *)o->dest);
    case WF_OPT_NUM:
        return wf_parse_num(val, what, -1e308, 1e308, (double *)o->dest);
    case WF_OPT_STR:
        *(const char **)o->dest = val;
        return WF_OK;
    case WF_OPT_FLAG:
        break;
    }
    return wf_errorf(WF_INTERNAL, "option --%s has no value type", o->name);
}

wf_status wf_opts_parse(const wf_opt *opts, int argc, char **argv, int first,
                        const char **pos, int max_pos, int *npos, int *help)
{
    unsigned char seen[64] = {0};
    int count = 0;
    for (const wf_opt *o = opts; o->name; o++)
        count++;
    if (count > 64)
        return wf_errorf(WF_INTERNAL, "option table too long");
    *npos = 0;
    *help = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const wf_opt *o = NULL;
        const char *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = 1;
            return WF_OK;
        }
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t n = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(opts, name, n);
            if (!o)
            {
                char hint[96];
                return wf_errorf(WF_INVAL, "unknown option '%.*s' (see --help)%s", (int)(n + 2), a,
                                 option_hint(opts, name, n, hint, sizeof hint));
            }
            if (eq)
                val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2] && !(a[1] >= '0' && a[1] <= '9')) {
            o = find_short(opts, a[1]);
            if (!o)
                return wf_errorf(WF_INVAL, "unknown option '%s' (see --help)", a);
        } else {
            if (*npos >= max_pos)
                return wf_errorf(WF_INVAL, "unexpected argument '%s' (see --help)", a);
            pos[(*npos)++] = a;
            continue;
        }
        seen[o - opts] = 1;
        if (o->type == WF_OPT_FLAG) {
            if (val)
                return wf_errorf(WF_INVAL, "option --%s takes no value", o->name);
            *(int *)o->dest = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                return wf_errorf(WF_INVAL, "option --%s needs a value (%s)", o->name,
                                 o->metavar ? o->metavar : "value");
            val = argv[++i];
        }
        wf_status st = set_value(o, val);
        if (st != WF_OK)
            return st;
    }
    for (const wf_opt *o = opts; o->name; o++)
        if (o->required && !seen[o - opts])
            return wf_errorf(WF_INVAL, "missing required option --%s", o->name);
    return WF_OK;
}

/* One option as the usage line writes it: "--model M", "--json". */
static void usage_word(const wf_opt *o, char *buf, size_t cap)
{
    const char *mv = o->type == WF_OPT_FLAG ? "" : (o->metavar ? o->metavar : "V");
    snprintf(buf, cap, "--%s%s%s", o->name, *mv ? " " : "", mv);
}

void wf_opts_usage(FILE *f, const char *command, const char *summary, const wf_opt *opts)
{
    /* The usage line comes from the table, so it lists every option: the
     * required ones first, then the others in brackets, wrapped at 100
     * columns. `command` is what precedes them ("weft show MODEL"). */
    fprintf(f, "usage: %s", command);
    size_t col = 7 + strlen(command), indent = 8 + strlen(command);
    if (indent > 40)
        indent = 12;
    for (int pass = 0; pass < 2; pass++)
        for (const wf_opt *o = opts; o->name; o++) {
            if ((pass == 0) != (o->required != 0))
                continue;
            char w[96], word[100];
            usage_word(o, w, sizeof w);
            snprintf(word, sizeof word, pass == 0 ? "%s" : "[%s]", w);
            if (col + 1 + strlen(word) > 100) {
                fprintf(f, "\n%*s", (int)indent - 1, "");
                col = indent - 1;
            }
            fprintf(f, " %s", word);
            col += 1 + strlen(word);
        }
    fputc('\n', f);
    if (summary)
        fprintf(f, "\n%s\n", summary);
    fprintf(f, "\noptions:\n");
    for (const wf_opt *o = opts; o->name; o++) {
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->short_name, o->name,
                     o->type == WF_OPT_FLAG ? "" : " ", o->type == WF_OPT_FLAG ? "" : (o->metavar ? o->metavar : "V"));
        else
            snprintf(left, sizeof left, "    --%s%s%s", o->name,
                     o->type == WF_OPT_FLAG ? "" : " ", o->type == WF_OPT_FLAG ? "" : (o->metavar ? o->metavar : "V"));
        fprintf(f, "  %-28s %s%s\n", left, o->help ? o->help : "", o->required ? " (required)" : "");
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}
