/* nn: shapes, aligned zero-filled allocations, arenas, the activation workspace, the RNG
 * and the thread count (see nn.h). Key decision: every allocation is zero-filled when made
 * so its pages are faulted in at preparation time, never during a timed step. */
#include "worker/nn/nn.h"

#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct nn_shape nn_shape4(int n, int c, int h, int w)
{
    return (struct nn_shape){.ndims = 4, .n = n, .c = c, .h = h, .w = w};
}

struct nn_shape nn_shape2(int n, int f)
{
    return (struct nn_shape){.ndims = 2, .n = n, .c = f, .h = 1, .w = 1};
}

size_t nn_shape_numel(struct nn_shape s)
{
    return (size_t)s.n * nn_shape_sample(s);
}

size_t nn_shape_sample(struct nn_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

const char *nn_shape_str(struct nn_shape s, char *buf, size_t cap)
{
    if (s.ndims == 2)
        snprintf(buf, cap, "%dx%d", s.n, s.c);
    else
        snprintf(buf, cap, "%dx%dx%dx%d", s.n, s.c, s.h, s.w);
    return buf;
}

/* ---- memory ----------------------------------------------------------------------- */

void *nn_alloc(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
        return NULL;
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

size_t nn_memory_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || (unsigned long)pages > SIZE_MAX / (unsigned long)page)
        return SIZE_MAX;
    return (size_t)pages * (size_t)page;
}

int nn_arena_alloc(struct nn_arena *a, size_t len, struct err *e)
{
    a->len = 0;
    a->data = NULL;
    if (len > SIZE_MAX / sizeof(float))
        return err_set(e, ERR_TOO_LARGE, "", "arena of %zu floats is too large", len);
    a->data = nn_alloc(len * sizeof(float));
    if (!a->data)
        return err_set(e, ERR_NOMEM, "", "arena of %zu floats: out of memory", len);
    a->len = len;
    return 0;
}

void nn_arena_free(struct nn_arena *a)
{
    free(a->data);
    a->data = NULL;
    a->len = 0;
}

size_t nn_ws_reserve(struct nn_workspace *ws, size_t bytes)
{
    if (ws->size > SIZE_MAX - 128 || bytes > SIZE_MAX - 64 - ws->size - 128) {
        ws->size = SIZE_MAX; /* nn_ws_commit refuses it */
        return 0;
    }
    size_t off = (ws->size + 63) / 64 * 64;
    ws->size = off + (bytes + 63) / 64 * 64;
    return off;
}

int nn_ws_commit(struct nn_workspace *ws, struct err *e)
{
    free(ws->base);
    ws->base = NULL;
    if (ws->size > nn_memory_total())
        return err_set(e, ERR_TOO_LARGE, "",
                       "workspace of %zu bytes: more than this node's "
                       "%zu bytes of memory",
                       ws->size, nn_memory_total());
    ws->base = nn_alloc(ws->size);
    if (!ws->base)
        return err_set(e, ERR_NOMEM, "", "workspace of %zu bytes: out of memory", ws->size);
    return 0;
}

void *nn_ws_ptr(const struct nn_workspace *ws, size_t offset)
{
    return ws->base + offset;
}

void nn_ws_free(struct nn_workspace *ws)
{
    free(ws->base);
    ws->base = NULL;
    ws->size = 0;
}

/* ---- random numbers --------------------------------------------------------------- */

uint64_t nn_hash64(uint64_t x)
{
    /* splitmix64's finaliser: a bijection with full avalanche */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double nn_hash_uniform(uint64_t key, uint64_t index)
{
    return (double)(nn_hash64(key ^ nn_hash64(index)) >> 11) * 0x1.0p-53;
}

void nn_rng_seed(struct nn_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        seed = nn_hash64(seed);
        r->s[i] = seed;
    }
}

static uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t nn_rng_next(struct nn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return out;
}

double nn_rng_uniform(struct nn_rng *r)
{
    return (double)(nn_rng_next(r) >> 11) * 0x1.0p-53;
}

double nn_rng_normal(struct nn_rng *r)
{
    double u1 = 1.0 - nn_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = nn_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void nn_rng_fill_uniform(struct nn_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * nn_rng_uniform(r));
}

void nn_rng_fill_normal(struct nn_rng *r, float *x, size_t n, float mean, float std)
{
    /* Marsaglia's polar method: two independent normals per accepted pair of uniforms, one
     * log and one sqrt, no trigonometry (VGG-16 has 138M weights to draw) */
    for (size_t i = 0; i < n; i += 2) {
        double u, v, q;
        do {
            u = 2.0 * nn_rng_uniform(r) - 1.0;
            v = 2.0 * nn_rng_uniform(r) - 1.0;
            q = u * u + v * v;
        } while (q >= 1.0 || q == 0.0);
        double f = sqrt(-2.0 * log(q) / q);
        x[i] = (float)(mean + std * u * f);
        if (i + 1 < n)
            x[i + 1] = (float)(mean + std * v * f);
    }
}

/* ---- threads ---------------------------------------------------------------------- */

void nn_set_threads(int n)
{
    omp_set_num_threads(n < 1 ? 1 : n);
}

int nn_get_threads(void)
{
    return omp_get_max_threads();
}

const char *nn_runtime_info(char *buf, size_t cap)
{
    const dnnl_version_t *v = dnnl_version();
    const char *rt = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                     : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                     : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                          : "threadpool";
    snprintf(buf, cap, "oneDNN %d.%d.%d (cpu runtime: %s, %d threads)", v->major, v->minor,
             v->patch, rt, nn_get_threads());
    return buf;
}
