/* weft estimate: placeholder until its module lands (the owning change replaces this file). */
#include "cli/cli.h"

wf_status wf_cmd_estimate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return wf_errorf(WF_INTERNAL, "'estimate' is not built yet");
}
