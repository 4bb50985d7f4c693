/* Unit tests for daemon/gpu_slots and the launcher's GPU environment: one rank per free
 * GPU, lowest first; a run waits while GPUs are busy and is refused when it can never fit;
 * emulation takes one whole free GPU for every rank and flags the run; the environment is
 * CUDA_VISIBLE_DEVICES per rank plus, when emulated, a distinct NCCL_HOSTID per rank
 * (NCCL < 2.30) or NCCL_MULTI_RANK_GPU_ENABLE=1 (>= 2.30); an emulated run (only) starts
 * with a warning calling it experimental; a spawned worker gets exactly that environment,
 * and the daemon's own NCCL_HOSTID does not leak into it. */
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/config.h"
#include "daemon/gpu_slots.h"
#include "daemon/launcher.h"
#include "tests/unit/test.h"

static void test_plan_one_rank_per_gpu(void)
{
    bool used[4] = {false, true, false, false};
    struct gpu_plan p;
    struct err e = {0};
    T_EQ_INT(gpu_slots_plan(4, used, 3, false, &p, &e), 1);
    T_EQ_INT(p.gpu[0], 0);
    T_EQ_INT(p.gpu[1], 2);
    T_EQ_INT(p.gpu[2], 3);
    T_CHECK(!p.emulated);
    T_EQ_INT(gpu_slots_plan(4, used, 4, false, &p, &e), 0); /* waits: one GPU busy */
    T_CHECK(gpu_slots_plan(4, used, 5, false, &p, &e) < 0); /* never fits */
    T_EQ_INT(e.code, ERR_CONFLICT);
    T_EQ_STR(e.field, "world_size");
    T_CHECK(gpu_slots_plan(0, used, 1, false, &p, &e) < 0);
    T_EQ_STR(e.field, "device");
}

static void test_plan_emulated(void)
{
    bool used[2] = {true, false};
    struct gpu_plan p;
    struct err e = {0};
    T_EQ_INT(gpu_slots_plan(2, used, 4, true, &p, &e), 1);
    T_CHECK(p.emulated);
    for (int r = 0; r < 4; r++)
        T_EQ_INT(p.gpu[r], 1);
    bool all[1] = {true};
    T_EQ_INT(gpu_slots_plan(1, all, 4, true, &p, &e), 0); /* the one GPU is busy: wait */
    bool none[1] = {false};
    T_EQ_INT(gpu_slots_plan(1, none, 1, true, &p, &e), 1);
    T_CHECK(!p.emulated); /* one rank on one GPU is not emulation */
}

static void test_env(void)
{
    bool used[1] = {false};
    struct gpu_plan p;
    struct err e = {0};
    char env[4][64];
    T_EQ_INT(gpu_slots_plan(1, used, 2, true, &p, &e), 1);
    T_EQ_INT(gpu_slots_env(&p, 0, 22809, "run-5", env), 3);
    T_EQ_STR(env[0], "CUDA_VISIBLE_DEVICES=0");
    T_EQ_STR(env[1], "NCCL_HOSTID=ddpb-run-5-r0");
    T_EQ_STR(env[2], "DDPB_EMULATED=1");
    char other[4][64];
    gpu_slots_env(&p, 1, 22809, "run-5", other);
    T_CHECK(strcmp(env[1], other[1]) != 0); /* distinct per rank */
    T_EQ_INT(gpu_slots_env(&p, 1, 23000, "run-5", env), 3);
    T_EQ_STR(env[1], "NCCL_MULTI_RANK_GPU_ENABLE=1");
    bool free4[4] = {false};
    T_EQ_INT(gpu_slots_plan(4, free4, 2, false, &p, &e), 1);
    T_EQ_INT(gpu_slots_env(&p, 1, 23000, "run-5", env), 1);
    T_EQ_STR(env[0], "CUDA_VISIBLE_DEVICES=1");
    /* a single-process run (dp): its one process sees every GPU of the plan */
    bool busy4[4] = {true, false, false, false};
    T_EQ_INT(gpu_slots_plan(4, busy4, 3, false, &p, &e), 1);
    T_EQ_INT(gpu_slots_env_single(&p, env), 1);
    T_EQ_STR(env[0], "CUDA_VISIBLE_DEVICES=1,2,3");
    p.world_size = 40; /* a list past 64 bytes is refused, not cut */
    for (int i = 0; i < 40; i++)
        p.gpu[i] = 100 + i;
    T_EQ_INT(gpu_slots_env_single(&p, env), 0);
}

/* An emulated plan starts with a warning naming it experimental, the shared GPU and how
 * NCCL is made to accept it; a plan of one rank per GPU starts with none. */
static void test_emulation_warning(void)
{
    bool used[2] = {true, false};
    struct gpu_plan p;
    struct err e = {0};
    char buf[400] = "untouched";
    T_EQ_INT(gpu_slots_plan(2, used, 3, true, &p, &e), 1);
    const char *w = gpu_slots_warning(&p, 22809, buf, sizeof buf);
    T_CHECK(w == buf);
    T_CHECK_MSG(strstr(w, "experimental") && strstr(w, "3 ranks share GPU 1") &&
                    strstr(w, "NCCL_HOSTID") && strstr(w, "socket") &&
                    strstr(w, "flagged emulated"),
                "%s", w);
    w = gpu_slots_warning(&p, 23000, buf, sizeof buf);
    T_CHECK_MSG(w && strstr(w, "NCCL_MULTI_RANK_GPU_ENABLE=1") && !strstr(w, "NCCL_HOSTID"),
                "%s", w);
    bool free2[2] = {false, false};
    T_EQ_INT(gpu_slots_plan(2, free2, 2, false, &p, &e), 1);
    snprintf(buf, sizeof buf, "untouched");
    T_CHECK(gpu_slots_warning(&p, 23000, buf, sizeof buf) == NULL);
    T_EQ_STR(buf, "untouched");
}

static void test_launcher_gpu_env(void)
{
    char dir[] = "/tmp/ddpb-gpu-slots-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    char log[128];
    snprintf(log, sizeof log, "%s/rank0.log", dir);
    setenv("NCCL_HOSTID", "stale-daemon-value", 1);
    const char *genv[] = {"CUDA_VISIBLE_DEVICES=2", "NCCL_HOSTID=ddpb-r9-r0",
                          "DDPB_EMULATED=1"};
    struct launch_rank lr = {.worker_path = getenv("DDPB_PROBE_BIN"),
                             .run = "r9",
                             .secret = "s",
                             .store_addr = "127.0.0.1:1",
                             .spec_path = "/nonexistent",
                             .log_path = log,
                             .peer_host = "127.0.0.1",
                             .rank = 0,
                             .world_size = 2,
                             .local_rank = 0,
                             .gpu_env = genv,
                             .ngpu_env = 3};
    struct launched out;
    struct err e = {0};
    T_OK(launcher_spawn(&lr, &out, &e));
    char buf[8192];
    size_t len = 0;
    for (;;) {
        struct pollfd pfd = {.fd = out.report_fd, .events = POLLIN};
        if (poll(&pfd, 1, 5000) <= 0)
            break;
        ssize_t r = read(out.report_fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    json_t *rep = json_loadb(buf, len, 0, NULL);
    waitpid(out.pid, NULL, 0);
    close(out.report_fd);
    close(out.pidfd);
    unsetenv("NCCL_HOSTID");
    T_CHECK(rep != NULL);
    json_t *env = json_object_get(rep, "env");
    T_EQ_STR(json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES")), "2");
    T_EQ_STR(json_string_value(json_object_get(env, "NCCL_HOSTID")), "ddpb-r9-r0");
    T_EQ_STR(json_string_value(json_object_get(env, "DDPB_EMULATED")), "1");
    json_decref(rep);
    const char *bad[] = {"NO_EQUALS_SIGN"};
    lr.gpu_env = bad;
    lr.ngpu_env = 1;
    T_CHECK(launcher_spawn(&lr, &out, &e) < 0);
    T_EQ_INT(e.code, ERR_INVALID);
    unlink(log);
    rmdir(dir);
}

static void test_config_gpus(void)
{
    struct config c;
    struct err e = {0};
    char *ok[] = {"ddpbenchd", "--gpus", "3", NULL};
    optind = 0;
    T_EQ_INT(config_parse_args(&c, 3, ok, &e), 0);
    T_EQ_INT(c.gpus, 3);
    char *bad[] = {"ddpbenchd", "--gpus", "65", NULL};
    optind = 0;
    T_CHECK(config_parse_args(&c, 3, bad, &e) < 0);
    T_CHECK(strstr(e.msg, "gpus") != NULL);
    char *none[] = {"ddpbenchd", NULL};
    optind = 0;
    T_EQ_INT(config_parse_args(&c, 1, none, &e), 0);
    T_CHECK(c.gpus >= 0 && c.gpus <= GPU_SLOTS_MAX); /* NVML's count, 0 without NVML */
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_plan_one_rank_per_gpu);
    TEST_RUN(test_plan_emulated);
    TEST_RUN(test_env);
    TEST_RUN(test_emulation_warning);
    TEST_RUN(test_launcher_gpu_env);
    TEST_RUN(test_config_gpus);
    return test_end();
}
