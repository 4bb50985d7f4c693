/* libFuzzer target for common/spec: arbitrary bytes as a submitted spec body. What must
 * hold beyond "no crash, no leak" (ASan and LeakSanitizer watch): a spec that parses
 * normalizes to a fixed point (parsing its own serialization gives the same object), it
 * expands without error into at most SPEC_MAX_RUNS runs, and every expanded point
 * converts to a struct spec. A rejected spec always names why. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check_runs(const json_t *norm)
{
    struct err e = {0};
    json_t *runs = spec_expand(norm, SPEC_MAX_RUNS, &e);
    if (!runs || json_array_size(runs) == 0 || json_array_size(runs) > SPEC_MAX_RUNS)
        abort(); /* spec_parse already checked every point */
    size_t i;
    json_t *run;
    json_array_foreach(runs, i, run)
    {
        struct spec s;
        if (spec_from_json(json_object_get(run, "spec"), &s, &e) < 0)
            abort();
    }
    json_decref(runs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e = {0};
    json_t *norm = spec_parse((const char *)data, size, &e);
    if (!norm) {
        if (e.code == ERR_OK || e.msg[0] == '\0')
            abort();
        return 0;
    }
    char *text = json_dumps(norm, JSON_COMPACT);
    json_t *again = text ? spec_parse(text, strlen(text), &e) : NULL;
    if (!again || !json_equal(again, norm))
        abort();
    fuzz_check_runs(norm);
    json_decref(again);
    free(text);
    json_decref(norm);
    return 0;
}
