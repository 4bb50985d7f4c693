/* Unit tests for worker/pipeline: pipeline parallelism done right.
 *
 * Equivalence: D replicas of P stages, each replica's batch of B samples cut into M
 * micro-batches, after k optimizer steps hold the parameters of one rank training the
 * whole model on the D*B samples, for both schedules, P = 2 and 3, with and without data
 * parallelism (the replicas of a stage exchanging with ddp, horovod or naive), M = 1
 * being plain model parallelism. Ranks are forked processes over the real TCP backend, as
 * in test_ddp: a world mesh for the activations and one mesh per stage (its own
 * namespace) for the gradients; each rank sends its stage's parameters back with their
 * origins, and the parent reassembles the whole model from the stages.
 *
 * The model is gpt2-tiny at a few tokens: layer norm works per token, so micro-batches
 * change nothing but the order of sums, and it has a weight tied across the first and
 * the last stage (the token embedding and the output projection), whose two copies must
 * end equal and equal to the reference's. No dropout, no batch norm.
 *
 * Tolerance: as test_ddp's (float32 summation order only; 3 SGD steps of lr 0.05 with
 * momentum): 2e-5 + 1e-4 |p|. A micro-batch's gradient counted twice or lost, a missing
 * division by M or D, activations of one micro-batch used for another, or a tied copy not
 * synchronised move parameters by 1e-3 or more. */
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/net.h"
#include "tests/unit/test.h"
#include "worker/comm/tcp.h"
#include "worker/ddp/ddp.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"
#include "worker/pipeline.h"

#define MAX_W 6
#define STEPS 3
enum { T = 8, V = 32, B = 4 }; /* tokens, vocabulary, samples per replica's step */

struct pp_case {
    int stages, replicas, micro;
    enum pipe_schedule schedule;
    enum ddp_strategy strategy;
    bool balance_time; /* stages cut by rank 0's layer times */
    const char *split; /* the layers stages 1.. start at; NULL: balanced */
};

/* The tokens and targets of step s, sample i (the same for every rank and the
 * reference). */
static void pp_data(int s, int first, int n, float *x, int32_t *y)
{
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            uint64_t h = nn_hash64(((uint64_t)s << 40) ^ ((uint64_t)(first + i) << 16) ^
                                   (uint64_t)t);
            x[i * T + t] = (float)(h % V);
            y[i * T + t] = (int32_t)((h >> 20) % V);
        }
}

static int pp_whole(struct nn_model *m, struct err *e)
{
    nn_model_init(m);
    return nn_models_build(m, "gpt2-tiny", 1, 1, T, V, NULL, e) ||
                   nn_model_init_params(m, 42, e)
               ? -1
               : 0;
}

static struct nn_optim_cfg pp_optim(void)
{
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.lr = 0.05;
    oc.momentum = 0.9;
    return oc;
}

/* Rank 0's profile (pipeline.h struct pipe_profile) carries the whole batch's timing:
 * with one micro-batch it is the micro-batch's own sums, else a second timing of its own. */
static int pp_profile_check(const struct pipeline *p, int micro, struct err *e)
{
    const struct pipe_profile *pr = p->profile;
    if (!pr || pr->batch_forward_ns <= 0 || pr->batch_backward_ns <= 0)
        return err_set(e, ERR_INTERNAL, NULL, "rank 0's profile has no batch timing");
    int64_t f = 0, b = 0;
    for (int i = 0; i < pr->nlayers; i++) {
        f += pr->forward_ns[i];
        b += pr->backward_ns[i];
    }
    if (micro == 1 && (f != pr->batch_forward_ns || b != pr->batch_backward_ns))
        return err_set(e, ERR_INTERNAL, NULL, "one micro-batch: its sums are the batch's");
    return 0;
}

/* One rank: its stage, STEPS steps; *out gets [origin, value] pairs of its parameters. */
static int pp_train(const struct pp_case *k, struct comm *world, struct comm *dp, float **out,
                    size_t *n, struct err *e)
{
    struct nn_model whole;
    struct pipeline p;
    struct ddp d;
    struct nn_optim o;
    bool have_p = false, have_d = false, have_o = false;
    int rc = -1;
    nn_set_threads(1);
    struct pipe_config pc = {.stages = k->stages,
                             .micro_batches = k->micro,
                             .schedule = k->schedule,
                             .batch = B,
                             .balance_time = k->balance_time,
                             .split = k->split};
    struct ddp_config dc = {
        .strategy = k->strategy, .bucket_bytes = 64 << 10, .fusion_bytes = 64 << 10};
    struct nn_optim_cfg oc = pp_optim();
    float x[B * T];
    int32_t y[B * T];
    if (pp_whole(&whole, e) < 0 || pipe_init(&p, &pc, &whole, world, e) < 0)
        goto out;
    have_p = true;
    if (world->rank == 0 && pp_profile_check(&p, k->micro, e) < 0)
        goto out;
    nn_model_destroy(&whole);
    if (ddp_init(&d, &dc, dp, pipe_model(&p), e) < 0)
        goto out;
    have_d = true;
    if (ddp_optim_init(&d, &o, &oc, e) < 0)
        goto out;
    have_o = true;
    for (int s = 0; s < STEPS; s++) {
        struct pipe_stats st;
        pp_data(s, p.replica * B, B, x, y);
        if (pipe_train_step(&p, x, y, (uint64_t)s, &d, ddp_grad_hook, &d, NULL, &st, e) < 0 ||
            ddp_finish(&d, k->micro, e) < 0 || pipe_sync_tied(&p, &st, e) < 0 ||
            ddp_optim_step(&d, &o, oc.lr, e) < 0)
            goto out;
        if (pipe_is_last(&p) && !(st.loss_sum > 0)) {
            err_set(e, ERR_INTERNAL, NULL, "the last stage saw no loss");
            goto out;
        }
    }
    const struct nn_model *m = pipe_model(&p);
    *n = 2 * m->nparams;
    *out = malloc(*n * sizeof **out);
    for (int i = 0; *out && i < m->nparam_tensors; i++) {
        const struct nn_param *q = &m->param_info[i];
        for (size_t j = 0; j < q->len; j++) {
            (*out)[2 * (q->offset + j)] = (float)q->origin;
            (*out)[2 * (q->offset + j) + 1] = m->params.data[q->offset + j];
        }
    }
    rc = *out ? 0 : err_set(e, ERR_NOMEM, NULL, "out of memory");
out:
    if (have_o)
        nn_optim_cleanup(&o);
    if (have_d)
        ddp_cleanup(&d);
    if (have_p)
        pipe_cleanup(&p);
    nn_model_destroy(&whole);
    return rc;
}

static void pp_child(const struct pp_case *k, int rank, struct comm_tcp *tw,
                     struct comm_tcp *td, const char *const *waddrs, const char *const *daddrs,
                     int fd)
{
    struct err e = {0};
    float *p = NULL;
    size_t n = 0;
    struct comm *world = comm_tcp_connect(tw, waddrs, &e);
    struct comm *dp = world ? comm_tcp_connect(td, daddrs, &e) : NULL;
    if (!world)
        comm_tcp_discard(td);
    int rc = dp ? pp_train(k, world, dp, &p, &n, &e) : -1;
    if (rc == 0 && comm_barrier(world, &e) < 0)
        rc = -1;
    comm_destroy(dp);
    comm_destroy(world);
    uint64_t len = rc == 0 ? n : 0;
    struct err io;
    net_send_all(fd, &len, sizeof len, -1, NULL, &io);
    if (rc == 0)
        net_send_all(fd, p, n * sizeof *p, -1, NULL, &io);
    else
        net_send_all(fd, e.msg, sizeof e.msg, -1, NULL, &io);
    _exit(rc == 0 ? 0 : 1);
}

static struct comm_tcp *pp_listen(int rank, int size, const char *ns, char *addr, size_t cap,
                                  struct err *e)
{
    struct comm_tcp_config cfg = {.rank = rank,
                                  .world_size = size,
                                  .listen_host = "127.0.0.1",
                                  .timeout_ms = 30000,
                                  .algorithm = "auto",
                                  .secret = "pp",
                                  .ns = ns};
    struct comm_tcp *t = comm_tcp_listen(&cfg, e);
    if (t)
        snprintf(addr, cap, "%s", comm_tcp_address(t));
    return t;
}

/* Runs k; out[r] gets rank r's [origin, value] pairs (owned), n[r] their count. */
static int pp_run(const struct pp_case *k, float **out, size_t *n, char *why, size_t whylen)
{
    int W = k->stages * k->replicas;
    struct comm_tcp *tw[MAX_W], *td[MAX_W];
    char waddr[MAX_W][64], daddr[MAX_W][64], ns[MAX_W][16];
    const char *wp[MAX_W], *dp[MAX_W][MAX_W];
    struct err e = {0};
    for (int r = 0; r < W; r++) {
        int stage = r % k->stages, replica = r / k->stages;
        snprintf(ns[r], sizeof ns[r], "pp/s%d/", stage);
        tw[r] = pp_listen(r, W, NULL, waddr[r], sizeof waddr[r], &e);
        td[r] = tw[r] ? pp_listen(replica, k->replicas, ns[r], daddr[r], sizeof daddr[r], &e)
                      : NULL;
        if (!td[r]) {
            snprintf(why, whylen, "listen: %s", e.msg);
            return -1;
        }
        wp[r] = waddr[r];
    }
    for (int r = 0; r < W; r++) /* each stage's mesh: its replicas' addresses in order */
        for (int d = 0; d < k->replicas; d++)
            dp[r][d] = daddr[d * k->stages + r % k->stages];
    int fds[MAX_W][2];
    pid_t pid[MAX_W];
    for (int r = 0; r < W; r++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds[r]) < 0)
            return -1;
        pid[r] = fork();
        if (pid[r] == 0) {
            close(fds[r][0]);
            pp_child(k, r, tw[r], td[r], wp, dp[r], fds[r][1]);
        }
        close(fds[r][1]);
    }
    int rc = 0;
    for (int r = 0; r < W; r++) {
        uint64_t len = 0;
        out[r] = NULL;
        if (net_recv_all(fds[r][0], &len, sizeof len, -1, NULL, &e) < 0 || len == 0) {
            char msg[sizeof e.msg] = "(nothing)";
            if (len == 0)
                net_recv_all(fds[r][0], msg, sizeof msg, -1, NULL, &e);
            msg[sizeof msg - 1] = '\0';
            snprintf(why, whylen, "rank %d: %s", r, msg);
            rc = -1;
        } else {
            n[r] = len;
            out[r] = malloc(len * sizeof(float));
            if (!out[r] ||
                net_recv_all(fds[r][0], out[r], len * sizeof(float), -1, NULL, &e) < 0)
                rc = -1;
        }
        close(fds[r][0]);
    }
    for (int r = 0; r < W; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        comm_tcp_discard(tw[r]);
        comm_tcp_discard(td[r]);
    }
    return rc;
}

/* The reference: one rank, the whole model, batch D*B, the same steps. */
static float *pp_reference(const struct pp_case *k, size_t *n, struct err *e)
{
    struct nn_model m;
    struct nn_optim o;
    int N = k->replicas * B;
    float *x = malloc((size_t)N * T * sizeof *x), *out = NULL;
    int32_t *y = malloc((size_t)N * T * sizeof *y);
    struct nn_optim_cfg oc = pp_optim();
    nn_set_threads(1);
    if (pp_whole(&m, e) < 0 || nn_model_prepare(&m, N, NN_BACKEND_FAST, 1, e) < 0 ||
        nn_optim_init(&o, &oc, m.nparams, e) < 0)
        goto out;
    for (int s = 0; s < STEPS; s++) {
        double loss;
        int right;
        pp_data(s, 0, N, x, y);
        nn_model_zero_grad(&m);
        if (nn_model_forward(&m, x, 1, (uint64_t)s, e) < 0 ||
            nn_model_loss(&m, y, N, &loss, &right, e) < 0 ||
            nn_model_backward(&m, NULL, NULL, e) < 0)
            goto opt;
        nn_optim_step(&o, m.params.data, m.grads.data, oc.lr);
    }
    *n = m.nparams;
    out = malloc(m.nparams * sizeof *out);
    if (out)
        memcpy(out, m.params.data, m.nparams * sizeof *out);
opt:
    nn_optim_cleanup(&o);
out:
    nn_model_destroy(&m);
    free(x);
    free(y);
    return out;
}

static void pp_check(struct pp_case k)
{
    struct err e = {0};
    char why[512] = "";
    float *got[MAX_W];
    size_t n[MAX_W], nref = 0;
    struct nn_model whole;
    T_OK(pp_whole(&whole, &e));
    float *ref = pp_reference(&k, &nref, &e);
    T_CHECK_MSG(ref != NULL, "reference: %s", e.msg);
    int rc = pp_run(&k, got, n, why, sizeof why);
    T_CHECK_MSG(rc == 0, "%d stages x %d replicas, %d micro-batches, %s: %s", k.stages,
                k.replicas, k.micro, k.schedule == PIPE_GPIPE ? "gpipe" : "1f1b", why);
    if (rc != 0 || !ref) {
        free(ref);
        nn_model_destroy(&whole);
        return;
    }
    /* every whole-model value is held by exactly the stages that own or copy it, on every
     * replica, and each holder agrees with the reference */
    int *seen = calloc(nref, sizeof *seen), bad = 0;
    double worst = 0;
    for (int r = 0; r < k.stages * k.replicas; r++) {
        size_t off_in_param = 0;
        int prev_origin = -1;
        for (size_t i = 0; i < n[r] / 2; i++) {
            int origin = (int)got[r][2 * i];
            off_in_param = origin == prev_origin ? off_in_param + 1 : 0;
            prev_origin = origin;
            size_t at = whole.param_info[origin].offset + off_in_param;
            double v = got[r][2 * i + 1], want = ref[at], d = fabs(v - want);
            worst = fmax(worst, d / (2e-5 + 1e-4 * fabs(want)));
            if (d > 2e-5 + 1e-4 * fabs(want) && !bad) {
                fprintf(stderr, "    rank %d: %s[%zu] is %.7g, the reference %.7g\n", r,
                        whole.param_info[origin].name, off_in_param, v, want);
                bad = 1;
            }
            seen[at]++;
        }
    }
    size_t missing = 0;
    for (size_t i = 0; i < nref; i++)
        missing += seen[i] < k.replicas;
    T_CHECK_MSG(!bad,
                "%d stages x %d replicas, %d micro-batches, %s: worst %.2f of the "
                "tolerance",
                k.stages, k.replicas, k.micro, k.schedule == PIPE_GPIPE ? "gpipe" : "1f1b",
                worst);
    T_CHECK_MSG(missing == 0, "%zu values held by no stage", missing);
    free(seen);
    for (int r = 0; r < k.stages * k.replicas; r++)
        free(got[r]);
    free(ref);
    nn_model_destroy(&whole);
}

static void test_pipeline_gpipe(void)
{
    pp_check((struct pp_case){2, 1, 4, PIPE_GPIPE, DDP_DDP, false, NULL});
    pp_check((struct pp_case){3, 2, 2, PIPE_GPIPE, DDP_HOROVOD, false, NULL});
}

static void test_pipeline_1f1b(void)
{
    pp_check((struct pp_case){3, 1, 4, PIPE_1F1B, DDP_DDP, false, NULL});
    pp_check((struct pp_case){2, 2, 4, PIPE_1F1B, DDP_DDP, false, NULL});
    pp_check((struct pp_case){2, 3, 2, PIPE_1F1B, DDP_NAIVE, false, NULL});
    /* cut by measured time: rank 0's times decide for every rank */
    pp_check((struct pp_case){3, 2, 2, PIPE_1F1B, DDP_DDP, true, NULL});
    /* cut where the spec says: the first block's MLP half, the second block */
    pp_check((struct pp_case){3, 1, 2, PIPE_GPIPE, DDP_DDP, false,
                              "transformer.h.0.ln_2,transformer.h.1.ln_1"});
}

/* micro_batches 1: plain model parallelism, each stage idle while the other computes. */
static void test_pipeline_model_parallel(void)
{
    pp_check((struct pp_case){2, 1, 1, PIPE_1F1B, DDP_DDP, false, NULL});
    pp_check((struct pp_case){3, 1, 1, PIPE_GPIPE, DDP_DDP, false, NULL});
}

/* pipe_init refuses what cannot be cut or split, naming the field. */
static void test_pipeline_refusals(void)
{
    struct err e;
    struct nn_model whole;
    struct pipeline p;
    T_OK(pp_whole(&whole, &e));
    struct comm fake = {.rank = 0, .world_size = 2};
    struct pipe_config pc = {.stages = 2, .micro_batches = 3, .batch = 4};
    T_CHECK(pipe_init(&p, &pc, &whole, &fake, &e) != 0); /* 3 does not divide 4 */
    T_EQ_STR(e.field, "pipeline");
    pipe_cleanup(&p);
    pc = (struct pipe_config){.stages = 8, .micro_batches = 1, .batch = 4};
    fake.world_size = 8;
    T_CHECK(pipe_init(&p, &pc, &whole, &fake, &e) != 0); /* 7 cuts needed, 6 exist */
    T_EQ_STR(e.field, "pipeline");
    T_CHECK(strstr(e.msg, "places to cut") != NULL);
    pipe_cleanup(&p);
    /* named cuts: each a place to cut, in order, one per stage after the first */
    static const char *const bad[] = {"transformer.h.0.attn,transformer.h.1.ln_1",
                                      "transformer.h.1.ln_1,transformer.h.0.ln_2",
                                      "transformer.h.0.ln_2",
                                      "transformer.h.0.ln_2,transformer.h.1.ln_1,ln_f"};
    fake.world_size = 3;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pc = (struct pipe_config){.stages = 3, .micro_batches = 1, .batch = 4, .split = bad[i]};
        T_CHECK(pipe_init(&p, &pc, &whole, &fake, &e) != 0);
        T_EQ_STR(e.field, "pipeline_split");
        if (i == 0)
            T_CHECK_MSG(strstr(e.msg, "stages can start at: transformer.h.0.ln_1") != NULL,
                        "%s", e.msg);
        pipe_cleanup(&p);
    }
    nn_model_destroy(&whole);
}

/* A whole batch whose activations cannot fit this node (a model pipelined for its
 * memory) is not timed: rank 0's profile keeps its micro-batch's layers and leaves the
 * batch's sums at 0 (the report then leaves them out), and the pipeline still starts. */
static void test_pipeline_batch_too_large(void)
{
    struct err e;
    struct nn_model whole;
    struct pipeline p;
    T_OK(pp_whole(&whole, &e));
    nn_set_threads(1);
    struct comm fake = {.rank = 0, .world_size = 2};
    /* 2^30 samples: far past any node's memory; micro-batches of 2 */
    struct pipe_config pc = {
        .stages = 2, .micro_batches = 1 << 29, .batch = 1 << 30, .schedule = PIPE_1F1B};
    T_OK(pipe_init(&p, &pc, &whole, &fake, &e));
    T_CHECK(p.profile && p.profile->forward_ns[0] > 0);
    T_CHECK(p.profile->batch_forward_ns == 0 && p.profile->batch_backward_ns == 0);
    pipe_cleanup(&p);
    nn_model_destroy(&whole);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    TEST_RUN(test_pipeline_gpipe);
    TEST_RUN(test_pipeline_1f1b);
    TEST_RUN(test_pipeline_model_parallel);
    TEST_RUN(test_pipeline_refusals);
    TEST_RUN(test_pipeline_batch_too_large);
    return test_end();
}
