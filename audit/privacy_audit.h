/* privacy_audit.h - the privacy ledger read back from the audit log: each
 * region's signed privacy statements (fedagg.proto PrivacyStatement), record
 * after record, checked and added up.  One copy of these rules, used by
 * `fedagg audit verify` (through fa_audit_verify) and `fedagg audit privacy`.
 *
 * For every statement in a record: it decodes; it names the record's
 * federation, round and attempt and one of its participants; its signature
 * verifies with the region's identity key (when given; otherwise it is
 * counted as unverified); and the region's accounting adds up: its
 * epsilon_total never falls from one statement to the next, and never
 * exceeds the budget the region declared (nor delta its budget_delta).
 * A region whose declared budget changes gets a note.
 */
#ifndef FA_AGGREGATOR_PRIVACY_AUDIT_H
#define FA_AGGREGATOR_PRIVACY_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "audit/audit_log.h"
#include "audit.pb-c.h"
#include "common/fa_err.h"

typedef struct fa_privacy_audit fa_privacy_audit;

/* Findings go to report (FA_AUDIT_PROBLEM or FA_AUDIT_NOTE, the record's
 * index, a message); keys (may be NULL) are the regions' identity keys.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_privacy_audit_new(fa_privacy_audit **out, const fa_audit_region_key *keys, size_t nkeys,
                         void (*report)(void *ctx, int severity, int64_t index, const char *msg),
                         void *report_ctx, fa_error *err);
void fa_privacy_audit_del(fa_privacy_audit *pa);

/* The statements of record `index`.  Returns the number of problems found
 * in it (0 when all is well). */
uint64_t fa_privacy_audit_record(fa_privacy_audit *pa, int64_t index,
                                 const Fedagg__AuditRecord *r);

/* A region's totals over the records seen so far. */
typedef struct fa_privacy_total {
    const char *region;
    uint64_t statements;   /* statements seen */
    uint64_t verified;     /* of which with a verified signature */
    uint64_t first_round, last_round;
    double epsilon, delta; /* epsilon_total of its latest statement, at delta */
    double budget_epsilon, budget_delta;
    char mechanism[64];
    char accountant[64];
} fa_privacy_total;

size_t fa_privacy_audit_count(const fa_privacy_audit *pa);
/* Region i (in order of first appearance); NULL past the end. */
const fa_privacy_total *fa_privacy_audit_at(const fa_privacy_audit *pa, size_t i);
uint64_t fa_privacy_audit_problems(const fa_privacy_audit *pa);

#endif
