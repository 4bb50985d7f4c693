/* Unit tests for worker/comm (comm.c, tcp.c): ranks run as threads of this process and
 * build their mesh with comm_tcp_listen/comm_tcp_connect (no store). Covers exact ring
 * allreduce results for many world sizes and awkward counts, in place and out of place,
 * byte accounting, and the failure paths: a peer that drops its connections, a silent
 * peer (timeout, not a hang), the abort flag, a wrong run secret, and garbage or silent
 * clients on the peer port during setup. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "net.h"
#include "tcp.h"
#include "test.h"

#define MAX_WORLD 6

struct mesh {
    int n;
    struct comm *c[MAX_WORLD];
    struct err e[MAX_WORLD];
};

struct setup_arg {
    struct comm_tcp *t;
    const char *const *addrs;
    struct comm **out;
    struct err *e;
};

static void *setup_thread(void *p)
{
    struct setup_arg *a = p;
    *a->out = comm_tcp_connect(a->t, a->addrs, a->e);
    return NULL;
}

static struct comm_tcp_config mesh_config(int rank, int n, int timeout_ms,
                                          const atomic_bool *abort_flag, const char *secret)
{
    return (struct comm_tcp_config){.rank = rank, .world_size = n, .listen_host = "127.0.0.1",
                                    .timeout_ms = timeout_ms, .abort_flag = abort_flag,
                                    .algorithm = "auto", .secret = secret};
}

/* Listens all ranks; *_before_connect runs with the listeners up (to poke at ports). */
static int mesh_listen(struct comm_tcp **t, char addrs[][64], int n, int timeout_ms,
                       const atomic_bool *abort_flag, const char *const *secrets)
{
    struct err e;
    for (int r = 0; r < n; r++) {
        struct comm_tcp_config cfg =
            mesh_config(r, n, timeout_ms, abort_flag, secrets ? secrets[r] : "s3cret");
        t[r] = comm_tcp_listen(&cfg, &e);
        if (!t[r])
            return -1;
        snprintf(addrs[r], 64, "%s", comm_tcp_address(t[r]));
    }
    return 0;
}

static void mesh_connect(struct mesh *m, struct comm_tcp **t, char addrs[][64])
{
    const char *ap[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    struct setup_arg args[MAX_WORLD];
    for (int r = 0; r < m->n; r++)
        ap[r] = addrs[r];
    for (int r = 0; r < m->n; r++) {
        args[r] = (struct setup_arg){t[r], ap, &m->c[r], &m->e[r]};
        pthread_create(&th[r], NULL, setup_thread, &args[r]);
    }
    for (int r = 0; r < m->n; r++)
        pthread_join(th[r], NULL);
}

/* Returns 0 when every rank built its communicator. */
static int mesh_build(struct mesh *m, int n, int timeout_ms, const atomic_bool *abort_flag)
{
    struct comm_tcp *t[MAX_WORLD];
    char addrs[MAX_WORLD][64];
    memset(m, 0, sizeof *m);
    m->n = n;
    if (mesh_listen(t, addrs, n, timeout_ms, abort_flag, NULL) < 0)
        return -1;
    mesh_connect(m, t, addrs);
    for (int r = 0; r < n; r++)
        if (!m->c[r])
            return -1;
    return 0;
}

static void mesh_destroy(struct mesh *m)
{
    for (int r = 0; r < m->n; r++)
        comm_destroy(m->c[r]);
    memset(m, 0, sizeof *m);
}

static float input_value(int rank, size_t i)
{
    return (float)((int)((i * 7u + (size_t)rank * 13u) % 17u) - 8);
}

static float expected_value(int n, size_t i)
{
    float s = 0;
    for (int r = 0; r < n; r++)
        s += input_value(r, i);
    return s;
}

/* ---- correctness ------------------------------------------------------------ */

struct rank_job {
    struct comm *c;
    const size_t *counts;
    int ncounts;
    int failures;
    char why[256];
    struct err e;
};

static void rank_job_check(struct rank_job *j, const float *out, size_t count, bool inplace)
{
    for (size_t i = 0; i < count; i++) {
        if (out[i] != expected_value(j->c->world_size, i)) {
            if (!j->failures)
                snprintf(j->why, sizeof j->why,
                         "rank %d count %zu %s: element %zu is %g, want %g", j->c->rank, count,
                         inplace ? "in-place" : "out-of-place", i, (double)out[i],
                         (double)expected_value(j->c->world_size, i));
            j->failures++;
            return;
        }
    }
}

static void *allreduce_job(void *p)
{
    struct rank_job *j = p;
    size_t maxc = 1;
    for (int k = 0; k < j->ncounts; k++)
        maxc = j->counts[k] > maxc ? j->counts[k] : maxc;
    float *send = malloc(maxc * sizeof *send), *recv = malloc(maxc * sizeof *recv);
    for (int k = 0; k < j->ncounts && !j->failures; k++) {
        size_t count = j->counts[k];
        for (int inplace = 0; inplace < 2 && !j->failures; inplace++) {
            float *in = inplace ? recv : send;
            for (size_t i = 0; i < count; i++) {
                in[i] = input_value(j->c->rank, i);
                if (!inplace)
                    recv[i] = -1234.0f;
            }
            if (comm_allreduce(j->c, in, recv, count, COMM_FLOAT32, COMM_SUM, &j->e) != 0) {
                snprintf(j->why, sizeof j->why, "rank %d count %zu: %s", j->c->rank, count,
                         j->e.msg);
                j->failures++;
                break;
            }
            rank_job_check(j, recv, count, inplace);
            for (size_t i = 0; !inplace && i < count && !j->failures; i++) {
                if (send[i] != input_value(j->c->rank, i)) {
                    snprintf(j->why, sizeof j->why, "rank %d: out-of-place changed send[%zu]",
                             j->c->rank, i);
                    j->failures++;
                }
            }
        }
    }
    free(send);
    free(recv);
    return NULL;
}

static int run_jobs(struct mesh *m, const size_t *counts, int ncounts, char *why,
                    size_t whylen)
{
    pthread_t th[MAX_WORLD];
    struct rank_job jobs[MAX_WORLD];
    for (int r = 0; r < m->n; r++) {
        jobs[r] = (struct rank_job){.c = m->c[r], .counts = counts, .ncounts = ncounts};
        pthread_create(&th[r], NULL, allreduce_job, &jobs[r]);
    }
    int failures = 0;
    for (int r = 0; r < m->n; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].failures && !failures)
            snprintf(why, whylen, "%s", jobs[r].why);
        failures += jobs[r].failures;
    }
    return failures;
}

static void test_comm_dtype_names(void)
{
    enum comm_dtype d;
    enum comm_redop op;
    T_EQ_INT(comm_dtype_parse("float32", &d), 0);
    T_EQ_INT(d, COMM_FLOAT32);
    T_EQ_INT(comm_dtype_size(COMM_FLOAT32), 4);
    T_EQ_INT(comm_dtype_parse("bfloat16", &d), 0);
    T_EQ_INT(d, COMM_BFLOAT16);
    T_EQ_INT(comm_dtype_size(d), 2);
    T_EQ_INT(comm_dtype_size(COMM_INT64), 8);
    T_EQ_STR(comm_dtype_name(COMM_INT32), "int32");
    T_CHECK(comm_dtype_parse("float33", &d) < 0);
    T_CHECK(comm_dtype_parse("", &d) < 0);
    T_EQ_INT(comm_redop_parse("max", &op), 0);
    T_EQ_INT(op, COMM_MAX);
    T_EQ_STR(comm_redop_name(COMM_SUM), "sum");
    T_CHECK(comm_redop_parse("prod", &op) < 0);
    T_EQ_STR(comm_dtype_name((enum comm_dtype)99), "unknown");
    T_EQ_INT(comm_dtype_size((enum comm_dtype)99), 0);
}

static void test_comm_tcp_allreduce_exact(void)
{
    for (int n = 1; n <= 5; n++) {
        struct mesh m;
        T_CHECK_MSG(mesh_build(&m, n, 20000, NULL) == 0, "world %d: setup failed", n);
        size_t counts[] = {0, 1, 3, (size_t)(n - 1), (size_t)(n + 1), 1000003};
        char why[256] = "";
        int failures = run_jobs(&m, counts, 6, why, sizeof why);
        for (int r = 0; r < n; r++)
            T_EQ_STR(m.c[r]->last_algorithm, n == 1 ? "local" : "ring");
        mesh_destroy(&m);
        T_CHECK_MSG(failures == 0, "world %d: %s", n, why);
    }
}

/* Ring traffic per rank: every chunk but chunk r+1 in reduce-scatter, every chunk but
 * chunk r+2 in all-gather. */
static void test_comm_tcp_bytes_sent_and_barrier(void)
{
    struct mesh m;
    int n = 3;
    T_CHECK(mesh_build(&m, n, 20000, NULL) == 0);
    size_t counts[] = {10};
    char why[256] = "";
    int failures = run_jobs(&m, counts, 1, why, sizeof why);
    uint64_t sent[3];
    for (int r = 0; r < n; r++)
        sent[r] = m.c[r]->bytes_sent;
    /* chunks of 10 over 3 ranks: 4, 3, 3 elements */
    size_t len[3] = {4, 3, 3};
    bool ok = failures == 0;
    for (int r = 0; r < n && ok; r++) {
        size_t per_op = (10 - len[(r + 1) % 3]) + (10 - len[(r + 2) % 3]);
        /* two ops (out-of-place, in-place) */
        ok = sent[r] == 2 * per_op * 4;
    }
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
    T_CHECK_MSG(ok, "bytes_sent %llu %llu %llu", (unsigned long long)sent[0],
                (unsigned long long)sent[1], (unsigned long long)sent[2]);
}

struct barrier_arg {
    struct comm *c;
    int rc[5];
};

static void *barrier_job(void *p)
{
    struct barrier_arg *a = p;
    struct err e;
    for (int i = 0; i < 5; i++)
        a->rc[i] = comm_barrier(a->c, &e);
    return NULL;
}

static void test_comm_tcp_barrier(void)
{
    for (int n = 1; n <= 4; n++) {
        struct mesh m;
        T_CHECK(mesh_build(&m, n, 20000, NULL) == 0);
        pthread_t th[4];
        struct barrier_arg a[4];
        for (int r = 0; r < n; r++) {
            a[r] = (struct barrier_arg){.c = m.c[r]};
            pthread_create(&th[r], NULL, barrier_job, &a[r]);
        }
        int bad = 0;
        for (int r = 0; r < n; r++) {
            pthread_join(th[r], NULL);
            for (int i = 0; i < 5; i++)
                bad += a[r].rc[i] != 0;
        }
        mesh_destroy(&m);
        T_EQ_INT(bad, 0);
    }
}

static void test_comm_tcp_unsupported_and_bad_config(void)
{
    struct mesh m;
    struct err e;
    T_CHECK(mesh_build(&m, 1, 2000, NULL) == 0);
    int32_t x = 1;
    T_CHECK(comm_allreduce(m.c[0], &x, &x, 1, COMM_INT32, COMM_SUM, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(strstr(e.msg, "not supported yet") != NULL);
    float f = 1;
    T_CHECK(comm_allreduce(m.c[0], &f, &f, 1, COMM_FLOAT32, COMM_MAX, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(comm_allreduce(m.c[0], NULL, NULL, 4, COMM_FLOAT32, COMM_SUM, &e) < 0);
    mesh_destroy(&m);

    struct comm_tcp_config cfg = mesh_config(0, 2, 1000, NULL, "s");
    cfg.algorithm = "tree";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "algorithm");
    cfg = mesh_config(2, 2, 1000, NULL, "s");
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "rank");
    cfg = mesh_config(0, 2, 0, NULL, "s");
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    T_EQ_STR(e.field, "timeout_ms");
    cfg = mesh_config(0, 2, 1000, NULL, "s");
    cfg.listen_host = "no.such.host.invalid";
    T_CHECK(comm_tcp_listen(&cfg, &e) == NULL);
    /* a peer address that does not parse */
    cfg = mesh_config(0, 2, 1000, NULL, "s");
    struct comm_tcp *t = comm_tcp_listen(&cfg, &e);
    T_CHECK(t != NULL);
    const char *addrs[2] = {comm_tcp_address(t), "nonsense"};
    T_CHECK(comm_tcp_connect(t, addrs, &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
}

/* ---- failures ------------------------------------------------------------------ */

struct fail_job {
    struct comm *c;
    size_t count;
    int rc;
    struct err e;
    int64_t ms;
};

static void *fail_job_run(void *p)
{
    struct fail_job *j = p;
    float *buf = calloc(j->count, sizeof *buf);
    int64_t t0 = clock_mono_ms();
    /* several ops so the failure lands mid-stream whatever the timing */
    j->rc = 0;
    for (int i = 0; i < 50 && j->rc == 0; i++)
        j->rc = comm_allreduce(j->c, buf, buf, j->count, COMM_FLOAT32, COMM_SUM, &j->e);
    j->ms = clock_mono_ms() - t0;
    free(buf);
    return NULL;
}

/* Runs every rank but `victim` on fail_job; calls act(victim comm) after delay_ms. */
static void run_with_victim(struct mesh *m, int victim, size_t count, int delay_ms,
                            void (*act)(struct mesh *, int), struct fail_job *jobs)
{
    pthread_t th[MAX_WORLD];
    for (int r = 0; r < m->n; r++) {
        if (r == victim)
            continue;
        jobs[r] = (struct fail_job){.c = m->c[r], .count = count};
        pthread_create(&th[r], NULL, fail_job_run, &jobs[r]);
    }
    usleep((useconds_t)delay_ms * 1000);
    if (act)
        act(m, victim);
    for (int r = 0; r < m->n; r++)
        if (r != victim)
            pthread_join(th[r], NULL);
}

static void drop_victim(struct mesh *m, int victim) { comm_tcp_drop_connections(m->c[victim]); }

static void test_comm_tcp_peer_closes_mid_operation(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 4, 20000, NULL) == 0);
    struct fail_job jobs[4];
    run_with_victim(&m, 2, 1u << 20, 200, drop_victim, jobs);
    char msg[512] = "";
    int wrong = 0;
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        if (jobs[r].rc == 0 || jobs[r].e.code != ERR_PEER || m.c[r]->error_peer != 2 ||
            !strstr(jobs[r].e.msg, "rank 2") || jobs[r].ms > 15000) {
            wrong++;
            snprintf(msg, sizeof msg, "rank %d: rc %d code %s peer %d after %lld ms: %s", r,
                     jobs[r].rc, err_code_name(jobs[r].e.code), m.c[r]->error_peer,
                     (long long)jobs[r].ms, jobs[r].e.msg);
        }
    }
    T_CHECK(strstr(jobs[3].e.msg, "allreduce: rank 2") == jobs[3].e.msg);
    T_EQ_STR(m.c[3]->error_op, "allreduce");
    /* a broken communicator refuses further work */
    struct err e;
    float f = 0;
    T_CHECK(comm_allreduce(m.c[0], &f, &f, 1, COMM_FLOAT32, COMM_SUM, &e) < 0);
    T_CHECK(strstr(e.msg, "unusable") != NULL);
    mesh_destroy(&m);
    T_CHECK_MSG(wrong == 0, "%s", msg);
}

static void test_comm_tcp_silent_peer_times_out(void)
{
    struct mesh m;
    T_CHECK(mesh_build(&m, 3, 600, NULL) == 0);
    struct fail_job jobs[3];
    run_with_victim(&m, 1, 1000, 0, NULL, jobs);
    for (int r = 0; r < 3; r++) {
        if (r == 1)
            continue;
        T_CHECK_MSG(jobs[r].rc < 0 && jobs[r].e.code == ERR_TIMEOUT, "rank %d: %s", r,
                    jobs[r].e.msg);
        T_CHECK_MSG(jobs[r].ms >= 500 && jobs[r].ms < 10000, "rank %d took %lld ms", r,
                    (long long)jobs[r].ms);
        T_CHECK(strstr(jobs[r].e.msg, "timed out after 600 ms waiting for rank") != NULL);
    }
    /* rank 2 receives from the silent rank 1 */
    T_CHECK_MSG(strstr(jobs[2].e.msg, "waiting for rank 1") != NULL, "%s", jobs[2].e.msg);
    T_EQ_INT(m.c[2]->error_peer, 1);
    mesh_destroy(&m);
}

static atomic_bool abort_flag_for_test;

static void raise_abort(struct mesh *m, int victim) { atomic_store(&abort_flag_for_test, true); }

static void test_comm_tcp_abort_flag(void)
{
    struct mesh m;
    atomic_store(&abort_flag_for_test, false);
    T_CHECK(mesh_build(&m, 3, 30000, &abort_flag_for_test) == 0);
    struct fail_job jobs[3];
    run_with_victim(&m, 0, 1000, 200, raise_abort, jobs);
    for (int r = 1; r < 3; r++) {
        T_CHECK_MSG(jobs[r].rc < 0 && jobs[r].e.code == ERR_ABORTED, "rank %d: %s", r,
                    jobs[r].e.msg);
        T_CHECK_MSG(jobs[r].ms < 5000, "rank %d took %lld ms", r, (long long)jobs[r].ms);
    }
    mesh_destroy(&m);
}

/* ---- setup robustness ------------------------------------------------------------ */

static int poke_port(const char *addr, const void *bytes, size_t n)
{
    char host[64];
    int port;
    struct err e;
    if (net_split_hostport(addr, host, sizeof host, &port, false, &e) < 0)
        return -1;
    int fd = net_connect(host, port, 2000, false, NULL, &e);
    if (fd >= 0 && n > 0)
        net_send_all(fd, bytes, n, clock_mono_ms() + 2000, NULL, &e);
    return fd;
}

static void hello_bytes(uint8_t out[24], uint32_t magic, int rank, int world, uint64_t hash)
{
    uint64_t vals[] = {magic, 1, 1, (uint64_t)rank, (uint64_t)world, hash};
    int widths[] = {4, 2, 2, 4, 4, 8};
    int off = 0;
    for (int f = 0; f < 6; f++)
        for (int b = 0; b < widths[f]; b++)
            out[off++] = (uint8_t)(vals[f] >> (8 * b));
}

static void test_comm_tcp_setup_ignores_strays(void)
{
    struct comm_tcp *t[3];
    char addrs[3][64];
    T_CHECK(mesh_listen(t, addrs, 3, 10000, NULL, NULL) == 0);
    uint8_t garbage[40], bad_magic[24], wrong_secret[24], high_rank[24];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (uint8_t)(i * 37 + 11);
    hello_bytes(bad_magic, 0x11223344u, 0, 3, 0);
    hello_bytes(wrong_secret, 0x54504444u, 0, 3, 12345);
    hello_bytes(high_rank, 0x54504444u, 2, 3, 0);
    int fds[8], nfds = 0;
    fds[nfds++] = poke_port(addrs[2], garbage, sizeof garbage);
    fds[nfds++] = poke_port(addrs[2], bad_magic, sizeof bad_magic);
    fds[nfds++] = poke_port(addrs[1], wrong_secret, sizeof wrong_secret);
    fds[nfds++] = poke_port(addrs[1], NULL, 0); /* silent, held open */
    fds[nfds++] = poke_port(addrs[2], garbage, 5); /* partial, held open */
    fds[nfds++] = poke_port(addrs[1], high_rank, sizeof high_rank);
    int closed = poke_port(addrs[2], garbage, 3);
    if (closed >= 0)
        close(closed);
    struct mesh m = {.n = 3};
    mesh_connect(&m, t, addrs);
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int r = 0; r < 3; r++)
        T_CHECK_MSG(m.c[r] != NULL, "rank %d: %s", r, m.e[r].msg);
    size_t counts[] = {1000};
    char why[256] = "";
    int failures = run_jobs(&m, counts, 1, why, sizeof why);
    mesh_destroy(&m);
    T_CHECK_MSG(failures == 0, "%s", why);
}

static void test_comm_tcp_wrong_secret_fails_setup(void)
{
    struct comm_tcp *t[3];
    char addrs[3][64];
    const char *secrets[3] = {"good", "evil", "good"};
    T_CHECK(mesh_listen(t, addrs, 3, 800, NULL, secrets) == 0);
    struct mesh m = {.n = 3};
    int64_t t0 = clock_mono_ms();
    mesh_connect(&m, t, addrs);
    int64_t dt = clock_mono_ms() - t0;
    int built = 0;
    for (int r = 0; r < 3; r++)
        built += m.c[r] != NULL;
    T_EQ_INT(built, 0);
    T_CHECK_MSG(dt < 8000, "took %lld ms", (long long)dt);
    T_CHECK_MSG(m.e[1].code == ERR_TIMEOUT || m.e[1].code == ERR_PEER, "%s", m.e[1].msg);
    T_CHECK_MSG(strstr(m.e[0].msg, "setup") != NULL, "%s", m.e[0].msg);
}

static void test_comm_tcp_late_rank_and_timeout(void)
{
    /* rank 1 never connects: rank 0 reports who is missing */
    struct comm_tcp *t[2];
    char addrs[2][64];
    T_CHECK(mesh_listen(t, addrs, 2, 500, NULL, NULL) == 0);
    const char *ap[2] = {addrs[0], addrs[1]};
    struct err e;
    struct comm_tcp *late = t[0];
    comm_tcp_discard(t[1]); /* rank 1's listener is gone */
    int64_t t0 = clock_mono_ms();
    T_CHECK(comm_tcp_connect(late, ap, &e) == NULL); /* rank 0 connects up to rank 1 */
    T_CHECK(clock_mono_ms() - t0 < 5000);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(strstr(e.msg, "rank 1") != NULL, "%s", e.msg);
    /* rank 1 of another mesh waits for rank 0, who never comes */
    T_CHECK(mesh_listen(t, addrs, 2, 300, NULL, NULL) == 0);
    comm_tcp_discard(t[0]);
    T_CHECK(comm_tcp_connect(t[1], ap, &e) == NULL);
    T_EQ_INT(e.code, ERR_TIMEOUT);
    T_CHECK_MSG(strstr(e.msg, "rank(s) 0 to connect") != NULL, "%s", e.msg);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_comm_dtype_names);
    TEST_RUN(test_comm_tcp_allreduce_exact);
    TEST_RUN(test_comm_tcp_bytes_sent_and_barrier);
    TEST_RUN(test_comm_tcp_barrier);
    TEST_RUN(test_comm_tcp_unsupported_and_bad_config);
    TEST_RUN(test_comm_tcp_peer_closes_mid_operation);
    TEST_RUN(test_comm_tcp_silent_peer_times_out);
    TEST_RUN(test_comm_tcp_abort_flag);
    TEST_RUN(test_comm_tcp_setup_ignores_strays);
    TEST_RUN(test_comm_tcp_wrong_secret_fails_setup);
    TEST_RUN(test_comm_tcp_late_rank_and_timeout);
    return test_end();
}
