/* dgauss.c - the exact discrete Gaussian sampler of Canonne, Kamath, Steinke
 * 2020 (see dgauss_internal.h for the algorithm and its sources).
 *
 * Bounds that keep every product inside privacy/bignum_internal.h's 384 bits, for
 * sigma^2 = N/D with N, D < 2^63:
 *   t = floor(sqrt(N/D)) + 1 < 2^32
 *   |Y| = U + t V < 2^60       (V is capped at 2^28: reaching it would take
 *                              2^28 consecutive Bernoulli(exp(-1)) successes)
 *   x = | |Y| D t - N | < 2^155, x^2 < 2^310
 *   2 N D t^2 < 2^191, and times K (< 2^32) < 2^223.
 */
#include "privacy/dgauss_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "privacy/bignum_internal.h"

#define LAPLACE_MAX_V (UINT64_C(1) << 28)
#define VON_NEUMANN_MAX_K (UINT64_C(1) << 32)

struct fa_dgauss {
    uint64_t num, den; /* sigma^2, reduced */
    uint64_t t;        /* floor(sigma) + 1, the discrete Laplace scale */
    fa_bn n_bn;        /* N */
    fa_bn dt;          /* D t */
    fa_bn den2;        /* 2 N D t^2 */
    fa_random rnd;
};

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* floor(sqrt(v)) exactly */
static uint64_t isqrt_u64(uint64_t v)
{
    uint64_t s = (uint64_t)sqrt((double)v);
    while (s > 0 && s > v / s)
        s--;
    while (s + 1 <= v / (s + 1))
        s++;
    return s;
}

/* ---- Bernoulli(exp(-gamma)), von Neumann ------------------------------------ */

/* gamma = a/b in [0, 1], b < 2^32: K = 1, 2, ...: Bernoulli(a / (b K)) as a
 * uniform integer below b K compared with a; 1 iff the first 0 comes at an
 * odd K. */
static int bern_exp_frac_u64(fa_dgauss *g, uint64_t a, uint64_t b, unsigned *out)
{
    uint64_t k, u;
    int rc;
    if (a == 0) {
        *out = 1;
        return 0;
    }
    for (k = 1;; k++) {
        if (k >= VON_NEUMANN_MAX_K)
            return FA_ERR_RANGE;
        if ((rc = fa_random_below(&g->rnd, b * k, &u)) != 0)
            return rc;
        if (u >= a)
            break;
    }
    *out = (unsigned)(k & 1);
    return 0;
}

static int bern_exp_minus_one(fa_dgauss *g, unsigned *out)
{
    return bern_exp_frac_u64(g, 1, 1, out);
}

/* gamma = r/d in [0, 1) with big numbers */
static int bern_exp_frac_bn(fa_dgauss *g, const fa_bn *r, const fa_bn *d, unsigned *out)
{
    fa_bn m, kb, u;
    int rc;
    if (fa_bn_is_zero(r)) {
        *out = 1;
        return 0;
    }
    if (fa_bn_bitlen(d) <= 32)
        return bern_exp_frac_u64(g, r->w[0], d->w[0], out);
    for (uint64_t k = 1;; k++) {
        if (k >= VON_NEUMANN_MAX_K)
            return FA_ERR_RANGE;
        fa_bn_set_u64(&kb, k);
        if ((rc = fa_bn_mul(&m, d, &kb)) != 0)
            return rc;
        if ((rc = fa_bn_random_below(&g->rnd, &m, &u)) != 0)
            return rc;
        if (fa_bn_cmp(&u, r) >= 0) {
            *out = (unsigned)(k & 1);
            return 0;
        }
    }
}

/* gamma = n/d >= 0: floor(gamma) factors Bernoulli(exp(-1)), then the
 * fractional part. */
static int bern_exp_bn(fa_dgauss *g, const fa_bn *n, const fa_bn *d, unsigned *out)
{
    uint64_t q;
    fa_bn r;
    unsigned b;
    int rc;
    fa_bn_divmod(n, d, &q, &r);
    for (uint64_t i = 0; i < q; i++) {
        if ((rc = bern_exp_minus_one(g, &b)) != 0)
            return rc;
        if (!b) {
            *out = 0;
            return 0;
        }
    }
    return bern_exp_frac_bn(g, &r, d, out);
}

int fa_dgauss_bernoulli_exp(fa_dgauss *g, uint64_t num, uint64_t den, unsigned *out)
{
    fa_bn n, d;
    if (den == 0)
        return FA_ERR_INVAL;
    fa_bn_set_u64(&n, num);
    fa_bn_set_u64(&d, den);
    return bern_exp_bn(g, &n, &d, out);
}

/* ---- the discrete Laplace and the discrete Gaussian -------------------------- */

int fa_dgauss_laplace(fa_dgauss *g, uint64_t t, int64_t *out)
{
    uint64_t u, v;
    unsigned keep, a, sign;
    int rc;
    if (t == 0 || t >= (UINT64_C(1) << 32))
        return FA_ERR_INVAL;
    for (;;) {
        if ((rc = fa_random_below(&g->rnd, t, &u)) != 0)
            return rc;
        if ((rc = bern_exp_frac_u64(g, u, t, &keep)) != 0)
            return rc;
        if (!keep)
            continue;
        for (v = 0;; v++) {
            if ((rc = bern_exp_minus_one(g, &a)) != 0)
                return rc;
            if (!a)
                break;
            if (v >= LAPLACE_MAX_V)
                return FA_ERR_RANGE;
        }
        uint64_t x = u + t * v;
        if ((rc = fa_random_bit(&g->rnd, &sign)) != 0)
            return rc;
        if (sign && x == 0)
            continue; /* -0: counted once, at +0 */
        *out = sign ? -(int64_t)x : (int64_t)x;
        return 0;
    }
}

int fa_dgauss_sample(fa_dgauss *g, int64_t *out)
{
    fa_bn x, a;
    unsigned c;
    int64_t y;
    int rc;
    for (;;) {
        if ((rc = fa_dgauss_laplace(g, g->t, &y)) != 0)
            return rc;
        /* gamma = (|y| - sigma^2/t)^2 / (2 sigma^2) = (|y| D t - N)^2 / (2 N D t^2) */
        fa_bn_set_u64(&a, y < 0 ? (uint64_t)0 - (uint64_t)y : (uint64_t)y);
        if ((rc = fa_bn_mul(&x, &a, &g->dt)) != 0)
            return rc;
        fa_bn_absdiff(&x, &x, &g->n_bn);
        if ((rc = fa_bn_mul(&x, &x, &x)) != 0)
            return rc;
        if ((rc = bern_exp_bn(g, &x, &g->den2, &c)) != 0)
            return rc;
        if (c) {
            *out = y;
            return 0;
        }
    }
}

int fa_dgauss_samples(fa_dgauss *g, int64_t *out, size_t n)
{
    int rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = fa_dgauss_sample(g, &out[i])) != 0)
            return rc;
    return 0;
}

int fa_dgauss_add_ring(fa_dgauss *g, uint32_t *v, size_t n, uint32_t ring_bits, fa_error *err)
{
    uint32_t mask;
    int64_t y;
    int rc;
    if (ring_bits < 1 || ring_bits > 32)
        return fa_errorf(err, FA_ERR_INVAL, "ring bits %u outside 1..32", ring_bits);
    mask = ring_bits == 32 ? UINT32_MAX : (UINT32_C(1) << ring_bits) - 1;
    for (size_t i = 0; i < n; i++) {
        if ((rc = fa_dgauss_sample(g, &y)) != 0)
            return fa_errorf(err, rc, "discrete Gaussian noise, coordinate %zu of %zu: %s", i, n,
                             fa_strerror(rc));
        v[i] = (v[i] + (uint32_t)(uint64_t)y) & mask; /* y mod 2^32, then mod 2^k */
    }
    return 0;
}

/* ---- lifecycle -------------------------------------------------------------------- */

int fa_dgauss_new(fa_dgauss **out, uint64_t sigma2_num, uint64_t sigma2_den,
                  const fa_privacy_rng *rng, fa_error *err)
{
    fa_dgauss *g;
    fa_bn t, tmp;
    int rc;
    if (sigma2_num == 0 || sigma2_den == 0 || sigma2_num >= FA_DGAUSS_MAX_TERM ||
        sigma2_den >= FA_DGAUSS_MAX_TERM)
        return fa_errorf(err, FA_ERR_INVAL,
                         "discrete Gaussian: sigma^2 = %llu/%llu needs a numerator and a "
                         "denominator in [1, 2^63)",
                         (unsigned long long)sigma2_num, (unsigned long long)sigma2_den);
    if (!(g = calloc(1, sizeof(*g))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if ((rc = fa_random_init(&g->rnd, rng)) != 0) {
        free(g);
        return fa_errorf(err, rc, "libsodium failed to initialise");
    }
    uint64_t c = gcd_u64(sigma2_num, sigma2_den);
    g->num = sigma2_num / c;
    g->den = sigma2_den / c;
    g->t = isqrt_u64(g->num / g->den) + 1;
    fa_bn_set_u64(&g->n_bn, g->num);
    fa_bn_set_u64(&t, g->t);
    fa_bn_set_u64(&tmp, g->den);
    fa_bn_mul(&g->dt, &tmp, &t);     /* D t < 2^95 */
    fa_bn_mul(&tmp, &g->dt, &t);     /* D t^2 */
    fa_bn_mul(&tmp, &tmp, &g->n_bn); /* N D t^2 */
    fa_bn_set_u64(&t, 2);
    fa_bn_mul(&g->den2, &tmp, &t); /* < 2^191 */
    *out = g;
    return 0;
}

int fa_dgauss_new_f64(fa_dgauss **out, double sigma2, const fa_privacy_rng *rng, fa_error *err)
{
    int e;
    if (!(sigma2 > 0) || !isfinite(sigma2))
        return fa_errorf(err, FA_ERR_INVAL,
                         "discrete Gaussian: sigma^2 = %g must be > 0 and finite", sigma2);
    /* sigma2 = m 2^e exactly, m odd */
    double f = frexp(sigma2, &e);
    uint64_t m = (uint64_t)ldexp(f, 53);
    e -= 53;
    while ((m & 1) == 0) {
        m >>= 1;
        e++;
    }
    unsigned mbits = 0;
    for (uint64_t v = m; v; v >>= 1)
        mbits++;
    if (e >= 0) {
        if (mbits + (unsigned)e > 63)
            return fa_errorf(err, FA_ERR_RANGE, "discrete Gaussian: sigma^2 = %g is too large",
                             sigma2);
        return fa_dgauss_new(out, m << e, 1, rng, err);
    }
    if (-e > 62)
        return fa_errorf(err, FA_ERR_RANGE,
                         "discrete Gaussian: sigma^2 = %g is not a fraction with a denominator "
                         "below 2^63; give it as num/den to fa_dgauss_new",
                         sigma2);
    return fa_dgauss_new(out, m, UINT64_C(1) << -e, rng, err);
}

void fa_dgauss_del(fa_dgauss *g)
{
    if (!g)
        return;
    fa_random_wipe(&g->rnd);
    sodium_memzero(g, sizeof(*g));
    free(g);
}

void fa_dgauss_sigma2(const fa_dgauss *g, uint64_t *num, uint64_t *den)
{
    *num = g->num;
    *den = g->den;
}
