/* events: the daemon's live event hub behind Server-Sent Events streams.
 *
 * Decision: publishers (the monitor, the API) format each event once as SSE text
 * ("id: N\nevent: TYPE\ndata: JSON\n\n") and append it to every matching subscriber's
 * bounded queue; a subscriber that falls too far behind loses its oldest events and is
 * told so (event "lagged"), so a slow client never holds memory or publishers hostage.
 * The hub knows nothing of HTTP: a subscriber brings a suspend and a resume callback
 * (libmicrohttpd's suspend/resume) and the hub calls them under its one lock, which is
 * what makes "no data now → suspend" and "data arrived → resume" race-free. */
#ifndef DDPB_EVENTS_H
#define DDPB_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct events;
struct events_sub;

#define EVENTS_SUB_MAX_BYTES (1u << 20)

/* Owned hub (events_destroy). */
struct events *events_create(void);
/* Ends every stream (readers see end of stream). Subscribers must still unsubscribe. */
void events_shutdown(struct events *h);
void events_destroy(struct events *h);

/* Publishes to the subscribers of experiment_id and to those of all experiments (0).
 * data is borrowed. Thread-safe. */
void events_publish(struct events *h, int64_t experiment_id, const char *type,
                    const json_t *data);
/* An event about one run: data (stolen, always decref'd; NULL publishes nothing) gets
 * "run" and "experiment" added and is published to the run's experiment. */
void events_publish_run(struct events *h, int64_t experiment_id, int64_t run_id,
                        const char *type, json_t *data);
/* An SSE comment line to every subscriber, keeping idle connections and proxies alive. */
void events_heartbeat(struct events *h);

typedef void (*events_notify_fn)(void *arg);

/* Subscribes to one experiment (0 = all). suspend/resume are called with arg under the
 * hub's lock: suspend when a read finds nothing, resume when data then arrives. Returns
 * an owned subscription (events_unsubscribe) or NULL. */
struct events_sub *events_subscribe(struct events *h, int64_t experiment_id,
                                    events_notify_fn suspend, events_notify_fn resume,
                                    void *arg);
/* Queues an event for this subscriber only (a snapshot when it connects). */
void events_push_one(struct events_sub *s, const char *type, const json_t *data);
/* Copies pending text into out (at most max bytes). Returns the bytes copied; 0 after
 * calling suspend when nothing is pending; -1 when the hub shut down (end of stream). */
long events_read(struct events_sub *s, char *out, size_t max);
void events_unsubscribe(struct events_sub *s);
size_t events_subscribers(struct events *h);

#endif
