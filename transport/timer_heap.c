#include "transport/timer_heap_internal.h"

#include <stdlib.h>

#include "common/fa_err.h"

static void swap(fa_timer_heap *h, size_t i, size_t j)
{
    fa_timer_item *t = h->v[i];
    h->v[i] = h->v[j];
    h->v[j] = t;
    h->v[i]->idx = i;
    h->v[j]->idx = j;
}

static void up(fa_timer_heap *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!(h->v[i]->when < h->v[p]->when))
            break;
        swap(h, i, p);
        i = p;
    }
}

static void down(fa_timer_heap *h, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->len && h->v[l]->when < h->v[m]->when)
            m = l;
        if (r < h->len && h->v[r]->when < h->v[m]->when)
            m = r;
        if (m == i)
            break;
        swap(h, i, m);
        i = m;
    }
}

void fa_timer_heap_init(fa_timer_heap *h)
{
    h->v = NULL;
    h->len = h->cap = 0;
}

void fa_timer_heap_free(fa_timer_heap *h)
{
    free(h->v);
    fa_timer_heap_init(h);
}

void fa_timer_heap_remove(fa_timer_heap *h, fa_timer_item *it)
{
    size_t i = it->idx;
    if (i == SIZE_MAX)
        return;
    h->len--;
    if (i != h->len) {
        h->v[i] = h->v[h->len];
        h->v[i]->idx = i;
        down(h, i);
        up(h, i);
    }
    it->idx = SIZE_MAX;
}

int fa_timer_heap_set(fa_timer_heap *h, fa_timer_item *it, uint64_t when)
{
    if (it->idx != SIZE_MAX) {
        uint64_t old = it->when;
        it->when = when;
        if (when < old)
            up(h, it->idx);
        else
            down(h, it->idx);
        return 0;
    }
    if (h->len == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        fa_timer_item **n = realloc(h->v, cap * sizeof(*n));
        if (!n)
            return FA_ERR_NOMEM;
        h->v = n;
        h->cap = cap;
    }
    it->when = when;
    it->idx = h->len;
    h->v[h->len++] = it;
    up(h, it->idx);
    return 0;
}
