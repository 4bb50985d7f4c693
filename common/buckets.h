/* buckets: how tensors are grouped for one collective each, written once for the worker's
 * strategies (worker/ddp/ddp.c) and the performance model that simulates them
 * (daemon/perf.c), so a prediction exchanges exactly the buckets a run would.
 *
 * Tensors are in the order backward finishes them (reverse registration order); a group
 * is the tensor range [bounds[i], bounds[i+1]). bounds has room for nt + 1 entries. */
#ifndef DDPB_BUCKETS_H
#define DDPB_BUCKETS_H

#include <stdint.h>

/* PyTorch's compute_bucket_assignment_by_size: a tensor joins the open bucket, which
 * closes once it holds at least its cap (first_cap for the first). Returns the count. */
int buckets_by_size(const int64_t *bytes, int nt, int64_t first_cap, int64_t cap, int *bounds);
/* Horovod's fusion from readiness: tensors ready in the same cycle (ready_ns / cycle_ns;
 * cycle_ns 0: at the same instant; ready_ns NULL: all in one) share a buffer up to fusion
 * bytes, and a tensor larger than that goes alone. Returns the count. */
int buckets_by_cycle(const int64_t *bytes, const int64_t *ready_ns, int nt, int64_t cycle_ns,
                     int64_t fusion, int *bounds);
/* DeepSpeed ZeRO's reduce buckets (stage_1_and_2.py, reduce_independent_p_g_buckets_and_
 * remove_grads): a tensor that would take the open bucket past cap closes it first, and a
 * tensor larger than cap goes alone. Returns the count. */
int buckets_by_limit(const int64_t *bytes, int nt, int64_t cap, int *bounds);

#endif
