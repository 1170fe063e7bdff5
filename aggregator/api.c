/* api.c - HTTP/3 handlers of the aggregator.  See api.h. */
#include "aggregator/api.h"
#include "aggregator/api_admin.h"
#include "aggregator/service_api.h"
#include "aggregator/fed_gov.h"
#include "audit/audit_gov.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"

/* The largest protocol message body a region sends (not the masked upload,
 * which streams): its shares for 254 other regions are at most some 60 KB, a
 * statement or an evaluation a few KB.  A body beyond gets 413 as soon as
 * it passes this; every MiB more a peer could push into a buffer was CPU
 * spent on garbage (fedagg-bench hostile's streams part). */
#define MAX_MESSAGE (1u << 20)

struct req_ctx {
    fa_api *api;
    fa_h3_request *req;
    /* The federation the request is for: named by its path
     * (/v1/federations/{id}/..., fed_id) or the default one (fed_id "");
     * fed is set by admit() and cleared if that federation is closed while
     * the request lives (fa_api_fed_closing). */
    char fed_id[64];
    fa_fed *fed;
    const char *path;       /* the path as the unprefixed route has it: /v1/... */
    char path_buf[256];     /* its storage for a prefixed request */
    const fa_h3_handler *h; /* a prefixed request: the route's handlers */
    int kind;               /* enum fa_fed_kind; -1 for other requests */
    char region[64];
    uint64_t round;
    uint32_t attempt;
    uint8_t *buf; /* a protocol message being received */
    size_t len, cap;
    int uploading;      /* a masked upload is being summed */
    uint64_t upload;    /* its stream id (fa_fed_masked_begin) */
    int discard;        /* the body is read and dropped */
    uint64_t uncounted; /* body bytes not yet added to the region's count */
    int responded;
    int pending; /* in the long-poll list */
    struct req_ctx *next;
    struct req_ctx *all_prev, *all_next; /* every live request */
};

struct fa_api {
    fa_h3_server *srv;
    fa_service *svc;
    struct req_ctx *pending;
    size_t n_pending;
    struct req_ctx *all;
};

static void respond_error(struct req_ctx *c, fa_h3_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

int fa_api_parse_number(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 20 || (s[0] == '0' && len > 1))
        return FA_ERR_PARSE;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return FA_ERR_PARSE;
        v = v * 10 + d;
    }
    if (v > max)
        return FA_ERR_RANGE;
    *out = v;
    return 0;
}

/* Whether an absolute path may start at s[i]: a '/' at the start or after
 * a separator, and not one of the API's own paths (which the messages
 * name to say what to use). */
static int path_starts(const char *s, size_t i)
{
    if (s[i] != '/' || !strncmp(s + i, "/v1/", 4) || s[i + 1] == '\0' || s[i + 1] == ' ')
        return 0;
    return i == 0 || strchr(" \t'\"(=:,[", s[i - 1]) != NULL;
}

void fa_api_public_message(char *out, size_t cap, const char *msg)
{
    size_t o = 0;

    if (cap == 0)
        return;
    for (size_t i = 0; msg[i] && o + 1 < cap;) {
        if (path_starts(msg, i)) {
            static const char mark[] = "<path>";
            for (size_t k = 0; mark[k] && o + 1 < cap; k++)
                out[o++] = mark[k];
            while (msg[i] && !strchr(" \t'\"),;", msg[i]) &&
                   !(msg[i] == ':' && (msg[i + 1] == ' ' || msg[i + 1] == '\0')))
                i++;
            continue;
        }
        out[o++] = msg[i++];
    }
    out[o] = '\0';
}

/* What a peer may read of an error: the message without the server's
 * paths, or for a failure of this aggregator (500) none of it: that goes
 * to the log. */
static void peer_message(char *out, size_t cap, int status, const char *msg, const char *region)
{
    if (status == 500) {
        fa_log(FA_LOG_ERROR, "internal error answered with 500", "region=%s error=\"%s\"",
               region && region[0] ? region : "-", msg);
        snprintf(out, cap, "internal error of the aggregator (its log says what)");
        return;
    }
    fa_api_public_message(out, cap, msg);
}

static void respond_error(struct req_ctx *c, fa_h3_request *req, int status, const char *fmt, ...)
{
    Fedagg__Error e = FEDAGG__ERROR__INIT;
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    char raw[512], msg[512];
    uint8_t buf[1024];
    uint64_t round = 0;
    uint32_t attempt = 0;
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    peer_message(msg, sizeof(msg), status, raw, c ? c->region : NULL);
    if (c && c->fed)
        fa_fed_position(c->fed, &round, &attempt, NULL, NULL);
    e.code = (uint32_t)status;
    e.message = msg;
    e.round = round;
    e.attempt = attempt;
    n = fedagg__error__pack(&e, buf);
    if (c)
        c->responded = 1;
    fa_h3_respond(req, status, h, 1, buf, n);
}

int fa_api_http_status(int code, int internal)
{
    if (code == 0)
        return 200;
    if (internal)
        return 500;
    switch (code) {
    case FA_ERR_IO:
    case FA_ERR_CORRUPT: return 500; /* this aggregator's storage, not the request */
    case FA_ERR_NOSPACE: return 503;
    case FA_ERR_AUTH: return 403;
    case FA_ERR_REPLAY:
    case FA_ERR_STATE:
    case FA_ERR_EXISTS:
    case FA_ERR_THRESHOLD: return 409;
    case FA_ERR_TOOBIG: return 413;
    case FA_ERR_AGAIN: return 503;
    case FA_ERR_NOMEM: return 500;
    default: return 400;
    }
}

/* The core's answer: its body, or for a refusal the status of its code and a
 * fedagg.Error {status, message, round, attempt} (protobuf). */
static void respond_reply(struct req_ctx *c, const fa_fed_reply *r)
{
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    int status = fa_api_http_status(r->code, r->internal);
    Fedagg__Error e = FEDAGG__ERROR__INIT;
    char msg[sizeof(r->msg)];
    uint8_t *buf;
    size_t n;

    c->responded = 1;
    if (status == 200) {
        fa_h3_respond(c->req, status, h, 1, r->body, r->len);
        return;
    }
    fa_log(FA_LOG_INFO, "request refused", "region=%s status=%d reason=\"%s\"", c->region, status,
           r->msg);
    peer_message(msg, sizeof(msg), status, r->msg, c->region);
    e.code = (uint32_t)status;
    e.message = msg;
    e.round = r->round;
    e.attempt = r->attempt;
    n = fedagg__error__get_packed_size(&e);
    buf = malloc(n ? n : 1);
    if (buf)
        fedagg__error__pack(&e, buf);
    fa_h3_respond(c->req, status, h, 1, buf, buf ? n : 0);
    free(buf);
}

static void pending_remove(fa_api *a, struct req_ctx *c)
{
    struct req_ctx **p;
    if (!c->pending)
        return;
    for (p = &a->pending; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            c->pending = 0;
            a->n_pending--;
            return;
        }
}

/* Answers every held long-poll whose answer is known. */
static void flush(fa_api *a)
{
    struct req_ctx *c = a->pending, *next;
    for (; c; c = next) {
        fa_fed_reply r = {0};
        next = c->next;
        fa_service_log_scope(a->svc, c->fed);
        if (fa_fed_poll(c->fed, c->kind, c->region, c->round, c->attempt, &r)) {
            pending_remove(a, c);
            respond_reply(c, &r);
        }
        fa_fed_reply_free(&r);
    }
}

/* A draining server (SIGTERM, a finished federation) waits for the
 * requests in flight; a long-poll may wait for a phase deadline, minutes
 * away.  Each is answered 503 at once instead: its region retries, against
 * this aggregator's successor, and a resumed round answers it there. */
static void answer_for_drain(fa_api *a)
{
    size_t n = 0;
    while (a->pending) {
        struct req_ctx *c = a->pending;
        pending_remove(a, c);
        respond_error(c, c->req, 503, "the aggregator is stopping: retry");
        n++;
    }
    if (n)
        fa_log(FA_LOG_INFO, "draining: held long-polls answered", "requests=%zu", n);
}

static void hold(struct req_ctx *c)
{
    fa_api *a = c->api;
    fa_fed_reply r = {0};
    if (fa_h3_server_draining(a->srv)) {
        respond_error(c, c->req, 503, "the aggregator is stopping: retry");
        return;
    }
    if (fa_fed_poll(c->fed, c->kind, c->region, c->round, c->attempt, &r)) {
        respond_reply(c, &r);
        fa_fed_reply_free(&r);
        return;
    }
    c->next = a->pending;
    a->pending = c;
    c->pending = 1;
    a->n_pending++;
}

void fa_api_tick(fa_api *a)
{
    fa_service_tick(a->svc, fa_time_mono_ms());
    flush(a);
    if (a->pending && a->srv && fa_h3_server_draining(a->srv))
        answer_for_drain(a);
    fa_log_set_scope(NULL);
    if (fa_service_fatal(a->svc)) {
        fa_log(FA_LOG_ERROR, "stopping: a committed round could not be recorded", NULL);
        fa_h3_server_stop(a->srv);
    }
}

/* fa_api_tick from a request's callback, which goes on in its scope. */
static void tick_in(struct req_ctx *c)
{
    fa_api_tick(c->api);
    if (c->fed)
        fa_service_log_scope(c->api->svc, c->fed);
}

/* A federation is about to be closed (service.h, a stopped one reopened):
 * every request that holds it is answered 503 now and lets go of it. */
static void fed_closing(fa_fed *fed, void *arg)
{
    fa_api *a = arg;
    for (struct req_ctx *c = a->all; c; c = c->all_next) {
        if (c->fed != fed)
            continue;
        if (c->uploading) {
            fa_fed_masked_abort(fed, c->region, c->upload, fa_time_mono_ms());
            c->uploading = 0;
        }
        if (c->uncounted) {
            fa_fed_count_bytes(fed, c->region, c->uncounted);
            c->uncounted = 0;
        }
        pending_remove(a, c);
        if (!c->responded)
            respond_error(c, c->req, 503, "federation %s is being reopened: retry",
                          c->fed_id[0] ? c->fed_id : "(default)");
        c->fed = NULL;
        c->discard = 1;
    }
}

/* ------------------------------------------------------------------------ */

static struct req_ctx *ctx_new(fa_api *a, fa_h3_request *req)
{
    struct req_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->api = a;
    c->req = req;
    c->kind = -1;
    c->path = fa_h3_request_path(req);
    snprintf(c->region, sizeof(c->region), "%s",
             fa_h3_request_peer(req) ? fa_h3_request_peer(req) : "");
    fa_h3_request_set_data(req, c);
    c->all_next = a->all;
    if (a->all)
        a->all->all_prev = c;
    a->all = c;
    return c;
}

static void ctx_free(fa_api *a, struct req_ctx *c)
{
    pending_remove(a, c);
    if (c->all_prev)
        c->all_prev->all_next = c->all_next;
    else
        a->all = c->all_next;
    if (c->all_next)
        c->all_next->all_prev = c->all_prev;
    free(c->buf);
    free(c);
}

/* The HTTP status of a refusal of fa_service_fed_for_region. */
static int fed_status(int rc)
{
    switch (rc) {
    case FA_ERR_AUTH: return 403;
    case FA_ERR_AGAIN: return 503;
    case FA_ERR_NOMEM: return 500;
    default: return 404;
    }
}

/* Every request: the certificate's region must be invited to the
 * federation the path names (the default one for an unprefixed path).
 * write: the request changes something (a stopped federation answers 503). */
static struct req_ctx *admit(fa_api *a, fa_h3_request *req, int write)
{
    struct req_ctx *c = fa_h3_request_get_data(req);
    fa_error err;
    int rc;

    if (!c)
        c = ctx_new(a, req);
    if (!c) {
        fa_h3_respond(req, 500, NULL, 0, "out of memory", 13);
        return NULL;
    }
    if (fa_h3_request_peer_role(req) == FA_H3_ROLE_OPERATOR) {
        fa_log(FA_LOG_WARN, "operator certificate refused on a region's path",
               "operator=%s addr=%s path=%s", fa_h3_request_peer_name(req),
               fa_h3_request_peer_addr(req), fa_h3_request_path(req));
        respond_error(c, req, 403,
                      "the certificate is operator %s's: operators use /v1/admin/ (fedagg "
                      "status); this path is for regions",
                      fa_h3_request_peer_name(req));
        return NULL;
    }
    fa_error_clear(&err);
    rc = fa_service_fed_for_region(a->svc, c->fed_id[0] ? c->fed_id : NULL, c->region, write,
                                   &c->fed, &err);
    if (rc != 0) {
        fa_log(rc == FA_ERR_AGAIN ? FA_LOG_INFO : FA_LOG_WARN,
               rc == FA_ERR_AUTH ? "request from a region not in the federation refused"
                                 : "request refused",
               "peer=%s addr=%s path=%s reason=\"%s\"", c->region[0] ? c->region : "(none)",
               fa_h3_request_peer_addr(req), fa_h3_request_path(req), err.msg);
        respond_error(c, req, fed_status(rc), "%s", err.msg);
        return NULL;
    }
    fa_service_log_scope(a->svc, c->fed);
    fa_fed_region_seen(c->fed, c->region, fa_time_mono_ms());
    return c;
}

static void on_close(fa_h3_request *req, int err, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    if (!c)
        return;
    if (c->uncounted && c->fed)
        fa_fed_count_bytes(c->fed, c->region, c->uncounted);
    if (c->uploading && c->fed) {
        fa_fed_masked_abort(c->fed, c->region, c->upload, fa_time_mono_ms());
        c->uploading = 0;
    }
    if (c->pending && err != 0)
        fa_log(FA_LOG_INFO, "long-poll abandoned by the region", "region=%s phase=%s error=%s",
               c->region, c->kind >= 0 ? fa_secagg_phase_names[c->kind] : "-", fa_strerror(err));
    ctx_free(a, c);
    fa_h3_request_set_data(req, NULL);
}

/* --- GET /v1/federation, /v1/status --------------------------------------- */

static int on_federation(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req, 0);
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    uint8_t *out;
    size_t len;
    fa_error err;

    if (!c)
        return 0;
    tick_in(c);
    if (!c->fed) {
        respond_error(c, req, 503, "the federation is being reopened: retry");
        return 0;
    }
    if (fa_fed_info(c->fed, fa_time_mono_ms(), &out, &len, &err) != 0) {
        respond_error(c, req, 500, "%s", err.msg);
        return 0;
    }
    if (fa_service_fed_ended(a->svc, c->fed)) {
        /* aborted: no round will open again, as when its rounds are done */
        Fedagg__FederationInfo *fi = fedagg__federation_info__unpack(NULL, len, out);
        free(out);
        out = NULL;
        if (fi) {
            fi->finished = 1;
            len = fedagg__federation_info__get_packed_size(fi);
            if ((out = malloc(len ? len : 1)) != NULL)
                fedagg__federation_info__pack(fi, out);
            fedagg__federation_info__free_unpacked(fi, NULL);
        }
        if (!out) {
            respond_error(c, req, 500, "the federation's info could not be made");
            return 0;
        }
    }
    c->responded = 1;
    fa_h3_respond(req, 200, h, 1, out, len);
    free(out);
    return 0;
}

/* The ids of the service's federations that invite c's region (for
 * /v1/status), as a JSON array. */
static json_t *invited_json(const struct req_ctx *c)
{
    char *text = NULL;
    json_t *a = NULL;
    fa_error err;
    if (fa_service_offer_ids_json(c->api->svc, c->region, &text, &err) == 0)
        a = json_loads(text, 0, NULL);
    free(text);
    return a ? a : json_array();
}

/* The status as JSON: the federation's (none when bare) and "federations". */
static void status_json(struct req_ctx *c, int bare)
{
    fa_h3_header h[] = {{"content-type", "application/json"}};
    char *text = NULL;
    json_t *st = NULL;
    fa_error err;

    if (bare) {
        st = json_object();
    } else if (fa_fed_status_json(c->fed, fa_time_mono_ms(), &text, &err) != 0) {
        respond_error(c, c->req, 500, "%s", err.msg);
        return;
    } else {
        st = json_loads(text, 0, NULL);
        free(text);
    }
    if (st)
        json_object_set_new(st, "federations", invited_json(c));
    text = st ? json_dumps(st, JSON_COMPACT) : NULL;
    json_decref(st);
    if (!text) {
        respond_error(c, c->req, 500, "out of memory");
        return;
    }
    c->responded = 1;
    fa_h3_respond(c->req, 200, h, 1, text, strlen(text));
    free(text);
}

/* The same as a fedagg.Status. */
static void status_pb(struct req_ctx *c, int bare)
{
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    Fedagg__Status empty = FEDAGG__STATUS__INIT, *s = &empty;
    json_t *ids = invited_json(c);
    size_t n = json_array_size(ids), len = 0;
    char **names = calloc(n + 1, sizeof(char *));
    uint8_t *out = NULL;
    fa_error err;

    if (!names) {
        json_decref(ids);
        respond_error(c, c->req, 500, "out of memory");
        return;
    }
    if (!bare) {
        if (fa_fed_status(c->fed, fa_time_mono_ms(), &out, &len, &err) != 0 ||
            !(s = fedagg__status__unpack(NULL, len, out))) {
            free(out);
            free(names);
            json_decref(ids);
            respond_error(c, c->req, 500, "the status could not be made");
            return;
        }
        free(out);
    }
    for (size_t i = 0; i < n; i++)
        names[i] = (char *)json_string_value(json_array_get(ids, i));
    /* the decoded status has no list of its own: ours, only to pack it */
    s->federations = names;
    s->n_federations = n;
    len = fedagg__status__get_packed_size(s);
    out = malloc(len ? len : 1);
    if (out)
        fedagg__status__pack(s, out);
    s->federations = NULL;
    s->n_federations = 0;
    if (s != &empty)
        fedagg__status__free_unpacked(s, NULL);
    free(names);
    json_decref(ids);
    if (!out) {
        respond_error(c, c->req, 500, "out of memory");
        return;
    }
    c->responded = 1;
    fa_h3_respond(c->req, 200, h, 1, out, len);
    free(out);
}

/* GET /v1/status: the federation's status and the ids of the service's
 * federations that invite the region; a service without a default
 * federation answers the ids alone on the unprefixed path. */
static int on_status(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    const char *accept = fa_h3_request_header(req, "accept");
    int bare;

    if (!c && !(c = ctx_new(a, req))) {
        fa_h3_respond(req, 500, NULL, 0, "out of memory", 13);
        return 0;
    }
    bare = !c->fed_id[0] && fa_service_hosts_many(a->svc) && !fa_service_default(a->svc) &&
           fa_h3_request_peer_role(req) != FA_H3_ROLE_OPERATOR;
    if (!bare && !admit(a, req, 0))
        return 0;
    if (accept && strstr(accept, "application/json"))
        status_json(c, bare);
    else
        status_pb(c, bare);
    return 0;
}

/* --- GET /v1/models/{latest|v} -------------------------------------------- */

struct file_src {
    int fd;
};

static ssize_t file_read(void *arg, uint8_t *buf, size_t cap)
{
    struct file_src *s = arg;
    for (;;) {
        ssize_t r = read(s->fd, buf, cap);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return FA_ERR_IO;
    }
}

static void file_done(void *arg, int err)
{
    struct file_src *s = arg;
    close(s->fd);
    free(s);
}

/* GET /v1/models/channels/<name> of federation fed (fed_gov.h): the proof
 * bundle (text) of the signed record that pointed the channel at its
 * version, with the version and its model digest in headers; the model
 * itself is GET /v1/models/<version>. */
static void respond_channel(struct req_ctx *c, fa_fed *fed, const char *name)
{
    fa_h3_header h[4];
    char hex[65], vs[32], *proof = NULL;
    uint8_t sha[32];
    uint64_t version;
    size_t len = 0;
    fa_error err;
    int rc;

    if (!fa_audit_gov_channel_name_ok(name)) {
        respond_error(c, c->req, 404, "no release channel '%.64s' ([a-z0-9._-], 1 to 63 bytes)",
                      name);
        return;
    }
    fa_error_clear(&err);
    rc = fa_fed_channel(fed, name, &version, sha, NULL, 0, &proof, &len, &err);
    if (rc != 0) {
        respond_error(c, c->req, rc == FA_ERR_NOTFOUND ? 404 : 500, "%s", fa_error_msg(&err, rc));
        return;
    }
    fa_hex_encode(hex, sizeof(hex), sha, 32);
    snprintf(vs, sizeof(vs), "%" PRIu64, version);
    h[0] = (fa_h3_header){"content-type", "text/plain; charset=utf-8"};
    h[1] = (fa_h3_header){"fedagg-model-version", vs};
    h[2] = (fa_h3_header){"fedagg-model-sha256", hex};
    h[3] = (fa_h3_header){"fedagg-channel", name};
    c->responded = 1;
    fa_h3_respond(c->req, 200, h, 4, proof, len);
    free(proof);
}

static int on_model(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req, 0);
    const char *which;
    uint64_t version = UINT64_MAX, got, delta_from = 0;
    uint8_t sha[32], dsha[32] = {0};
    char path[4096], hex[65], dhex[65], vs[32], fs[32];
    struct file_src *src;
    off_t size;
    int f32, want_delta = 0, is_delta = 0;

    if (!c)
        return 0;
    which = c->path + strlen("/v1/models/");
    if (!strncmp(which, "channels/", 9)) {
        respond_channel(c, c->fed, which + 9);
        return 0;
    }
    if (strcmp(which, "latest") != 0 &&
        fa_api_parse_number(which, strlen(which), FA_API_MAX_NUMBER, &version) != 0) {
        respond_error(c, req, 404,
                      "no model '%.64s': use /v1/models/latest or a version number (decimal "
                      "digits, at most %" PRIu64 ")",
                      which, (uint64_t)FA_API_MAX_NUMBER);
        return 0;
    }
    /* ?dtype=f32: the float32 master weights instead of the model's own
     * dtypes.  ?delta_from=N: the version as a delta against version N when
     * there is one (else the full file); fedagg-model-encoding says which. */
    {
        const char *q = fa_h3_request_query(req);
        f32 = 0;
        while (q && *q) {
            const char *amp = strchr(q, '&');
            size_t len = amp ? (size_t)(amp - q) : strlen(q);
            if (len == 9 && !strncmp(q, "dtype=f32", 9)) {
                f32 = 1;
            } else if (len == 12 && !strncmp(q, "dtype=native", 12)) {
                f32 = 0;
            } else if (len >= 11 && !strncmp(q, "delta_from=", 11)) {
                if (fa_api_parse_number(q + 11, len - 11, FA_API_MAX_NUMBER, &delta_from) != 0) {
                    respond_error(c, req, 400, "delta_from '%.*s' is not a version number",
                                  (int)(len - 11 < 32 ? len - 11 : 32), q + 11);
                    return 0;
                }
                want_delta = 1;
            } else {
                respond_error(c, req, 400,
                              "unknown query '%.*s': use ?dtype=f32, ?delta_from=<version> or "
                              "none",
                              (int)len, q);
                return 0;
            }
            q = amp ? amp + 1 : NULL;
        }
        if (f32 && want_delta) {
            respond_error(c, req, 400, "delta_from serves the published model: not with dtype=f32");
            return 0;
        }
    }
    (void)a;
    if (want_delta && fa_fed_model_delta_for(c->fed, c->region, version, delta_from, path,
                                             sizeof(path), &got, sha, dsha) == 0) {
        is_delta = 1;
    } else if (fa_fed_model_for(c->fed, c->region, version, f32, path, sizeof(path), &got, sha) !=
               0) {
        respond_error(c, req, 404, "model version %s is not retained", which);
        return 0;
    }
    src = malloc(sizeof(*src));
    if (!src) {
        respond_error(c, req, 500, "out of memory");
        return 0;
    }
    src->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (src->fd < 0 || (size = lseek(src->fd, 0, SEEK_END)) < 0 ||
        lseek(src->fd, 0, SEEK_SET) < 0) {
        if (src->fd >= 0)
            close(src->fd);
        free(src);
        respond_error(c, req, 500, "cannot read the model file");
        return 0;
    }
    fa_hex_encode(hex, sizeof(hex), sha, 32);
    snprintf(vs, sizeof(vs), "%" PRIu64, got);
    fa_hex_encode(dhex, sizeof(dhex), dsha, 32);
    snprintf(fs, sizeof(fs), "%" PRIu64, delta_from);
    fa_h3_header h[] = {{"content-type", "application/octet-stream"},
                        {"fedagg-model-version", vs},
                        {"fedagg-model-sha256", hex},
                        {"fedagg-model-encoding", is_delta ? "delta" : "full"},
                        {"fedagg-delta-from", fs},
                        {"fedagg-delta-sha256", dhex}};
    c->responded = 1;
    if (fa_h3_respond_stream(req, 200, h, is_delta ? 6 : 4, (int64_t)size, file_read, file_done,
                             src) != 0) {
        close(src->fd);
        free(src);
    }
    return 0;
}

/* --- GET /v1/audit/... ------------------------------------------------------ */

static int query_param(const char *q, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len > kl && !strncmp(q, key, kl) && q[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl >= n)
                return 0;
            memcpy(out, q + kl + 1, vl);
            out[vl] = '\0';
            return 1;
        }
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int on_audit(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req, 0);
    const char *path;
    const char *q = fa_h3_request_query(req);
    fa_h3_header h[] = {{"content-type", "text/plain; charset=utf-8"}};
    char *out = NULL, round_s[32], region[64];
    size_t len;
    fa_error err;
    int rc;

    if (!c)
        return 0;
    (void)a;
    path = c->path;
    fa_error_clear(&err);
    if (!strcmp(path, "/v1/audit/checkpoint")) {
        rc = fa_fed_audit_checkpoint(c->fed, &out, &len, &err);
    } else if (!strcmp(path, "/v1/audit/proof")) {
        uint64_t round;
        if (!query_param(fa_h3_request_query(req), "round", round_s, sizeof(round_s)) ||
            !query_param(fa_h3_request_query(req), "region", region, sizeof(region))) {
            respond_error(c, req, 400, "usage: /v1/audit/proof?round=R&region=ID");
            return 0;
        }
        if (fa_api_parse_number(round_s, strlen(round_s), FA_API_MAX_NUMBER, &round) != 0) {
            respond_error(c, req, 400, "round '%s' is not a number", round_s);
            return 0;
        }
        rc = fa_fed_audit_proof(c->fed, round, region, &out, &len, &err);
    } else if (!strcmp(path, "/v1/audit/record")) {
        /* the record a downloaded model is proven against */
        char vs[32];
        uint64_t version;
        if (!query_param(q, "version", vs, sizeof(vs))) {
            respond_error(c, req, 400, "usage: /v1/audit/record?version=V");
            return 0;
        }
        if (fa_api_parse_number(vs, strlen(vs), FA_API_MAX_NUMBER, &version) != 0) {
            respond_error(c, req, 400, "version '%s' is not a number", vs);
            return 0;
        }
        rc = fa_fed_audit_record(c->fed, version, &out, &len, &err);
    } else if (!strcmp(path, "/v1/audit/consistency")) {
        char fs[32], ts[32] = "";
        uint64_t from, to = UINT64_MAX;
        if (!query_param(q, "from", fs, sizeof(fs))) {
            respond_error(c, req, 400, "usage: /v1/audit/consistency?from=N[&to=M]");
            return 0;
        }
        if (fa_api_parse_number(fs, strlen(fs), FA_API_MAX_NUMBER, &from) != 0) {
            respond_error(c, req, 400, "from '%s' is not a number", fs);
            return 0;
        }
        if (query_param(q, "to", ts, sizeof(ts)) &&
            fa_api_parse_number(ts, strlen(ts), FA_API_MAX_NUMBER, &to) != 0) {
            respond_error(c, req, 400, "to '%s' is not a number", ts);
            return 0;
        }
        rc = fa_fed_audit_consistency(c->fed, from, to, &out, &len, &err);
        if (rc == FA_ERR_RANGE) {
            respond_error(c, req, 400, "%s", fa_error_msg(&err, rc));
            return 0;
        }
    } else {
        respond_error(c, req, 404, "no such audit resource: %s", path);
        return 0;
    }
    if (rc == FA_ERR_NOTFOUND) {
        respond_error(c, req, 404, "%s", fa_error_msg(&err, rc));
        return 0;
    }
    if (rc != 0) {
        respond_error(c, req, 500, "%s", fa_error_msg(&err, rc));
        return 0;
    }
    c->responded = 1;
    fa_h3_respond(req, 200, h, 1, out, len);
    free(out);
    return 0;
}

/* --- POST /v1/rounds/{r}/{a}/{kind} --------------------------------------- */

static int parse_round_path(const char *path, uint64_t *round, uint32_t *attempt, int *kind)
{
    const char *p = path + strlen("/v1/rounds/"), *slash;
    uint64_t r, at;

    if (!(slash = strchr(p, '/')) ||
        fa_api_parse_number(p, (size_t)(slash - p), FA_API_MAX_NUMBER, &r) != 0)
        return -1;
    p = slash + 1;
    if (!(slash = strchr(p, '/')) ||
        fa_api_parse_number(p, (size_t)(slash - p), UINT32_MAX - 1u, &at) != 0)
        return -1;
    p = slash + 1;
    for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
        if (!strcmp(p, fa_secagg_phase_names[k])) {
            *round = r;
            *attempt = (uint32_t)at;
            *kind = k;
            return 0;
        }
    return -1;
}

static int on_round_request(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req, 1);
    fa_fed_reply r = {0};

    if (!c)
        return 0;
    if (parse_round_path(c->path, &c->round, &c->attempt, &c->kind) != 0) {
        respond_error(c, req, 404,
                      "no such round resource: %.80s (expected "
                      "/v1/rounds/{round}/{attempt}/{advertise|shares|masked|"
                      "consistency|unmask}, numbers in decimal digits)",
                      fa_h3_request_path(req));
        return 0;
    }
    if (c->kind != FA_FED_MASKED) {
        fa_h3_request_set_max_body(req, MAX_MESSAGE);
        return 0;
    }
    tick_in(c);
    if (!c->fed) {
        respond_error(c, req, 503, "the federation is being reopened: retry");
        c->discard = 1;
        fa_h3_request_set_max_body(req, 0);
        return 0;
    }
    if (fa_fed_masked_begin(c->fed, c->region, c->round, c->attempt,
                            fa_h3_request_content_length(req), fa_time_mono_ms(), &c->upload,
                            &c->discard, &r) != 0) {
        respond_reply(c, &r);
        fa_fed_reply_free(&r);
        c->discard = 1;
        /* Refused (503 no upload slot, 409, 4xx): stop reading, so the
         * transport asks the region to stop sending (STOP_SENDING
         * H3_NO_ERROR, RFC 9114 4.1.2) instead of taking a whole masked
         * vector for nothing while the accepted uploads need the link. */
        fa_h3_request_set_max_body(req, 0);
        return 0;
    }
    if (!c->discard)
        c->uploading = 1;
    fa_log(FA_LOG_DEBUG, "masked upload started",
           "region=%s round=%" PRIu64 " attempt=%u duplicate_discarded=%d", c->region, c->round,
           c->attempt, c->discard);
    return 0;
}

/* The transport's budget of buffered request bytes (fa_h3_request_reserve)
 * refused to let this body grow: 429 when the region's own requests hold
 * its share, 503 when the aggregator's whole budget is in use.  What was
 * buffered is dropped and the upload stopped; the region may try again. */
static void refuse_buffer(struct req_ctx *c, fa_h3_request *req, int rc, size_t want)
{
    int share = rc == FA_ERR_NOSPACE;
    fa_log(FA_LOG_WARN, "request refused: buffered request bytes over budget",
           "region=%s path=%s status=%d buffered=%zu want=%zu", c->region, fa_h3_request_path(req),
           share ? 429 : 503, c->cap, want);
    respond_error(c, req, share ? 429 : 503, "%s",
                  share ? "this region's requests hold their share of the aggregator's memory "
                          "(quic.max_buffered_request_bytes_per_identity): retry once they are done"
                        : "the aggregator's memory for requests is in use "
                          "(quic.max_buffered_request_bytes): retry later");
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    fa_h3_request_release(req, UINT64_MAX);
    fa_h3_request_set_max_body(req, 0); /* stop the upload (STOP_SENDING) */
}

static int on_round_body(fa_h3_request *req, const uint8_t *data, size_t len, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    int rc;

    if (!c)
        return 0;
    /* Counted per MiB and at the end, not per QUIC packet: a masked upload
     * arrives in some 20 000 chunks, each a metrics update otherwise. */
    (void)a;
    c->uncounted += len;
    if (c->uncounted >= (1u << 20) && c->fed) {
        fa_fed_count_bytes(c->fed, c->region, c->uncounted);
        c->uncounted = 0;
    }
    if (c->responded || c->discard || !c->fed)
        return 0;
    if (c->kind == FA_FED_MASKED) {
        fa_fed_reply r = {0};
        if (fa_fed_masked_chunk(c->fed, c->region, c->upload, data, len, fa_time_mono_ms(), &r) !=
            0) {
            fa_fed_masked_abort(c->fed, c->region, c->upload, fa_time_mono_ms());
            c->uploading = 0;
            respond_reply(c, &r);
            fa_fed_reply_free(&r);
        }
        return 0;
    }
    if (c->len + len > c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 4096;
        uint8_t *nb;
        while (ncap < c->len + len)
            ncap *= 2;
        if (ncap > MAX_MESSAGE) {
            respond_error(c, req, 413, "%s message larger than %u bytes",
                          fa_secagg_phase_names[c->kind], MAX_MESSAGE);
            return 0;
        }
        if ((rc = fa_h3_request_reserve(req, ncap - c->cap)) != 0) {
            refuse_buffer(c, req, rc, ncap);
            return 0;
        }
        nb = realloc(c->buf, ncap);
        if (!nb) {
            fa_h3_request_release(req, ncap - c->cap);
            respond_error(c, req, 500, "out of memory");
            return 0;
        }
        c->buf = nb;
        c->cap = ncap;
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    return 0;
}

static void on_round_end(fa_h3_request *req, void *arg)
{
    struct req_ctx *c = fa_h3_request_get_data(req);
    fa_fed_reply r = {0};
    int rc;

    if (!c || c->responded)
        return;
    if (!c->fed) {
        respond_error(c, req, 503, "the federation is being reopened: retry");
        return;
    }
    if (c->kind == FA_FED_MASKED) {
        if (c->uploading) {
            c->uploading = 0;
            if (fa_fed_masked_end(c->fed, c->region, c->upload, fa_time_mono_ms(), &r) != 0) {
                respond_reply(c, &r);
                fa_fed_reply_free(&r);
                return;
            }
        }
        hold(c);
        tick_in(c);
        return;
    }
    rc = fa_fed_submit(c->fed, c->kind, c->region, c->round, c->attempt, c->buf, c->len,
                       fa_time_mono_ms(), &r);
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    fa_h3_request_release(req, UINT64_MAX); /* a long-poll holds no body */
    if (rc != 0) {
        respond_reply(c, &r);
        fa_fed_reply_free(&r);
        return;
    }
    hold(c);
    tick_in(c);
}

/* --- POST /v1/evaluations ------------------------------------------------- */

#define MAX_EVAL_REPORT (64u << 10)

/* POST /v1/evaluations, POST /v1/privacy, POST /v1/data-statements and
 * POST /v1/federations/{id}/decision: a signed statement of a region in a
 * small body, answered 200 (empty) when accepted. */
enum { KIND_EVAL = -2, KIND_PRIVACY = -3, KIND_DATA = -4, KIND_DECISION = -5 };

static int on_eval_request(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req, 1);
    if (!c)
        return 0;
    c->kind = !strcmp(c->path, "/v1/privacy")           ? KIND_PRIVACY
              : !strcmp(c->path, "/v1/data-statements") ? KIND_DATA
              : !strcmp(c->path, "/v1/decision")        ? KIND_DECISION
                                                        : KIND_EVAL;
    fa_h3_request_set_max_body(req, MAX_EVAL_REPORT);
    return 0;
}

static int on_eval_body(fa_h3_request *req, const uint8_t *data, size_t len, void *arg)
{
    struct req_ctx *c = fa_h3_request_get_data(req);
    uint8_t *nb;
    (void)arg;
    if (!c || c->responded)
        return 0;
    if (c->len + len > MAX_EVAL_REPORT) {
        respond_error(c, req, 413, "evaluation report larger than %u bytes", MAX_EVAL_REPORT);
        return 0;
    }
    if (c->len + len > c->cap) {
        int rc = fa_h3_request_reserve(req, MAX_EVAL_REPORT);
        if (rc != 0) {
            refuse_buffer(c, req, rc, MAX_EVAL_REPORT);
            return 0;
        }
        if (!(nb = realloc(c->buf, MAX_EVAL_REPORT))) {
            respond_error(c, req, 500, "out of memory");
            return 0;
        }
        c->buf = nb;
        c->cap = MAX_EVAL_REPORT;
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    return 0;
}

static void on_eval_end(fa_h3_request *req, void *arg)
{
    struct req_ctx *c = fa_h3_request_get_data(req);
    fa_fed_reply r = {0};
    int changed = 0, rc;

    (void)arg;
    if (!c || c->responded)
        return;
    if (!c->fed) {
        respond_error(c, req, 503, "the federation is being reopened: retry");
        return;
    }
    rc = c->kind == KIND_PRIVACY ? fa_fed_submit_privacy(c->fed, c->region, c->buf, c->len, &r)
         : c->kind == KIND_DATA  ? fa_fed_submit_data(c->fed, c->region, c->buf, c->len, &r)
         : c->kind == KIND_EVAL
             ? fa_fed_submit_eval(c->fed, c->region, c->buf, c->len, &r)
             : fa_fed_submit_decision(c->fed, c->region, c->buf, c->len, &changed, &r);
    if (rc != 0) {
        respond_reply(c, &r);
        fa_fed_reply_free(&r);
        return;
    }
    c->responded = 1;
    fa_h3_respond(req, 200, NULL, 0, NULL, 0);
}

/* ------------------------------------------------------------------------ */

/* --- GET /v1/federations, /v1/federations/{id}/... --------------------------- */

static const fa_h3_handler federation_h = {on_federation, NULL, NULL, on_close};
static const fa_h3_handler status_h = {on_status, NULL, NULL, on_close};
static const fa_h3_handler model_h = {on_model, NULL, NULL, on_close};
static const fa_h3_handler audit_h = {on_audit, NULL, NULL, on_close};
static const fa_h3_handler rounds_h = {on_round_request, on_round_body, on_round_end, on_close};
static const fa_h3_handler evals_h = {on_eval_request, on_eval_body, on_eval_end, on_close};

/* The region routes: unprefixed they are the default federation's; under
 * /v1/federations/{id}/ (the rest of the path after /v1/) the named one's,
 * where the decision is too.  prefix: a path that starts with `path`. */
static const struct route {
    const char *method, *path;
    int prefix, unprefixed;
    const fa_h3_handler *h;
} routes[] = {
    {"GET", "/v1/federation", 0, 1, &federation_h}, {"GET", "/v1/status", 0, 1, &status_h},
    {"GET", "/v1/models/", 1, 1, &model_h},         {"GET", "/v1/audit/", 1, 1, &audit_h},
    {"POST", "/v1/rounds/", 1, 1, &rounds_h},       {"POST", "/v1/evaluations", 0, 1, &evals_h},
    {"POST", "/v1/privacy", 0, 1, &evals_h},        {"POST", "/v1/data-statements", 0, 1, &evals_h},
    {"POST", "/v1/decision", 0, 0, &evals_h},
};

#define FEDERATIONS "/v1/federations"

/* GET /v1/federations: the offers of the federations inviting the region. */
static int on_federations(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    struct req_ctx *c = ctx_new(a, req);
    uint8_t *out;
    size_t len;
    fa_error err;

    if (!c) {
        fa_h3_respond(req, 500, NULL, 0, "out of memory", 13);
        return 0;
    }
    if (strcmp(fa_h3_request_path(req), FEDERATIONS) != 0) {
        respond_error(c, req, 404, "no such resource: %s", fa_h3_request_path(req));
        return 0;
    }
    if (fa_h3_request_peer_role(req) == FA_H3_ROLE_OPERATOR) {
        respond_error(c, req, 403,
                      "the certificate is operator %s's: operators list federations with "
                      "GET /v1/admin/federations (fedagg federation list)",
                      fa_h3_request_peer_name(req));
        return 0;
    }
    fa_error_clear(&err);
    if (fa_service_offers(a->svc, c->region, fa_time_mono_ms(), &out, &len, &err) != 0) {
        respond_error(c, req, 500, "%s", err.msg);
        return 0;
    }
    c->responded = 1;
    fa_h3_respond(req, 200, h, 1, out, len);
    free(out);
    return 0;
}

/* Every region request: which route and federation it is for.  An
 * unprefixed path is the default federation's route of that path;
 * /v1/federations/{id}/<rest> the route of /v1/<rest> for federation id.
 * Non-prefix routes match their whole path.  The log lines written while
 * a request is handled name its federation (in a service); the scope is
 * cleared when each callback returns. */
static int dispatch_request(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    const char *full = fa_h3_request_path(req), *method = fa_h3_request_method(req);
    const char *id = NULL, *slash = NULL;
    const struct route *r = NULL;
    struct req_ctx *c;
    char sub[sizeof(((struct req_ctx *)0)->path_buf)];
    int prefixed = !strncmp(full, FEDERATIONS "/", strlen(FEDERATIONS "/")), other_method = 0;
    int rc;

    if (prefixed) {
        id = full + strlen(FEDERATIONS "/");
        slash = strchr(id, '/');
        if (!slash || slash == id || (size_t)(slash - id) >= sizeof(c->fed_id) ||
            (size_t)snprintf(sub, sizeof(sub), "/v1/%s", slash + 1) >= sizeof(sub)) {
            respond_error(
                NULL, req, 404,
                "no such resource: %s (expected /v1/federations/{id}/{federation|"
                "status|models/...|audit/...|rounds/...|evaluations|privacy|data-statements|"
                "decision})",
                full);
            return 0;
        }
    } else {
        snprintf(sub, sizeof(sub), "%s", full);
    }
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *x = &routes[i];
        int match = x->prefix ? !strncmp(sub, x->path, strlen(x->path)) : !strcmp(sub, x->path);
        if (!match || (!prefixed && !x->unprefixed))
            continue;
        if (strcmp(x->method, method) != 0) {
            other_method = 1;
            continue;
        }
        r = x;
        break;
    }
    if (!r) {
        respond_error(NULL, req, other_method ? 405 : 404, "%s %s: %s", method, full,
                      other_method ? "not with this method" : "no such resource");
        return 0;
    }
    if (!(c = ctx_new(a, req))) {
        fa_h3_respond(req, 500, NULL, 0, "out of memory", 13);
        return 0;
    }
    if (prefixed) {
        memcpy(c->fed_id, id, (size_t)(slash - id));
        c->fed_id[slash - id] = '\0';
    }
    snprintf(c->path_buf, sizeof(c->path_buf), "%s", sub);
    c->path = c->path_buf;
    c->h = r->h;
    rc = c->h->on_request(req, arg);
    fa_log_set_scope(NULL);
    return rc;
}

/* The callbacks after on_request run in the request's federation's scope. */
static struct req_ctx *scoped(fa_h3_request *req)
{
    struct req_ctx *c = fa_h3_request_get_data(req);
    if (c && c->fed)
        fa_service_log_scope(c->api->svc, c->fed);
    return c;
}

static int dispatch_body(fa_h3_request *req, const uint8_t *data, size_t len, void *arg)
{
    struct req_ctx *c = scoped(req);
    int rc = c && c->h && c->h->on_body ? c->h->on_body(req, data, len, arg) : 0;
    fa_log_set_scope(NULL);
    return rc;
}

static void dispatch_end(fa_h3_request *req, void *arg)
{
    struct req_ctx *c = scoped(req);
    if (c && c->h && c->h->on_body_end)
        c->h->on_body_end(req, arg);
    fa_log_set_scope(NULL);
}

static void dispatch_close(fa_h3_request *req, int err, void *arg)
{
    scoped(req);
    on_close(req, err, arg);
    fa_log_set_scope(NULL);
}

/* ------------------------------------------------------------------------ */

int fa_api_new(fa_api **out, fa_h3_server *srv, fa_service *svc, fa_error *err)
{
    static const fa_h3_handler federations = {on_federations, NULL, NULL, on_close};
    static const fa_h3_handler dispatch = {dispatch_request, dispatch_body, dispatch_end,
                                           dispatch_close};
    fa_api *a = calloc(1, sizeof(*a));
    int rc = 0;

    *out = NULL;
    if (!a)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    a->srv = srv;
    a->svc = svc;
    for (size_t i = 0; rc == 0 && i < sizeof(routes) / sizeof(routes[0]); i++)
        if (routes[i].unprefixed)
            rc = fa_h3_server_route(srv, routes[i].method, routes[i].path, &dispatch, a);
    if (rc != 0 || (rc = fa_h3_server_route(srv, "GET", FEDERATIONS, &federations, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "GET", FEDERATIONS "/", &dispatch, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", FEDERATIONS "/", &dispatch, a)) != 0 ||
        (rc = fa_api_admin_routes(srv, svc)) != 0 ||   /* aggregator/api_admin.h */
        (rc = fa_service_api_routes(srv, svc)) != 0) { /* aggregator/service_api.h */
        free(a);
        return fa_errorf(err, rc, "cannot register the API routes: %s", fa_strerror(rc));
    }
    fa_service_set_close_hook(svc, fed_closing, a);
    *out = a;
    return 0;
}

void fa_api_del(fa_api *a)
{
    if (a)
        fa_service_set_close_hook(a->svc, NULL, NULL);
    free(a);
}
