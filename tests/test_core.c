/* Core: specs, strict number parsing, option tables, JSON field checks, atomic writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/core.h"

static void test_spec_parse(void **state)
{
    (void)state;
    wf_spec s;
    assert_int_equal(wf_spec_parse("gpt:layers=96,hidden=12288", &s), WF_OK);
    assert_string_equal(s.name, "gpt");
    assert_int_equal(s.nkv, 2);
    int64_t v = 0;
    assert_int_equal(wf_spec_get_int(&s, "layers", 1, 1000, &v), 1);
    assert_int_equal(v, 96);
    assert_int_not_equal(wf_spec_check_unused(&s, "model", "layers"), WF_OK);
    assert_int_equal(wf_spec_get_int(&s, "hidden", 1, 1 << 20, &v), 1);
    assert_int_equal(v, 12288);
    assert_int_equal(wf_spec_check_unused(&s, "model", "layers"), WF_OK);

    assert_int_equal(wf_spec_parse("dp=8,tp=4", &s), WF_OK);
    assert_string_equal(s.name, "");
    assert_int_equal(s.nkv, 2);
    assert_int_equal(wf_spec_parse("resnet50", &s), WF_OK);
    assert_string_equal(s.name, "resnet50");
    assert_int_equal(s.nkv, 0);

    assert_int_equal(wf_spec_parse("gpt:layers", &s), WF_INVAL);
    assert_int_equal(wf_spec_parse("gpt:layers=", &s), WF_INVAL);
    assert_int_equal(wf_spec_parse("dp=1,dp=2", &s), WF_INVAL);
    assert_int_equal(wf_spec_parse("dp=1,", &s), WF_INVAL);
    assert_int_equal(wf_spec_parse("", &s), WF_INVAL);
    assert_int_equal(wf_spec_parse("x:a=1", &s), WF_OK);
    assert_true(wf_spec_get_int(&s, "a", 2, 5, &v) < 0);
    assert_non_null(strstr(wf_last_error(), "a=1"));
}

static void test_parse_numbers(void **state)
{
    (void)state;
    int64_t i = 0;
    double d = 0;
    assert_int_equal(wf_parse_int("42", "x", 0, 100, &i), WF_OK);
    assert_int_equal(i, 42);
    assert_int_equal(wf_parse_int("42x", "x", 0, 100, &i), WF_INVAL);
    assert_int_equal(wf_parse_int("101", "x", 0, 100, &i), WF_INVAL);
    assert_int_equal(wf_parse_num("2.5e3", "y", 0, 1e4, &d), WF_OK);
    assert_float_equal(d, 2500.0, 0);
    assert_int_equal(wf_parse_num("nan", "y", 0, 1e4, &d), WF_INVAL);
    assert_int_equal(wf_parse_num("", "y", 0, 1e4, &d), WF_INVAL);
}

static void test_opts(void **state)
{
    (void)state;
    int64_t batch = 0;
    const char *model = NULL;
    int json = 0;
    double mem = 0;
    wf_opt opts[] = {
        {"model", 'm', WF_OPT_STR, &model, "M", "model", 1},
        {"batch", 0, WF_OPT_INT, &batch, "B", "batch", 0},
        {"json", 0, WF_OPT_FLAG, &json, NULL, "json", 0},
        {"max-memory", 0, WF_OPT_NUM, &mem, "GiB", "mem", 0},
        {NULL, 0, 0, NULL, NULL, NULL, 0},
    };
    char *argv[] = {"x", "--model", "gpt2", "--batch=16", "--json", "--max-memory", "40.5", "pos"};
    const char *pos[2];
    int npos = 0, help = 0;
    assert_int_equal(wf_opts_parse(opts, 8, argv, 1, pos, 2, &npos, &help), WF_OK);
    assert_string_equal(model, "gpt2");
    assert_int_equal(batch, 16);
    assert_int_equal(json, 1);
    assert_float_equal(mem, 40.5, 0);
    assert_int_equal(npos, 1);
    char *bad[] = {"x", "--model", "gpt2", "--nope"};
    assert_int_equal(wf_opts_parse(opts, 4, bad, 1, pos, 2, &npos, &help), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "--nope"));
    char *missing[] = {"x", "--batch", "3"};
    assert_int_equal(wf_opts_parse(opts, 3, missing, 1, pos, 2, &npos, &help), WF_INVAL);
    char *badnum[] = {"x", "-m", "a", "--batch", "three"};
    assert_int_equal(wf_opts_parse(opts, 5, badnum, 1, pos, 2, &npos, &help), WF_INVAL);
    char *novalue[] = {"x", "-m"};
    assert_int_equal(wf_opts_parse(opts, 2, novalue, 1, pos, 2, &npos, &help), WF_INVAL);
}

static void test_json_and_atomic_write(void **state)
{
    (void)state;
    char path[] = "/tmp/weft-core-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *text = "{\"a\": 3, \"b\": \"x\", \"c\": 2.5}";
    assert_int_equal(wf_file_write_atomic(path, text, strlen(text)), WF_OK);
    cJSON *j = NULL;
    assert_int_equal(wf_json_read_file(path, &j), WF_OK);
    int64_t a = 0;
    double c = 0;
    const char *b = NULL;
    assert_int_equal(wf_json_get_int(j, "t", "a", 1, 0, 10, &a), WF_OK);
    assert_int_equal(a, 3);
    assert_int_equal(wf_json_get_str(j, "t", "b", 1, &b), WF_OK);
    assert_string_equal(b, "x");
    assert_int_equal(wf_json_get_int(j, "t", "c", 1, 0, 10, &a), WF_FORMAT);
    assert_int_equal(wf_json_get_num(j, "t", "c", 1, 0, 2, &c), WF_FORMAT);
    assert_int_equal(wf_json_get_num(j, "t", "zz", 1, 0, 2, &c), WF_FORMAT);
    const char *allowed[] = {"a", "b", NULL};
    assert_int_equal(wf_json_check_keys(j, "t", allowed), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "\"c\""));
    cJSON_Delete(j);
    assert_int_equal(wf_json_parse("{\"a\": ", "inline", &j), WF_FORMAT);
    unlink(path);
}

static void test_arena(void **state)
{
    (void)state;
    wf_arena a;
    wf_arena_init(&a, 64);
    char *p = wf_arena_alloc(&a, 10);
    char *q = wf_arena_alloc(&a, 1000);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal(((uintptr_t)q) % 16, 0);
    assert_int_equal(q[999], 0);
    assert_string_equal(wf_arena_strdup(&a, "hello"), "hello");
    wf_arena_free(&a);
    assert_int_equal(wf_exit_code(WF_INVAL), 1);
    assert_int_equal(wf_exit_code(WF_INTERNAL), 2);
    assert_int_equal(wf_exit_code(WF_OK), 0);
}

/* wf_grow: doubling from `first`, the content kept, new elements zeroed,
 * and a refused size leaving the array and its capacity as they were. */
static void test_grow(void **state)
{
    (void)state;
    int64_t *v = NULL;
    int cap = 0;
    assert_int_equal(wf_grow(&v, &cap, 0, sizeof *v, 8), 0);
    assert_null(v);
    assert_int_equal(cap, 0);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(wf_grow(&v, &cap, i + 1, sizeof *v, 8), 0);
        v[i] = 3 * (int64_t)i;
    }
    assert_int_equal(cap, 128); /* 8, 16, 32, 64, 128 */
    for (int i = 0; i < 100; i++)
        assert_int_equal(v[i], 3 * (int64_t)i);
    for (int i = 100; i < cap; i++)
        assert_int_equal(v[i], 0);
    assert_int_equal(wf_grow(&v, &cap, 129, sizeof *v, 8), 0);
    assert_int_equal(cap, 256);
    int64_t *keep = v;
    assert_int_equal(wf_grow(&v, &cap, (int64_t)1 << 40, sizeof *v, 8), -1);
    assert_ptr_equal(v, keep);
    assert_int_equal(cap, 256);
    free(v);
}

/* wf_grow_in: the same doubling in an arena, the content copied. */
static void test_grow_in(void **state)
{
    (void)state;
    wf_arena a;
    wf_arena_init(&a, 256);
    int32_t *v = NULL;
    int cap = 0;
    for (int i = 0; i < 40; i++) {
        assert_int_equal(wf_grow_in(&a, &v, &cap, i + 1, sizeof *v, 16), 0);
        v[i] = 7 * i;
    }
    assert_int_equal(cap, 64); /* 16, 32, 64 */
    for (int i = 0; i < 40; i++)
        assert_int_equal(v[i], 7 * i);
    for (int i = 40; i < cap; i++)
        assert_int_equal(v[i], 0);
    int32_t *keep = v;
    assert_int_equal(wf_grow_in(&a, &v, &cap, (int64_t)1 << 40, sizeof *v, 16), -1);
    assert_ptr_equal(v, keep);
    assert_int_equal(cap, 64);
    wf_arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test(test_opts),
        cmocka_unit_test(test_json_and_atomic_write),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_grow_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
