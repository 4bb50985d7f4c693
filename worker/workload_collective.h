/* workload_collective: the collective benchmark (spec workload "collective"): for each
 * repeat and message size, warmup iterations, then timed iterations each measured on its
 * own, combined across ranks (an iteration takes as long as its slowest rank), checked
 * for correctness, and reported by rank 0 (DESIGN.md §4 "Metrics").
 *
 * Decision: the benchmark is a struct (collective_bench) holding buffers allocated once
 * at the largest size and reused for every size, because re-faulting freshly mapped
 * pages costs more than the transfer; collective_bench_run_sizes takes an explicit list
 * of sizes so a model can later hand over its gradient bucket sizes. Every rank's
 * iteration times travel through the store (key "coll/r<repeat>/s<index>/times/<rank>",
 * raw little-endian doubles) and rank 0 reads them after a comm barrier, so it never
 * waits on the store for a rank that died. Inputs are small integers (-8..8) so every
 * float32 sum is exact and the expected result is known on every rank. */
#ifndef DDPB_WORKLOAD_COLLECTIVE_H
#define DDPB_WORKLOAD_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "err.h"
#include "report.h"
#include "spec.h"
#include "store_client.h"

#define COLLECTIVE_MAX_SIZES 4096 /* more sizes than this in one spec is an error */

enum collective_op { COLLECTIVE_ALLREDUCE = 0 };

/* ---- statistics (pure) ------------------------------------------------------------ */

struct collective_stats {
    double min_us, median_us, p95_us, mean_us, max_us;
};

/* Sorts times_s (seconds) in place and fills out in microseconds. n >= 1. */
void collective_stats_compute(double *times_s, size_t n, struct collective_stats *out);
/* Median of sorted values (mean of the middle two for even n). */
double collective_median_sorted(const double *sorted, size_t n);
/* Nearest-rank percentile of sorted values: the ceil(pct/100 * n)-th smallest. */
double collective_percentile_sorted(const double *sorted, size_t n, double pct);
/* acc[i] = max(acc[i], v[i]). */
void collective_max_into(double *acc, const double *v, size_t n);
/* nccl-tests bus bandwidth factor: allreduce 2(n-1)/n, reduce_scatter and all_gather
 * (n-1)/n, broadcast and reduce 1; 0 for an unknown op. */
double collective_busbw_factor(const char *op, int world_size);
int collective_op_parse(const char *s, enum collective_op *out);

/* ---- inputs and expected results (pure) --------------------------------------------- */

/* Element i of rank's input: a small integer in -8..8 from (seed, rank, i). */
int collective_input(int64_t seed, int rank, size_t i);

/* Expected allreduce-sum results: a table over the 17 residues the inputs are built
 * from, so expected(i) costs O(1) whatever the world size. */
struct collective_expect {
    int64_t seed;
    float by_residue[17];
};
void collective_expect_init(struct collective_expect *x, int64_t seed, int world_size);
float collective_expected(const struct collective_expect *x, size_t i);

/* Fills buf[0..count) with this rank's inputs; ERR_INVALID for dtypes not done yet. */
int collective_fill_inputs(void *buf, enum comm_dtype dtype, size_t count, int64_t seed,
                           int rank, struct err *e);
/* Elements of an allreduce-sum result that differ from the expected values. */
int64_t collective_count_wrong(const void *buf, enum comm_dtype dtype, size_t count,
                               const struct collective_expect *x);

/* ---- the benchmark ------------------------------------------------------------------ */

struct collective_bench {
    const struct spec_collective *cfg; /* borrowed */
    struct comm *comm;                 /* borrowed */
    struct store_client *store;        /* borrowed */
    struct report_writer *w;           /* borrowed; used on rank 0 */
    int64_t seed;
    enum collective_op op;
    enum comm_dtype dtype;
    enum comm_redop redop;
    size_t esize;
    uint8_t *send, *recv; /* owned, cap_bytes each (send NULL when in place) */
    size_t cap_bytes;
    double *times, *slowest; /* owned, cfg->iters each */
    uint8_t *wire;           /* owned, cfg->iters * 8: encoded times */
    int64_t points_done, points_total;
};

/* Allocates buffers for messages up to max_bytes. spec, comm, store and w are borrowed
 * and must outlive b. points_total is what progress events count up to. */
int collective_bench_init(struct collective_bench *b, const struct spec *s, struct comm *c,
                          struct store_client *store, struct report_writer *w,
                          int64_t max_bytes, int64_t points_total, struct err *e);
/* Measures every size of sizes (bytes per rank) as repeat number `repeat`. Every rank
 * calls it with the same arguments. */
int collective_bench_run_sizes(struct collective_bench *b, int repeat, const int64_t *sizes,
                               size_t n, struct err *e);
void collective_bench_cleanup(struct collective_bench *b);

/* The whole workload of a collective spec: every repeat over spec_collective_sizes. */
int workload_collective_run(const struct spec *s, struct comm *c, struct store_client *store,
                            struct report_writer *w, struct err *e);

#endif
