#include "crypto/shamir_internal.h"

#include <string.h>

#include <sodium.h>

#include "common/fa_err.h"
#include "crypto/secagg_internal.h"

/* v * x in GF(2^8), constant time in v. */
static inline uint8_t gf_xtime(uint8_t v)
{
    return (uint8_t)((v << 1) ^ (0x1b & (uint8_t) - (v >> 7)));
}

/* y[0..32) *= x where x is public (its bits may steer branches). */
static void gf_mul_vec_public(uint8_t y[FA_SHAMIR_BYTES], uint8_t x)
{
    uint8_t r[FA_SHAMIR_BYTES] = {0}, t[FA_SHAMIR_BYTES];
    memcpy(t, y, sizeof(t));
    for (int bit = 0; bit < 8; bit++) {
        if ((x >> bit) & 1)
            for (int j = 0; j < FA_SHAMIR_BYTES; j++)
                r[j] ^= t[j];
        for (int j = 0; j < FA_SHAMIR_BYTES; j++)
            t[j] = gf_xtime(t[j]);
    }
    memcpy(y, r, sizeof(r));
    sodium_memzero(r, sizeof(r));
    sodium_memzero(t, sizeof(t));
}

/* a * b for public a and b. */
static uint8_t gf_mul(uint8_t a, uint8_t b)
{
    uint8_t r = 0;
    for (int bit = 0; bit < 8; bit++) {
        if ((b >> bit) & 1)
            r ^= a;
        a = gf_xtime(a);
    }
    return r;
}

static uint8_t gf_inv(uint8_t a) /* a^254, a != 0 */
{
    uint8_t r = 1, p = a;
    for (int e = 254; e; e >>= 1) {
        if (e & 1)
            r = gf_mul(r, p);
        p = gf_mul(p, p);
    }
    return r;
}

static int xs_valid(const uint8_t *xs, size_t n)
{
    uint8_t seen[256] = {0};
    for (size_t i = 0; i < n; i++) {
        if (xs[i] == 0 || seen[xs[i]])
            return 0;
        seen[xs[i]] = 1;
    }
    return 1;
}

int fa_shamir_split(const uint8_t secret[FA_SHAMIR_BYTES], unsigned t, const uint8_t *xs, size_t n,
                    uint8_t *shares, const fa_secagg_rng *rng)
{
    /* coef[c] is the 32 coefficients of x^(c+1); the constant term is the secret. */
    uint8_t coef[254][FA_SHAMIR_BYTES];
    int rc;

    if (t < 1 || n < t || n > 255 || !xs_valid(xs, n))
        return FA_ERR_INVAL;
    rc = fa_secagg_rng_fill(rng, coef, (size_t)(t - 1) * FA_SHAMIR_BYTES);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        /* Horner: y = ((a_{t-1} x + a_{t-2}) x + ...) x + secret */
        uint8_t y[FA_SHAMIR_BYTES];
        if (t == 1) {
            memcpy(y, secret, sizeof(y));
        } else {
            memcpy(y, coef[t - 2], sizeof(y));
            for (int c = (int)t - 3; c >= -1; c--) {
                const uint8_t *a = c >= 0 ? coef[c] : secret;
                gf_mul_vec_public(y, xs[i]);
                for (int j = 0; j < FA_SHAMIR_BYTES; j++)
                    y[j] ^= a[j];
            }
        }
        memcpy(shares + i * FA_SHAMIR_BYTES, y, sizeof(y));
        sodium_memzero(y, sizeof(y));
    }
out:
    sodium_memzero(coef, sizeof(coef));
    return rc;
}

int fa_shamir_combine(uint8_t secret[FA_SHAMIR_BYTES], const uint8_t *xs, const uint8_t *shares,
                      size_t t)
{
    uint8_t acc[FA_SHAMIR_BYTES] = {0}, term[FA_SHAMIR_BYTES];

    if (t < 1 || t > 255 || !xs_valid(xs, t))
        return FA_ERR_INVAL;
    for (size_t i = 0; i < t; i++) {
        /* Lagrange basis at 0: prod_{j != i} x_j / (x_j - x_i); minus is xor. */
        uint8_t num = 1, den = 1;
        for (size_t j = 0; j < t; j++) {
            if (j == i)
                continue;
            num = gf_mul(num, xs[j]);
            den = gf_mul(den, (uint8_t)(xs[j] ^ xs[i]));
        }
        memcpy(term, shares + i * FA_SHAMIR_BYTES, sizeof(term));
        gf_mul_vec_public(term, gf_mul(num, gf_inv(den)));
        for (int j = 0; j < FA_SHAMIR_BYTES; j++)
            acc[j] ^= term[j];
    }
    memcpy(secret, acc, sizeof(acc));
    sodium_memzero(acc, sizeof(acc));
    sodium_memzero(term, sizeof(term));
    return 0;
}
