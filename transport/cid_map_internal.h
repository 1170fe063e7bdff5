/* cid_map_internal.h - connection IDs to connections (internal to transport/).
 *
 * The server routes each datagram by its Destination Connection ID (RFC
 * 9000 5.2): every CID a connection has issued, and the client's first
 * DCID, name it until it is freed.  A chained hash table with a random
 * seed (CIDs are chosen by the peer too, so the seed keeps collisions out
 * of its hands), doubled when it holds two entries per bucket; as ngtcp2
 * keeps its own in ngtcp2_map.c.
 */
#ifndef FA_TRANSPORT_CID_MAP_INTERNAL_H
#define FA_TRANSPORT_CID_MAP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define FA_CID_MAP_MAX_CIDLEN 20 /* NGTCP2_MAX_CIDLEN, RFC 9000 17.2 */

struct fa_cid_ent;

typedef struct fa_cid_map {
    struct fa_cid_ent **buckets;
    size_t nbuckets; /* a power of two */
    size_t n;        /* entries */
    uint64_t seed;
} fa_cid_map;

/* An empty map of 256 buckets hashing with seed.  Returns 0 or FA_ERR_NOMEM. */
int fa_cid_map_init(fa_cid_map *m, uint64_t seed);

/* Frees the entries and the buckets (never the values). */
void fa_cid_map_free(fa_cid_map *m);

/* The value of CID d[0..n), or NULL. */
void *fa_cid_map_find(const fa_cid_map *m, const uint8_t *d, size_t n);

/* Maps d[0..n) to val (not NULL).  Returns 0, or FA_ERR_INVAL (n is 0 or
 * above FA_CID_MAP_MAX_CIDLEN), FA_ERR_EXISTS (the CID is mapped already:
 * the first mapping stays), FA_ERR_NOMEM (the map is as before). */
int fa_cid_map_add(fa_cid_map *m, const uint8_t *d, size_t n, void *val);

/* Removes d[0..n) when it maps to val; else a no-op. */
void fa_cid_map_del(fa_cid_map *m, const uint8_t *d, size_t n, const void *val);

/* Removes every CID mapping to val (those it retired included). */
void fa_cid_map_del_value(fa_cid_map *m, const void *val);

#endif
