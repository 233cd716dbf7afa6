/* Checkpoints (one shard per rank plus a manifest) and the MPI-world helpers
 * the runtime's I/O shares (rank/size with or without MPI, start/stop, and
 * agreement on failure).
 *
 * Layout of DIR:
 *   manifest.json       written last by rank 0 (atomically); names everything
 *   rank-<r>.g<gen>.bin one shard per rank; gen grows by one per save
 * A save writes new-generation shards next to the old ones (temporary name,
 * fsync, rename), agrees across ranks, and only then replaces the manifest, so
 * a crash at any point leaves the previous checkpoint loadable. The save that
 * completes deletes older generations and stray temporary files.
 *
 * Shard format, version 1 (little-endian integers):
 *   0    char[8]  magic "WEFTCKPT"
 *   8    u32      version
 *   12   u32      header bytes (offset of the first tensor's data)
 *   16   i64      step
 *   24   i64      data position
 *   32   u64[4]   RNG state
 *   64   i32      rank, i32 nranks
 *   72   char[128] model name (NUL padded)
 *   200  u32      number of tensors, u32 reserved (0)
 *   208  per tensor (152 bytes): char[64] name, u32 dtype code, u32 ndim,
 *        i64[8] shape, u64 bytes, u64 offset of the data
 *   ...  tensor data, in table order, contiguous
 *   end  u32      CRC32 (zlib) of every byte before it
 * This file is not the training loop; it stores what the caller hands it. */
#include "runtime/dist-impl.h"
#include "weft/runtime_io.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_MAGIC "WEFTCKPT"
#define HDR_FIXED 208
#define ENTRY_BYTES 152
#define MAX_TENSORS 1000000
#define MANIFEST "manifest.json"

/* ---- MPI world ------------------------------------------------------------------- */

static int mpi_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (!init)
        return 0;
    MPI_Finalized(&fin);
    return !fin;
}

void wf_mpi_world(int *rank, int *nranks)
{
    *rank = 0;
    *nranks = 1;
    if (!mpi_up())
        return;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
}

int wf_mpi_launched(void)
{
    static const char *const vars[] = {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                                       "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

wf_status wf_mpi_start(int *started)
{
    *started = 0;
    int init = 0;
    MPI_Initialized(&init);
    if (init || !wf_mpi_launched())
        return WF_OK;
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Init failed");
    /* Errors come back as codes, so every rank can agree before stopping. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    *started = 1;
    /* No wait on a peer rank is unbounded (peers.c). */
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return wf_mpi_watchdog_start(rank);
}

void wf_mpi_stop(int started)
{
    if (started && mpi_up())
        MPI_Finalize();
}

wf_status wf_mpi_agree_on(MPI_Comm comm, int rank, int nranks, wf_status st)
{
    if (comm == MPI_COMM_NULL || nranks == 1)
        return st;
    int mine[2] = {(int)st, rank}, worst[2];
    if (MPI_Allreduce(mine, worst, 1, MPI_2INT, MPI_MINLOC, comm) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Allreduce failed while agreeing on a status");
    if (worst[0] == WF_OK)
        return WF_OK;
    char msg[512];
    if (rank == worst[1])
        snprintf(msg, sizeof msg, "%s", wf_last_error());
    if (MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, worst[1], comm) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Bcast failed while agreeing on a status");
    if (rank != worst[1])
        wf_errorf((wf_status)worst[0], "rank %d: %s", worst[1], msg);
    return (wf_status)worst[0];
}

wf_status wf_mpi_agree(wf_status st)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    return wf_mpi_agree_on(MPI_COMM_WORLD, rank, nranks, st);
}

/* ---- encoding helpers -------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* On-disk dtype codes are fixed here, independent of the enum's order. */
static const struct {
    wf_dtype dtype;
    uint32_t code;
    size_t bytes;
    const char *name;
} DTYPES[] = {
    {WF_DTYPE_FP32, 1, 4, "fp32"}, {WF_DTYPE_FP16, 2, 2, "fp16"},   {WF_DTYPE_BF16, 3, 2, "bf16"},
    {WF_DTYPE_INT32, 4, 4, "int32"}, {WF_DTYPE_INT64, 5, 8, "int64"}, {WF_DTYPE_U8, 6, 1, "u8"},
};
#define NDTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))
_Static_assert(sizeof DTYPES / sizeof DTYPES[0] == WF_DTYPE_COUNT, "every dtype needs an on-disk code");

static int dtype_index(wf_dtype t)
{
    for (int i = 0; i < NDTYPES; i++)
        if (DTYPES[i].dtype == t)
            return i;
    return -1;
}

static int dtype_code_index(uint32_t code)
{
    for (int i = 0; i < NDTYPES; i++)
        if (DTYPES[i].code == code)
            return i;
    return -1;
}

static const char *dtype_str(wf_dtype t)
{
    int i = dtype_index(t);
    return i < 0 ? "?" : DTYPES[i].name;
}

size_t wf_ckpt_tensor_bytes(const wf_ckpt_tensor *t)
{
    int di = dtype_index(t->dtype);
    if (di < 0 || t->ndim < 0 || t->ndim > WF_MAX_DIMS)
        return 0;
    size_t n = DTYPES[di].bytes;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)(t->shape[i] < 0 ? 0 : t->shape[i]);
    return n;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
}

static wf_status check_tensors(const wf_ckpt_tensor *t, int n)
{
    if (n < 0 || n > MAX_TENSORS || (n > 0 && !t))
        return wf_errorf(WF_INVAL, "checkpoint: %d tensors is out of range (or no tensor list)", n);
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || strlen(t[i].name) >= WF_NAME_LEN)
            return wf_errorf(WF_INVAL, "checkpoint: tensor %d needs a name of 1 to %d bytes", i, WF_NAME_LEN - 1);
        if (dtype_index(t[i].dtype) < 0 || t[i].ndim < 0 || t[i].ndim > WF_MAX_DIMS)
            return wf_errorf(WF_INVAL, "checkpoint: tensor %s has an invalid dtype or rank", t[i].name);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0)
                return wf_errorf(WF_INVAL, "checkpoint: tensor %s has a negative dimension", t[i].name);
        if (wf_ckpt_tensor_bytes(&t[i]) > 0 && !t[i].data)
            return wf_errorf(WF_INVAL, "checkpoint: tensor %s has no data", t[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return wf_errorf(WF_INVAL, "checkpoint: tensor name %s is used twice", t[i].name);
    }
    return WF_OK;
}

/* ---- writing a shard ------------------------------------------------------------------ */

typedef struct {
    int fd;
    const char *path;
    uLong crc;
    uint64_t bytes;
} sink;

static wf_status sink_write(sink *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->bytes += len;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : len;
        s->crc = crc32(s->crc, p, (uInt)chunk);
        size_t left = chunk;
        const unsigned char *q = p;
        while (left > 0) {
            ssize_t w = write(s->fd, q, left);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return wf_errorf(WF_IO, "cannot write %s: %s", s->path, strerror(errno));
            }
            q += w;
            left -= (size_t)w;
        }
        p += chunk;
        len -= chunk;
    }
    return WF_OK;
}

static void fsync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

/* Streams the shard to PATH.tmp.<pid>, fsyncs it and renames it to PATH. */
static wf_status write_shard(const char *dir, const char *path, const wf_ckpt_meta *meta, int rank, int nranks,
                             const wf_ckpt_tensor *t, int n, uint64_t *bytes_out, uint32_t *crc_out)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    size_t hdr_bytes = HDR_FIXED + (size_t)n * ENTRY_BYTES;
    unsigned char *hdr = calloc(1, hdr_bytes);
    if (!hdr)
        return wf_errorf(WF_NOMEM, "out of memory writing %s", path);
    memcpy(hdr, CKPT_MAGIC, 8);
    put_u32(hdr + 8, WF_CKPT_VERSION);
    put_u32(hdr + 12, (uint32_t)hdr_bytes);
    put_u64(hdr + 16, (uint64_t)meta->step);
    put_u64(hdr + 24, (uint64_t)meta->data_position);
    for (int i = 0; i < 4; i++)
        put_u64(hdr + 32 + 8 * i, meta->rng[i]);
    put_u32(hdr + 64, (uint32_t)rank);
    put_u32(hdr + 68, (uint32_t)nranks);
    memcpy(hdr + 72, meta->model, strnlen(meta->model, WF_CKPT_MODEL_LEN - 1));
    put_u32(hdr + 200, (uint32_t)n);
    uint64_t off = hdr_bytes;
    for (int i = 0; i < n; i++) {
        unsigned char *e = hdr + HDR_FIXED + (size_t)i * ENTRY_BYTES;
        memcpy(e, t[i].name, strlen(t[i].name));
        put_u32(e + 64, DTYPES[dtype_index(t[i].dtype)].code);
        put_u32(e + 68, (uint32_t)t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            put_u64(e + 72 + 8 * d, (uint64_t)t[i].shape[d]);
        uint64_t nb = wf_ckpt_tensor_bytes(&t[i]);
        put_u64(e + 136, nb);
        put_u64(e + 144, off);
        off += nb;
    }
    sink s = {-1, tmp, crc32(0L, Z_NULL, 0), 0};
    s.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (s.fd < 0) {
        free(hdr);
        return wf_errorf(WF_IO, "cannot create %s: %s", tmp, strerror(errno));
    }
    wf_status st = sink_write(&s, hdr, hdr_bytes);
    free(hdr);
    for (int i = 0; i < n && st == WF_OK; i++)
        st = sink_write(&s, t[i].data, wf_ckpt_tensor_bytes(&t[i]));
    uint32_t crc = (uint32_t)s.crc;
    unsigned char tail[4];
    put_u32(tail, crc);
    if (st == WF_OK)
        st = sink_write(&s, tail, 4);
    if (st == WF_OK && fsync(s.fd) != 0)
        st = wf_errorf(WF_IO, "cannot sync %s: %s", tmp, strerror(errno));
    if (close(s.fd) != 0 && st == WF_OK)
        st = wf_errorf(WF_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (st == WF_OK && rename(tmp, path) != 0)
        st = wf_errorf(WF_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != WF_OK) {
        unlink(tmp);
        return st;
    }
    fsync_dir(dir);
    *bytes_out = s.bytes;
    *crc_out = crc;
    return WF_OK;
}

/* ---- the manifest ------------------------------------------------------------------------ */

typedef struct {
    int64_t generation, step, nranks;
    const char *model;
    const char *run; /* "" when the manifest has none (older checkpoints) */
    cJSON *json;  /* owns the strings */
    cJSON *files; /* array */
} manifest;

static wf_status read_manifest(const char *dir, manifest *m)
{
    memset(m, 0, sizeof *m);
    m->run = "";
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return wf_errorf(WF_NOTFOUND, "no checkpoint in %s (no %s)", dir, MANIFEST);
    char *text;
    wf_status st = wf_file_read(path, &text, NULL);
    if (st != WF_OK)
        return st;
    st = wf_json_parse(text, path, &m->json);
    free(text);
    if (st != WF_OK)
        return st;
    static const char *const keys[] = {"format", "version", "generation", "step", "nranks", "model", "run", "files", NULL};
    const char *format = NULL;
    int64_t version = 0;
    if ((st = wf_json_check_keys(m->json, path, keys)) != WF_OK ||
        (st = wf_json_get_str(m->json, path, "format", 1, &format)) != WF_OK)
        goto fail;
    if (strcmp(format, "weft-checkpoint") != 0) {
        st = wf_errorf(WF_FORMAT, "%s: format is \"%s\", expected \"weft-checkpoint\"", path, format);
        goto fail;
    }
    if ((st = wf_json_get_int(m->json, path, "version", 1, 1, 1000000, &version)) != WF_OK)
        goto fail;
    if (version != WF_CKPT_VERSION) {
        st = wf_errorf(WF_FORMAT, "%s: checkpoint version %lld, this weft reads version %d", path,
                       (long long)version, WF_CKPT_VERSION);
        goto fail;
    }
    if ((st = wf_json_get_int(m->json, path, "generation", 1, 1, INT64_MAX / 2, &m->generation)) != WF_OK ||
        (st = wf_json_get_int(m->json, path, "step", 1, 0, INT64_MAX / 2, &m->step)) != WF_OK ||
        (st = wf_json_get_int(m->json, path, "nranks", 1, 1, 1 << 24, &m->nranks)) != WF_OK ||
        (st = wf_json_get_str(m->json, path, "model", 1, &m->model)) != WF_OK ||
        (st = wf_json_get_str(m->json, path, "run", 0, &m->run)) != WF_OK)
        goto fail;
    m->files = cJSON_GetObjectItemCaseSensitive(m->json, "files");
    if (!cJSON_IsArray(m->files) || cJSON_GetArraySize(m->files) != m->nranks) {
        st = wf_errorf(WF_FORMAT, "%s: files must be an array of nranks = %lld entries", path, (long long)m->nranks);
        goto fail;
    }
    return WF_OK;
fail:
    cJSON_Delete(m->json);
    m->json = NULL;
    return st;
}

static wf_status write_manifest(const char *dir, int64_t gen, const wf_ckpt_meta *meta, int nranks,
                                const uint64_t *bytes, const uint32_t *crcs)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    cJSON *j = cJSON_CreateObject(), *files = cJSON_CreateArray();
    if (!j || !files) {
        cJSON_Delete(j);
        cJSON_Delete(files);
        return wf_errorf(WF_NOMEM, "out of memory writing %s", path);
    }
    cJSON_AddStringToObject(j, "format", "weft-checkpoint");
    cJSON_AddNumberToObject(j, "version", WF_CKPT_VERSION);
    cJSON_AddNumberToObject(j, "generation", (double)gen);
    cJSON_AddNumberToObject(j, "step", (double)meta->step);
    cJSON_AddNumberToObject(j, "nranks", nranks);
    char model[WF_CKPT_MODEL_LEN];
    snprintf(model, sizeof model, "%s", meta->model);
    cJSON_AddStringToObject(j, "model", model);
    if (meta->run[0]) {
        char run[sizeof meta->run];
        snprintf(run, sizeof run, "%s", meta->run);
        cJSON_AddStringToObject(j, "run", run);
    }
    cJSON_AddItemToObject(j, "files", files);
    for (int r = 0; r < nranks; r++) {
        cJSON *f = cJSON_CreateObject();
        char name[64];
        snprintf(name, sizeof name, "rank-%d.g%lld.bin", r, (long long)gen);
        cJSON_AddNumberToObject(f, "rank", r);
        cJSON_AddStringToObject(f, "path", name);
        cJSON_AddNumberToObject(f, "bytes", (double)bytes[r]);
        cJSON_AddNumberToObject(f, "crc32", (double)crcs[r]);
        cJSON_AddItemToArray(files, f);
    }
    wf_status st = wf_json_write_file(path, j);
    cJSON_Delete(j);
    if (st == WF_OK)
        fsync_dir(dir);
    return st;
}

/* Parses "rank-<r>.g<gen>.bin" (returns 1, rank and gen), else 0. */
static int shard_name(const char *name, int *rank, long long *gen)
{
    int r, used = 0;
    long long g;
    if (sscanf(name, "rank-%d.g%lld.bin%n", &r, &g, &used) == 2 && name[used] == 0) {
        *rank = r;
        *gen = g;
        return 1;
    }
    return 0;
}

/* After a manifest of generation gen for nranks is durable: removes shards it
 * does not name (other generations, ranks beyond nranks) and temporary files
 * left by interrupted saves. Only names this module writes are touched. */
static void cleanup_dir(const char *dir, int64_t gen, int nranks)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        long long g;
        int r, stale = 0;
        if (strncmp(e->d_name, "rank-", 5) == 0 && strstr(e->d_name, ".bin.tmp."))
            stale = 1;
        else if (strncmp(e->d_name, MANIFEST ".tmp.", strlen(MANIFEST) + 5) == 0)
            stale = 1;
        else if (shard_name(e->d_name, &r, &g) && (g != gen || r >= nranks))
            stale = 1;
        if (stale) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(dp);
}

/* ---- save ---------------------------------------------------------------------------------- */

wf_status wf_ckpt_save(const char *dir, const wf_ckpt_meta *meta, const wf_ckpt_tensor *t, int n)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    int multi = nranks > 1;
    wf_status st = check_tensors(t, n);
    if (st == WF_OK && (!dir || !dir[0] || strlen(dir) > 4000))
        st = wf_errorf(WF_INVAL, "checkpoint: directory name empty or too long");
    if (st == WF_OK && (meta->step < 0 || meta->data_position < 0))
        st = wf_errorf(WF_INVAL, "checkpoint: step %lld or data position %lld is negative",
                       (long long)meta->step, (long long)meta->data_position);
    if (st == WF_OK && mkdir(dir, 0755) != 0 && errno != EEXIST)
        st = wf_errorf(WF_IO, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
    if (st == WF_OK) {
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = wf_errorf(WF_IO, "checkpoint path %s is not a directory", dir);
    }
    /* The new generation: one past the current manifest's (1 when there is
     * none or it is unreadable; its shards are then unreferenced anyway). */
    int64_t gen = 1;
    if (st == WF_OK && rank == 0) {
        manifest m;
        if (read_manifest(dir, &m) == WF_OK) {
            gen = m.generation + 1;
            cJSON_Delete(m.json);
        }
        wf_clear_error();
    }
    st = wf_mpi_agree(st);
    if (st != WF_OK)
        return st;
    if (multi && MPI_Bcast(&gen, 1, MPI_INT64_T, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "checkpoint %s: MPI_Bcast of the generation failed", dir);

    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.g%lld.bin", dir, rank, (long long)gen);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    st = write_shard(dir, path, meta, rank, nranks, t, n, &bytes, &crc);
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        unlink(path); /* unreferenced by any manifest */
        return st;
    }

    uint64_t *all_bytes = NULL;
    uint32_t *all_crc = NULL;
    if (rank == 0) {
        all_bytes = calloc((size_t)nranks, sizeof *all_bytes);
        all_crc = calloc((size_t)nranks, sizeof *all_crc);
        if (!all_bytes || !all_crc)
            st = wf_errorf(WF_NOMEM, "out of memory writing the checkpoint manifest");
    }
    if (multi) {
        uint64_t mine[2] = {bytes, crc};
        uint64_t *gathered = rank == 0 ? calloc(2 * (size_t)nranks, sizeof *gathered) : NULL;
        if (rank == 0 && !gathered && st == WF_OK)
            st = wf_errorf(WF_NOMEM, "out of memory writing the checkpoint manifest");
        uint64_t scratch[2];
        if (MPI_Gather(mine, 2, MPI_UINT64_T, gathered ? gathered : scratch, 2, MPI_UINT64_T, 0,
                       MPI_COMM_WORLD) != MPI_SUCCESS && st == WF_OK)
            st = wf_errorf(WF_MPI, "checkpoint %s: MPI_Gather of the shard sizes failed", dir);
        if (rank == 0 && st == WF_OK)
            for (int r = 0; r < nranks; r++) {
                all_bytes[r] = gathered[2 * r];
                all_crc[r] = (uint32_t)gathered[2 * r + 1];
            }
        free(gathered);
    } else if (st == WF_OK) {
        all_bytes[0] = bytes;
        all_crc[0] = crc;
    }
    if (rank == 0 && st == WF_OK) {
        st = write_manifest(dir, gen, meta, nranks, all_bytes, all_crc);
        if (st == WF_OK)
            cleanup_dir(dir, gen, nranks);
    }
    free(all_bytes);
    free(all_crc);
    return wf_mpi_agree(st);
}

/* ---- load ------------------------------------------------------------------------------------ */

/* Reads and validates this rank's shard against the manifest and the caller's
 * expectations; on success *buf holds the whole file. */
static wf_status load_shard(const char *dir, const manifest *m, int rank, int nranks, const char *model,
                            const wf_ckpt_tensor *t, int n, unsigned char **buf_out, size_t *len_out)
{
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/%s", dir, MANIFEST);
    if (m->nranks != nranks)
        return wf_errorf(WF_INVAL, "checkpoint %s was written by %lld ranks; this job has %d", dir,
                         (long long)m->nranks, nranks);
    if (model && strcmp(model, m->model) != 0)
        return wf_errorf(WF_INVAL, "checkpoint %s holds model %s, not %s", dir, m->model, model);
    const cJSON *entry = NULL, *e;
    cJSON_ArrayForEach(e, m->files)
    {
        int64_t r = -1;
        if (wf_json_get_int(e, mpath, "rank", 1, 0, m->nranks - 1, &r) != WF_OK)
            return WF_FORMAT;
        if (r == rank)
            entry = e;
    }
    if (!entry)
        return wf_errorf(WF_FORMAT, "%s: no file listed for rank %d", mpath, rank);
    const char *name = NULL;
    int64_t want_bytes = 0, want_crc = 0;
    wf_status st;
    if ((st = wf_json_get_str(entry, mpath, "path", 1, &name)) != WF_OK ||
        (st = wf_json_get_int(entry, mpath, "bytes", 1, HDR_FIXED + 4, INT64_MAX / 2, &want_bytes)) != WF_OK ||
        (st = wf_json_get_int(entry, mpath, "crc32", 1, 0, UINT32_MAX, &want_crc)) != WF_OK)
        return st;
    if (strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
        return wf_errorf(WF_FORMAT, "%s: file name %s must be a plain name in the checkpoint directory", mpath, name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return wf_errorf(WF_FORMAT, "checkpoint file %s: %s (listed in %s)", path, strerror(errno), mpath);
    if ((int64_t)sb.st_size != want_bytes)
        return wf_errorf(WF_FORMAT, "checkpoint file %s has %lld bytes, the manifest says %lld (truncated or torn)",
                         path, (long long)sb.st_size, (long long)want_bytes);
    char *raw;
    size_t len;
    if ((st = wf_file_read_kind(path, WF_FILE_CHECKPOINT, &raw, &len)) != WF_OK)
        return st;
    unsigned char *b = (unsigned char *)raw;
    st = WF_OK;
    if ((int64_t)len != want_bytes) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: read %zu bytes, the manifest says %lld", path, len,
                       (long long)want_bytes);
        goto fail;
    }
    if (memcmp(b, CKPT_MAGIC, 8) != 0) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: bad magic (not a weft checkpoint shard)", path);
        goto fail;
    }
    uint32_t version = get_u32(b + 8);
    if (version != WF_CKPT_VERSION) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: version %u, this weft reads version %d", path, version,
                       WF_CKPT_VERSION);
        goto fail;
    }
    uint32_t stored_crc = get_u32(b + len - 4);
    uint32_t crc = 0;
    {
        uLong c = crc32(0L, Z_NULL, 0);
        size_t left = len - 4;
        const unsigned char *p = b;
        while (left > 0) {
            size_t chunk = left > (1u << 30) ? (1u << 30) : left;
            c = crc32(c, p, (uInt)chunk);
            p += chunk;
            left -= chunk;
        }
        crc = (uint32_t)c;
    }
    if (crc != stored_crc || crc != (uint32_t)want_crc) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: CRC32 0x%08x, the file says 0x%08x and the manifest 0x%08x (corrupt)",
                       path, crc, stored_crc, (unsigned)want_crc);
        goto fail;
    }
    uint32_t hdr_bytes = get_u32(b + 12), nt = get_u32(b + 200);
    if (nt > MAX_TENSORS || hdr_bytes != HDR_FIXED + (uint64_t)nt * ENTRY_BYTES || hdr_bytes > len - 4) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: inconsistent header (%u tensors, %u header bytes)", path, nt,
                       hdr_bytes);
        goto fail;
    }
    if ((int)get_u32(b + 64) != rank || (int)get_u32(b + 68) != nranks || (int64_t)get_u64(b + 16) != m->step ||
        strncmp((const char *)b + 72, m->model, WF_CKPT_MODEL_LEN) != 0 || b[72 + WF_CKPT_MODEL_LEN - 1] != 0) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: its rank, step or model disagree with %s", path, mpath);
        goto fail;
    }
    /* The table: every entry well formed, data contiguous up to the CRC. */
    uint64_t off = hdr_bytes;
    for (uint32_t i = 0; i < nt; i++) {
        const unsigned char *en = b + HDR_FIXED + (size_t)i * ENTRY_BYTES;
        uint32_t ndim = get_u32(en + 68);
        int di = dtype_code_index(get_u32(en + 64));
        if (memchr(en, 0, 64) == NULL || en[0] == 0 || di < 0 || ndim > WF_MAX_DIMS ||
            get_u64(en + 144) != off) {
            st = wf_errorf(WF_FORMAT, "checkpoint file %s: tensor entry %u is malformed", path, i);
            goto fail;
        }
        uint64_t nb = DTYPES[di].bytes;
        for (uint32_t d = 0; d < ndim; d++) {
            uint64_t dim = get_u64(en + 72 + 8 * d);
            if (dim > ((uint64_t)1 << 40) || (dim && nb > UINT64_MAX / dim)) {
                st = wf_errorf(WF_FORMAT, "checkpoint file %s: tensor %.64s has an absurd shape", path,
                               (const char *)en);
                goto fail;
            }
            nb *= dim;
        }
        if (get_u64(en + 136) != nb || nb > len - 4 - off) {
            st = wf_errorf(WF_FORMAT, "checkpoint file %s: tensor %.64s's size disagrees with its shape or the file",
                           path, (const char *)en);
            goto fail;
        }
        off += nb;
    }
    if (off != len - 4) {
        st = wf_errorf(WF_FORMAT, "checkpoint file %s: %llu bytes of data, the file has %zu", path,
                       (unsigned long long)(off - hdr_bytes), len - 4 - hdr_bytes);
        goto fail;
    }
    /* What the caller expects: the same set of names, with equal dtypes and shapes. */
    if ((int)nt != n) {
        st = wf_errorf(WF_INVAL, "checkpoint file %s holds %u tensors, the model has %d", path, nt, n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        const unsigned char *en = NULL;
        for (uint32_t k = 0; k < nt && !en; k++) {
            const unsigned char *c = b + HDR_FIXED + (size_t)k * ENTRY_BYTES;
            if (strcmp((const char *)c, t[i].name) == 0)
                en = c;
        }
        if (!en) {
            st = wf_errorf(WF_INVAL, "checkpoint file %s has no tensor %s", path, t[i].name);
            goto fail;
        }
        wf_dtype dt = DTYPES[dtype_code_index(get_u32(en + 64))].dtype;
        int ndim = (int)get_u32(en + 68);
        int64_t shape[WF_MAX_DIMS];
        int same = dt == t[i].dtype && ndim == t[i].ndim;
        for (int d = 0; d < ndim; d++) {
            shape[d] = (int64_t)get_u64(en + 72 + 8 * d);
            if (same && shape[d] != t[i].shape[d])
                same = 0;
        }
        if (!same) {
            char have[160], want[160];
            shape_str(ndim, shape, have, sizeof have);
            shape_str(t[i].ndim, t[i].shape, want, sizeof want);
            st = wf_errorf(WF_INVAL, "checkpoint file %s: tensor %s is %s %s, the model expects %s %s", path,
                           t[i].name, dtype_str(dt), have, dtype_str(t[i].dtype), want);
            goto fail;
        }
    }
    *buf_out = b;
    *len_out = len;
    return WF_OK;
fail:
    free(raw);
    return st;
}

wf_status wf_ckpt_load(const char *dir, const char *model, wf_ckpt_meta *meta, const wf_ckpt_tensor *t, int n)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    unsigned char *buf = NULL;
    size_t len = 0;
    wf_status st = check_tensors(t, n);
    if (st == WF_OK && (!dir || !dir[0] || strlen(dir) > 4000))
        st = wf_errorf(WF_INVAL, "checkpoint: directory name empty or too long");
    manifest m = {0};
    if (st == WF_OK)
        st = read_manifest(dir, &m);
    if (st == WF_OK)
        st = load_shard(dir, &m, rank, nranks, model, t, n, &buf, &len);
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        free(buf);
        cJSON_Delete(m.json);
        return st;
    }
    /* Everything validated on every rank: only now touch the caller's memory. */
    uint32_t nt = get_u32(buf + 200);
    for (int i = 0; i < n; i++)
        for (uint32_t k = 0; k < nt; k++) {
            const unsigned char *en = buf + HDR_FIXED + (size_t)k * ENTRY_BYTES;
            if (strcmp((const char *)en, t[i].name) == 0) {
                memcpy(t[i].data, buf + get_u64(en + 144), (size_t)get_u64(en + 136));
                break;
            }
        }
    memset(meta, 0, sizeof *meta);
    meta->step = (int64_t)get_u64(buf + 16);
    meta->data_position = (int64_t)get_u64(buf + 24);
    for (int i = 0; i < 4; i++)
        meta->rng[i] = get_u64(buf + 32 + 8 * i);
    memcpy(meta->model, buf + 72, WF_CKPT_MODEL_LEN);
    meta->model[WF_CKPT_MODEL_LEN - 1] = 0;
    free(buf);
    cJSON_Delete(m.json);
    return WF_OK;
}

wf_status wf_ckpt_peek(const char *dir, wf_ckpt_meta *meta)
{
    memset(meta, 0, sizeof *meta);
    if (!dir || !dir[0] || strlen(dir) > 4000)
        return wf_errorf(WF_INVAL, "checkpoint: directory name empty or too long");
    manifest m;
    wf_status st = read_manifest(dir, &m);
    if (st != WF_OK)
        return st;
    meta->step = m.step;
    snprintf(meta->model, sizeof meta->model, "%s", m.model);
    snprintf(meta->run, sizeof meta->run, "%s", m.run);
    cJSON_Delete(m.json);
    return WF_OK;
}

int wf_ckpt_exists(const char *dir)
{
    char path[4200];
    if (!dir || snprintf(path, sizeof path, "%s/%s", dir, MANIFEST) >= (int)sizeof path)
        return 0;
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}
