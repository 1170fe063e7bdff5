/* server.c - the HTTP/3 server: one UDP socket, one epoll loop.
 *
 * Datagram dispatch (RFC 9000 5.2): a packet whose Destination CID names a
 * known connection goes to it; an unknown version gets Version Negotiation
 * (6); an Initial may open a connection, after address validation by Retry
 * (8.1.2) when the policy or the load asks for it; a short-header packet for
 * no known connection gets a Stateless Reset (10.3) whose token is derived
 * from the static secret, so a restarted server still resets connections it
 * forgot.  Everything else is dropped: ngtcp2 parses, we never trust.
 *
 * Timers: one min-heap (timer_heap.c) holds each connection's next ngtcp2
 * expiry (loss detection, pacing, idle, ACK delay) and the application's
 * timers; epoll waits with nanosecond resolution until the earliest.  The
 * CID map is cid_map.c, the replies that need no connection stateless.c.
 */
#include "transport/h3_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "transport/cid_map.h"
#include "transport/stateless.h"
#include "transport/timer_heap.h"

#define SCIDLEN FA_STATELESS_CIDLEN
#define RETRY_TOKEN_TIMEOUT (10 * NGTCP2_SECONDS)
#define REGULAR_TOKEN_TIMEOUT (3600 * NGTCP2_SECONDS)
#define MAX_HEADER_BYTES 65536

/* ------------------------------------------------------------------ types */

enum { HI_CONN = 0, HI_TIMER = 1 };

typedef struct hitem {
    fa_timer_item t; /* first member: heap items cast back */
    int kind;
} hitem;

typedef struct app_timer {
    hitem h; /* first member: heap items cast back */
    int64_t id;
    void (*fn)(fa_h3_server *, void *);
    void *arg;
    uint64_t period; /* ns; 0 = once */
} app_timer;

struct route {
    char *method;
    char *prefix;
    size_t plen;
    fa_h3_handler h;
    void *arg;
};

struct task {
    struct task *next;
    void (*fn)(fa_h3_server *, void *);
    void *arg;
};

enum conn_state { CS_LIVE = 0, CS_CLOSING, CS_DRAINING };

typedef struct srv_conn {
    fa_qconn q; /* first member */
    hitem h;
    fa_h3_server *srv;
    struct srv_conn *prev, *next; /* all connections */
    struct srv_conn *dirty_next;  /* pending write */
    int dirty;
    int state;
    ngtcp2_cid ocid;   /* the client's first DCID, routed until the end */
    uint8_t *closebuf; /* CONNECTION_CLOSE to repeat in the closing period */
    size_t closelen;
    unsigned close_rx; /* packets received while closing (resend on powers of 2) */
    int established;   /* handshake completed */
    int goaway_sent;
    fa_h3_request *reqs; /* open requests */
    size_t nreqs;
    char addr[64];
} srv_conn;

struct fa_h3_request {
    srv_conn *c;
    fa_h3_request *prev, *next;
    int64_t sid;
    char *method, *path, *query, *authority;
    fa_h3_header *hdrs;
    size_t nhdrs, caphdrs, hdr_bytes;
    int64_t content_length;
    uint64_t body_rx, max_body, held;
    const struct route *route;
    void *data;
    fa_bodyq body;
    void (*body_done)(void *arg, int err);
    void *body_done_arg;
    void (*release)(void *arg); /* borrowed body: at req_free */
    void *release_arg;
    int headers_done, body_done_flag, responded, closed, refused_body, app_err, bad;
    int fin_sent; /* the whole response is on the wire */
};

struct fa_h3_server {
    fa_h3_server_config cfg;
    char *qlog_dir;
    fa_tls_ctx tls;
    fa_udp udp;
    int epfd, evfd, sigfd;
    int out_armed; /* EPOLLOUT registered */
    uint8_t token_key[32], reset_key[32];
    struct route *routes;
    size_t nroutes;
    /* connections */
    fa_cid_map cids; /* every CID a connection answers to -> srv_conn */
    srv_conn *conns;
    size_t nlive;
    srv_conn *dirty_head;
    /* timers */
    fa_timer_heap timers; /* of hitem */
    int64_t next_timer_id;
    /* posted tasks and cross-thread flags */
    pthread_mutex_t mu;
    struct task *tasks, *tasks_tail;
    atomic_int drain_req, stop_req;
    int draining, stopping;
    uint64_t drain_deadline;
    fa_stateless_limit resets;
    fa_h3_server_stats st;
    uint8_t pkt[NGTCP2_MAX_UDP_PAYLOAD_SIZE + 256];
};

static void conn_schedule(srv_conn *c);
static void conn_close(srv_conn *c, int liberr);
static void conn_free(srv_conn *c);
static void mark_dirty(srv_conn *c);
static void req_finish(fa_h3_request *r, int err);
static void qc_fin_sent(fa_qconn *qc, int64_t sid);

/* ----------------------------------------------------------------- defaults */

void fa_h3_server_config_default(fa_h3_server_config *c)
{
    memset(c, 0, sizeof(*c));
    fa_h3_quic_default(&c->quic);
    c->max_connections = 1024;
    c->max_body_bytes = 64ull << 30;
    c->retry = FA_H3_RETRY_ABOVE_LOAD;
    c->retry_load_threshold = 64;
    c->drain_timeout_ms = 30000;
}

/* ------------------------------------------------------------------ CID map */

static void cid_add(fa_h3_server *s, const ngtcp2_cid *cid, srv_conn *c)
{
    /* a CID already mapped keeps its first owner; out of memory drops the
     * route (the peer's packets to it are then answered by a reset) */
    (void)fa_cid_map_add(&s->cids, cid->data, cid->datalen, c);
}

static void qc_cid_add(fa_qconn *qc, const ngtcp2_cid *cid)
{
    srv_conn *c = (srv_conn *)qc;
    cid_add(c->srv, cid, c);
}

static void qc_cid_remove(fa_qconn *qc, const ngtcp2_cid *cid)
{
    srv_conn *c = (srv_conn *)qc;
    fa_cid_map_del(&c->srv->cids, cid->data, cid->datalen, c);
}

/* ------------------------------------------------------------ small helpers */

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void send_raw(fa_h3_server *s, const struct sockaddr *to, socklen_t tolen, const uint8_t *p,
                     size_t n)
{
    (void)fa_udp_send(&s->udp, to, tolen, 0, p, n, 0);
}

static char *dupn(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static void wake(fa_h3_server *s)
{
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof(one));
    (void)r;
}

/* ------------------------------------------------------------- requests */

static void update_keepalive(srv_conn *c)
{
    /* A deferred long-poll keeps the connection busy but silent: PING it
     * so neither idle timer fires while a request is open.  Between
     * requests, none: 0 disables ngtcp2's keep-alive, whereas UINT64_MAX
     * overflowed its expiry (last packet time + timeout) into the past and
     * made every write a PING, hundreds a second to an idle client. */
    uint64_t idle = (uint64_t)c->srv->cfg.quic.idle_timeout_ms * NGTCP2_MILLISECONDS;
    ngtcp2_conn_set_keep_alive_timeout(c->q.conn, c->nreqs ? idle / 3 : 0);
}

static fa_h3_request *req_new(srv_conn *c, int64_t sid)
{
    fa_h3_request *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->c = c;
    r->sid = sid;
    r->content_length = -1;
    r->max_body = c->srv->cfg.max_body_bytes;
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    c->nreqs++;
    update_keepalive(c);
    return r;
}

static void req_free(fa_h3_request *r)
{
    srv_conn *c = r->c;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    c->nreqs--;
    if (c->q.conn && c->state == CS_LIVE)
        update_keepalive(c);
    for (size_t i = 0; i < r->nhdrs; i++) {
        free((char *)r->hdrs[i].name);
        free((char *)r->hdrs[i].value);
    }
    free(r->hdrs);
    free(r->method);
    free(r->path);
    free(r->query);
    free(r->authority);
    fa_bodyq_free(&r->body);
    if (r->release)
        r->release(r->release_arg);
    free(r);
}

/* The application's last word on r: on_close.  r itself (and the body
 * bytes ngtcp2 may still retransmit) lives on until the stream closes. */
static void req_notify(fa_h3_request *r, int err)
{
    srv_conn *c = r->c;
    if (r->closed)
        return;
    r->closed = 1;
    /* credit held by the application but never consumed goes back to the
     * connection, or its window would shrink for good */
    if (r->held && c->q.conn && c->state == CS_LIVE) {
        ngtcp2_conn_extend_max_offset(c->q.conn, r->held);
        r->held = 0;
    }
    if (r->body_done) {
        r->body_done(r->body_done_arg, err);
        r->body_done = NULL;
    }
    fa_log(FA_LOG_DEBUG, "request closed", "peer=%s stream=%lld path=%s error=\"%s\"", c->q.peer_id,
           (long long)r->sid, r->path ? r->path : "", err ? fa_strerror(err) : "");
    if (r->route && r->route->h.on_close)
        r->route->h.on_close(r, err, r->route->arg);
}

/* on_close if not yet, then r is gone: only when the stream is closed or
 * the connection is going away (ngtcp2 no longer references the body). */
static void req_finish(fa_h3_request *r, int err)
{
    req_notify(r, err);
    req_free(r);
}

const char *fa_h3_request_method(const fa_h3_request *r)
{
    return r->method ? r->method : "";
}
const char *fa_h3_request_path(const fa_h3_request *r)
{
    return r->path ? r->path : "";
}
const char *fa_h3_request_query(const fa_h3_request *r)
{
    return r->query ? r->query : "";
}
int64_t fa_h3_request_content_length(const fa_h3_request *r)
{
    return r->content_length;
}
uint64_t fa_h3_request_body_received(const fa_h3_request *r)
{
    return r->body_rx;
}
const char *fa_h3_request_peer(const fa_h3_request *r)
{
    return r->c->q.peer_role == FA_H3_ROLE_REGION ? r->c->q.peer_id : "";
}
int fa_h3_request_peer_role(const fa_h3_request *r)
{
    return r->c->q.peer_role;
}
const char *fa_h3_request_peer_name(const fa_h3_request *r)
{
    return r->c->q.peer_id;
}
const char *fa_h3_request_peer_addr(const fa_h3_request *r)
{
    return r->c->addr;
}
fa_h3_server *fa_h3_request_server(const fa_h3_request *r)
{
    return r->c->srv;
}
void fa_h3_request_set_data(fa_h3_request *r, void *data)
{
    r->data = data;
}
void *fa_h3_request_get_data(const fa_h3_request *r)
{
    return r->data;
}
void fa_h3_request_set_max_body(fa_h3_request *r, uint64_t max)
{
    r->max_body = max;
}

const char *fa_h3_request_header(const fa_h3_request *r, const char *name)
{
    for (size_t i = 0; i < r->nhdrs; i++)
        if (fa_h3_streq_nocase(r->hdrs[i].name, name))
            return r->hdrs[i].value;
    return NULL;
}

const fa_h3_header *fa_h3_request_headers(const fa_h3_request *r, size_t *n)
{
    *n = r->nhdrs;
    return r->hdrs;
}

void fa_h3_request_consume(fa_h3_request *r, size_t n)
{
    if (r->closed)
        return;
    if (n > r->held)
        n = (size_t)r->held;
    r->held -= n;
    if (r->c->state == CS_LIVE) {
        fa_qconn_consume(&r->c->q, r->sid, n);
        mark_dirty(r->c);
    }
}

void fa_h3_request_resume(fa_h3_request *r)
{
    if (r->closed || r->c->state != CS_LIVE || !r->c->q.h3)
        return;
    nghttp3_conn_resume_stream(r->c->q.h3, r->sid);
    mark_dirty(r->c);
}

void fa_h3_request_cancel(fa_h3_request *r)
{
    if (r->closed || r->c->state != CS_LIVE)
        return;
    if (!r->app_err)
        r->app_err = FA_ERR_CANCELLED;
    (void)fa_qconn_defer_reset(&r->c->q, r->sid, FA_H3_REQUEST_CANCELLED);
    mark_dirty(r->c);
}

static nghttp3_ssize req_read_data(nghttp3_conn *h3, int64_t sid, nghttp3_vec *vec, size_t veccnt,
                                   uint32_t *pflags, void *conn_ud, void *sud)
{
    fa_h3_request *r = sud;
    nghttp3_ssize n;
    if (!r)
        return NGHTTP3_ERR_CALLBACK_FAILURE;
    if (r->closed)
        return NGHTTP3_ERR_WOULDBLOCK; /* abandoned: its reset is on the way */
    n = fa_bodyq_read(&r->body, vec, veccnt, pflags);
    if (n == NGHTTP3_ERR_CALLBACK_FAILURE) {
        /* the application's body source failed: reset this stream only */
        r->app_err = r->body.error ? r->body.error : FA_ERR_IO;
        (void)fa_qconn_defer_reset(&r->c->q, sid, FA_H3_INTERNAL_ERROR);
        return NGHTTP3_ERR_WOULDBLOCK;
    }
    return n;
}

/* Lower-cased copies of the application's fields, plus :status and length. */
static int submit(fa_h3_request *r, int status, const fa_h3_header *hdrs, size_t n,
                  int64_t content_length, int has_body)
{
    nghttp3_nv *nva;
    char st[8], cl[24];
    char **names;
    size_t k = 0;
    int rv = 0;
    nghttp3_data_reader dr = {req_read_data};

    if (status < 100 || status > 999)
        return FA_ERR_INVAL;
    nva = calloc(n + 2, sizeof(*nva));
    names = calloc(n + 1, sizeof(*names));
    if (!nva || !names) {
        free(nva);
        free(names);
        return FA_ERR_NOMEM;
    }
    snprintf(st, sizeof(st), "%d", status);
    nva[k++] =
        (nghttp3_nv){(uint8_t *)":status", (uint8_t *)st, 7, strlen(st), NGHTTP3_NV_FLAG_NONE};
    if (content_length >= 0) {
        snprintf(cl, sizeof(cl), "%lld", (long long)content_length);
        nva[k++] = (nghttp3_nv){(uint8_t *)"content-length", (uint8_t *)cl, 14, strlen(cl),
                                NGHTTP3_NV_FLAG_NONE};
    }
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(hdrs[i].name);
        if (!l || !hdrs[i].value || fa_h3_streq_nocase(hdrs[i].name, "content-length")) {
            if (l && hdrs[i].value)
                continue; /* we own content-length */
            rv = FA_ERR_INVAL;
            goto out;
        }
        names[i] = malloc(l + 1);
        if (!names[i]) {
            rv = FA_ERR_NOMEM;
            goto out;
        }
        for (size_t j = 0; j <= l; j++)
            names[i][j] =
                (char)((hdrs[i].name[j] >= 'A' && hdrs[i].name[j] <= 'Z') ? hdrs[i].name[j] + 32
                                                                          : hdrs[i].name[j]);
        nva[k++] = (nghttp3_nv){(uint8_t *)names[i], (uint8_t *)hdrs[i].value, l,
                                strlen(hdrs[i].value), NGHTTP3_NV_FLAG_NONE};
    }
    /* nghttp3 copies the fields */
    if (nghttp3_conn_submit_response(r->c->q.h3, r->sid, nva, k, has_body ? &dr : NULL) != 0)
        rv = FA_ERR_HTTP;
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(nva);
    return rv;
}

static int respond_check(fa_h3_request *r)
{
    if (r->closed || r->responded || r->c->state != CS_LIVE || !r->c->q.h3)
        return FA_ERR_STATE;
    return 0;
}

int fa_h3_respond(fa_h3_request *r, int status, const fa_h3_header *headers, size_t nheaders,
                  const void *body, size_t len)
{
    uint8_t *copy = NULL;
    int rv = respond_check(r);
    if (rv)
        return rv;
    if (len) {
        copy = malloc(len);
        if (!copy)
            return FA_ERR_NOMEM;
        memcpy(copy, body, len);
    }
    fa_bodyq_init_buf(&r->body, copy, len, copy);
    rv = submit(r, status, headers, nheaders, (int64_t)len, len > 0);
    if (rv)
        return rv;
    r->responded = 1;
    mark_dirty(r->c);
    return 0;
}

int fa_h3_respond_ref(fa_h3_request *r, int status, const fa_h3_header *headers, size_t nheaders,
                      const void *body, uint64_t len, void (*release)(void *arg), void *arg)
{
    int rv = respond_check(r);
    if (rv)
        return rv;
    if (len && !body)
        return FA_ERR_INVAL;
    fa_bodyq_init_buf(&r->body, body, (size_t)len, NULL);
    rv = submit(r, status, headers, nheaders, (int64_t)len, len > 0);
    if (rv)
        return rv;
    r->responded = 1;
    r->release = release;
    r->release_arg = arg;
    mark_dirty(r->c);
    return 0;
}

int fa_h3_respond_stream(fa_h3_request *r, int status, const fa_h3_header *headers, size_t nheaders,
                         int64_t content_length, fa_h3_read_fn read,
                         void (*done)(void *arg, int err), void *arg)
{
    int rv = respond_check(r);
    if (rv)
        return rv;
    if (!read)
        return FA_ERR_INVAL;
    fa_bodyq_init_pull(&r->body, read, arg, r->c->srv->cfg.quic.max_stream_window);
    rv = submit(r, status, headers, nheaders, content_length, 1);
    if (rv)
        return rv;
    r->responded = 1;
    r->body_done = done;
    r->body_done_arg = arg;
    mark_dirty(r->c);
    return 0;
}

static void respond_text(fa_h3_request *r, int status, const char *text)
{
    fa_h3_header h = {"content-type", "text/plain; charset=utf-8"};
    (void)fa_h3_respond(r, status, &h, 1, text, strlen(text));
}

/* 413: answer now, stop the upload (RFC 9114 4.1.2: H3_NO_ERROR asks the
 * client to stop sending), keep the connection. */
static void refuse_body(fa_h3_request *r)
{
    char msg[128];
    if (r->refused_body)
        return;
    r->refused_body = 1;
    if (!r->responded) {
        snprintf(msg, sizeof(msg), "request body larger than %llu bytes\n",
                 (unsigned long long)r->max_body);
        respond_text(r, 413, msg);
    }
    /* ngtcp2 stops delivering the stream and credits the connection window
     * for what it discards; the client answers STOP_SENDING with
     * RESET_STREAM, which closes our read side. */
    ngtcp2_conn_shutdown_stream_read(r->c->q.conn, r->sid, FA_H3_NO_ERROR);
}

/* ---------------------------------------------------- nghttp3 callbacks */

static int h3_begin_headers(nghttp3_conn *h3, int64_t sid, void *ud, void *sud)
{
    srv_conn *c = ud;
    fa_h3_request *r;
    if (sud)
        return 0; /* trailers */
    r = req_new(c, sid);
    if (!r)
        return NGHTTP3_ERR_CALLBACK_FAILURE;
    nghttp3_conn_set_stream_user_data(h3, sid, r);
    ngtcp2_conn_set_stream_user_data(c->q.conn, sid, r);
    return 0;
}

static int h3_recv_header(nghttp3_conn *h3, int64_t sid, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *ud, void *sud)
{
    fa_h3_request *r = sud;
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);

    if (!r || r->headers_done)
        return 0;
    r->hdr_bytes += n.len + v.len + 32;
    if (r->hdr_bytes > MAX_HEADER_BYTES) {
        r->bad = 431;
        return 0;
    }
    switch (token) {
    case NGHTTP3_QPACK_TOKEN__METHOD:
        free(r->method);
        r->method = dupn(v.base, v.len);
        break;
    case NGHTTP3_QPACK_TOKEN__PATH: {
        const uint8_t *q = memchr(v.base, '?', v.len);
        size_t pl = q ? (size_t)(q - v.base) : v.len;
        free(r->path);
        free(r->query);
        r->path = dupn(v.base, pl);
        r->query = q ? dupn(q + 1, v.len - pl - 1) : NULL;
        break;
    }
    case NGHTTP3_QPACK_TOKEN__AUTHORITY:
        free(r->authority);
        r->authority = dupn(v.base, v.len);
        break;
    case NGHTTP3_QPACK_TOKEN__SCHEME:
    case NGHTTP3_QPACK_TOKEN__PROTOCOL: break;
    default:
        if (n.len && n.base[0] == ':')
            break;
        if (token == NGHTTP3_QPACK_TOKEN_CONTENT_LENGTH) {
            char tmp[24];
            char *end;
            unsigned long long x;
            if (v.len == 0 || v.len >= sizeof(tmp))
                break; /* nghttp3 already rejects malformed values */
            memcpy(tmp, v.base, v.len);
            tmp[v.len] = '\0';
            x = strtoull(tmp, &end, 10);
            if (*end == '\0' && x <= INT64_MAX)
                r->content_length = (int64_t)x;
        }
        if (r->nhdrs == r->caphdrs) {
            size_t cap = r->caphdrs ? 2 * r->caphdrs : 8;
            fa_h3_header *nh = realloc(r->hdrs, cap * sizeof(*nh));
            if (!nh)
                return NGHTTP3_ERR_CALLBACK_FAILURE;
            r->hdrs = nh;
            r->caphdrs = cap;
        }
        r->hdrs[r->nhdrs].name = dupn(n.base, n.len);
        r->hdrs[r->nhdrs].value = dupn(v.base, v.len);
        if (!r->hdrs[r->nhdrs].name || !r->hdrs[r->nhdrs].value) {
            free((char *)r->hdrs[r->nhdrs].name);
            free((char *)r->hdrs[r->nhdrs].value);
            return NGHTTP3_ERR_CALLBACK_FAILURE;
        }
        r->nhdrs++;
    }
    return 0;
}

static const struct route *route_find(const fa_h3_server *s, const char *method, const char *path,
                                      int *method_mismatch)
{
    const struct route *best = NULL, *any_method = NULL;
    for (size_t i = 0; i < s->nroutes; i++) {
        const struct route *rt = &s->routes[i];
        if (strncmp(path, rt->prefix, rt->plen) != 0)
            continue;
        if (strcmp(rt->method, "*") == 0 || strcmp(rt->method, method) == 0) {
            if (!best || rt->plen > best->plen)
                best = rt;
        } else if (!any_method || rt->plen > any_method->plen) {
            any_method = rt;
        }
    }
    *method_mismatch = !best && any_method;
    return best;
}

static int h3_end_headers(nghttp3_conn *h3, int64_t sid, int fin, void *ud, void *sud)
{
    fa_h3_request *r = sud;
    srv_conn *c = ud;
    const struct route *rt;
    int mismatch = 0;

    if (!r || r->headers_done)
        return 0;
    r->headers_done = 1;
    c->srv->st.requests++;
    if (r->bad == 431) {
        respond_text(r, 431, "request header fields too large\n");
        refuse_body(r);
        return 0;
    }
    if (!r->method || !r->path || !r->path[0]) {
        respond_text(r, 400, "missing :method or :path\n");
        refuse_body(r);
        return 0;
    }
    rt = route_find(c->srv, r->method, r->path, &mismatch);
    if (!rt) {
        char msg[300];
        snprintf(msg, sizeof(msg), "%s %s\n",
                 mismatch ? "method not allowed for" : "no handler for", r->path);
        respond_text(r, mismatch ? 405 : 404, msg);
        refuse_body(r);
        return 0;
    }
    if (c->srv->draining && c->goaway_sent) {
        /* raced with our GOAWAY: the client will retry elsewhere/later */
        respond_text(r, 503, "server is shutting down\n");
        refuse_body(r);
        return 0;
    }
    r->route = rt;
    if (r->content_length >= 0 && (uint64_t)r->content_length > r->max_body) {
        refuse_body(r);
        return 0;
    }
    if (rt->h.on_request) {
        int rv = rt->h.on_request(r, rt->arg);
        if (rv < 0 && !r->responded && !r->closed)
            respond_text(r, 500, "handler failed\n");
        if (rv < 0)
            r->app_err = rv;
        /* the handler may have lowered the limit */
        if (!r->refused_body && r->content_length >= 0 && (uint64_t)r->content_length > r->max_body)
            refuse_body(r);
    }
    return 0;
}

static int h3_recv_data(nghttp3_conn *h3, int64_t sid, const uint8_t *data, size_t len, void *ud,
                        void *sud)
{
    fa_h3_request *r = sud;
    srv_conn *c = ud;
    int rv;

    if (!r || r->closed || r->refused_body || !r->route || !r->route->h.on_body) {
        fa_qconn_consume(&c->q, sid, len);
        return 0;
    }
    r->body_rx += len;
    if (r->body_rx > r->max_body) {
        fa_qconn_consume(&c->q, sid, len);
        refuse_body(r);
        return 0;
    }
    rv = r->route->h.on_body(r, data, len, r->route->arg);
    if (rv == FA_H3_HOLD) {
        r->held += len;
    } else {
        fa_qconn_consume(&c->q, sid, len);
        if (rv < 0) {
            r->app_err = rv;
            fa_h3_request_cancel(r);
        }
    }
    return 0;
}

static int h3_deferred_consume(nghttp3_conn *h3, int64_t sid, size_t consumed, void *ud, void *sud)
{
    srv_conn *c = ud;
    fa_qconn_consume(&c->q, sid, consumed);
    return 0;
}

static int h3_end_stream(nghttp3_conn *h3, int64_t sid, void *ud, void *sud)
{
    fa_h3_request *r = sud;
    if (!r || r->closed || r->body_done_flag)
        return 0;
    r->body_done_flag = 1;
    if (r->route && !r->refused_body && r->route->h.on_body_end)
        r->route->h.on_body_end(r, r->route->arg);
    return 0;
}

static int h3_stream_close(nghttp3_conn *h3, int64_t sid, uint64_t app_error_code, void *ud,
                           void *sud)
{
    fa_h3_request *r = sud;
    srv_conn *c = ud;
    if (r) {
        int err = 0;
        if (r->app_err)
            err = r->app_err;
        else if (r->refused_body)
            err = FA_ERR_TOOBIG;
        else if (app_error_code != NGHTTP3_H3_NO_ERROR || !r->responded)
            err = FA_ERR_CANCELLED;
        req_finish(r, err);
    }
    if (ngtcp2_is_bidi_stream(sid) && !ngtcp2_conn_is_local_stream(c->q.conn, sid))
        ngtcp2_conn_extend_max_streams_bidi(c->q.conn, 1);
    return 0;
}

static int h3_acked_stream_data(nghttp3_conn *h3, int64_t sid, uint64_t datalen, void *ud,
                                void *sud)
{
    fa_h3_request *r = sud;
    if (r && fa_bodyq_acked(&r->body, datalen))
        nghttp3_conn_resume_stream(h3, sid);
    return 0;
}

static int h3_stop_sending(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    srv_conn *c = ud;
    ngtcp2_conn_shutdown_stream_read(c->q.conn, sid, code);
    return 0;
}

static int h3_reset_stream(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    srv_conn *c = ud;
    ngtcp2_conn_shutdown_stream_write(c->q.conn, sid, code);
    return 0;
}

static int qc_h3_setup(fa_qconn *qc)
{
    srv_conn *c = (srv_conn *)qc;
    nghttp3_callbacks cb;
    nghttp3_settings set;
    const ngtcp2_transport_params *params;

    memset(&cb, 0, sizeof(cb));
    cb.acked_stream_data = h3_acked_stream_data;
    cb.stream_close = h3_stream_close;
    cb.recv_data = h3_recv_data;
    cb.deferred_consume = h3_deferred_consume;
    cb.begin_headers = h3_begin_headers;
    cb.recv_header = h3_recv_header;
    cb.end_headers = h3_end_headers;
    cb.stop_sending = h3_stop_sending;
    cb.end_stream = h3_end_stream;
    cb.reset_stream = h3_reset_stream;
    nghttp3_settings_default(&set);
    set.max_field_section_size = MAX_HEADER_BYTES;
    set.qpack_max_dtable_capacity = 4096;
    set.qpack_blocked_streams = 16;
    if (nghttp3_conn_server_new(&qc->h3, &cb, &set, NULL, c) != 0)
        return -1;
    params = ngtcp2_conn_get_local_transport_params(qc->conn);
    nghttp3_conn_set_max_client_streams_bidi(qc->h3, params->initial_max_streams_bidi);
    return fa_qconn_h3_bind(qc);
}

/* The client reset its request stream: unless it merely stopped uploading
 * after our early answer (H3_NO_ERROR, RFC 9114 4.1.2), the request is
 * abandoned.  Tell the application now, not when the stream finally closes,
 * and stop our side too. */
static void qc_stream_reset(fa_qconn *qc, int64_t sid, uint64_t code, void *sud)
{
    fa_h3_request *r = sud;
    fa_log(FA_LOG_DEBUG, "stream reset by the client", "stream=%lld code=0x%llx known=%d",
           (long long)sid, (unsigned long long)code, r != NULL);
    if (!r || r->closed)
        return;
    if (code == NGHTTP3_H3_NO_ERROR && (r->responded || r->refused_body))
        return;
    if (!r->app_err)
        r->app_err = FA_ERR_CANCELLED;
    (void)fa_qconn_defer_reset(qc, sid, FA_H3_REQUEST_CANCELLED);
    req_notify(r, r->app_err);
    mark_dirty((srv_conn *)qc);
}

static int qc_handshake_done(fa_qconn *qc)
{
    srv_conn *c = (srv_conn *)qc;
    uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    const ngtcp2_path *path = ngtcp2_conn_get_path(qc->conn);
    ngtcp2_ssize n;

    if (!qc->verified) /* cannot happen with GNUTLS_CERT_REQUIRE; belt and braces */
        return -1;
    c->established = 1;
    c->srv->st.connections_accepted++;
    fa_log(FA_LOG_INFO, "connection established",
           "peer=%s role=%s addr=%s route_mtu=%u udp_payload=%zu", qc->peer_id,
           qc->peer_role == FA_H3_ROLE_OPERATOR ? "operator" : "region", c->addr, qc->dg.route_mtu,
           fa_qconn_udp_payload(qc));
    /* a token for the next connection from this address skips Retry (8.1.3) */
    n = ngtcp2_crypto_generate_regular_token(token, c->srv->token_key, 32, path->remote.addr,
                                             path->remote.addrlen, realtime_ns());
    if (n > 0)
        (void)ngtcp2_conn_submit_new_token(qc->conn, token, (size_t)n);
    return 0;
}

static const fa_qconn_ops server_ops = {
    .cid_add = qc_cid_add,
    .cid_remove = qc_cid_remove,
    .h3_setup = qc_h3_setup,
    .handshake_done = qc_handshake_done,
    .stream_reset = qc_stream_reset,
    .fin_sent = qc_fin_sent,
};

/* ----------------------------------------------------------- connections */

static void mark_dirty(srv_conn *c)
{
    if (c->dirty || c->state != CS_LIVE)
        return;
    c->dirty = 1;
    c->dirty_next = c->srv->dirty_head;
    c->srv->dirty_head = c;
}

static void conn_schedule(srv_conn *c)
{
    uint64_t when;
    if (c->state != CS_LIVE)
        return;
    when = ngtcp2_conn_get_expiry(c->q.conn);
    if (when == UINT64_MAX)
        fa_timer_heap_remove(&c->srv->timers, &c->h.t);
    else
        (void)fa_timer_heap_set(&c->srv->timers, &c->h.t, when);
}

static srv_conn *conn_new(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *ocid,
                          const struct sockaddr *from, socklen_t fromlen)
{
    srv_conn *c = calloc(1, sizeof(*c));
    ngtcp2_callbacks cb;
    ngtcp2_settings set;
    ngtcp2_transport_params params;
    ngtcp2_cid scid;
    ngtcp2_path path;
    uint64_t now = fa_h3_now();
    fa_error err;

    if (!c)
        return NULL;
    fa_timer_item_init(&c->h.t);
    c->h.kind = HI_CONN;
    c->srv = s;
    c->q.reset_key = s->reset_key;
    fa_udp_addr_str(from, c->addr, sizeof(c->addr));
    if (fa_qconn_prepare(&c->q, 1, &server_ops, c, &s->udp, &s->cfg.quic, from, fromlen) != 0)
        goto fail;

    scid.datalen = SCIDLEN;
    fa_h3_random(scid.data, scid.datalen);
    fa_qconn_settings(&c->q, &set, &params, &s->cfg.quic, now);
    set.token = hd->token; /* validated (or empty) */
    if (ocid) {
        params.original_dcid = *ocid;
        params.retry_scid = hd->dcid;
        params.retry_scid_present = 1;
    } else {
        params.original_dcid = hd->dcid;
    }
    params.stateless_reset_token_present = 1;
    if (ngtcp2_crypto_generate_stateless_reset_token(params.stateless_reset_token, s->reset_key, 32,
                                                     &scid) != 0)
        goto fail;
    fa_qconn_qlog_open(&c->q, &set, &scid, ocid ? ocid : &hd->dcid);
    fa_qconn_callbacks(&cb);
    cb.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    fa_qconn_path(&c->q, &path);
    if (ngtcp2_conn_server_new(&c->q.conn, &hd->scid, &scid, &path, hd->version, &cb, &set, &params,
                               NULL, &c->q) != 0)
        goto fail;
    if (fa_tls_session_new(&s->tls, &c->q, NULL, &err) != 0) {
        fa_log(FA_LOG_WARN, "TLS session setup failed", "addr=%s error=\"%s\"", c->addr, err.msg);
        goto fail;
    }
    ngtcp2_conn_set_tls_native_handle(c->q.conn, c->q.tls);
    c->ocid = hd->dcid;
    cid_add(s, &hd->dcid, c);
    cid_add(s, &scid, c);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nlive++;
    s->st.current_connections = s->nlive;
    return c;
fail:
    fa_qconn_free(&c->q);
    free(c);
    return NULL;
}

/* Every open request ends; the connection's CIDs keep routing to it until
 * conn_free so late packets find the closing state, not a stateless reset. */
static void conn_fail_requests(srv_conn *c, int err)
{
    while (c->reqs)
        req_finish(c->reqs, err);
}

/* The peer closed politely (H3_NO_ERROR): requests whose whole response
 * went out were delivered (a client closes after reading its response,
 * before acknowledging the last packet); the others were abandoned. */
static void conn_finish_requests_graceful(srv_conn *c)
{
    while (c->reqs) {
        fa_h3_request *r = c->reqs;
        req_finish(r, r->fin_sent && !r->app_err && !r->refused_body
                          ? 0
                          : (r->app_err ? r->app_err : FA_ERR_QUIC));
    }
}

static void qc_fin_sent(fa_qconn *qc, int64_t sid)
{
    srv_conn *c = (srv_conn *)qc;
    for (fa_h3_request *r = c->reqs; r; r = r->next)
        if (r->sid == sid) {
            r->fin_sent = 1;
            return;
        }
}

static void conn_unlink(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    if (c->state == CS_LIVE) {
        s->nlive--;
        s->st.current_connections = s->nlive;
    }
    if (c->dirty) {
        srv_conn **pp;
        for (pp = &s->dirty_head; *pp; pp = &(*pp)->dirty_next)
            if (*pp == c) {
                *pp = c->dirty_next;
                break;
            }
        c->dirty = 0;
    }
}

static void conn_free(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    ngtcp2_cid cids[16];
    size_t n;

    conn_fail_requests(c, FA_ERR_QUIC);
    conn_unlink(c);
    fa_timer_heap_remove(&s->timers, &c->h.t);
    s->st.datagram_fallbacks += c->q.dg.fallbacks;
    s->st.datagram_shrinks += c->q.dg.shrinks;
    if (c->q.conn) {
        n = ngtcp2_conn_get_num_scid(c->q.conn);
        if (n <= 16) {
            ngtcp2_conn_get_scid(c->q.conn, cids);
            for (size_t i = 0; i < n; i++)
                fa_cid_map_del(&s->cids, cids[i].data, cids[i].datalen, c);
        }
    }
    fa_cid_map_del(&s->cids, c->ocid.data, c->ocid.datalen, c);
    /* anything left pointing at c (retired CIDs) */
    fa_cid_map_del_value(&s->cids, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    fa_qconn_free(&c->q);
    free(c->closebuf);
    free(c);
}

/* Ends a connection.  Errors that need no CONNECTION_CLOSE (idle timeout,
 * drop) free it now; others send CONNECTION_CLOSE and linger 3 PTO in the
 * closing period (RFC 9000 10.2.1) to answer late packets. */
static void conn_close(srv_conn *c, int liberr)
{
    fa_h3_server *s = c->srv;
    char why[300];
    uint64_t pto, now = fa_h3_now();

    if (c->state != CS_LIVE)
        return;
    switch (liberr) {
    case 0: /* our graceful close */ break;
    case NGTCP2_ERR_IDLE_CLOSE:
        fa_log(FA_LOG_DEBUG, "connection idle timeout", "peer=%s addr=%s", c->q.peer_id, c->addr);
        break;
    case NGTCP2_ERR_DROP_CONN:
    case NGTCP2_ERR_RETRY: fa_log(FA_LOG_DEBUG, "connection dropped", "addr=%s", c->addr); break;
    case NGTCP2_ERR_DRAINING:
        fa_qconn_describe_error(&c->q, liberr, why, sizeof(why));
        if (!c->established) {
            s->st.handshakes_failed++;
            fa_log(FA_LOG_WARN, "handshake refused by the client", "addr=%s reason=\"%s\"", c->addr,
                   why);
        } else {
            fa_log(FA_LOG_DEBUG, "connection closed by the peer", "peer=%s addr=%s reason=\"%s\"",
                   c->q.peer_id, c->addr, why);
        }
        break;
    default:
        fa_qconn_describe_error(&c->q, liberr, why, sizeof(why));
        if (!c->established) {
            s->st.handshakes_failed++;
            fa_log(FA_LOG_WARN, "handshake refused", "addr=%s reason=\"%s\"", c->addr, why);
        } else {
            fa_log(FA_LOG_INFO, "connection closed", "peer=%s addr=%s reason=\"%s\"", c->q.peer_id,
                   c->addr, why);
        }
    }
    if (liberr == NGTCP2_ERR_DRAINING) {
        ngtcp2_connection_close_error peer;
        ngtcp2_conn_get_connection_close_error(c->q.conn, &peer);
        if ((peer.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
             peer.error_code == NGHTTP3_H3_NO_ERROR) ||
            (peer.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT &&
             peer.error_code == NGTCP2_NO_ERROR))
            conn_finish_requests_graceful(c);
    }
    conn_fail_requests(c, FA_ERR_QUIC);
    if (liberr == NGTCP2_ERR_IDLE_CLOSE || liberr == NGTCP2_ERR_DROP_CONN ||
        liberr == NGTCP2_ERR_RETRY || !c->q.conn) {
        conn_free(c);
        return;
    }
    pto = ngtcp2_conn_get_pto(c->q.conn);
    if (liberr != NGTCP2_ERR_DRAINING) {
        uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
        size_t n = fa_qconn_close_pkt(&c->q, buf, sizeof(buf));
        if (n) {
            c->closebuf = malloc(n);
            if (c->closebuf) {
                memcpy(c->closebuf, buf, n);
                c->closelen = n;
            }
            (void)fa_udp_flush(&s->udp);
            send_raw(s, (struct sockaddr *)&c->q.remote, c->q.remote_len, buf, n);
        }
    }
    conn_unlink(c);
    c->state = liberr == NGTCP2_ERR_DRAINING ? CS_DRAINING : CS_CLOSING;
    if (s->stopping || fa_timer_heap_set(&s->timers, &c->h.t, now + 3 * pto) != 0)
        conn_free(c);
}

/* Graceful application close of an established connection. */
static void conn_close_app(srv_conn *c, uint64_t code)
{
    ngtcp2_connection_close_error_set_application_error(&c->q.last_error, code, NULL, 0);
    conn_close(c, 0);
}

static void conn_write(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    int rv;

    if (c->state != CS_LIVE)
        return;
    rv = fa_qconn_write(&c->q, 4);
    if (rv == 1) {
        mark_dirty(c); /* more to send: after the next receive pass */
    } else if (rv == FA_ERR_AGAIN) {
        mark_dirty(c);
        if (!s->out_armed) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 0};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
            s->out_armed = 1;
        }
    } else if (rv < 0) {
        conn_close(c, rv);
        return;
    }
    conn_schedule(c);
}

/* ------------------------------------------------------ datagram dispatch */

static void send_version_negotiation(fa_h3_server *s, const ngtcp2_version_cid *vc,
                                     const struct sockaddr *from, socklen_t fromlen)
{
    ngtcp2_ssize n = fa_stateless_version_negotiation(s->pkt, sizeof(s->pkt), vc, fa_h3_random);
    if (n > 0) {
        send_raw(s, from, fromlen, s->pkt, (size_t)n);
        s->st.version_negotiations_sent++;
    }
}

static void send_retry(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                       socklen_t fromlen, size_t rxlen)
{
    ngtcp2_ssize n = fa_stateless_retry(s->pkt, sizeof(s->pkt), s->token_key, hd, from, fromlen,
                                        rxlen, realtime_ns(), fa_h3_random);
    if (n > 0) {
        send_raw(s, from, fromlen, s->pkt, (size_t)n);
        s->st.retries_sent++;
    }
}

static void send_initial_close(fa_h3_server *s, const ngtcp2_pkt_hd *hd,
                               const struct sockaddr *from, socklen_t fromlen, uint64_t code)
{
    ngtcp2_ssize n = fa_stateless_initial_close(s->pkt, sizeof(s->pkt), hd, code);
    if (n > 0)
        send_raw(s, from, fromlen, s->pkt, (size_t)n);
}

static void send_stateless_reset(fa_h3_server *s, const uint8_t *dcid, size_t dcidlen,
                                 const struct sockaddr *from, socklen_t fromlen, size_t rxlen)
{
    ngtcp2_ssize n = fa_stateless_reset(s->pkt, sizeof(s->pkt), &s->resets, fa_h3_now(),
                                        s->reset_key, dcid, dcidlen, rxlen, fa_h3_random);
    if (n > 0) {
        send_raw(s, from, fromlen, s->pkt, (size_t)n);
        s->st.stateless_resets_sent++;
    }
}

static void on_new_initial(fa_h3_server *s, uint8_t *data, size_t len, const struct sockaddr *from,
                           socklen_t fromlen, unsigned ecn)
{
    ngtcp2_pkt_hd hd;
    ngtcp2_cid ocid, *pocid = NULL;
    srv_conn *c;
    int rv, need_retry;
    uint64_t now = realtime_ns();

    if (ngtcp2_accept(&hd, data, len) != 0) {
        s->st.datagrams_dropped++;
        return;
    }
    if (s->draining || s->stopping || s->nlive >= s->cfg.max_connections) {
        send_initial_close(s, &hd, from, fromlen, NGTCP2_CONNECTION_REFUSED);
        s->st.connections_refused++;
        return;
    }
    need_retry = s->cfg.retry == FA_H3_RETRY_ALWAYS || (s->cfg.retry == FA_H3_RETRY_ABOVE_LOAD &&
                                                        s->nlive >= s->cfg.retry_load_threshold);
    if (hd.token.len) {
        switch (hd.token.base[0]) {
        case NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY:
            if (ngtcp2_crypto_verify_retry_token(&ocid, hd.token.base, hd.token.len, s->token_key,
                                                 32, hd.version, from, fromlen, &hd.dcid,
                                                 RETRY_TOKEN_TIMEOUT, now) != 0) {
                /* forged, expired or from another address (8.1.3) */
                send_initial_close(s, &hd, from, fromlen, NGTCP2_INVALID_TOKEN);
                s->st.datagrams_dropped++;
                return;
            }
            pocid = &ocid;
            break;
        case NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR:
            if (ngtcp2_crypto_verify_regular_token(hd.token.base, hd.token.len, s->token_key, 32,
                                                   from, fromlen, REGULAR_TOKEN_TIMEOUT,
                                                   now) != 0) {
                hd.token.base = NULL;
                hd.token.len = 0;
            }
            break;
        default: hd.token.base = NULL; hd.token.len = 0;
        }
    }
    if (need_retry && !hd.token.len) {
        send_retry(s, &hd, from, fromlen, len);
        return;
    }
    if (!hd.token.len && hd.dcid.datalen < NGTCP2_MIN_INITIAL_DCIDLEN) {
        s->st.datagrams_dropped++;
        return;
    }
    c = conn_new(s, &hd, pocid, from, fromlen);
    if (!c)
        return;
    rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
    if (rv != 0) {
        if (rv == NGTCP2_ERR_RETRY)
            send_retry(s, &hd, from, fromlen, len);
        conn_close(c, rv == NGTCP2_ERR_RETRY ? NGTCP2_ERR_DROP_CONN : rv);
        return;
    }
    mark_dirty(c);
    conn_schedule(c);
}

static void on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                        socklen_t fromlen, unsigned ecn)
{
    fa_h3_server *s = arg;
    ngtcp2_version_cid vc;
    srv_conn *c;
    int rv;

    if (len == 0) {
        /* an empty datagram is legal UDP; libngtcp2 asserts on it */
        s->st.datagrams_dropped++;
        return;
    }
    rv = ngtcp2_pkt_decode_version_cid(&vc, data, len, SCIDLEN);
    if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
        /* too small to be a client's first Initial: no answer (14.1) */
        if (len >= NGTCP2_MAX_UDP_PAYLOAD_SIZE)
            send_version_negotiation(s, &vc, from, fromlen);
        else
            s->st.datagrams_dropped++;
        return;
    }
    if (rv != 0) {
        s->st.datagrams_dropped++;
        return;
    }
    c = fa_cid_map_find(&s->cids, vc.dcid, vc.dcidlen);
    if (c) {
        if (c->state == CS_CLOSING) {
            /* answer with our CONNECTION_CLOSE, less and less often */
            c->close_rx++;
            if (c->closebuf && (c->close_rx & (c->close_rx - 1)) == 0)
                send_raw(s, from, fromlen, c->closebuf, c->closelen);
            return;
        }
        if (c->state == CS_DRAINING)
            return;
        rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
        if (rv != 0) {
            conn_close(c, rv);
            return;
        }
        mark_dirty(c);
        return;
    }
    if (vc.version == 0) {
        send_stateless_reset(s, vc.dcid, vc.dcidlen, from, fromlen, len);
        return;
    }
    on_new_initial(s, data, len, from, fromlen, ecn);
}

/* Test and fuzzing entry: processes one datagram as if it had arrived. */
void fa_h3_server_feed(fa_h3_server *s, uint8_t *data, size_t len, const struct sockaddr *from,
                       socklen_t fromlen)
{
    srv_conn *c;
    on_datagram(s, data, len, from, fromlen, 0);
    while ((c = s->dirty_head)) {
        s->dirty_head = c->dirty_next;
        c->dirty = 0;
        conn_write(c);
    }
}

void fa_h3_server_forget_all(fa_h3_server *s)
{
    while (s->conns)
        conn_free(s->conns);
    s->dirty_head = NULL;
}

/* --------------------------------------------------------------- lifecycle */

int fa_h3_load_static_secret(const char *path, int create, uint8_t secret[32], fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rv = fa_file_read_all(path, &data, &len, 4096, err);

    if (rv == FA_ERR_NOTFOUND && create) {
        uint8_t raw[32];
        char hex[FA_HEX_LEN(32)];
        fa_h3_random(raw, sizeof(raw));
        fa_hex_encode(hex, sizeof(hex), raw, sizeof(raw));
        hex[64] = '\n';
        rv = fa_file_write_atomic(path, hex, 65, 0600, err);
        explicit_bzero(hex, sizeof(hex));
        if (rv == 0)
            memcpy(secret, raw, 32);
        explicit_bzero(raw, sizeof(raw));
        return rv;
    }
    if (rv != 0)
        return rv;
    rv = fa_file_check_private(path, err);
    if (rv != 0)
        goto out;
    while (len && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
        len--;
    if (len == 32) {
        memcpy(secret, data, 32);
    } else if (len == 64) {
        for (int i = 0; i < 32; i++) {
            unsigned v;
            char two[3] = {(char)data[2 * i], (char)data[2 * i + 1], 0};
            char *end;
            v = (unsigned)strtoul(two, &end, 16);
            if (*end) {
                rv = fa_errorf(err, FA_ERR_PARSE, "%s: not 64 hex digits", path);
                goto out;
            }
            secret[i] = (uint8_t)v;
        }
    } else {
        rv = fa_errorf(err, FA_ERR_PARSE,
                       "%s: want a 32-byte secret (64 hex digits or 32 raw bytes), got %zu bytes",
                       path, len);
    }
out:
    if (data) {
        explicit_bzero(data, len);
        free(data);
    }
    return rv;
}

static void derive_key(const uint8_t secret[32], const char *label, uint8_t out[32])
{
    uint8_t buf[96];
    size_t l = strlen(label);
    memcpy(buf, label, l);
    memcpy(buf + l, secret, 32);
    gnutls_hash_fast(GNUTLS_DIG_SHA256, buf, l + 32, out);
    explicit_bzero(buf, sizeof(buf));
}

int fa_h3_server_new(fa_h3_server **out, const fa_h3_server_config *cfg, fa_error *err)
{
    fa_h3_server *s;
    struct sockaddr_storage ss;
    socklen_t sl;
    uint8_t secret[32];
    int rv;
    struct epoll_event ev;

    *out = NULL;
    if (!cfg || !cfg->listen)
        return fa_errorf(err, FA_ERR_INVAL, "h3 server: listen address required");
    if (cfg->quic.max_stream_window < 16384 || cfg->quic.max_connection_window < 16384 ||
        cfg->quic.idle_timeout_ms < 100 || cfg->quic.max_streams == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "h3 server: windows must be >= 16384 bytes, idle timeout >= 100 ms, "
                         "max_streams >= 1 (start from fa_h3_server_config_default)");
    rv = fa_udp_parse_addr(cfg->listen, &ss, &sl, NULL, 0, err);
    if (rv != 0)
        return rv;
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->epfd = s->evfd = s->sigfd = -1;
    s->udp.fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    if (cfg->quic.qlog_dir && *cfg->quic.qlog_dir) {
        s->qlog_dir = strdup(cfg->quic.qlog_dir);
        if (!s->qlog_dir) {
            rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        s->cfg.quic.qlog_dir = s->qlog_dir;
    } else {
        s->cfg.quic.qlog_dir = NULL;
    }
    s->cfg.listen = s->cfg.cert_file = s->cfg.key_file = s->cfg.ca_file = NULL;
    if (cfg->has_static_secret)
        memcpy(secret, cfg->static_secret, 32);
    else
        fa_h3_random(secret, 32);
    explicit_bzero(s->cfg.static_secret, sizeof(s->cfg.static_secret));
    derive_key(secret, "fedagg quic stateless reset v1", s->reset_key);
    derive_key(secret, "fedagg quic address token v1", s->token_key);
    explicit_bzero(secret, sizeof(secret));
    rv = fa_tls_ctx_init(&s->tls, 1, cfg->cert_file, cfg->key_file, cfg->ca_file, err);
    if (rv != 0)
        goto fail;
    rv = fa_udp_open(&s->udp, (struct sockaddr *)&ss, sl, cfg->quic.gso, cfg->quic.gro, err);
    if (rv != 0)
        goto fail;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->evfd < 0) {
        rv = fa_errorf(err, FA_ERR_IO, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    ev.events = EPOLLIN;
    ev.data.u32 = 0;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->udp.fd, &ev);
    ev.data.u32 = 1;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev);
    {
        uint64_t seed;
        fa_h3_random((uint8_t *)&seed, sizeof(seed));
        if (fa_cid_map_init(&s->cids, seed) != 0) {
            rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    *out = s;
    return 0;
fail:
    fa_h3_server_del(s);
    return rv;
}

int fa_h3_server_port(const fa_h3_server *s)
{
    if (s->udp.local.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&s->udp.local)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&s->udp.local)->sin_port);
}

int fa_h3_server_route(fa_h3_server *s, const char *method, const char *prefix,
                       const fa_h3_handler *h, void *arg)
{
    struct route *n;
    if (!method || !prefix || prefix[0] != '/' || !h)
        return FA_ERR_INVAL;
    n = realloc(s->routes, (s->nroutes + 1) * sizeof(*n));
    if (!n)
        return FA_ERR_NOMEM;
    s->routes = n;
    n = &s->routes[s->nroutes];
    n->method = strdup(method);
    n->prefix = strdup(prefix);
    if (!n->method || !n->prefix) {
        free(n->method);
        free(n->prefix);
        return FA_ERR_NOMEM;
    }
    n->plen = strlen(prefix);
    n->h = *h;
    n->arg = arg;
    s->nroutes++;
    return 0;
}

void fa_h3_server_del(fa_h3_server *s)
{
    struct task *t;
    if (!s)
        return;
    s->stopping = 1;
    while (s->conns)
        conn_free(s->conns);
    for (size_t i = 0; i < s->timers.len; i++)
        if (((hitem *)s->timers.v[i])->kind == HI_TIMER)
            free(s->timers.v[i]);
    fa_timer_heap_free(&s->timers);
    fa_cid_map_free(&s->cids);
    while ((t = s->tasks)) {
        s->tasks = t->next;
        free(t);
    }
    for (size_t i = 0; i < s->nroutes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].prefix);
    }
    free(s->routes);
    fa_udp_close(&s->udp);
    fa_tls_ctx_free(&s->tls);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->evfd >= 0)
        close(s->evfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    pthread_mutex_destroy(&s->mu);
    explicit_bzero(s->reset_key, sizeof(s->reset_key));
    explicit_bzero(s->token_key, sizeof(s->token_key));
    free(s->qlog_dir);
    free(s);
}

void fa_h3_server_drain(fa_h3_server *s)
{
    atomic_store(&s->drain_req, 1);
    wake(s);
}

void fa_h3_server_stop(fa_h3_server *s)
{
    atomic_store(&s->stop_req, 1);
    wake(s);
}

int fa_h3_server_post(fa_h3_server *s, void (*fn)(fa_h3_server *, void *), void *arg)
{
    struct task *t = malloc(sizeof(*t));
    if (!t)
        return FA_ERR_NOMEM;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tasks_tail)
        s->tasks_tail->next = t;
    else
        s->tasks = t;
    s->tasks_tail = t;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    return 0;
}

static int64_t timer_add(fa_h3_server *s, uint64_t delay_ns, uint64_t period,
                         void (*fn)(fa_h3_server *, void *), void *arg)
{
    app_timer *t = calloc(1, sizeof(*t));
    if (!t)
        return FA_ERR_NOMEM;
    fa_timer_item_init(&t->h.t);
    t->h.kind = HI_TIMER;
    t->id = ++s->next_timer_id;
    t->fn = fn;
    t->arg = arg;
    t->period = period;
    if (fa_timer_heap_set(&s->timers, &t->h.t, fa_h3_now() + delay_ns) != 0) {
        free(t);
        return FA_ERR_NOMEM;
    }
    return t->id;
}

int64_t fa_h3_server_timer(fa_h3_server *s, uint64_t delay_ms, void (*fn)(fa_h3_server *, void *),
                           void *arg)
{
    if (!fn)
        return FA_ERR_INVAL;
    return timer_add(s, delay_ms * NGTCP2_MILLISECONDS, 0, fn, arg);
}

void fa_h3_server_timer_cancel(fa_h3_server *s, int64_t id)
{
    for (size_t i = 0; i < s->timers.len; i++) {
        hitem *h = (hitem *)s->timers.v[i];
        if (h->kind == HI_TIMER && ((app_timer *)h)->id == id) {
            fa_timer_heap_remove(&s->timers, &h->t);
            free(h);
            return;
        }
    }
}

void fa_h3_server_get_stats(const fa_h3_server *s, fa_h3_server_stats *st)
{
    *st = s->st;
    st->largest_datagram_sent = s->udp.largest_sent;
    st->largest_datagram_received = s->udp.largest_recv;
    for (const srv_conn *c = s->conns; c; c = c->next) {
        st->datagram_fallbacks += c->q.dg.fallbacks;
        st->datagram_shrinks += c->q.dg.shrinks;
    }
}

/* ------------------------------------------------------------------ loop */

static void run_tasks(fa_h3_server *s)
{
    struct task *t;
    pthread_mutex_lock(&s->mu);
    t = s->tasks;
    s->tasks = s->tasks_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (t) {
        struct task *n = t->next;
        t->fn(s, t->arg);
        free(t);
        t = n;
    }
}

static void drain_goaway(fa_h3_server *s, void *arg)
{
    (void)arg;
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (c->state == CS_LIVE && c->q.h3 && !c->goaway_sent) {
            nghttp3_conn_shutdown(c->q.h3);
            c->goaway_sent = 1;
            mark_dirty(c);
        }
    }
}

static void start_drain(fa_h3_server *s)
{
    if (s->draining)
        return;
    s->draining = 1;
    s->drain_deadline = fa_h3_now() + (uint64_t)s->cfg.drain_timeout_ms * NGTCP2_MILLISECONDS;
    fa_log(FA_LOG_INFO, "draining", "connections=%zu timeout_ms=%u", s->nlive,
           s->cfg.drain_timeout_ms);
    /* first a shutdown notice, then (one round trip later) the GOAWAY with
     * the last stream we will serve (RFC 9114 5.2) */
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (c->state == CS_LIVE && c->q.h3) {
            nghttp3_conn_submit_shutdown_notice(c->q.h3);
            mark_dirty(c);
        }
    }
    (void)timer_add(s, 100 * NGTCP2_MILLISECONDS, 0, drain_goaway, NULL);
}

/* Returns 1 when the drain is complete. */
static int drain_step(fa_h3_server *s)
{
    srv_conn *c, *n;
    int timed_out = fa_h3_now() >= s->drain_deadline;
    size_t busy = 0;

    for (c = s->conns; c; c = n) {
        n = c->next;
        if (c->state != CS_LIVE)
            continue;
        if (c->nreqs && !timed_out) {
            busy++;
            continue;
        }
        if (c->nreqs) {
            fa_log(FA_LOG_WARN, "drain timeout: aborting requests", "peer=%s requests=%zu",
                   c->q.peer_id, c->nreqs);
            conn_fail_requests(c, FA_ERR_TIMEOUT);
        }
        if (c->established && c->goaway_sent) {
            conn_close_app(c, NGHTTP3_H3_NO_ERROR);
        } else if (!c->established || timed_out) {
            conn_close_app(c, NGHTTP3_H3_NO_ERROR);
        } else {
            busy++; /* waiting for its GOAWAY to go out */
        }
    }
    return busy == 0;
}

static void run_timers(fa_h3_server *s)
{
    uint64_t now = fa_h3_now();
    fa_timer_item *top;
    while ((top = fa_timer_heap_top(&s->timers)) && top->when <= now) {
        hitem *h = (hitem *)top;
        fa_timer_heap_remove(&s->timers, top);
        if (h->kind == HI_TIMER) {
            app_timer *t = (app_timer *)h;
            if (t->period)
                (void)fa_timer_heap_set(&s->timers, top, now + t->period);
            t->fn(s, t->arg);
            if (!t->period)
                free(t);
        } else {
            srv_conn *c = (srv_conn *)((char *)h - offsetof(srv_conn, h));
            if (c->state != CS_LIVE) {
                conn_free(c); /* closing or draining period over */
                continue;
            }
            {
                int rv = fa_qconn_expiry(&c->q, now);
                if (rv != 0) {
                    conn_close(c, rv);
                    continue;
                }
            }
            mark_dirty(c);
        }
        now = fa_h3_now();
    }
}

static void flush_dirty(fa_h3_server *s)
{
    srv_conn *list = s->dirty_head, *c;
    s->dirty_head = NULL;
    while ((c = list)) {
        list = c->dirty_next;
        c->dirty = 0;
        if (s->udp.blocked) {
            mark_dirty(c);
            continue;
        }
        conn_write(c);
    }
}

static void tick_fn(fa_h3_server *s, void *arg)
{
    (void)arg;
    if (s->cfg.on_tick)
        s->cfg.on_tick(s, s->cfg.tick_arg);
}

int fa_h3_server_run(fa_h3_server *s, fa_error *err)
{
    struct epoll_event evs[16];
    sigset_t set, old;
    int rv = 0, sigblocked = 0;

    if (s->cfg.drain_on_signal) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 2};
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, &old);
        sigblocked = 1;
        s->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (s->sigfd < 0) {
            rv = fa_errorf(err, FA_ERR_IO, "signalfd: %s", strerror(errno));
            goto out;
        }
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sigfd, &ev);
    }
    if (s->cfg.tick_ms && s->cfg.on_tick)
        (void)timer_add(s, (uint64_t)s->cfg.tick_ms * NGTCP2_MILLISECONDS,
                        (uint64_t)s->cfg.tick_ms * NGTCP2_MILLISECONDS, tick_fn, NULL);
    fa_log(FA_LOG_INFO, "h3 server listening", "port=%d", fa_h3_server_port(s));
    for (;;) {
        struct timespec ts;
        uint64_t now;
        int n;

        if (atomic_exchange(&s->stop_req, 0)) {
            s->stopping = 1;
            break;
        }
        if (atomic_exchange(&s->drain_req, 0))
            start_drain(s);
        run_timers(s);
        flush_dirty(s);
        if (s->draining && drain_step(s)) {
            flush_dirty(s);
            break;
        }
        if (s->udp.blocked && !s->out_armed) {
            /* a send (ours or a stateless reply) hit a full socket buffer */
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 0};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
            s->out_armed = 1;
        }
        now = fa_h3_now();
        if (s->dirty_head && !s->udp.blocked) {
            ts.tv_sec = 0;
            ts.tv_nsec = 0;
        } else if (fa_timer_heap_top(&s->timers)) {
            uint64_t when = fa_timer_heap_top(&s->timers)->when;
            uint64_t d = when > now ? when - now : 0;
            if (s->draining && d > 50 * NGTCP2_MILLISECONDS)
                d = 50 * NGTCP2_MILLISECONDS;
            ts.tv_sec = (time_t)(d / 1000000000u);
            ts.tv_nsec = (long)(d % 1000000000u);
        } else {
            ts.tv_sec = s->draining ? 0 : 3600;
            ts.tv_nsec = s->draining ? 50000000 : 0;
        }
        n = epoll_pwait2(s->epfd, evs, 16, &ts, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rv = fa_errorf(err, FA_ERR_IO, "epoll_pwait2: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            switch (evs[i].data.u32) {
            case 0:
                if ((evs[i].events & EPOLLOUT) && fa_udp_flush(&s->udp) == 0) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
                    epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
                    s->out_armed = 0;
                }
                if (evs[i].events & EPOLLIN)
                    fa_udp_recv(&s->udp, on_datagram, s, 16);
                break;
            case 1: {
                uint64_t v;
                ssize_t r = read(s->evfd, &v, sizeof(v));
                (void)r;
                run_tasks(s);
                break;
            }
            case 2: {
                struct signalfd_siginfo si;
                while (read(s->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                    fa_log(FA_LOG_INFO, "signal received, draining", "signal=%u", si.ssi_signo);
                    start_drain(s);
                }
                break;
            }
            }
        }
    }
    /* stop: close what remains without waiting */
    s->stopping = 1; /* conn_close frees at once from here on */
    while (s->conns) {
        srv_conn *c = s->conns;
        if (c->state == CS_LIVE && c->established)
            conn_close_app(c, NGHTTP3_H3_NO_ERROR);
        else
            conn_free(c);
    }
    s->stopping = 0;
out:
    if (sigblocked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (s->sigfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->sigfd, NULL);
        close(s->sigfd);
        s->sigfd = -1;
    }
    return rv;
}
