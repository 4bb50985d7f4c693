/* train_cpu: the CPU training engine (train_engine.h): the host nn_model itself, prepared
 * with oneDNN (NN_BACKEND_FAST), stepped in place; precision bf16 runs its convolutions
 * and inner products on bf16 operands (onednn.h enum nn_bf16: oneDNN's bf16 kernels, or
 * rounded fp32 where this CPU has none), fp32 everywhere else.
 *
 * Decision: everything is synchronous, so the loop's host clock is the measurement
 * (end_step keeps it) and the loss is known when forward returns; the model's own arenas
 * are the strategy's, so attach has nothing to point elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/train_engine.h"

struct train_cpu {
    struct train_engine base;
    struct nn_model *m; /* borrowed */
    double loss;        /* of the last forward */
    int right;
};

static struct train_cpu *train_cpu_of(struct train_engine *en)
{
    return (struct train_cpu *)en;
}

static struct train_engine *train_cpu_create(struct nn_model *m,
                                             const struct train_engine_cfg *cfg, struct err *e)
{
    struct train_cpu *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(e, ERR_NOMEM, NULL, "cpu engine: out of memory");
        return NULL;
    }
    c->base.ops = &train_engine_cpu;
    c->m = m;
    bool bf16 = cfg->precision && strcmp(cfg->precision, "bf16") == 0;
    nn_model_set_bf16(m, bf16 ? NN_BF16_AUTO : NN_BF16_OFF);
    if (nn_model_prepare(m, cfg->batch, NN_BACKEND_FAST, 1, e) < 0) {
        free(c);
        return NULL;
    }
    if (bf16) /* which one ran is the run's env too (train_outcome.bf16_path) */
        log_info("bf16 on the CPU: %s", nn_bf16_path_name(nn_model_bf16_path(m)));
    return &c->base;
}

static int train_cpu_attach(struct train_engine *en, struct ddp *ddp,
                            const struct nn_optim_cfg *oc, struct err *e)
{
    return 0; /* the strategy works on m's arenas, the optimizer state is its own */
}

static void train_cpu_params_changed(struct train_engine *en) {}

static void train_cpu_begin_step(struct train_engine *en)
{
    nn_model_zero_grad(train_cpu_of(en)->m);
}

static int train_cpu_forward(struct train_engine *en, const float *x, const int32_t *y, int n,
                             int train, uint64_t step, bool reuse, struct err *e)
{
    struct train_cpu *c = train_cpu_of(en);
    c->loss = 0;
    c->right = 0;
    if (nn_model_forward(c->m, x, train, step, e) < 0 ||
        nn_model_loss(c->m, y, n, &c->loss, &c->right, e) < 0)
        return -1;
    return 0;
}

static int train_cpu_backward(struct train_engine *en, nn_grad_hook_fn hook, void *ctx,
                              struct err *e)
{
    return nn_model_backward(train_cpu_of(en)->m, hook, ctx, e);
}

static int train_cpu_wait_loss(struct train_engine *en, double *loss, int *right, struct err *e)
{
    *loss = train_cpu_of(en)->loss;
    *right = train_cpu_of(en)->right;
    return 0;
}

static const float *train_cpu_logits(const struct train_engine *en)
{
    return nn_model_output(((const struct train_cpu *)en)->m);
}

static int train_cpu_begin_update(struct train_engine *en, bool *apply, struct err *e)
{
    *apply = true; /* fp32 and bf16: no loss scaling */
    return 0;
}

static void train_cpu_end_update(struct train_engine *en, bool applied) {}

static int train_cpu_end_step(struct train_engine *en, struct train_phases *ph, struct err *e)
{
    return 0; /* the host clock measured it all */
}

static int train_cpu_allreduce_host(struct train_engine *en, struct comm *c, float *v, int n,
                                    struct err *e)
{
    return comm_allreduce(c, v, v, (size_t)n, COMM_FLOAT32, COMM_SUM, e);
}

static int64_t train_cpu_activation_bytes(const struct train_engine *en)
{
    return (int64_t)((const struct train_cpu *)en)->m->ws.size;
}

static int64_t train_cpu_peak_bytes(const struct train_engine *en)
{
    return -1;
}

static void train_cpu_destroy(struct train_engine *en)
{
    free(train_cpu_of(en));
}

const struct train_engine_ops train_engine_cpu = {
    .device = "cpu",
    .create = train_cpu_create,
    .attach = train_cpu_attach,
    .params_changed = train_cpu_params_changed,
    .begin_step = train_cpu_begin_step,
    .forward = train_cpu_forward,
    .backward = train_cpu_backward,
    .wait_loss = train_cpu_wait_loss,
    .logits = train_cpu_logits,
    .begin_update = train_cpu_begin_update,
    .end_update = train_cpu_end_update,
    .end_step = train_cpu_end_step,
    .allreduce_host = train_cpu_allreduce_host,
    .peak_bytes = train_cpu_peak_bytes,
    .activation_bytes = train_cpu_activation_bytes,
    .destroy = train_cpu_destroy,
};
