/* rotation_internal.h - the client-side transforms of the distributed discrete
 * Gaussian (Kairouz, Liu, Steinke, ICML 2021, "The Distributed Discrete
 * Gaussian Mechanism for Federated Learning with Secure Aggregation",
 * arXiv:2102.06387, Section 4 and Algorithm 1), and the sizing of the ring.
 *
 * A region's clipped update x (L2 norm <= c) goes through
 *   1. randomized rotation  y = H D x: x padded with zeros to n = 2^m, D the
 *      diagonal of random signs drawn from a public seed shared by all
 *      regions and the server, H the orthonormal Walsh-Hadamard matrix
 *      (n^-1/2 times the Sylvester-ordered +-1 matrix).  ||y|| = ||x||, and
 *      the energy is spread over the coordinates ("flattening", Section 4.2)
 *      so that few bits per coordinate suffice;
 *   2. scaling by 1/gamma (the caller's granularity) and conditional
 *      randomized rounding: each coordinate to floor or ceil with the
 *      probabilities that make it unbiased, repeated until the integer
 *      vector's L2 norm is at most
 *        B = min( c + sqrt(n),
 *                 sqrt(c^2 + n/4 + sqrt(2 log(1/beta)) (c + sqrt(n)/2)) )
 *      (c here in the scaled units).  One try exceeds B with probability at
 *      most beta, so the expected number of tries is at most 1/(1 - beta),
 *      and B is the L2 sensitivity the accountant charges
 *      (fa_rdp_ddg_params.l2_sens).  The conditioning biases the result, by
 *      at most beta/(1 - beta) per coordinate and beta sqrt(n)/(1 - beta) in
 *      L2 (every coordinate moves by less than 1);
 *   3. discrete Gaussian noise and the ring Z_{2^k} (privacy/dgauss_internal.h,
 *      fa_rotation_to_ring), then secure aggregation.
 * The server decodes the sum with fa_rotation_from_ring (centred), scales by
 * gamma and applies fa_rotation_inverse (D H: both are their own inverses).
 *
 * Sizing the ring (fa_rotation_ring_bits): with n regions, inputs of b bits
 * (every coordinate in [-2^(b-1), 2^(b-1)]) and N_Z(0, sigma2) noise from
 * each region, the noise in a coordinate of the sum is n sigma2-subgaussian
 * (the discrete Gaussian is sigma2-subgaussian, Canonne, Kamath, Steinke
 * 2020), so over d coordinates
 *   P(some |noise| >= T) <= 2 d exp(-T^2 / (2 n sigma2)) = beta_wrap   for
 *   T = sqrt(2 n sigma2 log(2 d / beta_wrap)).
 * k is the smallest ring size with n 2^(b-1) + T <= 2^(k-1) - 1: then, with
 * probability at least 1 - beta_wrap, every coordinate of the sum lies in
 * [-2^(k-1), 2^(k-1)) and the centred decoding returns it exactly.  The
 * signal term is the worst case (all regions at the extreme); it does not
 * rely on flattening.
 *
 * No I/O and no global state; randomness for the rounding from an injectable
 * source, the signs from libsodium's ChaCha20 keyed by the public seed.
 * Functions return 0 or a negative FA_ERR_* code and fill `err` when given.
 */
#ifndef FA_PRIVACY_ROTATION_INTERNAL_H
#define FA_PRIVACY_ROTATION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "privacy/random_internal.h"

#define FA_ROTATION_MAX_TRIES 1000 /* default limit of the rounding's retries */

/* The padded dimension: the smallest power of two >= d; 0 when d = 0 or it
 * does not fit in a size_t. */
size_t fa_rotation_padded_dim(size_t d);

/* x <- H x, the orthonormal Walsh-Hadamard transform in place, O(n log n):
 * the stages that stay inside blocks of 2048 floats run block by block (in
 * L1), the rest two stages per pass over memory.  n a power of two.
 * Returns 0 or FA_ERR_INVAL. */
int fa_rotation_wht(float *x, size_t n);

/* x[i] <- s_i x[i] with s_i = -1 iff bit i of the ChaCha20 keystream keyed
 * by seed with nonce `stream` (little-endian; e.g. the round, so every round
 * rotates differently) is 1.  The same seed and stream give the same signs
 * on every machine.  Returns 0 or FA_ERR_CRYPTO. */
int fa_rotation_signs(float *x, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                      uint64_t stream);

/* x <- H D (x[0..d), 0, ..., 0): x has room for n = fa_rotation_padded_dim(d)
 * floats; x[d..n) is overwritten with zeros first.  Returns 0, FA_ERR_INVAL
 * (n is not that) or FA_ERR_CRYPTO. */
int fa_rotation_forward(float *x, size_t d, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                        uint64_t stream, fa_error *err);

/* x <- D H x, the exact inverse of fa_rotation_forward (to float rounding);
 * the caller keeps the first d coordinates.  Returns 0, FA_ERR_INVAL or
 * FA_ERR_CRYPTO. */
int fa_rotation_inverse(float *x, size_t n, const uint8_t seed[FA_ROTATION_SEED_BYTES],
                        uint64_t stream, fa_error *err);

/* B above, for an input of L2 norm <= c (scaled units, c >= 0) in n
 * dimensions and 0 <= beta < 1 (beta = 0: c + sqrt(n), which every rounding
 * meets).  -1 for arguments out of range. */
double fa_rotation_rounded_bound(double c, size_t n, double beta);

/* Conditional randomized rounding of x[0..n) to out[0..n): out[i] = floor(x[i])
 * + Bernoulli(x[i] - floor(x[i])) (exact probabilities, privacy/random_internal.h),
 * the whole vector redrawn until sum out[i]^2 <= bound^2 (checked in
 * integers, rounding bound^2 down), at most max_tries times (0 =
 * FA_ROTATION_MAX_TRIES).  *tries (may be NULL) gets the number of draws.
 * rng NULL = libsodium.  Returns 0, FA_ERR_INVAL (x[i] not finite or
 * |x[i]| >= 2^31 - 1: the index is named; bound negative or NaN), FA_ERR_RANGE
 * (no draw met the bound: the input is probably larger than the bound was
 * sized for) or the source's error. */
int fa_rotation_round(const float *x, size_t n, double bound, uint32_t max_tries,
                      const fa_privacy_rng *rng, int32_t *out, uint32_t *tries, fa_error *err);

/* Integers to the ring and back, k = ring_bits in 1..32: to_ring takes x
 * mod 2^k; from_ring maps each element to its centred representative in
 * [-2^(k-1), 2^(k-1)).  Return 0 or FA_ERR_INVAL. */
int fa_rotation_to_ring(const int32_t *x, size_t n, uint32_t ring_bits, uint32_t *out);
int fa_rotation_from_ring(const uint32_t *v, size_t n, uint32_t ring_bits, int64_t *out);

/* k of the sizing above for n_regions >= 1, input_bits b in 1..31, each
 * region's noise parameter sigma2 >= 0, dim d >= 1 coordinates and
 * 0 < beta_wrap < 1.  Returns k in 1..32, or 0 when no k <= 32 suffices or an
 * argument is out of range. */
uint32_t fa_rotation_ring_bits(uint32_t n_regions, uint32_t input_bits, double sigma2, uint64_t dim,
                               double beta_wrap);

#endif
