/* privacy_state.c - the region's privacy accountant on disk (privacy_state.h). */
#include "worker/privacy_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "crypto/identity.h"

struct fa_privacy_state {
    char path[4200];
    uint8_t *seed; /* sodium_malloc'ed identity seed */
    fa_privacy_budget *budget;
};

/* Files that show a worker has run in this state directory before. */
static const char *const used_marks[] = {"global.safetensors", "attempt.state", "local-round.0"};

static const char *used_before(const char *dir, char *buf, size_t n)
{
    struct stat st;
    for (size_t i = 0; i < sizeof(used_marks) / sizeof(used_marks[0]); i++) {
        snprintf(buf, n, "%s/%s", dir, used_marks[i]);
        if (stat(buf, &st) == 0)
            return used_marks[i];
    }
    return NULL;
}

static int load_seed(fa_privacy_state *s, const char *key_file, fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    if (!key_file || !*key_file)
        return fa_errorf(err, FA_ERR_INVAL, "config: identity_key_file is required");
    rc = fa_file_check_private(key_file, err);
    if (rc == 0)
        rc = fa_file_read_all(key_file, &data, &len, 1 << 16, err);
    if (rc == 0)
        rc = fa_identity_parse_secret(data, len, s->seed, err);
    if (data) {
        sodium_memzero(data, len);
        free(data);
    }
    if (rc != 0)
        fa_error_prefix(err, rc, "%s", key_file);
    return rc;
}

int fa_privacy_state_open_dir(fa_privacy_state **out, const char *dir, const char *owner,
                              const char *region, const char *identity_key_file,
                              const Fedagg__WorkerPrivacy *p, const char *used, int *created,
                              fa_error *err)
{
    fa_privacy_state *s;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    *out = NULL;
    if (created)
        *created = 0;
    if (!p || !(p->target_epsilon > 0))
        return fa_errorf(err, FA_ERR_INVAL, "privacy: no budget (privacy.target_epsilon)");
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    s->seed = sodium_malloc(32);
    if (!s->seed) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    snprintf(s->path, sizeof(s->path), "%s/%s", dir ? dir : ".", FA_PRIVACY_BUDGET_FILE);
    if ((rc = load_seed(s, identity_key_file, err)) != 0)
        goto fail;

    rc = fa_file_read_all(s->path, &data, &len, 1 << 24, err);
    if (rc == 0) {
        rc = fa_privacy_budget_open(&s->budget, owner, region, p->target_epsilon, p->target_delta,
                                    data, len, s->seed, err);
        free(data);
        if (rc != 0) {
            fa_error_prefix(err, rc,
                            "%s: refusing to start: the privacy accountant cannot be read, and "
                            "it is never reset (restore the file, or the identity key it was "
                            "sealed with)",
                            s->path);
            goto fail;
        }
        *out = s;
        return 0;
    }
    if (rc != FA_ERR_NOTFOUND) {
        fa_error_prefix(err, rc, "the privacy accountant");
        goto fail;
    }
    if (used && !p->new_accountant) {
        rc = fa_errorf(err, FA_ERR_STATE,
                       "%s is missing, but %s: refusing to start, since a deleted accountant "
                       "would reset the privacy budget; restore the file, or, if this region "
                       "never trained here under differential privacy, set "
                       "privacy.new_accountant: true once",
                       s->path, used);
        goto fail;
    }
    if ((rc = fa_privacy_budget_new(&s->budget, owner, region, p->target_epsilon, p->target_delta,
                                    err)) != 0 ||
        (rc = fa_privacy_state_save(s, err)) != 0)
        goto fail;
    if (created)
        *created = 1;
    *out = s;
    return 0;
fail:
    fa_privacy_state_del(s);
    return rc;
}

int fa_privacy_state_open(fa_privacy_state **out, const Fedagg__WorkerConfig *cfg, int *created,
                          fa_error *err)
{
    const char *dir = cfg->state_dir ? cfg->state_dir : ".";
    char mark[4200], why[4300];
    const char *used = used_before(dir, mark, sizeof(mark));

    if (used)
        snprintf(why, sizeof(why), "this state directory has been used (%s is there)", used);
    return fa_privacy_state_open_dir(out, dir, cfg->federation_id ? cfg->federation_id : "fedagg",
                                     cfg->region_id, cfg->identity_key_file, cfg->privacy,
                                     used ? why : NULL, created, err);
}

void fa_privacy_state_del(fa_privacy_state *s)
{
    if (!s)
        return;
    if (s->seed)
        sodium_free(s->seed); /* wipes */
    fa_privacy_budget_del(s->budget);
    free(s);
}

fa_privacy_budget *fa_privacy_state_budget(fa_privacy_state *s)
{
    return s->budget;
}

const char *fa_privacy_state_path(const fa_privacy_state *s)
{
    return s->path;
}

int fa_privacy_state_save(fa_privacy_state *s, fa_error *err)
{
    uint8_t *sealed = NULL;
    size_t len = 0;
    int rc = fa_privacy_budget_seal(s->budget, s->seed, &sealed, &len, err);
    if (rc != 0)
        return rc;
    rc = fa_file_write_atomic(s->path, sealed, len, 0600, err);
    if (rc != 0)
        fa_error_prefix(err, rc, "cannot write the privacy accountant %s", s->path);
    free(sealed);
    return rc;
}
