/* layers: every layer of the engine, one .c file each (the pooling family shares pool.c),
 * the plain-loop reference (the spec, on plain NCHW / NF) and the oneDNN fast path (on the
 * layouts oneDNN picks) side by side.
 * nn.h states the conventions: outputs first, backward accumulates into parameter
 * gradients and overwrites the input gradient (NULL skips it).
 *
 * A fast-path state (struct nn_*_fast) is made once per shape by nn_*_fast_init, which
 * creates the primitives and allocates the layer's private buffers (saved statistics,
 * pooling indices, blocked copies of weights); forward/backward then only bind pointers
 * and execute. The state borrows the nn_dnnl context it was made with; it owns its
 * primitives, memory objects and buffers, released by nn_*_fast_destroy (which accepts a
 * zeroed or half-made state). `src_md` arguments are the layout of the incoming tensor;
 * the state's dst_md is the layout of the tensor it produces; gradients use the layout of
 * their tensor. Only convolution and linear fast backwards accept dinp = NULL (they still
 * produce parameter gradients); the others are not to be called without one. Execution
 * errors are sticky in the context (onednn.h).
 * What the model does with a layer is the row each file ends with (layer_type.h). */
#ifndef DDPB_NN_LAYERS_H
#define DDPB_NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"
#include "worker/nn/winograd.h"

/* ==== conv2d (conv2d.c) ============================================================= */

struct nn_conv2d_cfg {
    int cin, cout;
    int kh, kw;
    int sh, sw; /* stride */
    int ph, pw; /* zero padding on both sides */
    int dh, dw; /* dilation, PyTorch's convention: 1 = none */
    int groups; /* divides cin and cout; groups == cin == cout is depthwise */
    int bias;   /* 1: a bias of cout */
};

/* The usual case: a k x k kernel, the same stride and padding both ways, no dilation. */
static inline struct nn_conv2d_cfg nn_conv2d_square(int cin, int cout, int k, int stride,
                                                    int pad, int groups, int bias)
{
    return (struct nn_conv2d_cfg){.cin = cin,
                                  .cout = cout,
                                  .kh = k,
                                  .kw = k,
                                  .sh = stride,
                                  .sw = stride,
                                  .ph = pad,
                                  .pw = pad,
                                  .dh = 1,
                                  .dw = 1,
                                  .groups = groups,
                                  .bias = bias};
}

/* Checks the config against the input (N,Cin,H,W); out gets (N,Cout,OH,OW). */
int nn_conv2d_shape(const struct nn_conv2d_cfg *c, struct nn_shape in, struct nn_shape *out,
                    struct err *e);
size_t nn_conv2d_weight_len(const struct nn_conv2d_cfg *c); /* Cout*(Cin/G)*KH*KW */

/* out (N,Cout,OH,OW) = conv(inp (N,Cin,H,W), weight (Cout,Cin/G,KH,KW)) + bias (Cout|NULL) */
void nn_conv2d_forward(float *out, const float *inp, const float *weight, const float *bias,
                       const struct nn_conv2d_cfg *c, struct nn_shape in);
/* dinp (N,Cin,H,W) =, dweight +=, dbias += (NULL: none) from dout (N,Cout,OH,OW) */
void nn_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const struct nn_conv2d_cfg *c,
                        struct nn_shape in);

struct nn_conv2d_fast {
    struct nn_dnnl *d; /* borrowed */
    struct nn_conv2d_cfg cfg;
    struct nn_shape in, out;
    dnnl_memory_desc_t src_md, dst_md; /* the incoming tensor's layout, the produced one's */
    struct nn_prim fwd, bwd_data, bwd_weights;
    /* where a primitive wants another layout than the tensor (or arena) has */
    struct nn_convert src_in, w_fwd;            /* forward */
    struct nn_convert w_bwd, ddst_bd, dsrc_out; /* backward data */
    struct nn_convert src_bw, ddst_bw, dw_out;  /* backward weights (dw_out accumulates) */
    int w_bwd_shared; /* backward data reads the forward's converted weights */
    struct nn_mem m_src, m_w, m_b, m_dst;          /* forward */
    struct nn_mem m_ddst, m_wbwd, m_dsrc_bwd;      /* backward data */
    struct nn_mem m_src_bw, m_ddst_bw, m_dw, m_db; /* backward weights */
    float *db_buf;                                 /* owned */
    /* a single-pixel input (conv2d.c conv_pixel_init): the layer as a 1x1 convolution on
     * the one kernel tap that reads data; all owned, NULL elsewhere */
    struct nn_conv2d_fast *pix;
    float *w_pix, *dw_pix; /* that tap's weights (cout x cin) and their gradient */
    int tap_y, tap_x;
    /* own: forward and backward data run ddpbench's Winograd (winograd.h; owned), the
     * weight gradient oneDNN's direct; fwd is still made, as the backwards' hint */
    int own;
    struct nn_wino own_fwd, own_bwd;
};

/* train: also the backward primitives; need_dinp: also the input gradient. */
int nn_conv2d_fast_init(struct nn_conv2d_fast *f, struct nn_dnnl *d,
                        const struct nn_conv2d_cfg *c, struct nn_shape in,
                        const dnnl_memory_desc_t *src_md, int train, int need_dinp,
                        struct err *e);
void nn_conv2d_fast_forward(struct nn_conv2d_fast *f, float *out, const float *inp,
                            const float *weight, const float *bias);
void nn_conv2d_fast_backward(struct nn_conv2d_fast *f, float *dinp, float *dweight,
                             float *dbias, const float *dout, const float *inp,
                             const float *weight);
void nn_conv2d_fast_destroy(struct nn_conv2d_fast *f);
/* The algorithm f's forward runs, as a run's env names it (static string): "direct",
 * "winograd-onednn" (oneDNN's Winograd, which exists only for AVX-512: asked for on an
 * AVX2 CPU it falls back to direct, and this says direct) or "winograd-own" (winograd.h). */
const char *nn_conv2d_algo_name(const struct nn_conv2d_fast *f);

/* ==== batch normalization (batchnorm.c) ============================================== */

struct nn_bn_cfg {
    int c;
    float eps;      /* PyTorch: 1e-5 */
    float momentum; /* PyTorch: 0.1; running = (1-m)*running + m*batch */
    int relu;       /* 1: a ReLU fused after (out = relu(bn(x))) */
};

/* Training: normalises with the batch statistics; saves mean (C) and biased var (C) for
 * backward; updates running_mean/var (C) in place (var with the unbiased estimate). */
void nn_bn_forward_train(float *out, float *mean, float *var, float *running_mean,
                         float *running_var, const float *inp, const float *weight,
                         const float *bias, const struct nn_bn_cfg *c, struct nn_shape s);
/* Evaluation: normalises with the running statistics. */
void nn_bn_forward_eval(float *out, const float *inp, const float *weight, const float *bias,
                        const float *running_mean, const float *running_var,
                        const struct nn_bn_cfg *c, struct nn_shape s);
/* Training-mode backward; out is the forward's output (for the fused ReLU's mask). */
void nn_bn_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                    const float *inp, const float *out, const float *mean, const float *var,
                    const float *weight, const struct nn_bn_cfg *c, struct nn_shape s);

struct nn_bn_fast {
    struct nn_dnnl *d;
    struct nn_bn_cfg cfg;
    struct nn_shape s;
    dnnl_memory_desc_t md;
    struct nn_prim fwd_train, fwd_eval, bwd;
    struct nn_mem m_src, m_dst, m_scale, m_shift, m_mean, m_var, m_ws, m_ddst, m_dsrc, m_dscale,
        m_dshift, m_rmean, m_rvar;
    float *mean, *var, *dscale, *dshift; /* owned, (C) each */
    void *ws;                            /* owned: the fused ReLU's mask */
};

int nn_bn_fast_init(struct nn_bn_fast *f, struct nn_dnnl *d, const struct nn_bn_cfg *c,
                    struct nn_shape s, const dnnl_memory_desc_t *md, int train, struct err *e);
void nn_bn_fast_forward(struct nn_bn_fast *f, float *out, float *running_mean,
                        float *running_var, const float *inp, const float *weight,
                        const float *bias, int train);
/* dinp must not be NULL here: oneDNN's backward always writes the input gradient. */
void nn_bn_fast_backward(struct nn_bn_fast *f, float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight);
void nn_bn_fast_destroy(struct nn_bn_fast *f);

/* ==== relu, relu6 (relu.c) =========================================================== */

enum nn_act { NN_ACT_RELU, NN_ACT_RELU6 };

/* out (n) = relu(inp) or clamp(inp, 0, 6); out may be inp (in place). Layout-free. */
void nn_act_forward(float *out, const float *inp, size_t n, enum nn_act a);
/* dinp = dout where 0 < out (< 6 for relu6), else 0: from the output, as PyTorch's in-place
 * ReLU does; dinp may be dout. */
void nn_act_backward(float *dinp, const float *dout, const float *out, size_t n, enum nn_act a);

/* The fast state of an activation, these and GELU alike: one oneDNN eltwise forward and,
 * when training, its backward, which reads the forward's input or output (keep) besides the
 * gradient. */
struct nn_act_fast {
    struct nn_dnnl *d;
    struct nn_prim fwd, bwd;
    struct nn_mem m_src, m_dst, m_keep, m_ddst, m_dsrc;
    int keep_arg; /* DNNL_ARG_DST (a *_use_dst_for_bwd algorithm) or DNNL_ARG_SRC */
};

/* What an activation's eltwise is: the algorithm and its alpha, beta; what its backward
 * reads; the names of the two primitives (static strings, for errors). */
struct nn_act_eltwise {
    dnnl_alg_kind_t alg;
    float alpha, beta;
    int keep_arg;
    const char *fwd_what, *bwd_what;
};

/* The eltwise el on md; train: also its backward. */
int nn_act_fast_make(struct nn_act_fast *f, struct nn_dnnl *d, const struct nn_act_eltwise *el,
                     const dnnl_memory_desc_t *md, int train, struct err *e);
int nn_act_fast_init(struct nn_act_fast *f, struct nn_dnnl *d, enum nn_act a,
                     const dnnl_memory_desc_t *md, int train, struct err *e);
void nn_act_fast_forward(struct nn_act_fast *f, float *out, const float *inp);
/* keep: the forward's output (relu, relu6) or input (GELU) */
void nn_act_fast_backward(struct nn_act_fast *f, float *dinp, const float *dout,
                          const float *keep);
void nn_act_fast_destroy(struct nn_act_fast *f);

/* ==== pooling: max, average, global average, adaptive (pool.c) ===================== */

struct nn_pool_cfg {
    int kh, kw, sh, sw, ph, pw;
    int count_include_pad; /* average pooling; PyTorch's default is 1 */
};

/* Checks the config (padding at most half the kernel, as PyTorch requires); out gets
 * (N,C,OH,OW) with OH = (H + 2ph - kh)/sh + 1 (floor, no ceil_mode). */
int nn_pool_shape(const struct nn_pool_cfg *c, struct nn_shape in, struct nn_shape *out,
                  struct err *e);
/* Global average pooling as a pool config: kernel = the whole plane. */
struct nn_pool_cfg nn_pool_global(struct nn_shape in);

/* out (N,C,OH,OW) = max over each window (padding is -inf) */
void nn_maxpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in);
/* dinp (N,C,H,W) = dout routed to each window's first maximum */
void nn_maxpool_backward(float *dinp, const float *dout, const float *inp,
                         const struct nn_pool_cfg *c, struct nn_shape in);
/* out = window mean; the divisor counts padding when count_include_pad */
void nn_avgpool_forward(float *out, const float *inp, const struct nn_pool_cfg *c,
                        struct nn_shape in);
void nn_avgpool_backward(float *dinp, const float *dout, const struct nn_pool_cfg *c,
                         struct nn_shape in);

/* max: 1 for max pooling, 0 for average */
struct nn_pool_fast {
    struct nn_dnnl *d;
    struct nn_shape in, out;
    dnnl_memory_desc_t src_md, dst_md;
    struct nn_prim fwd, bwd;
    struct nn_mem m_src, m_dst, m_ws, m_ddst, m_dsrc;
    void *ws; /* owned: max pooling's indices */
    /* Max pooling on a channel-blocked layout runs the own loops below instead of
     * oneDNN's primitive (measured slower, see pool.c): layouts and the window index of
     * each output's maximum (owned, one byte per padded output element). */
    int own;
    struct nn_pool_cfg cfg;
    struct nn_layout lx, ly;
    uint8_t *argmax;
    size_t dst_bytes, src_bytes;
};

int nn_pool_fast_init(struct nn_pool_fast *f, struct nn_dnnl *d, int max,
                      const struct nn_pool_cfg *c, struct nn_shape in,
                      const dnnl_memory_desc_t *src_md, int train, struct err *e);
void nn_pool_fast_forward(struct nn_pool_fast *f, float *out, const float *inp);
void nn_pool_fast_backward(struct nn_pool_fast *f, float *dinp, const float *dout);
void nn_pool_fast_destroy(struct nn_pool_fast *f);

/* Adaptive average pooling to (oh, ow) as PyTorch defines it: output cell i averages input
 * rows floor(i*H/oh) .. ceil((i+1)*H/oh)-1 (same for columns). Plain layout only; when H and
 * W divide evenly it is an ordinary average pooling (nn_adaptive_as_pool). */
void nn_adaptive_avgpool_forward(float *out, const float *inp, int oh, int ow,
                                 struct nn_shape in);
void nn_adaptive_avgpool_backward(float *dinp, const float *dout, int oh, int ow,
                                  struct nn_shape in);
/* 1 and c filled when adaptive pooling to (oh, ow) equals an ordinary pooling. */
int nn_adaptive_as_pool(struct nn_pool_cfg *c, int oh, int ow, struct nn_shape in);

/* ==== linear (linear.c) ============================================================== */

struct nn_linear_cfg {
    int in, out;
    int bias;
};

/* out (N,O) = inp (N,I) @ weight (O,I)^T + bias (O|NULL) */
void nn_linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                       const struct nn_linear_cfg *c, int n);
/* dinp (N,I) =, dweight (O,I) +=, dbias (O) += */
void nn_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const struct nn_linear_cfg *c,
                        int n);

struct nn_linear_fast {
    struct nn_dnnl *d;
    struct nn_linear_cfg cfg;
    int n;
    struct nn_prim fwd, bwd_data, bwd_weights;
    struct nn_mem m_src, m_w, m_b, m_dst, m_ddst, m_dsrc, m_bw, m_bsrc, m_bddst, m_dw, m_db;
    float *dw_buf, *db_buf; /* owned */
    /* bf16 (onednn.h): src and weights on the way into forward (backward reads the same
     * converted copies), diff_dst into both backwards; inactive in fp32 */
    struct nn_convert src_cv, w_cv, ddst_cv;
};

/* The input must be plain (N,I): a flatten puts 4-D tensors in that form. */
int nn_linear_fast_init(struct nn_linear_fast *f, struct nn_dnnl *d,
                        const struct nn_linear_cfg *c, int n, int train, int need_dinp,
                        struct err *e);
void nn_linear_fast_forward(struct nn_linear_fast *f, float *out, const float *inp,
                            const float *weight, const float *bias);
void nn_linear_fast_backward(struct nn_linear_fast *f, float *dinp, float *dweight,
                             float *dbias, const float *dout, const float *inp,
                             const float *weight);
void nn_linear_fast_destroy(struct nn_linear_fast *f);

/* ==== dropout (dropout.c) ============================================================ */

struct nn_dropout_cfg {
    float p;         /* probability of zeroing */
    int channelwise; /* 1: Dropout2d, whole (n, c) planes */
};

/* The mask key of one layer at one step: the same (seed, step, layer) always drops the same
 * elements, in forward and in backward, whatever the layout or thread count. */
uint64_t nn_dropout_key(uint64_t seed, uint64_t step, int layer);
/* Training: out = inp * keep / (1 - p), keep drawn per logical element (n,c,h,w) (or per
 * (n,c) when channelwise) from key; evaluation (train = 0): out = inp. The layout says where
 * element (n,c,h,w) lives (nn_layout_plain for the reference); out may be inp. */
void nn_dropout_forward(float *out, const float *inp, const struct nn_dropout_cfg *c,
                        struct nn_shape s, const struct nn_layout *l, uint64_t key, int train);
/* dinp = dout * keep / (1 - p) with the forward's mask; dinp may be dout. */
void nn_dropout_backward(float *dinp, const float *dout, const struct nn_dropout_cfg *c,
                         struct nn_shape s, const struct nn_layout *l, uint64_t key);
/* 1 when element (n,c,h,w) is kept under key (the mask itself, for tests). */
int nn_dropout_keep(const struct nn_dropout_cfg *c, struct nn_shape s, uint64_t key, int n,
                    int ch, int h, int w);

/* ==== residual add (add.c) =========================================================== */

/* out (n) = a + b, then ReLU when relu (ResNet's block end). Works on any layout the two
 * inputs share, padding included (0 + 0 stays 0). */
void nn_add_forward(float *out, const float *a, const float *b, size_t n, int relu);
/* da = db = dout (masked by out > 0 when relu); either may be NULL. */
void nn_add_backward(float *da, float *db, const float *dout, const float *out, size_t n,
                     int relu);

/* ==== channel concatenation (concat.c) =============================================== */

/* out (N,Ca+Cb,H,W) = torch.cat([a, b], 1): a (N,Ca,H,W) then b (N,Cb,H,W), plain. */
void nn_concat_forward(float *out, const float *a, const float *b, struct nn_shape sa,
                       struct nn_shape sb);
/* da (N,Ca,H,W) =, db (N,Cb,H,W) = dout's two channel ranges; either may be NULL. */
void nn_concat_backward(float *da, float *db, const float *dout, struct nn_shape sa,
                        struct nn_shape sb);

/* oneDNN's concat forward (each input in its own layout, the output in the layout the
 * primitive picks: dst_md) and, backward, a reorder of each channel range of the gradient
 * (a_view, b_view: sub-memory views of dst_md) into its input's layout. */
struct nn_concat_fast {
    struct nn_dnnl *d;
    struct nn_prim fwd;
    struct nn_shape sa, sb;
    dnnl_memory_desc_t a_md, b_md, dst_md, a_view, b_view;
    struct nn_mem m_a, m_b, m_dst;
    struct nn_reorder bwd_a, bwd_b;
};

int nn_concat_fast_init(struct nn_concat_fast *f, struct nn_dnnl *d, struct nn_shape sa,
                        struct nn_shape sb, const dnnl_memory_desc_t *a_md,
                        const dnnl_memory_desc_t *b_md, int train, struct err *e);
void nn_concat_fast_forward(struct nn_concat_fast *f, float *out, const float *a,
                            const float *b);
/* da, db: NULL skips that input's gradient */
void nn_concat_fast_backward(struct nn_concat_fast *f, float *da, float *db, const float *dout);
void nn_concat_fast_destroy(struct nn_concat_fast *f);

/* ==== flatten (flatten.c) ============================================================ */

/* (N,C,H,W) -> (N,C*H*W) in PyTorch's order (c, h, w). The reference is a copy; the fast
 * path reorders the incoming layout to plain (and the gradient back). */
void nn_flatten_forward(float *out, const float *inp, struct nn_shape in);
void nn_flatten_backward(float *dinp, const float *dout, struct nn_shape in);

struct nn_flatten_fast {
    struct nn_dnnl *d;
    struct nn_reorder fwd, bwd;
};

int nn_flatten_fast_init(struct nn_flatten_fast *f, struct nn_dnnl *d, struct nn_shape in,
                         const dnnl_memory_desc_t *src_md, int train, struct err *e);
void nn_flatten_fast_forward(struct nn_flatten_fast *f, float *out, const float *inp);
void nn_flatten_fast_backward(struct nn_flatten_fast *f, float *dinp, const float *dout);
void nn_flatten_fast_destroy(struct nn_flatten_fast *f);

/* ==== softmax cross-entropy (xent.c) ================================================= */

/* logits (N,K) plain -> probs (N,K) = softmax; loss = mean over the first n_valid rows of
 * -log probs[label]; correct = how many of them have label as the (first) arg max.
 * A label outside [0, K) is ERR_INVALID. */
int nn_xent_forward(float *probs, double *loss, int *correct, const float *logits,
                    const int32_t *labels, int n, int k, int n_valid, struct err *e);
/* dlogits (N,K) = (probs - onehot(label)) / n_valid for valid rows, 0 for the rest. */
void nn_xent_backward(float *dlogits, const float *probs, const int32_t *labels, int n, int k,
                      int n_valid);

/* ==== transformer layers (GPT-2) =======================================================
 * Sequence tensors are (N,T,C) plain row-major; the rows R = N*T are independent for
 * everything but attention. The matmuls of a transformer block are linear layers over the
 * R rows (linear.c); these are the rest. */

/* ==== token + position embedding (embed.c) ========================================== */

struct nn_embed_cfg {
    int vocab; /* rows of wte */
    int max_t; /* rows of wpe: the longest sequence (GPT-2's n_positions) */
    int c;     /* channels */
};

/* -1 with e (ERR_INVALID, field "tokens") when any of the n token ids in tok is not an
 * integer in [0, vocab): ids travel as floats (exact below 2^24). */
int nn_embed_check(const float *tok, size_t n, int vocab, struct err *e);
/* out (N,T,C) = wte[tok[n][t]] (V,C) + wpe[t] (max_t,C); tok (N,T) checked ids, T <= max_t */
void nn_embed_forward(float *out, const float *tok, const float *wte, const float *wpe,
                      const struct nn_embed_cfg *c, int n, int t);
/* dwte (V,C) +=, dwpe (max_t,C) += from dout (N,T,C); no input gradient (ids) */
void nn_embed_backward(float *dwte, float *dwpe, const float *dout, const float *tok,
                       const struct nn_embed_cfg *c, int n, int t);

/* ==== layer normalization over the last dimension (layernorm.c) ====================== */

#define NN_LAYERNORM_EPS 1e-5f /* PyTorch's nn.LayerNorm default, GPT-2's */

/* out (R,C) = (inp - mean) * rstd * weight (C) + bias (C), row by row; saves mean (R) and
 * rstd (R) = 1/sqrt(biased var + eps) for backward. */
void nn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int rows, int c);
/* dinp (R,C) =, dweight (C) +=, dbias (C) += */
void nn_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int rows, int c);

struct nn_layernorm_fast {
    struct nn_dnnl *d;
    int rows, c;
    struct nn_prim fwd, bwd;
    struct nn_mem m_src, m_dst, m_scale, m_shift, m_mean, m_var, m_ddst, m_dsrc, m_dscale,
        m_dshift;
    float *mean, *var, *dscale, *dshift; /* owned: (R), (R), (C), (C) */
};

int nn_layernorm_fast_init(struct nn_layernorm_fast *f, struct nn_dnnl *d, int rows, int c,
                           int train, struct err *e);
void nn_layernorm_fast_forward(struct nn_layernorm_fast *f, float *out, const float *inp,
                               const float *weight, const float *bias);
/* dweight, dbias accumulate (+=) as the reference's do */
void nn_layernorm_fast_backward(struct nn_layernorm_fast *f, float *dinp, float *dweight,
                                float *dbias, const float *dout, const float *inp,
                                const float *weight);
void nn_layernorm_fast_destroy(struct nn_layernorm_fast *f);

/* ==== GELU, GPT-2's tanh approximation (gelu.c) ====================================== */

/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may be inp */
void nn_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) = dout * gelu'(inp); dinp may be dout */
void nn_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n);

/* An activation's fast state (nn_act_fast_forward, _backward with keep = the input,
 * _destroy) on n floats as a 1-D tensor. */
int nn_gelu_fast_init(struct nn_act_fast *f, struct nn_dnnl *d, size_t n, int train,
                      struct err *e);

/* ==== causal multi-head self-attention (attention.c) ================================= */

struct nn_attention_cfg {
    int c;     /* channels; divisible by heads */
    int heads; /* head size hs = c / heads */
};

/* qkv (N,T,3C): per row q (C) | k (C) | v (C), head h at columns h*hs .. (h+1)*hs-1 of each.
 * att (N,H,T,T) = softmax over s <= t of q_t . k_s / sqrt(hs) (0 where s > t), saved for
 * backward; out (N,T,C) = att @ v, heads side by side (GPT-2's layout before c_proj). */
void nn_attention_forward(float *out, float *att, const float *qkv,
                          const struct nn_attention_cfg *c, int n, int t);
/* dqkv (N,T,3C) = from dout (N,T,C); datt (N,H,T,T) is scratch */
void nn_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, const struct nn_attention_cfg *c, int n, int t);

/* The fast path: oneDNN batched matmuls for q k^T, att v and their gradients, reading q, k
 * and v in place through strided descriptors; the masked softmax and its backward are own
 * loops. It owns every buffer it needs (att, datt), so forward saves what backward
 * reads. */
struct nn_attention_fast {
    struct nn_dnnl *d;
    struct nn_attention_cfg cfg;
    int n, t;
    struct nn_prim qk, av, d_att, d_v, d_q, d_k; /* forward: qk, av; backward: the rest */
    /* per matmul {src, weights, dst}: each argument has its own strided view (k as k^T,
     * att as att^T, ...), so each gets its own memory object */
    struct nn_mem m_qk[3], m_av[3], m_datt[3], m_dv[3], m_dq[3], m_dk[3];
    float *att, *datt; /* owned, (N,H,T,T) each (datt only when train; holds dpre) */
};

int nn_attention_fast_init(struct nn_attention_fast *f, struct nn_dnnl *d,
                           const struct nn_attention_cfg *c, int n, int t, int train,
                           struct err *e);
void nn_attention_fast_forward(struct nn_attention_fast *f, float *out, const float *qkv);
void nn_attention_fast_backward(struct nn_attention_fast *f, float *dqkv, const float *dout,
                                const float *qkv);
void nn_attention_fast_destroy(struct nn_attention_fast *f);

#endif
