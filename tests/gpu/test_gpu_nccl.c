/* GPU tests (suite 'gpu', needs a CUDA device and NCCL). NCCL does not support several
 * ranks on one GPU (NVIDIA/nccl issue 418), so every rank here has a GPU of its own: rank
 * r of a case sees only GPU r (CUDA_VISIBLE_DEVICES, as the daemon sets it), and a case
 * with more ranks than the machine has GPUs is skipped with "needs N GPUs, found M"
 * (gpu_test.h). Each rank is a forked process (the parent never initialises CUDA: it
 * does not survive fork) joined through a real store.
 * One rank (any GPU machine): (1) the worker's collective benchmark on device buffers
 * (worker_gpu.h hooks) over a real one-rank communicator: every op of comm/nccl.c
 * (allreduce, reduce_scatter, all_gather, broadcast, sendrecv to itself), every dtype,
 * sum/avg/min/max, in and out of place, reports every point with #wrong == 0 (out of
 * place every op must copy into the poisoned output) and a positive device-timed algbw;
 * (2) the device timing: a timed communicator's last_op_seconds is known and at most the
 * host's wall time around the call, for a tiny and a large allreduce (positive for the
 * large one); an untimed one (training) says -1.
 * Two ranks (two GPUs): (3) the benchmark as (1), with busbw > 0; (4) the watchdog: rank 1
 * is SIGKILLed after the communicator is up; rank 0's next allreduce must fail with
 * ERR_TIMEOUT or ERR_PEER (ncclCommAbort) within the timeout plus slack, never hang. */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/report.h"
#include "common/spec.h"
#include "daemon/store_server.h"
#include "tests/gpu/gpu_test.h"
#include "tests/unit/test.h"
#include "worker/comm/comm.h"
#include "worker/comm/comm_factory.h"
#include "worker/comm/comm_nccl.h"
#include "worker/nn/cuda/gpu.h"
#include "worker/store/store_client.h"
#include "worker/worker_gpu.h"
#include "worker/workload_collective.h"

#define WORLD 2 /* the multi-rank cases' ranks: as many GPUs needed */

static char store_addr[64];
static char store_run[32];       /* a store namespace per case: no stale NCCL id */
static struct store_server *srv; /* the parent's; children only connect */
static int ngpus;                /* counted in a child: the parent stays CUDA-free */

static int next_run(void)
{
    static int k;
    struct err e = {0};
    snprintf(store_run, sizeof store_run, "gpu-%d", ++k);
    return store_server_add_run(srv, store_run, "pw", &e);
}

/* Child: rank r sees only its own GPU, the r-th of what the parent may see. */
static void child_env(int r)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char gpu[32];
    snprintf(gpu, sizeof gpu, "%d", r);
    for (int i = 0; vis && *vis; i++) {
        size_t len = strcspn(vis, ",");
        if (i == r) {
            snprintf(gpu, sizeof gpu, "%.*s", (int)len, vis);
            break;
        }
        vis += len + (vis[len] == ',');
    }
    setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
}

static struct comm *child_comm(int r, const struct spec *s, struct store_client **sc,
                               int timeout_ms, struct err *e)
{
    *sc = store_client_connect(store_addr, store_run, "pw", r, 10000, NULL, e);
    if (!*sc)
        return NULL;
    struct rendezvous_env env = {
        .rank = r, .world_size = s->world_size, .timeout_ms = timeout_ms};
    return comm_create_from_spec(s, &env, NULL, *sc, e); /* the worker's own factory */
}

/* Rank r runs one collective spec, writing report lines to fd; exit 0 on success. */
static int child_bench(int r, const struct spec *s, int fd)
{
    struct err e = {0};
    struct store_client *sc = NULL;
    struct comm *c = child_comm(r, s, &sc, 30000, &e);
    struct report_writer w;
    report_writer_init(&w, fd, r);
    struct collective_mem mem;
    worker_gpu_collective_mem(&mem);
    int rc = c ? workload_collective_run_mem(s, c, sc, &w, &mem, &e) : -1;
    if (rc < 0)
        fprintf(stderr, "rank %d: %s\n", r, e.msg);
    comm_destroy(c);
    store_client_destroy(sc);
    return rc < 0 ? 1 : 0;
}

static void spec_coll(struct spec *s, int world, const char *op, const char *dtype,
                      const char *redop, bool inplace, int64_t seed)
{
    memset(s, 0, sizeof *s);
    s->workload = SPEC_WORKLOAD_COLLECTIVE;
    s->world_size = world;
    s->repeats = 1;
    s->seed = seed;
    snprintf(s->device, sizeof s->device, "cuda");
    snprintf(s->backend, sizeof s->backend, "nccl");
    snprintf(s->coll.op, sizeof s->coll.op, "%s", op);
    snprintf(s->coll.dtype, sizeof s->coll.dtype, "%s", dtype);
    snprintf(s->coll.redop, sizeof s->coll.redop, "%s", redop);
    snprintf(s->coll.algorithm, sizeof s->coll.algorithm, "auto");
    s->coll.min_bytes = 1024;
    s->coll.max_bytes = 4 << 20;
    s->coll.factor = 16;
    s->coll.iters = 5;
    s->coll.warmup = 2;
    s->coll.check = true;
    s->coll.inplace = inplace;
}

/* What rank 0 reported for a spec. */
struct bench_result {
    int points;    /* collective points; -1 when a rank failed */
    int64_t wrong; /* their #wrong, summed */
    double min_algbw, min_busbw;
};

/* Forks s->world_size ranks of s and reads rank 0's report lines. */
static void run_ranks(const struct spec *s, struct bench_result *out)
{
    *out = (struct bench_result){.points = -1, .min_algbw = 1e30, .min_busbw = 1e30};
    int world = s->world_size;
    int pfd[2];
    if (next_run() < 0 || pipe(pfd) < 0)
        return;
    pid_t pid[WORLD];
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            close(pfd[0]);
            child_env(r);
            _exit(child_bench(r, s, r == 0 ? pfd[1] : open("/dev/null", O_WRONLY)));
        }
    }
    close(pfd[1]);
    static char text[1 << 20];
    size_t len = 0;
    ssize_t k;
    while ((k = read(pfd[0], text + len, sizeof text - 1 - len)) > 0)
        len += (size_t)k;
    close(pfd[0]);
    text[len] = '\0';
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (failed)
        return;
    out->points = 0;
    out->wrong = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        struct err e;
        enum report_type type;
        json_t *ev = report_parse_line(line, strlen(line), &type, &e);
        struct report_collective rc;
        if (ev && type == REPORT_COLLECTIVE && report_collective_from_json(ev, &rc, &e) == 0) {
            out->points++;
            out->wrong += rc.wrong;
            out->min_algbw = rc.algbw_gbs < out->min_algbw ? rc.algbw_gbs : out->min_algbw;
            out->min_busbw = rc.busbw_gbs < out->min_busbw ? rc.busbw_gbs : out->min_busbw;
        }
        json_decref(ev);
    }
}

/* Every op, dtype and reduction, in and out of place, on `world` ranks: 4 points each
 * (1 KiB to 4 MiB by 16), none wrong, device-timed. One rank has no bus traffic (busbw
 * 0 by nccl-tests' factors), so there the algbw must be positive. */
static void check_every_op_and_dtype(int world)
{
    static const char *ops[] = {"allreduce", "reduce_scatter", "all_gather", "broadcast",
                                "sendrecv"};
    static const char *dtypes[] = {"float32", "float16", "bfloat16", "int32", "int64"};
    static const char *redops[] = {"sum", "avg", "min", "max"};
    int64_t seed = 1;
    for (size_t o = 0; o < 5; o++)
        for (size_t d = 0; d < 5; d++)
            for (size_t rd = 0; rd < (o < 2 ? 4u : 1u); rd++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    struct spec s;
                    spec_coll(&s, world, ops[o], dtypes[d], redops[rd], inplace, seed++);
                    struct bench_result b;
                    run_ranks(&s, &b);
                    const char *ip = inplace ? " in place" : "";
                    T_CHECK_MSG(b.points == 4, "%d ranks, %s %s %s%s: %d points", world, ops[o],
                                dtypes[d], redops[rd], ip, b.points);
                    T_CHECK_MSG(b.wrong == 0, "%d ranks, %s %s %s%s: %lld wrong", world, ops[o],
                                dtypes[d], redops[rd], ip, (long long)b.wrong);
                    T_CHECK_MSG(world > 1 ? b.min_busbw > 0 : b.min_algbw > 0,
                                "%d ranks, %s %s %s%s: algbw %g busbw %g GB/s", world, ops[o],
                                dtypes[d], redops[rd], ip, b.min_algbw, b.min_busbw);
                }
}

static void test_one_rank_every_op_and_dtype(void)
{
    check_every_op_and_dtype(1);
}

static void test_two_ranks_every_op_and_dtype(void)
{
    GPU_TEST_NEED_GPUS(WORLD, ngpus);
    check_every_op_and_dtype(WORLD);
}

/* One rank, in a child: an allreduce of `count` floats out of place (in place, one rank's
 * allreduce may queue nothing to time) on a communicator for spec s; writes "<device
 * seconds> <host seconds>" of the last of three (or the error) to fd. Returns the exit
 * code. */
static int child_timed_allreduce(const struct spec *s, size_t count, int fd)
{
    child_env(0);
    struct err e = {0};
    struct store_client *sc = NULL;
    struct comm *c = child_comm(0, s, &sc, 30000, &e);
    float *send = c ? gpu_alloc(count * sizeof(float), &e) : NULL;
    float *recv = send ? gpu_alloc(count * sizeof(float), &e) : NULL;
    int rc = recv ? 0 : 1;
    for (int i = 0; rc == 0 && i < 3; i++) { /* the last of three: connected, warm */
        int64_t t0 = clock_mono_ns();
        rc = comm_allreduce(c, send, recv, count, COMM_FLOAT32, COMM_SUM, &e) < 0;
        if (rc == 0 && i == 2)
            dprintf(fd, "%.9f %.9f", comm_nccl_last_op_seconds(c),
                    (double)(clock_mono_ns() - t0) * 1e-9);
    }
    if (rc)
        dprintf(fd, "error: %s", e.msg);
    gpu_free(recv);
    gpu_free(send);
    comm_destroy(c);
    store_client_destroy(sc);
    return rc;
}

/* Forks child_timed_allreduce; *dev and *host its figures. Returns its exit status. */
static int timed_allreduce(const struct spec *s, size_t count, double *dev, double *host,
                           char *msg, size_t len)
{
    int pfd[2];
    if (next_run() < 0 || pipe(pfd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        _exit(child_timed_allreduce(s, count, pfd[1]));
    }
    close(pfd[1]);
    ssize_t k = read(pfd[0], msg, len - 1);
    close(pfd[0]);
    msg[k > 0 ? k : 0] = '\0';
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || sscanf(msg, "%lf %lf", dev, host) != 2)
        return -1;
    return 0;
}

/* A timed communicator (the collective benchmark's) reports a device time within the
 * host's wall time around the call (positive for 64 MiB; a 4-byte copy may read as 0 at
 * the events' resolution); an untimed one (training's) reports none. */
static void test_one_rank_device_timing(void)
{
    struct spec s;
    spec_coll(&s, 1, "allreduce", "float32", "sum", false, 7);
    static const size_t counts[] = {1, 16 << 20};
    char msg[600];
    for (size_t i = 0; i < 2; i++) {
        double dev = -1, host = 0;
        T_CHECK_MSG(timed_allreduce(&s, counts[i], &dev, &host, msg, sizeof msg) == 0,
                    "%zu floats: %s", counts[i], msg);
        T_CHECK_MSG((i == 0 ? dev >= 0 : dev > 0) && dev <= host,
                    "%zu floats: device %.9f s, host %.9f s", counts[i], dev, host);
    }
    s.workload = SPEC_WORKLOAD_TRAIN;
    double dev = 0, host = 0;
    T_CHECK_MSG(timed_allreduce(&s, 1024, &dev, &host, msg, sizeof msg) == 0, "%s", msg);
    T_CHECK_MSG(dev == -1, "untimed communicator: device %.9f s", dev);
}

/* Rank 1 dies after the communicator is up; rank 0's allreduce must fail in time. */
static void test_watchdog_killed_rank(void)
{
    GPU_TEST_NEED_GPUS(WORLD, ngpus);
    int sync[2], result[2];
    T_CHECK(next_run() == 0 && pipe(sync) == 0 && pipe(result) == 0);
    struct spec s;
    spec_coll(&s, WORLD, "allreduce", "float32", "sum", false, 99);
    pid_t pid[WORLD];
    for (int r = 0; r < WORLD; r++) {
        pid[r] = fork();
        if (pid[r] != 0)
            continue;
        child_env(r);
        struct err e = {0};
        struct store_client *sc = NULL;
        struct comm *c = child_comm(r, &s, &sc, 5000, &e);
        if (!c)
            _exit(2);
        float *buf = gpu_alloc(64 << 20, &e);
        if (!buf || comm_allreduce(c, buf, buf, 16 << 20, COMM_FLOAT32, COMM_SUM, &e) < 0)
            _exit(3); /* both ranks up and working */
        char one = 1;
        if (write(sync[1], &one, 1) != 1)
            _exit(4);
        if (r == 1)
            for (;;)
                pause(); /* killed by the parent */
        sleep(1);
        int64_t t0 = clock_mono_ms();
        int rc = comm_allreduce(c, buf, buf, 16 << 20, COMM_FLOAT32, COMM_SUM, &e);
        char msg[600];
        snprintf(msg, sizeof msg, "%d %d %lld %s", rc, (int)e.code,
                 (long long)(clock_mono_ms() - t0), e.msg);
        if (write(result[1], msg, strlen(msg)) < 0)
            _exit(5);
        _exit(0);
    }
    close(sync[1]);
    close(result[1]);
    char b;
    int up = 0;
    while (up < WORLD && read(sync[0], &b, 1) == 1)
        up++;
    T_EQ_INT(up, WORLD);
    kill(pid[1], SIGKILL);
    char msg[600] = "";
    ssize_t n = read(result[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = '\0';
    for (int r = 0; r < WORLD; r++)
        waitpid(pid[r], NULL, 0);
    int rc = 0, code = 0;
    long long ms = 0;
    T_CHECK_MSG(sscanf(msg, "%d %d %lld", &rc, &code, &ms) == 3, "rank 0 said: %s", msg);
    T_EQ_INT(rc, -1);
    T_CHECK_MSG(code == ERR_TIMEOUT || code == ERR_PEER, "%s", msg);
    T_CHECK_MSG(ms < 5000 + 10000, "abort took %lld ms: %s", ms, msg);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    ngpus = gpu_test_require_device_forked();
    struct err e = {0};
    srv = store_server_create("127.0.0.1", 0, &e);
    if (!srv) {
        fprintf(stderr, "store: %s\n", e.msg);
        return 1;
    }
    snprintf(store_addr, sizeof store_addr, "127.0.0.1:%d", store_server_port(srv));
    TEST_RUN(test_one_rank_every_op_and_dtype);
    TEST_RUN(test_one_rank_device_timing);
    TEST_RUN(test_two_ranks_every_op_and_dtype);
    TEST_RUN(test_watchdog_killed_rank);
    store_server_destroy(srv);
    return test_end();
}
