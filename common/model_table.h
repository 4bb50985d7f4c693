/* model_table: the one list of the models ddpbench trains, with the facts both programs
 * need: the name a spec uses, the model's usual input shape and class count, and its
 * parameter count there (as PyTorch counts them). The daemon validates "model" and
 * "buckets_of" against it (common/spec_table.c), the JSON Schema's enums are generated from it,
 * the worker's zoo (worker/nn/models.c) builds exactly these names, and a spec without a
 * dataset shape trains at the row's shape (worker/workload_train.c), as the collective
 * workload's "buckets_of" replays the row's shape and classes. The spec's memory estimate
 * (spec_memory_estimate) reads the parameter and activation sizes from here.
 *
 * Decision: the table lives in common/ and holds nothing the daemon cannot link (no
 * builder pointers); the worker keeps its builders in its own table, and
 * tests/unit/test_nn_models.c checks the two against each other and every row's parameter
 * count against the built model. A new model is one row here and one builder there.
 *
 * Ownership: every pointer returned points into a static table; nothing is allocated. */
#ifndef DDPB_MODEL_TABLE_H
#define DDPB_MODEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct model_info {
    const char *name; /* as a spec names it: "resnet18" */
    int c, h, w;      /* the usual input: 1x28x28 (MNIST), 3x32x32 (CIFAR), 3x224x224 */
    int classes;      /* the usual head: 10 for the MNIST and CIFAR forms, 1000 ImageNet */
    int64_t params;   /* parameters at (c, h, w) and classes, PyTorch's count */
    const char *desc; /* one line */
    /* How the parameter count moves away from (c, h, w, classes), for model_table_params:
     * the first convolution has in_params weights per input channel; the flatten yields
     * flat_c features (flat_stride 0: global or adaptive pooling before it fixes them) or
     * flat_c channels of (side / flat_stride - flat_border) per side; the linear layer
     * after it has flat_out outputs (0: it is the head, with `classes` outputs), and the
     * head then reads head_in features. */
    int in_params;
    int flat_c, flat_stride, flat_border, flat_out, head_in;
    /* Floats of every tensor of one sample's forward pass (the input and each layer's
     * output) at (c, h, w), and at (c, 16 h, 16 w): model_table_activations interpolates
     * between them by input area. */
    int64_t act_floats, act_floats_x16;
    /* Transformers (GPT-2; 0 for the CNNs): channels, blocks and heads. The input is (1, 1,
     * seq_len) token ids, h * w the tokens; the vocabulary is `classes` and moves the
     * parameters by classes * embd (the embedding, tied to the output projection); the
     * position table is fixed (w is n_positions), so seq_len does not. act_floats counts the
     * tensors, linear in tokens; model_table_activations adds the attention matrices
     * (layers * heads * T^2), which are not tensors of the graph. */
    int embd, layers, heads;
    /* 1: ddpbench's GPU runner (worker/nn/cuda/gmodel.c) lacks one of its layers (Inception's
     * channel concat), so engine ddpbench trains it on device cpu only; the framework
     * engines run it anywhere. 0 for the rest. */
    int cpu_engine_only;
};

/* Number of rows. */
size_t model_table_count(void);
/* Row i in table order, or NULL when i >= model_table_count(). */
const struct model_info *model_table_at(size_t i);
/* The row named name, or NULL when no model has that name. */
const struct model_info *model_table_find(const char *name);

/* Parameters of mi's network for input (c, h, w) and `classes` outputs: the row's count,
 * moved by the layers whose size depends on them (the first convolution's input channels,
 * the linear layer after a flatten, the head). Exact at the row's shape and wherever the
 * flatten's side is side / flat_stride - flat_border (every shape tests/unit/
 * test_nn_models.c checks); an estimate where strided layers round otherwise. A double, so
 * no product overflows. */
double model_table_params(const struct model_info *mi, int c, int h, int w, int classes);
/* Floats of one sample's forward tensors at (c, h, w): the row's act_floats plus, per
 * input pixel beyond the row's area, the rate measured between the row's shape and 16
 * times its side (the input itself counted at its own size). An estimate, exact at those
 * two shapes: borders and pooling tails make small inputs of the MNIST forms come out up
 * to about 15 % high and shapes below the row's a little low (tests/unit/test_nn_models.c
 * bounds it). */
double model_table_activations(const struct model_info *mi, int c, int h, int w);

#endif
