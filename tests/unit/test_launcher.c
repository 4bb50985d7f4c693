/* Unit tests for daemon/launcher and daemon/config: a spawned rank gets exactly the
 * launch environment (DDPB_* of the contract, inherited DDPB_* and CUDA_VISIBLE_DEVICES
 * dropped), the report pipe on fd 3 and no other inherited fd, /dev/null as stdin, its
 * output in its log file, a process group of its own and a pidfd that reports its exit;
 * a missing binary is an error; orphans are killed only when they are the worker they
 * were; a stopped rank is seen as stopped; and the daemon's options are validated. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/launcher.h"
#include "tests/unit/test.h"

static char dir[64];

static struct launch_rank test_rank(const char *log)
{
    return (struct launch_rank){
        .worker_path = getenv("DDPB_PROBE_BIN"),
        .run = "run-7",
        .secret = "s3cr3t",
        .store_addr = "127.0.0.1:1",
        .spec_path = "/nonexistent/spec.json",
        .log_path = log,
        .peer_host = "127.0.0.1",
        .cpus = "0",
        .rank = 1,
        .world_size = 3,
        .local_rank = 1,
    };
}

/* Reads the report pipe to EOF. */
static json_t *test_read_report(int fd)
{
    char buf[8192];
    size_t len = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0)
            break;
        ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    return json_loadb(buf, len, 0, NULL);
}

static void test_launcher_environment_and_fds(void)
{
    struct err e = {0};
    char log[128];
    snprintf(log, sizeof log, "%s/rank1.log", dir);
    setenv("DDPB_STALE", "leak", 1);
    setenv("DDPB_EMULATE_NODES", "2", 1); /* the one DDPB_* a rank inherits */
    setenv("CUDA_VISIBLE_DEVICES", "7", 1);
    setenv("DDPB_SHM_DIR", "/stale", 1); /* the daemon's --shm-dir wins, not its environment */
    setenv("DDPB_DATA_DIRS", "/", 1);    /* and its --data-dir: a stale / would allow all */
    int stray = open("/dev/null", O_RDONLY); /* not close-on-exec: must not leak */
    struct launch_rank lr = test_rank(log);
    lr.node_rank = 2;
    lr.node_name = "node-b";
    lr.shm_dir = "/run/ddpb-shm";
    lr.data_dirs = "/srv/data:/usr/share/datasets";
    struct launched out;
    T_OK(launcher_spawn(&lr, &out, &e));
    close(stray);
    json_t *rep = test_read_report(out.report_fd);
    T_CHECK(rep != NULL);
    json_t *env = json_object_get(rep, "env");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_RUN")), "run-7");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_RANK")), "1");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_WORLD_SIZE")), "3");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_LOCAL_RANK")), "1");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_STORE")), "127.0.0.1:1");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_SECRET")), "s3cr3t");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_SPEC")), "/nonexistent/spec.json");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_CPUS")), "0");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_NODE_RANK")), "2");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_NODE_NAME")), "node-b");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_EMULATE_NODES")), "2");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_SHM_DIR")), "/run/ddpb-shm");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_DATA_DIRS")),
             "/srv/data:/usr/share/datasets");
    T_CHECK(json_object_get(env, "DDPB_STALE") == NULL);
    T_CHECK(json_object_get(env, "CUDA_VISIBLE_DEVICES") == NULL);
    T_EQ_INT(json_integer_value(json_object_get(rep, "open_fds")), 0);
    T_EQ_INT(json_integer_value(json_object_get(rep, "stdin_devnull")), 1);
    T_EQ_INT(json_integer_value(json_object_get(rep, "pgid")), out.pid);
    json_decref(rep);
    struct pollfd p = {.fd = out.pidfd, .events = POLLIN};
    T_CHECK(poll(&p, 1, 5000) == 1); /* the pidfd says it exited */
    int st;
    T_EQ_INT(waitpid(out.pid, &st, 0), out.pid);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(out.report_fd);
    close(out.pidfd);
    FILE *f = fopen(log, "r");
    T_CHECK(f != NULL);
    char text[256] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    T_CHECK(strstr(text, "probe stdout") && strstr(text, "probe stderr"));
    unsetenv("DDPB_STALE");
    unsetenv("DDPB_EMULATE_NODES");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("DDPB_SHM_DIR");
    unsetenv("DDPB_DATA_DIRS");
}

/* The run's launcher (mpirun, srun) instead of a rank: its argv as given (a program name
 * found on PATH), the run's variables and the extra ones but no rank's, no report pipe and
 * no fd 3, its output in the log. */
static void test_launcher_run_launcher(void)
{
    struct err e = {0};
    char log[128];
    snprintf(log, sizeof log, "%s/launcher.log", dir);
    struct launch_rank lr = test_rank(log);
    char *argv[] = {(char *)getenv("DDPB_PROBE_BIN"), NULL};
    const char *extra[] = {"PROBE_ECHO=1", "DDPB_REPORT=127.0.0.1:9", "DDPB_LAUNCHER=mpirun"};
    lr.rank = -1;
    lr.argv = argv;
    lr.extra_env = extra;
    lr.nextra_env = 3;
    lr.shm_dir = "/run/ddpb-shm"; /* mpirun and srun pass their environment to the ranks */
    struct launched out;
    T_OK(launcher_spawn(&lr, &out, &e));
    T_EQ_INT(out.report_fd, -1);
    int st;
    T_EQ_INT(waitpid(out.pid, &st, 0), out.pid);
    close(out.pidfd);
    FILE *f = fopen(log, "r");
    T_CHECK(f != NULL);
    char text[4096] = "";
    T_CHECK(fgets(text, sizeof text, f) != NULL); /* the probe's JSON line comes first */
    fclose(f);
    json_error_t je;
    json_t *rep = json_loads(text, 0, &je);
    T_CHECK_MSG(rep != NULL, "%s", text);
    json_t *env = json_object_get(rep, "env");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_RUN")), "run-7");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_WORLD_SIZE")), "3");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_REPORT")), "127.0.0.1:9");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_LAUNCHER")), "mpirun");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_SHM_DIR")), "/run/ddpb-shm");
    T_CHECK(json_object_get(env, "DDPB_RANK") == NULL);
    T_CHECK(json_object_get(env, "DDPB_LOCAL_RANK") == NULL);
    T_CHECK(json_object_get(env, "DDPB_CPUS") == NULL);
    json_decref(rep);
    char *bad_argv[] = {"ddpbench-no-such-launcher", NULL};
    lr.argv = bad_argv;
    T_CHECK(launcher_spawn(&lr, &out, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "cannot start ddpbench-no-such-launcher"), "%s", e.msg);
    char *true_argv[] = {"true", NULL}; /* by name, on PATH */
    lr.argv = true_argv;
    T_OK(launcher_spawn(&lr, &out, &e));
    T_EQ_INT(waitpid(out.pid, &st, 0), out.pid);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(out.pidfd);
}

static void test_launcher_missing_binary(void)
{
    struct err e = {0};
    char log[128];
    snprintf(log, sizeof log, "%s/missing.log", dir);
    struct launch_rank lr = test_rank(log);
    lr.worker_path = "/nonexistent/ddpbench-worker";
    struct launched out;
    T_CHECK(launcher_spawn(&lr, &out, &e) < 0);
    T_CHECK(strstr(e.msg, "cannot start worker") != NULL);
    snprintf(log, sizeof log, "/nonexistent-dir/x.log");
    lr = test_rank(log);
    T_CHECK(launcher_spawn(&lr, &out, &e) < 0); /* unwritable log: error, nothing runs */
}

/* Spawns a probe that reports once and then sleeps, logging to DIR/name; 0 once it is
 * up (its first report read), -1 with e set. */
static int test_spawn_sleeper(const char *name, struct launched *out, struct err *e)
{
    char log[128];
    snprintf(log, sizeof log, "%s/%s", dir, name);
    setenv("PROBE_SLEEP", "1", 1);
    struct launch_rank lr = test_rank(log);
    int rc = launcher_spawn(&lr, out, e);
    unsetenv("PROBE_SLEEP");
    if (rc == 0)
        json_decref(test_read_report(out->report_fd));
    return rc;
}

static void test_launcher_kills_only_real_orphans(void)
{
    struct err e = {0};
    struct launched out;
    T_OK(test_spawn_sleeper("orphan.log", &out, &e));
    T_EQ_INT(launcher_kill_orphan(out.pid, "run-7", 2), 0); /* another rank's pid: no */
    T_EQ_INT(launcher_kill_orphan(out.pid, "run-8", 1), 0); /* another run: no */
    T_CHECK(kill(out.pid, 0) == 0);
    T_EQ_INT(launcher_kill_orphan(out.pid, "run-7", 1), 1);
    int st;
    T_EQ_INT(waitpid(out.pid, &st, 0), out.pid);
    T_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    T_EQ_INT(launcher_kill_orphan(out.pid, "run-7", 1), 0); /* gone: nothing to do */
    close(out.report_fd);
    close(out.pidfd);
}

/* launcher_is_stopped sees SIGSTOP (the monitor kills such a rank without a grace). */
static void test_launcher_sees_stopped_rank(void)
{
    struct err e = {0};
    struct launched out;
    T_OK(test_spawn_sleeper("stopped.log", &out, &e));
    T_CHECK(!launcher_is_stopped(out.pid));
    launcher_signal(out.pid, SIGSTOP);
    bool stopped = false;
    for (int i = 0; i < 200 && !stopped; i++) { /* the stop is asynchronous */
        stopped = launcher_is_stopped(out.pid);
        if (!stopped)
            usleep(10000);
    }
    T_CHECK(stopped);
    launcher_signal(out.pid, SIGKILL);
    int st;
    T_EQ_INT(waitpid(out.pid, &st, 0), out.pid);
    T_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    T_CHECK(!launcher_is_stopped(out.pid)); /* gone */
    T_CHECK(!launcher_is_stopped(-1));
    close(out.report_fd);
    close(out.pidfd);
}

static int test_parse(struct config *c, struct err *e, const char *a, const char *b)
{
    char *argv[] = {(char *)"ddpbenchd", (char *)a, (char *)b, NULL};
    return config_parse_args(c, a ? (b ? 3 : 2) : 1, argv, e);
}

static void test_config_options(void)
{
    struct err e = {0};
    struct config c;
    T_OK(test_parse(&c, &e, NULL, NULL));
    T_EQ_STR(c.host, "127.0.0.1"); /* loopback unless told otherwise */
    T_EQ_INT(c.port, CONFIG_DEFAULT_PORT);
    T_CHECK(c.cpu_slots >= 1);
    T_EQ_STR(c.token, "");
    T_EQ_STR(c.cors_origin, "");
    T_OK(test_parse(&c, &e, "--cpu-slots", "8"));
    T_EQ_INT(c.cpu_slots, 8);
    T_CHECK(test_parse(&c, &e, "--cpu-slots", "0") < 0);
    T_EQ_STR(e.field, "cpu-slots");
    T_CHECK(test_parse(&c, &e, "--port", "70000") < 0);
    T_CHECK(test_parse(&c, &e, "--port", "12ab") < 0);
    T_CHECK(test_parse(&c, &e, "--log-level", "loud") < 0);
    T_CHECK(test_parse(&c, &e, "--bogus", NULL) < 0);
    T_CHECK(test_parse(&c, &e, "stray", NULL) < 0);
    char tok[128];
    snprintf(tok, sizeof tok, "%s/token", dir);
    FILE *f = fopen(tok, "w");
    fputs("abcdefghijklmnopqrstuvwxyz\n", f);
    fclose(f);
    T_CHECK(chmod(tok, 0600) == 0); /* a secret file: only its owner reads it */
    T_OK(test_parse(&c, &e, "--token-file", tok));
    T_EQ_STR(c.token, "abcdefghijklmnopqrstuvwxyz");
    f = fopen(tok, "w");
    fputs("short\n", f);
    fclose(f);
    T_CHECK(test_parse(&c, &e, "--token-file", tok) < 0);
    T_CHECK(test_parse(&c, &e, "--token-file", "/nonexistent/token") < 0);
    setenv("DDPB_TOKEN", "0123456789abcdef0123", 1);
    T_OK(test_parse(&c, &e, NULL, NULL));
    T_EQ_STR(c.token, "0123456789abcdef0123");
    setenv("DDPB_TOKEN", "has space 0123456789", 1);
    T_CHECK(test_parse(&c, &e, NULL, NULL) < 0);
    unsetenv("DDPB_TOKEN");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/ddpb-launch-XXXXXX");
    if (!mkdtemp(dir) || !getenv("DDPB_PROBE_BIN"))
        return 1;
    TEST_RUN(test_launcher_environment_and_fds);
    TEST_RUN(test_launcher_missing_binary);
    TEST_RUN(test_launcher_run_launcher);
    TEST_RUN(test_launcher_kills_only_real_orphans);
    TEST_RUN(test_launcher_sees_stopped_rank);
    TEST_RUN(test_config_options);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup failed\n");
    return test_end();
}
