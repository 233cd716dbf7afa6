/* JSON helpers over cJSON: parsing with located errors, atomic writing, and
 * validating field access (every bad field is an error that names it). */
#include "weft/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in an object anywhere in j (NULL: none).
 * cJSON keeps duplicates and its lookups take the first, which would silently
 * ignore the second; sorting the keys finds repeats in n log n. */
static const char *duplicate_key(const cJSON *j, int *nomem)
{
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return NULL;
    size_t n = 0;
    for (const cJSON *it = j->child; it; it = it->next) {
        const char *d = duplicate_key(it, nomem);
        if (d || *nomem)
            return d;
        n++;
    }
    if (!cJSON_IsObject(j) || n < 2)
        return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        *nomem = 1;
        return NULL;
    }
    size_t k = 0;
    for (const cJSON *it = j->child; it; it = it->next)
        keys[k++] = it->string ? it->string : "";
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    free(keys);
    return dup;
}

/* Line and column (both from 1; the column counts bytes) of byte `off`. */
static void line_col(const char *text, size_t off, long *line, long *col)
{
    *line = 1;
    size_t start = 0;
    for (size_t i = 0; i < off && text[i]; i++)
        if (text[i] == '\n') {
            (*line)++;
            start = i + 1;
        }
    *col = (long)(off - start) + 1;
}

/* The offset of the first \u0000 escape inside a string of text, or -1: cJSON
 * would cut the string there, so "LlamaForCausalLM\u0000junk" would read as a
 * name it is not. */
static long nul_escape(const char *text)
{
    for (const char *p = strstr(text, "\\u0000"); p; p = strstr(p + 1, "\\u0000")) {
        size_t backslashes = 0;
        while (p - (long)backslashes > text && p[-(long)backslashes - 1] == '\\')
            backslashes++;
        if (backslashes % 2 == 0)
            return (long)(p - text);
    }
    return -1;
}

wf_status wf_json_parse(const char *text, const char *what, cJSON **out)
{
    const char *end = NULL;
    long line, col;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (!*out) {
        size_t off = end ? (size_t)(end - text) : 0;
        line_col(text, off, &line, &col);
        return wf_errorf(WF_FORMAT, "%s: malformed JSON at line %ld, column %ld (byte %zu)", what, line, col, off);
    }
    long nul = nul_escape(text);
    if (nul >= 0) {
        cJSON_Delete(*out);
        *out = NULL;
        line_col(text, (size_t)nul, &line, &col);
        return wf_errorf(WF_FORMAT, "%s: a string holds a NUL character (\\u0000) at line %ld, column %ld", what,
                         line, col);
    }
    int nomem = 0;
    const char *dup = duplicate_key(*out, &nomem);
    if (dup || nomem) {
        wf_status st = nomem ? wf_errorf(WF_NOMEM, "%s: out of memory checking keys", what)
                             : wf_errorf(WF_FORMAT, "%s: key \"%.100s\" appears twice in one object", what, dup);
        cJSON_Delete(*out);
        *out = NULL;
        return st;
    }
    return WF_OK;
}

wf_status wf_json_read_file(const char *path, cJSON **out)
{
    char *text = NULL;
    *out = NULL;
    size_t len = 0;
    wf_status st = wf_file_read(path, &text, &len);
    if (st != WF_OK)
        return st;
    size_t n = strlen(text);
    if (n != len) {
        long line, col;
        line_col(text, n, &line, &col);
        free(text);
        return wf_errorf(WF_FORMAT, "%s: a NUL byte at line %ld, column %ld (JSON is text)", path, line, col);
    }
    st = wf_json_parse(text, path, out);
    free(text);
    return st;
}

char *wf_json_print(const cJSON *j, int pretty)
{
    return pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
}

wf_status wf_json_write_file(const char *path, const cJSON *j)
{
    char *s = cJSON_Print(j);
    if (!s)
        return wf_errorf(WF_NOMEM, "out of memory printing JSON for %s", path);
    size_t n = strlen(s);
    char *buf = malloc(n + 2);
    if (!buf) {
        free(s);
        return wf_errorf(WF_NOMEM, "out of memory printing JSON for %s", path);
    }
    memcpy(buf, s, n);
    buf[n] = '\n';
    wf_status st = wf_file_write_atomic(path, buf, n + 1);
    free(buf);
    free(s);
    return st;
}

wf_status wf_json_get_num(const cJSON *obj, const char *ctx, const char *key,
                          int required, double lo, double hi, double *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (required)
            return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", ctx, key);
        return WF_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return wf_errorf(WF_FORMAT, "%s.%s: expected a number", ctx, key);
    double v = it->valuedouble;
    if (v < lo || v > hi)
        return wf_errorf(WF_FORMAT, "%s.%s=%g is out of range [%g, %g]", ctx, key, v, lo, hi);
    *out = v;
    return WF_OK;
}

wf_status wf_json_get_int(const cJSON *obj, const char *ctx, const char *key,
                          int required, int64_t lo, int64_t hi, int64_t *out)
{
    double v = 0;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (required)
            return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", ctx, key);
        return WF_OK;
    }
    wf_status st = wf_json_get_num(obj, ctx, key, 1, (double)lo, (double)hi, &v);
    if (st != WF_OK)
        return st;
    if (v != floor(v))
        return wf_errorf(WF_FORMAT, "%s.%s=%g: expected an integer", ctx, key, v);
    *out = (int64_t)v;
    return WF_OK;
}

wf_status wf_json_get_str(const cJSON *obj, const char *ctx, const char *key,
                          int required, const char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        if (required)
            return wf_errorf(WF_FORMAT, "%s: missing field \"%s\"", ctx, key);
        return WF_OK;
    }
    if (!cJSON_IsString(it))
        return wf_errorf(WF_FORMAT, "%s.%s: expected a string", ctx, key);
    *out = it->valuestring;
    return WF_OK;
}

wf_status wf_json_check_keys(const cJSON *obj, const char *ctx, const char *const *allowed)
{
    if (!cJSON_IsObject(obj))
        return wf_errorf(WF_FORMAT, "%s: expected an object", ctx);
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *k = allowed; *k; k++)
            if (it->string && strcmp(it->string, *k) == 0)
                ok = 1;
        if (!ok)
            return wf_errorf(WF_FORMAT, "%s: unknown field \"%s\"", ctx, it->string ? it->string : "?");
    }
    return WF_OK;
}
