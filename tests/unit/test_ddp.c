/* Unit tests for worker/ddp: every strategy is data parallelism done right.
 *
 * Equivalence: N ranks with per-rank batch B, after k optimizer steps, hold the same
 * parameters as one rank with batch N*B (and with `accumulate` A micro-batches, as one
 * rank with batch N*B*A), over the real TCP backend. Ranks are forked processes (each
 * with its own oneDNN / OpenMP state, as in a run) that build their mesh with
 * comm_tcp_listen/connect and send their final parameter arena back through a socket pair
 * (common/net.h's send/recv-all rather than read/write loops of its own).
 *
 * The model is lenet5 (convolutions, ReLU, max pooling, linear layers): no batch norm,
 * whose statistics are per rank in data-parallel training, and no dropout, whose masks
 * differ by rank. The data is an MNIST-format file of random images written by the test
 * (a sample's values depend on its index only, unlike synthetic data, whose fresh values
 * depend on the batch number, which accumulation changes); the loader's
 * DistributedSampler sharding makes the union of the ranks' batch s exactly the single
 * rank's batch s (positions s*N*B .. (s+1)*N*B-1 of the epoch order), and with
 * accumulation the union of the ranks' micro-batches sA .. sA+A-1 its batch s.
 *
 * Tolerance: the gradients differ only by float32 summation order (per-rank means then
 * a ring average, against one mean over N*B); the relative difference of a gradient is
 * a few ulp (~1e-6), and after 3 SGD steps of lr 0.05 with momentum the parameters
 * (|p| < 0.3) differ by far less than 1e-5 absolute. We allow 2e-5 + 1e-4 |p|: a
 * missing division by the world size, a bucket left out or a shard gathered to the
 * wrong place moves parameters by 1e-3 or more. fp16 / bf16 compression round every
 * exchanged gradient to 11 / 8 significant bits (relative 2^-11 / 2^-8) at each of the
 * N-1 combines: 3 steps of lr 0.05 on gradients below ~0.5 give at most
 * 3 * 0.05 * 0.5 * (N * 2^-8) ~ 1e-3 for bf16 at N = 4, so 5e-4 (fp16) and 3e-3 (bf16).
 * Every rank must end bit-identical to rank 0: they apply the same reduced gradients
 * (ZeRO: each shard is computed by one rank and gathered).
 *
 * Device mode (the GPU path's ddp_set_device) is run over host memory with CPU hooks and
 * must be bit-identical to the host path: it changes where the arenas are and who runs
 * the scale and the update, never the arithmetic. */
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/net.h"
#include "tests/unit/test.h"
#include "worker/comm/tcp.h"
#include "worker/data/dataset.h"
#include "worker/data/loader.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"

#define MAX_W 4
#define STEPS 3
#define EQ_SAMPLES 512

static char eq_images[64], eq_labels[64]; /* the test's dataset files */

static void eq_put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    fwrite(b, 1, 4, f);
}

/* Writes EQ_SAMPLES random 28x28 images and labels in idx format. */
static int eq_write_dataset(void)
{
    snprintf(eq_images, sizeof eq_images, "/tmp/ddpb-eq-%d-images", (int)getpid());
    snprintf(eq_labels, sizeof eq_labels, "/tmp/ddpb-eq-%d-labels", (int)getpid());
    FILE *fi = fopen(eq_images, "wb"), *fl = fopen(eq_labels, "wb");
    if (!fi || !fl) {
        if (fi)
            fclose(fi);
        if (fl)
            fclose(fl);
        return -1;
    }
    uint64_t x = 88172645463325252ull;
    eq_put_be32(fi, 0x803);
    eq_put_be32(fi, EQ_SAMPLES);
    eq_put_be32(fi, 28);
    eq_put_be32(fi, 28);
    eq_put_be32(fl, 0x801);
    eq_put_be32(fl, EQ_SAMPLES);
    for (int i = 0; i < EQ_SAMPLES * 28 * 28 + EQ_SAMPLES; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        if (i < EQ_SAMPLES * 28 * 28)
            fputc((int)(x & 0xff), fi);
        else
            fputc((int)(x % 10), fl);
    }
    fclose(fi);
    return fclose(fl);
}

struct eq_case {
    enum ddp_strategy strategy;
    enum ddp_compression compression;
    int world, batch, accumulate;
    size_t bucket_bytes; /* small: several buckets, some not divisible by the world */
    bool device;         /* device mode (ddp_set_device) over host memory and CPU hooks */
    bool wide;           /* eq_build_wide instead of lenet5 */
    double clip;         /* > 0: ddp_clip_grad_norm at this norm after every exchange */
};

/* A wide MLP (784-1024-1024-10, 1.85 M parameters): ddp's 1 MiB first bucket closes at
 * fc2, so it is in flight while backward computes fc1's gradients, which lenet5 (one
 * bucket under 1 MiB) never shows. */
static int eq_build_wide(struct nn_model *m, struct err *e)
{
    int x = nn_model_flatten(m, "flatten", nn_model_input(m, 1, 28, 28));
    x = nn_model_act(m, "relu1", nn_model_linear(m, "fc1", x, 1024, 1), NN_ACT_RELU);
    x = nn_model_act(m, "relu2", nn_model_linear(m, "fc2", x, 1024, 1), NN_ACT_RELU);
    nn_model_linear(m, "fc3", x, 10, 1);
    return nn_model_finish(m, e);
}

/* Device mode's hooks on the CPU: the "device" arenas are the model's own, the update
 * and scale are nn/optim's loops, and the calls are counted so a run can tell that device
 * mode really went through them. */
struct eq_dev {
    float *p, *g;
    int scales, updates;
};

static void eq_dev_scale(void *ctx, float *x, size_t n, float factor)
{
    ((struct eq_dev *)ctx)->scales++;
    for (size_t i = 0; i < n; i++)
        x[i] *= factor;
}

static void eq_dev_update(void *ctx, struct nn_optim *o, size_t off, size_t state_off,
                          size_t len, double lr)
{
    struct eq_dev *d = ctx;
    d->updates++;
    nn_optim_update_slice(o, d->p + off, d->g + off, state_off, len, lr);
}

/* Device mode over m's own arenas with the hooks above; dv (which the result points at, so
 * it must outlive it) counts their calls. */
static struct ddp_device eq_device_of(struct nn_model *m, struct eq_dev *dv)
{
    *dv = (struct eq_dev){.p = m->params.data, .g = m->grads.data};
    return (struct ddp_device){.params = m->params.data,
                               .grads = m->grads.data,
                               .buffers = m->buffers.data,
                               .ctx = dv,
                               .scale = eq_dev_scale,
                               .update = eq_dev_update};
}

/* One rank's training: k steps exactly as workload_train does them, each step's
 * communication figures into st. Returns the parameter arena (owned) or NULL with e set. */
static float *eq_train(const struct eq_case *k, struct comm *c, size_t *n,
                       struct ddp_step_stats st[STEPS], struct err *e)
{
    struct nn_model m;
    struct dataset *ds = NULL;
    struct loader *ld = NULL;
    struct ddp d;
    struct nn_optim o;
    bool have_ddp = false, have_opt = false;
    float *out = NULL;
    nn_set_threads(1);
    nn_model_init(&m);
    struct data_image_opts io = {.classes = 10};
    struct loader_config lc;
    loader_config_default(&lc);
    lc.rank = c->rank;
    lc.world_size = c->world_size;
    lc.batch_size = k->batch;
    lc.seed = 7;
    lc.prefetch = 0;
    struct ddp_config dc = {.strategy = k->strategy,
                            .compression = k->compression,
                            .bucket_bytes = k->bucket_bytes,
                            .fusion_bytes = k->bucket_bytes,
                            .cycle_ms = 0};
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.lr = 0.05;
    oc.momentum = 0.9;
    if ((k->wide ? eq_build_wide(&m, e)
                 : nn_models_build(&m, "lenet5", 1, 28, 28, 10, NULL, e)) < 0 ||
        nn_model_init_params(&m, 42, e) < 0 ||
        nn_model_prepare(&m, k->batch, NN_BACKEND_FAST, 1, e) < 0 ||
        dataset_idx_open(eq_images, eq_labels, "eq", DATA_SPLIT_TRAIN, &io, &ds, e) < 0 ||
        loader_create(ds, &lc, &ld, e) < 0 || ddp_init(&d, &dc, c, &m, e) < 0)
        goto out;
    have_ddp = true;
    if (ddp_optim_init(&d, &o, &oc, e) < 0)
        goto out;
    have_opt = true;
    struct eq_dev dv;
    struct ddp_device dev = eq_device_of(&m, &dv);
    if (k->device && ddp_set_device(&d, &dev, e) < 0)
        goto out;
    /* rank 0's parameters win: perturb the others first to see the broadcast work */
    if (c->rank > 0)
        m.params.data[0] += 1.0f;
    if (ddp_broadcast_params(&d, e) < 0)
        goto out;
    for (int s = 0; s < STEPS; s++) {
        nn_model_zero_grad(&m);
        for (int a = 0; a < k->accumulate; a++) {
            const struct data_batch *b;
            double loss;
            int right;
            if (loader_next(ld, &b, e) != 1)
                goto out;
            ddp_begin_step(&d, a == k->accumulate - 1);
            if (nn_model_forward(&m, b->x, 1, (uint64_t)b->step, e) < 0 ||
                nn_model_loss(&m, b->y, b->n, &loss, &right, e) < 0 ||
                nn_model_backward(&m, ddp_grad_hook, &d, e) < 0)
                goto out;
        }
        if (ddp_finish(&d, k->accumulate, e) < 0)
            goto out;
        double norm = 0;
        if (k->clip > 0 && ddp_clip_grad_norm(&d, k->clip, &norm, e) < 0)
            goto out;
        if (k->clip > 0 && !(norm > k->clip)) { /* the test must clip to test clipping */
            err_set(e, ERR_INTERNAL, NULL, "step %d: norm %g did not exceed %g", s, norm,
                    k->clip);
            goto out;
        }
        if (ddp_optim_step(&d, &o, oc.lr, e) < 0)
            goto out;
        st[s] = d.st;
    }
    if (k->device && (dv.updates != STEPS || (k->accumulate > 1 && dv.scales == 0))) {
        err_set(e, ERR_INTERNAL, NULL, "device mode: %d updates, %d scales through the hooks",
                dv.updates, dv.scales);
        goto out;
    }
    *n = m.nparams;
    out = malloc(m.nparams * sizeof *out);
    if (out)
        memcpy(out, m.params.data, m.nparams * sizeof *out);
out:
    if (have_opt)
        nn_optim_cleanup(&o);
    if (have_ddp)
        ddp_cleanup(&d);
    loader_destroy(ld);
    dataset_destroy(ds);
    nn_model_destroy(&m);
    return out;
}

/* Child: connect, train, send [n][params][step stats] or [0][message]. */
static void eq_child(const struct eq_case *k, struct comm_tcp *t, const char *const *addrs,
                     int fd)
{
    struct err e = {0};
    size_t n = 0;
    float *p = NULL;
    struct ddp_step_stats st[STEPS] = {0};
    struct comm *c = comm_tcp_connect(t, addrs, &e);
    if (c)
        p = eq_train(k, c, &n, st, &e);
    /* leave together, as the worker does (main.c): an early exit could reset a
     * connection a peer still reads its last bytes from */
    if (p && comm_barrier(c, &e) < 0) {
        free(p);
        p = NULL;
    }
    /* and say goodbye, as the worker does: a peer still inside the barrier watches this
     * rank's socket, and a hang-up with no goodbye before it reads as a rank that died */
    comm_destroy(c);
    uint64_t len = p ? n : 0;
    struct err io; /* a failed send shows as a short read in the parent */
    net_send_all(fd, &len, sizeof len, -1, NULL, &io);
    if (p) {
        net_send_all(fd, p, n * sizeof *p, -1, NULL, &io);
        net_send_all(fd, st, sizeof st, -1, NULL, &io);
    } else
        net_send_all(fd, e.msg, sizeof e.msg, -1, NULL, &io);
    _exit(p ? 0 : 1);
}

/* Runs k on its world of forked ranks; out[r] gets each rank's parameters (owned), and
 * stats[r] (when not NULL) its steps' communication figures. */
static int eq_run(const struct eq_case *k, float **out, size_t *n,
                  struct ddp_step_stats (*stats)[STEPS], char *why, size_t whylen)
{
    struct comm_tcp *t[MAX_W];
    char addrs[MAX_W][64];
    const char *ap[MAX_W];
    int fds[MAX_W][2];
    pid_t pid[MAX_W];
    struct err e = {0};
    for (int r = 0; r < k->world; r++) {
        struct comm_tcp_config cfg = {.rank = r,
                                      .world_size = k->world,
                                      .listen_host = "127.0.0.1",
                                      .timeout_ms = 20000,
                                      .algorithm = "auto",
                                      .secret = "eq"};
        t[r] = comm_tcp_listen(&cfg, &e);
        if (!t[r]) {
            snprintf(why, whylen, "listen: %s", e.msg);
            return -1;
        }
        snprintf(addrs[r], sizeof addrs[r], "%s", comm_tcp_address(t[r]));
        ap[r] = addrs[r];
    }
    for (int r = 0; r < k->world; r++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds[r]) < 0)
            return -1;
        pid[r] = fork();
        if (pid[r] == 0) {
            close(fds[r][0]);
            eq_child(k, t[r], ap, fds[r][1]);
        }
        close(fds[r][1]);
    }
    int rc = 0;
    for (int r = 0; r < k->world; r++) {
        uint64_t len = 0;
        out[r] = NULL;
        if (net_recv_all(fds[r][0], &len, sizeof len, -1, NULL, &e) < 0) {
            snprintf(why, whylen, "rank %d sent nothing", r);
            rc = -1;
        } else if (len == 0) {
            char msg[sizeof e.msg] = "";
            net_recv_all(fds[r][0], msg, sizeof msg, -1, NULL, &e);
            msg[sizeof msg - 1] = '\0';
            snprintf(why, whylen, "rank %d: %s", r, msg);
            rc = -1;
        } else {
            struct ddp_step_stats st[STEPS];
            *n = len;
            out[r] = malloc(len * sizeof(float));
            if (!out[r] ||
                net_recv_all(fds[r][0], out[r], len * sizeof(float), -1, NULL, &e) < 0 ||
                net_recv_all(fds[r][0], st, sizeof st, -1, NULL, &e) < 0)
                rc = -1;
            else if (stats)
                memcpy(stats[r], st, sizeof st);
        }
        close(fds[r][0]);
    }
    for (int r = 0; r < k->world; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        comm_tcp_discard(t[r]);
    }
    return rc;
}

static void eq_free(float **p, int n)
{
    for (int i = 0; i < n; i++)
        free(p[i]);
}

/* The single-rank reference of k: batch world * batch * accumulate, plain ddp. */
static float *eq_reference(const struct eq_case *k, size_t *n, char *why, size_t whylen)
{
    struct eq_case ref = {.strategy = DDP_NAIVE,
                          .world = 1,
                          .batch = k->batch * k->world * k->accumulate,
                          .accumulate = 1,
                          .bucket_bytes = k->bucket_bytes,
                          .clip = k->clip};
    float *p[1] = {NULL};
    if (eq_run(&ref, p, n, NULL, why, whylen) < 0) {
        free(p[0]);
        return NULL;
    }
    return p[0];
}

/* Compares every rank with the reference and with rank 0; returns the largest
 * difference from the reference in *maxdiff. */
static int eq_compare(const struct eq_case *k, float **p, const float *ref, size_t n,
                      double atol, double rtol, double *maxdiff, char *why, size_t whylen)
{
    *maxdiff = 0;
    for (int r = 0; r < k->world; r++) {
        if (r > 0 && memcmp(p[r], p[0], n * sizeof(float)) != 0) {
            snprintf(why, whylen, "rank %d's parameters differ from rank 0's", r);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)p[r][i] - ref[i]);
            if (d > *maxdiff)
                *maxdiff = d;
            if (!(d <= atol + rtol * fabs(ref[i]))) {
                snprintf(why, whylen, "rank %d parameter %zu: %.9g against %.9g", r, i, p[r][i],
                         ref[i]);
                return -1;
            }
        }
    }
    return 0;
}

/* A case of the equivalence tests on lenet5, in host mode. */
static struct eq_case eq_case_of(enum ddp_strategy strategy, enum ddp_compression compression,
                                 int world, int batch, int accumulate, size_t bucket_bytes)
{
    return (struct eq_case){.strategy = strategy,
                            .compression = compression,
                            .world = world,
                            .batch = batch,
                            .accumulate = accumulate,
                            .bucket_bytes = bucket_bytes};
}

static void eq_check(struct eq_case k, double atol)
{
    char why[600] = "";
    size_t n = 0, nref = 0;
    float *p[MAX_W] = {0};
    float *ref = eq_reference(&k, &nref, why, sizeof why);
    T_CHECK_MSG(ref, "reference: %s", why);
    int rc = eq_run(&k, p, &n, NULL, why, sizeof why);
    double maxdiff = 0;
    if (rc == 0 && n != nref) {
        snprintf(why, sizeof why, "%zu parameters against %zu", n, nref);
        rc = -1;
    }
    if (rc == 0)
        rc = eq_compare(&k, p, ref, n, atol, 1e-4, &maxdiff, why, sizeof why);
    fprintf(stderr, "    %s%s world %d batch %d accumulate %d: max |diff| %.3g\n",
            ddp_strategy_name(k.strategy),
            k.compression == DDP_COMPRESS_FP16   ? "+fp16"
            : k.compression == DDP_COMPRESS_BF16 ? "+bf16"
                                                 : "",
            k.world, k.batch, k.accumulate, maxdiff);
    eq_free(p, MAX_W);
    free(ref);
    T_CHECK_MSG(rc == 0, "%s%s world %d: %s", ddp_strategy_name(k.strategy),
                k.compression ? " compressed" : "", k.world, why);
}

#define SMALL_BUCKETS ((size_t)40000) /* lenet5 (61,706 floats) in ~7 buckets */

static void test_ddp_strategies_match_one_rank(void)
{
    for (int s = DDP_NAIVE; s <= DDP_ZERO2; s++)
        for (int w = 2; w <= 3; w++)
            eq_check(
                eq_case_of((enum ddp_strategy)s, DDP_COMPRESS_NONE, w, 4, 1, SMALL_BUCKETS),
                2e-5);
}

static void test_ddp_four_ranks_and_large_buckets(void)
{
    /* one bucket holding everything (the 25 MiB default), and ddp's 1 MiB first bucket */
    eq_check(eq_case_of(DDP_DDP, DDP_COMPRESS_NONE, 4, 2, 1, 25u << 20), 2e-5);
    eq_check(eq_case_of(DDP_ZERO2, DDP_COMPRESS_NONE, 4, 2, 1, SMALL_BUCKETS), 2e-5);
}

static void test_ddp_accumulation(void)
{
    eq_check(eq_case_of(DDP_DDP, DDP_COMPRESS_NONE, 2, 2, 3, SMALL_BUCKETS), 2e-5);
    eq_check(eq_case_of(DDP_ZERO1, DDP_COMPRESS_NONE, 3, 2, 2, SMALL_BUCKETS), 2e-5);
    eq_check(eq_case_of(DDP_HOROVOD, DDP_COMPRESS_NONE, 2, 2, 2, SMALL_BUCKETS), 2e-5);
}

static void test_ddp_compression(void)
{
    eq_check(eq_case_of(DDP_DDP, DDP_COMPRESS_FP16, 3, 4, 1, SMALL_BUCKETS), 5e-4);
    eq_check(eq_case_of(DDP_ZERO2, DDP_COMPRESS_BF16, 3, 4, 1, SMALL_BUCKETS), 3e-3);
    eq_check(eq_case_of(DDP_HOROVOD, DDP_COMPRESS_BF16, 2, 4, 1, SMALL_BUCKETS), 3e-3);
}

/* clip_grad_norm (issue 33), one semantics for every strategy: the global norm of the
 * averaged gradients after the exchange (ZeRO: the shards' sums of squares allreduced),
 * every gradient scaled by clip / (norm + 1e-6). A clip below every step's norm (each step
 * checks it clipped) must leave each strategy's parameters as one rank's with the whole
 * batch, clipped the same way: a norm of one rank's shard only, or of the gradients before
 * averaging, scales by a different factor and moves the parameters by far more than the
 * tolerance (the clipped update is lr * clip in norm: 1e-3 here). */
static void test_ddp_clip_grad_norm(void)
{
    for (int s = DDP_NAIVE; s <= DDP_ZERO2; s++) {
        struct eq_case k = eq_case_of((enum ddp_strategy)s, DDP_COMPRESS_NONE, 2, 4, 1,
                                      SMALL_BUCKETS);
        k.clip = 0.02;
        eq_check(k, 2e-5);
    }
    struct eq_case acc = eq_case_of(DDP_ZERO1, DDP_COMPRESS_NONE, 3, 2, 2, SMALL_BUCKETS);
    acc.clip = 0.02;
    eq_check(acc, 2e-5);
}

/* Bucket layout: PyTorch's rule on real models; sizes cover the arena exactly. */
/* Device mode (the GPU path's ddp, ddp_set_device) with CPU hooks over the same memory
 * steps exactly as the host path: same exchanges, averaging, accumulation scale and
 * update, bit for bit. */
static void test_ddp_device_mode_matches_host(void)
{
    struct eq_case cases[] = {
        eq_case_of(DDP_NAIVE, DDP_COMPRESS_NONE, 2, 4, 1, SMALL_BUCKETS),
        eq_case_of(DDP_DDP, DDP_COMPRESS_NONE, 2, 2, 2, SMALL_BUCKETS),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[600] = "";
        size_t n_host = 0, n_dev = 0;
        float *host[MAX_W] = {0}, *dev[MAX_W] = {0};
        struct eq_case k = cases[i];
        int rc = eq_run(&k, host, &n_host, NULL, why, sizeof why);
        k.device = true;
        if (rc == 0)
            rc = eq_run(&k, dev, &n_dev, NULL, why, sizeof why);
        T_CHECK_MSG(rc == 0, "%s: %s", ddp_strategy_name(k.strategy), why);
        if (rc == 0) {
            T_EQ_INT((long)n_dev, (long)n_host);
            for (int r = 0; r < k.world; r++)
                T_CHECK_MSG(memcmp(dev[r], host[r], n_host * sizeof(float)) == 0,
                            "%s rank %d: device mode differs from the host path",
                            ddp_strategy_name(k.strategy), r);
        }
        eq_free(host, MAX_W);
        eq_free(dev, MAX_W);
    }
}

/* Exposed and total communication (ddp.h "Timing") per strategy at 2 ranks over TCP, on
 * lenet5 in a few buckets (some compressed) and ddp on the wide MLP: every step of every
 * rank has 0 < exposed <= total; naive, which launches and waits back to back, has
 * exposed == total to the nanosecond (overlap exactly 0); zero1, which launches
 * everything after backward and waits at once, overlaps only its launches' copies with
 * the operations before them (under half, loosely); ddp and zero2, whose buckets are in
 * flight while backward computes, have some overlap over the steps of a rank. The bounds
 * on the overlapping strategies are loose and summed over steps, as the machine may be
 * loaded: a bucket launched mid-backward is in flight at least until its peer launches it
 * too, while this rank goes on computing, so the summed overlap is positive on any
 * schedule. */
static void test_ddp_exposed_within_total(void)
{
    struct eq_case cases[] = {
        eq_case_of(DDP_NAIVE, DDP_COMPRESS_NONE, 2, 8, 1, SMALL_BUCKETS),
        eq_case_of(DDP_DDP, DDP_COMPRESS_NONE, 2, 32, 1, 25u << 20), /* made wide below */
        eq_case_of(DDP_HOROVOD, DDP_COMPRESS_NONE, 2, 8, 1, SMALL_BUCKETS),
        eq_case_of(DDP_ZERO1, DDP_COMPRESS_NONE, 2, 8, 2, SMALL_BUCKETS),
        eq_case_of(DDP_ZERO2, DDP_COMPRESS_BF16, 2, 8, 1, SMALL_BUCKETS),
        eq_case_of(DDP_NAIVE, DDP_COMPRESS_FP16, 2, 8, 1, SMALL_BUCKETS),
    };
    cases[1].wide = true; /* ddp's 1 MiB first bucket in flight during backward */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct eq_case *k = &cases[i];
        const char *name = ddp_strategy_name(k->strategy);
        char why[600] = "";
        size_t n = 0;
        float *p[MAX_W] = {0};
        struct ddp_step_stats st[MAX_W][STEPS];
        memset(st, 0, sizeof st);
        int rc = eq_run(k, p, &n, st, why, sizeof why);
        eq_free(p, MAX_W);
        T_CHECK_MSG(rc == 0, "%s: %s", name, why);
        if (rc < 0)
            continue;
        for (int r = 0; r < k->world; r++) {
            int64_t total = 0, exposed = 0;
            for (int s = 0; s < STEPS; s++) {
                const struct ddp_step_stats *x = &st[r][s];
                T_CHECK_MSG(x->ops > 0 && x->exposed_ns > 0 && x->exposed_ns <= x->comm_ns,
                            "%s rank %d step %d: %d ops, exposed %lld ns of %lld", name, r, s,
                            x->ops, (long long)x->exposed_ns, (long long)x->comm_ns);
                if (k->strategy == DDP_NAIVE)
                    T_CHECK_MSG(x->exposed_ns == x->comm_ns,
                                "naive rank %d step %d: exposed %lld ns of %lld", r, s,
                                (long long)x->exposed_ns, (long long)x->comm_ns);
                total += x->comm_ns;
                exposed += x->exposed_ns;
            }
            double overlap = 1.0 - (double)exposed / (double)total;
            fprintf(stderr, "    %s%s rank %d: comm %.3f ms, exposed %.3f ms, overlap %.3f\n",
                    name, k->compression ? " compressed" : "", r, total / 1e6 / STEPS,
                    exposed / 1e6 / STEPS, overlap);
            if (k->strategy == DDP_ZERO1)
                T_CHECK_MSG(overlap < 0.5, "zero1 rank %d: overlap %.3f", r, overlap);
            if (k->strategy == DDP_DDP || k->strategy == DDP_ZERO2)
                T_CHECK_MSG(overlap > 0, "%s rank %d: overlap %.3f", name, r, overlap);
        }
    }
}

/* ddp_memory is exact: lenet5's parameter arena, its gradients, and the optimizer state
 * of sgd with momentum (one float per parameter) and adam (two), whole for ddp and
 * sharded for zero1 / zero2 at 2 and 4 ranks: each rank holds the chunks it owns of
 * every bucket (computed here from the bucket sizes alone), the ranks' shards add up to
 * ddp's state exactly, and zero2 keeps only its gradient shard, the rest of the arena
 * counted as the reduce-scatter's buffer. No rank communicates: ddp_init and the
 * accounting only read the communicator's rank, world and backend buffers. */
static void test_ddp_memory_accounting(void)
{
    struct err e = {0};
    struct nn_model m;
    nn_set_threads(1); /* as eq_train: libgomp's threads are invisible to TSan */
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "lenet5", 1, 28, 28, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    const int64_t n = (int64_t)m.nparams, f = 4, backend = 12345;
    int64_t sizes[64];
    static const int worlds[] = {2, 4};
    static const enum ddp_strategy strategies[] = {DDP_DDP, DDP_ZERO1, DDP_ZERO2};
    static const enum nn_optim_type optims[] = {NN_OPTIM_SGD, NN_OPTIM_ADAM};
    for (size_t wi = 0; wi < 2; wi++)
        for (size_t si = 0; si < 3; si++)
            for (size_t oi = 0; oi < 2; oi++) {
                int W = worlds[wi];
                enum ddp_strategy strat = strategies[si];
                struct ddp_config dc = {.strategy = strat, .bucket_bytes = SMALL_BUCKETS};
                int nb = ddp_bucket_sizes(&m, &dc, sizes, 64);
                struct nn_optim_cfg oc = nn_optim_defaults(optims[oi]);
                oc.momentum = 0.9;
                int64_t k = optims[oi] == NN_OPTIM_SGD ? 1 : 2, owned_sum = 0;
                for (int r = 0; r < W; r++) {
                    struct comm c = {.rank = r, .world_size = W, .buffer_bytes = backend};
                    struct ddp d;
                    struct nn_optim o;
                    T_OK(ddp_init(&d, &dc, &c, &m, &e));
                    T_OK(ddp_optim_init(&d, &o, &oc, &e));
                    struct ddp_memory mem;
                    ddp_memory(&d, &o, &mem);
                    int64_t own = 0; /* rank r's chunk of each bucket */
                    for (int b = 0; b < nb; b++) {
                        int64_t len = sizes[b] / f, chunk = (len + W - 1) / W;
                        int64_t left = len - (int64_t)r * chunk;
                        own += left <= 0 ? 0 : left < chunk ? left : chunk;
                    }
                    const char *name = ddp_strategy_name(strat);
                    bool zero = strat != DDP_DDP;
                    T_EQ_INT(mem.params, n * f);
                    T_EQ_INT(mem.buffers, (int64_t)m.nbuffers * f);
                    T_CHECK_MSG(mem.optimizer == k * (zero ? own : n) * f,
                                "%s W=%d rank %d: optimizer %lld, want %lld", name, W, r,
                                (long long)mem.optimizer,
                                (long long)(k * (zero ? own : n) * f));
                    T_EQ_INT(mem.grads, (strat == DDP_ZERO2 ? own : n) * f);
                    T_CHECK_MSG(mem.comm >= backend + (strat == DDP_ZERO2 ? (n - own) * f : 0),
                                "%s W=%d rank %d: comm %lld", name, W, r, (long long)mem.comm);
                    if (strat == DDP_DDP)
                        T_EQ_INT(mem.comm, backend); /* buckets are slices of the arena */
                    owned_sum += own;
                    nn_optim_cleanup(&o);
                    ddp_cleanup(&d);
                }
                T_EQ_INT(owned_sum, n); /* the shards partition the parameters */
            }
    nn_model_destroy(&m);
}

/* What device mode refuses, naming the field: strategies and compression whose staging
 * is host memory, and missing arenas or hooks. */
static void test_ddp_device_mode_refusals(void)
{
    struct err e = {0};
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "lenet5", 1, 28, 28, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    struct comm c = {.rank = 0, .world_size = 1};
    struct eq_dev dv;
    struct ddp_device dev = eq_device_of(&m, &dv);
    enum ddp_strategy refused[] = {DDP_HOROVOD, DDP_ZERO1, DDP_ZERO2};
    for (size_t i = 0; i < 3; i++) {
        struct ddp d;
        struct ddp_config cfg = {
            .strategy = refused[i], .bucket_bytes = 1 << 20, .fusion_bytes = 1 << 20};
        T_OK(ddp_init(&d, &cfg, &c, &m, &e));
        T_CHECK(ddp_set_device(&d, &dev, &e) < 0);
        T_EQ_STR(e.field, "strategy");
        T_CHECK_MSG(strstr(e.msg, ddp_strategy_name(refused[i])) != NULL, "%s", e.msg);
        ddp_cleanup(&d);
    }
    struct ddp d;
    struct ddp_config cfg = {
        .strategy = DDP_DDP, .compression = DDP_COMPRESS_BF16, .bucket_bytes = 1 << 20};
    T_OK(ddp_init(&d, &cfg, &c, &m, &e));
    T_CHECK(ddp_set_device(&d, &dev, &e) < 0);
    T_EQ_STR(e.field, "compression");
    T_CHECK_MSG(strstr(e.msg, "bf16") != NULL, "%s", e.msg);
    ddp_cleanup(&d);
    cfg.compression = DDP_COMPRESS_NONE;
    T_OK(ddp_init(&d, &cfg, &c, &m, &e));
    struct ddp_device no_hooks = dev;
    no_hooks.update = NULL;
    T_CHECK(ddp_set_device(&d, &no_hooks, &e) < 0);
    T_CHECK(!d.on_device);
    T_OK(ddp_set_device(&d, &dev, &e));
    T_CHECK(d.on_device);
    ddp_cleanup(&d);
    nn_model_destroy(&m);
}

static void test_ddp_bucket_sizes(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "resnet50", 3, 224, 224, 1000, NULL, &e));
    int64_t sizes[256];
    struct ddp_config dc = {.strategy = DDP_DDP, .bucket_bytes = 25u << 20};
    int n = ddp_bucket_sizes(&m, &dc, sizes, 256);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += sizes[i];
    size_t params = 0;
    int count;
    const struct nn_param *pi = nn_model_param_info(&m, &count);
    for (int i = 0; i < count; i++)
        params += pi[i].len;
    T_EQ_INT(total, (int64_t)params * 4);
    T_CHECK(n >= 4);
    /* the first bucket closes once it holds 1 MiB: the fc layer alone (2049000 floats) */
    T_EQ_INT(sizes[0], (2048 * 1000 + 1000) * 4);
    for (int i = 1; i < n - 1; i++) /* middle buckets reached 25 MiB, by less than a tensor */
        T_CHECK_MSG(sizes[i] >= (25 << 20) && sizes[i] < (25 << 20) + (10 << 20),
                    "bucket %d: %lld bytes", i, (long long)sizes[i]);
    dc.strategy = DDP_NAIVE;
    T_EQ_INT(ddp_bucket_sizes(&m, &dc, sizes, 256), count); /* one per tensor */
    nn_model_destroy(&m);
}

static void test_ddp_names(void)
{
    T_EQ_INT(ddp_strategy_parse("zero2"), DDP_ZERO2);
    T_EQ_INT(ddp_strategy_parse("fsdp"), -1);
    T_EQ_STR(ddp_strategy_name(DDP_HOROVOD), "horovod");
    T_EQ_INT(ddp_compression_parse("bf16"), DDP_COMPRESS_BF16);
    T_EQ_INT(ddp_compression_parse("int8"), -1);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    if (eq_write_dataset() < 0) {
        fprintf(stderr, "cannot write the test dataset under /tmp\n");
        return 1;
    }
    TEST_RUN(test_ddp_names);
    TEST_RUN(test_ddp_bucket_sizes);
    TEST_RUN(test_ddp_memory_accounting);
    TEST_RUN(test_ddp_strategies_match_one_rank);
    TEST_RUN(test_ddp_four_ranks_and_large_buckets);
    TEST_RUN(test_ddp_accumulation);
    TEST_RUN(test_ddp_compression);
    TEST_RUN(test_ddp_clip_grad_norm);
    TEST_RUN(test_ddp_device_mode_matches_host);
    TEST_RUN(test_ddp_exposed_within_total);
    TEST_RUN(test_ddp_device_mode_refusals);
    unlink(eq_images);
    unlink(eq_labels);
    return test_end();
}
