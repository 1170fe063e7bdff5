/* Saving and restoring the client's state between rounds (a worker's
 * crash recovery): sealed with a key derived from its identity, bound to the
 * federation, round and attempt.  See crypto/secagg.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_sha256.h"
#include "crypto/kdf_internal.h"
#include "crypto/secagg_client_internal.h"
#include "crypto/shamir_internal.h"
#include "crypto/wire.h"

/* ---- save / restore -------------------------------------------------------------- */

/* The last byte is the format version: 2 added the model digest (of the
 * config and of every peer), 3 made the upload digest a BLAKE3
 * (secagg.proto version 4); older states are refused. */
static const uint8_t cli_magic[8] = {'F', 'A', 'S', 'A', 'C', 'L', 'I', 3};

/* Header (clear, authenticated as associated data): magic, federation,
 * round, attempt, id.  Then nonce and the sealed body. */
static int put_header(fa_wbuf *w, const fa_secagg_cfg *cfg, const char *id)
{
    fa_wbuf_raw(w, cli_magic, sizeof(cli_magic));
    fa_wbuf_str(w, cfg->fed);
    fa_wbuf_u64(w, cfg->c.round);
    fa_wbuf_u32(w, cfg->c.attempt);
    fa_wbuf_str(w, id);
    return w->failed ? FA_ERR_NOMEM : 0;
}

static int state_key(uint8_t key[32], const uint8_t identity[32], const char *fed, uint64_t round,
                     uint32_t attempt, const char *id)
{
    return fa_kdf_derive(key, 32, identity, 32, FA_KDF_CLIENT_STATE, fed, round, attempt, id, NULL);
}

/* Everything of the client but the stream and the borrowed input, in the
 * order fa_secagg_client_restore reads it. */
static void put_body(fa_wbuf *body, const fa_secagg_client *c)
{
    const fa_secagg_config *k = &c->cfg.c;
    fa_wbuf_u32(body, k->threshold);
    fa_wbuf_u32(body, k->neighbours);
    fa_wbuf_u64(body, k->vector_len);
    fa_wbuf_u32(body, k->ring_bits);
    fa_wbuf_u32(body, k->quant.bits);
    fa_wbuf_u32(body, (uint32_t)k->quant.clip_mode);
    fa_wbuf_f64(body, k->quant.clip_l2_norm);
    fa_wbuf_f64(body, k->quant.clip_value);
    fa_wbuf_raw(body, k->model_sha256, 32);
    fa_wbuf_u32(body, (uint32_t)c->roster.n);
    for (size_t i = 0; i < c->roster.n; i++) {
        fa_wbuf_str(body, c->roster.m[i].id);
        fa_wbuf_raw(body, c->roster.m[i].pk, 32);
    }
    fa_wbuf_raw(body, c->sec->c_sk, 32);
    fa_wbuf_raw(body, c->sec->s_sk, 32);
    fa_wbuf_raw(body, c->sec->b, 32);
    fa_wbuf_raw(body, c->sec->round_seed, 32);
    fa_wbuf_raw(body, c->self.c_pk, 32);
    fa_wbuf_raw(body, c->self.s_pk, 32);
    fa_wbuf_raw(body, c->self.b_commit, 32);
    fa_wbuf_raw(body, c->self.sig, 64);
    fa_wbuf_u32(body, (uint32_t)c->phase);
    fa_wbuf_u32(body, (uint32_t)c->n1);
    for (size_t j = 0; j < c->n1; j++) {
        const fa_secagg_peer *p = &c->peers[j];
        fa_wbuf_str(body, p->id);
        fa_wbuf_raw(body, p->c_pk, 32);
        fa_wbuf_raw(body, p->s_pk, 32);
        fa_wbuf_raw(body, p->b_commit, 32);
        fa_wbuf_raw(body, p->model_sha, 32);
        fa_wbuf_raw(body, p->sig, 64);
        fa_wbuf_u8(body, c->in_u2[j]);
        fa_wbuf_u8(body, c->in_u3[j]);
        fa_wbuf_u8(body, c->revealed[j]);
        fa_wbuf_raw(body, c->held + j * 64, 64);
    }
    fa_wbuf_bytes(body, c->sharekeys, c->sharekeys ? c->sharekeys_len : 0);
    fa_wbuf_u8(body, (uint8_t)c->have_input_sha);
    fa_wbuf_u32(body, (uint32_t)c->input_kind);
    fa_wbuf_raw(body, c->input_sha, 32);
    fa_wbuf_u8(body, (uint8_t)c->upload_done);
    fa_wbuf_raw(body, c->upload_digest, 32);
}

int fa_secagg_client_state_digest(const fa_secagg_client *c, uint8_t out[32])
{
    fa_wbuf body;
    int rc;
    fa_wbuf_init(&body, 1);
    put_body(&body, c);
    if (body.failed) {
        fa_wbuf_free(&body);
        return FA_ERR_NOMEM;
    }
    rc = fa_sha256(out, body.p, body.len);
    fa_wbuf_free(&body);
    return rc;
}

int fa_secagg_client_save(const fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err)
{
    const fa_secagg_config *k = &c->cfg.c;
    fa_wbuf body, w;
    uint8_t *key = NULL, *dst;
    size_t head_len;
    int rc = 0;

    fa_wbuf_init(&body, 1);
    fa_wbuf_init(&w, 0);
    put_body(&body, c);
    if (body.failed) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client save: out of memory");
        goto out;
    }
    key = sodium_malloc(32);
    if (!key || put_header(&w, &c->cfg, c->id) != 0) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client save: out of memory");
        goto out;
    }
    head_len = w.len;
    dst = fa_wbuf_reserve(&w, FA_SECAGG_NONCE_BYTES + body.len + FA_SECAGG_MAC_BYTES);
    if (!dst) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client save: out of memory");
        goto out;
    }
    if ((rc = state_key(key, c->sec->identity, c->cfg.fed, k->round, k->attempt, c->id)) != 0 ||
        (rc = fa_secagg_rng_fill(&c->rng, dst, FA_SECAGG_NONCE_BYTES)) != 0) {
        fa_errorf(err, rc, "secagg client save: %s", fa_strerror(rc));
        goto out;
    }
    crypto_aead_xchacha20poly1305_ietf_encrypt(dst + FA_SECAGG_NONCE_BYTES, NULL, body.p, body.len,
                                               w.p, head_len, NULL, dst, key);
    *out = w.p;
    *out_len = w.len;
    w.p = NULL;
out:
    if (key)
        sodium_free(key);
    fa_wbuf_free(&body);
    fa_wbuf_free(&w);
    return rc;
}

int fa_secagg_client_restore(fa_secagg_client **out, const uint8_t *blob, size_t len,
                             const uint8_t identity_sk[FA_SECAGG_IDENTITY_SK_BYTES],
                             const fa_secagg_member *members, size_t n_members,
                             const fa_secagg_rng *rng, fa_error *err)
{
    fa_secagg_client *c = NULL;
    fa_secagg_config cfg;
    char fed[FA_SECAGG_FED_CAP], id[FA_SECAGG_ID_CAP];
    uint8_t *key = NULL, *body = NULL;
    size_t body_len = 0;
    fa_rbuf r;
    uint32_t v;
    int rc;

    *out = NULL;
    memset(&cfg, 0, sizeof(cfg));
    fa_rbuf_init(&r, blob, len);
    if (len < sizeof(cli_magic) || memcmp(blob, cli_magic, sizeof(cli_magic) - 1) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "secagg client restore: not a saved client state");
    if (blob[sizeof(cli_magic) - 1] != cli_magic[sizeof(cli_magic) - 1])
        return fa_errorf(err, FA_ERR_UNSUPPORTED,
                         "secagg client restore: a state of format %u (this fedagg reads %u: "
                         "an older version's); the attempt cannot be resumed",
                         blob[sizeof(cli_magic) - 1], cli_magic[sizeof(cli_magic) - 1]);
    r.off = sizeof(cli_magic);
    fa_rbuf_str(&r, fed, sizeof(fed));
    cfg.round = fa_rbuf_u64(&r);
    cfg.attempt = fa_rbuf_u32(&r);
    fa_rbuf_str(&r, id, sizeof(id));
    if (r.failed || len - r.off < FA_SECAGG_NONCE_BYTES + FA_SECAGG_MAC_BYTES)
        return fa_errorf(err, FA_ERR_CORRUPT, "secagg client restore: truncated header");
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "secagg client restore: libsodium failed");
    body_len = len - r.off - FA_SECAGG_NONCE_BYTES - FA_SECAGG_MAC_BYTES;
    key = sodium_malloc(32);
    body = sodium_malloc(body_len ? body_len : 1);
    if (!key || !body) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client restore: out of memory");
        goto out;
    }
    if ((rc = state_key(key, identity_sk, fed, cfg.round, cfg.attempt, id)) != 0)
        goto out;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            body, NULL, NULL, blob + r.off + FA_SECAGG_NONCE_BYTES,
            len - r.off - FA_SECAGG_NONCE_BYTES, blob, r.off, blob + r.off, key) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "secagg client restore: the state does not decrypt with this identity key "
                       "(another key, or the file was altered)");
        goto out;
    }
    fa_rbuf_init(&r, body, body_len);
    cfg.federation_id = fed;
    cfg.threshold = fa_rbuf_u32(&r);
    cfg.neighbours = fa_rbuf_u32(&r);
    cfg.vector_len = fa_rbuf_u64(&r);
    cfg.ring_bits = fa_rbuf_u32(&r);
    cfg.quant.bits = fa_rbuf_u32(&r);
    cfg.quant.clip_mode = (int)fa_rbuf_u32(&r);
    cfg.quant.clip_l2_norm = fa_rbuf_f64(&r);
    cfg.quant.clip_value = fa_rbuf_f64(&r);
    fa_rbuf_copy(&r, cfg.model_sha256, 32);
    if (r.failed) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "secagg client restore: malformed state");
        goto out;
    }
    if ((rc = fa_secagg_client_alloc(&c, &cfg, identity_sk, id, members, n_members, rng, err)) != 0)
        goto out;
    /* The federation must be the one the state was saved with. */
    v = fa_rbuf_u32(&r);
    if (v != c->roster.n)
        r.failed = 2;
    for (size_t i = 0; i < c->roster.n && !r.failed; i++) {
        char mid[FA_SECAGG_ID_CAP];
        uint8_t pk[32];
        fa_rbuf_str(&r, mid, sizeof(mid));
        fa_rbuf_copy(&r, pk, 32);
        if (strcmp(mid, c->roster.m[i].id) != 0 || memcmp(pk, c->roster.m[i].pk, 32) != 0)
            r.failed = 2;
    }
    if (r.failed == 2) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "secagg client restore: the federation members differ from those the "
                       "state was saved with");
        goto out;
    }
    fa_rbuf_copy(&r, c->sec->c_sk, 32);
    fa_rbuf_copy(&r, c->sec->s_sk, 32);
    fa_rbuf_copy(&r, c->sec->b, 32);
    fa_rbuf_copy(&r, c->sec->round_seed, 32);
    snprintf(c->self.id, sizeof(c->self.id), "%s", c->id);
    fa_rbuf_copy(&r, c->self.c_pk, 32);
    fa_rbuf_copy(&r, c->self.s_pk, 32);
    fa_rbuf_copy(&r, c->self.b_commit, 32);
    memcpy(c->self.model_sha, c->cfg.c.model_sha256, 32);
    fa_rbuf_copy(&r, c->self.sig, 64);
    v = fa_rbuf_u32(&r);
    if (v > CP_UNMASKED)
        r.failed = 1;
    c->phase = (int)v;
    v = fa_rbuf_u32(&r);
    if (v > c->roster.n || (c->phase >= CP_PEERS && v == 0) || (c->phase < CP_PEERS && v != 0))
        r.failed = 1;
    if (!r.failed && v > 0) {
        c->n1 = v;
        c->peers = calloc(v, sizeof(*c->peers));
        c->held = sodium_malloc((size_t)v * 64);
        if (!c->peers || !c->held) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client restore: out of memory");
            goto out;
        }
        c->me = -1;
        for (size_t j = 0; j < c->n1 && !r.failed; j++) {
            fa_secagg_peer *p = &c->peers[j];
            fa_rbuf_str(&r, p->id, sizeof(p->id));
            fa_rbuf_copy(&r, p->c_pk, 32);
            fa_rbuf_copy(&r, p->s_pk, 32);
            fa_rbuf_copy(&r, p->b_commit, 32);
            fa_rbuf_copy(&r, p->model_sha, 32);
            fa_rbuf_copy(&r, p->sig, 64);
            c->in_u2[j] = fa_rbuf_u8(&r);
            c->in_u3[j] = fa_rbuf_u8(&r);
            c->revealed[j] = fa_rbuf_u8(&r);
            fa_rbuf_copy(&r, c->held + j * 64, 64);
            if (fa_secagg_roster_find(&c->roster, p->id) < 0 ||
                (j > 0 && strcmp(c->peers[j - 1].id, p->id) >= 0) || c->in_u2[j] > 1 ||
                c->in_u3[j] > 1 || c->revealed[j] > REV_S)
                r.failed = 1;
            if (strcmp(p->id, c->id) == 0)
                c->me = (int)j;
        }
        if (!r.failed &&
            (c->me < 0 || fa_secagg_graph_init(&c->graph, &c->cfg, c->peers, c->n1) != 0))
            r.failed = 1;
    }
    {
        uint32_t n = fa_rbuf_u32(&r);
        const uint8_t *p = fa_rbuf_raw(&r, n);
        if (p && n > 0) {
            c->sharekeys = malloc(n);
            if (!c->sharekeys) {
                rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client restore: out of memory");
                goto out;
            }
            memcpy(c->sharekeys, p, n);
            c->sharekeys_len = n;
        }
    }
    c->have_input_sha = fa_rbuf_u8(&r);
    c->input_kind = (int)fa_rbuf_u32(&r);
    fa_rbuf_copy(&r, c->input_sha, 32);
    c->upload_done = fa_rbuf_u8(&r);
    fa_rbuf_copy(&r, c->upload_digest, 32);
    if (c->have_input_sha > 1 || c->input_kind > INPUT_RING || c->upload_done > 1 ||
        (c->phase >= CP_SHARED && !c->sharekeys))
        r.failed = 1;
    if (r.failed || r.off != r.len) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "secagg client restore: malformed state");
        goto out;
    }
    /* The input itself is the caller's to set again (and must hash the same). */
    c->input_bound = 0;
    *out = c;
    c = NULL;
    rc = 0;
out:
    if (key)
        sodium_free(key);
    if (body)
        sodium_free(body);
    fa_secagg_client_del(c);
    return rc;
}
