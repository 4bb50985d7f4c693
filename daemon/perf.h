/* perf: the performance model (issue 18), written down in docs/model.md: a network fit
 * per collective, and a simulation of each strategy's step from a one-rank run.
 *
 * Decisions:
 * - A collective's time is fitted as T(bytes) = alpha + beta * bytes by least squares on
 *   relative residuals (weights 1 / T^2): message sizes span four orders of magnitude,
 *   and plain least squares would fit the largest sizes and leave alpha to the noise of
 *   64 MiB transfers. R^2 is the weighted one; the worst residual is relative.
 * - To move a fit to another world size (what-if to 1024 ranks) it is read through the
 *   algorithm's cost: messages on the critical path L(N), bytes over one link per byte of
 *   buffer B(N), bytes reduced per byte R(N) (perf_cost_of). alpha / L(N0) is the latency
 *   of one message and beta / (B + R share) the time per byte; for one algorithm R/B does
 *   not depend on N, so the per-byte part scales exactly whatever the split.
 * - The per-byte reduction term gamma (the arithmetic, which a faster link does not
 *   shorten) is only stated where the data separates it: an all_gather fit (no reduction)
 *   beside a reduce_scatter or allreduce fit of the same backend, algorithm, world size,
 *   nodes and network. Elsewhere it is NaN, and a described link keeps no arithmetic.
 * - The step simulation takes a one-rank run's phases and when each gradient became final
 *   in its backward (report "grads"), groups tensors exactly as the worker would
 *   (common/buckets.h) and schedules each group's collective on one channel: an operation
 *   starts when its bucket is ready and the previous one finished. What runs after
 *   backward (naive's exchanges, ZeRO's reduce-scatter at stage 1 and all-gather) is
 *   exposed whole. This file holds no I/O: every input comes in a struct.
 * - Ranks wait for each other at every exchange: a step lasts as long as the slowest
 *   rank's compute, so the simulation adds the expected maximum of N draws of the one-rank
 *   run's step times above their mean (order statistics of the measured distribution:
 *   no distribution is assumed). It grows with N as the measured tail says.
 * - A CPU backend's exchange is CPU work (copies, reductions, the kernel's TCP): when a
 *   rank has no core beside its compute threads for its communication thread, nothing
 *   overlaps and every exchange is exposed (no_spare_core).
 *
 * Ownership: nothing here allocates for the caller beyond what each function says. */
#ifndef DDPB_PERF_H
#define DDPB_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/vocab.h"

#define PERF_MODEL_VERSION 1
#define PERF_MAX_WORLD 1024

/* ---- the network fit -------------------------------------------------------------- */

struct perf_sample {
    double bytes, seconds;
};

/* One fit of one (backend, device, op, algorithm, world size, nodes, network profile). */
struct perf_fit {
    int64_t id;            /* the stored row (db fits), 0 while not stored */
    int64_t experiment_id; /* the collective experiment it was fitted from */
    char backend[16], device[8], op[24], algorithm[16], network_profile[64];
    int world_size, nodes;
    double alpha_s, beta_s; /* T = alpha + beta * bytes */
    double gamma_s;         /* the part of beta that is reduction arithmetic; NaN: unknown */
    double r2, worst_resid; /* weighted R^2; largest |relative residual| */
    int points;
    int64_t min_bytes, max_bytes;
};

/* Fits alpha and beta (gamma NaN) from n samples. -1 when fewer than two distinct sizes
 * (nothing to fit a line through). alpha is never below 0: when the free fit's is, the
 * line is refitted through the origin. */
int perf_fit_line(const struct perf_sample *s, size_t n, struct perf_fit *f);

/* What an algorithm costs at N ranks, per byte of the op's buffer (the whole buffer, as
 * the collective benchmark counts it: nccl-tests' size). */
struct perf_cost {
    double lat; /* messages in sequence on the critical path */
    double bw;  /* bytes over one rank's link per byte */
    double red; /* bytes reduced per byte */
};
/* ERR-free: an unknown op or algorithm reads as the ring's. world 1 costs nothing. */
void perf_cost_of(const char *op, const char *algorithm, int world, struct perf_cost *c);

/* Separates gamma in reducing fits from the all_gather fits beside them (see top). */
void perf_fits_separate(struct perf_fit *fits, size_t n);

/* A link: one message's latency, seconds per byte over it, and seconds per byte reduced. */
struct perf_link {
    double latency_s, s_per_byte, gamma_s_per_byte;
};
/* The link behind fit f (per message and per byte). */
void perf_link_of(const struct perf_fit *f, struct perf_link *l);
/* The time of op with algorithm over link l at world ranks for bytes. */
double perf_link_time(const struct perf_link *l, const char *op, const char *algorithm,
                      int world, double bytes);

/* The fits a prediction may use, and how it picks one. */
struct perf_net {
    const struct perf_fit *fits; /* borrowed */
    size_t n;
    const char *backend, *device, *network_profile; /* borrowed; profile "" = host */
    const char *algorithm; /* forced by the spec, or "auto" (the fastest fit that covers the
                              size, as the backend's own choice by size would be) */
    int nodes;
    const struct perf_link *link; /* non-NULL: a described link instead of the fits */
    /* filled by perf_net_time: the ids of the fits used (as a bit set over fits[]) */
    bool *used; /* caller-sized n, or NULL */
};
/* Time of op over bytes at world ranks, from the best matching fit (same world size, else
 * the nearest one, moved through perf_cost_of). Negative when no fit matches. */
double perf_net_time(struct perf_net *net, const char *op, int world, double bytes);

/* ---- the step simulation ------------------------------------------------------------ */

/* PERF_NAIVE, PERF_DDP, ...: common/vocab.h's strategies, in its order; the simulation
 * reads their attributes (overlap, sharding, bucketing) from its rows. */
#define PERF_STRATEGY_ENUM(id, name) PERF_##id,
enum perf_strategy { VOCAB_STRATEGIES(PERF_STRATEGY_ENUM) PERF_NSTRATEGIES };
int perf_strategy_parse(const char *s); /* -1 when unknown */

/* What the one-rank run measured (seconds per optimizer step, means over its steps). */
struct perf_base {
    double data_s, forward_s, backward_s, optimizer_s;
    double local_s;          /* its exposed communication: copies, compression, hand-offs */
    int nt;                  /* parameter tensors, in the order backward finishes them */
    const int64_t *bytes;    /* borrowed, nt: fp32 bytes */
    const int64_t *ready_ns; /* borrowed, nt: final this long after the synchronising
                                micro-batch's backward began */
    int64_t backward_ns;     /* that backward's length */
    const double *step_s;    /* borrowed, nsteps, ascending: each measured step's time */
    size_t nsteps;
};

struct perf_setup {
    enum perf_strategy strategy;
    int world;
    int64_t bucket_bytes, fusion_bytes; /* spec bucket_mb, fusion_mb in bytes */
    double cycle_ms;
    double wire;          /* bytes on the wire per fp32 byte: 1, or 0.5 compressed */
    double compute_scale; /* compute's slowdown at this placement (CPUs shared), >= 1 */
    bool no_spare_core;   /* a CPU backend whose communication thread has no core of its
                             own: it runs on the compute's, so nothing overlaps */
};

struct perf_step {
    double step_s;
    double data_s, forward_s, backward_s, optimizer_s;
    double comm_s;    /* union of the operations' flights, from launch to completion */
    double exposed_s; /* the part the step waited for */
    double busy_s;    /* sum of the operations' own times: the channel's busy time */
    double window_s;  /* the backward they could hide behind (0: none, run after it) */
    double sync_s;    /* waiting for the slowest rank: E[max of N steps] - mean step */
    double overlap;   /* 1 - exposed / comm; NaN at one rank */
    int ops;
};

/* The expected maximum of n draws from the sorted samples x[0..m) minus their mean: what
 * a rank waits, per step, for the slowest of n ranks whose steps vary like x. Samples
 * beyond Tukey's outer fence (q3 + 3 IQR) are left out: a one-off stall is no spread. */
double perf_expected_wait(const double *x, size_t m, int n);

/* Simulates one optimizer step. net gives each operation's time. -1 when the base has no
 * readiness or net has no fit for an operation the strategy needs. */
int perf_simulate(const struct perf_base *b, const struct perf_setup *s, struct perf_net *net,
                  struct perf_step *out);

#endif
