/* JSON helpers over cJSON: parsing with located errors, atomic writing, and
 * validating field access (every bad field is an error that names it). */
#include "weft/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

wf_status wf_json_parse(const char *text, const char *what, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (!*out) {
        long off = end ? (long)(end - text) : 0;
        return wf_errorf(WF_FORMAT, "%s: malformed JSON near byte %ld", what, off);
    }
    return WF_OK;
}

wf_status wf_json_read_file(const char *path, cJSON **out)
{
    char *text = NULL;
    *out = NULL;
    wf_status st = wf_file_read(path, &text, NULL);
    if (st != WF_OK)
        return st;
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
