/* libFuzzer target for common/report: arbitrary bytes as one report line from a worker
 * (the daemon's trust boundary with its workers). A line that parses must convert to
 * its struct when it is a collective, step, epoch, memory, usage or trace event, and a
 * rejected line must say why. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err e = {0};
    enum report_type type;
    json_t *ev = report_parse_line((const char *)data, size, &type, &e);
    if (!ev) {
        if (e.code == ERR_OK || e.msg[0] == '\0')
            abort();
        return 0;
    }
    struct report_collective c;
    struct report_step s;
    struct report_epoch ep;
    struct report_memory m;
    struct report_usage u;
    struct report_trace t;
    struct report_grads g;
    int rc = 0;
    if (type == REPORT_COLLECTIVE)
        rc = report_collective_from_json(ev, &c, &e);
    else if (type == REPORT_STEP)
        rc = report_step_from_json(ev, &s, &e);
    else if (type == REPORT_EPOCH)
        rc = report_epoch_from_json(ev, &ep, &e);
    else if (type == REPORT_MEMORY)
        rc = report_memory_from_json(ev, &m, &e);
    else if (type == REPORT_USAGE)
        rc = report_usage_from_json(ev, &u, &e);
    else if (type == REPORT_TRACE) /* every entry checked: an end never before its start */
        rc = report_trace_from_json(ev, &t, &e) < 0 ||
                     json_array_size(t.spans) > REPORT_TRACE_MAX ||
                     json_array_size(t.ops) > REPORT_TRACE_MAX
                 ? -1
                 : 0;
    else if (type == REPORT_GRADS) /* every entry two integers >= 0 */
        rc = report_grads_from_json(ev, &g, &e) < 0 ||
                     json_array_size(g.tensors) > REPORT_TRACE_MAX ||
                     (json_array_size(g.tensors) > 0 &&
                      json_integer_value(json_array_get(json_array_get(g.tensors, 0), 1)) < 0)
                 ? -1
                 : 0;
    if (rc < 0)
        abort();
    json_decref(ev);
    return 0;
}
