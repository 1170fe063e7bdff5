/* h3.h - HTTP/3 over QUIC v1 (RFC 9000, RFC 9114) with mutual TLS: the
 * transport of fedagg (docs/architecture.md).
 *
 * Built on ngtcp2 0.12, nghttp3 0.8 and GnuTLS 3.7.  Knows nothing of rounds:
 * the aggregator registers handlers on a server, the worker sends requests
 * with a blocking client.
 *
 * Server model.  One UDP socket, one thread: fa_h3_server_run() runs an epoll
 * loop until fa_h3_server_stop() or a graceful drain completes.  Every
 * callback below runs on that loop thread, and every fa_h3_request_* /
 * fa_h3_server_* function except the ones marked "thread-safe" must be called
 * on it.  Other threads hand work to the loop with fa_h3_server_post().
 *
 * A request's life on the server:
 *
 *   on_request(req)          headers complete; route chosen by method + path prefix
 *   on_body(req, data, len)  zero or more chunks of the request body, in order
 *   on_body_end(req)         the body is complete (also for an empty body)
 *   ...                      the application responds, now or later (deferred)
 *   on_close(req, err)       always last: err 0 = response delivered, else why not
 *
 * The response may be submitted at any point after on_request (before the
 * body ends too, e.g. 413), from any later callback, timer or posted task.
 * After on_close returns, req is freed: drop every pointer to it there.
 *
 * Back-pressure.  QUIC flow-control credit for request-body bytes goes back
 * to the sender only once the application has consumed them: when on_body
 * returns 0 the chunk is consumed; when it returns FA_H3_HOLD, the application
 * keeps the bytes (it copied them) and returns the credit later with
 * fa_h3_request_consume().  A slow consumer therefore throttles the sender to
 * at most one flow-control window ahead.  Response bodies pulled with a read
 * callback are read only as fast as the peer and the network take them.
 *
 * Identity.  The server requires a client certificate chaining to the
 * configured CA and verifies it during the handshake (expiry, signature,
 * key usage, the CRL when there is one).  The certificate names one role:
 * SAN URI `fedagg://operator/<name>` an operator, `fedagg://region/<id>` a
 * region, and without any fedagg URI a single CN that is a region id names
 * that region; anything ambiguous is refused (fa_tls_peer_identity in
 * h3_internal.h has the rules).  The server's admit callback then decides
 * membership, still in the handshake.  The region reaches every handler
 * through fa_h3_request_peer() (empty for an operator), the role through
 * fa_h3_request_peer_role() and the name of either through
 * fa_h3_request_peer_name().  Handshakes that fail are refused with a TLS
 * alert and one log line saying why.  The client verifies the server's
 * certificate against its CA, its CRL and the expected server name.  0-RTT
 * is never offered nor accepted, so no request can be replayed by the
 * network.
 *
 * Errors: every function returning int returns 0 or a negative FA_ERR_* code
 * (common/fa_err.h) and fills the fa_error when one is given.
 */
#ifndef FA_TRANSPORT_H3_H
#define FA_TRANSPORT_H3_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fa_err.h"

/* ------------------------------------------------------------------------ */
/* Shared settings                                                           */
/* ------------------------------------------------------------------------ */

/* Congestion controllers (values match fedagg.CongestionControl). */
enum fa_h3_cc { FA_H3_CC_CUBIC = 0, FA_H3_CC_BBR2 = 1, FA_H3_CC_RENO = 2 };

/* When the server sends Retry (values match fedagg.RetryPolicy). */
enum fa_h3_retry { FA_H3_RETRY_ABOVE_LOAD = 0, FA_H3_RETRY_ALWAYS = 1, FA_H3_RETRY_NEVER = 2 };

/* QUIC tuning shared by client and server.  Fill with fa_h3_quic_default()
 * and override.  The transport knows nothing of config protos; from
 * fedagg.QuicConfig (proto/config.proto) the caller copies:
 *   max_stream_window -> max_stream_window      congestion_control -> cc
 *   max_connection_window -> max_connection_window   idle_timeout_ms -> idle_timeout_ms
 *   max_streams_per_connection -> max_streams   qlog_dir -> qlog_dir
 *   gso -> gso, gro -> gro                      max_udp_payload_size -> max_udp_payload
 * and, into fa_h3_server_config: max_connections, max_body_bytes, retry,
 * retry_load_threshold, static_secret_file (fa_h3_load_static_secret into
 * static_secret); into fa_h3_client_config: reconnect_initial_ms,
 * reconnect_max_ms.  The enum values of cc and retry equal the proto's. */
typedef struct fa_h3_quic_opts {
    uint64_t max_stream_window;     /* per-stream receive window, bytes (32 MiB) */
    uint64_t max_connection_window; /* per-connection receive window, bytes (64 MiB) */
    int cc;                         /* enum fa_h3_cc (BBR2) */
    uint32_t idle_timeout_ms;       /* close a silent connection after this (60000) */
    uint32_t max_streams;           /* concurrent requests per connection (64) */
    const char *qlog_dir;           /* one qlog file per connection here; NULL = none */
    int gso;                        /* UDP GSO on send when the kernel has it (1) */
    int gro;                        /* UDP GRO on receive when the kernel has it (1) */
    /* Largest UDP payload, bytes, sent and (as QUIC's max_udp_payload_size
     * transport parameter) accepted; the peer's parameter bounds what we send.
     * 0 = auto, sized from the kernel's route to the peer as TCP sizes its MSS:
     *   route MTU >= 9000 (loopback's 65536, a jumbo-frame LAN): datagrams of
     *     route MTU - IP/UDP headers (at most 65507 over IPv4, 65527 over
     *     IPv6) once the handshake is done, no discovery;
     *   otherwise, or unknown: standard path MTU discovery from 1200 up to
     *     1452 bytes (right for the Internet).
     * 1200..1452 = discovery up to that size (1452: always Internet-sized,
     * e.g. through a loopback relay that emulates a WAN).  Larger = that size
     * without discovery, trusting the path to carry it (e.g. 8952 for a
     * 9000-byte MTU); on a route that takes less, the route's size when its
     * MTU is 9000 or more, else as auto.
     * Path-sized datagrams shrink when the kernel learns a smaller path MTU
     * (EMSGSIZE), and for a while after a probe timeout (the path may drop
     * them silently); see h3_internal.h, fa_qconn_dgram. */
    uint32_t max_udp_payload;
    /* Test knob: initiate a QUIC key update after every this many stream
     * bytes sent or received (0 = only when the AEAD confidentiality limit
     * requires one, which ngtcp2 does by itself).  Lets tests cross many key
     * phases in a short transfer. */
    uint64_t key_update_bytes;
    /* Initial RTT estimate, ms (0 = ngtcp2 default 333 ms). */
    uint32_t initial_rtt_ms;
} fa_h3_quic_opts;

/* Fills o with the defaults above. */
void fa_h3_quic_default(fa_h3_quic_opts *o);

/* One HTTP field.  Names are lower case on the wire; lookups ignore case. */
typedef struct fa_h3_header {
    const char *name;
    const char *value;
} fa_h3_header;

/* Pull callback for a body being sent: write up to cap bytes into buf and
 * return how many (> 0), 0 at the end of the body, FA_ERR_AGAIN when no
 * bytes are ready yet (server side: call fa_h3_request_resume() when they
 * are), or another negative code to abort the stream. */
typedef ssize_t (*fa_h3_read_fn)(void *arg, uint8_t *buf, size_t cap);

/* Reads (or creates, with 32 random bytes, mode 0600) the static secret from
 * which the server derives stateless-reset and Retry/NEW_TOKEN keys, so that
 * they survive a restart.  The file holds exactly 32 raw bytes, or 64 hex
 * digits (either case) followed by at most one line end ("\n" or "\r\n");
 * nothing else (no sign, no space), and it must not be readable by group
 * or others.  Returns 0, FA_ERR_IO, FA_ERR_NOTFOUND (create 0), FA_ERR_AUTH
 * (mode), FA_ERR_PARSE; secret is untouched on error. */
int fa_h3_load_static_secret(const char *path, int create, uint8_t secret[32], fa_error *err);

/* ------------------------------------------------------------------------ */
/* Server                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct fa_h3_server fa_h3_server;
typedef struct fa_h3_request fa_h3_request;

typedef struct fa_h3_server_config {
    const char *listen;    /* "127.0.0.1:4433", "[::]:443"; port 0 = any free port */
    const char *cert_file; /* PEM chain of the server */
    const char *key_file;  /* its PEM private key */
    const char *ca_file;   /* PEM CA(s) that client certificates must chain to */
    fa_h3_quic_opts quic;
    uint32_t max_connections;      /* further handshakes are refused (1024) */
    uint64_t max_body_bytes;       /* larger request bodies get 413 (64 GiB) */
    int retry;                     /* enum fa_h3_retry (RETRY_ABOVE_LOAD) */
    uint32_t retry_load_threshold; /* connections above which Retry is sent (64) */
    /* Connection slots against peers that hold them (see "Slots" below).
     * An address is an IPv4 address or an IPv6 /64. */
    uint32_t max_connections_per_address;  /* live connections from one address (64) */
    uint32_t max_handshakes;               /* handshakes in progress, all addresses (256) */
    uint32_t max_handshakes_per_address;   /* ... from one address (8) */
    uint32_t handshake_timeout_ms;         /* a handshake not done by then is dropped (3000) */
    uint32_t max_connections_per_identity; /* connections of one certificate's region or
                                               operator (8) */
    /* The budget of request bytes the handlers hold buffered
     * (fa_h3_request_reserve): all requests together (256 MiB), and those
     * of one identity (64 MiB). */
    uint64_t max_buffered_bytes;
    uint64_t max_buffered_bytes_per_identity;
    /* Membership at the handshake: called (loop thread) once a client's
     * certificate has verified and its identity is read; returns n > 0 to
     * admit role/name with a share of n (it may hold n times
     * max_connections_per_identity connections: a region in n
     * federations), or 0 and a reason in why, and the handshake is refused
     * with a TLS alert.  NULL admits every certificate of the CA, share 1. */
    int (*admit)(void *arg, int role, const char *name, char *why, size_t whycap);
    void *admit_arg;
    /* Revocation: a CRL file (PEM or DER, signed by a CA of ca_file);
     * certificates it lists are refused during the handshake, and live
     * connections of one are closed when a new version lists it.  Read
     * again when it changes (checked every second) and on SIGHUP (with
     * drain_on_signal) or fa_h3_server_reload.  NULL = no revocation. */
    const char *crl_file;
    /* Static secret for stateless reset and address-validation tokens; when
     * has_static_secret is 0 a random one is drawn (tokens then die with the
     * process). */
    uint8_t static_secret[32];
    int has_static_secret;
    /* How long a graceful drain waits for in-flight requests before closing
     * the remaining connections, ms (30000). */
    uint32_t drain_timeout_ms;
    /* When nonzero, fa_h3_server_run() blocks SIGTERM, SIGINT and SIGHUP in
     * the calling thread and drains gracefully when one of the first two
     * arrives, reads crl_file again on SIGHUP (signalfd).  Block them in
     * every other thread of the process too. */
    int drain_on_signal;
    /* Periodic tick for the application's deadlines: on_tick runs on the
     * loop every tick_ms (0 = never). */
    uint32_t tick_ms;
    void (*on_tick)(fa_h3_server *srv, void *arg);
    void *tick_arg;
} fa_h3_server_config;

/* Fills c with defaults (listen, files and callbacks NULL).
 *
 * Slots.  A peer must not be able to hold the connections others need.
 * A new connection from an address that has max_connections_per_address
 * is refused.  A handshake in progress holds a slot for at most
 * handshake_timeout_ms, and at most max_handshakes_per_address of them
 * come from one address: beyond, the address must answer a Retry (so a
 * spoofed address cannot use up a real one's share), and once it has,
 * its own oldest handshake makes room.  At max_handshakes (or
 * max_connections) a new client must answer a Retry too, and then the
 * oldest handshake of all makes room: a flood that answers Retry from
 * many addresses delays fresh clients by one round trip, it does not lock
 * them out.  A certificate's region or operator may hold
 * max_connections_per_identity connections (times its share, see admit
 * above): its oldest connection without
 * a request in flight makes room for a new one (a region that restarted),
 * and when all are busy the new one is refused with CONNECTION_REFUSED
 * after its handshake (the client retries later; this is no certificate
 * error). */
void fa_h3_server_config_default(fa_h3_server_config *c);

/* What on_body returns to keep the credit of a chunk (see top of file). */
#define FA_H3_HOLD 1

typedef struct fa_h3_handler {
    /* Headers complete.  Respond now, later, or reject.  A negative return
     * answers 500 (unless a response was already submitted). */
    int (*on_request)(fa_h3_request *req, void *arg);
    /* A chunk of request body, valid during the call only.  Returns 0
     * (consumed), FA_H3_HOLD (credit returned later by
     * fa_h3_request_consume), or a negative code: stop reading and reset the
     * request (on_close follows with that code).  NULL = discard bodies. */
    int (*on_body)(fa_h3_request *req, const uint8_t *data, size_t len, void *arg);
    /* The whole body has arrived.  Optional. */
    void (*on_body_end)(fa_h3_request *req, void *arg);
    /* Always the last call for req.  err: 0 response fully delivered;
     * FA_ERR_CANCELLED the client reset the stream or the server drained;
     * FA_ERR_QUIC the connection was lost or closed; FA_ERR_TOOBIG the body
     * exceeded the limit (413 was sent); FA_ERR_TIMEOUT the drain timed out.
     * Optional. */
    void (*on_close)(fa_h3_request *req, int err, void *arg);
} fa_h3_handler;

/* Creates a server bound to cfg->listen (the socket is open on return, so
 * fa_h3_server_port() is known).  Loads and checks the certificate, key and
 * CA.  Returns 0, FA_ERR_INVAL, FA_ERR_IO, FA_ERR_TLS, FA_ERR_NOMEM,
 * FA_ERR_CRYPTO (the keys could not be derived from the static secret). */
int fa_h3_server_new(fa_h3_server **out, const fa_h3_server_config *cfg, fa_error *err);

/* Frees the server, closing every connection without ceremony.  NULL is a
 * no-op.  Not while fa_h3_server_run() runs. */
void fa_h3_server_del(fa_h3_server *srv);

/* The bound UDP port (useful with port 0). */
int fa_h3_server_port(const fa_h3_server *srv);

/* Registers h for requests whose method equals `method` ("*" = any) and whose
 * path starts with `prefix`; the longest matching prefix wins.  A path that
 * matches no prefix gets 404; one that matches only under other methods 405.
 * HEAD is served by the route GET would take (RFC 9110 9.3.2): the handler
 * responds as to GET, and every response to a HEAD request, errors
 * included, goes without its body (a streamed body is never read; its done
 * and a borrowed body's release still run).
 * Call before fa_h3_server_run().  Returns 0, FA_ERR_INVAL, FA_ERR_NOMEM. */
int fa_h3_server_route(fa_h3_server *srv, const char *method, const char *prefix,
                       const fa_h3_handler *h, void *arg);

/* Runs the loop until fa_h3_server_stop(), or until a drain (signal or
 * fa_h3_server_drain) has finished every in-flight request.  Returns 0 or
 * FA_ERR_IO / FA_ERR_NOMEM on a fatal loop error. */
int fa_h3_server_run(fa_h3_server *srv, fa_error *err);

/* Thread-safe and async-signal-safe: starts a graceful drain: new
 * connections are refused, clients are told (HTTP/3 GOAWAY) to open no new
 * requests, requests in flight finish, then fa_h3_server_run() returns. */
void fa_h3_server_drain(fa_h3_server *srv);

/* Loop thread: 1 once a drain has started (the application answers the
 * requests it holds open for an event, such as long-polls, rather than
 * keep the drain waiting for them), else 0. */
int fa_h3_server_draining(const fa_h3_server *srv);

/* Thread-safe and async-signal-safe: makes fa_h3_server_run() return soon,
 * closing every connection. */
void fa_h3_server_stop(fa_h3_server *srv);

/* Thread-safe and async-signal-safe: reads crl_file again soon, whether or
 * not it changed (as SIGHUP does). */
void fa_h3_server_reload(fa_h3_server *srv);

/* Thread-safe: runs fn(srv, arg) on the loop thread soon (an eventfd wakes
 * the loop).  Returns 0 or FA_ERR_NOMEM. */
int fa_h3_server_post(fa_h3_server *srv, void (*fn)(fa_h3_server *srv, void *arg), void *arg);

/* Loop thread: runs fn once after delay_ms.  Returns a timer id > 0, or a
 * negative code. */
int64_t fa_h3_server_timer(fa_h3_server *srv, uint64_t delay_ms,
                           void (*fn)(fa_h3_server *srv, void *arg), void *arg);

/* Loop thread: cancels a timer that has not fired yet (unknown ids are ignored). */
void fa_h3_server_timer_cancel(fa_h3_server *srv, int64_t id);

/* Server statistics (loop thread, or after run returned). */
typedef struct fa_h3_server_stats {
    uint64_t connections_accepted, connections_refused, handshakes_failed;
    uint64_t retries_sent, version_negotiations_sent, stateless_resets_sent;
    uint64_t datagrams_dropped, requests, current_connections;
    /* Largest UDP payloads sent and received on the socket, bytes; times a
     * connection sent small datagrams for a while after a probe timeout with
     * path-sized ones in flight, and times the kernel's path MTU (EMSGSIZE)
     * made one shrink them for good (see max_udp_payload). */
    uint64_t largest_datagram_sent, largest_datagram_received;
    uint64_t datagram_fallbacks, datagram_shrinks;
    /* Slots: handshakes in progress now; handshakes dropped at
     * handshake_timeout_ms, or to make room for another; connections
     * refused for their address's count, for their identity's count;
     * connections closed to make room for their identity's new one;
     * certificates refused as revoked or by admit (not members); live
     * connections closed when a new CRL revoked them; CRL versions
     * loaded. */
    uint64_t current_handshakes, handshakes_timed_out, handshakes_evicted;
    uint64_t refused_address, refused_identity, evicted_identity;
    uint64_t refused_revoked, refused_admit, closed_revoked, crl_loads;
    /* The budget of buffered request bytes: held now, the most ever held,
     * reservations refused for the identity's share, for the server's. */
    uint64_t buffered_bytes, buffered_peak, buffer_refused_identity, buffer_refused_server;
} fa_h3_server_stats;
void fa_h3_server_get_stats(const fa_h3_server *srv, fa_h3_server_stats *st);

/* --- the request being served (loop thread only) --- */

const char *fa_h3_request_method(const fa_h3_request *req);
const char *fa_h3_request_path(const fa_h3_request *req);  /* without the query */
const char *fa_h3_request_query(const fa_h3_request *req); /* after '?', or "" */
/* Value of the first field named `name` (case-insensitive), or NULL. */
const char *fa_h3_request_header(const fa_h3_request *req, const char *name);
/* content-length of the request, or -1 when absent. */
int64_t fa_h3_request_content_length(const fa_h3_request *req);
/* Body bytes received so far. */
uint64_t fa_h3_request_body_received(const fa_h3_request *req);
/* Roles of a verified client certificate (see Identity at the top). */
enum fa_h3_role {
    FA_H3_ROLE_NONE = 0,     /* no verified certificate (never seen by handlers) */
    FA_H3_ROLE_REGION = 1,   /* SAN URI fedagg://region/<id>, or only a CN */
    FA_H3_ROLE_OPERATOR = 2, /* SAN URI fedagg://operator/<name> */
};
/* The region of the client's verified certificate: the id of its SAN URI
 * fedagg://region/<id>, else its subject CN; "" (never NULL) when the
 * certificate is an operator's, so that no operator passes for a region. */
const char *fa_h3_request_peer(const fa_h3_request *req);
/* enum fa_h3_role of the client's certificate. */
int fa_h3_request_peer_role(const fa_h3_request *req);
/* The name the certificate gives its holder, whatever the role: the region
 * id, or the operator's name (for logs and the audit log). */
const char *fa_h3_request_peer_name(const fa_h3_request *req);
/* The client's address as "ip:port". */
const char *fa_h3_request_peer_addr(const fa_h3_request *req);
fa_h3_server *fa_h3_request_server(const fa_h3_request *req);

void fa_h3_request_set_data(fa_h3_request *req, void *data);
void *fa_h3_request_get_data(const fa_h3_request *req);

/* Lowers (or raises) the body limit of this request below the server's
 * max_body_bytes.  Call in on_request. */
void fa_h3_request_set_max_body(fa_h3_request *req, uint64_t max);

/* Returns n bytes of credit held by FA_H3_HOLD (see top of file). */
void fa_h3_request_consume(fa_h3_request *req, size_t n);

/* The budget of buffered request bytes.  A handler that keeps request
 * bytes in memory (a message it parses once whole) reserves them first,
 * so that no peer, and no set of peers, can make the server hold more
 * than max_buffered_bytes_per_identity and max_buffered_bytes.  The first
 * FA_H3_RESERVE_FLOOR bytes of each request count against the server's
 * budget only: an identity whose big requests hold its share still gets
 * its small ones through (a region's protocol messages are a few KiB),
 * and what a peer holds that way is bounded by its connections and
 * streams (8 x 64 x 64 KiB = 32 MiB with the defaults).  Returns 0
 * (reserved), FA_ERR_NOSPACE (the request's identity holds its share:
 * answer 429 and retry later) or FA_ERR_AGAIN (the server holds its
 * budget: answer 503); nothing is reserved then.  What a request holds
 * is released when it closes (after on_close), or earlier with
 * fa_h3_request_release (n beyond what it holds counts as all; the
 * bytes beyond the floor are released first). */
#define FA_H3_RESERVE_FLOOR (64u << 10)
int fa_h3_request_reserve(fa_h3_request *req, uint64_t n);
void fa_h3_request_release(fa_h3_request *req, uint64_t n);

/* Responds with a body copied from a buffer (may be NULL/0).  `headers` are
 * copied.  Returns 0, FA_ERR_STATE (already responded or closed),
 * FA_ERR_INVAL, FA_ERR_NOMEM. */
int fa_h3_respond(fa_h3_request *req, int status, const fa_h3_header *headers, size_t nheaders,
                  const void *body, size_t len);

/* Responds with a body pulled from read(arg, buf, cap) as the network takes
 * it.  content_length >= 0 is sent as the content-length field.  done(arg, err)
 * (may be NULL) runs once when the body is finished or abandoned, so arg can
 * be released.  Same returns as fa_h3_respond. */
int fa_h3_respond_stream(fa_h3_request *req, int status, const fa_h3_header *headers,
                         size_t nheaders, int64_t content_length, fa_h3_read_fn read,
                         void (*done)(void *arg, int err), void *arg);

/* Responds with a body the application owns and leaves unchanged until
 * release(arg) runs, once, when the stream is over (ngtcp2 may resend any
 * byte until the peer acknowledges it): e.g. an mmap'ed model file, sent
 * without a copy.  len may exceed 4 GiB.  release may be NULL.  Same
 * returns as fa_h3_respond (on failure release is not called). */
int fa_h3_respond_ref(fa_h3_request *req, int status, const fa_h3_header *headers, size_t nheaders,
                      const void *body, uint64_t len, void (*release)(void *arg), void *arg);

/* After a read callback returned FA_ERR_AGAIN: bytes are ready again. */
void fa_h3_request_resume(fa_h3_request *req);

/* Aborts the request: resets the stream in both directions (on_close follows
 * with FA_ERR_CANCELLED). */
void fa_h3_request_cancel(fa_h3_request *req);

/* ------------------------------------------------------------------------ */
/* Client (blocking, one request at a time per client object)               */
/* ------------------------------------------------------------------------ */

typedef struct fa_h3_client fa_h3_client;

typedef struct fa_h3_client_config {
    const char *server;      /* "host:port" or "[v6]:port" */
    const char *server_name; /* name the server certificate must carry; NULL = host part */
    const char *ca_file;     /* PEM CA that the server certificate must chain to */
    const char *cert_file;   /* PEM chain of this client (region certificate) */
    const char *key_file;    /* its private key */
    /* A CRL file of the CA (PEM or DER): a server certificate it lists is
     * refused.  Read at fa_h3_client_new and again before a connection
     * when it changed.  NULL = no revocation. */
    const char *crl_file;
    fa_h3_quic_opts quic;
    uint32_t connect_timeout_ms;   /* one handshake attempt (10000) */
    uint32_t reconnect_initial_ms; /* first back-off after a failed connect (500) */
    uint32_t reconnect_max_ms;     /* back-off cap; doubles with +-50% jitter (30000) */
    uint32_t connect_attempts;     /* handshake attempts per request, 0 = until the
                                      request's timeout (5) */
    /* While a request waits for its response (a long-poll), PING the server
     * once it has been silent this long, ms (1000; at most a third of the
     * idle timeout).  The PINGs keep the connection open, and they are how
     * a client learns within about this long that the server restarted:
     * the new process, which knows no connection, answers each with a
     * stateless reset derived from the static secret, and the request is
     * sent again on a fresh connection at once.  0 = no PING: a dead
     * server is noticed at the idle timeout only, and a long-poll longer
     * than the idle timeout loses its connection (kept to measure what the
     * PINGs buy).  The environment variable FEDAGG_QUIC_KEEPALIVE_MS, when
     * set, overrides this (benchmarks and tests of processes whose
     * configuration has no such field). */
    uint32_t keepalive_ms;
} fa_h3_client_config;

void fa_h3_client_config_default(fa_h3_client_config *c);

typedef struct fa_h3_client_req {
    const char *method; /* "GET", "POST"... */
    const char *path;   /* with the query, e.g. "/v1/audit/proof?round=3" */
    const fa_h3_header *headers;
    size_t nheaders;
    /* Request body: a buffer, or a pull callback (body_read), or neither. */
    const void *body;
    size_t body_len;
    fa_h3_read_fn body_read;
    void *body_arg;
    int64_t body_length; /* with body_read: sent as content-length when >= 0 */
    /* Response body: pushed to on_body as it arrives (a negative return
     * cancels the request with that code), or, when on_body is NULL,
     * collected into resp->body up to max_response_bytes (default 64 MiB when
     * 0; larger gives FA_ERR_TOOBIG). */
    int (*on_body)(void *arg, const uint8_t *data, size_t len);
    void *on_body_arg;
    uint64_t max_response_bytes;
    /* Whole-request deadline, ms, including (re)connecting; 0 = none. */
    uint32_t timeout_ms;
    /* Nonzero when the request may be sent again after the connection broke
     * mid-request (an idempotent request).  Requests that provably never
     * reached the server are always retried, at once on a fresh connection
     * (a stateless reset before any response byte: the server restarted).
     * Never once response body bytes went to on_body: the connection loss
     * is returned (FA_ERR_QUIC) and the caller starts its sink over. */
    int idempotent;
} fa_h3_client_req;

typedef struct fa_h3_response {
    int status;
    fa_h3_header *headers; /* owned, freed by fa_h3_response_free */
    size_t nheaders;
    uint8_t *body; /* owned when collected; NUL-terminated for convenience */
    size_t body_len;
    uint64_t body_received; /* total body bytes, also when pushed to on_body */
} fa_h3_response;

/* Value of the first response field named `name`, or NULL. */
const char *fa_h3_response_header(const fa_h3_response *resp, const char *name);
void fa_h3_response_free(fa_h3_response *resp);

/* Creates a client (no network traffic until the first request).  Loads the
 * certificate, key and CA.  Returns 0, FA_ERR_INVAL, FA_ERR_TLS, FA_ERR_NOMEM. */
int fa_h3_client_new(fa_h3_client **out, const fa_h3_client_config *cfg, fa_error *err);
void fa_h3_client_del(fa_h3_client *c);

/* Connects now (with back-off) if not connected.  Returns 0, FA_ERR_TLS (the
 * server certificate or ours was refused: not retried), FA_ERR_TIMEOUT,
 * FA_ERR_QUIC, FA_ERR_IO. */
int fa_h3_client_connect(fa_h3_client *c, uint32_t timeout_ms, fa_error *err);

/* Sends one request and waits for the whole response.  Returns 0 when a
 * response arrived (any status: check resp->status), FA_ERR_TIMEOUT,
 * FA_ERR_TLS, FA_ERR_QUIC (connection lost mid-request and not retried),
 * FA_ERR_TOOBIG, FA_ERR_CANCELLED (on_body or body_read failed; that code
 * is returned instead when it is an FA_ERR_*), FA_ERR_HTTP (malformed response).
 * resp is filled on success; free it with fa_h3_response_free. */
int fa_h3_client_request(fa_h3_client *c, const fa_h3_client_req *req, fa_h3_response *resp,
                         fa_error *err);

/* Closes the connection politely (CONNECTION_CLOSE); the next request reconnects. */
void fa_h3_client_close(fa_h3_client *c);

/* Client statistics. */
typedef struct fa_h3_client_stats {
    uint64_t connects, connect_failures, key_updates, bytes_sent, bytes_received;
    uint64_t datagrams_sent, datagrams_received, send_calls, recv_calls;
    int retry_seen; /* the last handshake went through a Retry */
    /* The current connection's largest UDP payload (see max_udp_payload) and
     * the route MTU it was sized from (0 = unknown); over all connections:
     * the largest payloads sent and received, and the fallbacks and shrinks
     * of path-sized datagrams (as in fa_h3_server_stats). */
    uint32_t udp_payload, route_mtu;
    uint64_t largest_datagram_sent, largest_datagram_received;
    uint64_t datagram_fallbacks, datagram_shrinks;
} fa_h3_client_stats;
void fa_h3_client_get_stats(const fa_h3_client *c, fa_h3_client_stats *st);

#endif
