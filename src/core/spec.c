/* "name:key=value,key=value" specs and strict number parsing. */
#include "weft/core.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

wf_status wf_parse_int(const char *text, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "%s: empty value, expected an integer", what);
    /* Plain decimal digits, '-' first at most (then the range says): no
     * sign '+', no spaces, no hex (strtoll alone takes " +8"). */
    const char *d = text + (text[0] == '-');
    int plain = *d != 0;
    for (const char *q = d; *q; q++)
        plain &= *q >= '0' && *q <= '9';
    if (!plain)
        return wf_errorf(WF_INVAL, "%s=%s: expected an integer (decimal digits only)", what, text);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE)
        return wf_errorf(WF_INVAL, "%s=%s is out of range [%lld, %lld]", what, text, (long long)lo, (long long)hi);
    if (errno || *end)
        return wf_errorf(WF_INVAL, "%s=%s: expected an integer", what, text);
    if (v < lo || v > hi)
        return wf_errorf(WF_INVAL, "%s=%s is out of range [%lld, %lld]", what, text,
                         (long long)lo, (long long)hi);
    *out = v;
    return WF_OK;
}

wf_status wf_parse_num(const char *text, const char *what, double lo, double hi, double *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "%s: empty value, expected a number", what);
    /* Decimal notation only: no leading space or '+', no hex, inf or nan. */
    int plain = (text[0] >= '0' && text[0] <= '9') || text[0] == '-' || text[0] == '.';
    for (const char *q = text; *q; q++)
        plain &= strchr("0123456789.eE+-", *q) != NULL;
    if (!plain)
        return wf_errorf(WF_INVAL, "%s=%s: expected a number", what, text);
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v))
        return wf_errorf(WF_INVAL, "%s=%s: expected a number", what, text);
    if (v < lo || v > hi)
        return wf_errorf(WF_INVAL, "%s=%s is out of range [%g, %g]", what, text, lo, hi);
    *out = v;
    return WF_OK;
}

static int copy_field(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, src, n);
    dst[n] = 0;
    return 0;
}

wf_status wf_spec_parse(const char *text, wf_spec *out)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty specification");
    const char *colon = strchr(text, ':');
    const char *eq = strchr(text, '=');
    const char *rest = text;
    if (colon && (!eq || colon < eq)) {
        if (copy_field(out->name, sizeof out->name, text, (size_t)(colon - text)))
            return wf_errorf(WF_INVAL, "name too long in '%s'", text);
        rest = colon + 1;
        if (!*rest)
            return wf_errorf(WF_INVAL, "'%s': expected key=value after ':'", text);
    } else if (!eq) {
        if (copy_field(out->name, sizeof out->name, text, strlen(text)))
            return wf_errorf(WF_INVAL, "name too long: '%s'", text);
        return WF_OK;
    }
    while (*rest) {
        const char *comma = strchr(rest, ',');
        size_t n = comma ? (size_t)(comma - rest) : strlen(rest);
        const char *e = memchr(rest, '=', n);
        if (!e || e == rest)
            return wf_errorf(WF_INVAL, "'%.*s' in '%s': expected key=value", (int)n, rest, text);
        if (out->nkv == WF_SPEC_MAX_KV)
            return wf_errorf(WF_INVAL, "too many key=value pairs in '%s'", text);
        int i = out->nkv;
        if (copy_field(out->key[i], sizeof out->key[i], rest, (size_t)(e - rest)) ||
            copy_field(out->val[i], sizeof out->val[i], e + 1, n - (size_t)(e - rest) - 1))
            return wf_errorf(WF_INVAL, "'%.*s': key or value too long", (int)n, rest);
        if (!out->val[i][0])
            return wf_errorf(WF_INVAL, "'%s=': missing value", out->key[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(out->key[j], out->key[i]) == 0)
                return wf_errorf(WF_INVAL, "'%s' given twice in '%s'", out->key[i], text);
        out->nkv++;
        rest += n;
        if (*rest == ',') {
            rest++;
            if (!*rest)
                return wf_errorf(WF_INVAL, "'%s': trailing ','", text);
        }
    }
    return WF_OK;
}

static int find_key(wf_spec *s, const char *key)
{
    for (int i = 0; i < s->nkv; i++)
        if (strcmp(s->key[i], key) == 0) {
            s->used |= 1u << i;
            return i;
        }
    return -1;
}

int wf_spec_get_int(wf_spec *s, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    int i = find_key(s, key);
    if (i < 0)
        return 0;
    wf_status st = wf_parse_int(s->val[i], key, lo, hi, out);
    return st == WF_OK ? 1 : st;
}

int wf_spec_get_num(wf_spec *s, const char *key, double lo, double hi, double *out)
{
    int i = find_key(s, key);
    if (i < 0)
        return 0;
    wf_status st = wf_parse_num(s->val[i], key, lo, hi, out);
    return st == WF_OK ? 1 : st;
}

int wf_spec_get_str(wf_spec *s, const char *key, const char **out)
{
    int i = find_key(s, key);
    if (i < 0)
        return 0;
    *out = s->val[i];
    return 1;
}

wf_status wf_spec_check_unused(const wf_spec *s, const char *what, const char *allowed_hint)
{
    for (int i = 0; i < s->nkv; i++)
        if (!(s->used & (1u << i))) {
            char sug[64], dym[96];
            wf_did_you_mean(wf_suggest_in_list(s->key[i], allowed_hint, sug, sizeof sug), dym, sizeof dym);
            return wf_errorf(WF_INVAL, "unknown %s key '%s' (allowed: %s)%s", what, s->key[i],
                             allowed_hint ? allowed_hint : "none", dym);
        }
    return WF_OK;
}
