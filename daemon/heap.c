/* heap: see heap.h. Sift-up and sift-down move the hole rather than swapping, and every
 * move writes the node's new position back, which is what makes removal O(log n). */
#include "daemon/heap.h"

#include <stdlib.h>

static void heap_place(struct heap *h, size_t i, struct heap_node *n)
{
    h->v[i] = n;
    n->pos = i + 1;
}

static void heap_sift_up(struct heap *h, size_t i)
{
    struct heap_node *n = h->v[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->v[parent]->key <= n->key)
            break;
        heap_place(h, i, h->v[parent]);
        i = parent;
    }
    heap_place(h, i, n);
}

static void heap_sift_down(struct heap *h, size_t i)
{
    struct heap_node *n = h->v[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        int64_t best = n->key;
        if (l < h->len && h->v[l]->key < best)
            m = l, best = h->v[l]->key;
        if (l + 1 < h->len && h->v[l + 1]->key < best)
            m = l + 1;
        if (m == i)
            break;
        heap_place(h, i, h->v[m]);
        i = m;
    }
    heap_place(h, i, n);
}

void heap_init(struct heap *h)
{
    *h = (struct heap){0};
}

void heap_cleanup(struct heap *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->v[i]->pos = 0;
    free(h->v);
    *h = (struct heap){0};
}

int heap_push(struct heap *h, struct heap_node *n, int64_t key)
{
    if (heap_node_linked(n)) {
        n->key = key;
        heap_sift_up(h, n->pos - 1);
        heap_sift_down(h, n->pos - 1);
        return 0;
    }
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct heap_node **v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    n->key = key;
    heap_place(h, h->len++, n);
    heap_sift_up(h, h->len - 1);
    return 0;
}

void heap_remove(struct heap *h, struct heap_node *n)
{
    if (!heap_node_linked(n))
        return;
    size_t i = n->pos - 1;
    n->pos = 0;
    struct heap_node *last = h->v[--h->len];
    if (i == h->len)
        return;
    heap_place(h, i, last);
    heap_sift_up(h, i);
    heap_sift_down(h, last->pos - 1);
}

struct heap_node *heap_top(const struct heap *h)
{
    return h->len ? h->v[0] : NULL;
}
