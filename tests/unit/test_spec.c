/* Unit tests for common/spec: defaults, every validation rule with the field path it
 * names, sizes with units, sweep validation, expansion order and limits, cross-field rules
 * at sweep points, struct conversion, collective sizes, the faults list (each refusal
 * naming the fault's member), and that schema/spec.schema.json, schema/examples/ and
 * common/model_table.h agree with the code.
 *
 * The source tree comes from $DDPB_SOURCE_DIR (meson sets it for unit tests) or the
 * current directory. `test_spec --write-schema PATH` regenerates the schema file, `test_spec
 * --write-vocabulary PATH` schema/vocabulary.json (common/vocab.h). */
#include <dirent.h>
#include <inttypes.h>
#include <regex.h>
#include <unistd.h>

#include "common/model_table.h"
#include "common/spec.h"
#include "common/vocab.h"
#include "tests/unit/json_file.h"
#include "tests/unit/test.h"

#define W "{\"workload\": \"collective\""
#define SCHEMA_PATH "schema/spec.schema.json"

/* --- helpers ------------------------------------------------------------------------- */

static json_t *parse_text(const char *text, struct err *e)
{
    return spec_parse(text, strlen(text), e);
}

/* The normalized spec of text, or NULL after printing why it was rejected. */
static json_t *parse_ok(const char *text)
{
    struct err e = {0};
    json_t *s = parse_text(text, &e);
    if (!s)
        fprintf(stderr, "    rejected: %s\n    -> %s\n", text, e.msg);
    return s;
}

/* True when text is rejected with code, field and a message containing part. */
static bool spec_rejects(const char *text, enum err_code code, const char *field,
                         const char *part)
{
    struct err e = {0};
    json_t *out = parse_text(text, &e);
    if (out) {
        fprintf(stderr, "    accepted: %s\n", text);
        json_decref(out);
        return false;
    }
    if (e.code != code || strcmp(e.field, field) != 0 || !strstr(e.msg, part)) {
        fprintf(stderr, "    %s\n    -> %s field \"%s\": %s\n", text, err_code_name(e.code),
                e.field, e.msg);
        return false;
    }
    return true;
}

/* Every case of a table rejected as it says; case i named when one is not. */
#define SPEC_REJECTS_ALL(cases)                                                                \
    for (size_t i_ = 0; i_ < sizeof(cases) / sizeof(cases)[0]; i_++)                           \
    T_CHECK_MSG(                                                                               \
        spec_rejects((cases)[i_].text, ERR_INVALID, (cases)[i_].field, (cases)[i_].part),      \
        "case %zu", i_)

/* Every text parses and expands to at least one run; case i named when one does not. */
static void spec_all_run(const char *const *texts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct err e = {0};
        json_t *s = parse_ok(texts[i]);
        json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
        T_CHECK_MSG(runs && json_array_size(runs) >= 1, "fine case %zu: %s", i, e.msg);
        json_decref(runs);
        json_decref(s);
    }
}

static json_int_t get_int(const json_t *obj, const char *key)
{
    return json_integer_value(json_object_get(obj, key));
}

static const char *get_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static char *schema_text_now(void)
{
    return json_file_text(spec_schema_json(), 0);
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap + 1);
    size_t k;
    while (p && (k = fread(p + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *q = realloc(p, 2 * cap + 1);
            if (!q) {
                free(p);
                p = NULL;
            }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p)
        p[n] = '\0';
    *len = n;
    return p;
}

static const char *source_dir(void)
{
    const char *d = getenv("DDPB_SOURCE_DIR");
    if (d && *d)
        return d;
    return access(SCHEMA_PATH, R_OK) == 0 ? "." : NULL;
}

/* --- defaults and normalization ------------------------------------------------------ */

static void test_spec_defaults(void)
{
    json_t *s = parse_ok(W "}");
    T_CHECK(s);
    char *text = json_dumps(s, JSON_COMPACT);
    json_decref(s);
    T_EQ_STR(text, "{\"name\":\"collective\",\"description\":\"\",\"workload\":\"collective\","
                   "\"device\":\"cpu\",\"backend\":\"tcp\",\"launcher\":\"ddpbench\","
                   "\"mpi\":\"openmpi\",\"mpi_mca\":{},\"transport\":\"auto\","
                   "\"world_size\":1,\"nodes\":0,"
                   "\"ranks_per_node\":0,\"repeats\":1,\"trace_steps\":5,"
                   "\"seed\":1,\"timeout_s\":600,\"heartbeat_timeout_s\":30,"
                   "\"comm_timeout_s\":60,\"emulate_multi_rank\":false,\"faults\":[],"
                   "\"op\":\"allreduce\",\"dtype\":\"float32\","
                   "\"redop\":\"sum\",\"algorithm\":\"auto\",\"min_bytes\":4096,"
                   "\"max_bytes\":67108864,\"factor\":2,\"step\":0,\"sizes\":[],"
                   "\"buckets_of\":\"none\",\"iters\":20,"
                   "\"warmup\":5,\"check\":true,\"inplace\":false,\"bucket_mb\":25,"
                   "\"engine\":\"ddpbench\"}");
    free(text);
}

/* spec_nondefault (the report's setup table): only the fields apart from their defaults
 * (a size by its bytes, "4K" being the default 4096), the swept ones left out. */
static void test_spec_nondefault(void)
{
    json_t *s = parse_ok(W ", \"name\": \"n\", \"min_bytes\": \"4K\", \"iters\": 7, "
                           "\"max_bytes\": \"1M\", \"sweep\": {\"op\": [\"allreduce\", "
                           "\"all_gather\"]}}");
    T_CHECK(s);
    json_t *d = s ? spec_nondefault(s) : NULL;
    char *text = d ? json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    T_EQ_STR(text ? text : "", "{\"iters\":7,\"max_bytes\":1048576,\"name\":\"n\","
                               "\"workload\":\"collective\"}");
    free(text);
    json_decref(d);
    json_decref(s);
}

static void test_spec_given_values_kept(void)
{
    json_t *s = parse_ok(W ", \"name\": \"my run\", \"description\": \"two\\nlines\", "
                           "\"world_size\": 1024, \"repeats\": 100, \"seed\": 2147483647, "
                           "\"timeout_s\": 86400, \"algorithm\": \"ring\", "
                           "\"min_bytes\": \"1\", \"max_bytes\": \"2G\", \"factor\": 1024, "
                           "\"iters\": 100000, \"warmup\": 0, \"check\": false, "
                           "\"inplace\": true}");
    T_CHECK(s);
    T_EQ_STR(get_str(s, "name"), "my run");
    T_EQ_STR(get_str(s, "description"), "two\nlines");
    T_EQ_INT(get_int(s, "world_size"), 1024);
    T_EQ_INT(get_int(s, "seed"), 2147483647);
    T_EQ_STR(get_str(s, "algorithm"), "ring");
    T_EQ_INT(get_int(s, "min_bytes"), 1);
    T_EQ_INT(get_int(s, "max_bytes"), INT64_C(2) << 30);
    T_EQ_INT(get_int(s, "factor"), 1024);
    T_EQ_INT(get_int(s, "warmup"), 0);
    T_CHECK(json_is_false(json_object_get(s, "check")));
    T_CHECK(json_is_true(json_object_get(s, "inplace")));
    json_decref(s);
}

/* A normalized spec normalizes to itself (it is stored and submitted again). */
static void test_spec_normalize_idempotent(void)
{
    static const char *specs[] = {
        W "}",
        W ", \"step\": \"1K\", \"max_bytes\": \"8K\"}",
        W ", \"factor\": 8}",
        W ", \"sweep\": {\"step\": [\"1K\", 2048]}}",
        W ", \"sweep\": {\"world_size\": [1, 2], \"min_bytes\": [\"4K\", \"8K\"]}}",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        struct err e;
        json_t *a = parse_text(specs[i], &e);
        T_CHECK_MSG(a, "%s: %s", specs[i], e.msg);
        json_t *b = spec_normalize(a, &e);
        T_CHECK_MSG(b && json_equal(a, b), "%s", specs[i]);
        json_decref(a);
        json_decref(b);
    }
}

static void test_spec_factor_step(void)
{
    struct err e;
    json_t *s = parse_ok(W ", \"step\": \"1K\"}");
    T_CHECK(s);
    T_EQ_INT(get_int(s, "factor"), 0);
    T_EQ_INT(get_int(s, "step"), 1024);
    json_decref(s);
    s = parse_ok(W ", \"factor\": 4}");
    T_CHECK(s);
    T_EQ_INT(get_int(s, "factor"), 4);
    T_EQ_INT(get_int(s, "step"), 0);
    json_decref(s);
    /* 0 means "not used": with neither used, factor takes its default. */
    s = parse_ok(W ", \"factor\": 0, \"step\": 0}");
    T_CHECK(s);
    T_EQ_INT(get_int(s, "factor"), 2);
    T_EQ_INT(get_int(s, "step"), 0);
    json_decref(s);
    /* A swept step turns the default factor off at the top and at every point. */
    s = parse_ok(W ", \"sweep\": {\"step\": [\"1K\", \"2K\"]}}");
    T_CHECK(s);
    T_EQ_INT(get_int(s, "factor"), 0);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 2);
    json_t *spec1 = json_object_get(json_array_get(runs, 1), "spec");
    T_EQ_INT(get_int(spec1, "factor"), 0);
    T_EQ_INT(get_int(spec1, "step"), 2048);
    json_decref(runs);
    json_decref(s);
    T_CHECK(spec_rejects(W ", \"factor\": 4, \"step\": 1024}", ERR_INVALID, "step",
                         "step: factor and step are mutually exclusive"));
    T_CHECK(spec_rejects(W ", \"step\": 1024, \"sweep\": {\"factor\": [2, 4]}}", ERR_INVALID,
                         "step", "mutually exclusive"));
    T_CHECK(spec_rejects(W ", \"factor\": 1}", ERR_INVALID, "factor",
                         "factor: must be an integer from 2 to 1024 (or 0 when step is used), "
                         "got 1"));
}

/* --- validation errors --------------------------------------------------------------- */

struct bad_case {
    const char *text;
    const char *field;
    const char *part;
};

static void test_spec_exact_messages(void)
{
    struct err e;
    T_CHECK(!parse_text(W ", \"world_size\": 0}", &e));
    T_EQ_STR(e.msg, "world_size: must be an integer from 1 to 1024, got 0");
    T_EQ_STR(e.field, "world_size");
    T_EQ_INT(e.code, ERR_INVALID);
    T_CHECK(!parse_text(W ", \"dtype\": \"float33\"}", &e));
    T_EQ_STR(e.msg, "dtype: must be one of \"float32\", \"float16\", \"bfloat16\", "
                    "\"int32\", \"int64\", got \"float33\"");
    T_EQ_STR(e.field, "dtype");
    T_CHECK(!parse_text(W ", \"algorithm\": \"bogus\"}", &e));
    T_EQ_STR(e.msg, "algorithm: must be one of \"auto\", \"ring\", \"rd\", \"hd\", "
                    "\"direct\", \"tree\", \"hier\", got \"bogus\"");
    /* an algorithm the op does not have */
    T_CHECK(!parse_text(W ", \"op\": \"broadcast\", \"algorithm\": \"rd\"}", &e));
    T_EQ_STR(e.field, "algorithm");
    T_EQ_STR(e.msg,
             "algorithm: op \"broadcast\" has no algorithm \"rd\"; it has \"auto\", "
             "\"ring\", \"tree\""); /* hier is allreduce's only, and nccl chooses its own */
    T_CHECK(!parse_text(W ", \"op\": \"all_gather\", \"algorithm\": \"hier\"}", &e));
    T_EQ_STR(e.field, "algorithm");
    json_t *hier = parse_text(W ", \"algorithm\": \"hier\"}", &e);
    T_CHECK_MSG(hier != NULL, "algorithm hier refused: %s", e.msg);
    json_decref(hier);
}

static void test_spec_rejects_bad_fields(void)
{
    static const struct bad_case cases[] = {
        {"{}", "workload", "workload: is required"},
        {"{\"workload\": \"training\"}", "workload", "got \"training\""},
        {"{\"workload\": 1}", "workload", "must be one of \"collective\""},
        {W ", \"world_size\": 1025}", "world_size", "got 1025"},
        {W ", \"world_size\": 2.0}", "world_size",
         "must be an integer from 1 to 1024, got 2.0"},
        {W ", \"world_size\": 2.5}", "world_size", "got 2.5"},
        {W ", \"world_size\": \"2\"}", "world_size", "got \"2\""},
        {W ", \"world_size\": true}", "world_size", "got true"},
        {W ", \"world_size\": null}", "world_size", "got null"},
        {W ", \"repeats\": 0}", "repeats", "from 1 to 100"},
        {W ", \"repeats\": 101}", "repeats", "from 1 to 100"},
        {W ", \"seed\": -1}", "seed", "from 0 to 2147483647"},
        {W ", \"seed\": 2147483648}", "seed", "from 0 to 2147483647"},
        {W ", \"timeout_s\": 0}", "timeout_s", "from 1 to 86400"},
        {W ", \"timeout_s\": 86401}", "timeout_s", "from 1 to 86400"},
        {W ", \"iters\": 0}", "iters", "from 1 to 100000"},
        {W ", \"iters\": 100001}", "iters", "from 1 to 100000"},
        {W ", \"warmup\": -1}", "warmup", "from 0 to 10000"},
        {W ", \"warmup\": 10001}", "warmup", "from 0 to 10000"},
        {W ", \"factor\": 1025}", "factor", "from 2 to 1024"},
        {W ", \"factor\": 2.0}", "factor", "got 2.0"},
        {W ", \"op\": \"allgather\"}", "op",
         "must be one of \"allreduce\", \"reduce_scatter\""},
        {W ", \"redop\": \"prod\"}", "redop",
         "must be one of \"sum\", \"avg\", \"min\", \"max\""},
        {W ", \"op\": \"sendrecv\", \"algorithm\": \"ring\"}", "algorithm",
         "op \"sendrecv\" has no algorithm \"ring\""},
        {W ", \"op\": \"allreduce\", \"algorithm\": \"tree\"}", "algorithm",
         "it has \"auto\", \"ring\", \"rd\", \"hd\""},
        {W ", \"sweep\": {\"algorithm\": [\"ring\", \"rd\"], \"op\": [\"allreduce\", "
           "\"all_gather\"]}}",
         "sweep", "op \"all_gather\" has no algorithm \"rd\""},
        {W ", \"comm_timeout_s\": 0}", "comm_timeout_s", "from 1 to 3600"},
        {W ", \"comm_timeout_s\": 3601}", "comm_timeout_s", "from 1 to 3600"},
        {W ", \"sizes\": \"4K\"}", "sizes", "a list of at most 256 distinct sizes"},
        {W ", \"sizes\": [\"4K\", 4096]}", "sizes", "distinct"},
        {W ", \"sizes\": [0]}", "sizes", "from 1 to 2G"},
        {W ", \"sizes\": [\"3G\"]}", "sizes", "got [\"3G\"]"},
        {W ", \"sizes\": [1.5]}", "sizes", "got [1.5]"},
        {W ", \"sweep\": {\"sizes\": [[1], [2]]}}", "sweep.sizes", "cannot be swept"},
        {W ", \"device\": \"tpu\"}", "device", "must be one of \"cpu\", \"cuda\""},
        {W ", \"backend\": \"gloo\"}", "backend", "must be one of \"tcp\", \"nccl\""},
        {W ", \"dtype\": 32}", "dtype", "got 32"},
        {W ", \"check\": 1}", "check", "check: must be true or false, got 1"},
        {W ", \"check\": \"true\"}", "check", "must be true or false"},
        {W ", \"inplace\": null}", "inplace", "must be true or false"},
        {W ", \"name\": \"\"}", "name", "a string of 1 to 128 printable ASCII characters"},
        {W ", \"name\": \"tab\\there\"}", "name", "printable ASCII"},
        {W ", \"name\": \"caf\\u00e9\"}", "name", "printable ASCII"},
        {W ", \"name\": 5}", "name", "got 5"},
        {W ", \"description\": [\"x\"]}", "description", "a string of 0 to 4096 characters"},
        {W ", \"min_bytes\": 0}", "min_bytes", "must be a size from 1 to 2G"},
        {W ", \"min_bytes\": \"0K\"}", "min_bytes", "got \"0K\""},
        {W ", \"min_bytes\": \"4X\"}", "min_bytes", "got \"4X\""},
        {W ", \"min_bytes\": \"4.5K\"}", "min_bytes", "must be a size"},
        {W ", \"min_bytes\": -1}", "min_bytes", "got -1"},
        {W ", \"min_bytes\": 4096.0}", "min_bytes", "got 4096.0"},
        {W ", \"max_bytes\": \"2049M\"}", "max_bytes", "from 1 to 2G"},
        {W ", \"max_bytes\": 2147483649}", "max_bytes", "from 1 to 2G"},
        {W ", \"max_bytes\": \"3G\"}", "max_bytes", "got \"3G\""},
        {W ", \"max_bytes\": true}", "max_bytes", "must be a size"},
        {W ", \"step\": -1}", "step", "(or 0 when factor is used)"},
        {W ", \"step\": \"1Q\"}", "step", "got \"1Q\""},
        {W ", \"bogus\": 1}", "bogus", "bogus: unknown field; known fields: name, "},
        {W ", \"World_size\": 2}", "World_size", "unknown field"},
        {W ", \"min_bytes\": \"1M\", \"max_bytes\": \"4K\"}", "max_bytes",
         "max_bytes: min_bytes (1048576) must not exceed max_bytes (4096)"},
        {W ", \"max_bytes\": 1024}", "max_bytes", "min_bytes (4096) must not exceed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
}

static void test_spec_string_lengths(void)
{
    char text[6000], name[200];
    memset(name, 'n', 128);
    name[128] = '\0';
    snprintf(text, sizeof text, W ", \"name\": \"%s\"}", name);
    struct err e;
    json_t *s = parse_ok(text);
    T_CHECK(s);
    struct spec sp;
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(strlen(sp.name), 128); /* all 128 characters fit struct spec */
    json_decref(s);
    snprintf(text, sizeof text, W ", \"name\": \"%sn\"}", name);
    T_CHECK(spec_rejects(text, ERR_INVALID, "name", "1 to 128"));

    char desc[4200];
    memset(desc, 'd', 4096);
    desc[4096] = '\0';
    snprintf(text, sizeof text, W ", \"description\": \"%s\"}", desc);
    s = parse_ok(text);
    T_CHECK(s);
    json_decref(s);
    snprintf(text, sizeof text, W ", \"description\": \"%sd\"}", desc);
    T_CHECK(spec_rejects(text, ERR_INVALID, "description", "0 to 4096"));
    /* Length counts characters: 4096 two-byte characters are fine. */
    json_t *obj = json_pack("{s:s}", "workload", "collective");
    char *wide = malloc(2 * 4096 + 1);
    for (int i = 0; i < 4096; i++)
        memcpy(wide + 2 * i, "\xc3\xa9", 2);
    wide[2 * 4096] = '\0';
    json_object_set_new(obj, "description", json_string(wide));
    free(wide);
    s = spec_normalize(obj, &e);
    json_decref(obj);
    T_CHECK_MSG(s, "%s", e.msg);
    json_decref(s);
}

static void test_spec_rejects_bad_documents(void)
{
    T_CHECK(spec_rejects("[1, 2]", ERR_INVALID, "", "must be a JSON object, got [1,2]"));
    T_CHECK(spec_rejects("\"x\"", ERR_INVALID, "", "invalid JSON"));
    T_CHECK(spec_rejects("", ERR_INVALID, "", "invalid JSON at line"));
    T_CHECK(spec_rejects("{\"workload\": \"collective\",\n  \"iters\": }", ERR_INVALID, "",
                         "invalid JSON at line 2, column"));
    T_CHECK(spec_rejects(W ", \"world_size\": 2, \"world_size\": 3}", ERR_INVALID, "",
                         "duplicate"));
    T_CHECK(spec_rejects("\x01\x02\xff", ERR_INVALID, "", "invalid JSON"));
    T_CHECK(spec_rejects(W "} trailing", ERR_INVALID, "", "invalid JSON"));

    struct err e;
    json_t *arr = json_array();
    T_CHECK(!spec_normalize(arr, &e));
    T_EQ_INT(e.code, ERR_INVALID);
    json_decref(arr);
    T_CHECK(!spec_normalize(NULL, &e));
    T_EQ_INT(e.code, ERR_INVALID);
}

static void test_spec_too_large(void)
{
    size_t n = SPEC_MAX_BODY + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    memcpy(big, W "}", strlen(W "}"));
    struct err e = {0};
    T_CHECK(!spec_parse(big, n, &e));
    T_EQ_INT(e.code, ERR_TOO_LARGE);
    /* The same body one byte shorter is just JSON followed by blanks. */
    json_t *s = spec_parse(big, n - 1, &e);
    T_CHECK_MSG(s, "%s", e.msg);
    json_decref(s);
    free(big);
}

/* --- sizes --------------------------------------------------------------------------- */

static void test_spec_parse_size(void)
{
    static const struct {
        const char *text;
        int64_t want; /* -1: rejected */
    } cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"4K", 4096},
        {"4k", 4096},
        {"4KB", 4096},
        {"4KiB", 4096},
        {"4kib", 4096},
        {"64M", 64 << 20},
        {"1G", 1 << 30},
        {"2g", INT64_C(2) << 30},
        {"1T", INT64_C(1) << 40},
        {"4096B", 4096},
        {"4096b", 4096},
        {"007", 7},
        {"", -1},
        {"K", -1},
        {"4X", -1},
        {"4.5K", -1},
        {"-1", -1},
        {" 4K", -1},
        {"4K ", -1},
        {"4KiBB", -1},
        {"4iB", -1},
        {"4Ki", -1},
        {"4BK", -1},
        {"1e3", -1},
        {"0x10", -1},
        {"+4", -1},
        {"99999999999999999999", -1},
        {"9999999999999T", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct err e = {0};
        int64_t got = -7;
        json_t *v = json_string(cases[i].text);
        int rc = spec_parse_size(v, &got, &e);
        json_decref(v);
        if (cases[i].want < 0) {
            T_CHECK_MSG(rc < 0 && e.code == ERR_INVALID, "\"%s\" accepted", cases[i].text);
            T_CHECK_MSG(got == -7, "\"%s\" wrote a value", cases[i].text);
        } else {
            T_CHECK_MSG(rc == 0 && got == cases[i].want, "\"%s\": rc %d got %lld (%s)",
                        cases[i].text, rc, (long long)got, e.msg);
        }
    }
    struct err e;
    int64_t got;
    json_t *v = json_integer(12345);
    T_OK(spec_parse_size(v, &got, &e));
    T_EQ_INT(got, 12345);
    json_decref(v);
    json_t *bad[] = {json_integer(-1), json_real(4.0), json_true(), json_null(), json_object()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        T_CHECK_MSG(spec_parse_size(bad[i], &got, &e) < 0, "value %zu accepted", i);
        json_decref(bad[i]);
    }
    T_CHECK(spec_parse_size(NULL, &got, &e) < 0);
}

static void test_spec_sizes_in_spec(void)
{
    json_t *s = parse_ok(W ", \"min_bytes\": \"64KiB\", \"max_bytes\": \"1g\", "
                           "\"sweep\": {\"min_bytes\": [\"1K\", 8192, \"1M\"]}}");
    T_CHECK(s);
    T_EQ_INT(get_int(s, "min_bytes"), 65536);
    T_EQ_INT(get_int(s, "max_bytes"), 1 << 30);
    json_t *sw = json_object_get(json_object_get(s, "sweep"), "min_bytes");
    T_EQ_INT(json_array_size(sw), 3);
    T_EQ_INT(json_integer_value(json_array_get(sw, 0)), 1024);
    T_EQ_INT(json_integer_value(json_array_get(sw, 1)), 8192);
    T_EQ_INT(json_integer_value(json_array_get(sw, 2)), 1 << 20);
    json_decref(s);
}

/* --- sweeps -------------------------------------------------------------------------- */

static void test_spec_sweep_errors(void)
{
    static const struct bad_case cases[] = {
        {W ", \"sweep\": [1]}", "sweep", "sweep: must be an object"},
        {W ", \"sweep\": {\"bogus\": [1]}}", "sweep.bogus",
         "sweep.bogus: unknown field; sweepable fields: device, backend, launcher, mpi, "
         "transport, world_size"},
        {W ", \"sweep\": {\"name\": [\"a\", \"b\"]}}", "sweep.name",
         "sweep.name: cannot be swept"},
        {W ", \"sweep\": {\"description\": [\"a\"]}}", "sweep.description", "cannot be swept"},
        {W ", \"sweep\": {\"workload\": [\"collective\"]}}", "sweep.workload",
         "cannot be swept"},
        {W ", \"sweep\": {\"sweep\": [{}]}}", "sweep.sweep", "unknown field"},
        {W ", \"sweep\": {\"world_size\": 2}}", "sweep.world_size",
         "must be a non-empty array of at most 64 values, got 2"},
        {W ", \"sweep\": {\"world_size\": []}}", "sweep.world_size", "non-empty array"},
        {W ", \"sweep\": {\"world_size\": [1, 2, 0]}}", "sweep.world_size[2]",
         "sweep.world_size[2]: must be an integer from 1 to 1024, got 0"},
        {W ", \"sweep\": {\"world_size\": [1, 2.0]}}", "sweep.world_size[1]", "got 2.0"},
        {W ", \"sweep\": {\"world_size\": [1, 2, 1]}}", "sweep.world_size[2]",
         "1 is already listed at [0]"},
        {W ", \"sweep\": {\"min_bytes\": [\"4K\", 4096]}}", "sweep.min_bytes[1]",
         "already listed"},
        {W ", \"sweep\": {\"dtype\": [\"float32\", \"float33\"]}}", "sweep.dtype[1]",
         "got \"float33\""},
        {W ", \"sweep\": {\"check\": [true, 0]}}", "sweep.check[1]", "true or false"},
        {W ", \"sweep\": {\"min_bytes\": [\"4X\"]}}", "sweep.min_bytes[0]", "must be a size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    /* 65 values is one too many. */
    char text[1024];
    int n = snprintf(text, sizeof text, "%s", W ", \"sweep\": {\"iters\": [1");
    for (int i = 2; i <= 65; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, ", %d", i);
    snprintf(text + n, sizeof text - (size_t)n, "]}}");
    T_CHECK(spec_rejects(text, ERR_INVALID, "sweep.iters", "at most 64 values"));
}

static void test_spec_sweep_expand_order(void)
{
    struct err e;
    json_t *s = parse_ok(W ", \"world_size\": 8, \"sweep\": {\"world_size\": [1, 2, 4], "
                           "\"algorithm\": [\"auto\", \"ring\"]}}");
    T_CHECK(s);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 6);
    static const int ws[] = {1, 1, 2, 2, 4, 4};
    static const char *alg[] = {"auto", "ring", "auto", "ring", "auto", "ring"};
    for (size_t i = 0; i < 6; i++) {
        json_t *run = json_array_get(runs, i);
        json_t *params = json_object_get(run, "params"), *spec = json_object_get(run, "spec");
        T_EQ_INT(json_object_size(run), 2);
        T_EQ_INT(json_object_size(params), 2);
        /* params list fields in sweep order */
        T_EQ_STR(json_object_iter_key(json_object_iter(params)), "world_size");
        T_EQ_INT(get_int(params, "world_size"), ws[i]);
        T_EQ_STR(get_str(params, "algorithm"), alg[i]);
        T_EQ_INT(get_int(spec, "world_size"), ws[i]);
        T_EQ_STR(get_str(spec, "algorithm"), alg[i]);
        T_CHECK(!json_object_get(spec, "sweep"));
        T_EQ_INT(get_int(spec, "iters"), 20);
        struct spec sp;
        T_OK(spec_from_json(spec, &sp, &e));
        T_EQ_INT(sp.world_size, ws[i]);
        T_EQ_STR(sp.coll.algorithm, alg[i]);
    }
    json_decref(runs);
    /* the expansion limit is the caller's */
    T_CHECK(!spec_expand(s, 5, &e));
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "sweep");
    T_CHECK_MSG(strstr(e.msg, "6 runs, more than the limit of 5"), "%s", e.msg);
    runs = spec_expand(s, 6, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    json_decref(runs);
    json_decref(s);
}

static void test_spec_expand_without_sweep(void)
{
    struct err e;
    json_t *s = parse_ok(W ", \"world_size\": 2}");
    T_CHECK(s);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 1);
    json_t *run = json_array_get(runs, 0);
    T_EQ_INT(json_object_size(json_object_get(run, "params")), 0);
    T_CHECK(json_equal(json_object_get(run, "spec"), s));
    json_decref(runs);
    /* an empty sweep is one run too */
    json_t *t = parse_ok(W ", \"sweep\": {}}");
    T_CHECK(t);
    runs = spec_expand(t, 1, &e);
    T_CHECK_MSG(runs && json_array_size(runs) == 1, "%s", e.msg);
    json_decref(runs);
    json_decref(t);
    /* expand re-validates what it is given */
    json_object_set_new(s, "iters", json_integer(0));
    T_CHECK(!spec_expand(s, SPEC_MAX_RUNS, &e));
    T_EQ_STR(e.field, "iters");
    json_decref(s);
}

static void test_spec_sweep_product_limit(void)
{
    char text[2048];
    int n = snprintf(text, sizeof text, "%s", W ", \"sweep\": {\"world_size\": [1");
    for (int i = 2; i <= 16; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, ", %d", i);
    n += snprintf(text + n, sizeof text - (size_t)n, "], \"iters\": [1");
    for (int i = 2; i <= 16; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, ", %d", i);
    /* 16 * 16 * 4 = 1024 is the limit itself ... */
    char ok[2200];
    snprintf(ok, sizeof ok, "%s], \"warmup\": [0, 1, 2, 3]}}", text);
    struct err e;
    json_t *s = parse_ok(ok);
    T_CHECK(s);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 1024);
    json_t *last = json_object_get(json_array_get(runs, 1023), "params");
    T_EQ_INT(get_int(last, "world_size"), 16);
    T_EQ_INT(get_int(last, "iters"), 16);
    T_EQ_INT(get_int(last, "warmup"), 3);
    json_decref(runs);
    json_decref(s);
    /* ... and 16 * 16 * 5 = 1280 is over it. */
    snprintf(ok, sizeof ok, "%s], \"warmup\": [0, 1, 2, 3, 4]}}", text);
    T_CHECK(spec_rejects(ok, ERR_INVALID, "sweep", "expands to 1280 runs"));
}

static void test_spec_sweep_point_rule(void)
{
    /* The top level is fine (4K <= 64M) but the second point has max_bytes 1024. */
    struct err e;
    const char *text = W ", \"min_bytes\": \"4K\", \"sweep\": {\"world_size\": [1, 2], "
                         "\"max_bytes\": [\"1M\", 1024]}}";
    T_CHECK(!parse_text(text, &e));
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "sweep");
    T_CHECK_MSG(strstr(e.msg, "sweep point 2 of 4 {\"world_size\":1,\"max_bytes\":1024}: "
                              "min_bytes (4096) must not exceed max_bytes (1024)"),
                "%s", e.msg);
    /* a swept 0 factor leaves neither factor nor step */
    T_CHECK(spec_rejects(W ", \"sweep\": {\"factor\": [2, 0]}}", ERR_INVALID, "sweep",
                         "sweep point 2 of 2 {\"factor\":0}: one of factor and step must be "
                         "non-zero"));
    /* A top-level rule on a swept field is judged at the points only: max_bytes 1K with
     * the default min_bytes 4K is fine when min_bytes is swept below it. */
    json_t *s = parse_ok(W ", \"max_bytes\": \"1K\", \"sweep\": {\"min_bytes\": [512, "
                           "1024]}}");
    T_CHECK(s);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs && json_array_size(runs) == 2, "%s", e.msg);
    json_decref(runs);
    json_decref(s);
}

/* --- struct spec and sizes ----------------------------------------------------------- */

#define TR "{\"workload\": \"train\""

/* --- zip: fields that vary together (issue 33) ------------------------------------------ */

#define ZIP_ES                                                                                 \
    "\"zip\": [{\"engine\": \"ddpbench\", \"strategy\": \"ddp\"}, {\"engine\": \"ddpbench\", " \
    "\"strategy\": \"horovod\"}]"

/* A zip's points cross the rest of the sweep (zip's place in the odometer, last fastest);
 * each run's params carry the zipped fields by name (never "zip") and its spec has them. */
static void test_spec_sweep_zip_expand(void)
{
    struct err e = {0};
    json_t *s = parse_ok(TR ", \"sweep\": {" ZIP_ES ", \"world_size\": [1, 2]}}");
    T_CHECK(s);
    json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 4);
    static const char *strat[] = {"ddp", "ddp", "horovod", "horovod"};
    static const int ws[] = {1, 2, 1, 2};
    for (size_t i = 0; runs && i < 4; i++) {
        json_t *params = json_object_get(json_array_get(runs, i), "params");
        json_t *spec = json_object_get(json_array_get(runs, i), "spec");
        T_EQ_INT(json_object_size(params), 3);
        T_CHECK(!json_object_get(params, "zip"));
        T_EQ_STR(json_object_iter_key(json_object_iter(params)), "engine");
        T_EQ_STR(get_str(params, "engine"), "ddpbench");
        T_EQ_STR(get_str(params, "strategy"), strat[i]);
        T_EQ_INT(get_int(params, "world_size"), ws[i]);
        T_EQ_STR(get_str(spec, "strategy"), strat[i]);
        T_EQ_INT(get_int(spec, "world_size"), ws[i]);
        struct spec sp;
        T_OK(spec_from_json(spec, &sp, &e));
        T_EQ_STR(sp.train.strategy, strat[i]);
    }
    json_decref(runs);
    /* a zip counts its points against the limit like any list */
    T_CHECK(s && !spec_expand(s, 3, &e));
    T_EQ_STR(e.field, "sweep");
    T_CHECK_MSG(strstr(e.msg, "4 runs, more than the limit of 3"), "%s", e.msg);
    /* normalizing again keeps the zip as it is */
    char *text = s ? json_dumps(s, JSON_COMPACT) : NULL;
    json_t *again = text ? parse_ok(text) : NULL;
    T_CHECK(again && json_equal(again, s));
    free(text);
    json_decref(again);
    json_decref(s);
}

/* Each refusal names the point and its field (sweep.zip[i].field). */
static void test_spec_sweep_zip_refused(void)
{
    static const struct {
        const char *text, *field, *part;
    } cases[] = {
        {TR ", \"sweep\": {\"zip\": {}}}", "sweep.zip", "non-empty array"},
        {TR ", \"sweep\": {\"zip\": []}}", "sweep.zip", "non-empty array"},
        {TR ", \"sweep\": {\"zip\": [{\"engine\": \"ddpbench\"}, 3]}}", "sweep.zip[1]",
         "must be a non-empty object"},
        {TR ", \"sweep\": {\"zip\": [{}]}}", "sweep.zip[0]", "must be a non-empty object"},
        /* the same set of fields in every point */
        {TR ", \"sweep\": {\"zip\": [{\"engine\": \"ddpbench\", \"strategy\": \"ddp\"}, "
            "{\"engine\": \"pytorch\"}]}}",
         "sweep.zip[1].strategy", "is missing"},
        {TR ", \"sweep\": {\"zip\": [{\"engine\": \"ddpbench\"}, {\"engine\": \"pytorch\", "
            "\"strategy\": \"ddp\"}]}}",
         "sweep.zip[1].strategy", "sweep.zip[0] does not name it"},
        /* each value as the field's own list would take it */
        {TR ", \"sweep\": {\"zip\": [{\"engine\": \"ddpbench\", \"strategy\": \"ddp\"}, "
            "{\"engine\": \"ddpbench\", \"strategy\": \"bogus\"}]}}",
         "sweep.zip[1].strategy", "sweep.zip[1].strategy: must be one of"},
        {TR ", \"sweep\": {\"zip\": [{\"bogus\": 1}]}}", "sweep.zip[0].bogus", "unknown field"},
        {TR ", \"sweep\": {\"zip\": [{\"name\": \"a\"}]}}", "sweep.zip[0].name",
         "cannot be swept"},
        {TR ", \"sweep\": {\"zip\": [{\"world_size\": 1}, {\"world_size\": 1}]}}",
         "sweep.zip[1]", "the same point as sweep.zip[0]"},
        /* a field is zipped or swept, not both */
        {TR ", \"sweep\": {" ZIP_ES ", \"strategy\": [\"ddp\"]}}", "sweep.strategy",
         "both zipped"},
        {TR ", \"sweep\": {\"strategy\": [\"ddp\"], " ZIP_ES "}}", "sweep.strategy",
         "both zipped"},
        /* a point the cross-field rules refuse names its zip point's field */
        {TR ", \"sweep\": {\"zip\": [{\"engine\": \"ddpbench\", \"strategy\": \"ddp\"}, "
            "{\"engine\": \"pytorch\", \"strategy\": \"horovod\"}], \"world_size\": [1, 2]}}",
         "sweep.zip[1].strategy", "sweep point 3 of 4"},
    };
    SPEC_REJECTS_ALL(cases);
    /* a top-level value the zip replaces is not judged at the top: only the points are */
    static const char *const fine[] = {
        TR ", \"engine\": \"pytorch\", \"strategy\": \"horovod\", \"sweep\": {" ZIP_ES "}}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
}

static void test_spec_train_defaults_and_struct(void)
{
    struct err e;
    json_t *s = parse_text(TR ", \"model\": \"resnet18\", \"world_size\": 2, "
                              "\"epochs\": 3, \"threads\": 2, \"dataset\": {\"name\": "
                              "\"cifar10\", \"augment\": true}, \"optimizer\": {\"type\": "
                              "\"sgd\", \"lr\": 1, \"momentum\": 0.9, \"nesterov\": true}, "
                              "\"lr_schedule\": {\"decay\": \"cosine\"}}",
                           &e);
    T_CHECK_MSG(s, "%s", e.msg);
    /* every nested field present after normalization; numbers as reals */
    T_CHECK(json_is_real(json_object_get(json_object_get(s, "optimizer"), "lr")));
    T_EQ_INT(json_integer_value(json_object_get(s, "steps")), 0); /* epochs given */
    T_EQ_STR(json_string_value(json_object_get(json_object_get(s, "dataset"), "path")), "");
    T_CHECK(!json_object_get(s, "op")); /* collective fields are not a train spec's */
    struct spec sp;
    memset(&sp, 0x5a, sizeof sp);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.workload, SPEC_WORKLOAD_TRAIN);
    T_EQ_STR(sp.train.model, "resnet18");
    T_EQ_STR(sp.train.strategy, "ddp");
    T_EQ_STR(sp.train.engine, "ddpbench"); /* the default: today's C worker */
    T_EQ_INT(sp.train.epochs, 3);
    T_EQ_INT(sp.train.steps, 0);
    T_EQ_INT(sp.train.threads, 2);
    T_EQ_INT(sp.train.batch_size, 32);
    T_EQ_INT(sp.train.bucket_mb, 25);
    T_EQ_STR(sp.train.dataset.name, "cifar10");
    T_CHECK(sp.train.dataset.augment);
    T_EQ_INT(sp.train.dataset.shape.n, 0);
    T_EQ_STR(sp.train.optimizer.type, "sgd");
    T_CHECK(sp.train.optimizer.lr == 1.0);
    T_CHECK(sp.train.optimizer.momentum == 0.9);
    T_CHECK(sp.train.optimizer.nesterov);
    T_CHECK(sp.train.optimizer.eps == 1e-8);
    T_EQ_STR(sp.train.lr_schedule.decay, "cosine");
    T_CHECK(sp.train.cycle_ms == 1.0);
    T_EQ_INT(spec_slots_per_rank(s), 2);
    T_EQ_INT(spec_rank_slots(&sp), 2);
    /* normalizing a normalized spec is the identity */
    json_t *again = spec_normalize(s, &e);
    T_CHECK(again && json_equal(again, s));
    json_decref(again);
    json_decref(s);
    s = parse_text(TR ", \"dataset\": {\"shape\": [3, 64, 48]}}", &e);
    T_CHECK_MSG(s, "%s", e.msg);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.train.dataset.shape.n, 3);
    T_EQ_INT(sp.train.dataset.shape.dims[2], 48);
    T_EQ_INT(sp.train.steps, 100);
    T_EQ_INT(spec_slots_per_rank(s), 1);
    T_EQ_INT(spec_rank_slots(&sp), 1);
    json_decref(s);
}

static void test_spec_train_rejects(void)
{
    static const struct bad_case cases[] = {
        {TR ", \"model\": \"resnet19\"}", "model", "must be one of \"mnist-cnn\""},
        {TR ", \"dataset\": \"mnist\"}", "dataset", "must be an object of dataset.* fields"},
        {TR ", \"dataset\": {\"nmae\": \"mnist\"}}", "dataset.nmae", "unknown field"},
        {TR ", \"dataset\": {\"name\": \"imagenet\"}}", "dataset.name", "got \"imagenet\""},
        {TR ", \"dataset\": {\"shape\": [3, 32]}}", "dataset.shape",
         "[channels, height, width]"},
        {TR ", \"dataset\": {\"shape\": [3, 0, 32]}}", "dataset.shape", "from 1 to 4096"},
        {TR ", \"optimizer\": {\"lr\": 0}}", "optimizer.lr", "a number greater than 0"},
        {TR ", \"optimizer\": {\"lr\": \"0.1\"}}", "optimizer.lr", "got \"0.1\""},
        {TR ", \"optimizer\": {\"momentum\": 1.5}}", "optimizer.momentum", "at most"},
        {TR ", \"optimizer\": {\"type\": \"lamb\"}}", "optimizer.type", "\"sgd\", \"adam\""},
        {TR ", \"steps\": 10, \"epochs\": 2}", "epochs", "mutually exclusive"},
        {TR ", \"batch_size\": 0}", "batch_size", "from 1 to 65536"},
        {TR ", \"threads\": 257}", "threads", "from 1 to 256"},
        {TR ", \"strategy\": \"fsdp\"}", "strategy", "\"zero2\""},
        {TR ", \"min_bytes\": \"4K\"}", "min_bytes", "not a field of this workload"},
        {W ", \"model\": \"resnet18\"}", "model", "not a field of this workload"},
        {W ", \"optimizer\": {\"lr\": 0.1}}", "optimizer.lr", "not a field of this workload"},
        {TR ", \"sweep\": {\"optimizer.lr\": [0.1, -1]}}", "sweep.optimizer.lr[1]",
         "greater than 0"},
        {TR ", \"sweep\": {\"dataset.path\": [\"/a\", \"/b\"]}}", "sweep.dataset.path",
         "cannot be swept"},
        {TR ", \"sweep\": {\"dataset\": [{}]}}", "sweep.dataset", "unknown field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
}

/* Transformers take tokens on the CPU engine, CNNs images; seq_len belongs to the first
 * and fits the model's positions; a text dataset names its file. The resolved spec keeps
 * seq_len, the memory estimate counts tokens, the vocabulary and the attention matrices. */
static void test_spec_transformer_rules(void)
{
#define GT TR ", \"model\": \"gpt2-tiny\""
    static const struct bad_case cases[] = {
        {GT ", \"dataset\": {\"name\": \"cifar10\"}}", "dataset.name", "trains on tokens"},
        {TR ", \"dataset\": {\"name\": \"text\", \"path\": \"/a\"}}", "dataset.name",
         "token data"},
        {GT ", \"dataset\": {\"name\": \"text\"}}", "dataset.path", "needs the file"},
        {GT ", \"seq_len\": 129}", "seq_len", "128 positions"},
        {TR ", \"seq_len\": 16}", "seq_len", "for the gpt2 models"},
        {GT ", \"device\": \"cuda\", \"backend\": \"nccl\"}", "model", "CPU engine only"},
        {GT ", \"seq_len\": -1}", "seq_len", "from 0 to 4096"},
        {GT ", \"sweep\": {\"seq_len\": [64, 256]}}", "sweep", "128 positions"},
        /* ddpbench's GPU runner has no concat: Inception V3 is the CPU engine's there */
        {TR ", \"model\": \"inception-v3\", \"device\": \"cuda\", \"backend\": \"nccl\"}",
         "model", "device cpu only with engine ddpbench"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    json_t *inc = parse_ok(TR ", \"model\": \"inception-v3\", \"engine\": \"pytorch\", "
                              "\"device\": \"cuda\", \"backend\": \"nccl\"}");
    T_CHECK_MSG(inc != NULL, "a framework engine trains inception-v3 on a GPU");
    json_decref(inc);
    json_t *s = parse_ok(GT ", \"seq_len\": 64, \"batch_size\": 8, \"prefetch\": 0, "
                            "\"dataset\": {\"name\": \"text\", \"path\": \"/tmp/x.txt\"}}");
    T_CHECK(s);
    struct spec sp;
    struct err e;
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.train.seq_len, 64);
    struct spec_memory m;
    T_OK(spec_memory_estimate(s, &m));
    json_decref(s);
    const struct model_info *mi = model_table_find("gpt2-tiny");
    double p = model_table_params(mi, 1, 1, 64, 256); /* bytes: the row's vocabulary */
    T_NEAR(p, 124672, 0.5);
    T_NEAR(m.params, 4 * p, 0.5);
    /* tensors linear in tokens (2689 floats a token), plus 2 blocks x 4 heads x 64^2 */
    T_NEAR(m.activations, 8.0 * 8 * (2689.0 * 64 + 2 * 4 * 64 * 64), 0.5);
    T_NEAR(m.data, 1.0 * 8 * 4 * 64, 0.5);
    /* gpt2-small at its 1024 positions and batch 4096 is refused naming batch_size */
    T_CHECK(spec_rejects(TR ", \"model\": \"gpt2-small\", \"batch_size\": 4096}", ERR_INVALID,
                         "batch_size", "batch_size or seq_len"));
#undef GT
}

/* Pipelines: stages divide the world, micro-batches the batch, no accumulate on top, the
 * C engine's CPU path, and no ZeRO with gpt2's tie across stages; the struct keeps them. */
static void test_spec_pipeline_rules(void)
{
#define G TR ", \"model\": \"gpt2-tiny\""
#define PP G ", \"world_size\": 4, \"pipeline\": 2"
    static const struct bad_case cases[] = {
        {G ", \"world_size\": 3, \"pipeline\": 2}", "world_size", "not a multiple of pipeline"},
        {PP ", \"micro_batches\": 3}", "micro_batches", "do not divide batch_size"},
        {TR ", \"micro_batches\": 2}", "micro_batches", "for pipeline runs"},
        {PP ", \"accumulate\": 2}", "accumulate", "accumulate must be 1"},
        {PP ", \"strategy\": \"zero2\"}", "strategy", "tied embedding"},
        {PP ", \"device\": \"cuda\", \"backend\": \"nccl\"}", "model", "CPU engine only"},
        {TR ", \"world_size\": 2, \"pipeline\": 2, \"engine\": \"pytorch\"}", "pipeline",
         "ddpbench's own CPU engine"},
        {PP ", \"schedule\": \"interleaved\"}", "schedule", "\"gpipe\""},
        {G ", \"world_size\": 4, \"pipeline\": 65}", "pipeline", "from 1 to 64"},
        {PP ", \"sweep\": {\"micro_batches\": [2, 5]}}", "sweep", "do not divide"},
        {PP ", \"pipeline_split\": \"a,b\"}", "pipeline_split", "1 layers after the first; 2"},
        {G ", \"pipeline_split\": \"a\"}", "pipeline_split", "for pipeline runs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    json_t *s = parse_ok(PP ", \"micro_batches\": 4, \"schedule\": \"gpipe\", "
                            "\"strategy\": \"ddp\"}");
    T_CHECK(s);
    struct spec sp;
    struct err e;
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.train.pipeline, 2);
    T_EQ_INT(sp.train.micro_batches, 4);
    T_EQ_STR(sp.train.schedule, "gpipe");
    json_decref(s);
    /* resnet18 has no tie: ZeRO is fine there */
    s = parse_ok(TR ", \"model\": \"resnet18-cifar\", \"world_size\": 4, \"pipeline\": 2, "
                    "\"strategy\": \"zero1\"}");
    T_CHECK(s);
    json_decref(s);
#undef PP
#undef G
}

/* dataset.workers: 1 by default, 1 to 16, sweepable, and more than one needs prefetch >= 1
 * (rule (8)), at the top and at every point of a sweep; the struct and the memory estimate
 * (a ring of max(prefetch, workers) + 1 batches) follow it. */
static void test_spec_dataset_workers(void)
{
    static const struct bad_case cases[] = {
        {TR ", \"dataset\": {\"workers\": 0}}", "dataset.workers", "from 1 to 16"},
        {TR ", \"dataset\": {\"workers\": 17}}", "dataset.workers", "from 1 to 16"},
        {TR ", \"prefetch\": 0, \"dataset\": {\"workers\": 2}}", "dataset.workers",
         "need prefetch >= 1"},
        {TR ", \"prefetch\": 0, \"sweep\": {\"dataset.workers\": [1, 3]}}", "sweep",
         "need prefetch >= 1"},
        {TR ", \"dataset\": {\"workers\": 4}, \"sweep\": {\"prefetch\": [2, 0]}}", "sweep",
         "need prefetch >= 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    struct spec sp;
    struct err e;
    json_t *s = parse_ok(TR "}");
    T_CHECK(s);
    T_EQ_INT(get_int(json_object_get(s, "dataset"), "workers"), 1);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.train.dataset.workers, 1);
    json_decref(s);
    /* one worker inline is fine; several with a ring, swept */
    s = parse_ok(TR ", \"prefetch\": 0, \"dataset\": {\"workers\": 1}}");
    T_CHECK(s);
    json_decref(s);
    s = parse_ok(TR ", \"prefetch\": 1, \"sweep\": {\"dataset.workers\": [1, 3, 16]}}");
    T_CHECK(s);
    json_decref(s);
    s = parse_ok(TR ", \"model\": \"resnet50\", \"batch_size\": 32, \"prefetch\": 2, "
                    "\"dataset\": {\"workers\": 5}}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(sp.train.dataset.workers, 5);
    struct spec_memory m;
    T_OK(spec_memory_estimate(s, &m));
    T_NEAR(m.data, 6.0 * 32 * 4 * 3 * 224 * 224, 0.5);
    json_decref(s);
}

/* The data pipeline's fields (format, storage, its custom figures, cold, pin, loader_only):
 * defaults, the struct, and rule (8)'s storage half at the top and at every sweep point. */
static void test_spec_data_pipeline(void)
{
    static const struct bad_case cases[] = {
        {TR ", \"dataset\": {\"format\": \"parquet\"}}", "dataset.format", "tfrecord"},
        {TR ", \"dataset\": {\"storage\": \"s3\"}}", "dataset.storage", "custom"},
        {TR ", \"dataset\": {\"storage\": \"custom\", \"read_mbps\": -1}}", "dataset.read_mbps",
         ""},
        {TR ", \"dataset\": {\"read_mbps\": 100}}", "dataset.read_mbps",
         "custom storage's figure; dataset.storage \"local\" has its own"},
        {TR ", \"dataset\": {\"storage\": \"nfs\", \"read_concurrency\": 4}}",
         "dataset.read_concurrency", "dataset.storage \"nfs\" has its own"},
        {TR ", \"dataset\": {\"name\": \"cifar10\", \"storage\": \"nfs\"}}", "dataset.storage",
         "format native reads cifar10 whole at start"},
        {TR ", \"dataset\": {\"name\": \"cifar10\", \"format\": \"records\"}, "
            "\"sweep\": {\"dataset.format\": [\"records\", \"native\"], "
            "\"dataset.storage\": [\"local\", \"blob\"]}}",
         "sweep", "choose a file-backed dataset.format"},
        {TR ", \"loader_only\": 1}", "loader_only", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    struct spec sp;
    struct err e;
    json_t *s = parse_ok(TR "}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.train.dataset.format, "native");
    T_EQ_STR(sp.train.dataset.storage, "local");
    T_CHECK(!sp.train.dataset.cold && !sp.train.dataset.pin && !sp.train.loader_only);
    json_decref(s);
    s = parse_ok(TR ", \"loader_only\": true, \"dataset\": {\"name\": \"cifar10\", "
                    "\"format\": \"records-zstd\", \"storage\": \"custom\", \"read_mbps\": "
                    "100, \"read_latency_ms\": 0.5, \"read_concurrency\": 4, \"cold\": true, "
                    "\"pin\": true}}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.train.dataset.format, "records-zstd");
    T_EQ_STR(sp.train.dataset.storage, "custom");
    T_NEAR(sp.train.dataset.read_mbps, 100, 0);
    T_NEAR(sp.train.dataset.read_latency_ms, 0.5, 0);
    T_EQ_INT(sp.train.dataset.read_concurrency, 4);
    T_CHECK(sp.train.dataset.cold && sp.train.dataset.pin && sp.train.loader_only);
    json_decref(s);
    /* the issue's sweep: formats x storages x workers; synthetic ignores both */
    s = parse_ok(TR ", \"dataset\": {\"name\": \"cifar10\", \"format\": \"files-jpeg\"}, "
                    "\"sweep\": {\"dataset.format\": [\"files-jpeg\", \"records\"], "
                    "\"dataset.storage\": [\"local\", \"nfs\"], \"dataset.workers\": [1, 2, "
                    "4], \"loader_only\": [true, false]}}");
    T_CHECK(s);
    json_decref(s);
    s = parse_ok(TR ", \"dataset\": {\"storage\": \"blob\"}}");
    T_CHECK(s);
    json_decref(s);
    /* TensorFlow's TFRecord: a file-backed format, so a capped storage reads through it */
    s = parse_ok(TR ", \"dataset\": {\"name\": \"cifar10\", \"format\": \"tfrecord\", "
                    "\"storage\": \"nfs\"}}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.train.dataset.format, "tfrecord");
    json_decref(s);
}

/* The framework engines' data pipeline (issue 34): the converted image formats on every
 * storage, loader_only where the adapter owns its loop; ddpbench's record shards and
 * DeepSpeed's and Lightning's loader_only refused naming the field and the reason. */
static void test_spec_framework_data(void)
{
#define FW TR ", \"dataset\": {\"name\": \"cifar10\", "
    static const struct bad_case cases[] = {
        {FW "\"format\": \"records-zstd\"}, \"engine\": \"pytorch\"}", "dataset.format",
         "ddpbench's own shard format"},
        {FW "\"format\": \"files-jpeg\"}, \"engine\": \"pytorch\", "
            "\"sweep\": {\"dataset.format\": [\"files-jpeg\", \"records-jpeg\"]}}",
         "sweep", "ddpbench's own shard format"},
        {FW "\"format\": \"files-jpeg\"}, \"engine\": \"deepspeed\", \"strategy\": "
            "\"zero1\", \"loader_only\": true}",
         "loader_only", "deepspeed.initialize"},
        {FW "\"format\": \"files-jpeg\"}, \"engine\": \"lightning\", \"loader_only\": true}",
         "loader_only", "Lightning's Trainer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    static const char *const ok[] = {
        FW "\"format\": \"files-jpeg\", \"storage\": \"nfs\"}, \"engine\": \"pytorch\", "
           "\"loader_only\": true}",
        FW "\"format\": \"files-png\", \"storage\": \"blob\"}, \"engine\": \"tensorflow\"}",
        FW "\"format\": \"tfrecord\", \"storage\": \"nfs\"}, \"engine\": \"pytorch\"}",
        FW "\"format\": \"files-jpeg\"}, \"engine\": \"horovod\", \"strategy\": \"horovod\", "
           "\"loader_only\": true}",
        FW "\"format\": \"files-png\", \"storage\": \"custom\", \"read_mbps\": 50}, "
           "\"engine\": \"deepspeed\", \"strategy\": \"zero1\"}",
    };
#undef FW
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        json_t *s = parse_ok(ok[i]);
        T_CHECK_MSG(s != NULL, "ok %zu", i);
        json_decref(s);
    }
}

/* dataset.storage_layer (issue 34): its default, the engines that take in_process, where
 * nothing is read while training (refused naming the field), and the layer each spec
 * resolves to (common/spec_storage.c), from the json and from the parsed struct alike. */
static void test_spec_storage_layer(void)
{
#define SL_CIFAR TR ", \"dataset\": {\"name\": \"cifar10\", \"format\": \"files-jpeg\""
    static const struct bad_case cases[] = {
        {TR ", \"engine\": \"pytorch\", \"dataset\": {\"storage_layer\": \"in_process\"}}",
         "dataset.storage_layer", "in_process is ddpbench's C loader's"},
        {TR ", \"engine\": \"lightning\", \"dataset\": {\"storage_layer\": \"in_process\"}}",
         "dataset.storage_layer", "this engine reads through the mount"},
        {TR ", \"dataset\": {\"storage_layer\": \"mount\"}}", "dataset.storage_layer",
         "synthetic reads nothing then"},
        {TR ", \"dataset\": {\"name\": \"cifar10\", \"storage_layer\": \"in_process\"}}",
         "dataset.storage_layer", "format native reads the set whole at start"},
        {TR ", \"dataset\": {\"storage_layer\": \"disk\"}}", "dataset.storage_layer", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
    static const struct {
        const char *text;
        enum spec_storage_layer want;
    } layers[] = {
        {TR "}", SPEC_STORAGE_NONE},
        {TR ", \"dataset\": {\"name\": \"cifar10\"}}", SPEC_STORAGE_NONE},
        {SL_CIFAR "}}", SPEC_STORAGE_NONE},
        {SL_CIFAR ", \"storage\": \"nfs\"}}", SPEC_STORAGE_MOUNT},
        {SL_CIFAR ", \"storage\": \"blob\"}}", SPEC_STORAGE_MOUNT},
        {SL_CIFAR ", \"storage\": \"custom\"}}", SPEC_STORAGE_NONE},
        {SL_CIFAR ", \"storage\": \"custom\", \"read_latency_ms\": 1}}", SPEC_STORAGE_MOUNT},
        {SL_CIFAR ", \"cold\": true}}", SPEC_STORAGE_MOUNT},
        {SL_CIFAR ", \"storage_layer\": \"mount\"}}", SPEC_STORAGE_MOUNT},
        {SL_CIFAR ", \"storage\": \"nfs\", \"storage_layer\": \"in_process\"}}",
         SPEC_STORAGE_IN_PROCESS},
    };
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        json_t *s = parse_ok(layers[i].text);
        struct spec sp;
        struct err e;
        T_CHECK_MSG(s, "layer case %zu", i);
        if (!s)
            continue;
        T_EQ_INT(spec_storage_layer_json(s), layers[i].want);
        T_OK(spec_from_json(s, &sp, &e));
        T_EQ_INT(spec_storage_layer_of(&sp.train.dataset), layers[i].want);
        json_decref(s);
    }
    json_t *s = parse_ok(TR "}");
    struct spec sp;
    struct err e;
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.train.dataset.storage_layer, "auto");
    json_decref(s);
    T_EQ_STR(spec_storage_layer_name(SPEC_STORAGE_MOUNT), "mount");
    T_EQ_STR(spec_storage_layer_name(SPEC_STORAGE_IN_PROCESS), "in_process");
    T_EQ_STR(spec_storage_layer_name(SPEC_STORAGE_NONE), "none");
#undef SL_CIFAR
}

/* The cross-field checks (common/spec_checks.c's spec_checks[]) in their table order: a
 * spec breaking a rule of spec_rules[], the model, pipeline, loader and memory checks is
 * refused for the first of them, at the top level and at a sweep point; a swept spec's top
 * level is judged by the rules on unswept fields only, and by no check function. */
static void test_spec_check_order_and_scope(void)
{
    static const char *const fields[] = {"precision", "seq_len", "micro_batches",
                                         "dataset.workers", "batch_size"};
    for (int first = 0; first < 5; first++) {
        char text[512];
        snprintf(
            text, sizeof text,
            TR ", \"model\": \"resnet50\"%s%s%s%s%s, \"dataset\": {\"name\": "
               "\"synthetic\"%s%s}}",
            first <= 0 ? ", \"precision\": \"fp16\"" : "",
            first <= 1 ? ", \"seq_len\": 16" : "", first <= 2 ? ", \"micro_batches\": 2" : "",
            first <= 3 ? ", \"prefetch\": 0" : "", first <= 4 ? ", \"batch_size\": 65536" : "",
            first <= 3 ? ", \"workers\": 2" : "",
            first <= 4 ? ", \"shape\": [3, 4096, 4096]" : "");
        T_CHECK_MSG(spec_rejects(text, ERR_INVALID, fields[first], fields[first]), "first %d",
                    first);
    }
#define ALL                                                                                    \
    TR ", \"model\": \"resnet50\", \"precision\": \"fp16\", \"seq_len\": 16, "                 \
       "\"micro_batches\": 2, \"prefetch\": 0, \"batch_size\": 65536, \"dataset\": "           \
       "{\"workers\": 2, \"shape\": [3, 4096, 4096]}"
    /* a rule on unswept fields is judged at the swept top level, naming its field */
    T_CHECK(spec_rejects(ALL ", \"sweep\": {\"world_size\": [1, 2]}}", ERR_INVALID, "precision",
                         "precision: device \"cpu\" has no precision \"fp16\""));
    /* at a point, the rules come first, then the check functions in table order */
    T_CHECK(spec_rejects(ALL ", \"sweep\": {\"precision\": [\"fp16\", \"fp32\"]}}", ERR_INVALID,
                         "sweep",
                         "sweep point 1 of 2 {\"precision\":\"fp16\"}: device \"cpu\" has no "
                         "precision \"fp16\""));
    T_CHECK(spec_rejects(ALL ", \"sweep\": {\"precision\": [\"fp32\", \"fp16\"]}}", ERR_INVALID,
                         "sweep",
                         "sweep point 1 of 2 {\"precision\":\"fp32\"}: seq_len is for the gpt2 "
                         "models"));
#undef ALL
    /* the check functions skip a swept top level: prefetch 0 there never runs */
    json_t *s = parse_ok(TR ", \"prefetch\": 0, \"dataset\": {\"workers\": 2}, \"sweep\": "
                            "{\"prefetch\": [1, 2]}}");
    T_CHECK(s);
    json_decref(s);
    T_CHECK(spec_rejects(TR ", \"prefetch\": 0, \"dataset\": {\"workers\": 2}}", ERR_INVALID,
                         "dataset.workers", "dataset.workers: 2 loader workers"));
}

/* mpi_mca: a bounded map of MPI settings, each key an OpenMPI MCA name or an MPICH
 * control variable and each value free of shell characters; an error names the entry;
 * struct spec gets the entries in order. */
static void test_spec_mpi_mca(void)
{
#define MPI W ", \"backend\": \"mpi\", \"launcher\": \"mpirun\""
    json_t *s = parse_ok(MPI ", \"mpi_mca\": {\"btl\": \"self,tcp\", \"btl_tcp_if_include\": "
                             "\"lo\", \"MPIR_CVAR_CH4_NETMOD\": \"ofi\", \"pml\": \"^ucx\"}}");
    T_CHECK(s);
    struct spec sp;
    struct err e;
    int rc = spec_from_json(s, &sp, &e);
    json_decref(s);
    T_OK(rc);
    T_EQ_INT(sp.n_mpi_params, 4);
    T_EQ_STR(sp.mpi_params[0].key, "btl");
    T_EQ_STR(sp.mpi_params[0].value, "self,tcp");
    T_EQ_STR(sp.mpi_params[2].key, "MPIR_CVAR_CH4_NETMOD");
    T_EQ_STR(sp.mpi_params[3].value, "^ucx");
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"btl\": \"tcp;rm -rf /\"}}", ERR_INVALID,
                         "mpi_mca.btl", "no shell characters"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"btl\": \"$(id)\"}}", ERR_INVALID, "mpi_mca.btl",
                         "got \"$(id)\""));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"btl\": \"\"}}", ERR_INVALID, "mpi_mca.btl",
                         "1 to 127"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"btl\": 3}}", ERR_INVALID, "mpi_mca.btl",
                         "must be a string"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"Btl\": \"tcp\"}}", ERR_INVALID, "mpi_mca.Btl",
                         "neither an OpenMPI MCA name"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"MPIR_CVAR_\": \"1\"}}", ERR_INVALID,
                         "mpi_mca.MPIR_CVAR_", "MPICH"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": {\"btl tcp\": \"1\"}}", ERR_INVALID,
                         "mpi_mca.btl tcp", "neither"));
    T_CHECK(spec_rejects(MPI ", \"mpi_mca\": [\"btl\"]}", ERR_INVALID, "mpi_mca",
                         "must be an object of at most 16 entries"));
    char text[2048];
    size_t len = (size_t)snprintf(text, sizeof text, MPI ", \"mpi_mca\": {");
    for (int i = 0; i <= SPEC_MAX_MPI_PARAMS; i++) /* one too many */
        len += (size_t)snprintf(text + len, sizeof text - len, "%s\"k%d\": \"1\"",
                                i ? ", " : "", i);
    snprintf(text + len, sizeof text - len, "}}");
    T_CHECK(spec_rejects(text, ERR_INVALID, "mpi_mca", "at most 16"));
    /* the longest key and value fit struct spec */
    char key[64], val[128];
    memset(key, 'k', 63);
    key[63] = '\0';
    memset(val, 'v', 127);
    val[127] = '\0';
    snprintf(text, sizeof text, MPI ", \"mpi_mca\": {\"%s\": \"%s\"}}", key, val);
    s = parse_ok(text);
    T_CHECK(s);
    rc = spec_from_json(s, &sp, &e);
    json_decref(s);
    T_OK(rc);
    T_EQ_INT(strlen(sp.mpi_params[0].key), 63);
    T_EQ_INT(strlen(sp.mpi_params[0].value), 127);
    snprintf(text, sizeof text, MPI ", \"mpi_mca\": {\"%sk\": \"1\"}}", key);
    char field[64]; /* err.field holds 63 characters */
    snprintf(field, sizeof field, "mpi_mca.%s", key);
    T_CHECK(spec_rejects(text, ERR_INVALID, field, "neither"));
    /* not sweepable; MPI chooses its own algorithms */
    T_CHECK(spec_rejects(MPI ", \"sweep\": {\"mpi_mca\": [{}, {\"btl\": \"tcp\"}]}}",
                         ERR_INVALID, "sweep.mpi_mca", "sweepable fields"));
    T_CHECK(spec_rejects(MPI ", \"algorithm\": \"ring\"}", ERR_INVALID, "algorithm",
                         "MPI chooses its own algorithms"));
#undef MPI
}

/* What runs where: each combination the workers cannot run is refused at submit, naming
 * the field the rule is about, at the top level and at every point of a sweep. */
static void test_spec_device_compat(void)
{
#define CUDA ", \"device\": \"cuda\", \"backend\": \"nccl\""
    static const struct bad_case cases[] = {
        {W ", \"device\": \"cpu\", \"backend\": \"nccl\"}", "backend",
         "backend: device \"cpu\" has no backend \"nccl\"; it has \"tcp\", \"mpi\" (NCCL "
         "moves GPU buffers)"},
        {W ", \"backend\": \"mpi\"}", "launcher",
         "backend \"mpi\" has no launcher \"ddpbench\"; it has \"mpirun\", \"srun\""},
        {TR ", \"engine\": \"pytorch\", \"backend\": \"mpi\", \"launcher\": \"mpirun\"}",
         "backend", "neither Debian's nor PyPI's is"},
        {W ", \"device\": \"cuda\"}", "backend",
         "device \"cuda\" has no backend \"tcp\"; it has \"nccl\" (tcp on GPU buffers"},
        {TR ", \"device\": \"cuda\", \"backend\": \"tcp\"}", "backend", "has no backend"},
        {W ", \"emulate_multi_rank\": true}", "emulate_multi_rank",
         "device \"cpu\" has no emulate_multi_rank \"true\"; it has \"false\""},
        {TR ", \"precision\": \"fp16\"}", "precision", "has no precision \"fp16\""},
        {TR ", \"cudnn_benchmark\": true}", "cudnn_benchmark",
         "device \"cpu\" has no cudnn_benchmark \"true\"; it has \"false\" (cuDNN runs on "
         "device cuda)"},
        {TR CUDA ", \"strategy\": \"horovod\"}", "strategy",
         "device \"cuda\" has no strategy \"horovod\"; it has \"naive\", \"ddp\""},
        {TR CUDA ", \"strategy\": \"zero1\"}", "strategy", "has no strategy \"zero1\""},
        {TR CUDA ", \"strategy\": \"zero2\"}", "strategy", "has no strategy \"zero2\""},
        {TR CUDA ", \"compression\": \"fp16\"}", "compression",
         "device \"cuda\" has no compression \"fp16\"; it has \"none\""},
        {W CUDA ", \"algorithm\": \"hd\"}", "algorithm",
         "backend \"nccl\" has no algorithm \"hd\"; it has \"auto\", \"ring\", \"tree\""},
        {W ", \"device\": \"cpu\", \"sweep\": {\"backend\": [\"tcp\", \"nccl\"]}}", "sweep",
         "sweep point 2 of 2 {\"backend\":\"nccl\"}: device \"cpu\" has no backend"},
        {TR CUDA ", \"sweep\": {\"strategy\": [\"ddp\", \"zero1\"]}}", "sweep",
         "sweep point 2 of 2 {\"strategy\":\"zero1\"}: device \"cuda\" has no strategy"},
        {TR ", \"sweep\": {\"device\": [\"cpu\", \"cuda\"]}}", "sweep",
         "sweep point 2 of 2 {\"device\":\"cuda\"}: device \"cuda\" has no backend \"tcp\""},
        /* engines: what torch offers, and no engine outside the list */
        {TR ", \"engine\": \"pytorch\", \"strategy\": \"horovod\"}", "strategy",
         "engine \"pytorch\" has no strategy \"horovod\"; it has \"ddp\", \"zero1\""},
        {TR ", \"engine\": \"pytorch\", \"strategy\": \"naive\"}", "strategy",
         "has no strategy \"naive\""},
        {TR ", \"engine\": \"tensorflow\", \"compression\": \"fp16\"}", "compression",
         "engine \"tensorflow\" has no compression \"fp16\"; it has \"none\""},
        {TR ", \"engine\": \"deepspeed\"}", "strategy",
         "engine \"deepspeed\" has no strategy \"ddp\"; it has \"zero1\", \"zero2\""},
        {TR ", \"engine\": \"deepspeed\", \"strategy\": \"zero1\", \"precision\": \"fp16\"}",
         "precision", "device \"cpu\" has no precision \"fp16\"; it has \"fp32\", \"bf16\""},
        {TR CUDA ", \"engine\": \"tensorflow\", \"precision\": \"fp16\"}", "precision",
         "engine \"tensorflow\" has no precision \"fp16\"; it has \"fp32\", \"bf16\""},
        {TR ", \"engine\": \"jax\"}", "engine", "\"deepspeed\""},
        {TR ", \"sweep\": {\"engine\": [\"ddpbench\", \"pytorch\"]}, "
            "\"strategy\": \"zero2\"}",
         "sweep",
         "sweep point 2 of 2 {\"engine\":\"pytorch\"}: engine \"pytorch\" has no "
         "strategy \"zero2\""},
    };
    SPEC_REJECTS_ALL(cases);
    /* what does run: cuda with nccl (emulated or not, a ring, naive or ddp in any
     * precision), and every strategy and compression on the CPU */
    static const char *const fine[] = {
        W CUDA "}",
        W CUDA ", \"emulate_multi_rank\": true, \"algorithm\": \"ring\"}",
        TR CUDA ", \"strategy\": \"naive\", \"precision\": \"bf16\"}",
        TR CUDA ", \"sweep\": {\"precision\": [\"fp32\", \"fp16\"]}}",
        TR CUDA ", \"precision\": \"bf16\", \"sweep\": {\"cudnn_benchmark\": [false, true]}}",
        TR ", \"strategy\": \"zero2\", \"compression\": \"bf16\"}",
        TR ", \"precision\": \"bf16\"}", /* ddpbench's engine: oneDNN on the CPU */
        W ", \"algorithm\": \"hd\"}",
        TR ", \"engine\": \"pytorch\", \"strategy\": \"zero1\"}",
        TR ", \"sweep\": {\"engine\": [\"ddpbench\", \"pytorch\", \"script\"]}}",
        /* a rule with a swept field is judged at the points only */
        W ", \"backend\": \"nccl\", \"sweep\": {\"device\": [\"cuda\"]}}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
    /* the worker sees the switch (train_engine_cfg.cudnn_benchmark) */
    struct err e = {0};
    struct spec sp;
    json_t *s = parse_ok(TR CUDA ", \"cudnn_benchmark\": true}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_CHECK(sp.train.cudnn_benchmark);
    json_decref(s);
#undef CUDA
}

/* Issue 33's precision knobs: clip_grad_norm, loss_scale and loss_scale_window default to
 * off / dynamic / 2000 and reach struct spec; out of range, or loss scaling with another
 * precision than fp16, is a 400 naming the field; clipping on ddpbench's CUDA engine or in
 * a pipeline, and bf16 in a pipeline, too; at the top and at every sweep point. */
static void test_spec_precision_knobs(void)
{
#define CUDA ", \"device\": \"cuda\", \"backend\": \"nccl\""
    struct err e = {0};
    struct spec sp;
    json_t *s = parse_ok(TR "}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_NEAR(sp.train.clip_grad_norm, 0, 0);
    T_NEAR(sp.train.loss_scale, 0, 0);
    T_EQ_INT(sp.train.loss_scale_window, 2000);
    json_decref(s);
    s = parse_ok(TR CUDA ", \"precision\": \"fp16\", \"loss_scale\": 128, "
                         "\"loss_scale_window\": 50}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_NEAR(sp.train.loss_scale, 128, 0);
    T_EQ_INT(sp.train.loss_scale_window, 50);
    json_decref(s);
    s = parse_ok(TR ", \"clip_grad_norm\": 0.5, \"strategy\": \"zero2\"}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_NEAR(sp.train.clip_grad_norm, 0.5, 0);
    json_decref(s);
    static const struct bad_case cases[] = {
        {TR ", \"clip_grad_norm\": -1}", "clip_grad_norm", ""},
        {TR ", \"loss_scale_window\": 0}", "loss_scale_window", ""},
        {TR ", \"loss_scale\": 1024}", "loss_scale",
         "loss_scale is fp16's loss scaling; precision \"fp32\" has none"},
        {TR ", \"precision\": \"bf16\", \"loss_scale_window\": 100}", "loss_scale_window",
         "precision \"bf16\" has none"},
        {TR CUDA ", \"clip_grad_norm\": 1}", "clip_grad_norm", "device cuda"},
        {TR ", \"clip_grad_norm\": 1, \"pipeline\": 2, \"world_size\": 2}", "clip_grad_norm",
         "pipeline 1"},
        {TR ", \"precision\": \"bf16\", \"pipeline\": 2, \"world_size\": 2}", "precision",
         "pipeline stages train in fp32"},
        {TR ", \"loss_scale\": 8, \"sweep\": {\"precision\": [\"fp32\", \"bf16\"]}}", "sweep",
         "sweep point 1 of 2 {\"precision\":\"fp32\"}: loss_scale is fp16's"},
    };
    SPEC_REJECTS_ALL(cases);
    static const char *const fine[] = {
        TR ", \"clip_grad_norm\": 1, \"sweep\": {\"strategy\": [\"naive\", \"ddp\", "
           "\"horovod\", \"zero1\", \"zero2\"]}}",
        TR ", \"sweep\": {\"clip_grad_norm\": [0, 0.5, 1]}}",
        TR CUDA ", \"precision\": \"fp16\", \"sweep\": {\"loss_scale\": [0, 1024]}}",
        TR ", \"precision\": \"bf16\", \"clip_grad_norm\": 1}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
#undef CUDA
}

/* transport (issue 30): auto by default, every value kept into struct spec and swept into
 * runs that hold it; refused naming transport (400) with a backend or engine that has its own
 * transports, with a forced TCP algorithm (shm only), and with shm where the spec places the
 * ranks on more than one node; at the top level and at every point of a sweep. */
/* "elastic" (issue 32): absent = off, not filled; given = on with defaults (min_ranks 1,
 * max_ranks 0 = world_size, commit_every 10); a swept subfield turns it on at every point;
 * the bounds and what cannot be elastic are 400s naming the field and why. */
/* Rule (16): a collective on a framework engine is pytorch's, over gloo with what it has. */
static void test_spec_collective_engine(void)
{
    json_t *s = parse_ok(W ", \"engine\": \"pytorch\", \"world_size\": 2}");
    T_CHECK(s);
    T_EQ_STR(json_string_value(spec_field_value(s, "engine")), "pytorch");
    json_decref(s);
    T_CHECK(spec_rejects(W ", \"engine\": \"horovod\"}", ERR_INVALID, "engine", "pytorch"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"backend\": \"mpi\", "
                           "\"launcher\": \"mpirun\"}",
                         ERR_INVALID, "backend", "gloo"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"op\": \"sendrecv\"}", ERR_INVALID,
                         "op", "broadcast"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"op\": \"reduce_scatter\"}",
                         ERR_INVALID, "op", "no reduce_scatter"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"algorithm\": \"ring\"}", ERR_INVALID,
                         "algorithm", "auto"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"dtype\": \"bfloat16\"}", ERR_INVALID,
                         "dtype", "bfloat16"));
    T_CHECK(spec_rejects(W ", \"engine\": \"pytorch\", \"sweep\": {\"op\": [\"allreduce\", "
                           "\"sendrecv\"]}}",
                         ERR_INVALID, "sweep", "sendrecv"));
}

static void test_spec_elastic(void)
{
#define EL TR ", \"world_size\": 3"
    struct err e = {0};
    struct spec sp;
    json_t *s = parse_ok(EL "}");
    T_CHECK(s && !json_object_get(s, "elastic"));
    T_OK(spec_from_json(s, &sp, &e));
    T_CHECK(!sp.elastic.on);
    json_decref(s);
    s = parse_ok(EL ", \"elastic\": {}}");
    T_CHECK(s);
    T_EQ_INT(json_integer_value(spec_field_value(s, "elastic.min_ranks")), 1);
    T_EQ_INT(json_integer_value(spec_field_value(s, "elastic.max_ranks")), 0);
    T_EQ_INT(json_integer_value(spec_field_value(s, "elastic.commit_every")), 10);
    T_OK(spec_from_json(s, &sp, &e));
    T_CHECK(sp.elastic.on);
    T_EQ_INT(sp.elastic.min_ranks, 1);
    T_EQ_INT(sp.elastic.max_ranks, 3); /* 0: world_size */
    T_EQ_INT(sp.elastic.commit_every, 10);
    json_decref(s);
    s = parse_ok(EL
                 ", \"elastic\": {\"min_ranks\": 2, \"max_ranks\": 2, \"commit_every\": 5}}");
    T_CHECK(s);
    T_OK(spec_from_json(s, &sp, &e));
    T_CHECK(sp.elastic.on && sp.elastic.min_ranks == 2 && sp.elastic.max_ranks == 2 &&
            sp.elastic.commit_every == 5);
    json_decref(s);
    /* a swept subfield without the group: every point is elastic; max_ranks follows a
     * swept world_size */
    s = parse_ok(TR
                 ", \"sweep\": {\"world_size\": [2, 4], \"elastic.commit_every\": [5, 20]}}");
    json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
    T_EQ_INT(json_array_size(runs), 4);
    for (size_t i = 0; i < json_array_size(runs); i++) {
        const json_t *r = json_object_get(json_array_get(runs, i), "spec");
        T_OK(spec_from_json(r, &sp, &e));
        T_CHECK(sp.elastic.on && sp.elastic.max_ranks == sp.world_size);
        T_EQ_INT(sp.elastic.commit_every, i % 2 ? 20 : 5);
    }
    json_decref(runs);
    json_decref(s);
    static const struct bad_case cases[] = {
        {EL ", \"elastic\": {\"min_ranks\": 4}}", "elastic.min_ranks",
         "elastic.min_ranks: min_ranks 4 is more than world_size 3"},
        {EL ", \"elastic\": {\"min_ranks\": 0}}", "elastic.min_ranks", "elastic.min_ranks:"},
        {EL ", \"elastic\": {\"min_ranks\": 2, \"max_ranks\": 1}}", "elastic.max_ranks",
         "max_ranks 1 must be from min_ranks 2 to world_size 3"},
        {EL ", \"elastic\": {\"max_ranks\": 4}}", "elastic.max_ranks", "to world_size 3"},
        {EL ", \"elastic\": {\"commit_every\": 0}}", "elastic.commit_every",
         "elastic.commit_every:"},
        {EL ", \"elastic\": {\"every\": 3}}", "elastic.every", "unknown field"},
        {EL ", \"elastic\": 3}", "elastic", "must be an object of elastic.* fields"},
        {TR ", \"world_size\": 4, \"pipeline\": 2, \"elastic\": {}}", "pipeline",
         "pipeline: elastic runs cannot be pipelines"},
        {EL ", \"backend\": \"mpi\", \"launcher\": \"mpirun\", \"elastic\": {}}", "backend",
         "an MPI world cannot shrink"},
        {EL ", \"engine\": \"tensorflow\", \"elastic\": {}}", "engine",
         "engine tensorflow is not elastic"},
        {EL ", \"engine\": \"deepspeed\", \"strategy\": \"zero1\", \"elastic\": {}}", "engine",
         "engine deepspeed is not elastic"},
        {EL ", \"engine\": \"script\", \"script\": \"a.py\", \"elastic\": {}}", "engine",
         "engine script is not elastic"},
        {W ", \"elastic\": {}}", "elastic", "not a field of this workload"},
        {TR ", \"sweep\": {\"elastic.min_ranks\": [1, 2]}}", "sweep",
         "min_ranks 2 is more than world_size 1"},
    };
    SPEC_REJECTS_ALL(cases);
    static const char *const fine[] = {
        EL ", \"engine\": \"pytorch\", \"elastic\": {\"min_ranks\": 3}}",
        EL ", \"engine\": \"horovod\", \"strategy\": \"horovod\", \"elastic\": {}}",
        EL ", \"strategy\": \"zero2\", \"elastic\": {\"min_ranks\": 1, \"max_ranks\": 3}}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
#undef EL
}

/* Issue 33, part C: an engine's front end (framework: keras is horovod's only), the
 * lightning engine's table, and the single-process strategies (mirrored on tensorflow, dp
 * on pytorch with device cuda): refused elsewhere naming the field, and one process for
 * world_size replicas, with their CPU slots, where they run. */
static void test_spec_frameworks_and_single_process(void)
{
#define CUDA ", \"device\": \"cuda\", \"backend\": \"nccl\""
    static const struct bad_case cases[] = {
        {TR ", \"engine\": \"pytorch\", \"framework\": \"keras\"}", "framework",
         "engine \"pytorch\" has no framework \"keras\"; it has \"auto\", \"torch\""},
        {TR ", \"engine\": \"tensorflow\", \"framework\": \"keras\"}", "framework",
         "keras is engine horovod's"},
        {TR ", \"framework\": \"torch\"}", "framework", "ddpbench's C worker"},
        {TR ", \"framework\": \"jax\"}", "framework", "\"keras\""},
        {TR ", \"engine\": \"pytorch\", \"strategy\": \"dp\"}", "strategy",
         "on a CPU it runs a single replica"},
        {TR ", \"strategy\": \"mirrored\"}", "strategy",
         "engine \"ddpbench\" has no strategy \"mirrored\""},
        {TR ", \"engine\": \"pytorch\", \"strategy\": \"mirrored\"}", "strategy",
         "has no strategy \"mirrored\""},
        {TR CUDA ", \"strategy\": \"dp\"}", "strategy", "single-process strategies"},
        {TR ", \"engine\": \"lightning\", \"strategy\": \"zero1\"}", "strategy",
         "Lightning's DDP"},
        {TR ", \"engine\": \"lightning\", \"backend\": \"mpi\", \"launcher\": "
            "\"mpirun\"}",
         "backend", "engine \"lightning\" has no backend \"mpi\""},
        {TR ", \"engine\": \"tensorflow\", \"strategy\": \"mirrored\", \"world_size\": 2, "
            "\"nodes\": 2}",
         "nodes", "one process"},
        {TR ", \"engine\": \"tensorflow\", \"strategy\": \"mirrored\", \"elastic\": "
            "{\"min_ranks\": 1}}",
         "engine", "not elastic"},
        {TR ", \"engine\": \"tensorflow\", \"sweep\": {\"strategy\": [\"ddp\", "
            "\"mirrored\"]}, \"world_size\": 2, \"ranks_per_node\": 1}",
         "sweep", "sweep point 2 of 2 {\"strategy\":\"mirrored\"}: strategy mirrored runs"},
    };
    SPEC_REJECTS_ALL(cases);
    static const char *const fine[] = {
        TR ", \"engine\": \"horovod\", \"strategy\": \"horovod\", \"framework\": "
           "\"keras\"}",
        TR ", \"engine\": \"horovod\", \"strategy\": \"horovod\", \"sweep\": "
           "{\"framework\": [\"torch\", \"keras\"]}}",
        TR ", \"engine\": \"lightning\", \"framework\": \"torch\"}",
        TR ", \"engine\": \"tensorflow\", \"strategy\": \"mirrored\", \"world_size\": 4}",
        TR CUDA ", \"engine\": \"pytorch\", \"strategy\": \"dp\", \"world_size\": 2}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
    /* one process for the replicas, holding their CPU slots; a process per rank else */
    struct err e;
    struct spec sp;
    json_t *s = parse_text(TR ", \"engine\": \"tensorflow\", \"strategy\": \"mirrored\", "
                              "\"world_size\": 3, \"threads\": 2}",
                           &e);
    T_CHECK_MSG(s, "%s", e.msg);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(spec_processes(&sp), 1);
    T_EQ_INT(spec_processes_of(s), 1);
    T_EQ_INT(spec_rank_slots(&sp), 6);
    T_EQ_INT(spec_slots_per_rank(s) * sp.world_size,
             spec_rank_slots(&sp) * spec_processes(&sp));
    json_decref(s);
    s = parse_text(TR ", \"engine\": \"tensorflow\", \"world_size\": 3, \"threads\": 2}", &e);
    T_CHECK_MSG(s, "%s", e.msg);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_INT(spec_processes(&sp), 3);
    T_EQ_INT(spec_processes_of(s), 3);
    T_EQ_INT(spec_rank_slots(&sp), 2);
    T_EQ_STR(sp.train.framework, "auto");
    json_decref(s);
#undef CUDA
}

static void test_spec_transport(void)
{
#define CUDA ", \"device\": \"cuda\", \"backend\": \"nccl\""
#define MPI ", \"backend\": \"mpi\", \"launcher\": \"mpirun\""
#define SHM ", \"transport\": \"shm\""
    struct err e = {0};
    struct spec sp;
    json_t *s = parse_ok(W "}");
    T_CHECK(s);
    T_EQ_STR(get_str(s, "transport"), "auto");
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.transport, "auto");
    json_decref(s);
    static const struct bad_case cases[] = {
        {W ", \"transport\": \"udp\"}", "transport",
         "transport: must be one of \"auto\", \"shm\", \"tcp\", got \"udp\""},
        {W ", \"transport\": 1}", "transport", "transport: must be one of"},
        {W CUDA SHM "}", "transport",
         "transport: backend \"nccl\" has no transport \"shm\"; it has \"auto\" (NCCL chooses "
         "its own transports"},
        {W CUDA ", \"transport\": \"tcp\"}", "transport", "has no transport \"tcp\""},
        {W MPI ", \"transport\": \"tcp\"}", "transport",
         "backend \"mpi\" has no transport \"tcp\"; it has \"auto\" (MPI chooses its own"},
        {W MPI SHM "}", "transport", "backend \"mpi\" has no transport \"shm\""},
        {TR ", \"engine\": \"pytorch\"" SHM "}", "transport",
         "engine \"pytorch\" has no transport \"shm\"; it has \"auto\", \"tcp\" (shared memory "
         "is ddpbench's own"},
        {TR ", \"engine\": \"horovod\", \"strategy\": \"horovod\"" SHM "}", "transport",
         "engine \"horovod\" has no transport \"shm\""},
        {TR ", \"engine\": \"tensorflow\"" SHM "}", "transport", "has no transport \"shm\""},
        {TR ", \"engine\": \"deepspeed\", \"strategy\": \"zero1\"" SHM "}", "transport",
         "has no transport \"shm\""},
        {TR ", \"engine\": \"script\", \"script\": \"a.py\"" SHM "}", "transport",
         "engine \"script\" has no transport \"shm\""},
        {W ", \"algorithm\": \"ring\"" SHM "}", "transport",
         "algorithm \"ring\" has no transport \"shm\"; it has \"auto\", \"tcp\" (a TCP "
         "algorithm; transport shm has its own"},
        {W ", \"algorithm\": \"rd\"" SHM "}", "transport", "algorithm \"rd\" has no transport"},
        {W ", \"algorithm\": \"hd\"" SHM "}", "transport", "algorithm \"hd\" has no transport"},
        {W ", \"op\": \"broadcast\", \"algorithm\": \"tree\"" SHM "}", "transport",
         "algorithm \"tree\" has no transport \"shm\""},
        {W ", \"op\": \"all_gather\", \"algorithm\": \"direct\"" SHM "}", "transport",
         "algorithm \"direct\" has no transport \"shm\""},
        {W ", \"world_size\": 4, \"nodes\": 2" SHM "}", "transport",
         "transport: transport \"shm\" moves bytes through one node's shared memory, but nodes "
         "and ranks_per_node place the ranks on 2 nodes"},
        {W ", \"world_size\": 5, \"ranks_per_node\": 2" SHM "}", "transport",
         "place the ranks on 3 nodes"},
        {TR ", \"world_size\": 2, \"nodes\": 2" SHM "}", "transport", "on 2 nodes"},
        /* at the points of a sweep, naming the point */
        {W ", \"world_size\": 4" SHM ", \"sweep\": {\"nodes\": [1, 2]}}", "sweep",
         "sweep point 2 of 2 {\"nodes\":2}: transport \"shm\" moves bytes"},
        {W ", \"world_size\": 4, \"nodes\": 2, \"sweep\": {\"transport\": [\"auto\", "
           "\"shm\"]}}",
         "sweep", "sweep point 2 of 2 {\"transport\":\"shm\"}: transport \"shm\""},
        {W ", \"algorithm\": \"ring\", \"sweep\": {\"transport\": [\"tcp\", \"shm\"]}}",
         "sweep",
         "sweep point 2 of 2 {\"transport\":\"shm\"}: algorithm \"ring\" has no transport"},
        {W SHM ", \"sweep\": {\"backend\": [\"tcp\", \"mpi\"]}, \"launcher\": \"mpirun\"}",
         "sweep", "backend \"mpi\" has no transport \"shm\""},
    };
    SPEC_REJECTS_ALL(cases);
    /* what runs: auto with every backend and engine; tcp and shm on backend tcp; shm with
     * auto and hier, on one node (nodes 1, ranks_per_node at least world_size) */
    static const char *const fine[] = {
        W CUDA "}",
        W MPI "}",
        W MPI ", \"transport\": \"auto\"}",
        W ", \"world_size\": 4" SHM "}",
        W ", \"world_size\": 4, \"nodes\": 1" SHM "}",
        W ", \"world_size\": 4, \"ranks_per_node\": 4" SHM "}",
        W ", \"world_size\": 4, \"algorithm\": \"hier\"" SHM "}",
        W ", \"world_size\": 4, \"nodes\": 2, \"transport\": \"tcp\", \"algorithm\": \"ring\"}",
        W ", \"world_size\": 4, \"nodes\": 2, \"algorithm\": \"hier\"}",
        TR SHM "}",
        TR ", \"engine\": \"pytorch\", \"transport\": \"tcp\"}",
        TR ", \"engine\": \"pytorch\"}",
        TR ", \"world_size\": 2, \"pipeline\": 2" SHM "}",
        W ", \"sweep\": {\"transport\": [\"auto\", \"shm\", \"tcp\"], \"algorithm\": "
          "[\"auto\", \"hier\"]}}",
    };
    spec_all_run(fine, sizeof fine / sizeof fine[0]);
    /* a sweep over transport: one run per value, in order, each spec and struct holding it */
    s = parse_ok(W ", \"world_size\": 2, \"sweep\": {\"transport\": [\"shm\", \"tcp\", "
                   "\"auto\"]}}");
    T_CHECK(s);
    json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 3);
    static const char *const want[] = {"shm", "tcp", "auto"};
    for (size_t i = 0; runs && i < 3; i++) {
        json_t *run = json_array_get(runs, i);
        T_EQ_STR(get_str(json_object_get(run, "params"), "transport"), want[i]);
        T_EQ_STR(get_str(json_object_get(run, "spec"), "transport"), want[i]);
        memset(&sp, 0, sizeof sp);
        T_OK(spec_from_json(json_object_get(run, "spec"), &sp, &e));
        T_EQ_STR(sp.transport, want[i]);
    }
    json_decref(runs);
    json_decref(s);
#undef SHM
#undef MPI
#undef CUDA
}

/* The memory estimate: its parts from the model table and the spec's knobs, and the 1 TiB
 * per-rank cap refusing (400 naming batch_size, the estimate in the message) the issue's
 * resnet50 at 3x4096x4096 with batch 65536, at the top level and at a sweep point. */
static void test_spec_memory_estimate(void)
{
    struct err e;
    const struct model_info *r50 = model_table_find("resnet50");
    json_t *s = parse_ok(TR ", \"model\": \"resnet50\", \"batch_size\": 32, \"prefetch\": 2, "
                            "\"optimizer\": {\"momentum\": 0.9}, \"dataset\": {\"classes\": "
                            "1000}}");
    T_CHECK(s);
    struct spec_memory m;
    T_OK(spec_memory_estimate(s, &m));
    json_decref(s);
    double p = (double)r50->params, act = (double)r50->act_floats;
    T_NEAR(m.params, 4 * p, 0.5);
    T_NEAR(m.grads, 4 * p, 0.5);
    T_NEAR(m.optimizer, 4 * p, 0.5); /* sgd with momentum: one buffer */
    T_NEAR(m.comm, 0, 0);            /* ddp reduces in place */
    T_NEAR(m.activations, 8.0 * 32 * act, 0.5);
    T_NEAR(m.data, 3.0 * 32 * 4 * 3 * 224 * 224, 0.5);
    T_NEAR(m.total, m.params + m.grads + m.optimizer + m.activations + m.data, 1);
    char text[320];
    spec_memory_text(&m, text, sizeof text);
    T_CHECK_MSG(strstr(text, "GiB") && strstr(text, "an estimate"), "%s", text);

    /* adam sharded by zero1 over 4 ranks, a staging copy, 16-bit wire copies; 100 classes */
    s = parse_ok(TR ", \"model\": \"resnet50\", \"world_size\": 4, \"strategy\": \"zero1\", "
                    "\"compression\": \"bf16\", \"optimizer\": {\"type\": \"adam\"}, "
                    "\"dataset\": {\"classes\": 100}}");
    T_CHECK(s);
    T_OK(spec_memory_estimate(s, &m));
    json_decref(s);
    p = model_table_params(r50, 3, 224, 224, 100);
    T_NEAR(p, r50->params - 900.0 * 2049, 0.5); /* the head: 2048 x 900 weights + 900 bias */
    T_NEAR(m.optimizer, 8 * p / 4, 0.5);
    T_NEAR(m.comm, 6 * p, 0.5);

    /* a real dataset trains on its own shape: dataset.shape is synthetic's */
    s = parse_ok(TR ", \"model\": \"mnist-cnn\", \"batch_size\": 65536, \"dataset\": "
                    "{\"name\": \"mnist\", \"shape\": [3, 4096, 4096]}}");
    T_CHECK(s);
    T_OK(spec_memory_estimate(s, &m));
    json_decref(s);
    T_NEAR(m.data, 3.0 * 65536 * 4 * 28 * 28, 0.5);
    s = parse_ok(W "}");
    T_CHECK(s && spec_memory_estimate(s, &m) < 0);
    json_decref(s);

    /* the issue's example: refused at submit, naming the field, with the estimate */
    T_CHECK(spec_rejects(TR ", \"model\": \"resnet50\", \"batch_size\": 65536, \"dataset\": "
                            "{\"shape\": [3, 4096, 4096]}}",
                         ERR_INVALID, "batch_size", "more than the 1024 GiB a rank may use"));
    T_CHECK(!parse_text(TR ", \"model\": \"resnet50\", \"batch_size\": 65536, \"dataset\": "
                           "{\"shape\": [3, 4096, 4096]}}",
                        &e));
    T_CHECK_MSG(strstr(e.msg, "batch_size: one rank needs about") &&
                    strstr(e.msg, "activations") && strstr(e.msg, "an estimate"),
                "%s", e.msg);
    /* one sample of it is about 75 GiB: valid here, for the node to judge (409) */
    s = parse_ok(TR ", \"model\": \"resnet50\", \"batch_size\": 1, \"dataset\": {\"shape\": "
                    "[3, 4096, 4096]}}");
    T_CHECK(s);
    T_OK(spec_memory_estimate(s, &m));
    json_decref(s);
    T_CHECK_MSG(m.total > 50.0 * (1 << 30) && m.total < 100.0 * (1 << 30), "%g", m.total);
    /* at a sweep point: the top level (batch 32) is never run alone */
    T_CHECK(spec_rejects(TR ", \"model\": \"resnet50\", \"dataset\": {\"shape\": [3, 4096, "
                            "4096]}, \"sweep\": {\"batch_size\": [1, 65536]}}",
                         ERR_INVALID, "sweep",
                         "sweep point 2 of 2 {\"batch_size\":65536}: one rank needs about"));
    /* the worker is held to the same cap */
    struct spec sp;
    json_t *raw = json_loads(TR ", \"model\": \"resnet50\", \"batch_size\": 65536, "
                                "\"dataset\": {\"shape\": [3, 4096, 4096]}}",
                             0, NULL);
    T_CHECK(raw);
    int rc = spec_from_json(raw, &sp, &e);
    json_decref(raw);
    T_CHECK(rc < 0);
    T_EQ_STR(e.field, "batch_size");
}

static void test_spec_train_sweep_nested(void)
{
    struct err e;
    json_t *s = parse_text(TR ", \"optimizer\": {\"momentum\": 0.5}, \"sweep\": "
                              "{\"strategy\": [\"naive\", \"ddp\"], \"optimizer.lr\": "
                              "[0.1, 0.01]}}",
                           &e);
    T_CHECK_MSG(s, "%s", e.msg);
    json_t *runs = spec_expand(s, SPEC_MAX_RUNS, &e);
    T_CHECK_MSG(runs, "%s", e.msg);
    T_EQ_INT(json_array_size(runs), 4);
    json_t *last = json_array_get(runs, 3);
    json_t *spec = json_object_get(last, "spec");
    json_t *opt = json_object_get(spec, "optimizer");
    T_CHECK(json_real_value(json_object_get(opt, "lr")) == 0.01);
    T_CHECK(json_real_value(json_object_get(opt, "momentum")) == 0.5); /* kept beside it */
    T_EQ_STR(json_string_value(json_object_get(spec, "strategy")), "ddp");
    T_CHECK(json_real_value(json_object_get(json_object_get(last, "params"), "optimizer.lr")) ==
            0.01);
    struct spec sp;
    T_OK(spec_from_json(spec, &sp, &e));
    T_CHECK(sp.train.optimizer.lr == 0.01);
    json_decref(runs);
    json_decref(s);
}

static void test_spec_from_json(void)
{
    struct err e;
    json_t *s = parse_text(W
                           ", \"name\": \"x\", \"world_size\": 4, \"repeats\": 3, "
                           "\"seed\": 2147483647, \"timeout_s\": 60, \"algorithm\": \"ring\", "
                           "\"min_bytes\": \"1K\", \"max_bytes\": \"1G\", \"step\": \"4K\", "
                           "\"iters\": 7, \"warmup\": 0, \"check\": false, \"inplace\": true}",
                           &e);
    T_CHECK_MSG(s, "%s", e.msg);
    struct spec sp;
    memset(&sp, 0x5a, sizeof sp);
    T_OK(spec_from_json(s, &sp, &e));
    T_EQ_STR(sp.name, "x");
    T_EQ_INT(sp.workload, SPEC_WORKLOAD_COLLECTIVE);
    T_EQ_STR(sp.device, "cpu");
    T_EQ_STR(sp.backend, "tcp");
    T_EQ_INT(sp.world_size, 4);
    T_EQ_INT(sp.repeats, 3);
    T_EQ_INT(sp.seed, 2147483647);
    T_EQ_INT(sp.timeout_s, 60);
    T_EQ_STR(sp.coll.op, "allreduce");
    T_EQ_STR(sp.coll.dtype, "float32");
    T_EQ_STR(sp.coll.redop, "sum");
    T_EQ_STR(sp.coll.algorithm, "ring");
    T_EQ_INT(sp.coll.min_bytes, 1024);
    T_EQ_INT(sp.coll.max_bytes, 1 << 30);
    T_EQ_INT(sp.coll.factor, 0);
    T_EQ_INT(sp.coll.step, 4096);
    T_EQ_INT(sp.coll.iters, 7);
    T_EQ_INT(sp.coll.warmup, 0);
    T_CHECK(!sp.coll.check);
    T_CHECK(sp.coll.inplace);
    json_decref(s);

    /* a partial object is normalized first: defaults fill the struct */
    json_t *partial = json_pack("{s:s}", "workload", "collective");
    T_OK(spec_from_json(partial, &sp, &e));
    T_EQ_INT(sp.coll.factor, 2);
    T_EQ_INT(sp.coll.max_bytes, 64 << 20);
    T_CHECK(sp.coll.check);
    json_object_set_new(partial, "iters", json_string("many"));
    T_CHECK(spec_from_json(partial, &sp, &e) < 0);
    T_EQ_STR(e.field, "iters");
    json_decref(partial);

    json_t *swept = parse_ok(W ", \"sweep\": {\"world_size\": [1, 2]}}");
    T_CHECK(swept);
    T_CHECK(spec_from_json(swept, &sp, &e) < 0);
    T_EQ_STR(e.field, "sweep");
    json_decref(swept);
}

static void test_spec_collective_sizes(void)
{
    struct spec_collective c = {.min_bytes = 4096, .max_bytes = 64 << 20, .factor = 4};
    int64_t sizes[64];
    size_t n = spec_collective_sizes(&c, sizes, 64);
    T_EQ_INT(n, 8);
    for (size_t i = 0; i < n; i++)
        T_EQ_INT(sizes[i], INT64_C(4096) << (2 * i));
    /* max_bytes need not be on the progression */
    c.max_bytes = 100000;
    n = spec_collective_sizes(&c, sizes, 64);
    T_EQ_INT(n, 3);
    T_EQ_INT(sizes[2], 65536);
    /* additive step */
    c = (struct spec_collective){.min_bytes = 1000, .max_bytes = 3500, .step = 1000};
    n = spec_collective_sizes(&c, sizes, 64);
    T_EQ_INT(n, 3);
    T_EQ_INT(sizes[0], 1000);
    T_EQ_INT(sizes[1], 2000);
    T_EQ_INT(sizes[2], 3000);
    /* one size, the cap on the output, and invalid structs that would never end */
    c = (struct spec_collective){.min_bytes = 64, .max_bytes = 64, .factor = 2};
    T_EQ_INT(spec_collective_sizes(&c, sizes, 64), 1);
    c = (struct spec_collective){.min_bytes = 1, .max_bytes = INT64_C(2) << 30, .factor = 2};
    T_EQ_INT(spec_collective_sizes(&c, sizes, 64), 32);
    T_EQ_INT(spec_collective_sizes(&c, sizes, 5), 5);
    T_EQ_INT(sizes[4], 16);
    c = (struct spec_collective){.min_bytes = 1, .max_bytes = 10};
    T_EQ_INT(spec_collective_sizes(&c, sizes, 64), 0);
    c = (struct spec_collective){.min_bytes = 0, .max_bytes = 10, .factor = 2};
    T_EQ_INT(spec_collective_sizes(&c, sizes, 64), 0);
}

/* An explicit sizes list: normalized to integers in the given order, visited instead of
 * min_bytes..max_bytes, carried into struct spec with comm_timeout_s and the new enums. */
static void test_spec_sizes_list_and_collective_fields(void)
{
    struct err e;
    json_t *s = parse_ok(W ", \"sizes\": [\"1M\", 8, \"25MiB\", 4096], \"comm_timeout_s\": 7,"
                           " \"op\": \"reduce_scatter\", \"dtype\": \"bfloat16\","
                           " \"redop\": \"avg\", \"algorithm\": \"direct\"}");
    T_CHECK(s);
    char *text = json_dumps(json_object_get(s, "sizes"), JSON_COMPACT);
    T_EQ_STR(text, "[1048576,8,26214400,4096]");
    free(text);
    struct spec sp;
    int rc = spec_from_json(s, &sp, &e);
    json_t *again = spec_normalize(s, &e);
    T_CHECK(again && json_equal(again, s)); /* idempotent */
    json_decref(again);
    json_decref(s);
    T_OK(rc);
    T_EQ_INT(sp.comm_timeout_s, 7);
    T_EQ_STR(sp.coll.op, "reduce_scatter");
    T_EQ_STR(sp.coll.dtype, "bfloat16");
    T_EQ_STR(sp.coll.redop, "avg");
    T_EQ_STR(sp.coll.algorithm, "direct");
    T_EQ_INT(sp.coll.sizes.n, 4);
    int64_t sizes[8];
    T_EQ_INT(spec_collective_sizes(&sp.coll, sizes, 8), 4);
    T_EQ_INT(sizes[0], 1 << 20);
    T_EQ_INT(sizes[1], 8);
    T_EQ_INT(sizes[2], 25 << 20);
    T_EQ_INT(sizes[3], 4096);
    T_EQ_INT(spec_collective_sizes(&sp.coll, sizes, 2), 2);
    /* the longest list there may be */
    char big[8192];
    size_t len = (size_t)snprintf(big, sizeof big, W ", \"sizes\": [");
    for (int i = 1; i <= SPEC_MAX_SIZES; i++)
        len += (size_t)snprintf(big + len, sizeof big - len, "%s%d", i > 1 ? "," : "", i);
    snprintf(big + len, sizeof big - len, "]}");
    s = parse_ok(big);
    T_CHECK(s);
    T_EQ_INT(json_array_size(json_object_get(s, "sizes")), SPEC_MAX_SIZES);
    json_decref(s);
    snprintf(big + len, sizeof big - len, ",999]}");
    T_CHECK(!parse_text(big, &e));
    T_EQ_STR(e.field, "sizes");
}

static void test_spec_sizes_from_parsed_spec(void)
{
    struct err e;
    json_t *s = parse_ok(W ", \"min_bytes\": \"4K\", \"max_bytes\": \"64M\", "
                           "\"factor\": 4}");
    T_CHECK(s);
    struct spec sp;
    T_OK(spec_from_json(s, &sp, &e));
    json_decref(s);
    int64_t sizes[64];
    size_t n = spec_collective_sizes(&sp.coll, sizes, 64);
    T_EQ_INT(n, 8);
    T_EQ_INT(sizes[0], 4096);
    T_EQ_INT(sizes[7], 64 << 20);
}

/* --- schema and examples ------------------------------------------------------------- */

static void test_spec_schema_file_in_sync(void)
{
    const char *src = source_dir();
    T_CHECK_MSG(src, "set DDPB_SOURCE_DIR to the source tree (meson test does)");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src, SCHEMA_PATH);
    size_t len;
    char *file = read_whole(path, &len), *now = schema_text_now();
    T_CHECK(now);
    bool same = file && strcmp(file, now) == 0;
    if (!same)
        fprintf(stderr,
                "    %s is not what spec_schema_json() generates.\n"
                "    The field table in common/spec_table.c changed: regenerate with\n"
                "      <build>/tests/test_spec --write-schema %s\n"
                "    and commit the result.\n",
                path, path);
    free(file);
    free(now);
    T_CHECK(same);
}

static void test_spec_schema_content(void)
{
    json_t *s = spec_schema_json();
    T_CHECK(s);
    T_EQ_STR(get_str(s, "$schema"), "https://json-schema.org/draft/2020-12/schema");
    T_CHECK(json_is_false(json_object_get(s, "additionalProperties")));
    json_t *req = json_object_get(s, "required");
    T_EQ_INT(json_array_size(req), 1);
    T_EQ_STR(json_string_value(json_array_get(req, 0)), "workload");
    json_t *props = json_object_get(s, "properties");
    T_EQ_STR(json_object_iter_key(json_object_iter(props)), "name"); /* table order */
    json_t *ws = json_object_get(props, "world_size");
    T_EQ_STR(get_str(ws, "type"), "integer");
    T_EQ_INT(get_int(ws, "minimum"), 1);
    T_EQ_INT(get_int(ws, "maximum"), SPEC_MAX_WORLD);
    T_EQ_INT(get_int(ws, "default"), 1);
    json_t *alg = json_object_get(props, "algorithm");
    T_EQ_INT(json_array_size(json_object_get(alg, "enum")), 7);
    json_t *sizes = json_object_get(props, "sizes");
    T_EQ_STR(get_str(sizes, "type"), "array");
    T_EQ_INT(get_int(sizes, "maxItems"), SPEC_MAX_SIZES);
    T_CHECK(json_is_true(json_object_get(sizes, "uniqueItems")));
    /* op -> algorithm: per op, one if/then for the top and one for the sweep; backend
     * nccl -> algorithm: two more. The last alternative of each then is "algorithm (not
     * swept) is one of these". */
    int allowed = 0;
    size_t i;
    json_t *clause;
    json_array_foreach(json_object_get(s, "allOf"), i, clause)
    {
        json_t *alts = json_object_get(json_object_get(clause, "then"), "anyOf");
        json_t *last = json_array_get(alts, json_array_size(alts) - 1);
        json_t *then_alg = json_object_get(json_object_get(last, "properties"), "algorithm");
        allowed += json_object_get(then_alg, "enum") != NULL;
    }
    T_EQ_INT(allowed, 14); /* and backend mpi -> algorithm: auto only, two more */
    /* nested groups are objects of their fields, closed to others */
    json_t *ds = json_object_get(props, "dataset");
    T_EQ_STR(get_str(ds, "type"), "object");
    T_CHECK(json_is_false(json_object_get(ds, "additionalProperties")));
    json_t *lr = json_object_get(
        json_object_get(json_object_get(props, "optimizer"), "properties"), "lr");
    T_EQ_STR(get_str(lr, "type"), "number");
    T_CHECK(json_object_get(lr, "exclusiveMinimum"));
    json_t *swept_lr = json_object_get(
        json_object_get(json_object_get(props, "sweep"), "properties"), "optimizer.lr");
    T_EQ_STR(get_str(swept_lr, "type"), "array");
    json_t *minb = json_object_get(props, "min_bytes");
    T_EQ_STR(get_str(minb, "default"), "4K");
    json_t *any = json_object_get(minb, "anyOf");
    T_EQ_INT(json_array_size(any), 2);
    T_CHECK(get_str(json_array_get(any, 1), "pattern"));
    T_EQ_INT(json_array_size(json_object_get(json_object_get(props, "step"), "anyOf")), 3);
    const char *key;
    json_t *v;
    json_object_foreach(props, key, v)
        T_CHECK_MSG(get_str(v, "description"), "%s has no description", key);
    json_t *sweep = json_object_get(props, "sweep");
    T_CHECK(json_is_false(json_object_get(sweep, "additionalProperties")));
    json_t *sp = json_object_get(sweep, "properties");
    T_CHECK(!json_object_get(sp, "name"));
    T_CHECK(!json_object_get(sp, "workload"));
    json_t *sws = json_object_get(sp, "world_size");
    T_EQ_STR(get_str(sws, "type"), "array");
    T_EQ_INT(get_int(sws, "maxItems"), SPEC_MAX_SWEEP_VALUES);
    T_EQ_INT(get_int(json_object_get(sws, "items"), "maximum"), SPEC_MAX_WORLD);
    /* the sweep limits are in the schema: per list as maxItems, the runs in the text */
    json_object_foreach(sp, key, v)
    {
        T_EQ_INT(get_int(v, "minItems"), 1);
        T_EQ_INT(get_int(v, "maxItems"), SPEC_MAX_SWEEP_VALUES);
    }
    char runs[64], values[64];
    snprintf(runs, sizeof runs, "at most %d runs", SPEC_MAX_RUNS);
    snprintf(values, sizeof values, "1 to %d distinct values", SPEC_MAX_SWEEP_VALUES);
    T_CHECK_MSG(strstr(get_str(sweep, "description"), runs) &&
                    strstr(get_str(sweep, "description"), values),
                "%s", get_str(sweep, "description"));
    json_decref(s);
}

/* The string pattern of a size (field `name`, or the items of "sizes" when item is true)
 * in the schema. Borrowed from s. */
static const char *size_pattern(const json_t *s, const char *name, bool item)
{
    const json_t *f = json_object_get(json_object_get(s, "properties"), name);
    const json_t *alts = json_object_get(item ? json_object_get(f, "items") : f, "anyOf");
    return get_str(json_array_get(alts, json_array_size(alts) - 1), "pattern");
}

/* Whether validation takes text (a JSON value) as field's value, in a spec in which no
 * rule between fields refuses it. */
static bool size_accepted(const char *field, const char *text)
{
    char spec[256];
    if (strcmp(field, "min_bytes") == 0)
        snprintf(spec, sizeof spec, W ", \"max_bytes\": 2147483648, \"min_bytes\": %s}", text);
    else if (strcmp(field, "max_bytes") == 0)
        snprintf(spec, sizeof spec, W ", \"min_bytes\": 1, \"max_bytes\": %s}", text);
    else if (strcmp(field, "step") == 0)
        snprintf(spec, sizeof spec, W ", \"factor\": 0, \"step\": %s}", text);
    else
        snprintf(spec, sizeof spec, W ", \"sizes\": [%s]}", text);
    struct err e = {0};
    json_t *out = parse_text(spec, &e);
    json_decref(out);
    return out != NULL;
}

/* Each size field's schema states exactly the range validation applies: its string
 * pattern (checked with POSIX ERE, which reads it as JSON Schema's ECMA 262 does) matches
 * a count just inside each unit's range and not one just outside, in every spelling, and
 * the integer form's bounds are the ones validation keeps. */
static void test_spec_schema_size_bounds(void)
{
    static const char *const fields[] = {"min_bytes", "max_bytes", "step", "sizes"};
    static const char *const units[] = {"", "K", "M", "G", "T"};
    static const char *const suffixes[] = {"", "B", "iB", "b"};
    json_t *s = spec_schema_json();
    int checked = 0;
    for (size_t fi = 0; fi < 4; fi++) {
        bool item = strcmp(fields[fi], "sizes") == 0;
        const char *pattern = size_pattern(s, fields[fi], item);
        regex_t re;
        T_CHECK_MSG(pattern && regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) == 0, "%s: %s",
                    fields[fi], pattern ? pattern : "no pattern");
        for (int u = 0; u < 5; u++) {
            int64_t hi = (INT64_C(2) << 30) >> (10 * u);
            int64_t counts[] = {0, 1, 2, hi - 1, hi, hi + 1, hi * 10};
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                for (size_t si = 0; si < 4; si++) {
                    if ((u == 0 && si == 2) || counts[ci] < 0)
                        continue; /* "4iB" is no size: the unit comes first */
                    char text[64], json[80];
                    snprintf(text, sizeof text, "%s%" PRId64 "%s%s", ci % 2 ? "00" : "",
                             counts[ci], u ? units[u] : "",
                             u ? suffixes[si] : suffixes[si % 2]);
                    snprintf(json, sizeof json, "\"%s\"", text);
                    bool matches = regexec(&re, text, 0, NULL, 0) == 0;
                    T_CHECK_MSG(matches == size_accepted(fields[fi], json),
                                "%s \"%s\": the pattern %s it, validation the opposite",
                                fields[fi], text, matches ? "takes" : "refuses");
                    checked++;
                }
            }
        }
        regfree(&re);
        /* the integer form: the range alternative's bounds, just inside and outside */
        const json_t *f = json_object_get(json_object_get(s, "properties"), fields[fi]);
        const json_t *alts = json_object_get(item ? json_object_get(f, "items") : f, "anyOf");
        const json_t *range = json_array_get(alts, json_array_size(alts) - 2);
        json_int_t lo = get_int(range, "minimum"), hi = get_int(range, "maximum");
        char text[32];
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, lo);
        T_CHECK_MSG(size_accepted(fields[fi], text), "%s %s", fields[fi], text);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, hi);
        T_CHECK_MSG(size_accepted(fields[fi], text), "%s %s", fields[fi], text);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, hi + 1);
        T_CHECK_MSG(!size_accepted(fields[fi], text), "%s %s", fields[fi], text);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, lo - 1);
        T_CHECK_MSG(size_accepted(fields[fi], text) == !strcmp(fields[fi], "step"), "%s %s",
                    fields[fi], text); /* step's 0 is "not used", its own alternative */
    }
    T_CHECK_MSG(checked > 400, "%d spellings", checked);
    json_decref(s);
}

/* The rules between fields are if/then and anyOf clauses whose verdicts
 * tests/integration/test_contract.py compares with the server's at each rule's edge; here,
 * that a rule's b either belongs to every workload the rule is of or has an allowed
 * default, which spec_schema_allowed_rules relies on (it never requires b). */
static void test_spec_schema_allowed_defaults(void)
{
    json_t *s = spec_schema_json();
    size_t i;
    json_t *clause;
    int required = 0;
    json_array_foreach(json_object_get(s, "allOf"), i, clause)
    {
        json_t *alts = json_object_get(json_object_get(clause, "then"), "anyOf");
        json_t *last = json_array_get(alts, json_array_size(alts) - 1);
        json_t *req = json_object_get(last, "required");
        if (!req)
            continue;
        required++;
        /* device "cuda" needs backend "nccl" (of every workload), backend "mpi" a launcher
         * other than the default (ddpbench), and the horovod and deepspeed engines a
         * strategy other than the default ddp (of train) */
        const char *b = json_string_value(json_array_get(req, 0));
        T_CHECK_MSG(strcmp(b, "backend") == 0 || strcmp(b, "strategy") == 0 ||
                        strcmp(b, "launcher") == 0,
                    "%s", b);
    }
    T_EQ_INT(required, 8); /* each as a field and as a sweep */
    json_decref(s);
}

/* "model" and "buckets_of" list exactly the rows of common/model_table.h, in its order, in
 * the schema and in what validation accepts; the row's name is what the spec keeps. */
static void test_spec_models_from_table(void)
{
    json_t *s = spec_schema_json();
    json_t *props = json_object_get(s, "properties");
    json_t *models = json_object_get(json_object_get(props, "model"), "enum");
    json_t *buckets = json_object_get(json_object_get(props, "buckets_of"), "enum");
    T_EQ_INT((int)json_array_size(models), (int)model_table_count());
    T_EQ_INT((int)json_array_size(buckets), (int)model_table_count() + 1);
    T_EQ_STR(json_string_value(json_array_get(buckets, 0)), "none");
    for (size_t i = 0; i < model_table_count(); i++) {
        const char *name = model_table_at(i)->name;
        T_EQ_STR(json_string_value(json_array_get(models, i)), name);
        T_EQ_STR(json_string_value(json_array_get(buckets, i + 1)), name);
        char text[160];
        snprintf(text, sizeof text, TR ", \"model\": \"%s\"}", name);
        json_t *ok = parse_ok(text);
        T_CHECK_MSG(ok && !strcmp(get_str(ok, "model"), name), "%s", name);
        json_decref(ok);
        snprintf(text, sizeof text, W ", \"buckets_of\": \"%s\"}", name);
        ok = parse_ok(text);
        T_CHECK_MSG(ok && !strcmp(get_str(ok, "buckets_of"), name), "%s", name);
        json_decref(ok);
    }
    json_decref(s);
    T_CHECK(spec_rejects(W ", \"buckets_of\": \"resnet19\"}", ERR_INVALID, "buckets_of",
                         "must be one of \"none\", \"mnist-cnn\""));
}

static void test_spec_examples_valid(void)
{
    const char *src = source_dir();
    T_CHECK_MSG(src, "set DDPB_SOURCE_DIR to the source tree (meson test does)");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/schema/examples", src);
    DIR *d = opendir(dir);
    T_CHECK_MSG(d, "%s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl < 5 || strcmp(de->d_name + nl - 5, ".json") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t len;
        char *text = read_whole(path, &len);
        struct err e = {0};
        json_t *s = text ? spec_parse(text, len, &e) : NULL;
        json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
        bool ok = runs && json_array_size(runs) >= 1;
        if (ok && strcmp(de->d_name, "allreduce-sweep.json") == 0)
            ok = json_array_size(runs) == 3;
        json_decref(runs);
        json_decref(s);
        free(text);
        if (!ok) {
            closedir(d);
            T_CHECK_MSG(ok, "%s: %s", path, e.msg);
        }
        n++;
    }
    closedir(d);
    T_CHECK_MSG(n >= 2, "only %d examples in %s", n, dir);
}

/* Writes text (owned: freed here) to path; 0 or 1 as the exit status. */
static int spec_write_text(const char *path, char *text)
{
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f && fputs(text, f) >= 0 ? 0 : 1;
    if (f && fclose(f) != 0)
        rc = 1;
    free(text);
    fprintf(stderr, rc ? "cannot write %s\n" : "wrote %s\n", path);
    return rc;
}

/* --- faults (issue 32, common/spec_faults.c): the normal form, struct spec_fault, every
 * refusal naming the fault's member, the checks against world_size and nodes, a sweep over
 * whole lists, and the schema and vocabulary rows ------------------------------------- */

#define FT2 "{\"workload\": \"train\", \"world_size\": 2, "

static void test_spec_faults_default_empty(void)
{
    struct err e = {0};
    json_t *s = parse_text("{\"workload\": \"train\"}", &e);
    T_CHECK(s != NULL);
    const json_t *f = json_object_get(s, "faults");
    T_CHECK(json_is_array(f) && json_array_size(f) == 0);
    struct spec sp;
    T_CHECK(spec_from_json(s, &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 0);
    json_decref(s);
}

static void test_spec_faults_normal_form_and_struct(void)
{
    struct err e = {0};
    json_t *s = parse_text(
        FT2 "\"faults\": [{\"rank\": 1, \"kind\": \"stop\", \"duration_s\": 2, "
            "\"at_step\": 5}, {\"node\": 0, \"at_s\": 3, \"kind\": \"slow\", "
            "\"fraction\": 0.25, \"duration_s\": 1.5}, {\"at_step\": 9, \"rank\": "
            "0, \"kind\": \"kill\"}]}",
        &e);
    T_CHECK_MSG(s != NULL, "%s", e.msg);
    const json_t *f0 = json_array_get(json_object_get(s, "faults"), 0);
    /* members in a fixed order, the numbers as reals */
    const char *key = json_object_iter_key(json_object_iter((json_t *)f0));
    T_EQ_STR(key, "kind");
    T_CHECK(json_is_real(json_object_get(f0, "duration_s")));
    T_CHECK(json_is_integer(json_object_get(f0, "at_step")));
    /* normalizing again changes nothing */
    json_t *again = spec_normalize(s, &e);
    T_CHECK(again && json_equal(again, s));
    json_decref(again);
    struct spec sp;
    T_CHECK(spec_from_json(s, &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 3);
    T_EQ_STR(sp.faults[0].kind, "stop");
    T_EQ_INT(sp.faults[0].at_step, 5);
    T_CHECK(sp.faults[0].at_s == -1);
    T_EQ_INT(sp.faults[0].rank, 1);
    T_EQ_INT(sp.faults[0].node, -1);
    T_CHECK(sp.faults[0].duration_s == 2);
    T_EQ_STR(sp.faults[1].kind, "slow");
    T_EQ_INT(sp.faults[1].at_step, -1);
    T_CHECK(sp.faults[1].at_s == 3);
    T_EQ_INT(sp.faults[1].rank, -1);
    T_EQ_INT(sp.faults[1].node, 0);
    T_CHECK(sp.faults[1].fraction == 0.25);
    T_EQ_STR(sp.faults[2].kind, "kill");
    T_CHECK(sp.faults[2].duration_s == 0);
    json_decref(s);
}

static void test_spec_faults_refused(void)
{
    static const struct {
        const char *text, *field, *part;
    } cases[] = {
        {FT2 "\"faults\": {}}", "faults", "a list of at most 16"},
        {FT2 "\"faults\": [3]}", "faults[0]", "must be an object"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0}]}", "faults[0].kind", "is required"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"boom\"}]}",
         "faults[0].kind", "kill, stop, slow or link"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\", \"why\": 1}]}",
         "faults[0].why", "unknown field"},
        {FT2 "\"faults\": [{\"rank\": 0, \"kind\": \"kill\"}]}", "faults[0].at_step",
         "is required (or at_s)"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"at_s\": 1, \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_s", "mutually exclusive"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"kind\": \"kill\"}]}", "faults[0].rank",
         "is required (or node)"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"node\": 0, \"kind\": \"kill\"}]}",
         "faults[0].node", "mutually exclusive"},
        {FT2 "\"faults\": [{\"at_step\": -1, \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_step", "an integer from 0"},
        {FT2 "\"faults\": [{\"at_s\": \"1\", \"rank\": 0, \"kind\": \"kill\"}]}",
         "faults[0].at_s", "a number"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 1.5, \"kind\": \"kill\"}]}",
         "faults[0].rank", "an integer"},
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\"}]}",
         "faults[0].duration_s", "is required with kind \"stop\""},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\", \"duration_s\": 1}]}",
         "faults[0].duration_s", "kind \"kill\" takes no duration_s"},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\", \"duration_s\": 0}]}",
         "faults[0].duration_s", "greater than 0"},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1}]}",
         "faults[0].fraction", "is required with kind \"slow\""},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1, "
         "\"fraction\": 1}]}",
         "faults[0].fraction", "less than 1"},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"slow\", \"duration_s\": 1, "
         "\"fraction\": 0}]}",
         "faults[0].fraction", "greater than 0"},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"stop\", \"duration_s\": 1, "
         "\"fraction\": 0.5}]}",
         "faults[0].fraction", "kind \"stop\" takes no fraction"},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"node\": 0, \"kind\": \"link\", \"duration_s\": 1}]}",
         "faults[0].rate", "is required with kind \"link\""},
        {FT2
         "\"faults\": [{\"at_step\": 1, \"node\": 0, \"kind\": \"link\", \"duration_s\": 1, "
         "\"rate\": \"10mbit\"}]}",
         "faults[0].rate", "a number"},
        /* the element at fault is named, not the first */
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 0, \"kind\": \"kill\"}, {\"at_step\": 2, "
             "\"rank\": 0, \"kind\": \"stop\"}]}",
         "faults[1].duration_s", "is required"},
        /* against the run's ranks and nodes */
        {FT2 "\"faults\": [{\"at_step\": 1, \"rank\": 2, \"kind\": \"kill\"}]}",
         "faults[0].rank", "the run has 2 ranks"},
        {FT2 "\"nodes\": 2, \"faults\": [{\"at_step\": 1, \"node\": 2, \"kind\": \"kill\"}]}",
         "faults[0].node", "spans 2 nodes"},
        {FT2 "\"ranks_per_node\": 2, \"faults\": [{\"at_step\": 1, \"node\": 1, \"kind\": "
             "\"kill\"}]}",
         "faults[0].node", "spans 1 node"},
        /* in a sweep: the point, and the member */
        {FT2
         "\"sweep\": {\"faults\": [[], [{\"at_step\": 1, \"rank\": 5, \"kind\": \"kill\"}]]}}",
         "faults[0].rank", "sweep point 2 of 2"},
        {FT2 "\"sweep\": {\"faults\": [[], [{\"at_step\": 1, \"kind\": \"kill\"}]]}}",
         "sweep.faults[1][0].rank", "is required"},
        {FT2 "\"sweep\": {\"faults\": [[], []]}}", "sweep.faults[1]", "already listed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(spec_rejects(cases[i].text, ERR_INVALID, cases[i].field, cases[i].part),
                    "case %zu", i);
}

static void test_spec_faults_seventeen_refused(void)
{
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text, FT2 "\"faults\": [");
    for (int i = 0; i < SPEC_MAX_FAULTS + 1; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "%s{\"at_step\": %d, \"rank\": 0, \"kind\": \"kill\"}",
                                i ? ", " : "", i);
    snprintf(text + len, sizeof text - len, "]}");
    T_CHECK(spec_rejects(text, ERR_INVALID, "faults", "at most 16"));
    /* sixteen are fine */
    char *cut = strrchr(text, '{');
    snprintf(cut - 2, 3, "]}");
    struct err e = {0};
    json_t *s = parse_text(text, &e);
    T_CHECK_MSG(s && json_array_size(json_object_get(s, "faults")) == SPEC_MAX_FAULTS, "%s",
                e.msg);
    json_decref(s);
}

/* A nodes-less spec leaves a node beyond 0 to placement; the sweep gives whole lists. */
static void test_spec_faults_sweep_whole_lists(void)
{
    struct err e = {0};
    json_t *s = parse_text(FT2 "\"sweep\": {\"faults\": [[], [{\"at_step\": 200, \"rank\": 1, "
                               "\"kind\": \"kill\"}]]}}",
                           &e);
    T_CHECK_MSG(s != NULL, "%s", e.msg);
    json_t *runs = s ? spec_expand(s, SPEC_MAX_RUNS, &e) : NULL;
    T_CHECK(json_array_size(runs) == 2);
    const json_t *p0 = json_object_get(json_array_get(runs, 0), "params");
    const json_t *p1 = json_object_get(json_array_get(runs, 1), "params");
    T_EQ_INT((int)json_array_size(json_object_get(p0, "faults")), 0);
    T_EQ_INT((int)json_array_size(json_object_get(p1, "faults")), 1);
    struct spec sp;
    T_CHECK(spec_from_json(json_object_get(json_array_get(runs, 1), "spec"), &sp, &e) == 0);
    T_EQ_INT(sp.n_faults, 1);
    T_EQ_INT(sp.faults[0].at_step, 200);
    json_decref(runs);
    json_decref(s);
    s = parse_text(FT2 "\"faults\": [{\"at_step\": 1, \"node\": 3, \"kind\": \"kill\"}]}", &e);
    T_CHECK_MSG(s != NULL, "node 3 without nodes is placement's to judge: %s", e.msg);
    json_decref(s);
}

static void test_spec_faults_schema_and_vocabulary(void)
{
    json_t *schema = spec_schema_json();
    const json_t *f = json_object_get(json_object_get(schema, "properties"), "faults");
    T_CHECK(f != NULL);
    T_EQ_STR(json_string_value(json_object_get(f, "type")), "array");
    T_EQ_INT((int)json_integer_value(json_object_get(f, "maxItems")), SPEC_MAX_FAULTS);
    const json_t *kinds = json_object_get(
        json_object_get(json_object_get(json_object_get(f, "items"), "properties"), "kind"),
        "enum");
    T_EQ_INT((int)json_array_size(kinds), VOCAB_NFAULTS);
    json_decref(schema);
    json_t *v = vocab_json();
    const json_t *rows = json_object_get(v, "fault_kinds");
    T_EQ_INT((int)json_array_size(rows), VOCAB_NFAULTS);
    T_EQ_STR(json_string_value(json_object_get(json_array_get(rows, 3), "name")), "link");
    T_CHECK(json_is_true(json_object_get(json_array_get(rows, 3), "network")));
    T_CHECK(vocab_fault(VOCAB_FAULT_SLOW)->fraction &&
            !vocab_fault(VOCAB_FAULT_KILL)->duration);
    json_decref(v);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-schema") == 0)
        return spec_write_text(argv[2], schema_text_now());
    if (argc == 3 && strcmp(argv[1], "--write-vocabulary") == 0)
        return spec_write_text(
            argv[2], /* test_vocab checks it */
            json_file_text(vocab_json(), JSON_REAL_PRECISION(VOCAB_JSON_REAL_PRECISION)));
    test_begin(argc, argv);
    TEST_RUN(test_spec_defaults);
    TEST_RUN(test_spec_nondefault);
    TEST_RUN(test_spec_given_values_kept);
    TEST_RUN(test_spec_normalize_idempotent);
    TEST_RUN(test_spec_factor_step);
    TEST_RUN(test_spec_exact_messages);
    TEST_RUN(test_spec_rejects_bad_fields);
    TEST_RUN(test_spec_string_lengths);
    TEST_RUN(test_spec_rejects_bad_documents);
    TEST_RUN(test_spec_too_large);
    TEST_RUN(test_spec_parse_size);
    TEST_RUN(test_spec_sizes_in_spec);
    TEST_RUN(test_spec_sweep_errors);
    TEST_RUN(test_spec_sweep_expand_order);
    TEST_RUN(test_spec_expand_without_sweep);
    TEST_RUN(test_spec_sweep_product_limit);
    TEST_RUN(test_spec_sweep_point_rule);
    TEST_RUN(test_spec_from_json);
    TEST_RUN(test_spec_train_defaults_and_struct);
    TEST_RUN(test_spec_train_rejects);
    TEST_RUN(test_spec_train_sweep_nested);
    TEST_RUN(test_spec_sweep_zip_expand);
    TEST_RUN(test_spec_sweep_zip_refused);
    TEST_RUN(test_spec_memory_estimate);
    TEST_RUN(test_spec_transformer_rules);
    TEST_RUN(test_spec_pipeline_rules);
    TEST_RUN(test_spec_dataset_workers);
    TEST_RUN(test_spec_data_pipeline);
    TEST_RUN(test_spec_framework_data);
    TEST_RUN(test_spec_device_compat);
    TEST_RUN(test_spec_precision_knobs);
    TEST_RUN(test_spec_transport);
    TEST_RUN(test_spec_elastic);
    TEST_RUN(test_spec_mpi_mca);
    TEST_RUN(test_spec_check_order_and_scope);
    TEST_RUN(test_spec_collective_sizes);
    TEST_RUN(test_spec_sizes_from_parsed_spec);
    TEST_RUN(test_spec_sizes_list_and_collective_fields);
    TEST_RUN(test_spec_schema_file_in_sync);
    TEST_RUN(test_spec_schema_content);
    TEST_RUN(test_spec_schema_size_bounds);
    TEST_RUN(test_spec_schema_allowed_defaults);
    TEST_RUN(test_spec_models_from_table);
    TEST_RUN(test_spec_examples_valid);
    TEST_RUN(test_spec_faults_default_empty);
    TEST_RUN(test_spec_faults_normal_form_and_struct);
    TEST_RUN(test_spec_faults_refused);
    TEST_RUN(test_spec_frameworks_and_single_process);
    TEST_RUN(test_spec_faults_seventeen_refused);
    TEST_RUN(test_spec_faults_sweep_whole_lists);
    TEST_RUN(test_spec_faults_schema_and_vocabulary);
    TEST_RUN(test_spec_storage_layer);
    TEST_RUN(test_spec_collective_engine);
    return test_end();
}
