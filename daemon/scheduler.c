/* scheduler: see scheduler.h.
 *
 * Decision: the scheduler runs on its own daemon/loop, and the monitors watch their runs'
 * fds (report pipes, pidfds) on that same loop, so every run's events are handled on the
 * loop's thread; finished runs are freed only in the iteration hook, after the whole
 * batch (a monitor removes its watches before closing, which also drops their events
 * still pending in the batch).
 * Cancels are closures posted by the HTTP threads; scheduler_wake only sets a flag and
 * wakes the loop, which keeps it async-signal-safe. */
#include "daemon/scheduler.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/vocab.h"
#include "daemon/gpu_slots.h"
#include "daemon/loop.h"
#include "daemon/monitor.h"
#include "ddpb_config.h"

#define SCHED_TICK_MS 100  /* monitor deadlines and kill escalation */
#define SCHED_POLL_MS 1000 /* the database is the queue: look at it this often too */
#define SCHED_KEEPALIVE_MS 15000

struct sched_active {
    struct active_run *run;
    int *slots; /* owned: the slot indices this run holds */
    int n;
    int *gpus; /* owned: the GPU indices it holds (one when emulated); NULL: none */
    int ngpus;
    int *remote; /* owned: (follower id, slots) pairs it holds on other nodes; NULL: none */
    int nremote;
    bool alone; /* a calibration (spec calibrate): nothing else runs beside it */
};

/* Where a queued run's ranks go: candidate nodes (this one first), ranks on each. */
struct sched_place {
    struct cluster_slot_view cand[CLUSTER_MAX_NODES];
    int count[CLUSTER_MAX_NODES];
    int ncand, nnodes, max_per_node;
    int *rank_node; /* owned: world_size entries, the node id of each rank */
};

/* A cancel request posted to the loop; owned by the loop call until it ran. */
struct sched_cancel {
    struct loop_call call;
    struct scheduler *s;
    size_t n;
    int64_t ids[];
};

struct scheduler {
    const struct config *cfg;
    struct db *db;
    struct cluster *cluster; /* borrowed: the leader's nodes */
    struct monitor_ctx mctx;
    struct loop *loop; /* owned */
    struct loop_timer tick, poll, keepalive;
    struct loop_call stop_call;
    atomic_bool wake_pending; /* set by scheduler_wake, taken by the loop */

    /* owned by the loop's thread; stats mirrored under the lock for other threads */
    bool scan_now; /* look at the queue after this iteration */
    bool stopping, stopping_runs;
    /* what active runs end as when the daemon stops (scheduler_set_stop_status) */
    enum db_run_status stop_status;
    char stop_why[256];
    int nslots;
    bool *slot_used;
    int *slot_cpu; /* the CPU a slot stands for: slot i is CPU i mod ncpus */
    int ncpus;     /* CPUs of the daemon's affinity set */
    int *cpu_load; /* per CPU (by slot_cpu's position, i mod ncpus): slots in use on it */
    int ngpus;     /* GPU slots (cfg->gpus), gpu_used[i] while a run holds GPU i */
    bool *gpu_used;
    struct gpu_plan plan;     /* the placement being started (4 KiB: not on the stack) */
    struct sched_place place; /* its nodes (likewise) */
    struct sched_active *active;
    int nactive, cap_active;

    pthread_mutex_t lock;
    struct scheduler_stats stats;
};

static void sched_publish_stats(struct scheduler *s)
{
    int used = 0;
    for (int i = 0; i < s->nslots; i++)
        used += s->slot_used[i];
    pthread_mutex_lock(&s->lock);
    s->stats.slots_total = s->nslots;
    s->stats.slots_free = s->nslots - used;
    s->stats.runs_active = s->nactive;
    pthread_mutex_unlock(&s->lock);
}

/* Slot i stands for the (i mod n)-th CPU of the daemon's affinity set: with more slots
 * than CPUs (--cpu-slots oversubscribes) several slots share a CPU. Returns -1 when the
 * affinity set cannot be read. */
static int sched_init_slot_cpus(struct scheduler *s)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    if (n == 0)
        return -1;
    s->ncpus = n;
    for (int i = 0; i < s->nslots; i++)
        s->slot_cpu[i] = cpus[i % n];
    if (s->nslots > n)
        log_warn("%d CPU slots but %d CPUs: a run is pinned while its ranks fit on CPUs of "
                 "their own, and marked oversubscribed in its results when they do not",
                 s->nslots, n);
    return 0;
}

/* Takes n free slots into out, those on idle CPUs first (each CPU once), then any;
 * false when fewer are free. Sets *pinned when every slot taken is on a CPU of its own
 * that no other active slot uses: only then are its ranks pinned. */
static bool sched_take_slots(struct scheduler *s, int n, int *out, bool *pinned)
{
    int k = 0;
    for (int i = 0; i < s->nslots && k < n; i++) {
        int c = i % s->ncpus;
        if (s->slot_used[i] || s->cpu_load[c] > 0)
            continue;
        bool dup = false;
        for (int j = 0; j < k && !dup; j++)
            dup = out[j] % s->ncpus == c;
        if (!dup)
            out[k++] = i;
    }
    *pinned = k == n;
    for (int i = 0; i < s->nslots && k < n; i++) {
        bool taken = s->slot_used[i];
        for (int j = 0; j < k && !taken; j++)
            taken = out[j] == i;
        if (!taken)
            out[k++] = i;
    }
    if (k < n)
        return false;
    for (int i = 0; i < n; i++) {
        s->slot_used[out[i]] = true;
        s->cpu_load[out[i] % s->ncpus]++;
    }
    return true;
}

/* Slots in use: above the CPU count, every active run shares CPUs. */
static int sched_slots_in_use(const struct scheduler *s)
{
    int used = 0;
    for (int i = 0; i < s->nslots; i++)
        used += s->slot_used[i];
    return used;
}

/* While more slots are in use than there are CPUs, every active run is marked as having
 * shared CPUs: the ones that were pinned share with the newcomer's unpinned ranks. */
static void sched_mark_oversubscribed(struct scheduler *s)
{
    if (sched_slots_in_use(s) <= s->ncpus)
        return;
    for (int i = 0; i < s->nactive; i++) {
        struct err e = {0};
        int64_t id = monitor_run_id(s->active[i].run);
        if (db_run_oversubscribed(s->db, id, &e) < 0)
            log_warn("run %lld: cannot mark it oversubscribed: %s", (long long)id, e.msg);
    }
}

static int sched_add_active(struct scheduler *s, struct active_run *run, int *slots, int n,
                            int *gpus, int ngpus, int *remote, int nremote)
{
    if (s->nactive == s->cap_active) {
        int cap = s->cap_active ? 2 * s->cap_active : 8;
        struct sched_active *a = realloc(s->active, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        s->active = a;
        s->cap_active = cap;
    }
    s->active[s->nactive++] = (struct sched_active){run,   slots,  n,       gpus,
                                                    ngpus, remote, nremote, false};
    return 0;
}

/* A calibration measures what its own ranks cost each other (docs/model.md "Co-location
 * and contention"): it starts only on an idle node, and nothing starts beside it. True
 * when q must wait (strict FIFO: everything behind it waits too). */
static bool sched_wait_alone(const struct scheduler *s, const struct db_queued_run *q)
{
    if (q->spec.train.calibrate && s->nactive > 0)
        return true;
    for (int i = 0; i < s->nactive; i++)
        if (s->active[i].alone)
            return true;
    return false;
}

/* A device "cuda" run's GPU needs from its spec: false for CPU runs. */
static bool sched_wants_gpu(const struct db_queued_run *q, bool *emulate)
{
    *emulate = q->spec.emulate_multi_rank;
    return strcmp(q->spec.device, "cuda") == 0;
}

/* A queued run that can never start here (a restarted daemon with fewer GPUs than when
 * it was accepted): it fails now, naming why, instead of blocking the queue forever. */
static void sched_fail_unplaceable(struct scheduler *s, const struct db_queued_run *q,
                                   const struct err *why)
{
    struct err e = {0};
    char msg[sizeof why->msg + 32];
    snprintf(msg, sizeof msg, "cannot be placed: %s", why->msg);
    log_error("run %lld %s", (long long)q->id, msg);
    if (db_run_starting(s->db, q->id, &e) < 0 ||
        db_run_finish(s->db, q->id, DB_RUN_FAILED, msg, -1, &e) < 0) {
        log_error("scheduler: run %lld: %s", (long long)q->id, e.msg);
        return;
    }
    json_t *d = json_pack("{s:I, s:I, s:s, s:s}", "run", (json_int_t)q->id, "experiment",
                          (json_int_t)q->experiment_id, "status", "failed", "error", msg);
    if (d)
        events_publish(s->mctx.events, q->experiment_id, "run", d);
    json_decref(d);
}

/* GPU placement of q: 1 with plan filled (or for a CPU run, *cuda false), 0 when it must
 * wait, -1 when q was failed because it can never fit. */
static int sched_plan_gpus(struct scheduler *s, const struct db_queued_run *q, bool *cuda,
                           struct gpu_plan *plan)
{
    bool emulate;
    *cuda = sched_wants_gpu(q, &emulate);
    if (!*cuda)
        return 1;
    struct err e = {0};
    /* a GPU per replica: a single-process run's one process holds them all (issue 33) */
    int replicas = q->spec_err.code == ERR_OK ? q->spec.world_size : q->world_size;
    int rc = gpu_slots_plan(s->ngpus, s->gpu_used, replicas, emulate, plan, &e);
    if (rc < 0)
        sched_fail_unplaceable(s, q, &e);
    return rc;
}

/* Marks plan's GPUs used and returns an owned list of them (one when emulated). */
static int *sched_take_gpus(struct scheduler *s, const struct gpu_plan *plan, int *n)
{
    int k = plan->emulated ? 1 : plan->world_size;
    int *g = calloc((size_t)k, sizeof *g);
    if (!g)
        return NULL;
    for (int i = 0; i < k; i++) {
        g[i] = plan->gpu[i];
        s->gpu_used[g[i]] = true;
    }
    *n = k;
    return g;
}

static void sched_release_remote(struct scheduler *s, int *remote, int nremote)
{
    for (int i = 0; i < nremote; i++)
        cluster_reserve(s->cluster, remote[2 * i], -remote[2 * i + 1]);
    free(remote);
}

static void sched_release(struct scheduler *s, int *slots, int n, int *gpus, int ngpus)
{
    for (int i = 0; i < n; i++) {
        s->slot_used[slots[i]] = false;
        s->cpu_load[slots[i] % s->ncpus]--;
    }
    for (int i = 0; i < ngpus; i++)
        s->gpu_used[gpus[i]] = false;
    free(slots);
    free(gpus);
}

bool scheduler_launcher_spreads(const struct config *cfg, const char *launcher)
{
    if (!launcher || !launcher[0] || strcmp(launcher, "ddpbench") == 0)
        return true;
    return strcmp(launcher, "mpirun") == 0 && cfg->mpi_agent[0];
}

/* srun's ranks: Slurm places, binds and accounts for them in the daemon's allocation (a
 * step that does not fit waits in Slurm), so they take none of this node's slots and the
 * spec's nodes and ranks_per_node go to srun (daemon/launch_plan.c). What is stored as
 * the placement is what the spec asked. */
static int sched_place_srun(struct scheduler *s, const struct db_queued_run *q)
{
    struct sched_place *p = &s->place;
    p->ncand = 1;
    p->count[0] = 0;
    p->nnodes = q->spec.nodes > 0 ? q->spec.nodes : 1;
    p->max_per_node = q->spec.ranks_per_node > 0 ? q->spec.ranks_per_node
                                                 : (q->world_size + p->nnodes - 1) / p->nnodes;
    free(p->rank_node);
    p->rank_node = calloc((size_t)q->world_size, sizeof *p->rank_node); /* all "here" */
    return p->rank_node ? 1 : 0;
}

/* The nodes q asks for: the spec's, or 1 for a transport without TCP (shm) left to the
 * scheduler, which then waits for one node to have room instead of spreading the ranks
 * (the spec's checks refuse shm with nodes or ranks_per_node that span nodes; the submit
 * check, when no node can ever hold it, 409 naming transport). */
static int sched_want_nodes(const struct db_queued_run *q)
{
    const struct vocab_transport *t = vocab_transport(
        vocab_find(VOCAB_TRANSPORT, q->spec.transport));
    bool one_node = t && !t->tcp;
    return q->spec.nodes == 0 && q->spec.ranks_per_node == 0 && one_node ? 1 : q->spec.nodes;
}

/* Where q's ranks go: 1 with s->place filled, 0 when it must wait for slots, -1 when q
 * was failed because it can never be placed. This node is candidate 0 with its free slots,
 * then the followers taking ranks in join order; a GPU run stays on this node. */
static int sched_place(struct scheduler *s, const struct db_queued_run *q, bool cuda)
{
    struct sched_place *p = &s->place;
    int per = monitor_slots_per_rank(q);
    int free_here = s->nslots - sched_slots_in_use(s);
    p->cand[0] = (struct cluster_slot_view){0, free_here};
    p->ncand = 1;
    /* another launcher's ranks (srun; mpirun without --mpi-agent) are started from here:
     * this node's slots hold them (api/h_experiments.c refuses them across nodes); mpirun
     * with an agent reaches the followers, so its ranks are placed and reserved there as
     * ddpbench's own are (the launch plan's host list says where) */
    if (strcmp(q->spec.launcher, "srun") == 0)
        return sched_place_srun(s, q);
    if (!cuda && scheduler_launcher_spreads(s->cfg, q->spec.launcher))
        p->ncand += cluster_followers(s->cluster, p->cand + 1, CLUSTER_MAX_NODES - 1);
    else if (q->spec.nodes > 1 ||
             (q->spec.ranks_per_node > 0 && q->spec.ranks_per_node < q->world_size)) {
        struct err e;
        if (cuda)
            err_set(&e, ERR_CONFLICT, "nodes",
                    "device cuda runs stay on one node for now: NCCL across ddpbench nodes is "
                    "not built");
        else
            err_set(&e, ERR_CONFLICT, "launcher",
                    "launcher \"%s\" starts ranks on this node only (ddpbenchd has no "
                    "--mpi-agent)",
                    q->spec.launcher);
        sched_fail_unplaceable(s, q, &e);
        return -1;
    }
    int room[CLUSTER_MAX_NODES];
    for (int i = 0; i < p->ncand; i++)
        room[i] = p->cand[i].free_slots;
    p->nnodes = cluster_place(q->world_size, per, sched_want_nodes(q), q->spec.ranks_per_node,
                              room, p->ncand, p->count);
    if (p->nnodes == 0)
        return 0;
    free(p->rank_node);
    p->rank_node = calloc((size_t)q->world_size, sizeof *p->rank_node);
    if (!p->rank_node)
        return 0;
    int r = 0;
    p->max_per_node = 0;
    for (int i = 0; i < p->ncand; i++) { /* this node's block first: node rank 0 */
        for (int j = 0; j < p->count[i]; j++)
            p->rank_node[r++] = p->cand[i].id;
        if (p->count[i] > p->max_per_node)
            p->max_per_node = p->count[i];
    }
    return 1;
}

/* The followers' slots of the placement, reserved: an owned (id, slots) pair list. */
static int *sched_take_remote(struct scheduler *s, int per, int *nremote)
{
    const struct sched_place *p = &s->place;
    int *pairs = calloc(2 * (size_t)p->ncand, sizeof *pairs), k = 0;
    for (int i = 1; pairs && i < p->ncand; i++)
        if (p->count[i] > 0) {
            pairs[2 * k] = p->cand[i].id;
            pairs[2 * k + 1] = p->count[i] * per;
            cluster_reserve(s->cluster, pairs[2 * k], pairs[2 * k + 1]);
            k++;
        }
    *nremote = k;
    return pairs;
}

/* Starts the head of the queue while it fits. */
static void sched_start_queued(struct scheduler *s)
{
    for (;;) {
        struct db_queued_run *q = NULL;
        size_t n = 0;
        struct err e = {0};
        if (db_list_queued(s->db, 1, &q, &n, &e) < 0) {
            log_error("scheduler: %s", e.msg);
            return;
        }
        if (n == 0 || sched_wait_alone(s, q)) {
            db_queued_runs_free(q, n);
            return;
        }
        /* a GPU run takes its GPUs as well as a CPU slot per rank (its host thread) */
        bool cuda = false;
        struct gpu_plan *plan = &s->plan;
        int placed = sched_plan_gpus(s, q, &cuda, plan);
        if (placed < 0) {
            db_queued_runs_free(q, n);
            continue;
        }
        int where = placed > 0 ? sched_place(s, q, cuda) : 0;
        if (where < 0) {
            db_queued_runs_free(q, n);
            continue;
        }
        int per = monitor_slots_per_rank(q);
        int need = s->place.count[0] * per; /* this node's share; ranks 0.. are its */
        int *slots = calloc((size_t)need + 1, sizeof *slots);
        int *cpus = calloc((size_t)(q->world_size * per), sizeof *cpus);
        bool pinned = false;
        if (placed == 0 || where == 0 || !slots || !cpus ||
            !sched_take_slots(s, need, slots, &pinned)) {
            free(slots);
            free(cpus);
            db_queued_runs_free(q, n);
            return; /* strict FIFO: the head waits for slots */
        }
        for (int i = 0; i < q->world_size * per; i++) /* -1: unpinned (or elsewhere) */
            cpus[i] = pinned && i < need ? s->slot_cpu[slots[i]] : -1;
        int nremote = 0, *remote = sched_take_remote(s, per, &nremote);
        int ngpus = 0, *gpus = cuda ? sched_take_gpus(s, plan, &ngpus) : NULL;
        struct monitor_gpu mg = {plan, DDPB_NCCL_VERSION_CODE};
        struct active_run *run = NULL;
        if (cuda && !gpus)
            err_set(&e, ERR_NOMEM, NULL, "out of memory");
        else
            run = monitor_start_run(&s->mctx, q, cpus, cuda ? &mg : NULL, s->place.rank_node,
                                    &e);
        free(cpus);
        if (!run && e.code == ERR_CONFLICT) { /* cancelled between listing and starting */
            sched_release(s, slots, need, gpus, ngpus);
            sched_release_remote(s, remote, nremote);
            db_queued_runs_free(q, n);
            continue;
        }
        if (run) {
            struct err pe = {0};
            if (db_run_placement(s->db, q->id, s->place.nnodes, s->place.max_per_node, &pe) < 0)
                log_warn("run %lld: cannot store its placement: %s", (long long)q->id, pe.msg);
        }
        bool added = run &&
                     sched_add_active(s, run, slots, need, gpus, ngpus, remote, nremote) == 0;
        if (added)
            s->active[s->nactive - 1].alone = q->spec.train.calibrate;
        if (!added) {
            log_error("scheduler: cannot start run %lld: %s", (long long)q->id,
                      run ? "out of memory" : e.msg);
            sched_release(s, slots, need, gpus, ngpus);
            sched_release_remote(s, remote, nremote);
            if (run) {
                monitor_stop_run(run, DB_RUN_FAILED, -1, "ddpbenchd ran out of memory");
                monitor_free_run(run);
            }
            db_queued_runs_free(q, n);
            return;
        }
        char warn[400];
        if (cuda && gpu_slots_warning(plan, DDPB_NCCL_VERSION_CODE, warn, sizeof warn))
            log_warn("run %lld: %s", (long long)q->id, warn);
        db_queued_runs_free(q, n);
        sched_mark_oversubscribed(s);
        sched_publish_stats(s);
    }
}

/* Frees finished runs and their slots; true when any finished. */
static bool sched_reap_finished(struct scheduler *s)
{
    bool any = false;
    int64_t now = clock_mono_ms();
    for (int i = 0; i < s->nactive;) {
        struct sched_active *a = &s->active[i];
        monitor_tick(a->run, now);
        if (!monitor_run_finished(a->run)) {
            i++;
            continue;
        }
        sched_release(s, a->slots, a->n, a->gpus, a->ngpus);
        sched_release_remote(s, a->remote, a->nremote);
        monitor_free_run(a->run);
        s->active[i] = s->active[--s->nactive];
        any = true;
    }
    if (any)
        sched_publish_stats(s);
    return any;
}

/* Loop thread: stops the active runs a cancel request names. */
static void sched_apply_cancel(void *arg)
{
    struct sched_cancel *c = arg;
    struct scheduler *s = c->s;
    for (size_t k = 0; k < c->n; k++)
        for (int i = 0; i < s->nactive; i++)
            if (monitor_run_id(s->active[i].run) == c->ids[k]) {
                log_info("run %lld: cancel requested", (long long)c->ids[k]);
                monitor_stop_run(s->active[i].run, DB_RUN_CANCELLED, -1,
                                 "cancelled by request");
            }
    s->scan_now = true;
    free(c);
}

int scheduler_cancel_runs(struct scheduler *s, const int64_t *ids, size_t n, struct err *e)
{
    struct sched_cancel *c = malloc(sizeof *c + n * sizeof *ids);
    if (!c)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    c->s = s;
    c->n = n;
    if (n)
        memcpy(c->ids, ids, n * sizeof *ids);
    if (loop_post(s->loop, &c->call, sched_apply_cancel, c, e) < 0) {
        free(c); /* refused: still ours */
        return -1;
    }
    return 0;
}

/* Only bounds the loop's sleep: the iteration hook ticks the monitors. */
static void sched_on_tick(void *arg)
{
    struct scheduler *s = arg;
    loop_timer_start(s->loop, &s->tick, clock_mono_ms() + SCHED_TICK_MS, sched_on_tick, s);
}

static void sched_on_poll(void *arg)
{
    struct scheduler *s = arg;
    s->scan_now = true;
}

static void sched_on_keepalive(void *arg)
{
    struct scheduler *s = arg;
    events_heartbeat(s->mctx.events);
    loop_timer_start(s->loop, &s->keepalive, clock_mono_ms() + SCHED_KEEPALIVE_MS,
                     sched_on_keepalive, s);
}

/* Posted by scheduler_destroy: the hook stops the runs, then the loop. */
static void sched_begin_stop(void *arg)
{
    struct scheduler *s = arg;
    s->stopping = true;
}

static struct active_run *sched_find_active(struct scheduler *s, int64_t id)
{
    for (int i = 0; i < s->nactive; i++)
        if (monitor_run_id(s->active[i].run) == id)
            return s->active[i].run;
    return NULL;
}

/* What followers said since the last iteration goes to the runs it is about (a run that
 * already ended hears nothing), and runs with ranks on a node that is gone fail. */
static void sched_cluster_events(struct scheduler *s)
{
    json_t *evs = cluster_take_events(s->cluster);
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        struct active_run *run = sched_find_active(
            s, json_integer_value(json_object_get(ev, "run")));
        if (run)
            monitor_remote_event(run, (int)json_integer_value(json_object_get(ev, "node")),
                                 (int)json_integer_value(json_object_get(ev, "rank")), ev);
    }
    json_decref(evs);
    int ids[16];
    char why[16][160];
    int n = cluster_take_lost(s->cluster, clock_mono_ms(), ids, why, 16);
    for (int k = 0; k < n; k++)
        for (int j = 0; j < s->nactive; j++)
            monitor_node_lost(s->active[j].run, ids[k], why[k]);
    if (n > 0)
        s->scan_now = true; /* the lost node's slots are no longer offered */
}

/* After every iteration: reap finished runs, start queued ones, or wind down. */
static void sched_after_iteration(void *arg)
{
    struct scheduler *s = arg;
    bool scan = s->scan_now | atomic_exchange(&s->wake_pending, false);
    s->scan_now = false;
    sched_cluster_events(s);
    scan |= sched_reap_finished(s);
    if (s->stopping) {
        if (!s->stopping_runs)
            for (int i = 0; i < s->nactive; i++) {
                monitor_stop_run(s->active[i].run, s->stop_status, -1, s->stop_why);
                monitor_forget_remote(s->active[i].run);
            }
        s->stopping_runs = true;
        if (s->nactive == 0)
            loop_stop(s->loop);
        return;
    }
    if (scan) {
        sched_start_queued(s);
        loop_timer_start(s->loop, &s->poll, clock_mono_ms() + SCHED_POLL_MS, sched_on_poll, s);
    }
}

/* The loop with its timers, not started yet. */
static int sched_open_loop(struct scheduler *s, struct err *e)
{
    s->loop = loop_create("ddpb-sched", e);
    if (!s->loop)
        return -1;
    int64_t now = clock_mono_ms();
    if (loop_timer_start(s->loop, &s->poll, now, sched_on_poll, s) < 0 ||
        loop_timer_start(s->loop, &s->tick, now + SCHED_TICK_MS, sched_on_tick, s) < 0 ||
        loop_timer_start(s->loop, &s->keepalive, now + SCHED_KEEPALIVE_MS, sched_on_keepalive,
                         s) < 0)
        return err_set(e, ERR_NOMEM, NULL, "out of memory");
    return 0;
}

static void sched_wake_cb(void *ctx)
{
    scheduler_wake(ctx);
}

struct scheduler *scheduler_create(const struct config *cfg, struct db *db,
                                   struct store_server *store, struct events *events,
                                   struct cluster *cluster, struct err *e)
{
    struct scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->db = db;
    s->cluster = cluster;
    s->stop_status = DB_RUN_INTERRUPTED;
    snprintf(s->stop_why, sizeof s->stop_why, "ddpbenchd shut down while the run was active");
    pthread_mutex_init(&s->lock, NULL);
    s->nslots = cfg->cpu_slots;
    s->slot_used = calloc((size_t)s->nslots, sizeof *s->slot_used);
    s->slot_cpu = calloc((size_t)s->nslots, sizeof *s->slot_cpu);
    s->cpu_load = calloc((size_t)s->nslots, sizeof *s->cpu_load); /* ncpus <= nslots used */
    if (!s->slot_used || !s->slot_cpu || !s->cpu_load) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        goto fail;
    }
    if (sched_init_slot_cpus(s) < 0) {
        err_errno(e, "scheduler: sched_getaffinity");
        goto fail;
    }
    s->ngpus = cfg->gpus > 0 ? cfg->gpus : 0;
    s->gpu_used = calloc((size_t)s->ngpus + 1, sizeof *s->gpu_used);
    if (!s->gpu_used) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        goto fail;
    }
    if (sched_open_loop(s, e) < 0)
        goto fail;
    s->mctx = (struct monitor_ctx){.db = db,
                                   .store = store,
                                   .events = events,
                                   .cfg = cfg,
                                   .loop = s->loop,
                                   .cluster = cluster};
    cluster_set_wake(cluster, sched_wake_cb, s);
    sched_publish_stats(s);
    if (loop_start(s->loop, sched_after_iteration, s, e) < 0)
        goto fail;
    return s;
fail:
    scheduler_destroy(s);
    return NULL;
}

void scheduler_set_stop_status(struct scheduler *s, enum db_run_status status, const char *why)
{
    s->stop_status = status;
    snprintf(s->stop_why, sizeof s->stop_why, "%s", why);
}

void scheduler_destroy(struct scheduler *s)
{
    if (!s)
        return;
    /* Refused when the loop never started: then there is nothing to wind down. */
    if (s->loop && loop_post(s->loop, &s->stop_call, sched_begin_stop, s, NULL) == 0)
        loop_wait(s->loop); /* until the active runs ended and the hook stopped it */
    loop_destroy(s->loop);  /* forgets our timers and watch, which die with s */
    if (s->cluster)
        cluster_set_wake(s->cluster, NULL, NULL);
    free(s->place.rank_node);
    free(s->active);
    free(s->slot_used);
    free(s->slot_cpu);
    free(s->cpu_load);
    free(s->gpu_used);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void scheduler_wake(struct scheduler *s)
{
    atomic_store(&s->wake_pending, true);
    loop_wake(s->loop);
}

void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
}

int scheduler_slots_total(const struct scheduler *s)
{
    return s->nslots;
}

int scheduler_gpus_total(const struct scheduler *s)
{
    return s->ngpus;
}
