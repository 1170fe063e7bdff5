/* fed_open.c - opening a federation from its config and storage (members, signer,
 * model, the round restored, the audit log replayed), and closing it. */
#include "aggregator/federation_internal.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/memory_budget.h"
#include "aggregator/metrics.h"
#include "audit.pb-c.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "common/fa_time.h"
#include "crypto/checkpoint.h"
#include "model/tensors.h"

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

static int replay_audit_log(fa_fed *f, fa_error *err);

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
        struct fa_fed_region *r = &f->regions[i];
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
    qsort(f->regions, f->n_regions, sizeof(*f->regions), fa_fed_cmp_region);
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

    if (!path || !path[0])
        return fa_errorf(err, FA_ERR_INVAL, "config: audit.signing_key_file is required");
    return fa_fed_signer_load(path, origin, &f->signer, err);
}

int fa_fed_signer_load(const char *path, const char *origin, fa_note_signer **out, fa_error *err)
{
    uint8_t *data = NULL, seed[32];
    size_t len = 0;
    int rc;

    *out = NULL;
    rc = fa_file_check_private(path, err);
    if (rc != 0)
        return rc;
    rc = fa_file_read_all(path, &data, &len, 1 << 16, err);
    if (rc != 0)
        return rc;
    /* `fedagg keygen` files first, then the raw and Go note key forms. */
    if (fa_identity_parse_secret(data, len, seed, NULL) == 0) {
        rc = fa_note_signer_new(out, origin, seed, sizeof(seed), err);
        sodium_memzero(seed, sizeof(seed));
    } else {
        rc = fa_note_signer_parse(out, origin, data, len, err);
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
    /* An operator's action (or a region's decision) names the round in
     * flight: the last completed round is that of the last aggregation
     * before it. */
    while (fa_audit_record_is_action(r) && n > 1) {
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
        f->last_round = fa_audit_record_is_action(r) ? 0 : r->round;
    }
    if (fa_audit_record_is_action(r))
        f->last_round = 0;
    fedagg__audit_record__free_unpacked(r, NULL);
    return 0;
}

/* The evaluation reports, ranges digest and evaluator result saved with
 * a round state based on the version that feval collects for. */
static void restore_round_extras(fa_fed *f, const Fedagg__RoundState *st)
{
    size_t kept = 0;
    for (size_t i = 0; i < st->n_evaluations; i++) {
        fa_error e;
        fa_error_clear(&e);
        if (fa_eval_reports_restore(f->feval, st->evaluations[i], &e) == 0)
            kept++;
        else
            fa_log(FA_LOG_WARN, "a saved evaluation report was refused", "error=\"%s\"", e.msg);
    }
    if (st->ranges_sha256.len == 32)
        memcpy(f->round_ranges_sha, st->ranges_sha256.data, 32);
    fa_fed_gov_restore_data(f, st);
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
                             "version %" PRIu64 " and there is no round state to repair it from "
                             "(`fedagg audit repair LOG --pubkey KEY --store %s` takes the store "
                             "back to the log's version, docs/operations.md)",
                             f->cur.version, audited, f->storage_dir);
        fa_fed_open_gated(f, (f->cur.round > f->last_round ? f->cur.round : f->last_round) + 1, 0,
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
    f->attempt_opened_ms = now_ms;
    f->sa_cfg.round = st->round;
    f->sa_cfg.attempt = st->attempt;

    if (f->cur.version == audited + 1 && st->phase == FEDAGG__PHASE__PHASE_DONE &&
        st->base_version == audited) {
        /* Died between the model commit and the audit append. */
        uint8_t prev_sha[32];
        char path[4096];
        fa_safetensors *mst = NULL;
        const char *prev_hex;
        rc = fa_fed_restore_secagg(f, st, err);
        if (rc == 0) {
            fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
            rc = fa_st_open(&mst, path, err);
        }
        if (rc == 0) {
            prev_hex = fa_st_metadata_get(mst, "fedagg.prev_sha256");
            if (!prev_hex || fa_hex_decode(prev_sha, 32, prev_hex, strlen(prev_hex)) != 0)
                rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: no fedagg.prev_sha256 metadata", path);
            fa_st_del(mst);
        }
        if (rc == 0) {
            /* The record is of the round that started from the previous
             * version: its reports and ranges are in the state. */
            fa_eval_reports_begin(f->feval, st->base_version, prev_sha);
            restore_round_extras(f, st);
        }
        if (rc == 0) {
            fa_log(FA_LOG_WARN,
                   "repairing the audit log: the last round was committed but not "
                   "recorded",
                   "round=%" PRIu64 " version=%" PRIu64, f->round, f->cur.version);
            rc = fa_fed_append_record(f, audited, prev_sha, fa_time_unix_ms(), err);
        }
        if (rc == 0) {
            f->rounds_completed++;
            fa_fed_count_outcome(f, "completed");
            fa_log(FA_LOG_INFO, "round completed",
                   "round=%" PRIu64 " attempt=%u version=%" PRIu64 " participants=%zu dropped=%zu "
                   "repaired=1",
                   f->round, f->attempt, f->cur.version, fa_secagg_server_survivor_count(f->sa),
                   fa_secagg_server_dropout_count(f->sa));
            fa_fed_version_changed(f, now_ms);
            fa_fed_evaluate(f);
            rc = fa_fed_open_next_round(f, now_ms, err);
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
        fa_fed_open_gated(f, next, 0, now_ms);
        return 0;
    }
    if (f->cur.version != audited || st->base_version != f->cur.version) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "model store at version %" PRIu64 ", audit log at version %" PRIu64
                       ", round state based on version %" PRIu64
                       ": they do not fit together (a log repaired back to an earlier "
                       "checkpoint? `fedagg audit repair LOG --pubkey KEY --store %s` takes "
                       "the store back to the log's version, docs/operations.md)",
                       f->cur.version, audited, st->base_version, f->storage_dir);
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
        rc = fa_fed_restore_secagg(f, st, err);
        fedagg__round_state__free_unpacked(st, NULL);
        if (rc != 0)
            return fa_error_prefix(err, rc, "%s", f->state_path);
        f->phase = FEDAGG__PHASE__PHASE_DONE;
        fa_log(FA_LOG_WARN, "completing the round whose result was saved but not committed",
               "round=%" PRIu64 " attempt=%u", f->round, f->attempt);
        return fa_fed_finish_round(f, now_ms, &committed, err);
    }
    if (st->phase == FEDAGG__PHASE__PHASE_ADVERTISE || st->secagg_server.len == 0) {
        uint64_t r = st->round;
        uint32_t a = st->attempt;
        fedagg__round_state__free_unpacked(st, NULL);
        fa_log(FA_LOG_INFO, "resuming the round in flight",
               "round=%" PRIu64 " attempt=%u phase=advertise", r, a);
        fa_fed_open_gated(f, r, a, now_ms);
        return 0;
    }
    rc = fa_fed_restore_secagg(f, st, err);
    if (rc != 0) {
        fedagg__round_state__free_unpacked(st, NULL);
        return fa_error_prefix(err, rc, "%s", f->state_path);
    }
    {
        /* a phase in flight, the one its secure-aggregation state is in */
        fa_secagg_server_status sst;
        fa_secagg_server_status_get(f->sa, &sst);
        if (st->phase < FEDAGG__PHASE__PHASE_SHARES || st->phase > FEDAGG__PHASE__PHASE_UNMASK ||
            sst.phase != (int)st->phase - FEDAGG__PHASE__PHASE_ADVERTISE) {
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: round %" PRIu64 " is saved in phase %d, its secure-aggregation "
                           "state in phase %s",
                           f->state_path, st->round, (int)st->phase,
                           fa_secagg_phase_name(sst.phase));
            fedagg__round_state__free_unpacked(st, NULL);
            return rc;
        }
    }
    f->phase = st->phase;
    f->phase_opened_ms = now_ms;
    fa_fed_reset_region_attempt(f);
    /* Regions whose uploads were summed before the save keep them. */
    if (f->phase > FEDAGG__PHASE__PHASE_MASKED)
        for (size_t i = 0; i < fa_secagg_server_survivor_count(f->sa); i++) {
            struct fa_fed_region *r = fa_fed_find_region(f, fa_secagg_server_survivor(f->sa, i));
            if (r)
                r->uploaded = 1;
        }
    fa_log(FA_LOG_INFO, "resuming the round in flight", "round=%" PRIu64 " attempt=%u phase=%s",
           f->round, f->attempt, fa_fed_phase_name(f->phase));
    fedagg__round_state__free_unpacked(st, NULL);
    fa_fed_update_gauges(f);
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
    fa_fed_open_opts o = {0};
    o.metrics = metrics;
    return fa_fed_open_ex(out, cfg, &o, now_ms, err);
}

uint64_t fa_fed_memory_need(const fa_fed *f)
{
    return f->memory_need;
}

int fa_fed_open_ex(fa_fed **out, const Fedagg__AggregatorConfig *cfg, const fa_fed_open_opts *o,
                   uint64_t now_ms, fa_error *err)
{
    static const fa_fed_open_opts no_opts = {0};
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
    uint64_t vector_len;
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
    if (!o)
        o = &no_opts;
    f->metrics = o->metrics;
    if (fa_round_history_init(&f->hist, FA_FED_HISTORY) != 0) {
        free(f);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    f->federation_id = strdup(cfg->federation_id ? cfg->federation_id : "fedagg");
    if (o->metrics_label && f->federation_id)
        fa_metrics_label(f->mlabels, sizeof(f->mlabels), "federation", f->federation_id);
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
        f->quant.clip_mode =
            q->clip == FEDAGG__CLIP_MODE__CLIP_NONE ? FA_SECAGG_CLIP_COORDINATE : (int)q->clip;
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
        const char *meta0[] = {"format",        "pt", "fedagg.version", "0", "fedagg.federation",
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
    /* Distributed DP replaces the codec: its own ring, over the rotated
     * (padded) dimension plus the count. */
    rc = fa_fed_ddp_open(f, cfg, err);
    if (rc != 0)
        goto fail;
    vector_len = f->ddp_on ? fa_ddg_vector_len(&f->ddp) : (uint64_t)f->d + 1;
    if (f->ddp_on)
        ring_bits = f->ddp.ring_bits;
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
                             fa_secagg_masked_bytes(vector_len, ring_bits), fa_fed_journal_memory(),
                             &need);
        if (f->ddp_on) {
            /* the sum is of the rotated dimension, and its decode holds a
             * copy of the ring sum and the decoded mean beside it */
            uint64_t extra = 3 * 4 * vector_len - need.sum;
            need.sum += extra;
            need.total = need.sum + need.step + need.uploads;
            if (need.initial > need.total)
                need.total = need.initial;
        }
        /* this federation's share, beside the others' */
        f->memory_need = need.total;
        /* the transport's budget of request bodies held while received:
         * the process's, counted once */
        fa_memory_add_requests(&need, cfg->quic ? cfg->quic->max_buffered_request_bytes
                                                : o->memory_requests);
        rc = fa_memory_limit(cfg->memory_limit_bytes, &limit, &source, err);
        if (rc == 0)
            rc =
                fa_memory_check_beside(&need, o->memory_used, o->memory_others, limit, source, err);
        if (rc == 0)
            rc = fa_upload_journal_new(&f->journal, f->storage_dir, in_flight,
                                       fa_secagg_masked_bytes(vector_len, ring_bits),
                                       fa_fed_journal_memory(), err);
        if (rc != 0)
            goto fail;
        fa_log(FA_LOG_INFO, "memory budget", "need_mib=%.1f limit_mib=%.1f source=\"%s\"",
               (double)need.total / 1048576.0, (double)limit / 1048576.0, source);
    }

    /* The config digest that every record names: the configuration's
     * binary encoding followed by the tensor table's digest, so that the
     * model's tensors (not only the file naming them) are bound too.  The
     * service's parts (its block, its operators and teams) are the process's, not
     * the federation's: a config without them digests as it always did. */
    {
        Fedagg__AggregatorConfig own = *cfg;
        own.service = NULL;
        own.n_operators = 0;
        own.operators = NULL;
        own.n_teams = 0;
        own.teams = NULL;
        enc_len = fedagg__aggregator_config__get_packed_size(&own);
        enc = malloc(enc_len + 32);
        if (!enc) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        fedagg__aggregator_config__pack(&own, enc);
    }
    memcpy(enc + enc_len, fa_global_model_digest(f->model), 32);
    rc = fa_sha256(f->config_digest, enc, enc_len + 32);
    free(enc);
    if (rc != 0) {
        fa_errorf(err, rc, "the config digest: SHA-256 failed");
        goto fail;
    }

    /* Federated evaluation and the evaluator command. */
    {
        fa_eval_reports_member *fm = calloc(f->n_regions ? f->n_regions : 1, sizeof(*fm));
        if (!fm) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < f->n_regions; i++) {
            fm[i].id = f->regions[i].id;
            memcpy(fm[i].pk, f->regions[i].pk, 32);
        }
        rc = fa_eval_reports_new(&f->feval, f->federation_id, fm, f->n_regions,
                                 cfg->evaluation ? cfg->evaluation->max_region_examples : 0, err);
        if (rc == 0)
            rc = fa_privacy_ledger_new(&f->privacy, f->federation_id, fm, f->n_regions, err);
        free(fm);
        if (rc != 0)
            goto fail;
        fa_eval_reports_begin(f->feval, f->cur.version, f->cur.model_sha256);
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
        if (rc == FA_ERR_CORRUPT || rc == FA_ERR_VERIFY)
            fa_errorf(err, rc,
                      "%s; to recover to its last signed checkpoint (the damaged files are "
                      "kept): fedagg audit repair %s --pubkey <the aggregator's key> --store %s "
                      "(docs/operations.md)",
                      err->msg, path, cfg->storage->dir);
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
    f->sa_cfg.vector_len = vector_len;
    f->sa_cfg.ring_bits = ring_bits;
    f->sa_cfg.quant = f->quant;
    /* with distributed DP the float codec is not used (fed_ddp.c decodes) */
    if (f->ddp_on && f->sa_cfg.quant.bits > ring_bits)
        f->sa_cfg.quant.bits = ring_bits;
    rc = fa_secagg_config_check(&f->sa_cfg, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "config");
        goto fail;
    }
    fa_fed_define_metrics(f);
    rc = fa_fed_gov_open(f, cfg, err); /* fed_gov.c */
    if (rc != 0)
        goto fail;
    rc = restore_round(f, now_ms, err);
    if (rc != 0)
        goto fail;
    fa_fed_evaluate(f);
    if (f->evaluator) {
        fa_model_store_model_path(f->store, f->cur.version, path, sizeof(path));
        fa_evaluator_request(f->evaluator, f->cur.version, path, now_ms);
    }
    fa_fed_update_gauges(f);
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
    fa_fed_gov_close(f);
    fa_audit_log_close(f->audit);
    fa_note_signer_del(f->signer);
    fa_model_store_del(f->store);
    fa_global_model_del(f->model);
    fa_eval_reports_del(f->feval);
    fa_privacy_ledger_del(f->privacy);
    fa_fed_ddp_free(f);
    fa_round_history_free(&f->hist);
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
        if (r->decision) {
            fa_fed_decision_replay(f, r);
        } else if (r->admin) {
            const Fedagg__AdminAction *a = r->admin;
            struct fa_fed_region *rg = fa_fed_find_region(f, a->region);
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
        } else if ((rc = fa_fed_ddp_replay(f, r, err)) != 0) {
            fedagg__audit_record__free_unpacked(r, NULL);
            return rc;
        }
        if (!fa_audit_record_is_action(r) && n - i <= FA_FED_HISTORY) {
            fa_round_history_attempt a;
            char *parts = NULL, *drops = NULL;
            size_t pn = 0, dn = 0;
            FILE *pf = open_memstream(&parts, &pn), *df = open_memstream(&drops, &dn);
            memset(&a, 0, sizeof(a));
            a.round = r->round;
            a.attempt = r->attempt;
            a.completed = 1;
            a.start_unix_ms = r->start_unix_ms;
            a.end_unix_ms = r->commit_unix_ms;
            /* the log holds wall-clock stamps only: no duration when they
             * went backwards */
            a.seconds = a.end_unix_ms >= a.start_unix_ms
                            ? (double)(a.end_unix_ms - a.start_unix_ms) / 1000.0
                            : -1;
            for (int k = 0; k < FA_SECAGG_N_PHASES; k++)
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
            fa_round_history_add(&f->hist, &a);
            free(parts);
            free(drops);
            if (r->federated_eval) {
                fa_round_history_eval *ve =
                    fa_round_history_version(&f->hist, r->federated_eval->model_version);
                if (ve) {
                    ve->federated_accuracy = r->federated_eval->accuracy;
                    ve->federated_regions = r->federated_eval->regions;
                }
            }
            if (r->central_eval) {
                fa_round_history_eval *ve =
                    fa_round_history_version(&f->hist, r->central_eval->model_version);
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
            fa_log(FA_LOG_INFO, "region stays drained", "region=%s drained_by=%s", f->regions[i].id,
                   f->regions[i].drained_by);
    return 0;
}
