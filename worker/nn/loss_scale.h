/* loss_scale: dynamic loss scaling for fp16 training (PyTorch's GradScaler semantics): the
 * loss is multiplied by the scale before backward, gradients are checked for inf/NaN
 * (gpu_find_nonfinite) and unscaled; a step with a non-finite gradient is skipped and the
 * scale halves, and after growth_interval good steps in a row it doubles.
 *
 * Decision: the state machine is host-only C with no CUDA in it, so it is unit-tested on
 * every build; the GPU side only produces the one "found inf" flag per step. bf16 and
 * fp32 use a fixed scale of 1 (bf16 has fp32's exponent range), which this also models
 * (dynamic = 0 never changes the scale and never skips). Ownership: plain value. */
#ifndef DDPB_GPU_LOSS_SCALE_H
#define DDPB_GPU_LOSS_SCALE_H

#include <stdbool.h>

#include "common/err.h"

struct loss_scale {
    bool dynamic;
    bool scaled; /* the loss is multiplied by scale and the gradients unscaled (fp16) */
    float scale;
    float growth, backoff; /* PyTorch: 2.0 and 0.5 */
    int growth_interval;   /* PyTorch: 2000 */
    int good_steps;        /* finite steps since the last change */
    long skipped, applied; /* steps so far, for the report */
};

/* PyTorch's defaults: init 65536, growth 2, backoff 0.5, interval 2000. */
void loss_scale_init(struct loss_scale *ls, bool dynamic);
/* From the spec (issue 33): fp16 with loss_scale 0 is dynamic with growth interval window;
 * fp16 with loss_scale > 0 is static (the scale never changes; a non-finite step is still
 * skipped, as DeepSpeed's static scale does, so no inf reaches the master weights);
 * another precision (fp16 false) is a fixed, unscaled 1. */
void loss_scale_configure(struct loss_scale *ls, bool fp16, double loss_scale, int window);
/* Checks a configuration (scale > 0 and finite, growth > 1, 0 < backoff < 1, interval
 * >= 1): ERR_INVALID naming the field. */
int loss_scale_validate(const struct loss_scale *ls, struct err *e);
/* After a backward: found_inf says a gradient was inf/NaN. Returns true when the
 * optimizer step is to be applied (with gradients divided by the scale it had), false
 * when it is skipped; then updates the scale. */
bool loss_scale_update(struct loss_scale *ls, bool found_inf);
/* 1 / scale, what gradients are multiplied by before the optimizer. */
float loss_scale_inverse(const struct loss_scale *ls);

#endif
