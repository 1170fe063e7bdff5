/* fed_gov.h - governance of a federation's released models
 * (docs/governance.md): the quality gate, rollbacks, release channels, the
 * regions' data statements and model cards.  Everything here is one
 * fa_fed's: a service hosting many federations has one gate, one set of
 * channels and one lineage per federation, each in its own audit log.
 *
 * The gate.  With config `promotion { enabled: true ... }` every committed
 * version is a candidate until its evaluations decide it under the policy
 * (audit/promotion.h).  The decision is taken when the advertise phase of
 * the round trained from the candidate closes with enough statements in
 * (the regions evaluate a model before they train on it), else when that
 * round's unmask phase closes, with what came.  It is a signed audit
 * record carrying the statements it rests on.  Promoted: the gate moves
 * its channels (promotion.channels) to the candidate.  Rejected: the
 * candidate is never released; on_regression ROLLBACK abandons the round
 * in flight and commits the last promoted version again as the next
 * version, byte for byte and with its optimizer state (model_store.h
 * fa_model_store_restore), recorded with what it rolled back to and why;
 * PAUSE abandons the round and pauses the federation; KEEP goes on.
 *
 * What the log establishes (decisions, promoted versions, channels) is
 * replayed from the federation's own audit log (audit/audit_gov.h) at open
 * and kept up to date as records are appended, so a restart loses
 * nothing; a rollback interrupted between the store's commit and its
 * record is completed at open.  The store keeps the last promoted version,
 * every version a channel points at, and the rejected versions (for
 * forensics) beyond its window.
 *
 * These take an fa_fed and run on the server's loop thread, as the rest of
 * federation.h; the HTTP layers (api.c, api_admin.c, or a service's
 * per-federation routes) call them with the federation a path names.
 */
#ifndef FA_AGGREGATOR_FED_GOV_H
#define FA_AGGREGATOR_FED_GOV_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/federation.h"
#include "common/fa_err.h"

/* POST /v1/data-statements: a region's signed data statement
 * (fedagg.SignedDataStatement) of the attempt in flight, taken from the
 * advertise to the masked phase, as privacy statements are.  Returns 0 when
 * accepted (or an identical retry), else the FA_ERR_* code with reply
 * filled: 400 (malformed, bad signature or values), 403 (another region or
 * federation), 409 (another attempt or model, a different statement, the
 * phase is past).  See aggregator/data_ledger.h. */
int fa_fed_submit_data(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                       fa_fed_reply *reply);

/* GET /v1/models/channels/<name>: the version the channel points at, its
 * model file (path, n bytes) and SHA-256, and the proof bundle (text,
 * malloc'ed; crypto/checkpoint.h) of the signed record that put it there,
 * proven in the latest checkpoint.  Returns 0, FA_ERR_NOTFOUND (no such
 * channel, or its version is no longer kept: the message says which) or
 * FA_ERR_IO. */
int fa_fed_channel(fa_fed *f, const char *name, uint64_t *version, uint8_t sha256[32], char *path,
                   size_t n, char **proof, size_t *proof_len, fa_error *err);

/* An operator points `channel` at `version`: a version the log made and the
 * store still keeps, and, when the federation has a gate (or had one), a
 * promoted one.  Recorded with the operator's name.  Returns 0, FA_ERR_INVAL
 * (a bad channel name), FA_ERR_NOTFOUND (no such version kept),
 * FA_ERR_STATE (not promoted; the channel already points there) or
 * FA_ERR_IO (the log could not record it: nothing changed). */
int fa_fed_admin_release(fa_fed *f, const char *operator_name, uint64_t version,
                         const char *channel, uint64_t now_ms, fa_error *err);

/* An operator rolls the federation back to the last promoted version (as
 * the gate's ROLLBACK does, recorded with the operator's name): the attempt
 * in flight is abandoned.  Returns 0, FA_ERR_STATE (nothing promoted, or
 * the current model is the last promoted one already), FA_ERR_IO... */
int fa_fed_admin_rollback(fa_fed *f, const char *operator_name, uint64_t now_ms, fa_error *err);

/* The model card of `version` (a JSON object, malloc'ed, NUL-terminated),
 * built from the federation's audit log alone (audit/lineage.h): the
 * aggregator's view of what `fedagg audit lineage` recomputes.  Returns
 * 0, FA_ERR_NOTFOUND (the log made no such version), FA_ERR_VERIFY (the
 * log does not hold together: the message names the record), FA_ERR_IO or
 * FA_ERR_NOMEM. */
int fa_fed_model_card(fa_fed *f, uint64_t version, char **json, fa_error *err);

/* The governance document for operators and the dashboard (a JSON object,
 * malloc'ed): the policy (null when off), the promoted versions and their
 * figures, the decisions of the last versions, the channels, the counts.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_fed_governance_json(fa_fed *f, char **json, fa_error *err);

#endif
