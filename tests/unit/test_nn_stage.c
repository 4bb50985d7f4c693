/* Unit tests for cutting a model into pipeline stages (worker/nn/model.h "pipeline
 * stages"): where a model can be cut, the parameter-balanced split against every
 * alternative, a chain of stages computing exactly what the whole model computes (loss,
 * logits, every parameter gradient, batch-norm statistics; a tied weight split across
 * stages sums to the whole model's), on both backends, and stages sharing arenas holding
 * two micro-batches in flight.
 *
 * Tolerance: a stage runs the same layers on the same data as the whole model. The
 * reference path agrees to 1e-6 of each tensor's scale; on the fast path the crossing
 * activation arrives in plain layout where the whole model kept oneDNN's blocked one, so a
 * convolution may pick another kernel and sum in another order: ~2e-5 measured on
 * resnet18-cifar (batch norm amplifies it), 1e-4 allowed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"

struct net {
    const char *name;
    int c, h, w, classes, batch;
};

static const struct net gpt2 = {"gpt2-tiny", 1, 1, 8, 32, 2};
static const struct net resnet = {"resnet18-cifar", 3, 8, 8, 10, 4};
static const struct net lenet = {"lenet5", 1, 28, 28, 10, 3};

/* Inputs valid for the net: token ids or images, and labels (one per token for gpt2). */
static void net_data(const struct net *n, float *x, int32_t *y, int labels)
{
    struct nn_rng r;
    nn_rng_seed(&r, 17);
    size_t nx = (size_t)n->batch * n->c * n->h * n->w;
    for (size_t i = 0; i < nx; i++)
        x[i] = n->c == 1 && n->h == 1 ? (float)(nn_rng_next(&r) % (uint64_t)n->classes)
                                      : (float)nn_rng_normal(&r);
    for (int i = 0; i < n->batch * labels; i++)
        y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)n->classes);
}

static int net_build(const struct net *n, struct nn_model *m, struct err *e)
{
    nn_model_init(m);
    return nn_models_build(m, n->name, n->c, n->h, n->w, n->classes, NULL, e);
}

/* Largest difference of a and b relative to a's scale. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(a[i]));
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

/* Where gpt2-tiny and resnet18-cifar can be cut: between blocks (one tensor crosses),
 * never inside a residual block (two cross). */
static void test_stage_starts(void)
{
    struct err e;
    struct nn_model m;
    int starts[256];
    T_OK(net_build(&gpt2, &m, &e));
    int k = nn_model_stage_starts(&m, starts, 256);
    int blocks = 0;
    for (int i = 0; i < k; i++) {
        const char *name = nn_model_node_name(&m, starts[i]);
        /* before ln_1 or ln_2 only the residual stream crosses; before c_fc or an add
         * the residual stream and the branch do */
        T_CHECK_MSG(!strstr(name, "c_fc") && !strstr(name, "add_") && !strstr(name, "attn"),
                    "cut inside a block at %s", name);
        blocks += strstr(name, ".ln_1") != NULL;
    }
    T_EQ_INT(blocks, 2); /* before each block (after the embedding, between the two) */
    T_EQ_INT(k, 6);      /* and before each block's MLP half, ln_f and the head */
    nn_model_destroy(&m);
    T_OK(net_build(&resnet, &m, &e));
    k = nn_model_stage_starts(&m, starts, 256);
    int inside = 0, block_starts = 0;
    for (int i = 0; i < k; i++) {
        const char *name = nn_model_node_name(&m, starts[i]);
        inside += strstr(name, ".bn1") != NULL || strstr(name, ".conv2") != NULL;
        block_starts += strstr(name, ".conv1") != NULL && strstr(name, "layer") != NULL;
    }
    T_EQ_INT(inside, 0);
    T_EQ_INT(block_starts, 8); /* each of the 8 BasicBlocks can start a stage */
    nn_model_destroy(&m);
}

/* A cut hands over the output of the layer before it: where the one tensor crossing is made
 * earlier (here flatten's, read by the second head while the first head's output is
 * dropped), the model cannot be cut, since that stage's output would be another tensor. */
static void test_stage_cut_hands_over_the_last_output(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    int x = nn_model_input(&m, 1, 4, 4);
    int f = nn_model_flatten(&m, "flatten", x);
    nn_model_linear(&m, "dropped", f, 3, 1);
    int h = nn_model_linear(&m, "head", f, 2, 1);
    T_CHECK(h > 0);
    T_OK(nn_model_finish(&m, &e));
    int starts[8];
    int k = nn_model_stage_starts(&m, starts, 8);
    T_EQ_INT(k, 1); /* only after flatten: before "dropped" */
    T_EQ_INT(starts[0], 1);
    struct nn_model s;
    nn_model_init(&s);
    T_CHECK(nn_model_stage(&m, 2, 3, &s, &e) != 0); /* "head" alone: flatten's output */
    T_EQ_STR(e.field, "pipeline");
    nn_model_destroy(&s);
    nn_model_destroy(&m);
}

/* The split is contiguous, covers every layer, and no other choice of cuts has a smaller
 * largest stage (checked against all pairs of cuts for 3 stages). */
static void test_stage_split_balanced(void)
{
    struct err e;
    struct nn_model m;
    T_OK(net_build(&resnet, &m, &e));
    int starts[256], first[4];
    int k = nn_model_stage_starts(&m, starts, 256);
    T_OK(nn_model_stage_split(&m, 3, NULL, first, &e));
    T_EQ_INT(first[0], 0);
    T_EQ_INT(first[3], nn_model_node_count(&m));
    T_CHECK(first[0] < first[1] && first[1] < first[2] && first[2] < first[3]);
    double *cost = calloc((size_t)m.nnodes + 1, sizeof *cost); /* prefix sums */
    for (int i = 0; i < m.nnodes; i++) {
        struct nn_node_info ni;
        nn_model_node_info(&m, i, &ni);
        cost[i + 1] = cost[i] + (double)ni.param_len;
    }
    double got = 0;
    for (int s = 0; s < 3; s++)
        got = fmax(got, cost[first[s + 1]] - cost[first[s]]);
    double best = INFINITY;
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++) {
            double worst = fmax(cost[starts[a]], fmax(cost[starts[b]] - cost[starts[a]],
                                                      cost[m.nnodes] - cost[starts[b]]));
            best = fmin(best, worst);
        }
    T_CHECK_MSG(got == best, "largest stage %.0f, best possible %.0f", got, best);
    /* the same with costs of one's own (a pipeline's measured layer times) */
    double *t = calloc((size_t)m.nnodes, sizeof *t);
    struct nn_rng r;
    nn_rng_seed(&r, 8);
    for (int i = 0; i < m.nnodes; i++)
        t[i] = nn_rng_uniform(&r);
    T_OK(nn_model_stage_split(&m, 3, t, first, &e));
    for (int i = 0; i < m.nnodes; i++)
        cost[i + 1] = cost[i] + t[i];
    got = 0;
    for (int s = 0; s < 3; s++)
        got = fmax(got, cost[first[s + 1]] - cost[first[s]]);
    best = INFINITY;
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++)
            best = fmin(best, fmax(cost[starts[a]], fmax(cost[starts[b]] - cost[starts[a]],
                                                         cost[m.nnodes] - cost[starts[b]])));
    T_CHECK_MSG(fabs(got - best) < 1e-12, "largest stage %.6f, best possible %.6f", got, best);
    free(t);
    free(cost);
    T_CHECK(nn_model_stage_split(&m, k + 2, NULL, first, &e) != 0);
    T_EQ_STR(e.field, "pipeline");
    /* a cut inside a block is refused */
    struct nn_model s;
    nn_model_init(&s);
    int inside = -1;
    for (int i = 1; i < m.nnodes && inside < 0; i++)
        if (strstr(nn_model_node_name(&m, i), "layer1.0.bn1"))
            inside = i;
    T_CHECK(inside > 0 && nn_model_stage(&m, inside, m.nnodes, &s, &e) != 0);
    nn_model_destroy(&s);
    nn_model_destroy(&m);
}

/* Runs net whole and as p stages (parameter-balanced) on one batch and compares. */
static void stage_chain_agrees(const struct net *n, int p, enum nn_backend be)
{
    double tol = be == NN_BACKEND_REF ? 1e-6 : 1e-4;
    struct err e;
    struct nn_model whole, st[4];
    T_OK(net_build(n, &whole, &e));
    T_OK(nn_model_init_params(&whole, 9, &e));
    int labels = nn_model_labels_per_sample(&whole);
    size_t nx = (size_t)n->batch * n->c * n->h * n->w;
    float *x = malloc(nx * sizeof *x);
    int32_t *y = malloc((size_t)n->batch * labels * sizeof *y);
    net_data(n, x, y, labels);
    int first[5];
    T_OK(nn_model_stage_split(&whole, p, NULL, first, &e));
    for (int s = 0; s < p; s++) {
        nn_model_init(&st[s]);
        T_OK(nn_model_stage(&whole, first[s], first[s + 1], &st[s], &e));
        T_OK(nn_model_init_params(&st[s], 9, &e));
        T_OK(nn_model_stage_copy_params(&whole, first[s], &st[s], &e));
        T_OK(nn_model_prepare(&st[s], n->batch, be, 1, &e));
    }
    T_OK(nn_model_prepare(&whole, n->batch, be, 1, &e));
    double lw, ls;
    int rw, rs;
    nn_model_zero_grad(&whole);
    T_OK(nn_model_forward(&whole, x, 1, 3, &e));
    T_OK(nn_model_loss(&whole, y, n->batch, &lw, &rw, &e));
    T_OK(nn_model_backward(&whole, NULL, NULL, &e));
    /* the chain: each stage's output, plain, is the next one's input */
    float *act[4] = {x, NULL, NULL, NULL}, *grad[4] = {NULL};
    for (int s = 0; s < p; s++) {
        nn_model_zero_grad(&st[s]);
        T_OK(nn_model_forward(&st[s], act[s], 1, 3, &e));
        if (s + 1 < p) {
            int out = nn_model_output_tensor(&st[s]);
            size_t len = (size_t)n->batch * nn_model_tensor_sample(&st[s], out);
            act[s + 1] = malloc(len * sizeof(float));
            grad[s] = malloc(len * sizeof(float));
            T_OK(nn_model_read_tensor(&st[s], out, 0, act[s + 1], &e));
        }
    }
    T_OK(nn_model_loss(&st[p - 1], y, n->batch, &ls, &rs, &e));
    T_NEAR(ls, lw, tol * fabs(lw));
    T_EQ_INT(rs, rw);
    size_t nout = (size_t)n->batch * labels * n->classes;
    T_CHECK(rel_diff(nn_model_output(&whole), nn_model_output(&st[p - 1]), nout) < tol);
    for (int s = p - 1; s >= 0; s--) {
        if (s == p - 1)
            T_OK(nn_model_backward(&st[s], NULL, NULL, &e));
        else
            T_OK(nn_model_backward_from(&st[s], grad[s], NULL, NULL, &e));
        if (s > 0)
            T_OK(nn_model_read_tensor(&st[s], 0, 1, grad[s - 1], &e));
    }
    /* every whole-model gradient is the sum of its copies' over the stages */
    int bad = 0;
    float *sum = malloc(whole.nparams * sizeof *sum);
    memset(sum, 0, whole.nparams * sizeof *sum);
    for (int s = 0; s < p; s++)
        for (int i = 0; i < st[s].nparam_tensors; i++) {
            const struct nn_param *q = &st[s].param_info[i];
            const struct nn_param *o = &whole.param_info[q->origin];
            for (size_t j = 0; j < q->len; j++)
                sum[o->offset + j] += st[s].grads.data[q->offset + j];
        }
    for (int i = 0; i < whole.nparam_tensors; i++) {
        const struct nn_param *o = &whole.param_info[i];
        double d = rel_diff(whole.grads.data + o->offset, sum + o->offset, o->len);
        if (!(d < tol)) {
            fprintf(stderr, "    %s %s p=%d: %s differs by %.3g\n", n->name,
                    be == NN_BACKEND_REF ? "ref" : "fast", p, o->name, d);
            bad = 1;
        }
    }
    T_CHECK(!bad);
    /* batch-norm running statistics moved the same way */
    for (int s = 0; s < p; s++)
        for (int i = 0; i < st[s].nnodes; i++)
            if (nn_model_node_op(&st[s], i) == NN_OP_BN) {
                const float *a = nn_model_bn_running(&whole, first[s] + i);
                const float *b = nn_model_bn_running(&st[s], i);
                struct nn_node_info ni;
                nn_model_node_info(&st[s], i, &ni);
                T_CHECK(rel_diff(a, b, 2 * (size_t)ni.cfg.bn.c) < tol);
            }
    free(sum);
    for (int s = 0; s < p; s++) {
        if (s > 0)
            free(act[s]);
        free(grad[s]);
        nn_model_destroy(&st[s]);
    }
    nn_model_destroy(&whole);
    free(x);
    free(y);
}

static void test_stage_chain_gpt2(void)
{
    for (int p = 2; p <= 3; p++) {
        stage_chain_agrees(&gpt2, p, NN_BACKEND_REF);
        stage_chain_agrees(&gpt2, p, NN_BACKEND_FAST);
    }
}

static void test_stage_chain_cnn(void)
{
    stage_chain_agrees(&resnet, 3, NN_BACKEND_FAST);
    stage_chain_agrees(&resnet, 2, NN_BACKEND_REF);
    stage_chain_agrees(&lenet, 2, NN_BACKEND_FAST);
}

/* Two models sharing one stage's arenas hold two micro-batches in flight: forwards of A
 * and B, then their backwards, leave the gradients one model leaves doing A then B. */
static void test_stage_shared_arenas(void)
{
    struct err e;
    struct nn_model whole, a, b, one;
    T_OK(net_build(&gpt2, &whole, &e));
    int first[3];
    T_OK(nn_model_stage_split(&whole, 2, NULL, first, &e));
    nn_model_init(&a);
    nn_model_init(&b);
    nn_model_init(&one);
    T_OK(nn_model_stage(&whole, first[1], first[2], &a, &e));
    T_OK(nn_model_stage(&whole, first[1], first[2], &b, &e));
    T_OK(nn_model_stage(&whole, first[1], first[2], &one, &e));
    T_OK(nn_model_init_params(&a, 4, &e));
    T_OK(nn_model_init_params(&one, 4, &e));
    T_OK(nn_model_share_arenas(&b, &a, &e));
    T_CHECK(nn_model_share_arenas(&b, &a, &e) != 0); /* has arenas now */
    T_CHECK(nn_model_init_params(&b, 4, &e) != 0);
    T_OK(nn_model_prepare(&a, 2, NN_BACKEND_FAST, 1, &e));
    T_OK(nn_model_prepare(&b, 2, NN_BACKEND_FAST, 1, &e));
    T_OK(nn_model_prepare(&one, 2, NN_BACKEND_FAST, 1, &e));
    size_t nin = 2 * nn_model_tensor_sample(&a, 0);
    struct nn_rng r;
    nn_rng_seed(&r, 2);
    float *xa = malloc(nin * sizeof *xa), *xb = malloc(nin * sizeof *xb);
    nn_rng_fill_normal(&r, xa, nin, 0, 1);
    nn_rng_fill_normal(&r, xb, nin, 0, 1);
    int32_t ya[2 * 8], yb[2 * 8];
    for (int i = 0; i < 16; i++)
        ya[i] = (int32_t)(nn_rng_next(&r) % 32), yb[i] = (int32_t)(nn_rng_next(&r) % 32);
    double l;
    int right;
    nn_model_zero_grad(&a);
    T_OK(nn_model_forward(&a, xa, 1, 0, &e));
    T_OK(nn_model_loss(&a, ya, 2, &l, &right, &e));
    T_OK(nn_model_forward(&b, xb, 1, 1, &e));
    T_OK(nn_model_loss(&b, yb, 2, &l, &right, &e));
    T_OK(nn_model_backward(&b, NULL, NULL, &e));
    T_OK(nn_model_backward(&a, NULL, NULL, &e));
    float *da = malloc(nin * sizeof *da), *want = malloc(nin * sizeof *want);
    T_OK(nn_model_read_tensor(&a, 0, 1, da, &e));
    nn_model_zero_grad(&one);
    T_OK(nn_model_forward(&one, xa, 1, 0, &e));
    T_OK(nn_model_loss(&one, ya, 2, &l, &right, &e));
    T_OK(nn_model_backward(&one, NULL, NULL, &e));
    T_OK(nn_model_read_tensor(&one, 0, 1, want, &e));
    T_CHECK(rel_diff(want, da, nin) < 1e-6); /* A's input gradient survived B's backward */
    T_OK(nn_model_forward(&one, xb, 1, 1, &e));
    T_OK(nn_model_loss(&one, yb, 2, &l, &right, &e));
    T_OK(nn_model_backward(&one, NULL, NULL, &e));
    T_CHECK(rel_diff(one.grads.data, a.grads.data, one.nparams) < 1e-6);
    free(xa), free(xb), free(da), free(want);
    nn_model_destroy(&b); /* borrowed arenas: destroyed before their owner */
    nn_model_destroy(&a);
    nn_model_destroy(&one);
    nn_model_destroy(&whole);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_stage_starts);
    TEST_RUN(test_stage_split_balanced);
    TEST_RUN(test_stage_cut_hands_over_the_last_output);
    TEST_RUN(test_stage_chain_gpt2);
    TEST_RUN(test_stage_chain_cnn);
    TEST_RUN(test_stage_shared_arenas);
    return test_end();
}
