/* bf16: rounding float32 values to bfloat16 precision in place (round to nearest, ties to
 * even; NaNs stay NaNs, quieted), the conversion the CPU engine's bf16 training applies to
 * a convolution's or inner product's operands where oneDNN has no bf16 kernels for this
 * CPU (onednn.h NN_BF16_EMULATED).
 *
 * Decision: the values stay in float32 containers ("emulated storage"): the primitives
 * then compute in fp32 on operands that carry exactly bf16's 8 significant bits, which is
 * what a bf16 kernel multiplies (its products are exact in fp32 and it accumulates in
 * fp32), so the numbers match a native bf16 run up to summation order, while the memory
 * traffic and the arithmetic are fp32's: the emulation reports bf16's accuracy, not its
 * speed. The kernel is AVX2 (8 floats a step, integer arithmetic on the bit patterns),
 * chosen at run time; reduce.h's scalar conversions are its reference and its tail. */
#ifndef DDPB_NN_BF16_H
#define DDPB_NN_BF16_H

#include <stdbool.h>
#include <stddef.h>

/* x[i] = bf16(x[i]) as a float, for i < n. */
void nn_bf16_round(float *x, size_t n);
/* The same with the scalar loop only (avx2 = false) or the AVX2 kernel where the CPU has
 * it (true): the test compares them. */
void nn_bf16_round_with(float *x, size_t n, bool avx2);

#endif
