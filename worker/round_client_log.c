/* round_client_log.c - the signed audit log as this region follows it: the
 * checks of checkpoints, consistency proofs and records (without I/O, for
 * tests: fa_round_client_check_log, _check_model), the key pinned on first
 * use, the last checkpoint trusted, and the alarm (see round_client.h). */
#include "worker/round_client_internal.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.pb-c.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "crypto/wire.h"

/* err's message prefixed with the printf-style text, under code: a refusal
 * of a lower layer restated as what it means here. */
static int restate(fa_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int restate(fa_error *err, int code, const char *fmt, ...)
{
    char prefix[256], old[sizeof(err->msg)];
    va_list ap;

    if (!err)
        return code;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    return fa_errorf(err, code, "%s: %s", prefix, old);
}

int fa_round_client_check_log(const fa_note_verifier *key, const fa_checkpoint *trusted,
                              const char *note, size_t note_len, const char *consistency,
                              size_t consistency_len, fa_checkpoint *next, fa_error *err)
{
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    fa_checkpoint cp;
    size_t n = 0;
    int r = fa_checkpoint_open(note, note_len, key, &cp, err);

    if (r == FA_ERR_PARSE)
        return restate(err, FA_ERR_PROTOCOL, "the latest checkpoint is malformed");
    if (r != 0)
        return restate(err, FA_ERR_VERIFY,
                       "the latest checkpoint is not signed by the aggregator key this region "
                       "trusts");
    if (trusted && strcmp(trusted->origin, cp.origin) != 0)
        return fa_errorf(err, FA_ERR_VERIFY,
                         "the checkpoint is of log \"%s\", this region follows \"%s\"", cp.origin,
                         trusted->origin);
    if (trusted && cp.size < trusted->size)
        return fa_errorf(err, FA_ERR_VERIFY,
                         "the log shrank: its latest checkpoint signs %" PRIu64
                         " records, this region verified one of %" PRIu64
                         " before: records were removed (a rolled-back log)",
                         cp.size, trusted->size);
    if (trusted && trusted->size > 0 && cp.size == trusted->size &&
        sodium_memcmp(cp.root, trusted->root, FA_MERKLE_HASH_LEN) != 0)
        return fa_errorf(err, FA_ERR_VERIFY,
                         "two signed checkpoints of %" PRIu64
                         " records with different roots: the log forked",
                         cp.size);
    if (trusted && trusted->size > 0 && cp.size > trusted->size) {
        if (!consistency)
            return fa_errorf(err, FA_ERR_PROTOCOL,
                             "no consistency proof from %" PRIu64 " to %" PRIu64 " records",
                             trusted->size, cp.size);
        if (fa_checkpoint_consistency_parse(consistency, consistency_len, trusted->size, cp.size,
                                            proof, &n, err) != 0)
            return restate(err, FA_ERR_PROTOCOL, "consistency proof");
        if (fa_merkle_verify_consistency(trusted->size, cp.size, trusted->root, cp.root, proof,
                                         n) != 0)
            return fa_errorf(err, FA_ERR_VERIFY,
                             "the consistency proof from %" PRIu64 " to %" PRIu64
                             " records does not verify: the log this region verified is not a "
                             "prefix of the one it is shown now (a forked or rewritten log)",
                             trusted->size, cp.size);
    }
    *next = cp;
    return 0;
}

int fa_round_client_check_model(const fa_note_verifier *key, const fa_checkpoint *trusted,
                                const fa_audit_answers *a, uint64_t version,
                                const uint8_t model_sha256[32], fa_checkpoint *next, fa_error *err)
{
    uint64_t t = trusted ? trusted->size : 0;
    Fedagg__AuditRecord *rec = NULL;
    fa_proof_bundle b;
    fa_checkpoint cp, bcp;
    char got[17], want[17];
    int r;

    memset(&b, 0, sizeof(b));
    if (a->record) {
        if ((r = fa_proof_bundle_parse(a->record, a->record_len, &b, err)) != 0) {
            r = restate(err, FA_ERR_PROTOCOL, "the record of version %" PRIu64, version);
            goto out;
        }
        r = fa_round_client_check_log(key, trusted, b.checkpoint, b.checkpoint_len, a->consistency,
                                      a->consistency_len, &cp, err);
    } else if (a->checkpoint) {
        r = fa_round_client_check_log(key, trusted, a->checkpoint, a->checkpoint_len,
                                      a->consistency, a->consistency_len, &cp, err);
    } else {
        r = t > 0 ? fa_errorf(err, FA_ERR_VERIFY,
                              "the aggregator shows no signed checkpoint, but this region "
                              "verified one of %" PRIu64 " records: the log was removed",
                              t)
                  : fa_errorf(err, FA_ERR_AGAIN, "the aggregator has no signed checkpoint yet");
        goto out;
    }
    if (r != 0)
        goto out;
    if (!a->record) {
        /* Version 0 is the genesis: a new log signs its empty tree. */
        if (version == 0 && cp.size == 0)
            *next = cp;
        else if (version == 0)
            r = fa_errorf(err, FA_ERR_REPLAY,
                          "version 0 is not the latest model: the log holds %" PRIu64 " records",
                          cp.size);
        else
            r = fa_errorf(err, FA_ERR_AGAIN,
                          "the signed log (%" PRIu64 " records) does not record version %" PRIu64
                          " yet",
                          cp.size, version);
        goto out;
    }
    if ((r = fa_proof_bundle_verify(&b, key, &bcp, err)) != 0) {
        r = restate(err, FA_ERR_VERIFY,
                    "the record of version %" PRIu64 " is not in the signed log", version);
        goto out;
    }
    rec = fedagg__audit_record__unpack(NULL, b.record_len, b.record);
    if (!rec) {
        r = fa_errorf(err, FA_ERR_PROTOCOL, "the record of version %" PRIu64 " does not decode",
                      version);
        goto out;
    }
    if (rec->new_version != version) {
        r = fa_errorf(err, FA_ERR_PROTOCOL,
                      "asked for the record of version %" PRIu64 ", got one of version %" PRIu64,
                      version, rec->new_version);
        goto out;
    }
    sodium_bin2hex(got, sizeof(got), model_sha256, 8);
    if (rec->new_model_sha256.len != 32 ||
        sodium_memcmp(rec->new_model_sha256.data, model_sha256, 32) != 0) {
        snprintf(want, sizeof(want), "(none)");
        if (rec->new_model_sha256.len == 32)
            sodium_bin2hex(want, sizeof(want), rec->new_model_sha256.data, 8);
        r = fa_errorf(err, FA_ERR_VERIFY,
                      "the signed log records version %" PRIu64 " as model %s..., this region was "
                      "served model %s...: the aggregator serves it a model the log does not hold "
                      "(model inconsistency)",
                      version, want, got);
        goto out;
    }
    if (b.index + 1 < t) {
        r = fa_errorf(err, FA_ERR_VERIFY,
                      "the model served (version %" PRIu64 ", record %" PRIu64
                      ") is older than the latest of the %" PRIu64
                      " records this region verified before: a rolled-back model",
                      version, b.index, t);
        goto out;
    }
    if (b.index + 1 < cp.size) {
        r = fa_errorf(err, FA_ERR_REPLAY,
                      "version %" PRIu64 " is not the latest model any more (record %" PRIu64
                      " of %" PRIu64 ")",
                      version, b.index, cp.size);
        goto out;
    }
    *next = cp;
    r = 0;
out:
    if (rec)
        fedagg__audit_record__free_unpacked(rec, NULL);
    fa_proof_bundle_free(&b);
    return r;
}

int fa_round_client_alarmed(const fa_round_client *rc, const char **why)
{
    if (why)
        *why = rc->alarmed ? rc->alarm : NULL;
    return rc->alarmed;
}

/* The key the checkpoints must be signed with: the pinned one, else the one
 * pinned on first use (state_dir/audit.key), else the one FederationInfo
 * announces (*tofu = 1: the caller pins it once it verified something). */
static int audit_key(fa_round_client *rc, fa_note_verifier *v, int *tofu, fa_error *err)
{
    char path[4096];
    uint8_t *data = NULL;
    size_t len = 0;
    int r;

    *tofu = 0;
    if (rc->have_pinned) {
        *v = rc->pinned;
        return 0;
    }
    memset(v, 0, sizeof(*v));
    snprintf(path, sizeof(path), "%s/audit.key", rc->state_dir);
    r = fa_file_read_all(path, &data, &len, 4096, NULL);
    if (r == 0) {
        r = fa_note_verifier_parse(v, data, len, err);
        free(data);
        return r == 0 ? 0 : fa_error_prefix(err, r, "%s", path);
    }
    if (!rc->have_announced)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "the aggregator announces no checkpoint key, and none is configured "
                         "(aggregator_public_key)");
    memcpy(v->pk, rc->announced_pk, 32);
    *tofu = 1;
    return 0;
}

static int pin_key(fa_round_client *rc, const fa_note_verifier *v, fa_error *err)
{
    char path[4096], hex[2 * 32 + 2];
    snprintf(path, sizeof(path), "%s/audit.key", rc->state_dir);
    sodium_bin2hex(hex, 2 * 32 + 1, v->pk, 32);
    hex[2 * 32] = '\n';
    hex[2 * 32 + 1] = '\0';
    fa_log(FA_LOG_INFO, "aggregator key pinned on first use", "file=%s key=%.16s...", path, hex);
    return fa_file_write_atomic(path, hex, strlen(hex), 0600, err);
}

/* The last checkpoint this region verified (state_dir/audit.checkpoint):
 * *have = 0 when there is none yet. */
static int load_trusted(fa_round_client *rc, fa_checkpoint *cp, char **note, size_t *len, int *have,
                        fa_error *err)
{
    char path[4096];
    uint8_t *data = NULL;
    int r;

    *have = 0;
    *note = NULL;
    *len = 0;
    snprintf(path, sizeof(path), "%s/audit.checkpoint", rc->state_dir);
    r = fa_file_read_all(path, &data, len, FA_NOTE_MAX_LEN, err);
    if (r == FA_ERR_NOTFOUND)
        return 0;
    if (r != 0)
        return r;
    if (fa_checkpoint_parse((const char *)data, *len, cp, NULL) != 0) {
        free(data);
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "%s is not a checkpoint: restore it, or remove it to trust the "
                         "aggregator's next checkpoint on first use",
                         path);
    }
    *note = (char *)data;
    *have = 1;
    return 0;
}

static int save_trusted(fa_round_client *rc, const char *note, size_t len, fa_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/audit.checkpoint", rc->state_dir);
    return fa_file_write_atomic(path, note, len, 0600, err);
}

/* The alarm: logged, kept with its evidence (what this region trusted and
 * what it was shown, all signed by the aggregator) in
 * state_dir/audit-alarm.txt, and sticky. */
static void raise_alarm(fa_round_client *rc, const char *why, const char *trusted,
                        const fa_audit_answers *a)
{
    char path[4096], q[700];
    fa_wbuf w;

    rc->alarmed = 1;
    snprintf(rc->alarm, sizeof(rc->alarm), "ALARM: %s", why);
    snprintf(path, sizeof(path), "%s/audit-alarm.txt", rc->state_dir);
    fa_log(FA_LOG_ERROR,
           "ALARM: the aggregator's signed audit log does not check out; this region stops "
           "contributing (an operator must look)",
           "detail=%s evidence=%s", fa_log_quote(q, sizeof(q), why), path);
#define PUT(text) fa_wbuf_raw(&w, (text), strlen(text))
    fa_wbuf_init(&w, 0);
    PUT("fedagg audit alarm\n");
    PUT(why);
    PUT("\n\n== the checkpoint this region trusted\n");
    if (trusted)
        PUT(trusted);
    if (a && a->record) {
        PUT("\n== GET /v1/audit/record\n");
        fa_wbuf_raw(&w, a->record, a->record_len);
    }
    if (a && a->checkpoint) {
        PUT("\n== GET /v1/audit/checkpoint\n");
        fa_wbuf_raw(&w, a->checkpoint, a->checkpoint_len);
    }
    if (a && a->consistency) {
        PUT("\n== GET /v1/audit/consistency\n");
        fa_wbuf_raw(&w, a->consistency, a->consistency_len);
    }
#undef PUT
    if (!w.failed)
        fa_file_write_atomic(path, w.p, w.len, 0600, NULL);
    fa_wbuf_free(&w);
}

/* One GET of text: *status and, for 200, the body (malloc'ed, NUL-terminated). */
static int get_text(fa_round_client *rc, const char *path, char **body, size_t *len, int *status,
                    fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    int r;

    *body = NULL;
    *len = 0;
    memset(&resp, 0, sizeof(resp));
    req.method = "GET";
    req.path = path;
    req.timeout_ms = FA_ROUND_CLIENT_SHORT_MS * 4;
    req.idempotent = 1;
    r = fa_h3_client_request(rc->h3, &req, &resp, err);
    if (r != 0)
        return fa_error_prefix(err, r, "GET %s", path);
    *status = resp.status;
    if (resp.status == 200) {
        *body = malloc(resp.body_len + 1);
        if (!*body) {
            fa_h3_response_free(&resp);
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
        memcpy(*body, resp.body, resp.body_len);
        (*body)[resp.body_len] = '\0';
        *len = resp.body_len;
    }
    fa_h3_response_free(&resp);
    return 0;
}

/* GET /v1/audit/consistency from the trusted size to `size`, when needed. */
static int get_consistency(fa_round_client *rc, const fa_checkpoint *trusted, int have_trusted,
                           uint64_t size, char **text, size_t *len, fa_error *err)
{
    char path[256];
    int status = 0, r;

    *text = NULL;
    *len = 0;
    if (!have_trusted || trusted->size == 0 || size <= trusted->size)
        return 0;
    snprintf(path, sizeof(path), "%s/audit/consistency?from=%" PRIu64 "&to=%" PRIu64, rc->base,
             trusted->size, size);
    if ((r = get_text(rc, path, text, len, &status, err)) != 0)
        return r;
    if (status != 200)
        return fa_errorf(err, FA_ERR_HTTP, "GET %s: HTTP status %d", path, status);
    return 0;
}

/* The checkpoint a proof bundle or a note holds, unverified: its size tells
 * how far the consistency proof must reach. */
static uint64_t note_size(const char *text, size_t len, int bundle)
{
    fa_checkpoint cp;
    fa_proof_bundle b;
    uint64_t n = 0;

    if (!text)
        return 0;
    if (!bundle)
        return fa_checkpoint_parse(text, len, &cp, NULL) == 0 ? cp.size : 0;
    memset(&b, 0, sizeof(b));
    if (fa_proof_bundle_parse(text, len, &b, NULL) == 0 && b.checkpoint &&
        fa_checkpoint_parse(b.checkpoint, b.checkpoint_len, &cp, NULL) == 0)
        n = cp.size;
    fa_proof_bundle_free(&b);
    return n;
}

/* The checkpoint note of a verified answer, to trust from now on. */
static int trust_answer(fa_round_client *rc, const fa_audit_answers *a, fa_error *err)
{
    fa_proof_bundle b;
    int r;

    if (!a->record)
        return save_trusted(rc, a->checkpoint, a->checkpoint_len, err);
    memset(&b, 0, sizeof(b));
    r = fa_proof_bundle_parse(a->record, a->record_len, &b, err);
    if (r == 0)
        r = save_trusted(rc, b.checkpoint, b.checkpoint_len, err);
    fa_proof_bundle_free(&b);
    return r;
}

int fa_round_client_audit_model(fa_round_client *rc, uint64_t version, const uint8_t sha[32],
                                fa_error *err)
{
    fa_note_verifier key;
    fa_checkpoint trusted, next;
    fa_audit_answers a;
    char path[256], *tnote = NULL, *rec = NULL, *ckpt = NULL, *cons = NULL;
    size_t tlen = 0, rlen = 0, clen = 0, nlen = 0;
    int tofu = 0, have = 0, status = 0, r;

    memset(&a, 0, sizeof(a));
    if ((r = audit_key(rc, &key, &tofu, err)) != 0 ||
        (r = load_trusted(rc, &trusted, &tnote, &tlen, &have, err)) != 0)
        goto out;
    snprintf(path, sizeof(path), "%s/audit/record?version=%" PRIu64, rc->base, version);
    if ((r = get_text(rc, path, &rec, &rlen, &status, err)) != 0)
        goto out;
    if (status == 200) {
        a.record = rec;
        a.record_len = rlen;
    } else if (status == 404) {
        snprintf(path, sizeof(path), "%s/audit/checkpoint", rc->base);
        if ((r = get_text(rc, path, &ckpt, &clen, &status, err)) != 0)
            goto out;
        if (status != 200 && status != 404) {
            r = fa_errorf(err, FA_ERR_HTTP, "GET /v1/audit/checkpoint: HTTP status %d", status);
            goto out;
        }
        a.checkpoint = ckpt;
        a.checkpoint_len = clen;
    } else {
        r = fa_errorf(err, FA_ERR_HTTP, "GET %s: HTTP status %d", path, status);
        goto out;
    }
    r = get_consistency(rc, &trusted, have,
                        a.record ? note_size(a.record, a.record_len, 1)
                                 : note_size(a.checkpoint, a.checkpoint_len, 0),
                        &cons, &nlen, err);
    if (r != 0)
        goto out;
    a.consistency = cons;
    a.consistency_len = nlen;
    r = fa_round_client_check_model(&key, have ? &trusted : NULL, &a, version, sha, &next, err);
    if (r == FA_ERR_VERIFY) {
        raise_alarm(rc, err ? err->msg : "the audit log does not check out", tnote, &a);
        r = fa_errorf(err, FA_ERR_VERIFY, "%s", rc->alarm);
        goto out;
    }
    if (r != 0)
        goto out;
    if ((!have || next.size != trusted.size) && (r = trust_answer(rc, &a, err)) != 0)
        goto out;
    if (tofu && (r = pin_key(rc, &key, err)) != 0)
        goto out;
    fa_log(FA_LOG_INFO, "model proven in the signed audit log",
           "version=%" PRIu64 " tree_size=%" PRIu64 " from_tree_size=%" PRIu64 " first_use=%d",
           version, next.size, have ? trusted.size : 0, !have);
out:
    free(tnote);
    free(rec);
    free(ckpt);
    free(cons);
    return r;
}

int fa_round_client_verify_proof(fa_round_client *rc, const Fedagg__FederationInfo *info,
                                 const fa_secagg_client *c, const uint8_t model_sha[32],
                                 fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    fa_proof_bundle b;
    fa_note_verifier v;
    fa_checkpoint cp, trusted, next;
    Fedagg__AuditRecord *rec = NULL;
    uint8_t up[32];
    char path[256], *tnote = NULL, *cons = NULL;
    size_t tlen = 0, clen = 0;
    int r, found = 0, tofu = 0, have = 0;

    memset(&resp, 0, sizeof(resp));
    memset(&b, 0, sizeof(b));
    if ((r = audit_key(rc, &v, &tofu, err)) != 0)
        return r;
    snprintf(path, sizeof(path), "%s/audit/proof?round=%" PRIu64 "&region=%s", rc->base,
             info->round, rc->region_id);
    req.method = "GET";
    req.path = path;
    req.timeout_ms = FA_ROUND_CLIENT_SHORT_MS * 4;
    req.idempotent = 1;
    r = fa_h3_client_request(rc->h3, &req, &resp, err);
    if (r != 0)
        goto out;
    if (resp.status != 200) {
        char msg[512];
        fa_round_client_error_text(&resp, msg, sizeof(msg));
        r = fa_errorf(err, FA_ERR_HTTP, "audit proof: %s", msg);
        goto out;
    }
    r = fa_proof_bundle_parse((const char *)resp.body, resp.body_len, &b, err);
    if (r == 0)
        r = fa_proof_bundle_verify(&b, &v, &cp, err);
    if (r != 0)
        goto out;
    rec = fedagg__audit_record__unpack(NULL, b.record_len, b.record);
    if (!rec) {
        r = fa_errorf(err, FA_ERR_PROTOCOL, "audit proof: the record does not decode");
        goto out;
    }
    r = fa_secagg_client_upload_digest(c, up);
    if (r != 0)
        goto out;
    for (size_t i = 0; i < rec->n_commitments; i++)
        if (!strcmp(rec->commitments[i]->region, rc->region_id) &&
            rec->commitments[i]->upload_digest_alg == FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3 &&
            rec->commitments[i]->upload_digest.len == 32 &&
            sodium_memcmp(rec->commitments[i]->upload_digest.data, up, 32) == 0)
            found = 1;
    if (rec->round != info->round || rec->attempt != info->attempt || !found ||
        rec->new_model_sha256.len != 32 ||
        sodium_memcmp(rec->new_model_sha256.data, model_sha, 32) != 0) {
        r = fa_errorf(err, FA_ERR_VERIFY,
                      "the audit record of round %" PRIu64 " does not record this region's "
                      "upload or the announced model",
                      info->round);
        goto out;
    }
    /* The log this record is in must extend the one verified before. */
    if ((r = load_trusted(rc, &trusted, &tnote, &tlen, &have, err)) != 0 ||
        (r = get_consistency(rc, &trusted, have, cp.size, &cons, &clen, err)) != 0)
        goto out;
    r = fa_round_client_check_log(&v, have ? &trusted : NULL, b.checkpoint, b.checkpoint_len, cons,
                                  clen, &next, err);
    if (r == FA_ERR_VERIFY) {
        fa_audit_answers a = {0};
        a.record = (const char *)resp.body;
        a.record_len = resp.body_len;
        a.consistency = cons;
        a.consistency_len = clen;
        raise_alarm(rc, err ? err->msg : "the audit log does not check out", tnote, &a);
        r = fa_errorf(err, FA_ERR_VERIFY, "%s", rc->alarm);
        goto out;
    }
    if (r == 0 && (!have || next.size != trusted.size))
        r = save_trusted(rc, b.checkpoint, b.checkpoint_len, err);
    if (r == 0 && tofu)
        r = pin_key(rc, &v, err);
    if (r != 0)
        goto out;
    fa_log(FA_LOG_INFO, "audit record proven",
           "round=%" PRIu64 " index=%" PRIu64 " tree_size=%" PRIu64, info->round, b.index, cp.size);
out:
    if (rec)
        fedagg__audit_record__free_unpacked(rec, NULL);
    free(tnote);
    free(cons);
    fa_proof_bundle_free(&b);
    fa_h3_response_free(&resp);
    return r;
}
