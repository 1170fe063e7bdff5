/* shamir_internal.h - Shamir t-of-n secret sharing of 32-byte secrets over GF(2^8)
 * (internal to crypto/).
 *
 * Each byte of the secret is the constant term of its own random polynomial
 * of degree t - 1 over GF(2^8) with the AES polynomial x^8+x^4+x^3+x+1; the
 * share of the holder with x coordinate x (1..255, public) is the 32 values
 * at x.  Any t shares give the secret back (Lagrange interpolation at 0);
 * fewer give no information about it.  Arithmetic on secret bytes is
 * branch-free and table-free; only the public x coordinates steer branches.
 */
#ifndef FA_CRYPTO_SHAMIR_INTERNAL_H
#define FA_CRYPTO_SHAMIR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/secagg.h"

#define FA_SHAMIR_BYTES 32

/* Splits secret into n shares for holders xs[0..n) (distinct, nonzero) with
 * threshold t (1 <= t <= n <= 255): shares[i*32 .. i*32+32) is holder xs[i]'s.
 * Coefficients come from rng.  Returns 0, FA_ERR_INVAL or the rng's error. */
int fa_shamir_split(const uint8_t secret[FA_SHAMIR_BYTES], unsigned t, const uint8_t *xs, size_t n,
                    uint8_t *shares, const fa_secagg_rng *rng);

/* Combines exactly t shares (holders xs[0..t), distinct and nonzero) into
 * secret.  Returns 0 or FA_ERR_INVAL. */
int fa_shamir_combine(uint8_t secret[FA_SHAMIR_BYTES], const uint8_t *xs, const uint8_t *shares,
                      size_t t);

#endif
