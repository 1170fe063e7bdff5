/* local_checkpoint.c - the saved local round's file (local_checkpoint.h). */
#include "worker/local_checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"

static const char magic[8] = {'F', 'A', 'L', 'O', 'C', 'R', 'N', 'D'};
#define FORMAT 1u
#define BOM 0x01020304u

/* round, attempt, version, model sha, start and setup digests, rank, world, n_params */
#define KEY_BYTES (8 + 4 + 8 + 32 + 2 * FA_LOCAL_CKPT_DIGEST + 4 + 4 + 8)
/* magic, format, bom; key; position; section count */
#define HEAD_BYTES (8 + 4 + 4 + KEY_BYTES + 5 * 8 + 4)

struct fa_local_ckpt {
    uint8_t *data; /* the whole file */
    size_t len;
    fa_local_ckpt_key key;
    fa_train_pos pos;
    uint64_t total;
    const uint8_t *params, *momentum; /* n_params floats each, inside data */
    size_t n_parts;
    const uint8_t *part[FA_COMPRESS_MAX_PARTS]; /* in the compressor's order */
};

/* ---------------------------------------------------------------------- */
/* Digests                                                                  */
/* ---------------------------------------------------------------------- */

static int sodium_ready(void)
{
    return sodium_init() >= 0 ? 0 : FA_ERR_CRYPTO;
}

int fa_local_ckpt_digest_floats(const float *v, size_t n, uint8_t out[FA_LOCAL_CKPT_DIGEST])
{
    if (sodium_ready() != 0)
        return FA_ERR_CRYPTO;
    return crypto_generichash(out, FA_LOCAL_CKPT_DIGEST, (const unsigned char *)v,
                              n * sizeof(float), NULL, 0) == 0
               ? 0
               : FA_ERR_CRYPTO;
}

int fa_local_ckpt_digest_shard(const fa_dataset *d, uint8_t out[FA_LOCAL_CKPT_DIGEST])
{
    crypto_generichash_state h;
    uint32_t head[2] = {d->n, d->dim};
    if (sodium_ready() != 0 || crypto_generichash_init(&h, NULL, 0, FA_LOCAL_CKPT_DIGEST) != 0 ||
        crypto_generichash_update(&h, (const unsigned char *)head, sizeof(head)) != 0 ||
        crypto_generichash_update(&h, (const unsigned char *)d->x,
                                  (size_t)d->n * d->dim * sizeof(float)) != 0 ||
        crypto_generichash_update(&h, d->y, d->n) != 0 ||
        crypto_generichash_final(&h, out, FA_LOCAL_CKPT_DIGEST) != 0)
        return FA_ERR_CRYPTO;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Writing                                                                  */
/* ---------------------------------------------------------------------- */

/* An atomic file and the running digest of what went into it. */
typedef struct writer {
    fa_atomic_file *f;
    crypto_generichash_state h;
    int rc;
    fa_error *err;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    if (w->rc != 0 || n == 0)
        return;
    if (crypto_generichash_update(&w->h, p, n) != 0)
        w->rc = fa_errorf(w->err, FA_ERR_CRYPTO, "saved local round: BLAKE2b failed");
    else
        w->rc = fa_atomic_file_write(w->f, p, n, w->err);
}

#define PUT(w, v) put((w), &(v), sizeof(v))

static void put_section(writer *w, const char *name, const void *p, uint64_t len)
{
    uint32_t nl = (uint32_t)strlen(name);
    PUT(w, nl);
    put(w, name, nl);
    PUT(w, len);
    put(w, p, (size_t)len);
}

static void put_key(writer *w, const fa_local_ckpt_key *k)
{
    PUT(w, k->round);
    PUT(w, k->attempt);
    PUT(w, k->version);
    put(w, k->model_sha256, 32);
    put(w, k->start_digest, FA_LOCAL_CKPT_DIGEST);
    put(w, k->setup_digest, FA_LOCAL_CKPT_DIGEST);
    PUT(w, k->rank);
    PUT(w, k->world);
    PUT(w, k->n_params);
}

int fa_local_ckpt_save(const char *path, const fa_local_ckpt_key *key, const fa_train_pos *pos,
                       uint64_t total, fa_mlp *m, fa_compress *cz, fa_error *err)
{
    const size_t np = fa_mlp_layout_of(m)->n_params;
    fa_compress_part parts[FA_COMPRESS_MAX_PARTS];
    size_t n_parts = fa_compress_state_parts(cz, parts);
    const uint32_t format = FORMAT, bom = BOM, sections = (uint32_t)(2 + n_parts);
    uint8_t digest[FA_LOCAL_CKPT_DIGEST];
    float *buf = NULL;
    writer w = {.err = err};

    if (key->n_params != np)
        return fa_errorf(err, FA_ERR_INVAL,
                         "saved local round: a network of %zu parameters for a key of %" PRIu64, np,
                         key->n_params);
    if (sodium_ready() != 0 || crypto_generichash_init(&w.h, NULL, 0, sizeof(digest)) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "saved local round: BLAKE2b failed");
    buf = malloc((np ? np : 1) * sizeof(float));
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "saved local round: out of memory for %zu parameters",
                         np);
    if ((w.rc = fa_atomic_file_open(&w.f, path, 0600, err)) != 0)
        goto out;
    fa_atomic_file_write_back_every(w.f, FA_WRITE_BACK_STEP); /* committed with its fsync */
    put(&w, magic, sizeof(magic));
    PUT(&w, format);
    PUT(&w, bom);
    put_key(&w, key);
    PUT(&w, pos->step);
    PUT(&w, total);
    PUT(&w, pos->samples);
    PUT(&w, pos->pass_loss);
    PUT(&w, pos->pass_count);
    PUT(&w, sections);
    if (w.rc == 0)
        w.rc = fa_mlp_get_params(m, buf, err);
    put_section(&w, "params", buf, np * sizeof(float));
    if (w.rc == 0)
        w.rc = fa_mlp_get_momentum(m, buf, err);
    put_section(&w, "momentum", buf, np * sizeof(float));
    for (size_t i = 0; i < n_parts; i++) {
        char name[64];
        snprintf(name, sizeof(name), "compress.%s", parts[i].name);
        put_section(&w, name, parts[i].data, parts[i].len);
    }
    if (w.rc == 0 && crypto_generichash_final(&w.h, digest, sizeof(digest)) != 0)
        w.rc = fa_errorf(err, FA_ERR_CRYPTO, "saved local round: BLAKE2b failed");
    if (w.rc == 0)
        w.rc = fa_atomic_file_write(w.f, digest, sizeof(digest), err);
    if (w.rc == 0) {
        w.rc = fa_atomic_file_commit(w.f, err);
        w.f = NULL;
    }
out:
    fa_atomic_file_abort(w.f);
    free(buf);
    if (w.rc != 0)
        fa_error_prefix(err, w.rc, "cannot save the local round to %s", path);
    return w.rc;
}

/* ---------------------------------------------------------------------- */
/* Reading                                                                  */
/* ---------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p;
    size_t len, off;
    int short_read;
} reader;

static const uint8_t *take(reader *r, size_t n)
{
    const uint8_t *p;
    if (r->short_read || n > r->len - r->off) {
        r->short_read = 1;
        return NULL;
    }
    p = r->p + r->off;
    r->off += n;
    return p;
}

static void get(reader *r, void *out, size_t n)
{
    const uint8_t *p = take(r, n);
    if (p)
        memcpy(out, p, n);
    else
        memset(out, 0, n);
}

#define GET(r, v) get((r), &(v), sizeof(v))

static void get_key(reader *r, fa_local_ckpt_key *k)
{
    GET(r, k->round);
    GET(r, k->attempt);
    GET(r, k->version);
    get(r, k->model_sha256, 32);
    get(r, k->start_digest, FA_LOCAL_CKPT_DIGEST);
    get(r, k->setup_digest, FA_LOCAL_CKPT_DIGEST);
    GET(r, k->rank);
    GET(r, k->world);
    GET(r, k->n_params);
}

/* One section that must be called `name` and hold exactly len bytes. */
static const uint8_t *get_section(reader *r, const char *name, uint64_t len)
{
    uint32_t nl = 0;
    uint64_t got = 0;
    const uint8_t *n, *p;
    GET(r, nl);
    n = take(r, nl);
    GET(r, got);
    if (!n || nl != strlen(name) || memcmp(n, name, nl) != 0 || got != len)
        return NULL;
    p = take(r, (size_t)len);
    return p;
}

/* Why a key is not the wanted one, or 0. */
static int compare_key(const fa_local_ckpt_key *got, const fa_local_ckpt_key *want,
                       const char *path, fa_error *err)
{
    char a[FA_HEX_LEN(8)], b[FA_HEX_LEN(8)];
    if (got->round != want->round || got->version != want->version ||
        memcmp(got->model_sha256, want->model_sha256, 32) != 0) {
        fa_hex_encode(a, sizeof(a), got->model_sha256, 8);
        fa_hex_encode(b, sizeof(b), want->model_sha256, 8);
        return fa_errorf(err, FA_ERR_REPLAY,
                         "the saved local round %s is for round %" PRIu64
                         " from model version %" PRIu64 " (sha256 %s...), not for round %" PRIu64
                         " from version %" PRIu64 " (sha256 %s...)",
                         path, got->round, got->version, a, want->round, want->version, b);
    }
    if (memcmp(got->start_digest, want->start_digest, FA_LOCAL_CKPT_DIGEST) != 0)
        return fa_errorf(err, FA_ERR_REPLAY,
                         "the saved local round %s started from other weights than this round's "
                         "(the region's own local tensors changed?)",
                         path);
    if (got->rank != want->rank || got->world != want->world || got->n_params != want->n_params)
        return fa_errorf(err, FA_ERR_REPLAY,
                         "the saved local round %s is rank %u of %u with %" PRIu64
                         " parameters; this is rank %u of %u with %" PRIu64,
                         path, got->rank, got->world, got->n_params, want->rank, want->world,
                         want->n_params);
    if (memcmp(got->setup_digest, want->setup_digest, FA_LOCAL_CKPT_DIGEST) != 0)
        return fa_errorf(err, FA_ERR_REPLAY,
                         "the saved local round %s was trained with other options, compression, "
                         "data or device",
                         path);
    return 0;
}

int fa_local_ckpt_load(fa_local_ckpt **out, const char *path, const fa_local_ckpt_key *want,
                       fa_compress *cz, fa_local_ckpt_key *found, fa_error *err)
{
    fa_compress_part parts[FA_COMPRESS_MAX_PARTS];
    const size_t n_parts = fa_compress_state_parts(cz, parts);
    const uint64_t np = want->n_params;
    uint8_t digest[FA_LOCAL_CKPT_DIGEST];
    uint32_t format = 0, bom = 0, sections = 0;
    fa_error rerr;
    fa_local_ckpt *c;
    size_t max_len;
    reader r;
    int rc;

    *out = NULL;
    /* The exact size is known from the key and the compressor; a little
     * slack lets a bigger file be called what it is (damaged). */
    max_len = HEAD_BYTES + 2 * (8 + 12 + np * sizeof(float)) + FA_LOCAL_CKPT_DIGEST + 4096;
    for (size_t i = 0; i < n_parts; i++)
        max_len += 12 + 9 + strlen(parts[i].name) + parts[i].len;
    c = calloc(1, sizeof(*c));
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "saved local round: out of memory");
    rc = fa_file_read_all(path, &c->data, &c->len, max_len, &rerr);
    if (rc == FA_ERR_NOTFOUND)
        goto out;
    if (rc == FA_ERR_TOOBIG) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "the saved local round %s is damaged: larger than a round of this model",
                       path);
        goto out;
    }
    if (rc != 0) {
        rc = fa_errorf(err, rc, "cannot read the saved local round: %s", fa_error_msg(&rerr, rc));
        goto out;
    }
    r = (reader){.p = c->data, .len = c->len};
    if (c->len < HEAD_BYTES + FA_LOCAL_CKPT_DIGEST) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "the saved local round %s is damaged: truncated (%zu bytes)", path, c->len);
        goto out;
    }
    if (memcmp(take(&r, sizeof(magic)), magic, sizeof(magic)) != 0) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "the saved local round %s is damaged: not a saved local round", path);
        goto out;
    }
    GET(&r, format);
    GET(&r, bom);
    if (format != FORMAT || bom != BOM) {
        rc =
            fa_errorf(err, FA_ERR_CORRUPT, "the saved local round %s cannot be read here: %s", path,
                      format != FORMAT ? "another format version"
                                       : "written on a machine of the other byte order");
        goto out;
    }
    /* The digest first: nothing of a torn or altered file is believed. */
    if (sodium_ready() != 0 || crypto_generichash(digest, sizeof(digest), c->data,
                                                  c->len - FA_LOCAL_CKPT_DIGEST, NULL, 0) != 0) {
        rc = fa_errorf(err, FA_ERR_CRYPTO, "saved local round: BLAKE2b failed");
        goto out;
    }
    if (sodium_memcmp(digest, c->data + c->len - FA_LOCAL_CKPT_DIGEST, sizeof(digest)) != 0) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "the saved local round %s is damaged: its digest does not match its "
                       "contents (torn, truncated or altered)",
                       path);
        goto out;
    }
    r.len = c->len - FA_LOCAL_CKPT_DIGEST;
    get_key(&r, &c->key);
    if (found)
        *found = c->key;
    if ((rc = compare_key(&c->key, want, path, err)) != 0)
        goto out;
    GET(&r, c->pos.step);
    GET(&r, c->total);
    GET(&r, c->pos.samples);
    GET(&r, c->pos.pass_loss);
    GET(&r, c->pos.pass_count);
    GET(&r, sections);
    c->params = get_section(&r, "params", np * sizeof(float));
    c->momentum = get_section(&r, "momentum", np * sizeof(float));
    c->n_parts = n_parts;
    for (size_t i = 0; i < n_parts; i++) {
        char name[64];
        snprintf(name, sizeof(name), "compress.%s", parts[i].name);
        c->part[i] = get_section(&r, name, parts[i].len);
        if (!c->part[i])
            break;
    }
    /* The setup digest matched, so a mismatch here is a defect of the
     * writer, not of the disk; refused all the same. */
    if (r.short_read || sections != 2 + n_parts || !c->params || !c->momentum ||
        (n_parts && !c->part[n_parts - 1]) || r.off != r.len || c->pos.step > c->total) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "the saved local round %s is damaged: its sections do not match this "
                       "model and compressor",
                       path);
        goto out;
    }
    *out = c;
    c = NULL;
out:
    fa_local_ckpt_del(c);
    return rc;
}

void fa_local_ckpt_del(fa_local_ckpt *c)
{
    if (!c)
        return;
    free(c->data);
    free(c);
}

const fa_train_pos *fa_local_ckpt_pos(const fa_local_ckpt *c)
{
    return &c->pos;
}

uint64_t fa_local_ckpt_total(const fa_local_ckpt *c)
{
    return c->total;
}

uint32_t fa_local_ckpt_attempt(const fa_local_ckpt *c)
{
    return c->key.attempt;
}

int fa_local_ckpt_apply(const fa_local_ckpt *c, fa_mlp *m, fa_compress *cz, fa_error *err)
{
    fa_compress_part parts[FA_COMPRESS_MAX_PARTS];
    size_t n_parts = fa_compress_state_parts(cz, parts);
    const size_t np = fa_mlp_layout_of(m)->n_params;
    float *buf;
    int rc;

    if (n_parts != c->n_parts || np != c->key.n_params)
        return fa_errorf(err, FA_ERR_INVAL,
                         "saved local round: applied to another network or compressor");
    /* The sections need not be aligned for floats: through a buffer. */
    buf = malloc((np ? np : 1) * sizeof(float));
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "saved local round: out of memory");
    memcpy(buf, c->params, np * sizeof(float));
    rc = fa_mlp_set_params(m, buf, err);
    if (rc == 0) {
        memcpy(buf, c->momentum, np * sizeof(float));
        rc = fa_mlp_set_momentum(m, buf, err);
    }
    free(buf);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n_parts; i++)
        memcpy(parts[i].data, c->part[i], parts[i].len);
    return 0;
}
