/* spec_memory: one rank's memory estimate for a resolved train spec (spec_memory_estimate,
 * spec_memory_text of spec.h): parameters, gradients, optimizer state, communication
 * buffers, activations and the loader's input batches.
 *
 * Decision: the estimate reads the model's facts from common/model_table.h (parameter
 * count as the input and classes move it, activation floats per sample) and the spec's
 * fields only, no worker code, so submit can refuse a run that cannot fit a rank
 * (spec_checks.c's memory check) and the report can print the same figures. It is an
 * estimate: what each arena really holds is the worker's (worker/ddp/ddp.c ddp_memory). */
#include <stdio.h>
#include <string.h>

#include "common/model_table.h"
#include "common/spec_table.h"

/* The shape and classes of the real datasets (their files decide; dataset.shape and
 * dataset.classes are synthetic's). */
struct spec_data_shape {
    const char *name;
    int c, h, w, classes;
};

static const struct spec_data_shape spec_data_shapes[] = {
    {"mnist", 1, 28, 28, 10},
    {"fashion-mnist", 1, 28, 28, 10},
    {"cifar10", 3, 32, 32, 10},
};

/* The input (c, h, w) and classes a resolved train spec trains on. */
static void spec_train_input(const json_t *spec, const struct model_info *mi, int dims[3],
                             int *classes)
{
    const char *data = json_string_value(spec_field_value(spec, "dataset.name"));
    const json_t *shape = spec_field_value(spec, "dataset.shape");
    dims[0] = mi->c, dims[1] = mi->h, dims[2] = mi->w;
    *classes = (int)json_integer_value(spec_field_value(spec, "dataset.classes"));
    if (mi->embd > 0) { /* a transformer: (1, 1, tokens); bytes or the model's vocabulary */
        int t = (int)json_integer_value(spec_field_value(spec, "seq_len"));
        dims[2] = t > 0 ? t : mi->w;
        *classes = data && strcmp(data, "text") == 0 ? 256 : mi->classes;
        return;
    }
    for (size_t i = 0; data && i < SPEC_COUNT(spec_data_shapes); i++) {
        const struct spec_data_shape *d = &spec_data_shapes[i];
        if (strcmp(d->name, data) == 0) {
            dims[0] = d->c, dims[1] = d->h, dims[2] = d->w;
            *classes = d->classes;
            return;
        }
    }
    if (json_array_size(shape) == 3)
        for (size_t i = 0; i < 3; i++)
            dims[i] = (int)json_integer_value(json_array_get(shape, i));
}

/* Bytes of optimizer state per parameter. */
static double spec_optimizer_bytes(const json_t *spec)
{
    const char *type = json_string_value(spec_field_value(spec, "optimizer.type"));
    if (type && strcmp(type, "sgd") != 0)
        return 8; /* adam, adamw: two moments */
    return json_number_value(spec_field_value(spec, "optimizer.momentum")) > 0 ? 4 : 0;
}

/* Bytes of communication buffers per parameter, by strategy (worker/ddp/ddp.c). */
static double spec_comm_bytes(const json_t *spec)
{
    const struct vocab_strategy *st = spec_strategy_of(spec);
    const char *compression = json_string_value(spec_field_value(spec, "compression"));
    double b = 0;
    if (st && (st->buckets == VOCAB_BUCKETS_FUSION || st->shards_optimizer))
        b += 4; /* the fusion buffer / the padded staging copy */
    if (compression && strcmp(compression, "none") != 0)
        b += 2; /* the 16-bit wire copy */
    return b;
}

int spec_memory_estimate(const json_t *resolved, struct spec_memory *out)
{
    memset(out, 0, sizeof *out);
    const char *wl = json_string_value(json_object_get(resolved, "workload"));
    const struct model_info *mi = model_table_find(
        json_string_value(spec_field_value(resolved, "model")));
    if (!wl || strcmp(wl, "train") != 0 || !mi)
        return -1;
    int dims[3], classes;
    spec_train_input(resolved, mi, dims, &classes);
    double batch = (double)json_integer_value(spec_field_value(resolved, "batch_size"));
    double world = (double)json_integer_value(spec_field_value(resolved, "world_size"));
    double prefetch = (double)json_integer_value(spec_field_value(resolved, "prefetch"));
    double workers = (double)json_integer_value(spec_field_value(resolved, "dataset.workers"));
    const struct vocab_strategy *st = spec_strategy_of(resolved);
    double p = model_table_params(mi, dims[0], dims[1], dims[2], classes);
    bool zero = st && st->shards_optimizer;
    out->params = 4 * p;
    out->grads = 4 * p;
    out->optimizer = spec_optimizer_bytes(resolved) * p / (zero && world > 1 ? world : 1);
    out->comm = spec_comm_bytes(resolved) * p;
    out->activations = 2 * 4 * batch * model_table_activations(mi, dims[0], dims[1], dims[2]);
    /* the loader's ring: max(prefetch, workers) + 1 batches, 1 without a thread
     * (prefetch 0; worker/data/loader.c) */
    double ahead = prefetch > 0 && workers > prefetch ? workers : prefetch;
    out->data = (ahead + 1) * batch * 4 * (double)dims[0] * dims[1] * dims[2];
    out->total = out->params + out->grads + out->optimizer + out->comm + out->activations +
                 out->data;
    return 0;
}

void spec_memory_text(const struct spec_memory *m, char *buf, size_t n)
{
    snprintf(buf, n,
             "about %.4g GiB (parameters %.3g, gradients %.3g, optimizer %.3g, "
             "buffers %.3g, activations %.3g, input %.3g GiB; an estimate)",
             m->total / SPEC_GIB, m->params / SPEC_GIB, m->grads / SPEC_GIB,
             m->optimizer / SPEC_GIB, m->comm / SPEC_GIB, m->activations / SPEC_GIB,
             m->data / SPEC_GIB);
}
