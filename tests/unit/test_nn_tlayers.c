/* Unit tests for worker/nn's GPT-2 layers other than attention: the token + position
 * embedding (hand-computed values, duplicate tokens in backward, the id check), layer norm
 * (a hand example, oneDNN against the reference at GPT-2's shapes, accumulation into
 * non-zero gradients) and the tanh GELU (oneDNN against the reference over a range that
 * includes large |x|), and finite-difference checks of every reference.
 *
 * Tolerances, fast vs reference: the references accumulate in double, oneDNN in float with
 * its own order. Layer norm sums C = 768 terms per row (statistics, dinp) and R = 128 per
 * channel (dweight, dbias): K * 2^-24 with K ~ 1e3 is ~6e-5 of the terms' magnitude, so
 * 2e-4 of the tensor's largest magnitude bounds honest rounding while a wrong index or a
 * missed term moves results by O(1). GELU is elementwise: oneDNN's tanh is a polynomial
 * accurate to a few float ulps, but 1 + tanh u and 1 - tanh^2 u computed in float cancel
 * where tanh u is near -1 (an absolute error of ~1e-7 times the factors of x around them),
 * so elements are compared to 1e-5 of |expected| plus 2e-6 * max(1,|x|) absolute, times
 * max(1,|dy|) in backward (measured here, jit:avx2: at most 0.44 of that at x = -4.1 with
 * 1e-6; a wrong formula, e.g. the erf GELU, is off by ~1e-3).
 *
 * Finite differences: L = sum(out * R) for a fixed random R, so dL/dparam is the backward
 * of dout = R. Central differences of step h = 1e-2; the embedding is linear (only float
 * rounding of L), layer norm and GELU are smooth (truncation O(h^2) ~ 1e-4 at O(1) inputs).
 * Tolerance 5e-3 absolute plus 5e-3 relative, as in test_nn_layers.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/nn_check.h"
#include "tests/unit/test.h"
#include "worker/nn/layers.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

/* ---- helpers ---------------------------------------------------------------------- */

static void free_all(float **bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
}

/* ---- embedding -------------------------------------------------------------------- */

/* vocab 5, max_t 4 (one position unused), C 3; wte[v][i] = 10v + i, wpe[p][i] = 100p + i/2 */
static void embed_tables(float *wte, float *wpe)
{
    for (int v = 0; v < 5; v++)
        for (int i = 0; i < 3; i++)
            wte[v * 3 + i] = 10.0f * v + i;
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 3; i++)
            wpe[p * 3 + i] = 100.0f * p + 0.5f * i;
}

static void test_embed_forward(void)
{
    const struct nn_embed_cfg c = {.vocab = 5, .max_t = 4, .c = 3};
    float wte[15], wpe[12], out[18];
    const float tok[6] = {4, 0, 2, /* sequence 0 */ 1, 1, 3};
    embed_tables(wte, wpe);
    nn_embed_forward(out, tok, wte, wpe, &c, 2, 3);
    const float want[18] = {
        40,  41.5,  43,  /* wte[4] + wpe[0] */
        100, 101.5, 103, /* wte[0] + wpe[1] */
        220, 221.5, 223, /* wte[2] + wpe[2] */
        10,  11.5,  13,  /* wte[1] + wpe[0] */
        110, 111.5, 113, /* wte[1] + wpe[1] */
        230, 231.5, 233, /* wte[3] + wpe[2] */
    };
    for (int i = 0; i < 18; i++)
        T_CHECK_MSG(out[i] == want[i], "out[%d] = %g, want %g", i, out[i], want[i]);
}

static void test_embed_backward_duplicates(void)
{
    const struct nn_embed_cfg c = {.vocab = 5, .max_t = 4, .c = 3};
    /* token 1 three times, token 3 twice, 0 once; 2 and 4 never */
    const float tok[6] = {1, 1, 3, /* sequence 0 */ 1, 0, 3};
    float dout[18], dwte[15], dwpe[12];
    for (int r = 0; r < 6; r++)
        for (int i = 0; i < 3; i++)
            dout[r * 3 + i] = (float)((r + 1) * (i + 1));
    for (int i = 0; i < 15; i++)
        dwte[i] = 1;
    for (int i = 0; i < 12; i++)
        dwpe[i] = 0.5f;
    nn_embed_backward(dwte, dwpe, dout, tok, &c, 2, 3);
    /* dwte[v][i] = 1 + (i+1) * sum of (r+1) over rows r with token v */
    const float want_wte[15] = {
        6,  11, 16, /* v 0: row 4 -> 5 */
        8,  15, 22, /* v 1: rows 0, 1, 3 -> 1 + 2 + 4 = 7 */
        1,  1,  1,  /* v 2 */
        10, 19, 28, /* v 3: rows 2, 5 -> 3 + 6 = 9 */
        1,  1,  1,  /* v 4 */
    };
    /* dwpe[p][i] = 0.5 + (i+1) * ((p+1) + (p+4)) for p < 3; position 3 untouched */
    const float want_wpe[12] = {5.5, 10.5, 15.5, 7.5, 14.5, 21.5,
                                9.5, 18.5, 27.5, 0.5, 0.5,  0.5};
    for (int i = 0; i < 15; i++)
        T_CHECK_MSG(dwte[i] == want_wte[i], "dwte[%d] = %g, want %g", i, dwte[i], want_wte[i]);
    for (int i = 0; i < 12; i++)
        T_CHECK_MSG(dwpe[i] == want_wpe[i], "dwpe[%d] = %g, want %g", i, dwpe[i], want_wpe[i]);

    /* many threads, few tokens (every row collides with many), C not a multiple of the
     * channel slice: against a serial scatter-add in the same order */
    const struct nn_embed_cfg b = {.vocab = 7, .max_t = 40, .c = 37};
    int n = 4, t = 32, saved = nn_get_threads();
    size_t rows = (size_t)n * t, nwte = 7 * 37, nwpe = 40 * 37;
    float *tk = malloc(rows * sizeof *tk), *g = nn_check_randn(rows * 37, 11, 0, 1);
    for (size_t r = 0; r < rows; r++)
        tk[r] = (float)(r * 5 % 7 % 3); /* ids 0..2 only */
    float *dw = nn_check_filled(nwte, 0.25f), *dp = nn_check_filled(nwpe, -0.25f);
    float *sw = nn_check_filled(nwte, 0.25f), *sp = nn_check_filled(nwpe, -0.25f);
    nn_set_threads(8);
    nn_embed_backward(dw, dp, g, tk, &b, n, t);
    nn_set_threads(saved);
    for (size_t r = 0; r < rows; r++)
        for (int i = 0; i < 37; i++) {
            sw[(size_t)tk[r] * 37 + i] += g[r * 37 + i];
            sp[(r % (size_t)t) * 37 + i] += g[r * 37 + i];
        }
    int ok = memcmp(dw, sw, nwte * sizeof *dw) == 0 && /* same order: bit for bit */
             nn_check_close_acc("embed dwpe", dp, sp, nwpe, -0.25f, 1e-6);
    float *bufs[] = {tk, g, dw, dp, sw, sp};
    free_all(bufs, sizeof bufs / sizeof *bufs);
    T_CHECK(ok);
}

static void test_embed_check(void)
{
    struct err e;
    const float good[] = {0, 4, 2, 3, 1};
    T_EQ_INT(nn_embed_check(good, 5, 5, &e), 0);
    T_EQ_INT(nn_embed_check(good, 0, 5, &e), 0);
    const float bad[] = {-1, 5, 1.5f, NAN, INFINITY, -0.5f, 1e9f};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        float tok[] = {0, 3, bad[k], 1, -7};
        err_clear(&e);
        T_EQ_INT(nn_embed_check(tok, 5, 5, &e), -1);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "tokens");
        /* the first bad id, at its position (not the later -7) */
        T_CHECK_MSG(strstr(e.msg, "position 2") != NULL, "%s", e.msg);
    }
    float tok[] = {1, -1};
    T_EQ_INT(nn_embed_check(tok, 2, 5, &e), -1);
    T_CHECK_MSG(strstr(e.msg, "-1") && strstr(e.msg, "position 1"), "%s", e.msg);
}

struct emb_ctx {
    struct nn_embed_cfg c;
    int n, t;
    float *tok, *wte, *wpe, *out, *r;
};

static double emb_loss(void *p)
{
    struct emb_ctx *k = p;
    nn_embed_forward(k->out, k->tok, k->wte, k->wpe, &k->c, k->n, k->t);
    return nn_check_dot(k->out, k->r, (size_t)k->n * k->t * k->c.c);
}

static void test_embed_gradcheck(void)
{
    struct emb_ctx k = {.c = {.vocab = 6, .max_t = 5, .c = 7}, .n = 3, .t = 4};
    size_t rows = 12, ny = rows * 7, nwte = 6 * 7, nwpe = 5 * 7;
    k.tok = malloc(rows * sizeof *k.tok);
    for (size_t r = 0; r < rows; r++)
        k.tok[r] = (float)(r * 7 % 5); /* duplicates; id 5 unused */
    k.wte = nn_check_randn(nwte, 1, 0, 1), k.wpe = nn_check_randn(nwpe, 2, 0, 1),
    k.r = nn_check_randn(ny, 3, 0, 1);
    k.out = malloc(ny * sizeof *k.out);
    float *gw = nn_check_filled(nwte, 0), *gp = nn_check_filled(nwpe, 0);
    nn_embed_backward(gw, gp, k.r, k.tok, &k.c, k.n, k.t);
    int ok = nn_check_fd("embed wte", k.wte, nwte, gw, emb_loss, &k, 1e-2f) &&
             nn_check_fd("embed wpe", k.wpe, nwpe, gp, emb_loss, &k, 1e-2f);
    float *bufs[] = {k.tok, k.wte, k.wpe, k.r, k.out, gw, gp};
    free_all(bufs, sizeof bufs / sizeof *bufs);
    T_CHECK(ok);
}

/* ---- layer norm ------------------------------------------------------------------- */

static void test_layernorm_hand(void)
{
    const float x[8] = {1, 2, 3, 4, /* mean 2.5, var 1.25 */ -2, 0, 0, 2 /* mean 0, var 2 */};
    const float ones[4] = {1, 1, 1, 1}, zeros[4] = {0};
    float out[8], mean[2], rstd[2];
    /* weight 1, bias 0: every row has mean 0 and variance var / (var + eps) ~ 1 */
    nn_layernorm_forward(out, mean, rstd, x, ones, zeros, 2, 4);
    for (int r = 0; r < 2; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < 4; i++)
            m += out[r * 4 + i] / 4.0;
        for (int i = 0; i < 4; i++)
            v += (out[r * 4 + i] - m) * (out[r * 4 + i] - m) / 4.0;
        T_NEAR(m, 0, 1e-7);
        T_NEAR(v, 1, 1e-4);
    }
    T_NEAR(mean[0], 2.5, 1e-7);
    T_NEAR(mean[1], 0, 1e-7);
    T_NEAR(rstd[0], 0.894423613312618, 1e-7); /* 1 / sqrt(1.25 + 1e-5) */
    T_NEAR(rstd[1], 0.7071050134262237, 1e-7);
    T_NEAR(out[0], -1.3416354199689269, 1e-6);
    T_NEAR(out[1], -0.447211806656309, 1e-6);
    T_NEAR(out[4], -1.4142100268524473, 1e-6);
    T_NEAR(out[5], 0, 1e-7);
    /* the affine part: out = norm * weight + bias */
    const float w[4] = {2, 0.5f, 1, -1}, b[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    nn_layernorm_forward(out, mean, rstd, x, w, b, 2, 4);
    const double want[8] = {-2.5832708399378537,
                            -0.023605903328154487,
                            0.7472118066563089,
                            -0.9416354199689269,
                            -2.7284200537048946,
                            0.2,
                            0.3,
                            -1.0142100268524472};
    for (int i = 0; i < 8; i++)
        T_NEAR(out[i], want[i], 1e-6);
}

static const int ln_shapes[][2] = {{6, 8}, {37, 64}, {128, 768}};

static void test_layernorm_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    int ok = 1;
    for (size_t s = 0; ok && s < sizeof ln_shapes / sizeof *ln_shapes; s++) {
        int rows = ln_shapes[s][0], c = ln_shapes[s][1];
        size_t n = (size_t)rows * c;
        /* an offset mean and a non-unit spread, so normalisation does something */
        float *x = nn_check_randn(n, 10 + s, 3, 2),
              *w = nn_check_randn((size_t)c, 20 + s, 1, 0.3f),
              *b = nn_check_randn((size_t)c, 30 + s, 0, 0.5f),
              *dy = nn_check_randn(n, 40 + s, 0, 1);
        float *y = malloc(n * 4), *mean = malloc((size_t)rows * 4),
              *rstd = malloc((size_t)rows * 4), *dx = malloc(n * 4),
              *dw = nn_check_filled((size_t)c, 0.5f), *db = nn_check_filled((size_t)c, -0.5f),
              *dw2 = nn_check_filled((size_t)c, 0.5f), *db2 = nn_check_filled((size_t)c, -0.5f);
        float *fy = malloc(n * 4), *fyi = malloc(n * 4), *fdx = malloc(n * 4),
              *fdw = nn_check_filled((size_t)c, 0.5f), *fdb = nn_check_filled((size_t)c, -0.5f);
        nn_layernorm_forward(y, mean, rstd, x, w, b, rows, c);
        nn_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, rows, c);
        /* dinp = NULL still gives the parameter gradients */
        nn_layernorm_backward(NULL, dw2, db2, dy, x, w, mean, rstd, rows, c);
        ok = memcmp(dw, dw2, (size_t)c * 4) == 0 && memcmp(db, db2, (size_t)c * 4) == 0;
        struct nn_layernorm_fast f, fi;
        memset(&fi, 0, sizeof fi);
        int made = nn_layernorm_fast_init(&f, &d, rows, c, 1, &e) == 0 &&
                   nn_layernorm_fast_init(&fi, &d, rows, c, 0, &e) == 0;
        if (!made)
            fprintf(stderr, "    layernorm fast init (%d, %d): %s\n", rows, c, e.msg);
        ok = ok && made;
        if (ok) {
            nn_layernorm_fast_forward(&f, fy, x, w, b);
            nn_layernorm_fast_forward(&fi, fyi, x, w, b);
            /* twice: the second call must add onto the first, not overwrite it */
            nn_layernorm_fast_backward(&f, fdx, fdw, fdb, dy, x, w);
            ok = nn_dnnl_check(&d, &e) == 0 && nn_check_close_rel("ln out", fy, y, n, 2e-4) &&
                 nn_check_close_rel("ln out (inference)", fyi, y, n, 2e-4) &&
                 nn_check_close_rel("ln dinp", fdx, dx, n, 2e-4) &&
                 nn_check_close_acc("ln dweight", fdw, dw, (size_t)c, 0.5f, 2e-4) &&
                 nn_check_close_acc("ln dbias", fdb, db, (size_t)c, -0.5f, 2e-4);
            nn_layernorm_fast_backward(&f, fdx, fdw, fdb, dy, x, w);
            nn_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, rows, c);
            ok = ok && nn_dnnl_check(&d, &e) == 0 &&
                 nn_check_close_acc("ln dweight (2 steps)", fdw, dw, (size_t)c, 0.5f, 2e-4) &&
                 nn_check_close_acc("ln dbias (2 steps)", fdb, db, (size_t)c, -0.5f, 2e-4);
            if (!ok)
                fprintf(stderr, "    at (rows, c) = (%d, %d) [%s]\n", rows, c,
                        nn_prim_impl(&f.fwd));
        }
        nn_layernorm_fast_destroy(&f);
        nn_layernorm_fast_destroy(&fi);
        float *bufs[] = {x,  w,   b,   dy, y,   mean, rstd, dx, dw,
                         db, dw2, db2, fy, fyi, fdx,  fdw,  fdb};
        free_all(bufs, sizeof bufs / sizeof *bufs);
    }
    if (!ok && d.status != dnnl_success)
        fprintf(stderr, "    oneDNN: %s\n", d.failed);
    nn_dnnl_cleanup(&d);
    T_CHECK(ok);
}

static void test_layernorm_destroy_zeroed(void)
{
    struct nn_layernorm_fast f;
    memset(&f, 0, sizeof f);
    nn_layernorm_fast_destroy(&f);
    nn_layernorm_fast_destroy(&f); /* and again: destroy leaves it zeroed */
    struct nn_act_fast g;
    memset(&g, 0, sizeof g);
    nn_act_fast_destroy(&g);
    T_CHECK(f.mean == NULL && g.fwd.prim == NULL);
}

struct ln_ctx {
    int rows, c;
    float *x, *w, *b, *y, *mean, *rstd, *r;
};

static double ln_loss(void *p)
{
    struct ln_ctx *k = p;
    nn_layernorm_forward(k->y, k->mean, k->rstd, k->x, k->w, k->b, k->rows, k->c);
    return nn_check_dot(k->y, k->r, (size_t)k->rows * k->c);
}

static void test_layernorm_gradcheck(void)
{
    struct ln_ctx k = {.rows = 3, .c = 10};
    size_t n = 30;
    k.x = nn_check_randn(n, 1, 0.5f, 1), k.w = nn_check_randn(10, 2, 1, 0.3f),
    k.b = nn_check_randn(10, 3, 0, 0.5f);
    k.r = nn_check_randn(n, 4, 0, 1);
    k.y = malloc(n * 4), k.mean = malloc(3 * 4), k.rstd = malloc(3 * 4);
    float *dx = malloc(n * 4), *dw = nn_check_filled(10, 0), *db = nn_check_filled(10, 0);
    ln_loss(&k);
    nn_layernorm_backward(dx, dw, db, k.r, k.x, k.w, k.mean, k.rstd, k.rows, k.c);
    int ok = nn_check_fd("ln x", k.x, n, dx, ln_loss, &k, 1e-2f) &&
             nn_check_fd("ln weight", k.w, 10, dw, ln_loss, &k, 1e-2f) &&
             nn_check_fd("ln bias", k.b, 10, db, ln_loss, &k, 1e-2f);
    float *bufs[] = {k.x, k.w, k.b, k.r, k.y, k.mean, k.rstd, dx, dw, db};
    free_all(bufs, sizeof bufs / sizeof *bufs);
    T_CHECK(ok);
}

/* ---- GELU ------------------------------------------------------------------------- */

/* |got - want| <= 1e-5 |want| + 2e-6 max(1, |x|) max(1, |dy|) per element, dy = NULL in
 * forward (see the file comment) */
static int gelu_close(const char *what, const float *got, const float *want, const float *x,
                      const float *dy, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-5 * fabs(want[i]) +
                     2e-6 * fmax(1, fabs(x[i])) * (dy ? fmax(1, fabs(dy[i])) : 1);
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            fprintf(stderr, "    %s: x = %.9g gives %.9g, expected %.9g\n", what, x[i], got[i],
                    want[i]);
            return 0;
        }
    }
    return 1;
}

static void test_gelu_values(void)
{
    /* hand values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    const float x[] = {0, 1, -1, 3, -3, 40, -40};
    const double want[] = {0,
                           0.8411919906082768,
                           -0.15880800939172324,
                           2.996362607918227,
                           -0.0036373920817729943,
                           40,
                           0};
    float y[7];
    nn_gelu_forward(y, x, 7);
    for (int i = 0; i < 7; i++)
        T_NEAR(y[i], want[i], 1e-6 * fmax(1, fabs(want[i])));
    /* gelu'(0) = 1/2; far out the slope is 1 on the right, 0 on the left */
    const float gx[] = {0, 40, -40, 1e30f, -1e30f};
    float one[5] = {1, 1, 1, 1, 1}, g[5];
    nn_gelu_backward(g, one, gx, 5);
    T_NEAR(g[0], 0.5, 1e-7);
    T_NEAR(g[1], 1, 1e-7);
    T_NEAR(g[2], 0, 1e-7);
    T_NEAR(g[3], 1, 1e-7); /* no 0 * inf from x^3 */
    T_NEAR(g[4], 0, 1e-7);
    /* in place: out = inp, dinp = dout */
    float a[7], da[7], ref[7], dref[7];
    memcpy(a, x, sizeof a);
    nn_gelu_forward(a, a, 7);
    T_CHECK(memcmp(a, y, sizeof a) == 0);
    for (int i = 0; i < 7; i++)
        da[i] = 0.5f + (float)i;
    memcpy(dref, da, sizeof da);
    nn_gelu_backward(ref, dref, x, 7);
    nn_gelu_backward(da, da, x, 7);
    T_CHECK(memcmp(da, ref, sizeof da) == 0);
}

static void test_gelu_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    /* an even grid over [-12, 12], then large |x| and the tails of the saturation */
    const float extra[] = {0,   -0.0f, 20,   -20,   50,   -50,   100,   -100,
                           1e3, -1e3,  1e4f, -1e4f, 1e6f, -1e6f, 3e-8f, -3e-8f};
    size_t grid = 4801, ne = sizeof extra / sizeof *extra, n = grid + ne;
    float *x = malloc(n * 4), *dy = nn_check_randn(n, 5, 0, 1), *y = malloc(n * 4),
          *dx = malloc(n * 4), *fy = malloc(n * 4), *fdx = malloc(n * 4);
    for (size_t i = 0; i < grid; i++)
        x[i] = -12.0f + 24.0f * (float)i / (float)(grid - 1);
    memcpy(x + grid, extra, sizeof extra);
    nn_gelu_forward(y, x, n);
    nn_gelu_backward(dx, dy, x, n);
    struct nn_act_fast f;
    int ok = nn_gelu_fast_init(&f, &d, n, 1, &e) == 0;
    if (!ok)
        fprintf(stderr, "    gelu fast init: %s\n", e.msg);
    if (ok) {
        nn_act_fast_forward(&f, fy, x);
        nn_act_fast_backward(&f, fdx, dy, x);
        ok = nn_dnnl_check(&d, &e) == 0 && gelu_close("gelu out", fy, y, x, NULL, n) &&
             gelu_close("gelu dinp", fdx, dx, x, dy, n);
        if (!ok)
            fprintf(stderr, "    [%s / %s]\n", nn_prim_impl(&f.fwd), nn_prim_impl(&f.bwd));
    }
    nn_act_fast_destroy(&f);
    /* an inference-only state has no backward, and the odd size 1 */
    if (ok) {
        ok = nn_gelu_fast_init(&f, &d, 1, 0, &e) == 0;
        if (ok) {
            float one;
            nn_act_fast_forward(&f, &one, x + grid / 4);
            ok = nn_dnnl_check(&d, &e) == 0 &&
                 gelu_close("gelu out (n = 1)", &one, y + grid / 4, x + grid / 4, NULL, 1);
            ok = ok && f.bwd.prim == NULL;
        }
        nn_act_fast_destroy(&f);
    }
    nn_dnnl_cleanup(&d);
    float *bufs[] = {x, dy, y, dx, fy, fdx};
    free_all(bufs, sizeof bufs / sizeof *bufs);
    T_CHECK(ok);
}

struct gelu_ctx {
    size_t n;
    float *x, *y, *r;
};

static double gelu_loss(void *p)
{
    struct gelu_ctx *k = p;
    nn_gelu_forward(k->y, k->x, k->n);
    return nn_check_dot(k->y, k->r, k->n);
}

static void test_gelu_gradcheck(void)
{
    struct gelu_ctx k = {.n = 48};
    k.x = malloc(k.n * 4), k.y = malloc(k.n * 4), k.r = nn_check_randn(k.n, 6, 0, 1);
    for (size_t i = 0; i < k.n; i++) /* [-4, 4], where the curve bends */
        k.x[i] = -4.0f + 8.0f * (float)i / (float)(k.n - 1);
    float *dx = malloc(k.n * 4);
    nn_gelu_backward(dx, k.r, k.x, k.n);
    int ok = nn_check_fd("gelu x", k.x, k.n, dx, gelu_loss, &k, 1e-2f);
    float *bufs[] = {k.x, k.y, k.r, dx};
    free_all(bufs, sizeof bufs / sizeof *bufs);
    T_CHECK(ok);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_embed_forward);
    TEST_RUN(test_embed_backward_duplicates);
    TEST_RUN(test_embed_check);
    TEST_RUN(test_embed_gradcheck);
    TEST_RUN(test_layernorm_hand);
    TEST_RUN(test_layernorm_fast_matches_ref);
    TEST_RUN(test_layernorm_destroy_zeroed);
    TEST_RUN(test_layernorm_gradcheck);
    TEST_RUN(test_gelu_values);
    TEST_RUN(test_gelu_fast_matches_ref);
    TEST_RUN(test_gelu_gradcheck);
    return test_end();
}
