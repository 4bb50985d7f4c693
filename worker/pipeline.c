/* pipeline: a stage of a pipeline-parallel run: its slots, the gpipe and 1f1b schedules,
 * the point-to-point traffic with its neighbours (pipeline.h). */
#include "worker/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

/* ---- setting up ------------------------------------------------------------------------ */

/* The stage of layer `node` when the model is cut at first[0..P]. */
static int pipe_stage_of(const int *first, int stages, int node)
{
    for (int s = 0; s < stages; s++)
        if (node < first[s + 1])
            return s;
    return stages - 1;
}

/* A weight tied across a cut (gpt2's embedding and head): which parameter of this stage
 * is a copy of it and which rank holds the other. */
static void pipe_find_tie(struct pipeline *p, const struct nn_model *whole, const int *first)
{
    p->tie_param = p->tie_peer = -1;
    for (int i = 0; i < nn_model_node_count(whole); i++) {
        struct nn_node_info ni;
        nn_model_node_info(whole, i, &ni);
        if (ni.tied_param < 0)
            continue;
        int owner = pipe_stage_of(first, p->cfg.stages, whole->param_info[ni.tied_param].node);
        int user = pipe_stage_of(first, p->cfg.stages, i);
        if (owner == user || (p->stage != owner && p->stage != user))
            continue;
        const struct nn_model *m = &p->slots[0];
        for (int k = 0; k < m->nparam_tensors; k++)
            if (m->param_info[k].origin == ni.tied_param)
                p->tie_param = k;
        p->tie_peer = p->replica * p->cfg.stages + (p->stage == owner ? user : owner);
    }
}

/* Builds slot s of the stage: slot 0 gets the arenas and the whole model's values, the
 * others share them. */
static int pipe_make_slot(struct pipeline *p, int s, const struct nn_model *whole,
                          struct err *e)
{
    struct nn_model *m = &p->slots[s];
    nn_model_init(m);
    if (nn_model_stage(whole, p->first, p->end, m, e) < 0)
        return -1;
    if (s == 0) {
        if (nn_model_init_params(m, whole->seed, e) < 0 ||
            nn_model_stage_copy_params(whole, p->first, m, e) < 0)
            return -1;
    } else if (nn_model_share_arenas(m, &p->slots[0], e) < 0) {
        return -1;
    }
    return nn_model_prepare(m, p->mb, NN_BACKEND_FAST, 1, e);
}

/* The median of three. */
static int64_t pipe_median3(int64_t a, int64_t b, int64_t c)
{
    int64_t lo = a < b ? a : b, hi = a < b ? b : a;
    return c < lo ? lo : c > hi ? hi : c;
}

/* Rank 0's time per layer (ns, forward and backward apart) of `samples` samples on whole:
 * a warm-up pass, then three timed ones, each layer's median kept (one pass preempted on a
 * busy machine moves no layer). The input is zeros (token 0, a black image), which costs
 * what any input costs. The loss is not timed (no layer's). fwd and bwd: n each. Leaves
 * whole prepared for `samples`. */
static int pipe_time_layers(struct pipeline *p, struct nn_model *whole, int samples,
                            int64_t *fwd, int64_t *bwd, struct err *e)
{
    int n = nn_model_node_count(whole);
    /* prepared first: a batch too large for this node is refused (ERR_TOO_LARGE) before
     * its input is allocated */
    if (nn_model_prepare(whole, samples, NN_BACKEND_FAST, 1, e) < 0)
        return -1;
    size_t nx = (size_t)samples * nn_model_tensor_sample(whole, 0);
    float *x = calloc(nx ? nx : 1, sizeof *x);
    int32_t *y = calloc((size_t)samples * p->labels_per, sizeof *y);
    int64_t *t = calloc((size_t)n * 6, sizeof *t); /* [pass][forward, backward][layer] */
    int rc = x && y && t ? 0 : err_set(e, ERR_NOMEM, NULL, "pipeline profile: out of memory");
    for (int pass = 0; rc == 0 && pass < 4; pass++) {
        double loss;
        int right;
        int64_t *tf = pass > 0 ? t + (size_t)(pass - 1) * 2 * n : NULL;
        whole->profile_ns = tf;
        rc = nn_model_forward(whole, x, 1, 0, e);
        whole->profile_ns = NULL;
        if (rc == 0)
            rc = nn_model_loss(whole, y, samples, &loss, &right, e);
        whole->profile_ns = tf ? tf + n : NULL;
        if (rc == 0)
            rc = nn_model_backward(whole, NULL, NULL, e) < 0 ? -1 : 0;
        whole->profile_ns = NULL;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        fwd[i] = pipe_median3(t[i], t[2 * n + i], t[4 * n + i]);
        bwd[i] = pipe_median3(t[n + i], t[3 * n + i], t[5 * n + i]);
    }
    nn_model_zero_grad(whole);
    free(x);
    free(y);
    free(t);
    return rc;
}

static void pipe_profile_free(struct pipe_profile *pr)
{
    if (!pr)
        return;
    free(pr->forward_ns);
    free(pr->backward_ns);
    free(pr->param_bytes);
    free(pr);
}

/* Adds the n layers' forward and backward times into *f and *b. */
static void pipe_sum_layers(const int64_t *fwd, const int64_t *bwd, int n, int64_t *f,
                            int64_t *b)
{
    for (int i = 0; i < n; i++) {
        *f += fwd[i];
        *b += bwd[i];
    }
}

/* The sums over layers of whole's times on the whole batch (pipeline.h struct
 * pipe_profile), taken before the micro-batch's so whole is left prepared for the
 * micro-batch as the stages are. One micro-batch is the batch: its own sums. A whole
 * batch whose activations do not fit this node (a model pipelined for its memory) is
 * not timed: the sums stay 0, the report leaves them out and the daemon's model takes a
 * micro-batch as the batch's share, as it did before the batch was timed. */
static int pipe_time_batch(struct pipeline *p, struct nn_model *whole, struct err *e)
{
    struct pipe_profile *pr = p->profile;
    int n = pr->nlayers;
    if (p->mb == p->cfg.batch)
        return 0; /* pipe_profile sums the micro-batch's */
    int64_t *t = calloc((size_t)n * 2, sizeof *t);
    int rc = t ? pipe_time_layers(p, whole, p->cfg.batch, t, t + n, e)
               : err_set(e, ERR_NOMEM, NULL, "pipeline profile: out of memory");
    if (rc == 0)
        pipe_sum_layers(t, t + n, n, &pr->batch_forward_ns, &pr->batch_backward_ns);
    free(t);
    if (rc < 0 && e->code == ERR_TOO_LARGE) {
        log_warn("pipeline profile: the whole batch is not timed (%s); the model takes a "
                 "micro-batch as its share of the batch",
                 e->msg);
        return 0;
    }
    return rc;
}

/* Rank 0's profile of whole (pipeline.h struct pipe_profile), the cut still to come. */
static int pipe_profile(struct pipeline *p, struct nn_model *whole, struct err *e)
{
    int n = nn_model_node_count(whole);
    struct pipe_profile *pr = calloc(1, sizeof *pr);
    if (pr) {
        pr->nlayers = n;
        pr->forward_ns = calloc((size_t)n, sizeof *pr->forward_ns);
        pr->backward_ns = calloc((size_t)n, sizeof *pr->backward_ns);
        pr->param_bytes = calloc((size_t)n, sizeof *pr->param_bytes);
    }
    p->profile = pr;
    if (!pr || !pr->forward_ns || !pr->backward_ns || !pr->param_bytes)
        return err_set(e, ERR_NOMEM, NULL, "pipeline profile: out of memory");
    for (int i = 0; i < n; i++) {
        struct nn_node_info ni;
        nn_model_node_info(whole, i, &ni);
        pr->param_bytes[i] = (int64_t)(ni.param_len * sizeof(float));
    }
    if (pipe_time_batch(p, whole, e) < 0 ||
        pipe_time_layers(p, whole, p->mb, pr->forward_ns, pr->backward_ns, e) < 0)
        return -1;
    if (p->mb == p->cfg.batch)
        pipe_sum_layers(pr->forward_ns, pr->backward_ns, n, &pr->batch_forward_ns,
                        &pr->batch_backward_ns);
    return 0;
}

/* The cut into rank 0's profile: where each stage starts and what crosses into it. */
static void pipe_profile_cut(struct pipeline *p, const struct nn_model *whole, const int *first)
{
    struct pipe_profile *pr = p->profile;
    for (int s = 0; pr && s <= p->cfg.stages; s++) {
        pr->first[s] = first[s];
        pr->cut_bytes[s] = 0;
        if (s == 0 || s == p->cfg.stages)
            continue;
        struct nn_node_info ni;
        nn_model_node_info(whole, first[s], &ni);
        pr->cut_bytes[s] = (int64_t)((size_t)p->mb * nn_model_tensor_sample(whole, ni.in[0]) *
                                     sizeof(float));
    }
}

/* The cost of each layer of whole to balance stages by: NULL (parameters), or the times
 * rank 0 measured, broadcast (as floats of ms) so every rank cuts the same way. Owned. */
static int pipe_costs(struct pipeline *p, struct nn_model *whole, double **cost, struct err *e)
{
    *cost = NULL;
    if (!p->cfg.balance_time)
        return 0;
    int n = nn_model_node_count(whole);
    float *ms = calloc((size_t)n, sizeof *ms);
    *cost = calloc((size_t)n, sizeof **cost);
    int rc = ms && *cost ? 0 : err_set(e, ERR_NOMEM, NULL, "pipeline: out of memory");
    const struct pipe_profile *pr = p->profile;
    for (int i = 0; rc == 0 && pr && i < n; i++)
        ms[i] = (float)((double)(pr->forward_ns[i] + pr->backward_ns[i]) / 1e6);
    /* every rank takes part even when rank 0 failed: it then broadcasts zeros, and the
     * run fails with rank 0's error */
    struct err later; /* rank 0's own error comes first */
    if (comm_broadcast(p->world, ms, ms, (size_t)n, COMM_FLOAT32, 0, rc == 0 ? e : &later) <
            0 &&
        rc == 0)
        rc = err_prefix(e, "sharing the layer times");
    for (int i = 0; rc == 0 && i < n; i++)
        (*cost)[i] = ms[i];
    free(ms);
    return rc;
}

/* The places whole can be cut, by name, into buf (for an error that lists them). */
static void pipe_list_starts(const struct nn_model *whole, char *buf, size_t cap)
{
    int starts[512], k = nn_model_stage_starts(whole, starts, 512);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < k && i < 512 && used + 1 < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                         nn_model_node_name(whole, starts[i]));
        used += w > 0 ? (size_t)w : 0;
    }
}

/* first[1..P-1] from the spec's names of the layers the stages start at. */
static int pipe_named_split(const struct pipeline *p, const struct nn_model *whole, int *first,
                            struct err *e)
{
    int P = p->cfg.stages, starts[512], k = nn_model_stage_starts(whole, starts, 512), s = 1;
    const char *c = p->cfg.split;
    char places[1024];
    first[0] = 0;
    first[P] = nn_model_node_count(whole);
    while (*c && s < P) {
        size_t len = strcspn(c, ",");
        int at = -1;
        for (int i = 0; i < k && i < 512 && at < 0; i++) {
            const char *name = nn_model_node_name(whole, starts[i]);
            if (strlen(name) == len && strncmp(name, c, len) == 0)
                at = starts[i];
        }
        if (at < 0 || at <= first[s - 1]) {
            pipe_list_starts(whole, places, sizeof places);
            return err_set(e, ERR_INVALID, "pipeline_split",
                           "\"%.*s\" is %s; stages can start at: %s", (int)len, c,
                           at < 0 ? "no place to cut the model" : "not after the stage before",
                           places);
        }
        first[s++] = at;
        c += len + (c[len] == ',');
    }
    if (s != P || *c)
        return err_set(e, ERR_INVALID, "pipeline_split", "%d stages need %d layer names", P,
                       P - 1);
    return 0;
}

int pipe_init(struct pipeline *p, const struct pipe_config *cfg, struct nn_model *whole,
              struct comm *world, struct err *e)
{
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->world = world;
    int P = cfg->stages, M = cfg->micro_batches;
    if (P < 1 || M < 1 || cfg->batch % M != 0 || world->world_size % P != 0)
        return err_set(e, ERR_INVALID, "pipeline",
                       "%d stages of %d micro-batches do not fit batch %d on %d ranks", P, M,
                       cfg->batch, world->world_size);
    p->stage = world->rank % P;
    p->replica = world->rank / P;
    p->prev = p->stage > 0 ? world->rank - 1 : -1;
    p->next = p->stage < P - 1 ? world->rank + 1 : -1;
    p->mb = cfg->batch / M;
    p->labels_per = nn_model_labels_per_sample(whole);
    int first[65];
    double *cost = NULL;
    if (P > 64)
        return err_set(e, ERR_INVALID, "pipeline", "at most 64 stages");
    bool named = cfg->split && *cfg->split;
    int rc = world->rank == 0 && pipe_profile(p, whole, e) < 0
                 ? err_prefix(e, "timing the layers")
                 : 0;
    /* a balance by time broadcasts even when rank 0 failed (pipe_costs) */
    if (rc == 0 || (cfg->balance_time && !named)) {
        int rc2 = named ? pipe_named_split(p, whole, first, e) : pipe_costs(p, whole, &cost, e);
        rc = rc < 0 ? rc : rc2;
    }
    if (rc == 0 && !named)
        rc = nn_model_stage_split(whole, P, cost, first, e);
    free(cost);
    if (rc < 0)
        return -1;
    pipe_profile_cut(p, whole, first);
    p->first = first[p->stage];
    p->end = first[p->stage + 1];
    p->nslots = cfg->schedule == PIPE_GPIPE ? M : (M < P - p->stage ? M : P - p->stage);
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    if (!p->slots)
        return err_set(e, ERR_NOMEM, NULL, "pipeline: out of memory");
    for (int s = 0; s < p->nslots; s++)
        if (pipe_make_slot(p, s, whole, e) < 0)
            return err_prefix(e, "stage %d (layers %d..%d), slot %d", p->stage, p->first,
                              p->end - 1, s);
    const struct nn_model *m = &p->slots[0];
    p->sample_floats = nn_model_tensor_sample(m, 0);
    p->in_floats = (size_t)p->mb * p->sample_floats;
    p->out_floats = (size_t)p->mb * nn_model_tensor_sample(m, nn_model_output_tensor(m));
    size_t f = sizeof(float);
    if (p->prev >= 0) {
        p->in_act = malloc((size_t)p->nslots * p->in_floats * f);
        p->din = malloc(p->in_floats * f);
    }
    if (p->next >= 0) {
        p->out_buf = malloc(p->out_floats * f);
        p->dout = malloc(p->out_floats * f);
    }
    pipe_find_tie(p, whole, first);
    if (p->tie_param >= 0)
        p->tie_buf = malloc(m->param_info[p->tie_param].len * f);
    if ((p->prev >= 0 && (!p->in_act || !p->din)) ||
        (p->next >= 0 && (!p->out_buf || !p->dout)) || (p->tie_param >= 0 && !p->tie_buf))
        return err_set(e, ERR_NOMEM, NULL, "pipeline: out of memory for activations");
    return 0;
}

void pipe_cleanup(struct pipeline *p)
{
    for (int s = p->nslots - 1; s >= 0; s--) /* the borrowers before slot 0 */
        nn_model_destroy(&p->slots[s]);
    free(p->slots);
    free(p->in_act);
    free(p->din);
    free(p->out_buf);
    free(p->dout);
    free(p->tie_buf);
    pipe_profile_free(p->profile);
    memset(p, 0, sizeof *p);
}

struct nn_model *pipe_model(struct pipeline *p)
{
    return &p->slots[0];
}

bool pipe_is_last(const struct pipeline *p)
{
    return p->next < 0;
}

/* [[a, b(, c)]...] of n rows from the columns given (c may be NULL). Owned; NULL: no
 * memory. */
static json_t *pipe_rows(const int64_t *a, const int64_t *b, const int64_t *c, int n)
{
    json_t *rows = json_array();
    for (int i = 0; rows && i < n; i++) {
        json_t *r = c ? json_pack("[III]", (json_int_t)a[i], (json_int_t)b[i], (json_int_t)c[i])
                      : json_pack("[II]", (json_int_t)a[i], (json_int_t)b[i]);
        if (!r || json_array_append_new(rows, r) < 0) {
            json_decref(rows);
            return NULL;
        }
    }
    return rows;
}

int pipe_report_profile(const struct pipeline *p, struct report_writer *w, int repeat,
                        struct err *e)
{
    const struct pipe_profile *pr = p->profile;
    if (!pr)
        return 0;
    int P = p->cfg.stages;
    int64_t first[64];
    for (int s = 1; s < P; s++)
        first[s - 1] = pr->first[s];
    json_t *layers = pipe_rows(pr->forward_ns, pr->backward_ns, pr->param_bytes, pr->nlayers);
    json_t *cuts = pipe_rows(first, pr->cut_bytes + 1, NULL, P - 1);
    const struct nn_model *m = &p->slots[0];
    struct report_pipe rp = {
        .repeat = repeat,
        .stages = P,
        .micro_batch = p->mb,
        .tied_bytes = p->tie_param >= 0
                          ? (int64_t)(m->param_info[p->tie_param].len * sizeof(float))
                          : 0,
        .layers = layers,
        .cuts = cuts,
        /* a layer too fast for the clock sums to 0: absent, never a 0 the line refuses */
        .batch = p->cfg.batch,
        .batch_forward_ns = pr->batch_forward_ns > 0 ? pr->batch_forward_ns : -1,
        .batch_backward_ns = pr->batch_backward_ns > 0 ? pr->batch_backward_ns : -1};
    int rc = layers && cuts ? report_emit_pipe(w, &rp, e)
                            : err_set(e, ERR_NOMEM, NULL, "pipeline profile: out of memory");
    json_decref(layers);
    json_decref(cuts);
    return rc;
}

int64_t pipe_activation_bytes(const struct pipeline *p)
{
    int64_t sum = 0;
    for (int s = 0; s < p->nslots; s++)
        sum += (int64_t)p->slots[s].ws.size;
    return sum;
}

/* ---- point to point ------------------------------------------------------------------- */

/* What one step's schedule works with. */
struct pipe_run {
    struct pipeline *p;
    const float *x;
    const int32_t *y;
    uint64_t step;
    struct ddp *ddp;
    nn_grad_hook_fn hook;
    void *ctx;
    struct observe *obs;
    struct pipe_stats *st;
    struct err *e;
};

/* A span of the trace, where the step is traced (obs may be NULL: no trace at all). */
static void pipe_span(const struct pipe_run *r, const char *name, int mb, int64_t t0,
                      int64_t t1)
{
    if (r->obs)
        observe_trace_span_mb(r->obs, name, mb, t0, t1);
}

/* Times a point-to-point call and its bytes; rc is the call's result. */
static int pipe_p2p_done(struct pipe_run *r, int mb, int64_t t0, size_t sent, int rc)
{
    int64_t t1 = clock_mono_ns();
    r->st->p2p_ns += t1 - t0;
    r->st->p2p_bytes += (int64_t)(sent * sizeof(float));
    pipe_span(r, "p2p", mb, t0, t1);
    return rc < 0 ? err_prefix(r->e, "stage %d micro-batch %d", r->p->stage, mb) : 0;
}

static float *pipe_slot_input(struct pipeline *p, int mb)
{
    return p->in_act + (size_t)(mb % p->nslots) * p->in_floats;
}

static int pipe_recv_forward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_recv(p->world, pipe_slot_input(p, mb), p->in_floats, COMM_FLOAT32, p->prev,
                       r->e);
    return pipe_p2p_done(r, mb, t0, 0, rc);
}

static int pipe_send_forward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_send(p->world, p->out_buf, p->out_floats, COMM_FLOAT32, p->next, r->e);
    return pipe_p2p_done(r, mb, t0, p->out_floats, rc);
}

static int pipe_recv_backward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_recv(p->world, p->dout, p->out_floats, COMM_FLOAT32, p->next, r->e);
    return pipe_p2p_done(r, mb, t0, 0, rc);
}

static int pipe_send_backward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_send(p->world, p->din, p->in_floats, COMM_FLOAT32, p->prev, r->e);
    return pipe_p2p_done(r, mb, t0, p->in_floats, rc);
}

/* Sends micro-batch mb's output forward while the gradient of micro-batch `back` comes
 * back: one exchange with the next stage. */
static int pipe_send_forward_recv_backward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_sendrecv(p->world, p->out_buf, p->out_floats, p->next, p->dout, p->out_floats,
                           p->next, COMM_FLOAT32, r->e);
    return pipe_p2p_done(r, mb, t0, p->out_floats, rc);
}

/* Sends a backward's input gradient to the previous stage while micro-batch mb's input
 * comes from it. */
static int pipe_send_backward_recv_forward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    int64_t t0 = clock_mono_ns();
    int rc = comm_sendrecv(p->world, p->din, p->in_floats, p->prev, pipe_slot_input(p, mb),
                           p->in_floats, p->prev, COMM_FLOAT32, r->e);
    return pipe_p2p_done(r, mb, t0, p->in_floats, rc);
}

/* ---- compute ------------------------------------------------------------------------- */

/* Forward of micro-batch mb on its slot; the last stage takes the loss, the others keep
 * the output (plain) to send. */
static int pipe_forward(struct pipe_run *r, int mb)
{
    struct pipeline *p = r->p;
    struct nn_model *m = &p->slots[mb % p->nslots];
    const float *in = p->prev < 0 ? r->x + (size_t)mb * p->in_floats : pipe_slot_input(p, mb);
    int64_t t0 = clock_mono_ns();
    uint64_t key = r->step * (uint64_t)p->cfg.micro_batches + (uint64_t)mb; /* dropout */
    int rc = nn_model_forward(m, in, 1, key, r->e);
    if (rc == 0 && p->next < 0) {
        double loss = 0;
        int right = 0;
        rc = nn_model_loss(m, r->y + (size_t)mb * p->mb * p->labels_per, p->mb, &loss, &right,
                           r->e);
        r->st->loss_sum += loss;
        r->st->right += right;
    } else if (rc == 0) {
        rc = nn_model_read_tensor(m, nn_model_output_tensor(m), 0, p->out_buf, r->e);
    }
    int64_t t1 = clock_mono_ns();
    r->st->forward_ns += t1 - t0;
    pipe_span(r, "forward", mb, t0, t1);
    return rc < 0 ? err_prefix(r->e, "forward of micro-batch %d", mb) : 0;
}

/* Backward of micro-batch mb (seeded by its loss on the last stage, by the gradient
 * received otherwise); `last` ends the step for the strategy. The exposed communication
 * the hook's launches take is the strategy's, not the backward's. */
static int pipe_backward(struct pipe_run *r, int mb, bool last)
{
    struct pipeline *p = r->p;
    struct nn_model *m = &p->slots[mb % p->nslots];
    ddp_begin_step(r->ddp, last);
    int64_t exposed = r->ddp->st.exposed_ns, t0 = clock_mono_ns();
    int rc = p->next < 0 ? nn_model_backward(m, r->hook, r->ctx, r->e)
                         : nn_model_backward_from(m, p->dout, r->hook, r->ctx, r->e);
    if (rc == 0 && p->prev >= 0)
        rc = nn_model_read_tensor(m, 0, 1, p->din, r->e);
    int64_t t1 = clock_mono_ns();
    r->st->backward_ns += (t1 - t0) - (r->ddp->st.exposed_ns - exposed);
    pipe_span(r, "backward", mb, t0, t1);
    return rc < 0 ? err_prefix(r->e, "backward of micro-batch %d", mb) : 0;
}

/* ---- schedules ------------------------------------------------------------------------ */

/* gpipe: every forward, then every backward (the last micro-batch first). */
static int pipe_run_gpipe(struct pipe_run *r)
{
    struct pipeline *p = r->p;
    int M = p->cfg.micro_batches;
    for (int mb = 0; mb < M; mb++)
        if ((p->prev >= 0 && pipe_recv_forward(r, mb) < 0) || pipe_forward(r, mb) < 0 ||
            (p->next >= 0 && pipe_send_forward(r, mb) < 0))
            return -1;
    for (int mb = M - 1; mb >= 0; mb--)
        if ((p->next >= 0 && pipe_recv_backward(r, mb) < 0) ||
            pipe_backward(r, mb, mb == 0) < 0 ||
            (p->prev >= 0 && pipe_send_backward(r, mb) < 0))
            return -1;
    return 0;
}

/* 1f1b (PipeDream-flush, Megatron's order): P - stage - 1 warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards. */
static int pipe_run_1f1b(struct pipe_run *r)
{
    struct pipeline *p = r->p;
    int M = p->cfg.micro_batches, P = p->cfg.stages;
    int warm = P - p->stage - 1 < M ? P - p->stage - 1 : M, steady = M - warm;
    bool first = p->prev < 0, last = p->next < 0;
    for (int mb = 0; mb < warm; mb++)
        if ((!first && pipe_recv_forward(r, mb) < 0) || pipe_forward(r, mb) < 0 ||
            pipe_send_forward(r, mb) < 0)
            return -1;
    if (steady > 0 && !first && pipe_recv_forward(r, warm) < 0)
        return -1;
    for (int i = 0; i < steady; i++) {
        int fm = warm + i;
        if (pipe_forward(r, fm) < 0 || (!last && pipe_send_forward_recv_backward(r, fm) < 0) ||
            pipe_backward(r, i, i == M - 1) < 0)
            return -1;
        if (first)
            continue;
        if (i == steady - 1 ? pipe_send_backward(r, i) < 0
                            : pipe_send_backward_recv_forward(r, fm + 1) < 0)
            return -1;
    }
    for (int i = steady; i < M; i++)
        if (pipe_recv_backward(r, i) < 0 || pipe_backward(r, i, i == M - 1) < 0 ||
            (!first && pipe_send_backward(r, i) < 0))
            return -1;
    return 0;
}

int pipe_train_step(struct pipeline *p, const float *x, const int32_t *y, uint64_t step,
                    struct ddp *ddp, nn_grad_hook_fn hook, void *ctx, struct observe *obs,
                    struct pipe_stats *st, struct err *e)
{
    memset(st, 0, sizeof *st);
    nn_model_zero_grad(&p->slots[0]); /* the arenas every slot shares */
    struct pipe_run r = {.p = p,
                         .x = x,
                         .y = y,
                         .step = step,
                         .ddp = ddp,
                         .hook = hook,
                         .ctx = ctx,
                         .obs = obs,
                         .st = st,
                         .e = e};
    return p->cfg.schedule == PIPE_GPIPE ? pipe_run_gpipe(&r) : pipe_run_1f1b(&r);
}

int pipe_sync_tied(struct pipeline *p, struct pipe_stats *st, struct err *e)
{
    if (p->tie_param < 0)
        return 0;
    const struct nn_param *q = &p->slots[0].param_info[p->tie_param];
    float *g = p->slots[0].grads.data + q->offset;
    int64_t t0 = clock_mono_ns();
    if (comm_sendrecv(p->world, g, q->len, p->tie_peer, p->tie_buf, q->len, p->tie_peer,
                      COMM_FLOAT32, e) < 0)
        return err_prefix(e, "tied weight %s with rank %d", q->name, p->tie_peer);
    for (size_t i = 0; i < q->len; i++)
        g[i] += p->tie_buf[i];
    st->p2p_ns += clock_mono_ns() - t0;
    st->p2p_bytes += (int64_t)(q->len * sizeof(float));
    return 0;
}

int pipe_eval_batch(struct pipeline *p, const float *x, const int32_t *y, int n_valid,
                    double *loss_sum, int *right, struct err *e)
{
    struct nn_model *m = &p->slots[0];
    *loss_sum = 0;
    *right = 0;
    for (int mb = 0; mb < p->cfg.micro_batches; mb++) {
        int valid = n_valid - mb * p->mb;
        if (valid <= 0)
            break; /* every stage of the replica reads the same batch: the same break */
        valid = valid < p->mb ? valid : p->mb;
        const float *in = p->prev < 0 ? x + (size_t)mb * p->in_floats : p->in_act;
        if ((p->prev >= 0 &&
             comm_recv(p->world, p->in_act, p->in_floats, COMM_FLOAT32, p->prev, e) < 0) ||
            nn_model_forward(m, in, 0, 0, e) < 0)
            return err_prefix(e, "evaluation, micro-batch %d", mb);
        if (p->next >= 0) {
            if (nn_model_read_tensor(m, nn_model_output_tensor(m), 0, p->out_buf, e) < 0 ||
                comm_send(p->world, p->out_buf, p->out_floats, COMM_FLOAT32, p->next, e) < 0)
                return err_prefix(e, "evaluation, micro-batch %d", mb);
            continue;
        }
        double loss = 0;
        int ok = 0;
        if (nn_model_loss(m, y + (size_t)mb * p->mb * p->labels_per, valid, &loss, &ok, e) < 0)
            return err_prefix(e, "evaluation loss, micro-batch %d", mb);
        *loss_sum += loss * valid;
        *right += ok;
    }
    return 0;
}
