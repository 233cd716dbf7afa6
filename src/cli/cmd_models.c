/* weft models: lists the model zoo (name, family, parameters, summary). The
 * table is the result, so it goes to stdout; --json prints one object
 * {"models":[{"name","family","params","summary"}...]} instead. Parameter
 * counts come from building each model's graph (metadata only, fast). */
#include "cli/cli.h"
#include "weft/models.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* 124439808 -> "124.4M". */
static const char *human_count(double n, char *buf, size_t cap)
{
    static const char *units[] = {"", "K", "M", "B", "T"};
    int u = 0;
    while (n >= 1000 && u < 4) {
        n /= 1000;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f%s" : "%.0f%s", n, units[u]);
    return buf;
}

wf_status wf_cmd_models(int argc, char **argv)
{
    int json = 0, help = 0, npos = 0;
    const char *pos[1] = {NULL};
    const wf_opt opts[] = {
        {"json", 0, WF_OPT_FLAG, &json, NULL, "print one JSON object on stdout", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, pos, 0, &npos, &help);
    if (st != WF_OK)
        return st;
    if (help) {
        wf_opts_usage(stdout, "weft models",
                      "Lists the model zoo. Any name can take overrides (gpt2:seq=512), and the\n"
                      "families gpt, llama, bert, vgg, resnet, mlp and cnn take keys\n"
                      "(gpt:layers=2,hidden=64); see docs/model-format.md and weft show MODEL.",
                      opts);
        return WF_OK;
    }
    cJSON *root = NULL, *arr = NULL;
    if (json) {
        root = cJSON_CreateObject();
        arr = root ? cJSON_AddArrayToObject(root, "models") : NULL;
        if (!arr) {
            cJSON_Delete(root);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
    } else {
        printf("%-16s %-9s %9s  %s\n", "name", "family", "params", "summary");
    }
    for (int i = 0; i < wf_zoo_count(); i++) {
        const wf_zoo_entry *e = wf_zoo_entry_at(i);
        wf_model_config m;
        double params = 0;
        if ((st = wf_model_lookup(e->name, &m)) != WF_OK ||
            (st = wf_model_params(&m, &params)) != WF_OK) {
            cJSON_Delete(root);
            return st;
        }
        if (json) {
            cJSON *o = cJSON_CreateObject();
            if (!o || !cJSON_AddItemToArray(arr, o) || !cJSON_AddStringToObject(o, "name", e->name) ||
                !cJSON_AddStringToObject(o, "family", e->family) ||
                !cJSON_AddNumberToObject(o, "params", params) ||
                !cJSON_AddStringToObject(o, "dtype", wf_dtype_name(m.dtype)) ||
                !cJSON_AddStringToObject(o, "summary", e->summary)) {
                cJSON_Delete(root);
                return wf_errorf(WF_NOMEM, "out of memory");
            }
        } else {
            char buf[32];
            printf("%-16s %-9s %9s  %s\n", e->name, e->family, human_count(params, buf, sizeof buf),
                   e->summary);
        }
    }
    if (!json)
        return fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
    st = wf_cli_print_json(root);
    cJSON_Delete(root);
    return st;
}
