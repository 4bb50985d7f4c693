/* nvml: GPU utilisation, power, clocks, temperature and memory through NVML, loaded with
 * dlopen at run time.
 *
 * Decision: NVML ships with the driver, not the toolkit, so linking it would make the
 * worker (and the daemon, which counts GPUs with it) fail to start on a machine without a
 * driver. Loaded at run time, a missing or unusable libnvidia-ml is a value (NULL and a
 * reason starting "nvml unavailable"), never an error: the worker reports it and runs.
 * The few entry points are declared here by hand (NVML's C ABI is stable and versioned by
 * symbol names such as nvmlInit_v2), so this file builds without any GPU headers and is
 * part of every build.
 *
 * Ownership: gpu_nvml_open returns an owned handle (gpu_nvml_close: nvmlShutdown +
 * dlclose); samples are plain values. */
#ifndef DDPB_GPU_NVML_H
#define DDPB_GPU_NVML_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define GPU_NVML_DEFAULT_LIB "libnvidia-ml.so.1"

struct gpu_nvml;

struct gpu_nvml_sample {
    char name[96];
    unsigned util_gpu, util_mem; /* percent over NVML's last sample period */
    double power_w;
    unsigned sm_mhz, mem_mhz;
    unsigned temp_c;
    uint64_t mem_used, mem_total; /* bytes */
};

/* Loads lib (NULL: GPU_NVML_DEFAULT_LIB) and initialises NVML. NULL when it cannot, with
 * "nvml unavailable: <reason>" in why. */
struct gpu_nvml *gpu_nvml_open(const char *lib, char *why, size_t whylen);
void gpu_nvml_close(struct gpu_nvml *n); /* NULL is a no-op */

int gpu_nvml_count(struct gpu_nvml *n, int *count, struct err *e);
/* Samples the GPU of NVML index `index` (all GPUs, whatever CUDA_VISIBLE_DEVICES says).
 * A counter the GPU does not support is left 0. */
int gpu_nvml_sample(struct gpu_nvml *n, int index, struct gpu_nvml_sample *out, struct err *e);

/* The node's GPU count for the daemon: NVML's count, 0 when NVML is unavailable (why
 * filled, may be NULL). */
int gpu_nvml_detect_count(const char *lib, char *why, size_t whylen);

/* The NVML index of a rank's GPU from a CUDA_VISIBLE_DEVICES value: its first entry when
 * numeric, else 0 (NULL or "" too). */
int gpu_nvml_index_from_visible(const char *visible);

/* An owned JSON object for the env report: {"nvml": "ok", "gpu": {name, util_gpu, ...}}
 * or {"nvml": "nvml unavailable: ..."}. n may be NULL (then why is used). */
json_t *gpu_nvml_json(struct gpu_nvml *n, int index, const char *why);

#endif
