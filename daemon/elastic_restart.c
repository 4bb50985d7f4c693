/* elastic_restart: see elastic_restart.h. No process is touched here. */
#include "daemon/elastic_restart.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int elastic_restart_init(struct elastic_restart *er, bool driver, int slots,
                         const char *run_dir, char *why, size_t cap)
{
    memset(er, 0, sizeof *er);
    er->driver = driver;
    er->slots = er->world = slots;
    int n = snprintf(er->dir, sizeof er->dir, "%s/elastic", run_dir);
    if (n < 0 || (size_t)n >= sizeof er->dir) {
        snprintf(why, cap, "elastic: the run's folder %s is too long", run_dir);
        return -1;
    }
    if (mkdir(er->dir, 0755) < 0 && errno != EEXIST) {
        snprintf(why, cap, "elastic: cannot create %s: %s", er->dir, strerror(errno));
        return -1;
    }
    return 0;
}

int elastic_restart_env(const struct elastic_restart *er, char *out, size_t w)
{
    int n = 0;
    snprintf(out + w * (size_t)n++, w, "DDPB_ELASTIC_GEN=%d", er->gen);
    snprintf(out + w * (size_t)n++, w, "DDPB_ELASTIC_DIR=%s", er->dir);
    snprintf(out + w * (size_t)n++, w, "DDPB_ELASTIC_SLOTS=%d", er->slots);
    if (er->lost_at > 0)
        snprintf(out + w * (size_t)n++, w, "DDPB_ELASTIC_LOST_AT=%.6f", er->lost_at);
    return n;
}
