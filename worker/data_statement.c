/* data_statement.c - a region's data statement.  See data_statement.h. */
#include "worker/data_statement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_hex.h"
#include "common/fa_sha256.h"
#include "common/fa_time.h"
#include "crypto/identity.h"
#include "fedagg.pb-c.h"
#include "worker/round_client.h"

#define MANIFEST_MAGIC "fedagg-data-manifest v1\n"

/* SHA-256 and size of the file at path. */
static int hash_file(const char *path, uint8_t sha[32], uint64_t *size, fa_error *err)
{
    fa_sha256_ctx st = {0};
    uint8_t buf[1 << 16];
    FILE *f = fopen(path, "rb");
    size_t r;
    int rc = 0;

    *size = 0;
    if (!f)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO,
                         "data manifest: %s: %s", path, strerror(errno));
    if (fa_sha256_init(&st) != 0) {
        fclose(f);
        fa_sha256_free(&st);
        return fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
    }
    while ((r = fread(buf, 1, sizeof(buf), f)) > 0) {
        (void)fa_sha256_update(&st, buf, r); /* a failure is sticky: final says */
        *size += r;
    }
    if (ferror(f))
        rc = fa_errorf(err, FA_ERR_IO, "data manifest: %s: read error", path);
    else if (fa_sha256_final(&st, sha) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "data manifest: %s: SHA-256 failed", path);
    fa_sha256_free(&st);
    fclose(f);
    return rc;
}

int fa_data_manifest_digest(const char *const *roles, const char *const *paths, size_t n,
                            uint8_t out[32], fa_error *err)
{
    fa_sha256_ctx st = {0};
    int rc = 0;

    if (fa_sha256_init(&st) != 0) {
        fa_sha256_free(&st);
        return fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
    }
    (void)fa_sha256_update(&st, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint8_t sha[32];
        uint64_t size;
        char line[160], hex[65];
        rc = hash_file(paths[i], sha, &size, err);
        if (rc == 0) {
            fa_hex_encode(hex, sizeof(hex), sha, 32);
            snprintf(line, sizeof(line), "%s %llu %s\n", roles[i], (unsigned long long)size, hex);
            (void)fa_sha256_update(&st, line, strlen(line));
        }
    }
    if (rc == 0 && fa_sha256_final(&st, out) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "data manifest: SHA-256 failed");
    fa_sha256_free(&st);
    return rc;
}

int fa_data_trainer_builtin_digest(const Fedagg__BuiltinTrainer *b, uint8_t out[32])
{
    static const char tag[] = "fedagg-trainer builtin v1\n" FA_VERSION "\n";
    size_t n = b ? fedagg__builtin_trainer__get_packed_size(b) : 0;
    uint8_t *buf = malloc(sizeof(tag) + n);
    int rc;

    if (!buf)
        return FA_ERR_NOMEM;
    memcpy(buf, tag, sizeof(tag) - 1);
    if (b)
        fedagg__builtin_trainer__pack(b, buf + sizeof(tag) - 1);
    rc = fa_sha256(out, buf, sizeof(tag) - 1 + n);
    free(buf);
    return rc;
}

int fa_data_trainer_command_digest(const char *const *argv, size_t n, const char *mode,
                                   uint8_t out[32])
{
    fa_sha256_ctx st = {0};
    static const char tag[] = "fedagg-trainer command v1\n";
    int rc;

    if (fa_sha256_init(&st) != 0) {
        fa_sha256_free(&st);
        return FA_ERR_CRYPTO;
    }
    (void)fa_sha256_update(&st, tag, sizeof(tag) - 1);
    (void)fa_sha256_update(&st, mode, strlen(mode) + 1);
    for (size_t i = 0; i < n; i++)
        (void)fa_sha256_update(&st, argv[i], strlen(argv[i]) + 1);
    rc = fa_sha256_final(&st, out);
    fa_sha256_free(&st);
    return rc;
}

/* The value of KEY=... among env entries, or NULL. */
static const char *env_value(char **env, size_t n, const char *key)
{
    size_t k = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (env[i] && !strncmp(env[i], key, k) && env[i][k] == '=')
            return env[i] + k + 1;
    return NULL;
}

int fa_data_source_from_config(fa_data_source *out, const Fedagg__WorkerConfig *cfg, fa_error *err)
{
    static const char *const roles[] = {"train_images", "train_labels", "test_images",
                                        "test_labels"};
    static const char *const keys[] = {"FEDAGG_DATA_TRAIN_IMAGES", "FEDAGG_DATA_TRAIN_LABELS",
                                       "FEDAGG_DATA_TEST_IMAGES", "FEDAGG_DATA_TEST_LABELS"};
    const Fedagg__ExternalTrainer *x =
        cfg->trainer && cfg->trainer->kind_case == FEDAGG__TRAINER__KIND_EXTERNAL
            ? cfg->trainer->external
            : NULL;
    const char *r[4], *p[4];
    size_t n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    /* a region agent's worker: the policy's names (AgentLink) */
    snprintf(out->dataset, sizeof(out->dataset), "%s",
             cfg->agent && cfg->agent->dataset && *cfg->agent->dataset ? cfg->agent->dataset
                                                                       : "default");
    for (size_t i = 0; i < 4; i++) {
        const char *path = NULL;
        if (x) {
            path = env_value(x->env, x->n_env, keys[i]);
        } else if (cfg->data) {
            const char *v[4] = {cfg->data->train_images, cfg->data->train_labels,
                                cfg->data->test_images, cfg->data->test_labels};
            path = v[i];
        }
        if (path && path[0]) {
            r[n] = roles[i];
            p[n++] = path;
        }
    }
    if (n) {
        rc = fa_data_manifest_digest(r, p, n, out->manifest_sha256, err);
        if (rc != 0)
            return rc;
        out->have_manifest = 1;
        out->n_files = n;
    }
    if (x) {
        const char *mode =
            x->mode == FEDAGG__TRAINER_MODE__TRAINER_LONG_LIVED ? "long-lived" : "one-shot";
        snprintf(out->trainer, sizeof(out->trainer), "external");
        snprintf(out->trainer_kind, sizeof(out->trainer_kind), "external:%s", mode);
        rc = fa_data_trainer_command_digest((const char *const *)x->command, x->n_command, mode,
                                            out->trainer_sha256);
    } else {
        snprintf(out->trainer, sizeof(out->trainer), "builtin");
        snprintf(out->trainer_kind, sizeof(out->trainer_kind), "builtin");
        rc = fa_data_trainer_builtin_digest(cfg->trainer ? cfg->trainer->builtin : NULL,
                                            out->trainer_sha256);
    }
    if (rc != 0)
        return fa_errorf(err, rc, "the trainer's digest: SHA-256 failed");
    if (cfg->agent && cfg->agent->trainer && *cfg->agent->trainer)
        snprintf(out->trainer, sizeof(out->trainer), "%s", cfg->agent->trainer);
    return 0;
}

int fa_data_statement_pack(const fa_data_source *src, const char *federation_id, const char *region,
                           uint64_t round, uint32_t attempt, uint64_t version,
                           const uint8_t model_sha256[32], uint64_t num_examples, uint64_t unix_ms,
                           uint8_t **out, size_t *len, fa_error *err)
{
    Fedagg__DataStatement s = FEDAGG__DATA_STATEMENT__INIT;

    *out = NULL;
    *len = 0;
    if (!federation_id || !federation_id[0] || !region || !region[0] || num_examples == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "data statement: a federation, a region and at least one example are "
                         "needed");
    s.federation_id = (char *)federation_id;
    s.region = (char *)region;
    s.round = round;
    s.attempt = attempt;
    s.model_version = version;
    s.model_sha256.data = (uint8_t *)model_sha256;
    s.model_sha256.len = 32;
    s.dataset = (char *)src->dataset;
    if (src->have_manifest) {
        s.manifest_sha256.data = (uint8_t *)src->manifest_sha256;
        s.manifest_sha256.len = 32;
    }
    s.num_examples = num_examples;
    s.trainer = (char *)src->trainer;
    s.trainer_sha256.data = (uint8_t *)src->trainer_sha256;
    s.trainer_sha256.len = 32;
    s.trainer_kind = (char *)src->trainer_kind;
    s.unix_ms = unix_ms;
    *len = fedagg__data_statement__get_packed_size(&s);
    if (!(*out = malloc(*len ? *len : 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "data statement: out of memory");
    fedagg__data_statement__pack(&s, *out);
    return 0;
}

int fa_data_statement_post(struct fa_round_client *rc, const fa_data_source *src, uint64_t round,
                           uint32_t attempt, uint64_t version, const uint8_t model_sha256[32],
                           uint64_t num_examples, fa_error *err)
{
    uint8_t *st = NULL;
    size_t len = 0;
    char what[96];
    int r = fa_data_statement_pack(src, fa_round_client_federation(rc), fa_round_client_region(rc),
                                   round, attempt, version, model_sha256, num_examples,
                                   fa_time_unix_ms(), &st, &len, err);
    if (r != 0)
        return r;
    snprintf(what, sizeof(what), "data statement of round %llu attempt %u",
             (unsigned long long)round, attempt);
    r = fa_round_client_post_signed(rc, "/v1/data-statements", FA_IDENTITY_DOMAIN_DATA, st, len,
                                    what, err);
    free(st);
    return r;
}
