/* nvml: see nvml.h. Resolves every entry point at open: a library that lacks one is
 * "unavailable" as a whole, so a sample never calls through a NULL pointer. */
#include "common/nvml.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVML's ABI, as nvml.h (driver package) declares it */
typedef int nvml_ret;
typedef struct nvml_device_st *nvml_device;
struct nvml_util {
    unsigned gpu, memory;
};
struct nvml_memory {
    unsigned long long total, free, used;
};
#define NVML_SUCCESS 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_TEMPERATURE_GPU 0

struct gpu_nvml {
    void *dl; /* owned: dlclose */
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    const char *(*error_string)(nvml_ret);
    nvml_ret (*count)(unsigned *);
    nvml_ret (*handle)(unsigned, nvml_device *);
    nvml_ret (*name)(nvml_device, char *, unsigned);
    nvml_ret (*util)(nvml_device, struct nvml_util *);
    nvml_ret (*power)(nvml_device, unsigned *);
    nvml_ret (*clock)(nvml_device, int, unsigned *);
    nvml_ret (*temp)(nvml_device, int, unsigned *);
    nvml_ret (*memory)(nvml_device, struct nvml_memory *);
};

/* dlsym into *slot (a function pointer of any type); false when missing. */
static bool nvml_bind(struct gpu_nvml *n, void *slot, const char *sym, char *why, size_t len)
{
    void *p = dlsym(n->dl, sym);
    if (!p) {
        snprintf(why, len, "nvml unavailable: the library has no %s", sym);
        return false;
    }
    memcpy(slot, &p, sizeof p); /* object to function pointer, as POSIX dlsym allows */
    return true;
}

struct gpu_nvml *gpu_nvml_open(const char *lib, char *why, size_t whylen)
{
    char scratch[8];
    if (!why) {
        why = scratch;
        whylen = sizeof scratch;
    }
    const char *path = lib ? lib : GPU_NVML_DEFAULT_LIB;
    struct gpu_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(why, whylen, "nvml unavailable: out of memory");
        return NULL;
    }
    n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->dl) {
        const char *d = dlerror();
        snprintf(why, whylen, "nvml unavailable: %s", d ? d : path);
        free(n);
        return NULL;
    }
    if (!nvml_bind(n, &n->init, "nvmlInit_v2", why, whylen) ||
        !nvml_bind(n, &n->shutdown, "nvmlShutdown", why, whylen) ||
        !nvml_bind(n, &n->error_string, "nvmlErrorString", why, whylen) ||
        !nvml_bind(n, &n->count, "nvmlDeviceGetCount_v2", why, whylen) ||
        !nvml_bind(n, &n->handle, "nvmlDeviceGetHandleByIndex_v2", why, whylen) ||
        !nvml_bind(n, &n->name, "nvmlDeviceGetName", why, whylen) ||
        !nvml_bind(n, &n->util, "nvmlDeviceGetUtilizationRates", why, whylen) ||
        !nvml_bind(n, &n->power, "nvmlDeviceGetPowerUsage", why, whylen) ||
        !nvml_bind(n, &n->clock, "nvmlDeviceGetClockInfo", why, whylen) ||
        !nvml_bind(n, &n->temp, "nvmlDeviceGetTemperature", why, whylen) ||
        !nvml_bind(n, &n->memory, "nvmlDeviceGetMemoryInfo", why, whylen)) {
        dlclose(n->dl);
        free(n);
        return NULL;
    }
    nvml_ret rc = n->init();
    if (rc != NVML_SUCCESS) {
        snprintf(why, whylen, "nvml unavailable: nvmlInit: %s", n->error_string(rc));
        dlclose(n->dl);
        free(n);
        return NULL;
    }
    return n;
}

void gpu_nvml_close(struct gpu_nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    dlclose(n->dl);
    free(n);
}

int gpu_nvml_count(struct gpu_nvml *n, int *count, struct err *e)
{
    unsigned c = 0;
    nvml_ret rc = n->count(&c);
    if (rc != NVML_SUCCESS)
        return err_set(e, ERR_IO, NULL, "nvml: device count: %s", n->error_string(rc));
    *count = (int)c;
    return 0;
}

int gpu_nvml_sample(struct gpu_nvml *n, int index, struct gpu_nvml_sample *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    nvml_device d;
    nvml_ret rc = index < 0 ? 1 : n->handle((unsigned)index, &d);
    if (rc != NVML_SUCCESS)
        return err_set(e, ERR_INVALID, "device", "nvml: GPU %d: %s", index,
                       n->error_string(rc));
    /* counters a GPU lacks (NVML_ERROR_NOT_SUPPORTED) stay 0 */
    if (n->name(d, out->name, sizeof out->name) != NVML_SUCCESS)
        snprintf(out->name, sizeof out->name, "unknown");
    struct nvml_util u;
    if (n->util(d, &u) == NVML_SUCCESS) {
        out->util_gpu = u.gpu;
        out->util_mem = u.memory;
    }
    unsigned mw = 0;
    if (n->power(d, &mw) == NVML_SUCCESS)
        out->power_w = mw / 1000.0;
    n->clock(d, NVML_CLOCK_SM, &out->sm_mhz);
    n->clock(d, NVML_CLOCK_MEM, &out->mem_mhz);
    n->temp(d, NVML_TEMPERATURE_GPU, &out->temp_c);
    struct nvml_memory m;
    if (n->memory(d, &m) == NVML_SUCCESS) {
        out->mem_used = m.used;
        out->mem_total = m.total;
    }
    return 0;
}

int gpu_nvml_detect_count(const char *lib, char *why, size_t whylen)
{
    struct gpu_nvml *n = gpu_nvml_open(lib, why, whylen);
    if (!n)
        return 0;
    int count = 0;
    struct err e = {0};
    if (gpu_nvml_count(n, &count, &e) < 0) {
        if (why)
            snprintf(why, whylen, "nvml unavailable: %s", e.msg);
        count = 0;
    }
    gpu_nvml_close(n);
    return count;
}

int gpu_nvml_index_from_visible(const char *visible)
{
    if (!visible || !*visible)
        return 0;
    char *end;
    long v = strtol(visible, &end, 10);
    if (end == visible || (*end && *end != ',') || v < 0 || v > 1023)
        return 0; /* a UUID ("GPU-...") or garbage: NVML index unknown, take the first */
    return (int)v;
}

json_t *gpu_nvml_json(struct gpu_nvml *n, int index, const char *why)
{
    if (!n)
        return json_pack("{s:s}", "nvml", why && *why ? why : "nvml unavailable");
    struct gpu_nvml_sample s;
    struct err e = {0};
    if (gpu_nvml_sample(n, index, &s, &e) < 0)
        return json_pack("{s:s}", "nvml", e.msg);
    return json_pack("{s:s, s:{s:i, s:s, s:i, s:i, s:f, s:i, s:i, s:i, s:I, s:I}}", "nvml",
                     "ok", "gpu", "index", index, "name", s.name, "util_gpu", (int)s.util_gpu,
                     "util_mem", (int)s.util_mem, "power_w", s.power_w, "sm_mhz", (int)s.sm_mhz,
                     "mem_mhz", (int)s.mem_mhz, "temp_c", (int)s.temp_c, "mem_used",
                     (json_int_t)s.mem_used, "mem_total", (json_int_t)s.mem_total);
}
