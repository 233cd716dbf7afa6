/* Sizes checked against the machine's memory before they are allocated
 * (core.h): a buffer that cannot fit is refused in one line naming what asked
 * for it, instead of an allocation failing later (or an allocator's own
 * size limit being hit). */
#include "weft/core.h"

#include <unistd.h>

int64_t wf_mem_physical_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0)
        return 0;
    return (int64_t)pages * (int64_t)size;
}

wf_status wf_mem_check(double bytes, const char *what)
{
    int64_t have = wf_mem_physical_bytes();
    if (bytes < 0)
        return wf_errorf(WF_NOFIT, "%s needs more bytes than a 64-bit size holds", what);
    if (have > 0 && bytes > (double)have)
        return wf_errorf(WF_NOFIT, "%s: %.4g GiB, more than this machine's %.4g GiB of memory", what,
                         bytes / 1073741824.0, (double)have / 1073741824.0);
    return WF_OK;
}
