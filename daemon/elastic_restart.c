/* elastic_restart: see elastic_restart.h. Decisions only: no process is touched here. */
#include "daemon/elastic_restart.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/log.h"

int elastic_restart_init(struct elastic_restart *er, const struct spec_elastic *el, int slots,
                         const char *run_dir, char *why, size_t cap)
{
    memset(er, 0, sizeof *er);
    er->slots = er->world = slots;
    er->min_ranks = el->min_ranks > 0 ? el->min_ranks : 1;
    er->max_ranks = el->max_ranks > 0 && el->max_ranks <= slots ? el->max_ranks : slots;
    er->first_lost = -1;
    er->mode = "restart";
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

int elastic_restart_next_world(const struct elastic_restart *er, int survivors, char *why,
                               size_t cap)
{
    if (survivors < er->min_ranks) {
        snprintf(why, cap, "elastic: %d rank%s left, min_ranks %d", survivors,
                 survivors == 1 ? "" : "s", er->min_ranks);
        return -1;
    }
    if (er->gen + 1 >= ELASTIC_RESTART_MAX_GENS) {
        snprintf(why, cap, "elastic: %d generations started and the run still lost ranks",
                 ELASTIC_RESTART_MAX_GENS);
        return -1;
    }
    /* a replacement is allowed while fewer than max_ranks live: the group restarts full */
    return survivors < er->max_ranks ? er->max_ranks : survivors;
}

bool elastic_restart_was_lost(int score, int max_score)
{
    /* every rank said a peer went (or timed out): none of them is more to blame than the
     * others, and the monitor's attribution names the peer; count the top ones lost */
    return score > 0 && score == max_score;
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

/* Appends the record as one line of <dir>/generations.jsonl. */
static void elastic_restart_append(const struct elastic_restart *er, const json_t *rec)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/generations.jsonl", er->dir);
    FILE *f = fopen(path, "ae");
    if (!f || json_dumpf(rec, f, JSON_COMPACT) < 0 || fputc('\n', f) == EOF)
        log_warn("elastic: cannot append to %s: %s", path, strerror(errno));
    if (f)
        fclose(f);
}

json_t *elastic_restart_record(const struct elastic_restart *er, const int *members_in,
                               int n_members, const int *lost, int n_lost, const char *reason,
                               int64_t stop_ms)
{
    json_t *members = json_array(), *gone = json_array();
    for (int i = 0; members && i < (members_in ? n_members : er->world); i++)
        json_array_append_new(members, json_integer(members_in ? members_in[i] : i));
    for (int i = 0; gone && i < n_lost; i++)
        json_array_append_new(gone, json_integer(lost[i]));
    json_t *rec = members && gone
                      ? json_pack("{s:s, s:i, s:i, s:O, s:O, s:s, s:f, s:I}", "mode", er->mode,
                                  "gen", er->gen, "world", er->world, "members", members,
                                  "lost", gone, "reason", reason, "t", clock_wall_s(),
                                  "stop_ms", (json_int_t)stop_ms)
                      : NULL;
    json_decref(members);
    json_decref(gone);
    if (rec)
        elastic_restart_append(er, rec);
    return rec;
}
