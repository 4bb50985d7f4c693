/* winograd: ddpbench's own Winograd F(4x4, 3x3), and F(2x2, 3x3) for small maps,
 * convolution for 3x3, stride-1, dilation-1, ungrouped layers, for CPUs where oneDNN 2.6
 * has none (it implements Winograd only for AVX-512; on AVX2 it runs its direct JIT kernel,
 * as PyTorch does).
 *
 * Decisions:
 * - The algorithm is Lavin's F(4x4, 3x3): every 6x6 input tile (stride 4) is transformed
 *   (B^T d B), each weight 3x3 kernel too (G g G^T), the 36 elementwise products summed over
 *   input channels are 36 matrix products (tiles x Cin) . (Cin x Cout), and each 6x6 result
 *   is transformed back to a 4x4 output tile (A^T m A). 2.25x fewer multiplications than
 *   direct for the GEMM part.
 * - The tiles are cut into chunks of up to NN_WINO_CHUNK, one thread per chunk: each thread
 *   transforms its chunk, runs the 36 matrix products with oneDNN's dnnl_sgemm (a
 *   well-kept GEMM, not a hand-written one; sequential inside our parallel region) and
 *   transforms back, so V and M stay in its cache. Measured on AVX2 (emulated on a Zen 4):
 *   one batched matmul primitive over all tiles ran its GEMMs as fast, but the round trip
 *   of the whole V and M through memory cost as much again as the GEMMs.
 * - The transforms run on blocks of 8 channels (one AVX2 register): the AVX2/FMA kernels
 *   (target attribute, chosen at init by nn_isa_get) beside plain-C references that apply
 *   the textbook matrices; the reference is also the path below AVX2.
 * - The tensors are read and written in whatever plain or channel-blocked layout the
 *   neighbouring oneDNN layers chose (struct nn_layout); nChw8c, what they choose on AVX2,
 *   is read and written 8 channels at a time, any other layout element by element.
 * - Backward data of a 3x3 stride-1 convolution with padding p is the same Winograd
 *   convolution of diff_dst with the kernels flipped, Cin and Cout swapped, padding 2 - p
 *   (flip = 1 at init). The weight gradient is not here (conv2d.c uses oneDNN's direct).
 * - Each thread's transformed input (V: 36 x chunk x Cin8) and products (M: 36 x chunk x
 *   Cout8) live in the context's shared workspace (nn_dnnl_work_reserve), which grows only
 *   at init: layers run one after another, so one buffer serves all of them.
 *
 * Error: F(4x4, 3x3)'s transforms have entries up to 8 and 1/24, so its rounding error is
 * about an order of magnitude above direct's: measured ~1e-6..1e-5 of the output's scale
 * (tests/unit/test_nn_wino.c bounds it at 1e-4 of the largest |output|). F(2x2, 3x3)'s
 * entries are 0, +-1 and 1/2, exact in binary: up to 5e-7 measured, bound 5e-6.
 * - F(2x2, 3x3) (4x4 input tiles, 16 products, 1.78x fewer multiplications than direct)
 *   wastes less on padding below 8x8 maps; which tile a layer runs is conv2d.c's choice
 *   (conv_own_tile, measured in RESULTS.md).
 *
 * Ownership: an nn_wino owns its transformed weights (u); the tensors it reads and writes
 * and the workspace are borrowed. */
#ifndef DDPB_NN_WINOGRAD_H
#define DDPB_NN_WINOGRAD_H

#include <stddef.h>

#include "worker/nn/isa.h"
#include "worker/nn/onednn.h"

/* Tile geometry: 6x6 input tiles for 4x4 outputs; 36 transformed elements each (F(4,3));
 * 4x4 input tiles for 2x2 outputs, 16 elements (F(2,3)). The F(4,3) sizes bound both. */
enum { NN_WINO_M = 4, NN_WINO_A = 6, NN_WINO_E = 36, NN_WINO_BLK = 8 };
enum { NN_WINO2_M = 2, NN_WINO2_A = 4, NN_WINO2_E = 16 };
/* Tiles per chunk at most: V and M of 32 tiles at 128 channels are 1.2 MB, about a core's
 * L2, so the products read what the transform just wrote from cache, not memory. */
enum { NN_WINO_CHUNK = 32 };

/* One direction (forward, or backward data with flip) of one layer. */
struct nn_wino {
    int n, cin, cout, h, w, oh, ow, pad; /* cin, cout: the GEMMs' K and N */
    int m, a, ne;                        /* output tile (2 or 4), input tile m + 2, a * a */
    int th, tw;                          /* tiles per image, down and across */
    size_t tiles;                        /* n * th * tw */
    int cinp, coutp;                     /* rounded up to NN_WINO_BLK */
    int flip;                            /* backward data: kernels flipped, cin/cout swapped */
    enum nn_isa isa;                     /* the transforms' kernels; tests may lower it */
    int threads, chunk;                  /* threads at init; tiles per chunk */
    struct nn_layout src, dst;
    float *u; /* owned: 36 x cinp x coutp, padding zero */
};

/* A 3x3 convolution of src (n, cin, h, w; layout src) with padding pad (both sides, both
 * axes, 0..2) into dst (n, cout, h + 2 pad - 2, w + 2 pad - 2; layout dst) by F(m x m, 3x3),
 * m = NN_WINO_M (4) or NN_WINO2_M (2). flip: the
 * weights given to nn_wino_weights are the forward's (Cin_fwd = cout, Cout_fwd = cin) and
 * the convolution is the forward's backward data. Grows the context's workspace. */
int nn_wino_init(struct nn_wino *w, struct nn_dnnl *d, int n, int cin, int cout, int h, int wd,
                 int pad, const struct nn_layout *src, const struct nn_layout *dst, int flip,
                 int m, struct err *e);
/* Transforms weight (PyTorch's (Cout_fwd, Cin_fwd, 3, 3)) into u; once per step. */
void nn_wino_weights(struct nn_wino *w, const float *weight);
/* dst = conv(src) (+ bias per output channel, NULL: none), with the last nn_wino_weights. */
void nn_wino_run(struct nn_wino *w, struct nn_dnnl *d, float *dst, const float *src,
                 const float *bias);
void nn_wino_destroy(struct nn_wino *w);

/* The transforms of one 8-channel block, exposed for their tests. in: 36 x 8 floats (a 6x6
 * tile, row-major, channel innermost); out + e * stride: the 8 channels of element e. */
void nn_wino_input_ref(float *out, size_t stride, const float *in);
void nn_wino_input_avx2(float *out, size_t stride, const float *in);
/* in + e * stride: the 8 channels of element e; out: 16 x 8 (a 4x4 tile, channel
 * innermost). */
void nn_wino_output_ref(float *out, const float *in, size_t stride);
void nn_wino_output_avx2(float *out, const float *in, size_t stride);
/* The same for F(2x2, 3x3): in 16 x 8 (a 4x4 tile), out 16 elements; out 4 x 8 (2x2). */
void nn_wino2_input_ref(float *out, size_t stride, const float *in);
void nn_wino2_input_avx2(float *out, size_t stride, const float *in);
void nn_wino2_output_ref(float *out, const float *in, size_t stride);
void nn_wino2_output_avx2(float *out, const float *in, size_t stride);

#endif
