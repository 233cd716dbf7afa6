/* Hostile input (issue 12): the one file-reading policy (regular files only,
 * no blocking open, a size cap per kind), the one writer (regular targets
 * only, the old mode kept), checked products, and the readers' fixes that
 * fuzzing called for: IDX headers checked against the file's size before any
 * allocation, cluster device counts that overflow, tensor element counts that
 * overflow, duplicate JSON keys. Each case asserts the status and the message,
 * against what the input is (a closed form). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/graph.h"
#include "weft/runtime_io.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/weft-test-hostile-%ld", (long)getpid());
    return mkdir(dir, 0700);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name)
{
    static char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static const char *src_path(const char *rel)
{
    static char p[1024];
    const char *root = getenv("WEFT_SOURCE_DIR");
    snprintf(p, sizeof p, "%s/%s", root ? root : ".", rel);
    return p;
}

/* Row 4: a FIFO is refused at once, without waiting for a writer. */
static void test_fifo_refused(void **state)
{
    (void)state;
    const char *f = path_of("fifo");
    assert_int_equal(mkfifo(f, 0600), 0);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(wf_file_read(f, &data, &len), WF_IO);
    assert_non_null(strstr(wf_last_error(), "not a regular file"));
    assert_null(data);
    cJSON *j = NULL;
    assert_int_equal(wf_json_read_file(f, &j), WF_IO);
    wf_cluster c;
    assert_int_not_equal(wf_cluster_lookup(f, &c), WF_OK);
    assert_non_null(strstr(wf_last_error(), "not a regular file"));
}

/* Row 5: a character device is refused before anything is read. */
static void test_device_refused(void **state)
{
    (void)state;
    char *data = NULL;
    assert_int_equal(wf_file_read("/dev/zero", &data, NULL), WF_IO);
    assert_non_null(strstr(wf_last_error(), "not a regular file"));
    assert_int_equal(wf_file_read_kind("/tmp", WF_FILE_DATA, &data, NULL), WF_IO);
    assert_non_null(strstr(wf_last_error(), "not a regular file"));
}

/* The size cap per kind: a sparse file one byte over the text cap. */
static void test_size_cap(void **state)
{
    (void)state;
    const char *f = path_of("big.json");
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)wf_file_cap(WF_FILE_TEXT) + 1), 0);
    close(fd);
    char *data = NULL;
    assert_int_equal(wf_file_read(f, &data, NULL), WF_IO);
    assert_non_null(strstr(wf_last_error(), "64 MiB"));
    /* the same file is within a data file's cap */
    size_t len = 0;
    assert_int_equal(wf_file_read_kind(f, WF_FILE_DATA, &data, &len), WF_OK);
    assert_int_equal(len, wf_file_cap(WF_FILE_TEXT) + 1);
    free(data);
    unlink(f);
}

/* Row 6: atomic writes refuse non-regular targets and keep a file's mode. */
static void test_writer_policy(void **state)
{
    (void)state;
    const char *fifo = path_of("out-fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(wf_file_write_atomic(fifo, "x", 1), WF_IO);
    struct stat st;
    assert_int_equal(stat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode)); /* still the FIFO: not renamed over */
    assert_int_equal(wf_file_check_output(fifo, "-o"), WF_INVAL);
    assert_int_equal(wf_file_check_output("/dev/null", "-o"), WF_INVAL);
    assert_int_equal(wf_file_check_output("", "-o"), WF_INVAL);
    assert_int_equal(wf_file_check_output("/no/such/dir/x.json", "-o"), WF_INVAL);
    const char *f = path_of("plan.json");
    assert_int_equal(wf_file_write_atomic(f, "a", 1), WF_OK);
    assert_int_equal(chmod(f, 0640), 0);
    assert_int_equal(wf_file_write_atomic(f, "bb", 2), WF_OK);
    assert_int_equal(stat(f, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(st.st_size, 2);
    assert_int_equal(wf_file_check_output(f, "-o"), WF_OK);
    assert_int_equal(wf_file_check_output_dir(f, "--checkpoint"), WF_INVAL);
    assert_int_equal(wf_file_check_output_dir(dir, "--checkpoint"), WF_OK);
}

/* Checked products: exact below the limit, refused at and past overflow. */
static void test_checked_product(void **state)
{
    (void)state;
    int64_t out = 0;
    int64_t ok[3] = {1 << 16, 1 << 16, 1 << 16};
    assert_int_equal(wf_checked_product(ok, 3, WF_MAX_NUMEL, "t", &out), WF_OK);
    assert_true(out == (int64_t)1 << 48);
    int64_t over[3] = {1 << 16, 1 << 16, (1 << 16) + 1};
    assert_int_equal(wf_checked_product(over, 3, WF_MAX_NUMEL, "t", &out), WF_INVAL);
    int64_t wrap[4] = {(int64_t)1 << 32, (int64_t)1 << 32, 2, 3};
    assert_int_equal(wf_checked_product(wrap, 4, INT64_MAX, "t", &out), WF_INVAL);
    assert_int_equal(wf_mul_i64(INT64_MAX / 2 + 1, 2, &out), -1);
    assert_int_equal(wf_mul_i64(3, 5, &out), 0);
    assert_int_equal(out, 15);
}

/* Row 7: level sizes whose product overflows int64 are rejected, not "0 devices". */
static void test_cluster_device_overflow(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=2", &c), WF_OK);
    cJSON *j = wf_cluster_to_json(&c);
    assert_non_null(j);
    cJSON *levels = cJSON_GetObjectItemCaseSensitive(j, "levels");
    cJSON *lv0 = cJSON_GetArrayItem(levels, 0);
    for (int k = cJSON_GetArraySize(levels); k < 4; k++) {
        cJSON *dup = cJSON_Duplicate(lv0, 1);
        char name[32];
        snprintf(name, sizeof name, "extra%d", k);
        cJSON_ReplaceItemInObject(dup, "name", cJSON_CreateString(name));
        cJSON_AddItemToArray(levels, dup);
    }
    for (int k = 0; k < cJSON_GetArraySize(levels); k++)
        cJSON_ReplaceItemInObject(cJSON_GetArrayItem(levels, k), "size", cJSON_CreateNumber(16777216));
    wf_cluster out;
    assert_int_not_equal(wf_cluster_from_json(j, "four-levels", &out), WF_OK);
    assert_non_null(strstr(wf_last_error(), "devices"));
    cJSON_Delete(j);
}

/* Row 8: tensors whose element count passes WF_MAX_NUMEL are rejected. */
static void test_tensor_numel_overflow(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "big");
    int64_t shape[2] = {(int64_t)1 << 40, (int64_t)1 << 30};
    assert_true(wf_graph_add_tensor(&g, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 2, shape) < 0);
    assert_int_equal(g.status, WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "elements"));
    wf_graph_free(&g);
    wf_graph_init(&g, "linear");
    /* x [2^30, 2^10] and w [2^10, 2^20] fit; their product [2^30, 2^20] does not */
    int64_t xs[2] = {(int64_t)1 << 30, 1 << 10}, ws[2] = {1 << 10, 1 << 20};
    int x = wf_graph_add_tensor(&g, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 2, xs);
    int w = wf_graph_add_tensor(&g, "w", WF_DTYPE_FP32, WF_ROLE_PARAM, 2, ws);
    assert_true(x >= 0 && w >= 0);
    int in[2] = {x, w};
    assert_true(wf_graph_add_op(&g, WF_OP_LINEAR, "fc", in, 2, NULL) < 0);
    assert_non_null(strstr(wf_last_error(), "op 'fc': output 0 has more than"));
    wf_graph_free(&g);
}

/* Row 9: an IDX header announcing more than its gzip file can hold is refused
 * before allocating; a product of dims that overflows too. */
static void test_idx_header_vs_size(void **state)
{
    (void)state;
    wf_idx x;
    assert_int_equal(wf_idx_read(src_path("tests/data/hostile/row09-idx-huge-dims-images-idx3-ubyte.gz"), 0, &x),
                     WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "more than a"));
    assert_int_equal(wf_idx_read(src_path("tests/data/hostile/row09-idx-dims-overflow.gz"), 0, &x), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "IDX dimensions announce"));
}

/* Row 15: a key given twice in a JSON object is an error naming it. */
static void test_duplicate_keys(void **state)
{
    (void)state;
    cJSON *j = NULL;
    assert_int_equal(wf_json_parse("{\"a\": 1, \"b\": {\"c\": 1, \"c\": 2}}", "t", &j), WF_FORMAT);
    assert_null(j);
    assert_non_null(strstr(wf_last_error(), "\"c\" appears twice"));
    assert_int_equal(wf_json_parse("{\"a\": [{\"x\": 1}, {\"x\": 2}]}", "t", &j), WF_OK);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_device_refused),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_writer_policy),
        cmocka_unit_test(test_checked_product),
        cmocka_unit_test(test_cluster_device_overflow),
        cmocka_unit_test(test_tensor_numel_overflow),
        cmocka_unit_test(test_idx_header_vs_size),
        cmocka_unit_test(test_duplicate_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
