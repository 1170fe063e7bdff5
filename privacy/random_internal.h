/* random_internal.h - the injectable random source of privacy/ and exact uniform
 * draws from it.
 *
 * The source, fa_privacy_rng, is declared in the public privacy/ddg.h.
 *
 * fa_random buffers the source (one fill call per FA_RANDOM_BUF bytes, so a
 * seeded source replays the same stream) and draws from it without bias:
 * integers uniform below any bound by rejection, and Bernoulli(p) for a
 * double p by comparing random bits with the binary expansion of p (exact:
 * the probability is p itself, not p rounded to some number of bits).
 * The buffer holds randomness that may become secret noise: it is wiped by
 * fa_random_wipe.  Not thread-safe; one fa_random per thread.
 */
#ifndef FA_PRIVACY_RANDOM_INTERNAL_H
#define FA_PRIVACY_RANDOM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "privacy/ddg.h"

#define FA_RANDOM_BUF 512

typedef struct fa_random {
    int (*fill)(void *ctx, void *buf, size_t len); /* NULL: randombytes_buf */
    void *ctx;
    size_t pos;     /* next unread byte of buf; FA_RANDOM_BUF = empty */
    uint64_t bits;  /* unread single bits */
    unsigned nbits; /* how many */
    uint8_t buf[FA_RANDOM_BUF];
} fa_random;

/* Starts reading from rng (copied; NULL = libsodium).  Calls sodium_init()
 * for the libsodium source: returns 0 or FA_ERR_CRYPTO. */
int fa_random_init(fa_random *r, const fa_privacy_rng *rng);

/* Wipes the buffered bytes (sodium_memzero). */
void fa_random_wipe(fa_random *r);

/* n random bytes.  Returns 0 or the source's error. */
int fa_random_bytes(fa_random *r, void *out, size_t n);

/* A uniform 64-bit word; one uniform bit. */
int fa_random_u64(fa_random *r, uint64_t *out);
int fa_random_bit(fa_random *r, unsigned *out);

/* Uniform in [0, n), n >= 1 (rejection of the top 2^64 mod n words).
 * Returns 0, FA_ERR_INVAL (n = 0) or the source's error. */
int fa_random_below(fa_random *r, uint64_t n, uint64_t *out);

/* 1 with probability exactly p, for p in [0, 1] (the draws stop at the first
 * random bit that differs from p's binary expansion: two on average).
 * Returns 0, FA_ERR_INVAL (p outside [0, 1] or NaN) or the source's error. */
int fa_random_bernoulli(fa_random *r, double p, unsigned *out);

#endif
