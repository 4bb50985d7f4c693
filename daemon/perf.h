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
 * - A framework engine's rows simulate its framework's own exchange (perf_exchange:
 *   torch's DDP buckets, ZeroRedundancyOptimizer's broadcasts, Horovod's fusion per cycle,
 *   DeepSpeed ZeRO's after-backward buckets), not the worker's: docs/model.md section 6.
 * - A CPU backend's exchange is CPU work (copies, reductions, the kernel's TCP): when a
 *   rank has no core beside its compute threads for its communication thread, nothing
 *   overlaps and every exchange is exposed (no_spare_core).
 * - Across nodes two links are known, one node's and the one between nodes (a fit each):
 *   a placement measured is taken as measured; else the hierarchical allreduce is costed
 *   part by part as the worker runs it (perf_hier_time), and a flat algorithm at its
 *   slowest link's pace (docs/model.md "Across nodes").
 * - Every prediction states the world sizes and node counts its fits cover
 *   (perf_range_*): outside them it is an extrapolation, and says so.
 *
 * - Co-location (docs/model.md "Co-location and contention"): where a calibration of the
 *   node and model is stored, compute at k ranks on the node is slowed by the measured
 *   slowdown of each phase, interpolated linearly between the measured k; beyond the
 *   largest measured k and the node's cores, ranks time-slice: (k / cores) times the
 *   slowdown at cores, plus a context switch (the measured cost) every scheduling quantum.
 *   An oversubscribed ring also waits for its peer: each message in sequence of an
 *   exchange's first operation finds its peer descheduled with probability 1 - cores / k
 *   and then waits half a quantum; after it the ranks are in step.
 *
 * Ownership: nothing here allocates for the caller beyond what each function says. */
#ifndef DDPB_PERF_H
#define DDPB_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/vocab.h"

#define PERF_MODEL_VERSION 2
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
    /* Across nodes (nodes > 1, docs/model.md "Across nodes"): the fits of one node (the
     * same fits[], used[]; nodes 1) beside the link's (this net: nodes, profile). NULL:
     * the fits of the run's own placement alone, as measured. */
    const struct perf_net *intra; /* borrowed */
    int per_node;                 /* ranks on each node */
    int64_t hier_from;            /* an allreduce of at least this many bytes runs
                                     hierarchically when per_node > 1; -1: never */
};
/* Time of op over bytes at world ranks, from the best matching fit (same world size, else
 * the nearest one, moved through perf_cost_of). Negative when no fit matches. */
double perf_net_time(struct perf_net *net, const char *op, int world, double bytes);

/* ---- co-location: a calibration's slowdowns ----------------------------------------- */

/* The compute phases a calibration measures, in this order. */
enum perf_phase { PERF_FORWARD, PERF_BACKWARD, PERF_OPTIMIZER, PERF_NPHASES };

/* One measured k: the median phase at k ranks over the median at one rank. */
struct perf_calib_point {
    int k;
    double slow[PERF_NPHASES];
};

/* A calibration of one node and model (daemon/calib.c stores them). */
struct perf_calib {
    const struct perf_calib_point *pts; /* borrowed, ascending k, pts[0].k == 1 */
    size_t n;
    int cores;        /* the node's CPUs */
    double switch_s;  /* one context switch, measured */
    double quantum_s; /* the scheduler's time slice */
};

/* What k ranks on a node cost each other, from calibration c. */
struct perf_contention {
    double slow[PERF_NPHASES]; /* each phase's slowdown, >= 1 in practice */
    double msg_wait_s;         /* an oversubscribed ring's wait per message in sequence of the
                          first operation */
};

/* The contention at k ranks (see top); -1 when c has no point. A slowdown measured below
 * 1 reads 1: co-location takes from a rank and gives it nothing, so a ratio below 1 is the
 * one-rank reference's noise (resnet18's k = 2 forward read x0.83 on one calibration and
 * x1.15 on the one before, minutes apart). */
int perf_contention_at(const struct perf_calib *c, int k, struct perf_contention *out);

/* The probability that j of n ranks are busy when each is, independently, with
 * probability u (binomial). */
double perf_busy_weight(int n, double u, int j);

/* The contention a busy rank meets when each of the node's k ranks computes only a share
 * `busy` of the step, independently of the others (a pipeline's stages idle in its
 * bubble): the slowdown at 1 + j ranks, weighted by the chance perf_busy_weight(k - 1,
 * busy, j) that j of the others compute with it. busy 1: perf_contention_at(k). The
 * oversubscribed ring's msg_wait_s is k's. -1 when c has no point. */
int perf_contention_busy(const struct perf_calib *c, int k, double busy,
                         struct perf_contention *out);

/* The link behind the fit net would pick for op at world ranks over bytes; -1 when none
 * matches (the fit is marked used). */
int perf_net_link(struct perf_net *net, const char *op, int world, double bytes,
                  struct perf_link *l);

/* The hierarchical allreduce across nodes (worker/comm/tcp_algo.c, hier): a chain reduce
 * of the whole buffer to each node's leader over link intra among per_node ranks, the
 * leaders' allreduce (inter_s, costed over the link between nodes), a broadcast from the
 * leader inside the node over intra again. Each leader carries the whole buffer. */
double perf_hier_time(const struct perf_link *intra, int per_node, double inter_s,
                      double bytes);
/* A flat algorithm across nodes moved to another world size runs at the pace of its
 * slowest link: the larger of its time over the link between nodes and over the link
 * inside one (negative: not known, then the other alone). */
double perf_slowest_time(double inter_s, double intra_s);

/* ---- the range a prediction covers (docs/model.md "Extrapolation") ------------------ */

/* The world sizes and node counts of the fits a prediction used, and its base's. */
struct perf_range {
    int world_lo, world_hi; /* 0: no fit used */
    int nodes_lo, nodes_hi;
    int base_world;
};
/* The range of fits[i] for used[i] (used NULL: every fit). */
void perf_range_of(const struct perf_fit *fits, size_t n, const bool *used, int base_world,
                   struct perf_range *r);
/* Whether world ranks on nodes nodes lies outside what r's fits measured: a world size
 * or node count beyond (or below) them (nodes 0: not known, not checked). No fit used (a
 * described link) or one rank: false. */
bool perf_range_extrapolates(const struct perf_range *r, int world, int nodes);
/* r as a sentence fragment, "fits world 2-4, 1 node; base 1 rank", into out (n bytes). */
void perf_range_text(const struct perf_range *r, char *out, size_t n);
/* Keeps of fits[0..*n) those measured at world <= max_world (and so on as many nodes at
 * most), in order; *n updated. max_world <= 0 keeps all. */
void perf_fits_restrict(struct perf_fit *fits, size_t *n, int max_world);

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

/* Whose exchange runs: ddpbench's worker (the strategy's, as common/buckets.h makes it),
 * or a framework engine's own bucketing and schedule (docs/model.md "The framework
 * engines"). */
enum perf_exchange {
    PERF_EXCHANGE_WORKER = 0,  /* ddpbench's C worker: the strategy decides */
    PERF_EXCHANGE_TORCH_DDP,   /* DistributedDataParallel (pytorch ddp, lightning) */
    PERF_EXCHANGE_TORCH_ZERO1, /* DDP, then ZeroRedundancyOptimizer's parameter broadcasts */
    PERF_EXCHANGE_HOROVOD,     /* DistributedOptimizer: fused per cycle, run at cycle's end */
    PERF_EXCHANGE_DEEPSPEED,   /* ZeRO 1/2, overlap_comm off: allreduces after backward, then
                                 the updated partitions' all_gather */
};

struct perf_setup {
    enum perf_strategy strategy;
    enum perf_exchange exchange; /* 0: the worker's */
    int world;
    int64_t bucket_bytes, fusion_bytes; /* spec bucket_mb, fusion_mb in bytes */
    double cycle_ms;
    double wire;          /* bytes on the wire per fp32 byte: 1, or 0.5 compressed */
    double compute_scale; /* compute's slowdown at this placement (CPUs shared), >= 1 */
    bool no_spare_core;   /* a CPU backend whose communication thread has no core of its
                             own: it runs on the compute's, so nothing overlaps */
    /* a calibration's slowdowns (has_contention): they replace compute_scale for forward,
     * backward and the optimizer; msg_wait_s is added per message in sequence */
    bool has_contention;
    struct perf_contention contention;
};

/* Compute's slowdown of phase p at setup s's placement: the calibration's (as measured),
 * else the core share's (compute_scale, at least 1). One rule for every simulation, data
 * parallel or pipeline. */
double perf_phase_scale(const struct perf_setup *s, enum perf_phase p);

struct perf_step {
    double step_s;
    double data_s, forward_s, backward_s, optimizer_s;
    double comm_s;     /* union of the operations' flights, from launch to completion */
    double exposed_s;  /* the part the step waited for */
    double busy_s;     /* sum of the operations' own times: the channel's busy time */
    double window_s;   /* the backward they could hide behind (0: none, run after it) */
    double sync_s;     /* waiting for the slowest rank: E[max of N steps] - mean step */
    double overlap;    /* 1 - exposed / comm; NaN at one rank */
    double contention; /* forward + backward + optimizer over the one-rank run's: the
                          compute slowdown applied (1: none) */
    int ops;
};

/* The expected maximum of n draws from the sorted samples x[0..m) minus their mean: what
 * a rank waits, per step, for the slowest of n ranks whose steps vary like x. Samples
 * beyond Tukey's outer fence (q3 + 3 IQR) are left out: a one-off stall is no spread. */
double perf_expected_wait(const double *x, size_t m, int n);

/* The time a tensor ready at ready_ns is launched by Horovod's background loop at cycle
 * cycle_ns: the end of the cycle it became ready in (cycle 0: at once). */
int64_t perf_horovod_launch_ns(int64_t ready_ns, int64_t cycle_ns);

/* Simulates one optimizer step. net gives each operation's time. -1 when the base has no
 * readiness or net has no fit for an operation the strategy needs. */
int perf_simulate(const struct perf_base *b, const struct perf_setup *s, struct perf_net *net,
                  struct perf_step *out);

#endif
