/* merkle.c - RFC 6962 / RFC 9162 Merkle tree hashing and proofs. */
#include "crypto/merkle.h"

#include <string.h>

#include <sodium.h>

#include "common/fa_sha256.h"

#define HLEN FA_MERKLE_HASH_LEN

/* SHA-256 of a||b.  fa_sha256 (OpenSSL, SHA-NI where the CPU has it) does
 * the work, one shot for the small inputs of a tree; if it ever fails (it
 * only can on out-of-memory) libsodium's portable SHA-256 gives the same
 * bytes, so the hash functions need no error path and never hide one. */
static void sha256_2(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                     uint8_t out[HLEN])
{
    uint8_t buf[1 + 2 * HLEN + 1024];
    fa_sha256_ctx h = {0};
    crypto_hash_sha256_state st;
    int rc;

    if (alen + blen <= sizeof(buf)) {
        memcpy(buf, a, alen);
        if (blen)
            memcpy(buf + alen, b, blen);
        if (fa_sha256(out, buf, alen + blen) == 0)
            return;
    } else {
        fa_sha256_init(&h);
        fa_sha256_update(&h, a, alen);
        fa_sha256_update(&h, b, blen);
        rc = fa_sha256_final(&h, out);
        fa_sha256_free(&h);
        if (rc == 0)
            return;
    }
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, a, alen);
    crypto_hash_sha256_update(&st, b, blen);
    crypto_hash_sha256_final(&st, out);
}

void fa_merkle_leaf_hash(const void *data, size_t len, uint8_t out[HLEN])
{
    static const uint8_t prefix = 0x00;
    sha256_2(&prefix, 1, data ? data : (const void *)"", len, out);
}

void fa_merkle_node_hash(const uint8_t left[HLEN], const uint8_t right[HLEN], uint8_t out[HLEN])
{
    uint8_t buf[1 + 2 * HLEN];
    buf[0] = 0x01;
    memcpy(buf + 1, left, HLEN);
    memcpy(buf + 1 + HLEN, right, HLEN);
    sha256_2(buf, sizeof(buf), NULL, 0, out);
}

void fa_merkle_empty_root(uint8_t out[HLEN])
{
    sha256_2((const uint8_t *)"", 0, NULL, 0, out);
}

/* Largest power of two strictly less than n (n >= 2). */
static uint64_t split_point(uint64_t n)
{
    uint64_t k = (uint64_t)1 << (63 - __builtin_clzll(n - 1));
    return k;
}

void fa_merkle_root_of(const uint8_t *leaf_hashes, uint64_t n, uint8_t out[HLEN])
{
    fa_merkle_frontier f;
    fa_merkle_frontier_init(&f);
    for (uint64_t i = 0; i < n; i++)
        fa_merkle_frontier_push(&f, leaf_hashes + i * HLEN, NULL, NULL);
    fa_merkle_frontier_root(&f, out);
}

uint64_t fa_merkle_node_count(uint64_t n)
{
    return 2 * n - (uint64_t)__builtin_popcountll(n);
}

uint64_t fa_merkle_node_pos(unsigned level, uint64_t index)
{
    /* The node completes when leaf m = (index + 1) * 2^level - 1 is pushed;
     * that push writes levels 0..level after the nodes of the first m leaves. */
    uint64_t m = ((index + 1) << level) - 1;
    return fa_merkle_node_count(m) + level;
}

/* ------------------------------------------------------------------------- */

void fa_merkle_frontier_init(fa_merkle_frontier *f)
{
    memset(f, 0, sizeof(*f));
}

int fa_merkle_frontier_push(fa_merkle_frontier *f, const uint8_t leaf[HLEN], uint8_t *completed,
                            unsigned *ncompleted)
{
    uint8_t h[HLEN];
    unsigned level = 0, n = 0;

    if (f->size == UINT64_MAX)
        return FA_ERR_RANGE;
    memcpy(h, leaf, HLEN);
    if (completed)
        memcpy(completed + n * HLEN, h, HLEN);
    n++;
    /* Each set low bit of the size is a perfect subtree to merge with. */
    while (f->size & ((uint64_t)1 << level)) {
        fa_merkle_node_hash(f->hash[level], h, h);
        level++;
        if (completed)
            memcpy(completed + n * HLEN, h, HLEN);
        n++;
    }
    memcpy(f->hash[level], h, HLEN);
    f->size++;
    if (ncompleted)
        *ncompleted = n;
    return 0;
}

void fa_merkle_frontier_root(const fa_merkle_frontier *f, uint8_t out[HLEN])
{
    uint8_t r[HLEN];
    int have = 0;

    if (f->size == 0) {
        fa_merkle_empty_root(out);
        return;
    }
    /* MTH = node(P_1, node(P_2, ... P_k)) with P_1 the largest subtree: fold
     * from the smallest one up. */
    for (unsigned l = 0; l < 64; l++) {
        if (!(f->size & ((uint64_t)1 << l)))
            continue;
        if (!have) {
            memcpy(r, f->hash[l], HLEN);
            have = 1;
        } else {
            fa_merkle_node_hash(f->hash[l], r, r);
        }
    }
    memcpy(out, r, HLEN);
}

/* ------------------------------------------------------------------------- */

int fa_merkle_range_root(fa_merkle_get_fn get, void *ctx, uint64_t begin, uint64_t end,
                         uint8_t out[HLEN])
{
    uint8_t parts[64][HLEN];
    unsigned nparts = 0;
    uint64_t len, a;
    int rc;

    if (end <= begin)
        return FA_ERR_INVAL;
    len = end - begin;
    /* begin must be aligned to the smallest power of two >= len. */
    if (len > ((uint64_t)1 << 63) ||
        (begin & ((len == 1 ? 1 : (uint64_t)1 << (64 - __builtin_clzll(len - 1))) - 1)) != 0)
        return FA_ERR_INVAL;
    /* The binary decomposition of len, largest subtree first, each aligned. */
    a = begin;
    for (int bit = 63; bit >= 0; bit--) {
        uint64_t sz = (uint64_t)1 << bit;
        if (!(len & sz))
            continue;
        rc = get(ctx, (unsigned)bit, a >> bit, parts[nparts]);
        if (rc < 0)
            return rc;
        nparts++;
        a += sz;
    }
    for (unsigned i = nparts - 1; i > 0; i--)
        fa_merkle_node_hash(parts[i - 1], parts[i], parts[i - 1]);
    memcpy(out, parts[0], HLEN);
    return 0;
}

static void reverse(uint8_t *proof, size_t n)
{
    uint8_t t[HLEN];
    for (size_t i = 0; i < n / 2; i++) {
        memcpy(t, proof + i * HLEN, HLEN);
        memcpy(proof + i * HLEN, proof + (n - 1 - i) * HLEN, HLEN);
        memcpy(proof + (n - 1 - i) * HLEN, t, HLEN);
    }
}

int fa_merkle_inclusion_proof(fa_merkle_get_fn get, void *ctx, uint64_t index, uint64_t size,
                              uint8_t *proof, size_t *len)
{
    uint64_t lo = 0, hi = size;
    size_t n = 0;
    int rc;

    *len = 0;
    if (index >= size)
        return FA_ERR_RANGE;
    /* PATH(m, D[lo:hi]) top-down: the sibling of each split, then reversed
     * so that the proof runs from the leaf up (RFC 9162 2.1.3.1). */
    while (hi - lo > 1) {
        uint64_t k = split_point(hi - lo);
        if (index < lo + k) {
            rc = fa_merkle_range_root(get, ctx, lo + k, hi, proof + n * HLEN);
            hi = lo + k;
        } else {
            rc = fa_merkle_range_root(get, ctx, lo, lo + k, proof + n * HLEN);
            lo = lo + k;
        }
        if (rc < 0)
            return rc;
        n++;
    }
    reverse(proof, n);
    *len = n;
    return 0;
}

int fa_merkle_consistency_proof(fa_merkle_get_fn get, void *ctx, uint64_t old_size, uint64_t size,
                                uint8_t *proof, size_t *len)
{
    uint64_t lo = 0, hi = size;
    int whole = 1; /* b of SUBPROOF: still on the path of the old tree's root */
    size_t n = 0;
    int rc;

    *len = 0;
    if (old_size > size)
        return FA_ERR_RANGE;
    if (old_size == 0 || old_size == size)
        return 0;
    /* SUBPROOF(m, D[lo:hi], b) top-down (RFC 9162 2.1.4.1), then reversed. */
    for (;;) {
        uint64_t k;
        if (old_size == hi) {
            if (!whole) {
                rc = fa_merkle_range_root(get, ctx, lo, hi, proof + n * HLEN);
                if (rc < 0)
                    return rc;
                n++;
            }
            break;
        }
        k = split_point(hi - lo);
        if (old_size <= lo + k) {
            rc = fa_merkle_range_root(get, ctx, lo + k, hi, proof + n * HLEN);
            hi = lo + k;
        } else {
            rc = fa_merkle_range_root(get, ctx, lo, lo + k, proof + n * HLEN);
            lo = lo + k;
            whole = 0;
        }
        if (rc < 0)
            return rc;
        n++;
    }
    reverse(proof, n);
    *len = n;
    return 0;
}

/* ------------------------------------------------------------------------- */

int fa_merkle_root_from_inclusion(const uint8_t leaf[HLEN], uint64_t index, uint64_t size,
                                  const uint8_t *proof, size_t len, uint8_t out[HLEN])
{
    uint64_t fn = index, sn;
    uint8_t r[HLEN];

    if (index >= size || len > FA_MERKLE_MAX_PROOF)
        return FA_ERR_VERIFY;
    sn = size - 1;
    memcpy(r, leaf, HLEN);
    for (size_t i = 0; i < len; i++) {
        if (sn == 0)
            return FA_ERR_VERIFY;
        if ((fn & 1) || fn == sn) {
            fa_merkle_node_hash(proof + i * HLEN, r, r);
            /* A right-edge node without a sibling at this level: climb. */
            while (!(fn & 1) && fn != 0) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            fa_merkle_node_hash(r, proof + i * HLEN, r);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0)
        return FA_ERR_VERIFY;
    memcpy(out, r, HLEN);
    return 0;
}

int fa_merkle_verify_inclusion(const uint8_t leaf[HLEN], uint64_t index, uint64_t size,
                               const uint8_t *proof, size_t len, const uint8_t root[HLEN])
{
    uint8_t r[HLEN];
    int rc = fa_merkle_root_from_inclusion(leaf, index, size, proof, len, r);
    if (rc < 0)
        return rc;
    return sodium_memcmp(r, root, HLEN) == 0 ? 0 : FA_ERR_VERIFY;
}

int fa_merkle_verify_consistency(uint64_t old_size, uint64_t size, const uint8_t old_root[HLEN],
                                 const uint8_t root[HLEN], const uint8_t *proof, size_t len)
{
    uint64_t fn, sn;
    uint8_t fr[HLEN], sr[HLEN];
    size_t i = 0;

    if (old_size > size || len > FA_MERKLE_MAX_PROOF)
        return FA_ERR_VERIFY;
    if (old_size == size)
        return len == 0 && sodium_memcmp(old_root, root, HLEN) == 0 ? 0 : FA_ERR_VERIFY;
    if (old_size == 0)
        return len == 0 ? 0 : FA_ERR_VERIFY;
    if (len == 0)
        return FA_ERR_VERIFY;

    /* RFC 9162 2.1.4.2.  When old_size is a power of two, the old root is
     * itself the first node of the path and is not sent. */
    fn = old_size - 1;
    sn = size - 1;
    if ((old_size & (old_size - 1)) == 0) {
        memcpy(fr, old_root, HLEN);
    } else {
        memcpy(fr, proof, HLEN);
        i = 1;
    }
    memcpy(sr, fr, HLEN);
    while (fn & 1) {
        fn >>= 1;
        sn >>= 1;
    }
    for (; i < len; i++) {
        if (sn == 0)
            return FA_ERR_VERIFY;
        if ((fn & 1) || fn == sn) {
            fa_merkle_node_hash(proof + i * HLEN, fr, fr);
            fa_merkle_node_hash(proof + i * HLEN, sr, sr);
            while (!(fn & 1) && fn != 0) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            fa_merkle_node_hash(sr, proof + i * HLEN, sr);
        }
        fn >>= 1;
        sn >>= 1;
    }
    if (sn != 0 || sodium_memcmp(fr, old_root, HLEN) != 0 || sodium_memcmp(sr, root, HLEN) != 0)
        return FA_ERR_VERIFY;
    return 0;
}
