/* test_nn_isa: the ISA level our kernels use. Every ONEDNN_MAX_CPU_ISA value oneDNN 2.6
 * takes caps as isa.h says (any case), unknown values cap nothing as in oneDNN, the new
 * variable wins over the old one, the CPU's level matches /proc/cpuinfo's flags, and a
 * process started with the cap set (a forked child) reports it from nn_isa_get and from
 * oneDNN alike. */
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test.h"
#include "worker/nn/isa.h"

static void test_isa_cap_every_onednn_value(void)
{
    static const struct {
        const char *value;
        enum nn_isa cap;
    } cases[] = {
        {"SSE41", NN_ISA_BASE},
        {"sse41", NN_ISA_BASE},
        {"AVX", NN_ISA_BASE},
        {"avx", NN_ISA_BASE},
        {"AVX2", NN_ISA_AVX2},
        {"avx2", NN_ISA_AVX2},
        {"Avx2", NN_ISA_AVX2},
        {"AVX2_VNNI", NN_ISA_AVX2},
        {"AVX512_MIC", NN_ISA_AVX2},
        {"AVX512_MIC_4OPS", NN_ISA_AVX2},
        {"AVX512_CORE", NN_ISA_AVX512},
        {"avx512_core", NN_ISA_AVX512},
        {"AVX512_CORE_VNNI", NN_ISA_AVX512},
        {"AVX512_CORE_BF16", NN_ISA_AVX512},
        {"AVX512_CORE_AMX", NN_ISA_AVX512},
        {"ALL", NN_ISA_AVX512},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK_MSG(nn_isa_cap(cases[i].value) == cases[i].cap, "%s -> %d, want %d",
                    cases[i].value, (int)nn_isa_cap(cases[i].value), (int)cases[i].cap);
}

/* oneDNN ignores what it does not know (measured: "bogus", " AVX2" and "" leave its
 * ISA at the CPU's), so our cap does too. */
static void test_isa_cap_unknown_caps_nothing(void)
{
    const char *unknown[] = {"", "bogus", " AVX2", "AVX2 ", "AVX-2", "AVX512", "avx2,fma"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        T_CHECK_MSG(nn_isa_cap(unknown[i]) == NN_ISA_AVX512, "'%s'", unknown[i]);
    T_CHECK(nn_isa_cap(NULL) == NN_ISA_AVX512);
}

static void test_isa_resolve(void)
{
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, "AVX2", NULL) == NN_ISA_AVX2);
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, "SSE41", NULL) == NN_ISA_BASE);
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, NULL, NULL) == NN_ISA_AVX512);
    /* a cap above the CPU changes nothing */
    T_CHECK(nn_isa_resolve(NN_ISA_AVX2, "AVX512_CORE", NULL) == NN_ISA_AVX2);
    T_CHECK(nn_isa_resolve(NN_ISA_BASE, "AVX2", NULL) == NN_ISA_BASE);
    /* the old name alone caps; with both, the new one decides, as in oneDNN */
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, NULL, "AVX2") == NN_ISA_AVX2);
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, "SSE41", "AVX2") == NN_ISA_BASE);
    T_CHECK(nn_isa_resolve(NN_ISA_AVX512, "ALL", "AVX2") == NN_ISA_AVX512);
}

static void test_isa_names(void)
{
    T_EQ_STR(nn_isa_name(NN_ISA_BASE), "base");
    T_EQ_STR(nn_isa_name(NN_ISA_AVX2), "avx2");
    T_EQ_STR(nn_isa_name(NN_ISA_AVX512), "avx512");
}

/* Whether /proc/cpuinfo's first flags line lists flag as a whole word. */
static bool cpuinfo_has(const char *line, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
        if (p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

static void test_isa_cpu_matches_cpuinfo(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        T_SKIP("no /proc/cpuinfo");
    static char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, "flags", 5) == 0;
    fclose(f);
    if (!found)
        T_SKIP("/proc/cpuinfo has no flags line");
    enum nn_isa want = NN_ISA_BASE;
    if (cpuinfo_has(line, "avx2") && cpuinfo_has(line, "fma"))
        want = NN_ISA_AVX2;
    if (cpuinfo_has(line, "avx512f") && cpuinfo_has(line, "avx512bw") &&
        cpuinfo_has(line, "avx512vl") && cpuinfo_has(line, "avx512dq"))
        want = NN_ISA_AVX512;
    T_CHECK_MSG(nn_isa_cpu() == want, "cpu %s, cpuinfo says %s", nn_isa_name(nn_isa_cpu()),
                nn_isa_name(want));
}

/* A child started with the cap: nn_isa_get and oneDNN both obey it, and nn_isa_get
 * keeps its first answer when the variable changes later (read once). Exit status 0 when
 * all held, else the number of the failed check. want_onednn NULL: not checked. */
static int isa_child(const char *cap, enum nn_isa want, const char *want_onednn)
{
    setenv("ONEDNN_MAX_CPU_ISA", cap, 1);
    unsetenv("DNNL_MAX_CPU_ISA");
    if (nn_isa_get() != want)
        return 1;
    if (want_onednn && strcmp(nn_isa_onednn_name(), want_onednn) != 0)
        return 2;
    setenv("ONEDNN_MAX_CPU_ISA", "SSE41", 1);
    return nn_isa_get() == want ? 0 : 3;
}

static int isa_run_child(const char *cap, enum nn_isa want, const char *want_onednn)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(isa_child(cap, want, want_onednn));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void test_isa_get_under_cap(void)
{
    enum nn_isa cpu = nn_isa_cpu();
    if (cpu < NN_ISA_AVX2)
        T_SKIP("this CPU has no AVX2: no cap to try");
    int rc = isa_run_child("AVX2", NN_ISA_AVX2, "avx2");
    T_CHECK_MSG(rc == 0, "AVX2 child failed check %d", rc);
    rc = isa_run_child("avx", NN_ISA_BASE, "avx");
    T_CHECK_MSG(rc == 0, "avx child failed check %d", rc);
    /* oneDNN's uncapped name varies by CPU model (avx512_core_bf16 on a Zen 4) */
    rc = isa_run_child("bogus", cpu, NULL);
    T_CHECK_MSG(rc == 0, "bogus child failed check %d", rc);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_isa_cap_every_onednn_value);
    TEST_RUN(test_isa_cap_unknown_caps_nothing);
    TEST_RUN(test_isa_resolve);
    TEST_RUN(test_isa_names);
    TEST_RUN(test_isa_cpu_matches_cpuinfo);
    TEST_RUN(test_isa_get_under_cap);
    return test_end();
}
