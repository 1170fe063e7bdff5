/* fed_admin.c - operators' actions (pause, resume, abort, drain, admit) and their documents. */
#include "aggregator/federation_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/fed_gov.h"
#include "common/fa_hex.h"
#include "common/fa_time.h"

/* ------------------------------------------------------------------------ */
/* Operators                                                                 */
/* ------------------------------------------------------------------------ */

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
    rc = fa_fed_append_admin_record(f, op, "pause", NULL, why, err);
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
    rc = fa_fed_append_admin_record(f, op, "resume", NULL, "rounds open again", err);
    if (rc != 0)
        return rc;
    f->paused = 0;
    f->paused_by[0] = '\0';
    if (f->phase == FEDAGG__PHASE__PHASE_IDLE)
        fa_fed_open_gated(f, f->round, f->attempt, now_ms);
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
                         fa_fed_phase_name(f->phase));
    snprintf(why, sizeof(why), "aborted by operator %s", op);
    rc = fa_fed_append_admin_record(f, op, "abort", NULL, why, err);
    if (rc != 0)
        return rc;
    fa_fed_abort_attempt(f, now_ms, why);
    return 0;
}

int fa_fed_admin_drain(fa_fed *f, const char *op, const char *region, int drain, uint64_t now_ms,
                       fa_error *err)
{
    struct fa_fed_region *r = fa_fed_find_region(f, region);
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
    snprintf(why, sizeof(why),
             drain ? "region %s sits out from the next attempt on"
                   : "region %s takes part again from the next attempt on",
             r->id);
    rc = fa_fed_append_admin_record(f, op, drain ? "drain" : "admit", r->id, why, err);
    if (rc != 0)
        return rc;
    r->drained = drain;
    snprintf(r->drained_by, sizeof(r->drained_by), "%s", drain ? op : "");
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
        const struct fa_fed_region *r = &f->regions[i];
        json_t *o = json_object();
        double eps, delta, budget;
        if (!o)
            break;
        json_object_set_new(o, "id", json_string(r->id));
        json_object_set_new(o, "connected", json_boolean(fa_fed_region_connected(r, now_ms)));
        json_object_set_new(o, "last_seen_ms_ago",
                            r->last_seen_ms ? json_integer((json_int_t)(now_ms - r->last_seen_ms))
                                            : json_null());
        json_object_set_new(o, "drained", json_boolean(r->drained));
        if (r->drained)
            json_object_set_new(o, "drained_by", json_string(r->drained_by));
        /* its answer to the offer (docs/service.md): "" none yet */
        json_object_set_new(o, "decision",
                            json_string(r->decision > 0   ? "accepted"
                                        : r->decision < 0 ? "refused"
                                                          : ""));
        if (r->decision) {
            json_object_set_new(o, "decision_reason", json_string(r->decision_reason));
            json_object_set_new(o, "decision_unix_ms",
                                json_integer((json_int_t)r->decision_unix_ms));
        }
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
    json_t *a = json_array();
    for (size_t i = 0; a && i < fa_round_history_count(&f->hist); i++) {
        const fa_round_history_attempt *h = fa_round_history_at(&f->hist, i);
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
        if (h->seconds >= 0)
            json_object_set_new(o, "seconds", json_real(h->seconds));
        for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
            if (h->phase_s[k] >= 0)
                json_object_set_new(ph, fa_secagg_phase_names[k], json_real(h->phase_s[k]));
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
    for (size_t i = 0; a && i < fa_round_history_versions(&f->hist); i++) {
        const fa_round_history_eval *v = fa_round_history_version_at(&f->hist, i);
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
        fa_hex_encode(hex, sizeof(hex), mv.model_sha256, 32);
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
        int rc = fa_fed_status_json(f, now_ms, &base, err);
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
            json_object_set_new(
                o, "phase_deadline_unix_ms",
                json_integer((json_int_t)(fa_time_unix_ms() + fa_fed_next_deadline_in(f, now_ms))));
        json_object_set_new(o, "regions", regions_json(f, now_ms));
        json_object_set_new(o, "rounds", rounds_json(f));
        json_object_set_new(o, "versions", versions_json(f));
        json_object_set_new(o, "audit", audit_head_json(f, err));
        {
            char *g = NULL; /* the gate and the channels (fed_gov.h) */
            if (fa_fed_governance_json(f, &g, NULL) == 0)
                json_object_set_new(o, "governance", json_loads(g, 0, NULL));
            free(g);
        }
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
