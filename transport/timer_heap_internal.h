/* timer_heap_internal.h - a binary min-heap of deadlines (internal to transport/).
 *
 * The server keeps each connection's next ngtcp2 expiry and the
 * application's timers in one heap and sleeps until its top, as ngtcp2
 * keeps its own in ngtcp2_pq.c.  Items are embedded in their owners (no
 * allocation per item) and know their position, so that moving or removing
 * one is O(log n) without a search.  Equal deadlines come out in no
 * particular order.
 */
#ifndef FA_TRANSPORT_TIMER_HEAP_INTERNAL_H
#define FA_TRANSPORT_TIMER_HEAP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

typedef struct fa_timer_item {
    uint64_t when; /* the deadline (ns, any clock the owner chooses) */
    size_t idx;    /* position in the heap, SIZE_MAX when not in it */
} fa_timer_item;

typedef struct fa_timer_heap {
    fa_timer_item **v; /* v[0] is the earliest */
    size_t len, cap;
} fa_timer_heap;

/* An item not in any heap. */
static inline void fa_timer_item_init(fa_timer_item *it)
{
    it->when = 0;
    it->idx = SIZE_MAX;
}

static inline int fa_timer_item_queued(const fa_timer_item *it)
{
    return it->idx != SIZE_MAX;
}

/* An empty heap; fa_timer_heap_free releases its array (never the items). */
void fa_timer_heap_init(fa_timer_heap *h);
void fa_timer_heap_free(fa_timer_heap *h);

/* Inserts it at `when`, or moves it there when it is already in h.
 * Returns 0, or FA_ERR_NOMEM (it is then not in h, as before). */
int fa_timer_heap_set(fa_timer_heap *h, fa_timer_item *it, uint64_t when);

/* Takes it out of h; a no-op when it is not in a heap. */
void fa_timer_heap_remove(fa_timer_heap *h, fa_timer_item *it);

/* The earliest item, or NULL when h is empty. */
static inline fa_timer_item *fa_timer_heap_top(const fa_timer_heap *h)
{
    return h->len ? h->v[0] : NULL;
}

#endif
