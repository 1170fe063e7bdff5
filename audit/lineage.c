/* lineage.c - the model card of a version from the audit log.  See
 * lineage.h. */
#include "audit/lineage.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_gov.h"
#include "common/fa_hex.h"
#include "crypto/identity.h"

struct first_problem {
    int64_t index;
    char msg[480];
    int have;
};

static void on_finding(void *ctx, int severity, int64_t index, const char *msg)
{
    struct first_problem *p = ctx;
    if (severity != FA_AUDIT_PROBLEM || p->have)
        return;
    p->have = 1;
    p->index = index;
    snprintf(p->msg, sizeof(p->msg), "%s", msg);
}

static Fedagg__AuditRecord *read_record(fa_audit_log *log, uint64_t i, fa_error *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    Fedagg__AuditRecord *r;
    if (fa_audit_log_read(log, i, &buf, &len, err) != 0)
        return NULL;
    r = fedagg__audit_record__unpack(NULL, len, buf);
    free(buf);
    if (!r)
        fa_errorf(err, FA_ERR_CORRUPT, "audit log record %" PRIu64 " does not decode", i);
    return r;
}

static json_t *hex(const uint8_t *b, size_t n)
{
    char h[129];
    if (!b || n == 0 || n > 64)
        return json_null();
    fa_hex_encode(h, sizeof(h), b, n);
    return json_string(h);
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

/* A set of named values as an object. */
static json_t *named(Fedagg__NamedValue **m, size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++)
        if (m[i]->name)
            json_object_set_new(o, m[i]->name, num(m[i]->value));
    return o;
}

static json_t *summary_json(const Fedagg__EvalSummary *s)
{
    json_t *o;
    if (!s)
        return json_null();
    o = json_object();
    json_object_set_new(o, "version", u64(s->model_version));
    json_object_set_new(o, "regions", json_integer(s->regions));
    json_object_set_new(o, "num_examples", u64(s->num_examples));
    json_object_set_new(o, "loss", num(s->loss));
    json_object_set_new(o, "accuracy", num(s->accuracy));
    json_object_set_new(o, "metrics", named(s->metrics, s->n_metrics));
    return o;
}

/* The settings of an aggregation record. */
static json_t *settings_json(const Fedagg__AuditRecord *r)
{
    json_t *o = json_object(), *opt = json_null(), *q = json_null();
    if (r->optimizer) {
        opt = json_object();
        json_object_set_new(opt, "kind", json_string(r->optimizer->kind ? r->optimizer->kind : ""));
        json_object_set_new(opt, "learning_rate", num(r->optimizer->learning_rate));
        json_object_set_new(opt, "momentum", num(r->optimizer->momentum));
        json_object_set_new(opt, "beta1", num(r->optimizer->beta1));
        json_object_set_new(opt, "beta2", num(r->optimizer->beta2));
        json_object_set_new(opt, "tau", num(r->optimizer->tau));
    }
    if (r->quantization) {
        const Fedagg__QuantizationSettings *s = r->quantization;
        q = json_object();
        json_object_set_new(q, "bits", json_integer(s->bits));
        json_object_set_new(q, "ring_bits", json_integer(s->ring_bits));
        json_object_set_new(q, "clip_mode", json_string(s->clip_mode ? s->clip_mode : ""));
        json_object_set_new(q, "clip_l2_norm", num(s->clip_l2_norm));
        json_object_set_new(q, "clip_value", num(s->clip_value));
        json_object_set_new(q, "max_examples", u64(s->max_examples));
        json_object_set_new(q, "range", json_string(s->range ? s->range : ""));
        json_object_set_new(q, "ranges_sha256", hex(s->ranges_sha256.data, s->ranges_sha256.len));
    }
    json_object_set_new(o, "optimizer", opt);
    json_object_set_new(o, "quantization", q);
    json_object_set_new(o, "threshold", json_integer(r->threshold));
    json_object_set_new(o, "neighbours", json_integer(r->neighbours));
    if (r->ddp && r->ddp->params) {
        json_t *d = json_object();
        json_object_set_new(d, "noise_multiplier", num(r->ddp->params->noise_multiplier));
        json_object_set_new(d, "clip", num(r->ddp->params->clip));
        json_object_set_new(d, "min_regions", json_integer(r->ddp->params->min_regions));
        json_object_set_new(d, "noisy_contributions", json_integer(r->ddp->noisy_contributions));
        json_object_set_new(d, "epsilon_round", num(r->ddp->epsilon_round));
        json_object_set_new(d, "epsilon_total", num(r->ddp->epsilon_total));
        json_object_set_new(d, "delta", num(r->ddp->delta));
        json_object_set_new(o, "distributed_dp", d);
    } else {
        json_object_set_new(o, "distributed_dp", json_null());
    }
    return o;
}

static json_t *data_json(const Fedagg__SignedDataStatement *sd, const fa_audit_region_key *keys,
                         size_t nkeys)
{
    Fedagg__DataStatement *s =
        fedagg__data_statement__unpack(NULL, sd->statement.len, sd->statement.data);
    const uint8_t *pk;
    json_t *o;
    if (!s)
        return json_null();
    o = json_object();
    json_object_set_new(o, "dataset", json_string(s->dataset ? s->dataset : ""));
    json_object_set_new(o, "manifest_sha256", hex(s->manifest_sha256.data, s->manifest_sha256.len));
    json_object_set_new(o, "num_examples", u64(s->num_examples));
    json_object_set_new(o, "trainer", json_string(s->trainer ? s->trainer : ""));
    json_object_set_new(o, "trainer_kind", json_string(s->trainer_kind ? s->trainer_kind : ""));
    json_object_set_new(o, "trainer_sha256", hex(s->trainer_sha256.data, s->trainer_sha256.len));
    json_object_set_new(o, "unix_ms", u64(s->unix_ms));
    pk = fa_audit_region_key_find(keys, nkeys, s->region);
    json_object_set_new(
        o, "signature",
        json_string(!pk ? "no key given"
                    : fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_DATA, sd->statement.data,
                                                   sd->statement.len, sd->signature.data) == 0
                        ? "verified"
                        : "does not verify"));
    fedagg__data_statement__free_unpacked(s, NULL);
    return o;
}

static json_t *privacy_json(const Fedagg__SignedPrivacy *sp)
{
    Fedagg__PrivacyStatement *s =
        fedagg__privacy_statement__unpack(NULL, sp->statement.len, sp->statement.data);
    json_t *o;
    if (!s)
        return json_null();
    o = json_object();
    json_object_set_new(o, "mechanism", json_string(s->mechanism ? s->mechanism : ""));
    json_object_set_new(o, "noise_multiplier", num(s->noise_multiplier));
    json_object_set_new(o, "clip", num(s->clip));
    json_object_set_new(o, "sampling_rate", num(s->sampling_rate));
    json_object_set_new(o, "steps", u64(s->steps));
    json_object_set_new(o, "epsilon_round", num(s->epsilon_round));
    json_object_set_new(o, "epsilon_total", num(s->epsilon_total));
    json_object_set_new(o, "delta", num(s->delta));
    json_object_set_new(o, "budget_epsilon", num(s->budget_epsilon));
    json_object_set_new(o, "accountant", json_string(s->accountant ? s->accountant : ""));
    fedagg__privacy_statement__free_unpacked(s, NULL);
    return o;
}

/* The region's statement among n signed statements (statement field 2 is
 * the region in DataStatement and PrivacyStatement alike). */
static const Fedagg__SignedDataStatement *data_of(const Fedagg__AuditRecord *r, const char *region)
{
    for (size_t i = 0; i < r->n_data_statements; i++) {
        Fedagg__DataStatement *s = fedagg__data_statement__unpack(
            NULL, r->data_statements[i]->statement.len, r->data_statements[i]->statement.data);
        int hit = s && s->region && !strcmp(s->region, region);
        if (s)
            fedagg__data_statement__free_unpacked(s, NULL);
        if (hit)
            return r->data_statements[i];
    }
    return NULL;
}

static const Fedagg__SignedPrivacy *privacy_of(const Fedagg__AuditRecord *r, const char *region)
{
    for (size_t i = 0; i < r->n_privacy; i++) {
        Fedagg__PrivacyStatement *s = fedagg__privacy_statement__unpack(
            NULL, r->privacy[i]->statement.len, r->privacy[i]->statement.data);
        int hit = s && s->region && !strcmp(s->region, region);
        if (s)
            fedagg__privacy_statement__free_unpacked(s, NULL);
        if (hit)
            return r->privacy[i];
    }
    return NULL;
}

/* The regions of an aggregation record with what they stated. */
static json_t *regions_json(const Fedagg__AuditRecord *r, const fa_audit_region_key *keys,
                            size_t nkeys)
{
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_participants; i++) {
        const char *id = r->participants[i];
        const Fedagg__RegionCommitment *c = i < r->n_commitments ? r->commitments[i] : NULL;
        const Fedagg__SignedDataStatement *d = data_of(r, id);
        const Fedagg__SignedPrivacy *p = privacy_of(r, id);
        json_t *o = json_object();
        json_object_set_new(o, "region", json_string(id));
        json_object_set_new(o, "upload_digest",
                            c ? hex(c->upload_digest.data, c->upload_digest.len) : json_null());
        json_object_set_new(o, "upload_signed", json_boolean(c && c->signature.len == 64));
        json_object_set_new(o, "data", d ? data_json(d, keys, nkeys) : json_null());
        json_object_set_new(o, "privacy", p ? privacy_json(p) : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *strings(char **v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

/* The evaluations of record r (of its previous model). */
static json_t *evaluations_json(const Fedagg__AuditRecord *r, int64_t index)
{
    json_t *o = json_object(), *a = json_array();
    for (size_t i = 0; i < r->n_evaluations; i++) {
        Fedagg__EvalStatement *s = fedagg__eval_statement__unpack(
            NULL, r->evaluations[i]->statement.len, r->evaluations[i]->statement.data);
        json_t *e;
        if (!s)
            continue;
        e = json_object();
        json_object_set_new(e, "region", json_string(s->region ? s->region : ""));
        json_object_set_new(e, "num_examples", u64(s->num_examples));
        json_object_set_new(e, "loss", num(s->loss));
        json_object_set_new(e, "accuracy", num(s->accuracy));
        json_object_set_new(e, "metrics", named(s->metrics, s->n_metrics));
        json_object_set_new(e, "unix_ms", u64(s->unix_ms));
        json_array_append_new(a, e);
        fedagg__eval_statement__free_unpacked(s, NULL);
    }
    json_object_set_new(o, "record", json_integer(index));
    json_object_set_new(o, "statements", a);
    json_object_set_new(o, "federated", summary_json(r->federated_eval));
    json_object_set_new(o, "central", summary_json(r->central_eval));
    return o;
}

static json_t *decision_json(const Fedagg__AuditRecord *r, int64_t index)
{
    const Fedagg__PromotionDecision *d = r->promotion;
    const Fedagg__PromotionRule *ru = d->rule;
    json_t *o = json_object(), *rule = json_object();
    json_object_set_new(o, "record", json_integer(index));
    json_object_set_new(o, "outcome", json_string(d->outcome));
    json_object_set_new(o, "value", num(d->value));
    json_object_set_new(o, "regions", json_integer(d->regions));
    json_object_set_new(o, "examples", u64(d->examples));
    json_object_set_new(o, "baseline", d->has_baseline ? num(d->baseline) : json_null());
    json_object_set_new(o, "baseline_version",
                        d->has_baseline ? u64(d->baseline_version) : json_null());
    json_object_set_new(o, "action", json_string(d->action));
    json_object_set_new(o, "reason", json_string(d->reason ? d->reason : ""));
    json_object_set_new(o, "unix_ms", u64(d->unix_ms));
    json_object_set_new(rule, "metric", json_string(ru->metric ? ru->metric : ""));
    json_object_set_new(rule, "source", json_string(ru->source ? ru->source : ""));
    json_object_set_new(rule, "higher_is_better", json_boolean(ru->higher_is_better));
    json_object_set_new(rule, "baseline", json_string(ru->baseline ? ru->baseline : ""));
    json_object_set_new(rule, "baseline_window", json_integer(ru->baseline_window));
    json_object_set_new(rule, "tolerance", num(ru->tolerance));
    json_object_set_new(rule, "min_regions", json_integer(ru->min_regions));
    json_object_set_new(rule, "on_regression",
                        json_string(ru->on_regression ? ru->on_regression : ""));
    json_object_set_new(o, "rule", rule);
    return o;
}

static const char *made_name(int made)
{
    return made == FA_GOV_MADE_ROUND      ? "round"
           : made == FA_GOV_MADE_ROLLBACK ? "rollback"
                                          : "initial";
}

/* How a version was made (its record), for the card and its ancestry. */
static json_t *made_json(const fa_gov_version *v, const Fedagg__AuditRecord *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "by", json_string(made_name(v->made)));
    json_object_set_new(o, "record", v->made_at >= 0 ? json_integer(v->made_at) : json_null());
    json_object_set_new(o, "round", r ? u64(r->round) : json_null());
    json_object_set_new(o, "attempt", r ? json_integer(r->attempt) : json_null());
    json_object_set_new(o, "commit_unix_ms", r ? u64(r->commit_unix_ms) : json_null());
    json_object_set_new(o, "parent", v->made != FA_GOV_MADE_INITIAL ? u64(v->parent) : json_null());
    json_object_set_new(o, "restores",
                        v->made == FA_GOV_MADE_ROLLBACK ? u64(v->restored) : json_null());
    if (v->made == FA_GOV_MADE_ROLLBACK && r && r->rollback) {
        json_object_set_new(o, "by_operator",
                            r->rollback->operator_ && r->rollback->operator_[0]
                                ? json_string(r->rollback->operator_)
                                : json_null());
        json_object_set_new(o, "reason",
                            json_string(r->rollback->reason ? r->rollback->reason : ""));
    }
    return o;
}

static int build(fa_audit_log *log, const fa_audit_gov *g, uint64_t version,
                 const fa_audit_region_key *keys, size_t nkeys, json_t *moves, json_t *card,
                 fa_error *err)
{
    const fa_gov_version *v = fa_audit_gov_find(g, version);
    Fedagg__AuditRecord *made = NULL, *ev = NULL, *dec = NULL;
    json_t *anc = json_array(), *chans = json_array();
    int64_t ev_at = -1;
    int rc = 0;

    if (v->made_at >= 0 && !(made = read_record(log, (uint64_t)v->made_at, err)))
        return err->code ? err->code : FA_ERR_IO;
    if (v->decided_at >= 0) {
        ev_at = v->decided_at;
    } else if (v->trained_at >= 0) {
        ev_at = v->trained_at;
    }
    if (ev_at >= 0 && !(ev = read_record(log, (uint64_t)ev_at, err))) {
        rc = err->code ? err->code : FA_ERR_IO;
        goto out;
    }
    dec = v->decided_at >= 0 ? ev : NULL;
    json_object_set_new(card, "version", u64(version));
    json_object_set_new(card, "model_sha256", hex(v->sha256, 32));
    json_object_set_new(card, "made", made_json(v, made));
    if (made && v->made == FA_GOV_MADE_ROUND) {
        json_object_set_new(card, "regions", regions_json(made, keys, nkeys));
        json_object_set_new(card, "dropped", strings(made->dropped, made->n_dropped));
        json_object_set_new(card, "settings", settings_json(made));
    } else {
        json_object_set_new(card, "regions", json_array());
        json_object_set_new(card, "dropped", json_array());
        json_object_set_new(card, "settings", json_null());
    }
    if (made) {
        json_object_set_new(card, "config_digest",
                            hex(made->config_digest.data, made->config_digest.len));
        json_object_set_new(card, "tensor_table_digest",
                            hex(made->tensor_table_digest.data, made->tensor_table_digest.len));
        json_object_set_new(card, "num_params", u64(made->num_params));
        json_object_set_new(card, "num_tensors", u64(made->num_tensors));
        json_object_set_new(card, "software_version",
                            json_string(made->software_version ? made->software_version : ""));
    } else {
        json_object_set_new(card, "config_digest", json_null());
        json_object_set_new(card, "tensor_table_digest", json_null());
        json_object_set_new(card, "num_params", json_null());
        json_object_set_new(card, "num_tensors", json_null());
        json_object_set_new(card, "software_version", json_null());
    }
    json_object_set_new(card, "evaluations", ev ? evaluations_json(ev, ev_at) : json_null());
    json_object_set_new(card, "decision", dec ? decision_json(dec, v->decided_at) : json_null());
    json_object_set_new(
        card, "status",
        json_string(v->outcome == FA_PROMO_WAIT ? "candidate" : fa_promo_outcome_name(v->outcome)));
    for (size_t i = 0; i < fa_audit_gov_channels(g); i++) {
        const fa_gov_channel *c = fa_audit_gov_channel_at(g, i);
        json_t *o;
        if (c->version != version)
            continue;
        o = json_object();
        json_object_set_new(o, "channel", json_string(c->name));
        json_object_set_new(o, "record", json_integer(c->moved_at));
        json_object_set_new(o, "by", c->by[0] ? json_string(c->by) : json_null());
        json_array_append_new(chans, o);
    }
    json_object_set_new(card, "channels", chans);
    json_object_set_new(card, "releases", json_incref(moves));
    /* Ancestry: every version this one's weights descend from, back to
     * the initial model, with the regions whose updates made each. */
    for (const fa_gov_version *a = v; a && a->made != FA_GOV_MADE_INITIAL;) {
        uint64_t up = a->made == FA_GOV_MADE_ROLLBACK ? a->restored : a->parent;
        const fa_gov_version *p = fa_audit_gov_find(g, up);
        Fedagg__AuditRecord *pr = NULL;
        json_t *o;
        if (!p || p->version >= a->version)
            break;
        if (p->made_at >= 0 && !(pr = read_record(log, (uint64_t)p->made_at, err))) {
            rc = err->code ? err->code : FA_ERR_IO;
            goto out;
        }
        o = json_object();
        json_object_set_new(o, "version", u64(p->version));
        json_object_set_new(o, "made", json_string(made_name(p->made)));
        json_object_set_new(o, "record", p->made_at >= 0 ? json_integer(p->made_at) : json_null());
        json_object_set_new(o, "round", pr ? u64(pr->round) : json_null());
        json_object_set_new(o, "participants",
                            pr && p->made == FA_GOV_MADE_ROUND
                                ? strings(pr->participants, pr->n_participants)
                                : json_array());
        json_object_set_new(o, "status",
                            json_string(p->outcome == FA_PROMO_WAIT
                                            ? "candidate"
                                            : fa_promo_outcome_name(p->outcome)));
        json_array_append_new(anc, o);
        if (pr)
            fedagg__audit_record__free_unpacked(pr, NULL);
        a = p;
    }
    json_object_set_new(card, "ancestry", anc);
    anc = NULL;
out:
    json_decref(anc);
    if (made)
        fedagg__audit_record__free_unpacked(made, NULL);
    if (ev)
        fedagg__audit_record__free_unpacked(ev, NULL);
    return rc;
}

int fa_lineage_card_json(fa_audit_log *log, uint64_t version, const fa_audit_region_key *keys,
                         size_t nkeys, char **json, fa_error *err)
{
    struct first_problem prob = {0};
    fa_audit_gov *g = NULL;
    json_t *card = NULL, *moves = json_array();
    char *federation = NULL;
    uint64_t n = fa_audit_log_size(log);
    int rc;

    *json = NULL;
    if (!moves)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    rc = fa_audit_gov_new(&g, keys, nkeys, on_finding, &prob, err);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        Fedagg__AuditRecord *r = read_record(log, i, err);
        if (!r) {
            rc = err->code ? err->code : FA_ERR_CORRUPT;
            break;
        }
        if (!federation && r->federation_id)
            federation = strdup(r->federation_id);
        rc = fa_audit_gov_record(g, i, r);
        if (rc != 0)
            fa_errorf(err, rc, "out of memory");
        if (r->channel && r->channel->version == version) {
            json_t *o = json_object();
            json_object_set_new(o, "channel", json_string(r->channel->channel));
            json_object_set_new(o, "record", json_integer((json_int_t)i));
            json_object_set_new(o, "by",
                                r->channel->operator_ && r->channel->operator_[0]
                                    ? json_string(r->channel->operator_)
                                    : json_null());
            json_object_set_new(o, "unix_ms", u64(r->channel->unix_ms));
            json_array_append_new(moves, o);
        }
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    if (rc == 0 && prob.have)
        rc = fa_errorf(err, FA_ERR_VERIFY, "record %" PRId64 ": %s", prob.index, prob.msg);
    if (rc == 0 && !fa_audit_gov_find(g, version))
        rc = fa_errorf(err, FA_ERR_NOTFOUND,
                       "the audit log (%" PRIu64 " records) made no model "
                       "version %" PRIu64,
                       n, version);
    if (rc == 0 && !(card = json_object()))
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        json_object_set_new(card, "federation", json_string(federation ? federation : ""));
        json_object_set_new(card, "log_records", u64(n));
        rc = build(log, g, version, keys, nkeys, moves, card, err);
    }
    if (rc == 0 && !(*json = json_dumps(card, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    json_decref(card);
    json_decref(moves);
    free(federation);
    fa_audit_gov_del(g);
    return rc;
}
