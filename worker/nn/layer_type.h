/* layer_type: what a layer type is to the model (model.c), one row per op, as coll_ops.h is
 * for the collectives: its name, its reference forward and backward, its fast (oneDNN)
 * init / forward / backward / destroy, and what the graph needs of it (floats its
 * reference path saves for backward, floats of non-trained state, checks).
 *
 * Decision: each layer file defines its own row (`const struct nn_layer_type
 * nn_layer_conv2d` at the end of conv2d.c) from its kernels, and model.c holds only the
 * op -> row table, so a layer is a file and a row: no switch on the op in the model. The
 * glue that is the same for every layer is written once here: NN_LAYER_FAST_STATE makes
 * the fast_forward / fast_backward / fast_destroy that only hand the layer's fast state
 * to its kernels, NN_LAYER_ROW fills a row's conventionally named functions, and a row
 * names what its fast path runs as data (impl_prim, impl) unless that is chosen at init.
 * A row function receives everything it reads resolved into struct nn_layer_args (tensors,
 * parameter and gradient slices, running buffers), so a layer file calls nothing of
 * model.c's and the model never needs to know a layer's internals.
 *
 * This header is private to worker/nn: model.c and the layer files. Ownership: rows are
 * static constants; a node's fast state (n->fast) is owned by the model, created by
 * fast_init into the zeroed union and released by fast_destroy. */
#ifndef DDPB_NN_LAYER_TYPE_H
#define DDPB_NN_LAYER_TYPE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/nn/graph.h"
#include "worker/nn/layers.h"
#include "worker/nn/onednn.h"

struct nn_tensor {
    struct nn_shape shape; /* n = 1 while building, the batch once prepared */
    int producer;          /* node, -1 for the input */
    int needs_grad;
    dnnl_memory_desc_t md; /* fast backend: the layout */
    size_t bytes;          /* of data, and of grad (same layout) */
    size_t data_off, grad_off;
    float *data, *grad;
    int grad_written; /* during backward */
    int grad_owner;   /* the tensor whose gradient buffer this one uses: itself unless an
                       * add shares its output's with it (model_grad_share) */
    int seq;          /* a sequence (N,T,C) held as (N,T,C,1): rows N*T */
};

/* adaptive pooling: an ordinary pooling where the sizes allow (as_pool), else plain loops
 * between conversions to and from the plain layout the fast path cannot avoid */
struct nn_adapt_fast {
    int as_pool;
    struct nn_pool_fast pool;
    struct nn_convert x_in, dx_out;
};

/* an add converts its second input (and that input's gradient) when it arrives in another
 * layout than the first */
struct nn_add_fast {
    struct nn_convert b_in, db_out;
};

union nn_node_fast {
    struct nn_conv2d_fast conv;
    struct nn_bn_fast bn;
    struct nn_act_fast act;
    struct nn_pool_fast pool;
    struct nn_linear_fast linear;
    struct nn_flatten_fast flatten;
    struct nn_adapt_fast adapt;
    struct nn_add_fast add;
    struct nn_layernorm_fast ln;
    struct nn_attention_fast attn;
    struct nn_concat_fast concat;
};

struct nn_node {
    enum nn_op op;
    char name[48];
    int in[2], nin, out;
    union nn_layer_cfg cfg;
    int first_param, nparams;
    size_t param_off, param_len;
    int seq;        /* linear over a sequence's rows */
    int tied_param; /* linear: the earlier parameter tensor that is its weight, -1 none */
    size_t buf_off; /* its non-trained state (batch norm: running mean (C) then var (C)) */
    /* prepared */
    union nn_node_fast *fast; /* owned, fast backend */
    size_t save_off;          /* reference path: what the row's saved() counts */
    float *save;
    struct nn_layout layout; /* dropout: where its elements live */
};

/* One node's step, resolved by the model: pointers are borrowed for the call. */
struct nn_layer_args {
    struct nn_node *n;
    const struct nn_tensor *x, *x1; /* the inputs (x1: the second, else NULL) */
    struct nn_tensor *y;            /* the output */
    float *w, *b;                   /* parameters 0 and 1 (a tied weight is w), or NULL */
    float *dw, *db;                 /* their gradients */
    float *run;                     /* the node's slice of the buffer arena */
    float *din0, *din1;             /* backward: the inputs' gradients to write, NULL to skip */
    float *scratch;                 /* backward: room for an input gradient no one reads */
    struct nn_dnnl *dnnl;
    int train;
    int dinp;     /* fast_init: backward computes the input's gradient */
    uint64_t key; /* NN_LAYER_RANDOM: its random stream for this step */
};

enum nn_layer_flags {
    NN_LAYER_RANDOM = 1 << 0,    /* draws from a stream keyed by (seed, step, layer) */
    NN_LAYER_SEQ_START = 1 << 1, /* its output is a sequence whatever its input */
    NN_LAYER_SEQ_END = 1 << 2,   /* its output is no sequence whatever its input */
};

struct nn_layer_type {
    const char *name; /* default node names and nn_model_print */
    unsigned flags;   /* enum nn_layer_flags */
    /* the reference path (plain layouts) */
    void (*forward)(const struct nn_layer_args *a);
    void (*backward)(const struct nn_layer_args *a);
    /* floats the reference path saves for backward (and its scratch); NULL: none */
    size_t (*saved)(const struct nn_node *n, const struct nn_tensor *x, int train);
    /* the fast path: fast_init makes n->fast (zeroed) from x's layout and sets y->md; it
     * gets train and dinp */
    int (*fast_init)(const struct nn_layer_args *a, struct err *e);
    void (*fast_forward)(const struct nn_layer_args *a);
    void (*fast_backward)(const struct nn_layer_args *a);
    void (*fast_destroy)(union nn_node_fast *f); /* NULL: nothing to release */
    /* what runs, for the print: the first of fast_impl (a choice made at fast_init),
     * impl_prim (oneDNN's implementation of the primitive at that offset of the union,
     * NN_LAYER_PRIM) and impl (a fixed name) that the row sets */
    const char *(*fast_impl)(const union nn_node_fast *f);
    size_t impl_prim;
    const char *impl;
    /* non-trained state in the buffer arena: floats of it, and its initial values; NULL
     * none */
    size_t (*buffers)(const union nn_layer_cfg *c);
    void (*buffers_init)(float *buf, const union nn_layer_cfg *c);
    /* checks: at prepare, of the batch; at forward, of the model's input when the layer
     * is the first (token ids index a table); NULL none */
    int (*check_batch)(const struct nn_node *n, const struct nn_tensor *x, int train,
                       struct err *e);
    int (*check_input)(const struct nn_node *n, const float *x, size_t numel, struct err *e);
};

/* A row's impl_prim: where primitive `path` (member.prim) lies in the union. Never 0: every
 * fast state begins with its context pointer, so 0 stands for none. */
#define NN_LAYER_PRIM(path) offsetof(union nn_node_fast, path)

/* The glue of a layer with a fast state, written once: its row's fast_forward,
 * fast_backward and fast_destroy (k_row_fast_*), which hand the union's `member` to
 * nn_kern_fast_forward, _backward and _destroy (kern: k, or the kernels it shares, as
 * GELU runs an activation's). fwd and bwd are those
 * kernels' other arguments, a parenthesised list of expressions of the row function's
 * argument `a` (const struct nn_layer_args *). */
#define NN_LAYER_ARGS(...) __VA_ARGS__
#define NN_LAYER_FAST_STATE(k, kern, member, fwd, bwd)                                         \
    static void k##_row_fast_forward(const struct nn_layer_args *a)                            \
    {                                                                                          \
        nn_##kern##_fast_forward(&a->n->fast->member, NN_LAYER_ARGS fwd);                      \
    }                                                                                          \
    static void k##_row_fast_backward(const struct nn_layer_args *a)                           \
    {                                                                                          \
        nn_##kern##_fast_backward(&a->n->fast->member, NN_LAYER_ARGS bwd);                     \
    }                                                                                          \
    static void k##_row_fast_destroy(union nn_node_fast *f)                                    \
    {                                                                                          \
        nn_##kern##_fast_destroy(&f->member);                                                  \
    }

/* The members of a row whose functions have the conventional names k_row_forward,
 * k_row_backward, k_row_fast_init, k_row_fast_forward, k_row_fast_backward and
 * k_row_fast_destroy. */
#define NN_LAYER_ROW(k)                                                                        \
    .forward = k##_row_forward, .backward = k##_row_backward, .fast_init = k##_row_fast_init,  \
    .fast_forward = k##_row_fast_forward, .fast_backward = k##_row_fast_backward,              \
    .fast_destroy = k##_row_fast_destroy

/* The row of op (model.c's table), or NULL outside the ops. */
const struct nn_layer_type *nn_layer_type_get(enum nn_op op);

/* Rows a linear layer or layer norm iterates over: N, or N*T for a sequence. */
static inline int nn_tensor_rows(const struct nn_tensor *t)
{
    return t->seq ? t->shape.n * t->shape.c : t->shape.n;
}

/* Channels of a row: F of (N,F), C of a sequence (N,T,C,1). */
static inline int nn_tensor_row_len(const struct nn_tensor *t)
{
    return t->seq ? t->shape.h : t->shape.c;
}

/* the rows, each in its layer's file */
extern const struct nn_layer_type nn_layer_conv2d;    /* conv2d.c */
extern const struct nn_layer_type nn_layer_bn;        /* batchnorm.c */
extern const struct nn_layer_type nn_layer_act;       /* relu.c */
extern const struct nn_layer_type nn_layer_maxpool;   /* pool.c */
extern const struct nn_layer_type nn_layer_avgpool;   /* pool.c */
extern const struct nn_layer_type nn_layer_adaptive;  /* pool.c */
extern const struct nn_layer_type nn_layer_linear;    /* linear.c */
extern const struct nn_layer_type nn_layer_dropout;   /* dropout.c */
extern const struct nn_layer_type nn_layer_add;       /* add.c */
extern const struct nn_layer_type nn_layer_flatten;   /* flatten.c */
extern const struct nn_layer_type nn_layer_embed;     /* embed.c */
extern const struct nn_layer_type nn_layer_layernorm; /* layernorm.c */
extern const struct nn_layer_type nn_layer_gelu;      /* gelu.c */
extern const struct nn_layer_type nn_layer_attention; /* attention.c */
extern const struct nn_layer_type nn_layer_concat;    /* concat.c */

#endif
