/* stateless_internal.h - the server's replies that need no connection (internal to
 * transport/): Version Negotiation, Retry, a refusing CONNECTION_CLOSE and
 * Stateless Reset.
 *
 * Sans-I/O: each writes one packet into a caller's buffer from the bytes
 * received, the keys, a timestamp and a random source, and returns its
 * length; the server sends it.  Tests drive them with a fixed random source
 * and check the packets with ngtcp2's own parsers and verifiers.
 */
#ifndef FA_TRANSPORT_STATELESS_INTERNAL_H
#define FA_TRANSPORT_STATELESS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ngtcp2/ngtcp2.h>

/* The length of the connection IDs the server issues. */
#define FA_STATELESS_CIDLEN 18

/* At most this many Stateless Resets a second (RFC 9000 10.3: an endpoint
 * that answers every packet can be made to amplify or to loop). */
#define FA_STATELESS_RESETS_PER_SECOND 200

/* Fills p[0..n) with unpredictable bytes (fa_h3_random in the server). */
typedef void (*fa_stateless_rand)(uint8_t *p, size_t n);

/* Version Negotiation (RFC 9000 6, 17.2.1) answering the long header vc of a
 * version we do not speak: offers v1 and the reserved 0x1a2a3a4a, which
 * exercises the client's parser (6.3).  The caller answers only datagrams
 * of at least 1200 bytes (14.1).  Returns the packet's length, or a
 * negative ngtcp2 error (nothing to send). */
ngtcp2_ssize fa_stateless_version_negotiation(uint8_t *out, size_t cap,
                                              const ngtcp2_version_cid *vc, fa_stateless_rand rnd);

/* Retry (8.1.2, 17.2.5) for the Initial hd of rxlen bytes from `from`:
 * a new server CID, and a token sealed with token_key binding the
 * address, the client's DCID and now_ns (the wall clock, as
 * ngtcp2_crypto_verify_retry_token checks it).  At most 3 * rxlen bytes
 * (the amplification limit, 8.1).  Returns the length or a negative ngtcp2
 * error. */
ngtcp2_ssize fa_stateless_retry(uint8_t *out, size_t cap, const uint8_t token_key[32],
                                const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                                socklen_t fromlen, size_t rxlen, uint64_t now_ns,
                                fa_stateless_rand rnd);

/* An Initial carrying CONNECTION_CLOSE with transport error `code`
 * (CONNECTION_REFUSED, INVALID_TOKEN) for the Initial hd.  Returns the
 * length or a negative ngtcp2 error. */
ngtcp2_ssize fa_stateless_initial_close(uint8_t *out, size_t cap, const ngtcp2_pkt_hd *hd,
                                        uint64_t code);

/* The rate of Stateless Resets, per one-second window. */
typedef struct fa_stateless_limit {
    uint64_t window; /* start of the current window (ns, monotonic) */
    unsigned sent;   /* resets counted in it */
} fa_stateless_limit;

/* Stateless Reset (10.3) for a short-header packet of rxlen bytes to
 * dcid, a CID no live connection holds: its token derived from reset_key
 * and dcid, so a restarted server resets the connections it forgot.
 * Smaller than what provoked it, so two servers cannot loop (10.3.3), and
 * one byte smaller for packets of 43 bytes or less (10.3): a client's
 * keep-alive PING is one of those (ngtcp2 pads short packets only to its
 * DCID length + 22, 40 bytes here), and it is what a client waiting in a
 * long-poll sends to a restarted server.  21 bytes is the smallest reset
 * (5 unpredictable bytes and the token).
 * Returns the length; 0 when no reset is due (rxlen too small, a DCID not
 * of FA_STATELESS_CIDLEN bytes, or over the rate: the rate counts only
 * packets that pass the first two); or a negative ngtcp2 error. */
ngtcp2_ssize fa_stateless_reset(uint8_t *out, size_t cap, fa_stateless_limit *lim, uint64_t now_ns,
                                const uint8_t reset_key[32], const uint8_t *dcid, size_t dcidlen,
                                size_t rxlen, fa_stateless_rand rnd);

#endif
