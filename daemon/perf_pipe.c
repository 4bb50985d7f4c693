/* perf_pipe: a pipeline step simulated over its schedule (perf_pipe.h, docs/model.md
 * "Pipelines"). Each stage walks its own list of operations in order; an operation waits
 * for its stage and for its input (the previous stage's forward, the next stage's
 * backward, plus the transfer). The lists are walked round-robin until none advances:
 * the schedules the worker runs never deadlock, so a stall is a bad input. */
#include "daemon/perf_pipe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One stage's walk: its clock, where it is in its list, and what it holds. */
struct pipe_stage {
    double t, busy, p2p;
    int next, in_flight, peak;
};

struct pipe_sim {
    const struct perf_pipe *p;
    struct pipe_stage st[PERF_PIPE_MAX_STAGES];
    double *fwd_end, *bwd_end; /* [stage * M + mb]; NAN: not yet run. Owned */
};

/* The k-th operation of stage s: its micro-batch, and whether it is a backward. */
static int pipe_op_at(const struct perf_pipe *p, int s, int k, bool *backward)
{
    int M = p->micro_batches;
    if (p->schedule == PERF_PIPE_GPIPE) {
        *backward = k >= M;
        return k < M ? k : 2 * M - 1 - k; /* the last micro-batch's backward first */
    }
    int warm = p->stages - s - 1 < M ? p->stages - s - 1 : M, steady = M - warm;
    if (k < warm) {
        *backward = false;
        return k;
    }
    int i = (k - warm) / 2;
    if (i < steady) { /* steady: forward warm + i, then backward i */
        *backward = (k - warm) % 2 == 1;
        return *backward ? i : warm + i;
    }
    *backward = true;
    return k - warm - steady; /* cool-down: backwards steady .. M - 1 */
}

/* When the input of stage s's operation on mb has arrived; NAN: not yet produced. */
static double pipe_input_at(const struct pipe_sim *x, int s, int mb, bool backward)
{
    const struct perf_pipe *p = x->p;
    int M = p->micro_batches;
    if (!backward)
        return s == 0 ? 0 : x->fwd_end[(s - 1) * M + mb] + p->p2p_s[s - 1];
    if (s == p->stages - 1)
        return x->fwd_end[s * M + mb]; /* the loss, on the stage itself */
    return x->bwd_end[(s + 1) * M + mb] + p->p2p_s[s];
}

/* Runs stage s's next operation if its input is there; whether it ran. */
static bool pipe_step_stage(struct pipe_sim *x, int s)
{
    const struct perf_pipe *p = x->p;
    struct pipe_stage *g = &x->st[s];
    if (g->next >= 2 * p->micro_batches)
        return false;
    bool backward;
    int mb = pipe_op_at(p, s, g->next, &backward);
    double ready = pipe_input_at(x, s, mb, backward);
    if (isnan(ready))
        return false;
    double len = backward ? p->backward_s[s] : p->forward_s[s];
    double end = fmax(g->t, ready) + len;
    bool sends = backward ? s > 0 : s < p->stages - 1;
    double send = !sends ? 0 : backward ? p->p2p_s[s - 1] : p->p2p_s[s];
    (backward ? x->bwd_end : x->fwd_end)[s * p->micro_batches + mb] = end;
    g->t = end + send;
    g->busy += len;
    g->p2p += send;
    g->in_flight += backward ? -1 : 1;
    g->peak = g->in_flight > g->peak ? g->in_flight : g->peak;
    g->next++;
    return true;
}

static bool pipe_input_ok(const struct perf_pipe *p)
{
    int P = p->stages;
    bool ok = P >= 1 && P <= PERF_PIPE_MAX_STAGES && p->micro_batches >= 1 && p->forward_s &&
              p->backward_s && p->optimizer_s && (P == 1 || p->p2p_s) && p->data_s >= 0 &&
              p->tie_s >= 0;
    for (int s = 0; ok && s < P; s++)
        ok = p->forward_s[s] >= 0 && p->backward_s[s] >= 0 && p->optimizer_s[s] >= 0 &&
             (!p->dp_s || p->dp_s[s] >= 0) && (s == P - 1 || p->p2p_s[s] >= 0);
    return ok;
}

/* Walks every stage's list to its end; -1 on a stall. */
static int pipe_walk(struct pipe_sim *x)
{
    const struct perf_pipe *p = x->p;
    bool moved = true;
    while (moved) {
        moved = false;
        for (int s = 0; s < p->stages; s++)
            while (pipe_step_stage(x, s))
                moved = true;
    }
    for (int s = 0; s < p->stages; s++)
        if (x->st[s].next < 2 * p->micro_batches)
            return -1;
    return 0;
}

/* After the last backward: the tied weight (first and last stage meet), the replicas'
 * exchange, the optimizer; the step's figures. */
static void pipe_finish(struct pipe_sim *x, struct perf_pipe_step *out)
{
    const struct perf_pipe *p = x->p;
    int P = p->stages;
    if (p->tie_s > 0 && P > 1) {
        double meet = fmax(x->st[0].t, x->st[P - 1].t) + p->tie_s;
        x->st[0].t = x->st[P - 1].t = meet;
    }
    double end = 0;
    for (int s = 0; s < P; s++) {
        double dp = p->dp_s ? p->dp_s[s] : 0;
        x->st[s].t += dp + p->optimizer_s[s];
        end = fmax(end, x->st[s].t);
        out->forward_s += p->forward_s[s] * p->micro_batches / P;
        out->backward_s += p->backward_s[s] * p->micro_batches / P;
        out->optimizer_s += p->optimizer_s[s] / P;
        out->exposed_s += dp / P;
        out->p2p_s += x->st[s].p2p / P;
        out->peak_in_flight = x->st[s].peak > out->peak_in_flight ? x->st[s].peak
                                                                  : out->peak_in_flight;
    }
    out->step_s = end;
    out->data_s = p->data_s;
    double idle = 0;
    for (int s = 0; s < P; s++) {
        double dp = p->dp_s ? p->dp_s[s] : 0;
        double busy = p->data_s + x->st[s].busy + dp + p->optimizer_s[s];
        idle += end > 0 ? fmax(0, end - busy) / end : 0;
    }
    out->bubble = idle / P;
}

int perf_pipe_simulate(const struct perf_pipe *p, struct perf_pipe_step *out)
{
    memset(out, 0, sizeof *out);
    if (!pipe_input_ok(p))
        return -1;
    size_t n = (size_t)p->stages * (size_t)p->micro_batches;
    struct pipe_sim x = {.p = p};
    x.fwd_end = malloc(n * sizeof *x.fwd_end);
    x.bwd_end = malloc(n * sizeof *x.bwd_end);
    int rc = x.fwd_end && x.bwd_end ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        x.fwd_end[i] = x.bwd_end[i] = NAN;
    for (int s = 0; s < p->stages; s++)
        x.st[s].t = p->data_s;
    if (rc == 0)
        rc = pipe_walk(&x);
    if (rc == 0)
        pipe_finish(&x, out);
    free(x.fwd_end);
    free(x.bwd_end);
    return rc;
}

/* The line of perf_pipe_call_ratio at n samples; 0 when it is not usable. */
static double pipe_call_time(const struct perf_pipe_calls *c, double n)
{
    if (!(c->mb > 0 && c->t_mb > 0 && c->batch > c->mb && c->t_batch >= c->t_mb))
        return 0;
    double t = c->t_mb + (c->t_batch - c->t_mb) / (c->batch - c->mb) * (n - c->mb);
    double per_sample = c->t_mb * n / c->mb;
    return n < c->mb && t < per_sample ? per_sample : t;
}

double perf_pipe_call_ratio(const struct perf_pipe_calls *c, double samples, double to)
{
    double a = pipe_call_time(c, samples), b = pipe_call_time(c, to);
    if (a > 0 && b > 0)
        return a / b;
    return to > 0 ? samples / to : 0;
}
