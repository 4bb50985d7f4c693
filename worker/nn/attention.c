/* attention: GPT-2's causal multi-head self-attention, the part between c_attn (which makes
 * qkv) and c_proj (which reads out): reference loops and a oneDNN fast path.
 *
 * Shapes: qkv (N,T,3C), row (n,t) = q (C) | k (C) | v (C), head h at columns h*hs ..
 * (h+1)*hs-1 of each (hs = C/H); att (N,H,T,T); out (N,T,C), heads side by side.
 *   pre[n,h,t,s] = q[n,t,h] . k[n,s,h] / sqrt(hs)                    for s <= t
 *   att[n,h,t,:] = softmax over s <= t of pre (0 where s > t: causal)
 *   out[n,t,h*hs+i] = sum_s att[n,h,t,s] v[n,s,h*hs+i]
 * Backward (dout (N,T,C) -> dqkv (N,T,3C), overwritten):
 *   datt = dout v^T;  dv = att^T dout;  dpre = att * (datt - sum_s att*datt);
 *   dq = dpre k / sqrt(hs);  dk = dpre^T q / sqrt(hs)
 *
 * Decisions:
 * - The fast path runs six oneDNN matmuls, each 4-D over the batch (N,H), reading q, k and v
 *   in place in qkv through strided descriptors (q as (N,H,T,hs) strides {T*3C, hs, 3C, 1},
 *   k^T as (N,H,hs,T) strides {T*3C, hs, 1, 3C}, the head's columns reached by offsetting
 *   the pointer by C or 2C) and writing out, dq, dk, dv the same way. oneDNN 2.6 runs all
 *   six as gemm:jit (no reference fallback; the test checks it). Measured against copying
 *   q, k, v into contiguous (N,H,T,hs) buffers (and out, dq, dk, dv back) around plain
 *   batched matmuls, matmuls and copies only, at N=4, T=256, C=768, H=12 on 2 threads (AMD
 *   EPYC, AVX2; a shared machine, so noisy): strided ~17-26 ms forward / ~34-49 ms
 *   backward, copies ~20-34 ms / ~38-52 ms; at N=8, T=1024 the two were within 10%.
 *   Strided wins or ties and needs no copy buffers, so it is the one here.
 * - The 1/sqrt(hs) scale and the causal mask live in our own softmax loops, not in
 *   oneDNN attributes: the forward softmax scales pre as it reads it, and the backward
 *   folds the scale into dpre (stored in place of datt), so dq and dk come out of plain
 *   matmuls. The matmuls compute the whole T x T square (half of it wasted, but one
 *   primitive per product); the masked half of att and of dpre is written 0, so it adds
 *   nothing to out, dv, dq or dk.
 * - The reference accumulates every sum (dot products, softmax denominator, the sums over
 *   t and s) in double, computing each output element whole so dqkv is overwritten. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/nn/layer_type.h"
#include "worker/nn/layers.h"

/* ---- reference -------------------------------------------------------------------- */

void nn_attention_forward(float *out, float *att, const float *qkv,
                          const struct nn_attention_cfg *c, int n, int t)
{
    const int C = c->c, H = c->heads, hs = C / H, T = t;
    const size_t C3 = 3 * (size_t)C;
    const double scale = 1.0 / sqrt((double)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++) {
            const float *x = qkv + (size_t)b * T * C3 + (size_t)h * hs; /* q of row 0 */
            float *a = att + ((size_t)b * H + h) * T * T;               /* (T,T) */
            for (int ti = 0; ti < T; ti++) {
                const float *q = x + (size_t)ti * C3;
                float *row = a + (size_t)ti * T;
                double maxv = -INFINITY;
                for (int s = 0; s <= ti; s++) {
                    const float *k = x + (size_t)s * C3 + C;
                    double dot = 0;
                    for (int i = 0; i < hs; i++)
                        dot += (double)q[i] * k[i];
                    row[s] = (float)(dot * scale);
                    maxv = fmax(maxv, row[s]);
                }
                double sum = 0;
                for (int s = 0; s <= ti; s++) {
                    double ex = exp((double)row[s] - maxv);
                    row[s] = (float)ex;
                    sum += ex;
                }
                for (int s = 0; s <= ti; s++)
                    row[s] = (float)(row[s] / sum);
                for (int s = ti + 1; s < T; s++)
                    row[s] = 0.0f;
                float *o = out + ((size_t)b * T + ti) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int s = 0; s <= ti; s++)
                        acc += (double)row[s] * x[(size_t)s * C3 + 2 * (size_t)C + i];
                    o[i] = (float)acc;
                }
            }
        }
}

void nn_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, const struct nn_attention_cfg *c, int n, int t)
{
    const int C = c->c, H = c->heads, hs = C / H, T = t;
    const size_t C3 = 3 * (size_t)C;
    const double scale = 1.0 / sqrt((double)hs);
    /* each (b, h) writes only head h's columns of batch b's rows of dqkv: no races */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++) {
            const size_t base = (size_t)b * T * C3 + (size_t)h * hs;
            const float *x = qkv + base;                                 /* q of row 0 */
            float *dx = dqkv + base;                                     /* dq of row 0 */
            const float *go = dout + (size_t)b * T * C + (size_t)h * hs; /* (T,hs) stride C */
            const float *a = att + ((size_t)b * H + h) * T * T;          /* (T,T) */
            float *da = datt + ((size_t)b * H + h) * T * T;              /* (T,T) */
            /* datt = dout v^T, then dpre = att * (datt - sum_s att*datt) in place */
            for (int ti = 0; ti < T; ti++) {
                const float *g = go + (size_t)ti * C;
                const float *arow = a + (size_t)ti * T;
                float *drow = da + (size_t)ti * T;
                double dsum = 0;
                for (int s = 0; s <= ti; s++) {
                    const float *v = x + (size_t)s * C3 + 2 * (size_t)C;
                    double dot = 0;
                    for (int i = 0; i < hs; i++)
                        dot += (double)g[i] * v[i];
                    drow[s] = (float)dot;
                    dsum += (double)arow[s] * dot;
                }
                for (int s = 0; s <= ti; s++)
                    drow[s] = (float)(arow[s] * ((double)drow[s] - dsum));
                for (int s = ti + 1; s < T; s++)
                    drow[s] = 0.0f;
            }
            /* dq[t] = scale * sum_{s<=t} dpre[t,s] k[s] */
            for (int ti = 0; ti < T; ti++)
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int s = 0; s <= ti; s++)
                        acc += (double)da[(size_t)ti * T + s] * x[(size_t)s * C3 + C + i];
                    dx[(size_t)ti * C3 + i] = (float)(acc * scale);
                }
            /* dk[s] = scale * sum_{t>=s} dpre[t,s] q[t]; dv[s] = sum_{t>=s} att[t,s] dout[t] */
            for (int s = 0; s < T; s++)
                for (int i = 0; i < hs; i++) {
                    double acck = 0, accv = 0;
                    for (int ti = s; ti < T; ti++) {
                        acck += (double)da[(size_t)ti * T + s] * x[(size_t)ti * C3 + i];
                        accv += (double)a[(size_t)ti * T + s] * go[(size_t)ti * C + i];
                    }
                    dx[(size_t)s * C3 + C + i] = (float)(acck * scale);
                    dx[(size_t)s * C3 + 2 * (size_t)C + i] = (float)accv;
                }
        }
}

/* ---- oneDNN ----------------------------------------------------------------------- */

/* The four views the matmuls take, each 4-D over the batch (N,H). */
struct attn_mds {
    dnnl_memory_desc_t qkv;  /* q, k or v (or dq, dk, dv) as (N,H,T,hs) in a (N,T,3C) row */
    dnnl_memory_desc_t qkvT; /* k or v transposed: (N,H,hs,T) in a (N,T,3C) row */
    dnnl_memory_desc_t seq;  /* out or dout (N,T,C) as (N,H,T,hs) */
    dnnl_memory_desc_t sq;   /* att or datt (N,H,T,T) plain */
    dnnl_memory_desc_t sqT;  /* att or datt transposed */
};

static int md_strided(dnnl_memory_desc_t *md, dnnl_dim_t d0, dnnl_dim_t d1, dnnl_dim_t d2,
                      dnnl_dim_t d3, dnnl_dim_t s0, dnnl_dim_t s1, dnnl_dim_t s2, dnnl_dim_t s3,
                      struct err *e)
{
    dnnl_dims_t dims = {d0, d1, d2, d3}, strides = {s0, s1, s2, s3};
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
    return st == dnnl_success ? 0 : nn_dnnl_err(e, st, "attention descriptor");
}

static int attn_mds_init(struct attn_mds *m, const struct nn_attention_cfg *c, int n, int t,
                         struct err *e)
{
    const dnnl_dim_t N = n, H = c->heads, T = t, hs = c->c / c->heads, C = c->c, C3 = 3 * C;
    return md_strided(&m->qkv, N, H, T, hs, T * C3, hs, C3, 1, e) ||
           md_strided(&m->qkvT, N, H, hs, T, T * C3, hs, 1, C3, e) ||
           md_strided(&m->seq, N, H, T, hs, T * C, hs, C, 1, e) ||
           md_strided(&m->sq, N, H, T, T, H * T * T, T * T, T, 1, e) ||
           md_strided(&m->sqT, N, H, T, T, H * T * T, T * T, 1, T, e);
}

/* dst = src @ wei; one memory object per argument, since each has its own view */
static int mm_init(struct nn_prim *p, struct nn_mem m[3], struct nn_dnnl *d,
                   const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei,
                   const dnnl_memory_desc_t *dst, const char *what, struct err *e)
{
    dnnl_matmul_desc_t md;
    dnnl_status_t st = dnnl_matmul_desc_init(&md, src, wei, NULL, dst);
    if (st != dnnl_success)
        return nn_dnnl_err(e, st, what);
    return nn_prim_create(p, d, &md, NULL, what, e) || nn_mem_create(&m[0], d, src, e) ||
           nn_mem_create(&m[1], d, wei, e) || nn_mem_create(&m[2], d, dst, e);
}

static void mm_run(struct nn_prim *p, struct nn_mem m[3], struct nn_dnnl *d, const float *src,
                   const float *wei, float *dst)
{
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, nn_mem_bind(&m[0], src)},
        {DNNL_ARG_WEIGHTS, nn_mem_bind(&m[1], wei)},
        {DNNL_ARG_DST, nn_mem_bind(&m[2], dst)},
    };
    nn_prim_run(p, d, 3, args);
}

int nn_attention_fast_init(struct nn_attention_fast *f, struct nn_dnnl *d,
                           const struct nn_attention_cfg *c, int n, int t, int train,
                           struct err *e)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cfg = *c;
    f->n = n;
    f->t = t;
    if (c->c <= 0 || c->heads <= 0 || c->c % c->heads != 0 || n <= 0 || t <= 0)
        return err_set(e, ERR_INVALID, "", "attention: %d channels in %d heads, N=%d, T=%d",
                       c->c, c->heads, n, t);
    struct attn_mds m;
    if (attn_mds_init(&m, c, n, t, e))
        return -1;
    size_t att_bytes = (size_t)n * c->heads * t * t * sizeof(float);
    /* owned: the forward's att, read by backward; datt holds datt then dpre */
    f->att = nn_alloc(att_bytes);
    if (!f->att)
        goto nomem;
    if (train && !(f->datt = nn_alloc(att_bytes)))
        goto nomem;
    if (mm_init(&f->qk, f->m_qk, d, &m.qkv, &m.qkvT, &m.sq, "attention q k^T", e) ||
        mm_init(&f->av, f->m_av, d, &m.sq, &m.qkv, &m.seq, "attention att v", e) ||
        (train &&
         (mm_init(&f->d_att, f->m_datt, d, &m.seq, &m.qkvT, &m.sq, "attention dout v^T", e) ||
          mm_init(&f->d_v, f->m_dv, d, &m.sqT, &m.seq, &m.qkv, "attention att^T dout", e) ||
          mm_init(&f->d_q, f->m_dq, d, &m.sq, &m.qkv, &m.qkv, "attention dpre k", e) ||
          mm_init(&f->d_k, f->m_dk, d, &m.sqT, &m.qkv, &m.qkv, "attention dpre^T q", e)))) {
        nn_attention_fast_destroy(f);
        return -1;
    }
    return 0;
nomem:
    nn_attention_fast_destroy(f);
    return err_set(e, ERR_NOMEM, "", "attention buffers of %zu bytes", att_bytes);
}

void nn_attention_fast_forward(struct nn_attention_fast *f, float *out, const float *qkv)
{
    const int T = f->t, C = f->cfg.c, hs = C / f->cfg.heads;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t rows = (size_t)f->n * f->cfg.heads * T;
    float *att = f->att;
    mm_run(&f->qk, f->m_qk, f->d, qkv, qkv + C, att); /* att = q k^T (unscaled) */
    /* causal softmax of scale * pre, row by row, in place */
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const int ti = (int)(r % (size_t)T);
        float *row = att + r * (size_t)T;
        float maxv = -INFINITY; /* not fmaxf: without -ffast-math that is a libm call */
        for (int s = 0; s <= ti; s++)
            maxv = row[s] > maxv ? row[s] : maxv;
        float sum = 0;
        for (int s = 0; s <= ti; s++) {
            row[s] = expf((row[s] - maxv) * scale);
            sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (int s = 0; s <= ti; s++)
            row[s] *= inv;
        for (int s = ti + 1; s < T; s++)
            row[s] = 0.0f;
    }
    mm_run(&f->av, f->m_av, f->d, att, qkv + 2 * (size_t)C, out); /* out = att v */
}

void nn_attention_fast_backward(struct nn_attention_fast *f, float *dqkv, const float *dout,
                                const float *qkv)
{
    const int T = f->t, C = f->cfg.c, hs = C / f->cfg.heads;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t rows = (size_t)f->n * f->cfg.heads * T;
    const float *att = f->att;
    float *datt = f->datt;
    mm_run(&f->d_att, f->m_datt, f->d, dout, qkv + 2 * (size_t)C, datt); /* datt = dout v^T */
    mm_run(&f->d_v, f->m_dv, f->d, att, dout, dqkv + 2 * (size_t)C);     /* dv = att^T dout */
    /* dpre * scale = scale * att * (datt - sum_s att*datt), causal, in place of datt */
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const int ti = (int)(r % (size_t)T);
        const float *arow = att + r * (size_t)T;
        float *drow = datt + r * (size_t)T;
        float dsum = 0;
        for (int s = 0; s <= ti; s++)
            dsum += arow[s] * drow[s];
        for (int s = 0; s <= ti; s++)
            drow[s] = scale * arow[s] * (drow[s] - dsum);
        for (int s = ti + 1; s < T; s++)
            drow[s] = 0.0f;
    }
    mm_run(&f->d_q, f->m_dq, f->d, datt, qkv + C, dqkv); /* dq = dpre k */
    mm_run(&f->d_k, f->m_dk, f->d, datt, qkv, dqkv + C); /* dk = dpre^T q */
}

void nn_attention_fast_destroy(struct nn_attention_fast *f)
{
    struct nn_prim *ps[] = {&f->qk, &f->av, &f->d_att, &f->d_v, &f->d_q, &f->d_k};
    struct nn_mem *ms[] = {f->m_qk, f->m_av, f->m_datt, f->m_dv, f->m_dq, f->m_dk};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        nn_prim_destroy(ps[i]);
        for (int j = 0; j < 3; j++)
            nn_mem_destroy(&ms[i][j]);
    }
    free(f->att);
    free(f->datt);
    memset(f, 0, sizeof *f);
}

/* ---- the row (layer_type.h) ---------------------------------------------------------- */

/* the attention weights att (N,H,T,T), then in training as much again for backward */
static size_t attention_row_saved(const struct nn_node *n, const struct nn_tensor *x, int train)
{
    return (size_t)x->shape.n * n->cfg.attn.heads * x->shape.c * x->shape.c * (train ? 2 : 1);
}

static void attention_row_forward(const struct nn_layer_args *a)
{
    nn_attention_forward(a->y->data, a->n->save, a->x->data, &a->n->cfg.attn, a->x->shape.n,
                         a->x->shape.c);
}

static void attention_row_backward(const struct nn_layer_args *a)
{
    size_t att = attention_row_saved(a->n, a->x, 0);
    if (a->din0)
        nn_attention_backward(a->din0, a->n->save + att, a->y->grad, a->x->data, a->n->save,
                              &a->n->cfg.attn, a->x->shape.n, a->x->shape.c);
}

static int attention_row_fast_init(const struct nn_layer_args *a, struct err *e)
{
    nn_md_plain(&a->y->md, a->y->shape);
    return nn_attention_fast_init(&a->n->fast->attn, a->dnnl, &a->n->cfg.attn, a->x->shape.n,
                                  a->x->shape.c, a->train, e);
}

NN_LAYER_FAST_STATE(attention, attention, attn, (a->y->data, a->x->data),
                    (a->din0, a->y->grad, a->x->data))

/* clang-format off */
const struct nn_layer_type nn_layer_attention = {
    .name = "attention", NN_LAYER_ROW(attention), .saved = attention_row_saved,
    .impl = "oneDNN matmul + own softmax",
};
/* clang-format on */
