/* round_client.c - a region's side of one round over HTTP/3.  See round_client.h. */
#include "worker/round_client.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.pb-c.h"
#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/checkpoint.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "crypto/wire.h"
#include "model/delta.h"
#include "netconfig/quic_config.h"
#include "secagg.pb-c.h"
#include "transport/h3.h"
#include "worker/ddp.h"
#include "worker/eval_report.h"

#define LONG_POLL_MS (45u * 60u * 1000u) /* longer than any phase deadline */
#define SHORT_MS 15000u
#define MAX_TRANSIENT 20      /* transport failures tolerated per request */
#define EVAL_TRIES 4          /* an evaluation report is best effort: */
#define EVAL_BUDGET_MS 20000u /* at most this long, all tries together */
#define STATE_MAGIC "fedagg-attempt-v1"

enum { K_ADVERTISE, K_SHARES, K_MASKED, K_CONSISTENCY, K_UNMASK };
static const char *kind_paths[] = {"advertise", "shares", "masked", "consistency", "unmask"};

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

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Exponential back-off with +-50 % jitter, attempt counted from 0. */
static uint64_t backoff_ms(unsigned attempt)
{
    uint64_t base = 500u << (attempt < 5 ? attempt : 5);
    if (base > 10000)
        base = 10000;
    return base / 2 + randombytes_uniform((uint32_t)base);
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                     */
/* ------------------------------------------------------------------------ */

static int read_key_text(const char *path, int must_be_private, uint8_t **data, size_t *len,
                         fa_error *err)
{
    int rc;
    if (must_be_private) {
        rc = fa_file_check_private(path, err);
        if (rc != 0)
            return rc;
    }
    return fa_file_read_all(path, data, len, 1 << 16, err);
}

int fa_round_client_new(fa_round_client **out, const Fedagg__WorkerConfig *cfg, fa_error *err)
{
    fa_round_client *rc;
    fa_h3_client_config hc;
    uint8_t *data = NULL;
    size_t len = 0;
    int r, self = 0;

    *out = NULL;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    rc = calloc(1, sizeof(*rc));
    if (!rc)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    rc->region_id = strdup(cfg->region_id ? cfg->region_id : "");
    rc->federation_id = strdup(cfg->federation_id ? cfg->federation_id : "fedagg");
    rc->state_dir = strdup(cfg->state_dir ? cfg->state_dir : ".");
    rc->seed = sodium_malloc(FA_IDENTITY_SEED_BYTES);
    if (!rc->region_id || !rc->federation_id || !rc->state_dir || !rc->seed) {
        r = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }

    /* The identity key. */
    if (!cfg->identity_key_file || !cfg->identity_key_file[0]) {
        r = fa_errorf(err, FA_ERR_INVAL, "config: identity_key_file is required");
        goto fail;
    }
    r = read_key_text(cfg->identity_key_file, 1, &data, &len, err);
    if (r == 0)
        r = fa_identity_parse_secret(data, len, rc->seed, err);
    if (data) {
        sodium_memzero(data, len);
        free(data);
        data = NULL;
    }
    if (r != 0) {
        fa_error_prefix(err, r, "%s", cfg->identity_key_file);
        goto fail;
    }

    /* The federation's regions and their keys. */
    rc->n_members = cfg->n_regions;
    if (rc->n_members == 0) {
        r = fa_errorf(err, FA_ERR_INVAL,
                      "config: `regions` must list the federation's regions with their identity "
                      "public keys (the aggregator config's list)");
        goto fail;
    }
    rc->members = calloc(rc->n_members, sizeof(*rc->members));
    rc->member_ids = calloc(rc->n_members, sizeof(char *));
    if (!rc->members || !rc->member_ids) {
        r = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < rc->n_members; i++) {
        const Fedagg__Region *g = cfg->regions[i];
        rc->member_ids[i] = strdup(g->id ? g->id : "");
        if (!rc->member_ids[i]) {
            r = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        rc->members[i].id = rc->member_ids[i];
        if (g->identity_public_key && g->identity_public_key[0]) {
            r = fa_identity_parse_public((const uint8_t *)g->identity_public_key,
                                         strlen(g->identity_public_key), rc->members[i].identity_pk,
                                         err);
        } else if (g->identity_public_key_file && g->identity_public_key_file[0]) {
            r = read_key_text(g->identity_public_key_file, 0, &data, &len, err);
            if (r == 0)
                r = fa_identity_parse_public(data, len, rc->members[i].identity_pk, err);
            free(data);
            data = NULL;
        } else {
            r = fa_errorf(err, FA_ERR_INVAL, "no identity public key");
        }
        if (r != 0) {
            fa_error_prefix(err, r, "config: regions[%zu] (%s)", i, rc->member_ids[i]);
            goto fail;
        }
        self |= !strcmp(rc->member_ids[i], rc->region_id);
    }
    if (!self) {
        r = fa_errorf(err, FA_ERR_INVAL, "config: `regions` does not list this region '%s'",
                      rc->region_id);
        goto fail;
    }

    /* The pinned aggregator key, if any. */
    if (cfg->aggregator_public_key && cfg->aggregator_public_key[0]) {
        r = fa_note_verifier_parse(&rc->pinned, (const uint8_t *)cfg->aggregator_public_key,
                                   strlen(cfg->aggregator_public_key), err);
        rc->have_pinned = r == 0;
    } else if (cfg->aggregator_public_key_file && cfg->aggregator_public_key_file[0]) {
        r = read_key_text(cfg->aggregator_public_key_file, 0, &data, &len, err);
        if (r == 0)
            r = fa_note_verifier_parse(&rc->pinned, data, len, err);
        free(data);
        data = NULL;
        rc->have_pinned = r == 0;
    } else {
        r = 0;
    }
    if (r != 0) {
        fa_error_prefix(err, r, "config: aggregator_public_key");
        goto fail;
    }

    /* The transport. */
    fa_h3_client_config_default(&hc);
    hc.server = cfg->aggregator;
    hc.server_name = cfg->tls && cfg->tls->server_name && cfg->tls->server_name[0]
                         ? cfg->tls->server_name
                         : NULL;
    hc.ca_file = cfg->tls ? cfg->tls->ca_file : NULL;
    hc.cert_file = cfg->tls ? cfg->tls->cert_file : NULL;
    hc.key_file = cfg->tls ? cfg->tls->key_file : NULL;
    hc.crl_file =
        cfg->tls && cfg->tls->crl_file && cfg->tls->crl_file[0] ? cfg->tls->crl_file : NULL;
    fa_netconfig_quic_opts(&hc.quic, cfg->quic);
    if (cfg->quic) {
        hc.reconnect_initial_ms = cfg->quic->reconnect_initial_ms;
        hc.reconnect_max_ms = cfg->quic->reconnect_max_ms;
    }
    r = fa_h3_client_new(&rc->h3, &hc, err);
    if (r != 0)
        goto fail;
    *out = rc;
    return 0;
fail:
    fa_round_client_del(rc);
    return r;
}

static void unmap_update(fa_round_client *rc, int remove_file);

void fa_round_client_del(fa_round_client *rc)
{
    if (!rc)
        return;
    unmap_update(rc, 1);
    fa_h3_client_del(rc->h3);
    for (size_t i = 0; rc->member_ids && i < rc->n_members; i++)
        free(rc->member_ids[i]);
    free(rc->member_ids);
    free(rc->members);
    sodium_free(rc->seed);
    free(rc->region_id);
    free(rc->federation_id);
    free(rc->state_dir);
    free(rc);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

/* The message of an fedagg.Error body, or a generic one. */
static void error_text(const fa_h3_response *resp, char *buf, size_t n)
{
    Fedagg__Error *e = fedagg__error__unpack(NULL, resp->body_len, resp->body);
    if (e && e->message && e->message[0])
        snprintf(buf, n, "%s", e->message);
    else
        snprintf(buf, n, "HTTP status %d", resp->status);
    if (e)
        fedagg__error__free_unpacked(e, NULL);
}

int fa_round_client_info(fa_round_client *rc, uint32_t timeout_ms, Fedagg__FederationInfo **info,
                         fa_error *err)
{
    uint64_t start = fa_time_mono_ns() / 1000000u;
    unsigned tries = 0;

    *info = NULL;
    for (;;) {
        fa_h3_client_req req = {0};
        fa_h3_response resp;
        uint64_t now = fa_time_mono_ns() / 1000000u;
        uint32_t left = now - start < timeout_ms ? (uint32_t)(timeout_ms - (now - start)) : 1;
        int r;

        req.method = "GET";
        req.path = "/v1/federation";
        req.timeout_ms = left < SHORT_MS ? left : SHORT_MS;
        req.idempotent = 1;
        memset(&resp, 0, sizeof(resp));
        r = fa_h3_client_request(rc->h3, &req, &resp, err);
        if (r == FA_ERR_TLS)
            return r;
        if (r == 0 && resp.status == 200) {
            *info = fedagg__federation_info__unpack(NULL, resp.body_len, resp.body);
            fa_h3_response_free(&resp);
            if (!*info)
                return fa_errorf(err, FA_ERR_PROTOCOL, "GET /v1/federation: undecodable answer");
            if ((*info)->aggregator_public_key.len == 32) {
                memcpy(rc->announced_pk, (*info)->aggregator_public_key.data, 32);
                rc->have_announced = 1;
            }
            return 0;
        }
        if (r == 0) {
            char msg[512];
            int status = resp.status; /* fa_h3_response_free zeroes resp */
            error_text(&resp, msg, sizeof(msg));
            fa_h3_response_free(&resp);
            if (status == 403)
                return fa_errorf(err, FA_ERR_AUTH, "the aggregator refuses this region: %s", msg);
            fa_log(FA_LOG_WARN, "federation info refused; retrying", "status=%d", status);
        } else {
            fa_log(FA_LOG_WARN, "aggregator unreachable; retrying", "error=%s", fa_strerror(r));
        }
        now = fa_time_mono_ns() / 1000000u;
        if (now - start >= timeout_ms)
            return fa_errorf(err, FA_ERR_TIMEOUT, "aggregator unreachable for %u ms", timeout_ms);
        sleep_ms(backoff_ms(tries++));
    }
}

/* ------------------------------------------------------------------------ */
/* The signed log, as this region follows it (round_client.h)               */
/* ------------------------------------------------------------------------ */

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

/* One line of text at *p (before end) into buf without its newline;
 * returns its length, or -1 at the end or for a line longer than cap - 1. */
static int next_line(const char **p, const char *end, char *buf, size_t cap)
{
    const char *nl;
    size_t n;

    if (*p >= end)
        return -1;
    nl = memchr(*p, '\n', (size_t)(end - *p));
    n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    if (n >= cap)
        return -1;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p += n + (nl != NULL);
    return (int)n;
}

/* The text of GET /v1/audit/consistency (audit/audit_log.h
 * fa_audit_log_prove_consistency) for old -> size: its hashes into proof. */
static int parse_consistency(const char *text, size_t len, uint64_t old, uint64_t size,
                             uint8_t *proof, size_t *n, fa_error *err)
{
    const char *p = text, *end = text + len;
    char line[128];
    uint64_t o = 0, s = 0;
    char extra;

    *n = 0;
    if (next_line(&p, end, line, sizeof(line)) < 0 ||
        strcmp(line, "fedagg-audit-consistency v1") != 0 ||
        next_line(&p, end, line, sizeof(line)) < 0 ||
        sscanf(line, "old %" SCNu64 "%c", &o, &extra) != 1 ||
        next_line(&p, end, line, sizeof(line)) < 0 ||
        sscanf(line, "size %" SCNu64 "%c", &s, &extra) != 1)
        return fa_errorf(err, FA_ERR_PROTOCOL, "consistency proof: malformed header");
    if (o != old || s != size)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "consistency proof: from %" PRIu64 " to %" PRIu64 " records, %" PRIu64
                         " to %" PRIu64 " asked",
                         o, s, old, size);
    for (int l; (l = next_line(&p, end, line, sizeof(line))) >= 0;) {
        size_t got = 0;
        if (l == 0 && p >= end)
            break;
        if (*n >= FA_MERKLE_MAX_PROOF || strncmp(line, "hash ", 5) != 0 ||
            sodium_base642bin(proof + *n * FA_MERKLE_HASH_LEN, FA_MERKLE_HASH_LEN, line + 5,
                              strlen(line + 5), NULL, &got, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 ||
            got != FA_MERKLE_HASH_LEN)
            return fa_errorf(err, FA_ERR_PROTOCOL, "consistency proof: malformed hash line %zu",
                             *n + 1);
        (*n)++;
    }
    return 0;
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
        if ((r = parse_consistency(consistency, consistency_len, trusted->size, cp.size, proof, &n,
                                   err)) != 0)
            return r;
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
    req.timeout_ms = SHORT_MS * 4;
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
    char path[128];
    int status = 0, r;

    *text = NULL;
    *len = 0;
    if (!have_trusted || trusted->size == 0 || size <= trusted->size)
        return 0;
    snprintf(path, sizeof(path), "/v1/audit/consistency?from=%" PRIu64 "&to=%" PRIu64,
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

/* Checks a downloaded model against the signed log (fa_round_client_check_model). */
static int audit_model(fa_round_client *rc, uint64_t version, const uint8_t sha[32], fa_error *err)
{
    fa_note_verifier key;
    fa_checkpoint trusted, next;
    fa_audit_answers a;
    char path[128], *tnote = NULL, *rec = NULL, *ckpt = NULL, *cons = NULL;
    size_t tlen = 0, rlen = 0, clen = 0, nlen = 0;
    int tofu = 0, have = 0, status = 0, r;

    memset(&a, 0, sizeof(a));
    if ((r = audit_key(rc, &key, &tofu, err)) != 0 ||
        (r = load_trusted(rc, &trusted, &tnote, &tlen, &have, err)) != 0)
        goto out;
    snprintf(path, sizeof(path), "/v1/audit/record?version=%" PRIu64, version);
    if ((r = get_text(rc, path, &rec, &rlen, &status, err)) != 0)
        goto out;
    if (status == 200) {
        a.record = rec;
        a.record_len = rlen;
    } else if (status == 404) {
        if ((r = get_text(rc, "/v1/audit/checkpoint", &ckpt, &clen, &status, err)) != 0)
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

struct sink {
    fa_atomic_file *f;
    crypto_hash_sha256_state sha;
    fa_error *err;
};

static int sink_write(void *arg, const uint8_t *data, size_t len)
{
    struct sink *s = arg;
    crypto_hash_sha256_update(&s->sha, data, len);
    return fa_atomic_file_write(s->f, data, len, s->err);
}

int fa_round_client_fetch_model(fa_round_client *rc, const char *path, uint64_t *version,
                                uint8_t sha256[32], fa_error *err)
{
    return fa_round_client_fetch_model_within(rc, path, LONG_POLL_MS, version, sha256, err);
}

/* The version of the model held at path, for a delta download against it:
 * its "fedagg.version" metadata (or, for a model without one, the version
 * this client downloaded last).  0 when nothing usable is held there; the
 * delta's base digest is checked anyway (model/delta.h). */
static int held_version(const fa_round_client *rc, const char *path, uint64_t *version)
{
    fa_safetensors *st = NULL;
    const char *v;
    char *end;
    int ok = 0;

    if (fa_st_open(&st, path, NULL) != 0)
        return 0;
    v = fa_st_metadata_get(st, "fedagg.version");
    if (v && v[0] >= '0' && v[0] <= '9') {
        errno = 0;
        *version = strtoull(v, &end, 10);
        ok = !*end && !errno;
    } else if (!v && rc->have_model) {
        *version = rc->model_version;
        ok = 1;
    }
    fa_st_del(st);
    return ok;
}

/* Test switch worker-damage-held-model=V (it_fed_delta_download): once,
 * flips a bit of the held model of version V before a delta against it is
 * asked for, so that the delta does not apply and the region must fall
 * back to the full file. */
static void damage_held(fa_round_client *rc, const char *path, uint64_t version)
{
    char spec[32];
    FILE *f;
    int c;

    if (rc->damaged || !fa_failpoint_value("worker-damage-held-model", spec, sizeof(spec)) ||
        strtoull(spec, NULL, 10) != version)
        return;
    rc->damaged = 1;
    if (!(f = fopen(path, "r+b")))
        return;
    if (fseek(f, -2, SEEK_END) == 0 && (c = fgetc(f)) != EOF && fseek(f, -2, SEEK_END) == 0)
        fputc(c ^ 0x40, f);
    fclose(f);
    fa_log(FA_LOG_WARN, "TEST SWITCH: damaged the held model (worker-damage-held-model)",
           "version=%" PRIu64 " file=%s", version, path);
}

/* One GET of the current model into path (atomically).  With base (the
 * model held, of version base_version) it asks for the delta against it;
 * a delta is rebuilt with fa_delta_reconstruct and its result checked
 * against the full model's SHA-256.  *delta_failed is set when a delta
 * came but did not give that model (the caller then downloads the full
 * file). */
static int fetch_model_once(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                            const char *base, uint64_t base_version, uint64_t *version,
                            uint8_t sha256[32], int *delta_failed, fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    struct sink s;
    const char *vh, *sh, *eh;
    char dl[4300], rpath[96], q[600];
    uint8_t got[32], want[32], dwant[32];
    fa_delta_info info;
    int r, is_delta = 0;

    memset(&resp, 0, sizeof(resp));
    *delta_failed = 0;
    snprintf(dl, sizeof(dl), "%s.download", path);
    r = fa_atomic_file_open(&s.f, dl, 0600, err);
    if (r != 0)
        return r;
    fa_atomic_file_write_back_every(s.f, FA_WRITE_BACK_STEP); /* committed with its fsync */
    crypto_hash_sha256_init(&s.sha);
    s.err = err;
    if (base)
        snprintf(rpath, sizeof(rpath), "/v1/models/latest?delta_from=%" PRIu64, base_version);
    else
        snprintf(rpath, sizeof(rpath), "/v1/models/latest");
    req.method = "GET";
    req.path = rpath;
    req.on_body = sink_write;
    req.on_body_arg = &s;
    req.timeout_ms = timeout_ms;
    r = fa_h3_client_request(rc->h3, &req, &resp, err);
    if (r != 0)
        goto fail;
    if (resp.status != 200) {
        char msg[512];
        error_text(&resp, msg, sizeof(msg));
        r = fa_errorf(err, FA_ERR_HTTP, "GET %s: %s", rpath, msg);
        /* an aggregator from before deltas refuses the query: ask again without it */
        *delta_failed = base && resp.status == 400;
        goto fail;
    }
    vh = fa_h3_response_header(&resp, "fedagg-model-version");
    sh = fa_h3_response_header(&resp, "fedagg-model-sha256");
    eh = fa_h3_response_header(&resp, "fedagg-model-encoding");
    is_delta = base && eh && !strcmp(eh, "delta");
    crypto_hash_sha256_final(&s.sha, got);
    if (!vh || !sh || sodium_hex2bin(want, 32, sh, strlen(sh), NULL, NULL, NULL) != 0) {
        r = fa_errorf(err, FA_ERR_PROTOCOL, "model download without version or SHA-256 header");
        goto fail;
    }
    if (is_delta) {
        const char *dh = fa_h3_response_header(&resp, "fedagg-delta-sha256");
        if (!dh || sodium_hex2bin(dwant, 32, dh, strlen(dh), NULL, NULL, NULL) != 0 ||
            sodium_memcmp(got, dwant, 32) != 0) {
            *delta_failed = 1;
            r = fa_errorf(err, FA_ERR_VERIFY, "model delta download corrupted: SHA-256 %s",
                          dh ? "does not match its header" : "header missing");
            goto fail;
        }
    } else if (sodium_memcmp(got, want, 32) != 0) {
        r = fa_errorf(err, FA_ERR_VERIFY,
                      "model download corrupted: SHA-256 does not match its header");
        goto fail;
    }
    r = fa_atomic_file_commit(s.f, err);
    s.f = NULL;
    if (r != 0)
        goto out;
    *version = strtoull(vh, NULL, 10);
    if (is_delta) {
        memset(&info, 0, sizeof(info));
        r = fa_delta_reconstruct(base, dl, path, got, &info, err);
        unlink(dl);
        if (r == 0 && sodium_memcmp(got, want, 32) != 0)
            r = fa_errorf(err, FA_ERR_VERIFY,
                          "the model rebuilt from the delta of version %" PRIu64
                          " does not have the SHA-256 the aggregator announced",
                          *version);
        if (r != 0) {
            unlink(path);
            *delta_failed = 1;
            goto out;
        }
        rc->dl.delta++;
        rc->dl.bytes_delta += resp.body_received;
        rc->dl.last_bytes = resp.body_received;
        rc->dl.last_delta = 1;
        fa_hex_encode(q, sizeof(q), got, 32);
        fa_log(FA_LOG_INFO, "global model downloaded",
               "version=%" PRIu64 " encoding=delta from=%" PRIu64 " bytes=%" PRIu64
               " full_bytes=%" PRIu64 " quantised=%" PRIu64 " sha256=%s",
               *version, base_version, resp.body_received, info.size, info.quantised, q);
    } else {
        if (rename(dl, path) != 0) {
            r = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
            unlink(dl);
            goto out;
        }
        rc->dl.full++;
        rc->dl.bytes_full += resp.body_received;
        rc->dl.last_bytes = resp.body_received;
        rc->dl.last_delta = 0;
        fa_hex_encode(q, sizeof(q), got, 32);
        fa_log(FA_LOG_INFO, "global model downloaded",
               "version=%" PRIu64 " encoding=full bytes=%" PRIu64 " sha256=%s delta_asked=%d",
               *version, resp.body_received, q, base ? 1 : 0);
    }
    memcpy(sha256, got, 32);
    goto out;
fail:
    fa_atomic_file_abort(s.f);
out:
    fa_h3_response_free(&resp);
    return r;
}

void fa_round_client_download_stats(const fa_round_client *rc, fa_round_client_dl_stats *out)
{
    *out = rc->dl;
}

int fa_round_client_fetch_model_within(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                                       uint64_t *version, uint8_t sha256[32], fa_error *err)
{
    uint64_t start = fa_time_mono_ns() / 1000000u, base_version = 0;
    char tmp[4200];
    const char *base;
    int no_delta = 0;

    if (rc->alarmed)
        return fa_errorf(err, FA_ERR_VERIFY, "%s", rc->alarm);
    /* The model is downloaded beside path and takes its place only once the
     * signed log vouches for it. */
    snprintf(tmp, sizeof(tmp), "%s.unchecked", path);
    /* A download whose connection broke off (the aggregator restarted: its
     * stateless reset arrived mid-body) starts again from byte 0 on a fresh
     * connection at once, within the same time budget; the transport cannot
     * resend it by itself once body bytes reached the file.  So does one
     * that the signed log shows superseded (a round completed meanwhile),
     * and a delta that did not rebuild the announced model (then in full). */
    for (unsigned tries = 1;; tries++) {
        uint64_t used = fa_time_mono_ns() / 1000000u - start;
        char q[600];
        int delta_failed = 0;
        base = !no_delta && held_version(rc, path, &base_version) ? path : NULL;
        if (base)
            damage_held(rc, path, base_version);
        int r = fetch_model_once(rc, tmp, used < timeout_ms ? (uint32_t)(timeout_ms - used) : 1,
                                 base, base_version, version, sha256, &delta_failed, err);
        if (r == 0)
            r = audit_model(rc, *version, sha256, err);
        if (r == 0 && rename(tmp, path) != 0)
            r = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        if (r == 0) {
            fa_file_sync_dir(path, NULL);
            rc->have_model = 1;
            rc->model_version = *version;
            memcpy(rc->model_sha, sha256, 32);
            return 0;
        }
        unlink(tmp);
        if (delta_failed && !no_delta) {
            /* Never trusted: the full file is downloaded and checked instead. */
            rc->dl.fallbacks++;
            no_delta = 1;
            fa_log(FA_LOG_WARN, "model delta refused; downloading the full model",
                   "from=%" PRIu64 " error=%s", base_version,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
            tries--;
            continue;
        }
        if ((r != FA_ERR_QUIC && r != FA_ERR_REPLAY) || tries >= 3 ||
            fa_time_mono_ns() / 1000000u - start >= timeout_ms)
            return r;
        fa_log(FA_LOG_INFO,
               r == FA_ERR_QUIC ? "model download broke off; downloading again"
                                : "the model moved on while it was checked; downloading again",
               "attempt=%u error=%s", tries + 1, fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
    }
}

/* "1a2b3c4d..." (the first 8 bytes) of a digest, for messages. */
static void short_hex(char out[20], const uint8_t *b)
{
    fa_hex_encode(out, FA_HEX_LEN(8), b, 8);
    memcpy(out + 16, "...", 4);
}

int fa_round_client_check_table(const Fedagg__FederationInfo *info, const fa_tensors *t,
                                fa_error *err)
{
    uint8_t dig[32];
    char a[20], b[20] = "(none)";
    uint64_t d = fa_tensors_fed_numel(t);
    int r = fa_tensors_digest(t, dig, err);

    if (r != 0)
        return r;
    if (info->tensor_table_digest.len == 32 &&
        sodium_memcmp(info->tensor_table_digest.data, dig, 32) == 0 && d == info->num_params &&
        (info->num_tensors == 0 || info->num_tensors == fa_tensors_count(t)))
        return 0;
    short_hex(a, dig);
    if (info->tensor_table_digest.len == 32)
        short_hex(b, info->tensor_table_digest.data);
    return fa_errorf(err, FA_ERR_PROTOCOL,
                     "the model's tensor table does not match the federation's: the model has "
                     "%zu tensors, %" PRIu64 " federated coordinates, table digest %s; the "
                     "federation announces %" PRIu64 " tensors, %" PRIu64 " coordinates, digest %s",
                     fa_tensors_count(t), d, a, info->num_tensors, info->num_params, b);
}

/* The position of the federation, to tell a broken connection (same
 * attempt: send again) from a federation that moved on. */
static int still_current(fa_round_client *rc, const Fedagg__FederationInfo *info)
{
    Fedagg__FederationInfo *now = NULL;
    int same;
    if (fa_round_client_info(rc, SHORT_MS * 4, &now, NULL) != 0)
        return 1; /* cannot tell: keep trying the same attempt */
    same = now->round == info->round && now->attempt == info->attempt;
    fedagg__federation_info__free_unpacked(now, NULL);
    return same;
}

struct masked_src {
    fa_secagg_client *c;
    fa_error *err;
    uint64_t sent;
};

static ssize_t masked_read(void *arg, uint8_t *buf, size_t cap)
{
    struct masked_src *m = arg;
    size_t n = 0;
    int r;

    if (m->sent > fa_secagg_client_masked_bytes(m->c) / 2)
        fa_failpoint("worker-mid-masked");
    r = fa_secagg_client_masked_next(m->c, buf, cap, &n, m->err);
    m->sent += n;
    return r != 0 ? r : (ssize_t)n;
}

/* POSTs one phase's message (or, for K_MASKED, the masked stream of c) and
 * returns the 200 body.  Retries transport failures and 5xx with back-off
 * while the attempt is current; 409 -> FA_ERR_REPLAY. */
static int post_phase(fa_round_client *rc, const Fedagg__FederationInfo *info, int kind,
                      const uint8_t *body, size_t len, fa_secagg_client *c, uint8_t **out,
                      size_t *out_len, fa_error *err)
{
    char path[128];
    unsigned transient = 0;
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    fa_h3_header hm[] = {{"content-type", "application/octet-stream"}};

    snprintf(path, sizeof(path), "/v1/rounds/%" PRIu64 "/%u/%s", info->round, info->attempt,
             kind_paths[kind]);
    {
        char fp[64];
        snprintf(fp, sizeof(fp), "worker-before-%s", kind_paths[kind]);
        fa_failpoint(fp);
    }
    for (;;) {
        fa_h3_client_req req = {0};
        fa_h3_response resp;
        struct masked_src src = {c, err, 0};
        char msg[512];
        int r;

        memset(&resp, 0, sizeof(resp));
        req.method = "POST";
        req.path = path;
        req.timeout_ms = LONG_POLL_MS;
        if (kind == K_MASKED) {
            r = fa_secagg_client_masked_rewind(c, err);
            if (r != 0)
                return r;
            req.headers = hm;
            req.nheaders = 1;
            req.body_read = masked_read;
            req.body_arg = &src;
            req.body_length = (int64_t)fa_secagg_client_masked_bytes(c);
        } else {
            req.headers = h;
            req.nheaders = 1;
            req.body = body;
            req.body_len = len;
            req.idempotent = 1;
        }
        r = fa_h3_client_request(rc->h3, &req, &resp, err);
        if (r == FA_ERR_TLS)
            return r;
        if (r == 0 && resp.status == 200) {
            *out = resp.body;
            *out_len = resp.body_len;
            resp.body = NULL;
            fa_h3_response_free(&resp);
            return 0;
        }
        if (r == 0) {
            int status = resp.status; /* fa_h3_response_free zeroes resp */
            error_text(&resp, msg, sizeof(msg));
            fa_h3_response_free(&resp);
            if (status == 409)
                return fa_errorf(err, FA_ERR_REPLAY, "%s: %s", kind_paths[kind], msg);
            if (status == 503) {
                /* Upload slots full: wait our turn.  The aggregator stopped
                 * the body at once, so a retry costs a round trip, not an
                 * upload: poll briskly. */
                sleep_ms(30 + randombytes_uniform(70));
                continue;
            }
            if (status < 500)
                return fa_errorf(err, FA_ERR_PROTOCOL, "%s refused (%d): %s", kind_paths[kind],
                                 status, msg);
            fa_log(FA_LOG_WARN, "aggregator error; retrying", "phase=%s status=%d",
                   kind_paths[kind], status);
        } else {
            fa_log(FA_LOG_WARN, "request failed; retrying", "phase=%s error=%s", kind_paths[kind],
                   fa_strerror(r));
        }
        if (++transient > MAX_TRANSIENT)
            return fa_errorf(err, r ? r : FA_ERR_HTTP, "%s: giving up after %u failures",
                             kind_paths[kind], transient);
        /* A connection lost under the request (the aggregator restarted: a
         * stateless reset in the middle of a masked upload, which cannot be
         * replayed by the transport) is sent again at once; the transport
         * backs off by itself while it cannot connect.  Repeated failures
         * back off here. */
        if (!(r == FA_ERR_QUIC && transient == 1))
            sleep_ms(backoff_ms(transient - 1));
        if (!still_current(rc, info))
            return fa_errorf(err, FA_ERR_REPLAY, "%s: the federation moved on", kind_paths[kind]);
    }
}

/* ------------------------------------------------------------------------ */
/* Federated evaluation                                                      */
/* ------------------------------------------------------------------------ */

/* POSTs a signed statement (the same bytes on every try: a second copy is
 * the same statement) to path, best effort within EVAL_BUDGET_MS; `what`
 * names it in messages.  4xx are mapped to codes and not retried. */
static int post_statement(fa_round_client *rc, const char *path, const uint8_t *body, size_t len,
                          const char *what, fa_error *err)
{
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    uint64_t start = fa_time_mono_ns() / 1000000u;
    int r;

    for (unsigned tries = 0;; tries++) {
        uint64_t used = fa_time_mono_ns() / 1000000u - start;
        uint32_t left = used < EVAL_BUDGET_MS ? (uint32_t)(EVAL_BUDGET_MS - used) : 0;
        fa_h3_client_req req = {0};
        fa_h3_response resp;
        char msg[512];
        uint64_t pause;
        int status;

        memset(&resp, 0, sizeof(resp));
        req.method = "POST";
        req.path = path;
        req.headers = h;
        req.nheaders = 1;
        req.body = body;
        req.body_len = len;
        req.timeout_ms = left < SHORT_MS / 2 ? (left > 1000 ? left : 1000) : SHORT_MS / 2;
        req.idempotent = 1;
        r = fa_h3_client_request(rc->h3, &req, &resp, err);
        if (r == FA_ERR_TLS)
            break;
        if (r == 0) {
            status = resp.status;
            if (status == 200) {
                fa_h3_response_free(&resp);
                break;
            }
            error_text(&resp, msg, sizeof(msg));
            fa_h3_response_free(&resp);
            if (status < 500) {
                r = fa_errorf(err,
                              status == 400   ? FA_ERR_PROTOCOL
                              : status == 403 ? FA_ERR_AUTH
                              : status == 409 ? FA_ERR_REPLAY
                                              : FA_ERR_HTTP,
                              "%s refused (%d): %s", what, status, msg);
                break;
            }
            r = fa_errorf(err, FA_ERR_HTTP, "%s: HTTP status %d: %s", what, status, msg);
        }
        pause = backoff_ms(tries);
        if (tries + 1 >= EVAL_TRIES ||
            fa_time_mono_ns() / 1000000u - start + pause >= EVAL_BUDGET_MS) {
            fa_error_prefix(err, r, "%s: giving up after %u tries", what, tries + 1);
            break;
        }
        sleep_ms(pause);
    }
    return r;
}

int fa_round_client_post_eval(fa_round_client *rc, uint64_t version, const uint8_t model_sha256[32],
                              uint64_t num_examples, double loss, double accuracy,
                              const char *const *metric_names, const double *metric_values,
                              size_t n_metrics, fa_error *err)
{
    fa_eval_report rep;
    uint8_t *body = NULL;
    size_t len = 0;
    char what[96];
    int r;

    memset(&rep, 0, sizeof(rep));
    rep.federation_id = rc->federation_id;
    rep.region = rc->region_id;
    rep.version = version;
    memcpy(rep.model_sha256, model_sha256, 32);
    rep.num_examples = num_examples;
    rep.loss = loss;
    rep.accuracy = accuracy;
    rep.metric_names = metric_names;
    rep.metric_values = metric_values;
    rep.n_metrics = n_metrics;
    rep.unix_ms = fa_time_unix_ms();

    r = fa_eval_report_sign(&rep, rc->seed, &body, &len, err);
    if (r != 0)
        return r;
    snprintf(what, sizeof(what), "evaluation report of version %" PRIu64, version);
    r = post_statement(rc, "/v1/evaluations", body, len, what, err);
    free(body);
    return r;
}

int fa_round_client_post_privacy(fa_round_client *rc, Fedagg__PrivacyStatement *st, fa_error *err)
{
    Fedagg__SignedPrivacy sp = FEDAGG__SIGNED_PRIVACY__INIT;
    uint8_t *stb = NULL, *body = NULL, sig[64];
    size_t len, blen;
    char what[96];
    int r;

    st->federation_id = (char *)rc->federation_id;
    st->region = (char *)rc->region_id;
    len = fedagg__privacy_statement__get_packed_size(st);
    if (!(stb = malloc(len ? len : 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "privacy statement: out of memory");
    fedagg__privacy_statement__pack(st, stb);
    r = fa_identity_sign_statement(rc->seed, FA_IDENTITY_DOMAIN_PRIVACY, stb, len, sig);
    if (r != 0) {
        free(stb);
        return fa_errorf(err, r, "privacy statement: signing failed");
    }
    sp.statement.data = stb;
    sp.statement.len = len;
    sp.signature.data = sig;
    sp.signature.len = sizeof(sig);
    blen = fedagg__signed_privacy__get_packed_size(&sp);
    if (!(body = malloc(blen ? blen : 1))) {
        free(stb);
        return fa_errorf(err, FA_ERR_NOMEM, "privacy statement: out of memory");
    }
    fedagg__signed_privacy__pack(&sp, body);
    snprintf(what, sizeof(what), "privacy statement of round %" PRIu64 " attempt %u", st->round,
             st->attempt);
    r = post_statement(rc, "/v1/privacy", body, blen, what, err);
    free(body);
    free(stb);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Saved attempt state                                                       */
/* ------------------------------------------------------------------------ */

static void state_paths(fa_round_client *rc, char *st, char *dl, size_t n)
{
    snprintf(st, n, "%s/attempt.state", rc->state_dir);
    snprintf(dl, n, "%s/attempt.delta", rc->state_dir);
}

/* The update buffer's file: a header page (the saved attempt's header line,
 * padded with spaces: read_saved reads it like attempt.delta's), then the
 * floats, page-aligned. */
#define UPDATE_HDR 4096

static void update_path(const fa_round_client *rc, char *p, size_t n)
{
    snprintf(p, n, "%s/update.f32", rc->state_dir);
}

/* Unmaps the update buffer; remove_file (at the end) also removes its file
 * unless a saved attempt still names it (attempt.delta is a link to it). */
static void unmap_update(fa_round_client *rc, int remove_file)
{
    char path[4096];
    struct stat sb;

    if (!rc->ubuf_map)
        return;
    munmap(rc->ubuf_map, rc->ubuf_len);
    rc->ubuf_map = NULL;
    rc->ubuf_len = rc->ubuf_d = 0;
    update_path(rc, path, sizeof(path));
    if (remove_file && stat(path, &sb) == 0 && sb.st_nlink == 1)
        unlink(path);
}

int fa_round_client_update_buffer(fa_round_client *rc, size_t d, float **out, fa_error *err)
{
    char path[4096];
    size_t len = UPDATE_HDR + (d ? d : 1) * sizeof(float);
    void *p;
    int fd, e;

    *out = NULL;
    if (rc->ubuf_map && rc->ubuf_d == d) {
        *out = (float *)(void *)(rc->ubuf_map + UPDATE_HDR);
        return 0;
    }
    unmap_update(rc, 0);
    update_path(rc, path, sizeof(path));
    /* A new file: the old one may be a saved attempt's update, which lives
     * on as attempt.delta; and the pages of a new file need no reads. */
    if (unlink(path) != 0 && errno != ENOENT)
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: cannot remove the old file: %s", path,
                         strerror(errno));
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: %s", path, strerror(errno));
    e = posix_fallocate(fd, 0, (off_t)len);
    if (e != 0) {
        close(fd);
        unlink(path);
        return fa_errorf(err, e == ENOSPC ? FA_ERR_NOSPACE : FA_ERR_IO,
                         "update buffer %s: cannot reserve %zu bytes: %s", path, len, strerror(e));
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        unlink(path);
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: mmap of %zu bytes: %s", path, len,
                         strerror(e));
    }
    rc->ubuf_map = p;
    rc->ubuf_len = len;
    rc->ubuf_d = d;
    *out = (float *)(void *)(rc->ubuf_map + UPDATE_HDR);
    return 0;
}

/* Saves an update that lies in the update buffer without copying it: the
 * header into its first page, then attempt.delta as a second name for the
 * file (link, rename).  Returns 0, or 1 when the filesystem has no hard
 * links (the caller copies). */
static int save_update_in_place(fa_round_client *rc, const char *dl, const char *hdr, size_t n,
                                fa_error *err)
{
    char path[4096], tmp[4200];

    memset(rc->ubuf_map, ' ', UPDATE_HDR);
    memcpy(rc->ubuf_map, hdr, n - 1); /* without its newline */
    rc->ubuf_map[UPDATE_HDR - 1] = '\n';
    update_path(rc, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", dl);
    unlink(tmp);
    if (link(path, tmp) != 0) {
        if (errno == EPERM || errno == EOPNOTSUPP || errno == EXDEV || errno == EMLINK)
            return 1;
        return fa_errorf(err, FA_ERR_IO, "saving the attempt: link %s -> %s: %s", tmp, path,
                         strerror(errno));
    }
    if (rename(tmp, dl) != 0) {
        int e = errno;
        unlink(tmp);
        return fa_errorf(err, FA_ERR_IO, "saving the attempt: rename %s -> %s: %s", tmp, dl,
                         strerror(e));
    }
    return 0;
}

/* Both files are replaced atomically but not fsync'ed: a SIGKILL never loses
 * them, and losing them to a machine crash loses the attempt's keys with its
 * input, so no mask can ever meet another input: the restarted worker just
 * sits that attempt out (the aggregator refuses a second, different
 * advertisement) and joins the next.  Saving 4 bytes per parameter with
 * fsync before every upload would cost more than the upload on a fast link.
 *
 * attempt.state: "<magic> <round> <attempt> <d> <weight>\n" then the sealed
 * client (weight in C99 hex-float notation, exact).
 * attempt.delta: the same header line (padded with spaces before its
 * newline when it is the update buffer's file), then d floats
 * (little-endian).  An update in the update buffer is not written again:
 * attempt.delta is a second name for its file. */
/* attempt.delta: a second name for the update buffer's file when the update
 * lies there and the filesystem links, else a copy of the update. */
static int save_update(fa_round_client *rc, const char *dl, const char *hdr, size_t n,
                       const float *delta, size_t d, fa_error *err)
{
    fa_atomic_file *f = NULL;
    int r;

    if (rc->ubuf_map && d == rc->ubuf_d &&
        delta == (const float *)(void *)(rc->ubuf_map + UPDATE_HDR)) {
        r = save_update_in_place(rc, dl, hdr, n, err);
        if (r != 1)
            return r;
    }
    r = fa_atomic_file_open(&f, dl, 0600, err);
    if (r == 0)
        r = fa_atomic_file_write(f, hdr, n, err);
    if (r == 0)
        r = fa_atomic_file_write(f, delta, d * sizeof(float), err);
    if (r == 0)
        return fa_atomic_file_commit_nosync(f, err);
    fa_atomic_file_abort(f);
    return r;
}

static int save_attempt(fa_round_client *rc, const fa_secagg_client *c, uint64_t round,
                        uint32_t attempt, const float *delta, size_t d, double weight,
                        fa_error *err)
{
    char st[4096], dl[4096], hdr[128];
    fa_atomic_file *f = NULL;
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    int n, r;

    state_paths(rc, st, dl, sizeof(st));
    n = snprintf(hdr, sizeof(hdr), "%s %" PRIu64 " %u %zu %a\n", STATE_MAGIC, round, attempt, d,
                 weight);
    r = save_update(rc, dl, hdr, (size_t)n, delta, d, err);
    if (r == 0)
        r = fa_secagg_client_save(c, &blob, &blob_len, err);
    if (r == 0)
        r = fa_atomic_file_open(&f, st, 0600, err);
    if (r == 0)
        r = fa_atomic_file_write(f, hdr, (size_t)n, err);
    if (r == 0)
        r = fa_atomic_file_write(f, blob, blob_len, err);
    if (r == 0) {
        r = fa_atomic_file_commit_nosync(f, err);
        f = NULL;
    }
    fa_atomic_file_abort(f);
    if (blob) {
        sodium_memzero(blob, blob_len);
        free(blob);
    }
    return r;
}

/* Reads a saved file whose header matches; *payload points into *data. */
static int read_saved(const char *path, uint64_t round, uint32_t attempt, uint8_t **data,
                      size_t *len, const uint8_t **payload, size_t *payload_len, size_t *d,
                      double *weight)
{
    char magic[32];
    uint64_t r;
    unsigned a;
    size_t dd;
    double wt;
    int used = 0;
    uint8_t *nl;

    if (fa_file_read_all(path, data, len, (size_t)8 << 30, NULL) != 0)
        return FA_ERR_NOTFOUND;
    nl = memchr(*data, '\n', *len < UPDATE_HDR ? *len : UPDATE_HDR);
    if (nl &&
        sscanf((char *)*data, "%31s %" SCNu64 " %u %zu %la%n", magic, &r, &a, &dd, &wt, &used) == 5)
        while ((uint8_t *)*data + used < nl &&
               (*data)[used] == ' ') /* the update buffer's padding */
            used++;
    if (!nl || used == 0 || strcmp(magic, STATE_MAGIC) || (uint8_t *)*data + used != nl ||
        r != round || a != attempt) {
        free(*data);
        *data = NULL;
        return FA_ERR_NOTFOUND;
    }
    *payload = nl + 1;
    *payload_len = *len - (size_t)(nl + 1 - *data);
    *d = dd;
    *weight = wt;
    return 0;
}

int fa_round_client_has_saved(fa_round_client *rc, uint64_t round, uint32_t attempt)
{
    char st[4096], dl[4096];
    uint8_t *data = NULL;
    const uint8_t *p;
    size_t len, pl, d;
    double wt;
    int ok;

    state_paths(rc, st, dl, sizeof(st));
    ok = read_saved(st, round, attempt, &data, &len, &p, &pl, &d, &wt) == 0;
    if (data) {
        sodium_memzero(data, len);
        free(data);
    }
    return ok;
}

void fa_round_client_forget(fa_round_client *rc)
{
    char st[4096], dl[4096];
    state_paths(rc, st, dl, sizeof(st));
    unlink(st);
    unlink(dl);
}

/* Restores the client and its update of round/attempt. */
static int restore_attempt(fa_round_client *rc, uint64_t round, uint32_t attempt,
                           fa_secagg_client **c, float **delta, size_t *d, double *weight,
                           fa_error *err)
{
    char st[4096], dl[4096];
    uint8_t *sdata = NULL, *ddata = NULL;
    const uint8_t *sp, *dp;
    size_t slen, dlen, spl, dpl, sd, dd;
    double w1, w2;
    int r;

    state_paths(rc, st, dl, sizeof(st));
    if (read_saved(st, round, attempt, &sdata, &slen, &sp, &spl, &sd, &w1) != 0 ||
        read_saved(dl, round, attempt, &ddata, &dlen, &dp, &dpl, &dd, &w2) != 0 || sd != dd ||
        w1 != w2 || dpl != dd * sizeof(float)) {
        r = fa_errorf(err, FA_ERR_NOTFOUND,
                      "no complete saved state for round %" PRIu64 " attempt %u", round, attempt);
        goto out;
    }
    *delta = malloc(dd * sizeof(float) + 1);
    if (!*delta) {
        r = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(*delta, dp, dd * sizeof(float));
    *d = dd;
    *weight = w1;
    r = fa_secagg_client_restore(c, sp, spl, rc->seed, rc->members, rc->n_members, NULL, err);
    if (r != 0) {
        free(*delta);
        *delta = NULL;
    }
out:
    if (sdata) {
        sodium_memzero(sdata, slen);
        free(sdata);
    }
    free(ddata);
    return r;
}

/* ------------------------------------------------------------------------ */
/* One attempt                                                               */
/* ------------------------------------------------------------------------ */

/* Debugging and tests: with FEDAGG_DEBUG_DUMP_DIR set, the quantised update
 * this region masks is written there (input-<region>-r<R>-a<A>.u32, the
 * ring elements little-endian), so that a test can check the aggregator's
 * unmasked sum bit for bit.  It is the region's own update, written on the
 * region's machine; never set this in production. */
static void debug_dump_input(fa_round_client *rc, const fa_secagg_client *c,
                             const Fedagg__FederationInfo *info)
{
    const char *dir = getenv("FEDAGG_DEBUG_DUMP_DIR");
    size_t n = (size_t)fa_ddp_vector_len(info);
    uint32_t *q;
    char path[4096];
    fa_error err;

    if (!dir || !*dir)
        return;
    q = malloc(n * sizeof(uint32_t));
    if (!q)
        return;
    fa_error_clear(&err);
    snprintf(path, sizeof(path), "%s/input-%s-r%" PRIu64 "-a%u.u32", dir, rc->region_id,
             info->round, info->attempt);
    if (fa_secagg_client_input_ring(c, q, n, &err) == 0 &&
        fa_file_write_atomic(path, q, n * sizeof(uint32_t), 0600, &err) == 0)
        fa_log(FA_LOG_WARN, "debug dump of the quantised update written (FEDAGG_DEBUG_DUMP_DIR)",
               "file=%s", path);
    free(q);
}

/* Checks the signed audit record of the round: signed by the aggregator's
 * key, this region among the participants with the commitment to exactly
 * the bytes it uploaded, and the new model digest it was told; and that the
 * log it is in extends the one this region verified before (which it then
 * trusts): an inconsistency raises the alarm. */
static int verify_proof(fa_round_client *rc, const Fedagg__FederationInfo *info,
                        const fa_secagg_client *c, const uint8_t model_sha[32], fa_error *err)
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
    snprintf(path, sizeof(path), "/v1/audit/proof?round=%" PRIu64 "&region=%s", info->round,
             rc->region_id);
    req.method = "GET";
    req.path = path;
    req.timeout_ms = SHORT_MS * 4;
    req.idempotent = 1;
    r = fa_h3_client_request(rc->h3, &req, &resp, err);
    if (r != 0)
        goto out;
    if (resp.status != 200) {
        char msg[512];
        error_text(&resp, msg, sizeof(msg));
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

/* The update as the attempt's input: through the float codec, or with the
 * federation's distributed DP as this region's noisy ring vector
 * (worker/ddp.h: a function of the update and the identity key, so a
 * resumed attempt sets the same input; every region weighs 1 there).
 * *ring is the caller's to free once c is gone. */
static int set_input(fa_round_client *rc, fa_secagg_client *c, const Fedagg__FederationInfo *info,
                     const float *delta, size_t d, double weight, uint32_t **ring, fa_error *err)
{
    size_t n = 0;
    int r;
    if (!info->ddp)
        return fa_secagg_client_set_input_f32(c, delta, d, weight, err);
    free(*ring);
    r = fa_ddp_encode_update(info, rc->seed, rc->federation_id, rc->region_id, delta, d, ring, &n,
                             err);
    return r != 0 ? r : fa_secagg_client_set_input_ring(c, *ring, n, err);
}

int fa_round_client_run(fa_round_client *rc, const Fedagg__FederationInfo *info, const float *delta,
                        size_t d, double weight, fa_round_outcome *out, fa_error *err)
{
    fa_secagg_config cfg = {0};
    fa_secagg_client *c = NULL;
    fa_h3_client_stats s0, s1;
    float *saved_delta = NULL;
    uint32_t *ring = NULL; /* distributed DP: the noisy input, borrowed by c */
    uint8_t *msg = NULL, *ans = NULL;
    size_t msg_len = 0, ans_len = 0;
    uint64_t t0;
    int r, resumed = 0;

    memset(out, 0, sizeof(*out));
    out->round = info->round;
    out->attempt = info->attempt;
    if (rc->alarmed)
        return fa_errorf(err, FA_ERR_VERIFY, "%s", rc->alarm);
    if (info->aggregator_public_key.len == 32) {
        memcpy(rc->announced_pk, info->aggregator_public_key.data, 32);
        rc->have_announced = 1;
    }
    fa_h3_client_get_stats(rc->h3, &s0);
    if (!info->quant)
        return fa_errorf(err, FA_ERR_PROTOCOL, "federation info without quantisation parameters");
    cfg.federation_id = rc->federation_id;
    cfg.round = info->round;
    cfg.attempt = info->attempt;
    cfg.threshold = info->threshold;
    cfg.neighbours = info->neighbours;
    cfg.vector_len = fa_ddp_vector_len(info);
    cfg.ring_bits = info->quant->ring_bits;
    cfg.quant.bits = info->quant->bits;
    cfg.quant.clip_mode = (int)info->quant->clip_mode;
    cfg.quant.clip_l2_norm = info->quant->clip_l2_norm;
    cfg.quant.clip_value = info->quant->clip_value;
    /* The model this region trained from: the one it downloaded, or (a
     * caller that did not download through this client) the one the
     * federation announces. */
    if (rc->have_model && rc->model_version == info->model_version)
        memcpy(cfg.model_sha256, rc->model_sha, 32);
    else if (info->model_sha256.len == 32)
        memcpy(cfg.model_sha256, info->model_sha256.data, 32);

#define PHASE_START() (t0 = fa_time_mono_ns())
#define PHASE_END(k) (out->phase_seconds[k] = (double)(fa_time_mono_ns() - t0) / 1e9)

    if (fa_round_client_has_saved(rc, info->round, info->attempt)) {
        size_t sd = 0;
        r = restore_attempt(rc, info->round, info->attempt, &c, &saved_delta, &sd, &weight, err);
        if (r == FA_ERR_UNSUPPORTED) {
            /* saved by an older fedagg: this attempt is lost to the region */
            char q[600];
            fa_log(FA_LOG_WARN, "saved attempt of an older format dropped; joining the next one",
                   "round=%" PRIu64 " attempt=%u detail=%s", info->round, info->attempt,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
            fa_round_client_forget(rc);
            r = fa_errorf(err, FA_ERR_REPLAY, "the saved attempt cannot be resumed");
            goto out;
        }
        if (r != 0)
            goto out;
        if (sd != info->num_params) {
            r = fa_errorf(err, FA_ERR_STATE, "saved update has %zu parameters, the model %" PRIu64,
                          sd, info->num_params);
            goto out;
        }
        delta = saved_delta;
        d = sd;
        resumed = 1;
        r = set_input(rc, c, info, delta, d, weight, &ring, err);
        if (r == FA_ERR_STATE) {
            /* the saved update is not the one this attempt's masks were
             * bound to (overwritten since): never mask it; sit this one out */
            char q[600];
            fa_log(FA_LOG_WARN,
                   "saved attempt's update changed since it was saved; joining the next",
                   "round=%" PRIu64 " attempt=%u detail=%s", info->round, info->attempt,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
            fa_round_client_forget(rc);
            r = fa_errorf(err, FA_ERR_REPLAY, "the saved attempt cannot be resumed");
        }
        if (r != 0)
            goto out;
        debug_dump_input(rc, c, info);
        fa_log(FA_LOG_INFO, "resuming the attempt from saved state", "round=%" PRIu64 " attempt=%u",
               info->round, info->attempt);
    } else {
        if (!delta || d != info->num_params) {
            r = fa_errorf(err, FA_ERR_INVAL, "update has %zu parameters, the model %" PRIu64, d,
                          info->num_params);
            goto out;
        }
        fa_round_client_forget(rc);
        r = fa_secagg_client_new(&c, &cfg, rc->seed, rc->region_id, rc->members, rc->n_members,
                                 NULL, err);
        if (r != 0)
            goto out;

        /* Round 0: advertise keys, receive U1. */
        PHASE_START();
        r = fa_secagg_client_advertise(c, &msg, &msg_len, err);
        if (r == 0)
            r = post_phase(rc, info, K_ADVERTISE, msg, msg_len, NULL, &ans, &ans_len, err);
        /* refused, and the federation announces another model than the
         * one this region trained from: it must download it again */
        if (r == FA_ERR_REPLAY && info->model_sha256.len == 32 &&
            sodium_memcmp(info->model_sha256.data, cfg.model_sha256, 32) != 0)
            out->model_stale = 1;
        if (r == 0)
            r = fa_secagg_client_peer_list(c, ans, ans_len, fa_time_unix_ms(), err);
        if (r == FA_ERR_VERIFY) {
            /* A peer signed another model, or a PeerList the aggregator
             * tampered with: nothing of this region's update has left. */
            char q[600];
            fa_log(FA_LOG_ERROR,
                   "ALARM: the PeerList does not check out (a peer trained from another model, "
                   "or the aggregator altered it); this attempt is refused before any share or "
                   "masked byte leaves",
                   "round=%" PRIu64 " attempt=%u detail=%s", info->round, info->attempt,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
        }
        free(msg);
        free(ans);
        msg = ans = NULL;
        if (r != 0)
            goto out;
        PHASE_END(0);

        /* Round 1: share keys, receive U2's shares. */
        PHASE_START();
        r = fa_secagg_client_share_keys(c, &msg, &msg_len, err);
        if (r == 0)
            r = post_phase(rc, info, K_SHARES, msg, msg_len, NULL, &ans, &ans_len, err);
        if (r == 0)
            r = fa_secagg_client_shares(c, ans, ans_len, fa_time_unix_ms(), err);
        free(msg);
        free(ans);
        msg = ans = NULL;
        if (r != 0)
            goto out;
        PHASE_END(1);

        r = set_input(rc, c, info, delta, d, weight, &ring, err);
        if (r == 0)
            r = save_attempt(rc, c, info->round, info->attempt, delta, d, weight, err);
        if (r != 0)
            goto out;
        debug_dump_input(rc, c, info);
    }

    /* Round 2: the masked upload, receive U3. */
    PHASE_START();
    r = post_phase(rc, info, K_MASKED, NULL, 0, c, &ans, &ans_len, err);
    if (r != 0)
        goto out;
    PHASE_END(2);
    {
        Fedagg__SurvivorList *sl = fedagg__survivor_list__unpack(NULL, ans_len, ans);
        if (sl) {
            out->survivors = (uint32_t)sl->n_survivors;
            fedagg__survivor_list__free_unpacked(sl, NULL);
        }
    }

    /* Round 3: consistency check. */
    PHASE_START();
    r = fa_secagg_client_survivors(c, ans, ans_len, fa_time_unix_ms(), &msg, &msg_len, err);
    free(ans);
    ans = NULL;
    if (r == 0)
        r = post_phase(rc, info, K_CONSISTENCY, msg, msg_len, NULL, &ans, &ans_len, err);
    free(msg);
    msg = NULL;
    if (r != 0)
        goto out;
    PHASE_END(3);

    /* Round 4: unmasking, receive the RoundResult. */
    PHASE_START();
    r = fa_secagg_client_signatures(c, ans, ans_len, fa_time_unix_ms(), &msg, &msg_len, err);
    free(ans);
    ans = NULL;
    if (r == 0)
        r = post_phase(rc, info, K_UNMASK, msg, msg_len, NULL, &ans, &ans_len, err);
    free(msg);
    msg = NULL;
    if (r != 0)
        goto out;
    PHASE_END(4);
    {
        Fedagg__RoundResult *res = fedagg__round_result__unpack(NULL, ans_len, ans);
        if (!res || res->model_sha256.len != 32) {
            if (res)
                fedagg__round_result__free_unpacked(res, NULL);
            r = fa_errorf(err, FA_ERR_PROTOCOL, "undecodable RoundResult");
            goto out;
        }
        out->new_version = res->new_version;
        out->leaf_index = res->leaf_index;
        memcpy(out->model_sha256, res->model_sha256.data, 32);
        fedagg__round_result__free_unpacked(res, NULL);
    }
    fa_round_client_forget(rc);
    {
        fa_error perr;
        fa_error_clear(&perr);
        if (verify_proof(rc, info, c, out->model_sha256, &perr) == 0)
            out->proof_verified = 1;
        else
            fa_log(FA_LOG_WARN, "audit proof not verified", "round=%" PRIu64 " reason=\"%s\"",
                   info->round, perr.msg);
    }
    r = 0;
out:
    if (r != 0 && r != FA_ERR_REPLAY && !resumed)
        fa_log(FA_LOG_DEBUG, "attempt failed", "round=%" PRIu64 " attempt=%u", info->round,
               info->attempt);
    fa_h3_client_get_stats(rc->h3, &s1);
    out->bytes_up = s1.bytes_sent - s0.bytes_sent;
    out->bytes_down = s1.bytes_received - s0.bytes_received;
    free(ans);
    free(saved_delta);
    fa_secagg_client_del(c);
    free(ring);
    return r;
}
