/* Unit tests for common/vocab: every list has a row per name, names unique and in the
 * X-macro's order; the attributes agree with each other (a format is files, records or
 * native; gradients sharded only with the optimizer state); lookups and joined lists;
 * the spec's choices and the report types are the vocabulary's; vocab_json carries every
 * list, the norms and the model table; and schema/vocabulary.json is what vocab_json
 * generates (regenerate with `test_spec --write-vocabulary schema/vocabulary.json`).
 *
 * The source tree comes from $DDPB_SOURCE_DIR (meson sets it for unit tests) or the
 * current directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model_table.h"
#include "common/report.h"
#include "common/spec.h"
#include "common/vocab.h"
#include "tests/unit/json_file.h"
#include "tests/unit/test.h"

#define NAME_ONLY(id, name) name,
static const char *const x_strategies[] = {VOCAB_STRATEGIES(NAME_ONLY)};
static const char *const x_engines[] = {VOCAB_ENGINES(NAME_ONLY)};
static const char *const x_backends[] = {VOCAB_BACKENDS(NAME_ONLY)};
static const char *const x_formats[] = {VOCAB_FORMATS(NAME_ONLY)};
static const char *const x_storages[] = {VOCAB_STORAGES(NAME_ONLY)};
static const char *const x_schedules[] = {VOCAB_SCHEDULES(NAME_ONLY)};
static const char *const x_reports[] = {VOCAB_REPORTS(NAME_ONLY)};
static const char *const x_launchers[] = {VOCAB_LAUNCHERS(NAME_ONLY)};
static const char *const x_mpis[] = {VOCAB_MPIS(NAME_ONLY)};
static const char *const x_transports[] = {VOCAB_TRANSPORTS(NAME_ONLY)};
static const char *const x_faults[] = {VOCAB_FAULT_KINDS(NAME_ONLY)};

struct x_list {
    enum vocab_list l;
    const char *const *names;
    int n;
};
#define X_LIST(l, a)                                                                           \
    {                                                                                          \
        l, a, (int)(sizeof a / sizeof a[0])                                                    \
    }
static const struct x_list x_lists[] = {
    X_LIST(VOCAB_STRATEGY, x_strategies),
    X_LIST(VOCAB_ENGINE, x_engines),
    X_LIST(VOCAB_BACKEND, x_backends),
    X_LIST(VOCAB_FORMAT, x_formats),
    X_LIST(VOCAB_STORAGE, x_storages),
    X_LIST(VOCAB_SCHEDULE, x_schedules),
    X_LIST(VOCAB_REPORT, x_reports),
    X_LIST(VOCAB_LAUNCHER, x_launchers),
    X_LIST(VOCAB_MPI, x_mpis),
    X_LIST(VOCAB_TRANSPORT, x_transports),
    X_LIST(VOCAB_FAULT, x_faults),
};

static const char *source_dir(void)
{
    const char *d = getenv("DDPB_SOURCE_DIR");
    if (d && *d)
        return d;
    return access(VOCAB_JSON_PATH, R_OK) == 0 ? "." : NULL;
}

static char *read_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    size_t n = 0, cap = 0, k;
    char chunk[4096];
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + k + 1 > cap) {
            cap = 2 * (n + k + 1);
            char *q = realloc(p, cap);
            if (!q) {
                free(p);
                fclose(f);
                return NULL;
            }
            p = q;
        }
        memcpy(p + n, chunk, k);
        n += k;
    }
    fclose(f);
    if (p)
        p[n] = '\0';
    return p;
}

/* Every list: a row per X-macro name, in its order, each found by name, none twice. */
static void test_vocab_rows_match_macros(void)
{
    T_EQ_INT(sizeof x_lists / sizeof x_lists[0], VOCAB_NLISTS);
    for (size_t k = 0; k < sizeof x_lists / sizeof x_lists[0]; k++) {
        const struct x_list *x = &x_lists[k];
        T_EQ_INT(vocab_count(x->l), x->n);
        T_CHECK(vocab_name(x->l, x->n) == NULL);
        T_CHECK(vocab_name(x->l, -1) == NULL);
        T_CHECK(vocab_list_key(x->l) != NULL);
        for (int i = 0; i < x->n; i++) {
            T_CHECK_MSG(vocab_name(x->l, i) && strcmp(vocab_name(x->l, i), x->names[i]) == 0,
                        "%s[%d]: row %s, macro %s", vocab_list_key(x->l), i,
                        vocab_name(x->l, i) ? vocab_name(x->l, i) : "(none)", x->names[i]);
            T_EQ_INT(vocab_find(x->l, x->names[i]), i);
        }
        T_EQ_INT(vocab_find(x->l, "bogus"), -1);
        T_EQ_INT(vocab_find(x->l, NULL), -1);
    }
    T_EQ_INT(vocab_find(VOCAB_STRATEGY, "zero2"), VOCAB_STRATEGY_ZERO2);
    T_EQ_INT(vocab_find(VOCAB_FORMAT, "records-jpeg"), VOCAB_FORMAT_RECORDS_JPEG);
    T_CHECK(vocab_name(VOCAB_NLISTS, 0) == NULL);
    T_CHECK(vocab_strategy(VOCAB_NSTRATEGIES) == NULL);
}

/* What code reads instead of names: the strategies' and formats' attributes. */
static void test_vocab_attributes(void)
{
    bool overlaps[VOCAB_NSTRATEGIES], shards[VOCAB_NSTRATEGIES];
    for (int i = 0; i < VOCAB_NSTRATEGIES; i++) {
        const struct vocab_strategy *s = vocab_strategy(i);
        T_CHECK(!s->shards_gradients || s->shards_optimizer);
        T_CHECK(s->desc && *s->desc);
        overlaps[i] = s->overlaps_backward;
        shards[i] = s->shards_optimizer;
    }
    /* the behaviour worker/ddp/ddp.c and daemon/perf.c had by name */
    T_CHECK(!overlaps[VOCAB_STRATEGY_NAIVE] && overlaps[VOCAB_STRATEGY_DDP] &&
            overlaps[VOCAB_STRATEGY_HOROVOD] && !overlaps[VOCAB_STRATEGY_ZERO1] &&
            overlaps[VOCAB_STRATEGY_ZERO2]);
    T_CHECK(!shards[VOCAB_STRATEGY_DDP] && shards[VOCAB_STRATEGY_ZERO1] &&
            shards[VOCAB_STRATEGY_ZERO2]);
    T_EQ_INT(vocab_strategy(VOCAB_STRATEGY_HOROVOD)->buckets, VOCAB_BUCKETS_FUSION);
    T_EQ_INT(vocab_strategy(VOCAB_STRATEGY_NAIVE)->buckets, VOCAB_BUCKETS_PER_TENSOR);

    for (int i = 0; i < VOCAB_NFORMATS; i++) {
        const struct vocab_format *f = vocab_format(i);
        T_CHECK_MSG(f->files + f->records + f->tfrecord <= 1, "%s", f->name);
        T_CHECK_MSG(f->tfrecord == (strcmp(f->name, "tfrecord") == 0), "%s", f->name);
        T_CHECK_MSG(f->files == (strncmp(f->name, "files-", 6) == 0), "%s", f->name);
        T_CHECK_MSG(f->records == (strncmp(f->name, "records", 7) == 0), "%s", f->name);
        T_CHECK_MSG(f->lossy == (f->codec == VOCAB_CODEC_JPEG), "%s", f->name);
        T_CHECK_MSG((f->compression != VOCAB_COMPRESS_NONE) == f->records, "%s", f->name);
        T_CHECK_MSG(!f->max_level || f->records, "%s", f->name);
    }
    T_CHECK(!vocab_format_converted(vocab_format(VOCAB_FORMAT_NATIVE)));
    T_CHECK(vocab_format_converted(vocab_format(VOCAB_FORMAT_TFRECORD)));
    T_CHECK(vocab_format_lossy(vocab_format(VOCAB_FORMAT_TFRECORD)));
    int custom = 0;
    for (int i = 0; i < VOCAB_NSTORAGES; i++)
        custom += vocab_storage(i)->custom;
    T_EQ_INT(custom, 1);
    T_NEAR(vocab_storage(VOCAB_STORAGE_BLOB)->latency_ms, 15, 0);
    /* an adapter exactly for the frameworks launched through Python */
    for (int i = 0; i < VOCAB_NENGINES; i++) {
        const struct vocab_engine *g = vocab_engine(i);
        T_CHECK_MSG(!g->adapter == !g->framework, "%s", g->name);
        T_CHECK_MSG(!g->module == !g->framework, "%s", g->name);
    }
    T_EQ_STR(vocab_backend(VOCAB_BACKEND_NCCL)->device, "cuda");
    T_CHECK(vocab_schedule(VOCAB_SCHEDULE_GPIPE)->all_forward_first);
    T_CHECK(!vocab_schedule(VOCAB_SCHEDULE_1F1B)->all_forward_first);
    /* auto takes both paths, shm and tcp one each (the spec's rules read these) */
    for (int i = 0; i < VOCAB_NTRANSPORTS; i++) {
        const struct vocab_transport *t = vocab_transport(i);
        T_CHECK_MSG(t->shm || t->tcp, "%s", t->name);
        T_CHECK_MSG(t->desc && *t->desc, "%s", t->name);
    }
    T_CHECK(vocab_transport(VOCAB_TRANSPORT_AUTO)->shm &&
            vocab_transport(VOCAB_TRANSPORT_AUTO)->tcp);
    T_CHECK(vocab_transport(VOCAB_TRANSPORT_SHM)->shm &&
            !vocab_transport(VOCAB_TRANSPORT_SHM)->tcp);
    T_CHECK(!vocab_transport(VOCAB_TRANSPORT_TCP)->shm &&
            vocab_transport(VOCAB_TRANSPORT_TCP)->tcp);
    T_CHECK(vocab_transport(VOCAB_NTRANSPORTS) == NULL);
}

static void test_vocab_join(void)
{
    char buf[256];
    char want[256] = "";
    for (int i = 0; i < VOCAB_NSTRATEGIES; i++) /* the X-macro's names, "a, b or c" */
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
                 i == 0                       ? ""
                 : i == VOCAB_NSTRATEGIES - 1 ? " or "
                                              : ", ",
                 x_strategies[i]);
    T_EQ_STR(vocab_join(VOCAB_STRATEGY, " or ", buf, sizeof buf), want);
    T_EQ_STR(vocab_join(VOCAB_BACKEND, ", ", buf, sizeof buf), "tcp, nccl, mpi");
    T_EQ_STR(vocab_format_join(vocab_format_converted, ", ", buf, sizeof buf),
             "files-png, files-jpeg, records, records-zlib, records-zstd, records-jpeg, "
             "tfrecord");
    T_EQ_STR(vocab_format_join(vocab_format_lossy, " and ", buf, sizeof buf),
             "files-jpeg, records-jpeg and tfrecord");
    T_EQ_STR(vocab_format_join(vocab_format_leveled, " and ", buf, sizeof buf),
             "records-zlib and records-zstd");
    T_EQ_STR(vocab_storage_join_named(" or ", buf, sizeof buf), "local, nfs or blob");
    /* cut short, still terminated */
    T_EQ_STR(vocab_join(VOCAB_STRATEGY, ", ", buf, 8), "naive, ");
    T_EQ_STR(vocab_join(VOCAB_STRATEGY, ", ", buf, 1), "");
}

static void test_vocab_norms(void)
{
    const struct vocab_norm *n = vocab_norm_find("cifar10");
    T_CHECK(n);
    T_EQ_INT(n->channels, 3);
    T_NEAR(n->mean[0], 0.4914, 1e-6);
    T_EQ_INT(vocab_norm_find("none")->channels, 0);
    T_CHECK(vocab_norm_find("imagenet") == NULL);
    T_CHECK(vocab_norm_find(NULL) == NULL);
}

/* The spec's enums and the report types are the vocabulary, in its order. */
static void test_vocab_is_the_spec_choices(void)
{
    static const struct {
        const char *field;
        enum vocab_list l;
    } uses[] = {{"strategy", VOCAB_STRATEGY}, {"engine", VOCAB_ENGINE},
                {"backend", VOCAB_BACKEND},   {"dataset", VOCAB_FORMAT},
                {"dataset", VOCAB_STORAGE},   {"schedule", VOCAB_SCHEDULE},
                {"launcher", VOCAB_LAUNCHER}, {"transport", VOCAB_TRANSPORT}};
    static const char *const sub[] = {NULL, NULL, NULL, "format", "storage", NULL, NULL, NULL};
    json_t *schema = spec_schema_json();
    T_CHECK(schema);
    json_t *props = json_object_get(schema, "properties");
    for (size_t k = 0; k < sizeof uses / sizeof uses[0]; k++) {
        json_t *p = json_object_get(props, uses[k].field);
        if (sub[k])
            p = json_object_get(json_object_get(p, "properties"), sub[k]);
        json_t *en = json_object_get(p, "enum");
        T_CHECK_MSG(json_is_array(en), "%s has no enum", uses[k].field);
        T_EQ_INT(json_array_size(en), vocab_count(uses[k].l));
        for (int i = 0; i < vocab_count(uses[k].l); i++)
            T_EQ_STR(json_string_value(json_array_get(en, (size_t)i)),
                     vocab_name(uses[k].l, i));
    }
    json_decref(schema);
    for (int i = 0; i < REPORT_NTYPES; i++)
        T_EQ_STR(report_type_name((enum report_type)i), vocab_name(VOCAB_REPORT, i));
    T_EQ_STR(report_type_name(REPORT_NTYPES), "unknown");
}

static void test_vocab_json(void)
{
    json_t *v = vocab_json();
    T_CHECK(v);
    for (int l = 0; l < VOCAB_NLISTS; l++) {
        json_t *list = json_object_get(v, vocab_list_key((enum vocab_list)l));
        T_EQ_INT(json_array_size(list), vocab_count((enum vocab_list)l));
        for (int i = 0; i < vocab_count((enum vocab_list)l); i++)
            T_EQ_STR(
                json_string_value(json_object_get(json_array_get(list, (size_t)i), "name")),
                vocab_name((enum vocab_list)l, i));
    }
    json_t *zero2 = json_array_get(json_object_get(v, "strategies"), VOCAB_STRATEGY_ZERO2);
    T_CHECK(json_is_true(json_object_get(zero2, "shards_gradients")));
    T_EQ_STR(json_string_value(json_object_get(zero2, "buckets")), "by_size");
    json_t *pt = json_array_get(json_object_get(v, "engines"), VOCAB_ENGINE_PYTORCH);
    T_EQ_STR(json_string_value(json_object_get(pt, "adapter")), "engine_pytorch.py");
    T_EQ_STR(json_string_value(json_object_get(pt, "module")), "torch");
    json_t *dd = json_array_get(json_object_get(v, "engines"), VOCAB_ENGINE_DDPBENCH);
    T_CHECK(json_is_null(json_object_get(dd, "adapter")));
    json_t *rj = json_array_get(json_object_get(v, "formats"), VOCAB_FORMAT_RECORDS_JPEG);
    T_EQ_STR(json_string_value(json_object_get(rj, "codec")), "jpeg");
    T_EQ_STR(json_string_value(json_object_get(rj, "compression")), "jpeg");
    T_CHECK(json_is_false(json_object_get(rj, "tfrecord")));
    json_t *tf = json_array_get(json_object_get(v, "formats"), VOCAB_FORMAT_TFRECORD);
    T_CHECK(json_is_true(json_object_get(tf, "tfrecord")));
    T_EQ_STR(json_string_value(json_object_get(tf, "codec")), "jpeg");
    json_t *shm = json_array_get(json_object_get(v, "transports"), VOCAB_TRANSPORT_SHM);
    T_EQ_STR(json_string_value(json_object_get(shm, "name")), "shm");
    T_CHECK(json_is_true(json_object_get(shm, "shm")) &&
            json_is_false(json_object_get(shm, "tcp")));
    T_CHECK(json_string_length(json_object_get(shm, "description")) > 0);
    json_t *norms = json_object_get(v, "norms");
    json_t *mnist = json_array_get(norms, 0);
    T_EQ_STR(json_string_value(json_object_get(mnist, "name")), "mnist");
    T_NEAR(json_real_value(json_array_get(json_object_get(mnist, "mean"), 0)), 0.1307, 1e-12);
    json_t *models = json_object_get(v, "models");
    T_EQ_INT(json_array_size(models), model_table_count());
    for (size_t i = 0; i < model_table_count(); i++) {
        json_t *m = json_array_get(models, i);
        T_EQ_STR(json_string_value(json_object_get(m, "name")), model_table_at(i)->name);
        T_EQ_INT(json_integer_value(json_object_get(m, "classes")), model_table_at(i)->classes);
        T_EQ_INT(json_integer_value(json_object_get(m, "height")), model_table_at(i)->h);
    }
    json_decref(v);
}

/* schema/vocabulary.json (which the Python engines and tests read) is the generator's
 * output. */
static void test_vocab_file_in_sync(void)
{
    const char *src = source_dir();
    T_CHECK_MSG(src, "set DDPB_SOURCE_DIR to the source tree (meson test does)");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", VOCAB_JSON_PATH);
    char *file = read_whole(path),
         *now = json_file_text(vocab_json(), JSON_REAL_PRECISION(VOCAB_JSON_REAL_PRECISION));
    T_CHECK(now);
    bool same = file && now && strcmp(file, now) == 0;
    if (!same)
        fprintf(stderr,
                "    %s is not what vocab_json() generates.\n"
                "    common/vocab.h/.c or common/model_table.c changed: regenerate with\n"
                "      <build>/tests/test_spec --write-vocabulary %s\n"
                "    and commit the result.\n",
                path, path);
    free(file);
    free(now);
    T_CHECK(same);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_vocab_rows_match_macros);
    TEST_RUN(test_vocab_attributes);
    TEST_RUN(test_vocab_join);
    TEST_RUN(test_vocab_norms);
    TEST_RUN(test_vocab_is_the_spec_choices);
    TEST_RUN(test_vocab_json);
    TEST_RUN(test_vocab_file_in_sync);
    return test_end();
}
