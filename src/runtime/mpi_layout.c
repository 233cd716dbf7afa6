/* weft runtime: the MPI job's layout over nodes, and a byte broadcast -- what
 * a caller outside src/runtime/ (which never sees MPI) needs to set up a job
 * of its own, as `weft calibrate --gpu` does for NCCL (one rank per GPU; the
 * NCCL id travels from rank 0 over MPI). Without MPI: one process, one node. */
#include "weft/runtime_io.h"

#include <mpi.h>
#include <stdlib.h>

wf_status wf_mpi_layout(wf_mpi_job *job)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    *job = (wf_mpi_job){rank, nranks, 0, 1, 0, 1};
    if (nranks == 1)
        return WF_OK;
    /* The ranks sharing memory with this one are its node; a node's id is
     * the world rank of its local rank 0, numbered in order of those. */
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Comm_split_type failed");
    int lrank, lsize;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    int leader = lrank == 0 ? rank : -1;
    MPI_Bcast(&leader, 1, MPI_INT, 0, local);
    MPI_Comm_free(&local);
    int *ids = malloc(sizeof(int) * (size_t)nranks);
    wf_status st = wf_mpi_agree(ids ? WF_OK : wf_errorf(WF_NOMEM, "out of memory"));
    if (st != WF_OK) {
        free(ids);
        return st;
    }
    MPI_Allgather(&leader, 1, MPI_INT, ids, 1, MPI_INT, MPI_COMM_WORLD);
    job->local_rank = lrank;
    job->nodes = 0;
    for (int r = 0; r < nranks; r++)
        if (ids[r] == r) {
            if (r == leader)
                job->node = job->nodes;
            job->nodes++;
        }
    free(ids);
    MPI_Allreduce(&lsize, &job->ranks_per_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return WF_OK;
}

wf_status wf_mpi_bcast_bytes(void *buf, size_t bytes, int root)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    if (nranks == 1)
        return WF_OK;
    if (bytes > (size_t)0x7fffffff || MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Bcast of %zu bytes failed", bytes);
    return WF_OK;
}
