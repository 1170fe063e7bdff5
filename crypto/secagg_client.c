/* The client side of secure aggregation (Bonawitz et al., CCS 2017, Figure 4,
 * "User" column), as a sans-I/O state machine.  See crypto/secagg.h. */
#include "crypto/secagg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "common/fa_endian.h"
#include "common/fa_hex.h"
#include "common/fa_sha256.h"
#include "crypto/identity.h"
#include "crypto/kdf.h"
#include "crypto/mask_prg.h"
#include "crypto/ring.h"
#include "crypto/secagg_internal.h"
#include "crypto/shamir.h"
#include "crypto/wire.h"
#include "secagg.pb-c.h"

/* Where the client is.  Each consumed server message moves it one step. */
enum {
    CP_CREATED = 0,    /* keys drawn, AdvertiseKeys ready (round 0) */
    CP_PEERS = 1,      /* PeerList U1 accepted */
    CP_SHARED = 2,     /* ShareKeys produced (round 1) */
    CP_GOT_SHARES = 3, /* SharesForYou accepted: may stream the masked input (round 2) */
    CP_SURVIVORS = 4,  /* U3 accepted, SignedSurvivors produced (round 3) */
    CP_UNMASKED = 5,   /* UnmaskShares produced (round 4) */
};

enum { REV_NONE = 0, REV_B = 1, REV_S = 2 };
enum { INPUT_NONE = 0, INPUT_F32 = 1, INPUT_RING = 2 };

/* Everything secret, in one sodium_malloc'ed block (guard pages, wiped on
 * free). */
struct client_secrets {
    uint8_t identity[32];   /* Ed25519 seed */
    uint8_t c_sk[32];       /* X25519, share encryption */
    uint8_t s_sk[32];       /* X25519, pairwise masks */
    uint8_t b[32];          /* self-mask seed b_u */
    uint8_t round_seed[32]; /* stochastic rounding */
};

/* The masked stream: one PRG per mask (the self mask first), the rounding
 * PRG, and one block of output waiting to be copied out. */
struct stream {
    int ready;
    size_t nprg;
    fa_prg *prg;
    int *sign;
    fa_prg round_prg;
    uint64_t pos; /* coordinates produced */
    uint32_t *acc, *scratch, *rnd;
    uint8_t *pending;
    size_t pend_off, pend_len;
    fa_sha256_ctx sha;
    int finished;
};

struct fa_secagg_client {
    fa_sa_cfg cfg;
    fa_sa_roster roster;
    char id[FA_SA_ID_CAP];
    fa_secagg_rng rng;
    struct client_secrets *sec;
    fa_sa_peer self; /* own advertisement */
    int phase;
    /* U1 */
    size_t n1;
    fa_sa_peer *peers; /* sorted by id */
    int me;            /* index in peers */
    fa_sa_graph graph;
    uint8_t in_u2[FA_SECAGG_MAX_CLIENTS]; /* sent us shares (U2 as seen here; me included) */
    uint8_t in_u3[FA_SECAGG_MAX_CLIENTS];
    uint8_t revealed[FA_SECAGG_MAX_CLIENTS]; /* REV_* per owner, once round 4 ran */
    uint8_t *held; /* sodium_malloc, n1 * 64: share of b_j || share of s_sk_j we hold */
    uint8_t *ck;   /* sodium_malloc, n1 * 32: share-encryption keys from round 1, kept
                      for decrypting in round 2 (not saved: recomputed after a restore) */
    uint8_t ck_have[FA_SECAGG_MAX_CLIENTS];
    uint8_t *sharekeys; /* the ShareKeys message, kept so a retry sends the same bytes */
    size_t sharekeys_len;
    /* input */
    int input_kind;
    int input_bound; /* x or q is set in this process */
    const float *xf;
    const uint32_t *xq;
    double weight;
    fa_codec codec;
    uint8_t input_sha[32];
    int have_input_sha;
    /* output */
    uint8_t upload_sha[32];
    int upload_done;
    struct stream st;
};

static const char *client_phase_name(int p)
{
    static const char *names[] = {"created",         "peer list received", "shares sent",
                                  "shares received", "survivors signed",   "unmasked"};
    return p >= 0 && p <= CP_UNMASKED ? names[p] : "?";
}

/* ---- lifecycle ------------------------------------------------------------- */

static void stream_free(struct stream *st)
{
    if (st->prg) {
        for (size_t i = 0; i < st->nprg; i++)
            fa_prg_free(&st->prg[i]);
        free(st->prg);
    }
    free(st->sign);
    fa_prg_free(&st->round_prg);
    if (st->acc)
        sodium_free(st->acc); /* holds masked and unmasked input */
    if (st->scratch)
        sodium_free(st->scratch);
    free(st->rnd);
    free(st->pending);
    fa_sha256_free(&st->sha);
    memset(st, 0, sizeof(*st));
}

void fa_secagg_client_del(fa_secagg_client *c)
{
    if (!c)
        return;
    stream_free(&c->st);
    if (c->sec)
        sodium_free(c->sec);
    if (c->held)
        sodium_free(c->held);
    if (c->ck)
        sodium_free(c->ck);
    free(c->peers);
    free(c->sharekeys);
    fa_sa_roster_free(&c->roster);
    sodium_memzero(c, sizeof(*c));
    free(c);
}

/* The parts of new and restore before any key is drawn or loaded. */
static int client_alloc(fa_secagg_client **out, const fa_secagg_config *cfg,
                        const uint8_t identity_sk[32], const char *client_id,
                        const fa_secagg_member *members, size_t n_members, const fa_secagg_rng *rng,
                        fa_error *err)
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
    if ((rc = fa_sa_cfg_init(&c->cfg, cfg, err)) != 0 ||
        (rc = fa_sa_roster_init(&c->roster, members, n_members, err)) != 0)
        goto fail;
    if (!client_id || (r = fa_sa_roster_find(&c->roster, client_id)) < 0) {
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

    if ((rc = client_alloc(&c, cfg, identity_sk, client_id, members, n_members, rng, err)) != 0)
        return rc;
    /* Round 0: two fresh X25519 key pairs; b_u is drawn here (rather than
     * in round 1) so that its commitment can be signed with the keys. */
    if ((rc = fa_rng_fill(&c->rng, c->sec->c_sk, 32)) != 0 ||
        (rc = fa_rng_fill(&c->rng, c->sec->s_sk, 32)) != 0 ||
        (rc = fa_rng_fill(&c->rng, c->sec->b, 32)) != 0 ||
        (rc = fa_rng_fill(&c->rng, c->sec->round_seed, 32)) != 0) {
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
    if ((rc = fa_sa_b_commit(&c->cfg, c->id, c->sec->b, c->self.b_commit)) != 0 ||
        (rc = fa_sa_msg_advertise(&c->cfg, &c->self, &sm, &sm_len)) != 0 ||
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

static int check_phase(const fa_secagg_client *c, int lo, int hi, const char *what, fa_error *err)
{
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
    rc = fa_sa_pack(&m.base, out, out_len);
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
    fa_sa_peer *peers = NULL;
    uint8_t *sm = NULL;
    size_t sm_len = 0, me = SIZE_MAX, closed[FA_SECAGG_MAX_CLIENTS];
    fa_sa_graph g;
    int rc;

    if ((rc = check_phase(c, CP_CREATED, CP_CREATED, "PeerList", err)) != 0)
        return rc;
    m = fedagg__peer_list__unpack(&fa_sa_pb_alloc, len, msg);
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
        fa_sa_peer *p = &peers[i];
        int r = fa_sa_roster_find(&c->roster, a->client_id);
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
        if ((rc = fa_sa_msg_advertise(&c->cfg, p, &sm, &sm_len)) != 0) {
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
    if ((rc = fa_sa_graph_init(&g, &c->cfg, peers, m->n_peers)) != 0) {
        fa_errorf(err, rc, "PeerList: %s", fa_strerror(rc));
        goto out;
    }
    if (fa_sa_graph_closed(&g, me, closed) < g.shamir_t) {
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
    c->phase = CP_PEERS;
out:
    free(sm);
    free(peers);
    fedagg__peer_list__free_unpacked(m, &fa_sa_pb_alloc);
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
    rc = fa_sa_agree(key, 32, FA_KDF_SHARE_ENC, &c->cfg, c->sec->c_sk, c->self.c_pk, c->id,
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

    if ((rc = check_phase(c, CP_PEERS, CP_UNMASKED, "ShareKeys", err)) != 0)
        return rc;
    if (c->sharekeys) {
        *out = malloc(c->sharekeys_len);
        if (!*out)
            return fa_errorf(err, FA_ERR_NOMEM, "ShareKeys: out of memory");
        memcpy(*out, c->sharekeys, c->sharekeys_len);
        *out_len = c->sharekeys_len;
        return 0;
    }
    nc = fa_sa_graph_closed(&c->graph, (size_t)c->me, closed);
    for (size_t i = 0; i < nc; i++)
        xs[i] = (uint8_t)(closed[i] + 1);
    if (!c->ck && (c->ck = sodium_malloc(c->n1 * 32)) != NULL)
        memset(c->ck_have, 0, sizeof(c->ck_have));
    shares_b = sodium_malloc(nc * 32);
    shares_s = sodium_malloc(nc * 32);
    plain = sodium_malloc(FA_SA_SHARE_PLAIN);
    key = sodium_malloc(32);
    es = calloc(nc, sizeof(*es));
    ptrs = calloc(nc, sizeof(*ptrs));
    cts = malloc(nc * FA_SA_SHARE_CT);
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
        uint8_t *ct = cts + ne * FA_SA_SHARE_CT;
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
            (rc = fa_sa_share_ad(&c->cfg, c->id, c->peers[j].id, &ad, &ad_len)) != 0 ||
            (rc = fa_rng_fill(&c->rng, ct, FA_SA_NONCE_BYTES)) != 0) {
            fa_errorf(err, rc, "ShareKeys: encrypting the shares for '%s' failed (%s)",
                      c->peers[j].id, fa_strerror(rc));
            goto out;
        }
        crypto_aead_xchacha20poly1305_ietf_encrypt(ct + FA_SA_NONCE_BYTES, NULL, plain,
                                                   FA_SA_SHARE_PLAIN, ad, ad_len, NULL, ct, key);
        es[ne] = init;
        es[ne].from = c->id;
        es[ne].to = c->peers[j].id;
        es[ne].ciphertext.data = ct;
        es[ne].ciphertext.len = FA_SA_SHARE_CT;
        ptrs[ne] = &es[ne];
        ne++;
    }
    m.round = c->cfg.c.round;
    m.attempt = c->cfg.c.attempt;
    m.client_id = c->id;
    m.n_shares = ne;
    m.shares = ptrs;
    if ((rc = fa_sa_pack(&m.base, &c->sharekeys, &c->sharekeys_len)) != 0 ||
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

    if ((rc = check_phase(c, CP_SHARED, CP_SHARED, "SharesForYou", err)) != 0)
        return rc;
    m = fedagg__shares_for_you__unpack(&fa_sa_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "SharesForYou for '%s': not a valid protobuf message",
                         c->id);
    if ((rc = check_round(c, m->round, m->attempt, "SharesForYou", err)) != 0)
        goto out;
    held = sodium_malloc(c->n1 * 64);
    plain = sodium_malloc(FA_SA_SHARE_PLAIN);
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
            !fa_sa_graph_adjacent(&c->graph, (size_t)c->me, (size_t)f) || got[f]) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SharesForYou for '%s': share %zu from '%s' to '%s' is not from a "
                           "peer of U1, not for this client, or repeated",
                           c->id, i, e->from, e->to);
            goto out;
        }
        if (e->ciphertext.len != FA_SA_SHARE_CT) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "SharesForYou for '%s': ciphertext from '%s' has %zu bytes, not %d",
                           c->id, e->from, e->ciphertext.len, FA_SA_SHARE_CT);
            goto out;
        }
        free(ad);
        ad = NULL;
        if ((rc = share_key(c, (size_t)f, key)) != 0 ||
            (rc = fa_sa_share_ad(&c->cfg, e->from, c->id, &ad, &ad_len)) != 0) {
            fa_errorf(err, rc, "SharesForYou for '%s': key agreement with '%s' failed", c->id,
                      e->from);
            goto out;
        }
        if (crypto_aead_xchacha20poly1305_ietf_decrypt(
                plain, NULL, NULL, e->ciphertext.data + FA_SA_NONCE_BYTES,
                FA_SA_SHARE_CT - FA_SA_NONCE_BYTES, ad, ad_len, e->ciphertext.data, key) != 0) {
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
    fedagg__shares_for_you__free_unpacked(m, &fa_sa_pb_alloc);
    return rc;
}

/* ---- input -------------------------------------------------------------------- */

/* The input's fingerprint, so that a restored client masks nothing but the
 * input it was bound to: GMAC (AES-128-GCM over associated data only) under
 * a key derived from this attempt's secret rounding seed.  A keyed
 * universal hash is enough here (nobody chooses inputs against a key they
 * never see; the tag itself only lives in the sealed state) and runs at
 * several GB/s where SHA-256 does about one.  The 16-byte tag fills the
 * first half of the 32-byte field. */
static int input_hash(fa_secagg_client *c, int kind, const void *data, size_t n, double weight,
                      uint8_t out[32])
{
    static const uint8_t iv[12];
    const char label[] = "fedagg/secagg/input/v1";
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    uint8_t head[20], *key = sodium_malloc(16);
    const uint8_t *p = data;
    size_t len = n * 4;
    int ok, outl;

    fa_le_put_u32(head, (uint32_t)kind);
    fa_le_put_u64(head + 4, n);
    memcpy(head + 12, &weight, 8);
    ok = ctx && key &&
         fa_kdf_derive(key, 16, c->sec->round_seed, 32, FA_KDF_INPUT_BINDING, c->cfg.fed,
                       c->cfg.c.round, c->cfg.c.attempt, c->id, NULL) == 0 &&
         EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), NULL, key, iv) == 1 &&
         EVP_EncryptUpdate(ctx, NULL, &outl, (const uint8_t *)label, sizeof(label) - 1) == 1 &&
         EVP_EncryptUpdate(ctx, NULL, &outl, head, sizeof(head)) == 1;
    while (ok && len > 0) { /* EVP takes int lengths */
        int k = len > (1u << 30) ? (1 << 30) : (int)len;
        ok = EVP_EncryptUpdate(ctx, NULL, &outl, p, k) == 1;
        p += k;
        len -= (size_t)k;
    }
    memset(out, 0, 32);
    ok = ok && EVP_EncryptFinal_ex(ctx, out, &outl) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, out) == 1;
    EVP_CIPHER_CTX_free(ctx);
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

    if ((rc = check_phase(c, CP_CREATED, CP_GOT_SHARES, "secagg input", err)) != 0)
        return rc;
    if (d + 1 != c->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg input for '%s': %zu values, expected %llu (vector_len minus the "
                         "weight coordinate)",
                         c->id, d, (unsigned long long)(c->cfg.c.vector_len - 1));
    if (!(weight >= 0.0 && weight <= 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "secagg input for '%s': weight %g is not in [0, 1]",
                         c->id, weight);
    /* the sum of squares cannot overflow a double for finite floats, so it
     * is finite exactly when every value is */
    norm = fa_codec_l2_norm(x, d);
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
    if ((rc = input_hash(c, INPUT_F32, x, d, weight, sha)) != 0)
        return fa_errorf(err, rc, "secagg input: out of memory");
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
    if ((rc = check_phase(c, CP_CREATED, CP_GOT_SHARES, "secagg input", err)) != 0)
        return rc;
    if (n != c->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg input for '%s': %zu ring elements, expected %llu", c->id, n,
                         (unsigned long long)c->cfg.c.vector_len);
    if ((rc = input_hash(c, INPUT_RING, q, n, 0.0, sha)) != 0)
        return fa_errorf(err, rc, "secagg input: out of memory");
    if ((rc = bind_input(c, INPUT_RING, sha, err)) != 0)
        return rc;
    c->xq = q;
    return 0;
}

/* ---- round 2: the masked stream ------------------------------------------------ */

/* The rounding generator of this attempt, at word 0. */
static int rounding_prg_init(const fa_secagg_client *c, fa_prg *g)
{
    uint8_t *key = sodium_malloc(16);
    int rc;
    if (!key)
        return FA_ERR_NOMEM;
    rc = fa_kdf_derive(key, 16, c->sec->round_seed, 32, FA_KDF_ROUNDING, c->cfg.fed, c->cfg.c.round,
                       c->cfg.c.attempt, c->id, NULL);
    if (rc == 0)
        rc = fa_prg_init(g, key, 0);
    sodium_free(key);
    return rc;
}

/* x_u for coordinates [pos, pos + m) into out: the float input through the
 * codec (draws from the rounding generator, which must be at word pos), the
 * weight as the last coordinate; or the ring input as is.  rnd holds m
 * words. */
static int encode_block(const fa_secagg_client *c, fa_prg *round_prg, uint64_t pos, size_t m,
                        uint32_t *rnd, uint32_t *out)
{
    const uint64_t d = c->cfg.c.vector_len - 1;
    size_t mf;
    int rc;
    if (c->input_kind != INPUT_F32) {
        memcpy(out, c->xq + pos, m * sizeof(uint32_t));
        return 0;
    }
    mf = pos < d ? (size_t)(d - pos < m ? d - pos : m) : 0;
    if ((rc = fa_prg_words(round_prg, rnd, m)) != 0)
        return rc;
    fa_codec_encode(&c->codec, c->xf + pos, mf, rnd, out);
    if (pos + m > d) /* the weight coordinate */
        out[d - pos] =
            (uint32_t)fa_codec_round(c->weight * c->codec.qmax, rnd[d - pos], c->codec.qmax);
    return 0;
}

static int stream_setup(fa_secagg_client *c, fa_error *err)
{
    struct stream *st = &c->st;
    uint8_t *key = NULL;
    int rc = 0;

    stream_free(st);
    if (c->input_kind == INPUT_F32 &&
        c->cfg.c.ring_bits < fa_secagg_ring_bits_for(c->cfg.c.quant.bits, (uint32_t)c->n1))
        return fa_errorf(err, FA_ERR_RANGE,
                         "secagg: ring bits %u are too few for %zu clients of %u-bit values (the "
                         "sum could wrap); need %u",
                         c->cfg.c.ring_bits, c->n1, c->cfg.c.quant.bits,
                         fa_secagg_ring_bits_for(c->cfg.c.quant.bits, (uint32_t)c->n1));
    st->prg = calloc(c->n1, sizeof(*st->prg));
    st->sign = calloc(c->n1, sizeof(*st->sign));
    st->acc = sodium_malloc(FA_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->scratch = sodium_malloc(FA_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->rnd = malloc(FA_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->pending = malloc(FA_PRG_BLOCK_WORDS * sizeof(uint32_t));
    key = sodium_malloc(16);
    if (!st->prg || !st->sign || !st->acc || !st->scratch || !st->rnd || !st->pending || !key) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg masked stream: out of memory");
        goto out;
    }
    /* p_u = PRG(b_u) */
    if ((rc = fa_sa_self_mask_key(key, &c->cfg, c->id, c->sec->b)) != 0 ||
        (rc = fa_prg_init(&st->prg[0], key, 0)) != 0)
        goto crypto;
    st->sign[0] = 1;
    st->nprg = 1;
    /* p_uv = Delta_uv * PRG(s_uv) for every v of U2 (neighbours with SecAgg+) */
    for (size_t v = 0; v < c->n1; v++) {
        if ((int)v == c->me || !c->in_u2[v] || !fa_sa_graph_adjacent(&c->graph, (size_t)c->me, v))
            continue;
        if ((rc = fa_sa_agree(key, 16, FA_KDF_PAIR_MASK, &c->cfg, c->sec->s_sk, c->self.s_pk, c->id,
                              c->peers[v].s_pk, c->peers[v].id)) != 0 ||
            (rc = fa_prg_init(&st->prg[st->nprg], key, 0)) != 0)
            goto crypto;
        st->sign[st->nprg++] = fa_sa_pair_sign(c->id, c->peers[v].id);
    }
    if (c->input_kind == INPUT_F32 && (rc = rounding_prg_init(c, &st->round_prg)) != 0)
        goto crypto;
    if ((rc = fa_sha256_init(&st->sha)) != 0)
        goto crypto;
    st->ready = 1;
    goto out;
crypto:
    fa_errorf(err, rc, "secagg masked stream: setting up the masks failed (%s)", fa_strerror(rc));
out:
    if (key)
        sodium_free(key);
    if (rc != 0)
        stream_free(st);
    return rc;
}

/* y_u = x_u + p_u + sum_v p_uv for the next block of coordinates, packed
 * straight into out when it has room (*direct gets the bytes written),
 * else into the pending buffer. */
static int stream_block(fa_secagg_client *c, uint8_t *out, size_t room, size_t *direct)
{
    struct stream *st = &c->st;
    const uint64_t len = c->cfg.c.vector_len, pos = st->pos;
    const size_t m = len - pos < FA_PRG_BLOCK_WORDS ? (size_t)(len - pos) : FA_PRG_BLOCK_WORDS;
    const size_t bytes = (size_t)fa_ring_packed_bytes(m, c->cfg.c.ring_bits);
    uint8_t *dst = bytes <= room ? out : st->pending;
    const uint32_t *x = st->acc;
    int rc;

    *direct = 0;
    /* A ring input is masked straight from where it lies (fa_prg_mask reads
     * it once, prefetching ahead): copying it into acc first would cost a
     * pass over memory for nothing.  A float input is encoded into acc. */
    if (c->input_kind == INPUT_RING)
        x = c->xq + pos;
    else if ((rc = encode_block(c, &st->round_prg, pos, m, st->rnd, st->acc)) != 0)
        return rc;
    if ((rc = fa_prg_mask(st->prg, st->sign, st->nprg, x, st->acc, m, st->scratch)) != 0)
        return rc;
    fa_ring_pack(dst, st->acc, m, c->cfg.c.ring_bits);
    if ((rc = fa_sha256_update(&st->sha, dst, bytes)) != 0)
        return rc;
    if (dst == out) {
        *direct = bytes;
    } else {
        st->pend_off = 0;
        st->pend_len = bytes;
    }
    st->pos += m;
    return 0;
}

static int stream_finish(fa_secagg_client *c, fa_error *err)
{
    uint8_t sha[32];
    c->st.finished = 1;
    int rc = fa_sha256_final(&c->st.sha, sha);
    if (rc != 0)
        return fa_errorf(err, rc, "secagg masked stream: SHA-256 failed");
    if (c->upload_done && memcmp(sha, c->upload_sha, 32) != 0)
        return fa_errorf(err, FA_ERR_STATE,
                         "secagg masked stream of '%s': differs from the stream produced before "
                         "(the input changed while it was being masked)",
                         c->id);
    memcpy(c->upload_sha, sha, 32);
    c->upload_done = 1;
    return 0;
}

int fa_secagg_client_masked_next(fa_secagg_client *c, uint8_t *out, size_t cap, size_t *n,
                                 fa_error *err)
{
    struct stream *st = &c->st;
    size_t done = 0, direct = 0;
    int rc;

    *n = 0;
    if ((rc = check_phase(c, CP_GOT_SHARES, CP_GOT_SHARES, "masked stream", err)) != 0)
        return rc;
    if (!c->input_bound)
        return fa_errorf(err, FA_ERR_STATE, "masked stream of '%s': no input set", c->id);
    if (cap == 0)
        return fa_errorf(err, FA_ERR_INVAL, "masked stream: zero-sized buffer");
    if (!st->ready && (rc = stream_setup(c, err)) != 0)
        return rc;
    for (;;) {
        if (st->pend_off < st->pend_len) {
            size_t k = st->pend_len - st->pend_off;
            if (done == cap)
                break;
            if (k > cap - done)
                k = cap - done;
            memcpy(out + done, st->pending + st->pend_off, k);
            st->pend_off += k;
            done += k;
            continue;
        }
        if (st->pos == c->cfg.c.vector_len) {
            /* the last byte is out: the upload's SHA-256 is known */
            if (!st->finished && (rc = stream_finish(c, err)) != 0)
                return rc;
            break;
        }
        if (done == cap)
            break;
        if ((rc = stream_block(c, out + done, cap - done, &direct)) != 0) {
            st->ready = 0; /* start again from byte 0 on the next call */
            return fa_errorf(err, rc, "masked stream of '%s': %s", c->id, fa_strerror(rc));
        }
        done += direct;
    }
    *n = done;
    return 0;
}

int fa_secagg_client_masked_rewind(fa_secagg_client *c, fa_error *err)
{
    int rc;
    if ((rc = check_phase(c, CP_GOT_SHARES, CP_GOT_SHARES, "masked stream rewind", err)) != 0)
        return rc;
    c->st.ready = 0; /* the next masked_next sets every PRG back to word 0 */
    return 0;
}

uint64_t fa_secagg_client_masked_bytes(const fa_secagg_client *c)
{
    return fa_secagg_masked_bytes(c->cfg.c.vector_len, c->cfg.c.ring_bits);
}

int fa_secagg_client_upload_sha256(const fa_secagg_client *c,
                                   uint8_t sha256[FA_SECAGG_SHA256_BYTES])
{
    if (!c->upload_done)
        return FA_ERR_STATE;
    memcpy(sha256, c->upload_sha, 32);
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
    return fa_sa_msg_survivors(&c->cfg, signer, c->cfg.c.model_sha256, ids, n, out, len);
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

    if ((rc = check_phase(c, CP_GOT_SHARES, CP_SURVIVORS, "SurvivorList", err)) != 0)
        return rc;
    if (!c->upload_done)
        return fa_errorf(err, FA_ERR_STATE,
                         "SurvivorList for '%s': the masked stream was not produced to its end",
                         c->id);
    m = fedagg__survivor_list__unpack(&fa_sa_pb_alloc, len, msg);
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
        if (j != c->me && fa_sa_graph_adjacent(&c->graph, (size_t)c->me, (size_t)j) &&
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
    if ((rc = fa_sa_msg_upload(c->cfg.fed, c->cfg.c.round, c->cfg.c.attempt, c->id, c->upload_sha,
                               &sm, &sm_len)) != 0 ||
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
    ss.upload_sha256.data = c->upload_sha;
    ss.upload_sha256.len = 32;
    ss.upload_signature.data = usig;
    ss.upload_signature.len = 64;
    if ((rc = fa_sa_pack(&ss.base, out, out_len)) != 0) {
        memcpy(c->in_u3, saved, sizeof(saved));
        fa_errorf(err, rc, "SignedSurvivors: out of memory");
        goto out;
    }
    c->phase = CP_SURVIVORS;
    stream_free(&c->st); /* the upload is over: drop the PRGs */
out:
    free(sm);
    fedagg__survivor_list__free_unpacked(m, &fa_sa_pb_alloc);
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

    if ((rc = check_phase(c, CP_SURVIVORS, CP_UNMASKED, "SurvivorSignatures", err)) != 0)
        return rc;
    m = fedagg__survivor_signatures__unpack(&fa_sa_pb_alloc, len, msg);
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
        int r = fa_sa_roster_find(&c->roster, s->client_id);
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
        if ((int)j != c->me && (!c->in_u2[j] || !fa_sa_graph_adjacent(&c->graph, (size_t)c->me, j)))
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
    if ((rc = fa_sa_pack(&um.base, out, out_len)) != 0) {
        fa_errorf(err, rc, "UnmaskShares: out of memory");
        goto out;
    }
    memcpy(c->revealed, kinds, sizeof(kinds));
    c->phase = CP_UNMASKED;
out:
    free(sm);
    free(rs);
    free(bp);
    free(sp);
    fedagg__survivor_signatures__free_unpacked(m, &fa_sa_pb_alloc);
    return rc;
}

/* ---- save / restore -------------------------------------------------------------- */

/* The last byte is the format version: 2 added the model digest (of the
 * config and of every peer); version 1 states are refused. */
static const uint8_t cli_magic[8] = {'F', 'A', 'S', 'A', 'C', 'L', 'I', 2};

/* Header (clear, authenticated as associated data): magic, federation,
 * round, attempt, id.  Then nonce and the sealed body. */
static int put_header(fa_wbuf *w, const fa_sa_cfg *cfg, const char *id)
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
        const fa_sa_peer *p = &c->peers[j];
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
    fa_wbuf_raw(body, c->upload_sha, 32);
}

int fa_sa_client_state_digest(const fa_secagg_client *c, uint8_t out[32])
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
    dst = fa_wbuf_reserve(&w, FA_SA_NONCE_BYTES + body.len + FA_SA_MAC_BYTES);
    if (!dst) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client save: out of memory");
        goto out;
    }
    if ((rc = state_key(key, c->sec->identity, c->cfg.fed, k->round, k->attempt, c->id)) != 0 ||
        (rc = fa_rng_fill(&c->rng, dst, FA_SA_NONCE_BYTES)) != 0) {
        fa_errorf(err, rc, "secagg client save: %s", fa_strerror(rc));
        goto out;
    }
    crypto_aead_xchacha20poly1305_ietf_encrypt(dst + FA_SA_NONCE_BYTES, NULL, body.p, body.len, w.p,
                                               head_len, NULL, dst, key);
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
    char fed[FA_SA_FED_CAP], id[FA_SA_ID_CAP];
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
                         "the model digest was added); the attempt cannot be resumed",
                         blob[sizeof(cli_magic) - 1], cli_magic[sizeof(cli_magic) - 1]);
    r.off = sizeof(cli_magic);
    fa_rbuf_str(&r, fed, sizeof(fed));
    cfg.round = fa_rbuf_u64(&r);
    cfg.attempt = fa_rbuf_u32(&r);
    fa_rbuf_str(&r, id, sizeof(id));
    if (r.failed || len - r.off < FA_SA_NONCE_BYTES + FA_SA_MAC_BYTES)
        return fa_errorf(err, FA_ERR_CORRUPT, "secagg client restore: truncated header");
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "secagg client restore: libsodium failed");
    body_len = len - r.off - FA_SA_NONCE_BYTES - FA_SA_MAC_BYTES;
    key = sodium_malloc(32);
    body = sodium_malloc(body_len ? body_len : 1);
    if (!key || !body) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg client restore: out of memory");
        goto out;
    }
    if ((rc = state_key(key, identity_sk, fed, cfg.round, cfg.attempt, id)) != 0)
        goto out;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            body, NULL, NULL, blob + r.off + FA_SA_NONCE_BYTES, len - r.off - FA_SA_NONCE_BYTES,
            blob, r.off, blob + r.off, key) != 0) {
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
    if ((rc = client_alloc(&c, &cfg, identity_sk, id, members, n_members, rng, err)) != 0)
        goto out;
    /* The federation must be the one the state was saved with. */
    v = fa_rbuf_u32(&r);
    if (v != c->roster.n)
        r.failed = 2;
    for (size_t i = 0; i < c->roster.n && !r.failed; i++) {
        char mid[FA_SA_ID_CAP];
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
            fa_sa_peer *p = &c->peers[j];
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
            if (fa_sa_roster_find(&c->roster, p->id) < 0 ||
                (j > 0 && strcmp(c->peers[j - 1].id, p->id) >= 0) || c->in_u2[j] > 1 ||
                c->in_u3[j] > 1 || c->revealed[j] > REV_S)
                r.failed = 1;
            if (strcmp(p->id, c->id) == 0)
                c->me = (int)j;
        }
        if (!r.failed && (c->me < 0 || fa_sa_graph_init(&c->graph, &c->cfg, c->peers, c->n1) != 0))
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
    fa_rbuf_copy(&r, c->upload_sha, 32);
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

/* ---- the quantised input, for tests and debugging ---------------------------- */

int fa_secagg_client_input_ring(const fa_secagg_client *c, uint32_t *out, size_t n, fa_error *err)
{
    const uint64_t len = c->cfg.c.vector_len;
    uint32_t *rnd = NULL;
    fa_prg prg;
    int rc = 0, have_prg = 0;

    if (!c->input_bound)
        return fa_errorf(err, FA_ERR_STATE, "secagg input of '%s': no input set", c->id);
    if (n != len)
        return fa_errorf(err, FA_ERR_INVAL, "secagg input of '%s': %zu elements, expected %llu",
                         c->id, n, (unsigned long long)len);
    if (c->input_kind != INPUT_F32) {
        memcpy(out, c->xq, n * sizeof(uint32_t));
        return 0;
    }
    /* The same draws as the masked stream (encode_block). */
    rnd = malloc(FA_PRG_BLOCK_WORDS * sizeof(uint32_t));
    if (!rnd) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg input: out of memory");
        goto out;
    }
    if ((rc = rounding_prg_init(c, &prg)) != 0) {
        rc = fa_errorf(err, rc, "secagg input: rounding generator failed");
        goto out;
    }
    have_prg = 1;
    for (uint64_t pos = 0; pos < len;) {
        size_t m = len - pos < FA_PRG_BLOCK_WORDS ? (size_t)(len - pos) : FA_PRG_BLOCK_WORDS;
        if ((rc = encode_block(c, &prg, pos, m, rnd, out + pos)) != 0) {
            rc = fa_errorf(err, rc, "secagg input: %s", fa_strerror(rc));
            goto out;
        }
        pos += m;
    }
out:
    if (have_prg)
        fa_prg_free(&prg);
    free(rnd);
    return rc;
}
