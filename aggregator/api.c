/* api.c - HTTP/3 handlers of the aggregator.  See api.h. */
#include "aggregator/api.h"
#include "aggregator/api_admin.h"
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

#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"

#define MAX_MESSAGE (16u << 20) /* largest protocol message body (not the masked upload) */

struct req_ctx {
    fa_api *api;
    fa_h3_request *req;
    int kind; /* enum fa_fed_kind; -1 for other requests */
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
};

struct fa_api {
    fa_h3_server *srv;
    fa_fed *fed;
    struct req_ctx *pending;
    size_t n_pending;
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
    if (c && c->api)
        fa_fed_position(c->api->fed, &round, &attempt, NULL, NULL);
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
        if (fa_fed_poll(a->fed, c->kind, c->region, c->round, c->attempt, &r)) {
            pending_remove(a, c);
            respond_reply(c, &r);
        }
        fa_fed_reply_free(&r);
    }
}

static void hold(struct req_ctx *c)
{
    fa_api *a = c->api;
    fa_fed_reply r = {0};
    if (fa_fed_poll(a->fed, c->kind, c->region, c->round, c->attempt, &r)) {
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
    fa_fed_tick(a->fed, fa_time_mono_ms());
    flush(a);
    if (fa_fed_fatal(a->fed)) {
        fa_log(FA_LOG_ERROR, "stopping: a committed round could not be recorded", NULL);
        fa_h3_server_stop(a->srv);
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
    snprintf(c->region, sizeof(c->region), "%s",
             fa_h3_request_peer(req) ? fa_h3_request_peer(req) : "");
    fa_h3_request_set_data(req, c);
    return c;
}

/* Every request: the certificate's region must be a member. */
static struct req_ctx *admit(fa_api *a, fa_h3_request *req)
{
    struct req_ctx *c = ctx_new(a, req);
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
    if (!fa_fed_is_member(a->fed, c->region)) {
        fa_log(FA_LOG_WARN, "request from a region not in the federation refused",
               "peer=%s addr=%s path=%s", c->region[0] ? c->region : "(none)",
               fa_h3_request_peer_addr(req), fa_h3_request_path(req));
        respond_error(c, req, 403,
                      "the certificate names region '%s', which is not a member of "
                      "this federation",
                      c->region);
        return NULL;
    }
    fa_fed_region_seen(a->fed, c->region, fa_time_mono_ms());
    return c;
}

static void on_close(fa_h3_request *req, int err, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    if (!c)
        return;
    if (c->uncounted)
        fa_fed_count_bytes(a->fed, c->region, c->uncounted);
    if (c->uploading) {
        fa_fed_masked_abort(a->fed, c->region, c->upload, fa_time_mono_ms());
        c->uploading = 0;
    }
    if (c->pending && err != 0)
        fa_log(FA_LOG_INFO, "long-poll abandoned by the region", "region=%s phase=%s error=%s",
               c->region, c->kind >= 0 ? fa_secagg_phase_names[c->kind] : "-", fa_strerror(err));
    pending_remove(a, c);
    free(c->buf);
    free(c);
    fa_h3_request_set_data(req, NULL);
}

/* Routes are registered by prefix (transport/h3.h): a handler of one exact
 * path answers 404 to anything longer ("/v1/federationX"). */
static int exact_path(struct req_ctx *c, fa_h3_request *req, const char *want)
{
    if (!strcmp(fa_h3_request_path(req), want))
        return 1;
    respond_error(c, req, 404, "no such resource (did you mean %s?)", want);
    return 0;
}

/* --- GET /v1/federation, /v1/status --------------------------------------- */

static int on_federation(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req);
    fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
    uint8_t *out;
    size_t len;
    fa_error err;

    if (!c || !exact_path(c, req, "/v1/federation"))
        return 0;
    fa_api_tick(a);
    if (fa_fed_info(a->fed, fa_time_mono_ms(), &out, &len, &err) != 0) {
        respond_error(c, req, 500, "%s", err.msg);
        return 0;
    }
    c->responded = 1;
    fa_h3_respond(req, 200, h, 1, out, len);
    free(out);
    return 0;
}

static int on_status(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req);
    const char *accept = fa_h3_request_header(req, "accept");
    fa_error err;

    if (!c || !exact_path(c, req, "/v1/status"))
        return 0;
    if (accept && strstr(accept, "application/json")) {
        fa_h3_header h[] = {{"content-type", "application/json"}};
        char *json;
        if (fa_fed_status_json(a->fed, fa_time_mono_ms(), &json, &err) != 0) {
            respond_error(c, req, 500, "%s", err.msg);
            return 0;
        }
        c->responded = 1;
        fa_h3_respond(req, 200, h, 1, json, strlen(json));
        free(json);
    } else {
        fa_h3_header h[] = {{"content-type", "application/x-protobuf"}};
        uint8_t *out;
        size_t len;
        if (fa_fed_status(a->fed, fa_time_mono_ms(), &out, &len, &err) != 0) {
            respond_error(c, req, 500, "%s", err.msg);
            return 0;
        }
        c->responded = 1;
        fa_h3_respond(req, 200, h, 1, out, len);
        free(out);
    }
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
    struct req_ctx *c = admit(a, req);
    const char *which = fa_h3_request_path(req) + strlen("/v1/models/");
    uint64_t version = UINT64_MAX, got, delta_from = 0;
    uint8_t sha[32], dsha[32] = {0};
    char path[4096], hex[65], dhex[65], vs[32], fs[32];
    struct file_src *src;
    off_t size;
    int f32, want_delta = 0, is_delta = 0;

    if (!c)
        return 0;
    if (!strncmp(which, "channels/", 9)) {
        respond_channel(c, a->fed, which + 9);
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
    if (want_delta && fa_fed_model_delta_for(a->fed, c->region, version, delta_from, path,
                                             sizeof(path), &got, sha, dsha) == 0) {
        is_delta = 1;
    } else if (fa_fed_model_for(a->fed, c->region, version, f32, path, sizeof(path), &got, sha) !=
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
    struct req_ctx *c = admit(a, req);
    const char *path = fa_h3_request_path(req);
    const char *q = fa_h3_request_query(req);
    fa_h3_header h[] = {{"content-type", "text/plain; charset=utf-8"}};
    char *out = NULL, round_s[32], region[64];
    size_t len;
    fa_error err;
    int rc;

    if (!c)
        return 0;
    fa_error_clear(&err);
    if (!strcmp(path, "/v1/audit/checkpoint")) {
        rc = fa_fed_audit_checkpoint(a->fed, &out, &len, &err);
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
        rc = fa_fed_audit_proof(a->fed, round, region, &out, &len, &err);
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
        rc = fa_fed_audit_record(a->fed, version, &out, &len, &err);
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
        rc = fa_fed_audit_consistency(a->fed, from, to, &out, &len, &err);
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
    struct req_ctx *c = admit(a, req);
    fa_fed_reply r = {0};

    if (!c)
        return 0;
    if (parse_round_path(fa_h3_request_path(req), &c->round, &c->attempt, &c->kind) != 0) {
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
    fa_api_tick(a);
    if (fa_fed_masked_begin(a->fed, c->region, c->round, c->attempt,
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
    c->uncounted += len;
    if (c->uncounted >= (1u << 20)) {
        fa_fed_count_bytes(a->fed, c->region, c->uncounted);
        c->uncounted = 0;
    }
    if (c->responded || c->discard)
        return 0;
    if (c->kind == FA_FED_MASKED) {
        fa_fed_reply r = {0};
        if (fa_fed_masked_chunk(a->fed, c->region, c->upload, data, len, fa_time_mono_ms(), &r) !=
            0) {
            fa_fed_masked_abort(a->fed, c->region, c->upload, fa_time_mono_ms());
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
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    fa_fed_reply r = {0};
    int rc;

    if (!c || c->responded)
        return;
    if (c->kind == FA_FED_MASKED) {
        if (c->uploading) {
            c->uploading = 0;
            if (fa_fed_masked_end(a->fed, c->region, c->upload, fa_time_mono_ms(), &r) != 0) {
                respond_reply(c, &r);
                fa_fed_reply_free(&r);
                return;
            }
        }
        hold(c);
        fa_api_tick(a);
        return;
    }
    rc = fa_fed_submit(a->fed, c->kind, c->region, c->round, c->attempt, c->buf, c->len,
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
    fa_api_tick(a);
}

/* --- POST /v1/evaluations ------------------------------------------------- */

#define MAX_EVAL_REPORT (64u << 10)

/* POST /v1/evaluations, POST /v1/privacy and POST /v1/data-statements: a
 * signed statement of a region in a small body, answered 200 (empty) when
 * accepted. */
enum { KIND_EVAL = -2, KIND_PRIVACY = -3, KIND_DATA = -4 };

static int on_eval_request(fa_h3_request *req, void *arg)
{
    fa_api *a = arg;
    struct req_ctx *c = admit(a, req);
    const char *path = fa_h3_request_path(req);
    if (!c)
        return 0;
    if (strcmp(path, "/v1/privacy") != 0 && strcmp(path, "/v1/data-statements") != 0 &&
        !exact_path(c, req, "/v1/evaluations"))
        return 0;
    c->kind = !strcmp(path, "/v1/privacy")           ? KIND_PRIVACY
              : !strcmp(path, "/v1/data-statements") ? KIND_DATA
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
    fa_api *a = arg;
    struct req_ctx *c = fa_h3_request_get_data(req);
    fa_fed_reply r = {0};

    if (!c || c->responded)
        return;
    if ((c->kind == KIND_PRIVACY ? fa_fed_submit_privacy(a->fed, c->region, c->buf, c->len, &r)
         : c->kind == KIND_DATA  ? fa_fed_submit_data(a->fed, c->region, c->buf, c->len, &r)
                                 : fa_fed_submit_eval(a->fed, c->region, c->buf, c->len, &r)) !=
        0) {
        respond_reply(c, &r);
        fa_fed_reply_free(&r);
        return;
    }
    c->responded = 1;
    fa_h3_respond(req, 200, NULL, 0, NULL, 0);
}

/* ------------------------------------------------------------------------ */

int fa_api_new(fa_api **out, fa_h3_server *srv, fa_fed *fed, fa_error *err)
{
    static const fa_h3_handler federation = {on_federation, NULL, NULL, on_close};
    static const fa_h3_handler status = {on_status, NULL, NULL, on_close};
    static const fa_h3_handler model = {on_model, NULL, NULL, on_close};
    static const fa_h3_handler audit = {on_audit, NULL, NULL, on_close};
    static const fa_h3_handler rounds = {on_round_request, on_round_body, on_round_end, on_close};
    static const fa_h3_handler evals = {on_eval_request, on_eval_body, on_eval_end, on_close};
    fa_api *a = calloc(1, sizeof(*a));
    int rc;

    *out = NULL;
    if (!a)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    a->srv = srv;
    a->fed = fed;
    if ((rc = fa_h3_server_route(srv, "GET", "/v1/federation", &federation, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "GET", "/v1/status", &status, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "GET", "/v1/models/", &model, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "GET", "/v1/audit/", &audit, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", "/v1/rounds/", &rounds, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", "/v1/evaluations", &evals, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", "/v1/privacy", &evals, a)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", "/v1/data-statements", &evals, a)) != 0 ||
        (rc = fa_api_admin_routes(srv, fed)) != 0) { /* aggregator/api_admin.h */
        free(a);
        return fa_errorf(err, rc, "cannot register the API routes: %s", fa_strerror(rc));
    }
    *out = a;
    return 0;
}

void fa_api_del(fa_api *a)
{
    free(a);
}
