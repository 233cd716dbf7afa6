/* weft calibrate: measures this machine (or, under mpiexec, this MPI job) and
 * writes a cluster file (docs/cluster-format.md) that estimate, plan and
 * simulate accept: the "local" preset with the measured sgemm peak and
 * efficiency table, vector throughput, memory bandwidth and, with two ranks or
 * more, link latency and bandwidth. The table of measurements goes to stderr;
 * without -o the cluster JSON is printed on stdout. Rank 0 alone prints and
 * writes; every rank measures. */
#include "cli/cli.h"
#include "weft/runtime_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static wf_status write_cluster(const wf_calib_result *r, const char *out)
{
    wf_cluster c;
    wf_status st = wf_calibrate_to_cluster(r, &c);
    if (st != WF_OK)
        return st;
    cJSON *j = wf_cluster_to_json(&c);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    st = out ? wf_json_write_file(out, j) : wf_cli_print_json(j);
    cJSON_Delete(j);
    if (st == WF_OK && out)
        fprintf(stderr, "\nwrote %s (cluster %s)\n", out, c.name);
    return st;
}

wf_status wf_cmd_calibrate(int argc, char **argv)
{
    const char *out = NULL, *base = NULL;
    int quick = 0, help = 0, npos = 0, gpu = 0;
    int64_t threads = 1, devices = 0;
    const wf_opt opts[] = {
        {"output", 'o', WF_OPT_STR, &out, "FILE", "write the cluster JSON to FILE (default: stdout)", 0},
        {"quick", 0, WF_OPT_FLAG, &quick, NULL, "fewer sizes and shorter runs (about 5 s)", 0},
        {"threads", 0, WF_OPT_INT, &threads, "N", "BLAS threads per rank (default 1: one core per rank)", 0},
        {"gpu", 0, WF_OPT_FLAG, &gpu, NULL,
         "measure the GPUs instead (cuBLASLt products, memory, NCCL collectives; one rank per GPU under mpiexec)", 0},
        {"base", 0, WF_OPT_STR, &base, "C",
         "--gpu: the cluster whose unmeasured factors the file keeps (default dgx-h100)", 0},
        {"devices", 0, WF_OPT_INT, &devices, "N", "--gpu without mpiexec: use the first N GPUs (default: all)", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &help);
    if (st != WF_OK)
        return st;
    if (help) {
        wf_opts_usage(stdout, "weft calibrate",
                      "Measures this machine: sgemm GFLOP/s by size (the matrix efficiency table),\n"
                      "vector throughput and memory bandwidth; under mpiexec with 2 ranks or more also\n"
                      "the latency and bandwidth of point-to-point messages and MPI_Allreduce. Writes a\n"
                      "cluster file for --cluster of estimate, plan and simulate. With --gpu it measures\n"
                      "NVIDIA GPUs instead: matrix products by shape and dtype, memory bandwidth and\n"
                      "capacity, NCCL collectives within and across nodes (docs/cluster-format.md).",
                      opts);
        return WF_OK;
    }
    if (threads < 1 || threads > 1024)
        return wf_errorf(WF_INVAL, "--threads=%lld must be in [1, 1024]", (long long)threads);
    if (out && (st = wf_file_check_output(out, "-o")) != WF_OK)
        return st;
    if (!gpu && (base || devices))
        return wf_errorf(WF_INVAL, "--%s is for --gpu", base ? "base" : "devices");
    if (devices < 0 || devices > 1024)
        return wf_errorf(WF_INVAL, "--devices=%lld must be in [1, 1024]", (long long)devices);
    if (gpu && threads != 1)
        return wf_errorf(WF_INVAL, "--threads is for the CPU calibration, not --gpu");
    if (gpu)
        return wf_cli_calibrate_gpu(out, quick, base ? base : "dgx-h100", devices);
    int started = 0;
    if ((st = wf_mpi_start(&started)) != WF_OK)
        return st;
    wf_calib_opts o = {quick, (int)threads};
    wf_calib_result r;
    st = wf_calibrate_run(&o, &r);
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    if (st == WF_OK && rank == 0) {
        wf_calibrate_print(stderr, &r);
        st = write_cluster(&r, out);
    }
    st = wf_mpi_agree(st);
    wf_mpi_stop(started);
    return st;
}
