/* Fuzzes the checkpoint reader: a valid one-rank checkpoint of a small state
 * is written once; each input then replaces either its manifest (byte 0 even)
 * or its shard (odd), and the load must refuse or accept it without a crash,
 * leaving the caller's tensors untouched on refusal. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/runtime_io.h"

static char dir[256];
static float w[12], b[4];

static void describe(wf_ckpt_tensor *t)
{
    memset(t, 0, 2 * sizeof *t);
    t[0].name = "w";
    t[0].dtype = WF_DTYPE_FP32;
    t[0].ndim = 2;
    t[0].shape[0] = 3;
    t[0].shape[1] = 4;
    t[0].data = w;
    t[1].name = "b";
    t[1].dtype = WF_DTYPE_FP32;
    t[1].ndim = 1;
    t[1].shape[0] = 4;
    t[1].data = b;
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int setup(void)
{
    if (dir[0])
        return 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/weft-fuzz-ckpt-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    mkdir(dir, 0700);
    atexit(remove_dir);
    for (int i = 0; i < 12; i++)
        w[i] = (float)i / 3.0f;
    for (int i = 0; i < 4; i++)
        b[i] = -(float)i;
    wf_ckpt_tensor t[2];
    describe(t);
    wf_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = 7;
    snprintf(meta.model, sizeof meta.model, "mlp-tiny");
    return wf_ckpt_save(dir, &meta, t, 2) == WF_OK ? 0 : -1;
}

/* The one shard file of the checkpoint (rank-0.g<gen>.bin). */
static int shard_path(char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "rank-0.g", 8) == 0 && n > 4 && strcmp(e->d_name + n - 4, ".bin") == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            found = 0;
            break;
        }
    }
    closedir(d);
    return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || setup() != 0)
        return 0;
    char target[512], saved_path[600];
    if (data[0] % 2 == 0)
        snprintf(target, sizeof target, "%s/manifest.json", dir);
    else if (shard_path(target, sizeof target) != 0)
        return 0;
    /* Keep the original so the next input starts from a valid checkpoint. */
    snprintf(saved_path, sizeof saved_path, "%s.orig", target);
    if (access(saved_path, F_OK) != 0 && rename(target, saved_path) != 0)
        return 0;
    FILE *f = fopen(target, "wb");
    if (f) {
        if (size > 1)
            fwrite(data + 1, 1, size - 1, f);
        fclose(f);
    }
    float w0[12], b0[4];
    memcpy(w0, w, sizeof w);
    memcpy(b0, b, sizeof b);
    wf_ckpt_tensor t[2];
    describe(t);
    wf_ckpt_meta meta;
    if (wf_ckpt_load(dir, "mlp-tiny", &meta, t, 2) != WF_OK &&
        (memcmp(w0, w, sizeof w) != 0 || memcmp(b0, b, sizeof b) != 0))
        abort(); /* a refused load must leave the caller's tensors untouched */
    memcpy(w, w0, sizeof w);
    memcpy(b, b0, sizeof b);
    wf_clear_error();
    /* Restore the original file for the next input. */
    FILE *src = fopen(saved_path, "rb"), *dst = fopen(target, "wb");
    if (src && dst) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, src)) > 0)
            fwrite(buf, 1, n, dst);
    }
    if (src)
        fclose(src);
    if (dst)
        fclose(dst);
    return 0;
}
