/* gmodel_host: the host half of the GPU model runner (gmodel.h), declared in gmodel_host.h:
 * the convolution weight permutation between the host's (Cout,Cin/G,KH,KW) and cuDNN's
 * NHWC filters (Cout,KH,KW,Cin/G), applied over whole arenas, and the check that a graph
 * has a GPU form.
 *
 * Decision: plain C with no CUDA in it, built in every configuration, so the layout logic
 * the device copies rely on is unit-tested on the CPU (tests/unit/test_gmodel_host.c). */
#include "worker/nn/cuda/gmodel_host.h"

#include <string.h>

/* One loop for both directions: element (o,i,y,x) sits at host index h and device index d;
 * to_device copies src[h] to dst[d], else src[d] to dst[h]. */
static void gmodel_conv_permute(float *dst, const float *src, const struct nn_conv2d_cfg *c,
                                int to_device)
{
    int ci = c->cin / c->groups, kh = c->kh, kw = c->kw;
    for (int o = 0; o < c->cout; o++)
        for (int i = 0; i < ci; i++)
            for (int y = 0; y < kh; y++)
                for (int x = 0; x < kw; x++) {
                    size_t h = (((size_t)o * ci + i) * kh + y) * kw + x;
                    size_t d = (((size_t)o * kh + y) * kw + x) * ci + i;
                    if (to_device)
                        dst[d] = src[h];
                    else
                        dst[h] = src[d];
                }
}

void gmodel_conv_weight_to_device(float *dst, const float *src, const struct nn_conv2d_cfg *c)
{
    gmodel_conv_permute(dst, src, c, 1);
}

void gmodel_conv_weight_to_host(float *dst, const float *src, const struct nn_conv2d_cfg *c)
{
    gmodel_conv_permute(dst, src, c, 0);
}

/* Copies the arena, then permutes each convolution's weight (its first parameter). */
static void gmodel_arena_permute(const struct nn_model *m, float *dst, const float *src,
                                 int to_device)
{
    memcpy(dst, src, m->nparams * sizeof *dst);
    for (int i = 0; i < nn_model_node_count(m); i++) {
        struct nn_node_info n;
        nn_model_node_info(m, i, &n);
        if (n.op != NN_OP_CONV)
            continue;
        gmodel_conv_permute(dst + n.param_off, src + n.param_off, &n.cfg.conv, to_device);
    }
}

void gmodel_arena_to_device(const struct nn_model *m, float *dst, const float *src)
{
    gmodel_arena_permute(m, dst, src, 1);
}

void gmodel_arena_to_host(const struct nn_model *m, float *dst, const float *src)
{
    gmodel_arena_permute(m, dst, src, 0);
}

int gmodel_check(const struct nn_model *m, struct err *e)
{
    if (!m->finished)
        return err_set(e, ERR_INVALID, "model", "gpu: the model is not finished");
    for (int i = 0; i < nn_model_node_count(m); i++) {
        struct nn_node_info n;
        nn_model_node_info(m, i, &n);
        struct nn_shape in = nn_model_tensor_shape(m, n.in[0]);
        struct nn_pool_cfg pc;
        if (n.op == NN_OP_ADAPTIVE_AVGPOOL &&
            !nn_adaptive_as_pool(&pc, n.cfg.adapt.oh, n.cfg.adapt.ow, in))
            return err_set(e, ERR_INVALID, "model",
                           "gpu: %s pools %dx%d adaptively to %dx%d, which is no ordinary "
                           "pooling (cuDNN has none): use an input size whose %dx%d divides "
                           "evenly, or device cpu",
                           n.name, in.h, in.w, n.cfg.adapt.oh, n.cfg.adapt.ow, n.cfg.adapt.oh,
                           n.cfg.adapt.ow);
    }
    return 0;
}
