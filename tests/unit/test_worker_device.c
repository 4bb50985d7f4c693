/* Unit tests for worker/device_check and the worker's side of "what runs where": a CPU
 * spec passes; device cuda / backend nccl are refused naming the field, with "built
 * without CUDA/NCCL/cuDNN" in a build without them, and pass in a build with them; the
 * combinations no build runs (nccl on cpu, tcp on cuda, emulation on cpu, fp16 on cpu,
 * horovod or compression on cuda, an algorithm NCCL is not told) are refused by
 * spec_from_json, which is how the worker reads its spec, naming the same fields as a
 * submit (common/spec_table.c's rules; tests/unit/test_spec.c has every message). The
 * GPU modules (worker/gpu_modules.h) load into this program where the build made them:
 * their env facts and collective hooks come through, or the message naming the module. */
#include <stdio.h>
#include <string.h>

#include "ddpb_config.h"
#include "tests/unit/test.h"
#include "worker/comm/comm_factory.h"
#include "worker/comm/comm_nccl.h"
#include "worker/device_check.h"
#include "worker/gpu_modules.h"
#include "worker/module.h"

static struct spec spec_with(const char *device, const char *backend, enum spec_workload wl)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    strcpy(s.device, device);
    strcpy(s.backend, backend);
    s.workload = wl;
    return s;
}

static void test_device_cpu_tcp_ok(void)
{
    struct err e = {0};
    struct spec s = spec_with("cpu", "tcp", SPEC_WORKLOAD_COLLECTIVE);
    T_OK(worker_device_check(&s, &e));
    s = spec_with("cpu", "tcp", SPEC_WORKLOAD_TRAIN);
    T_OK(worker_device_check(&s, &e));
}

/* cuda + nccl needs CUDA and NCCL in the build, and training there cuDNN too: the first
 * missing piece is named, with its field; a build with all of them passes. */
static void test_device_cuda_needs_the_build(void)
{
    static const enum spec_workload wls[] = {SPEC_WORKLOAD_COLLECTIVE, SPEC_WORKLOAD_TRAIN};
    for (int i = 0; i < 2; i++) {
        struct err e = {0};
        struct spec s = spec_with("cuda", "nccl", wls[i]);
        int rc = worker_device_check(&s, &e);
        const char *field = NULL, *part = NULL;
        if (!DDPB_HAVE_CUDA)
            field = "device", part = "built without CUDA";
        else if (!DDPB_HAVE_NCCL)
            field = "backend", part = "built without NCCL";
        else if (wls[i] == SPEC_WORKLOAD_TRAIN && !DDPB_HAVE_CUDNN)
            field = "device", part = "built without cuDNN";
        if (!field) {
            T_OK(rc);
            continue;
        }
        T_CHECK(rc < 0);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, field);
        T_CHECK_MSG(strstr(e.msg, part) != NULL, "%s", e.msg);
    }
}

/* The worker's spec_from_json refuses what no build runs, naming the field. */
static void test_worker_spec_refuses_combinations(void)
{
    static const struct {
        const char *text, *field;
    } cases[] = {
        {"{\"workload\":\"collective\",\"device\":\"cpu\",\"backend\":\"nccl\"}", "backend"},
        {"{\"workload\":\"collective\",\"device\":\"cuda\",\"backend\":\"tcp\"}", "backend"},
        {"{\"workload\":\"collective\",\"emulate_multi_rank\":true}", "emulate_multi_rank"},
        {"{\"workload\":\"collective\",\"device\":\"cuda\",\"backend\":\"nccl\","
         "\"algorithm\":\"hd\"}",
         "algorithm"},
        {"{\"workload\":\"train\",\"precision\":\"fp16\"}", "precision"},
        {"{\"workload\":\"train\",\"device\":\"cuda\",\"backend\":\"nccl\","
         "\"strategy\":\"horovod\"}",
         "strategy"},
        {"{\"workload\":\"train\",\"device\":\"cuda\",\"backend\":\"nccl\","
         "\"compression\":\"bf16\"}",
         "compression"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct err e = {0};
        struct spec s;
        json_t *j = json_loads(cases[i].text, 0, NULL);
        T_CHECK_MSG(j, "case %zu does not parse", i);
        T_CHECK_MSG(spec_from_json(j, &s, &e) < 0, "case %zu accepted", i);
        T_EQ_INT(e.code, ERR_INVALID);
        T_CHECK_MSG(!strcmp(e.field, cases[i].field), "case %zu: field %s, want %s (%s)", i,
                    e.field, cases[i].field, e.msg);
        json_decref(j);
    }
    /* and reads what does run */
    struct err e = {0};
    struct spec s;
    json_t *j = json_loads("{\"workload\":\"train\",\"device\":\"cuda\",\"backend\":\"nccl\","
                           "\"strategy\":\"naive\",\"precision\":\"bf16\"}",
                           0, NULL);
    T_OK(spec_from_json(j, &s, &e));
    T_EQ_STR(s.train.precision, "bf16");
    json_decref(j);
}

/* A CPU check loads no GPU module (a training one loads the training module):
 * nothing of CUDA or NCCL is mapped after it. */
static int test_mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void test_cpu_loads_no_gpu_module(void)
{
    struct err e = {0};
    struct spec s = spec_with("cpu", "tcp", SPEC_WORKLOAD_TRAIN);
    T_OK(worker_device_check(&s, &e));
    T_CHECK(!test_mapped("ddpb_cuda.so") && !test_mapped("ddpb_comm_nccl.so"));
    T_CHECK(!test_mapped("libcudnn") && !test_mapped("libnccl") && !test_mapped("libcublas"));
}

/* Through the modules where they were built (no GPU needed: NCCL's version, the hooks'
 * table, the env's GPU line holding CUDA's error), else the message naming them. */
static void test_modules_env_and_hooks(void)
{
    json_t *env = json_object();
    gpu_modules_env_add(env);
    const char *gpu = json_string_value(json_object_get(env, "gpu"));
    T_CHECK(gpu != NULL);
    struct err e = {0};
    struct collective_mem mem = {0};
    int rc = gpu_modules_collective_mem(&mem, &e);
    if (DDPB_HAVE_CUDA && DDPB_HAVE_NCCL) {
        T_OK(rc);
        T_CHECK(mem.alloc && mem.free && mem.upload && mem.download && mem.last_op_seconds);
        const char *nccl = json_string_value(json_object_get(env, "nccl"));
        T_CHECK_MSG(nccl && strncmp(nccl, "NCCL ", 5) == 0, "%s", nccl ? nccl : "(none)");
        const struct comm_nccl_module *m = comm_factory_nccl_module(&e);
        T_CHECK(m && m->abi == MODULE_ABI && m == mem.ctx);
        T_CHECK(test_mapped("ddpb_cuda.so") && test_mapped("ddpb_comm_nccl.so"));
    } else {
        T_CHECK(rc < 0);
        T_CHECK_MSG(strstr(e.msg, ".so") && strstr(e.msg, "-D"), "%s", e.msg);
        if (!DDPB_HAVE_CUDA) /* the env says why instead of the GPU */
            T_CHECK_MSG(strstr(gpu, "ddpb_cuda.so") && strstr(gpu, "-Dcuda=enabled"), "%s",
                        gpu);
    }
    json_decref(env);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_device_cpu_tcp_ok);
    TEST_RUN(test_cpu_loads_no_gpu_module); /* first: before any module is loaded */
    TEST_RUN(test_device_cuda_needs_the_build);
    TEST_RUN(test_worker_spec_refuses_combinations);
    TEST_RUN(test_modules_env_and_hooks);
    return test_end();
}
