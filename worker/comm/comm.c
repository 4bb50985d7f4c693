/* comm: the backend-independent core of comm.h: names of dtypes, operators, operations
 * and algorithms; argument checks; comm_execute, which runs a checked operation with the
 * backend's entry point. The synchronous calls are in comm_sync.c, the asynchronous ones
 * in comm_async.c: both use this core, and it uses neither.
 *
 * Decision: one table per enum, indexed by the enum value, so a name, a size and the
 * parser can never disagree; the names are the ones specs and reports use. Arguments
 * are checked once here (sizes that overflow, NULL buffers, overlaps other than NCCL's
 * in-place layouts, peers out of range), so backends only see operations they can run
 * and a bad call is an error naming the argument, not memory corruption on 4 ranks. */
#include "worker/comm/comm.h"

#include <stdio.h>
#include <string.h>

#include "worker/comm/comm_internal.h"

struct comm_dtype_info {
    const char *name;
    size_t size;
};

static const struct comm_dtype_info comm_dtypes[] = {
    [COMM_FLOAT32] = {"float32", 4},   [COMM_FLOAT16] = {"float16", 2},
    [COMM_BFLOAT16] = {"bfloat16", 2}, [COMM_INT32] = {"int32", 4},
    [COMM_INT64] = {"int64", 8},
};

static const char *const comm_redops[] = {
    [COMM_SUM] = "sum",
    [COMM_AVG] = "avg",
    [COMM_MIN] = "min",
    [COMM_MAX] = "max",
};

static const char *const comm_ops_names[] = {
    [COMM_OP_ALLREDUCE] = "allreduce",
    [COMM_OP_REDUCE_SCATTER] = "reduce_scatter",
    [COMM_OP_ALL_GATHER] = "all_gather",
    [COMM_OP_BROADCAST] = "broadcast",
    [COMM_OP_SEND] = "send",
    [COMM_OP_RECV] = "recv",
    [COMM_OP_SENDRECV] = "sendrecv",
    [COMM_OP_BARRIER] = "barrier",
};

static const char *const comm_algorithms[] = {
    [COMM_ALG_AUTO] = "auto",     [COMM_ALG_RING] = "ring", [COMM_ALG_RD] = "rd",
    [COMM_ALG_DIRECT] = "direct", [COMM_ALG_TREE] = "tree", [COMM_ALG_HD] = "hd",
    [COMM_ALG_HIER] = "hier",
};

#define COMM_COUNT(a) (sizeof(a) / sizeof((a)[0]))

size_t comm_dtype_size(enum comm_dtype t)
{
    return (size_t)t < COMM_COUNT(comm_dtypes) ? comm_dtypes[t].size : 0;
}

const char *comm_dtype_name(enum comm_dtype t)
{
    return (size_t)t < COMM_COUNT(comm_dtypes) ? comm_dtypes[t].name : "unknown";
}

int comm_dtype_parse(const char *s, enum comm_dtype *out)
{
    for (size_t i = 0; i < COMM_COUNT(comm_dtypes); i++) {
        if (strcmp(s, comm_dtypes[i].name) == 0) {
            *out = (enum comm_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* Index of s in names[0..n), or -1. */
static int comm_name_index(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

const char *comm_redop_name(enum comm_redop op)
{
    return (size_t)op < COMM_COUNT(comm_redops) ? comm_redops[op] : "unknown";
}

int comm_redop_parse(const char *s, enum comm_redop *out)
{
    int i = comm_name_index(comm_redops, COMM_COUNT(comm_redops), s);
    if (i >= 0)
        *out = (enum comm_redop)i;
    return i < 0 ? -1 : 0;
}

const char *comm_op_name(enum comm_op op)
{
    return (size_t)op < COMM_COUNT(comm_ops_names) ? comm_ops_names[op] : "unknown";
}

int comm_op_parse(const char *s, enum comm_op *out)
{
    int i = comm_name_index(comm_ops_names, COMM_COUNT(comm_ops_names), s);
    if (i >= 0)
        *out = (enum comm_op)i;
    return i < 0 ? -1 : 0;
}

const char *comm_algorithm_name(enum comm_algorithm a)
{
    return (size_t)a < COMM_COUNT(comm_algorithms) ? comm_algorithms[a] : "unknown";
}

int comm_algorithm_parse(const char *s, enum comm_algorithm *out)
{
    int i = comm_name_index(comm_algorithms, COMM_COUNT(comm_algorithms), s);
    if (i >= 0)
        *out = (enum comm_algorithm)i;
    return i < 0 ? -1 : 0;
}

/* ---- argument checks ------------------------------------------------------------- */

/* The byte extents an operation touches. */
struct comm_extent {
    size_t send_bytes, recv_bytes;
    size_t inplace_off; /* where send may sit inside recv (or recv inside send) */
    bool recv_in_send;  /* reduce_scatter: recv lies inside send */
};

static bool comm_mul_ok(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return false;
    *out = a * b;
    return true;
}

static int comm_extent_of(const struct comm *c, const struct comm_args *a,
                          struct comm_extent *x, struct err *e)
{
    const char *name = comm_op_name(a->op);
    size_t es = comm_dtype_size(a->dtype), bytes, world = (size_t)c->world_size, big;
    memset(x, 0, sizeof *x);
    if (!comm_mul_ok(a->count, es, &bytes) || !comm_mul_ok(bytes, world, &big))
        return err_set(e, ERR_INVALID, "count", "%s: count %zu is too large", name, a->count);
    size_t rank_off = (size_t)c->rank * bytes;
    switch (a->op) {
    case COMM_OP_ALLREDUCE:
    case COMM_OP_BROADCAST:
    case COMM_OP_SEND:
    case COMM_OP_RECV:
        x->send_bytes = a->op == COMM_OP_RECV ? 0 : bytes;
        x->recv_bytes = a->op == COMM_OP_SEND ? 0 : bytes;
        break;
    case COMM_OP_REDUCE_SCATTER:
        x->send_bytes = big;
        x->recv_bytes = bytes;
        x->inplace_off = rank_off;
        x->recv_in_send = true;
        break;
    case COMM_OP_ALL_GATHER:
        x->send_bytes = bytes;
        x->recv_bytes = big;
        x->inplace_off = rank_off;
        break;
    case COMM_OP_SENDRECV:
        x->send_bytes = bytes;
        if (!comm_mul_ok(a->count2, es, &x->recv_bytes))
            return err_set(e, ERR_INVALID, "count", "%s: count %zu is too large", name,
                           a->count2);
        break;
    case COMM_OP_BARRIER: break;
    }
    return 0;
}

static bool comm_overlap(const void *p, size_t plen, const void *q, size_t qlen)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return plen && qlen && a < b + qlen && b < a + plen;
}

/* The buffers exist where bytes move and overlap only in the in-place layout. */
static int comm_check_buffers(const struct comm *c, const struct comm_args *a,
                              const struct comm_extent *x, struct err *e)
{
    const char *name = comm_op_name(a->op);
    bool root_sends = a->op != COMM_OP_BROADCAST || a->peer == c->rank;
    size_t send_bytes = root_sends ? x->send_bytes : 0;
    if (send_bytes && !a->send)
        return err_set(e, ERR_INVALID, "send", "%s: NULL send buffer for %zu bytes", name,
                       send_bytes);
    if (x->recv_bytes && !a->recv)
        return err_set(e, ERR_INVALID, "recv", "%s: NULL recv buffer for %zu bytes", name,
                       x->recv_bytes);
    if (!comm_overlap(a->send, send_bytes, a->recv, x->recv_bytes))
        return 0;
    const uint8_t *s = a->send, *r = a->recv;
    bool inplace = false;
    if (a->op == COMM_OP_ALLREDUCE || a->op == COMM_OP_BROADCAST || a->op == COMM_OP_SENDRECV)
        inplace = s == r;
    else if (a->op == COMM_OP_REDUCE_SCATTER)
        inplace = r == s + x->inplace_off;
    else if (a->op == COMM_OP_ALL_GATHER)
        inplace = s == r + x->inplace_off;
    if (inplace)
        return 0;
    return err_set(e, ERR_INVALID, "recv",
                   "%s: send and recv buffers overlap in a way that is not the in-place "
                   "layout",
                   name);
}

static int comm_check_peers(const struct comm *c, const struct comm_args *a, struct err *e)
{
    const char *name = comm_op_name(a->op);
    int n = c->world_size;
    bool two = a->op == COMM_OP_SENDRECV;
    bool one = two || a->op == COMM_OP_SEND || a->op == COMM_OP_RECV ||
               a->op == COMM_OP_BROADCAST;
    if (one && (a->peer < 0 || a->peer >= n))
        return err_set(e, ERR_INVALID, "peer", "%s: rank %d is not in 0..%d", name, a->peer,
                       n - 1);
    if (two && (a->peer2 < 0 || a->peer2 >= n))
        return err_set(e, ERR_INVALID, "peer", "%s: rank %d is not in 0..%d", name, a->peer2,
                       n - 1);
    if ((a->op == COMM_OP_SEND || a->op == COMM_OP_RECV) && a->peer == c->rank)
        return err_set(e, ERR_INVALID, "peer", "%s: rank %d cannot %s itself", name, c->rank,
                       name);
    if (two && (a->peer == c->rank) != (a->peer2 == c->rank))
        return err_set(e, ERR_INVALID, "peer",
                       "sendrecv: sending to itself needs receiving from itself");
    if (two && a->peer == c->rank && a->count != a->count2)
        return err_set(e, ERR_INVALID, "count",
                       "sendrecv: to itself, %zu elements sent but %zu received", a->count,
                       a->count2);
    return 0;
}

int comm_args_check(const struct comm *c, const struct comm_args *a, struct err *e)
{
    if ((size_t)a->op >= COMM_COUNT(comm_ops_names))
        return err_set(e, ERR_INVALID, "op", "comm: unknown operation %d", (int)a->op);
    const char *name = comm_op_name(a->op);
    if (a->op != COMM_OP_BARRIER && comm_dtype_size(a->dtype) == 0)
        return err_set(e, ERR_INVALID, "dtype", "%s: unknown dtype %d", name, (int)a->dtype);
    if ((a->op == COMM_OP_ALLREDUCE || a->op == COMM_OP_REDUCE_SCATTER) &&
        (size_t)a->redop >= COMM_COUNT(comm_redops))
        return err_set(e, ERR_INVALID, "redop", "%s: unknown reduction %d", name,
                       (int)a->redop);
    if ((size_t)a->algorithm >= COMM_COUNT(comm_algorithms))
        return err_set(e, ERR_INVALID, "algorithm", "%s: unknown algorithm %d", name,
                       (int)a->algorithm);
    struct comm_extent x;
    if (comm_check_peers(c, a, e) < 0 || comm_extent_of(c, a, &x, e) < 0)
        return -1;
    return comm_check_buffers(c, a, &x, e);
}

/* ---- running --------------------------------------------------------------------- */

static comm_op_fn comm_entry(const struct comm_ops *ops, enum comm_op op)
{
    switch (op) {
    case COMM_OP_ALLREDUCE: return ops->allreduce;
    case COMM_OP_REDUCE_SCATTER: return ops->reduce_scatter;
    case COMM_OP_ALL_GATHER: return ops->all_gather;
    case COMM_OP_BROADCAST: return ops->broadcast;
    case COMM_OP_SEND: return ops->send;
    case COMM_OP_RECV: return ops->recv;
    case COMM_OP_SENDRECV: return ops->sendrecv;
    case COMM_OP_BARRIER: return ops->barrier;
    }
    return NULL;
}

int comm_execute(struct comm *c, const struct comm_args *a, struct err *e)
{
    comm_op_fn fn = comm_entry(c->ops, a->op);
    if (!fn)
        return err_set(e, ERR_INVALID, "op", "%s: not available in the %s backend",
                       comm_op_name(a->op), c->backend);
    return fn(c, a, e);
}

size_t comm_wire_bytes(enum comm_op op, size_t bytes, int world_size)
{
    size_t n = (size_t)(world_size > 0 ? world_size : 1);
    switch (op) {
    case COMM_OP_ALLREDUCE: return 2 * (n - 1) * (bytes / n); /* reduce-scatter + gather */
    case COMM_OP_REDUCE_SCATTER:                              /* bytes: one rank's block */
    case COMM_OP_ALL_GATHER: return (n - 1) * bytes;
    case COMM_OP_BROADCAST: /* pipelined ring: each rank but the last forwards it */
    case COMM_OP_SEND:
    case COMM_OP_SENDRECV: return n > 1 ? bytes : 0;
    case COMM_OP_RECV:
    case COMM_OP_BARRIER: return 0;
    }
    return 0;
}

int comm_vfail(struct comm *c, bool *broken, struct err *first, struct err *e,
               enum err_code code, const char *op, int peer, const char *fmt, va_list ap)
{
    char msg[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    snprintf(c->error_op, sizeof c->error_op, "%s", op);
    c->error_peer = peer;
    if (!*broken) {
        *broken = true;
        err_set(first, code, NULL, "%s: %s", op, msg);
    }
    return err_set(e, code, NULL, "%s: %s", op, msg);
}
