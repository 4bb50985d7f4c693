/* optim: optimizers over the parameter / gradient arenas and learning-rate schedules, with
 * PyTorch 1.13's semantics exactly (torch.optim.SGD, Adam, AdamW single-tensor code paths;
 * torch.optim.lr_scheduler LinearLR, StepLR, CosineAnnealingLR closed forms).
 *
 * Decisions: the optimizer state is ONE arena (SGD: the momentum buffer; Adam/AdamW: the
 * first moments then the second moments), parallel to the parameter arena, so an update can
 * run on any slice [offset, offset+len) — a ZeRO shard or a DDP bucket — with the same
 * offsets as the parameters. A step is "begun" once (the step count drives Adam's bias
 * correction and SGD's first-step momentum) and then applied to slices.
 *
 * Ownership: nn_optim owns its state arena (nn_optim_cleanup); parameters and gradients are
 * borrowed at each call. */
#ifndef DDPB_NN_OPTIM_H
#define DDPB_NN_OPTIM_H

#include <stddef.h>

#include "common/err.h"
#include "worker/nn/nn.h"

enum nn_optim_type { NN_OPTIM_SGD, NN_OPTIM_ADAM, NN_OPTIM_ADAMW };

struct nn_optim_cfg {
    enum nn_optim_type type;
    /* double, as PyTorch's hyper-parameters are Python floats: factors such as 1 - beta2
     * are formed in double and only then rounded to float, as PyTorch rounds them */
    double lr;
    double weight_decay;        /* SGD/Adam: added to the gradient; AdamW: decoupled */
    double momentum, dampening; /* SGD */
    int nesterov;               /* SGD; needs momentum > 0 and dampening 0 */
    double beta1, beta2, eps;   /* Adam, AdamW */
};

/* PyTorch's defaults for type: SGD lr 0.01 (PyTorch has none), momentum 0, dampening 0;
 * Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0; AdamW the same with
 * weight_decay 1e-2. */
struct nn_optim_cfg nn_optim_defaults(enum nn_optim_type type);
/* "sgd", "adam", "adamw" -> type; -1 when unknown */
int nn_optim_parse_type(const char *name);

struct nn_optim {
    struct nn_optim_cfg cfg;
    size_t nparams;
    struct nn_arena state; /* owned */
    long step;             /* steps begun so far; the current one while applying */
};

/* The planes of state per parameter: 0 (plain SGD), 1 (momentum) or 2 (Adam's m and v);
 * the state arena holds plane k of parameter i at [k * nparams + i]. */
size_t nn_optim_planes(const struct nn_optim_cfg *cfg);
/* Validates cfg (ERR_INVALID naming the field) and allocates the zeroed state. */
int nn_optim_init(struct nn_optim *o, const struct nn_optim_cfg *cfg, size_t nparams,
                  struct err *e);
void nn_optim_cleanup(struct nn_optim *o);
void nn_optim_begin_step(struct nn_optim *o);
/* Applies the current step to params[offset .. offset+len) with learning rate lr. */
void nn_optim_update(struct nn_optim *o, float *params, const float *grads, size_t offset,
                     size_t len, double lr);
/* The same on a slice given by pointers: p[0..len) and g[0..len) use the optimizer state
 * at [state_offset, state_offset+len). ZeRO keeps state only for the slices a rank owns,
 * packed (nparams = the rank's share), while the slices sit anywhere in the arenas. */
void nn_optim_update_slice(struct nn_optim *o, float *p, const float *g, size_t state_offset,
                           size_t len, double lr);
/* begin_step + update of everything */
void nn_optim_step(struct nn_optim *o, float *params, const float *grads, double lr);

/* ---- learning-rate schedules -------------------------------------------------------- */

enum nn_lr_decay { NN_LR_CONSTANT, NN_LR_STEP, NN_LR_COSINE };

/* Linear warm-up over warmup_steps from warmup_start_factor*base_lr to base_lr (LinearLR),
 * then the decay counted from the end of the warm-up (SequentialLR): StepLR(step_size,
 * gamma) or CosineAnnealingLR(t_max, eta_min). */
struct nn_lr_schedule {
    double base_lr;
    int warmup_steps;
    double warmup_start_factor; /* PyTorch's LinearLR default: 1/3 */
    enum nn_lr_decay decay;
    int step_size;
    double gamma;
    int t_max;
    double eta_min;
};

int nn_lr_validate(const struct nn_lr_schedule *s, struct err *e);
/* The learning rate of scheduler step t (t = 0 for the first optimizer step). */
double nn_lr_at(const struct nn_lr_schedule *s, long t);

#endif
