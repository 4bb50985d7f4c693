/* loss_scale: see loss_scale.h. The scale stays within float's normal range: halving
 * stops at the smallest normal float and doubling at 2^64 (PyTorch lets it reach inf and
 * then backs off; bounding it keeps 1/scale finite). */
#include "worker/nn/loss_scale.h"

#include <float.h>
#include <math.h>

#define LOSS_SCALE_MAX 18446744073709551616.0f /* 2^64 */

void loss_scale_init(struct loss_scale *ls, bool dynamic)
{
    *ls = (struct loss_scale){.dynamic = dynamic,
                              .scaled = dynamic,
                              .scale = dynamic ? 65536.0f : 1.0f,
                              .growth = 2.0f,
                              .backoff = 0.5f,
                              .growth_interval = 2000};
}

void loss_scale_configure(struct loss_scale *ls, bool fp16, double loss_scale, int window)
{
    loss_scale_init(ls, fp16 && loss_scale <= 0);
    if (fp16 && loss_scale > 0) {
        ls->scaled = true;
        ls->scale = (float)loss_scale;
    }
    if (window >= 1)
        ls->growth_interval = window;
}

int loss_scale_validate(const struct loss_scale *ls, struct err *e)
{
    if (!(ls->scale > 0) || !isfinite(ls->scale))
        return err_set(e, ERR_INVALID, "loss_scale", "loss scale must be finite and > 0");
    if (!(ls->growth > 1) || !isfinite(ls->growth))
        return err_set(e, ERR_INVALID, "growth", "loss scale growth must be > 1");
    if (!(ls->backoff > 0 && ls->backoff < 1))
        return err_set(e, ERR_INVALID, "backoff", "loss scale backoff must be in (0, 1)");
    if (ls->growth_interval < 1)
        return err_set(e, ERR_INVALID, "growth_interval",
                       "loss scale growth interval must be >= 1");
    return 0;
}

bool loss_scale_update(struct loss_scale *ls, bool found_inf)
{
    if (!ls->scaled || (!ls->dynamic && !found_inf)) {
        ls->applied++;
        return true; /* fp32 / bf16: a non-finite gradient is the model's problem */
    }
    if (!ls->dynamic) { /* static: skipped, the scale kept */
        ls->skipped++;
        return false;
    }
    if (found_inf) {
        ls->scale = fmaxf(ls->scale * ls->backoff, FLT_MIN);
        ls->good_steps = 0;
        ls->skipped++;
        return false;
    }
    ls->applied++;
    if (++ls->good_steps >= ls->growth_interval) {
        ls->scale = fminf(ls->scale * ls->growth, LOSS_SCALE_MAX);
        ls->good_steps = 0;
    }
    return true;
}

float loss_scale_inverse(const struct loss_scale *ls)
{
    return 1.0f / ls->scale;
}
