/* nccl: the NCCL backend of comm.h (comm_nccl.h): unique id through the store,
 * non-blocking communicator, a communication stream fenced against the compute stream by
 * events, and every wait watched by nccl_watch (asynchronous error, timeout, abort flag
 * -> ncclCommAbort).
 *
 * Decision: operations are synchronous for the thread that calls them (the comm.h
 * contract: comm_wait returns a finished result), so the wait for the completion event
 * is where the watchdog runs; overlap with compute comes from comm_start's communication
 * thread doing that wait while the caller keeps launching kernels. The first failure
 * breaks the communicator (an aborted NCCL communicator cannot be used again) and every
 * later operation fails with the first error.
 *
 * Timing (comm_nccl_config.time_ops, the collective benchmark): the device time of an
 * operation is cudaEventElapsedTime between t0 and t1 recorded on the communication
 * stream, t0 behind the compute fence and behind a hold the host opens only after its
 * last enqueue call (nccl_gate.h says why an event on an idle stream needs one), t1 right
 * after the collective. Neither waiting for compute nor the host's enqueue is in it.
 * Untimed communicators (training) queue neither the hold nor the events.
 *
 * Built into the NCCL module (ddpb_comm_nccl.so), whose entry (ddpb_module_nccl) is at
 * the end, with its own copy of the static CUDA runtime (comm_nccl.h). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "worker/comm/comm_nccl.h"
#include "worker/comm/nccl_gate.h"
#include "worker/comm/nccl_watch.h"
#include "worker/module.h"
#include "worker/store/store_client.h"

#define NCCL_SPIN_POLLS 2000 /* polls without sleeping: completion latency of small ops */
#define NCCL_SLEEP_NS 20000  /* then 20 us between polls */
/* A timed operation's enqueue normally takes microseconds; one that takes longer than this
 * (or a host that failed before opening the gate) is let through and its time unknown */
#define NCCL_GATE_LIMIT_MS 1000

struct comm_nccl {
    struct comm base;        /* first: comm.c sees struct comm */
    ncclComm_t nc;           /* owned; NULL once aborted */
    cudaStream_t stream;     /* owned: the communication stream */
    cudaStream_t compute;    /* borrowed */
    cudaEvent_t ready, done; /* owned: compute -> comm fence, completion of the last op */
    cudaEvent_t t0, t1;      /* owned, timing: around the last operation on the stream */
    bool time_ops;           /* gate and time every operation (comm_nccl_config) */
    int64_t gate_limit_ns;   /* how long a hold waits for the host at most */
    double last_op_s;        /* the last operation's device time; -1: unknown */
    float *scratch;          /* owned device float: the barrier's payload */
    int device;
    int polls; /* polls of the current wait, for the spin-then-sleep pause */
    struct nccl_watch watch;
    bool broken;
    struct err first_err;
};

static const struct comm_ops nccl_ops;

/* ---- mappings (host logic, unit-tested) ------------------------------------------ */

int comm_nccl_dtype(enum comm_dtype t)
{
    switch (t) {
    case COMM_FLOAT32: return ncclFloat32;
    case COMM_FLOAT16: return ncclFloat16;
    case COMM_BFLOAT16: return ncclBfloat16;
    case COMM_INT32: return ncclInt32;
    case COMM_INT64: return ncclInt64;
    }
    return -1;
}

int comm_nccl_redop(enum comm_redop op)
{
    switch (op) {
    case COMM_SUM: return ncclSum;
    case COMM_AVG: return ncclAvg;
    case COMM_MIN: return ncclMin;
    case COMM_MAX: return ncclMax;
    }
    return -1;
}

size_t comm_nccl_wire_bytes(enum comm_op op, size_t bytes, int world_size)
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

const char *comm_nccl_version(char *buf, size_t len)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess)
        snprintf(buf, len, "NCCL unknown");
    else
        snprintf(buf, len, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return buf;
}

/* ---- watch hooks ------------------------------------------------------------------ */

static int64_t nccl_now_ms(void *ctx)
{
    return clock_mono_ms();
}

static int nccl_async_error(void *ctx, char *msg, size_t len)
{
    struct comm_nccl *n = ctx;
    if (!n->nc)
        return snprintf(msg, len, "communicator aborted"), -1;
    ncclResult_t st = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(n->nc, &st);
    if (rc != ncclSuccess)
        st = rc;
    if (st == ncclSuccess)
        return 0;
    if (st == ncclInProgress)
        return 1;
    snprintf(msg, len, "%s (%s)", ncclGetErrorString(st), ncclGetLastError(n->nc));
    return -1;
}

static int nccl_op_done(void *ctx, char *msg, size_t len)
{
    struct comm_nccl *n = ctx;
    cudaError_t rc = cudaEventQuery(n->done);
    if (rc == cudaSuccess)
        return 1;
    if (rc == cudaErrorNotReady)
        return 0;
    snprintf(msg, len, "CUDA: %s", cudaGetErrorString(rc));
    return -1;
}

static void nccl_abort(void *ctx)
{
    struct comm_nccl *n = ctx;
    if (n->nc)
        ncclCommAbort(n->nc);
    n->nc = NULL;
}

static void nccl_pause(void *ctx)
{
    struct comm_nccl *n = ctx;
    if (++n->polls < NCCL_SPIN_POLLS) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, NCCL_SLEEP_NS};
    nanosleep(&ts, NULL);
}

static const struct nccl_watch_ops nccl_watch_ops_real = {.now_ms = nccl_now_ms,
                                                          .async_error = nccl_async_error,
                                                          .op_done = nccl_op_done,
                                                          .abort = nccl_abort};
/* initialisation and enqueues: wait for "not in progress" instead of an event */
static const struct nccl_watch_ops nccl_watch_ops_init = {.now_ms = nccl_now_ms,
                                                          .async_error = nccl_async_error,
                                                          .op_done = NULL,
                                                          .abort = nccl_abort};

/* ---- failures --------------------------------------------------------------------- */

static enum err_code nccl_verdict_code(enum nccl_watch_verdict v)
{
    switch (v) {
    case NCCL_WATCH_TIMEOUT: return ERR_TIMEOUT;
    case NCCL_WATCH_ABORTED: return ERR_ABORTED;
    case NCCL_WATCH_ERROR: return ERR_PEER; /* NCCL's remote errors: a peer failed */
    case NCCL_WATCH_OK: break;
    }
    return ERR_INTERNAL;
}

/* Breaks the communicator with the first error and fills e. Returns -1. */
static int nccl_fail(struct comm_nccl *n, struct err *e, enum err_code code, const char *op,
                     const char *msg)
{
    snprintf(n->base.error_op, sizeof n->base.error_op, "%s", op);
    n->base.error_peer = -1; /* NCCL does not say which peer */
    if (!n->broken) {
        n->broken = true;
        err_set(&n->first_err, code, NULL, "%s", msg);
    }
    return err_set(e, code, NULL, "%s", msg);
}

static int nccl_fail_verdict(struct comm_nccl *n, struct err *e, const char *op)
{
    return nccl_fail(n, e, nccl_verdict_code(n->watch.verdict), op, n->watch.msg);
}

static int nccl_cuda(struct comm_nccl *n, cudaError_t rc, const char *op, const char *what,
                     struct err *e)
{
    if (rc == cudaSuccess)
        return 0;
    char msg[300];
    snprintf(msg, sizeof msg, "%s: %s: CUDA error %s", op, what, cudaGetErrorString(rc));
    return nccl_fail(n, e, ERR_IO, op, msg);
}

/* An NCCL call's immediate result: ncclInProgress is polled to completion (watched). */
static int nccl_settle(struct comm_nccl *n, ncclResult_t rc, const char *op, struct err *e)
{
    if (rc == ncclSuccess)
        return 0;
    if (rc != ncclInProgress) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s: %s (%s)", op, ncclGetErrorString(rc),
                 n->nc ? ncclGetLastError(n->nc) : "");
        nccl_abort(n);
        return nccl_fail(
            n, e, rc == ncclInvalidArgument || rc == ncclInvalidUsage ? ERR_INVALID : ERR_PEER,
            op, msg);
    }
    struct nccl_watch_ops const *saved = n->watch.ops;
    n->watch.ops = &nccl_watch_ops_init;
    n->polls = 0;
    enum nccl_watch_verdict v = nccl_watch_wait(&n->watch, nccl_pause);
    n->watch.ops = saved;
    if (v != NCCL_WATCH_OK)
        return nccl_fail_verdict(n, e, op);
    nccl_watch_begin(&n->watch, op); /* the operation itself is still to be waited for */
    return 0;
}

/* ---- creation --------------------------------------------------------------------- */

static int nccl_id_exchange(const struct comm_nccl_config *cfg, struct store_client *store,
                            ncclUniqueId *id, struct err *e)
{
    char key[96];
    snprintf(key, sizeof key, "nccl/id/%s", cfg->tag ? cfg->tag : "0");
    if (cfg->rank == 0) {
        ncclResult_t rc = ncclGetUniqueId(id);
        if (rc != ncclSuccess)
            return err_set(e, ERR_IO, NULL, "nccl setup: ncclGetUniqueId: %s",
                           ncclGetErrorString(rc));
        if (store_client_set(store, key, id, sizeof *id, e) < 0)
            return err_prefix(e, "nccl setup: publishing the unique id");
        return 0;
    }
    char *val = NULL;
    size_t len = 0;
    if (store_client_get(store, key, cfg->timeout_ms, &val, &len, e) < 0)
        return err_prefix(e, "nccl setup: unique id from rank 0");
    int rc = 0;
    if (len != sizeof *id)
        rc = err_set(e, ERR_PROTOCOL, NULL, "nccl setup: unique id of %zu bytes, want %zu", len,
                     sizeof *id);
    else
        memcpy(id, val, sizeof *id);
    free(val);
    return rc;
}

static int nccl_config_check(const struct comm_nccl_config *cfg, struct err *e)
{
    if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return err_set(e, ERR_INVALID, "rank", "nccl: rank %d of world size %d", cfg->rank,
                       cfg->world_size);
    if (cfg->timeout_ms <= 0)
        return err_set(e, ERR_INVALID, "comm_timeout_s", "nccl: timeout must be > 0");
    const char *alg = cfg->algorithm ? cfg->algorithm : "auto";
    if (strcmp(alg, "auto") == 0)
        return 0;
    if (strcmp(alg, "ring") == 0)
        return setenv("NCCL_ALGO", "Ring", 1), 0;
    if (strcmp(alg, "tree") == 0)
        return setenv("NCCL_ALGO", "Tree", 1), 0;
    return err_set(e, ERR_INVALID, "algorithm",
                   "nccl: algorithm \"%s\" is not one NCCL can be told to use (auto, ring, "
                   "tree)",
                   alg);
}

static void nccl_free(struct comm_nccl *n)
{
    /* comm_destroy raised stop for the comm thread; the flush below is still bounded by
     * the timeout and the worker's abort flag */
    n->watch.stop_flag = NULL;
    if (n->nc) {
        /* a healthy communicator flushes its work; a broken one was aborted already */
        if (!n->broken && ncclCommFinalize(n->nc) == ncclInProgress) {
            nccl_watch_begin(&n->watch, "finalize");
            n->watch.ops = &nccl_watch_ops_init;
            nccl_watch_wait(&n->watch, nccl_pause);
        }
        if (n->nc)
            ncclCommDestroy(n->nc);
    }
    if (n->scratch)
        cudaFree(n->scratch);
    if (n->ready)
        cudaEventDestroy(n->ready);
    if (n->done)
        cudaEventDestroy(n->done);
    if (n->t0)
        cudaEventDestroy(n->t0);
    if (n->t1)
        cudaEventDestroy(n->t1);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    free(n);
}

struct comm *comm_nccl_create(const struct comm_nccl_config *cfg, struct store_client *store,
                              struct err *e)
{
    if (nccl_config_check(cfg, e) < 0)
        return NULL;
    struct comm_nccl *n = calloc(1, sizeof *n);
    if (!n) {
        err_set(e, ERR_NOMEM, NULL, "nccl setup: out of memory");
        return NULL;
    }
    n->base = (struct comm){.ops = &nccl_ops,
                            .backend = "nccl",
                            .rank = cfg->rank,
                            .world_size = cfg->world_size,
                            .timeout_ms = cfg->timeout_ms,
                            .abort_flag = cfg->abort_flag,
                            .error_peer = -1};
    snprintf(n->base.last_algorithm, sizeof n->base.last_algorithm, "nccl");
    n->device = cfg->device;
    n->last_op_s = -1;
    n->time_ops = cfg->time_ops;
    int gate_ms = cfg->timeout_ms < NCCL_GATE_LIMIT_MS ? cfg->timeout_ms : NCCL_GATE_LIMIT_MS;
    n->gate_limit_ns = (int64_t)gate_ms * 1000000;
    n->compute = (cudaStream_t)cfg->compute_stream;
    nccl_watch_init(&n->watch, &nccl_watch_ops_real, n, cfg->timeout_ms, cfg->abort_flag,
                    &n->base.stop);
    const char *op = "nccl setup";
    cudaError_t cr = cudaSetDevice(cfg->device);
    if (cr != cudaSuccess) {
        err_set(e, ERR_INVALID, "device", "nccl setup: CUDA device %d: %s", cfg->device,
                cudaGetErrorString(cr));
        free(n);
        return NULL;
    }
    if (nccl_cuda(n, cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), op,
                  "communication stream", e) < 0 ||
        nccl_cuda(n, cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming), op, "event",
                  e) < 0 ||
        nccl_cuda(n, cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming), op, "event",
                  e) < 0 ||
        nccl_cuda(n, cudaEventCreate(&n->t0), op, "timing event", e) < 0 ||
        nccl_cuda(n, cudaEventCreate(&n->t1), op, "timing event", e) < 0 ||
        nccl_cuda(n, cudaMalloc((void **)&n->scratch, sizeof(float)), op, "scratch", e) < 0)
        goto fail;
    ncclUniqueId id;
    if (nccl_id_exchange(cfg, store, &id, e) < 0)
        goto fail;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_watch_begin(&n->watch, "init");
    ncclResult_t rc = ncclCommInitRankConfig(&n->nc, cfg->world_size, id, cfg->rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        err_set(e, ERR_PEER, NULL, "nccl setup: ncclCommInitRankConfig: %s",
                ncclGetErrorString(rc));
        goto fail;
    }
    n->watch.ops = &nccl_watch_ops_init;
    enum nccl_watch_verdict v = nccl_watch_wait(&n->watch, nccl_pause);
    n->watch.ops = &nccl_watch_ops_real;
    if (v != NCCL_WATCH_OK) {
        err_set(e, nccl_verdict_code(v), NULL, "nccl setup: %s", n->watch.msg);
        n->broken = true;
        goto fail;
    }
    return &n->base;
fail:
    n->broken = true;
    nccl_free(n);
    return NULL;
}

/* ---- operations ------------------------------------------------------------------- */

/* A host buffer is refused: NCCL would fault on it. */
static int nccl_check_device_ptr(struct comm_nccl *n, const void *p, const char *which,
                                 const char *op, struct err *e)
{
    if (!p)
        return 0;
    struct cudaPointerAttributes at;
    cudaError_t rc = cudaPointerGetAttributes(&at, p);
    if (rc != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error of an unknown pointer */
        at.type = cudaMemoryTypeUnregistered;
    }
    if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged)
        return 0;
    return err_set(e, ERR_INVALID, which,
                   "%s: the %s buffer is host memory; the nccl backend needs device buffers "
                   "(spec device \"cuda\")",
                   op, which);
}

/* Enqueues a on the communication stream. */
static ncclResult_t nccl_enqueue(struct comm_nccl *n, const struct comm_args *a)
{
    ncclDataType_t dt = (ncclDataType_t)comm_nccl_dtype(a->dtype);
    ncclRedOp_t op = (ncclRedOp_t)comm_nccl_redop(a->redop);
    ncclResult_t rc;
    switch (a->op) {
    case COMM_OP_ALLREDUCE:
        return ncclAllReduce(a->send, a->recv, a->count, dt, op, n->nc, n->stream);
    case COMM_OP_REDUCE_SCATTER:
        return ncclReduceScatter(a->send, a->recv, a->count, dt, op, n->nc, n->stream);
    case COMM_OP_ALL_GATHER:
        return ncclAllGather(a->send, a->recv, a->count, dt, n->nc, n->stream);
    case COMM_OP_BROADCAST:
        /* non-roots pass recv as send: NCCL reads sendbuff on the root only */
        return ncclBroadcast(a->peer == n->base.rank ? a->send : a->recv, a->recv, a->count, dt,
                             a->peer, n->nc, n->stream);
    case COMM_OP_SEND: return ncclSend(a->send, a->count, dt, a->peer, n->nc, n->stream);
    case COMM_OP_RECV: return ncclRecv(a->recv, a->count, dt, a->peer, n->nc, n->stream);
    case COMM_OP_SENDRECV:
        if (a->peer == n->base.rank) { /* to itself: a device copy (comm.c: counts equal) */
            cudaError_t cr = a->send == a->recv
                                 ? cudaSuccess
                                 : cudaMemcpyAsync(a->recv, a->send,
                                                   a->count * comm_dtype_size(a->dtype),
                                                   cudaMemcpyDeviceToDevice, n->stream);
            return cr == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
        }
        rc = ncclGroupStart();
        if (rc == ncclSuccess)
            rc = ncclSend(a->send, a->count, dt, a->peer, n->nc, n->stream);
        if (rc == ncclSuccess)
            rc = ncclRecv(a->recv, a->count2, dt, a->peer2, n->nc, n->stream);
        ncclResult_t end = ncclGroupEnd();
        return rc != ncclSuccess ? rc : end;
    case COMM_OP_BARRIER:
        return ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum, n->nc, n->stream);
    }
    return ncclInvalidArgument;
}

/* The communication stream starts once compute has written the inputs: at the caller's
 * event (a layer's end in backward), else at everything queued on compute so far. */
static int nccl_fence(struct comm_nccl *n, const struct comm_args *a, const char *name,
                      struct err *e)
{
    cudaEvent_t fence = (cudaEvent_t)a->ready_event;
    if (!fence && nccl_cuda(n, cudaEventRecord(n->ready, n->compute), name, "fence", e) < 0)
        return -1;
    return nccl_cuda(n, cudaStreamWaitEvent(n->stream, fence ? fence : n->ready, 0), name,
                     "fence", e);
}

/* Timed operations: after the fence, the stream is held (nccl_gate.h) and t0 recorded
 * behind the hold, so t0 fires once the host opens the gate after its last enqueue call,
 * not while it is still enqueueing, and never while the stream waits for compute.
 * *out: a gate holding the host's reference (the hold has the other). */
static int nccl_timing_start(struct comm_nccl *n, struct nccl_gate **out, const char *name,
                             struct err *e)
{
    struct nccl_gate *g = nccl_gate_new(n->gate_limit_ns, NULL, NULL);
    if (!g)
        return nccl_fail(n, e, ERR_NOMEM, name, "out of memory for the timing gate");
    cudaError_t rc = cudaLaunchHostFunc(n->stream, nccl_gate_hold, g);
    if (rc != cudaSuccess) {
        nccl_gate_put(g); /* the hold was never queued: both references are ours */
        nccl_gate_put(g);
        return nccl_cuda(n, rc, name, "timing gate", e);
    }
    if (nccl_cuda(n, cudaEventRecord(n->t0, n->stream), name, "timing event", e) < 0) {
        nccl_gate_open(g);
        nccl_gate_put(g);
        return -1;
    }
    *out = g;
    return 0;
}

static int nccl_op(struct comm *c, const struct comm_args *a, struct err *e)
{
    struct comm_nccl *n = (struct comm_nccl *)c;
    const char *name = comm_op_name(a->op);
    if (n->broken) {
        snprintf(c->error_op, sizeof c->error_op, "%s", name);
        return err_set(e, n->first_err.code, NULL, "%s: communicator unusable after: %s", name,
                       n->first_err.msg);
    }
    if (a->algorithm != COMM_ALG_AUTO)
        return err_set(e, ERR_INVALID, "algorithm",
                       "%s: the nccl backend chooses its algorithm itself (spec algorithm "
                       "\"auto\", \"ring\" or \"tree\" at setup), not \"%s\" per operation",
                       name, comm_algorithm_name(a->algorithm));
    bool root_sends = a->op != COMM_OP_BROADCAST || a->peer == c->rank;
    if (nccl_check_device_ptr(n, root_sends ? a->send : NULL, "send", name, e) < 0 ||
        nccl_check_device_ptr(n, a->recv, "recv", name, e) < 0)
        return -1;
    c->error_op[0] = '\0';
    c->error_peer = -1;
    n->last_op_s = -1;
    struct nccl_gate *g = NULL;
    if (nccl_fence(n, a, name, e) < 0 || (n->time_ops && nccl_timing_start(n, &g, name, e) < 0))
        return -1;
    nccl_watch_begin(&n->watch, name);
    /* an enqueue that fails aborts the communicator with the hold still closed: if the
     * abort waits for the device, the hold's limit bounds that wait */
    int rc = nccl_settle(n, nccl_enqueue(n, a), name, e);
    if (rc == 0 && g)
        rc = nccl_cuda(n, cudaEventRecord(n->t1, n->stream), name, "timing event", e);
    if (rc == 0)
        rc = nccl_cuda(n, cudaEventRecord(n->done, n->stream), name, "completion event", e);
    if (g) /* everything is enqueued (or failed): t0 may fire now */
        nccl_gate_open(g);
    n->polls = 0;
    if (rc == 0 && nccl_watch_wait(&n->watch, nccl_pause) != NCCL_WATCH_OK)
        rc = nccl_fail_verdict(n, e, name);
    if (rc == 0 && g) { /* t1 precedes done on the stream: complete */
        float ms = 0;
        bool ok = cudaEventElapsedTime(&ms, n->t0, n->t1) == cudaSuccess;
        n->last_op_s = nccl_gate_seconds(g, ok, ms);
    }
    nccl_gate_put(g);
    if (rc < 0)
        return -1;
    size_t bytes = a->count * comm_dtype_size(a->dtype);
    c->bytes_sent += comm_nccl_wire_bytes(a->op, bytes, c->world_size);
    return 0;
}

double comm_nccl_last_op_seconds(const struct comm *c)
{
    return ((const struct comm_nccl *)c)->last_op_s;
}

int comm_nccl_compute_wait(struct comm *c, struct err *e)
{
    struct comm_nccl *n = (struct comm_nccl *)c;
    if (nccl_cuda(n, cudaEventRecord(n->done, n->stream), "compute wait", "event", e) < 0)
        return -1;
    return nccl_cuda(n, cudaStreamWaitEvent(n->compute, n->done, 0), "compute wait",
                     "stream wait", e);
}

static void nccl_destroy(struct comm *c)
{
    nccl_free((struct comm_nccl *)c);
}

static const struct comm_ops nccl_ops = {
    .allreduce = nccl_op,
    .reduce_scatter = nccl_op,
    .all_gather = nccl_op,
    .broadcast = nccl_op,
    .send = nccl_op,
    .recv = nccl_op,
    .sendrecv = nccl_op,
    .barrier = nccl_op,
    .destroy = nccl_destroy,
};

/* The module's entry (module.h: one symbol, unique across modules). */
const struct comm_nccl_module ddpb_module_nccl = {
    .abi = MODULE_ABI,
    .create = comm_nccl_create,
    .last_op_seconds = comm_nccl_last_op_seconds,
    .version = comm_nccl_version,
};
