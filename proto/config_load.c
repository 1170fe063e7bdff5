/* config_load.c - reading a config file: parse, resolve paths, defaults.
 * The meaning checks are in config_check.c. */
#include "proto/config_check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "proto/textformat_internal.h"

#define MEMBER(msg, off) ((void *)((char *)(msg) + (off)))

const ProtobufCMessageDescriptor *fa_config_descriptor(fa_config_kind kind)
{
    switch (kind) {
    case FA_CONFIG_AGGREGATOR:
        return &fedagg__aggregator_config__descriptor;
    case FA_CONFIG_WORKER:
        return &fedagg__worker_config__descriptor;
    case FA_CONFIG_FEDERATION:
        return &fedagg__federation_config__descriptor;
    default:
        return NULL;
    }
}

fa_config_kind fa_config_kind_from_name(const char *name)
{
    if (name && !strcmp(name, "aggregator"))
        return FA_CONFIG_AGGREGATOR;
    if (name && !strcmp(name, "worker"))
        return FA_CONFIG_WORKER;
    if (name && !strcmp(name, "federation"))
        return FA_CONFIG_FEDERATION;
    return FA_CONFIG_UNKNOWN;
}

const char *fa_config_kind_name(fa_config_kind kind)
{
    switch (kind) {
    case FA_CONFIG_AGGREGATOR:
        return "aggregator";
    case FA_CONFIG_WORKER:
        return "worker";
    case FA_CONFIG_FEDERATION:
        return "federation";
    default:
        return "unknown";
    }
}

fa_config_kind fa_config_guess_kind(const char *text, size_t len)
{
    const ProtobufCMessageDescriptor *agg = &fedagg__aggregator_config__descriptor;
    const ProtobufCMessageDescriptor *wrk = &fedagg__worker_config__descriptor;
    const ProtobufCMessageDescriptor *fed = &fedagg__federation_config__descriptor;
    struct fa_tf_lexer lx;
    unsigned n_agg = 0, n_wrk = 0, n_process = 0, n_fed = 0;
    int depth = 0;

    /* Top-level identifiers followed by ':', '{' or '<' are field names;
     * count those that only one of the two messages has. */
    fa_tf_lex_init(&lx, text ? text : "", text ? len : 0, NULL, NULL);
    while (lx.cur.type != FA_TF_END) {
        struct fa_tf_token t = lx.cur;
        fa_tf_lex_next(&lx);
        if (t.type == FA_TF_SYMBOL && t.len == 1) {
            if (t.text[0] == '{' || t.text[0] == '<' || t.text[0] == '[')
                depth++;
            else if ((t.text[0] == '}' || t.text[0] == '>' || t.text[0] == ']') && depth > 0)
                depth--;
            continue;
        }
        if (depth == 0 && t.type == FA_TF_IDENT && t.len < 64 && lx.cur.type == FA_TF_SYMBOL &&
            lx.cur.len == 1 && strchr(":{<", lx.cur.text[0])) {
            char name[64];
            int in_agg, in_wrk, in_fed;
            memcpy(name, t.text, t.len);
            name[t.len] = '\0';
            in_agg = protobuf_c_message_descriptor_get_field_by_name(agg, name) != NULL;
            in_wrk = protobuf_c_message_descriptor_get_field_by_name(wrk, name) != NULL;
            in_fed = protobuf_c_message_descriptor_get_field_by_name(fed, name) != NULL;
            n_agg += in_agg && !in_wrk;
            n_wrk += in_wrk && !in_agg;
            /* the process's own fields, which a federation file has not;
             * `team` and the federation-only ones, which it has */
            n_process += in_agg && !in_fed;
            n_fed += in_fed && !in_wrk && (!in_agg || !strcmp(name, "team"));
        }
    }
    if (n_fed && !n_process && !n_wrk)
        return FA_CONFIG_FEDERATION;
    if (n_agg && !n_wrk)
        return FA_CONFIG_AGGREGATOR;
    if (n_wrk && !n_agg)
        return FA_CONFIG_WORKER;
    return FA_CONFIG_UNKNOWN;
}

uint32_t fa_config_effective_threshold(uint32_t threshold, size_t n_regions)
{
    if (threshold)
        return threshold;
    return (uint32_t)(n_regions / 2 + 1);
}

uint32_t fa_config_effective_min_regions(const Fedagg__RoundPolicy *round, size_t n_regions)
{
    uint32_t min = round ? round->min_regions : 2;
    uint32_t t = fa_config_effective_threshold(round ? round->threshold : 0, n_regions);
    return min > t ? min : t;
}

int fa_config_decode_key32(const uint8_t *data, size_t len, int raw_ok, uint8_t key[32],
                           fa_error *err)
{
    size_t start = 0, end = len, bin_len = 0;
    char text[128];
    const char *stop = NULL;

    if (raw_ok && len == 32) {
        memcpy(key, data, 32);
        return 0;
    }
    while (start < end && strchr(" \t\r\n", data[start]) && data[start])
        start++;
    while (end > start && strchr(" \t\r\n", data[end - 1]) && data[end - 1])
        end--;
    if (end - start == 0)
        return fa_errorf(err, FA_ERR_INVAL, "the key is empty");
    if (end - start >= sizeof(text))
        return fa_errorf(err, FA_ERR_INVAL,
                         "%zu characters is too long for a 32-byte key in base64 (44 characters)",
                         end - start);
    memcpy(text, data + start, end - start);
    text[end - start] = '\0';
    if (strlen(text) != end - start ||
        sodium_base642bin(key, 32, text, end - start, NULL, &bin_len, &stop,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        (stop && *stop)) {
        /* retry without padding ("...=" is optional) */
        if (sodium_base642bin(key, 32, text, end - start, NULL, &bin_len, &stop,
                              sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0 ||
            (stop && *stop))
            return fa_errorf(err, FA_ERR_INVAL,
                             "not base64 of a 32-byte key (expected 44 characters like "
                             "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\")");
    }
    if (bin_len != 32) {
        sodium_memzero(key, 32);
        return fa_errorf(err, FA_ERR_INVAL, "decodes to %zu bytes; an Ed25519 key has 32", bin_len);
    }
    return 0;
}

int fa_config_read_key32_file(const char *path, uint8_t key[32], fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    rc = fa_file_read_all(path, &data, &len, 4096, err);
    if (rc != 0)
        return rc;
    rc = fa_config_decode_key32(data, len, 1, key, err);
    if (rc != 0)
        fa_error_prefix(err, rc, "%s", path);
    free(data);
    return rc;
}

int fa_config_check_hostport(const char *s, fa_error *err)
{
    const char *colon, *host_end;
    char *end;
    long port;

    if (!s || !*s)
        return fa_errorf(err, FA_ERR_INVAL, "empty address; expected host:port");
    if (s[0] == '[') {
        host_end = strchr(s, ']');
        if (!host_end || host_end == s + 1)
            return fa_errorf(err, FA_ERR_INVAL,
                             "\"%s\": an IPv6 address needs a closing ] (e.g. \"[::1]:4433\")", s);
        for (const char *c = s + 1, *zone = NULL; c < host_end; c++) {
            if (*c == '%')
                zone = c; /* fe80::1%eth0: the zone is an interface name */
            else if (!(strchr("0123456789abcdefABCDEF:.", *c) ||
                       (zone && ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                 *c == '_' || *c == '-'))))
                return fa_errorf(err, FA_ERR_INVAL, "\"%s\": not an IPv6 address in brackets", s);
        }
        if (host_end[1] != ':')
            return fa_errorf(err, FA_ERR_INVAL, "\"%s\": expected [address]:port", s);
        colon = host_end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s)
            return fa_errorf(err, FA_ERR_INVAL,
                             "\"%s\": expected host:port (e.g. \"0.0.0.0:4433\")", s);
        if (memchr(s, ':', (size_t)(colon - s)))
            return fa_errorf(err, FA_ERR_INVAL,
                             "\"%s\": write an IPv6 address in brackets (\"[::1]:4433\")", s);
        for (const char *c = s; c < colon; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_'))
                return fa_errorf(err, FA_ERR_INVAL, "\"%s\": invalid character in the host name",
                                 s);
    }
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno || port < 1 || port > 65535 || colon[1] == '+' ||
        colon[1] == '-' || colon[1] == ' ')
        return fa_errorf(err, FA_ERR_INVAL, "\"%s\": the port must be a number from 1 to 65535", s);
    return 0;
}

/* ---- Paths ---- */

/* String fields that name files or directories, resolved against the config
 * file's directory.  test_config_paths (unit test) checks that every field
 * named *_file, *_dir, dir or *_images/_labels is listed. */
static const char *const path_fields[] = {
    "fedagg.TlsConfig.cert_file",
    "fedagg.TlsConfig.key_file",
    "fedagg.TlsConfig.ca_file",
    "fedagg.TlsConfig.crl_file",
    "fedagg.QuicConfig.static_secret_file",
    "fedagg.QuicConfig.qlog_dir",
    "fedagg.Region.identity_public_key_file",
    "fedagg.ModelSpec.init_file",
    "fedagg.Storage.dir",
    "fedagg.AuditConfig.log_file",
    "fedagg.AuditConfig.signing_key_file",
    "fedagg.Evaluation.test_images",
    "fedagg.Evaluation.test_labels",
    "fedagg.DataConfig.train_images",
    "fedagg.DataConfig.train_labels",
    "fedagg.DataConfig.test_images",
    "fedagg.DataConfig.test_labels",
    "fedagg.ExternalTrainer.workdir",
    "fedagg.WorkerConfig.identity_key_file",
    "fedagg.WorkerConfig.state_dir",
    "fedagg.WorkerConfig.aggregator_public_key_file",
    "fedagg.WorkerConfig.metrics_file",
    "fedagg.DashboardConfig.password_file",
    "fedagg.ServiceConfig.dir",
    "fedagg.AggregationService.public_key_file",
    "fedagg.PolicyDataset.path",
    "fedagg.AgentLink.socket",
    NULL,
};

int fa_config_is_path_field(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f)
{
    size_t dl = strlen(d->name);

    for (size_t i = 0; path_fields[i]; i++)
        if (!strncmp(path_fields[i], d->name, dl) && path_fields[i][dl] == '.' &&
            !strcmp(path_fields[i] + dl + 1, f->name))
            return 1;
    return 0;
}

/* Replaces a string member (freeing ours, never the static default). */
static int set_string(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, char **slot,
                      const char *value)
{
    char *copy = strdup(value);

    if (!copy)
        return FA_ERR_NOMEM;
    if (*slot && *slot != f->default_value)
        free(*slot);
    *slot = copy;
    (void)m;
    return 0;
}

static int resolve_one(const ProtobufCFieldDescriptor *f, char **slot, const char *basedir)
{
    size_t n;
    char *abs;

    if (!*slot || !**slot || (*slot)[0] == '/' || !basedir || !*basedir)
        return 0;
    n = strlen(basedir) + 1 + strlen(*slot) + 1;
    abs = malloc(n);
    if (!abs)
        return FA_ERR_NOMEM;
    snprintf(abs, n, "%s%s%s", basedir, basedir[strlen(basedir) - 1] == '/' ? "" : "/", *slot);
    if (*slot != f->default_value)
        free(*slot);
    *slot = abs;
    return 0;
}

static int resolve_paths(ProtobufCMessage *m, const char *basedir, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    int rc = 0;

    if (depth > 16)
        return 0;
    for (unsigned i = 0; i < d->n_fields && rc == 0; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        void *mem = MEMBER(m, f->offset);
        if (!fa_tf_field_present(m, f))
            continue;
        if (f->type == PROTOBUF_C_TYPE_STRING && fa_config_is_path_field(d, f)) {
            if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                size_t n = *(size_t *)MEMBER(m, f->quantifier_offset);
                for (size_t k = 0; k < n && rc == 0; k++)
                    rc = resolve_one(f, &(*(char ***)mem)[k], basedir);
            } else {
                rc = resolve_one(f, mem, basedir);
            }
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                size_t n = *(size_t *)MEMBER(m, f->quantifier_offset);
                for (size_t k = 0; k < n && rc == 0; k++)
                    rc = resolve_paths((*(ProtobufCMessage ***)mem)[k], basedir, depth + 1);
            } else {
                rc = resolve_paths(*(ProtobufCMessage **)mem, basedir, depth + 1);
            }
        }
    }
    return rc;
}

/* ---- Defaults ---- */

/* Allocates every absent optional (non-oneof) sub-message, recursively
 * (into the elements of repeated messages too), with the descriptor's
 * defaults. */
static int ensure_submessages(ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d;

    if (!m || depth > 16)
        return 0;
    d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        ProtobufCMessage **slot = MEMBER(m, f->offset);
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && f->label == PROTOBUF_C_LABEL_REPEATED) {
            /* each element written gets its sub-messages too (no new elements) */
            ProtobufCMessage **elems = *(ProtobufCMessage ***)slot;
            size_t n = *(size_t *)MEMBER(m, f->quantifier_offset);
            for (size_t k = 0; elems && k < n; k++)
                if (ensure_submessages(elems[k], depth + 1) != 0)
                    return FA_ERR_NOMEM;
            continue;
        }
        if (f->type != PROTOBUF_C_TYPE_MESSAGE || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        if (!*slot) {
            const ProtobufCMessageDescriptor *sd = f->descriptor;
            ProtobufCMessage *sub = malloc(sd->sizeof_message);
            if (!sub)
                return FA_ERR_NOMEM;
            protobuf_c_message_init(sd, sub);
            *slot = sub;
        }
        if (ensure_submessages(*slot, depth + 1) != 0)
            return FA_ERR_NOMEM;
    }
    return 0;
}

static int set_default_path(ProtobufCMessage *m, const char *field, const char *dir,
                            const char *name)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, field);
    char **slot = MEMBER(m, f->offset);
    char buf[4096];

    if (*slot && **slot)
        return 0;
    snprintf(buf, sizeof(buf), "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] != '/' ? "/" : "",
             name);
    return set_string(m, f, slot, buf);
}

/* The defaults an aggregator config and a federation file share. */
static int federation_defaults(Fedagg__ModelSpec *model, Fedagg__RoundPolicy *round,
                               size_t n_regions)
{
    if (model->n_hidden == 0) {
        model->hidden = malloc(2 * sizeof(*model->hidden));
        if (!model->hidden)
            return FA_ERR_NOMEM;
        model->hidden[0] = 256;
        model->hidden[1] = 128;
        model->n_hidden = 2;
    }
    if (round->threshold == 0 && n_regions) {
        round->threshold = fa_config_effective_threshold(0, n_regions);
        round->has_threshold = 1;
    }
    return 0;
}

static int aggregator_defaults(Fedagg__AggregatorConfig *c)
{
    /* Without a default federation (no storage.dir) the process's own files
     * go into the service's directory. */
    const char *dir = c->storage->dir && *c->storage->dir ? c->storage->dir
                      : c->service->dir                   ? c->service->dir
                                                          : "";
    int rc;

    if ((rc = federation_defaults(c->model, c->round, c->n_regions)) != 0)
        return rc;
    if ((rc = set_default_path(&c->audit->base, "log_file", dir, "audit.log")) != 0 ||
        (rc = set_default_path(&c->quic->base, "static_secret_file", dir, "quic.secret")) != 0)
        return rc;
    if (!c->audit->origin || !*c->audit->origin) {
        char origin[512];
        snprintf(origin, sizeof(origin), "fedagg/%s", c->federation_id ? c->federation_id : "");
        rc = set_string(
            &c->audit->base,
            protobuf_c_message_descriptor_get_field_by_name(c->audit->base.descriptor, "origin"),
            &c->audit->origin, origin);
    }
    return rc;
}

static int worker_defaults(Fedagg__WorkerConfig *c)
{
    int rc = 0;

    if ((!c->tls->server_name || !*c->tls->server_name) && c->aggregator && *c->aggregator) {
        char host[512];
        const char *a = c->aggregator, *colon;
        if (a[0] == '[') {
            const char *close = strchr(a, ']');
            snprintf(host, sizeof(host), "%.*s", close ? (int)(close - a - 1) : 0, a + 1);
        } else {
            colon = strrchr(a, ':');
            snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - a) : (int)strlen(a), a);
        }
        rc = set_string(
            &c->tls->base,
            protobuf_c_message_descriptor_get_field_by_name(c->tls->base.descriptor, "server_name"),
            &c->tls->server_name, host);
    }
    if (rc == 0 && c->trainer && c->trainer->kind_case == FEDAGG__TRAINER__KIND_EXTERNAL &&
        c->trainer->external &&
        (!c->trainer->external->workdir || !*c->trainer->external->workdir) && c->state_dir)
        rc = set_string(&c->trainer->external->base,
                        protobuf_c_message_descriptor_get_field_by_name(
                            c->trainer->external->base.descriptor, "workdir"),
                        &c->trainer->external->workdir, c->state_dir);
    return rc;
}

/* ---- Loading ---- */

int fa_config_load_text(fa_config_kind kind, const char *text, size_t len, const char *filename,
                        const char *basedir, unsigned flags, ProtobufCMessage **out,
                        fa_diags *diags, fa_error *err)
{
    fa_textformat_positions *pos = NULL;
    fa_textformat_parse_opts o = {0};
    ProtobufCMessage *m = NULL;
    fa_diags *own = NULL;
    unsigned problems;
    int rc;

    *out = NULL;
    if (!filename)
        filename = "<config>";
    if (kind == FA_CONFIG_UNKNOWN)
        kind = fa_config_guess_kind(text, len);
    if (kind == FA_CONFIG_UNKNOWN) {
        if (diags)
            fa_diags_addf(diags, filename, 1, 1,
                          "cannot tell whether this is an aggregator or a worker config (or a "
                          "federation file); pass --type aggregator, worker or federation");
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s:1:1: cannot tell whether this is an aggregator or a worker config "
                         "(or a federation file); pass --type aggregator, worker or federation",
                         filename);
    }
    if (!diags) {
        if (fa_diags_new(&own) != 0)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        diags = own;
    }
    o.filename = filename;
    o.diags = diags;
    o.positions = &pos;
    rc = fa_textformat_parse_ex(fa_config_descriptor(kind), text, len, &o, &m, err);
    if (rc != 0 || (flags & FA_CONFIG_SYNTAX_ONLY))
        goto out;
    if ((rc = ensure_submessages(m, 0)) != 0 || (rc = resolve_paths(m, basedir, 0)) != 0) {
        fa_errorf(err, rc, "%s: out of memory", filename);
        goto out;
    }
    problems = fa_config_check_meaning(kind, m, pos, filename, flags, diags);
    if (problems) {
        rc = fa_diags_to_error(diags, FA_ERR_INVAL, err);
        goto out;
    }
    if (kind == FA_CONFIG_AGGREGATOR) {
        rc = aggregator_defaults((Fedagg__AggregatorConfig *)m);
    } else if (kind == FA_CONFIG_FEDERATION) {
        Fedagg__FederationConfig *fc = (Fedagg__FederationConfig *)m;
        rc = federation_defaults(fc->model, fc->round, fc->n_regions);
    } else {
        rc = worker_defaults((Fedagg__WorkerConfig *)m);
    }
    if (rc != 0)
        fa_errorf(err, rc, "%s: out of memory", filename);
out:
    if (rc == 0) {
        *out = m;
    } else if (m) {
        protobuf_c_message_free_unpacked(m, NULL);
    }
    fa_textformat_positions_del(pos);
    fa_diags_del(own);
    return rc;
}

int fa_config_load(fa_config_kind kind, const char *path, unsigned flags, ProtobufCMessage **out,
                   fa_diags *diags, fa_error *err)
{
    uint8_t *text = NULL;
    size_t len = 0;
    char *dir = NULL, *absdir, *slash;
    int rc;

    *out = NULL;
    rc = fa_file_read_all(path, &text, &len, FA_CONFIG_MAX_BYTES, err);
    if (rc != 0) {
        if (diags)
            fa_diags_addf(diags, path, 0, 0, "%s", fa_error_msg(err, rc));
        return rc;
    }
    /* relative paths in the file are relative to its directory, made
     * absolute so that a daemon that changes directory still finds them */
    dir = strdup(path);
    if (!dir) {
        free(text);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    absdir = realpath(dir, NULL);
    rc = fa_config_load_text(kind, (const char *)text, len, path, absdir ? absdir : dir, flags, out,
                             diags, err);
    free(absdir);
    free(dir);
    free(text);
    return rc;
}

int fa_config_load_aggregator(const char *path, Fedagg__AggregatorConfig **out, fa_diags *diags,
                              fa_error *err)
{
    return fa_config_load(FA_CONFIG_AGGREGATOR, path, 0, (ProtobufCMessage **)out, diags, err);
}

int fa_config_load_worker(const char *path, Fedagg__WorkerConfig **out, fa_diags *diags,
                          fa_error *err)
{
    return fa_config_load(FA_CONFIG_WORKER, path, 0, (ProtobufCMessage **)out, diags, err);
}

int fa_config_load_report(fa_config_kind kind, const char *path, const char *prog,
                          ProtobufCMessage **out)
{
    fa_diags *diags = NULL;
    fa_error err;
    int rc;

    *out = NULL;
    fa_error_clear(&err);
    if (fa_diags_new(&diags) != 0) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return FA_ERR_NOMEM;
    }
    rc = fa_config_load(kind, path, 0, out, diags, &err);
    if (rc != 0) {
        for (size_t i = 0; fa_diags_get(diags, i); i++)
            fprintf(stderr, "%s\n", fa_diags_get(diags, i));
        if (fa_diags_lost(diags) || fa_diags_count(diags) == 0)
            fprintf(stderr, "%s: %s\n", prog, fa_error_msg(&err, rc));
    }
    fa_diags_del(diags);
    return rc;
}
