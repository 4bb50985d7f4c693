/* synthetic: random samples of any shape, or random token sequences for a language model,
 * for measuring training without a data cost.
 *
 * Decision: a sample is generated from its own stream keyed by (seed, step, index) in fresh
 * mode and (seed, 0, index) in fixed mode, so values never depend on fill order. Fixed mode
 * additionally sets reuse_batch: the loader then fills one batch once and hands the same
 * memory out at every step, as Horovod's and tf_cnn_benchmarks' synthetic benchmarks do.
 * Token data uses the same keys: one sequence of T + 1 ids per sample, split into inputs
 * and shifted targets while filling, so the targets are the inputs' continuation exactly as
 * in a real corpus (a model can learn nothing from it, but every shape and cost is real). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/data.h"
#include "worker/data/formats.h"

#define SYNTH_DOMAIN 0x53594e5448ull /* keeps synthetic draws apart from others */
#define SYNTH_MAX_SAMPLE_FLOATS ((size_t)1 << 26)

struct synth {
    bool fresh;
    bool tokens;
};

/* Two 24-bit uniforms per draw, mapped to [-1, 1) exactly representable in float. */
static void synth_values(uint64_t *s, float *x, size_t n)
{
    const float scale = 1.0f / (float)(1u << 23);
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t r = data_rng_next(s);
        x[i] = (float)(r >> 40) * scale - 1.0f;
        x[i + 1] = (float)((r >> 16) & 0xffffffu) * scale - 1.0f;
    }
    if (i < n)
        x[i] = (float)(data_rng_next(s) >> 40) * scale - 1.0f;
}

/* T + 1 ids uniform in [0, vocab) drawn in order: x[t] = id t, y[t] = id t + 1. */
static void synth_tokens(uint64_t *s, uint64_t vocab, float *x, int32_t *y, size_t t_len)
{
    uint64_t prev = data_rng_below(s, vocab);
    for (size_t t = 0; t < t_len; t++) {
        uint64_t next = data_rng_below(s, vocab);
        x[t] = (float)prev; /* exact: vocab <= DATA_MAX_CLASSES < 2^24 */
        y[t] = (int32_t)next;
        prev = next;
    }
}

static int synth_fill(const struct dataset *ds, const int64_t *idx, int n,
                      const struct data_draw *draw, float *x, int32_t *y, struct err *e)
{
    const struct synth *sy = ds->impl;
    size_t per = dataset_sample_floats(ds), labels = (size_t)dataset_label_len(ds);
    uint64_t when = sy->fresh ? (uint64_t)draw->step : 0;
    for (int i = 0; i < n; i++) {
        uint64_t s = data_rng_key(draw->seed ^ SYNTH_DOMAIN, when, (uint64_t)idx[i]);
        if (sy->tokens) {
            synth_tokens(&s, (uint64_t)ds->classes, x + (size_t)i * per, y + (size_t)i * labels,
                         per);
            continue;
        }
        y[i] = (int32_t)data_rng_below(&s, (uint64_t)ds->classes);
        synth_values(&s, x + (size_t)i * per, per);
    }
    return 0;
}

static void synth_destroy(struct dataset *ds)
{
    free(ds->impl);
    free(ds);
}

static const struct dataset_ops synth_ops = {
    .fill = synth_fill,
    .destroy = synth_destroy,
};

static int synth_check(const struct data_synthetic_config *cfg, struct err *e)
{
    if (cfg->c < 1 || cfg->h < 1 || cfg->w < 1 || cfg->c > DATA_MAX_SIDE ||
        cfg->h > DATA_MAX_SIDE || cfg->w > DATA_MAX_SIDE ||
        (size_t)cfg->c * (size_t)cfg->h * (size_t)cfg->w > SYNTH_MAX_SAMPLE_FLOATS)
        return err_set(e, ERR_INVALID, "dataset.shape",
                       "shape %dx%dx%d out of range (each "
                       "side 1 to %d, at most %zu values)",
                       cfg->c, cfg->h, cfg->w, DATA_MAX_SIDE, SYNTH_MAX_SAMPLE_FLOATS);
    if (cfg->classes < 1 || cfg->classes > DATA_MAX_CLASSES)
        return err_set(e, ERR_INVALID, "dataset.classes", "%d classes out of [1, %d]",
                       cfg->classes, DATA_MAX_CLASSES);
    if (cfg->samples < 1 || cfg->samples > DATA_MAX_SAMPLES)
        return err_set(e, ERR_INVALID, "dataset.samples", "%lld samples out of [1, %lld]",
                       (long long)cfg->samples, (long long)DATA_MAX_SAMPLES);
    if (cfg->tokens && (cfg->c != 1 || cfg->h != 1))
        return err_set(e, ERR_INVALID, "dataset.shape",
                       "token data has shape 1x1xT (T tokens per sample), not %dx%dx%d", cfg->c,
                       cfg->h, cfg->w);
    if (cfg->tokens && cfg->classes < 2)
        return err_set(e, ERR_INVALID, "dataset.classes",
                       "token data needs a vocabulary of at least 2 tokens, not %d",
                       cfg->classes);
    return 0;
}

int dataset_synthetic_create(const struct data_synthetic_config *cfg, struct dataset **out,
                             struct err *e)
{
    *out = NULL;
    if (synth_check(cfg, e) < 0)
        return -1;
    struct dataset *ds = calloc(1, sizeof *ds);
    struct synth *sy = calloc(1, sizeof *sy);
    if (!ds || !sy) {
        free(ds);
        free(sy);
        return err_set(e, ERR_NOMEM, "", "synthetic dataset: out of memory");
    }
    sy->fresh = cfg->fresh;
    sy->tokens = cfg->tokens;
    *ds = (struct dataset){.ops = &synth_ops,
                           .impl = sy,
                           .split = DATA_SPLIT_TRAIN,
                           .n = cfg->samples,
                           .c = cfg->c,
                           .h = cfg->h,
                           .w = cfg->w,
                           .classes = cfg->classes,
                           .label_len = cfg->tokens ? cfg->w : 1,
                           .reuse_batch = !cfg->fresh};
    snprintf(ds->name, sizeof ds->name, "synthetic");
    *out = ds;
    return 0;
}
