/* Unit tests for worker/rendezvous: the launch environment (every missing or malformed
 * variable is an error naming it), CPU lists (parse, format, pin), the join barrier
 * against an in-process store server (late ranks still join; a missing rank makes the
 * others fail naming it) and failure records (following blame to the first failure). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/clock.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"
#include "worker/store/rendezvous.h"
#include "worker/store/store_client.h"

static const char *const env_names[] = {"DDPB_RUN",
                                        "DDPB_RANK",
                                        "DDPB_WORLD_SIZE",
                                        "DDPB_LOCAL_RANK",
                                        "DDPB_STORE",
                                        "DDPB_SECRET",
                                        "DDPB_SPEC",
                                        "DDPB_HOST",
                                        "DDPB_CPUS",
                                        "DDPB_TIMEOUT_MS",
                                        "DDPB_NODE_RANK",
                                        "DDPB_NODE_NAME",
                                        "DDPB_EMULATE_NODES",
                                        "DDPB_LAUNCHER",
                                        "DDPB_REPORT",
                                        "DDPB_LOG_DIR",
                                        "DDPB_CPU_MAP",
                                        "DDPB_NODE_MAP",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "PMI_RANK",
                                        "PMI_SIZE",
                                        "MPI_LOCALRANKID",
                                        "SLURM_PROCID",
                                        "SLURM_LOCALID",
                                        "SLURM_STEP_NUM_TASKS"};

static void env_set_valid(void)
{
    for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
        unsetenv(env_names[i]);
    setenv("DDPB_RUN", "run-7", 1);
    setenv("DDPB_RANK", "2", 1);
    setenv("DDPB_WORLD_SIZE", "4", 1);
    setenv("DDPB_LOCAL_RANK", "0", 1);
    setenv("DDPB_STORE", "127.0.0.1:7070", 1);
    setenv("DDPB_SECRET", "sesame", 1);
    setenv("DDPB_SPEC", "/tmp/spec.json", 1);
}

/* A valid environment of a rank mpirun started: no DDPB_RANK, DDPB_LAUNCHER says where
 * the rank is (the caller sets the implementation's variables). */
static void env_set_mpirun(void)
{
    env_set_valid();
    unsetenv("DDPB_RANK");
    unsetenv("DDPB_LOCAL_RANK");
    setenv("DDPB_LAUNCHER", "mpirun", 1);
}

static void test_rdzv_env_valid_and_defaults(void)
{
    struct rendezvous_env env;
    struct err e;
    env_set_valid();
    T_OK(rendezvous_env_read(&env, &e));
    T_EQ_STR(env.run, "run-7");
    T_EQ_INT(env.rank, 2);
    T_EQ_INT(env.world_size, 4);
    T_EQ_INT(env.local_rank, 0);
    T_EQ_STR(env.store, "127.0.0.1:7070");
    T_EQ_STR(env.secret, "sesame");
    T_EQ_STR(env.spec_path, "/tmp/spec.json");
    T_EQ_STR(env.host, "127.0.0.1");
    T_EQ_STR(env.cpus, "");
    T_EQ_INT(env.timeout_ms, RENDEZVOUS_DEFAULT_TIMEOUT_MS);
    T_EQ_INT(env.node_rank, 0); /* one node unless the launcher says otherwise */
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    T_EQ_STR(env.node_name, host);
    setenv("DDPB_NODE_RANK", "3", 1);
    setenv("DDPB_NODE_NAME", "node-d", 1);
    T_OK(rendezvous_env_read(&env, &e));
    T_EQ_INT(env.node_rank, 3);
    T_EQ_STR(env.node_name, "node-d");
    setenv("DDPB_HOST", "10.0.0.5", 1);
    setenv("DDPB_CPUS", "0-3,6", 1);
    setenv("DDPB_TIMEOUT_MS", "1500", 1);
    T_OK(rendezvous_env_read(&env, &e));
    T_EQ_STR(env.host, "10.0.0.5");
    T_EQ_STR(env.cpus, "0-3,6");
    T_EQ_INT(env.timeout_ms, 1500);
}

static void test_rdzv_env_missing_names_variable(void)
{
    const char *required[] = {"DDPB_RUN",   "DDPB_RANK",   "DDPB_WORLD_SIZE", "DDPB_LOCAL_RANK",
                              "DDPB_STORE", "DDPB_SECRET", "DDPB_SPEC"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        struct rendezvous_env env;
        struct err e;
        env_set_valid();
        unsetenv(required[i]);
        T_CHECK_MSG(rendezvous_env_read(&env, &e) < 0, "%s unset accepted", required[i]);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, required[i]);
        T_CHECK_MSG(strstr(e.msg, required[i]) != NULL, "%s", e.msg);
    }
}

/* A rank of mpirun or srun: its index from the launcher's variables, its CPUs from the
 * map, and a stale variable of another launcher (a daemon inside a Slurm job hands its
 * SLURM_PROCID down) ignored. */
static void test_rdzv_env_other_launchers(void)
{
    struct rendezvous_env env;
    struct err e = {0};
    env_set_mpirun();
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("SLURM_PROCID", "0", 1); /* stale: not srun's rank here */
    setenv("DDPB_CPU_MAP", "0;1;2,3;4-5", 1);
    setenv("DDPB_REPORT", "127.0.0.1:9", 1);
    setenv("DDPB_LOG_DIR", "/tmp/run", 1);
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.rank, 3);
    T_EQ_INT(env.local_rank, 1);
    T_EQ_STR(env.cpus, "4-5");
    T_EQ_STR(env.report, "127.0.0.1:9");
    T_EQ_STR(env.log_dir, "/tmp/run");
    unsetenv("OMPI_COMM_WORLD_RANK"); /* MPICH's hydra */
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMI_RANK", "1", 1);
    setenv("MPI_LOCALRANKID", "1", 1);
    setenv("PMI_SIZE", "4", 1);
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.rank, 1);
    T_EQ_STR(env.cpus, "1");
    setenv("PMI_SIZE", "3", 1); /* the launcher started another number of ranks */
    T_CHECK(rendezvous_env_read(&env, &e) < 0);
    T_EQ_STR(e.field, "PMI_SIZE");
    setenv("DDPB_LAUNCHER", "srun", 1);
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.rank, 2);
    unsetenv("SLURM_PROCID");
    T_CHECK(rendezvous_env_read(&env, &e) < 0);
    T_EQ_STR(e.field, "SLURM_PROCID");
    T_CHECK_MSG(strstr(e.msg, "launcher srun"), "%s", e.msg);
    setenv("DDPB_LAUNCHER", "pbsdsh", 1);
    T_CHECK(rendezvous_env_read(&env, &e) < 0);
    T_EQ_STR(e.field, "DDPB_LAUNCHER");
    env_set_valid(); /* ddpbench's launcher: DDPB_RANK, whatever SLURM_PROCID says */
    setenv("SLURM_PROCID", "0", 1);
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.rank, 2);
    T_EQ_STR(env.report, "");
    unsetenv("SLURM_PROCID");
}

/* A rank of mpirun across nodes: its node index from DDPB_NODE_MAP (DDPB_NODE_RANK, set
 * only by ddpbench's launcher, wins), and its own address towards the store whatever the
 * leader's DDPB_HOST says; under ddpbench's launcher DDPB_HOST stands. */
static void test_rdzv_env_across_nodes(void)
{
    struct rendezvous_env env;
    struct err e = {0};
    env_set_mpirun();
    setenv("PMI_RANK", "2", 1);
    setenv("MPI_LOCALRANKID", "0", 1);
    setenv("DDPB_NODE_MAP", "0;0;1;1", 1);
    setenv("DDPB_HOST", "10.99.0.1", 1); /* the leader's: not an address of this host */
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.node_rank, 1);
    T_EQ_STR(env.host, "127.0.0.1"); /* DDPB_STORE is 127.0.0.1: reached from itself */
    setenv("DDPB_NODE_MAP", "0;0;x;1", 1);
    T_CHECK(rendezvous_env_read(&env, &e) < 0);
    T_EQ_STR(e.field, "DDPB_NODE_MAP");
    setenv("DDPB_NODE_MAP", "0;0", 1); /* short: the rank keeps node 0 */
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_INT(env.node_rank, 0);
    env_set_valid();
    setenv("DDPB_HOST", "10.99.0.1", 1);
    setenv("DDPB_NODE_MAP", "1;1;1;1", 1);
    setenv("DDPB_NODE_RANK", "0", 1);
    T_CHECK_MSG(rendezvous_env_read(&env, &e) == 0, "%s", e.msg);
    T_EQ_STR(env.host, "10.99.0.1");
    T_EQ_INT(env.node_rank, 0);
}

static void test_rdzv_env_malformed_names_variable(void)
{
    struct {
        const char *name, *value;
    } bad[] = {
        {"DDPB_RANK", "abc"},        {"DDPB_RANK", "-1"},        {"DDPB_RANK", "4"},
        {"DDPB_RANK", "1x"},         {"DDPB_RANK", ""},          {"DDPB_WORLD_SIZE", "0"},
        {"DDPB_WORLD_SIZE", "1025"}, {"DDPB_WORLD_SIZE", "two"}, {"DDPB_LOCAL_RANK", "-3"},
        {"DDPB_STORE", "nohost"},    {"DDPB_STORE", "h:0"},      {"DDPB_STORE", "h:99999"},
        {"DDPB_CPUS", "0-"},         {"DDPB_CPUS", "x"},         {"DDPB_TIMEOUT_MS", "0"},
        {"DDPB_TIMEOUT_MS", "soon"}, {"DDPB_RUN", ""},           {"DDPB_SPEC", ""},
        {"DDPB_HOST", ""},           {"DDPB_NODE_RANK", "-1"},   {"DDPB_NODE_RANK", "n1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct rendezvous_env env;
        struct err e;
        env_set_valid();
        setenv(bad[i].name, bad[i].value, 1);
        T_CHECK_MSG(rendezvous_env_read(&env, &e) < 0, "%s='%s' accepted", bad[i].name,
                    bad[i].value);
        T_EQ_INT(e.code, ERR_INVALID);
        T_CHECK_MSG(strstr(e.msg, bad[i].name) != NULL, "%s='%s': %s", bad[i].name,
                    bad[i].value, e.msg);
    }
    /* a run name longer than the store allows */
    char longrun[200];
    memset(longrun, 'r', sizeof longrun - 1);
    longrun[sizeof longrun - 1] = '\0';
    struct rendezvous_env env;
    struct err e;
    env_set_valid();
    setenv("DDPB_RUN", longrun, 1);
    T_CHECK(rendezvous_env_read(&env, &e) < 0);
    T_EQ_STR(e.field, "DDPB_RUN");
}

/* A pinned rank's OpenMP threads get one CPU each: the places list every CPU in order, a
 * list that does not fit says so; pinning sets OMP_PLACES and OMP_PROC_BIND where the
 * user set neither, and leaves the user's placement alone. */
static void test_rdzv_pin_binds_openmp(void)
{
    cpu_set_t set, had;
    struct err e;
    char out[64];
    T_OK(rendezvous_cpus_parse("0", &set, &e));
    T_CHECK(rendezvous_omp_places(&set, out, sizeof out));
    T_EQ_STR(out, "{0}");
    T_OK(rendezvous_cpus_parse("2-3,7", &set, &e));
    T_CHECK(rendezvous_omp_places(&set, out, sizeof out));
    T_EQ_STR(out, "{2},{3},{7}");
    T_CHECK(!rendezvous_omp_places(&set, out, 8));
    /* pin to the CPUs this process already has: nothing changes but the environment */
    T_CHECK(sched_getaffinity(0, sizeof had, &had) == 0);
    char list[1024], places[4096];
    rendezvous_cpus_format(&had, list, sizeof list);
    T_CHECK(rendezvous_omp_places(&had, places, sizeof places));
    unsetenv("OMP_PLACES");
    unsetenv("OMP_PROC_BIND");
    unsetenv("GOMP_CPU_AFFINITY");
    T_OK(rendezvous_pin_cpus(list, &e));
    int ok = getenv("OMP_PLACES") && strcmp(getenv("OMP_PLACES"), places) == 0 &&
             getenv("OMP_PROC_BIND") && strcmp(getenv("OMP_PROC_BIND"), "close") == 0;
    setenv("OMP_PLACES", "cores", 1);
    unsetenv("OMP_PROC_BIND");
    T_OK(rendezvous_pin_cpus(list, &e));
    int kept = strcmp(getenv("OMP_PLACES"), "cores") == 0 && !getenv("OMP_PROC_BIND");
    unsetenv("OMP_PLACES");
    T_CHECK_MSG(ok, "pinned to %s: OMP_PLACES not %s", list, places);
    T_CHECK(kept);
}

static void test_rdzv_cpus_parse_and_format(void)
{
    cpu_set_t set;
    struct err e;
    char out[128];
    T_OK(rendezvous_cpus_parse("0", &set, &e));
    T_EQ_INT(CPU_COUNT(&set), 1);
    T_CHECK(CPU_ISSET(0, &set));
    T_OK(rendezvous_cpus_parse("0-3,6", &set, &e));
    T_EQ_INT(CPU_COUNT(&set), 5);
    T_CHECK(CPU_ISSET(3, &set) && CPU_ISSET(6, &set) && !CPU_ISSET(4, &set));
    rendezvous_cpus_format(&set, out, sizeof out);
    T_EQ_STR(out, "0-3,6");
    T_OK(rendezvous_cpus_parse("9,8-9,1,1", &set, &e));
    rendezvous_cpus_format(&set, out, sizeof out);
    T_EQ_STR(out, "1,8-9");
    T_OK(rendezvous_cpus_parse("1023", &set, &e));
    rendezvous_cpus_format(&set, out, sizeof out);
    T_EQ_STR(out, "1023");
    CPU_ZERO(&set);
    rendezvous_cpus_format(&set, out, sizeof out);
    T_EQ_STR(out, "");
    const char *bad[] = {"",     ",",  "3-1", "a",     "0-3,", ",1", "-1",
                         "1024", " 1", "+1",  "1-2-3", "0--2", "1-", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        T_CHECK_MSG(rendezvous_cpus_parse(bad[i], &set, &e) < 0, "'%s' accepted", bad[i]);
        T_EQ_INT(e.code, ERR_INVALID);
    }
    /* truncation keeps a terminated prefix */
    T_OK(rendezvous_cpus_parse("0,2,4,6,8,10,12", &set, &e));
    char small[6];
    rendezvous_cpus_format(&set, small, sizeof small);
    T_CHECK(strlen(small) < sizeof small);
}

static void test_rdzv_pin_cpus(void)
{
    cpu_set_t before, now;
    struct err e;
    T_CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &before))
            first = c;
    T_CHECK(first >= 0);
    char list[16];
    snprintf(list, sizeof list, "%d", first);
    T_OK(rendezvous_pin_cpus(list, &e));
    T_CHECK(sched_getaffinity(0, sizeof now, &now) == 0);
    T_EQ_INT(CPU_COUNT(&now), 1);
    T_CHECK(CPU_ISSET(first, &now));
    sched_setaffinity(0, sizeof before, &before);
    T_CHECK(rendezvous_pin_cpus("bogus", &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
}

/* ---- join and failure records against a store ------------------------------------- */

struct store_fx {
    struct store_server *s;
    char addr[64];
};

static int store_fx_start(struct store_fx *fx, const char *run)
{
    struct err e;
    fx->s = store_server_create("127.0.0.1", 0, &e);
    if (!fx->s)
        return -1;
    snprintf(fx->addr, sizeof fx->addr, "127.0.0.1:%d", store_server_port(fx->s));
    return store_server_add_run(fx->s, run, "sesame", &e);
}

static struct rendezvous_env fx_env(const struct store_fx *fx, const char *run, int rank,
                                    int world, int timeout_ms)
{
    struct rendezvous_env env;
    memset(&env, 0, sizeof env);
    snprintf(env.run, sizeof env.run, "%s", run);
    env.rank = rank;
    env.world_size = world;
    snprintf(env.store, sizeof env.store, "%s", fx->addr);
    snprintf(env.secret, sizeof env.secret, "sesame");
    snprintf(env.host, sizeof env.host, "127.0.0.1");
    env.timeout_ms = timeout_ms;
    return env;
}

struct join_arg {
    struct rendezvous_env env;
    int delay_ms;
    struct store_client *c;
    struct err e;
    int64_t ms;
};

static void *join_thread(void *p)
{
    struct join_arg *a = p;
    usleep((useconds_t)a->delay_ms * 1000);
    int64_t t0 = clock_mono_ms();
    a->c = rendezvous_join(&a->env, NULL, &a->e);
    a->ms = clock_mono_ms() - t0;
    return NULL;
}

/* Joins ranks 0..world-1 except `absent`; rank `late` starts after 300 ms. */
static void join_ranks(struct store_fx *fx, const char *run, int world, int absent, int late,
                       int timeout_ms, struct join_arg *args)
{
    pthread_t th[8];
    for (int r = 0; r < world; r++) {
        if (r == absent)
            continue;
        args[r] = (struct join_arg){.env = fx_env(fx, run, r, world, timeout_ms),
                                    .delay_ms = r == late ? 300 : 0};
        pthread_create(&th[r], NULL, join_thread, &args[r]);
    }
    for (int r = 0; r < world; r++)
        if (r != absent)
            pthread_join(th[r], NULL);
}

static void test_rdzv_join_with_late_rank(void)
{
    struct store_fx fx;
    T_CHECK(store_fx_start(&fx, "join-ok") == 0);
    struct join_arg args[4];
    join_ranks(&fx, "join-ok", 4, -1, 3, 10000, args);
    int ok = 0;
    for (int r = 0; r < 4; r++) {
        ok += args[r].c != NULL;
        store_client_destroy(args[r].c);
    }
    store_server_destroy(fx.s);
    T_EQ_INT(ok, 4);
    /* the early ranks waited for the late one */
    T_CHECK_MSG(args[0].ms >= 200, "rank 0 joined after %lld ms", (long long)args[0].ms);
}

static void test_rdzv_join_missing_rank_is_named(void)
{
    struct store_fx fx;
    T_CHECK(store_fx_start(&fx, "join-miss") == 0);
    struct join_arg args[3];
    join_ranks(&fx, "join-miss", 3, 1, -1, 500, args);
    int failed = 0;
    char msg[512] = "";
    for (int r = 0; r < 3; r++) {
        if (r == 1)
            continue;
        if (!args[r].c && args[r].e.code == ERR_TIMEOUT &&
            strstr(args[r].e.msg, "rank(s) 1 ") && args[r].ms < 8000)
            failed++;
        else
            snprintf(msg, sizeof msg, "rank %d: %s", r, args[r].e.msg);
        store_client_destroy(args[r].c);
    }
    store_server_destroy(fx.s);
    T_CHECK_MSG(failed == 2, "%s", msg);
}

static void test_rdzv_join_bad_secret(void)
{
    struct store_fx fx;
    T_CHECK(store_fx_start(&fx, "join-auth") == 0);
    struct rendezvous_env env = fx_env(&fx, "join-auth", 0, 1, 2000);
    snprintf(env.secret, sizeof env.secret, "wrong");
    struct err e;
    struct store_client *c = rendezvous_join(&env, NULL, &e);
    store_server_destroy(fx.s);
    T_CHECK(c == NULL);
    T_EQ_INT(e.code, ERR_UNAUTHORIZED);
}

static void test_rdzv_failure_chain(void)
{
    struct store_fx fx;
    struct err e;
    T_CHECK(store_fx_start(&fx, "fail") == 0);
    struct store_client *c = store_client_connect(fx.addr, "fail", "sesame", 0, 2000, NULL, &e);
    T_CHECK(c != NULL);
    char why[512];
    /* nobody recorded anything: the blamed peer is the origin */
    T_EQ_INT(rendezvous_origin(c, 0, 2, 4, 0, why, sizeof why), 2);
    T_EQ_STR(why, "");
    /* rank 2 failed because of rank 1, which left no record (killed) */
    rendezvous_record_failure(c, 2, 1, "allreduce: rank 1 closed the connection");
    T_EQ_INT(rendezvous_origin(c, 0, 2, 4, 0, why, sizeof why), 1);
    T_CHECK_MSG(strstr(why, "rank 2 failed: allreduce: rank 1 closed") != NULL, "%s", why);
    /* a record without a peer ends the chain at its rank */
    rendezvous_record_failure(c, 3, -1, "out of memory");
    T_EQ_INT(rendezvous_origin(c, 0, 3, 4, 0, why, sizeof why), 3);
    /* a chain that comes back to the asking rank stops before it */
    rendezvous_record_failure(c, 1, 0, "allreduce: timed out waiting for rank 0");
    T_EQ_INT(rendezvous_origin(c, 0, 2, 4, 0, why, sizeof why), 1);
    /* a cycle that does not involve the asking rank terminates */
    rendezvous_record_failure(c, 1, 2, "allreduce: rank 2 closed the connection");
    int o = rendezvous_origin(c, 0, 2, 4, 0, why, sizeof why);
    T_CHECK(o == 1 || o == 2);
    /* a missing record is waited for up to wait_ms */
    int64_t t0 = clock_mono_ms();
    T_EQ_INT(rendezvous_origin(c, 0, 4, 5, 300, why, sizeof why), 4);
    T_CHECK(clock_mono_ms() - t0 >= 250);
    store_client_destroy(c);
    store_server_destroy(fx.s);
}

/* DDPB_EMULATE_NODES: blocks of k ranks, or each node's ranks; anything else is refused
 * naming the variable. */
static void test_rdzv_emulate_nodes(void)
{
    struct {
        const char *value;
        int world;
        int want[6];
    } ok[] = {
        {"2", 4, {0, 0, 1, 1}},       {"3,1,2", 6, {0, 0, 0, 1, 2, 2}},
        {"1", 3, {0, 1, 2}},          {"4", 4, {0, 0, 0, 0}},
        {"4", 6, {0, 0, 0, 0, 1, 1}}, {"6", 6, {0, 0, 0, 0, 0, 0}},
        {"1,1,1,1", 4, {0, 1, 2, 3}},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int got[6] = {-1, -1, -1, -1, -1, -1};
        struct err e;
        T_CHECK_MSG(rendezvous_nodes_emulate(ok[i].value, ok[i].world, got, &e) == 0,
                    "'%s' refused: %s", ok[i].value, e.msg);
        for (int r = 0; r < ok[i].world; r++)
            T_CHECK_MSG(got[r] == ok[i].want[r], "'%s': rank %d on node %d, want %d",
                        ok[i].value, r, got[r], ok[i].want[r]);
    }
    const char *bad[] = {"0", "", "3,1", "3,4", "a", "2,", ",2", "2,-1", "7", "1,,3", "+2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int got[6];
        struct err e;
        T_CHECK_MSG(rendezvous_nodes_emulate(bad[i], 6, got, &e) < 0, "'%s' accepted", bad[i]);
        T_EQ_STR(e.field, "DDPB_EMULATE_NODES");
    }
}

/* Every rank publishes its node when it joins; afterwards each reads the same map, which
 * DDPB_EMULATE_NODES replaces. */
static void test_rdzv_node_map(void)
{
    struct store_fx fx;
    T_CHECK(store_fx_start(&fx, "nodes") == 0);
    struct join_arg args[4];
    pthread_t th[4];
    for (int r = 0; r < 4; r++) {
        args[r] = (struct join_arg){.env = fx_env(&fx, "nodes", r, 4, 10000)};
        args[r].env.node_rank = 3 - r / 2; /* nodes numbered any way the launcher likes */
        pthread_create(&th[r], NULL, join_thread, &args[r]);
    }
    for (int r = 0; r < 4; r++)
        pthread_join(th[r], NULL);
    unsetenv("DDPB_EMULATE_NODES");
    int bad = 0;
    char why[256] = "";
    for (int r = 0; r < 4; r++) {
        int map[4] = {-1, -1, -1, -1};
        struct err e;
        if (!args[r].c || rendezvous_nodes(args[r].c, &args[r].env, map, &e) < 0) {
            bad++;
            snprintf(why, sizeof why, "rank %d: %s", r, args[r].c ? e.msg : args[r].e.msg);
            continue;
        }
        for (int q = 0; q < 4; q++)
            if (map[q] != 3 - q / 2 && !bad++)
                snprintf(why, sizeof why, "rank %d sees rank %d on node %d", r, q, map[q]);
    }
    T_CHECK_MSG(bad == 0, "%s", why);
    setenv("DDPB_EMULATE_NODES", "1", 1);
    int map[4] = {-1, -1, -1, -1};
    struct err e;
    T_CHECK(args[0].c && rendezvous_nodes(args[0].c, &args[0].env, map, &e) == 0);
    for (int q = 0; q < 4; q++)
        T_EQ_INT(map[q], q);
    setenv("DDPB_EMULATE_NODES", "3", 1); /* 3 + 1 */
    T_CHECK(args[0].c && rendezvous_nodes(args[0].c, &args[0].env, map, &e) == 0);
    T_CHECK(map[0] == 0 && map[2] == 0 && map[3] == 1);
    setenv("DDPB_EMULATE_NODES", "3,3", 1);
    T_CHECK(args[0].c && rendezvous_nodes(args[0].c, &args[0].env, map, &e) < 0);
    T_EQ_STR(e.field, "DDPB_EMULATE_NODES");
    unsetenv("DDPB_EMULATE_NODES");
    for (int r = 0; r < 4; r++)
        store_client_destroy(args[r].c);
    store_server_destroy(fx.s);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_rdzv_env_valid_and_defaults);
    TEST_RUN(test_rdzv_env_missing_names_variable);
    TEST_RUN(test_rdzv_env_malformed_names_variable);
    TEST_RUN(test_rdzv_env_other_launchers);
    TEST_RUN(test_rdzv_env_across_nodes);
    TEST_RUN(test_rdzv_cpus_parse_and_format);
    TEST_RUN(test_rdzv_pin_binds_openmp);
    TEST_RUN(test_rdzv_pin_cpus);
    TEST_RUN(test_rdzv_join_with_late_rank);
    TEST_RUN(test_rdzv_join_missing_rank_is_named);
    TEST_RUN(test_rdzv_join_bad_secret);
    TEST_RUN(test_rdzv_failure_chain);
    TEST_RUN(test_rdzv_emulate_nodes);
    TEST_RUN(test_rdzv_node_map);
    return test_end();
}
