/* round_client.h - a region's side of the federation over HTTP/3 (docs/architecture.md):
 * the federation's position, the global model, and one secure-aggregation
 * round attempt (the region leader, rank 0, runs it).
 *
 *   GET  /v1/federation                   where the federation is
 *   GET  /v1/models/latest                the global weights (safetensors), SHA-256 checked
 *   POST /v1/rounds/{r}/{a}/advertise     -> PeerList          (round 0)
 *   POST .../shares                       -> SharesForYou      (round 1)
 *   POST .../masked (streamed)            -> SurvivorList      (round 2)
 *   POST .../consistency                  -> SurvivorSignatures (round 3)
 *   POST .../unmask                       -> RoundResult       (round 4)
 *   GET  /v1/audit/proof?round&region     the round's audit record, proven
 *   GET  /v1/audit/record?version         the downloaded model's record, proven
 *   GET  /v1/audit/consistency?from&to    the log only grew since it was last seen
 *   POST /v1/evaluations                  a signed federated-evaluation report
 *
 * With WorkerConfig.service_routes every path is the service's route of
 * the federation instead: /v1/federations/<federation_id>/federation, ...
 * (docs/service.md).
 *
 * Every request is a retry-safe resubmission: after a broken connection or an
 * aggregator restart the same bytes are sent again (the masked stream is
 * regenerated identically).  A 409 means the federation moved on (another
 * round or attempt, or this region was left out of the attempt): the caller
 * resynchronises with fa_round_client_info.
 *
 * Crash safety: once the update is set for an attempt, the client's state
 * (sealed under the identity key) and the update are written to the state
 * directory before the first masked byte leaves, so a restarted worker
 * resumes that attempt with the same masks and the same input, never a
 * different input under the same masks.
 *
 * One model for every region (the model-inconsistency attack of Pasquini,
 * Francati, Ateniese, CCS 2022: an aggregator serves one region a crafted
 * model to isolate its update in the sum).  Two checks, both before any
 * masked byte leaves:
 *   - every downloaded model must be the new model of the latest record of
 *     the signed audit log, reached from the last checkpoint this region
 *     verified (state_dir/audit.checkpoint; the first one trusted on first
 *     use) through a consistency proof, so that the aggregator cannot show
 *     this region a forked or rolled-back log.  The checkpoints are signed by
 *     the pinned aggregator key (WorkerConfig.aggregator_public_key) or, when
 *     none is configured, by the key FederationInfo announced the first time,
 *     which is then pinned (state_dir/audit.key).  A check that fails raises
 *     an ALARM: logged (level=error), kept with its evidence in
 *     state_dir/audit-alarm.txt, and from then on this client refuses to
 *     download or take part (fa_round_client_alarmed): an operator must look;
 *   - the round binds the digest of the model this region trained from
 *     (crypto/secagg.h model_sha256) and refuses a PeerList in which a peer
 *     signed another one (an ALARM line; the attempt is refused, the region
 *     goes on with the next attempt, checked the same way).
 */
#ifndef FA_WORKER_ROUND_CLIENT_H
#define FA_WORKER_ROUND_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "crypto/checkpoint.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"
#include "model/tensors.h"

typedef struct fa_round_client fa_round_client;

/* Creates the client of region cfg->region_id: loads its identity key, the
 * federation's region keys, the pinned aggregator key (if any) and the TLS
 * files.  No traffic yet.  Returns 0, FA_ERR_INVAL, FA_ERR_IO, FA_ERR_TLS,
 * FA_ERR_NOMEM. */
int fa_round_client_new(fa_round_client **out, const Fedagg__WorkerConfig *cfg, fa_error *err);
void fa_round_client_del(fa_round_client *rc);

/* GET /v1/federation (retrying through network trouble until timeout_ms).
 * Free *info with fedagg__federation_info__free_unpacked(*info, NULL).
 * Returns 0, FA_ERR_TIMEOUT, FA_ERR_TLS (refused: not retried), FA_ERR_PROTOCOL. */
int fa_round_client_info(fa_round_client *rc, uint32_t timeout_ms, Fedagg__FederationInfo **info,
                         fa_error *err);

/* Downloads the current global model into path (atomically) within
 * timeout_ms (connecting included), checking its SHA-256 against the
 * fedagg-model-sha256 header, and then that the signed audit log records it
 * as the latest model (see above; a model that moved on meanwhile is
 * downloaded again).  Returns 0 with the version and digest, or an error:
 * FA_ERR_VERIFY with an ALARM (the client is then alarmed for good),
 * FA_ERR_AGAIN when the log does not record the version yet (try later),
 * FA_ERR_PROTOCOL, FA_ERR_TIMEOUT, or a transport error. */
int fa_round_client_fetch_model_within(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                                       uint64_t *version, uint8_t sha256[32], fa_error *err);

/* The model downloads of this client so far.  A region that holds the
 * previous version (the file at the fetch's path) asks for the new one as a
 * quantised delta against it (GET /v1/models/latest?delta_from=N,
 * docs/api.md), rebuilds it with fa_delta_reconstruct (model/delta.h) and
 * checks the result's SHA-256 against the full model's before the audit
 * log check; a delta that fails any check is logged and the full model
 * downloaded instead (a fallback).  Body bytes only. */
typedef struct fa_round_client_download_stats {
    uint64_t full, delta, fallbacks; /* downloads by kind; deltas refused */
    uint64_t bytes_full, bytes_delta;
    uint64_t last_bytes; /* the last download's */
    int last_delta;
} fa_round_client_dl_stats;
void fa_round_client_download_stats(const fa_round_client *rc, fa_round_client_dl_stats *out);

/* Checks that the table t of a downloaded model is the one the federation
 * announces in info: tensor_table_digest equal to fa_tensors_digest(t),
 * num_params its federated coordinates, num_tensors (when set) its
 * tensors.  A model that fails this is never trained on.  Returns 0,
 * FA_ERR_PROTOCOL ("the model's tensor table does not match the
 * federation's", with both sides' counts and digests) or FA_ERR_CRYPTO. */
int fa_round_client_check_table(const Fedagg__FederationInfo *info, const fa_tensors *t,
                                fa_error *err);

typedef struct fa_round_outcome {
    uint64_t round;
    uint32_t attempt;
    uint64_t new_version;
    uint8_t model_sha256[32];
    uint32_t survivors; /* regions in the sum */
    int proof_verified; /* the audit record was proven against a signed checkpoint */
    uint64_t leaf_index;
    uint64_t bytes_up, bytes_down;
    double phase_seconds[FA_SECAGG_N_PHASES]; /* by enum fa_secagg_phase */
    /* With FA_ERR_REPLAY: the aggregator refused the advertisement and
     * announces another model than the one this region trained from: the
     * caller downloads the model again (and trains anew) before the next
     * attempt. */
    int model_stale;
} fa_round_outcome;

/* Takes part in attempt (info->round, info->attempt) with the update
 * delta (d = info->num_params floats) weighted by weight in [0, 1], trained
 * from the model this client downloaded last when it is of
 * info->model_version (else the one info announces: a caller that got the
 * model another way).  When a saved state of this very attempt exists (a
 * restart), it is resumed and delta may be NULL (the saved update and
 * weight are used); a state saved by an older fedagg is dropped
 * (FA_ERR_REPLAY: the region joins the next attempt).
 * Returns 0 when the round completed (out filled), FA_ERR_REPLAY when the
 * federation moved on or this region was left out (resynchronise; see
 * out->model_stale), FA_ERR_VERIFY when a peer trained from another model
 * (an ALARM line; nothing of the update left) or the client is alarmed,
 * FA_ERR_PROTOCOL when the aggregator's answers do not check out, or a
 * transport error after the retries.  After the round, the round's record
 * is proven and the log's growth checked (an inconsistency raises the
 * alarm; the completed round stands). */
int fa_round_client_run(fa_round_client *rc, const Fedagg__FederationInfo *info, const float *delta,
                        size_t d, double weight, fa_round_outcome *out, fa_error *err);

/* A buffer for the region's update of d floats that saving an attempt does
 * not copy: a shared mapping of state_dir/update.f32, whose blocks are
 * reserved here (a store into a mapped file on a full disk would otherwise
 * be SIGBUS).  An update written there and given to fa_round_client_run is
 * saved by a header line and a second name for the file (attempt.delta, a
 * hard link), instead of 4 bytes a coordinate written again before every
 * masked upload; any other buffer is copied as before.  The buffer belongs
 * to rc (valid until the next call with another d, or fa_round_client_del;
 * the same d returns the same buffer) and is the caller's to fill.  Each
 * first call in a process starts a new file (its pages come in as zeros,
 * without reading the disk; a saved attempt's update lives on under its
 * second name).  Returns 0, FA_ERR_NOSPACE (no room for it: the caller
 * keeps an ordinary buffer), FA_ERR_IO. */
int fa_round_client_update_buffer(fa_round_client *rc, size_t d, float **out, fa_error *err);

/* POST /v1/privacy: the region's privacy statement of an attempt (its
 * federation_id and region are set here), signed with the identity key over
 * FA_IDENTITY_DOMAIN_PRIVACY (crypto/identity.h), sent before the attempt's
 * masked upload; network errors are retried for about 20 s.  Returns 0,
 * FA_ERR_PROTOCOL (400), FA_ERR_AUTH (403), FA_ERR_REPLAY (409: another
 * attempt, or past the masked phase), FA_ERR_HTTP or a transport error. */
int fa_round_client_post_privacy(fa_round_client *rc, Fedagg__PrivacyStatement *st,
                                 fa_error *err);

/* POSTs a statement (the packed protobuf bytes; its federation and region
 * are the caller's, see below) signed with the region's identity key under
 * `domain` (crypto/identity.h), as {statement, signature}, to path (a
 * "/v1/<rest>" path is the federation's route: under its prefix with
 * WorkerConfig.service_routes); `what` names it in messages.  Retried as fa_round_client_post_privacy; returns
 * its codes.  The data statements (worker/data_statement.h) go this way. */
int fa_round_client_post_signed(fa_round_client *rc, const char *path, const char *domain,
                                const uint8_t *statement, size_t len, const char *what,
                                fa_error *err);

/* The federation and the region this client speaks for. */
const char *fa_round_client_federation(const fa_round_client *rc);
const char *fa_round_client_region(const fa_round_client *rc);

/* Whether a saved, resumable state exists for round/attempt. */
int fa_round_client_has_saved(fa_round_client *rc, uint64_t round, uint32_t attempt);

/* Federated evaluation: POSTs this region's signed report (worker/
 * eval_report.h: an EvalStatement of the federation, the region, version,
 * the model file's SHA-256, n >= 1, the mean loss and accuracy (NaN when
 * not measured), n_metrics named means and the time, signed with the
 * identity key under FA_IDENTITY_DOMAIN_EVAL) to /v1/evaluations, once:
 * network failures and 5xx are retried a few times (about 20 s at most),
 * a 4xx is not.  Returns 0 when the aggregator took it (200), or
 *   FA_ERR_INVAL     the report itself is malformed (as fa_eval_report_sign)
 *   FA_ERR_PROTOCOL  400: malformed or a bad signature (the message is the
 *                    aggregator's)
 *   FA_ERR_AUTH      403: the aggregator refuses this region
 *   FA_ERR_REPLAY    409: the version is no longer current
 *   FA_ERR_HTTP      another status, or the retries ran out (the transport
 *                    error's own code when it was one)
 * A report that is not taken is for the caller to log and drop: it never
 * stops the worker. */
int fa_round_client_post_eval(fa_round_client *rc, uint64_t version, const uint8_t model_sha256[32],
                              uint64_t num_examples, double loss, double accuracy,
                              const char *const *metric_names, const double *metric_values,
                              size_t n_metrics, fa_error *err);

/* Removes every saved attempt state (for a worker that gives an attempt up). */
void fa_round_client_forget(fa_round_client *rc);

/* 1 when this client raised an audit-log ALARM (see above), with its
 * message in *why (may be NULL; valid while rc lives): the region must stop
 * contributing.  0 otherwise. */
int fa_round_client_alarmed(const fa_round_client *rc, const char **why);

/* ---------------------------------------------------------------------------
 * The checks behind it, without I/O (for tests): what the aggregator
 * answered, as received.
 * ------------------------------------------------------------------------- */

typedef struct fa_audit_answers {
    /* GET /v1/audit/record?version=V: a proof bundle; NULL for 404 */
    const char *record;
    size_t record_len;
    /* GET /v1/audit/checkpoint, asked when there is no record; NULL for 404 */
    const char *checkpoint;
    size_t checkpoint_len;
    /* GET /v1/audit/consistency?from=T&to=N from the trusted checkpoint's
     * size T to that of the checkpoint above, when 0 < T < N; else NULL */
    const char *consistency;
    size_t consistency_len;
} fa_audit_answers;

/* Whether a signed checkpoint `note` extends `trusted` (NULL or size 0: the
 * first one, trusted on first use): signed by key (the signature line's key
 * name must be the origin when key has no name), the same origin, no fewer
 * records, the same root at the same size, and `consistency` (text of GET
 * /v1/audit/consistency, needed when 0 < T < N) proving the old tree a
 * prefix of the new.  *next receives the new checkpoint.  Returns 0,
 * FA_ERR_VERIFY (an alarm: a bad signature, another log, a log that shrank
 * or forked; err says which) or FA_ERR_PROTOCOL (a malformed or missing
 * proof). */
int fa_round_client_check_log(const fa_note_verifier *key, const fa_checkpoint *trusted,
                              const char *note, size_t note_len, const char *consistency,
                              size_t consistency_len, fa_checkpoint *next, fa_error *err);

/* Whether the model of `version` with digest model_sha256, downloaded, is
 * the latest model of the signed log: the log checks out as
 * fa_round_client_check_log says (with the record bundle's checkpoint, or
 * a->checkpoint when there is no record), the record is in it and is of
 * that version and digest, and it is the last record.  Version 0 with no
 * record is the genesis: the log's checkpoint must sign the empty tree.
 * *next receives the checkpoint to trust from now on.  Returns 0, or
 *   FA_ERR_VERIFY    an alarm: the log does not check out, the record is not
 *                    in it, the log records another model for this version
 *                    (this region was served a model the log does not
 *                    hold), or the model is older than a record this region
 *                    verified before (rolled back)
 *   FA_ERR_REPLAY    a later record exists (a round completed since the
 *                    download): download again
 *   FA_ERR_AGAIN     no record of this version yet, or no checkpoint
 *   FA_ERR_PROTOCOL  a malformed answer, or the record of another version */
int fa_round_client_check_model(const fa_note_verifier *key, const fa_checkpoint *trusted,
                                const fa_audit_answers *a, uint64_t version,
                                const uint8_t model_sha256[32], fa_checkpoint *next, fa_error *err);

#endif
