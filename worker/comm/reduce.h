/* reduce: the element-wise reduction kernels every comm backend that reduces on the CPU
 * uses (sum, avg, min, max over float32, float16, bfloat16, int32, int64), and the
 * half-precision conversions they are built on.
 *
 * Decisions:
 * - Buffers may have any alignment: the kernels access elements through under-aligned
 *   types (GNU aligned(1) typedefs), which gcc vectorizes with unaligned loads and which
 *   UBSan accepts. This file is compiled at -O3 (worker/meson.build) so gcc vectorizes
 *   the simple restrict loops; float16 uses F16C intrinsics where the CPU has them.
 * - Half types are computed through float and rounded back to nearest-even after every
 *   combine, as NCCL and Gloo do; inputs made of small integers therefore reduce exactly.
 * - avg is a sum followed by reduce_divide once, at the end: floats compute
 *   (float)sum / (float)world rounded once to the dtype, integers divide toward zero
 *   (C division). Nothing else is rounded twice, so results can be checked exactly.
 * - min/max return the second operand when the operands compare equal or unordered
 *   (-0 and +0, NaN), like x86's minps; integer sums wrap (two's complement) instead of
 *   overflowing. */
#ifndef DDPB_REDUCE_H
#define DDPB_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/comm/comm.h"

/* dst[i] = a[i] (op) b[i] for i < n. dst may be a or b exactly (element for element) but
 * must not overlap them otherwise; a and b may not overlap each other either. avg
 * combines as sum. Operands keep their order: op(a, b), for results that are identical
 * on every rank whatever the argument order of commutative operators does with -0/NaN. */
void reduce_apply(void *dst, const void *a, const void *b, size_t n, enum comm_dtype t,
                  enum comm_redop op);
/* buf[i] = buf[i] / divisor (the avg finish; see above). divisor >= 1. */
void reduce_divide(void *buf, size_t n, enum comm_dtype t, int divisor);

/* IEEE binary16 and bfloat16 from and to float, rounding to nearest-even; NaNs stay
 * (quiet) NaNs, too large values become infinities. */
float reduce_half_to_float(uint16_t h);
uint16_t reduce_float_to_half(float f);
float reduce_bf16_to_float(uint16_t h);
uint16_t reduce_float_to_bf16(float f);

/* One element at p (any alignment) as a double, and the reverse (rounded to the dtype
 * as above). For checks and tests, not for inner loops. */
double reduce_load(const void *p, enum comm_dtype t);
void reduce_store(void *p, enum comm_dtype t, double v);

#endif
