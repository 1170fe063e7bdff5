/* client.c - the blocking HTTP/3 client of a region's worker.
 *
 * One connection at a time, one request at a time, no threads: a request
 * pumps the socket (ppoll with ngtcp2's next expiry) until its response is
 * complete.  Between requests nothing runs; a connection that died
 * meanwhile (idle timeout, server restart) is noticed at the next request
 * and replaced.  While a request waits, PINGs every keepalive_ms make a
 * restarted server answer with a stateless reset within about that long
 * (RFC 9000 10.3), so a long-poll on a dead connection ends in seconds, not
 * at the idle timeout.  Connecting retries with exponential back-off and
 * jitter; a request is sent again on a fresh connection, at once, only when
 * it provably never reached the server (the handshake failed, a stateless
 * reset, GOAWAY or H3_REQUEST_REJECTED), or when the caller marked it
 * idempotent.
 */
#include "transport/h3_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "common/fa_log.h"

/* Request attempts after a retryable failure, beyond the first. */
#define MAX_REQUEST_RETRIES 3

typedef struct creq {
    struct creq *next; /* zombies list */
    int orphan;        /* the caller has gone: req and resp are no more */
    const fa_h3_client_req *req;
    fa_h3_response *resp;
    int64_t sid;
    fa_bodyq body;
    size_t cap;   /* allocated bytes of resp->body */
    int closed;   /* the stream is closed */
    int complete; /* the whole response arrived */
    int err;      /* FA_ERR_* decided locally */
    uint64_t close_code;
    int hdrs_in_block; /* headers of the current block (interim ones are dropped) */
} creq;

struct fa_h3_client {
    fa_h3_client_config cfg;
    char *server, *server_name, *ca, *cert, *key, *qlog_dir;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char authority[300];
    fa_tls_ctx tls;
    fa_udp udp;
    int udp_open;
    fa_qconn q;
    int confirmed; /* handshake confirmed: the server accepted our certificate */
    int dead;      /* the connection cannot carry requests any more */
    int dead_err;  /* ngtcp2 error that killed it */
    int stateless_reset;
    int goaway;
    int64_t goaway_id;
    uint8_t token[256];
    size_t tokenlen;
    uint32_t backoff_ms;
    creq *cur;
    /* requests given up (timeout) whose stream is still open: ngtcp2 may
     * still reference their body until it closes */
    creq *zombies;
    fa_h3_client_stats st;
};

void fa_h3_client_config_default(fa_h3_client_config *c)
{
    memset(c, 0, sizeof(*c));
    fa_h3_quic_default(&c->quic);
    c->connect_timeout_ms = 10000;
    c->reconnect_initial_ms = 500;
    c->reconnect_max_ms = 30000;
    c->connect_attempts = 5;
    c->keepalive_ms = 1000;
}

const char *fa_h3_response_header(const fa_h3_response *resp, const char *name)
{
    for (size_t i = 0; i < resp->nheaders; i++)
        if (fa_h3_streq_nocase(resp->headers[i].name, name))
            return resp->headers[i].value;
    return NULL;
}

void fa_h3_response_free(fa_h3_response *resp)
{
    if (!resp)
        return;
    for (size_t i = 0; i < resp->nheaders; i++) {
        free((char *)resp->headers[i].name);
        free((char *)resp->headers[i].value);
    }
    free(resp->headers);
    free(resp->body);
    memset(resp, 0, sizeof(*resp));
}

/* ------------------------------------------------------ HTTP/3 callbacks */

static void creq_cancel(fa_h3_client *c, creq *r, int err)
{
    if (!r->err)
        r->err = err;
    /* we may be inside ngtcp2's write or read: reset at the next write */
    (void)fa_qconn_defer_reset(&c->q, r->sid, FA_H3_REQUEST_CANCELLED);
}

static void creq_free(creq *r)
{
    fa_bodyq_free(&r->body);
    free(r);
}

static int add_header(fa_h3_response *resp, const uint8_t *n, size_t nl, const uint8_t *v,
                      size_t vl)
{
    fa_h3_header *h = realloc(resp->headers, (resp->nheaders + 1) * sizeof(*h));
    char *name, *value;
    if (!h)
        return -1;
    resp->headers = h;
    name = malloc(nl + 1);
    value = malloc(vl + 1);
    if (!name || !value) {
        free(name);
        free(value);
        return -1;
    }
    memcpy(name, n, nl);
    name[nl] = '\0';
    memcpy(value, v, vl);
    value[vl] = '\0';
    h[resp->nheaders].name = name;
    h[resp->nheaders].value = value;
    resp->nheaders++;
    return 0;
}

static int h3_begin_headers(nghttp3_conn *h3, int64_t sid, void *ud, void *sud)
{
    creq *r = sud;
    if (r && !r->orphan && r->resp->status < 200) {
        /* a new header block: forget an interim (1xx) one */
        fa_h3_response *resp = r->resp;
        for (size_t i = 0; i < resp->nheaders; i++) {
            free((char *)resp->headers[i].name);
            free((char *)resp->headers[i].value);
        }
        resp->nheaders = 0;
        resp->status = 0;
    }
    return 0;
}

static int h3_recv_header(nghttp3_conn *h3, int64_t sid, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *ud, void *sud)
{
    creq *r = sud;
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
    if (!r || r->orphan)
        return 0;
    if (token == NGHTTP3_QPACK_TOKEN__STATUS) {
        int st = 0;
        for (size_t i = 0; i < v.len && i < 3; i++)
            st = st * 10 + (v.base[i] - '0');
        r->resp->status = st;
        return 0;
    }
    if (n.len && n.base[0] == ':')
        return 0;
    return add_header(r->resp, n.base, n.len, v.base, v.len) == 0 ? 0
                                                                  : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int h3_recv_data(nghttp3_conn *h3, int64_t sid, const uint8_t *data, size_t len, void *ud,
                        void *sud)
{
    fa_h3_client *c = ud;
    creq *r = sud;
    fa_h3_response *resp;

    if (!r || r->err || r->orphan) {
        fa_qconn_consume(&c->q, sid, len);
        return 0;
    }
    resp = r->resp;
    resp->body_received += len;
    c->st.bytes_received += len;
    if (r->req->on_body) {
        /* synchronous: the window only reopens once this returns, so a slow
         * consumer throttles the server */
        int rv = r->req->on_body(r->req->on_body_arg, data, len);
        fa_qconn_consume(&c->q, sid, len);
        if (rv < 0)
            creq_cancel(c, r, rv < -1 && rv > -100 ? rv : FA_ERR_CANCELLED);
        return 0;
    }
    fa_qconn_consume(&c->q, sid, len);
    {
        uint64_t max = r->req->max_response_bytes ? r->req->max_response_bytes : (64u << 20);
        if (resp->body_len + len > max) {
            creq_cancel(c, r, FA_ERR_TOOBIG);
            return 0;
        }
        if (resp->body_len + len + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 16384;
            uint8_t *nb;
            while (cap < resp->body_len + len + 1)
                cap *= 2;
            nb = realloc(resp->body, cap);
            if (!nb) {
                creq_cancel(c, r, FA_ERR_NOMEM);
                return 0;
            }
            resp->body = nb;
            r->cap = cap;
        }
        memcpy(resp->body + resp->body_len, data, len);
        resp->body_len += len;
        resp->body[resp->body_len] = '\0';
    }
    return 0;
}

static int h3_deferred_consume(nghttp3_conn *h3, int64_t sid, size_t consumed, void *ud, void *sud)
{
    fa_h3_client *c = ud;
    fa_qconn_consume(&c->q, sid, consumed);
    return 0;
}

static int h3_end_stream(nghttp3_conn *h3, int64_t sid, void *ud, void *sud)
{
    creq *r = sud;
    if (r && !r->orphan && r->resp->status >= 200)
        r->complete = 1;
    return 0;
}

static int h3_stream_close(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_h3_client *c = ud;
    creq *r = sud;
    if (r && r->orphan) {
        creq **pp;
        for (pp = &c->zombies; *pp; pp = &(*pp)->next)
            if (*pp == r) {
                *pp = r->next;
                break;
            }
        creq_free(r);
    } else if (r) {
        r->closed = 1;
        r->close_code = code;
    }
    return 0;
}

static int h3_acked_stream_data(nghttp3_conn *h3, int64_t sid, uint64_t datalen, void *ud,
                                void *sud)
{
    creq *r = sud;
    if (r && fa_bodyq_acked(&r->body, datalen))
        nghttp3_conn_resume_stream(h3, sid);
    return 0;
}

static int h3_stop_sending(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_h3_client *c = ud;
    ngtcp2_conn_shutdown_stream_read(c->q.conn, sid, code);
    return 0;
}

static int h3_reset_stream(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_h3_client *c = ud;
    ngtcp2_conn_shutdown_stream_write(c->q.conn, sid, code);
    return 0;
}

static int h3_shutdown(nghttp3_conn *h3, int64_t id, void *ud)
{
    fa_h3_client *c = ud;
    /* GOAWAY: streams >= id will not be processed (RFC 9114 5.2) */
    c->goaway = 1;
    c->goaway_id = id;
    return 0;
}

static nghttp3_ssize req_read_data(nghttp3_conn *h3, int64_t sid, nghttp3_vec *vec, size_t veccnt,
                                   uint32_t *pflags, void *ud, void *sud)
{
    fa_h3_client *c = ud;
    creq *r = sud;
    nghttp3_ssize n;
    if (r->orphan || r->err)
        return NGHTTP3_ERR_WOULDBLOCK;
    n = fa_bodyq_read(&r->body, vec, veccnt, pflags);
    if (n == NGHTTP3_ERR_CALLBACK_FAILURE) {
        int e = r->body.error;
        creq_cancel(c, r, e < -1 && e > -100 ? e : FA_ERR_CANCELLED);
        return NGHTTP3_ERR_WOULDBLOCK;
    }
    if (n > 0)
        for (nghttp3_ssize i = 0; i < n; i++)
            c->st.bytes_sent += vec[i].len;
    return n;
}

/* ------------------------------------------------------- QUIC hooks */

static int qc_h3_setup(fa_qconn *qc)
{
    fa_h3_client *c = qc->owner;
    nghttp3_callbacks cb;
    nghttp3_settings set;

    memset(&cb, 0, sizeof(cb));
    cb.acked_stream_data = h3_acked_stream_data;
    cb.stream_close = h3_stream_close;
    cb.recv_data = h3_recv_data;
    cb.deferred_consume = h3_deferred_consume;
    cb.begin_headers = h3_begin_headers;
    cb.recv_header = h3_recv_header;
    cb.stop_sending = h3_stop_sending;
    cb.end_stream = h3_end_stream;
    cb.reset_stream = h3_reset_stream;
    cb.shutdown = h3_shutdown;
    nghttp3_settings_default(&set);
    set.qpack_max_dtable_capacity = 4096;
    set.qpack_blocked_streams = 16;
    if (nghttp3_conn_client_new(&qc->h3, &cb, &set, NULL, c) != 0)
        return -1;
    return fa_qconn_h3_bind(qc);
}

static void qc_new_token(fa_qconn *qc, const uint8_t *tok, size_t len)
{
    fa_h3_client *c = qc->owner;
    if (len <= sizeof(c->token)) {
        memcpy(c->token, tok, len);
        c->tokenlen = len;
    }
}

static const fa_qconn_ops client_ops = {
    .h3_setup = qc_h3_setup,
    .new_token = qc_new_token,
};

static int cb_handshake_confirmed(ngtcp2_conn *conn, void *user_data)
{
    fa_qconn *qc = user_data;
    fa_h3_client *c = qc->owner;
    c->confirmed = 1;
    return 0;
}

static int cb_recv_stateless_reset(ngtcp2_conn *conn, const ngtcp2_pkt_stateless_reset *sr,
                                   void *user_data)
{
    fa_qconn *qc = user_data;
    fa_h3_client *c = qc->owner;
    c->stateless_reset = 1;
    return 0;
}

static int cb_recv_retry(ngtcp2_conn *conn, const ngtcp2_pkt_hd *hd, void *user_data)
{
    fa_qconn *qc = user_data;
    fa_h3_client *c = qc->owner;
    c->st.retry_seen = 1;
    return ngtcp2_crypto_recv_retry_cb(conn, hd, user_data);
}

/* -------------------------------------------------------------- lifecycle */

static char *sdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

int fa_h3_client_new(fa_h3_client **out, const fa_h3_client_config *cfg, fa_error *err)
{
    fa_h3_client *c;
    char host[256];
    int rv, port = 0;

    *out = NULL;
    if (!cfg || !cfg->server)
        return fa_errorf(err, FA_ERR_INVAL, "h3 client: server address required");
    if (cfg->quic.max_stream_window < 16384 || cfg->quic.max_connection_window < 16384 ||
        cfg->quic.idle_timeout_ms < 100)
        return fa_errorf(err, FA_ERR_INVAL,
                         "h3 client: windows must be >= 16384 bytes and idle timeout >= 100 ms "
                         "(start from fa_h3_client_config_default)");
    c = calloc(1, sizeof(*c));
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    c->cfg = *cfg;
    c->udp.fd = -1;
    rv = fa_udp_parse_addr(cfg->server, &c->addr, &c->addrlen, host, sizeof(host), err);
    if (rv != 0)
        goto fail;
    if (c->addr.ss_family == AF_INET)
        port = ntohs(((struct sockaddr_in *)&c->addr)->sin_port);
    else
        port = ntohs(((struct sockaddr_in6 *)&c->addr)->sin6_port);
    c->server = sdup(cfg->server);
    c->server_name = sdup(cfg->server_name && *cfg->server_name ? cfg->server_name : host);
    c->ca = sdup(cfg->ca_file);
    c->cert = sdup(cfg->cert_file);
    c->key = sdup(cfg->key_file);
    c->qlog_dir = sdup(cfg->quic.qlog_dir);
    if (!c->server || !c->server_name || (cfg->ca_file && !c->ca) || (cfg->cert_file && !c->cert) ||
        (cfg->key_file && !c->key) || (cfg->quic.qlog_dir && !c->qlog_dir)) {
        rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    c->cfg.server = c->server;
    c->cfg.server_name = c->server_name;
    c->cfg.ca_file = c->ca;
    c->cfg.cert_file = c->cert;
    c->cfg.key_file = c->key;
    c->cfg.quic.qlog_dir = c->qlog_dir;
    if (strchr(c->server_name, ':'))
        snprintf(c->authority, sizeof(c->authority), "[%s]:%d", c->server_name, port);
    else
        snprintf(c->authority, sizeof(c->authority), "%s:%d", c->server_name, port);
    if (!c->cfg.reconnect_initial_ms)
        c->cfg.reconnect_initial_ms = 500;
    if (c->cfg.reconnect_max_ms < c->cfg.reconnect_initial_ms)
        c->cfg.reconnect_max_ms = c->cfg.reconnect_initial_ms;
    if (!c->cfg.connect_timeout_ms)
        c->cfg.connect_timeout_ms = 10000;
    {
        const char *ka = getenv("FEDAGG_QUIC_KEEPALIVE_MS");
        char *end;
        unsigned long v;
        if (ka && *ka) {
            errno = 0;
            v = strtoul(ka, &end, 10);
            if (*end || errno || v > UINT32_MAX) {
                rv = fa_errorf(err, FA_ERR_INVAL,
                               "FEDAGG_QUIC_KEEPALIVE_MS=%s: want milliseconds (0 = no PING)", ka);
                goto fail;
            }
            c->cfg.keepalive_ms = (uint32_t)v;
        }
    }
    c->backoff_ms = c->cfg.reconnect_initial_ms;
    rv = fa_tls_ctx_init(&c->tls, 0, c->cert, c->key, c->ca, err);
    if (rv == 0)
        rv = fa_tls_crl_set(&c->tls, cfg->crl_file, err);
    if (rv != 0)
        goto fail;
    *out = c;
    return 0;
fail:
    fa_h3_client_del(c);
    return rv;
}

/* Sends CONNECTION_CLOSE with q.last_error (a TLS alert, a protocol
 * error...) so that the server learns why, unless the connection ended
 * silently (idle timeout) or the server already closed it. */
static void send_close(fa_h3_client *c)
{
    uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    size_t n;
    const ngtcp2_path *p;

    if (!c->q.conn || !c->udp_open || c->dead_err == NGTCP2_ERR_IDLE_CLOSE ||
        c->dead_err == NGTCP2_ERR_HANDSHAKE_TIMEOUT || c->dead_err == NGTCP2_ERR_DRAINING)
        return;
    n = fa_qconn_close_pkt(&c->q, buf, sizeof(buf));
    if (!n)
        return;
    p = ngtcp2_conn_get_path(c->q.conn);
    (void)fa_udp_flush(&c->udp);
    (void)fa_udp_send(&c->udp, p->remote.addr, p->remote.addrlen, 0, buf, n, 0);
}

/* Ends the current connection (politely when it is still up) and frees it. */
static void conn_teardown(fa_h3_client *c)
{
    if (c->q.conn) {
        if (!c->dead && !c->q.last_error.error_code)
            ngtcp2_connection_close_error_set_application_error(&c->q.last_error,
                                                                NGHTTP3_H3_NO_ERROR, NULL, 0);
        send_close(c);
    }
    c->st.datagram_fallbacks += c->q.dg.fallbacks;
    c->st.datagram_shrinks += c->q.dg.shrinks;
    if (c->udp_open) {
        if (c->udp.largest_sent > c->st.largest_datagram_sent)
            c->st.largest_datagram_sent = c->udp.largest_sent;
        if (c->udp.largest_recv > c->st.largest_datagram_received)
            c->st.largest_datagram_received = c->udp.largest_recv;
    }
    fa_qconn_free(&c->q);
    while (c->zombies) {
        creq *r = c->zombies;
        c->zombies = r->next;
        creq_free(r);
    }
    memset(&c->q, 0, sizeof(c->q));
    c->confirmed = 0;
    c->dead = 0;
    c->dead_err = 0;
    c->stateless_reset = 0;
    c->goaway = 0;
    if (c->udp_open) {
        /* a fresh socket (new source port) per connection: a server that
         * reset us will not confuse the new connection with the old one */
        fa_udp_close(&c->udp);
        c->udp_open = 0;
    }
}

void fa_h3_client_close(fa_h3_client *c)
{
    if (c)
        conn_teardown(c);
}

void fa_h3_client_del(fa_h3_client *c)
{
    if (!c)
        return;
    fa_h3_client_close(c);
    fa_tls_ctx_free(&c->tls);
    free(c->server);
    free(c->server_name);
    free(c->ca);
    free(c->cert);
    free(c->key);
    free(c->qlog_dir);
    free(c);
}

void fa_h3_client_get_stats(const fa_h3_client *c, fa_h3_client_stats *st)
{
    *st = c->st;
    st->key_updates = c->st.key_updates + c->q.key_updates;
    st->datagram_fallbacks += c->q.dg.fallbacks;
    st->datagram_shrinks += c->q.dg.shrinks;
    st->udp_payload = (uint32_t)fa_qconn_udp_payload((fa_qconn *)&c->q);
    st->route_mtu = c->q.dg.route_mtu;
    if (c->udp_open) {
        st->datagrams_sent = c->udp.dgrams_sent;
        st->datagrams_received = c->udp.dgrams_recv;
        st->send_calls = c->udp.send_calls;
        st->recv_calls = c->udp.recv_calls;
        if (c->udp.largest_sent > st->largest_datagram_sent)
            st->largest_datagram_sent = c->udp.largest_sent;
        if (c->udp.largest_recv > st->largest_datagram_received)
            st->largest_datagram_received = c->udp.largest_recv;
    }
}

/* --------------------------------------------------------------- the pump */

static int same_addr(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}

static void on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                        socklen_t fromlen, unsigned ecn)
{
    fa_h3_client *c = arg;
    int rv;
    if (c->dead || len == 0 || !same_addr(from, &c->addr))
        return; /* only the server speaks to us; libngtcp2 asserts on empty packets */
    rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
    if (rv != 0) {
        c->dead = 1;
        c->dead_err = rv;
    }
}

/* One turn: send what is due, wait for input or the next expiry (at most
 * until deadline), read, handle timers.  Returns 0, or FA_ERR_TIMEOUT when
 * deadline had passed (after reading what was already queued). */
static int pump(fa_h3_client *c, uint64_t deadline)
{
    struct pollfd pfd;
    struct timespec ts;
    uint64_t now, expiry, until;
    int rv, more = 0, late;

    if (c->dead)
        return 0;
    rv = fa_qconn_write(&c->q, 16);
    if (rv < 0 && rv != FA_ERR_AGAIN) {
        c->dead = 1;
        c->dead_err = rv;
        return 0;
    }
    more = rv == 1;
    now = fa_h3_now();
    late = now >= deadline;
    expiry = ngtcp2_conn_get_expiry(c->q.conn);
    until = expiry < deadline ? expiry : deadline;
    if (more || late || until <= now) {
        ts.tv_sec = 0;
        ts.tv_nsec = 0;
    } else {
        uint64_t d = until - now;
        ts.tv_sec = (time_t)(d / 1000000000u);
        ts.tv_nsec = (long)(d % 1000000000u);
    }
    pfd.fd = c->udp.fd;
    pfd.events = POLLIN | (c->udp.blocked ? POLLOUT : 0);
    pfd.revents = 0;
    rv = ppoll(&pfd, 1, &ts, NULL);
    if (rv > 0) {
        if (pfd.revents & POLLOUT)
            (void)fa_udp_flush(&c->udp);
        if (pfd.revents & POLLIN)
            fa_udp_recv(&c->udp, on_datagram, c, 16);
    }
    if (c->dead)
        return 0;
    now = fa_h3_now();
    if (ngtcp2_conn_get_expiry(c->q.conn) <= now) {
        rv = fa_qconn_expiry(&c->q, now);
        if (rv != 0) {
            c->dead = 1;
            c->dead_err = rv;
        }
    }
    return late ? FA_ERR_TIMEOUT : 0;
}

/* ------------------------------------------------------------- connecting */

/* Why the handshake failed, and whether trying again can help. */
static int handshake_error(fa_h3_client *c, int timed_out, fa_error *err)
{
    char why[300];
    ngtcp2_connection_close_error peer;

    if (timed_out)
        return fa_errorf(err, FA_ERR_TIMEOUT, "%s: no QUIC handshake within %u ms", c->server,
                         c->cfg.connect_timeout_ms);
    fa_qconn_describe_error(&c->q, c->dead_err, why, sizeof(why));
    if (c->q.verify_fail[0])
        return fa_errorf(err, FA_ERR_TLS, "%s: %s", c->server, why);
    ngtcp2_conn_get_connection_close_error(c->q.conn, &peer);
    if (peer.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT &&
        peer.error_code >= 0x100 && peer.error_code < 0x200)
        return fa_errorf(err, FA_ERR_TLS,
                         "%s: %s (check that the client certificate is issued by the "
                         "federation CA, current, and names this region)",
                         c->server, why);
    if (c->dead_err == NGTCP2_ERR_CRYPTO)
        return fa_errorf(err, FA_ERR_TLS, "%s: %s", c->server, why);
    return fa_errorf(err, FA_ERR_QUIC, "%s: %s", c->server, why);
}

static int connect_once(fa_h3_client *c, uint64_t deadline, fa_error *err)
{
    ngtcp2_callbacks cb;
    ngtcp2_settings set;
    ngtcp2_transport_params params;
    ngtcp2_cid dcid, scid;
    ngtcp2_path path;
    struct sockaddr_storage any;
    uint64_t now = fa_h3_now(), limit;
    int rv;

    conn_teardown(c);
    c->st.retry_seen = 0;
    {
        /* a CRL that changed since the last connection is read now; a bad
         * new version leaves the previous one in force */
        fa_error e;
        if (fa_tls_crl_poll(&c->tls, 0, &e) < 0)
            fa_log(FA_LOG_WARN, "CRL not reloaded; the previous one stays in force", "error=\"%s\"",
                   e.msg);
    }
    memset(&any, 0, sizeof(any));
    any.ss_family = c->addr.ss_family;
    rv = fa_udp_open(&c->udp, (struct sockaddr *)&any,
                     any.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                               : sizeof(struct sockaddr_in),
                     c->cfg.quic.gso, c->cfg.quic.gro, err);
    if (rv != 0)
        return rv;
    c->udp_open = 1;
    c->q.server_name = c->server_name;
    if (fa_qconn_prepare(&c->q, 0, &client_ops, c, &c->udp, &c->cfg.quic,
                         (const struct sockaddr *)&c->addr, c->addrlen) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    dcid.datalen = 18;
    fa_h3_random(dcid.data, dcid.datalen);
    scid.datalen = 17;
    fa_h3_random(scid.data, scid.datalen);
    fa_qconn_settings(&c->q, &set, &params, &c->cfg.quic, now);
    set.handshake_timeout = (uint64_t)c->cfg.connect_timeout_ms * NGTCP2_MILLISECONDS;
    if (c->tokenlen) {
        set.token.base = c->token;
        set.token.len = c->tokenlen;
    }
    fa_qconn_qlog_open(&c->q, &set, &scid, &dcid);
    fa_qconn_callbacks(&cb);
    cb.client_initial = ngtcp2_crypto_client_initial_cb;
    cb.recv_retry = cb_recv_retry;
    cb.handshake_confirmed = cb_handshake_confirmed;
    cb.recv_stateless_reset = cb_recv_stateless_reset;
    fa_qconn_path(&c->q, &path);
    if (ngtcp2_conn_client_new(&c->q.conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &set,
                               &params, NULL, &c->q) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "ngtcp2_conn_client_new failed");
    rv = fa_tls_session_new(&c->tls, &c->q, c->server_name, err);
    if (rv != 0)
        return rv;
    ngtcp2_conn_set_tls_native_handle(c->q.conn, c->q.tls);
    c->tokenlen = 0; /* a token is good for one connection attempt */
    limit = now + (uint64_t)c->cfg.connect_timeout_ms * NGTCP2_MILLISECONDS;
    if (limit > deadline)
        limit = deadline;
    while (!c->confirmed && !c->dead) {
        if (pump(c, limit) == FA_ERR_TIMEOUT && !c->confirmed && !c->dead)
            return handshake_error(c, 1, err);
    }
    if (c->dead)
        return handshake_error(c, 0, err);
    c->st.connects++;
    fa_log(FA_LOG_DEBUG, "connected", "server=%s peer=%s route_mtu=%u udp_payload=%zu", c->server,
           c->q.peer_id, c->q.dg.route_mtu, fa_qconn_udp_payload(&c->q));
    return 0;
}

/* Is the current connection usable?  Reads what arrived while we were away. */
static int conn_alive(fa_h3_client *c)
{
    if (!c->q.conn || !c->confirmed || c->dead || c->goaway)
        return 0;
    (void)pump(c, fa_h3_now()); /* zero wait */
    return !c->dead && !c->goaway && !ngtcp2_conn_is_in_closing_period(c->q.conn) &&
           !ngtcp2_conn_is_in_draining_period(c->q.conn);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Why the current connection can carry no more requests, for a person. */
static void lost_reason(fa_h3_client *c, char *why, size_t n)
{
    if (c->stateless_reset)
        snprintf(why, n, "stateless reset (the server restarted or forgot us)");
    else if (c->goaway)
        snprintf(why, n, "the server is going away (GOAWAY)");
    else if (c->dead_err == NGTCP2_ERR_IDLE_CLOSE)
        snprintf(why, n, "idle timeout: nothing from the server for %u ms",
                 c->cfg.quic.idle_timeout_ms);
    else
        fa_qconn_describe_error(&c->q, c->dead_err, why, n);
}

static int ensure_connected(fa_h3_client *c, uint64_t deadline, fa_error *err)
{
    uint32_t attempt = 0;
    int rv;

    if (conn_alive(c))
        return 0;
    if (c->q.conn && c->confirmed) {
        char why[300];
        lost_reason(c, why, sizeof(why));
        fa_log(FA_LOG_INFO, "connection lost while idle, reconnecting", "server=%s reason=\"%s\"",
               c->server, why);
    }
    for (;;) {
        attempt++;
        rv = connect_once(c, deadline, err);
        if (rv == 0) {
            c->backoff_ms = c->cfg.reconnect_initial_ms;
            return 0;
        }
        c->st.connect_failures++;
        conn_teardown(c);
        if (rv == FA_ERR_TLS || rv == FA_ERR_INVAL || rv == FA_ERR_NOMEM)
            return rv; /* certificates do not fix themselves */
        if (c->cfg.connect_attempts && attempt >= c->cfg.connect_attempts)
            return rv;
        {
            /* exponential back-off with +-50 % jitter, so regions that lost
             * the aggregator together do not return in lockstep */
            uint32_t rnd;
            uint64_t d, now = fa_h3_now();
            fa_h3_random((uint8_t *)&rnd, sizeof(rnd));
            d = (uint64_t)c->backoff_ms * NGTCP2_MILLISECONDS / 2 +
                (uint64_t)(rnd % (c->backoff_ms + 1u)) * NGTCP2_MILLISECONDS;
            if (now + d >= deadline)
                return rv == FA_ERR_TIMEOUT
                           ? rv
                           : fa_error_prefix(err, FA_ERR_TIMEOUT, "gave up before the deadline");
            fa_log(FA_LOG_WARN, "connect failed, retrying",
                   "server=%s attempt=%u backoff_ms=%llu "
                   "error=\"%s\"",
                   c->server, attempt, (unsigned long long)(d / 1000000u),
                   err ? err->msg : fa_strerror(rv));
            sleep_ns(d);
            c->backoff_ms = c->backoff_ms * 2 > c->cfg.reconnect_max_ms ? c->cfg.reconnect_max_ms
                                                                        : c->backoff_ms * 2;
        }
    }
}

int fa_h3_client_connect(fa_h3_client *c, uint32_t timeout_ms, fa_error *err)
{
    uint64_t deadline =
        timeout_ms ? fa_h3_now() + (uint64_t)timeout_ms * NGTCP2_MILLISECONDS : UINT64_MAX;
    return ensure_connected(c, deadline, err);
}

/* --------------------------------------------------------------- requests */

enum { SENT_OK = 0, SENT_RETRY = 1 };

/* One attempt on the current connection.  Returns 0, SENT_RETRY (safe to
 * send again), or a negative code. */
static int finish_request(fa_h3_client *c, const fa_h3_client_req *req, const creq *rp,
                          int timed_out, fa_error *err);

static int request_once(fa_h3_client *c, const fa_h3_client_req *req, fa_h3_response *resp,
                        uint64_t deadline, fa_error *err)
{
    creq *rp;
    nghttp3_nv nva[64 + 5];
    char lname[64][64];
    nghttp3_data_reader dr = {req_read_data};
    char cl[24];
    size_t n = 0;
    int has_body, rv, timed_out = 0;
    uint64_t keepalive = (uint64_t)c->cfg.quic.idle_timeout_ms * NGTCP2_MILLISECONDS / 3;

    if (c->cfg.keepalive_ms && (uint64_t)c->cfg.keepalive_ms * NGTCP2_MILLISECONDS < keepalive)
        keepalive = (uint64_t)c->cfg.keepalive_ms * NGTCP2_MILLISECONDS;
    if (!c->cfg.keepalive_ms)
        keepalive = 0;
    if (req->nheaders > 64)
        return fa_errorf(err, FA_ERR_INVAL, "at most 64 request headers");
    rp = calloc(1, sizeof(*rp));
    if (!rp)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    rp->req = req;
    rp->resp = resp;
    rv = ngtcp2_conn_open_bidi_stream(c->q.conn, &rp->sid, NULL);
    if (rv != 0) {
        /* no stream credit left on this connection: a new one has it */
        c->goaway = 1;
        free(rp);
        return SENT_RETRY;
    }
#define NV(nm, val)                                                                                \
    nva[n++] = (nghttp3_nv){(uint8_t *)(nm), (uint8_t *)(val), strlen(nm), strlen(val),            \
                            NGHTTP3_NV_FLAG_NONE}
    NV(":method", req->method);
    NV(":scheme", "https");
    NV(":authority", c->authority);
    NV(":path", req->path);
    has_body = req->body_read || req->body_len;
    if (req->body_read) {
        fa_bodyq_init_pull(&rp->body, req->body_read, req->body_arg, c->cfg.quic.max_stream_window);
        if (req->body_length >= 0) {
            snprintf(cl, sizeof(cl), "%lld", (long long)req->body_length);
            NV("content-length", cl);
        }
    } else {
        /* a copy, so that a request given up on (timeout) never leaves
         * ngtcp2 pointing into the caller's buffer; huge buffers are
         * borrowed and their connection is dropped on timeout instead */
        uint8_t *copy = NULL;
        if (req->body_len && req->body_len <= (64u << 20)) {
            copy = malloc(req->body_len);
            if (!copy) {
                free(rp);
                return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            }
            memcpy(copy, req->body, req->body_len);
        }
        fa_bodyq_init_buf(&rp->body, copy ? copy : req->body, req->body_len, copy);
        if (req->body_len || strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
            snprintf(cl, sizeof(cl), "%zu", req->body_len);
            NV("content-length", cl);
        }
    }
    for (size_t i = 0; i < req->nheaders; i++) {
        size_t l = strlen(req->headers[i].name);
        if (l == 0 || l >= sizeof(lname[i]) || !req->headers[i].value) {
            creq_free(rp);
            return fa_errorf(err, FA_ERR_INVAL, "request header %zu: empty or over 63 bytes", i);
        }
        for (size_t j = 0; j <= l; j++) {
            char ch = req->headers[i].name[j];
            lname[i][j] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
        NV(lname[i], req->headers[i].value);
    }
#undef NV
    rv = nghttp3_conn_submit_request(c->q.h3, rp->sid, nva, n, has_body ? &dr : NULL, rp);
    if (rv != 0) {
        creq_free(rp);
        return fa_errorf(err, FA_ERR_HTTP, "cannot submit request: %s", nghttp3_strerror(rv));
    }
    c->cur = rp;
    if (!req->body_read)
        c->st.bytes_sent += req->body_len;
    /* a long-poll is silent for minutes: PING, so that no idle timer fires
     * and a restarted server's stateless reset comes back within about
     * keepalive (ngtcp2 sends one when nothing was sent or received for
     * that long) */
    ngtcp2_conn_set_keep_alive_timeout(c->q.conn, keepalive);
    while (!rp->closed && !c->dead) {
        if (pump(c, deadline) == FA_ERR_TIMEOUT && !rp->closed && !c->dead) {
            timed_out = 1;
            break;
        }
    }
    if (timed_out && !c->dead && !rp->closed) {
        /* tell the server (RESET_STREAM + STOP_SENDING) so it can drop the
         * request now; linger about one round trip for that to go out */
        ngtcp2_conn_stat cst;
        uint64_t extra;
        creq_cancel(c, rp, FA_ERR_TIMEOUT);
        ngtcp2_conn_get_conn_stat(c->q.conn, &cst);
        extra = 2 * cst.smoothed_rtt;
        if (extra < 5 * NGTCP2_MILLISECONDS)
            extra = 5 * NGTCP2_MILLISECONDS;
        if (extra > 200 * NGTCP2_MILLISECONDS)
            extra = 200 * NGTCP2_MILLISECONDS;
        extra += fa_h3_now();
        while (!rp->closed && !c->dead && pump(c, extra) == 0) {
        }
        /* and acknowledge the server's RESET_STREAM (ACKs wait up to
         * max_ack_delay, 25 ms): the server frees the request on that ACK */
        extra = fa_h3_now() + 30 * NGTCP2_MILLISECONDS;
        while (!c->dead && pump(c, extra) == 0) {
        }
    }
    /* no PINGs between requests: an idle client lets its connection go.
     * 0 disables ngtcp2's keep-alive; UINT64_MAX would overflow its
     * expiry (last packet time + timeout) into the past. */
    if (c->q.conn && !c->dead)
        ngtcp2_conn_set_keep_alive_timeout(c->q.conn, 0);
    c->cur = NULL;
    c->st.key_updates += c->q.key_updates;
    c->q.key_updates = 0;
    {
        creq tmp = *rp;
        if (!rp->closed && !c->dead && c->q.conn) {
            /* the stream outlives this call: keep its body for ngtcp2 */
            rp->orphan = 1;
            rp->req = NULL;
            rp->resp = NULL;
            if (rp->body.buf && !rp->body.owned && rp->body.buf_len)
                c->goaway = 1; /* borrowed buffer: this connection must go */
            rp->next = c->zombies;
            c->zombies = rp;
        } else {
            creq_free(rp);
        }
        return finish_request(c, req, &tmp, timed_out, err);
    }
}

static int finish_request(fa_h3_client *c, const fa_h3_client_req *req, const creq *rp,
                          int timed_out, fa_error *err)
{

    if (timed_out)
        return fa_errorf(err, FA_ERR_TIMEOUT, "%s %s: no complete response within %u ms",
                         req->method, req->path, req->timeout_ms);
    if (rp->err)
        return fa_errorf(err, rp->err, "%s %s: %s", req->method, req->path,
                         rp->err == FA_ERR_TOOBIG ? "response body larger than the limit"
                                                  : "cancelled by the application");
    if (rp->complete)
        return 0;
    /* no complete response: decide whether sending again is safe */
    {
        /* a response under way says the server processed the request, and
         * response bytes already pushed to on_body cannot be taken back:
         * sending again would hand the caller the start of the body twice
         * (the caller retries, knowing where its sink stands) */
        int answered = rp->resp && (rp->resp->status != 0 || rp->resp->body_received != 0);
        int never_processed =
            !answered && (c->stateless_reset || (c->goaway && rp->sid >= c->goaway_id) ||
                          (rp->closed && rp->close_code == NGHTTP3_H3_REQUEST_REJECTED));
        int replayable = (!req->body_read || rp->body.produced == 0) &&
                         !(req->on_body && rp->resp && rp->resp->body_received != 0);
        char why[300];
        if (replayable && (never_processed || (req->idempotent && (c->dead || rp->closed))))
            return SENT_RETRY;
        if (c->dead) {
            lost_reason(c, why, sizeof(why));
            return fa_errorf(err, FA_ERR_QUIC, "%s %s: connection lost mid-%s: %s", req->method,
                             req->path, answered ? "response" : "request", why);
        }
        return fa_errorf(err, FA_ERR_HTTP, "%s %s: stream closed by the server (H3 error 0x%llx)",
                         req->method, req->path, (unsigned long long)rp->close_code);
    }
}

int fa_h3_client_request(fa_h3_client *c, const fa_h3_client_req *req, fa_h3_response *resp,
                         fa_error *err)
{
    uint64_t deadline = req->timeout_ms
                            ? fa_h3_now() + (uint64_t)req->timeout_ms * NGTCP2_MILLISECONDS
                            : UINT64_MAX;
    int rv;

    memset(resp, 0, sizeof(*resp));
    if (!req->method || !req->path || req->path[0] != '/')
        return fa_errorf(err, FA_ERR_INVAL, "request needs a method and a path starting with /");
    for (int attempt = 0;; attempt++) {
        rv = ensure_connected(c, deadline, err);
        if (rv != 0)
            return rv;
        rv = request_once(c, req, resp, deadline, err);
        if (rv != SENT_RETRY)
            break;
        fa_h3_response_free(resp);
        if (attempt >= MAX_REQUEST_RETRIES)
            return fa_errorf(err, FA_ERR_QUIC, "%s %s: connection failed %d times", req->method,
                             req->path, attempt + 1);
        {
            char why[300];
            if (c->stateless_reset || c->goaway || c->dead)
                lost_reason(c, why, sizeof(why));
            else
                snprintf(why, sizeof(why), "the server rejected it unprocessed");
            fa_log(FA_LOG_INFO, "request not processed by the server, sending again",
                   "method=%s path=%s attempt=%d reason=\"%s\"", req->method, req->path,
                   attempt + 2, why);
        }
        fa_h3_client_close(c);
    }
    if (c->dead)
        conn_teardown(c); /* the next request starts a fresh connection */
    else if (c->goaway)
        fa_h3_client_close(c); /* the server is going away: say goodbye */
    if (rv != 0)
        fa_h3_response_free(resp);
    return rv;
}
