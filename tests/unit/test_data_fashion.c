/* Unit tests on the real Fashion-MNIST files of Debian's dataset-fashion-mnist: sizes,
 * shape, the balanced label histogram and the published normalization constants (the train
 * split normalizes to mean 0, std 1). Where the package is absent the cases are skipped:
 * they print a "skip" line and count neither as passed nor as failed. */
#include <stdio.h>
#include <sys/stat.h>

#include "tests/unit/test.h"
#include "worker/data/dataset.h"

#define FASHION_BATCH 1000

struct fashion_scan {
    int64_t hist[10];
    double sum, sumsq;
    int64_t values;
};

/* Fills the whole split in batches of FASHION_BATCH and accumulates labels and values. */
static int fashion_scan(const struct dataset *ds, struct fashion_scan *s, struct err *e)
{
    size_t per = dataset_sample_floats(ds);
    float *x = malloc(FASHION_BATCH * per * sizeof *x);
    int32_t y[FASHION_BATCH];
    int64_t idx[FASHION_BATCH];
    struct data_draw d = {1, 0, 0};
    int rc = 0;
    memset(s, 0, sizeof *s);
    for (int64_t start = 0; rc == 0 && start < ds->n; start += FASHION_BATCH) {
        int n = ds->n - start < FASHION_BATCH ? (int)(ds->n - start) : FASHION_BATCH;
        for (int i = 0; i < n; i++)
            idx[i] = start + i;
        rc = dataset_fill(ds, idx, n, &d, x, y, e);
        for (int i = 0; rc == 0 && i < n; i++)
            s->hist[y[i]]++;
        for (size_t k = 0; rc == 0 && k < (size_t)n * per; k++) {
            s->sum += x[k];
            s->sumsq += (double)x[k] * x[k];
        }
        s->values += (int64_t)n * (int64_t)per;
    }
    free(x);
    return rc;
}

/* Checks a split's size, shape and balanced labels, then scans it into s. Frees ds. */
static bool fashion_check(struct dataset *ds, int64_t n, int64_t per_class,
                          struct fashion_scan *s, char *why, size_t whylen)
{
    struct err e;
    bool ok = ds->n == n && ds->c == 1 && ds->h == 28 && ds->w == 28 && ds->classes == 10;
    if (!ok)
        snprintf(why, whylen, "%lld samples of %dx%dx%d, %d classes", (long long)ds->n, ds->c,
                 ds->h, ds->w, ds->classes);
    if (ok && fashion_scan(ds, s, &e) < 0) {
        ok = false;
        snprintf(why, whylen, "%s", e.msg);
    }
    for (int c = 0; ok && c < 10; c++) {
        ok = s->hist[c] == per_class;
        if (!ok)
            snprintf(why, whylen, "class %d: %lld samples", c, (long long)s->hist[c]);
    }
    dataset_destroy(ds);
    return ok;
}

static void test_fashion_train(void)
{
    struct err e;
    struct data_config cfg = {.name = "fashion-mnist"}; /* default path, published norm */
    struct dataset *ds;
    T_OK(dataset_open(&cfg, DATA_SPLIT_TRAIN, &ds, &e));
    struct fashion_scan s;
    char why[400] = "";
    T_CHECK_MSG(fashion_check(ds, 60000, 6000, &s, why, sizeof why), "%s", why);
    double mean = s.sum / (double)s.values;
    double sd = sqrt(s.sumsq / (double)s.values - mean * mean);
    T_NEAR(mean, 0.0, 0.005);
    T_NEAR(sd, 1.0, 0.005);
}

static void test_fashion_test(void)
{
    struct err e;
    struct data_image_opts o = {0};
    struct dataset *ds;
    T_OK(dataset_idx_open_dir(DATA_FASHION_MNIST_DIR, "fashion-mnist", DATA_SPLIT_TEST, &o, &ds,
                              &e));
    struct fashion_scan s;
    char why[400] = "";
    T_CHECK_MSG(fashion_check(ds, 10000, 1000, &s, why, sizeof why), "%s", why);
    /* without normalization, values are bytes / 255 */
    T_NEAR(s.sum / (double)s.values, 0.2868, 0.01);
}

static bool fashion_present(void)
{
    static const char *const names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    for (int i = 0; i < 4; i++) {
        char p[512], pgz[512];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", DATA_FASHION_MNIST_DIR, names[i]);
        snprintf(pgz, sizeof pgz, "%s.gz", p);
        if (stat(p, &st) != 0 && stat(pgz, &st) != 0)
            return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    /* the test command installs the data set, so tests/summarize.py fails this skip */
    if (!fashion_present())
        test_skip_all("Fashion-MNIST not found in " DATA_FASHION_MNIST_DIR
                      " (deploy/install-deps.sh installs dataset-fashion-mnist)");
    TEST_RUN(test_fashion_train);
    TEST_RUN(test_fashion_test);
    return test_end();
}
