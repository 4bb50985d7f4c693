/* coll_ops: the rows of coll_ops.h, one small block per operation: its busbw factor, the
 * source of each output element and its peers, then the table that names them. */
#include "worker/coll_ops.h"

#include <string.h>

/* ---- allreduce: recv[i] = redop over ranks of send[i] -------------------------------- */

static double coll_allreduce_busbw(double n)
{
    return 2.0 * (n - 1) / n;
}

static struct coll_source coll_allreduce_source(int rank, int world, size_t count, size_t i)
{
    (void)rank, (void)world, (void)count;
    return (struct coll_source){.reduced = true, .index = i};
}

/* ---- reduce_scatter: recv[i] = redop over ranks of send[rank * count + i] ------------ */

static double coll_gather_busbw(double n)
{
    return (n - 1) / n; /* reduce_scatter and all_gather move (n-1)/n of the buffer */
}

static struct coll_source coll_reduce_scatter_source(int rank, int world, size_t count,
                                                     size_t i)
{
    (void)world;
    return (struct coll_source){.reduced = true, .index = (size_t)rank * count + i};
}

/* ---- all_gather: recv[r * count + i] = send[i] of rank r ---------------------------- */

static struct coll_source coll_all_gather_source(int rank, int world, size_t count, size_t i)
{
    (void)rank, (void)world;
    size_t block = count ? count : 1;
    return (struct coll_source){.rank = (int)(i / block), .index = i % block};
}

/* ---- broadcast: recv[i] = send[i] of the root, rank 0 -------------------------------- */

static double coll_one_busbw(double n)
{
    (void)n;
    return 1.0; /* broadcast and sendrecv: every byte crosses one link */
}

static struct coll_source coll_broadcast_source(int rank, int world, size_t count, size_t i)
{
    (void)rank, (void)world, (void)count;
    return (struct coll_source){.rank = 0, .index = i};
}

static void coll_broadcast_peers(struct comm_args *a, int rank, int world)
{
    (void)rank, (void)world;
    a->peer = 0; /* the root */
}

/* ---- sendrecv: send to rank + 1 while receiving from rank - 1 ------------------------ */

static struct coll_source coll_sendrecv_source(int rank, int world, size_t count, size_t i)
{
    (void)count;
    return (struct coll_source){.rank = (rank - 1 + world) % world, .index = i};
}

static void coll_sendrecv_peers(struct comm_args *a, int rank, int world)
{
    a->peer = (rank + 1) % world;
    a->peer2 = (rank - 1 + world) % world;
    a->count2 = a->count;
}

/* ---- the table ----------------------------------------------------------------------- */

static const struct coll_op coll_ops[] = {
    [COMM_OP_ALLREDUCE] = {COMM_OP_ALLREDUCE, "allreduce", true, COLL_EXTENT_BLOCK,
                           COLL_EXTENT_BLOCK, coll_allreduce_busbw, coll_allreduce_source,
                           NULL},
    [COMM_OP_REDUCE_SCATTER] = {COMM_OP_REDUCE_SCATTER, "reduce_scatter", true,
                                COLL_EXTENT_WORLD, COLL_EXTENT_BLOCK, coll_gather_busbw,
                                coll_reduce_scatter_source, NULL},
    [COMM_OP_ALL_GATHER] = {COMM_OP_ALL_GATHER, "all_gather", false, COLL_EXTENT_BLOCK,
                            COLL_EXTENT_WORLD, coll_gather_busbw, coll_all_gather_source, NULL},
    [COMM_OP_BROADCAST] = {COMM_OP_BROADCAST, "broadcast", false, COLL_EXTENT_BLOCK,
                           COLL_EXTENT_BLOCK, coll_one_busbw, coll_broadcast_source,
                           coll_broadcast_peers},
    [COMM_OP_SENDRECV] = {COMM_OP_SENDRECV, "sendrecv", false, COLL_EXTENT_BLOCK,
                          COLL_EXTENT_BLOCK, coll_one_busbw, coll_sendrecv_source,
                          coll_sendrecv_peers},
    /* send, recv and barrier have no row (name NULL): not benchmark operations */
};

#define COLL_NOPS (sizeof coll_ops / sizeof coll_ops[0])

const struct coll_op *coll_op_get(enum comm_op op)
{
    size_t i = (size_t)op;
    return i < COLL_NOPS && coll_ops[i].name ? &coll_ops[i] : NULL;
}

const struct coll_op *coll_op_find(const char *name)
{
    for (size_t i = 0; name && i < COLL_NOPS; i++)
        if (coll_ops[i].name && strcmp(coll_ops[i].name, name) == 0)
            return &coll_ops[i];
    return NULL;
}

double coll_op_busbw_factor(enum comm_op op, int world_size)
{
    const struct coll_op *o = coll_op_get(op);
    return o && world_size >= 1 ? o->busbw_factor((double)world_size) : 0;
}

size_t coll_op_elems(enum coll_extent x, size_t count, int world_size)
{
    return x == COLL_EXTENT_WORLD ? count * (size_t)world_size : count;
}

size_t coll_op_message_blocks(const struct coll_op *o, int world_size)
{
    bool whole = o->send == COLL_EXTENT_WORLD || o->recv == COLL_EXTENT_WORLD;
    return whole ? (size_t)world_size : 1;
}

int coll_op_inplace_block(const struct coll_op *o)
{
    if (o->send == o->recv)
        return 0;
    return o->send == COLL_EXTENT_WORLD ? +1 : -1;
}
