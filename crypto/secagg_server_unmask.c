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

/* ---- rebuilding a secret from shares some of which may be bad ------------- */

/* Whether secret is owner j's secret of `kind`: the commitment of its self
 * mask seed (REV_B) or the public key of its mask key (REV_S).  1, 0, or a
 * negative FA_ERR_* code. */
static int secret_matches(const fa_secagg_server *s, size_t j, int kind, const uint8_t secret[32])
{
    const fa_secagg_peer *pj = &s->cl[s->u1[j]].adv;
    uint8_t v[32];
    int rc;

    if (kind == REV_B) {
        if ((rc = fa_secagg_b_commit(&s->cfg, pj->id, secret, v)) != 0)
            return rc;
        return sodium_memcmp(v, pj->b_commit, 32) == 0;
    }
    return crypto_scalarmult_base(v, secret) == 0 && sodium_memcmp(v, pj->s_pk, 32) == 0;
}

static void add_fault(fa_secagg_server *s, size_t sender, size_t owner, int kind)
{
    if (s->faulty[sender])
        return;
    s->faulty[sender] = 1;
    s->fault[s->nfault++] = (struct srv_share_fault){(int)sender, (int)owner, kind};
}

/* The shares of `kind` revealed for owner j by U5, without those of a
 * sender already found faulty: holders' x coordinates into xs, values into
 * shares (secure scratch of FA_SECAGG_MAX_CLIENTS * 32 bytes), senders'
 * U1 indices into who.  Returns their number. */
static size_t gather(const fa_secagg_server *s, size_t j, int kind, uint8_t *xs, uint8_t *shares,
                     size_t *who)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n1; i++) {
        if (!(s->cl[s->u1[i]].flags & CF_UNMASKED) || s->rev_kind[i * s->n1 + j] != kind ||
            s->faulty[i])
            continue;
        xs[n] = (uint8_t)(i + 1);
        memcpy(shares + n * 32, s->rev + (i * s->n1 + j) * 32, 32);
        who[n++] = i;
    }
    return n;
}

/* Leave one out: the first t shares without share `skip`, in xs2/sh2. */
static void without(const uint8_t *xs, const uint8_t *shares, size_t m, size_t t, size_t skip,
                    uint8_t *xs2, uint8_t *sh2)
{
    size_t n = 0;
    for (size_t i = 0; i < m && n < t; i++) {
        if (i == skip)
            continue;
        xs2[n] = xs[i];
        memcpy(sh2 + n * 32, shares + i * 32, 32);
        n++;
    }
}

/* Rebuilds owner j's secret of `kind` from the shares U5 revealed, and
 * names the senders of bad ones (Bonawitz et al. assume honest shares; a
 * region that reveals a bad one must not be able to stall every attempt):
 *
 *   1. the first t shares, checked against the commitment (the usual case);
 *   2. when that fails, all m shares decoded as a Reed-Solomon code word
 *      (fa_shamir_decode, Berlekamp-Welch): with at most (m - t) / 2 bad
 *      shares it finds the dealer's polynomial, and the shares off it are
 *      bad; the secret is checked against the commitment again;
 *   3. when that fails too (m - t is 1, or the decoding gave up), each share
 *      left out in turn from the first t + 1, each such t-subset checked
 *      against the commitment: one bad share among them is found so, as
 *      the commitment refuses any subset that holds it.
 *
 * Step 2 costs O(m^3) per byte, step 3 O(t^3); both only run where a share
 * is bad, and a sender found bad is left out of every later secret of the
 * attempt (`faulty`), so each bad sender is looked for once.  A sender is
 * named only where the evidence is certain for at most (m - t) / 2 bad
 * shares (step 2; one, step 3): then it cannot be an honest region that
 * several colluding ones point at.  Returns 0 (secret written), or
 * FA_ERR_THRESHOLD (fewer than t shares; *have says how many), FA_ERR_VERIFY
 * (no consistent set of shares matches the commitment), another FA_ERR_*. */
static int reconstruct(fa_secagg_server *s, size_t j, int kind, uint8_t secret[32], uint8_t *shares,
                       uint8_t *scratch, size_t *have)
{
    uint8_t xs[FA_SECAGG_MAX_CLIENTS] = {0}, xs2[FA_SECAGG_MAX_CLIENTS] = {0};
    uint8_t wrong[FA_SECAGG_MAX_CLIENTS];
    size_t who[FA_SECAGG_MAX_CLIENTS];
    const size_t t = s->graph.shamir_t;
    size_t m = gather(s, j, kind, xs, shares, who), found = SIZE_MAX, nfound = 0;
    int rc;

    *have = m;
    if (m < t) {
        rc = FA_ERR_THRESHOLD;
        goto out;
    }
    /* 1. the first t */
    if ((rc = fa_shamir_combine(secret, xs, shares, t)) != 0 ||
        (rc = secret_matches(s, j, kind, secret)) != 0)
        goto out; /* an error, or 1: it matches */
    /* 2. all m decoded */
    rc = fa_shamir_decode(secret, xs, shares, m, t, wrong);
    if (rc == FA_ERR_NOMEM || rc == FA_ERR_INVAL)
        goto out;
    if (rc == 0 && (rc = secret_matches(s, j, kind, secret)) == 1) {
        for (size_t i = 0; i < m; i++)
            if (wrong[i])
                add_fault(s, who[i], j, kind);
        goto out;
    }
    if (rc < 0 && rc != FA_ERR_VERIFY)
        goto out;
    /* 3. one left out of the first t + 1 */
    if (m < t + 1) {
        rc = FA_ERR_VERIFY;
        goto out;
    }
    for (size_t skip = 0; skip < t + 1; skip++) {
        int ok;
        without(xs, shares, m, t, skip, xs2, scratch);
        if ((rc = fa_shamir_combine(secret, xs2, scratch, t)) != 0)
            goto out;
        if ((ok = secret_matches(s, j, kind, secret)) < 0) {
            rc = ok;
            goto out;
        }
        if (ok) {
            nfound++;
            found = found == SIZE_MAX ? skip : found;
        }
    }
    if (nfound == 0) {
        rc = FA_ERR_VERIFY;
        goto out;
    }
    without(xs, shares, m, t, found, xs2, scratch);
    if ((rc = fa_shamir_combine(secret, xs2, scratch, t)) != 0)
        goto out;
    if (nfound == 1) {
        /* the left-out share is bad if it is off the polynomial of the
         * others (a share that is on it was never the trouble) */
        uint8_t v[32];
        if ((rc = fa_shamir_eval(v, xs[found], xs2, scratch, t)) != 0)
            goto out;
        if (sodium_memcmp(v, shares + found * 32, 32) != 0)
            add_fault(s, who[found], j, kind);
        sodium_memzero(v, sizeof(v));
    }
    rc = 1;
out:
    sodium_memzero(shares, (m ? m : 1) * 32);
    sodium_memzero(scratch, (t ? t : 1) * 32);
    return rc == 1 ? 0 : rc;
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

/* The message of a secret that could not be rebuilt (rc from reconstruct). */
static int rebuild_error(const fa_secagg_server *s, int rc, size_t j, int kind, size_t have,
                         fa_error *err)
{
    const char *id = s->cl[s->u1[j]].adv.id;
    const char *what = kind == REV_B ? "survivor" : "dropout";
    const char *secret = kind == REV_B ? "self-mask seed" : "mask key";

    if (rc == FA_ERR_THRESHOLD)
        return fa_errorf(err, rc, "unmask: only %zu usable shares of %s '%s''s %s, %u needed", have,
                         what, id, secret, s->graph.shamir_t);
    if (rc == FA_ERR_VERIFY)
        return fa_errorf(err, rc,
                         "unmask: the %s of %s '%s' cannot be rebuilt from its %zu shares: no "
                         "%u of them match its %s (several regions revealed bad shares, or "
                         "'%s' dealt inconsistent ones)",
                         secret, what, id, have, s->graph.shamir_t,
                         kind == REV_B ? "commitment" : "public key", id);
    /* out of memory, or an X25519/KDF failure */
    return fa_errorf(err, rc, "unmask: %s while rebuilding the secret of '%s'", fa_strerror(rc),
                     id);
}

/* Rebuilds b_u for u in U3 and s_sk_v for v in U2 \ U3 (finding the bad
 * shares on the way) into the mask keys to remove, *keys (sodium_malloc'ed,
 * *nkeys of them; the caller frees them with sodium_free). */
static int rebuild_secrets(fa_secagg_server *s, struct mask_key **keys_out, size_t *nkeys_out,
                           fa_error *err)
{
    struct mask_key *keys = NULL;
    uint8_t *secret = NULL, *shares = NULL, *scratch = NULL;
    size_t nkeys = 0, cap = 0, have = 0;
    int rc = 0;

    /* found afresh at every close (a close refused for too few shares may
     * be tried again with more) */
    s->nfault = 0;
    memset(s->faulty, 0, sizeof(s->faulty));
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
    shares = sodium_malloc(FA_SECAGG_MAX_CLIENTS * 32);
    scratch = sodium_malloc(FA_SECAGG_MAX_CLIENTS * 32);
    if (!keys || !secret || !shares || !scratch) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "unmask: out of memory");
        goto out;
    }
    for (size_t j = 0; j < s->n1 && rc == 0; j++) {
        int rj = s->u1[j];
        const fa_secagg_peer *pj = &s->cl[rj].adv;
        if (u3_member(s, rj)) {
            rc = reconstruct(s, j, REV_B, secret, shares, scratch, &have);
            if (rc == 0)
                rc = fa_secagg_self_mask_key(keys[nkeys].key, &s->cfg, pj->id, secret);
            if (rc == 0)
                keys[nkeys++].sign = -1;
            else
                rebuild_error(s, rc, j, REV_B, have, err);
        } else if (u2_member(s, rj)) {
            int needed = 0;
            for (size_t u = 0; u < s->n1; u++)
                needed |= u3_member(s, s->u1[u]) && fa_secagg_graph_adjacent(&s->graph, j, u);
            if (!needed)
                continue;
            rc = reconstruct(s, j, REV_S, secret, shares, scratch, &have);
            if (rc != 0)
                rebuild_error(s, rc, j, REV_S, have, err);
            for (size_t u = 0; u < s->n1 && rc == 0; u++) {
                const fa_secagg_peer *pu = &s->cl[s->u1[u]].adv;
                if (!u3_member(s, s->u1[u]) || !fa_secagg_graph_adjacent(&s->graph, j, u))
                    continue;
                rc = fa_secagg_agree(keys[nkeys].key, 16, FA_KDF_PAIR_MASK, &s->cfg, secret,
                                     pj->s_pk, pj->id, pu->s_pk, pu->id);
                /* u added sign(u, v) * PRG(s_uv); take it out again */
                keys[nkeys++].sign = -fa_secagg_pair_sign(pu->id, pj->id);
                if (rc != 0)
                    rebuild_error(s, rc, j, REV_S, have, err);
            }
        }
    }
out:
    if (rc != 0) {
        s->nfault = 0;
        memset(s->faulty, 0, sizeof(s->faulty));
        if (keys)
            sodium_free(keys);
        keys = NULL;
        nkeys = 0;
    }
    *keys_out = keys;
    *nkeys_out = nkeys;
    if (secret)
        sodium_free(secret);
    if (shares)
        sodium_free(shares);
    if (scratch)
        sodium_free(scratch);
    return rc;
}

/* Round 4, server side: reconstruct b_u for u in U3 and s_sk_v for v in
 * U2 \ U3, then z = sum y_u - sum PRG(b_u) + the uncancelled pairwise masks. */
int fa_secagg_server_close_unmask(fa_secagg_server *s, fa_error *err)
{
    struct mask_key *keys = NULL;
    size_t nkeys = 0;
    int rc = rebuild_secrets(s, &keys, &nkeys, err);

    if (rc != 0)
        return rc;
    /* From here on the sum changes: only an internal failure can stop it. */
    s->sum_gen++;
    rc = remove_masks(s, keys, nkeys);
    if (rc != 0) {
        s->phase = FA_SECAGG_FAILED;
        fa_errorf(err, rc, "unmask: %s while removing the masks; the sum is lost", fa_strerror(rc));
    }
    sodium_free(keys);
    return rc;
}

int fa_secagg_server_find_share_faults(fa_secagg_server *s, fa_error *err)
{
    struct mask_key *keys = NULL;
    size_t nkeys = 0;
    int rc = rebuild_secrets(s, &keys, &nkeys, err);

    if (keys)
        sodium_free(keys);
    return rc;
}

size_t fa_secagg_server_share_fault_count(const fa_secagg_server *s)
{
    return s->phase == FA_SECAGG_DONE ? s->nfault : 0;
}

int fa_secagg_server_share_fault(const fa_secagg_server *s, size_t i, const char **region,
                                 const char **owner, int *kind)
{
    const struct srv_share_fault *f;

    if (i >= fa_secagg_server_share_fault_count(s))
        return FA_ERR_NOTFOUND;
    f = &s->fault[i];
    *region = s->cl[s->u1[f->sender]].adv.id;
    *owner = s->cl[s->u1[f->owner]].adv.id;
    *kind = f->kind == REV_B ? FA_SECAGG_SHARE_SELF_MASK : FA_SECAGG_SHARE_MASK_KEY;
    return 0;
}
