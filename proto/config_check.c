/* config_check.c - what a config means: required fields, ranges, ids, keys,
 * files.  Runs on a parsed config whose paths are already absolute and whose
 * optional sub-messages are all present (config_load.c), before the
 * defaults of config_check.h are filled in, so that it sees what the
 * operator wrote. */
#include "proto/config_check.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "common/fa_file.h"

struct problem_rec {
    unsigned line, col, seq;
    char *text;
};

struct ck {
    fa_diags *diags;
    const char *file;
    const fa_textformat_positions *pos;
    unsigned flags;
    unsigned n;
    struct problem_rec *recs; /* collected, then sorted by position */
    size_t nrecs, cap;
};

/* Reports a problem at field `field` (element idx) of msg; when the text did
 * not write that field, at the start of msg; failing that, at 1:1. */
static void problem(struct ck *c, const void *msg, const char *field, size_t idx, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));

static void problem(struct ck *c, const void *msg, const char *field, size_t idx, const char *fmt,
                    ...)
{
    unsigned line = 1, col = 1;
    char text[1024];
    va_list ap;

    if (!field || fa_textformat_position(c->pos, msg, field, idx, &line, &col) != 0)
        if (fa_textformat_position_of(c->pos, msg, &line, &col) != 0)
            line = col = 1;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    c->n++;
    if (c->nrecs == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct problem_rec *r = realloc(c->recs, cap * sizeof(*r));
        if (!r) { /* keep the report, unsorted */
            fa_diags_addf(c->diags, c->file, line, col, "%s", text);
            return;
        }
        c->recs = r;
        c->cap = cap;
    }
    c->recs[c->nrecs] = (struct problem_rec){line, col, c->n, strdup(text)};
    if (!c->recs[c->nrecs].text) {
        fa_diags_addf(c->diags, c->file, line, col, "%s", text);
        return;
    }
    c->nrecs++;
}

static int by_position(const void *a, const void *b)
{
    const struct problem_rec *x = a, *y = b;

    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int empty(const char *s)
{
    return !s || !*s;
}

static int check_files(const struct ck *c)
{
    return !(c->flags & FA_CONFIG_NO_FILES);
}

/* A file that must exist and be readable. */
static void need_file(struct ck *c, const void *msg, const char *field, size_t idx,
                      const char *path, const char *what)
{
    struct stat st;

    if (!check_files(c) || empty(path))
        return;
    if (stat(path, &st) != 0)
        problem(c, msg, field, idx, "`%s`: %s: %s", what, path,
                errno == ENOENT ? "no such file" : strerror(errno));
    else if (!S_ISREG(st.st_mode))
        problem(c, msg, field, idx, "`%s`: %s is not a regular file", what, path);
    else if (access(path, R_OK) != 0)
        problem(c, msg, field, idx, "`%s`: %s is not readable: %s", what, path, strerror(errno));
}

/* A secret key file: exists, readable, not group/world accessible. */
static void need_key_file(struct ck *c, const void *msg, const char *field, const char *path,
                          const char *what)
{
    fa_error e = {0};
    unsigned before = c->n;

    need_file(c, msg, field, 0, path, what);
    if (c->n != before || !check_files(c) || empty(path))
        return;
    if (fa_file_check_private(path, &e) != 0)
        problem(c, msg, field, 0, "`%s`: %s", what, e.msg);
}

/* A directory that, when it exists, is a directory (daemons create it). */
static void maybe_dir(struct ck *c, const void *msg, const char *field, const char *path,
                      const char *what)
{
    struct stat st;

    if (!check_files(c) || empty(path))
        return;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        problem(c, msg, field, 0, "`%s`: %s exists and is not a directory", what, path);
}

static void need_string(struct ck *c, const void *msg, const char *field, const char *value,
                        const char *what, const char *hint)
{
    if (empty(value))
        problem(c, msg, field, 0, "`%s` is required%s%s", what, hint ? ": " : "", hint ? hint : "");
}

static void check_hostport(struct ck *c, const void *msg, const char *field, const char *value,
                           const char *what)
{
    fa_error e = {0};

    if (!empty(value) && fa_config_check_hostport(value, &e) != 0)
        problem(c, msg, field, 0, "`%s`: %s", what, e.msg);
}

static void check_log_level(struct ck *c, const void *msg, const char *value)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};

    for (size_t i = 0; i < 4; i++)
        if (value && !strcmp(value, levels[i]))
            return;
    problem(c, msg, "log_level", 0, "`log_level`: \"%s\" is not debug, info, warn or error",
            value ? value : "");
}

static void check_federation_id(struct ck *c, const void *msg, const char *id)
{
    size_t n = id ? strlen(id) : 0;

    if (n == 0 || n > 255) {
        problem(c, msg, "federation_id", 0, "`federation_id` must have 1 to 255 characters");
        return;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] <= ' ' || (unsigned char)id[i] >= 0x7f) {
            problem(c, msg, "federation_id", 0,
                    "`federation_id` \"%s\": only printable ASCII without spaces", id);
            return;
        }
}

/* [a-z0-9-]{1,63} */
static int region_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;

    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-'))
            return 0;
    return 1;
}

static void check_region_id(struct ck *c, const void *msg, const char *field, size_t idx,
                            const char *what, const char *id)
{
    if (empty(id))
        problem(c, msg, field, idx, "`%s` is required (e.g. \"eu-west\")", what);
    else if (!region_id_ok(id))
        problem(c, msg, field, idx,
                "`%s` \"%s\" is not a region id: 1 to 63 characters of a-z, 0-9 and -", what, id);
}

static int finite_pos(double v)
{
    return isfinite(v) && v > 0;
}

static int unit_interval(double v) /* [0, 1) */
{
    return isfinite(v) && v >= 0 && v < 1;
}

/* Exactly/at most one of key and key_file; the key decodes to 32 bytes. */
static int check_public_key(struct ck *c, const void *msg, const char *what, const char *kfield,
                            const char *key, const char *ffield, const char *file, int required,
                            uint8_t out[32])
{
    fa_error e = {0};

    if (!empty(key) && !empty(file)) {
        problem(c, msg, ffield, 0, "`%s`: set only one of %s and %s", what, kfield, ffield);
        return 0;
    }
    if (empty(key) && empty(file)) {
        if (required)
            problem(c, msg, NULL, 0, "`%s`: set %s (base64) or %s", what, kfield, ffield);
        return 0;
    }
    if (!empty(key)) {
        if (fa_config_decode_key32((const uint8_t *)key, strlen(key), 0, out, &e) != 0) {
            problem(c, msg, kfield, 0, "`%s.%s`: %s", what, kfield, e.msg);
            return 0;
        }
    } else {
        if (!check_files(c))
            return 0;
        if (fa_config_read_key32_file(file, out, &e) != 0) {
            problem(c, msg, ffield, 0, "`%s.%s`: %s", what, ffield, e.msg);
            return 0;
        }
    }
    if (!crypto_core_ed25519_is_valid_point(out)) {
        problem(c, msg, empty(key) ? ffield : kfield, 0,
                "`%s.%s`: 32 bytes, but not a valid Ed25519 public key", what,
                empty(key) ? ffield : kfield);
        return 0;
    }
    return 1;
}

static void check_tls(struct ck *c, const Fedagg__TlsConfig *t, const char *who)
{
    char what[64];

    snprintf(what, sizeof(what), "tls.cert_file");
    need_string(c, t, "cert_file", t->cert_file, what, who);
    need_file(c, t, "cert_file", 0, t->cert_file, what);
    snprintf(what, sizeof(what), "tls.key_file");
    need_string(c, t, "key_file", t->key_file, what, "the PEM private key of cert_file");
    need_key_file(c, t, "key_file", t->key_file, what);
    snprintf(what, sizeof(what), "tls.ca_file");
    need_string(c, t, "ca_file", t->ca_file, what, "the federation CA certificate (PEM)");
    need_file(c, t, "ca_file", 0, t->ca_file, what);
    if (!empty(t->crl_file))
        need_file(c, t, "crl_file", 0, t->crl_file, "tls.crl_file");
}

static void check_quic(struct ck *c, const Fedagg__QuicConfig *q, int server)
{
    if (q->max_stream_window == 0)
        problem(c, q, "max_stream_window", 0, "`quic.max_stream_window` must be positive");
    if (q->max_connection_window == 0)
        problem(c, q, "max_connection_window", 0, "`quic.max_connection_window` must be positive");
    else if (q->max_stream_window > q->max_connection_window)
        problem(c, q, "max_stream_window", 0,
                "`quic.max_stream_window` (%llu) exceeds `quic.max_connection_window` (%llu); "
                "one stream could never use its window",
                (unsigned long long)q->max_stream_window,
                (unsigned long long)q->max_connection_window);
    if (q->idle_timeout_ms == 0)
        problem(c, q, "idle_timeout_ms", 0, "`quic.idle_timeout_ms` must be positive");
    if (q->max_connections == 0)
        problem(c, q, "max_connections", 0, "`quic.max_connections` must be positive");
    if (q->max_streams_per_connection == 0)
        problem(c, q, "max_streams_per_connection", 0,
                "`quic.max_streams_per_connection` must be positive");
    if (q->max_body_bytes == 0)
        problem(c, q, "max_body_bytes", 0, "`quic.max_body_bytes` must be positive");
    if (q->reconnect_initial_ms == 0)
        problem(c, q, "reconnect_initial_ms", 0, "`quic.reconnect_initial_ms` must be positive");
    else if (q->reconnect_initial_ms > q->reconnect_max_ms)
        problem(c, q, "reconnect_initial_ms", 0,
                "`quic.reconnect_initial_ms` (%u) exceeds `quic.reconnect_max_ms` (%u)",
                q->reconnect_initial_ms, q->reconnect_max_ms);
    if (server && !empty(q->static_secret_file) && check_files(c) &&
        access(q->static_secret_file, F_OK) == 0)
        need_key_file(c, q, "static_secret_file", q->static_secret_file, "quic.static_secret_file");
    maybe_dir(c, q, "qlog_dir", q->qlog_dir, "quic.qlog_dir");
    if (!server)
        return;
    if (q->max_connections_per_address == 0)
        problem(c, q, "max_connections_per_address", 0,
                "`quic.max_connections_per_address` must be positive");
    if (q->max_handshakes == 0)
        problem(c, q, "max_handshakes", 0, "`quic.max_handshakes` must be positive");
    if (q->max_handshakes_per_address == 0)
        problem(c, q, "max_handshakes_per_address", 0,
                "`quic.max_handshakes_per_address` must be positive");
    if (q->handshake_timeout_ms < 100)
        problem(c, q, "handshake_timeout_ms", 0,
                "`quic.handshake_timeout_ms` (%u) must be at least 100", q->handshake_timeout_ms);
    if (q->max_connections_per_identity == 0)
        problem(c, q, "max_connections_per_identity", 0,
                "`quic.max_connections_per_identity` must be positive");
    if (q->max_buffered_request_bytes == 0)
        problem(c, q, "max_buffered_request_bytes", 0,
                "`quic.max_buffered_request_bytes` must be positive");
    if (q->max_buffered_request_bytes_per_identity == 0)
        problem(c, q, "max_buffered_request_bytes_per_identity", 0,
                "`quic.max_buffered_request_bytes_per_identity` must be positive");
    else if (q->max_buffered_request_bytes_per_identity > q->max_buffered_request_bytes)
        problem(c, q, "max_buffered_request_bytes_per_identity", 0,
                "`quic.max_buffered_request_bytes_per_identity` (%llu) exceeds "
                "`quic.max_buffered_request_bytes` (%llu)",
                (unsigned long long)q->max_buffered_request_bytes_per_identity,
                (unsigned long long)q->max_buffered_request_bytes);
}

/* The federation's regions (the aggregator's list, or the worker's copy of
 * it): well-formed unique ids, one valid identity key each, no key twice. */
static void check_regions(struct ck *c, const void *owner, Fedagg__Region *const *regions, size_t n)
{
    uint8_t(*keys)[32] = NULL;
    int *have = NULL;

    if (n == 0) {
        problem(c, owner, NULL, 0,
                "`regions`: list at least one region (regions { id: \"eu-west\" "
                "identity_public_key: \"...\" })");
        return;
    }
    keys = calloc(n, sizeof(*keys));
    have = calloc(n, sizeof(*have));
    for (size_t i = 0; i < n; i++) {
        const Fedagg__Region *r = regions[i];
        char what[64];
        snprintf(what, sizeof(what), "regions[%zu].id", i);
        check_region_id(c, r, "id", 0, what, r->id);
        for (size_t j = 0; j < i && !empty(r->id); j++) {
            if (!empty(regions[j]->id) && !strcmp(regions[j]->id, r->id)) {
                unsigned line = 0, col = 0;
                fa_textformat_position(c->pos, &regions[j]->base, "id", 0, &line, &col);
                problem(c, r, "id", 0, "`%s`: region \"%s\" is listed twice (first at %u:%u)", what,
                        r->id, line, col);
                break;
            }
        }
        snprintf(what, sizeof(what), "regions[%zu]", i);
        if (keys && have &&
            check_public_key(c, r, what, "identity_public_key", r->identity_public_key,
                             "identity_public_key_file", r->identity_public_key_file, 1, keys[i])) {
            have[i] = 1;
            for (size_t j = 0; j < i; j++) {
                if (have[j] && sodium_memcmp(keys[i], keys[j], 32) == 0) {
                    problem(c, r,
                            empty(r->identity_public_key) ? "identity_public_key_file"
                                                          : "identity_public_key",
                            0,
                            "`%s`: the same identity key as regions[%zu]; every region needs "
                            "its own key",
                            what, j);
                    break;
                }
            }
        }
    }
    if (keys)
        sodium_memzero(keys, n * sizeof(*keys));
    free(keys);
    free(have);
}

static void check_round(struct ck *c, const Fedagg__RoundPolicy *r, size_t n)
{
    static const char *const deadlines[] = {"advertise_deadline_ms", "shares_deadline_ms",
                                            "masked_deadline_ms", "consistency_deadline_ms",
                                            "unmask_deadline_ms"};
    const uint32_t values[] = {r->advertise_deadline_ms, r->shares_deadline_ms,
                               r->masked_deadline_ms, r->consistency_deadline_ms,
                               r->unmask_deadline_ms};

    if (r->min_regions == 0)
        problem(c, r, "min_regions", 0, "`round.min_regions` must be at least 1");
    else if (n && r->min_regions > n)
        problem(c, r, "min_regions", 0,
                "`round.min_regions` (%u) exceeds the number of regions (%zu); no round could "
                "ever start",
                r->min_regions, n);
    if (n && r->threshold > n)
        problem(c, r, "threshold", 0,
                "`round.threshold` (%u) exceeds the number of regions (%zu); use 1..%zu, or 0 "
                "for a majority",
                r->threshold, n, n);
    for (size_t i = 0; i < 5; i++)
        if (values[i] == 0)
            problem(c, r, deadlines[i], 0, "`round.%s` must be positive", deadlines[i]);
    if (n && r->neighbours >= n && r->neighbours != 0)
        problem(c, r, "neighbours", 0,
                "`round.neighbours` (%u) must be below the number of regions (%zu), or 0 for "
                "all",
                r->neighbours, n);
    if (r->max_uploads_in_flight > 1024)
        problem(c, r, "max_uploads_in_flight", 0,
                "`round.max_uploads_in_flight` (%u) is over 1024 (each one in flight holds a "
                "journal as large as an upload)",
                r->max_uploads_in_flight);
}

static void check_model(struct ck *c, const Fedagg__ModelSpec *m)
{
    if (m->input_dim == 0)
        problem(c, m, "input_dim", 0, "`model.input_dim` must be at least 1");
    if (m->output_dim < 2)
        problem(c, m, "output_dim", 0, "`model.output_dim` must be at least 2 (classes)");
    for (size_t i = 0; i < m->n_hidden; i++)
        if (m->hidden[i] == 0 || m->hidden[i] > (1u << 20))
            problem(c, m, "hidden", i, "`model.hidden[%zu]` (%u) must be from 1 to 1048576", i,
                    m->hidden[i]);
    need_file(c, m, "init_file", 0, m->init_file, "model.init_file");
    if (m->federated) {
        const Fedagg__TensorSelection *f = m->federated;
        for (size_t i = 0; i < f->n_include; i++)
            if (empty(f->include[i]))
                problem(c, f, "include", i, "`model.federated.include[%zu]` is empty", i);
        for (size_t i = 0; i < f->n_exclude; i++)
            if (empty(f->exclude[i]))
                problem(c, f, "exclude", i, "`model.federated.exclude[%zu]` is empty", i);
    }
}

static void check_optimizer(struct ck *c, const Fedagg__ServerOptimizer *o)
{
    if (!finite_pos(o->learning_rate))
        problem(c, o, "learning_rate", 0, "`optimizer.learning_rate` (%g) must be positive",
                o->learning_rate);
    if (!unit_interval(o->momentum))
        problem(c, o, "momentum", 0, "`optimizer.momentum` (%g) must be in [0, 1)", o->momentum);
    if (!unit_interval(o->beta1))
        problem(c, o, "beta1", 0, "`optimizer.beta1` (%g) must be in [0, 1)", o->beta1);
    if (!unit_interval(o->beta2))
        problem(c, o, "beta2", 0, "`optimizer.beta2` (%g) must be in [0, 1)", o->beta2);
    if (!finite_pos(o->tau))
        problem(c, o, "tau", 0, "`optimizer.tau` (%g) must be positive", o->tau);
}

static void check_quantization(struct ck *c, const Fedagg__Quantization *q)
{
    if (q->bits < 2 || q->bits > 24)
        problem(c, q, "bits", 0, "`quantization.bits` (%u) must be from 2 to 24", q->bits);
    if (!finite_pos(q->clip_l2_norm))
        problem(c, q, "clip_l2_norm", 0, "`quantization.clip_l2_norm` (%g) must be positive",
                q->clip_l2_norm);
    if (!finite_pos(q->clip_value))
        problem(c, q, "clip_value", 0, "`quantization.clip_value` (%g) must be positive",
                q->clip_value);
    if (q->max_examples == 0)
        problem(c, q, "max_examples", 0, "`quantization.max_examples` must be at least 1");
    if (!finite_pos(q->range_headroom) || q->range_headroom < 1)
        problem(c, q, "range_headroom", 0, "`quantization.range_headroom` (%g) must be at least 1",
                q->range_headroom);
    if (!finite_pos(q->range_initial))
        problem(c, q, "range_initial", 0, "`quantization.range_initial` (%g) must be positive",
                q->range_initial);
    if (!isfinite(q->range_floor) || q->range_floor < 0)
        problem(c, q, "range_floor", 0, "`quantization.range_floor` (%g) must be 0 or more",
                q->range_floor);
    if (!finite_pos(q->range_min))
        problem(c, q, "range_min", 0, "`quantization.range_min` (%g) must be positive",
                q->range_min);
    if (!finite_pos(q->range_initial_min))
        problem(c, q, "range_initial_min", 0,
                "`quantization.range_initial_min` (%g) must be positive", q->range_initial_min);
}

/* The ranges of DistributedDp; what depends on the model (the bits enough
 * for its dimension, the ring within 32 bits) is checked when the
 * aggregator opens it (privacy/ddg.h). */
static void check_distributed_dp(struct ck *c, const Fedagg__DistributedDp *d, size_t n_regions)
{
    if (!d || !d->enabled)
        return;
    if (!finite_pos(d->clip))
        problem(c, d, "clip", 0, "`distributed_dp.clip` (%g) must be a finite L2 norm > 0",
                d->clip);
    if (!finite_pos(d->noise_multiplier))
        problem(c, d, "noise_multiplier", 0,
                "`distributed_dp.noise_multiplier` (%g) must be finite and > 0",
                d->noise_multiplier);
    if (d->min_regions > n_regions)
        problem(c, d, "min_regions", 0,
                "`distributed_dp.min_regions` (%u) must not exceed the %zu regions", d->min_regions,
                n_regions);
    if (d->bits < 4 || d->bits > 30)
        problem(c, d, "bits", 0, "`distributed_dp.bits` (%u) must be from 4 to 30", d->bits);
    if (!(d->beta >= 0 && d->beta < 1))
        problem(c, d, "beta", 0, "`distributed_dp.beta` (%g) must be in [0, 1)", d->beta);
    if (!(d->beta_wrap > 0 && d->beta_wrap <= 0.01))
        problem(c, d, "beta_wrap", 0, "`distributed_dp.beta_wrap` (%g) must be in (0, 0.01]",
                d->beta_wrap);
    if (!(d->delta > 0 && d->delta <= 0.1))
        problem(c, d, "delta", 0, "`distributed_dp.delta` (%g) must be in (0, 0.1]", d->delta);
}

/* The limits of model/delta.h (fa_delta_bits_ok, FA_DELTA_MIN_BLOCK,
 * FA_DELTA_MAX_BLOCK), repeated here: proto/ comes before model/. */
static void check_model_delta(struct ck *c, const Fedagg__ModelDelta *d)
{
    if (!d)
        return;
    if (d->bits != 4 && d->bits != 8)
        problem(c, d, "bits", 0, "`model_delta.bits` (%u) must be 4 or 8", d->bits);
    if (d->block < 16 || d->block > 65536 || (d->block & (d->block - 1)) != 0)
        problem(c, d, "block", 0,
                "`model_delta.block` (%u) must be a power of two from 16 to 65536", d->block);
}

/* The promotion policy (docs/governance.md); audit/promotion.h applies it. */
static void check_promotion(struct ck *c, const Fedagg__PromotionPolicy *p, size_t n_regions,
                            int have_evaluator)
{
    size_t n;
    if (!p || !p->enabled)
        return;
    n = p->metric ? strlen(p->metric) : 0;
    if (n == 0 || n > 63 ||
        strspn(p->metric, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789_.-") != n)
        problem(c, p, "metric", 0,
                "`promotion.metric` '%s' must be a metric name of [A-Za-z0-9_.-], 1 to 63 bytes "
                "(accuracy, loss, or a named metric the evaluations report)",
                p->metric ? p->metric : "");
    if (!isfinite(p->tolerance) || p->tolerance < 0)
        problem(c, p, "tolerance", 0, "`promotion.tolerance` (%g) must be finite and >= 0",
                p->tolerance);
    if (p->source == FEDAGG__PROMOTION_SOURCE__SOURCE_FEDERATED &&
        (p->min_regions == 0 || p->min_regions > n_regions))
        problem(c, p, "min_regions", 0, "`promotion.min_regions` (%u) must be 1 to the %zu regions",
                p->min_regions, n_regions);
    if (p->source == FEDAGG__PROMOTION_SOURCE__SOURCE_CENTRAL && !have_evaluator)
        problem(c, p, "source", 0,
                "`promotion.source` SOURCE_CENTRAL judges by the evaluator command: set "
                "`evaluation.command` (in a federation file, `evaluator`)");
    for (size_t i = 0; i < p->n_channels; i++) {
        const char *ch = p->channels[i];
        n = ch ? strlen(ch) : 0;
        if (n == 0 || n > 63 || strspn(ch, "abcdefghijklmnopqrstuvwxyz0123456789._-") != n)
            problem(c, p, "channels", i,
                    "`promotion.channels[%zu]` '%s' must be a channel name of [a-z0-9._-], 1 "
                    "to 63 bytes",
                    i, ch ? ch : "");
        for (size_t k = 0; k < i; k++)
            if (ch && p->channels[k] && !strcmp(ch, p->channels[k]))
                problem(c, p, "channels", i, "`promotion.channels` names '%s' twice", ch);
    }
}

static void check_pair(struct ck *c, const void *msg, const char *prefix, const char *f1,
                       const char *v1, const char *f2, const char *v2)
{
    if (empty(v1) != empty(v2))
        problem(c, msg, empty(v1) ? f2 : f1, 0,
                "`%s.%s` and `%s.%s` go together; set both or neither", prefix, f1, prefix, f2);
}

/* A name of the service (a team, an operator, an evaluator, a created
 * federation's id): it may name a directory, so [A-Za-z0-9._-]{1,63} and
 * not "." or "..". */
static int service_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > 63 || !strcmp(s, ".") || !strcmp(s, ".."))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return 0;
    return 1;
}

static void check_service_name(struct ck *c, const void *msg, const char *field, size_t idx,
                               const char *what, const char *value)
{
    if (empty(value))
        problem(c, msg, field, idx, "`%s` is required", what);
    else if (!service_name_ok(value))
        problem(c, msg, field, idx,
                "`%s` \"%s\": 1 to 63 characters of A-Z, a-z, 0-9, '.', '_' and '-'", what, value);
}

/* The evaluation of a federation, as the aggregator config and a federation
 * file have it; commands only in the aggregator's. */
static void check_evaluation(struct ck *c, const Fedagg__Evaluation *ev, int commands)
{
    check_pair(c, ev, "evaluation", "test_images", ev->test_images, "test_labels", ev->test_labels);
    need_file(c, ev, "test_images", 0, ev->test_images, "evaluation.test_images");
    need_file(c, ev, "test_labels", 0, ev->test_labels, "evaluation.test_labels");
    if (ev->every == 0)
        problem(c, ev, "every", 0, "`evaluation.every` must be at least 1");
    if (!commands && ev->n_command)
        problem(c, ev, "command", 0,
                "`evaluation.command`: a federation file cannot carry a command; name one of "
                "the service's evaluators (service.evaluators) with `evaluator: \"NAME\"`");
    else if (ev->n_command && empty(ev->command[0]))
        problem(c, ev, "command", 0,
                "`evaluation.command`: give the evaluator and its arguments, e.g. "
                "command: [\"python3\", \"evaluate.py\", \"{input}\", \"{output}\"]");
    if (ev->timeout_s == 0)
        problem(c, ev, "timeout_s", 0, "`evaluation.timeout_s` must be positive");
    if (ev->max_region_examples == 0 || ev->max_region_examples > ((uint64_t)1 << 44))
        problem(c, ev, "max_region_examples", 0,
                "`evaluation.max_region_examples` must be 1 .. 2^44 (17592186044416)");
}

/* The service block and the operators (docs/service.md). */
static void check_service(struct ck *c, const Fedagg__AggregatorConfig *cfg)
{
    const Fedagg__ServiceConfig *sv = cfg->service;

    maybe_dir(c, sv, "dir", sv->dir, "service.dir");
    if (empty(sv->origin) || strchr(sv->origin, '\n'))
        problem(c, sv, "origin", 0, "`service.origin` must be one line of text");
    if (sv->max_federations == 0)
        problem(c, sv, "max_federations", 0, "`service.max_federations` must be at least 1");
    if (sv->n_evaluators && empty(sv->dir))
        problem(c, sv, "evaluators", 0,
                "`service.evaluators` are for federations created at run time: set "
                "`service.dir` too");
    for (size_t i = 0; i < sv->n_evaluators; i++) {
        const Fedagg__NamedEvaluator *e = sv->evaluators[i];
        char what[64];
        snprintf(what, sizeof(what), "service.evaluators[%zu].name", i);
        check_service_name(c, e, "name", 0, what, e->name);
        for (size_t j = 0; j < i && !empty(e->name); j++)
            if (!empty(sv->evaluators[j]->name) && !strcmp(sv->evaluators[j]->name, e->name)) {
                problem(c, e, "name", 0, "`%s`: evaluator \"%s\" is named twice", what, e->name);
                break;
            }
        if (e->n_command == 0 || empty(e->command[0]))
            problem(c, e, e->n_command ? "command" : NULL, 0,
                    "`service.evaluators[%zu].command`: give the evaluator and its arguments, "
                    "e.g. command: [\"python3\", \"evaluate.py\", \"{input}\", \"{output}\"]",
                    i);
        if (e->timeout_s == 0)
            problem(c, e, "timeout_s", 0, "`service.evaluators[%zu].timeout_s` must be positive",
                    i);
    }
    for (size_t i = 0; i < cfg->n_teams; i++) {
        const Fedagg__Team *t = cfg->teams[i];
        char what[64];
        snprintf(what, sizeof(what), "teams[%zu].name", i);
        check_service_name(c, t, "name", 0, what, t->name);
        for (size_t j = 0; j < i && !empty(t->name); j++)
            if (!empty(cfg->teams[j]->name) && !strcmp(cfg->teams[j]->name, t->name)) {
                problem(c, t, "name", 0, "`%s`: team \"%s\" is defined twice", what, t->name);
                break;
            }
        for (size_t k = 0; k < t->n_operators; k++) {
            int listed = 0;
            for (size_t j = 0; j < cfg->n_operators; j++)
                listed |= t->operators[k] && cfg->operators[j] &&
                          !strcmp(t->operators[k], cfg->operators[j]);
            if (!listed)
                problem(c, t, "operators", k,
                        "`teams[%zu].operators[%zu]` \"%s\" is not one of `operators` (the "
                        "operators whose certificates may connect)",
                        i, k, t->operators[k] ? t->operators[k] : "");
        }
    }
    if (!empty(cfg->team)) {
        int defined = 0;
        check_service_name(c, cfg, "team", 0, "team", cfg->team);
        for (size_t i = 0; i < cfg->n_teams; i++)
            defined |= !empty(cfg->teams[i]->name) && !strcmp(cfg->teams[i]->name, cfg->team);
        if (!defined)
            problem(c, cfg, "team", 0, "`team` \"%s\" is not one of `teams`", cfg->team);
    } else if (cfg->n_teams && cfg->n_regions)
        problem(c, cfg, NULL, 0,
                "with `teams`, the federation of this config needs its `team` (one of `teams`)");
}

static void check_aggregator(struct ck *c, const Fedagg__AggregatorConfig *cfg)
{
    /* A service may hold no default federation: no regions, no storage. */
    int fed = cfg->n_regions > 0 || empty(cfg->service->dir);

    check_federation_id(c, cfg, cfg->federation_id);
    need_string(c, cfg, "listen", cfg->listen, "listen", "host:port");
    check_hostport(c, cfg, "listen", cfg->listen, "listen");
    check_tls(c, cfg->tls, "the aggregator's PEM certificate");
    check_quic(c, cfg->quic, 1);
    check_service(c, cfg);
    if (fed) {
        check_regions(c, cfg, cfg->regions, cfg->n_regions);
        check_round(c, cfg->round, cfg->n_regions);
    }
    for (size_t i = 0; i < cfg->n_operators; i++) {
        check_region_id(c, cfg, "operators", i, "operators", cfg->operators[i]);
        for (size_t j = 0; j < i; j++)
            if (cfg->operators[i] && cfg->operators[j] &&
                !strcmp(cfg->operators[i], cfg->operators[j]))
                problem(c, cfg, "operators", i, "`operators` names \"%s\" twice",
                        cfg->operators[i]);
    }
    check_model(c, cfg->model);
    check_optimizer(c, cfg->optimizer);
    check_quantization(c, cfg->quantization);
    check_model_delta(c, cfg->model_delta);
    check_distributed_dp(c, cfg->distributed_dp, cfg->n_regions);
    if (fed)
        check_promotion(c, cfg->promotion, cfg->n_regions, cfg->evaluation->n_command > 0);
    if (cfg->dashboard && cfg->dashboard->protect_metrics &&
        (empty(cfg->dashboard->username) || empty(cfg->dashboard->password_file) ||
         !cfg->dashboard->enabled))
        problem(c, cfg->dashboard, "protect_metrics", 0,
                "`dashboard.protect_metrics` puts /metrics behind the dashboard's password: it "
                "needs `dashboard.username`, `dashboard.password_file` and the dashboard enabled");
    if (fed)
        need_string(c, cfg->storage, "dir", cfg->storage->dir, "storage.dir",
                    "the directory of model versions and round state");
    maybe_dir(c, cfg->storage, "dir", cfg->storage->dir, "storage.dir");
    if (cfg->storage->keep_versions == 0)
        problem(c, cfg->storage, "keep_versions", 0, "`storage.keep_versions` must be at least 1");
    need_string(c, cfg->audit, "signing_key_file", cfg->audit->signing_key_file,
                "audit.signing_key_file", "the Ed25519 key that signs checkpoints (fedagg keygen)");
    need_key_file(c, cfg->audit, "signing_key_file", cfg->audit->signing_key_file,
                  "audit.signing_key_file");
    if (!empty(cfg->audit->log_file) && check_files(c)) {
        struct stat st;
        if (stat(cfg->audit->log_file, &st) == 0 && !S_ISREG(st.st_mode))
            problem(c, cfg->audit, "log_file", 0, "`audit.log_file`: %s is not a regular file",
                    cfg->audit->log_file);
    }
    check_hostport(c, cfg, "metrics_listen", cfg->metrics_listen, "metrics_listen");
    check_evaluation(c, cfg->evaluation, 1);
    check_log_level(c, cfg, cfg->log_level);
}

/* A federation file (`fedagg federation create FILE`): the federation
 * parts of an aggregator config, checked the same way. */
static void check_federation(struct ck *c, const Fedagg__FederationConfig *cfg)
{
    check_service_name(c, cfg, "federation_id", 0, "federation_id", cfg->federation_id);
    check_service_name(c, cfg, "team", 0, "team", cfg->team);
    check_regions(c, cfg, cfg->regions, cfg->n_regions);
    check_round(c, cfg->round, cfg->n_regions);
    check_model(c, cfg->model);
    check_optimizer(c, cfg->optimizer);
    check_quantization(c, cfg->quantization);
    check_model_delta(c, cfg->model_delta);
    check_distributed_dp(c, cfg->distributed_dp, cfg->n_regions);
    check_evaluation(c, cfg->evaluation, 0);
    if (!empty(cfg->evaluator))
        check_service_name(c, cfg, "evaluator", 0, "evaluator", cfg->evaluator);
    check_promotion(c, cfg->promotion, cfg->n_regions, !empty(cfg->evaluator));
    if (cfg->keep_versions == 0)
        problem(c, cfg, "keep_versions", 0, "`keep_versions` must be at least 1");
    if (cfg->description && strchr(cfg->description, '\n'))
        problem(c, cfg, "description", 0, "`description` must be one line");
}

static void check_builtin(struct ck *c, const Fedagg__BuiltinTrainer *b)
{
    if (b->local_steps == 0 && b->local_epochs == 0)
        problem(c, b, "local_epochs", 0,
                "`trainer.builtin.local_epochs` must be at least 1 when local_steps is 0");
    if (b->batch_size == 0)
        problem(c, b, "batch_size", 0, "`trainer.builtin.batch_size` must be at least 1");
    if (!finite_pos(b->learning_rate))
        problem(c, b, "learning_rate", 0, "`trainer.builtin.learning_rate` (%g) must be positive",
                b->learning_rate);
    if (!unit_interval(b->momentum))
        problem(c, b, "momentum", 0, "`trainer.builtin.momentum` (%g) must be in [0, 1)",
                b->momentum);
    if (!isfinite(b->weight_decay) || b->weight_decay < 0)
        problem(c, b, "weight_decay", 0, "`trainer.builtin.weight_decay` (%g) must be 0 or more",
                b->weight_decay);
}

static void check_external(struct ck *c, const Fedagg__ExternalTrainer *x)
{
    struct stat st;

    if (x->n_command == 0 || empty(x->command[0]))
        problem(c, x, x->n_command ? "command" : NULL, 0,
                "`trainer.external.command`: give the command and its arguments, e.g. "
                "command: [\"python3\", \"train.py\", \"{input}\", \"{output}\"]");
    for (size_t i = 0; i < x->n_env; i++) {
        const char *eq = x->env[i] ? strchr(x->env[i], '=') : NULL;
        if (!eq || eq == x->env[i])
            problem(c, x, "env", i, "`trainer.external.env[%zu]` \"%s\" is not KEY=VALUE", i,
                    x->env[i] ? x->env[i] : "");
    }
    if (x->timeout_s == 0)
        problem(c, x, "timeout_s", 0, "`trainer.external.timeout_s` must be positive");
    if (x->start_timeout_s == 0)
        problem(c, x, "start_timeout_s", 0, "`trainer.external.start_timeout_s` must be positive");
    if (!empty(x->workdir) && check_files(c) &&
        (stat(x->workdir, &st) != 0 || !S_ISDIR(st.st_mode)))
        problem(c, x, "workdir", 0, "`trainer.external.workdir`: %s is not a directory",
                x->workdir);
}

/* A differential-privacy budget: WorkerConfig.privacy, or a policy
 * dataset's (`what` names it in messages). */
static void check_worker_privacy(struct ck *c, const Fedagg__WorkerPrivacy *p, const char *what)
{
    if (!p || p->target_epsilon == 0.0)
        return;
    if (!(isfinite(p->target_epsilon) && p->target_epsilon > 0))
        problem(c, p, "target_epsilon", 0,
                "`%s.target_epsilon` (%g) must be a finite epsilon > 0 (0 turns differential "
                "privacy off)",
                what, p->target_epsilon);
    if (!(p->target_delta > 0 && p->target_delta <= 0.1))
        problem(c, p, "target_delta", 0, "`%s.target_delta` (%g) must be in (0, 0.1]", what,
                p->target_delta);
    if (!p->mechanism || (strcmp(p->mechanism, "dp-sgd") != 0 && strcmp(p->mechanism, "ddg") != 0))
        problem(c, p, "mechanism", 0,
                "`%s.mechanism` \"%s\": \"dp-sgd\" (DP-SGD in training) or \"ddg\" (the "
                "federation's distributed discrete Gaussian)",
                what, p->mechanism ? p->mechanism : "");
    else if (!strcmp(p->mechanism, "ddg") && (!p->unit || strcmp(p->unit, "region") != 0))
        problem(c, p, "unit", 0,
                "`%s.unit` \"%s\": with mechanism \"ddg\" the unit is \"region\" (the "
                "distributed DP protects this region's whole update); write unit: \"region\"",
                what, p->unit ? p->unit : "");
    else if (!strcmp(p->mechanism, "dp-sgd") && (!p->unit || strcmp(p->unit, "example") != 0))
        problem(c, p, "unit", 0,
                "`%s.unit` \"%s\": only \"example\" (one training example) is supported", what,
                p->unit ? p->unit : "");
    if (!(isfinite(p->noise_multiplier) && p->noise_multiplier > 0))
        problem(c, p, "noise_multiplier", 0,
                "`%s.noise_multiplier` (%g) must be a finite sigma > 0", what, p->noise_multiplier);
    if (!(isfinite(p->clip) && p->clip > 0))
        problem(c, p, "clip", 0, "`%s.clip` (%g) must be a finite L2 norm > 0", what, p->clip);
    if (!(p->sampling_rate >= 0 && p->sampling_rate <= 1))
        problem(c, p, "sampling_rate", 0,
                "`%s.sampling_rate` (%g) must be in [0, 1] (0: batch_size over the "
                "shard's examples)",
                what, p->sampling_rate);
}

/* A region's IDX files (`what`: "data" or a policy dataset's). */
static void check_data(struct ck *c, const Fedagg__DataConfig *d, const char *what, int need_train)
{
    char f[2][160];

    snprintf(f[0], sizeof(f[0]), "%s.train_images", what);
    snprintf(f[1], sizeof(f[1]), "%s.train_labels", what);
    if (need_train) {
        need_string(c, d, "train_images", d->train_images, f[0],
                    "the region's IDX training images (the built-in trainer reads them)");
        need_string(c, d, "train_labels", d->train_labels, f[1],
                    "the region's IDX training labels");
    }
    need_file(c, d, "train_images", 0, d->train_images, f[0]);
    need_file(c, d, "train_labels", 0, d->train_labels, f[1]);
    check_pair(c, d, what, "train_images", d->train_images, "train_labels", d->train_labels);
    check_pair(c, d, what, "test_images", d->test_images, "test_labels", d->test_labels);
    snprintf(f[0], sizeof(f[0]), "%s.test_images", what);
    snprintf(f[1], sizeof(f[1]), "%s.test_labels", what);
    need_file(c, d, "test_images", 0, d->test_images, f[0]);
    need_file(c, d, "test_labels", 0, d->test_labels, f[1]);
}

/* A name of the policy (dataset, trainer, device): [a-z0-9._-]{1,63}. */
static int policy_name_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;

    if (n == 0 || n > 63 || id[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9') || id[i] == '-' ||
              id[i] == '_' || id[i] == '.'))
            return 0;
    return 1;
}

/* The name at `field` of element i of a list whose elements' names are
 * names[0..i-1] before it: well-formed and not listed twice. */
static void check_policy_name(struct ck *c, const void *msg, const char *field, const char *what,
                              const char *name, const char *const *before, size_t i)
{
    if (empty(name)) {
        problem(c, msg, NULL, 0, "`%s` is required", what);
        return;
    }
    if (!policy_name_ok(name)) {
        problem(c, msg, field, 0,
                "`%s` \"%s\": 1 to 63 characters of a-z, 0-9, '.', '_' and '-' (not starting "
                "with '.')",
                what, name);
        return;
    }
    for (size_t j = 0; j < i; j++)
        if (before[j] && !strcmp(before[j], name)) {
            problem(c, msg, field, 0, "`%s`: \"%s\" is listed twice", what, name);
            return;
        }
}

static void check_services(struct ck *c, const Fedagg__WorkerConfig *cfg)
{
    const char **names = calloc(cfg->n_services + 1, sizeof(*names));

    for (size_t i = 0; i < cfg->n_services; i++) {
        const Fedagg__AggregationService *sv = cfg->services[i];
        char what[64];
        uint8_t key[32];
        snprintf(what, sizeof(what), "services[%zu].name", i);
        if (empty(sv->name))
            problem(c, sv, NULL, 0, "`%s` is required (e.g. \"central\")", what);
        else if (!region_id_ok(sv->name))
            problem(c, sv, "name", 0, "`%s` \"%s\": 1 to 63 characters of a-z, 0-9 and -", what,
                    sv->name);
        for (size_t j = 0; j < i && names && !empty(sv->name); j++)
            if (names[j] && !strcmp(names[j], sv->name)) {
                problem(c, sv, "name", 0, "`%s`: service \"%s\" is listed twice", what, sv->name);
                break;
            }
        if (names)
            names[i] = sv->name;
        snprintf(what, sizeof(what), "services[%zu].address", i);
        need_string(c, sv, "address", sv->address, what, "the service's UDP address, host:port");
        check_hostport(c, sv, "address", sv->address, what);
        snprintf(what, sizeof(what), "services[%zu]", i);
        check_public_key(c, sv, what, "public_key", sv->public_key, "public_key_file",
                         sv->public_key_file, 1, key);
        sodium_memzero(key, sizeof(key));
        if (sv->poll_s < 1 || sv->poll_s > 3600)
            problem(c, sv, "poll_s", 0, "`services[%zu].poll_s` (%u) must be 1..3600 seconds", i,
                    sv->poll_s);
    }
    free(names);
}

static void check_policy(struct ck *c, const Fedagg__RegionPolicy *p)
{
    size_t n = p->n_datasets + p->n_trainers + p->n_devices + 1;
    const char **names = calloc(n, sizeof(*names));
    char what[96];

    if (!names) {
        problem(c, p, NULL, 0, "out of memory checking `policy`");
        return;
    }
    for (size_t i = 0; i < p->n_datasets; i++) {
        const Fedagg__PolicyDataset *ds = p->datasets[i];
        snprintf(what, sizeof(what), "policy.datasets[%zu].name", i);
        check_policy_name(c, ds, "name", what, ds->name, names, i);
        names[i] = ds->name;
        snprintf(what, sizeof(what), "policy.datasets[%zu].data", i);
        check_data(c, ds->data, what, 0);
        if (empty(ds->data->train_images) && empty(ds->path))
            problem(c, ds, NULL, 0,
                    "`policy.datasets[%zu]`: give its files, data { train_images: ... "
                    "train_labels: ... } or path: \"...\"",
                    i);
        if (!empty(ds->path) && check_files(c) && access(ds->path, R_OK) != 0)
            problem(c, ds, "path", 0, "`policy.datasets[%zu].path`: %s: %s", i, ds->path,
                    strerror(errno));
        snprintf(what, sizeof(what), "policy.datasets[%zu].privacy", i);
        check_worker_privacy(c, ds->privacy, what);
    }
    for (size_t i = 0; i < p->n_devices; i++) {
        snprintf(what, sizeof(what), "policy.devices[%zu]", i);
        check_policy_name(c, p, "devices", what, p->devices[i], (const char *const *)p->devices, i);
    }
    for (size_t i = 0; i < p->n_trainers; i++) {
        const Fedagg__PolicyTrainer *t = p->trainers[i];
        snprintf(what, sizeof(what), "policy.trainers[%zu].name", i);
        check_policy_name(c, t, "name", what, t->name, names + p->n_datasets, i);
        names[p->n_datasets + i] = t->name;
        if (t->kind_case == FEDAGG__POLICY_TRAINER__KIND_BUILTIN)
            check_builtin(c, t->builtin);
        else if (t->kind_case == FEDAGG__POLICY_TRAINER__KIND_EXTERNAL)
            check_external(c, t->external);
        else
            problem(c, t, NULL, 0,
                    "`policy.trainers[%zu]`: set one of `builtin { ... }` or `external { "
                    "command: [...] }`",
                    i);
        if (t->kind_case == FEDAGG__POLICY_TRAINER__KIND_EXTERNAL && t->n_launch)
            problem(c, t, "launch", 0,
                    "`policy.trainers[%zu].launch`: an external trainer runs in one worker "
                    "process; to train on several ranks make its command torchrun",
                    i);
        for (size_t k = 0; k < t->n_launch; k++)
            if (empty(t->launch[k]))
                problem(c, t, "launch", k, "`policy.trainers[%zu].launch[%zu]` is empty", i, k);
        if (!empty(t->device)) {
            size_t k;
            for (k = 0; k < p->n_devices; k++)
                if (p->devices[k] && !strcmp(p->devices[k], t->device))
                    break;
            if (k == p->n_devices && !(p->n_devices == 0 && !strcmp(t->device, "local")))
                problem(c, t, "device", 0,
                        "`policy.trainers[%zu].device` \"%s\" is not in policy.devices", i,
                        t->device);
        }
    }
    for (size_t i = 0; i < p->n_accept_teams; i++)
        if (empty(p->accept_teams[i]))
            problem(c, p, "accept_teams", i, "`policy.accept_teams[%zu]` is empty", i);
    for (size_t i = 0; i < p->n_accept_federations; i++)
        if (empty(p->accept_federations[i]))
            problem(c, p, "accept_federations", i, "`policy.accept_federations[%zu]` is empty", i);
    if (p->max_federations < 1 || p->max_federations > 1000)
        problem(c, p, "max_federations", 0, "`policy.max_federations` (%u) must be 1..1000",
                p->max_federations);
    free(names);
}

/* A region agent (services set): the policy names datasets and trainers,
 * so the fields of a single federation would be ignored; say so. */
static void check_agent(struct ck *c, const Fedagg__WorkerConfig *cfg)
{
    static const char hint[] =
        "in a region agent's config (`services` set) federations name a dataset and a trainer "
        "of `policy`; remove it";

    check_services(c, cfg);
    check_policy(c, cfg->policy);
    if (!empty(cfg->aggregator))
        problem(c, cfg, "aggregator", 0, "`aggregator`: %s (each service has its address)", hint);
    if (!empty(cfg->aggregator_public_key) || !empty(cfg->aggregator_public_key_file))
        problem(c, cfg,
                empty(cfg->aggregator_public_key) ? "aggregator_public_key_file"
                                                  : "aggregator_public_key",
                0, "`aggregator_public_key`: %s (each service has its public_key)", hint);
    if (cfg->trainer && cfg->trainer->kind_case != FEDAGG__TRAINER__KIND__NOT_SET)
        problem(c, cfg, "trainer", 0, "`trainer`: %s (policy.trainers)", hint);
    if (!empty(cfg->data->train_images) || !empty(cfg->data->test_images))
        problem(c, cfg, "data", 0, "`data`: %s (policy.datasets)", hint);
    if (cfg->privacy->target_epsilon != 0.0)
        problem(c, cfg, "privacy", 0, "`privacy`: %s (each dataset has its budget)", hint);
    if (cfg->rounds)
        problem(c, cfg, "rounds", 0, "`rounds`: %s (a federation runs until it finishes)", hint);
    if (cfg->service_routes)
        problem(c, cfg, "service_routes", 0, "`service_routes`: %s", hint);
}

static void check_worker(struct ck *c, const Fedagg__WorkerConfig *cfg)
{
    const Fedagg__RegionPolicy *p = cfg->policy;
    int builtin = 0;

    check_region_id(c, cfg, "region_id", 0, "region_id", cfg->region_id);
    check_tls(c, cfg->tls, "this region's PEM client certificate");
    check_quic(c, cfg->quic, 0);
    need_string(c, cfg, "identity_key_file", cfg->identity_key_file, "identity_key_file",
                "the region's Ed25519 identity secret key (fedagg keygen)");
    need_key_file(c, cfg, "identity_key_file", cfg->identity_key_file, "identity_key_file");
    check_regions(c, cfg, cfg->regions, cfg->n_regions);
    if (region_id_ok(cfg->region_id) && cfg->n_regions) {
        size_t i;
        for (i = 0; i < cfg->n_regions; i++)
            if (cfg->regions[i]->id && !strcmp(cfg->regions[i]->id, cfg->region_id))
                break;
        if (i == cfg->n_regions)
            problem(c, cfg, "region_id", 0,
                    "`region_id` \"%s\" is not in `regions`; list this region with its "
                    "identity public key too",
                    cfg->region_id);
    }
    if (cfg->compression->powersgd_rank == 0)
        problem(c, cfg->compression, "powersgd_rank", 0,
                "`compression.powersgd_rank` must be at least 1");
    if (!(isfinite(cfg->compression->topk_fraction) && cfg->compression->topk_fraction > 0 &&
          cfg->compression->topk_fraction <= 1))
        problem(c, cfg->compression, "topk_fraction", 0,
                "`compression.topk_fraction` (%g) must be in (0, 1]",
                cfg->compression->topk_fraction);
    need_string(c, cfg, "state_dir", cfg->state_dir, "state_dir",
                "the directory of the worker's round state");
    maybe_dir(c, cfg, "state_dir", cfg->state_dir, "state_dir");
    check_log_level(c, cfg, cfg->log_level);
    if (cfg->n_services) {
        check_agent(c, cfg);
        return;
    }
    if (p->n_datasets || p->n_trainers || p->n_accept_teams || p->n_accept_federations ||
        p->n_devices)
        problem(c, cfg, "policy", 0,
                "`policy` is the region agent's: it is used only with `services` (the "
                "aggregation services the agent joins federations on)");

    check_federation_id(c, cfg, cfg->federation_id);
    need_string(c, cfg, "aggregator", cfg->aggregator, "aggregator",
                "the aggregator's UDP address, host:port");
    check_hostport(c, cfg, "aggregator", cfg->aggregator, "aggregator");
    {
        uint8_t key[32];
        check_public_key(c, cfg, "aggregator_public_key", "aggregator_public_key",
                         cfg->aggregator_public_key, "aggregator_public_key_file",
                         cfg->aggregator_public_key_file, 0, key);
        sodium_memzero(key, sizeof(key));
    }
    if (!cfg->trainer || cfg->trainer->kind_case == FEDAGG__TRAINER__KIND__NOT_SET) {
        problem(c, cfg->trainer ? (const void *)cfg->trainer : (const void *)cfg, NULL, 0,
                "`trainer`: set one of `builtin { ... }` (the MLP of the aggregator's model) or "
                "`external { command: [...] }`");
    } else if (cfg->trainer->kind_case == FEDAGG__TRAINER__KIND_BUILTIN) {
        builtin = 1;
        check_builtin(c, cfg->trainer->builtin);
    } else {
        check_external(c, cfg->trainer->external);
    }
    check_data(c, cfg->data, "data", builtin);
    check_worker_privacy(c, cfg->privacy, "privacy");
}

unsigned fa_config_check_meaning(fa_config_kind kind, const ProtobufCMessage *cfg,
                                 const fa_textformat_positions *pos, const char *filename,
                                 unsigned flags, fa_diags *diags)
{
    struct ck c = {diags, filename, pos, flags, 0, NULL, 0, 0};

    if (kind == FA_CONFIG_AGGREGATOR)
        check_aggregator(&c, (const Fedagg__AggregatorConfig *)cfg);
    else if (kind == FA_CONFIG_FEDERATION)
        check_federation(&c, (const Fedagg__FederationConfig *)cfg);
    else if (kind == FA_CONFIG_WORKER)
        check_worker(&c, (const Fedagg__WorkerConfig *)cfg);
    /* in file order, as a person reads them */
    if (c.nrecs)
        qsort(c.recs, c.nrecs, sizeof(*c.recs), by_position);
    for (size_t i = 0; i < c.nrecs; i++) {
        fa_diags_addf(diags, filename, c.recs[i].line, c.recs[i].col, "%s", c.recs[i].text);
        free(c.recs[i].text);
    }
    free(c.recs);
    return c.n;
}
