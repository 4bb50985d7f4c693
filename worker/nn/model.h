/* model: a network as a graph of nn/ layers, its parameter arenas, and one training step's
 * machinery (forward over a batch, loss, backward with a per-layer gradient hook).
 *
 * A model is built once (the nn_model_* builders append layers, each returning the id of
 * the tensor it produces, so residual blocks are written as plain calls), then given its
 * parameters (nn_model_init_params), then prepared for a batch size and a backend
 * (nn_model_prepare: layouts, oneDNN primitives, the activation workspace), then stepped:
 *
 *     nn_model_zero_grad(m);
 *     nn_model_forward(m, x, 1, step, e);            x: (N,C,H,W) plain, borrowed
 *     nn_model_loss(m, labels, n, &loss, &right, e);  seeds backward with dloss/dlogits
 *     nn_model_backward(m, hook, ctx, e);            hook fires per layer, in reverse
 *     nn_optim_step(&opt, m->params.data, m->grads.data, lr);
 *
 * Decisions:
 * - Parameters are registered in layer (forward) order into ONE arena; gradients and any
 *   optimizer state are parallel arenas with the same offsets. Backward visits layers in
 *   reverse, so gradients become final from the end of the arena towards its start, and a
 *   DDP bucket is a contiguous slice. After each layer's backward the hook receives that
 *   layer's slice [offset, offset+len): from there DDP can launch an allreduce while the
 *   rest of backward runs.
 * - Where a tensor feeds several layers (a residual block's input), the first gradient
 *   written (in backward order) goes straight into its buffer and later ones through a
 *   scratch buffer that is added in (layers overwrite their input gradient, nn.h).
 * - Builders never fail one by one: the first error sticks in the model and makes every
 *   later builder return -1; nn_model_finish reports it.
 * - The whole activation workspace (every tensor, its gradient, saved statistics) is one
 *   allocation made by nn_model_prepare and reused every step. A different batch size
 *   needs another nn_model_prepare (primitives are made for a fixed N); an evaluation
 *   batch smaller than the prepared one can instead be padded and passed with n_valid.
 *
 * Ownership: the model owns everything it allocates (nn_model_destroy); pointers read out
 * of it (output, arenas, tensors) are borrowed and valid until the next prepare/destroy. */
#ifndef DDPB_NN_MODEL_H
#define DDPB_NN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "worker/nn/graph.h"
#include "worker/nn/layers.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"

enum nn_backend {
    NN_BACKEND_REF,  /* the plain-loop references: the spec, slow */
    NN_BACKEND_FAST, /* oneDNN */
};

/* How a parameter is initialised (nn_model_init_params). */
enum nn_init {
    NN_INIT_DEFAULT,            /* PyTorch's conv/linear reset_parameters: weight
                                   kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)),
                                   bias U(+-1/sqrt(fan_in)) */
    NN_INIT_KAIMING_NORMAL_OUT, /* kaiming_normal(mode=fan_out, relu): N(0, 2/fan_out) */
    NN_INIT_NORMAL,             /* N(0, value^2) */
    NN_INIT_CONST,              /* value */
};

struct nn_param {
    char name[64]; /* torchvision-style: "layer1.0.conv1.weight" */
    int node;
    size_t offset, len; /* in the arenas, floats */
    int fan_in, fan_out;
    enum nn_init init;
    float value;
    int origin; /* a stage's parameter: its index in the model it was cut from; -1 */
};

struct nn_node;   /* model.c */
struct nn_tensor; /* model.c */

/* What the backward hook receives: one layer's gradients are final. */
struct nn_grad_ready {
    int node;                 /* layer index (forward order) */
    const char *name;         /* layer name, borrowed */
    size_t offset, len;       /* its slice of the gradient arena */
    int first_param, nparams; /* its entries in m->param_info */
    void *ready_event; /* GPU runner (worker/nn/cuda/gmodel.h): a cudaEvent_t recorded on the
                           compute stream right after the layer's backward, which a
                           communication stream waits for; NULL from this file's engine */
};

typedef void (*nn_grad_hook_fn)(void *ctx, const struct nn_grad_ready *r);

struct nn_model {
    /* graph */
    struct nn_node *nodes;
    int nnodes, cap_nodes;
    struct nn_tensor *tensors;
    int ntensors, cap_tensors;
    struct nn_param *param_info; /* registration (= layer) order */
    int nparam_tensors, cap_params;
    size_t nparams;  /* floats in the parameter arena */
    size_t nbuffers; /* floats of non-trained state (batch-norm running statistics) */
    struct err build_err;
    int build_failed, finished;
    /* arenas (nn_model_init_params) */
    struct nn_arena params, grads, buffers;
    uint64_t seed;
    enum nn_conv_algo conv_algo; /* fast backend; nn_model_set_conv_algo */
    enum nn_bf16 bf16;           /* fast backend; nn_model_set_bf16 (a request) */
    int grad_share_off;          /* nn_model_set_grad_share(m, 0): a test's comparison */
    /* prepared (nn_model_prepare) */
    int batch, prepared, train_ready;
    int grad_shared; /* tensors whose gradient shares an add's output's (model_grad_share) */
    enum nn_backend backend;
    struct nn_dnnl dnnl;
    int have_dnnl;
    struct nn_workspace ws;
    float *probs, *scratch[2];
    const int32_t *labels; /* borrowed from nn_model_loss until backward */
    int n_valid;
    uint64_t step;  /* of the last forward: keys dropout masks in backward */
    int last_train; /* the last forward was a training one */
    /* a pipeline stage (nn_model_stage): its first layer's index in the whole model (dropout
     * keys use the whole model's numbering), and whether it may end before the loss */
    int layer_base, stage;
    int arenas_borrowed; /* nn_model_share_arenas: the arenas are another model's */
    /* When set (nnodes entries, borrowed): forward and backward add each layer's wall time
     * in ns to its entry, which a pipeline balances its stages by. */
    int64_t *profile_ns;
};

void nn_model_init(struct nn_model *m);
void nn_model_destroy(struct nn_model *m);

/* ---- building: each returns the new tensor's id, or -1 (sticky error) ---------------- */

int nn_model_input(struct nn_model *m, int c, int h, int w);
int nn_model_conv2d(struct nn_model *m, const char *name, int x, const struct nn_conv2d_cfg *c);
/* BatchNorm2d(eps 1e-5, momentum 0.1), ReLU fused when relu */
int nn_model_batchnorm(struct nn_model *m, const char *name, int x, int relu);
/* the same with another eps (Inception's BasicConv2d: 0.001) */
int nn_model_batchnorm_eps(struct nn_model *m, const char *name, int x, int relu, float eps);
int nn_model_act(struct nn_model *m, const char *name, int x, enum nn_act a);
int nn_model_maxpool(struct nn_model *m, const char *name, int x, int k, int s, int p);
int nn_model_avgpool(struct nn_model *m, const char *name, int x, int k, int s, int p);
int nn_model_global_avgpool(struct nn_model *m, const char *name, int x);
int nn_model_adaptive_avgpool(struct nn_model *m, const char *name, int x, int oh, int ow);
/* the input must be 2-D (a flatten first) */
int nn_model_linear(struct nn_model *m, const char *name, int x, int out, int bias);
int nn_model_dropout(struct nn_model *m, const char *name, int x, float p, int channelwise);
int nn_model_add(struct nn_model *m, const char *name, int a, int b, int relu);
int nn_model_flatten(struct nn_model *m, const char *name, int x);
/* torch.cat([a, b], 1): (N,Ca,H,W), (N,Cb,H,W) -> (N,Ca+Cb,H,W) */
int nn_model_concat(struct nn_model *m, const char *name, int a, int b);

/* Sequence models (GPT-2). A sequence tensor (N,T,C) is held as the 4-D shape (N,T,C,1),
 * whose plain layout is (N,T,C) row-major; its rows R = N*T are what linear layers,
 * layer norm and the loss iterate over. The input is the token ids as floats:
 * nn_model_input(m, 1, 1, T). */
/* Token + position embedding of the input ids: parameters "<name>.wte.weight" (vocab,c)
 * and "<name>.wpe.weight" (max_t,c), N(0, 0.02); output (N,T,C). T <= max_t. */
int nn_model_embed(struct nn_model *m, const char *name, int x, int vocab, int max_t, int c);
/* LayerNorm over C (eps 1e-5), weight 1 and bias 0. */
int nn_model_layernorm(struct nn_model *m, const char *name, int x);
int nn_model_gelu(struct nn_model *m, const char *name, int x);
/* Causal self-attention of qkv (N,T,3C) with `heads` heads -> (N,T,C). */
int nn_model_attention(struct nn_model *m, const char *name, int qkv, int heads);
/* A linear layer over every row of a sequence: (N,T,I) -> (N,T,out). */
int nn_model_seq_linear(struct nn_model *m, const char *name, int x, int out, int bias);
/* (N,T,C) -> (N,T,V) = x @ W^T with W the parameter tensor `param` (V,C) of an earlier
 * layer (GPT-2's output projection tied to the token embedding): it owns no parameter,
 * and its weight gradient accumulates into that parameter's, which is final once the
 * owning layer's backward ran (the hook fires there). */
int nn_model_tied_linear(struct nn_model *m, const char *name, int x, int param);

/* Ends building: the last layer's output must be 2-D (N, classes) or a sequence
 * (N,T,classes) (a label per token). Reports the first builder error. */
int nn_model_finish(struct nn_model *m, struct err *e);

/* ---- parameters --------------------------------------------------------------------- */

/* Every parameter tensor with its offset and length in the arenas, in registration (= layer)
 * order; *count gets how many. Backward produces them from the last to the first: iterate
 * from count-1 down for DDP buckets. Borrowed. */
const struct nn_param *nn_model_param_info(const struct nn_model *m, int *count);

/* Allocates the parameter, gradient and buffer arenas and initialises every parameter
 * from RNG streams keyed by (seed, parameter, chunk): deterministic given the seed, whatever
 * the thread count. The seed also keys dropout masks. */
int nn_model_init_params(struct nn_model *m, uint64_t seed, struct err *e);
size_t nn_model_param_count(const struct nn_model *m);
/* Fills sizes (up to cap) with each parameter tensor's length in REVERSE registration
 * order (the order backward produces them); returns the number of parameter tensors. */
int nn_model_grad_sizes_reverse(const struct nn_model *m, size_t *sizes, int cap);
void nn_model_zero_grad(struct nn_model *m);

/* ---- running -------------------------------------------------------------------------- */

/* The fast backend's convolution algorithm (onednn.h), used from the next prepare on.
 * The default is NN_CONV_AUTO: Winograd on the 3x3 stride-1 layers big enough to gain from
 * it (resnet18-cifar trains ~1.5x faster; results within ~1e-6 of the scale of direct's),
 * direct on the rest; NN_CONV_DIRECT is PyTorch's own algorithm everywhere. */
void nn_model_set_conv_algo(struct nn_model *m, enum nn_conv_algo algo);
/* bf16 compute on the fast backend (onednn.h enum nn_bf16), from the next prepare on:
 * NN_BF16_OFF (the default: fp32), NN_BF16_AUTO (native where oneDNN has the kernels,
 * else emulated), or one path forced (a test's). The parameters, gradients and optimizer
 * stay fp32 whatever the path. */
void nn_model_set_bf16(struct nn_model *m, enum nn_bf16 mode);
/* Whether an add's inputs may take its output's gradient buffer itself (the default, on),
 * from the next prepare on: an add's backward then copies nothing, as PyTorch's autograd
 * hands one gradient to both inputs. Off only to compare against the copying path (the
 * gradients are bit-identical). While sharing, nn_model_read_tensor's gradient of a tensor
 * inside the model may hold what later layers accumulated into the shared buffer; the
 * input's (tensor 0) is never shared. */
void nn_model_set_grad_share(struct nn_model *m, int on);
/* The bf16 path the prepared model runs (NN_BF16_OFF: fp32, or not prepared fast). */
enum nn_bf16 nn_model_bf16_path(const struct nn_model *m);
/* Makes layouts, primitives and the workspace for batch; train: also backward. Sizes are
 * 64-bit and checked first: a batch whose activations cannot fit in this node's memory
 * fails with ERR_TOO_LARGE naming "batch_size" before anything is made. */
int nn_model_prepare(struct nn_model *m, int batch, enum nn_backend backend, int train,
                     struct err *e);
/* x: (batch, C, H, W) plain, borrowed until backward. train: batch statistics and dropout
 * (keyed by the model's seed, step and layer) versus running statistics and identity. */
int nn_model_forward(struct nn_model *m, const float *x, int train, uint64_t step,
                     struct err *e);
/* The logits (batch, classes), plain. Borrowed. */
const float *nn_model_output(const struct nn_model *m);
int nn_model_classes(const struct nn_model *m);
/* Labels per sample: T for a sequence output (one per token), else 1. */
int nn_model_labels_per_sample(const struct nn_model *m);
/* Softmax cross-entropy of the last forward against labels (borrowed until backward;
 * nn_model_labels_per_sample per sample, so a sequence model's loss is the mean over
 * tokens and correct counts tokens); only the first n_valid samples count. Also sets
 * dloss/dlogits for backward. */
int nn_model_loss(struct nn_model *m, const int32_t *labels, int n_valid, double *loss,
                  int *correct, struct err *e);
/* Backward through every layer in reverse; gradients ACCUMULATE into m->grads; hook (may
 * be NULL) fires once per layer that has parameters, right after its gradients are final. */
int nn_model_backward(struct nn_model *m, nn_grad_hook_fn hook, void *ctx, struct err *e);

/* ---- pipeline stages ----------------------------------------------------------------- *
 * A stage is a contiguous run of layers [first, end) cut out as a model of its own, whose
 * input is the one tensor crossing into its first layer. A cut is only possible where
 * exactly one tensor crosses (between residual blocks, not inside one): that activation,
 * and its gradient backwards, is all two neighbouring stages exchange. */

/* The layers k (1 <= k < nnodes) a stage may start at, ascending, into starts (up to cap);
 * returns how many there are. */
int nn_model_stage_starts(const struct nn_model *m, int *starts, int cap);
/* Cuts m (finished) into p stages with the largest stage's cost as small as possible: cost
 * has a value per layer (a measured time), or is NULL for the parameters (a weight tied
 * across a cut counts in both stages, which each hold it). first[s] is stage s's first
 * layer, first[p] = nnodes. ERR_INVALID naming "pipeline" when m has fewer than p - 1
 * places to cut. */
int nn_model_stage_split(const struct nn_model *m, int p, const double *cost, int *first,
                         struct err *e);
/* Builds in out (nn_model_init'd) layers [first, end) of m (finished) as a finished model:
 * its input is the tensor crossing into first (for first > 0 it needs a gradient, which
 * backward leaves for the previous stage), its parameters keep m's names and
 * initialisers (each records its origin), a weight tied to a parameter of an earlier
 * stage becomes the layer's own "<layer>.weight", and dropout keys keep m's numbering.
 * Its output need not feed a loss. ERR_INVALID when first is no place to cut. */
int nn_model_stage(const struct nn_model *m, int first, int end, struct nn_model *out,
                   struct err *e);
/* Copies m's parameter values (by each stage parameter's origin) and batch-norm buffers
 * into stage s; both have their arenas. */
int nn_model_stage_copy_params(const struct nn_model *m, int first, struct nn_model *s,
                               struct err *e);
/* dst, built like src, computes on src's parameter, gradient and buffer arenas instead of
 * its own (borrowed: src must outlive dst): another set of activations, so a pipeline
 * stage holds several micro-batches in flight. Call instead of nn_model_init_params. */
int nn_model_share_arenas(struct nn_model *dst, const struct nn_model *src, struct err *e);
/* Backward seeded with dout (the output tensor's gradient, plain layout) instead of a
 * loss: a stage before the last. Gradients accumulate; hook as nn_model_backward. */
int nn_model_backward_from(struct nn_model *m, const float *dout, nn_grad_hook_fn hook,
                           void *ctx, struct err *e);
/* Floats of one sample of tensor t (its plain size). */
size_t nn_model_tensor_sample(const struct nn_model *m, int tensor);

/* ---- inspection --------------------------------------------------------------------- */

int nn_model_output_tensor(const struct nn_model *m);
struct nn_shape nn_model_tensor_shape(const struct nn_model *m, int tensor);
/* Copies a tensor (grad: its gradient) of the last step into out in plain layout. */
int nn_model_read_tensor(struct nn_model *m, int tensor, int grad, float *out, struct err *e);
/* The running mean (C) and var (C) of a batch-norm layer, or NULL. Borrowed. */
float *nn_model_bn_running(struct nn_model *m, int node);
int nn_model_node_count(const struct nn_model *m);
const char *nn_model_node_name(const struct nn_model *m, int node);
enum nn_op nn_model_node_op(const struct nn_model *m, int node);

/* A layer as another engine needs it (the GPU runner, worker/nn/cuda/gmodel.c, walks the same
 * graph): its op and configuration, the tensors it reads and writes, its slice of the
 * parameter arena and of the buffer arena. Plain values; name is borrowed. */
struct nn_node_info {
    enum nn_op op;
    const char *name;
    int in[2], nin, out; /* tensor ids (in[1] for add) */
    int first_param, nparams;
    size_t param_off, param_len;
    size_t buf_off; /* batch norm: running mean (C) then var (C) in the buffer arena */
    union nn_layer_cfg cfg;
    int seq;        /* linear: over the T rows of each sample of a sequence */
    int tied_param; /* linear: its weight is this earlier parameter tensor; -1 none */
};
void nn_model_node_info(const struct nn_model *m, int node, struct nn_node_info *out);
/* Whether backward computes tensor's gradient (it leads to a parameter). */
int nn_model_tensor_needs_grad(const struct nn_model *m, int tensor);
/* Overrides a parameter's initialiser (before nn_model_init_params). */
void nn_model_set_init(struct nn_model *m, int param, enum nn_init init, float value);
/* One line per layer: name, op, output shape, parameters, oneDNN implementation. */
void nn_model_print(struct nn_model *m, FILE *out);

/* How many convolution layers run one algorithm (nn_conv2d_algo_name; name static). */
struct nn_conv_algo_count {
    const char *name;
    int layers;
};
/* The algorithms m's convolutions run on the fast backend, in the order first met, at
 * most cap of them into out; returns how many. 0 before nn_model_prepare or on the
 * reference backend, whose plain loops have no algorithm to choose. */
int nn_model_conv_algos(const struct nn_model *m, struct nn_conv_algo_count *out, int cap);

#endif
