/* GPU tests (suite 'gpu', needs a CUDA device; never run by tests/run.sh): the CUDA twins
 * of nn/ against the CPU reference on random inputs, in fp32, fp16 and bf16 with a
 * tolerance per precision (relative to the largest magnitude: fp32 1e-5, fp16 2e-3 per
 * operation, bf16 1.6e-2, widened by the reduction length for linear), then a short
 * training run on the GPU kernels (linear -> ReLU -> linear -> softmax cross-entropy, SGD)
 * whose loss must fall. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/cuda/gpu.h"
#include "worker/nn/cuda/gpu_layers.h"
#include "worker/nn/layers.h"
#include "worker/nn/optim.h"
#include "tests/gpu/gpu_test.h"
#include "tests/unit/test.h"

static const enum gpu_dtype dtypes[] = {GPU_F32, GPU_F16, GPU_BF16};

static double tol_of(enum gpu_dtype t)
{
    return t == GPU_F32 ? 1e-5 : t == GPU_F16 ? 2e-3 : 1.6e-2;
}

static void fill_random(float *x, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
}

/* Device copy of host floats in dtype t (owned). */
static void *upload_as(const float *h, size_t n, enum gpu_dtype t, struct err *e)
{
    float *d32 = gpu_alloc(n * sizeof *d32, e);
    void *d = d32 ? gpu_alloc(n * gpu_dtype_size(t), e) : NULL;
    if (!d || gpu_upload(d32, h, n * sizeof *h, e) < 0) {
        gpu_free(d32);
        gpu_free(d);
        return NULL;
    }
    gpu_cast(d, t, d32, GPU_F32, n, 0);
    gpu_sync(0, "cast", e);
    gpu_free(d32);
    return d;
}

/* Host floats of a device array of dtype t. */
static int download_from(float *h, const void *d, size_t n, enum gpu_dtype t, struct err *e)
{
    float *d32 = gpu_alloc(n * sizeof *d32, e);
    if (!d32)
        return -1;
    gpu_cast(d32, GPU_F32, d, t, n, 0);
    int rc = gpu_sync(0, "cast", e) < 0 ? -1 : gpu_download(h, d32, n * sizeof *h, e);
    gpu_free(d32);
    return rc;
}

/* Largest |a - b| over max(1, largest |b|). */
static double rel_err(const float *a, const float *b, size_t n)
{
    double m = 1, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    return d / m;
}

/* The reference sees the inputs as the GPU does: rounded to dtype t. */
static void round_to(float *x, size_t n, enum gpu_dtype t, struct err *e)
{
    void *d = upload_as(x, n, t, e);
    if (d)
        download_from(x, d, n, t, e);
    gpu_free(d);
}

static void test_relu(void)
{
    struct err e = {0};
    enum { N = 4099 };
    static float x[N], ref[N], got[N], dout[N], dref[N];
    for (size_t k = 0; k < 3; k++) {
        enum gpu_dtype t = dtypes[k];
        unsigned seed = 7;
        fill_random(x, N, &seed);
        fill_random(dout, N, &seed);
        round_to(x, N, t, &e);
        round_to(dout, N, t, &e);
        nn_act_forward(ref, x, N, NN_ACT_RELU);
        nn_act_backward(dref, dout, ref, N, NN_ACT_RELU);
        void *dx = upload_as(x, N, t, &e), *dy = gpu_alloc(N * gpu_dtype_size(t), &e);
        void *ddo = upload_as(dout, N, t, &e), *ddi = gpu_alloc(N * gpu_dtype_size(t), &e);
        T_CHECK_MSG(dx && dy && ddo && ddi, "%s", e.msg);
        gpu_act_forward(dy, dx, N, GPU_ACT_RELU, t, 0);
        gpu_act_backward(ddi, ddo, dy, N, GPU_ACT_RELU, t, 0);
        T_OK(gpu_sync(0, "relu", &e));
        T_OK(download_from(got, dy, N, t, &e));
        T_CHECK_MSG(rel_err(got, ref, N) == 0, "%s relu forward", gpu_dtype_name(t));
        T_OK(download_from(got, ddi, N, t, &e));
        T_CHECK_MSG(rel_err(got, dref, N) == 0, "%s relu backward", gpu_dtype_name(t));
        gpu_free(dx);
        gpu_free(dy);
        gpu_free(ddo);
        gpu_free(ddi);
    }
}

static void test_linear(void)
{
    struct err e = {0};
    cublasHandle_t h;
    T_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    enum { B = 33, I = 257, O = 65 };
    struct nn_linear_cfg cfg = {.in = I, .out = O, .bias = 1};
    static float x[B * I], w[O * I], bias[O], dout[B * O], ref[B * O], got[B * O];
    static float dx_ref[B * I], dw_ref[O * I], db_ref[O], dx_got[B * I], dw_got[O * I];
    for (size_t k = 0; k < 3; k++) {
        enum gpu_dtype t = dtypes[k];
        unsigned seed = 11;
        fill_random(x, B * I, &seed);
        fill_random(w, O * I, &seed);
        fill_random(bias, O, &seed);
        fill_random(dout, B * O, &seed);
        round_to(x, B * I, t, &e);
        round_to(w, O * I, t, &e);
        round_to(dout, B * O, t, &e);
        nn_linear_forward(ref, x, w, bias, &cfg, B);
        memset(dw_ref, 0, sizeof dw_ref);
        memset(db_ref, 0, sizeof db_ref);
        nn_linear_backward(dx_ref, dw_ref, db_ref, dout, x, w, &cfg, B);
        struct gpu_linear f;
        T_OK(gpu_linear_init(&f, h, &cfg, B, t, &e));
        void *dx = upload_as(x, B * I, t, &e), *dw = upload_as(w, O * I, t, &e);
        void *ddo = upload_as(dout, B * O, t, &e);
        float *db = gpu_alloc(O * sizeof(float), &e),
              *dwg = gpu_alloc(O * I * sizeof(float), &e);
        float *dbg = gpu_alloc(O * sizeof(float), &e);
        void *dy = gpu_alloc(B * O * gpu_dtype_size(t), &e);
        void *ddx = gpu_alloc(B * I * gpu_dtype_size(t), &e);
        T_CHECK_MSG(dx && dw && ddo && db && dwg && dbg && dy && ddx, "%s", e.msg);
        T_OK(gpu_upload(db, bias, sizeof bias, &e));
        T_OK(gpu_linear_forward(&f, dy, dx, dw, db, 0, &e));
        T_OK(gpu_linear_backward(&f, ddx, dwg, dbg, ddo, dx, dw, 0, &e));
        T_OK(gpu_sync(0, "linear", &e));
        double tol = tol_of(t) * (t == GPU_F32 ? 10 : sqrt((double)I));
        T_OK(download_from(got, dy, B * O, t, &e));
        T_CHECK_MSG(rel_err(got, ref, B * O) < tol, "%s forward %g", gpu_dtype_name(t),
                    rel_err(got, ref, B * O));
        T_OK(download_from(dx_got, ddx, B * I, t, &e));
        T_CHECK_MSG(rel_err(dx_got, dx_ref, B * I) < tol, "%s dinp %g", gpu_dtype_name(t),
                    rel_err(dx_got, dx_ref, B * I));
        T_OK(gpu_download(dw_got, dwg, sizeof dw_got, &e));
        T_CHECK_MSG(rel_err(dw_got, dw_ref, O * I) < tol, "%s dweight %g", gpu_dtype_name(t),
                    rel_err(dw_got, dw_ref, O * I));
        void *all[] = {dx, dw, ddo, db, dwg, dbg, dy, ddx};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            gpu_free(all[i]);
    }
    cublasDestroy(h);
}

static void test_xent(void)
{
    struct err e = {0};
    enum { N = 64, K = 10 };
    static float logits[N * K], probs_ref[N * K], dl_ref[N * K], dl_got[N * K];
    int32_t labels[N];
    unsigned seed = 5;
    for (size_t k = 0; k < 3; k++) {
        enum gpu_dtype t = dtypes[k];
        fill_random(logits, N * K, &seed);
        for (int i = 0; i < N; i++)
            labels[i] = rand_r(&seed) % K;
        round_to(logits, N * K, t, &e);
        double loss_ref;
        int correct_ref;
        T_OK(nn_xent_forward(probs_ref, &loss_ref, &correct_ref, logits, labels, N, K, N, &e));
        nn_xent_backward(dl_ref, probs_ref, labels, N, K, N);
        void *dlog = upload_as(logits, N * K, t, &e),
             *ddl = gpu_alloc(N * K * gpu_dtype_size(t), &e);
        float *probs = gpu_alloc(N * K * sizeof(float), &e),
              *rows = gpu_alloc(N * sizeof(float), &e);
        int *rc = gpu_alloc(N * sizeof(int), &e), *bad = gpu_alloc(sizeof(int), &e);
        int *correct = gpu_alloc(sizeof(int), &e);
        double *loss = gpu_alloc(sizeof(double), &e);
        int32_t *dlab = gpu_alloc(sizeof labels, &e);
        T_CHECK_MSG(dlog && ddl && probs && rows && rc && bad && correct && loss && dlab, "%s",
                    e.msg);
        T_OK(gpu_upload(dlab, labels, sizeof labels, &e));
        gpu_xent_forward(probs, rows, rc, bad, dlog, t, dlab, N, K, N, 0);
        gpu_xent_reduce(loss, correct, rows, rc, N, N, 0);
        gpu_xent_backward(ddl, t, probs, dlab, N, K, N, 1.0f, 0);
        T_OK(gpu_sync(0, "xent", &e));
        double loss_got;
        int correct_got, bad_got;
        T_OK(gpu_download(&loss_got, loss, sizeof loss_got, &e));
        T_OK(gpu_download(&correct_got, correct, sizeof correct_got, &e));
        T_OK(gpu_download(&bad_got, bad, sizeof bad_got, &e));
        T_NEAR(loss_got, loss_ref, 1e-5 * fabs(loss_ref) + 1e-6);
        T_EQ_INT(correct_got, correct_ref);
        T_EQ_INT(bad_got, 0);
        T_OK(download_from(dl_got, ddl, N * K, t, &e));
        T_CHECK_MSG(rel_err(dl_got, dl_ref, N * K) < tol_of(t) * 4, "%s dlogits %g",
                    gpu_dtype_name(t), rel_err(dl_got, dl_ref, N * K));
        void *all[] = {dlog, ddl, probs, rows, rc, bad, correct, loss, dlab};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            gpu_free(all[i]);
    }
}

/* linear(32->64) -> ReLU -> linear(64->4) -> xent on a fixed separable batch, plain SGD on
 * the device: the loss after 60 steps is well below the first one. */
static void test_train_smoke(void)
{
    struct err e = {0};
    cublasHandle_t h;
    T_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    enum { N = 64, I = 32, H = 64, K = 4 };
    struct nn_linear_cfg c1 = {I, H, 1}, c2 = {H, K, 1};
    size_t np = (size_t)H * I + H + (size_t)K * H + K;
    static float hp[H * I + H + K * H + K], hx[N * I];
    int32_t hl[N];
    unsigned seed = 3;
    fill_random(hp, np, &seed);
    for (size_t i = 0; i < np; i++)
        hp[i] *= 0.2f;
    for (int n = 0; n < N; n++) { /* class k: feature block k is large */
        hl[n] = n % K;
        for (int i = 0; i < I; i++)
            hx[n * I + i] = (i / (I / K) == hl[n] ? 1.0f : 0.0f) +
                            0.1f * ((float)rand_r(&seed) / (float)RAND_MAX - 0.5f);
    }
    float *p = gpu_alloc(np * sizeof(float), &e), *g = gpu_alloc(np * sizeof(float), &e);
    float *x = gpu_alloc(sizeof hx, &e), *a1 = gpu_alloc(N * H * sizeof(float), &e);
    float *lg = gpu_alloc(N * K * sizeof(float), &e),
          *dlg = gpu_alloc(N * K * sizeof(float), &e);
    float *da1 = gpu_alloc(N * H * sizeof(float), &e),
          *probs = gpu_alloc(N * K * sizeof(float), &e);
    float *rows = gpu_alloc(N * sizeof(float), &e);
    int *rc = gpu_alloc(N * sizeof(int), &e), *bad = gpu_alloc(sizeof(int), &e);
    int *corr = gpu_alloc(sizeof(int), &e);
    double *loss = gpu_alloc(sizeof(double), &e);
    int32_t *lab = gpu_alloc(sizeof hl, &e);
    T_CHECK_MSG(p && g && x && a1 && lg && dlg && da1 && probs && rows && rc && bad && corr &&
                    loss && lab,
                "%s", e.msg);
    T_OK(gpu_upload(p, hp, np * sizeof(float), &e));
    T_OK(gpu_upload(x, hx, sizeof hx, &e));
    T_OK(gpu_upload(lab, hl, sizeof hl, &e));
    float *w1 = p, *b1 = w1 + H * I, *w2 = b1 + H, *b2 = w2 + K * H;
    float *gw1 = g, *gb1 = gw1 + H * I, *gw2 = gb1 + H, *gb2 = gw2 + K * H;
    struct gpu_linear l1, l2;
    T_OK(gpu_linear_init(&l1, h, &c1, N, GPU_F32, &e));
    T_OK(gpu_linear_init(&l2, h, &c2, N, GPU_F32, &e));
    struct gpu_optim_scalars sc = {.type = NN_OPTIM_SGD, .lr = 0.5f, .damp = 1.0f, .first = 1};
    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
        T_OK(gpu_linear_forward(&l1, a1, x, w1, b1, 0, &e));
        gpu_act_forward(a1, a1, N * H, GPU_ACT_RELU, GPU_F32, 0);
        T_OK(gpu_linear_forward(&l2, lg, a1, w2, b2, 0, &e));
        gpu_xent_forward(probs, rows, rc, bad, lg, GPU_F32, lab, N, K, N, 0);
        gpu_xent_reduce(loss, corr, rows, rc, N, N, 0);
        gpu_xent_backward(dlg, GPU_F32, probs, lab, N, K, N, 1.0f, 0);
        T_OK(gpu_check(cudaMemset(g, 0, np * sizeof(float)), "zero grads", &e));
        T_OK(gpu_linear_backward(&l2, da1, gw2, gb2, dlg, a1, w2, 0, &e));
        gpu_act_backward(da1, da1, a1, N * H, GPU_ACT_RELU, GPU_F32, 0);
        T_OK(gpu_linear_backward(&l1, NULL, gw1, gb1, da1, x, w1, 0, &e));
        gpu_optim_update(p, g, NULL, np, np, &sc, 0);
        T_OK(gpu_sync(0, "step", &e));
        double l;
        T_OK(gpu_download(&l, loss, sizeof l, &e));
        if (step == 0)
            first = l;
        last = l;
    }
    T_CHECK_MSG(isfinite(last) && last < 0.25 * first, "loss %g -> %g", first, last);
    void *all[] = {p, g, x, a1, lg, dlg, da1, probs, rows, rc, bad, corr, loss, lab};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        gpu_free(all[i]);
    cublasDestroy(h);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    gpu_test_require_device();
    TEST_RUN(test_relu);
    TEST_RUN(test_linear);
    TEST_RUN(test_xent);
    TEST_RUN(test_train_smoke);
    return test_end();
}
