/* Unit tests for the scheduler's GPU slots (daemon/scheduler.c with daemon/gpu_slots.c):
 * a real scheduler, database, store and monitor with launch_probe standing in for the
 * worker, on a node configured with one GPU. An emulated two-rank run takes that GPU for
 * both ranks, its ranks get CUDA_VISIBLE_DEVICES and the emulation variables, and the run
 * is stored as emulated with each rank's GPU; a second GPU run waits for the GPU (it
 * starts only after the first ended) although CPU slots are free; a queued run that can
 * never be placed (more GPUs than the node has) fails naming why instead of blocking the
 * queue, and the run behind it still starts. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/events.h"
#include "daemon/scheduler.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"

struct fx {
    char dir[64];
    struct config cfg;
    struct db *db;
    struct store_server *store;
    struct events *events;
    struct scheduler *sched;
    struct cluster *cluster; /* the leader's registry: this node alone */
};

static int fx_open(struct fx *x, struct err *e)
{
    memset(x, 0, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "/tmp/ddpb-sched-gpu-XXXXXX");
    if (!mkdtemp(x->dir))
        return err_errno(e, "mkdtemp");
    char *argv[] = {"ddpbenchd",
                    "--gpus",
                    "1",
                    "--cpu-slots",
                    "8",
                    "--kill-grace-ms",
                    "200",
                    "--state-dir",
                    x->dir,
                    "--worker",
                    getenv("DDPB_PROBE_BIN"),
                    NULL};
    optind = 0;
    if (config_parse_args(&x->cfg, 11, argv, e) < 0)
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/db.sqlite", x->dir);
    if (!(x->db = db_open(path, e)) || !(x->store = store_server_create("127.0.0.1", 0, e)) ||
        !(x->events = events_create()))
        return -1;
    return 0;
}

static void fx_close(struct fx *x)
{
    scheduler_destroy(x->sched);
    cluster_destroy(x->cluster);
    events_destroy(x->events);
    store_server_destroy(x->store);
    db_close(x->db);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    if (getenv("TEST_KEEP"))
        fprintf(stderr, "kept %s\n", x->dir);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", x->dir);
}

/* One experiment of the given runs' specs (JSON texts); run ids come back in ids. */
static int fx_submit(struct fx *x, const char *const *specs, int n, int64_t *ids, struct err *e)
{
    struct db_new_run rows[4];
    for (int i = 0; i < n; i++) {
        json_t *s = json_loads(specs[i], 0, NULL);
        rows[i] = (struct db_new_run){
            "{}", specs[i], (int)json_integer_value(json_object_get(s, "world_size")), NULL};
        json_decref(s);
    }
    int64_t exp;
    if (db_create_experiment(x->db, "gpu", "collective", specs[0], rows, (size_t)n, &exp, e) <
        0)
        return -1;
    json_t *got = db_get_experiment(x->db, exp, e);
    if (!got)
        return -1;
    for (int i = 0; i < n; i++)
        ids[i] = json_integer_value(
            json_object_get(json_array_get(json_object_get(got, "runs"), (size_t)i), "id"));
    json_decref(got);
    return 0;
}

static bool fx_finished(const json_t *run)
{
    const char *st = json_string_value(json_object_get(run, "status"));
    return st && (strcmp(st, "failed") == 0 || strcmp(st, "succeeded") == 0 ||
                  strcmp(st, "cancelled") == 0);
}

/* Owned run object once it finished, NULL after 20 s. */
static json_t *fx_wait_finished(struct fx *x, int64_t id)
{
    for (int i = 0; i < 400; i++) {
        struct err e = {0};
        json_t *run = db_get_run(x->db, id, &e);
        if (run && fx_finished(run))
            return run;
        json_decref(run);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Submits the runs of specs as one experiment, starts the scheduler and waits for each
 * run to finish: ids and runs (owned; NULL: not finished in 20 s) get n entries each. */
static int fx_run_all(struct fx *x, const char *const *specs, int n, int64_t *ids,
                      json_t **runs, struct err *e)
{
    if (fx_submit(x, specs, n, ids, e) < 0)
        return -1;
    x->cluster = cluster_create(&x->cfg, x->db, e);
    if (!x->cluster)
        return -1;
    x->sched = scheduler_create(&x->cfg, x->db, x->store, x->events, x->cluster, e);
    if (!x->sched)
        return -1;
    for (int i = 0; i < n; i++)
        runs[i] = fx_wait_finished(x, ids[i]);
    return 0;
}

static const char *rank_log(const struct fx *x, int64_t run, int rank, char *buf, size_t len)
{
    char path[160];
    snprintf(path, sizeof path, "%s/runs/%lld/rank%d.log", x->dir, (long long)run, rank);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

static void test_gpu_runs_queue_for_the_gpu(void)
{
    struct fx x;
    struct err e = {0};
    T_OK(fx_open(&x, &e));
    const char *specs[] = {
        "{\"workload\":\"collective\",\"device\":\"cuda\",\"backend\":\"nccl\","
        "\"world_size\":2,\"emulate_multi_rank\":true,\"timeout_s\":20}",
        "{\"workload\":\"collective\",\"device\":\"cuda\",\"backend\":\"nccl\","
        "\"world_size\":1,\"timeout_s\":20}",
    };
    int64_t ids[2];
    json_t *runs[2];
    setenv("PROBE_ECHO", "1", 1); /* the probe copies its environment to the rank log */
    /* the probe's line is no report, so each run fails at once and frees the GPU */
    T_OK(fx_run_all(&x, specs, 2, ids, runs, &e));
    unsetenv("PROBE_ECHO");
    T_EQ_INT(scheduler_gpus_total(x.sched), 1);
    json_t *a = runs[0], *b = runs[1];
    T_CHECK(a != NULL && b != NULL);
    T_CHECK(json_is_true(json_object_get(a, "emulated")));
    T_CHECK(json_is_false(json_object_get(b, "emulated")));
    json_t *ra = json_object_get(a, "ranks");
    T_EQ_INT(json_array_size(ra), 2);
    for (size_t r = 0; r < 2; r++)
        T_EQ_INT(json_integer_value(json_object_get(json_array_get(ra, r), "gpu")), 0);
    T_EQ_INT(json_integer_value(
                 json_object_get(json_array_get(json_object_get(b, "ranks"), 0), "gpu")),
             0);
    /* the second waited for the GPU: it started once the first had ended */
    T_CHECK(strcmp(json_string_value(json_object_get(b, "started_at")),
                   json_string_value(json_object_get(a, "finished_at"))) >= 0);
    /* the first rank to exit fails the run and the other may be stopped before it prints:
     * look in the log of a rank that printed (each sees the same GPU and emulation) */
    char log[8192];
    rank_log(&x, ids[0], 0, log, sizeof log);
    if (!strstr(log, "CUDA_VISIBLE_DEVICES"))
        rank_log(&x, ids[0], 1, log, sizeof log);
    T_CHECK_MSG(strstr(log, "\"CUDA_VISIBLE_DEVICES\":\"0\"") != NULL, "%s", log);
    T_CHECK_MSG(strstr(log, "\"DDPB_EMULATED\":\"1\"") != NULL, "%s", log);
    T_CHECK_MSG(strstr(log, "\"NCCL_HOSTID\":\"ddpb-run-") /* the run's, rank 0's */ ||
                    strstr(log, "\"NCCL_MULTI_RANK_GPU_ENABLE\":\"1\""),
                "%s", log);
    rank_log(&x, ids[1], 0, log, sizeof log);
    T_CHECK_MSG(strstr(log, "\"CUDA_VISIBLE_DEVICES\":\"0\"") != NULL, "%s", log);
    T_CHECK_MSG(strstr(log, "DDPB_EMULATED") == NULL, "%s", log);
    json_decref(a);
    json_decref(b);
    fx_close(&x);
}

static void test_unplaceable_run_fails(void)
{
    struct fx x;
    struct err e = {0};
    T_OK(fx_open(&x, &e));
    const char *specs[] = {
        /* accepted when the node had more GPUs; now it has one */
        "{\"workload\":\"collective\",\"device\":\"cuda\",\"backend\":\"nccl\","
        "\"world_size\":2,\"timeout_s\":20}",
        "{\"workload\":\"collective\",\"world_size\":1,\"timeout_s\":20}",
    };
    int64_t ids[2];
    json_t *runs[2];
    T_OK(fx_run_all(&x, specs, 2, ids, runs, &e));
    json_t *a = runs[0], *b = runs[1];
    T_CHECK(a != NULL && b != NULL);
    T_EQ_STR(json_string_value(json_object_get(a, "status")), "failed");
    const char *why = json_string_value(json_object_get(a, "error"));
    T_CHECK_MSG(why && strstr(why, "cannot be placed") && strstr(why, "GPUs"), "%s", why);
    T_EQ_INT(json_array_size(json_object_get(a, "ranks")), 0); /* nothing was spawned */
    /* the CPU run behind it was not blocked: it ran (and failed on the probe's line) */
    T_CHECK(json_array_size(json_object_get(b, "ranks")) == 1);
    T_CHECK(
        json_is_null(json_object_get(json_array_get(json_object_get(b, "ranks"), 0), "gpu")));
    json_decref(a);
    json_decref(b);
    fx_close(&x);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_gpu_runs_queue_for_the_gpu);
    TEST_RUN(test_unplaceable_run_fails);
    return test_end();
}
