/* faults: see faults.h. */
#include "daemon/faults.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/vocab.h"
#include "daemon/capture.h"
#include "daemon/launcher.h"

#define FAULTS_PERIOD_NS 10000000L /* a burner's duty cycle: 10 ms */
#define FAULTS_TC_TIMEOUT_MS 5000
#define FAULTS_LINK_DEV "eth0" /* netlab's host side of a node's link (deploy/netlab.sh) */
#define FAULTS_PROFILE_MIN_BURST 65536 /* deploy/netlab.sh shape_link's floor */
#define FAULTS_LINK_MIN_BURST 4096     /* a shaped fault's floor: a few full frames */

enum fault_state {
    FAULT_PENDING, /* not fired yet */
    FAULT_ACTIVE,  /* fired, to be undone at until_ms */
    FAULT_DONE,    /* fired (and undone, when it lasts) */
    FAULT_MISSED,  /* the run ended before it fired */
};

struct fault_run {
    struct spec_fault spec;
    enum vocab_fault_id kind;
    enum fault_state state;
    int64_t until_ms;
    double fired_at; /* unix s */
    int64_t step;
    struct faults_slow *slow; /* slow: one per rank (world_size), NULL until it fires */
    bool link_local;          /* link: this daemon shaped its own link */
};

struct faults {
    struct faults_host host;
    int n;
    struct fault_run f[SPEC_MAX_FAULTS];
    int64_t first_step_ms; /* when the run's first step was seen; 0 = not yet */
    int64_t seq;
    bool ended;
};

/* --- slow: SCHED_IDLE and a burner ---------------------------------------------------- */

/* Calls fn on every thread of pid. Threads that end meanwhile are skipped. Returns the
 * threads fn succeeded on (returned 0), -1 when pid has no task list. */
static int faults_each_thread(pid_t pid, int (*fn)(pid_t tid, void *ctx), void *ctx)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        int tid = atoi(de->d_name);
        if (tid > 0 && fn(tid, ctx) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static int faults_thread_policy(pid_t tid, void *policy)
{
    struct sched_param sp = {0};
    return sched_setscheduler(tid, *(int *)policy, &sp);
}

/* Sets every thread of pid to policy (SCHED_IDLE or SCHED_OTHER): the threads set, -1
 * when pid has no task list. */
static int faults_set_policy(pid_t pid, int policy)
{
    return faults_each_thread(pid, faults_thread_policy, &policy);
}

static int faults_thread_cpus(pid_t tid, void *all)
{
    cpu_set_t set;
    if (sched_getaffinity(tid, sizeof set, &set) < 0)
        return -1;
    CPU_OR((cpu_set_t *)all, (cpu_set_t *)all, &set);
    return 0;
}

/* The CPUs any thread of pid may run on: a pinned worker's OpenMP threads are each bound
 * to one CPU of the rank's (worker/store/rendezvous.h), its main thread to the first, so
 * pid's own affinity is not the rank's. -1 when no thread could be read. */
static int faults_process_cpus(pid_t pid, cpu_set_t *set)
{
    CPU_ZERO(set);
    return faults_each_thread(pid, faults_thread_cpus, set) > 0 ? 0 : -1;
}

static void faults_sleep_ns(long ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static long faults_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The burner's body (a forked child of a threaded daemon: system calls only). Dies with
 * its parent, and is killed by it. */
static _Noreturn void faults_burn(int cpu, double busy)
{
    cpu_set_t set;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, "ddpb-burner");
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    long on = (long)(busy * FAULTS_PERIOD_NS), off = FAULTS_PERIOD_NS - on;
    for (;;) {
        long end = faults_now_ns() + on;
        while (faults_now_ns() < end)
            ;
        if (off > 0)
            faults_sleep_ns(off);
    }
}

void faults_slow_end(struct faults_slow *s)
{
    for (int i = 0; i < s->n; i++) {
        kill(s->burners[i], SIGKILL);
        while (waitpid(s->burners[i], NULL, 0) < 0 && errno == EINTR)
            ;
    }
    s->n = 0;
    if (s->pid > 0)
        faults_set_policy(s->pid, SCHED_OTHER);
    s->pid = 0;
}

int faults_slow_begin(pid_t pid, double fraction, struct faults_slow *s)
{
    cpu_set_t set;
    memset(s, 0, sizeof *s);
    if (pid <= 0 || faults_process_cpus(pid, &set) < 0)
        return -1;
    s->pid = pid;
    s->pinned = CPU_COUNT(&set) < sysconf(_SC_NPROCESSORS_ONLN);
    if (faults_set_policy(pid, SCHED_IDLE) <= 0) {
        s->pid = 0;
        return -1;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE && s->n < FAULTS_MAX_BURNERS; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        pid_t b = fork();
        if (b == 0)
            faults_burn(cpu, 1.0 - fraction);
        if (b < 0) {
            faults_slow_end(s);
            return -1;
        }
        s->burners[s->n++] = b;
    }
    return 0;
}

/* --- link: tc in this daemon's namespace ---------------------------------------------- */

/* The profile's rate in bit/s (deploy/netlab.sh's profiles); 0: unshaped or unknown. */
static double faults_profile_bits(const char *profile)
{
    if (strcmp(profile, "1gbe") == 0)
        return 1e9;
    if (strcmp(profile, "10gbe") == 0)
        return 10e9;
    if (strcmp(profile, "25gbe") == 0)
        return 25e9;
    return 0;
}

static int faults_tc(char *const argv[], char *why, size_t cap)
{
    struct buf out = {0};
    struct err e = {0};
    int status = 0;
    int rc = capture_run(argv, FAULTS_TC_TIMEOUT_MS, NULL, NULL, &out, &status, &e);
    buf_free(&out);
    if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, cap, "tc %s %s failed%s%s", argv[1], argv[2], rc < 0 ? ": " : "",
                 rc < 0 ? e.msg : "");
        return -1;
    }
    return 0;
}

/* The link's egress as tbf at bits/s with a burst of 4 ms at the rate and at least
 * min_burst bytes (netlab's profiles: 64 KiB); bits 0 removes the shaping. A fault's rate
 * takes a smaller floor (FAULTS_LINK_MIN_BURST): at 10 Mbit/s 64 KiB is 52 ms of line
 * rate, which refills between two short steps and would let a step's gradients through
 * unshaped. */
static int faults_link_set(double bits, long min_burst, char *why, size_t cap)
{
    char rate[32], burst[32];
    long b = (long)(bits / 8 / 250);
    snprintf(rate, sizeof rate, "%.0fbit", bits);
    snprintf(burst, sizeof burst, "%ld", b < min_burst ? min_burst : b);
    char *shape[] = {"tc",   "qdisc", "replace", "dev", FAULTS_LINK_DEV, "root", "tbf",
                     "rate", rate,    "burst",   burst, "latency",       "50ms", NULL};
    char *del[] = {"tc", "qdisc", "del", "dev", FAULTS_LINK_DEV, "root", NULL};
    return faults_tc(bits > 0 ? shape : del, why, cap);
}

int faults_link_shape(double rate_mbit, char *why, size_t cap)
{
    return faults_link_set(rate_mbit * 1e6, FAULTS_LINK_MIN_BURST, why, cap);
}

int faults_link_restore(const char *profile, char *why, size_t cap)
{
    return faults_link_set(faults_profile_bits(profile), FAULTS_PROFILE_MIN_BURST, why, cap);
}

/* --- the run's faults ---------------------------------------------------------------- */

static bool faults_targets(const struct faults *fs, const struct fault_run *f, int rank)
{
    return f->spec.rank >= 0 ? f->spec.rank == rank
                             : fs->host.node_index(fs->host.arg, rank) == f->spec.node;
}

static void faults_event(struct faults *fs, const struct fault_run *f, const char *action,
                         int rank, int64_t step, const char *detail)
{
    int i = (int)(f - fs->f);
    json_t *ev = json_pack(
        "{s:s, s:s, s:i, s:s, s:i, s:i, s:I, s:f, s:I}", "type", "fault", "action", action,
        "fault", i, "kind", f->spec.kind, "rank", rank, "node",
        rank >= 0 ? fs->host.node_index(fs->host.arg, rank) : f->spec.node, "step",
        (json_int_t)step, "at", clock_wall_s(), "seq", (json_int_t)++fs->seq);
    if (ev && detail && detail[0])
        json_object_set_new(ev, "detail", json_string(detail));
    if (ev)
        fs->host.record(fs->host.arg, ev);
}

static void faults_outcome(struct faults *fs, const struct fault_run *f, double restored_at,
                           const char *note)
{
    fs->host.outcome(fs->host.arg, (int)(f - fs->f), f->state != FAULT_MISSED, f->fired_at,
                     f->step, restored_at, note);
}

/* A signal to one rank, here or through its follower; false when neither can. */
static bool faults_signal(struct faults *fs, int rank, int sig, const char *name)
{
    pid_t pid = fs->host.local_pid(fs->host.arg, rank);
    if (pid <= 0)
        return fs->host.remote(fs->host.arg, rank, name, 0);
    launcher_signal(pid, sig); /* its process group, as the daemon signals ranks */
    return true;
}

static void faults_slow_rank(struct faults *fs, struct fault_run *f, int rank, char *detail,
                             size_t cap)
{
    pid_t pid = fs->host.local_pid(fs->host.arg, rank);
    if (pid <= 0) {
        bool ok = fs->host.remote(fs->host.arg, rank, "SLOW", f->spec.fraction);
        snprintf(detail, cap, "%s", ok ? "sent to the rank's node" : "the rank is not running");
        return;
    }
    if (!f->slow)
        f->slow = calloc((size_t)fs->host.world_size, sizeof *f->slow);
    if (!f->slow || faults_slow_begin(pid, f->spec.fraction, &f->slow[rank]) < 0) {
        snprintf(detail, cap, "could not slow pid %d: %s", (int)pid, strerror(errno));
        return;
    }
    snprintf(detail, cap, "SCHED_IDLE and %d burner(s) at %.0f%% busy%s", f->slow[rank].n,
             (1 - f->spec.fraction) * 100, f->slow[rank].pinned ? "" : " (unpinned rank)");
}

/* Does (undo false) or undoes (undo true) f to one rank; detail says how it went. */
static void faults_act_rank(struct faults *fs, struct fault_run *f, int rank, bool undo,
                            char *detail, size_t cap)
{
    bool ok = true;
    detail[0] = '\0';
    switch (f->kind) {
    case VOCAB_FAULT_KILL: ok = undo || faults_signal(fs, rank, SIGKILL, "KILL"); break;
    case VOCAB_FAULT_STOP:
        ok = faults_signal(fs, rank, undo ? SIGCONT : SIGSTOP, undo ? "CONT" : "STOP");
        break;
    case VOCAB_FAULT_SLOW:
        if (!undo)
            faults_slow_rank(fs, f, rank, detail, cap);
        else if (f->slow && f->slow[rank].pid > 0)
            faults_slow_end(&f->slow[rank]);
        else if (fs->host.local_pid(fs->host.arg, rank) <= 0)
            fs->host.remote(fs->host.arg, rank, "FAST", 0);
        break;
    default: break;
    }
    if (!ok)
        snprintf(detail, cap, "the rank is not running");
}

/* link acts on a node, once: here, or through a rank of that node's follower. */
static void faults_act_link(struct faults *fs, struct fault_run *f, int rank, bool undo,
                            char *detail, size_t cap)
{
    if (fs->host.local_pid(fs->host.arg, rank) > 0 || f->link_local) {
        f->link_local = true;
        if (undo ? faults_link_restore(fs->host.network_profile, detail, cap) == 0
                 : faults_link_shape(f->spec.rate_mbit, detail, cap) == 0)
            snprintf(detail, cap, "%s %s", FAULTS_LINK_DEV,
                     undo ? "back to its profile" : "shaped");
        return;
    }
    if (!fs->host.remote(fs->host.arg, rank, undo ? "UNLINK" : "LINK", f->spec.rate_mbit))
        snprintf(detail, cap, "the node's follower cannot be asked");
}

/* Applies (undo false) or undoes f on each rank it targets, one event each (a link: one
 * per node). */
static void faults_apply(struct faults *fs, struct fault_run *f, bool undo, int64_t step)
{
    char detail[256];
    for (int r = 0; r < fs->host.world_size; r++) {
        if (!faults_targets(fs, f, r))
            continue;
        if (f->kind == VOCAB_FAULT_LINK) {
            faults_act_link(fs, f, r, undo, detail, sizeof detail);
            faults_event(fs, f, undo ? "restore" : "inject", -1, step, detail);
            return;
        }
        faults_act_rank(fs, f, r, undo, detail, sizeof detail);
        faults_event(fs, f, undo ? "restore" : "inject", r, step, detail);
    }
}

static bool faults_due(const struct faults *fs, const struct fault_run *f, int64_t now_ms,
                       int64_t steps_done)
{
    if (f->spec.at_step >= 0)
        return steps_done >= f->spec.at_step && steps_done > 0;
    return fs->first_step_ms > 0 &&
           now_ms - fs->first_step_ms >= (int64_t)(f->spec.at_s * 1000.0);
}

void faults_tick(struct faults *fs, int64_t now_ms, int64_t steps_done)
{
    if (!fs || fs->ended)
        return;
    if (steps_done > 0 && fs->first_step_ms == 0)
        fs->first_step_ms = now_ms;
    for (int i = 0; i < fs->n; i++) {
        struct fault_run *f = &fs->f[i];
        if (f->state == FAULT_PENDING && faults_due(fs, f, now_ms, steps_done)) {
            f->fired_at = clock_wall_s();
            f->step = steps_done;
            bool lasts = vocab_fault(f->kind)->duration;
            f->state = lasts ? FAULT_ACTIVE : FAULT_DONE;
            f->until_ms = now_ms + (int64_t)(f->spec.duration_s * 1000.0);
            log_info("fault %d (%s) injected at step %lld", i, f->spec.kind,
                     (long long)steps_done);
            faults_apply(fs, f, false, steps_done);
            faults_outcome(fs, f, -1, NULL);
        } else if (f->state == FAULT_ACTIVE && now_ms >= f->until_ms) {
            f->state = FAULT_DONE;
            faults_apply(fs, f, true, steps_done);
            faults_outcome(fs, f, clock_wall_s(), NULL);
        }
    }
}

void faults_end(struct faults *fs, const char *why)
{
    if (!fs || fs->ended)
        return;
    fs->ended = true;
    for (int i = 0; i < fs->n; i++) {
        struct fault_run *f = &fs->f[i];
        if (f->state == FAULT_ACTIVE) {
            f->state = FAULT_DONE;
            faults_apply(fs, f, true, f->step);
            faults_outcome(fs, f, clock_wall_s(), "undone early: the run ended");
        } else if (f->state == FAULT_PENDING) {
            char note[300];
            f->state = FAULT_MISSED;
            snprintf(note, sizeof note, "not injected: the run ended first (%s)",
                     why && why[0] ? why : "it finished");
            faults_event(fs, f, "not_injected", f->spec.rank, -1, note);
            faults_outcome(fs, f, -1, note);
        }
    }
}

bool faults_check_placement(const struct faults *fs, int nodes, char *msg, size_t cap)
{
    for (int i = 0; fs && i < fs->n; i++) {
        const struct fault_run *f = &fs->f[i];
        if (f->spec.node >= nodes) {
            snprintf(msg, cap,
                     "faults[%d].node: node %d, but the run was placed on %d node%s; nodes "
                     "are 0 to %d",
                     i, f->spec.node, nodes, nodes == 1 ? "" : "s", nodes - 1);
            return false;
        }
        if (vocab_fault(f->kind)->network && !fs->host.network_profile[0]) {
            snprintf(msg, cap,
                     "faults[%d].kind: \"%s\" shapes a node's emulated link, and this daemon "
                     "has none (no --network-profile: run it under deploy/netlab.sh)",
                     i, f->spec.kind);
            return false;
        }
    }
    return true;
}

bool faults_note(const struct faults *fs, int rank, char *out, size_t cap)
{
    for (int i = 0; fs && i < fs->n; i++) {
        const struct fault_run *f = &fs->f[i];
        if (f->kind == VOCAB_FAULT_KILL && f->state == FAULT_DONE &&
            faults_targets(fs, f, rank)) {
            snprintf(out, cap, "the daemon injected fault %d (kill) at step %lld", i,
                     (long long)f->step);
            return true;
        }
    }
    return false;
}

struct faults *faults_create(const struct spec *spec, const struct faults_host *host)
{
    if (spec->n_faults <= 0)
        return NULL;
    struct faults *fs = calloc(1, sizeof *fs);
    if (!fs)
        return NULL;
    fs->host = *host;
    fs->n = spec->n_faults < SPEC_MAX_FAULTS ? spec->n_faults : SPEC_MAX_FAULTS;
    for (int i = 0; i < fs->n; i++) {
        fs->f[i].spec = spec->faults[i];
        fs->f[i].kind = (enum vocab_fault_id)vocab_find(VOCAB_FAULT, spec->faults[i].kind);
        if ((int)fs->f[i].kind < 0) /* a stored spec from another version: never fires */
            fs->f[i].state = FAULT_MISSED;
    }
    return fs;
}

void faults_free(struct faults *fs)
{
    if (!fs)
        return;
    faults_end(fs, "the daemon let the run go");
    for (int i = 0; i < fs->n; i++)
        free(fs->f[i].slow);
    free(fs);
}
