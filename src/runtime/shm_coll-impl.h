/* Private interface of the shared-memory collectives (shm_coll.c) for the
 * data-parallel engine (dist.c): the float sums and copies of one node's
 * ranks, done by the ranks' own cores through one shared segment, without
 * MPI moving the data. Only src/runtime/ sees MPI. */
#ifndef WEFT_RUNTIME_SHM_COLL_IMPL_H
#define WEFT_RUNTIME_SHM_COLL_IMPL_H

#include "weft/core.h"

#include <mpi.h>
#include <stdint.h>

typedef struct wf_shm_coll wf_shm_coll;

/* WEFT_COLL_SHM: *on = 0 when it is "0" (MPI's collectives, to compare),
 * 1 when unset or "1"; anything else is an error naming the value. */
wf_status wf_shm_coll_env(int *on);

/* Collective over comm (every rank calls it, in the same order as its other
 * collectives on comm). *out is the engine when every rank of comm shares
 * one node's memory (MPI_Comm_split_type SHARED gives comm whole) and comm
 * has 2 to 256 ranks; NULL otherwise (across nodes, one rank, or the
 * segment refused on some rank: the caller keeps MPI; why is in *why, a
 * static string, when why is not NULL). chunk_floats: the floats one
 * rank's slot holds (<= 0: the default, 1 Mi floats); each rank's segment
 * is two slots. */
wf_status wf_shm_coll_create(MPI_Comm comm, int64_t chunk_floats, wf_shm_coll **out, const char **why);
/* Completes every operation still queued, then frees the segment
 * (collective over comm, as MPI_Win_free). NULL: nothing. */
void wf_shm_coll_free(wf_shm_coll *s);

/* Queues an operation and returns its ticket (increasing from 0 in issue
 * order; every rank must issue the same operations in the same order, as
 * MPI's non-blocking collectives). Nothing moves until progress or wait.
 *   allreduce       buf[0, n) := the sum over ranks, in place
 *   reduce_scatter  in[0, P*n) from every rank; out[0, n) := the sum over
 *                   ranks of in[r*n, (r+1)*n) on rank r (out may be in:
 *                   MPI_IN_PLACE's layout, the result at the start)
 *   allgather       out[q*n, (q+1)*n) := rank q's in[0, n) (in may be
 *                   out + r*n: MPI_IN_PLACE's layout)
 * Sums are fp32 in rank order 0, 1, ..., P-1, computed once per element
 * and copied, so every rank holds the same bits. The buffers must stay
 * valid until the ticket completes. -1: out of memory for the queue (the
 * operation is not queued). */
int64_t wf_shm_coll_allreduce(wf_shm_coll *s, float *buf, int64_t n);
/* allreduce_to: out[0, n) := the sum over ranks of in[0, n) (in is only
 * read; out may be in) -- the all-reduce without the caller's copy of in to
 * out first. */
int64_t wf_shm_coll_allreduce_to(wf_shm_coll *s, const float *in, float *out, int64_t n);
int64_t wf_shm_coll_reduce_scatter(wf_shm_coll *s, const float *in, float *out, int64_t n);
int64_t wf_shm_coll_allgather(wf_shm_coll *s, const float *in, float *out, int64_t n);
/* Does every step the other ranks' progress allows, without waiting. */
void wf_shm_coll_progress(wf_shm_coll *s);
/* 1 when ticket t (and every earlier one) has completed on this rank. */
int wf_shm_coll_done(const wf_shm_coll *s, int64_t t);
/* Progresses until ticket t has completed (t < 0: every queued one). */
void wf_shm_coll_wait(wf_shm_coll *s, int64_t t);
/* Operations queued and not completed. */
int wf_shm_coll_pending(const wf_shm_coll *s);

#endif
