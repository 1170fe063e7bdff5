/* admin_client.c - options, operator config and HTTP/3 client of the
 * operators' subcommands.  See admin_client.h. */
#include "tools/admin_client.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "proto/config_check.h"
#include "proto/textformat.h"
#include "transport/h3.h"

#define MAX_CONFIG (1u << 20)
#define MAX_DOCUMENT (64u << 20)

/* ------------------------------------------------------------ the config */

struct ck {
    const char *file;
    const fa_textformat_positions *pos;
    fa_diags *diags;
    unsigned n;
};

static void problem(struct ck *c, const ProtobufCMessage *msg, const char *field, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
static void problem(struct ck *c, const ProtobufCMessage *msg, const char *field, const char *fmt,
                    ...)
{
    unsigned line = 1, col = 1;
    char text[600];
    va_list ap;

    if (!msg || !c->pos || fa_textformat_position(c->pos, msg, field, 0, &line, &col) != 0)
        if (!msg || !c->pos || fa_textformat_position_of(c->pos, msg, &line, &col) != 0)
            line = col = 1;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fa_diags_addf(c->diags, c->file, line, col, "%s", text);
    c->n++;
}

/* Makes a relative path absolute against dir (the config's directory). */
static int resolve(char **slot, const char *dir)
{
    char *abs;
    size_t n;
    if (!*slot || !**slot || **slot == '/')
        return 0;
    n = strlen(dir) + 1 + strlen(*slot) + 1;
    if (!(abs = malloc(n)))
        return FA_ERR_NOMEM;
    snprintf(abs, n, "%s/%s", dir, *slot);
    free(*slot);
    *slot = abs;
    return 0;
}

static void need_file(struct ck *c, const ProtobufCMessage *msg, const char *field,
                      const char *path, const char *what, int private_key)
{
    struct stat st;
    fa_error e = {0};

    if (!path || !*path) {
        problem(c, msg, field, "`tls.%s` is required (%s)", field, what);
        return;
    }
    if (stat(path, &st) != 0)
        problem(c, msg, field, "`tls.%s`: %s: %s", field, path,
                errno == ENOENT ? "no such file" : strerror(errno));
    else if (!S_ISREG(st.st_mode))
        problem(c, msg, field, "`tls.%s`: %s is not a regular file", field, path);
    else if (access(path, R_OK) != 0)
        problem(c, msg, field, "`tls.%s`: %s is not readable: %s", field, path, strerror(errno));
    else if (private_key && fa_file_check_private(path, &e) != 0)
        problem(c, msg, field, "`tls.%s`: %s", field, e.msg);
}

int fa_admin_config_load(const char *path, int no_files, Fedagg__OperatorConfig **out,
                         fa_diags *diags, fa_error *err)
{
    fa_textformat_parse_opts po = {0};
    fa_textformat_positions *pos = NULL;
    ProtobufCMessage *m = NULL;
    Fedagg__OperatorConfig *c;
    uint8_t *text = NULL;
    size_t len = 0;
    char dirbuf[PATH_MAX], *dir;
    struct ck ck = {path, NULL, diags, 0};
    int rc;

    *out = NULL;
    rc = fa_file_read_all(path, &text, &len, MAX_CONFIG, err);
    if (rc != 0)
        return rc;
    po.filename = path;
    po.diags = diags;
    po.positions = &pos;
    rc = fa_textformat_parse_ex(&fedagg__operator_config__descriptor, (const char *)text, len, &po,
                                &m, err);
    free(text);
    if (rc != 0)
        return rc;
    c = (Fedagg__OperatorConfig *)m;
    ck.pos = pos;
    /* relative paths: against the config's directory */
    if (!realpath(path, dirbuf))
        snprintf(dirbuf, sizeof(dirbuf), "%s", path);
    dir = dirname(dirbuf);
    if (!c->tls) {
        problem(&ck, NULL, "tls", "`tls` is required: tls { cert_file key_file ca_file }");
    } else if ((rc = resolve(&c->tls->cert_file, dir)) != 0 ||
               (rc = resolve(&c->tls->key_file, dir)) != 0 ||
               (rc = resolve(&c->tls->ca_file, dir)) != 0) {
        fa_errorf(err, rc, "out of memory");
        goto out;
    }
    if (!c->aggregator || !*c->aggregator) {
        problem(&ck, m, "aggregator", "`aggregator` is required: the aggregator's host:port");
    } else {
        fa_error e = {0};
        if (fa_config_check_hostport(c->aggregator, &e) != 0)
            problem(&ck, m, "aggregator", "`aggregator`: %s", e.msg);
    }
    if (c->tls && !no_files) {
        need_file(&ck, &c->tls->base, "cert_file", c->tls->cert_file,
                  "your operator certificate, deploy/pki.sh --operators", 0);
        need_file(&ck, &c->tls->base, "key_file", c->tls->key_file, "its private key", 1);
        need_file(&ck, &c->tls->base, "ca_file", c->tls->ca_file, "the federation CA", 0);
    } else if (c->tls) {
        if (!c->tls->cert_file || !*c->tls->cert_file)
            problem(&ck, &c->tls->base, "cert_file", "`tls.cert_file` is required");
        if (!c->tls->key_file || !*c->tls->key_file)
            problem(&ck, &c->tls->base, "key_file", "`tls.key_file` is required");
        if (!c->tls->ca_file || !*c->tls->ca_file)
            problem(&ck, &c->tls->base, "ca_file", "`tls.ca_file` is required");
    }
    if (c->timeout_ms == 0)
        problem(&ck, m, "timeout_ms", "`timeout_ms` must be positive");
    if (ck.n) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: %u problem%s", path, ck.n, ck.n == 1 ? "" : "s");
        goto out;
    }
    *out = c;
    m = NULL;
out:
    fa_textformat_positions_del(pos);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* ------------------------------------------------------------- options */

static int is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* Fills o's connection settings from a config file. */
static int use_config(fa_admin_opts *o, int slot, const char *path, const char *prog)
{
    fa_diags *d = NULL;
    fa_error err = {0};
    Fedagg__OperatorConfig *c;
    int rc;

    if (fa_diags_new(&d) != 0) {
        fprintf(stderr, "fedagg %s: out of memory\n", prog);
        return 1;
    }
    rc = fa_admin_config_load(path, 0, &c, d, &err);
    if (rc != 0) {
        for (size_t i = 0; i < fa_diags_count(d); i++)
            fprintf(stderr, "%s\n", fa_diags_get(d, i) ? fa_diags_get(d, i) : "?");
        if (fa_diags_count(d) == 0)
            fprintf(stderr, "fedagg %s: %s\n", prog, fa_error_msg(&err, rc));
        fa_diags_del(d);
        return 1;
    }
    fa_diags_del(d);
    o->cfg[slot] = c;
    o->aggregator = c->aggregator;
    o->cert = c->tls->cert_file;
    o->key = c->tls->key_file;
    o->ca = c->tls->ca_file;
    o->server_name = c->tls->server_name && c->tls->server_name[0] ? c->tls->server_name : NULL;
    o->timeout_ms = c->timeout_ms;
    return 0;
}

int fa_admin_parse(int argc, char **argv, const char *usage, int allow_json, int allow_from,
                   fa_admin_opts *o)
{
    const char *prog = argv[0], *config = NULL, *env = getenv("FEDAGG_OPERATOR_CONFIG");
    const char *aggregator = NULL, *cert = NULL, *key = NULL, *ca = NULL, *name = NULL,
               *timeout = NULL;
    const char *const *extra = o->extra;

    memset(o, 0, sizeof(*o));
    o->extra = extra;
    o->timeout_ms = 10000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        struct {
            const char *flag;
            const char **dst;
        } vals[] = {{"--aggregator", &aggregator},
                    {"--cert", &cert},
                    {"--key", &key},
                    {"--ca", &ca},
                    {"--name", &name},
                    {"--config", &config},
                    {"--timeout", &timeout},
                    {"--from", &o->from},
                    {"--federation", &o->federation}};
        int done = 0;

        if (is_help(a)) {
            fputs(usage, stdout);
            return 0;
        }
        if (allow_json && !strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]) && !done; k++) {
            size_t fl = strlen(vals[k].flag);
            if (strncmp(a, vals[k].flag, fl) != 0 || (a[fl] != '\0' && a[fl] != '='))
                continue;
            if (!allow_from && !strcmp(vals[k].flag, "--from"))
                break;
            if (a[fl] == '=') {
                *vals[k].dst = a + fl + 1;
            } else if (i + 1 < argc) {
                *vals[k].dst = argv[++i];
            } else {
                fprintf(stderr, "fedagg %s: %s needs a value\n", prog, vals[k].flag);
                return 2;
            }
            done = 1;
        }
        for (size_t k = 0; extra && extra[k] && !done && k < 8; k++) {
            size_t fl = strlen(extra[k]);
            if (strncmp(a, extra[k], fl) != 0 || (a[fl] != '\0' && a[fl] != '='))
                continue;
            if (a[fl] == '=') {
                o->extra_val[k] = a + fl + 1;
            } else if (i + 1 < argc) {
                o->extra_val[k] = argv[++i];
            } else {
                fprintf(stderr, "fedagg %s: %s needs a value\n", prog, extra[k]);
                return 2;
            }
            done = 1;
        }
        if (done)
            continue;
        if (a[0] == '-' && a[1]) {
            fprintf(stderr, "fedagg %s: unknown option '%s'\n\n%s", prog, a, usage);
            return 2;
        }
        if (o->npos == sizeof(o->pos) / sizeof(o->pos[0])) {
            fprintf(stderr, "fedagg %s: unexpected argument '%s'\n\n%s", prog, a, usage);
            return 2;
        }
        o->pos[o->npos++] = a;
    }
    if (o->from)
        return -1; /* no connection needed */
    /* later wins: $FEDAGG_OPERATOR_CONFIG, --config, the flags */
    if (env && *env && !config && use_config(o, 0, env, prog) != 0)
        return 1;
    if (config && use_config(o, 1, config, prog) != 0)
        return 1;
    if (aggregator)
        o->aggregator = aggregator;
    if (cert)
        o->cert = cert;
    if (key)
        o->key = key;
    if (ca)
        o->ca = ca;
    if (name)
        o->server_name = name;
    if (timeout) {
        char *end;
        unsigned long v;
        errno = 0;
        v = strtoul(timeout, &end, 10);
        if (!*timeout || *end || errno || v == 0 || v > 3600000) {
            fprintf(stderr, "fedagg %s: --timeout '%s' is not a number of ms (1..3600000)\n", prog,
                    timeout);
            return 2;
        }
        o->timeout_ms = (uint32_t)v;
    }
    if (o->federation &&
        (!o->federation[0] || strlen(o->federation) > 63 ||
         strspn(o->federation,
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
             strlen(o->federation))) {
        fprintf(stderr, "fedagg %s: --federation '%s' is not a federation id ([A-Za-z0-9._-])\n",
                prog, o->federation);
        return 2;
    }
    {
        const char *missing = !o->aggregator ? "--aggregator HOST:PORT"
                              : !o->cert     ? "--cert FILE (your operator certificate)"
                              : !o->key      ? "--key FILE"
                              : !o->ca       ? "--ca FILE (the federation CA)"
                                             : NULL;
        fa_error e = {0};
        if (missing) {
            fprintf(stderr, "fedagg %s: %s is required (or --config OPERATOR.textproto)\n\n%s",
                    prog, missing, usage);
            return 2;
        }
        if (fa_config_check_hostport(o->aggregator, &e) != 0) {
            fprintf(stderr, "fedagg %s: --aggregator %s\n", prog, e.msg);
            return 2;
        }
    }
    return -1;
}

void fa_admin_opts_free(fa_admin_opts *o)
{
    for (int i = 0; i < 2; i++)
        if (o->cfg[i])
            protobuf_c_message_free_unpacked(&o->cfg[i]->base, NULL);
    o->cfg[0] = o->cfg[1] = NULL;
}

/* -------------------------------------------------------------- client */

struct fa_admin_client {
    fa_h3_client *h3;
    char server[300];
    char federation[64]; /* "" the default one */
    uint32_t timeout_ms;
};

int fa_admin_client_new(fa_admin_client **out, const fa_admin_opts *o, fa_error *err)
{
    fa_h3_client_config cfg;
    fa_admin_client *c;
    int rc;

    *out = NULL;
    if (!o->aggregator || !o->cert || !o->key || !o->ca)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the aggregator address, --cert, --key and --ca are "
                         "required");
    if (!(c = calloc(1, sizeof(*c))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    snprintf(c->server, sizeof(c->server), "%s", o->aggregator);
    snprintf(c->federation, sizeof(c->federation), "%s", o->federation ? o->federation : "");
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    fa_h3_client_config_default(&cfg);
    cfg.server = o->aggregator;
    cfg.server_name = o->server_name;
    cfg.ca_file = o->ca;
    cfg.cert_file = o->cert;
    cfg.key_file = o->key;
    cfg.connect_timeout_ms = c->timeout_ms < 10000 ? c->timeout_ms : 10000;
    cfg.connect_attempts = 2;
    cfg.reconnect_initial_ms = 200;
    cfg.reconnect_max_ms = 1000;
    rc = fa_h3_client_new(&c->h3, &cfg, err);
    if (rc != 0) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void fa_admin_client_del(fa_admin_client *c)
{
    if (!c)
        return;
    fa_h3_client_close(c->h3);
    fa_h3_client_del(c->h3);
    free(c);
}

/* One request; the body in *json (for a 200 always), FA_ERR_HTTP with the
 * aggregator's reason for another status (keep: the body is kept then too). */
static int request_ex(fa_admin_client *c, const char *method, const char *path, const void *body,
                      size_t len, const char *hname, const char *hvalue, int keep, char **json,
                      int *status, fa_error *err)
{
    fa_h3_header h[] = {{"accept", "application/json"}, {hname, hvalue}};
    fa_h3_client_req req;
    fa_h3_response resp;
    int rc;

    *json = NULL;
    if (status)
        *status = 0;
    memset(&req, 0, sizeof(req));
    req.method = method;
    req.path = path;
    req.headers = h;
    req.nheaders = hname ? 2 : 1;
    req.body = body;
    req.body_len = len;
    req.timeout_ms = c->timeout_ms;
    req.max_response_bytes = MAX_DOCUMENT;
    req.idempotent = !strcmp(method, "GET");
    rc = fa_h3_client_request(c->h3, &req, &resp, err);
    if (rc != 0) {
        char m[512];
        snprintf(m, sizeof(m), "%s", fa_error_msg(err, rc));
        return fa_errorf(err, rc, "cannot reach the aggregator at %s: %s", c->server, m);
    }
    if (status)
        *status = resp.status;
    if (resp.status != 200) {
        json_t *o = json_loadb((const char *)resp.body, resp.body_len, 0, NULL);
        const char *why = o ? json_string_value(json_object_get(o, "error")) : NULL;
        if (why)
            fa_errorf(err, FA_ERR_HTTP, "the aggregator answered %d: %s", resp.status, why);
        else if (resp.status == 404 || resp.status == 405)
            fa_errorf(err, FA_ERR_HTTP,
                      "the aggregator answered %d to %s %s: is it a version with the admin "
                      "API?",
                      resp.status, method, path);
        else
            fa_errorf(err, FA_ERR_HTTP, "the aggregator answered %d to %s %s", resp.status, method,
                      path);
        json_decref(o);
        if (keep && resp.body_len)
            *json = strndup((const char *)resp.body, resp.body_len);
        fa_h3_response_free(&resp);
        return FA_ERR_HTTP;
    }
    *json = strndup(resp.body ? (const char *)resp.body : "", resp.body_len);
    fa_h3_response_free(&resp);
    if (!*json)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    return 0;
}

static int request(fa_admin_client *c, const char *method, const char *path, char **json,
                   int *status, fa_error *err)
{
    return request_ex(c, method, path, NULL, 0, NULL, NULL, 0, json, status, err);
}

int fa_admin_request(fa_admin_client *c, const char *method, const char *path, const void *body,
                     size_t len, const char *hname, const char *hvalue, char **json, int *status,
                     fa_error *err)
{
    char full[512];
    snprintf(full, sizeof(full), "/v1/admin/%s", path);
    return request_ex(c, method, full, body, len, hname, hvalue, 1, json, status, err);
}

int fa_admin_get(fa_admin_client *c, const char *doc, char **json, int *status, fa_error *err)
{
    char path[256];
    if (c->federation[0])
        snprintf(path, sizeof(path), "/v1/admin/federations/%s/%s", c->federation, doc);
    else
        snprintf(path, sizeof(path), "/v1/admin/%s", doc);
    return request(c, "GET", path, json, status, err);
}

int fa_admin_post(fa_admin_client *c, const char *action, const char *region, char **json,
                  int *status, fa_error *err)
{
    char path[384];
    if (c->federation[0])
        /* a federation's own abort ends it: the attempt's is abort-round */
        snprintf(path, sizeof(path), "/v1/admin/federations/%s/%s%s%s", c->federation,
                 !strcmp(action, "abort") ? "abort-round" : action, region ? "?region=" : "",
                 region ? region : "");
    else
        snprintf(path, sizeof(path), "/v1/admin/%s%s%s", action, region ? "?region=" : "",
                 region ? region : "");
    return request(c, "POST", path, json, status, err);
}

int fa_admin_read_saved(const char *path, char **json, fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    *json = NULL;
    if (!strcmp(path, "-")) {
        size_t cap = 1 << 16, n = 0, got;
        char *buf = malloc(cap);
        while (buf && (got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
            n += got;
            if (n + 1 == cap) {
                char *nb = cap < MAX_DOCUMENT ? realloc(buf, cap * 2) : NULL;
                if (!nb) {
                    free(buf);
                    return fa_errorf(err, FA_ERR_TOOBIG, "stdin: more than %u MiB",
                                     MAX_DOCUMENT >> 20);
                }
                buf = nb;
                cap *= 2;
            }
        }
        if (!buf)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        buf[n] = '\0';
        *json = buf;
        return 0;
    }
    rc = fa_file_read_all(path, &data, &len, MAX_DOCUMENT, err);
    if (rc != 0)
        return rc;
    *json = strndup((const char *)data, len);
    free(data);
    return *json ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------- common bodies */

int fa_admin_show(int argc, char **argv, const char *doc, const char *usage,
                  const char *const *extra, int (*render)(const char *json, const fa_admin_opts *o))
{
    fa_admin_opts o = {.extra = extra};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    char *json = NULL;
    int rc = fa_admin_parse(argc, argv, usage, 1, 1, &o), status = 1;

    if (rc >= 0)
        return rc;
    if (o.npos) {
        fprintf(stderr, "fedagg %s: unexpected argument '%s'\n\n%s", argv[0], o.pos[0], usage);
        fa_admin_opts_free(&o);
        return 2;
    }
    fa_log_set_level(FA_LOG_ERROR); /* the transport's lines are not for this terminal */
    if (o.from)
        rc = fa_admin_read_saved(o.from, &json, &err);
    else if ((rc = fa_admin_client_new(&c, &o, &err)) == 0)
        rc = fa_admin_get(c, doc, &json, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg %s: %s\n", argv[0], fa_error_msg(&err, rc));
        goto out;
    }
    if (o.json) {
        size_t n = strlen(json);
        fputs(json, stdout);
        if (n == 0 || json[n - 1] != '\n')
            fputc('\n', stdout);
        status = fflush(stdout) == 0 ? 0 : 1;
    } else {
        status = render(json, &o);
    }
out:
    free(json);
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
}

int fa_admin_act(int argc, char **argv, const char *action, const char *usage, int region_arg)
{
    fa_admin_opts o = {0};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    char *json = NULL;
    int rc = fa_admin_parse(argc, argv, usage, 1, 0, &o), status = 1;

    if (rc >= 0)
        return rc;
    if (o.npos != (size_t)(region_arg ? 1 : 0)) {
        if (region_arg)
            fprintf(stderr, "fedagg %s: which region? (fedagg %s REGION)\n\n%s", argv[0], argv[0],
                    usage);
        else
            fprintf(stderr, "fedagg %s: unexpected argument '%s'\n\n%s", argv[0], o.pos[0], usage);
        fa_admin_opts_free(&o);
        return 2;
    }
    if (region_arg && strspn(o.pos[0], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_.") != strlen(o.pos[0])) {
        fprintf(stderr, "fedagg %s: '%s' is not a region id (letters, digits, '-')\n", argv[0],
                o.pos[0]);
        fa_admin_opts_free(&o);
        return 2;
    }
    fa_log_set_level(FA_LOG_ERROR);
    if ((rc = fa_admin_client_new(&c, &o, &err)) == 0)
        rc = fa_admin_post(c, action, region_arg ? o.pos[0] : NULL, &json, NULL, &err);
    if (rc != 0) {
        /* 409 (nothing to do: already paused...) exits 1 too, so that a
         * script can tell that its action changed nothing. */
        fprintf(stderr, "fedagg %s: %s\n", argv[0], fa_error_msg(&err, rc));
        goto out;
    }
    if (o.json) {
        printf("%s\n", json);
    } else {
        json_t *a = json_loads(json, 0, NULL);
        const char *msg = a ? json_string_value(json_object_get(a, "message")) : NULL;
        printf("%s\n", msg ? msg : json);
        json_decref(a);
    }
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    free(json);
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
}
