/* comm: the communicator interface every backend implements (tcp, nccl).
 * docs/design.md §12.1 "comm/". comm_factory.h builds a rank's communicator from its spec.
 *
 * Decision: a struct of function pointers over backend-private state, so workloads and
 * DDP strategies are written once. Every operation takes element counts and a dtype,
 * has the communicator's timeout and observes its abort flag: a dead or stopped peer is
 * an error naming the peer and the operation, never a hang. Buffers are the caller's,
 * may have any alignment, and are validated here (comm.c) before a backend sees them.
 *
 * In place (as NCCL defines it): allreduce, broadcast and sendrecv with send == recv,
 * reduce_scatter with recv == send + rank * count elements, all_gather with
 * send == recv + rank * count elements. Any other overlap of send and recv is refused.
 *
 * Two ways to run an operation:
 * - synchronous (comm_allreduce, ...): returns when the operation is complete;
 * - asynchronous (comm_start, comm_iallreduce, ...): queues the operation on the
 *   communicator's own communication thread (started on first use) and returns a
 *   handle at once; the thread runs queued operations one after the other, in the order
 *   they were queued, while the caller computes. comm_wait returns the result.
 *   Once the thread exists, synchronous calls queue behind the pending operations and
 *   wait for their turn, so every rank sees one order of operations.
 * Every rank must issue the same collective operations in the same order (as with NCCL
 * and MPI); point-to-point messages between two ranks arrive in the order sent. */
#ifndef DDPB_COMM_H
#define DDPB_COMM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum comm_dtype { COMM_FLOAT32 = 0, COMM_FLOAT16, COMM_BFLOAT16, COMM_INT32, COMM_INT64 };
/* avg: sum, then one division by the world size rounded once to the dtype; integer
 * dtypes divide toward zero. */
enum comm_redop { COMM_SUM = 0, COMM_AVG, COMM_MIN, COMM_MAX };

enum comm_op {
    COMM_OP_ALLREDUCE = 0,
    COMM_OP_REDUCE_SCATTER,
    COMM_OP_ALL_GATHER,
    COMM_OP_BROADCAST,
    COMM_OP_SEND,
    COMM_OP_RECV,
    COMM_OP_SENDRECV,
    COMM_OP_BARRIER,
};

/* How a backend moves the data; AUTO lets it choose by message size. A backend refuses
 * an algorithm the operation does not have (ERR_INVALID). */
enum comm_algorithm {
    COMM_ALG_AUTO = 0,
    COMM_ALG_RING,   /* pipelined ring (allreduce, reduce_scatter, all_gather, broadcast) */
    COMM_ALG_RD,     /* recursive doubling (allreduce, barrier) */
    COMM_ALG_DIRECT, /* every rank to every rank in one step (reduce_scatter,
                        all_gather, point-to-point) */
    COMM_ALG_TREE,   /* binomial tree (broadcast) */
    COMM_ALG_HD,     /* recursive halving then doubling, Rabenseifner's (allreduce) */
    COMM_ALG_HIER,   /* hierarchical (allreduce): reduce inside each node to its leader,
                        allreduce between node leaders, broadcast inside each node (tcp.h
                        comm_tcp_set_nodes says where the node map comes from) */
};

/* One operation and its arguments: what the synchronous calls build and the
 * asynchronous queue holds. Buffers are borrowed until the operation completes.
 *   allreduce       send, recv: count elements each
 *   reduce_scatter  send: count * world_size elements, recv: count
 *   all_gather      send: count elements, recv: count * world_size
 *   broadcast       count elements from root's send into every rank's recv (send is
 *                   read on the root only; peer = root)
 *   send            count elements of send to rank peer
 *   recv            count elements from rank peer into recv
 *   sendrecv        count elements of send to rank peer while receiving count2
 *                   elements from rank peer2 into recv (no deadlock whatever the
 *                   message sizes; peer == peer2 == self copies locally)
 *   barrier         nothing */
struct comm_args {
    enum comm_op op;
    const void *send;
    void *recv;
    size_t count;
    enum comm_dtype dtype;
    enum comm_redop redop; /* reducing operations only */
    int peer, peer2;
    size_t count2;
    enum comm_algorithm algorithm; /* AUTO: the communicator's configured choice */
    /* nccl: a cudaEvent_t (borrowed) after which the inputs are final on the compute
     * stream; the operation waits for it instead of for everything queued on compute when
     * it starts (a DDP bucket need not wait for the rest of backward). NULL: that fence.
     * Other backends ignore it. */
    void *ready_event;
};

/* The arguments of a collective as the blocking (comm_sync.c) and the async (comm_async.c)
 * entry points pass them: one mapping for both. peer is broadcast's root. */
static inline struct comm_args comm_args_collective(enum comm_op op, const void *send,
                                                    void *recv, size_t count,
                                                    enum comm_dtype dtype,
                                                    enum comm_redop redop, int peer)
{
    return (struct comm_args){.op = op,
                              .send = send,
                              .recv = recv,
                              .count = count,
                              .dtype = dtype,
                              .redop = redop,
                              .peer = peer};
}

struct comm;
struct comm_async;

/* Backend entry points, one per operation, all with the arguments as struct comm_args
 * (a->op is the entry's operation). comm.c validates the arguments before calling them
 * and calls them on the communication thread when one exists. NULL: the backend does
 * not have that operation (ERR_INVALID). */
typedef int (*comm_op_fn)(struct comm *c, const struct comm_args *a, struct err *e);

struct comm_ops {
    comm_op_fn allreduce;      /* recv[i] = redop over ranks of send[i], on every rank */
    comm_op_fn reduce_scatter; /* recv[i] = redop over ranks of send[rank * count + i] */
    comm_op_fn all_gather;     /* recv[r * count + i] = send[i] of rank r */
    comm_op_fn broadcast;      /* recv[i] = send[i] of the root */
    comm_op_fn send, recv, sendrecv;
    comm_op_fn barrier; /* returns once every rank has entered it */
    /* Frees the backend state and c itself (comm_destroy has stopped the thread). */
    void (*destroy)(struct comm *c);
};

struct wait_note;

struct comm {
    const struct comm_ops *ops;
    const char *backend; /* "tcp", "nccl" */
    /* How the ranks exchange bytes: "shm" (every rank on one node, shared memory),
     * "shm+tcp" (shared memory inside nodes, TCP between them), "tcp"; "" for backends
     * with their own transports (nccl, mpi). Set when the communicator is made. */
    char transport[8];
    int rank, world_size;
    int timeout_ms;                /* an operation fails when nothing moved for this long */
    const atomic_bool *abort_flag; /* borrowed; may be NULL */
    atomic_bool stop;              /* raised by comm_destroy: ends an operation in flight */
    /* Written by the operation that runs; read them only when no operation is in
     * flight (after comm_wait of the last one). */
    char last_algorithm[16]; /* what the last operation used, for reports */
    uint64_t bytes_sent;     /* payload bytes this rank sent, cumulative */
    uint64_t buffer_bytes;   /* host memory the backend holds for its operations (tcp:
                                receive segment and algorithm scratch), for the memory
                                report; it only grows */
    /* What the last failed operation blames, for the worker's error event: the
     * operation ("allreduce", "barrier") and the peer rank (-1 when no single peer). */
    char error_op[24];
    int error_peer;
    struct comm_async *async; /* owned; NULL until the first asynchronous operation */
    /* Borrowed, may be NULL: where the code that blocks in an operation of this comm
     * notes what it waits in, for the heartbeat (worker/comm/wait_note.h). comm itself
     * never touches it. */
    struct wait_note *note;
    /* Borrowed, may be NULL: a backend whose operation cannot be interrupted (MPI's
     * blocking collectives, worker/comm/mpi.c) calls it from a watchdog thread when one
     * overruns timeout_ms, with error_op filled and e the failure; it reports the failure
     * and ends the process (it must not return). NULL: the backend prints the failure
     * and exits with status 1. */
    void (*on_stuck)(struct comm *c, const struct err *e, void *ctx);
    void *on_stuck_ctx;
};

size_t comm_dtype_size(enum comm_dtype t);
const char *comm_dtype_name(enum comm_dtype t);
int comm_dtype_parse(const char *s, enum comm_dtype *out);
const char *comm_redop_name(enum comm_redop op);
int comm_redop_parse(const char *s, enum comm_redop *out);
/* "allreduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "sendrecv",
 * "barrier" */
const char *comm_op_name(enum comm_op op);
int comm_op_parse(const char *s, enum comm_op *out);
/* "auto", "ring", "rd", "direct", "tree", "hd", "hier" */
const char *comm_algorithm_name(enum comm_algorithm a);
int comm_algorithm_parse(const char *s, enum comm_algorithm *out);

/* The ring-model bytes a rank sends for an operation of `bytes` (payload per rank as the
 * collective workload counts it) among world_size ranks: what comm->bytes_sent
 * accumulates for backends that cannot count the bytes they put on the wire (nccl, mpi). */
size_t comm_wire_bytes(enum comm_op op, size_t bytes, int world_size);

/* A backend's failure of operation op blaming peer (-1: none): sets c->error_op and
 * c->error_peer, breaks the communicator (*broken; the first failure is kept in *first,
 * which every later operation returns) and fills e with "op: message". Returns -1. For
 * backends (tcp, mpi), never callers. */
int comm_vfail(struct comm *c, bool *broken, struct err *first, struct err *e,
               enum err_code code, const char *op, int peer, const char *fmt, va_list ap);

/* Checks a against c (counts, buffers and their overlap, peers, enums) without running
 * it: ERR_INVALID naming what is wrong. */
int comm_args_check(const struct comm *c, const struct comm_args *a, struct err *e);

/* ---- synchronous ---------------------------------------------------------------- */

/* Runs a to completion. */
int comm_run(struct comm *c, const struct comm_args *a, struct err *e);
int comm_allreduce(struct comm *c, const void *send, void *recv, size_t count,
                   enum comm_dtype dtype, enum comm_redop op, struct err *e);
int comm_reduce_scatter(struct comm *c, const void *send, void *recv, size_t recv_count,
                        enum comm_dtype dtype, enum comm_redop op, struct err *e);
int comm_all_gather(struct comm *c, const void *send, void *recv, size_t send_count,
                    enum comm_dtype dtype, struct err *e);
int comm_broadcast(struct comm *c, const void *send, void *recv, size_t count,
                   enum comm_dtype dtype, int root, struct err *e);
/* Returns once the data is handed to the transport: a send larger than the socket
 * buffers waits for the peer's matching comm_recv (use comm_sendrecv for exchanges). */
int comm_send(struct comm *c, const void *buf, size_t count, enum comm_dtype dtype, int peer,
              struct err *e);
/* ERR_PROTOCOL when the peer sent a different number of bytes. */
int comm_recv(struct comm *c, void *buf, size_t count, enum comm_dtype dtype, int peer,
              struct err *e);
int comm_sendrecv(struct comm *c, const void *send, size_t send_count, int dst, void *recv,
                  size_t recv_count, int src, enum comm_dtype dtype, struct err *e);
int comm_barrier(struct comm *c, struct err *e);

/* ---- asynchronous ----------------------------------------------------------------- */

/* A queued operation. Owned by the caller from comm_start until comm_wait, which frees
 * it; every handle must be waited for exactly once, before comm_destroy (which frees
 * handles never waited for; waiting on them afterwards is a use after free). */
struct comm_handle;

/* Validates a, starts the communication thread if needed and queues a. Returns an owned
 * handle, or NULL with e set (invalid arguments, out of memory, thread start failed). */
struct comm_handle *comm_start(struct comm *c, const struct comm_args *a, struct err *e);
struct comm_handle *comm_iallreduce(struct comm *c, const void *send, void *recv, size_t count,
                                    enum comm_dtype dtype, enum comm_redop op, struct err *e);
struct comm_handle *comm_ireduce_scatter(struct comm *c, const void *send, void *recv,
                                         size_t recv_count, enum comm_dtype dtype,
                                         enum comm_redop op, struct err *e);
struct comm_handle *comm_iall_gather(struct comm *c, const void *send, void *recv,
                                     size_t send_count, enum comm_dtype dtype, struct err *e);
struct comm_handle *comm_ibroadcast(struct comm *c, const void *send, void *recv, size_t count,
                                    enum comm_dtype dtype, int root, struct err *e);
/* True once h's operation has finished (successfully or not). Never blocks. */
bool comm_test(const struct comm_handle *h);
/* Blocks until h's operation has finished and returns its result (0, or -1 with e set
 * to the operation's error), then frees h. The wait is bounded: an operation fails once
 * no data has moved for the communicator's timeout (or on the abort flag), and once one
 * has failed, every operation queued behind it fails at once. */
int comm_wait(struct comm_handle *h, struct err *e);
/* When the communication thread ran an operation (clock_mono_ns, the clock every thread
 * shares) and the algorithm it used, so the caller can place the operation on its own
 * timeline beside its computation (ddp.h "Timing") and in a run's trace. */
struct comm_op_times {
    int64_t run_ns;     /* the thread took it off the queue */
    int64_t end_ns;     /* the thread finished it */
    char algorithm[16]; /* comm->last_algorithm as the operation left it */
};
/* comm_wait that also fills *t (NULL: not wanted). */
int comm_wait_timed(struct comm_handle *h, struct comm_op_times *t, struct err *e);

/* Stops the communication thread (an operation in flight ends with ERR_ABORTED, queued
 * ones are failed), frees handles never waited for, then the backend. NULL is a no-op. */
void comm_destroy(struct comm *c);

#endif
