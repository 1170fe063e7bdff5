/* server_request.c - the server's requests: routing by method and path,
 * headers, request bodies and their flow-control credit, responses (whole,
 * borrowed, or pulled as the network takes them), and the nghttp3
 * callbacks that drive them.  See h3.h for a request's life.
 */
#include "transport/server_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"

static char *dupn(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

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
    /* the application has let go of what it buffered */
    fa_h3_request_release(r, r->reserved);
}

/* ------------------------------------------------ the buffer budget */

static ident_budget *ident_of(fa_h3_server *s, const fa_qconn *q)
{
    ident_budget *b;
    for (b = s->idents; b; b = b->next)
        if (b->role == q->peer_role && !strcmp(b->name, q->peer_id))
            return b;
    if (!(b = calloc(1, sizeof(*b))))
        return NULL;
    b->role = q->peer_role;
    snprintf(b->name, sizeof(b->name), "%s", q->peer_id);
    b->next = s->idents;
    s->idents = b;
    return b;
}

static void ident_drop_if_empty(fa_h3_server *s, ident_budget *b)
{
    ident_budget **pp;
    if (b->bytes)
        return;
    for (pp = &s->idents; *pp && *pp != b; pp = &(*pp)->next) {
    }
    if (*pp)
        *pp = b->next;
    free(b);
}

int fa_h3_request_reserve(fa_h3_request *r, uint64_t n)
{
    fa_h3_server *s = r->c->srv;
    uint64_t floor_left = r->reserved < FA_H3_RESERVE_FLOOR ? FA_H3_RESERVE_FLOOR - r->reserved : 0;
    uint64_t shared = n > floor_left ? n - floor_left : 0;
    ident_budget *b = NULL;

    if (n == 0)
        return 0;
    if (s->buffered + n > s->cfg.max_buffered_bytes) {
        s->st.buffer_refused_server++;
        return FA_ERR_AGAIN;
    }
    if (shared) {
        b = r->ident ? r->ident : ident_of(s, &r->c->q);
        if (!b)
            return FA_ERR_AGAIN; /* out of memory: as good as full */
        if (b->bytes + shared > s->cfg.max_buffered_bytes_per_identity) {
            s->st.buffer_refused_identity++;
            ident_drop_if_empty(s, b);
            return FA_ERR_NOSPACE;
        }
        b->bytes += shared;
        r->ident = b;
        r->shared += shared;
    }
    r->reserved += n;
    s->buffered += n;
    s->st.buffered_bytes = s->buffered;
    if (s->buffered > s->st.buffered_peak)
        s->st.buffered_peak = s->buffered;
    return 0;
}

void fa_h3_request_release(fa_h3_request *r, uint64_t n)
{
    fa_h3_server *s = r->c->srv;
    ident_budget *b = r->ident;
    uint64_t shared;

    if (n > r->reserved)
        n = r->reserved;
    if (!n)
        return;
    /* the bytes beyond the floor go first */
    shared = n < r->shared ? n : r->shared;
    r->reserved -= n;
    s->buffered -= n;
    s->st.buffered_bytes = s->buffered;
    if (shared && b) {
        r->shared -= shared;
        b->bytes -= shared;
        if (!r->shared) {
            r->ident = NULL;
            ident_drop_if_empty(s, b);
        }
    }
}

/* on_close if not yet, then r is gone: only when the stream is closed or
 * the connection is going away (ngtcp2 no longer references the body). */
void fa_srv_req_finish(fa_h3_request *r, int err)
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

void fa_h3_request_consume(fa_h3_request *r, size_t n)
{
    if (r->closed)
        return;
    if (n > r->held)
        n = (size_t)r->held;
    r->held -= n;
    if (r->c->state == CS_LIVE) {
        fa_qconn_consume(&r->c->q, r->sid, n);
        fa_srv_mark_dirty(r->c);
    }
}

void fa_h3_request_resume(fa_h3_request *r)
{
    if (r->closed || r->c->state != CS_LIVE || !r->c->q.h3)
        return;
    nghttp3_conn_resume_stream(r->c->q.h3, r->sid);
    fa_srv_mark_dirty(r->c);
}

void fa_h3_request_cancel(fa_h3_request *r)
{
    if (r->closed || r->c->state != CS_LIVE)
        return;
    if (!r->app_err)
        r->app_err = FA_ERR_CANCELLED;
    (void)fa_qconn_defer_reset(&r->c->q, r->sid, FA_H3_REQUEST_CANCELLED);
    fa_srv_mark_dirty(r->c);
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
    if (nghttp3_conn_submit_response(r->c->q.h3, r->sid, nva, k,
                                     has_body && !r->head ? &dr : NULL) != 0)
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
    if (len && !r->head) {
        copy = malloc(len);
        if (!copy)
            return FA_ERR_NOMEM;
        memcpy(copy, body, len);
    }
    fa_bodyq_init_buf(&r->body, copy, copy ? len : 0, copy);
    rv = submit(r, status, headers, nheaders, (int64_t)len, len > 0);
    if (rv)
        return rv;
    r->responded = 1;
    fa_srv_mark_dirty(r->c);
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
    fa_bodyq_init_buf(&r->body, r->head ? NULL : body, r->head ? 0 : (size_t)len, NULL);
    rv = submit(r, status, headers, nheaders, (int64_t)len, len > 0);
    if (rv)
        return rv;
    r->responded = 1;
    r->release = release;
    r->release_arg = arg;
    fa_srv_mark_dirty(r->c);
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
    /* HEAD: nothing is read; done still runs when the request closes */
    if (r->head)
        fa_bodyq_init_buf(&r->body, NULL, 0, NULL);
    else
        fa_bodyq_init_pull(&r->body, read, arg, r->c->srv->cfg.quic.max_stream_window);
    rv = submit(r, status, headers, nheaders, content_length, 1);
    if (rv)
        return rv;
    r->responded = 1;
    r->body_done = done;
    r->body_done_arg = arg;
    fa_srv_mark_dirty(r->c);
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
    int head = strcmp(method, "HEAD") == 0; /* served by the GET route (RFC 9110 9.3.2) */
    for (size_t i = 0; i < s->nroutes; i++) {
        const struct route *rt = &s->routes[i];
        if (strncmp(path, rt->prefix, rt->plen) != 0)
            continue;
        if (strcmp(rt->method, "*") == 0 || strcmp(rt->method, method) == 0 ||
            (head && strcmp(rt->method, "GET") == 0)) {
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
    r->head = r->method && strcmp(r->method, "HEAD") == 0;
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
        fa_srv_req_finish(r, err);
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

int fa_srv_h3_setup(fa_qconn *qc)
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
void fa_srv_stream_reset(fa_qconn *qc, int64_t sid, uint64_t code, void *sud)
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
    fa_srv_mark_dirty((srv_conn *)qc);
}

void fa_srv_fin_sent(fa_qconn *qc, int64_t sid)
{
    srv_conn *c = (srv_conn *)qc;
    for (fa_h3_request *r = c->reqs; r; r = r->next)
        if (r->sid == sid) {
            r->fin_sent = 1;
            return;
        }
}
