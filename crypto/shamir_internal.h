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

/* The value at x of the polynomial through exactly t shares (holders
 * xs[0..t), distinct and nonzero): fa_shamir_combine is x = 0.  For
 * checking a further share against t others.  Returns 0 or FA_ERR_INVAL. */
int fa_shamir_eval(uint8_t out[FA_SHAMIR_BYTES], uint8_t x, const uint8_t *xs,
                   const uint8_t *shares, size_t t);

/* Decodes m >= t shares (holders xs[0..m), distinct and nonzero) some of
 * which may be wrong, as the Reed-Solomon code words they are: for each
 * byte, Berlekamp-Welch finds the polynomial of degree < t that all but at
 * most e = floor((m - t) / 2) of the shares lie on, in O(m^3).  When at most
 * e shares are wrong in any byte, that is the dealer's polynomial: writes
 * the secret and wrong[i] = 1 for exactly the shares off it (0 for the
 * others), and returns 0.  Returns FA_ERR_VERIFY when no such polynomial
 * exists (more shares are wrong than m - t allows to correct; the caller
 * may still try subsets), FA_ERR_INVAL, FA_ERR_NOMEM.  More than e wrong
 * shares may also decode to another polynomial: check the secret against
 * its commitment.  Not constant time (table look-ups on share values): for
 * shares already revealed to the caller. */
int fa_shamir_decode(uint8_t secret[FA_SHAMIR_BYTES], const uint8_t *xs, const uint8_t *shares,
                     size_t m, size_t t, uint8_t *wrong);

#endif
