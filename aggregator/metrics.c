#include "aggregator/metrics.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "aggregator/dashboard.h"
#include "common/fa_log.h"
#include "common/fa_time.h"

struct series {
    char *labels;      /* "" when none */
    double value;      /* counter / gauge; histogram sum */
    uint64_t count;    /* histogram */
    uint64_t *buckets; /* histogram: cumulative counts are computed when rendering */
    struct series *next;
};

struct family {
    char *name;
    char *help;
    int type;
    double *bounds;
    size_t nbounds;
    struct series *series;
    struct family *next;
};

struct fa_metrics {
    pthread_mutex_t lock;
    struct family *families, *last;
};

int fa_metrics_new(fa_metrics **out, fa_error *err)
{
    fa_metrics *m = calloc(1, sizeof(*m));
    *out = NULL;
    if (!m)
        return fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return 0;
}

void fa_metrics_del(fa_metrics *m)
{
    struct family *f, *fn;
    if (!m)
        return;
    for (f = m->families; f; f = fn) {
        struct series *s, *sn;
        fn = f->next;
        for (s = f->series; s; s = sn) {
            sn = s->next;
            free(s->labels);
            free(s->buckets);
            free(s);
        }
        free(f->name);
        free(f->help);
        free(f->bounds);
        free(f);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int valid_name(const char *s)
{
    if (!s || !*s || !(*s == '_' || *s == ':' || ((*s | 32) >= 'a' && (*s | 32) <= 'z')))
        return 0;
    for (s++; *s; s++)
        if (!(*s == '_' || *s == ':' || ((*s | 32) >= 'a' && (*s | 32) <= 'z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static struct family *find_family(fa_metrics *m, const char *name)
{
    struct family *f;
    for (f = m->families; f; f = f->next)
        if (!strcmp(f->name, name))
            return f;
    return NULL;
}

int fa_metrics_define(fa_metrics *m, const char *name, int type, const char *help,
                      const double *buckets, size_t nbuckets, fa_error *err)
{
    struct family *f;
    int rc = 0;

    if (!valid_name(name))
        return fa_errorf(err, FA_ERR_INVAL, "metrics: invalid metric name '%s'", name ? name : "");
    if (type == FA_METRIC_HISTOGRAM) {
        if (nbuckets == 0)
            return fa_errorf(err, FA_ERR_INVAL, "metrics: histogram %s needs buckets", name);
        for (size_t i = 1; i < nbuckets; i++)
            if (!(buckets[i] > buckets[i - 1]))
                return fa_errorf(err, FA_ERR_INVAL, "metrics: histogram %s buckets must ascend",
                                 name);
    }
    pthread_mutex_lock(&m->lock);
    f = find_family(m, name);
    if (f) {
        if (f->type != type)
            rc = fa_errorf(err, FA_ERR_INVAL, "metrics: %s already declared with another type",
                           name);
        goto out;
    }
    f = calloc(1, sizeof(*f));
    if (!f || !(f->name = strdup(name)) || !(f->help = strdup(help ? help : ""))) {
        if (f) {
            free(f->name);
            free(f);
        }
        rc = fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
        goto out;
    }
    f->type = type;
    if (type == FA_METRIC_HISTOGRAM) {
        f->bounds = malloc(nbuckets * sizeof(double));
        if (!f->bounds) {
            free(f->name);
            free(f->help);
            free(f);
            rc = fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
            goto out;
        }
        memcpy(f->bounds, buckets, nbuckets * sizeof(double));
        f->nbounds = nbuckets;
    }
    if (m->last)
        m->last->next = f;
    else
        m->families = f;
    m->last = f;
out:
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* Called with the lock held. */
static struct series *get_series(struct family *f, const char *labels)
{
    struct series *s, **tail = &f->series;
    if (!labels)
        labels = "";
    for (s = f->series; s; s = s->next) {
        if (!strcmp(s->labels, labels))
            return s;
        tail = &s->next;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->labels = strdup(labels);
    if (f->type == FA_METRIC_HISTOGRAM)
        s->buckets = calloc(f->nbounds, sizeof(uint64_t));
    if (!s->labels || (f->type == FA_METRIC_HISTOGRAM && !s->buckets)) {
        free(s->labels);
        free(s->buckets);
        free(s);
        return NULL;
    }
    *tail = s;
    return s;
}

static void update(fa_metrics *m, const char *name, const char *labels, double v, int op)
{
    struct family *f;
    struct series *s;

    pthread_mutex_lock(&m->lock);
    f = find_family(m, name);
    if (!f)
        goto out;
    if ((op == 2) != (f->type == FA_METRIC_HISTOGRAM))
        goto out;
    if (op == 1 && f->type != FA_METRIC_GAUGE)
        goto out;
    s = get_series(f, labels);
    if (!s)
        goto out;
    if (op == 0) {
        if (f->type == FA_METRIC_COUNTER && v < 0)
            goto out; /* counters only go up */
        s->value += v;
    } else if (op == 1) {
        s->value = v;
    } else {
        s->value += v;
        s->count++;
        for (size_t i = 0; i < f->nbounds; i++)
            if (v <= f->bounds[i]) {
                s->buckets[i]++;
                break;
            }
    }
out:
    pthread_mutex_unlock(&m->lock);
}

void fa_metrics_add(fa_metrics *m, const char *name, const char *labels, double v)
{
    update(m, name, labels, v, 0);
}

void fa_metrics_set(fa_metrics *m, const char *name, const char *labels, double v)
{
    update(m, name, labels, v, 1);
}

void fa_metrics_observe(fa_metrics *m, const char *name, const char *labels, double v)
{
    update(m, name, labels, v, 2);
}

void fa_metrics_label(char *buf, size_t n, const char *key, const char *value)
{
    size_t i = strlen(buf);
    int w;

    if (i >= n)
        return;
    w = snprintf(buf + i, n - i, "%s%s=\"", i ? "," : "", key);
    if (w < 0 || (size_t)w >= n - i) {
        buf[i] = '\0';
        return;
    }
    i += (size_t)w;
    for (; *value && i + 3 < n; value++) {
        if (*value == '\\' || *value == '"') {
            buf[i++] = '\\';
            buf[i++] = *value;
        } else if (*value == '\n') {
            buf[i++] = '\\';
            buf[i++] = 'n';
        } else {
            buf[i++] = *value;
        }
    }
    if (i + 1 < n)
        buf[i++] = '"';
    buf[i] = '\0';
}

/* A growable output buffer for rendering. */
struct out {
    char *p;
    size_t len, cap;
    int oom;
};

static void outf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (o->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t ncap = (o->cap + (size_t)n + 1) * 2;
        char *np = realloc(o->p, ncap);
        if (!np) {
            o->oom = 1;
            return;
        }
        o->p = np;
        o->cap = ncap;
    }
}

static void fmt_value(char *buf, size_t n, double v)
{
    if (isinf(v))
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
    else if (isnan(v))
        snprintf(buf, n, "NaN");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0) /* integers as integers: 1867444260, */
        snprintf(buf, n, "%.0f", v);                        /* not 1.86744426e+09 */
    else
        for (int prec = 6; prec <= 17; prec++) { /* shortest form that reads back exactly */
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
}

int fa_metrics_render(fa_metrics *m, char **out, size_t *len)
{
    static const char *type_names[] = {"counter", "gauge", "histogram"};
    struct out o = {malloc(4096), 0, 4096, 0};
    struct family *f;
    char v[64];

    *out = NULL;
    *len = 0;
    if (!o.p)
        return FA_ERR_NOMEM;
    o.p[0] = '\0';
    pthread_mutex_lock(&m->lock);
    for (f = m->families; f; f = f->next) {
        struct series *s;
        outf(&o, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, type_names[f->type]);
        for (s = f->series; s; s = s->next) {
            const char *sep = s->labels[0] ? "," : "";
            if (f->type != FA_METRIC_HISTOGRAM) {
                fmt_value(v, sizeof(v), s->value);
                if (s->labels[0])
                    outf(&o, "%s{%s} %s\n", f->name, s->labels, v);
                else
                    outf(&o, "%s %s\n", f->name, v);
                continue;
            }
            uint64_t cum = 0;
            for (size_t i = 0; i < f->nbounds; i++) {
                cum += s->buckets[i];
                fmt_value(v, sizeof(v), f->bounds[i]);
                outf(&o, "%s_bucket{%s%sle=\"%s\"} %llu\n", f->name, s->labels, sep, v,
                     (unsigned long long)cum);
            }
            outf(&o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", f->name, s->labels, sep,
                 (unsigned long long)s->count);
            fmt_value(v, sizeof(v), s->value);
            if (s->labels[0]) {
                outf(&o, "%s_sum{%s} %s\n%s_count{%s} %llu\n", f->name, s->labels, v, f->name,
                     s->labels, (unsigned long long)s->count);
            } else {
                outf(&o, "%s_sum %s\n%s_count %llu\n", f->name, v, f->name,
                     (unsigned long long)s->count);
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (o.oom) {
        free(o.p);
        return FA_ERR_NOMEM;
    }
    *out = o.p;
    *len = o.len;
    return 0;
}

/* ------------------------------------------------------------------------- */

/* Connection slots of the HTTP/1.1 port.  Probes (kubelet's /healthz and
 * /readyz) and Prometheus connect, ask, and are answered in a
 * millisecond; a client that holds a connection without finishing a
 * request holds a slot.  So: an epoll loop (no FD_SETSIZE cliff), at most
 * PER_ADDRESS connections from one address, an idle connection closed
 * after IDLE_TIMEOUT_S, and past SOFT_LIMIT connections the one idle the
 * longest is shut to make room for each newcomer, so that a flood from
 * many addresses delays a probe by a few connections, it does not lock
 * it out.  HARD_LIMIT leaves room for the shut ones still being closed. */
#define SLOTS_SOFT_LIMIT 128
#define SLOTS_HARD_LIMIT 256
#define SLOTS_PER_ADDRESS 16
#define SLOTS_IDLE_TIMEOUT_S 10

/* One connection of the port, in least-recently-active order. */
struct slot {
    struct slot *prev, *next; /* prev: older activity */
    int fd;
    int shut; /* shut down to make room; being closed */
};

struct fa_metrics_server {
    struct MHD_Daemon *daemon;
    fa_metrics *m;
    fa_metrics_ready_fn ready;
    void *ready_ctx;
    uint16_t port;
    /* Slots: touched by the daemon's one thread only. */
    struct slot *oldest, *newest;
    unsigned nslots;
    atomic_ullong evicted;       /* connections shut to make room */
    atomic_ullong refused_total; /* MHD refusals (limits), for the metric */
    /* The dashboard: set by the server loop, read by the daemon's thread. */
    pthread_mutex_t lock;
    int dashboard;                                /* served at all */
    int protect_metrics;                          /* /metrics needs the dashboard's password */
    int auth;                                     /* basic auth required */
    uint8_t credential[crypto_generichash_BYTES]; /* BLAKE2b(user, 0, password) */
    char *status;                                 /* the latest status document */
    size_t status_len;
};

#define DASHBOARD_REALM "Basic realm=\"fedagg dashboard\", charset=\"UTF-8\""

/* BLAKE2b-256 of user || 0x00 || password: what is kept, and compared. */
static void credential_digest(const char *user, size_t ul, const char *pw, size_t pl,
                              uint8_t out[crypto_generichash_BYTES])
{
    crypto_generichash_state st;
    const unsigned char zero = 0;
    crypto_generichash_init(&st, NULL, 0, crypto_generichash_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)user, ul);
    crypto_generichash_update(&st, &zero, 1);
    crypto_generichash_update(&st, (const unsigned char *)pw, pl);
    crypto_generichash_final(&st, out, crypto_generichash_BYTES);
    sodium_memzero(&st, sizeof(st));
}

/* 1 when the request's Authorization header carries the right user and
 * password (RFC 7617).  Called with s->lock held. */
static int authorised(fa_metrics_server *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    char dec[768];
    size_t dl = 0;
    const char *colon;
    uint8_t got[crypto_generichash_BYTES];
    int ok;

    if (!h || strncasecmp(h, "Basic ", 6) != 0)
        return 0;
    h += 6;
    while (*h == ' ')
        h++;
    if (sodium_base642bin((unsigned char *)dec, sizeof(dec) - 1, h, strlen(h), NULL, &dl, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
        sodium_memzero(dec, sizeof(dec));
        return 0;
    }
    colon = memchr(dec, ':', dl);
    if (!colon) {
        sodium_memzero(dec, sizeof(dec));
        return 0;
    }
    credential_digest(dec, (size_t)(colon - dec), colon + 1, dl - (size_t)(colon - dec) - 1, got);
    ok = sodium_memcmp(got, s->credential, sizeof(got)) == 0;
    sodium_memzero(dec, sizeof(dec));
    sodium_memzero(got, sizeof(got));
    return ok;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len, enum MHD_ResponseMemoryMode mode);

/* 401 with the dashboard's realm (RFC 7617). */
static enum MHD_Result ask_credentials(struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen("authentication required\n"), "authentication required\n", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret;
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain");
    MHD_add_response_header(r, "WWW-Authenticate", DASHBOARD_REALM);
    ret = MHD_queue_response(c, MHD_HTTP_UNAUTHORIZED, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---------------------------------------------------------------- slots */

/* A connection begins or ends (MHD_OPTION_NOTIFY_CONNECTION). */
static void slot_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    fa_metrics_server *s = cls;
    struct slot *sl = *socket_context;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        sl = calloc(1, sizeof(*sl));
        if (!sl)
            return; /* not tracked: never evicted, still bounded by the hard limit */
        sl->fd = ci ? ci->connect_fd : -1;
        sl->prev = s->newest;
        if (s->newest)
            s->newest->next = sl;
        else
            s->oldest = sl;
        s->newest = sl;
        s->nslots++;
        *socket_context = sl;
        return;
    }
    if (!sl)
        return;
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        s->oldest = sl->next;
    if (sl->next)
        sl->next->prev = sl->prev;
    else
        s->newest = sl->prev;
    s->nslots--;
    free(sl);
    *socket_context = NULL;
}

/* A request arrived on c: it becomes the most recently active. */
static void slot_touch(fa_metrics_server *s, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct slot *sl = ci ? ci->socket_context : NULL;
    if (!sl || sl == s->newest)
        return;
    if (sl->prev)
        sl->prev->next = sl->next;
    else
        s->oldest = sl->next;
    sl->next->prev = sl->prev;
    sl->prev = s->newest;
    sl->next = NULL;
    s->newest->next = sl;
    s->newest = sl;
}

/* A new connection (MHD's accept policy, after its own limits): past the
 * soft limit, the connection idle the longest is shut down (MHD then
 * closes it on its side) to make room.  Always admits. */
static enum MHD_Result slot_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    fa_metrics_server *s = cls;
    (void)addr;
    (void)addrlen;
    if (s->nslots >= SLOTS_SOFT_LIMIT) {
        for (struct slot *sl = s->oldest; sl; sl = sl->next) {
            if (sl->shut || sl->fd < 0)
                continue;
            shutdown(sl->fd, SHUT_RDWR);
            sl->shut = 1;
            atomic_fetch_add(&s->evicted, 1);
            break;
        }
    }
    return MHD_YES;
}

/* libmicrohttpd's own messages (a limit reached, a client gone): through
 * fa_log at debug level, and counted; a flood must not flood the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    fa_metrics_server *s = cls;
    char msg[256];
    size_t n;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '.'))
        msg[--n] = '\0';
    if (strstr(msg, "limit"))
        atomic_fetch_add(&s->refused_total, 1);
    fa_log(FA_LOG_DEBUG, "metrics server", "detail=\"%s\"", msg);
}

static enum MHD_Result dashboard_page(fa_metrics_server *s, struct MHD_Connection *c)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    char *doc = NULL, *html = NULL;
    size_t doc_len = 0, len = 0;
    fa_error err = {0};
    int rc;

    pthread_mutex_lock(&s->lock);
    if (s->auth && !authorised(s, c)) {
        pthread_mutex_unlock(&s->lock);
        return ask_credentials(c);
    }
    if (s->status && (doc = malloc(s->status_len + 1))) {
        memcpy(doc, s->status, s->status_len + 1);
        doc_len = s->status_len;
    }
    pthread_mutex_unlock(&s->lock);
    /* Rendered outside the lock: the server loop never waits for a page. */
    if (doc)
        rc = fa_dashboard_render(doc, doc_len, fa_time_unix_ms(), &html, &len, &err);
    else
        rc = fa_dashboard_render_unavailable(NULL, &html, &len, &err);
    free(doc);
    if (rc != 0) {
        char *why = NULL;
        if (fa_dashboard_render_unavailable(err.msg, &why, &len, NULL) != 0)
            return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", "out of memory\n", 14,
                         MHD_RESPMEM_PERSISTENT);
        html = why;
    }
    r = MHD_create_response_from_buffer(len, html, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(html);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                            "frame-ancestors 'none'; form-action 'none'; base-uri 'none'");
    ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

int fa_metrics_server_dashboard(fa_metrics_server *s, const char *username, const char *password,
                                fa_error *err)
{
    int user = username && username[0], pass = password && password[0];

    if (user != pass)
        return fa_errorf(err, FA_ERR_INVAL,
                         "dashboard: a user name and a password go together (dashboard.username "
                         "and dashboard.password_file)");
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "dashboard: libsodium failed to initialise");
    pthread_mutex_lock(&s->lock);
    s->dashboard = 1;
    s->auth = user;
    if (user)
        credential_digest(username, strlen(username), password, strlen(password), s->credential);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int fa_metrics_server_protect_metrics(fa_metrics_server *s, int on, fa_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (on && !s->auth)
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "metrics: /metrics behind the dashboard's password needs one "
                       "(dashboard.username and dashboard.password_file)");
    else
        s->protect_metrics = on;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void fa_metrics_server_get_stats(const fa_metrics_server *s, fa_metrics_server_stats *st)
{
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    st->connections = di ? di->num_connections : 0;
    st->refused = atomic_load(&((fa_metrics_server *)s)->refused_total);
    st->evicted = atomic_load(&((fa_metrics_server *)s)->evicted);
}

int fa_metrics_server_set_status(fa_metrics_server *s, const char *json, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return FA_ERR_NOMEM;
    memcpy(copy, json, len);
    copy[len] = '\0';
    pthread_mutex_lock(&s->lock);
    free(s->status);
    s->status = copy;
    s->status_len = len;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    enum MHD_Result ret;
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    fa_metrics_server *s = cls;

    slot_touch(s, c);
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n", 19,
                     MHD_RESPMEM_PERSISTENT);
    if (!strcmp(url, "/metrics")) {
        char *body;
        size_t len;
        int ok;
        pthread_mutex_lock(&s->lock);
        ok = !(s->protect_metrics && s->auth) || authorised(s, c);
        pthread_mutex_unlock(&s->lock);
        if (!ok)
            return ask_credentials(c);
        if (fa_metrics_render(s->m, &body, &len) != 0)
            return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", "out of memory\n", 14,
                         MHD_RESPMEM_PERSISTENT);
        return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
                     MHD_RESPMEM_MUST_FREE);
    }
    if (!strcmp(url, "/healthz"))
        return reply(c, MHD_HTTP_OK, "text/plain", "ok\n", 3, MHD_RESPMEM_PERSISTENT);
    if (!strcmp(url, "/readyz")) {
        char why[256] = "";
        if (!s->ready || s->ready(s->ready_ctx, why, sizeof(why)))
            return reply(c, MHD_HTTP_OK, "text/plain", "ready\n", 6, MHD_RESPMEM_PERSISTENT);
        size_t n = strlen(why);
        if (n + 1 < sizeof(why))
            why[n++] = '\n';
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", why, n, MHD_RESPMEM_MUST_COPY);
    }
    {
        int dash;
        pthread_mutex_lock(&s->lock);
        dash = s->dashboard;
        pthread_mutex_unlock(&s->lock);
        if (dash && !strcmp(url, "/dashboard"))
            return dashboard_page(s, c);
        if (dash && !strcmp(url, "/")) {
            struct MHD_Response *r = MHD_create_response_from_buffer(
                strlen("see /dashboard\n"), "see /dashboard\n", MHD_RESPMEM_PERSISTENT);
            enum MHD_Result ret;
            if (!r)
                return MHD_NO;
            MHD_add_response_header(r, "Location", "/dashboard");
            MHD_add_response_header(r, "Content-Type", "text/plain");
            ret = MHD_queue_response(c, MHD_HTTP_FOUND, r);
            MHD_destroy_response(r);
            return ret;
        }
    }
    return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", "not found\n", 10, MHD_RESPMEM_PERSISTENT);
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, fa_error *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints = {0}, *ai = NULL;
    size_t hl;

    if (!colon || colon == listen || !colon[1])
        return fa_errorf(err, FA_ERR_INVAL, "metrics_listen '%s': expected host:port", listen);
    hl = (size_t)(colon - listen);
    if (listen[0] == '[' && colon[-1] == ']') {
        listen++;
        hl -= 2;
    }
    if (hl >= sizeof(host))
        return fa_errorf(err, FA_ERR_INVAL, "metrics_listen '%s': host too long", listen);
    memcpy(host, listen, hl);
    host[hl] = '\0';
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
        return fa_errorf(err, FA_ERR_INVAL, "metrics_listen '%s': cannot resolve", listen);
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

int fa_metrics_server_start(fa_metrics_server **out, fa_metrics *m, const char *listen,
                            fa_metrics_ready_fn ready, void *ready_ctx, fa_error *err)
{
    fa_metrics_server *s;
    struct sockaddr_storage ss;
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    int rc;

    *out = NULL;
    rc = parse_listen(listen, &ss, err);
    if (rc != 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
    s->m = m;
    s->ready = ready;
    s->ready_ctx = ready_ctx;
    pthread_mutex_init(&s->lock, NULL);
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, 0, slot_accept, s, handle, s, MHD_OPTION_SOCK_ADDR, &ss,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SLOTS_IDLE_TIMEOUT_S,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)SLOTS_HARD_LIMIT,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)SLOTS_PER_ADDRESS,
                                 MHD_OPTION_NOTIFY_CONNECTION, slot_notify, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->daemon) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return fa_errorf(err, FA_ERR_IO, "metrics: cannot listen on %s (in use?)", listen);
    }
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    *out = s;
    return 0;
}

uint16_t fa_metrics_server_port(const fa_metrics_server *s)
{
    return s->port;
}

void fa_metrics_server_stop(fa_metrics_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    pthread_mutex_destroy(&s->lock);
    sodium_memzero(s->credential, sizeof(s->credential));
    free(s->status);
    free(s);
}
