/* bf16: see bf16.h. The AVX2 kernel is common/bf16.h's scalar rounding, lane-wise: add 0x7fff
 * plus the lowest kept bit, clear the low 16 bits; a NaN keeps its top bits with the quiet
 * bit set. Large arrays are split over the OpenMP threads (a step's activations). */
#include "worker/nn/bf16.h"

#include <stdint.h>

#include "common/bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static size_t bf16_round_avx2(float *x, size_t n)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i keep = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), keep);
        /* |u| as int32 is >= 0, so a signed compare finds the NaNs */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i q = _mm256_and_si256(_mm256_or_si256(u, quiet), keep);
        _mm256_storeu_si256((__m256i *)(void *)(x + i), _mm256_blendv_epi8(r, q, nan));
    }
    return i;
}

static bool bf16_have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static size_t bf16_round_avx2(float *x, size_t n)
{
    return 0;
}

static bool bf16_have_avx2(void)
{
    return false;
}
#endif

static void bf16_round_block(float *x, size_t n, bool avx2)
{
    size_t i = avx2 ? bf16_round_avx2(x, n) : 0;
    for (; i < n; i++)
        x[i] = bf16_to_float(bf16_from_float(x[i]));
}

void nn_bf16_round_with(float *x, size_t n, bool avx2)
{
    enum { BLOCK = 1 << 16 };
    avx2 = avx2 && bf16_have_avx2();
    long blocks = (long)((n + BLOCK - 1) / BLOCK);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (long b = 0; b < blocks; b++) {
        size_t from = (size_t)b * BLOCK, len = n - from < BLOCK ? n - from : BLOCK;
        bf16_round_block(x + from, len, avx2);
    }
}

void nn_bf16_round(float *x, size_t n)
{
    nn_bf16_round_with(x, n, true);
}
