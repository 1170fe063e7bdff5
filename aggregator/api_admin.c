/* api_admin.c - the operators' HTTP/3 API.  See api_admin.h. */
#include "aggregator/api_admin.h"
#include "aggregator/api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/fed_gov.h"
#include "common/fa_log.h"
#include "common/fa_time.h"

#define ADMIN_PREFIX "/v1/admin/"
#define MAX_ADMIN_BODY 4096u /* bodies are ignored; anything larger is a mistake */

/* Marks a request already answered (its data pointer), so that on_body_end
 * does not answer again. */
static char answered;

static const char *const documents[] = {"status", "regions", "rounds", "models", "audit-head"};

static const char *const actions[] = {"pause", "resume", "abort", "drain", "admit"};

/* Who is asking, for the log: the operator's name, else the peer's. */
static const char *who(const fa_h3_request *req)
{
    const char *n = fa_h3_request_peer_name(req);
    return n && n[0] ? n : "(none)";
}

void fa_api_admin_respond_json(fa_h3_request *req, int status, const char *json)
{
    fa_h3_header h[] = {{"content-type", "application/json"}, {"cache-control", "no-store"}};
    fa_h3_respond(req, status, h, 2, json, strlen(json));
    fa_log(status < 400 ? FA_LOG_INFO : FA_LOG_WARN, "admin request",
           "operator=%s role=%s method=%s path=%s status=%d", who(req),
           fa_h3_request_peer_role(req) == FA_H3_ROLE_OPERATOR ? "operator" : "region",
           fa_h3_request_method(req), fa_h3_request_path(req), status);
}

void fa_api_admin_respond_msg(fa_h3_request *req, int status, const char *msg)
{
    json_t *o = json_object();
    char *text = NULL, pub[512];

    /* as an operator's client may read it: no paths of the server's files;
     * a failure of the aggregator itself is logged, not answered */
    if (status == 500) {
        fa_log(FA_LOG_ERROR, "admin request failed", "operator=%s path=%s error=\"%s\"", who(req),
               fa_h3_request_path(req), msg);
        snprintf(pub, sizeof(pub), "internal error of the aggregator (its log says what)");
    } else {
        fa_api_public_message(pub, sizeof(pub), msg);
    }
    if (o) {
        if (status < 400) {
            json_object_set_new(o, "ok", json_true());
            json_object_set_new(o, "message", json_string(pub));
        } else {
            json_object_set_new(o, "error", json_string(pub));
        }
        text = json_dumps(o, JSON_COMPACT);
        json_decref(o);
    }
    fa_api_admin_respond_json(req, text ? status : 500,
                              text ? text : "{\"error\":\"out of memory\"}");
    if (text && status >= 400)
        fa_log(FA_LOG_INFO, "admin request refused", "operator=%s path=%s reason=\"%s\"", who(req),
               fa_h3_request_path(req), msg);
    free(text);
}

int fa_api_admin_query_value(const char *q, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len > kl && !strncmp(q, key, kl) && q[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl == 0 || vl >= n)
                return 0;
            for (size_t i = 0; i < vl; i++) {
                char ch = q[kl + 1 + i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
                    return 0;
            }
            memcpy(out, q + kl + 1, vl);
            out[vl] = '\0';
            return 1;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int lookup(const char *name, const char *const *table, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, table[i]))
            return (int)i;
    return -1;
}

int fa_api_admin_operator_only(fa_h3_request *req)
{
    char msg[256];
    if (fa_h3_request_peer_role(req) == FA_H3_ROLE_OPERATOR)
        return 1;
    snprintf(msg, sizeof(msg),
             "the admin API takes operator certificates only (SAN URI fedagg://operator/<name>, "
             "deploy/pki.sh --operators); this one is region '%s''s",
             who(req));
    fa_api_admin_respond_msg(req, 403, msg);
    return 0;
}

/* ---- Governance of released models (aggregator/fed_gov.h) ---- */

/* GET .../governance, GET .../card?version=V (the default federation's
 * under /v1/admin/, another's under /v1/admin/federations/{id}/). */
static void gov_document(fa_h3_request *req, fa_fed *fed, const char *what)
{
    char vs[24], *doc = NULL, *end;
    unsigned long long v;
    fa_error err;
    int rc;

    fa_error_clear(&err);
    if (!strcmp(what, "governance")) {
        rc = fa_fed_governance_json(fed, &doc, &err);
    } else {
        if (!fa_api_admin_query_value(fa_h3_request_query(req), "version", vs, sizeof(vs)) ||
            (v = strtoull(vs, &end, 10), *end) || vs[0] == '-') {
            fa_api_admin_respond_msg(req, 400, "usage: GET .../card?version=V");
            return;
        }
        rc = fa_fed_model_card(fed, v, &doc, &err);
    }
    if (rc != 0) {
        fa_api_admin_respond_msg(req, rc == FA_ERR_NOTFOUND ? 404 : 500, fa_error_msg(&err, rc));
        return;
    }
    fa_api_admin_respond_json(req, 200, doc);
    free(doc);
}

/* POST .../release?version=V&channel=NAME, POST .../rollback. */
static void gov_action(fa_h3_request *req, fa_fed *fed, const char *name, const char *op)
{
    char vs[24], ch[64], msg[512], *end;
    unsigned long long v = 0;
    uint64_t round = 0, version = 0;
    uint32_t attempt = 0;
    fa_error err;
    int rc;

    fa_error_clear(&err);
    if (!strcmp(name, "release")) {
        if (!fa_api_admin_query_value(fa_h3_request_query(req), "version", vs, sizeof(vs)) ||
            !fa_api_admin_query_value(fa_h3_request_query(req), "channel", ch, sizeof(ch)) ||
            (v = strtoull(vs, &end, 10), *end) || vs[0] == '-') {
            fa_api_admin_respond_msg(req, 400, "usage: POST .../release?version=V&channel=NAME");
            return;
        }
        rc = fa_fed_admin_release(fed, op, v, ch, fa_time_mono_ms(), &err);
        if (rc == 0)
            snprintf(msg, sizeof(msg), "channel %s now points at version %llu (released by %s)", ch,
                     v, op);
    } else {
        rc = fa_fed_admin_rollback(fed, op, fa_time_mono_ms(), &err);
        fa_fed_position(fed, &round, &attempt, NULL, &version);
        if (rc == 0)
            snprintf(msg, sizeof(msg),
                     "rolled back by %s: the current model is version %llu, the last promoted "
                     "one; round %llu attempt %u trains from it",
                     op, (unsigned long long)version, (unsigned long long)round, attempt);
    }
    if (rc != 0) {
        fa_api_admin_respond_msg(req,
                                 rc == FA_ERR_STATE      ? 409
                                 : rc == FA_ERR_NOTFOUND ? 404
                                 : rc == FA_ERR_INVAL    ? 400
                                 : rc == FA_ERR_IO       ? 503
                                                         : 500,
                                 fa_error_msg(&err, rc));
        return;
    }
    fa_log(FA_LOG_INFO, "admin action", "operator=%s action=%s federation=%s", op, name,
           fa_fed_id(fed));
    fa_api_admin_respond_msg(req, 200, msg);
}

/* The HTTP status of a refusal of the service (service.h). */
int fa_api_admin_status_of(int rc)
{
    switch (rc) {
    case FA_ERR_STATE:
    case FA_ERR_EXISTS: return 409;
    case FA_ERR_NOTFOUND: return 404;
    case FA_ERR_INVAL:
    case FA_ERR_PARSE: return 400;
    case FA_ERR_AUTH: return 403;
    case FA_ERR_IO:
    case FA_ERR_NOSPACE:
    case FA_ERR_AGAIN: return 503;
    default: return 500;
    }
}

void fa_api_admin_document(fa_h3_request *req, fa_service *svc, const char *id, const char *what)
{
    fa_error err;
    fa_fed *fed;
    char *doc = NULL, msg[256];
    int gov = !strcmp(what, "governance") || !strcmp(what, "card");
    int rc;

    if (!gov && lookup(what, documents, sizeof(documents) / sizeof(documents[0])) < 0) {
        if (lookup(what, actions, sizeof(actions) / sizeof(actions[0])) >= 0 ||
            !strcmp(what, "archive") || !strcmp(what, "abort-round") || !strcmp(what, "release") ||
            !strcmp(what, "rollback")) {
            snprintf(msg, sizeof(msg), "%s is an action: use POST", what);
            fa_api_admin_respond_msg(req, 405, msg);
        } else {
            snprintf(msg, sizeof(msg),
                     "no admin document '%s' (status, regions, rounds, models, audit-head, "
                     "governance, card?version=V)",
                     what);
            fa_api_admin_respond_msg(req, 404, msg);
        }
        return;
    }
    fa_error_clear(&err);
    rc = fa_service_authorize(svc, fa_h3_request_peer_name(req), id, &err);
    if (rc == 0)
        rc = fa_service_fed(svc, id, &fed, &err);
    if (rc == 0 && gov) {
        gov_document(req, fed, what);
        return;
    }
    if (rc == 0)
        rc = fa_fed_admin_json(fed, what, fa_time_mono_ms(), &doc, &err);
    if (rc != 0) {
        fa_api_admin_respond_msg(req, fa_api_admin_status_of(rc), fa_error_msg(&err, rc));
        return;
    }
    fa_api_admin_respond_json(req, 200, doc);
    free(doc);
}

void fa_api_admin_action(fa_h3_request *req, fa_service *svc, const char *id, const char *action)
{
    const char *op = fa_h3_request_peer_name(req);
    /* The default federation's own path: abort is the attempt's, as it
     * always was (a federation's end is POST /v1/admin/federations/{id}/abort). */
    const char *svc_action = !id && !strcmp(action, "abort") ? "abort-round" : action;
    int drain = !strcmp(action, "drain") || !strcmp(action, "admit");
    char region[64] = "", msg[600];
    uint64_t round = 0;
    uint32_t attempt = 0;
    fa_fed *fed = NULL;
    fa_error err;
    int rc;

    if (drain &&
        !fa_api_admin_query_value(fa_h3_request_query(req), "region", region, sizeof(region))) {
        snprintf(msg, sizeof(msg), "usage: POST .../%s?region=ID (a region id of the federation)",
                 action);
        fa_api_admin_respond_msg(req, 400, msg);
        return;
    }
    fa_error_clear(&err);
    rc = fa_service_authorize(svc, op, id, &err);
    if (rc == 0 && (!strcmp(action, "release") || !strcmp(action, "rollback"))) {
        if ((rc = fa_service_fed(svc, id, &fed, &err)) == 0) {
            gov_action(req, fed, action, op);
            return;
        }
    } else if (rc == 0)
        rc = fa_service_act(svc, op, id, svc_action, drain ? region : NULL, fa_time_mono_ms(), msg,
                            sizeof(msg), &err);
    if (rc != 0) {
        fa_api_admin_respond_msg(req, fa_api_admin_status_of(rc), fa_error_msg(&err, rc));
        return;
    }
    fa_error_clear(&err);
    if (fa_service_fed(svc, id, &fed, &err) == 0)
        fa_fed_position(fed, &round, &attempt, NULL, NULL);
    fa_log(FA_LOG_INFO, "admin action",
           "operator=%s action=%s region=%s round=%llu attempt=%u federation=%s", op, action,
           region[0] ? region : "-", (unsigned long long)round, attempt, id ? id : "-");
    fa_api_admin_respond_msg(req, 200, msg);
}

static int on_get(fa_h3_request *req, void *arg)
{
    if (!fa_api_admin_operator_only(req))
        return 0;
    fa_api_admin_document(req, arg, NULL, fa_h3_request_path(req) + strlen(ADMIN_PREFIX));
    return 0;
}

static int on_post(fa_h3_request *req, void *arg)
{
    (void)arg;
    if (!fa_api_admin_operator_only(req)) {
        fa_h3_request_set_data(req, &answered);
        return 0;
    }
    fa_h3_request_set_max_body(req, MAX_ADMIN_BODY);
    return 0; /* the action runs once the (ignored) body is in: on_post_end */
}

static void on_post_end(fa_h3_request *req, void *arg)
{
    const char *name = fa_h3_request_path(req) + strlen(ADMIN_PREFIX);
    char msg[512];

    if (fa_h3_request_get_data(req) == &answered)
        return;
    if (lookup(name, actions, sizeof(actions) / sizeof(actions[0])) < 0 &&
        strcmp(name, "release") != 0 && strcmp(name, "rollback") != 0) {
        if (lookup(name, documents, sizeof(documents) / sizeof(documents[0])) >= 0) {
            snprintf(msg, sizeof(msg), "%s is a document: use GET %s%s", name, ADMIN_PREFIX, name);
            fa_api_admin_respond_msg(req, 405, msg);
        } else {
            snprintf(msg, sizeof(msg),
                     "no admin action '%s' (pause, resume, abort, drain?region=ID, "
                     "admit?region=ID, release?version=V&channel=NAME, rollback)",
                     name);
            fa_api_admin_respond_msg(req, 404, msg);
        }
        return;
    }
    fa_api_admin_action(req, arg, NULL, name);
}

int fa_api_admin_routes(fa_h3_server *srv, fa_service *svc)
{
    static const fa_h3_handler get = {on_get, NULL, NULL, NULL};
    static const fa_h3_handler post = {on_post, NULL, on_post_end, NULL};
    int rc;

    if ((rc = fa_h3_server_route(srv, "GET", ADMIN_PREFIX, &get, svc)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", ADMIN_PREFIX, &post, svc)) != 0)
        return rc;
    return 0;
}
