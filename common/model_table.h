/* model_table: the one list of the models ddpbench trains, with the facts both programs
 * need: the name a spec uses, the model's usual input shape and class count, and its
 * parameter count there (as PyTorch counts them). The daemon validates "model" and
 * "buckets_of" against it (common/spec.c), the JSON Schema's enums are generated from it,
 * the worker's zoo (worker/nn/models.c) builds exactly these names, and a spec without a
 * dataset shape trains at the row's shape (worker/workload_train.c), as the collective
 * workload's "buckets_of" replays the row's shape and classes.
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
    const char *name;  /* as a spec names it: "resnet18" */
    int c, h, w;       /* the usual input: 1x28x28 (MNIST), 3x32x32 (CIFAR), 3x224x224 */
    int classes;       /* the usual head: 10 for the MNIST and CIFAR forms, 1000 ImageNet */
    int64_t params;    /* parameters at (c, h, w) and classes, PyTorch's count */
    const char *desc;  /* one line */
};

/* Number of rows. */
size_t model_table_count(void);
/* Row i in table order, or NULL when i >= model_table_count(). */
const struct model_info *model_table_at(size_t i);
/* The row named name, or NULL when no model has that name. */
const struct model_info *model_table_find(const char *name);

#endif
