/* ddp.c - a region's side of the distributed DP on the secure sum (ddp.h). */
#include "worker/ddp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_endian.h"
#include "common/fa_log.h"

#define KDF_CONTEXT "faddgnse"
#define KDF_SUBKEY 1
#define NOISE_LABEL "fedagg-ddg-noise-v1"

/* Whether a published derived value is the one derived here (the last
 * bits of a log() may differ between C libraries; nothing more). */
static int close_to(double published, double mine)
{
    return fabs(published - mine) <= 1e-9 * fabs(mine);
}

int fa_ddp_params(fa_ddg_params *p, const Fedagg__FederationInfo *info, fa_error *err)
{
    const Fedagg__DdpParams *d = info->ddp;
    fa_ddg_config c;
    int rc;

    if (!d)
        return fa_errorf(err, FA_ERR_PROTOCOL, "the federation has no distributed DP");
    memset(&c, 0, sizeof(c));
    c.clip = d->clip;
    c.noise_multiplier = d->noise_multiplier;
    c.min_regions = d->min_regions;
    c.max_regions = d->max_regions;
    c.bits = d->bits;
    c.beta = d->beta;
    c.beta_wrap = d->beta_wrap;
    c.dim = info->num_params;
    if (c.max_regions != info->n_regions)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "distributed DP: the federation sizes its ring for %u regions but lists "
                         "%zu",
                         c.max_regions, info->n_regions);
    if ((rc = fa_ddg_derive(p, &c, err)) != 0) {
        /* the federation's settings, not this region's config */
        fa_error_prefix(err, rc, "the federation's distributed DP");
        if (err)
            err->code = FA_ERR_PROTOCOL;
        return FA_ERR_PROTOCOL;
    }
    if (d->padded_dim != p->padded || d->ring_bits != p->ring_bits ||
        (info->quant && info->quant->ring_bits != p->ring_bits) ||
        !close_to(d->granularity, p->gamma) || !close_to(d->sigma2, p->sigma2) ||
        !close_to(d->l2_bound, p->bound))
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "distributed DP: the federation publishes granularity %.17g, sigma2 "
                         "%.17g, bound %.17g, %" PRIu64 " coordinates, %u ring bits; this region "
                         "derives %.17g, %.17g, %.17g, %" PRIu64 ", %u from the same settings",
                         d->granularity, d->sigma2, d->l2_bound, d->padded_dim, d->ring_bits,
                         p->gamma, p->sigma2, p->bound, p->padded, p->ring_bits);
    /* the same numbers on both sides, bit for bit */
    p->gamma = d->granularity;
    p->sigma2 = d->sigma2;
    p->bound = d->l2_bound;
    return 0;
}

uint64_t fa_ddp_vector_len(const Fedagg__FederationInfo *info)
{
    size_t padded;
    if (!info->ddp)
        return info->num_params + 1;
    padded = info->num_params ? fa_ddg_padded_dim((size_t)info->num_params) : 0;
    return padded ? (uint64_t)padded + 1 : 0;
}

int fa_ddp_noise_key(const uint8_t identity_seed[32], const char *federation_id, const char *region,
                     uint64_t round, uint64_t model_version, const float *delta, size_t d,
                     uint8_t key[32], fa_error *err)
{
    uint8_t sub[crypto_generichash_KEYBYTES], num[8];
    crypto_generichash_state st;

    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    if (crypto_kdf_derive_from_key(sub, sizeof(sub), KDF_SUBKEY, KDF_CONTEXT, identity_seed) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "distributed DP: key derivation failed");
    crypto_generichash_init(&st, sub, sizeof(sub), 32);
    crypto_generichash_update(&st, (const uint8_t *)NOISE_LABEL, sizeof(NOISE_LABEL));
    crypto_generichash_update(&st, (const uint8_t *)federation_id, strlen(federation_id) + 1);
    crypto_generichash_update(&st, (const uint8_t *)region, strlen(region) + 1);
    fa_le_put_u64(num, round);
    crypto_generichash_update(&st, num, 8);
    fa_le_put_u64(num, model_version);
    crypto_generichash_update(&st, num, 8);
    fa_le_put_u64(num, (uint64_t)d);
    crypto_generichash_update(&st, num, 8);
    crypto_generichash_update(&st, (const uint8_t *)delta, d * sizeof(float));
    crypto_generichash_final(&st, key, 32);
    sodium_memzero(sub, sizeof(sub));
    sodium_memzero(&st, sizeof(st));
    return 0;
}

int fa_ddp_encode_update(const Fedagg__FederationInfo *info, const uint8_t identity_seed[32],
                         const char *federation_id, const char *region, const float *delta,
                         size_t d, uint32_t **out, size_t *n, fa_error *err)
{
    fa_ddg_params p;
    fa_ddg_encode_stats st;
    fa_ddg_stream s;
    fa_privacy_rng rng;
    uint8_t key[32], rot[FA_ROTATION_SEED_BYTES];
    int rc;

    *out = NULL;
    *n = 0;
    if ((rc = fa_ddp_params(&p, info, err)) != 0)
        return rc;
    if (d != info->num_params)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "distributed DP: update of %zu coordinates, the model %" PRIu64, d,
                         info->num_params);
    *n = (size_t)fa_ddg_vector_len(&p);
    *out = malloc(*n * sizeof(**out));
    if (!*out)
        return fa_errorf(err, FA_ERR_NOMEM, "distributed DP: out of memory");
    if ((rc = fa_ddp_noise_key(identity_seed, federation_id, region, info->round,
                               info->model_version, delta, d, key, err)) != 0)
        goto out;
    fa_ddg_rotation_seed(federation_id, rot);
    fa_ddg_stream_init(&s, key);
    rng = fa_ddg_stream_rng(&s);
    rc = fa_ddg_encode(&p, delta, rot, info->round, &rng, *out, &st, err);
    fa_ddg_stream_wipe(&s);
    if (rc != 0)
        goto out;
    fa_log(FA_LOG_INFO, "update encoded with distributed DP noise",
           "round=%" PRIu64 " version=%" PRIu64 " l2_norm=%.6g clip=%g l2_scale=%.6g "
           "rounding_tries=%u noise_sigma2=%.6g ring_bits=%u coordinates=%zu",
           info->round, info->model_version, st.l2_norm, p.cfg.clip, st.l2_scale, st.tries,
           p.sigma2, p.ring_bits, *n);
out:
    sodium_memzero(key, sizeof(key));
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void fa_ddp_spend(const fa_ddg_params *p, fa_privacy_spend *sp)
{
    memset(sp, 0, sizeof(*sp));
    snprintf(sp->mechanism, sizeof(sp->mechanism), "%s", FA_PRIVACY_MECHANISM_DDG);
    sp->noise_multiplier = p->cfg.noise_multiplier;
    sp->clip = p->cfg.clip;
    sp->sampling_rate = 1.0;
    sp->steps = 1;
    sp->ddg_l2_sens = p->bound;
    sp->ddg_sigma2 = p->sigma2;
    sp->ddg_regions = p->cfg.min_regions;
    sp->ddg_dim = p->padded;
}
