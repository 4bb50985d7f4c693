/* comm: the communicator interface every backend implements (tcp now; nccl and mpi
 * later). DESIGN.md §4 "comm/".
 *
 * Decision: a struct of function pointers over backend-private state, so workloads and
 * DDP strategies are written once. Every operation takes element counts and a dtype,
 * has the communicator's timeout and observes its abort flag: a dead or stopped peer is
 * an error naming the peer and the operation, never a hang. Buffers are the caller's;
 * send == recv means in place. */
#ifndef DDPB_COMM_H
#define DDPB_COMM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum comm_dtype { COMM_FLOAT32 = 0, COMM_FLOAT16, COMM_BFLOAT16, COMM_INT32, COMM_INT64 };
enum comm_redop { COMM_SUM = 0, COMM_AVG, COMM_MIN, COMM_MAX };

struct comm;

struct comm_ops {
    /* recv[i] = redop over ranks of send[i], i < count, on every rank. */
    int (*allreduce)(struct comm *c, const void *send, void *recv, size_t count,
                     enum comm_dtype dtype, enum comm_redop op, struct err *e);
    int (*barrier)(struct comm *c, struct err *e);
    /* Frees the backend state and c itself. */
    void (*destroy)(struct comm *c);
};

struct comm {
    const struct comm_ops *ops;
    const char *backend;      /* "tcp" */
    int rank, world_size;
    int timeout_ms;           /* per operation */
    const atomic_bool *abort_flag; /* borrowed; may be NULL */
    char last_algorithm[16];  /* what the last operation used, for reports */
    uint64_t bytes_sent;      /* payload bytes this rank sent, cumulative */
    /* What the last failed operation blames, for the worker's error event: the
     * operation ("allreduce", "barrier") and the peer rank (-1 when no single peer). */
    char error_op[24];
    int error_peer;
};

size_t comm_dtype_size(enum comm_dtype t);
const char *comm_dtype_name(enum comm_dtype t);
int comm_dtype_parse(const char *s, enum comm_dtype *out);
const char *comm_redop_name(enum comm_redop op);
int comm_redop_parse(const char *s, enum comm_redop *out);

static inline int comm_allreduce(struct comm *c, const void *send, void *recv, size_t count,
                                 enum comm_dtype dtype, enum comm_redop op, struct err *e)
{
    return c->ops->allreduce(c, send, recv, count, dtype, op, e);
}

static inline int comm_barrier(struct comm *c, struct err *e) { return c->ops->barrier(c, e); }

static inline void comm_destroy(struct comm *c)
{
    if (c)
        c->ops->destroy(c);
}

#endif
