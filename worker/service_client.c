/* service_client.c - a region agent's requests to an aggregation service
 * (service_client.h). */
#include "worker/service_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "crypto/identity.h"
#include "netconfig/quic_config.h"
#include "transport/h3.h"

struct fa_service_client {
    char *region;
    char *name;    /* the service's, for messages */
    uint8_t *seed; /* sodium_malloc'ed identity seed */
    fa_h3_client *h3;
};

/* The fedagg.Error message of a refusal, or its status. */
static void error_text(const fa_h3_response *resp, char *buf, size_t n)
{
    Fedagg__Error *e = fedagg__error__unpack(NULL, resp->body_len, resp->body);
    if (e && e->message && e->message[0])
        snprintf(buf, n, "%.300s", e->message);
    else
        snprintf(buf, n, "HTTP status %d", resp->status);
    if (e)
        fedagg__error__free_unpacked(e, NULL);
}

static int status_code(int status)
{
    return status == 400   ? FA_ERR_PROTOCOL
           : status == 403 ? FA_ERR_AUTH
           : status == 404 ? FA_ERR_NOTFOUND
                           : FA_ERR_HTTP;
}

int fa_service_client_new(fa_service_client **out, const Fedagg__WorkerConfig *cfg, int service,
                          fa_error *err)
{
    const Fedagg__AggregationService *sv = cfg->services[service];
    fa_service_client *sc;
    fa_h3_client_config hc;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    *out = NULL;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    sc = calloc(1, sizeof(*sc));
    if (!sc)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    sc->region = strdup(cfg->region_id ? cfg->region_id : "");
    sc->name = strdup(sv->name ? sv->name : "");
    sc->seed = sodium_malloc(FA_IDENTITY_SEED_BYTES);
    if (!sc->region || !sc->name || !sc->seed) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    rc = fa_file_check_private(cfg->identity_key_file, err);
    if (rc == 0)
        rc = fa_file_read_all(cfg->identity_key_file, &data, &len, 1 << 16, err);
    if (rc == 0)
        rc = fa_identity_parse_secret(data, len, sc->seed, err);
    if (data) {
        sodium_memzero(data, len);
        free(data);
    }
    if (rc != 0) {
        fa_error_prefix(err, rc, "%s", cfg->identity_key_file);
        goto fail;
    }
    fa_h3_client_config_default(&hc);
    hc.server = sv->address;
    hc.server_name = sv->server_name && *sv->server_name ? sv->server_name : NULL;
    hc.ca_file = cfg->tls->ca_file;
    hc.cert_file = cfg->tls->cert_file;
    hc.key_file = cfg->tls->key_file;
    fa_netconfig_quic_opts(&hc.quic, cfg->quic);
    /* the agent's loop waits on these: fail fast, back off in the core */
    hc.connect_timeout_ms = 3000;
    hc.connect_attempts = 1;
    hc.reconnect_initial_ms = cfg->quic->reconnect_initial_ms;
    hc.reconnect_max_ms = cfg->quic->reconnect_max_ms;
    if ((rc = fa_h3_client_new(&sc->h3, &hc, err)) != 0) {
        fa_error_prefix(err, rc, "service '%s' (%s)", sc->name, sv->address);
        goto fail;
    }
    *out = sc;
    return 0;
fail:
    fa_service_client_del(sc);
    return rc;
}

void fa_service_client_del(fa_service_client *sc)
{
    if (!sc)
        return;
    fa_h3_client_del(sc->h3);
    if (sc->seed)
        sodium_free(sc->seed);
    free(sc->region);
    free(sc->name);
    free(sc);
}

int fa_service_client_list(fa_service_client *sc, uint32_t timeout_ms,
                           Fedagg__FederationList **list, fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    char msg[320];
    int rc;

    *list = NULL;
    memset(&resp, 0, sizeof(resp));
    req.method = "GET";
    req.path = "/v1/federations";
    req.timeout_ms = timeout_ms;
    req.idempotent = 1;
    req.max_response_bytes = 16u << 20;
    if ((rc = fa_h3_client_request(sc->h3, &req, &resp, err)) != 0)
        return fa_error_prefix(err, rc, "service '%s': GET /v1/federations", sc->name);
    if (resp.status != 200) {
        int status = resp.status;
        error_text(&resp, msg, sizeof(msg));
        fa_h3_response_free(&resp);
        return fa_errorf(err, status_code(status), "service '%s': GET /v1/federations: %d %s",
                         sc->name, status, msg);
    }
    *list = fedagg__federation_list__unpack(NULL, resp.body_len, resp.body);
    fa_h3_response_free(&resp);
    if (!*list)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "service '%s': GET /v1/federations: undecodable answer", sc->name);
    return 0;
}

int fa_service_client_decide(fa_service_client *sc, const char *id, int accept, const char *reason,
                             const uint8_t *config_digest, size_t digest_len, uint64_t unix_ms,
                             uint32_t timeout_ms, fa_error *err)
{
    Fedagg__RegionDecision d = FEDAGG__REGION_DECISION__INIT;
    Fedagg__SignedDecision sd = FEDAGG__SIGNED_DECISION__INIT;
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    uint8_t *stb = NULL, *body = NULL, sig[FA_IDENTITY_SIG_BYTES];
    char path[256], msg[320];
    size_t len, blen;
    int rc;

    d.federation_id = (char *)id;
    d.region = sc->region;
    d.accept = accept != 0;
    d.reason = (char *)(reason ? reason : "");
    d.config_digest.data = (uint8_t *)config_digest;
    d.config_digest.len = config_digest ? digest_len : 0;
    d.unix_ms = unix_ms;
    len = fedagg__region_decision__get_packed_size(&d);
    if (!(stb = malloc(len ? len : 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fedagg__region_decision__pack(&d, stb);
    if ((rc = fa_identity_sign_statement(sc->seed, FA_IDENTITY_DOMAIN_DECISION, stb, len, sig)) !=
        0) {
        free(stb);
        return fa_errorf(err, rc, "cannot sign the decision");
    }
    sd.statement.data = stb;
    sd.statement.len = len;
    sd.signature.data = sig;
    sd.signature.len = sizeof(sig);
    blen = fedagg__signed_decision__get_packed_size(&sd);
    if (!(body = malloc(blen))) {
        free(stb);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    fedagg__signed_decision__pack(&sd, body);
    free(stb);
    snprintf(path, sizeof(path), "/v1/federations/%s/decision", id);
    memset(&resp, 0, sizeof(resp));
    req.method = "POST";
    req.path = path;
    req.headers = h;
    req.nheaders = 1;
    req.body = body;
    req.body_len = blen;
    req.timeout_ms = timeout_ms;
    req.idempotent = 1; /* the same decision again is the same decision */
    rc = fa_h3_client_request(sc->h3, &req, &resp, err);
    free(body);
    if (rc != 0)
        return fa_error_prefix(err, rc, "service '%s': POST %s", sc->name, path);
    if (resp.status != 200) {
        int status = resp.status;
        error_text(&resp, msg, sizeof(msg));
        fa_h3_response_free(&resp);
        return fa_errorf(err, status_code(status), "service '%s': POST %s: %d %s", sc->name, path,
                         status, msg);
    }
    fa_h3_response_free(&resp);
    return 0;
}
