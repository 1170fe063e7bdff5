/* metrics.h - Prometheus metrics and health endpoints of the aggregator.
 *
 * A small thread-safe registry of counters, gauges and histograms (text
 * exposition format 0.0.4), served with /healthz and /readyz over plain
 * HTTP/1.1 (libmicrohttpd, its own thread) on a port separate from the
 * HTTP/3 API, for Prometheus and Kubernetes probes; and, when enabled, the
 * read-only dashboard (aggregator/dashboard.h) at /dashboard, rendered on
 * request from the latest status snapshot that the server loop hands over.
 */
#ifndef FA_METRICS_H
#define FA_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

enum fa_metric_type { FA_METRIC_COUNTER, FA_METRIC_GAUGE, FA_METRIC_HISTOGRAM };

typedef struct fa_metrics fa_metrics;

int fa_metrics_new(fa_metrics **out, fa_error *err);
void fa_metrics_del(fa_metrics *m);

/* Declares a metric family.  name must match [a-zA-Z_:][a-zA-Z0-9_:]*;
 * histograms take their upper bucket bounds (ascending; +Inf is implied).
 * Declaring the same name again with the same type is a no-op.
 * Returns 0, FA_ERR_INVAL (bad name, type clash, bad buckets) or FA_ERR_NOMEM. */
int fa_metrics_define(fa_metrics *m, const char *name, int type, const char *help,
                      const double *buckets, size_t nbuckets, fa_error *err);

/* Updates a series of a declared family.  labels is the preformatted label
 * set without braces (`region="eu-west",outcome="ok"`, see fa_metrics_label)
 * or NULL.  Unknown families and type mismatches are ignored (metrics never
 * break the caller), and so is running out of memory. */
void fa_metrics_add(fa_metrics *m, const char *name, const char *labels, double v);
void fa_metrics_set(fa_metrics *m, const char *name, const char *labels, double v);
void fa_metrics_observe(fa_metrics *m, const char *name, const char *labels, double v);

/* Appends `key="value"` (value escaped as the format requires) to buf,
 * preceded by a comma when buf is not empty.  Always NUL-terminates. */
void fa_metrics_label(char *buf, size_t n, const char *key, const char *value);

/* Renders every family in the text exposition format into a malloc'ed string.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_metrics_render(fa_metrics *m, char **out, size_t *len);

/* Readiness: returns 1 when ready; otherwise 0 and a reason in why. */
typedef int (*fa_metrics_ready_fn)(void *ctx, char *why, size_t n);

typedef struct fa_metrics_server fa_metrics_server;

/* Serves GET /metrics, /healthz, /readyz on listen ("host:port"; port 0 picks
 * a free one, see fa_metrics_server_port).  ready may be NULL (always ready).
 * HEAD is answered as GET without the body.
 *
 * Clients that hold connections cannot starve the probes: one epoll
 * thread; at most 16 connections from one address; a connection idle for
 * 10 s is closed; past 128 connections the one idle the longest is shut to
 * make room for each new one (256 at most while those close).  A probe
 * from its own address therefore gets in whatever a flood from others
 * holds.  Returns 0, FA_ERR_INVAL (bad address) or FA_ERR_IO (cannot
 * listen). */
int fa_metrics_server_start(fa_metrics_server **out, fa_metrics *m, const char *listen,
                            fa_metrics_ready_fn ready, void *ready_ctx, fa_error *err);
uint16_t fa_metrics_server_port(const fa_metrics_server *s);
void fa_metrics_server_stop(fa_metrics_server *s);

/* Serves the dashboard: GET /dashboard (text/html, no script allowed by its
 * Content-Security-Policy), and GET / redirects there (302).  Off (404)
 * until called.  With a non-empty username the dashboard, and only it,
 * needs HTTP basic authentication with that user name and password
 * (compared in constant time, as BLAKE2b digests of both: the password
 * itself is not kept); /metrics, /healthz and /readyz stay open.
 * Thread-safe.  Returns 0, FA_ERR_INVAL (a password without a user name,
 * or the reverse) or FA_ERR_CRYPTO (libsodium failed to start). */
int fa_metrics_server_dashboard(fa_metrics_server *s, const char *username, const char *password,
                                fa_error *err);

/* Thread-safe: puts /metrics behind the dashboard's user name and password
 * too (on), or not (off, the default: Prometheus scrapes without them).
 * Call after fa_metrics_server_dashboard.  Returns 0, or FA_ERR_INVAL (on
 * without a dashboard password). */
int fa_metrics_server_protect_metrics(fa_metrics_server *s, int on, fa_error *err);

/* Connections open now; connections MHD refused at its limits (per
 * address, overall); connections shut to make room. */
typedef struct fa_metrics_server_stats {
    unsigned connections;
    uint64_t refused, evicted;
} fa_metrics_server_stats;
void fa_metrics_server_get_stats(const fa_metrics_server *s, fa_metrics_server_stats *st);

/* Thread-safe: replaces the status document (fa_fed_admin_json "status")
 * the dashboard shows; a copy is kept.  Until the first call the page says
 * that the status is not available yet.  Returns 0 or FA_ERR_NOMEM (the
 * previous snapshot stays). */
int fa_metrics_server_set_status(fa_metrics_server *s, const char *json, size_t len);

#endif
