/* Status codes, per-thread error messages and logging. */
#include "weft/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_errmsg[1024];
static wf_log_level g_level = WF_LOG_WARN;

const char *wf_strerror(wf_status st)
{
    switch (st) {
#define WF_X(name, value, desc) case WF_##name: return desc;
    WF_STATUS_LIST(WF_X)
#undef WF_X
    }
    return "unknown status";
}

const char *wf_status_name(wf_status st)
{
    switch (st) {
#define WF_X(name, value, desc) case WF_##name: return "WF_" #name;
    WF_STATUS_LIST(WF_X)
#undef WF_X
    }
    return "WF_UNKNOWN";
}

int wf_exit_code(wf_status st)
{
    if (st == WF_OK)
        return 0;
    if (st == WF_NOMEM || st == WF_INTERNAL)
        return 2;
    if (st == WF_INTERRUPTED)
        return 130; /* 128 + SIGINT, as shells report an interrupted command */
    return 1;
}

/* One line of printable bytes: newlines, carriage returns and tabs become
 * spaces, other control bytes \xNN (the message is cut where it would not fit). */
static void set_message(const char *raw)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && n + 1 < sizeof g_errmsg; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            g_errmsg[n++] = ' ';
        } else if (*p < 0x20 || *p == 0x7f) {
            if (n + 5 > sizeof g_errmsg)
                break;
            snprintf(g_errmsg + n, 5, "\\x%02x", *p);
            n += 4;
        } else {
            g_errmsg[n++] = (char)*p;
        }
    }
    g_errmsg[n] = 0;
}

wf_status wf_errorf(wf_status st, const char *fmt, ...)
{
    char raw[sizeof g_errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    set_message(raw);
    return st;
}

wf_status wf_error_prefix(wf_status st, const char *fmt, ...)
{
    char ctx[sizeof g_errmsg], raw[2 * sizeof g_errmsg + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    size_t cl = strlen(ctx);
    if (cl == 0)
        return st;
    /* Already there (a retried or nested path): once is enough. */
    if (strncmp(g_errmsg, ctx, cl) == 0 && (g_errmsg[cl] == 0 || (g_errmsg[cl] == ':' && g_errmsg[cl + 1] == ' ')))
        return st;
    snprintf(raw, sizeof raw, "%s%s%s", ctx, g_errmsg[0] ? ": " : "", g_errmsg[0] ? g_errmsg : wf_strerror(st));
    set_message(raw);
    return st;
}

const char *wf_last_error(void) { return g_errmsg; }
void wf_clear_error(void) { g_errmsg[0] = 0; }

void wf_log_set_level(wf_log_level level) { g_level = level; }
wf_log_level wf_log_get_level(void) { return g_level; }

void wf_log(wf_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level > g_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "weft: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
