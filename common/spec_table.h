/* spec_table: internal to the spec module (common/spec*.c); nothing outside common/spec*.c
 * includes it. The types of the field and rule tables, the tables as the module's files
 * see them, and the small lookups and text helpers every one of those files uses.
 *
 * Decision: the tables are defined in spec_table.c, where a field is added (one row), and
 * exported here as a pointer and a count, so the files split off by concern (validation,
 * the checks, sweeps, the memory estimate, the JSON Schema) read the same rows without a
 * second copy. spec_table.c sits below every other file of the module, and the public
 * common/spec.h has no source of its own, so the module's calls run one way:
 * spec_parse.c -> spec_checks.c -> spec_sweep.c, spec_memory.c -> spec_table.c;
 * spec_schema.c -> spec_table.c (tests/lint/check_layers.py checks it). */
#ifndef DDPB_COMMON_SPEC_TABLE_H
#define DDPB_COMMON_SPEC_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/spec.h"
#include "common/vocab.h"

#define SPEC_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SPEC_SIZE_LIMIT (INT64_C(2) << 30) /* 2G: largest message a spec may ask for */
#define SPEC_WL_ANY 0xffffffffu
#define SPEC_WL_COLLECTIVE (1u << SPEC_WORKLOAD_COLLECTIVE)
#define SPEC_WL_TRAIN (1u << SPEC_WORKLOAD_TRAIN)
#define SPEC_MAX_FIELDS 128 /* at least the rows of spec_fields[] (spec_table.c asserts it) */
#define SPEC_GIB (1024.0 * 1024.0 * 1024.0)

enum spec_type {
    SPEC_T_STRING,
    SPEC_T_ENUM,
    SPEC_T_INT,
    SPEC_T_SIZE,
    SPEC_T_BOOL,
    SPEC_T_SIZE_LIST, /* distinct sizes, at most SPEC_MAX_SIZES */
    SPEC_T_NUMBER,    /* a real number in [dmin, dmax] */
    SPEC_T_SHAPE,     /* [] or [c, h, w], each from min to max */
    SPEC_T_FAULTS,    /* a list of at most SPEC_MAX_FAULTS faults (spec_faults.c); off is
                         struct spec's n_faults (spec_faults_store fills it and faults[]) */
    SPEC_T_MAP        /* an object of at most SPEC_MAX_MPI_PARAMS string entries, keys and
                         values matching the SPEC_MAP_* patterns; the member at off is an
                         int count directly followed by struct spec_mpi_param entries */
};

/* mpi_mca's entries: an OpenMPI MCA parameter name or an MPICH control variable, and a
 * value without shell characters (it reaches MPI's environment and mpirun's command
 * line). spec_map_key_ok / spec_map_value_ok check the same as the patterns. */
#define SPEC_MAP_KEY_PATTERN "^([a-z][a-z0-9_]{0,62}|MPIR_CVAR_[A-Z0-9_]{1,53})$"
#define SPEC_MAP_VALUE_PATTERN "^[A-Za-z0-9_.,:/^+=@-]{1,127}$"

enum spec_flag {
    SPEC_F_REQUIRED = 1 << 0,
    SPEC_F_SWEEP = 1 << 1,          /* may be listed under "sweep" */
    SPEC_F_ZERO_UNSET = 1 << 2,     /* 0 = not used (the other field of its one-of rule is) */
    SPEC_F_PRINTABLE = 1 << 3,      /* printable ASCII only: names end up in files, CSV, UIs */
    SPEC_F_WORKLOAD = 1 << 4,       /* selects the workload; stored as enum spec_workload */
    SPEC_F_OPTIONAL_GROUP = 1 << 5, /* its group is filled (defaults and all) only when
                                       given or one of its fields is swept; absent, the
                                       feature is off ("elastic") */
};

struct spec_field {
    const char *name;
    enum spec_type type;
    unsigned workloads; /* bit (1 << enum spec_workload) per workload having it */
    unsigned flags;     /* enum spec_flag */
    int64_t min, max;   /* INT, SIZE, SHAPE: value range; STRING: length in
                                   characters */
    double dmin, dmax;  /* NUMBER: value range (dmin excluded when dmin_open) */
    bool dmin_open;
    const char *const *choices;      /* ENUM: NULL-terminated (workload: in enum order) */
    const char *(*choice_at)(int i); /* ENUM without choices: the i-th value, NULL after
                                        the last (the model table's names) */
    const char *def;                 /* default as JSON text; NULL: none, or for a string
                                   that is not required, the workload's name */
    size_t off, size;                /* struct spec member it fills; size 0: none */
    const char *desc;
};

enum spec_rule_kind {
    SPEC_RULE_LE,      /* a <= b */
    SPEC_RULE_ONE_OF,  /* exactly one of a and b is non-zero; a is the default one */
    SPEC_RULE_ALLOWED, /* b's value is one the table allows for a's value */
    SPEC_RULE_FILLS,   /* a x b = world_size when both are non-zero (placement) */
};

/* For SPEC_RULE_ALLOWED: the values of b allowed with a value of a (values as text: a
 * string's characters, a boolean's "true" or "false"), and why the others are not (NULL:
 * the reason is the list itself). */
struct spec_allowed {
    const char *a;
    const char *const *b;
    const char *why;
};

struct spec_rule {
    enum spec_rule_kind kind;
    unsigned workloads;
    const char *a, *b;
    const struct spec_allowed *allowed; /* SPEC_RULE_ALLOWED: NULL-terminated */
};

/* The tables (defined in spec_table.c): fields in table order, rules, workload names in enum
 * order (NULL-terminated). */
extern const struct spec_field *const spec_field_table;
extern const size_t spec_field_count;
extern const struct spec_rule *const spec_rule_table;
extern const size_t spec_rule_count;
extern const char *const *const spec_workload_table;

/* --- the checks (spec_checks.c) --------------------------------------------------------- */

/* Runs every cross-field check of spec_checks[] on a normalized spec of workload wl: its
 * top level, then each point of its sweep. Returns 0, or -1 with e naming the field (a
 * point's error names "sweep" and the point). */
int spec_checks_run(const json_t *norm, enum spec_workload wl, struct err *e);

/* --- sweeps (spec_sweep.c) -------------------------------------------------------------- */

/* Called for each point: params and resolved are borrowed for the call. */
typedef int (*spec_point_fn)(void *arg, size_t index, const json_t *params,
                             const json_t *resolved, struct err *e);

/* Calls fn for each point of a normalized spec's sweep (once, with no params, without
 * one), last field fastest; stops at the first non-zero return and returns it. */
int spec_sweep_walk(const json_t *norm, spec_point_fn fn, void *arg, struct err *e);
/* The sweep's key of the points whose fields vary together (issue 33). */
#define SPEC_SWEEP_ZIP "zip"
/* Every field a sweep varies, swept or zipped, as an owned object {name: anything}: what
 * the top-level checks skip and the one-of pairs count as given. sweep may be NULL. */
json_t *spec_sweep_fields(const json_t *sweep);
/* The index of the zip point params came from (a walk's params), or -1 without one. */
int spec_sweep_zip_index(const json_t *sweep, const json_t *params);
/* Number of runs of a normalized spec into *total; an error naming "sweep" over cap. */
int spec_sweep_count(const json_t *norm, size_t cap, size_t *total, struct err *e);
/* The runs of a normalized spec ([{params, spec}], owned), or NULL with e set (over
 * max_runs, out of memory). */
json_t *spec_sweep_runs(const json_t *norm, size_t max_runs, struct err *e);

/* --- faults (spec_faults.c) ----------------------------------------------------------- */

/* Checks a "faults" value (path names it in errors: "faults", "sweep.faults[1]"). Returns 0
 * with *out its owned normal form, or -1 with e naming the element and member at fault
 * ("faults[1].duration_s"). e may be NULL. */
int spec_faults_convert(const json_t *v, const char *path, json_t **out, struct err *e);
/* Fills s->n_faults and s->faults from a normalized "faults" value. Returns 0, or -1 when
 * it holds more than SPEC_MAX_FAULTS. */
int spec_faults_store(const json_t *v, struct spec *s);
/* Refuses a fault whose rank is not below world_size ("faults[i].rank"), or whose node
 * is not below nodes when nodes > 0 ("faults[i].node"; nodes 0: known once the run is
 * placed). path: the list's name in messages. Returns 0 or -1 with e set. */
int spec_faults_check_placement(const json_t *faults, int world_size, int nodes,
                                const char *path, struct err *e);
/* The JSON Schema of a "faults" value (owned). */
json_t *spec_faults_schema(void);

/* --- lookups and text (spec_table.c) ---------------------------------------------------- */

/* Whether an optional group's field (SPEC_F_OPTIONAL_GROUP) is on in a spec: its group
 * is given in in, or one of the group's fields is swept (sweep may be NULL). */
bool spec_group_given(const json_t *in, const json_t *sweep, const char *field);
/* The row of a field by its full name ("dataset.name"), or NULL. */
const struct spec_field *spec_field_find(const char *name);
/* The vocabulary's row of the spec's strategy (common/vocab.h), so a rule reads what a
 * strategy does (shards the optimizer, fuses) rather than testing its name; NULL when the
 * spec names none or one the vocabulary lacks. Borrowed. */
const struct vocab_strategy *spec_strategy_of(const json_t *spec);
bool spec_field_in(const struct spec_field *f, enum spec_workload wl);
bool spec_rule_in(const struct spec_rule *r, enum spec_workload wl);
/* Whether s matches SPEC_MAP_KEY_PATTERN / SPEC_MAP_VALUE_PATTERN. */
bool spec_map_key_ok(const char *s);
bool spec_map_value_ok(const char *s);
/* Index of s in a NULL-terminated list, or -1. */
int spec_list_index(const char *const *list, const char *s);
/* The i-th allowed value of an ENUM field, NULL after the last. */
const char *spec_choice(const struct spec_field *f, int i);
/* Sets field `name` of spec to v (stolen, as json_object_set_new), making the group
 * object when missing. Returns 0 or -1 (out of memory; v is released). */
int spec_set_path(json_t *spec, const char *name, json_t *v);
/* Appends s to out (n bytes, *len used so far), cutting at n. */
void spec_append(char *out, size_t n, size_t *len, const char *s);
/* A value as compact ASCII JSON for "got ..." (messages end up in JSON replies, so no
 * raw bytes that could be cut inside a UTF-8 sequence). */
void spec_value_text(const json_t *v, char *out, size_t n);

#endif
