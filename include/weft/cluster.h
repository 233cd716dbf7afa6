/* weft cluster: the device kind and the hierarchy of links a job runs on.
 *
 * A cluster = one device kind (peak FLOP/s per dtype on the matrix unit and on
 * the vector unit, memory, memory bandwidth, efficiency tables) and a hierarchy
 * of levels, innermost first: level 0 groups devices into nodes (NVSwitch),
 * level 1 groups nodes into the cluster (InfiniBand / Ethernet). Each level has
 * a per-device bandwidth, a latency and an efficiency factor. Devices are
 * numbered node-major: device d sits in node d / level[0].size.
 *
 * Calibration changes data here (the efficiency tables and factors), never code. */
#ifndef WEFT_CLUSTER_H
#define WEFT_CLUSTER_H

#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WF_MAX_LEVELS 4
#define WF_MAX_EFF 8

/* Matrix-unit efficiency by the FLOPs of one op: the first entry whose
 * min_flops <= the op's FLOPs applies (entries sorted by min_flops, descending;
 * the cost model may interpolate in log(FLOPs) between neighbours). */
typedef struct {
    double min_flops;
    double eff;
} wf_eff_point;

typedef struct {
    char name[48];
    double matrix_flops[WF_DTYPE_COUNT]; /* peak FLOP/s of the matrix unit per dtype (0: unsupported) */
    double vector_flops[WF_DTYPE_COUNT]; /* peak FLOP/s of the vector unit per dtype */
    double mem_bytes;                    /* device memory */
    double mem_bw_bps;                   /* memory bandwidth */
    double mem_eff;                      /* achieved fraction of mem_bw_bps */
    double vector_eff;                   /* achieved fraction of vector peak */
    int neff;
    wf_eff_point matrix_eff[WF_MAX_EFF];
    double op_overhead_s;                /* shortest time of one op and pass (launch, dispatch) */
    double fp8_flops;                    /* dense FP8 peak of the matrix unit (0: no FP8 unit) */
    double fp8_eff;                      /* FP8 products reach fp8_eff x the matrix_eff curve of fp8_flops */
} wf_device;

typedef struct {
    char name[32];     /* "node", "cluster" */
    int64_t size;      /* members at this level: devices per node, nodes in the cluster */
    double bw_bps;     /* bandwidth per device at this level, each direction */
    double latency_s;  /* per message */
    double eff;        /* achieved fraction of bw_bps */
} wf_level;

typedef struct {
    char name[128];            /* preset name with overrides, or the file path */
    wf_device dev;
    int nlevels;
    wf_level level[WF_MAX_LEVELS];
    /* Calibration factors, each with a physical meaning (documented in docs/cluster-format.md). */
    double overlap_slowdown;   /* compute time x this while communication overlaps it (>= 1) */
    double reduce_bps;         /* speed of the reduction arithmetic in collectives (0: ignored) */
    double mem_reserved_bytes; /* memory the framework keeps (context, allocator slack) */
    double grad_bytes;         /* bytes per gradient element the framework keeps and reduces:
                                  2 (fp16) or 4 (fp32 accumulation, as Megatron-LM does) */
    double p2p_overhead_s;     /* fixed software cost of one point-to-point message (a pipeline
                                  send/recv): the framework's p2p call, the stream synchronization
                                  after it and the re-launch of the next chunk; added by
                                  wf_coll_time to every WF_COLL_SENDRECV */
} wf_cluster;

/* A preset with overrides ("dgx-a100:nodes=16"), or a cluster JSON file path.
 * Override keys: nodes, devices_per_node (plus any calibration factor by name). */
wf_status wf_cluster_lookup(const char *spec, wf_cluster *out);
int64_t wf_cluster_devices(const wf_cluster *c);
/* A preset by exact name (no overrides, no files); WF_NOTFOUND when unknown. */
wf_status wf_cluster_from_preset(const char *name, wf_cluster *out);
/* Applies "key=value" overrides already parsed into a spec (nodes,
 * devices_per_node, calibration factors); unknown keys are WF_INVAL. */
wf_status wf_cluster_apply_overrides(wf_cluster *c, wf_spec *s);
/* Checks every field is in range (levels non-empty, sizes >= 1, bandwidths > 0,
 * efficiencies in (0, 1], efficiency table sorted); the message names the field. */
wf_status wf_cluster_check(const wf_cluster *c);

struct cJSON;
wf_status wf_cluster_from_json(const struct cJSON *j, const char *ctx, wf_cluster *out);
struct cJSON *wf_cluster_to_json(const wf_cluster *c);

/* The scalar factors settable by name: `preset:key=value` overrides and the
 * cluster file's fields. One table drives the overrides, their error hint and
 * `weft clusters`' listing. */
typedef struct {
    const char *key;  /* override name (the file's field name, device. ones inside "device") */
    size_t offset;    /* of the double in wf_cluster */
    double lo, hi;    /* accepted range */
    const char *unit; /* "s", "bytes", "B/s" or "" (a ratio or a count) */
    const char *help; /* what it means, one line */
} wf_cluster_factor;

int wf_cluster_factor_count(void);
const wf_cluster_factor *wf_cluster_factor_at(int i);
double wf_cluster_factor_value(const wf_cluster *c, const wf_cluster_factor *f);

/* Matrix efficiency of one op of `flops` FLOPs on this device. */
double wf_device_matrix_eff(const wf_device *d, double flops);

typedef struct {
    const char *name;
    const char *summary;
} wf_cluster_preset;
int wf_cluster_preset_count(void);
const wf_cluster_preset *wf_cluster_preset_at(int i);

#ifdef __cplusplus
}
#endif
#endif
