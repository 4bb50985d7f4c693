/* avgpool: average pooling (PyTorch's AvgPool2d, count_include_pad as its default),
 * global average pooling (a pool whose kernel is the plane) and adaptive average pooling
 * (AlexNet's and VGG's AdaptiveAvgPool2d). The fast path of the first two is oneDNN's
 * pooling (maxpool.c holds it); adaptive pooling is an ordinary pooling when the plane
 * divides evenly, and otherwise these plain loops on a plain layout.
 *
 * Decision: windows follow PyTorch exactly: without ceil_mode no window reaches past the
 * right padding, so "count_include_pad" divides by kh*kw everywhere. */
#include <string.h>

#include "layers.h"

/* ---- reference average pooling ------------------------------------------------------ */

static int pool_divisor(const struct nn_pool_cfg *c, int H, int W, int oh, int ow)
{
    if (c->count_include_pad)
        return c->kh * c->kw;
    int y0 = oh * c->sh - c->ph, x0 = ow * c->sw - c->pw;
    int y1 = y0 + c->kh, x1 = x0 + c->kw;
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 > H ? H : y1;
    x1 = x1 > W ? W : x1;
    return (y1 - y0) * (x1 - x0);
}

void nn_avgpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in)
{
    struct nn_shape os;
    if (nn_pool_shape(c, in, &os, NULL))
        return;
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)os.h * os.w;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++) {
        const float *x = inp + (size_t)p * plane;
        for (int oh = 0; oh < os.h; oh++)
            for (int ow = 0; ow < os.w; ow++) {
                double s = 0;
                for (int ky = 0; ky < c->kh; ky++) {
                    int iy = oh * c->sh - c->ph + ky;
                    for (int kx = 0; kx < c->kw; kx++) {
                        int ix = ow * c->sw - c->pw + kx;
                        if (iy >= 0 && iy < in.h && ix >= 0 && ix < in.w)
                            s += x[iy * in.w + ix];
                    }
                }
                out[(size_t)p * oplane + (size_t)oh * os.w + ow] =
                    (float)(s / pool_divisor(c, in.h, in.w, oh, ow));
            }
    }
}

void nn_avgpool_backward(float *dinp, const float *dout, const struct nn_pool_cfg *c,
                         struct nn_shape in)
{
    struct nn_shape os;
    if (nn_pool_shape(c, in, &os, NULL))
        return;
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)os.h * os.w;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++) {
        float *dx = dinp + (size_t)p * plane;
        memset(dx, 0, plane * sizeof *dx);
        for (int oh = 0; oh < os.h; oh++)
            for (int ow = 0; ow < os.w; ow++) {
                float g = dout[(size_t)p * oplane + (size_t)oh * os.w + ow] /
                          (float)pool_divisor(c, in.h, in.w, oh, ow);
                for (int ky = 0; ky < c->kh; ky++) {
                    int iy = oh * c->sh - c->ph + ky;
                    for (int kx = 0; kx < c->kw; kx++) {
                        int ix = ow * c->sw - c->pw + kx;
                        if (iy >= 0 && iy < in.h && ix >= 0 && ix < in.w)
                            dx[iy * in.w + ix] += g;
                    }
                }
            }
    }
}

/* ---- adaptive average pooling -------------------------------------------------------- */

static int adaptive_start(int i, int in, int out)
{
    return (int)(((long)i * in) / out);
}

static int adaptive_end(int i, int in, int out)
{
    return (int)((((long)i + 1) * in + out - 1) / out);
}

void nn_adaptive_avgpool_forward(float *out, const float *inp, int oh, int ow,
                                 struct nn_shape in)
{
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)oh * ow;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int y0 = adaptive_start(y, in.h, oh), y1 = adaptive_end(y, in.h, oh);
                int x0 = adaptive_start(x, in.w, ow), x1 = adaptive_end(x, in.w, ow);
                double s = 0;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        s += inp[(size_t)p * plane + (size_t)iy * in.w + ix];
                out[(size_t)p * oplane + (size_t)y * ow + x] =
                    (float)(s / ((y1 - y0) * (x1 - x0)));
            }
}

void nn_adaptive_avgpool_backward(float *dinp, const float *dout, int oh, int ow,
                                  struct nn_shape in)
{
    size_t plane = (size_t)in.h * in.w, oplane = (size_t)oh * ow;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)in.n * in.c; p++) {
        float *dx = dinp + (size_t)p * plane;
        memset(dx, 0, plane * sizeof *dx);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int y0 = adaptive_start(y, in.h, oh), y1 = adaptive_end(y, in.h, oh);
                int x0 = adaptive_start(x, in.w, ow), x1 = adaptive_end(x, in.w, ow);
                float g = dout[(size_t)p * oplane + (size_t)y * ow + x] /
                          (float)((y1 - y0) * (x1 - x0));
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++)
                        dx[(size_t)iy * in.w + ix] += g;
            }
    }
}

int nn_adaptive_as_pool(struct nn_pool_cfg *c, int oh, int ow, struct nn_shape in)
{
    if (oh < 1 || ow < 1 || in.h % oh || in.w % ow)
        return 0;
    int kh = in.h / oh, kw = in.w / ow;
    *c = (struct nn_pool_cfg){.kh = kh, .kw = kw, .sh = kh, .sw = kw, .count_include_pad = 1};
    return 1;
}
