/* json_file: the text of a committed JSON file that a generator writes and a test compares
 * (schema/spec.schema.json, schema/vocabulary.json), so the writer and the checker make it
 * the same way. */
#ifndef DDPB_TEST_JSON_FILE_H
#define DDPB_TEST_JSON_FILE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v (consumed: decref'd here) as two-space-indented JSON, keys in insertion order, with a
 * final newline; flags adds jansson flags (JSON_REAL_PRECISION). Owned by the caller
 * (free); NULL when v is NULL or out of memory. */
static inline char *json_file_text(json_t *v, size_t flags)
{
    char *text = v ? json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER | flags) : NULL;
    json_decref(v);
    char *out = text ? malloc(strlen(text) + 2) : NULL;
    if (out)
        sprintf(out, "%s\n", text);
    free(text);
    return out;
}

#endif
