/* fed_metrics.c - the federation's metrics (fedagg_* series of metrics.h). */
#include "aggregator/federation_internal.h"

#include <math.h>

#include "aggregator/metrics.h"
#include "model/tensors.h"

void fa_fed_metric_region(fa_fed *f, const char *name, const char *region, double v, int set)
{
    char labels[128] = "";
    if (!f->metrics)
        return;
    fa_metrics_label(labels, sizeof(labels), "region", region);
    if (set)
        fa_metrics_set(f->metrics, name, labels, v);
    else
        fa_metrics_add(f->metrics, name, labels, v);
}

void fa_fed_define_metrics(fa_fed *f)
{
    static const double round_buckets[] = {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800};
    static const double phase_buckets[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
    /* the plain counters and gauges: name, type, help */
    static const struct {
        const char *name;
        int type;
        const char *help;
    } plain[] = {
        {"fedagg_region_bytes_received_total", FA_METRIC_COUNTER,
         "Request body bytes received per region."},
        {"fedagg_region_dropouts_total", FA_METRIC_COUNTER,
         "Round attempts a region advertised for but dropped out of."},
        {"fedagg_region_rounds_total", FA_METRIC_COUNTER,
         "Rounds whose sum includes the region's update."},
        {"fedagg_region_connected", FA_METRIC_GAUGE,
         "1 when the region made a request in the last 2 minutes."},
        {"fedagg_model_version", FA_METRIC_GAUGE, "Current global model version."},
        {"fedagg_round", FA_METRIC_GAUGE, "Current round."},
        {"fedagg_attempt", FA_METRIC_GAUGE, "Current attempt of the round."},
        {"fedagg_phase", FA_METRIC_GAUGE, "Current phase (1 advertise ... 5 unmask, 6 finished)."},
        {"fedagg_eval_accuracy", FA_METRIC_GAUGE,
         "Accuracy of the current global model on the evaluation set."},
        {"fedagg_eval_loss", FA_METRIC_GAUGE,
         "Mean loss of the current global model on the evaluation set."},
        {"fedagg_audit_tree_size", FA_METRIC_GAUGE, "Records in the signed audit log."},
        {"fedagg_model_tensors", FA_METRIC_GAUGE,
         "Tensors of the model, by whether they are federated."},
        {"fedagg_model_federated_params", FA_METRIC_GAUGE,
         "Coordinates of the federated tensors (what a region uploads)."},
        {"fedagg_fedeval_version", FA_METRIC_GAUGE,
         "Model version of the latest federated evaluation shown."},
        {"fedagg_fedeval_regions", FA_METRIC_GAUGE, "Regions that reported on that version."},
        {"fedagg_fedeval_examples", FA_METRIC_GAUGE,
         "Held-out examples the regions evaluated it on."},
        {"fedagg_fedeval_accuracy", FA_METRIC_GAUGE,
         "Example-weighted mean accuracy the regions reported."},
        {"fedagg_fedeval_loss", FA_METRIC_GAUGE,
         "Example-weighted mean loss the regions reported."},
        {"fedagg_central_eval_version", FA_METRIC_GAUGE,
         "Model version of the evaluator command's latest result."},
        {"fedagg_central_eval_accuracy", FA_METRIC_GAUGE,
         "Accuracy the evaluator command measured."},
        {"fedagg_central_eval_loss", FA_METRIC_GAUGE, "Mean loss the evaluator command measured."},
        {"fedagg_storage_blocked", FA_METRIC_GAUGE,
         "1 while the storage cannot take a round (disk full, I/O errors): no attempt opens."},
        {"fedagg_storage_failures_total", FA_METRIC_COUNTER,
         "Storage checks, state saves and commits that failed."},
        {"fedagg_storage_free_bytes", FA_METRIC_GAUGE,
         "Free bytes on the storage directory's file system at the last check."},
        {"fedagg_ddp_epsilon", FA_METRIC_GAUGE,
         "Distributed DP: region-level epsilon of the log's rounds, at distributed_dp.delta."},
        {"fedagg_ddp_noisy_contributions", FA_METRIC_GAUGE,
         "Distributed DP: regions whose noise is in the last recorded round's sum."},
    };
    fa_metrics *m = f->metrics;
    if (!m)
        return;
    fa_metrics_define(m, "fedagg_rounds_total", FA_METRIC_COUNTER,
                      "Round attempts by outcome (completed, aborted).", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_round_duration_seconds", FA_METRIC_HISTOGRAM,
                      "Wall time of completed rounds, advertise to commit.", round_buckets,
                      sizeof(round_buckets) / sizeof(round_buckets[0]), NULL);
    fa_metrics_define(m, "fedagg_phase_duration_seconds", FA_METRIC_HISTOGRAM,
                      "Wall time of each secure-aggregation phase.", phase_buckets,
                      sizeof(phase_buckets) / sizeof(phase_buckets[0]), NULL);
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        fa_metrics_define(m, plain[i].name, plain[i].type, plain[i].help, NULL, 0, NULL);
    for (size_t i = 0; i < f->n_regions; i++) {
        fa_fed_metric_region(f, "fedagg_region_bytes_received_total", f->regions[i].id, 0, 0);
        fa_fed_metric_region(f, "fedagg_region_dropouts_total", f->regions[i].id, 0, 0);
        fa_fed_metric_region(f, "fedagg_region_rounds_total", f->regions[i].id, 0, 0);
        fa_fed_metric_region(f, "fedagg_region_connected", f->regions[i].id, 0, 1);
    }
}

void fa_fed_update_gauges(fa_fed *f)
{
    if (!f->metrics)
        return;
    fa_metrics_set(f->metrics, "fedagg_model_version", NULL, (double)f->cur.version);
    fa_metrics_set(f->metrics, "fedagg_round", NULL, (double)f->round);
    fa_metrics_set(f->metrics, "fedagg_attempt", NULL, (double)f->attempt);
    fa_metrics_set(f->metrics, "fedagg_phase", NULL, (double)f->phase);
    fa_metrics_set(f->metrics, "fedagg_audit_tree_size", NULL,
                   (double)fa_audit_log_signed_size(f->audit));
    fa_metrics_set(f->metrics, "fedagg_storage_blocked", NULL, f->gate.blocked ? 1.0 : 0.0);
    if (f->gate.total > f->storage_failures_exported) { /* a counter: add what is new */
        fa_metrics_add(f->metrics, "fedagg_storage_failures_total", NULL,
                       (double)(f->gate.total - f->storage_failures_exported));
        f->storage_failures_exported = f->gate.total;
    }
    if (f->storage_free)
        fa_metrics_set(f->metrics, "fedagg_storage_free_bytes", NULL, (double)f->storage_free);
    if (f->ddp_on) {
        fa_metrics_set(f->metrics, "fedagg_ddp_epsilon", NULL, f->ddp_eps_total);
        fa_metrics_set(f->metrics, "fedagg_ddp_noisy_contributions", NULL, (double)f->ddp_noisy);
    }
    if (f->have_eval) {
        fa_metrics_set(f->metrics, "fedagg_eval_accuracy", NULL, f->eval_accuracy);
        fa_metrics_set(f->metrics, "fedagg_eval_loss", NULL, f->eval_loss);
    }
    {
        const fa_tensors *t = fa_global_model_table(f->model);
        size_t nf = fa_tensors_fed_count(t);
        fa_metrics_set(f->metrics, "fedagg_model_tensors", "federated=\"true\"", (double)nf);
        fa_metrics_set(f->metrics, "fedagg_model_tensors", "federated=\"false\"",
                       (double)(fa_tensors_count(t) - nf));
        fa_metrics_set(f->metrics, "fedagg_model_federated_params", NULL, (double)f->d);
    }
    {
        fa_eval_summary fe;
        fa_eval_reports_summary(f->feval, &fe);
        if (!fe.valid)
            fa_eval_reports_last(f->feval, &fe);
        if (fe.valid) {
            fa_metrics_set(f->metrics, "fedagg_fedeval_version", NULL, (double)fe.version);
            fa_metrics_set(f->metrics, "fedagg_fedeval_regions", NULL, (double)fe.regions);
            fa_metrics_set(f->metrics, "fedagg_fedeval_examples", NULL, (double)fe.n);
            if (!isnan(fe.accuracy))
                fa_metrics_set(f->metrics, "fedagg_fedeval_accuracy", NULL, fe.accuracy);
            if (!isnan(fe.loss))
                fa_metrics_set(f->metrics, "fedagg_fedeval_loss", NULL, fe.loss);
        }
    }
    if (f->central.valid) {
        fa_metrics_set(f->metrics, "fedagg_central_eval_version", NULL, (double)f->central.version);
        if (!isnan(f->central.accuracy))
            fa_metrics_set(f->metrics, "fedagg_central_eval_accuracy", NULL, f->central.accuracy);
        if (!isnan(f->central.loss))
            fa_metrics_set(f->metrics, "fedagg_central_eval_loss", NULL, f->central.loss);
    }
}

void fa_fed_count_outcome(fa_fed *f, const char *outcome)
{
    char labels[64] = "";
    if (!f->metrics)
        return;
    fa_metrics_label(labels, sizeof(labels), "outcome", outcome);
    fa_metrics_add(f->metrics, "fedagg_rounds_total", labels, 1);
}

void fa_fed_count_bytes(fa_fed *f, const char *region, uint64_t n)
{
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    if (!r)
        return;
    r->bytes_received += n;
    fa_fed_metric_region(f, "fedagg_region_bytes_received_total", region, (double)n, 0);
}

void fa_fed_region_seen(fa_fed *f, const char *region, uint64_t now_ms)
{
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    if (!r)
        return;
    r->last_seen_ms = now_ms;
    fa_fed_metric_region(f, "fedagg_region_connected", region, 1, 1);
}

int fa_fed_region_connected(const struct fa_fed_region *r, uint64_t now_ms)
{
    return r->last_seen_ms != 0 && now_ms - r->last_seen_ms < 120000;
}
