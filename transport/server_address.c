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
#include "common/fa_log.h"

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

/* ------------------------------------------------------------- slots */

/* The key of an address: IPv4 (and IPv4-mapped IPv6) as ::ffff:a.b.c.d,
 * IPv6 by its /64, the block one host is usually given. */
static void addr_key(const struct sockaddr *sa, uint8_t key[16])
{
    memset(key, 0, 16);
    if (sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0)
            memcpy(key, a, 16);
        else
            memcpy(key, a, 8);
    }
}

addr_slot *fa_srv_slot_of(fa_h3_server *s, const struct sockaddr *from)
{
    uint8_t key[16];
    addr_slot *a;

    addr_key(from, key);
    a = fa_cid_map_find(&s->addrs, key, sizeof(key));
    if (a)
        return a;
    a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    memcpy(a->key, key, sizeof(key));
    if (fa_cid_map_add(&s->addrs, a->key, sizeof(a->key), a) != 0) {
        free(a);
        return NULL;
    }
    return a;
}

static void slot_release(fa_h3_server *s, addr_slot *a)
{
    if (a->live || a->handshakes || a->pins)
        return;
    fa_cid_map_del(&s->addrs, a->key, sizeof(a->key), a);
    free(a);
}

void fa_srv_slot_enter(fa_h3_server *s, srv_conn *c, addr_slot *slot)
{
    c->slot = slot;
    slot->live++;
    slot->handshakes++;
    c->in_handshake = 1;
    c->hs_prev = s->hs_newest;
    c->hs_next = NULL;
    if (s->hs_newest)
        s->hs_newest->hs_next = c;
    else
        s->hs_oldest = c;
    s->hs_newest = c;
    s->nhandshakes++;
    s->st.current_handshakes = s->nhandshakes;
}

void fa_srv_slot_handshake_done(fa_h3_server *s, srv_conn *c)
{
    if (!c->in_handshake)
        return;
    c->in_handshake = 0;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        s->hs_oldest = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        s->hs_newest = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
    s->nhandshakes--;
    s->st.current_handshakes = s->nhandshakes;
    if (c->slot)
        c->slot->handshakes--;
}

void fa_srv_slot_leave(fa_h3_server *s, srv_conn *c)
{
    addr_slot *a = c->slot;
    fa_srv_slot_handshake_done(s, c);
    if (!a)
        return;
    c->slot = NULL;
    a->live--;
    slot_release(s, a);
}

/* Drops the oldest handshake in progress (of slot, or of all when slot is
 * NULL) without a word: a handshake that has not finished while newer
 * ones arrive is the likeliest to be an attacker's that never will.
 * Returns 1 when one was dropped. */
static int evict_handshake(fa_h3_server *s, const addr_slot *slot)
{
    for (srv_conn *c = s->hs_oldest; c; c = c->hs_next) {
        if (slot && c->slot != slot)
            continue;
        s->st.handshakes_evicted++;
        fa_log(FA_LOG_DEBUG, "handshake dropped to make room", "addr=%s", c->addr);
        fa_srv_conn_free(c);
        return 1;
    }
    return 0;
}

int fa_srv_refusal_log_ok(fa_h3_server *s)
{
    uint64_t now = fa_h3_now();
    if (now - s->refusal_log.since >= NGTCP2_SECONDS) {
        if (s->refusal_log.suppressed)
            fa_log(FA_LOG_WARN, "refusals not logged (more than 10 a second)", "count=%llu",
                   (unsigned long long)s->refusal_log.suppressed);
        s->refusal_log.since = now;
        s->refusal_log.lines = 0;
        s->refusal_log.suppressed = 0;
    }
    if (s->refusal_log.lines < 10) {
        s->refusal_log.lines++;
        return 1;
    }
    s->refusal_log.suppressed++;
    return 0;
}

static void refuse(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                   socklen_t fromlen, const char *why)
{
    char addr[64];
    send_initial_close(s, hd, from, fromlen, NGTCP2_CONNECTION_REFUSED);
    s->st.connections_refused++;
    if (why && fa_srv_refusal_log_ok(s)) {
        fa_udp_addr_str(from, addr, sizeof(addr));
        fa_log(FA_LOG_WARN, "connection refused", "addr=%s reason=\"%s\"", addr, why);
    }
}

/* A client's first Initial: address validation, the slots, then a new
 * connection (see Slots in h3.h). */
static void on_new_initial(fa_h3_server *s, uint8_t *data, size_t len, const struct sockaddr *from,
                           socklen_t fromlen, unsigned ecn)
{
    const fa_h3_server_config *cfg = &s->cfg;
    ngtcp2_pkt_hd hd;
    ngtcp2_cid ocid, *pocid = NULL;
    addr_slot *slot;
    srv_conn *c;
    int rv, validated = 0, crowded;
    uint64_t now = fa_srv_realtime_ns();

    if (ngtcp2_accept(&hd, data, len) != 0) {
        s->st.datagrams_dropped++;
        return;
    }
    if (s->draining || s->stopping) {
        refuse(s, &hd, from, fromlen, NULL);
        return;
    }
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
            validated = 1;
            break;
        case NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR:
            if (ngtcp2_crypto_verify_regular_token(hd.token.base, hd.token.len, s->token_key, 32,
                                                   from, fromlen, REGULAR_TOKEN_TIMEOUT,
                                                   now) != 0) {
                hd.token.base = NULL;
                hd.token.len = 0;
            } else {
                validated = 1;
            }
            break;
        default: hd.token.base = NULL; hd.token.len = 0;
        }
    }
    if (!hd.token.len && hd.dcid.datalen < NGTCP2_MIN_INITIAL_DCIDLEN) {
        s->st.datagrams_dropped++;
        return;
    }
    slot = fa_srv_slot_of(s, from);
    if (!slot) {
        s->st.datagrams_dropped++;
        return;
    }
    slot->pins++; /* evictions below may take its last connection */
    /* Every slot that is full asks for a proven address: a spoofed
     * source cannot answer the Retry, so it can neither use up a real
     * address's share nor make room by evicting anyone. */
    crowded = slot->handshakes >= cfg->max_handshakes_per_address ||
              s->nhandshakes >= cfg->max_handshakes || s->nlive >= cfg->max_connections;
    if (!validated && cfg->retry != FA_H3_RETRY_NEVER &&
        (cfg->retry == FA_H3_RETRY_ALWAYS || crowded ||
         (cfg->retry == FA_H3_RETRY_ABOVE_LOAD && s->nlive >= cfg->retry_load_threshold))) {
        send_retry(s, &hd, from, fromlen, len);
        goto out;
    }
    /* the oldest handshake in progress makes room: the address's own
     * first, then anyone's */
    if (slot->live >= cfg->max_connections_per_address &&
        !(slot->handshakes && evict_handshake(s, slot))) {
        s->st.refused_address++;
        refuse(s, &hd, from, fromlen,
               "its address holds max_connections_per_address connections already");
        goto out;
    }
    if (slot->handshakes >= cfg->max_handshakes_per_address)
        (void)evict_handshake(s, slot);
    if (s->nhandshakes >= cfg->max_handshakes)
        (void)evict_handshake(s, NULL);
    if (s->nlive >= cfg->max_connections && !evict_handshake(s, NULL)) {
        refuse(s, &hd, from, fromlen, "the server holds max_connections connections");
        goto out;
    }
    c = fa_srv_conn_new(s, &hd, pocid, from, fromlen, slot);
    if (!c)
        goto out;
    slot->pins--;
    rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, fa_h3_now());
    if (rv != 0) {
        if (rv == NGTCP2_ERR_RETRY)
            send_retry(s, &hd, from, fromlen, len);
        fa_srv_conn_close(c, rv == NGTCP2_ERR_RETRY ? NGTCP2_ERR_DROP_CONN : rv);
        return;
    }
    fa_srv_mark_dirty(c);
    fa_srv_conn_schedule(c);
    return;
out:
    slot->pins--;
    slot_release(s, slot);
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
        c->last_rx = fa_h3_now();
        rv = fa_qconn_read(&c->q, from, fromlen, ecn, data, len, c->last_rx);
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
