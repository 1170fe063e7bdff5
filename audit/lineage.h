/* lineage.h - the model card of a version, from the signed audit log alone
 * (docs/governance.md).
 *
 * A card says where a model version comes from and why it was (or was not)
 * released: how it was made (the round and attempt, or a rollback and what
 * it restored) and from which parent; the regions whose updates are in it,
 * each with its upload commitment, its signed data statement (dataset name,
 * manifest digest, example count, trainer and its digest) and its privacy
 * statement; the config and tensor-table digests, the optimizer and
 * quantisation settings, the distributed-DP round; the evaluations of the
 * version (the regions' signed statements and their means, the evaluator's
 * result); the gate's decision with its rule and figures; the channels that
 * point at it and who moved them; and its ancestry back to the initial
 * model, with the regions of every ancestor.  Every part names the record
 * it comes from.
 *
 * The card is built by replaying the whole log (audit/audit_gov.h): when a
 * record does not follow from the ones before it, no card is made and the
 * error names the record.  The aggregator serves the card of its own log
 * (`fedagg model card`); an auditor recomputes it offline from a copy of
 * the log after `fedagg audit verify`'s checks (`fedagg audit lineage`),
 * and the two are the same document.
 */
#ifndef FA_AUDIT_LINEAGE_H
#define FA_AUDIT_LINEAGE_H

#include <stddef.h>
#include <stdint.h>

#include "audit/audit_log.h"

/* The card of `version` as a JSON object (malloc'ed, NUL-terminated, keys
 * in a fixed order).  keys (may be NULL) are the regions' identity keys:
 * each data statement says whether its signature verified or its region
 * had no key.  Returns 0, FA_ERR_NOTFOUND (the log made no such version),
 * FA_ERR_VERIFY (a record does not follow: the message names it),
 * FA_ERR_IO, FA_ERR_CORRUPT or FA_ERR_NOMEM. */
int fa_lineage_card_json(fa_audit_log *log, uint64_t version, const fa_audit_region_key *keys,
                         size_t nkeys, char **json, fa_error *err);

#endif
