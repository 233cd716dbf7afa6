/* A plan resolved once (layout.h, wf_layout_resolve): a whole-model plan
 * string and the op-level file of its lowering resolve to the same value --
 * the same whole-model keys, signatures (op by op), stage cut and rank
 * groups -- and each piece equals what it is derived from: the signatures
 * wf_plan_lower writes, parsed; Megatron's descriptor (wf_cost_layout_megatron);
 * the generator's strides (tp 1, dp tp, pp tp x dp). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/layout.h"

static void resolve_ok(const char *text, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                       wf_cost_ctx *ctx, wf_layout_plan *out)
{
    wf_status st = wf_layout_resolve(text, m, c, batch, ctx, out);
    if (st != WF_OK)
        fail_msg("%s: %s", text, wf_last_error());
}

static void test_string_and_file_agree(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt-tiny", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=2", &c), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    const int64_t batch = 16;
    wf_layout_plan a, b;
    resolve_ok("dp=2,tp=4,pp=2,mbs=2,sp=1", &m, &c, batch, ctx, &a);
    assert_false(a.oplevel);
    assert_true(a.has_layouts);
    assert_int_equal(a.plan.tp, 4);
    /* The generator: tp stride 1, dp stride tp, pp stride tp x dp; a node holds 8. */
    assert_int_equal(a.axes[WF_AXIS_TP].size, 4);
    assert_int_equal(a.axes[WF_AXIS_TP].stride, 1);
    assert_int_equal(a.axes[WF_AXIS_DP].size, 2);
    assert_int_equal(a.axes[WF_AXIS_DP].stride, 4);
    assert_int_equal(a.axes[WF_AXIS_PP].size, 2);
    assert_int_equal(a.axes[WF_AXIS_PP].stride, 8);
    assert_int_equal(a.level[WF_AXIS_TP], 0);
    assert_int_equal(a.level[WF_AXIS_DP], 0);
    assert_int_equal(a.level[WF_AXIS_PP], 1);
    assert_int_equal(a.level[WF_AXIS_CP], -1);
    /* Signatures: those the lowering wrote, one per forward op. */
    char buf[512];
    for (int i = 0; i < a.graph.nfwd; i++) {
        const wf_op *op = &a.graph.ops[i];
        wf_sbp_sig_str(&a.sig[i], op->nin, op->nout, a.mesh.naxes, buf, sizeof buf);
        wf_sbp_sig want;
        assert_int_equal(wf_sbp_sig_parse(wf_layout_sig_of(&a.ol, op->name), op->nin, op->nout,
                                          a.mesh.naxes, &want), WF_OK);
        assert_memory_equal(want.in, a.sig[i].in, sizeof want.in);
        assert_memory_equal(want.out, a.sig[i].out, sizeof want.out);
    }
    assert_int_equal(a.nstages, 2);
    assert_int_equal(a.stage_first[0], 0);
    assert_true(a.stage_first[1] > 0 && a.stage_first[1] < a.graph.nfwd);
    assert_int_equal(a.stage_first[2], a.graph.nfwd);
    /* Megatron's descriptor. */
    assert_true(a.has_cost);
    wf_cost_layout meg;
    assert_int_equal(wf_cost_layout_megatron(ctx, 4, 1, &meg), WF_OK);
    assert_int_equal(a.cost.tp, meg.tp);
    assert_int_equal(a.cost.nev, meg.nev);
    assert_memory_equal(a.cost.div, meg.div, (size_t)meg.nops * sizeof *meg.div);
    wf_cost_layout_free(&meg);

    /* The lowering written as an op-level file resolves to the same value. */
    char path[] = "/tmp/weft-test-layout-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(wf_layout_write_file(path, &a.ol, NULL, NULL), WF_OK);
    resolve_ok(path, &m, &c, batch, ctx, &b);
    unlink(path);
    assert_true(b.oplevel);
    char pa[512], pb[512];
    wf_plan_format(&a.plan, pa, sizeof pa);
    wf_plan_format(&b.plan, pb, sizeof pb);
    assert_string_equal(pa, pb);
    assert_int_equal(a.graph.nfwd, b.graph.nfwd);
    for (int i = 0; i < a.graph.nfwd; i++) {
        assert_memory_equal(a.sig[i].in, b.sig[i].in, sizeof a.sig[i].in);
        assert_memory_equal(a.sig[i].out, b.sig[i].out, sizeof a.sig[i].out);
    }
    assert_memory_equal(a.stage_first, b.stage_first, 3 * sizeof *a.stage_first);
    assert_memory_equal(a.axes, b.axes, sizeof a.axes);
    assert_memory_equal(a.level, b.level, sizeof a.level);
    assert_true(b.has_cost);
    assert_int_equal(b.cost.tp, a.cost.tp);
    /* Each signature's index among the op's on the mesh, as the search and
     * the runtime index them. */
    for (int i = 0; i < b.graph.nfwd; i++)
        assert_int_equal(b.sig_index[i], wf_sbp_sig_find(&b.graph, i, &b.mesh, b.sig_text[i]));
    /* The file's descriptor and estimate taken from the resolution are the
     * ones read from the file's text (wf_layout_descriptor/_cost). */
    wf_cost_layout Lt;
    wf_plan pt, pr;
    assert_int_equal(wf_layout_descriptor(&m, &c, ctx, batch, &b.ol, &Lt, &pt), WF_OK);
    assert_int_equal(Lt.nev, b.cost.nev);
    assert_memory_equal(Lt.div, b.cost.div, (size_t)Lt.nops * sizeof *Lt.div);
    assert_memory_equal(Lt.ev, b.cost.ev, (size_t)Lt.nev * sizeof *Lt.ev);
    wf_cost_layout_free(&Lt);
    wf_estimate et, er;
    assert_int_equal(wf_layout_cost(&m, &c, ctx, batch, &b.ol, &et, &pt), WF_OK);
    assert_int_equal(wf_layout_plan_cost(&m, &c, ctx, batch, &b.ol, &b, &er, &pr), WF_OK);
    assert_true(et.iteration_time_s == er.iteration_time_s);
    assert_true(et.memory_per_device_bytes == er.memory_per_device_bytes);
    /* The descriptor's model-parallel groups: the generator's tp axis. */
    assert_int_equal(b.cost.axis.size, 4);
    assert_int_equal(b.cost.axis.stride, 1);
    wf_layout_plan_free(&a);
    wf_layout_plan_free(&b);
    wf_cost_ctx_free(ctx);
}

/* A mesh of two model-parallel axes (2x2, no data-parallel one): Megatron's
 * tp=4 layouts with every split made on both axes. The descriptor's
 * sub-axes are the tp axis's groups split by the generator (outer 2 ranks 2
 * apart, inner 2 ranks 1 apart), every collective names the sub-axis it runs
 * on, and the estimate places it there. */
static void test_two_model_axes(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt-tiny", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    const int64_t batch = 8;
    wf_layout_plan a;
    resolve_ok("dp=1,tp=4,pp=1,mbs=8", &m, &c, batch, ctx, &a);
    wf_layout two;
    wf_layout_init(&two);
    assert_int_equal(wf_layout_set(&two, "2x2", 1, a.ol.micro_batches), WF_OK);
    snprintf(two.keys, sizeof two.keys, "%s", a.ol.keys);
    assert_int_equal(wf_layout_set_stage(&two, 0, a.ol.stage_first[0]), WF_OK);
    for (int k = 0; k < a.ol.nlayouts; k++) {
        char sig[512];
        snprintf(sig, sizeof sig, "%s|%s", a.ol.sig[k], a.ol.sig[k]);
        assert_int_equal(wf_layout_add_sig(&two, a.ol.op[k], sig), WF_OK);
    }
    wf_layout_plan b;
    wf_status st = wf_layout_index(&two, &m, &c, batch, &b);
    if (st != WF_OK)
        fail_msg("%s", wf_last_error());
    wf_cost_layout L;
    wf_plan p;
    st = wf_layout_plan_descriptor(&m, &c, ctx, batch, &two, &b, &L, &p);
    if (st != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_int_equal(L.tp, 4);
    assert_int_equal(L.nsub, 2);
    assert_int_equal(L.sub[0].size, 2);
    assert_int_equal(L.sub[0].stride, 2);
    assert_int_equal(L.sub[1].size, 2);
    assert_int_equal(L.sub[1].stride, 1);
    int on[3] = {0, 0, 0};
    for (int k = 0; k < L.nev; k++) {
        assert_true(L.ev[k].sub >= 0 && L.ev[k].sub <= 2);
        on[L.ev[k].sub]++;
        wf_axis_ranks r = wf_cost_event_ranks(&L, &L.ev[k]);
        const wf_axis_ranks want = L.ev[k].sub ? L.sub[L.ev[k].sub - 1] : L.axis;
        assert_int_equal(r.size, want.size);
        assert_int_equal(r.stride, want.stride);
    }
    /* Megatron's all-reduces, once per sub-axis. */
    assert_true(on[1] > 0 && on[1] == on[2]);
    assert_int_equal(on[0], 0);
    wf_cost_layout_free(&L);
    wf_layout_plan_free(&b);
    wf_layout_free(&two);
    wf_layout_plan_free(&a);
    wf_cost_ctx_free(ctx);
}

/* A proposal resolved in memory (wf_layout_resolve_choice, what the
 * op-level search hands the cost model) is the plan its text resolves to:
 * the same price on the one cost model, bit for bit, as the text's estimate
 * (wf_layout_cost), the same coster price, the same raised plan; and
 * wf_layout_validate names what an op-level form breaks. */
static void test_resolve_choice(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt-tiny", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    const int64_t batch = 16;
    for (int sp = 0; sp <= 1; sp++) {
        wf_layout_plan a, b;
        resolve_ok(sp ? "dp=2,tp=4,mbs=2,sp=1" : "dp=2,tp=4,mbs=4,recompute=full,zero=1", &m, &c, batch, NULL, &a);
        assert_true(a.has_layouts);
        assert_int_equal(wf_layout_validate(&a.ol, &m, &c, batch), WF_OK);
        const int nt = a.graph.ntensors;
        unsigned char *given = calloc((size_t)nt * (size_t)a.nstages + 1, 1);
        wf_sbp *stor = calloc((size_t)nt * (size_t)a.nstages + 1, sizeof *stor);
        assert_non_null(given);
        assert_non_null(stor);
        for (int k = 0; k < a.nstorage; k++) {
            given[(size_t)a.storage_stage[k] * nt + (size_t)a.storage_tensor[k]] = 1;
            stor[(size_t)a.storage_stage[k] * nt + (size_t)a.storage_tensor[k]] = a.storage[k];
        }
        assert_int_equal(a.nstorage > 0, sp);
        wf_layout_choice ch = {a.mesh, a.nstages, a.ol.micro_batches, &a.graph, a.stage_first, a.sig, a.sig_index,
                               given, stor};
        assert_int_equal(wf_layout_resolve_choice(&ch, &c, batch, &b), WF_OK);
        assert_int_equal(b.nstorage, a.nstorage);
        assert_int_equal(b.micro_batches, a.micro_batches);
        wf_plan keys;
        assert_int_equal(wf_layout_keys(&a.ol, &keys), WF_OK);
        wf_estimate et, er, ek;
        assert_int_equal(wf_layout_cost(&m, &c, ctx, batch, &a.ol, &et, NULL), WF_OK);
        assert_int_equal(wf_layout_resolved_cost(&m, &c, ctx, batch, &keys, &b, &er), WF_OK);
        assert_true(et.iteration_time_s > 0);
        assert_true(et.iteration_time_s == er.iteration_time_s);
        assert_true(et.memory_per_device_bytes == er.memory_per_device_bytes);
        assert_true(et.breakdown.tp_comm == er.breakdown.tp_comm);
        wf_layout_coster *K = NULL;
        assert_int_equal(wf_layout_coster_resolved(&m, &c, ctx, batch, &keys, &b, 1, &K), WF_OK);
        assert_int_equal(wf_layout_coster_cost(K, batch, &ek), WF_OK);
        wf_layout_coster_free(K);
        assert_true(et.iteration_time_s == ek.iteration_time_s);
        wf_plan r;
        assert_int_equal(wf_plan_raise_resolved(&m, &c, batch, &keys, &b, &r), WF_OK);
        assert_int_equal(r.dp, 2);
        assert_int_equal(r.tp, 4);
        assert_int_equal(r.sp, sp);
        assert_int_equal(r.mbs, sp ? 2 : 4);
        /* A storage layout that does not divide its tensor: named. */
        if (sp) {
            wf_layout_plan bad;
            int t = a.storage_tensor[0];
            size_t at = (size_t)a.storage_stage[0] * nt + (size_t)t;
            stor[at].ax[a.mesh.naxes - 1] = WF_MAX_DIMS; /* a dim the tensor has not */
            assert_int_equal(wf_layout_resolve_choice(&ch, &c, batch, &bad), WF_INVAL);
            assert_non_null(strstr(wf_last_error(), a.graph.tensors[t].name));
            wf_layout_plan_free(&bad);
        }
        free(given);
        free(stor);
        wf_layout_plan_free(&b);
        /* Validation of the op-level form: micro-batches, keys. */
        int64_t mb = a.ol.micro_batches;
        a.ol.micro_batches = 3;
        assert_int_equal(wf_layout_validate(&a.ol, &m, &c, batch), WF_INVAL);
        assert_non_null(strstr(wf_last_error(), "micro_batches=3 does not divide batch=16"));
        a.ol.micro_batches = mb;
        snprintf(a.ol.keys, sizeof a.ol.keys, "mesh=8");
        assert_int_not_equal(wf_layout_validate(&a.ol, &m, &c, batch), WF_OK);
        assert_non_null(strstr(wf_last_error(), "mesh"));
        wf_layout_plan_free(&a);
    }
    wf_cost_ctx_free(ctx);
}

/* Models other than transformers have no op-level form of a whole-model
 * plan; a plan that does not validate is an error naming it. */
static void test_generic_and_errors(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("mlp-tiny", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    wf_layout_plan a;
    resolve_ok("dp=4,mbs=2", &m, &c, 8, NULL, &a);
    assert_false(a.has_layouts);
    assert_false(a.has_cost);
    assert_int_equal(a.axes[WF_AXIS_DP].size, 4);
    assert_int_equal(a.axes[WF_AXIS_DP].stride, 1);
    wf_layout_plan_free(&a);
    assert_int_equal(wf_layout_resolve("dp=4,mbs=3", &m, &c, 8, NULL, &a), WF_INVAL);
    wf_layout_plan_free(&a);
    assert_int_not_equal(wf_layout_resolve("dp=4,bogus=1", &m, &c, 8, NULL, &a), WF_OK);
    wf_layout_plan_free(&a);
}

/* The plan-key table seen from outside (wf_plan_key_view_of, what weft
 * plan's short labels drop): the keys' texts joined are the canonical
 * string, and the default plan's keys other than the degrees (dap, a device
 * factor, among them) are the seven the labels leave out. */
static void test_plan_key_table(void **state)
{
    (void)state;
    wf_plan p;
    assert_int_equal(wf_plan_parse("dp=2,tp=4,pp=2,mbs=2,vpp=2,recompute=full,sp=1,zero=1,ep=2,comm=dear:4,fp8=1",
                                   &p), WF_OK);
    char want[512], got[512] = "";
    wf_plan_format(&p, want, sizeof want);
    size_t n = 0;
    for (int k = 0; k < wf_plan_nkeys(); k++) {
        wf_plan_key_view v;
        wf_plan_key_view_of(k, &p, &v);
        if (v.text[0])
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%s", n ? "," : "", v.text);
    }
    assert_string_equal(got, want);
    wf_plan d;
    wf_plan_default(&d);
    char dropped[256] = "";
    n = 0;
    for (int k = 0; k < wf_plan_nkeys(); k++) {
        wf_plan_key_view v;
        wf_plan_key_view_of(k, &d, &v);
        assert_int_equal(v.degree, !strcmp(v.name, "dp") || !strcmp(v.name, "tp") || !strcmp(v.name, "pp") ||
                                       !strcmp(v.name, "mbs") || !strcmp(v.name, "cp") || !strcmp(v.name, "ep") ||
                                       !strcmp(v.name, "etp") || !strcmp(v.name, "dap"));
        if (!v.degree && v.text[0])
            n += (size_t)snprintf(dropped + n, sizeof dropped - n, "%s%s", n ? "," : "", v.text);
    }
    assert_string_equal(dropped, "vpp=1,recompute=none,sp=0,zero=0,overlap=1,pipe=1f1b,comm=ddp");
}

/* An interlaced plan (interlace=1) resolves with no op-level form, its two
 * segments over the tp x pp ranks of a pipeline (the generator's tp and pp
 * groups: stride 1 and tp x dp), and each stage's order of tasks equal to
 * wf_plan_interlace_order's. */
static void test_interlaced(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt3-13b", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("v100-10gbe", &c), WF_OK);
    wf_layout_plan a;
    resolve_ok("dp=2,tp=4,pp=8,mbs=1,sp=1,zero=1,interlace=1", &m, &c, 64, NULL, &a);
    assert_false(a.has_layouts);
    assert_int_equal(a.plan.interlace, 1);
    assert_int_equal(a.nsegments, 2);
    assert_int_equal(a.segment[0].section, WF_COST_SEC_PRE);
    assert_int_equal(a.segment[1].section, WF_COST_SEC_POST);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(a.segment[k].size, 32);
        assert_int_equal(a.segment[k].axes[0].size, 4);
        assert_int_equal(a.segment[k].axes[0].stride, 1);
        assert_int_equal(a.segment[k].axes[1].size, 8);
        assert_int_equal(a.segment[k].axes[1].stride, 8);
    }
    assert_int_equal(a.micro_batches, 32);
    wf_plan_task t[160];
    for (int s = 0; s < 8; s++) {
        int n = 0;
        assert_int_equal(wf_plan_interlace_order(8, 32, s, t, 160, &n), WF_OK);
        assert_int_equal(n, 160);
        assert_memory_equal(t, a.order + (size_t)s * 160, sizeof t);
    }
    wf_layout_plan_free(&a);
    /* The lowering refuses it by name. */
    wf_plan p;
    wf_layout ol;
    wf_layout_init(&ol);
    assert_int_equal(wf_plan_parse("dp=2,tp=4,pp=8,mbs=1,interlace=1", &p), WF_OK);
    assert_int_equal(wf_plan_lower(&m, &c, &p, 64, &ol), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "interlace=1"));
    wf_layout_free(&ol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_and_file_agree),
        cmocka_unit_test(test_two_model_axes),
        cmocka_unit_test(test_resolve_choice),
        cmocka_unit_test(test_generic_and_errors),
        cmocka_unit_test(test_plan_key_table),
        cmocka_unit_test(test_interlaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
