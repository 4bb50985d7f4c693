/* workload_collective: the collective benchmark (spec workload "collective"), the
 * equivalent of nccl-tests: for each repeat and message size, warmup iterations, then
 * timed iterations each measured on its own, combined across ranks (an iteration takes
 * as long as its slowest rank), checked for correctness, and reported by rank 0
 * (docs/design.md §13).
 *
 * Decisions:
 * - The benchmark is a struct (collective_bench) holding buffers allocated once at the
 *   largest size and reused for every size, because re-faulting freshly mapped pages
 *   costs more than the transfer.
 * - Model-shaped replay: collective_bench_run_sizes takes an explicit list of sizes, so a
 *   model hands over its gradient bucket sizes (in bytes, in launch order) and each is
 *   measured as a point; the spec field "sizes" is the same list from a user, and
 *   "buckets_of": a model names the buckets ddp/ would launch for it (ddp_bucket_sizes).
 * - Every rank's iteration times travel through the store (key
 *   "coll/r<repeat>/s<index>/times/<rank>", raw little-endian doubles) and rank 0 reads
 *   them after a comm barrier, so it never waits on the store for a rank that died.
 * - Exact checks (struct collective_data): inputs are small integers, a function of
 *   (seed, rank, index), chosen per dtype and world size so that every partial result is
 *   exactly representable: sums use values in 1..q with q = min(17, M / world_size)
 *   (M = 256 for bfloat16, 2048 for float16, 2^24 for float32), so any summation order
 *   gives the same result; min and max use values distinct across ranks (a rotation of
 *   0..world_size-1 on top of a per-index base), so the result comes from one known rank.
 *   Every rank therefore knows every expected element in O(1).
 * - Inputs are chosen so that an operation that does not write its output is caught:
 *   sum inputs are positive, so a sum over two or more ranks exceeds each rank's own
 *   input; the other inputs are a rotation by rank (value ((h(i) + rank) mod q) + 1), so
 *   ranks 0..q-1 hold different values at every index, and an average, minimum, maximum,
 *   broadcast or sendrecv result differs from what at least one rank held (this is what
 *   an in-place run, whose output overlays its input, is checked against; an in-place
 *   reduce_scatter with avg, min or max, whose ranks each hold only their own block, is
 *   caught only where that rank's input is not the result). When
 *   world_size exceeds M (bfloat16 beyond 256 ranks) no positive sum stays exact and the
 *   inputs are all 0.
 * - The check poisons and verifies timed iterations, not an extra run: before the first
 *   and before the last timed iteration the output is filled with 0xa5 bytes (no
 *   expected value has that pattern: every expected value is a small integer, and 0xa5a5..
 *   is a non-integer float or an int far outside the range) and the inputs are written
 *   again; after each the output is counted against the expected one. In place the
 *   whole buffer is poisoned and then the inputs written over their part, so what the
 *   output holds before the run is poison or an input the operation must change (above).
 *   The first iteration catches an operation that skips the early runs, the last one an
 *   operation that stops writing after them (or whose in-place data drifted); the
 *   poisoning and the check lie outside each iteration's timer.
 * - World size 1: out of place every operation must still copy its input into the
 *   poisoned output, so the check catches a backend that skips it. In place every
 *   operation on one rank is the identity on its buffer (a sum over one rank is the
 *   input, the root broadcasts to itself, the one block gathered is the block), so there
 *   it is trivially exact: a backend that does nothing is correct there.
 * - What differs from one operation to the next (name, buffer sizes, message size as
 *   nccl-tests counts it, busbw factor, which input each output element equals, peers) is
 *   a row of worker/coll_ops.h, keyed by enum comm_op; this file asks the row. */
#ifndef DDPB_WORKLOAD_COLLECTIVE_H
#define DDPB_WORKLOAD_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/report.h"
#include "common/spec.h"
#include "worker/coll_ops.h"
#include "worker/comm/comm.h"
#include "worker/observe.h"
#include "worker/store/store_client.h"

#define COLLECTIVE_MAX_SIZES 4096 /* more sizes than this in one spec is an error */

/* ---- statistics (pure) ------------------------------------------------------------ */

struct collective_stats {
    double min_us, median_us, p95_us, mean_us, max_us;
};

/* Sorts times_s (seconds) in place and fills out in microseconds. n >= 1. */
void collective_stats_compute(double *times_s, size_t n, struct collective_stats *out);
/* acc[i] = max(acc[i], v[i]). */
void collective_max_into(double *acc, const double *v, size_t n);

/* ---- inputs and expected results (pure) --------------------------------------------- */

struct collective_data {
    int64_t seed;
    enum comm_op op;
    const struct coll_op *opi; /* op's row (static); NULL: no benchmark op */
    enum comm_dtype dtype;
    enum comm_redop redop;
    int world;
    bool minmax; /* inputs distinct across ranks (min, max) */
    int lo, q;   /* others: values ((h(i) + rank) mod q) + lo, lo 1 (0: too many ranks) */
    int64_t sum_by_residue[17]; /* the sum over ranks for each h(i) mod q */
    int levels; /* min/max: values base(i) * world + ((t(i) + rank) mod world) - off */
    int64_t off;
};

/* Chooses the value ranges for (op, dtype, redop, world) as the header comment says. */
void collective_data_init(struct collective_data *d, int64_t seed, enum comm_op op,
                          enum comm_dtype dtype, enum comm_redop redop, int world);
/* Element i of rank's input buffer (reduce_scatter: i indexes the whole send buffer). */
int64_t collective_input(const struct collective_data *d, int rank, size_t i);
/* buf[k] = input(rank, k) for k < n, stored as the dtype. */
void collective_fill(const struct collective_data *d, void *buf, size_t n, int rank);
/* Expected output element i of rank for an op on count elements per block (i below the
 * op's recv elements, coll_ops.h); 0 for an op without a row. */
double collective_expected(const struct collective_data *d, int rank, size_t count, size_t i);
/* Output elements of rank that differ from the expected ones. */
int64_t collective_count_wrong(const struct collective_data *d, const void *out, int rank,
                               size_t count);

/* ---- where the buffers live ----------------------------------------------------------- */

/* Memory hooks for buffers that are not host memory (device "cuda":
 * worker/worker_gpu.h fills them with cudaMalloc, cudaMemcpy and the NCCL backend's CUDA-event
 * timing). With hooks the benchmark allocates send and recv through alloc, forms inputs
 * in a host copy (the same collective_fill) and uploads them, downloads outputs into the
 * host copy and checks them there, so the exact check is the same code on every device.
 * All hooks are borrowed and must outlive the benchmark. */
struct collective_mem {
    void *ctx;
    /* Owned memory of bytes (freed with free); NULL with e set. */
    void *(*alloc)(void *ctx, size_t bytes, struct err *e);
    void (*free)(void *ctx, void *p);
    int (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes, struct err *e);
    int (*download)(void *ctx, void *host_dst, const void *src, size_t bytes, struct err *e);
    /* Seconds the last completed operation of c took as the device timed it; < 0: not
     * known (the host clock is used). NULL: always the host clock. */
    double (*last_op_seconds)(void *ctx, struct comm *c);
};

/* ---- the benchmark ------------------------------------------------------------------ */

struct collective_bench {
    const struct spec_collective *cfg; /* borrowed */
    struct comm *comm;                 /* borrowed */
    struct store_client *store;        /* borrowed */
    struct report_writer *w;           /* borrowed; used on rank 0 */
    int64_t seed;
    enum comm_op op;
    const struct coll_op *opi; /* op's row (static) */
    enum comm_dtype dtype;
    enum comm_redop redop;
    enum comm_algorithm algorithm;
    size_t esize;
    uint8_t *send, *recv; /* owned, cap_bytes each (send NULL when in place); from
                             mem->alloc when mem is set */
    size_t cap_bytes;
    const struct collective_mem *mem; /* borrowed; NULL: host buffers */
    uint8_t *host;           /* owned, cap_bytes: inputs and outputs on the host (mem) */
    double *times, *slowest; /* owned, cfg->iters each */
    uint8_t *wire;           /* owned, cfg->iters * 8: encoded times */
    char algorithm_used[16]; /* what the last measured point ran */
    int64_t points_done, points_total;
    /* the run's trace: the first trace_steps timed iterations of every point, each rank
     * (only with a report writer) */
    int trace_steps;
    int64_t *trace_ns;  /* owned: [t0, t1] of each traced iteration, sent after the point */
    struct observe obs; /* owned when have_obs */
    bool have_obs;
};

/* Allocates buffers for messages up to max_bytes. spec, comm, store and w are borrowed
 * and must outlive b. points_total is what progress events count up to. ERR_INVALID
 * naming the spec field for an op, dtype, redop or algorithm the benchmark cannot run. */
int collective_bench_init(struct collective_bench *b, const struct spec *s, struct comm *c,
                          struct store_client *store, struct report_writer *w,
                          int64_t max_bytes, int64_t points_total, struct err *e);
/* Measures every size of sizes (bytes, as the header comment counts them) as repeat
 * number `repeat`, each as one point. Every rank calls it with the same arguments. */
int collective_bench_run_sizes(struct collective_bench *b, int repeat, const int64_t *sizes,
                               size_t n, struct err *e);
void collective_bench_cleanup(struct collective_bench *b);
/* collective_bench_init with buffers through mem (NULL: host memory, as
 * collective_bench_init). */
int collective_bench_init_mem(struct collective_bench *b, const struct spec *s, struct comm *c,
                              struct store_client *store, struct report_writer *w,
                              int64_t max_bytes, int64_t points_total,
                              const struct collective_mem *mem, struct err *e);

/* The whole workload of a collective spec: every repeat over spec_collective_sizes. */
int workload_collective_run(const struct spec *s, struct comm *c, struct store_client *store,
                            struct report_writer *w, struct err *e);
/* The same with the buffers through mem (NULL: host memory). */
int workload_collective_run_mem(const struct spec *s, struct comm *c,
                                struct store_client *store, struct report_writer *w,
                                const struct collective_mem *mem, struct err *e);

#endif
