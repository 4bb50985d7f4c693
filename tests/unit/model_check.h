/* model_check: what the whole-network tests share (test_nn_model, test_nn_gpt2): a copy of
 * the gradients backward left, and the central difference of the loss in one parameter.
 *
 * Decision: header-only (static inline, like test.h), so the two binaries link nothing
 * more; the loss is the test's own forward-and-loss function, which both write with one
 * signature.
 *
 * Ownership: model_grads_copy returns a malloc'd array the caller frees. */
#ifndef DDPB_TESTS_MODEL_CHECK_H
#define DDPB_TESTS_MODEL_CHECK_H

#include <stdint.h>
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

#endif
