/* File helpers: the one policy for reading input files (regular files only,
 * a size cap per kind, no blocking open) and for writing outputs (regular
 * targets only, checked before work, atomic: temporary name, fsync, rename,
 * fsync of the directory, the old mode kept), checked products, and clocks. */
#include "weft/core.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

wf_status wf_checked_product(const int64_t *dims, int n, int64_t limit, const char *what,
                             int64_t *out)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 1 || wf_mul_i64(p, dims[i], &p) != 0 || p > limit)
            return wf_errorf(WF_INVAL, "%s: the product of its sizes exceeds weft's limit of %" PRId64,
                             what, limit);
    }
    *out = p;
    return WF_OK;
}

size_t wf_file_cap(wf_file_kind k)
{
    switch (k) {
    case WF_FILE_TEXT:
        return (size_t)64 << 20;
    case WF_FILE_ONNX:
        return (size_t)2 << 30;
    case WF_FILE_CHECKPOINT:
        return (size_t)16 << 30;
    case WF_FILE_DATA:
        return (size_t)4 << 30;
    }
    return 0;
}

static const char *kind_name(wf_file_kind k)
{
    static const char *const names[] = {"text", "ONNX", "checkpoint", "data"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

wf_status wf_file_open_input(const char *path, wf_file_kind k, int *fd, size_t *size)
{
    *fd = -1;
    *size = 0;
    if (!path || !*path)
        return wf_errorf(WF_INVAL, "empty file name");
    /* O_NONBLOCK: opening a FIFO with no writer must not wait for one. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return wf_errorf(WF_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return wf_errorf(WF_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return wf_errorf(WF_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)wf_file_cap(k)) {
        close(f);
        return wf_errorf(WF_IO, "%s: %lld bytes is more than the %zu MiB allowed for a %s file",
                         path, (long long)st.st_size, wf_file_cap(k) >> 20, kind_name(k));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (size_t)st.st_size;
    return WF_OK;
}

wf_status wf_file_read_kind(const char *path, wf_file_kind k, char **data, size_t *len)
{
    *data = NULL;
    if (len)
        *len = 0;
    int fd;
    size_t size;
    wf_status st = wf_file_open_input(path, k, &fd, &size);
    if (st != WF_OK)
        return st;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return wf_errorf(WF_NOMEM, "out of memory reading %s (%zu bytes)", path, size);
    }
    /* Read what fstat promised; a file that shrank meanwhile is a short read. */
    size_t n = 0;
    while (n < size) {
        ssize_t got = read(fd, buf + n, size - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return wf_errorf(WF_IO, "cannot read %s: %s", path, strerror(e));
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    *data = buf;
    if (len)
        *len = n;
    return WF_OK;
}

wf_status wf_file_read(const char *path, char **data, size_t *len)
{
    return wf_file_read_kind(path, WF_FILE_TEXT, data, len);
}

/* The directory part of path ("." when there is none) into buf. */
static void parent_of(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path);
    char *d = dirname(buf);
    if (d != buf)
        memmove(buf, d, strlen(d) + 1);
}

/* Whether a file can be created in directory dir: access() says yes to root
 * on a read-only directory (but not on a read-only file system), so a probe
 * file is created and removed. */
static int dir_writable(const char *dir)
{
    if (access(dir, W_OK | X_OK) != 0)
        return 0;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.weft-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EEXIST;
    close(fd);
    unlink(probe);
    return 1;
}

wf_status wf_file_check_output(const char *path, const char *what)
{
    if (!path || !*path)
        return wf_errorf(WF_INVAL, "%s: empty file name", what);
    if (strlen(path) >= 4000)
        return wf_errorf(WF_INVAL, "%s: path is too long", what);
    if (path[strlen(path) - 1] == '/')
        return wf_errorf(WF_INVAL, "%s %s: names a directory (ends in '/'), expected a file name", what, path);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return wf_errorf(WF_INVAL, "%s %s: not a regular file (weft writes regular files only)",
                             what, path);
        if (access(path, W_OK) != 0)
            return wf_errorf(WF_INVAL, "%s %s: not writable", what, path);
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return wf_errorf(WF_INVAL, "%s %s: directory %s does not exist", what, path, dir);
    if (!dir_writable(dir))
        return wf_errorf(WF_INVAL, "%s %s: directory %s is not writable", what, path, dir);
    return WF_OK;
}

wf_status wf_file_check_output_dir(const char *path, const char *what)
{
    if (!path || !*path)
        return wf_errorf(WF_INVAL, "%s: empty directory name", what);
    if (strlen(path) >= 4000)
        return wf_errorf(WF_INVAL, "%s: path is too long", what);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return wf_errorf(WF_INVAL, "%s %s: exists and is not a directory", what, path);
        if (!dir_writable(path))
            return wf_errorf(WF_INVAL, "%s %s: directory is not writable", what, path);
        return WF_OK;
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return wf_errorf(WF_INVAL, "%s %s: parent directory %s does not exist", what, path, dir);
    if (!dir_writable(dir))
        return wf_errorf(WF_INVAL, "%s %s: parent directory %s is not writable (the directory cannot be made)",
                         what, path, dir);
    return WF_OK;
}

wf_status wf_file_write_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    if (!path || !*path)
        return wf_errorf(WF_INVAL, "empty output file name");
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return wf_errorf(WF_INVAL, "path too long: %s", path);
    /* Never rename over a device node, a FIFO or a directory; keep a regular
     * file's mode. */
    mode_t mode = 0644;
    struct stat old;
    if (stat(path, &old) == 0) {
        if (!S_ISREG(old.st_mode))
            return wf_errorf(WF_IO, "%s: not a regular file (weft writes regular files only)", path);
        mode = old.st_mode & 07777;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return wf_errorf(WF_IO, "cannot create %s: %s", tmp, strerror(errno));
    if (fchmod(fd, mode) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return wf_errorf(WF_IO, "cannot set the mode of %s: %s", tmp, strerror(e));
    }
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return wf_errorf(WF_IO, "cannot write %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return wf_errorf(WF_IO, "cannot sync %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return wf_errorf(WF_IO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    /* Make the rename itself durable. */
    char dirbuf[4096];
    parent_of(path, dirbuf, sizeof dirbuf);
    int dfd = open(dirbuf, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return WF_OK;
}

double wf_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double wf_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
