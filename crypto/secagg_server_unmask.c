/* The server's round 4 (Bonawitz et al., CCS 2017, Figure 4, "Unmasking"):
 * the revealed shares collected, b_u reconstructed for every survivor and
 * s_sk_v for every dropout, and their masks removed from the running sum in
 * parallel slices: the hot path of closing a round.  See crypto/secagg.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg_server_internal.h"
#include "crypto/shamir_internal.h"
#include "secagg.pb-c.h"

/* ---- round 4: unmasking ---------------------------------------------------- */

/* What sender i (U1 index) must reveal for owner j: a b share for every
 * survivor of its closed neighbourhood, an s_sk share for every other
 * neighbour of U2 that dropped out of U3. */
static int expected_kind(const fa_secagg_server *s, size_t i, size_t j)
{
    int rj = s->u1[j];
    if (i != j && !fa_secagg_graph_adjacent(&s->graph, i, j))
        return REV_NONE;
    if (u3_member(s, rj))
        return REV_B;
    if (i != j && u2_member(s, rj))
        return REV_S;
    return REV_NONE;
}

int fa_secagg_server_unmask(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                            size_t len, uint64_t now_ms, fa_error *err)
{
    Fedagg__UnmaskShares *m = NULL;
    uint8_t got[FA_SECAGG_MAX_CLIENTS] = {0};
    size_t want_b = 0, want_s = 0, i;
    int r = -1, rc;

    if ((rc = fa_secagg_server_check_phase(s, FA_SECAGG_UNMASK, "UnmaskShares", err)) != 0)
        return rc;
    m = fedagg__unmask_shares__unpack(&fa_secagg_pb_alloc, len, msg);
    if (!m)
        return fa_errorf(err, FA_ERR_PARSE, "UnmaskShares from '%s': not a valid protobuf message",
                         auth_id ? auth_id : "?");
    if ((rc = fa_secagg_server_check_sender(s, auth_id, m->client_id, "UnmaskShares", &r, err)) !=
            0 ||
        (rc = fa_secagg_server_check_round(s, m->round, m->attempt, "UnmaskShares", auth_id,
                                           err)) != 0)
        goto out;
    if (!u4_member(s, r)) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "UnmaskShares from '%s': it did not sign the survivor set in round 3",
                       auth_id);
        goto out;
    }
    if (s->cl[r].flags & CF_UNMASKED) {
        rc = fa_errorf(err, FA_ERR_EXISTS, "UnmaskShares from '%s': already received", auth_id);
        goto out;
    }
    i = (size_t)s->cl[r].u1;
    for (size_t j = 0; j < s->n1; j++) {
        int k = expected_kind(s, i, j);
        want_b += k == REV_B;
        want_s += k == REV_S;
    }
    if (m->n_self_mask_shares != want_b || m->n_key_shares != want_s) {
        rc = fa_errorf(err, FA_ERR_PROTOCOL,
                       "UnmaskShares from '%s': %zu self-mask and %zu key shares, expected %zu "
                       "and %zu",
                       auth_id, m->n_self_mask_shares, m->n_key_shares, want_b, want_s);
        goto out;
    }
    for (int kind = REV_B; kind <= REV_S; kind++) {
        size_t n = kind == REV_B ? m->n_self_mask_shares : m->n_key_shares;
        Fedagg__RevealedShare **list = kind == REV_B ? m->self_mask_shares : m->key_shares;
        for (size_t x = 0; x < n; x++) {
            int o = fa_secagg_roster_find(&s->roster, list[x]->owner);
            if (o < 0 || !u1_member(s, o) || expected_kind(s, i, (size_t)s->cl[o].u1) != kind ||
                got[s->cl[o].u1]++) {
                rc = fa_errorf(err, FA_ERR_PROTOCOL,
                               "UnmaskShares from '%s': an unexpected or repeated %s share for "
                               "'%s'",
                               auth_id, kind == REV_B ? "self-mask" : "key", list[x]->owner);
                goto out;
            }
            if (list[x]->share.len != 32) {
                rc = fa_errorf(err, FA_ERR_PROTOCOL,
                               "UnmaskShares from '%s': share for '%s' has %zu bytes, not 32",
                               auth_id, list[x]->owner, list[x]->share.len);
                goto out;
            }
        }
    }
    for (int kind = REV_B; kind <= REV_S; kind++) {
        size_t n = kind == REV_B ? m->n_self_mask_shares : m->n_key_shares;
        Fedagg__RevealedShare **list = kind == REV_B ? m->self_mask_shares : m->key_shares;
        for (size_t x = 0; x < n; x++) {
            size_t j = (size_t)s->cl[fa_secagg_roster_find(&s->roster, list[x]->owner)].u1;
            memcpy(s->rev + (i * s->n1 + j) * 32, list[x]->share.data, 32);
            s->rev_kind[i * s->n1 + j] = (uint8_t)kind;
        }
    }
    s->cl[r].flags |= CF_UNMASKED;
out:
    fedagg__unmask_shares__free_unpacked(m, &fa_secagg_pb_alloc);
    return rc;
}

/* Combines the first shamir_t shares of `kind` revealed for owner j by U5;
 * shares is secure scratch of FA_SECAGG_MAX_CLIENTS * 32 bytes. */
static int reconstruct(const fa_secagg_server *s, size_t j, int kind, uint8_t secret[32],
                       uint8_t *shares, size_t *have)
{
    uint8_t xs[FA_SECAGG_MAX_CLIENTS];
    size_t n = 0, t = s->graph.shamir_t;
    int rc;

    for (size_t i = 0; i < s->n1 && n < t; i++) {
        if (!(s->cl[s->u1[i]].flags & CF_UNMASKED) || s->rev_kind[i * s->n1 + j] != kind)
            continue;
        xs[n] = (uint8_t)(i + 1);
        memcpy(shares + n * 32, s->rev + (i * s->n1 + j) * 32, 32);
        n++;
    }
    *have = n;
    rc = n < t ? FA_ERR_THRESHOLD : fa_shamir_combine(secret, xs, shares, t);
    sodium_memzero(shares, n * 32);
    return rc;
}

struct mask_key {
    uint8_t key[16];
    int sign;
};

#define UNMASK_GROUP 64
/* Auto threads: at most this many, each over at least this many words. */
#define UNMASK_AUTO_THREADS 16
#define UNMASK_MIN_WORDS ((uint64_t)1 << 18)

/* One range [start, start + len) of the sum, and the masks to apply there. */
struct unmask_part {
    const struct mask_key *keys;
    size_t n;
    uint32_t *sum;
    uint64_t start, len;
    int rc;
};

/* Applies the masks of keys[0..n) to one range of the sum (each key's sign
 * says which way), UNMASK_GROUP keys per pass: fa_mask_prg_mask walks the range
 * once per pass, adding every key's mask to each cache-sized sub-block.  The
 * keystreams start at the range's first word (CTR mode seeks for free). */
static void *remove_masks_part(void *arg)
{
    struct unmask_part *p = arg;
    fa_mask_prg prg[UNMASK_GROUP];
    int sign[UNMASK_GROUP];
    uint32_t *scratch = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    int rc = 0;

    if (!scratch) {
        p->rc = FA_ERR_NOMEM;
        return NULL;
    }
    memset(prg, 0, sizeof(prg));
    for (size_t g0 = 0; g0 < p->n && rc == 0; g0 += UNMASK_GROUP) {
        size_t g1 = p->n - g0 < UNMASK_GROUP ? p->n : g0 + UNMASK_GROUP;
        for (size_t i = g0; i < g1 && rc == 0; i++) {
            rc = fa_mask_prg_init(&prg[i - g0], p->keys[i].key, p->start);
            sign[i - g0] = p->keys[i].sign;
        }
        if (rc == 0)
            rc = fa_mask_prg_mask(prg, sign, g1 - g0, p->sum + p->start, p->sum + p->start,
                                  (size_t)p->len, scratch);
        for (size_t i = 0; i < UNMASK_GROUP; i++)
            fa_mask_prg_free(&prg[i]);
    }
    sodium_memzero(scratch, FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    free(scratch);
    p->rc = rc;
    return NULL;
}

/* Applies the masks of keys[0..n) to the whole sum, on several threads for
 * a long vector (cfg unmask_threads): each removes every mask from its own
 * range, so the result is the same bits whatever the number of threads.
 * A thread that cannot be started leaves its range to this one. */
static int remove_masks(fa_secagg_server *s, const struct mask_key *keys, size_t n)
{
    const uint64_t len = s->cfg.c.vector_len;
    struct unmask_part part[256];
    pthread_t th[256];
    int started[256];
    uint64_t t = s->cfg.c.unmask_threads, per;
    int rc = 0;

    if (t == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        t = cpus > 0 ? (uint64_t)cpus : 1;
        if (t > UNMASK_AUTO_THREADS)
            t = UNMASK_AUTO_THREADS;
        if (t > len / UNMASK_MIN_WORDS)
            t = len / UNMASK_MIN_WORDS;
    }
    /* ranges of whole keystream blocks */
    if (t > (len + FA_MASK_PRG_BLOCK_WORDS - 1) / FA_MASK_PRG_BLOCK_WORDS)
        t = (len + FA_MASK_PRG_BLOCK_WORDS - 1) / FA_MASK_PRG_BLOCK_WORDS;
    if (t == 0)
        t = 1;
    per =
        (len / t + FA_MASK_PRG_BLOCK_WORDS - 1) / FA_MASK_PRG_BLOCK_WORDS * FA_MASK_PRG_BLOCK_WORDS;
    for (uint64_t i = 0; i < t; i++) {
        uint64_t a = i * per < len ? i * per : len, b = a + per < len ? a + per : len;
        part[i] = (struct unmask_part){keys, n, s->sum, a, b - a, 0};
        if (i == t - 1)
            part[i].len = len - a; /* the last one takes the rest */
        started[i] = i > 0 && part[i].len > 0 &&
                     pthread_create(&th[i], NULL, remove_masks_part, &part[i]) == 0;
    }
    remove_masks_part(&part[0]);
    for (uint64_t i = 1; i < t; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else if (part[i].len > 0)
            remove_masks_part(&part[i]);
    }
    for (uint64_t i = 0; i < t && rc == 0; i++)
        rc = part[i].rc;
    return rc;
}

/* Round 4, server side: reconstruct b_u for u in U3 and s_sk_v for v in
 * U2 \ U3, then z = sum y_u - sum PRG(b_u) + the uncancelled pairwise masks. */
int fa_secagg_server_close_unmask(fa_secagg_server *s, fa_error *err)
{
    struct mask_key *keys = NULL;
    uint8_t *secret = NULL, *scratch = NULL;
    size_t nkeys = 0, cap = 0, have;
    int rc = 0;

    for (size_t j = 0; j < s->n1; j++) {
        int rj = s->u1[j];
        if (u3_member(s, rj))
            cap++;
        else if (u2_member(s, rj))
            for (size_t u = 0; u < s->n1; u++)
                cap += u3_member(s, s->u1[u]) && fa_secagg_graph_adjacent(&s->graph, j, u);
    }
    keys = sodium_malloc((cap ? cap : 1) * sizeof(*keys));
    secret = sodium_malloc(32);
    scratch = sodium_malloc(FA_SECAGG_MAX_CLIENTS * 32);
    if (!keys || !secret || !scratch) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "unmask: out of memory");
        goto out;
    }
    for (size_t j = 0; j < s->n1 && rc == 0; j++) {
        int rj = s->u1[j];
        const fa_secagg_peer *pj = &s->cl[rj].adv;
        if (u3_member(s, rj)) {
            uint8_t commit[32];
            rc = reconstruct(s, j, REV_B, secret, scratch, &have);
            if (rc == FA_ERR_THRESHOLD) {
                rc = fa_errorf(err, rc,
                               "unmask: only %zu shares of survivor '%s''s self-mask seed, %u "
                               "needed",
                               have, pj->id, s->graph.shamir_t);
                break;
            }
            if (rc == 0)
                rc = fa_secagg_b_commit(&s->cfg, pj->id, secret, commit);
            if (rc == 0 && sodium_memcmp(commit, pj->b_commit, 32) != 0) {
                rc = fa_errorf(err, FA_ERR_VERIFY,
                               "unmask: the self-mask seed of '%s' rebuilt from its shares does "
                               "not match its commitment (a client revealed a bad share)",
                               pj->id);
                break;
            }
            if (rc == 0)
                rc = fa_secagg_self_mask_key(keys[nkeys].key, &s->cfg, pj->id, secret);
            if (rc == 0)
                keys[nkeys++].sign = -1;
        } else if (u2_member(s, rj)) {
            uint8_t pk[32];
            int needed = 0;
            for (size_t u = 0; u < s->n1; u++)
                needed |= u3_member(s, s->u1[u]) && fa_secagg_graph_adjacent(&s->graph, j, u);
            if (!needed)
                continue;
            rc = reconstruct(s, j, REV_S, secret, scratch, &have);
            if (rc == FA_ERR_THRESHOLD) {
                rc = fa_errorf(err, rc,
                               "unmask: only %zu shares of dropout '%s''s mask key, %u needed",
                               have, pj->id, s->graph.shamir_t);
                break;
            }
            if (rc == 0 &&
                (crypto_scalarmult_base(pk, secret) != 0 || sodium_memcmp(pk, pj->s_pk, 32) != 0)) {
                rc = fa_errorf(err, FA_ERR_VERIFY,
                               "unmask: the mask key of dropout '%s' rebuilt from its shares does "
                               "not match its public key (a client revealed a bad share)",
                               pj->id);
                break;
            }
            for (size_t u = 0; u < s->n1 && rc == 0; u++) {
                const fa_secagg_peer *pu = &s->cl[s->u1[u]].adv;
                if (!u3_member(s, s->u1[u]) || !fa_secagg_graph_adjacent(&s->graph, j, u))
                    continue;
                rc = fa_secagg_agree(keys[nkeys].key, 16, FA_KDF_PAIR_MASK, &s->cfg, secret,
                                     pj->s_pk, pj->id, pu->s_pk, pu->id);
                /* u added sign(u, v) * PRG(s_uv); take it out again */
                keys[nkeys++].sign = -fa_secagg_pair_sign(pu->id, pj->id);
            }
        }
        if (rc != 0) /* out of memory, or an X25519/KDF failure */
            fa_errorf(err, rc, "unmask: %s while rebuilding the secret of '%s'", fa_strerror(rc),
                      pj->id);
    }
    if (rc != 0)
        goto out;
    /* From here on the sum changes: only an internal failure can stop it. */
    s->sum_gen++;
    rc = remove_masks(s, keys, nkeys);
    if (rc != 0) {
        s->phase = FA_SECAGG_FAILED;
        fa_errorf(err, rc, "unmask: %s while removing the masks; the sum is lost", fa_strerror(rc));
    }
out:
    if (keys)
        sodium_free(keys);
    if (secret)
        sodium_free(secret);
    if (scratch)
        sodium_free(scratch);
    return rc;
}
