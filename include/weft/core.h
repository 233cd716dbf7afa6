/* weft core: status codes, error messages, logging, arenas, JSON and file
 * helpers, `name:key=value,...` specs, and the CLI option tables.
 *
 * Every library function that can fail returns a wf_status (0 = ok, negative
 * = error) and records a one-line message naming the bad value with wf_errorf.
 * The CLI prints wf_last_error() and exits with wf_exit_code(status). Library
 * code never exits. */
#ifndef WEFT_CORE_H
#define WEFT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes --------------------------------------------------------
 * X(name, value, description). User errors (exit 1) are INVAL, NOTFOUND,
 * FORMAT, NOFIT, IO; internal errors (exit 2) are NOMEM and INTERNAL. */
#define WF_STATUS_LIST(X)                                               \
    X(OK, 0, "ok")                                                      \
    X(INVAL, -1, "invalid argument")                                    \
    X(NOTFOUND, -2, "not found")                                        \
    X(FORMAT, -3, "malformed input")                                    \
    X(IO, -4, "input/output error")                                     \
    X(NOFIT, -5, "does not fit")                                        \
    X(NOMEM, -6, "out of memory")                                       \
    X(INTERNAL, -7, "internal error")                                   \
    X(MPI, -8, "MPI error")                                             \
    X(INTERRUPTED, -9, "interrupted by a signal")

typedef enum {
#define WF_X(name, value, desc) WF_##name = value,
    WF_STATUS_LIST(WF_X)
#undef WF_X
} wf_status;

const char *wf_strerror(wf_status st);
const char *wf_status_name(wf_status st);
/* 0 for WF_OK, 1 for a user error, 2 for an internal one. */
int wf_exit_code(wf_status st);

/* Records a printf-style message for the calling thread and returns st, so a
 * failure reads `return wf_errorf(WF_INVAL, "tp=%d does not divide heads=%d", ...)`. */
wf_status wf_errorf(wf_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Adds context to the message of the failure being returned: the message
 * becomes "CONTEXT: MESSAGE" (CONTEXT printf-style), the innermost message
 * kept whole, and returns st. Context already at the front of the message is
 * not added again, so a retried or nested path says it once. Never format
 * wf_last_error() into wf_errorf: the buffer would be copied into itself. */
wf_status wf_error_prefix(wf_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The message of the last wf_errorf on this thread ("" if none). Control
 * characters of a message are written as \xNN (newlines and tabs as spaces),
 * so a user's bytes echoed in a message cannot drive the terminal. */
const char *wf_last_error(void);
void wf_clear_error(void);

/* ---- logging (stderr) ------------------------------------------------------ */
typedef enum { WF_LOG_ERROR, WF_LOG_WARN, WF_LOG_INFO, WF_LOG_DEBUG } wf_log_level;
void wf_log_set_level(wf_log_level level);
wf_log_level wf_log_get_level(void);
void wf_log(wf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- arena: phase-scoped allocation, freed once ----------------------------
 * Blocks are chained; allocations are 16-byte aligned and zeroed. */
typedef struct wf_arena_block wf_arena_block;
typedef struct {
    wf_arena_block *head;
    size_t block_bytes; /* default size of a new block */
    size_t used_bytes;  /* total handed out, for statistics */
} wf_arena;

void wf_arena_init(wf_arena *a, size_t block_bytes);
/* NULL only when the system is out of memory. */
void *wf_arena_alloc(wf_arena *a, size_t bytes);
char *wf_arena_strdup(wf_arena *a, const char *s);
void wf_arena_free(wf_arena *a);

/* Checked heap allocation helpers: abort-free, return NULL on failure. */
void *wf_calloc(size_t n, size_t size);

/* ---- limits and checked arithmetic (docs/limits.md) ---------------------------
 * Every size computed from input (element counts, devices, buffers, batch x
 * sequence) goes through these, so no input can wrap an int64 or ask for an
 * allocation that no machine has. */
#define WF_MAX_NUMEL ((int64_t)1 << 48)  /* elements of one tensor */
#define WF_MAX_BATCH ((int64_t)1 << 32)  /* samples per iteration (--batch, plan files) */
#define WF_MAX_DEVICES ((int64_t)1 << 24) /* devices of a cluster or a plan */
#define WF_MAX_LAYERS 4096                /* layers of a zoo family model (the largest trained: ~200) */
/* This machine's physical memory in bytes (sysconf), 0 when unknown. */
int64_t wf_mem_physical_bytes(void);
/* WF_OK when `bytes` (computed before allocating them) fit in this machine's
 * physical memory, else WF_NOFIT (exit 1): "WHAT: X GiB, more than
 * this machine's Y GiB of memory". Negative `bytes`: the size overflowed. */
wf_status wf_mem_check(double bytes, const char *what);
/* a * b into *out; 0, or -1 when it overflows int64 (then *out is unspecified). */
static inline int wf_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
/* Product of dims[0..n) (each >= 1) when it is at most `limit`: WF_OK, else
 * WF_INVAL naming `what` and the limit. */
wf_status wf_checked_product(const int64_t *dims, int n, int64_t limit, const char *what,
                             int64_t *out);

/* ---- files -------------------------------------------------------------------- *
 * One policy for every input file: regular files only (a FIFO, a device, a
 * directory is "not a regular file", refused without blocking), and a size cap
 * per kind. One policy for every output: regular targets only, checked before
 * any work starts, written atomically with the old file's mode kept. */
typedef enum {
    WF_FILE_TEXT,       /* model, cluster, plan JSON, manifests, configs: 64 MiB */
    WF_FILE_ONNX,       /* ONNX models and their external data: 2 GiB */
    WF_FILE_CHECKPOINT, /* one checkpoint shard: 16 GiB */
    WF_FILE_DATA        /* data sets (IDX .gz, text corpora): 4 GiB */
} wf_file_kind;
size_t wf_file_cap(wf_file_kind k);
/* Opens path for reading when it is a regular file within the kind's cap:
 * *fd (blocking mode restored) and its size. */
wf_status wf_file_open_input(const char *path, wf_file_kind k, int *fd, size_t *size);
/* Reads a whole file into a NUL-terminated heap buffer (caller frees). */
wf_status wf_file_read_kind(const char *path, wf_file_kind k, char **data, size_t *len);
/* wf_file_read_kind(path, WF_FILE_TEXT, ...). */
wf_status wf_file_read(const char *path, char **data, size_t *len);
/* Checks, before any work, that path can be written as an output file: a
 * non-empty name, an existing directory above it, and no existing non-regular
 * file in its place. `what` names the option in the message ("-o"). */
wf_status wf_file_check_output(const char *path, const char *what);
/* The same for an output directory (--checkpoint): an existing directory, or
 * a name whose parent directory exists. */
wf_status wf_file_check_output_dir(const char *path, const char *what);
/* Writes a file atomically: PATH.tmp.<pid>, fsync, rename, fsync the directory.
 * Either the old content or the new content is there, never a torn file. A
 * target that exists and is not a regular file is refused; an existing file's
 * mode is kept. */
wf_status wf_file_write_atomic(const char *path, const void *data, size_t len);

/* ---- JSON (cJSON underneath; include <cjson/cJSON.h> to use the tree) ------- */
struct cJSON;
/* Parses text; on failure the message names `what` (a path or "plan") and the
 * byte offset of the error. */
wf_status wf_json_parse(const char *text, const char *what, struct cJSON **out);
wf_status wf_json_read_file(const char *path, struct cJSON **out);
/* Prints compactly (pretty=0) or indented; caller frees with free(). */
char *wf_json_print(const struct cJSON *j, int pretty);
/* Writes atomically with a trailing newline. */
wf_status wf_json_write_file(const char *path, const struct cJSON *j);
/* Field access that validates: missing (when required), wrong type or out of
 * range is WF_FORMAT with a message naming `ctx.key`. When not required and
 * absent, *out is left unchanged and WF_OK returned. */
wf_status wf_json_get_num(const struct cJSON *obj, const char *ctx, const char *key,
                          int required, double lo, double hi, double *out);
wf_status wf_json_get_int(const struct cJSON *obj, const char *ctx, const char *key,
                          int required, int64_t lo, int64_t hi, int64_t *out);
wf_status wf_json_get_str(const struct cJSON *obj, const char *ctx, const char *key,
                          int required, const char **out);
/* Rejects keys of obj that are not in the NULL-terminated list `allowed`. */
wf_status wf_json_check_keys(const struct cJSON *obj, const char *ctx, const char *const *allowed);

/* ---- specs: "name:key=value,key=value" --------------------------------------
 * Used for models (gpt:layers=96), clusters (dgx-a100:nodes=16) and plans
 * (dp=8,tp=8). A spec without ':' whose first item contains '=' has an empty
 * name (plan strings). Values are kept as strings; the typed getters validate. */
#define WF_SPEC_MAX_KV 32
typedef struct {
    char name[128];
    int nkv;
    char key[WF_SPEC_MAX_KV][48];
    char val[WF_SPEC_MAX_KV][80];
    unsigned used; /* bit i set when kv i was read by a getter */
} wf_spec;

wf_status wf_spec_parse(const char *text, wf_spec *out);
/* Returns 1 and sets *out when key is present; 0 when absent; a negative
 * status when present but not a number in [lo, hi] (message names key=value). */
int wf_spec_get_int(wf_spec *s, const char *key, int64_t lo, int64_t hi, int64_t *out);
int wf_spec_get_num(wf_spec *s, const char *key, double lo, double hi, double *out);
int wf_spec_get_str(wf_spec *s, const char *key, const char **out);
/* After all getters ran: the first key never read is an unknown key (WF_INVAL,
 * message lists the allowed keys `allowed_hint`). */
wf_status wf_spec_check_unused(const wf_spec *s, const char *what, const char *allowed_hint);

/* Strict number parsing: the whole string must be a number in range. */
wf_status wf_parse_int(const char *text, const char *what, int64_t lo, int64_t hi, int64_t *out);
wf_status wf_parse_num(const char *text, const char *what, double lo, double hi, double *out);

/* ---- CLI option tables ---------------------------------------------------------
 * One table per verb drives both the parser and --help, so they cannot drift.
 * The table ends with an entry whose name is NULL. */
typedef enum {
    WF_OPT_FLAG,   /* int*, set to 1 when present */
    WF_OPT_INT,    /* int64_t* */
    WF_OPT_NUM,    /* double* */
    WF_OPT_STR     /* const char** (points into argv) */
} wf_opt_type;

typedef struct {
    const char *name;    /* long name without dashes, e.g. "model" */
    char short_name;     /* 0 for none, e.g. 'o' */
    wf_opt_type type;
    void *dest;
    const char *metavar; /* e.g. "M" */
    const char *help;
    int required;
} wf_opt;

/* Parses argv[first..argc). Positional arguments are stored into pos[] (up to
 * max_pos, *npos set). --help/-h sets *help and returns WF_OK. An unknown
 * option, a missing value, a bad number, a missing required option or too many
 * positionals is WF_INVAL with a message. */
wf_status wf_opts_parse(const wf_opt *opts, int argc, char **argv, int first,
                        const char **pos, int max_pos, int *npos, int *help);
/* "usage: COMMAND <every option of the table>", the summary, then one line per
 * option. COMMAND is the verb and its positionals ("weft show MODEL"). */
void wf_opts_usage(FILE *f, const char *command, const char *summary, const wf_opt *opts);

/* ---- suggestions for misspelt names (src/core/suggest.c) ---------------------- */
/* Lowercase, without '-', '_' and '.': "Llama-2-7B" -> "llama27b". */
void wf_name_fold(const char *in, char *out, size_t cap);
/* Levenshtein distance between the folded names. */
int wf_edit_distance(const char *a, const char *b);
/* The index of the one candidate that folds like name, or -1 (none, or several). */
int wf_resolve_fold(const char *name, const char *const *cands, int n);
/* The candidate name most likely meant, or NULL when none is close. */
const char *wf_suggest(const char *name, const char *const *cands, int n);
/* The same over a list written "a, b, c"; the answer is copied into buf. */
const char *wf_suggest_in_list(const char *name, const char *list, char *buf, size_t cap);
/* "; did you mean 'X'?" into buf, or "" when suggestion is NULL. */
const char *wf_did_you_mean(const char *suggestion, char *buf, size_t cap);

/* ---- growing arrays (src/core/grow.c) ----------------------------------------------- */
/* Makes room for `need` elements of `elem` bytes in the array whose pointer
 * is at `arr` (the address of a T *) and whose capacity is *cap: doubles the
 * capacity, from `first` when it is 0, until it holds need, and reallocates;
 * the new elements are zeroed. 0, or -1 when out of memory or when the
 * capacity would pass INT_MAX elements (array and *cap then unchanged). */
int wf_grow(void *arr, int *cap, int64_t need, size_t elem, int first);
/* The same for an array in arena a: the new room is allocated there (the
 * old stays until the arena is freed) and the content copied. */
int wf_grow_in(wf_arena *a, void *arr, int *cap, int64_t need, size_t elem, int first);

/* ---- small numeric helpers ------------------------------------------------------- */
/* Monotonic wall clock in seconds. */
double wf_now_s(void);
/* Process CPU time in seconds. */
double wf_cpu_s(void);

#ifdef __cplusplus
}
#endif
#endif
