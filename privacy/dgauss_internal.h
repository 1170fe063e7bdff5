/* dgauss_internal.h - exact sampling from the discrete Gaussian, and discrete
 * Gaussian noise on vectors of the ring Z_{2^k}.
 *
 * The discrete Gaussian N_Z(0, sigma^2) gives each integer x the probability
 * exp(-x^2 / (2 sigma^2)) / sum_{y in Z} exp(-y^2 / (2 sigma^2)).  Its
 * variance is slightly below sigma^2: by the relative amount
 * 8 pi^2 sigma^2 exp(-2 pi^2 sigma^2) to first order (Poisson summation;
 * 2.1e-7 at sigma = 1, 1e-17 at sigma = 1.5, but 14% at sigma = 0.5).  It is
 * sigma^2-subgaussian (Canonne, Kamath, Steinke 2020), which bounds the
 * tails of sums (privacy/rotation_internal.h sizes the ring with it).
 *
 * Algorithm: Canonne, Kamath, Steinke, "The Discrete Gaussian for
 * Differential Privacy", NeurIPS 2020 (arXiv:2004.00010), Section 5: with
 * t = floor(sigma) + 1, draw Y from the discrete Laplace of scale t and keep
 * it with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)); the discrete
 * Laplace from a uniform U in {0..t-1} kept with probability exp(-U/t), a
 * geometric count V of Bernoulli(exp(-1)) successes, X = U + tV and a random
 * sign (rejecting -0); every Bernoulli(exp(-gamma)) for rational gamma by von
 * Neumann's method (Bernoulli(gamma/K) for K = 1, 2, ... until the first 0:
 * 1 iff that K is odd; floor(gamma) factors Bernoulli(exp(-1)) first), and
 * every Bernoulli(n/d) by comparing a uniform integer below d with n.  Only
 * integer arithmetic on random bits: no floating point touches the noise, so
 * its distribution is exact, not an approximation that leaks through its low
 * bits (Mironov 2012).
 *
 * sigma^2 is a rational num/den (the exact value is used; fa_dgauss_new_f64
 * takes a double's exact binary value, no decimal rounding: 0.1 means
 * 3602879701896397 / 2^55).  Arithmetic is exact for num, den < 2^63: the
 * largest intermediate is below 2^310 (privacy/bignum_internal.h has 384 bits).
 *
 * Randomness comes from an injectable source (privacy/random_internal.h; NULL =
 * libsodium).  The sampler is not constant-time: its running time depends on
 * the noise it draws, which a co-located observer of the region's process
 * could time.  Not thread-safe: one sampler per thread.
 *
 * Functions return 0 or a negative FA_ERR_* code and fill `err` when given.
 */
#ifndef FA_PRIVACY_DGAUSS_INTERNAL_H
#define FA_PRIVACY_DGAUSS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "privacy/random_internal.h"

#define FA_DGAUSS_MAX_TERM (UINT64_C(1) << 63) /* num and den are below this */

typedef struct fa_dgauss fa_dgauss;

/* A sampler of N_Z(0, num/den).  num, den in [1, 2^63); the fraction is
 * reduced.  rng is copied (NULL = libsodium).  Returns 0, FA_ERR_INVAL,
 * FA_ERR_NOMEM or FA_ERR_CRYPTO (libsodium failed to initialise). */
int fa_dgauss_new(fa_dgauss **out, uint64_t sigma2_num, uint64_t sigma2_den,
                  const fa_privacy_rng *rng, fa_error *err);

/* The same for a double sigma2 > 0, taken exactly as its binary value
 * m * 2^e.  Returns FA_ERR_RANGE when that fraction does not fit (sigma2
 * below 2^-62 with a long mantissa, or at or above 2^63). */
int fa_dgauss_new_f64(fa_dgauss **out, double sigma2, const fa_privacy_rng *rng, fa_error *err);

/* Wipes the buffered randomness and frees.  NULL is a no-op. */
void fa_dgauss_del(fa_dgauss *g);

/* The reduced sigma^2 = *num / *den the sampler draws from. */
void fa_dgauss_sigma2(const fa_dgauss *g, uint64_t *num, uint64_t *den);

/* One sample; n samples.  Returns 0 or the random source's error (then
 * out's contents are unspecified). */
int fa_dgauss_sample(fa_dgauss *g, int64_t *out);
int fa_dgauss_samples(fa_dgauss *g, int64_t *out, size_t n);

/* Adds independent N_Z(0, sigma^2) noise to each of the n ring elements of
 * v, mod 2^ring_bits (1..32): v[i] = (v[i] + Y_i) mod 2^k, only the low k
 * bits of v[i] counted, the high bits of the result 0.  The quantised update
 * of a region becomes its noisy share of the distributed discrete Gaussian
 * (docs/privacy.md).  Returns 0, FA_ERR_INVAL (ring_bits) or the random
 * source's error, in which case v is partly noised and must not be sent. */
int fa_dgauss_add_ring(fa_dgauss *g, uint32_t *v, size_t n, uint32_t ring_bits, fa_error *err);

/* The building blocks, drawing from the sampler's random source (exposed for
 * tests and other mechanisms):
 * bernoulli_exp: 1 with probability exp(-num/den), num >= 0, den >= 1;
 * laplace: the discrete Laplace of scale t >= 1, P(x) proportional to
 * exp(-|x|/t), t < 2^32.  Return 0, FA_ERR_INVAL or the source's error. */
int fa_dgauss_bernoulli_exp(fa_dgauss *g, uint64_t num, uint64_t den, unsigned *out);
int fa_dgauss_laplace(fa_dgauss *g, uint64_t t, int64_t *out);

#endif
