/* round_history.c - see round_history.h. */
#include "aggregator/round_history.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int fa_round_history_init(fa_round_history *h, size_t cap)
{
    memset(h, 0, sizeof(*h));
    h->cap = cap ? cap : 1;
    h->a = calloc(h->cap, sizeof(*h->a));
    h->v = calloc(h->cap, sizeof(*h->v));
    if (!h->a || !h->v) {
        fa_round_history_free(h);
        return -1;
    }
    return 0;
}

static void attempt_free(fa_round_history_attempt *a)
{
    free(a->participants);
    free(a->dropped);
    a->participants = a->dropped = NULL;
}

void fa_round_history_free(fa_round_history *h)
{
    for (size_t i = 0; h->a && i < h->n; i++)
        attempt_free(&h->a[i]);
    free(h->a);
    free(h->v);
    memset(h, 0, sizeof(*h));
}

int fa_round_history_add(fa_round_history *h, const fa_round_history_attempt *a)
{
    fa_round_history_attempt c = *a;
    c.participants = strdup(a->participants ? a->participants : "");
    c.dropped = strdup(a->dropped ? a->dropped : "");
    if (!c.participants || !c.dropped) {
        attempt_free(&c);
        return -1;
    }
    if (h->n == h->cap)
        attempt_free(&h->a[h->next]);
    else
        h->n++;
    h->a[h->next] = c;
    h->next = (h->next + 1) % h->cap;
    return 0;
}

size_t fa_round_history_count(const fa_round_history *h)
{
    return h->n;
}

const fa_round_history_attempt *fa_round_history_at(const fa_round_history *h, size_t i)
{
    size_t first = h->n == h->cap ? h->next : 0;
    return i < h->n ? &h->a[(first + i) % h->cap] : NULL;
}

fa_round_history_eval *fa_round_history_version(fa_round_history *h, uint64_t version)
{
    fa_round_history_eval *e;
    for (size_t i = 0; i < h->nv; i++)
        if (h->v[i].version == version)
            return &h->v[i];
    if (h->nv == h->cap) {
        e = &h->v[h->vnext];
    } else {
        e = &h->v[h->vnext];
        h->nv++;
    }
    h->vnext = (h->vnext + 1) % h->cap;
    e->version = version;
    e->global_accuracy = e->central_accuracy = e->federated_accuracy = NAN;
    e->federated_regions = 0;
    return e;
}

size_t fa_round_history_versions(const fa_round_history *h)
{
    return h->nv;
}

const fa_round_history_eval *fa_round_history_version_at(const fa_round_history *h, size_t i)
{
    size_t first = h->nv == h->cap ? h->vnext : 0;
    return i < h->nv ? &h->v[(first + i) % h->cap] : NULL;
}
