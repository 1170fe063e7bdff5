/* Every refusal of the secure-aggregation state machines gives a clear error
 * and leaves the state exactly as it was (compared through the server's
 * saved bytes and the client's state digest), and the round still completes
 * with the exact sum afterwards.
 *
 * Fixture: 5 members, threshold 3.  region-004 never advertises (outside
 * U1), region-003 advertises but sends no shares (in U1, outside U2), 0-2
 * go the whole way. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/fa_blake3.h"
#include "common/fa_sha256.h"
#include "crypto/checkpoint.h"
#include "crypto/secagg_internal.h"
#include "secagg.pb-c.h"
#include "test_crypto_harness.h"

#define N 5
#define LEN 29
#define K 20

struct buf {
    uint8_t *p;
    size_t n;
};

struct fx {
    th_fed f;
    fa_secagg_config cfg;
    th_rng rr;
    fa_secagg_rng rng;
    fa_secagg_server *s;
    fa_secagg_client *c[N];
    uint32_t in[N][LEN];
    struct buf adv[N], peers, sk[N], sfy[N], up[N], surv, ss[N], sigs, um[N];
    int phase; /* steps done */
};

static void bfree(struct buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = 0;
}

static void server_digest(const fa_secagg_server *s, uint8_t out[32])
{
    uint8_t *p;
    size_t n;
    assert_int_equal(fa_secagg_server_save(s, &p, &n, NULL), 0);
    assert_int_equal(fa_sha256(out, p, n), 0);
    free(p);
}

static void client_digest(const fa_secagg_client *c, uint8_t out[32])
{
    assert_int_equal(fa_secagg_client_state_digest(c, out), 0);
}

/* A server call refused with `code`, its message naming `what`, and nothing
 * changed. */
#define S_REFUSED(fx, call, code, what)                                                            \
    do {                                                                                           \
        uint8_t d0_[32], d1_[32];                                                                  \
        fa_error e_;                                                                               \
        fa_error_clear(&e_);                                                                       \
        server_digest((fx)->s, d0_);                                                               \
        int rc_ = (call);                                                                          \
        if (rc_ != (code))                                                                         \
            fail_msg("%s: rc %d, expected %d (%s)", #call, rc_, code, e_.msg);                     \
        assert_non_null(strstr(e_.msg, what));                                                     \
        server_digest((fx)->s, d1_);                                                               \
        assert_memory_equal(d0_, d1_, 32);                                                         \
    } while (0)

#define C_REFUSED(c, call, code, what)                                                             \
    do {                                                                                           \
        uint8_t d0_[32], d1_[32];                                                                  \
        fa_error e_;                                                                               \
        fa_error_clear(&e_);                                                                       \
        client_digest(c, d0_);                                                                     \
        int rc_ = (call);                                                                          \
        if (rc_ != (code))                                                                         \
            fail_msg("%s: rc %d, expected %d (%s)", #call, rc_, code, e_.msg);                     \
        assert_non_null(strstr(e_.msg, what));                                                     \
        client_digest(c, d1_);                                                                     \
        assert_memory_equal(d0_, d1_, 32);                                                         \
    } while (0)

static struct fx *fx_new(void)
{
    struct fx *x = calloc(1, sizeof(*x));
    th_fed_init(&x->f, N, 77);
    x->cfg = th_cfg(3, K, LEN, 0);
    th_rng_init(&x->rr, 78);
    x->rng.fill = th_rng_fill;
    x->rng.ctx = &x->rr;
    th_rng_fill(&x->rr, x->in, sizeof(x->in));
    assert_int_equal(fa_secagg_server_new(&x->s, &x->cfg, x->f.members, N, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_client_new(&x->c[i], &x->cfg, x->f.seeds[i], x->f.ids[i],
                                              x->f.members, N, &x->rng, NULL),
                         0);
        assert_int_equal(fa_secagg_client_advertise(x->c[i], &x->adv[i].p, &x->adv[i].n, NULL), 0);
    }
    return x;
}

static void fx_del(struct fx *x)
{
    for (int i = 0; i < N; i++) {
        fa_secagg_client_del(x->c[i]);
        bfree(&x->adv[i]);
        bfree(&x->sk[i]);
        bfree(&x->sfy[i]);
        bfree(&x->up[i]);
        bfree(&x->ss[i]);
        bfree(&x->um[i]);
    }
    bfree(&x->peers);
    bfree(&x->surv);
    bfree(&x->sigs);
    fa_secagg_server_del(x->s);
    free(x);
}

/* Step 4 after the SignedSurvivors: close, SurvivorSignatures, the
 * UnmaskShares of 0-2 produced. */
static void fx_close_consistency(struct fx *x)
{
    assert_int_equal(fa_secagg_server_close(x->s, 20, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_signatures(x->s, &x->sigs.p, &x->sigs.n, NULL), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fa_secagg_client_signatures(x->c[i], x->sigs.p, x->sigs.n, 21, &x->um[i].p,
                                                     &x->um[i].n, NULL),
                         0);
    x->phase = 4;
}

/* Runs the fixture up to and including step `to`:
 * 1 advertise 0-3, close, PeerList to 0-3, ShareKeys of 0-3 produced
 * 2 ShareKeys of 0-2 sent, close, SharesForYou to 0-2, streams produced
 * 3 uploads 0-2, close, SurvivorList, SignedSurvivors of 0-2 produced
 * 4 SignedSurvivors sent, close, SurvivorSignatures, UnmaskShares produced
 * 5 UnmaskShares sent, close: done */
static void fx_to(struct fx *x, int to)
{
    while (x->phase < to) {
        switch (++x->phase) {
        case 1:
            for (int i = 0; i < 4; i++)
                assert_int_equal(fa_secagg_server_advertise(x->s, x->f.ids[i], x->adv[i].p,
                                                            x->adv[i].n, 10, NULL),
                                 0);
            assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
            assert_int_equal(fa_secagg_server_peer_list(x->s, &x->peers.p, &x->peers.n, NULL), 0);
            for (int i = 0; i < 4; i++) {
                assert_int_equal(
                    fa_secagg_client_peer_list(x->c[i], x->peers.p, x->peers.n, 12, NULL), 0);
                assert_int_equal(
                    fa_secagg_client_share_keys(x->c[i], &x->sk[i].p, &x->sk[i].n, NULL), 0);
            }
            break;
        case 2:
            for (int i = 0; i < 3; i++)
                assert_int_equal(fa_secagg_server_share_keys(x->s, x->f.ids[i], x->sk[i].p,
                                                             x->sk[i].n, 13, NULL),
                                 0);
            assert_int_equal(fa_secagg_server_close(x->s, 14, NULL), 0);
            for (int i = 0; i < 3; i++) {
                size_t got = 0;
                assert_int_equal(fa_secagg_server_shares_for(x->s, x->f.ids[i], &x->sfy[i].p,
                                                             &x->sfy[i].n, NULL),
                                 0);
                assert_int_equal(
                    fa_secagg_client_shares(x->c[i], x->sfy[i].p, x->sfy[i].n, 15, NULL), 0);
                assert_int_equal(fa_secagg_client_set_input_ring(x->c[i], x->in[i], LEN, NULL), 0);
                x->up[i].n = (size_t)fa_secagg_client_masked_bytes(x->c[i]);
                x->up[i].p = malloc(x->up[i].n + 1);
                assert_int_equal(
                    fa_secagg_client_masked_next(x->c[i], x->up[i].p, x->up[i].n + 1, &got, NULL),
                    0);
                assert_int_equal(got, x->up[i].n);
            }
            break;
        case 3:
            for (int i = 0; i < 3; i++) {
                assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[i], 16, NULL), 0);
                assert_int_equal(fa_secagg_server_masked_chunk(x->s, x->f.ids[i], x->up[i].p,
                                                               x->up[i].n, 16, NULL),
                                 0);
                assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[i], 16, NULL), 0);
            }
            assert_int_equal(fa_secagg_server_close(x->s, 17, NULL), 0);
            assert_int_equal(fa_secagg_server_survivor_list(x->s, &x->surv.p, &x->surv.n, NULL), 0);
            for (int i = 0; i < 3; i++)
                assert_int_equal(fa_secagg_client_survivors(x->c[i], x->surv.p, x->surv.n, 18,
                                                            &x->ss[i].p, &x->ss[i].n, NULL),
                                 0);
            break;
        case 4:
            for (int i = 0; i < 3; i++)
                assert_int_equal(fa_secagg_server_consistency(x->s, x->f.ids[i], x->ss[i].p,
                                                              x->ss[i].n, 19, NULL),
                                 0);
            fx_close_consistency(x);
            break;
        case 5:
            for (int i = 0; i < 3; i++)
                assert_int_equal(
                    fa_secagg_server_unmask(x->s, x->f.ids[i], x->um[i].p, x->um[i].n, 22, NULL),
                    0);
            assert_int_equal(fa_secagg_server_close(x->s, 23, NULL), 0);
            break;
        }
    }
}

static void fx_check_sum(struct fx *x)
{
    uint32_t got[LEN];
    fx_to(x, 5);
    assert_int_equal(fa_secagg_server_result_ring(x->s, got, LEN, NULL), 0);
    for (int j = 0; j < LEN; j++)
        assert_int_equal(got[j], (x->in[0][j] + x->in[1][j] + x->in[2][j]) & ((1u << K) - 1));
}

/* Messages are mutated through protobuf-c, unpacked into an arena: the
 * mutations may point fields at literals or at other fields, so nothing is
 * freed field by field; the arena is released after packing. */
struct arena {
    void *ptrs[4096];
    size_t n;
};

static void *arena_alloc(void *ad, size_t n)
{
    struct arena *a = ad;
    void *p = malloc(n ? n : 1);
    assert_true(a->n < 4096);
    a->ptrs[a->n++] = p;
    return p;
}

static void arena_free(void *ad, void *p)
{
    (void)ad;
    (void)p;
}

static void arena_release(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->ptrs[i]);
    a->n = 0;
}

#define MUTATE(type, fn, src, var, body, out)                                                      \
    do {                                                                                           \
        struct arena ar_ = {.n = 0};                                                               \
        ProtobufCAllocator al_ = {arena_alloc, arena_free, &ar_};                                  \
        type *var = fn##__unpack(&al_, (src).n, (src).p);                                          \
        assert_non_null(var);                                                                      \
        body;                                                                                      \
        (out).n = fn##__get_packed_size(var);                                                      \
        (out).p = malloc((out).n + 1);                                                             \
        fn##__pack(var, (out).p);                                                                  \
        arena_release(&ar_);                                                                       \
    } while (0)

/* ---- server ------------------------------------------------------------------- */

static void test_server_advertise_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fa_secagg_client *other;
    fa_secagg_config cfg2 = x->cfg;
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};

    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], junk, sizeof(junk), 1, &e_),
              FA_ERR_PARSE, "not a valid protobuf");
    S_REFUSED(x, fa_secagg_server_advertise(x->s, "nobody", x->adv[0].p, x->adv[0].n, 1, &e_),
              FA_ERR_AUTH, "not a member");
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[1], x->adv[0].p, x->adv[0].n, 1, &e_),
              FA_ERR_AUTH, "authenticated as 'region-001'");
    /* replays: a message of another round and of another attempt */
    cfg2.round = 6;
    assert_int_equal(fa_secagg_client_new(&other, &cfg2, x->f.seeds[0], x->f.ids[0], x->f.members,
                                          N, &x->rng, NULL),
                     0);
    assert_int_equal(fa_secagg_client_advertise(other, &m.p, &m.n, NULL), 0);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_REPLAY,
              "round 6 attempt 1");
    bfree(&m);
    fa_secagg_client_del(other);
    cfg2.round = 7;
    cfg2.attempt = 0;
    assert_int_equal(fa_secagg_client_new(&other, &cfg2, x->f.seeds[0], x->f.ids[0], x->f.members,
                                          N, &x->rng, NULL),
                     0);
    assert_int_equal(fa_secagg_client_advertise(other, &m.p, &m.n, NULL), 0);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_REPLAY,
              "attempt 0");
    bfree(&m);
    fa_secagg_client_del(other);
    /* signature */
    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a, a->signature.data[5] ^= 1,
           m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "signature does not verify");
    bfree(&m);
    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a, a->c_pk.data[0] ^= 1, m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "signature");
    bfree(&m);
    /* lengths */
    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a, a->c_pk.len = 31, m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "must be 32 bytes");
    bfree(&m);
    /* wrong phase */
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], x->adv[0].p, x->adv[0].n, 1, &e_),
              FA_ERR_STATE, "shares phase is not open");
    S_REFUSED(x, fa_secagg_server_masked_begin(x->s, x->f.ids[0], 1, &e_), FA_ERR_STATE,
              "masked phase");
    S_REFUSED(x, fa_secagg_server_peer_list(x->s, &m.p, &m.n, &e_), FA_ERR_STATE, "not closed");
    /* duplicates; below threshold */
    assert_int_equal(
        fa_secagg_server_advertise(x->s, x->f.ids[0], x->adv[0].p, x->adv[0].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], x->adv[0].p, x->adv[0].n, 1, &e_),
              FA_ERR_EXISTS, "already received");
    assert_int_equal(
        fa_secagg_server_advertise(x->s, x->f.ids[1], x->adv[1].p, x->adv[1].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_close(x->s, 2, &e_), FA_ERR_THRESHOLD,
              "only 2 clients in the advertise phase, threshold is 3");
    /* the same key as another client (refused before the signature check) */
    {
        Fedagg__AdvertiseKeys *a0 = fedagg__advertise_keys__unpack(NULL, x->adv[0].n, x->adv[0].p);
        MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[2], a,
               memcpy(a->s_pk.data, a0->s_pk.data, 32), m);
        fedagg__advertise_keys__free_unpacked(a0, NULL);
        S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[2], m.p, m.n, 1, &e_),
                  FA_ERR_PROTOCOL, "reuses a public key of 'region-000'");
        bfree(&m);
    }
    /* the round then completes: the refusals changed nothing */
    x->phase = 0;
    {
        /* 0 and 1 were accepted above; send 2 and 3 and go on */
        for (int i = 2; i < 4; i++)
            assert_int_equal(
                fa_secagg_server_advertise(x->s, x->f.ids[i], x->adv[i].p, x->adv[i].n, 10, NULL),
                0);
        assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
        assert_int_equal(fa_secagg_server_peer_list(x->s, &x->peers.p, &x->peers.n, NULL), 0);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(fa_secagg_client_peer_list(x->c[i], x->peers.p, x->peers.n, 12, NULL),
                             0);
            assert_int_equal(fa_secagg_client_share_keys(x->c[i], &x->sk[i].p, &x->sk[i].n, NULL),
                             0);
        }
        x->phase = 1;
    }
    fx_check_sum(x);
    fx_del(x);
}

/* A client that lost its keys (a restarted worker) advertises anew while
 * the advertise phase is open: the new advertisement replaces the old one,
 * checked like any other; the round completes with the new keys. */
static void test_server_readvertise(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0}, old = {0};
    fa_secagg_client *lost;

    S_REFUSED(x, fa_secagg_server_readvertise(x->s, x->f.ids[0], x->adv[0].p, x->adv[0].n, 1, &e_),
              FA_ERR_STATE, "nothing to replace");
    assert_int_equal(fa_secagg_client_new(&lost, &x->cfg, x->f.seeds[0], x->f.ids[0], x->f.members,
                                          N, &x->rng, NULL),
                     0);
    assert_int_equal(fa_secagg_client_advertise(lost, &old.p, &old.n, NULL), 0);
    fa_secagg_client_del(lost);
    assert_int_equal(fa_secagg_server_advertise(x->s, x->f.ids[0], old.p, old.n, 1, NULL), 0);
    assert_int_equal(
        fa_secagg_server_advertise(x->s, x->f.ids[1], x->adv[1].p, x->adv[1].n, 1, NULL), 0);
    /* refusals leave the first advertisement in place */
    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a, a->signature.data[0] ^= 1,
           m);
    S_REFUSED(x, fa_secagg_server_readvertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "signature does not verify");
    bfree(&m);
    S_REFUSED(x, fa_secagg_server_readvertise(x->s, x->f.ids[0], x->adv[1].p, x->adv[1].n, 1, &e_),
              FA_ERR_AUTH, "authenticated as 'region-000'");
    {
        Fedagg__AdvertiseKeys *a1 = fedagg__advertise_keys__unpack(NULL, x->adv[1].n, x->adv[1].p);
        MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a,
               memcpy(a->c_pk.data, a1->c_pk.data, 32), m);
        fedagg__advertise_keys__free_unpacked(a1, NULL);
        S_REFUSED(x, fa_secagg_server_readvertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_),
                  FA_ERR_PROTOCOL, "reuses a public key of 'region-001'");
        bfree(&m);
    }
    /* its own old keys again are fine (the same message as before) */
    assert_int_equal(fa_secagg_server_readvertise(x->s, x->f.ids[0], old.p, old.n, 1, NULL), 0);
    /* the keys it holds now replace them */
    assert_int_equal(
        fa_secagg_server_readvertise(x->s, x->f.ids[0], x->adv[0].p, x->adv[0].n, 1, NULL), 0);
    for (int i = 2; i < 4; i++)
        assert_int_equal(
            fa_secagg_server_advertise(x->s, x->f.ids[i], x->adv[i].p, x->adv[i].n, 10, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
    /* the phase is closed: no more replacing */
    S_REFUSED(x, fa_secagg_server_readvertise(x->s, x->f.ids[0], old.p, old.n, 12, &e_),
              FA_ERR_STATE, "advertise phase");
    bfree(&old);
    assert_int_equal(fa_secagg_server_peer_list(x->s, &x->peers.p, &x->peers.n, NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fa_secagg_client_peer_list(x->c[i], x->peers.p, x->peers.n, 12, NULL), 0);
        assert_int_equal(fa_secagg_client_share_keys(x->c[i], &x->sk[i].p, &x->sk[i].n, NULL), 0);
    }
    x->phase = 1;
    fx_check_sum(x);
    fx_del(x);
}

static void test_server_share_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fx_to(x, 1);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[4], x->sk[0].p, x->sk[0].n, 1, &e_),
              FA_ERR_AUTH, "names client 'region-000'");
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->n_shares--, m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "expected one for each of the 3 other clients");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->shares[1]->ciphertext.len--, m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not 105");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->shares[1]->to = "region-000", m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not one of its peers");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->shares[1]->to = "region-004", m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not one of its peers");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->shares[1]->to = a->shares[0]->to,
           m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "two shares for");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->shares[0]->from = "region-002",
           m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "is from 'region-002'");
    bfree(&m);
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->attempt = 2, m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_REPLAY,
              "attempt 2");
    bfree(&m);
    /* region-004 is a member but not in U1 */
    MUTATE(Fedagg__ShareKeys, fedagg__share_keys, x->sk[0], a, a->client_id = "region-004", m);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[4], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not in this round's PeerList");
    bfree(&m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[4], x->adv[4].p, x->adv[4].n, 1, &e_),
              FA_ERR_STATE, "advertise phase is not open");
    S_REFUSED(x, fa_secagg_server_shares_for(x->s, x->f.ids[0], &m.p, &m.n, &e_), FA_ERR_STATE,
              "not closed");
    assert_int_equal(
        fa_secagg_server_share_keys(x->s, x->f.ids[0], x->sk[0].p, x->sk[0].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_share_keys(x->s, x->f.ids[0], x->sk[0].p, x->sk[0].n, 1, &e_),
              FA_ERR_EXISTS, "already received");
    assert_int_equal(
        fa_secagg_server_share_keys(x->s, x->f.ids[1], x->sk[1].p, x->sk[1].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_close(x->s, 2, &e_), FA_ERR_THRESHOLD, "shares phase");
    assert_int_equal(
        fa_secagg_server_share_keys(x->s, x->f.ids[2], x->sk[2].p, x->sk[2].n, 1, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 2, NULL), 0);
    S_REFUSED(x, fa_secagg_server_shares_for(x->s, x->f.ids[3], &m.p, &m.n, &e_), FA_ERR_NOTFOUND,
              "did not send its shares");
    /* continue the fixture from here (step 2 without its sends) */
    for (int i = 0; i < 3; i++) {
        size_t got = 0;
        assert_int_equal(
            fa_secagg_server_shares_for(x->s, x->f.ids[i], &x->sfy[i].p, &x->sfy[i].n, NULL), 0);
        assert_int_equal(fa_secagg_client_shares(x->c[i], x->sfy[i].p, x->sfy[i].n, 15, NULL), 0);
        assert_int_equal(fa_secagg_client_set_input_ring(x->c[i], x->in[i], LEN, NULL), 0);
        x->up[i].n = (size_t)fa_secagg_client_masked_bytes(x->c[i]);
        x->up[i].p = malloc(x->up[i].n);
        assert_int_equal(fa_secagg_client_masked_next(x->c[i], x->up[i].p, x->up[i].n, &got, NULL),
                         0);
    }
    x->phase = 2;
    fx_check_sum(x);
    fx_del(x);
}

static void test_server_masked_refusals(void **state)
{
    struct fx *x = fx_new();
    uint8_t bad[128];
    fa_error e;
    fx_to(x, 2);
    /* nothing in flight: no chunk, end or abort */
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_masked_chunk(x->s, x->f.ids[0], x->up[0].p, 4, 1, &e),
                     FA_ERR_STATE);
    assert_non_null(strstr(e.msg, "no upload in flight"));
    assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[0], 1, NULL), FA_ERR_STATE);
    assert_int_equal(fa_secagg_server_masked_abort(x->s, x->f.ids[0], 1, NULL), FA_ERR_NOTFOUND);
    S_REFUSED(x, fa_secagg_server_masked_begin(x->s, x->f.ids[3], 1, &e_), FA_ERR_PROTOCOL,
              "sent no shares");
    S_REFUSED(x, fa_secagg_server_masked_begin(x->s, "region-999", 1, &e_), FA_ERR_AUTH,
              "not a member");
    /* begin twice; too many bytes; short end; bad padding bits */
    assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[0], 1, NULL), 0);
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[0], 1, &e), FA_ERR_EXISTS);
    assert_non_null(strstr(e.msg, "already in flight"));
    fa_error_clear(&e);
    assert_int_equal(
        fa_secagg_server_masked_chunk(x->s, x->f.ids[0], x->up[0].p, x->up[0].n + 1, 1, &e),
        FA_ERR_TOOBIG);
    assert_non_null(strstr(e.msg, "but the upload has 73"));
    assert_int_equal(
        fa_secagg_server_masked_chunk(x->s, x->f.ids[0], x->up[0].p, x->up[0].n - 1, 1, NULL), 0);
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[0], 1, &e), FA_ERR_PROTOCOL);
    assert_non_null(strstr(e.msg, "ended after 72 of 73 bytes"));
    memcpy(bad, x->up[0].p, x->up[0].n);
    bad[x->up[0].n - 1] |= 0x80; /* 29 * 20 bits = 580: the last byte has 4 bits of padding */
    assert_int_equal(
        fa_secagg_server_masked_chunk(x->s, x->f.ids[0], bad + x->up[0].n - 1, 1, 1, NULL), 0);
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[0], 1, &e), FA_ERR_PROTOCOL);
    assert_non_null(strstr(e.msg, "padding bits"));
    assert_int_equal(fa_secagg_server_save(x->s, &x->peers.p, &x->peers.n, &e), FA_ERR_STATE);
    /* abort removes it all; the fixture then uploads the real bytes */
    assert_int_equal(fa_secagg_server_masked_abort(x->s, x->f.ids[0], 1, NULL), 0);
    fx_to(x, 3);
    S_REFUSED(x, fa_secagg_server_masked_begin(x->s, x->f.ids[0], 1, &e_), FA_ERR_STATE,
              "masked phase is not open");
    fx_check_sum(x);
    fx_del(x);
}

static void test_server_masked_threshold(void **state)
{
    struct fx *x = fx_new();
    fx_to(x, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[i], 16, NULL), 0);
        assert_int_equal(
            fa_secagg_server_masked_chunk(x->s, x->f.ids[i], x->up[i].p, x->up[i].n, 16, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[i], 16, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[2], 16, NULL), 0);
    assert_int_equal(fa_secagg_server_masked_chunk(x->s, x->f.ids[2], x->up[2].p, 5, 16, NULL), 0);
    /* 2 complete of 3 needed: refused, and the upload in flight survives */
    {
        fa_error e;
        fa_error_clear(&e);
        assert_int_equal(fa_secagg_server_close(x->s, 17, &e), FA_ERR_THRESHOLD);
        assert_non_null(strstr(e.msg, "only 2 clients in the masked phase"));
    }
    assert_int_equal(
        fa_secagg_server_masked_chunk(x->s, x->f.ids[2], x->up[2].p + 5, x->up[2].n - 5, 16, NULL),
        0);
    assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[2], 16, NULL), 0);
    S_REFUSED(x, fa_secagg_server_masked_begin(x->s, x->f.ids[2], 1, &e_), FA_ERR_EXISTS,
              "already received");
    assert_int_equal(fa_secagg_server_close(x->s, 17, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_list(x->s, &x->surv.p, &x->surv.n, NULL), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fa_secagg_client_survivors(x->c[i], x->surv.p, x->surv.n, 18, &x->ss[i].p,
                                                    &x->ss[i].n, NULL),
                         0);
    x->phase = 3;
    fx_check_sum(x);
    fx_del(x);
}

static void test_server_consistency_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fx_to(x, 3);
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a,
           a->signature.data[0] ^= 1, m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "over the survivor set does not verify");
    bfree(&m);
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a,
           a->upload_digest.data[0] ^= 1, m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "differs from the BLAKE3 of the bytes the aggregator received");
    bfree(&m);
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a,
           a->upload_signature.data[0] ^= 1, m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "upload commitment signature");
    bfree(&m);
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a,
           a->upload_signature.len = 63, m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "expected");
    bfree(&m);
    /* region-001's message under region-000's connection */
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], x->ss[1].p, x->ss[1].n, 1, &e_),
              FA_ERR_AUTH, "authenticated as 'region-000'");
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a,
           a->client_id = "region-003", m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[3], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not a survivor");
    bfree(&m);
    MUTATE(Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[0], a, a->round = 8, m);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_REPLAY,
              "round 8");
    bfree(&m);
    assert_int_equal(
        fa_secagg_server_consistency(x->s, x->f.ids[0], x->ss[0].p, x->ss[0].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], x->ss[0].p, x->ss[0].n, 1, &e_),
              FA_ERR_EXISTS, "already received");
    for (int i = 1; i < 3; i++)
        assert_int_equal(
            fa_secagg_server_consistency(x->s, x->f.ids[i], x->ss[i].p, x->ss[i].n, 19, NULL), 0);
    fx_close_consistency(x);
    fx_check_sum(x);
    fx_del(x);
}

/* The commitment is the BLAKE3-256 of the bytes sent, on both sides: the
 * client's signed digest (SignedSurvivors) and the server's record of it;
 * and what the client signed verifies under BLAKE3's label only. */
static void test_commitment_is_blake3_of_the_upload(void **state)
{
    struct fx *x = fx_new();
    fx_to(x, 4);
    for (int i = 0; i < 3; i++) {
        Fedagg__SignedSurvivors *ss =
            fedagg__signed_survivors__unpack(NULL, x->ss[i].n, x->ss[i].p);
        uint8_t want[32], digest[32], sig[64];
        const char *id = NULL;
        int alg = -1, signed_ = 0;
        assert_non_null(ss);
        assert_int_equal(fa_blake3(want, x->up[i].p, x->up[i].n), 0);
        assert_int_equal(ss->upload_digest.len, 32);
        assert_memory_equal(ss->upload_digest.data, want, 32);
        assert_int_equal(fa_secagg_client_upload_digest(x->c[i], digest), 0);
        assert_memory_equal(digest, want, 32);
        assert_int_equal(
            fa_secagg_server_commitment(x->s, (size_t)i, &id, &alg, digest, sig, &signed_), 0);
        assert_string_equal(id, x->f.ids[i]);
        assert_int_equal(alg, FA_SECAGG_UPLOAD_BLAKE3);
        assert_int_equal(signed_, 1);
        assert_memory_equal(digest, want, 32);
        assert_memory_equal(sig, ss->upload_signature.data, 64);
        assert_int_equal(fa_secagg_commitment_verify(x->cfg.federation_id, x->cfg.round,
                                                     x->cfg.attempt, id, FA_SECAGG_UPLOAD_BLAKE3,
                                                     digest, sig, x->f.members[i].identity_pk),
                         0);
        assert_int_equal(fa_secagg_commitment_verify(x->cfg.federation_id, x->cfg.round,
                                                     x->cfg.attempt, id, FA_SECAGG_UPLOAD_SHA256,
                                                     digest, sig, x->f.members[i].identity_pk),
                         FA_ERR_VERIFY);
        fedagg__signed_survivors__free_unpacked(ss, NULL);
    }
    fx_del(x);
}

/* A state an aggregator of secagg.proto version 3 saved, versions 4 and 5,
 * is this version's without the byte after each member's upload digest
 * that says its hash, and every digest in it a SHA-256.  Built here from a
 * state this version saved: the byte removed (the member records are 357
 * bytes apart, checked), the digests of the three uploads replaced by
 * their SHA-256, the version byte set and the checksum made again. */
enum { SRV_REC = 4 + 4 * 32 + 64 + 32 + 1 + 64 + 64 };

static size_t find32(const uint8_t *hay, size_t n, const uint8_t needle[32])
{
    size_t at = SIZE_MAX;
    for (size_t i = 0; i + 32 <= n; i++)
        if (!memcmp(hay + i, needle, 32)) {
            assert_true(at == SIZE_MAX); /* once */
            at = i;
        }
    assert_true(at != SIZE_MAX);
    return at;
}

static void to_sha256_state(const struct fx *x, const uint8_t *blob, size_t len, uint8_t version,
                            struct buf *out, uint8_t sha[3][32])
{
    size_t at[N], o = 0;
    uint8_t d[32];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fa_blake3(d, x->up[i].p, x->up[i].n), 0);
        assert_int_equal(fa_sha256(sha[i], x->up[i].p, x->up[i].n), 0);
        at[i] = find32(blob, len, d);
        assert_int_equal(blob[at[i] + 32], FA_SECAGG_UPLOAD_BLAKE3);
        if (i > 0)
            assert_int_equal(at[i] - at[i - 1], SRV_REC);
    }
    for (int i = 3; i < N; i++) /* the others uploaded nothing: zeros */
        at[i] = at[i - 1] + SRV_REC;
    out->p = malloc(len);
    for (size_t i = 0, c = 0; i < len - 32; i++) {
        if (c < N && i == at[c] + 32) {
            c++;
            continue;
        }
        out->p[o++] = blob[i];
    }
    for (int i = 0; i < 3; i++)
        memcpy(out->p + at[i] - (size_t)i, sha[i], 32);
    out->p[7] = version;
    assert_int_equal(fa_sha256(out->p + o, out->p, o), 0);
    out->n = o + 32;
}

/* Read as such, each commitment is a SHA-256: an upgraded region's BLAKE3
 * is refused naming the SHA-256, nothing changed, and a region that made
 * its commitment with a SHA-256 (as version 3 did) completes the round,
 * its commitment recorded with the hash it was made with.  A state of
 * version 4 laid out as version 6 is refused. */
static void sha256_state_round(int meta)
{
    struct fx *x = fx_new();
    uint8_t *blob, sha[3][32], digest[32], sig[64];
    uint32_t kept[LEN];
    uint64_t gen = 0;
    size_t len;
    struct buf old = {0}, m = {0};
    fa_secagg_server *r = NULL;
    const char *id;
    int alg, signed_, rc;
    fa_error err;

    fx_to(x, 3);
    if (meta) {
        assert_int_equal(fa_secagg_server_save_meta(x->s, &blob, &len, &gen, NULL), 0);
        assert_int_equal(blob[7], 7);
        memcpy(kept, fa_secagg_server_sum_words(x->s), sizeof(kept));
    } else {
        assert_int_equal(fa_secagg_server_save(x->s, &blob, &len, NULL), 0);
        assert_int_equal(blob[7], 6);
    }
    /* the byte left in: the layout is not version 4's */
    old.p = malloc(len);
    memcpy(old.p, blob, len);
    old.p[7] = meta ? 5 : 4;
    assert_int_equal(fa_sha256(old.p + len - 32, old.p, len - 32), 0);
    assert_int_equal(meta
                         ? fa_secagg_server_restore_meta(&r, old.p, len, kept, LEN, &x->cfg,
                                                         x->f.members, N, NULL)
                         : fa_secagg_server_restore(&r, old.p, len, &x->cfg, x->f.members, N, NULL),
                     FA_ERR_CORRUPT);
    assert_null(r);
    bfree(&old);
    to_sha256_state(x, blob, len, meta ? 5 : 4, &old, sha);
    fa_error_clear(&err);
    rc = meta ? fa_secagg_server_restore_meta(&r, old.p, old.n, kept, LEN, &x->cfg, x->f.members, N,
                                              &err)
              : fa_secagg_server_restore(&r, old.p, old.n, &x->cfg, x->f.members, N, &err);
    if (rc != 0)
        fail_msg("restoring the state of version %d: %s", meta ? 5 : 4, err.msg);
    fa_secagg_server_del(x->s);
    x->s = r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(
            fa_secagg_server_commitment(x->s, (size_t)i, &id, &alg, digest, sig, &signed_), 0);
        assert_int_equal(alg, FA_SECAGG_UPLOAD_SHA256);
        assert_memory_equal(digest, sha[i], 32);
        assert_int_equal(signed_, 0);
    }
    S_REFUSED(x, fa_secagg_server_consistency(x->s, x->f.ids[0], x->ss[0].p, x->ss[0].n, 19, &e_),
              FA_ERR_VERIFY, "differs from the SHA-256 of the bytes the aggregator received");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fa_secagg_commitment_sign(x->f.seeds[i], x->cfg.federation_id,
                                                   x->cfg.round, x->cfg.attempt, x->f.ids[i],
                                                   FA_SECAGG_UPLOAD_SHA256, sha[i], sig),
                         0);
        MUTATE(
            Fedagg__SignedSurvivors, fedagg__signed_survivors, x->ss[i], a,
            (memcpy(a->upload_digest.data, sha[i], 32), memcpy(a->upload_signature.data, sig, 64)),
            m);
        assert_int_equal(fa_secagg_server_consistency(x->s, x->f.ids[i], m.p, m.n, 19, NULL), 0);
        bfree(&m);
        assert_int_equal(
            fa_secagg_server_commitment(x->s, (size_t)i, &id, &alg, digest, sig, &signed_), 0);
        assert_int_equal(alg, FA_SECAGG_UPLOAD_SHA256);
        assert_int_equal(signed_, 1);
        assert_int_equal(fa_secagg_commitment_verify(x->cfg.federation_id, x->cfg.round,
                                                     x->cfg.attempt, id, FA_SECAGG_UPLOAD_SHA256,
                                                     digest, sig, x->f.members[i].identity_pk),
                         0);
    }
    fx_close_consistency(x);
    fx_check_sum(x);
    bfree(&old);
    free(blob);
    fx_del(x);
}

static void test_server_state_of_sha256_digests(void **state)
{
    sha256_state_round(0);
}

static void test_server_meta_state_of_sha256_digests(void **state)
{
    sha256_state_round(1);
}

static void test_server_unmask_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fx_to(x, 4);
    MUTATE(Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a, a->n_self_mask_shares--, m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "2 self-mask and 0 key shares, expected 3 and 0");
    bfree(&m);
    /* a key share for a survivor: revealing both for region-001 */
    MUTATE(
        Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a,
        {
            a->key_shares = a->self_mask_shares;
            a->n_key_shares = 1;
            a->self_mask_shares++;
            a->n_self_mask_shares--;
        },
        m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "expected 3 and 0");
    bfree(&m);
    MUTATE(Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a,
           a->self_mask_shares[1]->owner = "region-003", m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "unexpected or repeated self-mask share for 'region-003'");
    bfree(&m);
    MUTATE(Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a,
           a->self_mask_shares[1]->owner = a->self_mask_shares[0]->owner, m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "repeated");
    bfree(&m);
    MUTATE(Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a,
           a->self_mask_shares[1]->share.len = 31, m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not 32");
    bfree(&m);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[3], x->um[0].p, x->um[0].n, 1, &e_),
              FA_ERR_AUTH, "authenticated as 'region-003'");
    /* a bad share value: the rebuilt seed fails its commitment, state unchanged */
    MUTATE(Fedagg__UnmaskShares, fedagg__unmask_shares, x->um[0], a,
           a->self_mask_shares[1]->share.data[3] ^= 1, m);
    assert_int_equal(fa_secagg_server_unmask(x->s, x->f.ids[0], m.p, m.n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_unmask(x->s, x->f.ids[0], x->um[0].p, x->um[0].n, 1, &e_),
              FA_ERR_EXISTS, "already received");
    for (int i = 1; i < 3; i++)
        assert_int_equal(
            fa_secagg_server_unmask(x->s, x->f.ids[i], x->um[i].p, x->um[i].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_close(x->s, 2, &e_), FA_ERR_VERIFY,
              "self-mask seed of survivor 'region-001' cannot be rebuilt from its 3 shares");
    bfree(&m);
    fx_del(x);
}

static void test_server_unmask_threshold(void **state)
{
    struct fx *x = fx_new();
    uint32_t got[LEN];
    fx_to(x, 4);
    for (int i = 0; i < 2; i++)
        assert_int_equal(
            fa_secagg_server_unmask(x->s, x->f.ids[i], x->um[i].p, x->um[i].n, 1, NULL), 0);
    S_REFUSED(x, fa_secagg_server_close(x->s, 2, &e_), FA_ERR_THRESHOLD, "unmask phase");
    assert_int_equal(fa_secagg_server_result_ring(x->s, got, LEN, NULL), FA_ERR_STATE);
    assert_int_equal(fa_secagg_server_unmask(x->s, x->f.ids[2], x->um[2].p, x->um[2].n, 1, NULL),
                     0);
    x->phase = 5;
    assert_int_equal(fa_secagg_server_close(x->s, 23, NULL), 0);
    fx_check_sum(x);
    {
        fa_error e;
        fa_error_clear(&e);
        assert_int_equal(fa_secagg_server_close(x->s, 24, &e), FA_ERR_STATE);
        assert_int_equal(fa_secagg_server_result_ring(x->s, got, LEN - 1, NULL), FA_ERR_INVAL);
    }
    fx_del(x);
}

/* ---- client ------------------------------------------------------------------------ */

static void test_client_peer_list_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fa_secagg_client *c;
    const uint8_t junk[] = {0x0a, 0x05};
    x->phase = 1;
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            fa_secagg_server_advertise(x->s, x->f.ids[i], x->adv[i].p, x->adv[i].n, 10, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
    assert_int_equal(fa_secagg_server_peer_list(x->s, &x->peers.p, &x->peers.n, NULL), 0);
    c = x->c[0];
    C_REFUSED(c, fa_secagg_client_peer_list(c, junk, sizeof(junk), 1, &e_), FA_ERR_PARSE,
              "not a valid protobuf");
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->threshold = 2, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "announces threshold 2");
    bfree(&m);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->ring_bits = 32, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL, "ring bits 32");
    bfree(&m);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->attempt = 3, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_REPLAY, "attempt 3");
    bfree(&m);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->n_peers = 2, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_THRESHOLD,
              "2 clients advertised keys, threshold is 3");
    bfree(&m);
    MUTATE(
        Fedagg__PeerList, fedagg__peer_list, x->peers, a,
        {
            a->peers++;
            a->n_peers--;
        },
        m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "this client is not in it");
    bfree(&m);
    MUTATE(
        Fedagg__PeerList, fedagg__peer_list, x->peers, a,
        {
            Fedagg__AdvertiseKeys *t = a->peers[1];
            a->peers[1] = a->peers[2];
            a->peers[2] = t;
        },
        m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not sorted or repeated");
    bfree(&m);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->peers[2]->s_pk.data[1] ^= 1, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "advertisement of 'region-002' is not signed");
    bfree(&m);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->peers[2]->client_id = "region-9",
           m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not a federation member");
    bfree(&m);
    /* the server swaps in region-003's keys under region-002's name: the
     * signature check catches it */
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a,
           a->peers[2]->c_pk.data = a->peers[3]->c_pk.data, m);
    C_REFUSED(c, fa_secagg_client_peer_list(c, m.p, m.n, 1, &e_), FA_ERR_VERIFY, "not signed");
    bfree(&m);
    C_REFUSED(c, fa_secagg_client_share_keys(c, &m.p, &m.n, &e_), FA_ERR_STATE,
              "the client is at: created");
    {
        uint8_t one[1];
        C_REFUSED(c, fa_secagg_client_masked_next(c, one, 1, &m.n, &e_), FA_ERR_STATE, "not now");
    }
    x->phase = 0;
    fa_secagg_server_del(x->s);
    assert_int_equal(fa_secagg_server_new(&x->s, &x->cfg, x->f.members, N, NULL), 0);
    bfree(&x->peers);
    fx_check_sum(x);
    fx_del(x);
}

/* The model-inconsistency attack (Pasquini, Francati, Ateniese, CCS 2022):
 * the aggregator served region-002 another model, and region-002 signed the
 * digest of what it got.  The server (the caller decides which digests it
 * accepts) passes it on; every client refuses the PeerList naming the peer
 * and both digests, before a single share leaves, and changes nothing. */
static void test_client_peer_list_other_model(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0}, pl = {0};
    fa_secagg_client *victim;
    fa_secagg_config cfg2 = x->cfg;
    uint8_t got[32];
    char want[160];

    cfg2.model_sha256[0] ^= 0x80;
    assert_int_equal(fa_secagg_client_new(&victim, &cfg2, x->f.seeds[2], x->f.ids[2], x->f.members,
                                          N, &x->rng, NULL),
                     0);
    assert_int_equal(fa_secagg_client_advertise(victim, &m.p, &m.n, NULL), 0);
    assert_int_equal(fa_secagg_advertise_model(m.p, m.n, got), 0);
    assert_memory_equal(got, cfg2.model_sha256, 32);
    for (int i = 0; i < 4; i++) {
        const struct buf *a = i == 2 ? &m : &x->adv[i];
        assert_int_equal(fa_secagg_server_advertise(x->s, x->f.ids[i], a->p, a->n, 10, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
    assert_int_equal(fa_secagg_server_peer_list(x->s, &pl.p, &pl.n, NULL), 0);
    {
        /* the PeerList shows what each region signed */
        Fedagg__PeerList *p = fedagg__peer_list__unpack(NULL, pl.n, pl.p);
        assert_non_null(p);
        assert_int_equal(p->peers[2]->model_sha256.len, 32);
        assert_memory_equal(p->peers[2]->model_sha256.data, cfg2.model_sha256, 32);
        assert_memory_equal(p->peers[1]->model_sha256.data, x->cfg.model_sha256, 32);
        fedagg__peer_list__free_unpacked(p, NULL);
    }
    snprintf(want, sizeof(want), "'region-002' signed its advertisement for model %02x%02x",
             cfg2.model_sha256[0], cfg2.model_sha256[1]);
    for (int i = 0; i < 4; i++) {
        if (i == 2)
            continue;
        C_REFUSED(x->c[i], fa_secagg_client_peer_list(x->c[i], pl.p, pl.n, 12, &e_), FA_ERR_VERIFY,
                  want);
        C_REFUSED(x->c[i], fa_secagg_client_peer_list(x->c[i], pl.p, pl.n, 12, &e_), FA_ERR_VERIFY,
                  "the aggregator served the regions different models");
    }
    /* the region that got the other model refuses too: its peers signed the
     * common one (the first of them is named) */
    C_REFUSED(victim, fa_secagg_client_peer_list(victim, pl.p, pl.n, 12, &e_), FA_ERR_VERIFY,
              "'region-000' signed its advertisement for model");
    C_REFUSED(victim, fa_secagg_client_share_keys(victim, &m.p, &m.n, &e_), FA_ERR_STATE,
              "the client is at: created");
    bfree(&m);
    bfree(&pl);
    fa_secagg_client_del(victim);
    /* the refused clients take the next PeerList, of one model, as ever */
    x->phase = 0;
    fa_secagg_server_del(x->s);
    assert_int_equal(fa_secagg_server_new(&x->s, &x->cfg, x->f.members, N, NULL), 0);
    fx_check_sum(x);
    fx_del(x);
}

/* The digest is signed: changed in flight, neither the server nor a client
 * accepts the advertisement; an advertisement without one (an older client)
 * is refused by size; the consistency-check signature covers it too. */
static void test_model_digest_signed(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fa_secagg_cfg sc;
    uint8_t *sm = NULL, sig[64], other[32], got[32];
    size_t sm_len = 0;
    char *ids[3] = {x->f.ids[0], x->f.ids[1], x->f.ids[2]};

    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a,
           a->model_sha256.data[31] ^= 1, m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "signature does not verify");
    bfree(&m);
    MUTATE(Fedagg__AdvertiseKeys, fedagg__advertise_keys, x->adv[0], a, a->model_sha256.len = 0, m);
    S_REFUSED(x, fa_secagg_server_advertise(x->s, x->f.ids[0], m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "model_sha256 must be 32 bytes");
    assert_int_equal(fa_secagg_advertise_model(m.p, m.n, got), FA_ERR_PROTOCOL);
    bfree(&m);
    {
        const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
        assert_int_equal(fa_secagg_advertise_model(junk, sizeof(junk), got), FA_ERR_PARSE);
    }
    /* in the PeerList */
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            fa_secagg_server_advertise(x->s, x->f.ids[i], x->adv[i].p, x->adv[i].n, 10, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 11, NULL), 0);
    assert_int_equal(fa_secagg_server_peer_list(x->s, &x->peers.p, &x->peers.n, NULL), 0);
    MUTATE(Fedagg__PeerList, fedagg__peer_list, x->peers, a, a->peers[3]->model_sha256.data[0] ^= 1,
           m);
    C_REFUSED(x->c[0], fa_secagg_client_peer_list(x->c[0], m.p, m.n, 12, &e_), FA_ERR_VERIFY,
              "the advertisement of 'region-003' is not signed by its identity key");
    bfree(&m);
    /* the consistency check: signed over one model, verified over another */
    assert_int_equal(fa_secagg_cfg_init(&sc, &x->cfg, NULL), 0);
    assert_int_equal(
        fa_secagg_msg_survivors(&sc, x->f.ids[1], x->cfg.model_sha256, ids, 3, &sm, &sm_len), 0);
    assert_int_equal(fa_identity_sign(x->f.seeds[1], sm, sm_len, sig), 0);
    assert_int_equal(fa_identity_verify(x->f.members[1].identity_pk, sm, sm_len, sig), 0);
    free(sm);
    memcpy(other, x->cfg.model_sha256, 32);
    other[7] ^= 0x10;
    assert_int_equal(fa_secagg_msg_survivors(&sc, x->f.ids[1], other, ids, 3, &sm, &sm_len), 0);
    assert_int_equal(fa_identity_verify(x->f.members[1].identity_pk, sm, sm_len, sig),
                     FA_ERR_VERIFY);
    free(sm);
    /* nothing was changed: the round completes */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fa_secagg_client_peer_list(x->c[i], x->peers.p, x->peers.n, 12, NULL), 0);
        assert_int_equal(fa_secagg_client_share_keys(x->c[i], &x->sk[i].p, &x->sk[i].n, NULL), 0);
    }
    x->phase = 1;
    fx_check_sum(x);
    fx_del(x);
}

static void test_client_shares_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0};
    fa_secagg_client *c;
    fx_to(x, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            fa_secagg_server_share_keys(x->s, x->f.ids[i], x->sk[i].p, x->sk[i].n, 13, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 14, NULL), 0);
    assert_int_equal(
        fa_secagg_server_shares_for(x->s, x->f.ids[0], &x->sfy[0].p, &x->sfy[0].n, NULL), 0);
    c = x->c[0];
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
           a->shares[0]->ciphertext.data[40] ^= 1, m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_VERIFY,
              "from 'region-001' does not decrypt");
    bfree(&m);
    /* a ciphertext relabelled as from another sender: the AD differs */
    MUTATE(
        Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
        {
            ProtobufCBinaryData t = a->shares[0]->ciphertext;
            a->shares[0]->ciphertext = a->shares[1]->ciphertext;
            a->shares[1]->ciphertext = t;
        },
        m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_VERIFY, "does not decrypt");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
           a->shares[1]->from = a->shares[0]->from, m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL, "or repeated");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
           a->shares[1]->to = "region-001", m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not for this client");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
           a->shares[1]->from = "region-004", m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL,
              "not from a peer of U1");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a,
           a->shares[1]->ciphertext.len = 104, m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_PROTOCOL, "not 105");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a, a->n_shares = 1, m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_THRESHOLD,
              "shares from 2 clients (itself included), threshold is 3");
    bfree(&m);
    MUTATE(Fedagg__SharesForYou, fedagg__shares_for_you, x->sfy[0], a, a->round = 1, m);
    C_REFUSED(c, fa_secagg_client_shares(c, m.p, m.n, 1, &e_), FA_ERR_REPLAY, "round 1");
    bfree(&m);
    /* input refusals */
    {
        uint32_t q[LEN + 1] = {0};
        float xf[LEN] = {0};
        C_REFUSED(c, fa_secagg_client_set_input_ring(c, q, LEN + 1, &e_), FA_ERR_INVAL,
                  "30 ring elements, expected 29");
        C_REFUSED(c, fa_secagg_client_set_input_f32(c, xf, LEN, 0.5, &e_), FA_ERR_INVAL,
                  "expected 28");
        C_REFUSED(c, fa_secagg_client_set_input_f32(c, xf, LEN - 1, 1.5, &e_), FA_ERR_INVAL,
                  "weight 1.5 is not in [0, 1]");
        xf[17] = 1.0f / 0.0f;
        C_REFUSED(c, fa_secagg_client_set_input_f32(c, xf, LEN - 1, 0.5, &e_), FA_ERR_INVAL,
                  "value 17 is inf");
    }
    x->phase = 2;
    bfree(&x->sfy[0]);
    for (int i = 0; i < 3; i++) {
        size_t got = 0;
        assert_int_equal(
            fa_secagg_server_shares_for(x->s, x->f.ids[i], &x->sfy[i].p, &x->sfy[i].n, NULL), 0);
        assert_int_equal(fa_secagg_client_shares(x->c[i], x->sfy[i].p, x->sfy[i].n, 15, NULL), 0);
        assert_int_equal(fa_secagg_client_set_input_ring(x->c[i], x->in[i], LEN, NULL), 0);
        x->up[i].n = (size_t)fa_secagg_client_masked_bytes(x->c[i]);
        x->up[i].p = malloc(x->up[i].n);
        assert_int_equal(fa_secagg_client_masked_next(x->c[i], x->up[i].p, x->up[i].n, &got, NULL),
                         0);
    }
    C_REFUSED(x->c[0], fa_secagg_client_shares(x->c[0], x->sfy[0].p, x->sfy[0].n, 1, &e_),
              FA_ERR_STATE, "not now");
    /* a different input under the same masks: refused */
    {
        uint32_t q[LEN];
        memcpy(q, x->in[0], sizeof(q));
        q[3] ^= 1;
        C_REFUSED(x->c[0], fa_secagg_client_set_input_ring(x->c[0], q, LEN, &e_), FA_ERR_STATE,
                  "abandon this attempt");
    }
    fx_check_sum(x);
    fx_del(x);
}

static void test_client_survivor_refusals(void **state)
{
    struct fx *x = fx_new();
    struct buf m = {0}, out = {0};
    fa_secagg_client *c;
    fx_to(x, 2);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fa_secagg_server_masked_begin(x->s, x->f.ids[i], 16, NULL), 0);
        assert_int_equal(
            fa_secagg_server_masked_chunk(x->s, x->f.ids[i], x->up[i].p, x->up[i].n, 16, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_end(x->s, x->f.ids[i], 16, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_close(x->s, 17, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_list(x->s, &x->surv.p, &x->surv.n, NULL), 0);
    c = x->c[0];
    MUTATE(
        Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a,
        {
            a->survivors++;
            a->n_survivors--;
        },
        m);
    C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_PROTOCOL,
              "not among the survivors");
    bfree(&m);
    MUTATE(Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a, a->n_survivors = 2, m);
    C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_THRESHOLD,
              "2 survivors, threshold is 3");
    bfree(&m);
    MUTATE(Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a, a->survivors[2] = "region-003",
           m);
    C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_PROTOCOL,
              "'region-003' is a survivor but sent no shares");
    bfree(&m);
    MUTATE(Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a, a->survivors[2] = "region-000",
           m);
    C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_PROTOCOL,
              "not sorted and unique");
    bfree(&m);
    MUTATE(Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a, a->attempt = 9, m);
    C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_REPLAY,
              "attempt 9");
    bfree(&m);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fa_secagg_client_survivors(x->c[i], x->surv.p, x->surv.n, 18, &x->ss[i].p,
                                                    &x->ss[i].n, NULL),
                         0);
    /* a retry gives the same answer; another U3 afterwards is refused */
    assert_int_equal(fa_secagg_client_survivors(c, x->surv.p, x->surv.n, 1, &out.p, &out.n, NULL),
                     0);
    bfree(&out);
    {
        /* U3 = {000, 001, 002, 003}: signed set differs */
        MUTATE(Fedagg__SurvivorList, fedagg__survivor_list, x->surv, a, a->n_survivors = 2, m);
        C_REFUSED(c, fa_secagg_client_survivors(c, m.p, m.n, 1, &out.p, &out.n, &e_),
                  FA_ERR_THRESHOLD, "threshold");
        bfree(&m);
    }
    x->phase = 3;
    fx_to(x, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            fa_secagg_server_consistency(x->s, x->f.ids[i], x->ss[i].p, x->ss[i].n, 19, NULL), 0);
    assert_int_equal(fa_secagg_server_close(x->s, 20, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_signatures(x->s, &x->sigs.p, &x->sigs.n, NULL), 0);
    MUTATE(Fedagg__SurvivorSignatures, fedagg__survivor_signatures, x->sigs, a,
           a->signatures[1]->signature.data[9] ^= 1, m);
    C_REFUSED(c, fa_secagg_client_signatures(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_VERIFY,
              "signature of 'region-001' over the survivor set does not verify");
    bfree(&m);
    MUTATE(Fedagg__SurvivorSignatures, fedagg__survivor_signatures, x->sigs, a, a->n_signatures = 2,
           m);
    C_REFUSED(c, fa_secagg_client_signatures(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_THRESHOLD,
              "2 signatures, threshold is 3");
    bfree(&m);
    MUTATE(Fedagg__SurvivorSignatures, fedagg__survivor_signatures, x->sigs, a,
           a->signatures[1]->client_id = "region-003", m);
    C_REFUSED(c, fa_secagg_client_signatures(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_PROTOCOL,
              "'region-003', who is not a survivor");
    bfree(&m);
    MUTATE(Fedagg__SurvivorSignatures, fedagg__survivor_signatures, x->sigs, a,
           a->signatures[1] = a->signatures[0], m);
    C_REFUSED(c, fa_secagg_client_signatures(c, m.p, m.n, 1, &out.p, &out.n, &e_), FA_ERR_PROTOCOL,
              "signed twice");
    bfree(&m);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fa_secagg_client_signatures(x->c[i], x->sigs.p, x->sigs.n, 21, &x->um[i].p,
                                                     &x->um[i].n, NULL),
                         0);
    x->phase = 4;
    /* never both shares of one peer; a retry reveals exactly the same */
    {
        Fedagg__UnmaskShares *u = fedagg__unmask_shares__unpack(NULL, x->um[0].n, x->um[0].p);
        assert_non_null(u);
        assert_int_equal(u->n_self_mask_shares, 3);
        assert_int_equal(u->n_key_shares, 0);
        for (size_t i = 0; i < u->n_self_mask_shares; i++)
            for (size_t j = 0; j < u->n_key_shares; j++)
                assert_string_not_equal(u->self_mask_shares[i]->owner, u->key_shares[j]->owner);
        fedagg__unmask_shares__free_unpacked(u, NULL);
        assert_int_equal(
            fa_secagg_client_signatures(c, x->sigs.p, x->sigs.n, 1, &out.p, &out.n, NULL), 0);
        assert_int_equal(out.n, x->um[0].n);
        assert_memory_equal(out.p, x->um[0].p, out.n);
        bfree(&out);
    }
    fx_check_sum(x);
    fx_del(x);
}

/* A dropout of U2 \ U3: a survivor reveals its key share only, never its
 * self-mask share (Bonawitz et al. 2017, round 4); after signing U3 the
 * client refuses any other U3. */
static void test_client_reveals_one_share_per_peer(void **state)
{
    th_fed f;
    th_rng rr;
    fa_secagg_rng rng = {th_rng_fill, &rr};
    fa_secagg_config cfg = th_cfg(3, 20, 40, 0);
    fa_secagg_server *s;
    fa_secagg_client *c[4];
    uint32_t in[40] = {0};
    uint8_t up[200];
    struct buf m = {0}, r = {0}, ss[4] = {{0}}, um = {0};
    size_t got;

    th_fed_init(&f, 4, 4);
    th_rng_init(&rr, 4);
    assert_int_equal(fa_secagg_server_new(&s, &cfg, f.members, 4, NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(
            fa_secagg_client_new(&c[i], &cfg, f.seeds[i], f.ids[i], f.members, 4, &rng, NULL), 0);
        assert_int_equal(fa_secagg_client_advertise(c[i], &m.p, &m.n, NULL), 0);
        assert_int_equal(fa_secagg_server_advertise(s, f.ids[i], m.p, m.n, 1, NULL), 0);
        bfree(&m);
    }
    assert_int_equal(fa_secagg_server_close(s, 2, NULL), 0);
    assert_int_equal(fa_secagg_server_peer_list(s, &r.p, &r.n, NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fa_secagg_client_peer_list(c[i], r.p, r.n, 3, NULL), 0);
        assert_int_equal(fa_secagg_client_share_keys(c[i], &m.p, &m.n, NULL), 0);
        assert_int_equal(fa_secagg_server_share_keys(s, f.ids[i], m.p, m.n, 3, NULL), 0);
        bfree(&m);
    }
    bfree(&r);
    assert_int_equal(fa_secagg_server_close(s, 4, NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fa_secagg_server_shares_for(s, f.ids[i], &r.p, &r.n, NULL), 0);
        assert_int_equal(fa_secagg_client_shares(c[i], r.p, r.n, 5, NULL), 0);
        bfree(&r);
        assert_int_equal(fa_secagg_client_set_input_ring(c[i], in, 40, NULL), 0);
        assert_int_equal(fa_secagg_client_masked_next(c[i], up, sizeof(up), &got, NULL), 0);
        if (i == 3)
            continue; /* region-003 drops out here */
        assert_int_equal(fa_secagg_server_masked_begin(s, f.ids[i], 6, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_chunk(s, f.ids[i], up, got, 6, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_end(s, f.ids[i], 6, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_close(s, 7, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_list(s, &r.p, &r.n, NULL), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fa_secagg_client_survivors(c[i], r.p, r.n, 8, &ss[i].p, &ss[i].n, NULL),
                         0);
        assert_int_equal(fa_secagg_server_consistency(s, f.ids[i], ss[i].p, ss[i].n, 8, NULL), 0);
    }
    /* the server now claims region-003 survived too */
    static char *four[] = {"region-000", "region-001", "region-002", "region-003"};
    MUTATE(
        Fedagg__SurvivorList, fedagg__survivor_list, r, a,
        {
            a->survivors = four;
            a->n_survivors = 4;
        },
        m);
    C_REFUSED(c[0], fa_secagg_client_survivors(c[0], m.p, m.n, 1, &um.p, &um.n, &e_),
              FA_ERR_PROTOCOL, "differs from the survivor set it already signed");
    bfree(&m);
    bfree(&r);
    assert_int_equal(fa_secagg_server_close(s, 9, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_signatures(s, &r.p, &r.n, NULL), 0);
    for (int i = 0; i < 3; i++) {
        Fedagg__UnmaskShares *u;
        assert_int_equal(fa_secagg_client_signatures(c[i], r.p, r.n, 10, &um.p, &um.n, NULL), 0);
        u = fedagg__unmask_shares__unpack(NULL, um.n, um.p);
        assert_non_null(u);
        assert_int_equal(u->n_self_mask_shares, 3);
        assert_int_equal(u->n_key_shares, 1);
        assert_string_equal(u->key_shares[0]->owner, "region-003");
        for (size_t j = 0; j < u->n_self_mask_shares; j++)
            assert_string_not_equal(u->self_mask_shares[j]->owner, "region-003");
        fedagg__unmask_shares__free_unpacked(u, NULL);
        assert_int_equal(fa_secagg_server_unmask(s, f.ids[i], um.p, um.n, 10, NULL), 0);
        bfree(&um);
    }
    bfree(&r);
    assert_int_equal(fa_secagg_server_close(s, 11, NULL), 0);
    {
        uint32_t sum[40];
        assert_int_equal(fa_secagg_server_result_ring(s, sum, 40, NULL), 0);
        for (int j = 0; j < 40; j++)
            assert_int_equal(sum[j], 0);
    }
    for (int i = 0; i < 4; i++) {
        bfree(&ss[i]);
        fa_secagg_client_del(c[i]);
    }
    fa_secagg_server_del(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_advertise_refusals),
        cmocka_unit_test(test_server_readvertise),
        cmocka_unit_test(test_server_share_refusals),
        cmocka_unit_test(test_server_masked_refusals),
        cmocka_unit_test(test_server_masked_threshold),
        cmocka_unit_test(test_server_consistency_refusals),
        cmocka_unit_test(test_server_unmask_refusals),
        cmocka_unit_test(test_server_unmask_threshold),
        cmocka_unit_test(test_client_peer_list_refusals),
        cmocka_unit_test(test_client_peer_list_other_model),
        cmocka_unit_test(test_model_digest_signed),
        cmocka_unit_test(test_client_shares_refusals),
        cmocka_unit_test(test_commitment_is_blake3_of_the_upload),
        cmocka_unit_test(test_server_state_of_sha256_digests),
        cmocka_unit_test(test_server_meta_state_of_sha256_digests),
        cmocka_unit_test(test_client_survivor_refusals),
        cmocka_unit_test(test_client_reveals_one_share_per_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
