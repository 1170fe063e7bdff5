/* server_internal.h - the pieces of the HTTP/3 server (internal to
 * transport/): its state and the functions its files share.
 *
 *   server.c          lifecycle, the epoll loop, application timers and
 *                     posted tasks, the graceful drain
 *   server_conn.c     connections: creation, their ngtcp2 timers, writes,
 *                     the closing and draining periods, the end
 *   server_request.c  requests: routing, headers, bodies and their
 *                     flow-control credit, responses (the nghttp3 callbacks)
 *   server_address.c  datagram dispatch and who may open a connection:
 *                     address validation (Retry, NEW_TOKEN), Version
 *                     Negotiation, stateless resets, the static secret and
 *                     the keys derived from it
 *
 * Everything here runs on the loop thread.
 */
#ifndef FA_TRANSPORT_SERVER_INTERNAL_H
#define FA_TRANSPORT_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "transport/cid_map_internal.h"
#include "transport/h3_internal.h"
#include "transport/stateless_internal.h"
#include "transport/timer_heap_internal.h"

#define SCIDLEN FA_STATELESS_CIDLEN
/* Largest header section of a request, bytes (QPACK-decoded, with 32
 * bytes of overhead per field as RFC 9114 4.2.2 counts it). */
#define MAX_HEADER_BYTES 65536

enum { HI_CONN = 0, HI_TIMER = 1 };

typedef struct hitem {
    fa_timer_item t; /* first member: heap items cast back */
    int kind;
} hitem;

typedef struct app_timer {
    hitem h; /* first member: heap items cast back */
    int64_t id;
    void (*fn)(fa_h3_server *, void *);
    void *arg;
    uint64_t period; /* ns; 0 = once */
} app_timer;

struct route {
    char *method;
    char *prefix;
    size_t plen;
    fa_h3_handler h;
    void *arg;
};

struct task {
    struct task *next;
    void (*fn)(fa_h3_server *, void *);
    void *arg;
};

enum conn_state { CS_LIVE = 0, CS_CLOSING, CS_DRAINING };

typedef struct srv_conn {
    fa_qconn q; /* first member */
    hitem h;
    fa_h3_server *srv;
    struct srv_conn *prev, *next; /* all connections */
    struct srv_conn *dirty_next;  /* pending write */
    int dirty;
    int state;
    ngtcp2_cid ocid;   /* the client's first DCID, routed until the end */
    uint8_t *closebuf; /* CONNECTION_CLOSE to repeat in the closing period */
    size_t closelen;
    unsigned close_rx; /* packets received while closing (resend on powers of 2) */
    int established;   /* handshake completed */
    int goaway_sent;
    uint32_t share;      /* of max_connections_per_identity: the admit hook's (1 without) */
    uint64_t last_rx;    /* when its last packet arrived (fa_h3_now) */
    fa_h3_request *reqs; /* open requests */
    size_t nreqs;
    char addr[64];
    /* slots (server_address.c): its address's counts, and while the
     * handshake is in progress, its place among them, oldest first */
    struct addr_slot *slot;
    struct srv_conn *hs_prev, *hs_next;
    int in_handshake;
} srv_conn;

/* The request bytes an identity's handlers hold buffered
 * (fa_h3_request_reserve).  Freed at zero. */
typedef struct ident_budget {
    struct ident_budget *next;
    int role;
    uint64_t bytes;
    char name[FA_TLS_NAME_MAX + 1];
} ident_budget;

/* The connections of one address (an IPv4 address or an IPv6 /64), as
 * counted against max_connections_per_address and
 * max_handshakes_per_address.  Freed when both reach 0. */
typedef struct addr_slot {
    uint8_t key[16];
    uint32_t live, handshakes;
    uint32_t pins; /* held by on_new_initial while it decides */
} addr_slot;

struct fa_h3_request {
    srv_conn *c;
    fa_h3_request *prev, *next;
    int64_t sid;
    char *method, *path, *query, *authority;
    fa_h3_header *hdrs;
    size_t nhdrs, caphdrs, hdr_bytes;
    int64_t content_length;
    uint64_t body_rx, max_body, held;
    const struct route *route;
    void *data;
    fa_bodyq body;
    void (*body_done)(void *arg, int err);
    void *body_done_arg;
    void (*release)(void *arg); /* borrowed body: at req_free */
    void *release_arg;
    int headers_done, body_done_flag, responded, closed, refused_body, app_err, bad;
    int head;                   /* a HEAD request: every response goes without its body */
    uint64_t reserved;          /* bytes of the buffer budget it holds */
    uint64_t shared;            /* ... of them beyond the floor: its identity's */
    struct ident_budget *ident; /* its identity's share, while shared */
    int fin_sent;               /* the whole response is on the wire */
};

struct fa_h3_server {
    fa_h3_server_config cfg;
    char *qlog_dir;
    fa_tls_ctx tls;
    fa_udp udp;
    int epfd, evfd, sigfd;
    int out_armed; /* EPOLLOUT registered */
    uint8_t token_key[32], reset_key[32];
    struct route *routes;
    size_t nroutes;
    /* connections */
    fa_cid_map cids; /* every CID a connection answers to -> srv_conn */
    srv_conn *conns;
    size_t nlive;
    srv_conn *dirty_head;
    /* the budget of buffered request bytes */
    uint64_t buffered;
    ident_budget *idents;
    /* slots */
    fa_cid_map addrs;                /* address key -> addr_slot */
    srv_conn *hs_oldest, *hs_newest; /* handshakes in progress */
    size_t nhandshakes;
    struct {
        uint64_t since;      /* start of the current second (ns) */
        unsigned lines;      /* refusal lines written in it */
        uint64_t suppressed; /* refusal lines not written since the last note */
    } refusal_log;
    /* timers */
    fa_timer_heap timers; /* of hitem */
    int64_t next_timer_id;
    /* posted tasks and cross-thread flags */
    pthread_mutex_t mu;
    struct task *tasks, *tasks_tail;
    atomic_int drain_req, stop_req, reload_req;
    int draining, stopping;
    uint64_t drain_deadline;
    fa_stateless_limit resets;
    fa_h3_server_stats st;
    uint8_t pkt[NGTCP2_MAX_UDP_PAYLOAD_SIZE + 256];
};

/* ------------------------------------------------------------ server.c */

/* Adds a timer on the loop: fn after delay_ns, then every period ns (0 =
 * once).  Returns its id > 0 or FA_ERR_NOMEM. */
int64_t fa_srv_timer_add(fa_h3_server *s, uint64_t delay_ns, uint64_t period,
                         void (*fn)(fa_h3_server *, void *), void *arg);

/* ------------------------------------------------------- server_conn.c */

/* Creates the connection of a client's first Initial hd (ocid: the DCID
 * before Retry, NULL without Retry), counted on its address's slot, and
 * maps its CIDs.  NULL when it cannot
 * (out of memory, TLS setup failed: logged). */
srv_conn *fa_srv_conn_new(fa_h3_server *s, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *ocid,
                          const struct sockaddr *from, socklen_t fromlen, addr_slot *slot);
/* Queues c for a write pass of the loop. */
void fa_srv_mark_dirty(srv_conn *c);
/* Puts c's next ngtcp2 expiry in the timer heap. */
void fa_srv_conn_schedule(srv_conn *c);
/* Writes what c has to send (see fa_qconn_write); closes it on error. */
void fa_srv_conn_write(srv_conn *c);
/* Ends c after the library error liberr (0: our own graceful close with
 * last_error set); see server_conn.c. */
void fa_srv_conn_close(srv_conn *c, int liberr);
/* Graceful application close (CONNECTION_CLOSE with code). */
void fa_srv_conn_close_app(srv_conn *c, uint64_t code);
/* Frees c at once: its requests end with FA_ERR_QUIC, its CIDs unmapped. */
void fa_srv_conn_free(srv_conn *c);
/* Ends every open request of c with err. */
void fa_srv_conn_fail_requests(srv_conn *c, int err);
/* 1 while c serves a request whose response is not all on the wire (one
 * answered in full lingers until its client acknowledges the end of its
 * stream, which a client gone since never does). */
int fa_srv_conn_busy(const srv_conn *c);

/* ---------------------------------------------------- server_request.c */

/* The qconn hooks of the request side (fa_qconn_ops): the nghttp3
 * connection once 1-RTT keys exist, a stream reset by the client, the FIN
 * of a response handed to ngtcp2. */
int fa_srv_h3_setup(fa_qconn *qc);
void fa_srv_stream_reset(fa_qconn *qc, int64_t sid, uint64_t code, void *sud);
void fa_srv_fin_sent(fa_qconn *qc, int64_t sid);
/* on_close with err unless already told, then frees r (the stream is over
 * or the connection is going away). */
void fa_srv_req_finish(fa_h3_request *r, int err);

/* ---------------------------------------------------- server_address.c */

/* Slots of addresses: the slot of from (created, NULL when out of
 * memory); a connection counted on it (live, and as a handshake in
 * progress) and uncounted (the slot is freed at zero); a handshake done. */
addr_slot *fa_srv_slot_of(fa_h3_server *s, const struct sockaddr *from);
void fa_srv_slot_enter(fa_h3_server *s, srv_conn *c, addr_slot *slot);
void fa_srv_slot_leave(fa_h3_server *s, srv_conn *c);
void fa_srv_slot_handshake_done(fa_h3_server *s, srv_conn *c);
/* Whether a refusal may be logged now: at most 10 lines a second, then
 * one line a second saying how many were left out. */
int fa_srv_refusal_log_ok(fa_h3_server *s);

/* Every datagram from the socket (fa_udp_rx_fn): to its connection, or to
 * the stateless replies, or a new connection. */
void fa_srv_on_datagram(void *arg, uint8_t *data, size_t len, const struct sockaddr *from,
                        socklen_t fromlen, unsigned ecn);
/* Sends one datagram with no connection behind it. */
void fa_srv_send_raw(fa_h3_server *s, const struct sockaddr *to, socklen_t tolen, const uint8_t *p,
                     size_t n);
/* Wall-clock time in ns, the clock of address-validation tokens. */
uint64_t fa_srv_realtime_ns(void);
/* Derives the stateless-reset and token keys of s from the static secret.
 * Returns 0 or FA_ERR_CRYPTO. */
int fa_srv_derive_keys(fa_h3_server *s, const uint8_t secret[32], fa_error *err);

#endif
