/* server_address.c - datagram dispatch, and who may open a connection.
 *
 * A packet whose Destination CID names a known connection goes to it
 * (RFC 9000 5.2); an unknown version gets Version Negotiation (6); an
 * Initial may open a connection, after address validation by Retry
 * (8.1.2) when the policy or the load asks for it, or with a NEW_TOKEN
 * token of an earlier connection (8.1.3); a short-header packet for no
 * known connection gets a Stateless Reset (10.3) whose token is derived
 * from the static secret, so that a restarted server still resets
 * connections it forgot.  Everything else is dropped: ngtcp2 parses, we
 * never trust.  The replies that need no connection are stateless.c's.
 */
#include "transport/server_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_hkdf.h"

#define RETRY_TOKEN_TIMEOUT (10 * NGTCP2_SECONDS)
#define REGULAR_TOKEN_TIMEOUT (3600 * NGTCP2_SECONDS)

uint64_t fa_srv_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fa_srv_send_raw(fa_h3_server *s, const struct sockaddr *to, socklen_t tolen, const uint8_t *p,
                     size_t n)
{
    (void)fa_udp_send(&s->udp, to, tolen, 0, p, n, 0);
}

static void send_version_negotiation(fa_h3_server *s, const ngtcp2_version_cid *vc,
                                     const struct sockaddr *from, socklen_t fromlen)
{
    ngtcp2_ssize n = fa_stateless_version_negotiation(s->pkt, sizeof(s->pkt), vc, fa_h3_random);
    if (n > 0) {
        fa_srv_send_raw(s, from, fromlen, s->pkt, (size_t)n);
        s->st.version_negotiations_sent++;
    }
}

static void send_retry(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                       socklen_t fromlen, size_t rxlen)
{
    ngtcp2_ssize n = fa_stateless_retry(s->pkt, sizeof(s->pkt), s->token_key, hd, from, fromlen,
                                        rxlen, fa_srv_realtime_ns(), fa_h3_random);
    if (n > 0) {
        fa_srv_send_raw(s, from, fromlen, s->pkt, (size_t)n);
        s->st.retries_sent++;
    }
}

static void send_initial_close(fa_h3_server *s, const ngtcp2_pkt_hd *hd,
                               const struct sockaddr *from, socklen_t fromlen, uint64_t code)
{
    ngtcp2_ssize n = fa_stateless_initial_close(s->pkt, sizeof(s->pkt), hd, code);
    if (n > 0)
        fa_srv_send_raw(s, from, fromlen, s->pkt, (size_t)n);
}

static void send_stateless_reset(fa_h3_server *s, const uint8_t *dcid, size_t dcidlen,
                                 const struct sockaddr *from, socklen_t fromlen, size_t rxlen)
{
    ngtcp2_ssize n = fa_stateless_reset(s->pkt, sizeof(s->pkt), &s->resets, fa_h3_now(),
                                        s->reset_key, dcid, dcidlen, rxlen, fa_h3_random);
    if (n > 0) {
        fa_srv_send_raw(s, from, fromlen, s->pkt, (size_t)n);
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
    uint64_t now = fa_srv_realtime_ns();

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
    c = fa_srv_conn_new(s, &hd, pocid, from, fromlen);
    if (!c)
        return;
    rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
    if (rv != 0) {
        if (rv == NGTCP2_ERR_RETRY)
            send_retry(s, &hd, from, fromlen, len);
        fa_srv_conn_close(c, rv == NGTCP2_ERR_RETRY ? NGTCP2_ERR_DROP_CONN : rv);
        return;
    }
    fa_srv_mark_dirty(c);
    fa_srv_conn_schedule(c);
}

void fa_srv_on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
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
                fa_srv_send_raw(s, from, fromlen, c->closebuf, c->closelen);
            return;
        }
        if (c->state == CS_DRAINING)
            return;
        rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
        if (rv != 0) {
            fa_srv_conn_close(c, rv);
            return;
        }
        fa_srv_mark_dirty(c);
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
    fa_srv_on_datagram(s, data, len, from, fromlen, 0);
    while ((c = s->dirty_head)) {
        s->dirty_head = c->dirty_next;
        c->dirty = 0;
        fa_srv_conn_write(c);
    }
}

void fa_h3_server_forget_all(fa_h3_server *s)
{
    while (s->conns)
        fa_srv_conn_free(s->conns);
    s->dirty_head = NULL;
}

int fa_h3_load_static_secret(const char *path, int create, uint8_t secret[32], fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0, n;
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
    /* 32 bytes are the raw secret, whatever they are (a last byte 0x0a
     * included); else 64 hex digits, and one line end after them. */
    n = len;
    if (n != 32 && n > 0 && data[n - 1] == '\n') {
        n--;
        if (n > 0 && data[n - 1] == '\r')
            n--;
    }
    if (len == 32) {
        memcpy(secret, data, 32);
    } else if (n == 64) {
        if (fa_hex_decode(secret, 32, (const char *)data, 64) != 0)
            rv = fa_errorf(err, FA_ERR_PARSE,
                           "%s: not 64 hex digits (only 0-9, a-f, A-F, then at most one line "
                           "end)",
                           path);
    } else {
        rv = fa_errorf(err, FA_ERR_PARSE,
                       "%s: want a 32-byte secret (64 hex digits and at most one line end, or "
                       "exactly 32 raw bytes), got %zu bytes",
                       path, len);
    }
out:
    if (data) {
        explicit_bzero(data, len);
        free(data);
    }
    return rv;
}

/* The keys of stateless resets and address-validation tokens, each
 * HKDF-SHA256 (RFC 5869) of the static secret with its own label, so that
 * neither key tells anything of the other or of the secret. */
int fa_srv_derive_keys(fa_h3_server *s, const uint8_t secret[32], fa_error *err)
{
    static const char salt[] = "fedagg/quic/v2";
    static const char reset[] = "stateless-reset";
    static const char token[] = "address-token";
    int rv;

    rv = fa_hkdf_sha256(s->reset_key, sizeof(s->reset_key), (const uint8_t *)salt, sizeof(salt) - 1,
                        secret, 32, (const uint8_t *)reset, sizeof(reset) - 1);
    if (rv == 0)
        rv =
            fa_hkdf_sha256(s->token_key, sizeof(s->token_key), (const uint8_t *)salt,
                           sizeof(salt) - 1, secret, 32, (const uint8_t *)token, sizeof(token) - 1);
    if (rv != 0) {
        explicit_bzero(s->reset_key, sizeof(s->reset_key));
        explicit_bzero(s->token_key, sizeof(s->token_key));
        return fa_errorf(err, FA_ERR_CRYPTO, "h3 server: cannot derive the QUIC keys: %s",
                         fa_strerror(rv));
    }
    return 0;
}
