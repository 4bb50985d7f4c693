/* Unit tests for worker/comm/reduce.c: the half-precision conversions against
 * independent references (every float16 and bfloat16 value, the midpoints between
 * neighbours for round-to-nearest-even, overflow, subnormals, NaN; the F16C hardware
 * conversion on random floats where the CPU has it), and every reduction kernel (dtype x
 * operator x aliasing) on odd and prime lengths at every misalignment against a naive
 * per-element reference, plus the avg division. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tests/unit/test.h"
#include "worker/comm/comm.h"
#include "worker/comm/reduce.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 decoded with ldexp: sign, 5-bit exponent (bias 15), 10-bit fraction. */
static double ref_half_value(uint16_t h)
{
    int e = (h >> 10) & 31, f = h & 1023;
    double v = e == 0 ? ldexp(f, -24) : ldexp(1024 + f, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_half_to_float_every_value(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = reduce_half_to_float((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31 && (h & 1023)) {
            T_CHECK_MSG(isnan(f), "0x%04x", h);
            T_CHECK(isnan(reduce_half_to_float(reduce_float_to_half(f))));
            continue;
        }
        if (e == 31) {
            T_CHECK(isinf(f) && (f < 0) == ((h & 0x8000) != 0));
        } else {
            T_CHECK_MSG((double)f == ref_half_value((uint16_t)h), "0x%04x: %g vs %g", h,
                        (double)f, ref_half_value((uint16_t)h));
        }
        T_CHECK_MSG(reduce_float_to_half(f) == h, "round trip of 0x%04x gives 0x%04x", h,
                    reduce_float_to_half(f));
    }
}

/* Between neighbours a < b (positive, finite): the midpoint rounds to the even one,
 * a float just below or above it to the nearer one. */
static void test_float_to_half_rounding(void)
{
    for (uint16_t a = 0; a < 0x7bff; a++) {
        uint16_t b = (uint16_t)(a + 1);
        float mid = (float)((ref_half_value(a) + ref_half_value(b)) / 2); /* exact */
        uint16_t even = (a & 1) ? b : a;
        T_CHECK_MSG(reduce_float_to_half(mid) == even, "mid of 0x%04x: 0x%04x", a,
                    reduce_float_to_half(mid));
        T_CHECK(reduce_float_to_half(-mid) == (even | 0x8000));
        T_CHECK(reduce_float_to_half(bits_f32(f32_bits(mid) - 1)) == a);
        T_CHECK(reduce_float_to_half(bits_f32(f32_bits(mid) + 1)) == b);
    }
    T_EQ_INT(reduce_float_to_half(65504.0f), 0x7bff);
    T_EQ_INT(reduce_float_to_half(65519.99f), 0x7bff);
    T_EQ_INT(reduce_float_to_half(65520.0f), 0x7c00); /* ties away from the odd 0x7bff */
    T_EQ_INT(reduce_float_to_half(1e10f), 0x7c00);
    T_EQ_INT(reduce_float_to_half(-1e10f), 0xfc00);
    T_EQ_INT(reduce_float_to_half(0x1p-25f), 0); /* tie between 0 and 2^-24: even */
    T_EQ_INT(reduce_float_to_half(0x1.000002p-25f), 1);
    T_EQ_INT(reduce_float_to_half(0x1p-30f), 0);
    T_EQ_INT(reduce_float_to_half(-0.0f), 0x8000);
    T_EQ_INT(reduce_float_to_half(0x1.ffcp-15f), 0x0400); /* subnormal rounding up to normal */
    T_CHECK((reduce_float_to_half(NAN) & 0x7c00) == 0x7c00 &&
            (reduce_float_to_half(NAN) & 0x3ff));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_float_to_half(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif

static void test_float_to_half_matches_hardware(void)
{
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("f16c"))
        return; /* nothing to compare with */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* bias the exponent into and around the half range */
        uint32_t u = (uint32_t)x;
        u = (u & 0x807fffffu) | ((uint32_t)(96 + (x >> 40) % 64) << 23);
        float f = bits_f32(u);
        uint16_t mine = reduce_float_to_half(f), hw = hw_float_to_half(f);
        T_CHECK_MSG(mine == hw, "%a: 0x%04x vs hardware 0x%04x", (double)f, mine, hw);
    }
#endif
}

static void test_bf16_conversions(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = reduce_bf16_to_float((uint16_t)h);
        T_CHECK(f32_bits(f) == h << 16);
        if (isnan(f))
            T_CHECK(isnan(reduce_bf16_to_float(reduce_float_to_bf16(f))));
        else
            T_CHECK(reduce_float_to_bf16(f) == h);
    }
    for (uint32_t a = 0; a < 0x7f7f; a += 7) {
        uint32_t mid = (a << 16) | 0x8000u; /* exactly between a and a + 1 */
        uint16_t even = (a & 1) ? (uint16_t)(a + 1) : (uint16_t)a;
        T_EQ_INT(reduce_float_to_bf16(bits_f32(mid)), even);
        T_EQ_INT(reduce_float_to_bf16(bits_f32(mid - 1)), a);
        T_EQ_INT(reduce_float_to_bf16(bits_f32(mid + 1)), a + 1);
    }
    T_EQ_INT(reduce_float_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80); /* rounds to infinity */
    uint16_t qnan = reduce_float_to_bf16(bits_f32(0x7f800001u));   /* payload in low bits */
    T_CHECK((qnan & 0x7f80) == 0x7f80 && (qnan & 0x7f));
}

/* ---- kernels ---------------------------------------------------------------------- */

static double ref_op(double x, double y, enum comm_dtype t, enum comm_redop op)
{
    if (op == COMM_MIN)
        return x < y ? x : y;
    if (op == COMM_MAX)
        return x > y ? x : y;
    if (t == COMM_INT32)
        return (double)(int32_t)((uint32_t)(int32_t)x + (uint32_t)(int32_t)y);
    if (t == COMM_INT64)
        return (double)((int64_t)x + (int64_t)y);
    return (double)((float)x + (float)y); /* float arithmetic, as the kernels do */
}

/* Values that exercise each type: fractions and large magnitudes for floats (sums
 * round), wrapping for int32. */
static double sample(enum comm_dtype t, unsigned i, unsigned salt)
{
    unsigned k = (i * 2654435761u + salt * 40503u) >> 7;
    switch (t) {
    case COMM_INT32: return (double)(int32_t)(k * 2246822519u); /* any int32 */
    case COMM_INT64: return (double)((int64_t)(k % 2000001) - 1000000);
    case COMM_BFLOAT16: return ((double)(k % 20001) - 10000) / 64.0;
    case COMM_FLOAT16: return ((double)(k % 20001) - 10000) / 8.0;
    default: return ((double)(k % 2000001) - 1000000) / 3.0;
    }
}

/* dst = op(a, b) with n elements at byte offsets; shape 0: three buffers, 1: dst is a,
 * 2: dst is b. Returns elements that differ from the per-element reference. */
static int kernel_case(enum comm_dtype t, enum comm_redop op, size_t n, size_t off, int shape)
{
    size_t es = comm_dtype_size(t), bytes = n * es + 16;
    uint8_t *abuf = malloc(bytes), *bbuf = malloc(bytes), *dbuf = malloc(bytes);
    uint8_t *a = abuf + off, *b = bbuf + (off * 3) % 8, *d = dbuf + (off * 5) % 8;
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) {
        reduce_store(a + i * es, t, sample(t, (unsigned)i, 1));
        reduce_store(b + i * es, t, sample(t, (unsigned)i, 2));
        want[i] = ref_op(reduce_load(a + i * es, t), reduce_load(b + i * es, t), t, op);
        uint8_t tmp[8];
        reduce_store(tmp, t, want[i]); /* rounded to the dtype */
        want[i] = reduce_load(tmp, t);
    }
    uint8_t *dst = shape == 1 ? a : shape == 2 ? b : d;
    reduce_apply(dst, a, b, n, t, op);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += reduce_load(dst + i * es, t) != want[i];
    free(abuf);
    free(bbuf);
    free(dbuf);
    free(want);
    return bad;
}

static void test_kernels_against_reference(void)
{
    static const size_t lengths[] = {1, 2, 7, 8, 9, 31, 257, 1009};
    for (int t = COMM_FLOAT32; t <= COMM_INT64; t++)
        for (int op = COMM_SUM; op <= COMM_MAX; op++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
                for (size_t off = 0; off < 8; off++)
                    for (int shape = 0; shape < 3; shape++) {
                        int bad = kernel_case((enum comm_dtype)t, (enum comm_redop)op,
                                              lengths[li], off, shape);
                        T_CHECK_MSG(bad == 0, "%s %s n=%zu off=%zu shape %d: %d wrong",
                                    comm_dtype_name((enum comm_dtype)t),
                                    comm_redop_name((enum comm_redop)op), lengths[li], off,
                                    shape, bad);
                    }
}

/* Operands keep their order: when they compare equal, min and max return the second
 * one (min(+0, -0) is -0, min(-0, +0) is +0), so ranks agree on a result only when they
 * combine in the same order, which the algorithms make sure of. */
static void test_kernel_operand_order(void)
{
    float a[9], b[9], d[9];
    for (int i = 0; i < 9; i++) {
        a[i] = 0.0f;
        b[i] = -0.0f;
    }
    reduce_apply(d, a, b, 9, COMM_FLOAT32, COMM_MIN);
    for (int i = 0; i < 9; i++)
        T_CHECK(signbit(d[i]));
    reduce_apply(d, b, a, 9, COMM_FLOAT32, COMM_MIN);
    for (int i = 0; i < 9; i++)
        T_CHECK(!signbit(d[i]));
    uint16_t h0[9], hm[9], hd[9]; /* the F16C path keeps the order too */
    for (int i = 0; i < 9; i++) {
        h0[i] = 0x0000;
        hm[i] = 0x8000;
    }
    reduce_apply(hd, h0, hm, 9, COMM_FLOAT16, COMM_MAX);
    for (int i = 0; i < 9; i++)
        T_EQ_INT(hd[i], 0x8000);
    reduce_apply(d, a, b, 0, COMM_FLOAT32, COMM_SUM); /* n = 0 touches nothing */
}

static void test_divide(void)
{
    int32_t i32[5] = {7, -7, 9, -1, 2147483647};
    reduce_divide(i32, 5, COMM_INT32, 2);
    T_EQ_INT(i32[0], 3);
    T_EQ_INT(i32[1], -3); /* toward zero */
    T_EQ_INT(i32[2], 4);
    T_EQ_INT(i32[3], 0);
    T_EQ_INT(i32[4], 1073741823);
    int64_t i64[2] = {-10, 10};
    reduce_divide(i64, 2, COMM_INT64, 3);
    T_EQ_INT(i64[0], -3);
    T_EQ_INT(i64[1], 3);
    float f[3] = {1, 10, -7};
    reduce_divide(f, 3, COMM_FLOAT32, 3);
    T_CHECK(f[0] == 1.0f / 3.0f && f[1] == 10.0f / 3.0f && f[2] == -7.0f / 3.0f);
    uint8_t h[7]; /* misaligned float16 */
    reduce_store(h + 1, COMM_FLOAT16, 10);
    reduce_store(h + 3, COMM_FLOAT16, -1);
    reduce_divide(h + 1, 2, COMM_FLOAT16, 3);
    T_CHECK(reduce_load(h + 1, COMM_FLOAT16) ==
            reduce_half_to_float(reduce_float_to_half(10.0f / 3.0f)));
    T_CHECK(reduce_load(h + 3, COMM_FLOAT16) ==
            reduce_half_to_float(reduce_float_to_half(-1.0f / 3.0f)));
    uint16_t bf[1];
    reduce_store(bf, COMM_BFLOAT16, 100);
    reduce_divide(bf, 1, COMM_BFLOAT16, 7);
    T_CHECK(reduce_load(bf, COMM_BFLOAT16) ==
            reduce_bf16_to_float(reduce_float_to_bf16(100.0f / 7.0f)));
    float one[1] = {5};
    reduce_divide(one, 1, COMM_FLOAT32, 1);
    T_CHECK(one[0] == 5);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_half_to_float_every_value);
    TEST_RUN(test_float_to_half_rounding);
    TEST_RUN(test_float_to_half_matches_hardware);
    TEST_RUN(test_bf16_conversions);
    TEST_RUN(test_kernels_against_reference);
    TEST_RUN(test_kernel_operand_order);
    TEST_RUN(test_divide);
    return test_end();
}
