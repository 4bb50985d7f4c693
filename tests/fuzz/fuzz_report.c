/* libFuzzer target for common/report: arbitrary bytes as one report line from a worker
 * (the daemon's trust boundary with its workers). A line that parses must convert to
 * its struct when it is a collective, step or epoch event, and a rejected line must say
 * why. */
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
    int rc = 0;
    if (type == REPORT_COLLECTIVE)
        rc = report_collective_from_json(ev, &c, &e);
    else if (type == REPORT_STEP)
        rc = report_step_from_json(ev, &s, &e);
    else if (type == REPORT_EPOCH)
        rc = report_epoch_from_json(ev, &ep, &e);
    if (rc < 0)
        abort();
    json_decref(ev);
    return 0;
}
