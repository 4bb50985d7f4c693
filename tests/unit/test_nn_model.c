/* Unit tests for worker/nn/model: the graph container. Finite differences of the whole
 * loss through a residual network (checks the fan-out gradient sums and every layer's wiring
 * at once), the reference and oneDNN backends agreeing on a full training step, the
 * backward hook (once per layer, reverse order, contiguous slices covering the arena),
 * gradient accumulation and zeroing, train/eval and dropout determinism at model level,
 * errors, a tiny end-to-end: mnist-cnn's loss falls under SGD, and every op having a whole
 * row in the layer table (layer_type.h) with a name of its own, and the count of
 * convolution layers per algorithm a run's env carries, and an add's inputs sharing its
 * output's gradient buffer changing no gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/model_check.h"
#include "tests/unit/test.h"
#include "worker/nn/isa.h"
#include "worker/nn/layer_type.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"

/* A small network with every layer kind: conv-bn-relu stem, max pool, a BasicBlock with a
 * downsample, a depthwise residual block with relu6, adaptive and global average pooling,
 * an add across layouts, flatten, dropout, linear. Input 3x12x12, 5 classes. */
static int tiny_build(struct nn_model *m, int dropout, struct err *e)
{
    nn_model_init(m);
    struct nn_conv2d_cfg c = nn_conv2d_square(3, 8, 3, 1, 1, 1, 0);
    int x = nn_model_input(m, 3, 12, 12);
    x = nn_model_conv2d(m, "conv1", x, &c);
    x = nn_model_batchnorm(m, "bn1", x, 1);
    x = nn_model_maxpool(m, "pool", x, 3, 2, 1); /* 6x6 */
    /* block with downsample: 8 -> 16, stride 2 */
    c = nn_conv2d_square(8, 16, 3, 2, 1, 1, 0);
    int y = nn_model_conv2d(m, "b1.conv1", x, &c);
    y = nn_model_batchnorm(m, "b1.bn1", y, 1);
    c = nn_conv2d_square(16, 16, 3, 1, 1, 1, 0);
    y = nn_model_conv2d(m, "b1.conv2", y, &c);
    y = nn_model_batchnorm(m, "b1.bn2", y, 0);
    c = nn_conv2d_square(8, 16, 1, 2, 0, 1, 0);
    int s = nn_model_conv2d(m, "b1.down", x, &c);
    s = nn_model_batchnorm(m, "b1.downbn", s, 0);
    x = nn_model_add(m, "b1.add", y, s, 1); /* 16x3x3 */
    /* identity block with a depthwise conv and relu6 */
    c = nn_conv2d_square(16, 16, 3, 1, 1, 16, 1);
    y = nn_model_conv2d(m, "b2.dw", x, &c);
    y = nn_model_act(m, "b2.relu6", y, NN_ACT_RELU6);
    x = nn_model_add(m, "b2.add", x, y, 0);
    /* adaptive pooling 3 -> 2 (overlapping windows: plain loops on the fast path, whose
     * output is plain) added to a 2x2 convolution's blocked output: the add converts its
     * second input and that input's gradient */
    int a = nn_model_adaptive_avgpool(m, "adapt", x, 2, 2);
    c = nn_conv2d_square(16, 16, 2, 1, 0, 1, 1);
    y = nn_model_conv2d(m, "b3.conv", x, &c);
    x = nn_model_add(m, "b3.add", y, a, 0);
    x = nn_model_global_avgpool(m, "avg", x); /* 1x1 */
    x = nn_model_flatten(m, "flatten", x);
    x = nn_model_dropout(m, "drop", x, dropout ? 0.25f : 0.0f, 0);
    nn_model_linear(m, "fc", x, 5, 1);
    return nn_model_finish(m, e) || nn_model_init_params(m, 11, e);
}

#define TINY_N 4
#define TINY_X (TINY_N * 3 * 12 * 12)

static void tiny_data(float *x, int32_t *labels)
{
    struct nn_rng r;
    nn_rng_seed(&r, 99);
    nn_rng_fill_normal(&r, x, TINY_X, 0, 1);
    for (int i = 0; i < TINY_N; i++)
        labels[i] = (int32_t)(i * 2 % 5);
}

static int tiny_loss(struct nn_model *m, const float *x, const int32_t *labels, double *loss,
                     struct err *e)
{
    int right;
    return nn_model_forward(m, x, 1, 3, e) || nn_model_loss(m, labels, TINY_N, loss, &right, e);
}

/* the tiny network with its data, prepared to train on backend */
static int tiny_setup(struct nn_model *m, int dropout, enum nn_backend backend, float *x,
                      int32_t *labels, struct err *e)
{
    tiny_data(x, labels);
    return tiny_build(m, dropout, e) || nn_model_prepare(m, TINY_N, backend, 1, e);
}

/* forward, loss and backward (gradients accumulate) */
static int tiny_backward(struct nn_model *m, const float *x, const int32_t *labels,
                         double *loss, struct err *e)
{
    return tiny_loss(m, x, labels, loss, e) || nn_model_backward(m, NULL, NULL, e);
}

/* tiny_setup and one backward; a copy of the gradients it left into *g (malloc'd, the
 * caller's) */
static int tiny_first_grads(struct nn_model *m, int dropout, enum nn_backend backend, float *x,
                            int32_t *labels, double *loss, float **g, struct err *e)
{
    if (tiny_setup(m, dropout, backend, x, labels, e) || tiny_backward(m, x, labels, loss, e))
        return -1;
    *g = model_grads_copy(m);
    return *g ? 0 : err_errno(e, "copying the gradients");
}

/* dLoss/dparam by central differences (reference backend, training mode, fixed dropout
 * step) against backward, for parameters spread over every layer. The loss passes through
 * batch statistics and ReLUs; h = 1e-3 keeps the truncation error ~1e-6 and the float
 * rounding of the loss (~1e-7) / 2h ~1e-4. But a parameter such as a BN weight moves
 * hundreds of activations at once, and those within h of a ReLU or max-pool kink cross it:
 * each crossing bends the finite difference a little (~1% seen). Tolerance 1e-4 + 3e-2
 * relative; a wiring error (a lost gradient path, another dropout mask) is off by O(1).
 * A sample on a sharper kink shows as one-sided differences that disagree, and is skipped
 * (at most a fifth of them may be). */
static void test_model_gradcheck(void)
{
    struct err e;
    struct nn_model m;
    float x[TINY_X];
    int32_t labels[TINY_N];
    double l0;
    float *g;
    T_OK(tiny_first_grads(&m, 1, NN_BACKEND_REF, x, labels, &l0, &g, &e));
    struct model_gc r;
    T_OK(model_gradcheck(&m, tiny_loss, x, labels, l0, g, 3, 1e-3f, &r, &e));
    free(g);
    nn_model_destroy(&m);
    T_CHECK(!r.bad);
    T_CHECK(r.checked > 40);
    T_CHECK_MSG(r.kinks * 5 <= r.checked, "%d of %d samples on kinks", r.kinks, r.checked);
}

/* One training step on both backends: logits, loss, every parameter gradient and the
 * updated running statistics agree. A network compounds float rounding across its layers
 * (and batch norm divides by small batch deviations), so 2e-3 of each tensor's scale. */
static void test_model_backends_agree(void)
{
    struct err e;
    struct nn_model a, b;
    float x[TINY_X];
    int32_t labels[TINY_N];
    double la, lb;
    T_OK(tiny_setup(&a, 1, NN_BACKEND_REF, x, labels, &e));
    T_OK(tiny_setup(&b, 1, NN_BACKEND_FAST, x, labels, &e));
    T_OK(tiny_backward(&a, x, labels, &la, &e));
    T_OK(tiny_backward(&b, x, labels, &lb, &e));
    T_NEAR(la, lb, 1e-4 * fabs(la));
    const float *ya = nn_model_output(&a), *yb = nn_model_output(&b);
    for (int i = 0; i < TINY_N * 5; i++)
        T_NEAR(ya[i], yb[i], 1e-3);
    int bad = 0;
    for (int p = 0; p < a.nparam_tensors; p++) {
        const struct nn_param *pi = &a.param_info[p];
        double scale = 0, worst = 0;
        for (size_t k = 0; k < pi->len; k++)
            scale = fmax(scale, fabs(a.grads.data[pi->offset + k]));
        for (size_t k = 0; k < pi->len; k++)
            worst = fmax(worst,
                         fabs(a.grads.data[pi->offset + k] - b.grads.data[pi->offset + k]));
        if (worst > 2e-3 * scale + 1e-7) {
            fprintf(stderr, "    %s: differs by %.3g (scale %.3g)\n", pi->name, worst, scale);
            bad = 1;
        }
    }
    for (size_t k = 0; k < a.nbuffers; k++)
        if (fabsf(a.buffers.data[k] - b.buffers.data[k]) >
            1e-4f * fmaxf(1, fabsf(a.buffers.data[k])))
            bad = 1;
    nn_model_destroy(&a);
    nn_model_destroy(&b);
    T_CHECK(!bad);
}

struct hook_log {
    int calls, nodes[64];
    size_t off[64], len[64];
};

static void hook_record(void *ctx, const struct nn_grad_ready *r)
{
    struct hook_log *l = ctx;
    if (l->calls < 64) {
        l->nodes[l->calls] = r->node;
        l->off[l->calls] = r->offset;
        l->len[l->calls] = r->len;
    }
    l->calls++;
}

/* The hook fires once per layer with parameters, in reverse layer order, as backward
 * produces them; the slices are contiguous, decreasing, and cover the whole arena. */
static void test_model_hook_order(void)
{
    struct err e;
    struct nn_model m;
    float x[TINY_X];
    int32_t labels[TINY_N];
    T_OK(tiny_setup(&m, 0, NN_BACKEND_FAST, x, labels, &e));
    int with_params = 0;
    for (int i = 0; i < nn_model_node_count(&m); i++) {
        enum nn_op op = nn_model_node_op(&m, i);
        with_params += op == NN_OP_CONV || op == NN_OP_BN || op == NN_OP_LINEAR;
    }
    struct hook_log log = {0};
    double loss;
    T_OK(tiny_loss(&m, x, labels, &loss, &e));
    T_OK(nn_model_backward(&m, hook_record, &log, &e));
    T_EQ_INT(log.calls, with_params);
    size_t end = m.nparams;
    for (int i = 0; i < log.calls; i++) {
        if (i > 0)
            T_CHECK(log.nodes[i] < log.nodes[i - 1]);
        T_EQ_INT(log.off[i] + log.len[i], end);
        end = log.off[i];
    }
    T_EQ_INT(end, 0);
    /* the grad sizes a collective benchmark replays: reverse registration order */
    size_t sizes[64];
    int n = nn_model_grad_sizes_reverse(&m, sizes, 64);
    T_EQ_INT(n, m.nparam_tensors);
    T_EQ_INT(sizes[0], 5);                 /* fc.bias */
    T_EQ_INT(sizes[1], 5 * 16);            /* fc.weight */
    T_EQ_INT(sizes[n - 1], 8 * 3 * 3 * 3); /* conv1.weight */
    int count;
    const struct nn_param *info = nn_model_param_info(&m, &count);
    T_EQ_INT(count, n);
    T_EQ_STR(info[0].name, "conv1.weight");
    T_EQ_STR(info[count - 1].name, "fc.bias");
    for (int i = 1; i < count; i++) /* registration order = arena order, no gaps */
        T_EQ_INT(info[i].offset, info[i - 1].offset + info[i - 1].len);
    nn_model_destroy(&m);
}

/* Backward accumulates: two backward passes without zeroing double the gradients. */
static void test_model_accumulate_and_zero(void)
{
    struct err e;
    struct nn_model m;
    float x[TINY_X];
    int32_t labels[TINY_N];
    double loss;
    float *once;
    T_OK(tiny_first_grads(&m, 0, NN_BACKEND_FAST, x, labels, &loss, &once, &e));
    T_OK(tiny_backward(&m, x, labels, &loss, &e));
    int ok = 1, nonzero = 0;
    for (size_t i = 0; i < m.nparams; i++) {
        ok &= fabsf(m.grads.data[i] - 2 * once[i]) <= 1e-5f * (1 + fabsf(once[i]));
        nonzero += once[i] != 0;
    }
    nn_model_zero_grad(&m);
    for (size_t i = 0; i < m.nparams; i++)
        ok &= m.grads.data[i] == 0;
    free(once);
    nn_model_destroy(&m);
    T_CHECK(ok);
    T_CHECK(nonzero > 100);
}

/* Training forwards use batch statistics and dropout keyed by the step; evaluation
 * forwards are deterministic and use neither. */
static void test_model_train_eval_dropout(void)
{
    struct err e;
    struct nn_model m;
    float x[TINY_X], y1[TINY_N * 5], y2[TINY_N * 5], y3[TINY_N * 5], ye[TINY_N * 5];
    int32_t labels[TINY_N];
    T_OK(tiny_setup(&m, 1, NN_BACKEND_FAST, x, labels, &e));
    float *running = nn_model_bn_running(&m, 1);
    T_CHECK(running != NULL);
    T_CHECK(running[0] == 0 && running[8] == 1); /* mean 0, var 1 before training */
    T_OK(nn_model_forward(&m, x, 1, 5, &e));
    memcpy(y1, nn_model_output(&m), sizeof y1);
    T_CHECK(running[0] != 0); /* updated */
    T_OK(nn_model_forward(&m, x, 1, 5, &e));
    memcpy(y2, nn_model_output(&m), sizeof y2);
    T_OK(nn_model_forward(&m, x, 1, 6, &e));
    memcpy(y3, nn_model_output(&m), sizeof y3);
    T_OK(nn_model_forward(&m, x, 0, 6, &e));
    memcpy(ye, nn_model_output(&m), sizeof ye);
    float before = running[0];
    T_OK(nn_model_forward(&m, x, 0, 7, &e));
    T_CHECK(running[0] == before); /* evaluation leaves running statistics alone */
    T_CHECK(memcmp(ye, nn_model_output(&m), sizeof ye) == 0);
    T_CHECK(memcmp(y1, y2, sizeof y1) == 0); /* same step, same batch: same masks */
    T_CHECK(memcmp(y1, y3, sizeof y1) != 0); /* another step */
    T_CHECK(memcmp(y1, ye, sizeof y1) != 0);
    nn_model_destroy(&m);
}

static void test_model_errors(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    int x = nn_model_input(&m, 3, 8, 8);
    int y = nn_model_linear(&m, "fc", x, 10, 1); /* 4-D input */
    T_EQ_INT(y, -1);
    T_EQ_INT(nn_model_flatten(&m, "f", y), -1); /* errors stick */
    T_CHECK(nn_model_finish(&m, &e) != 0);
    T_CHECK(strstr(e.msg, "fc") != NULL);
    nn_model_destroy(&m);

    nn_model_init(&m);
    x = nn_model_input(&m, 3, 8, 8);
    int p = nn_model_maxpool(&m, "p", x, 2, 2, 0);
    T_EQ_INT(nn_model_add(&m, "add", x, p, 0), -1); /* shapes differ */
    nn_model_destroy(&m);

    nn_model_init(&m);
    x = nn_model_input(&m, 3, 8, 8);
    nn_model_maxpool(&m, "p", x, 2, 2, 0);
    T_CHECK(nn_model_finish(&m, &e) != 0); /* does not end in (N, classes) */
    nn_model_destroy(&m);

    float xs[TINY_X];
    int32_t labels[TINY_N];
    double loss;
    int right;
    tiny_data(xs, labels);
    T_OK(tiny_build(&m, 0, &e));
    T_CHECK(nn_model_forward(&m, xs, 1, 0, &e) != 0); /* not prepared */
    T_OK(nn_model_prepare(&m, TINY_N, NN_BACKEND_FAST, 0, &e));
    T_CHECK(nn_model_forward(&m, xs, 1, 0, &e) != 0); /* prepared for evaluation */
    T_OK(nn_model_forward(&m, xs, 0, 0, &e));
    T_CHECK(nn_model_backward(&m, NULL, NULL, &e) != 0);
    T_OK(nn_model_prepare(&m, TINY_N, NN_BACKEND_FAST, 1, &e));
    T_OK(nn_model_forward(&m, xs, 1, 0, &e));
    T_CHECK(nn_model_backward(&m, NULL, NULL, &e) != 0); /* no loss yet */
    labels[2] = 9;
    T_CHECK(nn_model_loss(&m, labels, TINY_N, &loss, &right, &e) != 0);
    T_EQ_STR(e.field, "label");
    T_CHECK(nn_model_prepare(&m, 0, NN_BACKEND_FAST, 1, &e) != 0);
    /* batch norm cannot train on one value per channel */
    nn_model_destroy(&m);
    nn_model_init(&m);
    x = nn_model_input(&m, 2, 1, 1);
    x = nn_model_batchnorm(&m, "bn", x, 0);
    x = nn_model_flatten(&m, "f", x);
    nn_model_linear(&m, "fc", x, 2, 1);
    T_OK(nn_model_finish(&m, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    T_CHECK(nn_model_prepare(&m, 1, NN_BACKEND_REF, 1, &e) != 0);
    T_EQ_STR(e.field, "batch_size");
    T_OK(nn_model_prepare(&m, 1, NN_BACKEND_REF, 0, &e));
    nn_model_destroy(&m);
}

/* Sizes are checked before memory, in 64-bit arithmetic: a batch of 65536 on 3x4096x4096
 * (batch norm sees 2^40 values per channel, which an int product overflowed into a
 * misleading "one value per channel" message) is refused naming batch_size with the size
 * it needs, on both backends, and the model can still be prepared for a batch that fits.
 * Runs under UBSan in build-san, so an overflow left anywhere on this path fails here. */
static void test_model_huge_batch(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    struct nn_conv2d_cfg c = nn_conv2d_square(3, 4, 3, 1, 1, 1, 0);
    int x = nn_model_input(&m, 3, 4096, 4096);
    x = nn_model_conv2d(&m, "conv", x, &c);
    x = nn_model_batchnorm(&m, "bn", x, 1);
    x = nn_model_global_avgpool(&m, "avg", x);
    x = nn_model_flatten(&m, "flatten", x);
    nn_model_linear(&m, "fc", x, 2, 1);
    T_OK(nn_model_finish(&m, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    enum nn_backend backends[] = {NN_BACKEND_REF, NN_BACKEND_FAST};
    for (int b = 0; b < 2; b++) {
        memset(&e, 0, sizeof e);
        T_CHECK(nn_model_prepare(&m, 65536, backends[b], 1, &e) != 0);
        T_EQ_INT(e.code, ERR_TOO_LARGE);
        T_EQ_STR(e.field, "batch_size");
        T_CHECK_MSG(strstr(e.msg, "GiB") && !strstr(e.msg, "batch norm"), "%s", e.msg);
        T_CHECK(nn_model_prepare(&m, 65536, backends[b], 0, &e) != 0); /* evaluation too */
        T_EQ_STR(e.field, "batch_size");
    }
    T_OK(nn_model_prepare(&m, 1, NN_BACKEND_REF, 0, &e)); /* 200 MB: fits */
    nn_model_destroy(&m);

    /* a workspace plan past SIZE_MAX saturates and its commit fails cleanly */
    struct nn_workspace ws = {0};
    nn_ws_reserve(&ws, SIZE_MAX - 100);
    nn_ws_reserve(&ws, 1000);
    T_CHECK(ws.size == SIZE_MAX);
    T_CHECK(nn_ws_commit(&ws, &e) != 0);
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    nn_ws_free(&ws);
}

/* Re-preparing for another batch size and reading tensors back in plain layout. */
static void test_model_reprepare_and_read(void)
{
    struct err e;
    struct nn_model m;
    float x[TINY_X];
    int32_t labels[TINY_N];
    tiny_data(x, labels);
    T_OK(tiny_build(&m, 0, &e));
    T_OK(nn_model_prepare(&m, 2, NN_BACKEND_FAST, 0, &e));
    T_OK(nn_model_forward(&m, x, 0, 0, &e));
    float first2[10];
    memcpy(first2, nn_model_output(&m), sizeof first2);
    T_OK(nn_model_prepare(&m, TINY_N, NN_BACKEND_FAST, 0, &e));
    T_OK(nn_model_forward(&m, x, 0, 0, &e));
    const float *y = nn_model_output(&m);
    for (int i = 0; i < 10; i++) /* eval: rows do not depend on the batch */
        T_NEAR(y[i], first2[i], 1e-5);
    /* tensor 2 is bn1's output, blocked inside: read back plain and check it is relu'd */
    struct nn_shape s = nn_model_tensor_shape(&m, 2);
    T_EQ_INT(s.c, 8);
    float *t = malloc(nn_shape_numel(s) * sizeof *t);
    T_OK(nn_model_read_tensor(&m, 2, 0, t, &e));
    int negative = 0, positive = 0;
    for (size_t i = 0; i < nn_shape_numel(s); i++) {
        negative += t[i] < 0;
        positive += t[i] > 0;
    }
    free(t);
    nn_model_destroy(&m);
    T_EQ_INT(negative, 0);
    T_CHECK(positive > 100);
}

/* Mean evaluation-mode loss over the batches (no dropout noise). */
static double mnist_eval_loss(struct nn_model *m, const float *x, const int32_t *labels, int nb,
                              int b, struct err *e)
{
    double sum = 0;
    for (int k = 0; k < nb; k++) {
        double loss;
        int right;
        if (nn_model_forward(m, x + (size_t)k * b * 784, 0, 0, e) ||
            nn_model_loss(m, labels + (size_t)k * b, b, &loss, &right, e))
            return -1;
        sum += loss / nb;
    }
    return sum;
}

/* mnist-cnn learns a few random batches: each image is noise plus its class's fixed random
 * pattern (3x the noise), and the evaluation loss falls from chance (ln 10 = 2.30) to well
 * below it after 100 SGD steps. */
static void test_model_mnist_cnn_learns(void)
{
    struct err e;
    struct nn_model m;
    struct nn_optim o;
    enum { B = 16, NB = 4, PIX = 28 * 28 };
    static float x[NB][B * PIX], pattern[10][PIX];
    int32_t labels[NB][B];
    struct nn_rng r;
    nn_rng_seed(&r, 3);
    nn_rng_fill_normal(&r, pattern[0], 10 * PIX, 0, 1);
    for (int b = 0; b < NB; b++) {
        nn_rng_fill_normal(&r, x[b], B * PIX, 0, 1);
        for (int i = 0; i < B; i++) {
            labels[b][i] = (int32_t)(nn_rng_next(&r) % 10);
            for (int k = 0; k < PIX; k++)
                x[b][i * PIX + k] += 3 * pattern[labels[b][i]][k];
        }
    }
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "mnist-cnn", 1, 28, 28, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    T_OK(nn_model_prepare(&m, B, NN_BACKEND_FAST, 1, &e));
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.lr = 0.01; /* the MNIST example's settings */
    oc.momentum = 0.5;
    T_OK(nn_optim_init(&o, &oc, nn_model_param_count(&m), &e));
    double before = mnist_eval_loss(&m, x[0], labels[0], NB, B, &e);
    for (int step = 0; step < 100; step++) {
        double loss;
        int right;
        nn_model_zero_grad(&m);
        T_OK(nn_model_forward(&m, x[step % NB], 1, (uint64_t)step, &e));
        T_OK(nn_model_loss(&m, labels[step % NB], B, &loss, &right, &e));
        T_OK(nn_model_backward(&m, NULL, NULL, &e));
        nn_optim_step(&o, m.params.data, m.grads.data, oc.lr);
    }
    double after = mnist_eval_loss(&m, x[0], labels[0], NB, B, &e);
    nn_optim_cleanup(&o);
    nn_model_destroy(&m);
    T_CHECK_MSG(before > 2.0 && after >= 0 && after < 0.25 * before, "loss %.3f -> %.3f",
                before, after);
}

/* A new op without its row, or a row missing a path, would crash at its first step: every
 * op has both paths and a unique name; rows outside the ops do not exist. */
static void test_model_layer_rows(void)
{
    for (int op = 0; op < NN_OP_COUNT; op++) {
        const struct nn_layer_type *t = nn_layer_type_get((enum nn_op)op);
        T_CHECK_MSG(t != NULL, "op %d has no row", op);
        if (!t)
            continue;
        T_CHECK_MSG(t->name && *t->name, "op %d has no name", op);
        T_CHECK_MSG(t->forward && t->backward, "%s: no reference path", t->name);
        T_CHECK_MSG(t->fast_init && t->fast_forward && t->fast_backward, "%s: no fast path",
                    t->name);
        T_CHECK_MSG(t->fast_impl || t->impl_prim || t->impl, "%s: no print of its fast path",
                    t->name);
        T_CHECK_MSG(!t->buffers == !t->buffers_init, "%s: buffers without their init", t->name);
        for (int k = 0; k < op; k++) {
            const struct nn_layer_type *u = nn_layer_type_get((enum nn_op)k);
            T_CHECK_MSG(u && strcmp(u->name, t->name) != 0, "%s named twice", t->name);
        }
    }
    T_CHECK(nn_layer_type_get(NN_OP_COUNT) == NULL);
    T_CHECK(nn_layer_type_get((enum nn_op) - 1) == NULL);
    T_CHECK(nn_layer_type_get(NN_OP_CONV) == &nn_layer_conv2d);
}

/* The layers of one algorithm in out[0..n), 0 where it is not there. */
static int conv_algo_layers(const struct nn_conv_algo_count *out, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(out[i].name, name) == 0)
            return out[i].layers;
    return 0;
}

/* ResNet-18 at 3x32x32, prepared for training under one algorithm: n names into out. */
static int conv_algos_of(enum nn_conv_algo algo, enum nn_backend backend,
                         struct nn_conv_algo_count *out, int cap, int *convs, struct err *e)
{
    struct nn_model m;
    nn_model_init(&m);
    nn_model_set_conv_algo(&m, algo);
    int n = -1;
    if (nn_models_build(&m, "resnet18", 3, 32, 32, 10, NULL, e) == 0 &&
        nn_model_init_params(&m, 1, e) == 0 && nn_model_prepare(&m, 2, backend, 1, e) == 0) {
        *convs = 0;
        for (int i = 0; i < nn_model_node_count(&m); i++) {
            struct nn_node_info info;
            nn_model_node_info(&m, i, &info);
            *convs += info.op == NN_OP_CONV;
        }
        n = nn_model_conv_algos(&m, out, cap);
    }
    nn_model_destroy(&m);
    return n;
}

/* The env's conv_algos: every convolution counted once, under the algorithm that was
 * created. Direct asked: all direct. Winograd asked: oneDNN's on its 3x3 stride-1 layers
 * where oneDNN has it (AVX-512), else every layer fell back to direct and says so. The
 * reference backend chooses nothing; a short out keeps the names that fit. */
static void test_model_conv_algos(void)
{
    struct err e;
    struct nn_conv_algo_count out[4];
    int convs = 0;
    int n = conv_algos_of(NN_CONV_DIRECT, NN_BACKEND_FAST, out, 4, &convs, &e);
    T_CHECK_MSG(n == 1, "direct: %d names (%s)", n, e.msg);
    T_CHECK(convs == 20); /* stem, 16 3x3, 3 downsamples */
    T_EQ_STR(out[0].name, "direct");
    T_EQ_INT(out[0].layers, convs);
    n = conv_algos_of(NN_CONV_WINOGRAD, NN_BACKEND_FAST, out, 4, &convs, &e);
    T_CHECK_MSG(n >= 1, "winograd: %d names (%s)", n, e.msg);
    int wino = conv_algo_layers(out, n, "winograd-onednn");
    T_EQ_INT(wino + conv_algo_layers(out, n, "direct"), convs);
    if (strncmp(nn_isa_onednn_name(), "avx512_core", 11) == 0)
        T_CHECK_MSG(wino >= 1 && wino <= 13, "%d Winograd layers of 13 3x3 stride-1", wino);
    else
        T_EQ_INT(wino, 0);
    if (n == 2) { /* room for one name: the first met (the stem, direct) alone */
        T_EQ_INT(conv_algos_of(NN_CONV_WINOGRAD, NN_BACKEND_FAST, out, 1, &convs, &e), 1);
        T_EQ_STR(out[0].name, "direct");
    }
    T_EQ_INT(conv_algos_of(NN_CONV_DIRECT, NN_BACKEND_REF, out, 4, &convs, &e), 0);
}

/* The tensor node `name` outputs in m; -1 when no node has that name. */
static int node_out(const struct nn_model *m, const char *name)
{
    for (int i = 0; i < m->nnodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0)
            return m->nodes[i].out;
    return -1;
}

static int tensor_shared(const struct nn_model *m, int t)
{
    return m->tensors[t].grad_owner != t;
}

/* A fan-out the sharing must refuse in part: x feeds convA, convB and add1, so add1's
 * input y (from convA) may take add1's gradient buffer but x may not as well: convB
 * accumulates into x's gradient after add1 and before convA has read y's. add2's inputs
 * both share. With early, convC runs before add1, so its output's gradient (in add2's
 * buffer) is still to be read when add1 would apply its ReLU mask in place: add1 shares
 * nothing. Input 4x6x6, 3 classes. */
static int fanout_build_at(struct nn_model *m, int early, struct err *e)
{
    nn_model_init(m);
    struct nn_conv2d_cfg c3 = nn_conv2d_square(8, 8, 3, 1, 1, 1, 0);
    struct nn_conv2d_cfg c1 = nn_conv2d_square(8, 8, 1, 1, 0, 1, 0);
    struct nn_conv2d_cfg c0 = nn_conv2d_square(4, 8, 3, 1, 1, 1, 0);
    int x = nn_model_conv2d(m, "conv0", nn_model_input(m, 4, 6, 6), &c0);
    int y = nn_model_conv2d(m, "convA", x, &c3);
    int z = nn_model_conv2d(m, "convB", x, &c1);
    if (early)
        z = nn_model_conv2d(m, "convC", z, &c3);
    int s = nn_model_add(m, "add1", y, x, 1);
    if (!early)
        z = nn_model_conv2d(m, "convC", z, &c3);
    s = nn_model_add(m, "add2", s, z, 0);
    s = nn_model_flatten(m, "flatten", nn_model_global_avgpool(m, "avg", s));
    nn_model_linear(m, "fc", s, 3, 1);
    return nn_model_finish(m, e) || nn_model_init_params(m, 5, e);
}

/* Two training steps of a model built by build on backend, its adds sharing gradient
 * buffers or not; *g: a copy of the accumulated parameter gradients (malloc'd, the
 * caller's). m stays prepared for the caller to inspect and destroy. */
static int share_grads(struct nn_model *m, int (*build)(struct nn_model *, struct err *),
                       int cin, int side, int classes, enum nn_backend backend, int share,
                       float **g, struct err *e)
{
    enum { N = 3 };
    float x[N * 4 * 12 * 12];
    int32_t labels[N];
    struct nn_rng r;
    nn_rng_seed(&r, 7);
    nn_rng_fill_normal(&r, x, (size_t)N * cin * side * side, 0, 1);
    for (int i = 0; i < N; i++)
        labels[i] = (int32_t)(i % classes);
    if (build(m, e))
        return -1;
    nn_model_set_grad_share(m, share);
    if (nn_model_prepare(m, N, backend, 1, e))
        return -1;
    for (int step = 0; step < 2; step++) {
        double loss;
        int right;
        if (nn_model_forward(m, x, 1, (uint64_t)step, e) ||
            nn_model_loss(m, labels, N, &loss, &right, e) ||
            nn_model_backward(m, NULL, NULL, e))
            return -1;
    }
    *g = model_grads_copy(m);
    return *g ? 0 : err_errno(e, "copying the gradients");
}

static int tiny_build_plain(struct nn_model *m, struct err *e)
{
    return tiny_build(m, 0, e);
}

static int fanout_build(struct nn_model *m, struct err *e)
{
    return fanout_build_at(m, 0, e);
}

static int fanout_build_early(struct nn_model *m, struct err *e)
{
    return fanout_build_at(m, 1, e);
}

/* An add's inputs taking its output's gradient buffer (the default) leaves every parameter
 * gradient bit-identical to the copying path, on both backends: on the tiny network (a
 * downsample block whose add shares both inputs, an identity block whose shortcut is also
 * read by a convolution, an add across layouts where the fast path keeps converting the
 * second input's gradient) and on fan-outs where sharing more would be wrong. */
static void test_model_add_grad_share(void)
{
    struct err e;
    for (int be = 0; be < 2; be++) {
        enum nn_backend backend = be ? NN_BACKEND_FAST : NN_BACKEND_REF;
        struct {
            int (*build)(struct nn_model *, struct err *);
            int cin, side, classes;
        } nets[3] = {{tiny_build_plain, 3, 12, 5},
                     {fanout_build, 4, 6, 3},
                     {fanout_build_early, 4, 6, 3}};
        for (int k = 0; k < 3; k++) {
            struct nn_model on, off;
            float *gon = NULL, *goff = NULL;
            T_OK(share_grads(&on, nets[k].build, nets[k].cin, nets[k].side, nets[k].classes,
                             backend, 1, &gon, &e));
            T_OK(share_grads(&off, nets[k].build, nets[k].cin, nets[k].side, nets[k].classes,
                             backend, 0, &goff, &e));
            T_CHECK(on.grad_shared > 0);
            T_EQ_INT(off.grad_shared, 0);
            T_CHECK_MSG(memcmp(gon, goff, on.nparams * sizeof(float)) == 0,
                        "backend %d net %d: gradients differ with sharing", be, k);
            if (k == 0) { /* b3.add: shared where the layouts agree, else converted */
                int a = node_out(&on, "adapt"), y = node_out(&on, "b3.add");
                T_EQ_INT(tensor_shared(&on, a),
                         nn_md_same(&on.tensors[a].md, &on.tensors[y].md));
                T_CHECK(tensor_shared(&on, node_out(&on, "b1.bn2")));
                T_CHECK(tensor_shared(&on, node_out(&on, "b1.downbn")));
            } else if (!be && k == 1) {
                T_CHECK(tensor_shared(&on, node_out(&on, "convA")));
                T_CHECK(!tensor_shared(&on, node_out(&on, "conv0")));
                T_CHECK(tensor_shared(&on, node_out(&on, "convC")));
                T_CHECK(tensor_shared(&on, node_out(&on, "add1")));
            } else if (!be && k == 2) {
                T_CHECK(!tensor_shared(&on, node_out(&on, "convA")));
                T_CHECK(tensor_shared(&on, node_out(&on, "convC")));
            }
            free(gon);
            free(goff);
            nn_model_destroy(&on);
            nn_model_destroy(&off);
        }
    }
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_model_gradcheck);
    TEST_RUN(test_model_backends_agree);
    TEST_RUN(test_model_hook_order);
    TEST_RUN(test_model_accumulate_and_zero);
    TEST_RUN(test_model_train_eval_dropout);
    TEST_RUN(test_model_errors);
    TEST_RUN(test_model_huge_batch);
    TEST_RUN(test_model_reprepare_and_read);
    TEST_RUN(test_model_mnist_cnn_learns);
    TEST_RUN(test_model_layer_rows);
    TEST_RUN(test_model_conv_algos);
    TEST_RUN(test_model_add_grad_share);
    return test_end();
}
