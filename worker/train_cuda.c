/* train_cuda: the CUDA training engine (train_engine.h): the host nn_model run by the GPU
 * runner (worker/nn/cuda/gmodel.h) in the spec's precision. Built only with CUDA and
 * cuDNN (worker/meson.build).
 *
 * Decisions:
 * - The strategy is switched to the runner's device arenas (ddp_set_device) at attach,
 *   so ddp/ launches its exchanges on device memory; the communicator must move device
 *   buffers (NCCL). The runner computes on CUDA's legacy default stream (NULL), the one
 *   the NCCL communicator of comm_create_from_spec fences its operations against.
 * - Forward, backward and the update are queued; end_step waits for the step and reports
 *   the device's phase times (CUDA events on the compute stream), so backward is its
 *   compute alone and comm_exposed the time the step waited for communication alone.
 * - fp16 scales the loss (loss_scale.h; dynamic, or static with the spec's loss_scale):
 *   begin_update unscales the gradients and skips the update of a step whose gradients
 *   are not finite; the step line carries the scale and the skip (train_cuda_scale_of).
 * - The spec's cudnn_benchmark selects measured convolution algorithms (gmodel_opts).
 * - allreduce_host stages host values through the runner's scratch: nn/ knows no
 *   communicator, the training side that owns one does the exchange.
 * - Where a step waits for the device (accumulate 1), each because the host needs what
 *   it waits for: wait_loss (the loss, to report it and to stop a diverged run), the
 *   strategy's finish (each bucket's NCCL completion, observed by the communication
 *   thread: the update is queued after the exchange by the host, and a failed exchange
 *   must fail the step), fp16's begin_update (whether the step's gradients are finite,
 *   to skip its update) and end_step (the phase events). That is 3 waits a step in
 *   fp32 and bf16, 4 in fp16; the exchange itself is never fenced by a host wait (each
 *   bucket waits on its layer's event on the device), and the NCCL communicator of a
 *   training run records no timing events and holds no stream (comm_nccl.h time_ops). */
#include <stdlib.h>

#include "common/log.h"
#include "worker/nn/cuda/gmodel.h"
#include "worker/nn/loss_scale.h"
#include "worker/train_engine.h"

struct train_cuda {
    struct train_engine base;
    struct gmodel *gm;    /* owned */
    struct loss_scale ls; /* fp16: dynamic or static (spec loss_scale); else a fixed 1 */
    int64_t peak;         /* the most device memory in use after a step; -1 before one */
};

static struct train_cuda *train_cuda_of(struct train_engine *en)
{
    return (struct train_cuda *)en;
}

static struct train_engine *train_cuda_create(struct nn_model *m,
                                              const struct train_engine_cfg *cfg, struct err *e)
{
    struct train_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_NOMEM, NULL, "cuda engine: out of memory");
        return NULL;
    }
    c->base.ops = &train_engine_cuda;
    c->peak = -1;
    struct gmodel_opts o = {.cudnn_benchmark = cfg->cudnn_benchmark};
    /* NULL: the legacy default stream */
    c->gm = gmodel_create(m, cfg->batch, cfg->precision, NULL, &o, e);
    if (!c->gm) {
        free(c);
        return NULL;
    }
    loss_scale_configure(&c->ls, gmodel_wants_loss_scale(c->gm), cfg->loss_scale,
                         cfg->loss_scale_window);
    /* what cuDNN chose, in the rank's log: a slow device run is read against it */
    struct gmodel_cudnn_info info;
    gmodel_cudnn_info(c->gm, &info);
    log_info("cuda %s: conv directions %d %s, %d from cache; bn+relu %d fused, %d plain; "
             "cuDNN workspace %.1f MiB, activations %.1f MiB",
             gmodel_dtype_name(c->gm), info.conv_ranked,
             cfg->cudnn_benchmark ? "measured" : "by heuristics", info.conv_cached,
             info.bn_fused, info.bn_plain, (double)info.workspace_bytes / (1 << 20),
             (double)info.activation_bytes / (1 << 20));
    return &c->base;
}

static void train_cuda_scale(void *ctx, float *x, size_t n, float factor)
{
    gmodel_scale(ctx, x, n, factor);
}

static void train_cuda_update(void *ctx, struct nn_optim *o, size_t off, size_t state_off,
                              size_t len, double lr)
{
    gmodel_optim_update(ctx, o, lr, off, state_off, len);
}

static int train_cuda_attach(struct train_engine *en, struct ddp *ddp,
                             const struct nn_optim_cfg *oc, struct err *e)
{
    struct gmodel *gm = train_cuda_of(en)->gm;
    struct ddp_device dev = {.params = gmodel_params(gm),
                             .grads = gmodel_grads(gm),
                             .buffers = gmodel_buffers(gm),
                             .ctx = gm,
                             .scale = train_cuda_scale,
                             .update = train_cuda_update};
    if (ddp_set_device(ddp, &dev, e) < 0)
        return -1;
    return gmodel_optim_init(gm, oc, e);
}

static void train_cuda_params_changed(struct train_engine *en)
{
    gmodel_after_update(train_cuda_of(en)->gm);
}

static void train_cuda_begin_step(struct train_engine *en)
{
    struct gmodel *gm = train_cuda_of(en)->gm;
    gmodel_mark_step_begin(gm);
    gmodel_zero_grad(gm);
}

/* An evaluation batch is a record of its own (its events are not a training step's). */
static int train_cuda_forward(struct train_engine *en, const float *x, const int32_t *y, int n,
                              int train, uint64_t step, bool reuse, struct err *e)
{
    struct train_cuda *c = train_cuda_of(en);
    if (!train)
        gmodel_mark_step_begin(c->gm);
    return gmodel_forward(c->gm, x, y, n, train, step, reuse, train ? c->ls.scale : 1.0f, e);
}

static int train_cuda_backward(struct train_engine *en, nn_grad_hook_fn hook, void *ctx,
                               struct err *e)
{
    return gmodel_backward(train_cuda_of(en)->gm, hook, ctx, e);
}

static int train_cuda_wait_loss(struct train_engine *en, double *loss, int *right,
                                struct err *e)
{
    return gmodel_wait_loss(train_cuda_of(en)->gm, loss, right, e);
}

static int train_cuda_begin_update(struct train_engine *en, bool *apply, struct err *e)
{
    struct train_cuda *c = train_cuda_of(en);
    bool finite = true;
    if (c->ls.scaled && gmodel_unscale(c->gm, loss_scale_inverse(&c->ls), &finite, e) < 0)
        return err_prefix(e, "unscaling the gradients");
    *apply = loss_scale_update(&c->ls, !finite); /* fp16 skips a non-finite step */
    gmodel_mark_optim(c->gm, 0);
    return 0;
}

/* The scale this step's backward ran with (fp16), read before begin_update changes it;
 * -1 for the unscaled precisions. */
static double train_cuda_scale_of(const struct train_engine *en)
{
    const struct train_cuda *c = (const struct train_cuda *)en;
    return c->ls.scaled ? (double)c->ls.scale : -1;
}

static void train_cuda_end_update(struct train_engine *en, bool applied)
{
    struct gmodel *gm = train_cuda_of(en)->gm;
    if (applied)
        gmodel_after_update(gm);
    gmodel_mark_optim(gm, 1);
}

/* naive and ddp have no communication in the update, so the optimizer's device time is
 * the phase as it stands. */
static int train_cuda_end_step(struct train_engine *en, struct train_phases *ph, struct err *e)
{
    struct train_cuda *c = train_cuda_of(en);
    if (gmodel_phase_ms(c->gm, &ph->forward_ms, &ph->backward_ms, &ph->optimizer_ms, e) < 0)
        return -1;
    int64_t used = gmodel_mem_used();
    if (used > c->peak)
        c->peak = used;
    return 0;
}

static int train_cuda_allreduce_host(struct train_engine *en, struct comm *c, float *v, int n,
                                     struct err *e)
{
    struct gmodel *gm = train_cuda_of(en)->gm;
    float *d = gmodel_scratch_put(gm, v, n, e); /* NCCL moves device buffers only */
    if (!d || comm_allreduce(c, d, d, (size_t)n, COMM_FLOAT32, COMM_SUM, e) < 0)
        return -1;
    return gmodel_scratch_get(gm, v, n, e);
}

static int64_t train_cuda_peak_bytes(const struct train_engine *en)
{
    return ((const struct train_cuda *)en)->peak;
}

static int64_t train_cuda_activation_bytes(const struct train_engine *en)
{
    struct gmodel_cudnn_info info;
    gmodel_cudnn_info(((const struct train_cuda *)en)->gm, &info);
    return (int64_t)info.activation_bytes;
}

static void train_cuda_destroy(struct train_engine *en)
{
    struct train_cuda *c = train_cuda_of(en);
    gmodel_destroy(c->gm);
    free(c);
}

const struct train_engine_ops train_engine_cuda = {
    .device = "cuda",
    .create = train_cuda_create,
    .attach = train_cuda_attach,
    .params_changed = train_cuda_params_changed,
    .begin_step = train_cuda_begin_step,
    .forward = train_cuda_forward,
    .backward = train_cuda_backward,
    .wait_loss = train_cuda_wait_loss,
    .begin_update = train_cuda_begin_update,
    .end_update = train_cuda_end_update,
    .loss_scale = train_cuda_scale_of,
    .end_step = train_cuda_end_step,
    .allreduce_host = train_cuda_allreduce_host,
    .peak_bytes = train_cuda_peak_bytes,
    .activation_bytes = train_cuda_activation_bytes,
    .destroy = train_cuda_destroy,
};
