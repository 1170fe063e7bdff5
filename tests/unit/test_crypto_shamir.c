/* Shamir t-of-n over GF(2^8) for 32-byte secrets: reconstruction from every
 * t-subset, fewer than t shares reveal nothing usable, bad x coordinates are
 * refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "crypto/shamir_internal.h"
#include "test_crypto_harness.h"

/* Every t-subset of the n shares, in lexicographic order, gives the secret
 * back; every (t-1)-subset (padded with a wrong share) does not. */
static void all_subsets(unsigned t, size_t n, uint64_t seed)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32], got[32], xs[255], *shares = malloc(n * 32);
    uint8_t sx[255], ss[255 * 32];
    size_t idx[255], subsets = 0;

    th_rng_init(&r, seed);
    th_rng_fill(&r, secret, 32);
    for (size_t i = 0; i < n; i++)
        xs[i] = (uint8_t)(255 - 3 * i); /* any distinct nonzero x */
    assert_int_equal(fa_shamir_split(secret, t, xs, n, shares, &rng), 0);
    for (size_t i = 0; i < t; i++)
        idx[i] = i;
    for (;;) {
        for (size_t i = 0; i < t; i++) {
            sx[i] = xs[idx[i]];
            memcpy(ss + 32 * i, shares + 32 * idx[i], 32);
        }
        assert_int_equal(fa_shamir_combine(got, sx, ss, t), 0);
        assert_memory_equal(got, secret, 32);
        if (t > 1) { /* t - 1 of them with a forged t-th share: not the secret */
            memset(ss + 32 * (t - 1), 0, 32);
            assert_int_equal(fa_shamir_combine(got, sx, ss, t), 0);
            assert_memory_not_equal(got, secret, 32);
        }
        subsets++;
        size_t i = t;
        while (i > 0 && idx[i - 1] == n - t + i - 1)
            i--;
        if (i == 0)
            break;
        idx[i - 1]++;
        for (size_t j = i; j < t; j++)
            idx[j] = idx[j - 1] + 1;
    }
    {
        uint64_t want = 1;
        for (size_t i = 1; i <= t; i++)
            want = want * (n - t + i) / i;
        assert_int_equal(subsets, want);
    }
    free(shares);
}

static void test_every_t_subset(void **state)
{
    all_subsets(1, 1, 1);
    all_subsets(1, 4, 2);
    all_subsets(2, 2, 3);
    all_subsets(2, 3, 4);
    all_subsets(3, 5, 5);
    all_subsets(4, 7, 6);
    all_subsets(5, 10, 7);
    all_subsets(8, 8, 8);
    all_subsets(6, 12, 9);
}

/* Large n: t = 128 of 255 (every holder index in use). */
static void test_max_clients(void **state)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32], got[32], xs[255], *shares = malloc(255 * 32);
    th_rng_init(&r, 99);
    th_rng_fill(&r, secret, 32);
    for (int i = 0; i < 255; i++)
        xs[i] = (uint8_t)(i + 1);
    assert_int_equal(fa_shamir_split(secret, 128, xs, 255, shares, &rng), 0);
    /* the last 128 holders */
    assert_int_equal(fa_shamir_combine(got, xs + 127, shares + 127 * 32, 128), 0);
    assert_memory_equal(got, secret, 32);
    free(shares);
}

/* One share alone, for t = 2, is uniformly distributed whatever the secret:
 * over many sharings of the same secret every byte value shows up. */
static void test_single_share_uniform(void **state)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32] = {0}, xs[2] = {1, 2}, shares[64];
    int seen[256] = {0}, distinct = 0;
    th_rng_init(&r, 7);
    for (int i = 0; i < 4096; i++) {
        assert_int_equal(fa_shamir_split(secret, 2, xs, 2, shares, &rng), 0);
        seen[shares[0]]++;
    }
    for (int v = 0; v < 256; v++)
        distinct += seen[v] > 0;
    assert_true(distinct > 240);
}

/* The polynomial through t shares, evaluated at the other holders' x,
 * gives their shares. */
static void test_eval_at_other_holders(void **state)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32], xs[9], shares[9 * 32], v[32];
    (void)state;

    th_rng_init(&r, 77);
    th_rng_fill(&r, secret, 32);
    for (int i = 0; i < 9; i++)
        xs[i] = (uint8_t)(1 + 29 * i);
    assert_int_equal(fa_shamir_split(secret, 4, xs, 9, shares, &rng), 0);
    for (int i = 4; i < 9; i++) {
        assert_int_equal(fa_shamir_eval(v, xs[i], xs, shares, 4), 0);
        assert_memory_equal(v, shares + 32 * i, 32);
    }
    assert_int_equal(fa_shamir_eval(v, 0, xs, shares, 4), 0);
    assert_memory_equal(v, secret, 32);
}

/* Decoding: m shares of threshold t with up to e = (m - t) / 2 of them
 * wrong (in one byte, or in all) give the secret and exactly the wrong
 * ones; with none wrong, none is named. */
static void decode_case(unsigned t, size_t m, size_t nbad, int all_bytes, uint64_t seed)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32], got[32], xs[255], bad[255] = {0}, wrong[255];
    uint8_t *shares = malloc(m * 32);

    th_rng_init(&r, seed);
    th_rng_fill(&r, secret, 32);
    for (size_t i = 0; i < m; i++)
        xs[i] = (uint8_t)(m == 255 ? i + 1 : 3 + i);
    assert_int_equal(fa_shamir_split(secret, t, xs, m, shares, &rng), 0);
    for (size_t k = 0; k < nbad;) {
        size_t i = th_below(&r, (uint32_t)m);
        if (bad[i])
            continue;
        bad[i] = 1;
        k++;
        if (all_bytes) {
            for (int b = 0; b < 32; b++)
                shares[32 * i + b] ^= (uint8_t)(1 + th_below(&r, 255));
        } else {
            shares[32 * i + th_below(&r, 32)] ^= (uint8_t)(1 + th_below(&r, 255));
        }
    }
    memset(wrong, 0x5a, sizeof(wrong));
    assert_int_equal(fa_shamir_decode(got, xs, shares, m, t, wrong), 0);
    assert_memory_equal(got, secret, 32);
    assert_memory_equal(wrong, bad, m);
    free(shares);
}

static void test_decode_corrects(void **state)
{
    static const struct {
        unsigned t;
        size_t m;
    } cases[] = {{1, 1}, {1, 3}, {3, 3}, {3, 5}, {3, 6}, {4, 7}, {5, 12}, {10, 31}, {128, 255}};
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t e = (cases[c].m - cases[c].t) / 2, counts[4] = {0, 1, e / 2, e};
        for (int k = 0; k < 4; k++) {
            if (counts[k] > e || (k > 0 && counts[k] <= counts[k - 1]))
                continue;
            for (int all = 0; all < 2; all++)
                decode_case(cases[c].t, cases[c].m, counts[k], all, 1000 * c + 10 * k + all);
        }
    }
}

/* More wrong shares than m - t allows: the decoder says so, or gives
 * another secret (which the caller's commitment refuses); never the
 * secret with the wrong ones named otherwise.  With one share to spare no
 * wrong share can be corrected at all. */
static void test_decode_beyond_radius(void **state)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t secret[32], got[32], xs[8], shares[8 * 32], wrong[8];
    (void)state;

    th_rng_init(&r, 5150);
    th_rng_fill(&r, secret, 32);
    for (int i = 0; i < 8; i++)
        xs[i] = (uint8_t)(10 + i);
    assert_int_equal(fa_shamir_split(secret, 4, xs, 5, shares, &rng), 0);
    shares[32 * 1 + 7] ^= 0x80; /* m = t + 1: e = 0 */
    assert_int_equal(fa_shamir_decode(got, xs, shares, 5, 4, wrong), FA_ERR_VERIFY);
    assert_int_equal(fa_shamir_split(secret, 4, xs, 8, shares, &rng), 0);
    for (int i = 0; i < 3; i++) /* e = 2, three wrong */
        for (int b = 0; b < 32; b++)
            shares[32 * (2 * i) + b] ^= (uint8_t)(b + 1);
    {
        int rc = fa_shamir_decode(got, xs, shares, 8, 4, wrong);
        assert_true(rc == FA_ERR_VERIFY || (rc == 0 && memcmp(got, secret, 32) != 0));
    }
    assert_int_equal(fa_shamir_decode(got, xs, shares, 3, 4, wrong), FA_ERR_INVAL);
    xs[1] = xs[0];
    assert_int_equal(fa_shamir_decode(got, xs, shares, 8, 4, wrong), FA_ERR_INVAL);
}

static void test_refusals(void **state)
{
    uint8_t secret[32] = {1}, shares[3 * 32], got[32];
    uint8_t dup[3] = {1, 2, 1}, zero[3] = {0, 1, 2}, ok[3] = {1, 2, 3};
    assert_int_equal(fa_shamir_split(secret, 2, dup, 3, shares, NULL), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_split(secret, 2, zero, 3, shares, NULL), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_split(secret, 4, ok, 3, shares, NULL), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_split(secret, 0, ok, 3, shares, NULL), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_split(secret, 2, ok, 3, shares, NULL), 0);
    assert_int_equal(fa_shamir_combine(got, dup, shares, 3), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_combine(got, zero, shares, 2), FA_ERR_INVAL);
    assert_int_equal(fa_shamir_combine(got, ok + 1, shares + 32, 2), 0);
    assert_memory_equal(got, secret, 32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_t_subset),
        cmocka_unit_test(test_max_clients),
        cmocka_unit_test(test_single_share_uniform),
        cmocka_unit_test(test_eval_at_other_holders),
        cmocka_unit_test(test_decode_corrects),
        cmocka_unit_test(test_decode_beyond_radius),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
