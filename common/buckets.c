/* buckets: see buckets.h. */
#include "common/buckets.h"

#include <stdbool.h>
#include <stddef.h>

int buckets_by_size(const int64_t *bytes, int nt, int64_t first_cap, int64_t cap, int *bounds)
{
    int nb = 0;
    int64_t fill = 0;
    bounds[0] = 0;
    for (int t = 0; t < nt; t++) {
        fill += bytes[t];
        if (fill >= (nb == 0 ? first_cap : cap) || t == nt - 1) {
            bounds[++nb] = t + 1;
            fill = 0;
        }
    }
    return nb;
}

int buckets_by_cycle(const int64_t *bytes, const int64_t *ready_ns, int nt, int64_t cycle_ns,
                     int64_t fusion, int *bounds)
{
    int nb = 0;
    int64_t fill = 0;
    bounds[0] = 0;
    for (int t = 0; t < nt; t++) {
        bool new_cycle = t > bounds[nb] && ready_ns &&
                         (cycle_ns > 0 ? ready_ns[t] / cycle_ns != ready_ns[t - 1] / cycle_ns
                                       : ready_ns[t] != ready_ns[t - 1]);
        if (t > bounds[nb] && (new_cycle || fill + bytes[t] > fusion)) {
            bounds[++nb] = t;
            fill = 0;
        }
        fill += bytes[t];
    }
    if (nt > 0)
        bounds[++nb] = nt;
    return nb;
}

int buckets_by_limit(const int64_t *bytes, int nt, int64_t cap, int *bounds)
{
    return buckets_by_cycle(bytes, NULL, nt, 0, cap, bounds); /* all in one cycle */
}
