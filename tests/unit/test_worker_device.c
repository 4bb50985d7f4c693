/* Unit tests for worker/device_check: a CPU spec passes; device cuda / backend nccl are
 * refused naming the field, with "built without CUDA/NCCL" in a build without them, and
 * a collective on cuda + nccl passes in a build with them, as does training with
 * strategies naive and ddp when cuDNN is there (other strategies, compression and tcp on
 * GPU buffers are refused naming their field); nonsense combinations (nccl on cpu,
 * emulation on cpu) are refused in every build. */
#include <string.h>

#include "ddpb_config.h"
#include "worker/device_check.h"
#include "tests/unit/test.h"

static struct spec spec_with(const char *device, const char *backend, bool emulate)
{
    struct spec s;
    memset(&s, 0, sizeof s);
    strcpy(s.device, device);
    strcpy(s.backend, backend);
    s.emulate_multi_rank = emulate;
    return s;
}

static void test_device_cpu_tcp_ok(void)
{
    struct err e = {0};
    struct spec s = spec_with("cpu", "tcp", false);
    T_OK(worker_device_check(&s, &e));
}

static void test_device_cuda_refused_clearly(void)
{
    struct err e = {0};
    struct spec s = spec_with("cuda", "nccl", false);
    s.workload = SPEC_WORKLOAD_COLLECTIVE;
    int rc = worker_device_check(&s, &e);
    if (!DDPB_HAVE_CUDA) {
        T_CHECK(rc < 0);
        T_EQ_INT(e.code, ERR_INVALID);
        T_EQ_STR(e.field, "device");
        T_CHECK_MSG(strstr(e.msg, "built without CUDA") != NULL, "%s", e.msg);
    } else if (!DDPB_HAVE_NCCL) {
        T_CHECK(rc < 0);
        T_EQ_STR(e.field, "backend");
        T_CHECK_MSG(strstr(e.msg, "built without NCCL") != NULL, "%s", e.msg);
    } else {
        T_OK(rc); /* the collective workload runs on GPU buffers through NCCL */
        s.emulate_multi_rank = true;
        T_OK(worker_device_check(&s, &e));
    }
}

/* Training on cuda + nccl: naive and ddp pass with cuDNN (any precision; the spec checks
 * its values), the strategies and compression whose staging is host memory are refused
 * naming their field; without cuDNN the device is refused. */
static void test_device_cuda_train(void)
{
    if (!DDPB_HAVE_CUDA || !DDPB_HAVE_NCCL)
        return;
    struct err e = {0};
    struct spec s = spec_with("cuda", "nccl", false);
    s.workload = SPEC_WORKLOAD_TRAIN;
    strcpy(s.train.strategy, "ddp");
    strcpy(s.train.compression, "none");
    strcpy(s.train.precision, "bf16");
    if (!DDPB_HAVE_CUDNN) {
        T_CHECK(worker_device_check(&s, &e) < 0);
        T_EQ_STR(e.field, "device");
        T_CHECK_MSG(strstr(e.msg, "cuDNN") != NULL, "%s", e.msg);
        return;
    }
    T_OK(worker_device_check(&s, &e));
    strcpy(s.train.strategy, "naive");
    T_OK(worker_device_check(&s, &e));
    const char *refused[] = {"horovod", "zero1", "zero2"};
    for (int i = 0; i < 3; i++) {
        strcpy(s.train.strategy, refused[i]);
        T_CHECK(worker_device_check(&s, &e) < 0);
        T_EQ_STR(e.field, "strategy");
        T_CHECK_MSG(strstr(e.msg, refused[i]) != NULL, "%s", e.msg);
    }
    strcpy(s.train.strategy, "ddp");
    strcpy(s.train.compression, "fp16");
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "compression");
    s = spec_with("cuda", "tcp", false); /* training on cuda needs nccl too */
    s.workload = SPEC_WORKLOAD_TRAIN;
    strcpy(s.train.strategy, "ddp");
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "backend");
}

/* What a GPU build still refuses, each naming its field: tcp on GPU buffers, and
 * per-operation algorithms NCCL cannot be told to use. */
static void test_device_cuda_unwired(void)
{
    if (!DDPB_HAVE_CUDA || !DDPB_HAVE_NCCL)
        return;
    struct err e = {0};
    struct spec s = spec_with("cuda", "tcp", false);
    s.workload = SPEC_WORKLOAD_COLLECTIVE;
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "backend");
    s = spec_with("cuda", "nccl", false);
    s.workload = SPEC_WORKLOAD_COLLECTIVE;
    strcpy(s.coll.algorithm, "hd");
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "algorithm");
    strcpy(s.coll.algorithm, "ring");
    T_OK(worker_device_check(&s, &e));
}

static void test_device_bad_combinations(void)
{
    struct err e = {0};
    struct spec s = spec_with("cpu", "nccl", false);
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "backend");
    s = spec_with("cpu", "tcp", true);
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "emulate_multi_rank");
    s = spec_with("tpu", "tcp", false);
    T_CHECK(worker_device_check(&s, &e) < 0);
    T_EQ_STR(e.field, "device");
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_device_cpu_tcp_ok);
    TEST_RUN(test_device_cuda_refused_clearly);
    TEST_RUN(test_device_bad_combinations);
    TEST_RUN(test_device_cuda_unwired);
    TEST_RUN(test_device_cuda_train);
    return test_end();
}
