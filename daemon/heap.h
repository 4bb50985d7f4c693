/* heap: an intrusive binary min-heap of deadlines, the timer queue of daemon/loop (and
 * so of the store's per-client timeouts: thousands of entries, any of which can be
 * cancelled at any time).
 *
 * Decision: intrusive. A struct heap_node lives inside its owner and remembers its own
 * position, so removal is O(log n) without a search and the heap allocates only its
 * array of pointers. The position is stored 1-based so that a zeroed node (calloc) is a
 * valid node that is not in any heap.
 *
 * Ownership: the heap borrows its nodes; an owner must remove its node before freeing
 * it. Not thread-safe: one thread (the loop's) uses a heap. */
#ifndef DDPB_HEAP_H
#define DDPB_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap_node {
    int64_t key; /* the deadline (ms, monotonic); set by heap_push */
    size_t pos;  /* 1 + index in the heap's array; 0 = not in a heap */
};

struct heap {
    struct heap_node **v; /* owned array, borrowed nodes */
    size_t len, cap;
};

void heap_init(struct heap *h);
/* Frees the array; the nodes still in it are just forgotten (they stay the owners'). */
void heap_cleanup(struct heap *h);
/* Inserts n with key, or moves it to key when it is already in h. Returns -1 (ENOMEM,
 * n unchanged) only when the array must grow: re-inserting a node that was removed
 * since the array last grew never fails. */
int heap_push(struct heap *h, struct heap_node *n, int64_t key);
/* Takes n out of h; a no-op when n is in no heap. */
void heap_remove(struct heap *h, struct heap_node *n);
/* The node with the smallest key (ties: any), or NULL when empty. */
struct heap_node *heap_top(const struct heap *h);
static inline bool heap_node_linked(const struct heap_node *n)
{
    return n->pos != 0;
}

#endif
