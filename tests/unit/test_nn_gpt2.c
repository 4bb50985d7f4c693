/* Unit tests for the GPT-2 models of worker/nn/models.c on the graph of worker/nn/model.c:
 * parameter counts and names as HF's GPT2LMHeadModel has them, the tied output projection,
 * the reference and oneDNN backends agreeing on a whole training step, finite differences
 * through the whole network, the hook's slices, token checks, and a model that learns.
 *
 * Sizes: gpt2-tiny (2 blocks, 4 heads, 64 channels) at a few tokens keeps the reference
 * loops quick under the sanitizers. GPT-2 small's 124,439,808 is HF's
 * sum(p.numel() for p in GPT2LMHeadModel(GPT2Config()).parameters()) (wte counted once). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/model_check.h"
#include "tests/unit/test.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/nn/optim.h"

enum { G_N = 2, G_T = 8, G_V = 32 };

/* gpt2-tiny for G_T tokens over a G_V vocabulary, prepared; ids and next-token targets from
 * a seeded stream. */
static int gpt2_setup(struct nn_model *m, enum nn_backend be, float *x, int32_t *y,
                      struct err *e)
{
    struct nn_rng r;
    nn_rng_seed(&r, 11);
    for (int i = 0; i < G_N * G_T; i++) {
        x[i] = (float)(nn_rng_next(&r) % G_V);
        y[i] = (int32_t)(nn_rng_next(&r) % G_V);
    }
    nn_model_init(m);
    return nn_models_build(m, "gpt2-tiny", 1, 1, G_T, G_V, NULL, e) ||
           nn_model_init_params(m, 7, e) || nn_model_prepare(m, G_N, be, 1, e);
}

static int gpt2_loss(struct nn_model *m, const float *x, const int32_t *y, double *loss,
                     struct err *e)
{
    int right;
    return nn_model_forward(m, x, 1, 0, e) || nn_model_loss(m, y, G_N, loss, &right, e);
}

static int gpt2_step(struct nn_model *m, const float *x, const int32_t *y, double *loss,
                     nn_grad_hook_fn hook, void *ctx, struct err *e)
{
    nn_model_zero_grad(m);
    return gpt2_loss(m, x, y, loss, e) || nn_model_backward(m, hook, ctx, e);
}

/* The parameter counts HF has, whatever the sequence length (the position table is
 * n_positions long), moved only by the vocabulary; the names are state_dict()'s. */
static void test_gpt2_params(void)
{
    static const struct {
        const char *name;
        int t, vocab;
        size_t params;
    } cases[] = {
        {"gpt2-small", 1024, 50257, 124439808}, {"gpt2-small", 64, 50257, 124439808},
        {"gpt2-small", 64, 256, 86039040},      {"gpt2-tiny", 128, 256, 124672},
        {"gpt2-tiny", 16, 100, 114688},
    };
    struct err e;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct nn_model m;
        nn_model_init(&m);
        T_OK(nn_models_build(&m, cases[i].name, 1, 1, cases[i].t, cases[i].vocab, NULL, &e));
        T_CHECK_MSG(nn_model_param_count(&m) == cases[i].params, "%s T=%d V=%d: %zu, HF %zu",
                    cases[i].name, cases[i].t, cases[i].vocab, nn_model_param_count(&m),
                    cases[i].params);
        T_EQ_INT(nn_model_classes(&m), cases[i].vocab);
        T_EQ_INT(nn_model_labels_per_sample(&m), cases[i].t);
        int count;
        const struct nn_param *p = nn_model_param_info(&m, &count);
        T_CHECK(!strcmp(p[0].name, "transformer.wte.weight"));
        T_CHECK(!strcmp(p[1].name, "transformer.wpe.weight"));
        T_CHECK(!strcmp(p[2].name, "transformer.h.0.ln_1.weight"));
        T_CHECK(!strcmp(p[4].name, "transformer.h.0.attn.c_attn.weight"));
        T_CHECK(!strcmp(p[count - 1].name, "transformer.ln_f.bias"));
        nn_model_destroy(&m);
    }
    struct nn_model m;
    nn_model_init(&m);
    T_CHECK(nn_models_build(&m, "gpt2-tiny", 1, 1, 129, 256, NULL, &e) != 0);
    T_EQ_INT(e.code, ERR_INVALID);
    nn_model_destroy(&m);
}

/* GPT-2's init: N(0, 0.02) linear weights, the residual projections 0.02 / sqrt(2 L), zero
 * biases, layer norm (1, 0). */
static void test_gpt2_init(void)
{
    struct err e;
    struct nn_model m;
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "gpt2-tiny", 1, 1, 128, 256, NULL, &e));
    T_OK(nn_model_init_params(&m, 3, &e));
    int count;
    const struct nn_param *p = nn_model_param_info(&m, &count);
    for (int i = 0; i < count; i++) {
        const float *w = m.params.data + p[i].offset;
        double s = 0, s2 = 0;
        for (size_t k = 0; k < p[i].len; k++)
            s += w[k], s2 += (double)w[k] * w[k];
        double mean = s / (double)p[i].len, std = sqrt(s2 / (double)p[i].len - mean * mean);
        double want = strstr(p[i].name, "c_proj.weight") ? 0.01 /* 0.02 / sqrt(2*2) */
                      : strstr(p[i].name, ".weight") && !strstr(p[i].name, "ln_") ? 0.02
                                                                                  : 0;
        if (strstr(p[i].name, "ln_") && strstr(p[i].name, ".weight"))
            T_CHECK_MSG(w[0] == 1 && w[p[i].len - 1] == 1, "%s", p[i].name);
        else if (want == 0)
            T_CHECK_MSG(w[0] == 0 && w[p[i].len - 1] == 0, "%s", p[i].name);
        else
            T_CHECK_MSG(fabs(std - want) < 0.1 * want, "%s: std %g, want %g", p[i].name, std,
                        want);
    }
    nn_model_destroy(&m);
}

/* One training step on both backends: loss, logits and every parameter gradient agree
 * (wte's holds the embedding's and the tied projection's parts). */
static void test_gpt2_backends_agree(void)
{
    struct err e;
    struct nn_model a, b;
    float x[G_N * G_T];
    int32_t y[G_N * G_T];
    double la, lb;
    T_OK(gpt2_setup(&a, NN_BACKEND_REF, x, y, &e));
    T_OK(gpt2_setup(&b, NN_BACKEND_FAST, x, y, &e));
    T_OK(gpt2_step(&a, x, y, &la, NULL, NULL, &e));
    T_OK(gpt2_step(&b, x, y, &lb, NULL, NULL, &e));
    T_CHECK_MSG(fabs(la - log((double)G_V)) < 0.2, "initial loss %g, ln V %g", la,
                log((double)G_V));
    T_NEAR(la, lb, 1e-4 * fabs(la));
    const float *ya = nn_model_output(&a), *yb = nn_model_output(&b);
    for (int i = 0; i < G_N * G_T * G_V; i++)
        T_NEAR(ya[i], yb[i], 1e-3);
    int bad = 0;
    for (int p = 0; p < a.nparam_tensors; p++) {
        const struct nn_param *pi = &a.param_info[p];
        double scale = 0, worst = 0;
        for (size_t k = 0; k < pi->len; k++) {
            scale = fmax(scale, fabs(a.grads.data[pi->offset + k]));
            worst = fmax(worst,
                         fabs(a.grads.data[pi->offset + k] - b.grads.data[pi->offset + k]));
        }
        if (!(scale > 0) || worst > 2e-3 * scale + 1e-7) {
            fprintf(stderr, "    %s: differs by %.3g (scale %.3g)\n", pi->name, worst, scale);
            bad = 1;
        }
    }
    nn_model_destroy(&a);
    nn_model_destroy(&b);
    T_CHECK(!bad);
}

/* Central differences of the whole network's loss against backward, on the reference
 * backend, a few entries of every parameter tensor (wte at ids the batch uses, so both its
 * uses count). The network is smooth (no ReLU kinks): float rounding of the loss over 2h
 * bounds the error. */
static void test_gpt2_gradcheck(void)
{
    struct err e;
    struct nn_model m;
    float x[G_N * G_T];
    int32_t y[G_N * G_T];
    double l0;
    T_OK(gpt2_setup(&m, NN_BACKEND_REF, x, y, &e));
    T_OK(gpt2_step(&m, x, y, &l0, NULL, NULL, &e));
    float *g = model_grads_copy(&m);
    T_CHECK(g);
    int bad = 0, checked = 0;
    for (int p = 0; p < m.nparam_tensors; p++) {
        const struct nn_param *pi = &m.param_info[p];
        for (size_t k = 0; k < 4; k++) {
            size_t j = p == 0 ? (size_t)x[k] * 64 + k : (k * 7919 + 13) % pi->len;
            size_t i = pi->offset + j;
            const float h = 1e-2f;
            double lp, lm;
            T_OK(model_central(&m, gpt2_loss, x, y, i, h, &lp, &lm, &e));
            double num = (lp - lm) / (2.0 * h);
            checked++;
            if (fabs(num - g[i]) > 2e-4 + 3e-2 * fmax(fabs(num), fabs(g[i]))) {
                fprintf(stderr, "    %s[%zu]: numeric %.6g, backward %.6g\n", pi->name, j, num,
                        g[i]);
                bad = 1;
            }
        }
    }
    free(g);
    nn_model_destroy(&m);
    T_CHECK(!bad);
    T_CHECK(checked >= 4 * 27);
}

struct gpt2_hooks {
    int calls, last_node;
    size_t covered;
    size_t first_off;
};

static void gpt2_hook(void *ctx, const struct nn_grad_ready *r)
{
    struct gpt2_hooks *h = ctx;
    h->calls++;
    h->covered += r->len;
    h->last_node = r->node;
    h->first_off = r->offset;
}

/* The hook's slices cover the arena once, and the embedding (whose wte the tied head also
 * writes) comes last, at offset 0: a bucket holding wte is only launched once final. */
static void test_gpt2_hook(void)
{
    struct err e;
    struct nn_model m;
    float x[G_N * G_T];
    int32_t y[G_N * G_T];
    double l;
    struct gpt2_hooks h = {0};
    T_OK(gpt2_setup(&m, NN_BACKEND_FAST, x, y, &e));
    T_OK(gpt2_step(&m, x, y, &l, gpt2_hook, &h, &e));
    T_EQ_INT(h.calls, 2 * 6 + 2); /* 6 layers with parameters a block, ln_f, the embedding */
    T_CHECK(h.covered == m.nparams);
    T_EQ_INT(h.last_node, 0);
    T_CHECK(h.first_off == 0);
    nn_model_destroy(&m);
}

/* Ids that are no token fail the forward, naming them, before any table is read. */
static void test_gpt2_bad_tokens(void)
{
    struct err e;
    struct nn_model m;
    float x[G_N * G_T];
    int32_t y[G_N * G_T];
    T_OK(gpt2_setup(&m, NN_BACKEND_FAST, x, y, &e));
    static const float bad[] = {-1.0f, (float)G_V, 2.5f, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        float save = x[5];
        x[5] = bad[i];
        T_CHECK(nn_model_forward(&m, x, 1, 0, &e) != 0);
        T_EQ_INT(e.code, ERR_INVALID);
        T_CHECK(!strcmp(e.field, "tokens"));
        x[5] = save;
    }
    double loss;
    int right;
    T_OK(nn_model_forward(&m, x, 1, 0, &e));
    y[3] = G_V; /* a target outside the vocabulary */
    T_CHECK(nn_model_loss(&m, y, G_N, &loss, &right, &e) != 0);
    nn_model_destroy(&m);
}

/* gpt2-tiny learns a sequence with structure (token t+1 = token t + 1 mod V) from random
 * starting points: the loss falls from ln V to well below it in 60 Adam steps, and an
 * evaluation batch padded past n_valid counts only the valid samples. */
static void test_gpt2_learns(void)
{
    enum { B = 8, T = 16, V = 24 };
    struct err e;
    struct nn_model m;
    struct nn_optim o;
    static float x[B * T];
    static int32_t y[B * T];
    struct nn_rng r;
    nn_rng_seed(&r, 5);
    nn_model_init(&m);
    T_OK(nn_models_build(&m, "gpt2-tiny", 1, 1, T, V, NULL, &e));
    T_OK(nn_model_init_params(&m, 1, &e));
    T_OK(nn_model_prepare(&m, B, NN_BACKEND_FAST, 1, &e));
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_ADAM);
    oc.lr = 3e-3;
    T_OK(nn_optim_init(&o, &oc, nn_model_param_count(&m), &e));
    double first = 0, last = 0;
    int right = 0;
    for (int step = 0; step < 60; step++) {
        for (int b = 0; b < B; b++) {
            int start = (int)(nn_rng_next(&r) % V);
            for (int t = 0; t < T; t++) {
                x[b * T + t] = (float)((start + t) % V);
                y[b * T + t] = (start + t + 1) % V;
            }
        }
        double loss;
        nn_model_zero_grad(&m);
        T_OK(nn_model_forward(&m, x, 1, (uint64_t)step, &e));
        T_OK(nn_model_loss(&m, y, B, &loss, &right, &e));
        T_OK(nn_model_backward(&m, NULL, NULL, &e));
        nn_optim_step(&o, m.params.data, m.grads.data, oc.lr);
        if (step == 0)
            first = loss;
        last = loss;
    }
    T_CHECK_MSG(first > 0.8 * log((double)V) && last < 0.25 * first, "loss %.3f -> %.3f", first,
                last);
    T_CHECK_MSG(right > B * T / 2, "%d of %d tokens right", right, B * T);
    /* n_valid: 3 samples count, the rest is padding with impossible-to-guess targets */
    for (int i = 3 * T; i < B * T; i++)
        y[i] = (y[i] + 7) % V;
    double loss3;
    int right3;
    T_OK(nn_model_forward(&m, x, 0, 0, &e));
    T_OK(nn_model_loss(&m, y, 3, &loss3, &right3, &e));
    T_CHECK(right3 <= 3 * T && right3 > 3 * T / 2);
    nn_optim_cleanup(&o);
    nn_model_destroy(&m);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_gpt2_params);
    TEST_RUN(test_gpt2_init);
    TEST_RUN(test_gpt2_backends_agree);
    TEST_RUN(test_gpt2_gradcheck);
    TEST_RUN(test_gpt2_hook);
    TEST_RUN(test_gpt2_bad_tokens);
    TEST_RUN(test_gpt2_learns);
    return test_end();
}
