/* comm: the backend-independent helpers of comm.h (dtype and reduction names, sizes).
 *
 * Decision: one table per enum, indexed by the enum value, so a name, a size and the
 * parser can never disagree; the names are the ones specs and reports use. */
#include "comm.h"

#include <string.h>

struct comm_dtype_info {
    const char *name;
    size_t size;
};

static const struct comm_dtype_info comm_dtypes[] = {
    [COMM_FLOAT32] = {"float32", 4},
    [COMM_FLOAT16] = {"float16", 2},
    [COMM_BFLOAT16] = {"bfloat16", 2},
    [COMM_INT32] = {"int32", 4},
    [COMM_INT64] = {"int64", 8},
};

static const char *const comm_redops[] = {
    [COMM_SUM] = "sum",
    [COMM_AVG] = "avg",
    [COMM_MIN] = "min",
    [COMM_MAX] = "max",
};

#define COMM_N_DTYPES (sizeof comm_dtypes / sizeof comm_dtypes[0])
#define COMM_N_REDOPS (sizeof comm_redops / sizeof comm_redops[0])

size_t comm_dtype_size(enum comm_dtype t)
{
    return (size_t)t < COMM_N_DTYPES ? comm_dtypes[t].size : 0;
}

const char *comm_dtype_name(enum comm_dtype t)
{
    return (size_t)t < COMM_N_DTYPES ? comm_dtypes[t].name : "unknown";
}

int comm_dtype_parse(const char *s, enum comm_dtype *out)
{
    for (size_t i = 0; i < COMM_N_DTYPES; i++) {
        if (strcmp(s, comm_dtypes[i].name) == 0) {
            *out = (enum comm_dtype)i;
            return 0;
        }
    }
    return -1;
}

const char *comm_redop_name(enum comm_redop op)
{
    return (size_t)op < COMM_N_REDOPS ? comm_redops[op] : "unknown";
}

int comm_redop_parse(const char *s, enum comm_redop *out)
{
    for (size_t i = 0; i < COMM_N_REDOPS; i++) {
        if (strcmp(s, comm_redops[i]) == 0) {
            *out = (enum comm_redop)i;
            return 0;
        }
    }
    return -1;
}
