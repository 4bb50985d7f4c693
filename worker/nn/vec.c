/* vec: AVX2 elementwise kernels beside their plain-C references (see vec.h). Key decision:
 * the AVX2 bodies spell out the reference's operations with separate multiplies and adds
 * (no FMA contraction), so both paths give the same bits; the gain is 8 lanes instead of
 * the baseline build's 4 (SSE2) and fewer instructions per element, not new arithmetic. */
#include "worker/nn/vec.h"

#include <immintrin.h>
#include <omp.h>

/* This thread's part of [0, n) inside a parallel region: whole 8-float vectors except the
 * last part, so no vector straddles two threads. */
static void vec_split(size_t n, size_t *lo, size_t *hi)
{
    size_t t = (size_t)omp_get_num_threads(), i = (size_t)omp_get_thread_num();
    size_t per = (n / t + 7) & ~(size_t)7;
    *lo = per * i < n ? per * i : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* Below this many floats one thread does it all (a team costs more than the work). */
enum { VEC_PARALLEL_MIN = 1 << 15 };

static int vec_use_avx2(enum nn_isa isa)
{
    return isa >= NN_ISA_AVX2 && nn_isa_cpu() >= NN_ISA_AVX2;
}

/* ---- dst += src ---------------------------------------------------------------------- */

static void vec_add_ref(float *dst, const float *src, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

__attribute__((target("avx2,fma"))) static void vec_add_avx2(float *dst, const float *src,
                                                             size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
    for (; i < n; i++)
        dst[i] += src[i];
}

void nn_vec_add_at(enum nn_isa isa, float *dst, const float *src, size_t n)
{
    int avx2 = vec_use_avx2(isa);
#pragma omp parallel if (n >= VEC_PARALLEL_MIN)
    {
        size_t lo, hi;
        vec_split(n, &lo, &hi);
        if (avx2)
            vec_add_avx2(dst + lo, src + lo, hi - lo);
        else
            vec_add_ref(dst + lo, src + lo, hi - lo);
    }
}

void nn_vec_add(float *dst, const float *src, size_t n)
{
    nn_vec_add_at(nn_isa_get(), dst, src, n);
}

/* ---- SGD with momentum --------------------------------------------------------------- */

static void vec_sgd_ref(const struct nn_vec_sgd *s, float *p, const float *g, float *buf,
                        size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + s->wd * p[i];
        float b = s->first ? d : buf[i] * s->mom + s->damp * d;
        buf[i] = b;
        d = s->nesterov ? d + s->mom * b : b;
        p[i] = p[i] - s->lr * d;
    }
}

__attribute__((target("avx2,fma"))) static void
vec_sgd_avx2(const struct nn_vec_sgd *s, float *p, const float *g, float *buf, size_t n)
{
    __m256 wd = _mm256_set1_ps(s->wd), mom = _mm256_set1_ps(s->mom);
    __m256 damp = _mm256_set1_ps(s->damp), lr = _mm256_set1_ps(s->lr);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 d = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(wd, pi));
        __m256 b = s->first ? d
                            : _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(buf + i), mom),
                                            _mm256_mul_ps(damp, d));
        _mm256_storeu_ps(buf + i, b);
        d = s->nesterov ? _mm256_add_ps(d, _mm256_mul_ps(mom, b)) : b;
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(lr, d)));
    }
    vec_sgd_ref(s, p + i, g + i, buf + i, n - i);
}

void nn_vec_sgd_momentum_at(enum nn_isa isa, const struct nn_vec_sgd *s, float *p,
                            const float *g, float *buf, size_t n)
{
    int avx2 = vec_use_avx2(isa);
#pragma omp parallel if (n >= VEC_PARALLEL_MIN)
    {
        size_t lo, hi;
        vec_split(n, &lo, &hi);
        if (avx2)
            vec_sgd_avx2(s, p + lo, g + lo, buf + lo, hi - lo);
        else
            vec_sgd_ref(s, p + lo, g + lo, buf + lo, hi - lo);
    }
}

void nn_vec_sgd_momentum(const struct nn_vec_sgd *s, float *p, const float *g, float *buf,
                         size_t n)
{
    nn_vec_sgd_momentum_at(nn_isa_get(), s, p, g, buf, n);
}
