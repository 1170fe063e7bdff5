/* worker_metrics.c - the worker's Prometheus text file (worker_metrics.h). */
#include "worker/worker_metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"

void fa_worker_metrics_init(fa_worker_metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->clipped_fraction = NAN;
    m->clipped_coordinates = NAN;
    m->update_l2_norm = NAN;
    m->local_loss = NAN;
    m->eval_accuracy = NAN;
    m->eval_loss = NAN;
    m->model_version = NAN;
    m->privacy_epsilon = NAN;
    m->privacy_budget = NAN;
    m->privacy_exhausted = NAN;
    m->model_alarm = 0; /* measured from the start: no alarm */
    m->storage_blocked = 0;
}

struct text {
    char *buf;
    size_t len, cap;
    int oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (t->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        {
            size_t cap = t->cap * 2 + (size_t)n;
            char *nb = realloc(t->buf, cap);
            if (!nb) {
                t->oom = 1;
                return;
            }
            t->buf = nb;
            t->cap = cap;
        }
    }
}

/* A Prometheus sample value: NaN, +Inf, -Inf or a float that reads back. */
static const char *value(char *buf, size_t n, double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "+Inf" : "-Inf";
    /* the shortest of %.15g..%.17g that reads back exactly */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

static void metric(struct text *t, const char *label, const char *name, const char *type,
                   const char *help, double v)
{
    char num[40];
    put(t, "# HELP %s %s\n# TYPE %s %s\n%s{region=\"%s\"} %s\n", name, help, name, type, name,
        label, value(num, sizeof(num), v));
}

static void counter(struct text *t, const char *label, const char *name, const char *help,
                    uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s{region=\"%s\"} %" PRIu64 "\n", name, help, name,
        name, label, v);
}

int fa_worker_metrics_format(const fa_worker_metrics *m, const char *region, char **out,
                             size_t *len, fa_error *err)
{
    struct text t = {NULL, 0, 0, 0};
    char *label;
    size_t j = 0;

    *out = NULL;
    *len = 0;
    if (!region || !region[0])
        return fa_errorf(err, FA_ERR_INVAL, "metrics: no region id");
    /* label values escape backslash, double quote and newline */
    label = malloc(2 * strlen(region) + 1);
    t.cap = 4096;
    t.buf = malloc(t.cap);
    if (!label || !t.buf) {
        free(label);
        free(t.buf);
        return fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
    }
    for (const char *p = region; *p; p++) {
        if (*p == '\\' || *p == '"') {
            label[j++] = '\\';
            label[j++] = *p;
        } else if (*p == '\n') {
            label[j++] = '\\';
            label[j++] = 'n';
        } else {
            label[j++] = *p;
        }
    }
    label[j] = '\0';
    counter(&t, label, "fedagg_worker_rounds_total",
            "Secure-aggregation rounds this region completed.", m->rounds_total);
    counter(&t, label, "fedagg_worker_round_failures_total",
            "Local rounds or round attempts of this region that failed (skipped rounds).",
            m->round_failures_total);
    counter(&t, label, "fedagg_worker_bytes_up_total",
            "Bytes this region sent to the aggregator in rounds.", m->bytes_up_total);
    counter(&t, label, "fedagg_worker_bytes_down_total",
            "Bytes this region received from the aggregator in rounds.", m->bytes_down_total);
    metric(&t, label, "fedagg_worker_clipped_fraction", "gauge",
           "Share of the last update's squared L2 norm cut by the quantiser's range.",
           m->clipped_fraction);
    metric(&t, label, "fedagg_worker_clipped_coordinates", "gauge",
           "Coordinates of the last update beyond the quantiser's range (saturated).",
           m->clipped_coordinates);
    metric(&t, label, "fedagg_worker_update_l2_norm", "gauge",
           "L2 norm of the last federated update, in the model's units, before any bound.",
           m->update_l2_norm);
    metric(&t, label, "fedagg_worker_local_loss", "gauge",
           "Mean training loss of the last local round.", m->local_loss);
    metric(&t, label, "fedagg_worker_eval_accuracy", "gauge",
           "Accuracy of the last global model on this region's held-out data.", m->eval_accuracy);
    metric(&t, label, "fedagg_worker_eval_loss", "gauge",
           "Mean loss of the last global model on this region's held-out data.", m->eval_loss);
    metric(&t, label, "fedagg_worker_model_version", "gauge",
           "Version of the last global model this region received.", m->model_version);
    metric(&t, label, "fedagg_worker_privacy_epsilon", "gauge",
           "Differential privacy: epsilon this region has spent on its training data, at the "
           "budget's delta.",
           m->privacy_epsilon);
    metric(&t, label, "fedagg_worker_privacy_budget", "gauge",
           "Differential privacy: the epsilon budget this region enforces.", m->privacy_budget);
    metric(&t, label, "fedagg_worker_privacy_exhausted", "gauge",
           "Differential privacy: 1 when the next round would exceed the budget (the region no "
           "longer trains), else 0.",
           m->privacy_exhausted);
    metric(&t, label, "fedagg_worker_model_alarm", "gauge",
           "1 when this region stopped on an ALARM: the aggregator showed it a forked or "
           "rolled-back audit log, or served it a model the log does not hold (round_client.h); "
           "else 0.",
           m->model_alarm);
    metric(&t, label, "fedagg_worker_storage_blocked", "gauge",
           "1 while the state directory has no room for an attempt's saved state (the region "
           "joins no attempt until it has), else 0.",
           m->storage_blocked);
    metric(&t, label, "fedagg_worker_storage_free_bytes", "gauge",
           "Free bytes on the state directory's file system at the last check.",
           m->storage_free_bytes);
    counter(&t, label, "fedagg_worker_model_downloads_full_total",
            "Global models this region downloaded as whole files.", m->model_downloads_full_total);
    counter(&t, label, "fedagg_worker_model_downloads_delta_total",
            "Global models this region rebuilt from a quantised delta against the one it held.",
            m->model_downloads_delta_total);
    counter(&t, label, "fedagg_worker_model_delta_fallbacks_total",
            "Model deltas that did not rebuild the announced model (the whole file was "
            "downloaded instead).",
            m->model_delta_fallbacks_total);
    counter(&t, label, "fedagg_worker_model_download_bytes_total",
            "Body bytes of this region's global model downloads, whole and delta.",
            m->model_download_bytes_total);
    free(label);
    if (t.oom) {
        free(t.buf);
        return fa_errorf(err, FA_ERR_NOMEM, "metrics: out of memory");
    }
    *out = t.buf;
    *len = t.len;
    return 0;
}

int fa_worker_metrics_write(const char *path, const fa_worker_metrics *m, const char *region,
                            fa_error *err)
{
    char *text;
    size_t len;
    int rc = fa_worker_metrics_format(m, region, &text, &len, err);
    if (rc != 0)
        return rc;
    rc = fa_file_write_atomic(path, text, len, 0644, err);
    if (rc != 0)
        fa_error_prefix(err, rc, "metrics_file %s", path);
    free(text);
    return rc;
}
