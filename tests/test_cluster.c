/* Cluster: presets hold the public hardware numbers, overrides apply by name,
 * JSON round-trips exactly, every malformed field is rejected with its name,
 * the matrix efficiency curve interpolates in log(FLOPs), and the factor
 * table matches the overrides and the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/cluster.h"

static void test_presets(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    assert_int_equal(wf_cluster_devices(&c), 512);
    assert_int_equal(c.level[0].size, 8);
    assert_true(c.dev.matrix_flops[WF_DTYPE_FP16] == 312e12);
    assert_true(c.dev.mem_bw_bps == 2039e9);
    assert_true(c.level[0].bw_bps == 300e9);
    assert_true(c.level[1].bw_bps == 25e9);
    assert_int_equal(wf_cluster_lookup("v100-10gbe", &c), WF_OK);
    assert_int_equal(wf_cluster_devices(&c), 64);
    /* 10 Gb/s per node shared by 4 GPUs. */
    assert_true(fabs(c.level[1].bw_bps - 0.3125e9) < 1);
    assert_int_equal(wf_cluster_lookup("v100-ib100", &c), WF_OK);
    assert_true(fabs(c.level[1].bw_bps - 3.125e9) < 1);
    assert_int_equal(wf_cluster_lookup("dgx-h100", &c), WF_OK);
    assert_true(c.dev.matrix_flops[WF_DTYPE_BF16] == 989e12);
    assert_int_equal(wf_cluster_lookup("local", &c), WF_OK);
    assert_true(c.dev.mem_bytes > 0);
    assert_true(wf_cluster_devices(&c) >= 1);

    for (int i = 0; i < wf_cluster_preset_count(); i++) {
        const wf_cluster_preset *p = wf_cluster_preset_at(i);
        assert_non_null(p);
        assert_int_equal(wf_cluster_lookup(p->name, &c), WF_OK);
        assert_int_equal(wf_cluster_check(&c), WF_OK);
    }
    assert_null(wf_cluster_preset_at(wf_cluster_preset_count()));
}

static void test_overrides(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=16", &c), WF_OK);
    assert_int_equal(wf_cluster_devices(&c), 128);
    assert_string_equal(c.name, "dgx-a100:nodes=16");
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=2,devices_per_node=4,mem_eff=0.5,"
                                       "cluster_bw_bps=1e9,node_eff=0.6,overlap_slowdown=1.2",
                                       &c),
                     WF_OK);
    assert_int_equal(wf_cluster_devices(&c), 8);
    assert_true(c.dev.mem_eff == 0.5);
    assert_true(c.level[1].bw_bps == 1e9);
    assert_true(c.level[0].eff == 0.6);
    assert_true(c.overlap_slowdown == 1.2);

    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=0", &c), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "nodes"));
    assert_int_equal(wf_cluster_lookup("dgx-a100:bogus=1", &c), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "bogus"));
    assert_int_equal(wf_cluster_lookup("dgx-a100:mem_eff=2", &c), WF_INVAL);
    assert_int_equal(wf_cluster_lookup("nope", &c), WF_NOTFOUND);
    assert_non_null(strstr(wf_last_error(), "nope"));
    assert_int_equal(wf_cluster_lookup("", &c), WF_INVAL);
    assert_int_not_equal(wf_cluster_lookup("missing-file.json", &c), WF_OK);
}

static void test_json_roundtrip(void **state)
{
    (void)state;
    for (int i = 0; i < wf_cluster_preset_count(); i++) {
        wf_cluster a, b;
        assert_int_equal(wf_cluster_lookup(wf_cluster_preset_at(i)->name, &a), WF_OK);
        cJSON *j = wf_cluster_to_json(&a);
        assert_non_null(j);
        char *text = wf_json_print(j, 1);
        cJSON_Delete(j);
        cJSON *k = NULL;
        assert_int_equal(wf_json_parse(text, "cluster", &k), WF_OK);
        free(text);
        assert_int_equal(wf_cluster_from_json(k, "cluster", &b), WF_OK);
        cJSON_Delete(k);
        assert_string_equal(a.name, b.name);
        assert_memory_equal(&a.dev, &b.dev, sizeof a.dev);
        assert_int_equal(a.nlevels, b.nlevels);
        assert_memory_equal(a.level, b.level, sizeof a.level);
        assert_true(a.overlap_slowdown == b.overlap_slowdown);
        assert_true(a.grad_bytes == b.grad_bytes);
        assert_true(a.mem_reserved_bytes == b.mem_reserved_bytes);
    }
}

/* Parses `text` as a cluster file after replacing `from` by `to` in the
 * dgx-a100 preset's JSON; returns the status. */
static wf_status mutated(const char *from, const char *to)
{
    wf_cluster a, b;
    wf_cluster_lookup("dgx-a100", &a);
    cJSON *j = wf_cluster_to_json(&a);
    char *text = wf_json_print(j, 0);
    cJSON_Delete(j);
    char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    free(text);
    cJSON *k = NULL;
    wf_status st = wf_json_parse(out, "c.json", &k);
    free(out);
    if (st == WF_OK)
        st = wf_cluster_from_json(k, "c.json", &b);
    cJSON_Delete(k);
    return st;
}

static void test_json_errors(void **state)
{
    (void)state;
    assert_int_equal(mutated("\"format\":\"weft-cluster\"", "\"format\":\"other\""), WF_FORMAT);
    assert_int_equal(mutated("\"version\":1", "\"version\":2"), WF_FORMAT);
    assert_int_equal(mutated("\"mem_eff\":", "\"mem_eff\":2,\"x\":"), WF_FORMAT);
    assert_int_equal(mutated("\"size\":8", "\"size\":0"), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "size"));
    assert_int_equal(mutated("\"size\":8", "\"size\":\"8\""), WF_FORMAT);
    assert_int_equal(mutated("\"fp16\":", "\"fp99\":"), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "fp99"));
    assert_int_equal(mutated("\"grad_bytes\":4", "\"grad_bytes\":3"), WF_FORMAT);
    assert_int_equal(mutated("\"latency_s\":", "\"latency\":"), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "latency"));
    assert_int_equal(mutated("\"overlap_slowdown\"", "\"surprise\":1,\"overlap_slowdown\""), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "surprise"));
    /* Efficiency table out of order. */
    assert_int_equal(mutated("\"min_flops\":1000000000000", "\"min_flops\":1"), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "sorted"));
}

static void test_file_lookup(void **state)
{
    (void)state;
    wf_cluster a, b;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=3", &a), WF_OK);
    cJSON *j = wf_cluster_to_json(&a);
    char dir[] = "/tmp/weft-cluster-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/c.json", dir);
    assert_int_equal(wf_json_write_file(path, j), WF_OK);
    cJSON_Delete(j);
    assert_int_equal(wf_cluster_lookup(path, &b), WF_OK);
    assert_int_equal(wf_cluster_devices(&b), 24);
    unlink(path);
    rmdir(dir);
}

static void test_matrix_eff(void **state)
{
    (void)state;
    wf_device d;
    memset(&d, 0, sizeof d);
    d.neff = 3;
    d.matrix_eff[0] = (wf_eff_point){1e12, 0.8};
    d.matrix_eff[1] = (wf_eff_point){1e10, 0.6};
    d.matrix_eff[2] = (wf_eff_point){1e8, 0.2};
    assert_true(wf_device_matrix_eff(&d, 5e12) == 0.8);
    assert_true(wf_device_matrix_eff(&d, 1e12) == 0.8);
    assert_true(fabs(wf_device_matrix_eff(&d, 1e11) - 0.7) < 1e-12);
    assert_true(fabs(wf_device_matrix_eff(&d, 1e9) - 0.4) < 1e-12);
    assert_true(wf_device_matrix_eff(&d, 1e3) == 0.2);
    assert_true(wf_device_matrix_eff(&d, 0) == 0.2);
    /* Monotone over the preset's table. */
    wf_cluster c;
    wf_cluster_lookup("dgx-a100", &c);
    double prev = 0;
    for (double f = 1e5; f < 1e14; f *= 1.7) {
        double e = wf_device_matrix_eff(&c.dev, f);
        assert_true(e >= prev && e > 0 && e <= 1);
        prev = e;
    }
}

/* The factor table: every factor is an override that sets exactly its field
 * (read back through wf_cluster_factor_value), a value outside its range is
 * rejected naming the key, and it is a field of the cluster file. */
static void test_factor_table(void **state)
{
    (void)state;
    assert_int_equal(wf_cluster_factor_count(), 15);
    assert_null(wf_cluster_factor_at(15));
    wf_cluster base;
    assert_int_equal(wf_cluster_lookup("dgx-a100", &base), WF_OK);
    const wf_cluster_factor *p2p = NULL;
    for (int i = 0; i < wf_cluster_factor_count(); i++) {
        const wf_cluster_factor *f = wf_cluster_factor_at(i);
        assert_non_null(f);
        assert_true(f->help[0] != 0);
        if (strcmp(f->key, "p2p_overhead_s") == 0)
            p2p = f;
        /* A value inside the range, different from the preset's (and
         * consistent with the rest: reserved below memory, 2 or 4 bytes). */
        double v = 0.9 * wf_cluster_factor_value(&base, f);
        if (v == 0)
            v = f->lo + 1e-3 * (f->hi - f->lo);
        if (strcmp(f->key, "grad_bytes") == 0)
            v = 2;
        char spec[128];
        snprintf(spec, sizeof spec, "dgx-a100:%s=%.17g", f->key, v);
        wf_cluster c;
        assert_int_equal(wf_cluster_lookup(spec, &c), WF_OK);
        assert_true(wf_cluster_factor_value(&c, f) == v);
        /* Nothing else moved. */
        *(double *)((char *)&c + f->offset) = wf_cluster_factor_value(&base, f);
        memcpy(c.name, base.name, sizeof c.name);
        assert_memory_equal(&c, &base, sizeof c);
        snprintf(spec, sizeof spec, "dgx-a100:%s=%.17g", f->key, f->hi * 2 + 1);
        assert_int_equal(wf_cluster_lookup(spec, &c), WF_INVAL);
        assert_non_null(strstr(wf_last_error(), f->key));
        /* The cluster file carries it (inside "device" for device fields). */
        cJSON *j = wf_cluster_to_json(&base);
        assert_non_null(j);
        const cJSON *holder = f->offset < sizeof(wf_device) + offsetof(wf_cluster, dev) &&
                                      f->offset >= offsetof(wf_cluster, dev)
                                  ? cJSON_GetObjectItemCaseSensitive(j, "device")
                                  : j;
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(holder, f->key);
        assert_non_null(x);
        assert_true(x->valuedouble == wf_cluster_factor_value(&base, f));
        cJSON_Delete(j);
    }
    assert_non_null(p2p);
    assert_true(wf_cluster_factor_value(&base, p2p) == 50e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),       cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_json_roundtrip), cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_file_lookup),   cmocka_unit_test(test_matrix_eff),
        cmocka_unit_test(test_factor_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
