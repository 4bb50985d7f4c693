/* GPU tests (suite 'gpu', needs a CUDA device) of the model runner, worker/nn/cuda/gmodel.c:
 * zoo models trained on the GPU against the CPU engine, and mixed precision.
 *
 * - fp32, lenet5 (1x28x28, convolutions, pooling, flatten's NHWC -> (c,h,w) transpose,
 *   linear layers): 2 SGD steps (lr 0.05, momentum 0.9) on one random batch, the same
 *   initial parameters (one seed, nn_model_init_params) on the CPU reference engine and
 *   on the GPU; the parameter updates (after - before) must agree, and so must the first
 *   loss. mnist-cnn the same with 1 step: its Dropout2d and dropout must drop the same
 *   elements on both (gmodel_kernels.cu recomputes nn/'s mask hash). resnet18-cifar
 *   (batch norm, residual adds, global average pooling) against the oneDNN engine, 1
 *   step, with the batch-norm running statistics. The oneDNN engine runs its direct
 *   convolution here, not its default Winograd F(4x4, 3x3) on the large 3x3 layers:
 *   Winograd's transforms round differently, and on resnet18-cifar (batch 4, 1 step) its
 *   updates differ from direct's by 2e-2 of their scale, where direct and the naive
 *   reference engine agree to 3e-6 (measured on the CPU machine); the first device run
 *   failed at 2.7e-3 against the Winograd reference.
 *   Tolerance: fp32 on the GPU runs without TF32 (FMA math, cuBLAS pedantic), so the two
 *   engines differ only in summation order. A gradient sums up to ~10^4 products (a
 *   conv weight over batch x positions), so its relative error is ~sqrt(10^4) * 6e-8 =
 *   6e-6; momentum and a second step at most double it. We require max |du_gpu - du_cpu|
 *   <= 2e-4 * max |du_cpu| + 1e-7 over every parameter (u = the update): 15x margin,
 *   while a misplaced weight, a wrong transpose, a dropped term or a mask that differs
 *   moves updates by O(1) of their scale. Losses: 1e-5 relative.
 * - The gradient hook fires once per layer with parameters, last layer first, with
 *   decreasing offsets and a recorded event (what DDP buckets wait for).
 * - bf16 and fp16 (dynamic loss scaling, loss_scale.h) on lenet5: 160 steps on one fixed
 *   batch (32 random images, random labels: it must memorise them) must bring the loss
 *   below half its first value, with no skipped fp16 step once the scale has settled; fp32
 *   on the GPU trains the same way first and is printed beside it (and must fall too), so
 *   a half precision that does not learn shows against one that does. Why 160: the CPU
 *   engine in fp32 goes 2.3186 -> 2.097 in 40 steps (what both half precisions reached on
 *   the first device run, 2.0925 and 2.0951: the old 40 were too few, not a precision
 *   fault), 1.59 at 100, 0.014 at 120, 0.0000 at 140.
 * - cuDNN's choices against each other on resnet18-cifar, 3 steps: the fused BN+ReLU
 *   runner (fp16; every conv-bn-relu block on the fused path) against the plain path, and
 *   benchmark mode (fp32; distinct shapes measured once, the rest from the cache) against
 *   the heuristics: losses and parameters within 2e-2 (fp16) and 1e-4 (fp32; different
 *   algorithms sum in different orders, still without TF32). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/gpu_test.h"
#include "tests/unit/test.h"
#include "worker/nn/cuda/gmodel.h"
#include "worker/nn/loss_scale.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"

struct hook_log {
    int calls, nodes[512];
    size_t offsets[512];
    int with_event;
};

static void hook_record(void *ctx, const struct nn_grad_ready *r)
{
    struct hook_log *h = ctx;
    if (h->calls < 512) {
        h->nodes[h->calls] = r->node;
        h->offsets[h->calls] = r->offset;
    }
    h->calls++;
    h->with_event += r->ready_event != NULL;
}

static void fill_batch(float *x, int32_t *y, int n, size_t per, int classes, unsigned seed)
{
    for (size_t i = 0; i < (size_t)n * per; i++)
        x[i] = (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f;
    for (int i = 0; i < n; i++)
        y[i] = rand_r(&seed) % classes;
}

static struct nn_optim_cfg sgd_cfg(void)
{
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.lr = 0.05;
    oc.momentum = 0.9;
    return oc;
}

/* max |a - b| over max |b| (+ the absolute floor) */
static double update_err(const float *a_after, const float *b_after, const float *before,
                         size_t n, double *scale)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double ua = (double)a_after[i] - before[i], ub = (double)b_after[i] - before[i];
        d = fmax(d, fabs(ua - ub));
        m = fmax(m, fabs(ub));
    }
    *scale = m;
    return d;
}

/* Prints each layer whose parameters' updates differ by more than limit: its node, name,
 * largest difference, that element's index and the layer's own scale (run 2 on the H200
 * failed resnet18-cifar at 2.7e-3 of scale and did not say where). */
static void print_update_err_by_node(const struct nn_model *m, const float *a_after,
                                     const float *b_after, const float *before, double limit)
{
    for (int i = 0, shown = 0; i < nn_model_node_count(m) && shown < 12; i++) {
        struct nn_node_info ni;
        nn_model_node_info(m, i, &ni);
        if (ni.nparams == 0)
            continue;
        size_t o = ni.param_off, worst = 0;
        double scale = 0, d = 0;
        for (size_t k = 0; k < ni.param_len; k++) {
            double ua = (double)a_after[o + k] - before[o + k];
            double ub = (double)b_after[o + k] - before[o + k];
            if (fabs(ua - ub) > d) {
                d = fabs(ua - ub);
                worst = k;
            }
            scale = fmax(scale, fabs(ub));
        }
        if (d > limit) {
            fprintf(stderr,
                    "      node %d (%s): |du| differs by %.3g at element %zu of %zu "
                    "(the layer's scale %.3g)\n",
                    i, ni.name ? ni.name : "?", d, worst, ni.param_len, scale);
            shown++;
        }
    }
}

/* Trains `steps` SGD steps of model name on one batch on the CPU (backend) and on the GPU
 * in fp32 and compares. */
static void compare_with_cpu(const char *name, int c, int hw, int batch, int steps,
                             enum nn_backend backend)
{
    struct err e = {0};
    struct nn_model cpu, gm_host;
    nn_model_init(&cpu);
    nn_model_init(&gm_host);
    T_OK(nn_models_build(&cpu, name, c, hw, hw, 10, NULL, &e));
    T_OK(nn_models_build(&gm_host, name, c, hw, hw, 10, NULL, &e));
    T_OK(nn_model_init_params(&cpu, 11, &e));
    T_OK(nn_model_init_params(&gm_host, 11, &e));
    nn_model_set_conv_algo(&cpu, NN_CONV_DIRECT); /* the reference: no Winograd (above) */
    T_OK(nn_model_prepare(&cpu, batch, backend, 1, &e));
    size_t n = cpu.nparams, per = (size_t)c * hw * hw;
    float *before = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    float *x = malloc((size_t)batch * per * sizeof(float));
    float *run_cpu = malloc((cpu.nbuffers + 1) * sizeof(float));
    float *run_gpu = malloc((cpu.nbuffers + 1) * sizeof(float));
    int32_t *y = malloc((size_t)batch * sizeof(int32_t));
    T_CHECK(before && got && x && y && run_cpu && run_gpu);
    memcpy(before, cpu.params.data, n * sizeof(float));
    fill_batch(x, y, batch, per, 10, 3);

    struct nn_optim_cfg oc = sgd_cfg();
    struct nn_optim ocpu, ogpu;
    T_OK(nn_optim_init(&ocpu, &oc, n, &e));
    T_OK(nn_optim_init(&ogpu, &oc, n, &e)); /* its host state stays unused */
    double loss_cpu = 0, loss_gpu = 0;
    int right = 0;
    for (int s = 0; s < steps; s++) {
        double l;
        nn_model_zero_grad(&cpu);
        T_OK(nn_model_forward(&cpu, x, 1, (uint64_t)s, &e));
        T_OK(nn_model_loss(&cpu, y, batch, &l, &right, &e));
        T_OK(nn_model_backward(&cpu, NULL, NULL, &e));
        nn_optim_step(&ocpu, cpu.params.data, cpu.grads.data, oc.lr);
        if (s == 0)
            loss_cpu = l;
    }

    struct gmodel *g = gmodel_create(&gm_host, batch, "fp32", NULL, NULL, &e);
    T_CHECK_MSG(g, "%s", e.msg);
    if (!g)
        goto out;
    T_OK(gmodel_optim_init(g, &oc, &e));
    struct hook_log hl = {0};
    for (int s = 0; s < steps; s++) {
        double l;
        gmodel_mark_step_begin(g);
        gmodel_zero_grad(g);
        T_OK(gmodel_forward(g, x, y, batch, 1, (uint64_t)s, true, 1.0f, &e));
        T_OK(gmodel_backward(g, s == 0 ? hook_record : NULL, &hl, &e));
        T_OK(gmodel_wait_loss(g, &l, &right, &e));
        nn_optim_begin_step(&ogpu);
        gmodel_mark_optim(g, 0);
        gmodel_optim_update(g, &ogpu, oc.lr, 0, 0, n);
        gmodel_after_update(g);
        gmodel_mark_optim(g, 1);
        double f, b, o;
        T_OK(gmodel_phase_ms(g, &f, &b, &o, &e));
        T_CHECK_MSG(f > 0 && b > 0 && o > 0, "phase times %g %g %g", f, b, o);
        if (s == 0)
            loss_gpu = l;
    }
    T_OK(gmodel_download(g, got, run_gpu, &e));
    double scale = 0, d = update_err(got, cpu.params.data, before, n, &scale);
    fprintf(stderr, "    %s fp32, %d step(s): loss cpu %.7f gpu %.7f, max |du| %.3g of %.3g\n",
            name, steps, loss_cpu, loss_gpu, d, scale);
    if (d > 2e-4 * scale + 1e-7)
        print_update_err_by_node(&cpu, got, cpu.params.data, before, 2e-4 * scale + 1e-7);
    T_CHECK(scale > 0);
    T_CHECK_MSG(d <= 2e-4 * scale + 1e-7, "%s: updates differ by %g (scale %g)", name, d,
                scale);
    T_CHECK_MSG(fabs(loss_gpu - loss_cpu) <= 1e-5 * fabs(loss_cpu), "%s: loss %.8f vs %.8f",
                name, loss_gpu, loss_cpu);
    if (cpu.nbuffers) { /* batch-norm running statistics, updated by the forward */
        double bd = 0;
        for (size_t i = 0; i < cpu.nbuffers; i++)
            bd = fmax(bd, fabs((double)run_gpu[i] - cpu.buffers.data[i]));
        T_CHECK_MSG(bd <= 1e-4, "%s: running statistics differ by %g", name, bd);
    }
    /* the hook: every layer with parameters once, in reverse, offsets falling */
    int layers = 0;
    for (int i = 0; i < nn_model_node_count(&gm_host); i++) {
        struct nn_node_info ni;
        nn_model_node_info(&gm_host, i, &ni);
        layers += ni.nparams > 0;
    }
    T_EQ_INT(hl.calls, layers);
    T_EQ_INT(hl.with_event, layers);
    for (int i = 1; i < hl.calls && i < 512; i++)
        T_CHECK(hl.nodes[i] < hl.nodes[i - 1] && hl.offsets[i] < hl.offsets[i - 1]);
    gmodel_destroy(g);
out:
    nn_optim_cleanup(&ocpu);
    nn_optim_cleanup(&ogpu);
    free(before);
    free(got);
    free(x);
    free(y);
    free(run_cpu);
    free(run_gpu);
    nn_model_destroy(&cpu);
    nn_model_destroy(&gm_host);
}

static void test_gpu_train_lenet5_fp32(void)
{
    compare_with_cpu("lenet5", 1, 28, 8, 2, NN_BACKEND_REF);
}

static void test_gpu_train_mnist_cnn_dropout(void)
{
    compare_with_cpu("mnist-cnn", 1, 28, 8, 1, NN_BACKEND_REF);
}

static void test_gpu_train_resnet18_cifar(void)
{
    compare_with_cpu("resnet18-cifar", 3, 32, 4, 1, NN_BACKEND_FAST);
}

/* LOSS_STEPS steps of lenet5 on one batch in precision: the first and the last loss; the
 * fp16 steps skipped in the second half go to *skipped_late. The runner's dtype must be
 * the precision's. */
enum { LOSS_STEPS = 160 };
static void loss_run(const char *precision, double *first_out, double *last_out,
                     long *skipped_late_out)
{
    struct err e = {0};
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "lenet5", 1, 28, 28, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 4, &e));
    enum { B = 32, STEPS = LOSS_STEPS };
    static float x[B * 28 * 28];
    static int32_t y[B];
    fill_batch(x, y, B, 28 * 28, 10, 9);
    struct gmodel *g = gmodel_create(&m, B, precision, NULL, NULL, &e);
    T_CHECK_MSG(g, "%s", e.msg);
    if (!g) {
        nn_model_destroy(&m);
        return;
    }
    struct nn_optim_cfg oc = sgd_cfg();
    struct nn_optim o;
    T_OK(nn_optim_init(&o, &oc, m.nparams, &e)); /* host state unused */
    T_OK(gmodel_optim_init(g, &oc, &e));
    struct loss_scale ls;
    loss_scale_init(&ls, gmodel_wants_loss_scale(g));
    double first = 0, last = 0;
    long skipped_late = 0;
    for (int s = 0; s < STEPS; s++) {
        int right;
        gmodel_mark_step_begin(g);
        gmodel_zero_grad(g);
        T_OK(gmodel_forward(g, x, y, B, 1, (uint64_t)s, true, ls.scale, &e));
        T_OK(gmodel_backward(g, NULL, NULL, &e));
        T_OK(gmodel_wait_loss(g, &last, &right, &e));
        bool finite = true;
        if (ls.dynamic)
            T_OK(gmodel_unscale(g, loss_scale_inverse(&ls), &finite, &e));
        long before = ls.skipped;
        if (loss_scale_update(&ls, !finite)) {
            nn_optim_begin_step(&o);
            gmodel_optim_update(g, &o, oc.lr, 0, 0, m.nparams);
            gmodel_after_update(g);
        }
        if (s >= STEPS / 2)
            skipped_late += ls.skipped - before;
        if (s == 0)
            first = last;
    }
    fprintf(stderr, "    lenet5 %s, %d steps: loss %.4f -> %.4f, scale %g, %ld skipped\n",
            precision, STEPS, first, last, (double)ls.scale, ls.skipped);
    const char *want = strcmp(precision, "bf16") == 0   ? "bfloat16"
                       : strcmp(precision, "fp16") == 0 ? "float16"
                                                        : "float32";
    T_EQ_STR(gmodel_dtype_name(g), want);
    *first_out = first;
    *last_out = last;
    *skipped_late_out = skipped_late;
    gmodel_destroy(g);
    nn_optim_cleanup(&o);
    nn_model_destroy(&m);
}

/* fp32 first (the same model, batch and steps), then the half precision: both losses
 * must halve, with no late skipped step. */
static void loss_falls(const char *precision)
{
    double f32 = 0, l32 = 0, first = 0, last = 0;
    long late32 = 0, late = 0;
    loss_run("fp32", &f32, &l32, &late32);
    loss_run(precision, &first, &last, &late);
    T_CHECK_MSG(isfinite(l32) && l32 < 0.5 * f32, "fp32 itself: loss %.4f -> %.4f", f32, l32);
    T_CHECK_MSG(isfinite(last) && last < 0.5 * first,
                "%s: loss %.4f -> %.4f (fp32: %.4f -> %.4f)", precision, first, last, f32, l32);
    T_EQ_INT(late, 0);
}

static void test_gpu_train_bf16_loss_falls(void)
{
    loss_falls("bf16");
}
static void test_gpu_train_fp16_loss_falls(void)
{
    loss_falls("fp16");
}

/* Trains ALT_STEPS SGD steps of resnet18-cifar (conv-bn-relu blocks) on one batch with
 * the runner made with opts; the losses and the parameters after. *done = 1 when all of
 * it ran (a failure is recorded and ends the case). */
enum { ALT_B = 8, ALT_STEPS = 3 };
static void train_alt(const char *precision, const struct gmodel_opts *opts,
                      double losses[ALT_STEPS], float *params, struct gmodel_cudnn_info *info,
                      int *done)
{
    struct err e = {0};
    struct nn_model m;
    nn_model_init(&m);
    *done = 0;
    T_OK(nn_models_build(&m, "resnet18-cifar", 3, 32, 32, 10, NULL, &e));
    T_OK(nn_model_init_params(&m, 5, &e));
    static float x[ALT_B * 3 * 32 * 32];
    static int32_t y[ALT_B];
    fill_batch(x, y, ALT_B, 3 * 32 * 32, 10, 13);
    struct gmodel *g = gmodel_create(&m, ALT_B, precision, NULL, opts, &e);
    T_CHECK_MSG(g, "%s", e.msg);
    gmodel_cudnn_info(g, info);
    struct nn_optim_cfg oc = sgd_cfg();
    struct nn_optim o;
    int rc = nn_optim_init(&o, &oc, m.nparams, &e) < 0 || gmodel_optim_init(g, &oc, &e) < 0;
    for (int s = 0; rc == 0 && s < ALT_STEPS; s++) {
        int right;
        gmodel_mark_step_begin(g);
        gmodel_zero_grad(g);
        rc = gmodel_forward(g, x, y, ALT_B, 1, (uint64_t)s, true, 1.0f, &e) < 0 ||
             gmodel_backward(g, NULL, NULL, &e) < 0 ||
             gmodel_wait_loss(g, &losses[s], &right, &e) < 0;
        nn_optim_begin_step(&o);
        gmodel_optim_update(g, &o, oc.lr, 0, 0, m.nparams);
        gmodel_after_update(g);
    }
    rc = rc || gmodel_download(g, params, NULL, &e) < 0;
    gmodel_destroy(g);
    nn_optim_cleanup(&o);
    nn_model_destroy(&m);
    T_CHECK_MSG(rc == 0, "%s", e.msg);
    *done = 1;
}

/* Largest |a - b| over max(1e-3, largest |b|). */
static double params_err(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-3;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return d / m;
}

/* One model, two runners differing in one cuDNN choice: the losses of every step and the
 * parameters after must agree within tol. */
static void compare_runners(const char *precision, const struct gmodel_opts *a,
                            const struct gmodel_opts *b, double tol,
                            struct gmodel_cudnn_info ia[1], struct gmodel_cudnn_info ib[1])
{
    struct nn_model m;
    struct err e = {0};
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "resnet18-cifar", 3, 32, 32, 10, NULL, &e));
    size_t n = m.nparams;
    nn_model_destroy(&m);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    double la[ALT_STEPS], lb[ALT_STEPS];
    int done_a = 0, done_b = 0;
    T_CHECK(pa && pb);
    train_alt(precision, a, la, pa, ia, &done_a);
    if (done_a)
        train_alt(precision, b, lb, pb, ib, &done_b);
    if (done_a && done_b) {
        for (int s = 0; s < ALT_STEPS; s++)
            T_CHECK_MSG(fabs(la[s] - lb[s]) <= tol * fabs(lb[s]),
                        "%s step %d loss %.6f vs %.6f", precision, s, la[s], lb[s]);
        T_CHECK_MSG(params_err(pa, pb, n) <= tol, "%s parameters differ by %g", precision,
                    params_err(pa, pb, n));
        fprintf(stderr, "    %s: losses %.5f %.5f %.5f vs %.5f %.5f %.5f\n", precision, la[0],
                la[1], la[2], lb[0], lb[1], lb[2]);
    }
    free(pa);
    free(pb);
}

/* The runner takes cuDNN's fused BN+ReLU for resnet18's conv-bn-relu blocks in fp16 and
 * trains as the plain path does. */
static void test_gpu_train_fused_bn_relu(void)
{
    struct gmodel_cudnn_info fused = {0}, plain = {0};
    compare_runners("fp16", &(struct gmodel_opts){0},
                    &(struct gmodel_opts){.no_fused_bn = true}, 2e-2, &fused, &plain);
    T_CHECK_MSG(fused.bn_fused > 0 && fused.bn_plain == 0, "fused runner: %d fused, %d plain",
                fused.bn_fused, fused.bn_plain);
    T_EQ_INT(plain.bn_fused, 0);
}

/* Benchmark mode (measured algorithms, cached per shape) trains resnet18-cifar in fp32 as
 * the heuristics' choices do, measuring each distinct convolution shape once. */
static void test_gpu_train_cudnn_benchmark(void)
{
    struct gmodel_cudnn_info bench = {0}, heur = {0};
    compare_runners("fp32", &(struct gmodel_opts){.cudnn_benchmark = true, .trace = stderr},
                    &(struct gmodel_opts){.trace = stderr}, 1e-4, &bench, &heur);
    T_CHECK_MSG(bench.conv_ranked > 0 && bench.conv_cached > 0,
                "benchmark: %d ranked, %d cached", bench.conv_ranked, bench.conv_cached);
    T_EQ_INT(bench.conv_ranked + bench.conv_cached, heur.conv_ranked + heur.conv_cached);
    T_CHECK(bench.workspace_bytes > 0 || heur.workspace_bytes == 0);
}

static void test_gpu_train_refusals(void)
{
    struct err e = {0};
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "lenet5", 1, 28, 28, 10, NULL, &e));
    T_CHECK(gmodel_create(&m, 4, "fp32", NULL, NULL, &e) == NULL); /* no parameters yet */
    T_EQ_STR(e.field, "model");
    T_OK(nn_model_init_params(&m, 1, &e));
    T_CHECK(gmodel_create(&m, 4, "fp8", NULL, NULL, &e) == NULL);
    T_EQ_STR(e.field, "precision");
    T_CHECK(gmodel_create(&m, 0, "fp32", NULL, NULL, &e) == NULL);
    T_EQ_STR(e.field, "batch_size");
    nn_model_destroy(&m);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    gpu_test_require_device();
    TEST_RUN(test_gpu_train_refusals);
    TEST_RUN(test_gpu_train_lenet5_fp32);
    TEST_RUN(test_gpu_train_mnist_cnn_dropout);
    TEST_RUN(test_gpu_train_resnet18_cifar);
    TEST_RUN(test_gpu_train_bf16_loss_falls);
    TEST_RUN(test_gpu_train_fp16_loss_falls);
    TEST_RUN(test_gpu_train_fused_bn_relu);
    TEST_RUN(test_gpu_train_cudnn_benchmark);
    return test_end();
}
