/* fed_record.c - the federation's audit records: a completed attempt's, an
 * operator's action's. */
#include "aggregator/federation_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "audit.pb-c.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "model/tensors.h"

/* config ClipMode */
static const char *clip_name(int mode)
{
    return mode == FEDAGG__CLIP_MODE__CLIP_COORDINATE ? "coordinate"
           : mode == FEDAGG__CLIP_MODE__CLIP_BOTH     ? "both"
           : mode == FEDAGG__CLIP_MODE__CLIP_NONE     ? "none"
                                                      : "l2";
}

static int share_fault_cmp(const void *a, const void *b)
{
    return strcmp((*(Fedagg__ShareFault *const *)a)->region,
                  (*(Fedagg__ShareFault *const *)b)->region);
}

/* Builds the audit record of the completed attempt in f->sa. */
static int build_record(fa_fed *f, uint64_t prev_version, const uint8_t prev_sha[32],
                        uint64_t new_version, const uint8_t new_sha[32], uint64_t commit_ms,
                        Fedagg__DdpRound *ddp, uint8_t **out, size_t *out_len, fa_error *err)
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
    size_t ne = fa_eval_reports_count(f->feval);
    Fedagg__SignedEval *evs = calloc(ne ? ne : 1, sizeof(*evs));
    Fedagg__SignedEval **evp = calloc(ne ? ne : 1, sizeof(*evp));
    Fedagg__EvalSummary fsum, csum;
    Fedagg__NamedValue fnv[FA_EVAL_MAX_METRICS], *fnvp[FA_EVAL_MAX_METRICS];
    Fedagg__NamedValue cnv[FA_EVAL_MAX_METRICS], *cnvp[FA_EVAL_MAX_METRICS];
    fa_eval_summary fe;
    size_t np = fa_privacy_ledger_count(f->privacy), npr = 0;
    Fedagg__SignedPrivacy *pvs = calloc(np ? np : 1, sizeof(*pvs));
    Fedagg__SignedPrivacy **pvp = calloc(np ? np : 1, sizeof(*pvp));
    Fedagg__DdpParams ddp_params;
    Fedagg__SignedDataStatement *dss = NULL, **dsp = NULL;
    size_t nf = fa_secagg_server_share_fault_count(f->sa);
    Fedagg__ShareFault *sfs = calloc(nf ? nf : 1, sizeof(*sfs));
    Fedagg__ShareFault **sfp = calloc(nf ? nf : 1, sizeof(*sfp));
    int rc = 0;

    assert(ns + nd <= f->n_regions); /* survivors and dropouts are regions of U1 */
    if (!cm || !cmp || !parts || !drops || !shas || !sigs || !evs || !evp || !pvs || !pvp || !sfs ||
        !sfp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "audit record: out of memory");
        goto out;
    }
    for (size_t i = 0; i < ns; i++) {
        const char *id;
        int signed_ = 0, alg = 0;
        fedagg__region_commitment__init(&cm[i]);
        rc = fa_secagg_server_commitment(f->sa, i, &id, &alg, shas[i], sigs[i], &signed_);
        if (rc != 0)
            goto out;
        parts[i] = (char *)fa_secagg_server_survivor(f->sa, i);
        cm[i].region = (char *)id;
        cm[i].upload_digest.data = shas[i];
        cm[i].upload_digest.len = 32;
        cm[i].upload_digest_alg = alg == FA_SECAGG_UPLOAD_BLAKE3
                                      ? FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3
                                      : FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_SHA256;
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
        fa_eval_reports_at(f->feval, i, &evs[i]);
        evp[i] = &evs[i];
    }
    rec.n_evaluations = ne;
    rec.evaluations = evp;
    fa_eval_reports_summary(f->feval, &fe);
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
        if (fa_fed_in_list(who, (const char *const *)parts, ns)) {
            pvp[npr] = &pvs[npr];
            npr++;
        }
    }
    rec.n_privacy = npr;
    rec.privacy = pvp;
    /* The participants' data statements (fed_gov.c). */
    rec.n_data_statements =
        fa_fed_gov_data_statements(f, prev_version, prev_sha, parts, ns, &dss, &dsp);
    rec.data_statements = dsp;
    /* Regions whose revealed share was found bad (the round went on
     * without it), sorted by region as the record rules want. */
    for (size_t i = 0; i < nf; i++) {
        const char *region, *owner;
        int kind;
        fedagg__share_fault__init(&sfs[i]);
        if ((rc = fa_secagg_server_share_fault(f->sa, i, &region, &owner, &kind)) != 0)
            goto out;
        sfs[i].region = (char *)region;
        sfs[i].owner = (char *)owner;
        sfs[i].secret = kind == FA_SECAGG_SHARE_SELF_MASK ? "self_mask" : "mask_key";
        sfp[i] = &sfs[i];
    }
    qsort(sfp, nf, sizeof(*sfp), share_fault_cmp);
    rec.n_share_faults = nf;
    rec.share_faults = sfp;
    if (f->ddp_on) {
        if ((rc = fa_fed_ddp_round(f, ddp, &ddp_params, err)) != 0)
            goto out;
        rec.ddp = ddp;
    }

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
    free(dss);
    free(dsp);
    free(sfs);
    free(sfp);
    return rc;
}

/* Appends the record of the completed attempt and remembers the RoundResult. */
int fa_fed_append_record(fa_fed *f, uint64_t prev_version, const uint8_t prev_sha[32],
                         uint64_t commit_ms, fa_error *err)
{
    Fedagg__RoundResult res = FEDAGG__ROUND_RESULT__INIT;
    fa_audit_append_result ar;
    uint8_t *enc = NULL;
    size_t enc_len = 0;
    ProtobufCBinaryData proof[FA_MERKLE_MAX_PROOF];
    Fedagg__DdpRound ddp = FEDAGG__DDP_ROUND__INIT;
    int rc;

    memset(&ar, 0, sizeof(ar));
    rc = build_record(f, prev_version, prev_sha, f->cur.version, f->cur.model_sha256, commit_ms,
                      &ddp, &enc, &enc_len, err);
    if (rc != 0)
        return rc;
    /* The bytes built once are the bytes signed into the log: the log checks
     * them itself (its record rules) before anything reaches the disk. */
    rc = fa_audit_log_append_encoded(f->audit, (const uint8_t *const *)&enc, &enc_len, 1, &ar, err);
    free(enc);
    if (rc != 0)
        return rc;
    /* in the log: the round counts in the account (as a replay would) */
    if (f->ddp_on && (rc = fa_fed_ddp_recorded(f, &ddp, err)) != 0)
        fa_log(FA_LOG_ERROR, "distributed DP: the recorded round could not be accounted",
               "round=%" PRIu64 " error=\"%s\"", f->round, fa_error_msg(err, rc));

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

void fa_fed_action_record_init(fa_fed *f, Fedagg__AuditRecord *rec, uint64_t now)
{
    fedagg__audit_record__init(rec);
    rec->version = 1;
    rec->federation_id = f->federation_id;
    rec->round = f->round;
    rec->attempt = f->attempt;
    rec->start_unix_ms = now;
    rec->commit_unix_ms = now;
    rec->config_digest.data = f->config_digest;
    rec->config_digest.len = 32;
    rec->prev_model_sha256.data = f->cur.model_sha256;
    rec->prev_model_sha256.len = 32;
    rec->new_model_sha256.data = f->cur.model_sha256;
    rec->new_model_sha256.len = 32;
    rec->prev_version = f->cur.version;
    rec->new_version = f->cur.version;
    rec->tensor_table_digest.data = (uint8_t *)fa_global_model_digest(f->model);
    rec->tensor_table_digest.len = 32;
    rec->num_tensors = fa_tensors_count(fa_global_model_table(f->model));
    rec->software_version = FA_VERSION;
}

/* Appends the signed record of an operator's action. */
int fa_fed_append_admin_record(fa_fed *f, const char *op, const char *action, const char *region,
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
    fa_fed_action_record_init(f, &rec, now);
    rec.admin = &a;
    rc = fa_audit_log_append(f->audit, &rec, &ar, err);
    if (rc != 0)
        return fa_error_prefix(err, rc,
                               "the audit log could not record the operator's %s, so it "
                               "was not done",
                               action);
    fa_log(FA_LOG_INFO, "operator action recorded",
           "operator=%s action=%s region=%s index=%" PRIu64 " reason=\"%s\"", op, action,
           region ? region : "", ar.index, reason);
    fa_audit_append_result_free(&ar);
    fa_fed_update_gauges(f);
    return 0;
}
