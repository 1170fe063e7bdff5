/* train.c - the built-in trainer's loop (see train.h for the contract). */
#include "model/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "model/rng.h"

void fa_train_opts_default(fa_train_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->epochs = 1;
    o->batch_size = 64;
    o->sgd.lr = 0.05f;
    o->sgd.momentum = 0.9f;
    o->sgd.weight_decay = 0.0f;
    o->lr_schedule = FA_LR_CONSTANT;
    o->seed = 1;
    o->world = 1;
}

/* Learning rate of step t of T. */
static float lr_at(const fa_train_opts *o, uint64_t t, uint64_t T)
{
    if (t < o->warmup_steps)
        return o->sgd.lr * (float)(t + 1) / (float)o->warmup_steps;
    if (o->lr_schedule == FA_LR_COSINE && T > o->warmup_steps) {
        double p = (double)(t - o->warmup_steps) / (double)(T - o->warmup_steps);
        return (float)(o->sgd.lr * 0.5 * (1.0 + cos(M_PI * p)));
    }
    return o->sgd.lr;
}

/* ---------------------------------------------------------------------- */
/* DP-SGD's random streams                                                  */
/* ---------------------------------------------------------------------- */

/* The run key's two subkeys (BLAKE2b, libsodium's crypto_kdf). */
#define DP_KDF_CONTEXT "fadpsgd1"
enum { DP_SUBKEY_SAMPLE = 1, DP_SUBKEY_NOISE = 2 };

/* The ChaCha20 keystream of (subkey, nonce = step), read as 64-bit words. */
typedef struct dp_stream {
    uint8_t key[crypto_stream_chacha20_KEYBYTES];
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
    uint64_t block; /* next 64-byte block of the keystream */
    size_t pos;     /* next unread word of buf */
    uint64_t buf[2048];
} dp_stream;

static void dp_subkey(uint8_t sub[32], const uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint64_t id)
{
    crypto_kdf_derive_from_key(sub, 32, id, DP_KDF_CONTEXT, key);
}

static void dp_stream_init(dp_stream *s, const uint8_t sub[32], uint64_t step)
{
    /* idempotent; picks libsodium's vectorised ChaCha20 (the portable one,
     * 4-5 times slower, otherwise).  It only fails without a random source,
     * which the stream does not use. */
    (void)!sodium_init();
    memcpy(s->key, sub, sizeof(s->key));
    for (int i = 0; i < 8; i++)
        s->nonce[i] = (uint8_t)(step >> (8 * i));
    s->block = 0;
    s->pos = sizeof(s->buf) / sizeof(s->buf[0]);
}

static void dp_stream_wipe(dp_stream *s) { sodium_memzero(s, sizeof(*s)); }

static inline uint64_t dp_stream_u64(dp_stream *s)
{
    if (s->pos == sizeof(s->buf) / sizeof(s->buf[0])) {
        memset(s->buf, 0, sizeof(s->buf));
        crypto_stream_chacha20_xor_ic((unsigned char *)s->buf, (const unsigned char *)s->buf,
                                      sizeof(s->buf), s->nonce, s->block, s->key);
        s->block += sizeof(s->buf) / 64;
        s->pos = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        for (size_t i = 0; i < sizeof(s->buf) / sizeof(s->buf[0]); i++)
            s->buf[i] = __builtin_bswap64(s->buf[i]); /* the stream's words are little-endian */
#endif
    }
    return s->buf[s->pos++];
}

/* Uniform in [0, 1) and in (0, 1] from the top 53 bits of a word. */
static inline double u01(uint64_t w) { return (double)(w >> 11) * 0x1p-53; }
static inline double u01_open0(uint64_t w) { return (double)((w >> 11) + 1) * 0x1p-53; }

/* The ziggurat of Marsaglia and Tsang (2000) with Doornik's correction
 * (2005, "An Improved Ziggurat Method to Generate Normal Random Samples",
 * ZIGNOR): 128 boxes, the layer index and the uniform from disjoint bits of
 * one word, the tail beyond R by Marsaglia's 1964 method.  Exact to double
 * rounding, with the Gaussian's unbounded support; about one word and one
 * multiplication per value, against a logarithm, a square root and a sine
 * for Box-Muller. */
#define ZIG_C 128
#define ZIG_R 3.442619855899
#define ZIG_V 9.91256303526217e-3
typedef struct zig_table {
    double x[ZIG_C + 1], r[ZIG_C];
} zig_table;

static void zig_init(zig_table *z)
{
    double f = exp(-0.5 * ZIG_R * ZIG_R);
    z->x[0] = ZIG_V / f; /* the bottom box and the tail */
    z->x[1] = ZIG_R;
    z->x[ZIG_C] = 0.0;
    for (int i = 2; i < ZIG_C; i++) {
        z->x[i] = sqrt(-2.0 * log(ZIG_V / z->x[i - 1] + f));
        f = exp(-0.5 * z->x[i] * z->x[i]);
    }
    for (int i = 0; i < ZIG_C; i++)
        z->r[i] = z->x[i + 1] / z->x[i];
}

static double zig_normal(const zig_table *z, dp_stream *s)
{
    for (;;) {
        const uint64_t w = dp_stream_u64(s);
        const double u = 2.0 * u01(w) - 1.0;
        const unsigned i = (unsigned)(w & (ZIG_C - 1)); /* bits 0..6; u uses 11..63 */
        if (fabs(u) < z->r[i])
            return u * z->x[i];
        if (i == 0) { /* the tail |x| > R */
            double x, y;
            do {
                x = log(u01_open0(dp_stream_u64(s))) / ZIG_R;
                y = log(u01_open0(dp_stream_u64(s)));
            } while (-2.0 * y < x * x);
            return u < 0 ? x - ZIG_R : ZIG_R - x;
        }
        const double x = u * z->x[i];
        const double f0 = exp(-0.5 * (z->x[i] * z->x[i] - x * x));
        const double f1 = exp(-0.5 * (z->x[i + 1] * z->x[i + 1] - x * x));
        if (f1 + u01(dp_stream_u64(s)) * (f0 - f1) < 1.0)
            return x;
    }
}

uint64_t fa_train_dp_steps_per_pass(double q)
{
    double p = ceil(1.0 / q);
    return p < 1.0 ? 1 : (uint64_t)p;
}

/* P(u < t) = t / 2^64 with t = floor(q 2^64): q itself to within 2^-64. */
static uint32_t dp_sample_sub(const uint8_t sub[32], uint64_t step, uint32_t n, double q,
                              uint32_t *idx)
{
    dp_stream s;
    uint32_t k = 0;
    if (q >= 1.0) {
        for (uint32_t i = 0; i < n; i++)
            idx[i] = i;
        return n;
    }
    const uint64_t t = (uint64_t)ldexp(q, 64);
    dp_stream_init(&s, sub, step);
    for (uint32_t i = 0; i < n; i++)
        if (dp_stream_u64(&s) < t)
            idx[k++] = i;
    dp_stream_wipe(&s);
    return k;
}

static void dp_noise_sub(const uint8_t sub[32], uint64_t step, float *out, size_t len,
                         double stddev)
{
    dp_stream s;
    zig_table z;
    zig_init(&z);
    dp_stream_init(&s, sub, step);
    for (size_t i = 0; i < len; i++)
        out[i] = (float)(stddev * zig_normal(&z, &s));
    dp_stream_wipe(&s);
}

uint32_t fa_train_dp_sample(const uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint64_t step, uint32_t n,
                            double q, uint32_t *idx)
{
    uint8_t sub[32];
    uint32_t k;
    dp_subkey(sub, key, DP_SUBKEY_SAMPLE);
    k = dp_sample_sub(sub, step, n, q, idx);
    sodium_memzero(sub, sizeof(sub));
    return k;
}

void fa_train_dp_noise(const uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint64_t step, float *out,
                       size_t len, double stddev)
{
    uint8_t sub[32];
    dp_subkey(sub, key, DP_SUBKEY_NOISE);
    dp_noise_sub(sub, step, out, len, stddev);
    sodium_memzero(sub, sizeof(sub));
}

static int check_dp(const fa_train_dp *dp, const fa_train_opts *o, fa_error *err)
{
    if (!(dp->sampling_rate > 0.0 && dp->sampling_rate <= 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "train: DP-SGD sampling rate %g (must be in (0, 1])",
                         dp->sampling_rate);
    if (!(dp->clip > 0.0) || !isfinite(dp->clip) || (float)dp->clip <= 0.0f)
        return fa_errorf(err, FA_ERR_INVAL, "train: DP-SGD clip %g (must be finite and > 0)",
                         dp->clip);
    if (!(dp->noise_multiplier >= 0.0) || !isfinite(dp->noise_multiplier))
        return fa_errorf(err, FA_ERR_INVAL,
                         "train: DP-SGD noise multiplier %g (must be finite and >= 0)",
                         dp->noise_multiplier);
    if (dp->noise_rank >= o->world)
        return fa_errorf(err, FA_ERR_INVAL, "train: DP-SGD noise rank %u of %u ranks",
                         dp->noise_rank, o->world);
    return 0;
}

static int check_opts(fa_mlp *m, const fa_dataset *d, const fa_train_opts *o, fa_error *err)
{
    const fa_mlp_config *c = &fa_mlp_layout_of(m)->config;
    const uint32_t C = c->dims[c->n_layers];
    int rc;

    if (d->n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: empty data set");
    if (d->dim != c->dims[0])
        return fa_errorf(err, FA_ERR_INVAL, "train: data has %u features, the model takes %u",
                         d->dim, c->dims[0]);
    if (o->batch_size == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: batch size 0");
    if (o->world == 0 || o->rank >= o->world)
        return fa_errorf(err, FA_ERR_INVAL, "train: rank %u of %u", o->rank, o->world);
    if (o->steps == 0 && o->epochs == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: neither epochs nor steps given");
    if (o->lr_schedule != FA_LR_CONSTANT && o->lr_schedule != FA_LR_COSINE)
        return fa_errorf(err, FA_ERR_INVAL, "train: unknown learning-rate schedule %d",
                         o->lr_schedule);
    if (o->dp && (rc = check_dp(o->dp, o, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < d->n; i++)
        if (d->y[i] >= C)
            return fa_errorf(err, FA_ERR_INVAL,
                             "train: label %u of example %u is not below the model's %u classes",
                             d->y[i], i, C);
    return 0;
}

/* A run's DP-SGD state: subkeys and buffers. */
typedef struct dp_run {
    uint8_t sample_key[32], noise_key[32];
    uint32_t *idx;   /* (n) the step's Poisson batch */
    float *noise;    /* (n_params) on the noise rank */
    float *norms;    /* (chunk) per-example norms of a piece */
    uint32_t chunk;  /* the network's max_batch */
} dp_run;

/* One DP-SGD step's gradient on this rank (train.h): the Poisson batch,
 * this rank's slice clipped and summed in pieces of the network's
 * max_batch, and on the noise rank the noise.  *bn gets the batch size. */
static int dp_grads(fa_mlp *m, const fa_dataset *data, const fa_train_opts *o, dp_run *x,
                    uint64_t t, float *xb, uint8_t *yb, uint32_t *bn, fa_mlp_stats *st,
                    uint64_t *clipped, fa_error *err)
{
    const fa_train_dp *dp = o->dp;
    const uint32_t n = data->n, dim = data->dim;
    const double expected = dp->sampling_rate * (double)n;
    const float scale = (float)(1.0 / expected), clip = (float)dp->clip;
    uint32_t k, lo, hi, c0;
    int rc;

    k = dp_sample_sub(x->sample_key, t, n, dp->sampling_rate, x->idx);
    lo = (uint32_t)((uint64_t)k * o->rank / o->world);
    hi = (uint32_t)((uint64_t)k * (o->rank + 1) / o->world);
    memset(st, 0, sizeof(*st));
    c0 = lo;
    do {
        const uint32_t c1 = hi - c0 > x->chunk ? c0 + x->chunk : hi;
        fa_mlp_stats cs;
        for (uint32_t i = c0; i < c1; i++) {
            memcpy(xb + (size_t)(i - c0) * dim, data->x + (size_t)x->idx[i] * dim,
                   dim * sizeof(float));
            yb[i - c0] = data->y[x->idx[i]];
        }
        /* grads (+)= (1/(q n)) sum of the piece's clipped gradients */
        if ((rc = fa_mlp_forward_backward_clipped(m, xb, yb, c1 - c0, clip, scale, c0 != lo,
                                                  x->norms, &cs, err)) != 0)
            return rc;
        for (uint32_t i = 0; i < c1 - c0; i++)
            *clipped += x->norms[i] > clip;
        st->loss_sum += cs.loss_sum;
        st->correct += cs.correct;
        st->n += cs.n;
        c0 = c1;
    } while (c0 < hi);
    /* Once for the region: N(0, (sigma C)^2) on the sum, normalised alike. */
    if (o->rank == dp->noise_rank && dp->noise_multiplier > 0.0) {
        dp_noise_sub(x->noise_key, t, x->noise, fa_mlp_layout_of(m)->n_params,
                     dp->noise_multiplier * dp->clip / expected);
        if ((rc = fa_mlp_grads_add_host(m, x->noise, err)) != 0)
            return rc;
    }
    *bn = k;
    return 0;
}

int fa_train_run(fa_mlp *m, const fa_dataset *data, const fa_train_opts *o,
                 fa_train_result *res, fa_error *err)
{
    const uint32_t n = data->n, dim = data->dim, B = o->batch_size;
    uint64_t steps_per_epoch, total, perm_epoch = UINT64_MAX, clipped = 0;
    fa_train_pos pos = {0};
    uint32_t *perm = NULL, part_max;
    float *xb = NULL;   /* (part_max, dim) this rank's part of the batch (DP: a piece of it) */
    uint8_t *yb = NULL; /* (part_max) */
    dp_run dx;
    int rc;

    memset(&dx, 0, sizeof(dx));
    if ((rc = check_opts(m, data, o, err)) != 0)
        return rc;
    steps_per_epoch = o->dp ? fa_train_dp_steps_per_pass(o->dp->sampling_rate)
                            : (n + (uint64_t)B - 1) / B;
    total = o->steps ? o->steps : (uint64_t)o->epochs * steps_per_epoch;
    if (o->resume) {
        if (o->resume->step > total)
            return fa_errorf(err, FA_ERR_INVAL,
                             "train: resuming at step %llu of a run of %llu steps",
                             (unsigned long long)o->resume->step, (unsigned long long)total);
        pos = *o->resume;
    }
    if (o->dp) {
        dx.chunk = fa_mlp_max_batch(m);
        part_max = dx.chunk < n ? dx.chunk : n;
        dp_subkey(dx.sample_key, o->dp->key, DP_SUBKEY_SAMPLE);
        dp_subkey(dx.noise_key, o->dp->key, DP_SUBKEY_NOISE);
        dx.idx = malloc((size_t)n * sizeof(*dx.idx));
        dx.norms = malloc((size_t)part_max * sizeof(float));
        if (o->rank == o->dp->noise_rank)
            dx.noise = malloc(fa_mlp_layout_of(m)->n_params * sizeof(float));
        if (!dx.idx || !dx.norms || (o->rank == o->dp->noise_rank && !dx.noise)) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "train: out of memory");
            goto out;
        }
    } else {
        part_max = (uint32_t)(((uint64_t)(B < n ? B : n) + o->world - 1) / o->world);
        perm = malloc((size_t)n * sizeof(*perm));
        if (!perm) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "train: out of memory");
            goto out;
        }
    }
    xb = malloc((size_t)part_max * dim * sizeof(float));
    yb = malloc(part_max ? part_max : 1);
    if (!xb || !yb) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "train: out of memory");
        goto out;
    }

    /* Step t is batch s = t mod steps_per_epoch of epoch t / steps_per_epoch. */
    for (;; pos.step++) {
        const uint64_t t = pos.step, epoch = t / steps_per_epoch, s = t % steps_per_epoch;
        uint32_t bn;
        fa_mlp_stats st;

        if (o->boundary) {
            rc = o->boundary(o->boundary_user, m, &pos, total, err);
            if (rc == FA_TRAIN_STOP)
                rc = fa_errorf(err, FA_ERR_CANCELLED, "train: stopped at step %llu of %llu",
                               (unsigned long long)t, (unsigned long long)total);
            if (rc != 0)
                goto out;
        }
        if (t == total)
            break;
        if (s == 0) {
            pos.pass_loss = 0.0;
            pos.pass_count = 0;
        }

        if (o->dp) {
            if ((rc = dp_grads(m, data, o, &dx, t, xb, yb, &bn, &st, &clipped, err)) != 0)
                goto out;
        } else {
            if (epoch != perm_epoch) {
                /* The same permutation on every rank: seeded by (seed, epoch). */
                fa_rng rng;
                fa_rng_seed(&rng, o->seed, epoch);
                for (uint32_t i = 0; i < n; i++)
                    perm[i] = i;
                fa_rng_shuffle_u32(&rng, perm, n);
                perm_epoch = epoch;
            }
            /* Global batch [b0, b0 + bn) of perm; this rank's part [lo, hi). */
            const uint32_t b0 = (uint32_t)(s * B);
            bn = n - b0 < B ? n - b0 : B;
            const uint32_t lo = b0 + (uint32_t)((uint64_t)bn * o->rank / o->world);
            const uint32_t hi = b0 + (uint32_t)((uint64_t)bn * (o->rank + 1) / o->world);

            for (uint32_t i = lo; i < hi; i++) {
                memcpy(xb + (size_t)(i - lo) * dim, data->x + (size_t)perm[i] * dim,
                       dim * sizeof(float));
                yb[i - lo] = data->y[perm[i]];
            }
            /* grads = (1/bn) sum over this rank's part */
            if ((rc = fa_mlp_forward_backward(m, xb, yb, hi - lo, bn, &st, err)) != 0)
                goto out;
        }
        /* grads = sum over ranks: the gradient of the batch mean loss (DP:
         * the noisy clipped sum over q n) */
        if (o->allreduce) {
            int on_device;
            float *g = fa_mlp_grads(m, &on_device);
            if ((rc = o->allreduce(o->allreduce_user, m, g, fa_mlp_layout_of(m)->n_params,
                                   on_device, t, err)) != 0)
                goto out;
        }
        fa_sgd sgd = o->sgd;
        sgd.lr = lr_at(o, t, total);
        if ((rc = fa_mlp_sgd_step(m, &sgd, err)) != 0)
            goto out;

        pos.samples += bn;
        pos.pass_loss += st.loss_sum;
        pos.pass_count += st.n;
        if (o->report && o->steps && o->report_every && (t + 1) % o->report_every == 0 &&
            t + 1 < total &&
            (rc = o->report(o->report_user, m, (uint32_t)epoch, t + 1,
                            pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0, err)) != 0)
            goto out;
        /* End of an epoch, or of the run. */
        if (o->report && (s + 1 == steps_per_epoch || t + 1 == total) &&
            (!o->steps || t + 1 == total) &&
            (rc = o->report(o->report_user, m, (uint32_t)(epoch + 1), t + 1,
                            pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0, err)) != 0)
            goto out;
    }

    if (res) {
        res->steps = pos.step;
        res->samples = pos.samples;
        /* DP-SGD: n, not the random sample count (the FedAvg weight must not
         * depend on which examples were drawn; n itself is public, train.h) */
        res->num_examples = o->steps && !o->dp ? (pos.samples < n ? pos.samples : n) : n;
        res->mean_loss = pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0;
        res->clipped = clipped;
    }
out:
    sodium_memzero(dx.sample_key, sizeof(dx.sample_key));
    sodium_memzero(dx.noise_key, sizeof(dx.noise_key));
    free(dx.idx);
    free(dx.norms);
    if (dx.noise) {
        /* the last step's noise: a secret (with the update it would remove it) */
        sodium_memzero(dx.noise, fa_mlp_layout_of(m)->n_params * sizeof(float));
        free(dx.noise);
    }
    free(perm);
    free(xb);
    free(yb);
    return rc;
}

int fa_train_local_round(fa_mlp *m, const float *global, const fa_dataset *data,
                         const fa_train_opts *opts, float *delta, fa_train_result *res,
                         fa_error *err)
{
    const size_t np = fa_mlp_layout_of(m)->n_params;
    int rc;

    if (!opts->resume && ((rc = fa_mlp_set_params(m, global, err)) != 0 ||
                          (rc = fa_mlp_reset_momentum(m, err)) != 0))
        return rc;
    if ((rc = fa_train_run(m, data, opts, res, err)) != 0 ||
        (rc = fa_mlp_get_params(m, delta, err)) != 0)
        return rc;
    /* delta = w_local - w_global */
    for (size_t i = 0; i < np; i++)
        delta[i] -= global[i];
    return 0;
}
