/* comm_sync: the synchronous calls of comm.h (comm_run, comm_allreduce ... comm_barrier)
 * and comm_destroy: each runs an operation directly or, once a communication thread
 * exists, queues it behind the pending ones and waits.
 *
 * Decision: this is the one file that dispatches between comm.c (the core: names, checks,
 * comm_execute) and comm_async.c (the thread), so those two never call each other: the
 * thread uses the core, and the core knows nothing of the thread. */
#include <stddef.h>

#include "worker/comm/comm.h"
#include "worker/comm/comm_async.h"
#include "worker/comm/comm_internal.h"

int comm_run(struct comm *c, const struct comm_args *a, struct err *e)
{
    if (comm_args_check(c, a, e) < 0)
        return -1;
    if (!c->async)
        return comm_execute(c, a, e);
    struct comm_handle *h = comm_start(c, a, e);
    return h ? comm_wait(h, e) : -1;
}

int comm_allreduce(struct comm *c, const void *send, void *recv, size_t count,
                   enum comm_dtype dtype, enum comm_redop op, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_ALLREDUCE, send, recv, count, dtype, op,
                                              0);
    return comm_run(c, &a, e);
}

int comm_reduce_scatter(struct comm *c, const void *send, void *recv, size_t recv_count,
                        enum comm_dtype dtype, enum comm_redop op, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_REDUCE_SCATTER, send, recv, recv_count,
                                              dtype, op, 0);
    return comm_run(c, &a, e);
}

int comm_all_gather(struct comm *c, const void *send, void *recv, size_t send_count,
                    enum comm_dtype dtype, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_ALL_GATHER, send, recv, send_count, dtype,
                                              COMM_SUM, 0);
    return comm_run(c, &a, e);
}

int comm_broadcast(struct comm *c, const void *send, void *recv, size_t count,
                   enum comm_dtype dtype, int root, struct err *e)
{
    struct comm_args a = comm_args_collective(COMM_OP_BROADCAST, send, recv, count, dtype,
                                              COMM_SUM, root);
    return comm_run(c, &a, e);
}

int comm_send(struct comm *c, const void *buf, size_t count, enum comm_dtype dtype, int peer,
              struct err *e)
{
    struct comm_args a = {
        .op = COMM_OP_SEND, .send = buf, .count = count, .dtype = dtype, .peer = peer};
    return comm_run(c, &a, e);
}

int comm_recv(struct comm *c, void *buf, size_t count, enum comm_dtype dtype, int peer,
              struct err *e)
{
    struct comm_args a = {
        .op = COMM_OP_RECV, .recv = buf, .count = count, .dtype = dtype, .peer = peer};
    return comm_run(c, &a, e);
}

int comm_sendrecv(struct comm *c, const void *send, size_t send_count, int dst, void *recv,
                  size_t recv_count, int src, enum comm_dtype dtype, struct err *e)
{
    struct comm_args a = {.op = COMM_OP_SENDRECV,
                          .send = send,
                          .recv = recv,
                          .count = send_count,
                          .count2 = recv_count,
                          .dtype = dtype,
                          .peer = dst,
                          .peer2 = src};
    return comm_run(c, &a, e);
}

int comm_barrier(struct comm *c, struct err *e)
{
    struct comm_args a = {.op = COMM_OP_BARRIER};
    return comm_run(c, &a, e);
}

void comm_destroy(struct comm *c)
{
    if (!c)
        return;
    comm_async_shutdown(c);
    c->ops->destroy(c);
}
