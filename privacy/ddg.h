/* ddg.h - one round of the distributed discrete Gaussian on the secure sum:
 * a region's encoding of its update into the ring and the server's decoding
 * of the sum (Kairouz, Liu, Steinke, ICML 2021, arXiv:2102.06387,
 * Algorithm 1 and 2), over privacy/rotation_internal.h and privacy/dgauss_internal.h.
 *
 * Parameters (fa_ddg_config, the federation's; fa_ddg_derive the rest, the
 * same on every machine):
 *   c      clip, the L2 bound of a region's update in model units
 *   z      noise multiplier: the sum of n regions' noise has standard
 *          deviation z c per coordinate in model units
 *   n      min_regions, the regions whose noise the accounting assumes
 *   N      max_regions, the regions that can be in the sum (ring sizing)
 *   b      bits: every rounded coordinate lies in [-2^(b-1), 2^(b-1)]
 *   beta   conditional rounding; beta_wrap the ring's wrap probability
 * derived:
 *   P      padded dimension, the power of two >= d
 *   c'     the scaled clip: the largest c' with
 *          fa_rotation_rounded_bound(c', P, beta) <= 2^(b-1) (bisection)
 *   gamma  = c / c', the granularity (model units of one integer step)
 *   B      = fa_rotation_rounded_bound(c', P, beta), the rounded vector's
 *          L2 bound: the sensitivity the accountant charges
 *   sigma2 = (z c')^2 / n, each region's discrete Gaussian variance in
 *          integer units, taken as that double's exact value
 *   k      = fa_rotation_ring_bits(N, b, sigma2, P, beta_wrap)
 *
 * Encoding (a region): x clipped to c, y = H D x (public seed, stream =
 * the round), y / gamma, conditional rounding to B, N_Z(0, sigma2) added
 * mod 2^k, and one last ring coordinate 1: the region's count, so that the
 * weight coordinate of the sum is the number of regions in it.  Every draw
 * comes from one random source, read in a fixed order, so a seeded source
 * (fa_ddg_stream) replays the same ring vector.
 * Decoding (the server): the centred value of each coordinate of the sum,
 * times gamma, D H, the first d coordinates divided by the count.
 *
 * No I/O and no global state.  Functions return 0 or a negative FA_ERR_*
 * code and fill `err` when given; messages name the DistributedDp field
 * (config.proto) at fault.
 */
#ifndef FA_PRIVACY_DDG_H
#define FA_PRIVACY_DDG_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

#define FA_DDG_MIN_BITS 4
#define FA_DDG_MAX_BITS 30

/* The rotation seed's size (privacy/rotation_internal.h). */
#define FA_ROTATION_SEED_BYTES 32

/* The injectable random source of privacy/: fill(ctx, buf, len) writes len
 * random bytes and returns 0 or a negative FA_ERR_* code; a NULL fill (or a
 * NULL rng) means libsodium's randombytes_buf.  It has the shape of
 * crypto/secagg.h's fa_secagg_rng.  Tests pass a seeded generator to replay
 * a run. */
typedef struct fa_privacy_rng {
    int (*fill)(void *ctx, void *buf, size_t len);
    void *ctx;
} fa_privacy_rng;

typedef struct fa_ddg_config {
    double clip;             /* c > 0, model units */
    double noise_multiplier; /* z > 0 */
    uint32_t min_regions;    /* n >= 1 */
    uint32_t max_regions;    /* N >= n */
    uint32_t bits;           /* b in FA_DDG_MIN_BITS..FA_DDG_MAX_BITS */
    double beta;             /* [0, 1) */
    double beta_wrap;        /* (0, 0.01] */
    uint64_t dim;            /* d >= 1, the update's floats */
} fa_ddg_config;

typedef struct fa_ddg_params {
    fa_ddg_config cfg;
    uint64_t padded;    /* P */
    double scaled_clip; /* c' */
    double gamma;       /* c / c' */
    double bound;       /* B */
    double sigma2;      /* (z c')^2 / n */
    uint32_t ring_bits; /* k */
} fa_ddg_params;

/* The derived parameters of cfg.  Returns 0 or FA_ERR_INVAL: a field out
 * of range, b too few for P coordinates (the rounding alone needs about
 * sqrt(P)), sigma2 below 1 (the accountant's formula wants sigma2 >= 1:
 * raise noise_multiplier or bits), or no ring of at most 32 bits holding
 * the sum (lower bits or the noise).  The message names the field. */
int fa_ddg_derive(fa_ddg_params *p, const fa_ddg_config *cfg, fa_error *err);

/* Coordinates of the ring vector: P + 1 (the count last). */
uint64_t fa_ddg_vector_len(const fa_ddg_params *p);

/* P for an update of d floats: the smallest power of two >= d, as the
 * rotation pads it; 0 when d = 0 or it does not fit in a size_t. */
size_t fa_ddg_padded_dim(size_t d);

/* The public rotation seed of a federation: BLAKE2b-256 of
 * "fedagg-ddg-rotation-v1" || 0x00 || federation_id.  The stream of a
 * round is the round number, so every round rotates differently and every
 * region and the aggregator use the same D. */
void fa_ddg_rotation_seed(const char *federation_id, uint8_t seed[FA_ROTATION_SEED_BYTES]);

typedef struct fa_ddg_encode_stats {
    double l2_norm;  /* ||x|| before the clip, model units */
    double l2_scale; /* factor of the clip (1 when it did not bind) */
    uint32_t tries;  /* draws of the conditional rounding */
} fa_ddg_encode_stats;

/* Encodes x[0..d) (d = p->cfg.dim) into out[0 .. P + 1) as above.  rng
 * (NULL = libsodium) gives the rounding and the noise: secret, since
 * whoever knows it and the sum can take this region's noise out.  st may
 * be NULL.  Returns 0, FA_ERR_INVAL (x not finite: the index is named),
 * FA_ERR_RANGE (the rounding never met its bound), FA_ERR_NOMEM,
 * FA_ERR_CRYPTO or the source's error; out is then unspecified and must
 * not be sent. */
int fa_ddg_encode(const fa_ddg_params *p, const float *x,
                  const uint8_t seed[FA_ROTATION_SEED_BYTES], uint64_t stream,
                  const fa_privacy_rng *rng, uint32_t *out, fa_ddg_encode_stats *st, fa_error *err);

/* Decodes the ring sum sum[0 .. P + 1) into the mean out[0..d) (out has
 * room for P floats; the first d are the mean) over `regions` regions (the
 * aggregator: the participants it unmasked; 0: the sum's own count), and
 * *count, the regions the sum counts (its last coordinate), for the caller
 * to compare.  Returns 0, FA_ERR_RANGE (regions 0 and a count of 0),
 * FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_ddg_decode(const fa_ddg_params *p, const uint32_t *sum,
                  const uint8_t seed[FA_ROTATION_SEED_BYTES], uint64_t stream, uint32_t regions,
                  float *out, uint32_t *count, fa_error *err);

/* A deterministic random source for fa_ddg_encode: the XChaCha20 keystream
 * under a 32-byte secret key (all-zero nonce), read from byte 0 on.  The
 * region derives the key per update (worker/ddp.h) so that a resumed
 * attempt encodes the same ring vector.  Wipe it after use. */
typedef struct fa_ddg_stream {
    uint8_t key[32];
    uint64_t pos;
} fa_ddg_stream;

void fa_ddg_stream_init(fa_ddg_stream *s, const uint8_t key[32]);
void fa_ddg_stream_wipe(fa_ddg_stream *s);
/* The source reading s (valid while s lives). */
fa_privacy_rng fa_ddg_stream_rng(fa_ddg_stream *s);

#endif
