/* The aggregator's round orchestration (fa_fed) in one process, without
 * sockets: three secure-aggregation clients drive whole rounds through
 * fa_fed_submit / fa_fed_masked_* / fa_fed_tick / fa_fed_poll on a controlled
 * clock.  Covers a complete round (the new model is the old one plus the
 * weighted mean delta), a dropout, a restart of the aggregator mid-round from
 * its saved state, idempotent retries, impersonation, stale upload streams,
 * the audit log behind it, and rounds under distributed DP. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregator/api.h"
#include "aggregator/fed_gov.h"
#include "audit/audit_log.h"
#include "aggregator/federation.h"
#include "aggregator/metrics.h"
#include "aggregator/model_store.h"
#include "common/fa_file.h"
#include "common/fa_safetensors.h"
#include "common/fa_sha256.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "privacy/accountant.h"
#include "privacy/ddg.h"
#include "fedagg.pb-c.h"
#include "model/delta.h"
#include "model/mlp.h"
#include "model/tensors.h"
#include "proto/config_check.h"
#include "secagg.pb-c.h"

#define NR 3
static const char *ids[NR] = {"ap-south", "eu-west", "us-east"}; /* sorted */

struct sim {
    char dir[256];
    const char *model_txt; /* the config's model, quantization, optimizer, evaluation */
    Fedagg__AggregatorConfig *cfg;
    fa_fed *f;
    uint8_t seed[NR][32];
    fa_secagg_member members[NR];
    fa_secagg_client *c[NR];
    uint64_t now;
    size_t d;
    float *delta[NR];
};

static void must(int rc, const fa_error *err)
{
    if (rc != 0)
        fail_msg("rc %d: %s", rc, err ? err->msg : "");
}

static void write_config(struct sim *s, uint32_t masked_deadline_ms)
{
    char text[8192], path[512], key[FA_IDENTITY_SECRET_TEXT_MAX];
    size_t n = 0, klen;
    uint8_t aseed[32], apk[32];
    fa_error err;

    snprintf(path, sizeof(path), "%s/audit.key", s->dir);
    if (access(path, F_OK) != 0) { /* a config written again keeps the log's key */
        must(fa_identity_generate(aseed, apk, NULL), NULL);
        must(fa_identity_format_secret(aseed, key, &klen), NULL);
        must(fa_file_write_atomic(path, key, klen, 0600, &err), &err);
    }
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "federation_id: \"unit\"\nlisten: \"127.0.0.1:4433\"\n"
                          "tls { cert_file: \"x.crt\" key_file: \"x.key\" ca_file: \"ca.crt\" }\n");
    for (int i = 0; i < NR; i++) {
        char pk[FA_IDENTITY_PUBLIC_TEXT_MAX];
        size_t pl;
        fa_identity_format_public(s->members[i].identity_pk, pk, &pl);
        pk[strcspn(pk, "\n")] = '\0';
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "regions { id: \"%s\" identity_public_key: \"%s\" }\n", ids[i], pk);
    }
    n += (size_t)snprintf(
        text + n, sizeof(text) - n,
        "round { rounds: 0 min_regions: 2 threshold: 2 advertise_deadline_ms: 1000\n"
        "  shares_deadline_ms: 1000 masked_deadline_ms: %u consistency_deadline_ms: 1000\n"
        "  unmask_deadline_ms: 1000 }\n"
        "%s"
        "storage { dir: \"%s/store\" keep_versions: 3 }\n"
        "audit { signing_key_file: \"%s/audit.key\" origin: \"unit.test/log\" }\n"
        "metrics_listen: \"\"\n",
        masked_deadline_ms,
        s->model_txt ? s->model_txt
                     : "model { input_dim: 6 hidden: [5] output_dim: 3 init_seed: 9 }\n"
                       "optimizer { kind: FEDAVGM learning_rate: 1.0 momentum: 0.5 }\n"
                       "quantization { bits: 16 clip: CLIP_COORDINATE clip_value: 0.5 "
                       "max_examples: 100 range: RANGE_FIXED }\n",
        s->dir, s->dir);
    must(fa_config_load_text(FA_CONFIG_AGGREGATOR, text, n, "unit.textproto", s->dir,
                             FA_CONFIG_NO_FILES, (ProtobufCMessage **)&s->cfg, NULL, &err),
         &err);
}

static void sim_open(struct sim *s)
{
    fa_error err;
    fa_error_clear(&err);
    must(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), &err);
}

/* A federation of the three regions.  model_txt NULL: the built-in MLP
 * 6-5-3 with one fixed quantiser range; else the config's model,
 * quantization and optimizer (and evaluation) sections, with files made by
 * make_files(dir) first (may be NULL). */
static struct sim *sim_new_model(uint32_t masked_deadline_ms, const char *model_txt,
                                 void (*make_files)(const char *dir))
{
    struct sim *s = calloc(1, sizeof(*s));
    Fedagg__FederationInfo *fi;
    uint8_t *info;
    size_t len;
    fa_error err;

    assert_int_equal(sodium_init() >= 0, 1);
    snprintf(s->dir, sizeof(s->dir), "/tmp/fa_test_fed.XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    s->model_txt = model_txt;
    if (make_files)
        make_files(s->dir);
    for (int i = 0; i < NR; i++) {
        must(fa_identity_generate(s->seed[i], s->members[i].identity_pk, NULL), NULL);
        s->members[i].id = ids[i];
    }
    write_config(s, masked_deadline_ms);
    s->now = 1000;
    sim_open(s);
    must(fa_fed_info(s->f, s->now, &info, &len, &err), &err);
    fi = fedagg__federation_info__unpack(NULL, len, info);
    assert_non_null(fi);
    s->d = fi->num_params;
    fedagg__federation_info__free_unpacked(fi, NULL);
    free(info);
    for (int i = 0; i < NR; i++) {
        s->delta[i] = malloc(s->d * sizeof(float));
        for (size_t j = 0; j < s->d; j++)
            s->delta[i][j] = 0.01f * (float)(i + 1) * (float)((int)(j % 7) - 3);
    }
    return s;
}

static struct sim *sim_new(uint32_t masked_deadline_ms)
{
    struct sim *s = sim_new_model(masked_deadline_ms, NULL, NULL);
    assert_int_equal(s->d, 6 * 5 + 5 + 5 * 3 + 3); /* the MLP 6-5-3 */
    return s;
}

static void sim_del(struct sim *s)
{
    char cmd[300];
    for (int i = 0; i < NR; i++) {
        fa_secagg_client_del(s->c[i]);
        free(s->delta[i]);
    }
    fa_fed_close(s->f);
    protobuf_c_message_free_unpacked(&s->cfg->base, NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
    assert_int_equal(system(cmd), 0);
    free(s);
}

static void position(struct sim *s, uint64_t *round, uint32_t *attempt, int *phase,
                     uint64_t *version)
{
    fa_fed_position(s->f, round, attempt, phase, version);
}

/* New clients for the current attempt. */
static void clients_new(struct sim *s)
{
    uint64_t round;
    uint32_t attempt;
    Fedagg__FederationInfo *fi;
    uint8_t *info;
    size_t len;
    fa_error err;

    position(s, &round, &attempt, NULL, NULL);
    must(fa_fed_info(s->f, s->now, &info, &len, &err), &err);
    fi = fedagg__federation_info__unpack(NULL, len, info);
    assert_non_null(fi);
    for (int i = 0; i < NR; i++) {
        fa_secagg_config cfg = {0};
        cfg.federation_id = "unit";
        cfg.round = round;
        cfg.attempt = attempt;
        cfg.threshold = fi->threshold;
        cfg.vector_len = fi->ddp ? fi->ddp->padded_dim + 1 : fi->num_params + 1;
        cfg.ring_bits = fi->quant->ring_bits;
        cfg.quant.bits = fi->quant->bits;
        cfg.quant.clip_mode = (int)fi->quant->clip_mode;
        cfg.quant.clip_l2_norm = fi->quant->clip_l2_norm;
        cfg.quant.clip_value = fi->quant->clip_value;
        /* every region trained from the model the federation announces */
        assert_int_equal(fi->model_sha256.len, 32);
        memcpy(cfg.model_sha256, fi->model_sha256.data, 32);
        fa_secagg_client_del(s->c[i]);
        s->c[i] = NULL;
        must(fa_secagg_client_new(&s->c[i], &cfg, s->seed[i], ids[i], s->members, NR, NULL, &err),
             &err);
    }
    assert_int_equal(fi->num_params, s->d);
    fedagg__federation_info__free_unpacked(fi, NULL);
    free(info);
}

static int submit(struct sim *s, int kind, int i, const uint8_t *m, size_t len, int *status)
{
    uint64_t round;
    uint32_t attempt;
    fa_fed_reply r = {0};
    int rc;
    position(s, &round, &attempt, NULL, NULL);
    rc = fa_fed_submit(s->f, kind, ids[i], round, attempt, m, len, s->now, &r);
    if (status)
        *status = rc ? fa_api_http_status(r.code, r.internal) : 0;
    fa_fed_reply_free(&r);
    return rc;
}

/* Polls client i's answer for kind; returns the body (caller frees) or NULL. */
static uint8_t *poll_ok(struct sim *s, int kind, int i, uint64_t round, uint32_t attempt,
                        size_t *len)
{
    fa_fed_reply r = {0};
    assert_int_equal(fa_fed_poll(s->f, kind, ids[i], round, attempt, &r), 1);
    if (fa_api_http_status(r.code, r.internal) != 200)
        fail_msg("poll %d for %s: %d %s", kind, ids[i], fa_api_http_status(r.code, r.internal),
                 r.msg);
    *len = r.len;
    return r.body;
}

static void upload(struct sim *s, int i)
{
    uint64_t round, id;
    uint32_t attempt;
    int discard;
    fa_fed_reply r = {0};
    uint8_t buf[4096];
    size_t n;
    fa_error err;

    position(s, &round, &attempt, NULL, NULL);
    must(fa_secagg_client_set_input_f32(s->c[i], s->delta[i], s->d, 1.0, &err), &err);
    assert_int_equal(fa_fed_masked_begin(s->f, ids[i], round, attempt,
                                         (int64_t)fa_secagg_client_masked_bytes(s->c[i]), s->now,
                                         &id, &discard, &r),
                     0);
    assert_int_equal(discard, 0);
    for (;;) {
        must(fa_secagg_client_masked_next(s->c[i], buf, sizeof(buf), &n, &err), &err);
        if (n == 0)
            break;
        assert_int_equal(fa_fed_masked_chunk(s->f, ids[i], id, buf, n, s->now, &r), 0);
    }
    assert_int_equal(fa_fed_masked_end(s->f, ids[i], id, s->now, &r), 0);
    fa_fed_reply_free(&r);
}

/* upload() of a ring input (distributed DP) */
static void upload_ring(struct sim *s, int i, const uint32_t *q, size_t n)
{
    uint64_t round, id;
    uint32_t attempt;
    int discard;
    fa_fed_reply r = {0};
    uint8_t buf[4096];
    size_t got;
    fa_error err;

    position(s, &round, &attempt, NULL, NULL);
    must(fa_secagg_client_set_input_ring(s->c[i], q, n, &err), &err);
    assert_int_equal(fa_fed_masked_begin(s->f, ids[i], round, attempt,
                                         (int64_t)fa_secagg_client_masked_bytes(s->c[i]), s->now,
                                         &id, &discard, &r),
                     0);
    for (;;) {
        must(fa_secagg_client_masked_next(s->c[i], buf, sizeof(buf), &got, &err), &err);
        if (got == 0)
            break;
        assert_int_equal(fa_fed_masked_chunk(s->f, ids[i], id, buf, got, s->now, &r), 0);
    }
    assert_int_equal(fa_fed_masked_end(s->f, ids[i], id, s->now, &r), 0);
    fa_fed_reply_free(&r);
}

/* Runs rounds 0 and 1 (advertise, share keys) for the clients in `who`. */
static void run_to_masked(struct sim *s, const int *who, int nwho)
{
    uint64_t round;
    uint32_t attempt;
    uint8_t *m, *a;
    size_t len, alen;
    int phase;
    fa_error err;

    position(s, &round, &attempt, NULL, NULL);
    for (int k = 0; k < nwho; k++) {
        must(fa_secagg_client_advertise(s->c[who[k]], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, who[k], m, len, NULL), 0);
        free(m);
    }
    s->now += nwho == NR ? 1 : 1500; /* all in, or wait for the deadline */
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_SHARES);
    for (int k = 0; k < nwho; k++) {
        a = poll_ok(s, FA_FED_ADVERTISE, who[k], round, attempt, &alen);
        must(fa_secagg_client_peer_list(s->c[who[k]], a, alen, 0, &err), &err);
        free(a);
        must(fa_secagg_client_share_keys(s->c[who[k]], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_SHARES, who[k], m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    for (int k = 0; k < nwho; k++) {
        a = poll_ok(s, FA_FED_SHARES, who[k], round, attempt, &alen);
        must(fa_secagg_client_shares(s->c[who[k]], a, alen, 0, &err), &err);
        free(a);
    }
}

/* Rounds 3 and 4 for the clients in `who` (who uploaded). */
/* Every region uploads; the masked phase closes at the next tick. */
static void upload_all_and_close(struct sim *s)
{
    for (int i = 0; i < NR; i++)
        upload(s, i);
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
}

static void run_to_end(struct sim *s, const int *who, int nwho, uint64_t round, uint32_t attempt)
{
    uint8_t *m, *a;
    size_t len, alen;
    fa_error err;

    for (int k = 0; k < nwho; k++) {
        a = poll_ok(s, FA_FED_MASKED, who[k], round, attempt, &alen);
        must(fa_secagg_client_survivors(s->c[who[k]], a, alen, 0, &m, &len, &err), &err);
        free(a);
        assert_int_equal(submit(s, FA_FED_CONSISTENCY, who[k], m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    for (int k = 0; k < nwho; k++) {
        a = poll_ok(s, FA_FED_CONSISTENCY, who[k], round, attempt, &alen);
        must(fa_secagg_client_signatures(s->c[who[k]], a, alen, 0, &m, &len, &err), &err);
        free(a);
        assert_int_equal(submit(s, FA_FED_UNMASK, who[k], m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
}

/* Every region uploads, then rounds 3 and 4: attempt `attempt` of round 1
 * completes and version 1 is the model. */
static void finish_round_1(struct sim *s, uint32_t attempt)
{
    const int all[] = {0, 1, 2};
    uint64_t version;
    upload_all_and_close(s);
    run_to_end(s, all, NR, 1, attempt);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 1);
}

/* Round 1 from its start with every region. */
static void finish_round_1_all(struct sim *s)
{
    const int all[] = {0, 1, 2};
    clients_new(s);
    run_to_masked(s, all, NR);
    finish_round_1(s, 0);
}

/* The current model's parameters. */
static void model_params(struct sim *s, float *out)
{
    fa_mlp_config mc;
    fa_mlp_layout l;
    const uint32_t hidden[] = {5};
    char path[4096];
    uint64_t v;
    uint8_t sha[32];
    must(fa_mlp_config_make(&mc, 6, hidden, 1, 3, NULL), NULL);
    must(fa_mlp_layout_init(&l, &mc, NULL), NULL);
    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &v, sha), 0);
    must(fa_mlp_load(path, &l, out, NULL), NULL);
}

/* The master weights of version v (the store keeps them with deltas on). */
static void master_params(struct sim *s, uint64_t v, float *out)
{
    fa_mlp_config mc;
    fa_mlp_layout l;
    const uint32_t hidden[] = {5};
    char path[600];
    must(fa_mlp_config_make(&mc, 6, hidden, 1, 3, NULL), NULL);
    must(fa_mlp_layout_init(&l, &mc, NULL), NULL);
    snprintf(path, sizeof(path), "%s/store/master-%08llu.safetensors", s->dir,
             (unsigned long long)v);
    must(fa_mlp_load(path, &l, out, NULL), NULL);
}

static void test_complete_round(void **state)
{
    const Fedagg__ModelDelta defaults = FEDAGG__MODEL_DELTA__INIT;
    struct sim *s = sim_new(1000);
    float *before = malloc(s->d * sizeof(float)), *after = malloc(s->d * sizeof(float)),
          *published = malloc(s->d * sizeof(float));
    double step = 0;
    uint8_t *a;
    size_t alen;
    Fedagg__RoundResult *res;

    uint64_t opened = s->now;
    char *json;
    fa_error aerr;

    model_params(s, before);
    finish_round_1_all(s);
    /* the attempt's duration is on the clock the federation is given (the
     * wall clock may step back): from the open to the commit */
    must(fa_fed_admin_json(s->f, "rounds", s->now, &json, &aerr), &aerr);
    {
        json_t *doc = json_loads(json, 0, NULL);
        json_t *secs =
            json_object_get(json_array_get(json_object_get(doc, "rounds"), 0), "seconds");
        assert_true(json_is_real(secs));
        assert_true(fabs(json_real_value(secs) - (double)(s->now - opened) / 1000.0) < 1e-9);
        json_decref(doc);
    }
    free(json);
    a = poll_ok(s, FA_FED_UNMASK, 1, 1, 0, &alen);
    res = fedagg__round_result__unpack(NULL, alen, a);
    assert_non_null(res);
    assert_int_equal(res->new_version, 1);
    assert_int_equal(res->leaf_index, 0);
    assert_non_null(strstr(res->checkpoint, "unit.test/log\n1\n"));
    fedagg__round_result__free_unpacked(res, NULL);
    free(a);
    /* FedAvgM with lr 1 from m = 0: the new master weights are the old plus
     * the mean delta, within the 16-bit quantiser's step (0.5 / 32767), and
     * so is the momentum saved with version 1 (the state after the step);
     * the published model (deltas on by default) is within half a delta
     * step of them (every tensor of the MLP is within one block) */
    master_params(s, 1, after);
    model_params(s, published);
    {
        char path[4096];
        fa_safetensors *st;
        float *m = malloc(s->d * sizeof(float));
        fa_error err;
        snprintf(path, sizeof(path), "%s/store/state-00000001.safetensors", s->dir);
        must(fa_st_open(&st, path, &err), &err);
        must(fa_st_read_f32(st, fa_st_find(st, "m"), m, s->d, &err), &err);
        assert_string_equal(fa_st_metadata_get(st, "fedagg.steps"), "1");
        for (size_t j = 0; j < s->d; j++) {
            double mean = (s->delta[0][j] + s->delta[1][j] + s->delta[2][j]) / 3.0;
            assert_true(fabs((double)after[j] - before[j] - mean) < 2e-4);
            assert_true(fabs((double)m[j] - mean) < 2e-4);
            step = fmax(step, fabs((double)after[j] - before[j]) / fa_delta_qmax(defaults.bits));
        }
        for (size_t j = 0; j < s->d; j++)
            assert_true(fabs((double)published[j] - after[j]) <= step / 2 + 1e-6);
        fa_st_del(st);
        free(m);
    }
    free(before);
    free(after);
    free(published);
    sim_del(s);
}

static void test_dropout_and_refusals(void **state)
{
    struct sim *s = sim_new(1000);
    const int two[] = {0, 1}, all[] = {0, 1, 2};
    uint8_t *m, buf[64];
    size_t len;
    int status, discard;
    uint64_t id1, id2, version;
    fa_fed_reply r = {0};
    fa_error err;

    clients_new(s);
    /* eu-west's certificate, a message from ap-south: refused */
    must(fa_secagg_client_advertise(s->c[0], &m, &len, &err), &err);
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 1, m, len, &status), FA_ERR_AUTH);
    assert_int_equal(status, 403);
    free(m);
    /* a region not in the federation */
    assert_int_equal(fa_fed_submit(s->f, FA_FED_ADVERTISE, "mars", 1, 0, buf, 0, s->now, &r),
                     FA_ERR_AUTH);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 403);
    fa_fed_reply_free(&r);
    run_to_masked(s, all, NR);
    /* an identical advertisement again (a retry) is fine; the phase is past */
    must(fa_secagg_client_advertise(s->c[2], &m, &len, &err), &err);
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 2, m, len, NULL), 0);
    free(m);
    /* us-east begins its upload twice: the second stream replaces the first,
     * and the first can no longer add anything */
    must(fa_secagg_client_set_input_f32(s->c[2], s->delta[2], s->d, 1.0, &err), &err);
    len = (size_t)fa_secagg_client_masked_bytes(s->c[2]);
    assert_int_equal(
        fa_fed_masked_begin(s->f, ids[2], 1, 0, (int64_t)len, s->now, &id1, &discard, &r), 0);
    must(fa_secagg_client_masked_next(s->c[2], buf, 8, &len, &err), &err);
    assert_int_equal(fa_fed_masked_chunk(s->f, ids[2], id1, buf, len, s->now, &r), 0);
    assert_int_equal(fa_fed_masked_begin(s->f, ids[2], 1, 0,
                                         (int64_t)fa_secagg_client_masked_bytes(s->c[2]), s->now,
                                         &id2, &discard, &r),
                     0);
    assert_true(id2 != id1);
    assert_int_equal(fa_fed_masked_chunk(s->f, ids[2], id1, buf, len, s->now, &r), FA_ERR_STATE);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 409);
    /* a wrong length is refused before anything is summed */
    assert_int_equal(fa_fed_masked_begin(s->f, ids[0], 1, 0, 12, s->now, &id1, &discard, &r),
                     FA_ERR_PROTOCOL);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 400);
    fa_fed_reply_free(&r);
    /* ... and then it never finishes: us-east drops out of the masked phase */
    for (int k = 0; k < 2; k++)
        upload(s, two[k]);
    s->now += 1500;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    assert_int_equal(fa_fed_poll(s->f, FA_FED_MASKED, ids[2], 1, 0, &r), 1);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 409);
    fa_fed_reply_free(&r);
    run_to_end(s, two, 2, 1, 0);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 1);
    sim_del(s);
}

/* A worker that restarts during the advertise phase lost the keys it
 * advertised: its new advertisement replaces the old one until the phase
 * closes (the round then completes with its new keys); after that, new keys
 * are refused (409) and the round is not disturbed. */
static void test_readvertise_after_worker_restart(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    const uint8_t junk[] = {0x0a, 0x03, 'u', 's', '-'};
    uint8_t *m, *late;
    size_t len, late_len;
    int status;
    fa_error err;

    clients_new(s);
    must(fa_secagg_client_advertise(s->c[2], &m, &len, &err), &err);
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 2, m, len, NULL), 0);
    free(m);
    /* the worker restarts (twice): fresh keys each time */
    clients_new(s);
    must(fa_secagg_client_advertise(s->c[2], &late, &late_len, &err), &err);
    clients_new(s);
    /* a broken replacement is refused and the advertisement stands */
    assert_int_not_equal(submit(s, FA_FED_ADVERTISE, 2, junk, sizeof(junk), &status), 0);
    assert_int_equal(status, 400);
    run_to_masked(s, all, NR); /* us-east's newest keys replace its first ones */
    /* the phase is closed: other keys are refused now */
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 2, late, late_len, &status), FA_ERR_EXISTS);
    assert_int_equal(status, 409);
    free(late);
    finish_round_1(s, 0);
    sim_del(s);
}

/* Replaces client i by one that trained from the model of digest sha. */
static void client_with_model(struct sim *s, int i, const uint8_t sha[32])
{
    uint64_t round;
    uint32_t attempt;
    Fedagg__FederationInfo *fi;
    fa_secagg_config cfg = {0};
    uint8_t *info;
    size_t len;
    fa_error err;

    position(s, &round, &attempt, NULL, NULL);
    must(fa_fed_info(s->f, s->now, &info, &len, &err), &err);
    fi = fedagg__federation_info__unpack(NULL, len, info);
    assert_non_null(fi);
    cfg.federation_id = "unit";
    cfg.round = round;
    cfg.attempt = attempt;
    cfg.threshold = fi->threshold;
    cfg.vector_len = fi->num_params + 1;
    cfg.ring_bits = fi->quant->ring_bits;
    cfg.quant.bits = fi->quant->bits;
    cfg.quant.clip_mode = (int)fi->quant->clip_mode;
    cfg.quant.clip_l2_norm = fi->quant->clip_l2_norm;
    cfg.quant.clip_value = fi->quant->clip_value;
    memcpy(cfg.model_sha256, sha, 32);
    fa_secagg_client_del(s->c[i]);
    s->c[i] = NULL;
    must(fa_secagg_client_new(&s->c[i], &cfg, s->seed[i], ids[i], s->members, NR, NULL, &err),
         &err);
    fedagg__federation_info__free_unpacked(fi, NULL);
    free(info);
}

/* The aggregator takes advertisements for its current model only (409 for
 * another, so that a stale region downloads it again; 400 without a
 * digest); and its test switch fed-serve-other-model plays the attack of
 * Pasquini et al. (CCS 2022) in full: one region gets a model one bit off,
 * its advertisement for that model is taken, and the other regions refuse
 * the PeerList. */
static void test_advertised_model(void **state)
{
    struct sim *s = sim_new(1000);
    char path[4096], opath[4096];
    uint8_t sha[32], osha[32], other[32], *m, *a, *mf, *of;
    size_t len, alen, mlen, olen, diff = 0;
    uint64_t v, ov, round;
    uint32_t attempt;
    fa_fed_reply r = {0};
    fa_error err;

    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &v, sha), 0);
    clients_new(s);
    position(s, &round, &attempt, NULL, NULL);
    /* eu-west trained from another model */
    memcpy(other, sha, 32);
    other[3] ^= 0x40;
    client_with_model(s, 1, other);
    must(fa_secagg_client_advertise(s->c[1], &m, &len, &err), &err);
    assert_int_equal(
        fa_fed_submit(s->f, FA_FED_ADVERTISE, ids[1], round, attempt, m, len, s->now, &r),
        FA_ERR_REPLAY);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 409);
    assert_non_null(strstr(r.msg, "region eu-west advertised keys for model"));
    assert_non_null(strstr(r.msg, "download it again"));
    fa_fed_reply_free(&r);
    /* ... and with no digest at all (an older worker) */
    {
        Fedagg__AdvertiseKeys *ak = fedagg__advertise_keys__unpack(NULL, len, m);
        uint8_t *m2;
        size_t l2;
        assert_non_null(ak);
        ak->model_sha256.len = 0;
        l2 = fedagg__advertise_keys__get_packed_size(ak);
        m2 = malloc(l2);
        fedagg__advertise_keys__pack(ak, m2);
        assert_int_equal(
            fa_fed_submit(s->f, FA_FED_ADVERTISE, ids[1], round, attempt, m2, l2, s->now, &r),
            FA_ERR_PROTOCOL);
        assert_int_equal(fa_api_http_status(r.code, r.internal), 400);
        assert_non_null(strstr(r.msg, "names no model digest"));
        fa_fed_reply_free(&r);
        fedagg__advertise_keys__free_unpacked(ak, NULL);
        free(m2);
    }
    free(m);

    /* The switch, off: every region gets the model itself. */
    unsetenv("FEDAGG_FAILPOINTS");
    assert_int_equal(fa_fed_model_for(s->f, ids[1], UINT64_MAX, 0, opath, sizeof(opath), &ov, osha),
                     0);
    assert_string_equal(opath, path);
    assert_memory_equal(osha, sha, 32);
#ifndef FA_TEST_HOOKS
    /* A build without test hooks ignores the switch: eu-west gets the
     * model itself all the same. */
    setenv("FEDAGG_FAILPOINTS", "fed-serve-other-model=eu-west", 1);
    assert_int_equal(fa_fed_model_for(s->f, ids[1], UINT64_MAX, 0, opath, sizeof(opath), &ov, osha),
                     0);
    assert_string_equal(opath, path);
    assert_memory_equal(osha, sha, 32);
    unsetenv("FEDAGG_FAILPOINTS");
    sim_del(s);
    return;
#endif
    /* from version 1 on: not yet */
    setenv("FEDAGG_FAILPOINTS", "fed-serve-other-model=eu-west@1", 1);
    assert_int_equal(fa_fed_model_for(s->f, ids[1], UINT64_MAX, 0, opath, sizeof(opath), &ov, osha),
                     0);
    assert_memory_equal(osha, sha, 32);
    /* on: eu-west alone gets a file one bit off, under its own digest */
    setenv("FEDAGG_FAILPOINTS", "worker-before-masked,fed-serve-other-model=eu-west", 1);
    assert_int_equal(fa_fed_model_for(s->f, ids[0], UINT64_MAX, 0, opath, sizeof(opath), &ov, osha),
                     0);
    assert_memory_equal(osha, sha, 32);
    assert_int_equal(fa_fed_model_for(s->f, ids[1], UINT64_MAX, 0, opath, sizeof(opath), &ov, osha),
                     0);
    assert_int_equal(ov, v);
    assert_string_not_equal(opath, path);
    assert_memory_not_equal(osha, sha, 32);
    must(fa_file_read_all(path, &mf, &mlen, 1 << 26, &err), &err);
    must(fa_file_read_all(opath, &of, &olen, 1 << 26, &err), &err);
    assert_int_equal(mlen, olen);
    for (size_t i = 0; i < mlen; i++)
        diff += (size_t)__builtin_popcount(mf[i] ^ of[i]);
    assert_int_equal(diff, 1);
    crypto_hash_sha256(other, of, olen);
    assert_memory_equal(other, osha, 32);
    free(mf);
    free(of);
    /* eu-west's advertisement for what it was served is taken, the others'
     * for the common model too; then every honest region refuses the
     * PeerList, and so does eu-west */
    client_with_model(s, 1, osha);
    for (int i = 0; i < NR; i++) {
        must(fa_secagg_client_advertise(s->c[i], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, i, m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    for (int i = 0; i < NR; i++) {
        a = poll_ok(s, FA_FED_ADVERTISE, i, round, attempt, &alen);
        fa_error_clear(&err);
        assert_int_equal(fa_secagg_client_peer_list(s->c[i], a, alen, 0, &err), FA_ERR_VERIFY);
        assert_non_null(strstr(err.msg, i == 1 ? "'ap-south' signed its advertisement"
                                               : "'eu-west' signed its advertisement"));
        free(a);
    }
    unsetenv("FEDAGG_FAILPOINTS");
    sim_del(s);
}

static void test_restart_mid_round(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    uint64_t round, version;
    uint32_t attempt;
    int phase;
    fa_audit_log *log;
    char path[512];

    char cmd[1200];

    clients_new(s);
    run_to_masked(s, all, NR);
    /* a copy of the round state as it is now, to play a machine crash later */
    snprintf(cmd, sizeof(cmd), "cp %s/store/round.state %s/round.state.old", s->dir, s->dir);
    assert_int_equal(system(cmd), 0);
    upload(s, 0); /* summed, then lost with the process */
    /* SIGKILL: the process is gone; its round state was saved at the close
     * of the shares phase */
    fa_fed_close(s->f);
    s->f = NULL;
    s->now += 50;
    {
        /* A round state whose phase does not match its secure-aggregation
         * state (a damaged file) is refused, and changes nothing. */
        uint8_t *orig = NULL, *bad;
        size_t olen = 0, blen;
        Fedagg__RoundState *st;
        fa_error err;
        snprintf(path, sizeof(path), "%s/store/round.state", s->dir);
        must(fa_file_read_all(path, &orig, &olen, 1 << 30, &err), &err);
        st = fedagg__round_state__unpack(NULL, olen, orig);
        assert_non_null(st);
        assert_int_equal(st->phase, FEDAGG__PHASE__PHASE_MASKED);
        st->phase = FEDAGG__PHASE__PHASE_UNMASK;
        blen = fedagg__round_state__get_packed_size(st);
        bad = malloc(blen);
        fedagg__round_state__pack(st, bad);
        fedagg__round_state__free_unpacked(st, NULL);
        must(fa_file_write_atomic(path, bad, blen, 0600, &err), &err);
        assert_int_equal(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), FA_ERR_CORRUPT);
        assert_non_null(strstr(err.msg, "secure-aggregation state in phase masked"));
        assert_null(s->f);
        must(fa_file_write_atomic(path, orig, olen, 0600, &err), &err);
        free(bad);
        free(orig);
    }
    sim_open(s);
    position(s, &round, &attempt, &phase, &version);
    assert_int_equal(round, 1);
    assert_int_equal(attempt, 0);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_MASKED);
    assert_int_equal(version, 0);
    /* every region uploads (again: the masks and inputs are the same) */
    for (int i = 0; i < NR; i++) {
        must(fa_secagg_client_masked_rewind(s->c[i], NULL), NULL);
        upload(s, i);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    run_to_end(s, all, NR, 1, 0);
    position(s, &round, NULL, NULL, &version);
    assert_int_equal(version, 1);
    assert_int_equal(round, 2);
    fa_fed_close(s->f);
    s->f = NULL;
    /* one record, signed */
    snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
    assert_int_equal(fa_audit_log_open_readonly(&log, path, NULL, NULL, NULL), 0);
    assert_int_equal(fa_audit_log_size(log), 1);
    assert_int_equal(fa_audit_log_signed_size(log), 1);
    fa_audit_log_close(log);
    sim_open(s);
    position(s, &round, NULL, &phase, &version);
    assert_int_equal(version, 1);
    assert_int_equal(round, 2);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    fa_fed_close(s->f);
    s->f = NULL;
    /* A machine crash lost the newer round state (it is not fsync'ed): the
     * stale one of round 1 predates version 1 and is dropped, not trusted. */
    snprintf(cmd, sizeof(cmd), "cp %s/round.state.old %s/store/round.state", s->dir, s->dir);
    assert_int_equal(system(cmd), 0);
    sim_open(s);
    position(s, &round, NULL, &phase, &version);
    assert_int_equal(version, 1);
    assert_int_equal(round, 2);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    sim_del(s);
}

/* The name of the one round.sum.* file in the store, or "" when none. */
static void sum_file(struct sim *s, char *out, size_t n)
{
    char dir[600];
    struct dirent *e;
    DIR *d;
    int found = 0;
    snprintf(dir, sizeof(dir), "%s/store", s->dir);
    d = opendir(dir);
    assert_non_null(d);
    out[0] = '\0';
    while ((e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, "round.sum.", 10)) {
            snprintf(out, n, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    assert_true(found <= 1);
}

static void flip_byte(const char *path, long at)
{
    FILE *fp = fopen(path, "r+b");
    int c;
    assert_non_null(fp);
    assert_int_equal(fseek(fp, at, SEEK_SET), 0);
    c = fgetc(fp);
    assert_int_equal(fseek(fp, at, SEEK_SET), 0);
    fputc(c ^ 0x01, fp);
    fclose(fp);
}

/* The sum is written next to round.state once, when the masked phase
 * closes (the later phase closes name the same file); a restart reads it
 * back, and a damaged or missing one is refused with the file's name,
 * nothing changed.  (After unmasking the state still names the masked
 * sum, and a restart there unmasks it again: it_fed_aggregator_crash.) */
/* Rewrites a sum file as version 1 ("FASUM" 0 0 1, a SHA-256 of all
 * before it instead of the CRC-32C) with the same header and words. */
static void sum_file_to_v1(const char *path)
{
    uint8_t *data = NULL, md[32];
    size_t len = 0;
    fa_error err;
    FILE *out;
    fa_error_clear(&err);
    must(fa_file_read_all(path, &data, &len, (size_t)1 << 30, &err), &err);
    assert_true(len > 40 && data[7] == 2);
    data[7] = 1;
    len -= 4;
    assert_int_equal(fa_sha256(md, data, len), 0);
    assert_non_null(out = fopen(path, "wb"));
    assert_int_equal(fwrite(data, 1, len, out), len);
    assert_int_equal(fwrite(md, 1, 32, out), 32);
    assert_int_equal(fclose(out), 0);
    free(data);
}

static void test_round_sum_file(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    char path[800], again[800], spare[800];
    struct stat st, st2;
    uint64_t version;
    int phase;
    fa_error err;

    clients_new(s);
    run_to_masked(s, all, NR);
    sum_file(s, path, sizeof(path));
    assert_string_equal(path, ""); /* all zeros so far: no file */
    upload_all_and_close(s);
    sum_file(s, path, sizeof(path));
    assert_non_null(strstr(path, "/round.sum.1.0."));
    fa_fed_close(s->f);
    s->f = NULL;
    /* a flipped bit in the words */
    flip_byte(path, 100);
    fa_error_clear(&err);
    assert_int_equal(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), FA_ERR_CORRUPT);
    assert_null(s->f);
    assert_non_null(strstr(err.msg, "fails its CRC-32C"));
    assert_non_null(strstr(err.msg, path));
    flip_byte(path, 100);
    /* gone */
    snprintf(again, sizeof(again), "%s.away", path);
    assert_int_equal(rename(path, again), 0);
    fa_error_clear(&err);
    assert_int_not_equal(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), 0);
    assert_null(s->f);
    assert_non_null(strstr(err.msg, "the round state's sum"));
    assert_int_equal(rename(again, path), 0);
    /* intact, it opens; and as an older aggregator wrote it (version 1: a
     * SHA-256 in place of the CRC-32C), the round goes on from it */
    fa_error_clear(&err);
    must(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), &err);
    fa_fed_close(s->f);
    s->f = NULL;
    sum_file_to_v1(path);
    sim_open(s);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_CONSISTENCY);
    {
        uint8_t *m, *a;
        size_t len, alen;
        for (int k = 0; k < NR; k++) {
            a = poll_ok(s, FA_FED_MASKED, k, 1, 0, &alen);
            must(fa_secagg_client_survivors(s->c[k], a, alen, 0, &m, &len, &err), &err);
            free(a);
            assert_int_equal(submit(s, FA_FED_CONSISTENCY, k, m, len, NULL), 0);
            free(m);
        }
        s->now += 1;
        assert_int_equal(fa_fed_tick(s->f, s->now), 1);
        /* the consistency close named the same file */
        sum_file(s, again, sizeof(again));
        assert_string_equal(again, path);
        for (int k = 0; k < NR; k++) {
            a = poll_ok(s, FA_FED_CONSISTENCY, k, 1, 0, &alen);
            must(fa_secagg_client_signatures(s->c[k], a, alen, 0, &m, &len, &err), &err);
            free(a);
            assert_int_equal(submit(s, FA_FED_UNMASK, k, m, len, NULL), 0);
            free(m);
        }
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 1);
    /* the next round's state needs no sum: the file is gone, kept as the
     * spare the next sum is written over (the same inode), never read */
    sum_file(s, again, sizeof(again));
    assert_string_equal(again, "");
    snprintf(spare, sizeof(spare), "%s/store/round.sum-spare", s->dir);
    assert_int_equal(stat(spare, &st), 0);
    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    sum_file(s, path, sizeof(path));
    assert_non_null(strstr(path, "/round.sum.2.0."));
    assert_int_equal(stat(path, &st2), 0);
    assert_int_equal(st2.st_ino, st.st_ino);
    assert_int_equal(access(spare, F_OK), -1);
    fa_fed_close(s->f);
    s->f = NULL;
    sim_open(s);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_CONSISTENCY);
    sim_del(s);
}

/* The bytes of the spare file at path the storage gate counts: its blocks,
 * at most cap (0 when absent). */
static uint64_t spare_counted(const char *path, uint64_t cap)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_blocks * 512u < cap ? (uint64_t)st.st_blocks * 512u : cap;
}

/* The operator aborts the attempt in flight; the next one opens, or the
 * storage gate holds it (phase idle). */
static int abort_and_reopen(struct sim *s)
{
    fa_error err;
    int phase;
    must(fa_fed_admin_abort(s->f, "ops", s->now, &err), &err);
    position(s, NULL, NULL, &phase, NULL);
    return phase;
}

/* After a test that sets test switches, failed or not: none for the next. */
static int unset_failpoints(void **state)
{
    (void)state;
    return unsetenv("FEDAGG_FAILPOINTS");
}

/* The round's sum and the optimizer state are written over spare files,
 * so the storage gate counts their blocks as free: with the free space put
 * exactly where they decide (test switch fed-storage-short), an attempt
 * opens with both, not without either, nor with a spare it could not use
 * (a second name), nor with a byte less; then it opens again by itself. */
static void test_storage_gate_counts_spares(void **state)
{
#ifndef FA_TEST_HOOKS
    /* A build without test hooks ignores the switch: with the free space
     * said to be short by far more than the disk has, an attempt opens. */
    struct sim *s0 = sim_new(1000);
    (void)state;
    setenv("FEDAGG_FAILPOINTS", "fed-storage-short=18446744073709551615", 1);
    assert_int_equal(abort_and_reopen(s0), FEDAGG__PHASE__PHASE_ADVERTISE);
    sim_del(s0);
    return;
#endif
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    char sum_spare[800], state_spare[800], away[800], sv[64];
    uint64_t counted;
    int phase;
    (void)state;

    for (uint64_t r = 1; r <= 3; r++) { /* keep_versions 3: the third retires version 0 */
        clients_new(s);
        run_to_masked(s, all, NR);
        upload_all_and_close(s);
        run_to_end(s, all, NR, r, 0);
    }
    snprintf(sum_spare, sizeof(sum_spare), "%s/store/round.sum-spare", s->dir);
    snprintf(state_spare, sizeof(state_spare), "%s/store/state.spare", s->dir);
    /* the sum's words (the weight coordinate too), FedAvgM's one vector */
    counted = spare_counted(sum_spare, 4 * ((uint64_t)s->d + 1)) +
              spare_counted(state_spare, 4 * (uint64_t)s->d);
    assert_true(spare_counted(sum_spare, 1) == 1 && spare_counted(state_spare, 1) == 1);
    snprintf(sv, sizeof(sv), "fed-storage-short=%llu", (unsigned long long)counted);
    setenv("FEDAGG_FAILPOINTS", sv, 1);
    assert_int_equal(abort_and_reopen(s), FEDAGG__PHASE__PHASE_ADVERTISE);
    /* without the state's spare, or without the sum's */
    snprintf(away, sizeof(away), "%s.away", state_spare);
    assert_int_equal(rename(state_spare, away), 0);
    assert_int_equal(abort_and_reopen(s), FEDAGG__PHASE__PHASE_IDLE);
    assert_int_equal(rename(away, state_spare), 0);
    s->now += 61000; /* past any back-off: the gate checks again, and opens */
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    snprintf(away, sizeof(away), "%s.away", sum_spare);
    assert_int_equal(rename(sum_spare, away), 0);
    assert_int_equal(abort_and_reopen(s), FEDAGG__PHASE__PHASE_IDLE);
    assert_int_equal(rename(away, sum_spare), 0);
    /* a second name: the sum is not written over it, so it counts for nothing */
    assert_int_equal(link(sum_spare, away), 0);
    s->now += 61000;
    fa_fed_tick(s->f, s->now);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    assert_int_equal(unlink(away), 0);
    s->now += 61000;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    /* one byte more than the spares hold */
    snprintf(sv, sizeof(sv), "fed-storage-short=%llu", (unsigned long long)counted + 1);
    setenv("FEDAGG_FAILPOINTS", sv, 1);
    assert_int_equal(abort_and_reopen(s), FEDAGG__PHASE__PHASE_IDLE);
    unsetenv("FEDAGG_FAILPOINTS");
    s->now += 61000;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    sim_del(s);
}

static void test_below_threshold_aborts_attempt(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    uint64_t round, version;
    uint32_t attempt;
    fa_fed_reply r = {0};

    clients_new(s);
    run_to_masked(s, all, NR);
    upload(s, 0); /* one of three: below t = 2 at the deadline */
    s->now += 1500;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, &round, &attempt, NULL, &version);
    assert_int_equal(round, 1);
    assert_int_equal(attempt, 1);
    assert_int_equal(version, 0);
    /* the old attempt's long-polls learn it */
    assert_int_equal(fa_fed_poll(s->f, FA_FED_MASKED, ids[0], 1, 0, &r), 1);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 409);
    fa_fed_reply_free(&r);
    /* the next attempt, with fresh keys, succeeds */
    clients_new(s);
    run_to_masked(s, all, NR);
    finish_round_1(s, 1);
    sim_del(s);
}

/* ---------------------------------------------------------------------- */
/* Any model                                                               */
/* ---------------------------------------------------------------------- */

/* A small state_dict as PyTorch has them: a BF16 weight, an F32 bias, a
 * BatchNorm's F32 statistics and I64 counter, a BOOL buffer. */
static const float emb0[6] = {0.5f, -0.25f, 1.0f, 2.0f, -1.0f, 0.125f}; /* exact in BF16 */
static const float bias0[3] = {0.1f, -0.2f, 0.3f};
static const float mean0[3] = {1.0f, 2.0f, 3.0f};

static void make_mixed_model(const char *dir)
{
    uint16_t emb[6];
    int64_t count = 7;
    uint8_t mask[4] = {1, 0, 1, 1};
    uint64_t s23[2] = {2, 3}, s3[1] = {3}, s4[1] = {4};
    char path[512];
    fa_error err;

    for (int i = 0; i < 6; i++)
        emb[i] = fa_st_f32_to_bf16(emb0[i]);
    fa_st_view v[] = {
        {.name = "emb.weight", .dtype = FA_ST_BF16, .ndim = 2, .shape = s23, .data = emb},
        {.name = "head.bias", .dtype = FA_ST_F32, .ndim = 1, .shape = s3, .data = bias0},
        {.name = "bn.running_mean", .dtype = FA_ST_F32, .ndim = 1, .shape = s3, .data = mean0},
        {.name = "bn.num_batches_tracked", .dtype = FA_ST_I64, .ndim = 0, .data = &count},
        {.name = "mask", .dtype = FA_ST_BOOL, .ndim = 1, .shape = s4, .data = mask},
    };
    snprintf(path, sizeof(path), "%s/init.safetensors", dir);
    {
        /* the model's own metadata, which every version carries on */
        const char *meta[] = {"format", "pt", "arch.note", "emb 2x3, head 3"};
        must(fa_st_save(path, 0644, v, 5, meta, 2, &err), &err);
    }
}

/* Published in full (model_delta off): version v is its master weights in
 * the model's dtypes.  MIXED_MODEL_DELTA: the default, as deltas. */
#define MIXED_MODEL                                                                                \
    "model { init_file: \"init.safetensors\" federated { exclude: [\"bn.*\"] } }\n"                \
    "optimizer { kind: FEDAVG learning_rate: 1.0 }\n"                                              \
    "quantization { bits: 16 max_examples: 100 }\n"                                                \
    "model_delta { enabled: false }\n"
#define MIXED_MODEL_DELTA                                                                          \
    "model { init_file: \"init.safetensors\" federated { exclude: [\"bn.*\"] } }\n"                \
    "optimizer { kind: FEDAVG learning_rate: 1.0 }\n"                                              \
    "quantization { bits: 16 max_examples: 100 }\n"

static fa_safetensors *open_store_file(struct sim *s, const char *name)
{
    char path[600];
    fa_safetensors *st;
    fa_error err;
    snprintf(path, sizeof(path), "%s/store/%s", s->dir, name);
    must(fa_st_open(&st, path, &err), &err);
    return st;
}

/* The ranges a model file publishes, by tensor name. */
static float range_of(const fa_safetensors *st, const char *name)
{
    fa_tensors *t;
    const fa_tensor *x;
    float r;
    must(fa_tensors_from_st(&t, st, NULL), NULL);
    x = fa_tensors_find(t, name);
    assert_non_null(x);
    assert_true(x->federated);
    r = x->range;
    fa_tensors_del(t);
    return r;
}

/* The same mixed model (BF16 and F32 federated, BatchNorm and an integer
 * buffer not) published as deltas: version 1's federated tensors are the
 * reconstruction from version 0 and the steps against the master, the
 * others byte for byte; the delta file rebuilds model-1 exactly with the
 * region's function; the master is kept; a region holding version 0 is
 * served the delta, any other the full file. */
/* The tensors these federations leave alone (a BatchNorm
 * statistic, its counter, a frozen mask) are byte for byte the same in
 * versions v0 and v1. */
static void same_unfederated(const fa_safetensors *v0, const fa_safetensors *v1)
{
    const char *names[] = {"bn.running_mean", "bn.num_batches_tracked", "mask"};
    fa_error err;
    for (int k = 0; k < 3; k++) {
        const fa_st_tensor *a = fa_st_find(v0, names[k]), *b = fa_st_find(v1, names[k]);
        uint8_t x[64], y[64];
        assert_int_equal(a->end - a->begin, b->end - b->begin);
        must(fa_st_read(v0, a, x, sizeof(x), &err), &err);
        must(fa_st_read(v1, b, y, sizeof(y), &err), &err);
        assert_memory_equal(x, y, a->end - a->begin);
    }
}

/* A width of the delta (bits 0: the config's default) and its config. */
struct delta_case {
    const char *config;
    unsigned bits;
};
static const struct delta_case delta_default = {MIXED_MODEL_DELTA, 0},
                               delta_8 = {MIXED_MODEL_DELTA "model_delta { bits: 8 }\n", 8},
                               delta_4 = {MIXED_MODEL_DELTA "model_delta { bits: 4 }\n", 4};

static const unsigned delta_bits8 = 8, delta_bits4 = 4;

static void test_any_model_round_delta(void **state)
{
    const struct delta_case *dc = *state;
    const Fedagg__ModelDelta defaults = FEDAGG__MODEL_DELTA__INIT;
    const unsigned bits = dc->bits ? dc->bits : defaults.bits;
    struct sim *s = sim_new_model(1000, dc->config, make_mixed_model);
    fa_safetensors *v0, *v1, *m1, *d1;
    uint8_t sha[32], want[32], dsha[32], rebuilt[32];
    uint64_t version;
    char path[4096], p0[600], pd[600], out[600];
    float master[6], pub[6], r_emb, r_bias;
    fa_delta_info info;
    fa_error err;
    (void)state;

    v0 = open_store_file(s, "model-00000000.safetensors");
    r_emb = range_of(v0, "emb.weight");
    r_bias = range_of(v0, "head.bias");
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < 9; j++)
            s->delta[i][j] = 0.01f * (float)(i + 1) * (float)(j - 4) / (j < 6 ? r_emb : r_bias);
    finish_round_1_all(s);

    v1 = open_store_file(s, "model-00000001.safetensors");
    m1 = open_store_file(s, "master-00000001.safetensors");
    must(fa_st_read_f32(m1, fa_st_find(m1, "emb.weight"), master, 6, &err), &err);
    {
        /* emb.weight (BF16): the reconstruction of the steps against the master */
        uint16_t base[6], got[6], wantb[6];
        int8_t q[6];
        float sc[1];
        must(fa_st_read(v0, fa_st_find(v0, "emb.weight"), base, sizeof(base), &err), &err);
        must(fa_st_read(v1, fa_st_find(v1, "emb.weight"), got, sizeof(got), &err), &err);
        fa_delta_encode(FA_ST_BF16, base, master, 6, 256, bits, q, sc);
        fa_delta_apply(FA_ST_BF16, base, q, sc, 6, 256, wantb);
        assert_memory_equal(got, wantb, sizeof(got));
        must(fa_st_read_f32(v1, fa_st_find(v1, "emb.weight"), pub, 6, &err), &err);
        for (int j = 0; j < 6; j++) /* within a step and a BF16 rounding of the master */
            assert_true(fabsf(pub[j] - master[j]) <= sc[0] / 2 + fabsf(master[j]) / 128 + 1e-6f);
    }
    same_unfederated(v0, v1);
    fa_st_del(v0);
    fa_st_del(v1);
    fa_st_del(m1);
    /* The delta file's steps in the layout of its width. */
    d1 = open_store_file(s, "delta-00000001.safetensors");
    {
        const fa_st_tensor *q = fa_st_find(d1, "q.emb.weight");
        assert_non_null(q);
        assert_int_equal(q->dtype, bits == 4 ? FA_ST_U8 : FA_ST_I8);
        assert_int_equal(q->numel, bits == 4 ? 3 : 6);
        q = fa_st_find(d1, "q.head.bias"); /* 3 elements: an odd tail */
        assert_non_null(q);
        assert_int_equal(q->numel, bits == 4 ? 2 : 3);
        assert_int_equal(strtoul(fa_st_metadata_get(d1, FA_DELTA_META_BITS), NULL, 10), bits);
    }
    fa_st_del(d1);
    /* The region's rebuild from version 0 and the delta is model-1, byte for byte. */
    snprintf(p0, sizeof(p0), "%s/store/model-00000000.safetensors", s->dir);
    snprintf(pd, sizeof(pd), "%s/store/delta-00000001.safetensors", s->dir);
    snprintf(out, sizeof(out), "%s/rebuilt.safetensors", s->dir);
    must(fa_delta_reconstruct(p0, pd, out, rebuilt, &info, &err), &err);
    assert_int_equal(info.from, 0);
    assert_int_equal(info.to, 1);
    assert_int_equal(info.bits, bits);
    assert_int_equal(info.quantised, 9);
    must(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &version, want), NULL);
    assert_memory_equal(rebuilt, want, 32);
    /* Served: the delta against version 0 only. */
    assert_int_equal(fa_fed_model_delta_for(s->f, "eu-west", UINT64_MAX, 0, path, sizeof(path),
                                            &version, sha, dsha),
                     0);
    assert_non_null(strstr(path, "delta-00000001.safetensors"));
    assert_memory_equal(sha, want, 32);
    assert_int_equal(fa_fed_model_delta_for(s->f, "eu-west", UINT64_MAX, 1, path, sizeof(path),
                                            &version, sha, dsha),
                     FA_ERR_NOTFOUND);
    assert_int_equal(
        fa_fed_model_delta_for(s->f, "eu-west", 0, 0, path, sizeof(path), &version, sha, dsha),
        FA_ERR_NOTFOUND);
    /* A restart resumes from the master weights with deltas on. */
    fa_fed_close(s->f);
    sim_open(s);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 1);
    sim_del(s);
}

/* A model whose one federated tensor spans several chunks of the
 * aggregator's streaming step (2^18 elements) and ends on an odd count: a
 * BF16 tensor of 2 * 2^18 + 4097 elements and an F32 bias of 5. */
#define BIG_N (2 * (1u << 18) + 4097)
static void make_big_model(const char *dir)
{
    uint16_t *w = malloc(BIG_N * sizeof(*w));
    const float b[5] = {0.5f, -0.5f, 0.25f, 0.0f, 1.0f};
    uint64_t sw[1] = {BIG_N}, sb[1] = {5};
    char path[512];
    fa_error err;

    assert_non_null(w);
    for (uint32_t i = 0; i < BIG_N; i++)
        w[i] = fa_st_f32_to_bf16(sinf((float)i * 0.001f));
    fa_st_view v[] = {
        {.name = "w", .dtype = FA_ST_BF16, .ndim = 1, .shape = sw, .data = w},
        {.name = "b", .dtype = FA_ST_F32, .ndim = 1, .shape = sb, .data = b},
    };
    snprintf(path, sizeof(path), "%s/init.safetensors", dir);
    must(fa_st_save(path, 0644, v, 2, NULL, 0, &err), &err);
    free(w);
}

#define BIG_MODEL                                                                                  \
    "model { init_file: \"init.safetensors\" }\n"                                                  \
    "optimizer { kind: FEDAVG learning_rate: 1.0 }\n"                                              \
    "quantization { bits: 16 max_examples: 100 }\n"

/* At both widths (*state: 8 or 4): the delta of a tensor across chunks
 * rebuilds the published file byte for byte, its steps laid out for the
 * whole tensor (ceil(n / 2) bytes at 4 bits, the odd tail padded). */
static void test_delta_across_chunks(void **state)
{
    const unsigned bits = *(const unsigned *)*state;
    char cfg[512], p0[600], pd[600], out[600], path[4096];
    struct sim *s;
    fa_safetensors *d1;
    const fa_st_tensor *q;
    uint8_t rebuilt[32], want[32];
    uint64_t version;
    fa_delta_info info;
    fa_error err;

    snprintf(cfg, sizeof(cfg), "%smodel_delta { bits: %u }\n", BIG_MODEL, bits);
    s = sim_new_model(1000, cfg, make_big_model);
    assert_int_equal(s->d, BIG_N + 5);
    for (int i = 0; i < NR; i++) /* a delta that changes along the tensor */
        for (size_t j = 0; j < s->d; j++)
            s->delta[i][j] =
                0.001f * (float)(i + 1) * cosf((float)j * 0.0007f) * (float)(1 + (j >> 17));
    finish_round_1_all(s);
    d1 = open_store_file(s, "delta-00000001.safetensors");
    q = fa_st_find(d1, "q.w");
    assert_non_null(q);
    assert_int_equal(q->dtype, bits == 4 ? FA_ST_U8 : FA_ST_I8);
    assert_int_equal(q->numel, bits == 4 ? BIG_N / 2 + 1 : BIG_N);
    if (bits == 4) { /* the padding nibble after the last step */
        uint8_t last;
        must(fa_st_read_range(d1, q, q->numel - 1, &last, 1, &err), &err);
        assert_int_equal(last >> 4, 0);
    }
    fa_st_del(d1);
    snprintf(p0, sizeof(p0), "%s/store/model-00000000.safetensors", s->dir);
    snprintf(pd, sizeof(pd), "%s/store/delta-00000001.safetensors", s->dir);
    snprintf(out, sizeof(out), "%s/rebuilt.safetensors", s->dir);
    must(fa_delta_reconstruct(p0, pd, out, rebuilt, &info, &err), &err);
    assert_int_equal(info.bits, bits);
    assert_int_equal(info.quantised, BIG_N + 5);
    must(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &version, want), NULL);
    assert_int_equal(version, 1);
    assert_memory_equal(rebuilt, want, 32);
    sim_del(s);
}

static void test_any_model_round(void **state)
{
    struct sim *s = sim_new_model(1000, MIXED_MODEL, make_mixed_model);
    Fedagg__FederationInfo *fi;
    fa_safetensors *v0, *v1, *m1;
    uint8_t *info, digest[32], sha[32];
    size_t len;
    uint64_t version;
    char path[4096];
    float master[9], r_emb, r_bias, scaled[NR][9];
    fa_error err;
    (void)state;

    /* Only the two floating tensors outside bn.* are federated: 6 + 3. */
    assert_int_equal(s->d, 9);
    must(fa_fed_info(s->f, s->now, &info, &len, &err), &err);
    fi = fedagg__federation_info__unpack(NULL, len, info);
    free(info);
    assert_int_equal(fi->num_tensors, 5);
    assert_true(fi->quant->per_tensor);
    assert_int_equal(fi->quant->clip_mode, FA_SECAGG_CLIP_COORDINATE);
    assert_true(fi->quant->clip_value == 1.0);
    assert_int_equal(fi->quant->l2_clip_mode, FEDAGG__CLIP_MODE__CLIP_NONE);
    /* The digest names the table of the published model. */
    v0 = open_store_file(s, "model-00000000.safetensors");
    {
        fa_tensors *t;
        must(fa_tensors_from_st(&t, v0, &err), &err);
        must(fa_tensors_digest(t, digest, &err), &err);
        assert_int_equal(fa_tensors_fed_count(t), 2);
        fa_tensors_del(t);
    }
    assert_int_equal(fi->tensor_table_digest.len, 32);
    assert_memory_equal(fi->tensor_table_digest.data, digest, 32);
    fedagg__federation_info__free_unpacked(fi, NULL);
    /* Version 0 keeps every tensor's dtype; first ranges from the weights:
     * max(1.0 x max|w|, 1.0) (range_initial, range_initial_min). */
    assert_int_equal(fa_st_find(v0, "emb.weight")->dtype, FA_ST_BF16);
    assert_int_equal(fa_st_find(v0, "bn.num_batches_tracked")->dtype, FA_ST_I64);
    r_emb = range_of(v0, "emb.weight");
    r_bias = range_of(v0, "head.bias");
    assert_true(r_emb == 2.0f);
    assert_true(r_bias == 1.0f);

    /* Each region sends its delta divided by the tensor's range. */
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < 9; j++) {
            float d = 0.01f * (float)(i + 1) * (float)(j - 4);
            scaled[i][j] = d / (j < 6 ? r_emb : r_bias);
            s->delta[i][j] = scaled[i][j];
        }
    finish_round_1_all(s);

    /* Version 1: BF16 published, float32 master beside it, the others byte
     * for byte as they were. */
    v1 = open_store_file(s, "model-00000001.safetensors");
    m1 = open_store_file(s, "master-00000001.safetensors");
    assert_string_equal(fa_st_metadata_get(v1, "arch.note"), "emb 2x3, head 3");
    assert_string_equal(fa_st_metadata_get(v0, "arch.note"), "emb 2x3, head 3");
    assert_int_equal(fa_st_find(v1, "emb.weight")->dtype, FA_ST_BF16);
    assert_int_equal(fa_st_find(m1, "emb.weight")->dtype, FA_ST_F32);
    must(fa_st_read_f32(m1, fa_st_find(m1, "emb.weight"), master, 6, &err), &err);
    must(fa_st_read_f32(m1, fa_st_find(m1, "head.bias"), master + 6, 3, &err), &err);
    for (int j = 0; j < 9; j++) {
        double mean = 0.01 * 2.0 * (j - 4); /* (1 + 2 + 3) / 3 = 2 */
        double before = j < 6 ? emb0[j] : bias0[j - 6];
        double step = (j < 6 ? r_emb : r_bias) / 32767.0;
        assert_true(fabs(master[j] - before - mean) <= 2 * step);
    }
    {
        float pub[6];
        must(fa_st_read_f32(v1, fa_st_find(v1, "emb.weight"), pub, 6, &err), &err);
        for (int j = 0; j < 6; j++)
            assert_true(pub[j] == fa_st_bf16_to_f32(fa_st_f32_to_bf16(master[j])));
    }
    same_unfederated(v0, v1);
    /* The next round's ranges: max(8 x max|mean delta|, 0.01 x max|w|, 0.001):
     * emb's mean delta reaches 0.08 (j = 0), head.bias's 0.08 too (j = 8). */
    assert_true(fabsf(range_of(v1, "emb.weight") - 8 * 0.08f) < 1e-3f);
    assert_true(fabsf(range_of(v1, "head.bias") - 8 * 0.08f) < 1e-3f);
    /* ?dtype=f32 serves the master file with its own digest. */
    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 1, path, sizeof(path), &version, sha), 0);
    assert_non_null(strstr(path, "master-00000001.safetensors"));
    {
        struct fa_model_version mv;
        fa_model_store *store;
        char sdir[512];
        snprintf(sdir, sizeof(sdir), "%s/store", s->dir);
        must(fa_model_store_open(&store, sdir, 3, &err), &err);
        must(fa_model_store_current(store, &mv), NULL);
        assert_memory_equal(sha, mv.master_sha256, 32);
        fa_model_store_del(store);
    }
    fa_st_del(v0);
    fa_st_del(v1);
    fa_st_del(m1);

    /* A restart resumes from the master weights: the info is the same. */
    fa_fed_close(s->f);
    sim_open(s);
    must(fa_fed_info(s->f, s->now, &info, &len, &err), &err);
    fi = fedagg__federation_info__unpack(NULL, len, info);
    free(info);
    assert_int_equal(fi->model_version, 1);
    assert_memory_equal(fi->tensor_table_digest.data, digest, 32);
    fedagg__federation_info__free_unpacked(fi, NULL);

    /* The selection cannot change under a running federation. */
    fa_fed_close(s->f);
    s->f = NULL;
    protobuf_c_message_free_unpacked(&s->cfg->base, NULL);
    s->model_txt = "model { init_file: \"init.safetensors\" }\n"
                   "optimizer { kind: FEDAVG learning_rate: 1.0 }\n"
                   "quantization { bits: 16 max_examples: 100 }\n";
    write_config(s, 1000);
    fa_error_clear(&err);
    assert_int_equal(fa_fed_open(&s->f, s->cfg, NULL, s->now, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "bn.running_mean"));
    assert_non_null(strstr(err.msg, "model.federated"));
    assert_null(s->f);
    protobuf_c_message_free_unpacked(&s->cfg->base, NULL);
    s->model_txt = MIXED_MODEL;
    write_config(s, 1000);
    sim_open(s);
    sim_del(s);
}

/* A region's signed evaluation report of the current version. */
static size_t eval_report(struct sim *s, int i, const char *as_region, uint64_t version, uint64_t n,
                          double loss, double accuracy, int bad_sig, uint8_t **out)
{
    Fedagg__EvalStatement st = FEDAGG__EVAL_STATEMENT__INIT;
    Fedagg__SignedEval se = FEDAGG__SIGNED_EVAL__INIT;
    Fedagg__NamedValue f1 = FEDAGG__NAMED_VALUE__INIT, *mv[1] = {&f1};
    uint8_t sha[32], sig[64], *stb;
    char path[4096];
    uint64_t v;
    size_t len;

    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &v, sha), 0);
    st.federation_id = "unit";
    st.region = (char *)as_region;
    st.model_version = version;
    st.model_sha256.data = sha;
    st.model_sha256.len = 32;
    st.num_examples = n;
    st.loss = loss;
    st.accuracy = accuracy;
    f1.name = "f1";
    f1.value = accuracy - 0.1;
    st.n_metrics = 1;
    st.metrics = mv;
    len = fedagg__eval_statement__get_packed_size(&st);
    stb = malloc(len);
    fedagg__eval_statement__pack(&st, stb);
    must(fa_identity_sign_statement(s->seed[i], FA_IDENTITY_DOMAIN_EVAL, stb, len, sig), NULL);
    if (bad_sig)
        sig[0] ^= 1;
    se.statement.data = stb;
    se.statement.len = len;
    se.signature.data = sig;
    se.signature.len = 64;
    len = fedagg__signed_eval__get_packed_size(&se);
    *out = malloc(len);
    fedagg__signed_eval__pack(&se, *out);
    free(stb);
    return len;
}

static int submit_eval(struct sim *s, int i, const uint8_t *b, size_t len, int *status)
{
    fa_fed_reply r = {0};
    int rc = fa_fed_submit_eval(s->f, ids[i], b, len, &r);
    *status = rc ? fa_api_http_status(r.code, r.internal) : 200;
    fa_fed_reply_free(&r);
    return rc;
}

static void test_federated_evaluation(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    uint8_t *b, *rec;
    size_t len, rlen;
    int status;
    char *json;
    Fedagg__AuditRecord *r;
    fa_error err;
    (void)state;

    len = eval_report(s, 0, ids[0], 0, 100, 0.5, 0.8, 0, &b);
    assert_int_equal(submit_eval(s, 0, b, len, &status), 0);
    assert_int_equal(submit_eval(s, 0, b, len, &status), 0); /* a retry */
    free(b);
    len = eval_report(s, 0, ids[0], 0, 100, 0.5, 0.7, 0, &b); /* changed its mind */
    assert_int_equal(submit_eval(s, 0, b, len, &status), FA_ERR_EXISTS);
    assert_int_equal(status, 409);
    free(b);
    len = eval_report(s, 1, ids[1], 0, 300, 1.0, 0.6, 1, &b); /* bad signature */
    assert_int_equal(submit_eval(s, 1, b, len, &status), FA_ERR_VERIFY);
    assert_int_equal(status, 400);
    free(b);
    len = eval_report(s, 1, ids[2], 0, 300, 1.0, 0.6, 0, &b); /* naming another region */
    assert_int_equal(submit_eval(s, 1, b, len, &status), FA_ERR_AUTH);
    assert_int_equal(status, 403);
    free(b);
    len = eval_report(s, 1, ids[1], 5, 300, 1.0, 0.6, 0, &b); /* another version */
    assert_int_equal(submit_eval(s, 1, b, len, &status), FA_ERR_REPLAY);
    assert_int_equal(status, 409);
    free(b);
    len = eval_report(s, 1, ids[1], 0, 300, 1.0, 1.5, 0, &b); /* accuracy out of range */
    assert_int_equal(submit_eval(s, 1, b, len, &status), FA_ERR_INVAL);
    free(b);
    assert_int_equal(submit_eval(s, 1, (const uint8_t *)"junk", 4, &status), FA_ERR_PARSE);
    len = eval_report(s, 1, ids[1], 0, 300, 1.0, 0.6, 0, &b);
    assert_int_equal(submit_eval(s, 1, b, len, &status), 0);
    free(b);
    /* Example-weighted: (0.8 x 100 + 0.6 x 300) / 400 = 0.65. */
    must(fa_fed_status_json(s->f, s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"federated_eval\""));
    assert_non_null(strstr(json, "\"accuracy\": 0.65") ? strstr(json, "\"accuracy\": 0.65")
                                                       : strstr(json, "\"accuracy\":0.65"));
    assert_non_null(strstr(json, "\"regions\":2"));
    free(json);

    /* The round trained from version 0 carries both statements. */
    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    run_to_end(s, all, NR, 1, 0);
    {
        fa_audit_log *log;
        char path[600];
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        fa_fed_close(s->f); /* the log is the aggregator's while it runs */
        s->f = NULL;
        must(fa_audit_log_open_readonly(&log, path, NULL, NULL, &err), &err);
        must(fa_audit_log_read(log, 0, &rec, &rlen, &err), &err);
        fa_audit_log_close(log);
        r = fedagg__audit_record__unpack(NULL, rlen, rec);
        assert_non_null(r);
        assert_int_equal(r->n_evaluations, 2);
        assert_non_null(r->federated_eval);
        assert_int_equal(r->federated_eval->model_version, 0);
        assert_int_equal(r->federated_eval->num_examples, 400);
        assert_true(fabs(r->federated_eval->accuracy - 0.65) < 1e-12);
        assert_int_equal(r->federated_eval->n_metrics, 1);
        assert_true(fabs(r->federated_eval->metrics[0]->value - 0.55) < 1e-12);
        assert_int_equal(r->tensor_table_digest.len, 32);
        fedagg__audit_record__free_unpacked(r, NULL);
        free(rec);
        /* audit verify checks both signatures. */
        {
            fa_audit_region_key keys[NR];
            fa_audit_verify_opts o;
            fa_audit_verify_result res;
            fa_note_verifier nv;
            char kp[600];
            uint8_t *kd;
            size_t kl;
            uint8_t aseed[32];
            snprintf(kp, sizeof(kp), "%s/audit.key", s->dir);
            must(fa_file_read_all(kp, &kd, &kl, 4096, &err), &err);
            must(fa_identity_parse_secret(kd, kl, aseed, &err), &err);
            free(kd);
            memset(&nv, 0, sizeof(nv));
            snprintf(nv.name, sizeof(nv.name), "unit.test/log");
            must(fa_identity_public_key(aseed, nv.pk), NULL);
            for (int i = 0; i < NR; i++) {
                keys[i].region = ids[i];
                memcpy(keys[i].pk, s->members[i].identity_pk, 32);
            }
            memset(&o, 0, sizeof(o));
            o.key = &nv;
            o.region_keys = keys;
            o.nregion_keys = NR;
            memset(&res, 0, sizeof(res));
            must(fa_audit_verify(path, &o, &res, &err), &err);
            assert_int_equal(res.eval_signatures, 2);
        }
    }
    sim_open(s);
    /* Version 1 is current: a late report on version 0 is refused. */
    len = eval_report(s, 2, ids[2], 0, 50, 1.0, 0.5, 0, &b);
    assert_int_equal(submit_eval(s, 2, b, len, &status), FA_ERR_REPLAY);
    free(b);
    sim_del(s);
}

/* Checks the sim's audit log with the aggregator's key and the regions'
 * keys (the aggregator closed). */
static void verify_sim_log(struct sim *s, fa_audit_verify_result *res)
{
    fa_audit_region_key keys[NR];
    fa_audit_verify_opts o;
    fa_note_verifier nv;
    char kp[600], path[600];
    uint8_t *kd, aseed[32];
    size_t kl;
    fa_error err;

    snprintf(kp, sizeof(kp), "%s/audit.key", s->dir);
    snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
    must(fa_file_read_all(kp, &kd, &kl, 4096, &err), &err);
    must(fa_identity_parse_secret(kd, kl, aseed, &err), &err);
    free(kd);
    memset(&nv, 0, sizeof(nv));
    snprintf(nv.name, sizeof(nv.name), "unit.test/log");
    must(fa_identity_public_key(aseed, nv.pk), NULL);
    for (int i = 0; i < NR; i++) {
        keys[i].region = ids[i];
        memcpy(keys[i].pk, s->members[i].identity_pk, 32);
    }
    memset(&o, 0, sizeof(o));
    o.key = &nv;
    o.region_keys = keys;
    o.nregion_keys = NR;
    memset(res, 0, sizeof(*res));
    must(fa_audit_verify(path, &o, res, &err), &err);
}

/* A region that reveals bad shares in the unmasking cannot stall the
 * round: with all three unmasking and t = 2, the secrets are rebuilt
 * without its shares, the round commits, and its audit record names it
 * (share_faults), which audit verify takes. */
static void test_bad_shares_do_not_stall(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    uint8_t *m, *a, *rec;
    size_t len, alen, rlen;
    uint64_t version;
    fa_error err;
    fa_audit_verify_result res;
    (void)state;

    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    for (int k = 0; k < NR; k++) {
        a = poll_ok(s, FA_FED_MASKED, k, 1, 0, &alen);
        must(fa_secagg_client_survivors(s->c[k], a, alen, 0, &m, &len, &err), &err);
        free(a);
        assert_int_equal(submit(s, FA_FED_CONSISTENCY, k, m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    for (int k = 0; k < NR; k++) {
        a = poll_ok(s, FA_FED_CONSISTENCY, k, 1, 0, &alen);
        must(fa_secagg_client_signatures(s->c[k], a, alen, 0, &m, &len, &err), &err);
        free(a);
        if (k == 0) { /* ap-south lies in every share it reveals */
            Fedagg__UnmaskShares *u = fedagg__unmask_shares__unpack(NULL, len, m);
            assert_non_null(u);
            for (size_t x = 0; x < u->n_self_mask_shares; x++)
                for (size_t b = 0; b < u->self_mask_shares[x]->share.len; b++)
                    u->self_mask_shares[x]->share.data[b] ^= (uint8_t)(0x11 + b);
            free(m);
            len = fedagg__unmask_shares__get_packed_size(u);
            m = malloc(len);
            fedagg__unmask_shares__pack(u, m);
            fedagg__unmask_shares__free_unpacked(u, NULL);
        }
        assert_int_equal(submit(s, FA_FED_UNMASK, k, m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    assert_int_equal(fa_fed_tick(s->f, s->now), 1);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 1);
    {
        fa_audit_log *log;
        Fedagg__AuditRecord *r;
        char path[600];
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        fa_fed_close(s->f);
        s->f = NULL;
        must(fa_audit_log_open_readonly(&log, path, NULL, NULL, &err), &err);
        must(fa_audit_log_read(log, 0, &rec, &rlen, &err), &err);
        fa_audit_log_close(log);
        r = fedagg__audit_record__unpack(NULL, rlen, rec);
        assert_non_null(r);
        assert_int_equal(r->n_participants, 3); /* its own update is in the sum */
        assert_int_equal(r->n_share_faults, 1);
        assert_string_equal(r->share_faults[0]->region, "ap-south");
        assert_string_equal(r->share_faults[0]->secret, "self_mask");
        fedagg__audit_record__free_unpacked(r, NULL);
        free(rec);
    }
    verify_sim_log(s, &res);
    assert_int_equal(res.records, 1);
    assert_int_equal(res.problems, 0);
    assert_int_equal(res.region_signatures, 3);
    sim_open(s);
    sim_del(s);
}

/* The audit log cut short under a running federation: within a second
 * the damage is found, the attempt in flight is abandoned (no model it
 * could not record is committed), /readyz says why, and no attempt opens
 * however long it waits. */
static void test_audit_damage_stops_rounds(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2};
    char path[600], why[512];
    uint64_t version;
    int phase;
    struct stat st;
    (void)state;

    finish_round_1_all(s);
    clients_new(s);
    run_to_masked(s, all, NR);
    snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 3), 0);
    assert_int_equal(fa_fed_ready(s->f, s->now, why, sizeof(why)), 1);
    s->now += 1000;
    fa_fed_tick(s->f, s->now);
    position(s, NULL, NULL, &phase, &version);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    assert_int_equal(version, 1);
    assert_int_equal(fa_fed_ready(s->f, s->now, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "the audit log is damaged"));
    assert_non_null(strstr(why, "fedagg audit repair"));
    for (int i = 0; i < 3; i++) {
        s->now += 120000;
        fa_fed_tick(s->f, s->now);
        position(s, NULL, NULL, &phase, NULL);
        assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    }
    sim_del(s);
}

/* A region cannot steer the federated means by the weight of its count: a
 * report claiming 1.8 x 10^19 examples (it made the accuracy 1, the loss
 * +Inf and the count negative in the status) is refused with 400, and so
 * is one whose loss, over a count within the bound, would make the mean
 * overflow; the honest reports make the means as before, and that region's
 * honest report is taken afterwards. */
static void test_evaluation_cannot_be_steered(void **state)
{
    struct sim *s = sim_new(1000);
    uint8_t *b;
    size_t len;
    int status;
    char *json;
    fa_fed_reply r = {0};
    fa_error err;
    (void)state;

    len = eval_report(s, 0, ids[0], 0, 100, 0.5, 0.8, 0, &b);
    assert_int_equal(submit_eval(s, 0, b, len, &status), 0);
    free(b);
    len = eval_report(s, 1, ids[1], 0, 18000000000000000000u, 0.5, 1.0, 0, &b);
    assert_int_equal(fa_fed_submit_eval(s->f, ids[1], b, len, &r), FA_ERR_RANGE);
    assert_int_equal(fa_api_http_status(r.code, r.internal), 400);
    assert_non_null(strstr(r.msg, "num_examples 18000000000000000000 is more than a region may "
                                  "claim (1000000000"));
    fa_fed_reply_free(&r);
    free(b);
    /* at the bound the count is taken, not a loss that overflows the sum */
    len = eval_report(s, 1, ids[1], 0, 1000000000u, 1e300, 1.0, 0, &b);
    assert_int_equal(fa_fed_submit_eval(s->f, ids[1], b, len, &r), FA_ERR_RANGE);
    assert_non_null(strstr(r.msg, "its loss over 1000000000 examples would make the federated "
                                  "mean overflow"));
    fa_fed_reply_free(&r);
    free(b);
    len = eval_report(s, 1, ids[1], 0, 1000000001u, 0.5, 1.0, 0, &b); /* one over */
    assert_int_equal(submit_eval(s, 1, b, len, &status), FA_ERR_RANGE);
    free(b);
    /* Nothing of the refused reports counts. */
    must(fa_fed_status_json(s->f, s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"num_examples\":100,") ? json : NULL);
    assert_null(strstr(json, "\"num_examples\":-"));
    free(json);
    len = eval_report(s, 1, ids[1], 0, 300, 1.0, 0.6, 0, &b);
    assert_int_equal(submit_eval(s, 1, b, len, &status), 0);
    free(b);
    must(fa_fed_status_json(s->f, s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"num_examples\":400,"));
    assert_non_null(strstr(json, "\"accuracy\": 0.65") ? json : strstr(json, "\"accuracy\":0.65"));
    free(json);
    sim_del(s);
}

static void make_evaluator(const char *dir)
{
    char path[512];
    const char *script = "#!/bin/sh\n"
                         "test -s \"$1\" || exit 3\n"
                         "printf '{\"num_examples\": 10, \"loss\": 2.5, \"accuracy\": 0.5, "
                         "\"metrics\": {\"v\": %s}}' \"$FEDAGG_VERSION\" > \"$2\"\n";
    snprintf(path, sizeof(path), "%s/eval.sh", dir);
    must(fa_file_write_atomic(path, script, strlen(script), 0755, NULL), NULL);
}

static void test_evaluator_command(void **state)
{
    char cmd[1024];
    struct sim *s;
    char *json = NULL;
    fa_error err;
    (void)state;

    snprintf(cmd, sizeof(cmd),
             "model { input_dim: 6 hidden: [5] output_dim: 3 }\n"
             "quantization { bits: 16 max_examples: 100 }\n"
             "evaluation { command: [\"sh\", \"eval.sh\", \"{input}\", \"{output}\"] "
             "timeout_s: 20 }\n");
    /* eval.sh is relative to the evaluator's directory: put it there too. */
    s = sim_new_model(1000, strdup(cmd), NULL);
    {
        char d[600];
        snprintf(d, sizeof(d), "%s/store/evaluator", s->dir);
        make_evaluator(d);
    }
    for (int k = 0; k < 200; k++) { /* the command runs for real: up to 20 s */
        fa_fed_tick(s->f, s->now);
        must(fa_fed_status_json(s->f, s->now, &json, &err), &err);
        if (strstr(json, "\"central_eval\""))
            break;
        free(json);
        json = NULL;
        usleep(100000);
    }
    assert_non_null(json);
    assert_non_null(strstr(json, "\"central_eval\""));
    assert_non_null(strstr(json, "\"num_examples\":10") ? json : NULL);
    assert_non_null(strstr(json, "\"v\":0"));
    free(json);
    free((char *)s->model_txt);
    sim_del(s);
}

/* A model whose round cannot fit the memory allowed is refused at start,
 * with the numbers. */
static void test_memory_budget(void **state)
{
    struct sim *s = calloc(1, sizeof(*s));
    fa_error err;
    (void)state;

    assert_int_equal(sodium_init() >= 0, 1);
    snprintf(s->dir, sizeof(s->dir), "/tmp/fa_test_fed.XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    for (int i = 0; i < NR; i++) {
        must(fa_identity_generate(s->seed[i], s->members[i].identity_pk, NULL), NULL);
        s->members[i].id = ids[i];
    }
    s->model_txt = "model { input_dim: 784 hidden: [256] output_dim: 10 }\n"
                   "optimizer { kind: FEDADAM }\n"
                   "memory_limit_bytes: 1000000\n";
    write_config(s, 1000);
    fa_error_clear(&err);
    assert_int_equal(fa_fed_open(&s->f, s->cfg, NULL, 1000, &err), FA_ERR_NOSPACE);
    assert_null(s->f);
    assert_non_null(strstr(err.msg, "MiB at the aggregator"));
    assert_non_null(strstr(err.msg, "secure-aggregation sum"));
    assert_non_null(strstr(err.msg, "memory_limit_bytes"));
    /* the transport's budget of buffered requests is one of the parts */
    assert_non_null(strstr(err.msg, "request bodies being received 256.0"));
    /* With room for it, it starts. */
    protobuf_c_message_free_unpacked(&s->cfg->base, NULL);
    s->model_txt = "model { input_dim: 784 hidden: [256] output_dim: 10 }\n"
                   "optimizer { kind: FEDADAM }\n"
                   "memory_limit_bytes: 100000000\n"
                   "quic { max_buffered_request_bytes: 33554432 "
                   "max_buffered_request_bytes_per_identity: 16777216 }\n";
    write_config(s, 1000);
    sim_open(s);
    sim_del(s);
}

/* Opened beside other federations of a process: its round must fit what
 * they leave of the budget, and every series carries its id. */
static void test_open_beside_others(void **state)
{
    struct sim *s = calloc(1, sizeof(*s));
    fa_fed_open_opts o = {0};
    fa_metrics *m = NULL;
    fa_error err;
    char *text;
    size_t len;
    (void)state;

    assert_int_equal(sodium_init() >= 0, 1);
    snprintf(s->dir, sizeof(s->dir), "/tmp/fa_test_fed.XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    for (int i = 0; i < NR; i++) {
        must(fa_identity_generate(s->seed[i], s->members[i].identity_pk, NULL), NULL);
        s->members[i].id = ids[i];
    }
    s->model_txt = "model { input_dim: 784 hidden: [256] output_dim: 10 }\n"
                   "optimizer { kind: FEDADAM }\n"
                   "memory_limit_bytes: 100000000\n"
                   "quic { max_buffered_request_bytes: 4000000 "
                   "max_buffered_request_bytes_per_identity: 1000000 }\n";
    write_config(s, 1000);
    must(fa_metrics_new(&m, &err), &err);
    o.metrics = m;
    o.metrics_label = 1;
    o.memory_used = 99000000;
    o.memory_others = 2;
    fa_error_clear(&err);
    assert_int_equal(fa_fed_open_ex(&s->f, s->cfg, &o, 1000, &err), FA_ERR_NOSPACE);
    assert_null(s->f);
    assert_non_null(strstr(err.msg, "secure-aggregation sum"));
    assert_non_null(strstr(err.msg, "of which the 2 other federations that can run a round hold "
                                    "94.4"));
    o.memory_used = 1000000;
    must(fa_fed_open_ex(&s->f, s->cfg, &o, 1000, &err), &err);
    assert_true(fa_fed_memory_need(s->f) > 4 * 203530); /* at least the sum */
    assert_true(fa_fed_memory_need(s->f) < 99000000);
    must(fa_metrics_render(m, &text, &len), NULL);
    assert_non_null(strstr(text, "fedagg_model_version{federation=\"unit\"} 0\n"));
    assert_non_null(
        strstr(text, "fedagg_region_connected{federation=\"unit\",region=\"eu-west\"} 0"));
    assert_null(strstr(text, "fedagg_model_version 0"));
    free(text);
    sim_del(s);
    fa_metrics_del(m);
}

/* Region i's signed decision on federation fed (NULL: "unit"); bad_sig: a
 * signature over another statement. */
static size_t decision(struct sim *s, int i, int accept, const char *reason, const char *fed,
                       int bad_sig, uint8_t **out)
{
    Fedagg__RegionDecision d = FEDAGG__REGION_DECISION__INIT;
    Fedagg__SignedDecision sd = FEDAGG__SIGNED_DECISION__INIT;
    uint8_t stmt[512], sig[64];
    size_t n, len;

    d.federation_id = (char *)(fed ? fed : "unit");
    d.region = (char *)ids[i];
    d.accept = accept;
    d.reason = (char *)reason;
    d.unix_ms = 1700000000000ull;
    n = fedagg__region_decision__pack(&d, stmt);
    must(fa_identity_sign_statement(s->seed[i], FA_IDENTITY_DOMAIN_DECISION, stmt, n, sig), NULL);
    if (bad_sig)
        stmt[n - 1] ^= 1;
    sd.statement.data = stmt;
    sd.statement.len = n;
    sd.signature.data = sig;
    sd.signature.len = 64;
    len = fedagg__signed_decision__get_packed_size(&sd);
    *out = malloc(len);
    fedagg__signed_decision__pack(&sd, *out);
    return len;
}

static int submit_decision(struct sim *s, const char *as, const uint8_t *b, size_t len,
                           int *changed, int *status)
{
    fa_fed_reply r = {0};
    int rc = fa_fed_submit_decision(s->f, as, b, len, changed, &r);
    *status = rc ? fa_api_http_status(r.code, r.internal) : 200;
    fa_fed_reply_free(&r);
    return rc;
}

/* A region refuses the offer: recorded once (a repeat adds nothing), its
 * advertisement refused with the reason, and the advertise phase closes
 * without waiting for it; forged and misdirected decisions are refused;
 * the decision survives a restart, and a change of mind is recorded. */
static void test_decisions(void **state)
{
    struct sim *s = sim_new(1000);
    const int two[] = {0, 1};
    int changed, status, phase, dec;
    const char *why;
    uint8_t *b, *m;
    size_t len;
    char *json;
    fa_error err;
    (void)state;

    clients_new(s);
    len = decision(s, 2, 0, "dataset fmnist: budget spent", NULL, 0, &b);
    assert_int_equal(submit_decision(s, "us-east", b, len, &changed, &status), 0);
    assert_int_equal(changed, 1);
    assert_int_equal(submit_decision(s, "us-east", b, len, &changed, &status), 0);
    assert_int_equal(changed, 0);
    /* another region cannot pass it off as its own */
    assert_int_equal(submit_decision(s, "eu-west", b, len, &changed, &status), FA_ERR_AUTH);
    assert_int_equal(status, 403);
    free(b);
    len = decision(s, 1, 0, "no", NULL, 1, &b);
    assert_int_equal(submit_decision(s, "eu-west", b, len, &changed, &status), FA_ERR_VERIFY);
    assert_int_equal(status, 400);
    free(b);
    len = decision(s, 1, 0, "no", "another", 0, &b);
    assert_int_equal(submit_decision(s, "eu-west", b, len, &changed, &status), FA_ERR_AUTH);
    free(b);
    assert_int_equal(submit_decision(s, "eu-west", (const uint8_t *)"junk", 4, &changed, &status),
                     FA_ERR_PARSE);
    assert_int_equal(status, 400);
    must(fa_fed_region_decision(s->f, "us-east", &dec, &why), NULL);
    assert_int_equal(dec, -1);
    assert_string_equal(why, "dataset fmnist: budget spent");
    must(fa_fed_region_decision(s->f, "eu-west", &dec, NULL), NULL);
    assert_int_equal(dec, 0);

    must(fa_secagg_client_advertise(s->c[2], &m, &len, &err), &err);
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 2, m, len, &status), FA_ERR_STATE);
    assert_int_equal(status, 409);
    free(m);
    for (int k = 0; k < 2; k++) {
        must(fa_secagg_client_advertise(s->c[two[k]], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, two[k], m, len, NULL), 0);
        free(m);
    }
    s->now += 1; /* long before the advertise deadline */
    fa_fed_tick(s->f, s->now);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_SHARES);
    must(fa_fed_admin_json(s->f, "regions", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"id\":\"us-east\""));
    assert_non_null(strstr(json, "\"decision\":\"refused\",\"decision_reason\":\"dataset fmnist: "
                                 "budget spent\""));
    free(json);

    /* Restarted: the log restores it; accepting again is a change. */
    fa_fed_close(s->f);
    s->f = NULL;
    sim_open(s);
    must(fa_fed_region_decision(s->f, "us-east", &dec, NULL), NULL);
    assert_int_equal(dec, -1);
    len = decision(s, 2, 1, "", NULL, 0, &b);
    assert_int_equal(submit_decision(s, "us-east", b, len, &changed, &status), 0);
    assert_int_equal(changed, 1);
    free(b);
    must(fa_fed_region_decision(s->f, "us-east", &dec, NULL), NULL);
    assert_int_equal(dec, 1);
    must(fa_fed_admin_json(s->f, "audit-head", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"tree_size\":2")); /* the two changes */
    free(json);
    sim_del(s);
}

/* A region's signed privacy statement for round/attempt. */
static size_t privacy_statement(struct sim *s, int i, uint64_t round, uint32_t attempt,
                                double eps_round, double eps_total, double budget, int bad_sig,
                                uint8_t **out)
{
    Fedagg__PrivacyStatement st = FEDAGG__PRIVACY_STATEMENT__INIT;
    Fedagg__SignedPrivacy sp = FEDAGG__SIGNED_PRIVACY__INIT;
    uint8_t sig[64], *b;
    size_t len;

    st.federation_id = "unit";
    st.region = (char *)ids[i];
    st.round = round;
    st.attempt = attempt;
    st.mechanism = "dp-sgd";
    st.noise_multiplier = 1.1;
    st.clip = 1.0;
    st.sampling_rate = 0.01;
    st.steps = 100;
    st.delta = 1e-5;
    st.epsilon_round = eps_round;
    st.epsilon_total = eps_total;
    st.budget_epsilon = budget;
    st.budget_delta = 1e-5;
    st.accountant = "rdp-sgm/tight";
    st.unit = "example";
    len = fedagg__privacy_statement__get_packed_size(&st);
    b = malloc(len);
    fedagg__privacy_statement__pack(&st, b);
    must(fa_identity_sign_statement(s->seed[i], FA_IDENTITY_DOMAIN_PRIVACY, b, len, sig), NULL);
    if (bad_sig)
        sig[3] ^= 1;
    sp.statement.data = b;
    sp.statement.len = len;
    sp.signature.data = sig;
    sp.signature.len = 64;
    len = fedagg__signed_privacy__get_packed_size(&sp);
    *out = malloc(len);
    fedagg__signed_privacy__pack(&sp, *out);
    free(b);
    return len;
}

static int submit_privacy(struct sim *s, int i, const uint8_t *b, size_t len, int *status)
{
    fa_fed_reply r = {0};
    int rc = fa_fed_submit_privacy(s->f, ids[i], b, len, &r);
    *status = rc ? fa_api_http_status(r.code, r.internal) : 200;
    fa_fed_reply_free(&r);
    return rc;
}

struct findings {
    int problems;
    char text[4096];
};

static void collect(void *ctx, int severity, int64_t index, const char *msg)
{
    struct findings *fd = ctx;
    size_t n = strlen(fd->text);
    (void)index;
    if (severity == FA_AUDIT_PROBLEM)
        fd->problems++;
    snprintf(fd->text + n, sizeof(fd->text) - n, "%s\n", msg);
}

/* One round with every region, its privacy statements submitted first. */
static void privacy_round(struct sim *s, uint64_t round, const double *eps_total,
                          const double *budget)
{
    const int all[] = {0, 1, 2};
    uint8_t *b;
    size_t len;
    int status;
    clients_new(s);
    for (int i = 0; i < NR; i++) {
        len = privacy_statement(s, i, round, 0, 0.1, eps_total[i], budget[i], 0, &b);
        assert_int_equal(submit_privacy(s, i, b, len, &status), 0);
        free(b);
    }
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    run_to_end(s, all, NR, round, 0);
}

static void test_privacy_ledger(void **state)
{
    struct sim *s = sim_new(1000);
    const double eps1[NR] = {0.5, 0.6, 0.7}, budget[NR] = {3, 3, 3};
    const double eps2[NR] = {1.0, 0.4 /* fell */, 3.5 /* over budget */};
    uint8_t *b;
    size_t len;
    int status;
    fa_error err;
    (void)state;

    /* Refusals: another attempt, a bad signature, totals below the round's. */
    len = privacy_statement(s, 0, 1, 1, 0.5, 0.5, 3, 0, &b);
    assert_int_equal(submit_privacy(s, 0, b, len, &status), FA_ERR_REPLAY);
    assert_int_equal(status, 409);
    free(b);
    len = privacy_statement(s, 0, 1, 0, 0.5, 0.5, 3, 1, &b);
    assert_int_equal(submit_privacy(s, 0, b, len, &status), FA_ERR_VERIFY);
    free(b);
    len = privacy_statement(s, 0, 1, 0, 0.5, 0.2, 3, 0, &b);
    assert_int_equal(submit_privacy(s, 0, b, len, &status), FA_ERR_INVAL);
    free(b);
    privacy_round(s, 1, eps1, budget);
    privacy_round(s, 2, eps2, budget);
    {
        char *json;
        must(fa_fed_status_json(s->f, s->now, &json, &err), &err);
        assert_non_null(strstr(json, "\"privacy\""));
        assert_non_null(strstr(json, "\"budget_epsilon\""));
        free(json);
    }
    fa_fed_close(s->f);
    s->f = NULL;
    /* The ledger in the log: every signature verifies, and the two regions
     * whose accounting is wrong are named. */
    {
        fa_audit_region_key keys[NR];
        fa_audit_verify_opts o;
        fa_audit_verify_result res;
        fa_note_verifier nv;
        struct findings fd = {0, ""};
        char kp[600], path[600];
        uint8_t *kd, aseed[32];
        size_t kl;
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        snprintf(kp, sizeof(kp), "%s/audit.key", s->dir);
        must(fa_file_read_all(kp, &kd, &kl, 4096, &err), &err);
        must(fa_identity_parse_secret(kd, kl, aseed, &err), &err);
        free(kd);
        memset(&nv, 0, sizeof(nv));
        snprintf(nv.name, sizeof(nv.name), "unit.test/log");
        must(fa_identity_public_key(aseed, nv.pk), NULL);
        for (int i = 0; i < NR; i++) {
            keys[i].region = ids[i];
            memcpy(keys[i].pk, s->members[i].identity_pk, 32);
        }
        memset(&o, 0, sizeof(o));
        o.key = &nv;
        o.region_keys = keys;
        o.nregion_keys = NR;
        o.report = collect;
        o.report_ctx = &fd;
        assert_int_equal(fa_audit_verify(path, &o, &res, &err), FA_ERR_VERIFY);
        assert_int_equal(res.privacy_signatures, 6);
        assert_int_equal(fd.problems, 2);
        assert_non_null(strstr(fd.text, "eu-west: epsilon_total fell from 0.6"));
        assert_non_null(strstr(fd.text, "does not add up"));
        assert_non_null(strstr(fd.text, "us-east: epsilon 3.5"));
        assert_non_null(strstr(fd.text, "exceeds the budget it declared"));
    }
    sim_open(s);
    sim_del(s);
}

/* Operators: pause after the round, resume, drain and admit a region, abort
 * an attempt; each in the signed audit log, which still verifies; the
 * history and documents the admin API serves; state kept over a restart. */
static void test_operators(void **state)
{
    struct sim *s = sim_new(1000);
    const int all[] = {0, 1, 2}, two[] = {0, 1};
    uint64_t round, version;
    uint32_t attempt;
    int phase, status;
    char *json;
    uint8_t *m;
    size_t len;
    fa_error err;
    (void)state;

    must(fa_fed_admin_pause(s->f, "alice", s->now, &err), &err);
    assert_int_equal(fa_fed_admin_pause(s->f, "alice", s->now, &err), FA_ERR_STATE);
    assert_non_null(strstr(err.msg, "already paused"));
    assert_int_equal(fa_fed_admin_resume(s->f, "", s->now, &err), FA_ERR_AUTH);
    /* The round in flight completes; no next one opens. */
    finish_round_1_all(s);
    position(s, &round, &attempt, &phase, &version);
    assert_int_equal(version, 1);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    s->now += 5000;
    fa_fed_tick(s->f, s->now);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    must(fa_fed_admin_json(s->f, "status", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"paused\":true"));
    assert_non_null(strstr(json, "\"paused_by\":\"alice\""));
    assert_non_null(strstr(json, "\"outcome\":\"completed\""));
    assert_non_null(strstr(json, "\"unmask\":"));
    assert_non_null(strstr(json, "\"participants\":[\"ap-south\",\"eu-west\",\"us-east\"]"));
    free(json);
    must(fa_fed_admin_resume(s->f, "alice", s->now, &err), &err);
    position(s, &round, &attempt, &phase, NULL);
    assert_int_equal(round, 2);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);

    /* us-east drained: its advertisement is refused with the reason. */
    assert_int_equal(fa_fed_admin_drain(s->f, "bob", "mars", 1, s->now, &err), FA_ERR_NOTFOUND);
    must(fa_fed_admin_drain(s->f, "bob", "us-east", 1, s->now, &err), &err);
    clients_new(s);
    must(fa_secagg_client_advertise(s->c[2], &m, &len, &err), &err);
    assert_int_equal(submit(s, FA_FED_ADVERTISE, 2, m, len, &status), FA_ERR_STATE);
    assert_int_equal(status, 409);
    free(m);
    /* The other two advertise; then an operator aborts the attempt. */
    for (int k = 0; k < 2; k++) {
        must(fa_secagg_client_advertise(s->c[two[k]], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, two[k], m, len, NULL), 0);
        free(m);
    }
    must(fa_fed_admin_abort(s->f, "alice", s->now, &err), &err);
    position(s, &round, &attempt, &phase, NULL);
    assert_int_equal(round, 2);
    assert_int_equal(attempt, 1);
    must(fa_fed_admin_drain(s->f, "bob", "us-east", 0, s->now, &err), &err);
    assert_int_equal(fa_fed_admin_drain(s->f, "bob", "us-east", 0, s->now, &err), FA_ERR_STATE);
    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    run_to_end(s, all, NR, 2, 1);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 2);
    must(fa_fed_admin_json(s->f, "rounds", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"outcome\":\"aborted\""));
    assert_non_null(strstr(json, "aborted by operator alice"));
    free(json);
    must(fa_fed_admin_json(s->f, "models", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"version\":2"));
    free(json);
    must(fa_fed_admin_json(s->f, "audit-head", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"tree_size\":7")); /* 2 rounds, 5 actions */
    free(json);
    assert_int_equal(fa_fed_admin_json(s->f, "nonsense", s->now, &json, &err), FA_ERR_INVAL);

    /* Paused again and restarted: it stays paused, the history is rebuilt. */
    must(fa_fed_admin_pause(s->f, "carol", s->now, &err), &err);
    fa_fed_close(s->f);
    s->f = NULL;
    {
        fa_audit_region_key keys[NR];
        fa_audit_verify_opts o;
        fa_audit_verify_result res;
        fa_note_verifier nv;
        char kp[600], path[600];
        uint8_t *kd, aseed[32];
        size_t kl;
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        snprintf(kp, sizeof(kp), "%s/audit.key", s->dir);
        must(fa_file_read_all(kp, &kd, &kl, 4096, &err), &err);
        must(fa_identity_parse_secret(kd, kl, aseed, &err), &err);
        free(kd);
        memset(&nv, 0, sizeof(nv));
        snprintf(nv.name, sizeof(nv.name), "unit.test/log");
        must(fa_identity_public_key(aseed, nv.pk), NULL);
        for (int i = 0; i < NR; i++) {
            keys[i].region = ids[i];
            memcpy(keys[i].pk, s->members[i].identity_pk, 32);
        }
        memset(&o, 0, sizeof(o));
        o.key = &nv;
        o.region_keys = keys;
        o.nregion_keys = NR;
        must(fa_audit_verify(path, &o, &res, &err), &err);
        assert_int_equal(res.records, 8);
    }
    sim_open(s);
    must(fa_fed_admin_json(s->f, "status", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"paused_by\":\"carol\""));
    assert_non_null(strstr(json, "\"version\":2"));
    free(json);
    position(s, &round, NULL, &phase, NULL);
    assert_int_equal(round, 3);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    must(fa_fed_admin_resume(s->f, "carol", s->now, &err), &err);
    position(s, &round, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    sim_del(s);
}

/* Distributed DP (aggregator/fed_ddp.c) in process: the regions' noisy ring
 * vectors (privacy/ddg.h, as worker/ddp.c makes them) are summed, and the
 * aggregator decodes the mean of the clipped updates into the model within
 * the noise; each record carries its DdpRound with the true number of noisy
 * contributions (2 of 3 in round 2); reopened, the aggregator rebuilds its
 * account from the log (round 3's total is the three rounds composed). */
static void test_ddp_rounds(void **state)
{
    static const char model[] =
        "model { input_dim: 6 hidden: [5] output_dim: 3 init_seed: 9 }\n"
        "optimizer { kind: FEDAVG learning_rate: 1.0 }\n"
        "quantization { bits: 16 clip: CLIP_COORDINATE clip_value: 0.5 max_examples: 100 "
        "range: RANGE_FIXED }\n"
        "model_delta { enabled: false }\n"
        "distributed_dp { enabled: true clip: 1.0 noise_multiplier: 0.02 min_regions: 3 bits: 8 "
        "}\n";
    const int all[] = {0, 1, 2}, two[] = {0, 1};
    const double norms[NR] = {0.5, 0.8, 3.0}; /* the third is clipped to 1 */
    struct sim *s = sim_new_model(1000, model, NULL);
    fa_ddg_config dc;
    fa_ddg_params p;
    uint8_t rot[32];
    float w0[53], w1[53];
    uint32_t *q = NULL;
    double noisy[3] = {3, 2, 3}, eps_total[3];
    fa_error err;
    (void)state;

    assert_int_equal(s->d, 53);
    memset(&dc, 0, sizeof(dc));
    dc.clip = 1.0;
    dc.noise_multiplier = 0.02;
    dc.min_regions = 3;
    dc.max_regions = NR;
    dc.bits = 8;
    dc.beta = exp(-0.5);
    dc.beta_wrap = 1e-9;
    dc.dim = s->d;
    must(fa_ddg_derive(&p, &dc, &err), &err);
    assert_int_equal(p.padded, 64);
    /* a ring narrower than quantization.bits: the float codec's bits the
     * federation announces must not exceed it */
    assert_true(p.ring_bits < 16);
    q = malloc((p.padded + 1) * sizeof(*q));
    assert_non_null(q);
    fa_ddg_rotation_seed("unit", rot);
    for (int i = 0; i < NR; i++) {
        double ss = 0;
        for (size_t j = 0; j < s->d; j++)
            ss += (double)s->delta[i][j] * s->delta[i][j];
        for (size_t j = 0; j < s->d; j++)
            s->delta[i][j] = (float)(s->delta[i][j] * norms[i] / sqrt(ss));
    }
    for (uint64_t round = 1; round <= 3; round++) {
        const int *who = round == 2 ? two : all;
        int nwho = round == 2 ? 2 : NR;
        model_params(s, w0);
        clients_new(s);
        run_to_masked(s, who, nwho);
        for (int k = 0; k < nwho; k++) {
            must(fa_ddg_encode(&p, s->delta[who[k]], rot, round, NULL, q, NULL, &err), &err);
            upload_ring(s, who[k], q, p.padded + 1);
        }
        s->now += 1;
        assert_int_equal(fa_fed_tick(s->f, s->now), 1);
        run_to_end(s, who, nwho, round, 0);
        model_params(s, w1);
        /* the new model is the old one plus the mean of the clipped updates
         * and the noise: z c / n a coordinate (n sigma2 gamma^2 / n^2) */
        double err2 = 0, expect = nwho * p.sigma2 * p.gamma * p.gamma / (nwho * nwho) * s->d;
        for (size_t j = 0; j < s->d; j++) {
            double mean = 0;
            for (int k = 0; k < nwho; k++)
                mean +=
                    s->delta[who[k]][j] * (norms[who[k]] > 1.0 ? 1.0 / norms[who[k]] : 1.0) / nwho;
            err2 += (w1[j] - w0[j] - mean) * (w1[j] - w0[j] - mean);
        }
        printf("# round %llu, %d regions: ||model step - clipped mean||^2 %.4g, the noise's %.4g\n",
               (unsigned long long)round, nwho, err2, expect);
        /* 53 coordinates: chi-squared, far inside [0.3, 2.5] x its mean; the
         * unclipped mean (round 1) would be 0.44 away */
        assert_true(err2 > 0.3 * expect && err2 < 2.5 * expect);
        if (round == 1) {
            /* reopened after round 1: the account is rebuilt from the log */
            fa_fed_close(s->f);
            s->f = NULL;
            sim_open(s);
        }
    }
    fa_fed_close(s->f);
    s->f = NULL;
    {
        fa_audit_log *log;
        fa_rdp_accountant *a;
        char path[600];
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        must(fa_audit_log_open_readonly(&log, path, NULL, NULL, &err), &err);
        assert_int_equal(fa_audit_log_size(log), 3);
        assert_int_equal(fa_rdp_accountant_new(&a, NULL, 0, NULL), 0);
        for (uint64_t i = 0; i < 3; i++) {
            uint8_t *rec;
            size_t rlen;
            fa_rdp_ddg_params rp = {0};
            Fedagg__AuditRecord *r;
            must(fa_audit_log_read(log, i, &rec, &rlen, &err), &err);
            r = fedagg__audit_record__unpack(NULL, rlen, rec);
            free(rec);
            assert_non_null(r);
            assert_non_null(r->ddp);
            assert_non_null(r->ddp->params);
            assert_int_equal(r->ddp->noisy_contributions, (uint32_t)noisy[i]);
            assert_int_equal(r->n_participants, (size_t)noisy[i]);
            assert_int_equal(r->ddp->params->padded_dim, 64);
            assert_int_equal(r->ddp->params->min_regions, 3);
            assert_true(r->ddp->params->sigma2 == p.sigma2);
            assert_int_equal(r->ddp->rounds_accounted, i + 1);
            rp.l2_sens = p.bound;
            rp.sigma2 = p.sigma2;
            rp.n_regions = (uint32_t)noisy[i];
            rp.dim = p.padded;
            assert_int_equal(fa_rdp_accountant_compose_ddg(a, &rp, 1, NULL), 0);
            assert_int_equal(fa_rdp_accountant_epsilon(a, 1e-5, FA_RDP_CONVERSION_TIGHT,
                                                       &eps_total[i], NULL, NULL),
                             0);
            printf("# record %llu: noisy_contributions %u epsilon_round %.6g epsilon_total %.6g\n",
                   (unsigned long long)i, r->ddp->noisy_contributions, r->ddp->epsilon_round,
                   r->ddp->epsilon_total);
            assert_true(fabs(r->ddp->epsilon_total - eps_total[i]) <= 1e-9 * eps_total[i]);
            fedagg__audit_record__free_unpacked(r, NULL);
        }
        fa_rdp_accountant_del(a);
        fa_audit_log_close(log);
    }
    free(q);
    sim_del(s);
}

/* ---- The promotion gate in the round (aggregator/fed_gov.c) ---- */

static const char gate_model[] =
    "model { input_dim: 6 hidden: [5] output_dim: 3 init_seed: 9 }\n"
    "optimizer { kind: FEDAVGM learning_rate: 1.0 momentum: 0.5 }\n"
    "quantization { bits: 16 clip: CLIP_COORDINATE clip_value: 0.5 max_examples: 100 "
    "range: RANGE_FIXED }\n"
    "promotion { enabled: true metric: \"accuracy\" tolerance: 0.05 min_regions: 2 "
    "channels: [\"staging\"] }\n";

/* Regions 0..n-1 state accuracy acc of the current version. */
static void gate_evals(struct sim *s, uint64_t version, double acc, int n)
{
    for (int i = 0; i < n; i++) {
        uint8_t *b;
        int status;
        size_t len = eval_report(s, i, ids[i], version, 100, 1.0 - acc, acc, 0, &b);
        assert_int_equal(submit_eval(s, i, b, len, &status), 0);
        free(b);
    }
}

/* Region i's signed data statement of the attempt in flight. */
static int gate_data(struct sim *s, int i, uint32_t attempt_delta, int *status)
{
    Fedagg__DataStatement st = FEDAGG__DATA_STATEMENT__INIT;
    Fedagg__SignedDataStatement sd = FEDAGG__SIGNED_DATA_STATEMENT__INIT;
    uint8_t sha[32], man[32], tr[32], sig[64], *stb, *body;
    char path[4096];
    uint64_t round, v;
    uint32_t attempt;
    size_t len, blen;
    fa_fed_reply r = {0};
    int rc;

    position(s, &round, &attempt, NULL, NULL);
    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &v, sha), 0);
    memset(man, 0x20 + i, 32);
    memset(tr, 0x44, 32);
    st.federation_id = "unit";
    st.region = (char *)ids[i];
    st.round = round;
    st.attempt = attempt + attempt_delta;
    st.model_version = v;
    st.model_sha256.data = sha;
    st.model_sha256.len = 32;
    st.dataset = "default";
    st.manifest_sha256.data = man;
    st.manifest_sha256.len = 32;
    st.num_examples = 100;
    st.trainer = "builtin";
    st.trainer_kind = "builtin";
    st.trainer_sha256.data = tr;
    st.trainer_sha256.len = 32;
    len = fedagg__data_statement__get_packed_size(&st);
    stb = malloc(len);
    fedagg__data_statement__pack(&st, stb);
    must(fa_identity_sign_statement(s->seed[i], FA_IDENTITY_DOMAIN_DATA, stb, len, sig), NULL);
    sd.statement.data = stb;
    sd.statement.len = len;
    sd.signature.data = sig;
    sd.signature.len = 64;
    blen = fedagg__signed_data_statement__get_packed_size(&sd);
    body = malloc(blen);
    fedagg__signed_data_statement__pack(&sd, body);
    rc = fa_fed_submit_data(s->f, ids[i], body, blen, &r);
    *status = rc ? fa_api_http_status(r.code, r.internal) : 200;
    fa_fed_reply_free(&r);
    free(body);
    free(stb);
    return rc;
}

static char *gate_json(struct sim *s)
{
    char *json;
    fa_error err;
    must(fa_fed_governance_json(s->f, &json, &err), &err);
    return json;
}

/* Candidates decided at the advertise close with their statements in the
 * record; the first promoted moves the gate's channel; a regression rolls
 * back to the last promoted version, byte for byte, abandoning the round
 * trained from the rejected one; releases of a rejected version refused,
 * of a promoted one served with their proof; a candidate with too few
 * statements expires at the unmask close; the participants' data
 * statements in the round's record; the whole log verifies with every
 * decision recomputed, and a restart keeps it all. */
static void test_promotion_gate(void **state)
{
    struct sim *s = sim_new_model(1000, gate_model, NULL);
    const int all[] = {0, 1, 2};
    uint8_t sha0[32], sha2[32], *m;
    uint64_t round, version, v;
    uint32_t attempt;
    char path[4096], *json, *proof = NULL;
    size_t len, plen;
    int phase, status;
    fa_error err;
    (void)state;

    /* Round 1: version 0's statements, then the advertisements. */
    assert_int_equal(fa_fed_model(s->f, 0, 0, path, sizeof(path), &v, sha0), 0);
    gate_evals(s, 0, 0.50, 2);
    clients_new(s);
    assert_int_equal(gate_data(s, 0, 1, &status), FA_ERR_REPLAY); /* another attempt */
    assert_int_equal(status, 409);
    for (int i = 0; i < NR; i++)
        assert_int_equal(gate_data(s, i, 0, &status), 0);
    run_to_masked(s, all, NR);
    json = gate_json(s);
    assert_non_null(strstr(json, "\"last_promoted\":0"));
    assert_non_null(strstr(json, "{\"channel\":\"staging\",\"version\":0"));
    free(json);
    finish_round_1(s, 0);

    /* Round 2: version 1 falls to 0.30 < 0.50 - 0.05: rejected, rolled back. */
    gate_evals(s, 1, 0.30, 3);
    clients_new(s);
    for (int i = 0; i < NR; i++) {
        must(fa_secagg_client_advertise(s->c[i], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, i, m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    fa_fed_tick(s->f, s->now);
    position(s, &round, &attempt, &phase, &version);
    assert_int_equal(round, 2);
    assert_int_equal(attempt, 1); /* the attempt trained from version 1 abandoned */
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    assert_int_equal(version, 2);
    assert_int_equal(fa_fed_model(s->f, UINT64_MAX, 0, path, sizeof(path), &v, sha2), 0);
    assert_memory_equal(sha2, sha0, 32); /* version 0 again, byte for byte */
    json = gate_json(s);
    assert_non_null(strstr(json, "\"rejections\":1"));
    assert_non_null(strstr(json, "\"rollbacks\":1"));
    assert_non_null(strstr(json, "\"rejections_in_a_row\":1"));
    free(json);
    assert_int_equal(fa_fed_admin_release(s->f, "alice", 1, "production", s->now, &err),
                     FA_ERR_STATE);
    assert_non_null(strstr(err.msg, "the gate rejected it"));
    assert_int_equal(fa_fed_admin_release(s->f, "alice", 0, "Prod", s->now, &err), FA_ERR_INVAL);
    must(fa_fed_admin_release(s->f, "alice", 0, "production", s->now, &err), &err);
    must(fa_fed_channel(s->f, "production", &v, sha2, path, sizeof(path), &proof, &plen, &err),
         &err);
    assert_int_equal(v, 0);
    assert_memory_equal(sha2, sha0, 32);
    assert_non_null(strstr(proof, "fedagg-audit-proof v1"));
    free(proof);
    assert_int_equal(fa_fed_channel(s->f, "canary", &v, sha2, NULL, 0, &proof, &plen, &err),
                     FA_ERR_NOTFOUND);
    must(fa_fed_model_card(s->f, 2, &json, &err), &err);
    assert_non_null(strstr(json, "\"by\":\"rollback\""));
    assert_non_null(strstr(json, "\"restores\":0"));
    free(json);
    must(fa_fed_model_card(s->f, 1, &json, &err), &err);
    assert_non_null(strstr(json, "\"status\":\"rejected\""));
    assert_non_null(strstr(json, "\"signature\":\"verified\"")); /* its round's data statements */
    free(json);

    /* The restored version is promoted again; round 2 completes from it. */
    gate_evals(s, 2, 0.50, 2);
    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    run_to_end(s, all, NR, 2, 1);
    position(s, &round, NULL, NULL, &version);
    assert_int_equal(version, 3);
    /* One statement of the two needed: version 3 expires when round 3's sum is in. */
    gate_evals(s, 3, 0.99, 1);
    clients_new(s);
    run_to_masked(s, all, NR);
    upload_all_and_close(s);
    run_to_end(s, all, NR, 3, 0);
    json = gate_json(s);
    assert_non_null(strstr(json, "{\"version\":3,\"made\":\"round\",\"outcome\":\"expired\""));
    assert_non_null(strstr(json, "\"last_promoted\":2"));
    free(json);

    /* The log verifies, every decision recomputed; a restart keeps it. */
    fa_fed_close(s->f);
    s->f = NULL;
    {
        fa_audit_region_key keys[NR];
        fa_audit_verify_opts o;
        fa_audit_verify_result res;
        fa_note_verifier nv;
        struct findings fd = {0, ""};
        char kp[600];
        uint8_t *kd, aseed[32];
        size_t kl;
        snprintf(path, sizeof(path), "%s/store/audit.log", s->dir);
        snprintf(kp, sizeof(kp), "%s/audit.key", s->dir);
        must(fa_file_read_all(kp, &kd, &kl, 4096, &err), &err);
        must(fa_identity_parse_secret(kd, kl, aseed, &err), &err);
        free(kd);
        memset(&nv, 0, sizeof(nv));
        snprintf(nv.name, sizeof(nv.name), "unit.test/log");
        must(fa_identity_public_key(aseed, nv.pk), NULL);
        for (int i = 0; i < NR; i++) {
            keys[i].region = ids[i];
            memcpy(keys[i].pk, s->members[i].identity_pk, 32);
        }
        memset(&o, 0, sizeof(o));
        o.key = &nv;
        o.region_keys = keys;
        o.nregion_keys = NR;
        o.report = collect;
        o.report_ctx = &fd;
        if (fa_audit_verify(path, &o, &res, &err) != 0)
            fail_msg("verify: %s", fd.text);
        assert_int_equal(res.decisions, 4); /* v0, v1, v2 decided; v3 expired */
        assert_int_equal(res.data_signatures, 3);
    }
    sim_open(s);
    json = gate_json(s);
    assert_non_null(strstr(json, "\"last_promoted\":2"));
    assert_non_null(strstr(json, "{\"channel\":\"production\",\"version\":0"));
    free(json);
    sim_del(s);
}

/* PAUSE: a rejection abandons the attempt and pauses the federation until
 * an operator resumes it (training then goes on from the rejected version). */
static void test_promotion_gate_pause(void **state)
{
    static const char model[] =
        "model { input_dim: 6 hidden: [5] output_dim: 3 init_seed: 9 }\n"
        "quantization { bits: 16 clip: CLIP_COORDINATE clip_value: 0.5 max_examples: 100 "
        "range: RANGE_FIXED }\n"
        "promotion { enabled: true tolerance: 0 min_regions: 1 "
        "on_regression: REGRESSION_PAUSE }\n";
    struct sim *s = sim_new_model(1000, model, NULL);
    uint64_t round, version;
    uint32_t attempt;
    int phase;
    char *json;
    fa_error err;
    (void)state;

    gate_evals(s, 0, 0.5, 1);
    finish_round_1_all(s);
    gate_evals(s, 1, 0.4, 1);
    clients_new(s);
    for (int i = 0; i < NR; i++) {
        uint8_t *m;
        size_t len;
        must(fa_secagg_client_advertise(s->c[i], &m, &len, &err), &err);
        assert_int_equal(submit(s, FA_FED_ADVERTISE, i, m, len, NULL), 0);
        free(m);
    }
    s->now += 1;
    fa_fed_tick(s->f, s->now); /* the advertise close decides */
    position(s, &round, &attempt, &phase, &version);
    assert_int_equal(round, 2);
    assert_int_equal(attempt, 1);
    assert_int_equal(version, 1);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_IDLE);
    must(fa_fed_admin_json(s->f, "status", s->now, &json, &err), &err);
    assert_non_null(strstr(json, "\"paused_by\":\"the promotion gate\""));
    assert_non_null(strstr(json, "\"paused_by_gate\":true"));
    free(json);
    assert_int_equal(fa_fed_admin_rollback(s->f, "", s->now, &err), FA_ERR_AUTH);
    must(fa_fed_admin_rollback(s->f, "alice", s->now, &err), &err);
    position(s, NULL, NULL, NULL, &version);
    assert_int_equal(version, 2);
    must(fa_fed_admin_resume(s->f, "alice", s->now, &err), &err);
    position(s, NULL, NULL, &phase, NULL);
    assert_int_equal(phase, FEDAGG__PHASE__PHASE_ADVERTISE);
    sim_del(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_round),
        cmocka_unit_test(test_dropout_and_refusals),
        cmocka_unit_test(test_readvertise_after_worker_restart),
        cmocka_unit_test(test_advertised_model),
        cmocka_unit_test(test_restart_mid_round),
        cmocka_unit_test(test_round_sum_file),
        cmocka_unit_test_teardown(test_storage_gate_counts_spares, unset_failpoints),
        cmocka_unit_test(test_below_threshold_aborts_attempt),
        cmocka_unit_test(test_any_model_round),
        cmocka_unit_test_prestate(test_any_model_round_delta, (void *)&delta_default),
        cmocka_unit_test_prestate(test_any_model_round_delta, (void *)&delta_8),
        cmocka_unit_test_prestate(test_any_model_round_delta, (void *)&delta_4),
        cmocka_unit_test_prestate(test_delta_across_chunks, (void *)&delta_bits8),
        cmocka_unit_test_prestate(test_delta_across_chunks, (void *)&delta_bits4),
        cmocka_unit_test(test_federated_evaluation),
        cmocka_unit_test(test_evaluation_cannot_be_steered),
        cmocka_unit_test(test_bad_shares_do_not_stall),
        cmocka_unit_test(test_audit_damage_stops_rounds),
        cmocka_unit_test(test_evaluator_command),
        cmocka_unit_test(test_memory_budget),
        cmocka_unit_test(test_privacy_ledger),
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_open_beside_others),
        cmocka_unit_test(test_decisions),
        cmocka_unit_test(test_ddp_rounds),
        cmocka_unit_test(test_promotion_gate),
        cmocka_unit_test(test_promotion_gate_pause),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
