/* privacy_ledger.c - see privacy_ledger.h. */
#include "aggregator/privacy_ledger.h"

#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_sha256.h"
#include "crypto/identity.h"

struct statement {
    size_t member;
    uint8_t *bytes, sig[64];
    size_t len;
    uint8_t body_sha[32];
};

struct totals {
    int have;
    double epsilon, delta, budget;
};

struct fa_privacy_ledger {
    char *federation_id;
    fa_eval_reports_roster roster;
    struct totals *totals;
    uint64_t round;
    uint32_t attempt;
    struct statement *st;
    size_t n_st;
};

int fa_privacy_ledger_new(fa_privacy_ledger **out, const char *federation_id,
                          const fa_eval_reports_member *members, size_t n, fa_error *err)
{
    fa_privacy_ledger *l = calloc(1, sizeof(*l));

    *out = NULL;
    if (!l || !(l->federation_id = strdup(federation_id)) ||
        !(l->totals = calloc(n ? n : 1, sizeof(*l->totals))) ||
        fa_eval_reports_roster_copy(&l->roster, members, n, err) != 0) {
        fa_privacy_ledger_del(l);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return 0;
}

static void drop(fa_privacy_ledger *l)
{
    for (size_t i = 0; i < l->n_st; i++)
        free(l->st[i].bytes);
    free(l->st);
    l->st = NULL;
    l->n_st = 0;
}

void fa_privacy_ledger_del(fa_privacy_ledger *l)
{
    if (!l)
        return;
    drop(l);
    fa_eval_reports_roster_free(&l->roster);
    free(l->totals);
    free(l->federation_id);
    free(l);
}

void fa_privacy_ledger_begin(fa_privacy_ledger *l, uint64_t round, uint32_t attempt)
{
    if (l->round == round && l->attempt == attempt)
        return;
    drop(l);
    l->round = round;
    l->attempt = attempt;
}

static int nonneg(double x)
{
    return isfinite(x) && x >= 0;
}

static int check_values(const Fedagg__PrivacyStatement *s, const char *region, fa_error *err)
{
    if (!s->mechanism || !s->mechanism[0])
        return fa_errorf(err, FA_ERR_INVAL, "privacy statement of %s names no mechanism", region);
    if (!nonneg(s->noise_multiplier) || !nonneg(s->clip) || !nonneg(s->sampling_rate) ||
        s->sampling_rate > 1 || !nonneg(s->epsilon_round) || !nonneg(s->epsilon_total) ||
        !nonneg(s->budget_epsilon) || !(s->delta > 0 && s->delta < 1) ||
        !(s->budget_delta >= 0 && s->budget_delta < 1))
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy statement of %s: a value is negative, not finite or out of "
                         "range (sampling_rate and deltas in [0, 1))",
                         region);
    if (s->epsilon_total + 1e-12 < s->epsilon_round)
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy statement of %s: epsilon_total %g is below this round's %g",
                         region, s->epsilon_total, s->epsilon_round);
    return 0;
}

int fa_privacy_ledger_has(const fa_privacy_ledger *l, const char *region, const uint8_t *body,
                          size_t len)
{
    uint8_t sha[32];
    long m = fa_eval_reports_roster_find(&l->roster, region);
    if (m < 0 || fa_sha256(sha, body, len) != 0)
        return 0;
    for (size_t i = 0; i < l->n_st; i++)
        if (l->st[i].member == (size_t)m && !sodium_memcmp(l->st[i].body_sha, sha, 32))
            return 1;
    return 0;
}

int fa_privacy_ledger_submit(fa_privacy_ledger *l, const char *region, const uint8_t *body,
                             size_t len, fa_error *err)
{
    Fedagg__SignedPrivacy *sp = NULL;
    Fedagg__PrivacyStatement *s = NULL;
    struct statement n, *grown;
    long m = fa_eval_reports_roster_find(&l->roster, region);
    int rc = 0;

    memset(&n, 0, sizeof(n));
    if (m < 0)
        return fa_errorf(err, FA_ERR_AUTH, "region '%s' is not a member of federation %s",
                         region ? region : "", l->federation_id);
    if (fa_sha256(n.body_sha, body, len) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "privacy statement: SHA-256 failed");
    for (size_t i = 0; i < l->n_st; i++)
        if (l->st[i].member == (size_t)m) {
            if (!sodium_memcmp(l->st[i].body_sha, n.body_sha, 32))
                return 0;
            return fa_errorf(err, FA_ERR_EXISTS,
                             "region %s already sent a different privacy statement for round "
                             "%" PRIu64 " attempt %u",
                             region, l->round, l->attempt);
        }
    sp = fedagg__signed_privacy__unpack(NULL, len, body);
    if (!sp || sp->signature.len != 64 || sp->statement.len == 0) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "privacy statement of %s does not decode as a SignedPrivacy with a "
                       "64-byte signature",
                       region);
        goto out;
    }
    rc = fa_identity_verify_statement(l->roster.members[m].pk, FA_IDENTITY_DOMAIN_PRIVACY,
                                      sp->statement.data, sp->statement.len, sp->signature.data);
    if (rc == FA_ERR_NOMEM) {
        rc = fa_errorf(err, rc, "privacy statement of %s: out of memory", region);
        goto out;
    }
    if (rc != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "privacy statement of %s: the signature does not verify with the "
                       "region's identity key",
                       region);
        goto out;
    }
    s = fedagg__privacy_statement__unpack(NULL, sp->statement.len, sp->statement.data);
    if (!s) {
        rc = fa_errorf(err, FA_ERR_PARSE, "privacy statement of %s does not decode", region);
        goto out;
    }
    if (!s->region || strcmp(s->region, region) || !s->federation_id ||
        strcmp(s->federation_id, l->federation_id)) {
        rc = fa_errorf(err, FA_ERR_AUTH,
                       "privacy statement sent by %s names region '%s' of federation '%s'", region,
                       s->region ? s->region : "", s->federation_id ? s->federation_id : "");
        goto out;
    }
    if (s->round != l->round || s->attempt != l->attempt) {
        rc = fa_errorf(err, FA_ERR_REPLAY,
                       "privacy statement of %s is for round %" PRIu64 " attempt %u; the "
                       "current one is round %" PRIu64 " attempt %u",
                       region, s->round, s->attempt, l->round, l->attempt);
        goto out;
    }
    if ((rc = check_values(s, region, err)) != 0)
        goto out;
    n.member = (size_t)m;
    n.len = sp->statement.len;
    memcpy(n.sig, sp->signature.data, 64);
    if (!(n.bytes = malloc(n.len)) || !(grown = realloc(l->st, (l->n_st + 1) * sizeof(*grown)))) {
        free(n.bytes);
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(n.bytes, sp->statement.data, n.len);
    l->st = grown;
    l->st[l->n_st++] = n;
    l->totals[m].have = 1;
    l->totals[m].epsilon = s->epsilon_total;
    l->totals[m].delta = s->delta;
    l->totals[m].budget = s->budget_epsilon;
out:
    if (s)
        fedagg__privacy_statement__free_unpacked(s, NULL);
    if (sp)
        fedagg__signed_privacy__free_unpacked(sp, NULL);
    return rc;
}

int fa_privacy_ledger_restore(fa_privacy_ledger *l, const Fedagg__SignedPrivacy *sp, fa_error *err)
{
    Fedagg__PrivacyStatement *s =
        fedagg__privacy_statement__unpack(NULL, sp->statement.len, sp->statement.data);
    size_t len = fedagg__signed_privacy__get_packed_size(sp);
    uint8_t *body = malloc(len ? len : 1);
    int rc;

    if (!s || !body) {
        rc = s ? fa_errorf(err, FA_ERR_NOMEM, "out of memory")
               : fa_errorf(err, FA_ERR_PARSE, "a saved privacy statement does not decode");
    } else {
        fedagg__signed_privacy__pack(sp, body);
        rc = fa_privacy_ledger_submit(l, s->region, body, len, err);
    }
    free(body);
    if (s)
        fedagg__privacy_statement__free_unpacked(s, NULL);
    return rc;
}

size_t fa_privacy_ledger_count(const fa_privacy_ledger *l)
{
    return l->n_st;
}

void fa_privacy_ledger_at(const fa_privacy_ledger *l, size_t i, Fedagg__SignedPrivacy *out,
                          const char **region)
{
    fedagg__signed_privacy__init(out);
    out->statement.data = l->st[i].bytes;
    out->statement.len = l->st[i].len;
    out->signature.data = (uint8_t *)l->st[i].sig;
    out->signature.len = 64;
    if (region)
        *region = l->roster.members[l->st[i].member].id;
}

int fa_privacy_ledger_region(const fa_privacy_ledger *l, const char *region, double *epsilon,
                             double *delta, double *budget_epsilon)
{
    long m = fa_eval_reports_roster_find(&l->roster, region);
    if (m < 0 || !l->totals[m].have)
        return 0;
    *epsilon = l->totals[m].epsilon;
    *delta = l->totals[m].delta;
    *budget_epsilon = l->totals[m].budget;
    return 1;
}
