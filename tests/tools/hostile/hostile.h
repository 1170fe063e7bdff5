/* hostile.h - peers that misbehave on purpose, for the tests of the
 * aggregator's defences and for `fedagg-bench hostile`.
 *
 * Each is what an attacker does to the aggregator's ports, made with the
 * transport's own pieces (the QUIC connection core of transport/, plain
 * sockets for HTTP/1.1): half-open QUIC handshakes that answer Retry and
 * then fall silent; a CONNECTION_CLOSE whose reason is chosen text; many
 * request streams on one connection whose bodies never end; idle TCP
 * connections to the metrics port.  The fedagg-hostile binary
 * (hostile_main.c) runs them from the command line.
 */
#ifndef FA_TESTS_HOSTILE_H
#define FA_TESTS_HOSTILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* --------------------------------------------------- half-open handshakes */

typedef struct fa_hq_flood fa_hq_flood;

typedef struct fa_hq_flood_stats {
    uint64_t started;  /* Initials sent for a new handshake */
    uint64_t retries;  /* Retry packets answered */
    uint64_t answered; /* handshakes the server answered (its first flight) */
    uint64_t refused;  /* handshakes the server closed (CONNECTION_CLOSE) */
    unsigned holding;  /* handshakes now answered and left unfinished */
} fa_hq_flood_stats;

/* count handshakes to server ("host:port"), from the local addresses
 * bind[0..nbind) in turn (nbind 0: the wildcard address), each from its
 * own port: the Initial, the Initial again with the token of the server's
 * Retry, and then nothing, as a client that proves its address and never
 * finishes.  Each is started again once renew_ms old (0: never), so the
 * server always sees fresh ones.  ca_file: any PEM CA (the client's TLS
 * needs one; the handshake never gets that far).  Nothing is sent before
 * fa_hq_flood_run.  Returns 0, FA_ERR_INVAL, FA_ERR_IO, FA_ERR_TLS,
 * FA_ERR_NOMEM. */
int fa_hq_flood_new(fa_hq_flood **out, const char *server, const char *ca_file,
                    const char *const *bind, size_t nbind, unsigned count, uint32_t renew_ms,
                    fa_error *err);

/* Sends, reads and renews for ms milliseconds. */
void fa_hq_flood_run(fa_hq_flood *f, uint32_t ms);
void fa_hq_flood_get_stats(const fa_hq_flood *f, fa_hq_flood_stats *st);
void fa_hq_flood_del(fa_hq_flood *f);

/* -------------------------------------------- a CONNECTION_CLOSE's reason */

/* Starts a handshake with server without any certificate, waits for the
 * server's first flight (at most timeout_ms), and closes with a
 * CONNECTION_CLOSE (transport error NO_ERROR) carrying reason[0..len)
 * verbatim.  Returns 0 once it is sent, FA_ERR_TIMEOUT, FA_ERR_IO,
 * FA_ERR_TLS, FA_ERR_NOMEM. */
int fa_hq_close_with_reason(const char *server, const char *ca_file, const uint8_t *reason,
                            size_t len, uint32_t timeout_ms, fa_error *err);

/* ----------------------------------------- streams whose bodies never end */

typedef struct fa_hq_streams fa_hq_streams;

typedef struct fa_hq_streams_stats {
    uint64_t opened;     /* requests submitted */
    uint64_t body_bytes; /* request body bytes handed to the connection */
    uint64_t answered;   /* responses received (any status) */
    uint64_t status_2xx, status_413, status_429, status_503, status_other;
    uint64_t reset; /* streams the server reset or stopped */
    int dead;       /* the connection is gone */
} fa_hq_streams_stats;

/* A connection to server with a client certificate (cert_file, key_file)
 * of the CA in ca_file; server_name is what the server certificate must
 * name.  Returns 0 once the handshake is confirmed (at most timeout_ms),
 * or FA_ERR_TIMEOUT, FA_ERR_TLS, FA_ERR_QUIC, FA_ERR_IO, FA_ERR_NOMEM. */
int fa_hq_streams_new(fa_hq_streams **out, const char *server, const char *server_name,
                      const char *ca_file, const char *cert_file, const char *key_file,
                      uint32_t timeout_ms, fa_error *err);

/* Opens count POST requests to path, each announcing content-length
 * bytes_each + 1 and sending bytes_each bytes of body, then holding the
 * stream open: a body that never ends.  Returns the number opened (the
 * server's stream credit may allow fewer). */
unsigned fa_hq_streams_open(fa_hq_streams *s, const char *path, unsigned count,
                            uint64_t bytes_each);

/* Moves the connection for ms milliseconds (sends the bodies, reads the
 * answers). */
void fa_hq_streams_run(fa_hq_streams *s, uint32_t ms);

/* Streams opened and not yet closed (by the server's answer and reset). */
unsigned fa_hq_streams_active(const fa_hq_streams *s);
void fa_hq_streams_get_stats(const fa_hq_streams *s, fa_hq_streams_stats *st);
void fa_hq_streams_del(fa_hq_streams *s);

/* ------------------------------------------------- idle HTTP/1.1 clients */

typedef struct fa_ht_flood fa_ht_flood;

/* count TCP connections to addr ("host:port") from the local address bind
 * (NULL: any), each sending partial (e.g. "GET /metrics HTTP/1.1\r\n", a
 * request never finished; NULL: nothing) and then holding.  Connections
 * the server closes are opened again by fa_ht_flood_run.  Returns 0,
 * FA_ERR_INVAL, FA_ERR_IO, FA_ERR_NOMEM; *out is set even when some
 * connections failed (see fa_ht_flood_open). */
int fa_ht_flood_new(fa_ht_flood **out, const char *addr, const char *bind, unsigned count,
                    const char *partial, fa_error *err);

/* Reopens what the server closed, for ms milliseconds: at most
 * reopen_per_s connections a second (0: 2,000). */
void fa_ht_flood_run(fa_ht_flood *f, uint32_t ms);
void fa_ht_flood_set_rate(fa_ht_flood *f, unsigned reopen_per_s);

/* Connections open now, and opened in all. */
unsigned fa_ht_flood_open(const fa_ht_flood *f);
uint64_t fa_ht_flood_opened(const fa_ht_flood *f);
void fa_ht_flood_del(fa_ht_flood *f);

#endif
