/* round_client_statement.c - the region's signed statements: federated
 * evaluation reports, privacy and data statements, posted best effort (see
 * round_client.h). */
#include "worker/round_client_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_time.h"
#include "crypto/identity.h"
#include "worker/eval_report.h"

#define EVAL_TRIES 4          /* an evaluation report is best effort: */
#define EVAL_BUDGET_MS 20000u /* at most this long, all tries together */

/* POSTs a signed statement (the same bytes on every try: a second copy is
 * the same statement) to path, best effort within EVAL_BUDGET_MS; `what`
 * names it in messages.  4xx are mapped to codes and not retried. */
static int post_statement(fa_round_client *rc, const char *path, const uint8_t *body, size_t len,
                          const char *what, fa_error *err)
{
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    uint64_t start = fa_time_mono_ms();
    int r;

    for (unsigned tries = 0;; tries++) {
        uint64_t used = fa_time_mono_ms() - start;
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
        req.timeout_ms = left < FA_ROUND_CLIENT_SHORT_MS / 2 ? (left > 1000 ? left : 1000)
                                                             : FA_ROUND_CLIENT_SHORT_MS / 2;
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
            fa_round_client_error_text(&resp, msg, sizeof(msg));
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
        pause = fa_round_client_backoff_ms(tries);
        if (tries + 1 >= EVAL_TRIES || fa_time_mono_ms() - start + pause >= EVAL_BUDGET_MS) {
            fa_error_prefix(err, r, "%s: giving up after %u tries", what, tries + 1);
            break;
        }
        fa_time_sleep_ms(pause, NULL);
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
    char what[96], route[160];
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
    snprintf(route, sizeof(route), "%s/evaluations", rc->base);
    r = post_statement(rc, route, body, len, what, err);
    free(body);
    return r;
}

int fa_round_client_post_privacy(fa_round_client *rc, Fedagg__PrivacyStatement *st, fa_error *err)
{
    Fedagg__SignedPrivacy sp = FEDAGG__SIGNED_PRIVACY__INIT;
    uint8_t *stb = NULL, *body = NULL, sig[64];
    size_t len, blen;
    char what[96], route[160];
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
    snprintf(route, sizeof(route), "%s/privacy", rc->base);
    r = post_statement(rc, route, body, blen, what, err);
    free(body);
    free(stb);
    return r;
}

int fa_round_client_post_signed(fa_round_client *rc, const char *path, const char *domain,
                                const uint8_t *statement, size_t len, const char *what,
                                fa_error *err)
{
    /* Every signed statement is {bytes statement = 1; bytes signature = 2}
     * on the wire: SignedEval's layout stands for them all. */
    Fedagg__SignedEval se = FEDAGG__SIGNED_EVAL__INIT;
    uint8_t *body, sig[64];
    char route[512];
    size_t blen;
    int r = fa_identity_sign_statement(rc->seed, domain, statement, len, sig);

    if (r != 0)
        return fa_errorf(err, r, "%s: signing failed", what);
    /* "/v1/<rest>" is the federation's route: under its prefix on a service */
    if (!strncmp(path, "/v1/", 4)) {
        snprintf(route, sizeof(route), "%s/%s", rc->base, path + 4);
        path = route;
    }
    se.statement.data = (uint8_t *)statement;
    se.statement.len = len;
    se.signature.data = sig;
    se.signature.len = sizeof(sig);
    blen = fedagg__signed_eval__get_packed_size(&se);
    if (!(body = malloc(blen ? blen : 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", what);
    fedagg__signed_eval__pack(&se, body);
    r = post_statement(rc, path, body, blen, what, err);
    free(body);
    return r;
}

const char *fa_round_client_federation(const fa_round_client *rc)
{
    return rc->federation_id;
}

const char *fa_round_client_region(const fa_round_client *rc)
{
    return rc->region_id;
}
