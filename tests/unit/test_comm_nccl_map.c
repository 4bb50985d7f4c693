/* Unit tests for worker/comm/nccl.c's host logic (built with -Dnccl; runs without a GPU):
 * every comm.h dtype and reduction maps to NCCL's of the same meaning and size, the wire
 * byte counts follow the ring model, a bad config is refused before any CUDA call, and the
 * library version is reported. */
#include <nccl.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/comm/comm_nccl.h"

static void test_nccl_dtype_map(void)
{
    T_EQ_INT(comm_nccl_dtype(COMM_FLOAT32), ncclFloat32);
    T_EQ_INT(comm_nccl_dtype(COMM_FLOAT16), ncclFloat16);
    T_EQ_INT(comm_nccl_dtype(COMM_BFLOAT16), ncclBfloat16);
    T_EQ_INT(comm_nccl_dtype(COMM_INT32), ncclInt32);
    T_EQ_INT(comm_nccl_dtype(COMM_INT64), ncclInt64);
    T_EQ_INT(comm_nccl_dtype((enum comm_dtype)99), -1);
    /* every dtype comm.h has maps somewhere distinct */
    for (int a = COMM_FLOAT32; a <= COMM_INT64; a++)
        for (int b = a + 1; b <= COMM_INT64; b++)
            T_CHECK(comm_nccl_dtype((enum comm_dtype)a) != comm_nccl_dtype((enum comm_dtype)b));
}

static void test_nccl_redop_map(void)
{
    T_EQ_INT(comm_nccl_redop(COMM_SUM), ncclSum);
    T_EQ_INT(comm_nccl_redop(COMM_AVG), ncclAvg);
    T_EQ_INT(comm_nccl_redop(COMM_MIN), ncclMin);
    T_EQ_INT(comm_nccl_redop(COMM_MAX), ncclMax);
    T_EQ_INT(comm_nccl_redop((enum comm_redop)42), -1);
}

static void test_nccl_wire_bytes(void)
{
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_ALLREDUCE, 1 << 20, 4), 2 * 3 * (1 << 18));
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_ALLREDUCE, 1 << 20, 1), 0);
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_ALL_GATHER, 1000, 8), 7000);
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_REDUCE_SCATTER, 1000, 2), 1000);
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_SENDRECV, 64, 2), 64);
    T_EQ_INT(comm_nccl_wire_bytes(COMM_OP_RECV, 64, 2), 0);
}

static void test_nccl_config_refused(void)
{
    struct err e = {0};
    struct comm_nccl_config cfg = {.rank = 2, .world_size = 2, .timeout_ms = 1000};
    T_CHECK(comm_nccl_create(&cfg, NULL, &e) == NULL);
    T_EQ_INT(e.code, ERR_INVALID);
    T_EQ_STR(e.field, "rank");
    cfg = (struct comm_nccl_config){
        .rank = 0, .world_size = 1, .timeout_ms = 1000, .algorithm = "hd"};
    T_CHECK(comm_nccl_create(&cfg, NULL, &e) == NULL);
    T_EQ_STR(e.field, "algorithm");
    cfg.algorithm = NULL;
    cfg.timeout_ms = 0;
    T_CHECK(comm_nccl_create(&cfg, NULL, &e) == NULL);
    T_EQ_STR(e.field, "comm_timeout_s");
}

static void test_nccl_version(void)
{
    char v[32];
    comm_nccl_version(v, sizeof v);
    T_CHECK_MSG(strncmp(v, "NCCL 2.", 7) == 0, "%s", v);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_nccl_dtype_map);
    TEST_RUN(test_nccl_redop_map);
    TEST_RUN(test_nccl_wire_bytes);
    TEST_RUN(test_nccl_config_refused);
    TEST_RUN(test_nccl_version);
    return test_end();
}
