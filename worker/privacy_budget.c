/* privacy_budget.c - a region's differential-privacy budget (privacy_budget.h). */
#include "worker/privacy_budget.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_endian.h"
#include "privacy/accountant.h"

#define ID_MAX 128

/* The last release of one federation. */
typedef struct release_slot {
    char federation[ID_MAX];
    int have;
    fa_privacy_release r;
} release_slot;

struct fa_privacy_budget {
    char federation[ID_MAX], region[ID_MAX]; /* the owner: a federation, or "dataset:<name>" */
    double epsilon, delta;                   /* the budget (the config's) */
    fa_rdp_accountant *acc;
    uint64_t rounds;
    int have_last;
    fa_privacy_release last; /* the owner's */
    /* A shared accountant: the last release of each other federation that
     * spent from it, in the order they first did. */
    release_slot *others;
    size_t n_others;
};

/* ---- the sealed format -------------------------------------------------- *
 *
 *   header (clear, authenticated): "FAPRIVA1" | u32 len | federation |
 *                                  u32 len | region
 *   24-byte nonce | XChaCha20-Poly1305 of the body (16-byte tag)
 *   body: u32 format 1 | u64 rounds | u8 have_last | u64 round | u64 version |
 *         32-byte digest | u32 len | mechanism | f64 sigma | f64 clip |
 *         f64 q | u64 steps | [format 2: f64 ddg_l2_sens | f64 ddg_sigma2 |
 *         u32 ddg_regions | u64 ddg_dim] | f64 eps_round | f64 eps_total |
 *         u32 len | the accountant (fa_rdp_accountant_save) |
 *         [format 3: u32 n | n x (u32 len | federation | u64 round |
 *         u64 version | 32-byte digest | the spend as above | f64 eps_round |
 *         f64 eps_total)]
 * Format 3 (other federations' releases) is written only when there are
 * some, so an accountant of one federation keeps format 2; formats 1 (before
 * DDG) and 2 are still read.
 *
 * Integers little-endian, doubles as their IEEE 754 bits. */

static const uint8_t magic[8] = {'F', 'A', 'P', 'R', 'I', 'V', 'A', '1'};
#define KDF_CONTEXT "faprivac"
#define KDF_SUBKEY 1
#define FORMAT 2u
#define FORMAT_SHARED 3u

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int failed;
} wbuf;

static void w_raw(wbuf *w, const void *p, size_t n)
{
    if (w->failed)
        return;
    if (w->len + n > w->cap) {
        size_t cap = (w->cap ? w->cap * 2 : 256) + n;
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->failed = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

static void w_u64(wbuf *w, uint64_t v)
{
    uint8_t b[8];
    fa_le_put_u64(b, v);
    w_raw(w, b, 8);
}

static void w_u32(wbuf *w, uint32_t v)
{
    uint8_t b[4];
    fa_le_put_u32(b, v);
    w_raw(w, b, 4);
}

static void w_f64(wbuf *w, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    w_u64(w, v);
}

static void w_str(wbuf *w, const char *s)
{
    size_t n = strlen(s);
    w_u32(w, (uint32_t)n);
    w_raw(w, s, n);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, off;
    int failed;
} rbuf;

static const uint8_t *r_raw(rbuf *r, size_t n)
{
    const uint8_t *p;
    if (r->failed || r->len - r->off < n) {
        r->failed = 1;
        return NULL;
    }
    p = r->p + r->off;
    r->off += n;
    return p;
}

static uint64_t r_u64(rbuf *r)
{
    const uint8_t *p = r_raw(r, 8);
    return p ? fa_le_get_u64(p) : 0;
}

static uint32_t r_u32(rbuf *r)
{
    const uint8_t *p = r_raw(r, 4);
    return p ? fa_le_get_u32(p) : 0;
}

static double r_f64(rbuf *r)
{
    uint64_t v = r_u64(r);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* A string of at most cap - 1 bytes, NUL-terminated into out. */
static void r_str(rbuf *r, char *out, size_t cap)
{
    uint32_t n = r_u32(r);
    const uint8_t *p;
    out[0] = '\0';
    if (r->failed || n >= cap) {
        r->failed = 1;
        return;
    }
    p = r_raw(r, n);
    if (p) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
}

/* ---- the budget ------------------------------------------------------------ */

static int check_budget(double epsilon, double delta, fa_error *err)
{
    if (!(epsilon > 0.0) || !isfinite(epsilon))
        return fa_errorf(err, FA_ERR_INVAL, "privacy budget: epsilon %g (must be finite and > 0)",
                         epsilon);
    if (!(delta > 0.0 && delta < 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "privacy budget: delta %g (must be in (0, 1))", delta);
    return 0;
}

static int budget_alloc(fa_privacy_budget **out, const char *federation, const char *region,
                        double epsilon, double delta, fa_error *err)
{
    fa_privacy_budget *b;
    int rc;

    *out = NULL;
    if ((rc = check_budget(epsilon, delta, err)) != 0)
        return rc;
    if (!federation || !*federation || !region || !*region || strlen(federation) >= ID_MAX ||
        strlen(region) >= ID_MAX)
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy budget: federation and region ids of 1 to "
                         "%d bytes needed",
                         ID_MAX - 1);
    b = calloc(1, sizeof(*b));
    if (!b)
        return fa_errorf(err, FA_ERR_NOMEM, "privacy budget: out of memory");
    snprintf(b->federation, sizeof(b->federation), "%s", federation);
    snprintf(b->region, sizeof(b->region), "%s", region);
    b->epsilon = epsilon;
    b->delta = delta;
    *out = b;
    return 0;
}

int fa_privacy_budget_new(fa_privacy_budget **out, const char *federation, const char *region,
                          double epsilon, double delta, fa_error *err)
{
    int rc = budget_alloc(out, federation, region, epsilon, delta, err);
    if (rc != 0)
        return rc;
    if ((rc = fa_rdp_accountant_new(&(*out)->acc, NULL, 0, err)) != 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

void fa_privacy_budget_del(fa_privacy_budget *b)
{
    if (!b)
        return;
    fa_rdp_accountant_del(b->acc);
    free(b->others);
    free(b);
}

static void put_header(wbuf *w, const char *federation, const char *region)
{
    w_raw(w, magic, sizeof(magic));
    w_str(w, federation);
    w_str(w, region);
}

static int seal_key(uint8_t key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES],
                    const uint8_t identity_seed[32])
{
    if (sodium_init() < 0)
        return FA_ERR_CRYPTO;
    return crypto_kdf_derive_from_key(key, crypto_aead_xchacha20poly1305_ietf_KEYBYTES, KDF_SUBKEY,
                                      KDF_CONTEXT, identity_seed) == 0
               ? 0
               : FA_ERR_CRYPTO;
}

static void w_spend(wbuf *w, const fa_privacy_spend *sp)
{
    w_str(w, sp->mechanism);
    w_f64(w, sp->noise_multiplier);
    w_f64(w, sp->clip);
    w_f64(w, sp->sampling_rate);
    w_u64(w, sp->steps);
    w_f64(w, sp->ddg_l2_sens);
    w_f64(w, sp->ddg_sigma2);
    w_u32(w, sp->ddg_regions);
    w_u64(w, sp->ddg_dim);
}

int fa_privacy_budget_seal(const fa_privacy_budget *b, const uint8_t identity_seed[32],
                           uint8_t **out, size_t *out_len, fa_error *err)
{
    const fa_privacy_release *l = &b->last;
    uint8_t key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES], *acc = NULL, *dst;
    wbuf body = {0}, w = {0};
    size_t acc_len = 0, head_len;
    int rc;

    *out = NULL;
    *out_len = 0;
    if ((rc = fa_rdp_accountant_save(b->acc, &acc, &acc_len, err)) != 0)
        return rc;
    w_u32(&body, b->n_others ? FORMAT_SHARED : FORMAT);
    w_u64(&body, b->rounds);
    w_raw(&body, (const uint8_t[]){(uint8_t)b->have_last}, 1);
    w_u64(&body, l->round);
    w_u64(&body, l->version);
    w_raw(&body, l->digest, 32);
    w_spend(&body, &l->spend);
    w_f64(&body, l->epsilon_round);
    w_f64(&body, l->epsilon_total);
    w_u32(&body, (uint32_t)acc_len);
    w_raw(&body, acc, acc_len);
    if (b->n_others) {
        w_u32(&body, (uint32_t)b->n_others);
        for (size_t i = 0; i < b->n_others; i++) {
            const fa_privacy_release *o = &b->others[i].r;
            w_str(&body, b->others[i].federation);
            w_u64(&body, o->round);
            w_u64(&body, o->version);
            w_raw(&body, o->digest, 32);
            w_spend(&body, &o->spend);
            w_f64(&body, o->epsilon_round);
            w_f64(&body, o->epsilon_total);
        }
    }
    put_header(&w, b->federation, b->region);
    head_len = w.len;
    w_raw(&w, (const uint8_t[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES]){0},
          crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    w_raw(&w, body.p, body.len);
    w_raw(&w, (const uint8_t[crypto_aead_xchacha20poly1305_ietf_ABYTES]){0},
          crypto_aead_xchacha20poly1305_ietf_ABYTES);
    if (body.failed || w.failed) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "privacy budget: out of memory");
        goto out;
    }
    if (seal_key(key, identity_seed) != 0) {
        rc = fa_errorf(err, FA_ERR_CRYPTO, "privacy budget: key derivation failed");
        goto out;
    }
    dst = w.p + head_len;
    randombytes_buf(dst, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    crypto_aead_xchacha20poly1305_ietf_encrypt(dst + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
                                               NULL, body.p, body.len, w.p, head_len, NULL, dst,
                                               key);
    *out = w.p;
    *out_len = w.len;
    w.p = NULL;
out:
    sodium_memzero(key, sizeof(key));
    free(acc);
    free(body.p);
    free(w.p);
    return rc;
}

static int check_spend(const fa_privacy_spend *sp, fa_error *err);
static int epsilon_of(const fa_rdp_accountant *a, double delta, double *eps, fa_error *err);

static int is_ddg(const fa_privacy_spend *sp)
{
    return strcmp(sp->mechanism, FA_PRIVACY_MECHANISM_DDG) == 0;
}

/* One round of sp into a. */
static int compose(fa_rdp_accountant *a, const fa_privacy_spend *sp, fa_error *err)
{
    fa_rdp_ddg_params p;
    if (!is_ddg(sp))
        return fa_rdp_accountant_compose_sgm(a, sp->sampling_rate, sp->noise_multiplier, sp->steps,
                                             err);
    memset(&p, 0, sizeof(p));
    p.l2_sens = sp->ddg_l2_sens;
    p.sigma2 = sp->ddg_sigma2;
    p.n_regions = sp->ddg_regions;
    p.dim = sp->ddg_dim;
    return fa_rdp_accountant_compose_ddg(a, &p, 1, err);
}

/* A release's epsilon_round at the budget's delta (the config's, which
 * may differ from the one it was charged at): the same computation as the
 * charge, so the same bits when the delta is the same. */
static int restate_round(const fa_privacy_budget *b, fa_privacy_release *l, fa_error *err)
{
    const double *orders, *spent;
    size_t n = fa_rdp_accountant_orders(b->acc, &orders, &spent);
    fa_rdp_accountant *one = NULL;
    int rc;

    if ((rc = check_spend(&l->spend, err)) != 0 ||
        (rc = fa_rdp_accountant_new(&one, orders, n, err)) != 0 ||
        (rc = compose(one, &l->spend, err)) != 0 ||
        (rc = epsilon_of(one, b->delta, &l->epsilon_round, err)) != 0) {
        fa_rdp_accountant_del(one);
        return fa_error_prefix(err, rc, "privacy accountant: a release of round %llu",
                               (unsigned long long)l->round);
    }
    fa_rdp_accountant_del(one);
    return 0;
}

/* The owner's last release restated, its total the accountant's now.  The
 * other federations' totals stay what they were when charged (the total of
 * that moment, as their statements said). */
static int restate(fa_privacy_budget *b, fa_error *err)
{
    int rc;
    if (b->have_last) {
        if ((rc = restate_round(b, &b->last, err)) != 0)
            return rc;
        b->last.epsilon_total = fa_privacy_budget_epsilon(b);
    }
    for (size_t i = 0; i < b->n_others; i++)
        if ((rc = restate_round(b, &b->others[i].r, err)) != 0)
            return rc;
    return 0;
}

static void r_spend(rbuf *r, fa_privacy_spend *sp, uint32_t format)
{
    r_str(r, sp->mechanism, sizeof(sp->mechanism));
    sp->noise_multiplier = r_f64(r);
    sp->clip = r_f64(r);
    sp->sampling_rate = r_f64(r);
    sp->steps = r_u64(r);
    if (format >= 2) {
        sp->ddg_l2_sens = r_f64(r);
        sp->ddg_sigma2 = r_f64(r);
        sp->ddg_regions = r_u32(r);
        sp->ddg_dim = r_u64(r);
    }
}

/* The other federations' releases of a format-3 body. */
static int r_others(rbuf *r, fa_privacy_budget *b, fa_error *err)
{
    uint32_t n = r_u32(r);
    if (r->failed || n > (r->len - r->off) / 64)
        return fa_errorf(err, FA_ERR_CORRUPT, "privacy accountant: malformed state");
    b->others = calloc(n ? n : 1, sizeof(*b->others));
    if (!b->others)
        return fa_errorf(err, FA_ERR_NOMEM, "privacy budget: out of memory");
    for (uint32_t i = 0; i < n && !r->failed; i++) {
        release_slot *o = &b->others[i];
        const uint8_t *p;
        r_str(r, o->federation, sizeof(o->federation));
        o->have = 1;
        o->r.round = r_u64(r);
        o->r.version = r_u64(r);
        if ((p = r_raw(r, 32)) != NULL)
            memcpy(o->r.digest, p, 32);
        r_spend(r, &o->r.spend, FORMAT_SHARED);
        o->r.epsilon_round = r_f64(r);
        o->r.epsilon_total = r_f64(r);
        b->n_others = i + 1;
    }
    return 0;
}

int fa_privacy_budget_open(fa_privacy_budget **out, const char *federation, const char *region,
                           double epsilon, double delta, const uint8_t *sealed, size_t len,
                           const uint8_t identity_seed[32], fa_error *err)
{
    char fed[ID_MAX], reg[ID_MAX];
    uint8_t key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES], *body = NULL;
    unsigned long long body_len = 0;
    fa_privacy_budget *b = NULL;
    fa_privacy_release *l;
    const uint8_t *p;
    size_t head_len;
    uint32_t acc_len, format;
    rbuf r = {sealed, len, 0, 0};
    int rc;

    *out = NULL;
    p = r_raw(&r, sizeof(magic));
    if (!p || memcmp(p, magic, sizeof(magic)) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "not a sealed privacy accountant (no FAPRIVA1 "
                         "header)");
    r_str(&r, fed, sizeof(fed));
    r_str(&r, reg, sizeof(reg));
    head_len = r.off;
    if (r.failed || len - head_len < crypto_aead_xchacha20poly1305_ietf_NPUBBYTES +
                                         crypto_aead_xchacha20poly1305_ietf_ABYTES)
        return fa_errorf(err, FA_ERR_CORRUPT, "privacy accountant: truncated");
    if (strcmp(fed, federation ? federation : "") != 0 || strcmp(reg, region ? region : "") != 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the privacy accountant is region '%s' of federation '%s', this worker "
                         "is '%s' of '%s': another region's state directory",
                         reg, fed, region ? region : "", federation ? federation : "");
    if ((rc = budget_alloc(&b, federation, region, epsilon, delta, err)) != 0)
        return rc;
    body_len = len - head_len - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES -
               crypto_aead_xchacha20poly1305_ietf_ABYTES;
    body = malloc(body_len ? body_len : 1);
    if (!body) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "privacy budget: out of memory");
        goto out;
    }
    if (seal_key(key, identity_seed) != 0) {
        rc = fa_errorf(err, FA_ERR_CRYPTO, "privacy budget: key derivation failed");
        goto out;
    }
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            body, &body_len, NULL, sealed + head_len + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
            len - head_len - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, sealed, head_len,
            sealed + head_len, key) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "the privacy accountant does not open with this region's identity key: it "
                       "was altered, or sealed under another key");
        goto out;
    }
    r = (rbuf){body, (size_t)body_len, 0, 0};
    l = &b->last;
    format = r_u32(&r);
    if (format != 1 && format != FORMAT && format != FORMAT_SHARED) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "privacy accountant: unknown format");
        goto out;
    }
    b->rounds = r_u64(&r);
    p = r_raw(&r, 1);
    b->have_last = p && *p;
    l->round = r_u64(&r);
    l->version = r_u64(&r);
    if ((p = r_raw(&r, 32)) != NULL)
        memcpy(l->digest, p, 32);
    r_spend(&r, &l->spend, format);
    l->epsilon_round = r_f64(&r);
    l->epsilon_total = r_f64(&r);
    acc_len = r_u32(&r);
    p = r_raw(&r, acc_len);
    if (!r.failed && p && format == FORMAT_SHARED && (rc = r_others(&r, b, err)) != 0)
        goto out;
    if (r.failed || r.off != r.len || !p) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "privacy accountant: malformed state");
        goto out;
    }
    if ((rc = fa_rdp_accountant_restore(&b->acc, p, acc_len, err)) != 0) {
        fa_error_prefix(err, rc, "privacy accountant");
        goto out;
    }
    if ((rc = restate(b, err)) != 0)
        goto out;
    *out = b;
    b = NULL;
out:
    sodium_memzero(key, sizeof(key));
    free(body);
    fa_privacy_budget_del(b);
    return rc;
}

/* ---- spending ---------------------------------------------------------------- */

static int check_spend(const fa_privacy_spend *sp, fa_error *err)
{
    if (strcmp(sp->mechanism, FA_PRIVACY_MECHANISM_DPSGD) != 0 && !is_ddg(sp))
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy: mechanism \"%.40s\" cannot be accounted (only \"%s\", the "
                         "Poisson-sampled Gaussian, and \"%s\", the distributed discrete "
                         "Gaussian)",
                         sp->mechanism, FA_PRIVACY_MECHANISM_DPSGD, FA_PRIVACY_MECHANISM_DDG);
    if (is_ddg(sp) &&
        (!(sp->ddg_l2_sens > 0) || !isfinite(sp->ddg_l2_sens) || !(sp->ddg_sigma2 >= 1) ||
         !isfinite(sp->ddg_sigma2) || sp->ddg_regions == 0 || sp->ddg_dim == 0))
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy: a distributed discrete Gaussian round with sensitivity %g, "
                         "sigma2 %g, %u regions, dimension %llu (need > 0, >= 1, >= 1, >= 1)",
                         sp->ddg_l2_sens, sp->ddg_sigma2, sp->ddg_regions,
                         (unsigned long long)sp->ddg_dim);
    if (!(sp->noise_multiplier > 0.0) || !isfinite(sp->noise_multiplier))
        return fa_errorf(err, FA_ERR_INVAL, "privacy: noise multiplier %g (must be finite, > 0)",
                         sp->noise_multiplier);
    if (!(sp->clip > 0.0) || !isfinite(sp->clip))
        return fa_errorf(err, FA_ERR_INVAL, "privacy: clip %g (must be finite, > 0)", sp->clip);
    if (!(sp->sampling_rate > 0.0 && sp->sampling_rate <= 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "privacy: sampling rate %g (must be in (0, 1])",
                         sp->sampling_rate);
    if (sp->steps == 0)
        return fa_errorf(err, FA_ERR_INVAL, "privacy: a round of 0 noisy steps");
    return 0;
}

static int epsilon_of(const fa_rdp_accountant *a, double delta, double *eps, fa_error *err)
{
    return fa_rdp_accountant_epsilon(a, delta, FA_RDP_CONVERSION_TIGHT, eps, NULL, err);
}

int fa_privacy_budget_preview(const fa_privacy_budget *b, const fa_privacy_spend *sp,
                              double *eps_round, double *eps_total, fa_error *err)
{
    const double *orders, *spent;
    size_t n = fa_rdp_accountant_orders(b->acc, &orders, &spent);
    fa_rdp_accountant *one = NULL, *all = NULL;
    double er = 0, et = 0;
    int rc;

    if ((rc = check_spend(sp, err)) != 0)
        return rc;
    if ((rc = fa_rdp_accountant_new(&one, orders, n, err)) != 0 ||
        (rc = compose(one, sp, err)) != 0 || (rc = epsilon_of(one, b->delta, &er, err)) != 0 ||
        (rc = fa_rdp_accountant_new(&all, orders, n, err)) != 0 ||
        (rc = fa_rdp_accountant_compose_rdp(all, spent, n, 1, err)) != 0 ||
        (rc = compose(all, sp, err)) != 0 || (rc = epsilon_of(all, b->delta, &et, err)) != 0)
        goto out;
    if (eps_round)
        *eps_round = er;
    if (eps_total)
        *eps_total = et;
    if (!(et <= b->epsilon) && is_ddg(sp))
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "privacy budget exhausted: this round (distributed discrete Gaussian, "
                       "noise multiplier %g, clip %g, %u regions' noise) would cost epsilon %.4g "
                       "and take the total from %.4g to %.4g, beyond the budget of %g at delta %g",
                       sp->noise_multiplier, sp->clip, sp->ddg_regions, er,
                       fa_privacy_budget_epsilon(b), et, b->epsilon, b->delta);
    else if (!(et <= b->epsilon))
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "privacy budget exhausted: this round (%llu steps, sigma %g, q %g) would "
                       "cost epsilon %.4g and take the total from %.4g to %.4g, beyond the "
                       "budget of %g at delta %g",
                       (unsigned long long)sp->steps, sp->noise_multiplier, sp->sampling_rate, er,
                       fa_privacy_budget_epsilon(b), et, b->epsilon, b->delta);
out:
    fa_rdp_accountant_del(one);
    fa_rdp_accountant_del(all);
    return rc;
}

/* The last release of federation (NULL: the owner), or NULL when it has
 * none. */
static const fa_privacy_release *last_of(const fa_privacy_budget *b, const char *federation)
{
    if (!federation || !strcmp(federation, b->federation))
        return b->have_last ? &b->last : NULL;
    for (size_t i = 0; i < b->n_others; i++)
        if (!strcmp(b->others[i].federation, federation))
            return &b->others[i].r;
    return NULL;
}

static int is_last_of(const fa_privacy_budget *b, const char *federation, uint64_t round,
                      uint64_t version, const uint8_t digest[32])
{
    const fa_privacy_release *l = last_of(b, federation);
    return l && l->round == round && l->version == version &&
           sodium_memcmp(l->digest, digest, 32) == 0;
}

int fa_privacy_budget_is_last(const fa_privacy_budget *b, uint64_t round, uint64_t version,
                              const uint8_t digest[32])
{
    return is_last_of(b, NULL, round, version, digest);
}

int fa_privacy_budget_charge_for(fa_privacy_budget *b, const char *federation,
                                 const fa_privacy_spend *sp, uint64_t round, uint64_t version,
                                 const uint8_t digest[32], int *charged, fa_error *err)
{
    fa_privacy_release *l;
    double er, et;
    int rc;

    if (charged)
        *charged = 0;
    if (federation && (!*federation || strlen(federation) >= ID_MAX))
        return fa_errorf(err, FA_ERR_INVAL, "privacy budget: a federation id of 1 to %d bytes",
                         ID_MAX - 1);
    if (is_last_of(b, federation, round, version, digest))
        return 0;
    if ((rc = fa_privacy_budget_preview(b, sp, &er, &et, err)) != 0)
        return rc;
    l = (fa_privacy_release *)last_of(b, federation);
    if (!l && federation && strcmp(federation, b->federation) != 0) {
        release_slot *o = realloc(b->others, (b->n_others + 1) * sizeof(*o));
        if (!o)
            return fa_errorf(err, FA_ERR_NOMEM, "privacy budget: out of memory");
        b->others = o;
        o = &b->others[b->n_others++];
        memset(o, 0, sizeof(*o));
        snprintf(o->federation, sizeof(o->federation), "%s", federation);
        o->have = 1;
        l = &o->r;
    } else if (!l) {
        l = &b->last;
    }
    if ((rc = compose(b->acc, sp, err)) != 0)
        return rc;
    b->rounds++;
    if (l == &b->last)
        b->have_last = 1;
    l->round = round;
    l->version = version;
    memcpy(l->digest, digest, 32);
    l->spend = *sp;
    l->epsilon_round = er;
    l->epsilon_total = fa_privacy_budget_epsilon(b);
    if (charged)
        *charged = 1;
    return 0;
}

int fa_privacy_budget_charge(fa_privacy_budget *b, const fa_privacy_spend *sp, uint64_t round,
                             uint64_t version, const uint8_t digest[32], int *charged,
                             fa_error *err)
{
    return fa_privacy_budget_charge_for(b, NULL, sp, round, version, digest, charged, err);
}

const fa_privacy_release *fa_privacy_budget_last(const fa_privacy_budget *b)
{
    return last_of(b, NULL);
}

const fa_privacy_release *fa_privacy_budget_last_for(const fa_privacy_budget *b,
                                                     const char *federation)
{
    return last_of(b, federation);
}

double fa_privacy_budget_epsilon(const fa_privacy_budget *b)
{
    double e = 0.0;
    if (fa_rdp_accountant_steps(b->acc) == 0)
        return 0.0;
    /* the accountant's values were checked when composed: this cannot fail */
    if (epsilon_of(b->acc, b->delta, &e, NULL) != 0)
        return INFINITY;
    return e;
}

double fa_privacy_budget_target_epsilon(const fa_privacy_budget *b)
{
    return b->epsilon;
}
double fa_privacy_budget_delta(const fa_privacy_budget *b)
{
    return b->delta;
}
uint64_t fa_privacy_budget_rounds(const fa_privacy_budget *b)
{
    return b->rounds;
}
uint64_t fa_privacy_budget_steps(const fa_privacy_budget *b)
{
    return fa_rdp_accountant_steps(b->acc);
}

int fa_privacy_budget_statement_for(const fa_privacy_budget *b, const char *federation,
                                    uint64_t round, uint32_t attempt, Fedagg__PrivacyStatement *st,
                                    fa_error *err)
{
    const fa_privacy_release *l = last_of(b, federation);

    fedagg__privacy_statement__init(st);
    if (!l || l->round != round)
        return fa_errorf(err, FA_ERR_STATE,
                         "privacy: no update of round %llu was accounted (the last was of round "
                         "%llu)",
                         (unsigned long long)round, (unsigned long long)(l ? l->round : 0));
    st->federation_id = (char *)(federation ? federation : b->federation);
    st->region = (char *)b->region;
    st->round = round;
    st->attempt = attempt;
    st->mechanism = (char *)l->spend.mechanism;
    st->noise_multiplier = l->spend.noise_multiplier;
    st->clip = l->spend.clip;
    st->sampling_rate = l->spend.sampling_rate;
    st->steps = l->spend.steps;
    st->delta = b->delta;
    st->epsilon_round = l->epsilon_round;
    st->epsilon_total = l->epsilon_total;
    st->budget_epsilon = b->epsilon;
    st->budget_delta = b->delta;
    st->accountant =
        (char *)(is_ddg(&l->spend) ? FA_PRIVACY_ACCOUNTANT_NAME_DDG : FA_PRIVACY_ACCOUNTANT_NAME);
    st->unit = (char *)(is_ddg(&l->spend) ? "region" : "example");
    st->rounds_accounted = b->rounds;
    return 0;
}

int fa_privacy_budget_statement(const fa_privacy_budget *b, uint64_t round, uint32_t attempt,
                                Fedagg__PrivacyStatement *st, fa_error *err)
{
    return fa_privacy_budget_statement_for(b, NULL, round, attempt, st, err);
}

void fa_privacy_budget_digest(const void *update, size_t len, uint8_t digest[32])
{
    crypto_generichash(digest, 32, update, len, NULL, 0);
}
