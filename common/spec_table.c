/* spec_table: the lookups in the spec module's tables and the text helpers every file of
 * the module uses (declared in common/spec_table.h, internal to the module), and
 * spec_field_value of spec.h.
 *
 * Decision: these sit below every other file of the module and call none of them, so
 * spec.c, the checks, sweeps, the memory estimate and the schema generator all use one
 * copy without calling each other in a loop. */
#include "common/spec_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct spec_field *spec_field_find(const char *name)
{
    for (size_t i = 0; i < spec_field_count; i++)
        if (strcmp(spec_field_table[i].name, name) == 0)
            return &spec_field_table[i];
    return NULL;
}

bool spec_field_in(const struct spec_field *f, enum spec_workload wl)
{
    return (f->workloads >> (unsigned)wl) & 1u;
}

bool spec_rule_in(const struct spec_rule *r, enum spec_workload wl)
{
    return (r->workloads >> (unsigned)wl) & 1u;
}

int spec_list_index(const char *const *list, const char *s)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], s) == 0)
            return i;
    return -1;
}

const char *spec_choice(const struct spec_field *f, int i)
{
    return f->choices ? f->choices[i] : f->choice_at(i);
}

/* --- nested fields ----------------------------------------------------------------- */
/* A field named "group.key" lives in the object "group" of the spec: one level only. */

const json_t *spec_field_value(const json_t *spec, const char *name)
{
    const char *dot = strchr(name, '.');
    if (!dot)
        return json_object_get(spec, name);
    char group[32];
    size_t n = (size_t)(dot - name);
    if (n >= sizeof group)
        return NULL;
    memcpy(group, name, n);
    group[n] = '\0';
    return json_object_get(json_object_get(spec, group), dot + 1);
}

int spec_set_path(json_t *spec, const char *name, json_t *v)
{
    const char *dot = strchr(name, '.');
    if (!dot)
        return json_object_set_new(spec, name, v);
    char group[32];
    size_t n = (size_t)(dot - name);
    if (n >= sizeof group) {
        json_decref(v);
        return -1;
    }
    memcpy(group, name, n);
    group[n] = '\0';
    json_t *g = json_object_get(spec, group);
    if (!json_is_object(g)) {
        g = json_object();
        if (!g || json_object_set_new(spec, group, g) < 0) {
            json_decref(v);
            return -1;
        }
    }
    return json_object_set_new(g, dot + 1, v);
}

/* --- message helpers --------------------------------------------------------------- */

void spec_append(char *out, size_t n, size_t *len, const char *s)
{
    if (*len >= n)
        return;
    int k = snprintf(out + *len, n - *len, "%s", s);
    if (k > 0)
        *len += (size_t)k;
}

void spec_value_text(const json_t *v, char *out, size_t n)
{
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (!s)
        snprintf(out, n, "%s", "(nothing)");
    else if (strlen(s) >= n && n > 4)
        snprintf(out, n, "%.*s...", (int)(n - 4), s);
    else
        snprintf(out, n, "%s", s);
    free(s);
}
