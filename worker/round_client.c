/* round_client.c - a region's side of one round over HTTP/3: the client's
 * setup, the federation's position and the five phases of an attempt (see
 * round_client.h; the other concerns are the round_client_*.c files listed
 * in round_client_internal.h). */
#include "worker/round_client_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/identity.h"
#include "netconfig/quic_config.h"
#include "secagg.pb-c.h"
#include "worker/ddp.h"

#define LONG_POLL_MS (45u * 60u * 1000u) /* longer than any phase deadline */
#define MAX_TRANSIENT 20                 /* transport failures tolerated per request */

uint64_t fa_round_client_backoff_ms(unsigned attempt)
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
    if (cfg->service_routes)
        snprintf(rc->base, sizeof(rc->base), "/v1/federations/%s", rc->federation_id);
    else
        snprintf(rc->base, sizeof(rc->base), "/v1");

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

void fa_round_client_del(fa_round_client *rc)
{
    if (!rc)
        return;
    fa_round_client_unmap_update(rc, 1);
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

void fa_round_client_error_text(const fa_h3_response *resp, char *buf, size_t n)
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
    uint64_t start = fa_time_mono_ms();
    unsigned tries = 0;

    *info = NULL;
    for (;;) {
        fa_h3_client_req req = {0};
        fa_h3_response resp;
        uint64_t now = fa_time_mono_ms();
        uint32_t left = now - start < timeout_ms ? (uint32_t)(timeout_ms - (now - start)) : 1;
        char path[160];
        int r;

        snprintf(path, sizeof(path), "%s/federation", rc->base);
        req.method = "GET";
        req.path = path;
        req.timeout_ms = left < FA_ROUND_CLIENT_SHORT_MS ? left : FA_ROUND_CLIENT_SHORT_MS;
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
            fa_round_client_error_text(&resp, msg, sizeof(msg));
            fa_h3_response_free(&resp);
            if (status == 403)
                return fa_errorf(err, FA_ERR_AUTH, "the aggregator refuses this region: %s", msg);
            fa_log(FA_LOG_WARN, "federation info refused; retrying", "status=%d", status);
        } else {
            fa_log(FA_LOG_WARN, "aggregator unreachable; retrying", "error=%s", fa_strerror(r));
        }
        now = fa_time_mono_ms();
        if (now - start >= timeout_ms)
            return fa_errorf(err, FA_ERR_TIMEOUT, "aggregator unreachable for %u ms", timeout_ms);
        fa_time_sleep_ms(fa_round_client_backoff_ms(tries++), NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* One attempt                                                               */
/* ------------------------------------------------------------------------ */

/* The position of the federation, to tell a broken connection (same
 * attempt: send again) from a federation that moved on. */
static int still_current(fa_round_client *rc, const Fedagg__FederationInfo *info)
{
    Fedagg__FederationInfo *now = NULL;
    int same;
    if (fa_round_client_info(rc, FA_ROUND_CLIENT_SHORT_MS * 4, &now, NULL) != 0)
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

/* POSTs one phase's message (or, for FA_SECAGG_MASKED, the masked stream of c) and
 * returns the 200 body.  Retries transport failures and 5xx with back-off
 * while the attempt is current; 409 -> FA_ERR_REPLAY. */
static int post_phase(fa_round_client *rc, const Fedagg__FederationInfo *info, int kind,
                      const uint8_t *body, size_t len, fa_secagg_client *c, uint8_t **out,
                      size_t *out_len, fa_error *err)
{
    char path[256];
    unsigned transient = 0;
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    fa_h3_header hm[] = {{"content-type", "application/octet-stream"}};

    /* a phase's message, or the masked stream of c: never both */
    assert(kind >= FA_SECAGG_ADVERTISE && kind <= FA_SECAGG_UNMASK);
    assert((kind == FA_SECAGG_MASKED) == (c != NULL));
    snprintf(path, sizeof(path), "%s/rounds/%" PRIu64 "/%u/%s", rc->base, info->round,
             info->attempt, fa_secagg_phase_names[kind]);
    {
        char fp[64];
        snprintf(fp, sizeof(fp), "worker-before-%s", fa_secagg_phase_names[kind]);
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
        if (kind == FA_SECAGG_MASKED) {
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
            fa_round_client_error_text(&resp, msg, sizeof(msg));
            fa_h3_response_free(&resp);
            if (status == 409)
                return fa_errorf(err, FA_ERR_REPLAY, "%s: %s", fa_secagg_phase_names[kind], msg);
            if (status == 503) {
                /* Upload slots full: wait our turn.  The aggregator stopped
                 * the body at once, so a retry costs a round trip, not an
                 * upload: poll briskly. */
                fa_time_sleep_ms(30 + randombytes_uniform(70), NULL);
                continue;
            }
            if (status < 500)
                return fa_errorf(err, FA_ERR_PROTOCOL, "%s refused (%d): %s",
                                 fa_secagg_phase_names[kind], status, msg);
            fa_log(FA_LOG_WARN, "aggregator error; retrying", "phase=%s status=%d",
                   fa_secagg_phase_names[kind], status);
        } else {
            fa_log(FA_LOG_WARN, "request failed; retrying", "phase=%s error=%s",
                   fa_secagg_phase_names[kind], fa_strerror(r));
        }
        if (++transient > MAX_TRANSIENT)
            return fa_errorf(err, r ? r : FA_ERR_HTTP, "%s: giving up after %u failures",
                             fa_secagg_phase_names[kind], transient);
        /* A connection lost under the request (the aggregator restarted: a
         * stateless reset in the middle of a masked upload, which cannot be
         * replayed by the transport) is sent again at once; the transport
         * backs off by itself while it cannot connect.  Repeated failures
         * back off here. */
        if (!(r == FA_ERR_QUIC && transient == 1))
            fa_time_sleep_ms(fa_round_client_backoff_ms(transient - 1), NULL);
        if (!still_current(rc, info))
            return fa_errorf(err, FA_ERR_REPLAY, "%s: the federation moved on",
                             fa_secagg_phase_names[kind]);
    }
}

/* Debugging and tests: with FEDAGG_DEBUG_DUMP_DIR set, the quantised update
 * this region masks is written there (input-<region>-r<R>-a<A>.u32, the
 * ring elements little-endian), so that a test can check the aggregator's
 * unmasked sum bit for bit; "{federation}" in it stands for the
 * federation's id, as in the aggregator's (a region agent's federations
 * each dump into their own).  It is the region's own update, written on
 * the region's machine: a test hook (common/fa_failpoint.h), not in a
 * release build. */
static void debug_dump_input(fa_round_client *rc, const fa_secagg_client *c,
                             const Fedagg__FederationInfo *info)
{
#ifdef FA_TEST_HOOKS
    const char *env = getenv("FEDAGG_DEBUG_DUMP_DIR"), *at;
    size_t n = (size_t)fa_ddp_vector_len(info);
    uint32_t *q;
    char path[4096], dir[2048];
    fa_error err;

    if (!env || !*env)
        return;
    at = strstr(env, "{federation}");
    if (at)
        snprintf(dir, sizeof(dir), "%.*s%s%s", (int)(at - env), env, rc->federation_id,
                 at + strlen("{federation}"));
    else
        snprintf(dir, sizeof(dir), "%s", env);
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
#else
    (void)rc, (void)c, (void)info;
#endif
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
        r = fa_round_client_restore_attempt(rc, info->round, info->attempt, &c, &saved_delta, &sd,
                                            &weight, err);
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
            r = post_phase(rc, info, FA_SECAGG_ADVERTISE, msg, msg_len, NULL, &ans, &ans_len, err);
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
        PHASE_END(FA_SECAGG_ADVERTISE);

        /* Round 1: share keys, receive U2's shares. */
        PHASE_START();
        r = fa_secagg_client_share_keys(c, &msg, &msg_len, err);
        if (r == 0)
            r = post_phase(rc, info, FA_SECAGG_SHARES, msg, msg_len, NULL, &ans, &ans_len, err);
        if (r == 0)
            r = fa_secagg_client_shares(c, ans, ans_len, fa_time_unix_ms(), err);
        free(msg);
        free(ans);
        msg = ans = NULL;
        if (r != 0)
            goto out;
        PHASE_END(FA_SECAGG_SHARES);

        r = set_input(rc, c, info, delta, d, weight, &ring, err);
        if (r == 0)
            r = fa_round_client_save_attempt(rc, c, info->round, info->attempt, delta, d, weight,
                                             err);
        if (r != 0)
            goto out;
        debug_dump_input(rc, c, info);
    }

    /* Round 2: the masked upload, receive U3. */
    PHASE_START();
    r = post_phase(rc, info, FA_SECAGG_MASKED, NULL, 0, c, &ans, &ans_len, err);
    if (r != 0)
        goto out;
    PHASE_END(FA_SECAGG_MASKED);
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
        r = post_phase(rc, info, FA_SECAGG_CONSISTENCY, msg, msg_len, NULL, &ans, &ans_len, err);
    free(msg);
    msg = NULL;
    if (r != 0)
        goto out;
    PHASE_END(FA_SECAGG_CONSISTENCY);

    /* Round 4: unmasking, receive the RoundResult. */
    PHASE_START();
    r = fa_secagg_client_signatures(c, ans, ans_len, fa_time_unix_ms(), &msg, &msg_len, err);
    free(ans);
    ans = NULL;
    if (r == 0)
        r = post_phase(rc, info, FA_SECAGG_UNMASK, msg, msg_len, NULL, &ans, &ans_len, err);
    free(msg);
    msg = NULL;
    if (r != 0)
        goto out;
    PHASE_END(FA_SECAGG_UNMASK);
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
        if (fa_round_client_verify_proof(rc, info, c, out->model_sha256, &perr) == 0)
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
