/* Checkpoints (one process): bit-exact round trip of parameters, optimizer
 * state and meta; a missing manifest is "absent"; truncated, flipped, torn and
 * mismatched files are refused with a message naming the file and the reason,
 * leaving the caller's tensors untouched; an interrupted save (stray temporary
 * and next-generation files) does not disturb the previous checkpoint, and the
 * next complete save cleans them up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/runtime_io.h"

/* The state of a small model: w[3,4] fp32, b[4] fp32, adam.m.w[3,4] fp32,
 * table int32[2,5], counts int64[2], flags u8[7]. */
typedef struct {
    float w[12], b[4], mw[12];
    int32_t table[10];
    int64_t counts[2];
    uint8_t flags[7];
} state;

#define NT 6

static void describe(state *s, wf_ckpt_tensor *t)
{
    memset(t, 0, sizeof(wf_ckpt_tensor) * NT);
    t[0] = (wf_ckpt_tensor){"w", WF_DTYPE_FP32, 2, {3, 4}, s->w};
    t[1] = (wf_ckpt_tensor){"b", WF_DTYPE_FP32, 1, {4}, s->b};
    t[2] = (wf_ckpt_tensor){"adam.m.w", WF_DTYPE_FP32, 2, {3, 4}, s->mw};
    t[3] = (wf_ckpt_tensor){"table", WF_DTYPE_INT32, 2, {2, 5}, s->table};
    t[4] = (wf_ckpt_tensor){"counts", WF_DTYPE_INT64, 1, {2}, s->counts};
    t[5] = (wf_ckpt_tensor){"flags", WF_DTYPE_U8, 1, {7}, s->flags};
}

/* Values that a lossy or text format would not keep: -0, denormals, NaN
 * payloads, infinities, extreme integers. */
static void fill_state(state *s, int variant)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 12; i++) {
        s->w[i] = (float)(i + variant) / 7.0f - 0.8f;
        s->mw[i] = ldexpf(1.0f + (float)i, -140 + variant); /* denormals */
    }
    s->b[0] = -0.0f;
    s->b[1] = INFINITY;
    uint32_t nan_bits = 0x7fc01234u + (uint32_t)variant;
    memcpy(&s->b[2], &nan_bits, 4);
    s->b[3] = 3.4e38f;
    for (int i = 0; i < 10; i++)
        s->table[i] = (int32_t)(i * 1000003 * (variant + 1));
    s->table[9] = INT32_MIN;
    s->counts[0] = INT64_MAX - variant;
    s->counts[1] = -5;
    for (int i = 0; i < 7; i++)
        s->flags[i] = (uint8_t)(250 + i - variant);
}

static wf_ckpt_meta make_meta(int64_t step)
{
    wf_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.data_position = step * 64;
    m.rng[0] = 0x0123456789abcdefull;
    m.rng[1] = (uint64_t)step;
    m.rng[2] = UINT64_MAX;
    m.rng[3] = 42;
    snprintf(m.model, sizeof m.model, "gpt:layers=2,hidden=64");
    return m;
}

static void make_dir(char *dir)
{
    strcpy(dir, "/tmp/weft-test-ckpt-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The shard file the manifest names for rank 0. */
static void shard_path(const char *dir, char *out, size_t cap)
{
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    cJSON *j;
    assert_int_equal(wf_json_read_file(mpath, &j), WF_OK);
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "files"), 0);
    snprintf(out, cap, "%s/%s", dir, cJSON_GetObjectItem(f, "path")->valuestring);
    cJSON_Delete(j);
}

static int count_files(const char *dir)
{
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(dp);
    return n;
}

/* A load that must fail with `want`, naming needle1 and needle2, leaving the
 * caller's state and meta untouched. */
static void expect_refused(const char *dir, const char *model, wf_ckpt_tensor *t, int n, wf_status want,
                           const char *needle1, const char *needle2)
{
    unsigned char before[sizeof(state)];
    state sentinel;
    memset(&sentinel, 0xa5, sizeof sentinel);
    wf_ckpt_tensor tt[NT];
    describe(&sentinel, tt);
    for (int i = 0; i < n && i < NT; i++) {
        tt[i].name = t[i].name;
        tt[i].dtype = t[i].dtype;
        tt[i].ndim = t[i].ndim;
        memcpy(tt[i].shape, t[i].shape, sizeof tt[i].shape);
    }
    memcpy(before, &sentinel, sizeof before);
    wf_ckpt_meta meta;
    memset(&meta, 0x5a, sizeof meta);
    wf_ckpt_meta meta_before = meta;
    wf_status st = wf_ckpt_load(dir, model, &meta, tt, n);
    if (st != want)
        fail_msg("load returned %s (%s), expected %s", wf_status_name(st), wf_last_error(), wf_status_name(want));
    const char *msg = wf_last_error();
    if (!strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
        fail_msg("message '%s' lacks '%s' / '%s'", msg, needle1, needle2 ? needle2 : "");
    assert_memory_equal(&sentinel, before, sizeof before);
    assert_memory_equal(&meta, &meta_before, sizeof meta);
}

static void save_ok(const char *dir, int64_t step, state *s)
{
    wf_ckpt_tensor t[NT];
    describe(s, t);
    wf_ckpt_meta m = make_meta(step);
    if (wf_ckpt_save(dir, &m, t, NT) != WF_OK)
        fail_msg("save: %s", wf_last_error());
}

static void load_equals(const char *dir, int64_t step, const state *expect)
{
    state got;
    memset(&got, 0, sizeof got);
    wf_ckpt_tensor t[NT];
    describe(&got, t);
    /* load by a different order of names: matching is by name */
    wf_ckpt_tensor rev[NT];
    for (int i = 0; i < NT; i++)
        rev[i] = t[NT - 1 - i];
    wf_ckpt_meta m;
    if (wf_ckpt_load(dir, "gpt:layers=2,hidden=64", &m, rev, NT) != WF_OK)
        fail_msg("load: %s", wf_last_error());
    assert_memory_equal(&got, expect, sizeof got); /* bit-exact, NaN payloads included */
    wf_ckpt_meta want = make_meta(step);
    assert_int_equal(m.step, want.step);
    assert_int_equal(m.data_position, want.data_position);
    assert_memory_equal(m.rng, want.rng, sizeof m.rng);
    assert_string_equal(m.model, want.model);
}

static void test_round_trip(void **state_)
{
    (void)state_;
    char dir[64];
    make_dir(dir);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/ckpt", dir); /* created by save */
    assert_false(wf_ckpt_exists(sub));
    state s;
    fill_state(&s, 0);
    save_ok(sub, 10, &s);
    assert_true(wf_ckpt_exists(sub));
    load_equals(sub, 10, &s);
    assert_int_equal(count_files(sub), 2); /* manifest + one shard */

    /* A second save replaces the first; the old generation is gone. */
    state s2;
    fill_state(&s2, 3);
    save_ok(sub, 20, &s2);
    load_equals(sub, 20, &s2);
    assert_int_equal(count_files(sub), 2);
    char shard[512];
    shard_path(sub, shard, sizeof shard);
    assert_non_null(strstr(shard, "rank-0.g2.bin"));

    /* Zero tensors is a valid (if odd) checkpoint. */
    wf_ckpt_meta m = make_meta(1), got;
    assert_int_equal(wf_ckpt_save(sub, &m, NULL, 0), WF_OK);
    assert_int_equal(wf_ckpt_load(sub, NULL, &got, NULL, 0), WF_OK);
    assert_int_equal(got.step, 1);
    remove_dir(dir);
}

static void test_absent(void **state_)
{
    (void)state_;
    char dir[64];
    make_dir(dir);
    state s;
    fill_state(&s, 6);
    wf_ckpt_tensor t[NT];
    describe(&s, t);
    expect_refused(dir, NULL, t, NT, WF_NOTFOUND, dir, "no manifest");
    /* Shards without a manifest are still no checkpoint. */
    save_ok(dir, 5, &s);
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    assert_int_equal(unlink(mpath), 0);
    assert_false(wf_ckpt_exists(dir));
    expect_refused(dir, NULL, t, NT, WF_NOTFOUND, dir, "no manifest");
    expect_refused("/nonexistent/weft-ckpt", NULL, t, NT, WF_NOTFOUND, "/nonexistent/weft-ckpt", NULL);
    remove_dir(dir);
}

static void truncate_file(const char *path, long drop)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - drop), 0);
}

static void flip_byte(const char *path, long offset_from_end)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -offset_from_end, SEEK_END), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* Rewrites the manifest's bytes for rank 0 to the shard's actual size, so the
 * deeper checks (CRC, table) are exercised, not only the size check. */
static void manifest_fix_size(const char *dir, const char *shard)
{
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    cJSON *j;
    assert_int_equal(wf_json_read_file(mpath, &j), WF_OK);
    struct stat sb;
    assert_int_equal(stat(shard, &sb), 0);
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "files"), 0);
    cJSON_SetNumberValue(cJSON_GetObjectItem(f, "bytes"), (double)sb.st_size);
    assert_int_equal(wf_json_write_file(mpath, j), WF_OK);
    cJSON_Delete(j);
}

static void test_corrupt_refused(void **state_)
{
    (void)state_;
    char dir[64], shard[512];
    make_dir(dir);
    state s;
    fill_state(&s, 1);
    wf_ckpt_tensor t[NT];
    describe(&s, t);

    /* truncated: the size disagrees with the manifest */
    save_ok(dir, 7, &s);
    shard_path(dir, shard, sizeof shard);
    truncate_file(shard, 10);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "truncated");
    /* truncated with the manifest "agreeing": the CRC catches it */
    manifest_fix_size(dir, shard);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "CRC32");

    /* one flipped bit in the data */
    save_ok(dir, 7, &s);
    shard_path(dir, shard, sizeof shard);
    flip_byte(shard, 20);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "CRC32");

    /* a flipped bit in the stored CRC itself */
    save_ok(dir, 7, &s);
    shard_path(dir, shard, sizeof shard);
    flip_byte(shard, 2);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "CRC32");

    /* a flipped magic */
    save_ok(dir, 7, &s);
    shard_path(dir, shard, sizeof shard);
    struct stat sb;
    assert_int_equal(stat(shard, &sb), 0);
    flip_byte(shard, (long)sb.st_size);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "magic");

    /* the shard is gone */
    save_ok(dir, 7, &s);
    shard_path(dir, shard, sizeof shard);
    unlink(shard);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, shard, "No such file");

    /* a manifest that is not JSON, or of another version */
    save_ok(dir, 7, &s);
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    FILE *f = fopen(mpath, "w");
    fputs("{\"format\": \"weft-checkpoint\", ", f);
    fclose(f);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, "manifest.json", NULL);
    save_ok(dir, 7, &s);
    cJSON *j;
    assert_int_equal(wf_json_read_file(mpath, &j), WF_OK);
    cJSON_SetNumberValue(cJSON_GetObjectItem(j, "version"), 2);
    assert_int_equal(wf_json_write_file(mpath, j), WF_OK);
    cJSON_Delete(j);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, "manifest.json", "version 2");

    /* a manifest pointing outside the directory */
    save_ok(dir, 7, &s);
    assert_int_equal(wf_json_read_file(mpath, &j), WF_OK);
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "files"), 0);
    cJSON_SetValuestring(cJSON_GetObjectItem(e, "path"), "../elsewhere.bin");
    assert_int_equal(wf_json_write_file(mpath, j), WF_OK);
    cJSON_Delete(j);
    expect_refused(dir, NULL, t, NT, WF_FORMAT, "plain name", NULL);

    /* After all that, a fresh save loads again. */
    save_ok(dir, 8, &s);
    load_equals(dir, 8, &s);
    remove_dir(dir);
}

static void test_mismatch_refused(void **state_)
{
    (void)state_;
    char dir[64], shard[512];
    make_dir(dir);
    state s;
    fill_state(&s, 2);
    save_ok(dir, 3, &s);
    shard_path(dir, shard, sizeof shard);
    wf_ckpt_tensor t[NT];
    describe(&s, t);

    wf_ckpt_tensor bad[NT];
    memcpy(bad, t, sizeof bad);
    bad[0].shape[0] = 4; /* w is [3,4] on disk */
    bad[0].shape[1] = 3;
    expect_refused(dir, NULL, bad, NT, WF_INVAL, shard, "tensor w is fp32 [3,4], the model expects fp32 [4,3]");

    memcpy(bad, t, sizeof bad);
    bad[1].dtype = WF_DTYPE_INT32;
    expect_refused(dir, NULL, bad, NT, WF_INVAL, shard, "tensor b is fp32 [4], the model expects int32 [4]");

    memcpy(bad, t, sizeof bad);
    bad[2].name = "adam.v.w";
    expect_refused(dir, NULL, bad, NT, WF_INVAL, shard, "no tensor adam.v.w");

    expect_refused(dir, NULL, t, NT - 1, WF_INVAL, shard, "holds 6 tensors, the model has 5");
    expect_refused(dir, "gpt:layers=4", t, NT, WF_INVAL, "gpt:layers=2,hidden=64", "gpt:layers=4");

    /* bad requests */
    memcpy(bad, t, sizeof bad);
    bad[1].name = "w";
    expect_refused(dir, NULL, bad, NT, WF_INVAL, "used twice", NULL);
    wf_ckpt_meta m = make_meta(1);
    assert_int_equal(wf_ckpt_save(dir, &m, bad, NT), WF_INVAL);
    m.step = -1;
    assert_int_equal(wf_ckpt_save(dir, &m, t, NT), WF_INVAL);
    m = make_meta(1);
    assert_int_equal(wf_ckpt_save("/proc/weft-cannot-be-here", &m, t, NT), WF_IO);

    /* The checkpoint on disk is intact after all the refusals. */
    load_equals(dir, 3, &s);
    remove_dir(dir);
}

static void write_junk(const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("WEFTCKPT half a shard", f);
    fclose(f);
}

static void test_interrupted_save(void **state_)
{
    (void)state_;
    char dir[64], p[512];
    make_dir(dir);
    state s1, s2;
    fill_state(&s1, 4);
    fill_state(&s2, 5);
    save_ok(dir, 100, &s1);

    /* A save of generation 2 died: one shard half-written under its temporary
     * name, another fully renamed, a manifest temporary half-written; the
     * manifest still names generation 1. */
    snprintf(p, sizeof p, "%s/rank-0.g2.bin.tmp.99999", dir);
    write_junk(p);
    snprintf(p, sizeof p, "%s/rank-1.g2.bin", dir);
    write_junk(p);
    snprintf(p, sizeof p, "%s/manifest.json.tmp.99999", dir);
    write_junk(p);
    /* and a file that is not ours, which must survive */
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    write_junk(p);
    load_equals(dir, 100, &s1);

    /* Even a renamed but unreferenced rank-0 shard of generation 2 is ignored. */
    snprintf(p, sizeof p, "%s/rank-0.g2.bin", dir);
    write_junk(p);
    load_equals(dir, 100, &s1);

    /* The next complete save overwrites generation 2 and cleans up. */
    save_ok(dir, 200, &s2);
    load_equals(dir, 200, &s2);
    assert_int_equal(count_files(dir), 3); /* manifest, rank-0.g2.bin, notes.txt */
    char shard[512];
    shard_path(dir, shard, sizeof shard);
    snprintf(p, sizeof p, "%s/rank-0.g2.bin", dir);
    assert_string_equal(shard, p);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    assert_int_equal(access(p, F_OK), 0);
    remove_dir(dir);
}

static void test_mpi_helpers_single(void **state_)
{
    (void)state_;
    int rank = -1, nranks = -1;
    wf_mpi_world(&rank, &nranks);
    assert_int_equal(rank, 0);
    assert_int_equal(nranks, 1);
    wf_errorf(WF_IO, "disk full");
    assert_int_equal(wf_mpi_agree(WF_IO), WF_IO);
    assert_string_equal(wf_last_error(), "disk full");
    assert_int_equal(wf_mpi_agree(WF_OK), WF_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_absent),
        cmocka_unit_test(test_corrupt_refused),  cmocka_unit_test(test_mismatch_refused),
        cmocka_unit_test(test_interrupted_save), cmocka_unit_test(test_mpi_helpers_single),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
