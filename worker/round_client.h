/* round_client.h - a region's side of the federation over HTTP/3 (DESIGN 4):
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
 *   POST /v1/evaluations                  a signed federated-evaluation report
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
 */
#ifndef FA_WORKER_ROUND_CLIENT_H
#define FA_WORKER_ROUND_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
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

/* Downloads the current global model into path (atomically), checking its
 * SHA-256 against the fedagg-model-sha256 header.  Returns 0 with the version
 * and digest, or an error. */
int fa_round_client_fetch_model(fa_round_client *rc, const char *path, uint64_t *version,
                                uint8_t sha256[32], fa_error *err);

/* The same within timeout_ms (connecting included), for a caller that must
 * not wait long: the final model of a federation whose aggregator is
 * draining.  Returns the errors above, FA_ERR_TIMEOUT among them. */
int fa_round_client_fetch_model_within(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                                       uint64_t *version, uint8_t sha256[32], fa_error *err);

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
    double phase_seconds[5]; /* advertise, shares, masked, consistency, unmask */
} fa_round_outcome;

/* Takes part in attempt (info->round, info->attempt) with the update
 * delta (d = info->num_params floats) weighted by weight in [0, 1].  When a
 * saved state of this very attempt exists (a restart), it is resumed and
 * delta may be NULL (the saved update and weight are used).
 * Returns 0 when the round completed (out filled), FA_ERR_REPLAY when the
 * federation moved on or this region was left out (resynchronise),
 * FA_ERR_PROTOCOL when the aggregator's answers do not check out, or a
 * transport error after the retries. */
int fa_round_client_run(fa_round_client *rc, const Fedagg__FederationInfo *info, const float *delta,
                        size_t d, double weight, fa_round_outcome *out, fa_error *err);

/* POST /v1/privacy: the region's privacy statement of an attempt (its
 * federation_id and region are set here), signed with the identity key over
 * FA_IDENTITY_DOMAIN_PRIVACY (crypto/identity.h), sent before the attempt's
 * masked upload; network errors are retried for about 20 s.  Returns 0,
 * FA_ERR_PROTOCOL (400), FA_ERR_AUTH (403), FA_ERR_REPLAY (409: another
 * attempt, or past the masked phase), FA_ERR_HTTP or a transport error. */
int fa_round_client_post_privacy(fa_round_client *rc, Fedagg__PrivacyStatement *st,
                                 fa_error *err);

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

#endif
