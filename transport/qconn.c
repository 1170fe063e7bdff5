/* qconn.c - one QUIC connection carrying HTTP/3: the plumbing shared by the
 * server and the client.
 *
 * Bytes flow: socket -> ngtcp2_conn_read_pkt -> recv_stream_data ->
 * nghttp3_conn_read_stream -> the side's HTTP callbacks; and back:
 * nghttp3_conn_writev_stream -> ngtcp2_conn_writev_stream -> a GSO batch ->
 * one sendmsg.  Flow-control credit for HTTP framing bytes is returned at
 * once; credit for body bytes only when the application has consumed them
 * (fa_qconn_consume), which is what makes a slow consumer throttle its peer.
 */
#include "transport/h3_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_time.h"

/* Path-sized datagrams after a PTO (see fa_qconn_dgram): the first period
 * at FA_QCONN_SAFE_DGRAM, its cap, and how long without a PTO resets it. */
#define FA_QCONN_DG_LOW_MIN (1000 * NGTCP2_MILLISECONDS)
#define FA_QCONN_DG_LOW_MAX (64000 * NGTCP2_MILLISECONDS)
#define FA_QCONN_DG_STABLE (30000 * NGTCP2_MILLISECONDS)
/* Stream bytes acknowledged, in path-sized datagrams, that show they get
 * through. */
#define FA_QCONN_DG_CONFIRM 4
/* Bytes received per ACK on a fast path (fa_qconn_dgram_plan.ack_thresh). */
#define FA_QCONN_ACK_BYTES (64 * 1024)

void fa_h3_random(uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            /* getrandom cannot fail on Linux >= 3.17 once seeded; if it
             * somehow does, fail loudly rather than use weak bytes. */
            abort();
        }
        p += r;
        n -= (size_t)r;
    }
}

uint64_t fa_h3_now(void)
{
    return fa_time_mono_ns();
}

int fa_h3_streq_nocase(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

void fa_h3_quic_default(fa_h3_quic_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->max_stream_window = 32u << 20; /* >= 1 Gbit/s x 200 ms = 25 MB */
    o->max_connection_window = 64u << 20;
    o->cc = FA_H3_CC_BBR2; /* fills lossy cross-region paths (proto/config.proto) */
    o->idle_timeout_ms = 60000;
    o->max_streams = 64;
    o->gso = 1;
    o->gro = 1;
}

/* ------------------------------------------------------------ callbacks */

static void dgram_acked(fa_qconn *qc, uint64_t n);
static void dgram_settle(fa_qconn *qc, uint64_t in_flight_before, uint64_t now);

static void cb_rand(uint8_t *dest, size_t destlen, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    fa_h3_random(dest, destlen);
}

static int cb_get_new_connection_id(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token,
                                    size_t cidlen, void *user_data)
{
    fa_qconn *qc = user_data;
    fa_h3_random(cid->data, cidlen);
    cid->datalen = cidlen;
    if (qc->reset_key) {
        /* derived from the static secret: a restarted server can still
         * reset connections it forgot (RFC 9000 10.3) */
        if (ngtcp2_crypto_generate_stateless_reset_token(token, qc->reset_key, 32, cid) != 0)
            return NGTCP2_ERR_CALLBACK_FAILURE;
    } else {
        fa_h3_random(token, NGTCP2_STATELESS_RESET_TOKENLEN);
    }
    if (qc->ops->cid_add)
        qc->ops->cid_add(qc, cid);
    return 0;
}

static int cb_remove_connection_id(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *user_data)
{
    fa_qconn *qc = user_data;
    if (qc->ops->cid_remove)
        qc->ops->cid_remove(qc, cid);
    return 0;
}

static int cb_update_key(ngtcp2_conn *conn, uint8_t *rx_secret, uint8_t *tx_secret,
                         ngtcp2_crypto_aead_ctx *rx_aead_ctx, uint8_t *rx_iv,
                         ngtcp2_crypto_aead_ctx *tx_aead_ctx, uint8_t *tx_iv,
                         const uint8_t *current_rx_secret, const uint8_t *current_tx_secret,
                         size_t secretlen, void *user_data)
{
    fa_qconn *qc = user_data;
    uint8_t rx_key[64], tx_key[64];
    int rv = ngtcp2_crypto_update_key(conn, rx_secret, tx_secret, rx_aead_ctx, rx_key, rx_iv,
                                      tx_aead_ctx, tx_key, tx_iv, current_rx_secret,
                                      current_tx_secret, secretlen);
    explicit_bzero(rx_key, sizeof(rx_key));
    explicit_bzero(tx_key, sizeof(tx_key));
    if (rv != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    /* ngtcp2 derives the next phase's keys ahead of time: the first call
     * (at the handshake) is not a key update */
    if (qc->next_key_ready)
        qc->key_updates++;
    qc->next_key_ready = 1;
    return 0;
}

static int cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id,
                               uint64_t offset, const uint8_t *data, size_t datalen,
                               void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    nghttp3_ssize n;

    if (!qc->h3)
        return 0;
    qc->since_key_update += datalen;
    n = nghttp3_conn_read_stream(qc->h3, stream_id, data, datalen,
                                 (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
    if (n == NGHTTP3_ERR_MALFORMED_HTTP_MESSAGING || n == NGHTTP3_ERR_MALFORMED_HTTP_HEADER) {
        /* A malformed request or response (a body after a HEAD, more
         * bytes than its content-length, a bad field) is an error of its
         * stream, not of the connection (RFC 9114 4.1.2): reset that
         * stream with H3_MESSAGE_ERROR, drop what else arrives on it,
         * keep the others. */
        fa_log(FA_LOG_DEBUG, "malformed HTTP message: stream reset", "stream=%lld error=\"%s\"",
               (long long)stream_id, nghttp3_strerror((int)n));
        (void)nghttp3_conn_shutdown_stream_read(qc->h3, stream_id);
        if (fa_qconn_defer_reset(qc, stream_id, FA_H3_MESSAGE_ERROR) != 0)
            return NGTCP2_ERR_CALLBACK_FAILURE;
        fa_qconn_consume(qc, stream_id, datalen);
        return 0;
    }
    if (n < 0) {
        ngtcp2_connection_close_error_set_application_error(
            &qc->last_error, nghttp3_err_infer_quic_app_error_code((int)n), NULL, 0);
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    /* HTTP/3 framing and header bytes: consumed by nghttp3 right now */
    fa_qconn_consume(qc, stream_id, (size_t)n);
    return 0;
}

static int cb_acked_stream_data_offset(ngtcp2_conn *conn, int64_t stream_id, uint64_t offset,
                                       uint64_t datalen, void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    dgram_acked(qc, datalen);
    if (qc->h3 && nghttp3_conn_add_ack_offset(qc->h3, stream_id, datalen) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id,
                           uint64_t app_error_code, void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    int rv;

    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET) || app_error_code == 0)
        app_error_code = NGHTTP3_H3_NO_ERROR;
    if (!qc->h3)
        return 0;
    rv = nghttp3_conn_close_stream(qc->h3, stream_id, app_error_code);
    if (rv == NGHTTP3_ERR_STREAM_NOT_FOUND) {
        /* a stream nghttp3 never saw (e.g. reset before any byte) still
         * counts against the peer's stream limit: give the slot back */
        if (qc->is_server && ngtcp2_is_bidi_stream(stream_id) &&
            !ngtcp2_conn_is_local_stream(conn, stream_id))
            ngtcp2_conn_extend_max_streams_bidi(conn, 1);
        return 0;
    }
    if (rv != 0) {
        ngtcp2_connection_close_error_set_application_error(
            &qc->last_error, nghttp3_err_infer_quic_app_error_code(rv), NULL, 0);
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int cb_stream_reset(ngtcp2_conn *conn, int64_t stream_id, uint64_t final_size,
                           uint64_t app_error_code, void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    if (qc->ops->stream_reset)
        qc->ops->stream_reset(qc, stream_id, app_error_code, stream_user_data);
    if (qc->h3 && nghttp3_conn_shutdown_stream_read(qc->h3, stream_id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_stream_stop_sending(ngtcp2_conn *conn, int64_t stream_id, uint64_t app_error_code,
                                  void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    if (qc->h3 && nghttp3_conn_shutdown_stream_read(qc->h3, stream_id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_extend_max_stream_data(ngtcp2_conn *conn, int64_t stream_id, uint64_t max_data,
                                     void *user_data, void *stream_user_data)
{
    fa_qconn *qc = user_data;
    if (qc->h3 && nghttp3_conn_unblock_stream(qc->h3, stream_id) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_extend_max_remote_streams_bidi(ngtcp2_conn *conn, uint64_t max_streams,
                                             void *user_data)
{
    fa_qconn *qc = user_data;
    if (qc->h3)
        nghttp3_conn_set_max_client_streams_bidi(qc->h3, max_streams);
    return 0;
}

static int cb_recv_tx_key(ngtcp2_conn *conn, ngtcp2_crypto_level level, void *user_data)
{
    fa_qconn *qc = user_data;
    /* server: 1-RTT keys to send with: HTTP/3 can start (RFC 9114 6.2.1) */
    if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION || !qc->is_server || qc->h3)
        return 0;
    return qc->ops->h3_setup(qc) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int cb_recv_rx_key(ngtcp2_conn *conn, ngtcp2_crypto_level level, void *user_data)
{
    fa_qconn *qc = user_data;
    if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION || qc->is_server || qc->h3)
        return 0;
    return qc->ops->h3_setup(qc) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int cb_handshake_completed(ngtcp2_conn *conn, void *user_data)
{
    fa_qconn *qc = user_data;
    if (qc->ops->handshake_done && qc->ops->handshake_done(qc) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int cb_recv_new_token(ngtcp2_conn *conn, const ngtcp2_vec *token, void *user_data)
{
    fa_qconn *qc = user_data;
    if (qc->ops->new_token)
        qc->ops->new_token(qc, token->base, token->len);
    return 0;
}

void fa_qconn_callbacks(ngtcp2_callbacks *cb)
{
    memset(cb, 0, sizeof(*cb));
    cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
    cb->handshake_completed = cb_handshake_completed;
    cb->encrypt = ngtcp2_crypto_encrypt_cb;
    cb->decrypt = ngtcp2_crypto_decrypt_cb;
    cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
    cb->recv_stream_data = cb_recv_stream_data;
    cb->acked_stream_data_offset = cb_acked_stream_data_offset;
    cb->stream_close = cb_stream_close;
    cb->rand = cb_rand;
    cb->get_new_connection_id = cb_get_new_connection_id;
    cb->remove_connection_id = cb_remove_connection_id;
    cb->update_key = cb_update_key;
    cb->stream_reset = cb_stream_reset;
    cb->extend_max_remote_streams_bidi = cb_extend_max_remote_streams_bidi;
    cb->extend_max_stream_data = cb_extend_max_stream_data;
    cb->recv_new_token = cb_recv_new_token;
    cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
    cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
    cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
    cb->stream_stop_sending = cb_stream_stop_sending;
    cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
    cb->recv_rx_key = cb_recv_rx_key;
    cb->recv_tx_key = cb_recv_tx_key;
}

/* ------------------------------------------------------------- settings */

static void plan_sizes(fa_qconn_dgram_plan *p, uint32_t opt, unsigned route_mtu, unsigned hdr_len,
                       size_t max_payload)
{
    size_t fit = route_mtu > hdr_len ? route_mtu - hdr_len : 0, want;

    if (fit > max_payload)
        fit = max_payload;
    want = opt < max_payload ? opt : max_payload;
    if (want > NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE && fit && fit < want) {
        /* the kernel would refuse such datagrams (EMSGSIZE): a jumbo-frame
         * route has the route's size, a smaller one is sized as in auto */
        if (route_mtu >= FA_QCONN_BIG_MTU)
            want = fit;
        else
            opt = 0;
    }
    if (opt == 0) {
        if (route_mtu >= FA_QCONN_BIG_MTU) {
            p->path_sized = 1;
            p->max_tx = fit;
            p->advertise = fit;
        } else {
            /* ngtcp2's defaults, but announce what our route carries, as a
             * TCP MSS does: a peer on a jumbo-frame route sends no more */
            p->path_sized = 0;
            p->max_tx = NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE;
            p->advertise = fit ? (fit < FA_QCONN_SAFE_DGRAM ? FA_QCONN_SAFE_DGRAM : fit)
                               : NGTCP2_DEFAULT_MAX_RECV_UDP_PAYLOAD_SIZE;
        }
        return;
    }
    if (want < FA_QCONN_SAFE_DGRAM)
        want = FA_QCONN_SAFE_DGRAM;
    p->path_sized = want > NGTCP2_MAX_PMTUD_UDP_PAYLOAD_SIZE;
    p->max_tx = want;
    p->advertise = want;
}

void fa_qconn_dgram_plan_make(fa_qconn_dgram_plan *p, uint32_t opt, unsigned route_mtu,
                              unsigned hdr_len, size_t max_payload)
{
    plan_sizes(p, opt, route_mtu, hdr_len, max_payload);
    p->ack_thresh = FA_QCONN_ACK_BYTES / p->max_tx;
    if (p->ack_thresh < 2)
        p->ack_thresh = 2;
    if (p->ack_thresh > 8)
        p->ack_thresh = 8;
}

static ngtcp2_cc_algo cc_algo(int cc)
{
    switch (cc) {
    case FA_H3_CC_BBR2: return NGTCP2_CC_ALGO_BBR2;
    case FA_H3_CC_RENO: return NGTCP2_CC_ALGO_RENO;
    default: return NGTCP2_CC_ALGO_CUBIC;
    }
}

int fa_qconn_prepare(fa_qconn *qc, int is_server, const fa_qconn_ops *ops, void *owner, fa_udp *udp,
                     const fa_h3_quic_opts *opts, const struct sockaddr *remote,
                     socklen_t remote_len)
{
    qc->is_server = is_server;
    qc->ops = ops;
    qc->owner = owner;
    qc->udp = udp;
    qc->opts = opts;
    memcpy(&qc->remote, remote, remote_len);
    qc->remote_len = remote_len;
    ngtcp2_connection_close_error_default(&qc->last_error);
    qc->txbuf = malloc(FA_UDP_MAX_GSO_BYTES + 4096);
    return qc->txbuf ? 0 : FA_ERR_NOMEM;
}

void fa_qconn_path(fa_qconn *qc, ngtcp2_path *path)
{
    path->local.addr = (struct sockaddr *)&qc->udp->local;
    path->local.addrlen = qc->udp->local_len;
    path->remote.addr = (struct sockaddr *)&qc->remote;
    path->remote.addrlen = qc->remote_len;
    path->user_data = NULL;
}

void fa_qconn_settings(fa_qconn *qc, ngtcp2_settings *s, ngtcp2_transport_params *p,
                       const fa_h3_quic_opts *o, uint64_t now)
{
    const struct sockaddr *peer = (const struct sockaddr *)&qc->remote;
    fa_qconn_dgram_plan plan;

    ngtcp2_settings_default(s);
    ngtcp2_transport_params_default(p);
    s->initial_ts = now;
    s->cc_algo = cc_algo(o->cc);
    /* Full windows from the start (a WAN transfer should not spend its first
     * seconds growing them); auto-tuning may not shrink below them. */
    s->max_window = o->max_connection_window;
    s->max_stream_window = o->max_stream_window;
    s->handshake_timeout = 10 * NGTCP2_SECONDS;
    if (o->initial_rtt_ms)
        s->initial_rtt = (uint64_t)o->initial_rtt_ms * NGTCP2_MILLISECONDS;
    memset(&qc->dg, 0, sizeof(qc->dg));
    qc->dg.route_mtu = fa_udp_route_mtu(peer, qc->remote_len);
    qc->dg.hdr_len = fa_udp_header_len(peer);
    fa_qconn_dgram_plan_make(&plan, o->max_udp_payload, qc->dg.route_mtu, qc->dg.hdr_len,
                             qc->dg.hdr_len == 28 ? FA_UDP_MAX_PAYLOAD_V4 : FA_UDP_MAX_PAYLOAD_V6);
    s->max_tx_udp_payload_size = plan.max_tx;
    s->ack_thresh = plan.ack_thresh;
    if (plan.path_sized) {
        /* every packet as large as the write buffer we pass (dgram_cap),
         * bounded by max_tx and the peer's max_udp_payload_size */
        s->no_tx_udp_payload_size_shaping = 1;
        s->no_pmtud = 1;
        qc->dg.path = plan.max_tx;
        qc->dg.cur = FA_QCONN_SAFE_DGRAM;
        qc->dg.backoff = FA_QCONN_DG_LOW_MIN;
    }
    p->max_udp_payload_size = plan.advertise;
    p->initial_max_stream_data_bidi_local = o->max_stream_window;
    p->initial_max_stream_data_bidi_remote = o->max_stream_window;
    p->initial_max_stream_data_uni = 1u << 20; /* control and QPACK streams */
    p->initial_max_data = o->max_connection_window;
    p->initial_max_streams_bidi = qc->is_server ? o->max_streams : 0;
    p->initial_max_streams_uni = 8; /* control, QPACK encoder and decoder, some slack */
    p->max_idle_timeout = (uint64_t)o->idle_timeout_ms * NGTCP2_MILLISECONDS;
    p->active_connection_id_limit = 7;
}

static void qlog_write(void *user_data, uint32_t flags, const void *data, size_t datalen)
{
    fa_qconn *qc = user_data;
    if (qc->qlog) {
        fwrite(data, 1, datalen, qc->qlog);
        if (flags & NGTCP2_QLOG_WRITE_FLAG_FIN) {
            fclose(qc->qlog);
            qc->qlog = NULL;
        }
    }
}

void fa_qconn_qlog_open(fa_qconn *qc, ngtcp2_settings *s, const ngtcp2_cid *scid,
                        const ngtcp2_cid *odcid)
{
    char path[4096], hex[FA_HEX_LEN(NGTCP2_MAX_CIDLEN)];
    const fa_h3_quic_opts *o = qc->opts;

    if (!o->qlog_dir || !*o->qlog_dir)
        return;
    fa_hex_encode(hex, sizeof(hex), scid->data, scid->datalen);
    snprintf(path, sizeof(path), "%s/%s-%s.sqlog", o->qlog_dir, hex,
             qc->is_server ? "server" : "client");
    qc->qlog = fopen(path, "w");
    if (!qc->qlog) {
        fa_log(FA_LOG_WARN, "cannot open qlog file", "path=%s error=\"%s\"", path, strerror(errno));
        return;
    }
    s->qlog.write = qlog_write;
    s->qlog.odcid = *odcid;
}

int fa_qconn_h3_bind(fa_qconn *qc)
{
    int64_t ctrl, qenc, qdec;
    if (ngtcp2_conn_get_max_local_streams_uni(qc->conn) < 3)
        return -1; /* the peer allows too few unidirectional streams for HTTP/3 */
    if (ngtcp2_conn_open_uni_stream(qc->conn, &ctrl, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(qc->h3, ctrl) != 0 ||
        ngtcp2_conn_open_uni_stream(qc->conn, &qenc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(qc->conn, &qdec, NULL) != 0 ||
        nghttp3_conn_bind_qpack_streams(qc->h3, qenc, qdec) != 0)
        return -1;
    return 0;
}

void fa_qconn_consume(fa_qconn *qc, int64_t stream_id, size_t n)
{
    if (n == 0 || !qc->conn)
        return;
    ngtcp2_conn_extend_max_stream_offset(qc->conn, stream_id, n);
    ngtcp2_conn_extend_max_offset(qc->conn, n);
}

/* ------------------------------------------------------------ read/write */

int fa_qconn_read(fa_qconn *qc, const struct sockaddr *from, socklen_t fromlen, unsigned ecn,
                  const uint8_t *data, size_t len, uint64_t now)
{
    ngtcp2_path path;
    ngtcp2_pkt_info pi;
    int rv;

    memset(&pi, 0, sizeof(pi));
    pi.ecn = ecn;
    path.local.addr = (struct sockaddr *)&qc->udp->local;
    path.local.addrlen = qc->udp->local_len;
    path.remote.addr = (struct sockaddr *)from;
    path.remote.addrlen = fromlen;
    path.user_data = NULL;
    if (qc->dg.suspect) {
        ngtcp2_conn_stat st;
        ngtcp2_conn_get_conn_stat(qc->conn, &st);
        rv = ngtcp2_conn_read_pkt(qc->conn, &path, &pi, data, len, now);
        if (rv == 0)
            dgram_settle(qc, st.bytes_in_flight, now);
    } else {
        rv = ngtcp2_conn_read_pkt(qc->conn, &path, &pi, data, len, now);
    }
    if (rv == 0)
        return 0;
    switch (rv) {
    case NGTCP2_ERR_DRAINING:
    case NGTCP2_ERR_RETRY:
    case NGTCP2_ERR_DROP_CONN: break;
    case NGTCP2_ERR_CRYPTO:
        if (!qc->last_error.error_code)
            ngtcp2_connection_close_error_set_transport_error_tls_alert(
                &qc->last_error, ngtcp2_conn_get_tls_alert(qc->conn), NULL, 0);
        break;
    default:
        if (!qc->last_error.error_code)
            ngtcp2_connection_close_error_set_transport_error_liberr(&qc->last_error, rv, NULL, 0);
    }
    return rv;
}

/* ------------------------------------------------------- datagram sizes */

static void dgram_log(fa_qconn *qc, int level, const char *msg, const char *why, uint64_t now)
{
    char addr[80];
    fa_udp_addr_str((const struct sockaddr *)&qc->remote, addr, sizeof(addr));
    fa_log(level, msg, "addr=%s route_mtu=%u udp_payload=%zu now=%zu for_ms=%llu reason=\"%s\"",
           addr, qc->dg.route_mtu, qc->dg.path, qc->dg.cur,
           (unsigned long long)(qc->dg.low_until > now ? (qc->dg.low_until - now) / 1000000u : 0),
           why);
}

/* The size of the next datagrams (see fa_qconn_dgram). */
static size_t dgram_cap(fa_qconn *qc, uint64_t ts)
{
    fa_qconn_dgram *d = &qc->dg;
    if (!d->path)
        return ngtcp2_conn_get_max_tx_udp_payload_size(qc->conn);
    if (d->cur < d->path && ts >= d->low_until && ngtcp2_conn_get_handshake_completed(qc->conn)) {
        if (d->suspect) {
            /* a whole low period and the peer acknowledged nothing at all:
             * a silent peer, not a path that takes small datagrams only;
             * forget the fall-back */
            d->fallbacks--;
            d->backoff = d->backoff_prev;
            d->suspect = 0;
        }
        d->cur = d->path;
        d->raised_at = ts;
        d->big_sent = 0;
    }
    return d->cur;
}

/* A datagram of n bytes went out. */
static void dgram_sent(fa_qconn *qc, size_t n)
{
    fa_qconn_dgram *d = &qc->dg;
    if (d->path && n > FA_QCONN_SAFE_DGRAM && !d->big_sent) {
        d->big_sent = 1;
        d->acked0 = d->acked;
    }
}

/* Sends datagrams any path carries for a while (see fa_qconn_dgram). */
static void dgram_fall_back(fa_qconn *qc, uint64_t now, const char *why)
{
    fa_qconn_dgram *d = &qc->dg;
    if (d->cur <= FA_QCONN_SAFE_DGRAM)
        return;
    if (now - d->raised_at >= FA_QCONN_DG_STABLE)
        d->backoff = FA_QCONN_DG_LOW_MIN;
    d->backoff_prev = d->backoff;
    d->cur = FA_QCONN_SAFE_DGRAM;
    d->low_until = now + d->backoff;
    if (d->backoff < FA_QCONN_DG_LOW_MAX)
        d->backoff *= 2;
    d->fallbacks++;
    dgram_log(qc, FA_LOG_DEBUG, "QUIC datagrams shrink for a while", why, now);
}

/* A PTO fired.  Large datagrams went out and few got through since: the
 * path may drop them, or the peer stopped reading (a blocking client
 * between requests does, and so does a peer the scheduler starves).  Fall
 * back, tentatively: dgram_settle tells the two apart. */
static void dgram_on_pto(fa_qconn *qc, uint64_t now)
{
    fa_qconn_dgram *d = &qc->dg;
    ngtcp2_conn_stat st;

    if (d->cur <= FA_QCONN_SAFE_DGRAM || !d->big_sent)
        return; /* nothing large in flight: not about size */
    if (d->acked - d->acked0 >= FA_QCONN_DG_CONFIRM * (uint64_t)d->path) {
        /* large datagrams got through: a loss or a stalled peer; count
         * afresh from the next large datagram */
        d->big_sent = 0;
        return;
    }
    dgram_fall_back(qc, now, "probe timeout, large datagrams unacknowledged");
    ngtcp2_conn_get_conn_stat(qc->conn, &st);
    d->suspect = 1;
    d->recovery_s = st.congestion_recovery_start_ts;
}

/* Stream bytes the peer acknowledged (for dgram_on_pto's count). */
static void dgram_acked(fa_qconn *qc, uint64_t n)
{
    qc->dg.acked += n;
}

/* A packet from the peer was processed during a tentative fall-back.  If it
 * acknowledged something (fewer bytes in flight), the peer is alive, and
 * ngtcp2's loss detection has run on the datagrams sent before the probe
 * timeout: anything acknowledged after them declares them lost (RFC 9002
 * 6.1.2: the PTO is longer than the time threshold).  Packets declared lost
 * start a new congestion recovery period: the large datagrams went missing
 * while the small ones after them arrived, so the path drops large ones;
 * the fall-back stands.  No new recovery period: everything arrived, the
 * peer had only stalled; back to path-sized datagrams as if nothing
 * happened. */
static void dgram_settle(fa_qconn *qc, uint64_t in_flight_before, uint64_t now)
{
    fa_qconn_dgram *d = &qc->dg;
    ngtcp2_conn_stat st;

    ngtcp2_conn_get_conn_stat(qc->conn, &st);
    if (st.congestion_recovery_start_ts != d->recovery_s) {
        d->suspect = 0;
        if (!d->told) {
            d->told = 1;
            dgram_log(qc, FA_LOG_INFO, "QUIC datagrams are small for a while",
                      "large ones were lost after a probe timeout while small ones after them "
                      "arrived (does the path drop large ones?)",
                      now);
        }
    } else if (st.bytes_in_flight < in_flight_before) {
        d->suspect = 0;
        d->cur = d->path;
        d->low_until = 0;
        d->backoff = d->backoff_prev;
        d->fallbacks--;
        d->big_sent = 0;
        dgram_log(qc, FA_LOG_DEBUG, "QUIC datagrams grow back",
                  "the peer acknowledged the large datagrams sent before the probe timeout", now);
    }
}

/* The kernel refused a datagram as larger than its path MTU to the peer
 * (EMSGSIZE, after an ICMP "packet too big" or a route change). */
static void dgram_on_too_big(fa_qconn *qc, uint64_t now)
{
    fa_qconn_dgram *d = &qc->dg;
    unsigned mtu;
    size_t fit;

    if (!d->path)
        return; /* ngtcp2's discovery: a probe beyond the path MTU, lost */
    mtu = fa_udp_route_mtu((const struct sockaddr *)&qc->remote, qc->remote_len);
    fit = mtu > d->hdr_len ? mtu - d->hdr_len : 0;
    if (fit && fit < d->path) {
        d->path = fit < FA_QCONN_SAFE_DGRAM ? FA_QCONN_SAFE_DGRAM : fit;
        if (d->cur > d->path)
            d->cur = d->path;
        d->route_mtu = mtu;
        d->shrinks++;
        dgram_log(qc, FA_LOG_INFO, "QUIC datagrams shrink", "the path MTU shrank (EMSGSIZE)", now);
    } else {
        dgram_fall_back(qc, now, "EMSGSIZE, yet the route MTU fits"); /* play safe */
    }
}

size_t fa_qconn_udp_payload(fa_qconn *qc)
{
    const ngtcp2_transport_params *rp;
    size_t n;

    if (!qc->conn)
        return 0;
    if (!qc->dg.path)
        return ngtcp2_conn_get_path_max_tx_udp_payload_size(qc->conn);
    n = qc->dg.cur;
    if (ngtcp2_conn_get_handshake_completed(qc->conn) && fa_h3_now() >= qc->dg.low_until)
        n = qc->dg.path; /* from the next write on */
    rp = ngtcp2_conn_get_remote_transport_params(qc->conn);
    if (rp && rp->max_udp_payload_size < n)
        n = (size_t)rp->max_udp_payload_size;
    return n;
}

int fa_qconn_expiry(fa_qconn *qc, uint64_t now)
{
    ngtcp2_conn_stat st;
    size_t ptos = 0;
    int rv;

    if (qc->dg.path) {
        ngtcp2_conn_get_conn_stat(qc->conn, &st);
        ptos = st.pto_count;
    }
    rv = ngtcp2_conn_handle_expiry(qc->conn, now);
    if (rv != 0 && rv != NGTCP2_ERR_IDLE_CLOSE && !qc->last_error.error_code)
        ngtcp2_connection_close_error_set_transport_error_liberr(&qc->last_error, rv, NULL, 0);
    if (rv == 0 && qc->dg.path) {
        /* pto_count grows only when a PTO fires (an ACK lowers it) */
        ngtcp2_conn_get_conn_stat(qc->conn, &st);
        if (st.pto_count > ptos && ngtcp2_conn_get_handshake_completed(qc->conn))
            dgram_on_pto(qc, now);
    }
    return rv;
}

size_t fa_qconn_close_pkt(fa_qconn *qc, uint8_t *buf, size_t cap)
{
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n;

    if (!qc->conn || ngtcp2_conn_is_in_closing_period(qc->conn) ||
        ngtcp2_conn_is_in_draining_period(qc->conn))
        return 0;
    ngtcp2_path_storage_zero(&ps);
    n = ngtcp2_conn_write_connection_close(qc->conn, &ps.path, &pi, buf, cap, &qc->last_error,
                                           fa_h3_now());
    return n > 0 ? (size_t)n : 0;
}

static int send_batch(fa_qconn *qc, const ngtcp2_path *path, unsigned ecn, const uint8_t *data,
                      size_t len, size_t gso)
{
    int rv = fa_udp_send(qc->udp, path->remote.addr, path->remote.addrlen, ecn, data, len, gso);
    if (rv == FA_ERR_TOOBIG)
        dgram_on_too_big(qc, fa_h3_now());
    return rv == FA_ERR_AGAIN ? FA_ERR_AGAIN : 0; /* other failures = loss */
}

int fa_qconn_defer_reset(fa_qconn *qc, int64_t stream_id, uint64_t code)
{
    for (size_t i = 0; i < qc->nshut; i++)
        if (qc->shut[i].stream_id == stream_id)
            return 0;
    if (qc->nshut == qc->capshut) {
        size_t cap = qc->capshut ? 2 * qc->capshut : 4;
        fa_qconn_shut *n = realloc(qc->shut, cap * sizeof(*n));
        if (!n)
            return FA_ERR_NOMEM;
        qc->shut = n;
        qc->capshut = cap;
    }
    qc->shut[qc->nshut].stream_id = stream_id;
    qc->shut[qc->nshut].code = code;
    qc->nshut++;
    return 0;
}

static void run_deferred_resets(fa_qconn *qc)
{
    while (qc->nshut) {
        fa_qconn_shut s = qc->shut[--qc->nshut];
        if (qc->h3)
            nghttp3_conn_shutdown_stream_write(qc->h3, s.stream_id);
        ngtcp2_conn_shutdown_stream(qc->conn, s.stream_id, s.code);
    }
}

static int write_loop(fa_qconn *qc, int budget);

int fa_qconn_write(fa_qconn *qc, int budget)
{
    int rv;
    if (ngtcp2_conn_is_in_closing_period(qc->conn) || ngtcp2_conn_is_in_draining_period(qc->conn))
        return 0;
    run_deferred_resets(qc);
    rv = write_loop(qc, budget);
    if (rv >= 0 && qc->nshut) {
        /* a body source failed while we were writing */
        run_deferred_resets(qc);
        rv = write_loop(qc, budget);
    }
    return rv;
}

static int write_loop(fa_qconn *qc, int budget)
{
    ngtcp2_path_storage ps, prev;
    ngtcp2_pkt_info pi;
    nghttp3_vec vec[16];
    ngtcp2_conn *conn = qc->conn;
    uint64_t ts = fa_h3_now();
    size_t mtu;
    size_t path_mtu = ngtcp2_conn_get_path_max_tx_udp_payload_size(conn);
    int rounds = 0;

    if (fa_udp_flush(qc->udp) == FA_ERR_AGAIN)
        return FA_ERR_AGAIN;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_path_storage_zero(&prev);
    for (;;) {
        size_t quantum = ngtcp2_conn_get_send_quantum(conn);
        size_t max_pkts, npkts = 0, off = 0, gso = 0;
        unsigned ecn = 0;
        int idle = 0, rv = 0;

        /* the packet size: ngtcp2 fills the buffer we pass in path-sized
         * mode, so it is our choice (a datagram of up to 64 KiB is a GSO
         * batch of its own) */
        mtu = dgram_cap(qc, ts);
        max_pkts = quantum / mtu;

        if (max_pkts < 1)
            max_pkts = 1;
        if (max_pkts > FA_UDP_MAX_GSO_SEGS)
            max_pkts = FA_UDP_MAX_GSO_SEGS;
        if (max_pkts * mtu > FA_UDP_MAX_GSO_BYTES)
            max_pkts = FA_UDP_MAX_GSO_BYTES / mtu ? FA_UDP_MAX_GSO_BYTES / mtu : 1;
        for (;;) {
            int64_t sid = -1;
            int fin = 0;
            nghttp3_ssize nv = 0;
            ngtcp2_ssize ndatalen = -1, n;
            uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;

            if (qc->h3 && ngtcp2_conn_get_max_data_left(conn)) {
                nv = nghttp3_conn_writev_stream(qc->h3, &sid, &fin, vec, 16);
                if (nv < 0) {
                    ngtcp2_connection_close_error_set_application_error(
                        &qc->last_error, nghttp3_err_infer_quic_app_error_code((int)nv), NULL, 0);
                    return NGTCP2_ERR_CALLBACK_FAILURE;
                }
            }
            if (fin)
                flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
            n = ngtcp2_conn_writev_stream(conn, &ps.path, &pi, qc->txbuf + off, mtu, &ndatalen,
                                          flags, sid, (const ngtcp2_vec *)vec, (size_t)nv, ts);
            if (n < 0) {
                switch (n) {
                case NGTCP2_ERR_STREAM_DATA_BLOCKED:
                    nghttp3_conn_block_stream(qc->h3, sid);
                    continue;
                case NGTCP2_ERR_STREAM_SHUT_WR:
                    nghttp3_conn_shutdown_stream_write(qc->h3, sid);
                    continue;
                case NGTCP2_ERR_WRITE_MORE:
                    if (nghttp3_conn_add_write_offset(qc->h3, sid, (size_t)ndatalen) != 0)
                        goto h3_fail;
                    qc->since_key_update += (uint64_t)ndatalen;
                    if (fin && (uint64_t)ndatalen == nghttp3_vec_len(vec, (size_t)nv) &&
                        qc->ops->fin_sent)
                        qc->ops->fin_sent(qc, sid);
                    continue;
                default:
                    if (!qc->last_error.error_code)
                        ngtcp2_connection_close_error_set_transport_error_liberr(&qc->last_error,
                                                                                 (int)n, NULL, 0);
                    return (int)n;
                }
            }
            if (ndatalen >= 0 && sid >= 0) {
                if (nghttp3_conn_add_write_offset(qc->h3, sid, (size_t)ndatalen) != 0)
                    goto h3_fail;
                qc->since_key_update += (uint64_t)ndatalen;
                if (fin && (uint64_t)ndatalen == nghttp3_vec_len(vec, (size_t)nv) &&
                    qc->ops->fin_sent)
                    qc->ops->fin_sent(qc, sid);
            }
            if (n == 0) {
                idle = 1; /* congestion, pacing, flow control, or nothing to send */
                break;
            }
            if (npkts == 0) {
                ngtcp2_path_copy(&prev.path, &ps.path);
                ecn = pi.ecn;
                gso = (size_t)n;
            } else if (!ngtcp2_path_eq(&prev.path, &ps.path) || ecn != pi.ecn || (size_t)n > gso ||
                       (gso > path_mtu && (size_t)n != gso)) {
                /* this packet cannot join the batch: send the batch, start anew */
                rv = send_batch(qc, &prev.path, ecn, qc->txbuf, off, gso);
                if (rv == FA_ERR_AGAIN) {
                    /* the socket is full: this one packet is lost, QUIC recovers */
                    ngtcp2_conn_update_pkt_tx_time(conn, ts);
                    return FA_ERR_AGAIN;
                }
                memmove(qc->txbuf, qc->txbuf + off, (size_t)n);
                off = 0;
                npkts = 0;
                ngtcp2_path_copy(&prev.path, &ps.path);
                ecn = pi.ecn;
                gso = (size_t)n;
            }
            off += (size_t)n;
            npkts++;
            dgram_sent(qc, (size_t)n);
            if (npkts >= max_pkts || (size_t)n < gso)
                break;
        }
        if (off)
            rv = send_batch(qc, &prev.path, ecn, qc->txbuf, off, gso);
        ngtcp2_conn_update_pkt_tx_time(conn, ts);
        if (qc->opts->key_update_bytes && qc->since_key_update >= qc->opts->key_update_bytes &&
            ngtcp2_conn_get_handshake_completed(conn)) {
            if (ngtcp2_conn_initiate_key_update(conn, ts) == 0)
                qc->since_key_update = 0;
        }
        if (rv == FA_ERR_AGAIN)
            return FA_ERR_AGAIN;
        if (idle)
            return 0;
        if (++rounds >= budget)
            return 1;
        ts = fa_h3_now();
    }
h3_fail:
    ngtcp2_connection_close_error_set_application_error(&qc->last_error, NGHTTP3_H3_INTERNAL_ERROR,
                                                        NULL, 0);
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

void fa_qconn_describe_error(fa_qconn *qc, int liberr, char *buf, size_t cap)
{
    ngtcp2_connection_close_error peer;
    uint8_t alert = qc->conn ? ngtcp2_conn_get_tls_alert(qc->conn) : 0;

    if (qc->verify_fail[0]) {
        snprintf(buf, cap, "%s", qc->verify_fail);
        return;
    }
    if (liberr == NGTCP2_ERR_CRYPTO && alert) {
        if (alert == GNUTLS_A_CERTIFICATE_REQUIRED && qc->is_server)
            snprintf(buf, cap, "client presented no certificate (TLS alert %s)",
                     fa_tls_alert_name(alert));
        else
            snprintf(buf, cap, "TLS handshake failed: alert %s", fa_tls_alert_name(alert));
        return;
    }
    if (qc->conn) {
        ngtcp2_conn_get_connection_close_error(qc->conn, &peer);
        /* the reason is the peer's text: fa_log escapes it, and the
         * buffer bounds it */
        if (peer.error_code || peer.reasonlen) {
            if (peer.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT &&
                peer.error_code >= 0x100 && peer.error_code < 0x200)
                snprintf(buf, cap, "peer refused the TLS handshake: alert %s",
                         fa_tls_alert_name((uint8_t)(peer.error_code - 0x100)));
            else
                snprintf(buf, cap, "peer closed the connection: %s error 0x%llx%s%.*s",
                         peer.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION
                             ? "application"
                             : "transport",
                         (unsigned long long)peer.error_code, peer.reasonlen ? ": " : "",
                         (int)peer.reasonlen, peer.reason ? (const char *)peer.reason : "");
            return;
        }
    }
    snprintf(buf, cap, "%s", liberr ? ngtcp2_strerror(liberr) : "closed");
}

void fa_qconn_free(fa_qconn *qc)
{
    if (qc->h3)
        nghttp3_conn_del(qc->h3);
    if (qc->conn)
        ngtcp2_conn_del(qc->conn);
    if (qc->tls)
        gnutls_deinit(qc->tls);
    if (qc->qlog)
        fclose(qc->qlog);
    free(qc->txbuf);
    free(qc->shut);
    qc->shut = NULL;
    qc->nshut = qc->capshut = 0;
    qc->h3 = NULL;
    qc->conn = NULL;
    qc->tls = NULL;
    qc->qlog = NULL;
    qc->txbuf = NULL;
}
