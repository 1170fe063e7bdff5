/* data_ledger.c - the regions' data statements of an attempt.  See
 * data_ledger.h. */
#include "aggregator/data_ledger.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_sha256.h"
#include "crypto/identity.h"

#define MAX_NAME 63

struct statement {
    size_t member;
    uint8_t *bytes, sig[64];
    size_t len;
    uint8_t body_sha[32];
};

struct fa_data_ledger {
    char *federation_id;
    fa_eval_reports_roster roster;
    uint64_t round, version;
    uint32_t attempt;
    uint8_t sha256[32];
    struct statement *st;
    size_t n_st;
};

int fa_data_ledger_new(fa_data_ledger **out, const char *federation_id,
                       const fa_eval_reports_member *members, size_t n, fa_error *err)
{
    fa_data_ledger *l = calloc(1, sizeof(*l));

    *out = NULL;
    if (!l || !(l->federation_id = strdup(federation_id)) ||
        fa_eval_reports_roster_copy(&l->roster, members, n, err) != 0) {
        fa_data_ledger_del(l);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    *out = l;
    return 0;
}

static void drop(fa_data_ledger *l)
{
    for (size_t i = 0; i < l->n_st; i++)
        free(l->st[i].bytes);
    free(l->st);
    l->st = NULL;
    l->n_st = 0;
}

void fa_data_ledger_del(fa_data_ledger *l)
{
    if (!l)
        return;
    drop(l);
    fa_eval_reports_roster_free(&l->roster);
    free(l->federation_id);
    free(l);
}

void fa_data_ledger_begin(fa_data_ledger *l, uint64_t round, uint32_t attempt, uint64_t version,
                          const uint8_t sha256[32])
{
    if (l->round == round && l->attempt == attempt && l->version == version &&
        !memcmp(l->sha256, sha256, 32))
        return;
    drop(l);
    l->round = round;
    l->attempt = attempt;
    l->version = version;
    memcpy(l->sha256, sha256, 32);
}

/* A name for people: 1..MAX_NAME bytes, no control characters. */
static int name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

static int check_values(const Fedagg__DataStatement *s, const char *region, fa_error *err)
{
    if (!name_ok(s->dataset) || !name_ok(s->trainer) ||
        (s->trainer_kind && s->trainer_kind[0] && !name_ok(s->trainer_kind)))
        return fa_errorf(err, FA_ERR_INVAL,
                         "data statement of %s: the dataset, trainer and trainer kind must be "
                         "names of 1 to %d bytes without control characters",
                         region, MAX_NAME);
    if ((s->manifest_sha256.len != 0 && s->manifest_sha256.len != 32) ||
        s->trainer_sha256.len != 32)
        return fa_errorf(err, FA_ERR_INVAL,
                         "data statement of %s: the manifest digest (%zu bytes) and the trainer "
                         "digest (%zu bytes) must be SHA-256 (32 bytes; the manifest's may be "
                         "absent)",
                         region, s->manifest_sha256.len, s->trainer_sha256.len);
    if (s->num_examples == 0 || s->num_examples > FA_EVAL_MAX_EXAMPLES)
        return fa_errorf(err, FA_ERR_INVAL,
                         "data statement of %s: num_examples %" PRIu64 " is not 1 to %" PRIu64,
                         region, s->num_examples, (uint64_t)FA_EVAL_MAX_EXAMPLES);
    return 0;
}

int fa_data_ledger_submit(fa_data_ledger *l, const char *region, const uint8_t *body, size_t len,
                          fa_error *err)
{
    Fedagg__SignedDataStatement *sd = NULL;
    Fedagg__DataStatement *s = NULL;
    struct statement st, *grown;
    long m = fa_eval_reports_roster_find(&l->roster, region);
    int rc = 0;

    memset(&st, 0, sizeof(st));
    if (m < 0)
        return fa_errorf(err, FA_ERR_AUTH, "region '%s' is not a member of federation %s",
                         region ? region : "", l->federation_id);
    if (fa_sha256(st.body_sha, body, len) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "data statement: SHA-256 failed");
    for (size_t i = 0; i < l->n_st; i++)
        if (l->st[i].member == (size_t)m) {
            if (!sodium_memcmp(l->st[i].body_sha, st.body_sha, 32))
                return 0; /* a retry */
            return fa_errorf(err, FA_ERR_EXISTS,
                             "region %s already sent a different data statement for round "
                             "%" PRIu64 " attempt %u",
                             region, l->round, l->attempt);
        }
    sd = fedagg__signed_data_statement__unpack(NULL, len, body);
    if (!sd || sd->signature.len != 64 || sd->statement.len == 0) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "data statement of %s does not decode as a SignedDataStatement with a "
                       "64-byte signature",
                       region);
        goto out;
    }
    if (fa_identity_verify_statement(l->roster.members[m].pk, FA_IDENTITY_DOMAIN_DATA,
                                     sd->statement.data, sd->statement.len,
                                     sd->signature.data) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "data statement of %s: the signature does not verify with the region's "
                       "identity key",
                       region);
        goto out;
    }
    s = fedagg__data_statement__unpack(NULL, sd->statement.len, sd->statement.data);
    if (!s) {
        rc = fa_errorf(err, FA_ERR_PARSE, "data statement of %s: the statement does not decode",
                       region);
        goto out;
    }
    if (!s->region || strcmp(s->region, region) != 0 || !s->federation_id ||
        strcmp(s->federation_id, l->federation_id) != 0) {
        rc =
            fa_errorf(err, FA_ERR_AUTH, "data statement sent by %s names region '%s' of '%s'",
                      region, s->region ? s->region : "", s->federation_id ? s->federation_id : "");
        goto out;
    }
    if (s->round != l->round || s->attempt != l->attempt || s->model_version != l->version ||
        s->model_sha256.len != 32 || memcmp(s->model_sha256.data, l->sha256, 32) != 0) {
        rc = fa_errorf(err, FA_ERR_REPLAY,
                       "data statement of %s is of round %" PRIu64 " attempt %u trained from "
                       "version %" PRIu64 "; statements are taken for round %" PRIu64
                       " attempt %u from version %" PRIu64,
                       region, s->round, s->attempt, s->model_version, l->round, l->attempt,
                       l->version);
        goto out;
    }
    if ((rc = check_values(s, region, err)) != 0)
        goto out;
    st.member = (size_t)m;
    st.bytes = malloc(sd->statement.len);
    grown = realloc(l->st, (l->n_st + 1) * sizeof(*grown));
    if (grown)
        l->st = grown;
    if (!st.bytes || !grown) {
        free(st.bytes);
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(st.bytes, sd->statement.data, sd->statement.len);
    st.len = sd->statement.len;
    memcpy(st.sig, sd->signature.data, 64);
    l->st[l->n_st++] = st;
out:
    if (s)
        fedagg__data_statement__free_unpacked(s, NULL);
    if (sd)
        fedagg__signed_data_statement__free_unpacked(sd, NULL);
    return rc;
}

int fa_data_ledger_has(const fa_data_ledger *l, const char *region, const uint8_t *body, size_t len)
{
    uint8_t sha[32];
    long m = fa_eval_reports_roster_find(&l->roster, region);
    if (m < 0 || fa_sha256(sha, body, len) != 0)
        return 0;
    for (size_t i = 0; i < l->n_st; i++)
        if (l->st[i].member == (size_t)m)
            return !sodium_memcmp(l->st[i].body_sha, sha, 32);
    return 0;
}

int fa_data_ledger_restore(fa_data_ledger *l, const Fedagg__SignedDataStatement *sd, fa_error *err)
{
    Fedagg__DataStatement *s =
        fedagg__data_statement__unpack(NULL, sd->statement.len, sd->statement.data);
    size_t len = fedagg__signed_data_statement__get_packed_size(sd);
    uint8_t *body = malloc(len ? len : 1);
    int rc;

    if (!s || !body) {
        rc = s ? fa_errorf(err, FA_ERR_NOMEM, "out of memory")
               : fa_errorf(err, FA_ERR_PARSE, "a saved data statement does not decode");
    } else {
        fedagg__signed_data_statement__pack(sd, body);
        rc = fa_data_ledger_submit(l, s->region, body, len, err);
    }
    free(body);
    if (s)
        fedagg__data_statement__free_unpacked(s, NULL);
    return rc;
}

size_t fa_data_ledger_count(const fa_data_ledger *l)
{
    return l->n_st;
}

void fa_data_ledger_at(const fa_data_ledger *l, size_t i, Fedagg__SignedDataStatement *out,
                       const char **region)
{
    fedagg__signed_data_statement__init(out);
    out->statement.data = l->st[i].bytes;
    out->statement.len = l->st[i].len;
    out->signature.data = (uint8_t *)l->st[i].sig;
    out->signature.len = 64;
    if (region)
        *region = l->roster.members[l->st[i].member].id;
}
