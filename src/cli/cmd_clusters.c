/* weft clusters: lists the cluster presets (name, devices, device kind,
 * summary), or describes one cluster (a preset with overrides or a JSON file).
 * Tables go to stderr; --json prints one object on stdout: the list, or the
 * cluster in the cluster file format (so `weft clusters C --json > c.json`
 * makes an editable cluster file). */
#include "cli/cli.h"
#include "weft/cluster.h"

#include <cjson/cJSON.h>
#include <stdio.h>

static void print_cluster(FILE *f, const wf_cluster *c)
{
    const wf_device *d = &c->dev;
    fprintf(f, "cluster %s: %lld devices of %s\n", c->name, (long long)wf_cluster_devices(c), d->name);
    fprintf(f, "  device memory %.1f GiB, bandwidth %.0f GB/s (eff %.2f)\n",
            d->mem_bytes / (1024.0 * 1024.0 * 1024.0), d->mem_bw_bps / 1e9, d->mem_eff);
    for (int t = 0; t < WF_DTYPE_COUNT; t++)
        if (d->matrix_flops[t] > 0 || d->vector_flops[t] > 0)
            fprintf(f, "  %-5s matrix %8.1f TFLOP/s   vector %7.1f TFLOP/s\n",
                    wf_dtype_name((wf_dtype)t), d->matrix_flops[t] / 1e12, d->vector_flops[t] / 1e12);
    fprintf(f, "  matrix efficiency by op FLOPs:");
    for (int i = 0; i < d->neff; i++)
        fprintf(f, " >=%.0e:%.2f", d->matrix_eff[i].min_flops, d->matrix_eff[i].eff);
    fprintf(f, "\n  %-8s %10s %12s %12s %6s\n", "level", "size", "GB/s/device", "latency_us", "eff");
    for (int l = 0; l < c->nlevels; l++)
        fprintf(f, "  %-8s %10lld %12.3f %12.1f %6.2f\n", c->level[l].name, (long long)c->level[l].size,
                c->level[l].bw_bps / 1e9, c->level[l].latency_s * 1e6, c->level[l].eff);
    fprintf(f, "  overlap slowdown %.3f, reserved %.2f GiB, gradient bytes %g\n", c->overlap_slowdown,
            c->mem_reserved_bytes / (1024.0 * 1024.0 * 1024.0), c->grad_bytes);
}

wf_status wf_cmd_clusters(int argc, char **argv)
{
    int json = 0, help = 0, npos = 0;
    const char *pos[1] = {NULL};
    const wf_opt opts[] = {
        {"json", 0, WF_OPT_FLAG, &json, NULL, "print one JSON object on stdout", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, pos, 1, &npos, &help);
    if (st != WF_OK)
        return st;
    if (help) {
        wf_opts_usage(stdout, "weft clusters [CLUSTER] [--json]",
                      "Lists the cluster presets, or describes CLUSTER (a preset with overrides such\n"
                      "as dgx-a100:nodes=16, or a cluster JSON file).",
                      opts);
        return WF_OK;
    }
    if (npos == 1) {
        wf_cluster c;
        if ((st = wf_cluster_lookup(pos[0], &c)) != WF_OK)
            return st;
        if (!json) {
            print_cluster(stderr, &c);
            return WF_OK;
        }
        cJSON *j = wf_cluster_to_json(&c);
        if (!j)
            return wf_errorf(WF_NOMEM, "out of memory");
        st = wf_cli_print_json(j);
        cJSON_Delete(j);
        return st;
    }
    cJSON *root = json ? cJSON_CreateObject() : NULL;
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "clusters") : NULL;
    if (json && !arr) {
        cJSON_Delete(root);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    if (!json)
        fprintf(stderr, "%-12s %8s  %-16s %s\n", "name", "devices", "device", "summary");
    for (int i = 0; i < wf_cluster_preset_count(); i++) {
        const wf_cluster_preset *p = wf_cluster_preset_at(i);
        wf_cluster c;
        if ((st = wf_cluster_from_preset(p->name, &c)) != WF_OK) {
            cJSON_Delete(root);
            return st;
        }
        if (!json) {
            fprintf(stderr, "%-12s %8lld  %-16s %s\n", p->name, (long long)wf_cluster_devices(&c),
                    c.dev.name, p->summary);
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", p->name);
        cJSON_AddNumberToObject(o, "devices", (double)wf_cluster_devices(&c));
        cJSON_AddNumberToObject(o, "devices_per_node", (double)c.level[0].size);
        cJSON_AddStringToObject(o, "device", c.dev.name);
        cJSON_AddNumberToObject(o, "device_mem_bytes", c.dev.mem_bytes);
        cJSON_AddStringToObject(o, "summary", p->summary);
        cJSON_AddItemToArray(arr, o);
    }
    if (!json)
        return WF_OK;
    st = wf_cli_print_json(root);
    cJSON_Delete(root);
    return st;
}
