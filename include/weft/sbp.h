/* weft sbp: n-D SBP layouts (Split / Broadcast / Partial-sum) of tensors on
 * a device mesh, the signatures every op kind accepts, and the boxing
 * (resharding) cost between any two layouts. It computes layouts and costs and
 * moves no data. Meshes, layouts and the gradients' dual layouts:
 * docs/interfaces.md, "sbp.h"; the algorithms: ALGORITHMS.md §2. */
#ifndef WEFT_SBP_H
#define WEFT_SBP_H

#include "weft/cluster.h"
#include "weft/cost.h"
#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WF_SBP_MAX_AXES 4

/* Values of one mesh axis in a layout: k >= 0 means S(k). */
#define WF_SBP_B ((int8_t)-1)
#define WF_SBP_P ((int8_t)-2)

/* ---- meshes ------------------------------------------------------------------ */
typedef struct {
    int naxes;
    int64_t size[WF_SBP_MAX_AXES];   /* devices along each axis, outermost first */
    double alpha_s[WF_SBP_MAX_AXES]; /* latency per message along the axis */
    double bw_bps[WF_SBP_MAX_AXES];  /* achieved bandwidth per device along the axis
                                        (nominal x efficiency of its level) */
    int level[WF_SBP_MAX_AXES];      /* slowest cluster level the axis spans (-1: given by hand) */
    wf_coll_algo algo;               /* collective algorithm for boxing (default AUTO) */
    /* The cluster's hierarchy and each axis's group on it (axis a: size[a]
     * ranks prod(size[a+1..]) apart), so that a collective along an axis is
     * priced as the estimate prices it (wf_coll_time: hierarchy, reduction
     * arithmetic, overheads). net.nlevels 0 (a mesh given by hand): the flat
     * closed forms on alpha_s / bw_bps. */
    wf_coll_net net;
    wf_group group[WF_SBP_MAX_AXES];
} wf_mesh;

/* Lays a mesh of naxes axes with the given sizes (outermost first) on the
 * cluster's devices 0..prod(sizes)-1, node-major: axis a has stride
 * prod(sizes[a+1..]), and its alpha/bandwidth are those of the slowest level
 * a group along it spans. Sizes must be >= 1 and their product at most the
 * cluster's devices (WF_INVAL naming the bad size otherwise). */
wf_status wf_mesh_from_cluster(const wf_cluster *c, int naxes, const int64_t *sizes, wf_mesh *out);
/* "64", "8x8", "2x4x8" on the cluster (as wf_mesh_from_cluster). */
wf_status wf_mesh_parse(const char *text, const wf_cluster *c, wf_mesh *out);
/* The natural mesh of the first `devices` devices: [devices] inside one node,
 * else [devices / devices_per_node, devices_per_node]. */
wf_status wf_mesh_default(const wf_cluster *c, int64_t devices, wf_mesh *out);
/* The meshes the op-level planner tries on `devices` devices of the cluster:
 * the 1-D mesh [devices], then every 2-D factoring [a, devices / a] with
 * 1 < a < devices, a ascending (the inner axis spans consecutive devices, so
 * [nodes, devices per node] is among them). Writes up to cap meshes into out
 * and returns how many there are, or a negative wf_status. */
int wf_mesh_candidates(const wf_cluster *c, int64_t devices, wf_mesh *out, int cap);
int64_t wf_mesh_devices(const wf_mesh *m);
/* "8x8" into buf. */
const char *wf_mesh_str(const wf_mesh *m, char *buf, size_t cap);

/* ---- layouts ------------------------------------------------------------------- */
typedef struct {
    int8_t ax[WF_SBP_MAX_AXES]; /* per mesh axis: WF_SBP_B, WF_SBP_P or k >= 0 for S(k) */
} wf_sbp;

/* All axes B (also the layout of every axis beyond the mesh's). */
wf_sbp wf_sbp_broadcast(void);
int wf_sbp_equal(const wf_sbp *a, const wf_sbp *b, int naxes);
/* "[S(0),B]" into buf; one entry per mesh axis. */
const char *wf_sbp_str(const wf_sbp *s, int naxes, char *buf, size_t cap);
/* Parses "S(0),B" or "[S0,P]" (naxes entries); WF_FORMAT naming the bad entry. */
wf_status wf_sbp_parse(const char *text, int naxes, wf_sbp *out);
/* 1 when S(k) names dims of the tensor and every split dim divides exactly. */
int wf_sbp_valid(const wf_mesh *m, int ndim, const int64_t *shape, const wf_sbp *s);
/* The shard one device holds (P and B axes do not divide); WF_INVAL naming
 * the dim when a split does not divide. */
wf_status wf_sbp_local_shape(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s,
                             int64_t local[WF_MAX_DIMS]);
/* Bytes of one device's shard (the full tensor / the product of its splits). */
double wf_sbp_local_bytes(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s);
/* Product of the sizes of the axes on which s is S (the number of shards). */
int64_t wf_sbp_split_factor(const wf_mesh *m, const wf_sbp *s);

/* ---- signatures ------------------------------------------------------------------ */
/* One way to run an op: a layout for each input and output, on every axis. */
typedef struct {
    wf_sbp in[WF_MAX_INPUTS];
    wf_sbp out[WF_MAX_OUTPUTS];
    int64_t split;                            /* the op's work is divided by this (product of
                                                 the axes on which some operand is S) */
    double internal_bytes[WF_SBP_MAX_AXES];   /* all-reduced inside the op along each axis,
                                                 forward + backward (vocabulary-split
                                                 cross-entropy, batch statistics) */
} wf_sbp_sig;

/* The n-D signatures of forward op `op`: the product of the op kind's 1-D sets
 * over the mesh axes (an axis of size 1 takes only all-B), filtered by exact
 * divisibility of every operand and the op's own constraints (heads, groups).
 * Writes at most cap into out and returns the total count (call with cap 0 to
 * size the array), or a negative wf_status (WF_INVAL naming the op). The list
 * is deterministic, data-parallel first and all-B last. */
int wf_sbp_op_sigs(const wf_graph *g, int op, const wf_mesh *m, wf_sbp_sig *out, int cap);
/* A signature as text: one 1-D signature per mesh axis, outermost first,
 * separated by '|'; each is "inputs->outputs" with S<k>, B or P per operand:
 * "S0,B,B->S0|B,S1,S0->S2" (a linear, batch split on axis 0 and columns on
 * axis 1). Writes into buf and returns it. */
const char *wf_sbp_sig_str(const wf_sbp_sig *s, int nin, int nout, int naxes, char *buf,
                           size_t cap);
/* Parses that form (spaces allowed) into s->in[0..nin) and s->out[0..nout);
 * other fields are zeroed. WF_FORMAT naming the bad part. */
wf_status wf_sbp_sig_parse(const char *text, int nin, int nout, int naxes, wf_sbp_sig *s);
/* 1 when signatures a and b lay out the same nin inputs and nout outputs
 * (wf_sbp_equal on each, naxes mesh axes). */
int wf_sbp_sig_equal(const wf_sbp_sig *a, const wf_sbp_sig *b, int nin, int nout, int naxes);
/* The index in wf_sbp_op_sigs(g, op, m) of the signature whose layouts text
 * gives; a negative wf_status when text does not parse (WF_FORMAT) or names
 * no signature of the op on that mesh (WF_INVAL naming the op and its kind). */
int wf_sbp_sig_find(const wf_graph *g, int op, const wf_mesh *m, const char *text);

/* The all-B signature (every op has one: run replicated). */
void wf_sbp_sig_replicated(const wf_graph *g, int op, wf_sbp_sig *out);

/* Layout of the gradient of input i under signature sig (see the top comment). */
wf_sbp wf_sbp_grad_of_input(const wf_sbp_sig *sig, int nout, int i, int naxes);
/* Layout a producer needs the gradient of an output of layout s in: P -> B. */
wf_sbp wf_sbp_grad_need(const wf_sbp *s, int naxes);
/* Layout a parameter is stored in when a signature reads it as s: P -> B
 * (each device holds the weight; all but one treat it as zero). */
wf_sbp wf_sbp_storage(const wf_sbp *s, int naxes);

/* ---- boxing ---------------------------------------------------------------------- */
/* One step of a boxing: change axis `axis` from one value to another. */
typedef struct {
    int axis;
    int coll;        /* wf_coll_kind, or -1 for a local step (slice, zero-fill): free */
    wf_sbp from, to; /* whole layouts before and after the step */
    double bytes;    /* the collective's vector size n (as wf_coll_time_flat takes it) */
    double time_s;
} wf_sbp_box_step;

/* The 1-D table of ALGORITHMS.md §2: time to change one axis from `from` to
 * `to` for a tensor of bytes_on_axis bytes on that axis (the full tensor
 * divided by the splits of the other axes). Sets *coll to the collective
 * (-1 when local). S(i)->S(j) is an all-to-all of bytes_on_axis / p per device. */
/* Time of collective k of a vector of `bytes` along mesh axis `axis`: the
 * one price of a collective (wf_coll_time_net on the axis's group) for a
 * mesh laid on a cluster with the AUTO algorithm, else the flat closed form
 * on the axis's alpha and bandwidth. */
double wf_mesh_coll_time(const wf_mesh *m, int axis, wf_coll_kind k, double bytes);

double wf_sbp_box_axis_time(const wf_mesh *m, int axis, int8_t from, int8_t to,
                            double bytes_on_axis, int *coll);

/* The cheapest way from layout `from` to `to` for a tensor of the given
 * shape and element size: one axis at a time, shortest path over intermediate
 * layouts (each valid for the shape). Writes at most cap steps, returns the
 * step count and sets *time_s; a negative wf_status when a layout is invalid. */
int wf_sbp_boxing_path(const wf_mesh *m, int ndim, const int64_t *shape, size_t elem_bytes,
                       const wf_sbp *from, const wf_sbp *to, wf_sbp_box_step *steps, int cap,
                       double *time_s);

/* A boxing cache for one mesh (phase-scoped: a search creates and frees it). */
typedef struct wf_sbp_cache wf_sbp_cache;
wf_status wf_sbp_cache_create(const wf_mesh *m, wf_sbp_cache **out);
void wf_sbp_cache_free(wf_sbp_cache *c);
/* Boxing time of tensor t from -> to (cached); a negative value when a layout
 * is invalid for t. */
double wf_sbp_boxing_time(wf_sbp_cache *c, const wf_tensor *t, const wf_sbp *from,
                          const wf_sbp *to);
/* Lookups and misses so far (statistics for benchmarks). */
void wf_sbp_cache_stats(const wf_sbp_cache *c, int64_t *lookups, int64_t *misses);

#ifdef __cplusplus
}
#endif
#endif
