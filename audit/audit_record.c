/* audit_record.c - the record rules (fa_audit_record_check) and the ordering of a
 * record after the one before it. */
#include "audit/audit_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "audit/audit_gov.h"
#include "common/fa_sha256.h"
#include "crypto/secagg.h"

/* ---------------------------------------------------------------------------
 * Record rules
 * ------------------------------------------------------------------------- */

static int sorted_unique(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!v[i] || !v[i][0] || strlen(v[i]) > 255)
            return 0;
        if (i > 0 && strcmp(v[i - 1], v[i]) >= 0)
            return 0;
    }
    return 1;
}

int fa_audit_in_sorted(char **v, size_t n, const char *s)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v[mid], s);
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int fa_audit_record_check(const Fedagg__AuditRecord *r, char *why, size_t why_len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        return FA_ERR_INVAL;                                                                       \
    } while (0)
    if (r->version != 1)
        BAD("record version %u is not 1", r->version);
    if (!r->federation_id || !r->federation_id[0] || strlen(r->federation_id) > 255)
        BAD("federation_id is empty or longer than 255 bytes");
    if ((r->admin != NULL) + (r->decision != NULL) + (r->lifecycle != NULL) +
            (fa_audit_gov_kind(r) != FA_GOV_NONE) >
        1)
        BAD("a record is one of an operator's action, a region's decision, a lifecycle "
            "action and a governance record, not several");
    if (r->decision || r->lifecycle) {
        /* Neither changes a model: both digests are the current model's
         * (a service log's, which has none: 32 zero bytes). */
        if (r->n_participants || r->n_commitments || r->n_dropped)
            BAD("a %s has participants", r->decision ? "decision" : "lifecycle action");
        if (r->prev_version != r->new_version || r->prev_model_sha256.len != 32 ||
            r->new_model_sha256.len != 32 ||
            memcmp(r->prev_model_sha256.data, r->new_model_sha256.data, 32) != 0)
            BAD("a %s changes the model", r->decision ? "decision" : "lifecycle action");
    }
    if (r->decision) {
        if (r->decision->statement.len == 0 || r->decision->statement.len > 64 * 1024)
            BAD("a decision's statement has %zu bytes", r->decision->statement.len);
        if (r->decision->signature.len != FA_ED25519_SIG_LEN)
            BAD("a decision's signature has %zu bytes, not 64", r->decision->signature.len);
        return 0;
    }
    if (r->lifecycle) {
        static const char *const actions[] = {"create", "pause", "resume", "abort", "archive"};
        const Fedagg__FederationLifecycle *l = r->lifecycle;
        int known = 0;
        uint8_t sha[32];
        for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
            known |= l->action && !strcmp(l->action, actions[i]);
        if (!known)
            BAD("lifecycle action '%s' is not one of create, pause, resume, abort, archive",
                l->action ? l->action : "");
        if (!l->operator_ || !l->operator_[0])
            BAD("lifecycle action %s names no operator", l->action);
        if (!strcmp(l->action, "create")) {
            if (l->config.len == 0)
                BAD("create of %s carries no federation file", r->federation_id);
            if (l->config_sha256.len != 32 || fa_sha256(sha, l->config.data, l->config.len) != 0 ||
                memcmp(sha, l->config_sha256.data, 32) != 0)
                BAD("create of %s: config_sha256 is not the SHA-256 of its federation file",
                    r->federation_id);
        }
        return 0;
    }
    if (fa_audit_gov_kind(r) != FA_GOV_NONE)
        return fa_audit_gov_check(r, why, why_len); /* audit_gov.c */
    if (r->admin) {
        static const char *const actions[] = {"pause", "resume", "abort", "drain", "admit"};
        const Fedagg__AdminAction *a = r->admin;
        int known = 0;
        for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
            known |= a->action && !strcmp(a->action, actions[i]);
        if (!known)
            BAD("operator action '%s' is not one of pause, resume, abort, drain, admit",
                a->action ? a->action : "");
        if (!a->operator_ || !a->operator_[0])
            BAD("operator action %s names no operator", a->action);
        if ((!strcmp(a->action, "drain") || !strcmp(a->action, "admit")) &&
            (!a->region || !a->region[0]))
            BAD("operator action %s names no region", a->action);
        if (r->n_participants || r->n_commitments || r->n_dropped)
            BAD("an operator action has participants");
        if (r->prev_version != r->new_version || r->prev_model_sha256.len != 32 ||
            r->new_model_sha256.len != 32 ||
            memcmp(r->prev_model_sha256.data, r->new_model_sha256.data, 32) != 0)
            BAD("an operator action changes the model");
        return 0;
    }
    if (r->config_digest.len != 32)
        BAD("config_digest has %zu bytes, not 32", r->config_digest.len);
    if (r->prev_model_sha256.len != 32)
        BAD("prev_model_sha256 has %zu bytes, not 32", r->prev_model_sha256.len);
    if (r->new_model_sha256.len != 32)
        BAD("new_model_sha256 has %zu bytes, not 32", r->new_model_sha256.len);
    if (r->n_participants == 0)
        BAD("no participants");
    if (!sorted_unique(r->participants, r->n_participants))
        BAD("participants are not sorted and unique (or one is empty)");
    if (!sorted_unique(r->dropped, r->n_dropped))
        BAD("dropped regions are not sorted and unique (or one is empty)");
    for (size_t i = 0; i < r->n_dropped; i++)
        if (fa_audit_in_sorted(r->participants, r->n_participants, r->dropped[i]))
            BAD("region %s is both a participant and dropped", r->dropped[i]);
    if (r->threshold > r->n_participants)
        BAD("%zu participants, fewer than the threshold %u", r->n_participants, r->threshold);
    if (r->commit_unix_ms < r->start_unix_ms)
        BAD("commit time before start time");
    if (r->n_commitments != r->n_participants)
        BAD("%zu commitments for %zu participants", r->n_commitments, r->n_participants);
    for (size_t i = 0; i < r->n_commitments; i++) {
        const Fedagg__RegionCommitment *c = r->commitments[i];
        if (!c->region || strcmp(c->region, r->participants[i]) != 0)
            BAD("commitment %zu is for region %s, not participant %s", i,
                c->region ? c->region : "(none)", r->participants[i]);
        if (c->upload_digest.len != 32)
            BAD("region %s: upload_digest has %zu bytes, not 32", c->region, c->upload_digest.len);
        if (c->upload_digest_alg != FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_SHA256 &&
            c->upload_digest_alg != FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3)
            BAD("region %s: upload_digest_alg %d is not a hash this fedagg knows", c->region,
                (int)c->upload_digest_alg);
        /* No signature: the region uploaded, then dropped out before the
         * consistency check (Bonawitz et al. round 3), so it never signed;
         * its update is in the sum all the same. */
        if (c->signature.len != FA_ED25519_SIG_LEN && c->signature.len != 0)
            BAD("region %s: signature has %zu bytes, not 64 (or none)", c->region,
                c->signature.len);
    }
    if (r->tensor_table_digest.len != 0 && r->tensor_table_digest.len != 32)
        BAD("tensor_table_digest has %zu bytes, not 32", r->tensor_table_digest.len);
    if (r->quantization && r->quantization->ranges_sha256.len != 0 &&
        r->quantization->ranges_sha256.len != 32)
        BAD("quantization.ranges_sha256 has %zu bytes, not 32", r->quantization->ranges_sha256.len);
    for (size_t i = 0; i < r->n_share_faults; i++) {
        const Fedagg__ShareFault *sf = r->share_faults[i];
        int self = sf->secret && !strcmp(sf->secret, "self_mask");
        if (!sf->region || !fa_audit_in_sorted(r->participants, r->n_participants, sf->region))
            BAD("share fault %zu names region %s, not a participant", i,
                sf->region && sf->region[0] ? sf->region : "(none)");
        if (i > 0 && strcmp(r->share_faults[i - 1]->region, sf->region) >= 0)
            BAD("share faults are not sorted by region and unique (%s)", sf->region);
        if (!self && !(sf->secret && !strcmp(sf->secret, "mask_key")))
            BAD("share fault of %s: secret '%s' is not self_mask or mask_key", sf->region,
                sf->secret ? sf->secret : "");
        if (!sf->owner || !(self ? fa_audit_in_sorted(r->participants, r->n_participants, sf->owner)
                                 : fa_audit_in_sorted(r->dropped, r->n_dropped, sf->owner)))
            BAD("share fault of %s: owner %s is not a %s", sf->region,
                sf->owner && sf->owner[0] ? sf->owner : "(none)",
                self ? "participant" : "dropped region");
    }
    for (size_t i = 0; i < r->n_evaluations; i++)
        if (r->evaluations[i]->signature.len != FA_ED25519_SIG_LEN)
            BAD("evaluation %zu: signature has %zu bytes, not 64", i,
                r->evaluations[i]->signature.len);
    return fa_audit_gov_check(r, why, why_len); /* its data statements */
#undef BAD
}

int fa_audit_record_is_action(const Fedagg__AuditRecord *r)
{
    return r->admin || r->decision || r->lifecycle || fa_audit_gov_kind(r) != FA_GOV_NONE;
}

/* The rules between consecutive records.  prev == NULL-state when have == 0.
 * Records are ordered by (round, attempt, kind) with an operator's action
 * (kind 0, of the round in flight) before the aggregation of that round and
 * attempt (kind 1); aggregations come strictly after the record before them,
 * actions at or after it (several actions may fall in one attempt). */
int fa_audit_record_follows(int have, uint64_t round, uint32_t attempt, int prev_admin,
                            uint64_t new_version, const uint8_t *new_model,
                            const Fedagg__AuditRecord *r, char *why, size_t why_len)
{
    int action = fa_audit_record_is_action(r);
    int kind = action ? 0 : 1, pkind = prev_admin ? 0 : 1;
    int later = r->round != round       ? r->round > round
                : r->attempt != attempt ? r->attempt > attempt
                                        : (action ? kind >= pkind : kind > pkind);

    if (!have)
        return 0;
    if (!later) {
        snprintf(why, why_len,
                 "round %" PRIu64 " attempt %u does not come after round %" PRIu64
                 " attempt %u of the record before it (a duplicated or reordered record?)",
                 r->round, r->attempt, round, attempt);
        return FA_ERR_INVAL;
    }
    if (r->prev_version != new_version ||
        memcmp(r->prev_model_sha256.data, new_model, FA_AUDIT_HLEN) != 0) {
        snprintf(why, why_len,
                 "previous model (version %" PRIu64 ") is not the new model (version %" PRIu64
                 ") of the record before it (a record removed or reordered?)",
                 r->prev_version, new_version);
        return FA_ERR_INVAL;
    }
    return 0;
}

const uint8_t *fa_audit_region_key_find(const fa_audit_region_key *keys, size_t n,
                                        const char *region)
{
    if (!region)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].region, region) == 0)
            return keys[i].pk;
    return NULL;
}

int fa_audit_upload_alg(const Fedagg__RegionCommitment *c)
{
    switch (c->upload_digest_alg) {
    case FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3:
        return FA_SECAGG_UPLOAD_BLAKE3;
    case FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_SHA256:
        return FA_SECAGG_UPLOAD_SHA256;
    default:
        return -1;
    }
}

const char *fa_audit_upload_alg_name(const Fedagg__RegionCommitment *c)
{
    switch (fa_audit_upload_alg(c)) {
    case FA_SECAGG_UPLOAD_BLAKE3:
        return "blake3";
    case FA_SECAGG_UPLOAD_SHA256:
        return "sha256";
    default:
        return "unknown";
    }
}

int fa_audit_commitment_check(const Fedagg__AuditRecord *r, const Fedagg__RegionCommitment *c,
                              const uint8_t pk[FA_ED25519_PK_LEN])
{
    if (c->signature.len == 0)
        return FA_ERR_NOTFOUND;
    if (c->signature.len != FA_SECAGG_SIGNATURE_BYTES ||
        c->upload_digest.len != FA_SECAGG_DIGEST_BYTES || !c->region)
        return FA_ERR_VERIFY;
    return fa_secagg_commitment_verify(r->federation_id, r->round, r->attempt, c->region,
                                       fa_audit_upload_alg(c), c->upload_digest.data,
                                       c->signature.data, pk) == 0
               ? 0
               : FA_ERR_VERIFY;
}
