/* Private interface of the executor (executor.c) for its modes in other
 * files: its struct, the kernel switch, and what the expert mode
 * (exec_experts.c) and the SPMD mode (exec_spmd.c) give its passes. No MPI:
 * the engines' collectives come in through the callbacks of wf_exec_experts
 * and wf_exec_spmd. */
#ifndef WEFT_RUNTIME_EXECUTOR_IMPL_H
#define WEFT_RUNTIME_EXECUTOR_IMPL_H

#include "weft/runtime.h"

#include "kernels/kernels-impl.h"

#define ALIGN_FLOATS 16
#define ALIGN_BYTES 64

typedef enum {
    ST_ARENA,  /* planned */
    ST_LEAF,   /* inputs, labels, loss, seed gradient */
    ST_PARAM,  /* a parameter (in the parameter block) */
    ST_GRAD    /* a parameter's final gradient (in the gradient block) */
} store_kind;

typedef struct {
    store_kind kind;
    size_t bytes;
    size_t offset; /* arena/leaf: bytes; PARAM/GRAD: unused (param index below) */
    int param;     /* PARAM/GRAD */
    int def, last; /* lifetime in op indices (arena) */
    int kept;      /* arena, with activation slots: in the slot's kept block (see wf_exec_set_slots) */
} store;

struct wf_exec {
    wf_graph g;
    int reference;
    uint64_t seed;
    uint64_t stream;
    int64_t first_sample;
    int64_t mbs;     /* axis 0 of the data input: the micro-batch the graph was built for */
    int transformer; /* the graph has attention: GPT-2 style initialization */

    int nstores, cap_stores;
    store *st;
    int *tstore;      /* [ntensors] store of each tensor, -1 none */
    int *saved_store; /* [nops] store of a forward op's saved state, -1 none */
    int *bwd_of;      /* [nops] backward op of a forward op, -1 none */
    void **ptr;       /* [ntensors] resolved data pointers, NULL when none */
    float **saved;    /* [nops] resolved saved-state pointers */

    char *arena;
    size_t arena_bytes, unplanned_bytes;
    char *leaf;
    size_t leaf_bytes;
    float *pblock;
    int64_t pfloats;
    float *gblock;
    int64_t gfloats;
    float *ws;
    size_t ws_floats;
    float *acc;
    size_t acc_floats;

    int nparams;
    wf_exec_param *params;
    int *param_of_tensor; /* [ntensors] */
    int *param_of_grad;   /* [ntensors] */

    wf_exec_hooks hooks;
    int has_hooks;
    wf_exec_experts ex;   /* expert parallelism (ep 0 or 1: none) */
    float *exbuf;         /* its exchange buffers */
    wf_status bwd_status; /* what a backward op's exchange returned */
    size_t exbuf_floats;
    int accumulate;
    wf_exec_spmd sp;      /* SPMD callbacks (op-level plans) */
    int has_sp;

    /* A pipeline stage (wf_exec_create_stage): its outputs, and the float
     * inputs whose gradients the backward computes; the activation slot
     * bound (arena and leaf block), own_* the executor's own. */
    int nouts, nwrt;
    int nkept;
    int *kept_t; /* wf_exec_create_keeping: activations readable after a forward */
    int *outs, *wrt;
    const int64_t *init_index; /* during creation only */
    char *own_arena, *own_leaf;
    int nslots;    /* activation slots (0 or 1: none, the executor's own arena and leaves) */
    char **slots;  /* [2 * nslots]: kept block and leaf block of slot k (slot 0: the own leaves) */
    char *keep;    /* the kept block of the slot in use */
    size_t keep_bytes;
    /* wf_exec_share_scratch: this executor runs on another's work arena
     * (arena_shared) and kernel workspace and accumulation buffer
     * (scratch_shared), which that one owns and reports. */
    int arena_shared, scratch_shared;
};

/* The kernel of the chosen path: both versions have the same type. */
#define K(e, name) ((e)->reference ? wf_k_##name##_ref : wf_k_##name)

/* A tensor's data as floats or int32 (inside a function with executor e). */
#define F(t) ((float *)e->ptr[(t)])
#define I32(t) ((const int32_t *)e->ptr[(t)])

/* ---- experts (exec_experts.c): the grouped MLP of op `op` with its experts
 * over the ep ranks, forward into y, backward of forward op f into d0..d2 ---- */
wf_status wf_exec_ep_fwd(wf_exec *e, const wf_op *op, float *y);
wf_status wf_exec_ep_bwd(wf_exec *e, const wf_op *f, const float *dy, float *d0, float *d1, float *d2);

/* ---- SPMD (exec_spmd.c) ----
 * is_box: forward op o is a boxing op (the engine's collective);
 * vocab_split: o is an embedding or cross-entropy over a vocabulary shard;
 * dropout: o's dropout over a local block of a global tensor (1 when done);
 * embedding, ce: the vocabulary-split kernels (rows [first, first + v) of
 * vt); stats_split, bn: batch statistics over a split batch. */
int wf_exec_sp_is_box(const wf_exec *e, int o);
int wf_exec_sp_vocab_split(const wf_exec *e, int o);
int wf_exec_sp_dropout(const wf_exec *e, int o, const float *src, float *dst, int bwd);
wf_status wf_exec_sp_embedding_fwd(const int32_t *ids, const float *table, float *y, int64_t m, int64_t v,
                                   int64_t h, int64_t first, int64_t vt);
void wf_exec_sp_embedding_bwd(const int32_t *ids, const float *dy, float *dtable, int64_t m, int64_t v, int64_t h,
                              int64_t first);
wf_status wf_exec_sp_ce_fwd(wf_exec *e, int o, const float *x, const int32_t *lab, float *loss, float *saved,
                            float *ws, int64_t m, int64_t v, int64_t first, int64_t vt);
void wf_exec_sp_ce_bwd(const float *x, const int32_t *lab, const float *saved, float dloss, float *dx, int64_t m,
                       int64_t v, int64_t first, int64_t vt);
int wf_exec_sp_stats_split(const wf_exec *e, int o);
wf_status wf_exec_sp_bn_fwd(wf_exec *e, int o, const float *x, const float *gamma, const float *beta, float *y,
                            float *saved, float *ws, int64_t n, int64_t c, int64_t s);
wf_status wf_exec_sp_bn_bwd(wf_exec *e, int o, const float *x, const float *gamma, const float *dy,
                            const float *saved, float *dx, float *dgamma, float *dbeta, float *ws, int64_t n,
                            int64_t c, int64_t s);

#endif
