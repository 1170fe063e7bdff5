/* service_api.c - the operators' routes of the service's federations.  See
 * service_api.h. */
#include "aggregator/service_api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/api_admin.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "proto/config_check.h"

#define PREFIX "/v1/admin/federations"

/* The body of a create (a federation file) being received. */
struct create_body {
    char *buf;
    size_t len;
    int answered;
};

/* Splits what follows PREFIX: "" (the collection), "/{id}" or
 * "/{id}/{name}".  Returns 0, or -1 for any other shape. */
static int split(const char *rest, char *id, size_t idn, char *name, size_t namen)
{
    const char *slash;
    size_t n;

    id[0] = name[0] = '\0';
    if (!*rest)
        return 0;
    if (*rest != '/' || !rest[1])
        return -1;
    rest++;
    slash = strchr(rest, '/');
    n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (n == 0 || n >= idn)
        return -1;
    memcpy(id, rest, n);
    id[n] = '\0';
    if (!slash)
        return 0;
    if (!slash[1] || strchr(slash + 1, '/') || strlen(slash + 1) >= namen)
        return -1;
    snprintf(name, namen, "%s", slash + 1);
    return 0;
}

static int on_get(fa_h3_request *req, void *arg)
{
    fa_service *svc = arg;
    const char *op = fa_h3_request_peer_name(req);
    char id[64], name[64], *doc = NULL;
    fa_error err;
    int rc;

    if (!fa_api_admin_operator_only(req))
        return 0;
    if (split(fa_h3_request_path(req) + strlen(PREFIX), id, sizeof(id), name, sizeof(name)) != 0) {
        fa_api_admin_respond_msg(
            req, 404, "no such path: " PREFIX ", " PREFIX "/{id} or " PREFIX "/{id}/{document}");
        return 0;
    }
    fa_error_clear(&err);
    if (!id[0]) {
        rc = fa_service_list_json(svc, op, fa_time_mono_ms(), &doc, &err);
    } else if (!name[0]) {
        rc = fa_service_authorize(svc, op, id, &err);
        if (rc == 0)
            rc = fa_service_show_json(svc, id, fa_time_mono_ms(), &doc, &err);
    } else {
        fa_api_admin_document(req, svc, id, name);
        return 0;
    }
    if (rc != 0) {
        fa_api_admin_respond_msg(req, fa_api_admin_status_of(rc), fa_error_msg(&err, rc));
        return 0;
    }
    fa_api_admin_respond_json(req, 200, doc);
    free(doc);
    return 0;
}

static int on_post(fa_h3_request *req, void *arg)
{
    struct create_body *b;
    (void)arg;
    if (!fa_api_admin_operator_only(req))
        return 0;
    /* A federation file may be as large as a config file; an action's body
     * is ignored. */
    fa_h3_request_set_max_body(req, FA_CONFIG_MAX_BYTES);
    b = calloc(1, sizeof(*b));
    if (!b) {
        fa_api_admin_respond_msg(req, 500, "out of memory");
        return 0;
    }
    fa_h3_request_set_data(req, b);
    return 0;
}

static int on_body(fa_h3_request *req, const uint8_t *data, size_t len, void *arg)
{
    struct create_body *b = fa_h3_request_get_data(req);
    char *nb;
    (void)arg;
    if (!b || b->answered)
        return 0;
    if (b->len + len > FA_CONFIG_MAX_BYTES) {
        b->answered = 1;
        fa_api_admin_respond_msg(req, 413, "a federation file is at most 16 MiB");
        return 0;
    }
    nb = realloc(b->buf, b->len + len + 1);
    if (!nb) {
        b->answered = 1;
        fa_api_admin_respond_msg(req, 500, "out of memory");
        return 0;
    }
    b->buf = nb;
    memcpy(b->buf + b->len, data, len);
    b->len += len;
    return 0;
}

/* POST PREFIX: a federation file. */
static void create(fa_h3_request *req, fa_service *svc, struct create_body *b)
{
    const char *op = fa_h3_request_peer_name(req);
    const char *name = fa_h3_request_header(req, "fedagg-filename");
    json_t *o = json_object(), *problems = json_array();
    fa_diags *d = NULL;
    const char *id = NULL;
    char *text = NULL, msg[600], file[256];
    fa_error err;
    int rc, status = 200;

    /* the name the operator gave, for messages only (never opened) */
    snprintf(file, sizeof(file), "%s",
             name && name[0] && !strchr(name, '\n') ? name : "federation");
    fa_error_clear(&err);
    if (!o || !problems || fa_diags_new(&d) != 0) {
        json_decref(o);
        json_decref(problems);
        fa_api_admin_respond_msg(req, 500, "out of memory");
        return;
    }
    rc = fa_service_create(svc, op, b->buf ? b->buf : "", b->len, file, fa_time_mono_ms(), &id, d,
                           &err);
    if (rc == 0) {
        snprintf(msg, sizeof(msg), "federation %s created by %s", id, op);
        json_object_set_new(o, "ok", json_true());
        json_object_set_new(o, "message", json_string(msg));
        json_object_set_new(o, "id", json_string(id));
    } else {
        status = rc == FA_ERR_NOSPACE ? 409 : fa_api_admin_status_of(rc);
        json_object_set_new(o, "error", json_string(fa_error_msg(&err, rc)));
        for (size_t i = 0; i < fa_diags_count(d); i++)
            json_array_append_new(problems, json_string(fa_diags_get(d, i)));
        fa_log(FA_LOG_INFO, "federation not created", "operator=%s file=%s reason=\"%s\"", op, file,
               fa_error_msg(&err, rc));
    }
    json_object_set_new(o, "problems", problems);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    fa_diags_del(d);
    fa_api_admin_respond_json(req, text ? status : 500,
                              text ? text : "{\"error\":\"out of memory\"}");
    free(text);
}

static void on_post_end(fa_h3_request *req, void *arg)
{
    fa_service *svc = arg;
    struct create_body *b = fa_h3_request_get_data(req);
    char id[64], name[64];

    if (!b || b->answered)
        return;
    b->answered = 1;
    if (split(fa_h3_request_path(req) + strlen(PREFIX), id, sizeof(id), name, sizeof(name)) != 0 ||
        (id[0] && !name[0])) {
        fa_api_admin_respond_msg(req, 404,
                                 "no such path: POST " PREFIX " (create) or " PREFIX
                                 "/{id}/{pause|resume|abort|archive|abort-round|drain|admit}");
        return;
    }
    if (!id[0])
        create(req, svc, b);
    else
        fa_api_admin_action(req, svc, id, name);
}

static void on_close(fa_h3_request *req, int err, void *arg)
{
    struct create_body *b = fa_h3_request_get_data(req);
    (void)err;
    (void)arg;
    if (b) {
        free(b->buf);
        free(b);
    }
    fa_h3_request_set_data(req, NULL);
}

int fa_service_api_routes(fa_h3_server *srv, fa_service *svc)
{
    static const fa_h3_handler get = {on_get, NULL, NULL, NULL};
    static const fa_h3_handler post = {on_post, on_body, on_post_end, on_close};
    int rc;

    if ((rc = fa_h3_server_route(srv, "GET", PREFIX, &get, svc)) != 0 ||
        (rc = fa_h3_server_route(srv, "POST", PREFIX, &post, svc)) != 0)
        return rc;
    return 0;
}
