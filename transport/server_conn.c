/* server_conn.c - the server's connections: creation from a client's
 * first Initial, the CIDs that route to them, their ngtcp2 timers in the
 * loop's heap, the write pass, and their end: the closing and draining
 * periods of RFC 9000 10.2 and the freeing.
 */
#include "transport/server_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "common/fa_log.h"

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

int fa_srv_conn_busy(const srv_conn *c)
{
    for (const fa_h3_request *r = c->reqs; r; r = r->next)
        if (!r->fin_sent && !r->closed)
            return 1;
    return 0;
}

/* The connections of the identity of c other than c (established, or
 * whose certificate has been verified); *idle receives the oldest of them
 * without a request in flight, NULL when all are busy. */
static size_t identity_connections(srv_conn *c, srv_conn **idle)
{
    size_t n = 0;
    *idle = NULL;
    for (srv_conn *o = c->srv->conns; o; o = o->next) {
        if (o == c || o->state != CS_LIVE || !o->q.verified || o->q.peer_role != c->q.peer_role ||
            strcmp(o->q.peer_id, c->q.peer_id) != 0)
            continue;
        n++;
        /* the list is newest first: the last idle one seen is the oldest */
        if (o->established && !fa_srv_conn_busy(o))
            *idle = o;
    }
    return n;
}

static int qc_handshake_done(fa_qconn *qc)
{
    srv_conn *c = (srv_conn *)qc;
    fa_h3_server *s = c->srv;
    uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    const ngtcp2_path *path = ngtcp2_conn_get_path(qc->conn);
    const char *role = qc->peer_role == FA_H3_ROLE_OPERATOR ? "operator" : "region";
    srv_conn *idle;
    ngtcp2_ssize n;

    if (!qc->verified) /* cannot happen with GNUTLS_CERT_REQUIRE; belt and braces */
        return -1;
    fa_srv_slot_handshake_done(s, c);
    /* one identity holds at most max_connections_per_identity times its
     * share: its oldest idle connection gives way (a region that restarted
     * left it behind), else the new one is refused, as a full server
     * refuses, so that the client tries again later */
    if (identity_connections(c, &idle) >= (size_t)s->cfg.max_connections_per_identity * c->share) {
        if (!idle) {
            s->st.refused_identity++;
            qc->refusal = FA_REFUSED_IDENTITY;
            snprintf(qc->verify_fail, sizeof(qc->verify_fail),
                     "%s %s holds max_connections_per_identity (%u) x %u connections, all busy",
                     role, qc->peer_id, s->cfg.max_connections_per_identity, c->share);
            ngtcp2_connection_close_error_set_transport_error(
                &qc->last_error, NGTCP2_CONNECTION_REFUSED, (const uint8_t *)"too many connections",
                strlen("too many connections"));
            return -1;
        }
        s->st.evicted_identity++;
        fa_log(FA_LOG_INFO, "oldest idle connection closed for a new one of its identity",
               "peer=%s role=%s addr=%s old_addr=%s", qc->peer_id, role, c->addr, idle->addr);
        fa_srv_conn_close_app(idle, NGHTTP3_H3_NO_ERROR);
    }
    c->established = 1;
    s->st.connections_accepted++;
    fa_log(FA_LOG_INFO, "connection established",
           "peer=%s role=%s addr=%s route_mtu=%u udp_payload=%zu", qc->peer_id, role, c->addr,
           qc->dg.route_mtu, fa_qconn_udp_payload(qc));
    /* a token for the next connection from this address skips Retry (8.1.3) */
    n = ngtcp2_crypto_generate_regular_token(token, s->token_key, 32, path->remote.addr,
                                             path->remote.addrlen, fa_srv_realtime_ns());
    if (n > 0)
        (void)ngtcp2_conn_submit_new_token(qc->conn, token, (size_t)n);
    return 0;
}

/* During the handshake, once the client's certificate has verified: the
 * application's admit decides (membership). */
static int qc_peer_admit(fa_qconn *qc, char *why, size_t cap)
{
    srv_conn *c = (srv_conn *)qc;
    const fa_h3_server_config *cfg = &c->srv->cfg;
    int share = cfg->admit ? cfg->admit(cfg->admit_arg, qc->peer_role, qc->peer_id, why, cap) : 1;
    if (share <= 0)
        return 0;
    c->share = (uint32_t)share;
    return 1;
}

static const fa_qconn_ops server_ops = {
    .cid_add = qc_cid_add,
    .cid_remove = qc_cid_remove,
    .h3_setup = fa_srv_h3_setup,
    .handshake_done = qc_handshake_done,
    .stream_reset = fa_srv_stream_reset,
    .fin_sent = fa_srv_fin_sent,
    .peer_admit = qc_peer_admit,
};

void fa_srv_mark_dirty(srv_conn *c)
{
    if (c->dirty || c->state != CS_LIVE)
        return;
    c->dirty = 1;
    c->dirty_next = c->srv->dirty_head;
    c->srv->dirty_head = c;
}

void fa_srv_conn_schedule(srv_conn *c)
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

srv_conn *fa_srv_conn_new(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *ocid,
                          const struct sockaddr *from, socklen_t fromlen, addr_slot *slot)
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
    c->share = 1;
    c->last_rx = now;
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
    set.handshake_timeout = (uint64_t)s->cfg.handshake_timeout_ms * NGTCP2_MILLISECONDS;
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
    fa_srv_slot_enter(s, c, slot);
    return c;
fail:
    fa_qconn_free(&c->q);
    free(c);
    return NULL;
}

/* Every open request ends; the connection's CIDs keep routing to it until
 * conn_free so late packets find the closing state, not a stateless reset. */
void fa_srv_conn_fail_requests(srv_conn *c, int err)
{
    while (c->reqs)
        fa_srv_req_finish(c->reqs, err);
}

/* The peer closed politely (H3_NO_ERROR): requests whose whole response
 * went out were delivered (a client closes after reading its response,
 * before acknowledging the last packet); the others were abandoned. */
static void conn_finish_requests_graceful(srv_conn *c)
{
    while (c->reqs) {
        fa_h3_request *r = c->reqs;
        fa_srv_req_finish(r, r->fin_sent && !r->app_err && !r->refused_body
                                 ? 0
                                 : (r->app_err ? r->app_err : FA_ERR_QUIC));
    }
}

static void conn_unlink(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    if (c->state == CS_LIVE) {
        s->nlive--;
        s->st.current_connections = s->nlive;
        fa_srv_slot_leave(s, c);
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

void fa_srv_conn_free(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    ngtcp2_cid cids[16];
    size_t n;

    fa_srv_conn_fail_requests(c, FA_ERR_QUIC);
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
void fa_srv_conn_close(srv_conn *c, int liberr)
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
    case NGTCP2_ERR_HANDSHAKE_TIMEOUT:
        /* a half-open connection, maybe one of a flood: no word to it, a
         * line only when debugging */
        s->st.handshakes_timed_out++;
        fa_log(FA_LOG_DEBUG, "handshake timed out", "addr=%s timeout_ms=%u", c->addr,
               s->cfg.handshake_timeout_ms);
        break;
    case NGTCP2_ERR_DRAINING:
        fa_qconn_describe_error(&c->q, liberr, why, sizeof(why));
        if (!c->established) {
            s->st.handshakes_failed++;
            if (fa_srv_refusal_log_ok(s))
                fa_log(FA_LOG_WARN, "handshake refused by the client", "addr=%s reason=\"%s\"",
                       c->addr, why);
        } else {
            fa_log(FA_LOG_DEBUG, "connection closed by the peer", "peer=%s addr=%s reason=\"%s\"",
                   c->q.peer_id, c->addr, why);
        }
        break;
    default:
        fa_qconn_describe_error(&c->q, liberr, why, sizeof(why));
        if (!c->established) {
            s->st.handshakes_failed++;
            if (c->q.refusal == FA_REFUSED_REVOKED)
                s->st.refused_revoked++;
            else if (c->q.refusal == FA_REFUSED_ADMIT)
                s->st.refused_admit++;
            if (fa_srv_refusal_log_ok(s))
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
    fa_srv_conn_fail_requests(c, FA_ERR_QUIC);
    if (liberr == NGTCP2_ERR_IDLE_CLOSE || liberr == NGTCP2_ERR_DROP_CONN ||
        liberr == NGTCP2_ERR_RETRY || liberr == NGTCP2_ERR_HANDSHAKE_TIMEOUT || !c->q.conn) {
        fa_srv_conn_free(c);
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
            fa_srv_send_raw(s, (struct sockaddr *)&c->q.remote, c->q.remote_len, buf, n);
        }
    }
    conn_unlink(c);
    c->state = liberr == NGTCP2_ERR_DRAINING ? CS_DRAINING : CS_CLOSING;
    if (s->stopping || fa_timer_heap_set(&s->timers, &c->h.t, now + 3 * pto) != 0)
        fa_srv_conn_free(c);
}

/* Graceful application close of an established connection. */
void fa_srv_conn_close_app(srv_conn *c, uint64_t code)
{
    ngtcp2_connection_close_error_set_application_error(&c->q.last_error, code, NULL, 0);
    fa_srv_conn_close(c, 0);
}

void fa_srv_conn_write(srv_conn *c)
{
    fa_h3_server *s = c->srv;
    int rv;

    if (c->state != CS_LIVE)
        return;
    rv = fa_qconn_write(&c->q, 4);
    if (rv == 1) {
        fa_srv_mark_dirty(c); /* more to send: after the next receive pass */
    } else if (rv == FA_ERR_AGAIN) {
        fa_srv_mark_dirty(c);
        if (!s->out_armed) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 0};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
            s->out_armed = 1;
        }
    } else if (rv < 0) {
        fa_srv_conn_close(c, rv);
        return;
    }
    fa_srv_conn_schedule(c);
}
