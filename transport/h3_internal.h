/* h3_internal.h - pieces shared by the HTTP/3 server and client: the UDP
 * endpoint (udp.c), TLS setup and peer verification (tls.c), the QUIC
 * connection core that moves bytes between ngtcp2, nghttp3 and the socket
 * (qconn.c), and the send queue of a streamed body (bodyq.c).
 * Not part of the public API (see h3.h).
 */
#ifndef FA_TRANSPORT_H3_INTERNAL_H
#define FA_TRANSPORT_H3_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "common/fa_err.h"
#include "transport/h3.h"

/* ---------------------------------------------------------------- udp.c */

/* Largest GSO batch: the kernel accepts at most 64 segments and a 64 KiB
 * super-datagram. */
#define FA_UDP_MAX_GSO_SEGS 64
#define FA_UDP_MAX_GSO_BYTES 65000
/* Receive buffers of one recvmmsg call, each large enough for a GRO batch
 * (the kernel coalesces at most 64 KiB) or for the largest single datagram. */
#define FA_UDP_RX_BATCH 8
#define FA_UDP_RX_BUFSZ 65536
/* Largest UDP payload of one datagram: IPv4's 65535-byte total length less
 * 28 header bytes; over IPv6, QUIC's own limit (RFC 9000 18.2). */
#define FA_UDP_MAX_PAYLOAD_V4 65507
#define FA_UDP_MAX_PAYLOAD_V6 65527

typedef struct fa_udp {
    int fd;
    int family;
    struct sockaddr_storage local;
    socklen_t local_len;
    int gso; /* UDP_SEGMENT usable */
    int gro; /* UDP_GRO enabled */
    /* One send the kernel refused with EAGAIN, kept until the socket drains. */
    int blocked;
    uint8_t *pend;
    size_t pend_len, pend_cap, pend_gso;
    struct sockaddr_storage pend_to;
    socklen_t pend_tolen;
    unsigned pend_ecn;
    /* Receive batch. */
    uint8_t *rxbuf; /* FA_UDP_RX_BATCH * FA_UDP_RX_BUFSZ */
    /* Counters. */
    uint64_t send_calls, recv_calls, dgrams_sent, dgrams_recv, bytes_sent, bytes_recv;
    uint64_t largest_sent, largest_recv; /* largest datagram payloads, bytes */
    uint64_t too_big; /* sends refused with EMSGSIZE (larger than the path MTU) */
} fa_udp;

/* Parses "host:port" / "[v6]:port" into a socket address (numeric host, or a
 * name resolved with getaddrinfo).  Returns 0 or FA_ERR_INVAL. */
int fa_udp_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len, char *host,
                      size_t hostcap, fa_error *err);

/* Opens a non-blocking UDP socket bound to addr (family from addr) with
 * large buffers, ECN reporting, and GSO/GRO when asked and available. */
int fa_udp_open(fa_udp *u, const struct sockaddr *addr, socklen_t len, int want_gso, int want_gro,
                fa_error *err);
void fa_udp_close(fa_udp *u);

/* Sends len bytes as datagrams of gso bytes each (the last may be shorter;
 * gso == len or 0 means one datagram).  Returns 0 (sent, or lost to an error
 * that QUIC's loss recovery repairs), FA_ERR_AGAIN (the unsent part is kept:
 * call fa_udp_flush when writable), or FA_ERR_TOOBIG (the kernel refused the
 * datagrams as larger than its path MTU to `to` (EMSGSIZE); they are
 * dropped). */
int fa_udp_send(fa_udp *u, const struct sockaddr *to, socklen_t tolen, unsigned ecn,
                const uint8_t *data, size_t len, size_t gso);

/* Retries a blocked send.  Returns 0 (nothing pending now) or FA_ERR_AGAIN. */
int fa_udp_flush(fa_udp *u);

/* Called per received datagram (GRO batches are split). */
typedef void (*fa_udp_rx_fn)(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                             socklen_t fromlen, unsigned ecn);

/* Reads what is queued, up to max_calls recvmmsg calls.  Returns the number
 * of datagrams delivered (0 when none was queued). */
int fa_udp_recv(fa_udp *u, fa_udp_rx_fn fn, void *arg, int max_calls);

/* "ip:port" of an address. */
void fa_udp_addr_str(const struct sockaddr *sa, char *buf, size_t cap);

/* The MTU of the kernel's route to peer, or 0 when it cannot tell: the
 * outgoing interface's MTU (65536 on loopback), or a smaller path MTU the
 * kernel learned from ICMP "packet too big" (RFC 1191, RFC 8201), read as
 * IP_MTU / IPV6_MTU of a throwaway UDP socket connected to peer (connect
 * sends nothing). */
unsigned fa_udp_route_mtu(const struct sockaddr *peer, socklen_t len);

/* IP + UDP header bytes in front of a datagram to peer: 28 for IPv4 (and
 * IPv4-mapped IPv6), 48 for IPv6. */
unsigned fa_udp_header_len(const struct sockaddr *peer);

/* ---------------------------------------------------------------- tls.c */

typedef struct fa_tls_ctx {
    gnutls_certificate_credentials_t cred;
    gnutls_priority_t prio;
    int server;
    /* the CA certificates, to check the signature of a CRL */
    gnutls_x509_crt_t *cas;
    unsigned ncas;
    /* revocation: the CRLs of crl_file, reloaded by fa_tls_crl_poll */
    gnutls_x509_crl_t *crls;
    unsigned ncrls;
    char *crl_file;
    struct timespec crl_mtime; /* of the version last read, good or bad */
    off_t crl_size;
    ino_t crl_ino;
    uint64_t crl_loads; /* good versions loaded */
} fa_tls_ctx;

/* Loads cert/key/CA (all PEM).  Returns 0, FA_ERR_INVAL, FA_ERR_TLS. */
int fa_tls_ctx_init(fa_tls_ctx *t, int server, const char *cert_file, const char *key_file,
                    const char *ca_file, fa_error *err);
void fa_tls_ctx_free(fa_tls_ctx *t);

/* Revocation (RFC 5280 5): the peer's certificate is refused during the
 * handshake when a CRL of crl_file lists it.  The file holds one CRL or
 * more (PEM) or one (DER), each signed by a CA of ca_file.
 * fa_tls_crl_set loads it at start: returns 0 (file NULL or empty: no
 * revocation), FA_ERR_IO, FA_ERR_PARSE, FA_ERR_VERIFY (not signed by the
 * CA), FA_ERR_NOMEM.  fa_tls_crl_poll reads it again when its mtime, size
 * or inode changed (or force): returns 1 (a new list is in force), 0
 * (unchanged, or no file), or the error of the new version, in which case
 * the previous list stays and that version is not read again. */
int fa_tls_crl_set(fa_tls_ctx *t, const char *file, fa_error *err);
int fa_tls_crl_poll(fa_tls_ctx *t, int force, fa_error *err);

/* 1 when a CRL of t lists crt (or it cannot be checked), with why; else 0. */
int fa_tls_crt_revoked(const fa_tls_ctx *t, gnutls_x509_crt_t crt, char *why, size_t cap);
/* The same for the peer certificate of an established session. */
int fa_tls_session_revoked(const fa_tls_ctx *t, gnutls_session_t s, char *why, size_t cap);

/* Longest region id or operator name, and the longest subject alternative
 * name read (a longer one refuses the certificate). */
#define FA_TLS_NAME_MAX 63
#define FA_TLS_SAN_MAX 65536

/* The identity a client certificate gives (docs/security.md): exactly one
 * SAN URI of the fedagg scheme, fedagg://region/<id> or
 * fedagg://operator/<name> (a name: 1 to 63 of a-z, 0-9, '-'); or, without
 * any, the subject's CN as a region id, when there is exactly one CN and it
 * is a valid id.  Every SAN is read whole whatever its length (up to
 * FA_TLS_SAN_MAX).  Refused, with why: a second fedagg URI (of either
 * kind, even the same), a fedagg URI of another form or with a bad name,
 * a SAN that cannot be read, several CNs, a CN that is no region id.
 * Returns 0 (name in out, *role) or -1. */
int fa_tls_peer_identity(gnutls_x509_crt_t crt, char *out, size_t cap, int *role, char *why,
                         size_t whycap);

struct fa_qconn;

/* Creates the TLS session of a connection (ALPN h3, TLS 1.3 only, no early
 * data, peer certificate required and verified).  Client sessions check
 * server_name.  The verdict and the peer identity land in qc. */
int fa_tls_session_new(fa_tls_ctx *t, struct fa_qconn *qc, const char *server_name, fa_error *err);

/* The alert name of a TLS alert code, e.g. "bad_certificate". */
const char *fa_tls_alert_name(uint8_t alert);

/* -------------------------------------------------------------- bodyq.c */

/* The send side of one streamed body: bytes handed to nghttp3 stay here
 * until the peer acknowledges them. */
typedef struct fa_bodyq_chunk {
    struct fa_bodyq_chunk *next;
    size_t fill; /* bytes written into data */
    size_t sent; /* bytes handed to nghttp3 */
    uint8_t data[];
} fa_bodyq_chunk;

typedef struct fa_bodyq {
    /* exactly one source */
    const uint8_t *buf; /* borrowed or owned buffer body */
    uint8_t *owned;
    size_t buf_len, buf_off;
    fa_h3_read_fn read;
    void *read_arg;
    /* chunks handed out and not yet acknowledged, oldest first */
    fa_bodyq_chunk *head, *tail;
    fa_bodyq_chunk *spare; /* recycled chunks */
    int nspare;
    uint64_t head_acked; /* acknowledged bytes of head */
    size_t chunk_size;
    uint64_t unacked; /* bytes handed to nghttp3, not yet acknowledged */
    uint64_t max_unacked;
    uint64_t produced; /* total bytes read from the source */
    int eof;           /* the source reported the end */
    int wait_app;      /* read returned FA_ERR_AGAIN */
    int wait_ack;      /* max_unacked reached */
    int error;         /* read failed: this code */
} fa_bodyq;

void fa_bodyq_init_buf(fa_bodyq *q, const uint8_t *buf, size_t len, uint8_t *owned);
void fa_bodyq_init_pull(fa_bodyq *q, fa_h3_read_fn read, void *arg, uint64_t max_unacked);
void fa_bodyq_free(fa_bodyq *q);
/* nghttp3 read_data: fills vec; returns count, NGHTTP3_ERR_WOULDBLOCK or
 * NGHTTP3_ERR_CALLBACK_FAILURE (q->error set). */
nghttp3_ssize fa_bodyq_read(fa_bodyq *q, nghttp3_vec *vec, size_t veccnt, uint32_t *pflags);
/* Bytes acknowledged; returns 1 when a stream blocked on acks may resume. */
int fa_bodyq_acked(fa_bodyq *q, uint64_t n);

/* -------------------------------------------------------------- qconn.c */

/* Datagram sizes (qconn.c).  TCP sizes its segments from the route: each side
 * announces an MSS from its interface MTU and the sender uses the smaller
 * (RFC 9293 3.7.1), trusting ICMP to report a smaller hop.  A connection
 * does the same with QUIC's max_udp_payload_size transport parameter: when
 * the kernel's route to the peer has an MTU of at least FA_QCONN_BIG_MTU
 * (loopback, a jumbo-frame LAN) and the application left max_udp_payload at
 * 0, datagrams fill the route (path-sized mode: ngtcp2's discovery, which
 * never probes beyond 1452 bytes, is off) and the transport parameter
 * announces the same size, so the peer sends no more than our route
 * carries.  Otherwise ngtcp2's discovery runs from 1200 up to 1452. */
#define FA_QCONN_BIG_MTU 9000
/* Datagrams every QUIC path carries (RFC 9000 14): the handshake, and
 * loss probes of path-sized connections, use this size. */
#define FA_QCONN_SAFE_DGRAM NGTCP2_MAX_UDP_PAYLOAD_SIZE

typedef struct fa_qconn_dgram_plan {
    size_t max_tx;      /* ngtcp2_settings.max_tx_udp_payload_size */
    int path_sized;     /* 1: no discovery, datagrams up to max_tx after the handshake */
    uint64_t advertise; /* our max_udp_payload_size transport parameter */
    /* ngtcp2_settings.ack_thresh: an ACK per ~64 KB received, counted in
     * packets of max_tx bytes, 2 (ngtcp2's default) to 8.  Fewer ACKs on
     * fast paths mean fewer sends here and less ACK processing at the
     * sender (loss detection keeps its timing through max_ack_delay); a
     * count of 8 path-sized 64 KB packets would be more than a congestion
     * window holds, and every ACK would wait max_ack_delay (25 ms). */
    size_t ack_thresh;
} fa_qconn_dgram_plan;

/* Decides a connection's datagram sizes from the application's option
 * (max_udp_payload: 0 = auto), the route MTU to the peer (0 = unknown), the
 * peer family's IP + UDP header length and largest datagram payload.
 *   auto, route MTU >= FA_QCONN_BIG_MTU: path-sized, route MTU - headers
 *   auto, otherwise: discovery up to 1452; announces route MTU - headers
 *     (at least 1200), or 65527 when the route is unknown
 *   1200..1452 (1..1199 count as 1200): discovery up to that size, announced
 *   larger: path-sized at that size; if the route takes less, path-sized
 *     at route MTU - headers on a route of FA_QCONN_BIG_MTU or more, else
 *     as auto
 * Pure; fa_qconn_settings applies it. */
void fa_qconn_dgram_plan_make(fa_qconn_dgram_plan *p, uint32_t opt, unsigned route_mtu,
                              unsigned hdr_len, size_t max_payload);

/* A path-sized connection's datagram size over time: FA_QCONN_SAFE_DGRAM
 * until the handshake completes, then `path`.  A PTO (nothing acknowledged
 * for a probe timeout) after large datagrams were sent, with little stream
 * data acknowledged since the first of them (under 4 of them: ngtcp2 0.12
 * does not say which packets were acknowledged), means the path may drop
 * them silently (a "black hole", RFC 8899 4.3), or that the peer stopped
 * reading for a while (a blocking client between requests, a process the
 * scheduler starves): the connection sends FA_QCONN_SAFE_DGRAM-sized
 * datagrams, tentatively.  The first packet from the peer that
 * acknowledges anything settles it: if ngtcp2 declared packets lost on it
 * (a new congestion recovery period: the large datagrams went missing and
 * the small ones after them arrived), the path drops large ones, and the
 * fall-back stands for `backoff` (1 s, doubling on each repeat up to 64 s,
 * back to 1 s after 30 s without one), then `path` is tried again; if not,
 * everything arrived, the peer had only stalled, and the fall-back is
 * undone (as it is when nothing at all is acknowledged for a whole low
 * period: a silent peer).  A PTO after large datagrams did get through (a
 * loss, or a peer that stalled) only restarts that count, so a path that
 * changes later costs two PTOs.  EMSGSIZE from the kernel (it learned
 * a smaller path MTU) lowers `path` to the new route MTU for good. */
typedef struct fa_qconn_dgram {
    unsigned route_mtu; /* route MTU to the peer when the connection began (0 = unknown) */
    unsigned hdr_len;   /* IP + UDP header bytes */
    size_t path;        /* path-sized: the size the route carries; 0 = ngtcp2's discovery */
    size_t cur;         /* path-sized: the cap in force now */
    uint64_t low_until; /* after a PTO: at FA_QCONN_SAFE_DGRAM until then (ns) */
    uint64_t backoff;   /* the next low period (ns) */
    uint64_t raised_at; /* when cur last went back to path (ns) */
    uint64_t fallbacks; /* times cur fell back to FA_QCONN_SAFE_DGRAM */
    uint64_t shrinks;   /* times EMSGSIZE lowered path */
    uint64_t acked;     /* stream bytes the peer acknowledged, all streams */
    uint64_t acked0;    /* ... when the first large datagram since big_sent went out */
    int big_sent;       /* a datagram above FA_QCONN_SAFE_DGRAM went out since the count began */
    int suspect;        /* the fall-back is tentative: the peer may only have stalled */
    int told;           /* the INFO line about a black hole was logged */
    uint64_t recovery_s;   /* ngtcp2's congestion_recovery_start_ts when the fall-back began */
    uint64_t backoff_prev; /* backoff before the fall-back doubled it */
} fa_qconn_dgram;

/* Side-specific hooks of a connection. */
typedef struct fa_qconn_ops {
    /* server: a new source CID to route (get_new_connection_id) */
    void (*cid_add)(struct fa_qconn *qc, const ngtcp2_cid *cid);
    void (*cid_remove)(struct fa_qconn *qc, const ngtcp2_cid *cid);
    /* 1-RTT keys are in place: create the nghttp3 connection */
    int (*h3_setup)(struct fa_qconn *qc);
    int (*handshake_done)(struct fa_qconn *qc);
    /* client: a NEW_TOKEN from the server */
    void (*new_token)(struct fa_qconn *qc, const uint8_t *tok, size_t len);
    /* the FIN of a stream went out (all its data was handed to ngtcp2) */
    void (*fin_sent)(struct fa_qconn *qc, int64_t stream_id);
    /* the peer reset a stream (RESET_STREAM); called before nghttp3 hears of it */
    void (*stream_reset)(struct fa_qconn *qc, int64_t stream_id, uint64_t app_error_code,
                         void *stream_user_data);
    /* server: the client's certificate verified and its identity read
     * (qc->peer_id, peer_role); return 1 to admit it, or 0 with why (it is
     * then refused in the handshake) */
    int (*peer_admit)(struct fa_qconn *qc, char *why, size_t cap);
} fa_qconn_ops;

/* What refused a peer during the handshake (for the server's counters). */
enum fa_qconn_refusal {
    FA_REFUSED_NONE = 0,
    FA_REFUSED_CERT,     /* chain, validity, key purpose, name, identity */
    FA_REFUSED_REVOKED,  /* listed by a CRL */
    FA_REFUSED_ADMIT,    /* the server's admit hook (not a member) */
    FA_REFUSED_IDENTITY, /* its identity holds every connection it may */
};

/* A stream to reset in both directions once it is safe to call ngtcp2. */
typedef struct fa_qconn_shut {
    int64_t stream_id;
    uint64_t code;
} fa_qconn_shut;

typedef struct fa_qconn {
    ngtcp2_conn *conn;
    nghttp3_conn *h3;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref conn_ref;
    const fa_qconn_ops *ops;
    void *owner; /* server connection or client */
    int is_server;
    fa_udp *udp;
    struct sockaddr_storage remote;
    socklen_t remote_len;
    ngtcp2_connection_close_error last_error;
    const fa_h3_quic_opts *opts;
    /* TLS verdict */
    char peer_id[128];        /* region id (or CN), or operator name, of the verified peer */
    int peer_role;            /* enum fa_h3_role of the verified peer */
    char verify_fail[512];    /* why the peer (its certificate, or its identity) was refused */
    int refusal;              /* enum fa_qconn_refusal: what refused it */
    const char *server_name;  /* client: the name the server certificate must carry */
    const uint8_t *reset_key; /* server: 32-byte key of stateless-reset tokens */
    const fa_tls_ctx *tlsctx; /* the credentials and CRLs of the session */
    int verified;
    /* key updates */
    uint64_t since_key_update;
    uint64_t key_updates;
    int next_key_ready;
    /* qlog */
    FILE *qlog;
    /* transmit buffer (one GSO batch) */
    uint8_t *txbuf;
    /* datagram sizes (set by fa_qconn_settings from remote) */
    fa_qconn_dgram dg;
    /* stream resets requested from inside callbacks (fa_qconn_defer_reset) */
    fa_qconn_shut *shut;
    size_t nshut, capshut;
} fa_qconn;

/* Random bytes (getrandom). */
void fa_h3_random(uint8_t *p, size_t n);

/* Monotonic timestamp in ns for ngtcp2. */
uint64_t fa_h3_now(void);

/* The fields both sides set before ngtcp2_conn_{client,server}_new: who
 * owns qc and how it is driven, its socket, options and peer address, a
 * default close error and the transmit buffer (one GSO batch).  Returns 0
 * or FA_ERR_NOMEM (fa_qconn_free then frees what was set). */
int fa_qconn_prepare(fa_qconn *qc, int is_server, const fa_qconn_ops *ops, void *owner, fa_udp *udp,
                     const fa_h3_quic_opts *opts, const struct sockaddr *remote,
                     socklen_t remote_len);

/* qc's network path for ngtcp2: its socket's address and qc->remote. */
void fa_qconn_path(fa_qconn *qc, ngtcp2_path *path);

/* Fills the ngtcp2 settings/params common to both sides from opts, and
 * plans the datagram sizes (qc->dg) from the route to qc->remote, which must
 * be set. */
void fa_qconn_settings(fa_qconn *qc, ngtcp2_settings *s, ngtcp2_transport_params *p,
                       const fa_h3_quic_opts *o, uint64_t now);

/* The largest UDP payload the connection sends now: in path-sized mode the
 * cap in force, once the handshake is done also bounded by the peer's
 * max_udp_payload_size; else what ngtcp2's discovery has validated. */
size_t fa_qconn_udp_payload(fa_qconn *qc);

/* The ngtcp2 callbacks shared by both sides (the caller sets
 * client_initial / recv_client_initial / recv_retry etc.). */
void fa_qconn_callbacks(ngtcp2_callbacks *cb);

/* Opens qlog_dir/<hex cid>.sqlog and hooks it into s.  No-op without qlog_dir. */
void fa_qconn_qlog_open(fa_qconn *qc, ngtcp2_settings *s, const ngtcp2_cid *scid,
                        const ngtcp2_cid *odcid);

/* Opens the control and QPACK streams of the nghttp3 connection. */
int fa_qconn_h3_bind(fa_qconn *qc);

/* Gives back n bytes of flow-control credit on a stream and the connection. */
void fa_qconn_consume(fa_qconn *qc, int64_t stream_id, size_t n);

/* Resets a stream in both directions (RESET_STREAM + STOP_SENDING with
 * code) at the next fa_qconn_write: safe from inside any callback, where
 * ngtcp2 forbids it mid-write.  Returns 0 or FA_ERR_NOMEM. */
int fa_qconn_defer_reset(fa_qconn *qc, int64_t stream_id, uint64_t code);

/* Feeds one datagram.  Returns 0, or an ngtcp2 error code (negative, e.g.
 * NGTCP2_ERR_DRAINING, NGTCP2_ERR_RETRY, NGTCP2_ERR_DROP_CONN, NGTCP2_ERR_CRYPTO);
 * last_error is set for ones that need a CONNECTION_CLOSE. */
int fa_qconn_read(fa_qconn *qc, const struct sockaddr *from, socklen_t fromlen, unsigned ecn,
                  const uint8_t *data, size_t len, uint64_t now);

/* Writes what ngtcp2 and nghttp3 have to send, in GSO batches, for at most
 * `budget` send quanta.  Returns 0 (done until the next expiry or new data),
 * 1 (budget used up, call again soon), FA_ERR_AGAIN (the socket is full), or
 * a negative ngtcp2 error after which the connection must be closed
 * (last_error set). */
int fa_qconn_write(fa_qconn *qc, int budget);

/* Handles an expired timer.  Returns 0 or an ngtcp2 error
 * (NGTCP2_ERR_IDLE_CLOSE: drop silently). */
int fa_qconn_expiry(fa_qconn *qc, uint64_t now);

/* Writes a CONNECTION_CLOSE with last_error into buf.  Returns its length or 0. */
size_t fa_qconn_close_pkt(fa_qconn *qc, uint8_t *buf, size_t cap);

/* Frees everything but the struct itself. */
void fa_qconn_free(fa_qconn *qc);

/* A short phrase for why a connection ended, for logs. */
void fa_qconn_describe_error(fa_qconn *qc, int liberr, char *buf, size_t cap);

/* server_address.c: processes one datagram as if it had arrived on the socket
 * (fuzzing and tests). */
void fa_h3_server_feed(fa_h3_server *s, uint8_t *data, size_t len, const struct sockaddr *from,
                       socklen_t fromlen);

/* server_address.c: frees every connection without a word to the peers (fuzzing:
 * keeps inputs independent and memory bounded). */
void fa_h3_server_forget_all(fa_h3_server *s);

/* Lower-case string compare helpers for header names. */
int fa_h3_streq_nocase(const char *a, const char *b);

/* HTTP/3 error codes we send (RFC 9114 8.1). */
#define FA_H3_NO_ERROR 0x100
#define FA_H3_INTERNAL_ERROR 0x102
#define FA_H3_REQUEST_REJECTED 0x10b
#define FA_H3_REQUEST_CANCELLED 0x10c
#define FA_H3_MESSAGE_ERROR 0x10e

#endif
