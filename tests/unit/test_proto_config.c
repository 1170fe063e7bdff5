/* Unit tests of config loading and checking (proto/config_check.h): kind
 * guessing, defaults applied in one place, path resolution, the meaning
 * checks and their positions, key and address parsing, the region agent's
 * config (services and policy), and the annotated example (complete, and
 * valid). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/config_check.h"

#define KEY_A "oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k="
#define KEY_B "mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI="

static const char agg_text[] =
    "tls { cert_file: \"c.crt\" key_file: \"c.key\" ca_file: \"/abs/ca.crt\" }\n"
    "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n"
    "regions { id: \"us-east\" identity_public_key: \"" KEY_B "\" }\n"
    "regions { id: \"ap-south\" identity_public_key_file: \"k.pub\" }\n"
    "storage { dir: \"state\" }\n"
    "audit { signing_key_file: \"audit.key\" }\n";

static int load_text(fa_config_kind kind, const char *text, unsigned flags, ProtobufCMessage **m,
                     fa_diags **d)
{
    fa_error err = {0};

    assert_int_equal(fa_diags_new(d), 0);
    return fa_config_load_text(kind, text, strlen(text), "c.textproto", "/etc/fedagg", flags, m, *d,
                               &err);
}

/* True when some diagnostic contains s. */
static int has_diag(const fa_diags *d, const char *s)
{
    for (size_t i = 0; i < fa_diags_count(d); i++)
        if (strstr(fa_diags_get(d, i), s))
            return 1;
    return 0;
}

static void test_defaults_and_paths(void **state)
{
    Fedagg__AggregatorConfig *c = NULL;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(
        load_text(FA_CONFIG_AGGREGATOR, agg_text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d),
        0);
    assert_int_equal(fa_diags_count(d), 0);
    /* relative paths resolved against the config's directory, absolute ones kept */
    assert_string_equal(c->tls->cert_file, "/etc/fedagg/c.crt");
    assert_string_equal(c->tls->ca_file, "/abs/ca.crt");
    assert_string_equal(c->regions[2]->identity_public_key_file, "/etc/fedagg/k.pub");
    assert_string_equal(c->storage->dir, "/etc/fedagg/state");
    /* the defaults config.proto cannot express */
    assert_int_equal(c->model->n_hidden, 2);
    assert_int_equal(c->model->hidden[0], 256);
    assert_int_equal(c->model->hidden[1], 128);
    assert_int_equal(c->round->threshold, 2); /* majority of 3 */
    assert_string_equal(c->audit->log_file, "/etc/fedagg/state/audit.log");
    assert_string_equal(c->audit->origin, "fedagg/fedagg");
    assert_string_equal(c->quic->static_secret_file, "/etc/fedagg/state/quic.secret");
    /* every sub-message present, with the schema's defaults */
    assert_non_null(c->evaluation);
    assert_int_equal(c->optimizer->kind, FEDAGG__SERVER_OPTIMIZER_KIND__FEDAVG);
    assert_int_equal(c->quantization->bits, 16);
    assert_true(c->model_delta->enabled);
    assert_int_equal(c->model_delta->bits, 4);
    assert_int_equal(c->model_delta->block, 256);
    protobuf_c_message_free_unpacked(&c->base, NULL);
    fa_diags_del(d);
}

/* Both step widths of a model delta load. */
static void test_model_delta_widths(void **state)
{
    static const char *const widths[] = {"model_delta { bits: 4 }\n", "model_delta { bits: 8 }\n"};
    (void)state;
    for (int k = 0; k < 2; k++) {
        Fedagg__AggregatorConfig *c = NULL;
        fa_diags *d = NULL;
        char text[1024];
        snprintf(text, sizeof(text), "%s%s", agg_text, widths[k]);
        assert_int_equal(
            load_text(FA_CONFIG_AGGREGATOR, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d),
            0);
        assert_int_equal(fa_diags_count(d), 0);
        assert_int_equal(c->model_delta->bits, k == 0 ? 4 : 8);
        protobuf_c_message_free_unpacked(&c->base, NULL);
        fa_diags_del(d);
    }
}

/* The promotion policy: a good one loads with its defaults filled, each
 * mistake is named at its field. */
static void test_promotion_policy(void **state)
{
    Fedagg__AggregatorConfig *c = NULL;
    fa_diags *d = NULL;
    char text[2048];
    (void)state;

    snprintf(text, sizeof(text), "%spromotion { enabled: true channels: [\"production\"] }\n",
             agg_text);
    assert_int_equal(
        load_text(FA_CONFIG_AGGREGATOR, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d), 0);
    assert_int_equal(fa_diags_count(d), 0);
    assert_string_equal(c->promotion->metric, "accuracy");
    assert_true(c->promotion->tolerance == 0.01);
    assert_int_equal(c->promotion->on_regression, FEDAGG__REGRESSION_ACTION__REGRESSION_ROLLBACK);
    protobuf_c_message_free_unpacked(&c->base, NULL);
    fa_diags_del(d);

    snprintf(text, sizeof(text),
             "%spromotion {\n  enabled: true\n  metric: \"top 1\"\n  tolerance: -0.5\n"
             "  min_regions: 4\n  channels: [\"Prod\"]\n}\n",
             agg_text);
    c = NULL;
    assert_int_not_equal(
        load_text(FA_CONFIG_AGGREGATOR, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d), 0);
    assert_true(has_diag(d, "c.textproto:9:3: `promotion.metric` 'top 1'"));
    assert_true(has_diag(d, "c.textproto:10:3: `promotion.tolerance` (-0.5)"));
    assert_true(has_diag(d, "`promotion.min_regions` (4) must be 1 to the 3 regions"));
    assert_true(has_diag(d, "`promotion.channels[0]` 'Prod'"));
    if (c)
        protobuf_c_message_free_unpacked(&c->base, NULL);
    fa_diags_del(d);

    /* judged by the evaluator: it must exist */
    snprintf(text, sizeof(text), "%spromotion { enabled: true source: SOURCE_CENTRAL }\n",
             agg_text);
    c = NULL;
    assert_int_not_equal(
        load_text(FA_CONFIG_AGGREGATOR, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d), 0);
    assert_true(has_diag(d, "set `evaluation.command`"));
    if (c)
        protobuf_c_message_free_unpacked(&c->base, NULL);
    fa_diags_del(d);
}

static void test_worker_defaults(void **state)
{
    static const char text[] =
        "region_id: \"eu-west\" aggregator: \"agg.example.org:4433\" state_dir: \"st\"\n"
        "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" } identity_key_file: \"id\"\n"
        "trainer { external { command: \"./train\" } }\n"
        "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n";
    Fedagg__WorkerConfig *w = NULL;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(
        load_text(FA_CONFIG_UNKNOWN, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d), 0);
    assert_string_equal(w->tls->server_name, "agg.example.org");
    assert_string_equal(w->trainer->external->workdir, "/etc/fedagg/st");
    /* argv entries are not paths */
    assert_string_equal(w->trainer->external->command[0], "./train");
    protobuf_c_message_free_unpacked(&w->base, NULL);
    fa_diags_del(d);
}

static void test_worker_privacy(void **state)
{
    static const char base[] =
        "region_id: \"eu-west\" aggregator: \"agg.example.org:4433\" state_dir: \"st\"\n"
        "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" } identity_key_file: \"id\"\n"
        "trainer { external { command: \"./train\" } }\n"
        "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n";
    char text[2048];
    Fedagg__WorkerConfig *w = NULL;
    fa_diags *d = NULL;
    (void)state;

    /* off by default, with the documented defaults */
    assert_int_equal(
        load_text(FA_CONFIG_WORKER, base, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d), 0);
    assert_true(w->privacy->target_epsilon == 0.0);
    assert_true(w->privacy->target_delta == 1e-5);
    assert_string_equal(w->privacy->unit, "example");
    assert_true(w->privacy->noise_multiplier == 1.0 && w->privacy->clip == 1.0);
    assert_int_equal(w->privacy->on_exhausted, FEDAGG__PRIVACY_EXHAUSTED__PRIVACY_SKIP);
    protobuf_c_message_free_unpacked(&w->base, NULL);
    fa_diags_del(d);

    snprintf(text, sizeof(text),
             "%sprivacy { target_epsilon: 3 target_delta: 1e-6 noise_multiplier: 1.1 clip: 0.5 "
             "sampling_rate: 0.01 on_exhausted: PRIVACY_STOP }\n",
             base);
    assert_int_equal(
        load_text(FA_CONFIG_WORKER, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d), 0);
    assert_true(w->privacy->target_epsilon == 3.0 && w->privacy->sampling_rate == 0.01);
    assert_int_equal(w->privacy->on_exhausted, FEDAGG__PRIVACY_EXHAUSTED__PRIVACY_STOP);
    protobuf_c_message_free_unpacked(&w->base, NULL);
    fa_diags_del(d);

    snprintf(text, sizeof(text),
             "%sprivacy { target_epsilon: -1 target_delta: 0.5 unit: \"user\" noise_multiplier: 0 "
             "clip: -2 sampling_rate: 1.5 }\n",
             base);
    w = NULL;
    assert_int_equal(
        load_text(FA_CONFIG_WORKER, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d),
        FA_ERR_INVAL);
    assert_true(has_diag(d, "c.textproto:5:11: `privacy.target_epsilon` (-1) must be a finite "
                            "epsilon > 0 (0 turns differential privacy off)"));
    assert_true(has_diag(d, "c.textproto:5:30: `privacy.target_delta` (0.5) must be in (0, 0.1]"));
    assert_true(has_diag(d, "c.textproto:5:48: `privacy.unit` \"user\": only \"example\" (one "
                            "training example) is supported"));
    assert_true(has_diag(d, "c.textproto:5:61: `privacy.noise_multiplier` (0) must be a finite "
                            "sigma > 0"));
    assert_true(has_diag(d, "c.textproto:5:81: `privacy.clip` (-2) must be a finite L2 norm > 0"));
    assert_true(has_diag(d, "c.textproto:5:90: `privacy.sampling_rate` (1.5) must be in [0, 1] "
                            "(0: batch_size over the shard's examples)"));
    fa_diags_del(d);
}

/* The region agent: services and a policy instead of one federation's
 * fields; every element of the policy's lists gets its defaults. */
static void test_agent_config(void **state)
{
    static const char base[] =
        "region_id: \"eu-west\" state_dir: \"st\"\n"
        "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" } identity_key_file: \"id\"\n"
        "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n"
        "services { name: \"central\" address: \"agg.example.org:4433\" public_key_file: "
        "\"svc.pub\" }\n";
    static const char policy[] =
        "policy { datasets { name: \"clinics\" data { train_images: \"a\" train_labels: \"b\" } "
        "privacy { target_epsilon: 2 } }\n"
        "  datasets { name: \"notes\" path: \"notes\" }\n"
        "  trainers { name: \"mlp\" builtin { local_steps: 3 } launch: [\"mpirun\", \"-np\", "
        "\"2\"] }\n"
        "  accept_teams: \"vision\" }\n";
    char text[4096];
    Fedagg__WorkerConfig *w = NULL;
    fa_diags *d = NULL;
    (void)state;

    snprintf(text, sizeof(text), "%s%s", base, policy);
    assert_int_equal(
        load_text(FA_CONFIG_UNKNOWN, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d), 0);
    assert_int_equal(w->n_services, 1);
    assert_string_equal(w->services[0]->public_key_file, "/etc/fedagg/svc.pub");
    assert_int_equal(w->services[0]->poll_s, 30);
    assert_string_equal(w->policy->datasets[0]->data->train_images, "/etc/fedagg/a");
    assert_string_equal(w->policy->datasets[1]->path, "/etc/fedagg/notes");
    /* an element's sub-messages are there, with their defaults */
    assert_non_null(w->policy->datasets[1]->privacy);
    assert_true(w->policy->datasets[1]->privacy->target_epsilon == 0.0);
    assert_true(w->policy->datasets[0]->privacy->target_delta == 1e-5);
    assert_int_equal(w->policy->max_federations, 4);
    protobuf_c_message_free_unpacked(&w->base, NULL);
    fa_diags_del(d);

    /* one federation's fields in an agent config, and mistakes in the policy */
    snprintf(text, sizeof(text),
             "%saggregator: \"agg:1\"\ntrainer { builtin { } }\n"
             "policy { datasets { name: \"x\" } datasets { name: \"x\" path: \"p\" }\n"
             "  trainers { name: \"T\" external { command: \"t\" } launch: \"mpirun\" device: "
             "\"gpu9\" }\n"
             "  trainers { name: \"u\" }\n"
             "  max_federations: 0 }\n"
             "services { name: \"central\" address: \"h:1\" poll_s: 0 }\n",
             base);
    w = NULL;
    assert_int_equal(
        load_text(FA_CONFIG_WORKER, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d),
        FA_ERR_INVAL);
    assert_true(has_diag(d, "c.textproto:5:1: `aggregator`: in a region agent's config"));
    assert_true(has_diag(d, "`trainer`: in a region agent's config"));
    assert_true(has_diag(d, "`policy.datasets[0]`: give its files"));
    assert_true(has_diag(d, "`policy.datasets[1].name`: \"x\" is listed twice"));
    assert_true(has_diag(d, "`policy.trainers[0].name` \"T\": 1 to 63 characters"));
    assert_true(has_diag(d, "`policy.trainers[0].launch`: an external trainer runs in one"));
    assert_true(has_diag(d, "`policy.trainers[0].device` \"gpu9\" is not in policy.devices"));
    assert_true(has_diag(d, "`policy.trainers[1]`: set one of `builtin"));
    assert_true(has_diag(d, "`policy.max_federations` (0) must be 1..1000"));
    assert_true(has_diag(d, "`services[1].name`: service \"central\" is listed twice"));
    assert_true(has_diag(d, "`services[1]`: set public_key (base64) or public_key_file"));
    assert_true(has_diag(d, "`services[1].poll_s` (0) must be 1..3600 seconds"));
    fa_diags_del(d);

    /* a policy without services */
    snprintf(text, sizeof(text),
             "region_id: \"eu-west\" aggregator: \"agg:1\" state_dir: \"st\"\n"
             "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" } identity_key_file: \"id\"\n"
             "trainer { external { command: \"./train\" } }\n"
             "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n%s",
             policy);
    w = NULL;
    assert_int_equal(
        load_text(FA_CONFIG_WORKER, text, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&w, &d),
        FA_ERR_INVAL);
    assert_true(has_diag(d, "`policy` is the region agent's: it is used only with `services`"));
    fa_diags_del(d);
}

static void test_meaning_errors_with_positions(void **state)
{
    static const char text[] = "regions { id: \"a\" identity_public_key: \"" KEY_A "\" }\n"
                               "regions { id: \"a\" identity_public_key: \"" KEY_A "\" }\n"
                               "round { threshold: 3 max_uploads_in_flight: 2000 }\n"
                               "quantization { bits: 1 }\n"
                               "model_delta { bits: 6 block: 300 }\n";
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(load_text(FA_CONFIG_AGGREGATOR, text, FA_CONFIG_NO_FILES, &m, &d),
                     FA_ERR_INVAL);
    assert_null(m);
    assert_true(has_diag(d, "c.textproto:2:11: `regions[1].id`: region \"a\" is listed twice "
                            "(first at 1:11)"));
    assert_true(has_diag(d, "c.textproto:2:19: `regions[1]`: the same identity key as "
                            "regions[0]"));
    assert_true(has_diag(d, "c.textproto:3:9: `round.threshold` (3) exceeds the number of "
                            "regions (2)"));
    assert_true(has_diag(d, "c.textproto:3:22: `round.max_uploads_in_flight` (2000) is over 1024"));
    assert_true(has_diag(d, "c.textproto:4:16: `quantization.bits` (1) must be from 2 to 24"));
    assert_true(has_diag(d, "c.textproto:5:15: `model_delta.bits` (6) must be 4 or 8"));
    assert_true(has_diag(d, "c.textproto:5:23: `model_delta.block` (300) must be a power of two "
                            "from 16 to 65536"));
    /* required fields in absent messages point at the top of the file */
    assert_true(has_diag(d, "c.textproto:1:1: `tls.cert_file` is required"));
    assert_true(has_diag(d, "c.textproto:1:1: `storage.dir` is required"));
    /* sorted by position */
    for (size_t i = 1; i < fa_diags_count(d); i++) {
        unsigned l0, c0, l1, c1;
        assert_int_equal(sscanf(strchr(fa_diags_get(d, i - 1), ':') + 1, "%u:%u", &l0, &c0), 2);
        assert_int_equal(sscanf(strchr(fa_diags_get(d, i), ':') + 1, "%u:%u", &l1, &c1), 2);
        assert_true(l0 < l1 || (l0 == l1 && c0 <= c1));
    }
    fa_diags_del(d);
}

static void test_syntax_errors_stop_before_meaning(void **state)
{
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(load_text(FA_CONFIG_WORKER, "region_id: 5\nrounds: 1\nrounds: 2\n", 0, &m, &d),
                     FA_ERR_PARSE);
    assert_int_equal(fa_diags_count(d), 2);
    assert_true(has_diag(d, "c.textproto:1:12: `region_id` (string): expected a quoted string"));
    assert_true(has_diag(d, "c.textproto:3:1: `rounds` is set twice (first at 2:1)"));
    fa_diags_del(d);
    /* syntax only: no meaning checks */
    assert_int_equal(load_text(FA_CONFIG_WORKER, "rounds: 1", FA_CONFIG_SYNTAX_ONLY, &m, &d), 0);
    protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(d);
}

static void test_guess_kind(void **state)
{
    (void)state;
    assert_int_equal(fa_config_guess_kind(agg_text, strlen(agg_text)), FA_CONFIG_AGGREGATOR);
    assert_int_equal(fa_config_guess_kind("# c\nregion_id: \"x\" tls {}", 24), FA_CONFIG_WORKER);
    /* shared fields only, nothing, both kinds, or a name inside a message: unknown */
    assert_int_equal(fa_config_guess_kind("tls { } log_level: \"info\"", 25), FA_CONFIG_UNKNOWN);
    assert_int_equal(fa_config_guess_kind("", 0), FA_CONFIG_UNKNOWN);
    assert_int_equal(fa_config_guess_kind("storage {} state_dir: \"s\"", 25), FA_CONFIG_UNKNOWN);
    assert_int_equal(fa_config_guess_kind("tls { regions {} }", 18), FA_CONFIG_UNKNOWN);
    assert_int_equal(fa_config_kind_from_name("worker"), FA_CONFIG_WORKER);
    assert_int_equal(fa_config_kind_from_name("Worker"), FA_CONFIG_UNKNOWN);
}

static void test_effective_values(void **state)
{
    Fedagg__RoundPolicy r = FEDAGG__ROUND_POLICY__INIT;
    (void)state;

    assert_int_equal(fa_config_effective_threshold(0, 1), 1);
    assert_int_equal(fa_config_effective_threshold(0, 4), 3);
    assert_int_equal(fa_config_effective_threshold(0, 5), 3);
    assert_int_equal(fa_config_effective_threshold(2, 5), 2);
    assert_int_equal(fa_config_effective_min_regions(&r, 5), 3); /* majority beats 2 */
    r.min_regions = 4;
    assert_int_equal(fa_config_effective_min_regions(&r, 5), 4);
}

static void test_keys_and_addresses(void **state)
{
    uint8_t key[32], raw[32];
    fa_error err = {0};
    (void)state;

    assert_int_equal(fa_config_decode_key32((const uint8_t *)KEY_A, strlen(KEY_A), 0, key, &err),
                     0);
    assert_int_equal(
        fa_config_decode_key32((const uint8_t *)" " KEY_A "\n", strlen(KEY_A) + 2, 0, key, &err),
        0);
    /* padding optional */
    assert_int_equal(
        fa_config_decode_key32((const uint8_t *)KEY_A, strlen(KEY_A) - 1, 0, raw, &err), 0);
    assert_memory_equal(key, raw, 32);
    assert_int_equal(fa_config_decode_key32((const uint8_t *)"c2hvcnQ=", 8, 0, key, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "decodes to 5 bytes"));
    assert_int_equal(fa_config_decode_key32((const uint8_t *)"not base64!", 11, 0, key, &err),
                     FA_ERR_INVAL);
    memset(raw, 0xAB, sizeof(raw));
    assert_int_equal(fa_config_decode_key32(raw, 32, 1, key, &err), 0);
    assert_memory_equal(key, raw, 32);

    assert_int_equal(fa_config_check_hostport("0.0.0.0:4433", &err), 0);
    assert_int_equal(fa_config_check_hostport("agg.example.org:1", &err), 0);
    assert_int_equal(fa_config_check_hostport("[::]:65535", &err), 0);
    assert_int_equal(fa_config_check_hostport("[fe80::1%eth0]:443", &err), 0);
    assert_int_equal(fa_config_check_hostport("host:0", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport("host:65536", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport("host", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport(":443", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport("::1:443", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "brackets"));
    assert_int_equal(fa_config_check_hostport("ho st:443", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport("host:44x", &err), FA_ERR_INVAL);
    assert_int_equal(fa_config_check_hostport("", &err), FA_ERR_INVAL);
}

/* Every field that names a file or a directory is resolved. */
static void check_path_fields(const ProtobufCMessageDescriptor *d, int depth)
{
    if (depth > 8)
        return;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        size_t n = strlen(f->name);
        int looks = !strcmp(f->name, "dir") || !strcmp(f->name, "workdir") ||
                    (n > 5 && !strcmp(f->name + n - 5, "_file")) ||
                    (n > 4 && !strcmp(f->name + n - 4, "_dir")) ||
                    (n > 7 && !strcmp(f->name + n - 7, "_images")) ||
                    (n > 7 && !strcmp(f->name + n - 7, "_labels"));
        if (f->type == PROTOBUF_C_TYPE_STRING && looks && !fa_config_is_path_field(d, f))
            fail_msg("%s.%s looks like a path but config_load.c does not resolve it", d->name,
                     f->name);
        if (f->type == PROTOBUF_C_TYPE_MESSAGE)
            check_path_fields(f->descriptor, depth + 1);
    }
}

static void test_path_table_complete(void **state)
{
    (void)state;
    check_path_fields(&fedagg__aggregator_config__descriptor, 0);
    check_path_fields(&fedagg__worker_config__descriptor, 0);
}

/* Every field reachable from d appears in the example as "name:" or "name {". */
static void check_example_names(const char *text, const ProtobufCMessageDescriptor *d, int depth)
{
    if (depth > 8)
        return;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char a[128], b[128];
        snprintf(a, sizeof(a), " %s:", f->name);
        snprintf(b, sizeof(b), " %s {", f->name);
        if (!strstr(text, a) && !strstr(text, b)) {
            snprintf(a, sizeof(a), "\n%s:", f->name);
            snprintf(b, sizeof(b), "\n%s {", f->name);
            if (!strstr(text, a) && !strstr(text, b))
                fail_msg("the example lacks %s.%s", d->name, f->name);
        }
        if (f->type == PROTOBUF_C_TYPE_MESSAGE)
            check_example_names(text, f->descriptor, depth + 1);
    }
}

static void test_example(void **state)
{
    static const fa_config_kind kinds[] = {FA_CONFIG_AGGREGATOR, FA_CONFIG_WORKER,
                                           FA_CONFIG_FEDERATION};
    (void)state;

    for (size_t k = 0; k < 3; k++) {
        ProtobufCMessage *m = NULL;
        fa_diags *d = NULL;
        fa_error err = {0};
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(fa_config_example(kinds[k], &text, &len, &err), 0);
        assert_int_equal(strlen(text), len);
        check_example_names(text, fa_config_descriptor(kinds[k]), 0);
        /* the comments come from config.proto */
        assert_non_null(strstr(text, kinds[k] == FA_CONFIG_FEDERATION
                                         ? "# The team it belongs to."
                                         : "# Flow-control window of one stream, bytes."));
        /* valid, and its type is recognisable */
        assert_int_equal(fa_config_guess_kind(text, len), kinds[k]);
        assert_int_equal(fa_diags_new(&d), 0);
        if (fa_config_load_text(kinds[k], text, len, "example", "/nonexistent", FA_CONFIG_NO_FILES,
                                &m, d, &err) != 0)
            fail_msg("the %s example does not pass check: %s", fa_config_kind_name(kinds[k]),
                     err.msg);
        protobuf_c_message_free_unpacked(m, NULL);
        fa_diags_del(d);
        free(text);
    }
    {
        fa_error err = {0};
        char *text = (char *)1;
        assert_int_equal(fa_config_example(FA_CONFIG_UNKNOWN, &text, NULL, &err), FA_ERR_INVAL);
        assert_null(text);
    }
}

/* A federation file: the federation parts, checked as an aggregator's are;
 * its own rules (an id that names a directory, a team, no command); and
 * what a person sees at each position. */
static void test_federation_file(void **state)
{
    static const char ok[] =
        "federation_id: \"vision-lr3\" team: \"vision\"\n"
        "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n"
        "regions { id: \"us-east\" identity_public_key_file: \"keys/us.pub\" }\n"
        "model { init_file: \"models/m.safetensors\" }\n"
        "evaluator: \"fmnist-test\" trainer: \"cnn\" dataset: \"fmnist\"\n"
        "promotion { enabled: true source: SOURCE_CENTRAL channels: \"staging\" }\n";
    static const char bad[] =
        "federation_id: \"../x\"\n"                                        /* 1 */
        "regions { id: \"eu-west\" identity_public_key: \"" KEY_A "\" }\n" /* 2 */
        "round { threshold: 3 }\n"                                         /* 3 */
        "evaluation { command: [\"rm\", \"-rf\", \"/\"] }\n"               /* 4 */
        "keep_versions: 0\n"                                               /* 5 */
        "promotion { enabled: true source: SOURCE_CENTRAL }\n";            /* 6 */
    Fedagg__FederationConfig *f = NULL;
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(fa_config_guess_kind(ok, strlen(ok)), FA_CONFIG_FEDERATION);
    assert_int_equal(
        load_text(FA_CONFIG_UNKNOWN, ok, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&f, &d), 0);
    assert_string_equal(f->federation_id, "vision-lr3");
    assert_string_equal(f->regions[1]->identity_public_key_file, "/etc/fedagg/keys/us.pub");
    assert_string_equal(f->model->init_file, "/etc/fedagg/models/m.safetensors");
    assert_int_equal(f->round->threshold, 2); /* the same defaults as an aggregator's */
    assert_int_equal(f->model->n_hidden, 2);
    assert_int_equal(f->keep_versions, 10);
    assert_true(f->promotion->enabled); /* its own gate, judged by its evaluator */
    protobuf_c_message_free_unpacked(&f->base, NULL);
    fa_diags_del(d);

    assert_int_equal(load_text(FA_CONFIG_FEDERATION, bad, FA_CONFIG_NO_FILES, &m, &d),
                     FA_ERR_INVAL);
    assert_null(m);
    assert_true(has_diag(d, "c.textproto:1:1: `federation_id` \"../x\": 1 to 63 characters"));
    assert_true(has_diag(d, "`team` is required"));
    assert_true(has_diag(d, "c.textproto:3:9: `round.threshold` (3) exceeds"));
    assert_true(has_diag(d, "c.textproto:4:14: `evaluation.command`: a federation file cannot "
                            "carry a command"));
    assert_true(has_diag(d, "c.textproto:5:1: `keep_versions` must be at least 1"));
    assert_true(has_diag(d, "`promotion.source` SOURCE_CENTRAL judges by the evaluator command"));
    fa_diags_del(d);
    /* An aggregator config is not a federation file. */
    assert_int_equal(fa_config_guess_kind(agg_text, strlen(agg_text)), FA_CONFIG_AGGREGATOR);
}

/* A service: no default federation needs no regions nor storage; its
 * operators, teams and evaluators are checked. */
static void test_service_config(void **state)
{
    static const char svc[] =
        "tls { cert_file: \"c.crt\" key_file: \"c.key\" ca_file: \"ca.crt\" }\n"
        "audit { signing_key_file: \"audit.key\" }\n"
        "service { dir: \"svc\" evaluators { name: \"e\" command: \"./eval\" } }\n"
        "operators: [\"alice\"]\n"
        "teams { name: \"vision\" operators: [\"alice\"] }\n";
    static const char bad[] =
        "tls { cert_file: \"c.crt\" key_file: \"c.key\" ca_file: \"ca.crt\" }\n"
        "audit { signing_key_file: \"audit.key\" }\n"
        "service { dir: \"svc\" evaluators { name: \"e\" } }\n"     /* 3 */
        "operators: [\"alice\"]\n"                                  /* 4 */
        "teams { name: \"a b\" operators: [\"alice\"] }\n"          /* 5 */
        "teams { name: \"v\" operators: [\"alice\", \"carol\"] }\n" /* 6 */
        "teams { name: \"v\" }\n"                                   /* 7 */
        "team: \"nlp\"\n";                                          /* 8 */
    Fedagg__AggregatorConfig *c = NULL;
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    (void)state;

    assert_int_equal(
        load_text(FA_CONFIG_AGGREGATOR, svc, FA_CONFIG_NO_FILES, (ProtobufCMessage **)&c, &d), 0);
    assert_int_equal(c->n_regions, 0);
    assert_string_equal(c->service->dir, "/etc/fedagg/svc");
    assert_string_equal(c->service->origin, "fedagg-service");
    /* the process's own files go into the service's directory */
    assert_string_equal(c->quic->static_secret_file, "/etc/fedagg/svc/quic.secret");
    assert_string_equal(c->teams[0]->operators[0], "alice");
    protobuf_c_message_free_unpacked(&c->base, NULL);
    fa_diags_del(d);

    assert_int_equal(load_text(FA_CONFIG_AGGREGATOR, bad, FA_CONFIG_NO_FILES, &m, &d),
                     FA_ERR_INVAL);
    assert_true(has_diag(d, "c.textproto:3:22: `service.evaluators[0].command`: give"));
    assert_true(has_diag(d, "c.textproto:5:9: `teams[0].name` \"a b\""));
    assert_true(has_diag(d, "c.textproto:6:19: `teams[1].operators[1]` \"carol\" is not one "
                            "of `operators`"));
    assert_true(has_diag(d, "c.textproto:7:9: `teams[2].name`: team \"v\" is defined twice"));
    assert_true(has_diag(d, "c.textproto:8:1: `team` \"nlp\" is not one of `teams`"));
    fa_diags_del(d);
    /* Without a service, regions stay required. */
    assert_int_equal(load_text(FA_CONFIG_AGGREGATOR,
                               "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" }\n"
                               "audit { signing_key_file: \"audit.key\" }\n",
                               FA_CONFIG_NO_FILES, &m, &d),
                     FA_ERR_INVAL);
    assert_true(has_diag(d, "`regions`: list at least one region"));
    fa_diags_del(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_federation_file),
        cmocka_unit_test(test_service_config),
        cmocka_unit_test(test_defaults_and_paths),
        cmocka_unit_test(test_model_delta_widths),
        cmocka_unit_test(test_worker_defaults),
        cmocka_unit_test(test_promotion_policy),
        cmocka_unit_test(test_worker_privacy),
        cmocka_unit_test(test_agent_config),
        cmocka_unit_test(test_meaning_errors_with_positions),
        cmocka_unit_test(test_syntax_errors_stop_before_meaning),
        cmocka_unit_test(test_guess_kind),
        cmocka_unit_test(test_effective_values),
        cmocka_unit_test(test_keys_and_addresses),
        cmocka_unit_test(test_path_table_complete),
        cmocka_unit_test(test_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
