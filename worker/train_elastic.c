/* train_elastic: the commit blob (train_elastic.h).
 *
 * Decision: the blob is one contiguous buffer, kept between commits (it only grows), so a
 * commit copies and never allocates after the first; its length is a multiple of 4 and it
 * travels as int32 words. */
#include "worker/train_elastic.h"

#include <stdlib.h>
#include <string.h>

void train_commit_free(struct train_commit *c)
{
    free(c->blob);
    memset(c, 0, sizeof *c);
}

static int train_commit_reserve(struct train_commit *c, size_t len, struct err *e)
{
    if (len > c->cap) {
        uint8_t *b = realloc(c->blob, len);
        if (!b)
            return err_set(e, ERR_NOMEM, NULL, "elastic commit of %zu bytes: out of memory",
                           len);
        c->blob = b;
        c->cap = len;
    }
    c->len = len;
    return 0;
}

int train_commit_save(struct train_commit *c, const struct train_commit_head *h,
                      const float *params, size_t nparams, const float *buffers,
                      size_t nbuffers, struct ddp *d, const struct nn_optim *o, struct err *e)
{
    size_t nstate = ddp_optim_full_len(d, o);
    size_t len = sizeof *h + (nparams + nbuffers + nstate) * sizeof(float);
    if (train_commit_reserve(c, len, e) < 0)
        return -1;
    struct train_commit_head head = *h;
    head.magic = TRAIN_COMMIT_MAGIC;
    head.version = 1;
    head.nparams = (int64_t)nparams;
    head.nbuffers = (int64_t)nbuffers;
    head.nstate = (int64_t)nstate;
    float *f = (float *)(c->blob + sizeof head);
    memcpy(f, params, nparams * sizeof(float));
    if (nbuffers)
        memcpy(f + nparams, buffers, nbuffers * sizeof(float));
    if (ddp_optim_export(d, o, f + nparams + nbuffers, e) < 0)
        return -1;
    memcpy(c->blob, &head, sizeof head);
    c->h = head;
    return 0;
}

int train_commit_share(struct comm *comm, int root, struct train_commit *c, int64_t iter,
                       int64_t *iter_max, struct err *e)
{
    int64_t v[2] = {comm->rank == root ? (int64_t)c->len : 0, iter};
    if (comm_allreduce(comm, v, v, 2, COMM_INT64, COMM_MAX, e) < 0)
        return err_prefix(e, "elastic: sharing the commit's size");
    if (v[0] < (int64_t)sizeof c->h || v[0] % 4 != 0)
        return err_set(e, ERR_PROTOCOL, NULL, "elastic: the root's commit is %lld bytes",
                       (long long)v[0]);
    *iter_max = v[1];
    if (comm->rank != root && train_commit_reserve(c, (size_t)v[0], e) < 0)
        return -1;
    if (comm_broadcast(comm, c->blob, c->blob, (size_t)v[0] / 4, COMM_INT32, root, e) < 0)
        return err_prefix(e, "elastic: broadcasting the commit");
    return train_commit_parse(c, e);
}

int train_commit_parse(struct train_commit *c, struct err *e)
{
    if (c->len < sizeof c->h)
        return err_set(e, ERR_PROTOCOL, NULL, "elastic: a commit of %zu bytes", c->len);
    struct train_commit_head h;
    memcpy(&h, c->blob, sizeof h);
    size_t floats = (size_t)(h.nparams + h.nbuffers + h.nstate);
    if (h.magic != TRAIN_COMMIT_MAGIC || h.version != 1 || h.nparams < 0 || h.nbuffers < 0 ||
        h.nstate < 0 || c->len != sizeof h + floats * sizeof(float))
        return err_set(e, ERR_PROTOCOL, NULL, "elastic: a commit of %zu bytes does not parse",
                       c->len);
    c->h = h;
    return 0;
}

int train_commit_load(const struct train_commit *c, float *params, size_t nparams,
                      float *buffers, size_t nbuffers, const struct ddp *d, struct nn_optim *o,
                      struct err *e)
{
    const struct train_commit_head *h = &c->h;
    size_t nstate = ddp_optim_full_len(d, o);
    if ((size_t)h->nparams != nparams || (size_t)h->nbuffers != nbuffers ||
        (size_t)h->nstate != nstate)
        return err_set(e, ERR_INVALID, NULL,
                       "elastic: the commit holds %lld parameters, %lld buffers and %lld "
                       "optimizer floats; this model %zu, %zu and %zu",
                       (long long)h->nparams, (long long)h->nbuffers, (long long)h->nstate,
                       nparams, nbuffers, nstate);
    const float *f = (const float *)(c->blob + sizeof *h);
    memcpy(params, f, nparams * sizeof(float));
    if (nbuffers)
        memcpy(buffers, f + nparams, nbuffers * sizeof(float));
    ddp_optim_import(d, o, f + nparams + nbuffers, (long)h->opt_step);
    return 0;
}
