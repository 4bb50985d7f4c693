/* isa: the instruction-set level our kernels use, the ONEDNN_MAX_CPU_ISA cap read as
 * oneDNN reads it, and oneDNN's own choice by name (see isa.h). Key decision: one answer
 * per process, computed under pthread_once, so OpenMP threads asking at every step read a
 * value that never changes. */
#include "worker/nn/isa.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <strings.h>

/* oneDNN's user-facing names (its ONEDNN_MAX_CPU_ISA values) and the cap each sets. */
static const struct {
    const char *name;
    enum nn_isa cap;
} isa_caps[] = {
    {"SSE41", NN_ISA_BASE},
    {"AVX", NN_ISA_BASE},
    {"AVX2", NN_ISA_AVX2},
    {"AVX2_VNNI", NN_ISA_AVX2},
    {"AVX512_MIC", NN_ISA_AVX2},
    {"AVX512_MIC_4OPS", NN_ISA_AVX2},
    {"AVX512_CORE", NN_ISA_AVX512},
    {"AVX512_CORE_VNNI", NN_ISA_AVX512},
    {"AVX512_CORE_BF16", NN_ISA_AVX512},
    {"AVX512_CORE_AMX", NN_ISA_AVX512},
    {"ALL", NN_ISA_AVX512},
};

enum nn_isa nn_isa_cap(const char *value)
{
    if (!value)
        return NN_ISA_AVX512;
    for (size_t i = 0; i < sizeof isa_caps / sizeof isa_caps[0]; i++)
        if (strcasecmp(value, isa_caps[i].name) == 0)
            return isa_caps[i].cap;
    return NN_ISA_AVX512; /* unknown: oneDNN ignores it, so do we */
}

enum nn_isa nn_isa_cpu(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return NN_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return NN_ISA_AVX2;
    return NN_ISA_BASE;
}

enum nn_isa nn_isa_resolve(enum nn_isa cpu, const char *onednn_max, const char *dnnl_max)
{
    /* oneDNN reads its new name first and falls back to the old one */
    enum nn_isa cap = nn_isa_cap(onednn_max ? onednn_max : dnnl_max);
    return cpu < cap ? cpu : cap;
}

static enum nn_isa isa_value;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_compute(void)
{
    isa_value = nn_isa_resolve(nn_isa_cpu(), getenv("ONEDNN_MAX_CPU_ISA"),
                               getenv("DNNL_MAX_CPU_ISA"));
}

enum nn_isa nn_isa_get(void)
{
    pthread_once(&isa_once, isa_compute);
    return isa_value;
}

const char *nn_isa_name(enum nn_isa isa)
{
    switch (isa) {
    case NN_ISA_AVX512: return "avx512";
    case NN_ISA_AVX2: return "avx2";
    case NN_ISA_BASE: break;
    }
    return "base";
}

const char *nn_isa_onednn_name(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    }
    return "unknown";
}
