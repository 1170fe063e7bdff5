/* rng.h - the seeded pseudo-random generator of the model and data code.
 *
 * xoshiro256** (Blackman and Vigna, "Scrambled linear pseudorandom number
 * generators", 2018) seeded through splitmix64, so that every seed, even 0,
 * gives a well-mixed state.  Not for cryptography (masks and keys use the
 * crypto module).  Deterministic across machines: the same seed gives the
 * same sequence everywhere, which is what He initialisation, shuffling,
 * the Dirichlet shard split and stochastic rounding rely on.
 */
#ifndef FA_MODEL_RNG_H
#define FA_MODEL_RNG_H

#include <stdint.h>

typedef struct fa_rng {
    uint64_t s[4];
} fa_rng;

/* Seeds r from seed and a stream number (independent sequences for e.g.
 * (seed, epoch) or (seed, rank) pairs). */
void fa_rng_seed(fa_rng *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits. */
uint64_t fa_rng_u64(fa_rng *r);

/* Uniform double in [0, 1) with 53 random bits. */
double fa_rng_uniform(fa_rng *r);

/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint64_t fa_rng_below(fa_rng *r, uint64_t n);

/* Standard normal N(0, 1) (Marsaglia polar method, no cached second value
 * so the sequence does not depend on call history beyond the state). */
double fa_rng_normal(fa_rng *r);

/* Gamma(shape, 1) for shape > 0 (Marsaglia and Tsang 2000; shape < 1 via
 * the boost Gamma(shape + 1) * U^(1/shape)). */
double fa_rng_gamma(fa_rng *r, double shape);

/* Fisher-Yates shuffle of idx[0..n). */
void fa_rng_shuffle_u32(fa_rng *r, uint32_t *idx, uint32_t n);

#endif
