#include "transport/cid_map_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/fa_err.h"

struct fa_cid_ent {
    struct fa_cid_ent *next;
    void *val;
    uint8_t len;
    uint8_t data[FA_CID_MAP_MAX_CIDLEN];
};

static uint64_t cid_hash(const fa_cid_map *m, const uint8_t *d, size_t n)
{
    uint64_t h = m->seed ^ (0x9e3779b97f4a7c15ull * (n + 1));
    for (size_t i = 0; i < n; i++) {
        h ^= d[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

static int grow(fa_cid_map *m)
{
    size_t nb = m->nbuckets ? 2 * m->nbuckets : 256;
    struct fa_cid_ent **b = calloc(nb, sizeof(*b));
    if (!b)
        return FA_ERR_NOMEM;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct fa_cid_ent *e = m->buckets[i], *n;
        for (; e; e = n) {
            size_t k = cid_hash(m, e->data, e->len) & (nb - 1);
            n = e->next;
            e->next = b[k];
            b[k] = e;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
    return 0;
}

int fa_cid_map_init(fa_cid_map *m, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->seed = seed;
    return grow(m);
}

void fa_cid_map_free(fa_cid_map *m)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct fa_cid_ent *e = m->buckets[i], *n;
        for (; e; e = n) {
            n = e->next;
            free(e);
        }
    }
    free(m->buckets);
    memset(m, 0, sizeof(*m));
}

void *fa_cid_map_find(const fa_cid_map *m, const uint8_t *d, size_t n)
{
    struct fa_cid_ent *e;
    if (n > FA_CID_MAP_MAX_CIDLEN || !m->nbuckets)
        return NULL;
    for (e = m->buckets[cid_hash(m, d, n) & (m->nbuckets - 1)]; e; e = e->next)
        if (e->len == n && memcmp(e->data, d, n) == 0)
            return e->val;
    return NULL;
}

int fa_cid_map_add(fa_cid_map *m, const uint8_t *d, size_t n, void *val)
{
    struct fa_cid_ent *e;
    size_t k;
    if (n == 0 || n > FA_CID_MAP_MAX_CIDLEN || !val)
        return FA_ERR_INVAL;
    if (fa_cid_map_find(m, d, n))
        return FA_ERR_EXISTS;
    if (m->n >= 2 * m->nbuckets && grow(m) != 0)
        return FA_ERR_NOMEM;
    e = malloc(sizeof(*e));
    if (!e)
        return FA_ERR_NOMEM;
    e->val = val;
    e->len = (uint8_t)n;
    memcpy(e->data, d, n);
    k = cid_hash(m, e->data, e->len) & (m->nbuckets - 1);
    e->next = m->buckets[k];
    m->buckets[k] = e;
    m->n++;
    return 0;
}

void fa_cid_map_del(fa_cid_map *m, const uint8_t *d, size_t n, const void *val)
{
    struct fa_cid_ent **pp;
    if (!m->nbuckets || n > FA_CID_MAP_MAX_CIDLEN)
        return;
    for (pp = &m->buckets[cid_hash(m, d, n) & (m->nbuckets - 1)]; *pp; pp = &(*pp)->next) {
        struct fa_cid_ent *e = *pp;
        if (e->len == n && memcmp(e->data, d, n) == 0 && e->val == val) {
            *pp = e->next;
            free(e);
            m->n--;
            return;
        }
    }
}

void fa_cid_map_del_value(fa_cid_map *m, const void *val)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct fa_cid_ent **pp = &m->buckets[i];
        while (*pp) {
            if ((*pp)->val == val) {
                struct fa_cid_ent *e = *pp;
                *pp = e->next;
                free(e);
                m->n--;
            } else {
                pp = &(*pp)->next;
            }
        }
    }
}
