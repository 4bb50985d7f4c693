/* memcpy_bw: the machine's copy bandwidth, the limit of a shared-memory collective, for
 * tests/bench/bench_shm.py. THREADS threads each copy SIZE bytes from a buffer of their
 * own to another of their own with memcpy, all at once (a barrier starts every
 * iteration), for each SIZE; an iteration takes as long as its slowest thread, and the
 * figure is the median iteration. Buffers are allocated once at the largest size and
 * touched before timing, as the allreduce peers do.
 * Prints one JSON object per size:
 *   {"bytes": B, "threads": T, "median_us": U, "gbs": X}
 * where X = B / U: one thread's copy bandwidth while the others copy too (bytes read,
 * not read + written, which is how busbw counts an allreduce's payload).
 * Usage: memcpy_bw THREADS ITERS WARMUP SIZE...   (sizes in bytes; thread t is pinned to
 * CPU t modulo the CPUs)
 * Not part of the build: the benchmark compiles it with cc -O2 -pthread at run time. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct mb_thread {
    int id, nthreads, iters, warmup, nsizes;
    const long *sizes;
    char *src, *dst;
    double *us; /* nsizes * iters: this thread's time of every timed iteration */
    pthread_barrier_t *bar;
};

static double mb_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void *mb_run(void *arg)
{
    struct mb_thread *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->id % sysconf(_SC_NPROCESSORS_ONLN), &set);
    sched_setaffinity(0, sizeof set, &set);
    for (int s = 0; s < t->nsizes; s++) {
        for (int i = 0; i < t->warmup + t->iters; i++) {
            pthread_barrier_wait(t->bar);
            double t0 = mb_now_us();
            memcpy(t->dst, t->src, (size_t)t->sizes[s]);
            __asm__ volatile("" ::: "memory");
            if (i >= t->warmup)
                t->us[s * t->iters + i - t->warmup] = mb_now_us() - t0;
        }
    }
    return NULL;
}

static int mb_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: memcpy_bw THREADS ITERS WARMUP SIZE...\n");
        return 2;
    }
    int nt = atoi(argv[1]), iters = atoi(argv[2]), warmup = atoi(argv[3]), ns = argc - 4;
    long *sizes = calloc((size_t)ns, sizeof *sizes), max = 1;
    for (int s = 0; s < ns; s++) {
        sizes[s] = atol(argv[4 + s]);
        max = sizes[s] > max ? sizes[s] : max;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    struct mb_thread *th = calloc((size_t)nt, sizeof *th);
    pthread_t *tid = calloc((size_t)nt, sizeof *tid);
    for (int t = 0; t < nt; t++) {
        th[t] = (struct mb_thread){t,
                                   nt,
                                   iters,
                                   warmup,
                                   ns,
                                   sizes,
                                   malloc((size_t)max),
                                   malloc((size_t)max),
                                   calloc((size_t)ns * (size_t)iters, sizeof(double)),
                                   &bar};
        if (!th[t].src || !th[t].dst || !th[t].us)
            return 3;
        memset(th[t].src, 1 + t, (size_t)max);
        memset(th[t].dst, 0, (size_t)max);
    }
    for (int t = 0; t < nt; t++)
        pthread_create(&tid[t], NULL, mb_run, &th[t]);
    for (int t = 0; t < nt; t++)
        pthread_join(tid[t], NULL);
    double *slow = calloc((size_t)iters, sizeof *slow);
    for (int s = 0; s < ns; s++) {
        for (int i = 0; i < iters; i++) {
            slow[i] = 0;
            for (int t = 0; t < nt; t++)
                if (th[t].us[s * iters + i] > slow[i])
                    slow[i] = th[t].us[s * iters + i];
        }
        qsort(slow, (size_t)iters, sizeof *slow, mb_cmp);
        double med = iters % 2 ? slow[iters / 2] : (slow[iters / 2 - 1] + slow[iters / 2]) / 2;
        printf("{\"bytes\": %ld, \"threads\": %d, \"median_us\": %.3f, \"gbs\": %.4f}\n",
               sizes[s], nt, med, sizes[s] / med / 1e3);
    }
    for (int t = 0; t < nt; t++) {
        free(th[t].src);
        free(th[t].dst);
        free(th[t].us);
    }
    free(th);
    free(tid);
    free(slow);
    free(sizes);
    pthread_barrier_destroy(&bar);
    return 0;
}
