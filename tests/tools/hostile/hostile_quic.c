/* hostile_quic.c - QUIC clients that misbehave on purpose (hostile.h).
 *
 * Built on the transport's connection core (transport/h3_internal.h: the
 * UDP endpoint, TLS sessions, fa_qconn), the way transport/client.c is,
 * but each stops where an attacker would: after proving its address, after
 * the server's first flight, or with request bodies that never end.
 */
#include "hostile.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "transport/h3_internal.h"

/* ------------------------------------------------------------ one client */

enum { HQ_IDLE = 0, HQ_WAIT, HQ_HOLD, HQ_DEAD };

typedef struct hq_conn {
    fa_udp udp;
    fa_qconn q;
    int open;          /* udp and q hold resources */
    int state;         /* HQ_* */
    int retry_pending; /* a Retry was read: send the Initial again */
    int confirmed;
    uint64_t started; /* ns */
} hq_conn;

static int hq_h3_none(fa_qconn *qc)
{
    (void)qc;
    return 0; /* a half-open client never gets to HTTP/3 */
}

static const fa_qconn_ops hq_ops = {.h3_setup = hq_h3_none};

/* The hq_conn around a connection core (its owner may be another). */
static hq_conn *hq_of(void *user_data)
{
    return (hq_conn *)((char *)user_data - offsetof(hq_conn, q));
}

static int hq_recv_retry(ngtcp2_conn *conn, const ngtcp2_pkt_hd *hd, void *user_data)
{
    hq_of(user_data)->retry_pending = 1;
    return ngtcp2_crypto_recv_retry_cb(conn, hd, user_data);
}

static int hq_confirmed(ngtcp2_conn *conn, void *user_data)
{
    (void)conn;
    hq_of(user_data)->confirmed = 1;
    return 0;
}

static void hq_close(hq_conn *c)
{
    if (!c->open)
        return;
    fa_qconn_free(&c->q);
    fa_udp_close(&c->udp);
    memset(&c->q, 0, sizeof(c->q));
    c->open = 0;
    c->state = HQ_IDLE;
}

/* A client connection to server from bind (NULL: any address), with the
 * credentials of tls; nothing sent yet. */
static int hq_start(hq_conn *c, fa_tls_ctx *tls, const fa_h3_quic_opts *opts,
                    const struct sockaddr_storage *server, socklen_t slen, const char *bind,
                    const char *server_name, const fa_qconn_ops *ops, void *owner, fa_error *err)
{
    struct sockaddr_storage local;
    socklen_t llen;
    ngtcp2_callbacks cb;
    ngtcp2_settings set;
    ngtcp2_transport_params params;
    ngtcp2_cid dcid, scid;
    ngtcp2_path path;
    uint64_t now = fa_h3_now();
    int rv;

    memset(c, 0, sizeof(*c));
    c->udp.fd = -1;
    memset(&local, 0, sizeof(local));
    local.ss_family = server->ss_family;
    llen = server->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (bind && *bind) {
        char spec[80];
        snprintf(spec, sizeof(spec), strchr(bind, ':') ? "[%s]:0" : "%s:0", bind);
        rv = fa_udp_parse_addr(spec, &local, &llen, NULL, 0, err);
        if (rv != 0)
            return rv;
    }
    rv = fa_udp_open(&c->udp, (struct sockaddr *)&local, llen, 0, 0, err);
    if (rv != 0)
        return rv;
    c->open = 1;
    c->q.server_name = server_name;
    if (fa_qconn_prepare(&c->q, 0, ops, owner ? owner : c, &c->udp, opts,
                         (const struct sockaddr *)server, slen) != 0) {
        hq_close(c);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    dcid.datalen = 18;
    fa_h3_random(dcid.data, dcid.datalen);
    scid.datalen = 17;
    fa_h3_random(scid.data, scid.datalen);
    fa_qconn_settings(&c->q, &set, &params, opts, now);
    fa_qconn_callbacks(&cb);
    cb.client_initial = ngtcp2_crypto_client_initial_cb;
    cb.recv_retry = hq_recv_retry;
    cb.handshake_confirmed = hq_confirmed;
    fa_qconn_path(&c->q, &path);
    if (ngtcp2_conn_client_new(&c->q.conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &set,
                               &params, NULL, &c->q) != 0) {
        hq_close(c);
        return fa_errorf(err, FA_ERR_NOMEM, "ngtcp2_conn_client_new failed");
    }
    rv = fa_tls_session_new(tls, &c->q, server_name, err);
    if (rv != 0) {
        hq_close(c);
        return rv;
    }
    ngtcp2_conn_set_tls_native_handle(c->q.conn, c->q.tls);
    c->state = HQ_WAIT;
    c->started = now;
    return 0;
}

/* ------------------------------------------------------ half-open flood */

struct fa_hq_flood {
    fa_tls_ctx tls;
    fa_h3_quic_opts opts;
    struct sockaddr_storage server;
    socklen_t slen;
    char **bind;
    size_t nbind, next_bind;
    hq_conn *c;
    unsigned n;
    uint64_t renew_ns;
    fa_hq_flood_stats st;
    struct pollfd *pfd;
};

int fa_hq_flood_new(fa_hq_flood **out, const char *server, const char *ca_file,
                    const char *const *bind, size_t nbind, unsigned count, uint32_t renew_ms,
                    fa_error *err)
{
    fa_hq_flood *f;
    int rv;

    *out = NULL;
    if (!count)
        return fa_errorf(err, FA_ERR_INVAL, "flood: count must be positive");
    f = calloc(1, sizeof(*f));
    if (!f)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fa_h3_quic_default(&f->opts);
    f->n = count;
    f->renew_ns = (uint64_t)renew_ms * NGTCP2_MILLISECONDS;
    f->c = calloc(count, sizeof(*f->c));
    f->pfd = calloc(count, sizeof(*f->pfd));
    f->bind = calloc(nbind ? nbind : 1, sizeof(*f->bind));
    if (!f->c || !f->pfd || !f->bind) {
        rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < nbind; i++)
        if (!(f->bind[i] = strdup(bind[i]))) {
            rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
    f->nbind = nbind;
    rv = fa_udp_parse_addr(server, &f->server, &f->slen, NULL, 0, err);
    if (rv == 0)
        rv = fa_tls_ctx_init(&f->tls, 0, NULL, NULL, ca_file, err);
    if (rv != 0)
        goto fail;
    *out = f;
    return 0;
fail:
    fa_hq_flood_del(f);
    return rv;
}

void fa_hq_flood_del(fa_hq_flood *f)
{
    if (!f)
        return;
    for (unsigned i = 0; f->c && i < f->n; i++)
        hq_close(&f->c[i]);
    for (size_t i = 0; f->bind && i < f->nbind; i++)
        free(f->bind[i]);
    free(f->bind);
    free(f->c);
    free(f->pfd);
    fa_tls_ctx_free(&f->tls);
    free(f);
}

static void flood_start(fa_hq_flood *f, hq_conn *c)
{
    fa_error err;
    const char *b = f->nbind ? f->bind[f->next_bind++ % f->nbind] : NULL;
    hq_close(c);
    if (hq_start(c, &f->tls, &f->opts, &f->server, f->slen, b, "localhost", &hq_ops, NULL, &err) !=
        0)
        return;
    if (fa_qconn_write(&c->q, 1) < 0) {
        hq_close(c);
        return;
    }
    f->st.started++;
}

struct flood_rx {
    fa_hq_flood *f;
    hq_conn *c;
};

static void flood_on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                              socklen_t fromlen, unsigned ecn)
{
    struct flood_rx *rx = arg;
    hq_conn *c = rx->c;
    int rv;

    if (c->state == HQ_DEAD || c->state == HQ_IDLE || len == 0)
        return;
    c->retry_pending = 0;
    rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
    if (rv != 0) {
        if (c->state == HQ_HOLD)
            rx->f->st.holding--;
        c->state = HQ_DEAD;
        rx->f->st.refused++;
        return;
    }
    if (c->retry_pending) {
        /* prove the address: the Initial again, with the token */
        rx->f->st.retries++;
        (void)fa_qconn_write(&c->q, 1);
        return;
    }
    if (c->state == HQ_WAIT) {
        /* the server's first flight: from here on, never a word */
        c->state = HQ_HOLD;
        rx->f->st.answered++;
        rx->f->st.holding++;
    }
}

void fa_hq_flood_run(fa_hq_flood *f, uint32_t ms)
{
    uint64_t end = fa_h3_now() + (uint64_t)ms * NGTCP2_MILLISECONDS;
    for (;;) {
        uint64_t now = fa_h3_now();
        int wait;
        for (unsigned i = 0; i < f->n; i++) {
            hq_conn *c = &f->c[i];
            if (c->state == HQ_IDLE || c->state == HQ_DEAD ||
                (f->renew_ns && now - c->started >= f->renew_ns)) {
                if (c->state == HQ_HOLD)
                    f->st.holding--;
                flood_start(f, c);
            }
            f->pfd[i].fd = c->open ? c->udp.fd : -1;
            f->pfd[i].events = POLLIN;
            f->pfd[i].revents = 0;
        }
        now = fa_h3_now();
        if (now >= end)
            break;
        wait = (int)((end - now) / NGTCP2_MILLISECONDS);
        if (wait > 50)
            wait = 50;
        if (poll(f->pfd, f->n, wait) <= 0)
            continue;
        for (unsigned i = 0; i < f->n; i++) {
            if (f->pfd[i].revents & POLLIN) {
                struct flood_rx rx = {f, &f->c[i]};
                fa_udp_recv(&f->c[i].udp, flood_on_datagram, &rx, 4);
            }
        }
    }
}

void fa_hq_flood_get_stats(const fa_hq_flood *f, fa_hq_flood_stats *st)
{
    *st = f->st;
}

/* ------------------------------------------------- CONNECTION_CLOSE reason */

static void close_on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                              socklen_t fromlen, unsigned ecn)
{
    hq_conn *c = arg;
    c->retry_pending = 0;
    if (len && c->state == HQ_WAIT &&
        fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now()) == 0) {
        if (c->retry_pending)
            (void)fa_qconn_write(&c->q, 1);
        else
            c->state = HQ_HOLD;
    }
}

int fa_hq_close_with_reason(const char *server, const char *ca_file, const uint8_t *reason,
                            size_t len, uint32_t timeout_ms, fa_error *err)
{
    fa_tls_ctx tls;
    fa_h3_quic_opts opts;
    struct sockaddr_storage ss;
    socklen_t sl;
    hq_conn c;
    uint64_t end;
    uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    size_t n;
    int rv;

    fa_h3_quic_default(&opts);
    rv = fa_udp_parse_addr(server, &ss, &sl, NULL, 0, err);
    if (rv != 0)
        return rv;
    rv = fa_tls_ctx_init(&tls, 0, NULL, NULL, ca_file, err);
    if (rv != 0)
        return rv;
    rv = hq_start(&c, &tls, &opts, &ss, sl, NULL, "localhost", &hq_ops, NULL, err);
    if (rv != 0)
        goto out;
    (void)fa_qconn_write(&c.q, 1);
    end = fa_h3_now() + (uint64_t)timeout_ms * NGTCP2_MILLISECONDS;
    while (c.state == HQ_WAIT && fa_h3_now() < end) {
        struct pollfd p = {c.udp.fd, POLLIN, 0};
        if (poll(&p, 1, 20) > 0)
            fa_udp_recv(&c.udp, close_on_datagram, &c, 4);
    }
    if (c.state != HQ_HOLD) {
        rv = fa_errorf(err, FA_ERR_TIMEOUT, "%s: no answer to the Initial", server);
        goto out;
    }
    ngtcp2_connection_close_error_set_transport_error(&c.q.last_error, NGTCP2_NO_ERROR, reason,
                                                      len);
    n = fa_qconn_close_pkt(&c.q, buf, sizeof(buf));
    if (!n) {
        rv = fa_errorf(err, FA_ERR_QUIC, "cannot write a CONNECTION_CLOSE");
        goto out;
    }
    rv = fa_udp_send(&c.udp, (struct sockaddr *)&ss, sl, 0, buf, n, 0);
    if (rv == FA_ERR_AGAIN)
        rv = fa_udp_flush(&c.udp);
    if (rv != 0)
        rv = fa_errorf(err, FA_ERR_IO, "cannot send the CONNECTION_CLOSE");
out:
    hq_close(&c);
    fa_tls_ctx_free(&tls);
    return rv;
}

/* --------------------------------------------- streams that never end */

typedef struct hq_stream {
    int64_t sid;
    uint64_t sent, limit;
    int status, closed;
} hq_stream;

/* Streams one connection may open in its life (nghttp3 holds pointers to
 * them: the array never moves). */
#define HS_MAX_STREAMS 65536

struct fa_hq_streams {
    fa_tls_ctx tls;
    fa_h3_quic_opts opts;
    struct sockaddr_storage server;
    socklen_t slen;
    char authority[300];
    hq_conn c;
    hq_stream *s;
    size_t ns, caps;
    unsigned closed;
    fa_hq_streams_stats st;
};

/* The body: zeros, from one static block (nghttp3 may resend any byte
 * until it is acknowledged, so the bytes must outlive the call). */
static const uint8_t zeros[16384];

static nghttp3_ssize hs_read_data(nghttp3_conn *h3, int64_t sid, nghttp3_vec *vec, size_t veccnt,
                                  uint32_t *pflags, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    hq_stream *st = sud;
    size_t n;
    (void)h3;
    (void)sid;
    (void)pflags;
    if (!st || veccnt == 0 || st->sent >= st->limit)
        return NGHTTP3_ERR_WOULDBLOCK; /* the end never comes */
    n = st->limit - st->sent < sizeof(zeros) ? (size_t)(st->limit - st->sent) : sizeof(zeros);
    vec[0].base = (uint8_t *)zeros;
    vec[0].len = n;
    st->sent += n;
    s->st.body_bytes += n;
    return 1;
}

static int hs_recv_header(nghttp3_conn *h3, int64_t sid, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    hq_stream *st = sud;
    nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
    (void)h3;
    (void)sid;
    (void)name;
    (void)flags;
    if (!st || token != NGHTTP3_QPACK_TOKEN__STATUS || st->status)
        return 0;
    for (size_t i = 0; i < v.len && i < 3; i++)
        st->status = st->status * 10 + (v.base[i] - '0');
    s->st.answered++;
    if (st->status / 100 == 2)
        s->st.status_2xx++;
    else if (st->status == 413)
        s->st.status_413++;
    else if (st->status == 429)
        s->st.status_429++;
    else if (st->status == 503)
        s->st.status_503++;
    else
        s->st.status_other++;
    return 0;
}

static int hs_recv_data(nghttp3_conn *h3, int64_t sid, const uint8_t *data, size_t len, void *ud,
                        void *sud)
{
    fa_hq_streams *s = ud;
    (void)h3;
    (void)data;
    (void)sud;
    fa_qconn_consume(&s->c.q, sid, len);
    return 0;
}

static int hs_deferred_consume(nghttp3_conn *h3, int64_t sid, size_t n, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    (void)h3;
    (void)sud;
    fa_qconn_consume(&s->c.q, sid, n);
    return 0;
}

static int hs_stream_close(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    hq_stream *st = sud;
    (void)h3;
    (void)sid;
    (void)code;
    if (st && !st->closed) {
        st->closed = 1;
        s->closed++;
    }
    return 0;
}

static int hs_stop_sending(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    (void)h3;
    (void)sud;
    s->st.reset++;
    ngtcp2_conn_shutdown_stream_read(s->c.q.conn, sid, code);
    return 0;
}

static int hs_reset_stream(nghttp3_conn *h3, int64_t sid, uint64_t code, void *ud, void *sud)
{
    fa_hq_streams *s = ud;
    (void)h3;
    (void)sud;
    ngtcp2_conn_shutdown_stream_write(s->c.q.conn, sid, code);
    return 0;
}

static int hs_h3_setup(fa_qconn *qc)
{
    fa_hq_streams *s = qc->owner;
    nghttp3_callbacks cb;
    nghttp3_settings set;

    memset(&cb, 0, sizeof(cb));
    cb.recv_header = hs_recv_header;
    cb.recv_data = hs_recv_data;
    cb.deferred_consume = hs_deferred_consume;
    cb.stream_close = hs_stream_close;
    cb.stop_sending = hs_stop_sending;
    cb.reset_stream = hs_reset_stream;
    nghttp3_settings_default(&set);
    if (nghttp3_conn_client_new(&qc->h3, &cb, &set, NULL, s) != 0)
        return -1;
    return fa_qconn_h3_bind(qc);
}

static const fa_qconn_ops hs_ops = {.h3_setup = hs_h3_setup};

static void hs_on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                           socklen_t fromlen, unsigned ecn)
{
    fa_hq_streams *s = arg;
    if (s->st.dead || len == 0)
        return;
    if (fa_qconn_read(&s->c.q, from, fromlen, ecn, data, len, fa_h3_now()) != 0)
        s->st.dead = 1;
}

/* One turn of the connection: write, wait (at most max_ms, or until the
 * next expiry), read, expire. */
static void hs_pump(fa_hq_streams *s, uint32_t max_ms)
{
    struct pollfd p = {s->c.udp.fd, POLLIN, 0};
    uint64_t now, expiry;
    int wait = (int)max_ms, rv;

    if (s->st.dead)
        return;
    rv = fa_qconn_write(&s->c.q, 16);
    if (rv < 0 && rv != FA_ERR_AGAIN) {
        s->st.dead = 1;
        return;
    }
    now = fa_h3_now();
    expiry = ngtcp2_conn_get_expiry(s->c.q.conn);
    if (rv == 1)
        wait = 0;
    else if (expiry <= now)
        wait = 0;
    else if ((expiry - now) / NGTCP2_MILLISECONDS < (uint64_t)wait)
        wait = (int)((expiry - now) / NGTCP2_MILLISECONDS);
    if (poll(&p, 1, wait) > 0)
        fa_udp_recv(&s->c.udp, hs_on_datagram, s, 16);
    now = fa_h3_now();
    if (!s->st.dead && ngtcp2_conn_get_expiry(s->c.q.conn) <= now &&
        fa_qconn_expiry(&s->c.q, now) != 0)
        s->st.dead = 1;
}

int fa_hq_streams_new(fa_hq_streams **out, const char *server, const char *server_name,
                      const char *ca_file, const char *cert_file, const char *key_file,
                      uint32_t timeout_ms, fa_error *err)
{
    fa_hq_streams *s;
    uint64_t end;
    int rv;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    s->c.udp.fd = -1;
    fa_h3_quic_default(&s->opts);
    s->opts.max_streams = 256;
    rv = fa_udp_parse_addr(server, &s->server, &s->slen, NULL, 0, err);
    if (rv == 0)
        rv = fa_tls_ctx_init(&s->tls, 0, cert_file, key_file, ca_file, err);
    if (rv == 0)
        rv = hq_start(&s->c, &s->tls, &s->opts, &s->server, s->slen, NULL, server_name, &hs_ops, s,
                      err);
    if (rv != 0)
        goto fail;
    snprintf(s->authority, sizeof(s->authority), "%s", server);
    end = fa_h3_now() + (uint64_t)timeout_ms * NGTCP2_MILLISECONDS;
    while (!s->c.confirmed && !s->st.dead && fa_h3_now() < end)
        hs_pump(s, 20);
    if (!s->c.confirmed) {
        char why[300];
        fa_qconn_describe_error(&s->c.q, 0, why, sizeof(why));
        rv = fa_errorf(
            err, s->st.dead ? (s->c.q.verify_fail[0] ? FA_ERR_TLS : FA_ERR_QUIC) : FA_ERR_TIMEOUT,
            "%s: no connection: %s", server, s->st.dead ? why : "timeout");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    fa_hq_streams_del(s);
    return rv;
}

unsigned fa_hq_streams_open(fa_hq_streams *s, const char *path, unsigned count, uint64_t bytes_each)
{
    nghttp3_data_reader dr = {hs_read_data};
    char cl[24];
    unsigned opened = 0;

    if (s->st.dead || !s->c.q.h3)
        return 0;
    snprintf(cl, sizeof(cl), "%llu", (unsigned long long)bytes_each + 1);
    for (unsigned i = 0; i < count; i++) {
        hq_stream *st;
        int64_t sid;
        nghttp3_nv nva[] = {
            {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP3_NV_FLAG_NONE},
            {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, NGHTTP3_NV_FLAG_NONE},
            {(uint8_t *)":authority", (uint8_t *)s->authority, 10, strlen(s->authority),
             NGHTTP3_NV_FLAG_NONE},
            {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), NGHTTP3_NV_FLAG_NONE},
            {(uint8_t *)"content-type", (uint8_t *)"application/x-protobuf", 12, 22,
             NGHTTP3_NV_FLAG_NONE},
            {(uint8_t *)"content-length", (uint8_t *)cl, 14, strlen(cl), NGHTTP3_NV_FLAG_NONE},
        };
        if (s->ns == s->caps) {
            /* streams are never moved once opened: nghttp3 holds their
             * pointers, so the array is allocated once, large enough */
            if (s->s)
                break;
            s->caps = HS_MAX_STREAMS;
            s->s = calloc(s->caps, sizeof(*s->s));
            if (!s->s)
                break;
        }
        if (ngtcp2_conn_open_bidi_stream(s->c.q.conn, &sid, NULL) != 0)
            break; /* no stream credit left */
        st = &s->s[s->ns];
        st->sid = sid;
        st->limit = bytes_each;
        if (nghttp3_conn_submit_request(s->c.q.h3, sid, nva, sizeof(nva) / sizeof(nva[0]), &dr,
                                        st) != 0)
            break;
        s->ns++;
        opened++;
        s->st.opened++;
    }
    return opened;
}

void fa_hq_streams_run(fa_hq_streams *s, uint32_t ms)
{
    uint64_t end = fa_h3_now() + (uint64_t)ms * NGTCP2_MILLISECONDS;
    while (!s->st.dead) {
        uint64_t now = fa_h3_now();
        if (now >= end)
            break;
        hs_pump(s, (uint32_t)((end - now) / NGTCP2_MILLISECONDS < 20
                                  ? (end - now) / NGTCP2_MILLISECONDS
                                  : 20));
    }
}

unsigned fa_hq_streams_active(const fa_hq_streams *s)
{
    return (unsigned)s->ns - s->closed;
}

void fa_hq_streams_get_stats(const fa_hq_streams *s, fa_hq_streams_stats *st)
{
    *st = s->st;
}

void fa_hq_streams_del(fa_hq_streams *s)
{
    if (!s)
        return;
    hq_close(&s->c);
    fa_tls_ctx_free(&s->tls);
    free(s->s);
    free(s);
}
