/* Unit tests for the collective benchmark's memory hooks (struct collective_mem, what
 * device "cuda" plugs cudaMalloc and CUDA-event timing into), on the host with a fake
 * device: buffers come only from the hooks' alloc and go back through their free; inputs
 * reach them only through upload and outputs are checked only after download (the fake
 * device's memory starts as garbage, so a bench that bypassed them would count wrong
 * elements); the time of each iteration is the device's (a fixed 250 us from the fake)
 * rather than the host clock's; the first and last timed iterations are the checked ones;
 * and an alloc failure is ERR_NOMEM naming the hook's
 * reason. One rank over the real store and TCP communicator, every op and in place. */
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "common/report.h"
#include "common/spec.h"
#include "daemon/store_server.h"
#include "tests/unit/one_rank.h"
#include "tests/unit/test.h"
#include "worker/comm/comm.h"
#include "worker/comm/tcp.h"
#include "worker/store/store_client.h"
#include "worker/workload_collective.h"

struct fake_dev {
    int allocs, frees, uploads, downloads, timed;
    bool fail_alloc;
};

static void *fake_alloc(void *ctx, size_t bytes, struct err *e)
{
    struct fake_dev *f = ctx;
    if (f->fail_alloc) {
        err_set(e, ERR_NOMEM, NULL, "fake device: out of device memory");
        return NULL;
    }
    unsigned char *p = malloc(bytes);
    if (p)
        memset(p, 0x5c, bytes); /* garbage, as fresh device memory may be */
    f->allocs += p != NULL;
    return p;
}

static void fake_free(void *ctx, void *p)
{
    ((struct fake_dev *)ctx)->frees++;
    free(p);
}

static int fake_upload(void *ctx, void *dst, const void *src, size_t n, struct err *e)
{
    ((struct fake_dev *)ctx)->uploads++;
    memcpy(dst, src, n);
    return 0;
}

static int fake_download(void *ctx, void *dst, const void *src, size_t n, struct err *e)
{
    ((struct fake_dev *)ctx)->downloads++;
    memcpy(dst, src, n);
    return 0;
}

static double fake_seconds(void *ctx, struct comm *c)
{
    ((struct fake_dev *)ctx)->timed++;
    return 250e-6;
}

static void test_hooks_carry_every_op(void)
{
    struct err e = {0};
    struct one_rank o;
    T_CHECK_MSG(one_rank_open(&o, &e) == 0, "%s", e.msg);
    static const char *ops[] = {"allreduce", "reduce_scatter", "all_gather", "broadcast",
                                "sendrecv"};
    static const char *dtypes[] = {"float32", "bfloat16", "float16", "int32", "int64"};
    for (int i = 0; i < 10; i++) {
        struct spec s;
        bool inplace = i >= 5;
        one_rank_coll_spec(&s, 11, ops[i % 5], dtypes[i % 5], "sum", 3, inplace);
        struct fake_dev f = {0};
        struct collective_mem mem = {&f,          fake_alloc,    fake_free,
                                     fake_upload, fake_download, fake_seconds};
        int64_t sizes[] = {8, 1024, 4096};
        struct report_collective rc[3];
        int n = one_rank_run_bench(&o, &s, &mem, sizes, 3, rc, NULL, &e);
        T_CHECK_MSG(n == 3, "%s: %d events: %s", ops[i % 5], n, e.msg);
        for (int j = 0; j < 3; j++) {
            T_CHECK_MSG(rc[j].wrong == 0, "%s %s size %d: %lld wrong", ops[i % 5],
                        inplace ? "in place" : "", j, (long long)rc[j].wrong);
            T_NEAR(rc[j].time_us_median, 250.0, 1e-9); /* the device's time, not the host's */
            T_NEAR(rc[j].time_us_max, 250.0, 1e-9);
        }
        T_EQ_INT(f.allocs, inplace ? 1 : 2);
        T_EQ_INT(f.frees, f.allocs);
        /* per size: the first and last timed iterations checked, each poisoned and its
         * inputs uploaded before, its output downloaded after; plus the warmup's inputs */
        T_EQ_INT(f.downloads, 3 * 2);
        T_EQ_INT(f.uploads, 3 * (1 + 2 * 2));
        T_EQ_INT(f.timed, 3 * s.coll.iters);
    }
    one_rank_close(&o);
}

static void test_alloc_failure_named(void)
{
    struct err e = {0};
    struct one_rank o;
    T_CHECK_MSG(one_rank_open(&o, &e) == 0, "%s", e.msg);
    struct spec s;
    one_rank_coll_spec(&s, 11, "allreduce", "float32", "sum", 3, false);
    struct fake_dev f = {.fail_alloc = true};
    struct collective_mem mem = {&f, fake_alloc, fake_free, fake_upload, fake_download, NULL};
    struct collective_bench b;
    T_CHECK(collective_bench_init_mem(&b, &s, o.c, o.sc, NULL, 4096, 1, &mem, &e) < 0);
    T_EQ_INT(e.code, ERR_NOMEM);
    T_CHECK_MSG(strstr(e.msg, "out of device memory") != NULL, "%s", e.msg);
    T_EQ_INT(f.frees, 0);
    one_rank_close(&o);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_hooks_carry_every_op);
    TEST_RUN(test_alloc_failure_named);
    return test_end();
}
