/* test_nn_vec: the CPU engine's own vector kernels (worker/nn/vec.h). Each AVX2 kernel
 * gives the same bits as its plain-C reference on sizes around the 8-lane vector (tails)
 * and past the parallel threshold with an odd thread count (the per-thread split), the
 * reference gives what the formula gives element by element, and a same-layout
 * accumulating conversion (onednn.h nn_convert, add loop instead of a reorder) adds into
 * what was there, as the reorder with a sum post-op does. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/nn/nn.h"
#include "worker/nn/onednn.h"
#include "worker/nn/vec.h"

static const size_t vec_sizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1001, 40000 + 13};

static void vec_fill(float *x, size_t n, uint64_t seed)
{
    struct nn_rng r;
    nn_rng_seed(&r, seed);
    nn_rng_fill_normal(&r, x, n, 0, 1);
}

static int vec_have_avx2(void)
{
    return nn_isa_cpu() >= NN_ISA_AVX2;
}

static void test_vec_add_paths_agree(void)
{
    omp_set_num_threads(3);
    for (size_t k = 0; k < sizeof vec_sizes / sizeof *vec_sizes; k++) {
        size_t n = vec_sizes[k], cap = n ? n : 1;
        float *src = malloc(cap * sizeof *src), *want = malloc(cap * sizeof *want);
        float *base = malloc(cap * sizeof *base), *avx = malloc(cap * sizeof *avx);
        vec_fill(src, n, 1 + k);
        vec_fill(base, n, 100 + k);
        for (size_t i = 0; i < n; i++)
            want[i] = base[i] + src[i];
        memcpy(avx, base, n * sizeof *avx);
        nn_vec_add_at(NN_ISA_BASE, base, src, n);
        nn_vec_add_at(NN_ISA_AVX2, avx, src, n);
        T_CHECK_MSG(memcmp(base, want, n * sizeof *base) == 0, "reference, n %zu", n);
        T_CHECK_MSG(memcmp(avx, want, n * sizeof *avx) == 0, "avx2, n %zu", n);
        free(src), free(want), free(base), free(avx);
    }
    if (!vec_have_avx2())
        T_SKIP("the CPU has no AVX2+FMA: only the reference ran");
}

/* One element of PyTorch's SGD step (torch/optim/sgd.py), as the oracle: d_p = grad +
 * weight_decay * param; buf = d_p on the first step, else momentum * buf + (1 - dampening)
 * * d_p; nesterov: d_p += momentum * buf, else d_p = buf; param -= lr * d_p. */
static void vec_sgd_element(const struct nn_vec_sgd *s, float *param, float grad, float *mbuf)
{
    float d_p = grad + *param * s->wd;
    *mbuf = s->first ? d_p : s->mom * *mbuf + d_p * s->damp;
    d_p = s->nesterov ? d_p + *mbuf * s->mom : *mbuf;
    *param -= d_p * s->lr;
}

static void vec_sgd_formula(const struct nn_vec_sgd *s, float *p, const float *g, float *buf,
                            size_t n)
{
    for (size_t i = 0; i < n; i++)
        vec_sgd_element(s, &p[i], g[i], &buf[i]);
}

static void vec_sgd_case(const struct nn_vec_sgd *s, size_t n, uint64_t seed)
{
    size_t cap = n ? n : 1;
    float *g = malloc(cap * sizeof *g), *p[3], *b[3];
    vec_fill(g, n, seed);
    for (int j = 0; j < 3; j++) {
        p[j] = malloc(cap * sizeof(float));
        b[j] = malloc(cap * sizeof(float));
        vec_fill(p[j], n, seed + 1);
        vec_fill(b[j], n, seed + 2);
    }
    vec_sgd_formula(s, p[0], g, b[0], n);
    nn_vec_sgd_momentum_at(NN_ISA_BASE, s, p[1], g, b[1], n);
    nn_vec_sgd_momentum_at(NN_ISA_AVX2, s, p[2], g, b[2], n);
    for (int j = 1; j < 3; j++) {
        T_CHECK_MSG(memcmp(p[j], p[0], n * sizeof(float)) == 0,
                    "%s params, n %zu first %d nesterov %d", j == 1 ? "reference" : "avx2", n,
                    s->first, s->nesterov);
        T_CHECK_MSG(memcmp(b[j], b[0], n * sizeof(float)) == 0, "%s momentum, n %zu",
                    j == 1 ? "reference" : "avx2", n);
    }
    for (int j = 0; j < 3; j++)
        free(p[j]), free(b[j]);
    free(g);
}

static void test_vec_sgd_paths_agree(void)
{
    omp_set_num_threads(3);
    for (int first = 0; first < 2; first++)
        for (int nesterov = 0; nesterov < 2; nesterov++)
            for (int wd = 0; wd < 2; wd++) {
                struct nn_vec_sgd s = {.wd = wd ? 1e-4f : 0,
                                       .mom = 0.9f,
                                       .damp = nesterov ? 1.0f : 0.75f,
                                       .lr = 0.01f,
                                       .first = first,
                                       .nesterov = nesterov};
                for (size_t k = 0; k < sizeof vec_sizes / sizeof *vec_sizes; k++)
                    vec_sgd_case(&s, vec_sizes[k], 7 * k + (uint64_t)first);
            }
    if (!vec_have_avx2())
        T_SKIP("the CPU has no AVX2+FMA: only the reference ran");
}

/* An accumulating conversion between two equal layouts adds with our loop, one between
 * plain and blocked layouts reorders with a sum post-op: both leave ours + theirs. */
static void test_vec_convert_accumulates(void)
{
    struct err e;
    struct nn_dnnl d;
    T_OK(nn_dnnl_init(&d, &e));
    struct nn_shape s = nn_shape4(3, 13, 5, 7);
    size_t n = nn_shape_numel(s);
    dnnl_memory_desc_t plain, blocked;
    nn_md_plain(&plain, s);
    dnnl_dims_t dims = {3, 13, 5, 7};
    nn_md_tag(&blocked, 4, dims, dnnl_nChw8c);
    float *ours = malloc(n * sizeof *ours), *theirs = malloc(n * sizeof *theirs);
    float *want = malloc(n * sizeof *want);
    for (int same = 0; same < 2; same++) {
        struct nn_convert c;
        const dnnl_memory_desc_t *prim = same ? &plain : &blocked;
        if (nn_convert_out_init(&c, &d, prim, &plain, 1, &e)) {
            T_CHECK_MSG(0, "convert init: %s", e.msg);
            break;
        }
        T_CHECK_MSG(c.active && (c.add_n != 0) == (same != 0), "same %d: add_n %zu", same,
                    c.add_n);
        vec_fill(ours, n, 5 + same);
        vec_fill(theirs, n, 9 + same);
        for (size_t i = 0; i < n; i++)
            want[i] = ours[i] + theirs[i];
        if (same) {
            memcpy(nn_convert_out_begin(&c, ours), theirs, n * sizeof *theirs);
        } else { /* theirs in the blocked layout, through a plain reorder of ours */
            struct nn_reorder r;
            T_OK(nn_reorder_init(&r, &d, &plain, &blocked, 0, &e));
            nn_reorder_run(&r, &d, nn_convert_out_begin(&c, ours), theirs);
            nn_reorder_destroy(&r);
        }
        nn_convert_out_end(&c, &d, ours);
        T_OK(nn_dnnl_check(&d, &e));
        T_CHECK_MSG(memcmp(ours, want, n * sizeof *ours) == 0, "same %d: ours + theirs", same);
        nn_convert_destroy(&c);
    }
    free(ours), free(theirs), free(want);
    nn_dnnl_cleanup(&d);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_vec_add_paths_agree);
    TEST_RUN(test_vec_sgd_paths_agree);
    TEST_RUN(test_vec_convert_accumulates);
    return test_end();
}
