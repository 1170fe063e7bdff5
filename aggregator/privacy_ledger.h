/* privacy_ledger.h - the regions' signed privacy statements of a round
 * attempt (fedagg.proto PrivacyStatement, SignedPrivacy): what each region
 * spent of the differential-privacy budget it enforces itself.
 *
 * A region under differential privacy sends one statement per attempt
 * before its masked upload, signed with its identity key over
 * FA_IDENTITY_DOMAIN_PRIVACY.  The aggregator keeps the statements of the
 * attempt as sent; the audit record of the completed attempt carries those
 * of its participants, where `fedagg audit privacy` adds them up per region
 * and `fedagg audit verify` checks the signatures and that every region's
 * accounting adds up and stays within the budget it declared.  The
 * aggregator only records: it cannot spend, reset or raise a region's
 * budget (the region's accountant is its own).
 *
 * Sans-I/O, not thread-safe.
 */
#ifndef FA_AGGREGATOR_PRIVACY_LEDGER_H
#define FA_AGGREGATOR_PRIVACY_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/eval_reports.h"
#include "common/fa_err.h"
#include "fedagg.pb-c.h"

typedef struct fa_privacy_ledger fa_privacy_ledger;

/* Copies the federation id and members (region id and identity key).
 * Returns 0 or FA_ERR_NOMEM. */
int fa_privacy_ledger_new(fa_privacy_ledger **out, const char *federation_id,
                          const fa_eval_reports_member *members, size_t n, fa_error *err);
void fa_privacy_ledger_del(fa_privacy_ledger *l);

/* Statements are for round/attempt from now on; the others are dropped
 * (the last accepted totals per region are kept for status). */
void fa_privacy_ledger_begin(fa_privacy_ledger *l, uint64_t round, uint32_t attempt);

/* A packed SignedPrivacy from `region` (authenticated by mTLS).  Accepted:
 * 0 (also an identical retry).  Refused, nothing changed: FA_ERR_PARSE,
 * FA_ERR_AUTH (not a member; names another region or federation),
 * FA_ERR_VERIFY (signature), FA_ERR_REPLAY (another round or attempt),
 * FA_ERR_EXISTS (a different statement for this attempt), FA_ERR_INVAL (a
 * value not finite or negative, delta not in (0, 1), epsilon_total below
 * epsilon_round, no mechanism). */
int fa_privacy_ledger_submit(fa_privacy_ledger *l, const char *region, const uint8_t *body,
                             size_t len, fa_error *err);

/* 1 when `region` already sent exactly these bytes for the current
 * attempt (a retry), else 0. */
int fa_privacy_ledger_has(const fa_privacy_ledger *l, const char *region, const uint8_t *body,
                          size_t len);

/* A saved statement (round state): submitted again in its region's name. */
int fa_privacy_ledger_restore(fa_privacy_ledger *l, const Fedagg__SignedPrivacy *sp, fa_error *err);

/* Statements of the current attempt, in the order received; *region names
 * its sender.  Pointers into l, valid until it changes. */
size_t fa_privacy_ledger_count(const fa_privacy_ledger *l);
void fa_privacy_ledger_at(const fa_privacy_ledger *l, size_t i, Fedagg__SignedPrivacy *out,
                          const char **region);

/* The latest accepted totals of a region, for status: 1 when it ever sent
 * one (epsilon_total, delta, budget filled), else 0. */
int fa_privacy_ledger_region(const fa_privacy_ledger *l, const char *region, double *epsilon,
                             double *delta, double *budget_epsilon);

#endif
