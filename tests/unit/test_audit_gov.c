/* The governance records of the audit log (audit/audit_gov.h) and model
 * cards (audit/lineage.h): an honest history of decisions, a rollback and
 * channel moves verifies and every decision is recomputed; each way a log
 * can lie (a promotion its statements do not give, a figure not theirs, a
 * rollback to a version other than the last promoted, a channel on a
 * rejected version, a round trained from a rolled-back version, a forged or
 * misplaced data statement) is refused naming its record; the record rules
 * of each kind; the card of a version from the log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "audit/audit_gov.h"
#include "audit/audit_log.h"
#include "audit/lineage.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"

#define NREG 3
static const char *const ids[NREG] = {"ap-south", "eu-west", "us-east"};

struct fix {
    char dir[256], path[300];
    fa_note_signer *signer;
    fa_note_verifier v;
    uint8_t seed[NREG][32];
    fa_audit_region_key keys[NREG];
    fa_audit_log *log;
    uint64_t version, round; /* the current model, the round in flight */
    uint8_t model[64][32];   /* model digest of each version */
    uint8_t cfg[32];
};

static struct fix *F;

static int setup(void **state)
{
    struct fix *f = calloc(1, sizeof(*f));
    uint8_t seed[32], sk[64];
    fa_error err;

    snprintf(f->dir, sizeof(f->dir), "/tmp/fa_test_auditgov.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/audit.log", f->dir);
    memset(seed, 0x42, sizeof(seed));
    if (fa_note_signer_new(&f->signer, "fedagg.test/gov", seed, 32, &err) != 0)
        return -1;
    snprintf(f->v.name, sizeof(f->v.name), "fedagg.test/gov");
    memcpy(f->v.pk, fa_note_signer_public_key(f->signer), 32);
    for (int i = 0; i < NREG; i++) {
        memset(f->seed[i], 0x60 + i, 32);
        f->keys[i].region = ids[i];
        crypto_sign_seed_keypair(f->keys[i].pk, sk, f->seed[i]);
    }
    memset(f->model[0], 0xa0, 32);
    memset(f->cfg, 0x11, 32);
    f->round = 1; /* the round in flight */
    if (fa_audit_log_open(&f->log, f->path, f->signer, NULL, FA_AUDIT_LOG_NOSYNC, NULL, &err) != 0)
        return -1;
    F = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fix *f = *state;
    char cmd[400];
    fa_audit_log_close(f->log);
    fa_note_signer_del(f->signer);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    free(f);
    return system(cmd) == 0 ? 0 : -1;
}

/* A record's common fields, the current model as previous and new. */
static void base(struct fix *f, Fedagg__AuditRecord *r)
{
    fedagg__audit_record__init(r);
    r->version = 1;
    r->federation_id = "fed-g";
    r->round = f->round;
    r->attempt = 0;
    r->start_unix_ms = 1700000000000ull + f->round;
    r->commit_unix_ms = r->start_unix_ms;
    r->config_digest.data = f->cfg;
    r->config_digest.len = 32;
    r->prev_version = r->new_version = f->version;
    r->prev_model_sha256.data = r->new_model_sha256.data = f->model[f->version];
    r->prev_model_sha256.len = r->new_model_sha256.len = 32;
}

static void append(struct fix *f, const Fedagg__AuditRecord *r)
{
    fa_error err;
    fa_audit_append_result res;
    int rc = fa_audit_log_append(f->log, r, &res, &err);
    if (rc != 0)
        fail_msg("append: %s", err.msg);
    fa_audit_append_result_free(&res);
}

/* A signed statement (eval or data) into sig / bytes. */
struct signed_st {
    uint8_t *bytes;
    size_t len;
    uint8_t sig[64];
};

static void sign_eval(struct fix *f, int region, double accuracy, struct signed_st *out)
{
    Fedagg__EvalStatement s = FEDAGG__EVAL_STATEMENT__INIT;
    s.federation_id = "fed-g";
    s.region = (char *)ids[region];
    s.model_version = f->version;
    s.model_sha256.data = f->model[f->version];
    s.model_sha256.len = 32;
    s.num_examples = 1000;
    s.loss = 1.0 - accuracy;
    s.accuracy = accuracy;
    out->len = fedagg__eval_statement__get_packed_size(&s);
    out->bytes = malloc(out->len);
    fedagg__eval_statement__pack(&s, out->bytes);
    assert_int_equal(fa_identity_sign_statement(f->seed[region], FA_IDENTITY_DOMAIN_EVAL,
                                                out->bytes, out->len, out->sig),
                     0);
}

static const Fedagg__PromotionRule *rule(void)
{
    static Fedagg__PromotionRule r = FEDAGG__PROMOTION_RULE__INIT;
    r.metric = "accuracy";
    r.source = "federated";
    r.higher_is_better = 1;
    r.baseline = "last-promoted";
    r.tolerance = 0.02;
    r.min_regions = 2;
    r.on_regression = "rollback";
    return &r;
}

/* The decision on the current version, resting on statements of the given
 * accuracies (n of them); the recorded outcome, figure and baseline as given
 * (an honest caller passes what the rule gives). */
static void decide(struct fix *f, const double *acc, int n, const char *outcome, double value,
                   int has_base, double baseline, uint64_t base_version, const char *action)
{
    Fedagg__AuditRecord r;
    Fedagg__PromotionDecision d = FEDAGG__PROMOTION_DECISION__INIT;
    Fedagg__SignedEval se[NREG], *sep[NREG];
    struct signed_st st[NREG];

    base(f, &r);
    for (int i = 0; i < n; i++) {
        fedagg__signed_eval__init(&se[i]);
        sign_eval(f, i, acc[i], &st[i]);
        se[i].statement.data = st[i].bytes;
        se[i].statement.len = st[i].len;
        se[i].signature.data = st[i].sig;
        se[i].signature.len = 64;
        sep[i] = &se[i];
    }
    r.n_evaluations = (size_t)n;
    r.evaluations = sep;
    d.outcome = (char *)outcome;
    d.rule = (Fedagg__PromotionRule *)rule();
    d.value = value;
    d.regions = (uint32_t)n;
    d.examples = 1000u * (uint64_t)n;
    d.has_baseline = has_base;
    d.baseline = baseline;
    d.baseline_version = base_version;
    d.reason = "test";
    d.action = (char *)action;
    r.promotion = &d;
    append(f, &r);
    for (int i = 0; i < n; i++)
        free(st[i].bytes);
}

/* An aggregation of the next round by the first nparts regions, each with
 * a data statement (region `forge`'s signed by another key, -1: none). */
static void aggregate(struct fix *f, int nparts, int forge, uint64_t stated_round)
{
    Fedagg__AuditRecord r;
    Fedagg__RegionCommitment c[NREG], *cp[NREG];
    Fedagg__SignedDataStatement ds[NREG], *dsp[NREG];
    struct signed_st st[NREG];
    uint8_t up[NREG][32], sig[NREG][64], man[32], tr[32];
    char *parts[NREG];

    base(f, &r);
    memset(man, 0x33, 32);
    memset(tr, 0x44, 32);
    for (int i = 0; i < nparts; i++) {
        Fedagg__DataStatement s = FEDAGG__DATA_STATEMENT__INIT;
        fedagg__region_commitment__init(&c[i]);
        parts[i] = (char *)ids[i];
        c[i].region = (char *)ids[i];
        memset(up[i], (int)(f->round * 3 + (uint64_t)i), 32);
        c[i].upload_digest.data = up[i];
        c[i].upload_digest.len = 32;
        c[i].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3;
        assert_int_equal(fa_secagg_commitment_sign(f->seed[i], "fed-g", f->round, 0, ids[i],
                                            FA_SECAGG_UPLOAD_BLAKE3, up[i], sig[i]),
                         0);
        c[i].signature.data = sig[i];
        c[i].signature.len = 64;
        cp[i] = &c[i];
        s.federation_id = "fed-g";
        s.region = (char *)ids[i];
        s.round = stated_round ? stated_round : f->round;
        s.model_version = f->version;
        s.model_sha256.data = f->model[f->version];
        s.model_sha256.len = 32;
        s.dataset = "default";
        s.manifest_sha256.data = man;
        s.manifest_sha256.len = 32;
        s.num_examples = 640;
        s.trainer = "builtin";
        s.trainer_kind = "builtin";
        s.trainer_sha256.data = tr;
        s.trainer_sha256.len = 32;
        st[i].len = fedagg__data_statement__get_packed_size(&s);
        st[i].bytes = malloc(st[i].len);
        fedagg__data_statement__pack(&s, st[i].bytes);
        assert_int_equal(fa_identity_sign_statement(f->seed[i == forge ? (i + 1) % NREG : i],
                                                    FA_IDENTITY_DOMAIN_DATA, st[i].bytes, st[i].len,
                                                    st[i].sig),
                         0);
        fedagg__signed_data_statement__init(&ds[i]);
        ds[i].statement.data = st[i].bytes;
        ds[i].statement.len = st[i].len;
        ds[i].signature.data = st[i].sig;
        ds[i].signature.len = 64;
        dsp[i] = &ds[i];
    }
    r.n_participants = r.n_commitments = r.n_data_statements = (size_t)nparts;
    r.participants = parts;
    r.commitments = cp;
    r.data_statements = dsp;
    r.threshold = 1;
    memset(f->model[f->version + 1], (int)(0xb0 + f->version), 32);
    r.new_version = f->version + 1;
    r.new_model_sha256.data = f->model[f->version + 1];
    append(f, &r);
    f->version++;
    f->round++; /* the next round is in flight */
    for (int i = 0; i < nparts; i++)
        free(st[i].bytes);
}

static void rollback_to(struct fix *f, uint64_t to, const char *op)
{
    Fedagg__AuditRecord r;
    Fedagg__ModelRollback b = FEDAGG__MODEL_ROLLBACK__INIT;
    base(f, &r);
    memcpy(f->model[f->version + 1], f->model[to], 32);
    r.new_version = f->version + 1;
    r.new_model_sha256.data = f->model[f->version + 1];
    b.to_version = to;
    b.to_model_sha256.data = f->model[to];
    b.to_model_sha256.len = 32;
    b.rejected_version = f->version;
    b.operator_ = (char *)op;
    b.reason = "test";
    r.rollback = &b;
    append(f, &r);
    f->version++;
}

static void move_channel(struct fix *f, const char *name, uint64_t version, int had, uint64_t prev,
                         const char *op)
{
    Fedagg__AuditRecord r;
    Fedagg__ChannelMove m = FEDAGG__CHANNEL_MOVE__INIT;
    base(f, &r);
    m.channel = (char *)name;
    m.version = version;
    m.model_sha256.data = f->model[version];
    m.model_sha256.len = 32;
    m.had_previous = had;
    m.previous_version = prev;
    m.operator_ = (char *)op;
    r.channel = &m;
    append(f, &r);
}

struct findings {
    int n;
    int64_t first;
    char msg[480];
};

static void on_report(void *ctx, int severity, int64_t index, const char *msg)
{
    struct findings *fi = ctx;
    if (severity != FA_AUDIT_PROBLEM)
        return;
    if (fi->n++ == 0) {
        fi->first = index;
        snprintf(fi->msg, sizeof(fi->msg), "%s", msg);
    }
}

static int verify(struct fix *f, struct findings *fi, fa_audit_verify_result *res)
{
    fa_audit_verify_opts o;
    fa_error err;
    memset(&o, 0, sizeof(o));
    memset(fi, 0, sizeof(*fi));
    o.key = &f->v;
    o.region_keys = f->keys;
    o.nregion_keys = NREG;
    o.report = on_report;
    o.report_ctx = fi;
    return fa_audit_verify(f->path, &o, res, &err);
}

/* The honest history every test starts from:
 *   0 decision v0 promoted (first baseline)            acc .10
 *   1 channel production -> v0 (gate)
 *   2 round 1 -> v1
 *   3 decision v1 promoted (.50 >= .10 - .02)
 *   4 channel production -> v1
 *   5 round 2 -> v2
 *   6 decision v2 rejected (.30 < .50 - .02), rollback
 *   7 rollback v2 -> v3 = v1's bytes */
static void honest(struct fix *f)
{
    const double a0[] = {0.10, 0.10}, a1[] = {0.50, 0.50, 0.50}, a2[] = {0.30, 0.30};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    move_channel(f, "production", 0, 0, 0, "");
    aggregate(f, 3, -1, 0);
    decide(f, a1, 3, "promoted", 0.50, 1, 0.10, 0, "none");
    move_channel(f, "production", 1, 1, 0, "");
    aggregate(f, 3, -1, 0);
    decide(f, a2, 2, "rejected", 0.30, 1, 0.50, 1, "rollback");
    rollback_to(f, 1, "");
}

static void test_honest_history_verifies(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    honest(f);
    move_channel(f, "staging", 3, 0, 0, "alice"); /* 8: the restored v1, not decided: refused? */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    /* v3 (the restore) is a candidate: no release before its decision */
    assert_int_equal(fi.first, 8);
    assert_non_null(strstr(fi.msg, "has not promoted"));
}

static void test_decisions_recomputed(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a3[] = {0.5, 0.5};
    honest(f);
    decide(f, a3, 2, "promoted", 0.5, 1, 0.5, 1, "none"); /* 8: the restore, promoted */
    move_channel(f, "staging", 3, 0, 0, "alice");
    aggregate(f, 2, -1, 0);
    assert_int_equal(verify(f, &fi, &res), 0);
    assert_int_equal(res.decisions, 4);
    assert_int_equal(res.data_signatures, 3 + 3 + 2);
    assert_int_equal(fi.n, 0);
}

static void test_promotion_not_following_refused(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.10, 0.10}, a1[] = {0.05, 0.05};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    /* record 2: .05 < .10 - .02, but recorded as promoted */
    decide(f, a1, 2, "promoted", 0.05, 1, 0.10, 0, "none");
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 2);
    assert_non_null(strstr(fi.msg, "promoted does not follow"));
}

static void test_figure_not_of_statements_refused(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.10, 0.10}, a1[] = {0.05, 0.05};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    decide(f, a1, 2, "promoted", 0.90, 1, 0.10, 0, "none"); /* claims .90 */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 2);
    assert_non_null(strstr(fi.msg, "is not that of its statements"));
}

static void test_wrong_baseline_refused(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.60, 0.60}, a1[] = {0.30, 0.30};
    decide(f, a0, 2, "promoted", 0.60, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    /* a lowered bar: baseline .30 of a version never promoted */
    decide(f, a1, 2, "promoted", 0.30, 1, 0.30, 0, "none");
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 2);
    assert_non_null(strstr(fi.msg, "baseline"));
}

static void test_quorum_and_expiry(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.60};
    /* one statement of the two needed: only "expired" follows */
    decide(f, a0, 1, "expired", 0.60, 0, 0, 0, "none");
    assert_int_equal(verify(f, &fi, &res), 0);
    aggregate(f, 2, -1, 0);
    decide(f, a0, 1, "promoted", 0.60, 0, 0, 0, "none");
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 2);
}

static void test_decided_twice_refused(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.60, 0.6};
    decide(f, a0, 2, "promoted", 0.60, 0, 0, 0, "none");
    decide(f, a0, 2, "promoted", 0.60, 1, 0.60, 0, "none");
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 1);
    assert_non_null(strstr(fi.msg, "decided already"));
}

static void test_rollback_rules(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.10, 0.10}, a1[] = {0.50, 0.50};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    decide(f, a1, 2, "promoted", 0.50, 1, 0.10, 0, "none");
    aggregate(f, 2, -1, 0);
    /* record 4: the gate rolls v2 back to v0, which is not the last
     * promoted (v1), and no decision rejected v2 */
    rollback_to(f, 0, "");
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 4);
    assert_non_null(strstr(fi.msg, "not the last promoted"));
}

static void test_gate_rollback_needs_rejection(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.10, 0.10};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    rollback_to(f, 0, ""); /* v1 undecided: the gate has no reason */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 2);
    assert_non_null(strstr(fi.msg, "no decision rejected"));
}

static void test_operator_rollback_allowed(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.10, 0.10};
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    rollback_to(f, 0, "alice");
    assert_int_equal(verify(f, &fi, &res), 0);
}

static void test_round_from_rolled_back_version_refused(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    const double a0[] = {0.50, 0.50}, a1[] = {0.10, 0.10};
    decide(f, a0, 2, "promoted", 0.50, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    decide(f, a1, 2, "rejected", 0.10, 1, 0.50, 0, "rollback");
    aggregate(f, 2, -1, 0); /* record 3: trained from the rejected v1 anyway */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 3);
    assert_non_null(strstr(fi.msg, "rejected and rolled back"));
}

static void test_channel_rules(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    honest(f);
    move_channel(f, "production", 2, 1, 1, "mallory"); /* 8: the rejected v2 */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 8);
    assert_non_null(strstr(fi.msg, "which the gate rejected"));
}

static void test_channel_previous_checked(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    honest(f);
    move_channel(f, "production", 0, 1, 7, "alice"); /* it pointed at v1, not v7 */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 8);
    assert_non_null(strstr(fi.msg, "previous version"));
}

static void test_data_statements_checked(void **state)
{
    struct fix *f = *state;
    struct findings fi;
    fa_audit_verify_result res;
    aggregate(f, 3, 1, 0); /* eu-west's statement signed by us-east's key */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_int_equal(fi.first, 0);
    assert_non_null(strstr(fi.msg, "eu-west: the signature of its data statement"));
    teardown(state);
    setup(state);
    f = *state;
    aggregate(f, 2, -1, 7); /* statements of round 7 in round 1's record */
    assert_int_equal(verify(f, &fi, &res), FA_ERR_VERIFY);
    assert_non_null(strstr(fi.msg, "not of this record's"));
}

static void test_record_rules(void **state)
{
    struct fix *f = *state;
    Fedagg__AuditRecord r;
    Fedagg__PromotionDecision d = FEDAGG__PROMOTION_DECISION__INIT;
    Fedagg__ModelRollback b = FEDAGG__MODEL_ROLLBACK__INIT;
    Fedagg__ChannelMove m = FEDAGG__CHANNEL_MOVE__INIT;
    uint8_t other[32];
    char why[300];

    memset(other, 0x55, 32);
    base(f, &r);
    d.outcome = "promoted";
    d.action = "none";
    d.rule = (Fedagg__PromotionRule *)rule();
    d.value = 0.5;
    r.promotion = &d;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), 0);
    assert_int_equal(fa_audit_record_is_action(&r), 1);
    r.new_model_sha256.data = other;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    assert_non_null(strstr(why, "a decision changes the model"));
    base(f, &r);
    d.outcome = "maybe";
    r.promotion = &d;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    assert_non_null(strstr(why, "maybe"));
    d.outcome = "promoted";
    d.value = NAN;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    d.value = 0.5;
    r.channel = &m; /* two kinds at once */
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    assert_non_null(strstr(why, "not several"));

    base(f, &r);
    b.to_version = 0;
    b.to_model_sha256.data = other;
    b.to_model_sha256.len = 32;
    r.rollback = &b;
    r.new_version = r.prev_version + 2;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    assert_non_null(strstr(why, "not the next one"));
    r.new_version = r.prev_version + 1;
    r.new_model_sha256.data = other;
    b.rejected_version = r.prev_version + 1;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);

    base(f, &r);
    m.channel = "Production!";
    m.model_sha256.data = other;
    m.model_sha256.len = 32;
    r.channel = &m;
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), FA_ERR_INVAL);
    assert_non_null(strstr(why, "Production!"));
    m.channel = "production";
    assert_int_equal(fa_audit_record_check(&r, why, sizeof(why)), 0);
    assert_int_equal(fa_audit_gov_channel_name_ok("a.b_c-1"), 1);
    assert_int_equal(fa_audit_gov_channel_name_ok(""), 0);
}

static void test_card(void **state)
{
    struct fix *f = *state;
    const double a3[] = {0.5, 0.5};
    fa_audit_log *ro = NULL;
    json_t *c, *regions, *dec;
    char *json = NULL;
    fa_error err;

    honest(f);
    decide(f, a3, 2, "promoted", 0.5, 1, 0.5, 1, "none");
    aggregate(f, 3, -1, 0); /* v4 from the restored v3 */
    assert_int_equal(fa_audit_log_open_readonly(&ro, f->path, &f->v, NULL, &err), 0);
    assert_int_equal(fa_lineage_card_json(ro, 4, f->keys, NREG, &json, &err), 0);
    c = json_loads(json, 0, NULL);
    assert_non_null(c);
    assert_int_equal(json_integer_value(json_object_get(c, "version")), 4);
    assert_string_equal(json_string_value(json_object_get(c, "status")), "candidate");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "made"), "by")),
                        "round");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(c, "made"), "parent")), 3);
    regions = json_object_get(c, "regions");
    assert_int_equal(json_array_size(regions), 3);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(regions, 1), "data"), "signature")),
                        "verified");
    /* ancestry: v3 (restores v1), v1, v0 */
    assert_int_equal(json_array_size(json_object_get(c, "ancestry")), 3);
    json_decref(c);
    free(json);
    /* the rejected v2: its decision and no channel */
    assert_int_equal(fa_lineage_card_json(ro, 2, f->keys, NREG, &json, &err), 0);
    c = json_loads(json, 0, NULL);
    dec = json_object_get(c, "decision");
    assert_string_equal(json_string_value(json_object_get(dec, "outcome")), "rejected");
    assert_string_equal(json_string_value(json_object_get(dec, "action")), "rollback");
    assert_int_equal(json_integer_value(json_object_get(dec, "record")), 6);
    assert_int_equal(json_array_size(json_object_get(c, "channels")), 0);
    json_decref(c);
    free(json);
    /* v1: production moved to it once, by the gate */
    assert_int_equal(fa_lineage_card_json(ro, 1, f->keys, NREG, &json, &err), 0);
    c = json_loads(json, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(c, "releases")), 1);
    json_decref(c);
    free(json);
    assert_int_equal(fa_lineage_card_json(ro, 9, f->keys, NREG, &json, &err), FA_ERR_NOTFOUND);
    fa_audit_log_close(ro);
}

static void test_card_refuses_a_log_that_does_not_follow(void **state)
{
    struct fix *f = *state;
    fa_audit_log *ro = NULL;
    const double a0[] = {0.10, 0.10}, a1[] = {0.05, 0.05};
    char *json = NULL;
    fa_error err;
    decide(f, a0, 2, "promoted", 0.10, 0, 0, 0, "none");
    aggregate(f, 2, -1, 0);
    decide(f, a1, 2, "promoted", 0.05, 1, 0.10, 0, "none");
    assert_int_equal(fa_audit_log_open_readonly(&ro, f->path, &f->v, NULL, &err), 0);
    assert_int_equal(fa_lineage_card_json(ro, 1, f->keys, NREG, &json, &err), FA_ERR_VERIFY);
    assert_non_null(strstr(err.msg, "record 2:"));
    assert_null(json);
    fa_audit_log_close(ro);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_honest_history_verifies),
        T(test_decisions_recomputed),
        T(test_promotion_not_following_refused),
        T(test_figure_not_of_statements_refused),
        T(test_wrong_baseline_refused),
        T(test_quorum_and_expiry),
        T(test_decided_twice_refused),
        T(test_rollback_rules),
        T(test_gate_rollback_needs_rejection),
        T(test_operator_rollback_allowed),
        T(test_round_from_rolled_back_version_refused),
        T(test_channel_rules),
        T(test_channel_previous_checked),
        T(test_data_statements_checked),
        T(test_record_rules),
        T(test_card),
        T(test_card_refuses_a_log_that_does_not_follow),
    };
#undef T
    (void)F;
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
