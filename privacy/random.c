/* random.c - buffered, unbiased draws from an injectable byte source. */
#include "privacy/random_internal.h"

#include <string.h>

#include <sodium.h>

int fa_random_init(fa_random *r, const fa_privacy_rng *rng)
{
    memset(r, 0, sizeof(*r));
    r->fill = rng ? rng->fill : NULL;
    r->ctx = rng ? rng->ctx : NULL;
    r->pos = FA_RANDOM_BUF;
    if (!r->fill && sodium_init() < 0)
        return FA_ERR_CRYPTO;
    return 0;
}

void fa_random_wipe(fa_random *r)
{
    sodium_memzero(r->buf, sizeof(r->buf));
    sodium_memzero(&r->bits, sizeof(r->bits));
    r->nbits = 0;
    r->pos = FA_RANDOM_BUF;
}

static int refill(fa_random *r)
{
    int rc = 0;
    if (r->fill)
        rc = r->fill(r->ctx, r->buf, sizeof(r->buf));
    else
        randombytes_buf(r->buf, sizeof(r->buf));
    r->pos = rc == 0 ? 0 : FA_RANDOM_BUF;
    return rc;
}

int fa_random_bytes(fa_random *r, void *out, size_t n)
{
    uint8_t *o = out;
    int rc;
    while (n > 0) {
        if (r->pos == FA_RANDOM_BUF && (rc = refill(r)) != 0)
            return rc;
        size_t k = FA_RANDOM_BUF - r->pos;
        if (k > n)
            k = n;
        memcpy(o, r->buf + r->pos, k);
        sodium_memzero(r->buf + r->pos, k);
        r->pos += k;
        o += k;
        n -= k;
    }
    return 0;
}

int fa_random_u64(fa_random *r, uint64_t *out)
{
    uint8_t tmp[8], *b = tmp;
    uint64_t v = 0;
    int rc;
    if (r->pos + 8 <= FA_RANDOM_BUF) { /* the common case: straight from the buffer */
        b = r->buf + r->pos;
        r->pos += 8;
    } else if ((rc = fa_random_bytes(r, tmp, 8)) != 0) {
        return rc;
    }
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    memset(b, 0, 8); /* consumed randomness does not stay behind */
    *out = v;
    return 0;
}

int fa_random_bit(fa_random *r, unsigned *out)
{
    int rc;
    if (r->nbits == 0) {
        if ((rc = fa_random_u64(r, &r->bits)) != 0)
            return rc;
        r->nbits = 64;
    }
    *out = (unsigned)(r->bits & 1);
    r->bits >>= 1;
    r->nbits--;
    return 0;
}

int fa_random_below(fa_random *r, uint64_t n, uint64_t *out)
{
    uint64_t x, reject;
    int rc;
    if (n == 0)
        return FA_ERR_INVAL;
    if ((n & (n - 1)) == 0) { /* a power of two: mask */
        if ((rc = fa_random_u64(r, &x)) != 0)
            return rc;
        *out = x & (n - 1);
        return 0;
    }
    reject = (0 - n) % n; /* 2^64 mod n: the words at the top that would bias */
    do {
        if ((rc = fa_random_u64(r, &x)) != 0)
            return rc;
    } while (x > UINT64_MAX - reject);
    *out = x % n;
    return 0;
}

int fa_random_bernoulli(fa_random *r, double p, unsigned *out)
{
    unsigned b;
    int rc;
    if (!(p >= 0 && p <= 1))
        return FA_ERR_INVAL;
    if (p == 1) {
        *out = 1;
        return 0;
    }
    /* U uniform in [0, 1) bit by bit against p = 0.p1 p2 p3 ... (finite: a
     * double has at most 1074 fraction bits; doubling and subtracting 1 is
     * exact).  U < p at the first position where they differ with U's bit
     * 0; when p's expansion ends first, U >= p. */
    while (p > 0) {
        p *= 2;
        unsigned pb = p >= 1;
        if (pb)
            p -= 1;
        if ((rc = fa_random_bit(r, &b)) != 0)
            return rc;
        if (b != pb) {
            *out = pb; /* b = 0 < pb = 1: U < p */
            return 0;
        }
    }
    *out = 0;
    return 0;
}
