/* audit_cli.c - record display and key arguments of `fedagg audit`. */
#include "tools/audit_cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "config.pb-c.h"
#include "proto/config_check.h"

void fa_audit_cli_time(uint64_t unix_ms, char buf[32])
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(buf, 32, "%" PRIu64 "ms", unix_ms);
        return;
    }
    snprintf(buf, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(unix_ms % 1000));
}

static json_t *hex_json(const uint8_t *p, size_t n)
{
    char *s = malloc(2 * n + 1);
    json_t *j;
    if (!s)
        return NULL;
    fa_hex_encode(s, 2 * n + 1, p, n);
    j = json_string(s);
    free(s);
    return j;
}

static json_t *b64_json(const uint8_t *p, size_t n)
{
    size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *s = malloc(cap);
    json_t *j;
    if (!s)
        return NULL;
    sodium_bin2base64(s, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
    j = json_string(s);
    free(s);
    return j;
}

static json_t *str_array(char **v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i] ? v[i] : ""));
    return a;
}

static json_t *time_json(uint64_t ms)
{
    char buf[32];
    fa_audit_cli_time(ms, buf);
    return json_string(buf);
}

json_t *fa_audit_cli_record_json(const Fedagg__AuditRecord *r, uint64_t index,
                                 const uint8_t leaf_hash[FA_MERKLE_HASH_LEN], int is_signed)
{
    json_t *o = json_object(), *cs = json_array();
    if (!o || !cs) {
        json_decref(o);
        json_decref(cs);
        return NULL;
    }
    json_object_set_new(o, "index", json_integer((json_int_t)index));
    json_object_set_new(o, "leaf_hash", hex_json(leaf_hash, FA_MERKLE_HASH_LEN));
    json_object_set_new(o, "signed", json_boolean(is_signed));
    json_object_set_new(o, "version", json_integer(r->version));
    json_object_set_new(o, "federation", json_string(r->federation_id ? r->federation_id : ""));
    json_object_set_new(o, "round", json_integer((json_int_t)r->round));
    json_object_set_new(o, "attempt", json_integer(r->attempt));
    json_object_set_new(o, "start_time", time_json(r->start_unix_ms));
    json_object_set_new(o, "commit_time", time_json(r->commit_unix_ms));
    json_object_set_new(o, "start_unix_ms", json_integer((json_int_t)r->start_unix_ms));
    json_object_set_new(o, "commit_unix_ms", json_integer((json_int_t)r->commit_unix_ms));
    json_object_set_new(o, "config_digest", hex_json(r->config_digest.data, r->config_digest.len));
    json_object_set_new(o, "participants", str_array(r->participants, r->n_participants));
    json_object_set_new(o, "dropped", str_array(r->dropped, r->n_dropped));
    for (size_t i = 0; i < r->n_commitments; i++) {
        const Fedagg__RegionCommitment *c = r->commitments[i];
        json_t *cj = json_object();
        if (!cj)
            break;
        json_object_set_new(cj, "region", json_string(c->region ? c->region : ""));
        json_object_set_new(cj, "upload_digest",
                            hex_json(c->upload_digest.data, c->upload_digest.len));
        json_object_set_new(cj, "upload_digest_alg", json_string(fa_audit_upload_alg_name(c)));
        json_object_set_new(cj, "upload_bytes", json_integer((json_int_t)c->upload_bytes));
        json_object_set_new(cj, "signature", b64_json(c->signature.data, c->signature.len));
        json_array_append_new(cs, cj);
    }
    json_object_set_new(o, "commitments", cs);
    if (r->n_share_faults) {
        json_t *fs = json_array();
        for (size_t i = 0; fs && i < r->n_share_faults; i++) {
            const Fedagg__ShareFault *sf = r->share_faults[i];
            json_t *fj = json_object();
            if (!fj)
                break;
            json_object_set_new(fj, "region", json_string(sf->region ? sf->region : ""));
            json_object_set_new(fj, "owner", json_string(sf->owner ? sf->owner : ""));
            json_object_set_new(fj, "secret", json_string(sf->secret ? sf->secret : ""));
            json_array_append_new(fs, fj);
        }
        json_object_set_new(o, "share_faults", fs);
    }
    json_object_set_new(o, "prev_version", json_integer((json_int_t)r->prev_version));
    json_object_set_new(o, "new_version", json_integer((json_int_t)r->new_version));
    json_object_set_new(o, "prev_model_sha256",
                        hex_json(r->prev_model_sha256.data, r->prev_model_sha256.len));
    json_object_set_new(o, "new_model_sha256",
                        hex_json(r->new_model_sha256.data, r->new_model_sha256.len));
    if (r->optimizer) {
        json_t *oj = json_object();
        json_object_set_new(oj, "kind", json_string(r->optimizer->kind ? r->optimizer->kind : ""));
        json_object_set_new(oj, "learning_rate", json_real(r->optimizer->learning_rate));
        json_object_set_new(oj, "momentum", json_real(r->optimizer->momentum));
        json_object_set_new(oj, "beta1", json_real(r->optimizer->beta1));
        json_object_set_new(oj, "beta2", json_real(r->optimizer->beta2));
        json_object_set_new(oj, "tau", json_real(r->optimizer->tau));
        json_object_set_new(o, "optimizer", oj);
    }
    if (r->quantization) {
        const Fedagg__QuantizationSettings *q = r->quantization;
        json_t *qj = json_object();
        json_object_set_new(qj, "bits", json_integer(q->bits));
        json_object_set_new(qj, "ring_bits", json_integer(q->ring_bits));
        json_object_set_new(qj, "clip_mode", json_string(q->clip_mode ? q->clip_mode : ""));
        json_object_set_new(qj, "clip_l2_norm", json_real(q->clip_l2_norm));
        json_object_set_new(qj, "clip_value", json_real(q->clip_value));
        json_object_set_new(qj, "max_examples", json_integer((json_int_t)q->max_examples));
        if (q->range && q->range[0])
            json_object_set_new(qj, "range", json_string(q->range));
        if (q->ranges_sha256.len)
            json_object_set_new(qj, "ranges_sha256",
                                hex_json(q->ranges_sha256.data, q->ranges_sha256.len));
        json_object_set_new(o, "quantization", qj);
    }
    if (r->ddp && r->ddp->params) {
        const Fedagg__DdpParams *p = r->ddp->params;
        json_t *dj = json_object();
        json_object_set_new(dj, "clip", json_real(p->clip));
        json_object_set_new(dj, "noise_multiplier", json_real(p->noise_multiplier));
        json_object_set_new(dj, "min_regions", json_integer(p->min_regions));
        json_object_set_new(dj, "bits", json_integer(p->bits));
        json_object_set_new(dj, "granularity", json_real(p->granularity));
        json_object_set_new(dj, "sigma2", json_real(p->sigma2));
        json_object_set_new(dj, "l2_bound", json_real(p->l2_bound));
        json_object_set_new(dj, "padded_dim", json_integer((json_int_t)p->padded_dim));
        json_object_set_new(dj, "ring_bits", json_integer(p->ring_bits));
        json_object_set_new(dj, "noisy_contributions", json_integer(r->ddp->noisy_contributions));
        json_object_set_new(dj, "epsilon_round", json_real(r->ddp->epsilon_round));
        json_object_set_new(dj, "epsilon_total", json_real(r->ddp->epsilon_total));
        json_object_set_new(dj, "delta", json_real(r->ddp->delta));
        json_object_set_new(dj, "rounds_accounted",
                            json_integer((json_int_t)r->ddp->rounds_accounted));
        json_object_set_new(o, "distributed_dp", dj);
    }
    if (r->tensor_table_digest.len) {
        json_object_set_new(o, "tensor_table_digest",
                            hex_json(r->tensor_table_digest.data, r->tensor_table_digest.len));
        json_object_set_new(o, "num_tensors", json_integer((json_int_t)r->num_tensors));
    }
    if (r->n_evaluations || r->federated_eval) {
        json_t *ev = json_array();
        for (size_t i = 0; ev && i < r->n_evaluations; i++) {
            const Fedagg__SignedEval *se = r->evaluations[i];
            Fedagg__EvalStatement *st =
                fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
            json_t *e = json_object();
            if (!e)
                break;
            if (st) {
                json_object_set_new(e, "region", json_string(st->region ? st->region : ""));
                json_object_set_new(e, "model_version",
                                    json_integer((json_int_t)st->model_version));
                json_object_set_new(e, "num_examples", json_integer((json_int_t)st->num_examples));
                json_object_set_new(e, "loss", json_real(st->loss));
                json_object_set_new(e, "accuracy", json_real(st->accuracy));
                fedagg__eval_statement__free_unpacked(st, NULL);
            }
            json_object_set_new(e, "signature", b64_json(se->signature.data, se->signature.len));
            json_array_append_new(ev, e);
        }
        json_object_set_new(o, "evaluations", ev);
    }
    if (r->federated_eval) {
        json_t *fe = json_object();
        json_object_set_new(fe, "model_version",
                            json_integer((json_int_t)r->federated_eval->model_version));
        json_object_set_new(fe, "regions", json_integer(r->federated_eval->regions));
        json_object_set_new(fe, "num_examples",
                            json_integer((json_int_t)r->federated_eval->num_examples));
        json_object_set_new(fe, "loss", json_real(r->federated_eval->loss));
        json_object_set_new(fe, "accuracy", json_real(r->federated_eval->accuracy));
        json_object_set_new(o, "federated_eval", fe);
    }
    if (r->admin) {
        json_t *aj = json_object();
        json_object_set_new(aj, "operator",
                            json_string(r->admin->operator_ ? r->admin->operator_ : ""));
        json_object_set_new(aj, "action", json_string(r->admin->action ? r->admin->action : ""));
        if (r->admin->region && r->admin->region[0])
            json_object_set_new(aj, "region", json_string(r->admin->region));
        json_object_set_new(aj, "reason", json_string(r->admin->reason ? r->admin->reason : ""));
        json_object_set_new(aj, "unix_ms", json_integer((json_int_t)r->admin->unix_ms));
        json_object_set_new(o, "admin", aj);
    }
    if (r->decision) {
        Fedagg__RegionDecision *d = fedagg__region_decision__unpack(
            NULL, r->decision->statement.len, r->decision->statement.data);
        json_t *dj = json_object();
        if (d) {
            json_object_set_new(dj, "region", json_string(d->region ? d->region : ""));
            json_object_set_new(dj, "accept", json_boolean(d->accept));
            json_object_set_new(dj, "reason", json_string(d->reason ? d->reason : ""));
            json_object_set_new(dj, "unix_ms", json_integer((json_int_t)d->unix_ms));
            fedagg__region_decision__free_unpacked(d, NULL);
        } else {
            json_object_set_new(dj, "error", json_string("the statement does not decode"));
        }
        json_object_set_new(dj, "signature",
                            b64_json(r->decision->signature.data, r->decision->signature.len));
        json_object_set_new(o, "decision", dj);
    }
    if (r->lifecycle) {
        const Fedagg__FederationLifecycle *l = r->lifecycle;
        json_t *lj = json_object();
        json_object_set_new(lj, "operator", json_string(l->operator_ ? l->operator_ : ""));
        json_object_set_new(lj, "action", json_string(l->action ? l->action : ""));
        json_object_set_new(lj, "team", json_string(l->team ? l->team : ""));
        if (l->config.len) {
            json_object_set_new(lj, "config_name",
                                json_string(l->config_name ? l->config_name : ""));
            json_object_set_new(lj, "config_sha256",
                                hex_json(l->config_sha256.data, l->config_sha256.len));
            json_object_set_new(lj, "config",
                                json_stringn((const char *)l->config.data, l->config.len));
        }
        json_object_set_new(lj, "reason", json_string(l->reason ? l->reason : ""));
        json_object_set_new(lj, "unix_ms", json_integer((json_int_t)l->unix_ms));
        json_object_set_new(o, "lifecycle", lj);
    }
    /* Governance of released models (audit/audit_gov.h). */
    if (r->promotion) {
        const Fedagg__PromotionDecision *d = r->promotion;
        json_t *pj = json_object();
        json_object_set_new(pj, "outcome", json_string(d->outcome ? d->outcome : ""));
        json_object_set_new(pj, "metric",
                            json_string(d->rule && d->rule->metric ? d->rule->metric : ""));
        json_object_set_new(pj, "value", isfinite(d->value) ? json_real(d->value) : json_null());
        json_object_set_new(pj, "regions", json_integer(d->regions));
        json_object_set_new(pj, "baseline", d->has_baseline ? json_real(d->baseline) : json_null());
        if (d->has_baseline)
            json_object_set_new(pj, "baseline_version",
                                json_integer((json_int_t)d->baseline_version));
        json_object_set_new(pj, "action", json_string(d->action ? d->action : ""));
        json_object_set_new(pj, "reason", json_string(d->reason ? d->reason : ""));
        json_object_set_new(o, "promotion", pj);
    }
    if (r->rollback) {
        json_t *bj = json_object();
        json_object_set_new(bj, "to_version", json_integer((json_int_t)r->rollback->to_version));
        json_object_set_new(bj, "rejected_version",
                            json_integer((json_int_t)r->rollback->rejected_version));
        json_object_set_new(bj, "operator",
                            json_string(r->rollback->operator_ ? r->rollback->operator_ : ""));
        json_object_set_new(bj, "reason",
                            json_string(r->rollback->reason ? r->rollback->reason : ""));
        json_object_set_new(o, "rollback", bj);
    }
    if (r->channel) {
        json_t *cj = json_object();
        json_object_set_new(cj, "channel",
                            json_string(r->channel->channel ? r->channel->channel : ""));
        json_object_set_new(cj, "version", json_integer((json_int_t)r->channel->version));
        json_object_set_new(cj, "operator",
                            json_string(r->channel->operator_ ? r->channel->operator_ : ""));
        json_object_set_new(o, "channel", cj);
    }
    json_object_set_new(o, "data_statements", json_integer((json_int_t)r->n_data_statements));
    if (r->central_eval) {
        json_t *ce = json_object();
        json_object_set_new(ce, "model_version",
                            json_integer((json_int_t)r->central_eval->model_version));
        json_object_set_new(ce, "num_examples",
                            json_integer((json_int_t)r->central_eval->num_examples));
        json_object_set_new(ce, "loss", json_real(r->central_eval->loss));
        json_object_set_new(ce, "accuracy", json_real(r->central_eval->accuracy));
        json_object_set_new(o, "central_eval", ce);
    }
    json_object_set_new(o, "threshold", json_integer(r->threshold));
    json_object_set_new(o, "neighbours", json_integer(r->neighbours));
    json_object_set_new(o, "num_params", json_integer((json_int_t)r->num_params));
    json_object_set_new(o, "software_version",
                        json_string(r->software_version ? r->software_version : ""));
    return o;
}

void fa_audit_cli_table_header(FILE *out)
{
    fprintf(out, "%7s %7s %4s  %-24s  %-13s %-28s %s\n", "INDEX", "ROUND", "ATT", "COMMITTED (UTC)",
            "MODEL", "REGIONS (dropped)", "NEW MODEL SHA-256");
}

void fa_audit_cli_table_row(FILE *out, const Fedagg__AuditRecord *r, uint64_t index, int is_signed)
{
    char when[32], ver[48], regions[256], digest[16] = "-";
    size_t n = 0;

    fa_audit_cli_time(r->commit_unix_ms, when);
    snprintf(ver, sizeof(ver), "%" PRIu64 "->%" PRIu64, r->prev_version, r->new_version);
    regions[0] = 0;
    if (r->admin) /* an operator's action: who did what */
        n += (size_t)snprintf(regions, sizeof(regions), "operator %s: %s%s%s",
                              r->admin->operator_ ? r->admin->operator_ : "?",
                              r->admin->action ? r->admin->action : "?",
                              r->admin->region && r->admin->region[0] ? " " : "",
                              r->admin->region ? r->admin->region : "");
    if (r->lifecycle) /* the service log: who did what to which federation */
        n += (size_t)snprintf(regions, sizeof(regions), "operator %s: %s %s",
                              r->lifecycle->operator_ ? r->lifecycle->operator_ : "?",
                              r->lifecycle->action ? r->lifecycle->action : "?", r->federation_id);
    if (r->decision) {
        Fedagg__RegionDecision *d = fedagg__region_decision__unpack(
            NULL, r->decision->statement.len, r->decision->statement.data);
        n += (size_t)snprintf(regions, sizeof(regions), "region %s: %s",
                              d && d->region ? d->region : "?",
                              !d          ? "?"
                              : d->accept ? "accepts"
                                          : "refuses");
        if (d)
            fedagg__region_decision__free_unpacked(d, NULL);
    } else if (r->promotion) /* the gate's decision on the current model */
        n += (size_t)snprintf(regions, sizeof(regions), "gate: %s v%" PRIu64 " (%s)",
                              r->promotion->outcome ? r->promotion->outcome : "?", r->new_version,
                              r->promotion->action ? r->promotion->action : "?");
    else if (r->rollback)
        n += (size_t)snprintf(
            regions, sizeof(regions), "rollback to v%" PRIu64 " by %s", r->rollback->to_version,
            r->rollback->operator_ && r->rollback->operator_[0] ? r->rollback->operator_
                                                                : "the gate");
    else if (r->channel)
        n += (size_t)snprintf(
            regions, sizeof(regions), "channel %s -> v%" PRIu64 " by %s",
            r->channel->channel ? r->channel->channel : "?", r->channel->version,
            r->channel->operator_ && r->channel->operator_[0] ? r->channel->operator_ : "the gate");
    for (size_t i = 0; i < r->n_participants && n < sizeof(regions); i++)
        n += (size_t)snprintf(regions + n, sizeof(regions) - n, "%s%s", i ? "," : "",
                              r->participants[i]);
    if (r->n_dropped && n < sizeof(regions))
        n += (size_t)snprintf(regions + n, sizeof(regions) - n, " (%zu)", r->n_dropped);
    if (r->new_model_sha256.len >= 6)
        fa_hex_encode(digest, sizeof(digest), r->new_model_sha256.data, 6);
    fprintf(out, "%7" PRIu64 "%c%7" PRIu64 " %4u  %-24s  %-13s %-28s %s\n", index,
            is_signed ? ' ' : '*', r->round, r->attempt, when, ver, regions, digest);
}

void fa_audit_cli_describe(const Fedagg__AuditRecord *r, char *buf, size_t cap)
{
    size_t n =
        (size_t)snprintf(buf, cap, "round %" PRIu64 " attempt %u, regions ", r->round, r->attempt);
    for (size_t i = 0; i < r->n_participants && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", r->participants[i]);
    for (size_t i = 0; i < r->n_dropped && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : " (dropped: ", r->dropped[i]);
    if (r->n_dropped && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, ")");
    if (n < cap)
        snprintf(buf + n, cap - n, ", model v%" PRIu64 " -> v%" PRIu64, r->prev_version,
                 r->new_version);
}

/* A key argument: the contents of the file it names, or the text itself. */
static int key_bytes(const char *arg, uint8_t **data, size_t *len, fa_error *err)
{
    struct stat st;
    if (stat(arg, &st) == 0)
        return fa_file_read_all(arg, data, len, 4096, err);
    *len = strlen(arg);
    *data = (uint8_t *)strdup(arg);
    return *data ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}

int fa_audit_cli_pubkey(const char *arg, fa_note_verifier *v, fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = key_bytes(arg, &data, &len, err);
    if (rc == 0)
        rc = fa_note_verifier_parse(v, data, len, err);
    free(data);
    if (rc != 0)
        return fa_error_prefix(err, rc, "public key %s", arg);
    return 0;
}

static int add_key(fa_audit_region_key **keys, size_t *n, const char *region, const uint8_t pk[32],
                   fa_error *err)
{
    fa_audit_region_key *k;
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*keys)[i].region, region)) {
            memcpy((*keys)[i].pk, pk, 32); /* the later one wins */
            return 0;
        }
    k = realloc(*keys, (*n + 1) * sizeof(**keys));
    if (!k)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    *keys = k;
    k[*n].region = strdup(region);
    if (!k[*n].region)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    memcpy(k[*n].pk, pk, 32);
    (*n)++;
    return 0;
}

int fa_audit_cli_region_key(const char *arg, fa_audit_region_key **keys, size_t *n, fa_error *err)
{
    const char *eq = strchr(arg, '=');
    char region[256];
    fa_note_verifier v;
    int rc;

    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(region) || !eq[1])
        return fa_errorf(err, FA_ERR_INVAL, "--region-key %s: expected REGION=KEY", arg);
    memcpy(region, arg, (size_t)(eq - arg));
    region[eq - arg] = 0;
    rc = fa_audit_cli_pubkey(eq + 1, &v, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "--region-key %s", region);
    return add_key(keys, n, region, v.pk, err);
}

int fa_audit_cli_config_keys(const char *path, fa_audit_region_key **keys, size_t *n, fa_error *err)
{
    ProtobufCMessage *m = NULL;
    Fedagg__AggregatorConfig *cfg;
    int rc;

    /* NO_FILES: an auditor's copy of the config need not come with the
     * aggregator's directories; key files are read below. */
    rc = fa_config_load(FA_CONFIG_AGGREGATOR, path, FA_CONFIG_NO_FILES, &m, NULL, err);
    if (rc != 0)
        return rc;
    cfg = (Fedagg__AggregatorConfig *)m;
    for (size_t i = 0; i < cfg->n_regions && rc == 0; i++) {
        const Fedagg__Region *r = cfg->regions[i];
        uint8_t pk[32];
        if (!r->id)
            continue;
        if (r->identity_public_key && r->identity_public_key[0])
            rc = fa_config_decode_key32((const uint8_t *)r->identity_public_key,
                                        strlen(r->identity_public_key), 0, pk, err);
        else if (r->identity_public_key_file && r->identity_public_key_file[0])
            rc = fa_config_read_key32_file(r->identity_public_key_file, pk, err);
        else
            continue;
        if (rc != 0)
            fa_error_prefix(err, rc, "%s: region %s", path, r->id);
        else
            rc = add_key(keys, n, r->id, pk, err);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

void fa_audit_cli_free_keys(fa_audit_region_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free((char *)keys[i].region);
    free(keys);
}
