/* federation.c - round orchestration of the aggregator.  See federation.h. */
#include "aggregator/federation.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#ifdef __GLIBC__
#include <dirent.h>
#include <malloc.h>
#endif
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "audit/audit_log.h"
#include "aggregator/evaluator.h"
#include "aggregator/fed_eval.h"
#include "aggregator/fed_history.h"
#include "aggregator/global_model.h"
#include "aggregator/memory_budget.h"
#include "aggregator/metrics.h"
#include "aggregator/model_store.h"
#include "aggregator/privacy_ledger.h"
#include "aggregator/server_opt.h"
#include "aggregator/storage_gate.h"
#include "aggregator/upload_journal.h"
#include "audit.pb-c.h"
#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/checkpoint.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"
#include "model/data.h"
#include "model/mlp.h"
#include "model/tensors.h"
#include "secagg.pb-c.h"

#define N_KINDS 5
#define MAX_MSG_BYTES (64u << 20)

struct region {
    char id[FA_SECAGG_MAX_ID_LEN + 1];
    uint8_t pk[32];
    /* This attempt: SHA-256 of each accepted message, for idempotent retries. */
    uint8_t msg_sha[N_KINDS][32];
    uint8_t have_msg[N_KINDS];
    int uploading;      /* a masked upload is in flight */
    uint64_t upload_id; /* which stream it is (fa_fed.next_upload_id) */
    int uploaded;       /* its masked upload completed */
    /* Totals for status and metrics. */
    uint64_t bytes_received, rounds_participated, dropouts;
    uint64_t last_seen_ms;
    /* An operator drained it: it sits out from the next attempt on. */
    int drained;
    char drained_by[64];
};

struct fa_fed {
    /* Settings (copied out of the config). */
    char *federation_id;
    char *storage_dir;
    char *state_path;
    /* The secure-aggregation sum last written next to round.state (see
     * write_sum): its round, attempt and generation; have_sum = 0: none. */
    int have_sum;
    uint64_t sum_round, sum_gen;
    uint32_t sum_attempt;
    uint64_t opt_steps;         /* server optimizer steps so far (the state file's fedagg.steps) */
    fa_upload_journal *journal; /* the masked uploads' journals, in files (upload_journal.h) */
    uint32_t min_regions, threshold, neighbours, max_attempts, rounds_limit;
    uint64_t deadline_ms[N_KINDS];
    uint64_t advertise_grace_ms;
    fa_secagg_quant quant; /* the secure-aggregation codec's */
    int clip_cfg;          /* config ClipMode (the record; the regions' L2 bound when per tensor) */
    uint64_t max_examples;
    uint8_t config_digest[32];
    Fedagg__ServerOptimizer opt_cfg;

    struct region *regions; /* sorted by id */
    size_t n_regions;
    fa_secagg_member *members;

    /* The model: a tensor table and the master weights of its federated
     * tensors (global_model.h). */
    fa_global_model *model;
    size_t d; /* federated coordinates */
    fa_model_store *store;
    struct fa_model_version cur;
    fa_server_opt *opt;
    uint8_t round_ranges_sha[32]; /* the ranges of the round in flight (its base version's) */

    /* The audit log. */
    fa_audit_log *audit;
    fa_note_signer *signer;

    /* Evaluation of the built-in MLP on a public test set (optional). */
    fa_data eval_data;
    fa_mlp *eval_net;
    fa_mlp_layout eval_layout;
    float *eval_params;
    uint32_t eval_every;
    double eval_accuracy, eval_loss;
    int have_eval;
    uint64_t eval_version; /* the version eval_accuracy is of */
    /* Federated evaluation (the regions' signed reports), and the
     * evaluator command's result on any model. */
    fa_fed_eval *feval;
    fa_evaluator *evaluator;
    fa_eval_summary central;
    /* The regions' signed privacy statements of the attempt in flight. */
    fa_privacy_ledger *privacy;

    /* The round in flight. */
    uint64_t round;
    uint32_t attempt;
    int phase; /* Fedagg__Phase */
    uint64_t phase_opened_ms;
    uint64_t last_advertise_ms;
    uint64_t attempt_start_unix_ms;
    fa_secagg_config sa_cfg;
    fa_secagg_server *sa;
    uint64_t rounds_completed, rounds_aborted;

    /* The last completed round's RoundResult, for late long-polls. */
    uint64_t last_round;
    uint32_t last_attempt;
    uint8_t *last_result;
    size_t last_result_len;
    char **last_participants;
    size_t n_last_participants;

    struct fa_metrics *metrics;
    int fatal; /* a committed round could not be recorded: restart to repair */
    /* Closed while the storage cannot take a round (storage_gate.h): no
     * attempt opens, /readyz says why. */
    fa_storage_gate gate;
    uint64_t storage_free; /* bytes free at the last check */
    uint64_t storage_failures_exported; /* gate.total already added to the metric */
    /* Operators: paused (no attempt opens), and what they look back on. */
    int paused;
    char paused_by[64];
    fa_fed_history hist;
    fa_fed_attempt cur_att; /* the attempt in flight: start, phase durations */
    uint64_t next_upload_id;
};

static const char *kind_names[N_KINDS] = {"advertise", "shares", "masked", "consistency", "unmask"};

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */
/* ------------------------------------------------------------------------ */

void fa_fed_reply_free(fa_fed_reply *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

static int reply_error(const fa_fed *f, fa_fed_reply *r, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int reply_error(const fa_fed *f, fa_fed_reply *r, int status, int code, const char *fmt, ...)
{
    Fedagg__Error e = FEDAGG__ERROR__INIT;
    va_list ap;

    if (!r)
        return code;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
    r->status = status;
    e.code = (uint32_t)status;
    e.message = r->msg;
    e.round = f->round;
    e.attempt = f->attempt;
    free(r->body);
    r->len = fedagg__error__get_packed_size(&e);
    r->body = malloc(r->len ? r->len : 1);
    if (r->body)
        fedagg__error__pack(&e, r->body);
    else
        r->len = 0;
    return code;
}

/* Maps a refusal of the secure-aggregation server to an HTTP status. */
static int status_of(int code)
{
    switch (code) {
    case FA_ERR_AUTH: return 403;
    case FA_ERR_REPLAY:
    case FA_ERR_STATE:
    case FA_ERR_EXISTS:
    case FA_ERR_THRESHOLD: return 409;
    case FA_ERR_TOOBIG: return 413;
    case FA_ERR_AGAIN: return 503;
    case FA_ERR_NOMEM: return 500;
    default: return 400;
    }
}

static int reply_ok(fa_fed_reply *r, uint8_t *body, size_t len)
{
    r->status = 200;
    free(r->body);
    r->body = body;
    r->len = len;
    r->msg[0] = '\0';
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static struct region *find_region(const fa_fed *f, const char *id)
{
    size_t lo = 0, hi = f->n_regions;
    if (!id)
        return NULL;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(f->regions[mid].id, id);
        if (c == 0)
            return &f->regions[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int fa_fed_is_member(const fa_fed *f, const char *region)
{
    return find_region(f, region) != NULL;
}

static int cmp_region(const void *a, const void *b)
{
    return strcmp(((const struct region *)a)->id, ((const struct region *)b)->id);
}

static void metric_region(fa_fed *f, const char *name, const char *region, double v, int set)
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

static void define_metrics(fa_fed *f)
{
    static const double round_buckets[] = {1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800};
    static const double phase_buckets[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
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
    fa_metrics_define(m, "fedagg_region_bytes_received_total", FA_METRIC_COUNTER,
                      "Request body bytes received per region.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_region_dropouts_total", FA_METRIC_COUNTER,
                      "Round attempts a region advertised for but dropped out of.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_region_rounds_total", FA_METRIC_COUNTER,
                      "Rounds whose sum includes the region's update.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_region_connected", FA_METRIC_GAUGE,
                      "1 when the region made a request in the last 2 minutes.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_model_version", FA_METRIC_GAUGE, "Current global model version.",
                      NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_round", FA_METRIC_GAUGE, "Current round.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_attempt", FA_METRIC_GAUGE, "Current attempt of the round.", NULL,
                      0, NULL);
    fa_metrics_define(m, "fedagg_phase", FA_METRIC_GAUGE,
                      "Current phase (1 advertise ... 5 unmask, 6 finished).", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_eval_accuracy", FA_METRIC_GAUGE,
                      "Accuracy of the current global model on the evaluation set.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_eval_loss", FA_METRIC_GAUGE,
                      "Mean loss of the current global model on the evaluation set.", NULL, 0,
                      NULL);
    fa_metrics_define(m, "fedagg_audit_tree_size", FA_METRIC_GAUGE,
                      "Records in the signed audit log.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_model_tensors", FA_METRIC_GAUGE,
                      "Tensors of the model, by whether they are federated.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_model_federated_params", FA_METRIC_GAUGE,
                      "Coordinates of the federated tensors (what a region uploads).", NULL, 0,
                      NULL);
    fa_metrics_define(m, "fedagg_fedeval_version", FA_METRIC_GAUGE,
                      "Model version of the latest federated evaluation shown.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_fedeval_regions", FA_METRIC_GAUGE,
                      "Regions that reported on that version.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_fedeval_examples", FA_METRIC_GAUGE,
                      "Held-out examples the regions evaluated it on.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_fedeval_accuracy", FA_METRIC_GAUGE,
                      "Example-weighted mean accuracy the regions reported.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_fedeval_loss", FA_METRIC_GAUGE,
                      "Example-weighted mean loss the regions reported.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_central_eval_version", FA_METRIC_GAUGE,
                      "Model version of the evaluator command's latest result.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_central_eval_accuracy", FA_METRIC_GAUGE,
                      "Accuracy the evaluator command measured.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_central_eval_loss", FA_METRIC_GAUGE,
                      "Mean loss the evaluator command measured.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_storage_blocked", FA_METRIC_GAUGE,
                      "1 while the storage cannot take a round (disk full, I/O errors): no "
                      "attempt opens.",
                      NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_storage_failures_total", FA_METRIC_COUNTER,
                      "Storage checks, state saves and commits that failed.", NULL, 0, NULL);
    fa_metrics_define(m, "fedagg_storage_free_bytes", FA_METRIC_GAUGE,
                      "Free bytes on the storage directory's file system at the last check.", NULL,
                      0, NULL);
    for (size_t i = 0; i < f->n_regions; i++) {
        metric_region(f, "fedagg_region_bytes_received_total", f->regions[i].id, 0, 0);
        metric_region(f, "fedagg_region_dropouts_total", f->regions[i].id, 0, 0);
        metric_region(f, "fedagg_region_rounds_total", f->regions[i].id, 0, 0);
        metric_region(f, "fedagg_region_connected", f->regions[i].id, 0, 1);
    }
}

static void update_gauges(fa_fed *f)
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
        fa_fed_eval_summary(f->feval, &fe);
        if (!fe.valid)
            fa_fed_eval_last(f->feval, &fe);
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
        fa_metrics_set(f->metrics, "fedagg_central_eval_version", NULL,
                       (double)f->central.version);
        if (!isnan(f->central.accuracy))
            fa_metrics_set(f->metrics, "fedagg_central_eval_accuracy", NULL, f->central.accuracy);
        if (!isnan(f->central.loss))
            fa_metrics_set(f->metrics, "fedagg_central_eval_loss", NULL, f->central.loss);
    }
}

static void count_outcome(fa_fed *f, const char *outcome)
{
    char labels[64] = "";
    if (!f->metrics)
        return;
    fa_metrics_label(labels, sizeof(labels), "outcome", outcome);
    fa_metrics_add(f->metrics, "fedagg_rounds_total", labels, 1);
}

void fa_fed_count_bytes(fa_fed *f, const char *region, uint64_t n)
{
    struct region *r = find_region(f, region);
    if (!r)
        return;
    r->bytes_received += n;
    metric_region(f, "fedagg_region_bytes_received_total", region, (double)n, 0);
}

void fa_fed_region_seen(fa_fed *f, const char *region, uint64_t now_ms)
{
    struct region *r = find_region(f, region);
    if (!r)
        return;
    r->last_seen_ms = now_ms;
    metric_region(f, "fedagg_region_connected", region, 1, 1);
}

static int region_connected(const struct region *r, uint64_t now_ms)
{
    return r->last_seen_ms != 0 && now_ms - r->last_seen_ms < 120000;
}

/* ------------------------------------------------------------------------ */
/* Durable round state                                                       */
/* ------------------------------------------------------------------------ */

/* The round state is packed straight into its file: it holds the
 * secure-aggregation sum (4 bytes per parameter), and a packed copy of it in
 * memory would cost a malloc, page faults and a copy at every phase close
 * (and that much more peak memory). */
struct state_sink {
    ProtobufCBuffer base;
    fa_atomic_file *f;
    fa_error *err;
    int rc;
};

static void state_sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    struct state_sink *s = (struct state_sink *)b;
    if (s->rc == 0 && len > 0)
        s->rc = fa_atomic_file_write(s->f, data, len, s->err);
}

/* The secure-aggregation sum lives in its own file, written only when it
 * changed (its generation), not at every phase close: after the masked
 * phase it stays the same (and unmasking is redone from the masked sum on
 * restart, see fa_secagg_server_save_meta), so a round writes its 4 bytes
 * per parameter once.  round.sum.<round>.<attempt>.<generation>:
 * "FASUM" 0 0 1, round u64, attempt u32, generation u64, words u64 (all
 * little-endian), the words (u32 little-endian), SHA-256 of all before it.
 * A new generation goes to a new file before round.state names it; the
 * others are removed after. */
static const uint8_t sum_magic[8] = {'F', 'A', 'S', 'U', 'M', 0, 0, 1};
#define SUM_HEADER 36

static void sum_path(const fa_fed *f, uint64_t round, uint32_t attempt, uint64_t gen, char *out,
                     size_t n)
{
    snprintf(out, n, "%s/round.sum.%" PRIu64 ".%u.%" PRIu64, f->storage_dir, round, attempt, gen);
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void sum_header(uint8_t h[SUM_HEADER], uint64_t round, uint32_t attempt, uint64_t gen,
                       uint64_t n)
{
    memcpy(h, sum_magic, 8);
    put_le(h + 8, round, 8);
    put_le(h + 16, attempt, 4);
    put_le(h + 20, gen, 8);
    put_le(h + 28, n, 8);
}

/* The sum of generation gen of the round in flight is on disk. */
static void sum_on_disk(fa_fed *f, uint64_t gen)
{
    f->have_sum = 1;
    f->sum_round = f->round;
    f->sum_attempt = f->attempt;
    f->sum_gen = gen;
}

static int write_sum(fa_fed *f, uint64_t gen, fa_error *err)
{
    const uint32_t *w = fa_secagg_server_sum_words(f->sa);
    const uint64_t n = f->sa_cfg.vector_len;
    uint8_t h[SUM_HEADER], md[32], buf[1 << 16];
    EVP_MD_CTX *sha = EVP_MD_CTX_new();
    fa_atomic_file *af = NULL;
    char path[4200];
    int rc;

    sum_path(f, f->round, f->attempt, gen, path, sizeof(path));
    sum_header(h, f->round, f->attempt, gen, n);
    if (!sha || EVP_DigestInit_ex(sha, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(sha);
        return fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 unavailable", path);
    }
    rc = fa_atomic_file_open(&af, path, 0600, err);
    if (rc == 0)
        rc = fa_atomic_file_write(af, h, sizeof(h), err);
    if (rc == 0 && EVP_DigestUpdate(sha, h, sizeof(h)) != 1)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    (void)buf; /* the words are little-endian already */
    for (uint64_t i = 0; i < n && rc == 0;) {
        size_t m = n - i < ((size_t)1 << 18) ? (size_t)(n - i) : (size_t)1 << 18;
        if (EVP_DigestUpdate(sha, w + i, m * 4) != 1)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
        else
            rc = fa_atomic_file_write(af, w + i, m * 4, err);
        i += m;
    }
#else
    for (uint64_t i = 0; i < n && rc == 0;) {
        size_t m = n - i < sizeof(buf) / 4 ? (size_t)(n - i) : sizeof(buf) / 4;
        for (size_t j = 0; j < m; j++)
            put_le(buf + 4 * j, w[i + j], 4);
        if (EVP_DigestUpdate(sha, buf, m * 4) != 1)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
        else
            rc = fa_atomic_file_write(af, buf, m * 4, err);
        i += m;
    }
#endif
    if (rc == 0 && EVP_DigestFinal_ex(sha, md, NULL) != 1)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    if (rc == 0)
        rc = fa_atomic_file_write(af, md, sizeof(md), err);
    if (rc == 0) {
        rc = fa_atomic_file_commit_nosync(af, err); /* as round.state (see save_state) */
        af = NULL;
    }
    fa_atomic_file_abort(af);
    EVP_MD_CTX_free(sha);
    if (rc == 0)
        sum_on_disk(f, gen);
    return rc;
}

/* The sum file of generation gen of the round in flight, read straight
 * into the secure-aggregation server's running sum (fa_secagg_server_
 * restore_meta_fill: no second copy of 4 bytes per coordinate); a file that
 * is not exactly it is refused, and then the restore fails. */
struct sum_reader {
    fa_fed *f;
    uint64_t gen;
};

static int read_sum(void *ctx, uint32_t *w, uint64_t n, fa_error *err)
{
    const struct sum_reader *sr = ctx;
    fa_fed *f = sr->f;
    uint8_t h[SUM_HEADER], want[SUM_HEADER], md[32], got[32];
    EVP_MD_CTX *sha = EVP_MD_CTX_new();
    char path[4200];
    FILE *in;
    int rc = 0, c;

    sum_path(f, f->round, f->attempt, sr->gen, path, sizeof(path));
    if (!sha || EVP_DigestInit_ex(sha, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(sha);
        return fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 unavailable", path);
    }
    if (!(in = fopen(path, "rb"))) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO,
                       "the round state's sum: %s: %s", path, strerror(errno));
        EVP_MD_CTX_free(sha);
        return rc;
    }
    sum_header(want, f->round, f->attempt, sr->gen, n);
    if (fread(h, 1, sizeof(h), in) != sizeof(h) || memcmp(h, want, SUM_HEADER) != 0)
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: not the sum of round %" PRIu64 " attempt %u generation %" PRIu64
                       " with %" PRIu64 " words",
                       path, f->round, f->attempt, sr->gen, n);
    if (rc == 0 && EVP_DigestUpdate(sha, h, sizeof(h)) != 1)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    for (uint64_t i = 0; rc == 0 && i < n;) {
        size_t m = n - i < ((size_t)1 << 18) ? (size_t)(n - i) : (size_t)1 << 18;
        if (fread(w + i, 4, m, in) != m)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: shorter than its %" PRIu64 " words", path, n);
        else if (EVP_DigestUpdate(sha, w + i, m * 4) != 1)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        for (size_t j = 0; rc == 0 && j < m; j++) {
            const uint8_t *b = (const uint8_t *)&w[i + j];
            w[i + j] =
                (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        }
#endif
        i += m;
    }
    if (rc == 0 && (fread(got, 1, 32, in) != 32 || (c = fgetc(in)) != EOF))
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: not %" PRIu64 " words and a SHA-256", path, n);
    if (rc == 0 && (EVP_DigestFinal_ex(sha, md, NULL) != 1 || memcmp(md, got, 32) != 0))
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: fails its SHA-256", path);
    (void)c;
    fclose(in);
    EVP_MD_CTX_free(sha);
    return rc;
}

/* Removes every sum file but the one round.state names (keep = 0: all),
 * and leftovers of interrupted writes. */
static void remove_stale_sums(fa_fed *f, uint64_t keep)
{
    char name[200], path[4200];
    struct dirent *e;
    DIR *d = opendir(f->storage_dir);

    if (!d)
        return;
    snprintf(name, sizeof(name), "round.sum.%" PRIu64 ".%u.%" PRIu64, f->round, f->attempt, keep);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "round.sum.", 10) != 0 || (keep && !strcmp(e->d_name, name)))
            continue;
        snprintf(path, sizeof(path), "%s/%s", f->storage_dir, e->d_name);
        if (unlink(path) != 0)
            fa_log(FA_LOG_WARN, "cannot remove an old round sum", "file=%s", path);
    }
    closedir(d);
    if (!keep)
        f->have_sum = 0;
}

/* Writes round.state: called at every phase change, before any region can
 * learn of it.  Failing to save is fatal for the attempt (the caller aborts
 * it), never silently ignored. */
static int save_state(fa_fed *f, fa_error *err)
{
    Fedagg__RoundState st = FEDAGG__ROUND_STATE__INIT;
    struct state_sink sink = {{state_sink_append}, NULL, err, 0};
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    uint64_t t0 = fa_time_mono_ns();
    size_t ne = fa_fed_eval_count(f->feval);
    Fedagg__SignedEval *evs = calloc(ne ? ne : 1, sizeof(*evs));
    Fedagg__SignedEval **evp = calloc(ne ? ne : 1, sizeof(*evp));
    Fedagg__EvalSummary central;
    Fedagg__NamedValue nv[FA_EVAL_MAX_METRICS], *nvp[FA_EVAL_MAX_METRICS];
    int rc;

    if (!evs || !evp) {
        free(evs);
        free(evp);
        return fa_errorf(err, FA_ERR_NOMEM, "round state: out of memory");
    }
    for (size_t i = 0; i < ne; i++) {
        fa_fed_eval_at(f->feval, i, &evs[i]);
        evp[i] = &evs[i];
    }
    st.n_evaluations = ne;
    st.evaluations = evp;
    size_t np = fa_privacy_ledger_count(f->privacy);
    Fedagg__SignedPrivacy *pvs = calloc(np ? np : 1, sizeof(*pvs));
    Fedagg__SignedPrivacy **pvp = calloc(np ? np : 1, sizeof(*pvp));
    if (!pvs || !pvp) {
        free(pvs);
        free(pvp);
        free(evs);
        free(evp);
        return fa_errorf(err, FA_ERR_NOMEM, "round state: out of memory");
    }
    for (size_t i = 0; i < np; i++) {
        fa_privacy_ledger_at(f->privacy, i, &pvs[i], NULL);
        pvp[i] = &pvs[i];
    }
    st.n_privacy = np;
    st.privacy = pvp;
    st.ranges_sha256.data = f->round_ranges_sha;
    st.ranges_sha256.len = 32;
    if (f->central.valid && f->central.version == f->cur.version) {
        fa_eval_summary_to_pb(&f->central, &central, nv, nvp);
        st.central_eval = &central;
    }
    st.round = f->round;
    st.attempt = f->attempt;
    st.phase = (Fedagg__Phase)f->phase;
    st.attempt_start_unix_ms = f->attempt_start_unix_ms;
    st.base_version = f->cur.version;
    st.rounds_completed = f->rounds_completed;
    st.rounds_aborted = f->rounds_aborted;
    if (f->phase != FEDAGG__PHASE__PHASE_ADVERTISE && f->sa) {
        uint64_t gen = 0;
        rc = fa_secagg_server_save_meta(f->sa, &blob, &blob_len, &gen, err);
        if (rc != 0) {
            free(evs);
            free(evp);
            free(pvs);
            free(pvp);
            return rc;
        }
        if (gen != 0 && !(f->have_sum && f->sum_round == f->round &&
                          f->sum_attempt == f->attempt && f->sum_gen == gen)) {
            if (gen == fa_secagg_server_sum_generation(f->sa)) {
                rc = write_sum(f, gen, err);
            } else {
                /* The state needs a masked sum that is not on disk (restored
                 * from an older round.state): save the sum inside it. */
                free(blob);
                blob = NULL;
                gen = 0;
                rc = fa_secagg_server_save(f->sa, &blob, &blob_len, err);
            }
            if (rc != 0) {
                free(blob);
                free(evs);
                free(evp);
                free(pvs);
                free(pvp);
                return rc;
            }
        }
        st.secagg_server.data = blob;
        st.secagg_server.len = blob_len;
        st.sum_generation = gen;
    }
    rc = fa_atomic_file_open(&sink.f, f->state_path, 0600, err);
    if (rc == 0) {
        fedagg__round_state__pack_to_buffer(&st, &sink.base);
        rc = sink.rc;
    }
    /* No fsync: a SIGKILL never loses it (page cache), and a machine crash
     * that does only rolls the round back to an earlier phase, which the
     * protocol tolerates (regions resend identical messages; a client refuses
     * a different survivor set) or, when it predates the last commit, is
     * dropped on restart (restore_round).  The model store and the audit log,
     * which must not be lost, are fsync'ed. */
    if (rc == 0)
        rc = fa_atomic_file_commit_nosync(sink.f, err);
    else
        fa_atomic_file_abort(sink.f);
    free(blob);
    free(evs);
    free(evp);
    free(pvs);
    free(pvp);
    if (rc == 0) {
        remove_stale_sums(f, st.sum_generation);
        fa_log(FA_LOG_DEBUG, "round state saved",
               "round=%" PRIu64 " attempt=%u phase=%d bytes=%zu sum_generation=%" PRIu64
               " seconds=%.3f",
               f->round, f->attempt, (int)f->phase, blob_len, st.sum_generation,
               (double)(fa_time_mono_ns() - t0) / 1e9);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Attempts                                                                  */
/* ------------------------------------------------------------------------ */

static void reset_region_attempt(fa_fed *f)
{
    for (size_t i = 0; i < f->n_regions; i++) {
        struct region *r = &f->regions[i];
        memset(r->have_msg, 0, sizeof(r->have_msg));
        memset(r->msg_sha, 0, sizeof(r->msg_sha));
        r->uploading = 0;
        r->uploaded = 0;
    }
}

/* The masked uploads' journals (upload_journal.h): in memory while they
 * fit FA_FED_JOURNAL_MEMORY together (a file costs about four times a
 * memcpy per byte), in files beyond, so that the aggregator's memory is the
 * running sum and at most this much whatever the number of uploads in
 * flight. */
#define FA_FED_JOURNAL_MEMORY ((uint64_t)256 << 20)

/* That budget, or FEDAGG_JOURNAL_MEMORY_BYTES from the environment (tests,
 * and an operator who prefers files: 0 puts every journal in a file). */
static uint64_t journal_memory(void)
{
    const char *e = getenv("FEDAGG_JOURNAL_MEMORY_BYTES");
    return e && *e ? strtoull(e, NULL, 10) : FA_FED_JOURNAL_MEMORY;
}

static int use_journal_files(fa_fed *f, fa_error *err)
{
    fa_secagg_journal j;
    fa_upload_journal_iface(f->journal, &j);
    return fa_secagg_server_set_journal(f->sa, &j, err);
}

static int new_secagg_server(fa_fed *f, fa_error *err)
{
    int rc;

    fa_secagg_server_del(f->sa);
    f->sa = NULL;
    f->sa_cfg.round = f->round;
    f->sa_cfg.attempt = f->attempt;
    rc = fa_secagg_server_new(&f->sa, &f->sa_cfg, f->members, f->n_regions, err);
    if (rc == 0)
        rc = use_journal_files(f, err);
    return rc;
}

/* Opens attempt `attempt` of round `round` in the advertise phase. */
static int open_attempt(fa_fed *f, uint64_t round, uint32_t attempt, uint64_t now_ms, fa_error *err)
{
    int rc;

    f->round = round;
    f->attempt = attempt;
    f->phase = FEDAGG__PHASE__PHASE_ADVERTISE;
    f->phase_opened_ms = now_ms;
    f->last_advertise_ms = 0;
    f->attempt_start_unix_ms = fa_time_unix_ms();
    reset_region_attempt(f);
    fa_privacy_ledger_begin(f->privacy, round, attempt);
    memset(&f->cur_att, 0, sizeof(f->cur_att));
    f->cur_att.round = round;
    f->cur_att.attempt = attempt;
    f->cur_att.start_unix_ms = f->attempt_start_unix_ms;
    for (int k = 0; k < FA_FED_HISTORY_PHASES; k++)
        f->cur_att.phase_s[k] = -1;
    rc = new_secagg_server(f, err);
    if (rc == 0)
        rc = save_state(f, err);
    if (rc == 0) {
        fa_log(FA_LOG_INFO, "round attempt opened", "round=%" PRIu64 " attempt=%u version=%" PRIu64,
               round, attempt, f->cur.version);
        update_gauges(f);
    }
    return rc;
}

/* Bytes a round needs on the storage to end in a commit: a model file, its
 * master weights, the optimizer state, the round's sum and state, the
 * journals of the uploads in flight, and room to spare (64 MiB, and a
 * tenth of the rest). */
static uint64_t storage_need(const fa_fed *f)
{
    uint64_t n = f->cur.model_size + (f->cur.has_master ? f->cur.master_size : 0);
    n += (uint64_t)4 * f->d * fa_server_opt_state_count(f->opt);
    n += (uint64_t)4 * (f->d + 1) + (4u << 20);
    n += (uint64_t)(f->sa_cfg.max_uploads_in_flight ? f->sa_cfg.max_uploads_in_flight : 4) *
         fa_secagg_masked_bytes((uint64_t)f->d + 1, f->sa_cfg.ring_bits);
    return n + n / 10 + (64u << 20);
}

/* Whether the storage can take a round now (free space for one). */
static int storage_check(fa_fed *f, fa_error *err)
{
    struct statvfs vfs;
    uint64_t need = storage_need(f);

    if (statvfs(f->storage_dir, &vfs) != 0)
        return fa_errorf(err, FA_ERR_IO, "storage %s: statvfs: %s", f->storage_dir,
                         strerror(errno));
    f->storage_free = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (f->storage_free < need)
        return fa_errorf(err, FA_ERR_NOSPACE,
                         "storage %s has %.1f MiB free; a round needs about %.1f MiB (model, "
                         "master weights, optimizer state, sum): free space or enlarge the volume",
                         f->storage_dir, (double)f->storage_free / 1048576.0,
                         (double)need / 1048576.0);
    return 0;
}

/* The storage failed (why): close the gate, logging once per back-off. */
static void storage_failed(fa_fed *f, uint64_t now_ms, const char *why)
{
    if (fa_storage_gate_fail(&f->gate, now_ms, why))
        fa_log(FA_LOG_WARN, "storage cannot take a round; no attempt opens until it can",
               "reason=\"%s\" next_check_s=%.0f failures=%" PRIu64, why,
               (double)f->gate.backoff_ms / 1000.0, f->gate.failures);
    update_gauges(f);
}

/* Opens attempt `attempt` of `round` if the storage can take it; else the
 * federation waits with no attempt open (phase IDLE) and fa_fed_tick tries
 * again when the gate's back-off has passed. */
static void open_gated(fa_fed *f, uint64_t round, uint32_t attempt, uint64_t now_ms)
{
    fa_error err;
    int rc;

    f->round = round;
    f->attempt = attempt;
    if (f->paused) {
        /* fa_fed_admin_resume opens it. */
        f->phase = FEDAGG__PHASE__PHASE_IDLE;
        fa_secagg_server_del(f->sa);
        f->sa = NULL;
        fa_log(FA_LOG_INFO, "federation paused: no attempt opens until an operator resumes it",
               "round=%" PRIu64 " attempt=%u paused_by=%s", round, attempt, f->paused_by);
        update_gauges(f);
        return;
    }
    if (f->gate.blocked && !fa_storage_gate_due(&f->gate, now_ms)) {
        f->phase = FEDAGG__PHASE__PHASE_IDLE;
        return;
    }
    fa_error_clear(&err);
    rc = storage_check(f, &err);
    if (rc == 0)
        rc = open_attempt(f, round, attempt, now_ms, &err);
    if (rc == 0) {
        if (fa_storage_gate_ok(&f->gate))
            fa_log(FA_LOG_INFO, "storage usable again; attempts resume",
                   "round=%" PRIu64 " attempt=%u free_mib=%.1f", round, attempt,
                   (double)f->storage_free / 1048576.0);
        update_gauges(f);
        return;
    }
    f->phase = FEDAGG__PHASE__PHASE_IDLE;
    fa_secagg_server_del(f->sa);
    f->sa = NULL;
    storage_failed(f, now_ms, fa_error_msg(&err, rc));
}

/* The next round, or the end of the federation. */
static int open_next_round(fa_fed *f, uint64_t now_ms, fa_error *err)
{
    if (f->rounds_limit && f->rounds_completed >= f->rounds_limit) {
        f->round++;
        f->attempt = 0;
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        fa_secagg_server_del(f->sa);
        f->sa = NULL;
        fa_log(FA_LOG_INFO, "federation finished", "rounds=%" PRIu64 " version=%" PRIu64,
               f->rounds_completed, f->cur.version);
        update_gauges(f);
        return save_state(f, err);
    }
    open_gated(f, f->round + 1, 0, now_ms);
    return 0;
}

/* Adds the attempt in flight to the history: completed (the sum's
 * survivors and dropouts, the new version) or aborted (with why). */
static void record_attempt(fa_fed *f, int completed, const char *why)
{
    fa_fed_attempt a = f->cur_att;
    char *parts = NULL, *drops = NULL;
    size_t pn = 0, dn = 0;
    FILE *pf = open_memstream(&parts, &pn), *df = open_memstream(&drops, &dn);

    a.completed = completed;
    a.end_unix_ms = fa_time_unix_ms();
    if (!a.start_unix_ms)
        a.start_unix_ms = f->attempt_start_unix_ms;
    snprintf(a.reason, sizeof(a.reason), "%s", why ? why : "");
    if (pf && df) {
        if (completed && f->sa) {
            for (size_t i = 0; i < fa_secagg_server_survivor_count(f->sa); i++)
                fprintf(pf, "%s%s", i ? "," : "", fa_secagg_server_survivor(f->sa, i));
            for (size_t i = 0; i < fa_secagg_server_dropout_count(f->sa); i++)
                fprintf(df, "%s%s", i ? "," : "", fa_secagg_server_dropout(f->sa, i));
        } else {
            size_t k = 0;
            for (size_t i = 0; i < f->n_regions; i++)
                if (f->regions[i].have_msg[FA_FED_ADVERTISE])
                    fprintf(df, "%s%s", k++ ? "," : "", f->regions[i].id);
        }
    }
    if (pf)
        fclose(pf);
    if (df)
        fclose(df);
    a.participants = parts;
    a.dropped = drops;
    a.version = completed ? f->cur.version : 0;
    if (fa_fed_history_add(&f->hist, &a) != 0)
        fa_log(FA_LOG_WARN, "out of memory: the attempt is not in the history", NULL);
    free(parts);
    free(drops);
}

static void abort_attempt(fa_fed *f, uint64_t now_ms, const char *why)
{
    fa_error err;
    uint32_t next = f->attempt + 1;
    uint64_t round = f->round;
    int given_up = 0;

    fa_log(FA_LOG_WARN, "round attempt aborted", "round=%" PRIu64 " attempt=%u phase=%s reason=%s",
           f->round, f->attempt,
           f->phase >= 1 && f->phase <= N_KINDS ? kind_names[f->phase - 1] : "?", why);
    f->rounds_aborted++;
    count_outcome(f, "aborted");
    record_attempt(f, 0, why);
    /* Every region that advertised in this attempt and is not carried to its
     * end is a dropout of the attempt. */
    for (size_t i = 0; i < f->n_regions; i++)
        if (f->regions[i].have_msg[FA_FED_ADVERTISE]) {
            f->regions[i].dropouts++;
            metric_region(f, "fedagg_region_dropouts_total", f->regions[i].id, 1, 0);
        }
    if (f->max_attempts && next >= f->max_attempts) {
        fa_log(FA_LOG_WARN, "round given up after its last attempt",
               "round=%" PRIu64 " attempts=%u", f->round, next);
        round++;
        next = 0;
        given_up = 1;
    }
    (void)err;
    open_gated(f, round, next, now_ms);
    (void)given_up;
}

/* ------------------------------------------------------------------------ */
/* Completing a round                                                        */
/* ------------------------------------------------------------------------ */

static int in_list(const char *region, const char *const *ids, size_t n);
static int replay_audit_log(fa_fed *f, fa_error *err);

/* config ClipMode */
static const char *clip_name(int mode)
{
    return mode == FEDAGG__CLIP_MODE__CLIP_COORDINATE ? "coordinate"
           : mode == FEDAGG__CLIP_MODE__CLIP_BOTH     ? "both"
           : mode == FEDAGG__CLIP_MODE__CLIP_NONE     ? "none"
                                                      : "l2";
}

/* Builds the audit record of the completed attempt in f->sa. */
static int build_record(fa_fed *f, uint64_t prev_version, const uint8_t prev_sha[32],
                        uint64_t new_version, const uint8_t new_sha[32], uint64_t commit_ms,
                        uint8_t **out, size_t *out_len, fa_error *err)
{
    Fedagg__AuditRecord rec = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__OptimizerSettings opt = FEDAGG__OPTIMIZER_SETTINGS__INIT;
    Fedagg__QuantizationSettings q = FEDAGG__QUANTIZATION_SETTINGS__INIT;
    size_t ns = fa_secagg_server_survivor_count(f->sa);
    size_t nd = fa_secagg_server_dropout_count(f->sa);
    Fedagg__RegionCommitment *cm = calloc(ns ? ns : 1, sizeof(*cm));
    Fedagg__RegionCommitment **cmp = calloc(ns ? ns : 1, sizeof(*cmp));
    char **parts = calloc(ns ? ns : 1, sizeof(char *));
    char **drops = calloc(nd ? nd : 1, sizeof(char *));
    uint8_t(*shas)[32] = calloc(ns ? ns : 1, 32);
    uint8_t(*sigs)[64] = calloc(ns ? ns : 1, 64);
    size_t ne = fa_fed_eval_count(f->feval);
    Fedagg__SignedEval *evs = calloc(ne ? ne : 1, sizeof(*evs));
    Fedagg__SignedEval **evp = calloc(ne ? ne : 1, sizeof(*evp));
    Fedagg__EvalSummary fsum, csum;
    Fedagg__NamedValue fnv[FA_EVAL_MAX_METRICS], *fnvp[FA_EVAL_MAX_METRICS];
    Fedagg__NamedValue cnv[FA_EVAL_MAX_METRICS], *cnvp[FA_EVAL_MAX_METRICS];
    fa_eval_summary fe;
    size_t np = fa_privacy_ledger_count(f->privacy), npr = 0;
    Fedagg__SignedPrivacy *pvs = calloc(np ? np : 1, sizeof(*pvs));
    Fedagg__SignedPrivacy **pvp = calloc(np ? np : 1, sizeof(*pvp));
    int rc = 0;

    if (!cm || !cmp || !parts || !drops || !shas || !sigs || !evs || !evp || !pvs || !pvp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "audit record: out of memory");
        goto out;
    }
    for (size_t i = 0; i < ns; i++) {
        const char *id;
        int signed_ = 0;
        fedagg__region_commitment__init(&cm[i]);
        rc = fa_secagg_server_commitment(f->sa, i, &id, shas[i], sigs[i], &signed_);
        if (rc != 0)
            goto out;
        parts[i] = (char *)fa_secagg_server_survivor(f->sa, i);
        cm[i].region = (char *)id;
        cm[i].upload_sha256.data = shas[i];
        cm[i].upload_sha256.len = 32;
        cm[i].signature.data = sigs[i];
        cm[i].signature.len = signed_ ? 64 : 0; /* unsigned: dropped before round 3 */
        cm[i].upload_bytes = fa_secagg_masked_bytes(f->sa_cfg.vector_len, f->sa_cfg.ring_bits);
        cmp[i] = &cm[i];
    }
    for (size_t i = 0; i < nd; i++)
        drops[i] = (char *)fa_secagg_server_dropout(f->sa, i);

    rec.version = 1;
    rec.federation_id = f->federation_id;
    rec.round = f->round;
    rec.attempt = f->attempt;
    rec.start_unix_ms = f->attempt_start_unix_ms;
    rec.commit_unix_ms = commit_ms;
    rec.config_digest.data = f->config_digest;
    rec.config_digest.len = 32;
    rec.n_participants = ns;
    rec.participants = parts;
    rec.n_dropped = nd;
    rec.dropped = drops;
    rec.n_commitments = ns;
    rec.commitments = cmp;
    rec.prev_model_sha256.data = (uint8_t *)prev_sha;
    rec.prev_model_sha256.len = 32;
    rec.new_model_sha256.data = (uint8_t *)new_sha;
    rec.new_model_sha256.len = 32;
    rec.prev_version = prev_version;
    rec.new_version = new_version;
    opt.kind = (char *)fa_server_opt_kind_name(f->opt_cfg.kind);
    opt.learning_rate = f->opt_cfg.learning_rate;
    opt.momentum = f->opt_cfg.momentum;
    opt.beta1 = f->opt_cfg.beta1;
    opt.beta2 = f->opt_cfg.beta2;
    opt.tau = f->opt_cfg.tau;
    rec.optimizer = &opt;
    q.bits = f->quant.bits;
    q.ring_bits = f->sa_cfg.ring_bits;
    q.clip_mode = (char *)clip_name(f->clip_cfg);
    q.clip_l2_norm = f->quant.clip_l2_norm;
    q.clip_value = f->quant.clip_value;
    q.max_examples = f->max_examples;
    q.range = fa_global_model_per_tensor(f->model) ? "adaptive" : "fixed";
    if (fa_global_model_per_tensor(f->model)) {
        q.ranges_sha256.data = f->round_ranges_sha;
        q.ranges_sha256.len = 32;
    }
    rec.quantization = &q;
    rec.threshold = f->sa_cfg.threshold;
    rec.neighbours = f->sa_cfg.neighbours;
    rec.num_params = f->d;
    rec.software_version = FA_VERSION;
    rec.tensor_table_digest.data = (uint8_t *)fa_global_model_digest(f->model);
    rec.tensor_table_digest.len = 32;
    rec.num_tensors = fa_tensors_count(fa_global_model_table(f->model));
    /* Federated evaluation of the version this round started from. */
    for (size_t i = 0; i < ne; i++) {
        fa_fed_eval_at(f->feval, i, &evs[i]);
        evp[i] = &evs[i];
    }
    rec.n_evaluations = ne;
    rec.evaluations = evp;
    fa_fed_eval_summary(f->feval, &fe);
    if (fe.valid && fe.version == prev_version) {
        fa_eval_summary_to_pb(&fe, &fsum, fnv, fnvp);
        rec.federated_eval = &fsum;
    }
    if (f->central.valid && f->central.version == prev_version) {
        fa_eval_summary_to_pb(&f->central, &csum, cnv, cnvp);
        rec.central_eval = &csum;
    }
    /* The privacy statements of the participants (a dropout's update is not
     * in the sum: its statement does not belong to this model). */
    for (size_t i = 0; i < np; i++) {
        const char *who;
        fa_privacy_ledger_at(f->privacy, i, &pvs[npr], &who);
        if (in_list(who, (const char *const *)parts, ns)) {
            pvp[npr] = &pvs[npr];
            npr++;
        }
    }
    rec.n_privacy = npr;
    rec.privacy = pvp;

    *out_len = fedagg__audit_record__get_packed_size(&rec);
    *out = malloc(*out_len ? *out_len : 1);
    if (!*out) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "audit record: out of memory");
        goto out;
    }
    fedagg__audit_record__pack(&rec, *out);
out:
    free(cm);
    free(cmp);
    free(parts);
    free(drops);
    free(shas);
    free(sigs);
    free(evs);
    free(evp);
    free(pvs);
    free(pvp);
    return rc;
}

/* Appends the record of the completed attempt and remembers the RoundResult. */
static int append_record(fa_fed *f, uint64_t prev_version, const uint8_t prev_sha[32],
                         uint64_t commit_ms, fa_error *err)
{
    Fedagg__RoundResult res = FEDAGG__ROUND_RESULT__INIT;
    Fedagg__AuditRecord *rec = NULL;
    fa_audit_append_result ar;
    uint8_t *enc = NULL;
    size_t enc_len = 0;
    ProtobufCBinaryData proof[FA_MERKLE_MAX_PROOF];
    int rc;

    memset(&ar, 0, sizeof(ar));
    rc = build_record(f, prev_version, prev_sha, f->cur.version, f->cur.model_sha256, commit_ms,
                      &enc, &enc_len, err);
    if (rc != 0)
        return rc;
    rec = fedagg__audit_record__unpack(NULL, enc_len, enc);
    if (!rec) {
        free(enc);
        return fa_errorf(err, FA_ERR_NOMEM, "audit record: cannot decode what was encoded");
    }
    rc = fa_audit_log_append(f->audit, rec, &ar, err);
    fedagg__audit_record__free_unpacked(rec, NULL);
    free(enc);
    if (rc != 0)
        return rc;

    res.round = f->round;
    res.attempt = f->attempt;
    res.new_version = f->cur.version;
    res.model_sha256.data = f->cur.model_sha256;
    res.model_sha256.len = 32;
    res.checkpoint = ar.checkpoint;
    res.leaf_index = ar.index;
    for (size_t i = 0; i < ar.proof_len; i++) {
        proof[i].data = ar.proof + 32 * i;
        proof[i].len = 32;
    }
    res.n_inclusion_proof = ar.proof_len;
    res.inclusion_proof = proof;
    free(f->last_result);
    f->last_result_len = fedagg__round_result__get_packed_size(&res);
    f->last_result = malloc(f->last_result_len ? f->last_result_len : 1);
    if (f->last_result)
        fedagg__round_result__pack(&res, f->last_result);
    else
        f->last_result_len = 0;
    f->last_round = f->round;
    f->last_attempt = f->attempt;
    for (size_t i = 0; i < f->n_last_participants; i++)
        free(f->last_participants[i]);
    free(f->last_participants);
    f->n_last_participants = fa_secagg_server_survivor_count(f->sa);
    f->last_participants =
        calloc(f->n_last_participants ? f->n_last_participants : 1, sizeof(char *));
    for (size_t i = 0; f->last_participants && i < f->n_last_participants; i++)
        f->last_participants[i] = strdup(fa_secagg_server_survivor(f->sa, i));
    if (!f->last_participants)
        f->n_last_participants = 0;
    fa_log(FA_LOG_INFO, "audit record appended",
           "round=%" PRIu64 " attempt=%u index=%" PRIu64 " tree_size=%" PRIu64, f->round,
           f->attempt, ar.index, ar.tree_size);
    fa_audit_append_result_free(&ar);
    return 0;
}

static void evaluate(fa_fed *f)
{
    fa_mlp_eval ev;
    fa_error err;

    if (!f->eval_net || (f->eval_every > 1 && f->cur.version % f->eval_every != 0) ||
        (f->have_eval && f->eval_version == f->cur.version))
        return;
    fa_error_clear(&err);
    if (fa_global_model_read_mlp(f->model, f->store, f->cur.version, &f->eval_layout,
                                 f->eval_params, &err) != 0 ||
        fa_mlp_set_params(f->eval_net, f->eval_params, &err) != 0 ||
        fa_mlp_evaluate(f->eval_net, &f->eval_data.ds, &ev, &err) != 0) {
        fa_log(FA_LOG_WARN, "evaluation failed", "error=\"%s\"", err.msg);
        return;
    }
    f->eval_accuracy = ev.accuracy;
    f->eval_loss = ev.mean_loss;
    f->eval_version = f->cur.version;
    f->have_eval = 1;
    {
        fa_fed_version_eval *ve = fa_fed_history_version(&f->hist, f->cur.version);
        if (ve)
            ve->global_accuracy = ev.accuracy;
    }
    fa_log(FA_LOG_INFO, "global model evaluated",
           "version=%" PRIu64 " accuracy=%.4f loss=%.4f examples=%u", f->cur.version, ev.accuracy,
           ev.mean_loss, ev.n);
}

/* Tests: with FEDAGG_DEBUG_DUMP_DIR set, the unmasked ring sum of each
 * completed attempt is written there (sum-r<R>-a<A>.u32 and its ring bits in
 * .u32.bits), to be compared bit for bit with the regions' quantised inputs.
 * The sum is what the aggregator learns anyway. */
static void debug_dump_sum(fa_fed *f)
{
    const char *dir = getenv("FEDAGG_DEBUG_DUMP_DIR");
    size_t n = (size_t)f->sa_cfg.vector_len;
    char path[4096], bits[16];
    uint32_t *q;

    if (!dir || !*dir || !(q = malloc(n * sizeof(uint32_t))))
        return;
    snprintf(path, sizeof(path), "%s/sum-r%" PRIu64 "-a%u.u32.bits", dir, f->round, f->attempt);
    snprintf(bits, sizeof(bits), "%u", f->sa_cfg.ring_bits);
    if (fa_secagg_server_result_ring(f->sa, q, n, NULL) == 0 &&
        fa_file_write_atomic(path, bits, strlen(bits), 0644, NULL) == 0) {
        path[strlen(path) - 5] = '\0';
        fa_file_write_atomic(path, q, n * sizeof(uint32_t), 0644, NULL);
    }
    free(q);
}

/* The mean delta of the round, chunk by chunk, decoded from the unmasked
 * sum as the streaming step asks for it (fa_global_model_delta_fn). */
static int sum_delta(void *ctx, uint64_t off, float *out, size_t n, fa_error *err)
{
    const fa_fed *f = ctx;
    return fa_secagg_server_result_f32_range(f->sa, off, out, n, err);
}

/* Commits version cur + 1 in one streaming pass (fa_global_model_step): the
 * mean delta decoded from the sum, the optimizer's step from the current
 * version's weights and state files, the new model, master weights,
 * ranges and optimizer state (its `steps` in the metadata) written as they
 * are computed. */
static int commit_version(fa_fed *f, uint64_t steps, fa_error *err)
{
    char round_s[32], attempt_s[32], version_s[32], prev_hex[65], steps_s[32];
    char optdesc[256];
    uint64_t version = f->cur.version + 1;
    int rc;

    snprintf(round_s, sizeof(round_s), "%" PRIu64, f->round);
    snprintf(attempt_s, sizeof(attempt_s), "%u", f->attempt);
    snprintf(version_s, sizeof(version_s), "%" PRIu64, version);
    fa_model_store_hex(f->cur.model_sha256, prev_hex);
    snprintf(steps_s, sizeof(steps_s), "%" PRIu64, steps);
    fa_server_opt_describe(f->opt, optdesc, sizeof(optdesc));
    const char *meta[] = {"format",
                          "pt",
                          "fedagg.version",
                          version_s,
                          "fedagg.round",
                          round_s,
                          "fedagg.attempt",
                          attempt_s,
                          "fedagg.prev_sha256",
                          prev_hex,
                          "fedagg.federation",
                          f->federation_id};
    const char *smeta[] = {"fedagg.optimizer", optdesc,  "fedagg.steps", steps_s,
                           "fedagg.version",   version_s};
    rc = fa_global_model_step(f->model, f->store, version, f->round, f->opt, sum_delta, f, meta,
                              sizeof(meta) / sizeof(meta[0]) / 2, smeta,
                              sizeof(smeta) / sizeof(smeta[0]) / 2, err);
    if (rc != 0)
        return rc;
    return fa_model_store_current(f->store, &f->cur);
}

/* A new version is current: regions' evaluations are now of it, the
 * evaluator command evaluates it, and its ranges are the next round's. */
static void version_changed(fa_fed *f, uint64_t now_ms)
{
    char path[4096];
    fa_error err;

    fa_fed_eval_begin(f->feval, f->cur.version, f->cur.model_sha256);
    fa_error_clear(&err);
    if (fa_global_model_ranges_digest(f->model, f->round_ranges_sha, &err) != 0)
        fa_log(FA_LOG_WARN, "cannot hash the quantiser ranges", "error=\"%s\"", err.msg);
    if (f->evaluator) {
        fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
        fa_evaluator_request(f->evaluator, f->cur.version, path, now_ms);
    }
}

/* The unmask phase closed: the sum is known.  Apply it and start the next round. */
static int finish_round(fa_fed *f, uint64_t now_ms, int *committed, fa_error *err)
{
    const uint64_t t_finish = fa_time_mono_ns();
    uint64_t prev_version = f->cur.version;
    uint8_t prev_sha[32];
    double wsum = 0;
    double secs = (double)(fa_time_unix_ms() - f->attempt_start_unix_ms) / 1000.0;
    double t0 = (double)fa_time_mono_ns() / 1e9;
    int rc;

    memcpy(prev_sha, f->cur.model_sha256, 32);
    debug_dump_sum(f);
    /* The mean, decoded once into the sum's own memory (the streamed step
     * reads it several times). */
    rc = fa_secagg_server_decode_in_place(f->sa, &wsum, err);
    if (rc != 0)
        goto out;
    /* Optimizer step and the new version's files in one streaming pass: the
     * weights and the state are read from the current version's files and
     * the new ones written beside them, so a failed commit leaves the model
     * and the optimizer exactly as they were. */
    rc = commit_version(f, f->opt_steps + 1, err);
    if (rc != 0)
        goto out;
    f->opt_steps++;
    *committed = 1;
    fa_log(FA_LOG_DEBUG, "round stepped and committed",
           "round=%" PRIu64 " version=%" PRIu64 " seconds=%.3f", f->round, f->cur.version,
           (double)fa_time_mono_ns() / 1e9 - t0);
    fa_failpoint("aggregator-after-commit");
    /* Committed.  From here on the round counts: the audit record follows;
     * if appending fails, a restart appends it (see fa_fed_open). */
    rc = append_record(f, prev_version, prev_sha, fa_time_unix_ms(), err);
    if (rc != 0) {
        fa_log(FA_LOG_ERROR,
               "audit append failed after the model was committed; "
               "the aggregator must restart to repair the log",
               "round=%" PRIu64 " version=%" PRIu64 " error=\"%s\"", f->round, f->cur.version,
               fa_error_msg(err, rc));
        goto out;
    }
    for (size_t i = 0; i < fa_secagg_server_survivor_count(f->sa); i++) {
        const char *id = fa_secagg_server_survivor(f->sa, i);
        struct region *r = find_region(f, id);
        if (r) {
            r->rounds_participated++;
            metric_region(f, "fedagg_region_rounds_total", id, 1, 0);
        }
    }
    for (size_t i = 0; i < fa_secagg_server_dropout_count(f->sa); i++) {
        const char *id = fa_secagg_server_dropout(f->sa, i);
        struct region *r = find_region(f, id);
        if (r) {
            r->dropouts++;
            metric_region(f, "fedagg_region_dropouts_total", id, 1, 0);
        }
    }
    f->rounds_completed++;
    record_attempt(f, 1, NULL);
    count_outcome(f, "completed");
    if (f->metrics)
        fa_metrics_observe(f->metrics, "fedagg_round_duration_seconds", NULL, secs);
    version_changed(f, now_ms);
    evaluate(f);
    fa_log(FA_LOG_INFO, "round completed",
           "round=%" PRIu64 " attempt=%u version=%" PRIu64 " participants=%zu dropped=%zu "
           "weight_sum=%.4f seconds=%.2f",
           f->round, f->attempt, f->cur.version, fa_secagg_server_survivor_count(f->sa),
           fa_secagg_server_dropout_count(f->sa), wsum, secs);
    /* The commit of a large model takes a while (a minute at 5 x 10^8): the
     * next attempt's deadlines count from now, not from the unmask close. */
    now_ms += (fa_time_mono_ns() - t_finish) / 1000000u;
    rc = open_next_round(f, now_ms, err);
out:
#ifdef __GLIBC__
    /* A round frees tens of MB in blocks of several sizes (saved states,
     * scratch buffers); glibc keeps them in its heap once its
     * mmap threshold has adapted, and the next round's blocks do not always
     * fit: without giving the free pages back, peak memory creeps up round
     * after round (fedagg-bench round, round_rss). */
    malloc_trim(0);
#endif
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Phase closes                                                              */
/* ------------------------------------------------------------------------ */

static size_t regions_drained(const fa_fed *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_regions; i++)
        n += f->regions[i].drained != 0;
    return n;
}

static int phase_due(fa_fed *f, uint64_t now_ms)
{
    fa_secagg_server_status st;
    int k = f->phase - 1;

    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_UNMASK)
        return 0;
    if (now_ms >= f->phase_opened_ms + f->deadline_ms[k])
        return 1;
    fa_secagg_server_status_get(f->sa, &st);
    if (f->phase == FEDAGG__PHASE__PHASE_ADVERTISE)
        return st.received >= f->n_regions - regions_drained(f) &&
               now_ms >= f->last_advertise_ms + f->advertise_grace_ms;
    return st.expected == 0 && st.in_flight == 0;
}

static int close_phase(fa_fed *f, uint64_t now_ms)
{
    fa_secagg_server_status st;
    fa_error err;
    int rc, closing = f->phase;
    double secs = (double)(now_ms - f->phase_opened_ms) / 1000.0;

    fa_error_clear(&err);
    fa_secagg_server_status_get(f->sa, &st);
    if (closing == FEDAGG__PHASE__PHASE_ADVERTISE) {
        uint32_t need = f->min_regions > f->sa_cfg.threshold ? f->min_regions : f->sa_cfg.threshold;
        if (st.received < need) {
            if (st.received == 0) {
                /* Nobody came: keep waiting in a fresh window rather than
                 * counting an aborted attempt per deadline of silence. */
                f->phase_opened_ms = now_ms;
                return 0;
            }
            char why[128];
            snprintf(why, sizeof(why), "%u regions advertised, %u needed", st.received, need);
            abort_attempt(f, now_ms, why);
            return 1;
        }
    }
    if (closing == FEDAGG__PHASE__PHASE_MASKED)
        for (size_t i = 0; i < f->n_regions; i++)
            if (f->regions[i].uploading) {
                /* The secure-aggregation server removes it when it closes. */
                f->regions[i].uploading = 0;
                fa_log(FA_LOG_WARN, "partial masked upload removed from the sum",
                       "region=%s round=%" PRIu64 " attempt=%u reason=deadline", f->regions[i].id,
                       f->round, f->attempt);
            }
    rc = fa_secagg_server_close(f->sa, now_ms, &err);
    if (rc != 0) {
        abort_attempt(f, now_ms, err.msg[0] ? err.msg : fa_strerror(rc));
        return 1;
    }
    if (f->metrics) {
        char labels[64] = "";
        fa_metrics_label(labels, sizeof(labels), "phase", kind_names[closing - 1]);
        fa_metrics_observe(f->metrics, "fedagg_phase_duration_seconds", labels, secs);
    }
    if (closing >= 1 && closing <= FA_FED_HISTORY_PHASES)
        f->cur_att.phase_s[closing - 1] = secs;
    fa_secagg_server_status_get(f->sa, &st);
    fa_log(FA_LOG_INFO, "phase closed", "round=%" PRIu64 " attempt=%u phase=%s seconds=%.3f",
           f->round, f->attempt, kind_names[closing - 1], secs);
    if (st.phase == FA_SECAGG_DONE) {
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        /* Saved before the model commit: a crash in between is repaired from
         * this state on restart (fa_fed_open). */
        int committed = 0;
        rc = save_state(f, &err);
        fa_failpoint("aggregator-after-unmask");
        if (rc == 0)
            rc = finish_round(f, now_ms, &committed, &err);
        if (rc != 0 && !committed) {
            char why[600];
            snprintf(why, sizeof(why), "the new model could not be committed: %s",
                     fa_error_msg(&err, rc));
            storage_failed(f, now_ms, why); /* no new attempt before a back-off */
            abort_attempt(f, now_ms, why);
        } else if (rc != 0) {
            fa_log(FA_LOG_ERROR,
                   "round committed but not recorded; restart the aggregator to "
                   "repair the audit log",
                   "round=%" PRIu64 " error=\"%s\"", f->round, fa_error_msg(&err, rc));
            f->fatal = 1;
        }
        return 1;
    }
    f->phase = closing + 1;
    f->phase_opened_ms = now_ms;
    rc = save_state(f, &err);
    if (rc != 0) {
        char why[600];
        snprintf(why, sizeof(why), "the round state could not be saved: %s",
                 fa_error_msg(&err, rc));
        storage_failed(f, now_ms, why);
        abort_attempt(f, now_ms, why);
        return 1;
    }
    {
        char fp[64];
        snprintf(fp, sizeof(fp), "aggregator-after-%s", kind_names[closing - 1]);
        fa_failpoint(fp);
    }
    update_gauges(f);
    return 1;
}

int fa_fed_tick(fa_fed *f, uint64_t now_ms)
{
    int changed = 0;
    /* A phase that closes may make the next one due at once (everybody
     * already answered is impossible, but a zero deadline is not). */
    for (int i = 0; i < 6 && phase_due(f, now_ms); i++)
        changed |= close_phase(f, now_ms);
    for (size_t i = 0; i < f->n_regions; i++)
        if (f->regions[i].last_seen_ms && !region_connected(&f->regions[i], now_ms))
            metric_region(f, "fedagg_region_connected", f->regions[i].id, 0, 1);
    if (f->phase == FEDAGG__PHASE__PHASE_IDLE && fa_storage_gate_due(&f->gate, now_ms)) {
        open_gated(f, f->round, f->attempt, now_ms);
        changed = 1;
    }
    if (f->evaluator) {
        fa_eval_summary res;
        if (fa_evaluator_poll(f->evaluator, now_ms, &res)) {
            fa_fed_version_eval *ve = fa_fed_history_version(&f->hist, res.version);
            f->central = res;
            if (ve)
                ve->central_accuracy = res.accuracy;
            update_gauges(f);
        }
    }
    return changed;
}

uint64_t fa_fed_next_deadline_in(const fa_fed *f, uint64_t now_ms)
{
    uint64_t due;
    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_UNMASK)
        return 1000;
    due = f->phase_opened_ms + f->deadline_ms[f->phase - 1];
    return due > now_ms ? due - now_ms : 0;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

static int check_position(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                          fa_fed_reply *reply)
{
    if (!find_region(f, region))
        return reply_error(f, reply, 403, FA_ERR_AUTH,
                           "region '%s' is not a member of federation %s", region,
                           f->federation_id);
    if (f->phase == FEDAGG__PHASE__PHASE_DONE)
        return reply_error(f, reply, 409, FA_ERR_STATE, "the federation has finished its %u rounds",
                           f->rounds_limit);
    if (round != f->round || attempt != f->attempt)
        return reply_error(f, reply, 409, FA_ERR_REPLAY,
                           "%s for round %" PRIu64
                           " attempt %u, but the current one is round %" PRIu64 " attempt %u",
                           kind_names[kind], round, attempt, f->round, f->attempt);
    return 0;
}

/* Every protocol message names its sender; it must be the region the
 * client certificate names (a valid certificate of region A cannot act as
 * region B), checked before anything else looks at the message. */
static int check_sender(fa_fed *f, int kind, const char *region, const uint8_t *body, size_t len,
                        fa_fed_reply *reply)
{
    const ProtobufCMessageDescriptor *d =
        kind == FA_FED_ADVERTISE     ? &fedagg__advertise_keys__descriptor
        : kind == FA_FED_SHARES      ? &fedagg__share_keys__descriptor
        : kind == FA_FED_CONSISTENCY ? &fedagg__signed_survivors__descriptor
                                     : &fedagg__unmask_shares__descriptor;
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(d, "client_id");
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, body);
    const char *sender;
    int rc = 0;

    if (!m)
        return reply_error(f, reply, 400, FA_ERR_PARSE, "%s message from %s does not decode",
                           kind_names[kind], region);
    sender = fd ? *(const char *const *)((const uint8_t *)m + fd->offset) : NULL;
    if (!sender || strcmp(sender, region) != 0) {
        fa_log(FA_LOG_WARN, "message naming another region refused",
               "region=%s claimed=%s phase=%s", region, sender ? sender : "", kind_names[kind]);
        rc = reply_error(f, reply, 403, FA_ERR_AUTH,
                         "the client certificate names region %s but the %s message is from "
                         "'%s'",
                         region, kind_names[kind], sender ? sender : "");
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* Test switch (common/fa_failpoint.h): with
 *   FEDAGG_FAILPOINTS="fed-serve-other-model=REGION[@V]"
 * this aggregator plays the malicious one of the model-inconsistency attack
 * (Pasquini, Francati, Ateniese, CCS 2022) towards REGION from version V on
 * (0 when not given): it serves that region the current model with one bit
 * changed (the lowest mantissa bit of the last element), under that file's
 * own digest, and accepts its advertisement for it.  The regions must catch
 * it (tests/integration/it_fed_model_split.sh).  Without the variable this
 * returns 0 and nothing changes.  Returns 1 with the digest (and, when path
 * is not NULL, the file written there), 0 when the switch does not apply,
 * or an FA_ERR_* code. */
static int other_model(fa_fed *f, const char *region, uint64_t version, char *path, size_t n,
                       uint8_t sha256[32], fa_error *err)
{
    char spec[128], src[4096], *at;
    uint64_t from = 0;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    if (!fa_failpoint_value("fed-serve-other-model", spec, sizeof(spec)))
        return 0;
    if ((at = strchr(spec, '@')) != NULL) {
        *at = '\0';
        from = strtoull(at + 1, NULL, 10);
    }
    if (strcmp(spec, region) != 0 || version < from || !fa_model_store_has(f->store, version))
        return 0;
    fa_model_store_model_path(f->store, version, src, sizeof(src));
    if ((rc = fa_file_read_all(src, &data, &len, (size_t)4 << 30, err)) != 0)
        return rc;
    if (len < 16) {
        free(data);
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: too short for a model", src);
    }
    data[len - 4] ^= 1;
    crypto_hash_sha256(sha256, data, len);
    rc = 0;
    if (path) {
        snprintf(path, n, "%s/other-model-%s-%" PRIu64 ".safetensors", f->storage_dir, region,
                 version);
        rc = fa_file_write_atomic(path, data, len, 0600, err);
    }
    free(data);
    if (rc == 0 && path)
        fa_log(FA_LOG_WARN, "TEST SWITCH: serving a region another model (fed-serve-other-model)",
               "region=%s version=%" PRIu64, region, version);
    return rc == 0 ? 1 : rc;
}

/* The model an advertisement was signed for (secagg.h model_sha256) must be
 * the one this aggregator serves as current: a region that trained from
 * another gets 409 and downloads the model again; an advertisement without
 * a digest (a worker older than secagg.proto version 3) gets 400.  The
 * regions check each other's digests in the PeerList themselves; this keeps
 * an honest aggregator from ever showing them two models. */
static int check_advertised_model(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                                  fa_fed_reply *reply)
{
    uint8_t got[32], want[32];
    char g[17], w[17];
    fa_error err;
    int rc = fa_secagg_advertise_model(body, len, got);

    if (rc != 0)
        return reply_error(f, reply, 400, FA_ERR_PROTOCOL,
                           "the advertisement of region %s names no model digest: workers of "
                           "secure-aggregation protocol version 3 sign the model they trained "
                           "from; upgrade this region's worker",
                           region);
    memcpy(want, f->cur.model_sha256, 32);
    fa_error_clear(&err);
    if (other_model(f, region, f->cur.version, NULL, 0, want, &err) < 0)
        return reply_error(f, reply, 500, FA_ERR_IO, "%s", err.msg);
    if (sodium_memcmp(got, want, 32) == 0)
        return 0;
    sodium_bin2hex(g, sizeof(g), got, 8);
    sodium_bin2hex(w, sizeof(w), want, 8);
    fa_log(FA_LOG_WARN, "advertisement for another model refused",
           "region=%s version=%" PRIu64 " advertised_sha256=%s... current_sha256=%s...", region,
           f->cur.version, g, w);
    return reply_error(f, reply, 409, FA_ERR_REPLAY,
                       "region %s advertised keys for model %s..., but the current model (version "
                       "%" PRIu64 ") is %s...: download it again",
                       region, g, f->cur.version, w);
}

int fa_fed_submit(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                  const uint8_t *body, size_t len, uint64_t now_ms, fa_fed_reply *reply)
{
    struct region *r;
    uint8_t sha[32];
    fa_error err;
    int rc;

    if (kind < 0 || kind >= N_KINDS || kind == FA_FED_MASKED)
        return reply_error(f, reply, 400, FA_ERR_INVAL, "not a message phase");
    /* A retried unmask of the round that just completed: its result stands. */
    if (kind == FA_FED_UNMASK && f->last_result && round == f->last_round &&
        attempt == f->last_attempt && find_region(f, region))
        return 0;
    if (!find_region(f, region))
        return check_position(f, kind, region, round, attempt, reply); /* 403 */
    rc = check_sender(f, kind, region, body, len, reply);
    if (rc == 0)
        rc = check_position(f, kind, region, round, attempt, reply);
    if (rc != 0)
        return rc;
    r = find_region(f, region);
    if (kind == FA_FED_ADVERTISE && r->drained && !r->have_msg[kind])
        return reply_error(f, reply, 409, FA_ERR_STATE,
                           "region %s is drained by operator %s: it sits out until an operator "
                           "admits it again",
                           region, r->drained_by);
    if (kind == FA_FED_ADVERTISE && (rc = check_advertised_model(f, region, body, len, reply)) != 0)
        return rc;
    crypto_hash_sha256(sha, body, len);
    if (r->have_msg[kind]) {
        if (sodium_memcmp(sha, r->msg_sha[kind], 32) == 0)
            return 0; /* a retry of what was accepted: wait for the close again */
        if (kind == FA_FED_ADVERTISE && f->phase == FEDAGG__PHASE__PHASE_ADVERTISE) {
            /* New keys while nobody has seen the old ones: its worker
             * restarted and lost them.  They replace the old ones. */
            fa_error_clear(&err);
            rc = fa_secagg_server_readvertise(f->sa, region, body, len, now_ms, &err);
            if (rc != 0)
                return reply_error(f, reply, status_of(rc), rc, "%s", fa_error_msg(&err, rc));
            memcpy(r->msg_sha[kind], sha, 32);
            f->last_advertise_ms = now_ms;
            fa_log(FA_LOG_INFO, "advertisement replaced",
                   "region=%s round=%" PRIu64 " attempt=%u reason=\"new keys before the advertise "
                   "phase closed (did its worker restart?)\"",
                   region, round, attempt);
            return 0;
        }
        return reply_error(f, reply, 409, FA_ERR_EXISTS,
                           "region %s already sent a different %s message for round %" PRIu64
                           " attempt %u",
                           region, kind_names[kind], round, attempt);
    }
    if (f->phase > kind + 1)
        return 0; /* the phase closed (maybe before a restart): the poll answers */
    if (f->phase != kind + 1)
        return reply_error(f, reply, 409, FA_ERR_STATE,
                           "%s message for round %" PRIu64 " attempt %u arrived in the %s phase",
                           kind_names[kind], round, attempt,
                           f->phase >= 1 && f->phase <= N_KINDS ? kind_names[f->phase - 1]
                                                                : "done");
    fa_error_clear(&err);
    switch (kind) {
    case FA_FED_ADVERTISE:
        rc = fa_secagg_server_advertise(f->sa, region, body, len, now_ms, &err);
        break;
    case FA_FED_SHARES:
        rc = fa_secagg_server_share_keys(f->sa, region, body, len, now_ms, &err);
        break;
    case FA_FED_CONSISTENCY:
        rc = fa_secagg_server_consistency(f->sa, region, body, len, now_ms, &err);
        break;
    default: rc = fa_secagg_server_unmask(f->sa, region, body, len, now_ms, &err); break;
    }
    if (rc != 0)
        return reply_error(f, reply, status_of(rc), rc, "%s", fa_error_msg(&err, rc));
    memcpy(r->msg_sha[kind], sha, 32);
    r->have_msg[kind] = 1;
    if (kind == FA_FED_ADVERTISE)
        f->last_advertise_ms = now_ms;
    fa_log(FA_LOG_DEBUG, "message accepted", "region=%s round=%" PRIu64 " attempt=%u phase=%s",
           region, round, attempt, kind_names[kind]);
    return 0;
}

/* Whether `region` is in the set a phase's answer is for. */
static int in_list(const char *region, const char *const *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ids[i], region))
            return 1;
    return 0;
}

int fa_fed_poll(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                fa_fed_reply *reply)
{
    uint8_t *out = NULL;
    size_t len = 0;
    fa_error err;
    int rc;

    /* The RoundResult of the round that just completed. */
    if (kind == FA_FED_UNMASK && f->last_result && round == f->last_round &&
        attempt == f->last_attempt) {
        if (!in_list(region, (const char *const *)f->last_participants, f->n_last_participants)) {
            reply_error(f, reply, 409, FA_ERR_STATE,
                        "region %s is not among the participants of round %" PRIu64, region, round);
            return 1;
        }
        out = malloc(f->last_result_len ? f->last_result_len : 1);
        if (!out) {
            reply_error(f, reply, 500, FA_ERR_NOMEM, "out of memory");
            return 1;
        }
        memcpy(out, f->last_result, f->last_result_len);
        return reply_ok(reply, out, f->last_result_len);
    }
    if (check_position(f, kind, region, round, attempt, reply) != 0)
        return 1;
    if (f->phase <= kind + 1)
        return 0; /* still open */
    fa_error_clear(&err);
    switch (kind) {
    case FA_FED_ADVERTISE:
        rc = fa_secagg_server_peer_list(f->sa, &out, &len, &err);
        if (rc == 0) {
            Fedagg__PeerList *pl = fedagg__peer_list__unpack(NULL, len, out);
            int member = 0;
            for (size_t i = 0; pl && i < pl->n_peers; i++)
                member |= !strcmp(pl->peers[i]->client_id, region);
            if (pl)
                fedagg__peer_list__free_unpacked(pl, NULL);
            if (!member) {
                free(out);
                reply_error(f, reply, 409, FA_ERR_STATE,
                            "region %s did not advertise in time for round %" PRIu64
                            " attempt %u; it joins the next attempt",
                            region, round, attempt);
                return 1;
            }
        }
        break;
    case FA_FED_SHARES: rc = fa_secagg_server_shares_for(f->sa, region, &out, &len, &err); break;
    case FA_FED_MASKED:
        rc = fa_secagg_server_survivor_list(f->sa, &out, &len, &err);
        if (rc == 0 && !find_region(f, region)->uploaded) {
            free(out);
            reply_error(f, reply, 409, FA_ERR_STATE,
                        "region %s's masked upload did not complete before the deadline of "
                        "round %" PRIu64 " attempt %u",
                        region, round, attempt);
            return 1;
        }
        break;
    case FA_FED_CONSISTENCY:
        rc = fa_secagg_server_survivor_signatures(f->sa, &out, &len, &err);
        break;
    default: return 0; /* the RoundResult comes with the round's completion, above */
    }
    if (rc != 0) {
        reply_error(f, reply, rc == FA_ERR_NOTFOUND ? 409 : 500, rc,
                    "region %s has no %s answer in round %" PRIu64 " attempt %u: %s", region,
                    kind_names[kind], round, attempt, fa_error_msg(&err, rc));
        return 1;
    }
    return reply_ok(reply, out, len);
}

int fa_fed_masked_begin(fa_fed *f, const char *region, uint64_t round, uint32_t attempt,
                        int64_t content_length, uint64_t now_ms, uint64_t *upload, int *discard,
                        fa_fed_reply *reply)
{
    uint64_t want = fa_secagg_masked_bytes(f->sa_cfg.vector_len, f->sa_cfg.ring_bits);
    struct region *r;
    fa_error err;
    int rc;

    *discard = 0;
    *upload = 0;
    rc = check_position(f, FA_FED_MASKED, region, round, attempt, reply);
    if (rc != 0)
        return rc;
    /* The length is fixed by the round's parameters, whatever the phase. */
    if (content_length >= 0 && (uint64_t)content_length > want)
        return reply_error(f, reply, 413, FA_ERR_TOOBIG,
                           "masked upload of %" PRId64 " bytes; this round's is %" PRIu64 " bytes",
                           content_length, want);
    if (content_length != (int64_t)want)
        return reply_error(f, reply, 400, FA_ERR_PROTOCOL,
                           "masked upload needs content-length %" PRIu64 " (got %" PRId64 ")", want,
                           content_length);
    r = find_region(f, region);
    if (r->uploaded) {
        /* A retry of an upload that completed (its answer was lost): read
         * and drop it; the poll answers. */
        *discard = 1;
        return 0;
    }
    if (r->uploading) {
        /* The region started over (its first stream is stuck on a dead
         * connection): the new stream replaces it. */
        fa_secagg_server_masked_abort(f->sa, region, now_ms, NULL);
        r->uploading = 0;
        fa_log(FA_LOG_WARN, "partial masked upload removed from the sum",
               "region=%s round=%" PRIu64 " attempt=%u reason=restarted", region, f->round,
               f->attempt);
    }
    if (f->phase != FEDAGG__PHASE__PHASE_MASKED)
        return reply_error(
            f, reply, 409, FA_ERR_STATE,
            "masked upload for round %" PRIu64 " attempt %u arrived in the %s phase", round,
            attempt, f->phase >= 1 && f->phase <= N_KINDS ? kind_names[f->phase - 1] : "done");
    fa_error_clear(&err);
    rc = fa_secagg_server_masked_begin(f->sa, region, now_ms, &err);
    if (rc != 0)
        return reply_error(f, reply, status_of(rc), rc, "%s", fa_error_msg(&err, rc));
    r->uploading = 1;
    r->upload_id = ++f->next_upload_id;
    *upload = r->upload_id;
    return 0;
}

/* Whether stream `upload` is still the region's upload in flight: a stream
 * that outlived its phase (closed at the deadline) or was replaced by a newer
 * stream of the same region must not touch the sum. */
static int upload_current(fa_fed *f, const char *region, uint64_t upload)
{
    struct region *r = find_region(f, region);
    return r && r->uploading && upload != 0 && r->upload_id == upload &&
           f->phase == FEDAGG__PHASE__PHASE_MASKED;
}

int fa_fed_masked_chunk(fa_fed *f, const char *region, uint64_t upload, const uint8_t *data,
                        size_t len, uint64_t now_ms, fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    if (!upload_current(f, region, upload))
        return reply_error(f, reply, 409, FA_ERR_STATE,
                           "this masked upload was closed (its phase ended, or a newer upload "
                           "of the region replaced it)");
    fa_error_clear(&err);
    rc = fa_secagg_server_masked_chunk(f->sa, region, data, len, now_ms, &err);
    if (rc != 0)
        return reply_error(f, reply, status_of(rc), rc, "%s", fa_error_msg(&err, rc));
    fa_failpoint("aggregator-mid-masked");
    return 0;
}

int fa_fed_masked_end(fa_fed *f, const char *region, uint64_t upload, uint64_t now_ms,
                      fa_fed_reply *reply)
{
    struct region *r = find_region(f, region);
    fa_error err;
    int rc;

    if (!upload_current(f, region, upload))
        return reply_error(f, reply, 409, FA_ERR_STATE,
                           "this masked upload was closed (its phase ended, or a newer upload "
                           "of the region replaced it)");
    fa_error_clear(&err);
    rc = fa_secagg_server_masked_end(f->sa, region, now_ms, &err);
    if (rc != 0) {
        fa_secagg_server_masked_abort(f->sa, region, now_ms, NULL);
        if (r)
            r->uploading = 0;
        fa_log(FA_LOG_WARN, "partial masked upload removed from the sum",
               "region=%s round=%" PRIu64 " attempt=%u reason=malformed", region, f->round,
               f->attempt);
        return reply_error(f, reply, status_of(rc), rc, "%s", fa_error_msg(&err, rc));
    }
    if (r) {
        r->uploading = 0;
        r->uploaded = 1;
    }
    fa_log(FA_LOG_INFO, "masked upload received",
           "region=%s round=%" PRIu64 " attempt=%u bytes=%" PRIu64, region, f->round, f->attempt,
           fa_secagg_masked_bytes(f->sa_cfg.vector_len, f->sa_cfg.ring_bits));
    return 0;
}

void fa_fed_masked_abort(fa_fed *f, const char *region, uint64_t upload, uint64_t now_ms)
{
    struct region *r = find_region(f, region);
    if (!upload_current(f, region, upload))
        return;
    fa_secagg_server_masked_abort(f->sa, region, now_ms, NULL);
    r->uploading = 0;
    fa_log(FA_LOG_WARN, "partial masked upload removed from the sum",
           "region=%s round=%" PRIu64 " attempt=%u reason=disconnected", region, f->round,
           f->attempt);
}

/* ------------------------------------------------------------------------ */
/* Information                                                               */
/* ------------------------------------------------------------------------ */

int fa_fed_info(fa_fed *f, uint64_t now_ms, uint8_t **out, size_t *len, fa_error *err)
{
    Fedagg__FederationInfo fi = FEDAGG__FEDERATION_INFO__INIT;
    Fedagg__QuantParams q = FEDAGG__QUANT_PARAMS__INIT;
    char **ids = calloc(f->n_regions ? f->n_regions : 1, sizeof(char *));
    uint64_t deadline = 0;

    if (!ids)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < f->n_regions; i++)
        ids[i] = f->regions[i].id;
    if (f->phase >= FEDAGG__PHASE__PHASE_ADVERTISE && f->phase <= FEDAGG__PHASE__PHASE_UNMASK)
        deadline = fa_time_unix_ms() + fa_fed_next_deadline_in(f, now_ms);
    fi.federation_id = f->federation_id;
    fi.round = f->round;
    fi.attempt = f->attempt;
    fi.model_version = f->cur.version;
    fi.model_sha256.data = f->cur.model_sha256;
    fi.model_sha256.len = 32;
    fi.config_digest.data = f->config_digest;
    fi.config_digest.len = 32;
    fi.aggregator_public_key.data = (uint8_t *)fa_note_signer_public_key(f->signer);
    fi.aggregator_public_key.len = 32;
    fi.phase = (Fedagg__Phase)f->phase;
    fi.phase_deadline_unix_ms = deadline;
    fi.threshold = f->sa_cfg.threshold;
    fi.num_params = f->d;
    fi.tensor_table_digest.data = (uint8_t *)fa_global_model_digest(f->model);
    fi.tensor_table_digest.len = 32;
    fi.num_tensors = fa_tensors_count(fa_global_model_table(f->model));
    q.bits = f->quant.bits;
    q.ring_bits = f->sa_cfg.ring_bits;
    q.clip_mode = (uint32_t)f->quant.clip_mode;
    q.clip_l2_norm = f->quant.clip_l2_norm;
    q.clip_value = f->quant.clip_value;
    q.max_examples = f->max_examples;
    q.per_tensor = fa_global_model_per_tensor(f->model);
    q.l2_clip_mode = (uint32_t)f->clip_cfg;
    fi.quant = &q;
    fi.n_regions = f->n_regions;
    fi.regions = ids;
    fi.neighbours = f->sa_cfg.neighbours;
    fi.finished = f->phase == FEDAGG__PHASE__PHASE_DONE;
    *len = fedagg__federation_info__get_packed_size(&fi);
    *out = malloc(*len ? *len : 1);
    if (!*out) {
        free(ids);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    fedagg__federation_info__pack(&fi, *out);
    free(ids);
    return 0;
}

int fa_fed_status(fa_fed *f, uint8_t **out, size_t *len, fa_error *err)
{
    Fedagg__Status s = FEDAGG__STATUS__INIT;
    Fedagg__RegionStatus *rs = calloc(f->n_regions ? f->n_regions : 1, sizeof(*rs));
    Fedagg__RegionStatus **rsp = calloc(f->n_regions ? f->n_regions : 1, sizeof(*rsp));
    uint64_t now = fa_time_mono_ns() / 1000000u;
    Fedagg__EvalSummary fsum, csum;
    Fedagg__NamedValue fnv[FA_EVAL_MAX_METRICS], *fnvp[FA_EVAL_MAX_METRICS];
    Fedagg__NamedValue cnv[FA_EVAL_MAX_METRICS], *cnvp[FA_EVAL_MAX_METRICS];
    fa_eval_summary fe;
    int rc = 0;

    if (!rs || !rsp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < f->n_regions; i++) {
        fedagg__region_status__init(&rs[i]);
        rs[i].id = f->regions[i].id;
        rs[i].connected = region_connected(&f->regions[i], now);
        rs[i].rounds_participated = f->regions[i].rounds_participated;
        rs[i].dropouts = f->regions[i].dropouts;
        rs[i].bytes_received = f->regions[i].bytes_received;
        rsp[i] = &rs[i];
    }
    s.federation_id = f->federation_id;
    s.round = f->round;
    s.attempt = f->attempt;
    s.phase = (Fedagg__Phase)f->phase;
    s.model_version = f->cur.version;
    s.eval_accuracy = f->have_eval ? f->eval_accuracy : 0;
    s.eval_loss = f->have_eval ? f->eval_loss : 0;
    s.n_regions = f->n_regions;
    s.regions = rsp;
    s.rounds_completed = f->rounds_completed;
    s.rounds_aborted = f->rounds_aborted;
    s.audit_tree_size = fa_audit_log_signed_size(f->audit);
    s.num_tensors = fa_tensors_count(fa_global_model_table(f->model));
    s.num_params = f->d;
    fa_fed_eval_summary(f->feval, &fe);
    if (!fe.valid)
        fa_fed_eval_last(f->feval, &fe);
    if (fe.valid) {
        fa_eval_summary_to_pb(&fe, &fsum, fnv, fnvp);
        s.federated_eval = &fsum;
    }
    if (f->central.valid) {
        fa_eval_summary_to_pb(&f->central, &csum, cnv, cnvp);
        s.central_eval = &csum;
    }
    *len = fedagg__status__get_packed_size(&s);
    *out = malloc(*len ? *len : 1);
    if (!*out) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    fedagg__status__pack(&s, *out);
out:
    free(rs);
    free(rsp);
    return rc;
}

static const char *phase_name(int phase)
{
    switch (phase) {
    case FEDAGG__PHASE__PHASE_ADVERTISE: return "advertise";
    case FEDAGG__PHASE__PHASE_SHARES: return "shares";
    case FEDAGG__PHASE__PHASE_MASKED: return "masked";
    case FEDAGG__PHASE__PHASE_CONSISTENCY: return "consistency";
    case FEDAGG__PHASE__PHASE_UNMASK: return "unmask";
    case FEDAGG__PHASE__PHASE_DONE: return "finished";
    default: return "idle";
    }
}

/* An evaluation summary as JSON (NaN values left out). */
static json_t *summary_json(const fa_eval_summary *s)
{
    json_t *o = json_object(), *m = json_object();
    if (!o || !m) {
        json_decref(o);
        json_decref(m);
        return NULL;
    }
    json_object_set_new(o, "version", json_integer((json_int_t)s->version));
    json_object_set_new(o, "regions", json_integer(s->regions));
    json_object_set_new(o, "num_examples", json_integer((json_int_t)s->n));
    if (!isnan(s->loss))
        json_object_set_new(o, "loss", json_real(s->loss));
    if (!isnan(s->accuracy))
        json_object_set_new(o, "accuracy", json_real(s->accuracy));
    for (size_t i = 0; i < s->n_metrics; i++)
        if (!isnan(s->values[i]))
            json_object_set_new(m, s->names[i], json_real(s->values[i]));
    json_object_set_new(o, "metrics", m);
    return o;
}

int fa_fed_status_json(fa_fed *f, char **out, fa_error *err)
{
    json_t *o = json_object(), *regions = json_array();
    uint64_t now = fa_time_mono_ns() / 1000000u;
    char *text;

    *out = NULL;
    if (!o || !regions) {
        json_decref(o);
        json_decref(regions);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    json_object_set_new(o, "federation_id", json_string(f->federation_id));
    json_object_set_new(o, "round", json_integer((json_int_t)f->round));
    json_object_set_new(o, "attempt", json_integer(f->attempt));
    json_object_set_new(o, "phase", json_string(phase_name(f->phase)));
    json_object_set_new(o, "model_version", json_integer((json_int_t)f->cur.version));
    if (f->have_eval) {
        json_object_set_new(o, "eval_version", json_integer((json_int_t)f->eval_version));
        json_object_set_new(o, "eval_accuracy", json_real(f->eval_accuracy));
        json_object_set_new(o, "eval_loss", json_real(f->eval_loss));
    }
    json_object_set_new(o, "rounds_completed", json_integer((json_int_t)f->rounds_completed));
    json_object_set_new(o, "rounds_aborted", json_integer((json_int_t)f->rounds_aborted));
    json_object_set_new(o, "audit_tree_size",
                        json_integer((json_int_t)fa_audit_log_signed_size(f->audit)));
    json_object_set_new(
        o, "num_tensors",
        json_integer((json_int_t)fa_tensors_count(fa_global_model_table(f->model))));
    json_object_set_new(o, "num_params", json_integer((json_int_t)f->d));
    {
        json_t *so = json_object();
        if (so) {
            json_object_set_new(so, "ok", json_boolean(!f->gate.blocked));
            if (f->gate.blocked)
                json_object_set_new(so, "reason", json_string(f->gate.reason));
            json_object_set_new(so, "failures", json_integer((json_int_t)f->gate.total));
            if (f->storage_free)
                json_object_set_new(so, "free_bytes", json_integer((json_int_t)f->storage_free));
            json_object_set_new(o, "storage", so);
        }
    }
    {
        fa_eval_summary fe;
        fa_fed_eval_summary(f->feval, &fe);
        if (!fe.valid)
            fa_fed_eval_last(f->feval, &fe);
        if (fe.valid)
            json_object_set_new(o, "federated_eval", summary_json(&fe));
        if (f->central.valid)
            json_object_set_new(o, "central_eval", summary_json(&f->central));
    }
    for (size_t i = 0; i < f->n_regions; i++) {
        const struct region *r = &f->regions[i];
        json_t *ro = json_object();
        if (!ro)
            continue;
        json_object_set_new(ro, "id", json_string(r->id));
        json_object_set_new(ro, "connected", json_boolean(region_connected(r, now)));
        json_object_set_new(ro, "rounds_participated",
                            json_integer((json_int_t)r->rounds_participated));
        json_object_set_new(ro, "dropouts", json_integer((json_int_t)r->dropouts));
        json_object_set_new(ro, "bytes_received", json_integer((json_int_t)r->bytes_received));
        {
            double eps, delta, budget;
            if (fa_privacy_ledger_region(f->privacy, r->id, &eps, &delta, &budget)) {
                json_t *pj = json_object();
                json_object_set_new(pj, "epsilon", json_real(eps));
                json_object_set_new(pj, "delta", json_real(delta));
                json_object_set_new(pj, "budget_epsilon", json_real(budget));
                json_object_set_new(ro, "privacy", pj);
            }
        }
        json_array_append_new(regions, ro);
    }
    json_object_set_new(o, "regions", regions);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    *out = text;
    return 0;
}

int fa_fed_model(fa_fed *f, uint64_t version, int f32, char *path, size_t n,
                 uint64_t *out_version, uint8_t sha256[32])
{
    if (version == UINT64_MAX)
        version = f->cur.version;
    if (!fa_model_store_has(f->store, version) ||
        fa_model_store_sha256(f->store, version, sha256, NULL) != 0)
        return FA_ERR_NOTFOUND;
    if (f32) {
        /* The master weights, or the model itself when it is all F32. */
        struct fa_model_version v;
        if (fa_model_store_version(f->store, version, &v) != 0 ||
            !fa_model_store_weights_path(f->store, version, path, n))
            return FA_ERR_NOTFOUND;
        if (v.has_master)
            memcpy(sha256, v.master_sha256, 32);
    } else {
        fa_model_store_model_path(f->store, version, path, n);
    }
    *out_version = version;
    return 0;
}

int fa_fed_model_for(fa_fed *f, const char *region, uint64_t version, int f32, char *path, size_t n,
                     uint64_t *out_version, uint8_t sha256[32])
{
    fa_error err;
    int rc = fa_fed_model(f, version, f32, path, n, out_version, sha256);

    if (rc != 0 || f32 || !region)
        return rc;
    fa_error_clear(&err);
    rc = other_model(f, region, *out_version, path, n, sha256, &err);
    if (rc < 0)
        fa_log(FA_LOG_ERROR, "test switch fed-serve-other-model failed", "error=\"%s\"", err.msg);
    return rc < 0 ? rc : 0;
}

int fa_fed_submit_privacy(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                          fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_MASKED)
        return reply_error(f, reply, 409, FA_ERR_STATE,
                           "privacy statements are taken from the advertise to the masked phase "
                           "of an attempt (before the update is uploaded)");
    fa_error_clear(&err);
    rc = fa_privacy_ledger_submit(f->privacy, region, body, len, &err);
    if (rc != 0) {
        int status = rc == FA_ERR_AUTH                             ? 403
                     : rc == FA_ERR_REPLAY || rc == FA_ERR_EXISTS ? 409
                     : rc == FA_ERR_NOMEM                         ? 500
                                                                  : 400;
        fa_log(FA_LOG_WARN, "privacy statement refused", "region=%s status=%d error=\"%s\"",
               region, status, fa_error_msg(&err, rc));
        return reply_error(f, reply, status, rc, "%s", fa_error_msg(&err, rc));
    }
    {
        double eps = 0, delta = 0, budget = 0;
        fa_privacy_ledger_region(f->privacy, region, &eps, &delta, &budget);
        fa_log(FA_LOG_INFO, "privacy statement accepted",
               "region=%s round=%" PRIu64 " attempt=%u epsilon_total=%.4f delta=%g budget=%.4f",
               region, f->round, f->attempt, eps, delta, budget);
    }
    return 0;
}

int fa_fed_submit_eval(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                       fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    fa_error_clear(&err);
    rc = fa_fed_eval_submit(f->feval, region, body, len, &err);
    if (rc != 0) {
        int status = rc == FA_ERR_AUTH                             ? 403
                     : rc == FA_ERR_REPLAY || rc == FA_ERR_EXISTS ? 409
                     : rc == FA_ERR_NOMEM                         ? 500
                                                                  : 400;
        fa_log(FA_LOG_WARN, "evaluation report refused", "region=%s status=%d error=\"%s\"",
               region, status, fa_error_msg(&err, rc));
        return reply_error(f, reply, status, rc, "%s", fa_error_msg(&err, rc));
    }
    {
        fa_eval_summary fe;
        fa_fed_eval_summary(f->feval, &fe);
        fa_fed_version_eval *ve = fa_fed_history_version(&f->hist, fe.version);
        if (ve) {
            ve->federated_accuracy = fe.accuracy;
            ve->federated_regions = fe.regions;
        }
        fa_log(FA_LOG_INFO, "evaluation report accepted",
               "region=%s version=%" PRIu64 " reports=%u examples=%" PRIu64
               " mean_accuracy=%.4f mean_loss=%.4f",
               region, fe.version, fe.regions, fe.n, fe.accuracy, fe.loss);
    }
    update_gauges(f);
    return 0;
}

int fa_fed_audit_checkpoint(fa_fed *f, char **out, size_t *len, fa_error *err)
{
    return fa_audit_log_checkpoint(f->audit, out, len, err);
}

int fa_fed_audit_proof(fa_fed *f, uint64_t round, const char *region, char **out, size_t *len,
                       fa_error *err)
{
    uint64_t index;
    int rc = fa_audit_log_find(f->audit, round, region, &index, err);
    if (rc != 0)
        return rc;
    return fa_audit_log_prove(f->audit, index, out, len, err);
}

int fa_fed_audit_record(fa_fed *f, uint64_t version, char **out, size_t *len, fa_error *err)
{
    uint64_t index;
    int rc = fa_audit_log_find_version(f->audit, version, &index, err);
    if (rc != 0)
        return rc;
    return fa_audit_log_prove(f->audit, index, out, len, err);
}

int fa_fed_audit_consistency(fa_fed *f, uint64_t old_size, uint64_t size, char **out, size_t *len,
                             fa_error *err)
{
    return fa_audit_log_prove_consistency(f->audit, old_size, size, out, len, err);
}

int fa_fed_ready(const fa_fed *f, uint64_t now_ms, char *why, size_t n)
{
    if (f->fatal) {
        snprintf(why, n, "a committed round could not be recorded in the audit log: restart to "
                         "repair it");
        return 0;
    }
    if (f->gate.blocked) {
        uint64_t left = f->gate.next_ms > now_ms ? f->gate.next_ms - now_ms : 0;
        snprintf(why, n, "storage: %s (for %.0f s; next check in %.0f s)", f->gate.reason,
                 (double)(now_ms - f->gate.since_ms) / 1000.0, (double)left / 1000.0);
        return 0;
    }
    return 1;
}

size_t fa_fed_eval_reports(const fa_fed *f, size_t *regions)
{
    if (regions)
        *regions = f->n_regions;
    return fa_fed_eval_count(f->feval);
}

int fa_fed_finished(const fa_fed *f)
{
    return f->phase == FEDAGG__PHASE__PHASE_DONE;
}

int fa_fed_fatal(const fa_fed *f)
{
    return f->fatal;
}

void fa_fed_position(const fa_fed *f, uint64_t *round, uint32_t *attempt, int *phase,
                     uint64_t *version)
{
    if (round)
        *round = f->round;
    if (attempt)
        *attempt = f->attempt;
    if (phase)
        *phase = f->phase;
    if (version)
        *version = f->cur.version;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

static int load_members(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err)
{
    f->n_regions = cfg->n_regions;
    if (f->n_regions == 0 || f->n_regions > FA_SECAGG_MAX_CLIENTS)
        return fa_errorf(err, FA_ERR_INVAL, "config: %zu regions; 1..%d are supported",
                         f->n_regions, FA_SECAGG_MAX_CLIENTS);
    f->regions = calloc(f->n_regions, sizeof(*f->regions));
    f->members = calloc(f->n_regions, sizeof(*f->members));
    if (!f->regions || !f->members)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < f->n_regions; i++) {
        const Fedagg__Region *rg = cfg->regions[i];
        struct region *r = &f->regions[i];
        uint8_t *data = NULL;
        size_t len = 0;
        int rc;

        if (!rg->id || !rg->id[0] || strlen(rg->id) > FA_SECAGG_MAX_ID_LEN)
            return fa_errorf(err, FA_ERR_INVAL, "config: regions[%zu]: id missing or too long", i);
        snprintf(r->id, sizeof(r->id), "%s", rg->id);
        if (rg->identity_public_key && rg->identity_public_key[0]) {
            rc = fa_identity_parse_public((const uint8_t *)rg->identity_public_key,
                                          strlen(rg->identity_public_key), r->pk, err);
        } else if (rg->identity_public_key_file && rg->identity_public_key_file[0]) {
            rc = fa_file_read_all(rg->identity_public_key_file, &data, &len, 4096, err);
            if (rc == 0)
                rc = fa_identity_parse_public(data, len, r->pk, err);
            free(data);
        } else {
            rc = fa_errorf(err, FA_ERR_INVAL, "region %s has no identity public key", r->id);
        }
        if (rc != 0)
            return fa_error_prefix(err, rc, "config: region %s: identity public key", r->id);
    }
    qsort(f->regions, f->n_regions, sizeof(*f->regions), cmp_region);
    for (size_t i = 0; i < f->n_regions; i++) {
        if (i > 0 && !strcmp(f->regions[i].id, f->regions[i - 1].id))
            return fa_errorf(err, FA_ERR_INVAL, "config: region %s listed twice", f->regions[i].id);
        f->members[i].id = f->regions[i].id;
        memcpy(f->members[i].identity_pk, f->regions[i].pk, 32);
    }
    return 0;
}

static int load_signer(fa_fed *f, const Fedagg__AggregatorConfig *cfg, const char *origin,
                       fa_error *err)
{
    const char *path = cfg->audit ? cfg->audit->signing_key_file : NULL;
    uint8_t *data = NULL, seed[32];
    size_t len = 0;
    int rc;

    if (!path || !path[0])
        return fa_errorf(err, FA_ERR_INVAL, "config: audit.signing_key_file is required");
    rc = fa_file_check_private(path, err);
    if (rc != 0)
        return rc;
    rc = fa_file_read_all(path, &data, &len, 1 << 16, err);
    if (rc != 0)
        return rc;
    /* `fedagg keygen` files first, then the raw and Go note key forms. */
    if (fa_identity_parse_secret(data, len, seed, NULL) == 0) {
        rc = fa_note_signer_new(&f->signer, origin, seed, sizeof(seed), err);
        sodium_memzero(seed, sizeof(seed));
    } else {
        rc = fa_note_signer_parse(&f->signer, origin, data, len, err);
    }
    sodium_memzero(data, len);
    free(data);
    if (rc != 0)
        return fa_error_prefix(err, rc, "%s", path);
    return 0;
}

/* The optimizer state of the current version stays in its file (the step
 * streams it); check that it fits, and take its step count. */
static int load_optimizer_state(fa_fed *f, fa_error *err)
{
    return fa_global_model_check_state(f->model, f->store, f->opt, &f->opt_steps, err);
}

/* Reconciles the audit log with the model store after a restart: the store
 * may be one version ahead when the aggregator died between the commit and
 * the append (then the record is rebuilt from the saved round state). */
static int last_audited_version(fa_fed *f, uint64_t *version, fa_error *err)
{
    uint64_t n = fa_audit_log_size(f->audit);
    uint8_t *rec = NULL;
    size_t len = 0;
    Fedagg__AuditRecord *r;
    int rc;

    if (n == 0) {
        *version = 0;
        return 0;
    }
    rc = fa_audit_log_read(f->audit, n - 1, &rec, &len, err);
    if (rc != 0)
        return rc;
    r = fedagg__audit_record__unpack(NULL, len, rec);
    free(rec);
    if (!r)
        return fa_errorf(err, FA_ERR_CORRUPT, "audit log record %" PRIu64 " does not decode",
                         n - 1);
    *version = r->new_version;
    f->last_round = r->round;
    /* An operator's action names the round in flight: the last completed
     * round is that of the last aggregation before it. */
    while (r->admin && n > 1) {
        fedagg__audit_record__free_unpacked(r, NULL);
        n--;
        rc = fa_audit_log_read(f->audit, n - 1, &rec, &len, err);
        if (rc != 0)
            return rc;
        r = fedagg__audit_record__unpack(NULL, len, rec);
        free(rec);
        if (!r)
            return fa_errorf(err, FA_ERR_CORRUPT, "audit log record %" PRIu64 " does not decode",
                             n - 1);
        f->last_round = r->admin ? 0 : r->round;
    }
    if (r->admin)
        f->last_round = 0;
    fedagg__audit_record__free_unpacked(r, NULL);
    return 0;
}

/* The secure-aggregation server of round.state, with its sum read from the
 * file the state names straight into the server (or inside the state, as
 * older versions saved it). */
static int restore_secagg(fa_fed *f, const Fedagg__RoundState *st, fa_error *err)
{
    struct sum_reader sr = {f, st->sum_generation};
    int rc;

    f->have_sum = 0;
    if (st->sum_generation != 0)
        rc = fa_secagg_server_restore_meta_fill(&f->sa, st->secagg_server.data,
                                                st->secagg_server.len, read_sum, &sr, &f->sa_cfg,
                                                f->members, f->n_regions, err);
    else
        rc = fa_secagg_server_restore_meta(&f->sa, st->secagg_server.data, st->secagg_server.len,
                                           NULL, 0, &f->sa_cfg, f->members, f->n_regions, err);
    if (rc == 0 && st->sum_generation != 0)
        sum_on_disk(f, st->sum_generation);
    if (rc == 0)
        rc = use_journal_files(f, err);
    return rc;
}

/* The evaluation reports, ranges digest and evaluator result saved with
 * a round state based on the version that feval collects for. */
static void restore_round_extras(fa_fed *f, const Fedagg__RoundState *st)
{
    size_t kept = 0;
    for (size_t i = 0; i < st->n_evaluations; i++) {
        fa_error e;
        fa_error_clear(&e);
        if (fa_fed_eval_restore(f->feval, st->evaluations[i], &e) == 0)
            kept++;
        else
            fa_log(FA_LOG_WARN, "a saved evaluation report was refused", "error=\"%s\"", e.msg);
    }
    if (st->ranges_sha256.len == 32)
        memcpy(f->round_ranges_sha, st->ranges_sha256.data, 32);
    fa_privacy_ledger_begin(f->privacy, st->round, st->attempt);
    for (size_t i = 0; i < st->n_privacy; i++) {
        fa_error e;
        fa_error_clear(&e);
        if (fa_privacy_ledger_restore(f->privacy, st->privacy[i], &e) != 0)
            fa_log(FA_LOG_WARN, "a saved privacy statement was refused", "error=\"%s\"", e.msg);
    }
    if (st->central_eval && st->central_eval->model_version == st->base_version) {
        const Fedagg__EvalSummary *c = st->central_eval;
        memset(&f->central, 0, sizeof(f->central));
        f->central.valid = 1;
        f->central.version = c->model_version;
        f->central.regions = c->regions;
        f->central.n = c->num_examples;
        f->central.loss = c->loss;
        f->central.accuracy = c->accuracy;
        for (size_t i = 0; i < c->n_metrics && i < FA_EVAL_MAX_METRICS; i++) {
            snprintf(f->central.names[i], sizeof(f->central.names[i]), "%s",
                     c->metrics[i]->name ? c->metrics[i]->name : "");
            f->central.values[i] = c->metrics[i]->value;
            f->central.n_metrics++;
        }
    }
    if (st->n_evaluations)
        fa_log(FA_LOG_INFO, "evaluation reports restored", "version=%" PRIu64 " reports=%zu",
               st->base_version, kept);
}

static int restore_round(fa_fed *f, uint64_t now_ms, fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    Fedagg__RoundState *st = NULL;
    uint64_t audited = 0;
    int rc;

    rc = last_audited_version(f, &audited, err);
    if (rc != 0)
        return rc;
    rc = fa_file_read_all(f->state_path, &data, &len, (size_t)16 << 30, err);
    if (rc == FA_ERR_NOTFOUND) {
        if (f->cur.version != audited)
            return fa_errorf(err, FA_ERR_CORRUPT,
                             "model store is at version %" PRIu64 " but the audit log ends at "
                             "version %" PRIu64 " and there is no round state to repair it from",
                             f->cur.version, audited);
        open_gated(f, (f->cur.round > f->last_round ? f->cur.round : f->last_round) + 1, 0,
                   now_ms);
        return 0;
    }
    if (rc != 0)
        return rc;
    st = fedagg__round_state__unpack(NULL, len, data);
    free(data);
    if (!st)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: does not decode", f->state_path);
    f->rounds_completed = st->rounds_completed;
    f->rounds_aborted = st->rounds_aborted;
    f->round = st->round;
    f->attempt = st->attempt;
    f->attempt_start_unix_ms = st->attempt_start_unix_ms;
    f->sa_cfg.round = st->round;
    f->sa_cfg.attempt = st->attempt;

    if (f->cur.version == audited + 1 && st->phase == FEDAGG__PHASE__PHASE_DONE &&
        st->base_version == audited) {
        /* Died between the model commit and the audit append. */
        uint8_t prev_sha[32];
        char path[4096];
        fa_safetensors *mst = NULL;
        const char *prev_hex;
        rc = restore_secagg(f, st, err);
        if (rc == 0) {
            fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
            rc = fa_st_open(&mst, path, err);
        }
        if (rc == 0) {
            prev_hex = fa_st_metadata_get(mst, "fedagg.prev_sha256");
            if (!prev_hex ||
                sodium_hex2bin(prev_sha, 32, prev_hex, strlen(prev_hex), NULL, NULL, NULL) != 0)
                rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: no fedagg.prev_sha256 metadata", path);
            fa_st_del(mst);
        }
        if (rc == 0) {
            /* The record is of the round that started from the previous
             * version: its reports and ranges are in the state. */
            fa_fed_eval_begin(f->feval, st->base_version, prev_sha);
            restore_round_extras(f, st);
        }
        if (rc == 0) {
            fa_log(FA_LOG_WARN,
                   "repairing the audit log: the last round was committed but not "
                   "recorded",
                   "round=%" PRIu64 " version=%" PRIu64, f->round, f->cur.version);
            rc = append_record(f, audited, prev_sha, fa_time_unix_ms(), err);
        }
        if (rc == 0) {
            f->rounds_completed++;
            count_outcome(f, "completed");
            fa_log(FA_LOG_INFO, "round completed",
                   "round=%" PRIu64 " attempt=%u version=%" PRIu64 " participants=%zu dropped=%zu "
                   "repaired=1",
                   f->round, f->attempt, f->cur.version, fa_secagg_server_survivor_count(f->sa),
                   fa_secagg_server_dropout_count(f->sa));
            version_changed(f, now_ms);
            evaluate(f);
            rc = open_next_round(f, now_ms, err);
        }
        fedagg__round_state__free_unpacked(st, NULL);
        return rc;
    }
    if (f->cur.version == audited && st->base_version < f->cur.version) {
        /* The state predates the last committed round: the newer one was lost
         * with the machine (round.state is not fsync'ed).  Start afresh. */
        uint64_t next = (f->cur.round > f->last_round ? f->cur.round : f->last_round) + 1;
        fa_log(FA_LOG_WARN, "round state older than the model store; starting the next round",
               "state_round=%" PRIu64 " state_version=%" PRIu64 " version=%" PRIu64, st->round,
               st->base_version, f->cur.version);
        fedagg__round_state__free_unpacked(st, NULL);
        open_gated(f, next, 0, now_ms);
        return 0;
    }
    if (f->cur.version != audited || st->base_version != f->cur.version) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "model store at version %" PRIu64 ", audit log at version %" PRIu64
                       ", round state based on version %" PRIu64 ": they do not fit together",
                       f->cur.version, audited, st->base_version);
        fedagg__round_state__free_unpacked(st, NULL);
        return rc;
    }
    if (st->phase == FEDAGG__PHASE__PHASE_DONE && st->secagg_server.len == 0) {
        /* The configured rounds were done. */
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        fedagg__round_state__free_unpacked(st, NULL);
        fa_log(FA_LOG_INFO, "federation already finished", "rounds=%" PRIu64, f->rounds_completed);
        return 0;
    }
    restore_round_extras(f, st); /* based on the current version from here on */
    if (st->phase == FEDAGG__PHASE__PHASE_DONE) {
        /* The sum was unmasked and saved, but the new model was never
         * committed: finish the round from the saved result. */
        int committed = 0;
        rc = restore_secagg(f, st, err);
        fedagg__round_state__free_unpacked(st, NULL);
        if (rc != 0)
            return fa_error_prefix(err, rc, "%s", f->state_path);
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        fa_log(FA_LOG_WARN, "completing the round whose result was saved but not committed",
               "round=%" PRIu64 " attempt=%u", f->round, f->attempt);
        return finish_round(f, now_ms, &committed, err);
    }
    if (st->phase == FEDAGG__PHASE__PHASE_ADVERTISE || st->secagg_server.len == 0) {
        uint64_t r = st->round;
        uint32_t a = st->attempt;
        fedagg__round_state__free_unpacked(st, NULL);
        fa_log(FA_LOG_INFO, "resuming the round in flight",
               "round=%" PRIu64 " attempt=%u phase=advertise", r, a);
        open_gated(f, r, a, now_ms);
        return 0;
    }
    rc = restore_secagg(f, st, err);
    if (rc != 0) {
        fedagg__round_state__free_unpacked(st, NULL);
        return fa_error_prefix(err, rc, "%s", f->state_path);
    }
    f->phase = st->phase;
    f->phase_opened_ms = now_ms;
    reset_region_attempt(f);
    /* Regions whose uploads were summed before the save keep them. */
    if (f->phase > FEDAGG__PHASE__PHASE_MASKED)
        for (size_t i = 0; i < fa_secagg_server_survivor_count(f->sa); i++) {
            struct region *r = find_region(f, fa_secagg_server_survivor(f->sa, i));
            if (r)
                r->uploaded = 1;
        }
    fa_log(FA_LOG_INFO, "resuming the round in flight", "round=%" PRIu64 " attempt=%u phase=%s",
           f->round, f->attempt, phase_name(f->phase));
    fedagg__round_state__free_unpacked(st, NULL);
    update_gauges(f);
    return 0;
}

static int load_eval(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err)
{
    const Fedagg__Evaluation *ev = cfg->evaluation;
    fa_mlp_opts o;
    int rc;

    fa_mlp_config mc;

    if (!ev || !ev->test_images || !ev->test_images[0])
        return 0;
    if (!fa_global_model_mlp(f->model, &mc)) {
        fa_log(FA_LOG_WARN,
               "evaluation.test_images is for the built-in MLP; this model is not one (use "
               "evaluation.command)",
               "file=%s", ev->test_images);
        return 0;
    }
    rc = fa_mlp_layout_init(&f->eval_layout, &mc, err);
    if (rc != 0)
        return rc;
    rc = fa_data_load(&f->eval_data, ev->test_images, ev->test_labels, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "evaluation set");
    if (f->eval_data.ds.dim != mc.dims[0])
        return fa_errorf(err, FA_ERR_INVAL, "evaluation set %s has %u features; the model takes %u",
                         ev->test_images, f->eval_data.ds.dim, mc.dims[0]);
    if (!(f->eval_params = malloc(f->eval_layout.n_params * sizeof(float))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fa_mlp_opts_default(&o);
    o.backend = FA_MLP_CPU;
    rc = fa_mlp_new(&f->eval_net, &mc, &o, err);
    if (rc != 0)
        return rc;
    f->eval_every = ev->has_every && ev->every ? ev->every : 1;
    return 0;
}

int fa_fed_open(fa_fed **out, const Fedagg__AggregatorConfig *cfg, struct fa_metrics *metrics,
                uint64_t now_ms, fa_error *err)
{
    Fedagg__RoundPolicy rp_default = FEDAGG__ROUND_POLICY__INIT;
    Fedagg__Quantization q_default = FEDAGG__QUANTIZATION__INIT;
    Fedagg__ServerOptimizer o_default = FEDAGG__SERVER_OPTIMIZER__INIT;
    const Fedagg__RoundPolicy *rp = cfg->round ? cfg->round : &rp_default;
    const Fedagg__Quantization *q = cfg->quantization ? cfg->quantization : &q_default;
    const char *origin_cfg = cfg->audit ? cfg->audit->origin : NULL;
    char origin[300], path[4096];
    struct fa_server_opt_params op;
    fa_fed *f;
    uint8_t *enc = NULL;
    size_t enc_len;
    uint32_t ring_bits;
    fa_audit_open_report report;
    int rc;

    *out = NULL;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    if (!cfg->storage || !cfg->storage->dir || !cfg->storage->dir[0])
        return fa_errorf(err, FA_ERR_INVAL, "config: storage.dir is required");
    f = calloc(1, sizeof(*f));
    if (!f)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    f->metrics = metrics;
    if (fa_fed_history_init(&f->hist, FA_FED_HISTORY) != 0) {
        free(f);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    f->federation_id = strdup(cfg->federation_id ? cfg->federation_id : "fedagg");
    f->storage_dir = strdup(cfg->storage->dir);
    snprintf(path, sizeof(path), "%s/round.state", cfg->storage->dir);
    f->state_path = strdup(path);
    if (!f->federation_id || !f->storage_dir || !f->state_path) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    rc = load_members(f, cfg, err);
    if (rc != 0)
        goto fail;

    /* Round policy. */
    f->min_regions = rp->min_regions;
    f->threshold = rp->threshold ? rp->threshold : (uint32_t)(f->n_regions / 2 + 1);
    f->neighbours = rp->neighbours;
    f->max_attempts = rp->max_attempts;
    f->rounds_limit = rp->rounds;
    f->deadline_ms[FA_FED_ADVERTISE] = rp->advertise_deadline_ms;
    f->deadline_ms[FA_FED_SHARES] = rp->shares_deadline_ms;
    f->deadline_ms[FA_FED_MASKED] = rp->masked_deadline_ms;
    f->deadline_ms[FA_FED_CONSISTENCY] = rp->consistency_deadline_ms;
    f->deadline_ms[FA_FED_UNMASK] = rp->unmask_deadline_ms;
    f->advertise_grace_ms = rp->advertise_grace_ms;
    if (f->threshold > f->n_regions || f->min_regions > f->n_regions) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "config: round.threshold %u and round.min_regions %u must not exceed the "
                       "%zu regions",
                       f->threshold, f->min_regions, f->n_regions);
        goto fail;
    }

    /* Quantisation and the ring.  With ranges per tensor the regions scale
     * each tensor into [-1, 1] (after their L2 bound, if any) and the codec
     * saturates there; with one fixed range the codec clips in the model's
     * units as configured. */
    f->clip_cfg = (int)q->clip;
    f->quant.bits = q->bits;
    f->quant.clip_l2_norm = q->clip_l2_norm;
    if (q->range == FEDAGG__QUANT_RANGE__RANGE_ADAPTIVE) {
        f->quant.clip_mode = FA_SECAGG_CLIP_COORDINATE;
        f->quant.clip_value = 1.0;
    } else {
        f->quant.clip_mode = q->clip == FEDAGG__CLIP_MODE__CLIP_NONE ? FA_SECAGG_CLIP_COORDINATE
                                                                      : (int)q->clip;
        f->quant.clip_value = q->clip_value;
    }
    f->max_examples = q->max_examples ? q->max_examples : 1;
    ring_bits = fa_secagg_ring_bits_for(q->bits, (uint32_t)f->n_regions);
    if (ring_bits == 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "config: quantization.bits %u with %zu regions needs more than 32 ring "
                       "bits; lower the bits",
                       q->bits, f->n_regions);
        goto fail;
    }

    /* The model, its store and the optimizer. */
    rc = fa_model_store_open(&f->store, cfg->storage->dir,
                             cfg->storage->has_keep_versions ? cfg->storage->keep_versions : 10,
                             err);
    if (rc != 0)
        goto fail;
    {
        const char *meta0[] = {"format", "pt", "fedagg.version", "0", "fedagg.federation",
                               f->federation_id};
        rc = fa_global_model_open(&f->model, cfg, f->store, meta0, 3, err);
        if (rc != 0)
            goto fail;
        f->d = (size_t)fa_global_model_d(f->model);
        rc = fa_model_store_current(f->store, &f->cur);
        if (rc != 0) {
            fa_errorf(err, rc, "model store: no current version after opening the model");
            goto fail;
        }
    }
    f->opt_cfg = cfg->optimizer ? *cfg->optimizer : o_default;
    op.kind = (int)f->opt_cfg.kind;
    op.learning_rate = f->opt_cfg.learning_rate;
    op.momentum = f->opt_cfg.momentum;
    op.beta1 = f->opt_cfg.beta1;
    op.beta2 = f->opt_cfg.beta2;
    op.tau = f->opt_cfg.tau;
    rc = fa_server_opt_new(&f->opt, &op, err);
    if (rc == 0)
        rc = load_optimizer_state(f, err);
    if (rc != 0)
        goto fail;
    {
        /* Refuse a model whose round cannot fit, before regions come. */
        fa_memory_need need;
        uint64_t limit;
        const char *source;
        uint32_t in_flight = rp->max_uploads_in_flight ? rp->max_uploads_in_flight : 4;
        fa_memory_round_need(f->d, fa_server_opt_state_count(f->opt), in_flight,
                             fa_secagg_masked_bytes((uint64_t)f->d + 1, ring_bits),
                             journal_memory(), &need);
        rc = fa_memory_limit(cfg->memory_limit_bytes, &limit, &source, err);
        if (rc == 0)
            rc = fa_memory_check(&need, limit, source, err);
        if (rc == 0)
            rc = fa_upload_journal_new(&f->journal, f->storage_dir, in_flight,
                                       fa_secagg_masked_bytes((uint64_t)f->d + 1, ring_bits),
                                       journal_memory(), err);
        if (rc != 0)
            goto fail;
        fa_log(FA_LOG_INFO, "memory budget",
               "need_mib=%.1f limit_mib=%.1f source=\"%s\"", (double)need.total / 1048576.0,
               (double)limit / 1048576.0, source);
    }

    /* The config digest that every record names: the configuration's
     * binary encoding followed by the tensor table's digest, so that the
     * model's tensors (not only the file naming them) are bound too. */
    enc_len = fedagg__aggregator_config__get_packed_size(cfg);
    enc = malloc(enc_len + 32);
    if (!enc) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    fedagg__aggregator_config__pack(cfg, enc);
    memcpy(enc + enc_len, fa_global_model_digest(f->model), 32);
    crypto_hash_sha256(f->config_digest, enc, enc_len + 32);
    free(enc);

    /* Federated evaluation and the evaluator command. */
    {
        fa_fed_eval_member *fm = calloc(f->n_regions ? f->n_regions : 1, sizeof(*fm));
        if (!fm) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < f->n_regions; i++) {
            fm[i].id = f->regions[i].id;
            memcpy(fm[i].pk, f->regions[i].pk, 32);
        }
        rc = fa_fed_eval_new(&f->feval, f->federation_id, fm, f->n_regions, err);
        if (rc == 0)
            rc = fa_privacy_ledger_new(&f->privacy, f->federation_id, fm, f->n_regions, err);
        free(fm);
        if (rc != 0)
            goto fail;
        fa_fed_eval_begin(f->feval, f->cur.version, f->cur.model_sha256);
        rc = fa_global_model_ranges_digest(f->model, f->round_ranges_sha, err);
        if (rc != 0)
            goto fail;
    }
    if (cfg->evaluation && cfg->evaluation->n_command) {
        snprintf(path, sizeof(path), "%s/evaluator", cfg->storage->dir);
        rc = fa_evaluator_new(&f->evaluator, (const char *const *)cfg->evaluation->command,
                              cfg->evaluation->n_command, cfg->evaluation->timeout_s, path, err);
        if (rc != 0)
            goto fail;
    }

    /* The audit log. */
    if (origin_cfg && origin_cfg[0])
        snprintf(origin, sizeof(origin), "%s", origin_cfg);
    else
        snprintf(origin, sizeof(origin), "fedagg/%s", f->federation_id);
    rc = load_signer(f, cfg, origin, err);
    if (rc != 0)
        goto fail;
    if (cfg->audit && cfg->audit->log_file && cfg->audit->log_file[0])
        snprintf(path, sizeof(path), "%s", cfg->audit->log_file);
    else
        snprintf(path, sizeof(path), "%s/audit.log", cfg->storage->dir);
    memset(&report, 0, sizeof(report));
    rc = fa_audit_log_open(&f->audit, path, f->signer, origin, 0, &report, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "audit log %s", path);
        goto fail;
    }
    if (report.torn_log_bytes || report.torn_checkpoint_bytes || report.unsigned_records ||
        report.tree_rebuilt)
        fa_log(FA_LOG_WARN, "audit log recovered after a crash",
               "torn_log_bytes=%" PRIu64 " torn_checkpoint_bytes=%" PRIu64
               " unsigned_records=%" PRIu64 " tree_rebuilt=%d",
               report.torn_log_bytes, report.torn_checkpoint_bytes, report.unsigned_records,
               report.tree_rebuilt);

    rc = replay_audit_log(f, err);
    if (rc != 0)
        goto fail;
    rc = load_eval(f, cfg, err);
    if (rc != 0)
        goto fail;

    /* The secure-aggregation parameters, then the round in flight. */
    f->sa_cfg.federation_id = f->federation_id;
    f->sa_cfg.threshold = f->threshold;
    f->sa_cfg.neighbours = f->neighbours;
    f->sa_cfg.max_uploads_in_flight = rp->max_uploads_in_flight;
    f->sa_cfg.vector_len = (uint64_t)f->d + 1;
    f->sa_cfg.ring_bits = ring_bits;
    f->sa_cfg.quant = f->quant;
    rc = fa_secagg_config_check(&f->sa_cfg, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "config");
        goto fail;
    }
    define_metrics(f);
    rc = restore_round(f, now_ms, err);
    if (rc != 0)
        goto fail;
    evaluate(f);
    if (f->evaluator) {
        fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
        fa_evaluator_request(f->evaluator, f->cur.version, path, now_ms);
    }
    update_gauges(f);
    fa_log(FA_LOG_INFO, "model",
           "tensors=%zu federated_tensors=%zu federated_params=%zu ranges=%s version=%" PRIu64,
           fa_tensors_count(fa_global_model_table(f->model)),
           fa_tensors_fed_count(fa_global_model_table(f->model)), f->d,
           fa_global_model_per_tensor(f->model) ? "adaptive" : "fixed", f->cur.version);
    *out = f;
    return 0;
fail:
    fa_fed_close(f);
    return rc;
}

void fa_fed_close(fa_fed *f)
{
    if (!f)
        return;
    fa_secagg_server_del(f->sa);
    fa_audit_log_close(f->audit);
    fa_note_signer_del(f->signer);
    fa_model_store_del(f->store);
    fa_global_model_del(f->model);
    fa_fed_eval_del(f->feval);
    fa_privacy_ledger_del(f->privacy);
    fa_fed_history_free(&f->hist);
    fa_evaluator_del(f->evaluator);
    free(f->eval_params);
    fa_server_opt_del(f->opt);
    fa_upload_journal_del(f->journal);
    fa_mlp_del(f->eval_net);
    fa_data_free(&f->eval_data);
    for (size_t i = 0; i < f->n_last_participants; i++)
        free(f->last_participants[i]);
    free(f->last_participants);
    free(f->last_result);
    free(f->regions);
    free(f->members);
    free(f->federation_id);
    free(f->storage_dir);
    free(f->state_path);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Operators                                                                 */
/* ------------------------------------------------------------------------ */

/* Appends the signed record of an operator's action. */
static int append_admin_record(fa_fed *f, const char *op, const char *action, const char *region,
                               const char *reason, fa_error *err)
{
    Fedagg__AuditRecord rec = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__AdminAction a = FEDAGG__ADMIN_ACTION__INIT;
    fa_audit_append_result ar;
    uint64_t now = fa_time_unix_ms();
    int rc;

    memset(&ar, 0, sizeof(ar));
    a.operator_ = (char *)op;
    a.action = (char *)action;
    a.region = (char *)(region ? region : "");
    a.reason = (char *)reason;
    a.unix_ms = now;
    rec.version = 1;
    rec.federation_id = f->federation_id;
    rec.round = f->round;
    rec.attempt = f->attempt;
    rec.start_unix_ms = now;
    rec.commit_unix_ms = now;
    rec.config_digest.data = f->config_digest;
    rec.config_digest.len = 32;
    rec.prev_model_sha256.data = f->cur.model_sha256;
    rec.prev_model_sha256.len = 32;
    rec.new_model_sha256.data = f->cur.model_sha256;
    rec.new_model_sha256.len = 32;
    rec.prev_version = f->cur.version;
    rec.new_version = f->cur.version;
    rec.tensor_table_digest.data = (uint8_t *)fa_global_model_digest(f->model);
    rec.tensor_table_digest.len = 32;
    rec.num_tensors = fa_tensors_count(fa_global_model_table(f->model));
    rec.software_version = FA_VERSION;
    rec.admin = &a;
    rc = fa_audit_log_append(f->audit, &rec, &ar, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "the audit log could not record the operator's %s, so it "
                                        "was not done",
                               action);
    fa_log(FA_LOG_INFO, "operator action recorded",
           "operator=%s action=%s region=%s index=%" PRIu64 " reason=\"%s\"", op, action,
           region ? region : "", ar.index, reason);
    fa_audit_append_result_free(&ar);
    update_gauges(f);
    return 0;
}

static int check_operator(const char *op, fa_error *err)
{
    if (!op || !op[0] || strlen(op) > 63)
        return fa_errorf(err, FA_ERR_AUTH, "an operator action needs an operator name");
    return 0;
}

int fa_fed_admin_pause(fa_fed *f, const char *op, uint64_t now_ms, fa_error *err)
{
    char why[160];
    int rc = check_operator(op, err);
    (void)now_ms;
    if (rc != 0)
        return rc;
    if (f->paused)
        return fa_errorf(err, FA_ERR_STATE, "the federation is already paused (by %s)",
                         f->paused_by);
    if (f->phase == FEDAGG__PHASE__PHASE_DONE)
        return fa_errorf(err, FA_ERR_STATE, "the federation has finished its rounds");
    snprintf(why, sizeof(why), "no new round opens after round %" PRIu64 " attempt %u", f->round,
             f->attempt);
    rc = append_admin_record(f, op, "pause", NULL, why, err);
    if (rc != 0)
        return rc;
    f->paused = 1;
    snprintf(f->paused_by, sizeof(f->paused_by), "%s", op);
    return 0;
}

int fa_fed_admin_resume(fa_fed *f, const char *op, uint64_t now_ms, fa_error *err)
{
    int rc = check_operator(op, err);
    if (rc != 0)
        return rc;
    if (!f->paused)
        return fa_errorf(err, FA_ERR_STATE, "the federation is not paused");
    rc = append_admin_record(f, op, "resume", NULL, "rounds open again", err);
    if (rc != 0)
        return rc;
    f->paused = 0;
    f->paused_by[0] = '\0';
    if (f->phase == FEDAGG__PHASE__PHASE_IDLE)
        open_gated(f, f->round, f->attempt, now_ms);
    return 0;
}

int fa_fed_admin_abort(fa_fed *f, const char *op, uint64_t now_ms, fa_error *err)
{
    char why[160];
    int rc = check_operator(op, err);
    if (rc != 0)
        return rc;
    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_UNMASK)
        return fa_errorf(err, FA_ERR_STATE, "no attempt is in flight (phase %s)",
                         phase_name(f->phase));
    snprintf(why, sizeof(why), "aborted by operator %s", op);
    rc = append_admin_record(f, op, "abort", NULL, why, err);
    if (rc != 0)
        return rc;
    abort_attempt(f, now_ms, why);
    return 0;
}

int fa_fed_admin_drain(fa_fed *f, const char *op, const char *region, int drain, uint64_t now_ms,
                       fa_error *err)
{
    struct region *r = find_region(f, region);
    char why[160];
    int rc = check_operator(op, err);
    (void)now_ms;
    if (rc != 0)
        return rc;
    if (!r)
        return fa_errorf(err, FA_ERR_NOTFOUND, "region '%s' is not a member of federation %s",
                         region ? region : "", f->federation_id);
    if (!r->drained == !drain)
        return fa_errorf(err, FA_ERR_STATE, "region %s is %s", r->id,
                         drain ? "drained already" : "not drained");
    snprintf(why, sizeof(why), drain ? "region %s sits out from the next attempt on"
                                     : "region %s takes part again from the next attempt on",
             r->id);
    rc = append_admin_record(f, op, drain ? "drain" : "admit", r->id, why, err);
    if (rc != 0)
        return rc;
    r->drained = drain;
    snprintf(r->drained_by, sizeof(r->drained_by), "%s", drain ? op : "");
    return 0;
}

/* Pause and drain state, and the history of completed rounds, from the audit
 * log (a restarted aggregator keeps what operators set). */
static int replay_audit_log(fa_fed *f, fa_error *err)
{
    uint64_t n = fa_audit_log_size(f->audit);

    for (uint64_t i = 0; i < n; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        Fedagg__AuditRecord *r;
        int rc = fa_audit_log_read(f->audit, i, &buf, &len, err);
        if (rc != 0)
            return rc;
        r = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        if (!r)
            return fa_errorf(err, FA_ERR_CORRUPT, "audit log record %" PRIu64 " does not decode",
                             i);
        if (r->admin) {
            const Fedagg__AdminAction *a = r->admin;
            struct region *rg = find_region(f, a->region);
            if (!strcmp(a->action, "pause")) {
                f->paused = 1;
                snprintf(f->paused_by, sizeof(f->paused_by), "%s", a->operator_);
            } else if (!strcmp(a->action, "resume")) {
                f->paused = 0;
                f->paused_by[0] = '\0';
            } else if (rg && (!strcmp(a->action, "drain") || !strcmp(a->action, "admit"))) {
                rg->drained = !strcmp(a->action, "drain");
                snprintf(rg->drained_by, sizeof(rg->drained_by), "%s",
                         rg->drained ? a->operator_ : "");
            }
        } else if (n - i <= FA_FED_HISTORY) {
            fa_fed_attempt a;
            char *parts = NULL, *drops = NULL;
            size_t pn = 0, dn = 0;
            FILE *pf = open_memstream(&parts, &pn), *df = open_memstream(&drops, &dn);
            memset(&a, 0, sizeof(a));
            a.round = r->round;
            a.attempt = r->attempt;
            a.completed = 1;
            a.start_unix_ms = r->start_unix_ms;
            a.end_unix_ms = r->commit_unix_ms;
            for (int k = 0; k < FA_FED_HISTORY_PHASES; k++)
                a.phase_s[k] = -1;
            for (size_t k = 0; pf && k < r->n_participants; k++)
                fprintf(pf, "%s%s", k ? "," : "", r->participants[k]);
            for (size_t k = 0; df && k < r->n_dropped; k++)
                fprintf(df, "%s%s", k ? "," : "", r->dropped[k]);
            if (pf)
                fclose(pf);
            if (df)
                fclose(df);
            a.participants = parts;
            a.dropped = drops;
            a.version = r->new_version;
            fa_fed_history_add(&f->hist, &a);
            free(parts);
            free(drops);
            if (r->federated_eval) {
                fa_fed_version_eval *ve =
                    fa_fed_history_version(&f->hist, r->federated_eval->model_version);
                if (ve) {
                    ve->federated_accuracy = r->federated_eval->accuracy;
                    ve->federated_regions = r->federated_eval->regions;
                }
            }
            if (r->central_eval) {
                fa_fed_version_eval *ve =
                    fa_fed_history_version(&f->hist, r->central_eval->model_version);
                if (ve)
                    ve->central_accuracy = r->central_eval->accuracy;
            }
        }
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    if (f->paused)
        fa_log(FA_LOG_INFO, "the federation stays paused", "paused_by=%s", f->paused_by);
    for (size_t i = 0; i < f->n_regions; i++)
        if (f->regions[i].drained)
            fa_log(FA_LOG_INFO, "region stays drained", "region=%s drained_by=%s",
                   f->regions[i].id, f->regions[i].drained_by);
    return 0;
}

/* JSON helpers: a number or null for NaN; a comma-separated list as an array. */
static json_t *num_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *list_json(const char *csv)
{
    json_t *a = json_array();
    const char *p = csv;
    while (a && p && *p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        json_array_append_new(a, json_stringn(p, n));
        p = c ? c + 1 : p + n;
    }
    return a;
}

static json_t *regions_json(fa_fed *f, uint64_t now_ms)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < f->n_regions; i++) {
        const struct region *r = &f->regions[i];
        json_t *o = json_object();
        double eps, delta, budget;
        if (!o)
            break;
        json_object_set_new(o, "id", json_string(r->id));
        json_object_set_new(o, "connected", json_boolean(region_connected(r, now_ms)));
        json_object_set_new(o, "last_seen_ms_ago",
                            r->last_seen_ms ? json_integer((json_int_t)(now_ms - r->last_seen_ms))
                                            : json_null());
        json_object_set_new(o, "drained", json_boolean(r->drained));
        if (r->drained)
            json_object_set_new(o, "drained_by", json_string(r->drained_by));
        json_object_set_new(o, "rounds_participated",
                            json_integer((json_int_t)r->rounds_participated));
        json_object_set_new(o, "dropouts", json_integer((json_int_t)r->dropouts));
        json_object_set_new(o, "bytes_received", json_integer((json_int_t)r->bytes_received));
        if (fa_privacy_ledger_region(f->privacy, r->id, &eps, &delta, &budget)) {
            json_t *p = json_object();
            json_object_set_new(p, "epsilon", json_real(eps));
            json_object_set_new(p, "delta", json_real(delta));
            json_object_set_new(p, "budget_epsilon", json_real(budget));
            json_object_set_new(o, "privacy", p);
        }
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *rounds_json(const fa_fed *f)
{
    static const char *phase_keys[FA_FED_HISTORY_PHASES] = {"advertise", "shares", "masked",
                                                            "consistency", "unmask"};
    json_t *a = json_array();
    for (size_t i = 0; a && i < fa_fed_history_count(&f->hist); i++) {
        const fa_fed_attempt *h = fa_fed_history_at(&f->hist, i);
        json_t *o = json_object(), *ph = json_object();
        if (!o || !ph) {
            json_decref(o);
            json_decref(ph);
            break;
        }
        json_object_set_new(o, "round", json_integer((json_int_t)h->round));
        json_object_set_new(o, "attempt", json_integer(h->attempt));
        json_object_set_new(o, "outcome", json_string(h->completed ? "completed" : "aborted"));
        if (h->reason[0])
            json_object_set_new(o, "reason", json_string(h->reason));
        json_object_set_new(o, "start_unix_ms", json_integer((json_int_t)h->start_unix_ms));
        json_object_set_new(o, "end_unix_ms", json_integer((json_int_t)h->end_unix_ms));
        json_object_set_new(o, "seconds",
                            json_real((double)(h->end_unix_ms - h->start_unix_ms) / 1000.0));
        for (int k = 0; k < FA_FED_HISTORY_PHASES; k++)
            if (h->phase_s[k] >= 0)
                json_object_set_new(ph, phase_keys[k], json_real(h->phase_s[k]));
        json_object_set_new(o, "phases", ph);
        json_object_set_new(o, "participants", list_json(h->participants));
        json_object_set_new(o, "dropped", list_json(h->dropped));
        if (h->completed)
            json_object_set_new(o, "version", json_integer((json_int_t)h->version));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *versions_json(const fa_fed *f)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < fa_fed_history_versions(&f->hist); i++) {
        const fa_fed_version_eval *v = fa_fed_history_version_at(&f->hist, i);
        json_t *o = json_object();
        if (!o)
            break;
        json_object_set_new(o, "version", json_integer((json_int_t)v->version));
        json_object_set_new(o, "global_accuracy", num_or_null(v->global_accuracy));
        json_object_set_new(o, "central_accuracy", num_or_null(v->central_accuracy));
        json_object_set_new(o, "federated_accuracy", num_or_null(v->federated_accuracy));
        json_object_set_new(o, "federated_regions", json_integer(v->federated_regions));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *models_json(fa_fed *f)
{
    json_t *a = json_array();
    uint64_t lo = f->cur.version > 1000 ? f->cur.version - 1000 : 0;
    for (uint64_t v = lo; a && v <= f->cur.version; v++) {
        struct fa_model_version mv;
        char hex[65];
        json_t *o;
        if (fa_model_store_version(f->store, v, &mv) != 0)
            continue;
        if (!(o = json_object()))
            break;
        fa_model_store_hex(mv.model_sha256, hex);
        json_object_set_new(o, "version", json_integer((json_int_t)mv.version));
        json_object_set_new(o, "round", json_integer((json_int_t)mv.round));
        json_object_set_new(o, "sha256", json_string(hex));
        json_object_set_new(o, "bytes", json_integer((json_int_t)mv.model_size));
        json_object_set_new(o, "master", json_boolean(mv.has_master));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *audit_head_json(fa_fed *f, fa_error *err)
{
    json_t *o = json_object();
    char *ck = NULL;
    size_t len = 0;
    if (!o)
        return NULL;
    json_object_set_new(o, "tree_size", json_integer((json_int_t)fa_audit_log_size(f->audit)));
    json_object_set_new(o, "signed_size",
                        json_integer((json_int_t)fa_audit_log_signed_size(f->audit)));
    if (fa_audit_log_checkpoint(f->audit, &ck, &len, err) == 0 && ck) {
        json_object_set_new(o, "checkpoint", json_stringn(ck, len));
        /* the checkpoint's third line is the base64 root */
        {
            const char *l2 = strchr(ck, '\n'), *l3 = l2 ? strchr(l2 + 1, '\n') : NULL;
            const char *e = l3 ? strchr(l3 + 1, '\n') : NULL;
            if (l3 && e)
                json_object_set_new(o, "root", json_stringn(l3 + 1, (size_t)(e - l3 - 1)));
        }
    }
    free(ck);
    return o;
}

int fa_fed_admin_json(fa_fed *f, const char *what, uint64_t now_ms, char **out, fa_error *err)
{
    json_t *o = NULL;
    char *text;

    *out = NULL;
    if (!what)
        return fa_errorf(err, FA_ERR_INVAL, "no document named");
    if (!strcmp(what, "status")) {
        char *base = NULL;
        json_error_t je;
        int rc = fa_fed_status_json(f, &base, err);
        if (rc != 0)
            return rc;
        o = json_loads(base, 0, &je);
        free(base);
        if (!o)
            return fa_errorf(err, FA_ERR_NOMEM, "status: %s", je.text);
        json_object_set_new(o, "paused", json_boolean(f->paused));
        if (f->paused)
            json_object_set_new(o, "paused_by", json_string(f->paused_by));
        if (f->phase >= FEDAGG__PHASE__PHASE_ADVERTISE && f->phase <= FEDAGG__PHASE__PHASE_UNMASK)
            json_object_set_new(o, "phase_deadline_unix_ms",
                                json_integer((json_int_t)(fa_time_unix_ms() +
                                                          fa_fed_next_deadline_in(f, now_ms))));
        json_object_set_new(o, "regions", regions_json(f, now_ms));
        json_object_set_new(o, "rounds", rounds_json(f));
        json_object_set_new(o, "versions", versions_json(f));
        json_object_set_new(o, "audit", audit_head_json(f, err));
    } else if (!strcmp(what, "regions")) {
        o = json_object();
        if (o)
            json_object_set_new(o, "regions", regions_json(f, now_ms));
    } else if (!strcmp(what, "rounds")) {
        o = json_object();
        if (o) {
            json_object_set_new(o, "rounds", rounds_json(f));
            json_object_set_new(o, "versions", versions_json(f));
        }
    } else if (!strcmp(what, "models")) {
        o = json_object();
        if (o)
            json_object_set_new(o, "models", models_json(f));
    } else if (!strcmp(what, "audit-head")) {
        o = audit_head_json(f, err);
    } else {
        return fa_errorf(err, FA_ERR_INVAL,
                         "no document '%s': status, regions, rounds, models or audit-head", what);
    }
    if (!o)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    *out = text;
    return 0;
}
