/* Secure aggregation end to end, in one process: for n in {2, 3, 5, 10, 32},
 * every phase and every pattern of up to n - t dropouts (sampled where there
 * are too many), the unmasked sum equals the exact sum of the survivors'
 * inputs bit for bit; more dropouts than allowed give a clean
 * FA_ERR_THRESHOLD and no result.  Also SecAgg+ neighbourhoods, float
 * inputs through the codec, concurrent and retried uploads. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/mask_prg_internal.h"
#include "test_crypto_harness.h"

#define VLEN 37 /* not a multiple of 8: exercises the partial last group */

static uint32_t majority(size_t n)
{
    return (uint32_t)(n / 2 + 1);
}

struct inputs {
    uint32_t *data[FA_SECAGG_MAX_CLIENTS];
    const uint32_t *ptr[FA_SECAGG_MAX_CLIENTS];
};

static void inputs_make(struct inputs *in, size_t n, uint64_t len, uint64_t seed)
{
    th_rng r;
    th_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) {
        in->data[i] = malloc(len * sizeof(uint32_t));
        assert_non_null(in->data[i]);
        th_rng_fill(&r, in->data[i], len * sizeof(uint32_t));
        in->ptr[i] = in->data[i];
    }
}

static void inputs_free(struct inputs *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(in->data[i]);
}

/* Runs one round with these dropouts and checks the outcome: the exact sum
 * when at most n - t dropped, FA_ERR_THRESHOLD at the right close
 * otherwise. */
static void check_round_j(const th_fed *f, const fa_secagg_config *cfg, const struct inputs *in,
                          const int *drop, const int *style, int retry, uint64_t seed,
                          const fa_secagg_journal *journal)
{
    th_run run;
    size_t n = f->n, dropped = 0, first_short = 0;
    int expect_fail = -1;
    uint32_t *got, mask = cfg->ring_bits == 32 ? 0xffffffffu : (1u << cfg->ring_bits) - 1;

    memset(&run, 0, sizeof(run));
    run.ring = in->ptr;
    run.drop = drop;
    run.upload_style = style;
    run.retry_uploads = retry;
    run.seed = seed;
    run.max_chunk = 1 + seed % 64;
    run.journal = journal;
    /* The first phase whose count falls below t. */
    for (int ph = TH_DROP_ADVERTISE; ph <= TH_DROP_UNMASK && expect_fail < 0; ph++) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            left += !(drop[i] != TH_STAY && drop[i] <= ph);
        if (left < cfg->threshold)
            expect_fail = ph - 1; /* TH_DROP_x - 1 is the phase that closes short */
        first_short = left;
    }
    (void)first_short;
    for (size_t i = 0; i < n; i++)
        dropped += drop[i] != TH_STAY;
    th_round(f, cfg, &run);
    if (expect_fail >= 0) {
        if (run.rc != FA_ERR_THRESHOLD || run.fail_phase != expect_fail)
            fail_msg("n=%zu t=%u seed=%llu: expected a threshold error closing phase %d, got rc=%d "
                     "at phase %d: %s",
                     n, cfg->threshold, (unsigned long long)seed, expect_fail, run.rc,
                     run.fail_phase, run.err.msg);
        /* no output */
        got = calloc(cfg->vector_len, sizeof(uint32_t));
        assert_int_equal(fa_secagg_server_result_ring(run.server, got, cfg->vector_len, NULL),
                         FA_ERR_STATE);
        free(got);
        th_run_free(&run);
        return;
    }
    if (run.rc != 0)
        fail_msg("n=%zu t=%u dropped=%zu seed=%llu: round failed rc=%d phase=%d: %s", n,
                 cfg->threshold, dropped, (unsigned long long)seed, run.rc, run.fail_phase,
                 run.err.msg);
    got = calloc(cfg->vector_len, sizeof(uint32_t));
    assert_int_equal(fa_secagg_server_result_ring(run.server, got, cfg->vector_len, NULL), 0);
    for (uint64_t j = 0; j < cfg->vector_len; j++) {
        uint32_t want = 0;
        for (size_t i = 0; i < n; i++)
            if (th_survives(&run, i))
                want += in->data[i][j];
        if ((want & mask) != got[j])
            fail_msg("n=%zu seed=%llu: coordinate %llu is %08x, expected %08x", n,
                     (unsigned long long)seed, (unsigned long long)j, got[j], want & mask);
    }
    /* survivors and dropouts as the audit log will see them */
    {
        size_t ns = 0;
        for (size_t i = 0; i < n; i++)
            ns += th_survives(&run, i);
        assert_int_equal(fa_secagg_server_survivor_count(run.server), ns);
        for (size_t i = 0; i < ns; i++) {
            const char *id;
            uint8_t sha[32], sig[64];
            int signed_, alg;
            assert_int_equal(
                fa_secagg_server_commitment(run.server, i, &id, &alg, sha, sig, &signed_), 0);
            assert_int_equal(alg, FA_SECAGG_UPLOAD_BLAKE3);
            if (signed_) {
                size_t k = (size_t)atoi(id + strlen("region-"));
                assert_int_equal(fa_secagg_commitment_verify(cfg->federation_id, cfg->round,
                                                             cfg->attempt, id, alg, sha, sig,
                                                             f->members[k].identity_pk),
                                 0);
            }
        }
    }
    free(got);
    th_run_free(&run);
}

static void check_round(const th_fed *f, const fa_secagg_config *cfg, const struct inputs *in,
                        const int *drop, const int *style, int retry, uint64_t seed)
{
    check_round_j(f, cfg, in, drop, style, retry, seed, NULL);
}

/* Every pattern of exactly `k` dropouts among n, all at phase `ph`, each
 * pattern with probability `keep` out of 1000 (1000 = all). */
static size_t patterns(const th_fed *f, const fa_secagg_config *cfg, const struct inputs *in,
                       int ph, size_t k, uint32_t keep, th_rng *r, size_t budget)
{
    size_t n = f->n, idx[64] = {0}, runs = 0;
    int drop[FA_SECAGG_MAX_CLIENTS], style[FA_SECAGG_MAX_CLIENTS];
    for (size_t i = 0; i < k; i++)
        idx[i] = i;
    for (;;) {
        if (runs < budget && th_below(r, 1000) < keep) {
            memset(drop, 0, sizeof(drop));
            for (size_t i = 0; i < n; i++)
                style[i] = (int)th_below(r, 3);
            for (size_t i = 0; i < k; i++)
                drop[idx[i]] = ph;
            check_round(f, cfg, in, drop, style, 0, th_rand(r));
            runs++;
        }
        /* next k-combination */
        size_t i = k;
        while (i > 0 && idx[i - 1] == n - k + i - 1)
            i--;
        if (i == 0)
            break;
        idx[i - 1]++;
        for (size_t j = i; j < k; j++)
            idx[j] = idx[j - 1] + 1;
    }
    return runs;
}

static uint64_t binom(size_t n, size_t k)
{
    uint64_t b = 1;
    for (size_t i = 1; i <= k; i++)
        b = b * (n - k + i) / i;
    return b;
}

/* Dropouts in one phase: every pattern up to n - t (or a sample of about
 * `per_count` patterns for each number of dropouts), then n - t + 1. */
static void dropouts_for(size_t n, size_t per_count, uint32_t k)
{
    th_fed f;
    struct inputs in;
    th_rng r;
    uint32_t t = majority(n);
    fa_secagg_config cfg = th_cfg(t, k, VLEN, 0);

    th_fed_init(&f, n, n);
    inputs_make(&in, n, VLEN, 100 + n);
    th_rng_init(&r, 1000 + n);
    for (int ph = TH_DROP_ADVERTISE; ph <= TH_DROP_UNMASK; ph++) {
        for (size_t d = 0; d <= n - t; d++) {
            uint64_t all = binom(n, d);
            uint32_t keep = all <= per_count ? 1000 : (uint32_t)(1000 * per_count / all + 1);
            patterns(&f, &cfg, &in, ph, d, keep, &r, per_count);
        }
        /* one too many: a clean threshold error when this phase closes */
        patterns(&f, &cfg, &in, ph, n - t + 1, 1000, &r, 1);
    }
    inputs_free(&in, n);
}

/* fa_secagg_server_renew: the next attempt's server, which keeps the last
 * one's sum memory, starts from a zero sum (two rounds through one th_run,
 * the second's server renewed from the first's, finished one), and one of
 * another length gets a sum of its own. */
static void test_server_renew(void **state)
{
    th_fed f;
    struct inputs in;
    fa_secagg_config cfg = th_cfg(2, 23, VLEN, 0), other = th_cfg(2, 23, VLEN + 9, 0);
    uint32_t *got = calloc(VLEN, sizeof(uint32_t)), mask = (1u << cfg.ring_bits) - 1;
    th_run run;

    assert_non_null(got);
    th_fed_init(&f, 3, 3);
    inputs_make(&in, 3, VLEN, 55);
    memset(&run, 0, sizeof(run));
    run.ring = in.ptr;
    for (uint32_t attempt = 0; attempt < 2; attempt++) {
        cfg.attempt = attempt;
        run.seed = 7 + attempt;
        assert_int_equal(th_round(&f, &cfg, &run), 0);
        assert_int_equal(fa_secagg_server_result_ring(run.server, got, VLEN, NULL), 0);
        for (uint64_t j = 0; j < VLEN; j++)
            assert_int_equal(got[j], (in.data[0][j] + in.data[1][j] + in.data[2][j]) & mask);
    }
    assert_int_equal(fa_secagg_server_renew(&run.server, &other, f.members, 3, NULL), 0);
    {
        fa_secagg_server_status st;
        fa_secagg_server_status_get(run.server, &st);
        assert_int_equal(st.phase, FA_SECAGG_ADVERTISE);
    }
    th_run_free(&run);
    inputs_free(&in, 3);
    free(got);
}

static void test_dropouts_n2(void **state)
{
    dropouts_for(2, 1000, 17);
}

static void test_dropouts_n3(void **state)
{
    dropouts_for(3, 1000, 12);
}

static void test_dropouts_n5(void **state)
{
    dropouts_for(5, 1000, 32);
}

static void test_dropouts_n10(void **state)
{
    dropouts_for(10, 3, 20);
}

static void test_dropouts_n32(void **state)
{
    /* ~0.2 s a round: one random pattern of 1 and of n - t dropouts per
     * phase, and the round without dropouts */
    th_fed f;
    struct inputs in;
    th_rng r;
    size_t n = 32;
    uint32_t t = majority(n);
    fa_secagg_config cfg = th_cfg(t, 23, VLEN, 0);
    const size_t counts[] = {0, 1, 15};

    th_fed_init(&f, n, n);
    inputs_make(&in, n, VLEN, 132);
    th_rng_init(&r, 1032);
    for (int ph = TH_DROP_ADVERTISE; ph <= TH_DROP_UNMASK; ph++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS];
            if (ph > TH_DROP_ADVERTISE && counts[c] == 0)
                continue;
            for (size_t i = 0; i < counts[c];) { /* a random pattern */
                size_t j = th_below(&r, (uint32_t)n);
                if (!drop[j]) {
                    drop[j] = ph;
                    i++;
                }
            }
            for (size_t i = 0; i < n; i++)
                style[i] = (int)th_below(&r, 3);
            check_round(&f, &cfg, &in, drop, style, 0, th_rand(&r));
        }
    }
    /* n - t + 1 dropouts at the masked phase */
    {
        int drop[FA_SECAGG_MAX_CLIENTS] = {0};
        for (size_t i = 0; i < n - t + 1; i++)
            drop[i] = TH_DROP_MASKED;
        check_round(&f, &cfg, &in, drop, NULL, 0, 77);
    }
    inputs_free(&in, n);
}

/* The server removes the masks on several threads, each over its own range
 * of the sum (ranges of whole keystream blocks, the last one shorter): the
 * sum is exact whatever the number of threads, with self masks only and
 * with the pairwise masks of dropouts too. */
static void test_unmask_threads(void **state)
{
    const uint32_t threads[] = {1, 2, 3, 7, 40};
    const uint64_t len = 12 * FA_MASK_PRG_BLOCK_WORDS + 123;
    th_fed f;
    struct inputs in;
    size_t n = 5;
    uint32_t t = majority(n);

    th_fed_init(&f, n, n);
    inputs_make(&in, n, len, 500);
    for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
        fa_secagg_config cfg = th_cfg(t, 22, len, 0);
        int none[FA_SECAGG_MAX_CLIENTS] = {0}, two[FA_SECAGG_MAX_CLIENTS] = {0};
        cfg.unmask_threads = threads[k];
        two[1] = two[3] = TH_DROP_MASKED; /* shared keys, then no upload */
        check_round(&f, &cfg, &in, none, NULL, 0, 900 + k);
        check_round(&f, &cfg, &in, two, NULL, 0, 950 + k);
    }
    inputs_free(&in, n);
}

/* Dropouts spread over several phases in one round, sampled. */
static void test_dropouts_mixed(void **state)
{
    const size_t ns[] = {3, 5, 10};
    th_rng r;
    th_rng_init(&r, 4242);
    for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        th_fed f;
        struct inputs in;
        size_t n = ns[c];
        uint32_t t = majority(n);
        fa_secagg_config cfg = th_cfg(t, 24, VLEN, 0);
        th_fed_init(&f, n, n + 50);
        inputs_make(&in, n, VLEN, 200 + n);
        for (int rep = 0; rep < 12; rep++) {
            int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS];
            size_t d = th_below(&r, (uint32_t)(n - t + 2)); /* sometimes one too many */
            for (size_t i = 0; i < d;) {
                size_t j = th_below(&r, (uint32_t)n);
                if (!drop[j]) {
                    drop[j] = 1 + (int)th_below(&r, 5);
                    i++;
                }
            }
            for (size_t i = 0; i < n; i++)
                style[i] = (int)th_below(&r, 3);
            check_round(&f, &cfg, &in, drop, style, rep % 3 == 0, th_rand(&r));
        }
        inputs_free(&in, n);
    }
}

/* Survivors whose uploads break off midway and are sent again: the partial
 * uploads leave no trace in the sum; several uploads in flight at once. */
static void test_uploads_retried(void **state)
{
    th_fed f;
    struct inputs in;
    size_t n = 6;
    fa_secagg_config cfg = th_cfg(3, 29, 1000, 0);
    int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS] = {0};
    th_fed_init(&f, n, 66);
    inputs_make(&in, n, 1000, 67);
    drop[1] = TH_DROP_MASKED;
    style[1] = TH_UPLOAD_ABORT;
    drop[4] = TH_DROP_MASKED;
    style[4] = TH_UPLOAD_HANG;
    for (uint64_t seed = 1; seed <= 4; seed++)
        check_round(&f, &cfg, &in, drop, style, 1, seed);
    inputs_free(&in, n);
}

/* The upload journals kept by the caller (fa_secagg_server_set_journal), as
 * the aggregator keeps them in files: here in memory, with failures on
 * demand (the write numbered fail_write, counting from 1; every read when
 * fail_read). */
struct test_journal {
    uint8_t *data[8];
    uint64_t len[8], cap[8];
    unsigned writes, fail_write, reads, clears;
    int fail_read;
};

static int tj_write(void *ctx, uint32_t slot, uint64_t off, const uint8_t *data, size_t len,
                    fa_error *err)
{
    struct test_journal *j = ctx;
    assert_true(slot < 8);
    assert_int_equal(off, j->len[slot]); /* contiguous, from 0 after a clear */
    if (++j->writes == j->fail_write)
        return fa_errorf(err, FA_ERR_IO, "test journal: write %u fails", j->writes);
    if (off + len > j->cap[slot]) {
        j->cap[slot] = (off + len) * 2;
        j->data[slot] = realloc(j->data[slot], j->cap[slot]);
        assert_non_null(j->data[slot]);
    }
    memcpy(j->data[slot] + off, data, len);
    j->len[slot] = off + len;
    return 0;
}

static int tj_read(void *ctx, uint32_t slot, uint64_t off, uint8_t *buf, size_t len, fa_error *err)
{
    struct test_journal *j = ctx;
    j->reads++;
    if (j->fail_read)
        return fa_errorf(err, FA_ERR_IO, "test journal: read fails");
    assert_true(off + len <= j->len[slot]);
    memcpy(buf, j->data[slot] + off, len);
    return 0;
}

static void tj_clear(void *ctx, uint32_t slot)
{
    struct test_journal *j = ctx;
    j->len[slot] = 0;
    j->clears++;
}

/* Frees what the journal holds and empties it for the next use. */
static void tj_free(struct test_journal *j)
{
    for (int i = 0; i < 8; i++)
        free(j->data[i]);
    memset(j, 0, sizeof(*j));
}

/* Uploads aborted midway and resent, others left hanging, with the
 * journals kept by the caller: the same exact sums. */
static void test_uploads_caller_journal(void **state)
{
    th_fed f;
    struct inputs in;
    struct test_journal tj = {0};
    fa_secagg_journal j = {tj_write, tj_read, tj_clear, &tj};
    size_t n = 6;
    fa_secagg_config cfg = th_cfg(3, 29, 100003, 0);
    int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS] = {0};

    tj_free(&tj);
    th_fed_init(&f, n, 76);
    inputs_make(&in, n, 100003, 77);
    drop[1] = TH_DROP_MASKED;
    style[1] = TH_UPLOAD_ABORT;
    drop[4] = TH_DROP_MASKED;
    style[4] = TH_UPLOAD_HANG;
    for (uint64_t seed = 1; seed <= 3; seed++)
        check_round_j(&f, &cfg, &in, drop, style, 1, seed, &j);
    /* every upload cleared its slot; the aborted ones were read back */
    assert_true(tj.reads > 0);
    assert_true(tj.clears >= 3 * (n + 4));
    tj_free(&tj);
    inputs_free(&in, n);
}

/* A journal write that fails refuses its chunk, nothing of it summed: the
 * upload, aborted, leaves the sum as it was (all zeros here).  A journal
 * that cannot be read back when an upload is removed spoils the sum: the
 * round fails and no phase closes any more. */
static void test_uploads_journal_failures(void **state)
{
    th_fed f;
    struct inputs in;
    struct test_journal tj = {0};
    fa_secagg_journal j = {tj_write, tj_read, tj_clear, &tj};
    fa_secagg_server_status st;
    size_t n = 4;
    fa_secagg_config cfg = th_cfg(3, 20, 5000, 0);
    int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS] = {0};
    const uint32_t *w;
    th_run run;

    th_fed_init(&f, n, 86);
    inputs_make(&in, n, 5000, 87);
    tj_free(&tj);
    tj.fail_write = 3;
    memset(&run, 0, sizeof(run));
    run.ring = in.ptr;
    run.seed = 5;
    run.max_chunk = 100;
    run.journal = &j;
    assert_int_equal(th_round(&f, &cfg, &run), FA_ERR_IO);
    assert_non_null(strstr(run.err.msg, "journal"));
    fa_secagg_server_status_get(run.server, &st);
    assert_int_equal(st.phase, FA_SECAGG_MASKED);
    assert_int_equal(st.in_flight, 1);
    assert_int_equal(fa_secagg_server_masked_abort(run.server, f.ids[0], 2000, NULL), 0);
    w = fa_secagg_server_sum_words(run.server);
    for (uint64_t i = 0; i < cfg.vector_len; i++)
        assert_int_equal(w[i], 0);
    th_run_free(&run);

    tj_free(&tj);
    tj.fail_read = 1;
    drop[2] = TH_DROP_MASKED;
    style[2] = TH_UPLOAD_ABORT;
    memset(&run, 0, sizeof(run));
    run.ring = in.ptr;
    run.drop = drop;
    run.upload_style = style;
    run.seed = 6;
    run.journal = &j;
    assert_int_equal(th_round(&f, &cfg, &run), FA_ERR_IO);
    assert_non_null(strstr(run.err.msg, "spoilt"));
    fa_secagg_server_status_get(run.server, &st);
    assert_int_equal(st.phase, FA_SECAGG_FAILED);
    assert_int_equal(fa_secagg_server_close(run.server, 3000, NULL), FA_ERR_STATE);
    th_run_free(&run);
    tj_free(&tj);
    inputs_free(&in, n);
}

/* Several uploads interleaved chunk by chunk, one aborted in the middle of
 * the others, and max_uploads_in_flight enforced. */
static void test_uploads_interleaved(void **state)
{
    th_fed f;
    size_t n = 5;
    fa_secagg_config cfg = th_cfg(3, 19, 301, 0);
    fa_secagg_server *s;
    fa_secagg_client *c[5];
    th_rng rr;
    fa_secagg_rng rng = {th_rng_fill, &rr};
    uint32_t in[5][301], got[301];
    uint8_t *m, *rep, bufs[5][4096];
    size_t len, rlen, have[5] = {0}, off[5] = {0};
    uint64_t total = fa_secagg_masked_bytes(301, 19);

    cfg.max_uploads_in_flight = 3;
    th_fed_init(&f, n, 5);
    th_rng_init(&rr, 55);
    for (size_t i = 0; i < n; i++)
        th_rng_fill(&rr, in[i], sizeof(in[i]));
    assert_int_equal(fa_secagg_server_new(&s, &cfg, f.members, n, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(
            fa_secagg_client_new(&c[i], &cfg, f.seeds[i], f.ids[i], f.members, n, &rng, NULL), 0);
        assert_int_equal(fa_secagg_client_advertise(c[i], &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_advertise(s, f.ids[i], m, len, 1, NULL), 0);
        free(m);
    }
    assert_int_equal(fa_secagg_server_close(s, 2, NULL), 0);
    assert_int_equal(fa_secagg_server_peer_list(s, &rep, &rlen, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fa_secagg_client_peer_list(c[i], rep, rlen, 3, NULL), 0);
        assert_int_equal(fa_secagg_client_share_keys(c[i], &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_share_keys(s, f.ids[i], m, len, 3, NULL), 0);
        free(m);
    }
    free(rep);
    assert_int_equal(fa_secagg_server_close(s, 4, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(fa_secagg_server_shares_for(s, f.ids[i], &rep, &rlen, NULL), 0);
        assert_int_equal(fa_secagg_client_shares(c[i], rep, rlen, 5, NULL), 0);
        free(rep);
        assert_int_equal(fa_secagg_client_set_input_ring(c[i], in[i], 301, NULL), 0);
        assert_int_equal(
            fa_secagg_client_masked_next(c[i], bufs[i], sizeof(bufs[i]), &have[i], NULL), 0);
        assert_int_equal(have[i], total);
    }
    /* three in flight; the fourth must wait */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(fa_secagg_server_masked_begin(s, f.ids[i], 6, NULL), 0);
    assert_int_equal(fa_secagg_server_masked_begin(s, f.ids[3], 6, NULL), FA_ERR_AGAIN);
    /* interleave 7-byte chunks of 0, 1, 2; abort 1 when half way */
    while (off[0] < total || off[2] < total) {
        for (size_t i = 0; i < 3; i++) {
            size_t k = total - off[i] < 7 ? total - off[i] : 7;
            if (i == 1 && off[1] >= total / 2)
                continue;
            if (k)
                assert_int_equal(
                    fa_secagg_server_masked_chunk(s, f.ids[i], bufs[i] + off[i], k, 7, NULL), 0);
            off[i] += k;
        }
    }
    assert_int_equal(fa_secagg_server_masked_abort(s, f.ids[1], 8, NULL), 0);
    assert_int_equal(fa_secagg_server_masked_end(s, f.ids[0], 8, NULL), 0);
    assert_int_equal(fa_secagg_server_masked_end(s, f.ids[2], 8, NULL), 0);
    /* 3 and 4 in one piece each; 1 never comes back */
    for (size_t i = 3; i < 5; i++) {
        assert_int_equal(fa_secagg_server_masked_begin(s, f.ids[i], 9, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_chunk(s, f.ids[i], bufs[i], total, 9, NULL), 0);
        assert_int_equal(fa_secagg_server_masked_end(s, f.ids[i], 9, NULL), 0);
    }
    assert_int_equal(fa_secagg_server_close(s, 10, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_list(s, &rep, &rlen, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        if (i == 1)
            continue;
        assert_int_equal(fa_secagg_client_survivors(c[i], rep, rlen, 11, &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_consistency(s, f.ids[i], m, len, 11, NULL), 0);
        free(m);
    }
    free(rep);
    assert_int_equal(fa_secagg_server_close(s, 12, NULL), 0);
    assert_int_equal(fa_secagg_server_survivor_signatures(s, &rep, &rlen, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        if (i == 1)
            continue;
        assert_int_equal(fa_secagg_client_signatures(c[i], rep, rlen, 13, &m, &len, NULL), 0);
        assert_int_equal(fa_secagg_server_unmask(s, f.ids[i], m, len, 13, NULL), 0);
        free(m);
    }
    free(rep);
    assert_int_equal(fa_secagg_server_close(s, 14, NULL), 0);
    assert_int_equal(fa_secagg_server_result_ring(s, got, 301, NULL), 0);
    for (size_t j = 0; j < 301; j++) {
        uint32_t want = in[0][j] + in[2][j] + in[3][j] + in[4][j];
        assert_int_equal(got[j], want & ((1u << 19) - 1));
    }
    assert_int_equal(fa_secagg_server_dropout_count(s), 1);
    assert_string_equal(fa_secagg_server_dropout(s, 0), f.ids[1]);
    for (size_t i = 0; i < n; i++)
        fa_secagg_client_del(c[i]);
    fa_secagg_server_del(s);
}

/* SecAgg+: neighbours on a Harary graph.  With at most K/2 dropouts every
 * neighbourhood keeps a majority, so the sum is exact. */
static void test_secagg_plus(void **state)
{
    const struct {
        size_t n;
        uint32_t k, t;
    } cases[] = {{10, 4, 4}, {16, 6, 8}, {32, 8, 10}};
    th_rng r;
    th_rng_init(&r, 31337);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        th_fed f;
        struct inputs in;
        size_t n = cases[c].n;
        fa_secagg_config cfg = th_cfg(cases[c].t, 25, VLEN, cases[c].k);
        th_fed_init(&f, n, 900 + n);
        inputs_make(&in, n, VLEN, 901 + n);
        for (int ph = TH_DROP_ADVERTISE; ph <= TH_DROP_UNMASK; ph++) {
            int drop[FA_SECAGG_MAX_CLIENTS] = {0}, style[FA_SECAGG_MAX_CLIENTS] = {0};
            for (size_t i = 0; i < cases[c].k / 2;) {
                size_t j = th_below(&r, (uint32_t)n);
                if (!drop[j]) {
                    drop[j] = ph;
                    style[j] = (int)th_below(&r, 3);
                    i++;
                }
            }
            check_round(&f, &cfg, &in, drop, style, 0, th_rand(&r));
        }
        inputs_free(&in, n);
    }
}

/* A region that reveals bad shares in round 4 (Bonawitz et al. assume it
 * does not).  Each case: n regions, threshold t, SecAgg+ degree k, who
 * drops out before the masked upload (their mask keys must be rebuilt too),
 * who lies and how; the round must complete with the exact sum of every
 * survivor's input (the liars' included: they uploaded honestly), and name
 * exactly the liars, each once.  m unmaskers, e = (m - t) / 2: with m = t
 * + 1 the bad share is found by leaving one out; with more, by decoding;
 * with m = t one bad share cannot be told from the others (below). */
static void test_bad_shares(void **state)
{
    static const struct {
        size_t n;
        uint32_t t, k;
        int dropper; /* drops before its masked upload, or -1 */
        int liar[3]; /* -1 ends */
        int how;
        size_t named; /* liars named: those whose shares were needed */
    } cases[] = {
        {5, 3, 0, -1, {2, -1}, TH_BAD_ONE_SHARE, 1},     /* m = 5, e = 1 */
        {5, 3, 0, -1, {1, -1}, TH_BAD_ALL_SHARES, 1},    /* every share of one */
        {4, 3, 0, -1, {0, -1}, TH_BAD_ONE_SHARE, 1},     /* m = t + 1 */
        {4, 3, 0, -1, {2, -1}, TH_BAD_ALL_SHARES, 1},    /* m = t + 1 */
        {6, 3, 0, 1, {2, -1}, TH_BAD_ALL_SHARES, 1},     /* a dropout's key: m = 5 */
        {7, 3, 0, -1, {1, 2, -1}, TH_BAD_ALL_SHARES, 2}, /* two liars, m = 7, e = 2 */
        {10, 4, 6, 7, {3, -1}, TH_BAD_ALL_SHARES, 1},    /* SecAgg+ neighbourhoods */
        /* the first t shares of every secret are the others': the liar's
         * are never needed, never looked at, and it is not named */
        {5, 3, 0, -1, {4, -1}, TH_BAD_ALL_SHARES, 0},
    };
    (void)state;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        th_fed f;
        struct inputs in;
        th_run run;
        size_t n = cases[c].n, nliars = 0;
        int drop[FA_SECAGG_MAX_CLIENTS] = {0}, lie[FA_SECAGG_MAX_CLIENTS] = {0};
        fa_secagg_config cfg = th_cfg(cases[c].t, 25, VLEN, cases[c].k);
        uint32_t got[VLEN], mask = (1u << 25) - 1;

        th_fed_init(&f, n, 700 + c);
        inputs_make(&in, n, VLEN, 701 + c);
        if (cases[c].dropper >= 0)
            drop[cases[c].dropper] = TH_DROP_MASKED;
        for (; cases[c].liar[nliars] >= 0; nliars++)
            lie[cases[c].liar[nliars]] = cases[c].how;
        memset(&run, 0, sizeof(run));
        run.ring = in.ptr;
        run.drop = drop;
        run.lie = lie;
        run.seed = 7100 + c;
        th_round(&f, &cfg, &run);
        if (run.rc != 0)
            fail_msg("case %zu: the round failed at phase %d: %s", c, run.fail_phase, run.err.msg);
        assert_int_equal(fa_secagg_server_result_ring(run.server, got, VLEN, NULL), 0);
        for (size_t j = 0; j < VLEN; j++) {
            uint32_t want = 0;
            for (size_t i = 0; i < n; i++)
                if (th_survives(&run, i))
                    want += in.data[i][j];
            assert_int_equal(got[j], want & mask);
        }
        if (fa_secagg_server_share_fault_count(run.server) != cases[c].named)
            fail_msg("case %zu: %zu regions found to lie, not %zu", c,
                     fa_secagg_server_share_fault_count(run.server), cases[c].named);
        for (size_t x = 0; x < cases[c].named; x++) {
            const char *region, *owner;
            int kind, named = 0;
            assert_int_equal(fa_secagg_server_share_fault(run.server, x, &region, &owner, &kind),
                             0);
            for (size_t y = 0; y < nliars; y++)
                named |= !strcmp(region, f.ids[cases[c].liar[y]]);
            if (!named)
                fail_msg("case %zu: '%s' named, not a liar", c, region);
            assert_true(kind == FA_SECAGG_SHARE_SELF_MASK || kind == FA_SECAGG_SHARE_MASK_KEY);
            assert_non_null(owner);
        }
        {
            const char *a, *b;
            int k;
            assert_int_equal(fa_secagg_server_share_fault(run.server, cases[c].named, &a, &b, &k),
                             FA_ERR_NOTFOUND);
        }
        /* a restart from the state saved after unmasking finds the same
         * ones (a state saved without its sum unmasks again, by the same
         * code as the close) */
        {
            fa_secagg_server *r2 = NULL;
            uint8_t *blob = NULL;
            size_t blen = 0;
            fa_error err;
            assert_int_equal(fa_secagg_server_save(run.server, &blob, &blen, &err), 0);
            assert_int_equal(fa_secagg_server_restore(&r2, blob, blen, &cfg, f.members, n, &err),
                             0);
            assert_int_equal(fa_secagg_server_share_fault_count(r2), cases[c].named);
            for (size_t x = 0; x < cases[c].named; x++) {
                const char *a1, *b1, *a2, *b2;
                int k1, k2;
                assert_int_equal(fa_secagg_server_share_fault(run.server, x, &a1, &b1, &k1), 0);
                assert_int_equal(fa_secagg_server_share_fault(r2, x, &a2, &b2, &k2), 0);
                assert_string_equal(a1, a2);
                assert_string_equal(b1, b2);
                assert_int_equal(k1, k2);
            }
            fa_secagg_server_del(r2);
            free(blob);
        }
        th_run_free(&run);
        inputs_free(&in, n);
    }
}

/* Where no share can be told bad: m = t (no share to spare), or more bad
 * shares than the unmaskers can outvote.  The close refuses as before,
 * naming the secret and no region, and the sum is not touched. */
static void test_bad_shares_beyond_repair(void **state)
{
    static const struct {
        size_t n;
        uint32_t t;
        int liar[3];
    } cases[] = {
        {3, 3, {1, -1}},    /* m = t */
        {4, 3, {0, 2, -1}}, /* two of t + 1 */
    };
    (void)state;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        th_fed f;
        struct inputs in;
        th_run run;
        size_t n = cases[c].n;
        int lie[FA_SECAGG_MAX_CLIENTS] = {0};
        fa_secagg_config cfg = th_cfg(cases[c].t, 25, VLEN, 0);
        uint32_t got[VLEN];

        th_fed_init(&f, n, 800 + c);
        inputs_make(&in, n, VLEN, 801 + c);
        for (size_t x = 0; cases[c].liar[x] >= 0; x++)
            lie[cases[c].liar[x]] = TH_BAD_ALL_SHARES;
        memset(&run, 0, sizeof(run));
        run.ring = in.ptr;
        run.lie = lie;
        run.seed = 8100 + c;
        th_round(&f, &cfg, &run);
        assert_int_equal(run.rc, FA_ERR_VERIFY);
        assert_int_equal(run.fail_phase, FA_SECAGG_UNMASK);
        assert_non_null(strstr(run.err.msg, "cannot be rebuilt from its"));
        assert_int_equal(fa_secagg_server_share_fault_count(run.server), 0);
        assert_int_equal(fa_secagg_server_result_ring(run.server, got, VLEN, NULL), FA_ERR_STATE);
        th_run_free(&run);
        inputs_free(&in, n);
    }
}

/* Float inputs through the codec, weighted: the decoded average is within
 * the quantisation error of the exact weighted average of the survivors. */
static void test_float_weighted_average(void **state)
{
    th_fed f;
    size_t n = 5, d = 1000;
    fa_secagg_config cfg = th_cfg(3, 0, d + 1, 0);
    float *x[5], *avg = malloc(d * sizeof(float));
    uint32_t *q[5];
    const float *xp[5];
    double w[5] = {1.0, 0.5, 0.25, 0.8, 0.1}, wsum = 0, got_w;
    int drop[5] = {0, TH_DROP_MASKED, 0, 0, TH_DROP_UNMASK};
    th_run run;
    th_rng r;

    cfg.quant.bits = 16;
    cfg.ring_bits = fa_secagg_ring_bits_for(16, (uint32_t)n);
    assert_int_equal(cfg.ring_bits, 19);
    cfg.quant.clip_mode = FA_SECAGG_CLIP_COORDINATE;
    cfg.quant.clip_value = 2.0;
    th_fed_init(&f, n, 5);
    th_rng_init(&r, 5);
    for (size_t i = 0; i < n; i++) {
        x[i] = malloc(d * sizeof(float));
        for (size_t j = 0; j < d; j++)
            x[i][j] = (float)((double)th_rand(&r) / 4294967296.0 * 5.0 - 2.5); /* some clip */
        xp[i] = x[i];
    }
    memset(&run, 0, sizeof(run));
    run.xf = xp;
    run.weight = w;
    run.drop = drop;
    run.seed = 9;
    for (size_t i = 0; i < n; i++)
        q[i] = malloc((d + 1) * sizeof(uint32_t));
    run.ring_out = q;
    assert_int_equal(th_round(&f, &cfg, &run), 0);
    /* the unmasked ring sum is the sum of the survivors' quantised inputs */
    {
        uint32_t *sum = malloc((d + 1) * sizeof(uint32_t));
        assert_int_equal(fa_secagg_server_result_ring(run.server, sum, d + 1, NULL), 0);
        for (size_t j = 0; j <= d; j++) {
            uint32_t want = 0;
            for (size_t i = 0; i < n; i++)
                if (th_survives(&run, i))
                    want += q[i][j];
            assert_int_equal(sum[j], want & ((1u << cfg.ring_bits) - 1));
        }
        free(sum);
    }
    assert_int_equal(fa_secagg_server_result_f32(run.server, avg, d, &got_w, NULL), 0);
    for (size_t i = 0; i < n; i++)
        if (th_survives(&run, i))
            wsum += w[i];
    /* weight: each of 4 survivors within one step of 1/32767 */
    assert_true(fabs(got_w - wsum) <= 4.0 / 32767);
    for (size_t j = 0; j < d; j++) {
        double num = 0;
        for (size_t i = 0; i < n; i++)
            if (th_survives(&run, i)) {
                double v = x[i][j] > 2.0 ? 2.0 : x[i][j] < -2.0 ? -2.0 : x[i][j];
                num += w[i] * v;
            }
        /* numerator within 4 steps of 2/32767, denominator within 4/32767 */
        assert_true(fabs(avg[j] - num / wsum) < 1e-3);
    }
    th_run_free(&run);
    for (size_t i = 0; i < n; i++) {
        free(x[i]);
        free(q[i]);
    }
    free(avg);
}

/* Tiny vectors (shorter than one packing group) and extreme ring sizes. */
static void test_lengths_and_ring_sizes(void **state)
{
    const uint64_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17};
    const uint32_t ks[] = {2, 5, 31, 32};
    th_fed f;
    th_fed_init(&f, 3, 3);
    for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++) {
        for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++) {
            struct inputs in;
            int drop[3] = {0, TH_DROP_MASKED, 0}, style[3] = {0, TH_UPLOAD_ABORT, 0};
            fa_secagg_config cfg = th_cfg(2, ks[b], lens[a], 0);
            inputs_make(&in, 3, lens[a], a * 10 + b);
            check_round(&f, &cfg, &in, drop, style, 1, a * 10 + b);
            inputs_free(&in, 3);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_renew),
        cmocka_unit_test(test_dropouts_n2),
        cmocka_unit_test(test_dropouts_n3),
        cmocka_unit_test(test_dropouts_n5),
        cmocka_unit_test(test_dropouts_n10),
        cmocka_unit_test(test_dropouts_n32),
        cmocka_unit_test(test_unmask_threads),
        cmocka_unit_test(test_dropouts_mixed),
        cmocka_unit_test(test_uploads_retried),
        cmocka_unit_test(test_uploads_interleaved),
        cmocka_unit_test(test_uploads_caller_journal),
        cmocka_unit_test(test_uploads_journal_failures),
        cmocka_unit_test(test_secagg_plus),
        cmocka_unit_test(test_bad_shares),
        cmocka_unit_test(test_bad_shares_beyond_repair),
        cmocka_unit_test(test_float_weighted_average),
        cmocka_unit_test(test_lengths_and_ring_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
