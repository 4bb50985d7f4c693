/* nn_bench: times training steps of a zoo model on the CPU engine (worker/nn), to compare
 * with PyTorch's (tests/bench/nn_bench_torch.py runs the same loop: one fixed random batch,
 * zero_grad + forward + cross-entropy + backward + SGD(lr 0.01, momentum 0.9) step).
 *
 *   nn_bench MODEL BATCH THREADS [STEPS] [--shape C,H,W] [--classes K] [--warmup N]
 *            [--conv auto|direct|winograd] [--bf16 auto|native|emulated] [--ref] [--print]
 *            [--layers]
 *
 * --conv direct is PyTorch's convolution algorithm (a like-for-like comparison); the default
 * auto is the engine's (Winograd for large 3x3 stride-1 layers). --bf16 trains in bf16
 * (worker/nn/onednn.h enum nn_bf16): oneDNN's bf16 kernels where the CPU has them (auto),
 * one path forced (native fails where oneDNN has none); ONEDNN_VERBOSE=profile_exec then
 * times each primitive, the conversions included. --layers adds one line per layer: its
 * forward and backward wall time per step (median over the timed steps; the model's
 * profile_ns clock around each row, so a layer's reorders count in it), for the per-layer
 * table against nn_bench_torch.py --layers.
 *
 * Prints the median step time and images/s with the phase split (forward, loss+backward,
 * optimizer). A benchmark, not a test: it reports numbers, never pass/fail. Measure with
 * `flock /tmp/ddpb-bench.lock` and the glibc settings that keep freed memory
 * (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296) for both peers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/bench/bench_time.h"
#include "worker/nn/layer_type.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"

struct bench_args {
    const char *model;
    int batch, threads, steps, warmup, classes, ref, print, layers;
    enum nn_conv_algo conv;
    enum nn_bf16 bf16;
    int c, h, w;
};

/* Per-layer times of the timed steps: prof[(step * 2 + pass) * nnodes + node] in ns, pass
 * 0 forward, 1 backward. Owned by the caller. */
struct bench_layers {
    int64_t *prof;
    int nnodes, steps;
};

static void bench_layers_print(const struct bench_layers *l, struct nn_model *m, FILE *out)
{
    double *col = malloc((size_t)l->steps * sizeof *col);
    for (int i = 0; i < l->nnodes; i++) {
        double med[2];
        for (int pass = 0; pass < 2; pass++) {
            for (int s = 0; s < l->steps; s++)
                col[s] = (double)l->prof[((size_t)s * 2 + pass) * l->nnodes + i] * 1e-6;
            med[pass] = bench_time_median(col, l->steps);
        }
        struct nn_node_info ni;
        nn_model_node_info(m, i, &ni);
        char sb[64], ib[64], what[64] = "";
        if (ni.op == NN_OP_CONV) /* the kernel: a conv's row in the torch table */
            snprintf(what, sizeof what, "k%dx%d/s%d", ni.cfg.conv.kh, ni.cfg.conv.kw,
                     ni.cfg.conv.sh);
        fprintf(out, "layer %3d %-22s %-10s %-16s -> %-16s %-9s fwd %8.3f bwd %8.3f ms\n", i,
                ni.name, nn_layer_type_get(ni.op)->name,
                nn_shape_str(m->tensors[ni.in[0]].shape, ib, sizeof ib),
                nn_shape_str(m->tensors[ni.out].shape, sb, sizeof sb), what, med[0], med[1]);
    }
    free(col);
}

static int bench_parse(struct bench_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->steps = 20;
    a->warmup = 3;
    a->classes = 10;
    a->conv = NN_CONV_AUTO; /* the model's default */
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d,%d,%d", &a->c, &a->h, &a->w) != 3)
                return -1;
        } else if (!strcmp(argv[i], "--classes") && i + 1 < argc) {
            a->classes = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) {
            a->warmup = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--conv") && i + 1 < argc) {
            const char *v = argv[++i];
            a->conv = !strcmp(v, "winograd") ? NN_CONV_WINOGRAD
                      : !strcmp(v, "auto")   ? NN_CONV_AUTO
                                             : NN_CONV_DIRECT;
        } else if (!strcmp(argv[i], "--bf16") && i + 1 < argc) {
            const char *v = argv[++i];
            a->bf16 = !strcmp(v, "native")     ? NN_BF16_NATIVE
                      : !strcmp(v, "emulated") ? NN_BF16_EMULATED
                                               : NN_BF16_AUTO;
        } else if (!strcmp(argv[i], "--ref")) {
            a->ref = 1;
        } else if (!strcmp(argv[i], "--print")) {
            a->print = 1;
        } else if (!strcmp(argv[i], "--layers")) {
            a->layers = 1;
        } else if (pos == 0) {
            a->model = argv[i], pos++;
        } else if (pos == 1) {
            a->batch = atoi(argv[i]), pos++;
        } else if (pos == 2) {
            a->threads = atoi(argv[i]), pos++;
        } else if (pos == 3) {
            a->steps = atoi(argv[i]), pos++;
        } else {
            return -1;
        }
    }
    if (pos < 3 || a->batch < 1 || a->threads < 1 || a->steps < 1)
        return -1;
    if (!a->c) {
        int gray = !strcmp(a->model, "mnist-cnn") || !strcmp(a->model, "lenet5");
        a->c = gray ? 1 : 3;
        a->h = a->w = gray ? 28 : 32;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_args a;
    if (bench_parse(&a, argc, argv)) {
        fprintf(stderr, "usage: nn_bench MODEL BATCH THREADS [STEPS] [--shape C,H,W] "
                        "[--classes K] [--warmup N] [--conv direct|winograd|auto] "
                        "[--bf16 auto|native|emulated] [--ref] [--print] [--layers]\n");
        return 2;
    }
    nn_set_threads(a.threads);
    struct err e;
    struct nn_model m;
    struct nn_optim opt;
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_SGD);
    oc.momentum = 0.9;
    nn_model_init(&m);
    size_t n = (size_t)a.batch * a.c * a.h * a.w;
    float *x = malloc(n * sizeof *x);
    int32_t *y = malloc((size_t)a.batch * sizeof *y);
    struct nn_rng r;
    nn_rng_seed(&r, 42);
    nn_rng_fill_normal(&r, x, n, 0, 1);
    for (int i = 0; i < a.batch; i++)
        y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)a.classes);
    nn_model_set_conv_algo(&m, a.conv);
    nn_model_set_bf16(&m, a.bf16);
    if (nn_models_build(&m, a.model, a.c, a.h, a.w, a.classes, NULL, &e) ||
        nn_model_init_params(&m, 0, &e) ||
        nn_model_prepare(&m, a.batch, a.ref ? NN_BACKEND_REF : NN_BACKEND_FAST, 1, &e) ||
        nn_optim_init(&opt, &oc, nn_model_param_count(&m), &e)) {
        fprintf(stderr, "nn_bench: %s\n", e.msg);
        return 1;
    }
    if (a.print)
        nn_model_print(&m, stdout);
    int total = a.warmup + a.steps;
    double *t = calloc((size_t)a.steps * 4, sizeof *t);
    struct bench_layers lay = {.nnodes = nn_model_node_count(&m), .steps = a.steps};
    int64_t *scratch = NULL;
    if (a.layers) {
        lay.prof = calloc((size_t)a.steps * 2 * (size_t)lay.nnodes, sizeof *lay.prof);
        scratch = calloc((size_t)lay.nnodes, sizeof *scratch); /* the warm-up steps' */
    }
    double loss = 0;
    for (int s = 0; s < total; s++) {
        int correct;
        int64_t *prof = !a.layers      ? NULL
                        : s < a.warmup ? scratch
                                       : lay.prof + (size_t)(s - a.warmup) * 2 * lay.nnodes;
        double t0 = bench_time_now(CLOCK_MONOTONIC);
        nn_model_zero_grad(&m);
        m.profile_ns = prof;
        int rc = nn_model_forward(&m, x, 1, (uint64_t)s, &e);
        double t1 = bench_time_now(CLOCK_MONOTONIC);
        rc = rc || nn_model_loss(&m, y, a.batch, &loss, &correct, &e);
        m.profile_ns = prof && prof != scratch ? prof + lay.nnodes : prof;
        rc = rc || nn_model_backward(&m, NULL, NULL, &e);
        m.profile_ns = NULL;
        double t2 = bench_time_now(CLOCK_MONOTONIC);
        nn_optim_step(&opt, m.params.data, m.grads.data, oc.lr);
        double t3 = bench_time_now(CLOCK_MONOTONIC);
        if (rc) {
            fprintf(stderr, "nn_bench: %s\n", e.msg);
            return 1;
        }
        if (s >= a.warmup) {
            double *row = t + (size_t)(s - a.warmup) * 4;
            row[0] = t3 - t0, row[1] = t1 - t0, row[2] = t2 - t1, row[3] = t3 - t2;
        }
    }
    double med[4];
    double *col = malloc((size_t)a.steps * sizeof *col);
    for (int k = 0; k < 4; k++) {
        for (int s = 0; s < a.steps; s++)
            col[s] = t[(size_t)s * 4 + k];
        med[k] = bench_time_median(col, a.steps);
    }
    char info[128];
    static const char *const conv_names[] = {"direct", "auto", "winograd"};
    printf("ddpbench %s %dx%dx%d batch %d threads %d conv %s%s%s%s: median %.2f ms/step, %.1f "
           "img/s (forward %.2f, loss+backward %.2f, optimizer %.2f ms; %d steps; loss %.4f) "
           "[%s]\n",
           a.model, a.c, a.h, a.w, a.batch, a.threads, conv_names[a.conv],
           a.ref ? " (reference)" : "", m.have_dnnl && m.dnnl.bf16 ? " bf16 " : "",
           m.have_dnnl && m.dnnl.bf16 ? nn_bf16_path_name(m.dnnl.bf16) : "", med[0] * 1e3,
           a.batch / med[0], med[1] * 1e3, med[2] * 1e3, med[3] * 1e3, a.steps, loss,
           nn_runtime_info(info, sizeof info));
    if (a.layers)
        bench_layers_print(&lay, &m, stdout);
    free(lay.prof);
    free(scratch);
    free(col);
    free(t);
    free(x);
    free(y);
    nn_optim_cleanup(&opt);
    nn_model_destroy(&m);
    return 0;
}
