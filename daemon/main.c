/* ddpbenchd: the coordinator daemon. Wires the parts together (database, store server,
 * scheduler, HTTP API), then waits for SIGINT/SIGTERM and takes them down in reverse.
 *
 * Decision: signals are blocked in every thread and taken synchronously here with
 * sigwait, so no handler runs inside library code; a lock file in the state directory
 * keeps two daemons from sharing one database; the daemon writes ddpbenchd.json
 * (pid, ports) there so scripts and tests can find it when it chose its ports. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/engines.h"
#include "daemon/follower.h"
#include "daemon/launcher.h"
#include "daemon/scheduler.h"
#include "daemon/storage_mount.h"
#include "daemon/store_server.h"
#include "ddpb_config.h"

struct daemon {
    struct config cfg;
    int lockfd;
    struct db *db;
    struct store_server *store;
    struct scheduler *sched;
    struct cluster *cluster;   /* leader: its nodes */
    struct follower *follower; /* --join: the link to the leader (no db, store, queue) */
    struct events *events;
    struct engines *engines; /* what framework engines this node runs (lazily probed) */
    struct api_ctx api;
    struct api_server *http;
    char info_path[PATH_MAX];
};

static int daemon_lock_state(struct daemon *d, struct err *e)
{
    char path[PATH_MAX];
    if (mkdir(d->cfg.state_dir, 0755) < 0 && errno != EEXIST)
        return err_errno(e, "create state directory %s", d->cfg.state_dir);
    snprintf(path, sizeof path, "%s/ddpbenchd.lock", d->cfg.state_dir);
    d->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (d->lockfd < 0)
        return err_errno(e, "open %s", path);
    if (flock(d->lockfd, LOCK_EX | LOCK_NB) < 0)
        return err_set(e, ERR_CONFLICT, "state-dir",
                       "another ddpbenchd is using the state directory %s", d->cfg.state_dir);
    storage_mount_sweep(d->cfg.state_dir);       /* what a killed daemon left mounted */
    return config_default_data_dirs(&d->cfg, e); /* its data/ is one of them */
}

static int daemon_write_info(struct daemon *d, struct err *e)
{
    char tmp[PATH_MAX];
    snprintf(d->info_path, sizeof d->info_path, "%s/ddpbenchd.json", d->cfg.state_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", d->info_path);
    char url[300];
    snprintf(url, sizeof url, "%s://%s:%d", api_server_tls(d->http) ? "https" : "http",
             d->cfg.host, api_server_port(d->http));
    json_t *info = json_pack("{s:i, s:s, s:s, s:i, s:i, s:s, s:s}", "pid", (int)getpid(),
                             "version", DDPB_VERSION, "url", url, "http_port",
                             api_server_port(d->http), "store_port",
                             d->store ? store_server_port(d->store) : 0, "node", d->cfg.node,
                             "role", d->follower ? "follower" : "leader");
    int rc = info ? json_dump_file(info, tmp, JSON_INDENT(2)) : -1;
    json_decref(info);
    if (rc < 0 || rename(tmp, d->info_path) < 0)
        return err_errno(e, "write %s", d->info_path);
    return 0;
}

/* Runs a stopped daemon left active are interrupted; their workers normally died with
 * it (PR_SET_PDEATHSIG), and any that did not are killed here. */
static int daemon_recover(struct daemon *d, struct err *e)
{
    int64_t interrupted = 0;
    struct db_orphan *orphans = NULL;
    size_t n = 0;
    if (db_recover(d->db, &interrupted, &orphans, &n, e) < 0)
        return -1;
    if (interrupted > 0)
        log_warn("%lld run(s) were active when ddpbenchd last stopped: marked interrupted",
                 (long long)interrupted);
    for (size_t i = 0; i < n; i++) {
        char run[32];
        snprintf(run, sizeof run, "run-%lld", (long long)orphans[i].run_id);
        if (strcmp(orphans[i].node, d->cfg.node) != 0)
            continue; /* a follower's rank: its node kills it when it rejoins */
        if (launcher_kill_orphan(orphans[i].pid, run, orphans[i].rank))
            log_warn("killed orphaned worker pid %d (run %lld rank %d)", orphans[i].pid,
                     (long long)orphans[i].run_id, orphans[i].rank);
    }
    free(orphans);
    return 0;
}

/* Every rank holds a store connection (and its pipes), so the open-file limit caps the
 * world the store can gather: raise the soft limit to the hard one, and say so when even
 * that is short of a large world (deploy/systemd/ddpbenchd.service sets 65536). */
#define DAEMON_NOFILE_WANT 16384 /* an 8,192-rank barrier, with room for everything else */
static void daemon_check_nofile(void)
{
    long nofile = net_raise_nofile();
    if (nofile >= 0 && nofile < DAEMON_NOFILE_WANT)
        log_warn("open files are limited to %ld (the hard limit): the store cannot gather "
                 "that many ranks at once; raise it (ulimit -Hn, LimitNOFILE=) for larger "
                 "worlds",
                 nofile);
}

/* A follower: its API (which sends every /v1 request to the leader) and the link. */
static int daemon_start_follower(struct daemon *d, struct err *e)
{
    d->api.cfg = &d->cfg;
    d->api.started_at = clock_wall_s();
    if (!(d->http = api_server_start(&d->api, e)))
        return -1;
    if (!(d->follower = follower_start(&d->cfg, api_server_port(d->http), e)))
        return -1;
    if (!d->cfg.cluster_key[0])
        log_warn("no --cluster-key: this follower joins with the admin token, which then "
                 "travels on every sync; give the cluster a key (design.md §15)");
    return daemon_write_info(d, e);
}

static int daemon_start(struct daemon *d, struct err *e)
{
    char path[PATH_MAX];
    if (daemon_lock_state(d, e) < 0)
        return -1;
    if (d->cfg.join[0])
        return daemon_start_follower(d, e);
    snprintf(path, sizeof path, "%s/ddpbench.db", d->cfg.state_dir);
    if (!(d->db = db_open(path, e)))
        return -1;
    if (daemon_recover(d, e) < 0)
        return -1;
    if (!(d->store = store_server_create(d->cfg.store_host, d->cfg.store_port, e)))
        return -1;
    if (!(d->events = events_create()))
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    if (!(d->cluster = cluster_create(&d->cfg, d->db, e)))
        return -1;
    if (d->cfg.token[0] && !d->cfg.cluster_key[0])
        log_warn("no --cluster-key: followers join with the admin token (every sync then "
                 "carries it); give the cluster a key (design.md §15)");
    if (!(d->sched = scheduler_create(&d->cfg, d->db, d->store, d->events, d->cluster, e)))
        return -1;
    if (!(d->engines = engines_create(&d->cfg)))
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    d->api.cluster = d->cluster;
    d->api.engines = d->engines;
    d->api.cfg = &d->cfg;
    d->api.db = d->db;
    d->api.sched = d->sched;
    d->api.store = d->store;
    d->api.events = d->events;
    d->api.started_at = clock_wall_s();
    if (!(d->http = api_server_start(&d->api, e)))
        return -1;
    return daemon_write_info(d, e);
}

static void daemon_stop(struct daemon *d)
{
    if (d->events)
        events_shutdown(d->events); /* event streams end (resumed, then closed) */
    api_server_stop(d->http);       /* no new requests */
    follower_stop(d->follower);     /* its ranks are killed */
    scheduler_destroy(d->sched);    /* active runs end interrupted (or cancelled: Slurm) */
    cluster_destroy(d->cluster);
    engines_destroy(d->engines);
    store_server_destroy(d->store);
    events_destroy(d->events);
    db_close(d->db);
    if (d->info_path[0])
        unlink(d->info_path);
    if (d->lockfd >= 0)
        close(d->lockfd);
}

/* A follower's first SIGTERM drains it: running ranks finish, then it leaves. Another
 * SIGTERM or SIGINT meanwhile stops it at once (its ranks are killed). */
static void daemon_drain(struct daemon *d, const sigset_t *sigs)
{
    log_info("SIGTERM: draining (again to stop now)");
    follower_drain(d->follower);
    struct timespec tick = {0, 100 * 1000 * 1000};
    while (!follower_done(d->follower)) {
        int sig = sigtimedwait(sigs, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT)
            return;
    }
}

/* Inside a Slurm allocation, SIGTERM is Slurm ending the job (scancel, or its time
 * limit): every process of the job gets it, the ranks of an srun step too. The runs then
 * end 'cancelled', naming the job, rather than 'interrupted' (which says the daemon went
 * away and may come back): the user stopped them, and nothing will resume them. */
static void daemon_note_slurm_end(struct daemon *d, int sig)
{
    if (sig != SIGTERM || !d->cfg.slurm_job[0] || !d->sched)
        return;
    char why[200];
    snprintf(why, sizeof why,
             "Slurm ended job %s (scancel or its time limit): ddpbenchd got SIGTERM",
             d->cfg.slurm_job);
    log_info("%s", why);
    scheduler_set_stop_status(d->sched, DB_RUN_CANCELLED, why);
}

int main(int argc, char **argv)
{
    struct daemon d;
    memset(&d, 0, sizeof d);
    d.lockfd = -1;
    struct err e = {0};
    log_set_tag("ddpbenchd");
    int rc = config_parse_args(&d.cfg, argc, argv, &e);
    if (rc != 0) {
        if (rc < 0)
            fprintf(stderr, "ddpbenchd: %s\n", e.msg);
        return rc < 0 ? 2 : 0;
    }
    log_set_level(d.cfg.log_level);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* inherited by every thread */
    signal(SIGPIPE, SIG_IGN);
    daemon_check_nofile();

    if (daemon_start(&d, &e) < 0) {
        log_error("cannot start: %s", e.msg);
        fprintf(stderr, "ddpbenchd: %s\n", e.msg);
        daemon_stop(&d);
        return 1;
    }
    if (d.follower)
        printf("ddpbenchd %s listening on %s://%s:%d as a follower of %s (workers on %s, "
               "%d CPU slots)\n",
               DDPB_VERSION, api_server_tls(d.http) ? "https" : "http", d.cfg.host,
               api_server_port(d.http), d.cfg.join, d.cfg.store_host, d.cfg.cpu_slots);
    else
        printf("ddpbenchd %s listening on %s://%s:%d (store %s:%d, state %s, %d CPU slots)\n",
               DDPB_VERSION, api_server_tls(d.http) ? "https" : "http", d.cfg.host,
               api_server_port(d.http), d.cfg.store_host, store_server_port(d.store),
               d.cfg.state_dir, scheduler_slots_total(d.sched));
    fflush(stdout);
    log_info("started (pid %d)", (int)getpid());

    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
        log_info("SIGHUP ignored (nothing to reload)");
    if (d.follower && sig == SIGTERM)
        daemon_drain(&d, &sigs);
    log_info("signal %d: shutting down", sig);
    daemon_note_slurm_end(&d, sig);
    daemon_stop(&d);
    log_info("stopped");
    return 0;
}
