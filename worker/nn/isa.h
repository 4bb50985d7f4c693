/* isa: which vector instruction set the CPU engine's own kernels may use, and what oneDNN
 * chose, so both run down the same paths and each run's env can say which.
 *
 * Decisions:
 * - Three levels only, the ones our kernels are written for: BASE (plain C), AVX2 (with
 *   FMA) and AVX512 (F, BW, VL and DQ: the Skylake-server set oneDNN calls avx512_core).
 * - The CPU's level is capped by ONEDNN_MAX_CPU_ISA (else DNNL_MAX_CPU_ISA), read as
 *   oneDNN 2.6 reads it (case-insensitive, no trimming): SSE41 and AVX cap to BASE; AVX2
 *   and AVX2_VNNI to AVX2; AVX512_MIC and AVX512_MIC_4OPS to AVX2 (Knights Landing lacks
 *   BW/VL/DQ, so our AVX-512 kernels must not run); the AVX512_CORE family and ALL leave
 *   AVX512. Unknown, empty or mistyped values cap nothing, because oneDNN ignores them too
 *   (measured on 2.6.3): the two never disagree about a run.
 * - The answer is computed once per process (pthread_once): the CPU and the environment a
 *   worker started with do not change, oneDNN also reads its variable once, and a layer
 *   asks at every step from OpenMP threads, so the value must be race-free and cheap. */
#ifndef DDPB_NN_ISA_H
#define DDPB_NN_ISA_H

enum nn_isa { NN_ISA_BASE, NN_ISA_AVX2, NN_ISA_AVX512 };

/* The level our kernels use in this process: the CPU's, capped by the environment.
 * Computed on the first call, then the same answer. */
enum nn_isa nn_isa_get(void);

/* "base", "avx2" or "avx512": the name a run's env records (static string). */
const char *nn_isa_name(enum nn_isa isa);

/* What the CPU supports, uncapped (cpuid through __builtin_cpu_supports). */
enum nn_isa nn_isa_cpu(void);

/* The cap one ONEDNN_MAX_CPU_ISA value sets (the rules above); NULL caps nothing. */
enum nn_isa nn_isa_cap(const char *value);

/* The level for a CPU and the two variables' values (either may be NULL): what
 * nn_isa_get computes once; separate so tests can try every value. */
enum nn_isa nn_isa_resolve(enum nn_isa cpu, const char *onednn_max, const char *dnnl_max);

/* oneDNN's effective ISA as its lowercase name ("avx2", "avx512_core_bf16", ...), after
 * its own cap; "unknown" for a value this build does not know (static string). */
const char *nn_isa_onednn_name(void);

#endif
