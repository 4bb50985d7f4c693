/* metrics: the request counters of /metrics (api.h struct api_metrics): the histogram's
 * bounds, the status codes and methods counted, and recording one request.
 *
 * Decision: apart from routes.c: http.c records each request here and h_system.c (a
 * handler, which routes.c calls) reads the same tables, so they cannot live in the route
 * table's file without a loop between it and the handlers. */
#include <stdatomic.h>
#include <string.h>

#include "api/api.h"

const double api_latency_bounds[API_LATENCY_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                        0.025,  0.05,  0.1,    0.5,   2.5};
const int api_metric_codes[API_CODES] = {200, 201, 202, 204, 400, 401, 403, 404,
                                         405, 409, 413, 415, 500, 503, 504, 0};
const char *const api_metric_methods[API_METHODS] = {"GET", "POST", "DELETE", "OPTIONS",
                                                     "other"};

void api_metrics_record(struct api_metrics *m, const char *method, int status, double seconds)
{
    int mi = 0, ci = 0;
    while (mi < API_METHODS - 1 && strcmp(api_metric_methods[mi], method) != 0)
        mi++;
    while (ci < API_CODES - 1 && api_metric_codes[ci] != status)
        ci++;
    atomic_fetch_add(&m->requests[mi][ci], 1);
    for (int b = 0; b < API_LATENCY_BUCKETS; b++)
        if (seconds <= api_latency_bounds[b]) {
            atomic_fetch_add(&m->latency_le[b], 1);
            break;
        }
    atomic_fetch_add(&m->latency_count, 1);
    atomic_fetch_add(&m->latency_sum_us, (uint_fast64_t)(seconds * 1e6));
}
