/* loader: sharding, per-epoch reshuffling, batching and the filling threads over a dataset
 * (rules in loader.h).
 *
 * Decision: batch number s always goes into ring slot s % nslots and is produced by one
 * function (loader_produce) whether a worker thread or loader_next calls it, so the
 * prefetch, multi-worker and synchronous paths cannot differ. The ring is counters under
 * one mutex: a worker may fill batch s once the caller has released batch s - nslots (a
 * batch is released when the caller asks for the next one), and the caller may take batch
 * s once its slot says it holds s. With N workers, worker w fills s = w, w + N, w + 2N, ...
 * in that order; the caller is the only consumer and takes batches in order of s.
 *
 * Why it cannot deadlock, whatever nslots >= 1: the caller waits only for batch
 * c = consumed, and then released = c, so c < released + nslots and c's slot is free. c's
 * worker (c % N) fills its batches in order and every earlier one of them is < c, so
 * already produced (the caller took it): that worker is filling c or has filled it, never
 * waiting. Workers waiting for later batches hold no slot and no lock. The ring size is
 * for throughput, not liveness: nslots = max(prefetch, N) + 1 lets the caller hold one
 * batch while max(prefetch, N) >= N others are filled, so all N workers can be busy. */
#include "worker/data/loader.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

#define LOADER_MAX_BATCH (1 << 20)
#define LOADER_MAX_WORLD (1 << 20)
#define LOADER_MAX_SLOTS                                                                       \
    ((LOADER_MAX_PREFETCH > LOADER_MAX_WORKERS ? LOADER_MAX_PREFETCH : LOADER_MAX_WORKERS) + 1)

struct loader_slot {
    float *x;       /* owned, batch_size samples */
    int32_t *y;     /* owned, batch_size * dataset_label_len labels */
    int64_t *index; /* owned */
    struct data_batch b;
    int64_t seq; /* the batch b holds once filled, -1 none yet (guarded by mu) */
};

/* One filling thread: its batches are s % nworkers == id. */
struct loader_worker {
    struct loader *l;
    int id;
    pthread_t thread;
    bool started;
    /* Used only by this worker (or loader_next without threads, worker 0). */
    int64_t *perm; /* owned; NULL when shuffle is off */
    int64_t perm_epoch;
};

struct loader {
    struct dataset *ds; /* borrowed */
    struct loader_config cfg;
    int64_t shard_len, per_epoch;
    int64_t first_shard, first_len; /* the first epoch's (start_offset: a remainder) */
    int64_t total;                  /* batches in all; -1 = no end */
    int nslots;
    bool threaded;
    int reuse_n; /* samples in the reused batch (ds->reuse_batch) */
    struct loader_slot slots[LOADER_MAX_SLOTS];
    int nworkers; /* 1 without threads */
    struct loader_worker workers[LOADER_MAX_WORKERS];
    pthread_mutex_t mu; /* guards everything below and the slots' seq */
    pthread_cond_t ready, freed;
    int64_t consumed; /* batches [0, consumed) were handed out */
    int64_t released; /* batches [0, released) may be overwritten */
    bool stop;
    int64_t fail_seq; /* the first batch whose fill failed; INT64_MAX none */
    struct err fail_err;
    struct loader_stats stats;
};

void loader_config_default(struct loader_config *cfg)
{
    *cfg = (struct loader_config){.rank = 0,
                                  .world_size = 1,
                                  .batch_size = 32,
                                  .seed = 1,
                                  .shuffle = true,
                                  .remainder = LOADER_DROP,
                                  .epochs = 0,
                                  .prefetch = 2,
                                  .workers = 1};
}

int64_t loader_shard_len(int64_t n, int world_size, int rank, enum loader_remainder rem)
{
    switch (rem) {
    case LOADER_PAD: return (n + world_size - 1) / world_size;
    case LOADER_UNEVEN: return n / world_size + (rank < n % world_size ? 1 : 0);
    case LOADER_DROP: break;
    }
    return n / world_size;
}

int64_t loader_batches_per_epoch(const struct loader *l)
{
    return l->per_epoch;
}

int64_t loader_batches_total(const struct loader *l)
{
    return l->total;
}

/* Where batch seq falls: its epoch, its number in the epoch, its size and whether it is
 * the epoch's last. The first epoch (start_epoch) may be a resumed remainder. */
static void loader_plan(const struct loader *l, int64_t seq, int64_t *epoch, int64_t *bie,
                        int *n, bool *last)
{
    int64_t shard = l->first_shard, per = l->first_len;
    *epoch = l->cfg.start_epoch;
    *bie = seq;
    if (seq >= l->first_len) {
        *epoch += 1 + (seq - l->first_len) / l->per_epoch;
        *bie = (seq - l->first_len) % l->per_epoch;
        shard = l->shard_len, per = l->per_epoch;
    }
    int64_t start = *bie * l->cfg.batch_size, left = shard - start;
    *n = left < l->cfg.batch_size ? (int)left : l->cfg.batch_size;
    *last = *bie == per - 1;
}

/* The dataset indices of this rank's batch: strided positions of the epoch's order (w's
 * copy of it: each worker keeps its own, so none waits for another's epoch). */
static void loader_indices(struct loader *l, struct loader_worker *w, int64_t epoch,
                           int64_t bie, int n, int64_t *index)
{
    const struct loader_config *c = &l->cfg;
    int64_t nsamples = l->ds->n;
    if (w->perm && w->perm_epoch != epoch) {
        data_permutation(c->seed, epoch, nsamples, w->perm);
        w->perm_epoch = epoch;
    }
    int64_t base = epoch == c->start_epoch ? c->start_offset : 0; /* a resumed remainder */
    for (int k = 0; k < n; k++) {
        int64_t pos = base + c->rank + (bie * c->batch_size + k) * (int64_t)c->world_size;
        if (c->remainder == LOADER_PAD)
            pos %= nsamples;
        index[k] = w->perm ? w->perm[pos] : pos;
    }
}

/* CPU time of the calling thread. */
static int64_t loader_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Fills batch seq into its slot (not its seq: the caller marks it, under mu). *fill_ns
 * and *cpu_ns get the time and CPU time it took. */
static int loader_produce(struct loader *l, struct loader_worker *w, int64_t seq,
                          int64_t *fill_ns, int64_t *cpu_ns, struct err *e)
{
    struct loader_slot *s = &l->slots[seq % l->nslots];
    int64_t epoch, bie;
    int n;
    bool last;
    loader_plan(l, seq, &epoch, &bie, &n, &last);
    int64_t t0 = clock_mono_ns(), c0 = loader_cpu_ns();
    loader_indices(l, w, epoch, bie, n, s->index);
    struct data_draw draw = {.seed = l->cfg.seed, .epoch = epoch, .step = seq};
    int rc = dataset_fill(l->ds, s->index, n, &draw, s->x, s->y, e);
    *cpu_ns = loader_cpu_ns() - c0;
    *fill_ns = clock_mono_ns() - t0;
    if (rc < 0)
        err_prefix(e, "data loader, batch %lld (epoch %lld)", (long long)seq, (long long)epoch);
    s->b = (struct data_batch){.x = s->x,
                               .y = s->y,
                               .index = s->index,
                               .n = n,
                               .step = seq,
                               .epoch = epoch,
                               .batch_in_epoch = bie,
                               .last_in_epoch = last};
    return rc;
}

/* A worker: its batches in order, each once its slot is released; it stops at the end, on
 * stop, or past the first failed batch (later batches are never delivered). A failure
 * keeps the smallest failed batch's error, so the caller's error does not depend on which
 * worker got there first. */
static void *loader_worker_main(void *arg)
{
    struct loader_worker *w = arg;
    struct loader *l = w->l;
    pthread_mutex_lock(&l->mu);
    for (int64_t s = w->id; l->total < 0 || s < l->total; s += l->nworkers) {
        while (!l->stop && s < l->fail_seq && s >= l->released + l->nslots)
            pthread_cond_wait(&l->freed, &l->mu);
        if (l->stop || s >= l->fail_seq)
            break;
        pthread_mutex_unlock(&l->mu);
        struct err e;
        err_clear(&e);
        int64_t ns = 0, cpu = 0;
        int rc = loader_produce(l, w, s, &ns, &cpu, &e);
        pthread_mutex_lock(&l->mu);
        l->stats.fill_ns += ns;
        l->stats.fill_cpu_ns += cpu;
        if (rc < 0) {
            if (s < l->fail_seq) {
                l->fail_seq = s;
                l->fail_err = e;
            }
            pthread_cond_signal(&l->ready);
            break;
        }
        l->slots[s % l->nslots].seq = s;
        pthread_cond_signal(&l->ready); /* the caller is the only one waiting on ready */
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static int loader_check(const struct dataset *ds, const struct loader_config *c, struct err *e)
{
    if (c->world_size < 1 || c->world_size > LOADER_MAX_WORLD || c->rank < 0 ||
        c->rank >= c->world_size)
        return err_set(e, ERR_INVALID, "world_size", "rank %d of %d ranks", c->rank,
                       c->world_size);
    if (c->batch_size < 1 || c->batch_size > LOADER_MAX_BATCH)
        return err_set(e, ERR_INVALID, "batch_size", "batch size %d out of [1, %d]",
                       c->batch_size, LOADER_MAX_BATCH);
    if (c->prefetch < 0 || c->prefetch > LOADER_MAX_PREFETCH)
        return err_set(e, ERR_INVALID, "prefetch", "prefetch %d out of [0, %d]", c->prefetch,
                       LOADER_MAX_PREFETCH);
    if (c->workers < 0 || c->workers > LOADER_MAX_WORKERS)
        return err_set(e, ERR_INVALID, "dataset.workers", "%d workers out of [1, %d]",
                       c->workers, LOADER_MAX_WORKERS);
    if (c->workers > 1 && c->prefetch == 0)
        return err_set(e, ERR_INVALID, "dataset.workers",
                       "%d workers need prefetch >= 1 (prefetch 0 fills each batch inside the "
                       "step, on the caller's thread)",
                       c->workers);
    if (c->epochs < 0)
        return err_set(e, ERR_INVALID, "epochs", "%lld epochs", (long long)c->epochs);
    if (c->start_epoch < 0 || (c->epochs > 0 && c->start_epoch >= c->epochs) ||
        c->start_offset < 0 || c->start_offset > ds->n)
        return err_set(e, ERR_INVALID, "start_epoch",
                       "resume at epoch %lld, sample %lld: outside %lld epochs of %lld",
                       (long long)c->start_epoch, (long long)c->start_offset,
                       (long long)c->epochs, (long long)ds->n);
    if (c->remainder != LOADER_DROP && c->remainder != LOADER_PAD &&
        c->remainder != LOADER_UNEVEN)
        return err_set(e, ERR_INVALID, "remainder", "unknown remainder rule %d",
                       (int)c->remainder);
    if (ds->n < 1)
        return err_set(e, ERR_INVALID, "dataset", "%s: empty dataset", ds->name);
    return 0;
}

/* Batches per epoch and in all; a config that yields none is an error, except a rank left
 * without samples by LOADER_UNEVEN over a finite number of epochs. */
static int loader_count(struct loader *l, struct err *e)
{
    const struct loader_config *c = &l->cfg;
    l->shard_len = loader_shard_len(l->ds->n, c->world_size, c->rank, c->remainder);
    l->per_epoch = c->drop_last_batch ? l->shard_len / c->batch_size
                                      : (l->shard_len + c->batch_size - 1) / c->batch_size;
    if (l->per_epoch == 0 && (c->epochs == 0 || c->remainder != LOADER_UNEVEN))
        return err_set(e, ERR_INVALID, "batch_size",
                       "%s: rank %d's share of %lld of %lld "
                       "samples over %d ranks gives no batch of %d",
                       l->ds->name, c->rank, (long long)l->shard_len, (long long)l->ds->n,
                       c->world_size, c->batch_size);
    l->first_shard = loader_shard_len(l->ds->n - c->start_offset, c->world_size, c->rank,
                                      c->remainder);
    l->first_len = c->drop_last_batch ? l->first_shard / c->batch_size
                                      : (l->first_shard + c->batch_size - 1) / c->batch_size;
    l->total = c->epochs == 0 ? -1
                              : l->first_len + (c->epochs - 1 - c->start_epoch) * l->per_epoch;
    if (l->per_epoch == 0)
        l->per_epoch = 1; /* no batch is ever planned; keeps the division defined */
    return 0;
}

/* The ring's buffers, owned by l (freed in loader_destroy, even after a partial failure). */
static int loader_alloc(struct loader *l, struct err *e)
{
    size_t b = (size_t)l->cfg.batch_size, per = dataset_sample_floats(l->ds);
    size_t labels = (size_t)dataset_label_len(l->ds);
    for (int i = 0; i < l->nslots; i++) {
        struct loader_slot *s = &l->slots[i];
        s->x = malloc(b * per * sizeof *s->x);
        s->y = malloc(b * labels * sizeof *s->y);
        s->index = malloc(b * sizeof *s->index);
        if (!s->x || !s->y || !s->index)
            return err_set(e, ERR_NOMEM, "batch_size",
                           "%s: out of memory for %d batches of "
                           "%zu x %zu floats",
                           l->ds->name, l->nslots, b, per);
    }
    for (int i = 0; l->cfg.shuffle && i < l->nworkers; i++) {
        struct loader_worker *w = &l->workers[i];
        w->perm = malloc((size_t)l->ds->n * sizeof *w->perm);
        if (!w->perm)
            return err_set(e, ERR_NOMEM, "dataset",
                           "%s: out of memory for a permutation of "
                           "%lld",
                           l->ds->name, (long long)l->ds->n);
    }
    return 0;
}

/* The CPU worker `id` is pinned to: the id-th of the process's allowed CPUs counted from
 * the end (wrapping), so loader threads stay off the CPUs OpenMP's compute threads take
 * first. -1 when the set cannot be read. */
int loader_pin_cpu(int id)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    int n = CPU_COUNT(&set), want = n - 1 - id % n;
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set) && k++ == want)
            return cpu;
    return -1;
}

/* The thread attributes worker w starts with: with dataset.pin, its CPU (set at creation,
 * so not even its first fill runs elsewhere). Returns 0, or -1 with e set; *attr is
 * initialised either way (the caller destroys it). */
static int loader_worker_attr(const struct loader *l, const struct loader_worker *w,
                              pthread_attr_t *attr, struct err *e)
{
    pthread_attr_init(attr);
    if (!l->cfg.pin)
        return 0;
    int cpu = loader_pin_cpu(w->id);
    if (cpu < 0)
        return err_set(e, ERR_UNAVAILABLE, "dataset.pin",
                       "data loader: cannot read the CPU set");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    int rc = pthread_attr_setaffinity_np(attr, sizeof one, &one);
    if (rc != 0)
        return err_set(e, ERR_UNAVAILABLE, "dataset.pin",
                       "data loader: cannot pin worker %d to CPU %d: %s", w->id, cpu,
                       strerror(rc));
    return 0;
}

/* Starts the workers with every signal blocked, so signals reach the caller's threads. */
static int loader_start(struct loader *l, struct err *e)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0, bad = 0;
    for (int i = 0; rc == 0 && bad == 0 && i < l->nworkers; i++) {
        struct loader_worker *w = &l->workers[i];
        pthread_attr_t attr;
        bad = loader_worker_attr(l, w, &attr, e);
        if (bad == 0)
            rc = pthread_create(&w->thread, &attr, loader_worker_main, w);
        pthread_attr_destroy(&attr);
        w->started = bad == 0 && rc == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (bad < 0) /* the ones started are stopped and joined by loader_destroy */
        return -1;
    if (rc != 0)
        return err_set(e, ERR_UNAVAILABLE, "", "data loader: cannot start its threads: %s",
                       strerror(rc));
    return 0;
}

int loader_create(struct dataset *ds, const struct loader_config *cfg, struct loader **out,
                  struct err *e)
{
    *out = NULL;
    if (loader_check(ds, cfg, e) < 0)
        return -1;
    struct loader *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(e, ERR_NOMEM, "", "data loader: out of memory");
    l->ds = ds;
    l->cfg = *cfg;
    l->fail_seq = INT64_MAX;
    /* A reused batch needs no thread: there is nothing to fill after the first. */
    l->threaded = cfg->prefetch > 0 && !ds->reuse_batch;
    l->nworkers = l->threaded && cfg->workers > 1 ? cfg->workers : 1;
    /* The caller holds one slot; the others let every worker fill one batch at a time and
     * the ring run prefetch batches ahead (why any size is deadlock-free: the top). */
    int ahead = cfg->prefetch > l->nworkers ? cfg->prefetch : l->nworkers;
    l->nslots = l->threaded ? ahead + 1 : 1;
    for (int i = 0; i < l->nslots; i++)
        l->slots[i].seq = -1;
    for (int i = 0; i < l->nworkers; i++)
        l->workers[i] = (struct loader_worker){.l = l, .id = i, .perm_epoch = -1};
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->ready, NULL);
    pthread_cond_init(&l->freed, NULL);
    if (loader_count(l, e) < 0 || loader_alloc(l, e) < 0 ||
        (l->threaded && loader_start(l, e) < 0)) {
        loader_destroy(l);
        return -1;
    }
    *out = l;
    return 0;
}

void loader_destroy(struct loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->freed);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        if (l->workers[i].started)
            pthread_join(l->workers[i].thread, NULL);
    for (int i = 0; i < l->nslots; i++) {
        free(l->slots[i].x);
        free(l->slots[i].y);
        free(l->slots[i].index);
    }
    for (int i = 0; i < l->nworkers; i++)
        free(l->workers[i].perm);
    pthread_cond_destroy(&l->ready);
    pthread_cond_destroy(&l->freed);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Without a thread: fill batch `consumed` here, or (reused batch) fill it once and then
 * only renumber it. Called with l->mu held; the fill runs under it, which nothing else
 * contends for. */
static int loader_next_inline(struct loader *l)
{
    struct loader_slot *s = &l->slots[0];
    int64_t seq = l->consumed;
    if (l->ds->reuse_batch && seq > 0) {
        int n;
        loader_plan(l, seq, &s->b.epoch, &s->b.batch_in_epoch, &n, &s->b.last_in_epoch);
        s->b.n = n < l->reuse_n ? n : l->reuse_n;
        s->b.step = seq;
        return 0;
    }
    int64_t ns = 0, cpu = 0;
    int rc = loader_produce(l, &l->workers[0], seq, &ns, &cpu, &l->fail_err);
    l->stats.fill_ns += ns;
    l->stats.fill_cpu_ns += cpu;
    l->reuse_n = s->b.n;
    if (rc < 0)
        l->fail_seq = seq;
    return rc;
}

int loader_next(struct loader *l, const struct data_batch **out, struct err *e)
{
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    int rc = 1;
    int64_t t0 = clock_mono_ns();
    l->released = l->consumed;
    if (l->total >= 0 && l->consumed >= l->total) {
        rc = 0;
    } else if (!l->threaded) {
        rc = l->fail_seq <= l->consumed || loader_next_inline(l) < 0 ? -1 : 1;
    } else {
        /* batches before the first failed one still go out first */
        struct loader_slot *s = &l->slots[l->consumed % l->nslots];
        pthread_cond_broadcast(&l->freed); /* workers wait for different batches */
        while (s->seq != l->consumed && l->consumed < l->fail_seq)
            pthread_cond_wait(&l->ready, &l->mu);
        rc = s->seq == l->consumed ? 1 : -1;
    }
    if (rc == 1) {
        struct data_batch *b = &l->slots[l->consumed % l->nslots].b;
        b->wait_ns = clock_mono_ns() - t0;
        l->stats.batches++;
        l->stats.wait_ns += b->wait_ns;
        l->consumed++;
        *out = b;
    } else if (rc < 0 && e) {
        *e = l->fail_err;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void loader_get_stats(struct loader *l, struct loader_stats *out)
{
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    pthread_mutex_unlock(&l->mu);
}
