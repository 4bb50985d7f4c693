/* GPU tests (suite 'gpu', needs a CUDA device and NCCL): two emulated ranks on one GPU,
 * each a forked process (forked before any CUDA call) with the environment the daemon
 * gives emulated ranks (CUDA_VISIBLE_DEVICES, a distinct NCCL_HOSTID), joined through a
 * real store. (1) The worker's collective benchmark on device buffers (worker_gpu.h
 * hooks) for every op, every dtype NCCL has, sum/avg/min/max, in and out of place: every
 * point reports #wrong == 0 and a device-timed, positive busbw. (2) The watchdog: rank 1
 * is SIGKILLed after the communicator is up; rank 0's next allreduce must fail with
 * ERR_TIMEOUT or ERR_PEER (ncclCommAbort) within the timeout plus slack, never hang. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/clock.h"
#include "worker/comm/comm.h"
#include "worker/comm/comm_factory.h"
#include "worker/nn/cuda/gpu.h"
#include "common/report.h"
#include "common/spec.h"
#include "worker/store/store_client.h"
#include "daemon/store_server.h"
#include "tests/gpu/gpu_test.h"
#include "tests/unit/test.h"
#include "worker/worker_gpu.h"
#include "worker/workload_collective.h"

#define WORLD 2

static char store_addr[64];
static char store_run[32];       /* a store namespace per case: no stale NCCL id */
static struct store_server *srv; /* the parent's; children only connect */

static int next_run(void)
{
    static int k;
    struct err e = {0};
    snprintf(store_run, sizeof store_run, "gpu-%d", ++k);
    return store_server_add_run(srv, store_run, "pw", &e);
}

/* Child: rank r's environment as the daemon sets it for an emulated run. */
static void child_env(int r)
{
    char host[64];
    setenv("CUDA_VISIBLE_DEVICES", getenv("DDPB_TEST_GPU") ? getenv("DDPB_TEST_GPU") : "0", 1);
    snprintf(host, sizeof host, "ddpb-gputest-r%d", r);
    setenv("NCCL_HOSTID", host, 1);
}

static struct comm *child_comm(int r, const struct spec *s, struct store_client **sc,
                               int timeout_ms, struct err *e)
{
    *sc = store_client_connect(store_addr, store_run, "pw", r, 10000, NULL, e);
    if (!*sc)
        return NULL;
    struct rendezvous_env env = {.rank = r, .world_size = WORLD, .timeout_ms = timeout_ms};
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

static void spec_coll(struct spec *s, const char *op, const char *dtype, const char *redop,
                      bool inplace, int64_t seed)
{
    memset(s, 0, sizeof *s);
    s->workload = SPEC_WORKLOAD_COLLECTIVE;
    s->world_size = WORLD;
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

/* Forks WORLD ranks of s; returns how many points rank 0 reported, *wrong their #wrong,
 * *min_busbw the smallest busbw; -1 when a rank failed. */
static int run_ranks(const struct spec *s, int64_t *wrong, double *min_busbw)
{
    int pfd[2];
    if (next_run() < 0 || pipe(pfd) < 0)
        return -1;
    pid_t pid[WORLD];
    for (int r = 0; r < WORLD; r++) {
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
    for (int r = 0; r < WORLD; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (failed)
        return -1;
    int points = 0;
    *wrong = 0;
    *min_busbw = 1e30;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        struct err e;
        enum report_type type;
        json_t *ev = report_parse_line(line, strlen(line), &type, &e);
        struct report_collective rc;
        if (ev && type == REPORT_COLLECTIVE && report_collective_from_json(ev, &rc, &e) == 0) {
            points++;
            *wrong += rc.wrong;
            *min_busbw = rc.busbw_gbs < *min_busbw ? rc.busbw_gbs : *min_busbw;
        }
        json_decref(ev);
    }
    return points;
}

static void test_every_op_and_dtype(void)
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
                    spec_coll(&s, ops[o], dtypes[d], redops[rd], inplace, seed++);
                    int64_t wrong;
                    double busbw;
                    int n = run_ranks(&s, &wrong, &busbw);
                    T_CHECK_MSG(n == 4, "%s %s %s%s: %d points", ops[o], dtypes[d], redops[rd],
                                inplace ? " in place" : "", n);
                    T_CHECK_MSG(wrong == 0, "%s %s %s%s: %lld wrong", ops[o], dtypes[d],
                                redops[rd], inplace ? " in place" : "", (long long)wrong);
                    T_CHECK(busbw > 0);
                }
}

/* Rank 1 dies after the communicator is up; rank 0's allreduce must fail in time. */
static void test_watchdog_killed_rank(void)
{
    int sync[2], result[2];
    T_CHECK(next_run() == 0 && pipe(sync) == 0 && pipe(result) == 0);
    struct spec s;
    spec_coll(&s, "allreduce", "float32", "sum", false, 99);
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
    gpu_test_require_device();
    struct err e = {0};
    srv = store_server_create("127.0.0.1", 0, &e);
    if (!srv) {
        fprintf(stderr, "store: %s\n", e.msg);
        return 1;
    }
    snprintf(store_addr, sizeof store_addr, "127.0.0.1:%d", store_server_port(srv));
    TEST_RUN(test_every_op_and_dtype);
    TEST_RUN(test_watchdog_killed_rank);
    store_server_destroy(srv);
    return test_end();
}
