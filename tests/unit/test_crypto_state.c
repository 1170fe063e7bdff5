/* Crash recovery: a client or the server saved at any step, freed, restored
 * and driven on gives the same exact sum; a restored client masks only the
 * input it was bound to; damaged or foreign state is refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "crypto/secagg_internal.h"
#include "test_crypto_harness.h"

#define N 4
#define LEN 50
#define K 22

struct world {
    th_fed f;
    fa_secagg_config cfg;
    th_rng rr;
    fa_secagg_rng rng;
    fa_secagg_server *s;
    fa_secagg_client *c[N];
    uint32_t in[N][LEN];
    /* the sum as a caller of fa_secagg_server_save_meta keeps it */
    uint32_t kept[LEN];
    uint64_t kept_gen;
};

/* 1: the server saves with fa_secagg_server_save_meta, and the test keeps
 * the sum as the aggregator does (at every phase close, only when its
 * generation changed). */
static int server_meta;

static void crash_client(struct world *w, int i)
{
    uint8_t *blob, d0[32], d1[32];
    size_t len;
    assert_int_equal(fa_secagg_client_state_digest(w->c[i], d0), 0);
    assert_int_equal(fa_secagg_client_save(w->c[i], &blob, &len, NULL), 0);
    fa_secagg_client_del(w->c[i]);
    w->c[i] = NULL;
    assert_int_equal(fa_secagg_client_restore(&w->c[i], blob, len, w->f.seeds[i], w->f.members, N,
                                              &w->rng, NULL),
                     0);
    assert_int_equal(fa_secagg_client_state_digest(w->c[i], d1), 0);
    assert_memory_equal(d0, d1, 32);
    free(blob);
}

/* A save_meta as the aggregator makes it at a phase close: the sum is
 * copied when the state needs a generation the caller does not have yet,
 * which is always the current one (after unmasking, the masked sum's,
 * kept since the masked phase closed).  Returns the state. */
static uint8_t *save_meta(struct world *w, size_t *len, uint64_t *need)
{
    uint8_t *blob;
    assert_int_equal(fa_secagg_server_save_meta(w->s, &blob, len, need, NULL), 0);
    if (*need != 0 && *need != w->kept_gen) {
        assert_int_equal(*need, fa_secagg_server_sum_generation(w->s));
        memcpy(w->kept, fa_secagg_server_sum_words(w->s), sizeof(w->kept));
        w->kept_gen = *need;
    }
    return blob;
}

/* The aggregator saves at every phase close. */
static void phase_closed(struct world *w)
{
    uint8_t *blob;
    size_t len;
    uint64_t need;
    if (!server_meta)
        return;
    blob = save_meta(w, &len, &need);
    free(blob);
}

static void crash_server_meta(struct world *w)
{
    uint8_t *blob, *again;
    size_t len, len2;
    uint64_t need, need2;
    fa_error e;

    blob = save_meta(w, &len, &need);
    fa_secagg_server_del(w->s);
    w->s = NULL;
    if (need != 0) { /* the sum is needed */
        fa_error_clear(&e);
        assert_int_equal(
            fa_secagg_server_restore_meta(&w->s, blob, len, NULL, 0, &w->cfg, w->f.members, N, &e),
            FA_ERR_INVAL);
        assert_non_null(strstr(e.msg, "needs its sum"));
        assert_int_equal(fa_secagg_server_restore_meta(&w->s, blob, len, w->kept, LEN - 1, &w->cfg,
                                                       w->f.members, N, NULL),
                         FA_ERR_INVAL);
    }
    assert_int_equal(fa_secagg_server_restore_meta(&w->s, blob, len, need ? w->kept : NULL,
                                                   need ? LEN : 0, &w->cfg, w->f.members, N, NULL),
                     0);
    again = save_meta(w, &len2, &need2);
    assert_int_equal(need, need2);
    assert_int_equal(len, len2);
    assert_memory_equal(blob, again, len);
    free(blob);
    free(again);
}

static void crash_server(struct world *w)
{
    uint8_t *blob, *again;
    size_t len, len2;
    if (server_meta) {
        crash_server_meta(w);
        return;
    }
    assert_int_equal(fa_secagg_server_save(w->s, &blob, &len, NULL), 0);
    fa_secagg_server_del(w->s);
    w->s = NULL;
    assert_int_equal(fa_secagg_server_restore(&w->s, blob, len, &w->cfg, w->f.members, N, NULL), 0);
    assert_int_equal(fa_secagg_server_save(w->s, &again, &len2, NULL), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(blob, again, len);
    free(blob);
    free(again);
}

/* One round with every client and the server crashing at step `at` (0..6;
 * -1 = never).  Client 0 is always the one crashing; it also crashes in the
 * middle of its upload when at == 3 and resends from the start. */
static void round_with_crash(int at, int crash_srv)
{
    struct world w;
    uint8_t *m, *r, up[N][256];
    size_t len, rlen, got[N];
    uint32_t sum[LEN];

    memset(&w, 0, sizeof(w));
    th_fed_init(&w.f, N, 12);
    w.cfg = th_cfg(3, K, LEN, 0);
    th_rng_init(&w.rr, 13 + (uint64_t)at);
    w.rng.fill = th_rng_fill;
    w.rng.ctx = &w.rr;
    th_rng_fill(&w.rr, w.in, sizeof(w.in));
    assert_int_equal(fa_secagg_server_new(&w.s, &w.cfg, w.f.members, N, NULL), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(fa_secagg_client_new(&w.c[i], &w.cfg, w.f.seeds[i], w.f.ids[i],
                                              w.f.members, N, &w.rng, NULL),
                         0);
#define STEP(k)                                                                                    \
    do {                                                                                           \
        if (at == (k))                                                                             \
            crash_client(&w, 0);                                                                   \
        if (crash_srv && at == (k))                                                                \
            crash_server(&w);                                                                      \
    } while (0)
    STEP(0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_client_advertise(w.c[i], &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_advertise(w.s, w.f.ids[i], m, len, 1, NULL), 0);
        free(m);
    }
    assert_int_equal(fa_secagg_server_close(w.s, 2, NULL), 0);
    phase_closed(&w);
    STEP(1);
    assert_int_equal(fa_secagg_server_peer_list(w.s, &r, &rlen, NULL), 0);
    for (int i = 0; i < N; i++) {
        uint8_t *m2;
        size_t len2;
        assert_int_equal(fa_secagg_client_peer_list(w.c[i], r, rlen, 3, NULL), 0);
        assert_int_equal(fa_secagg_client_share_keys(w.c[i], &m, &len, NULL), 0);
        if (i == 0 && at == 2) {
            /* crash after producing ShareKeys: the retry sends the same bytes */
            crash_client(&w, 0);
            assert_int_equal(fa_secagg_client_share_keys(w.c[0], &m2, &len2, NULL), 0);
            assert_int_equal(len, len2);
            assert_memory_equal(m, m2, len);
            free(m2);
        }
        assert_int_equal(fa_secagg_server_share_keys(w.s, w.f.ids[i], m, len, 3, NULL), 0);
        free(m);
    }
    free(r);
    assert_int_equal(fa_secagg_server_close(w.s, 4, NULL), 0);
    phase_closed(&w);
    if (crash_srv && at == 2)
        crash_server(&w);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_server_shares_for(w.s, w.f.ids[i], &r, &rlen, NULL), 0);
        assert_int_equal(fa_secagg_client_shares(w.c[i], r, rlen, 5, NULL), 0);
        free(r);
        assert_int_equal(fa_secagg_client_set_input_ring(w.c[i], w.in[i], LEN, NULL), 0);
    }
    if (at == 3) {
        /* client 0 sends half its upload and crashes; the connection drops */
        assert_int_equal(fa_secagg_client_masked_next(w.c[0], up[0], 60, &got[0], NULL), 0);
        assert_int_equal(fa_secagg_server_masked_begin(w.s, w.f.ids[0], 6, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_chunk(w.s, w.f.ids[0], up[0], got[0], 6, NULL), 0);
        crash_client(&w, 0);
        assert_int_equal(fa_secagg_server_masked_abort(w.s, w.f.ids[0], 6, NULL), 0);
        if (crash_srv)
            crash_server(&w);
        /* the restored client needs its input again: another one is refused */
        {
            uint32_t other[LEN];
            memcpy(other, w.in[0], sizeof(other));
            other[LEN - 1]++;
            assert_int_equal(fa_secagg_client_masked_next(w.c[0], up[0], 10, &got[0], NULL),
                             FA_ERR_STATE);
            assert_int_equal(fa_secagg_client_set_input_ring(w.c[0], other, LEN, NULL),
                             FA_ERR_STATE);
            assert_int_equal(fa_secagg_client_set_input_ring(w.c[0], w.in[0], LEN, NULL), 0);
        }
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_client_masked_next(w.c[i], up[i], sizeof(up[i]), &got[i], NULL),
                         0);
        assert_int_equal(got[i], fa_secagg_masked_bytes(LEN, K));
        assert_int_equal(fa_secagg_server_masked_begin(w.s, w.f.ids[i], 6, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_chunk(w.s, w.f.ids[i], up[i], got[i], 6, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_end(w.s, w.f.ids[i], 6, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_close(w.s, 7, NULL), 0);
    phase_closed(&w);
    STEP(4);
    assert_int_equal(fa_secagg_server_survivor_list(w.s, &r, &rlen, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_client_survivors(w.c[i], r, rlen, 8, &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_consistency(w.s, w.f.ids[i], m, len, 8, NULL), 0);
        free(m);
    }
    free(r);
    assert_int_equal(fa_secagg_server_close(w.s, 9, NULL), 0);
    phase_closed(&w);
    STEP(5);
    assert_int_equal(fa_secagg_server_survivor_signatures(w.s, &r, &rlen, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(fa_secagg_client_signatures(w.c[i], r, rlen, 10, &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_unmask(w.s, w.f.ids[i], m, len, 10, NULL), 0);
        free(m);
    }
    free(r);
    STEP(6);
    assert_int_equal(fa_secagg_server_close(w.s, 11, NULL), 0);
    phase_closed(&w);
    if (crash_srv)
        crash_server(&w);
    assert_int_equal(fa_secagg_server_result_ring(w.s, sum, LEN, NULL), 0);
    for (int j = 0; j < LEN; j++) {
        uint32_t want = 0;
        for (int i = 0; i < N; i++)
            want += w.in[i][j];
        assert_int_equal(sum[j], want & ((1u << K) - 1));
    }
    for (int i = 0; i < N; i++)
        fa_secagg_client_del(w.c[i]);
    fa_secagg_server_del(w.s);
#undef STEP
}

static void test_client_crash_every_step(void **state)
{
    for (int at = 0; at <= 6; at++)
        round_with_crash(at, 0);
}

static void test_server_crash_every_step(void **state)
{
    for (int at = 0; at <= 6; at++)
        round_with_crash(at, 1);
}

/* The same with the sum kept by the caller (fa_secagg_server_save_meta):
 * after the masked phase closed, at every later step the state needs the
 * masked sum, and a restore after unmasking unmasks it again. */
static void test_server_crash_every_step_meta(void **state)
{
    server_meta = 1;
    for (int at = 0; at <= 6; at++)
        round_with_crash(at, 1);
    server_meta = 0;
}

static void test_client_restore_refusals(void **state)
{
    th_fed f;
    fa_secagg_config cfg = th_cfg(2, 16, 10, 0);
    fa_secagg_client *c, *r = NULL;
    fa_secagg_member other[3];
    uint8_t *blob, wrong[32];
    size_t len;
    fa_error e;

    th_fed_init(&f, 3, 3);
    assert_int_equal(fa_secagg_client_new(&c, &cfg, f.seeds[1], f.ids[1], f.members, 3, NULL, NULL),
                     0);
    assert_int_equal(fa_secagg_client_save(c, &blob, &len, NULL), 0);
    /* another identity key: does not decrypt */
    memcpy(wrong, f.seeds[1], 32);
    wrong[0] ^= 1;
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_client_restore(&r, blob, len, wrong, f.members, 3, NULL, &e),
                     FA_ERR_VERIFY);
    assert_non_null(strstr(e.msg, "does not decrypt"));
    assert_null(r);
    /* a flipped bit anywhere: header (AD), nonce or body */
    for (size_t at = 0; at < len; at += len / 13 + 1) {
        blob[at] ^= 0x10;
        assert_int_not_equal(
            fa_secagg_client_restore(&r, blob, len, f.seeds[1], f.members, 3, NULL, NULL), 0);
        assert_null(r);
        blob[at] ^= 0x10;
    }
    assert_int_not_equal(
        fa_secagg_client_restore(&r, blob, len - 1, f.seeds[1], f.members, 3, NULL, NULL), 0);
    /* states of the formats before the model digest (magic FASACLI 1) and
     * before the BLAKE3 upload digest (2) */
    for (uint8_t v = 1; v <= 2; v++) {
        char want[32];
        blob[7] = v;
        fa_error_clear(&e);
        assert_int_equal(
            fa_secagg_client_restore(&r, blob, len, f.seeds[1], f.members, 3, NULL, &e),
            FA_ERR_UNSUPPORTED);
        snprintf(want, sizeof(want), "a state of format %u", v);
        assert_non_null(strstr(e.msg, want));
        assert_null(r);
    }
    blob[7] = 3;
    /* another federation */
    memcpy(other, f.members, sizeof(other));
    other[2].identity_pk[0] ^= 1;
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_client_restore(&r, blob, len, f.seeds[1], other, 3, NULL, &e),
                     FA_ERR_INVAL);
    assert_non_null(strstr(e.msg, "federation members differ"));
    assert_int_equal(fa_secagg_client_restore(&r, blob, len, f.seeds[1], f.members, 3, NULL, NULL),
                     0);
    {
        /* the restored client advertises the model it was created with */
        uint8_t *adv, got[32];
        size_t alen;
        assert_int_equal(fa_secagg_client_advertise(r, &adv, &alen, NULL), 0);
        assert_int_equal(fa_secagg_advertise_model(adv, alen, got), 0);
        assert_memory_equal(got, cfg.model_sha256, 32);
        free(adv);
    }
    fa_secagg_client_del(r);
    fa_secagg_client_del(c);
    free(blob);
}

static void test_server_restore_refusals(void **state)
{
    th_fed f;
    fa_secagg_config cfg = th_cfg(2, 16, 10, 0), cfg2;
    fa_secagg_server *s, *r = NULL;
    uint8_t *blob;
    size_t len;
    fa_error e;

    th_fed_init(&f, 3, 3);
    assert_int_equal(fa_secagg_server_new(&s, &cfg, f.members, 3, NULL), 0);
    assert_int_equal(fa_secagg_server_save(s, &blob, &len, NULL), 0);
    blob[len / 2] ^= 1;
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_restore(&r, blob, len, &cfg, f.members, 3, &e),
                     FA_ERR_CORRUPT);
    assert_non_null(strstr(e.msg, "checksum"));
    blob[len / 2] ^= 1;
    assert_int_equal(fa_secagg_server_restore(&r, blob, 10, &cfg, f.members, 3, NULL),
                     FA_ERR_CORRUPT);
    cfg2 = cfg;
    cfg2.attempt = 2;
    fa_error_clear(&e);
    assert_int_equal(fa_secagg_server_restore(&r, blob, len, &cfg2, f.members, 3, &e),
                     FA_ERR_INVAL);
    assert_non_null(strstr(e.msg, "another configuration"));
    assert_int_equal(fa_secagg_server_restore(&r, blob, len, &cfg, f.members, 2, NULL),
                     FA_ERR_INVAL);
    assert_null(r);
    assert_int_equal(fa_secagg_server_restore(&r, blob, len, &cfg, f.members, 3, NULL), 0);
    fa_secagg_server_del(r);
    fa_secagg_server_del(s);
    free(blob);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_crash_every_step),
        cmocka_unit_test(test_server_crash_every_step),
        cmocka_unit_test(test_server_crash_every_step_meta),
        cmocka_unit_test(test_client_restore_refusals),
        cmocka_unit_test(test_server_restore_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
