/* model: the layer graph, parameter registration and initialisation, preparation for a
 * batch (layouts, primitives, one workspace) and the forward / loss / backward step with
 * its per-layer gradient hook (see model.h).
 *
 * Key decision: a tensor's layout is decided by its producer while preparing, in layer
 * order; the consumers adapt (a convolution reorders an input it cannot read, a linear
 * layer needs a flatten first, an add converts its second input to the first's layout),
 * so in a CNN everything between the first convolution and the flatten stays in oneDNN's
 * blocked format.
 *
 * What a layer does is its row (layer_type.h), defined in its own file; this file holds the
 * op -> row table and dispatches every step through it, never on the op itself. */
#include "worker/nn/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/nn/layer_type.h"
#include "worker/nn/vec.h"

/* The layer types, by op: one row each, defined in the layer's file. */
static const struct nn_layer_type *const layer_types[NN_OP_COUNT] = {
    [NN_OP_CONV] = &nn_layer_conv2d,     [NN_OP_BN] = &nn_layer_bn,
    [NN_OP_ACT] = &nn_layer_act,         [NN_OP_MAXPOOL] = &nn_layer_maxpool,
    [NN_OP_AVGPOOL] = &nn_layer_avgpool, [NN_OP_ADAPTIVE_AVGPOOL] = &nn_layer_adaptive,
    [NN_OP_LINEAR] = &nn_layer_linear,   [NN_OP_DROPOUT] = &nn_layer_dropout,
    [NN_OP_ADD] = &nn_layer_add,         [NN_OP_FLATTEN] = &nn_layer_flatten,
    [NN_OP_EMBED] = &nn_layer_embed,     [NN_OP_LAYERNORM] = &nn_layer_layernorm,
    [NN_OP_GELU] = &nn_layer_gelu,       [NN_OP_ATTENTION] = &nn_layer_attention,
    [NN_OP_CONCAT] = &nn_layer_concat,
};

const struct nn_layer_type *nn_layer_type_get(enum nn_op op)
{
    return op >= 0 && op < NN_OP_COUNT ? layer_types[op] : NULL;
}

static const struct nn_layer_type *node_type(const struct nn_node *n)
{
    return layer_types[n->op];
}

void nn_model_init(struct nn_model *m)
{
    memset(m, 0, sizeof *m);
    m->conv_algo = NN_CONV_AUTO;
}

/* ---- building --------------------------------------------------------------------- */

static int model_fail(struct nn_model *m, enum err_code code, const char *who, const char *msg)
{
    if (!m->build_failed)
        err_set(&m->build_err, code, "model", "%s: %s", who, msg);
    m->build_failed = 1;
    return -1;
}

static void *model_grow(void *p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return p;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *q = realloc(p, (size_t)ncap * elem);
    if (q) {
        memset((char *)q + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
        *cap = ncap;
    }
    return q;
}

static int model_add_tensor(struct nn_model *m, struct nn_shape s, int producer, int needs_grad)
{
    struct nn_tensor *t = model_grow(m->tensors, &m->cap_tensors, m->ntensors + 1, sizeof *t);
    if (!t)
        return model_fail(m, ERR_NOMEM, "tensors", "out of memory");
    m->tensors = t;
    t += m->ntensors;
    t->shape = s;
    t->producer = producer;
    t->needs_grad = needs_grad;
    return m->ntensors++;
}

static int model_check_input(struct nn_model *m, int x)
{
    if (m->build_failed)
        return -1;
    if (m->finished)
        return model_fail(m, ERR_INVALID, "build", "the model is finished");
    if (x < 0 || x >= m->ntensors)
        return model_fail(m, ERR_INVALID, "build", "no such tensor");
    return 0;
}

/* Appends a node reading in0 (and in1 >= 0) and producing a tensor of shape out; returns the
 * node or NULL (sticky error). */
static struct nn_node *model_add_node(struct nn_model *m, enum nn_op op, const char *name,
                                      int in0, int in1)
{
    if (model_check_input(m, in0) || (in1 >= 0 && model_check_input(m, in1)))
        return NULL;
    struct nn_node *n = model_grow(m->nodes, &m->cap_nodes, m->nnodes + 1, sizeof *n);
    if (!n) {
        model_fail(m, ERR_NOMEM, "nodes", "out of memory");
        return NULL;
    }
    m->nodes = n;
    n += m->nnodes;
    memset(n, 0, sizeof *n);
    n->op = op;
    if (name && *name)
        snprintf(n->name, sizeof n->name, "%s", name);
    else
        snprintf(n->name, sizeof n->name, "%s%d", layer_types[op]->name, m->nnodes);
    n->in[0] = in0;
    n->in[1] = in1;
    n->nin = in1 >= 0 ? 2 : 1;
    n->out = -1;
    n->first_param = m->nparam_tensors;
    n->param_off = m->nparams;
    n->tied_param = -1;
    m->nnodes++;
    return n;
}

/* The output tensor of the node just added; needs a gradient when any input does or the
 * node has parameters. */
static int model_node_output(struct nn_model *m, struct nn_node *n, struct nn_shape s)
{
    int g = n->nparams > 0 || n->tied_param >= 0, seq = 1;
    for (int j = 0; j < n->nin; j++) {
        g |= m->tensors[n->in[j]].needs_grad;
        seq &= m->tensors[n->in[j]].seq;
    }
    unsigned flags = node_type(n)->flags;
    n->out = model_add_tensor(m, s, (int)(n - m->nodes), g);
    if (n->out >= 0) /* shape-keeping layers keep a sequence a sequence */
        m->tensors[n->out].seq = (seq && !(flags & NN_LAYER_SEQ_END)) ||
                                 (flags & NN_LAYER_SEQ_START) != 0;
    return n->out;
}

static int model_add_param(struct nn_model *m, struct nn_node *n, const char *suffix,
                           size_t len, int fan_in, int fan_out, enum nn_init init, float value)
{
    struct nn_param *p = model_grow(m->param_info, &m->cap_params, m->nparam_tensors + 1,
                                    sizeof *p);
    if (!p)
        return model_fail(m, ERR_NOMEM, "parameters", "out of memory");
    m->param_info = p;
    p += m->nparam_tensors++;
    snprintf(p->name, sizeof p->name, "%s.%s", n->name, suffix);
    p->node = (int)(n - m->nodes);
    p->offset = m->nparams;
    p->len = len;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    p->init = init;
    p->value = value;
    p->origin = -1;
    m->nparams += len;
    n->nparams++;
    n->param_len += len;
    return 0;
}

/* Reserves the node's non-trained state (its row's buffers) in the buffer arena; its
 * configuration is set. */
static void model_add_buffers(struct nn_model *m, struct nn_node *n)
{
    const struct nn_layer_type *t = node_type(n);
    n->buf_off = m->nbuffers;
    m->nbuffers += t->buffers ? t->buffers(&n->cfg) : 0;
}

int nn_model_input(struct nn_model *m, int c, int h, int w)
{
    if (m->build_failed)
        return -1;
    if (m->ntensors > 0)
        return model_fail(m, ERR_INVALID, "input", "the model has an input already");
    if (c < 1 || h < 1 || w < 1 || (int64_t)c * h * w > (INT64_C(1) << 30))
        return model_fail(m, ERR_INVALID, "input", "bad input shape");
    return model_add_tensor(m, nn_shape4(1, c, h, w), -1, 0);
}

static int model_err_from(struct nn_model *m, struct err *e)
{
    if (!m->build_failed)
        m->build_err = *e;
    m->build_failed = 1;
    return -1;
}

int nn_model_conv2d(struct nn_model *m, const char *name, int x, const struct nn_conv2d_cfg *c)
{
    struct nn_node *n = model_add_node(m, NN_OP_CONV, name, x, -1);
    if (!n)
        return -1;
    struct nn_shape out;
    struct err e;
    if (nn_conv2d_shape(c, m->tensors[x].shape, &out, &e))
        return model_err_from(m, &e);
    n->cfg.conv = *c;
    int rf = c->kh * c->kw;
    int fan_in = c->cin / c->groups * rf, fan_out = c->cout / c->groups * rf;
    if (model_add_param(m, n, "weight", nn_conv2d_weight_len(c), fan_in, fan_out,
                        NN_INIT_DEFAULT, 0) ||
        (c->bias &&
         model_add_param(m, n, "bias", (size_t)c->cout, fan_in, fan_out, NN_INIT_DEFAULT, 0)))
        return -1;
    return model_node_output(m, n, out);
}

/* A node of op on x, whose input must have ndims dimensions (need: the message if not);
 * NULL on failure, the model's build error set. */
static struct nn_node *model_add_node_nd(struct nn_model *m, enum nn_op op, const char *name,
                                         int x, int ndims, const char *need)
{
    struct nn_node *n = model_add_node(m, op, name, x, -1);
    if (n && m->tensors[x].shape.ndims != ndims) {
        model_fail(m, ERR_INVALID, n->name, need);
        return NULL;
    }
    return n;
}

int nn_model_batchnorm(struct nn_model *m, const char *name, int x, int relu)
{
    return nn_model_batchnorm_eps(m, name, x, relu, 1e-5f);
}

int nn_model_batchnorm_eps(struct nn_model *m, const char *name, int x, int relu, float eps)
{
    struct nn_node *n = model_add_node_nd(m, NN_OP_BN, name, x, 4,
                                          "batch norm needs a 4-D input");
    if (!n)
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    n->cfg.bn = (struct nn_bn_cfg){.c = s.c, .eps = eps, .momentum = 0.1f, .relu = relu};
    if (model_add_param(m, n, "weight", (size_t)s.c, s.c, s.c, NN_INIT_CONST, 1.0f) ||
        model_add_param(m, n, "bias", (size_t)s.c, s.c, s.c, NN_INIT_CONST, 0.0f))
        return -1;
    model_add_buffers(m, n);
    return model_node_output(m, n, s);
}

int nn_model_act(struct nn_model *m, const char *name, int x, enum nn_act a)
{
    struct nn_node *n = model_add_node(m, NN_OP_ACT, name, x, -1);
    if (!n)
        return -1;
    n->cfg.act = a;
    return model_node_output(m, n, m->tensors[x].shape);
}

static int model_pool(struct nn_model *m, enum nn_op op, const char *name, int x,
                      struct nn_pool_cfg c)
{
    struct nn_node *n = model_add_node(m, op, name, x, -1);
    if (!n)
        return -1;
    struct nn_shape out;
    struct err e;
    if (nn_pool_shape(&c, m->tensors[x].shape, &out, &e))
        return model_err_from(m, &e);
    n->cfg.pool = c;
    return model_node_output(m, n, out);
}

int nn_model_maxpool(struct nn_model *m, const char *name, int x, int k, int s, int p)
{
    struct nn_pool_cfg c = {.kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p};
    return model_pool(m, NN_OP_MAXPOOL, name, x, c);
}

int nn_model_avgpool(struct nn_model *m, const char *name, int x, int k, int s, int p)
{
    struct nn_pool_cfg c = {
        .kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p, .count_include_pad = 1};
    return model_pool(m, NN_OP_AVGPOOL, name, x, c);
}

int nn_model_global_avgpool(struct nn_model *m, const char *name, int x)
{
    if (model_check_input(m, x))
        return -1;
    return model_pool(m, NN_OP_AVGPOOL, name, x, nn_pool_global(m->tensors[x].shape));
}

int nn_model_adaptive_avgpool(struct nn_model *m, const char *name, int x, int oh, int ow)
{
    struct nn_node *n = model_add_node(m, NN_OP_ADAPTIVE_AVGPOOL, name, x, -1);
    if (!n)
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (s.ndims != 4 || oh < 1 || ow < 1)
        return model_fail(m, ERR_INVALID, n->name, "adaptive pooling needs a 4-D input");
    n->cfg.adapt.oh = oh;
    n->cfg.adapt.ow = ow;
    return model_node_output(m, n, nn_shape4(s.n, s.c, oh, ow));
}

int nn_model_linear(struct nn_model *m, const char *name, int x, int out, int bias)
{
    struct nn_node *n = model_add_node_nd(m, NN_OP_LINEAR, name, x, 2,
                                          "linear needs a 2-D input (flatten first)");
    if (!n)
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (out < 1)
        return model_fail(m, ERR_INVALID, n->name, "linear needs outputs");
    n->cfg.linear = (struct nn_linear_cfg){.in = s.c, .out = out, .bias = bias};
    if (model_add_param(m, n, "weight", (size_t)out * s.c, s.c, out, NN_INIT_DEFAULT, 0) ||
        (bias && model_add_param(m, n, "bias", (size_t)out, s.c, out, NN_INIT_DEFAULT, 0)))
        return -1;
    return model_node_output(m, n, nn_shape2(s.n, out));
}

int nn_model_dropout(struct nn_model *m, const char *name, int x, float p, int channelwise)
{
    struct nn_node *n = model_add_node(m, NN_OP_DROPOUT, name, x, -1);
    if (!n)
        return -1;
    if (!(p >= 0 && p <= 1))
        return model_fail(m, ERR_INVALID, n->name, "dropout probability outside [0, 1]");
    n->cfg.dropout = (struct nn_dropout_cfg){.p = p, .channelwise = channelwise};
    return model_node_output(m, n, m->tensors[x].shape);
}

int nn_model_add(struct nn_model *m, const char *name, int a, int b, int relu)
{
    struct nn_node *n = model_add_node(m, NN_OP_ADD, name, a, b);
    if (!n)
        return -1;
    struct nn_shape sa = m->tensors[a].shape, sb = m->tensors[b].shape;
    if (memcmp(&sa, &sb, sizeof sa) != 0)
        return model_fail(m, ERR_INVALID, n->name, "add of tensors of different shapes");
    n->cfg.add_relu = relu;
    return model_node_output(m, n, sa);
}

int nn_model_concat(struct nn_model *m, const char *name, int a, int b)
{
    struct nn_node *n = model_add_node(m, NN_OP_CONCAT, name, a, b);
    if (!n)
        return -1;
    struct nn_shape sa = m->tensors[a].shape, sb = m->tensors[b].shape;
    if (sa.ndims != 4 || sb.ndims != 4 || sa.h != sb.h || sa.w != sb.w || m->tensors[a].seq ||
        m->tensors[b].seq)
        return model_fail(m, ERR_INVALID, n->name,
                          "concat of tensors that differ in height or width");
    sa.c += sb.c;
    return model_node_output(m, n, sa);
}

int nn_model_flatten(struct nn_model *m, const char *name, int x)
{
    struct nn_node *n = model_add_node(m, NN_OP_FLATTEN, name, x, -1);
    if (!n)
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (nn_shape_sample(s) > INT32_MAX) /* a 2-D shape's features are an int */
        return model_fail(m, ERR_TOO_LARGE, n->name, "more than 2^31 features per sample");
    return model_node_output(m, n, nn_shape2(s.n, (int)nn_shape_sample(s)));
}

/* ---- sequence layers (GPT-2) ---------------------------------------------------------- */

/* The node just added reads a sequence (N,T,C) (held as (N,T,C,1)); 0 or a sticky error. */
static int model_need_seq(struct nn_model *m, const struct nn_node *n, int x)
{
    if (!m->tensors[x].seq)
        return model_fail(m, ERR_INVALID, n->name, "needs a sequence (N,T,C) input");
    return 0;
}

int nn_model_embed(struct nn_model *m, const char *name, int x, int vocab, int max_t, int c)
{
    struct nn_node *n = model_add_node(m, NN_OP_EMBED, name, x, -1);
    if (!n)
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (x != 0 || s.c != 1 || s.h != 1)
        return model_fail(m, ERR_INVALID, n->name, "embeds the model's (N,1,1,T) token input");
    if (vocab < 1 || c < 1 || max_t < s.w)
        return model_fail(m, ERR_INVALID, n->name, "sequence longer than the position table");
    n->cfg.embed = (struct nn_embed_cfg){.vocab = vocab, .max_t = max_t, .c = c};
    if (model_add_param(m, n, "wte.weight", (size_t)vocab * c, c, vocab, NN_INIT_NORMAL,
                        0.02f) ||
        model_add_param(m, n, "wpe.weight", (size_t)max_t * c, c, max_t, NN_INIT_NORMAL, 0.02f))
        return -1;
    return model_node_output(m, n, nn_shape4(s.n, s.w, c, 1));
}

int nn_model_layernorm(struct nn_model *m, const char *name, int x)
{
    struct nn_node *n = model_add_node(m, NN_OP_LAYERNORM, name, x, -1);
    if (!n || model_need_seq(m, n, x))
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (model_add_param(m, n, "weight", (size_t)s.h, s.h, s.h, NN_INIT_CONST, 1.0f) ||
        model_add_param(m, n, "bias", (size_t)s.h, s.h, s.h, NN_INIT_CONST, 0.0f))
        return -1;
    return model_node_output(m, n, s);
}

int nn_model_gelu(struct nn_model *m, const char *name, int x)
{
    struct nn_node *n = model_add_node(m, NN_OP_GELU, name, x, -1);
    if (!n)
        return -1;
    return model_node_output(m, n, m->tensors[x].shape);
}

int nn_model_attention(struct nn_model *m, const char *name, int qkv, int heads)
{
    struct nn_node *n = model_add_node(m, NN_OP_ATTENTION, name, qkv, -1);
    if (!n || model_need_seq(m, n, qkv))
        return -1;
    struct nn_shape s = m->tensors[qkv].shape;
    if (s.h % 3 || heads < 1 || (s.h / 3) % heads)
        return model_fail(m, ERR_INVALID, n->name,
                          "attention needs (N,T,3C) with C divisible by the heads");
    n->cfg.attn = (struct nn_attention_cfg){.c = s.h / 3, .heads = heads};
    return model_node_output(m, n, nn_shape4(s.n, s.c, s.h / 3, 1));
}

int nn_model_seq_linear(struct nn_model *m, const char *name, int x, int out, int bias)
{
    struct nn_node *n = model_add_node(m, NN_OP_LINEAR, name, x, -1);
    if (!n || model_need_seq(m, n, x))
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (out < 1)
        return model_fail(m, ERR_INVALID, n->name, "linear needs outputs");
    n->seq = 1;
    n->cfg.linear = (struct nn_linear_cfg){.in = s.h, .out = out, .bias = bias};
    if (model_add_param(m, n, "weight", (size_t)out * s.h, s.h, out, NN_INIT_DEFAULT, 0) ||
        (bias && model_add_param(m, n, "bias", (size_t)out, s.h, out, NN_INIT_DEFAULT, 0)))
        return -1;
    return model_node_output(m, n, nn_shape4(s.n, s.c, out, 1));
}

int nn_model_tied_linear(struct nn_model *m, const char *name, int x, int param)
{
    struct nn_node *n = model_add_node(m, NN_OP_LINEAR, name, x, -1);
    if (!n || model_need_seq(m, n, x))
        return -1;
    struct nn_shape s = m->tensors[x].shape;
    if (param < 0 || param >= m->nparam_tensors || m->param_info[param].len % (size_t)s.h)
        return model_fail(m, ERR_INVALID, n->name, "tied weight is not a (V, C) parameter");
    n->seq = 1;
    n->tied_param = param;
    int out = (int)(m->param_info[param].len / (size_t)s.h);
    n->cfg.linear = (struct nn_linear_cfg){.in = s.h, .out = out, .bias = 0};
    return model_node_output(m, n, nn_shape4(s.n, s.c, out, 1));
}

int nn_model_finish(struct nn_model *m, struct err *e)
{
    if (m->build_failed) {
        if (e)
            *e = m->build_err;
        return -1;
    }
    const struct nn_tensor *y = m->nnodes ? &m->tensors[m->nodes[m->nnodes - 1].out] : NULL;
    if (!y || (!m->stage && y->shape.ndims != 2 && !y->seq))
        return err_set(e, ERR_INVALID, "model",
                       "a model must end in a 2-D (N, classes) or a sequence (N, T, classes) "
                       "layer");
    m->finished = 1;
    return 0;
}

/* ---- parameters --------------------------------------------------------------------- */

/* Fills p's values [off, off+n) from r. */
static void model_init_chunk(const struct nn_param *p, float *w, size_t n, struct nn_rng *r)
{
    double bound = 1.0 / sqrt((double)(p->fan_in > 0 ? p->fan_in : 1));
    switch (p->init) {
    case NN_INIT_DEFAULT: nn_rng_fill_uniform(r, w, n, (float)-bound, (float)bound); break;
    case NN_INIT_KAIMING_NORMAL_OUT:
        nn_rng_fill_normal(r, w, n, 0, (float)sqrt(2.0 / (p->fan_out > 0 ? p->fan_out : 1)));
        break;
    case NN_INIT_NORMAL: nn_rng_fill_normal(r, w, n, 0, p->value); break;
    case NN_INIT_CONST:
        for (size_t i = 0; i < n; i++)
            w[i] = p->value;
        break;
    }
}

/* Each 64K-value chunk of each parameter draws from its own stream keyed by (seed,
 * parameter, chunk): the values do not depend on the thread count, and big models
 * initialise in parallel. */
static void model_init_param(const struct nn_param *p, int index, float *w, uint64_t seed)
{
    enum { CHUNK = 1 << 16 };
    long chunks = (long)((p->len + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        struct nn_rng r;
        nn_rng_seed(&r, nn_hash64(seed) ^
                            nn_hash64(((uint64_t)(unsigned)index << 32) | (uint64_t)c));
        size_t off = (size_t)c * CHUNK, n = p->len - off < CHUNK ? p->len - off : CHUNK;
        model_init_chunk(p, w + off, n, &r);
    }
}

int nn_model_init_params(struct nn_model *m, uint64_t seed, struct err *e)
{
    if (!m->finished)
        return err_set(e, ERR_INVALID, "model", "init_params before nn_model_finish");
    if (m->arenas_borrowed)
        return err_set(e, ERR_INVALID, "model", "init_params on a model sharing arenas");
    nn_arena_free(&m->params);
    nn_arena_free(&m->grads);
    nn_arena_free(&m->buffers);
    if (nn_arena_alloc(&m->params, m->nparams, e) || nn_arena_alloc(&m->grads, m->nparams, e) ||
        nn_arena_alloc(&m->buffers, m->nbuffers, e))
        return -1;
    m->seed = seed;
    for (int i = 0; i < m->nparam_tensors; i++)
        model_init_param(&m->param_info[i], i, m->params.data + m->param_info[i].offset, seed);
    for (int i = 0; i < m->nnodes; i++) {
        const struct nn_node *n = &m->nodes[i];
        if (node_type(n)->buffers_init)
            node_type(n)->buffers_init(m->buffers.data + n->buf_off, &n->cfg);
    }
    return 0;
}

const struct nn_param *nn_model_param_info(const struct nn_model *m, int *count)
{
    *count = m->nparam_tensors;
    return m->param_info;
}

void nn_model_set_init(struct nn_model *m, int param, enum nn_init init, float value)
{
    if (param >= 0 && param < m->nparam_tensors) {
        m->param_info[param].init = init;
        m->param_info[param].value = value;
    }
}

size_t nn_model_param_count(const struct nn_model *m)
{
    return m->nparams;
}

int nn_model_grad_sizes_reverse(const struct nn_model *m, size_t *sizes, int cap)
{
    for (int i = 0; i < m->nparam_tensors && i < cap; i++)
        sizes[i] = m->param_info[m->nparam_tensors - 1 - i].len;
    return m->nparam_tensors;
}

void nn_model_zero_grad(struct nn_model *m)
{
    if (m->grads.data)
        memset(m->grads.data, 0, m->grads.len * sizeof(float));
}

/* ---- preparing ---------------------------------------------------------------------- */

static void node_fast_destroy(struct nn_node *n)
{
    if (!n->fast)
        return;
    if (node_type(n)->fast_destroy)
        node_type(n)->fast_destroy(n->fast);
    free(n->fast);
    n->fast = NULL;
}

static void model_unprepare(struct nn_model *m)
{
    for (int i = 0; i < m->nnodes; i++)
        node_fast_destroy(&m->nodes[i]);
    nn_ws_free(&m->ws);
    if (m->have_dnnl)
        nn_dnnl_cleanup(&m->dnnl);
    m->have_dnnl = 0;
    m->prepared = 0;
    m->probs = m->scratch[0] = m->scratch[1] = NULL;
}

void nn_model_destroy(struct nn_model *m)
{
    model_unprepare(m);
    free(m->nodes);
    free(m->tensors);
    free(m->param_info);
    if (!m->arenas_borrowed) {
        nn_arena_free(&m->params);
        nn_arena_free(&m->grads);
        nn_arena_free(&m->buffers);
    }
    memset(m, 0, sizeof *m);
}

/* The arena offset of a node's k-th parameter (a tied layer's weight is the parameter it
 * is tied to), or -1. */
static long node_param_off(const struct nn_model *m, const struct nn_node *n, int k)
{
    if (n->tied_param >= 0)
        return k == 0 ? (long)m->param_info[n->tied_param].offset : -1;
    return k < n->nparams ? (long)m->param_info[n->first_param + k].offset : -1;
}

static float *model_param(struct nn_model *m, const struct nn_node *n, int k)
{
    long off = node_param_off(m, n, k);
    return off < 0 ? NULL : m->params.data + off;
}

static float *model_grad(struct nn_model *m, const struct nn_node *n, int k)
{
    long off = node_param_off(m, n, k);
    return off < 0 ? NULL : m->grads.data + off;
}

/* What node i's row reads and writes in this step (layer_type.h); the backward's input
 * gradients and the random key are the caller's. */
static struct nn_layer_args node_args(struct nn_model *m, int i, int train)
{
    struct nn_node *n = &m->nodes[i];
    return (struct nn_layer_args){
        .n = n,
        .x = &m->tensors[n->in[0]],
        .x1 = n->nin > 1 ? &m->tensors[n->in[1]] : NULL,
        .y = &m->tensors[n->out],
        .w = model_param(m, n, 0),
        .b = model_param(m, n, 1),
        .dw = m->grads.data ? model_grad(m, n, 0) : NULL,
        .db = m->grads.data ? model_grad(m, n, 1) : NULL,
        .run = m->buffers.data ? m->buffers.data + n->buf_off : NULL,
        .scratch = m->scratch[0],
        .dnnl = &m->dnnl,
        .train = train,
    };
}

/* Creates the node's fast state from its input's layout and sets its output's layout. */
static int node_fast_init(struct nn_model *m, int i, int train, struct err *e)
{
    struct nn_node *n = &m->nodes[i];
    n->fast = calloc(1, sizeof *n->fast);
    if (!n->fast)
        return err_set(e, ERR_NOMEM, "", "layer state");
    struct nn_layer_args a = node_args(m, i, train);
    a.dinp = a.x->needs_grad;
    return node_type(n)->fast_init(&a, e);
}

/* Floats the reference path saves for a node's backward (and its scratch), 0 for most. */
static size_t node_ref_save(const struct nn_model *m, const struct nn_node *n, int train)
{
    const struct nn_layer_type *t = node_type(n);
    return t->saved ? t->saved(n, &m->tensors[n->in[0]], train) : 0;
}

static int node_prepare(struct nn_model *m, int i, int train, struct err *e)
{
    struct nn_node *n = &m->nodes[i];
    struct nn_tensor *x = &m->tensors[n->in[0]], *y = &m->tensors[n->out];
    const struct nn_layer_type *t = node_type(n);
    n->save = NULL;
    if (t->check_batch && t->check_batch(n, x, train, e))
        return -1;
    if (m->backend == NN_BACKEND_FAST) {
        if (node_fast_init(m, i, train, e))
            return err_prefix(e, "%s", n->name);
    } else {
        nn_md_plain(&y->md, y->shape);
        nn_layout_plain(&n->layout, y->shape);
        if (node_ref_save(m, n, train))
            n->save_off = nn_ws_reserve(&m->ws, node_ref_save(m, n, train) * sizeof(float));
    }
    y->bytes = m->backend == NN_BACKEND_FAST ? nn_md_bytes(&y->md)
                                             : nn_shape_numel(y->shape) * sizeof(float);
    return 0;
}

/* *total += bytes of t at batch n in plain float32 layout; -1 when it would pass SIZE_MAX. */
static int model_add_bytes(struct nn_shape s, int n, size_t *total)
{
    size_t sample = nn_shape_sample(s), floats, bytes;
    if (n < 1 || sample > SIZE_MAX / (size_t)n)
        return -1;
    floats = sample * (size_t)n;
    if (floats > SIZE_MAX / sizeof(float))
        return -1;
    bytes = floats * sizeof(float);
    if (bytes > SIZE_MAX - *total)
        return -1;
    *total += bytes;
    return 0;
}

/* Sizes are checked before memory: the activations (and their gradients when training) of
 * a batch in plain layout, in 64-bit arithmetic, against this node's memory, before any
 * primitive or workspace is made. A blocked layout pads channels to 8 or 16, so the real
 * workspace is somewhat larger; nn_ws_commit checks that one. */
static int model_check_batch(const struct nn_model *m, int batch, int train, struct err *e)
{
    size_t total = 0;
    int over = 0;
    for (int t = 0; t < m->ntensors && !over; t++) {
        over = model_add_bytes(m->tensors[t].shape, batch, &total);
        if (!over && train && m->tensors[t].needs_grad)
            over = model_add_bytes(m->tensors[t].shape, batch, &total);
    }
    double gib = 1024.0 * 1024.0 * 1024.0, have = (double)nn_memory_total() / gib;
    if (over)
        return err_set(e, ERR_TOO_LARGE, "batch_size",
                       "batch %d: the activations need more "
                       "than 2^64 bytes; lower batch_size or the input shape",
                       batch);
    if (total > nn_memory_total())
        return err_set(e, ERR_TOO_LARGE, "batch_size",
                       "batch %d: the activations%s need "
                       "%.1f GiB, more than this node's %.1f GiB of memory; lower batch_size "
                       "or the input shape",
                       batch, train ? " and their gradients" : "", (double)total / gib, have);
    return 0;
}

void nn_model_set_conv_algo(struct nn_model *m, enum nn_conv_algo algo)
{
    m->conv_algo = algo;
}

void nn_model_set_bf16(struct nn_model *m, enum nn_bf16 mode)
{
    m->bf16 = mode;
}

enum nn_bf16 nn_model_bf16_path(const struct nn_model *m)
{
    return m->have_dnnl ? m->dnnl.bf16 : NN_BF16_OFF;
}

void nn_model_set_grad_share(struct nn_model *m, int on)
{
    m->grad_share_off = !on;
}

/* ---- an add's gradient: one buffer for its output and inputs ------------------------
 *
 * An add's inputs' gradient is its output's (through the ReLU's mask when fused), so rather
 * than copy it into each input's buffer (two memory-bound passes on resnet50's biggest
 * activations), an input takes the output's buffer itself and the add's backward becomes
 * the mask in place, or nothing. Sharing is decided per add, latest layer first (backward's
 * order), only where it cannot change a gradient: the layouts agree (else the add converts
 * the second input's, as before), the add is the first to write the input's gradient, no
 * other tensor of the buffer is still to be read when the add writes it, and when both
 * inputs share, the later-produced one is read before anything accumulates into the other.
 * Backward then runs unchanged: later consumers of an input accumulate into the shared
 * buffer, which by then holds that input's gradient alone. */

/* The latest node other than skip that reads tensor t; -1 when none. */
static int tensor_other_reader(const struct nn_model *m, int t, int skip)
{
    for (int i = m->nnodes - 1; i >= 0; i--)
        for (int j = 0; i != skip && j < m->nodes[i].nin; j++)
            if (m->nodes[i].in[j] == t)
                return i;
    return -1;
}

/* Whether a tensor sharing y's buffer, y aside, is still to be read by its producer once
 * node i has run (its producer comes at or before i). */
static int grad_group_live(const struct nn_model *m, int y, int i)
{
    int owner = m->tensors[y].grad_owner;
    for (int t = 1; t < m->ntensors; t++)
        if (t != y && m->tensors[t].grad_owner == owner && m->tensors[t].producer <= i)
            return 1;
    return 0;
}

/* Whether add i's input j may take its output's gradient buffer on its own. */
static int add_input_shareable(const struct nn_model *m, int i, int j)
{
    const struct nn_node *n = &m->nodes[i];
    const struct nn_tensor *x = &m->tensors[n->in[j]], *y = &m->tensors[n->out];
    return n->in[0] != n->in[1] && x->producer >= 0 && x->needs_grad &&
           x->grad_owner == n->in[j] && x->bytes == y->bytes && nn_md_same(&x->md, &y->md) &&
           tensor_other_reader(m, n->in[j], i) < i;
}

/* Whether both of add i's inputs may share: the later-produced one (a) has no other reader,
 * and nothing accumulates into the other (b) before a's producer has read the buffer. */
static int add_inputs_share_both(const struct nn_model *m, int i)
{
    const struct nn_node *n = &m->nodes[i];
    int p0 = m->tensors[n->in[0]].producer, p1 = m->tensors[n->in[1]].producer;
    int a = p0 > p1 ? n->in[0] : n->in[1], b = p0 > p1 ? n->in[1] : n->in[0];
    return tensor_other_reader(m, a, i) < 0 &&
           tensor_other_reader(m, b, i) < m->tensors[a].producer;
}

/* Sets every tensor's grad_owner for this prepare; counts the shared ones in grad_shared. */
static void model_grad_share(struct nn_model *m, int train)
{
    m->grad_shared = 0;
    for (int t = 0; t < m->ntensors; t++)
        m->tensors[t].grad_owner = t;
    for (int i = m->nnodes - 1; i >= 0 && train && !m->grad_share_off; i--) {
        const struct nn_node *n = &m->nodes[i];
        if (n->op != NN_OP_ADD || !m->tensors[n->out].needs_grad ||
            grad_group_live(m, n->out, i))
            continue;
        int ok[2] = {add_input_shareable(m, i, 0), add_input_shareable(m, i, 1)};
        if (ok[0] && ok[1] && !add_inputs_share_both(m, i))
            ok[1] = 0;
        for (int j = 0; j < 2; j++)
            if (ok[j]) {
                m->tensors[n->in[j]].grad_owner = m->tensors[n->out].grad_owner;
                m->grad_shared++;
            }
    }
}

int nn_model_prepare(struct nn_model *m, int batch, enum nn_backend backend, int train,
                     struct err *e)
{
    if (!m->finished || !m->params.data)
        return err_set(e, ERR_INVALID, "model", "prepare before finish and init_params");
    if (batch < 1)
        return err_set(e, ERR_INVALID, "batch_size", "batch size must be >= 1");
    if (model_check_batch(m, batch, train, e))
        return -1;
    model_unprepare(m);
    m->batch = batch;
    m->backend = backend;
    m->train_ready = train;
    for (int t = 0; t < m->ntensors; t++) {
        m->tensors[t].shape.n = batch;
        m->tensors[t].data = m->tensors[t].grad = NULL;
    }
    if (backend == NN_BACKEND_FAST) {
        if (nn_dnnl_init(&m->dnnl, e))
            return -1;
        m->have_dnnl = 1;
        m->dnnl.conv_algo = m->conv_algo;
        m->dnnl.bf16 = m->bf16 == NN_BF16_AUTO ? nn_dnnl_bf16_probe(&m->dnnl) : m->bf16;
    }
    struct nn_tensor *in = &m->tensors[0];
    nn_md_plain(&in->md, in->shape);
    in->bytes = nn_shape_numel(in->shape) * sizeof(float);
    if (train && in->needs_grad) /* a stage's input: its gradient goes to the previous one */
        in->grad_off = nn_ws_reserve(&m->ws, in->bytes);
    for (int i = 0; i < m->nnodes; i++)
        if (node_prepare(m, i, train, e))
            goto fail;
    model_grad_share(m, train);
    size_t max_grad = 0;
    for (int t = 1; t < m->ntensors; t++) {
        struct nn_tensor *x = &m->tensors[t];
        x->data_off = nn_ws_reserve(&m->ws, x->bytes);
        if (train && x->needs_grad && x->grad_owner == t)
            x->grad_off = nn_ws_reserve(&m->ws, x->bytes);
        if (x->bytes > max_grad)
            max_grad = x->bytes;
    }
    for (int t = 1; t < m->ntensors; t++)
        m->tensors[t].grad_off = m->tensors[m->tensors[t].grad_owner].grad_off;
    int k = nn_model_classes(m);
    size_t probs_off = nn_ws_reserve(
        &m->ws, (size_t)batch * (size_t)nn_model_labels_per_sample(m) * k * sizeof(float));
    size_t scratch_off[2] = {0, 0};
    if (train)
        for (int j = 0; j < 2; j++)
            scratch_off[j] = nn_ws_reserve(&m->ws, max_grad);
    if (nn_ws_commit(&m->ws, e))
        goto fail;
    for (int t = 0; t < m->ntensors; t++) {
        struct nn_tensor *x = &m->tensors[t];
        if (t > 0) /* the input's data is the caller's */
            x->data = nn_ws_ptr(&m->ws, x->data_off);
        if (train && x->needs_grad)
            x->grad = nn_ws_ptr(&m->ws, x->grad_off);
    }
    for (int i = 0; i < m->nnodes; i++)
        if (backend == NN_BACKEND_REF && node_ref_save(m, &m->nodes[i], train))
            m->nodes[i].save = nn_ws_ptr(&m->ws, m->nodes[i].save_off);
    m->probs = nn_ws_ptr(&m->ws, probs_off);
    if (train)
        for (int j = 0; j < 2; j++)
            m->scratch[j] = nn_ws_ptr(&m->ws, scratch_off[j]);
    m->prepared = 1;
    return 0;
fail:
    model_unprepare(m);
    return -1;
}

/* ---- forward ------------------------------------------------------------------------ */

/* The key of node i's random stream in this step (rows that draw: dropout); 0 else.
 * Stages number layers as the whole model does. */
static uint64_t node_key(const struct nn_model *m, int i, uint64_t step)
{
    return node_type(&m->nodes[i])->flags & NN_LAYER_RANDOM
               ? nn_dropout_key(m->seed, step, i + m->layer_base)
               : 0;
}

int nn_model_forward(struct nn_model *m, const float *x, int train, uint64_t step,
                     struct err *e)
{
    if (!m->prepared || !x)
        return err_set(e, ERR_INVALID, "model", "forward needs a prepared model and input");
    if (train && !m->train_ready)
        return err_set(e, ERR_INVALID, "model",
                       "training forward on a model prepared for "
                       "evaluation");
    m->tensors[0].data = (float *)(uintptr_t)x; /* only read */
    m->labels = NULL;
    const struct nn_layer_type *first = node_type(&m->nodes[0]);
    if (first->check_input && /* e.g. token ids index the tables: checked before use */
        first->check_input(&m->nodes[0], x, nn_shape_numel(m->tensors[0].shape), e))
        return -1;
    for (int i = 0; i < m->nnodes; i++) {
        const struct nn_layer_type *t = node_type(&m->nodes[i]);
        struct nn_layer_args a = node_args(m, i, train);
        a.key = node_key(m, i, step);
        int64_t t0 = m->profile_ns ? clock_mono_ns() : 0;
        if (m->backend == NN_BACKEND_FAST)
            t->fast_forward(&a);
        else
            t->forward(&a);
        if (m->profile_ns)
            m->profile_ns[i] += clock_mono_ns() - t0;
    }
    m->step = step;
    m->last_train = train;
    return m->backend == NN_BACKEND_FAST ? nn_dnnl_check(&m->dnnl, e) : 0;
}

int nn_model_output_tensor(const struct nn_model *m)
{
    return m->nnodes ? m->nodes[m->nnodes - 1].out : -1;
}

const float *nn_model_output(const struct nn_model *m)
{
    return m->prepared ? m->tensors[nn_model_output_tensor(m)].data : NULL;
}

int nn_model_classes(const struct nn_model *m)
{
    int t = nn_model_output_tensor(m);
    return t < 0 ? 0 : nn_tensor_row_len(&m->tensors[t]);
}

int nn_model_labels_per_sample(const struct nn_model *m)
{
    int t = nn_model_output_tensor(m);
    return t >= 0 && m->tensors[t].seq ? m->tensors[t].shape.c : 1;
}

int nn_model_loss(struct nn_model *m, const int32_t *labels, int n_valid, double *loss,
                  int *correct, struct err *e)
{
    if (!m->prepared || !labels)
        return err_set(e, ERR_INVALID, "model", "loss needs a prepared model and labels");
    struct nn_tensor *y = &m->tensors[nn_model_output_tensor(m)];
    if (y->shape.ndims != 2 && !y->seq)
        return err_set(e, ERR_INVALID, "model", "this stage does not end in the loss");
    int per = nn_model_labels_per_sample(m); /* a sequence: one row per token */
    int n = m->batch * per, k = nn_model_classes(m), valid = n_valid * per;
    if (nn_xent_forward(m->probs, loss, correct, y->data, labels, n, k, valid, e))
        return -1;
    if (m->train_ready && y->grad) {
        nn_xent_backward(y->grad, m->probs, labels, n, k, valid);
        m->labels = labels;
        m->n_valid = n_valid;
    }
    return 0;
}

/* ---- backward ----------------------------------------------------------------------- */

/* Node i's backward through its row; din0/din1: its inputs' gradients, or NULL. */
static void node_backward(struct nn_model *m, int i, float *din0, float *din1)
{
    const struct nn_node *n = &m->nodes[i];
    struct nn_layer_args a = node_args(m, i, 1);
    a.din0 = din0;
    a.din1 = din1;
    a.key = node_key(m, i, m->step);
    if (m->backend == NN_BACKEND_REF) {
        node_type(n)->backward(&a);
        return;
    }
    /* the fast kernels are not to be called with nothing to produce (layers.h) */
    if (din0 || din1 || n->nparams > 0 || n->tied_param >= 0)
        node_type(n)->fast_backward(&a);
}

/* Backward through every layer once the output's gradient is in place. */
static int model_backward_run(struct nn_model *m, nn_grad_hook_fn hook, void *ctx,
                              struct err *e)
{
    for (int t = 0; t < m->ntensors; t++)
        m->tensors[t].grad_written = 0;
    m->tensors[nn_model_output_tensor(m)].grad_written = 1;
    for (int i = m->nnodes - 1; i >= 0; i--) {
        struct nn_node *n = &m->nodes[i];
        struct nn_tensor *y = &m->tensors[n->out];
        if (!y->needs_grad)
            continue;
        if (!y->grad_written) { /* a branch that does not reach the loss */
            memset(y->grad, 0, y->bytes);
            y->grad_written = 1;
        }
        float *din[2] = {NULL, NULL};
        int via_scratch[2] = {0, 0};
        for (int j = 0; j < n->nin; j++) {
            struct nn_tensor *x = &m->tensors[n->in[j]];
            if (!x->needs_grad)
                continue;
            via_scratch[j] = x->grad_written || (j == 1 && n->in[0] == n->in[1]);
            din[j] = via_scratch[j] ? m->scratch[j] : x->grad;
        }
        int64_t t0 = m->profile_ns ? clock_mono_ns() : 0;
        node_backward(m, i, din[0], din[1]);
        if (m->profile_ns)
            m->profile_ns[i] += clock_mono_ns() - t0;
        for (int j = 0; j < n->nin; j++) {
            struct nn_tensor *x = &m->tensors[n->in[j]];
            if (via_scratch[j])
                nn_vec_add(x->grad, m->scratch[j], x->bytes / sizeof(float));
            if (din[j])
                x->grad_written = 1;
        }
        if (hook && n->nparams > 0) {
            struct nn_grad_ready r = {.node = i,
                                      .name = n->name,
                                      .offset = n->param_off,
                                      .len = n->param_len,
                                      .first_param = n->first_param,
                                      .nparams = n->nparams};
            hook(ctx, &r);
        }
    }
    m->labels = NULL;
    return m->backend == NN_BACKEND_FAST ? nn_dnnl_check(&m->dnnl, e) : 0;
}

int nn_model_backward(struct nn_model *m, nn_grad_hook_fn hook, void *ctx, struct err *e)
{
    if (!m->prepared || !m->train_ready)
        return err_set(e, ERR_INVALID, "model", "backward on a model not prepared to train");
    if (!m->labels || !m->last_train)
        return err_set(e, ERR_INVALID, "model", "backward needs a training forward and a loss");
    return model_backward_run(m, hook, ctx, e);
}

/* Copies plain data into (to_plain = 0) or out of a tensor's layout: a reorder on the fast
 * path unless the layout is plain already. */
static int model_plain_copy(struct nn_model *m, const struct nn_tensor *t, float *dst,
                            const float *src, int to_plain, struct err *e)
{
    dnnl_memory_desc_t plain;
    nn_md_plain(&plain, t->shape);
    if (m->backend == NN_BACKEND_REF || nn_md_same(&plain, &t->md)) {
        memcpy(dst, src, nn_shape_numel(t->shape) * sizeof(float));
        return 0;
    }
    struct nn_reorder r;
    if (nn_reorder_init(&r, &m->dnnl, to_plain ? &t->md : &plain, to_plain ? &plain : &t->md, 0,
                        e))
        return -1;
    nn_reorder_run(&r, &m->dnnl, dst, src);
    nn_reorder_destroy(&r);
    return nn_dnnl_check(&m->dnnl, e);
}

int nn_model_backward_from(struct nn_model *m, const float *dout, nn_grad_hook_fn hook,
                           void *ctx, struct err *e)
{
    if (!m->prepared || !m->train_ready || !m->last_train || !dout)
        return err_set(e, ERR_INVALID, "model",
                       "backward_from needs a model prepared to train, a training forward "
                       "and the output's gradient");
    struct nn_tensor *y = &m->tensors[nn_model_output_tensor(m)];
    if (!y->grad)
        return err_set(e, ERR_INVALID, "model", "the output has no gradient");
    if (model_plain_copy(m, y, y->grad, dout, 0, e))
        return -1;
    return model_backward_run(m, hook, ctx, e);
}

/* ---- pipeline stages ------------------------------------------------------------------ */

/* The one tensor made before node k (the input counts) and read at or after it, or -1 when
 * none or several cross there. */
static int model_crossing(const struct nn_model *m, int k)
{
    int crossing = -1;
    for (int j = k; j < m->nnodes; j++)
        for (int i = 0; i < m->nodes[j].nin; i++) {
            int t = m->nodes[j].in[i];
            int before = t == 0 || m->tensors[t].producer < k;
            if (!before || t == crossing)
                continue;
            if (crossing >= 0)
                return -1;
            crossing = t;
        }
    return crossing;
}

/* Whether a stage may start at node k: one tensor crosses there, and it is the output of
 * the layer just before, which is what the previous stage hands over (a tensor made
 * earlier and read only later would not be its output). */
static int model_can_cut(const struct nn_model *m, int k)
{
    return k > 0 && k < m->nnodes && model_crossing(m, k) == m->nodes[k - 1].out;
}

int nn_model_stage_starts(const struct nn_model *m, int *starts, int cap)
{
    int n = 0;
    for (int k = 1; k < m->nnodes; k++)
        if (model_can_cut(m, k)) {
            if (n < cap)
                starts[n] = k;
            n++;
        }
    return n;
}

/* Parameters a layer holds in its stage: its own, or the tied weight it copies. */
static double model_node_cost(const struct nn_model *m, int i)
{
    const struct nn_node *n = &m->nodes[i];
    return (double)n->param_len +
           (n->tied_param >= 0 ? (double)m->param_info[n->tied_param].len : 0);
}

int nn_model_stage_split(const struct nn_model *m, int p, const double *cost, int *first,
                         struct err *e)
{
    int k = nn_model_stage_starts(m, NULL, 0);
    if (p < 1 || p - 1 > k)
        return err_set(e, ERR_INVALID, "pipeline",
                       "%d stages need %d places to cut the model; it has %d (between "
                       "blocks, where one activation crosses)",
                       p, p - 1, k);
    /* cut[j]: the j-th place to cut (cut[0] = 0, cut[k + 1] = nnodes); prefix[j]: the
     * parameters of layers before cut[j] */
    int *cut = malloc((size_t)(k + 2) * sizeof *cut);
    double *prefix = malloc((size_t)(k + 2) * sizeof *prefix);
    double *best = malloc((size_t)(k + 2) * (size_t)p * sizeof *best);
    int *from = malloc((size_t)(k + 2) * (size_t)p * sizeof *from);
    if (!cut || !prefix || !best || !from) {
        free(cut), free(prefix), free(best), free(from);
        return err_set(e, ERR_NOMEM, NULL, "stage split: out of memory");
    }
    cut[0] = 0;
    nn_model_stage_starts(m, cut + 1, k);
    cut[k + 1] = m->nnodes;
    double acc = 0;
    for (int j = 0, i = 0; j <= k + 1; j++) {
        for (; i < cut[j]; i++)
            acc += cost ? cost[i] : model_node_cost(m, i);
        prefix[j] = acc;
    }
    /* best[s][j]: the smallest largest stage when stages 0..s end at cut[j] */
#define AT(s, j) ((size_t)(s) * (size_t)(k + 2) + (size_t)(j))
    for (int j = 0; j <= k + 1; j++) {
        best[AT(0, j)] = j > 0 ? prefix[j] : INFINITY;
        from[AT(0, j)] = 0;
    }
    for (int s = 1; s < p; s++)
        for (int j = 0; j <= k + 1; j++) {
            best[AT(s, j)] = INFINITY;
            for (int i = s; i < j; i++) {
                double worst = fmax(best[AT(s - 1, i)], prefix[j] - prefix[i]);
                if (worst < best[AT(s, j)]) {
                    best[AT(s, j)] = worst;
                    from[AT(s, j)] = i;
                }
            }
        }
    first[p] = m->nnodes;
    for (int s = p - 1, j = k + 1; s >= 0; s--) {
        j = s > 0 ? from[AT(s, j)] : 0;
        first[s] = cut[j];
    }
#undef AT
    free(cut), free(prefix), free(best), free(from);
    return 0;
}

/* Registers in out the parameters of node n of m (its own, or a copy of a tied weight that
 * lives in an earlier stage); pmap maps m's parameter indices to out's. */
static int stage_copy_node_params(struct nn_model *out, struct nn_node *dst,
                                  const struct nn_model *m, const struct nn_node *n, int first,
                                  int *pmap)
{
    for (int k = 0; k < n->nparams; k++) {
        const struct nn_param *p = &m->param_info[n->first_param + k];
        if (model_add_param(out, dst, "", p->len, p->fan_in, p->fan_out, p->init, p->value))
            return -1;
        struct nn_param *q = &out->param_info[out->nparam_tensors - 1];
        snprintf(q->name, sizeof q->name, "%s", p->name);
        q->origin = n->first_param + k;
        pmap[n->first_param + k] = out->nparam_tensors - 1;
    }
    if (n->tied_param < 0)
        return 0;
    if (m->param_info[n->tied_param].node >= first) { /* its owner is in this stage */
        dst->tied_param = pmap[n->tied_param];
        return 0;
    }
    const struct nn_param *p = &m->param_info[n->tied_param];
    dst->tied_param = -1;
    if (model_add_param(out, dst, "weight", p->len, p->fan_in, p->fan_out, p->init, p->value))
        return -1;
    out->param_info[out->nparam_tensors - 1].origin = n->tied_param;
    return 0;
}

int nn_model_stage(const struct nn_model *m, int first, int end, struct nn_model *out,
                   struct err *e)
{
    int in = first == 0 ? 0 : model_crossing(m, first);
    if (!m->finished || first < 0 || end > m->nnodes || first >= end ||
        (first > 0 && !model_can_cut(m, first)) || (end < m->nnodes && !model_can_cut(m, end)))
        return err_set(e, ERR_INVALID, "pipeline", "layers %d..%d are no stage of the model",
                       first, end - 1);
    int *tmap = malloc((size_t)m->ntensors * sizeof *tmap);
    int *pmap = malloc((size_t)(m->nparam_tensors + 1) * sizeof *pmap);
    if (!tmap || !pmap) {
        free(tmap), free(pmap);
        return err_set(e, ERR_NOMEM, NULL, "stage: out of memory");
    }
    out->layer_base = first;
    out->stage = 1;
    struct nn_shape s = m->tensors[in].shape;
    s.n = 1;
    tmap[in] = model_add_tensor(out, s, -1, first > 0);
    if (tmap[in] == 0)
        out->tensors[0].seq = m->tensors[in].seq;
    for (int i = first; i < end && !out->build_failed; i++) {
        const struct nn_node *n = &m->nodes[i];
        struct nn_node *d = model_add_node(out, n->op, n->name, tmap[n->in[0]],
                                           n->nin > 1 ? tmap[n->in[1]] : -1);
        if (!d)
            break;
        d->cfg = n->cfg;
        d->seq = n->seq;
        if (stage_copy_node_params(out, d, m, n, first, pmap))
            break;
        model_add_buffers(out, d);
        struct nn_shape ys = m->tensors[n->out].shape;
        ys.n = 1;
        tmap[n->out] = model_node_output(out, d, ys);
    }
    free(tmap);
    free(pmap);
    return nn_model_finish(out, e);
}

int nn_model_stage_copy_params(const struct nn_model *m, int first, struct nn_model *s,
                               struct err *e)
{
    if (!m->params.data || !s->params.data)
        return err_set(e, ERR_INVALID, "model", "copying parameters needs both arenas");
    for (int i = 0; i < s->nparam_tensors; i++) {
        const struct nn_param *p = &s->param_info[i];
        if (p->origin < 0 || p->origin >= m->nparam_tensors ||
            m->param_info[p->origin].len != p->len)
            return err_set(e, ERR_INVALID, "model", "%s: no such parameter to copy", p->name);
        memcpy(s->params.data + p->offset, m->params.data + m->param_info[p->origin].offset,
               p->len * sizeof(float));
    }
    for (int i = 0; i < s->nnodes; i++) {
        const struct nn_node *n = &s->nodes[i];
        size_t len = node_type(n)->buffers ? node_type(n)->buffers(&n->cfg) : 0;
        if (len)
            memcpy(s->buffers.data + n->buf_off, m->buffers.data + m->nodes[first + i].buf_off,
                   len * sizeof(float));
    }
    return 0;
}

int nn_model_share_arenas(struct nn_model *dst, const struct nn_model *src, struct err *e)
{
    if (!dst->finished || !src->params.data || dst->nparams != src->nparams ||
        dst->nbuffers != src->nbuffers || dst->params.data)
        return err_set(e, ERR_INVALID, "model",
                       "sharing arenas needs a finished model like the initialised one");
    dst->params = src->params;
    dst->grads = src->grads;
    dst->buffers = src->buffers;
    dst->seed = src->seed;
    dst->arenas_borrowed = 1;
    return 0;
}

size_t nn_model_tensor_sample(const struct nn_model *m, int tensor)
{
    return nn_shape_sample(m->tensors[tensor].shape);
}

/* ---- inspection --------------------------------------------------------------------- */

struct nn_shape nn_model_tensor_shape(const struct nn_model *m, int tensor)
{
    return m->tensors[tensor].shape;
}

int nn_model_read_tensor(struct nn_model *m, int tensor, int grad, float *out, struct err *e)
{
    if (!m->prepared || tensor < 0 || tensor >= m->ntensors)
        return err_set(e, ERR_INVALID, "tensor", "no such tensor");
    const struct nn_tensor *t = &m->tensors[tensor];
    const float *src = grad ? t->grad : t->data;
    if (!src)
        return err_set(e, ERR_INVALID, "tensor", "tensor has no %s",
                       grad ? "gradient" : "data");
    return model_plain_copy(m, t, out, src, 1, e);
}

float *nn_model_bn_running(struct nn_model *m, int node)
{
    if (node < 0 || node >= m->nnodes || m->nodes[node].op != NN_OP_BN || !m->buffers.data)
        return NULL;
    return m->buffers.data + m->nodes[node].buf_off;
}

int nn_model_node_count(const struct nn_model *m)
{
    return m->nnodes;
}

const char *nn_model_node_name(const struct nn_model *m, int node)
{
    return m->nodes[node].name;
}

enum nn_op nn_model_node_op(const struct nn_model *m, int node)
{
    return m->nodes[node].op;
}

void nn_model_node_info(const struct nn_model *m, int node, struct nn_node_info *out)
{
    const struct nn_node *n = &m->nodes[node];
    memset(out, 0, sizeof *out);
    out->op = n->op;
    out->name = n->name;
    out->in[0] = n->in[0];
    out->in[1] = n->in[1];
    out->nin = n->nin;
    out->out = n->out;
    out->first_param = n->first_param;
    out->nparams = n->nparams;
    out->param_off = n->param_off;
    out->param_len = n->param_len;
    out->buf_off = n->buf_off;
    out->cfg = n->cfg;
    out->seq = n->seq;
    out->tied_param = n->tied_param;
}

int nn_model_tensor_needs_grad(const struct nn_model *m, int tensor)
{
    return m->tensors[tensor].needs_grad;
}

static const char *node_impl(const struct nn_node *n)
{
    const struct nn_layer_type *t = node_type(n);
    if (!n->fast)
        return "";
    if (t->fast_impl)
        return t->fast_impl(n->fast);
    if (t->impl_prim)
        return nn_prim_impl((const struct nn_prim *)((const char *)n->fast + t->impl_prim));
    return t->impl ? t->impl : "";
}

int nn_model_conv_algos(const struct nn_model *m, struct nn_conv_algo_count *out, int cap)
{
    int n = 0;
    for (int i = 0; i < m->nnodes; i++) {
        const struct nn_node *node = &m->nodes[i];
        if (node->op != NN_OP_CONV || !node->fast)
            continue;
        const char *name = nn_conv2d_algo_name(&node->fast->conv);
        int k = 0;
        while (k < n && strcmp(out[k].name, name) != 0)
            k++;
        if (k == n && n == cap)
            continue; /* more names than room: the caller sized out too small */
        if (k == n)
            out[n++] = (struct nn_conv_algo_count){.name = name, .layers = 0};
        out[k].layers++;
    }
    return n;
}

void nn_model_print(struct nn_model *m, FILE *out)
{
    char sb[64], lb[32];
    for (int i = 0; i < m->nnodes; i++) {
        const struct nn_node *n = &m->nodes[i];
        const struct nn_tensor *y = &m->tensors[n->out];
        lb[0] = 0;
        if (m->prepared && m->backend == NN_BACKEND_FAST)
            nn_md_str(&y->md, lb, sizeof lb);
        fprintf(out, "%3d %-22s %-16s %-16s %9zu %-10s %s\n", i, n->name, node_type(n)->name,
                nn_shape_str(y->shape, sb, sizeof sb), n->param_len, lb, node_impl(n));
    }
    fprintf(out, "parameters: %zu\n", m->nparams);
}
