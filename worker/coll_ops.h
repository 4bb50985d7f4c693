/* coll_ops: what each collective operation is to the benchmark, one row per operation
 * keyed by enum comm_op, in the spirit of nccl-tests' one small file per collective:
 * the name a spec uses, whether it reduces, how large its send and receive buffers are for
 * a message, its bus-bandwidth factor, which input element each output element must equal,
 * and the peers it talks to. worker/workload_collective.c asks this table and never
 * compares operation names or switches on the operation itself.
 *
 * Decisions:
 * - Sizes as nccl-tests counts them: the message of reduce_scatter and all_gather is the
 *   whole buffer (world_size blocks, COLL_EXTENT_WORLD on one side), of the others one
 *   rank's buffer; count is always the elements of one block.
 * - busbw factors are nccl-tests': allreduce 2(n-1)/n, reduce_scatter and all_gather
 *   (n-1)/n, broadcast and sendrecv 1 (docs/design.md §13).
 * - The expected output is described, not computed: a row's source says whether element
 *   i is the reduction of input element j over ranks or input element j of one rank; the
 *   benchmark's value model (struct collective_data) turns that into a number, so the
 *   exact check is one piece of code for every operation.
 * - In place as NCCL defines it (worker/comm/comm.h): the one-block side is this rank's
 *   block of the world-sized side, derived from the extents (coll_op_inplace_block).
 * - Send, recv and barrier have no row: they are not benchmark operations.
 *
 * Ownership: rows are static; nothing is allocated. */
#ifndef DDPB_WORKER_COLL_OPS_H
#define DDPB_WORKER_COLL_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/comm/comm.h"

/* How many blocks of count elements a buffer holds. */
enum coll_extent {
    COLL_EXTENT_BLOCK = 0, /* one: count elements */
    COLL_EXTENT_WORLD,     /* world_size: count * world_size elements */
};

/* Where output element i of a rank comes from. */
struct coll_source {
    bool reduced; /* the reduction over ranks of input element index */
    int rank;     /* when not reduced: input element index of this rank */
    size_t index;
};

struct coll_op {
    enum comm_op op;
    const char *name; /* the spec's "op" */
    bool reduces;     /* takes a redop (the inputs must reduce exactly) */
    enum coll_extent send, recv;
    double (*busbw_factor)(double n);
    /* output element i of rank, for count elements per block */
    struct coll_source (*source)(int rank, int world_size, size_t count, size_t i);
    /* sets the peers of args for rank (NULL: the operation has none) */
    void (*peers)(struct comm_args *a, int rank, int world_size);
};

/* The row of op, or NULL for an operation the benchmark does not measure (send, recv,
 * barrier). */
const struct coll_op *coll_op_get(enum comm_op op);
/* The row named name, or NULL. */
const struct coll_op *coll_op_find(const char *name);
/* nccl-tests' bus bandwidth factor of op at world_size; 0 for an operation without a row
 * or world_size < 1. */
double coll_op_busbw_factor(enum comm_op op, int world_size);
/* Elements of a buffer of extent x. */
size_t coll_op_elems(enum coll_extent x, size_t count, int world_size);
/* Blocks in a message as nccl-tests counts its size: world_size when either side is the
 * whole buffer, else 1. */
size_t coll_op_message_blocks(const struct coll_op *o, int world_size);
/* In place: which side is this rank's block of the other (+1 recv, -1 send, 0 neither:
 * send and recv are the same buffer). */
int coll_op_inplace_block(const struct coll_op *o);

#endif
