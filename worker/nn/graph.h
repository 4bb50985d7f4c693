/* graph: what a node of the layer graph is, shared by the model and the layers: the op
 * (enum nn_op, which row of the layer table runs it) and the op's configuration (union
 * nn_layer_cfg, one member per op).
 *
 * Decision: a header of its own with no source, not model.h: the layer files (through
 * layer_type.h) need these two types, and model.c names every layer file's row, so were
 * they taken from model.h the layers would depend on the model that dispatches to them, a
 * loop. Here both sides depend on a set of types and neither on the other. */
#ifndef DDPB_NN_GRAPH_H
#define DDPB_NN_GRAPH_H

#include "worker/nn/layers.h"

enum nn_op {
    NN_OP_CONV,
    NN_OP_BN,
    NN_OP_ACT,
    NN_OP_MAXPOOL,
    NN_OP_AVGPOOL, /* also global average pooling */
    NN_OP_ADAPTIVE_AVGPOOL,
    NN_OP_LINEAR,
    NN_OP_DROPOUT,
    NN_OP_ADD,
    NN_OP_FLATTEN,
    /* the transformer's (GPT-2): sequence tensors (N,T,C) */
    NN_OP_EMBED,
    NN_OP_LAYERNORM,
    NN_OP_GELU,
    NN_OP_ATTENTION,
    NN_OP_CONCAT, /* channels side by side (Inception's branches) */
    NN_OP_COUNT   /* not an op: how many there are (the row tables' size) */
};

/* A layer's configuration: the member its op uses (the graph keeps one per node). */
union nn_layer_cfg {
    struct nn_conv2d_cfg conv;
    struct nn_bn_cfg bn;
    enum nn_act act;
    struct nn_pool_cfg pool; /* max and average pooling */
    struct {
        int oh, ow;
    } adapt; /* adaptive average pooling's output size */
    struct nn_linear_cfg linear;
    struct nn_dropout_cfg dropout;
    int add_relu;
    struct nn_embed_cfg embed;
    struct nn_attention_cfg attn;
};

#endif
