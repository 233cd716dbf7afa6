/* Status codes, per-thread error messages and logging. */
#include "weft/core.h"

#include <stdarg.h>
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

wf_status wf_errorf(wf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    /* One line: a message never carries a newline to the user. */
    for (char *p = g_errmsg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
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
