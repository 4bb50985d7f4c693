/* Unit tests for worker/nn/attention.c, GPT-2's causal multi-head self-attention: the
 * reference against hand-computed values and a naive transcription of the formula, its
 * causality, a finite-difference check of its backward, the oneDNN fast path against it,
 * and that both backwards overwrite dqkv.
 *
 * Tolerances, fast vs reference: as in test_nn_layers.c, the reference accumulates in
 * double and oneDNN in float, so a sum of K terms differs by at most about K * 2^-24 of
 * their magnitude; K is at most T or hs (64 here), so 1e-4 of the tensor's largest
 * magnitude bounds every honest difference while an indexing bug (a wrong head, a wrong
 * stride, a missed mask) moves results by O(1).
 *
 * Finite differences: L = sum(out * R) for a fixed random R, so dL/dqkv is the backward of
 * dout = R. Attention is smooth (products and a softmax), so central differences of step
 * h = 1e-2 have truncation error O(h^2) ~ 1e-4 and float rounding of L over its 80 terms
 * divided by 2h stays below 1e-4; tolerance 5e-3 absolute plus 5e-3 relative to the
 * larger derivative, every element of qkv checked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/nn_check.h"
#include "tests/unit/test.h"
#include "worker/nn/layers.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

/* ---- helpers ---------------------------------------------------------------------- */

static float *rnd(size_t n, uint64_t seed, float std)
{
    return nn_check_randn(n, seed, 0, std);
}

/* The formula as written in layers.h, one output element at a time, nothing shared:
 * out[b,t,h*hs+i] = sum_{s<=t} softmax_s(q_t . k_s / sqrt(hs)) v[b,s,h*hs+i]. */
static double naive_out(const float *qkv, int C, int H, int T, int b, int t, int ch)
{
    int hs = C / H, h = ch / hs;
    const float *x = qkv + (size_t)b * T * 3 * C;
    double w[64], mx = -INFINITY, sum = 0, o = 0;
    for (int s = 0; s <= t; s++) {
        w[s] = 0;
        for (int i = 0; i < hs; i++)
            w[s] += (double)x[t * 3 * C + h * hs + i] * x[s * 3 * C + C + h * hs + i];
        w[s] /= sqrt(hs);
        mx = fmax(mx, w[s]);
    }
    for (int s = 0; s <= t; s++)
        sum += exp(w[s] - mx);
    for (int s = 0; s <= t; s++)
        o += exp(w[s] - mx) / sum * x[s * 3 * C + 2 * C + ch];
    return o;
}

/* ---- reference -------------------------------------------------------------------- */

/* Hand-computed: H=2, C=2 (hs = 1, scale 1), T=2. Head 0 at t=1 sees pre = (q.k0, q.k1) =
 * (0, ln 3), so att = (1/4, 3/4); t=0 sees only itself, att = 1, out = v. */
static void test_ref_hand(void)
{
    const float l3 = (float)log(3.0);
    /* rows (t): q0 q1 | k0 k1 | v0 v1 */
    const float qkv[] = {
        0.5f, 2.0f, 0.0f, 1.0f, 10.0f, -4.0f, /* t = 0 */
        1.0f, 0.0f, l3,   7.0f, 2.0f,  8.0f,  /* t = 1: head 1 has q = 0, so pre = (0, 0) */
    };
    float out[4], att[8];
    struct nn_attention_cfg c = {.c = 2, .heads = 2};
    nn_attention_forward(out, att, qkv, &c, 1, 2);
    /* att (1,2,2,2): head 0 rows (1,0), (1/4,3/4); head 1 rows (1,0), (1/2,1/2) */
    const float want_att[] = {1, 0, 0.25f, 0.75f, 1, 0, 0.5f, 0.5f};
    for (int i = 0; i < 8; i++)
        T_NEAR(att[i], want_att[i], 1e-6);
    T_NEAR(out[0], 10.0, 1e-5);                     /* t=0 head 0: v0 of row 0 */
    T_NEAR(out[1], -4.0, 1e-5);                     /* t=0 head 1: v1 of row 0 */
    T_NEAR(out[2], 0.25 * 10.0 + 0.75 * 2.0, 1e-5); /* t=1 head 0 */
    T_NEAR(out[3], 0.5 * -4.0 + 0.5 * 8.0, 1e-5);   /* t=1 head 1 */

    /* T = 1: att = 1 and out = v, whatever q and k */
    float *x = rnd(3 * 12 * 3, 5, 3), o1[3 * 12], a1[3 * 4];
    struct nn_attention_cfg c1 = {.c = 12, .heads = 4};
    nn_attention_forward(o1, a1, x, &c1, 3, 1);
    int ok = 1;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 12; i++)
            ok &= o1[b * 12 + i] == x[b * 36 + 24 + i];
    for (int i = 0; i < 12; i++)
        ok &= a1[i] == 1.0f;
    free(x);
    T_CHECK(ok);
}

static void test_ref_naive(void)
{
    const int N = 2, T = 7, C = 12, H = 3;
    struct nn_attention_cfg c = {.c = C, .heads = H};
    float *qkv = rnd((size_t)N * T * 3 * C, 11, 1.5f),
          *out = nn_check_filled((size_t)N * T * C, NAN),
          *att = nn_check_filled((size_t)N * H * T * T, NAN);
    nn_attention_forward(out, att, qkv, &c, N, T);
    int ok = 1;
    for (int b = 0; b < N && ok; b++)
        for (int t = 0; t < T && ok; t++)
            for (int ch = 0; ch < C && ok; ch++) {
                double want = naive_out(qkv, C, H, T, b, t, ch);
                float got = out[((size_t)b * T + t) * C + ch];
                if (!(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)))) {
                    fprintf(stderr, "    out[%d,%d,%d] = %.9g, naive %.9g\n", b, t, ch, got,
                            want);
                    ok = 0;
                }
            }
    /* att rows: sum to 1 over s <= t, exactly 0 beyond */
    for (int r = 0; r < N * H * T && ok; r++) {
        int t = r % T;
        double sum = 0;
        for (int s = 0; s < T; s++) {
            float a = att[(size_t)r * T + s];
            if (s > t)
                ok &= a == 0.0f;
            else
                sum += a, ok &= a > 0;
        }
        ok &= fabs(sum - 1) < 1e-6;
    }
    free(qkv);
    free(out);
    free(att);
    T_CHECK(ok);
}

/* Changing q, k and v of tokens after t leaves out and att at t (and before) unchanged. */
static void test_ref_causal(void)
{
    const int N = 2, T = 6, C = 8, H = 2, cut = 3;
    struct nn_attention_cfg c = {.c = C, .heads = H};
    size_t nx = (size_t)N * T * 3 * C, no = (size_t)N * T * C, na = (size_t)N * H * T * T;
    float *qkv = rnd(nx, 21, 1), *o1 = malloc(no * 4), *o2 = malloc(no * 4),
          *a1 = malloc(na * 4), *a2 = malloc(na * 4);
    nn_attention_forward(o1, a1, qkv, &c, N, T);
    for (int b = 0; b < N; b++)
        for (size_t i = (size_t)cut * 3 * C; i < (size_t)T * 3 * C; i++)
            qkv[(size_t)b * T * 3 * C + i] += 5.0f;
    nn_attention_forward(o2, a2, qkv, &c, N, T);
    int same = 1, moved = 0;
    for (int b = 0; b < N; b++)
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++) {
                size_t i = ((size_t)b * T + t) * C + ch;
                if (t < cut)
                    same &= o1[i] == o2[i];
                else
                    moved |= o1[i] != o2[i];
            }
    for (int r = 0; r < N * H * T; r++)
        if (r % T < cut)
            same &= memcmp(a1 + (size_t)r * T, a2 + (size_t)r * T, (size_t)T * 4) == 0;
    free(qkv);
    free(o1);
    free(o2);
    free(a1);
    free(a2);
    T_CHECK(same);
    T_CHECK(moved); /* the change did reach the later tokens */
}

struct attn_ctx {
    struct nn_attention_cfg c;
    int n, t;
    float *qkv, *r, *out, *att;
};

static double attn_loss(struct attn_ctx *k)
{
    nn_attention_forward(k->out, k->att, k->qkv, &k->c, k->n, k->t);
    return nn_check_dot(k->out, k->r, (size_t)k->n * k->t * k->c.c);
}

static void test_ref_gradcheck(void)
{
    struct attn_ctx k = {.c = {.c = 8, .heads = 2}, .n = 2, .t = 5};
    size_t nx = (size_t)k.n * k.t * 3 * k.c.c, no = (size_t)k.n * k.t * k.c.c,
           na = (size_t)k.n * k.c.heads * k.t * k.t;
    k.qkv = rnd(nx, 31, 1), k.r = rnd(no, 32, 1);
    k.out = malloc(no * 4), k.att = malloc(na * 4);
    float *dqkv = nn_check_filled(nx, NAN), *datt = nn_check_filled(na, NAN);
    attn_loss(&k);
    nn_attention_backward(dqkv, datt, k.r, k.qkv, k.att, &k.c, k.n, k.t);
    const float h = 1e-2f;
    int ok = 1, nonzero = 0;
    for (size_t i = 0; i < nx && ok; i++) {
        float save = k.qkv[i], up = save + h, down = save - h;
        k.qkv[i] = up;
        double lp = attn_loss(&k);
        k.qkv[i] = down;
        double lm = attn_loss(&k);
        k.qkv[i] = save;
        double num = (lp - lm) / ((double)up - down);
        double tol = 5e-3 + 5e-3 * fmax(fabs(num), fabs(dqkv[i]));
        nonzero += fabs(num) > 1e-3;
        if (!(fabs(num - dqkv[i]) <= tol)) {
            fprintf(stderr, "    dqkv[%zu]: numeric %.7g, analytic %.7g\n", i, num, dqkv[i]);
            ok = 0;
        }
    }
    free(k.qkv);
    free(k.r);
    free(k.out);
    free(k.att);
    free(dqkv);
    free(datt);
    T_CHECK(ok);
    T_CHECK_MSG(nonzero > (int)nx / 2, "%d of %zu derivatives non-zero", nonzero, nx);
}

/* ---- fast path -------------------------------------------------------------------- */

struct shape {
    int n, t, c, heads;
};

static const struct shape fast_shapes[] = {
    {2, 5, 8, 2},
    {3, 17, 48, 4},
    {1, 64, 64, 1},
};

/* Fast forward and backward against the reference on random inputs; both backwards start
 * from a dqkv full of NaN, so any read-before-write (accumulating) shows. Each step runs
 * twice, the second time on other buffers, so re-binding is exercised. */
static int fast_vs_ref(struct nn_dnnl *d, const struct shape *sh, uint64_t seed, struct err *e)
{
    const int N = sh->n, T = sh->t, C = sh->c, H = sh->heads;
    struct nn_attention_cfg c = {.c = C, .heads = H};
    size_t nx = (size_t)N * T * 3 * C, no = (size_t)N * T * C, na = (size_t)N * H * T * T;
    float *qkv = rnd(nx, seed, 1), *dout = rnd(no, seed + 1, 1);
    float *out = malloc(no * 4), *att = malloc(na * 4), *datt = nn_check_filled(na, NAN),
          *dqkv = nn_check_filled(nx, NAN);
    float *fout = nn_check_filled(no, NAN), *fdqkv = nn_check_filled(nx, NAN);
    float *qkv2 = malloc(nx * 4), *dout2 = malloc(no * 4), *fout2 = nn_check_filled(no, NAN),
          *fdqkv2 = nn_check_filled(nx, NAN);
    memcpy(qkv2, qkv, nx * 4);
    memcpy(dout2, dout, no * 4);
    nn_attention_forward(out, att, qkv, &c, N, T);
    nn_attention_backward(dqkv, datt, dout, qkv, att, &c, N, T);

    struct nn_attention_fast f;
    int ok = nn_attention_fast_init(&f, d, &c, N, T, 1, e) == 0;
    if (!ok)
        fprintf(stderr, "    init: %s\n", e->msg);
    if (ok) {
        struct nn_prim *ps[] = {&f.qk, &f.av, &f.d_att, &f.d_v, &f.d_q, &f.d_k};
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
            if (nn_prim_is_ref(ps[i])) {
                fprintf(stderr, "    %s: oneDNN fell back to %s\n", ps[i]->what,
                        nn_prim_impl(ps[i]));
                ok = 0;
            }
    }
    if (ok) {
        nn_attention_fast_forward(&f, fout, qkv);
        ok = nn_check_close_rel("fast att", f.att, att, na, 1e-4) &&
             nn_check_close_rel("fast out", fout, out, no, 1e-4);
        nn_attention_fast_backward(&f, fdqkv, dout, qkv);
        ok = ok && nn_dnnl_check(d, e) == 0 &&
             nn_check_close_rel("fast dqkv", fdqkv, dqkv, nx, 1e-4);
        nn_attention_fast_forward(&f, fout2, qkv2);
        nn_attention_fast_backward(&f, fdqkv2, dout2, qkv2);
        ok = ok && nn_dnnl_check(d, e) == 0 &&
             nn_check_close_rel("fast out (again)", fout2, out, no, 1e-4) &&
             nn_check_close_rel("fast dqkv (again)", fdqkv2, dqkv, nx, 1e-4);
    }
    if (!ok)
        fprintf(stderr, "    at N=%d T=%d C=%d H=%d\n", N, T, C, H);
    nn_attention_fast_destroy(&f);
    float *bufs[] = {qkv, dout, out, att, datt, dqkv, fout, fdqkv, qkv2, dout2, fout2, fdqkv2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return ok;
}

static void test_fast_matches_ref(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    int ok = 1;
    for (size_t i = 0; i < sizeof fast_shapes / sizeof *fast_shapes; i++)
        ok &= fast_vs_ref(&d, &fast_shapes[i], 100 + 10 * i, &e);
    nn_dnnl_cleanup(&d);
    T_CHECK(ok);
}

/* Inference (train = 0): no backward state, the same forward. */
static void test_fast_inference(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    const int N = 2, T = 9, C = 16, H = 4;
    struct nn_attention_cfg c = {.c = C, .heads = H};
    size_t nx = (size_t)N * T * 3 * C, no = (size_t)N * T * C, na = (size_t)N * H * T * T;
    float *qkv = rnd(nx, 7, 1), *out = malloc(no * 4), *att = malloc(na * 4),
          *fout = nn_check_filled(no, NAN);
    nn_attention_forward(out, att, qkv, &c, N, T);
    struct nn_attention_fast f;
    int ok = nn_attention_fast_init(&f, &d, &c, N, T, 0, &e) == 0;
    if (ok) {
        ok = f.datt == NULL && f.d_q.prim == NULL;
        nn_attention_fast_forward(&f, fout, qkv);
        ok = ok && nn_dnnl_check(&d, &e) == 0 &&
             nn_check_close_rel("inference out", fout, out, no, 1e-4);
    }
    nn_attention_fast_destroy(&f);
    nn_dnnl_cleanup(&d);
    free(qkv);
    free(out);
    free(att);
    free(fout);
    T_CHECK(ok);
}

/* Both backwards overwrite dqkv and datt: garbage in them before changes nothing. */
static void test_backward_overwrites(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    const int N = 2, T = 6, C = 12, H = 3;
    struct nn_attention_cfg c = {.c = C, .heads = H};
    size_t nx = (size_t)N * T * 3 * C, no = (size_t)N * T * C, na = (size_t)N * H * T * T;
    float *qkv = rnd(nx, 41, 1), *dout = rnd(no, 42, 1), *out = malloc(no * 4),
          *att = malloc(na * 4);
    float *clean = nn_check_filled(nx, 0), *dirty = nn_check_filled(nx, 1234.5f),
          *datt0 = nn_check_filled(na, 0), *datt1 = nn_check_filled(na, -777.0f),
          *fclean = nn_check_filled(nx, 0), *fdirty = nn_check_filled(nx, 1234.5f),
          *fout = malloc(no * 4);
    nn_attention_forward(out, att, qkv, &c, N, T);
    nn_attention_backward(clean, datt0, dout, qkv, att, &c, N, T);
    nn_attention_backward(dirty, datt1, dout, qkv, att, &c, N, T);
    int ok = memcmp(clean, dirty, nx * 4) == 0;
    if (!ok)
        fprintf(stderr, "    reference backward depends on dqkv's previous contents\n");
    struct nn_attention_fast f;
    int fok = nn_attention_fast_init(&f, &d, &c, N, T, 1, &e) == 0;
    if (fok) {
        nn_attention_fast_forward(&f, fout, qkv);
        nn_attention_fast_backward(&f, fclean, dout, qkv);
        for (size_t i = 0; i < na; i++)
            f.datt[i] = -777.0f; /* the fast state's scratch too */
        nn_attention_fast_backward(&f, fdirty, dout, qkv);
        fok = nn_dnnl_check(&d, &e) == 0 && memcmp(fclean, fdirty, nx * 4) == 0;
        if (!fok)
            fprintf(stderr, "    fast backward depends on dqkv's previous contents\n");
    }
    nn_attention_fast_destroy(&f);
    nn_dnnl_cleanup(&d);
    float *bufs[] = {qkv, dout, out, att, clean, dirty, datt0, datt1, fclean, fdirty, fout};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    T_CHECK(ok);
    T_CHECK(fok);
}

/* A bad config is refused, and destroy takes the zeroed or failed state. */
static void test_fast_init_errors(void)
{
    struct nn_dnnl d;
    struct err e;
    T_OK(nn_dnnl_init(&d, &e));
    struct nn_attention_fast f;
    memset(&f, 0, sizeof f);
    nn_attention_fast_destroy(&f);
    struct nn_attention_cfg c = {.c = 10, .heads = 4};
    int rc = nn_attention_fast_init(&f, &d, &c, 2, 3, 1, &e);
    nn_attention_fast_destroy(&f);
    nn_dnnl_cleanup(&d);
    T_CHECK(rc != 0);
    T_EQ_INT(e.code, ERR_INVALID);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_ref_hand);
    TEST_RUN(test_ref_naive);
    TEST_RUN(test_ref_causal);
    TEST_RUN(test_ref_gradcheck);
    TEST_RUN(test_fast_matches_ref);
    TEST_RUN(test_fast_inference);
    TEST_RUN(test_backward_overwrites);
    TEST_RUN(test_fast_init_errors);
    return test_end();
}
