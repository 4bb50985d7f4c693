/* Unit tests for daemon/calib: a calibration's curve from a finished experiment's runs
 * (medians per phase at k over those at 1, with order-statistic intervals), the runs of
 * another key left out, an experiment without a one-rank run refused naming world_size;
 * the latest calibration of a run's key is the one matched; the node's context switch is
 * measured (positive, finite) and the time slice follows the kernel's default. */
#include <math.h>
#include <string.h>

#include "daemon/calib.h"
#include "tests/unit/test.h"

#define STEPS 5

/* A run of world_size k of model on host whose forward, backward and optimizer phases
 * are the given values times each step's factor. */
static void run_of(struct db_data_run *r, struct db_step_row *steps, int k, const char *model,
                   const double ph[3])
{
    static const double factor[STEPS] = {1.0, 0.9, 1.2, 1.1, 3.0}; /* median 1.1 */
    memset(r, 0, sizeof *r);
    r->world_size = k;
    snprintf(r->host, sizeof r->host, "node-a");
    r->spec = json_pack("{s:s, s:i, s:i, s:s, s:{s:s}}", "model", model, "batch_size", 16,
                        "threads", 1, "device", "cpu", "dataset", "name", "synthetic");
    for (int i = 0; i < STEPS; i++) {
        memset(&steps[i], 0, sizeof steps[i]);
        for (int p = 0; p < PHASE_N; p++)
            steps[i].phase_ms[p] = -1;
        steps[i].phase_ms[PHASE_FORWARD] = ph[0] * factor[i];
        steps[i].phase_ms[PHASE_BACKWARD] = ph[1] * factor[i];
        steps[i].phase_ms[PHASE_OPTIMIZER] = ph[2] * factor[i];
    }
    r->steps = steps;
    r->nsteps = STEPS;
}

static void test_calib_curve(void)
{
    struct db_data_run runs[4];
    struct db_step_row steps[4][STEPS];
    run_of(&runs[0], steps[0], 1, "mnist-cnn", (const double[3]){2, 4, 1});
    run_of(&runs[1], steps[1], 2, "mnist-cnn", (const double[3]){3, 5, 1.5});
    run_of(&runs[2], steps[2], 2, "resnet18", (const double[3]){30, 50, 15}); /* another key */
    run_of(&runs[3], steps[3], 4, "mnist-cnn", (const double[3]){8, 12, 2});
    struct db_experiment_data d = {.id = 7, .runs = runs, .nruns = 4};
    struct err e = {0};
    json_t *c = calib_curve_of(&d, &e);
    T_CHECK(c != NULL);
    T_EQ_INT((int)json_array_size(c), 3);
    json_t *one = json_array_get(c, 0), *two = json_array_get(c, 1),
           *four = json_array_get(c, 2);
    T_EQ_INT((int)json_integer_value(json_object_get(two, "k")), 2);
    T_EQ_INT((int)json_integer_value(json_object_get(two, "steps")),
             STEPS); /* resnet18's out */
    T_NEAR(json_real_value(json_object_get(one, "forward")), 1, 1e-12);
    /* every phase scales by the same step factors: the medians' ratio is the phases' */
    T_NEAR(json_real_value(json_object_get(two, "forward")), 1.5, 1e-12);
    T_NEAR(json_real_value(json_object_get(two, "backward")), 1.25, 1e-12);
    T_NEAR(json_real_value(json_object_get(four, "optimizer")), 2, 1e-12);
    /* the step's compute: 22 / 7 at 4 ranks */
    T_NEAR(json_real_value(json_object_get(four, "compute")), 22.0 / 7, 1e-12);
    /* 5 steps: order statistics 2 -+ 0.98 sqrt(5) = ranks 0 and 4 (0.9 and 3.0) */
    T_NEAR(json_real_value(json_object_get(two, "forward_lo")), 3 * 0.9 / (2 * 3.0), 1e-12);
    T_NEAR(json_real_value(json_object_get(two, "forward_hi")), 3 * 3.0 / (2 * 0.9), 1e-12);
    json_decref(c);
    /* without its one-rank run a calibration has nothing to divide by */
    struct db_experiment_data none = {.id = 8, .runs = runs + 1, .nruns = 3};
    T_CHECK(calib_curve_of(&none, &e) == NULL);
    T_CHECK(e.field && strcmp(e.field, "world_size") == 0);
    for (int i = 0; i < 4; i++)
        json_decref(runs[i].spec);
}

static void test_calib_match(void)
{
    struct calib cs[2] = {0};
    for (int i = 0; i < 2; i++) {
        cs[i].id = 2 - i; /* newest first */
        snprintf(cs[i].node, sizeof cs[i].node, "node-a");
        snprintf(cs[i].model, sizeof cs[i].model, "mnist-cnn");
        snprintf(cs[i].device, sizeof cs[i].device, "cpu");
        snprintf(cs[i].dataset, sizeof cs[i].dataset, "synthetic");
        cs[i].batch_size = 16;
        cs[i].threads = 1;
    }
    struct calib_set set = {cs, 2};
    struct db_data_run run;
    struct db_step_row steps[STEPS];
    run_of(&run, steps, 2, "mnist-cnn", (const double[3]){1, 1, 1});
    const struct calib *m = calib_match(&set, &run);
    T_CHECK(m && m->id == 2); /* the latest wins */
    snprintf(run.host, sizeof run.host, "node-b");
    T_CHECK(calib_match(&set, &run) == NULL); /* another node */
    snprintf(run.host, sizeof run.host, "node-a");
    json_object_set_new(run.spec, "batch_size", json_integer(32));
    T_CHECK(calib_match(&set, &run) == NULL); /* another batch */
    T_CHECK(calib_match(NULL, &run) == NULL);
    json_decref(run.spec);
}

static void test_calib_node(void)
{
    double us = calib_switch_us();
    T_CHECK(isfinite(us) && us > 0 && us < 10000);
    FILE *f = fopen("/sys/kernel/debug/sched/base_slice_ns", "r");
    if (f) { /* the kernel says its own slice: read, not the default */
        fclose(f);
        T_CHECK(calib_quantum_ms(2) > 0);
        return;
    }
    T_NEAR(calib_quantum_ms(1), 0.75, 1e-12);
    T_NEAR(calib_quantum_ms(2), 1.5, 1e-12);
    T_NEAR(calib_quantum_ms(8), 3.0, 1e-12);
    T_NEAR(calib_quantum_ms(64), 3.0, 1e-12);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_calib_curve);
    TEST_RUN(test_calib_match);
    TEST_RUN(test_calib_node);
    return test_end();
}
