/* cache: finished replies of the report and the fit, by experiment version (see cache.c). */
#ifndef DDPB_API_CACHE_H
#define DDPB_API_CACHE_H

#include <stddef.h>

#include "common/err.h"

struct api_cache;

/* Owned; api_cache_free frees. */
struct api_cache *api_cache_new(void);
void api_cache_free(struct api_cache *c);
/* A copy of the body stored under key (malloc'd, NUL-terminated; *len its length), or
 * NULL when there is none. Counts a hit. */
char *api_cache_get(struct api_cache *c, const char *key, size_t *len);
/* Stores a copy of body[0..len) under key, evicting the least recently used entry; a body
 * over API_CACHE_MAX_BODY is not stored. Counts a computation (api_cache_put is called
 * after each one). */
void api_cache_put(struct api_cache *c, const char *key, const char *body, size_t len);
/* Replies computed and replies served from the cache since start (/metrics). */
void api_cache_counts(struct api_cache *c, unsigned long long *computed,
                      unsigned long long *hits);

#endif
