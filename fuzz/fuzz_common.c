/* Temporary files and strings for the fuzz harnesses (fuzz.h). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char paths[4][256];

static void remove_temps(void)
{
    for (int i = 0; i < 4; i++)
        if (paths[i][0])
            unlink(paths[i]);
}

const char *fuzz_write_temp(int slot, const char *suffix, const uint8_t *data, size_t size)
{
    static int registered;
    if (slot < 0 || slot > 3)
        return NULL;
    if (!registered) {
        atexit(remove_temps);
        registered = 1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(paths[slot], sizeof paths[slot], "%s/weft-fuzz-%ld-%d%s", tmp && *tmp ? tmp : "/tmp",
             (long)getpid(), slot, suffix);
    FILE *f = fopen(paths[slot], "wb");
    if (!f)
        return NULL;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return NULL;
    }
    if (fclose(f) != 0)
        return NULL;
    return paths[slot];
}

char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return NULL;
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

const char *fuzz_spec_or_path(const uint8_t *data, size_t size, const char *suffix, char **owned)
{
    *owned = NULL;
    if (size < 1)
        return NULL;
    if (data[0] % 2 == 0)
        return *owned = fuzz_strndup(data + 1, size - 1);
    return fuzz_write_temp(0, suffix, data + 1, size - 1);
}
