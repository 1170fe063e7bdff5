/* The server side of secure aggregation (Bonawitz et al., CCS 2017, Figure 4,
 * "Server" column), as a sans-I/O state machine.  See crypto/secagg.h. */
#include "crypto/secagg.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/fa_endian.h"
#include "crypto/identity.h"
#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg_internal.h"
#include "crypto/secagg_server_internal.h"
#include "crypto/shamir_internal.h"
#include "crypto/wire.h"
#include "secagg.pb-c.h"

/* ---- lifecycle ----------------------------------------------------------- */

static void free_tables(fa_secagg_server *s)
{
    free(s->ct);
    free(s->ct_have);
    if (s->rev)
        sodium_memzero(s->rev, s->n1 * s->n1 * 32);
    free(s->rev);
    free(s->rev_kind);
    s->ct = s->ct_have = s->rev = s->rev_kind = NULL;
}

int fa_secagg_server_alloc_tables(fa_secagg_server *s)
{
    size_t n = s->n1;
    s->ct = calloc(n * n, FA_SECAGG_SHARE_CT);
    s->ct_have = calloc(n * n, 1);
    s->rev = calloc(n * n, 32);
    s->rev_kind = calloc(n * n, 1);
    if (!s->ct || !s->ct_have || !s->rev || !s->rev_kind) {
        free_tables(s);
        return FA_ERR_NOMEM;
    }
    return 0;
}

static void slot_reset(struct upload_slot *sl)
{
    sl->client = -1;
    sl->bytes = sl->coords = 0;
    sl->carry_len = 0;
}

void fa_secagg_server_del(fa_secagg_server *s)
{
    if (!s)
        return;
    if (s->slots) {
        for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++) {
            fa_blake3_free(&s->slots[i].hash);
            free(s->slots[i].journal);
        }
        free(s->slots);
    }
    free_tables(s);
    free(s->sum);
    free(s->cl);
    fa_secagg_roster_free(&s->roster);
    free(s);
}

/* sum: the running sum's memory to use (owned from here on, failure or
 * not; cleared here), or NULL to allocate it. */
static int srv_alloc(fa_secagg_server **out, const fa_secagg_config *cfg,
                     const fa_secagg_member *members, size_t n_members, uint32_t *sum,
                     fa_error *err)
{
    fa_secagg_server *s;
    int rc;

    *out = NULL;
    if (sodium_init() < 0) {
        free(sum);
        return fa_errorf(err, FA_ERR_CRYPTO, "secagg server: libsodium failed to initialise");
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        free(sum);
        return fa_errorf(err, FA_ERR_NOMEM, "secagg server: out of memory");
    }
    s->sum = sum;
    rc = fa_secagg_cfg_init(&s->cfg, cfg, err);
    if (rc == 0)
        rc = fa_secagg_roster_init(&s->roster, members, n_members, err);
    if (rc != 0) {
        fa_secagg_server_del(s);
        return rc;
    }
    s->masked_bytes = fa_secagg_masked_bytes(s->cfg.c.vector_len, s->cfg.c.ring_bits);
    s->cl = calloc(s->roster.n, sizeof(*s->cl));
    if (s->sum)
        memset(s->sum, 0, (size_t)s->cfg.c.vector_len * sizeof(uint32_t));
    else
        s->sum = calloc((size_t)s->cfg.c.vector_len, sizeof(uint32_t));
    s->slots = calloc(s->cfg.c.max_uploads_in_flight, sizeof(*s->slots));
    if (!s->cl || !s->sum || !s->slots) {
        fa_secagg_server_del(s);
        return fa_errorf(err, FA_ERR_NOMEM,
                         "secagg server: out of memory for the running sum (%llu coordinates)",
                         (unsigned long long)cfg->vector_len);
    }
    for (size_t i = 0; i < s->roster.n; i++) {
        s->cl[i].slot = -1;
        s->cl[i].u1 = -1;
    }
    for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++)
        s->slots[i].client = -1;
    *out = s;
    return 0;
}

int fa_secagg_server_alloc(fa_secagg_server **out, const fa_secagg_config *cfg,
                           const fa_secagg_member *members, size_t n_members, fa_error *err)
{
    return srv_alloc(out, cfg, members, n_members, NULL, err);
}

int fa_secagg_server_new(fa_secagg_server **out, const fa_secagg_config *cfg,
                         const fa_secagg_member *members, size_t n_members, fa_error *err)
{
    *out = NULL;
    return fa_secagg_server_renew(out, cfg, members, n_members, err);
}

int fa_secagg_server_renew(fa_secagg_server **s, const fa_secagg_config *cfg,
                           const fa_secagg_member *members, size_t n_members, fa_error *err)
{
    uint32_t *sum = NULL;
    int rc;
    if (*s && cfg && (*s)->cfg.c.vector_len == cfg->vector_len) {
        sum = (*s)->sum;
        (*s)->sum = NULL;
    }
    fa_secagg_server_del(*s);
    *s = NULL;
    rc = srv_alloc(s, cfg, members, n_members, sum, err);
    if (rc == 0)
        (*s)->phase = FA_SECAGG_ADVERTISE;
    return rc;
}

void fa_secagg_server_status_get(const fa_secagg_server *s, fa_secagg_server_status *st)
{
    uint32_t flag = 0, prev = 0;
    memset(st, 0, sizeof(*st));
    st->phase = s->phase;
    st->phase_opened_ms = s->phase_opened_ms;
    st->in_flight = s->in_flight;
    switch (s->phase) {
    case FA_SECAGG_ADVERTISE: flag = CF_ADV; break;
    case FA_SECAGG_SHARES:
        flag = CF_SHARES;
        prev = CF_ADV;
        break;
    case FA_SECAGG_MASKED:
        flag = CF_UPLOADED;
        prev = CF_SHARES;
        break;
    case FA_SECAGG_CONSISTENCY:
        flag = CF_SIGNED;
        prev = CF_UPLOADED;
        break;
    case FA_SECAGG_UNMASK:
        flag = CF_UNMASKED;
        prev = CF_SIGNED;
        break;
    default: return;
    }
    for (size_t i = 0; i < s->roster.n; i++) {
        if (!prev || (s->cl[i].flags & prev))
            st->expected++;
        if (s->cl[i].flags & flag)
            st->received++;
    }
    st->expected -= st->received;
}

/* ---- common checks -------------------------------------------------------- */

/* The sender of a message: the authenticated id must name a member and match
 * the id in the message. */
int fa_secagg_server_check_sender(const fa_secagg_server *s, const char *auth_id,
                                  const char *msg_id, const char *what, int *r, fa_error *err)
{
    if (!auth_id || (*r = fa_secagg_roster_find(&s->roster, auth_id)) < 0)
        return fa_errorf(err, FA_ERR_AUTH, "%s: '%s' is not a member of federation '%s'", what,
                         auth_id ? auth_id : "(none)", s->cfg.fed);
    if (msg_id && strcmp(msg_id, auth_id) != 0)
        return fa_errorf(err, FA_ERR_AUTH,
                         "%s: message names client '%s' but the connection is authenticated as "
                         "'%s'",
                         what, msg_id, auth_id);
    return 0;
}

int fa_secagg_server_check_round(const fa_secagg_server *s, uint64_t round, uint32_t attempt,
                                 const char *what, const char *who, fa_error *err)
{
    if (round != s->cfg.c.round || attempt != s->cfg.c.attempt)
        return fa_errorf(err, FA_ERR_REPLAY,
                         "%s from '%s': for round %llu attempt %u, but this is round %llu "
                         "attempt %u",
                         what, who, (unsigned long long)round, attempt,
                         (unsigned long long)s->cfg.c.round, s->cfg.c.attempt);
    return 0;
}

int fa_secagg_server_check_phase(const fa_secagg_server *s, int phase, const char *what,
                                 fa_error *err)
{
    assert(phase >= FA_SECAGG_ADVERTISE && phase < FA_SECAGG_N_PHASES); /* the caller's constant */
    if (s->phase != phase)
        return fa_errorf(err, FA_ERR_STATE, "%s: the %s phase is not open (phase is %s)", what,
                         fa_secagg_phase_name(phase), fa_secagg_phase_name(s->phase));
    return 0;
}

/* ---- round 0: AdvertiseKeys ------------------------------------------------ */

/* Round 0 (fa_secagg_server_advertise and _readvertise): `replace` lets a
 * client that already advertised replace its advertisement. */
static int advertise(fa_secagg_server *s, const char *auth_id, const uint8_t *msg, size_t len,
                     uint64_t now_ms, int replace, fa_error *err)
{
    Fedagg__AdvertiseKeys *m = NULL;
    uint8_t *signed_msg = NULL;
    size_t signed_len = 0;
    fa_secagg_peer p;
    int r = -1, rc;

    if ((rc = fa_secagg_server_check_phase(s, FA_SECAGG_ADVERTISE, "AdvertiseKeys", err)) != 0)
        return rc;
    m = fedagg__advertise_keys__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "AdvertiseKeys from '%s': not a valid protobuf message",
                         auth_id ? auth_id : "?");
    if ((rc = fa_secagg_server_check_sender(s, auth_id, m->client_id, "AdvertiseKeys", &r, err)) !=
            0 ||
        (rc = fa_secagg_server_check_round(s, m->round, m->attempt, "AdvertiseKeys", auth_id,
                                           err)) != 0)
        goto out;
    if ((s->cl[r].flags & CF_ADV) && !replace) {
        rc = fa_errorf(err, FA_ERR_EXISTS, "AdvertiseKeys from '%s': already received", auth_id);
        goto out;
    }
    if (!(s->cl[r].flags & CF_ADV) && replace) {
        rc = fa_errorf(err, FA_ERR_STATE,
                       "AdvertiseKeys from '%s': nothing to replace (no advertisement yet)",
                       auth_id);
        goto out;
    }
    if (m->c_pk.len != 32 || m->s_pk.len != 32 || m->self_mask_commitment.len != 32 ||
        m->model_sha256.len != 32 || m->signature.len != 64) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "AdvertiseKeys from '%s': c_pk, s_pk, self_mask_commitment, model_sha256 "
                       "must be 32 bytes and signature 64 (got %zu, %zu, %zu, %zu, %zu)",
                       auth_id, m->c_pk.len, m->s_pk.len, m->self_mask_commitment.len,
                       m->model_sha256.len, m->signature.len);
        goto out;
    }
    memset(&p, 0, sizeof(p));
    snprintf(p.id, sizeof(p.id), "%s", auth_id);
    memcpy(p.c_pk, m->c_pk.data, 32);
    memcpy(p.s_pk, m->s_pk.data, 32);
    memcpy(p.b_commit, m->self_mask_commitment.data, 32);
    memcpy(p.model_sha, m->model_sha256.data, 32);
    memcpy(p.sig, m->signature.data, 64);
    if (sodium_memcmp(p.c_pk, p.s_pk, 32) == 0) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL, "AdvertiseKeys from '%s': c_pk equals s_pk", auth_id);
        goto out;
    }
    for (size_t i = 0; i < s->roster.n; i++) {
        const fa_secagg_peer *q = &s->cl[i].adv;
        if (!(s->cl[i].flags & CF_ADV) || (int)i == r)
            continue; /* (its own old keys: replaced below, never used) */
        if (!memcmp(q->c_pk, p.c_pk, 32) || !memcmp(q->s_pk, p.s_pk, 32) ||
            !memcmp(q->c_pk, p.s_pk, 32) || !memcmp(q->s_pk, p.c_pk, 32)) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "AdvertiseKeys from '%s': reuses a public key of '%s'", auth_id, q->id);
            goto out;
        }
    }
    if ((rc = fa_secagg_msg_advertise(&s->cfg, &p, &signed_msg, &signed_len)) != 0) {
        fa_errorf(err, rc, "AdvertiseKeys: out of memory");
        goto out;
    }
    if (fa_identity_verify(s->roster.m[r].pk, signed_msg, signed_len, p.sig) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "AdvertiseKeys from '%s': the signature does not verify with the "
                       "region's identity key",
                       auth_id);
        goto out;
    }
    s->cl[r].adv = p;
    s->cl[r].flags |= CF_ADV;
    if (s->phase_opened_ms == 0)
        s->phase_opened_ms = now_ms;
out:
    free(signed_msg);
    fedagg__advertise_keys__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

int fa_secagg_server_advertise(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                               size_t len, uint64_t now_ms, fa_error *err)
{
    return advertise(s, auth_id, msg, len, now_ms, 0, err);
}

int fa_secagg_server_readvertise(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                 size_t len, uint64_t now_ms, fa_error *err)
{
    return advertise(s, auth_id, msg, len, now_ms, 1, err);
}

int fa_secagg_server_peer_list(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                               fa_error *err)
{
    Fedagg__PeerList pl = FEDAGG__PEER_LIST__INIT;
    Fedagg__AdvertiseKeys *ads, **ptrs;
    int rc;

    if (s->phase <= FA_SECAGG_ADVERTISE || s->phase == FA_SECAGG_FAILED)
        return fa_errorf(err, FA_ERR_STATE, "PeerList: the advertise phase is not closed");
    ads = calloc(s->n1, sizeof(*ads));
    ptrs = calloc(s->n1, sizeof(*ptrs));
    if (!ads || !ptrs) {
        free(ads);
        free(ptrs);
        return fa_errorf(err, FA_ERR_NOMEM, "PeerList: out of memory");
    }
    for (size_t i = 0; i < s->n1; i++) {
        const fa_secagg_peer *p = &s->cl[s->u1[i]].adv;
        Fedagg__AdvertiseKeys init = FEDAGG__ADVERTISE_KEYS__INIT;
        ads[i] = init;
        ads[i].round = s->cfg.c.round;
        ads[i].attempt = s->cfg.c.attempt;
        ads[i].client_id = (char *)p->id;
        ads[i].c_pk.data = (uint8_t *)p->c_pk;
        ads[i].c_pk.len = 32;
        ads[i].s_pk.data = (uint8_t *)p->s_pk;
        ads[i].s_pk.len = 32;
        ads[i].signature.data = (uint8_t *)p->sig;
        ads[i].signature.len = 64;
        ads[i].self_mask_commitment.data = (uint8_t *)p->b_commit;
        ads[i].self_mask_commitment.len = 32;
        ads[i].model_sha256.data = (uint8_t *)p->model_sha;
        ads[i].model_sha256.len = 32;
        ptrs[i] = &ads[i];
    }
    pl.round = s->cfg.c.round;
    pl.attempt = s->cfg.c.attempt;
    pl.threshold = s->cfg.c.threshold;
    pl.neighbours = s->cfg.c.neighbours;
    pl.ring_bits = s->cfg.c.ring_bits;
    pl.vector_len = s->cfg.c.vector_len;
    pl.n_peers = s->n1;
    pl.peers = ptrs;
    rc = fa_secagg_pack(&pl.base, out, out_len);
    free(ads);
    free(ptrs);
    return rc == 0 ? 0 : fa_errorf(err, rc, "PeerList: out of memory");
}

/* ---- round 1: ShareKeys ---------------------------------------------------- */

int fa_secagg_server_share_keys(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                size_t len, uint64_t now_ms, fa_error *err)
{
    Fedagg__ShareKeys *m = NULL;
    uint8_t seen[FA_SECAGG_MAX_CLIENTS] = {0};
    size_t expected = 0;
    int r = -1, rc, from;

    if ((rc = fa_secagg_server_check_phase(s, FA_SECAGG_SHARES, "ShareKeys", err)) != 0)
        return rc;
    m = fedagg__share_keys__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "ShareKeys from '%s': not a valid protobuf message",
                         auth_id ? auth_id : "?");
    if ((rc = fa_secagg_server_check_sender(s, auth_id, m->client_id, "ShareKeys", &r, err)) != 0 ||
        (rc = fa_secagg_server_check_round(s, m->round, m->attempt, "ShareKeys", auth_id, err)) !=
            0)
        goto out;
    if (!u1_member(s, r)) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL, "ShareKeys from '%s': not in this round's PeerList",
                       auth_id);
        goto out;
    }
    if (s->cl[r].flags & CF_SHARES) {
        rc = fa_errorf(err, FA_ERR_EXISTS, "ShareKeys from '%s': already received", auth_id);
        goto out;
    }
    from = s->cl[r].u1;
    for (size_t v = 0; v < s->n1; v++)
        expected += fa_secagg_graph_adjacent(&s->graph, (size_t)from, v);
    if (m->n_shares != expected) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "ShareKeys from '%s': %zu ciphertexts, expected one for each of the %zu "
                       "other clients",
                       auth_id, m->n_shares, expected);
        goto out;
    }
    for (size_t i = 0; i < m->n_shares; i++) {
        const Fedagg__EncryptedShare *e = m->shares[i];
        int to = fa_secagg_roster_find(&s->roster, e->to);
        if (strcmp(e->from, auth_id) != 0) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL, "ShareKeys from '%s': share %zu is from '%s'",
                           auth_id, i, e->from);
            goto out;
        }
        if (to < 0 || !u1_member(s, to) ||
            !fa_secagg_graph_adjacent(&s->graph, (size_t)from, (size_t)s->cl[to].u1)) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "ShareKeys from '%s': share %zu is for '%s', not one of its peers",
                           auth_id, i, e->to);
            goto out;
        }
        if (seen[s->cl[to].u1]++) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL, "ShareKeys from '%s': two shares for '%s'",
                           auth_id, e->to);
            goto out;
        }
        if (e->ciphertext.len != FA_SECAGG_SHARE_CT) {
            rc = fa_errorf(err, FA_ERR_PROTOCOL,
                           "ShareKeys from '%s': ciphertext for '%s' has %zu bytes, not %d",
                           auth_id, e->to, e->ciphertext.len, FA_SECAGG_SHARE_CT);
            goto out;
        }
    }
    for (size_t i = 0; i < m->n_shares; i++) {
        const Fedagg__EncryptedShare *e = m->shares[i];
        size_t to = (size_t)s->cl[fa_secagg_roster_find(&s->roster, e->to)].u1;
        size_t cell = (size_t)from * s->n1 + to;
        memcpy(s->ct + cell * FA_SECAGG_SHARE_CT, e->ciphertext.data, FA_SECAGG_SHARE_CT);
        s->ct_have[cell] = 1;
    }
    s->cl[r].flags |= CF_SHARES;
out:
    fedagg__share_keys__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

int fa_secagg_server_shares_for(const fa_secagg_server *s, const char *client_id, uint8_t **out,
                                size_t *out_len, fa_error *err)
{
    Fedagg__SharesForYou sf = FEDAGG__SHARES_FOR_YOU__INIT;
    Fedagg__EncryptedShare *es, **ptrs;
    size_t n = 0, to;
    int r = -1, rc;

    if (s->phase <= FA_SECAGG_SHARES || s->phase == FA_SECAGG_FAILED)
        return fa_errorf(err, FA_ERR_STATE, "SharesForYou: the shares phase is not closed");
    r = client_id ? fa_secagg_roster_find(&s->roster, client_id) : -1;
    if (r < 0 || !u2_member(s, r))
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "SharesForYou: '%s' did not send its shares in round %llu attempt %u",
                         client_id ? client_id : "(none)", (unsigned long long)s->cfg.c.round,
                         s->cfg.c.attempt);
    to = (size_t)s->cl[r].u1;
    es = calloc(s->n1, sizeof(*es));
    ptrs = calloc(s->n1, sizeof(*ptrs));
    if (!es || !ptrs) {
        free(es);
        free(ptrs);
        return fa_errorf(err, FA_ERR_NOMEM, "SharesForYou: out of memory");
    }
    for (size_t from = 0; from < s->n1; from++) {
        size_t cell = from * s->n1 + to;
        Fedagg__EncryptedShare init = FEDAGG__ENCRYPTED_SHARE__INIT;
        if (!u2_member(s, s->u1[from]) || !s->ct_have[cell])
            continue;
        es[n] = init;
        es[n].from = s->cl[s->u1[from]].adv.id;
        es[n].to = s->cl[r].adv.id;
        es[n].ciphertext.data = s->ct + cell * FA_SECAGG_SHARE_CT;
        es[n].ciphertext.len = FA_SECAGG_SHARE_CT;
        ptrs[n] = &es[n];
        n++;
    }
    sf.round = s->cfg.c.round;
    sf.attempt = s->cfg.c.attempt;
    sf.n_shares = n;
    sf.shares = ptrs;
    rc = fa_secagg_pack(&sf.base, out, out_len);
    free(es);
    free(ptrs);
    return rc == 0 ? 0 : fa_errorf(err, rc, "SharesForYou: out of memory");
}

/* ---- round 2: masked uploads ----------------------------------------------- */

static int upload_client(fa_secagg_server *s, const char *auth_id, const char *what, int *r,
                         fa_error *err)
{
    int rc;
    if ((rc = fa_secagg_server_check_phase(s, FA_SECAGG_MASKED, what, err)) != 0)
        return rc;
    return fa_secagg_server_check_sender(s, auth_id, NULL, what, r, err);
}

int fa_secagg_server_masked_begin(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                  fa_error *err)
{
    struct upload_slot *sl = NULL;
    int r = -1, rc;

    if ((rc = upload_client(s, auth_id, "masked upload", &r, err)) != 0)
        return rc;
    if (!u2_member(s, r))
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "masked upload from '%s': it sent no shares in round 1, so its masks "
                         "could not be removed",
                         auth_id);
    if (s->cl[r].flags & CF_UPLOADED)
        return fa_errorf(err, FA_ERR_EXISTS, "masked upload from '%s': already received", auth_id);
    if (s->cl[r].slot >= 0)
        return fa_errorf(err, FA_ERR_EXISTS, "masked upload from '%s': one is already in flight",
                         auth_id);
    for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++)
        if (s->slots[i].client < 0) {
            sl = &s->slots[i];
            break;
        }
    if (!sl)
        return fa_errorf(err, FA_ERR_AGAIN,
                         "masked upload from '%s': %u uploads in flight already; retry after one "
                         "ends",
                         auth_id, s->in_flight);
    if (!s->ext_journal && !sl->journal &&
        !(sl->journal = malloc(s->masked_bytes ? s->masked_bytes : 1)))
        return fa_errorf(err, FA_ERR_NOMEM,
                         "masked upload: out of memory for the journal (%llu bytes)",
                         (unsigned long long)s->masked_bytes);
    if ((rc = fa_blake3_init(&sl->hash)) != 0)
        return fa_errorf(err, rc, "masked upload: out of memory for its hash");
    sl->client = r;
    sl->bytes = sl->coords = 0;
    sl->carry_len = 0;
    s->cl[r].slot = (int)(sl - s->slots);
    s->in_flight++;
    return 0;
}

int fa_secagg_server_masked_chunk(fa_secagg_server *s, const char *auth_id, const uint8_t *data,
                                  size_t len, uint64_t now_ms, fa_error *err)
{
    const unsigned k = s->cfg.c.ring_bits;
    const uint64_t full_groups = s->cfg.c.vector_len / 8;
    struct upload_slot *sl;
    int r = -1, rc;

    if ((rc = upload_client(s, auth_id, "masked chunk", &r, err)) != 0)
        return rc;
    if (s->cl[r].slot < 0)
        return fa_errorf(err, FA_ERR_STATE, "masked chunk from '%s': no upload in flight", auth_id);
    sl = &s->slots[s->cl[r].slot];
    if (len > s->masked_bytes - sl->bytes)
        return fa_errorf(err, FA_ERR_TOOBIG,
                         "masked chunk from '%s': %zu bytes after %llu, but the upload has %llu "
                         "(ring bits %u, length %llu)",
                         auth_id, len, (unsigned long long)sl->bytes,
                         (unsigned long long)s->masked_bytes, k,
                         (unsigned long long)s->cfg.c.vector_len);
    if (len == 0)
        return 0;
    if (s->ext_journal) {
        rc = s->journal.write(s->journal.ctx, (uint32_t)s->cl[r].slot, sl->bytes, data, len, err);
        if (rc != 0)
            return fa_error_prefix(err, rc, "masked chunk from '%s': journal", auth_id);
    }
    if ((rc = fa_blake3_update(&sl->hash, data, len)) != 0)
        return fa_errorf(err, rc, "masked chunk: BLAKE3 failed");
    if (!s->ext_journal)
        memcpy(sl->journal + sl->bytes, data, len);
    sl->bytes += len;
    sl->last = data[len - 1];
    s->sum_gen++;
    /* Complete the group begun by an earlier chunk. */
    if (sl->carry_len > 0 && sl->coords / 8 < full_groups) {
        size_t need = k - sl->carry_len, take = len < need ? len : need;
        memcpy(sl->carry + sl->carry_len, data, take);
        sl->carry_len += take;
        data += take;
        len -= take;
        if (sl->carry_len == k) {
            fa_ring_unpack_add(s->sum + sl->coords, sl->carry, 8, k, 1);
            sl->coords += 8;
            sl->carry_len = 0;
        }
    }
    /* Whole groups straight from the chunk. */
    if (sl->carry_len == 0 && sl->coords / 8 < full_groups) {
        uint64_t groups = len / k, left = full_groups - sl->coords / 8;
        if (groups > left)
            groups = left;
        fa_ring_unpack_add(s->sum + sl->coords, data, (size_t)groups * 8, k, 1);
        sl->coords += groups * 8;
        data += groups * k;
        len -= (size_t)groups * k;
    }
    /* The rest waits for the next chunk (or is the partial last group):
     * less than a group, since the length was bounded by the upload's. */
    assert(sl->carry_len + len < k || (sl->coords / 8 == full_groups && sl->carry_len + len <= k));
    assert(sl->coords <= s->cfg.c.vector_len);
    memcpy(sl->carry + sl->carry_len, data, len);
    sl->carry_len += len;
    return 0;
}

static void slot_release(fa_secagg_server *s, struct upload_slot *sl)
{
    assert(s->in_flight > 0 && sl->client >= 0 && (size_t)sl->client < s->roster.n);
    assert(s->cl[sl->client].slot == (int)(sl - s->slots));
    if (s->ext_journal)
        s->journal.clear(s->journal.ctx, (uint32_t)(sl - s->slots));
    s->cl[sl->client].slot = -1;
    slot_reset(sl);
    s->in_flight--;
}

int fa_secagg_server_masked_end(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                fa_error *err)
{
    const unsigned k = s->cfg.c.ring_bits;
    const uint64_t n = s->cfg.c.vector_len;
    struct upload_slot *sl;
    unsigned pad;
    int r = -1, rc;

    if ((rc = upload_client(s, auth_id, "masked upload end", &r, err)) != 0)
        return rc;
    if (s->cl[r].slot < 0)
        return fa_errorf(err, FA_ERR_STATE, "masked upload end from '%s': no upload in flight",
                         auth_id);
    sl = &s->slots[s->cl[r].slot];
    if (sl->bytes != s->masked_bytes)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "masked upload from '%s' ended after %llu of %llu bytes", auth_id,
                         (unsigned long long)sl->bytes, (unsigned long long)s->masked_bytes);
    pad = (unsigned)((n * k) % 8);
    if (pad && (sl->last >> pad) != 0)
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "masked upload from '%s': the padding bits of the last byte are not zero",
                         auth_id);
    /* every whole group is in the sum; the carry holds exactly the tail */
    assert(sl->coords == n / 8 * 8);
    if (n % 8)
        fa_ring_unpack_add(s->sum + sl->coords, sl->carry, (size_t)(n % 8), k, 1);
    s->sum_gen++;
    if ((rc = fa_blake3_final(&sl->hash, s->cl[r].upload_digest)) != 0) {
        if (n % 8) /* undo the tail: the upload stays in flight */
            fa_ring_unpack_add(s->sum + sl->coords, sl->carry, (size_t)(n % 8), k, -1);
        return fa_errorf(err, rc, "masked upload end: BLAKE3 failed");
    }
    s->cl[r].upload_alg = FA_SECAGG_UPLOAD_BLAKE3;
    s->cl[r].flags |= CF_UPLOADED;
    slot_release(s, sl);
    return 0;
}

/* Coordinates subtracted per read of a journal kept by the caller (a
 * multiple of 8: whole groups of k bytes). */
#define JOURNAL_READ_COORDS ((uint64_t)1 << 16)

/* Subtracts exactly the groups of sl's upload that went into the sum, and
 * frees the slot.  When the caller's journal cannot be read back the sum is
 * spoilt: the round fails (FA_SECAGG_FAILED) and the error is returned. */
static int upload_remove(fa_secagg_server *s, struct upload_slot *sl, fa_error *err)
{
    const unsigned k = s->cfg.c.ring_bits;
    uint8_t *buf = NULL;
    int rc = 0;

    s->sum_gen++;
    if (!s->ext_journal) {
        fa_ring_unpack_add(s->sum, sl->journal, (size_t)sl->coords, k, -1);
        slot_release(s, sl);
        return 0;
    }
    if (sl->coords > 0 && !(buf = malloc((size_t)(JOURNAL_READ_COORDS / 8 * k))))
        rc = fa_errorf(err, FA_ERR_NOMEM, "masked upload removal: out of memory");
    for (uint64_t c = 0; rc == 0 && c < sl->coords;) {
        uint64_t m = sl->coords - c < JOURNAL_READ_COORDS ? sl->coords - c : JOURNAL_READ_COORDS;
        rc = s->journal.read(s->journal.ctx, (uint32_t)(sl - s->slots), c / 8 * k, buf,
                             (size_t)(m / 8 * k), err);
        if (rc == 0)
            fa_ring_unpack_add(s->sum + c, buf, (size_t)m, k, -1);
        c += m;
    }
    free(buf);
    slot_release(s, sl);
    if (rc != 0) {
        s->phase = FA_SECAGG_FAILED;
        return fa_error_prefix(err, rc,
                               "secagg round %llu attempt %u: a broken-off upload could not be "
                               "removed from the sum, which is spoilt",
                               (unsigned long long)s->cfg.c.round, s->cfg.c.attempt);
    }
    return 0;
}

int fa_secagg_server_set_journal(fa_secagg_server *s, const fa_secagg_journal *j, fa_error *err)
{
    if (s->in_flight)
        return fa_errorf(err, FA_ERR_STATE,
                         "secagg: the journal storage cannot change with %u uploads in flight",
                         s->in_flight);
    if (j && (!j->write || !j->read || !j->clear))
        return fa_errorf(err, FA_ERR_INVAL, "secagg: a journal needs write, read and clear");
    for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++) {
        free(s->slots[i].journal);
        s->slots[i].journal = NULL;
    }
    s->ext_journal = j != NULL;
    if (j)
        s->journal = *j;
    return 0;
}

int fa_secagg_server_masked_abort(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                  fa_error *err)
{
    int r = -1, rc;
    if ((rc = upload_client(s, auth_id, "masked upload abort", &r, err)) != 0)
        return rc;
    if (s->cl[r].slot < 0)
        return fa_errorf(err, FA_ERR_NOTFOUND, "masked upload abort for '%s': no upload in flight",
                         auth_id);
    return upload_remove(s, &s->slots[s->cl[r].slot], err);
}

/* ---- round 3: consistency check ---------------------------------------------- */

/* What survivor r (a roster index) signs over U3: with the model it
 * advertised. */
static int survivors_signed_msg(const fa_secagg_server *s, int r, uint8_t **out, size_t *len)
{
    char *ids[FA_SECAGG_MAX_CLIENTS];
    for (size_t i = 0; i < s->n3; i++)
        ids[i] = s->roster.m[s->surv[i]].id;
    return fa_secagg_msg_survivors(&s->cfg, s->roster.m[r].id, s->cl[r].adv.model_sha, ids, s->n3,
                                   out, len);
}

int fa_secagg_server_survivor_list(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                                   fa_error *err)
{
    Fedagg__SurvivorList sl = FEDAGG__SURVIVOR_LIST__INIT;
    char *ids[FA_SECAGG_MAX_CLIENTS];
    int rc;
    if (s->phase <= FA_SECAGG_MASKED || s->phase == FA_SECAGG_FAILED)
        return fa_errorf(err, FA_ERR_STATE, "SurvivorList: the masked phase is not closed");
    for (size_t i = 0; i < s->n3; i++)
        ids[i] = s->roster.m[s->surv[i]].id;
    sl.round = s->cfg.c.round;
    sl.attempt = s->cfg.c.attempt;
    sl.n_survivors = s->n3;
    sl.survivors = ids;
    rc = fa_secagg_pack(&sl.base, out, out_len);
    return rc == 0 ? 0 : fa_errorf(err, rc, "SurvivorList: out of memory");
}

int fa_secagg_server_consistency(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                 size_t len, uint64_t now_ms, fa_error *err)
{
    Fedagg__SignedSurvivors *m = NULL;
    uint8_t *sm = NULL;
    size_t sm_len = 0;
    int r = -1, rc;

    if ((rc = fa_secagg_server_check_phase(s, FA_SECAGG_CONSISTENCY, "SignedSurvivors", err)) != 0)
        return rc;
    m = fedagg__signed_survivors__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE,
                         "SignedSurvivors from '%s': not a valid protobuf message",
                         auth_id ? auth_id : "?");
    if ((rc = fa_secagg_server_check_sender(s, auth_id, m->client_id, "SignedSurvivors", &r,
                                            err)) != 0 ||
        (rc = fa_secagg_server_check_round(s, m->round, m->attempt, "SignedSurvivors", auth_id,
                                           err)) != 0)
        goto out;
    if (!u3_member(s, r)) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "SignedSurvivors from '%s': not a survivor (its upload is not in the sum)",
                       auth_id);
        goto out;
    }
    if (s->cl[r].flags & CF_SIGNED) {
        rc = fa_errorf(err, FA_ERR_EXISTS, "SignedSurvivors from '%s': already received", auth_id);
        goto out;
    }
    if (m->signature.len != 64 || m->upload_digest.len != 32 || m->upload_signature.len != 64) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "SignedSurvivors from '%s': signature 64, upload_digest 32 and "
                       "upload_signature 64 bytes expected (got %zu, %zu, %zu)",
                       auth_id, m->signature.len, m->upload_digest.len, m->upload_signature.len);
        goto out;
    }
    if (memcmp(m->upload_digest.data, s->cl[r].upload_digest, 32) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "SignedSurvivors from '%s': its upload digest differs from the %s of the "
                       "bytes the aggregator received (a region older than secagg.proto "
                       "version 4 sends a SHA-256)",
                       auth_id,
                       s->cl[r].upload_alg == FA_SECAGG_UPLOAD_BLAKE3 ? "BLAKE3" : "SHA-256");
        goto out;
    }
    if ((rc = survivors_signed_msg(s, r, &sm, &sm_len)) != 0) {
        fa_errorf(err, rc, "SignedSurvivors: out of memory");
        goto out;
    }
    if (fa_identity_verify(s->roster.m[r].pk, sm, sm_len, m->signature.data) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "SignedSurvivors from '%s': the signature over the survivor set does not "
                       "verify",
                       auth_id);
        goto out;
    }
    if (fa_secagg_commitment_verify(s->cfg.fed, s->cfg.c.round, s->cfg.c.attempt, auth_id,
                                    s->cl[r].upload_alg, s->cl[r].upload_digest,
                                    m->upload_signature.data, s->roster.m[r].pk) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "SignedSurvivors from '%s': the upload commitment signature does not "
                       "verify",
                       auth_id);
        goto out;
    }
    memcpy(s->cl[r].surv_sig, m->signature.data, 64);
    memcpy(s->cl[r].upload_sig, m->upload_signature.data, 64);
    s->cl[r].flags |= CF_SIGNED;
out:
    free(sm);
    fedagg__signed_survivors__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

int fa_secagg_server_survivor_signatures(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                                         fa_error *err)
{
    Fedagg__SurvivorSignatures ss = FEDAGG__SURVIVOR_SIGNATURES__INIT;
    Fedagg__SignedSurvivors *sg, **ptrs;
    size_t n = 0;
    int rc;

    if (s->phase <= FA_SECAGG_CONSISTENCY || s->phase == FA_SECAGG_FAILED)
        return fa_errorf(err, FA_ERR_STATE,
                         "SurvivorSignatures: the consistency phase is not closed");
    sg = calloc(s->n3 ? s->n3 : 1, sizeof(*sg));
    ptrs = calloc(s->n3 ? s->n3 : 1, sizeof(*ptrs));
    if (!sg || !ptrs) {
        free(sg);
        free(ptrs);
        return fa_errorf(err, FA_ERR_NOMEM, "SurvivorSignatures: out of memory");
    }
    for (size_t i = 0; i < s->n3; i++) {
        const struct srv_client *c = &s->cl[s->surv[i]];
        Fedagg__SignedSurvivors init = FEDAGG__SIGNED_SURVIVORS__INIT;
        if (!u4_member(s, s->surv[i]))
            continue;
        sg[n] = init;
        sg[n].round = s->cfg.c.round;
        sg[n].attempt = s->cfg.c.attempt;
        sg[n].client_id = (char *)c->adv.id;
        sg[n].signature.data = (uint8_t *)c->surv_sig;
        sg[n].signature.len = 64;
        sg[n].upload_digest.data = (uint8_t *)c->upload_digest;
        sg[n].upload_digest.len = 32;
        sg[n].upload_signature.data = (uint8_t *)c->upload_sig;
        sg[n].upload_signature.len = 64;
        ptrs[n] = &sg[n];
        n++;
    }
    ss.round = s->cfg.c.round;
    ss.attempt = s->cfg.c.attempt;
    ss.n_signatures = n;
    ss.signatures = ptrs;
    rc = fa_secagg_pack(&ss.base, out, out_len);
    free(sg);
    free(ptrs);
    return rc == 0 ? 0 : fa_errorf(err, rc, "SurvivorSignatures: out of memory");
}

/* ---- phase closes -------------------------------------------------------- */

static size_t count_flag(const fa_secagg_server *s, uint32_t flag)
{
    size_t n = 0;
    for (size_t i = 0; i < s->roster.n; i++)
        n += (s->cl[i].flags & flag) != 0;
    return n;
}

static int threshold_error(const fa_secagg_server *s, size_t have, fa_error *err)
{
    return fa_errorf(err, FA_ERR_THRESHOLD,
                     "secagg round %llu attempt %u: only %zu clients in the %s phase, threshold "
                     "is %u",
                     (unsigned long long)s->cfg.c.round, s->cfg.c.attempt, have,
                     fa_secagg_phase_name(s->phase), s->cfg.c.threshold);
}

void fa_secagg_server_build_survivors(fa_secagg_server *s)
{
    assert(s->phase > FA_SECAGG_MASKED && s->phase <= FA_SECAGG_DONE);
    s->n3 = s->ndrop = 0;
    for (size_t i = 0; i < s->roster.n; i++) {
        if (!u1_member(s, (int)i))
            continue;
        if (s->cl[i].flags & CF_UPLOADED)
            s->surv[s->n3++] = (int)i;
        else
            s->drop[s->ndrop++] = (int)i;
    }
    /* U1 splits into the survivors U3 and the dropouts */
    assert(s->n3 + s->ndrop == s->n1);
}

/* U1 from the advertisements; the graph; the ciphertext and share tables. */
int fa_secagg_server_build_u1(fa_secagg_server *s)
{
    fa_secagg_peer peers[FA_SECAGG_MAX_CLIENTS];
    s->n1 = 0;
    for (size_t i = 0; i < s->roster.n; i++) {
        s->cl[i].u1 = -1;
        if (s->cl[i].flags & CF_ADV) {
            s->cl[i].u1 = (int)s->n1;
            peers[s->n1] = s->cl[i].adv;
            s->u1[s->n1++] = (int)i;
        }
    }
    assert(s->n1 <= s->roster.n);
    if (s->n1 == 0)
        return FA_ERR_THRESHOLD;
    return fa_secagg_graph_init(&s->graph, &s->cfg, peers, s->n1);
}

int fa_secagg_server_close(fa_secagg_server *s, uint64_t now_ms, fa_error *err)
{
    static const uint32_t flag_of[] = {CF_ADV, CF_SHARES, CF_UPLOADED, CF_SIGNED, CF_UNMASKED};
    size_t have;
    int rc;

    _Static_assert(sizeof(flag_of) / sizeof(flag_of[0]) == FA_SECAGG_N_PHASES,
                   "one flag per phase");
    if (s->phase >= FA_SECAGG_DONE)
        return fa_errorf(err, FA_ERR_STATE, "secagg close: the round is %s",
                         fa_secagg_phase_name(s->phase));
    assert(s->phase >= FA_SECAGG_ADVERTISE);
    have = count_flag(s, flag_of[s->phase]);
    if (have < s->cfg.c.threshold)
        return threshold_error(s, have, err);
    switch (s->phase) {
    case FA_SECAGG_ADVERTISE:
        if ((rc = fa_secagg_server_build_u1(s)) != 0 ||
            (rc = fa_secagg_server_alloc_tables(s)) != 0) {
            s->n1 = 0;
            return fa_errorf(err, rc, "secagg close: %s", fa_strerror(rc));
        }
        break;
    case FA_SECAGG_MASKED:
        for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++)
            if (s->slots[i].client >= 0 && (rc = upload_remove(s, &s->slots[i], err)) != 0)
                return rc;
        /* The journals are not needed any more. */
        for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++) {
            free(s->slots[i].journal);
            s->slots[i].journal = NULL;
        }
        s->masked_gen = s->sum_gen;
        break;
    case FA_SECAGG_UNMASK:
        if ((rc = fa_secagg_server_close_unmask(s, err)) != 0)
            return rc;
        break;
    default: break;
    }
    /* the phases close in order, one at a time */
    assert(s->phase < FA_SECAGG_DONE);
    s->phase++;
    s->phase_opened_ms = now_ms;
    if (s->phase == FA_SECAGG_CONSISTENCY)
        fa_secagg_server_build_survivors(s);
    return 0;
}

/* ---- results --------------------------------------------------------------- */

int fa_secagg_server_result_ring(const fa_secagg_server *s, uint32_t *out, size_t n, fa_error *err)
{
    const uint32_t mask = fa_ring_mask(s->cfg.c.ring_bits);
    if (s->phase != FA_SECAGG_DONE)
        return fa_errorf(err, FA_ERR_STATE, "secagg result: the round is in phase %s",
                         fa_secagg_phase_name(s->phase));
    if (s->decoded)
        return fa_errorf(err, FA_ERR_STATE, "secagg result: the sum was decoded in place");
    if (n != s->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg result: %zu coordinates asked, the sum has %llu", n,
                         (unsigned long long)s->cfg.c.vector_len);
    for (size_t i = 0; i < n; i++)
        out[i] = s->sum[i] & mask;
    return 0;
}

int fa_secagg_server_result_weight(const fa_secagg_server *s, double *weight_sum, fa_error *err)
{
    const uint64_t d = s->cfg.c.vector_len - 1;
    const double qmax = (double)((1u << (s->cfg.c.quant.bits - 1)) - 1);
    double w;

    if (s->phase != FA_SECAGG_DONE)
        return fa_errorf(err, FA_ERR_STATE, "secagg result: the round is in phase %s",
                         fa_secagg_phase_name(s->phase));
    w = (double)fa_ring_signed(s->sum[d], s->cfg.c.ring_bits) /
        qmax; /* kept by an in-place decode */
    if (weight_sum)
        *weight_sum = w;
    if (!(w > 0))
        return fa_errorf(err, FA_ERR_RANGE,
                         "secagg result: the survivors' weights sum to %g; nothing to average", w);
    return 0;
}

/* out[i] = sum[i] (k-bit signed) * inv, computed in double as result_f32
 * always has; blocks of a fixed count so that the loop vectorises. */
static void decode_f32(float *restrict out, const uint32_t *restrict sum, size_t n, unsigned k,
                       double inv)
{
    enum { B = 16 };
    const unsigned sh = 32 - k;
    size_t i = 0;
    for (; i + B <= n; i += B)
        for (size_t j = i; j < i + B; j++)
            out[j] = (float)((double)((int32_t)(sum[j] << sh) >> sh) * inv);
    for (; i < n; i++)
        out[i] = (float)((double)fa_ring_signed(sum[i], k) * inv);
}

static double decode_factor(const fa_secagg_server *s, double w)
{
    const double qmax = (double)((1u << (s->cfg.c.quant.bits - 1)) - 1);
    return 1.0 / (qmax / s->cfg.c.quant.clip_value * w);
}

int fa_secagg_server_result_f32_range(const fa_secagg_server *s, uint64_t off, float *out, size_t n,
                                      fa_error *err)
{
    double w = 0; /* set when rc is 0; gcc -O3 cannot see it through fa_errorf */
    int rc;

    if ((rc = fa_secagg_server_result_weight(s, &w, err)) != 0)
        return rc;
    if (off > s->cfg.c.vector_len - 1 || n > s->cfg.c.vector_len - 1 - off)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg result: floats [%llu, %llu) asked, the sum has %llu (the last "
                         "coordinate is the weight)",
                         (unsigned long long)off, (unsigned long long)(off + n),
                         (unsigned long long)(s->cfg.c.vector_len - 1));
    if (s->decoded)
        memcpy(out, s->sum + off, n * sizeof(float));
    else
        decode_f32(out, s->sum + off, n, s->cfg.c.ring_bits, decode_factor(s, w));
    return 0;
}

int fa_secagg_server_result_f32(const fa_secagg_server *s, float *out, size_t d, double *weight_sum,
                                fa_error *err)
{
    int rc;

    if (s->phase == FA_SECAGG_DONE && d + 1 != s->cfg.c.vector_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "secagg result: %zu floats asked, the sum has %llu coordinates (the last "
                         "is the weight)",
                         d, (unsigned long long)s->cfg.c.vector_len);
    if ((rc = fa_secagg_server_result_weight(s, weight_sum, err)) != 0)
        return rc;
    return fa_secagg_server_result_f32_range(s, 0, out, d, err);
}

int fa_secagg_server_decode_in_place(fa_secagg_server *s, double *weight_sum, fa_error *err)
{
    /* Through a chunk of floats (the words and the floats never alias). */
    enum { CHUNK = 4096 };
    const uint64_t d = s->cfg.c.vector_len - 1;
    float buf[CHUNK];
    double w, inv;
    int rc;

    if ((rc = fa_secagg_server_result_weight(s, &w, err)) != 0)
        return rc;
    if (weight_sum)
        *weight_sum = w;
    if (s->decoded)
        return 0;
    inv = decode_factor(s, w);
    for (uint64_t i = 0; i < d; i += CHUNK) {
        size_t m = d - i < CHUNK ? (size_t)(d - i) : CHUNK;
        decode_f32(buf, s->sum + i, m, s->cfg.c.ring_bits, inv);
        memcpy(s->sum + i, buf, m * sizeof(float));
    }
    s->decoded = 1;
    s->sum_gen++;
    return 0;
}

size_t fa_secagg_server_survivor_count(const fa_secagg_server *s)
{
    return s->phase > FA_SECAGG_MASKED ? s->n3 : 0;
}

const char *fa_secagg_server_survivor(const fa_secagg_server *s, size_t i)
{
    return i < fa_secagg_server_survivor_count(s) ? s->roster.m[s->surv[i]].id : NULL;
}

size_t fa_secagg_server_dropout_count(const fa_secagg_server *s)
{
    return s->phase > FA_SECAGG_MASKED ? s->ndrop : 0;
}

const char *fa_secagg_server_dropout(const fa_secagg_server *s, size_t i)
{
    return i < fa_secagg_server_dropout_count(s) ? s->roster.m[s->drop[i]].id : NULL;
}

int fa_secagg_server_commitment(const fa_secagg_server *s, size_t i, const char **client_id,
                                int *alg, uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                                uint8_t signature[FA_SECAGG_SIGNATURE_BYTES], int *signed_)
{
    const struct srv_client *c;
    if (i >= fa_secagg_server_survivor_count(s))
        return FA_ERR_NOTFOUND;
    c = &s->cl[s->surv[i]];
    if (client_id)
        *client_id = s->roster.m[s->surv[i]].id;
    *alg = c->upload_alg;
    memcpy(digest, c->upload_digest, 32);
    if (c->flags & CF_SIGNED) {
        memcpy(signature, c->upload_sig, 64);
        *signed_ = 1;
    } else {
        memset(signature, 0, 64);
        *signed_ = 0;
    }
    return 0;
}

uint64_t fa_secagg_server_sum_generation(const fa_secagg_server *s)
{
    return s->sum_gen;
}

const uint32_t *fa_secagg_server_sum_words(const fa_secagg_server *s)
{
    return s->sum;
}
