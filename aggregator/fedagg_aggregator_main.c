/* fedagg-aggregator: the central aggregator of a federation, or of many
 * (the aggregation service, docs/service.md).
 *
 *   fedagg-aggregator --config aggregator.textproto
 *
 * Serves the HTTP/3 API (aggregator/api.h, and the operators' admin API,
 * aggregator/api_admin.h and service_api.h) on one UDP socket, the
 * Prometheus metrics, health probes and the read-only dashboard
 * (aggregator/dashboard.h) on a plain HTTP/1.1 port, and runs the rounds of
 * every federation (aggregator/service.h, federation.h).  SIGTERM or SIGINT
 * drains gracefully: no new connections, the requests in flight finish (or
 * time out), then exit 0.  Without a service block, when the configured
 * number of rounds is done it keeps answering for a short grace period (so
 * every region learns the outcome) and exits 0; a service runs until
 * stopped.
 */
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <stddef.h>
#include <sodium.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/api.h"
#include "aggregator/federation.h"
#include "aggregator/metrics.h"
#include "aggregator/service.h"
#include "common/fa_daemon.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/secagg.h"
#include "model/mlp.h"
#include "netconfig/quic_config.h"
#include "proto/config_check.h"
#include "transport/h3.h"

/* After the configured rounds the aggregator keeps answering so that every
 * region learns the outcome and sends its evaluation of the final model:
 * until every region has reported, or FINISHED_QUIET_MS pass without a new
 * report, and at most FINISHED_MAX_MS. */
#define FINISHED_QUIET_MS 10000
#define FINISHED_MAX_MS 120000
/* How often the status snapshot (the dashboard's page, the operator gauges)
 * is refreshed. */
#define SNAPSHOT_MS 1000

struct app {
    const Fedagg__AggregatorConfig *cfg;
    fa_h3_server *srv;
    fa_service *svc;
    fa_api *api;
    fa_metrics *metrics;
    fa_metrics_server *msrv; /* NULL without metrics_listen */
    int dashboard;           /* the dashboard is served: hand it the snapshots */
    uint64_t snapshot_at;    /* when the last snapshot was taken */
    uint64_t finished_at;    /* when the rounds were done; 0 before */
    uint64_t quiet_since;    /* the last change of the final version's reports */
    size_t reports;          /* how many there were then */
    int drained;
    fa_h3_server_stats last; /* the transport's counters last exported */
    /* What /readyz answers, set by the server loop (the federation's
     * thread) and read by the metrics server's. */
    pthread_mutex_t lock;
    int ready;
    char why[512];
};

static const char usage[] =
    "usage: fedagg-aggregator --config FILE [--log-level debug|info|warn|error]\n"
    "\n"
    "Runs the aggregator of a fedagg federation: the HTTP/3 API for the regions'\n"
    "workers, secure aggregation rounds, the model store and the signed audit log.\n"
    "FILE is an AggregatorConfig in protobuf text format\n"
    "(`fedagg config print --type aggregator --defaults` prints an example;\n"
    "`fedagg config check FILE` validates one).\n"
    "\n"
    "  --config FILE      the configuration (required)\n"
    "  --log-level LEVEL  overrides the config's log_level\n"
    "  --version          prints the version\n";

/* The operators' state of one federation's status document as gauges, for
 * the alerting rules (deploy/prometheus/): fedagg_paused and
 * fedagg_region_drained{region} and fedagg_region_refused{region} (federation.h
 * exports no metric of them),
 * labelled federation="<id>" in a service. */
static void operator_gauges(fa_metrics *m, const json_t *st, int label)
{
    const char *fed = json_string_value(json_object_get(st, "federation_id"));
    const json_t *rs, *r;
    char base[320] = "";
    size_t i;

    if (label && fed)
        fa_metrics_label(base, sizeof(base), "federation", fed);
    fa_metrics_set(m, "fedagg_paused", base, json_is_true(json_object_get(st, "paused")) ? 1 : 0);
    rs = json_object_get(st, "regions");
    json_array_foreach(rs, i, r)
    {
        const char *id = json_string_value(json_object_get(r, "id"));
        char labels[480];
        if (!id)
            continue;
        snprintf(labels, sizeof(labels), "%s", base);
        fa_metrics_label(labels, sizeof(labels), "region", id);
        fa_metrics_set(m, "fedagg_region_drained", labels,
                       json_is_true(json_object_get(r, "drained")) ? 1 : 0);
        fa_metrics_set(m, "fedagg_region_refused", labels,
                       json_string_value(json_object_get(r, "decision")) &&
                               !strcmp(json_string_value(json_object_get(r, "decision")), "refused")
                           ? 1
                           : 0);
    }
}

/* Takes the status: the operator gauges, and the dashboard's snapshot (the
 * metrics server renders it on its own thread; this thread only copies a
 * string): the default federation's document, or a service's of every
 * federation. */
static void snapshot(struct app *a, uint64_t now)
{
    int many = fa_service_hosts_many(a->svc);
    fa_fed *def = fa_service_default(a->svc);
    char *json = NULL;
    json_t *st;
    fa_error err;
    int rc;

    a->snapshot_at = now;
    fa_error_clear(&err);
    if (many)
        rc = fa_service_status_json(a->svc, now, &json, &err);
    else if (def)
        rc = fa_fed_admin_json(def, "status", now, &json, &err);
    else
        return;
    if (rc != 0) {
        fa_log(FA_LOG_DEBUG, "status snapshot failed", "error=\"%s\"", err.msg);
        return;
    }
    if ((st = json_loads(json, 0, NULL)) != NULL) {
        if (many) {
            const json_t *f;
            size_t i;
            json_array_foreach(json_object_get(st, "federations"), i, f)
                operator_gauges(a->metrics, f, 1);
        } else {
            operator_gauges(a->metrics, st, 0);
        }
        json_decref(st);
    }
    if (a->dashboard)
        fa_metrics_server_set_status(a->msrv, json, strlen(json));
    free(json);
}

/* The transport's defences as metrics (transport/h3.h, "Slots" and the
 * budget of buffered requests; aggregator/metrics.h, the metrics port's
 * own): what hostile peers cost, for the dashboards and alerts.  Counters
 * grow by the change since the last export. */
static void export_transport(struct app *a)
{
    static const struct {
        const char *metric, *label, *value;
        size_t off;
    } counters[] = {
#define C(m, l, v, f) {m, l, v, offsetof(fa_h3_server_stats, f)}
        C("fedagg_quic_refused_total", "reason", "address", refused_address),
        C("fedagg_quic_refused_total", "reason", "identity", refused_identity),
        C("fedagg_quic_refused_total", "reason", "revoked", refused_revoked),
        C("fedagg_quic_refused_total", "reason", "not_member", refused_admit),
        C("fedagg_quic_refused_total", "reason", "full", connections_refused),
        C("fedagg_quic_handshakes_failed_total", NULL, NULL, handshakes_failed),
        C("fedagg_quic_handshakes_dropped_total", "reason", "timeout", handshakes_timed_out),
        C("fedagg_quic_handshakes_dropped_total", "reason", "room", handshakes_evicted),
        C("fedagg_quic_connections_closed_total", "reason", "identity_room", evicted_identity),
        C("fedagg_quic_connections_closed_total", "reason", "revoked", closed_revoked),
        C("fedagg_quic_retries_total", NULL, NULL, retries_sent),
        C("fedagg_request_buffer_refused_total", "share", "region", buffer_refused_identity),
        C("fedagg_request_buffer_refused_total", "share", "aggregator", buffer_refused_server),
#undef C
    };
    fa_h3_server_stats st;
    fa_metrics_server_stats ms;

    fa_h3_server_get_stats(a->srv, &st);
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
        uint64_t now = *(const uint64_t *)((const char *)&st + counters[i].off);
        uint64_t was = *(const uint64_t *)((const char *)&a->last + counters[i].off);
        char labels[64] = "";
        if (counters[i].label)
            fa_metrics_label(labels, sizeof(labels), counters[i].label, counters[i].value);
        if (now > was)
            fa_metrics_add(a->metrics, counters[i].metric, labels[0] ? labels : NULL,
                           (double)(now - was));
    }
    a->last = st;
    fa_metrics_set(a->metrics, "fedagg_quic_connections", NULL, (double)st.current_connections);
    fa_metrics_set(a->metrics, "fedagg_quic_handshakes", NULL, (double)st.current_handshakes);
    fa_metrics_set(a->metrics, "fedagg_request_buffer_bytes", NULL, (double)st.buffered_bytes);
    if (a->msrv) {
        fa_metrics_server_get_stats(a->msrv, &ms);
        fa_metrics_set(a->metrics, "fedagg_metrics_port_connections", NULL, (double)ms.connections);
        fa_metrics_set(a->metrics, "fedagg_metrics_port_dropped", NULL, (double)ms.evicted);
    }
}

static void define_transport_metrics(fa_metrics *m)
{
    static const struct {
        const char *name, *help;
        int type;
    } defs[] = {
        {"fedagg_quic_connections", "QUIC connections open, handshakes included.", FA_METRIC_GAUGE},
        {"fedagg_quic_handshakes", "QUIC handshakes in progress.", FA_METRIC_GAUGE},
        {"fedagg_quic_refused_total",
         "Connections refused: address (its address holds its share), identity (its region or "
         "operator holds its share, all busy), revoked (CRL), not_member (not in regions or "
         "operators), full (draining, or max_connections).",
         FA_METRIC_COUNTER},
        {"fedagg_quic_handshakes_failed_total",
         "Handshakes that failed (certificates refused, peers that gave up).", FA_METRIC_COUNTER},
        {"fedagg_quic_handshakes_dropped_total",
         "Handshakes dropped unfinished: at quic.handshake_timeout_ms, or to make room for a "
         "newer one.",
         FA_METRIC_COUNTER},
        {"fedagg_quic_connections_closed_total",
         "Live connections closed by the aggregator: an identity's idle one for its new one, "
         "or one a new CRL revoked.",
         FA_METRIC_COUNTER},
        {"fedagg_quic_retries_total", "Retry packets sent (address validation).",
         FA_METRIC_COUNTER},
        {"fedagg_request_buffer_bytes", "Request bytes held in memory while received.",
         FA_METRIC_GAUGE},
        {"fedagg_request_buffer_refused_total",
         "Requests refused for the budget of buffered request bytes: the region's share (429) "
         "or the aggregator's whole budget (503).",
         FA_METRIC_COUNTER},
        {"fedagg_metrics_port_connections", "Connections open on the metrics port.",
         FA_METRIC_GAUGE},
        {"fedagg_metrics_port_dropped",
         "Idle connections of the metrics port shut to make room, since start.", FA_METRIC_GAUGE},
    };
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
        fa_metrics_define(m, defs[i].name, defs[i].type, defs[i].help, NULL, 0, NULL);
}

/* The drain signals.  main blocks them before it starts a thread, and the
 * server loop reads them from a signalfd; but OpenBLAS starts its threads
 * when the library loads, before main runs, and a signal the kernel hands
 * to one of those would end the process undrained (or, as PID 1 in a
 * container, be dropped).  This handler catches it in whatever thread it
 * lands: it drains as the signalfd would (both calls are
 * async-signal-safe), or, before the server exists, leaves it for main. */
static fa_h3_server *volatile signal_srv;
static volatile sig_atomic_t caught_signal;

static void on_signal(int sig)
{
    fa_h3_server *s = signal_srv;
    caught_signal = sig;
    if (!s)
        return;
    if (sig == SIGHUP)
        fa_h3_server_reload(s);
    else
        fa_h3_server_drain(s);
}

static void on_tick(fa_h3_server *srv, void *arg)
{
    struct app *a = arg;
    uint64_t now = fa_time_mono_ns() / 1000000u;
    int sig = caught_signal;

    if (sig) { /* said here, where logging is allowed */
        caught_signal = 0;
        fa_log(FA_LOG_INFO,
               sig == SIGHUP ? "signal received, reloading the CRL" : "signal received, draining",
               "signal=%d thread=other", sig);
    }
    fa_api_tick(a->api);
    if (now - a->snapshot_at >= SNAPSHOT_MS) {
        snapshot(a, now);
        export_transport(a);
    }
    {
        char why[512] = "";
        int ok = fa_service_ready(a->svc, now, why, sizeof(why));
        fa_metrics_set(a->metrics, "fedagg_ready", NULL, ok ? 1 : 0);
        pthread_mutex_lock(&a->lock);
        a->ready = ok;
        snprintf(a->why, sizeof(a->why), "%s", why);
        pthread_mutex_unlock(&a->lock);
    }
    if (fa_service_finished(a->svc) && !a->drained) {
        size_t regions, reports = fa_fed_eval_reports(fa_service_default(a->svc), &regions);
        if (!a->finished_at) {
            a->finished_at = a->quiet_since = now;
            a->reports = reports;
        } else if (reports != a->reports) {
            a->quiet_since = now;
            a->reports = reports;
        }
        if (reports >= regions || now - a->quiet_since > FINISHED_QUIET_MS ||
            now - a->finished_at > FINISHED_MAX_MS) {
            fa_log(FA_LOG_INFO, "all rounds done; shutting down",
                   "final_evaluations=%zu regions=%zu", reports, regions);
            fa_h3_server_drain(srv);
            a->drained = 1; /* once */
        }
    }
}

/* Membership at the TLS handshake (transport/h3.h, admit): a region
 * invited to any federation of the service (each federation's routes then
 * answer only its own regions), or an operator the config lists; anyone
 * else holding a certificate of the CA is refused before any request. */
static int admit(void *arg, int role, const char *name, char *why, size_t whycap)
{
    struct app *a = arg;
    if (role == FA_H3_ROLE_REGION) {
        /* a region agent runs one worker, one connection, per federation */
        size_t n = fa_service_invitations(a->svc, name);
        if (n)
            return n < 1024 ? (int)n : 1024;
        snprintf(why, whycap,
                 "names region '%s', which is not a member of any federation of this service",
                 name);
        return 0;
    }
    if (role == FA_H3_ROLE_OPERATOR) {
        for (size_t i = 0; i < a->cfg->n_operators; i++)
            if (!strcmp(a->cfg->operators[i], name))
                return 1;
        snprintf(why, whycap,
                 "names operator '%s', who is not in the aggregator config's `operators`", name);
        return 0;
    }
    snprintf(why, whycap, "names no region and no operator");
    return 0;
}

static int ready(void *ctx, char *why, size_t n)
{
    struct app *a = ctx;
    int ok;
    pthread_mutex_lock(&a->lock);
    ok = a->ready;
    if (!ok)
        snprintf(why, n, "%s", a->why[0] ? a->why : "starting: the API is not serving yet");
    pthread_mutex_unlock(&a->lock);
    return ok;
}

/* fedagg_tls_certificate_expiry_timestamp_seconds{certificate="server"|"ca"}:
 * the notAfter of our own certificate (the first of cert_file) and of the
 * first CA of ca_file, so that an alert fires before either expires. */
static void export_cert_expiry(fa_metrics *m, const char *file, const char *which)
{
    gnutls_datum_t pem = {NULL, 0};
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    char labels[64] = "";
    time_t t;

    if (gnutls_load_file(file, &pem) < 0) {
        fa_log(FA_LOG_WARN, "cannot read a certificate for its expiry metric", "file=%s", file);
        return;
    }
    if (gnutls_x509_crt_list_import2(&crts, &n, &pem, GNUTLS_X509_FMT_PEM, 0) < 0 || n == 0) {
        fa_log(FA_LOG_WARN, "no certificate for the expiry metric", "file=%s", file);
        gnutls_free(pem.data);
        return;
    }
    t = gnutls_x509_crt_get_expiration_time(crts[0]);
    fa_metrics_label(labels, sizeof(labels), "certificate", which);
    if (t != (time_t)-1)
        fa_metrics_set(m, "fedagg_tls_certificate_expiry_timestamp_seconds", labels, (double)t);
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    gnutls_free(pem.data);
}

/* Reads the dashboard's password: the first line of a private file. */
static int read_password(const char *path, char **out, fa_error *err)
{
    uint8_t *text = NULL;
    size_t len = 0, n = 0;
    char *pw;
    int rc;

    *out = NULL;
    if ((rc = fa_file_check_private(path, err)) != 0 ||
        (rc = fa_file_read_all(path, &text, &len, 4096, err)) != 0)
        return rc;
    while (n < len && text[n] != '\n' && text[n] != '\r')
        n++;
    pw = sodium_malloc(n + 1);
    if (!pw) {
        sodium_memzero(text, len);
        free(text);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    memcpy(pw, text, n);
    pw[n] = '\0';
    sodium_memzero(text, len);
    free(text);
    if (n == 0) {
        sodium_free(pw);
        return fa_errorf(err, FA_ERR_INVAL, "dashboard.password_file %s: the first line is empty",
                         path);
    }
    *out = pw;
    return 0;
}

static void set_ready(struct app *a, int ok, const char *why)
{
    pthread_mutex_lock(&a->lock);
    a->ready = ok;
    snprintf(a->why, sizeof(a->why), "%s", why);
    pthread_mutex_unlock(&a->lock);
}

int main(int argc, char **argv)
{
    const char *config = NULL, *level = NULL;
    Fedagg__AggregatorConfig *cfg = NULL;
    fa_metrics *metrics = NULL;
    fa_metrics_server *msrv = NULL;
    fa_h3_server_config sc;
    struct app app = {0};
    fa_error err;
    int rc, lvl, status = 1;

    rc = fa_daemon_args(argc, argv, "fedagg-aggregator", usage, &config, &level);
    if (rc >= 0)
        return rc;
    pthread_mutex_init(&app.lock, NULL);
    /* OpenBLAS (evaluation) picks its kernels when it loads. */
    fa_mlp_blas_reexec(argv);
    /* Large buffers (the O(d) sums, model copies) straight from mmap, so
     * that freeing them returns the memory: otherwise the heap's peak creeps
     * up round after round with the number of regions. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    fa_log_set_context("proc=aggregator");
    fa_error_clear(&err);

    rc = fa_config_load_report(FA_CONFIG_AGGREGATOR, config, "fedagg-aggregator",
                               (ProtobufCMessage **)&cfg);
    if (rc != 0) {
        fa_log(FA_LOG_ERROR, "invalid configuration; not starting", "config=%s", config);
        return 1;
    }
    lvl = fa_log_level_parse(level ? level : cfg->log_level);
    if (lvl < 0) {
        fprintf(stderr, "fedagg-aggregator: unknown log level '%s'\n",
                level ? level : cfg->log_level);
        goto out;
    }
    fa_log_set_level(lvl);
    if ((rc = fa_secagg_mask_prg_from_env(&err)) != 0)
        goto fail;

    /* Block the drain signals before any thread starts (metrics thread). */
    {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP); /* the server loop reads the CRL again on it */
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sa.sa_mask = set;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    }

    if (fa_metrics_new(&metrics, &err) != 0)
        goto fail;
    fa_metrics_define(metrics, "fedagg_tls_certificate_expiry_timestamp_seconds", FA_METRIC_GAUGE,
                      "notAfter of the aggregator's TLS certificate and of the federation CA "
                      "(unix seconds).",
                      NULL, 0, NULL);
    export_cert_expiry(metrics, cfg->tls->cert_file, "server");
    export_cert_expiry(metrics, cfg->tls->ca_file, "ca");
    fa_metrics_define(metrics, "fedagg_ready", FA_METRIC_GAUGE,
                      "1 when the aggregator can do its work (/readyz), else 0.", NULL, 0, NULL);
    fa_metrics_define(metrics, "fedagg_paused", FA_METRIC_GAUGE,
                      "1 while an operator has paused the federation (fedagg pause), else 0.", NULL,
                      0, NULL);
    fa_metrics_define(metrics, "fedagg_region_drained", FA_METRIC_GAUGE,
                      "1 while an operator has drained the region (fedagg drain), else 0.", NULL, 0,
                      NULL);
    fa_metrics_define(metrics, "fedagg_region_refused", FA_METRIC_GAUGE,
                      "1 while the region's latest decision refuses the federation's offer (it is "
                      "not expected in its rounds), else 0.",
                      NULL, 0, NULL);
    define_transport_metrics(metrics);
    app.metrics = metrics;
    rc = fa_service_open(&app.svc, cfg, metrics, fa_time_mono_ns() / 1000000u, &err);
    if (rc != 0)
        goto fail;

    fa_netconfig_server_config(&sc, cfg->quic, cfg->tls);
    sc.listen = cfg->listen;
    sc.admit = admit;
    sc.admit_arg = &app;
    app.cfg = cfg;
    if (cfg->quic->static_secret_file && cfg->quic->static_secret_file[0]) {
        rc = fa_h3_load_static_secret(cfg->quic->static_secret_file, 1, sc.static_secret, &err);
        if (rc != 0)
            goto fail;
        sc.has_static_secret = 1;
    }
    sc.drain_on_signal = 1;
    sc.tick_ms = 50;
    sc.on_tick = on_tick;
    sc.tick_arg = &app;
    rc = fa_h3_server_new(&app.srv, &sc, &err);
    if (rc != 0)
        goto fail;
    signal_srv = app.srv;
    if (caught_signal == SIGTERM || caught_signal == SIGINT)
        fa_h3_server_drain(app.srv); /* caught while starting */
    rc = fa_api_new(&app.api, app.srv, app.svc, &err);
    if (rc != 0)
        goto fail;
    if (cfg->metrics_listen && cfg->metrics_listen[0]) {
        rc = fa_metrics_server_start(&msrv, metrics, cfg->metrics_listen, ready, &app, &err);
        if (rc != 0)
            goto fail;
        app.msrv = msrv;
        if (!cfg->dashboard || cfg->dashboard->enabled) {
            const Fedagg__DashboardConfig *dc = cfg->dashboard;
            char *pw = NULL;
            if (dc && dc->password_file && dc->password_file[0] &&
                (rc = read_password(dc->password_file, &pw, &err)) != 0)
                goto fail;
            rc = fa_metrics_server_dashboard(msrv, dc ? dc->username : NULL, pw, &err);
            if (pw)
                sodium_free(pw);
            if (rc == 0 && dc && dc->protect_metrics)
                rc = fa_metrics_server_protect_metrics(msrv, 1, &err);
            if (rc != 0)
                goto fail;
            app.dashboard = 1;
        } else if (cfg->dashboard->protect_metrics) {
            rc = fa_errorf(&err, FA_ERR_INVAL,
                           "dashboard.protect_metrics uses the dashboard's password: it needs "
                           "dashboard.enabled");
            goto fail;
        }
    }
    snapshot(&app, fa_time_mono_ns() / 1000000u);
    {
        char why[512] = "";
        int ok = fa_service_ready(app.svc, fa_time_mono_ns() / 1000000u, why, sizeof(why));
        set_ready(&app, ok, why);
    }
    fa_log(FA_LOG_INFO, "aggregator serving",
           "listen=%s port=%d metrics=%s dashboard=%s regions=%zu federation=%s federations=%zu "
           "mask_prg=%s",
           cfg->listen, fa_h3_server_port(app.srv), cfg->metrics_listen,
           !app.dashboard                                                              ? "off"
           : cfg->dashboard && cfg->dashboard->username && cfg->dashboard->username[0] ? "password"
                                                                                       : "open",
           cfg->n_regions, cfg->n_regions ? cfg->federation_id : "(none)",
           fa_service_count(app.svc), fa_secagg_mask_prg());
    rc = fa_h3_server_run(app.srv, &err);
    set_ready(&app, 0, "stopping");
    if (rc != 0)
        goto fail;
    if (fa_service_fatal(app.svc)) {
        fa_errorf(&err, FA_ERR_IO,
                  "a committed round could not be recorded in the audit log; "
                  "restart to repair it");
        goto fail;
    }
    fa_log(FA_LOG_INFO, "aggregator stopped", NULL);
    status = 0;
    goto out;
fail:
    fa_log(FA_LOG_ERROR, "aggregator failed", "error=\"%s\"", fa_error_msg(&err, rc));
out:
    fa_metrics_server_stop(msrv);
    fa_api_del(app.api);
    /* stopping anyway: a late signal is ignored, never sent to a freed server */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal_srv = NULL;
    fa_h3_server_del(app.srv);
    fa_service_close(app.svc);
    fa_metrics_del(metrics);
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return status;
}
