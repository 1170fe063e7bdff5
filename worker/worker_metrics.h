/* worker_metrics.h - the worker's Prometheus text file (WorkerConfig
 * metrics_file), for node_exporter's textfile collector: rewritten
 * atomically after every round, so a scrape never sees half a file.
 *
 * Text exposition format 0.0.4: for every metric a "# HELP" and a "# TYPE"
 * line, then one sample `name{region="<id>"} value`.  Values not measured
 * yet (no evaluation, no quantised update) are NaN.
 *
 *   fedagg_worker_rounds_total                 counter  rounds this region completed
 *   fedagg_worker_round_failures_total         counter  local rounds or attempts that failed
 *   fedagg_worker_bytes_up_total               counter  bytes sent to the aggregator in rounds
 *   fedagg_worker_bytes_down_total             counter  bytes received in rounds
 *   fedagg_worker_clipped_fraction             gauge    quantize.h clipped_fraction, last update
 *   fedagg_worker_clipped_coordinates          gauge    coordinates beyond the range, last update
 *   fedagg_worker_update_l2_norm               gauge    L2 norm of the last update (model units)
 *   fedagg_worker_local_loss                   gauge    training loss of the last local round
 *   fedagg_worker_eval_accuracy                gauge    federated evaluation of the last model
 *   fedagg_worker_eval_loss                    gauge
 *   fedagg_worker_model_version                gauge    version of the last global model
 *   fedagg_worker_privacy_epsilon              gauge    epsilon this region has spent (at the
 *                                                       budget's delta); NaN without privacy
 *   fedagg_worker_privacy_budget               gauge    its budget, privacy.target_epsilon
 *   fedagg_worker_privacy_exhausted            gauge    1 when the next round would exceed it
 *                                                       (the region no longer trains), else 0
 *   fedagg_worker_model_alarm                  gauge    1 when the region stopped on an audit-log
 *                                                       ALARM (worker/round_client.h), else 0
 *   fedagg_worker_storage_blocked              gauge    1 while the state directory has no room
 *                                                       for an attempt (no attempt is joined)
 *   fedagg_worker_storage_free_bytes           gauge    free bytes there at the last check
 *   fedagg_worker_model_downloads_full_total   counter  global models downloaded whole
 *   fedagg_worker_model_downloads_delta_total  counter  ... as a delta against the one held
 *   fedagg_worker_model_delta_fallbacks_total  counter  deltas that did not rebuild the
 *                                                       announced model (then downloaded whole)
 *   fedagg_worker_model_download_bytes_total   counter  body bytes of those downloads
 */
#ifndef FA_WORKER_WORKER_METRICS_H
#define FA_WORKER_WORKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

typedef struct fa_worker_metrics {
    uint64_t rounds_total;
    uint64_t round_failures_total;
    uint64_t bytes_up_total;
    uint64_t bytes_down_total;
    double clipped_fraction;    /* NaN: none yet */
    double clipped_coordinates; /* NaN: none yet */
    double update_l2_norm;      /* NaN: none yet */
    double local_loss;          /* NaN: unknown */
    double eval_accuracy;       /* NaN: none */
    double eval_loss;           /* NaN: none */
    double model_version;       /* NaN: no model yet */
    double privacy_epsilon;     /* NaN: no differential privacy */
    double privacy_budget;      /* NaN: no differential privacy */
    double privacy_exhausted;   /* NaN: no differential privacy; else 0 or 1 */
    double model_alarm;         /* 0, or 1 once the round client raised an alarm */
    double storage_blocked;     /* 0, or 1 while the state directory has no room for an attempt */
    double storage_free_bytes;  /* NaN: not checked yet */
    uint64_t model_downloads_full_total;
    uint64_t model_downloads_delta_total;
    uint64_t model_delta_fallbacks_total;
    uint64_t model_download_bytes_total;
} fa_worker_metrics;

/* Counters 0, gauges NaN. */
void fa_worker_metrics_init(fa_worker_metrics *m);

/* The exposition text for region into *out (malloc'ed, NUL-terminated, *len
 * bytes).  Returns 0, FA_ERR_INVAL (no region) or FA_ERR_NOMEM. */
int fa_worker_metrics_format(const fa_worker_metrics *m, const char *region, char **out,
                             size_t *len, fa_error *err);

/* fa_worker_metrics_format, then an atomic replacement of path (mode 0644).
 * Returns 0 or the errors of both. */
int fa_worker_metrics_write(const char *path, const fa_worker_metrics *m, const char *region,
                            fa_error *err);

#endif
