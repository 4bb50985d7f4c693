/* Unit tests for worker/elastic (the generation record) and worker/train_elastic with
 * ddp's full optimizer state (elastic training's commit and restore).
 *
 * Commit and restore: ranks are threads in this process, each with its own mnist-cnn
 * model and a TCP communicator built through an in-process store. A reference FULL
 * optimizer state F (Adam: two planes, every value distinct) is imported into every
 * rank of a world of W1 (ZeRO: each takes its chunks), committed (ZeRO all-gathers the
 * chunks) and checked to be F exactly on every rank; rank 0's commit is then shared by
 * broadcast in a world of W2 whose other ranks have none, loaded (ZeRO re-slices) and
 * exported again, which must give F exactly, with rank 0's parameters and buffers and
 * the optimizer's step count. 3 -> 2 and 2 -> 3 for every strategy: a chunk gathered to
 * the wrong place, a rank's chunk left out or a slice taken at the old world's offsets
 * changes values of F. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/vocab.h"
#include "daemon/store_server.h"
#include "tests/unit/test.h"
#include "worker/comm/tcp.h"
#include "worker/ddp/ddp.h"
#include "worker/elastic.h"
#include "worker/nn/model.h"
#include "worker/nn/models.h"
#include "worker/store/store_client.h"
#include "worker/train_elastic.h"

/* --- the generation record ---------------------------------------------------------- */

static int parse(const char *text, struct elastic_record *g, struct err *e)
{
    return elastic_gen_parse(text, strlen(text), 4, g, e);
}

static void test_gen_record(void)
{
    struct elastic_record g;
    struct err e;
    T_OK(parse("{\"gen\":2,\"members\":[0,1,3],\"joiners\":[3],\"reason\":\"slot 3 back\"}", &g,
               &e));
    T_EQ_INT(g.gen, 2);
    T_EQ_INT(g.n, 3);
    T_EQ_INT(g.members[2], 3);
    T_EQ_INT(g.n_joiners, 1);
    T_EQ_STR(g.reason, "slot 3 back");
    T_EQ_INT(elastic_gen_index(&g, 3), 2);
    T_EQ_INT(elastic_gen_index(&g, 2), -1);
    T_EQ_INT(elastic_gen_root(&g), 0);
    /* the root is the lowest member that is not new */
    T_OK(parse("{\"gen\":5,\"members\":[0,2],\"joiners\":[0]}", &g, &e));
    T_EQ_INT(elastic_gen_root(&g), 1);
    T_EQ_STR(g.reason, "");
    T_OK(parse("{\"gen\":6,\"members\":[1],\"joiners\":[1]}", &g, &e));
    T_EQ_INT(elastic_gen_root(&g), -1);
    static const struct {
        const char *text, *field;
    } bad[] = {
        {"[1]", ""},
        {"not json", ""},
        {"{\"members\":[0]}", "gen"},
        {"{\"gen\":0,\"members\":[0]}", "gen"},
        {"{\"gen\":1,\"members\":[]}", "members"},
        {"{\"gen\":1,\"members\":[1,0]}", "members"},
        {"{\"gen\":1,\"members\":[0,0]}", "members"},
        {"{\"gen\":1,\"members\":[0,4]}", "members"},
        {"{\"gen\":1,\"members\":[0,\"1\"]}", "members"},
        {"{\"gen\":1,\"members\":[0,1],\"joiners\":[2]}", "joiners"},
        {"{\"gen\":1,\"members\":[0,1],\"joiners\":{}}", "joiners"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        T_CHECK_MSG(parse(bad[i].text, &g, &e) < 0, "accepted %s", bad[i].text);
        T_CHECK_MSG(strcmp(e.field, bad[i].field) == 0, "%s: field %s", bad[i].text, e.field);
    }
}

static void test_recoverable(void)
{
    struct err e = {.code = ERR_PEER};
    T_CHECK(elastic_recoverable(&e));
    e.code = ERR_TIMEOUT;
    T_CHECK(elastic_recoverable(&e));
    e.code = ERR_ABORTED; /* a signal ends the rank */
    T_CHECK(!elastic_recoverable(&e));
    e.code = ERR_INVALID;
    T_CHECK(!elastic_recoverable(&e));
}

/* --- commit and restore across worlds ----------------------------------------------- */

#define EL_MAX_WORLD 3
#define EL_OPT_STEP 7

struct el_rank {
    int rank, world;
    enum ddp_strategy strategy;
    char addr[64], run[16];
    const float *full; /* the reference F (phase 1) or NULL (phase 2) */
    size_t full_len;
    struct train_commit commit; /* phase 1: this rank's; phase 2: rank 0 starts with one */
    float *params_out;          /* phase 2: the parameters after the load (owned) */
    size_t nparams;
    float *state_out; /* the full state exported at the end (owned) */
    long opt_step;
    int64_t iter_max;
    char why[300];
};

static int el_model(struct nn_model *m, uint64_t seed, struct err *e)
{
    nn_model_init(m);
    return nn_models_build(m, "mnist-cnn", 1, 28, 28, 10, NULL, e) < 0 ||
                   nn_model_init_params(m, seed, e) < 0
               ? -1
               : 0;
}

static struct comm *el_comm(struct el_rank *r, struct store_client **sc, struct err *e)
{
    *sc = store_client_connect(r->addr, r->run, "pw", r->rank, 5000, NULL, e);
    if (!*sc)
        return NULL;
    struct comm_tcp_config cfg = {.rank = r->rank,
                                  .world_size = r->world,
                                  .listen_host = "127.0.0.1",
                                  .timeout_ms = 20000,
                                  .algorithm = "auto",
                                  .secret = "pw"};
    return comm_tcp_create(&cfg, *sc, e);
}

/* One rank of either phase (see the file's comment). */
static int el_rank_work(struct el_rank *r, struct comm *c, struct nn_model *m, struct err *e)
{
    struct ddp d;
    struct nn_optim o;
    struct ddp_config dc = {
        .strategy = r->strategy, .bucket_bytes = 16 << 10, .fusion_bytes = 1 << 20};
    if (ddp_init(&d, &dc, c, m, e) < 0)
        return -1;
    struct nn_optim_cfg oc = nn_optim_defaults(NN_OPTIM_ADAM);
    int rc = ddp_optim_init(&d, &o, &oc, e);
    size_t full = rc == 0 ? ddp_optim_full_len(&d, &o) : 0;
    if (rc == 0 && r->full) { /* phase 1: import F, commit */
        ddp_optim_import(&d, &o, r->full, EL_OPT_STEP);
        struct train_commit_head h = {.repeat = 0, .step = 40, .iter = 44, .opt_step = o.step};
        rc = train_commit_save(&r->commit, &h, m->params.data, m->nparams, m->buffers.data,
                               m->nbuffers, &d, &o, false, e);
    } else if (rc == 0) { /* phase 2: rank 0's commit to all, loaded */
        rc = train_commit_share(c, 0, &r->commit, r->rank, &r->iter_max, e);
        if (rc == 0)
            rc = train_commit_load(&r->commit, m->params.data, m->nparams, m->buffers.data,
                                   m->nbuffers, &d, &o, e);
    }
    r->state_out = rc == 0 ? calloc(full, sizeof(float)) : NULL;
    if (rc == 0 && !r->state_out)
        rc = err_set(e, ERR_NOMEM, NULL, "out of memory");
    if (rc == 0)
        rc = ddp_optim_export(&d, &o, r->state_out, e);
    r->opt_step = o.step;
    nn_optim_cleanup(&o);
    ddp_cleanup(&d);
    return rc;
}

static void *el_rank_main(void *p)
{
    struct el_rank *r = p;
    struct err e = {0};
    struct store_client *sc = NULL;
    struct nn_model m;
    /* phase 2's models start from other parameters: the load must replace them */
    int rc = el_model(&m, r->full ? 1 : 99, &e);
    struct comm *c = rc == 0 ? el_comm(r, &sc, &e) : NULL;
    if (!c || el_rank_work(r, c, &m, &e) < 0)
        snprintf(r->why, sizeof r->why, "rank %d of %d: %s", r->rank, r->world, e.msg);
    r->nparams = m.nparams;
    r->params_out = malloc(m.nparams * sizeof(float));
    if (r->params_out)
        memcpy(r->params_out, m.params.data, m.nparams * sizeof(float));
    comm_destroy(c);
    store_client_destroy(sc);
    nn_model_destroy(&m);
    return NULL;
}

/* Runs world ranks of a phase over a run of their own. */
static void el_phase(struct store_server *srv, struct el_rank *rk, int world, const char *run)
{
    struct err e;
    if (store_server_add_run(srv, run, "pw", &e) < 0) {
        snprintf(rk[0].why, sizeof rk[0].why, "%s", e.msg);
        return;
    }
    pthread_t th[EL_MAX_WORLD];
    for (int i = 0; i < world; i++) {
        rk[i].rank = i;
        rk[i].world = world;
        snprintf(rk[i].addr, sizeof rk[i].addr, "127.0.0.1:%d", store_server_port(srv));
        snprintf(rk[i].run, sizeof rk[i].run, "%s", run);
        pthread_create(&th[i], NULL, el_rank_main, &rk[i]);
    }
    for (int i = 0; i < world; i++)
        pthread_join(th[i], NULL);
}

static void el_free(struct el_rank *rk, int n)
{
    for (int i = 0; i < n; i++) {
        train_commit_free(&rk[i].commit);
        free(rk[i].params_out);
        free(rk[i].state_out);
    }
}

/* The reference full state: Adam's two planes of every parameter, all distinct. */
static float *el_reference(size_t *len)
{
    struct nn_model m;
    struct err e;
    if (el_model(&m, 1, &e) < 0)
        return NULL;
    *len = 2 * m.nparams;
    nn_model_destroy(&m);
    float *f = malloc(*len * sizeof *f);
    for (size_t i = 0; f && i < *len; i++)
        f[i] = 1.0f + (float)i * 0.5f;
    return f;
}

static void el_check_resize(enum ddp_strategy strategy, int w1, int w2, const float *f,
                            size_t flen, struct store_server *srv, int round)
{
    struct el_rank a[EL_MAX_WORLD] = {0}, b[EL_MAX_WORLD] = {0};
    char run[16], why[400] = "";
    const char *name = ddp_strategy_name(strategy);
    for (int i = 0; i < EL_MAX_WORLD; i++) {
        a[i] = (struct el_rank){.strategy = strategy, .full = f, .full_len = flen};
        b[i] = (struct el_rank){.strategy = strategy};
    }
    snprintf(run, sizeof run, "a%d", round);
    el_phase(srv, a, w1, run);
    for (int i = 0; i < w1 && !why[0]; i++) {
        if (a[i].why[0])
            snprintf(why, sizeof why, "commit: %s", a[i].why);
        else if (memcmp(a[i].state_out, f, flen * sizeof *f) != 0 ||
                 a[i].commit.h.nstate != (int64_t)flen || a[i].opt_step != EL_OPT_STEP)
            snprintf(why, sizeof why, "rank %d of %d: the committed state is not F", i, w1);
    }
    /* phase 2's rank 0 starts with phase 1's rank 0's commit; the others with none */
    if (!why[0]) {
        b[0].commit = a[0].commit;
        memset(&a[0].commit, 0, sizeof a[0].commit);
        snprintf(run, sizeof run, "b%d", round);
        el_phase(srv, b, w2, run);
    }
    for (int i = 0; i < w2 && !why[0]; i++) {
        if (b[i].why[0])
            snprintf(why, sizeof why, "restore: %s", b[i].why);
        else if (memcmp(b[i].state_out, f, flen * sizeof *f) != 0)
            snprintf(why, sizeof why, "rank %d of %d: the restored state is not F", i, w2);
        else if (b[i].nparams != a[0].nparams ||
                 memcmp(b[i].params_out, a[0].params_out, a[0].nparams * sizeof(float)) != 0)
            snprintf(why, sizeof why, "rank %d of %d: parameters not rank 0's", i, w2);
        else if (b[i].opt_step != EL_OPT_STEP || b[i].iter_max != w2 - 1 ||
                 b[i].commit.h.iter != 44 || b[i].commit.h.step != 40)
            snprintf(why, sizeof why, "rank %d of %d: step %ld, iter max %lld, head %lld/%lld",
                     i, w2, b[i].opt_step, (long long)b[i].iter_max,
                     (long long)b[i].commit.h.iter, (long long)b[i].commit.h.step);
    }
    el_free(a, EL_MAX_WORLD);
    el_free(b, EL_MAX_WORLD);
    T_CHECK_MSG(!why[0], "%s %d -> %d: %s", name, w1, w2, why);
}

static void test_commit_restore_across_worlds(void)
{
    struct err e;
    struct store_server *srv = store_server_create("127.0.0.1", 0, &e);
    T_CHECK_MSG(srv, "%s", e.msg);
    size_t flen = 0;
    float *f = el_reference(&flen);
    T_CHECK(f != NULL);
    int round = 0;
    for (int s = 0; s < VOCAB_NSTRATEGIES; s++) {
        if (vocab_strategy(s)->single_process) /* one process: nothing to resize */
            continue;
        el_check_resize((enum ddp_strategy)s, 3, 2, f, flen, srv, round++);
        el_check_resize((enum ddp_strategy)s, 2, 3, f, flen, srv, round++);
    }
    free(f);
    store_server_destroy(srv);
}

/* A blob that is not a commit is refused, and one of another model too. */
static void test_commit_parse_refusals(void)
{
    struct train_commit c = {0};
    struct err e;
    uint8_t junk[sizeof(struct train_commit_head) + 8] = {0};
    c.blob = junk;
    c.len = sizeof junk;
    T_CHECK(train_commit_parse(&c, &e) < 0);
    T_EQ_INT(e.code, ERR_PROTOCOL);
    c.len = 4;
    T_CHECK(train_commit_parse(&c, &e) < 0);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_gen_record);
    TEST_RUN(test_recoverable);
    TEST_RUN(test_commit_parse_refusals);
    TEST_RUN(test_commit_restore_across_worlds);
    return test_end();
}
