/* gmodel: the GPU model runner (gmodel.h): an nn_model graph walked with worker/nn/cuda's
 * layers (cuDNN convolution, batch norm and pooling; cuBLAS linear; own kernels for the
 * rest), device arenas at the host arenas' offsets, one workspace, per-layer events for
 * the gradient hook and CUDA-event phase timing.
 *
 * Decision: backward follows nn_model_backward step for step (reverse layer order; a
 * tensor read by several layers gets its first gradient written in place and later ones
 * through a scratch buffer that is added in; a branch that does not reach the loss gets
 * zeros), so the two engines agree on what "the gradient after layer i" means and ddp/'s
 * buckets fill in the same order.
 *
 * Decision: what each layer type does on the GPU is its row of gm_layer_types (init,
 * forward, backward, destroy), the twin of the CPU's rows (worker/nn/layer_type.h); the
 * runner dispatches through it, never on the op. An op without a row (the transformer's)
 * has no GPU form. */
#include "worker/nn/cuda/gmodel.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/cuda/gmodel_host.h"
#include "worker/nn/cuda/gmodel_kernels.h"
#include "worker/nn/cuda/gpu.h"
#include "worker/nn/cuda/gpu_layers.h"

#define GM_ALIGN 256

struct gm_tensor {
    struct nn_shape s; /* n = the batch */
    size_t numel;
    int needs_grad, grad_written;
    size_t data_off, grad_off; /* in the workspace */
    void *data, *grad;
};

union gm_layer {
    struct gpu_conv conv;
    struct gpu_bn bn;
    struct gpu_pool pool;
    struct gpu_linear lin;
};

struct gm_node {
    struct nn_node_info info;
    union gm_layer L;
    int have_layer;
    cudaEvent_t ready; /* layers with parameters: the end of their backward */
};

/* What the host reads back after a forward (and an unscale): one small copy into pinned
 * memory, waited on by an event, instead of a stream synchronisation and three blocking
 * copies. */
struct gm_tally {
    double loss;
    int correct;
    int flags[2]; /* flags[0]: bad label, flags[1]: non-finite gradient */
};

struct gm_micro { /* one forward + backward of a step */
    cudaEvent_t f0, f1, b1;
    int have_b1;
};

struct gmodel {
    struct nn_model *m; /* borrowed */
    int batch, classes;
    enum gpu_dtype t;
    size_t dsz;
    cudaStream_t s; /* borrowed */
    cudnnHandle_t dnn;
    struct gpu_dnn dl; /* what the cuDNN layers share: workspace, algorithm cache */
    cublasHandle_t blas;
    int nnodes, ntensors;
    struct gm_node *nodes;           /* owned */
    struct gm_tensor *tensors;       /* owned */
    float *params, *grads, *buffers; /* owned device arenas */
    void *wh;                        /* owned: half-precision parameters (fp16/bf16) */
    float *state;                    /* owned: optimizer state */
    size_t state_stride;
    char *ws;                             /* owned: the workspace */
    size_t ws_bytes;                      /* its size */
    float *x32, *probs, *row_loss, *xfer; /* xfer: gmodel_scratch_put */
    int32_t *labels;
    int *row_correct;
    struct gm_tally *tally;      /* in the workspace */
    struct gm_tally *host_tally; /* owned, pinned: its copy */
    cudaEvent_t tally_ready;     /* the copy of the last forward (or unscale) is there */
    int *flags, *correct;        /* into tally */
    double *loss;
    void *scratch[2];
    const float *last_x; /* the reused batch uploaded last */
    const int32_t *last_y;
    uint64_t step;
    int last_train, have_loss;
    struct gm_micro *micro; /* owned events */
    int nmicro, cap_micro;
    cudaEvent_t o0, o1;
    int have_optim_marks;
};

static size_t gm_reserve(size_t *at, size_t bytes)
{
    size_t off = (*at + GM_ALIGN - 1) / GM_ALIGN * GM_ALIGN;
    *at = off + bytes;
    return off;
}

static int gm_cuda(cudaError_t rc, const char *what, struct err *e)
{
    return gpu_check(rc, what, e);
}

/* ---- creation ------------------------------------------------------------------------ */

/* Node n's parameter k within arena (the parameters' or the gradients': one layout);
 * NULL when n has no parameter k. */
static float *gm_slice(struct gmodel *g, float *arena, const struct gm_node *n, int k)
{
    if (k >= n->info.nparams)
        return NULL;
    int count = 0;
    const struct nn_param *p = nn_model_param_info(g->m, &count);
    return arena + p[n->info.first_param + k].offset;
}

static float *gm_param(struct gmodel *g, const struct gm_node *n, int k)
{
    return gm_slice(g, g->params, n, k);
}

static float *gm_grad(struct gmodel *g, const struct gm_node *n, int k)
{
    return gm_slice(g, g->grads, n, k);
}

/* A convolution's or linear layer's weight in the activations' dtype. */
static const void *gm_weight(struct gmodel *g, const struct gm_node *n)
{
    float *w = gm_param(g, n, 0);
    if (g->t == GPU_F32)
        return w;
    return (char *)g->wh + (size_t)(w - g->params) * g->dsz;
}

/* ---- the layer types: one row per op (gm_layer_types below) -------------------------- */

/* One node's step on the GPU: what a row's forward or backward reads besides the node. */
struct gm_args {
    int node;
    int train;
    uint64_t step;
    void *din0, *din1; /* backward: the inputs' gradients to write, NULL to skip */
};

struct gm_layer_type {
    /* makes n->L (cuDNN or cuBLAS state); NULL: the layer has none */
    int (*init)(struct gmodel *g, struct gm_node *n, struct err *e);
    int (*forward)(struct gmodel *g, struct gm_node *n, const struct gm_args *a, struct err *e);
    int (*backward)(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                    struct err *e);
    void (*destroy)(struct gm_node *n); /* releases n->L; NULL: nothing to */
};

static uint64_t gm_dropout_key(struct gmodel *g, int node, uint64_t step)
{
    return nn_dropout_key(g->m->seed, step, node);
}

static struct gm_tensor *gm_x(struct gmodel *g, const struct gm_node *n)
{
    return &g->tensors[n->info.in[0]];
}

static struct gm_tensor *gm_y(struct gmodel *g, const struct gm_node *n)
{
    return &g->tensors[n->info.out];
}

/* conv2d: cuDNN; benchmark mode measures on the layer's own buffers */
static int gm_conv_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    struct gm_tensor *x = gm_x(g, n), *y = gm_y(g, n);
    struct gpu_conv_bufs b = {.x = x->data,
                              .w = gm_weight(g, n),
                              .dy = y->grad ? y->grad : g->scratch[1],
                              .y = y->data,
                              .dx = x->grad ? x->grad : g->scratch[0],
                              .dw = gm_grad(g, n, 0)};
    return gpu_conv_init(&n->L.conv, &g->dl, &n->info.cfg.conv, x->s, g->t, 1, &b, e);
}

static int gm_conv_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                           struct err *e)
{
    (void)a;
    return gpu_conv_forward(&n->L.conv, gm_y(g, n)->data, gm_x(g, n)->data, gm_weight(g, n),
                            gm_param(g, n, 1), g->s, e);
}

static int gm_conv_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                            struct err *e)
{
    return gpu_conv_backward(&n->L.conv, a->din0, gm_grad(g, n, 0), gm_grad(g, n, 1),
                             gm_y(g, n)->grad, gm_x(g, n)->data, gm_weight(g, n), g->s, e);
}

static void gm_conv_destroy(struct gm_node *n)
{
    gpu_conv_destroy(&n->L.conv);
}

/* batch norm: cuDNN */
static int gm_bn_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    return gpu_bn_init(&n->L.bn, &g->dl, &n->info.cfg.bn, gm_x(g, n)->s, g->t, e);
}

static int gm_bn_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                         struct err *e)
{
    float *run = g->buffers + n->info.buf_off;
    return gpu_bn_forward(&n->L.bn, gm_y(g, n)->data, run, run + n->info.cfg.bn.c,
                          gm_x(g, n)->data, gm_param(g, n, 0), gm_param(g, n, 1), a->train,
                          g->s, e);
}

static int gm_bn_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                          struct err *e)
{ /* cuDNN always writes the input gradient */
    struct gm_tensor *y = gm_y(g, n);
    return gpu_bn_backward(&n->L.bn, a->din0 ? a->din0 : g->scratch[0], gm_grad(g, n, 0),
                           gm_grad(g, n, 1), y->grad, gm_x(g, n)->data, y->data,
                           gm_param(g, n, 0), gm_param(g, n, 1), g->s, e);
}

static void gm_bn_destroy(struct gm_node *n)
{
    gpu_bn_destroy(&n->L.bn);
}

/* activation: own kernels */
static int gm_act_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                          struct err *e)
{
    (void)a, (void)e;
    struct gm_tensor *x = gm_x(g, n);
    gpu_act_forward(gm_y(g, n)->data, x->data, x->numel, (enum gpu_act)n->info.cfg.act, g->t,
                    g->s);
    return 0;
}

static int gm_act_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                           struct err *e)
{
    (void)e;
    struct gm_tensor *y = gm_y(g, n);
    gpu_act_backward(a->din0, y->grad, y->data, gm_x(g, n)->numel,
                     (enum gpu_act)n->info.cfg.act, g->t, g->s);
    return 0;
}

/* pooling: cuDNN; adaptive pooling only where it is an ordinary one (gmodel_check) */
static int gm_maxpool_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    return gpu_pool_init(&n->L.pool, g->dnn, 1, &n->info.cfg.pool, gm_x(g, n)->s, g->t, e);
}

static int gm_avgpool_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    return gpu_pool_init(&n->L.pool, g->dnn, 0, &n->info.cfg.pool, gm_x(g, n)->s, g->t, e);
}

static int gm_adaptive_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    const struct nn_node_info *i = &n->info;
    struct nn_pool_cfg pc;
    if (!nn_adaptive_as_pool(&pc, i->cfg.adapt.oh, i->cfg.adapt.ow, gm_x(g, n)->s))
        return err_set(e, ERR_INVALID, "model",
                       "gpu: %s: adaptive pooling that is no "
                       "ordinary pooling",
                       i->name); /* gmodel_check said so first */
    return gpu_pool_init(&n->L.pool, g->dnn, 0, &pc, gm_x(g, n)->s, g->t, e);
}

static int gm_pool_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                           struct err *e)
{
    (void)a;
    return gpu_pool_forward(&n->L.pool, gm_y(g, n)->data, gm_x(g, n)->data, g->s, e);
}

static int gm_pool_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                            struct err *e)
{
    struct gm_tensor *y = gm_y(g, n);
    return gpu_pool_backward(&n->L.pool, a->din0, y->grad, y->data, gm_x(g, n)->data, g->s, e);
}

static void gm_pool_destroy(struct gm_node *n)
{
    gpu_pool_destroy(&n->L.pool);
}

/* linear: cuBLAS (its state holds no resource: no destroy) */
static int gm_linear_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    return gpu_linear_init(&n->L.lin, g->blas, &n->info.cfg.linear, gm_x(g, n)->s.n, g->t, e);
}

static int gm_linear_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                             struct err *e)
{
    (void)a;
    return gpu_linear_forward(&n->L.lin, gm_y(g, n)->data, gm_x(g, n)->data, gm_weight(g, n),
                              gm_param(g, n, 1), g->s, e);
}

static int gm_linear_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                              struct err *e)
{
    return gpu_linear_backward(&n->L.lin, a->din0, gm_grad(g, n, 0), gm_grad(g, n, 1),
                               gm_y(g, n)->grad, gm_x(g, n)->data, gm_weight(g, n), g->s, e);
}

/* dropout: own kernel, keyed as the CPU's; identity in evaluation */
static int gm_dropout_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                              struct err *e)
{
    (void)e;
    struct gm_tensor *x = gm_x(g, n), *y = gm_y(g, n);
    struct nn_shape xs = x->s;
    if (a->train)
        gmodel_k_dropout(y->data, x->data, g->t, xs.n, xs.c, xs.h, xs.w, n->info.cfg.dropout.p,
                         n->info.cfg.dropout.channelwise, gm_dropout_key(g, a->node, a->step),
                         g->s);
    else
        cudaMemcpyAsync(y->data, x->data, x->numel * g->dsz, cudaMemcpyDeviceToDevice, g->s);
    return 0;
}

static int gm_dropout_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                               struct err *e)
{
    (void)e;
    struct nn_shape xs = gm_x(g, n)->s;
    gmodel_k_dropout(a->din0, gm_y(g, n)->grad, g->t, xs.n, xs.c, xs.h, xs.w,
                     n->info.cfg.dropout.p, n->info.cfg.dropout.channelwise,
                     gm_dropout_key(g, a->node, a->step), g->s);
    return 0;
}

/* add: own kernels */
static int gm_add_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                          struct err *e)
{
    (void)a, (void)e;
    struct gm_tensor *x = gm_x(g, n);
    gpu_add_forward(gm_y(g, n)->data, x->data, g->tensors[n->info.in[1]].data, x->numel,
                    n->info.cfg.add_relu, g->t, g->s);
    return 0;
}

static int gm_add_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                           struct err *e)
{
    (void)e;
    struct gm_tensor *y = gm_y(g, n);
    gpu_add_backward(a->din0, a->din1, y->grad, y->data, gm_x(g, n)->numel,
                     n->info.cfg.add_relu, g->t, g->s);
    return 0;
}

/* flatten: NHWC activations to the host's NCHW feature order, and back */
static int gm_flatten_forward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                              struct err *e)
{
    (void)a, (void)e;
    struct gm_tensor *x = gm_x(g, n), *y = gm_y(g, n);
    struct nn_shape xs = x->s;
    if (xs.ndims == 4)
        gmodel_k_nhwc_to_nchw(y->data, x->data, xs.n, xs.c, xs.h, xs.w, g->t, g->s);
    else
        cudaMemcpyAsync(y->data, x->data, x->numel * g->dsz, cudaMemcpyDeviceToDevice, g->s);
    return 0;
}

static int gm_flatten_backward(struct gmodel *g, struct gm_node *n, const struct gm_args *a,
                               struct err *e)
{
    (void)e;
    struct gm_tensor *x = gm_x(g, n), *y = gm_y(g, n);
    struct nn_shape xs = x->s;
    if (xs.ndims == 4)
        gmodel_k_nchw_to_nhwc(a->din0, y->grad, xs.n, xs.c, xs.h, xs.w, g->t, g->s);
    else
        cudaMemcpyAsync(a->din0, y->grad, x->numel * g->dsz, cudaMemcpyDeviceToDevice, g->s);
    return 0;
}

/* The GPU rows by op; the transformer's ops have none (the spec refuses them too). */
static const struct gm_layer_type gm_layer_types[NN_OP_COUNT] = {
    [NN_OP_CONV] = {gm_conv_init, gm_conv_forward, gm_conv_backward, gm_conv_destroy},
    [NN_OP_BN] = {gm_bn_init, gm_bn_forward, gm_bn_backward, gm_bn_destroy},
    [NN_OP_ACT] = {NULL, gm_act_forward, gm_act_backward, NULL},
    [NN_OP_MAXPOOL] = {gm_maxpool_init, gm_pool_forward, gm_pool_backward, gm_pool_destroy},
    [NN_OP_AVGPOOL] = {gm_avgpool_init, gm_pool_forward, gm_pool_backward, gm_pool_destroy},
    [NN_OP_ADAPTIVE_AVGPOOL] = {gm_adaptive_init, gm_pool_forward, gm_pool_backward,
                                gm_pool_destroy},
    [NN_OP_LINEAR] = {gm_linear_init, gm_linear_forward, gm_linear_backward, NULL},
    [NN_OP_DROPOUT] = {NULL, gm_dropout_forward, gm_dropout_backward, NULL},
    [NN_OP_ADD] = {NULL, gm_add_forward, gm_add_backward, NULL},
    [NN_OP_FLATTEN] = {NULL, gm_flatten_forward, gm_flatten_backward, NULL},
};

static const struct gm_layer_type *gm_type(const struct gm_node *n)
{
    return &gm_layer_types[n->info.op];
}

static int gm_node_init(struct gmodel *g, struct gm_node *n, struct err *e)
{
    const struct nn_node_info *i = &n->info;
    const struct gm_layer_type *t = gm_type(n);
    if (!t->forward || i->seq || i->tied_param >= 0) /* the spec refuses them too */
        return err_set(e, ERR_INVALID, "model",
                       "%s: the transformer layers and concat run on the CPU engine only",
                       i->name);
    if (!t->init)
        return 0;
    int rc = t->init(g, n, e);
    n->have_layer = 1; /* the _destroy functions accept a half-made state */
    if (rc < 0)
        return err_prefix(e, "%s", i->name);
    if (i->nparams > 0 && gm_cuda(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming),
                                  "layer event", e) < 0)
        return -1;
    return 0;
}

static void gm_node_destroy(struct gm_node *n)
{
    if (n->have_layer && gm_type(n)->destroy)
        gm_type(n)->destroy(n);
    if (n->ready)
        cudaEventDestroy(n->ready);
}

/* Lays out every tensor (data, and gradient when it needs one), the loss buffers and
 * the backward scratch in one allocation. */
static int gm_workspace(struct gmodel *g, struct err *e)
{
    size_t at = 0, max_grad = 0;
    int N = g->batch, K = g->classes;
    struct gm_tensor *in = &g->tensors[0];
    for (int i = 0; i < g->ntensors; i++) {
        struct gm_tensor *x = &g->tensors[i];
        size_t bytes = x->numel * g->dsz;
        x->data_off = gm_reserve(&at, bytes);
        if (x->needs_grad)
            x->grad_off = gm_reserve(&at, bytes);
        if (bytes > max_grad)
            max_grad = bytes;
    }
    size_t x32 = gm_reserve(&at, in->numel * sizeof(float));
    size_t probs = gm_reserve(&at, (size_t)N * K * sizeof(float));
    size_t row_loss = gm_reserve(&at, (size_t)N * sizeof(float));
    size_t row_ok = gm_reserve(&at, (size_t)N * sizeof(int));
    size_t labels = gm_reserve(&at, (size_t)N * sizeof(int32_t));
    size_t tally = gm_reserve(&at, sizeof(struct gm_tally));
    size_t xfer = gm_reserve(&at, GMODEL_SCRATCH_FLOATS * sizeof(float));
    size_t scr[2] = {gm_reserve(&at, max_grad), gm_reserve(&at, max_grad)};
    if (!(g->ws = gpu_alloc(at, e)))
        return err_prefix(e, "gpu workspace of %.1f MiB", (double)at / (1 << 20));
    g->ws_bytes = at;
    for (int i = 0; i < g->ntensors; i++) {
        struct gm_tensor *x = &g->tensors[i];
        x->data = g->ws + x->data_off;
        x->grad = x->needs_grad ? g->ws + x->grad_off : NULL;
    }
    g->x32 = (float *)(g->ws + x32);
    g->probs = (float *)(g->ws + probs);
    g->row_loss = (float *)(g->ws + row_loss);
    g->row_correct = (int *)(g->ws + row_ok);
    g->labels = (int32_t *)(g->ws + labels);
    g->tally = (struct gm_tally *)(g->ws + tally);
    g->flags = g->tally->flags;
    g->correct = &g->tally->correct;
    g->loss = &g->tally->loss;
    g->xfer = (float *)(g->ws + xfer);
    g->scratch[0] = g->ws + scr[0];
    g->scratch[1] = g->ws + scr[1];
    return 0;
}

/* The host arenas to the device (convolution weights permuted). */
static int gm_upload_params(struct gmodel *g, struct err *e)
{
    struct nn_model *m = g->m;
    float *tmp = malloc((m->nparams ? m->nparams : 1) * sizeof *tmp);
    if (!tmp)
        return err_set(e, ERR_NOMEM, NULL, "gpu: host copy of %zu parameters", m->nparams);
    gmodel_arena_to_device(m, tmp, m->params.data);
    int rc = gpu_upload(g->params, tmp, m->nparams * sizeof *tmp, e);
    free(tmp);
    if (rc == 0 && m->nbuffers)
        rc = gpu_upload(g->buffers, m->buffers.data, m->nbuffers * sizeof(float), e);
    return rc;
}

/* The cuDNN layers' shared state, then every layer (benchmark mode measures on the
 * buffers, so they and the parameters exist first), then the one workspace they asked
 * for. */
static int gm_layers_init(struct gmodel *g, const struct gmodel_opts *opts, struct err *e)
{
    struct gpu_dnn_opts o = {0};
    if (opts)
        o = (struct gpu_dnn_opts){.benchmark = opts->cudnn_benchmark,
                                  .tf32 = opts->tf32,
                                  .no_fused_bn = opts->no_fused_bn,
                                  .trace = opts->trace};
    gpu_dnn_init(&g->dl, g->dnn, &o);
    for (int i = 0; i < g->nnodes; i++)
        if (gm_node_init(g, &g->nodes[i], e) < 0)
            return -1;
    return gpu_dnn_fit(&g->dl, e);
}

static int gm_tally_init(struct gmodel *g, struct err *e)
{
    if (gm_cuda(cudaMallocHost((void **)&g->host_tally, sizeof *g->host_tally), "pinned tally",
                e) < 0) {
        g->host_tally = NULL;
        return -1;
    }
    memset(g->host_tally, 0, sizeof *g->host_tally);
    return gm_cuda(cudaEventCreateWithFlags(&g->tally_ready, cudaEventDisableTiming),
                   "tally event", e);
}

struct gmodel *gmodel_create(struct nn_model *m, int batch, const char *precision, void *stream,
                             const struct gmodel_opts *opts, struct err *e)
{
    int t = gpu_dtype_parse(precision ? precision : "");
    if (t < 0) {
        err_set(e, ERR_INVALID, "precision",
                "gpu: precision \"%s\" is not fp32, fp16 or "
                "bf16",
                precision ? precision : "");
        return NULL;
    }
    if (batch < 1) {
        err_set(e, ERR_INVALID, "batch_size", "gpu: batch size must be >= 1");
        return NULL;
    }
    if (gmodel_check(m, e) < 0)
        return NULL;
    if (!m->params.data) {
        err_set(e, ERR_INVALID, "model", "gpu: the model's parameters are not initialised");
        return NULL;
    }
    struct gmodel *g = calloc(1, sizeof *g);
    if (!g) {
        err_set(e, ERR_NOMEM, NULL, "gpu: out of memory");
        return NULL;
    }
    g->m = m;
    g->batch = batch;
    g->t = (enum gpu_dtype)t;
    g->dsz = gpu_dtype_size(g->t);
    g->s = (cudaStream_t)stream;
    g->classes = nn_model_classes(m);
    g->nnodes = nn_model_node_count(m);
    g->ntensors = m->ntensors;
    g->nodes = calloc((size_t)g->nnodes, sizeof *g->nodes);
    g->tensors = calloc((size_t)g->ntensors, sizeof *g->tensors);
    if (!g->nodes || !g->tensors) {
        err_set(e, ERR_NOMEM, NULL, "gpu: out of memory for %d layers", g->nnodes);
        goto fail;
    }
    for (int i = 0; i < g->ntensors; i++) {
        struct gm_tensor *x = &g->tensors[i];
        x->s = nn_model_tensor_shape(m, i);
        x->s.n = batch;
        x->numel = nn_shape_numel(x->s);
        x->needs_grad = nn_model_tensor_needs_grad(m, i);
        if (x->numel > INT32_MAX) { /* sizes before memory: cuDNN's per-tensor limit */
            err_set(e, ERR_TOO_LARGE, "batch_size",
                    "gpu: batch %d makes a %zu-element "
                    "tensor; cuDNN's legacy API takes at most 2^31 - 1 elements per tensor; "
                    "lower batch_size or the input shape",
                    batch, x->numel);
            goto fail;
        }
    }
    if (cudnnCreate(&g->dnn) != CUDNN_STATUS_SUCCESS) {
        g->dnn = NULL;
        err_set(e, ERR_IO, "device", "gpu: cudnnCreate failed (no GPU, or no cuDNN library)");
        goto fail;
    }
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        g->blas = NULL;
        err_set(e, ERR_IO, "device", "gpu: cublasCreate failed");
        goto fail;
    }
    /* fp32 matches the CPU to float rounding: no TF32 anywhere (gpu_layers.h) */
    if (g->t == GPU_F32)
        cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH);
    for (int i = 0; i < g->nnodes; i++)
        nn_model_node_info(m, i, &g->nodes[i].info);
    size_t np = m->nparams ? m->nparams : 1;
    if (!(g->params = gpu_alloc(np * sizeof(float), e)) ||
        !(g->grads = gpu_alloc(np * sizeof(float), e)) ||
        !(g->buffers = gpu_alloc((m->nbuffers ? m->nbuffers : 1) * sizeof(float), e)) ||
        (g->t != GPU_F32 && !(g->wh = gpu_alloc(np * g->dsz, e))) || gm_workspace(g, e) < 0 ||
        gm_upload_params(g, e) < 0)
        goto fail;
    gmodel_after_update(g);
    if (gpu_sync(g->s, "gpu model setup", e) < 0 || gm_layers_init(g, opts, e) < 0 ||
        gm_tally_init(g, e) < 0 || gm_cuda(cudaEventCreate(&g->o0), "timing event", e) < 0 ||
        gm_cuda(cudaEventCreate(&g->o1), "timing event", e) < 0)
        goto fail;
    /* benchmark mode wrote into activations and gradients: a clean start */
    if (gm_cuda(cudaMemsetAsync(g->grads, 0, np * sizeof(float), g->s), "gpu model setup", e) <
            0 ||
        gpu_sync(g->s, "gpu model setup", e) < 0)
        goto fail;
    return g;
fail:
    err_prefix(e, "gpu model");
    gmodel_destroy(g);
    return NULL;
}

void gmodel_destroy(struct gmodel *g)
{
    if (!g)
        return;
    if (g->ws) /* nothing of ours may still run on what is freed below */
        cudaStreamSynchronize(g->s);
    for (int i = 0; g->nodes && i < g->nnodes; i++)
        gm_node_destroy(&g->nodes[i]);
    gpu_dnn_destroy(&g->dl); /* after its layers */
    if (g->tally_ready)
        cudaEventDestroy(g->tally_ready);
    if (g->host_tally)
        cudaFreeHost(g->host_tally);
    for (int i = 0; i < g->cap_micro; i++) {
        cudaEventDestroy(g->micro[i].f0);
        cudaEventDestroy(g->micro[i].f1);
        cudaEventDestroy(g->micro[i].b1);
    }
    if (g->o0)
        cudaEventDestroy(g->o0);
    if (g->o1)
        cudaEventDestroy(g->o1);
    gpu_free(g->params);
    gpu_free(g->grads);
    gpu_free(g->buffers);
    gpu_free(g->wh);
    gpu_free(g->state);
    gpu_free(g->ws);
    if (g->dnn)
        cudnnDestroy(g->dnn);
    if (g->blas)
        cublasDestroy(g->blas);
    free(g->micro);
    free(g->nodes);
    free(g->tensors);
    free(g);
}

void gmodel_cudnn_info(const struct gmodel *g, struct gmodel_cudnn_info *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < g->nnodes; i++) {
        const struct gm_node *n = &g->nodes[i];
        if (n->info.op == NN_OP_BN && n->info.cfg.bn.relu) {
            out->bn_fused += n->L.bn.fused;
            out->bn_plain += !n->L.bn.fused;
        }
    }
    out->activation_bytes = g->ws_bytes;
    out->conv_ranked = g->dl.ranked;
    out->conv_cached = g->dl.cached;
    out->workspace_bytes = g->dl.plan.have;
}

float *gmodel_params(struct gmodel *g)
{
    return g->params;
}
float *gmodel_grads(struct gmodel *g)
{
    return g->grads;
}
float *gmodel_buffers(struct gmodel *g)
{
    return g->buffers;
}
const char *gmodel_dtype_name(const struct gmodel *g)
{
    return gpu_dtype_name(g->t);
}
bool gmodel_wants_loss_scale(const struct gmodel *g)
{
    return g->t == GPU_F16;
}

void gmodel_zero_grad(struct gmodel *g)
{
    cudaMemsetAsync(g->grads, 0, g->m->nparams * sizeof(float), g->s);
}

/* ---- timing ------------------------------------------------------------------------- */

void gmodel_mark_step_begin(struct gmodel *g)
{
    g->nmicro = 0;
    g->have_optim_marks = 0;
}

/* The next micro-batch's events (created on first use). */
static struct gm_micro *gm_micro_next(struct gmodel *g, struct err *e)
{
    if (g->nmicro == g->cap_micro) {
        int cap = g->cap_micro ? g->cap_micro * 2 : 4;
        struct gm_micro *mm = realloc(g->micro, (size_t)cap * sizeof *mm);
        if (!mm) {
            err_set(e, ERR_NOMEM, NULL, "gpu: timing events");
            return NULL;
        }
        g->micro = mm;
        for (int i = g->cap_micro; i < cap; i++) {
            memset(&mm[i], 0, sizeof mm[i]);
            if (gm_cuda(cudaEventCreate(&mm[i].f0), "timing event", e) < 0 ||
                gm_cuda(cudaEventCreate(&mm[i].f1), "timing event", e) < 0 ||
                gm_cuda(cudaEventCreate(&mm[i].b1), "timing event", e) < 0)
                return NULL; /* the ones made are destroyed with the model */
            g->cap_micro = i + 1;
        }
    }
    struct gm_micro *mc = &g->micro[g->nmicro++];
    mc->have_b1 = 0;
    return mc;
}

void gmodel_mark_optim(struct gmodel *g, int end)
{
    cudaEventRecord(end ? g->o1 : g->o0, g->s);
    if (end)
        g->have_optim_marks = 1;
}

static double gm_elapsed(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? (double)ms : 0.0;
}

int gmodel_phase_ms(struct gmodel *g, double *forward, double *backward, double *optim,
                    struct err *e)
{
    *forward = *backward = *optim = 0;
    if (g->nmicro == 0 && !g->have_optim_marks)
        return 0;
    /* the step's last mark is its end: waiting for it is waiting for the step */
    cudaEvent_t last = g->have_optim_marks               ? g->o1
                       : g->micro[g->nmicro - 1].have_b1 ? g->micro[g->nmicro - 1].b1
                                                         : g->micro[g->nmicro - 1].f1;
    if (gm_cuda(cudaEventSynchronize(last), "step timing", e) < 0)
        return -1;
    for (int i = 0; i < g->nmicro; i++) {
        *forward += gm_elapsed(g->micro[i].f0, g->micro[i].f1);
        if (g->micro[i].have_b1)
            *backward += gm_elapsed(g->micro[i].f1, g->micro[i].b1);
    }
    if (g->have_optim_marks)
        *optim = gm_elapsed(g->o0, g->o1);
    return 0;
}

int64_t gmodel_mem_used(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return -1;
    return (int64_t)(total - free_b);
}

/* ---- forward ------------------------------------------------------------------------ */

int gmodel_forward(struct gmodel *g, const float *x, const int32_t *y, int n_valid, int train,
                   uint64_t step, bool reuse, float loss_scale, struct err *e)
{
    if (!x || !y || n_valid < 0 || n_valid > g->batch)
        return err_set(e, ERR_INVALID, NULL, "gpu forward: no batch, or %d valid rows of %d",
                       n_valid, g->batch);
    struct gm_tensor *in = &g->tensors[0];
    if (!(reuse && x == g->last_x && y == g->last_y)) {
        if (gm_cuda(cudaMemcpyAsync(g->x32, x, in->numel * sizeof(float),
                                    cudaMemcpyHostToDevice, g->s),
                    "input upload", e) < 0 ||
            gm_cuda(cudaMemcpyAsync(g->labels, y, (size_t)g->batch * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, g->s),
                    "label upload", e) < 0)
            return -1;
        gmodel_k_input(in->data, g->t, g->x32, in->s.n, in->s.c, in->s.h, in->s.w, g->s);
        g->last_x = reuse ? x : NULL;
        g->last_y = reuse ? y : NULL;
    }
    struct gm_micro *mc = gm_micro_next(g, e);
    if (!mc)
        return -1;
    cudaEventRecord(mc->f0, g->s);
    for (int i = 0; i < g->nnodes; i++) {
        struct gm_args a = {.node = i, .train = train, .step = step};
        if (gm_type(&g->nodes[i])->forward(g, &g->nodes[i], &a, e) < 0)
            return err_prefix(e, "gpu forward: %s", g->nodes[i].info.name);
    }
    struct gm_tensor *out = &g->tensors[g->nodes[g->nnodes - 1].info.out];
    int N = g->batch, K = g->classes;
    cudaMemsetAsync(g->flags, 0, 2 * sizeof(int), g->s);
    gpu_xent_forward(g->probs, g->row_loss, g->row_correct, &g->flags[0], out->data, g->t,
                     g->labels, N, K, n_valid, g->s);
    gpu_xent_reduce(g->loss, g->correct, g->row_loss, g->row_correct, N, n_valid, g->s);
    cudaMemcpyAsync(g->host_tally, g->tally, sizeof *g->tally, cudaMemcpyDeviceToHost, g->s);
    cudaEventRecord(g->tally_ready, g->s);
    if (train && out->grad)
        gpu_xent_backward(out->grad, g->t, g->probs, g->labels, N, K, n_valid, loss_scale,
                          g->s);
    cudaEventRecord(mc->f1, g->s);
    g->step = step;
    g->last_train = train;
    g->have_loss = 1;
    return gpu_check(cudaGetLastError(), "gpu forward", e);
}

/* ---- backward ----------------------------------------------------------------------- */

/* Node i's backward through its row, unless it has nothing to produce. */
static int gm_node_backward(struct gmodel *g, struct gm_node *n, int node, void *din0,
                            void *din1, struct err *e)
{
    if (!din0 && !din1 && n->info.nparams == 0)
        return 0;
    struct gm_args a = {.node = node, .train = 1, .step = g->step, .din0 = din0, .din1 = din1};
    return gm_type(n)->backward(g, n, &a, e);
}

int gmodel_backward(struct gmodel *g, nn_grad_hook_fn hook, void *ctx, struct err *e)
{
    if (!g->have_loss || !g->last_train || g->nmicro == 0)
        return err_set(e, ERR_INVALID, NULL, "gpu backward needs a training forward first");
    g->have_loss = 0;
    for (int t = 0; t < g->ntensors; t++)
        g->tensors[t].grad_written = 0;
    g->tensors[g->nodes[g->nnodes - 1].info.out].grad_written = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        struct gm_node *n = &g->nodes[i];
        struct gm_tensor *y = &g->tensors[n->info.out];
        if (!y->needs_grad)
            continue;
        if (!y->grad_written) { /* a branch that does not reach the loss */
            cudaMemsetAsync(y->grad, 0, y->numel * g->dsz, g->s);
            y->grad_written = 1;
        }
        void *din[2] = {NULL, NULL};
        int via_scratch[2] = {0, 0};
        for (int j = 0; j < n->info.nin; j++) {
            struct gm_tensor *x = &g->tensors[n->info.in[j]];
            if (!x->needs_grad)
                continue;
            via_scratch[j] = x->grad_written || (j == 1 && n->info.in[0] == n->info.in[1]);
            din[j] = via_scratch[j] ? g->scratch[j] : x->grad;
        }
        if (gm_node_backward(g, n, i, din[0], din[1], e) < 0)
            return err_prefix(e, "gpu backward: %s", n->info.name);
        for (int j = 0; j < n->info.nin; j++) {
            struct gm_tensor *x = &g->tensors[n->info.in[j]];
            if (via_scratch[j]) /* x->grad += scratch, elementwise in place */
                gpu_add_forward(x->grad, x->grad, g->scratch[j], x->numel, 0, g->t, g->s);
            if (din[j])
                x->grad_written = 1;
        }
        if (n->info.nparams > 0) {
            cudaEventRecord(n->ready, g->s);
            if (hook) {
                struct nn_grad_ready r = {.node = i,
                                          .name = n->info.name,
                                          .offset = n->info.param_off,
                                          .len = n->info.param_len,
                                          .first_param = n->info.first_param,
                                          .nparams = n->info.nparams,
                                          .ready_event = (void *)n->ready};
                hook(ctx, &r);
            }
        }
    }
    struct gm_micro *mc = &g->micro[g->nmicro - 1];
    cudaEventRecord(mc->b1, g->s);
    mc->have_b1 = 1;
    return gpu_check(cudaGetLastError(), "gpu backward", e);
}

/* Waits for event ev (after which the tally copy queued last is in host memory), not for
 * the stream. */
static int gm_tally_wait(struct gmodel *g, cudaEvent_t ev, const char *what, struct err *e)
{
    if (gm_cuda(cudaEventSynchronize(ev), what, e) < 0)
        return -1;
    return gpu_check(cudaGetLastError(), what, e);
}

/* After a training backward: its end, which the host needs besides the loss, since the
 * trainer's clock tells compute from the communication it waits for next (ddp.h
 * "Timing"): returning at the forward's end would count the rest of backward as exposed
 * communication. After an evaluation forward: the tally copy. */
int gmodel_wait_loss(struct gmodel *g, double *loss, int *correct, struct err *e)
{
    const struct gm_micro *mc = g->nmicro > 0 ? &g->micro[g->nmicro - 1] : NULL;
    if (gm_tally_wait(g, mc && mc->have_b1 ? mc->b1 : g->tally_ready, "gpu step", e) < 0)
        return -1;
    *loss = g->host_tally->loss;
    *correct = g->host_tally->correct;
    if (g->host_tally->flags[0])
        return err_set(e, ERR_INVALID, "dataset", "a label is outside the model's %d classes",
                       g->classes);
    return 0;
}

int gmodel_unscale(struct gmodel *g, float factor, bool *finite, struct err *e)
{
    size_t n = g->m->nparams;
    cudaMemsetAsync(&g->flags[1], 0, sizeof(int), g->s);
    gpu_find_nonfinite(&g->flags[1], g->grads, n, g->s); /* inf stays inf once unscaled */
    gpu_scale(g->grads, n, factor, g->s);
    cudaMemcpyAsync(&g->host_tally->flags[1], &g->flags[1], sizeof(int), cudaMemcpyDeviceToHost,
                    g->s);
    cudaEventRecord(g->tally_ready, g->s);
    if (gm_tally_wait(g, g->tally_ready, "gradient unscale", e) < 0)
        return -1;
    *finite = g->host_tally->flags[1] == 0;
    return 0;
}

/* ---- optimizer ---------------------------------------------------------------------- */

int gmodel_optim_init(struct gmodel *g, const struct nn_optim_cfg *cfg, struct err *e)
{
    size_t per = cfg->type == NN_OPTIM_SGD ? (cfg->momentum > 0 ? 1 : 0) : 2;
    gpu_free(g->state);
    g->state = NULL;
    g->state_stride = g->m->nparams;
    if (per && !(g->state = gpu_alloc(per * g->m->nparams * sizeof(float), e)))
        return err_prefix(e, "gpu optimizer state");
    return 0;
}

void gmodel_optim_update(struct gmodel *g, const struct nn_optim *o, double lr, size_t off,
                         size_t state_off, size_t len)
{
    struct gpu_optim_scalars sc;
    gpu_optim_scalars_for(o, lr, &sc);
    gpu_optim_update(g->params + off, g->grads + off, g->state ? g->state + state_off : NULL,
                     g->state_stride, len, &sc, g->s);
}

void gmodel_scale(struct gmodel *g, float *x, size_t n, float factor)
{
    gpu_scale(x, n, factor, g->s);
}

void gmodel_after_update(struct gmodel *g)
{
    if (g->t != GPU_F32)
        gpu_cast(g->wh, g->t, g->params, GPU_F32, g->m->nparams, g->s);
}

/* ---- host transfers ------------------------------------------------------------------ */

int gmodel_download(struct gmodel *g, float *params, float *buffers, struct err *e)
{
    struct nn_model *m = g->m;
    if (gm_cuda(cudaStreamSynchronize(g->s), "download", e) < 0)
        return -1;
    if (params) {
        float *tmp = malloc((m->nparams ? m->nparams : 1) * sizeof *tmp);
        if (!tmp)
            return err_set(e, ERR_NOMEM, NULL, "gpu: host copy of the parameters");
        int rc = gpu_download(tmp, g->params, m->nparams * sizeof *tmp, e);
        if (rc == 0)
            gmodel_arena_to_host(m, params, tmp);
        free(tmp);
        if (rc < 0)
            return -1;
    }
    if (buffers && m->nbuffers &&
        gpu_download(buffers, g->buffers, m->nbuffers * sizeof(float), e) < 0)
        return -1;
    return 0;
}

static int gm_scratch_count(int n, struct err *e)
{
    if (n < 0 || n > GMODEL_SCRATCH_FLOATS)
        return err_set(e, ERR_INVALID, NULL, "gpu: at most %d values through the scratch",
                       GMODEL_SCRATCH_FLOATS);
    return 0;
}

float *gmodel_scratch_put(struct gmodel *g, const float *v, int n, struct err *e)
{
    if (gm_scratch_count(n, e) < 0 ||
        gm_cuda(cudaStreamSynchronize(g->s), "scratch upload", e) < 0 ||
        gpu_upload(g->xfer, v, (size_t)n * sizeof *v, e) < 0)
        return NULL;
    return g->xfer;
}

int gmodel_scratch_get(struct gmodel *g, float *v, int n, struct err *e)
{
    if (gm_scratch_count(n, e) < 0)
        return -1;
    return gpu_download(v, g->xfer, (size_t)n * sizeof *v, e);
}
