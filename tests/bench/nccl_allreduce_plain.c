/* nccl_allreduce_plain: the peer of ddpbench's NCCL allreduce figures, written the way
 * nccl-tests' all_reduce_perf measures: per size, warmup iterations, then `iters`
 * back-to-back ncclAllReduce calls on one stream timed by two CUDA events around the whole
 * loop; time = elapsed / iters, algbw = bytes / time, busbw = algbw * 2(n-1)/n.
 *
 * Ranks are forked processes on one GPU, emulated as ddpbenchd does (a distinct
 * NCCL_HOSTID each, CUDA_VISIBLE_DEVICES as given), so both sides measure the same
 * transport. Rank 0 makes the unique id and hands it to the others through a pipe before
 * they initialise. Output: one line per size, "bytes busbw_gbs time_us", rank 0 only.
 *
 * Build: cc -O2 -std=c11 nccl_allreduce_plain.c -I$CUDA/include -L$CUDA/lib64 -lnccl
 *        -lcudart -o nccl_allreduce_plain
 * Usage: nccl_allreduce_plain [ranks=2] [min_bytes=4096] [max_bytes=268435456] [iters=20]
 *        [warmup=5] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(what, ok)                                                                        \
    do {                                                                                       \
        if (!(ok)) {                                                                           \
            fprintf(stderr, "rank %d: %s failed\n", rank, what);                               \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

static int rank_main(int rank, int n, int idfd[][2], size_t min_b, size_t max_b, int iters,
                     int warmup)
{
    char host[64];
    snprintf(host, sizeof host, "plain-r%d", rank);
    setenv("NCCL_HOSTID", host, 1);
    ncclUniqueId id;
    if (rank == 0) {
        CHECK("ncclGetUniqueId", ncclGetUniqueId(&id) == ncclSuccess);
        for (int r = 1; r < n; r++)
            CHECK("id pipe", write(idfd[r][1], &id, sizeof id) == (ssize_t)sizeof id);
    } else {
        CHECK("id pipe", read(idfd[rank][0], &id, sizeof id) == (ssize_t)sizeof id);
    }
    CHECK("cudaSetDevice", cudaSetDevice(0) == cudaSuccess);
    ncclComm_t comm;
    CHECK("ncclCommInitRank", ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
    float *send, *recv;
    CHECK("cudaMalloc", cudaMalloc((void **)&send, max_b) == cudaSuccess &&
                            cudaMalloc((void **)&recv, max_b) == cudaSuccess);
    CHECK("cudaMemset", cudaMemset(send, 0, max_b) == cudaSuccess);
    cudaStream_t s;
    cudaEvent_t t0, t1;
    CHECK("stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                        cudaEventCreate(&t0) == cudaSuccess &&
                        cudaEventCreate(&t1) == cudaSuccess);
    if (rank == 0)
        printf("# bytes busbw_gbs time_us (ranks %d, iters %d)\n", n, iters);
    for (size_t bytes = min_b; bytes <= max_b; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        for (int i = 0; i < warmup; i++)
            CHECK("allreduce", ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm,
                                             s) == ncclSuccess);
        CHECK("sync", cudaStreamSynchronize(s) == cudaSuccess);
        cudaEventRecord(t0, s);
        for (int i = 0; i < iters; i++)
            CHECK("allreduce", ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm,
                                             s) == ncclSuccess);
        cudaEventRecord(t1, s);
        CHECK("sync", cudaStreamSynchronize(s) == cudaSuccess);
        float ms = 0;
        cudaEventElapsedTime(&ms, t0, t1);
        double us = (double)ms * 1e3 / iters;
        double busbw = (double)bytes / (us * 1e-6) / 1e9 * 2.0 * (n - 1) / n;
        if (rank == 0)
            printf("%zu %.3f %.2f\n", bytes, busbw, us);
    }
    fflush(stdout);
    ncclCommDestroy(comm);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
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
