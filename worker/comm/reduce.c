/* reduce: see reduce.h. Kernels are generated per (dtype, operator) in three shapes, so
 * every loop has restrict pointers and nothing aliased: d = op(a, b), d = op(d, b) and
 * d = op(a, d). gcc vectorizes them at -O3 (checked with -fopt-info-vec); float16 takes
 * F16C intrinsics when the CPU has them (tested against the portable conversions). */
#include "worker/comm/reduce.h"

#include <string.h>

#include "common/bf16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define REDUCE_HAVE_F16C 1
#else
#define REDUCE_HAVE_F16C 0
#endif

/* Under-aligned element types: buffers may start at any byte. */
typedef float f32u __attribute__((aligned(1)));
typedef uint16_t u16u __attribute__((aligned(1)));
typedef int32_t i32u __attribute__((aligned(1)));
typedef int64_t i64u __attribute__((aligned(1)));

/* ---- conversions ---------------------------------------------------------------- */

static inline uint32_t reduce_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float reduce_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16's rounding is common/bf16.h's, shared with the CPU engine's bf16 operands */
static inline float reduce_bf2f(uint16_t h)
{
    return bf16_to_float(h);
}

static inline uint16_t reduce_f2bf(float f)
{
    return bf16_from_float(f);
}

float reduce_bf16_to_float(uint16_t h)
{
    return reduce_bf2f(h);
}
uint16_t reduce_float_to_bf16(float f)
{
    return reduce_f2bf(f);
}

float reduce_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return reduce_bits_f32(sign | 0x7f800000u | (mant << 13));
    return reduce_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Rounds m >> s to nearest-even (s >= 1). */
static uint32_t reduce_shift_rne(uint32_t m, unsigned s)
{
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

uint16_t reduce_float_to_half(float f)
{
    uint32_t x = reduce_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 rounds past 65504: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) { /* normal half: rebias, round the 13 dropped bits */
        uint32_t h = ((x >> 23) - 112u) << 10 | ((x >> 13) & 0x3ffu);
        return (uint16_t)(sign | reduce_shift_rne(h << 13 | (x & 0x1fffu), 13));
    }
    if (x <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 itself ties to even 0) */
        return sign;
    /* subnormal half: the value in units of 2^-24 */
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | reduce_shift_rne(m, 126u - (x >> 23)));
}

static inline float reduce_h2f(uint16_t h)
{
    return reduce_half_to_float(h);
}
static inline uint16_t reduce_f2h(float f)
{
    return reduce_float_to_half(f);
}

/* ---- operators ---------------------------------------------------------------------- */

#define REDUCE_SUM(x, y) ((x) + (y))
#define REDUCE_MIN(x, y) ((x) < (y) ? (x) : (y))
#define REDUCE_MAX(x, y) ((x) > (y) ? (x) : (y))
#define REDUCE_ISUM32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define REDUCE_ISUM64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))

/* AVX2 versions next to the baseline ones, picked once at load time (ifunc): the loops
 * are the same, only the vector width differs. Not under ThreadSanitizer: gcc instruments
 * the ifunc resolver, which the loader runs before TSan's runtime is up (a crash at start). */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define REDUCE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef REDUCE_CLONES
#define REDUCE_CLONES
#endif

/* Element types computed natively: one expression per element. */
#define REDUCE_NATIVE(name, T, OP)                                                             \
    REDUCE_CLONES static void name##_abd(T *restrict d, const T *restrict a,                   \
                                         const T *restrict b, size_t n)                        \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(a[i], b[i]);                                                             \
    }                                                                                          \
    REDUCE_CLONES static void name##_db(T *restrict d, const T *restrict b, size_t n)          \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(d[i], b[i]);                                                             \
    }                                                                                          \
    REDUCE_CLONES static void name##_ad(T *restrict d, const T *restrict a, size_t n)          \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(a[i], d[i]);                                                             \
    }

/* 16-bit types computed through float. */
#define REDUCE_VIA_FLOAT(name, OP, TOF, FROMF)                                                 \
    REDUCE_CLONES static void name##_abd(u16u *restrict d, const u16u *restrict a,             \
                                         const u16u *restrict b, size_t n)                     \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = FROMF(OP(TOF(a[i]), TOF(b[i])));                                            \
    }                                                                                          \
    REDUCE_CLONES static void name##_db(u16u *restrict d, const u16u *restrict b, size_t n)    \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = FROMF(OP(TOF(d[i]), TOF(b[i])));                                            \
    }                                                                                          \
    REDUCE_CLONES static void name##_ad(u16u *restrict d, const u16u *restrict a, size_t n)    \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = FROMF(OP(TOF(a[i]), TOF(d[i])));                                            \
    }

REDUCE_NATIVE(reduce_f32_sum, f32u, REDUCE_SUM)
REDUCE_NATIVE(reduce_f32_min, f32u, REDUCE_MIN)
REDUCE_NATIVE(reduce_f32_max, f32u, REDUCE_MAX)
REDUCE_NATIVE(reduce_i32_sum, i32u, REDUCE_ISUM32)
REDUCE_NATIVE(reduce_i32_min, i32u, REDUCE_MIN)
REDUCE_NATIVE(reduce_i32_max, i32u, REDUCE_MAX)
REDUCE_NATIVE(reduce_i64_sum, i64u, REDUCE_ISUM64)
REDUCE_NATIVE(reduce_i64_min, i64u, REDUCE_MIN)
REDUCE_NATIVE(reduce_i64_max, i64u, REDUCE_MAX)
REDUCE_VIA_FLOAT(reduce_bf16_sum, REDUCE_SUM, reduce_bf2f, reduce_f2bf)
REDUCE_VIA_FLOAT(reduce_bf16_min, REDUCE_MIN, reduce_bf2f, reduce_f2bf)
REDUCE_VIA_FLOAT(reduce_bf16_max, REDUCE_MAX, reduce_bf2f, reduce_f2bf)
REDUCE_VIA_FLOAT(reduce_f16_sum, REDUCE_SUM, reduce_h2f, reduce_f2h)
REDUCE_VIA_FLOAT(reduce_f16_min, REDUCE_MIN, reduce_h2f, reduce_f2h)
REDUCE_VIA_FLOAT(reduce_f16_max, REDUCE_MAX, reduce_h2f, reduce_f2h)

/* ---- float16 with F16C ------------------------------------------------------------ */

#if REDUCE_HAVE_F16C
__attribute__((target("avx,f16c"))) static __m256 reduce_f16c_op(__m256 x, __m256 y,
                                                                 enum comm_redop op)
{
    switch (op) {
    case COMM_MIN: return _mm256_min_ps(x, y); /* x < y ? x : y, as REDUCE_MIN */
    case COMM_MAX: return _mm256_max_ps(x, y);
    default: return _mm256_add_ps(x, y);
    }
}

/* d = op(a, b) eight elements at a time; d may be a or b exactly (each block is read
 * whole before it is written). Returns how many elements it did (a multiple of 8). */
__attribute__((target("avx,f16c"))) static size_t
reduce_f16c(uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n, enum comm_redop op)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + 2 * i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + 2 * i)));
        __m128i r = _mm256_cvtps_ph(reduce_f16c_op(x, y, op), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i), r);
    }
    return i;
}

/* Reads libgcc's CPU model, filled by a constructor before main: cheap enough per call. */
static bool reduce_cpu_f16c(void)
{
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

struct reduce_kernel {
    void (*abd)(void *d, const void *a, const void *b, size_t n);
    void (*db)(void *d, const void *b, size_t n);
    void (*ad)(void *d, const void *a, size_t n);
};

/* void * wrappers around the typed loops: the table holds one function type. */
#define REDUCE_WRAP(name)                                                                      \
    static void name##_v3(void *d, const void *a, const void *b, size_t n)                     \
    {                                                                                          \
        name##_abd(d, a, b, n);                                                                \
    }                                                                                          \
    static void name##_vdb(void *d, const void *b, size_t n)                                   \
    {                                                                                          \
        name##_db(d, b, n);                                                                    \
    }                                                                                          \
    static void name##_vad(void *d, const void *a, size_t n)                                   \
    {                                                                                          \
        name##_ad(d, a, n);                                                                    \
    }
#define REDUCE_ENTRY(name)                                                                     \
    {                                                                                          \
        name##_v3, name##_vdb, name##_vad                                                      \
    }

REDUCE_WRAP(reduce_f32_sum)
REDUCE_WRAP(reduce_f32_min)
REDUCE_WRAP(reduce_f32_max)
REDUCE_WRAP(reduce_i32_sum)
REDUCE_WRAP(reduce_i32_min)
REDUCE_WRAP(reduce_i32_max)
REDUCE_WRAP(reduce_i64_sum)
REDUCE_WRAP(reduce_i64_min)
REDUCE_WRAP(reduce_i64_max)
REDUCE_WRAP(reduce_bf16_sum)
REDUCE_WRAP(reduce_bf16_min)
REDUCE_WRAP(reduce_bf16_max)
REDUCE_WRAP(reduce_f16_sum)
REDUCE_WRAP(reduce_f16_min)
REDUCE_WRAP(reduce_f16_max)

/* [dtype][sum, min, max] */
static const struct reduce_kernel reduce_kernels[][3] = {
    [COMM_FLOAT32] = {REDUCE_ENTRY(reduce_f32_sum), REDUCE_ENTRY(reduce_f32_min),
                      REDUCE_ENTRY(reduce_f32_max)},
    [COMM_FLOAT16] = {REDUCE_ENTRY(reduce_f16_sum), REDUCE_ENTRY(reduce_f16_min),
                      REDUCE_ENTRY(reduce_f16_max)},
    [COMM_BFLOAT16] = {REDUCE_ENTRY(reduce_bf16_sum), REDUCE_ENTRY(reduce_bf16_min),
                       REDUCE_ENTRY(reduce_bf16_max)},
    [COMM_INT32] = {REDUCE_ENTRY(reduce_i32_sum), REDUCE_ENTRY(reduce_i32_min),
                    REDUCE_ENTRY(reduce_i32_max)},
    [COMM_INT64] = {REDUCE_ENTRY(reduce_i64_sum), REDUCE_ENTRY(reduce_i64_min),
                    REDUCE_ENTRY(reduce_i64_max)},
};

static int reduce_op_index(enum comm_redop op)
{
    return op == COMM_MIN ? 1 : op == COMM_MAX ? 2 : 0;
}

void reduce_apply(void *dst, const void *a, const void *b, size_t n, enum comm_dtype t,
                  enum comm_redop op)
{
    if (n == 0 || (unsigned)t > COMM_INT64)
        return;
#if REDUCE_HAVE_F16C
    if (t == COMM_FLOAT16 && reduce_cpu_f16c()) {
        size_t done = reduce_f16c(dst, a, b, n, op);
        dst = (uint8_t *)dst + 2 * done;
        a = (const uint8_t *)a + 2 * done;
        b = (const uint8_t *)b + 2 * done;
        n -= done;
    }
#endif
    const struct reduce_kernel *k = &reduce_kernels[t][reduce_op_index(op)];
    if (dst == a)
        k->db(dst, b, n);
    else if (dst == b)
        k->ad(dst, a, n);
    else
        k->abd(dst, a, b, n);
}

void reduce_divide(void *buf, size_t n, enum comm_dtype t, int divisor)
{
    if (divisor <= 1)
        return;
    float fd = (float)divisor;
    switch (t) {
    case COMM_FLOAT32: {
        f32u *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] / fd;
        break;
    }
    case COMM_FLOAT16: {
        u16u *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = reduce_f2h(reduce_h2f(p[i]) / fd);
        break;
    }
    case COMM_BFLOAT16: {
        u16u *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = reduce_f2bf(reduce_bf2f(p[i]) / fd);
        break;
    }
    case COMM_INT32: {
        i32u *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] / divisor;
        break;
    }
    case COMM_INT64: {
        i64u *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] / divisor;
        break;
    }
    }
}

double reduce_load(const void *p, enum comm_dtype t)
{
    switch (t) {
    case COMM_FLOAT32: return *(const f32u *)p;
    case COMM_FLOAT16: return reduce_h2f(*(const u16u *)p);
    case COMM_BFLOAT16: return reduce_bf2f(*(const u16u *)p);
    case COMM_INT32: return *(const i32u *)p;
    case COMM_INT64: return (double)*(const i64u *)p;
    }
    return 0;
}

void reduce_store(void *p, enum comm_dtype t, double v)
{
    switch (t) {
    case COMM_FLOAT32: *(f32u *)p = (float)v; break;
    case COMM_FLOAT16: *(u16u *)p = reduce_f2h((float)v); break;
    case COMM_BFLOAT16: *(u16u *)p = reduce_f2bf((float)v); break;
    case COMM_INT32: *(i32u *)p = (int32_t)v; break;
    case COMM_INT64: *(i64u *)p = (int64_t)v; break;
    }
}
