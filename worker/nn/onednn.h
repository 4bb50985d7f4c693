/* onednn: the glue between the layers' fast paths and oneDNN 2.6's v2 C API: the engine
 * and stream, primitives with a shared user-mode scratchpad, memory objects bound to our
 * own buffers, reorders (optionally accumulating), memory-descriptor helpers, and the
 * layout arithmetic our own loops use to walk blocked tensors.
 *
 * Decisions:
 * - Scratchpad mode "user": primitives run one after another, so one scratchpad buffer
 *   (the largest any primitive asked for) serves them all; it grows only while primitives
 *   are created, never during a step.
 * - Memory objects are created once with no buffer and bound to our pointers at run time;
 *   the handle is only reset when the pointer changes.
 * - Running a primitive cannot return an error to the layer's void forward/backward:
 *   the first failure is kept in the context (sticky) and the model checks it after each
 *   forward/backward (nn_dnnl_check). Creation errors are returned as struct err.
 *
 * Ownership: nn_dnnl owns its engine, stream, attributes and scratchpad; an nn_prim owns
 * its primitive descriptor, primitive and scratchpad memory object (not the buffer);
 * nn_mem owns its memory object but never the buffer it is bound to. */
#ifndef DDPB_NN_ONEDNN_H
#define DDPB_NN_ONEDNN_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

#include "common/err.h"
#include "worker/nn/nn.h"

/* How convolutions are computed. DIRECT is PyTorch's choice and stays within float
 * rounding of the reference; WINOGRAD (F(4x4,3x3) for every 3x3 stride-1 layer, direct
 * elsewhere) does ~2x fewer multiplications, its rounding error an order above direct's
 * (measured ~1e-6 of the output's scale); AUTO uses Winograd only on the layers where it
 * measured faster here (outputs of 7x7 and more with 64+ channels, 16x16 with 32+; see
 * conv2d.c), direct on the rest. Winograd is oneDNN's where it has one (AVX-512), else
 * ddpbench's own (winograd.h; AUTO takes it on AVX2 CPUs, by conv2d.c's own rule). */
enum nn_conv_algo { NN_CONV_DIRECT, NN_CONV_AUTO, NN_CONV_WINOGRAD };

/* bf16 training on the CPU (spec precision bf16): the convolutions' and inner products'
 * operands (src, weights, diff_dst) in bf16, their outputs (dst, diff_src, diff_weights)
 * in fp32, every other layer, the master weights and the optimizer fp32: PyTorch's CPU
 * autocast. NATIVE: oneDNN's bf16 kernels (AVX512-BF16 / AMX CPUs), the operands reordered
 * into bf16 tensors; EMULATED: where oneDNN has none (an AVX2 CPU: "unimplemented"), fp32
 * kernels on operands rounded to bf16 in fp32 buffers (bf16.h): bf16's numbers at fp32's
 * cost plus the rounding pass. AUTO (a request, nn_model_set_bf16) is NATIVE where
 * nn_dnnl_bf16_probe finds the kernels, else EMULATED. */
enum nn_bf16 { NN_BF16_OFF, NN_BF16_AUTO, NN_BF16_NATIVE, NN_BF16_EMULATED };

struct nn_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;     /* user scratchpad */
    dnnl_primitive_attr_t attr_sum; /* user scratchpad + sum post-op (accumulating) */
    void *scratch;                  /* owned, shared by every primitive */
    size_t scratch_size;
    void *work; /* owned: our own kernels' workspace (winograd.c), shared like scratch */
    size_t work_size;
    enum nn_conv_algo conv_algo; /* set before creating convolutions; 0 = DIRECT */
    int wino_tile;     /* own Winograd's output tile: 0 = by layer (conv2d.c), 2 or 4 forced */
    enum nn_bf16 bf16; /* set before creating primitives: OFF, NATIVE, EMULATED */
    dnnl_status_t status; /* first execution failure, dnnl_success when none */
    char failed[48];      /* what failed */
};

int nn_dnnl_init(struct nn_dnnl *d, struct err *e);
void nn_dnnl_cleanup(struct nn_dnnl *d);
/* Grows the shared workspace (d->work) to at least bytes; only while layers are made. */
int nn_dnnl_work_reserve(struct nn_dnnl *d, size_t bytes, struct err *e);
/* -1 with e filled when a primitive failed to run since init (sticky). */
int nn_dnnl_check(const struct nn_dnnl *d, struct err *e);
/* Fills e from a oneDNN status; returns -1. */
int nn_dnnl_err(struct err *e, dnnl_status_t st, const char *what);
/* NN_BF16_NATIVE when oneDNN creates a bf16 convolution and inner product (forward and
 * both backwards) with an optimised (not "ref") implementation on this CPU, else
 * NN_BF16_EMULATED. */
enum nn_bf16 nn_dnnl_bf16_probe(const struct nn_dnnl *d);
/* The run's env name of a resolved path: "onednn-native", "emulated-storage"; NULL for
 * OFF and AUTO. */
const char *nn_bf16_path_name(enum nn_bf16 b);

/* ---- primitives ------------------------------------------------------------------- */

struct nn_prim {
    dnnl_primitive_desc_t pd; /* owned */
    dnnl_primitive_t prim;    /* owned */
    dnnl_memory_t scratch;    /* owned; bound to the context's scratchpad at run */
    void *bound;
    const char *what; /* static string naming the primitive, for errors */
};

/* Creates the primitive for op (hint: the forward pd for backward primitives, or NULL)
 * with the context's attributes (accumulate: the sum post-op too). */
int nn_prim_create(struct nn_prim *p, struct nn_dnnl *d, const_dnnl_op_desc_t op,
                   const_dnnl_primitive_desc_t hint, const char *what, struct err *e);
/* Takes ownership of pd (destroyed on failure too). */
int nn_prim_create_from_pd(struct nn_prim *p, struct nn_dnnl *d, dnnl_primitive_desc_t pd,
                           const char *what, struct err *e);
/* The memory descriptor the primitive chose for one of its arguments (dnnl_query_*_md).
 * Borrowed: valid while p lives. */
const dnnl_memory_desc_t *nn_prim_md(const struct nn_prim *p, dnnl_query_t q, int index);
/* oneDNN's implementation name ("jit:avx512_core", "ref:any", ...). Borrowed. */
const char *nn_prim_impl(const struct nn_prim *p);
/* Runs the primitive on args (at most 15) plus the scratchpad. */
void nn_prim_run(struct nn_prim *p, struct nn_dnnl *d, int nargs, const dnnl_exec_arg_t *args);
void nn_prim_destroy(struct nn_prim *p);

/* ---- memory objects --------------------------------------------------------------- */

struct nn_mem {
    dnnl_memory_t mem; /* owned */
    void *bound;       /* borrowed */
};

int nn_mem_create(struct nn_mem *m, struct nn_dnnl *d, const dnnl_memory_desc_t *md,
                  struct err *e);
/* Points the memory object at ptr (borrowed) and returns it. */
dnnl_memory_t nn_mem_bind(struct nn_mem *m, const void *ptr);
void nn_mem_destroy(struct nn_mem *m);

/* Releases what a layer's fast state owns: each primitive of prims and memory object of
 * mems (NULL-terminated lists of the state's members; zeroed or half-made ones are fine),
 * then frees each of the nbufs buffers of bufs. The one release every nn_*_fast_destroy
 * shares before it zeroes its state. */
void nn_fast_release(struct nn_prim *const *prims, struct nn_mem *const *mems,
                     void *const *bufs, size_t nbufs);

/* ---- reorders --------------------------------------------------------------------- */

/* dst = src (accumulate = 0) or dst += src (accumulate = 1) across layouts. */
struct nn_reorder {
    struct nn_prim p;
    struct nn_mem src, dst;
};

int nn_reorder_init(struct nn_reorder *r, struct nn_dnnl *d, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst, int accumulate, struct err *e);
void nn_reorder_run(struct nn_reorder *r, struct nn_dnnl *d, void *dst, const void *src);
void nn_reorder_destroy(struct nn_reorder *r);

/* A conversion on the way into or out of a primitive, active only where our layout and
 * the primitive's differ (or always, when it accumulates). buf holds the data in the
 * primitive's layout. */
struct nn_convert {
    int active;
    struct nn_reorder r; /* unmade (r.p.prim NULL) for a rounding-only conversion */
    float *buf;          /* owned */
    size_t round_n;      /* emulated bf16: floats of buf rounded after the copy; 0: none */
    size_t add_n;        /* accumulating into the same layout: ours += buf by our own
                          * vector loop (vec.h), not a reorder; floats, 0: a reorder */
};

/* ours -> prim before a primitive reads it */
int nn_convert_in_init(struct nn_convert *c, struct nn_dnnl *d, const dnnl_memory_desc_t *ours,
                       const dnnl_memory_desc_t *prim, struct err *e);
/* ours -> a bf16 operand of a convolution or inner product (src, weights, diff_dst):
 * nn_convert_in_init, except where bf16 is on and the primitive reads fp32 (emulated, or
 * a primitive that native bf16 left in fp32), where it is always active and rounds the
 * copy to bf16. */
int nn_convert_operand_init(struct nn_convert *c, struct nn_dnnl *d,
                            const dnnl_memory_desc_t *ours, const dnnl_memory_desc_t *prim,
                            struct err *e);
/* prim -> ours after a primitive wrote it; accumulate: ours += (always active; where the
 * two layouts are the same, an add loop of ours: oneDNN 2.6 runs a same-layout reorder
 * with a sum post-op in its scalar simple:any kernel, measured ~3 ns an element) */
int nn_convert_out_init(struct nn_convert *c, struct nn_dnnl *d, const dnnl_memory_desc_t *prim,
                        const dnnl_memory_desc_t *ours, int accumulate, struct err *e);
/* The pointer the primitive reads: ours itself or buf after a reorder. */
const float *nn_convert_in(struct nn_convert *c, struct nn_dnnl *d, const float *ours);
/* The pointer the primitive writes (ours or buf), then the reorder into ours. */
float *nn_convert_out_begin(struct nn_convert *c, float *ours);
void nn_convert_out_end(struct nn_convert *c, struct nn_dnnl *d, float *ours);
void nn_convert_destroy(struct nn_convert *c);

/* 1 when oneDNN fell back to a reference implementation (orders of magnitude slower). */
int nn_prim_is_ref(const struct nn_prim *p);

/* ---- memory descriptors ----------------------------------------------------------- */

void nn_md_plain(dnnl_memory_desc_t *md, struct nn_shape s); /* nchw or nc */
void nn_md_any(dnnl_memory_desc_t *md, struct nn_shape s);
/* in's dims in bf16: with format any (tag dnnl_format_tag_any) or a plain tag. */
void nn_md_bf16(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *in, dnnl_format_tag_t tag);

/* A plain descriptor with an explicit tag (weights: oihw, goihw, oi, a). */
void nn_md_tag(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
               dnnl_format_tag_t tag);
size_t nn_md_bytes(const dnnl_memory_desc_t *md);
int nn_md_same(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b);
/* "nChw16c" style name; returns buf */
const char *nn_md_str(const dnnl_memory_desc_t *md, char *buf, size_t cap);

/* How our own loops find element (n,c,h,w) of a plain or channel-blocked tensor
 * (nchw, nhwc, nChw8c, nChw16c, nc): offset = n*sn + (c/blk)*sc + c%blk + h*sh + w*sw. */
struct nn_layout {
    size_t sn, sc, sh, sw;
    int blk;
};

int nn_layout_from_md(struct nn_layout *l, const dnnl_memory_desc_t *md, struct err *e);
void nn_layout_plain(struct nn_layout *l, struct nn_shape s);

static inline size_t nn_layout_off(const struct nn_layout *l, int n, int c, int h, int w)
{
    return (size_t)n * l->sn + (size_t)(c / l->blk) * l->sc + (size_t)(c % l->blk) +
           (size_t)h * l->sh + (size_t)w * l->sw;
}

#endif
