/* federation.c - round orchestration of the aggregator: attempts, phase
 * closes, completing a round, requests.  See federation.h. */
#include "aggregator/federation_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "aggregator/metrics.h"
#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "common/fa_time.h"
#include "secagg.pb-c.h"

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

/* A refusal: its FA_ERR_* code and message, with the position it was made at.
 * api.c (fa_api_http_status) turns it into an HTTP status and a fedagg.Error;
 * internal marks a failure of this aggregator rather than of the request. */
static int reply_refuse(const fa_fed *f, fa_fed_reply *r, int internal, int code, const char *fmt,
                        va_list ap)
{
    if (!r)
        return code;
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    r->code = code;
    r->internal = internal;
    r->round = f->round;
    r->attempt = f->attempt;
    free(r->body);
    r->body = NULL;
    r->len = 0;
    return code;
}

static int reply_error(const fa_fed *f, fa_fed_reply *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int reply_error(const fa_fed *f, fa_fed_reply *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = reply_refuse(f, r, 0, code, fmt, ap);
    va_end(ap);
    return code;
}

/* The same for a failure of this aggregator (api.c answers 500). */
static int reply_fault(const fa_fed *f, fa_fed_reply *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int reply_fault(const fa_fed *f, fa_fed_reply *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = reply_refuse(f, r, 1, code, fmt, ap);
    va_end(ap);
    return code;
}

static int reply_ok(fa_fed_reply *r, uint8_t *body, size_t len)
{
    r->code = 0;
    r->internal = 0;
    free(r->body);
    r->body = body;
    r->len = len;
    r->msg[0] = '\0';
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

struct fa_fed_region *fa_fed_find_region(const fa_fed *f, const char *id)
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
    return fa_fed_find_region(f, region) != NULL;
}

int fa_fed_cmp_region(const void *a, const void *b)
{
    return strcmp(((const struct fa_fed_region *)a)->id, ((const struct fa_fed_region *)b)->id);
}

/* ------------------------------------------------------------------------ */
/* Attempts                                                                  */
/* ------------------------------------------------------------------------ */

void fa_fed_reset_region_attempt(fa_fed *f)
{
    for (size_t i = 0; i < f->n_regions; i++) {
        struct fa_fed_region *r = &f->regions[i];
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
uint64_t fa_fed_journal_memory(void)
{
    const char *e = getenv("FEDAGG_JOURNAL_MEMORY_BYTES");
    return e && *e ? strtoull(e, NULL, 10) : FA_FED_JOURNAL_MEMORY;
}

int fa_fed_use_journal_files(fa_fed *f, fa_error *err)
{
    fa_secagg_journal j;
    fa_upload_journal_iface(f->journal, &j);
    return fa_secagg_server_set_journal(f->sa, &j, err);
}

static int new_secagg_server(fa_fed *f, fa_error *err)
{
    int rc;

    f->sa_cfg.round = f->round;
    f->sa_cfg.attempt = f->attempt;
    /* the last attempt's sum memory, cleared, rather than fresh memory */
    rc = fa_secagg_server_renew(&f->sa, &f->sa_cfg, f->members, f->n_regions, err);
    if (rc == 0)
        rc = fa_fed_use_journal_files(f, err);
    return rc;
}

/* How long the attempt in flight has been open, on the caller's monotonic
 * clock (the wall clock may step back). */
double fa_fed_attempt_seconds(const fa_fed *f, uint64_t now_ms)
{
    return now_ms > f->attempt_opened_ms ? (double)(now_ms - f->attempt_opened_ms) / 1000.0 : 0.0;
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
    f->attempt_opened_ms = now_ms;
    fa_fed_reset_region_attempt(f);
    fa_privacy_ledger_begin(f->privacy, round, attempt);
    memset(&f->cur_att, 0, sizeof(f->cur_att));
    f->cur_att.round = round;
    f->cur_att.attempt = attempt;
    f->cur_att.start_unix_ms = f->attempt_start_unix_ms;
    for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
        f->cur_att.phase_s[k] = -1;
    rc = new_secagg_server(f, err);
    if (rc == 0)
        rc = fa_fed_save_state(f, err);
    if (rc == 0) {
        fa_log(FA_LOG_INFO, "round attempt opened", "round=%" PRIu64 " attempt=%u version=%" PRIu64,
               round, attempt, f->cur.version);
        fa_fed_update_gauges(f);
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
    n += (uint64_t)4 * f->sa_cfg.vector_len + (4u << 20);
    n += (uint64_t)(f->sa_cfg.max_uploads_in_flight ? f->sa_cfg.max_uploads_in_flight : 4) *
         fa_secagg_masked_bytes(f->sa_cfg.vector_len, f->sa_cfg.ring_bits);
    return n + n / 10 + (64u << 20);
}

/* Test switch fed-storage-short=BYTES: the check finds BYTES less free
 * than a round needs, before the spares are counted (FEDAGG_FAILPOINTS,
 * common/fa_failpoint.h), so that a test can put the free space exactly
 * where the spares decide.  Never set in production. */
static int storage_short(uint64_t *bytes)
{
#ifdef FA_TEST_HOOKS
    char v[32];
    if (!fa_failpoint_value("fed-storage-short", v, sizeof(v)))
        return 0;
    *bytes = strtoull(v, NULL, 10);
    return 1;
#else
    (void)bytes;
    return 0;
#endif
}

/* Whether the storage can take a round now (free space for one). */
static int storage_check(fa_fed *f, fa_error *err)
{
    struct statvfs vfs;
    uint64_t need = storage_need(f), spare, short_by;
    char path[4200];

    if (statvfs(f->storage_dir, &vfs) != 0)
        return fa_errorf(err, FA_ERR_IO, "storage %s: statvfs: %s", f->storage_dir,
                         strerror(errno));
    f->storage_free = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (storage_short(&short_by))
        f->storage_free = need > short_by ? need - short_by : 0;
    /* The sum and the optimizer state are written over spare files
     * (fed_round_state.c, model_store.h): their blocks count as free for them. */
    fa_fed_spare_sum_path(f, path, sizeof(path));
    spare = fa_atomic_file_spare_bytes(path, (uint64_t)4 * f->sa_cfg.vector_len);
    fa_model_store_spare_state_path(f->store, path, sizeof(path));
    spare +=
        fa_atomic_file_spare_bytes(path, (uint64_t)4 * f->d * fa_server_opt_state_count(f->opt));
    if (f->storage_free + spare < need)
        return fa_errorf(err, FA_ERR_NOSPACE,
                         "storage %s has %.1f MiB free; a round needs about %.1f MiB (model, "
                         "master weights, optimizer state, sum): free space or enlarge the volume",
                         f->storage_dir, (double)f->storage_free / 1048576.0,
                         (double)need / 1048576.0);
    return 0;
}

/* Test switch fed-storage-gate-off: the aggregator as it was before the
 * storage gate (an attempt opens whatever the free space; one that cannot
 * be saved or committed is aborted and the next opens at once).  The
 * anchor of `fedagg-bench recovery`'s disk_full line; never set in
 * production (FEDAGG_FAILPOINTS, common/fa_failpoint.h). */
static int storage_gate_off(void)
{
#ifdef FA_TEST_HOOKS
    char v[8];
    return fa_failpoint_value("fed-storage-gate-off", v, sizeof(v)) != NULL;
#else
    return 0;
#endif
}

/* The storage failed (why): close the gate, logging once per back-off. */
static void storage_failed(fa_fed *f, uint64_t now_ms, const char *why)
{
    if (storage_gate_off()) {
        fa_log(FA_LOG_WARN, "TEST SWITCH: storage failed, gate off (fed-storage-gate-off)",
               "reason=\"%s\"", why);
        return;
    }
    if (fa_storage_gate_fail(&f->gate, now_ms, why))
        fa_log(FA_LOG_WARN, "storage cannot take a round; no attempt opens until it can",
               "reason=\"%s\" next_check_s=%.0f failures=%" PRIu64, why,
               (double)f->gate.backoff_ms / 1000.0, f->gate.failures);
    fa_fed_update_gauges(f);
}

/* Opens attempt `attempt` of `round` if the storage can take it; else the
 * federation waits with no attempt open (phase IDLE) and fa_fed_tick tries
 * again when the gate's back-off has passed. */
void fa_fed_open_gated(fa_fed *f, uint64_t round, uint32_t attempt, uint64_t now_ms)
{
    fa_error err;
    int rc;

    f->round = round;
    f->attempt = attempt;
    if (f->audit_damaged) {
        /* No round can be recorded: none is opened. */
        f->phase = FEDAGG__PHASE__PHASE_IDLE;
        fa_secagg_server_del(f->sa);
        f->sa = NULL;
        fa_fed_update_gauges(f);
        return;
    }
    if (f->paused) {
        /* fa_fed_admin_resume opens it. */
        f->phase = FEDAGG__PHASE__PHASE_IDLE;
        fa_secagg_server_del(f->sa);
        f->sa = NULL;
        fa_log(FA_LOG_INFO, "federation paused: no attempt opens until an operator resumes it",
               "round=%" PRIu64 " attempt=%u paused_by=%s", round, attempt, f->paused_by);
        fa_fed_update_gauges(f);
        return;
    }
    if (f->gate.blocked && !fa_storage_gate_due(&f->gate, now_ms)) {
        f->phase = FEDAGG__PHASE__PHASE_IDLE;
        return;
    }
    fa_error_clear(&err);
    rc = storage_gate_off() ? 0 : storage_check(f, &err);
    if (rc == 0)
        rc = open_attempt(f, round, attempt, now_ms, &err);
    if (rc == 0) {
        if (fa_storage_gate_ok(&f->gate))
            fa_log(FA_LOG_INFO, "storage usable again; attempts resume",
                   "round=%" PRIu64 " attempt=%u free_mib=%.1f", round, attempt,
                   (double)f->storage_free / 1048576.0);
        fa_fed_update_gauges(f);
        return;
    }
    f->phase = FEDAGG__PHASE__PHASE_IDLE;
    fa_secagg_server_del(f->sa);
    f->sa = NULL;
    storage_failed(f, now_ms, fa_error_msg(&err, rc));
}

/* The next round, or the end of the federation. */
int fa_fed_open_next_round(fa_fed *f, uint64_t now_ms, fa_error *err)
{
    if (f->rounds_limit && f->rounds_completed >= f->rounds_limit) {
        f->round++;
        f->attempt = 0;
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        fa_secagg_server_del(f->sa);
        f->sa = NULL;
        fa_log(FA_LOG_INFO, "federation finished", "rounds=%" PRIu64 " version=%" PRIu64,
               f->rounds_completed, f->cur.version);
        fa_fed_update_gauges(f);
        return fa_fed_save_state(f, err);
    }
    fa_fed_open_gated(f, f->round + 1, 0, now_ms);
    return 0;
}

/* Adds the attempt in flight to the history: completed (the sum's
 * survivors and dropouts, the new version) or aborted (with why). */
static void record_attempt(fa_fed *f, int completed, const char *why, uint64_t now_ms)
{
    fa_round_history_attempt a = f->cur_att;
    char *parts = NULL, *drops = NULL;
    size_t pn = 0, dn = 0;
    FILE *pf = open_memstream(&parts, &pn), *df = open_memstream(&drops, &dn);

    a.completed = completed;
    a.end_unix_ms = fa_time_unix_ms();
    if (!a.start_unix_ms)
        a.start_unix_ms = f->attempt_start_unix_ms;
    a.seconds = fa_fed_attempt_seconds(f, now_ms);
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
    if (fa_round_history_add(&f->hist, &a) != 0)
        fa_log(FA_LOG_WARN, "out of memory: the attempt is not in the history", NULL);
    free(parts);
    free(drops);
}

void fa_fed_abort_attempt(fa_fed *f, uint64_t now_ms, const char *why)
{
    fa_error err;
    uint32_t next = f->attempt + 1;
    uint64_t round = f->round;
    int given_up = 0;

    fa_log(FA_LOG_WARN, "round attempt aborted", "round=%" PRIu64 " attempt=%u phase=%s reason=%s",
           f->round, f->attempt,
           f->phase >= 1 && f->phase <= FA_SECAGG_N_PHASES ? fa_secagg_phase_names[f->phase - 1]
                                                           : "?",
           why);
    f->rounds_aborted++;
    fa_fed_count_outcome(f, "aborted");
    record_attempt(f, 0, why, now_ms);
    /* Every region that advertised in this attempt and is not carried to its
     * end is a dropout of the attempt. */
    for (size_t i = 0; i < f->n_regions; i++)
        if (f->regions[i].have_msg[FA_FED_ADVERTISE]) {
            f->regions[i].dropouts++;
            fa_fed_metric_region(f, "fedagg_region_dropouts_total", f->regions[i].id, 1, 0);
        }
    if (f->max_attempts && next >= f->max_attempts) {
        fa_log(FA_LOG_WARN, "round given up after its last attempt",
               "round=%" PRIu64 " attempts=%u", f->round, next);
        round++;
        next = 0;
        given_up = 1;
    }
    (void)err;
    fa_fed_open_gated(f, round, next, now_ms);
    (void)given_up;
}
/* ------------------------------------------------------------------------ */
/* Completing a round                                                        */
/* ------------------------------------------------------------------------ */

void fa_fed_evaluate(fa_fed *f)
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
        fa_round_history_eval *ve = fa_round_history_version(&f->hist, f->cur.version);
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
 * The sum is what the aggregator learns anyway.  "{federation}" in the
 * directory stands for the federation's id (a service's federations each
 * dump into their own).  A test hook (common/fa_failpoint.h): not in a
 * release build. */
static void debug_dump_sum(fa_fed *f)
{
#ifdef FA_TEST_HOOKS
    const char *env = getenv("FEDAGG_DEBUG_DUMP_DIR"), *at;
    size_t n = (size_t)f->sa_cfg.vector_len;
    char path[4096], bits[16], dir[2048];
    uint32_t *q;

    if (!env || !*env)
        return;
    at = strstr(env, "{federation}");
    if (at)
        snprintf(dir, sizeof(dir), "%.*s%s%s", (int)(at - env), env, f->federation_id,
                 at + strlen("{federation}"));
    else
        snprintf(dir, sizeof(dir), "%s", env);
    if (!(q = malloc(n * sizeof(uint32_t))))
        return;
    snprintf(path, sizeof(path), "%s/sum-r%" PRIu64 "-a%u.u32.bits", dir, f->round, f->attempt);
    snprintf(bits, sizeof(bits), "%u", f->sa_cfg.ring_bits);
    if (fa_secagg_server_result_ring(f->sa, q, n, NULL) == 0 &&
        fa_file_write_atomic(path, bits, strlen(bits), 0644, NULL) == 0) {
        path[strlen(path) - 5] = '\0';
        fa_file_write_atomic(path, q, n * sizeof(uint32_t), 0644, NULL);
    }
    free(q);
#else
    (void)f;
#endif
}

/* The mean delta of the round, chunk by chunk, decoded from the unmasked
 * sum as the streaming step asks for it (fa_global_model_delta_fn). */
static int sum_delta(void *ctx, uint64_t off, float *out, size_t n, fa_error *err)
{
    const fa_fed *f = ctx;
    if (f->ddp_mean) {
        memcpy(out, f->ddp_mean + off, n * sizeof(float));
        return 0;
    }
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
    fa_hex_encode(prev_hex, sizeof(prev_hex), f->cur.model_sha256, 32);
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
void fa_fed_version_changed(fa_fed *f, uint64_t now_ms)
{
    char path[4096];
    fa_error err;

    fa_eval_reports_begin(f->feval, f->cur.version, f->cur.model_sha256);
    fa_error_clear(&err);
    if (fa_global_model_ranges_digest(f->model, f->round_ranges_sha, &err) != 0)
        fa_log(FA_LOG_WARN, "cannot hash the quantiser ranges", "error=\"%s\"", err.msg);
    if (f->evaluator) {
        fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
        fa_evaluator_request(f->evaluator, f->cur.version, path, now_ms);
    }
}

/* The unmask phase closed: the sum is known.  Apply it and start the next round. */
int fa_fed_finish_round(fa_fed *f, uint64_t now_ms, int *committed, fa_error *err)
{
    const uint64_t t_finish = fa_time_mono_ns();
    uint64_t prev_version = f->cur.version;
    uint8_t prev_sha[32];
    double wsum = 0;
    double secs = fa_fed_attempt_seconds(f, now_ms);
    double t0 = (double)fa_time_mono_ns() / 1e9;
    int rc;

    assert(f->phase == FEDAGG__PHASE__PHASE_DONE && f->sa);
    memcpy(prev_sha, f->cur.model_sha256, 32);
    debug_dump_sum(f);
    /* The mean, decoded once into the sum's own memory (the streamed step
     * reads it several times); with distributed DP into f->ddp_mean. */
    rc = f->ddp_on ? fa_fed_ddp_decode(f, &wsum, err)
                   : fa_secagg_server_decode_in_place(f->sa, &wsum, err);
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
    rc = fa_fed_append_record(f, prev_version, prev_sha, fa_time_unix_ms(), err);
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
        struct fa_fed_region *r = fa_fed_find_region(f, id);
        if (r) {
            r->rounds_participated++;
            fa_fed_metric_region(f, "fedagg_region_rounds_total", id, 1, 0);
        }
    }
    for (size_t i = 0; i < fa_secagg_server_dropout_count(f->sa); i++) {
        const char *id = fa_secagg_server_dropout(f->sa, i);
        struct fa_fed_region *r = fa_fed_find_region(f, id);
        if (r) {
            r->dropouts++;
            fa_fed_metric_region(f, "fedagg_region_dropouts_total", id, 1, 0);
        }
    }
    f->rounds_completed++;
    record_attempt(f, 1, NULL, now_ms);
    fa_fed_count_outcome(f, "completed");
    if (f->metrics)
        fa_metrics_observe(f->metrics, "fedagg_round_duration_seconds", f->mlabels, secs);
    fa_fed_version_changed(f, now_ms);
    fa_fed_evaluate(f);
    fa_log(FA_LOG_INFO, "round completed",
           "round=%" PRIu64 " attempt=%u version=%" PRIu64 " participants=%zu dropped=%zu "
           "weight_sum=%.4f seconds=%.2f",
           f->round, f->attempt, f->cur.version, fa_secagg_server_survivor_count(f->sa),
           fa_secagg_server_dropout_count(f->sa), wsum, secs);
    /* The commit of a large model takes a while (a minute at 5 x 10^8): the
     * next attempt's deadlines count from now, not from the unmask close. */
    now_ms += (fa_time_mono_ns() - t_finish) / 1000000u;
    rc = fa_fed_open_next_round(f, now_ms, err);
out:
    free(f->ddp_mean);
    f->ddp_mean = NULL;
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

/* Regions not expected in an attempt: drained by an operator, or they
 * refused the federation's offer. */
static size_t regions_sitting_out(const fa_fed *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_regions; i++)
        n += fa_fed_region_sits_out(&f->regions[i]) != 0;
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
        return st.received >= f->n_regions - regions_sitting_out(f) &&
               now_ms >= f->last_advertise_ms + f->advertise_grace_ms;
    return st.expected == 0 && st.in_flight == 0;
}

/* The audit log's files, checked about once a second against what this
 * process wrote (a file cut short or overwritten while it runs): once
 * damaged, the attempt in flight is abandoned before it commits a model
 * that could not be recorded, and no other opens. */
static void audit_damage_found(fa_fed *f, uint64_t now_ms, const char *why)
{
    f->audit_damaged = 1;
    snprintf(f->audit_damage, sizeof(f->audit_damage), "%s", why);
    fa_log(FA_LOG_ERROR,
           "the audit log is damaged: no round opens until it is repaired (stop the "
           "aggregator, run fedagg audit repair, docs/operations.md)",
           "error=\"%s\"", f->audit_damage);
    if (f->phase >= FEDAGG__PHASE__PHASE_ADVERTISE && f->phase <= FEDAGG__PHASE__PHASE_UNMASK)
        fa_fed_abort_attempt(f, now_ms, "the audit log is damaged");
    fa_fed_update_gauges(f);
}

static int check_audit(fa_fed *f, uint64_t now_ms, int now)
{
    fa_error err;
    int rc;

    if (f->audit_damaged || (!now && now_ms - f->audit_checked_ms < 1000))
        return 0;
    f->audit_checked_ms = now_ms;
    fa_error_clear(&err);
    rc = fa_audit_log_check(f->audit, &err);
    if (rc != FA_ERR_CORRUPT)
        return 0; /* an fstat failure is not damage: checked again next time */
    audit_damage_found(f, now_ms, fa_error_msg(&err, rc));
    return 1;
}

static int close_phase(fa_fed *f, uint64_t now_ms)
{
    fa_secagg_server_status st;
    fa_error err;
    int rc, closing = f->phase;
    double secs = (double)(now_ms - f->phase_opened_ms) / 1000.0;

    /* phase_due closes only an open phase, whose secure-aggregation server
     * is in the same phase (or failed: its close then says so) */
    assert(closing >= FEDAGG__PHASE__PHASE_ADVERTISE && closing <= FEDAGG__PHASE__PHASE_UNMASK);
    fa_error_clear(&err);
    /* The gate decides the candidate once the regions that trained from it
     * have evaluated it (fed_gov.c); a rejection may abandon the attempt. */
    if (closing == FEDAGG__PHASE__PHASE_ADVERTISE && fa_fed_gov_decide(f, 0, now_ms))
        return 1;
    fa_secagg_server_status_get(f->sa, &st);
    assert(st.phase == closing - FEDAGG__PHASE__PHASE_ADVERTISE || st.phase == FA_SECAGG_FAILED);
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
            fa_fed_abort_attempt(f, now_ms, why);
            return 1;
        }
    }
    /* The round commits a model at this close: only with a log that can
     * record it. */
    if (closing == FEDAGG__PHASE__PHASE_UNMASK && check_audit(f, now_ms, 1))
        return 1;
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
        fa_fed_abort_attempt(f, now_ms, err.msg[0] ? err.msg : fa_strerror(rc));
        return 1;
    }
    if (f->metrics) {
        char labels[320];
        fa_fed_labels(f, labels, sizeof(labels), "phase", fa_secagg_phase_names[closing - 1]);
        fa_metrics_observe(f->metrics, "fedagg_phase_duration_seconds", labels, secs);
    }
    f->cur_att.phase_s[closing - 1] = secs;
    fa_secagg_server_status_get(f->sa, &st);
    assert(st.phase == closing - FEDAGG__PHASE__PHASE_ADVERTISE + 1); /* one phase on */
    fa_log(FA_LOG_INFO, "phase closed", "round=%" PRIu64 " attempt=%u phase=%s seconds=%.3f",
           f->round, f->attempt, fa_secagg_phase_names[closing - 1], secs);
    if (st.phase == FA_SECAGG_DONE) {
        for (size_t i = 0; i < fa_secagg_server_share_fault_count(f->sa); i++) {
            const char *region, *owner;
            int kind;
            if (fa_secagg_server_share_fault(f->sa, i, &region, &owner, &kind) == 0)
                fa_log(FA_LOG_WARN,
                       "a region revealed a bad share; the round goes on without its shares "
                       "(recorded in the audit log)",
                       "region=%s owner=%s secret=%s round=%" PRIu64 " attempt=%u", region, owner,
                       kind == FA_SECAGG_SHARE_SELF_MASK ? "self_mask" : "mask_key", f->round,
                       f->attempt);
        }
        /* the last word on the candidate before the next version */
        if (fa_fed_gov_decide(f, 1, now_ms))
            return 1;
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        /* Saved before the model commit: a crash in between is repaired from
         * this state on restart (fa_fed_open). */
        int committed = 0;
        rc = fa_fed_save_state(f, &err);
        fa_failpoint("aggregator-after-unmask");
        if (rc == 0)
            rc = fa_fed_finish_round(f, now_ms, &committed, &err);
        if (rc != 0 && !committed) {
            char why[600];
            snprintf(why, sizeof(why), "the new model could not be committed: %s",
                     fa_error_msg(&err, rc));
            storage_failed(f, now_ms, why); /* no new attempt before a back-off */
            fa_fed_abort_attempt(f, now_ms, why);
        } else if (rc != 0) {
            char why[512];
            fa_log(FA_LOG_ERROR,
                   "round committed but not recorded; restart the aggregator to "
                   "repair the audit log",
                   "round=%" PRIu64 " error=\"%s\"", f->round, fa_error_msg(&err, rc));
            /* Damaged between the check at this close and the append: the
             * log cannot be repaired by a restart, only by an operator;
             * the aggregator stays up and says so (/readyz). */
            if (fa_audit_log_damaged(f->audit, why, sizeof(why))) {
                audit_damage_found(f, now_ms, why);
                fa_fed_open_gated(f, f->round, f->attempt, now_ms); /* idle: damaged */
            } else {
                f->fatal = 1;
            }
        }
        return 1;
    }
    f->phase = closing + 1;
    f->phase_opened_ms = now_ms;
    rc = fa_fed_save_state(f, &err);
    if (rc != 0) {
        char why[600];
        snprintf(why, sizeof(why), "the round state could not be saved: %s",
                 fa_error_msg(&err, rc));
        storage_failed(f, now_ms, why);
        fa_fed_abort_attempt(f, now_ms, why);
        return 1;
    }
    {
        char fp[64];
        snprintf(fp, sizeof(fp), "aggregator-after-%s", fa_secagg_phase_names[closing - 1]);
        fa_failpoint(fp);
    }
    fa_fed_update_gauges(f);
    return 1;
}

int fa_fed_tick(fa_fed *f, uint64_t now_ms)
{
    int changed = check_audit(f, now_ms, 0);
    /* A phase that closes may make the next one due at once (everybody
     * already answered is impossible, but a zero deadline is not). */
    for (int i = 0; i < 6 && phase_due(f, now_ms); i++)
        changed |= close_phase(f, now_ms);
    for (size_t i = 0; i < f->n_regions; i++)
        if (f->regions[i].last_seen_ms && !fa_fed_region_connected(&f->regions[i], now_ms))
            fa_fed_metric_region(f, "fedagg_region_connected", f->regions[i].id, 0, 1);
    if (f->phase == FEDAGG__PHASE__PHASE_IDLE && !f->audit_damaged &&
        (fa_storage_gate_due(&f->gate, now_ms) || (!f->paused && storage_gate_off()))) {
        fa_fed_open_gated(f, f->round, f->attempt, now_ms);
        changed = 1;
    }
    if (f->evaluator) {
        fa_eval_summary res;
        if (fa_evaluator_poll(f->evaluator, now_ms, &res)) {
            fa_round_history_eval *ve = fa_round_history_version(&f->hist, res.version);
            f->central = res;
            if (ve)
                ve->central_accuracy = res.accuracy;
            fa_fed_update_gauges(f);
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
    if (!fa_fed_find_region(f, region))
        return reply_error(f, reply, FA_ERR_AUTH, "region '%s' is not a member of federation %s",
                           region, f->federation_id);
    if (f->phase == FEDAGG__PHASE__PHASE_DONE)
        return reply_error(f, reply, FA_ERR_STATE, "the federation has finished its %u rounds",
                           f->rounds_limit);
    if (round != f->round || attempt != f->attempt)
        return reply_error(f, reply, FA_ERR_REPLAY,
                           "%s for round %" PRIu64
                           " attempt %u, but the current one is round %" PRIu64 " attempt %u",
                           fa_secagg_phase_names[kind], round, attempt, f->round, f->attempt);
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
        return reply_error(f, reply, FA_ERR_PARSE, "%s message from %s does not decode",
                           fa_secagg_phase_names[kind], region);
    sender = fd ? *(const char *const *)((const uint8_t *)m + fd->offset) : NULL;
    if (!sender || strcmp(sender, region) != 0) {
        fa_log(FA_LOG_WARN, "message naming another region refused",
               "region=%s claimed=%s phase=%s", region, sender ? sender : "",
               fa_secagg_phase_names[kind]);
        rc = reply_error(f, reply, FA_ERR_AUTH,
                         "the client certificate names region %s but the %s message is from "
                         "'%s'",
                         region, fa_secagg_phase_names[kind], sender ? sender : "");
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
#ifndef FA_TEST_HOOKS
    (void)f, (void)region, (void)version, (void)path, (void)n, (void)sha256, (void)err;
    return 0;
#else
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
    rc = fa_sha256(sha256, data, len);
    if (rc != 0)
        fa_errorf(err, rc, "%s: SHA-256 failed", src);
    if (rc == 0 && path) {
        snprintf(path, n, "%s/other-model-%s-%" PRIu64 ".safetensors", f->storage_dir, region,
                 version);
        rc = fa_file_write_atomic(path, data, len, 0600, err);
    }
    free(data);
    if (rc == 0 && path)
        fa_log(FA_LOG_WARN, "TEST SWITCH: serving a region another model (fed-serve-other-model)",
               "region=%s version=%" PRIu64, region, version);
    return rc == 0 ? 1 : rc;
#endif
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
        return reply_error(f, reply, FA_ERR_PROTOCOL,
                           "the advertisement of region %s names no model digest: workers of "
                           "secure-aggregation protocol version 3 sign the model they trained "
                           "from; upgrade this region's worker",
                           region);
    memcpy(want, f->cur.model_sha256, 32);
    fa_error_clear(&err);
    if (other_model(f, region, f->cur.version, NULL, 0, want, &err) < 0)
        return reply_fault(f, reply, FA_ERR_IO, "%s", err.msg);
    if (sodium_memcmp(got, want, 32) == 0)
        return 0;
    fa_hex_encode(g, sizeof(g), got, 8);
    fa_hex_encode(w, sizeof(w), want, 8);
    fa_log(FA_LOG_WARN, "advertisement for another model refused",
           "region=%s version=%" PRIu64 " advertised_sha256=%s... current_sha256=%s...", region,
           f->cur.version, g, w);
    return reply_error(f, reply, FA_ERR_REPLAY,
                       "region %s advertised keys for model %s..., but the current model (version "
                       "%" PRIu64 ") is %s...: download it again",
                       region, g, f->cur.version, w);
}

int fa_fed_submit(fa_fed *f, int kind, const char *region, uint64_t round, uint32_t attempt,
                  const uint8_t *body, size_t len, uint64_t now_ms, fa_fed_reply *reply)
{
    struct fa_fed_region *r;
    uint8_t sha[32];
    fa_error err;
    int rc;

    if (kind < 0 || kind >= FA_SECAGG_N_PHASES || kind == FA_FED_MASKED)
        return reply_error(f, reply, FA_ERR_INVAL, "not a message phase");
    /* A retried unmask of the round that just completed: its result stands. */
    if (kind == FA_FED_UNMASK && f->last_result && round == f->last_round &&
        attempt == f->last_attempt && fa_fed_find_region(f, region))
        return 0;
    if (!fa_fed_find_region(f, region))
        return check_position(f, kind, region, round, attempt, reply); /* 403 */
    rc = check_sender(f, kind, region, body, len, reply);
    if (rc == 0)
        rc = check_position(f, kind, region, round, attempt, reply);
    if (rc != 0)
        return rc;
    r = fa_fed_find_region(f, region);
    if (kind == FA_FED_ADVERTISE && r->drained && !r->have_msg[kind])
        return reply_error(f, reply, FA_ERR_STATE,
                           "region %s is drained by operator %s: it sits out until an operator "
                           "admits it again",
                           region, r->drained_by);
    if (kind == FA_FED_ADVERTISE && r->decision < 0 && !r->have_msg[kind])
        return reply_error(f, reply, FA_ERR_STATE,
                           "region %s refused federation %s (%s): it sits out until it sends a "
                           "decision that accepts",
                           region, f->federation_id,
                           r->decision_reason[0] ? r->decision_reason : "no reason given");
    if (kind == FA_FED_ADVERTISE && (rc = check_advertised_model(f, region, body, len, reply)) != 0)
        return rc;
    if (fa_sha256(sha, body, len) != 0)
        return reply_fault(f, reply, FA_ERR_CRYPTO, "SHA-256 failed");
    if (r->have_msg[kind]) {
        if (sodium_memcmp(sha, r->msg_sha[kind], 32) == 0)
            return 0; /* a retry of what was accepted: wait for the close again */
        if (kind == FA_FED_ADVERTISE && f->phase == FEDAGG__PHASE__PHASE_ADVERTISE) {
            /* New keys while nobody has seen the old ones: its worker
             * restarted and lost them.  They replace the old ones. */
            fa_error_clear(&err);
            rc = fa_secagg_server_readvertise(f->sa, region, body, len, now_ms, &err);
            if (rc != 0)
                return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
            memcpy(r->msg_sha[kind], sha, 32);
            f->last_advertise_ms = now_ms;
            fa_log(FA_LOG_INFO, "advertisement replaced",
                   "region=%s round=%" PRIu64 " attempt=%u reason=\"new keys before the advertise "
                   "phase closed (did its worker restart?)\"",
                   region, round, attempt);
            return 0;
        }
        return reply_error(f, reply, FA_ERR_EXISTS,
                           "region %s already sent a different %s message for round %" PRIu64
                           " attempt %u",
                           region, fa_secagg_phase_names[kind], round, attempt);
    }
    if (f->phase > kind + 1)
        return 0; /* the phase closed (maybe before a restart): the poll answers */
    if (f->phase != kind + 1)
        return reply_error(f, reply, FA_ERR_STATE,
                           "%s message for round %" PRIu64 " attempt %u arrived in the %s phase",
                           fa_secagg_phase_names[kind], round, attempt,
                           f->phase >= 1 && f->phase <= FA_SECAGG_N_PHASES
                               ? fa_secagg_phase_names[f->phase - 1]
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
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
    memcpy(r->msg_sha[kind], sha, 32);
    r->have_msg[kind] = 1;
    if (kind == FA_FED_ADVERTISE)
        f->last_advertise_ms = now_ms;
    fa_log(FA_LOG_DEBUG, "message accepted", "region=%s round=%" PRIu64 " attempt=%u phase=%s",
           region, round, attempt, fa_secagg_phase_names[kind]);
    return 0;
}

/* Whether `region` is in the set a phase's answer is for. */
int fa_fed_in_list(const char *region, const char *const *ids, size_t n)
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
        if (!fa_fed_in_list(region, (const char *const *)f->last_participants,
                            f->n_last_participants)) {
            reply_error(f, reply, FA_ERR_STATE,
                        "region %s is not among the participants of round %" PRIu64, region, round);
            return 1;
        }
        out = malloc(f->last_result_len ? f->last_result_len : 1);
        if (!out) {
            reply_error(f, reply, FA_ERR_NOMEM, "out of memory");
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
                reply_error(f, reply, FA_ERR_STATE,
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
        if (rc == 0 && !fa_fed_find_region(f, region)->uploaded) {
            free(out);
            reply_error(f, reply, FA_ERR_STATE,
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
        /* no answer for it: it is not among this phase's regions (a state
         * refusal, as a dropout's); anything else is this aggregator's failure */
        if (rc == FA_ERR_NOTFOUND)
            reply_error(f, reply, FA_ERR_STATE,
                        "region %s has no %s answer in round %" PRIu64 " attempt %u: %s", region,
                        fa_secagg_phase_names[kind], round, attempt, fa_error_msg(&err, rc));
        else
            reply_fault(f, reply, rc,
                        "region %s has no %s answer in round %" PRIu64 " attempt %u: %s", region,
                        fa_secagg_phase_names[kind], round, attempt, fa_error_msg(&err, rc));
        return 1;
    }
    return reply_ok(reply, out, len);
}

int fa_fed_masked_begin(fa_fed *f, const char *region, uint64_t round, uint32_t attempt,
                        int64_t content_length, uint64_t now_ms, uint64_t *upload, int *discard,
                        fa_fed_reply *reply)
{
    uint64_t want = fa_secagg_masked_bytes(f->sa_cfg.vector_len, f->sa_cfg.ring_bits);
    struct fa_fed_region *r;
    fa_error err;
    int rc;

    *discard = 0;
    *upload = 0;
    rc = check_position(f, FA_FED_MASKED, region, round, attempt, reply);
    if (rc != 0)
        return rc;
    /* The length is fixed by the round's parameters, whatever the phase. */
    if (content_length >= 0 && (uint64_t)content_length > want)
        return reply_error(f, reply, FA_ERR_TOOBIG,
                           "masked upload of %" PRId64 " bytes; this round's is %" PRIu64 " bytes",
                           content_length, want);
    if (content_length != (int64_t)want)
        return reply_error(f, reply, FA_ERR_PROTOCOL,
                           "masked upload needs content-length %" PRIu64 " (got %" PRId64 ")", want,
                           content_length);
    r = fa_fed_find_region(f, region);
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
        return reply_error(f, reply, FA_ERR_STATE,
                           "masked upload for round %" PRIu64 " attempt %u arrived in the %s phase",
                           round, attempt,
                           f->phase >= 1 && f->phase <= FA_SECAGG_N_PHASES
                               ? fa_secagg_phase_names[f->phase - 1]
                               : "done");
    fa_error_clear(&err);
    rc = fa_secagg_server_masked_begin(f->sa, region, now_ms, &err);
    if (rc != 0)
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
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
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    return r && r->uploading && upload != 0 && r->upload_id == upload &&
           f->phase == FEDAGG__PHASE__PHASE_MASKED;
}

int fa_fed_masked_chunk(fa_fed *f, const char *region, uint64_t upload, const uint8_t *data,
                        size_t len, uint64_t now_ms, fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    if (!upload_current(f, region, upload))
        return reply_error(f, reply, FA_ERR_STATE,
                           "this masked upload was closed (its phase ended, or a newer upload "
                           "of the region replaced it)");
    fa_error_clear(&err);
    rc = fa_secagg_server_masked_chunk(f->sa, region, data, len, now_ms, &err);
    if (rc != 0)
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
    fa_failpoint("aggregator-mid-masked");
    return 0;
}

int fa_fed_masked_end(fa_fed *f, const char *region, uint64_t upload, uint64_t now_ms,
                      fa_fed_reply *reply)
{
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    fa_error err;
    int rc;

    if (!upload_current(f, region, upload))
        return reply_error(f, reply, FA_ERR_STATE,
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
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
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
    struct fa_fed_region *r = fa_fed_find_region(f, region);
    if (!upload_current(f, region, upload))
        return;
    fa_secagg_server_masked_abort(f->sa, region, now_ms, NULL);
    r->uploading = 0;
    fa_log(FA_LOG_WARN, "partial masked upload removed from the sum",
           "region=%s round=%" PRIu64 " attempt=%u reason=disconnected", region, f->round,
           f->attempt);
}
int fa_fed_model(fa_fed *f, uint64_t version, int f32, char *path, size_t n, uint64_t *out_version,
                 uint8_t sha256[32])
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

int fa_fed_model_delta_for(fa_fed *f, const char *region, uint64_t want, uint64_t from, char *path,
                           size_t n, uint64_t *out_version, uint8_t model_sha256[32],
                           uint8_t delta_sha256[32])
{
    struct fa_model_version v;
    uint8_t other[32];
    const uint64_t version = f->cur.version;

    if ((want != UINT64_MAX && want != version) || version == 0 || from != version - 1 ||
        fa_model_store_version(f->store, version, &v) != 0 || !v.has_delta)
        return FA_ERR_NOTFOUND;
    /* Under the test switch this region gets another full model instead. */
    if (region && other_model(f, region, version, NULL, 0, other, NULL) != 0)
        return FA_ERR_NOTFOUND;
    fa_model_store_delta_path(f->store, version, path, n);
    memcpy(model_sha256, v.model_sha256, 32);
    memcpy(delta_sha256, v.delta_sha256, 32);
    *out_version = version;
    return 0;
}

int fa_fed_submit_privacy(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                          fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    /* A region that restarts after its upload resumes the attempt and sends
     * the statement it sent before again: the same bytes are taken. */
    if (f->phase > FEDAGG__PHASE__PHASE_MASKED && f->phase <= FEDAGG__PHASE__PHASE_UNMASK &&
        fa_privacy_ledger_has(f->privacy, region, body, len))
        return 0;
    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_MASKED)
        return reply_error(f, reply, FA_ERR_STATE,
                           "privacy statements are taken from the advertise to the masked phase "
                           "of an attempt (before the update is uploaded)");
    fa_error_clear(&err);
    rc = fa_privacy_ledger_submit(f->privacy, region, body, len, &err);
    if (rc != 0) {
        fa_log(FA_LOG_WARN, "privacy statement refused", "region=%s code=%s error=\"%s\"", region,
               fa_strerror(rc), fa_error_msg(&err, rc));
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
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

int fa_fed_submit_decision(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                           int *changed, fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    fa_error_clear(&err);
    rc = fa_fed_decision_submit(f, region, body, len, changed, &err);
    if (rc == FA_ERR_IO || rc == FA_ERR_NOSPACE || rc == FA_ERR_NOMEM)
        return reply_fault(f, reply, rc, "%s", fa_error_msg(&err, rc));
    if (rc != 0) {
        fa_log(FA_LOG_WARN, "decision refused", "region=%s code=%s error=\"%s\"", region,
               fa_strerror(rc), fa_error_msg(&err, rc));
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
    }
    return 0;
}

int fa_fed_region_decision(const fa_fed *f, const char *region, int *decision, const char **reason)
{
    const struct fa_fed_region *r = fa_fed_find_region(f, region);
    if (!r)
        return FA_ERR_NOTFOUND;
    *decision = r->decision;
    if (reason)
        *reason = r->decision_reason;
    return 0;
}

int fa_fed_submit_eval(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                       fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    fa_error_clear(&err);
    rc = fa_eval_reports_submit(f->feval, region, body, len, &err);
    if (rc != 0) {
        fa_log(FA_LOG_WARN, "evaluation report refused", "region=%s code=%s error=\"%s\"", region,
               fa_strerror(rc), fa_error_msg(&err, rc));
        return reply_error(f, reply, rc, "%s", fa_error_msg(&err, rc));
    }
    {
        fa_eval_summary fe;
        fa_eval_reports_summary(f->feval, &fe);
        fa_round_history_eval *ve = fa_round_history_version(&f->hist, fe.version);
        if (ve) {
            ve->federated_accuracy = fe.accuracy;
            ve->federated_regions = fe.regions;
        }
        fa_log(FA_LOG_INFO, "evaluation report accepted",
               "region=%s version=%" PRIu64 " reports=%u examples=%" PRIu64
               " mean_accuracy=%.4f mean_loss=%.4f",
               region, fe.version, fe.regions, fe.n, fe.accuracy, fe.loss);
    }
    fa_fed_update_gauges(f);
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
