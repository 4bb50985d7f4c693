/* Unit tests for worker/data's synthetic dataset and the loader: sharding (disjoint ranks,
 * the union each remainder rule documents, for world sizes that do and do not divide N),
 * per-epoch reshuffling identical across ranks, batching and epoch ends, the prefetch path
 * giving exactly the synchronous path's batches whatever the consumer's timing, fixed and
 * fresh synthetic data, token data (many labels per sample) carried whole through the
 * ring, the measured data wait, shutdown mid-epoch leaving no thread, and a reader error
 * surfacing as an error; and with several workers, the one-thread loader's batches exactly,
 * the first failed batch's error, and shutdown while workers wait or fill.
 *
 * Timing assertions are bounds with wide margins (a slow fill sleeps, so waits have a hard
 * lower bound); nothing depends on how fast the machine is. */
#include <dirent.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/unit/test.h"
#include "worker/data/dataset.h"
#include "worker/data/loader.h"

/* --- a dataset under the test's control ---------------------------------------------- */

struct probe {
    struct dataset ds;
    int sleep_ms;      /* per fill */
    int fail_at;       /* the fill number that fails; -1 never */
    int64_t fail_step; /* fills of this step and later fail; -1 never */
    atomic_int fills;
    atomic_int cpu_of_step[64]; /* the CPU each of the first 64 steps' fills ran on */
};

/* Values encode (index, epoch, step) so that any mix-up shows. */
static int probe_fill(const struct dataset *ds, const int64_t *idx, int n,
                      const struct data_draw *draw, float *x, int32_t *y, struct err *e)
{
    struct probe *p = ds->impl;
    int call = atomic_fetch_add(&p->fills, 1);
    if (draw->step >= 0 && draw->step < 64)
        atomic_store(&p->cpu_of_step[draw->step], sched_getcpu());
    if (p->sleep_ms) {
        struct timespec ts = {p->sleep_ms / 1000, (long)(p->sleep_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    if (call == p->fail_at || (p->fail_step >= 0 && draw->step >= p->fail_step))
        return err_set(e, ERR_IO, "dataset", "probe: disk gone at fill %d", call);
    size_t per = dataset_sample_floats(ds);
    for (int i = 0; i < n; i++) {
        y[i] = (int32_t)(idx[i] % ds->classes);
        for (size_t k = 0; k < per; k++)
            x[(size_t)i * per + k] = (float)idx[i] + 0.25f * (float)k +
                                     1000.0f * (float)draw->epoch + 0.5f * (float)draw->step;
    }
    return 0;
}

static const struct dataset_ops probe_ops = {.fill = probe_fill, .destroy = NULL};

static void probe_init(struct probe *p, int64_t n, int sleep_ms, int fail_at)
{
    memset(p, 0, sizeof *p);
    p->ds = (struct dataset){.ops = &probe_ops,
                             .impl = p,
                             .name = "probe",
                             .n = n,
                             .c = 1,
                             .h = 2,
                             .w = 2,
                             .classes = 7};
    p->sleep_ms = sleep_ms;
    p->fail_at = fail_at;
    p->fail_step = -1;
    atomic_init(&p->fills, 0);
}

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A joined thread can linger in /proc for a moment after pthread_join returns (the kernel
 * reaps it asynchronously): poll for up to 5 s. */
/* TSan starts its background thread lazily, sometimes in the middle of a test: under TSan
 * one thread more than before is its, not a worker's (the other builds count exactly). */
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN_THREADS 1
#else
#define TEST_TSAN_THREADS 0
#endif

static bool threads_back_to(int n)
{
    for (int i = 0; i < 500; i++) {
        int now = thread_count();
        if (now == n || (TEST_TSAN_THREADS && now == n + 1))
            return true;
        usleep(10 * 1000);
    }
    return false;
}

static struct loader_config cfg_of(int rank, int world, int batch, int64_t epochs, int prefetch,
                                   enum loader_remainder rem)
{
    struct loader_config c;
    loader_config_default(&c);
    c.rank = rank;
    c.world_size = world;
    c.batch_size = batch;
    c.epochs = epochs;
    c.prefetch = prefetch;
    c.remainder = rem;
    c.seed = 42;
    return c;
}

/* Collects every index one loader yields (in order) into out; returns the count or -1. */
static int64_t collect(struct dataset *ds, const struct loader_config *c, int64_t *out,
                       int64_t max)
{
    struct err e;
    struct loader *l;
    if (loader_create(ds, c, &l, &e) < 0)
        return -1;
    int64_t n = 0;
    const struct data_batch *b;
    int rc;
    while ((rc = loader_next(l, &b, &e)) == 1)
        for (int i = 0; i < b->n && n < max; i++)
            out[n++] = b->index[i];
    loader_destroy(l);
    return rc == 0 ? n : -1;
}

/* --- sharding ------------------------------------------------------------------------ */

static void test_shard_len(void)
{
    T_EQ_INT(loader_shard_len(10, 3, 0, LOADER_DROP), 3);
    T_EQ_INT(loader_shard_len(10, 3, 2, LOADER_DROP), 3);
    T_EQ_INT(loader_shard_len(10, 3, 2, LOADER_PAD), 4);
    T_EQ_INT(loader_shard_len(10, 3, 0, LOADER_UNEVEN), 4);
    T_EQ_INT(loader_shard_len(10, 3, 1, LOADER_UNEVEN), 3);
    T_EQ_INT(loader_shard_len(12, 4, 3, LOADER_PAD), 3);
    T_EQ_INT(loader_shard_len(2, 5, 4, LOADER_PAD), 1);
    T_EQ_INT(loader_shard_len(2, 5, 4, LOADER_UNEVEN), 0);
    T_EQ_INT(loader_shard_len(60000, 7, 6, LOADER_DROP), 8571);
}

/* One epoch on every rank: each rank's k-th sample must be the epoch order's position
 * r + kW (data_permutation, the same for all ranks), and the union what the rule says. */
static bool shard_epoch_ok(int64_t n, int world, enum loader_remainder rem, int64_t epoch,
                           char *why, size_t whylen)
{
    struct probe p;
    probe_init(&p, n, 0, -1);
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    int64_t *seen = calloc((size_t)n, sizeof *seen);
    data_permutation(42, epoch, n, perm);
    bool ok = true;
    for (int r = 0; ok && r < world; r++) {
        struct loader_config c = cfg_of(r, world, 3, epoch + 1, r % 2 ? 2 : 0, rem);
        int64_t cap = (n / world + 1) * (epoch + 1);
        int64_t *all = malloc((size_t)cap * sizeof *all);
        int64_t got = collect(&p.ds, &c, all, cap);
        int64_t want = loader_shard_len(n, world, r, rem);
        ok = got == want * (epoch + 1);
        if (!ok)
            snprintf(why, whylen, "rank %d got %lld samples, want %lld per epoch", r,
                     (long long)got, (long long)want);
        for (int64_t k = 0; ok && k < want; k++) {
            int64_t pos = r + k * world, v = all[epoch * want + k];
            seen[v]++;
            ok = v == perm[pos % n] && (rem == LOADER_PAD || pos < n);
            if (!ok)
                snprintf(why, whylen, "rank %d position %lld: %lld, permutation says %lld", r,
                         (long long)pos, (long long)v, (long long)perm[pos % n]);
        }
        free(all);
    }
    /* The union: DROP n - n mod W samples, each once; UNEVEN all, each once; PAD all, the
     * ceil(N/W)*W - N padded positions repeating samples (counts differ by at most one). */
    int64_t sum = 0, lo = INT64_MAX, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += seen[i];
        lo = seen[i] < lo ? seen[i] : lo;
        hi = seen[i] > hi ? seen[i] : hi;
    }
    int64_t want_sum = rem == LOADER_DROP  ? n - n % world
                       : rem == LOADER_PAD ? (n + world - 1) / world * world
                                           : n;
    bool shape = rem == LOADER_DROP     ? hi <= 1
                 : rem == LOADER_UNEVEN ? lo == 1 && hi == 1
                                        : lo >= 1 && hi - lo <= 1;
    if (ok && (sum != want_sum || !shape)) {
        ok = false;
        snprintf(why, whylen, "%lld samples in the union (want %lld), seen %lld to %lld times",
                 (long long)sum, (long long)want_sum, (long long)lo, (long long)hi);
    }
    free(perm);
    free(seen);
    return ok;
}

static void test_shard_union_per_rule(void)
{
    static const int64_t sizes[] = {1, 7, 12, 13, 100};
    static const int worlds[] = {1, 2, 3, 4, 5, 8};
    static const enum loader_remainder rules[] = {LOADER_DROP, LOADER_PAD, LOADER_UNEVEN};
    char why[256] = "";
    for (size_t s = 0; s < 5; s++)
        for (size_t w = 0; w < 6; w++)
            for (size_t r = 0; r < 3; r++) {
                int64_t n = sizes[s];
                int world = worlds[w];
                /* a rank without samples: DROP refuses, UNEVEN over one epoch allows */
                if (rules[r] == LOADER_DROP && n < world)
                    continue;
                T_CHECK_MSG(shard_epoch_ok(n, world, rules[r], (int64_t)s % 2, why, sizeof why),
                            "n=%lld world=%d rule=%d: %s", (long long)n, world, (int)rules[r],
                            why);
            }
}

/* Resuming (elastic training): 3 ranks consumed the first k global batches of epoch 1;
 * a world of 2 (and of 4) resumes at that offset. Its ranks' batches of epoch 1 are
 * disjoint and their union is exactly the epoch order's positions from the offset on
 * (less the remainder the new world does not divide); epoch 2 that follows is whole and
 * is what a fresh loader gives for it; the epochs and the last_in_epoch flags are
 * right. */
static bool resume_ok(int64_t n, int64_t off, int world, int batch, char *why, size_t len)
{
    struct probe p;
    probe_init(&p, n, 0, -1);
    int64_t *perm = malloc((size_t)n * sizeof *perm), *seen = calloc((size_t)n, sizeof *seen);
    int64_t per_rank = (n - off) / world, covered = 0;
    bool ok = perm && seen;
    data_permutation(42, 1, n, perm);
    for (int r = 0; ok && r < world; r++) {
        struct loader_config c = cfg_of(r, world, batch, 3, r % 2, LOADER_DROP);
        c.start_epoch = 1;
        c.start_offset = off;
        struct err e;
        struct loader *l = NULL;
        ok = loader_create(&p.ds, &c, &l, &e) == 0;
        const struct data_batch *b;
        int64_t in_first = 0, second = 0, bie = 0;
        while (ok && loader_next(l, &b, &e) == 1) {
            if (b->epoch == 1) {
                for (int i = 0; i < b->n; i++, in_first++)
                    seen[b->index[i]]++;
                ok = b->last_in_epoch == (in_first == per_rank) && b->batch_in_epoch == bie++;
            } else {
                ok = b->epoch == 2;
                second += b->n;
            }
        }
        ok = ok && in_first == per_rank && second == n / world;
        loader_destroy(l);
        if (!ok)
            snprintf(why, len, "rank %d of %d from %lld: %lld then %lld samples", r, world,
                     (long long)off, (long long)in_first, (long long)second);
    }
    for (int64_t pos = 0; ok && pos < n; pos++) {
        bool want = pos >= off && pos < off + per_rank * world;
        covered += seen[perm[pos]];
        if (seen[perm[pos]] != (want ? 1 : 0)) {
            snprintf(why, len, "position %lld (sample %lld) taken %lld times from %lld",
                     (long long)pos, (long long)perm[pos], (long long)seen[perm[pos]],
                     (long long)off);
            ok = false;
        }
    }
    free(perm);
    free(seen);
    return ok && covered == per_rank * world;
}

static void test_resume_at_offset(void)
{
    char why[256] = "";
    /* 3 ranks x batch 4: 12 samples a global batch; offsets 0, 24, 60 of 100 */
    static const int64_t offs[] = {0, 24, 60, 96};
    static const int worlds[] = {2, 4, 3, 1};
    for (size_t o = 0; o < 4; o++)
        for (size_t w = 0; w < 4; w++)
            T_CHECK_MSG(resume_ok(100, offs[o], worlds[w], 4, why, sizeof why), "%s", why);
    /* a fresh loader's epoch 2 is the resumed one's */
    struct probe p;
    probe_init(&p, 50, 0, -1);
    int64_t a[64], b[64];
    struct loader_config fresh = cfg_of(1, 2, 5, 3, 0, LOADER_DROP), resumed = fresh;
    resumed.start_epoch = 2;
    fresh.start_epoch = 2;
    resumed.start_offset = 0;
    T_EQ_INT(collect(&p.ds, &fresh, a, 64), 25);
    T_EQ_INT(collect(&p.ds, &resumed, b, 64), 25);
    T_CHECK(memcmp(a, b, 25 * sizeof a[0]) == 0);
    /* refused: an offset past the set, an epoch past the end */
    struct loader *l = NULL;
    struct err e;
    resumed.start_offset = 51;
    T_CHECK(loader_create(&p.ds, &resumed, &l, &e) < 0);
    T_EQ_STR(e.field, "start_epoch");
    resumed.start_offset = 0;
    resumed.start_epoch = 3;
    T_CHECK(loader_create(&p.ds, &resumed, &l, &e) < 0);
}

/* data_permutation's values are a contract: the framework engines' engines/ddpb_data.py
 * ports it, and tests/integration/test_engines.py checks the port against these same
 * values, so a change on either side fails one of the two. */
static void test_permutation_values(void)
{
    static const int64_t want42[] = {2, 9, 7, 8, 3, 1, 6, 5, 4, 0};
    static const int64_t want1[] = {3, 0, 1, 4, 6, 2, 5};
    int64_t p[10];
    data_permutation(42, 3, 10, p);
    for (int i = 0; i < 10; i++)
        T_EQ_INT(p[i], want42[i]);
    data_permutation(1, 0, 7, p);
    for (int i = 0; i < 7; i++)
        T_EQ_INT(p[i], want1[i]);
}

/* Epoch e's order is data_permutation(seed, e): different per epoch, per seed, and the
 * same on every rank (shard_epoch_ok checks rank by rank against it). */
static void test_reshuffle_per_epoch(void)
{
    struct probe p;
    probe_init(&p, 50, 0, -1);
    struct loader_config c = cfg_of(0, 1, 10, 3, 2, LOADER_DROP);
    int64_t a[150], b[150];
    T_EQ_INT(collect(&p.ds, &c, a, 150), 150);
    T_EQ_INT(collect(&p.ds, &c, b, 150), 150);
    T_CHECK(memcmp(a, b, sizeof a) == 0);
    T_CHECK(memcmp(a, a + 50, 50 * sizeof a[0]) != 0);
    T_CHECK(memcmp(a + 50, a + 100, 50 * sizeof a[0]) != 0);
    c.seed = 43;
    T_EQ_INT(collect(&p.ds, &c, b, 150), 150);
    T_CHECK(memcmp(a, b, 50 * sizeof a[0]) != 0);
    /* shuffle off: the dataset's order each epoch */
    c.shuffle = false;
    T_EQ_INT(collect(&p.ds, &c, b, 150), 150);
    for (int i = 0; i < 150; i++)
        T_EQ_INT(b[i], i % 50);
    char why[256] = "";
    for (int64_t epoch = 0; epoch < 3; epoch++)
        T_CHECK_MSG(shard_epoch_ok(50, 4, LOADER_PAD, epoch, why, sizeof why), "%s", why);
}

static void test_batches_and_epochs(void)
{
    struct err e;
    struct probe p;
    probe_init(&p, 10, 0, -1);
    struct loader_config c = cfg_of(0, 1, 4, 2, 1, LOADER_DROP);
    struct loader *l;
    T_OK(loader_create(&p.ds, &c, &l, &e));
    T_EQ_INT(loader_batches_per_epoch(l), 3);
    static const int sizes[] = {4, 4, 2, 4, 4, 2};
    const struct data_batch *b;
    for (int s = 0; s < 6; s++) {
        T_EQ_INT(loader_next(l, &b, &e), 1);
        T_EQ_INT(b->n, sizes[s]);
        T_EQ_INT(b->step, s);
        T_EQ_INT(b->epoch, s / 3);
        T_EQ_INT(b->batch_in_epoch, s % 3);
        T_EQ_INT(b->last_in_epoch, s % 3 == 2);
        for (int i = 0; i < b->n; i++)
            T_EQ_INT(b->y[i], b->index[i] % 7);
    }
    T_EQ_INT(loader_next(l, &b, &e), 0);
    T_CHECK(b == NULL);
    T_EQ_INT(loader_next(l, &b, &e), 0);
    struct loader_stats st;
    loader_get_stats(l, &st);
    T_EQ_INT(st.batches, 6);
    loader_destroy(l);
    c.drop_last_batch = true;
    T_OK(loader_create(&p.ds, &c, &l, &e));
    T_EQ_INT(loader_batches_per_epoch(l), 2);
    int n = 0;
    while (loader_next(l, &b, &e) == 1)
        n += b->n == 4;
    loader_destroy(l);
    T_EQ_INT(n, 4);
}

static void test_config_errors(void)
{
    struct err e;
    struct probe p;
    probe_init(&p, 10, 0, -1);
    struct loader *l = NULL;
    struct loader_config c = cfg_of(0, 0, 4, 1, 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0 && l == NULL);
    c = cfg_of(3, 3, 4, 1, 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    c = cfg_of(0, 1, 0, 1, 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    T_EQ_STR(e.field, "batch_size");
    c = cfg_of(0, 1, 4, 1, LOADER_MAX_PREFETCH + 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    c = cfg_of(0, 1, 4, -1, 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    /* 10 samples over 11 ranks: DROP leaves rank 0 nothing */
    c = cfg_of(0, 11, 4, 1, 1, LOADER_DROP);
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    T_CHECK_MSG(strstr(e.msg, "gives no batch"), "%s", e.msg);
    /* a shard of 5 and batches of 6 with short batches dropped: nothing, forever */
    c = cfg_of(0, 2, 6, 0, 1, LOADER_DROP);
    c.drop_last_batch = true;
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    /* UNEVEN over a finite run: a rank without samples just ends at once */
    c = cfg_of(10, 11, 4, 1, 2, LOADER_UNEVEN);
    T_OK(loader_create(&p.ds, &c, &l, &e));
    const struct data_batch *b;
    T_EQ_INT(loader_next(l, &b, &e), 0);
    loader_destroy(l);
    c.epochs = 0;
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
}

/* --- prefetch versus synchronous ----------------------------------------------------- */

struct capture {
    float *x;
    int32_t *y; /* batch_size * label_len per batch */
    int64_t *index;
    int64_t *meta; /* n, step, epoch, batch_in_epoch, last per batch */
    int64_t batches;
};

static int capture_run(struct dataset *ds, const struct loader_config *c, int64_t batches,
                       unsigned jitter_seed, struct capture *cap)
{
    struct err e;
    struct loader *l;
    size_t per = dataset_sample_floats(ds), bs = (size_t)c->batch_size;
    size_t lab = (size_t)dataset_label_len(ds);
    cap->x = calloc((size_t)batches * bs * per, sizeof *cap->x);
    cap->y = calloc((size_t)batches * bs * lab, sizeof *cap->y);
    cap->index = calloc((size_t)batches * bs, sizeof *cap->index);
    cap->meta = calloc((size_t)batches * 5, sizeof *cap->meta);
    cap->batches = 0;
    if (loader_create(ds, c, &l, &e) < 0)
        return -1;
    const struct data_batch *b;
    for (int64_t s = 0; s < batches && loader_next(l, &b, &e) == 1; s++) {
        memcpy(cap->x + s * bs * per, b->x, (size_t)b->n * per * sizeof *b->x);
        memcpy(cap->y + s * bs * lab, b->y, (size_t)b->n * lab * sizeof *b->y);
        memcpy(cap->index + s * bs, b->index, (size_t)b->n * sizeof *b->index);
        int64_t m[5] = {b->n, b->step, b->epoch, b->batch_in_epoch, b->last_in_epoch};
        memcpy(cap->meta + s * 5, m, sizeof m);
        cap->batches++;
        if (jitter_seed) { /* a consumer whose compute time varies */
            jitter_seed = jitter_seed * 1103515245u + 12345u;
            usleep((jitter_seed >> 16) % 1500);
        }
        /* the batch must stay untouched until the next call, however long that takes */
        if (memcmp(cap->x + s * bs * per, b->x, (size_t)b->n * per * sizeof *b->x) != 0)
            break;
    }
    loader_destroy(l);
    return 0;
}

/* floats and samples: what the runs' batch slots hold (labels: samples * label_len). */
static bool capture_equal(const struct capture *a, const struct capture *b, size_t floats,
                          size_t samples, size_t label_len)
{
    return a->batches == b->batches && memcmp(a->x, b->x, floats * sizeof *a->x) == 0 &&
           memcmp(a->y, b->y, samples * label_len * sizeof *a->y) == 0 &&
           memcmp(a->index, b->index, samples * sizeof *a->index) == 0 &&
           memcmp(a->meta, b->meta, (size_t)a->batches * 5 * sizeof *a->meta) == 0;
}

static void capture_free(struct capture *c)
{
    free(c->x);
    free(c->y);
    free(c->index);
    free(c->meta);
}

/* Prefetch depths 1, 3 and 16 with a jittery consumer give byte for byte the batches of
 * the synchronous path, over a fresh synthetic set (values per step), fresh synthetic
 * tokens (7 labels per sample) and the probe (values per epoch and step), across epoch
 * ends with short batches. */
static void test_prefetch_matches_sync(void)
{
    struct err e;
    struct probe p;
    probe_init(&p, 37, 0, -1);
    struct data_synthetic_config sc = {
        .c = 3, .h = 5, .w = 4, .classes = 10, .samples = 37, .fresh = true};
    struct data_synthetic_config tc = {
        .c = 1, .h = 1, .w = 7, .classes = 300, .samples = 37, .fresh = true, .tokens = true};
    struct dataset *syn, *tok;
    T_OK(dataset_synthetic_create(&sc, &syn, &e));
    if (dataset_synthetic_create(&tc, &tok, &e) < 0) {
        dataset_destroy(syn);
        T_CHECK_MSG(false, "%s", e.msg);
    }
    struct dataset *sets[] = {&p.ds, syn, tok};
    bool ok = true;
    for (int d = 0; ok && d < 3; d++) {
        struct loader_config c = cfg_of(1, 3, 5, 3, 0, LOADER_PAD);
        struct capture ref, got;
        int64_t nb = 3 * 3; /* 13 samples per rank: 5, 5, 3 per epoch */
        ok = capture_run(sets[d], &c, nb, 0, &ref) == 0 && ref.batches == nb;
        static const int depths[] = {1, 3, 16};
        for (int k = 0; ok && k < 3; k++) {
            c.prefetch = depths[k];
            ok = capture_run(sets[d], &c, nb, 7u + (unsigned)k, &got) == 0 &&
                 capture_equal(&ref, &got, (size_t)nb * 5 * dataset_sample_floats(sets[d]),
                               (size_t)nb * 5, (size_t)dataset_label_len(sets[d]));
            capture_free(&got);
        }
        capture_free(&ref);
    }
    dataset_destroy(syn);
    dataset_destroy(tok);
    T_CHECK(ok);
}

/* --- several workers ----------------------------------------------------------------- */

/* Workers 2, 3 and 4 at prefetch depths 1 to 4, with a jittery consumer, give byte for
 * byte the batches (x, y, index, step, epoch, batch in epoch, last flag) of the one-thread
 * loader, over three epochs with short last batches, shuffled, for the probe, fresh
 * synthetic images, fresh synthetic tokens and a probe whose fills sleep (so workers
 * finish out of order). */
static void test_workers_match_one_thread(void)
{
    struct err e;
    struct probe p, slow;
    probe_init(&p, 37, 0, -1);
    probe_init(&slow, 37, 1, -1);
    struct data_synthetic_config sc = {
        .c = 3, .h = 5, .w = 4, .classes = 10, .samples = 37, .fresh = true};
    struct data_synthetic_config tc = {
        .c = 1, .h = 1, .w = 7, .classes = 300, .samples = 37, .fresh = true, .tokens = true};
    struct dataset *syn, *tok;
    T_OK(dataset_synthetic_create(&sc, &syn, &e));
    if (dataset_synthetic_create(&tc, &tok, &e) < 0) {
        dataset_destroy(syn);
        T_CHECK_MSG(false, "%s", e.msg);
    }
    struct dataset *sets[] = {&p.ds, syn, tok, &slow.ds};
    char why[128] = "";
    bool ok = true;
    for (int d = 0; ok && d < 4; d++) {
        struct loader_config c = cfg_of(1, 3, 5, 3, 2, LOADER_PAD);
        struct capture ref, got;
        int64_t nb = 3 * 3; /* 13 samples per rank: 5, 5, 3 per epoch */
        ok = capture_run(sets[d], &c, nb, 0, &ref) == 0 && ref.batches == nb;
        for (int w = 2; ok && w <= 4; w++)
            for (int depth = 1; ok && depth <= 4; depth++) {
                c.workers = w;
                c.prefetch = depth;
                ok = capture_run(sets[d], &c, nb, 11u * (unsigned)w + (unsigned)depth, &got) ==
                         0 &&
                     capture_equal(&ref, &got, (size_t)nb * 5 * dataset_sample_floats(sets[d]),
                                   (size_t)nb * 5, (size_t)dataset_label_len(sets[d]));
                if (!ok)
                    snprintf(why, sizeof why,
                             "dataset %d, %d workers, prefetch %d: %lld batches", d, w, depth,
                             (long long)got.batches);
                capture_free(&got);
            }
        capture_free(&ref);
    }
    dataset_destroy(syn);
    dataset_destroy(tok);
    T_CHECK_MSG(ok, "%s", why);
}

/* dataset.pin: worker w's fills run on loader_pin_cpu(w), the w-th allowed CPU from the
 * end of the set, and pinning changes no batch. */
static void test_workers_pinned(void)
{
    cpu_set_t set;
    T_CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int last = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set))
            last = cpu;
    T_EQ_INT(loader_pin_cpu(0), last);
    T_EQ_INT(loader_pin_cpu(CPU_COUNT(&set)), last); /* wraps */
    struct probe p;
    probe_init(&p, 40, 1, -1);
    struct loader_config c = cfg_of(0, 1, 4, 1, 2, LOADER_DROP);
    c.workers = 2;
    c.pin = true;
    struct capture ref, got;
    T_CHECK(capture_run(&p.ds, &c, 10, 0, &got) == 0);
    bool on_cpu = true;
    for (int s = 0; s < 10; s++)
        on_cpu &= atomic_load(&p.cpu_of_step[s]) == loader_pin_cpu(s % 2);
    c.pin = false;
    T_CHECK(capture_run(&p.ds, &c, 10, 0, &ref) == 0);
    T_CHECK(capture_equal(&ref, &got, 10 * 4 * dataset_sample_floats(&p.ds), 10 * 4, 1));
    capture_free(&ref);
    capture_free(&got);
    T_CHECK_MSG(on_cpu, "a pinned worker's fill ran on another CPU than loader_pin_cpu");
}

/* A fill failing in some worker reaches loader_next after every batch before it, and the
 * error is the first failed batch's even when later batches (other workers) fail first. */
static void test_workers_error_surfaces(void)
{
    struct err e;
    int before = thread_count();
    for (int workers = 2; workers <= 4; workers++) {
        for (int64_t fail_step = 0; fail_step <= 5; fail_step += 5) {
            struct probe p;
            probe_init(&p, 100, 0, -1);
            p.fail_step = fail_step; /* this step and every later one fail */
            struct loader_config c = cfg_of(0, 1, 4, 0, 2, LOADER_DROP);
            c.workers = workers;
            struct loader *l;
            T_OK(loader_create(&p.ds, &c, &l, &e));
            const struct data_batch *b;
            for (int64_t s = 0; s < fail_step; s++) {
                T_EQ_INT(loader_next(l, &b, &e), 1);
                T_EQ_INT(b->step, s);
            }
            usleep(20 * 1000); /* let the later batches' workers fail too */
            err_clear(&e);
            int rc = loader_next(l, &b, &e);
            struct err e2;
            int rc2 = loader_next(l, &b, &e2);
            loader_destroy(l);
            T_EQ_INT(rc, -1);
            T_CHECK(b == NULL);
            T_EQ_INT(e.code, ERR_IO);
            char want[64];
            snprintf(want, sizeof want, "batch %lld (", (long long)fail_step);
            T_CHECK_MSG(strstr(e.msg, "disk gone") && strstr(e.msg, want), "%s", e.msg);
            T_EQ_INT(rc2, -1);
            T_EQ_STR(e2.msg, e.msg);
        }
    }
    T_CHECK(threads_back_to(before));
}

/* loader_destroy joins every worker promptly: while they wait on a full ring, while they
 * are inside slow fills, and before any batch was asked for. */
static void test_workers_shutdown(void)
{
    struct err e;
    int before = thread_count();
    T_CHECK(before >= 1);
    struct probe slow, fast;
    probe_init(&slow, 1000, 30, -1);
    probe_init(&fast, 1000, 0, -1);
    struct loader *l;
    const struct data_batch *b;
    struct loader_config c = cfg_of(0, 1, 8, 0, 1, LOADER_DROP);
    c.workers = 4; /* 5 slots: the one held and one per worker */
    T_OK(loader_create(&fast.ds, &c, &l, &e));
    T_EQ_INT(loader_next(l, &b, &e), 1);
    usleep(50 * 1000);
    T_CHECK(thread_count() == before + 4);
    int64_t t0 = clock_mono_ns();
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
    T_CHECK(atomic_load(&fast.fills) <= 5);
    T_CHECK(clock_mono_ns() - t0 < 2000000000LL);
    /* inside fills: each worker finishes at most its one fill of 30 ms */
    T_OK(loader_create(&slow.ds, &c, &l, &e));
    T_EQ_INT(loader_next(l, &b, &e), 1);
    t0 = clock_mono_ns();
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
    T_CHECK(clock_mono_ns() - t0 < 2000000000LL);
    T_OK(loader_create(&slow.ds, &c, &l, &e));
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
}

/* Workers without a thread to hand (prefetch 0) or out of range are refused naming
 * dataset.workers; 0 and 1 are the one prefetch thread. The fill time and its CPU time
 * add up over the workers. */
static void test_workers_config(void)
{
    struct err e;
    struct probe p;
    probe_init(&p, 100, 0, -1);
    struct loader *l = NULL;
    struct loader_config c = cfg_of(0, 1, 4, 1, 0, LOADER_DROP);
    c.workers = 2;
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0 && l == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "dataset.workers");
    c.prefetch = 1;
    c.workers = LOADER_MAX_WORKERS + 1;
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    T_EQ_STR(e.field, "dataset.workers");
    c.workers = -1;
    T_CHECK(loader_create(&p.ds, &c, &l, &e) < 0);
    T_EQ_STR(e.field, "dataset.workers");
    int before = thread_count();
    for (int w = 0; w <= 1; w++) {
        c.workers = w;
        T_OK(loader_create(&p.ds, &c, &l, &e));
        T_CHECK(thread_count() == before + 1);
        loader_destroy(l);
        T_CHECK(threads_back_to(before));
    }
    c.prefetch = 0;
    T_OK(loader_create(&p.ds, &c, &l, &e)); /* workers 1, prefetch 0: inline */
    loader_destroy(l);
    /* fill times summed over 3 workers: 9 fills of at least 20 ms each */
    struct probe slow;
    probe_init(&slow, 100, 20, -1);
    c = cfg_of(0, 1, 4, 0, 3, LOADER_DROP);
    c.workers = 3;
    T_OK(loader_create(&slow.ds, &c, &l, &e));
    const struct data_batch *b;
    for (int s = 0; s < 9; s++)
        T_EQ_INT(loader_next(l, &b, &e), 1);
    struct loader_stats st;
    loader_get_stats(l, &st);
    loader_destroy(l);
    T_CHECK_MSG(st.fill_ns >= 9 * 20 * 1000000LL, "fill %lld ns", (long long)st.fill_ns);
    T_CHECK(st.fill_cpu_ns >= 0 && st.fill_cpu_ns < st.fill_ns);
    /* CPU-bound fills show CPU time */
    struct data_synthetic_config sc = {
        .c = 3, .h = 32, .w = 32, .classes = 10, .samples = 256, .fresh = true};
    struct dataset *syn;
    T_OK(dataset_synthetic_create(&sc, &syn, &e));
    c = cfg_of(0, 1, 64, 1, 2, LOADER_DROP);
    c.workers = 2;
    int rc = loader_create(syn, &c, &l, &e);
    while (rc == 0 && loader_next(l, &b, &e) == 1)
        ;
    if (rc == 0) {
        loader_get_stats(l, &st);
        loader_destroy(l);
    }
    dataset_destroy(syn);
    T_OK(rc);
    T_CHECK_MSG(st.fill_cpu_ns > 0, "cpu %lld ns", (long long)st.fill_cpu_ns);
}

/* --- synthetic data ------------------------------------------------------------------ */

/* A synthetic set of `samples` 3x8x8 samples and a loader over it (batch, epochs). */
static int synth_loader(bool fresh, int64_t samples, int batch, int64_t epochs, bool shuffle,
                        struct dataset **ds, struct loader **l, struct err *e)
{
    struct data_synthetic_config sc = {
        .c = 3, .h = 8, .w = 8, .classes = 10, .samples = samples, .fresh = fresh};
    if (dataset_synthetic_create(&sc, ds, e) < 0)
        return -1;
    struct loader_config c = cfg_of(0, 1, batch, epochs, 2, LOADER_DROP);
    c.shuffle = shuffle;
    if (loader_create(*ds, &c, l, e) < 0) {
        dataset_destroy(*ds);
        return -1;
    }
    return 0;
}

static void test_synthetic_fixed_batch_reused(void)
{
    struct err e;
    struct dataset *ds;
    struct loader *l;
    T_OK(synth_loader(false, 40, 16, 0, true, &ds, &l, &e)); /* batches of 16, 16, 8 */
    T_CHECK(ds->reuse_batch);
    size_t floats = 16 * dataset_sample_floats(ds);
    float *first = malloc(floats * sizeof *first);
    const struct data_batch *b;
    const float *mem = NULL;
    bool same = true;
    int64_t fill_after_first = 0;
    for (int s = 0; s < 20; s++) {
        if (loader_next(l, &b, &e) != 1) {
            same = false;
            break;
        }
        struct loader_stats st;
        loader_get_stats(l, &st);
        if (s == 0) {
            memcpy(first, b->x, floats * sizeof *first);
            mem = b->x;
            fill_after_first = st.fill_ns;
        }
        size_t got = (size_t)b->n * dataset_sample_floats(ds);
        same = same && b->x == mem && memcmp(b->x, first, got * sizeof *first) == 0 &&
               b->n == (s % 3 == 2 ? 8 : 16) && b->step == s && b->epoch == s / 3 &&
               b->last_in_epoch == (s % 3 == 2) && st.fill_ns == fill_after_first;
        for (size_t k = 0; same && k < got; k++)
            same = b->x[k] >= -1.0f && b->x[k] < 1.0f;
    }
    loader_destroy(l);
    dataset_destroy(ds);
    free(first);
    T_CHECK(same);
}

/* Fresh mode through the loader: the same indices at the next step get new values. */
static void test_synthetic_fresh_per_step(void)
{
    struct err e;
    struct dataset *ds;
    struct loader *l;
    T_OK(synth_loader(true, 8, 8, 2, false, &ds, &l, &e));
    T_CHECK(!ds->reuse_batch);
    float first[8 * 3 * 8 * 8];
    const struct data_batch *b;
    int rc1 = loader_next(l, &b, &e);
    if (rc1 == 1)
        memcpy(first, b->x, sizeof first);
    int rc2 = loader_next(l, &b, &e);
    bool same_index = rc2 == 1 && b->index[0] == 0 && b->index[7] == 7;
    bool differs = rc2 == 1 && memcmp(first, b->x, sizeof first) != 0;
    loader_destroy(l);
    dataset_destroy(ds);
    T_CHECK(rc1 == 1 && rc2 == 1);
    T_CHECK(same_index && differs);
}

static void test_synthetic_values(void)
{
    struct err e;
    struct data_synthetic_config sc = {
        .c = 1, .h = 1, .w = 3, .classes = 10, .samples = 100000, .fresh = true};
    struct dataset *ds;
    T_OK(dataset_synthetic_create(&sc, &ds, &e));
    enum { N = 100000 };
    int64_t *idx = malloc(N * sizeof *idx);
    float *x = malloc(N * 3 * sizeof *x), *x2 = malloc(N * 3 * sizeof *x2);
    int32_t *y = malloc(N * sizeof *y), *y2 = malloc(N * sizeof *y2);
    for (int i = 0; i < N; i++)
        idx[i] = i;
    struct data_draw d = {9, 0, 5};
    int rc = dataset_fill(ds, idx, N, &d, x, y, &e);
    int64_t hist[10] = {0};
    double sum = 0;
    for (int i = 0; rc == 0 && i < N; i++) {
        hist[y[i]]++;
        for (int k = 0; k < 3; k++)
            sum += x[i * 3 + k];
    }
    /* same seed and step: same data; next step: different data */
    int rc2 = dataset_fill(ds, idx, 100, &d, x2, y2, &e);
    bool same = rc2 == 0 && memcmp(x, x2, 300 * sizeof *x) == 0;
    d.step = 6;
    rc2 = rc2 || dataset_fill(ds, idx, 100, &d, x2, y2, &e);
    bool differs = rc2 == 0 && memcmp(x, x2, 300 * sizeof *x) != 0;
    dataset_destroy(ds);
    free(idx);
    free(x);
    free(x2);
    free(y);
    free(y2);
    T_OK(rc);
    T_CHECK(same && differs);
    /* uniform labels: each class 10000 +- 5 standard deviations (~95) */
    for (int c = 0; c < 10; c++)
        T_CHECK_MSG(hist[c] > 9500 && hist[c] < 10500, "class %d: %lld", c, (long long)hist[c]);
    T_NEAR(sum / (N * 3), 0.0, 0.01);
    sc.classes = 0;
    T_CHECK(dataset_synthetic_create(&sc, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.classes");
    sc.classes = 10;
    sc.w = 0;
    T_CHECK(dataset_synthetic_create(&sc, &ds, &e) < 0);
    T_EQ_STR(e.field, "dataset.shape");
}

/* Every batch a loader hands out over token data (T labels per sample) is exactly what
 * dataset_fill gives for its indices and draw: all n * T labels, short last batches
 * included, for fresh and fixed (reused batch) data, with and without the prefetch thread. */
static bool token_batches_match_fill(struct dataset *ds, int prefetch, char *why, size_t wn)
{
    struct err e;
    struct loader *l;
    struct loader_config c = cfg_of(0, 1, 5, 2, prefetch, LOADER_DROP); /* 5,5,5,5,3 */
    if (loader_create(ds, &c, &l, &e) < 0) {
        snprintf(why, wn, "loader_create: %s", e.msg);
        return false;
    }
    size_t per = dataset_sample_floats(ds), lab = (size_t)dataset_label_len(ds);
    float *x = malloc(5 * per * sizeof *x);
    int32_t *y = malloc(5 * lab * sizeof *y);
    const struct data_batch *b;
    int64_t batches = 0, labels = 0;
    bool ok = true;
    int rc = 0;
    while (ok && (rc = loader_next(l, &b, &e)) == 1) {
        struct data_draw d = {c.seed, b->epoch, b->step};
        ok = dataset_fill(ds, b->index, b->n, &d, x, y, &e) == 0 &&
             memcmp(x, b->x, (size_t)b->n * per * sizeof *x) == 0 &&
             memcmp(y, b->y, (size_t)b->n * lab * sizeof *y) == 0 &&
             b->n == (b->batch_in_epoch == 4 ? 3 : 5);
        if (!ok)
            snprintf(why, wn, "batch %lld (%d samples) differs from dataset_fill",
                     (long long)b->step, b->n);
        batches++;
        labels += (int64_t)b->n * (int64_t)lab;
    }
    loader_destroy(l);
    free(x);
    free(y);
    if (ok && (rc != 0 || batches != 10 || labels != 2 * 23 * (int64_t)lab)) {
        snprintf(why, wn, "rc %d, %lld batches, %lld labels", rc, (long long)batches,
                 (long long)labels);
        ok = false;
    }
    return ok;
}

static void test_loader_token_batches(void)
{
    struct err e;
    char why[256] = "";
    for (int fresh = 0; fresh <= 1; fresh++) {
        struct data_synthetic_config tc = {.c = 1,
                                           .h = 1,
                                           .w = 16,
                                           .classes = 50257,
                                           .samples = 23,
                                           .fresh = fresh,
                                           .tokens = true};
        struct dataset *ds;
        T_OK(dataset_synthetic_create(&tc, &ds, &e));
        bool ok = dataset_label_len(ds) == 16;
        for (int prefetch = 0; ok && prefetch <= 3; prefetch += 3)
            ok = token_batches_match_fill(ds, prefetch, why, sizeof why);
        dataset_destroy(ds);
        T_CHECK_MSG(ok, "fresh %d: %s", fresh, why);
    }
}

/* --- data wait ----------------------------------------------------------------------- */

/* Drains `batches` from a loader; the consumer sleeps compute_ms after each batch. */
static int drain(struct dataset *ds, int prefetch, int batches, int compute_ms,
                 int64_t *sum_wait, struct loader_stats *st)
{
    struct err e;
    struct loader *l;
    struct loader_config c = cfg_of(0, 1, 2, 0, prefetch, LOADER_DROP);
    if (loader_create(ds, &c, &l, &e) < 0)
        return -1;
    const struct data_batch *b;
    *sum_wait = 0;
    int rc = 0;
    for (int s = 0; rc == 0 && s < batches; s++) {
        rc = loader_next(l, &b, &e) == 1 ? 0 : -1;
        if (rc == 0)
            *sum_wait += b->wait_ns;
        usleep((useconds_t)compute_ms * 1000);
    }
    loader_get_stats(l, st);
    loader_destroy(l);
    return rc;
}

static void test_data_wait_measured(void)
{
    struct probe slow, fast;
    probe_init(&slow, 100, 20, -1);
    probe_init(&fast, 100, 0, -1);
    int64_t w_slow, w_sync, w_fast;
    struct loader_stats st;
    /* a consumer that never computes waits for every 20 ms fill */
    T_CHECK(drain(&slow.ds, 2, 10, 0, &w_slow, &st) == 0);
    T_EQ_INT(st.wait_ns, w_slow);
    T_EQ_INT(st.batches, 10);
    T_CHECK_MSG(w_slow >= 10 * 20 * 1000000LL / 2, "waited %lld ns", (long long)w_slow);
    T_CHECK(st.fill_ns >= 10 * 20 * 1000000LL);
    /* synchronous: the fill happens inside loader_next, all of it is wait */
    T_CHECK(drain(&slow.ds, 0, 5, 0, &w_sync, &st) == 0);
    T_CHECK_MSG(w_sync >= 5 * 20 * 1000000LL, "waited %lld ns", (long long)w_sync);
    /* a fast set and a consumer that computes 10 ms: the thread keeps ahead */
    T_CHECK(drain(&fast.ds, 2, 10, 10, &w_fast, &st) == 0);
    T_CHECK_MSG(w_fast < w_slow / 2, "fast %lld ns vs slow %lld ns", (long long)w_fast,
                (long long)w_slow);
}

/* --- shutdown and errors ------------------------------------------------------------- */

static void test_shutdown_mid_epoch(void)
{
    struct err e;
    int before = thread_count();
    T_CHECK(before >= 1);
    struct probe slow, fast;
    probe_init(&slow, 1000, 30, -1);
    probe_init(&fast, 1000, 0, -1);
    struct loader *l;
    const struct data_batch *b;
    /* destroyed while the thread is inside a fill */
    struct loader_config c = cfg_of(0, 1, 8, 0, 4, LOADER_DROP);
    T_OK(loader_create(&slow.ds, &c, &l, &e));
    T_EQ_INT(loader_next(l, &b, &e), 1);
    T_EQ_INT(loader_next(l, &b, &e), 1);
    T_CHECK(thread_count() == before + 1);
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
    /* destroyed before any batch was asked for */
    T_OK(loader_create(&slow.ds, &c, &l, &e));
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
    /* destroyed while the thread waits on a full ring */
    T_OK(loader_create(&fast.ds, &c, &l, &e));
    T_EQ_INT(loader_next(l, &b, &e), 1);
    usleep(50 * 1000);
    loader_destroy(l);
    T_CHECK(threads_back_to(before));
    T_CHECK(atomic_load(&fast.fills) <= 1 + 4);
    /* a synchronous loader has no thread at all */
    c.prefetch = 0;
    T_OK(loader_create(&fast.ds, &c, &l, &e));
    T_EQ_INT(loader_next(l, &b, &e), 1);
    T_CHECK(threads_back_to(before));
    loader_destroy(l);
}

static void test_reader_error_surfaces(void)
{
    struct err e;
    int before = thread_count();
    for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
        for (int fail_at = 0; fail_at <= 3; fail_at += 3) {
            struct probe p;
            probe_init(&p, 100, 0, fail_at);
            struct loader_config c = cfg_of(0, 1, 4, 0, prefetch, LOADER_DROP);
            struct loader *l;
            T_OK(loader_create(&p.ds, &c, &l, &e));
            const struct data_batch *b;
            for (int s = 0; s < fail_at; s++)
                T_EQ_INT(loader_next(l, &b, &e), 1);
            err_clear(&e);
            int rc = loader_next(l, &b, &e);
            struct err e2;
            int rc2 = loader_next(l, &b, &e2);
            loader_destroy(l);
            T_EQ_INT(rc, -1);
            T_CHECK(b == NULL);
            T_EQ_INT(e.code, ERR_IO);
            T_CHECK_MSG(strstr(e.msg, "disk gone"), "%s", e.msg);
            T_EQ_INT(rc2, -1);
            T_EQ_STR(e2.msg, e.msg);
        }
    }
    T_CHECK(threads_back_to(before));
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_shard_len);
    TEST_RUN(test_shard_union_per_rule);
    TEST_RUN(test_resume_at_offset);
    TEST_RUN(test_reshuffle_per_epoch);
    TEST_RUN(test_permutation_values);
    TEST_RUN(test_batches_and_epochs);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_prefetch_matches_sync);
    TEST_RUN(test_synthetic_fixed_batch_reused);
    TEST_RUN(test_synthetic_fresh_per_step);
    TEST_RUN(test_synthetic_values);
    TEST_RUN(test_loader_token_batches);
    TEST_RUN(test_data_wait_measured);
    TEST_RUN(test_shutdown_mid_epoch);
    TEST_RUN(test_reader_error_surfaces);
    TEST_RUN(test_workers_match_one_thread);
    TEST_RUN(test_workers_pinned);
    TEST_RUN(test_workers_error_surfaces);
    TEST_RUN(test_workers_shutdown);
    TEST_RUN(test_workers_config);
    return test_end();
}
