/* ddp.h - a region's side of the federation's distributed DP on the secure
 * sum (config.proto DistributedDp, FederationInfo.ddp, docs/privacy.md):
 * the region's update becomes its noisy ring vector (privacy/ddg.h) before
 * secure aggregation masks it.
 *
 * The parameters: the region derives granularity, noise, bound and ring
 * from the published configuration itself (fa_ddg_derive) and refuses a
 * federation whose published derived values differ (an aggregator cannot
 * make a region add less noise than its configuration says without the
 * region noticing).
 *
 * The randomness of the rounding and the noise: secret, and a function of
 * the update.  Its key is keyed BLAKE2b, under a subkey of the region's
 * identity seed (libsodium crypto_kdf, context "faddgnse"), of the
 * federation, the region, the round, the model version trained from and
 * the update's bytes; the ring vector is then the XChaCha20 keystream's
 * (fa_ddg_stream).  So:
 *   - a resumed attempt (the worker restarted; worker/round_client_attempt.c
 *     re-sets the saved update) encodes the identical ring vector, which
 *     the restored secure-aggregation client checks against the input it
 *     bound before the crash;
 *   - a new attempt of the same round with the same update sends the same
 *     noisy vector: one release, charged once (worker/privacy_budget.h),
 *     never fresh noise on the same update that two sums could average;
 *   - another update (trained afresh) gets other noise.
 * Whoever holds the identity seed can recompute a region's noise: it is
 * already the key that protects everything else of the region.
 *
 * The weight: with distributed DP every region counts 1 (its ring vector's
 * last coordinate), whatever its examples: the sensitivity of the sum is
 * one region's clipped update, and a weight would scale it, so the honest
 * mean is the plain mean over the participants.
 */
#ifndef FA_WORKER_DDP_H
#define FA_WORKER_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "fedagg.pb-c.h"
#include "privacy/ddg.h"
#include "worker/privacy_budget.h"

/* The parameters of the federation's distributed DP for info's model
 * (info->ddp set).  Returns 0, FA_ERR_PROTOCOL (published values that this
 * region does not derive, or out of range: named) or FA_ERR_INVAL. */
int fa_ddp_params(fa_ddg_params *p, const Fedagg__FederationInfo *info, fa_error *err);

/* Coordinates of the secure-aggregation vector of info: the float codec's
 * num_params + 1, or with distributed DP the rotated dimension + 1. */
uint64_t fa_ddp_vector_len(const Fedagg__FederationInfo *info);

/* The key of the rounding and noise of this update (see above). */
int fa_ddp_noise_key(const uint8_t identity_seed[32], const char *federation_id, const char *region,
                     uint64_t round, uint64_t model_version, const float *delta, size_t d,
                     uint8_t key[32], fa_error *err);

/* The region's noisy ring vector of delta[0..d) for attempt info:
 * *out (malloc'ed, fa_ddp_vector_len(info) elements; free()) and its
 * number *n.  Logs the clip and the rounding.  Returns 0, FA_ERR_PROTOCOL
 * (as fa_ddp_params; d not info->num_params), or fa_ddg_encode's errors. */
int fa_ddp_encode_update(const Fedagg__FederationInfo *info, const uint8_t identity_seed[32],
                         const char *federation_id, const char *region, const float *delta,
                         size_t d, uint32_t **out, size_t *n, fa_error *err);

/* A round of p as a spend of the region's budget (FA_PRIVACY_MECHANISM_DDG):
 * min_regions' noise, at region level (one region's update replaced by
 * zero: sensitivity B). */
void fa_ddp_spend(const fa_ddg_params *p, fa_privacy_spend *sp);

#endif
