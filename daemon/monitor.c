/* monitor: see monitor.h. One active run: its ranks, their pipes and exits. */
#include "daemon/monitor.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/report.h"
#include "common/vocab.h"
#include "daemon/channel.h"
#include "daemon/cluster.h"
#include "daemon/elastic.h"
#include "daemon/elastic_restart.h"
#include "daemon/engines.h"
#include "daemon/faults.h"
#include "daemon/ingest.h"
#include "daemon/launch_plan.h"
#include "daemon/launcher.h"
#include "daemon/storage_mount.h"

struct run_rank {
    int rank;
    int node;                  /* the cluster's node id (daemon/cluster.h): 0 = this one */
    int node_rank, local_rank; /* its node's index in the run, its index on that node */
    pid_t pid;                 /* 0 for a rank on another node until it says */
    int report_fd, pidfd;
    struct monitor_watch wreport, wexit;
    struct monitor_watch wstorage; /* its ddpbench-fs's pidfd (watched: storage_watched) */
    bool storage_watched;
    struct buf line; /* partial report line */
    bool spawned, exited;
    bool settled;   /* exit recorded, fds closed */
    bool channel;   /* another launcher started it: it reports over the report channel */
    bool connected; /* its channel connection proved itself */
    bool lost;      /* its channel ended without done or an error: it died */
    bool retired;   /* elastic restart: its slot is past the generation's world */
    bool joiner;    /* an elastic run's replacement: spawned with DDPB_ELASTIC_JOIN=1 */
    int wstatus;
    int signal_sent;      /* last signal the daemon sent, 0 = none */
    int64_t exit_order;   /* order in which exits were seen */
    char bad_report[256]; /* set when the rank broke the report protocol */
    char node_error[200]; /* its follower refused or killed it: why (the exit's "error") */
    int64_t last_seen_ms; /* monotonic time of its last report line (or its spawn) */
    const struct ingest_rank *said; /* borrowed from the run's ingest: what it reported
                                       (error, done, phase) */
};

struct active_run {
    const struct monitor_ctx *ctx;
    int64_t id, experiment_id;
    int world_size;
    struct run_rank *ranks;
    struct ingest_run ingest; /* its report lines' state (daemon/ingest.h) */
    int n_settled;
    int64_t exits_seen;
    char ns[32], secret[40], dir[PATH_MAX - 64];
    char engine[12]; /* who runs the ranks: "ddpbench" or a framework (launcher.h) */
    /* Another launcher (monitor.h): the one process the daemon started, its pidfd and
     * exit, the report channel its ranks connect to */
    bool foreign;
    pid_t launcher_pid;
    int launcher_pidfd;
    struct monitor_watch wlauncher;
    bool launcher_exited;
    int launcher_wstatus;
    int64_t launcher_kill_at_ms; /* 0: its ranks have not all ended yet */
    bool launcher_termed;        /* it outlived them and was sent SIGTERM */
    char launcher_name[32];      /* argv[0], for messages */
    char launcher_note[400];     /* how it ended and the last line of its log */
    char cpu_map[2048];          /* DDPB_CPU_MAP given to its ranks; "" = not pinned */
    struct channel *channel;
    char script[PATH_MAX];    /* engine "script": its resolved program; else "" */
    int64_t memory_limit_mib; /* each rank's RLIMIT_AS (monitor_memory_limit); 0: none */
    int64_t deadline_ms, kill_at_ms;
    int timeout_s, heartbeat_timeout_s;
    int stop_rank;
    struct faults *faults; /* its injected faults (daemon/faults.h); NULL: none */
    int64_t event_seq;     /* run_events rows written */
    bool stopping, finished, store_registered;
    enum db_run_status stop_status;
    char stop_reason[1024];
    /* Elastic runs (the spec's "elastic", daemon/elastic.h): the slots' state, and what a
     * replacement is spawned with (each rank's CPUs as at the start, the store address) */
    struct elastic_run elastic;
    int *cpus, cpus_per;
    /* elastic restart mode (pytorch) and Horovod's elastic driver (horovod):
     * daemon/elastic_restart.h's state (the group's stop, the checkpoint folder); NULL
     * otherwise. A restarted generation's GPUs are those the run started with (owned). */
    struct elastic_restart *restart;
    struct gpu_plan *restart_gpu;
    int restart_nccl;
    char store_addr[192];
    /* its ranks' storage mounts (dataset.storage_layer resolved to mount); NULL: none */
    struct storage_mounts *mounts;
};

/* --- helpers -------------------------------------------------------------------- */

static bool monitor_is_driver(const struct db_queued_run *q);
static int monitor_driver_plan(struct active_run *r, const char *report, const char *cpu_map,
                               struct launch_plan *plan, struct err *e);

/* The run's status changed; at its end the experiment's status is published too. */
static void monitor_publish_status(const struct active_run *r, enum db_run_status st,
                                   const char *error, int error_rank)
{
    json_t *d = json_pack("{s:s, s:i}", "status", db_run_status_name(st), "world_size",
                          r->world_size);
    if (d && error)
        json_object_set_new(d, "error", json_string(error));
    if (d && error_rank >= 0)
        json_object_set_new(d, "error_rank", json_integer(error_rank));
    events_publish_run(r->ctx->events, r->experiment_id, r->id, "run", d);
    if (st == DB_RUN_STARTING || st == DB_RUN_RUNNING)
        return;
    struct err e = {0};
    json_t *exp = db_get_experiment(r->ctx->db, r->experiment_id, &e);
    if (exp) {
        json_t *x = json_pack("{s:O, s:O, s:O}", "id", json_object_get(exp, "id"), "status",
                              json_object_get(exp, "status"), "runs_finished",
                              json_object_get(exp, "runs_finished"));
        if (x)
            events_publish(r->ctx->events, r->experiment_id, "experiment", x);
        json_decref(x);
        json_decref(exp);
    }
}

static void monitor_db_warn(const struct active_run *r, int rc, const struct err *e)
{
    if (rc < 0)
        log_error("run %lld: database: %s", (long long)r->id, e->msg);
}

static int monitor_make_secret(char *out, size_t cap, struct err *e)
{
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return err_errno(e, "getrandom");
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < cap; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int monitor_mkdirs(const char *path, struct err *e)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return err_errno(e, "mkdir %s", tmp);
        *p = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "mkdir %s", tmp);
    return 0;
}

static int monitor_write_file(const char *path, const char *text, struct err *e)
{
    FILE *f = fopen(path, "we");
    if (!f)
        return err_errno(e, "open %s", path);
    bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (fclose(f) != 0 || !ok)
        return err_errno(e, "write %s", path);
    return 0;
}

static bool monitor_rank_ok(const struct run_rank *k)
{
    return k->exited && WIFEXITED(k->wstatus) && WEXITSTATUS(k->wstatus) == 0 &&
           k->said->said_done && !k->bad_report[0];
}

/* Sends sig to every live rank. A stopped rank (SIGSTOP, a tracer) gets SIGKILL instead
 * of SIGTERM: it would act on SIGTERM only once continued, so the grace period would
 * pass in vain. SIGCONT then SIGTERM was the alternative, and rejected: a rank frozen
 * past its heartbeat timeout has already been declared failed, continuing it would let
 * it run (and report) after that, and a traced stop ('t') ignores SIGCONT anyway. */
/* A rank of another launcher, by the pid it reported, when it is a process of this run
 * on this node (its environment names the run: a pid on another node, or reused, is
 * left alone). */
static void monitor_signal_channel_rank(const struct active_run *r, const struct run_rank *k,
                                        int sig)
{
    if (k->connected && k->pid > 0 && launcher_is_run_process(k->pid, r->ns))
        launcher_signal(k->pid, sig);
}

/* The run stops: what a fault stopped or slowed is undone before the ranks are signalled
 * (a stopped rank is continued first), what never fired is noted. Not part of
 * monitor_send_all: an elastic restart signals a generation, not the run's end. */
static void monitor_end_faults(struct active_run *r)
{
    faults_end(r->faults, r->stop_reason[0] ? r->stop_reason : "a rank failed");
}

static void monitor_send_all(struct active_run *r, int sig)
{
    int told = -1; /* the last node sent a command: a node's ranks are contiguous */
    if (r->foreign && r->launcher_pid > 0 && !r->launcher_exited)
        launcher_signal(r->launcher_pid, sig); /* it passes it on to the ranks it started */
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (!k->spawned || k->exited)
            continue;
        if (k->channel) {
            monitor_signal_channel_rank(r, k, sig);
            k->signal_sent = sig;
            continue;
        }
        if (k->node != 0) { /* its follower signals it (daemon/follower.c does the rest) */
            if (k->node != told)
                cluster_send(r->ctx->cluster, k->node,
                             json_pack("{s:s, s:I, s:s}", "op", "signal", "run",
                                       (json_int_t)r->id, "signal",
                                       sig == SIGKILL ? "KILL" : "TERM"));
            told = k->node;
            k->signal_sent = sig;
            continue;
        }
        int s = sig == SIGTERM && launcher_is_stopped(k->pid) ? SIGKILL : sig;
        launcher_signal(k->pid, s);
        k->signal_sent = s;
    }
}

/* While stopping: a rank stopped after it was sent SIGTERM is killed now too. */
static void monitor_kill_stopped(struct active_run *r)
{
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (k->spawned && !k->exited && k->node == 0 && !k->channel &&
            k->signal_sent == SIGTERM && launcher_is_stopped(k->pid)) {
            launcher_signal(k->pid, SIGKILL);
            k->signal_sent = SIGKILL;
        }
    }
}

/* --- the end of a rank --------------------------------------------------------------- */

static void monitor_handle_line(struct active_run *r, struct run_rank *k, const char *line,
                                size_t len);

/* buf_read_lines' callback (ctx: the rank): a whole line, or one past the limit. */
static void monitor_on_line(void *ctx, const char *line, size_t len)
{
    struct run_rank *k = ctx;
    if (line) {
        monitor_handle_line(k->wreport.run, k, line, len);
    } else if (!k->bad_report[0]) {
        snprintf(k->bad_report, sizeof k->bad_report, "report line longer than %u bytes",
                 REPORT_MAX_LINE);
    }
}

static void monitor_channel_closed(struct active_run *r, struct run_rank *k);

static void monitor_read_reports(struct active_run *r, struct run_rank *k)
{
    int rc = buf_read_lines(k->report_fd, &k->line, REPORT_MAX_LINE, monitor_on_line, k);
    if (rc < 0 && !k->bad_report[0])
        snprintf(k->bad_report, sizeof k->bad_report, "out of memory reading reports");
    if (rc != 1)
        return;
    loop_watch_remove(r->ctx->loop, &k->wreport.lw);
    close(k->report_fd);
    k->report_fd = -1;
    if (k->line.len > 0 && !k->bad_report[0])
        snprintf(k->bad_report, sizeof k->bad_report, "report stream ended inside a line");
    if (k->channel)
        monitor_channel_closed(r, k);
}

static void monitor_reap(struct active_run *r, struct run_rank *k)
{
    if (k->spawned && !k->exited && k->node == 0 && !k->channel &&
        waitpid(k->pid, &k->wstatus, WNOHANG) == k->pid) {
        k->exited = true;
        k->exit_order = ++r->exits_seen;
        launcher_end_group(k->pid); /* what the rank left running ends with it */
    }
}

static void monitor_settle(struct active_run *r, struct run_rank *k);
static bool monitor_restart_absorbs(const struct active_run *r, const struct run_rank *k);
static void monitor_restart_begin(struct active_run *r, struct run_rank *k,
                                  const struct elastic_decision *d);
static void monitor_restart_next(struct active_run *r);
static void monitor_driver_lost(struct active_run *r, struct run_rank *k);
static void monitor_driver_joined(struct active_run *r, struct run_rank *k);
static void monitor_slot_forget(struct active_run *r, struct run_rank *k);
static bool monitor_elastic_lost(struct active_run *r, struct run_rank *k, const char *what);
static void monitor_elastic_done(struct active_run *r, struct run_rank *k);

/* --- the ranks' storage mounts (daemon/storage_mount.h) ----------------------------------- */

static void monitor_on_fd(void *ctx, uint32_t events);

static void monitor_storage_unwatch(struct active_run *r, struct run_rank *k)
{
    if (k->storage_watched)
        loop_watch_remove(r->ctx->loop, &k->wstorage.lw);
    k->storage_watched = false;
}

/* Whether rank's ddpbench-fs died: the run fails naming the storage layer (the first
 * stop reason wins, and a rank that failed because its reads did is not blamed), and
 * the mount is detached at once, so no reader hangs. */
static void monitor_storage_check(struct active_run *r, int rank)
{
    char how[400], reason[600];
    if (!r->mounts || !storage_mounts_died(r->mounts, rank, how, sizeof how))
        return;
    monitor_storage_unwatch(r, &r->ranks[rank]);
    storage_mounts_end(r->mounts, rank);
    if (r->finished)
        return;
    snprintf(reason, sizeof reason,
             "dataset.storage: the storage layer for rank %d (ddpbench-fs) died: %s", rank,
             how);
    log_error("run %lld: %s", (long long)r->id, reason);
    monitor_stop_run(r, DB_RUN_FAILED, rank, reason);
}

static void monitor_storage_poll(struct active_run *r)
{
    for (int i = 0; r->mounts && i < r->world_size; i++)
        monitor_storage_check(r, i);
}

/* Every end of the run: the watches first (the pidfds close), then the mounts. */
static void monitor_storage_stop(struct active_run *r)
{
    if (!r->mounts)
        return;
    for (int i = 0; i < r->world_size; i++)
        monitor_storage_unwatch(r, &r->ranks[i]);
    storage_mounts_stop(r->mounts);
}

/* The dataset's directory as the worker resolves it (worker/data/dataset.c
 * data_open_dir): dataset.path, else the packaged fashion-mnist's. */
static int monitor_storage_source(const struct spec_dataset *d, char *out, struct err *e)
{
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s",
             d->path[0] ? d->path : CONFIG_SYSTEM_DATA_DIR "/fashion-mnist");
    if (!realpath(want, out))
        return err_set(e, ERR_INVALID, "dataset.path",
                       "dataset.storage: the dataset directory %s: %s", want, strerror(errno));
    return 0;
}

/* A run whose reads go through mounts (spec_storage_layer_of): its set, made here. The
 * daemon starts each rank's mount itself, so every rank must be one it spawns on this
 * node (the submit refuses the others with 409; this names why if one got through). */
static int monitor_storage_prepare(struct active_run *r, const struct db_queued_run *q,
                                   struct err *e)
{
    const struct spec_dataset *d = &q->spec.train.dataset;
    char source[PATH_MAX];
    if (q->spec.workload != SPEC_WORKLOAD_TRAIN ||
        spec_storage_layer_of(d) != SPEC_STORAGE_MOUNT)
        return 0;
    bool remote = false;
    for (int i = 0; i < r->world_size; i++)
        remote = remote || r->ranks[i].node != 0;
    if (r->foreign || remote)
        return err_set(e, ERR_CONFLICT, "dataset.storage",
                       "dataset.storage: the storage mounts are made per rank by ddpbenchd "
                       "for the ranks it starts on its own node; %s starts them",
                       r->foreign ? "another launcher" : "another node");
    if (monitor_storage_source(d, source, e) < 0)
        return -1;
    r->mounts = storage_mounts_create(r->ctx->cfg->fs_path, r->dir, source, d, r->world_size);
    return r->mounts ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
}

/* Rank k's mount, started (once) and watched; its path in mnt. */
static int monitor_storage_start(struct active_run *r, struct run_rank *k, char *mnt,
                                 size_t cap, struct err *e)
{
    if (storage_mounts_start(r->mounts, k->rank, mnt, cap, e) < 0)
        return -1;
    if (!k->storage_watched &&
        loop_watch_add(r->ctx->loop, &k->wstorage.lw, storage_mounts_pidfd(r->mounts, k->rank),
                       EPOLLIN, monitor_on_fd, &k->wstorage, e) == 0)
        k->storage_watched = true;
    return 0; /* unwatched, its death is still found when the run ends or a rank fails */
}

static void monitor_rank_failed(struct active_run *r, struct run_rank *k)
{
    monitor_storage_poll(r); /* a rank whose reads failed with its mount: the mount's */
    if (r->stopping)
        return;
    r->stopping = true;
    r->stop_status = DB_RUN_FAILED;
    r->stop_reason[0] = '\0'; /* attributed when every rank is gone */
    r->kill_at_ms = clock_mono_ms() + r->ctx->cfg->kill_grace_ms;
    log_info("run %lld: rank %d failed; stopping the other ranks", (long long)r->id, k->rank);
    /* Reap every rank that already died before signalling, so a crash that caused this
     * failure is recorded as a crash and not as our SIGTERM. */
    for (int i = 0; i < r->world_size; i++)
        monitor_reap(r, &r->ranks[i]);
    monitor_end_faults(r);
    monitor_send_all(r, SIGTERM);
    for (int i = 0; i < r->world_size; i++)
        monitor_settle(r, &r->ranks[i]);
}

static void monitor_describe_exit(const struct active_run *r, const struct run_rank *k,
                                  char *out, size_t cap)
{
    if (k->node_error[0])
        snprintf(out, cap, "%s", k->node_error);
    else if (k->channel && !k->connected && !k->bad_report[0])
        snprintf(out, cap, "never connected its report channel (%s)",
                 r->launcher_note[0] ? r->launcher_note : "its launcher did not start it");
    else if (k->lost && !k->bad_report[0])
        snprintf(out, cap,
                 "ended its report channel without done or an error: it died or was "
                 "killed%s%s%s",
                 r->launcher_note[0] ? " (" : "", r->launcher_note[0] ? r->launcher_note : "",
                 r->launcher_note[0] ? ")" : "");
    else if (k->lost && k->bad_report[0])
        snprintf(out, cap, "broke the report protocol: %s", k->bad_report);
    else if (k->bad_report[0])
        snprintf(out, cap, "broke the report protocol: %s", k->bad_report);
    else if (WIFSIGNALED(k->wstatus))
        snprintf(out, cap, "was killed by signal %d (%s)%s%s", WTERMSIG(k->wstatus),
                 strsignal(WTERMSIG(k->wstatus)), k->said->error[0] ? ": " : "",
                 k->said->error);
    else if (WEXITSTATUS(k->wstatus) == 0 && !k->said->said_done)
        snprintf(out, cap, "exited with status 0 without reporting done");
    else if (k->said->error[0])
        snprintf(out, cap, "exited with status %d: %s", WEXITSTATUS(k->wstatus),
                 k->said->error);
    else
        snprintf(out, cap, "exited with status %d without reporting an error",
                 WEXITSTATUS(k->wstatus));
    char note[128];
    size_t len = strlen(out);
    if (faults_note(r->faults, k->rank, note, sizeof note) && len < cap)
        snprintf(out + len, cap - len, " (%s)", note);
}

/* How strongly a failed rank is the cause rather than a victim (see monitor.h). */
static int monitor_blame(const struct run_rank *k)
{
    if (monitor_rank_ok(k))
        return 0;
    if (k->lost) /* a rank of another launcher that died: killed by us, or the cause */
        return k->signal_sent ? 0 : 4;
    if (WIFSIGNALED(k->wstatus))
        return WTERMSIG(k->wstatus) == k->signal_sent ? 0 : 4;
    const char *code = k->said->error_code;
    if (k->bad_report[0] || !k->said->error[0])
        return 3;
    if (strcmp(code, "peer") == 0 || strcmp(code, "timeout") == 0 ||
        strcmp(code, "aborted") == 0)
        return 1;
    return 2;
}

/* True when another rank's error names k as the peer it lost. */
static bool monitor_named_by_peer(const struct active_run *r, const struct run_rank *k)
{
    for (int i = 0; i < r->world_size; i++)
        if (i != k->rank && r->ranks[i].said->error[0] &&
            r->ranks[i].said->error_peer == k->rank)
            return true;
    return false;
}

/* Between two ranks as much to blame, the one a peer names, then the first to end: ranks
 * of another launcher that it killed after the first one died end close together, and
 * when the daemon sees their ends in one batch (its launcher exited meanwhile) the order
 * it reads them in says nothing. */
static bool monitor_blame_first(const struct active_run *r, const struct run_rank *k,
                                const struct run_rank *best)
{
    bool named = monitor_named_by_peer(r, k), best_named = monitor_named_by_peer(r, best);
    if (named != best_named)
        return named;
    return k->exit_order < best->exit_order;
}

static void monitor_attribute(struct active_run *r, int *rank_out, char *msg, size_t cap)
{
    struct run_rank *best = NULL;
    int best_score = 0;
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        int s = k->spawned && !elastic_slot_forgiven(&r->elastic, i) ? monitor_blame(k) : 0;
        if (s > best_score || (s == best_score && s > 0 && monitor_blame_first(r, k, best))) {
            best = k;
            best_score = s;
        }
    }
    if (!best) {
        *rank_out = -1;
        snprintf(msg, cap, "the run failed but no rank reported why");
        return;
    }
    char what[768];
    monitor_describe_exit(r, best, what, sizeof what);
    int peer = best->said->error_peer;
    if (best_score == 1 && peer >= 0 && peer < r->world_size && peer != best->rank &&
        !monitor_rank_ok(&r->ranks[peer])) {
        *rank_out = peer;
        snprintf(msg, cap, "rank %d stopped responding or died (rank %d %s)", peer, best->rank,
                 what);
        return;
    }
    *rank_out = best->rank;
    snprintf(msg, cap, "rank %d %s", best->rank, what);
}

static void monitor_finish(struct active_run *r)
{
    monitor_storage_poll(r);
    monitor_storage_stop(r);
    struct err e = {0};
    enum db_run_status status = DB_RUN_SUCCEEDED;
    char msg[1024] = "";
    int rank = -1;
    bool all_ok = true;
    faults_end(r->faults, "the run finished");
    for (int i = 0; i < r->world_size; i++) /* an elastic run's lost slots are forgiven */
        all_ok = all_ok &&
                 (monitor_rank_ok(&r->ranks[i]) || elastic_slot_forgiven(&r->elastic, i));
    if (r->stopping && r->stop_reason[0]) {
        status = r->stop_status;
        rank = r->stop_rank;
        snprintf(msg, sizeof msg, "%s", r->stop_reason);
    } else if (!all_ok) {
        status = DB_RUN_FAILED;
        monitor_attribute(r, &rank, msg, sizeof msg);
    }
    int rc = db_run_finish(r->ctx->db, r->id, status, msg[0] ? msg : NULL, rank, &e);
    monitor_db_warn(r, rc, &e);
    if (r->store_registered)
        store_server_remove_run(r->ctx->store, r->ns);
    r->store_registered = false;
    r->finished = true;
    for (int i = 0; i < r->world_size; i++) /* followers may forget the run now */
        if (r->ranks[i].node != 0)
            cluster_want_run(r->ctx->cluster, r->ranks[i].node, r->id, false);
    monitor_publish_status(r, status, msg[0] ? msg : NULL, rank);
    log_info("run %lld %s%s%s", (long long)r->id, db_run_status_name(status),
             msg[0] ? ": " : "", msg);
}

/* Once a rank has exited: close its pidfd, drain its reports, record its end. */
static void monitor_settle(struct active_run *r, struct run_rank *k)
{
    if (!k->exited || k->settled)
        return;
    k->settled = true;
    r->n_settled++;
    if (k->pidfd >= 0) {
        loop_watch_remove(r->ctx->loop, &k->wexit.lw);
        close(k->pidfd);
        k->pidfd = -1;
    }
    if (k->report_fd >= 0)
        monitor_read_reports(r, k); /* the writer is gone: this drains to EOF */
    char what[768];
    monitor_describe_exit(r, k, what, sizeof what);
    bool ok = monitor_rank_ok(k);
    const char *status = ok ? "done" : WIFSIGNALED(k->wstatus) || k->lost ? "killed" : "failed";
    struct err e = {0};
    int rc = db_rank_exited(r->ctx->db, r->id, k->rank, status,
                            WIFEXITED(k->wstatus) ? WEXITSTATUS(k->wstatus) : -1,
                            WIFSIGNALED(k->wstatus) ? WTERMSIG(k->wstatus) : 0,
                            ok ? NULL : what, &e);
    monitor_db_warn(r, rc, &e);
    if (ok)
        monitor_elastic_done(r, k);
    if (!ok && !monitor_restart_absorbs(r, k) && !monitor_elastic_lost(r, k, what))
        monitor_rank_failed(r, k);
}

static void monitor_check_done(struct active_run *r)
{
    bool launcher_gone = !r->foreign || r->launcher_exited || r->launcher_pid <= 0;
    if (!r->finished && !r->stopping && r->restart && r->restart->stopping &&
        r->n_settled == r->world_size)
        monitor_restart_next(r); /* may fail the run: then it finishes below */
    if (!r->finished && r->n_settled == r->world_size && launcher_gone)
        monitor_finish(r);
}

/* A rank of another launcher: the end of its report channel is its exit. Done means it
 * exited 0; an error it reported, status 1 (the worker's and the engines' failing exit);
 * neither, it died (lost). */
static void monitor_channel_closed(struct active_run *r, struct run_rank *k)
{
    if (k->exited)
        return;
    k->exited = true;
    k->exit_order = ++r->exits_seen;
    k->lost = !k->said->said_done && !k->said->error[0];
    k->wstatus = k->said->said_done ? 0 : 1 << 8;
    monitor_settle(r, k);
    monitor_check_done(r);
}

static void monitor_rank_exited(struct active_run *r, struct run_rank *k)
{
    monitor_reap(r, k);
    monitor_settle(r, k);
    monitor_check_done(r);
}

/* --- report lines ----------------------------------------------------------------------- */

static void monitor_elastic_line(struct active_run *r, struct run_rank *k,
                                 const struct ingest_result *res);

/* A whole line from rank k's pipe: ingestion does the rest (daemon/ingest.h); a line that
 * breaks the protocol fails the rank, and the rank's later lines are ignored. */
static void monitor_handle_line(struct active_run *r, struct run_rank *k, const char *line,
                                size_t len)
{
    if (k->bad_report[0])
        return;
    k->last_seen_ms = clock_mono_ms();
    struct ingest_result res;
    struct err e = {0};
    if (ingest_line(&r->ingest, k->rank, line, len, &res, &e) < 0) {
        snprintf(k->bad_report, sizeof k->bad_report, "%s", e.msg);
        monitor_rank_failed(r, k);
        return;
    }
    if (res.run_running)
        monitor_publish_status(r, DB_RUN_RUNNING, NULL, -1);
    if (r->elastic.on && !res.store_failed)
        monitor_elastic_line(r, k, &res);
}

/* The launcher exited (or may have: the pidfd fired, or a tick checks): record how, drain
 * what its ranks still said, and count every rank it leaves behind as ended. */
static void monitor_launcher_check(struct active_run *r)
{
    if (!r->foreign || r->launcher_exited || r->launcher_pid <= 0 ||
        waitpid(r->launcher_pid, &r->launcher_wstatus, WNOHANG) != r->launcher_pid)
        return;
    r->launcher_exited = true;
    launcher_end_group(r->launcher_pid); /* the ranks it leaves count as ended: they are */
    if (r->launcher_pidfd >= 0) {
        loop_watch_remove(r->ctx->loop, &r->wlauncher.lw);
        close(r->launcher_pidfd);
        r->launcher_pidfd = -1;
    }
    char tail[256];
    char log[PATH_MAX]; /* its last line: its own complaint (an unknown option, ...) */
    snprintf(log, sizeof log, "%s/launcher.log", r->dir);
    launcher_log_tail(log, tail, sizeof tail);
    int st = r->launcher_wstatus;
    snprintf(r->launcher_note, sizeof r->launcher_note, "%s %s %d%s%s", r->launcher_name,
             WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), tail[0] ? ": " : "", tail);
    log_info("run %lld: %s", (long long)r->id, r->launcher_note);
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (k->exited)
            continue;
        if (k->report_fd >= 0)
            monitor_read_reports(r, k); /* what it wrote before it ended */
        if (!k->exited) {               /* its launcher is gone: so is it */
            monitor_signal_channel_rank(r, k, SIGKILL);
            monitor_channel_closed(r, k);
        }
    }
    monitor_check_done(r);
}

/* The loop's callback for a rank's pidfd or report pipe (ctx: its struct monitor_watch). */
static void monitor_on_fd(void *ctx, uint32_t events)
{
    struct monitor_watch *w = ctx;
    struct active_run *r = w->run;
    struct run_rank *k = &r->ranks[w->rank];
    if (r->finished)
        return;
    if (w->kind == MONITOR_W_LAUNCHER)
        monitor_launcher_check(r);
    else if (w->kind == MONITOR_W_STORAGE)
        monitor_storage_check(r, w->rank);
    else if (w->kind == MONITOR_W_EXIT)
        monitor_rank_exited(r, k);
    else if (k->report_fd >= 0)
        monitor_read_reports(r, k);
    (void)events;
}

/* --- start, tick, stop, free ------------------------------------------------------------- */

static int monitor_watch_fd(struct active_run *r, int fd, struct monitor_watch *w,
                            struct err *e)
{
    return loop_watch_add(r->ctx->loop, &w->lw, fd, EPOLLIN, monitor_on_fd, w, e);
}

int monitor_slots_per_rank(const struct db_queued_run *q)
{
    return spec_rank_slots(&q->spec);
}

/* "3,4,5": rank's CPUs out of cpus (per entries each) into out; false when unpinned. */
static bool monitor_cpu_list(const int *cpus, int rank, int per, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < per; i++) {
        int c = cpus[rank * per + i];
        if (c < 0)
            return false;
        int k = snprintf(out + len, n - len, "%s%d", i ? "," : "", c);
        if (k < 0 || (size_t)k >= n - len)
            return false;
        len += (size_t)k;
    }
    return per > 0;
}

/* What every process the daemon starts for run r gets, a rank or the run's launcher: the
 * programs, the run's store and secret, its spec file (spec_path, PATH_MAX bytes, filled
 * here) and where its output goes (log_path, borrowed). */
static struct launch_rank monitor_launch_base(const struct active_run *r,
                                              const char *store_addr, char *spec_path,
                                              const char *log_path)
{
    const struct config *cfg = r->ctx->cfg;
    snprintf(spec_path, PATH_MAX, "%s/spec.json", r->dir);
    return (struct launch_rank){
        .worker_path = cfg->worker_path,
        .engine = r->engine,
        .python = cfg->python,
        .engines_dir = cfg->engines_dir,
        .script = r->script[0] ? r->script : NULL,
        .run = r->ns,
        .secret = r->secret,
        .store_addr = store_addr,
        .spec_path = spec_path,
        .log_path = log_path,
        .peer_host = cfg->store_host,
        .world_size = r->world_size,
        .node_name = cfg->node,
        .shm_dir = cfg->shm_dir,
        .data_dirs = cfg->data_dirs,
        .memory_limit_mib = r->memory_limit_mib,
    };
}

static int monitor_spawn_rank(struct active_run *r, int rank, const int *cpus, int per,
                              const struct monitor_gpu *gpu, const char *store_addr,
                              struct err *e)
{
    struct run_rank *k = &r->ranks[rank];
    char gpu_env[LAUNCH_MAX_GPU_ENV][64];
    const char *gpu_envp[LAUNCH_MAX_GPU_ENV];
    /* more GPUs than processes: a single-process run's replicas (dp) all in this one */
    int ngpu_env = !gpu ? 0
                   : gpu->plan->world_size > r->world_size
                       ? gpu_slots_env_single(gpu->plan, gpu_env)
                       : gpu_slots_env(gpu->plan, rank, gpu->nccl_version, r->ns, gpu_env);
    for (int i = 0; i < ngpu_env; i++)
        gpu_envp[i] = gpu_env[i];
    char spec_path[PATH_MAX], log_path[PATH_MAX], cpu[200];
    snprintf(log_path, sizeof log_path, "%s/rank%d.log", r->dir, rank);
    bool pinned = monitor_cpu_list(cpus, rank, per, cpu, sizeof cpu);
    struct launch_rank lr = monitor_launch_base(r, store_addr, spec_path, log_path);
    char restart_env[ELASTIC_RESTART_ENV][PATH_MAX];
    const char *restart_envp[ELASTIC_RESTART_ENV];
    if (r->restart) { /* the generation's world and where its checkpoints are */
        lr.world_size = r->restart->world;
        lr.nextra_env = elastic_restart_env(r->restart, restart_env[0], sizeof restart_env[0]);
        for (int i = 0; i < lr.nextra_env; i++)
            restart_envp[i] = restart_env[i];
        lr.extra_env = restart_envp;
    }
    lr.cpus = pinned ? cpu : NULL;
    lr.gpu_env = gpu_envp;
    lr.ngpu_env = ngpu_env;
    lr.rank = rank;
    lr.local_rank = k->local_rank;
    lr.node_rank = k->node_rank;
    static const char *const joiner_env[] = {"DDPB_ELASTIC_JOIN=1"};
    if (k->joiner) {
        lr.extra_env = joiner_env;
        lr.nextra_env = 1;
    }
    /* its mount: read instead of the dataset directory, and allowed by the data guard */
    char mnt[PATH_MAX], mount_env[PATH_MAX + 32],
        dirs[sizeof r->ctx->cfg->data_dirs + PATH_MAX];
    const char *envp[LAUNCH_MAX_EXTRA_ENV];
    if (r->mounts) {
        if (monitor_storage_start(r, k, mnt, sizeof mnt, e) < 0)
            return -1;
        snprintf(mount_env, sizeof mount_env, "DDPB_STORAGE_MOUNT=%s", mnt);
        snprintf(dirs, sizeof dirs, "%s%s%s", r->ctx->cfg->data_dirs,
                 r->ctx->cfg->data_dirs[0] ? ":" : "", mnt);
        lr.data_dirs = dirs;
        int n = 0;
        for (; n < lr.nextra_env && n < LAUNCH_MAX_EXTRA_ENV - 1; n++)
            envp[n] = lr.extra_env[n];
        envp[n++] = mount_env;
        lr.extra_env = envp;
        lr.nextra_env = n;
    }
    struct launched out;
    if (launcher_spawn(&lr, &out, e) < 0)
        return -1;
    k->pid = out.pid;
    k->report_fd = out.report_fd;
    k->pidfd = out.pidfd;
    k->spawned = true;
    k->last_seen_ms = clock_mono_ms();
    if (monitor_watch_fd(r, k->report_fd, &k->wreport, e) < 0 ||
        monitor_watch_fd(r, k->pidfd, &k->wexit, e) < 0)
        return -1; /* the rank is spawned: it is stopped and reaped like any other */
    struct err dbe = {0};
    int rc = db_rank_spawned(r->ctx->db, r->id, rank, r->ctx->cfg->node, k->pid,
                             pinned ? cpu : NULL, &dbe);
    monitor_db_warn(r, rc, &dbe);
    return 0;
}

/* channel_adopt_fn: rank `rank` of another launcher proved itself on the report channel;
 * from here its connection is its report pipe. */
static int monitor_adopt(void *ctx, int rank, int fd, pid_t pid, const char *host)
{
    struct active_run *r = ctx;
    struct run_rank *k = &r->ranks[rank];
    struct err e = {0};
    if (r->restart && r->restart->driver && k->retired && !r->stopping && !r->finished)
        monitor_driver_joined(r, k); /* the driver's replacement in a lost slot */
    if (r->finished || k->exited || k->report_fd >= 0)
        return -1;
    k->report_fd = fd;
    k->pid = pid;
    k->connected = true;
    k->last_seen_ms = clock_mono_ms();
    if (monitor_watch_fd(r, fd, &k->wreport, &e) < 0) {
        k->report_fd = -1;
        log_error("run %lld: rank %d's report channel: %s", (long long)r->id, rank, e.msg);
        return -1;
    }
    char cpus[256] = ""; /* its entry of DDPB_CPU_MAP, as the rank pins itself */
    const char *p = r->cpu_map[0] ? r->cpu_map : NULL;
    for (int i = 0; p && i < rank; i++)
        p = (p = strchr(p, ';')) ? p + 1 : NULL;
    if (p)
        snprintf(cpus, sizeof cpus, "%.*s", (int)strcspn(p, ";"), p);
    /* the node is the cluster's name for the address the rank connected from: under
     * netlab every host has the same host name, and a node's name is what a spawned
     * rank's row carries */
    char node[64];
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    char addr[INET6_ADDRSTRLEN] = "";
    if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0)
        getnameinfo((struct sockaddr *)&sa, len, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    if (!addr[0] || !cluster_name_at(r->ctx->cluster, addr, node, sizeof node))
        snprintf(node, sizeof node, "%s", host[0] ? host : r->ctx->cfg->node);
    int rc = db_rank_spawned(r->ctx->db, r->id, rank, node, pid, cpus[0] ? cpus : NULL, &e);
    monitor_db_warn(r, rc, &e);
    return 0;
}

/* "0;1;2,3": every rank's CPU list for DDPB_CPU_MAP; false when any rank is unpinned. */
static bool monitor_cpu_map(const struct active_run *r, const int *cpus, int per, char *out,
                            size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < r->world_size; i++) {
        char one[200];
        if (!monitor_cpu_list(cpus, i, per, one, sizeof one))
            return false;
        int w = snprintf(out + len, n - len, "%s%s", i ? ";" : "", one);
        if (w < 0 || (size_t)w >= n - len)
            return false;
        len += (size_t)w;
    }
    return true;
}

/* mpirun's host list when the scheduler placed ranks on other nodes: "addr:n,addr:m" in
 * rank order (ranks are contiguous per node), each node named by the address it offered
 * the cluster. 1 when ranks are elsewhere, 0 when every rank is here, -1 with e set when
 * the list does not fit out. */
static int monitor_host_list(const struct active_run *r, char *out, size_t cap, struct err *e)
{
    size_t len = 0;
    int spread = 0;
    out[0] = '\0';
    for (int i = 0; i < r->world_size;) {
        int node = r->ranks[i].node, n = 0;
        while (i < r->world_size && r->ranks[i].node == node) {
            n++;
            i++;
        }
        char addr[128];
        cluster_node_address(r->ctx->cluster, node, addr, sizeof addr);
        int w = snprintf(out + len, cap - len, "%s%s:%d", len ? "," : "", addr, n);
        if (w < 0 || (size_t)w >= cap - len || !addr[0])
            return err_set(e, ERR_INVALID, "nodes",
                           "nodes: mpirun's host list is over %zu characters", cap - 1);
        len += (size_t)w;
        spread |= node != 0;
    }
    return spread;
}

/* "0;0;1": every rank's node index for DDPB_NODE_MAP (false when it does not fit). */
static bool monitor_node_map(const struct active_run *r, char *out, size_t n)
{
    size_t len = 0;
    for (int i = 0; i < r->world_size; i++) {
        int w = snprintf(out + len, n - len, "%s%d", i ? ";" : "", r->ranks[i].node_rank);
        if (w < 0 || (size_t)w >= n - len)
            return false;
        len += (size_t)w;
    }
    return true;
}

/* Another launcher starts every rank (monitor.h): the report channel first, so its port
 * is in the ranks' environment, then the one process. */
static int monitor_spawn_launcher(struct active_run *r, const struct db_queued_run *q,
                                  const int *cpus, int per, const char *store_addr,
                                  struct err *e)
{
    const struct config *cfg = r->ctx->cfg;
    r->channel = channel_open(r->ctx->loop, cfg->store_host, r->ns, r->secret, r->world_size,
                              monitor_adopt, r, e);
    if (!r->channel)
        return err_prefix(e, "report channel");
    char report[200], map[2048], spec_path[PATH_MAX], log_path[PATH_MAX], boot[PATH_MAX];
    char hosts[600], nodes[600]; /* launch_plan arguments */
    snprintf(report, sizeof report, "%s:%d", cfg->store_host, channel_port(r->channel));
    bool framework = strcmp(r->engine, "ddpbench") != 0;
    snprintf(boot, sizeof boot, "%s/ddpb_launch.py", cfg->engines_dir);
    /* srun binds the ranks itself; mpirun's binding is off and the worker pins */
    bool pinned = strcmp(q->spec.launcher, "srun") != 0 &&
                  monitor_cpu_map(r, cpus, per, map, sizeof map);
    snprintf(r->cpu_map, sizeof r->cpu_map, "%s", pinned ? map : "");
    struct launch_plan_input in = {.spec = &q->spec,
                                   .program = framework ? cfg->python : cfg->worker_path,
                                   .program_arg = framework ? boot : NULL,
                                   .report_addr = report,
                                   .log_dir = r->dir,
                                   .cpu_map = pinned ? map : NULL,
                                   .run_id = (long long)r->id};
    int spread = monitor_host_list(r, hosts, sizeof hosts, e);
    if (spread > 0) { /* the scheduler placed ranks on followers: mpirun over the agent */
        in.hosts = hosts;
        in.agent = cfg->mpi_agent;
        in.node_map = nodes;
        if (!monitor_node_map(r, nodes, sizeof nodes))
            spread = err_set(e, ERR_INVALID, "world_size",
                             "world_size: DDPB_NODE_MAP is over %zu characters",
                             sizeof nodes - 1);
    }
    struct launch_plan *plan = malloc(sizeof *plan);
    if (!plan)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    int rc = spread < 0             ? -1
             : monitor_is_driver(q) ? monitor_driver_plan(r, report, in.cpu_map, plan, e)
                                    : launch_plan_build(&in, plan, e);
    char *argv[LAUNCH_PLAN_MAX_ARGS + 1];
    const char *env[LAUNCH_PLAN_MAX_ENV];
    if (rc == 0) {
        launch_plan_argv(plan, argv);
        for (int i = 0; i < plan->nenv; i++)
            env[i] = plan->env[i];
        snprintf(r->launcher_name, sizeof r->launcher_name, "%s", argv[0]);
    }
    snprintf(log_path, sizeof log_path, "%s/launcher.log", r->dir);
    struct launch_rank lr = monitor_launch_base(r, store_addr, spec_path, log_path);
    lr.rank = -1;
    lr.argv = argv;
    lr.extra_env = env;
    lr.nextra_env = rc == 0 ? plan->nenv : 0;
    struct launched out;
    if (rc == 0)
        rc = launcher_spawn(&lr, &out, e);
    free(plan);
    if (rc < 0)
        return -1;
    r->launcher_pid = out.pid;
    r->launcher_pidfd = out.pidfd;
    int64_t now = clock_mono_ms();
    for (int i = 0; i < r->world_size; i++) { /* from here stopped and settled like any */
        r->ranks[i].spawned = r->ranks[i].channel = true;
        r->ranks[i].last_seen_ms = now;
    }
    if (monitor_watch_fd(r, r->launcher_pidfd, &r->wlauncher, e) < 0)
        log_error("run %lld: cannot watch %s (%s): its exit is checked each tick",
                  (long long)r->id, r->launcher_name, e->msg);
    log_info("run %lld: %s started its %d ranks (pid %d)", (long long)r->id, r->launcher_name,
             r->world_size, (int)out.pid);
    return 0;
}

/* The ranks of node `node` (from `first`, contiguous) are started by its follower: one
 * spawn command with what the leader alone knows (the store, the run's secret, the
 * placement); the follower builds each rank's argv and environment with its own launcher
 * (daemon/follower.c), so the leader never names a program to run. */
static int monitor_spawn_remote(struct active_run *r, const struct db_queued_run *q, int first,
                                const char *store_addr, struct err *e)
{
    json_error_t je;
    json_t *spec = json_loads(q->spec_json, 0, &je);
    json_t *ranks = json_array();
    int node = r->ranks[first].node;
    for (int i = first; i < r->world_size && r->ranks[i].node == node; i++)
        json_array_append_new(
            ranks, json_pack("{s:i, s:i}", "rank", i, "local_rank", r->ranks[i].local_rank));
    /* the leader decides each rank's memory limit (its estimate and margin), as for its own */
    json_t *cmd = spec ? json_pack("{s:s, s:I, s:o, s:s, s:s, s:s, s:i, s:i, s:o, s:I}", "op",
                                   "spawn", "run", (json_int_t)r->id, "spec", spec, "store",
                                   store_addr, "ns", r->ns, "secret", r->secret, "world_size",
                                   r->world_size, "node_rank", r->ranks[first].node_rank,
                                   "ranks", ranks, "memory_limit_mib",
                                   (json_int_t)r->memory_limit_mib)
                       : NULL;
    if (!cmd) {
        json_decref(ranks);
        return err_set(e, ERR_NOMEM, NULL, "cannot build the spawn command of node %d", node);
    }
    cluster_want_run(r->ctx->cluster, node, r->id, true);
    cluster_send(r->ctx->cluster, node, cmd);
    int64_t now = clock_mono_ms();
    for (int i = first; i < r->world_size && r->ranks[i].node == node; i++) {
        r->ranks[i].spawned = true; /* from here it is stopped and settled like any */
        r->ranks[i].last_seen_ms = now;
    }
    return 0;
}

/* Ranks are contiguous per node: node_rank counts the nodes met so far, local_rank the
 * ranks met on the current one. rank_node NULL: every rank here. */
static void monitor_place_ranks(struct active_run *r, const int *rank_node)
{
    int node_rank = -1, local = 0;
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        k->node = rank_node ? rank_node[i] : 0;
        if (i == 0 || k->node != r->ranks[i - 1].node) {
            node_rank++;
            local = 0;
        }
        k->node_rank = node_rank;
        k->local_rank = local++;
    }
}

static struct active_run *monitor_alloc_run(const struct monitor_ctx *ctx,
                                            const struct db_queued_run *q)
{
    struct active_run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->ranks = calloc((size_t)q->world_size, sizeof *r->ranks);
    if (!r->ranks || ingest_run_init(&r->ingest, ctx->db, ctx->events, q->id, q->experiment_id,
                                     q->world_size, NULL) < 0) {
        free(r->ranks);
        free(r);
        return NULL;
    }
    r->ctx = ctx;
    r->id = q->id;
    r->stop_rank = -1;
    r->experiment_id = q->experiment_id;
    r->world_size = q->world_size;
    for (int i = 0; i < q->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        k->rank = i;
        k->report_fd = k->pidfd = -1;
        k->said = ingest_rank_state(&r->ingest, i);
        buf_init(&k->line);
        k->wreport = (struct monitor_watch){.run = r, .rank = i, .kind = MONITOR_W_REPORT};
        k->wexit = (struct monitor_watch){.run = r, .rank = i, .kind = MONITOR_W_EXIT};
        k->wstorage = (struct monitor_watch){.run = r, .rank = i, .kind = MONITOR_W_STORAGE};
    }
    r->launcher_pidfd = -1;
    r->wlauncher = (struct monitor_watch){.run = r, .rank = 0, .kind = MONITOR_W_LAUNCHER};
    const struct vocab_launcher *vl = vocab_launcher(
        vocab_find(VOCAB_LAUNCHER, q->spec.launcher));
    r->foreign = q->spec_err.code == ERR_OK && ((vl && !vl->per_rank) || monitor_is_driver(q));
    snprintf(r->ns, sizeof r->ns, "run-%lld", (long long)q->id);
    snprintf(r->dir, sizeof r->dir, "%s/runs/%lld", ctx->cfg->state_dir, (long long)q->id);
    return r;
}

#define MONITOR_MEMORY_FACTOR 1.25 /* the estimate's share of a rank's address space */

/* The address-space limit of each rank of a run, in MiB (0: none): the submit-time
 * estimate (common/spec_memory.c) x MONITOR_MEMORY_FACTOR plus --rank-memory-margin-mib
 * (the program, its libraries, thread stacks and malloc's arenas, which the estimate
 * leaves out). Only the native worker on the CPU: CUDA and the Python frameworks reserve
 * far more address space than they use, so RLIMIT_AS would refuse them at start. */
static int64_t monitor_memory_limit(const struct config *cfg, const struct db_queued_run *q)
{
    if (cfg->rank_memory_margin_mib < 0 || q->spec.workload != SPEC_WORKLOAD_TRAIN ||
        (q->spec.train.engine[0] && strcmp(q->spec.train.engine, "ddpbench") != 0) ||
        strcmp(q->spec.device, "cpu") != 0)
        return 0;
    json_t *spec = json_loads(q->spec_json, 0, NULL);
    struct spec_memory m;
    int rc = spec ? spec_memory_estimate(spec, &m) : -1;
    json_decref(spec);
    if (rc < 0)
        return 0;
    return (int64_t)(m.total * MONITOR_MEMORY_FACTOR / (1 << 20)) + 1 +
           cfg->rank_memory_margin_mib;
}

/* --- injected faults (daemon/faults.h): the run as that module sees it ---------------- */

static pid_t monitor_fault_pid(void *arg, int rank)
{
    struct active_run *r = arg;
    const struct run_rank *k = &r->ranks[rank];
    if (!k->spawned || k->exited || k->node != 0 || k->pid <= 0)
        return 0;
    return !k->channel || (k->connected && launcher_is_run_process(k->pid, r->ns)) ? k->pid : 0;
}

static int monitor_fault_node(void *arg, int rank)
{
    const struct active_run *r = arg;
    return r->ranks[rank].node_rank;
}

/* A rank on a follower: the follower acts on it (daemon/follower.c, op "fault"). */
static bool monitor_fault_remote(void *arg, int rank, const char *action, double value)
{
    struct active_run *r = arg;
    const struct run_rank *k = &r->ranks[rank];
    if (k->node == 0 || k->exited)
        return false;
    cluster_send(r->ctx->cluster, k->node,
                 json_pack("{s:s, s:I, s:i, s:s, s:f}", "op", "fault", "run", (json_int_t)r->id,
                           "rank", rank, "action", action, "value", value));
    return true;
}

static void monitor_fault_record(void *arg, json_t *ev)
{
    struct active_run *r = arg;
    struct err e = {0};
    const json_t *rk = json_object_get(ev, "rank"), *st = json_object_get(ev, "step");
    struct db_run_event row = {.at = json_number_value(json_object_get(ev, "at")),
                               .type = json_string_value(json_object_get(ev, "type")),
                               .action = json_string_value(json_object_get(ev, "action")),
                               .kind = json_string_value(json_object_get(ev, "kind")),
                               .detail = json_string_value(json_object_get(ev, "detail")),
                               .fault = (int)json_integer_value(json_object_get(ev, "fault")),
                               .rank = json_is_integer(rk) ? (int)json_integer_value(rk) : -1,
                               .node = (int)json_integer_value(json_object_get(ev, "node")),
                               .step = json_is_integer(st) ? json_integer_value(st) : -1};
    int rc = db_insert_run_event(r->ctx->db, r->id, ++r->event_seq, &row, &e);
    monitor_db_warn(r, rc, &e);
    log_info("run %lld: fault %d (%s) %s on rank %d%s%s", (long long)r->id, row.fault,
             row.kind ? row.kind : "?", row.action, row.rank, row.detail ? ": " : "",
             row.detail ? row.detail : "");
    events_publish_run(r->ctx->events, r->experiment_id, r->id, "fault", ev);
}

static void monitor_fault_outcome(void *arg, int fault, bool injected, double at, int64_t step,
                                  double restored_at, const char *note)
{
    struct active_run *r = arg;
    struct err e = {0};
    int rc = db_run_fault_outcome(r->ctx->db, r->id, fault, injected, at, step, restored_at,
                                  note, &e);
    monitor_db_warn(r, rc, &e);
}

/* The run's faults, stored as not yet injected; one the run as placed cannot take (a node
 * it does not span, a link without netlab) fails the run naming it. */
static int monitor_faults_prepare(struct active_run *r, const struct spec *spec, struct err *e)
{
    struct faults_host host = {.arg = r,
                               .world_size = r->world_size,
                               .local_pid = monitor_fault_pid,
                               .node_index = monitor_fault_node,
                               .remote = monitor_fault_remote,
                               .record = monitor_fault_record,
                               .outcome = monitor_fault_outcome,
                               .network_profile = r->ctx->cfg->network_profile};
    int nodes = 0;
    char msg[300];
    if (spec->n_faults <= 0)
        return 0;
    if (!(r->faults = faults_create(spec, &host)))
        return err_set(e, ERR_NOMEM, "faults", "faults: out of memory");
    for (int i = 0; i < r->world_size; i++)
        nodes = r->ranks[i].node_rank + 1 > nodes ? r->ranks[i].node_rank + 1 : nodes;
    if (!faults_check_placement(r->faults, nodes, msg, sizeof msg))
        return err_set(e, ERR_INVALID, "faults", "%s", msg);
    for (int i = 0; i < spec->n_faults; i++) {
        struct err de = {0};
        int rc = db_insert_run_fault(r->ctx->db, r->id, i, &spec->faults[i], &de);
        monitor_db_warn(r, rc, &de);
    }
    return 0;
}

/* The run's progress for at_step: the steps done, the highest step any rank reported
 * plus one. */
static int64_t monitor_steps_done(const struct active_run *r)
{
    int64_t done = 0;
    for (int i = 0; i < r->world_size; i++) {
        const struct ingest_rank *s = r->ranks[i].said;
        if (s && s->stepped && s->last_step + 1 > done)
            done = s->last_step + 1;
    }
    return done;
}

/* Everything before the first spawn: files, secret, store namespace, timeout. */
static int monitor_prepare(struct active_run *r, const struct db_queued_run *q, struct err *e)
{
    char path[PATH_MAX];
    if (q->spec_err.code != ERR_OK) {
        *e = q->spec_err;
        return -1;
    }
    /* the spec's defaults (common/spec_table.c) are already filled in */
    r->timeout_s = q->spec.timeout_s;
    r->heartbeat_timeout_s = q->spec.heartbeat_timeout_s;
    snprintf(r->engine, sizeof r->engine, "%s",
             q->spec.train.engine[0] ? q->spec.train.engine : "ddpbench");
    /* resolved again at launch: the file may have moved since the submit checked it */
    if (strcmp(r->engine, "script") == 0 &&
        engines_resolve_script(r->ctx->cfg, q->spec.train.script, r->script, e) < 0)
        return -1;
    r->memory_limit_mib = monitor_memory_limit(r->ctx->cfg, q);
    r->deadline_ms = clock_mono_ms() + (int64_t)r->timeout_s * 1000;
    snprintf(path, sizeof path, "%s/spec.json", r->dir);
    if (monitor_mkdirs(r->dir, e) < 0 || monitor_write_file(path, q->spec_json, e) < 0 ||
        monitor_make_secret(r->secret, sizeof r->secret, e) < 0)
        return -1;
    if (store_server_add_run(r->ctx->store, r->ns, r->secret, e) < 0)
        return -1;
    r->store_registered = true;
    if (monitor_storage_prepare(r, q, e) < 0)
        return -1;
    return monitor_faults_prepare(r, &q->spec, e);
}

/* --- elastic runs (issue 32; daemon/elastic.h) -------------------------------------------- */

/* Records generation g (the database row, a live event) once it is published; lost_at: when
 * the loss that formed it was seen (below 0: none). */
static void monitor_elastic_record(struct active_run *r, const struct elastic_gen *g,
                                   double lost_at)
{
    char *text = elastic_gen_text(g);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    char *members = j ? json_dumps(json_object_get(j, "members"), JSON_COMPACT) : NULL;
    char *joiners = j ? json_dumps(json_object_get(j, "joiners"), JSON_COMPACT) : NULL;
    struct db_generation row = {.gen = g->gen,
                                .world = g->n_members,
                                .members = members ? members : "[]",
                                .joiners = joiners ? joiners : "[]",
                                .reason = g->reason,
                                .published_at = clock_wall_s(),
                                .lost_at = lost_at};
    struct err e = {0};
    monitor_db_warn(r, db_insert_generation(r->ctx->db, r->id, &row, &e), &e);
    if (j) {
        json_object_set_new(j, "world", json_integer(g->n_members));
        json_object_set_new(j, "published_at", json_real(row.published_at));
        events_publish_run(r->ctx->events, r->experiment_id, r->id, "generation", j);
    }
    free(members);
    free(joiners);
    free(text);
}

/* Publishes g into the run's store (join keys, elastic/g<N>, elastic/gen) and records it.
 * A store that refuses fails the run: its workers would wait for a generation forever. */
static void monitor_elastic_publish(struct active_run *r, const struct elastic_gen *g,
                                    double lost_at)
{
    struct err e = {0};
    if (elastic_publish(r->ctx->store, r->ns, g, &e) < 0) {
        char reason[320];
        snprintf(reason, sizeof reason, "elastic: could not publish generation %d: %s", g->gen,
                 e.msg);
        monitor_stop_run(r, DB_RUN_FAILED, -1, reason);
        return;
    }
    log_info("run %lld: elastic generation %d of %d rank(s): %s", (long long)r->id, g->gen,
             g->n_members, g->reason);
    monitor_elastic_record(r, g, lost_at);
}

/* Every rank of the run starts here and by ddpbench's own launcher, on the CPU: only then
 * can the daemon start a replacement into a lost slot. */
static bool monitor_elastic_can_replace(const struct active_run *r,
                                        const struct monitor_gpu *gpu)
{
    if (r->foreign || gpu)
        return false;
    for (int i = 0; i < r->world_size; i++)
        if (r->ranks[i].node != 0)
            return false;
    return true;
}

/* The run's elastic state from its spec and engine, generation 0 recorded, and what a
 * replacement will be spawned with kept. Not elastic: nothing. */
static void monitor_elastic_start(struct active_run *r, const struct db_queued_run *q,
                                  const int *cpus, int per, const struct monitor_gpu *gpu,
                                  const char *store_addr)
{
    struct err e = {0};
    if (q->spec_err.code != ERR_OK || !q->spec.elastic.on)
        return;
    const char *name = q->spec.train.engine[0] ? q->spec.train.engine : "ddpbench";
    const struct vocab_engine *g = vocab_engine(vocab_find(VOCAB_ENGINE, name));
    if (elastic_init(&r->elastic, &q->spec, g ? g->elastic : VOCAB_ELASTIC_NONE,
                     monitor_elastic_can_replace(r, gpu), &e) < 0) {
        log_error("run %lld: elastic: %s", (long long)r->id, e.msg);
        return;
    }
    snprintf(r->store_addr, sizeof r->store_addr, "%s", store_addr);
    r->cpus_per = per;
    size_t n = (size_t)r->world_size * (size_t)(per > 0 ? per : 1);
    r->cpus = cpus ? malloc(n * sizeof *r->cpus) : NULL;
    if (r->cpus)
        memcpy(r->cpus, cpus, n * sizeof *r->cpus);
    struct elastic_gen g0 = {.gen = 0, .n_members = r->world_size};
    for (int i = 0; i < r->world_size; i++)
        g0.members[i] = i;
    snprintf(g0.reason, sizeof g0.reason, "launch");
    monitor_elastic_record(r, &g0, -1);
}

/* Starts a replacement into lost slot k (same node: this one; DDPB_ELASTIC_JOIN=1): the
 * slot's last process is forgotten (its row in run_ranks takes the new pid and status). */
static void monitor_elastic_replace(struct active_run *r, struct run_rank *k)
{
    struct err e = {0};
    monitor_slot_forget(r, k);
    k->joiner = true;
    if (monitor_spawn_rank(r, k->rank, r->cpus, r->cpus_per, NULL, r->store_addr, &e) < 0) {
        log_warn("run %lld: elastic: could not start a replacement for rank %d: %s",
                 (long long)r->id, k->rank, e.msg);
        if (!k->spawned) { /* nothing runs in the slot: it stays lost */
            k->exited = k->settled = true;
            r->n_settled++;
        }
        return;
    }
    elastic_replacement_started(&r->elastic, k->rank);
    log_info("run %lld: elastic: replacement for rank %d started (pid %d)", (long long)r->id,
             k->rank, (int)k->pid);
}

/* Slot k of an elastic run ended without done (what: how). True when the run goes on
 * (shrunk, replaced, left to the engine's driver) or was stopped here (too few ranks
 * left); false when the run is not elastic, and the caller fails it as always. */
static bool monitor_elastic_lost(struct active_run *r, struct run_rank *k, const char *what)
{
    if (!r->elastic.on || r->stopping)
        return false;
    char reason[64], why[sizeof r->stop_reason];
    snprintf(reason, sizeof reason, "rank %d lost", k->rank);
    struct elastic_decision d;
    elastic_slot_lost(&r->elastic, k->rank, reason, &d);
    switch (d.action) {
    case ELASTIC_IGNORE: return true;
    case ELASTIC_FAIL:
        snprintf(why, sizeof why, "%s (last: rank %d %s)", d.why, k->rank, what);
        monitor_stop_run(r, DB_RUN_FAILED, k->rank, why);
        return true;
    case ELASTIC_DRIVER:
        log_info("run %lld: elastic: %s", (long long)r->id, d.why);
        monitor_driver_lost(r, k);
        return true;
    case ELASTIC_RESTART: monitor_restart_begin(r, k, &d); return true;
    case ELASTIC_SHRINK: break;
    }
    log_info("run %lld: elastic: rank %d %s; %s", (long long)r->id, k->rank, what, d.why);
    if (d.next.gen >= 0)
        monitor_elastic_publish(r, &d.next, clock_wall_s());
    if (d.replace && !r->stopping)
        monitor_elastic_replace(r, k);
    return true;
}

/* Slot k said done. Once no member of the run is still training, a replacement still
 * waiting to join never will: it is stopped (its end is a lost slot, forgiven). */
static void monitor_elastic_done(struct active_run *r, struct run_rank *k)
{
    elastic_slot_done(&r->elastic, k->rank);
    if (!r->elastic.on || elastic_running(&r->elastic) > 0)
        return;
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *j = &r->ranks[i];
        if (j->joiner && j->spawned && !j->exited && j->signal_sent == 0) {
            launcher_signal(j->pid, SIGTERM);
            j->signal_sent = SIGTERM;
        }
    }
}

/* A grow generation when one is due (the current one resumed, a replacement said hello). */
static void monitor_elastic_grow(struct active_run *r)
{
    struct elastic_gen g;
    if (!r->stopping && elastic_grow(&r->elastic, &g))
        monitor_elastic_publish(r, &g, -1);
}

/* What an elastic run's report line changes: a replacement's hello, a generation resumed
 * (either may make a grow generation due), a survivor blaming a peer whose process still
 * lives (stopped, hung: it is killed, and its end is a lost slot like any other). */
static void monitor_elastic_line(struct active_run *r, struct run_rank *k,
                                 const struct ingest_result *res)
{
    if (res->type == REPORT_HELLO && k->joiner) {
        elastic_joiner_hello(&r->elastic, k->rank);
        monitor_elastic_grow(r);
        return;
    }
    if (res->type != REPORT_ELASTIC)
        return;
    if (strcmp(res->elastic_event, "resumed") == 0) {
        elastic_gen_resumed(&r->elastic, res->elastic_gen);
        monitor_elastic_grow(r);
        return;
    }
    int p = res->elastic_peer;
    if (strcmp(res->elastic_event, "detect") != 0 || p == k->rank ||
        !elastic_blame_kills(&r->elastic, res->elastic_gen, p))
        return;
    struct run_rank *peer = &r->ranks[p];
    /* a replacement started into the slot is not the process the blame is about: the
     * survivors report the loss (detect) after the daemon may have seen it and started
     * the replacement already */
    if (peer->joiner)
        return;
    if (peer->spawned && !peer->exited && peer->node == 0 && !peer->channel &&
        peer->signal_sent != SIGKILL) {
        log_info("run %lld: elastic: rank %d blames rank %d, which still lives: killing it",
                 (long long)r->id, k->rank, p);
        launcher_signal(peer->pid, SIGKILL);
        peer->signal_sent = SIGKILL;
    }
}

/* --- restart mode and Horovod's driver (daemon/elastic_restart.h) --------------------- */

/* True for an elastic run whose engine's driver recovers (horovod): its launcher is
 * engines/ddpb_hvd_driver.py. */
static bool monitor_is_driver(const struct db_queued_run *q)
{
    const struct vocab_engine *g = vocab_engine(vocab_find(VOCAB_ENGINE, q->spec.train.engine));
    return q->spec_err.code == ERR_OK && q->spec.elastic.on &&
           q->spec.workload == SPEC_WORKLOAD_TRAIN && g && g->elastic == VOCAB_ELASTIC_DRIVER;
}

/* Writes the driver's discovery file (<elastic dir>/hosts, a slot per line, replaced
 * atomically: the driver reads it every second): the slots that live, and while fewer
 * than max_ranks live the lost ones too, which Horovod starts a replacement in once their
 * blacklist cooldown ends. */
static void monitor_driver_hosts(struct active_run *r)
{
    const struct elastic_run *el = &r->elastic;
    int live = elastic_live(el);
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/hosts", r->restart->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    for (int i = 0; f && i < r->world_size; i++)
        if (!elastic_slot_forgiven(el, i) || live < el->max_ranks)
            fprintf(f, "%d\n", i);
    if (!f || fclose(f) != 0 || rename(tmp, path) < 0)
        log_error("run %lld: elastic: cannot write %s: %s", (long long)r->id, path,
                  strerror(errno));
}

/* Restart mode or the driver: their state, the folder, what a restarted generation's GPUs
 * are (restart), the first discovery file (driver). On the daemon's own node and under
 * launcher ddpbench only: the daemon forks each generation (restart), the driver starts
 * its workers here (driver). */
static int monitor_restart_prepare(struct active_run *r, const struct db_queued_run *q,
                                   const struct monitor_gpu *gpu, struct err *e)
{
    const struct elastic_run *el = &r->elastic;
    bool driver = el->mode == VOCAB_ELASTIC_DRIVER;
    if (!el->on || (el->mode != VOCAB_ELASTIC_RESTART && !driver))
        return 0;
    if (strcmp(q->spec.launcher, "ddpbench") != 0)
        return err_set(e, ERR_INVALID, "elastic",
                       "elastic: engine %s recovers by starting its processes again, which "
                       "launcher %s would do instead (use launcher ddpbench)",
                       r->engine, q->spec.launcher);
    for (int i = 0; i < r->world_size; i++)
        if (r->ranks[i].node != 0)
            return err_set(e, ERR_INVALID, "elastic",
                           "elastic: engine %s starts its processes again on the leader's "
                           "node only, and rank %d was placed on another",
                           r->engine, i);
    char why[PATH_MAX + 64];
    r->restart = calloc(1, sizeof *r->restart);
    r->restart_gpu = gpu ? malloc(sizeof *r->restart_gpu) : NULL;
    if (!r->restart || (gpu && !r->restart_gpu))
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    if (gpu) {
        *r->restart_gpu = *gpu->plan;
        r->restart_nccl = gpu->nccl_version;
    }
    if (elastic_restart_init(r->restart, driver, r->world_size, r->dir, why, sizeof why) < 0)
        return err_set(e, ERR_IO, "elastic", "%s", why);
    if (driver)
        monitor_driver_hosts(r);
    return 0;
}

/* An end the restart absorbs: a rank of the generation being stopped (its end is no new
 * loss: the next generation is decided already). */
static bool monitor_restart_absorbs(const struct active_run *r, const struct run_rank *k)
{
    (void)k;
    return r->restart && r->restart->stopping && !r->stopping;
}

/* Restart mode (daemon/elastic.h said ELASTIC_RESTART for k's loss): every other rank of
 * the generation is stopped (SIGTERM, SIGKILL after the grace: monitor_tick); once all
 * have ended monitor_restart_next starts generation d->next (monitor_check_done). */
static void monitor_restart_begin(struct active_run *r, struct run_rank *k,
                                  const struct elastic_decision *d)
{
    struct elastic_restart *er = r->restart;
    if (!er || d->next.gen >= ELASTIC_RESTART_MAX_GENS) {
        char why[160];
        snprintf(why, sizeof why,
                 !er ? "elastic: restart mode has no state for this run (see the log)"
                     : "elastic: %d generations started and the run still loses ranks",
                 ELASTIC_RESTART_MAX_GENS);
        monitor_stop_run(r, DB_RUN_FAILED, k->rank, why);
        return;
    }
    er->stopping = true;
    er->gen = d->next.gen;
    er->world = d->world;
    er->lost_at = clock_wall_s();
    er->stop_began_ms = clock_mono_ms();
    er->kill_at_ms = er->stop_began_ms + r->ctx->cfg->kill_grace_ms;
    log_info("run %lld: elastic: %s; stopping the group", (long long)r->id, d->why);
    for (int i = 0; i < r->world_size; i++) /* a crash is recorded as one, not as SIGTERM */
        monitor_reap(r, &r->ranks[i]);
    monitor_send_all(r, SIGTERM);
    for (int i = 0; i < r->world_size; i++)
        monitor_settle(r, &r->ranks[i]);
}

/* Slot k is not in the new generation, or its worker is gone: its row says so (status
 * killed, the schema's run_ranks has no "lost"; the error starts "elastic: lost"). */
static void monitor_slot_lost_row(struct active_run *r, struct run_rank *k, const char *why)
{
    struct err e = {0};
    int rc = db_rank_exited(r->ctx->db, r->id, k->rank, "killed", -1, 0, why, &e);
    monitor_db_warn(r, rc, &e);
}

/* Closes rank k's report fd and pidfd (their watches removed first) and frees its
 * partial line. */
static void monitor_rank_close(struct active_run *r, struct run_rank *k)
{
    if (k->report_fd >= 0) {
        loop_watch_remove(r->ctx->loop, &k->wreport.lw);
        close(k->report_fd);
    }
    if (k->pidfd >= 0) {
        loop_watch_remove(r->ctx->loop, &k->wexit.lw);
        close(k->pidfd);
    }
    k->report_fd = k->pidfd = -1;
    buf_free(&k->line);
}

/* Slot k gets a new process: what the daemon and ingestion knew of the old one goes (its
 * run_ranks row takes the new pid and status once it is spawned). */
static void monitor_slot_forget(struct active_run *r, struct run_rank *k)
{
    if (k->settled)
        r->n_settled--;
    monitor_rank_close(r, k); /* a settled rank's fds are closed: kept safe anyway */
    buf_init(&k->line);
    k->pid = 0;
    k->spawned = k->exited = k->settled = k->lost = k->retired = k->connected = false;
    k->wstatus = k->signal_sent = 0;
    k->exit_order = 0;
    k->bad_report[0] = k->node_error[0] = '\0';
    ingest_rank_reset(&r->ingest, k->rank);
}

/* Every rank of the stopped generation has ended: generation er->gen starts, slots
 * 0..world-1 (DDPB_WORLD_SIZE = world), the others lost; it is recorded like any. */
static void monitor_restart_next(struct active_run *r)
{
    struct elastic_restart *er = r->restart;
    er->stopping = false;
    int64_t stop_ms = clock_mono_ms() - er->stop_began_ms;
    log_info("run %lld: elastic: generation %d of %d rank(s) starts (stopping took %lld ms)",
             (long long)r->id, er->gen, er->world, (long long)stop_ms);
    struct elastic_gen *g = calloc(1, sizeof *g);
    struct monitor_gpu gpu = {.plan = r->restart_gpu, .nccl_version = r->restart_nccl};
    struct err e = {0};
    char why[160];
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (i >= er->world) {
            snprintf(why, sizeof why, "elastic: lost; generation %d runs %d rank(s)", er->gen,
                     er->world);
            if (!k->retired)
                monitor_slot_lost_row(r, k, why);
            k->retired = true;
            continue;
        }
        if (g)
            g->members[g->n_members++] = i;
        monitor_slot_forget(r, k);
        if (monitor_spawn_rank(r, i, r->cpus, r->cpus_per, r->restart_gpu ? &gpu : NULL,
                               r->store_addr, &e) < 0) {
            snprintf(why, sizeof why, "elastic: could not start rank %d of generation %d: %s",
                     i, er->gen, e.msg);
            monitor_stop_run(r, DB_RUN_FAILED, i, why);
            for (int j = i; j < r->world_size; j++) /* never spawned: settled now */
                if (!r->ranks[j].spawned && !r->ranks[j].settled) {
                    r->ranks[j].exited = r->ranks[j].settled = true;
                    r->n_settled++;
                }
            break;
        }
    }
    if (g) {
        g->gen = er->gen;
        snprintf(g->reason, sizeof g->reason, "restart after %.1f s of stopping",
                 (double)stop_ms / 1000.0);
        monitor_elastic_record(r, g, er->lost_at);
    }
    free(g);
}

/* The driver's command line: the engines' python running ddpb_hvd_driver.py, with the
 * report channel, the run's folder, the CPU map and the elastic folder it reads the
 * discovery file from. */
static int monitor_driver_plan(struct active_run *r, const char *report, const char *cpu_map,
                               struct launch_plan *plan, struct err *e)
{
    const struct config *cfg = r->ctx->cfg;
    memset(plan, 0, sizeof *plan);
    char env[ELASTIC_RESTART_ENV][PATH_MAX];
    int n = elastic_restart_env(r->restart, env[0], sizeof env[0]);
    size_t cap = sizeof plan->argv[0];
    bool ok = (size_t)snprintf(plan->argv[0], cap, "%s", cfg->python) < cap &&
              (size_t)snprintf(plan->argv[1], cap, "%s/ddpb_hvd_driver.py", cfg->engines_dir) <
                  cap &&
              (size_t)snprintf(plan->env[0], cap, "DDPB_REPORT=%s", report) < cap &&
              (size_t)snprintf(plan->env[1], cap, "DDPB_LOG_DIR=%s", r->dir) < cap &&
              (size_t)snprintf(plan->env[2], cap, "DDPB_LAUNCHER=horovod-elastic") < cap &&
              (size_t)snprintf(plan->env[3], cap, "DDPB_CPU_MAP=%s", cpu_map ? cpu_map : "") <
                  cap;
    plan->argc = 2;
    plan->nenv = 4;
    for (int i = 0; i < n && plan->nenv < LAUNCH_PLAN_MAX_ENV; i++)
        ok = ok && (size_t)snprintf(plan->env[plan->nenv++], cap, "%s", env[i]) < cap;
    return ok ? 0
              : err_set(e, ERR_INVALID, "elastic", "elastic: the driver's setup is too long");
}

/* A generation of a driver run as the daemon sees it (its live slots; joiner: a slot
 * that came back, -1: none), recorded. */
static void monitor_driver_record(struct active_run *r, int joiner, const char *reason,
                                  double lost_at)
{
    struct elastic_gen *g = calloc(1, sizeof *g);
    if (!g)
        return;
    g->gen = ++r->restart->gen;
    for (int i = 0; i < r->world_size; i++)
        if (!elastic_slot_forgiven(&r->elastic, i))
            g->members[g->n_members++] = i;
    if (joiner >= 0)
        g->joiners[g->n_joiners++] = joiner;
    snprintf(g->reason, sizeof g->reason, "%s", reason);
    monitor_elastic_record(r, g, lost_at);
    free(g);
}

/* Driver mode (daemon/elastic.h said ELASTIC_DRIVER for k's loss): Horovod goes on
 * without the slot; the channel lets a replacement claim it, and the discovery file says
 * whether Horovod may start one. */
static void monitor_driver_lost(struct active_run *r, struct run_rank *k)
{
    if (!r->restart)
        return;
    k->retired = true;
    channel_release(r->channel, k->rank);
    monitor_slot_lost_row(r, k, "elastic: lost; Horovod's elastic driver goes on without it");
    monitor_driver_hosts(r);
    char why[64];
    snprintf(why, sizeof why, "rank %d lost", k->rank);
    monitor_driver_record(r, -1, why, clock_wall_s());
}

/* A replacement Horovod started in lost slot k proved itself on the report channel. */
static void monitor_driver_joined(struct active_run *r, struct run_rank *k)
{
    monitor_slot_forget(r, k);
    k->spawned = k->channel = true;
    elastic_slot_rejoined(&r->elastic, k->rank);
    char why[64];
    snprintf(why, sizeof why, "a replacement joined slot %d", k->rank);
    monitor_driver_record(r, k->rank, why, -1);
    log_info("run %lld: elastic: %s", (long long)r->id, why);
}

struct active_run *monitor_start_run(const struct monitor_ctx *ctx,
                                     const struct db_queued_run *q, const int *cpus,
                                     const struct monitor_gpu *gpu, const int *rank_node,
                                     struct err *e)
{
    struct active_run *r = monitor_alloc_run(ctx, q);
    if (!r) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    monitor_place_ranks(r, rank_node);
    if (db_run_starting(ctx->db, q->id, e) < 0) {
        monitor_free_run(r);
        return NULL;
    }
    struct err se = {0};
    char store_addr[192];
    snprintf(store_addr, sizeof store_addr, "%s:%d", ctx->cfg->store_host,
             store_server_port(ctx->store));
    int started = 0, per = monitor_slots_per_rank(q);
    monitor_elastic_start(r, q, cpus, per, gpu, store_addr);
    if (r->foreign) {
        if (monitor_prepare(r, q, &se) == 0 && monitor_restart_prepare(r, q, gpu, &se) == 0 &&
            monitor_spawn_launcher(r, q, cpus, per, store_addr, &se) == 0)
            started = r->world_size;
    } else if (monitor_prepare(r, q, &se) == 0 && monitor_restart_prepare(r, q, gpu, &se) == 0)
        for (; started < r->world_size; started++) {
            const struct run_rank *k = &r->ranks[started];
            if (k->node != 0 && k->local_rank > 0)
                continue; /* sent with its node's first rank */
            if (k->node != 0
                    ? monitor_spawn_remote(r, q, started, store_addr, &se) < 0
                    : monitor_spawn_rank(r, started, cpus, per, gpu, store_addr, &se) < 0)
                break;
        }
    if (gpu && started > 0) { /* the ranks that exist: emulated flag and GPU of each */
        struct err dbe = {0};
        int rc = db_run_gpu_placement(ctx->db, r->id, gpu->plan->emulated, gpu->plan->gpu,
                                      started, &dbe);
        monitor_db_warn(r, rc, &dbe);
    }
    if (started < r->world_size) {
        char reason[512];
        if (r->foreign)
            snprintf(reason, sizeof reason, "could not start the run's launcher (%s): %s",
                     q->spec.launcher, se.msg);
        else
            snprintf(reason, sizeof reason, "could not start rank %d: %s", started, se.msg);
        log_error("run %lld: %s", (long long)r->id, reason);
        monitor_stop_run(r, DB_RUN_FAILED, started, reason);
        /* ranks never spawned count as settled so the run can finish */
        for (int i = 0; i < r->world_size; i++)
            if (!r->ranks[i].spawned) {
                r->ranks[i].exited = r->ranks[i].settled = true;
                r->n_settled++;
            }
        monitor_check_done(r);
    } else {
        log_info("run %lld started: %d rank(s), timeout %d s", (long long)r->id, r->world_size,
                 r->timeout_s);
        monitor_publish_status(r, DB_RUN_STARTING, NULL, -1);
    }
    return r;
}

void monitor_stop_run(struct active_run *r, enum db_run_status status, int rank,
                      const char *reason)
{
    if (r->finished)
        return;
    if (!r->stop_reason[0]) {
        r->stop_status = status;
        r->stop_rank = rank;
        snprintf(r->stop_reason, sizeof r->stop_reason, "%s", reason);
    }
    if (!r->stopping) {
        r->stopping = true;
        r->kill_at_ms = clock_mono_ms() + r->ctx->cfg->kill_grace_ms;
        monitor_end_faults(r);
        monitor_send_all(r, SIGTERM);
    }
}

/* Appends printf-style text to out (cap bytes, NUL-terminated), truncating quietly. */
__attribute__((format(printf, 4, 5))) static void
monitor_append(char *out, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *len, cap - *len, fmt, ap);
    va_end(ap);
    *len = n < 0 ? *len : (size_t)n >= cap - *len ? cap - 1 : *len + (size_t)n;
}

static double monitor_ago_s(int64_t now_ms, int64_t then_ms)
{
    return (double)(now_ms - then_ms) / 1000.0;
}

/* Peers listed by name in a frozen rank's failure; the rest are counted. */
#define MONITOR_PEERS_NAMED 3

/* Why frozen rank k failed, in words: its last heartbeat (phase, progress, age; it can
 * lag the rank by up to a second, so its last step report is named too) and what each
 * live peer has been doing since (its heartbeat phase and how long it has not changed:
 * a peer blocked on k keeps sending the phase it waits in). */
static void monitor_describe_frozen(const struct active_run *r, const struct run_rank *k,
                                    int64_t now_ms, char *out, size_t cap)
{
    const struct ingest_rank *s = k->said;
    size_t len = 0;
    out[0] = '\0';
    if (k->channel && !k->connected)
        monitor_append(out, cap, &len,
                       "rank %d never connected its report channel within %lld s (%s did "
                       "not start it, or it could not reach the daemon; see %s/launcher.log)",
                       k->rank, (long long)((now_ms - k->last_seen_ms) / 1000),
                       r->launcher_name, r->dir);
    else
        monitor_append(out, cap, &len, "rank %d stopped reporting for %lld s", k->rank,
                       (long long)((now_ms - k->last_seen_ms) / 1000));
    if (s->heartbeat_ms)
        monitor_append(out, cap, &len,
                       "; its last heartbeat, %.1f s ago, said '%s' (progress %lld)",
                       monitor_ago_s(now_ms, s->heartbeat_ms), s->heartbeat,
                       (long long)s->heartbeat_progress);
    else
        monitor_append(out, cap, &len, "; it sent no heartbeat (last: %s)",
                       s->phase[0] ? s->phase : "starting");
    if (s->stepped)
        monitor_append(out, cap, &len,
                       " and its last step report was step index %lld of repeat %d",
                       (long long)s->last_step, s->last_repeat);
    int named = 0, more = 0;
    for (int i = 0; i < r->world_size; i++) {
        const struct run_rank *p = &r->ranks[i];
        if (p == k || !p->spawned || p->exited)
            continue;
        if (named == MONITOR_PEERS_NAMED) {
            more++;
            continue;
        }
        const struct ingest_rank *ps = p->said;
        monitor_append(out, cap, &len, "%s", named++ ? "; " : "; meanwhile ");
        if (ps->heartbeat_ms)
            monitor_append(out, cap, &len,
                           "rank %d had been in '%s' (progress %lld) for %.1f s (last "
                           "heartbeat %.1f s ago)",
                           p->rank, ps->heartbeat, (long long)ps->heartbeat_progress,
                           monitor_ago_s(now_ms, ps->heartbeat_since_ms),
                           monitor_ago_s(now_ms, ps->heartbeat_ms));
        else
            monitor_append(out, cap, &len, "rank %d had sent no heartbeat", p->rank);
    }
    if (more)
        monitor_append(out, cap, &len, "; and %d more rank(s)", more);
}

/* An elastic run's frozen rank is killed: its end is a lost slot, not the run's failure.
 * True when that is how it is handled. */
static bool monitor_elastic_frozen(struct active_run *r, struct run_rank *k)
{
    if (!r->elastic.on || k->node != 0 || k->channel)
        return false;
    if (k->signal_sent != SIGKILL) {
        log_info("run %lld: elastic: rank %d sent nothing for %d s: killing it",
                 (long long)r->id, k->rank, r->heartbeat_timeout_s);
        launcher_signal(k->pid, SIGKILL);
        k->signal_sent = SIGKILL;
    }
    return true;
}

/* A rank that sent nothing for heartbeat_timeout_s is frozen (stopped, swapped out,
 * wedged in the kernel): its heartbeat thread would otherwise speak every second. */
static void monitor_check_heartbeats(struct active_run *r, int64_t now_ms)
{
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (!k->spawned || k->exited)
            continue;
        int64_t silent = now_ms - k->last_seen_ms;
        if (silent < (int64_t)r->heartbeat_timeout_s * 1000)
            continue;
        if (monitor_elastic_frozen(r, k))
            continue;
        char reason[sizeof r->stop_reason];
        monitor_describe_frozen(r, k, now_ms, reason, sizeof reason);
        monitor_stop_run(r, DB_RUN_FAILED, k->rank, reason);
        return;
    }
}

/* Another launcher's run: callers that never proved themselves are dropped; once every
 * rank has ended, the launcher gets the kill grace to exit on its own, then SIGTERM, then
 * SIGKILL, so the run ends with nothing it started left. */
static void monitor_tick_launcher(struct active_run *r, int64_t now_ms)
{
    channel_tick(r->channel, now_ms);
    monitor_launcher_check(r);
    if (r->launcher_exited || r->launcher_pid <= 0 || r->n_settled < r->world_size)
        return;
    if (!r->launcher_kill_at_ms) {
        r->launcher_kill_at_ms = now_ms + r->ctx->cfg->kill_grace_ms;
        return;
    }
    if (now_ms < r->launcher_kill_at_ms)
        return;
    int sig = r->launcher_termed ? SIGKILL : SIGTERM;
    log_warn("run %lld: %s outlived its ranks by %d ms; sending it %s", (long long)r->id,
             r->launcher_name, r->ctx->cfg->kill_grace_ms,
             sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    launcher_signal(r->launcher_pid, sig);
    r->launcher_termed = true;
    r->launcher_kill_at_ms = now_ms + r->ctx->cfg->kill_grace_ms;
}

void monitor_tick(struct active_run *r, int64_t now_ms)
{
    if (r->finished)
        return;
    if (!r->stopping && now_ms >= r->deadline_ms) {
        char reason[128];
        snprintf(reason, sizeof reason, "the run exceeded its timeout of %d s", r->timeout_s);
        monitor_stop_run(r, DB_RUN_FAILED, -1, reason);
    }
    bool restarting = r->restart && r->restart->stopping;
    if (!r->stopping && !restarting) { /* a fault fires on the generation that runs */
        monitor_check_heartbeats(r, now_ms);
        faults_tick(r->faults, now_ms, monitor_steps_done(r));
    }
    if (!r->stopping && restarting && now_ms >= r->restart->kill_at_ms) {
        monitor_send_all(r, SIGKILL); /* the generation outlived the grace */
        r->restart->kill_at_ms = now_ms + 1000;
    } else if (!r->stopping && restarting) {
        monitor_kill_stopped(r);
    }
    if (r->stopping && now_ms >= r->kill_at_ms) {
        monitor_send_all(r, SIGKILL);
        r->kill_at_ms = now_ms + 1000; /* repeat until they are gone */
    } else if (r->stopping) {
        monitor_kill_stopped(r);
    }
    /* A pidfd event can be missed only if its watch failed to register; reap anyway. */
    for (int i = 0; i < r->world_size && !r->finished; i++)
        monitor_rank_exited(r, &r->ranks[i]);
    if (r->foreign && !r->finished)
        monitor_tick_launcher(r, now_ms);
}

/* What a follower said about rank `rank` of this run (daemon/cluster.h's events). A
 * follower speaks only for the ranks placed on it: anything else is dropped. */
void monitor_remote_event(struct active_run *r, int node, int rank, const json_t *ev)
{
    if (r->finished || rank < 0 || rank >= r->world_size || r->ranks[rank].node != node ||
        node == 0) {
        log_warn("run %lld: node %d sent an event for rank %d, which is not its own: dropped",
                 (long long)r->id, node, rank);
        return;
    }
    struct run_rank *k = &r->ranks[rank];
    const json_t *sp = json_object_get(ev, "spawned"), *ln = json_object_get(ev, "line"),
                 *ex = json_object_get(ev, "exit");
    if (sp) {
        char name[64];
        cluster_node_name(r->ctx->cluster, node, name, sizeof name);
        k->pid = (pid_t)json_integer_value(json_object_get(sp, "pid"));
        struct err e = {0};
        int rc = db_rank_spawned(r->ctx->db, r->id, rank, name, k->pid,
                                 json_string_value(json_object_get(sp, "cpus")), &e);
        monitor_db_warn(r, rc, &e);
    } else if (ln && !k->exited) {
        monitor_handle_line(r, k, json_string_value(ln), json_string_length(ln));
    } else if (ex && !k->exited) {
        const json_t *code = json_object_get(ex, "code"), *sig = json_object_get(ex, "signal");
        const char *why = json_string_value(json_object_get(ex, "error"));
        if (why)
            snprintf(k->node_error, sizeof k->node_error, "%s", why);
        k->wstatus = json_is_integer(sig) && json_integer_value(sig) > 0
                         ? (int)(json_integer_value(sig) & 0x7f)
                         : (int)((json_integer_value(code) & 0xff) << 8);
        k->exited = true;
        k->exit_order = ++r->exits_seen;
        monitor_settle(r, k);
        monitor_check_done(r);
    }
}

/* Node `node` is gone with its ranks: the run fails naming it, its ranks count as
 * killed (nothing more will come from them), and the others are stopped. */
void monitor_node_lost(struct active_run *r, int node, const char *why)
{
    if (r->finished || node == 0)
        return;
    char ranks[256] = "";
    size_t len = 0;
    int first = -1, n = 0;
    for (int i = 0; i < r->world_size; i++)
        if (r->ranks[i].node == node && !r->ranks[i].exited) {
            monitor_append(ranks, sizeof ranks, &len, "%s%d", first < 0 ? "" : ", ", i);
            if (first < 0)
                first = i;
            n++;
        }
    if (first < 0)
        return;
    char reason[sizeof r->stop_reason];
    snprintf(reason, sizeof reason, "%s; its %s %s %s gone", why, n == 1 ? "rank" : "ranks",
             ranks, n == 1 ? "is" : "are");
    log_error("run %lld: %s", (long long)r->id, reason);
    monitor_stop_run(r, DB_RUN_FAILED, first, reason);
    for (int i = 0; i < r->world_size; i++) {
        struct run_rank *k = &r->ranks[i];
        if (k->node != node || k->exited)
            continue;
        k->exited = true;
        k->wstatus = SIGKILL;
        k->signal_sent = SIGKILL;
        k->exit_order = ++r->exits_seen;
        monitor_settle(r, k);
    }
    monitor_check_done(r);
}

void monitor_forget_remote(struct active_run *r)
{
    for (int i = 0; i < r->world_size && !r->finished; i++)
        if (r->ranks[i].node != 0)
            monitor_node_lost(r, r->ranks[i].node, "ddpbenchd shut down");
}

bool monitor_run_finished(const struct active_run *r)
{
    return r->finished;
}
int64_t monitor_run_id(const struct active_run *r)
{
    return r->id;
}
int monitor_run_world_size(const struct active_run *r)
{
    return r->world_size;
}

void monitor_free_run(struct active_run *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->world_size; i++)
        monitor_rank_close(r, &r->ranks[i]);
    monitor_storage_stop(r);
    storage_mounts_free(r->mounts);
    channel_close(r->channel);
    if (r->launcher_pidfd >= 0) {
        loop_watch_remove(r->ctx->loop, &r->wlauncher.lw);
        close(r->launcher_pidfd);
    }
    if (r->store_registered)
        store_server_remove_run(r->ctx->store, r->ns);
    faults_free(r->faults);
    ingest_run_cleanup(&r->ingest);
    elastic_free(&r->elastic);
    free(r->cpus);
    free(r->restart);
    free(r->restart_gpu);
    free(r->ranks);
    free(r);
}
