/* follower: see follower.h. The join/sync client (libcurl), the command handlers, and
 * the local ranks' pipes and exits turned into events for the leader.
 *
 * Decision: an https:// leader is verified, peer and host, against --join-ca (the
 * cluster's CA or the leader's own certificate) or, when asked with --join-system-ca,
 * the system store; the handle speaks only the join URL's scheme, so nothing downgrades
 * it. An http:// leader still works (clusters set up before TLS) with a warning. */
#include "daemon/follower.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/report.h"
#include "common/spec.h"
#include "daemon/credential.h"
#include "daemon/engines.h"
#include "daemon/faults.h"
#include "daemon/launcher.h"
#include "daemon/loop.h"
#include "daemon/outbox.h"
#include "ddpb_config.h"

#define FOLLOWER_BATCH_BYTES                                                                   \
    (512u << 10)                           /* events per sync, encoded: under the leader's
                                             default body cap (1 MiB) */
#define FOLLOWER_OUTBOX_MAX 200000         /* events kept while the leader is unreachable */
#define FOLLOWER_OUTBOX_BYTES (256u << 20) /* and their encoded bytes */
#define FOLLOWER_REPLY_MAX                                                                     \
    (64u << 20)             /* a leader's reply buffered, at most: spawn
                                              commands carry specs of up to --max-body */
#define FOLLOWER_SOON_MS 20 /* a sync this soon after new events */
#define FOLLOWER_RETRY_MAX_MS 2000
#define FOLLOWER_MAX_PIN 64 /* CPUs one rank may be pinned to (its spec's threads) */

struct follower;

struct follower_rank {
    struct follower *f;
    int64_t run;
    int rank;
    pid_t pid;
    int report_fd, pidfd;
    struct loop_watch wreport, wexit;
    struct buf line;
    bool killed;                  /* SIGKILL sent: the run is no longer wanted */
    int slots;                    /* CPU slots it holds of the node's --cpu-slots */
    char why[200];                /* killed by this node: why, sent with its exit */
    int pinned[FOLLOWER_MAX_PIN]; /* indices into the follower's cpu[] it holds */
    int npinned;
    struct faults_slow slow; /* an injected slow fault on it (daemon/faults.h) */
};

struct follower {
    const struct config *cfg; /* borrowed */
    int http_port;
    struct loop *loop; /* owned */
    CURL *curl;        /* owned; used on the loop thread only */
    struct curl_slist *headers;
    char curl_why[CURL_ERROR_SIZE]; /* libcurl's detail of the last failure */
    struct loop_timer sync_timer;
    char session[65];
    int node_id, sync_ms;
    bool joined, left, said_lost;
    int64_t retry_ms, last_sync_ms;
    struct outbox outbox;         /* events not yet accepted (daemon/outbox.h) */
    int slots_used;               /* CPU slots the live ranks hold */
    struct follower_rank **ranks; /* owned, live ranks */
    int nranks, cap_ranks;
    atomic_bool drain, done;
    struct loop_call drain_call;
    /* pinning, as the leader's scheduler does: a rank gets CPUs of its own while there
     * are idle ones, else it runs unpinned */
    int ncpus;
    int cpu[CPU_SETSIZE];      /* the daemon's affinity set */
    int cpu_load[CPU_SETSIZE]; /* ranks pinned to cpu[i] */
    /* this node's engine probe (daemon/engines.h), run once on a thread of its own after
     * start; the first sync of each session after it finished carries its list */
    struct engines *engines; /* owned */
    pthread_t probe_thread;
    bool probe_started;
    pthread_mutex_t probe_mu;
    json_t *probe;   /* owned array once the probe finished; under probe_mu */
    bool probe_sent; /* loop thread: the leader has this session's copy */
};

/* --- HTTP to the leader -------------------------------------------------------------- */

/* Says why a call to the leader got no answer; a TLS failure names what the leader was
 * checked against, since a wrong --join-ca is the likely mistake. */
static void follower_log_failure(const struct follower *f, const char *url, CURLcode rc)
{
    const char *why = f->curl_why[0] ? f->curl_why : curl_easy_strerror(rc);
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
        rc == CURLE_SSL_CONNECT_ERROR)
        log_error("follower: TLS with the leader %s failed (checked against %s): %s", url,
                  f->cfg->join_ca[0] ? f->cfg->join_ca : "the system CA store", why);
    else
        log_warn("follower: %s: %s", url, why);
}

/* The handle's transport to the leader: https:// verified against --join-ca (or the
 * system store), or http:// with a warning. Returns 0, or -1 with e. */
static int follower_tls_setup(struct follower *f, struct err *e)
{
    CURL *h = f->curl;
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, f->curl_why);
    if (strncmp(f->cfg->join, "https://", 8) != 0) {
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
        log_warn("follower: --join %s is plain HTTP: the cluster token and the runs' "
                 "secrets cross the network in the clear, and the leader is not "
                 "authenticated (use https:// with --join-ca)",
                 f->cfg->join);
        return 0;
    }
    CURLcode rc = curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (rc == CURLE_OK && f->cfg->join_ca[0])
        rc = curl_easy_setopt(h, CURLOPT_CAINFO, f->cfg->join_ca);
    if (rc != CURLE_OK)
        return err_set(e, ERR_INVALID, "join", "--join %s: libcurl cannot do TLS here: %s",
                       f->cfg->join, curl_easy_strerror(rc));
    return 0;
}

/* POSTs body to the leader's path. Returns the HTTP status (0: no answer) with the
 * parsed reply in *reply (owned; NULL when not JSON). */
static long follower_post(struct follower *f, const char *path, const json_t *body,
                          json_t **reply)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", f->cfg->join, path);
    char *text = json_dumps(body, JSON_COMPACT);
    struct outbox_reply got = {.cap = FOLLOWER_REPLY_MAX};
    buf_init(&got.body);
    long status = 0;
    *reply = NULL;
    if (!text)
        return 0;
    curl_easy_setopt(f->curl, CURLOPT_URL, url);
    curl_easy_setopt(f->curl, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(f->curl, CURLOPT_WRITEDATA, &got);
    f->curl_why[0] = '\0';
    CURLcode rc = curl_easy_perform(f->curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &status);
    else if (!f->said_lost && !got.over) {
        follower_log_failure(f, url, rc);
        f->said_lost = true;
    }
    if (got.body.len > 0 && !got.over)
        *reply = json_loadb((const char *)got.body.data, got.body.len, 0, NULL);
    buf_free(&got.body);
    free(text);
    return status;
}

/* --- local ranks ------------------------------------------------------------------------ */

static void follower_arm(struct follower *f, int64_t at);

/* Queues ev (stolen) for the leader and brings the next sync forward. */
static void follower_queue(struct follower *f, json_t *ev)
{
    if (!outbox_push(&f->outbox, ev))
        return;
    int64_t soon = f->last_sync_ms + FOLLOWER_SOON_MS, now = clock_mono_ms();
    if (soon < now)
        soon = now;
    if (!f->retry_ms &&
        (!loop_timer_armed(&f->sync_timer) || loop_timer_deadline(&f->sync_timer) > soon))
        follower_arm(f, soon);
}

static json_t *follower_event(const struct follower_rank *k, const char *key, json_t *v)
{
    return json_pack("{s:I, s:i, s:o}", "run", (json_int_t)k->run, "rank", k->rank, key, v);
}

/* Whole lines of the rank's pipe become line events (buf_read_lines' callback, ctx the
 * rank); a line over the protocol's limit is replaced by one the leader's ingestion
 * refuses, so the rank fails naming why. */
static void follower_on_line(void *ctx, const char *line, size_t len)
{
    struct follower_rank *k = ctx;
    json_t *v = line ? json_stringn(line, len) : NULL; /* NULL too for invalid UTF-8 */
    if (!v)
        v = json_string(line ? "report line not valid UTF-8 (seen on a follower)"
                             : "report line too long (over the protocol's limit, seen on a "
                               "follower)");
    follower_queue(k->f, follower_event(k, "line", v));
}

static void follower_read(struct follower_rank *k)
{
    if (buf_read_lines(k->report_fd, &k->line, REPORT_MAX_LINE, follower_on_line, k) != 0) {
        loop_watch_remove(k->f->loop, &k->wreport);
        close(k->report_fd);
        k->report_fd = -1;
    }
}

static void follower_remove_rank(struct follower *f, struct follower_rank *k)
{
    faults_slow_end(&k->slow); /* no burner outlives the rank it slowed */
    f->slots_used -= k->slots;
    for (int i = 0; i < k->npinned; i++)
        f->cpu_load[k->pinned[i]]--;
    for (int i = 0; i < f->nranks; i++)
        if (f->ranks[i] == k) {
            f->ranks[i] = f->ranks[--f->nranks];
            break;
        }
    if (k->report_fd >= 0) {
        loop_watch_remove(f->loop, &k->wreport);
        close(k->report_fd);
    }
    if (k->pidfd >= 0) {
        loop_watch_remove(f->loop, &k->wexit);
        close(k->pidfd);
    }
    buf_free(&k->line);
    free(k);
}

/* The rank exited: its last lines, then its exit, go to the leader. */
static void follower_exited(struct follower_rank *k)
{
    int ws = 0;
    if (waitpid(k->pid, &ws, WNOHANG) != k->pid)
        return;
    launcher_end_group(k->pid); /* what the rank left running ends with it */
    if (k->report_fd >= 0)
        follower_read(k); /* the writer is gone: drains to end of file */
    json_t *ex = json_pack(
        "{s:o, s:o}", "code", WIFEXITED(ws) ? json_integer(WEXITSTATUS(ws)) : json_null(),
        "signal", WIFSIGNALED(ws) ? json_integer(WTERMSIG(ws)) : json_null());
    if (ex && k->why[0])
        json_object_set_new(ex, "error", json_string(k->why));
    follower_queue(k->f, follower_event(k, "exit", ex));
    log_info("follower: run %lld rank %d exited", (long long)k->run, k->rank);
    follower_remove_rank(k->f, k);
}

static void follower_on_report(void *ctx, uint32_t events)
{
    struct follower_rank *k = ctx;
    (void)events;
    if (k->report_fd >= 0)
        follower_read(k);
}

static void follower_on_exit(void *ctx, uint32_t events)
{
    (void)events;
    follower_exited(ctx);
}

static void follower_signal_run(struct follower *f, int64_t run, int sig)
{
    for (int i = 0; i < f->nranks; i++) {
        struct follower_rank *k = f->ranks[i];
        if (run != 0 && k->run != run)
            continue;
        int s = sig == SIGTERM && launcher_is_stopped(k->pid) ? SIGKILL : sig;
        launcher_signal(k->pid, s);
        k->killed |= s == SIGKILL;
    }
}

/* --- commands --------------------------------------------------------------------------- */

struct follower_spawn {
    int64_t run;
    const char *store, *ns, *secret;
    int world_size, node_rank;
    int64_t memory_limit_mib; /* each rank's RLIMIT_AS the leader chose; 0: none */
    const json_t *spec, *ranks;
};

/* A spawn command's fields, checked before anything runs; false (logged) when malformed. */
static bool follower_parse_spawn(const json_t *c, struct follower_spawn *s)
{
    s->run = json_integer_value(json_object_get(c, "run"));
    s->store = json_string_value(json_object_get(c, "store"));
    s->ns = json_string_value(json_object_get(c, "ns"));
    s->secret = json_string_value(json_object_get(c, "secret"));
    s->world_size = (int)json_integer_value(json_object_get(c, "world_size"));
    s->node_rank = (int)json_integer_value(json_object_get(c, "node_rank"));
    s->spec = json_object_get(c, "spec");
    s->ranks = json_object_get(c, "ranks");
    const json_t *mem = json_object_get(c, "memory_limit_mib"); /* absent: an older leader */
    s->memory_limit_mib = mem ? json_integer_value(mem) : 0;
    bool ok = (!mem || (json_is_integer(mem) && s->memory_limit_mib >= 0 &&
                        s->memory_limit_mib <= (INT64_C(1) << 30))) &&
              s->run > 0 && s->store && strlen(s->store) < 192 && s->ns && strlen(s->ns) < 32 &&
              s->secret && strlen(s->secret) < 40 && s->world_size >= 1 &&
              s->world_size <= SPEC_MAX_WORLD && s->node_rank >= 0 &&
              s->node_rank < SPEC_MAX_WORLD && json_is_object(s->spec) &&
              json_is_array(s->ranks) && json_array_size(s->ranks) >= 1 &&
              json_array_size(s->ranks) <= (size_t)s->world_size;
    size_t i;
    const json_t *r;
    json_array_foreach(s->ranks, i, r)
    {
        json_int_t rank = json_integer_value(json_object_get(r, "rank"));
        json_int_t local = json_integer_value(json_object_get(r, "local_rank"));
        ok = ok && json_is_integer(json_object_get(r, "rank")) && rank >= 0 &&
             rank < s->world_size && local >= 0 && local < s->world_size;
    }
    if (!ok)
        log_error("follower: malformed spawn command from the leader: ignored");
    return ok;
}

/* Writes the run's spec where its ranks read it: STATE/runs/ID/spec.json. */
static int follower_write_spec(struct follower *f, const struct follower_spawn *s, char *dir,
                               size_t cap)
{
    snprintf(dir, cap, "%s/runs", f->cfg->state_dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -1;
    snprintf(dir, cap, "%s/runs/%lld", f->cfg->state_dir, (long long)s->run);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/spec.json", dir);
    return json_dump_file(s->spec, path, JSON_COMPACT);
}

/* per idle CPUs for rank k into k->pinned and their list ("3,4") into out: true when it
 * is pinned; false (out "", nothing taken) when fewer than per CPUs are idle, since a
 * rank pinned to a busy CPU would be slower than one the kernel places. */
static bool follower_take_cpus(struct follower *f, int per, struct follower_rank *k, char *out,
                               size_t cap)
{
    int n = 0;
    out[0] = '\0';
    for (int i = 0; i < f->ncpus && n < per && per <= FOLLOWER_MAX_PIN; i++)
        if (f->cpu_load[i] == 0)
            k->pinned[n++] = i;
    if (n < per || per > FOLLOWER_MAX_PIN)
        return false;
    size_t len = 0;
    for (int i = 0; i < n && len < cap; i++) {
        f->cpu_load[k->pinned[i]]++;
        len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "," : "",
                                f->cpu[k->pinned[i]]);
    }
    k->npinned = n;
    return true;
}

static void follower_spawn_rank(struct follower *f, const struct follower_spawn *s,
                                const char *dir, int rank, int local)
{
    char spec_path[PATH_MAX], log_path[PATH_MAX], script[PATH_MAX] = "";
    const char *engine = json_string_value(json_object_get(s->spec, "engine"));
    struct err se = {0};
    /* engine script: this node's own --scripts-dir decides, as the leader's does there */
    if (engine && strcmp(engine, "script") == 0 &&
        engines_resolve_script(f->cfg, json_string_value(json_object_get(s->spec, "script")),
                               script, &se) < 0)
        log_warn("follower: rank %d: %s", rank, se.msg); /* the bootstrap then fails it */
    snprintf(spec_path, sizeof spec_path, "%s/spec.json", dir);
    snprintf(log_path, sizeof log_path, "%s/rank%d.log", dir, rank);
    struct launch_rank lr = {
        .worker_path = f->cfg->worker_path,
        .engine = engine,
        .script = script[0] ? script : NULL,
        .python = f->cfg->python,
        .engines_dir = f->cfg->engines_dir,
        .run = s->ns,
        .secret = s->secret,
        .store_addr = s->store,
        .spec_path = spec_path,
        .log_path = log_path,
        .peer_host = f->cfg->store_host,
        .rank = rank,
        .world_size = s->world_size,
        .local_rank = local,
        .node_rank = s->node_rank,
        .node_name = f->cfg->node,
        .shm_dir = f->cfg->shm_dir,     /* this node's own, as its ranks' segments are */
        .data_dirs = f->cfg->data_dirs, /* this node's own: its workers check against it */
        .memory_limit_mib = s->memory_limit_mib,
    };
    struct follower_rank *k = calloc(1, sizeof *k);
    struct launched out;
    struct err e = {0};
    json_t *ev = NULL;
    char cpus[512];
    if (k && f->nranks == f->cap_ranks) {
        int cap = f->cap_ranks * 2 + 8;
        struct follower_rank **grown = realloc(f->ranks, (size_t)cap * sizeof *grown);
        if (grown) {
            f->ranks = grown;
            f->cap_ranks = cap;
        }
    }
    bool pinned = k &&
                  follower_take_cpus(f, spec_slots_per_rank(s->spec), k, cpus, sizeof cpus);
    lr.cpus = pinned ? cpus : NULL;
    if (!k || f->nranks == f->cap_ranks) {
        err_set(&e, ERR_NOMEM, NULL, "out of memory");
    } else if (launcher_spawn(&lr, &out, &e) == 0) {
        k->f = f;
        k->run = s->run;
        k->rank = rank;
        k->pid = out.pid;
        k->report_fd = out.report_fd;
        k->pidfd = out.pidfd;
        k->slots = spec_slots_per_rank(s->spec);
        f->slots_used += k->slots;
        buf_init(&k->line);
        f->ranks[f->nranks++] = k;
        loop_watch_add(f->loop, &k->wreport, k->report_fd, EPOLLIN, follower_on_report, k, &e);
        loop_watch_add(f->loop, &k->wexit, k->pidfd, EPOLLIN, follower_on_exit, k, &e);
        follower_queue(f, follower_event(k, "spawned",
                                         json_pack("{s:i, s:o}", "pid", (int)k->pid, "cpus",
                                                   pinned ? json_string(cpus) : json_null())));
        log_info("follower: run %lld rank %d started (pid %d)", (long long)s->run, rank,
                 (int)k->pid);
        return;
    }
    for (int i = 0; k && i < k->npinned; i++)
        f->cpu_load[k->pinned[i]]--;
    free(k);
    /* could not start: the leader hears an exit with the launcher's reason in the log */
    log_error("follower: run %lld rank %d: %s", (long long)s->run, rank, e.msg);
    ev = json_pack("{s:I, s:i, s:{s:i, s:n}}", "run", (json_int_t)s->run, "rank", rank, "exit",
                   "code", 127, "signal");
    follower_queue(f, ev);
}

int follower_spawn_refusal(const char *node, int used, int slots, int nranks, int per,
                           char *why, size_t cap)
{
    long need = (long)nranks * (per > 0 ? per : 1);
    if (used + need <= slots)
        return 0;
    snprintf(why, cap,
             "was refused by node %s: %d rank(s) of %d CPU slot(s) each would pass its "
             "--cpu-slots %d (%d in use)",
             node, nranks, per, slots, used);
    return -1;
}

/* An exit for each rank of s that this node does not start, with why (NULL: none). */
static void follower_refuse_ranks(struct follower *f, const struct follower_spawn *s,
                                  const char *why)
{
    size_t i;
    const json_t *r;
    json_array_foreach(s->ranks, i, r)
    {
        json_t *ev = json_pack("{s:I, s:i, s:{s:i, s:n}}", "run", (json_int_t)s->run, "rank",
                               (int)json_integer_value(json_object_get(r, "rank")), "exit",
                               "code", 127, "signal");
        if (ev && why)
            json_object_set_new(json_object_get(ev, "exit"), "error", json_string(why));
        follower_queue(f, ev);
    }
}

static void follower_do_spawn(struct follower *f, const json_t *c)
{
    struct follower_spawn s;
    if (!follower_parse_spawn(c, &s))
        return;
    char why[200];
    if (follower_spawn_refusal(f->cfg->node, f->slots_used, f->cfg->cpu_slots,
                               (int)json_array_size(s.ranks), spec_slots_per_rank(s.spec), why,
                               sizeof why) < 0) {
        log_error("follower: run %lld %s", (long long)s.run, why);
        follower_refuse_ranks(f, &s, why);
        return;
    }
    char dir[PATH_MAX];
    bool ok = follower_write_spec(f, &s, dir, sizeof dir) == 0;
    if (!ok) {
        log_error("follower: run %lld: cannot write its spec under %s", (long long)s.run, dir);
        follower_refuse_ranks(f, &s, NULL);
        return;
    }
    size_t i;
    const json_t *r;
    json_array_foreach(s.ranks, i, r)
    {
        follower_spawn_rank(f, &s, dir, (int)json_integer_value(json_object_get(r, "rank")),
                            (int)json_integer_value(json_object_get(r, "local_rank")));
    }
}

/* An injected fault on one of this node's ranks (the leader's daemon/faults.c decides
 * when): "KILL", "STOP", "CONT", "SLOW" (value: the fraction left), "FAST" (slow undone),
 * or on this node's link, "LINK" (value: Mbit/s) and "UNLINK". */
static void follower_do_fault(struct follower *f, const json_t *c)
{
    json_int_t run = json_integer_value(json_object_get(c, "run"));
    int rank = (int)json_integer_value(json_object_get(c, "rank"));
    const char *act = json_string_value(json_object_get(c, "action"));
    double value = json_number_value(json_object_get(c, "value"));
    char why[200] = "";
    int rc = 0;
    if (act && strcmp(act, "LINK") == 0)
        rc = faults_link_shape(value, why, sizeof why);
    else if (act && strcmp(act, "UNLINK") == 0)
        rc = faults_link_restore(f->cfg->network_profile, why, sizeof why);
    for (int i = 0; act && rc == 0 && i < f->nranks; i++) {
        struct follower_rank *k = f->ranks[i];
        if (k->run != run || k->rank != rank)
            continue;
        if (strcmp(act, "KILL") == 0 || strcmp(act, "STOP") == 0 || strcmp(act, "CONT") == 0)
            launcher_signal(k->pid, act[0] == 'K'   ? SIGKILL
                                    : act[0] == 'S' ? SIGSTOP
                                                    : SIGCONT);
        else if (strcmp(act, "SLOW") == 0 && k->slow.pid == 0)
            rc = faults_slow_begin(k->pid, value, &k->slow);
        else if (strcmp(act, "FAST") == 0)
            faults_slow_end(&k->slow);
    }
    if (rc < 0)
        log_error("follower: fault %s on run %lld rank %d failed%s%s", act, (long long)run,
                  rank, why[0] ? ": " : "", why);
}

static void follower_do_commands(struct follower *f, const json_t *cmds)
{
    size_t i;
    const json_t *c;
    json_array_foreach(cmds, i, c)
    {
        const char *op = json_string_value(json_object_get(c, "op"));
        if (op && strcmp(op, "spawn") == 0) {
            follower_do_spawn(f, c);
        } else if (op && strcmp(op, "fault") == 0) {
            follower_do_fault(f, c);
        } else if (op && strcmp(op, "signal") == 0) {
            const char *sig = json_string_value(json_object_get(c, "signal"));
            json_int_t run = json_integer_value(json_object_get(c, "run"));
            if (run > 0 && sig && (strcmp(sig, "TERM") == 0 || strcmp(sig, "KILL") == 0))
                follower_signal_run(f, run, strcmp(sig, "KILL") == 0 ? SIGKILL : SIGTERM);
            else
                log_error("follower: malformed signal command from the leader: ignored");
        } else {
            log_error("follower: unknown command '%s' from the leader: ignored",
                      op ? op : "(none)");
        }
    }
}

/* Kills every local rank of a run the leader no longer lists. */
static void follower_reconcile(struct follower *f, const json_t *runs)
{
    for (int i = 0; i < f->nranks; i++) {
        struct follower_rank *k = f->ranks[i];
        bool wanted = false;
        size_t j;
        const json_t *r;
        json_array_foreach(runs, j, r) wanted |= json_integer_value(r) == k->run;
        if (!wanted && !k->killed) {
            log_warn("follower: run %lld is not the leader's any more: killing rank %d",
                     (long long)k->run, k->rank);
            launcher_signal(k->pid, SIGKILL);
            k->killed = true;
        }
    }
}

/* --- join, sync, leave -------------------------------------------------------------------- */

static void follower_join(struct follower *f)
{
    json_t *offer = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:{s:s}, s:o}", "name", f->cfg->node, "address",
        f->cfg->store_host, "port", f->http_port, "cpu_slots", f->cfg->cpu_slots, "gpus",
        f->cfg->gpus, "engines", "ddpbench", DDPB_VERSION, "network_profile",
        f->cfg->network_profile[0] ? json_string(f->cfg->network_profile) : json_null());
    json_t *reply = NULL;
    long st = follower_post(f, "/v1/cluster/join", offer, &reply);
    json_decref(offer);
    const char *session = json_string_value(json_object_get(reply, "session"));
    if (st == 200 && session && strlen(session) < sizeof f->session) {
        snprintf(f->session, sizeof f->session, "%s", session);
        f->node_id = (int)json_integer_value(json_object_get(reply, "node_id"));
        json_int_t ms = json_integer_value(json_object_get(reply, "sync_ms"));
        f->sync_ms = ms >= 20 && ms <= 60000 ? (int)ms : f->cfg->sync_ms;
        f->joined = true;
        f->probe_sent = false; /* the leader forgets a node's probe with its session */
        f->said_lost = false;
        f->retry_ms = 0;
        outbox_clear(&f->outbox); /* events of an earlier session: those runs are over */
        follower_reconcile(f, json_object_get(reply, "runs"));
        log_info("follower: joined %s as node %d", f->cfg->join, f->node_id);
    } else if (st != 0) {
        const char *why = json_string_value(json_object_get(reply, "error"));
        log_error("follower: the leader refused the join (HTTP %ld): %s", st,
                  why ? why : "no reason given");
    }
    json_decref(reply);
}

/* The probe's list when it finished and this session has not had it yet (new
 * reference), else NULL. */
static json_t *follower_probe_to_send(struct follower *f)
{
    if (f->probe_sent)
        return NULL;
    pthread_mutex_lock(&f->probe_mu);
    json_t *p = f->probe ? json_incref(f->probe) : NULL;
    pthread_mutex_unlock(&f->probe_mu);
    return p;
}

/* The leader refused ev alone as too large: its rank is killed (or its queued exit
 * amended) with why, so its run fails naming it instead of waiting for it. */
static void follower_drop_too_large(struct follower *f, const json_t *ev)
{
    json_int_t run = json_integer_value(json_object_get(ev, "run"));
    int rank = (int)json_integer_value(json_object_get(ev, "rank"));
    char why[200];
    snprintf(why, sizeof why,
             "was killed by node %s: a report event of %zu bytes is over the leader's "
             "--max-body",
             f->cfg->node, outbox_size_of(ev));
    log_error("follower: run %lld rank %d %s", (long long)run, rank, why);
    for (int i = 0; i < f->nranks; i++) {
        struct follower_rank *k = f->ranks[i];
        if (k->run == run && k->rank == rank) {
            snprintf(k->why, sizeof k->why, "%s", why);
            launcher_signal(k->pid, SIGKILL);
            k->killed = true;
            return;
        }
    }
    size_t i;
    json_t *q;
    json_array_foreach(f->outbox.events, i, q)
    {
        json_t *ex = json_object_get(q, "exit");
        if (ex && json_integer_value(json_object_get(q, "run")) == run &&
            json_integer_value(json_object_get(q, "rank")) == rank)
            json_object_set_new(ex, "error", json_string(why));
    }
}

static void follower_sync(struct follower *f)
{
    size_t n = 0;
    json_t *body = json_pack("{s:i, s:s, s:s, s:o}", "node_id", f->node_id, "session",
                             f->session, "state", atomic_load(&f->drain) ? "draining" : "up",
                             "events", outbox_batch(&f->outbox, &n));
    json_t *probe = follower_probe_to_send(f);
    if (probe)
        json_object_set_new(body, "engines", probe);
    json_t *reply = NULL;
    long st = follower_post(f, "/v1/cluster/sync", body, &reply);
    json_decref(body);
    f->last_sync_ms = clock_mono_ms();
    if (st == 200) {
        outbox_accepted(&f->outbox, n);
        f->probe_sent |= probe != NULL;
        f->said_lost = false;
        f->retry_ms = 0;
        follower_do_commands(f, json_object_get(reply, "commands"));
        follower_reconcile(f, json_object_get(reply, "runs"));
    } else if (st == 409) {
        log_warn("follower: the leader does not know this session any more: joining again");
        f->joined = false;
    } else if (st == 400) { /* never sent again: it would be refused forever */
        const char *why = json_string_value(json_object_get(reply, "error"));
        log_error("follower: the leader refused a sync: %s: dropping %zu event(s)",
                  why ? why : "?", n);
        outbox_accepted(&f->outbox, n);
    } else if (st == 413) { /* smaller batches; one event alone too large fails its rank */
        json_t *ev = outbox_refused_too_large(&f->outbox, n);
        if (ev)
            follower_drop_too_large(f, ev);
        json_decref(ev);
    } else if (st != 0) {
        log_error("follower: sync answered HTTP %ld", st);
    }
    json_decref(reply);
    if (st != 200)
        f->retry_ms = f->retry_ms
                          ? (f->retry_ms * 2 > FOLLOWER_RETRY_MAX_MS ? FOLLOWER_RETRY_MAX_MS
                                                                     : f->retry_ms * 2)
                          : 100;
}

/* Drained: nothing runs and every event is with the leader. */
static void follower_leave(struct follower *f)
{
    json_t *body = json_pack("{s:i, s:s}", "node_id", f->node_id, "session", f->session);
    json_t *reply = NULL;
    long st = f->joined ? follower_post(f, "/v1/cluster/leave", body, &reply) : 0;
    json_decref(body);
    json_decref(reply);
    log_info("follower: drained; %s", st == 200 ? "left the cluster" : "leaving unannounced");
    f->left = true;
    atomic_store(&f->done, true);
    loop_stop(f->loop);
}

static void follower_on_timer(void *ctx);

static void follower_arm(struct follower *f, int64_t at)
{
    loop_timer_start(f->loop, &f->sync_timer, at, follower_on_timer, f);
}

static void follower_on_timer(void *ctx)
{
    struct follower *f = ctx;
    if (!f->joined)
        follower_join(f);
    if (f->joined)
        follower_sync(f);
    /* never joined (a leader it cannot reach or verify): nothing to hand over, so a
     * drain ends at once instead of waiting for a join that may never come */
    if (atomic_load(&f->drain) && f->nranks == 0 &&
        (outbox_count(&f->outbox) == 0 || !f->joined)) {
        follower_leave(f);
        return;
    }
    int64_t next = f->retry_ms ? f->retry_ms
                               : (outbox_count(&f->outbox) ? FOLLOWER_SOON_MS : f->sync_ms);
    follower_arm(f, clock_mono_ms() + next);
}

/* --- life ------------------------------------------------------------------------------ */

static void follower_post_drain(void *ctx)
{
    struct follower *f = ctx;
    log_info("follower: draining (%d rank(s) running)", f->nranks);
    follower_arm(f, clock_mono_ms());
}

/* The probe thread: engines/probe.py once (seconds: it imports every framework). */
static void *follower_probe_main(void *arg)
{
    struct follower *f = arg;
    struct err e = {0};
    json_t *all = engines_get(f->engines, true, &e);
    json_t *list = all ? json_incref(json_object_get(all, "engines")) : NULL;
    json_decref(all);
    pthread_mutex_lock(&f->probe_mu);
    f->probe = list;
    pthread_mutex_unlock(&f->probe_mu);
    return NULL;
}

struct follower *follower_start(const struct config *cfg, int http_port, struct err *e)
{
    struct follower *f = calloc(1, sizeof *f);
    if (!f) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    f->cfg = cfg;
    f->http_port = http_port;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                f->cpu[f->ncpus++] = c;
    f->sync_ms = cfg->sync_ms;
    bool boxed = outbox_init(&f->outbox, FOLLOWER_BATCH_BYTES, FOLLOWER_OUTBOX_BYTES,
                             FOLLOWER_OUTBOX_MAX);
    pthread_mutex_init(&f->probe_mu, NULL);
    f->engines = engines_create(cfg);
    /* the cluster credential: this node's identity under the cluster key, else (before
     * issue 31, with a warning at start) the admin token */
    char auth[300], ident[CREDENTIAL_IDENTITY];
    if (cfg->cluster_key[0] &&
        credential_node_identity(cfg->cluster_key, cfg->node, ident, e) < 0) {
        follower_stop(f);
        return NULL;
    }
    snprintf(auth, sizeof auth, "Authorization: Bearer %s",
             cfg->cluster_key[0] ? ident : cfg->token);
    f->headers = curl_slist_append(NULL, auth);
    explicit_bzero(auth, sizeof auth);
    f->headers = curl_slist_append(f->headers, "Content-Type: application/json");
    f->curl = curl_easy_init();
    if (!f->curl || !f->headers || !boxed || !f->engines) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        follower_stop(f);
        return NULL;
    }
    curl_easy_setopt(f->curl, CURLOPT_HTTPHEADER, f->headers);
    curl_easy_setopt(f->curl, CURLOPT_WRITEFUNCTION, outbox_reply_take);
    curl_easy_setopt(f->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(f->curl, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(f->curl, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(f->curl, CURLOPT_FOLLOWLOCATION, 0L); /* obey only the URL joined */
    if (follower_tls_setup(f, e) < 0) {
        follower_stop(f);
        return NULL;
    }
    if (!(f->loop = loop_create("ddpb-follow", e))) {
        follower_stop(f);
        return NULL;
    }
    follower_arm(f, clock_mono_ms());
    if (loop_start(f->loop, NULL, NULL, e) < 0) {
        follower_stop(f);
        return NULL;
    }
    /* without the thread the follower runs ddpbench's engine only, as before probes */
    f->probe_started = pthread_create(&f->probe_thread, NULL, follower_probe_main, f) == 0;
    if (!f->probe_started)
        log_warn("follower: no engine probe thread: this node offers ddpbench's engine only");
    return f;
}

void follower_drain(struct follower *f)
{
    if (atomic_exchange(&f->drain, true))
        return; /* the call below is posted once: drain_call is free for it */
    loop_post(f->loop, &f->drain_call, follower_post_drain, f, NULL);
}

bool follower_done(struct follower *f)
{
    return atomic_load(&f->done);
}

void follower_stop(struct follower *f)
{
    if (!f)
        return;
    if (f->engines)
        engines_cancel(f->engines);
    if (f->probe_started)
        pthread_join(f->probe_thread, NULL);
    if (f->loop) {
        loop_stop(f->loop);
        loop_wait(f->loop);
    }
    follower_signal_run(f, 0, SIGKILL);
    for (int i = 0; i < f->nranks; i++)
        waitpid(f->ranks[i]->pid, NULL, 0);
    while (f->nranks > 0)
        follower_remove_rank(f, f->ranks[0]);
    loop_destroy(f->loop);
    free(f->ranks);
    outbox_free(&f->outbox);
    json_decref(f->probe);
    engines_destroy(f->engines);
    pthread_mutex_destroy(&f->probe_mu);
    if (f->curl)
        curl_easy_cleanup(f->curl);
    curl_slist_free_all(f->headers);
    free(f);
}
