/* fake_nvml: a stand-in for libnvidia-ml.so.1 with the entry points common/nvml.c binds,
 * so the worker's NVML sampling (worker/observe.c) is tested on a host without a GPU.
 *
 * Decision: every utilisation query returns the next of a known sequence (10, 20, 30, ...
 * percent GPU, half of it memory) and the power is 200 W plus 10 W per query, so a test
 * can compute the exact mean a window of samples must report. One GPU. */
#include <stdio.h>

struct fake_util {
    unsigned gpu, memory;
};
struct fake_memory {
    unsigned long long total, free, used;
};

/* The exported entry points (NVML's names and ABI). */
int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int rc);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h);
int nvmlDeviceGetName(void *h, char *name, unsigned len);
int nvmlDeviceGetUtilizationRates(void *h, struct fake_util *u);
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw);
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz);
int nvmlDeviceGetTemperature(void *h, int type, unsigned *c);
int nvmlDeviceGetMemoryInfo(void *h, struct fake_memory *m);

static unsigned fake_util_calls, fake_power_calls;

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlShutdown(void)
{
    return 0;
}

const char *nvmlErrorString(int rc)
{
    return rc == 0 ? "success" : "fake error";
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
    *n = 1;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
    static int dev;
    *h = &dev;
    return i == 0 ? 0 : 2; /* NVML_ERROR_INVALID_ARGUMENT */
}

int nvmlDeviceGetName(void *h, char *name, unsigned len)
{
    (void)h;
    snprintf(name, len, "Fake GPU");
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *h, struct fake_util *u)
{
    (void)h;
    fake_util_calls++;
    u->gpu = 10 * fake_util_calls;
    u->memory = 5 * fake_util_calls;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
    (void)h;
    fake_power_calls++;
    *mw = 200000 + 10000 * fake_power_calls;
    return 0;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
    (void)h;
    *mhz = type == 1 ? 1980 : 2619;
    return 0;
}

int nvmlDeviceGetTemperature(void *h, int type, unsigned *c)
{
    (void)h;
    (void)type;
    *c = 40;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *h, struct fake_memory *m)
{
    (void)h;
    m->total = 80ull << 30;
    m->used = 1ull << 30;
    m->free = m->total - m->used;
    return 0;
}
