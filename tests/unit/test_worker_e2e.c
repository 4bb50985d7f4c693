/* End-to-end test of ddpbench-worker: a store server in this process, a resolved spec in
 * a temp dir, N=3 real worker processes (posix_spawn, binary from $DDPB_WORKER_BIN, set
 * by meson) each with a report pipe on fd 3, their lines read with report_parse_line.
 *   - a healthy run: hello and done from every rank, one checked collective event per
 *     size from rank 0 (wrong == 0, busbw > 0), exit status 0 everywhere;
 *   - every other op (reduce_scatter, all_gather, broadcast, sendrecv) over other dtypes,
 *     reductions and in place: checked events with wrong == 0 and the algorithm used;
 *   - a rank stopped with SIGSTOP mid-run, with the spec's comm_timeout_s of 2 s (no
 *     DDPB_TIMEOUT_MS): the others fail with a timeout naming the stopped rank, within
 *     a few seconds, not a hang;
 *   - a rank killed with SIGKILL mid-run (after rank 0 reported its first size): the
 *     others exit non-zero well within their timeout, each with an error event naming
 *     the killed rank as the peer.
 *   - elastic (spec "elastic"), a training run of 3 ranks: rank 2 killed after rank 0's
 *     12th step, the test publishing generation 1 ({0, 1}) as the daemon would; the
 *     survivors regroup, finish every epoch with the whole dataset's samples counted, and
 *     their step numbers never go back; for each strategy;
 *   - elastic with a replacement: after generation 1 resumed, a new rank 2 started with
 *     DDPB_ELASTIC_JOIN=1, elastic/join/2 = 2 and generation 2 ({0, 1, 2}, joiner 2):
 *     it receives the state and the three finish together.
 * Nothing here depends on timing luck: the kill waits for a progress event, and the
 * assertions are bounds far from the expected times. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/report.h"
#include "common/spec.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"

extern char **environ;

#define E2E_WORLD 3
#define E2E_SECRET "e2e-secret"
#define E2E_DEADLINE_MS 120000

struct e2e_rank {
    pid_t pid;
    int fd; /* read end of the report pipe, -1 at EOF */
    struct buf in;
    bool exited;
    int status;
    int hello, done, progress, collectives, errors;
    int64_t wrong;
    double min_busbw;
    int err_peer;
    char err_code[32], err_msg[400];
    char last_algorithm[16];
    int bad_lines;
    /* training */
    int steps, epochs, step_backwards, max_gen, max_gen_world;
    int64_t last_step;
    int64_t epoch_samples[8];
    double epoch_loss[8];
    int detect, regroup, resumed;
    int64_t lost_steps;
};

struct e2e {
    struct store_server *srv;
    char dir[64], spec_path[128], store_addr[64], run[32];
    struct e2e_rank r[E2E_WORLD];
    int victim;         /* rank to signal after rank 0's first progress event, -1: none */
    int victim_sig;     /* SIGKILL or SIGSTOP */
    int timeout_env_ms; /* DDPB_TIMEOUT_MS for the workers; 0: not set (the spec's) */
    int64_t killed_at;  /* monotonic ms, 0 before the kill */
    /* elastic: kill the victim after rank 0's kill_after_steps-th step, then publish
     * generation 1 without it; replace: start a replacement once generation 1 resumed */
    int kill_after_steps;
    bool replace, replaced;
    const char *bin;
};

static int e2e_write_spec(struct e2e *x, const char *spec_text, struct err *e)
{
    json_t *norm = spec_parse(spec_text, strlen(spec_text), e);
    if (!norm)
        return -1;
    json_t *runs = spec_expand(norm, 1, e);
    json_decref(norm);
    if (!runs)
        return -1;
    snprintf(x->spec_path, sizeof x->spec_path, "%s/spec.json", x->dir);
    int rc = json_dump_file(json_object_get(json_array_get(runs, 0), "spec"), x->spec_path, 0);
    json_decref(runs);
    return rc == 0 ? 0 : err_set(e, ERR_IO, NULL, "cannot write %s", x->spec_path);
}

static int e2e_start_store(struct e2e *x, const char *run, struct err *e)
{
    snprintf(x->dir, sizeof x->dir, "/tmp/ddpb-e2e-XXXXXX");
    if (!mkdtemp(x->dir))
        return err_errno(e, "mkdtemp");
    x->srv = store_server_create("127.0.0.1", 0, e);
    if (!x->srv)
        return -1;
    snprintf(x->run, sizeof x->run, "%s", run);
    snprintf(x->store_addr, sizeof x->store_addr, "127.0.0.1:%d", store_server_port(x->srv));
    return store_server_add_run(x->srv, run, E2E_SECRET, e);
}

/* Worker environment: this process's (sanitizer options, PATH) minus DDPB_*, plus ours.
 * Returns an owned NULL-terminated array of owned strings. */
static char **e2e_env(const struct e2e *x, int rank, bool join)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 16, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DDPB_", 5) != 0)
            env[k++] = strdup(environ[i]);
    char tmp[512];
#define E2E_PUT(...) (snprintf(tmp, sizeof tmp, __VA_ARGS__), env[k++] = strdup(tmp))
    E2E_PUT("DDPB_RUN=%s", x->run);
    E2E_PUT("DDPB_RANK=%d", rank);
    E2E_PUT("DDPB_WORLD_SIZE=%d", E2E_WORLD);
    E2E_PUT("DDPB_LOCAL_RANK=%d", rank);
    E2E_PUT("DDPB_STORE=%s", x->store_addr);
    E2E_PUT("DDPB_SECRET=%s", E2E_SECRET);
    E2E_PUT("DDPB_SPEC=%s", x->spec_path);
    if (x->timeout_env_ms)
        E2E_PUT("DDPB_TIMEOUT_MS=%d", x->timeout_env_ms);
    if (join)
        E2E_PUT("DDPB_ELASTIC_JOIN=1");
#undef E2E_PUT
    return env;
}

static void e2e_free_env(char **env)
{
    for (size_t i = 0; env[i]; i++)
        free(env[i]);
    free(env);
}

static int e2e_spawn_as(struct e2e *x, const char *bin, int rank, bool join, struct err *e)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return err_errno(e, "pipe");
    /* keep the write end above 3 so dup2 onto 3 is a real dup that clears CLOEXEC */
    int wfd = fcntl(p[1], F_DUPFD_CLOEXEC, 10);
    close(p[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, wfd, 3);
    char **env = e2e_env(x, rank, join);
    char *argv[] = {(char *)bin, NULL};
    struct e2e_rank *r = &x->r[rank];
    int rc = posix_spawn(&r->pid, bin, &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    e2e_free_env(env);
    close(wfd);
    r->fd = p[0];
    buf_init(&r->in);
    r->err_peer = -2;
    r->min_busbw = 1e300;
    if (rc != 0) {
        errno = rc;
        return err_errno(e, "posix_spawn %s", bin);
    }
    return 0;
}

static int e2e_spawn(struct e2e *x, const char *bin, int rank, struct err *e)
{
    return e2e_spawn_as(x, bin, rank, false, e);
}

/* What the daemon does on a lost slot (daemon/elastic.h): publish the next generation. */
static void e2e_publish(struct e2e *x, const char *key, const char *value)
{
    struct err e;
    if (store_server_set(x->srv, x->run, key, value, strlen(value), &e) < 0)
        fprintf(stderr, "store_server_set %s: %s\n", key, e.msg);
}

/* Rank 0's kill_after_steps-th step: the victim dies and generation 1 is the rest. */
static void e2e_elastic_kill(struct e2e *x)
{
    kill(x->r[x->victim].pid, SIGKILL);
    x->killed_at = clock_mono_ms();
    e2e_publish(x, "elastic/g1",
                "{\"gen\":1,\"members\":[0,1],\"joiners\":[],\"reason\":\"slot 2 lost\"}");
    e2e_publish(x, "elastic/gen", "1");
}

/* Generation 1 resumed: a replacement into slot 2, named in elastic/join/2, then
 * generation 2 with it as the joiner. */
static void e2e_elastic_replace(struct e2e *x)
{
    struct e2e_rank *r = &x->r[x->victim];
    struct err e;
    x->replaced = true;
    if (r->fd >= 0)
        close(r->fd);
    waitpid(r->pid, &r->status, 0);
    buf_free(&r->in);
    memset(r, 0, sizeof *r); /* the slot's counts are the replacement's from here */
    r->fd = -1;
    if (e2e_spawn_as(x, x->bin, x->victim, true, &e) < 0) {
        fprintf(stderr, "replacement: %s\n", e.msg);
        return;
    }
    e2e_publish(x, "elastic/join/2", "2");
    e2e_publish(x, "elastic/g2",
                "{\"gen\":2,\"members\":[0,1,2],\"joiners\":[2],\"reason\":\"slot 2 "
                "replaced\"}");
    e2e_publish(x, "elastic/gen", "2");
}

static void e2e_on_step(struct e2e *x, int rank, json_t *ev)
{
    struct e2e_rank *r = &x->r[rank];
    int64_t step = json_integer_value(json_object_get(ev, "step"));
    int gen = (int)json_integer_value(json_object_get(ev, "gen"));
    if (r->steps && step <= r->last_step)
        r->step_backwards++;
    r->last_step = step;
    r->steps++;
    if (gen >= r->max_gen) {
        r->max_gen = gen;
        r->max_gen_world = (int)json_integer_value(json_object_get(ev, "world"));
    }
    if (rank == 0 && x->kill_after_steps && r->steps == x->kill_after_steps && !x->killed_at)
        e2e_elastic_kill(x);
}

static void e2e_on_elastic(struct e2e *x, int rank, json_t *ev)
{
    struct e2e_rank *r = &x->r[rank];
    const char *what = json_string_value(json_object_get(ev, "event"));
    r->detect += strcmp(what, "detect") == 0;
    r->regroup += strcmp(what, "regroup") == 0;
    if (strcmp(what, "resumed") == 0) {
        r->resumed++;
        r->lost_steps = json_integer_value(json_object_get(ev, "lost_steps"));
        if (x->replace && !x->replaced && json_integer_value(json_object_get(ev, "gen")) == 1)
            e2e_elastic_replace(x);
    }
}

static void e2e_on_event(struct e2e *x, int rank, enum report_type type, json_t *ev)
{
    struct e2e_rank *r = &x->r[rank];
    struct err e;
    struct report_collective c;
    switch (type) {
    case REPORT_HELLO: r->hello++; break;
    case REPORT_STEP: e2e_on_step(x, rank, ev); break;
    case REPORT_ELASTIC: e2e_on_elastic(x, rank, ev); break;
    case REPORT_EPOCH: {
        int ep = (int)json_integer_value(json_object_get(ev, "epoch"));
        if (ep >= 0 && ep < 8) {
            r->epoch_samples[ep] = json_integer_value(json_object_get(ev, "samples"));
            r->epoch_loss[ep] = json_number_value(json_object_get(ev, "train_loss"));
        }
        r->epochs++;
        break;
    }
    case REPORT_DONE: r->done++; break;
    case REPORT_PROGRESS:
        r->progress++;
        if (rank == 0 && x->victim >= 0 && !x->killed_at && !x->kill_after_steps) {
            kill(x->r[x->victim].pid, x->victim_sig);
            x->killed_at = clock_mono_ms();
        }
        break;
    case REPORT_COLLECTIVE:
        if (report_collective_from_json(ev, &c, &e) < 0) {
            r->bad_lines++;
            break;
        }
        r->collectives++;
        r->wrong += c.wrong;
        snprintf(r->last_algorithm, sizeof r->last_algorithm, "%s", c.algorithm);
        r->min_busbw = c.busbw_gbs < r->min_busbw ? c.busbw_gbs : r->min_busbw;
        break;
    case REPORT_ERROR: {
        json_t *peer = json_object_get(ev, "peer");
        r->errors++;
        r->err_peer = peer ? (int)json_integer_value(peer) : -1;
        snprintf(r->err_code, sizeof r->err_code, "%s",
                 json_string_value(json_object_get(ev, "code")));
        snprintf(r->err_msg, sizeof r->err_msg, "%s",
                 json_string_value(json_object_get(ev, "message")));
        break;
    }
    default: break;
    }
}

static void e2e_lines(struct e2e *x, int rank)
{
    struct e2e_rank *r = &x->r[rank];
    uint8_t *nl;
    while ((nl = memchr(r->in.data, '\n', r->in.len))) {
        size_t len = (size_t)(nl - r->in.data);
        enum report_type type;
        struct err e;
        json_t *ev = report_parse_line((const char *)r->in.data, len, &type, &e);
        if (!ev || json_integer_value(json_object_get(ev, "rank")) != rank)
            r->bad_lines++;
        else
            e2e_on_event(x, rank, type, ev);
        json_decref(ev);
        buf_consume(&r->in, len + 1);
    }
}

/* Reads every pipe to EOF and reaps every worker, or kills them at the deadline. */
static void e2e_collect(struct e2e *x)
{
    int64_t deadline = clock_mono_ms() + E2E_DEADLINE_MS;
    for (;;) {
        struct pollfd pfd[E2E_WORLD];
        int open = 0;
        for (int i = 0; i < E2E_WORLD; i++) {
            pfd[i] = (struct pollfd){.fd = x->r[i].fd, .events = POLLIN};
            open += x->r[i].fd >= 0;
        }
        if (!open || clock_ms_left(deadline) == 0)
            break;
        /* a stopped victim keeps its pipe open: end it once everyone else is gone */
        if (x->killed_at && x->victim_sig == SIGSTOP && open == 1 && x->r[x->victim].fd >= 0)
            kill(x->r[x->victim].pid, SIGKILL);
        poll(pfd, E2E_WORLD, 200);
        for (int i = 0; i < E2E_WORLD; i++) {
            if (pfd[i].fd < 0 || !pfd[i].revents)
                continue;
            uint8_t chunk[4096];
            ssize_t n = read(pfd[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                buf_append(&x->r[i].in, chunk, (size_t)n);
                e2e_lines(x, i);
            } else if (n == 0 || errno != EINTR) {
                close(x->r[i].fd);
                x->r[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < E2E_WORLD; i++) {
        struct e2e_rank *r = &x->r[i];
        while (!r->exited) {
            pid_t p = waitpid(r->pid, &r->status, WNOHANG);
            if (p == r->pid)
                r->exited = true;
            else if (clock_ms_left(deadline) == 0)
                kill(r->pid, SIGKILL);
            else
                usleep(10000);
        }
        if (r->fd >= 0)
            close(r->fd);
        r->fd = -1;
    }
}

static void e2e_cleanup(struct e2e *x)
{
    for (int i = 0; i < E2E_WORLD; i++)
        buf_free(&x->r[i].in);
    store_server_destroy(x->srv);
    if (x->spec_path[0])
        unlink(x->spec_path);
    rmdir(x->dir);
}

static int e2e_run_set(struct e2e *x, const char *run, const char *spec_text, int victim,
                       int sig, int timeout_env_ms, struct err *e);

/* Starts the store and E2E_WORLD workers on spec_text, then collects everything. */
static int e2e_run(struct e2e *x, const char *run, const char *spec_text, int victim, int sig,
                   int timeout_env_ms, struct err *e)
{
    memset(x, 0, sizeof *x);
    return e2e_run_set(x, run, spec_text, victim, sig, timeout_env_ms, e);
}

/* e2e_run on an x whose elastic fields are set already. */
static int e2e_run_set(struct e2e *x, const char *run, const char *spec_text, int victim,
                       int sig, int timeout_env_ms, struct err *e)
{
    x->victim = victim;
    x->victim_sig = sig;
    x->timeout_env_ms = timeout_env_ms;
    for (int i = 0; i < E2E_WORLD; i++)
        x->r[i].fd = -1;
    const char *bin = getenv("DDPB_WORKER_BIN");
    if (!bin || !bin[0])
        return err_set(e, ERR_INVALID, NULL, "DDPB_WORKER_BIN is not set (meson sets it)");
    x->bin = bin;
    if (e2e_start_store(x, run, e) < 0 || e2e_write_spec(x, spec_text, e) < 0)
        return -1;
    for (int i = 0; i < E2E_WORLD; i++) {
        if (e2e_spawn(x, bin, i, e) < 0) {
            for (int j = 0; j < i; j++)
                kill(x->r[j].pid, SIGKILL);
            e2e_collect(x);
            return -1;
        }
    }
    e2e_collect(x);
    return 0;
}

static void test_e2e_healthy_run(void)
{
    struct e2e x;
    struct err e;
    /* sizes 4K, 32K, 256K, 2M: ring chunks of uneven and even lengths */
    const char *spec =
        "{\"workload\": \"collective\", \"world_size\": 3, \"min_bytes\": \"4K\","
        " \"max_bytes\": \"2M\", \"factor\": 8, \"iters\": 5, \"warmup\": 2,"
        " \"check\": true, \"seed\": 7}";
    int rc = e2e_run(&x, "e2e-ok", spec, -1, 0, 30000, &e);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    char why[600] = "";
    for (int i = 0; i < E2E_WORLD && !why[0]; i++) {
        const struct e2e_rank *r = &x.r[i];
        if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0 || r->hello != 1 ||
            r->done != 1 || r->errors || r->bad_lines)
            snprintf(why, sizeof why,
                     "rank %d: status %d hello %d done %d errors %d bad lines %d: %s %s", i,
                     r->status, r->hello, r->done, r->errors, r->bad_lines, r->err_code,
                     r->err_msg);
    }
    int collectives = x.r[0].collectives, others = x.r[1].collectives + x.r[2].collectives;
    int64_t wrong = x.r[0].wrong;
    double busbw = x.r[0].min_busbw;
    e2e_cleanup(&x);
    T_CHECK_MSG(!why[0], "%s", why);
    T_EQ_INT(collectives, 4);
    T_EQ_INT(others, 0);
    T_EQ_INT(wrong, 0);
    T_CHECK_MSG(busbw > 0 && busbw < 1e6, "busbw %g", busbw);
}

static void test_e2e_killed_rank_is_named(void)
{
    struct e2e x;
    struct err e;
    /* many repeats of one size: the run is far from over when rank 0 reports the first */
    const char *spec =
        "{\"workload\": \"collective\", \"world_size\": 3, \"min_bytes\": \"1M\","
        " \"max_bytes\": \"1M\", \"iters\": 20, \"warmup\": 1,"
        " \"repeats\": 100, \"check\": false}";
    int64_t t0 = clock_mono_ms();
    int rc = e2e_run(&x, "e2e-kill", spec, 1, SIGKILL, 30000, &e);
    int64_t after_kill = clock_mono_ms() - (x.killed_at ? x.killed_at : t0);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    char why[600] = "";
    T_CHECK(x.killed_at > 0);
    T_CHECK(WIFSIGNALED(x.r[1].status) && WTERMSIG(x.r[1].status) == SIGKILL);
    for (int i = 0; i < E2E_WORLD && !why[0]; i++) {
        const struct e2e_rank *r = &x.r[i];
        if (i == 1)
            continue;
        if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) == 0 || r->errors != 1 ||
            r->done != 0 || r->err_peer != 1 || strcmp(r->err_code, "peer") != 0 ||
            !strstr(r->err_msg, "rank "))
            snprintf(why, sizeof why, "rank %d: status %d errors %d done %d peer %d: %s: %s", i,
                     r->status, r->errors, r->done, r->err_peer, r->err_code, r->err_msg);
    }
    e2e_cleanup(&x);
    T_CHECK_MSG(!why[0], "%s", why);
    /* far below the 30 s communicator timeout: a dead peer is seen, not waited out */
    T_CHECK_MSG(after_kill < 20000, "survivors took %lld ms", (long long)after_kill);
}

/* Every op but allreduce end to end, checked: (op, dtype, redop, inplace). */
static void test_e2e_every_op(void)
{
    static const char *const specs[] = {
        "\"op\": \"reduce_scatter\", \"dtype\": \"bfloat16\", \"redop\": \"avg\", \"inplace\": "
        "true",
        "\"op\": \"all_gather\", \"dtype\": \"int64\", \"inplace\": true",
        "\"op\": \"broadcast\", \"dtype\": \"float16\", \"algorithm\": \"tree\"",
        "\"op\": \"sendrecv\", \"dtype\": \"int32\"",
        "\"op\": \"allreduce\", \"dtype\": \"float32\", \"redop\": \"min\", \"algorithm\": "
        "\"rd\"",
    };
    /* sendrecv's auto on one node is shared memory (transport auto) */
    static const char *const algs[] = {NULL, NULL, "tree", "shm", "rd"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        char spec[512], run[32];
        snprintf(spec, sizeof spec,
                 "{\"workload\": \"collective\", \"world_size\": 3, %s, "
                 "\"sizes\": [\"24\", \"96K\", \"3M\"], \"iters\": 3, \"warmup\": 1}",
                 specs[k]);
        snprintf(run, sizeof run, "e2e-op%zu", k);
        struct e2e x;
        struct err e;
        int rc = e2e_run(&x, run, spec, -1, 0, 30000, &e);
        T_CHECK_MSG(rc == 0, "%s", e.msg);
        char why[600] = "";
        for (int i = 0; i < E2E_WORLD && !why[0]; i++)
            if (!WIFEXITED(x.r[i].status) || WEXITSTATUS(x.r[i].status) != 0 || x.r[i].errors)
                snprintf(why, sizeof why, "%s: rank %d: %s", specs[k], i, x.r[i].err_msg);
        int collectives = x.r[0].collectives;
        int64_t wrong = x.r[0].wrong;
        bool alg_ok = !algs[k] || strcmp(x.r[0].last_algorithm, algs[k]) == 0;
        char alg[16];
        snprintf(alg, sizeof alg, "%s", x.r[0].last_algorithm);
        e2e_cleanup(&x);
        T_CHECK_MSG(!why[0], "%s", why);
        T_CHECK_MSG(collectives == 3 && wrong == 0, "%s: %d events, %lld wrong", specs[k],
                    collectives, (long long)wrong);
        T_CHECK_MSG(alg_ok, "%s: algorithm %s", specs[k], alg);
    }
}

/* SIGSTOP: the spec's comm_timeout_s (2 s) bounds the wait; the stopped rank is named. */
static void test_e2e_stopped_rank_times_out(void)
{
    struct e2e x;
    struct err e;
    const char *spec =
        "{\"workload\": \"collective\", \"world_size\": 3, \"min_bytes\": \"1M\","
        " \"max_bytes\": \"1M\", \"iters\": 20, \"warmup\": 1,"
        " \"repeats\": 100, \"check\": false, \"comm_timeout_s\": 2}";
    int rc = e2e_run(&x, "e2e-stop", spec, 1, SIGSTOP, 0, &e);
    int64_t after_stop = clock_mono_ms() - x.killed_at;
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    T_CHECK(x.killed_at > 0);
    char why[600] = "";
    for (int i = 0; i < E2E_WORLD && !why[0]; i += 2) {
        const struct e2e_rank *r = &x.r[i];
        if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) == 0 || r->errors != 1 ||
            r->err_peer != 1 || strcmp(r->err_code, "timeout") != 0)
            snprintf(why, sizeof why, "rank %d: status %d errors %d peer %d: %s: %s", i,
                     r->status, r->errors, r->err_peer, r->err_code, r->err_msg);
    }
    e2e_cleanup(&x);
    T_CHECK_MSG(!why[0], "%s", why);
    /* 2 s of silence, up to 2 s to hear the other rank's verdict, start-up slack */
    T_CHECK_MSG(after_stop < 15000, "survivors took %lld ms", (long long)after_stop);
}

#define E2E_SAMPLES 480 /* 20 steps of 8 a rank per epoch at 3 ranks, 30 at 2 */

/* A 3-rank elastic training run of strategy on the synthetic set, 2 epochs. */
static void e2e_elastic_spec(char *out, size_t len, const char *strategy, const char *more)
{
    snprintf(out, len,
             "{\"workload\": \"train\", \"world_size\": 3, \"model\": \"mnist-cnn\","
             " \"epochs\": 2, \"batch_size\": 8, \"threads\": 1, \"strategy\": \"%s\","
             " \"dataset\": {\"name\": \"synthetic\", \"samples\": %d},"
             " \"optimizer\": {\"type\": \"adam\", \"lr\": 0.001},"
             " \"elastic\": {\"min_ranks\": 2, \"max_ranks\": 3, \"commit_every\": 5}%s}",
             strategy, E2E_SAMPLES, more);
}

/* A survivor's verdict: exit 0 with done, no error, steps never back, the last
 * generation's world; rank 0: regrouped, resumed, every epoch with (nearly) every sample:
 * the remainder that a new world's batches do not divide is left out, as the loader
 * leaves it out of any epoch. */
static void e2e_elastic_verdict(const struct e2e *x, int rank, int gen, int world, char *why,
                                size_t len)
{
    const struct e2e_rank *r = &x->r[rank];
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0 || r->done != 1 || r->errors ||
        r->bad_lines || r->step_backwards || r->max_gen != gen || r->max_gen_world != world) {
        snprintf(why, len,
                 "rank %d: status %d done %d errors %d bad %d backwards %d gen %d world %d: %s",
                 rank, r->status, r->done, r->errors, r->bad_lines, r->step_backwards,
                 r->max_gen, r->max_gen_world, r->err_msg);
        return;
    }
    if (rank != 0)
        return;
    if (r->regroup < 1 || r->resumed < 1 || r->lost_steps < 0 || r->epochs != 2) {
        snprintf(why, len, "rank 0: regroup %d resumed %d lost %lld epochs %d", r->regroup,
                 r->resumed, (long long)r->lost_steps, r->epochs);
        return;
    }
    for (int ep = 0; ep < 2; ep++)
        if (r->epoch_samples[ep] > E2E_SAMPLES ||
            r->epoch_samples[ep] <= E2E_SAMPLES - 2 * 3 * 8)
            snprintf(why, len, "epoch %d: %lld samples of %d", ep,
                     (long long)r->epoch_samples[ep], E2E_SAMPLES);
}

/* An elastic run of strategy whose rank 2 is killed after rank 0's 12th step (and, with
 * replace, replaced once generation 1 resumed), collected into x. */
static int e2e_elastic_run(struct e2e *x, const char *strategy, const char *more,
                           const char *run, bool replace, struct err *e)
{
    char spec[1024];
    e2e_elastic_spec(spec, sizeof spec, strategy, more);
    memset(x, 0, sizeof *x);
    x->kill_after_steps = 12;
    x->replace = replace;
    return e2e_run_set(x, run, spec, 2, SIGKILL, 30000, e);
}

/* Rank 2 killed mid-run: the other two regroup as generation 1 and finish, whatever the
 * strategy (ZeRO's shards re-sliced from 3 ranks to 2). The kill comes after the commit
 * of step 10 and before the one of step 15 can complete, so every strategy restores the
 * same commit and trains the same math: their epochs' losses agree with naive's to
 * float32 summation order (a lost optimizer state or a shard restored to the wrong place
 * would not). */
static void test_e2e_elastic_survivors_finish(void)
{
    static const char *const strategies[] = {"naive", "ddp", "horovod", "zero1", "zero2"};
    double loss[2] = {0, 0};
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        struct e2e x;
        struct err e;
        char run[32], why[700] = "";
        snprintf(run, sizeof run, "e2e-el-%zu", k);
        T_CHECK_MSG(e2e_elastic_run(&x, strategies[k], "", run, false, &e) == 0, "%s", e.msg);
        T_CHECK_MSG(x.killed_at > 0, "%s: the victim was never killed", strategies[k]);
        for (int i = 0; i < 2 && !why[0]; i++)
            e2e_elastic_verdict(&x, i, 1, 2, why, sizeof why);
        int detect = x.r[0].detect + x.r[1].detect;
        for (int ep = 0; ep < 2 && !why[0]; ep++) {
            double l = x.r[0].epoch_loss[ep];
            if (k == 0)
                loss[ep] = l;
            else if (!(fabs(l - loss[ep]) <= 1e-4 * fabs(loss[ep])))
                snprintf(why, sizeof why, "epoch %d: train loss %.7f, naive's %.7f", ep, l,
                         loss[ep]);
        }
        e2e_cleanup(&x);
        T_CHECK_MSG(!why[0], "%s: %s", strategies[k], why);
        T_CHECK_MSG(detect >= 1, "%s: no rank reported detect", strategies[k]);
    }
}

/* ... and a replacement joins as generation 2, receives the state and finishes with
 * them (ZeRO re-sliced 3 -> 2 -> 3). */
static void test_e2e_elastic_replacement_joins(void)
{
    static const char *const strategies[] = {"ddp", "zero2"};
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        struct e2e x;
        struct err e;
        char run[32], why[700] = "";
        snprintf(run, sizeof run, "e2e-elj-%zu", k);
        T_CHECK_MSG(e2e_elastic_run(&x, strategies[k], "", run, true, &e) == 0, "%s", e.msg);
        T_CHECK_MSG(x.replaced, "%s: generation 1 never resumed", strategies[k]);
        for (int i = 0; i < 3 && !why[0]; i++)
            e2e_elastic_verdict(&x, i, 2, 3, why, sizeof why);
        int hello = x.r[2].hello;
        e2e_cleanup(&x);
        T_CHECK_MSG(!why[0], "%s: %s", strategies[k], why);
        T_EQ_INT(hello, 1);
    }
}

/* Gradient accumulation (2 micro-batches a step; a commit's data position is mid-step
 * nowhere) and zero1 under it: the survivors finish every epoch. */
static void test_e2e_elastic_accumulation(void)
{
    struct e2e x;
    struct err e;
    char why[700] = "";
    T_CHECK_MSG(e2e_elastic_run(&x, "zero1", ", \"accumulate\": 2", "e2e-el-acc", false, &e) ==
                    0,
                "%s", e.msg);
    T_CHECK(x.killed_at > 0);
    for (int i = 0; i < 2 && !why[0]; i++)
        e2e_elastic_verdict(&x, i, 1, 2, why, sizeof why);
    e2e_cleanup(&x);
    T_CHECK_MSG(!why[0], "%s", why);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    TEST_RUN(test_e2e_healthy_run);
    TEST_RUN(test_e2e_every_op);
    TEST_RUN(test_e2e_stopped_rank_times_out);
    TEST_RUN(test_e2e_killed_rank_is_named);
    TEST_RUN(test_e2e_elastic_survivors_finish);
    TEST_RUN(test_e2e_elastic_replacement_joins);
    TEST_RUN(test_e2e_elastic_accumulation);
    return test_end();
}
