/* weft: entry point. Dispatches to the verb, prints one error line and maps
 * the status to the exit code. */
#include "cli/cli.h"
#include "weft_version.h" /* generated: WEFT_VERSION, WEFT_GIT_COMMIT */
#include "weft/runtime.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *help;
    wf_status (*fn)(int, char **);
} verb;

static const verb VERBS[] = {
#define WF_X(v, h) {#v, h, wf_cmd_##v},
    WF_CLI_VERBS(WF_X)
#undef WF_X
};

static void usage(FILE *f)
{
    fprintf(f, "usage: weft <verb> [options]   (weft <verb> --help for its options; weft --version)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        fprintf(f, "  %-10s %s\n", VERBS[i].name, VERBS[i].help);
}

int main(int argc, char **argv)
{
    /* First, before MPI_Init and the first GEMM: the BLAS kernels of this CPU
     * (may re-execute this program with OPENBLAS_CORETYPE set). */
    wf_runtime_blas_fast_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        if (argc > 2) {
            fprintf(stderr, "weft: %s takes no arguments\n", argv[1]);
            return 1;
        }
        /* "weft 0.1.0", and the commit built where the source was a git checkout. */
        if (WEFT_GIT_COMMIT[0])
            printf("weft %s (commit %s)\n", WEFT_VERSION, WEFT_GIT_COMMIT);
        else
            printf("weft %s\n", WEFT_VERSION);
        return fflush(stdout) == 0 ? 0 : 2;
    }
    const char *lvl = getenv("WEFT_LOG");
    if (lvl && strcmp(lvl, "debug") == 0)
        wf_log_set_level(WF_LOG_DEBUG);
    else if (lvl && strcmp(lvl, "info") == 0)
        wf_log_set_level(WF_LOG_INFO);
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++) {
        if (strcmp(argv[1], VERBS[i].name) != 0)
            continue;
        wf_status st = VERBS[i].fn(argc - 1, argv + 1);
        /* What was printed must have reached standard output (a full disk,
         * /dev/full, a closed pipe): else the run did not deliver its answer. */
        if (st == WF_OK && (fflush(stdout) != 0 || ferror(stdout)))
            st = wf_errorf(WF_IO, "cannot write standard output: %s", strerror(errno ? errno : EIO));
        if (st != WF_OK) {
            const char *msg = wf_last_error();
            fprintf(stderr, "weft %s: %s\n", VERBS[i].name, msg[0] ? msg : wf_strerror(st));
        }
        return wf_exit_code(st);
    }
    const char *names[sizeof VERBS / sizeof VERBS[0]];
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        names[i] = VERBS[i].name;
    char dym[96];
    /* Through wf_errorf: the user's bytes are escaped in the message. */
    wf_errorf(WF_INVAL, "unknown verb '%s'%s (see weft --help)", argv[1],
              wf_did_you_mean(wf_suggest(argv[1], names, (int)(sizeof VERBS / sizeof VERBS[0])), dym, sizeof dym));
    fprintf(stderr, "weft: %s\n", wf_last_error());
    return 1;
}
