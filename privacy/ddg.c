/* ddg.c - one round of the distributed discrete Gaussian (see ddg.h). */
#include "privacy/ddg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "privacy/dgauss_internal.h"
#include "privacy/rotation_internal.h"

#define DECODE_CHUNK 4096 /* ring words decoded at a time */

int fa_ddg_derive(fa_ddg_params *p, const fa_ddg_config *cfg, fa_error *err)
{
    const fa_ddg_config *c = cfg;
    double top, lo, hi;
    size_t padded;

    memset(p, 0, sizeof(*p));
    if (!(c->clip > 0) || !isfinite(c->clip))
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.clip %g: must be a finite L2 norm > 0 (model units)",
                         c->clip);
    if (!(c->noise_multiplier > 0) || !isfinite(c->noise_multiplier))
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.noise_multiplier %g: must be finite, > 0",
                         c->noise_multiplier);
    if (c->min_regions < 1 || c->min_regions > c->max_regions)
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.min_regions %u: must be from 1 to the %u regions that "
                         "can be in the sum",
                         c->min_regions, c->max_regions);
    if (c->bits < FA_DDG_MIN_BITS || c->bits > FA_DDG_MAX_BITS)
        return fa_errorf(err, FA_ERR_INVAL, "distributed_dp.bits %u: must be from %d to %d",
                         c->bits, FA_DDG_MIN_BITS, FA_DDG_MAX_BITS);
    if (!(c->beta >= 0 && c->beta < 1))
        return fa_errorf(err, FA_ERR_INVAL, "distributed_dp.beta %g: must be in [0, 1)", c->beta);
    if (!(c->beta_wrap > 0 && c->beta_wrap <= 0.01))
        return fa_errorf(err, FA_ERR_INVAL, "distributed_dp.beta_wrap %g: must be in (0, 0.01]",
                         c->beta_wrap);
    padded = c->dim ? fa_rotation_padded_dim((size_t)c->dim) : 0;
    if (padded == 0 || padded > ((size_t)1 << 40))
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp: a model of %llu coordinates cannot be rotated",
                         (unsigned long long)c->dim);
    /* The largest scaled clip whose rounding bound fits the b-bit range:
     * B(c') is increasing in c', so bisection (60 halvings: to 2^-60 of the
     * range, far below one integer step). */
    top = ldexp(1.0, (int)c->bits - 1);
    lo = 0;
    hi = top;
    if (fa_rotation_rounded_bound(0, padded, c->beta) > top)
        hi = 0;
    for (int i = 0; i < 60 && hi > 0; i++) {
        double mid = (lo + hi) / 2;
        if (fa_rotation_rounded_bound(mid, padded, c->beta) <= top)
            lo = mid;
        else
            hi = mid;
    }
    if (lo < top / 2)
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.bits %u: too few for %zu rotated coordinates (the "
                         "rounding alone adds about sqrt(%zu) = %.0f to the norm, leaving %.0f of "
                         "2^%u for the update); use at least %u bits",
                         c->bits, padded, padded, sqrt((double)padded), lo, c->bits - 1,
                         (unsigned)ceil(log2(sqrt((double)padded))) + 4);
    p->cfg = *c;
    p->padded = padded;
    p->scaled_clip = lo;
    p->gamma = c->clip / lo;
    p->bound = fa_rotation_rounded_bound(lo, padded, c->beta);
    p->sigma2 = (c->noise_multiplier * lo) * (c->noise_multiplier * lo) / c->min_regions;
    if (!(p->sigma2 >= 1))
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.noise_multiplier %g: each region's noise would have "
                         "variance %g < 1 integer step (the accounting needs >= 1); raise it or "
                         "distributed_dp.bits",
                         c->noise_multiplier, p->sigma2);
    if (p->sigma2 >= 9.2e18)
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp.noise_multiplier %g: each region's noise variance %g is "
                         "beyond the sampler's 2^63",
                         c->noise_multiplier, p->sigma2);
    p->ring_bits = fa_rotation_ring_bits(c->max_regions, c->bits, p->sigma2, padded, c->beta_wrap);
    if (p->ring_bits == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed_dp: %u regions of %u-bit inputs with noise variance %g each "
                         "need a ring of more than 32 bits (secure aggregation's limit); lower "
                         "distributed_dp.bits or distributed_dp.noise_multiplier",
                         c->max_regions, c->bits, p->sigma2);
    return 0;
}

uint64_t fa_ddg_vector_len(const fa_ddg_params *p)
{
    return p->padded + 1;
}

size_t fa_ddg_padded_dim(size_t d)
{
    return fa_rotation_padded_dim(d);
}

void fa_ddg_rotation_seed(const char *federation_id, uint8_t seed[FA_ROTATION_SEED_BYTES])
{
    static const char label[] = "fedagg-ddg-rotation-v1";
    crypto_generichash_state st;

    crypto_generichash_init(&st, NULL, 0, FA_ROTATION_SEED_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)label, sizeof(label)); /* with its NUL */
    crypto_generichash_update(&st, (const unsigned char *)federation_id, strlen(federation_id));
    crypto_generichash_final(&st, seed, FA_ROTATION_SEED_BYTES);
}

int fa_ddg_encode(const fa_ddg_params *p, const float *x,
                  const uint8_t seed[FA_ROTATION_SEED_BYTES], uint64_t stream,
                  const fa_privacy_rng *rng, uint32_t *out, fa_ddg_encode_stats *st, fa_error *err)
{
    const size_t d = (size_t)p->cfg.dim, n = (size_t)p->padded;
    float *y = NULL;   /* (n) the rotated, scaled update */
    int32_t *q = NULL; /* (n) its rounding */
    fa_dgauss *g = NULL;
    double ss = 0, norm, scale, inv = 1.0 / p->gamma;
    uint32_t tries = 0;
    int rc;

    for (size_t i = 0; i < d; i++) {
        if (!isfinite(x[i]))
            return fa_errorf(err, FA_ERR_INVAL, "distributed DP: update coordinate %zu is %g", i,
                             (double)x[i]);
        ss += (double)x[i] * (double)x[i];
    }
    y = malloc(n * sizeof(*y));
    q = malloc(n * sizeof(*q));
    if (!y || !q) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "distributed DP: out of memory (%zu coordinates)", n);
        goto out;
    }
    norm = sqrt(ss);
    scale = norm > p->cfg.clip ? p->cfg.clip / norm : 1.0;
    for (size_t i = 0; i < d; i++)
        y[i] = (float)((double)x[i] * scale);
    if ((rc = fa_rotation_forward(y, d, n, seed, stream, err)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)y[i] * inv);
    if ((rc = fa_rotation_round(y, n, p->bound, 0, rng, q, &tries, err)) != 0) {
        fa_error_prefix(err, rc, "distributed DP");
        goto out;
    }
    if ((rc = fa_rotation_to_ring(q, n, p->ring_bits, out)) != 0) {
        fa_errorf(err, rc, "distributed DP: ring bits %u", p->ring_bits);
        goto out;
    }
    if ((rc = fa_dgauss_new_f64(&g, p->sigma2, rng, err)) != 0 ||
        (rc = fa_dgauss_add_ring(g, out, n, p->ring_bits, err)) != 0) {
        fa_error_prefix(err, rc, "distributed DP: the noise");
        goto out;
    }
    out[n] = 1; /* this region's count: the sum's last coordinate counts the regions */
    if (st) {
        st->l2_norm = norm;
        st->l2_scale = scale;
        st->tries = tries;
    }
out:
    /* the update before its noise: wiped */
    if (y)
        sodium_memzero(y, n * sizeof(*y));
    if (q)
        sodium_memzero(q, n * sizeof(*q));
    free(y);
    free(q);
    fa_dgauss_del(g);
    return rc;
}

int fa_ddg_decode(const fa_ddg_params *p, const uint32_t *sum,
                  const uint8_t seed[FA_ROTATION_SEED_BYTES], uint64_t stream, uint32_t regions,
                  float *out, uint32_t *count, fa_error *err)
{
    const size_t d = (size_t)p->cfg.dim, n = (size_t)p->padded;
    const uint32_t mask = p->ring_bits == 32 ? UINT32_MAX : (UINT32_C(1) << p->ring_bits) - 1;
    int64_t chunk[DECODE_CHUNK];
    uint32_t k = sum[n] & mask;
    int rc;

    *count = k;
    if (regions == 0)
        regions = k;
    if (regions == 0)
        return fa_errorf(err, FA_ERR_RANGE, "distributed DP: the sum counts no region");
    for (size_t off = 0; off < n; off += DECODE_CHUNK) {
        size_t m = n - off < DECODE_CHUNK ? n - off : DECODE_CHUNK;
        fa_rotation_from_ring(sum + off, m, p->ring_bits, chunk);
        for (size_t i = 0; i < m; i++)
            out[off + i] = (float)((double)chunk[i] * p->gamma);
    }
    if ((rc = fa_rotation_inverse(out, n, seed, stream, err)) != 0)
        return rc;
    for (size_t i = 0; i < d; i++)
        out[i] = (float)((double)out[i] / regions);
    return 0;
}

/* ---- the deterministic source ------------------------------------------------------ */

void fa_ddg_stream_init(fa_ddg_stream *s, const uint8_t key[32])
{
    memcpy(s->key, key, 32);
    s->pos = 0;
}

void fa_ddg_stream_wipe(fa_ddg_stream *s)
{
    sodium_memzero(s, sizeof(*s));
}

static int stream_fill(void *ctx, void *buf, size_t len)
{
    static const uint8_t nonce[crypto_stream_xchacha20_NONCEBYTES] = {0};
    fa_ddg_stream *s = ctx;
    uint8_t *b = buf;
    size_t off = (size_t)(s->pos % 64);

    if (sodium_init() < 0)
        return FA_ERR_CRYPTO;
    if (off && len) {
        /* finish the 64-byte block the last read stopped in */
        uint8_t blk[64] = {0};
        size_t take = 64 - off < len ? 64 - off : len;
        crypto_stream_xchacha20_xor_ic(blk, blk, 64, nonce, s->pos / 64, s->key);
        memcpy(b, blk + off, take);
        sodium_memzero(blk, sizeof(blk));
        b += take;
        len -= take;
        s->pos += take;
    }
    if (len) {
        memset(b, 0, len);
        crypto_stream_xchacha20_xor_ic(b, b, len, nonce, s->pos / 64, s->key);
        s->pos += len;
    }
    return 0;
}

fa_privacy_rng fa_ddg_stream_rng(fa_ddg_stream *s)
{
    fa_privacy_rng r = {stream_fill, s};
    return r;
}
