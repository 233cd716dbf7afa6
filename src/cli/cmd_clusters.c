/* weft clusters: lists the cluster presets (name, devices, device kind, the
 * calibration factors that differ between presets, summary), or describes
 * one cluster (a preset with overrides or a JSON file) with every factor.
 * Tables go to stdout; --json prints one object on stdout: the list, or the
 * cluster in the cluster file format (so `weft clusters C --json > c.json`
 * makes an editable cluster file). */
#include "cli/cli.h"
#include "weft/cluster.h"

#include <cjson/cJSON.h>
#include <stdio.h>

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
        wf_opts_usage(stdout, "weft clusters [CLUSTER]",
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
            wf_cli_print_cluster(stdout, &c);
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
        fprintf(stdout, "%-12s %8s  %-16s %8s %6s %7s  %s\n", "name", "devices", "device", "overlap", "grad B",
                "p2p us", "summary");
    for (int i = 0; i < wf_cluster_preset_count(); i++) {
        const wf_cluster_preset *p = wf_cluster_preset_at(i);
        wf_cluster c;
        if ((st = wf_cluster_from_preset(p->name, &c)) != WF_OK) {
            cJSON_Delete(root);
            return st;
        }
        if (!json) {
            fprintf(stdout, "%-12s %8lld  %-16s %8.3f %6g %7.1f  %s\n", p->name, (long long)wf_cluster_devices(&c),
                    c.dev.name, c.overlap_slowdown, c.grad_bytes, c.p2p_overhead_s * 1e6, p->summary);
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", p->name);
        cJSON_AddNumberToObject(o, "devices", (double)wf_cluster_devices(&c));
        cJSON_AddNumberToObject(o, "devices_per_node", (double)c.level[0].size);
        cJSON_AddStringToObject(o, "device", c.dev.name);
        cJSON_AddNumberToObject(o, "device_mem_bytes", c.dev.mem_bytes);
        cJSON_AddNumberToObject(o, "overlap_slowdown", c.overlap_slowdown);
        cJSON_AddNumberToObject(o, "grad_bytes", c.grad_bytes);
        cJSON_AddNumberToObject(o, "p2p_overhead_s", c.p2p_overhead_s);
        cJSON_AddStringToObject(o, "summary", p->summary);
        cJSON_AddItemToArray(arr, o);
    }
    if (!json)
        return WF_OK;
    st = wf_cli_print_json(root);
    cJSON_Delete(root);
    return st;
}
