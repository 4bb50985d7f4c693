/* model_check: what the whole-network tests share (test_nn_model, test_nn_gpt2,
 * test_nn_models): a copy of the gradients backward left, the central difference of the
 * loss in one parameter, and a check of backward against those differences.
 *
 * Decision: header-only (static inline, like test.h), so the two binaries link nothing
 * more; the loss is the test's own forward-and-loss function, which both write with one
 * signature.
 *
 * Ownership: model_grads_copy returns a malloc'd array the caller frees. */
#ifndef DDPB_TESTS_MODEL_CHECK_H
#define DDPB_TESTS_MODEL_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/model.h"

/* Forward and loss of m on inputs x, targets y: 0, or nonzero with e set. */
typedef int (*model_loss_fn)(struct nn_model *m, const float *x, const int32_t *y, double *loss,
                             struct err *e);

/* The m->nparams gradients as they are now (malloc'd; NULL when out of memory). */
static inline float *model_grads_copy(const struct nn_model *m)
{
    float *g = malloc(m->nparams * sizeof *g);
    if (g)
        memcpy(g, m->grads.data, m->nparams * sizeof *g);
    return g;
}

/* The losses with parameter i moved by +h (*lp) and -h (*lm), the parameter restored
 * after; the central difference is (*lp - *lm) / 2h. 0, or nonzero with e set. */
static inline int model_central(struct nn_model *m, model_loss_fn loss, const float *x,
                                const int32_t *y, size_t i, float h, double *lp, double *lm,
                                struct err *e)
{
    float save = m->params.data[i];
    m->params.data[i] = save + h;
    int rc = loss(m, x, y, lp, e);
    m->params.data[i] = save - h;
    rc = rc || loss(m, x, y, lm, e);
    m->params.data[i] = save;
    return rc;
}

/* What a finite-difference check of a whole network found (model_gradcheck). */
struct model_gc {
    int checked, kinks, bad;
};

/* dLoss/dparam by central differences of step h against backward's gradients g (taken at
 * loss l0), at up to `per` parameters of each tensor spread over it (index k * 7919 mod
 * its length). Within 1e-4 + 3e-2 relative to the larger of the two; a sample whose two
 * one-sided differences disagree by more than 1e-3 + 5e-2 sits on a ReLU or max-pool kink
 * and is counted in kinks, not checked. Stops at the first tensor with a mismatch (printed
 * to stderr). 0, or nonzero with e set when a forward failed. */
static inline int model_gradcheck(struct nn_model *m, model_loss_fn loss, const float *x,
                                  const int32_t *y, double l0, const float *g, size_t per,
                                  float h, struct model_gc *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    for (int p = 0; p < m->nparam_tensors && !r->bad; p++) {
        const struct nn_param *pi = &m->param_info[p];
        for (size_t k = 0; k < pi->len && k < per; k++) {
            size_t i = pi->offset + (k * 7919) % pi->len;
            double lp, lm;
            if (model_central(m, loss, x, y, i, h, &lp, &lm, e))
                return -1;
            double num = (lp - lm) / (2.0 * h), fwd = (lp - l0) / h, bwd = (l0 - lm) / h;
            r->checked++;
            if (fabs(fwd - bwd) > 1e-3 + 5e-2 * fabs(num)) {
                r->kinks++;
                continue;
            }
            if (fabs(num - g[i]) > 1e-4 + 3e-2 * fmax(fabs(num), fabs(g[i]))) {
                fprintf(stderr, "    %s[%zu]: numeric %.6g, backward %.6g\n", pi->name,
                        i - pi->offset, num, g[i]);
                r->bad = 1;
            }
        }
    }
    return 0;
}

#endif
