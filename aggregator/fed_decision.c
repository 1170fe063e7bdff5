/* fed_decision.c - a region's signed decision on the federation's offer
 * (docs/service.md, "Decisions"): checked against the region's identity
 * key, recorded in the audit log when it changes, restored from the log at
 * open.  A region that refused sits out of every attempt, as a drained
 * region does, until it accepts. */
#include "aggregator/federation_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.pb-c.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "model/tensors.h"

/* Longest reason kept (a policy rule's words, for the operators). */
#define MAX_REASON 255

int fa_fed_region_sits_out(const struct fa_fed_region *r)
{
    return r->drained || r->decision < 0;
}

static void apply(struct fa_fed_region *r, const Fedagg__RegionDecision *d)
{
    r->decision = d->accept ? 1 : -1;
    snprintf(r->decision_reason, sizeof(r->decision_reason), "%s", d->reason ? d->reason : "");
    r->decision_unix_ms = d->unix_ms;
}

/* Appends the decision as the region signed it (round and attempt those in
 * flight; the model unchanged, as an operator's action). */
static int append(fa_fed *f, const Fedagg__SignedDecision *sd, fa_error *err)
{
    Fedagg__AuditRecord rec = FEDAGG__AUDIT_RECORD__INIT;
    uint64_t now = fa_time_unix_ms();

    fa_fed_action_record_init(f, &rec, now);
    rec.decision = (Fedagg__SignedDecision *)sd;
    return fa_audit_log_append(f->audit, &rec, NULL, err);
}

int fa_fed_decision_submit(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                           int *changed, fa_error *err)
{
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    Fedagg__SignedDecision *sd = NULL;
    Fedagg__RegionDecision *d = NULL;
    int rc = 0;

    *changed = 0;
    if (!r)
        return fa_errorf(err, FA_ERR_AUTH, "region '%s' is not invited to federation %s", region,
                         f->federation_id);
    sd = fedagg__signed_decision__unpack(NULL, len, body);
    if (!sd || sd->signature.len != FA_IDENTITY_SIG_BYTES || sd->statement.len == 0) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "not a SignedDecision (a RegionDecision statement and its 64-byte "
                       "signature)");
        goto out;
    }
    d = fedagg__region_decision__unpack(NULL, sd->statement.len, sd->statement.data);
    if (!d) {
        rc = fa_errorf(err, FA_ERR_PARSE, "the statement is not a RegionDecision");
        goto out;
    }
    if (!d->region || strcmp(d->region, region) != 0 || !d->federation_id ||
        strcmp(d->federation_id, f->federation_id) != 0) {
        rc = fa_errorf(err, FA_ERR_AUTH,
                       "the decision is region %s's on federation %s; this is region %s on "
                       "federation %s",
                       d->region ? d->region : "?", d->federation_id ? d->federation_id : "?",
                       region, f->federation_id);
        goto out;
    }
    if (d->reason && strlen(d->reason) > MAX_REASON) {
        rc = fa_errorf(err, FA_ERR_INVAL, "the decision's reason is longer than %d bytes",
                       MAX_REASON);
        goto out;
    }
    if (fa_identity_verify_statement(r->pk, FA_IDENTITY_DOMAIN_DECISION, sd->statement.data,
                                     sd->statement.len, sd->signature.data) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "the decision's signature does not verify with region %s's identity key",
                       region);
        goto out;
    }
    /* The latest decision holds; the log records a change only, so that an
     * agent repeating its decision every poll adds nothing. */
    if (r->decision == (d->accept ? 1 : -1) &&
        !strcmp(r->decision_reason, d->reason ? d->reason : ""))
        goto out;
    rc = append(f, sd, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "the audit log could not record region %s's decision", region);
        goto out;
    }
    apply(r, d);
    *changed = 1;
    fa_log(FA_LOG_INFO, "region decision recorded", "region=%s decision=%s reason=\"%s\"", region,
           d->accept ? "accept" : "refuse", r->decision_reason);
out:
    if (d)
        fedagg__region_decision__free_unpacked(d, NULL);
    if (sd)
        fedagg__signed_decision__free_unpacked(sd, NULL);
    return rc;
}

void fa_fed_decision_replay(fa_fed *f, const Fedagg__AuditRecord *rec)
{
    Fedagg__RegionDecision *d;
    struct fa_fed_region *r;

    if (!rec->decision)
        return;
    d = fedagg__region_decision__unpack(NULL, rec->decision->statement.len,
                                        rec->decision->statement.data);
    if (!d)
        return; /* the log's rules admitted it; nothing of it can be used */
    r = d->region ? fa_fed_find_region(f, d->region) : NULL;
    if (r)
        apply(r, d);
    fedagg__region_decision__free_unpacked(d, NULL);
}
