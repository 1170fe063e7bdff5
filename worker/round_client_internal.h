/* round_client_internal.h - what the files of the round client share:
 * struct fa_round_client and the functions one file defines for the
 * others (internal to worker/; the public face is round_client.h).
 *
 *   round_client.c            setup, GET /v1/federation and the five phases
 *                             of an attempt
 *   round_client_log.c        the signed audit log as this region follows
 *                             it: the checks, the pinned key, the alarm
 *   round_client_download.c   the global model, whole or as a delta with the
 *                             fall-back to whole, and its tensor table
 *   round_client_attempt.c    the saved attempt and the mapped update buffer
 *   round_client_statement.c  signed statements: evaluation reports and
 *                             privacy statements
 */
#ifndef FA_WORKER_ROUND_CLIENT_INTERNAL_H
#define FA_WORKER_ROUND_CLIENT_INTERNAL_H

#include "worker/round_client.h"

#include <stddef.h>
#include <stdint.h>

#include "crypto/checkpoint.h"
#include "crypto/secagg.h"
#include "transport/h3.h"

/* The timeout of a short request (GET /v1/federation, the audit log's
 * answers) and the unit of the longer ones. */
#define FA_ROUND_CLIENT_SHORT_MS 15000u

struct fa_round_client {
    char *region_id;
    char *federation_id;
    char *state_dir;
    uint8_t *seed; /* sodium_malloc'ed Ed25519 identity seed */
    fa_secagg_member *members;
    char **member_ids;
    size_t n_members;
    fa_note_verifier pinned;
    int have_pinned;
    fa_h3_client *h3;
    fa_h3_client_stats stats0;
    /* The model this client downloaded last: what it binds in an attempt of
     * that version (secagg.h model_sha256). */
    int have_model;
    uint64_t model_version;
    uint8_t model_sha[32];
    fa_round_client_dl_stats dl; /* model downloads, full and delta */
    int damaged;                 /* test switch worker-damage-held-model used */
    /* The key FederationInfo announced last (checkpoints, when none is
     * pinned), and the audit-log alarm, once raised. */
    int have_announced;
    uint8_t announced_pk[32];
    int alarmed;
    char alarm[600];
    /* the update buffer (fa_round_client_update_buffer): the mapping of
     * state_dir/update.f32, its header page first, then ubuf_d floats */
    uint8_t *ubuf_map;
    size_t ubuf_len, ubuf_d;
};

/* round_client.c */

/* Exponential back-off with +-50 % jitter, attempt counted from 0. */
uint64_t fa_round_client_backoff_ms(unsigned attempt);

/* The message of an fedagg.Error body, or a generic one, into buf[n]. */
void fa_round_client_error_text(const fa_h3_response *resp, char *buf, size_t n);

/* round_client_log.c */

/* Checks a downloaded model against the signed log
 * (fa_round_client_check_model over the aggregator's answers), trusts the
 * checkpoint it verified and pins a key taken on first use; an
 * inconsistency raises the alarm (FA_ERR_VERIFY).  Returns what
 * fa_round_client_check_model does, or a transport or file error. */
int fa_round_client_audit_model(fa_round_client *rc, uint64_t version, const uint8_t sha[32],
                                fa_error *err);

/* Checks the signed audit record of the round: signed by the aggregator's
 * key, this region among the participants with the commitment to exactly
 * the bytes it uploaded, and the new model digest it was told; and that the
 * log it is in extends the one this region verified before (which it then
 * trusts): an inconsistency raises the alarm.  Returns 0, FA_ERR_VERIFY,
 * FA_ERR_PROTOCOL, FA_ERR_HTTP or a transport or file error. */
int fa_round_client_verify_proof(fa_round_client *rc, const Fedagg__FederationInfo *info,
                                 const fa_secagg_client *c, const uint8_t model_sha[32],
                                 fa_error *err);

/* round_client_attempt.c */

/* Unmaps the update buffer; remove_file (at the end) also removes its file
 * unless a saved attempt still names it (attempt.delta is a link to it). */
void fa_round_client_unmap_update(fa_round_client *rc, int remove_file);

/* Saves the attempt (round_client.h, "Crash safety"): the sealed client c
 * and its update of d floats with its weight.  Returns 0 or a file error. */
int fa_round_client_save_attempt(fa_round_client *rc, const fa_secagg_client *c, uint64_t round,
                                 uint32_t attempt, const float *delta, size_t d, double weight,
                                 fa_error *err);

/* Restores the client and its update (malloc'ed into *delta, d floats) of
 * round/attempt.  Returns 0, FA_ERR_NOTFOUND (no complete saved state),
 * FA_ERR_NOMEM, or fa_secagg_client_restore's errors (FA_ERR_UNSUPPORTED:
 * saved by an older fedagg). */
int fa_round_client_restore_attempt(fa_round_client *rc, uint64_t round, uint32_t attempt,
                                    fa_secagg_client **c, float **delta, size_t *d, double *weight,
                                    fa_error *err);

#endif
