/* optim: SGD, Adam, AdamW and learning-rate schedules (see optim.h). Key decision: each
 * update is written in the same operation order as PyTorch's single-tensor implementation
 * (for example Adam's first moment as lerp and its denominator as sqrt(v)/sqrt(bc2) + eps)
 * so a step agrees with PyTorch's to float rounding; the scalar factors are computed in
 * double, as PyTorch computes them in Python floats. */
#include "worker/nn/optim.h"

#include <math.h>
#include <string.h>

#include "worker/nn/vec.h"

struct nn_optim_cfg nn_optim_defaults(enum nn_optim_type type)
{
    struct nn_optim_cfg c = {
        .type = type, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    if (type != NN_OPTIM_SGD)
        c.lr = 1e-3;
    if (type == NN_OPTIM_ADAMW)
        c.weight_decay = 1e-2;
    return c;
}

int nn_optim_parse_type(const char *name)
{
    if (!strcmp(name, "sgd"))
        return NN_OPTIM_SGD;
    if (!strcmp(name, "adam"))
        return NN_OPTIM_ADAM;
    if (!strcmp(name, "adamw"))
        return NN_OPTIM_ADAMW;
    return -1;
}

static int optim_validate(const struct nn_optim_cfg *c, struct err *e)
{
    if (!(c->lr >= 0))
        return err_set(e, ERR_INVALID, "lr", "learning rate must be >= 0");
    if (!(c->weight_decay >= 0))
        return err_set(e, ERR_INVALID, "weight_decay", "weight_decay must be >= 0");
    if (c->type == NN_OPTIM_SGD) {
        if (!(c->momentum >= 0))
            return err_set(e, ERR_INVALID, "momentum", "momentum must be >= 0");
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return err_set(e, ERR_INVALID, "nesterov",
                           "nesterov needs momentum > 0 and dampening 0");
    } else {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return err_set(e, ERR_INVALID, "betas", "beta1 must be in [0, 1)");
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return err_set(e, ERR_INVALID, "betas", "beta2 must be in [0, 1)");
        if (!(c->eps >= 0))
            return err_set(e, ERR_INVALID, "eps", "eps must be >= 0");
    }
    return 0;
}

size_t nn_optim_planes(const struct nn_optim_cfg *cfg)
{
    return cfg->type == NN_OPTIM_SGD ? (cfg->momentum > 0 ? 1 : 0) : 2;
}

int nn_optim_init(struct nn_optim *o, const struct nn_optim_cfg *cfg, size_t nparams,
                  struct err *e)
{
    memset(o, 0, sizeof *o);
    if (optim_validate(cfg, e))
        return -1;
    o->cfg = *cfg;
    o->nparams = nparams;
    size_t per = nn_optim_planes(cfg);
    if (per && nparams > SIZE_MAX / per / sizeof(float))
        return err_set(e, ERR_TOO_LARGE, "", "optimizer state for %zu parameters", nparams);
    return per ? nn_arena_alloc(&o->state, per * nparams, e) : 0;
}

void nn_optim_cleanup(struct nn_optim *o)
{
    nn_arena_free(&o->state);
    memset(o, 0, sizeof *o);
}

void nn_optim_begin_step(struct nn_optim *o)
{
    o->step++;
}

/* p, g: the slice's first element; off: the slice's place in the state arena. */
static void optim_sgd(struct nn_optim *o, float *p, const float *g, size_t off, size_t len,
                      double lr_d)
{
    const struct nn_optim_cfg *c = &o->cfg;
    float wd = (float)c->weight_decay, mom = (float)c->momentum;
    float damp = (float)(1.0 - c->dampening), lr = (float)lr_d;
    int nesterov = c->nesterov;
    float *buf = o->state.data ? o->state.data + off : NULL;
    int first = o->step <= 1;
    /* The loop-invariant choices are made outside the loops and the rest are selects, so
     * GCC vectorises them (a branch in the body stops it: "control flow in loop");
     * d + 0 * p is d for every finite parameter. */
    if (mom == 0) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < len; i++)
            p[i] = p[i] - lr * (g[i] + wd * p[i]);
        return;
    }
    /* PyTorch clones d_p on the first step (first: buf = d); AVX2 where the ISA allows */
    struct nn_vec_sgd s = {
        .wd = wd, .mom = mom, .damp = damp, .lr = lr, .first = first, .nesterov = nesterov};
    nn_vec_sgd_momentum(&s, p, g, buf, len);
}

static void optim_adam(struct nn_optim *o, float *p, const float *g, size_t off, size_t len,
                       double lr)
{
    const struct nn_optim_cfg *c = &o->cfg;
    float *m = o->state.data + off, *v = o->state.data + o->nparams + off;
    float w1 = (float)(1.0 - c->beta1), b2 = (float)c->beta2, w2 = (float)(1.0 - c->beta2);
    float eps = (float)c->eps;
    double bc1 = 1.0 - pow(c->beta1, (double)o->step);
    double bc2 = 1.0 - pow(c->beta2, (double)o->step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    int decoupled = c->type == NN_OPTIM_ADAMW;
    float wd = (float)c->weight_decay, shrink = (float)(1.0 - lr * c->weight_decay);
    /* decoupled (AdamW) shrinks the parameter, Adam adds wd * p to the gradient: both as
     * arithmetic with neutral factors, so the loop has no branch and vectorises */
    float scale = decoupled ? shrink : 1.0f, wdg = decoupled ? 0.0f : wd;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < len; i++) {
        float pi = p[i] * scale, gi = g[i] + wdg * p[i];
        m[i] = m[i] + w1 * (gi - m[i]); /* lerp */
        v[i] = v[i] * b2 + w2 * gi * gi;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = pi - step_size * (m[i] / denom);
    }
}

void nn_optim_update(struct nn_optim *o, float *params, const float *grads, size_t offset,
                     size_t len, double lr)
{
    nn_optim_update_slice(o, params + offset, grads + offset, offset, len, lr);
}

void nn_optim_update_slice(struct nn_optim *o, float *p, const float *g, size_t state_offset,
                           size_t len, double lr)
{
    if (state_offset > o->nparams || len > o->nparams - state_offset)
        return;
    if (o->cfg.type == NN_OPTIM_SGD)
        optim_sgd(o, p, g, state_offset, len, lr);
    else
        optim_adam(o, p, g, state_offset, len, lr);
}

void nn_optim_step(struct nn_optim *o, float *params, const float *grads, double lr)
{
    nn_optim_begin_step(o);
    nn_optim_update(o, params, grads, 0, o->nparams, lr);
}

/* ---- learning-rate schedules -------------------------------------------------------- */

int nn_lr_validate(const struct nn_lr_schedule *s, struct err *e)
{
    if (!(s->base_lr >= 0))
        return err_set(e, ERR_INVALID, "lr", "learning rate must be >= 0");
    if (s->warmup_steps < 0)
        return err_set(e, ERR_INVALID, "warmup", "warm-up steps must be >= 0");
    if (s->warmup_steps > 0 && !(s->warmup_start_factor > 0 && s->warmup_start_factor <= 1))
        return err_set(e, ERR_INVALID, "warmup", "warm-up start factor must be in (0, 1]");
    if (s->decay == NN_LR_STEP && s->step_size < 1)
        return err_set(e, ERR_INVALID, "step_size", "step_size must be >= 1");
    if (s->decay == NN_LR_COSINE && s->t_max < 1)
        return err_set(e, ERR_INVALID, "t_max", "t_max must be >= 1");
    return 0;
}

double nn_lr_at(const struct nn_lr_schedule *s, long t)
{
    double base = s->base_lr;
    if (t < s->warmup_steps) {
        double f0 = s->warmup_start_factor;
        return base * (f0 + (1.0 - f0) * (double)t / s->warmup_steps);
    }
    long e = t - s->warmup_steps;
    switch (s->decay) {
    case NN_LR_STEP: return base * pow(s->gamma, (double)(e / s->step_size));
    case NN_LR_COSINE:
        return s->eta_min +
               (base - s->eta_min) * (1.0 + cos(M_PI * (double)e / s->t_max)) / 2.0;
    case NN_LR_CONSTANT: break;
    }
    return base;
}
