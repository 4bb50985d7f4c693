/* Unit tests for daemon/faults: when each fault fires (at_step on the run's steps, at_s
 * after its first step), what it does to real processes standing in for ranks (SIGKILL,
 * SIGSTOP then SIGCONT, SCHED_IDLE and a burner, all undone), a node's fault on each of
 * its ranks, a rank on another node sent to its follower, the undoing and the "not
 * injected" record at the run's end, the placement checks and the kill's note. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/faults.h"
#include "tests/unit/test.h"

#define W 3

struct fake {
    pid_t pid[W];
    int node[W];
    json_t *events; /* recorded */
    char remote[256];
    int outcomes, injected;
};

static pid_t fake_pid(void *arg, int rank)
{
    struct fake *f = arg;
    return f->node[rank] == 0 ? f->pid[rank] : 0;
}

static int fake_node(void *arg, int rank)
{
    struct fake *f = arg;
    return f->node[rank];
}

static bool fake_remote(void *arg, int rank, const char *action, double value)
{
    struct fake *f = arg;
    size_t n = strlen(f->remote);
    snprintf(f->remote + n, sizeof f->remote - n, "%d:%s:%g;", rank, action, value);
    return true;
}

static void fake_record(void *arg, json_t *ev)
{
    struct fake *f = arg;
    json_array_append_new(f->events, ev);
}

static void fake_outcome(void *arg, int fault, bool injected, double at, int64_t step,
                         double restored_at, const char *note)
{
    struct fake *f = arg;
    (void)fault, (void)at, (void)step, (void)restored_at, (void)note;
    f->outcomes++;
    f->injected += injected;
}

static pid_t spin(void)
{
    pid_t p = fork();
    if (p == 0) {
        for (;;)
            pause();
    }
    return p;
}

static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] && p[2] ? p[2] : '?';
}

static void fake_start(struct fake *f, struct faults_host *h, int remote_rank)
{
    memset(f, 0, sizeof *f);
    f->events = json_array();
    for (int i = 0; i < W; i++) {
        f->pid[i] = spin();
        f->node[i] = i == remote_rank ? 1 : 0;
    }
    *h = (struct faults_host){.arg = f,
                              .world_size = W,
                              .local_pid = fake_pid,
                              .node_index = fake_node,
                              .remote = fake_remote,
                              .record = fake_record,
                              .outcome = fake_outcome,
                              .network_profile = ""};
}

static void fake_stop(struct fake *f)
{
    for (int i = 0; i < W; i++) {
        kill(f->pid[i], SIGKILL);
        waitpid(f->pid[i], NULL, 0);
    }
    json_decref(f->events);
}

static const char *ev_str(const struct fake *f, size_t i, const char *k)
{
    return json_string_value(json_object_get(json_array_get(f->events, i), k));
}

static int ev_int(const struct fake *f, size_t i, const char *k)
{
    return (int)json_integer_value(json_object_get(json_array_get(f->events, i), k));
}

static struct spec_fault fault(const char *kind, int64_t at_step, double at_s, int rank,
                               int node, double dur)
{
    struct spec_fault x = {.at_step = at_step,
                           .at_s = at_s,
                           .rank = rank,
                           .node = node,
                           .duration_s = dur,
                           .fraction = 0.5};
    snprintf(x.kind, sizeof x.kind, "%s", kind);
    return x;
}

static void test_faults_stop_then_cont(void)
{
    struct fake f;
    struct faults_host h;
    fake_start(&f, &h, -1);
    struct spec s = {.n_faults = 1};
    s.faults[0] = fault("stop", 10, -1, 1, -1, 0.5);
    struct faults *fs = faults_create(&s, &h);
    T_CHECK(fs != NULL);
    faults_tick(fs, 1000, 9);
    T_EQ_INT((int)json_array_size(f.events), 0); /* step 9: not yet */
    faults_tick(fs, 1100, 10);
    T_EQ_INT((int)json_array_size(f.events), 1);
    T_EQ_STR(ev_str(&f, 0, "action"), "inject");
    T_EQ_INT(ev_int(&f, 0, "rank"), 1);
    T_EQ_INT(ev_int(&f, 0, "step"), 10);
    usleep(50000);
    T_CHECK(proc_state(f.pid[1]) == 'T');
    T_CHECK(proc_state(f.pid[0]) != 'T');
    faults_tick(fs, 1500, 12); /* 400 ms of 500: still stopped */
    T_EQ_INT((int)json_array_size(f.events), 1);
    faults_tick(fs, 1600, 12);
    T_EQ_INT((int)json_array_size(f.events), 2);
    T_EQ_STR(ev_str(&f, 1, "action"), "restore");
    usleep(50000);
    T_CHECK(proc_state(f.pid[1]) != 'T');
    T_EQ_INT(f.outcomes, 2);
    faults_free(fs);
    T_EQ_INT((int)json_array_size(f.events), 2); /* nothing left to undo or note */
    fake_stop(&f);
}

/* at_s counts from the first step seen; a node's fault acts on each of its ranks; the run's
 * end undoes a fault in effect and notes the one never fired. */
static void test_faults_at_s_node_and_end(void)
{
    struct fake f;
    struct faults_host h;
    fake_start(&f, &h, -1);
    struct spec s = {.n_faults = 2};
    s.faults[0] = fault("stop", -1, 1.0, -1, 0, 100);
    s.faults[1] = fault("kill", 1000, -1, 2, -1, 0);
    struct faults *fs = faults_create(&s, &h);
    faults_tick(fs, 5000, 0); /* no step yet: the clock has not started */
    faults_tick(fs, 9000, 1); /* first step: at 9000 */
    faults_tick(fs, 9999, 3);
    T_EQ_INT((int)json_array_size(f.events), 0);
    faults_tick(fs, 10000, 4);
    T_EQ_INT((int)json_array_size(f.events), W); /* every rank of node 0 */
    usleep(50000);
    for (int i = 0; i < W; i++)
        T_CHECK(proc_state(f.pid[i]) == 'T');
    faults_end(fs, "cancelled");
    usleep(50000);
    for (int i = 0; i < W; i++)
        T_CHECK(proc_state(f.pid[i]) != 'T');
    size_t n = json_array_size(f.events);
    T_EQ_INT((int)n, 2 * W + 1);
    T_EQ_STR(ev_str(&f, n - 1, "action"), "not_injected");
    T_CHECK(strstr(ev_str(&f, n - 1, "detail"), "cancelled") != NULL);
    T_EQ_INT(f.injected, 2); /* the stop's inject and restore outcomes */
    faults_end(fs, "again");
    T_EQ_INT((int)json_array_size(f.events), 2 * W + 1);
    faults_free(fs);
    fake_stop(&f);
}

static int policy_of(pid_t pid)
{
    return sched_getscheduler(pid);
}

static void test_faults_slow_and_kill(void)
{
    struct fake f;
    struct faults_host h;
    fake_start(&f, &h, -1);
    struct spec s = {.n_faults = 2};
    s.faults[0] = fault("slow", 1, -1, 0, -1, 100);
    s.faults[1] = fault("kill", 2, -1, 2, -1, 0);
    struct faults *fs = faults_create(&s, &h);
    faults_tick(fs, 100, 1);
    T_EQ_INT(policy_of(f.pid[0]), SCHED_IDLE);
    T_CHECK(strstr(ev_str(&f, 0, "detail"), "burner") != NULL);
    char note[128];
    T_CHECK(!faults_note(fs, 2, note, sizeof note));
    faults_tick(fs, 200, 2);
    int ws = 0;
    T_CHECK(waitpid(f.pid[2], &ws, 0) == f.pid[2] && WIFSIGNALED(ws) &&
            WTERMSIG(ws) == SIGKILL);
    f.pid[2] = spin(); /* fake_stop kills and reaps each */
    T_CHECK(faults_note(fs, 2, note, sizeof note));
    T_CHECK(strstr(note, "injected fault 1 (kill) at step 2") != NULL);
    T_CHECK(!faults_note(fs, 0, note, sizeof note));
    faults_end(fs, "done");
    T_EQ_INT(policy_of(f.pid[0]), SCHED_OTHER);
    /* the burner is reaped: no child but the fake ranks */
    T_CHECK(waitpid(-1, NULL, WNOHANG) == 0);
    faults_free(fs);
    fake_stop(&f);
}

/* A rank on another node: its follower is asked, for the fault and its undoing. */
static void test_faults_remote(void)
{
    struct fake f;
    struct faults_host h;
    fake_start(&f, &h, 2);
    struct spec s = {.n_faults = 2};
    s.faults[0] = fault("stop", 1, -1, 2, -1, 0.1);
    s.faults[1] = fault("slow", 1, -1, -1, 1, 0.1);
    struct faults *fs = faults_create(&s, &h);
    faults_tick(fs, 0, 1);
    faults_tick(fs, 200, 1);
    T_EQ_STR(f.remote, "2:STOP:0;2:SLOW:0.5;2:CONT:0;2:FAST:0;");
    faults_free(fs);
    fake_stop(&f);
}

static void test_faults_placement(void)
{
    struct fake f;
    struct faults_host h;
    fake_start(&f, &h, -1);
    char msg[256];
    struct spec s = {.n_faults = 2};
    s.faults[0] = fault("kill", 1, -1, 0, -1, 0);
    s.faults[1] = fault("kill", 1, -1, -1, 2, 0);
    struct faults *fs = faults_create(&s, &h);
    T_CHECK(!faults_check_placement(fs, 2, msg, sizeof msg));
    T_CHECK(strstr(msg, "faults[1].node: node 2, but the run was placed on 2 nodes") != NULL);
    T_CHECK(faults_check_placement(fs, 3, msg, sizeof msg));
    faults_free(fs);
    s.n_faults = 1;
    s.faults[0] = fault("link", 1, -1, -1, 0, 1);
    fs = faults_create(&s, &h);
    T_CHECK(!faults_check_placement(fs, 1, msg, sizeof msg));
    T_CHECK(strstr(msg, "faults[0].kind") && strstr(msg, "--network-profile"));
    faults_free(fs);
    s.n_faults = 0;
    T_CHECK(faults_create(&s, &h) == NULL);
    fake_stop(&f);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_faults_stop_then_cont);
    TEST_RUN(test_faults_at_s_node_and_end);
    TEST_RUN(test_faults_slow_and_kill);
    TEST_RUN(test_faults_remote);
    TEST_RUN(test_faults_placement);
    return test_end();
}
