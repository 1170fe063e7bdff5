/* The parts of secure aggregation that client and server share. */
#include "crypto/secagg_internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_sha256.h"
#include "crypto/identity.h"
#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/wire.h"
#include "secagg.pb-c.h"

const char *const fa_secagg_phase_names[FA_SECAGG_N_PHASES] = {"advertise", "shares", "masked",
                                                               "consistency", "unmask"};

const char *fa_secagg_phase_name(int phase)
{
    if (phase >= 0 && phase < FA_SECAGG_N_PHASES)
        return fa_secagg_phase_names[phase];
    return phase == FA_SECAGG_DONE ? "done" : phase == FA_SECAGG_FAILED ? "failed" : "?";
}

const char *fa_secagg_mask_prg(void)
{
    return fa_mask_prg_impl();
}

int fa_secagg_mask_prg_from_env(fa_error *err)
{
    const char *e = getenv("FEDAGG_MASK_PRG");
    int rc;
    if (!e || !*e)
        return 0;
    rc = fa_mask_prg_use(e);
    if (rc == FA_ERR_INVAL)
        return fa_errorf(err, rc,
                         "FEDAGG_MASK_PRG=%.64s: not a mask generator (auto, openssl, vaes256, "
                         "vaes512)",
                         e);
    if (rc == FA_ERR_UNSUPPORTED)
        return fa_errorf(err, rc,
                         "FEDAGG_MASK_PRG=%s: this CPU cannot run it (its best is %s; auto "
                         "picks that)",
                         e, fa_mask_prg_best());
    return rc;
}

uint32_t fa_secagg_ring_bits_for(uint32_t quant_bits, uint32_t n_clients)
{
    uint32_t extra = 0;
    if (quant_bits == 0 || n_clients == 0)
        return 0;
    while (((uint64_t)1 << extra) < n_clients)
        extra++;
    return quant_bits + extra <= 32 ? quant_bits + extra : 0;
}

uint64_t fa_secagg_masked_bytes(uint64_t vector_len, uint32_t ring_bits)
{
    return fa_ring_packed_bytes(vector_len, ring_bits);
}

int fa_secagg_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > FA_SECAGG_MAX_ID_LEN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] <= ' ' || (unsigned char)id[i] >= 0x7f)
            return 0;
    return 1;
}

int fa_secagg_config_check(const fa_secagg_config *cfg, fa_error *err)
{
    const fa_secagg_quant *q = &cfg->quant;
    if (!cfg->federation_id || strlen(cfg->federation_id) >= FA_SECAGG_FED_CAP)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: federation_id missing or over %d bytes",
                         FA_SECAGG_FED_CAP - 1);
    if (cfg->threshold < 1 || cfg->threshold > FA_SECAGG_MAX_CLIENTS)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: threshold %u is not in 1..%d",
                         cfg->threshold, FA_SECAGG_MAX_CLIENTS);
    if (cfg->neighbours % 2 || cfg->neighbours > FA_SECAGG_MAX_CLIENTS - 1)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg config: neighbours %u must be 0 (every pair) or an even degree "
                         "below %d for the Harary graph",
                         cfg->neighbours, FA_SECAGG_MAX_CLIENTS);
    if (cfg->vector_len < 1 || cfg->vector_len > ((uint64_t)1 << 40))
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: vector_len %llu is not in 1..2^40",
                         (unsigned long long)cfg->vector_len);
    if (cfg->vector_len > SIZE_MAX / 8)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: vector_len too large for this machine");
    if (cfg->ring_bits < 1 || cfg->ring_bits > 32)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: ring_bits %u is not in 1..32",
                         cfg->ring_bits);
    if (q->bits < 2 || q->bits > 24)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: quant.bits %u is not in 2..24",
                         q->bits);
    if (q->bits > cfg->ring_bits)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: quant.bits %u exceeds ring_bits %u",
                         q->bits, cfg->ring_bits);
    if (q->clip_mode < FA_SECAGG_CLIP_L2 || q->clip_mode > FA_SECAGG_CLIP_BOTH)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: quant.clip_mode %d is not 0, 1 or 2",
                         q->clip_mode);
    if (!(isfinite(q->clip_value) && q->clip_value > 0))
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: quant.clip_value must be > 0");
    if (q->clip_mode != FA_SECAGG_CLIP_COORDINATE &&
        !(isfinite(q->clip_l2_norm) && q->clip_l2_norm > 0))
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: quant.clip_l2_norm must be > 0");
    if (cfg->unmask_threads > 256)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: unmask_threads %u over 256",
                         cfg->unmask_threads);
    if (cfg->max_uploads_in_flight > 1024)
        return fa_errorf(err, FA_ERR_INVAL, "secagg config: max_uploads_in_flight %u over 1024",
                         cfg->max_uploads_in_flight);
    return 0;
}

int fa_secagg_cfg_init(fa_secagg_cfg *out, const fa_secagg_config *cfg, fa_error *err)
{
    int rc = fa_secagg_config_check(cfg, err);
    if (rc != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    out->c = *cfg;
    snprintf(out->fed, sizeof(out->fed), "%s", cfg->federation_id);
    out->c.federation_id = out->fed;
    if (out->c.max_uploads_in_flight == 0)
        out->c.max_uploads_in_flight = 4;
    return 0;
}

static int member_cmp(const void *a, const void *b)
{
    return strcmp(((const fa_secagg_roster_member *)a)->id,
                  ((const fa_secagg_roster_member *)b)->id);
}

int fa_secagg_roster_init(fa_secagg_roster *r, const fa_secagg_member *members, size_t n,
                          fa_error *err)
{
    r->m = NULL;
    r->n = 0;
    if (n < 1 || n > FA_SECAGG_MAX_CLIENTS)
        return fa_errorf(err, FA_ERR_INVAL, "secagg: %zu federation members (1..%d allowed)", n,
                         FA_SECAGG_MAX_CLIENTS);
    r->m = calloc(n, sizeof(*r->m));
    if (!r->m)
        return fa_errorf(err, FA_ERR_NOMEM, "secagg: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!members[i].id || !fa_secagg_id_valid(members[i].id)) {
            fa_secagg_roster_free(r);
            return fa_errorf(err, FA_ERR_INVAL,
                             "secagg: member %zu: client id must be 1..%d printable bytes", i,
                             FA_SECAGG_MAX_ID_LEN);
        }
        snprintf(r->m[i].id, sizeof(r->m[i].id), "%s", members[i].id);
        memcpy(r->m[i].pk, members[i].identity_pk, sizeof(r->m[i].pk));
    }
    qsort(r->m, n, sizeof(*r->m), member_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(r->m[i - 1].id, r->m[i].id) == 0) {
            int rc = fa_errorf(err, FA_ERR_INVAL, "secagg: member '%s' listed twice", r->m[i].id);
            fa_secagg_roster_free(r);
            return rc;
        }
    r->n = n;
    return 0;
}

void fa_secagg_roster_free(fa_secagg_roster *r)
{
    free(r->m);
    r->m = NULL;
    r->n = 0;
}

int fa_secagg_roster_find(const fa_secagg_roster *r, const char *id)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(id, r->m[mid].id);
        if (c == 0)
            return (int)mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* ---- neighbour graph ---------------------------------------------------- */

struct graph_key {
    uint8_t h[32];
    size_t idx;
};

static int graph_key_cmp(const void *a, const void *b)
{
    const struct graph_key *x = a, *y = b;
    int c = memcmp(x->h, y->h, sizeof(x->h));
    if (c)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int fa_secagg_graph_init(fa_secagg_graph *g, const fa_secagg_cfg *cfg, const fa_secagg_peer *peers,
                         size_t n)
{
    struct graph_key keys[FA_SECAGG_MAX_CLIENTS];
    uint32_t k = cfg->c.neighbours;
    int rc;

    memset(g, 0, sizeof(*g));
    if (n < 1 || n > FA_SECAGG_MAX_CLIENTS)
        return FA_ERR_INVAL;
    g->n = n;
    if (k == 0 || k >= n - 1) {
        g->half = 0;
        g->shamir_t = cfg->c.threshold;
        for (size_t i = 0; i < n; i++)
            g->pos[i] = (uint8_t)i;
        return 0;
    }
    g->half = k / 2;
    g->shamir_t = k / 2 + 1;
    for (size_t i = 0; i < n; i++) {
        fa_wbuf w;
        fa_wbuf_init(&w, 0);
        fa_wbuf_str(&w, "fedagg/secagg/graph/v1");
        fa_wbuf_str(&w, cfg->fed);
        fa_wbuf_u64(&w, cfg->c.round);
        fa_wbuf_u32(&w, cfg->c.attempt);
        fa_wbuf_str(&w, peers[i].id);
        fa_wbuf_raw(&w, peers[i].c_pk, 32);
        fa_wbuf_raw(&w, peers[i].s_pk, 32);
        if (w.failed) {
            fa_wbuf_free(&w);
            return FA_ERR_NOMEM;
        }
        rc = fa_sha256(keys[i].h, w.p, w.len);
        fa_wbuf_free(&w);
        if (rc != 0)
            return rc;
        keys[i].idx = i;
    }
    qsort(keys, n, sizeof(keys[0]), graph_key_cmp);
    for (size_t p = 0; p < n; p++)
        g->pos[keys[p].idx] = (uint8_t)p;
    return 0;
}

int fa_secagg_graph_adjacent(const fa_secagg_graph *g, size_t u, size_t v)
{
    size_t d;
    assert(u < g->n && v < g->n);
    if (u == v)
        return 0;
    if (g->half == 0)
        return 1;
    d = (g->pos[u] + g->n - g->pos[v]) % g->n;
    return d <= g->half || d >= g->n - g->half;
}

size_t fa_secagg_graph_closed(const fa_secagg_graph *g, size_t u, size_t *out)
{
    size_t m = 0;
    for (size_t v = 0; v < g->n; v++)
        if (v == u || fa_secagg_graph_adjacent(g, u, v))
            out[m++] = v;
    assert(m >= 1 && m <= g->n); /* u's closed neighbourhood holds u */
    return m;
}

/* ---- canonical byte strings --------------------------------------------- */

static int wbuf_finish(fa_wbuf *w, uint8_t **out, size_t *len)
{
    if (w->failed) {
        fa_wbuf_free(w);
        return FA_ERR_NOMEM;
    }
    *out = w->p;
    *len = w->len;
    return 0;
}

static void put_head(fa_wbuf *w, const char *label, const char *fed, uint64_t round,
                     uint32_t attempt)
{
    fa_wbuf_raw(w, label, strlen(label));
    fa_wbuf_str(w, fed);
    fa_wbuf_u64(w, round);
    fa_wbuf_u32(w, attempt);
}

/* "fedagg/secagg/advertise/v2" || lp(fed) || round || attempt || lp(id) ||
 * c_pk || s_pk || b_commit || model_sha256.  v2 binds the digest of the model
 * the client trained from, so that an aggregator cannot serve one region
 * another model and pass its advertisement off as one for the common model
 * (Pasquini, Francati, Ateniese, CCS 2022). */
int fa_secagg_msg_advertise(const fa_secagg_cfg *cfg, const fa_secagg_peer *p, uint8_t **out,
                            size_t *len)
{
    fa_wbuf w;
    fa_wbuf_init(&w, 0);
    put_head(&w, "fedagg/secagg/advertise/v2", cfg->fed, cfg->c.round, cfg->c.attempt);
    fa_wbuf_str(&w, p->id);
    fa_wbuf_raw(&w, p->c_pk, 32);
    fa_wbuf_raw(&w, p->s_pk, 32);
    fa_wbuf_raw(&w, p->b_commit, 32);
    fa_wbuf_raw(&w, p->model_sha, 32);
    return wbuf_finish(&w, out, len);
}

/* "fedagg/secagg/survivors/v2" || lp(fed) || round || attempt || lp(signer) ||
 * model_sha256 || u32 n || lp(id_1) ... lp(id_n) (sorted).  The consistency
 * check signs the model too (the signer's, as it advertised it): a verifier
 * that trained from another model rejects the signature. */
int fa_secagg_msg_survivors(const fa_secagg_cfg *cfg, const char *signer,
                            const uint8_t model_sha[32], char *const *ids, size_t n, uint8_t **out,
                            size_t *len)
{
    fa_wbuf w;
    fa_wbuf_init(&w, 0);
    put_head(&w, "fedagg/secagg/survivors/v2", cfg->fed, cfg->c.round, cfg->c.attempt);
    fa_wbuf_str(&w, signer);
    fa_wbuf_raw(&w, model_sha, 32);
    fa_wbuf_u32(&w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        fa_wbuf_str(&w, ids[i]);
    return wbuf_finish(&w, out, len);
}

/* "fedagg/secagg/upload/v2" || lp(fed) || round || attempt || lp(id) || digest
 * for a BLAKE3-256 digest; "fedagg/secagg/upload/v1" for the SHA-256 of
 * secagg.proto version 3, which only the audit log's old records carry. */
int fa_secagg_msg_upload(const char *fed, uint64_t round, uint32_t attempt, const char *id, int alg,
                         const uint8_t digest[32], uint8_t **out, size_t *len)
{
    fa_wbuf w;
    if (alg != FA_SECAGG_UPLOAD_SHA256 && alg != FA_SECAGG_UPLOAD_BLAKE3)
        return FA_ERR_INVAL;
    fa_wbuf_init(&w, 0);
    put_head(&w,
             alg == FA_SECAGG_UPLOAD_BLAKE3 ? "fedagg/secagg/upload/v2" : "fedagg/secagg/upload/v1",
             fed, round, attempt);
    fa_wbuf_str(&w, id);
    fa_wbuf_raw(&w, digest, 32);
    return wbuf_finish(&w, out, len);
}

/* "fedagg/secagg/share/v1" || lp(fed) || round || attempt || lp(from) || lp(to) */
int fa_secagg_share_ad(const fa_secagg_cfg *cfg, const char *from, const char *to, uint8_t **out,
                       size_t *len)
{
    fa_wbuf w;
    fa_wbuf_init(&w, 0);
    put_head(&w, "fedagg/secagg/share/v1", cfg->fed, cfg->c.round, cfg->c.attempt);
    fa_wbuf_str(&w, from);
    fa_wbuf_str(&w, to);
    return wbuf_finish(&w, out, len);
}

/* SHA-256("fedagg/secagg/self-mask-commit/v1" || lp(fed) || round || attempt || lp(id) || b) */
int fa_secagg_b_commit(const fa_secagg_cfg *cfg, const char *id, const uint8_t b[32],
                       uint8_t out[32])
{
    fa_sha256_ctx h = {0};
    int rc = FA_ERR_NOMEM;
    fa_wbuf w;
    fa_wbuf_init(&w, 0);
    put_head(&w, "fedagg/secagg/self-mask-commit/v1", cfg->fed, cfg->c.round, cfg->c.attempt);
    fa_wbuf_str(&w, id);
    if (!w.failed) {
        fa_sha256_init(&h);
        fa_sha256_update(&h, w.p, w.len);
        fa_sha256_update(&h, b, 32);
        rc = fa_sha256_final(&h, out);
    }
    fa_sha256_free(&h);
    fa_wbuf_free(&w);
    return rc;
}

int fa_secagg_agree(uint8_t *key, size_t key_len, const char *purpose, const fa_secagg_cfg *cfg,
                    const uint8_t sk[32], const uint8_t my_pk[32], const char *my_id,
                    const uint8_t peer_pk[32], const char *peer_id)
{
    uint8_t ikm[96];
    int rc;
    if (crypto_scalarmult(ikm, sk, peer_pk) != 0) {
        sodium_memzero(ikm, sizeof(ikm));
        return FA_ERR_VERIFY;
    }
    if (strcmp(my_id, peer_id) < 0) {
        memcpy(ikm + 32, my_pk, 32);
        memcpy(ikm + 64, peer_pk, 32);
    } else {
        memcpy(ikm + 32, peer_pk, 32);
        memcpy(ikm + 64, my_pk, 32);
    }
    rc = fa_kdf_derive(key, key_len, ikm, sizeof(ikm), purpose, cfg->fed, cfg->c.round,
                       cfg->c.attempt, my_id, peer_id);
    sodium_memzero(ikm, sizeof(ikm));
    return rc;
}

int fa_secagg_self_mask_key(uint8_t key[16], const fa_secagg_cfg *cfg, const char *id,
                            const uint8_t b[32])
{
    return fa_kdf_derive(key, 16, b, 32, FA_KDF_SELF_MASK, cfg->fed, cfg->c.round, cfg->c.attempt,
                         id, NULL);
}

int fa_secagg_advertise_model(const uint8_t *msg, size_t len,
                              uint8_t model_sha256[FA_SECAGG_SHA256_BYTES])
{
    Fedagg__AdvertiseKeys *m = fedagg__advertise_keys__unpack(&fa_secagg_pb_alloc, len, msg);
    int rc = 0;
    if (!m)
        return FA_ERR_PARSE;
    if (m->model_sha256.len != FA_SECAGG_SHA256_BYTES)
        rc = FA_ERR_PROTOCOL;
    else
        memcpy(model_sha256, m->model_sha256.data, FA_SECAGG_SHA256_BYTES);
    fedagg__advertise_keys__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

int fa_secagg_commitment_verify(const char *federation_id, uint64_t round, uint32_t attempt,
                                const char *client_id, int alg,
                                const uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                                const uint8_t signature[FA_SECAGG_SIGNATURE_BYTES],
                                const uint8_t identity_pk[FA_SECAGG_IDENTITY_PK_BYTES])
{
    uint8_t *m;
    size_t mlen;
    int rc;
    if (sodium_init() < 0)
        return FA_ERR_CRYPTO;
    rc = fa_secagg_msg_upload(federation_id, round, attempt, client_id, alg, digest, &m, &mlen);
    if (rc != 0)
        return rc;
    rc = fa_identity_verify(identity_pk, m, mlen, signature);
    free(m);
    return rc;
}

int fa_secagg_commitment_sign(const uint8_t seed[FA_SECAGG_IDENTITY_SK_BYTES],
                              const char *federation_id, uint64_t round, uint32_t attempt,
                              const char *client_id, int alg,
                              const uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                              uint8_t signature[FA_SECAGG_SIGNATURE_BYTES])
{
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES], *msg = NULL;
    size_t fl = federation_id ? strlen(federation_id) : 0, rl = client_id ? strlen(client_id) : 0,
           len = 0;
    int rc;

    if (fl == 0 || fl > 255 || rl == 0 || rl > 255)
        return FA_ERR_INVAL;
    if ((rc = fa_secagg_msg_upload(federation_id, round, attempt, client_id, alg, digest, &msg,
                                   &len)) != 0)
        return rc;
    rc = crypto_sign_seed_keypair(pk, sk, seed) == 0 &&
                 crypto_sign_detached(signature, NULL, msg, len, sk) == 0
             ? 0
             : FA_ERR_CRYPTO;
    sodium_memzero(sk, sizeof(sk));
    free(msg);
    return rc;
}

int fa_secagg_rng_fill(const fa_secagg_rng *rng, void *buf, size_t len)
{
    if (!rng || !rng->fill) {
        randombytes_buf(buf, len);
        return 0;
    }
    return rng->fill(rng->ctx, buf, len) == 0 ? 0 : FA_ERR_CRYPTO;
}

/* ---- protobuf ------------------------------------------------------------ */

static void *pb_alloc(void *ad, size_t n)
{
    uint8_t *p;
    (void)ad;
    if (n > SIZE_MAX - 16)
        return NULL;
    p = malloc(n + 16);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof(n));
    return p + 16;
}

static void pb_free(void *ad, void *ptr)
{
    uint8_t *p;
    size_t n;
    (void)ad;
    if (!ptr)
        return;
    p = (uint8_t *)ptr - 16;
    memcpy(&n, p, sizeof(n));
    sodium_memzero(ptr, n);
    free(p);
}

ProtobufCAllocator fa_secagg_pb_alloc = {pb_alloc, pb_free, NULL};

int fa_secagg_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        return FA_ERR_NOMEM;
    *len = protobuf_c_message_pack(msg, p);
    *out = p;
    return 0;
}
