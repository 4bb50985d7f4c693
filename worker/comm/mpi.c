/* mpi: the MPI backend of comm.h (comm_mpi.h says what and why), built once per MPI
 * implementation into a loadable module whose entry is COMM_MPI_ENTRY (worker/meson.build
 * sets it and COMM_MPI_NAME per implementation: common/vocab.h VOCAB_MPI's row).
 *
 * Decision: MPI's state is the process's, not a communicator's (MPI_Init once, the
 * half-precision types and operators, MPI_Finalize once), so it lives in one static
 * struct mpi_lib here, counted by the communicators alive; everything else is per
 * communicator. Only the entry symbol is visible outside the module (the module is
 * built with hidden visibility): the copies of comm.c, reduce.c and err.c linked into it
 * cannot meet the worker's or the other implementation's. */
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/comm/comm_mpi.h"
#include "worker/comm/reduce.h"
#include "worker/module/module.h"

#ifndef COMM_MPI_ENTRY
#error "COMM_MPI_ENTRY (the module's entry symbol) is set by worker/meson.build"
#endif

#define MPI_SPIN_NS 2000000 /* poll without sleeping this long: small ops' latency */
#define MPI_SLEEP_NS 20000  /* then 20 us between polls */
#define MPI_TAG_P2P 7       /* send/recv/sendrecv; collectives never match it */

extern char **environ;

/* The half-precision reductions MPI has no type for: one user operator per dtype and
 * redop, over a contiguous 2-byte type. */
enum { MPI_HALF_F16, MPI_HALF_BF16, MPI_NHALF };
enum { MPI_HOP_SUM, MPI_HOP_MIN, MPI_HOP_MAX, MPI_NHOP };

struct mpi_lib {
    /* Held around every MPI call: communicators of one process run their operations on
     * threads of their own at the same time (a pipeline's stage allreduce beside the
     * world's activations), which MPI_THREAD_SERIALIZED does not allow unlocked (measured:
     * MPICH over UCX asserts in ucp_worker_progress). Never held while waiting: a poll
     * takes it for one MPI_Testall. */
    pthread_mutex_t mu;
    int users;  /* communicators alive */
    bool ours;  /* this module called MPI_Init (and so finalises) */
    bool stuck; /* an operation never completed: MPI_Finalize would hang */
    int thread; /* the level MPI provided */
    MPI_Datatype half;
    MPI_Op hop[MPI_NHALF][MPI_NHOP];
    /* owned: the transport MPI_T reported, read in the first MPI_T session once MPI is up
     * and copied into every later env (mpi_env): MPICH 4.0 crashes in a second session's
     * MPI_T_cvar_get_num (a rank's third env, after training, did). Kept for the
     * process's life: freeing it at MPI_Finalize would let a later env open a session. */
    json_t *transport;
};

static struct mpi_lib mpi_lib = {.mu = PTHREAD_MUTEX_INITIALIZER, .half = MPI_DATATYPE_NULL};

/* The watchdog of the blocking collectives (comm_mpi.h says when they are used): a thread
 * of the process that wakes every MPI_WATCH_NS and, when the one operation armed has
 * overrun its deadline, ends the rank through its communicator's on_stuck. */
#define MPI_WATCH_NS 50000000
struct mpi_watch {
    pthread_mutex_t mu;
    bool started;
    struct comm_mpi *armed; /* NULL: no blocking call in flight */
    const char *op;
    int64_t deadline_ns;
};

static struct mpi_watch mpi_watch = {.mu = PTHREAD_MUTEX_INITIALIZER};

struct comm_mpi {
    struct comm base; /* first: comm.c sees struct comm */
    MPI_Comm mc;      /* owned */
    MPI_Request pending[2];
    int n_pending; /* requests of an operation that timed out, still in flight */
    void *scratch; /* owned: in-place reduce_scatter and sendrecv */
    size_t scratch_cap;
    bool broken;
    struct err first_err;
};

static const struct comm_ops mpi_ops;

/* ---- the half-precision operators ------------------------------------------------- */

static void mpi_half_apply(void *in, void *inout, const int *len, enum comm_dtype t,
                           enum comm_redop op)
{
    /* MPI: inout = in op inout */
    reduce_apply(inout, in, inout, (size_t)*len, t, op);
}

#define MPI_HALF_FN(fname, dtype, redop)                                                       \
    static void fname(void *in, void *inout, int *len, MPI_Datatype *dt)                       \
    {                                                                                          \
        (void)dt;                                                                              \
        mpi_half_apply(in, inout, len, dtype, redop);                                          \
    }
MPI_HALF_FN(mpi_f16_sum, COMM_FLOAT16, COMM_SUM)
MPI_HALF_FN(mpi_f16_min, COMM_FLOAT16, COMM_MIN)
MPI_HALF_FN(mpi_f16_max, COMM_FLOAT16, COMM_MAX)
MPI_HALF_FN(mpi_bf16_sum, COMM_BFLOAT16, COMM_SUM)
MPI_HALF_FN(mpi_bf16_min, COMM_BFLOAT16, COMM_MIN)
MPI_HALF_FN(mpi_bf16_max, COMM_BFLOAT16, COMM_MAX)

static MPI_User_function *const mpi_half_fns[MPI_NHALF][MPI_NHOP] = {
    [MPI_HALF_F16] = {mpi_f16_sum, mpi_f16_min, mpi_f16_max},
    [MPI_HALF_BF16] = {mpi_bf16_sum, mpi_bf16_min, mpi_bf16_max},
};

/* ---- mappings --------------------------------------------------------------------- */

static MPI_Datatype mpi_type(enum comm_dtype t)
{
    switch (t) {
    case COMM_FLOAT32: return MPI_FLOAT;
    case COMM_INT32: return MPI_INT32_T;
    case COMM_INT64: return MPI_INT64_T;
    case COMM_FLOAT16:
    case COMM_BFLOAT16: return mpi_lib.half;
    }
    return MPI_DATATYPE_NULL;
}

/* avg is a sum here; the division follows the operation (mpi_finish_avg) */
static MPI_Op mpi_op(enum comm_dtype t, enum comm_redop op)
{
    int h = op == COMM_MIN ? MPI_HOP_MIN : op == COMM_MAX ? MPI_HOP_MAX : MPI_HOP_SUM;
    if (t == COMM_FLOAT16)
        return mpi_lib.hop[MPI_HALF_F16][h];
    if (t == COMM_BFLOAT16)
        return mpi_lib.hop[MPI_HALF_BF16][h];
    return h == MPI_HOP_MIN ? MPI_MIN : h == MPI_HOP_MAX ? MPI_MAX : MPI_SUM;
}

static const char *mpi_thread_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "single";
    case MPI_THREAD_FUNNELED: return "funneled";
    case MPI_THREAD_SERIALIZED: return "serialized";
    case MPI_THREAD_MULTIPLE: return "multiple";
    }
    return "unknown";
}

/* ---- MPI's process state ---------------------------------------------------------- */

/* mpi_mca into MPI's environment: OpenMPI's MCA names as OMPI_MCA_<name>, MPICH's
 * control variables by their own name. The spec checked both patterns. */
static int mpi_params_apply(const struct comm_mpi_config *cfg, struct err *e)
{
    for (int i = 0; i < cfg->n_params; i++) {
        const struct comm_mpi_param *p = &cfg->params[i];
        char name[128];
        bool cvar = strncmp(p->key, "MPIR_CVAR_", 10) == 0;
        snprintf(name, sizeof name, "%s%s", cvar ? "" : "OMPI_MCA_", p->key);
        if (setenv(name, p->value, 1) < 0)
            return err_errno(e, "mpi: setting %s", name);
    }
    return 0;
}

static int mpi_lib_types(struct err *e)
{
    if (MPI_Type_contiguous(2, MPI_BYTE, &mpi_lib.half) != MPI_SUCCESS ||
        MPI_Type_commit(&mpi_lib.half) != MPI_SUCCESS)
        return err_set(e, ERR_INTERNAL, NULL, "mpi setup: cannot make the 2-byte type");
    for (int t = 0; t < MPI_NHALF; t++)
        for (int h = 0; h < MPI_NHOP; h++)
            if (MPI_Op_create(mpi_half_fns[t][h], 1, &mpi_lib.hop[t][h]) != MPI_SUCCESS)
                return err_set(e, ERR_INTERNAL, NULL,
                               "mpi setup: cannot make the half-precision operators");
    return 0;
}

/* MPI_Init_thread on the first communicator (or adopt an MPI the caller initialised). */
static int mpi_lib_acquire(const struct comm_mpi_config *cfg, struct err *e)
{
    int inited = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return err_set(e, ERR_INVALID, NULL,
                       "mpi setup: MPI was finalised already in this process (MPI can be "
                       "initialised once)");
    MPI_Initialized(&inited);
    if (!inited) {
        if (mpi_params_apply(cfg, e) < 0)
            return -1;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &mpi_lib.thread);
        if (rc != MPI_SUCCESS)
            return err_set(e, ERR_PEER, NULL, "mpi setup: MPI_Init_thread failed (%d)", rc);
        mpi_lib.ours = true;
    } else {
        MPI_Query_thread(&mpi_lib.thread);
    }
    if (mpi_lib.half == MPI_DATATYPE_NULL && mpi_lib_types(e) < 0)
        return -1;
    mpi_lib.users++;
    if (mpi_lib.thread < MPI_THREAD_SERIALIZED)
        return err_set(e, ERR_INVALID, "mpi",
                       "mpi setup: %s provides thread level %s; the communication thread "
                       "needs serialized or multiple",
                       COMM_MPI_NAME, mpi_thread_name(mpi_lib.thread));
    return 0;
}

static void mpi_lib_release(void)
{
    if (--mpi_lib.users > 0 || !mpi_lib.ours || mpi_lib.stuck)
        return;
    for (int t = 0; t < MPI_NHALF; t++)
        for (int h = 0; h < MPI_NHOP; h++)
            if (mpi_lib.hop[t][h] != MPI_OP_NULL)
                MPI_Op_free(&mpi_lib.hop[t][h]);
    if (mpi_lib.half != MPI_DATATYPE_NULL)
        MPI_Type_free(&mpi_lib.half);
    mpi_lib.half = MPI_DATATYPE_NULL;
    MPI_Finalize();
}

/* ---- failures and the wait -------------------------------------------------------- */

/* Breaks the communicator with the first error and fills e. Returns -1. */
static int mpi_fail(struct comm_mpi *m, struct err *e, enum err_code code, const char *op,
                    int peer, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int mpi_fail(struct comm_mpi *m, struct err *e, enum err_code code, const char *op,
                    int peer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = comm_vfail(&m->base, &m->broken, &m->first_err, e, code, op, peer, fmt, ap);
    va_end(ap);
    return rc;
}

static int mpi_fail_rc(struct comm_mpi *m, struct err *e, const char *op, int peer, int rc,
                       const char *call)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return mpi_fail(m, e, ERR_PEER, op, peer, "%s: %s", call, s);
}

static void mpi_pause(int64_t waited_ns)
{
    if (waited_ns < MPI_SPIN_NS) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, MPI_SLEEP_NS};
    nanosleep(&ts, NULL);
}

static bool mpi_flag(const atomic_bool *f)
{
    return f && atomic_load(f);
}

/* Polls the n requests to completion within the timeout. 1: done; 0: still in flight
 * (why in *why: ERR_TIMEOUT or ERR_ABORTED); -1: MPI reported an error (*rc). */
static int mpi_poll(struct comm_mpi *m, MPI_Request *reqs, int n, MPI_Status *st,
                    enum err_code *why, int *rc)
{
    int64_t t0 = clock_mono_ns(), limit = (int64_t)m->base.timeout_ms * 1000000;
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&mpi_lib.mu);
        *rc = MPI_Testall(n, reqs, &done, st);
        pthread_mutex_unlock(&mpi_lib.mu);
        if (*rc != MPI_SUCCESS)
            return -1;
        if (done)
            return 1;
        if (mpi_flag(m->base.abort_flag) || atomic_load(&m->base.stop)) {
            *why = ERR_ABORTED;
            return 0;
        }
        int64_t waited = clock_mono_ns() - t0;
        if (waited >= limit) {
            *why = ERR_TIMEOUT;
            return 0;
        }
        mpi_pause(waited);
    }
}

/* Waits for the operation's requests; a failure keeps them (they cannot be cancelled)
 * and breaks the communicator. */
static int mpi_wait(struct comm_mpi *m, const char *op, int peer, MPI_Request *reqs, int n,
                    MPI_Status *st, struct err *e)
{
    enum err_code why = ERR_TIMEOUT;
    int rc = MPI_SUCCESS;
    int r = mpi_poll(m, reqs, n, st, &why, &rc);
    if (r == 1)
        return 0;
    if (r < 0)
        return mpi_fail_rc(m, e, op, peer, rc, "MPI_Testall");
    memcpy(m->pending, reqs, (size_t)n * sizeof *reqs);
    m->n_pending = n;
    if (why == ERR_ABORTED)
        return mpi_fail(m, e, ERR_ABORTED, op, peer, "aborted while %s was in flight",
                        COMM_MPI_NAME);
    return mpi_fail(m, e, ERR_TIMEOUT, op, peer,
                    "not complete after %d ms (%s: a rank never entered the operation, or "
                    "died or stalled inside it)",
                    m->base.timeout_ms, COMM_MPI_NAME);
}

/* Scratch of at least bytes; NULL (e set) when out of memory. */
static void *mpi_scratch(struct comm_mpi *m, size_t bytes, const char *op, struct err *e)
{
    if (bytes <= m->scratch_cap)
        return m->scratch;
    void *p = realloc(m->scratch, bytes);
    if (!p) {
        err_set(e, ERR_NOMEM, NULL, "%s: out of memory for %zu bytes of scratch", op, bytes);
        return NULL;
    }
    m->base.buffer_bytes += bytes - m->scratch_cap;
    m->scratch = p;
    m->scratch_cap = bytes;
    return p;
}

/* ---- the watchdog of blocking calls ------------------------------------------------ */

/* The armed operation overran: the rank cannot leave MPI, so it ends (comm.h on_stuck). */
static void mpi_watch_fire(struct comm_mpi *m, const char *op)
{
    struct err e = {0};
    err_set(&e, ERR_TIMEOUT, NULL,
            "%s: not complete after %d ms (%s: a rank never entered the operation, or died or "
            "stalled inside it; a blocking call cannot be left, so this rank ends)",
            op, m->base.timeout_ms, COMM_MPI_NAME);
    snprintf(m->base.error_op, sizeof m->base.error_op, "%s", op);
    m->base.error_peer = -1;
    if (m->base.on_stuck)
        m->base.on_stuck(&m->base, &e, m->base.on_stuck_ctx);
    fprintf(stderr, "rank %d: %s\n", m->base.rank, e.msg);
    _exit(1);
}

static void *mpi_watch_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, MPI_WATCH_NS};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&mpi_watch.mu);
        struct comm_mpi *m = mpi_watch.armed;
        const char *op = mpi_watch.op;
        bool over = m && clock_mono_ns() >= mpi_watch.deadline_ns;
        pthread_mutex_unlock(&mpi_watch.mu);
        if (over)
            mpi_watch_fire(m, op);
    }
    return NULL;
}

/* Arms the watchdog for m's operation op (starting its thread the first time). 0, or -1
 * when the thread cannot start (the caller then takes the non-blocking path). */
static int mpi_watch_arm(struct comm_mpi *m, const char *op)
{
    pthread_mutex_lock(&mpi_watch.mu);
    if (!mpi_watch.started) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        mpi_watch.started = pthread_create(&th, &at, mpi_watch_main, NULL) == 0;
        pthread_attr_destroy(&at);
    }
    if (mpi_watch.started) {
        mpi_watch.armed = m;
        mpi_watch.op = op;
        mpi_watch.deadline_ns = clock_mono_ns() + (int64_t)m->base.timeout_ms * 1000000;
    }
    int rc = mpi_watch.started ? 0 : -1;
    pthread_mutex_unlock(&mpi_watch.mu);
    return rc;
}

static void mpi_watch_disarm(void)
{
    pthread_mutex_lock(&mpi_watch.mu);
    mpi_watch.armed = NULL;
    pthread_mutex_unlock(&mpi_watch.mu);
}

/* ---- operations ------------------------------------------------------------------- */

/* The ring-model bytes a rank sends (comm.h comm_wire_bytes), for bytes_sent. */
static void mpi_account(struct comm_mpi *m, const struct comm_args *a)
{
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    m->base.bytes_sent += comm_wire_bytes(a->op, bytes, m->base.world_size);
}

/* The collective a, blocking (req unused) or started non-blocking into req. MPI_SUCCESS,
 * an MPI error, or -2 with e set. */
static int mpi_start_collective(struct comm_mpi *m, const struct comm_args *a, bool blocking,
                                MPI_Request *req, int *n, struct err *e)
{
    MPI_Datatype t = mpi_type(a->dtype);
    MPI_Op op = mpi_op(a->dtype, a->redop);
    int count = (int)a->count, rank = m->base.rank;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    *n = 1;
    switch (a->op) {
    case COMM_OP_ALLREDUCE: {
        const void *in = a->send == a->recv ? MPI_IN_PLACE : a->send;
        return blocking ? MPI_Allreduce(in, a->recv, count, t, op, m->mc)
                        : MPI_Iallreduce(in, a->recv, count, t, op, m->mc, req);
    }
    case COMM_OP_REDUCE_SCATTER: {
        /* MPI's in place leaves the block at the buffer's start, comm.h's at the rank's:
         * in place goes through scratch */
        void *out = a->recv;
        if ((const char *)a->send + (size_t)rank * bytes == (const char *)a->recv &&
            !(out = mpi_scratch(m, bytes, "reduce_scatter", e)))
            return -2;
        return blocking ? MPI_Reduce_scatter_block(a->send, out, count, t, op, m->mc)
                        : MPI_Ireduce_scatter_block(a->send, out, count, t, op, m->mc, req);
    }
    case COMM_OP_ALL_GATHER: { /* MPI's in place is comm.h's: the block at the rank's */
        const void *in = (char *)a->recv + (size_t)rank * bytes == (const char *)a->send
                             ? MPI_IN_PLACE
                             : a->send;
        return blocking ? MPI_Allgather(in, count, t, a->recv, count, t, m->mc)
                        : MPI_Iallgather(in, count, t, a->recv, count, t, m->mc, req);
    }
    case COMM_OP_BROADCAST:
        if (rank == a->peer && a->send != a->recv)
            memcpy(a->recv, a->send, bytes);
        return blocking ? MPI_Bcast(a->recv, count, t, a->peer, m->mc)
                        : MPI_Ibcast(a->recv, count, t, a->peer, m->mc, req);
    case COMM_OP_BARRIER: return blocking ? MPI_Barrier(m->mc) : MPI_Ibarrier(m->mc, req);
    default: break;
    }
    return MPI_ERR_OP;
}

/* After the collective: in-place reduce_scatter's block into place, avg's division. */
static void mpi_finish_collective(struct comm_mpi *m, const struct comm_args *a)
{
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    if (a->op == COMM_OP_REDUCE_SCATTER &&
        (const char *)a->send + (size_t)m->base.rank * bytes == (const char *)a->recv)
        memcpy(a->recv, m->scratch, bytes);
    if (a->redop == COMM_AVG && (a->op == COMM_OP_ALLREDUCE || a->op == COMM_OP_REDUCE_SCATTER))
        reduce_divide(a->recv, a->count, a->dtype, m->base.world_size);
}

/* Refuses what MPI's int counts cannot say, and everything on a broken communicator. */
static int mpi_precheck(struct comm_mpi *m, const struct comm_args *a, struct err *e)
{
    const char *name = comm_op_name(a->op);
    if (m->broken) {
        snprintf(m->base.error_op, sizeof m->base.error_op, "%s", name);
        *e = m->first_err;
        return -1;
    }
    size_t most = a->op == COMM_OP_SENDRECV && a->count2 > a->count ? a->count2 : a->count;
    if (most > (size_t)INT32_MAX)
        return err_set(e, ERR_INVALID, "count", "%s: %zu elements, MPI counts at most %d", name,
                       most, INT32_MAX);
    if (a->algorithm != COMM_ALG_AUTO)
        return err_set(e, ERR_INVALID, "algorithm",
                       "%s: backend mpi uses MPI's own algorithms (auto), not \"%s\"", name,
                       comm_algorithm_name(a->algorithm));
    snprintf(m->base.last_algorithm, sizeof m->base.last_algorithm, "mpi");
    return 0;
}

static int mpi_collective(struct comm *c, const struct comm_args *a, struct err *e)
{
    struct comm_mpi *m = (struct comm_mpi *)c;
    if (mpi_precheck(m, a, e) < 0)
        return -1;
    const char *name = comm_op_name(a->op);
    MPI_Request req[2];
    MPI_Status st[2];
    int n = 0;
    pthread_mutex_lock(&mpi_lib.mu);
    /* the only communicator of the process: MPI's blocking call, under the watchdog */
    bool blocking = mpi_lib.users == 1 && mpi_watch_arm(m, name) == 0;
    int rc = mpi_start_collective(m, a, blocking, req, &n, e);
    if (blocking)
        mpi_watch_disarm();
    pthread_mutex_unlock(&mpi_lib.mu);
    if (rc == -2)
        return -1;
    if (rc != MPI_SUCCESS)
        return mpi_fail_rc(m, e, name, -1, rc, blocking ? "the blocking call" : "starting it");
    if (!blocking && mpi_wait(m, name, -1, req, n, st, e) < 0)
        return -1;
    mpi_finish_collective(m, a);
    mpi_account(m, a);
    return 0;
}

/* recv's count check: MPI truncation is an error already; fewer bytes is a protocol error
 * as comm.h says. */
static int mpi_check_received(struct comm_mpi *m, const MPI_Status *st, size_t want_bytes,
                              const char *op, int peer, struct err *e)
{
    int got = 0;
    MPI_Get_count(st, MPI_BYTE, &got);
    if ((size_t)got != want_bytes)
        return mpi_fail(m, e, ERR_PROTOCOL, op, peer, "rank %d sent %d bytes, want %zu", peer,
                        got, want_bytes);
    return 0;
}

static int mpi_p2p(struct comm *c, const struct comm_args *a, struct err *e)
{
    struct comm_mpi *m = (struct comm_mpi *)c;
    if (mpi_precheck(m, a, e) < 0)
        return -1;
    const char *name = comm_op_name(a->op);
    size_t esz = comm_dtype_size(a->dtype), sbytes = a->count * esz;
    size_t rbytes = (a->op == COMM_OP_SENDRECV ? a->count2 : a->count) * esz;
    MPI_Request req[2];
    MPI_Status st[2];
    int n = 0, rc = MPI_SUCCESS, rpeer = a->op == COMM_OP_SENDRECV ? a->peer2 : a->peer;
    const void *send = a->send;
    if (a->op == COMM_OP_SENDRECV && a->peer == m->base.rank && rpeer == m->base.rank) {
        memmove(a->recv, a->send, sbytes < rbytes ? sbytes : rbytes); /* comm.h: local */
        return 0;
    }
    if (a->op == COMM_OP_SENDRECV && a->send == a->recv && sbytes) { /* in place */
        void *copy = mpi_scratch(m, sbytes, name, e);
        if (!copy)
            return -1;
        send = memcpy(copy, a->send, sbytes);
    }
    pthread_mutex_lock(&mpi_lib.mu);
    if (a->op == COMM_OP_RECV || a->op == COMM_OP_SENDRECV)
        rc = MPI_Irecv(a->recv, (int)rbytes, MPI_BYTE, rpeer, MPI_TAG_P2P, m->mc, &req[n++]);
    if (rc == MPI_SUCCESS && (a->op == COMM_OP_SEND || a->op == COMM_OP_SENDRECV))
        rc = MPI_Isend(send, (int)sbytes, MPI_BYTE, a->peer, MPI_TAG_P2P, m->mc, &req[n++]);
    pthread_mutex_unlock(&mpi_lib.mu);
    if (rc != MPI_SUCCESS)
        return mpi_fail_rc(m, e, name, a->peer, rc, "starting it");
    if (mpi_wait(m, name, a->op == COMM_OP_SEND ? a->peer : rpeer, req, n, st, e) < 0)
        return -1;
    if (a->op != COMM_OP_SEND && mpi_check_received(m, &st[0], rbytes, name, rpeer, e) < 0)
        return -1;
    if (a->op != COMM_OP_RECV)
        m->base.bytes_sent += sbytes;
    return 0;
}

/* ---- creation and destruction ----------------------------------------------------- */

static int mpi_comm_make(struct comm_mpi *m, const struct comm_mpi_config *cfg, struct err *e)
{
    int rc;
    if (!cfg->ranks) {
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->mc);
    } else {
        MPI_Group world, g;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        rc = MPI_Group_incl(world, cfg->n_ranks, cfg->ranks, &g);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, 0, &m->mc);
            MPI_Group_free(&g);
        }
        MPI_Group_free(&world);
    }
    if (rc != MPI_SUCCESS) {
        m->mc = MPI_COMM_NULL;
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, s, &len);
        return err_set(e, ERR_PEER, NULL, "mpi setup: making the communicator: %s", s);
    }
    /* errors are values: MPI's default handler would abort the whole job */
    MPI_Comm_set_errhandler(m->mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->mc, &m->base.rank);
    MPI_Comm_size(m->mc, &m->base.world_size);
    return 0;
}

static int mpi_config_check(const struct comm_mpi_config *cfg, struct err *e)
{
    if (cfg->timeout_ms <= 0)
        return err_set(e, ERR_INVALID, "comm_timeout_s", "mpi: timeout must be > 0");
    if (cfg->ranks && cfg->n_ranks < 1)
        return err_set(e, ERR_INVALID, "ranks", "mpi: a group of %d ranks", cfg->n_ranks);
    return 0;
}

static struct comm *mpi_create(const struct comm_mpi_config *cfg, struct err *e)
{
    if (mpi_config_check(cfg, e) < 0)
        return NULL;
    struct comm_mpi *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(e, ERR_NOMEM, NULL, "mpi setup: out of memory");
        return NULL;
    }
    m->base = (struct comm){.ops = &mpi_ops,
                            .backend = "mpi",
                            .timeout_ms = cfg->timeout_ms,
                            .abort_flag = cfg->abort_flag,
                            .error_peer = -1};
    m->mc = MPI_COMM_NULL;
    snprintf(m->base.last_algorithm, sizeof m->base.last_algorithm, "mpi");
    pthread_mutex_lock(&mpi_lib.mu);
    int rc = mpi_lib_acquire(cfg, e);
    if (rc == 0 && (rc = mpi_comm_make(m, cfg, e)) < 0)
        mpi_lib_release();
    else if (rc < 0 && mpi_lib.users > 0) /* acquired, then refused the thread level */
        mpi_lib_release();
    pthread_mutex_unlock(&mpi_lib.mu);
    if (rc < 0) {
        free(m);
        return NULL;
    }
    return &m->base;
}

/* A timed-out operation still in flight gets the timeout again to complete (a late rank
 * may still enter it); if it does not, MPI is left unfinalised. */
static void mpi_destroy(struct comm *c)
{
    struct comm_mpi *m = (struct comm_mpi *)c;
    bool stuck = false;
    if (m->n_pending > 0) {
        atomic_store(&m->base.stop, false); /* comm_destroy raised it; wait once more */
        MPI_Status st[2];
        enum err_code why;
        int rc;
        stuck = mpi_poll(m, m->pending, m->n_pending, st, &why, &rc) == 0;
    }
    pthread_mutex_lock(&mpi_lib.mu);
    if (stuck)
        mpi_lib.stuck = true;
    else if (m->mc != MPI_COMM_NULL)
        MPI_Comm_free(&m->mc);
    mpi_lib_release();
    pthread_mutex_unlock(&mpi_lib.mu);
    free(m->scratch);
    free(m);
}

static const struct comm_ops mpi_ops = {
    .allreduce = mpi_collective,
    .reduce_scatter = mpi_collective,
    .all_gather = mpi_collective,
    .broadcast = mpi_collective,
    .send = mpi_p2p,
    .recv = mpi_p2p,
    .sendrecv = mpi_p2p,
    .barrier = mpi_collective,
    .destroy = mpi_destroy,
};

/* ---- the env report --------------------------------------------------------------- */

/* A string control variable's value by name through MPI_T; "" when it has none. */
static void mpi_cvar_string(const char *want, char *out, int cap)
{
    out[0] = '\0';
    int n = 0;
    if (MPI_T_cvar_get_num(&n) != MPI_SUCCESS)
        return;
    for (int i = 0; i < n; i++) {
        char name[256], desc[8];
        int nl = sizeof name, dl = sizeof desc, verb, bind, scope, count;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(i, name, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope) !=
                MPI_SUCCESS ||
            strcmp(name, want) != 0 || dt != MPI_CHAR)
            continue;
        MPI_T_cvar_handle h;
        if (MPI_T_cvar_handle_alloc(i, NULL, &h, &count) != MPI_SUCCESS)
            return;
        char *buf = calloc(1, (size_t)count + 1);
        if (buf && MPI_T_cvar_read(h, buf) == MPI_SUCCESS)
            snprintf(out, (size_t)cap, "%s", buf);
        free(buf);
        MPI_T_cvar_handle_free(&h);
        return;
    }
}

/* The settings in the environment that steer MPI's transports, name -> value. */
static json_t *mpi_env_settings(void)
{
    static const char *const prefixes[] = {"OMPI_MCA_", "MPIR_CVAR_", "UCX_",
                                           "FI_",       "HYDRA_",     "PMIX_MCA_"};
    json_t *o = json_object();
    for (char **v = environ; o && *v; v++) {
        const char *eq = strchr(*v, '=');
        for (size_t i = 0; eq && i < sizeof prefixes / sizeof prefixes[0]; i++) {
            if (strncmp(*v, prefixes[i], strlen(prefixes[i])) != 0)
                continue;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(eq - *v), *v);
            json_object_set_new(o, name, json_string(eq + 1));
            break;
        }
    }
    return o;
}

#ifdef OPEN_MPI
/* The leading fields of OpenMPI's mca_base_component_t (opal/mca/mca.h, MCA 2.1): the
 * component MPI_Init selected is in libmpi's mca_pml_base_selected_component. */
struct mpi_ompi_component {
    int mca_version[3];
    char project[16];
    int project_version[3];
    char type[32];
    int type_version[3];
    char name[64];
};

static void mpi_ompi_transport(json_t *t)
{
    static const char *const cvars[] = {"pml", "btl", "mtl", "coll"};
    for (size_t i = 0; i < sizeof cvars / sizeof cvars[0]; i++) {
        char v[256];
        mpi_cvar_string(cvars[i], v, sizeof v);
        json_object_set_new(t, cvars[i], json_string(v[0] ? v : "(default)"));
    }
    const struct mpi_ompi_component *pml = dlsym(RTLD_DEFAULT,
                                                 "mca_pml_base_selected_component");
    if (pml && strcmp(pml->type, "pml") == 0)
        json_object_set_new(t, "pml_selected", json_stringn(pml->name, strnlen(pml->name, 63)));
}
#else
/* MPICH's device and netmod are in its version string ("MPICH Device: ch4:ucx"). */
static void mpi_mpich_transport(json_t *t, const char *version)
{
    const char *d = strstr(version, "MPICH Device:");
    if (d) {
        d += strlen("MPICH Device:");
        d += strspn(d, " \t");
        json_object_set_new(t, "device", json_stringn(d, strcspn(d, "\r\n")));
    }
    static const char *const cvars[] = {"MPIR_CVAR_CH4_NETMOD", "MPIR_CVAR_CH4_SHM",
                                        "MPIR_CVAR_OFI_USE_PROVIDER"};
    for (size_t i = 0; i < sizeof cvars / sizeof cvars[0]; i++) {
        char v[256];
        mpi_cvar_string(cvars[i], v, sizeof v);
        if (v[0])
            json_object_set_new(t, cvars[i], json_string(v));
    }
}
#endif

static json_t *mpi_env(void)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0, major = 0, minor = 0, provided = 0;
    MPI_Get_library_version(version, &len);
    MPI_Get_version(&major, &minor);
    char standard[16];
    snprintf(standard, sizeof standard, "%d.%d", major, minor);
    int inited = 0;
    pthread_mutex_lock(&mpi_lib.mu);
    MPI_Initialized(&inited);
    /* MPI_T only once MPI is up: MPICH 4.0's MPI_Init_thread crashes after an MPI_T
     * session opened and closed before it (the worker's first env report comes before
     * the communicator; the one after it has the transport); and only one session
     * (struct mpi_lib transport) */
    if (inited && !mpi_lib.transport &&
        MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS) {
        mpi_lib.transport = json_object();
#ifdef OPEN_MPI
        if (mpi_lib.transport)
            mpi_ompi_transport(mpi_lib.transport);
#else
        if (mpi_lib.transport)
            mpi_mpich_transport(mpi_lib.transport, version);
#endif
        MPI_T_finalize();
    }
    json_t *t = mpi_lib.transport ? json_deep_copy(mpi_lib.transport) : json_object();
    pthread_mutex_unlock(&mpi_lib.mu);
    /* the first line of the version string: MPICH's runs on with its configure flags */
    return json_pack("{s:s, s:s%, s:s, s:s, s:o*, s:o*}", "implementation", COMM_MPI_NAME,
                     "library_version", version, strcspn(version, "\n"), "standard", standard,
                     "thread_level",
                     inited ? mpi_thread_name(mpi_lib.thread) : "not initialised", "transport",
                     t, "settings", mpi_env_settings());
}

__attribute__((visibility("default"))) const struct comm_mpi_module COMM_MPI_ENTRY = {
    .abi = MODULE_ABI, .implementation = COMM_MPI_NAME, .create = mpi_create, .env = mpi_env};
