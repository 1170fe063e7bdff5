/* fedagg-aggregator: the central aggregator of a federation.
 *
 *   fedagg-aggregator --config aggregator.textproto
 *
 * Serves the HTTP/3 API (aggregator/api.h) on one UDP socket, the Prometheus
 * metrics and health probes on a plain HTTP/1.1 port, and runs the rounds
 * (aggregator/federation.h).  SIGTERM or SIGINT drains gracefully: no new
 * connections, the requests in flight finish (or time out), then exit 0.
 * When the configured number of rounds is done it keeps answering for a
 * short grace period (so every region learns the outcome) and exits 0.
 */
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/api.h"
#include "aggregator/federation.h"
#include "aggregator/metrics.h"
#include "common/fa_daemon.h"
#include "common/fa_log.h"
#include "common/fa_quic_config.h"
#include "common/fa_time.h"
#include "model/mlp.h"
#include "proto/config_check.h"
#include "transport/h3.h"

/* After the configured rounds the aggregator keeps answering so that every
 * region learns the outcome and sends its evaluation of the final model:
 * until every region has reported, or FINISHED_QUIET_MS pass without a new
 * report, and at most FINISHED_MAX_MS. */
#define FINISHED_QUIET_MS 10000
#define FINISHED_MAX_MS 120000

struct app {
    fa_h3_server *srv;
    fa_fed *fed;
    fa_api *api;
    uint64_t finished_at; /* when the rounds were done; 0 before */
    uint64_t quiet_since; /* the last change of the final version's reports */
    size_t reports;       /* how many there were then */
    int drained;
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

static void on_tick(fa_h3_server *srv, void *arg)
{
    struct app *a = arg;
    uint64_t now = fa_time_mono_ns() / 1000000u;

    fa_api_tick(a->api);
    {
        char why[512] = "";
        int ok = fa_fed_ready(a->fed, now, why, sizeof(why));
        pthread_mutex_lock(&a->lock);
        a->ready = ok;
        snprintf(a->why, sizeof(a->why), "%s", why);
        pthread_mutex_unlock(&a->lock);
    }
    if (fa_fed_finished(a->fed) && !a->drained) {
        size_t regions, reports = fa_fed_eval_reports(a->fed, &regions);
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

    /* Block the drain signals before any thread starts (metrics thread). */
    {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);
    }

    if (fa_metrics_new(&metrics, &err) != 0)
        goto fail;
    rc = fa_fed_open(&app.fed, cfg, metrics, fa_time_mono_ns() / 1000000u, &err);
    if (rc != 0)
        goto fail;

    fa_h3_server_config_default(&sc);
    sc.listen = cfg->listen;
    sc.cert_file = cfg->tls->cert_file;
    sc.key_file = cfg->tls->key_file;
    sc.ca_file = cfg->tls->ca_file;
    fa_quic_opts_from_config(&sc.quic, cfg->quic);
    sc.max_connections = cfg->quic->max_connections;
    sc.max_body_bytes = cfg->quic->max_body_bytes;
    sc.retry = (int)cfg->quic->retry;
    sc.retry_load_threshold = cfg->quic->retry_load_threshold;
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
    rc = fa_api_new(&app.api, app.srv, app.fed, &err);
    if (rc != 0)
        goto fail;
    if (cfg->metrics_listen && cfg->metrics_listen[0]) {
        rc = fa_metrics_server_start(&msrv, metrics, cfg->metrics_listen, ready, &app, &err);
        if (rc != 0)
            goto fail;
    }
    {
        char why[512] = "";
        int ok = fa_fed_ready(app.fed, fa_time_mono_ns() / 1000000u, why, sizeof(why));
        set_ready(&app, ok, why);
    }
    fa_log(FA_LOG_INFO, "aggregator serving",
           "listen=%s port=%d metrics=%s regions=%zu federation=%s", cfg->listen,
           fa_h3_server_port(app.srv), cfg->metrics_listen, cfg->n_regions, cfg->federation_id);
    rc = fa_h3_server_run(app.srv, &err);
    set_ready(&app, 0, "stopping");
    if (rc != 0)
        goto fail;
    if (fa_fed_fatal(app.fed)) {
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
    fa_h3_server_del(app.srv);
    fa_fed_close(app.fed);
    fa_metrics_del(metrics);
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return status;
}
