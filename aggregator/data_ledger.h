/* data_ledger.h - the regions' signed data statements of a round attempt
 * (fedagg.proto DataStatement, SignedDataStatement; docs/governance.md):
 * what each region trained its update on, by name and digest: the dataset
 * and its manifest's SHA-256, the example count, the trainer and its
 * digest, and the model it trained from.  Never the data.
 *
 * A region sends one statement per attempt before its masked upload,
 * signed with its identity key over FA_IDENTITY_DOMAIN_DATA.  The
 * aggregator keeps the statements of the attempt as sent; the audit record
 * of the completed attempt carries those of its participants, where
 * `fedagg audit verify` checks each signature and that it is of the
 * record's round, attempt and model (audit/audit_gov.h), and model cards
 * show them (audit/lineage.h).
 *
 * Sans-I/O, not thread-safe.
 */
#ifndef FA_AGGREGATOR_DATA_LEDGER_H
#define FA_AGGREGATOR_DATA_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/eval_reports.h"
#include "common/fa_err.h"
#include "fedagg.pb-c.h"

typedef struct fa_data_ledger fa_data_ledger;

/* Copies the federation id and the members.  Returns 0 or FA_ERR_NOMEM. */
int fa_data_ledger_new(fa_data_ledger **out, const char *federation_id,
                       const fa_eval_reports_member *members, size_t n, fa_error *err);
void fa_data_ledger_del(fa_data_ledger *l);

/* Statements are for round/attempt, trained from model version (its model
 * file's SHA-256), from now on; the others are dropped. */
void fa_data_ledger_begin(fa_data_ledger *l, uint64_t round, uint32_t attempt, uint64_t version,
                          const uint8_t sha256[32]);

/* A packed SignedDataStatement from `region` (authenticated by mTLS).
 * Accepted: 0 (also an identical retry).  Refused, nothing changed:
 * FA_ERR_PARSE (does not decode), FA_ERR_AUTH (not a member; names another
 * region or federation), FA_ERR_VERIFY (signature), FA_ERR_REPLAY (another
 * round, attempt or model), FA_ERR_EXISTS (a different statement for this
 * attempt), FA_ERR_INVAL (no dataset or trainer name, a name over 63 bytes
 * or with a control character, a digest not of 32 bytes, no examples or
 * more than FA_EVAL_MAX_EXAMPLES). */
int fa_data_ledger_submit(fa_data_ledger *l, const char *region, const uint8_t *body, size_t len,
                          fa_error *err);

/* 1 when `region` already sent exactly these bytes for the current attempt. */
int fa_data_ledger_has(const fa_data_ledger *l, const char *region, const uint8_t *body,
                       size_t len);

/* A saved statement (round state): submitted again in its region's name. */
int fa_data_ledger_restore(fa_data_ledger *l, const Fedagg__SignedDataStatement *sd, fa_error *err);

/* Statements of the current attempt in the order received, *region its
 * sender (may be NULL).  Pointers into l, valid until it changes. */
size_t fa_data_ledger_count(const fa_data_ledger *l);
void fa_data_ledger_at(const fa_data_ledger *l, size_t i, Fedagg__SignedDataStatement *out,
                       const char **region);

#endif
