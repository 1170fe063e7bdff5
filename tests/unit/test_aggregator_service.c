/* The aggregation service (aggregator/service.h) in one process: a default
 * federation from the config beside federations created from files;
 * teams (who may create, read and act on what); regions reaching only
 * the federations that invite them; the lifecycle recorded in the signed
 * service log and replayed at open (its log is the source of truth, a
 * federation whose own pause state differs is set back to it); the memory
 * budget shared by the federations; and a federation that cannot be opened
 * stopped with its reason while the others run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregator/service.h"
#include "audit/audit_log.h"
#include "common/fa_file.h"
#include "crypto/checkpoint.h"
#include "crypto/identity.h"
#include "fedagg.pb-c.h"
#include "proto/config_check.h"

#define NR 3
static const char *ids[NR] = {"ap-south", "eu-west", "us-east"};

struct fix {
    char dir[256];
    char pk[NR][64];
    uint8_t seed[NR][32];
    uint8_t audit_pk[32];
    Fedagg__AggregatorConfig *cfg;
    fa_service *s;
    uint64_t now;
};

#define MODEL                                                                                      \
    "model { input_dim: 6 hidden: [5] output_dim: 3 init_seed: 9 }\n"                              \
    "quantization { bits: 16 clip: CLIP_COORDINATE clip_value: 0.5 max_examples: 100 "             \
    "range: RANGE_FIXED }\n"                                                                       \
    "round { min_regions: 2 threshold: 2 advertise_deadline_ms: 1000 shares_deadline_ms: 1000 "    \
    "masked_deadline_ms: 1000 consistency_deadline_ms: 1000 unmask_deadline_ms: 1000 }\n"

static void must(int rc, const fa_error *err)
{
    if (rc != 0)
        fail_msg("rc %d: %s", rc, err ? err->msg : "");
}

/* The service's config: a default federation "main" of team vision with
 * the three regions (unless no_default), operators alice (vision) and bob
 * (nlp, vision-ro... only nlp), extra text added. */
static void load_config(struct fix *f, int no_default, const char *extra)
{
    char text[8192];
    size_t n = 0;
    fa_error err;

    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "federation_id: \"main\" team: \"vision\"\n"
                          "listen: \"127.0.0.1:4433\" metrics_listen: \"\"\n"
                          "tls { cert_file: \"x.crt\" key_file: \"x.key\" ca_file: \"ca.crt\" }\n"
                          "audit { signing_key_file: \"%s/audit.key\" }\n"
                          "service { dir: \"%s/svc\" evaluators { name: \"true\" command: "
                          "[\"/bin/true\"] } }\n"
                          "quic { max_buffered_request_bytes: 1000000 "
                          "max_buffered_request_bytes_per_identity: 100000 }\n"
                          "operators: [\"alice\", \"bob\"]\n"
                          "teams { name: \"vision\" operators: [\"alice\"] }\n"
                          "teams { name: \"nlp\" operators: [\"bob\"] }\n"
                          "%s",
                          f->dir, f->dir, extra ? extra : "");
    if (!no_default) {
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%sstorage { dir: \"%s/main\" }\n", MODEL,
                              f->dir);
        for (int i = 0; i < NR; i++)
            n += (size_t)snprintf(text + n, sizeof(text) - n,
                                  "regions { id: \"%s\" identity_public_key: \"%s\" }\n", ids[i],
                                  f->pk[i]);
    }
    must(fa_config_load_text(FA_CONFIG_AGGREGATOR, text, n, "agg.textproto", f->dir,
                             FA_CONFIG_NO_FILES, (ProtobufCMessage **)&f->cfg, NULL, &err),
         &err);
}

static void open_service(struct fix *f)
{
    fa_error err;
    fa_error_clear(&err);
    must(fa_service_open(&f->s, f->cfg, NULL, f->now, &err), &err);
}

static void reopen(struct fix *f)
{
    fa_service_close(f->s);
    f->s = NULL;
    f->now += 10;
    open_service(f);
}

/* A federation file: id of team, inviting eu-west and us-east. */
static size_t fed_file(const struct fix *f, char *buf, size_t cap, const char *id, const char *team,
                       const char *extra)
{
    return (size_t)snprintf(buf, cap,
                            "federation_id: \"%s\"\nteam: \"%s\"\n"
                            "regions { id: \"eu-west\" identity_public_key: \"%s\" }\n"
                            "regions { id: \"us-east\" identity_public_key: \"%s\" }\n"
                            "%s%s",
                            id, team, f->pk[1], f->pk[2], MODEL, extra ? extra : "");
}

static int create(struct fix *f, const char *op, const char *id, const char *team,
                  const char *extra, fa_diags *d, fa_error *err)
{
    char text[4096];
    size_t n = fed_file(f, text, sizeof(text), id, team, extra);
    fa_error_clear(err);
    return fa_service_create(f->s, op, text, n, "new.textproto", f->now, NULL, d, err);
}

static int setup(void **state)
{
    struct fix *f = calloc(1, sizeof(*f));
    char path[512], key[FA_IDENTITY_SECRET_TEXT_MAX];
    uint8_t aseed[32];
    size_t klen;
    fa_error err;

    if (sodium_init() < 0)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/fa_test_service.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    for (int i = 0; i < NR; i++) {
        uint8_t pk[32];
        size_t pl;
        must(fa_identity_generate(f->seed[i], pk, NULL), NULL);
        fa_identity_format_public(pk, f->pk[i], &pl);
        f->pk[i][strcspn(f->pk[i], "\n")] = '\0';
    }
    must(fa_identity_generate(aseed, f->audit_pk, NULL), NULL);
    must(fa_identity_format_secret(aseed, key, &klen), NULL);
    snprintf(path, sizeof(path), "%s/audit.key", f->dir);
    must(fa_file_write_atomic(path, key, klen, 0600, &err), &err);
    f->now = 1000;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fix *f = *state;
    fa_error err;
    fa_service_close(f->s);
    if (f->cfg)
        protobuf_c_message_free_unpacked(&f->cfg->base, NULL);
    fa_file_remove_tree(f->dir, &err);
    free(f);
    return 0;
}

static int has(const char *json, const char *s)
{
    return json && strstr(json, s) != NULL;
}

/* ------------------------------------------------------------------------- */

/* Creating: checked as config check does (file:line:column), by team, ids
 * unique; listed per team. */
static void test_create_and_teams(void **state)
{
    struct fix *f = *state;
    fa_diags *d = NULL;
    fa_error err;
    char *json;
    const char *id;
    char text[4096];
    size_t n;

    load_config(f, 0, NULL);
    open_service(f);
    assert_true(fa_service_hosts_many(f->s));
    assert_non_null(fa_service_default(f->s));
    must(create(f, "alice", "beta", "vision", "description: \"lr 0.3\"\n", NULL, &err), &err);
    must(create(f, "bob", "gamma", "nlp", NULL, NULL, &err), &err);
    assert_int_equal(fa_service_count(f->s), 3);

    /* Refusals. */
    assert_int_equal(create(f, "bob", "delta", "vision", NULL, NULL, &err), FA_ERR_AUTH);
    assert_true(has(err.msg, "operator bob (teams: nlp) may not create federations of team "
                             "\"vision\""));
    assert_int_equal(create(f, "mallory", "delta", "nlp", NULL, NULL, &err), FA_ERR_AUTH);
    assert_true(has(err.msg, "not in this service's operators"));
    assert_int_equal(create(f, "alice", "beta", "vision", NULL, NULL, &err), FA_ERR_EXISTS);
    assert_int_equal(create(f, "alice", "main", "vision", NULL, NULL, &err), FA_ERR_EXISTS);
    assert_int_equal(fa_diags_new(&d), 0);
    assert_int_equal(create(f, "alice", "delta", "vision", "keep_versions: 0\n", d, &err),
                     FA_ERR_INVAL);
    assert_int_equal(fa_diags_count(d), 1);
    assert_true(has(fa_diags_get(d, 0), "new.textproto:8:1: `keep_versions` must be at least 1"));
    fa_diags_del(d);
    assert_int_equal(fa_diags_new(&d), 0);
    assert_int_equal(create(f, "alice", "delta", "vision", "evaluator: \"nope\"\n", d, &err),
                     FA_ERR_INVAL);
    assert_true(has(fa_diags_get(d, 0), "new.textproto:8:1: `evaluator` \"nope\" is not one of "
                                        "the service's evaluators (true)"));
    fa_diags_del(d);
    assert_int_equal(create(f, "alice", "delta", "vision",
                            "evaluation { command: [\"/bin/sh\"] }\n", NULL, &err),
                     FA_ERR_INVAL);
    /* nothing of a refused federation is left */
    {
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/svc/federations/delta", f->dir);
        assert_int_not_equal(stat(p, &st), 0);
    }

    /* Who sees and touches what. */
    must(fa_service_list_json(f->s, "alice", f->now, &json, &err), &err);
    assert_true(has(json, "\"id\":\"main\""));
    assert_true(has(json, "\"id\":\"beta\""));
    assert_true(has(json, "\"description\":\"lr 0.3\""));
    assert_true(has(json, "\"created_by\":\"alice\""));
    assert_false(has(json, "gamma"));
    free(json);
    must(fa_service_list_json(f->s, "bob", f->now, &json, &err), &err);
    assert_true(has(json, "\"id\":\"gamma\""));
    assert_false(has(json, "beta"));
    free(json);
    must(fa_service_authorize(f->s, "alice", "beta", &err), &err);
    must(fa_service_authorize(f->s, "alice", NULL, &err), &err); /* main, vision */
    assert_int_equal(fa_service_authorize(f->s, "bob", "beta", &err), FA_ERR_AUTH);
    assert_true(has(err.msg, "may not touch federation beta of team \"vision\""));
    assert_int_equal(fa_service_authorize(f->s, "bob", NULL, &err), FA_ERR_AUTH);
    assert_int_equal(fa_service_authorize(f->s, "bob", "zeta", &err), FA_ERR_NOTFOUND);

    /* A federation file's id points at its entry. */
    n = fed_file(f, text, sizeof(text), "epsilon", "vision", NULL);
    must(fa_service_create(f->s, "alice", text, n, "e.textproto", f->now, &id, NULL, &err), &err);
    assert_string_equal(id, "epsilon");
    must(fa_service_show_json(f->s, "epsilon", f->now, &json, &err), &err);
    assert_true(has(json, "\"state\":\"running\""));
    assert_true(has(json, "\"config_name\":\"e.textproto\""));
    assert_true(has(json, "\"phase\":\"advertise\""));
    free(json);
}

/* Regions reach only what invites them; the offers list it. */
static void test_regions(void **state)
{
    struct fix *f = *state;
    Fedagg__FederationList *list;
    fa_fed *fed;
    uint8_t *b;
    size_t len;
    fa_error err;

    load_config(f, 0, NULL);
    open_service(f);
    must(create(f, "alice", "beta", "vision", "trainer: \"cnn\" dataset: \"fmnist\"\n", NULL, &err),
         &err);
    must(fa_service_fed_for_region(f->s, "beta", "eu-west", 1, &fed, &err), &err);
    assert_non_null(fed);
    assert_int_equal(fa_service_fed_for_region(f->s, "beta", "ap-south", 0, &fed, &err),
                     FA_ERR_NOTFOUND);
    assert_string_equal(err.msg, "no federation 'beta' for region ap-south");
    assert_int_equal(fa_service_fed_for_region(f->s, "nope", "ap-south", 0, &fed, &err),
                     FA_ERR_NOTFOUND);
    assert_string_equal(err.msg, "no federation 'nope' for region ap-south");
    must(fa_service_fed_for_region(f->s, NULL, "ap-south", 1, &fed, &err), &err);
    assert_int_equal(fa_service_fed_for_region(f->s, NULL, "mars", 0, &fed, &err), FA_ERR_AUTH);
    assert_true(fa_service_invitations(f->s, "ap-south") >= 1);
    assert_int_equal(fa_service_invitations(f->s, "mars"), 0);

    must(fa_service_offers(f->s, "eu-west", f->now, &b, &len, &err), &err);
    list = fedagg__federation_list__unpack(NULL, len, b);
    free(b);
    assert_non_null(list);
    assert_int_equal(list->n_federations, 2);
    assert_string_equal(list->federations[0]->info->federation_id, "main");
    assert_string_equal(list->federations[1]->info->federation_id, "beta");
    assert_string_equal(list->federations[1]->team, "vision");
    assert_string_equal(list->federations[1]->state, "running");
    assert_string_equal(list->federations[1]->trainer, "cnn");
    assert_string_equal(list->federations[1]->dataset, "fmnist");
    assert_true(list->federations[1]->model_bytes > 0);
    assert_int_equal(list->federations[1]->info->num_params, 6 * 5 + 5 + 5 * 3 + 3);
    fedagg__federation_list__free_unpacked(list, NULL);
    must(fa_service_offers(f->s, "ap-south", f->now, &b, &len, &err), &err);
    list = fedagg__federation_list__unpack(NULL, len, b);
    free(b);
    assert_int_equal(list->n_federations, 1); /* main only */
    fedagg__federation_list__free_unpacked(list, NULL);
}

/* The lifecycle, recorded and replayed; the service log verifies. */
static void test_lifecycle_and_replay(void **state)
{
    struct fix *f = *state;
    char msg[512], why[512], *json;
    fa_fed *fed;
    fa_error err;

    load_config(f, 0, NULL);
    open_service(f);
    must(create(f, "alice", "beta", "vision", NULL, NULL, &err), &err);
    must(create(f, "bob", "gamma", "nlp", NULL, NULL, &err), &err);
    must(create(f, "alice", "delta", "vision", NULL, NULL, &err), &err);
    must(fa_service_act(f->s, "alice", "beta", "pause", NULL, f->now, msg, sizeof(msg), &err),
         &err);
    assert_true(has(msg, "paused by alice"));
    assert_int_equal(
        fa_service_act(f->s, "alice", "beta", "pause", NULL, f->now, msg, sizeof(msg), &err),
        FA_ERR_STATE);
    /* an archive needs it ended first */
    assert_int_equal(
        fa_service_act(f->s, "bob", "gamma", "archive", NULL, f->now, msg, sizeof(msg), &err),
        FA_ERR_STATE);
    must(fa_service_act(f->s, "bob", "gamma", "abort", NULL, f->now, msg, sizeof(msg), &err), &err);
    assert_int_equal(fa_service_state(f->s, "gamma", f->now, why, sizeof(why)), FA_SERVICE_STOPPED);
    assert_string_equal(why, "aborted by operator bob");
    assert_int_equal(
        fa_service_act(f->s, "bob", "gamma", "resume", NULL, f->now, msg, sizeof(msg), &err),
        FA_ERR_STATE);
    must(fa_service_act(f->s, "bob", "gamma", "archive", NULL, f->now, msg, sizeof(msg), &err),
         &err);
    /* drain in delta: the federation's own log */
    must(fa_service_act(f->s, "alice", "delta", "drain", "us-east", f->now, msg, sizeof(msg), &err),
         &err);
    assert_int_equal(
        fa_service_act(f->s, "alice", "delta", "launch", NULL, f->now, msg, sizeof(msg), &err),
        FA_ERR_INVAL);

    reopen(f);
    assert_int_equal(fa_service_count(f->s), 4);
    assert_int_equal(fa_service_state(f->s, "main", f->now, why, sizeof(why)), FA_SERVICE_RUNNING);
    assert_int_equal(fa_service_state(f->s, "beta", f->now, why, sizeof(why)), FA_SERVICE_PAUSED);
    assert_int_equal(fa_service_state(f->s, "gamma", f->now, why, sizeof(why)),
                     FA_SERVICE_ARCHIVED);
    assert_int_equal(fa_service_state(f->s, "delta", f->now, why, sizeof(why)), FA_SERVICE_RUNNING);
    /* archived: no region reaches it; operators still read it */
    assert_int_equal(fa_service_fed_for_region(f->s, "gamma", "eu-west", 0, &fed, &err),
                     FA_ERR_NOTFOUND);
    must(fa_service_show_json(f->s, "gamma", f->now, &json, &err), &err);
    assert_true(has(json, "\"state\":\"archived\""));
    free(json);
    must(fa_service_show_json(f->s, "delta", f->now, &json, &err), &err);
    assert_true(has(json, "\"drained\":true"));
    free(json);
    must(fa_service_act(f->s, "alice", "beta", "resume", NULL, f->now, msg, sizeof(msg), &err),
         &err);
    must(fa_service_status_json(f->s, f->now, &json, &err), &err);
    assert_true(has(json, "\"states\":{\"running\":3,\"paused\":0,\"finished\":0,\"stopped\":0,"
                          "\"archived\":1}"));
    free(json);

    /* The service log: creates, pause, abort, archive, resume; verified. */
    {
        char path[512];
        fa_audit_verify_opts o;
        fa_audit_verify_result res;
        fa_note_verifier v;
        memset(&o, 0, sizeof(o));
        memset(&v, 0, sizeof(v));
        snprintf(v.name, sizeof(v.name), "fedagg-service");
        memcpy(v.pk, f->audit_pk, 32);
        o.key = &v;
        snprintf(path, sizeof(path), "%s/svc/service.log", f->dir);
        must(fa_audit_verify(path, &o, &res, &err), &err);
        assert_int_equal(res.records, 7);
    }
}

/* A crash between a federation's own pause and the service log's record:
 * the log is the truth. */
static void test_pause_reconciled(void **state)
{
    struct fix *f = *state;
    char msg[512], why[512];
    fa_fed *fed;
    fa_error err;

    load_config(f, 0, NULL);
    open_service(f);
    must(create(f, "alice", "beta", "vision", NULL, NULL, &err), &err);
    must(fa_service_act(f->s, "alice", "beta", "pause", NULL, f->now, msg, sizeof(msg), &err),
         &err);
    /* the federation resumed in its own log only */
    must(fa_service_fed(f->s, "beta", &fed, &err), &err);
    must(fa_fed_admin_resume(fed, "alice", f->now, &err), &err);
    assert_int_equal(fa_service_state(f->s, "beta", f->now, why, sizeof(why)), FA_SERVICE_RUNNING);
    reopen(f);
    assert_int_equal(fa_service_state(f->s, "beta", f->now, why, sizeof(why)), FA_SERVICE_PAUSED);
    /* and the other way: paused in its own log only (the default one) */
    must(fa_service_fed(f->s, NULL, &fed, &err), &err);
    must(fa_fed_admin_pause(fed, "alice", f->now, &err), &err);
    reopen(f);
    /* no pause or resume of main in the service log: its own state holds */
    assert_int_equal(fa_service_state(f->s, "main", f->now, why, sizeof(why)), FA_SERVICE_PAUSED);
}

/* One memory budget: a federation that does not fit beside the others is
 * refused with the parts; a finished or archived one holds nothing. */
static void test_memory_budget(void **state)
{
    struct fix *f = *state;
    fa_error err;

    /* a round of either needs about 3.1 MiB (mostly the step's scratch) */
    load_config(f, 0, "memory_limit_bytes: 5000000\n");
    open_service(f);
    assert_int_equal(create(f, "alice", "beta", "vision", NULL, NULL, &err), FA_ERR_NOSPACE);
    assert_true(has(err.msg, "federation beta: a round needs about"));
    assert_true(has(err.msg, "of which the 1 other federation that can run a round hold"));
    protobuf_c_message_free_unpacked(&f->cfg->base, NULL);
    fa_service_close(f->s);
    f->s = NULL;
    load_config(f, 0, "memory_limit_bytes: 8000000\n");
    open_service(f);
    must(create(f, "alice", "beta", "vision", NULL, NULL, &err), &err);
}

/* A federation whose store is damaged is stopped at open with why; the
 * others run, and it reopens once repaired. */
static void test_fault_isolated(void **state)
{
    struct fix *f = *state;
    char path[512], why[512], msg[512], saved[512];
    fa_fed *fed;
    fa_error err;

    load_config(f, 0, NULL);
    open_service(f);
    must(create(f, "alice", "beta", "vision", NULL, NULL, &err), &err);
    fa_service_close(f->s);
    f->s = NULL;
    /* its audit log's first bytes are not a log's */
    snprintf(path, sizeof(path), "%s/svc/federations/beta/audit.log", f->dir);
    snprintf(saved, sizeof(saved), "%s.saved", path);
    assert_int_equal(rename(path, saved), 0);
    must(fa_file_write_atomic(path, "not a log, not at all", 21, 0644, &err), &err);
    open_service(f);
    assert_int_equal(fa_service_state(f->s, "beta", f->now, why, sizeof(why)), FA_SERVICE_STOPPED);
    assert_true(has(why, "it could not be opened"));
    assert_int_equal(fa_service_state(f->s, "main", f->now, why, sizeof(why)), FA_SERVICE_RUNNING);
    assert_int_equal(fa_service_fed_for_region(f->s, "beta", "eu-west", 1, &fed, &err),
                     FA_ERR_AGAIN);
    assert_true(has(err.msg, "federation beta is stopped"));
    assert_true(fa_service_ready(f->s, f->now, why, sizeof(why)));
    fa_service_tick(f->s, f->now + 1);
    /* repaired, an operator reopens it */
    assert_int_equal(rename(saved, path), 0);
    must(fa_service_act(f->s, "alice", "beta", "resume", NULL, f->now, msg, sizeof(msg), &err),
         &err);
    assert_true(has(msg, "reopened by alice"));
    assert_int_equal(fa_service_state(f->s, "beta", f->now, why, sizeof(why)), FA_SERVICE_RUNNING);
}

/* Without a service block: one federation, as before; no create. */
static void test_single_federation(void **state)
{
    struct fix *f = *state;
    char text[8192], msg[512];
    size_t n = 0;
    fa_error err;

    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "federation_id: \"solo\" listen: \"127.0.0.1:4433\"\n"
                          "tls { cert_file: \"x.crt\" key_file: \"x.key\" ca_file: \"ca.crt\" }\n"
                          "audit { signing_key_file: \"%s/audit.key\" }\n%s"
                          "storage { dir: \"%s/solo\" }\noperators: [\"alice\"]\n",
                          f->dir, MODEL, f->dir);
    for (int i = 0; i < NR; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "regions { id: \"%s\" identity_public_key: \"%s\" }\n", ids[i],
                              f->pk[i]);
    must(fa_config_load_text(FA_CONFIG_AGGREGATOR, text, n, "agg.textproto", f->dir,
                             FA_CONFIG_NO_FILES, (ProtobufCMessage **)&f->cfg, NULL, &err),
         &err);
    open_service(f);
    assert_false(fa_service_hosts_many(f->s));
    assert_int_equal(create(f, "alice", "beta", "vision", NULL, NULL, &err), FA_ERR_STATE);
    assert_true(has(err.msg, "add service { dir"));
    /* no teams: every listed operator acts; no one else */
    must(fa_service_authorize(f->s, "alice", NULL, &err), &err);
    assert_int_equal(fa_service_authorize(f->s, "anyone", NULL, &err), FA_ERR_AUTH);
    must(fa_service_act(f->s, "alice", NULL, "pause", NULL, f->now, msg, sizeof(msg), &err), &err);
    assert_int_equal(
        fa_service_act(f->s, "alice", NULL, "abort", NULL, f->now, msg, sizeof(msg), &err),
        FA_ERR_STATE);
    /* no service log was made */
    {
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/svc", f->dir);
        assert_int_not_equal(stat(p, &st), 0);
    }
}

/* A service without a default federation. */
static void test_no_default(void **state)
{
    struct fix *f = *state;
    fa_fed *fed;
    fa_error err;

    load_config(f, 1, NULL);
    open_service(f);
    assert_null(fa_service_default(f->s));
    assert_int_equal(fa_service_fed_for_region(f->s, NULL, "eu-west", 0, &fed, &err),
                     FA_ERR_NOTFOUND);
    assert_true(has(err.msg, "no default federation"));
    must(create(f, "alice", "beta", "vision", NULL, NULL, &err), &err);
    reopen(f);
    assert_int_equal(fa_service_count(f->s), 1);
    must(fa_service_fed_for_region(f->s, "beta", "us-east", 1, &fed, &err), &err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_and_teams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lifecycle_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_reconciled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_federation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_default, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
