/* winograd: ddpbench's own Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution; the decisions
 * are in winograd.h. Layout of a run (F(4,3); F(2,3) the same with 4x4 tiles, 16 elements):
 * the tiles split into chunks, one thread per chunk; for each, gather each 6x6 input tile of
 * 8 channels, transform it into V (36 x chunk x cinp), 36 products M = V . U (36 x chunk x
 * coutp), transform each 8-channel block of M back into a 4x4 output tile and scatter it. */
#include "worker/nn/winograd.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WINO_X86 1
#endif

/* Lavin & Gray's F(4x4, 3x3) matrices: B^T (input), G (kernel), A^T (output). */
static const float wino_bt[6][6] = {
    {4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
    {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1},
};
static const float wino_g[6][3] = {
    {1.0f / 4, 0, 0},
    {-1.0f / 6, -1.0f / 6, -1.0f / 6},
    {-1.0f / 6, 1.0f / 6, -1.0f / 6},
    {1.0f / 24, 1.0f / 12, 1.0f / 6},
    {1.0f / 24, -1.0f / 12, 1.0f / 6},
    {0, 0, 1},
};
static const float wino_at[4][6] = {
    {1, 1, 1, 1, 1, 0},
    {0, 1, -1, 2, -2, 0},
    {0, 1, 1, 4, 4, 0},
    {0, 1, -1, 8, -8, 1},
};
/* Winograd's F(2x2, 3x3): entries 0, +-1 and 1/2, all exact in binary. */
static const float wino2_bt[4][4] = {
    {1, 0, -1, 0},
    {0, 1, 1, 0},
    {0, -1, 1, 0},
    {0, 1, 0, -1},
};
static const float wino2_g[4][3] = {
    {1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
static const float wino2_at[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

/* ---- the transforms: plain-C references ------------------------------------------- */

/* B^T d B of an a x a tile (bt: a x a, row-major), 8 channels; the references of both. */
static void wino_input_gen(float *out, size_t stride, const float *in, const float *bt, int a)
{
    enum { B = NN_WINO_BLK };
    for (int l = 0; l < B; l++) {
        float t[NN_WINO_A][NN_WINO_A]; /* B^T d */
        for (int i = 0; i < a; i++)
            for (int j = 0; j < a; j++) {
                float s = 0;
                for (int k = 0; k < a; k++)
                    s += bt[i * a + k] * in[(k * a + j) * B + l];
                t[i][j] = s;
            }
        for (int i = 0; i < a; i++) /* (B^T d) B */
            for (int j = 0; j < a; j++) {
                float s = 0;
                for (int k = 0; k < a; k++)
                    s += t[i][k] * bt[j * a + k];
                out[(size_t)(i * a + j) * stride + l] = s;
            }
    }
}

/* A^T m A of an a x a tile (at: m x a, row-major) into an m x m tile, 8 channels. */
static void wino_output_gen(float *out, const float *in, size_t stride, const float *at, int m,
                            int a)
{
    enum { B = NN_WINO_BLK };
    for (int l = 0; l < B; l++) {
        float t[NN_WINO_M][NN_WINO_A]; /* A^T m */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < a; j++) {
                float s = 0;
                for (int k = 0; k < a; k++)
                    s += at[i * a + k] * in[(size_t)(k * a + j) * stride + l];
                t[i][j] = s;
            }
        for (int i = 0; i < m; i++) /* (A^T m) A */
            for (int j = 0; j < m; j++) {
                float s = 0;
                for (int k = 0; k < a; k++)
                    s += t[i][k] * at[j * a + k];
                out[(i * m + j) * B + l] = s;
            }
    }
}

void nn_wino_input_ref(float *out, size_t stride, const float *in)
{
    wino_input_gen(out, stride, in, &wino_bt[0][0], NN_WINO_A);
}

void nn_wino_output_ref(float *out, const float *in, size_t stride)
{
    wino_output_gen(out, in, stride, &wino_at[0][0], NN_WINO_M, NN_WINO_A);
}

void nn_wino2_input_ref(float *out, size_t stride, const float *in)
{
    wino_input_gen(out, stride, in, &wino2_bt[0][0], NN_WINO2_A);
}

void nn_wino2_output_ref(float *out, const float *in, size_t stride)
{
    wino_output_gen(out, in, stride, &wino2_at[0][0], NN_WINO2_M, NN_WINO2_A);
}

/* G g G^T of one 3x3 kernel g (flip: rotated by 180 degrees first) into out[e * stride];
 * G is a x 3 (F(4,3)'s or F(2,3)'s). */
static void wino_kernel(float *out, size_t stride, const float *g, int flip, const float *gm,
                        int a)
{
    float k[3][3], t[NN_WINO_A][3];
    for (int i = 0; i < 9; i++)
        k[i / 3][i % 3] = flip ? g[8 - i] : g[i];
    for (int i = 0; i < a; i++)
        for (int j = 0; j < 3; j++)
            t[i][j] = gm[i * 3] * k[0][j] + gm[i * 3 + 1] * k[1][j] + gm[i * 3 + 2] * k[2][j];
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
            out[(size_t)(i * a + j) * stride] = t[i][0] * gm[j * 3] + t[i][1] * gm[j * 3 + 1] +
                                                t[i][2] * gm[j * 3 + 2];
}

/* ---- the transforms: AVX2/FMA ----------------------------------------------------- */

#ifdef WINO_X86
#define WINO_AVX2 __attribute__((target("avx2,fma")))

/* r = B^T x for one column of six 8-channel vectors (wino_bt, written out) */
WINO_AVX2 static inline void wino_bt8(__m256 r[6], const __m256 x[6])
{
    __m256 four = _mm256_set1_ps(4), five = _mm256_set1_ps(-5), two = _mm256_set1_ps(2);
    r[0] = _mm256_fmadd_ps(four, x[0], _mm256_fmadd_ps(five, x[2], x[4]));
    r[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(x[1], x[2]), _mm256_add_ps(x[3], x[4]));
    r[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(x[1], x[2]), _mm256_sub_ps(x[4], x[3]));
    r[3] = _mm256_fmadd_ps(two, _mm256_sub_ps(x[3], x[1]), _mm256_sub_ps(x[4], x[2]));
    r[4] = _mm256_fmadd_ps(two, _mm256_sub_ps(x[1], x[3]), _mm256_sub_ps(x[4], x[2]));
    r[5] = _mm256_fmadd_ps(four, x[1], _mm256_fmadd_ps(five, x[3], x[5]));
}

/* r = A^T x (wino_at, written out) */
WINO_AVX2 static inline void wino_at8(__m256 r[4], const __m256 x[6])
{
    __m256 p12 = _mm256_add_ps(x[1], x[2]), m12 = _mm256_sub_ps(x[1], x[2]);
    __m256 p34 = _mm256_add_ps(x[3], x[4]), m34 = _mm256_sub_ps(x[3], x[4]);
    r[0] = _mm256_add_ps(_mm256_add_ps(x[0], p12), p34);
    r[1] = _mm256_fmadd_ps(_mm256_set1_ps(2), m34, m12);
    r[2] = _mm256_fmadd_ps(_mm256_set1_ps(4), p34, p12);
    r[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8), m34, m12), x[5]);
}

WINO_AVX2 void nn_wino_input_avx2(float *out, size_t stride, const float *in)
{
    __m256 t[6][6], col[6], r[6];
    for (int j = 0; j < 6; j++) { /* rows: t = B^T d, one column j at a time */
        for (int k = 0; k < 6; k++)
            col[k] = _mm256_loadu_ps(in + (k * 6 + j) * NN_WINO_BLK);
        wino_bt8(r, col);
        for (int i = 0; i < 6; i++)
            t[i][j] = r[i];
    }
    for (int i = 0; i < 6; i++) { /* columns: (B^T d) B, row i */
        wino_bt8(r, t[i]);
        for (int j = 0; j < 6; j++)
            _mm256_storeu_ps(out + (size_t)(i * 6 + j) * stride, r[j]);
    }
}

WINO_AVX2 void nn_wino_output_avx2(float *out, const float *in, size_t stride)
{
    __m256 t[4][6], col[6], r[4];
    for (int j = 0; j < 6; j++) {
        for (int k = 0; k < 6; k++)
            col[k] = _mm256_loadu_ps(in + (size_t)(k * 6 + j) * stride);
        wino_at8(r, col);
        for (int i = 0; i < 4; i++)
            t[i][j] = r[i];
    }
    for (int i = 0; i < 4; i++) {
        wino_at8(r, t[i]);
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(out + (i * 4 + j) * NN_WINO_BLK, r[j]);
    }
}

/* r = B^T x for F(2,3) (wino2_bt, written out) */
WINO_AVX2 static inline void wino2_bt8(__m256 r[4], const __m256 x[4])
{
    r[0] = _mm256_sub_ps(x[0], x[2]);
    r[1] = _mm256_add_ps(x[1], x[2]);
    r[2] = _mm256_sub_ps(x[2], x[1]);
    r[3] = _mm256_sub_ps(x[1], x[3]);
}

WINO_AVX2 void nn_wino2_input_avx2(float *out, size_t stride, const float *in)
{
    __m256 t[4][4], col[4], r[4];
    for (int j = 0; j < 4; j++) {
        for (int k = 0; k < 4; k++)
            col[k] = _mm256_loadu_ps(in + (k * 4 + j) * NN_WINO_BLK);
        wino2_bt8(r, col);
        for (int i = 0; i < 4; i++)
            t[i][j] = r[i];
    }
    for (int i = 0; i < 4; i++) {
        wino2_bt8(r, t[i]);
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(out + (size_t)(i * 4 + j) * stride, r[j]);
    }
}

WINO_AVX2 void nn_wino2_output_avx2(float *out, const float *in, size_t stride)
{
    __m256 t[2][4];
    for (int j = 0; j < 4; j++) { /* A^T m: r0 = x0 + x1 + x2, r1 = x1 - x2 - x3 */
        __m256 x0 = _mm256_loadu_ps(in + (size_t)j * stride);
        __m256 x1 = _mm256_loadu_ps(in + (size_t)(4 + j) * stride);
        __m256 x2 = _mm256_loadu_ps(in + (size_t)(8 + j) * stride);
        __m256 x3 = _mm256_loadu_ps(in + (size_t)(12 + j) * stride);
        t[0][j] = _mm256_add_ps(_mm256_add_ps(x0, x1), x2);
        t[1][j] = _mm256_sub_ps(_mm256_sub_ps(x1, x2), x3);
    }
    for (int i = 0; i < 2; i++) {
        __m256 *x = t[i];
        _mm256_storeu_ps(out + (i * 2) * NN_WINO_BLK,
                         _mm256_add_ps(_mm256_add_ps(x[0], x[1]), x[2]));
        _mm256_storeu_ps(out + (i * 2 + 1) * NN_WINO_BLK,
                         _mm256_sub_ps(_mm256_sub_ps(x[1], x[2]), x[3]));
    }
}
#else
void nn_wino2_input_avx2(float *out, size_t stride, const float *in)
{
    nn_wino2_input_ref(out, stride, in);
}

void nn_wino2_output_avx2(float *out, const float *in, size_t stride)
{
    nn_wino2_output_ref(out, in, stride);
}

void nn_wino_input_avx2(float *out, size_t stride, const float *in)
{
    nn_wino_input_ref(out, stride, in);
}

void nn_wino_output_avx2(float *out, const float *in, size_t stride)
{
    nn_wino_output_ref(out, in, stride);
}
#endif

/* ---- tiles in and out of the tensors ---------------------------------------------- */

/* The a x a tile of channels [cb*8, cb*8+8) at (y0, x0) of image n, zero outside the image
 * and past the last channel. */
static void wino_gather(float *tile, const struct nn_wino *w, const float *src, int n, int cb,
                        int y0, int x0)
{
    enum { B = NN_WINO_BLK };
    const struct nn_layout *l = &w->src;
    int c0 = cb * B, nc = w->cin - c0 < B ? w->cin - c0 : B;
    memset(tile, 0, sizeof(float) * (size_t)w->ne * B);
    for (int i = 0; i < w->a; i++) {
        int y = y0 + i;
        if (y < 0 || y >= w->h)
            continue;
        for (int j = 0; j < w->a; j++) {
            int x = x0 + j;
            if (x < 0 || x >= w->w)
                continue;
            float *t = tile + (i * w->a + j) * B;
            if (l->blk == B) {
                memcpy(t, src + nn_layout_off(l, n, c0, y, x), sizeof(float) * (size_t)nc);
                continue;
            }
            for (int c = 0; c < nc; c++)
                t[c] = src[nn_layout_off(l, n, c0 + c, y, x)];
        }
    }
}

/* The m x m output tile of channels [cb*8, ...) at (y0, x0), plus bias, clipped to the
 * output. In an 8-blocked layout the padding channels are written too (their products
 * are zero: u's padding is). */
static void wino_scatter(float *dst, const struct nn_wino *w, const float *tile,
                         const float *bias, int n, int cb, int y0, int x0)
{
    enum { B = NN_WINO_BLK };
    const struct nn_layout *l = &w->dst;
    int c0 = cb * B, nc = w->cout - c0 < B ? w->cout - c0 : B;
    float b[B] = {0};
    for (int c = 0; bias && c < nc; c++)
        b[c] = bias[c0 + c];
    for (int i = 0; i < w->m && y0 + i < w->oh; i++)
        for (int j = 0; j < w->m && x0 + j < w->ow; j++) {
            const float *t = tile + (i * w->m + j) * B;
            if (l->blk == B) {
                float *o = dst + nn_layout_off(l, n, c0, y0 + i, x0 + j);
                for (int c = 0; c < B; c++)
                    o[c] = t[c] + b[c];
                continue;
            }
            for (int c = 0; c < nc; c++)
                dst[nn_layout_off(l, n, c0 + c, y0 + i, x0 + j)] = t[c] + b[c];
        }
}

/* ---- the convolution -------------------------------------------------------------- */

/* Floats of one thread's V (ne x chunk x cinp) and M (ne x chunk x coutp). */
static size_t wino_chunk_len(const struct nn_wino *w)
{
    return (size_t)w->ne * (size_t)w->chunk * (size_t)(w->cinp + w->coutp);
}

int nn_wino_init(struct nn_wino *w, struct nn_dnnl *d, int n, int cin, int cout, int h, int wd,
                 int pad, const struct nn_layout *src, const struct nn_layout *dst, int flip,
                 int m, struct err *e)
{
    memset(w, 0, sizeof *w);
    if (pad < 0 || pad > 2 || h + 2 * pad < 3 || wd + 2 * pad < 3)
        return err_set(e, ERR_INVALID, "conv2d", "winograd: padding %d on %dx%d", pad, h, wd);
    if (m != NN_WINO_M && m != NN_WINO2_M)
        return err_set(e, ERR_INVALID, "conv2d", "winograd: output tile %d (2 or 4)", m);
    *w = (struct nn_wino){.n = n,
                          .m = m,
                          .a = m + 2,
                          .ne = (m + 2) * (m + 2),
                          .cin = cin,
                          .cout = cout,
                          .h = h,
                          .w = wd,
                          .pad = pad,
                          .flip = flip,
                          .isa = nn_isa_get(),
                          .src = *src,
                          .dst = *dst};
    w->oh = h + 2 * pad - 2;
    w->ow = wd + 2 * pad - 2;
    w->th = (w->oh + m - 1) / m;
    w->tw = (w->ow + m - 1) / m;
    w->tiles = (size_t)n * (size_t)w->th * (size_t)w->tw;
    w->cinp = (cin + NN_WINO_BLK - 1) / NN_WINO_BLK * NN_WINO_BLK;
    w->coutp = (cout + NN_WINO_BLK - 1) / NN_WINO_BLK * NN_WINO_BLK;
    w->threads = nn_get_threads();
    size_t even = (w->tiles + (size_t)w->threads - 1) / (size_t)w->threads;
    w->chunk = (int)(even < NN_WINO_CHUNK ? even : NN_WINO_CHUNK);
    w->u = nn_alloc(sizeof(float) * (size_t)w->ne * (size_t)w->cinp * (size_t)w->coutp);
    if (!w->u)
        return err_set(e, ERR_NOMEM, "", "winograd weights");
    if (nn_dnnl_work_reserve(d, sizeof(float) * wino_chunk_len(w) * (size_t)w->threads, e)) {
        nn_wino_destroy(w);
        return -1;
    }
    return 0;
}

void nn_wino_weights(struct nn_wino *w, const float *weight)
{
    size_t stride = (size_t)w->cinp * (size_t)w->coutp;
    int K = w->cin, N = w->cout;
    const float *gm = w->m == NN_WINO2_M ? &wino2_g[0][0] : &wino_g[0][0];
#pragma omp parallel for schedule(static)
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) {
            /* forward: weight (N, K, 3, 3); backward data: weight (K, N, 3, 3) */
            size_t kern = w->flip ? (size_t)k * N + j : (size_t)j * K + k;
            wino_kernel(w->u + (size_t)k * w->coutp + j, stride, weight + kern * 9, w->flip, gm,
                        w->a);
        }
}

/* Tile t's image and tile row/column. */
static void wino_tile_pos(const struct nn_wino *w, size_t t, int *n, int *ty, int *tx)
{
    *tx = (int)(t % (size_t)w->tw);
    *ty = (int)(t / (size_t)w->tw % (size_t)w->th);
    *n = (int)(t / ((size_t)w->tw * (size_t)w->th));
}

typedef void (*wino_in_fn)(float *out, size_t stride, const float *in);
typedef void (*wino_out_fn)(float *out, const float *in, size_t stride);

/* Tiles [t0, t0 + nt) into v (ne x nt x cinp). */
static void wino_input(const struct nn_wino *w, float *v, const float *src, size_t t0, int nt)
{
    size_t stride = (size_t)nt * (size_t)w->cinp;
    float tile[NN_WINO_E * NN_WINO_BLK];
    int avx2 = w->isa >= NN_ISA_AVX2;
    wino_in_fn fn = w->m == NN_WINO2_M ? (avx2 ? nn_wino2_input_avx2 : nn_wino2_input_ref)
                                       : (avx2 ? nn_wino_input_avx2 : nn_wino_input_ref);
    for (int i = 0; i < nt; i++) {
        int n, ty, tx;
        wino_tile_pos(w, t0 + (size_t)i, &n, &ty, &tx);
        for (int cb = 0; cb < w->cinp / NN_WINO_BLK; cb++) {
            wino_gather(tile, w, src, n, cb, ty * w->m - w->pad, tx * w->m - w->pad);
            fn(v + (size_t)i * w->cinp + (size_t)cb * NN_WINO_BLK, stride, tile);
        }
    }
}

/* m (ne x nt x coutp) back into the output tiles [t0, t0 + nt). */
static void wino_output(const struct nn_wino *w, float *dst, const float *m, const float *bias,
                        size_t t0, int nt)
{
    size_t stride = (size_t)nt * (size_t)w->coutp;
    float tile[NN_WINO_M * NN_WINO_M * NN_WINO_BLK];
    int avx2 = w->isa >= NN_ISA_AVX2;
    wino_out_fn fn = w->m == NN_WINO2_M ? (avx2 ? nn_wino2_output_avx2 : nn_wino2_output_ref)
                                        : (avx2 ? nn_wino_output_avx2 : nn_wino_output_ref);
    for (int i = 0; i < nt; i++) {
        int n, ty, tx;
        wino_tile_pos(w, t0 + (size_t)i, &n, &ty, &tx);
        for (int cb = 0; cb < w->coutp / NN_WINO_BLK; cb++) {
            fn(tile, m + (size_t)i * w->coutp + (size_t)cb * NN_WINO_BLK, stride);
            wino_scatter(dst, w, tile, bias, n, cb, ty * w->m, tx * w->m);
        }
    }
}

/* One chunk of tiles start to end, on one thread: transform, 36 products (oneDNN's
 * sgemm, sequential inside our parallel region), transform back. V and M stay in the
 * thread's cache-sized slice of the workspace. */
static void wino_chunk(const struct nn_wino *w, float *work, float *dst, const float *src,
                       const float *bias, size_t t0, int nt)
{
    float *v = work, *m = work + (size_t)w->ne * (size_t)nt * (size_t)w->cinp;
    wino_input(w, v, src, t0, nt);
    size_t vs = (size_t)nt * w->cinp, us = (size_t)w->cinp * w->coutp,
           ms = (size_t)nt * w->coutp;
    for (int e = 0; e < w->ne; e++)
        dnnl_sgemm('N', 'N', nt, w->coutp, w->cinp, 1.0f, v + e * vs, w->cinp, w->u + e * us,
                   w->coutp, 0.0f, m + e * ms, w->coutp);
    wino_output(w, dst, m, bias, t0, nt);
}

void nn_wino_run(struct nn_wino *w, struct nn_dnnl *d, float *dst, const float *src,
                 const float *bias)
{
    long chunks = (long)((w->tiles + (size_t)w->chunk - 1) / (size_t)w->chunk);
    float *work = d->work;
#pragma omp parallel for schedule(static) num_threads(w->threads)
    for (long c = 0; c < chunks; c++) {
        size_t t0 = (size_t)c * (size_t)w->chunk;
        size_t left = w->tiles - t0;
        int nt = left < (size_t)w->chunk ? (int)left : w->chunk;
        float *mine = work + wino_chunk_len(w) * (size_t)omp_get_thread_num();
        wino_chunk(w, mine, dst, src, bias, t0, nt);
    }
}

void nn_wino_destroy(struct nn_wino *w)
{
    free(w->u);
    memset(w, 0, sizeof *w);
}
