#include "crypto/shamir_internal.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_err.h"
#include "crypto/secagg_internal.h"

/* v * x in GF(2^8), constant time in v. */
static inline uint8_t gf_xtime(uint8_t v)
{
    return (uint8_t)((v << 1) ^ (0x1b & (uint8_t) - (v >> 7)));
}

/* y[0..32) *= x where x is public (its bits may steer branches). */
static void gf_mul_vec_public(uint8_t y[FA_SHAMIR_BYTES], uint8_t x)
{
    uint8_t r[FA_SHAMIR_BYTES] = {0}, t[FA_SHAMIR_BYTES];
    memcpy(t, y, sizeof(t));
    for (int bit = 0; bit < 8; bit++) {
        if ((x >> bit) & 1)
            for (int j = 0; j < FA_SHAMIR_BYTES; j++)
                r[j] ^= t[j];
        for (int j = 0; j < FA_SHAMIR_BYTES; j++)
            t[j] = gf_xtime(t[j]);
    }
    memcpy(y, r, sizeof(r));
    sodium_memzero(r, sizeof(r));
    sodium_memzero(t, sizeof(t));
}

/* a * b for public a and b. */
static uint8_t gf_mul(uint8_t a, uint8_t b)
{
    uint8_t r = 0;
    for (int bit = 0; bit < 8; bit++) {
        if ((b >> bit) & 1)
            r ^= a;
        a = gf_xtime(a);
    }
    return r;
}

static uint8_t gf_inv(uint8_t a) /* a^254, a != 0 */
{
    uint8_t r = 1, p = a;
    for (int e = 254; e; e >>= 1) {
        if (e & 1)
            r = gf_mul(r, p);
        p = gf_mul(p, p);
    }
    return r;
}

static int xs_valid(const uint8_t *xs, size_t n)
{
    uint8_t seen[256] = {0};
    for (size_t i = 0; i < n; i++) {
        if (xs[i] == 0 || seen[xs[i]])
            return 0;
        seen[xs[i]] = 1;
    }
    return 1;
}

int fa_shamir_split(const uint8_t secret[FA_SHAMIR_BYTES], unsigned t, const uint8_t *xs, size_t n,
                    uint8_t *shares, const fa_secagg_rng *rng)
{
    /* coef[c] is the 32 coefficients of x^(c+1); the constant term is the secret. */
    uint8_t coef[254][FA_SHAMIR_BYTES];
    int rc;

    if (t < 1 || n < t || n > 255 || !xs_valid(xs, n))
        return FA_ERR_INVAL;
    rc = fa_secagg_rng_fill(rng, coef, (size_t)(t - 1) * FA_SHAMIR_BYTES);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        /* Horner: y = ((a_{t-1} x + a_{t-2}) x + ...) x + secret */
        uint8_t y[FA_SHAMIR_BYTES];
        if (t == 1) {
            memcpy(y, secret, sizeof(y));
        } else {
            memcpy(y, coef[t - 2], sizeof(y));
            for (int c = (int)t - 3; c >= -1; c--) {
                const uint8_t *a = c >= 0 ? coef[c] : secret;
                gf_mul_vec_public(y, xs[i]);
                for (int j = 0; j < FA_SHAMIR_BYTES; j++)
                    y[j] ^= a[j];
            }
        }
        memcpy(shares + i * FA_SHAMIR_BYTES, y, sizeof(y));
        sodium_memzero(y, sizeof(y));
    }
out:
    sodium_memzero(coef, sizeof(coef));
    return rc;
}

/* The value at x of the polynomial through the t shares (holders xs[0..t)):
 * Lagrange interpolation with the basis at x, prod_{j != i} (x - x_j) /
 * (x_i - x_j); minus is xor.  x = 0 is the secret. */
static int eval_at(uint8_t out[FA_SHAMIR_BYTES], uint8_t x, const uint8_t *xs,
                   const uint8_t *shares, size_t t)
{
    uint8_t acc[FA_SHAMIR_BYTES] = {0}, term[FA_SHAMIR_BYTES];

    if (t < 1 || t > 255 || !xs_valid(xs, t))
        return FA_ERR_INVAL;
    for (size_t i = 0; i < t; i++) {
        uint8_t num = 1, den = 1;
        for (size_t j = 0; j < t; j++) {
            if (j == i)
                continue;
            num = gf_mul(num, (uint8_t)(x ^ xs[j]));
            den = gf_mul(den, (uint8_t)(xs[j] ^ xs[i]));
        }
        memcpy(term, shares + i * FA_SHAMIR_BYTES, sizeof(term));
        gf_mul_vec_public(term, gf_mul(num, gf_inv(den)));
        for (int j = 0; j < FA_SHAMIR_BYTES; j++)
            acc[j] ^= term[j];
    }
    memcpy(out, acc, sizeof(acc));
    sodium_memzero(acc, sizeof(acc));
    sodium_memzero(term, sizeof(term));
    return 0;
}

int fa_shamir_combine(uint8_t secret[FA_SHAMIR_BYTES], const uint8_t *xs, const uint8_t *shares,
                      size_t t)
{
    return eval_at(secret, 0, xs, shares, t);
}

int fa_shamir_eval(uint8_t out[FA_SHAMIR_BYTES], uint8_t x, const uint8_t *xs,
                   const uint8_t *shares, size_t t)
{
    return eval_at(out, x, xs, shares, t);
}

/* ---- decoding shares some of which are wrong ---------------------------- */

/* GF(2^8) by log and exp tables (generator 3): the decoder does m^3
 * multiplications per byte, too many for the bit-serial gf_mul.  Table
 * look-ups depend on the values, so the decoder is not constant time; it
 * runs only where shares disagree, over shares revealed to the caller. */
struct gf_tab {
    uint8_t exp[510];
    uint8_t log[256];
};

static void gf_tab_init(struct gf_tab *g)
{
    uint8_t v = 1;
    for (int i = 0; i < 255; i++) {
        g->exp[i] = g->exp[i + 255] = v;
        g->log[v] = (uint8_t)i;
        v = (uint8_t)(v ^ gf_xtime(v)); /* v * 3 */
    }
    g->log[0] = 0;
}

static inline uint8_t tmul(const struct gf_tab *g, uint8_t a, uint8_t b)
{
    return a && b ? g->exp[g->log[a] + g->log[b]] : 0;
}

static inline uint8_t tinv(const struct gf_tab *g, uint8_t a) /* a != 0 */
{
    return g->exp[255 - g->log[a]];
}

/* Berlekamp-Welch for one byte position: the points (xs[i], ys[i]), i < m,
 * and a polynomial P of degree < t that all but at most e of them lie on,
 * where m >= 2e + t.  Unknowns: Q of degree < e + t and E monic of degree
 * e with Q(x_i) = y_i E(x_i) for every i; then P = Q / E (Welch and
 * Berlekamp, US patent 4,633,470; Gemmell and Sudan, "Highly resilient
 * correctors for polynomials", 1992).  Any solution gives the same P when
 * at most e points are off it.  a is scratch of m * (2e + t + 1) bytes.
 * Writes P's t coefficients (constant first); returns 0, or FA_ERR_VERIFY
 * when the system has no solution or E does not divide Q (more than e
 * points are off every such polynomial). */
static int bw_byte(const struct gf_tab *g, const uint8_t *xs, const uint8_t *ys, size_t m, size_t t,
                   size_t e, uint8_t *a, uint8_t p[255])
{
    const size_t nq = e + t, nv = 2 * e + t, w = nv + 1;
    uint8_t sol[512] = {0}, q[512], ev[256];
    size_t row = 0;
    int pivot_col[255], rc = 0;

    /* row i: [x^0 .. x^(nq-1)] for Q, [y x^0 .. y x^(e-1)] for E's low
     * coefficients, and y x^e on the right */
    for (size_t i = 0; i < m; i++) {
        uint8_t *r = a + i * w, xp = 1;
        for (size_t k = 0; k < nq; k++) {
            r[k] = xp;
            if (k < e)
                r[nq + k] = tmul(g, ys[i], xp);
            if (k == e)
                r[nv] = tmul(g, ys[i], xp);
            xp = tmul(g, xp, xs[i]);
        }
    }
    /* Gauss-Jordan elimination; free variables stay 0 */
    for (size_t col = 0; col < nv && row < m; col++) {
        size_t r = row;
        while (r < m && a[r * w + col] == 0)
            r++;
        if (r == m)
            continue;
        if (r != row)
            for (size_t k = 0; k < w; k++) {
                uint8_t tmp = a[r * w + k];
                a[r * w + k] = a[row * w + k];
                a[row * w + k] = tmp;
            }
        {
            uint8_t inv = tinv(g, a[row * w + col]);
            for (size_t k = col; k < w; k++)
                a[row * w + k] = tmul(g, a[row * w + k], inv);
        }
        for (size_t r2 = 0; r2 < m; r2++) {
            uint8_t f = a[r2 * w + col];
            if (r2 == row || f == 0)
                continue;
            for (size_t k = col; k < w; k++)
                a[r2 * w + k] ^= tmul(g, f, a[row * w + k]);
        }
        pivot_col[row++] = (int)col;
    }
    for (size_t r = row; r < m; r++)
        if (a[r * w + nv] != 0)
            return FA_ERR_VERIFY; /* inconsistent (a holds no solution to wipe) */
    for (size_t r = 0; r < row; r++)
        sol[pivot_col[r]] = a[r * w + nv];
    /* P = Q / E, E = x^e + sum_{k<e} sol[nq + k] x^k */
    memcpy(q, sol, nq);
    for (size_t k = 0; k < e; k++)
        ev[k] = sol[nq + k];
    ev[e] = 1;
    for (size_t k = nq; k-- > e;) {
        uint8_t c = q[k];
        p[k - e] = c;
        for (size_t i = 0; i <= e; i++)
            q[k - e + i] ^= tmul(g, c, ev[i]);
    }
    for (size_t k = 0; k < e && rc == 0; k++)
        if (q[k] != 0)
            rc = FA_ERR_VERIFY; /* E does not divide Q */
    sodium_memzero(sol, sizeof(sol));
    sodium_memzero(q, sizeof(q));
    sodium_memzero(ev, sizeof(ev));
    return rc;
}

int fa_shamir_decode(uint8_t secret[FA_SHAMIR_BYTES], const uint8_t *xs, const uint8_t *shares,
                     size_t m, size_t t, uint8_t *wrong)
{
    struct gf_tab g;
    const size_t e = m >= t ? (m - t) / 2 : 0;
    uint8_t ys[255], p[255], out[FA_SHAMIR_BYTES];
    uint8_t *a;
    int rc = 0;

    if (t < 1 || m < t || m > 255 || !xs_valid(xs, m))
        return FA_ERR_INVAL;
    a = malloc(m * (2 * e + t + 1));
    if (!a)
        return FA_ERR_NOMEM;
    gf_tab_init(&g);
    memset(wrong, 0, m);
    for (int b = 0; b < FA_SHAMIR_BYTES && rc == 0; b++) {
        for (size_t i = 0; i < m; i++)
            ys[i] = shares[i * FA_SHAMIR_BYTES + b];
        rc = bw_byte(&g, xs, ys, m, t, e, a, p);
        if (rc != 0)
            break;
        out[b] = p[0];
        for (size_t i = 0; i < m; i++) { /* Horner */
            uint8_t v = p[t - 1];
            for (size_t k = t - 1; k-- > 0;)
                v = (uint8_t)(tmul(&g, v, xs[i]) ^ p[k]);
            wrong[i] |= v != ys[i];
        }
    }
    if (rc == 0)
        memcpy(secret, out, sizeof(out));
    sodium_memzero(a, m * (2 * e + t + 1));
    free(a);
    sodium_memzero(ys, sizeof(ys));
    sodium_memzero(p, sizeof(p));
    sodium_memzero(out, sizeof(out));
    return rc;
}
