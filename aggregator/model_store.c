#include "aggregator/model_store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_crc32c.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"

#define MANIFEST_MAGIC "fedagg-model-store 1"
#define MAX_KEEP 1000

struct entry {
    struct fa_model_version v;
};

struct fa_model_store {
    char *dir;
    unsigned keep;
    struct entry *entries; /* retained versions, ascending; the last is current */
    size_t n;
    uint64_t *pins; /* versions kept beyond the window (fa_model_store_pin) */
    size_t npins, cappins;
};

char *fa_model_store_model_path(const fa_model_store *s, uint64_t version, char *buf, size_t n)
{
    snprintf(buf, n, "%s/model-%08" PRIu64 ".safetensors", s->dir, version);
    return buf;
}

char *fa_model_store_state_path(const fa_model_store *s, uint64_t version, char *buf, size_t n)
{
    snprintf(buf, n, "%s/state-%08" PRIu64 ".safetensors", s->dir, version);
    return buf;
}

char *fa_model_store_spare_state_path(const fa_model_store *s, char *buf, size_t n)
{
    snprintf(buf, n, "%s/state.spare", s->dir);
    return buf;
}

char *fa_model_store_master_path(const fa_model_store *s, uint64_t version, char *buf, size_t n)
{
    snprintf(buf, n, "%s/master-%08" PRIu64 ".safetensors", s->dir, version);
    return buf;
}

char *fa_model_store_delta_path(const fa_model_store *s, uint64_t version, char *buf, size_t n)
{
    snprintf(buf, n, "%s/delta-%08" PRIu64 ".safetensors", s->dir, version);
    return buf;
}

char *fa_model_store_weights_path(const fa_model_store *s, uint64_t version, char *buf, size_t n)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->entries[i].v.version == version)
            return s->entries[i].v.has_master ? fa_model_store_master_path(s, version, buf, n)
                                              : fa_model_store_model_path(s, version, buf, n);
    return NULL;
}

/* The SHA-256 of the file at path into sha, or with crc not NULL its
 * CRC-32C into *crc (sha unused); its size into *size when not NULL.
 * Returns 0, FA_ERR_NOTFOUND, FA_ERR_IO or FA_ERR_CRYPTO. */
static int hash_file(const char *path, uint8_t sha[32], uint32_t *crc, uint64_t *size,
                     fa_error *err)
{
    fa_sha256_ctx st = {0};
    uint8_t buf[1 << 16];
    FILE *f = fopen(path, "rb");
    uint64_t total = 0;
    uint32_t c = 0;
    size_t r;

    if (!f)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(errno));
    if (!crc && fa_sha256_init(&st) != 0) {
        fa_sha256_free(&st);
        fclose(f);
        return fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
    }
    /* a failure is sticky: fa_sha256_final reports it */
    while ((r = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (crc)
            c = fa_crc32c(c, buf, r);
        else
            (void)fa_sha256_update(&st, buf, r);
        total += r;
    }
    if (ferror(f)) {
        fclose(f);
        fa_sha256_free(&st);
        return fa_errorf(err, FA_ERR_IO, "%s: read error", path);
    }
    fclose(f);
    if (!crc && fa_sha256_final(&st, sha) != 0) {
        fa_sha256_free(&st);
        return fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    }
    fa_sha256_free(&st);
    if (crc)
        *crc = c;
    if (size)
        *size = total;
    return 0;
}

/* MANIFEST: the magic line, then one line per retained version, ascending:
 *   v <version> <round> <model-size> <model-sha256-hex> <state> <master>[ <delta>]
 * where <state> is c<state-crc32c-hex> (8 digits), or for versions older
 * aggregators committed <state-sha256-hex> (the state's digest only guards
 * this store against damage, which a CRC does at a sixth of the cost),
 * <master> is "-" (no master file) or <master-size>:<master-sha256-hex>
 * and <delta>, present only when the version has a delta file,
 * d<delta-size>:<delta-sha256-hex>; lines of stores written before master
 * files existed end after the state. */
static int write_manifest(fa_model_store *s, const struct entry *e, size_t n, fa_error *err)
{
    char path[4096], *text;
    size_t cap = 64 + n * 400, len = 0; /* a line is at most ~370 bytes */
    int rc;

    text = malloc(cap);
    if (!text)
        return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
    len += (size_t)snprintf(text, cap, "%s\n", MANIFEST_MAGIC);
    for (size_t i = 0; i < n; i++) {
        char mh[65], sh[65], xh[65], master[96], delta[96] = "";
        fa_hex_encode(mh, sizeof(mh), e[i].v.model_sha256, 32);
        if (e[i].v.state_crc)
            snprintf(sh, sizeof(sh), "c%08" PRIx32, e[i].v.state_crc32c);
        else
            fa_hex_encode(sh, sizeof(sh), e[i].v.state_sha256, 32);
        if (e[i].v.has_master) {
            fa_hex_encode(xh, sizeof(xh), e[i].v.master_sha256, 32);
            snprintf(master, sizeof(master), "%" PRIu64 ":%s", e[i].v.master_size, xh);
        } else {
            snprintf(master, sizeof(master), "-");
        }
        if (e[i].v.has_delta) {
            fa_hex_encode(xh, sizeof(xh), e[i].v.delta_sha256, 32);
            snprintf(delta, sizeof(delta), " d%" PRIu64 ":%s", e[i].v.delta_size, xh);
        }
        len += (size_t)snprintf(
            text + len, cap - len, "v %" PRIu64 " %" PRIu64 " %" PRIu64 " %s %s %s%s\n",
            e[i].v.version, e[i].v.round, e[i].v.model_size, mh, sh, master, delta);
    }
    snprintf(path, sizeof(path), "%s/MANIFEST", s->dir);
    rc = fa_file_write_atomic(path, text, len, 0644, err);
    free(text);
    return rc;
}

/* <state> of a MANIFEST line: c and 8 hex digits, or 64 hex digits. */
static int parse_state_digest(struct fa_model_version *v, const char *sh)
{
    uint8_t b[4];
    if (sh[0] != 'c')
        return fa_hex_decode(v->state_sha256, 32, sh, strlen(sh));
    if (strlen(sh) != 9 || fa_hex_decode(b, 4, sh + 1, 8) != 0)
        return FA_ERR_PARSE;
    v->state_crc = 1;
    v->state_crc32c = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 0;
}

static int parse_manifest(fa_model_store *s, const char *path, char *text, fa_error *err)
{
    char *save = NULL, *line;
    int lineno = 0;

    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct entry e = {0};
        char mh[65], sh[65], xh[65];
        int used = 0, used2 = 0;
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, MANIFEST_MAGIC))
                return fa_errorf(err, FA_ERR_CORRUPT, "%s:1: not a model store manifest", path);
            continue;
        }
        if (sscanf(line, "v %" SCNu64 " %" SCNu64 " %" SCNu64 " %64s %64s%n", &e.v.version,
                   &e.v.round, &e.v.model_size, mh, sh, &used) != 5 ||
            (line[used] != '\0' && line[used] != ' ') ||
            fa_hex_decode(e.v.model_sha256, 32, mh, strlen(mh)) != 0 ||
            parse_state_digest(&e.v, sh) != 0)
            return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: malformed line", path, lineno);
        if (line[used] == ' ' && !strncmp(line + used, " -", 2) &&
            (line[used + 2] == '\0' || line[used + 2] == ' ')) {
            used += 2;
        } else if (line[used] == ' ') {
            if (sscanf(line + used, " %" SCNu64 ":%64s%n", &e.v.master_size, xh, &used2) != 2 ||
                (line[used + used2] != '\0' && line[used + used2] != ' ') || strlen(xh) != 64 ||
                fa_hex_decode(e.v.master_sha256, 32, xh, 64) != 0)
                return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: malformed master field", path,
                                 lineno);
            e.v.has_master = 1;
            used += used2;
        }
        if (line[used] == ' ') {
            used2 = 0;
            if (sscanf(line + used, " d%" SCNu64 ":%64s%n", &e.v.delta_size, xh, &used2) != 2 ||
                line[used + used2] != '\0' || strlen(xh) != 64 ||
                fa_hex_decode(e.v.delta_sha256, 32, xh, 64) != 0)
                return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: malformed delta field", path, lineno);
            e.v.has_delta = 1;
        } else if (line[used] != '\0') {
            return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: malformed line", path, lineno);
        }
        if (s->n > 0 && e.v.version <= s->entries[s->n - 1].v.version)
            return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: versions not ascending", path, lineno);
        if (s->n >= MAX_KEEP + 1)
            return fa_errorf(err, FA_ERR_CORRUPT, "%s:%d: too many versions", path, lineno);
        struct entry *ne = realloc(s->entries, (s->n + 1) * sizeof(*ne));
        if (!ne)
            return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
        s->entries = ne;
        s->entries[s->n++] = e;
    }
    if (lineno == 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: empty manifest", path);
    return 0;
}

/* Removes temporary files and files of versions newer than the current one
 * (written by a commit that crashed before its MANIFEST rename). */
static void remove_leftovers(fa_model_store *s)
{
    uint64_t current = s->n ? s->entries[s->n - 1].v.version : 0;
    int have = s->n > 0;
    DIR *d = opendir(s->dir);
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d))) {
        char path[4096];
        uint64_t v;
        int end = 0, stale = 0;
        if (strstr(de->d_name, ".tmp."))
            stale = 1;
        else if ((sscanf(de->d_name, "model-%" SCNu64 ".safetensors%n", &v, &end) == 1 ||
                  sscanf(de->d_name, "state-%" SCNu64 ".safetensors%n", &v, &end) == 1) &&
                 de->d_name[end] == '\0' && (!have || v > current))
            stale = 1;
        else if ((sscanf(de->d_name, "master-%" SCNu64 ".safetensors%n", &v, &end) == 1 ||
                  sscanf(de->d_name, "delta-%" SCNu64 ".safetensors%n", &v, &end) == 1) &&
                 de->d_name[end] == '\0' && (!have || v > current))
            stale = 1;
        if (stale) {
            snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
            fa_log(FA_LOG_WARN, "model store: removing leftover of an interrupted commit",
                   "file=%s", path);
            unlink(path);
        }
    }
    closedir(d);
}

static int verify_current(fa_model_store *s, fa_error *err)
{
    const struct fa_model_version *v = &s->entries[s->n - 1].v;
    char path[4096];
    uint8_t sha[32];
    uint32_t crc = 0;
    uint64_t size;
    int rc;

    fa_model_store_model_path(s, v->version, path, sizeof(path));
    rc = hash_file(path, sha, NULL, &size, err);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: current model file unreadable: %s", path,
                         fa_error_msg(err, rc));
    if (sodium_memcmp(sha, v->model_sha256, 32) != 0 || size != v->model_size)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "%s: SHA-256 does not match MANIFEST: the model file is damaged", path);
    fa_model_store_state_path(s, v->version, path, sizeof(path));
    rc = hash_file(path, sha, v->state_crc ? &crc : NULL, NULL, err);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: optimizer state file unreadable: %s", path,
                         fa_error_msg(err, rc));
    if (v->state_crc ? crc != v->state_crc32c : sodium_memcmp(sha, v->state_sha256, 32) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "%s: %s does not match MANIFEST: the optimizer state is damaged", path,
                         v->state_crc ? "CRC-32C" : "SHA-256");
    if (v->has_delta) {
        fa_model_store_delta_path(s, v->version, path, sizeof(path));
        rc = hash_file(path, sha, NULL, &size, err);
        if (rc != 0)
            return fa_errorf(err, FA_ERR_CORRUPT, "%s: model delta file unreadable: %s", path,
                             fa_error_msg(err, rc));
        if (sodium_memcmp(sha, v->delta_sha256, 32) != 0 || size != v->delta_size)
            return fa_errorf(err, FA_ERR_CORRUPT,
                             "%s: SHA-256 does not match MANIFEST: the model delta is damaged",
                             path);
    }
    if (!v->has_master)
        return 0;
    fa_model_store_master_path(s, v->version, path, sizeof(path));
    rc = hash_file(path, sha, NULL, &size, err);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: master weights file unreadable: %s", path,
                         fa_error_msg(err, rc));
    if (sodium_memcmp(sha, v->master_sha256, 32) != 0 || size != v->master_size)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "%s: SHA-256 does not match MANIFEST: the master weights are damaged",
                         path);
    return 0;
}

int fa_model_store_open(fa_model_store **out, const char *dir, unsigned keep, fa_error *err)
{
    fa_model_store *s;
    char path[4096];
    uint8_t *text = NULL;
    size_t len;
    int rc;

    *out = NULL;
    if (keep < 1 || keep > MAX_KEEP)
        return fa_errorf(err, FA_ERR_INVAL, "model store: keep_versions must be 1..%d, not %u",
                         MAX_KEEP, keep);
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    rc = fa_file_mkdirs(dir, 0755, err);
    if (rc != 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
    }
    s->keep = keep;
    snprintf(path, sizeof(path), "%s/MANIFEST", dir);
    rc = fa_file_read_all(path, &text, &len, 1 << 20, err);
    if (rc == FA_ERR_NOTFOUND) {
        rc = 0; /* a new store */
    } else if (rc == 0) {
        if (memchr(text, '\0', len))
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: binary data in manifest", path);
        else
            rc = parse_manifest(s, path, (char *)text, err);
        if (rc == 0 && s->n == 0)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: no version listed", path);
    }
    free(text);
    if (rc == 0) {
        remove_leftovers(s);
        if (s->n > 0)
            rc = verify_current(s, err);
    }
    if (rc != 0) {
        fa_model_store_del(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Whether a store file name is a versioned file of a version after
 * `after`: model-, state-, master- or delta-<v>.safetensors. */
static int newer_file(const char *name, uint64_t after)
{
    static const char *const kinds[] = {
        "model-%" SCNu64 ".safetensors%n", "state-%" SCNu64 ".safetensors%n",
        "master-%" SCNu64 ".safetensors%n", "delta-%" SCNu64 ".safetensors%n"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        uint64_t v;
        int end = 0;
        if (sscanf(name, kinds[i], &v, &end) == 1 && name[end] == '\0')
            return v > after;
    }
    return 0;
}

int fa_model_store_rollback(const char *dir, uint64_t version, const char *aside, int dry_run,
                            uint64_t *was, fa_error *err)
{
    fa_model_store *s = calloc(1, sizeof(*s));
    char path[4096], to[4200];
    uint8_t *text = NULL;
    size_t len = 0, idx = SIZE_MAX;
    DIR *d = NULL;
    struct dirent *de;
    int rc;

    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
    }
    s->keep = MAX_KEEP;
    snprintf(path, sizeof(path), "%s/MANIFEST", dir);
    rc = fa_file_read_all(path, &text, &len, 1 << 20, err);
    if (rc == 0 && memchr(text, '\0', len))
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: binary data in manifest", path);
    else if (rc == 0)
        rc = parse_manifest(s, path, (char *)text, err);
    free(text);
    if (rc != 0)
        goto out;
    *was = s->n ? s->entries[s->n - 1].v.version : 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->entries[i].v.version == version)
            idx = i;
    if (idx == SIZE_MAX) {
        char have[256] = "";
        size_t o = 0;
        for (size_t i = 0; i < s->n && o < sizeof(have); i++)
            o += (size_t)snprintf(have + o, sizeof(have) - o, "%s%" PRIu64, i ? ", " : "",
                                  s->entries[i].v.version);
        rc = fa_errorf(err, FA_ERR_NOTFOUND,
                       "%s: version %" PRIu64 " is not retained (the store keeps %s): it cannot "
                       "go back to it",
                       dir, version, have);
        goto out;
    }
    if (idx == s->n - 1)
        goto out; /* already current */
    s->n = idx + 1;
    if ((rc = verify_current(s, err)) != 0 || dry_run)
        goto out;
    if (mkdir(aside, 0755) != 0 && errno != EEXIST) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", aside, strerror(errno));
        goto out;
    }
    snprintf(to, sizeof(to), "%s/MANIFEST", aside);
    if (link(path, to) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "cannot keep %s as %s: %s", path, to, strerror(errno));
        goto out;
    }
    if (!(d = opendir(dir))) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", dir, strerror(errno));
        goto out;
    }
    while ((de = readdir(d))) {
        if (!newer_file(de->d_name, version))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        snprintf(to, sizeof(to), "%s/%s", aside, de->d_name);
        if (rename(path, to) != 0) {
            rc = fa_errorf(err, FA_ERR_IO, "cannot move %s to %s: %s", path, to, strerror(errno));
            goto out;
        }
    }
    rc = write_manifest(s, s->entries, s->n, err);
out:
    if (d)
        closedir(d);
    fa_model_store_del(s);
    return rc;
}

void fa_model_store_del(fa_model_store *s)
{
    if (!s)
        return;
    free(s->pins);
    free(s->entries);
    free(s->dir);
    free(s);
}

int fa_model_store_current(const fa_model_store *s, struct fa_model_version *out)
{
    if (s->n == 0)
        return FA_ERR_NOTFOUND;
    *out = s->entries[s->n - 1].v;
    return 0;
}

int fa_model_store_version(const fa_model_store *s, uint64_t version, struct fa_model_version *out)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->entries[i].v.version == version) {
            *out = s->entries[i].v;
            return 0;
        }
    return FA_ERR_NOTFOUND;
}

int fa_model_store_has(const fa_model_store *s, uint64_t version)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->entries[i].v.version == version)
            return 1;
    return 0;
}

int fa_model_store_sha256(fa_model_store *s, uint64_t version, uint8_t out[32], fa_error *err)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->entries[i].v.version == version) {
            memcpy(out, s->entries[i].v.model_sha256, 32);
            return 0;
        }
    return fa_errorf(err, FA_ERR_NOTFOUND, "model version %" PRIu64 " is not retained", version);
}

static int pinned(const fa_model_store *s, uint64_t version)
{
    for (size_t i = 0; i < s->npins; i++)
        if (s->pins[i] == version)
            return 1;
    return 0;
}

/* Lists e after the retained versions in a new MANIFEST (the commit point),
 * then retires the versions that fell out of the window of `keep` and are
 * not pinned: their files are removed, the first retired state file kept
 * as state.spare for the next commit to write over. */
static int append_entry(fa_model_store *s, const struct entry *e, fa_error *err)
{
    size_t total = s->n + 1, first = total > s->keep ? total - s->keep : 0, nk = 0;
    struct entry *all = malloc(total * sizeof(*all)), *kept = malloc(total * sizeof(*kept));
    char sparepath[4096];
    int spared = 0, rc;

    if (!all || !kept) {
        free(all);
        free(kept);
        return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
    }
    if (s->n > 0)
        memcpy(all, s->entries, s->n * sizeof(*all));
    all[s->n] = *e;
    for (size_t i = 0; i < total; i++)
        if (i >= first || pinned(s, all[i].v.version))
            kept[nk++] = all[i];
    rc = write_manifest(s, kept, nk, err);
    if (rc != 0) {
        free(all);
        free(kept);
        return rc;
    }
    /* Committed.  Retire versions that fell out of the window. */
    fa_model_store_spare_state_path(s, sparepath, sizeof(sparepath));
    for (size_t i = 0; i < first; i++) {
        char p[4096];
        if (pinned(s, all[i].v.version))
            continue;
        unlink(fa_model_store_model_path(s, all[i].v.version, p, sizeof(p)));
        fa_model_store_state_path(s, all[i].v.version, p, sizeof(p));
        if (!spared && rename(p, sparepath) == 0)
            spared = 1; /* the next commit writes its state over it */
        else
            unlink(p);
        if (all[i].v.has_master)
            unlink(fa_model_store_master_path(s, all[i].v.version, p, sizeof(p)));
        if (all[i].v.has_delta)
            unlink(fa_model_store_delta_path(s, all[i].v.version, p, sizeof(p)));
    }
    free(all);
    free(s->entries);
    s->entries = kept;
    s->n = nk;
    return 0;
}

/* A commit in progress: the new version's files open, each hashed as it is
 * written (fa_st_writer_hash_sha256). */
struct fa_model_commit {
    fa_model_store *s;
    struct entry e;
    fa_st_writer *w[FA_MODEL_FILES];
    char path[FA_MODEL_FILES][4096];
};

void fa_model_commit_abort(fa_model_commit *c)
{
    if (!c)
        return;
    for (int f = 0; f < FA_MODEL_FILES; f++)
        fa_st_writer_del(c->w[f]); /* an uncommitted file is removed */
    free(c);
}

/* The views of file f in files (n 0: the file is not written). */
static const fa_st_view *file_views(const fa_model_files *files, int f, size_t *n,
                                    const char *const **meta, size_t *n_meta)
{
    switch (f) {
    case FA_MODEL_FILE_MODEL:
        *n = files->n_model, *meta = files->meta, *n_meta = files->n_meta;
        return files->model;
    case FA_MODEL_FILE_MASTER:
        *n = files->n_master, *meta = files->master_meta, *n_meta = files->n_master_meta;
        return files->master;
    case FA_MODEL_FILE_DELTA:
        *n = files->n_delta, *meta = files->delta_meta, *n_meta = files->n_delta_meta;
        return files->delta;
    default:
        *n = files->n_state, *meta = files->state_meta, *n_meta = files->n_state_meta;
        return files->state;
    }
}

int fa_model_store_begin(fa_model_store *s, uint64_t version, uint64_t round,
                         const fa_model_files *files, fa_model_commit **out, fa_error *err)
{
    fa_model_commit *c;
    char sparepath[4096];
    int rc = 0;

    *out = NULL;
    if (s->n > 0 && version <= s->entries[s->n - 1].v.version)
        return fa_errorf(err, FA_ERR_INVAL,
                         "model store: version %" PRIu64 " is not after the current %" PRIu64,
                         version, s->entries[s->n - 1].v.version);
    if (!(c = calloc(1, sizeof(*c))))
        return fa_errorf(err, FA_ERR_NOMEM, "model store: out of memory");
    c->s = s;
    c->e.v.version = version;
    c->e.v.round = round;
    fa_model_store_model_path(s, version, c->path[FA_MODEL_FILE_MODEL], sizeof(c->path[0]));
    fa_model_store_master_path(s, version, c->path[FA_MODEL_FILE_MASTER], sizeof(c->path[0]));
    fa_model_store_delta_path(s, version, c->path[FA_MODEL_FILE_DELTA], sizeof(c->path[0]));
    fa_model_store_state_path(s, version, c->path[FA_MODEL_FILE_STATE], sizeof(c->path[0]));
    fa_model_store_spare_state_path(s, sparepath, sizeof(sparepath));
    for (int f = 0; rc == 0 && f < FA_MODEL_FILES; f++) {
        const char *const *meta;
        size_t n, n_meta;
        const fa_st_view *t = file_views(files, f, &n, &meta, &n_meta);
        if (n == 0 && f != FA_MODEL_FILE_MODEL && f != FA_MODEL_FILE_STATE)
            continue; /* no master, no delta */
        rc = fa_st_writer_new(&c->w[f], err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = fa_st_writer_add(c->w[f], t[i].name, t[i].dtype, t[i].ndim, t[i].shape, err);
        for (size_t i = 0; rc == 0 && i < n_meta; i++)
            rc = fa_st_writer_metadata(c->w[f], meta[2 * i], meta[2 * i + 1], err);
        if (rc == 0)
            rc = f == FA_MODEL_FILE_STATE ? fa_st_writer_hash_crc32c(c->w[f], err)
                                          : fa_st_writer_hash_sha256(c->w[f], err);
        if (rc == 0)
            rc = fa_st_writer_open_spare(c->w[f], c->path[f],
                                         f == FA_MODEL_FILE_STATE ? sparepath : NULL, 0644, err);
    }
    if (rc != 0) {
        fa_model_commit_abort(c);
        return rc;
    }
    *out = c;
    return 0;
}

int fa_model_commit_put(fa_model_commit *c, int file, size_t view, uint64_t off, const void *data,
                        size_t len, fa_error *err)
{
    if (file < 0 || file >= FA_MODEL_FILES || !c->w[file])
        return fa_errorf(err, FA_ERR_INVAL, "model store: commit of version %" PRIu64
                         " writes no file %d", c->e.v.version, file);
    return fa_st_writer_put(c->w[file], view, off, data, len, err);
}

int fa_model_store_finish(fa_model_commit *c, fa_error *err)
{
    fa_model_store *s = c->s;
    struct entry e = c->e;
    uint64_t state_size;
    int rc = 0;
    struct {
        uint8_t *sha;
        uint64_t *size;
        int *has;
    } out[FA_MODEL_FILES] = {
        {e.v.model_sha256, &e.v.model_size, NULL},
        {e.v.master_sha256, &e.v.master_size, &e.v.has_master},
        {e.v.delta_sha256, &e.v.delta_size, &e.v.has_delta},
        {NULL, &state_size, &e.v.state_crc}, /* its CRC-32C */
    };

    /* Each file fsync'ed and renamed into place, in the order model, master,
     * delta, state; the MANIFEST, written last, is the commit point. */
    for (int f = 0; rc == 0 && f < FA_MODEL_FILES; f++) {
        if (!c->w[f])
            continue;
        *out[f].size = fa_st_writer_total_size(c->w[f]);
        rc = fa_st_writer_commit(c->w[f], err);
        if (rc == 0 && (out[f].sha ? fa_st_writer_sha256(c->w[f], out[f].sha)
                                   : fa_st_writer_crc32c(c->w[f], &e.v.state_crc32c)) != 0)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: digest missing", c->path[f]);
        if (out[f].has)
            *out[f].has = 1;
    }
    if (rc != 0)
        goto fail;

    rc = append_entry(s, &e, err);
    if (rc != 0)
        goto fail;
    fa_model_commit_abort(c); /* every file is committed: frees what is left */
    return 0;
fail:
    for (int f = 0; f < FA_MODEL_FILES; f++)
        if (c->w[f])
            unlink(c->path[f]); /* those renamed into place already */
    fa_model_commit_abort(c);
    return rc;
}

int fa_model_store_commit(fa_model_store *s, uint64_t version, uint64_t round,
                          const fa_model_files *files, fa_error *err)
{
    fa_model_commit *c;
    int rc = fa_model_store_begin(s, version, round, files, &c, err);

    /* Every file in turn, each view in order (its data, or fill chunk by
     * chunk), as the file declares them. */
    for (int f = 0; rc == 0 && f < FA_MODEL_FILES; f++) {
        const char *const *meta;
        size_t n, n_meta;
        const fa_st_view *t = file_views(files, f, &n, &meta, &n_meta);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = fa_st_writer_write_view(c->w[f], &t[i], err);
    }
    if (rc == 0)
        return fa_model_store_finish(c, err);
    fa_model_commit_abort(c);
    return rc;
}

int fa_model_store_pin(fa_model_store *s, uint64_t version, int pin)
{
    for (size_t i = 0; i < s->npins; i++)
        if (s->pins[i] == version) {
            if (!pin)
                s->pins[i] = s->pins[--s->npins];
            return 0;
        }
    if (!pin)
        return 0;
    if (s->npins == s->cappins) {
        size_t cap = s->cappins ? 2 * s->cappins : 8;
        uint64_t *n = realloc(s->pins, cap * sizeof(*n));
        if (!n)
            return FA_ERR_NOMEM;
        s->pins = n;
        s->cappins = cap;
    }
    s->pins[s->npins++] = version;
    return 0;
}

/* Copies the file src to dst atomically (temporary file, fsync, rename),
 * checking on the way that src still has the digest the MANIFEST gives it:
 * its SHA-256 (sha) or its CRC-32C (crc).  Returns 0, FA_ERR_CORRUPT (src
 * changed), FA_ERR_IO... */
static int copy_checked(const char *src, const char *dst, const uint8_t *sha, const uint32_t *crc,
                        fa_error *err)
{
    fa_sha256_ctx st = {0};
    fa_atomic_file *out = NULL;
    uint8_t buf[1 << 16], got[32];
    uint32_t c = 0;
    FILE *in = fopen(src, "rb");
    size_t r;
    int rc;

    if (!in)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", src, strerror(errno));
    if (sha && fa_sha256_init(&st) != 0) {
        fclose(in);
        fa_sha256_free(&st);
        return fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
    }
    rc = fa_atomic_file_open(&out, dst, 0644, err);
    while (rc == 0 && (r = fread(buf, 1, sizeof(buf), in)) > 0) {
        if (sha)
            (void)fa_sha256_update(&st, buf, r);
        else
            c = fa_crc32c(c, buf, r);
        rc = fa_atomic_file_write(out, buf, r, err);
    }
    if (rc == 0 && ferror(in))
        rc = fa_errorf(err, FA_ERR_IO, "%s: read error", src);
    if (rc == 0 && sha && fa_sha256_final(&st, got) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", src);
    if (rc == 0 && (sha ? sodium_memcmp(got, sha, 32) != 0 : c != *crc))
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s does not match its MANIFEST digest: it is damaged; not restored", src);
    if (rc == 0)
        rc = fa_atomic_file_commit(out, err);
    else if (out)
        fa_atomic_file_abort(out);
    fa_sha256_free(&st);
    fclose(in);
    return rc;
}

int fa_model_store_restore(fa_model_store *s, uint64_t version, uint64_t round, uint64_t from,
                           fa_error *err)
{
    struct entry e;
    char src[4096], dst[4096];
    int rc = 0, f;

    if (s->n > 0 && version <= s->entries[s->n - 1].v.version)
        return fa_errorf(err, FA_ERR_INVAL,
                         "model store: version %" PRIu64 " is not after the current %" PRIu64,
                         version, s->entries[s->n - 1].v.version);
    if (fa_model_store_version(s, from, &e.v) != 0)
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "model store: version %" PRIu64 " is not retained; it cannot be restored",
                         from);
    if (!e.v.state_crc)
        return fa_errorf(err, FA_ERR_INVAL,
                         "model store: version %" PRIu64 " was committed by an older aggregator "
                         "(its optimizer state has a SHA-256, not a CRC-32C); it cannot be "
                         "restored",
                         from);
    e.v.version = version;
    e.v.round = round;
    e.v.has_delta = 0; /* a delta is against the version before: none */
    /* In the order a commit writes them; the MANIFEST last is the commit
     * point, so a failure leaves the store as it was. */
    for (f = 0; rc == 0 && f < 3; f++) {
        if (f == 0) {
            fa_model_store_model_path(s, from, src, sizeof(src));
            fa_model_store_model_path(s, version, dst, sizeof(dst));
            rc = copy_checked(src, dst, e.v.model_sha256, NULL, err);
        } else if (f == 1 && e.v.has_master) {
            fa_model_store_master_path(s, from, src, sizeof(src));
            fa_model_store_master_path(s, version, dst, sizeof(dst));
            rc = copy_checked(src, dst, e.v.master_sha256, NULL, err);
        } else if (f == 2) {
            fa_model_store_state_path(s, from, src, sizeof(src));
            fa_model_store_state_path(s, version, dst, sizeof(dst));
            rc = copy_checked(src, dst, NULL, &e.v.state_crc32c, err);
        }
    }
    if (rc == 0)
        rc = append_entry(s, &e, err);
    if (rc != 0) {
        unlink(fa_model_store_model_path(s, version, dst, sizeof(dst)));
        unlink(fa_model_store_master_path(s, version, dst, sizeof(dst)));
        unlink(fa_model_store_state_path(s, version, dst, sizeof(dst)));
    }
    return rc;
}
