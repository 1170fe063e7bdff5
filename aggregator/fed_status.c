/* fed_status.c - what the federation tells: FederationInfo, the status
 * document and its JSON, readiness and position. */
#include "aggregator/federation_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/fa_time.h"
#include "crypto/checkpoint.h"
#include "model/tensors.h"

/* ------------------------------------------------------------------------ */
/* Information                                                               */
/* ------------------------------------------------------------------------ */

int fa_fed_info(fa_fed *f, uint64_t now_ms, uint8_t **out, size_t *len, fa_error *err)
{
    Fedagg__FederationInfo fi = FEDAGG__FEDERATION_INFO__INIT;
    Fedagg__QuantParams q = FEDAGG__QUANT_PARAMS__INIT;
    Fedagg__DdpParams ddp;
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
    q.bits = f->sa_cfg.quant.bits; /* with distributed DP at most its ring's */
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
    if (f->ddp_on) {
        fa_fed_ddp_params_pb(f, &ddp);
        fi.ddp = &ddp;
    }
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

int fa_fed_status(fa_fed *f, uint64_t now_ms, uint8_t **out, size_t *len, fa_error *err)
{
    Fedagg__Status s = FEDAGG__STATUS__INIT;
    Fedagg__RegionStatus *rs = calloc(f->n_regions ? f->n_regions : 1, sizeof(*rs));
    Fedagg__RegionStatus **rsp = calloc(f->n_regions ? f->n_regions : 1, sizeof(*rsp));
    uint64_t now = now_ms;
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
        rs[i].connected = fa_fed_region_connected(&f->regions[i], now);
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
    fa_eval_reports_summary(f->feval, &fe);
    if (!fe.valid)
        fa_eval_reports_last(f->feval, &fe);
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

const char *fa_fed_phase_name(int phase)
{
    _Static_assert(FEDAGG__PHASE__PHASE_UNMASK - FEDAGG__PHASE__PHASE_ADVERTISE + 1 ==
                       FA_SECAGG_N_PHASES,
                   "the wire's phases are the secure-aggregation phases, in order");
    if (phase >= FEDAGG__PHASE__PHASE_ADVERTISE && phase <= FEDAGG__PHASE__PHASE_UNMASK)
        return fa_secagg_phase_names[phase - FEDAGG__PHASE__PHASE_ADVERTISE];
    return phase == FEDAGG__PHASE__PHASE_DONE ? "finished" : "idle";
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

int fa_fed_status_json(fa_fed *f, uint64_t now_ms, char **out, fa_error *err)
{
    json_t *o = json_object(), *regions = json_array();
    uint64_t now = now_ms;
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
    json_object_set_new(o, "phase", json_string(fa_fed_phase_name(f->phase)));
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
    if (f->ddp_on) {
        /* distributed DP: the settings and the region-level account of the
         * log's rounds (what every audit record's DdpRound says) */
        json_t *dj = json_object();
        if (dj) {
            json_object_set_new(dj, "noise_multiplier", json_real(f->ddp.cfg.noise_multiplier));
            json_object_set_new(dj, "clip", json_real(f->ddp.cfg.clip));
            json_object_set_new(dj, "min_regions", json_integer(f->ddp.cfg.min_regions));
            json_object_set_new(dj, "ring_bits", json_integer(f->ddp.ring_bits));
            json_object_set_new(dj, "delta", json_real(f->ddp_delta));
            json_object_set_new(dj, "rounds_accounted", json_integer((json_int_t)f->ddp_rounds));
            if (f->ddp_rounds) {
                json_object_set_new(dj, "epsilon_total", json_real(f->ddp_eps_total));
                json_object_set_new(dj, "noisy_contributions_last", json_integer(f->ddp_noisy));
            }
            json_object_set_new(o, "distributed_dp", dj);
        }
    }
    {
        fa_eval_summary fe;
        fa_eval_reports_summary(f->feval, &fe);
        if (!fe.valid)
            fa_eval_reports_last(f->feval, &fe);
        if (fe.valid)
            json_object_set_new(o, "federated_eval", summary_json(&fe));
        if (f->central.valid)
            json_object_set_new(o, "central_eval", summary_json(&f->central));
    }
    for (size_t i = 0; i < f->n_regions; i++) {
        const struct fa_fed_region *r = &f->regions[i];
        json_t *ro = json_object();
        if (!ro)
            continue;
        json_object_set_new(ro, "id", json_string(r->id));
        json_object_set_new(ro, "connected", json_boolean(fa_fed_region_connected(r, now)));
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

int fa_fed_ready(const fa_fed *f, uint64_t now_ms, char *why, size_t n)
{
    if (f->audit_damaged) {
        snprintf(why, n,
                 "the audit log is damaged (%s): no round opens; stop the aggregator and run "
                 "fedagg audit repair (docs/operations.md)",
                 f->audit_damage);
        return 0;
    }
    if (f->fatal) {
        snprintf(why, n,
                 "a committed round could not be recorded in the audit log: restart to "
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
    return fa_eval_reports_count(f->feval);
}

int fa_fed_finished(const fa_fed *f)
{
    return f->phase == FEDAGG__PHASE__PHASE_DONE;
}

int fa_fed_fatal(const fa_fed *f)
{
    return f->fatal;
}

const char *fa_fed_id(const fa_fed *f)
{
    return f->federation_id;
}

int fa_fed_paused(const fa_fed *f)
{
    return f->paused;
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
