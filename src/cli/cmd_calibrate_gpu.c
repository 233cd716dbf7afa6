/* weft calibrate --gpu: measures this node's GPUs (or, under mpiexec with one
 * rank per GPU, the job's) into a cluster file with a "measured" section
 * (docs/cluster-format.md, "Calibration on GPUs").
 *
 * The steps, each ended by every rank agreeing on failure (so one rank's
 * error stops all of them with one message, none hangs in NCCL):
 *   1. the job's layout over nodes (runtime: MPI), the base cluster looked up,
 *      the GPUs probed (gpu module: CUDA);
 *   2. this rank's GPU measured (products, copy, launch, memory);
 *   3. rank 0's NCCL id broadcast (runtime: MPI), collectives measured and the
 *      points reduced over the ranks (gpu module: NCCL);
 *   4. rank 0 fits, prints the tables on stderr and writes the file (stdout
 *      without -o). */
#include "cli/cli.h"
#include "weft/gpu.h"
#include "weft/runtime_io.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* The cluster file: the fitted cluster, then the measured points. */
static wf_status write_file(const wf_cluster *c, const wf_cluster_measured *m, const char *out)
{
    cJSON *j = wf_cluster_to_json(c);
    cJSON *mj = j ? wf_cluster_measured_to_json(m) : NULL;
    if (!j || !mj) {
        cJSON_Delete(j);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    cJSON_AddItemToObject(j, "measured", mj);
    wf_status st = out ? wf_json_write_file(out, j) : wf_cli_print_json(j);
    cJSON_Delete(j);
    if (st == WF_OK && out)
        fprintf(stderr, "\nwrote %s (cluster %s)\n", out, c->name);
    return st;
}

wf_status wf_cli_calibrate_gpu(const char *out, int quick, const char *base_spec, int64_t max_devices)
{
    if (!wf_gpu_built())
        return wf_errorf(WF_INVAL, "--gpu: weft was built without CUDA (configure with the CUDA toolkit "
                                   "installed and -DWEFT_CUDA=ON)");
    wf_cluster base;
    wf_status st = wf_cluster_lookup(base_spec, &base);
    if (st != WF_OK)
        return st;
    int started = 0;
    if ((st = wf_mpi_start(&started)) != WF_OK)
        return st;
    wf_mpi_job job;
    wf_cluster_measured *m = calloc(1, sizeof *m);
    st = wf_mpi_agree(m ? WF_OK : wf_errorf(WF_NOMEM, "out of memory"));
    if (st == WF_OK)
        st = wf_mpi_layout(&job);
    wf_gpu_world w = {0, 1, 0, 1, 0, 1};
    if (st == WF_OK)
        w = (wf_gpu_world){job.rank, job.nranks, job.node, job.nodes, job.local_rank, job.ranks_per_node};
    wf_gpu_opts o = {quick, (int)max_devices};
    int ndev = 0;
    if (st == WF_OK)
        st = wf_mpi_agree(wf_gpu_probe(&ndev));
    if (st == WF_OK)
        st = wf_mpi_agree(wf_gpu_measure_device(&o, &w, m));
    unsigned char id[WF_GPU_ID_BYTES] = {0};
    if (st == WF_OK)
        st = wf_mpi_agree(w.rank == 0 && w.nranks > 1 ? wf_gpu_comm_id(id) : WF_OK);
    if (st == WF_OK)
        st = wf_mpi_bcast_bytes(id, sizeof id, 0);
    if (st == WF_OK)
        st = wf_mpi_agree(wf_gpu_measure_links(&o, &w, id, m));
    if (st == WF_OK && w.rank == 0) {
        wf_cluster c;
        st = wf_gpu_fit(m, &base, &c);
        if (st == WF_OK) {
            wf_gpu_print(stderr, m, &c);
            st = write_file(&c, m, out);
        }
    }
    st = wf_mpi_agree(st);
    free(m);
    wf_mpi_stop(started);
    return st;
}
