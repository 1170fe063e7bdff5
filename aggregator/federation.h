/* federation.h - the aggregator's round orchestration (docs/architecture.md,
 * docs/secure-aggregation.md).
 *
 * fa_fed owns everything durable of the aggregator: the model store (global
 * versions and optimizer state), the audit log, and the round in flight,
 * driving one secure-aggregation server (crypto/secagg.h) per round attempt:
 *
 *   ADVERTISE -> SHARES -> MASKED -> CONSISTENCY -> UNMASK -> (next round)
 *
 * It knows nothing of sockets: the HTTP/3 layer (aggregator/api.c) hands it
 * request bodies with the region that mTLS authenticated and a timestamp,
 * calls fa_fed_tick() periodically to close phases whose deadline passed or
 * whose regions all answered, and answers long-polls with fa_fed_poll().
 * Everything here runs on one thread (the server loop).
 *
 * Time.  Every deadline, age and back-off is computed from the now_ms the
 * caller passes (a monotonic clock in milliseconds; tests pass their own).
 * The wall clock is read only to stamp what is written down (an audit
 * record's time, an attempt's start, a deadline shown to operators), and
 * the monotonic clock only to measure how long a commit took and move
 * now_ms on by that much.
 *
 * Round policy.  A phase closes when every region that may still answer has
 * answered, or at its deadline.  Below the secure-aggregation threshold t (or,
 * when advertising, below min_regions) the attempt is aborted and a new
 * attempt of the same round opens with fresh keys; the regions learn it from
 * a 409 carrying the current round and attempt.  Regions that miss a phase
 * are that attempt's dropouts and rejoin with the next one.
 *
 * Completing a round: decode the unmasked sum to the weighted mean delta,
 * apply the server optimizer to a copy of the weights, commit the new
 * version to the model store (MANIFEST rename = commit point), then append
 * the signed audit record.  A restart between the two appends the missing
 * record from the saved round state, so versions and records never diverge.
 *
 * Crash recovery.  At every phase close the round state (secure-aggregation
 * server included) is written atomically to <storage>/round.state before any
 * region hears of the close; a restarted aggregator restores it and resumes
 * that phase with fresh deadlines.  Masked uploads in flight at the crash
 * are lost and re-sent by their regions byte for byte (their masks and
 * inputs are fixed for the attempt), so no mask is ever reused with a
 * different input.
 */
#ifndef FA_FEDERATION_H
#define FA_FEDERATION_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "crypto/secagg.h"

typedef struct fa_fed fa_fed;
struct fa_metrics;

/* What a region's request is for: the long-poll kinds, one per phase of
 * secure aggregation (crypto/secagg.h enum fa_secagg_phase, whose names,
 * fa_secagg_phase_names, they share). */
enum fa_fed_kind {
    FA_FED_ADVERTISE = FA_SECAGG_ADVERTISE,     /* POST advertise  -> PeerList */
    FA_FED_SHARES = FA_SECAGG_SHARES,           /* POST shares     -> SharesForYou */
    FA_FED_MASKED = FA_SECAGG_MASKED,           /* POST masked     -> SurvivorList */
    FA_FED_CONSISTENCY = FA_SECAGG_CONSISTENCY, /* POST consistency -> SurvivorSignatures */
    FA_FED_UNMASK = FA_SECAGG_UNMASK,           /* POST unmask     -> RoundResult */
};

/* An answer for the HTTP layer, which alone decides HTTP statuses
 * (aggregator/api.c fa_api_http_status).  code 0: answered, body the
 * protobuf answer (malloc'ed; free with fa_fed_reply_free).  Otherwise a
 * refusal: its FA_ERR_* code, a message for the region and the logs, and the
 * round and attempt it was refused at (the fedagg.Error api.c sends);
 * internal is set when the refusal is this aggregator's failure rather than
 * the request's (api.c answers 500). */
typedef struct fa_fed_reply {
    int code;
    int internal;
    uint8_t *body;
    size_t len;
    uint64_t round;
    uint32_t attempt;
    char msg[512];
} fa_fed_reply;

void fa_fed_reply_free(fa_fed_reply *r);

/* Opens the federation described by cfg (validated, paths resolved: see
 * proto/config_check.h): the model store (creating version 0 from the model
 * spec or init_file on the first start), the optimizer state, the audit log
 * (signing key from cfg->audit), the evaluation set, and the saved round
 * state.  metrics may be NULL.  Returns 0 or FA_ERR_* with a message: the
 * aggregator does not start on a damaged store, log or round state. */
int fa_fed_open(fa_fed **out, const Fedagg__AggregatorConfig *cfg, struct fa_metrics *metrics,
                uint64_t now_ms, fa_error *err);

/* What fa_fed_open_ex adds, for one federation among others in a process
 * (aggregator/service.h). */
typedef struct fa_fed_open_opts {
    struct fa_metrics *metrics; /* may be NULL */
    /* Label every series of this federation federation="<id>". */
    int metrics_label;
    /* The memory budget's share the process's other federations hold
     * (fa_fed_memory_need of each that can run a round), and how many they
     * are: this federation's round must fit beside them. */
    uint64_t memory_used;
    size_t memory_others;
    /* The process's budget of request bodies held while received
     * (quic.max_buffered_request_bytes), counted once beside every
     * federation's round; used when cfg has no quic block (a federation
     * created at run time: the transport is the service's). */
    uint64_t memory_requests;
} fa_fed_open_opts;

/* fa_fed_open with options (o may be NULL: fa_fed_open's).  A federation
 * that does not fit beside the others fails with FA_ERR_NOSPACE, every
 * part's size and what the others hold in the message. */
int fa_fed_open_ex(fa_fed **out, const Fedagg__AggregatorConfig *cfg, const fa_fed_open_opts *o,
                   uint64_t now_ms, fa_error *err);
void fa_fed_close(fa_fed *f);

/* The memory a round of f holds at its peak, bytes (memory_budget.h), as
 * checked when it opened. */
uint64_t fa_fed_memory_need(const fa_fed *f);

/* The aggregator's checkpoint-signing key from a private file (`fedagg
 * keygen` output, or a raw or Go note key) as a signer under origin.
 * Returns 0, FA_ERR_AUTH (the file is group- or world-readable), FA_ERR_IO,
 * FA_ERR_PARSE, FA_ERR_NOMEM. */
struct fa_note_signer;
int fa_fed_signer_load(const char *path, const char *origin, struct fa_note_signer **out,
                       fa_error *err);

/* The federation's id. */
const char *fa_fed_id(const fa_fed *f);

/* 1 while an operator has paused f (fa_fed_admin_pause). */
int fa_fed_paused(const fa_fed *f);

/* Closes phases that are due; completes a round when the unmask phase
 * closes.  Returns 1 when anything changed (long-polls may be answerable),
 * else 0. */
int fa_fed_tick(fa_fed *f, uint64_t now_ms);

/* Milliseconds until the next deadline (for the loop's timer). */
uint64_t fa_fed_next_deadline_in(const fa_fed *f, uint64_t now_ms);

/* A protocol message of `kind` from `region` (authenticated by mTLS) for
 * round/attempt.  Accepted messages return 0 and the caller waits for the
 * phase to close (fa_fed_poll); a message identical to one already accepted
 * (a retry after a broken connection) is accepted again.  Otherwise returns
 * the FA_ERR_* code and fills reply with the refusal, which api.c answers
 * as 403 for an unknown region or a message naming another (FA_ERR_AUTH),
 * 409 for another round, attempt or phase, with the current ones
 * (FA_ERR_REPLAY, FA_ERR_STATE, FA_ERR_EXISTS), 400 for a malformed
 * message, a bad signature or wrong sizes.  State is unchanged on refusal. */
int fa_fed_submit(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                  const uint8_t *body, size_t len, uint64_t now_ms, fa_fed_reply *reply);

/* Answers a long-poll of `region` for `kind` in round/attempt: returns 1
 * with reply filled when the answer is known (the phase's message for this
 * region, or a refusal such as FA_ERR_STATE, 409, when the attempt was
 * aborted or the region dropped out), 0 while the phase is still open. */
int fa_fed_poll(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                fa_fed_reply *reply);

/* The streamed masked upload of `region` (round 2).  begin checks the round,
 * attempt and length (content_length must equal the masked size: 413 beyond
 * it, 400 otherwise), then the phase (409), and returns 503 (FA_ERR_AGAIN)
 * when the in-flight limit is reached.  On success *upload names the stream
 * for the calls that follow.  A region whose upload already completed gets
 * *discard = 1: the caller reads and drops the body (a retry) and polls.  A
 * region that begins again while its previous stream is still open (stuck
 * on a dead connection) replaces it: the old partial upload is removed.
 * chunk/end/abort act only while `upload` is the region's current stream in
 * the masked phase (409 otherwise: the phase closed at its deadline, which
 * removed the partial upload, or a newer stream replaced it); abort removes
 * a partial upload exactly. */
int fa_fed_masked_begin(fa_fed *f, const char *region, uint64_t round, uint32_t attempt,
                        int64_t content_length, uint64_t now_ms, uint64_t *upload, int *discard,
                        fa_fed_reply *reply);
int fa_fed_masked_chunk(fa_fed *f, const char *region, uint64_t upload, const uint8_t *data,
                        size_t len, uint64_t now_ms, fa_fed_reply *reply);
int fa_fed_masked_end(fa_fed *f, const char *region, uint64_t upload, uint64_t now_ms,
                      fa_fed_reply *reply);
void fa_fed_masked_abort(fa_fed *f, const char *region, uint64_t upload, uint64_t now_ms);

/* GET /v1/federation and GET /v1/status bodies (packed protobuf, malloc'ed). */
int fa_fed_info(fa_fed *f, uint64_t now_ms, uint8_t **out, size_t *len, fa_error *err);
int fa_fed_status(fa_fed *f, uint64_t now_ms, uint8_t **out, size_t *len, fa_error *err);
/* The status as one JSON object (malloc'ed, NUL-terminated). */
int fa_fed_status_json(fa_fed *f, uint64_t now_ms, char **out, fa_error *err);

/* The model file of `version` (UINT64_MAX = the current one): its path, the
 * version and its SHA-256; with f32, the file of its float32 master weights
 * (the model file itself when every federated tensor is F32).  Returns 0 or
 * FA_ERR_NOTFOUND (not retained). */
int fa_fed_model(fa_fed *f, uint64_t version, int f32, char *path, size_t n, uint64_t *out_version,
                 uint8_t sha256[32]);

/* The same for a download by `region` (GET /v1/models/...): the file the
 * region gets.  It is fa_fed_model's, except under the test switch
 * fed-serve-other-model (federation.c), which serves one region another
 * model to test the regions' defence against the model-inconsistency
 * attack.  Returns 0 or FA_ERR_NOTFOUND (or the switch's error). */
int fa_fed_model_for(fa_fed *f, const char *region, uint64_t version, int f32, char *path, size_t n,
                     uint64_t *out_version, uint8_t sha256[32]);

/* The delta file of version `want` (UINT64_MAX: the current one; only the
 * current one has one to serve) against version `from`, for a
 * download by `region` (GET /v1/models/latest?delta_from=N): its path, the
 * version, the SHA-256 of the full model file it rebuilds and of the delta
 * file itself.  Returns 0, or FA_ERR_NOTFOUND when there is no such delta
 * (from is not the previous version, deltas are off, the version has none,
 * or the test switch fed-serve-other-model serves this region a full
 * model): the caller then serves the full model. */
int fa_fed_model_delta_for(fa_fed *f, const char *region, uint64_t want, uint64_t from, char *path,
                           size_t n, uint64_t *out_version, uint8_t model_sha256[32],
                           uint8_t delta_sha256[32]);

/* POST /v1/federations/{id}/decision: a region's signed decision on this
 * federation's offer (fedagg.SignedDecision over FA_IDENTITY_DOMAIN_DECISION,
 * docs/service.md).  Returns 0 when accepted (*changed = 1 when it differs
 * from the region's last one and was recorded in the audit log), else the
 * FA_ERR_* code with reply filled: 400 (malformed, bad signature, a reason
 * too long), 403 (another region or federation), 500 (the log could not
 * record it: nothing changed).  A region that refused is not expected in
 * any attempt (as a drained one), and its advertisement is refused (409)
 * until it accepts. */
int fa_fed_submit_decision(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                           int *changed, fa_fed_reply *reply);

/* A region's latest decision: *decision 0 (none), 1 (accepted) or -1
 * (refused), *reason its words (may be NULL).  Returns 0 or FA_ERR_NOTFOUND
 * (not a region of f). */
int fa_fed_region_decision(const fa_fed *f, const char *region, int *decision, const char **reason);

/* POST /v1/evaluations: a region's signed federated-evaluation report
 * (fedagg.SignedEval) of the current model version.  Returns 0 when
 * accepted (or an identical retry), else the FA_ERR_* code with reply
 * filled: 400 (malformed, bad signature or values), 403 (another region or
 * federation), 409 (another version, or a different report of this one).
 * See aggregator/eval_reports.h. */
int fa_fed_submit_eval(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                       fa_fed_reply *reply);

/* The latest signed audit checkpoint (malloc'ed text), and the proof bundle
 * of `region`'s record for `round` (malloc'ed text).  Return 0,
 * FA_ERR_NOTFOUND or FA_ERR_IO. */
int fa_fed_audit_checkpoint(fa_fed *f, char **out, size_t *len, fa_error *err);
int fa_fed_audit_proof(fa_fed *f, uint64_t round, const char *region, char **out, size_t *len,
                       fa_error *err);

/* What a region checks the model it downloaded against: the proof bundle
 * (crypto/checkpoint.h) of the last signed record whose new model is
 * `version`, proven in the latest checkpoint; and the consistency proof
 * between the trees of old_size and size records (UINT64_MAX: the latest
 * checkpoint's), as audit_log.h fa_audit_log_prove_consistency writes it.
 * Return 0, FA_ERR_NOTFOUND (no record of that version), FA_ERR_RANGE
 * (sizes beyond the latest checkpoint) or FA_ERR_IO. */
int fa_fed_audit_record(fa_fed *f, uint64_t version, char **out, size_t *len, fa_error *err);
int fa_fed_audit_consistency(fa_fed *f, uint64_t old_size, uint64_t size, char **out, size_t *len,
                             fa_error *err);

/* Whether `region` is a member of the federation. */
int fa_fed_is_member(const fa_fed *f, const char *region);

/* Counts bytes received from a region (metrics and status). */
void fa_fed_count_bytes(fa_fed *f, const char *region, uint64_t n);

/* Marks a region connected or not (metrics and status). */
void fa_fed_region_seen(fa_fed *f, const char *region, uint64_t now_ms);

/* 1 when a round was committed to the model store but its audit record could
 * not be appended (disk full...): the aggregator must stop and be restarted,
 * which appends the record from the saved round state. */
int fa_fed_fatal(const fa_fed *f);

/* POST /v1/privacy: a region's signed privacy statement
 * (fedagg.SignedPrivacy) of the attempt in flight, taken from the
 * advertise to the masked phase.  Returns 0 when accepted (or an identical
 * retry), else the FA_ERR_* code with reply filled: 400, 403, 409 (another
 * attempt, a different statement, or the phase is past).  The record of the
 * attempt carries the statements of its participants (privacy_ledger.h). */
int fa_fed_submit_privacy(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                          fa_fed_reply *reply);

/* 1 when the aggregator can do its work; 0 with why (n bytes) when not:
 * the storage cannot take a round (disk full, I/O errors: no attempt opens
 * until a check after a back-off succeeds), or a committed round could not
 * be recorded.  For /readyz. */
int fa_fed_ready(const fa_fed *f, uint64_t now_ms, char *why, size_t n);

/* ------------------------------------------------------------------------ */
/* Operators (the admin API, fedagg status/watch, the dashboard)             */
/* ------------------------------------------------------------------------ */

/* Operator actions.  Each is recorded in the signed audit log as an admin
 * record naming the operator and the action, logged, and returns 0, or an
 * FA_ERR_* code with a message for the operator (FA_ERR_STATE: nothing to
 * do, e.g. pausing a paused federation; FA_ERR_NOTFOUND: no such region;
 * FA_ERR_IO: the audit log could not record it, so it was not done).
 *   pause   no new round opens after the current one completes (or aborts);
 *   resume  rounds open again;
 *   abort   the current attempt is aborted (its regions are dropouts) and a
 *           new attempt opens (unless paused);
 *   drain   the region sits out from the next attempt on (its messages get
 *           409 with the reason) until admitted again; admit undoes it. */
int fa_fed_admin_pause(fa_fed *f, const char *operator_name, uint64_t now_ms, fa_error *err);
int fa_fed_admin_resume(fa_fed *f, const char *operator_name, uint64_t now_ms, fa_error *err);
int fa_fed_admin_abort(fa_fed *f, const char *operator_name, uint64_t now_ms, fa_error *err);
int fa_fed_admin_drain(fa_fed *f, const char *operator_name, const char *region, int drain,
                       uint64_t now_ms, fa_error *err);

/* A JSON document (malloc'ed, NUL-terminated) for operators:
 *   "status"      the federation: id, round, attempt, phase and its deadline
 *                 (unix ms), paused, model version, tensors and federated
 *                 parameters, federated and central evaluation, storage,
 *                 rounds completed/aborted, audit tree size, and "regions",
 *                 "rounds", "versions" as below and "audit" as "audit-head"
 *                 (the dashboard's whole input);
 *   "regions"     {"regions": [{id, connected, last_seen_ms_ago (null when
 *                 never seen), drained, drained_by?, rounds_participated,
 *                 dropouts, bytes_received, privacy?}]};
 *   "rounds"      {"rounds": [{round, attempt, outcome ("completed" |
 *                 "aborted"), reason?, start_unix_ms, end_unix_ms, seconds?
 *                 (on the monotonic clock; absent when unknown),
 *                 phases: {advertise, shares, masked, consistency, unmask:
 *                 seconds, for the phases reached}, participants: [...],
 *                 dropped: [...], version?}], the last FA_FED_HISTORY
 *                 attempts, oldest first, and "versions": [{version,
 *                 global_accuracy, central_accuracy, federated_accuracy
 *                 (null when not measured), federated_regions}], one entry
 *                 per model version, oldest first;
 *   "models"      {"models": [{version, round, sha256, bytes, master}]};
 *   "audit-head"  {tree_size, signed_size, root (hex), checkpoint (text)}.
 * Nothing secret is in any of them.  Returns 0, FA_ERR_INVAL (unknown
 * what), FA_ERR_NOMEM or FA_ERR_IO. */
#define FA_FED_HISTORY 200
int fa_fed_admin_json(fa_fed *f, const char *what, uint64_t now_ms, char **out, fa_error *err);

/* Federated-evaluation reports received on the current version, and the
 * number of regions (*regions, may be NULL). */
size_t fa_fed_eval_reports(const fa_fed *f, size_t *regions);

/* 1 when the configured number of rounds is done. */
int fa_fed_finished(const fa_fed *f);

/* The current round, attempt and model version (for logs and tests). */
void fa_fed_position(const fa_fed *f, uint64_t *round, uint32_t *attempt, int *phase,
                     uint64_t *version);

#endif
