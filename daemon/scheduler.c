/* scheduler: see scheduler.h. */
#include "daemon/scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <jansson.h>

#include "common/clock.h"
#include "ddpb_config.h"
#include "daemon/gpu_slots.h"
#include "common/log.h"
#include "daemon/monitor.h"

#define SCHED_TICK_MS 100
#define SCHED_MAX_EVENTS 64
#define SCHED_KEEPALIVE_MS 15000

struct sched_active {
    struct active_run *run;
    int *slots; /* owned: the slot indices this run holds */
    int n;
    int *gpus;  /* owned: the GPU indices it holds (one when emulated); NULL: none */
    int ngpus;
};

struct scheduler {
    const struct config *cfg;
    struct db *db;
    struct monitor_ctx mctx;
    int epfd, wakefd;
    pthread_t thread;
    bool thread_started;
    _Atomic bool stop;

    /* owned by the thread; stats mirrored under the lock for other threads */
    int nslots;
    bool *slot_used;
    int *slot_cpu; /* CPU a slot pins to, -1 = unpinned */
    int ngpus;     /* GPU slots (cfg->gpus), gpu_used[i] while a run holds GPU i */
    bool *gpu_used;
    struct gpu_plan plan; /* the placement being started (4 KiB: not on the stack) */
    struct sched_active *active;
    int nactive, cap_active;

    pthread_mutex_t lock;
    struct scheduler_stats stats;
    int64_t *cancel_ids; /* under lock: runs to cancel, taken by the loop */
    size_t ncancel, cap_cancel;
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

/* Slot i pins to the i-th CPU of the daemon's affinity set when there are enough. */
static void sched_init_slot_cpus(struct scheduler *s)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    bool pin = n >= s->nslots;
    for (int i = 0; i < s->nslots; i++)
        s->slot_cpu[i] = pin ? cpus[i] : -1;
    if (!pin)
        log_warn("%d CPU slots but %d CPUs: ranks will not be pinned (oversubscribed timings "
                 "are not comparable)", s->nslots, n);
}

/* Takes n free slots (lowest first) into out; false when fewer are free. */
static bool sched_take_slots(struct scheduler *s, int n, int *out)
{
    int k = 0;
    for (int i = 0; i < s->nslots && k < n; i++)
        if (!s->slot_used[i])
            out[k++] = i;
    if (k < n)
        return false;
    for (int i = 0; i < n; i++)
        s->slot_used[out[i]] = true;
    return true;
}

static int sched_add_active(struct scheduler *s, struct active_run *run, int *slots, int n,
                            int *gpus, int ngpus)
{
    if (s->nactive == s->cap_active) {
        int cap = s->cap_active ? 2 * s->cap_active : 8;
        struct sched_active *a = realloc(s->active, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        s->active = a;
        s->cap_active = cap;
    }
    s->active[s->nactive++] = (struct sched_active){run, slots, n, gpus, ngpus};
    return 0;
}

/* A device "cuda" run's GPU needs from its spec: false for CPU runs. */
static bool sched_wants_gpu(const struct db_queued_run *q, bool *emulate)
{
    json_t *spec = json_loads(q->spec_json ? q->spec_json : "", 0, NULL);
    const char *device = json_string_value(json_object_get(spec, "device"));
    bool cuda = device && strcmp(device, "cuda") == 0;
    *emulate = json_is_true(json_object_get(spec, "emulate_multi_rank"));
    json_decref(spec);
    return cuda;
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
    int rc = gpu_slots_plan(s->ngpus, s->gpu_used, q->world_size, emulate, plan, &e);
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

static void sched_release(struct scheduler *s, int *slots, int n, int *gpus, int ngpus)
{
    for (int i = 0; i < n; i++)
        s->slot_used[slots[i]] = false;
    for (int i = 0; i < ngpus; i++)
        s->gpu_used[gpus[i]] = false;
    free(slots);
    free(gpus);
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
        if (n == 0) {
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
        int need = q->world_size * monitor_slots_per_rank(q);
        int *slots = calloc((size_t)need, sizeof *slots);
        int *cpus = calloc((size_t)need, sizeof *cpus);
        if (placed == 0 || !slots || !cpus || !sched_take_slots(s, need, slots)) {
            free(slots);
            free(cpus);
            db_queued_runs_free(q, n);
            return; /* strict FIFO: the head waits for slots */
        }
        for (int i = 0; i < need; i++)
            cpus[i] = s->slot_cpu[slots[i]];
        int ngpus = 0, *gpus = cuda ? sched_take_gpus(s, plan, &ngpus) : NULL;
        struct monitor_gpu mg = {plan, DDPB_NCCL_VERSION_CODE};
        struct active_run *run = NULL;
        if (cuda && !gpus)
            err_set(&e, ERR_NOMEM, NULL, "out of memory");
        else
            run = monitor_start_run(&s->mctx, q, cpus, cuda ? &mg : NULL, &e);
        free(cpus);
        if (!run && e.code == ERR_CONFLICT) { /* cancelled between listing and starting */
            sched_release(s, slots, need, gpus, ngpus);
            db_queued_runs_free(q, n);
            continue;
        }
        if (!run || sched_add_active(s, run, slots, need, gpus, ngpus) < 0) {
            log_error("scheduler: cannot start run %lld: %s", (long long)q->id,
                      run ? "out of memory" : e.msg);
            sched_release(s, slots, need, gpus, ngpus);
            if (run) {
                monitor_stop_run(run, DB_RUN_FAILED, -1, "ddpbenchd ran out of memory");
                monitor_free_run(run);
            }
            db_queued_runs_free(q, n);
            return;
        }
        db_queued_runs_free(q, n);
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
        monitor_free_run(a->run);
        s->active[i] = s->active[--s->nactive];
        any = true;
    }
    if (any)
        sched_publish_stats(s);
    return any;
}

/* Takes the pending cancel requests and stops those runs. */
static void sched_apply_cancels(struct scheduler *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t *ids = s->cancel_ids;
    size_t n = s->ncancel;
    s->cancel_ids = NULL;
    s->ncancel = s->cap_cancel = 0;
    pthread_mutex_unlock(&s->lock);
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < s->nactive; i++)
            if (monitor_run_id(s->active[i].run) == ids[k]) {
                log_info("run %lld: cancel requested", (long long)ids[k]);
                monitor_stop_run(s->active[i].run, DB_RUN_CANCELLED, -1, "cancelled by request");
            }
    free(ids);
}

int scheduler_cancel_runs(struct scheduler *s, const int64_t *ids, size_t n, struct err *e)
{
    pthread_mutex_lock(&s->lock);
    if (s->ncancel + n > s->cap_cancel) {
        size_t cap = s->cap_cancel ? s->cap_cancel : 16;
        while (cap < s->ncancel + n)
            cap *= 2;
        int64_t *grown = realloc(s->cancel_ids, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&s->lock);
            return err_set(e, ERR_NOMEM, NULL, "out of memory");
        }
        s->cancel_ids = grown;
        s->cap_cancel = cap;
    }
    memcpy(s->cancel_ids + s->ncancel, ids, n * sizeof *ids);
    s->ncancel += n;
    pthread_mutex_unlock(&s->lock);
    scheduler_wake(s);
    return 0;
}

static void sched_drain_wakefd(struct scheduler *s)
{
    uint64_t v;
    while (read(s->wakefd, &v, sizeof v) == sizeof v)
        ;
}

static void *sched_main(void *arg)
{
    struct scheduler *s = arg;
    struct epoll_event ev[SCHED_MAX_EVENTS];
    bool stopping_runs = false;
    int64_t next_scan = 0, next_keepalive = clock_mono_ms() + SCHED_KEEPALIVE_MS;
    for (;;) {
        int n = epoll_wait(s->epfd, ev, SCHED_MAX_EVENTS, SCHED_TICK_MS);
        if (n < 0 && errno != EINTR) {
            log_error("scheduler: epoll_wait: %s", strerror(errno));
            usleep(SCHED_TICK_MS * 1000);
        }
        bool scan = false;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == NULL) {
                sched_drain_wakefd(s);
                sched_apply_cancels(s);
                scan = true;
            } else {
                monitor_handle_event(ev[i].data.ptr, ev[i].events);
            }
        }
        /* finished runs are freed only after the whole batch: later events of the batch
         * may still point at them */
        scan |= sched_reap_finished(s);
        bool stop = atomic_load(&s->stop);
        if (stop && !stopping_runs) {
            for (int i = 0; i < s->nactive; i++)
                monitor_stop_run(s->active[i].run, DB_RUN_INTERRUPTED, -1,
                                 "ddpbenchd shut down while the run was active");
            stopping_runs = true;
        }
        if (stop && s->nactive == 0)
            break;
        int64_t now = clock_mono_ms();
        if (now >= next_keepalive) {
            events_heartbeat(s->mctx.events);
            next_keepalive = now + SCHED_KEEPALIVE_MS;
        }
        if (!stop && (scan || now >= next_scan)) {
            sched_start_queued(s);
            next_scan = now + 1000; /* also poll: the database is the queue */
        }
    }
    return NULL;
}

struct scheduler *scheduler_create(const struct config *cfg, struct db *db,
                                   struct store_server *store, struct events *events,
                                   struct err *e)
{
    struct scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->db = db;
    s->epfd = s->wakefd = -1;
    pthread_mutex_init(&s->lock, NULL);
    s->nslots = cfg->cpu_slots;
    s->slot_used = calloc((size_t)s->nslots, sizeof *s->slot_used);
    s->slot_cpu = calloc((size_t)s->nslots, sizeof *s->slot_cpu);
    if (!s->slot_used || !s->slot_cpu) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        goto fail;
    }
    sched_init_slot_cpus(s);
    s->ngpus = cfg->gpus > 0 ? cfg->gpus : 0;
    s->gpu_used = calloc((size_t)s->ngpus + 1, sizeof *s->gpu_used);
    if (!s->gpu_used) {
        err_set(e, ERR_NOMEM, NULL, "out of memory");
        goto fail;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->epfd < 0 || s->wakefd < 0) {
        err_errno(e, "scheduler: epoll/eventfd");
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wakefd, &ev) < 0) {
        err_errno(e, "scheduler: epoll_ctl");
        goto fail;
    }
    s->mctx = (struct monitor_ctx){
        .db = db, .store = store, .events = events, .cfg = cfg, .epfd = s->epfd};
    sched_publish_stats(s);
    int rc = pthread_create(&s->thread, NULL, sched_main, s);
    if (rc != 0) {
        errno = rc;
        err_errno(e, "scheduler: pthread_create");
        goto fail;
    }
    s->thread_started = true;
    return s;
fail:
    scheduler_destroy(s);
    return NULL;
}

void scheduler_destroy(struct scheduler *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        atomic_store(&s->stop, true);
        scheduler_wake(s);
        pthread_join(s->thread, NULL);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wakefd >= 0)
        close(s->wakefd);
    free(s->active);
    free(s->cancel_ids);
    free(s->slot_used);
    free(s->slot_cpu);
    free(s->gpu_used);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void scheduler_wake(struct scheduler *s)
{
    uint64_t one = 1;
    ssize_t w = write(s->wakefd, &one, sizeof one);
    (void)w;
}

void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
}

int scheduler_slots_total(const struct scheduler *s) { return s->nslots; }

int scheduler_gpus_total(const struct scheduler *s) { return s->ngpus; }
