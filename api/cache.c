/* cache: the report's and the fit's replies, keyed by what they were computed from: the
 * endpoint, the experiment ids and their versions (db_experiments_version; migration 015
 * bumps an experiment's version by trigger whenever its runs or their rows change). A
 * second GET of an unchanged experiment is a copy, not a reload of up to 16 experiments.
 *
 * Decision: a small least-recently-used table (API_CACHE_ENTRIES entries, bodies up to
 * API_CACHE_MAX_BODY each), so its memory is bounded; a stale entry is never served,
 * since a changed experiment has a new key, and it ages out. Two requests that miss at
 * once both compute (the pool bounds how many can); the cache only saves repeats.
 *
 * Ownership: the cache owns copies of keys and bodies; get returns a fresh copy. */
#include "api/cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API_CACHE_ENTRIES 32
#define API_CACHE_MAX_BODY (8u << 20)

struct api_cache_entry {
    char *key, *body; /* owned; NULL: empty slot */
    size_t len;
    uint64_t used; /* c->tick when last stored or served */
};

struct api_cache {
    pthread_mutex_t lock;
    struct api_cache_entry e[API_CACHE_ENTRIES];
    uint64_t tick;
    unsigned long long computed, hits;
};

struct api_cache *api_cache_new(void)
{
    struct api_cache *c = calloc(1, sizeof *c);
    if (c)
        pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void api_cache_clear(struct api_cache_entry *en)
{
    free(en->key);
    free(en->body);
    *en = (struct api_cache_entry){0};
}

void api_cache_free(struct api_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < API_CACHE_ENTRIES; i++)
        api_cache_clear(&c->e[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static char *api_cache_dup(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

char *api_cache_get(struct api_cache *c, const char *key, size_t *len)
{
    char *out = NULL;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < API_CACHE_ENTRIES; i++) {
        struct api_cache_entry *en = &c->e[i];
        if (en->key && strcmp(en->key, key) == 0) {
            if ((out = api_cache_dup(en->body, en->len))) {
                *len = en->len;
                en->used = ++c->tick;
                c->hits++;
            }
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return out;
}

void api_cache_put(struct api_cache *c, const char *key, const char *body, size_t len)
{
    pthread_mutex_lock(&c->lock);
    c->computed++;
    struct api_cache_entry *slot = &c->e[0];
    for (size_t i = 0; i < API_CACHE_ENTRIES; i++) {
        struct api_cache_entry *en = &c->e[i];
        if (en->key && strcmp(en->key, key) == 0) {
            slot = en; /* a race computed it twice: replace */
            break;
        }
        if (!en->key || en->used < slot->used)
            slot = en;
        if (!en->key)
            break;
    }
    api_cache_clear(slot);
    if (len <= API_CACHE_MAX_BODY) {
        slot->key = strdup(key);
        slot->body = api_cache_dup(body, len);
        slot->len = len;
        slot->used = ++c->tick;
        if (!slot->key || !slot->body)
            api_cache_clear(slot);
    }
    pthread_mutex_unlock(&c->lock);
}

void api_cache_counts(struct api_cache *c, unsigned long long *computed,
                      unsigned long long *hits)
{
    pthread_mutex_lock(&c->lock);
    *computed = c->computed;
    *hits = c->hits;
    pthread_mutex_unlock(&c->lock);
}
