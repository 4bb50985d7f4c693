/* nccl_allreduce_plain: the peer of ddpbench's NCCL allreduce figures, timed the way
 * ddpbench's collective workload times them: per size, warmup iterations, then `iters`
 * back-to-back ncclAllReduce calls on one stream, each between two CUDA events recorded on
 * that stream (device time, not host enqueue time); the time of iteration i is the
 * slowest rank's, and the figure is the median over iterations. algbw = bytes / time,
 * busbw = algbw * 2(n-1)/n (nccl-tests' factor).
 *
 * One rank per GPU, forked processes (rank r on device r): several ranks on one GPU are
 * not supported by NCCL (NVIDIA/nccl issue 418), so a rank fails with the reason when
 * there are fewer GPUs than ranks. Rank 0 makes the unique id and hands it to the others
 * through a pipe before they initialise; the per-iteration times are combined with an
 * ncclAllReduce(max) on the same communicator. Output: one line per size,
 * "bytes busbw_gbs time_us", rank 0 only.
 *
 * Built by meson beside the GPU tests (tests/gpu/meson.build), bundled by tests/gpu/bundle.sh.
 * Usage: nccl_allreduce_plain [ranks=1] [min_bytes=4096] [max_bytes=268435456] [iters=20]
 *        [warmup=5] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(what, ok)                                                                        \
    do {                                                                                       \
        if (!(ok)) {                                                                           \
            fprintf(stderr, "rank %d: %s failed\n", rank, what);                               \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

static int plain_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of n values, sorting them in place */
static double plain_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, plain_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int rank_main(int rank, int n, int idfd[][2], size_t min_b, size_t max_b, int iters,
                     int warmup)
{
    int devices = 0;
    CHECK("cudaGetDeviceCount", cudaGetDeviceCount(&devices) == cudaSuccess);
    if (devices < n) {
        fprintf(stderr,
                "rank %d: %d ranks need %d GPUs, %d here (one rank per GPU: NCCL does "
                "not support several ranks on one GPU)\n",
                rank, n, n, devices);
        _exit(3);
    }
    ncclUniqueId id;
    if (rank == 0) {
        CHECK("ncclGetUniqueId", ncclGetUniqueId(&id) == ncclSuccess);
        for (int r = 1; r < n; r++)
            CHECK("id pipe", write(idfd[r][1], &id, sizeof id) == (ssize_t)sizeof id);
    } else {
        CHECK("id pipe", read(idfd[rank][0], &id, sizeof id) == (ssize_t)sizeof id);
    }
    CHECK("cudaSetDevice", cudaSetDevice(rank) == cudaSuccess);
    ncclComm_t comm;
    CHECK("ncclCommInitRank", ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
    float *send, *recv;
    double *times_d;
    CHECK("cudaMalloc",
          cudaMalloc((void **)&send, max_b) == cudaSuccess &&
              cudaMalloc((void **)&recv, max_b) == cudaSuccess &&
              cudaMalloc((void **)&times_d, iters * sizeof(double)) == cudaSuccess);
    CHECK("cudaMemset", cudaMemset(send, 0, max_b) == cudaSuccess);
    cudaStream_t s;
    CHECK("stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    cudaEvent_t *ev = calloc((size_t)iters + 1, sizeof *ev);
    double *times = calloc((size_t)iters, sizeof *times);
    CHECK("calloc", ev && times);
    for (int i = 0; i <= iters; i++)
        CHECK("cudaEventCreate", cudaEventCreate(&ev[i]) == cudaSuccess);
    if (rank == 0)
        printf("# bytes busbw_gbs time_us (ranks %d, iters %d, median of the slowest rank)\n",
               n, iters);
    for (size_t bytes = min_b; bytes <= max_b; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        for (int i = 0; i < warmup; i++)
            CHECK("allreduce", ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm,
                                             s) == ncclSuccess);
        CHECK("sync", cudaStreamSynchronize(s) == cudaSuccess);
        /* back to back: iteration i runs from event i to event i+1 on the stream */
        CHECK("event", cudaEventRecord(ev[0], s) == cudaSuccess);
        for (int i = 0; i < iters; i++) {
            CHECK("allreduce", ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm,
                                             s) == ncclSuccess);
            CHECK("event", cudaEventRecord(ev[i + 1], s) == cudaSuccess);
        }
        CHECK("sync", cudaStreamSynchronize(s) == cudaSuccess);
        for (int i = 0; i < iters; i++) {
            float ms = 0;
            CHECK("elapsed", cudaEventElapsedTime(&ms, ev[i], ev[i + 1]) == cudaSuccess);
            times[i] = (double)ms * 1e3;
        }
        /* the slowest rank's time per iteration, on every rank */
        CHECK("copy", cudaMemcpy(times_d, times, iters * sizeof(double),
                                 cudaMemcpyHostToDevice) == cudaSuccess);
        CHECK("allreduce max", ncclAllReduce(times_d, times_d, (size_t)iters, ncclFloat64,
                                             ncclMax, comm, s) == ncclSuccess);
        CHECK("copy", cudaMemcpyAsync(times, times_d, iters * sizeof(double),
                                      cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                          cudaStreamSynchronize(s) == cudaSuccess);
        double us = plain_median(times, iters);
        double busbw = (double)bytes / (us * 1e-6) / 1e9 * 2.0 * (n - 1) / n;
        if (rank == 0)
            printf("%zu %.3f %.2f\n", bytes, busbw, us);
    }
    fflush(stdout);
    free(times);
    free(ev);
    ncclCommDestroy(comm);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1;
    size_t min_b = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
    size_t max_b = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)256 << 20;
    int iters = argc > 4 ? atoi(argv[4]) : 20, warmup = argc > 5 ? atoi(argv[5]) : 5;
    if (n < 1 || n > 64 || min_b < 4 || max_b < min_b || iters < 1 || warmup < 0) {
        fprintf(stderr, "usage: %s [ranks] [min_bytes] [max_bytes] [iters] [warmup]\n",
                argv[0]);
        return 2;
    }
    int idfd[64][2];
    for (int r = 0; r < n; r++)
        if (pipe(idfd[r]) < 0)
            return 1;
    pid_t pid[64];
    for (int r = 0; r < n; r++)
        if ((pid[r] = fork()) == 0)
            _exit(rank_main(r, n, idfd, min_b, max_b, iters, warmup));
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}
