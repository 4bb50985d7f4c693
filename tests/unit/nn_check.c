/* nn_check: the layer tests' shared helpers (nn_check.h). */
#include "tests/unit/nn_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

float *nn_check_randn(size_t n, uint64_t seed, float mean, float std)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    struct nn_rng r;
    nn_rng_seed(&r, seed);
    nn_rng_fill_normal(&r, x, n, mean, std);
    return x;
}

float *nn_check_filled(size_t n, float v)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = v;
    return x;
}

int nn_check_close_rel(const char *what, const float *got, const float *want, size_t n,
                       double tol)
{
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) { /* a NaN is the worst */
            worst = d;
            at = i;
        }
    }
    if (worst <= tol * fmax(scale, 1e-30))
        return 1;
    fprintf(stderr, "    %s: element %zu is %.9g, expected %.9g (scale %.3g)\n", what, at,
            got[at], want[at], scale);
    return 0;
}

int nn_check_close_acc(const char *what, const float *got, const float *want, size_t n,
                       float base, double tol)
{
    float *g = malloc((n ? n : 1) * sizeof *g), *w = malloc((n ? n : 1) * sizeof *w);
    for (size_t i = 0; i < n; i++) {
        g[i] = got[i] - base;
        w[i] = want[i] - base;
    }
    int ok = nn_check_close_rel(what, g, w, n, tol);
    free(g);
    free(w);
    return ok;
}

double nn_check_dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

int nn_check_fd(const char *what, float *x, size_t n, const float *analytic,
                nn_check_loss_fn loss, void *ctx, float h)
{
    int samples = n < 24 ? (int)n : 24;
    for (int k = 0; k < samples; k++) {
        size_t i = (size_t)k * n / (size_t)samples + (size_t)k % 3 % (n / (size_t)samples + 1);
        if (i >= n)
            i = n - 1;
        float save = x[i];
        float up = save + h, down = save - h;
        x[i] = up;
        double lp = loss(ctx);
        x[i] = down;
        double lm = loss(ctx);
        x[i] = save;
        double num = (lp - lm) / ((double)up - down);
        double tol = 5e-3 + 5e-3 * fmax(fabs(num), fabs(analytic[i]));
        if (!(fabs(num - analytic[i]) <= tol)) {
            fprintf(stderr, "    %s[%zu]: numeric %.7g, analytic %.7g\n", what, i, num,
                    analytic[i]);
            return 0;
        }
    }
    return 1;
}

float *nn_check_to_layout(struct nn_dnnl *d, const dnnl_memory_desc_t *md, struct nn_shape s,
                          const float *plain)
{
    dnnl_memory_desc_t p;
    struct nn_reorder r;
    struct err e;
    nn_md_plain(&p, s);
    float *out = nn_alloc(nn_md_bytes(md));
    if (!out || nn_reorder_init(&r, d, &p, md, 0, &e))
        return out;
    nn_reorder_run(&r, d, out, plain);
    nn_reorder_destroy(&r);
    return out;
}

float *nn_check_to_plain(struct nn_dnnl *d, const dnnl_memory_desc_t *md, struct nn_shape s,
                         const float *x)
{
    dnnl_memory_desc_t p;
    struct nn_reorder r;
    struct err e;
    nn_md_plain(&p, s);
    float *out = calloc(nn_shape_numel(s) + 1, sizeof *out);
    if (nn_reorder_init(&r, d, md, &p, 0, &e))
        return out;
    nn_reorder_run(&r, d, out, x);
    nn_reorder_destroy(&r);
    return out;
}
