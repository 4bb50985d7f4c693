/* add: the residual connection, out = a + b (then ReLU for ResNet's block end).
 *
 * Decision: one implementation for both paths. The operation is elementwise, so it runs on
 * the physical buffers whatever layout the two inputs share (padding lanes hold zeros and
 * stay zero); the model makes sure both inputs have the same layout. A oneDNN binary
 * primitive would do the same single pass. */
#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

void nn_add_forward(float *out, const float *a, const float *b, size_t n, int relu)
{
    if (relu) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float v = a[i] + b[i];
            out[i] = v > 0 ? v : 0;
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
    }
}

void nn_add_backward(float *da, float *db, const float *dout, const float *out, size_t n,
                     int relu)
{
    /* the model hands an input its output's gradient buffer where it can (model.c): then
     * there is nothing to copy, only the mask to apply in place */
    if (!relu && (!da || da == dout) && (!db || db == dout))
        return;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = !relu || out[i] > 0 ? dout[i] : 0;
        if (da)
            da[i] = g;
        if (db)
            db[i] = g;
    }
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

static void add_row_forward(const struct nn_layer_args *a)
{
    nn_add_forward(a->y->data, a->x->data, a->x1->data, nn_shape_numel(a->x->shape),
                   a->n->cfg.add_relu);
}

static void add_row_backward(const struct nn_layer_args *a)
{
    nn_add_backward(a->din0, a->din1, a->y->grad, a->y->data, nn_shape_numel(a->x->shape),
                    a->n->cfg.add_relu);
}

/* the output takes the first input's layout; the second is converted to it */
static int add_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    struct nn_add_fast *f = &a->n->fast->add;
    a->y->md = a->x->md;
    return nn_convert_in_init(&f->b_in, a->dnnl, &a->x1->md, &a->x->md, e) ||
           (a->train && nn_convert_out_init(&f->db_out, a->dnnl, &a->x->md, &a->x1->md, 0, e));
}

static void add_row_fast_forward(const struct nn_layer_args *a)
{
    nn_add_forward(a->y->data, a->x->data,
                   nn_convert_in(&a->n->fast->add.b_in, a->dnnl, a->x1->data),
                   a->y->bytes / sizeof(float), a->n->cfg.add_relu);
}

static void add_row_fast_backward(const struct nn_layer_args *a)
{
    struct nn_add_fast *f = &a->n->fast->add;
    nn_add_backward(a->din0, a->din1 ? nn_convert_out_begin(&f->db_out, a->din1) : NULL,
                    a->y->grad, a->y->data, a->y->bytes / sizeof(float), a->n->cfg.add_relu);
    if (a->din1)
        nn_convert_out_end(&f->db_out, a->dnnl, a->din1);
}

static void add_row_fast_destroy(union nn_node_fast *f)
{
    nn_convert_destroy(&f->add.b_in);
    nn_convert_destroy(&f->add.db_out);
}

static const char *add_row_fast_impl(const union nn_node_fast *f)
{
    return f->add.b_in.active ? "own loop + reorder" : "own loop";
}

const struct nn_layer_type nn_layer_add = {
    .name = "add", NN_LAYER_ROW(add), .fast_impl = add_row_fast_impl};
