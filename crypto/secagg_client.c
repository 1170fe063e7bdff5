/* The client side of secure aggregation (Bonawitz et al., CCS 2017, Figure 4,
 * "User" column), as a sans-I/O state machine.  See crypto/secagg.h. */
#include "crypto/secagg.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "common/fa_endian.h"
#include "common/fa_hex.h"
#include "crypto/identity.h"
#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/codec_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg_client_internal.h"
#include "crypto/secagg_internal.h"
#include "crypto/shamir_internal.h"
#include "crypto/wire.h"
#include "secagg.pb-c.h"

static const char *client_phase_name(int p)
{
    static const char *names[] = {"created",         "peer list received", "shares sent",
                                  "shares received", "survivors signed",   "unmasked"};
    return p >= 0 && p <= CP_UNMASKED ? names[p] : "?";
}

/* ---- lifecycle ------------------------------------------------------------- */

void fa_secagg_client_del(fa_secagg_client *c)
{
    if (!c)
        return;
    fa_secagg_client_stream_free(&c->st);
    if (c->sec)
        sodium_free(c->sec);
    if (c->held)
        sodium_free(c->held);
    if (c->ck)
        sodium_free(c->ck);
    free(c->peers);
    free(c->sharekeys);
    fa_secagg_roster_free(&c->roster);
    sodium_memzero(c, sizeof(*c));
    free(c);
}

/* The parts of new and restore before any key is drawn or loaded. */
int fa_secagg_client_alloc(fa_secagg_client **out, const fa_secagg_config *cfg,
                           const uint8_t identity_sk[32], const char *client_id,
                           const fa_secagg_member *members, size_t n_members,
                           const fa_secagg_rng *rng, fa_error *err)
{
    fa_secagg_client *c;
    uint8_t pk[32];
    int r, rc;

    *out = NULL;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "secagg client: libsodium failed to initialise");
    c = calloc(1, sizeof(*c));
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "secagg client: out of memory");
    if ((rc = fa_secagg_cfg_init(&c->cfg, cfg, err)) != 0 ||
        (rc = fa_secagg_roster_init(&c->roster, members, n_members, err)) != 0)
        goto fail;
    if (!client_id || (r = fa_secagg_roster_find(&c->roster, client_id)) < 0) {
        rc = fa_errorf(err, FA_ERR_INVAL, "secagg client: '%s' is not a member of federation '%s'",
                       client_id ? client_id : "(none)", c->cfg.fed);
        goto fail;
    }
    snprintf(c->id, sizeof(c->id), "%s", client_id);
    if (rng)
        c->rng = *rng;
    c->sec = sodium_malloc(sizeof(*c->sec));
    if (!c->sec) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client: out of secure memory");
        goto fail;
    }
    memcpy(c->sec->identity, identity_sk, 32);
    if (fa_identity_public_key(c->sec->identity, pk) != 0 ||
        memcmp(pk, c->roster.m[r].pk, 32) != 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "secagg client: the identity key does not match the public key the "
                       "federation lists for '%s'",
                       client_id);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    fa_secagg_client_del(c);
    return rc;
}

int fa_secagg_client_new(fa_secagg_client **out, const fa_secagg_config *cfg,
                         const uint8_t identity_sk[FA_SECAGG_IDENTITY_SK_BYTES],
                         const char *client_id, const fa_secagg_member *members, size_t n_members,
                         const fa_secagg_rng *rng, fa_error *err)
{
    fa_secagg_client *c;
    uint8_t *sm = NULL;
    size_t sm_len = 0;
    int rc;

    if ((rc = fa_secagg_client_alloc(&c, cfg, identity_sk, client_id, members, n_members, rng,
                                     err)) != 0)
        return rc;
    /* Round 0: two fresh X25519 key pairs; b_u is drawn here (rather than
     * in round 1) so that its commitment can be signed with the keys. */
    if ((rc = fa_secagg_rng_fill(&c->rng, c->sec->c_sk, 32)) != 0 ||
        (rc = fa_secagg_rng_fill(&c->rng, c->sec->s_sk, 32)) != 0 ||
        (rc = fa_secagg_rng_fill(&c->rng, c->sec->b, 32)) != 0 ||
        (rc = fa_secagg_rng_fill(&c->rng, c->sec->round_seed, 32)) != 0) {
        fa_errorf(err, rc, "secagg client: the random source failed");
        goto fail;
    }
    snprintf(c->self.id, sizeof(c->self.id), "%s", c->id);
    memcpy(c->self.model_sha, c->cfg.c.model_sha256, 32);
    if (crypto_scalarmult_base(c->self.c_pk, c->sec->c_sk) != 0 ||
        crypto_scalarmult_base(c->self.s_pk, c->sec->s_sk) != 0) {
        rc = fa_errorf(err, FA_ERR_CRYPTO, "secagg client: X25519 key generation failed");
        goto fail;
    }
    if ((rc = fa_secagg_b_commit(&c->cfg, c->id, c->sec->b, c->self.b_commit)) != 0 ||
        (rc = fa_secagg_msg_advertise(&c->cfg, &c->self, &sm, &sm_len)) != 0 ||
        (rc = fa_identity_sign(c->sec->identity, sm, sm_len, c->self.sig)) != 0) {
        fa_errorf(err, rc, "secagg client: signing the key advertisement failed");
        goto fail;
    }
    free(sm);
    c->phase = CP_CREATED;
    *out = c;
    return 0;
fail:
    free(sm);
    fa_secagg_client_del(c);
    return rc;
}

/* ---- helpers ---------------------------------------------------------------- */

static int check_round(const fa_secagg_client *c, uint64_t round, uint32_t attempt,
                       const char *what, fa_error *err)
{
    if (round != c->cfg.c.round || attempt != c->cfg.c.attempt)
        return fa_errorf(err, FA_ERR_REPLAY,
                         "%s for '%s': for round %llu attempt %u, but this client is in round "
                         "%llu attempt %u",
                         what, c->id, (unsigned long long)round, attempt,
                         (unsigned long long)c->cfg.c.round, c->cfg.c.attempt);
    return 0;
}

int fa_secagg_client_check_phase(const fa_secagg_client *c, int lo, int hi, const char *what,
                                 fa_error *err)
{
    assert(CP_CREATED <= lo && lo <= hi && hi <= CP_UNMASKED); /* the caller's constants */
    if (c->phase < lo || c->phase > hi)
        return fa_errorf(err, FA_ERR_STATE, "%s for '%s': not now (the client is at: %s)", what,
                         c->id, client_phase_name(c->phase));
    return 0;
}

static int peer_find(const fa_secagg_client *c, const char *id)
{
    size_t lo = 0, hi = c->n1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = strcmp(id, c->peers[mid].id);
        if (r == 0)
            return (int)mid;
        if (r < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* ---- round 0 ----------------------------------------------------------------- */

int fa_secagg_client_advertise(fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err)
{
    Fedagg__AdvertiseKeys m = FEDAGG__ADVERTISE_KEYS__INIT;
    int rc;
    m.round = c->cfg.c.round;
    m.attempt = c->cfg.c.attempt;
    m.client_id = c->id;
    m.c_pk.data = c->self.c_pk;
    m.c_pk.len = 32;
    m.s_pk.data = c->self.s_pk;
    m.s_pk.len = 32;
    m.signature.data = c->self.sig;
    m.signature.len = 64;
    m.self_mask_commitment.data = c->self.b_commit;
    m.self_mask_commitment.len = 32;
    m.model_sha256.data = c->self.model_sha;
    m.model_sha256.len = 32;
    rc = fa_secagg_pack(&m.base, out, out_len);
    return rc == 0 ? 0 : fa_errorf(err, rc, "AdvertiseKeys: out of memory");
}

/* Round 1 of the paper begins by checking the PeerList: |U1| >= t, every
 * signature, distinct keys; and, against the model-inconsistency attack
 * (Pasquini et al., CCS 2022), one model: every peer signed the digest of
 * the model this client trained from. */
int fa_secagg_client_peer_list(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                               fa_error *err)
{
    Fedagg__PeerList *m = NULL;
    fa_secagg_peer *peers = NULL;
    uint8_t *sm = NULL;
    size_t sm_len = 0, me = SIZE_MAX, closed[FA_SECAGG_MAX_CLIENTS];
    fa_secagg_graph g;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_CREATED, CP_CREATED, "PeerList", err)) != 0)
        return rc;
    m = fedagg__peer_list__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "PeerList for '%s': not a valid protobuf message",
                         c->id);
    if ((rc = check_round(c, m->round, m->attempt, "PeerList", err)) != 0)
        goto out;
    if (m->threshold != c->cfg.c.threshold || m->neighbours != c->cfg.c.neighbours ||
        m->ring_bits != c->cfg.c.ring_bits || m->vector_len != c->cfg.c.vector_len) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "PeerList for '%s': the server announces threshold %u, neighbours %u, "
                       "ring bits %u, length %llu; this client is configured with %u, %u, %u, "
                       "%llu",
                       c->id, m->threshold, m->neighbours, m->ring_bits,
                       (unsigned long long)m->vector_len, c->cfg.c.threshold, c->cfg.c.neighbours,
                       c->cfg.c.ring_bits, (unsigned long long)c->cfg.c.vector_len);
        goto out;
    }
    if (m->n_peers < c->cfg.c.threshold) {
        rc = fa_errorf(err, FA_ERR_THRESHOLD,
                       "PeerList for '%s': %zu clients advertised keys, threshold is %u", c->id,
                       m->n_peers, c->cfg.c.threshold);
        goto out;
    }
    if (m->n_peers > c->roster.n) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL, "PeerList for '%s': %zu peers in a federation of %zu",
                       c->id, m->n_peers, c->roster.n);
        goto out;
    }
    peers = calloc(m->n_peers, sizeof(*peers));
    if (!peers) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "PeerList: out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->n_peers; i++) {
        const Fedagg__AdvertiseKeys *a = m->peers[i];
        fa_secagg_peer *p = &peers[i];
        int r = fa_secagg_roster_find(&c->roster, a->client_id);
        if (r < 0) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "PeerList for '%s': peer %zu '%s' is not a federation member", c->id, i,
                           a->client_id);
            goto out;
        }
        if (i > 0 && strcmp(peers[i - 1].id, a->client_id) >= 0) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "PeerList for '%s': peers not sorted or repeated at '%s'", c->id,
                           a->client_id);
            goto out;
        }
        if ((rc = check_round(c, a->round, a->attempt, "PeerList advertisement", err)) != 0)
            goto out;
        if (a->c_pk.len != 32 || a->s_pk.len != 32 || a->self_mask_commitment.len != 32 ||
            a->model_sha256.len != 32 || a->signature.len != 64) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "PeerList for '%s': advertisement of '%s' has keys of the wrong size",
                           c->id, a->client_id);
            goto out;
        }
        snprintf(p->id, sizeof(p->id), "%s", a->client_id);
        memcpy(p->c_pk, a->c_pk.data, 32);
        memcpy(p->s_pk, a->s_pk.data, 32);
        memcpy(p->b_commit, a->self_mask_commitment.data, 32);
        memcpy(p->model_sha, a->model_sha256.data, 32);
        memcpy(p->sig, a->signature.data, 64);
        free(sm);
        sm = NULL;
        if ((rc = fa_secagg_msg_advertise(&c->cfg, p, &sm, &sm_len)) != 0) {
            fa_errorf(err, rc, "PeerList: out of memory");
            goto out;
        }
        if (fa_identity_verify(c->roster.m[r].pk, sm, sm_len, p->sig) != 0) {
            rc = fa_errorf(err, FA_ERR_VERIFY,
                           "PeerList for '%s': the advertisement of '%s' is not signed by its "
                           "identity key",
                           c->id, p->id);
            goto out;
        }
        if (sodium_memcmp(p->model_sha, c->cfg.c.model_sha256, 32) != 0) {
            char theirs[FA_HEX_LEN(8)], mine[FA_HEX_LEN(8)];
            fa_hex_encode(theirs, sizeof(theirs), p->model_sha, 8);
            fa_hex_encode(mine, sizeof(mine), c->cfg.c.model_sha256, 8);
            rc = fa_errorf(err, FA_ERR_VERIFY,
                           "PeerList for '%s': '%s' signed its advertisement for model %s..., "
                           "this client trained from model %s...: the aggregator served the "
                           "regions different models (model inconsistency); the attempt is "
                           "refused before any share or masked byte leaves",
                           c->id, p->id, theirs, mine);
            goto out;
        }
        if (strcmp(p->id, c->id) == 0) {
            if (memcmp(p, &c->self, sizeof(*p)) != 0) {
                rc = fa_errorf(err, FA_ERR_PROTOCOL,
                               "PeerList for '%s': its own advertisement was altered", c->id);
                goto out;
            }
            me = i;
        }
        for (size_t j = 0; j < i; j++)
            if (!memcmp(peers[j].c_pk, p->c_pk, 32) || !memcmp(peers[j].s_pk, p->s_pk, 32) ||
                !memcmp(peers[j].c_pk, p->s_pk, 32) || !memcmp(peers[j].s_pk, p->c_pk, 32) ||
                !memcmp(p->c_pk, p->s_pk, 32)) {
                rc = fa_errorf(err, FA_ERR_PROTOCOL,
                               "PeerList for '%s': '%s' and '%s' share a public key", c->id,
                               peers[j].id, p->id);
                goto out;
            }
    }
    if (me == SIZE_MAX) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL, "PeerList for '%s': this client is not in it", c->id);
        goto out;
    }
    if ((rc = fa_secagg_graph_init(&g, &c->cfg, peers, m->n_peers)) != 0) {
        fa_errorf(err, rc, "PeerList: %s", fa_strerror(rc));
        goto out;
    }
    if (fa_secagg_graph_closed(&g, me, closed) < g.shamir_t) {
        rc = fa_errorf(err, FA_ERR_THRESHOLD,
                       "PeerList for '%s': its neighbourhood is smaller than the threshold %u",
                       c->id, g.shamir_t);
        goto out;
    }
    c->held = sodium_malloc(m->n_peers * 64);
    if (!c->held) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "PeerList: out of secure memory");
        goto out;
    }
    sodium_memzero(c->held, m->n_peers * 64);
    c->peers = peers;
    peers = NULL;
    c->n1 = m->n_peers;
    c->me = (int)me;
    c->graph = g;
    assert(c->phase == CP_CREATED && c->n1 <= FA_SECAGG_MAX_CLIENTS && me < c->n1);
    c->phase = CP_PEERS;
out:
    free(sm);
    free(peers);
    fedagg__peer_list__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

/* ---- round 1: ShareKeys ------------------------------------------------------- */

/* XChaCha20-Poly1305 key of the shares between me and peer j (the same in
 * both directions: the agreement and the KDF are symmetric). */
static int share_key(fa_secagg_client *c, size_t j, uint8_t key[32])
{
    int rc;
    if (c->ck && c->ck_have[j]) {
        memcpy(key, c->ck + j * 32, 32);
        return 0;
    }
    rc = fa_secagg_agree(key, 32, FA_KDF_SHARE_ENC, &c->cfg, c->sec->c_sk, c->self.c_pk, c->id,
                         c->peers[j].c_pk, c->peers[j].id);
    if (rc == 0 && c->ck) {
        memcpy(c->ck + j * 32, key, 32);
        c->ck_have[j] = 1;
    }
    return rc;
}

static void share_keys_forget(fa_secagg_client *c)
{
    if (c->ck)
        sodium_free(c->ck); /* wipes */
    c->ck = NULL;
    memset(c->ck_have, 0, sizeof(c->ck_have));
}

int fa_secagg_client_share_keys(fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err)
{
    Fedagg__ShareKeys m = FEDAGG__SHARE_KEYS__INIT;
    Fedagg__EncryptedShare *es = NULL, **ptrs = NULL;
    uint8_t *cts = NULL, *shares_b = NULL, *shares_s = NULL, *plain = NULL, *key = NULL;
    uint8_t *ad = NULL, xs[FA_SECAGG_MAX_CLIENTS];
    size_t closed[FA_SECAGG_MAX_CLIENTS], nc, ne = 0, ad_len = 0;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_PEERS, CP_UNMASKED, "ShareKeys", err)) != 0)
        return rc;
    if (c->sharekeys) {
        *out = malloc(c->sharekeys_len);
        if (!*out)
            return fa_errorf(err, FA_ERR_NOMEM, "ShareKeys: out of memory");
        memcpy(*out, c->sharekeys, c->sharekeys_len);
        *out_len = c->sharekeys_len;
        return 0;
    }
    nc = fa_secagg_graph_closed(&c->graph, (size_t)c->me, closed);
    for (size_t i = 0; i < nc; i++)
        xs[i] = (uint8_t)(closed[i] + 1);
    if (!c->ck && (c->ck = sodium_malloc(c->n1 * 32)) != NULL)
        memset(c->ck_have, 0, sizeof(c->ck_have));
    shares_b = sodium_malloc(nc * 32);
    shares_s = sodium_malloc(nc * 32);
    plain = sodium_malloc(FA_SECAGG_SHARE_PLAIN);
    key = sodium_malloc(32);
    es = calloc(nc, sizeof(*es));
    ptrs = calloc(nc, sizeof(*ptrs));
    cts = malloc(nc * FA_SECAGG_SHARE_CT);
    if (!shares_b || !shares_s || !plain || !key || !es || !ptrs || !cts) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "ShareKeys: out of memory");
        goto out;
    }
    /* t-out-of-|U1| shares of s_sk_u and b_u (one polynomial per secret). */
    if ((rc = fa_shamir_split(c->sec->b, c->graph.shamir_t, xs, nc, shares_b, &c->rng)) != 0 ||
        (rc = fa_shamir_split(c->sec->s_sk, c->graph.shamir_t, xs, nc, shares_s, &c->rng)) != 0) {
        fa_errorf(err, rc, "ShareKeys: secret sharing failed");
        goto out;
    }
    for (size_t i = 0; i < nc; i++) {
        size_t j = closed[i];
        uint8_t *ct = cts + ne * FA_SECAGG_SHARE_CT;
        Fedagg__EncryptedShare init = FEDAGG__ENCRYPTED_SHARE__INIT;
        if ((int)j == c->me) {
            memcpy(c->held + j * 64, shares_b + i * 32, 32);
            memcpy(c->held + j * 64 + 32, shares_s + i * 32, 32);
            continue;
        }
        /* e_uv = AE.enc(KA.agree(c_sk_u, c_pk_v), u || v || s_sk_uv || b_uv);
         * the ids travel in the associated data. */
        plain[0] = xs[i];
        memcpy(plain + 1, shares_b + i * 32, 32);
        memcpy(plain + 33, shares_s + i * 32, 32);
        free(ad);
        ad = NULL;
        if ((rc = share_key(c, j, key)) != 0 ||
            (rc = fa_secagg_share_ad(&c->cfg, c->id, c->peers[j].id, &ad, &ad_len)) != 0 ||
            (rc = fa_secagg_rng_fill(&c->rng, ct, FA_SECAGG_NONCE_BYTES)) != 0) {
            fa_errorf(err, rc, "ShareKeys: encrypting the shares for '%s' failed (%s)",
                      c->peers[j].id, fa_strerror(rc));
            goto out;
        }
        crypto_aead_xchacha20poly1305_ietf_encrypt(ct + FA_SECAGG_NONCE_BYTES, NULL, plain,
                                                   FA_SECAGG_SHARE_PLAIN, ad, ad_len, NULL, ct,
                                                   key);
        es[ne] = init;
        es[ne].from = c->id;
        es[ne].to = c->peers[j].id;
        es[ne].ciphertext.data = ct;
        es[ne].ciphertext.len = FA_SECAGG_SHARE_CT;
        ptrs[ne] = &es[ne];
        ne++;
    }
    m.round = c->cfg.c.round;
    m.attempt = c->cfg.c.attempt;
    m.client_id = c->id;
    m.n_shares = ne;
    m.shares = ptrs;
    if ((rc = fa_secagg_pack(&m.base, &c->sharekeys, &c->sharekeys_len)) != 0 ||
        !(*out = malloc(c->sharekeys_len))) {
        free(c->sharekeys);
        c->sharekeys = NULL;
        rc = fa_errorf(err, FA_ERR_NOMEM, "ShareKeys: out of memory");
        goto out;
    }
    memcpy(*out, c->sharekeys, c->sharekeys_len);
    *out_len = c->sharekeys_len;
    if (c->phase == CP_PEERS)
        c->phase = CP_SHARED;
out:
    if (shares_b)
        sodium_free(shares_b);
    if (shares_s)
        sodium_free(shares_s);
    if (plain)
        sodium_free(plain);
    if (key)
        sodium_free(key);
    free(ad);
    free(es);
    free(ptrs);
    free(cts);
    return rc;
}

/* Round 2 of the paper begins by receiving the ciphertexts of U2. */
int fa_secagg_client_shares(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                            fa_error *err)
{
    Fedagg__SharesForYou *m = NULL;
    uint8_t *held = NULL, *plain = NULL, *key = NULL, *ad = NULL;
    uint8_t got[FA_SECAGG_MAX_CLIENTS] = {0};
    size_t ad_len = 0, count = 1;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_SHARED, CP_SHARED, "SharesForYou", err)) != 0)
        return rc;
    m = fedagg__shares_for_you__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "SharesForYou for '%s': not a valid protobuf message",
                         c->id);
    if ((rc = check_round(c, m->round, m->attempt, "SharesForYou", err)) != 0)
        goto out;
    held = sodium_malloc(c->n1 * 64);
    plain = sodium_malloc(FA_SECAGG_SHARE_PLAIN);
    key = sodium_malloc(32);
    if (!held || !plain || !key) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "SharesForYou: out of secure memory");
        goto out;
    }
    memcpy(held, c->held, c->n1 * 64);
    got[c->me] = 1;
    for (size_t i = 0; i < m->n_shares; i++) {
        const Fedagg__EncryptedShare *e = m->shares[i];
        int f = peer_find(c, e->from);
        if (strcmp(e->to, c->id) != 0 || f < 0 || f == c->me ||
            !fa_secagg_graph_adjacent(&c->graph, (size_t)c->me, (size_t)f) || got[f]) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SharesForYou for '%s': share %zu from '%s' to '%s' is not from a "
                           "peer of U1, not for this client, or repeated",
                           c->id, i, e->from, e->to);
            goto out;
        }
        if (e->ciphertext.len != FA_SECAGG_SHARE_CT) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SharesForYou for '%s': ciphertext from '%s' has %zu bytes, not %d",
                           c->id, e->from, e->ciphertext.len, FA_SECAGG_SHARE_CT);
            goto out;
        }
        free(ad);
        ad = NULL;
        if ((rc = share_key(c, (size_t)f, key)) != 0 ||
            (rc = fa_secagg_share_ad(&c->cfg, e->from, c->id, &ad, &ad_len)) != 0) {
            fa_errorf(err, rc, "SharesForYou for '%s': key agreement with '%s' failed", c->id,
                      e->from);
            goto out;
        }
        if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain, NULL, NULL,
                                                       e->ciphertext.data + FA_SECAGG_NONCE_BYTES,
                                                       FA_SECAGG_SHARE_CT - FA_SECAGG_NONCE_BYTES,
                                                       ad, ad_len, e->ciphertext.data, key) != 0) {
            rc = fa_errorf(err, FA_ERR_VERIFY,
                           "SharesForYou for '%s': the ciphertext from '%s' does not decrypt "
                           "(tampered, or for another round, attempt or pair)",
                           c->id, e->from);
            goto out;
        }
        if (plain[0] != (uint8_t)(c->me + 1)) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SharesForYou for '%s': the shares from '%s' are for x = %u, not %d",
                           c->id, e->from, plain[0], c->me + 1);
            goto out;
        }
        memcpy(held + (size_t)f * 64, plain + 1, 64);
        got[f] = 1;
        count++;
    }
    if (count < c->graph.shamir_t) {
        rc = fa_errorf(err, FA_ERR_THRESHOLD,
                       "SharesForYou for '%s': shares from %zu clients (itself included), "
                       "threshold is %u",
                       c->id, count, c->graph.shamir_t);
        goto out;
    }
    memcpy(c->held, held, c->n1 * 64);
    memcpy(c->in_u2, got, sizeof(got));
    assert(c->phase == CP_SHARED);
    c->phase = CP_GOT_SHARES;
    share_keys_forget(c);
out:
    if (held)
        sodium_free(held);
    if (plain)
        sodium_free(plain);
    if (key)
        sodium_free(key);
    free(ad);
    fedagg__shares_for_you__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

/* ---- input -------------------------------------------------------------------- */

/* The input's fingerprint, so that a restored client masks nothing but the
 * input it was bound to: Poly1305 under a one-time key derived from this
 * attempt's secret rounding seed.  A keyed universal hash is enough here
 * (nobody chooses inputs against a key they never see; the tag itself only
 * lives in the sealed state, and an attempt only ever compares tags of its
 * own key), and OpenSSL's Poly1305 runs at 4-12 GB/s (the AVX-512 code where
 * the CPU has it), twice GMAC's speed there: on a float input of 4 bytes a
 * coordinate it is a pass over the whole update before the first masked
 * byte.  The 16-byte tag fills the first half of the 32-byte field.  On a
 * float input (norm not NULL) the same pass gives its L2 norm, piece by
 * piece (fa_codec_l2): each piece is read from memory once for both, the
 * MAC then finding it in L1 (about 2 ms less at 10^7 than two passes). */
#define BIND_PIECE 4096 /* floats, 16 KiB: a multiple of fa_codec_l2's 16 */

static int input_hash(fa_secagg_client *c, int kind, const void *data, size_t n, double weight,
                      uint8_t out[32], double *norm)
{
    const char label[] = "fedagg/secagg/input/v2";
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "POLY1305", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    uint8_t head[20], *key = sodium_malloc(32);
    size_t outl = 0;
    int ok;

    fa_le_put_u32(head, (uint32_t)kind);
    fa_le_put_u64(head + 4, n);
    memcpy(head + 12, &weight, 8);
    memset(out, 0, 32);
    ok = ctx && key &&
         fa_kdf_derive(key, 32, c->sec->round_seed, 32, FA_KDF_INPUT_BINDING, c->cfg.fed,
                       c->cfg.c.round, c->cfg.c.attempt, c->id, NULL) == 0 &&
         EVP_MAC_init(ctx, key, 32, NULL) == 1 &&
         EVP_MAC_update(ctx, (const uint8_t *)label, sizeof(label) - 1) == 1 &&
         EVP_MAC_update(ctx, head, sizeof(head)) == 1;
    if (norm) {
        const float *x = data;
        fa_codec_l2 a = {{0}, 0};
        for (size_t i = 0; ok && i < n; i += BIND_PIECE) {
            size_t m = n - i < BIND_PIECE ? n - i : BIND_PIECE;
            fa_codec_l2_add(&a, x + i, m);
            ok = EVP_MAC_update(ctx, (const uint8_t *)(x + i), m * 4) == 1;
        }
        *norm = fa_codec_l2_done(&a);
    } else {
        ok = ok && EVP_MAC_update(ctx, data, n * 4) == 1;
    }
    ok = ok && EVP_MAC_final(ctx, out, &outl, 16) == 1 && outl == 16;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    if (key)
        sodium_free(key);
    return ok ? 0 : FA_ERR_NOMEM;
}

static int bind_input(fa_secagg_client *c, int kind, const uint8_t sha[32], fa_error *err)
{
    if (c->have_input_sha && memcmp(sha, c->input_sha, 32) != 0)
        return fa_errorf(err, FA_ERR_STATE,
                         "secagg input for '%s': differs from the input this attempt (round %llu "
                         "attempt %u) was already bound to; masking another input under the "
                         "same masks would reveal both: abandon this attempt",
                         c->id, (unsigned long long)c->cfg.c.round, c->cfg.c.attempt);
    memcpy(c->input_sha, sha, 32);
    c->have_input_sha = 1;
    c->input_kind = kind;
    c->input_bound = 1;
    c->st.ready = 0; /* the stream starts again from byte 0 */
    return 0;
}

int fa_secagg_client_set_input_f32(fa_secagg_client *c, const float *x, size_t d, double weight,
                                   fa_error *err)
{
    const fa_secagg_quant *q = &c->cfg.c.quant;
    uint8_t sha[32];
    fa_codec codec;
    double norm;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_CREATED, CP_GOT_SHARES, "secagg input", err)) != 0)
        return rc;
    if (d + 1 != c->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg input for '%s': %zu values, expected %llu (vector_len minus the "
                         "weight coordinate)",
                         c->id, d, (unsigned long long)(c->cfg.c.vector_len - 1));
    if (!(weight >= 0.0 && weight <= 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "secagg input for '%s': weight %g is not in [0, 1]",
                         c->id, weight);
    /* the binding's pass gives the norm; the sum of squares cannot overflow
     * a double for finite floats, so it is finite exactly when every value
     * is (a refused input is not bound) */
    if ((rc = input_hash(c, INPUT_F32, x, d, weight, sha, &norm)) != 0)
        return fa_errorf(err, rc, "secagg input: out of memory");
    if (!isfinite(norm))
        for (size_t i = 0; i < d; i++)
            if (!isfinite(x[i]))
                return fa_errorf(err, FA_ERR_INVAL, "secagg input for '%s': value %zu is %g", c->id,
                                 i, (double)x[i]);
    codec.pre = 1.0;
    if (q->clip_mode != FA_SECAGG_CLIP_COORDINATE && norm > q->clip_l2_norm)
        codec.pre = q->clip_l2_norm / norm;
    codec.qmax = (int32_t)((1u << (q->bits - 1)) - 1);
    codec.limit = q->clip_value;
    codec.mul = weight * (double)codec.qmax / q->clip_value;
    if ((rc = bind_input(c, INPUT_F32, sha, err)) != 0)
        return rc;
    c->xf = x;
    c->weight = weight;
    c->codec = codec;
    return 0;
}

int fa_secagg_client_set_input_ring(fa_secagg_client *c, const uint32_t *q, size_t n, fa_error *err)
{
    uint8_t sha[32];
    int rc;
    if ((rc = fa_secagg_client_check_phase(c, CP_CREATED, CP_GOT_SHARES, "secagg input", err)) != 0)
        return rc;
    if (n != c->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg input for '%s': %zu ring elements, expected %llu", c->id, n,
                         (unsigned long long)c->cfg.c.vector_len);
    if ((rc = input_hash(c, INPUT_RING, q, n, 0.0, sha, NULL)) != 0)
        return fa_errorf(err, rc, "secagg input: out of memory");
    if ((rc = bind_input(c, INPUT_RING, sha, err)) != 0)
        return rc;
    c->xq = q;
    return 0;
}

/* ---- round 3: consistency check ------------------------------------------------- */

/* What `signer` signs over U3: with this client's model, which every peer
 * of U1 advertised too (checked with the PeerList). */
static int survivors_msg(const fa_secagg_client *c, const char *signer, uint8_t **out, size_t *len)
{
    char *ids[FA_SECAGG_MAX_CLIENTS];
    size_t n = 0;
    for (size_t j = 0; j < c->n1; j++)
        if (c->in_u3[j])
            ids[n++] = c->peers[j].id;
    return fa_secagg_msg_survivors(&c->cfg, signer, c->cfg.c.model_sha256, ids, n, out, len);
}

int fa_secagg_client_survivors(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                               uint8_t **out, size_t *out_len, fa_error *err)
{
    Fedagg__SurvivorList *m = NULL;
    Fedagg__SignedSurvivors ss = FEDAGG__SIGNED_SURVIVORS__INIT;
    uint8_t u3[FA_SECAGG_MAX_CLIENTS] = {0}, sig[64], usig[64], saved[FA_SECAGG_MAX_CLIENTS];
    uint8_t *sm = NULL;
    size_t sm_len = 0;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_GOT_SHARES, CP_SURVIVORS, "SurvivorList", err)) !=
        0)
        return rc;
    if (!c->upload_done)
        return fa_errorf(err, FA_ERR_STATE,
                         "SurvivorList for '%s': the masked stream was not produced to its end",
                         c->id);
    m = fedagg__survivor_list__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "SurvivorList for '%s': not a valid protobuf message",
                         c->id);
    if ((rc = check_round(c, m->round, m->attempt, "SurvivorList", err)) != 0)
        goto out;
    for (size_t i = 0; i < m->n_survivors; i++) {
        int j = peer_find(c, m->survivors[i]);
        if (j < 0 || u3[j] || (i > 0 && strcmp(m->survivors[i - 1], m->survivors[i]) >= 0)) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SurvivorList for '%s': '%s' is not in U1, or the list is not sorted "
                           "and unique",
                           c->id, m->survivors[i]);
            goto out;
        }
        /* U3 must be inside U2 (as far as this client sees U2: its peers). */
        if (j != c->me && fa_secagg_graph_adjacent(&c->graph, (size_t)c->me, (size_t)j) &&
            !c->in_u2[j]) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SurvivorList for '%s': '%s' is a survivor but sent no shares in round "
                           "1",
                           c->id, m->survivors[i]);
            goto out;
        }
        u3[j] = 1;
    }
    if (!u3[c->me]) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "SurvivorList for '%s': this client is not among the survivors, so it "
                       "stops here",
                       c->id);
        goto out;
    }
    if (m->n_survivors < c->cfg.c.threshold) {
        rc = fa_errorf(err, FA_ERR_THRESHOLD,
                       "SurvivorList for '%s': %zu survivors, threshold is %u", c->id,
                       m->n_survivors, c->cfg.c.threshold);
        goto out;
    }
    if (c->phase == CP_SURVIVORS && memcmp(u3, c->in_u3, sizeof(u3)) != 0) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "SurvivorList for '%s': differs from the survivor set it already signed",
                       c->id);
        goto out;
    }
    memcpy(saved, c->in_u3, sizeof(saved));
    memcpy(c->in_u3, u3, sizeof(u3));
    /* sigma'_u = SIG(d_sk_u, U3) and the signed upload commitment */
    if ((rc = survivors_msg(c, c->id, &sm, &sm_len)) != 0 ||
        (rc = fa_identity_sign(c->sec->identity, sm, sm_len, sig)) != 0) {
        memcpy(c->in_u3, saved, sizeof(saved));
        fa_errorf(err, rc, "SurvivorList: signing failed");
        goto out;
    }
    free(sm);
    sm = NULL;
    if ((rc = fa_secagg_msg_upload(c->cfg.fed, c->cfg.c.round, c->cfg.c.attempt, c->id,
                                   FA_SECAGG_UPLOAD_BLAKE3, c->upload_digest, &sm, &sm_len)) != 0 ||
        (rc = fa_identity_sign(c->sec->identity, sm, sm_len, usig)) != 0) {
        memcpy(c->in_u3, saved, sizeof(saved));
        fa_errorf(err, rc, "SurvivorList: signing failed");
        goto out;
    }
    ss.round = c->cfg.c.round;
    ss.attempt = c->cfg.c.attempt;
    ss.client_id = c->id;
    ss.signature.data = sig;
    ss.signature.len = 64;
    ss.upload_digest.data = c->upload_digest;
    ss.upload_digest.len = 32;
    ss.upload_signature.data = usig;
    ss.upload_signature.len = 64;
    if ((rc = fa_secagg_pack(&ss.base, out, out_len)) != 0) {
        memcpy(c->in_u3, saved, sizeof(saved));
        fa_errorf(err, rc, "SignedSurvivors: out of memory");
        goto out;
    }
    /* U3 comes once; a retry of the same U3 finds it accepted already */
    assert(c->phase == CP_GOT_SHARES || c->phase == CP_SURVIVORS);
    c->phase = CP_SURVIVORS;
    fa_secagg_client_stream_free(&c->st); /* the upload is over: drop the PRGs */
out:
    free(sm);
    fedagg__survivor_list__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

/* ---- round 4: unmasking ------------------------------------------------------------ */

int fa_secagg_client_signatures(fa_secagg_client *c, const uint8_t *msg, size_t len,
                                uint64_t now_ms, uint8_t **out, size_t *out_len, fa_error *err)
{
    Fedagg__SurvivorSignatures *m = NULL;
    Fedagg__UnmaskShares um = FEDAGG__UNMASK_SHARES__INIT;
    Fedagg__RevealedShare *rs = NULL, **bp = NULL, **sp = NULL;
    uint8_t seen[FA_SECAGG_MAX_CLIENTS] = {0}, kinds[FA_SECAGG_MAX_CLIENTS] = {0};
    uint8_t *sm = NULL;
    size_t sm_len = 0, nb = 0, ns = 0;
    int rc;

    if ((rc = fa_secagg_client_check_phase(c, CP_SURVIVORS, CP_UNMASKED, "SurvivorSignatures",
                                           err)) != 0)
        return rc;
    m = fedagg__survivor_signatures__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE,
                         "SurvivorSignatures for '%s': not a valid protobuf message", c->id);
    if ((rc = check_round(c, m->round, m->attempt, "SurvivorSignatures", err)) != 0)
        goto out;
    /* Round 4: |U4| >= t, U4 inside U3, and every sigma'_v verifies over U3. */
    if (m->n_signatures < c->cfg.c.threshold) {
        rc = fa_errorf(err, FA_ERR_THRESHOLD,
                       "SurvivorSignatures for '%s': %zu signatures, threshold is %u", c->id,
                       m->n_signatures, c->cfg.c.threshold);
        goto out;
    }
    for (size_t i = 0; i < m->n_signatures; i++) {
        const Fedagg__SignedSurvivors *s = m->signatures[i];
        int j = peer_find(c, s->client_id);
        int r = fa_secagg_roster_find(&c->roster, s->client_id);
        if (j < 0 || r < 0 || !c->in_u3[j] || seen[j]) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SurvivorSignatures for '%s': signature by '%s', who is not a "
                           "survivor or signed twice",
                           c->id, s->client_id);
            goto out;
        }
        seen[j] = 1;
        if ((rc = check_round(c, s->round, s->attempt, "SurvivorSignatures entry", err)) != 0)
            goto out;
        free(sm);
        sm = NULL;
        if ((rc = survivors_msg(c, s->client_id, &sm, &sm_len)) != 0) {
            fa_errorf(err, rc, "SurvivorSignatures: out of memory");
            goto out;
        }
        if (s->signature.len != 64 ||
            fa_identity_verify(c->roster.m[r].pk, sm, sm_len, s->signature.data) != 0) {
            rc = fa_errorf(err, FA_ERR_VERIFY,
                           "SurvivorSignatures for '%s': the signature of '%s' over the survivor "
                           "set does not verify (the server showed clients different sets?)",
                           c->id, s->client_id);
            goto out;
        }
    }
    /* Shares to reveal: b_v for survivors, s_sk_v for dropouts of U2 (both
     * within the neighbourhood); never both for one v. */
    for (size_t j = 0; j < c->n1; j++) {
        if ((int)j != c->me &&
            (!c->in_u2[j] || !fa_secagg_graph_adjacent(&c->graph, (size_t)c->me, j)))
            continue;
        kinds[j] = c->in_u3[j] ? REV_B : REV_S;
        if (c->revealed[j] != REV_NONE && c->revealed[j] != kinds[j]) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SurvivorSignatures for '%s': would reveal both shares of '%s'; refused",
                           c->id, c->peers[j].id);
            goto out;
        }
    }
    rs = calloc(c->n1, sizeof(*rs));
    bp = calloc(c->n1, sizeof(*bp));
    sp = calloc(c->n1, sizeof(*sp));
    if (!rs || !bp || !sp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "UnmaskShares: out of memory");
        goto out;
    }
    for (size_t j = 0; j < c->n1; j++) {
        Fedagg__RevealedShare init = FEDAGG__REVEALED_SHARE__INIT;
        if (kinds[j] == REV_NONE)
            continue;
        rs[j] = init;
        rs[j].owner = c->peers[j].id;
        rs[j].share.data = c->held + j * 64 + (kinds[j] == REV_B ? 0 : 32);
        rs[j].share.len = 32;
        if (kinds[j] == REV_B)
            bp[nb++] = &rs[j];
        else
            sp[ns++] = &rs[j];
    }
    um.round = c->cfg.c.round;
    um.attempt = c->cfg.c.attempt;
    um.client_id = c->id;
    um.n_self_mask_shares = nb;
    um.self_mask_shares = bp;
    um.n_key_shares = ns;
    um.key_shares = sp;
    if ((rc = fa_secagg_pack(&um.base, out, out_len)) != 0) {
        fa_errorf(err, rc, "UnmaskShares: out of memory");
        goto out;
    }
    memcpy(c->revealed, kinds, sizeof(kinds));
    assert(c->phase == CP_SURVIVORS || c->phase == CP_UNMASKED);
    c->phase = CP_UNMASKED;
out:
    free(sm);
    free(rs);
    free(bp);
    free(sp);
    fedagg__survivor_signatures__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}
