/* mpi_allreduce: the OpenMPI peer of tests/bench/bench_allreduce.py. Times MPI_Allreduce
 * (float32 sum, in place with MPI_IN_PLACE as Gloo always is, or out of place with
 * BENCH_OUT_OF_PLACE=1) the way ddpbench's collective workload does: buffers
 * allocated once at the largest size and touched before timing, warmup iterations,
 * then each timed iteration measured on its own; an iteration takes as long as its
 * slowest rank (MPI_MAX over ranks of each iteration's time), and the reported figure
 * is the median of those. Prints one JSON object per size on rank 0:
 *   {"bytes": B, "median_us": T, "busbw_gbs": X}
 * Usage: mpirun -np N mpi_allreduce ITERS WARMUP SIZE...   (sizes in bytes)
 * Not part of the build: the benchmark compiles it with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce ITERS WARMUP SIZE...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), warmup = atoi(argv[2]);
    long max_bytes = 4;
    for (int i = 3; i < argc; i++)
        max_bytes = atol(argv[i]) > max_bytes ? atol(argv[i]) : max_bytes;
    size_t max_count = (size_t)max_bytes / 4;
    float *send = malloc(max_count * 4), *recv = malloc(max_count * 4);
    double *t = malloc((size_t)iters * sizeof *t), *slow = malloc((size_t)iters * sizeof *slow);
    if (!send || !recv || !t || !slow)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (size_t i = 0; i < max_count; i++) {
        send[i] = (float)((int)((i + (size_t)rank) % 17) - 8);
        recv[i] = 0;
    }
    const void *in = getenv("BENCH_OUT_OF_PLACE") ? (const void *)send : MPI_IN_PLACE;
    for (int s = 3; s < argc; s++) {
        int count = (int)(atol(argv[s]) / 4);
        if (count < 1)
            count = 1;
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(in, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            MPI_Allreduce(in, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[i] = MPI_Wtime() - t0;
        }
        MPI_Reduce(t, slow, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double med = bench_median(slow, iters);
            double bytes = (double)count * 4;
            double busbw = bytes / med / 1e9 * 2.0 * (world - 1) / world;
            printf("{\"bytes\": %.0f, \"median_us\": %.3f, \"busbw_gbs\": %.4f}\n", bytes,
                   med * 1e6, busbw);
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    free(t);
    free(slow);
    MPI_Finalize();
    return 0;
}
