/* Unit tests for worker/train_engine: the picker gives the CPU engine for device "cpu";
 * device "cuda" is the CUDA engine in a build with CUDA and cuDNN and otherwise an
 * ERR_INVALID on field "device" saying how to build it, also when a whole training run
 * asks for it; an unknown device is named. The CPU engine runs the model it was given:
 * on a small MLP its training and evaluation losses equal the plain-loop reference
 * engine's on the same weights and batch, backward fills the gradients and calls the hook
 * once per layer with parameters in reverse order, begin_step zeroes the gradients, the
 * update is never skipped, the host-timed phases are kept, there is no device peak, and
 * allreduce_host sums host values over a real two-rank TCP communicator (threads). */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "ddpb_config.h"
#include "tests/unit/test.h"
#include "worker/comm/tcp.h"
#include "worker/nn/model.h"
#include "worker/train_engines.h"
#include "worker/workload_train.h"

#define B 4
#define CLASSES 3

static void test_pick_cpu(void)
{
    struct err e = {0};
    const struct train_engine_ops *ops = train_engine_pick("cpu", &e);
    T_CHECK(ops == &train_engine_cpu);
    T_EQ_STR(ops->device, "cpu");
}

static void test_pick_cuda_by_build(void)
{
    struct err e = {0};
    const struct train_engine_ops *ops = train_engine_pick("cuda", &e);
    if (DDPB_HAVE_CUDA && DDPB_HAVE_CUDNN) {
        T_CHECK(ops != NULL);
        T_EQ_STR(ops->device, "cuda");
        return;
    }
    T_CHECK(ops == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "device");
    /* the first missing part of the build is named, with the option that adds it */
    const char *part = !DDPB_HAVE_CUDA ? "built without CUDA" : "built without cuDNN";
    const char *opt = !DDPB_HAVE_CUDA ? "-Dcuda=enabled" : "-Dcudnn=enabled";
    T_CHECK_MSG(strstr(e.msg, part) && strstr(e.msg, opt), "%s", e.msg);
}

static void test_pick_unknown_named(void)
{
    struct err e = {0};
    T_CHECK(train_engine_pick("tpu", &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "device");
    T_CHECK_MSG(strstr(e.msg, "\"tpu\""), "%s", e.msg);
}

/* A training run on device "cuda" in a build without the CUDA engine fails at the pick,
 * before it touches data or the communicator (NULL here). */
static void test_run_refuses_unbuilt_cuda(void)
{
    if (DDPB_HAVE_CUDA && DDPB_HAVE_CUDNN)
        return; /* the GPU tests (tests/gpu/) train there */
    struct spec s;
    memset(&s, 0, sizeof s);
    s.workload = SPEC_WORKLOAD_TRAIN;
    s.repeats = 1;
    snprintf(s.device, sizeof s.device, "cuda");
    snprintf(s.train.precision, sizeof s.train.precision, "fp32");
    struct err e = {0};
    struct train_outcome out = {.device_peak_bytes = 7};
    T_CHECK(workload_train_run(&s, NULL, NULL, NULL, NULL, NULL, &out, &e) < 0);
    T_EQ_STR(e.field, "device");
    T_EQ_INT(out.device_peak_bytes, -1);
}

/* 1x4x4 input, fc1 16->8, relu, fc2 8->3: two layers with parameters. */
static int mlp_build(struct nn_model *m, struct err *e)
{
    nn_model_init(m);
    int x = nn_model_input(m, 1, 4, 4);
    x = nn_model_flatten(m, "flat", x);
    x = nn_model_linear(m, "fc1", x, 8, 1);
    x = nn_model_act(m, "relu", x, NN_ACT_RELU);
    nn_model_linear(m, "fc2", x, CLASSES, 1);
    return nn_model_finish(m, e) < 0 || nn_model_init_params(m, 5, e) < 0 ? -1 : 0;
}

struct hook_log {
    int calls;
    size_t offsets[4];
};

static void hook_record(void *ctx, const struct nn_grad_ready *r)
{
    struct hook_log *h = ctx;
    if (h->calls < 4)
        h->offsets[h->calls] = r->offset;
    h->calls++;
}

static double arena_abs_sum(const struct nn_model *m)
{
    double s = 0;
    for (size_t i = 0; i < m->nparams; i++)
        s += fabs(m->grads.data[i]);
    return s;
}

/* The reference engine's loss on the same weights and batch. */
static int ref_loss(const float *x, const int32_t *y, int train, double *loss, struct err *e)
{
    struct nn_model r;
    int right = 0;
    int rc = mlp_build(&r, e) < 0 || nn_model_prepare(&r, B, NN_BACKEND_REF, 1, e) < 0 ||
                     nn_model_forward(&r, x, train, 0, e) < 0 ||
                     nn_model_loss(&r, y, B, loss, &right, e) < 0
                 ? -1
                 : 0;
    nn_model_destroy(&r);
    return rc;
}

static void batch_fill(float *x, int32_t *y)
{
    for (int i = 0; i < B * 16; i++)
        x[i] = (float)sin(0.37 * i);
    for (int i = 0; i < B; i++)
        y[i] = i % CLASSES;
}

static void cpu_engine_step(struct nn_model *m, struct train_engine *en)
{
    struct err e = {0};
    const struct train_engine_ops *ops = en->ops;
    float x[B * 16];
    int32_t y[B];
    batch_fill(x, y);
    double want = 0, loss = 0;
    int right = -1;
    T_OK(ref_loss(x, y, 1, &want, &e));
    ops->begin_step(en);
    T_OK(ops->forward(en, x, y, B, 1, 0, false, &e));
    struct hook_log h = {0};
    T_OK(ops->backward(en, hook_record, &h, &e));
    T_OK(ops->wait_loss(en, &loss, &right, &e));
    T_CHECK(isfinite(loss) && loss > 0);
    T_NEAR(loss, want, 1e-4);
    T_CHECK(right >= 0 && right <= B);
    T_EQ_INT(h.calls, 2);
    T_CHECK(h.offsets[0] > h.offsets[1]); /* fc2 first: reverse layer order */
    T_CHECK(arena_abs_sum(m) > 0);
    ops->begin_step(en);
    T_CHECK(arena_abs_sum(m) == 0);
    bool apply = false;
    T_OK(ops->begin_update(en, &apply, &e));
    T_CHECK(apply);
    ops->end_update(en, apply);
    struct train_phases ph = {.forward_ms = 1, .backward_ms = 2, .optimizer_ms = 3};
    T_OK(ops->end_step(en, &ph, &e));
    T_CHECK(ph.forward_ms == 1 && ph.backward_ms == 2 && ph.optimizer_ms == 3);
    T_EQ_INT(ops->peak_bytes(en), -1);
    /* evaluation: running statistics, no dropout, the same loss as the reference's */
    T_OK(ref_loss(x, y, 0, &want, &e));
    T_OK(ops->forward(en, x, y, B, 0, 0, false, &e));
    T_OK(ops->wait_loss(en, &loss, &right, &e));
    T_NEAR(loss, want, 1e-4);
}

static void test_cpu_engine_runs_the_model(void)
{
    struct err e = {0};
    struct nn_model m;
    T_OK(mlp_build(&m, &e));
    struct train_engine *en = train_engine_cpu.create(
        &m, &(struct train_engine_cfg){.batch = B, .precision = "fp32"}, &e);
    if (!en)
        nn_model_destroy(&m);
    T_CHECK_MSG(en != NULL, "%s", e.msg);
    T_CHECK(en->ops == &train_engine_cpu);
    cpu_engine_step(&m, en);
    en->ops->destroy(en);
    nn_model_destroy(&m);
}

/* precision bf16 on the CPU engine: the model is prepared on a bf16 path (which one is
 * the CPU's: nn_dnnl_bf16_probe), and fp32 leaves it off; the bf16 loss is the fp32 one
 * within bf16's rounding (the operands carry 8 significant bits: ~1e-2 of the loss). */
static void test_cpu_engine_bf16(void)
{
    struct err e = {0};
    struct nn_model m;
    T_OK(mlp_build(&m, &e));
    struct train_engine *en = train_engine_cpu.create(
        &m, &(struct train_engine_cfg){.batch = B, .precision = "bf16"}, &e);
    T_CHECK_MSG(en != NULL, "%s", e.msg);
    if (!en) {
        nn_model_destroy(&m);
        return;
    }
    enum nn_bf16 path = nn_model_bf16_path(&m);
    T_CHECK(path == NN_BF16_NATIVE || path == NN_BF16_EMULATED);
    fprintf(stderr, "    bf16 path: %s\n", nn_bf16_path_name(path));
    float x[B * 16];
    int32_t y[B];
    batch_fill(x, y);
    double want = 0, loss = 0;
    int right = 0;
    T_OK(ref_loss(x, y, 1, &want, &e));
    en->ops->begin_step(en);
    T_OK(en->ops->forward(en, x, y, B, 1, 0, false, &e));
    T_OK(en->ops->wait_loss(en, &loss, &right, &e));
    T_NEAR(loss, want, 2e-2 * want);
    T_CHECK(en->ops->loss_scale == NULL); /* no loss scaling on the CPU */
    en->ops->destroy(en);
    nn_model_destroy(&m);
    T_OK(mlp_build(&m, &e));
    en = train_engine_cpu.create(
        &m, &(struct train_engine_cfg){.batch = B, .precision = "fp32"}, &e);
    T_CHECK(en && nn_model_bf16_path(&m) == NN_BF16_OFF);
    if (en)
        en->ops->destroy(en);
    nn_model_destroy(&m);
}

/* One rank's engine sums {rank+1, -(rank+1), 10} over the mesh. */
struct reduce_job {
    struct comm_tcp *t;
    const char *const *addrs;
    int rank, rc;
    float v[3];
    struct err e;
};

static void *reduce_main(void *arg)
{
    struct reduce_job *j = arg;
    struct nn_model m;
    struct train_engine *en = NULL;
    struct comm *c = comm_tcp_connect(j->t, j->addrs, &j->e);
    j->v[0] = (float)(j->rank + 1), j->v[1] = -(float)(j->rank + 1), j->v[2] = 10;
    j->rc = -1;
    if (c && mlp_build(&m, &j->e) == 0) {
        if ((en = train_engine_cpu.create(
                 &m, &(struct train_engine_cfg){.batch = B, .precision = "fp32"}, &j->e)))
            j->rc = en->ops->allreduce_host(en, c, j->v, 3, &j->e);
        if (en)
            en->ops->destroy(en);
        nn_model_destroy(&m);
    }
    comm_destroy(c);
    return NULL;
}

static void test_cpu_engine_allreduce_host(void)
{
    struct err e = {0};
    struct reduce_job jobs[2];
    char addrs[2][64];
    const char *ap[2] = {addrs[0], addrs[1]};
    for (int r = 0; r < 2; r++) {
        struct comm_tcp_config cfg = {.rank = r,
                                      .world_size = 2,
                                      .listen_host = "127.0.0.1",
                                      .timeout_ms = 10000,
                                      .secret = "pw"};
        jobs[r] = (struct reduce_job){.rank = r, .addrs = ap, .t = comm_tcp_listen(&cfg, &e)};
        T_CHECK_MSG(jobs[r].t != NULL, "%s", e.msg);
        snprintf(addrs[r], sizeof addrs[r], "%s", comm_tcp_address(jobs[r].t));
    }
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        T_CHECK(pthread_create(&th[r], NULL, reduce_main, &jobs[r]) == 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        T_CHECK_MSG(jobs[r].rc == 0, "rank %d: %s", r, jobs[r].e.msg);
        T_CHECK(jobs[r].v[0] == 3 && jobs[r].v[1] == -3 && jobs[r].v[2] == 20);
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_pick_cpu);
    TEST_RUN(test_pick_cuda_by_build);
    TEST_RUN(test_pick_unknown_named);
    TEST_RUN(test_run_refuses_unbuilt_cuda);
    TEST_RUN(test_cpu_engine_bf16);
    TEST_RUN(test_cpu_engine_runs_the_model);
    TEST_RUN(test_cpu_engine_allreduce_host);
    return test_end();
}
