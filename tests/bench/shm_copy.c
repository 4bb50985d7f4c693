/* shm_copy: single-copy reads from a peer (CMA, process_vm_readv) against staging through a
 * shared mapping, between 2 processes, for tests/bench/bench_shm.py (issue 30: "measured
 * and chosen by size").
 *   cma     the reader copies N bytes out of the peer's private buffer with one
 *           process_vm_readv (the kernel pins the peer's pages and copies once);
 *   staged  the peer memcpy's N bytes into a shared mapping CHUNK bytes at a time (two
 *           slots, double buffered: what the shm transport does) and the reader memcpy's
 *           each chunk out once the peer posted it, so the two copies overlap on 2 CPUs.
 * Both end with N bytes in the reader's private buffer; a timed iteration runs from the
 * reader's start signal until its last byte arrived; the figure is the median iteration.
 * The reader runs on CPU 0, the peer on CPU 1 (modulo the CPUs). Waiting is spinning on
 * counters in the shared mapping (both processes have a CPU of their own).
 * Prints one JSON object per size and mode:
 *   {"bytes": N, "mode": "cma"|"staged", "median_us": U, "gbs": X}   (X = N / U)
 * and {"error": "..."} when process_vm_readv is refused (seccomp, ptrace policy).
 * Usage: shm_copy ITERS WARMUP CHUNK SIZE...   (bytes)
 * Not part of the build: the benchmark compiles it with cc -O2 at run time. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct sc_ctl {                /* the shared page: written by one side each */
    _Atomic uint64_t go;       /* reader: the iteration the peer is to stage (0: none yet) */
    _Atomic uint64_t quit;     /* reader: the peer exits */
    _Atomic uint64_t posted;   /* peer: chunks of the current iteration in the slots */
    _Atomic uint64_t consumed; /* reader: chunks of the current iteration copied out */
    _Atomic uint64_t ready;    /* peer: its buffer's address is in addr */
    uint64_t addr;
};

static double sc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void sc_pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % sysconf(_SC_NPROCESSORS_ONLN), &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void sc_pause(void)
{
    __builtin_ia32_pause();
}

/* The peer: owns src; stages size bytes per iteration the reader asks for. */
static void sc_peer(struct sc_ctl *c, char *slots, size_t chunk, size_t max)
{
    sc_pin(1);
    char *src = malloc(max);
    memset(src, 7, max);
    c->addr = (uint64_t)(uintptr_t)src;
    atomic_store(&c->ready, 1);
    uint64_t seen = 0;
    for (;;) {
        uint64_t go;
        while ((go = atomic_load(&c->go)) == seen && !atomic_load(&c->quit))
            sc_pause();
        if (atomic_load(&c->quit))
            break;
        seen = go;
        size_t n = (size_t)(go >> 20); /* go = size << 20 | generation (main) */
        size_t nchunks = (n + chunk - 1) / chunk;
        for (size_t i = 0; i < nchunks; i++) {
            while (i >= 2 && atomic_load(&c->consumed) < i - 1)
                sc_pause();
            size_t off = i * chunk, len = n - off < chunk ? n - off : chunk;
            memcpy(slots + (i & 1) * chunk, src + off, len);
            atomic_store(&c->posted, i + 1);
        }
    }
    free(src);
}

static int sc_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double sc_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, sc_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: shm_copy ITERS WARMUP CHUNK SIZE...\n");
        return 2;
    }
    int iters = atoi(argv[1]), warmup = atoi(argv[2]);
    size_t chunk = (size_t)atol(argv[3]), max = 1;
    for (int s = 4; s < argc; s++)
        max = (size_t)atol(argv[s]) > max ? (size_t)atol(argv[s]) : max;
    struct sc_ctl *c = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                            0);
    char *slots = mmap(NULL, 2 * chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                       0);
    if (c == MAP_FAILED || slots == MAP_FAILED)
        return 3;
    memset(slots, 0, 2 * chunk);
    pid_t pid = fork();
    if (pid == 0) {
        sc_peer(c, slots, chunk, max);
        _exit(0);
    }
    sc_pin(0);
    char *dst = malloc(max);
    double *t = calloc((size_t)iters, sizeof *t);
    memset(dst, 0, max);
    while (!atomic_load(&c->ready))
        sc_pause();
    uint64_t gen = 0;
    int rc = 0;
    for (int s = 4; s < argc && !rc; s++) {
        size_t n = (size_t)atol(argv[s]);
        for (int mode = 0; mode < 2 && !rc; mode++) {
            for (int i = 0; i < warmup + iters; i++) {
                double t0 = sc_now_us();
                if (mode == 0) {
                    struct iovec l = {dst, n}, r = {(void *)(uintptr_t)c->addr, n};
                    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
                    if (got != (ssize_t)n) {
                        printf("{\"error\": \"process_vm_readv: %s\"}\n",
                               got < 0 ? strerror(errno) : "short read");
                        rc = 1;
                        break;
                    }
                } else {
                    size_t nchunks = (n + chunk - 1) / chunk;
                    atomic_store(&c->posted, 0);
                    atomic_store(&c->consumed, 0);
                    gen++;
                    atomic_store(&c->go, ((uint64_t)n << 20) | (gen & 0xfffff));
                    for (size_t k = 0; k < nchunks; k++) {
                        while (atomic_load(&c->posted) < k + 1)
                            sc_pause();
                        size_t off = k * chunk, len = n - off < chunk ? n - off : chunk;
                        memcpy(dst + off, slots + (k & 1) * chunk, len);
                        atomic_store(&c->consumed, k + 1);
                    }
                }
                if (i >= warmup)
                    t[i - warmup] = sc_now_us() - t0;
            }
            if (rc)
                break;
            double med = sc_median(t, iters);
            printf("{\"bytes\": %zu, \"mode\": \"%s\", \"median_us\": %.3f, \"gbs\": %.4f}\n",
                   n, mode == 0 ? "cma" : "staged", med, n / med / 1e3);
            fflush(stdout);
        }
    }
    atomic_store(&c->quit, 1);
    waitpid(pid, NULL, 0);
    free(dst);
    free(t);
    return rc;
}
