/* fed_gov.c - governance of a federation's released models: the gate, the
 * rollback, the channels, the data statements.  See fed_gov.h. */
#include "aggregator/fed_gov.h"
#include "aggregator/federation_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/data_ledger.h"
#include "aggregator/metrics.h"
#include "audit.pb-c.h"
#include "audit/audit_gov.h"
#include "audit/lineage.h"
#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "model/tensors.h"

#define GATE_NAME "the promotion gate"

struct fa_fed_gov {
    int on; /* a promotion policy */
    fa_promo_policy policy;
    char (*channels)[64]; /* the gate moves these on promotion */
    size_t n_channels;
    fa_audit_gov *replay; /* what the log establishes, up to `replayed` records */
    uint64_t replayed;
    fa_audit_region_key *keys; /* the regions', for the replay's data statements */
    size_t nkeys;
    int gate_paused; /* the last pause is the gate's, no resume since */
    uint64_t *pins;  /* versions the store keeps for us */
    size_t npins;
    fa_data_ledger *data;
    fa_gov_counts exported; /* counters already added to the metrics */
    /* The last record's round and attempt, and whether it was an action
     * (a record a repair appends must come after it). */
    uint64_t last_round;
    uint32_t last_attempt;
    int last_action;
};

/* ------------------------------------------------------------------------ */
/* The replay of the log                                                     */
/* ------------------------------------------------------------------------ */

static void replay_finding(void *ctx, int severity, int64_t index, const char *msg)
{
    (void)ctx;
    if (severity == FA_AUDIT_PROBLEM)
        fa_log(FA_LOG_WARN, "governance: the audit log does not hold together",
               "record=%" PRId64 " problem=\"%s\"", index, msg);
}

/* Feeds the records appended since the last call to the replay. */
static int sync_log(fa_fed *f, fa_error *err)
{
    struct fa_fed_gov *g = f->gov;
    uint64_t n = fa_audit_log_size(f->audit);

    for (; g->replayed < n; g->replayed++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        Fedagg__AuditRecord *r;
        int rc = fa_audit_log_read(f->audit, g->replayed, &buf, &len, err);
        if (rc != 0)
            return rc;
        r = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        if (!r)
            return fa_errorf(err, FA_ERR_CORRUPT, "audit log record %" PRIu64 " does not decode",
                             g->replayed);
        rc = fa_audit_gov_record(g->replay, g->replayed, r);
        g->last_round = r->round;
        g->last_attempt = r->attempt;
        g->last_action = fa_audit_record_is_action(r);
        if (r->promotion && r->promotion->action && !strcmp(r->promotion->action, "pause"))
            g->gate_paused = 1;
        else if (r->admin && r->admin->action && !strcmp(r->admin->action, "resume"))
            g->gate_paused = 0;
        fedagg__audit_record__free_unpacked(r, NULL);
        if (rc != 0)
            return fa_errorf(err, rc, "governance replay: out of memory");
    }
    return 0;
}

/* The versions the store must keep: the last promoted (a rollback's
 * target), every channel's, every rejected one (forensics). */
static void update_pins(fa_fed *f)
{
    struct fa_fed_gov *g = f->gov;
    size_t nv = fa_audit_gov_versions(g->replay), nc = fa_audit_gov_channels(g->replay), k = 0;
    const fa_promo_entry *h;
    size_t nh = fa_audit_gov_promoted(g->replay, &h);
    uint64_t *want = calloc(nv + nc + 1, sizeof(*want));

    if (!want)
        return; /* the old pins stay */
    if (nh)
        want[k++] = h[nh - 1].version;
    for (size_t i = 0; i < nc; i++)
        want[k++] = fa_audit_gov_channel_at(g->replay, i)->version;
    for (size_t i = 0; i < nv; i++) {
        const fa_gov_version *v = fa_audit_gov_version_at(g->replay, i);
        if (v->outcome == FA_PROMO_REJECTED)
            want[k++] = v->version;
    }
    for (size_t i = 0; i < g->npins; i++) {
        int still = 0;
        for (size_t j = 0; j < k; j++)
            still |= want[j] == g->pins[i];
        if (!still)
            fa_model_store_pin(f->store, g->pins[i], 0);
    }
    for (size_t j = 0; j < k; j++)
        fa_model_store_pin(f->store, want[j], 1);
    free(g->pins);
    g->pins = want;
    g->npins = k;
}

/* ------------------------------------------------------------------------ */
/* Metrics                                                                   */
/* ------------------------------------------------------------------------ */

static void define_metrics(fa_fed *f)
{
    static const struct {
        const char *name;
        int type;
        const char *help;
    } m[] = {
        {"fedagg_promotions_total", FA_METRIC_COUNTER,
         "Candidate model versions the promotion gate promoted."},
        {"fedagg_rejections_total", FA_METRIC_COUNTER,
         "Candidate model versions the promotion gate rejected (a regression)."},
        {"fedagg_decisions_expired_total", FA_METRIC_COUNTER,
         "Candidates left undecided: too few evaluations before the next version."},
        {"fedagg_rollbacks_total", FA_METRIC_COUNTER,
         "Rollbacks to the last promoted version (the gate's and operators')."},
        {"fedagg_promoted_version", FA_METRIC_GAUGE,
         "The last promoted model version (-1: none yet)."},
        {"fedagg_rejections_in_a_row", FA_METRIC_GAUGE,
         "Candidates rejected since the last promotion."},
        {"fedagg_channel_version", FA_METRIC_GAUGE,
         "The model version a release channel points at."},
        {"fedagg_promotion_gate", FA_METRIC_GAUGE, "1 when the promotion gate is on."},
    };
    if (!f->metrics)
        return;
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        fa_metrics_define(f->metrics, m[i].name, m[i].type, m[i].help, NULL, 0, NULL);
}

static void export_metrics(fa_fed *f)
{
    struct fa_fed_gov *g = f->gov;
    fa_gov_counts c;
    const fa_promo_entry *h;
    size_t nh = fa_audit_gov_promoted(g->replay, &h);

    if (!f->metrics)
        return;
    fa_audit_gov_counts(g->replay, &c);
    fa_metrics_add(f->metrics, "fedagg_promotions_total", f->mlabels,
                   (double)(c.promotions - g->exported.promotions));
    fa_metrics_add(f->metrics, "fedagg_rejections_total", f->mlabels,
                   (double)(c.rejections - g->exported.rejections));
    fa_metrics_add(f->metrics, "fedagg_decisions_expired_total", f->mlabels,
                   (double)(c.expirations - g->exported.expirations));
    fa_metrics_add(f->metrics, "fedagg_rollbacks_total", f->mlabels,
                   (double)(c.rollbacks - g->exported.rollbacks));
    g->exported = c;
    fa_metrics_set(f->metrics, "fedagg_promoted_version", f->mlabels,
                   nh ? (double)h[nh - 1].version : -1.0);
    fa_metrics_set(f->metrics, "fedagg_rejections_in_a_row", f->mlabels,
                   (double)c.rejections_in_a_row);
    fa_metrics_set(f->metrics, "fedagg_promotion_gate", f->mlabels, g->on ? 1.0 : 0.0);
    for (size_t i = 0; i < fa_audit_gov_channels(g->replay); i++) {
        const fa_gov_channel *ch = fa_audit_gov_channel_at(g->replay, i);
        char labels[320];
        fa_fed_labels(f, labels, sizeof(labels), "channel", ch->name); /* and its federation's */
        fa_metrics_set(f->metrics, "fedagg_channel_version", labels, (double)ch->version);
    }
}

/* After records were appended: the replay, the pins, the metrics. */
static void refresh(fa_fed *f)
{
    fa_error err;
    fa_error_clear(&err);
    if (sync_log(f, &err) != 0)
        fa_log(FA_LOG_ERROR, "governance: cannot read back the audit log", "error=\"%s\"", err.msg);
    update_pins(f);
    export_metrics(f);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

/* The fields every governance record has: an action's (the round in
 * flight, the current model as both previous and new), and the size. */
static void record_init(fa_fed *f, Fedagg__AuditRecord *rec, uint64_t now)
{
    fa_fed_action_record_init(f, rec, now);
    rec->num_params = f->d;
}

static int append(fa_fed *f, const Fedagg__AuditRecord *rec, const char *what, fa_error *err)
{
    fa_audit_append_result ar;
    int rc;

    memset(&ar, 0, sizeof(ar));
    rc = fa_audit_log_append(f->audit, rec, &ar, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "the audit log could not record the %s", what);
    fa_audit_append_result_free(&ar);
    refresh(f);
    fa_fed_update_gauges(f);
    return 0;
}

/* A channel's move to the current version (the gate's: op NULL) or to
 * `version` (an operator's). */
static int move_channel(fa_fed *f, const char *channel, uint64_t version, const uint8_t sha[32],
                        const char *op, const char *reason, fa_error *err)
{
    Fedagg__AuditRecord rec;
    Fedagg__ChannelMove m = FEDAGG__CHANNEL_MOVE__INIT;
    const fa_gov_channel *was = fa_audit_gov_channel(f->gov->replay, channel);
    uint64_t now = fa_time_unix_ms();
    int rc;

    record_init(f, &rec, now);
    m.channel = (char *)channel;
    m.version = version;
    m.model_sha256.data = (uint8_t *)sha;
    m.model_sha256.len = 32;
    m.had_previous = was != NULL;
    m.previous_version = was ? was->version : 0;
    m.operator_ = (char *)(op ? op : "");
    m.reason = (char *)reason;
    m.unix_ms = now;
    rec.channel = &m;
    rc = append(f, &rec, "channel move", err);
    if (rc == 0)
        fa_log(FA_LOG_INFO, "release channel moved",
               "channel=%s version=%" PRIu64 " by=\"%s\" reason=\"%s\"", channel, version,
               op ? op : GATE_NAME, reason);
    return rc;
}

/* The statements of the current version, decoded in the order the reports
 * hold them (the record's order).  *n of them, to free with free_statements. */
static Fedagg__EvalStatement **decode_statements(fa_fed *f, size_t *n)
{
    size_t ne = fa_eval_reports_count(f->feval), k = 0;
    Fedagg__EvalStatement **s = calloc(ne ? ne : 1, sizeof(*s));
    for (size_t i = 0; s && i < ne; i++) {
        Fedagg__SignedEval se;
        fa_eval_reports_at(f->feval, i, &se);
        if ((s[k] = fedagg__eval_statement__unpack(NULL, se.statement.len, se.statement.data)))
            k++;
    }
    *n = k;
    return s;
}

static void free_statements(Fedagg__EvalStatement **s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        fedagg__eval_statement__free_unpacked(s[i], NULL);
    free(s);
}

/* Appends the decision v on the current version, with the evidence e and
 * the statements it rests on. */
static int record_decision(fa_fed *f, const fa_promo_evidence *e, const fa_promo_verdict *v,
                           fa_error *err)
{
    Fedagg__AuditRecord rec;
    Fedagg__PromotionDecision d = FEDAGG__PROMOTION_DECISION__INIT;
    Fedagg__PromotionRule rule;
    size_t ne = fa_eval_reports_count(f->feval);
    Fedagg__SignedEval *evs = calloc(ne ? ne : 1, sizeof(*evs));
    Fedagg__SignedEval **evp = calloc(ne ? ne : 1, sizeof(*evp));
    Fedagg__EvalSummary fsum, csum;
    Fedagg__NamedValue fnv[FA_EVAL_MAX_METRICS], *fnvp[FA_EVAL_MAX_METRICS];
    Fedagg__NamedValue cnv[FA_EVAL_MAX_METRICS], *cnvp[FA_EVAL_MAX_METRICS];
    fa_eval_summary fe;
    uint64_t now = fa_time_unix_ms();
    int rc;

    if (!evs || !evp) {
        free(evs);
        free(evp);
        return fa_errorf(err, FA_ERR_NOMEM, "decision record: out of memory");
    }
    record_init(f, &rec, now);
    for (size_t i = 0; i < ne; i++) {
        fa_eval_reports_at(f->feval, i, &evs[i]);
        evp[i] = &evs[i];
    }
    rec.n_evaluations = ne;
    rec.evaluations = evp;
    fa_eval_reports_summary(f->feval, &fe);
    if (fe.valid && fe.version == f->cur.version) {
        fa_eval_summary_to_pb(&fe, &fsum, fnv, fnvp);
        rec.federated_eval = &fsum;
    }
    if (f->central.valid && f->central.version == f->cur.version) {
        fa_eval_summary_to_pb(&f->central, &csum, cnv, cnvp);
        rec.central_eval = &csum;
    }
    fa_promo_policy_to_pb(&f->gov->policy, &rule);
    d.outcome = (char *)fa_promo_outcome_name(v->outcome);
    d.rule = &rule;
    d.value = e->value;
    d.regions = e->regions;
    d.examples = e->examples;
    d.has_baseline = v->has_baseline;
    d.baseline = v->has_baseline ? v->baseline : 0;
    d.baseline_version = v->baseline_version;
    d.reason = (char *)v->reason;
    d.action = (char *)fa_promo_action_name(v->action);
    d.unix_ms = now;
    rec.promotion = &d;
    rc = append(f, &rec, "promotion decision", err);
    free(evs);
    free(evp);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Rollback                                                                  */
/* ------------------------------------------------------------------------ */

/* A rollback's intent, written before the store commits the restored
 * version and removed once its record is in the log, so that a restart in
 * between records it with who asked and why (repair_rollback):
 *
 *   fedagg-rollback v1
 *   <from> <to> <operator, "-" for the gate>
 *   <reason, one line> */
static void intent_path(const fa_fed *f, char *out, size_t n)
{
    snprintf(out, n, "%s/rollback.intent", f->storage_dir);
}

static int write_intent(fa_fed *f, uint64_t from, uint64_t to, const char *op, const char *why,
                        fa_error *err)
{
    char path[4200], text[700], line[501];
    int n;
    intent_path(f, path, sizeof(path));
    snprintf(line, sizeof(line), "%s", why);
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' '; /* the reason is one line */
    n = snprintf(text, sizeof(text), "fedagg-rollback v1\n%" PRIu64 " %" PRIu64 " %s\n%s\n", from,
                 to, op && op[0] ? op : "-", line);
    if (n < 0 || (size_t)n >= sizeof(text))
        return fa_errorf(err, FA_ERR_INVAL, "rollback intent too long");
    return fa_file_write_atomic(path, text, (size_t)n, 0600, err);
}

/* The intent of a rollback from `from` to `to`: 1 with op ("" for the
 * gate) and why filled, 0 when there is none for them. */
static int read_intent(fa_fed *f, uint64_t from, uint64_t to, char *op, size_t opn, char *why,
                       size_t whyn)
{
    char path[4200], name[64];
    uint8_t *data = NULL;
    size_t len = 0;
    unsigned long long a, b;
    int used = 0, ok;
    intent_path(f, path, sizeof(path));
    if (fa_file_read_all(path, &data, &len, 4096, NULL) != 0)
        return 0;
    data = realloc(data, len + 1);
    if (!data)
        return 0;
    data[len] = '\0';
    ok = sscanf((char *)data, "fedagg-rollback v1\n%llu %llu %63s\n%n", &a, &b, name, &used) == 3 &&
         used > 0 && a == from && b == to;
    if (ok) {
        char *nl;
        snprintf(op, opn, "%s", strcmp(name, "-") ? name : "");
        snprintf(why, whyn, "%s", (char *)data + used);
        if ((nl = strchr(why, '\n')))
            *nl = '\0';
    }
    free(data);
    return ok;
}

/* Commits the last promoted version again as the next one, records it,
 * makes it current and abandons the attempt in flight (the next starts
 * from it).  op NULL: the gate. */
static int rollback(fa_fed *f, const char *op, const char *why, uint64_t now_ms, fa_error *err)
{
    Fedagg__AuditRecord rec;
    Fedagg__ModelRollback b = FEDAGG__MODEL_ROLLBACK__INIT;
    const fa_promo_entry *h;
    size_t nh = fa_audit_gov_promoted(f->gov->replay, &h);
    const fa_gov_version *to;
    uint64_t from = f->cur.version, target, now;
    uint8_t from_sha[32];
    char reason[400];
    int rc;

    if (nh == 0)
        return fa_errorf(err, FA_ERR_STATE, "no version was promoted: nothing to roll back to");
    target = h[nh - 1].version;
    to = fa_audit_gov_find(f->gov->replay, target);
    if (!to)
        return fa_errorf(err, FA_ERR_STATE, "the last promoted version %" PRIu64 " is unknown",
                         target);
    if (!memcmp(to->sha256, f->cur.model_sha256, 32))
        return fa_errorf(err, FA_ERR_STATE,
                         "the current model (version %" PRIu64 ") is the last promoted one "
                         "(version %" PRIu64 ") already",
                         from, target);
    if ((rc = write_intent(f, from, target, op, why, err)) != 0)
        return fa_error_prefix(err, rc, "rollback to version %" PRIu64, target);
    rc = fa_model_store_restore(f->store, from + 1, f->round, target, err);
    if (rc != 0) {
        char path[4200];
        intent_path(f, path, sizeof(path));
        unlink(path);
        return fa_error_prefix(err, rc, "rollback to version %" PRIu64, target);
    }
    fa_failpoint("aggregator-after-rollback-commit");
    memcpy(from_sha, f->cur.model_sha256, 32);
    snprintf(reason, sizeof(reason), "%s", why);
    now = fa_time_unix_ms();
    /* Committed: from here the rollback counts; its record follows (a
     * restart appends it if this fails: fa_fed_gov_open). */
    record_init(f, &rec, now);
    rec.prev_version = from;
    rec.prev_model_sha256.data = from_sha;
    rec.new_version = from + 1;
    rec.new_model_sha256.data = (uint8_t *)to->sha256;
    b.to_version = target;
    b.to_model_sha256.data = (uint8_t *)to->sha256;
    b.to_model_sha256.len = 32;
    b.rejected_version = from;
    b.operator_ = (char *)(op ? op : "");
    b.reason = reason;
    b.unix_ms = now;
    rec.rollback = &b;
    rc = fa_model_store_current(f->store, &f->cur);
    if (rc == 0)
        rc = append(f, &rec, "rollback", err);
    if (rc != 0) {
        fa_log(FA_LOG_ERROR,
               "rollback committed but not recorded; restart the aggregator to repair the "
               "audit log",
               "version=%" PRIu64 " restores=%" PRIu64 " error=\"%s\"", from + 1, target,
               fa_error_msg(err, rc));
        f->fatal = 1;
        return rc;
    }
    {
        char path[4200];
        intent_path(f, path, sizeof(path));
        unlink(path); /* recorded */
    }
    fa_log(FA_LOG_WARN, "rolled back to the last promoted version",
           "from=%" PRIu64 " to=%" PRIu64 " new_version=%" PRIu64 " by=\"%s\" reason=\"%s\"", from,
           target, f->cur.version, op ? op : GATE_NAME, reason);
    fa_error_clear(err);
    if ((rc = fa_global_model_reload(f->model, f->store, err)) != 0 ||
        (rc = fa_global_model_check_state(f->model, f->store, f->opt, &f->opt_steps, err)) != 0) {
        fa_log(FA_LOG_ERROR, "the restored version does not open; restart the aggregator",
               "version=%" PRIu64 " error=\"%s\"", f->cur.version, fa_error_msg(err, rc));
        f->fatal = 1;
        return rc;
    }
    fa_fed_version_changed(f, now_ms);
    fa_fed_evaluate(f);
    {
        char abort_why[200];
        snprintf(abort_why, sizeof(abort_why),
                 "rolled back to version %" PRIu64 " (now version %" PRIu64 ")", target,
                 f->cur.version);
        /* The attempt in flight trained from the version rolled back from:
         * abandoned (its regions rejoin from the restored version); with
         * none in flight the next opens from it. */
        if ((f->phase >= FEDAGG__PHASE__PHASE_ADVERTISE &&
             f->phase <= FEDAGG__PHASE__PHASE_UNMASK) ||
            (f->phase == FEDAGG__PHASE__PHASE_DONE && f->sa))
            fa_fed_abort_attempt(f, now_ms, abort_why);
        else if (fa_fed_save_state(f, err) != 0)
            fa_log(FA_LOG_WARN, "round state not saved after the rollback", "error=\"%s\"",
                   err->msg);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The gate                                                                  */
/* ------------------------------------------------------------------------ */

int fa_fed_gov_decide(fa_fed *f, int final, uint64_t now_ms)
{
    struct fa_fed_gov *g = f->gov;
    const fa_gov_version *v;
    const fa_promo_entry *h;
    size_t nh;
    fa_promo_evidence e;
    fa_promo_verdict verdict;
    fa_error err;

    if (!g || !g->on)
        return 0;
    fa_error_clear(&err);
    refresh(f);
    if (fa_audit_log_size(f->audit) == 0 &&
        fa_audit_gov_initial(g->replay, f->cur.version, f->cur.model_sha256) != 0)
        return 0;
    v = fa_audit_gov_find(g->replay, f->cur.version);
    if (!v)
        return 0;
    if (v->decided_at >= 0) {
        /* A rollback the gate decided and could not complete (its store
         * was full, or the aggregator stopped in between): now. */
        if (v->outcome == FA_PROMO_REJECTED && v->action == FA_PROMO_ACT_ROLLBACK) {
            char why[200];
            snprintf(why, sizeof(why),
                     "version %" PRIu64 " was rejected (audit record %" PRId64 ")", v->version,
                     v->decided_at);
            if (rollback(f, NULL, why, now_ms, &err) == 0)
                return 1;
            fa_log(FA_LOG_ERROR,
                   "rollback failed; the round trained from the rejected version "
                   "is abandoned",
                   "version=%" PRIu64 " error=\"%s\"", v->version, err.msg);
            if (!f->fatal)
                fa_fed_abort_attempt(f, now_ms, "a rollback is pending");
            return 1;
        }
        return 0;
    }
    if (g->policy.central) {
        Fedagg__EvalSummary cs;
        Fedagg__NamedValue nv[FA_EVAL_MAX_METRICS], *nvp[FA_EVAL_MAX_METRICS];
        int have = f->central.valid && f->central.version == f->cur.version;
        if (have)
            fa_eval_summary_to_pb(&f->central, &cs, nv, nvp);
        fa_promo_evidence_central(&g->policy, have ? &cs : NULL, &e);
    } else {
        size_t ns;
        Fedagg__EvalStatement **s = decode_statements(f, &ns);
        if (!s)
            return 0;
        fa_promo_evidence_federated(&g->policy, (const Fedagg__EvalStatement *const *)s, ns, &e);
        free_statements(s, ns);
    }
    nh = fa_audit_gov_promoted(g->replay, &h);
    fa_promo_decide(&g->policy, &e, h, nh, final, &verdict);
    if (verdict.outcome == FA_PROMO_WAIT)
        return 0;
    if (record_decision(f, &e, &verdict, &err) != 0) {
        fa_log(FA_LOG_ERROR,
               "the promotion decision could not be recorded; the version stays "
               "a candidate",
               "version=%" PRIu64 " error=\"%s\"", f->cur.version, err.msg);
        return 0;
    }
    fa_log(verdict.outcome == FA_PROMO_REJECTED ? FA_LOG_WARN : FA_LOG_INFO, "candidate decided",
           "version=%" PRIu64 " outcome=%s action=%s reason=\"%s\"", f->cur.version,
           fa_promo_outcome_name(verdict.outcome), fa_promo_action_name(verdict.action),
           verdict.reason);
    if (verdict.outcome == FA_PROMO_PROMOTED) {
        for (size_t i = 0; i < g->n_channels; i++) {
            const fa_gov_channel *c = fa_audit_gov_channel(g->replay, g->channels[i]);
            if (c && c->version == f->cur.version)
                continue;
            if (move_channel(f, g->channels[i], f->cur.version, f->cur.model_sha256, NULL,
                             "promoted by the gate", &err) != 0)
                fa_log(FA_LOG_ERROR, "release channel not moved", "channel=%s error=\"%s\"",
                       g->channels[i], err.msg);
        }
        return 0;
    }
    if (verdict.outcome != FA_PROMO_REJECTED)
        return 0;
    fa_failpoint("aggregator-after-rejection"); /* recorded, not acted on */
    switch (verdict.action) {
    case FA_PROMO_ACT_ROLLBACK: {
        char why[400];
        snprintf(why, sizeof(why), "version %" PRIu64 " rejected: %s", f->cur.version,
                 verdict.reason);
        if (rollback(f, NULL, why, now_ms, &err) != 0) {
            fa_log(FA_LOG_ERROR,
                   "rollback failed; the round trained from the rejected version "
                   "is abandoned and the rollback retried",
                   "version=%" PRIu64 " error=\"%s\"", f->cur.version, err.msg);
            if (!f->fatal)
                fa_fed_abort_attempt(f, now_ms, "a rollback is pending");
        }
        return 1;
    }
    case FA_PROMO_ACT_PAUSE:
        f->paused = 1;
        g->gate_paused = 1;
        snprintf(f->paused_by, sizeof(f->paused_by), "%s", GATE_NAME);
        fa_fed_abort_attempt(f, now_ms,
                             "the candidate was rejected; the gate paused the "
                             "federation");
        return 1;
    default: return 0; /* KEEP: recorded only */
    }
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

/* The store committed a rollback whose record is missing (the aggregator
 * stopped between the two): append it now, from the log's decision. */
static int repair_rollback(fa_fed *f, fa_error *err)
{
    struct fa_fed_gov *g = f->gov;
    uint64_t audited = fa_audit_gov_current(g->replay);
    const fa_gov_version *v;
    const fa_promo_entry *h;
    size_t nh = fa_audit_gov_promoted(g->replay, &h);
    const fa_gov_version *to;
    Fedagg__AuditRecord rec;
    Fedagg__ModelRollback b = FEDAGG__MODEL_ROLLBACK__INIT;
    struct fa_model_version prev;
    char reason[600], op[64] = "", path[4200];
    uint64_t now = fa_time_unix_ms();
    int rc;

    intent_path(f, path, sizeof(path));
    if (audited == UINT64_MAX || f->cur.version != audited + 1 || nh == 0) {
        unlink(path); /* an intent whose restore never committed */
        return 0;
    }
    v = fa_audit_gov_find(g->replay, audited);
    to = fa_audit_gov_find(g->replay, h[nh - 1].version);
    /* A restore is byte for byte a promoted version: an aggregation's new
     * model never is (its metadata names its own version and parent). */
    if (!v || !to || memcmp(to->sha256, f->cur.model_sha256, 32)) {
        unlink(path);
        return 0; /* not a rollback: the round's repair (fed_open.c) */
    }
    if (fa_model_store_version(f->store, audited, &prev) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "model store: version %" PRIu64 " (rolled back from) is not kept",
                         audited);
    if (!read_intent(f, audited, to->version, op, sizeof(op), reason, sizeof(reason))) {
        if (v->outcome != FA_PROMO_REJECTED || v->action != FA_PROMO_ACT_ROLLBACK)
            return fa_errorf(err, FA_ERR_CORRUPT,
                             "model store: version %" PRIu64 " restores version %" PRIu64
                             " but neither the audit log nor %s says who rolled back",
                             f->cur.version, to->version, path);
        snprintf(reason, sizeof(reason),
                 "version %" PRIu64 " was rejected (audit record %" PRId64 ")", audited,
                 v->decided_at);
    }
    fa_log(FA_LOG_WARN, "repairing the audit log: a rollback was committed but not recorded",
           "version=%" PRIu64 " restores=%" PRIu64 " by=\"%s\"", f->cur.version, to->version,
           op[0] ? op : GATE_NAME);
    record_init(f, &rec, now);
    /* the round in flight is not known yet (fed_open.c restores it after
     * this): the record goes where the log allows it */
    rec.round = g->last_action ? g->last_round : g->last_round + 1;
    rec.attempt = g->last_action ? g->last_attempt : 0;
    rec.prev_version = audited;
    rec.prev_model_sha256.data = prev.model_sha256;
    b.to_version = to->version;
    b.to_model_sha256.data = (uint8_t *)to->sha256;
    b.to_model_sha256.len = 32;
    b.rejected_version = audited;
    b.operator_ = op;
    b.reason = reason;
    b.unix_ms = now;
    rec.rollback = &b;
    rc = append(f, &rec, "rollback", err);
    if (rc == 0)
        unlink(path);
    return rc;
}

int fa_fed_gov_open(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err)
{
    const Fedagg__PromotionPolicy *p = cfg->promotion;
    struct fa_fed_gov *g = calloc(1, sizeof(*g));
    fa_eval_reports_member *fm = NULL;
    int rc = 0;

    if (!g)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    f->gov = g;
    if (p && p->enabled) {
        g->on = 1;
        if ((rc = fa_promo_policy_from_config(&g->policy, p, err)) != 0)
            return fa_error_prefix(err, rc, "config");
        if (!g->policy.central && g->policy.min_regions > f->n_regions)
            return fa_errorf(err, FA_ERR_INVAL,
                             "config: promotion.min_regions %u exceeds the %zu regions",
                             g->policy.min_regions, f->n_regions);
        g->channels = calloc(p->n_channels ? p->n_channels : 1, sizeof(*g->channels));
        if (!g->channels)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < p->n_channels; i++) {
            if (!fa_audit_gov_channel_name_ok(p->channels[i]))
                return fa_errorf(err, FA_ERR_INVAL,
                                 "config: promotion.channels: '%s' is not a channel name "
                                 "([a-z0-9._-]{1,63})",
                                 p->channels[i]);
            snprintf(g->channels[i], sizeof(g->channels[i]), "%s", p->channels[i]);
        }
        g->n_channels = p->n_channels;
    }
    g->keys = calloc(f->n_regions ? f->n_regions : 1, sizeof(*g->keys));
    fm = calloc(f->n_regions ? f->n_regions : 1, sizeof(*fm));
    if (!g->keys || !fm) {
        free(fm);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < f->n_regions; i++) {
        g->keys[i].region = f->regions[i].id;
        memcpy(g->keys[i].pk, f->regions[i].pk, 32);
        fm[i].id = f->regions[i].id;
        memcpy(fm[i].pk, f->regions[i].pk, 32);
    }
    g->nkeys = f->n_regions;
    rc = fa_data_ledger_new(&g->data, f->federation_id, fm, f->n_regions, err);
    free(fm);
    if (rc == 0)
        rc = fa_audit_gov_new(&g->replay, g->keys, g->nkeys, replay_finding, f, err);
    if (rc == 0)
        rc = sync_log(f, err);
    if (rc == 0)
        rc = repair_rollback(f, err);
    if (rc != 0)
        return rc;
    define_metrics(f);
    update_pins(f);
    export_metrics(f);
    if (g->gate_paused && !f->paused) {
        f->paused = 1;
        snprintf(f->paused_by, sizeof(f->paused_by), "%s", GATE_NAME);
        fa_log(FA_LOG_INFO, "the federation stays paused after a rejection", "paused_by=\"%s\"",
               GATE_NAME);
    }
    if (g->on) {
        const fa_promo_entry *h;
        size_t nh = fa_audit_gov_promoted(g->replay, &h);
        fa_log(FA_LOG_INFO, "promotion gate on",
               "metric=%s tolerance=%g min_regions=%u baseline=%s on_regression=%s channels=%zu "
               "promoted=%zu last_promoted=%" PRId64,
               g->policy.metric, g->policy.tolerance, g->policy.min_regions,
               g->policy.best_of_last ? "best-of-last" : "last-promoted",
               g->policy.on_regression == FA_PROMO_PAUSE  ? "pause"
               : g->policy.on_regression == FA_PROMO_KEEP ? "keep"
                                                          : "rollback",
               g->n_channels, nh, nh ? (int64_t)h[nh - 1].version : (int64_t)-1);
    }
    return 0;
}

void fa_fed_gov_close(fa_fed *f)
{
    struct fa_fed_gov *g = f ? f->gov : NULL;
    if (!g)
        return;
    fa_audit_gov_del(g->replay);
    fa_data_ledger_del(g->data);
    free(g->channels);
    free(g->keys);
    free(g->pins);
    free(g);
    f->gov = NULL;
}

/* ------------------------------------------------------------------------ */
/* Data statements                                                           */
/* ------------------------------------------------------------------------ */

int fa_fed_submit_data(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                       fa_fed_reply *reply)
{
    fa_error err;
    int rc;

    memset(reply, 0, sizeof(*reply));
    reply->round = f->round;
    reply->attempt = f->attempt;
    fa_data_ledger_begin(f->gov->data, f->round, f->attempt, f->cur.version, f->cur.model_sha256);
    if (f->phase > FEDAGG__PHASE__PHASE_MASKED && f->phase <= FEDAGG__PHASE__PHASE_UNMASK &&
        fa_data_ledger_has(f->gov->data, region, body, len))
        return 0; /* a restarted region's statement again */
    if (f->phase < FEDAGG__PHASE__PHASE_ADVERTISE || f->phase > FEDAGG__PHASE__PHASE_MASKED) {
        reply->code = FA_ERR_STATE;
        snprintf(reply->msg, sizeof(reply->msg),
                 "data statements are taken from the advertise to the masked phase of an "
                 "attempt (before the update is uploaded)");
        return FA_ERR_STATE;
    }
    fa_error_clear(&err);
    rc = fa_data_ledger_submit(f->gov->data, region, body, len, &err);
    if (rc != 0) {
        fa_log(FA_LOG_WARN, "data statement refused", "region=%s code=%s error=\"%s\"", region,
               fa_strerror(rc), fa_error_msg(&err, rc));
        reply->code = rc;
        reply->internal = rc == FA_ERR_NOMEM || rc == FA_ERR_CRYPTO;
        snprintf(reply->msg, sizeof(reply->msg), "%s", fa_error_msg(&err, rc));
        return rc;
    }
    fa_log(FA_LOG_INFO, "data statement accepted",
           "region=%s round=%" PRIu64 " attempt=%u version=%" PRIu64, region, f->round, f->attempt,
           f->cur.version);
    return 0;
}

size_t fa_fed_gov_data_statements(fa_fed *f, uint64_t version, const uint8_t sha[32],
                                  char *const *only, size_t n_only,
                                  Fedagg__SignedDataStatement **items,
                                  Fedagg__SignedDataStatement ***ptrs)
{
    fa_data_ledger *l = f->gov ? f->gov->data : NULL;
    size_t n, k = 0;

    *items = NULL;
    *ptrs = NULL;
    if (!l)
        return 0;
    fa_data_ledger_begin(l, f->round, f->attempt, version, sha); /* drops another attempt's */
    n = fa_data_ledger_count(l);
    *items = calloc(n ? n : 1, sizeof(**items));
    *ptrs = calloc(n ? n : 1, sizeof(**ptrs));
    if (!*items || !*ptrs) {
        free(*items);
        free(*ptrs);
        *items = NULL;
        *ptrs = NULL;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const char *who;
        fa_data_ledger_at(l, i, &(*items)[k], &who);
        if (only && !fa_fed_in_list(who, (const char *const *)only, n_only))
            continue;
        (*ptrs)[k] = &(*items)[k];
        k++;
    }
    return k;
}

void fa_fed_gov_restore_data(fa_fed *f, const Fedagg__RoundState *st)
{
    uint8_t sha[32];
    if (!f->gov || !f->gov->data)
        return;
    /* of the version the round trained from (the store may be one ahead:
     * the round was committed and its record is being repaired) */
    if (fa_model_store_sha256(f->store, st->base_version, sha, NULL) != 0)
        return;
    fa_data_ledger_begin(f->gov->data, st->round, st->attempt, st->base_version, sha);
    for (size_t i = 0; i < st->n_data_statements; i++) {
        fa_error e;
        fa_error_clear(&e);
        if (fa_data_ledger_restore(f->gov->data, st->data_statements[i], &e) != 0)
            fa_log(FA_LOG_WARN, "a saved data statement was refused", "error=\"%s\"", e.msg);
    }
}

/* ------------------------------------------------------------------------ */
/* Channels and operators                                                    */
/* ------------------------------------------------------------------------ */

int fa_fed_channel(fa_fed *f, const char *name, uint64_t *version, uint8_t sha256[32], char *path,
                   size_t n, char **proof, size_t *proof_len, fa_error *err)
{
    const fa_gov_channel *c;
    const fa_gov_version *v;
    int rc;

    *proof = NULL;
    refresh(f);
    c = fa_audit_gov_channel(f->gov->replay, name);
    if (!c)
        return fa_errorf(err, FA_ERR_NOTFOUND, "no release channel '%s' in federation %s", name,
                         f->federation_id);
    v = fa_audit_gov_find(f->gov->replay, c->version);
    if (!v || !fa_model_store_has(f->store, c->version))
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "channel %s points at version %" PRIu64 ", which is no longer kept", name,
                         c->version);
    rc = fa_audit_log_prove(f->audit, (uint64_t)c->moved_at, proof, proof_len, err);
    if (rc != 0)
        return rc;
    *version = c->version;
    memcpy(sha256, v->sha256, 32);
    if (path)
        fa_model_store_model_path(f->store, c->version, path, n);
    return 0;
}

int fa_fed_admin_release(fa_fed *f, const char *op, uint64_t version, const char *channel,
                         uint64_t now_ms, fa_error *err)
{
    const fa_gov_version *v;
    const fa_gov_channel *c;
    fa_gov_counts counts;
    char reason[200];

    (void)now_ms;
    if (!op || !op[0] || strlen(op) > 63)
        return fa_errorf(err, FA_ERR_AUTH, "a release needs an operator name");
    if (!fa_audit_gov_channel_name_ok(channel))
        return fa_errorf(err, FA_ERR_INVAL,
                         "'%.80s' is not a channel name ([a-z0-9._-], 1 to 63 bytes)",
                         channel ? channel : "");
    refresh(f);
    v = fa_audit_gov_find(f->gov->replay, version);
    if (!v || !fa_model_store_has(f->store, version))
        return fa_errorf(err, FA_ERR_NOTFOUND, "model version %" PRIu64 " is not kept", version);
    fa_audit_gov_counts(f->gov->replay, &counts);
    if ((f->gov->on || counts.gate_seen) && v->outcome != FA_PROMO_PROMOTED)
        return fa_errorf(err, FA_ERR_STATE,
                         "version %" PRIu64 " is not promoted (%s): only promoted versions are "
                         "released",
                         version,
                         v->outcome == FA_PROMO_REJECTED  ? "the gate rejected it"
                         : v->outcome == FA_PROMO_EXPIRED ? "too few evaluations decided it"
                                                          : "not decided yet");
    c = fa_audit_gov_channel(f->gov->replay, channel);
    if (c && c->version == version)
        return fa_errorf(err, FA_ERR_STATE, "channel %s points at version %" PRIu64 " already",
                         channel, version);
    snprintf(reason, sizeof(reason), "released by operator %s", op);
    return move_channel(f, channel, version, v->sha256, op, reason, err);
}

int fa_fed_admin_rollback(fa_fed *f, const char *op, uint64_t now_ms, fa_error *err)
{
    char why[160];
    if (!op || !op[0] || strlen(op) > 63)
        return fa_errorf(err, FA_ERR_AUTH, "a rollback needs an operator name");
    refresh(f);
    snprintf(why, sizeof(why), "operator %s rolled back", op);
    return rollback(f, op, why, now_ms, err);
}

int fa_fed_model_card(fa_fed *f, uint64_t version, char **json, fa_error *err)
{
    return fa_lineage_card_json(f->audit, version, f->gov ? f->gov->keys : NULL,
                                f->gov ? f->gov->nkeys : 0, json, err);
}

int fa_fed_governance_json(fa_fed *f, char **json, fa_error *err)
{
    struct fa_fed_gov *g = f->gov;
    json_t *o = json_object(), *pol = NULL, *prom = json_array(), *ch = json_array(),
           *dec = json_array();
    const fa_promo_entry *h;
    size_t nh, nv;
    fa_gov_counts c;

    *json = NULL;
    if (!o || !prom || !ch || !dec) {
        json_decref(o);
        json_decref(prom);
        json_decref(ch);
        json_decref(dec);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    refresh(f);
    if (g->on) {
        Fedagg__PromotionRule r;
        fa_promo_policy_to_pb(&g->policy, &r);
        pol = json_object();
        json_object_set_new(pol, "metric", json_string(r.metric));
        json_object_set_new(pol, "source", json_string(r.source));
        json_object_set_new(pol, "higher_is_better", json_boolean(r.higher_is_better));
        json_object_set_new(pol, "baseline", json_string(r.baseline));
        json_object_set_new(pol, "baseline_window", json_integer(r.baseline_window));
        json_object_set_new(pol, "tolerance", json_real(r.tolerance));
        json_object_set_new(pol, "min_regions", json_integer(r.min_regions));
        json_object_set_new(pol, "on_regression", json_string(r.on_regression));
        {
            json_t *a = json_array();
            for (size_t i = 0; i < g->n_channels; i++)
                json_array_append_new(a, json_string(g->channels[i]));
            json_object_set_new(pol, "channels", a);
        }
    }
    json_object_set_new(o, "policy", pol ? pol : json_null());
    nh = fa_audit_gov_promoted(g->replay, &h);
    for (size_t i = 0; i < nh; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "version", json_integer((json_int_t)h[i].version));
        json_object_set_new(e, "value", json_real(h[i].value));
        json_array_append_new(prom, e);
    }
    json_object_set_new(o, "promoted", prom);
    for (size_t i = 0; i < fa_audit_gov_channels(g->replay); i++) {
        const fa_gov_channel *x = fa_audit_gov_channel_at(g->replay, i);
        json_t *e = json_object();
        json_object_set_new(e, "channel", json_string(x->name));
        json_object_set_new(e, "version", json_integer((json_int_t)x->version));
        json_object_set_new(e, "record", json_integer((json_int_t)x->moved_at));
        json_object_set_new(e, "by", x->by[0] ? json_string(x->by) : json_null());
        json_array_append_new(ch, e);
    }
    json_object_set_new(o, "channels", ch);
    /* the decisions of the last versions, oldest first */
    nv = fa_audit_gov_versions(g->replay);
    for (size_t i = nv > FA_FED_HISTORY ? nv - FA_FED_HISTORY : 0; i < nv; i++) {
        const fa_gov_version *v = fa_audit_gov_version_at(g->replay, i);
        json_t *e = json_object();
        json_object_set_new(e, "version", json_integer((json_int_t)v->version));
        json_object_set_new(e, "made",
                            json_string(v->made == FA_GOV_MADE_ROLLBACK ? "rollback"
                                        : v->made == FA_GOV_MADE_ROUND  ? "round"
                                                                        : "initial"));
        if (v->made == FA_GOV_MADE_ROLLBACK)
            json_object_set_new(e, "restores", json_integer((json_int_t)v->restored));
        json_object_set_new(e, "outcome",
                            json_string(v->outcome == FA_PROMO_WAIT
                                            ? "candidate"
                                            : fa_promo_outcome_name(v->outcome)));
        json_object_set_new(e, "value", isfinite(v->value) ? json_real(v->value) : json_null());
        if (v->decided_at >= 0)
            json_object_set_new(e, "record", json_integer((json_int_t)v->decided_at));
        json_array_append_new(dec, e);
    }
    json_object_set_new(o, "versions", dec);
    fa_audit_gov_counts(g->replay, &c);
    json_object_set_new(o, "promotions", json_integer((json_int_t)c.promotions));
    json_object_set_new(o, "rejections", json_integer((json_int_t)c.rejections));
    json_object_set_new(o, "expired", json_integer((json_int_t)c.expirations));
    json_object_set_new(o, "rollbacks", json_integer((json_int_t)c.rollbacks));
    json_object_set_new(o, "rejections_in_a_row", json_integer((json_int_t)c.rejections_in_a_row));
    json_object_set_new(o, "last_promoted",
                        nh ? json_integer((json_int_t)h[nh - 1].version) : json_null());
    json_object_set_new(o, "paused_by_gate", json_boolean(g->gate_paused && f->paused));
    *json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!*json)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    return 0;
}
