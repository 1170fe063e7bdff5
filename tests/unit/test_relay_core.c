/* Unit tests of the fedagg-relay impairment core on a simulated clock
 * (the habit of quicly's t/lossy.c): every test pushes a known sequence of
 * datagrams at known times and checks what comes out, and when.
 *
 * Statistical checks use bounds of at least 5 standard deviations around
 * the expected value; with fixed seeds they are deterministic anyway, but
 * the bounds say what the test claims for any seed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tools/relay/relay.h"

#define MS 1000000ULL
#define SEC 1000000000ULL
#define T0 (1000 * SEC) /* an arbitrary origin, so no test relies on t = 0 */

typedef struct out_pkt {
    uint64_t release, tag, seq;
    int dir;
    size_t len;
    uint8_t data[64];
} out_pkt;

static fa_relay *make(const fa_relay_config *cfg)
{
    fa_relay *r = NULL;
    fa_error err;
    int rv = fa_relay_new(&r, cfg, T0, &err);
    if (rv != 0)
        fail_msg("fa_relay_new: %s", err.msg);
    return r;
}

/* Pops everything due by `now` into out (at most max), in release order. */
static size_t drain(fa_relay *r, uint64_t now, out_pkt *out, size_t max)
{
    size_t n = 0;
    fa_relay_pkt *p;

    while ((p = fa_relay_pop(r, now)) != NULL) {
        if (n < max) {
            out[n].release = p->release_ns;
            out[n].tag = p->tag;
            out[n].seq = p->seq;
            out[n].dir = p->dir;
            out[n].len = p->len;
            memcpy(out[n].data, p->data, p->len < 64 ? p->len : 64);
        }
        n++;
        fa_relay_pkt_free(r, p);
    }
    return n;
}

/* A packet whose 8-byte payload is its index, so the output names its input. */
static void payload(uint8_t *b, uint64_t i)
{
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(i >> (8 * k));
}

static uint64_t payload_index(const uint8_t *b)
{
    uint64_t i = 0;
    for (int k = 0; k < 8; k++)
        i |= (uint64_t)b[k] << (8 * k);
    return i;
}

/* Pushes n 8-byte packets i = 0..n-1 at T0 + i * gap in direction dir. */
static void push_seq(fa_relay *r, int dir, size_t n, uint64_t gap)
{
    uint8_t b[8];
    for (size_t i = 0; i < n; i++) {
        payload(b, i);
        assert_true(fa_relay_push(r, dir, T0 + i * gap, b, sizeof(b), 7) >= 0);
    }
}

static void test_perfect_pipe(void **state)
{
    fa_relay_config cfg;
    fa_relay *r;
    out_pkt out[100];
    uint8_t b[8];

    fa_relay_config_default(&cfg);
    r = make(&cfg);
    for (int i = 0; i < 100; i++) {
        payload(b, (uint64_t)i);
        assert_int_equal(fa_relay_push(r, i % 2, T0 + (uint64_t)i, b, 8, (uint64_t)i * 3), 1);
    }
    assert_int_equal(fa_relay_next_release(r), T0);
    /* Nothing is due before it was pushed. */
    assert_null(fa_relay_pop(r, T0 - 1));
    assert_int_equal(drain(r, T0 + 1000, out, 100), 100);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(payload_index(out[i].data), i);
        assert_int_equal(out[i].tag, (uint64_t)i * 3);
        assert_int_equal(out[i].dir, i % 2);
        assert_int_equal(out[i].release, T0 + (uint64_t)i);
    }
    assert_int_equal(fa_relay_stats(r, FA_RELAY_C2S)->in, 50);
    assert_int_equal(fa_relay_stats(r, FA_RELAY_C2S)->out, 50);
    assert_int_equal(fa_relay_stats(r, FA_RELAY_S2C)->bytes_out, 400);
    assert_int_equal(fa_relay_next_release(r), UINT64_MAX);
    fa_relay_del(r);
}

static void test_bad_input(void **state)
{
    fa_relay_config cfg;
    fa_relay *r;
    fa_error err;
    static uint8_t big[FA_RELAY_MAX_DATAGRAM + 1];

    fa_relay_config_default(&cfg);
    cfg.dir[1].loss = 1.5;
    assert_int_equal(fa_relay_new(&r, &cfg, T0, &err), FA_ERR_INVAL);
    assert_null(r);
    assert_non_null(strstr(err.msg, "s2c loss"));
    fa_relay_config_default(&cfg);
    cfg.dir[0].ge_p = 0.1; /* r = 0: the chain would never leave the bad state */
    assert_int_equal(fa_relay_new(&r, &cfg, T0, &err), FA_ERR_INVAL);
    fa_relay_config_default(&cfg);
    r = make(&cfg);
    assert_int_equal(fa_relay_push(r, 2, T0, big, 1, 0), FA_ERR_INVAL);
    assert_int_equal(fa_relay_push(r, -1, T0, big, 1, 0), FA_ERR_INVAL);
    assert_int_equal(fa_relay_push(r, 0, T0, big, sizeof(big), 0), FA_ERR_INVAL);
    assert_int_equal(fa_relay_push(r, 0, T0, big, FA_RELAY_MAX_DATAGRAM, 0), 1);
    assert_int_equal(fa_relay_push(r, 0, T0, NULL, 0, 0), 1); /* empty datagrams are legal */
    assert_int_equal(fa_relay_queued(r), 2);
    fa_relay_del(r); /* frees what is still queued (checked under ASan) */
    fa_relay_del(NULL);
}

/* Random loss: the drop count is Binomial(n, p). */
static void test_loss_rate(void **state)
{
    const size_t n = 100000;
    const double p = 0.05;
    fa_relay_config cfg;
    fa_relay *r;
    double mean = n * p, sd = sqrt(n * p * (1 - p));
    const fa_relay_dir_stats *st;

    fa_relay_config_default(&cfg);
    cfg.dir[FA_RELAY_C2S].loss = p;
    r = make(&cfg);
    push_seq(r, FA_RELAY_C2S, n, 1000);
    push_seq(r, FA_RELAY_S2C, 1000, 1000); /* the other direction is untouched */
    st = fa_relay_stats(r, FA_RELAY_C2S);
    assert_true(fabs((double)st->dropped_loss - mean) < 5 * sd);
    assert_int_equal(st->dropped_loss + fa_relay_queued(r) - 1000, n);
    assert_int_equal(fa_relay_stats(r, FA_RELAY_S2C)->dropped_loss, 0);
    fa_relay_del(r);
}

/* Computes the loss rate and the mean length of loss runs of direction c2s
 * for n packets, and P(loss | previous lost). */
static void loss_runs(const fa_relay_config *cfg, size_t n, double *rate, double *mean_run,
                      double *p_after_loss)
{
    fa_relay *r = make(cfg);
    uint8_t b[8] = {0};
    size_t lost = 0, runs = 0, lost_after_lost = 0;
    int prev = 0;

    for (size_t i = 0; i < n; i++) {
        int lost_now = fa_relay_push(r, FA_RELAY_C2S, T0 + i, b, sizeof(b), 0) == 0;
        if (lost_now) {
            lost++;
            if (!prev)
                runs++;
            else
                lost_after_lost++;
        }
        prev = lost_now;
        if (i % 4096 == 0)
            drain(r, T0 + i, NULL, 0);
    }
    *rate = (double)lost / (double)n;
    *mean_run = runs ? (double)lost / (double)runs : 0;
    *p_after_loss = lost ? (double)lost_after_lost / (double)lost : 0;
    fa_relay_del(r);
}

/* Gilbert-Elliott: losses come in bursts of mean length 1/r while the
 * long-run rate stays p/(p+r); independent loss at the same rate gives runs
 * of mean length 1/(1-rate). */
static void test_gilbert_elliott_bursts(void **state)
{
    fa_relay_config cfg;
    fa_error err;
    double rate, run, after, rate_iid, run_iid, after_iid;

    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-burst-loss", "2%:4", &err), 1);
    assert_true(fabs(cfg.dir[0].ge_r - 0.25) < 1e-12);
    loss_runs(&cfg, 400000, &rate, &run, &after);
    /* Mean run 4 (sd of the run-length mean over ~2000 runs of a geometric
     * with mean 4 is about 0.08); the rate converges more slowly because
     * losses cluster: relative sd about 4.4 % here. */
    assert_true(fabs(rate - 0.02) < 0.02 * 0.25);
    assert_true(fabs(run - 4.0) < 0.5);
    assert_true(fabs(after - 0.75) < 0.05);

    fa_relay_config_default(&cfg);
    cfg.dir[0].loss = 0.02;
    loss_runs(&cfg, 400000, &rate_iid, &run_iid, &after_iid);
    assert_true(fabs(rate_iid - 0.02) < 0.002);
    assert_true(run_iid < 1.1);
    assert_true(after_iid < 0.04);

    /* Elliott's variant: some loss in the good state, partial in the bad. */
    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "ge", "0.01:0.1:0.5:0.001", &err), 1);
    loss_runs(&cfg, 400000, &rate, &run, &after);
    /* stationary P(bad) = 0.01 / 0.11; loss = 0.0909*0.5 + 0.909*0.001 = 0.0464 */
    assert_true(fabs(rate - 0.0464) < 0.0464 * 0.2);
}

/* Fixed delay plus uniform jitter: every packet leaves within [d - j, d + j]
 * of its arrival, reordered when allowed, in order otherwise. */
static void test_delay_jitter_bounds(void **state)
{
    enum { N = 5000 };
    fa_relay_config cfg;
    fa_relay *r;
    static out_pkt out[N];
    uint64_t lo = UINT64_MAX, hi = 0;
    int inversions = 0;

    fa_relay_config_default(&cfg);
    cfg.dir[0].delay_ns = 50 * MS;
    cfg.dir[0].jitter_ns = 10 * MS;
    cfg.dir[0].jitter_reorder = 1;
    r = make(&cfg);
    push_seq(r, FA_RELAY_C2S, N, 1 * MS);
    assert_int_equal(fa_relay_next_release(r) >= T0 + 40 * MS, 1);
    assert_int_equal(drain(r, T0 + 40 * MS - 1, out, N), 0);
    assert_int_equal(drain(r, UINT64_MAX, out, N), N);
    for (int i = 0; i < N; i++) {
        uint64_t idx = payload_index(out[i].data);
        uint64_t d = out[i].release - (T0 + idx * MS);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        if (i > 0 && idx < payload_index(out[i - 1].data))
            inversions++;
    }
    assert_true(lo >= 40 * MS && hi <= 60 * MS);
    assert_true(lo < 41 * MS && hi > 59 * MS); /* the whole range is used */
    assert_true(inversions > N / 10);           /* 1 ms apart, 20 ms spread */
    fa_relay_del(r);

    cfg.dir[0].jitter_reorder = 0;
    r = make(&cfg);
    push_seq(r, FA_RELAY_C2S, N, 1 * MS);
    assert_int_equal(drain(r, UINT64_MAX, out, N), N);
    lo = UINT64_MAX;
    hi = 0;
    for (int i = 0; i < N; i++) {
        uint64_t d = out[i].release - (T0 + (uint64_t)i * MS);
        assert_int_equal(payload_index(out[i].data), i); /* order kept */
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        if (i > 0)
            assert_true(out[i].release >= out[i - 1].release);
    }
    /* Waiting for the packet ahead never pushes a packet past d + j, since
     * that one left by its own arrival + d + j, which is earlier. */
    assert_true(lo >= 40 * MS && hi <= 60 * MS);
    assert_true(hi > 59 * MS);
    fa_relay_del(r);
}

/* Reordering: a fraction is held back and later packets overtake it. */
static void test_reordering(void **state)
{
    enum { N = 20000 };
    fa_relay_config cfg;
    fa_relay *r;
    static out_pkt out[N];
    size_t held = 0, max_seen = 0;
    const fa_relay_dir_stats *st;
    double sd = sqrt(N * 0.05 * 0.95);

    fa_relay_config_default(&cfg);
    cfg.dir[1].delay_ns = 20 * MS;
    cfg.dir[1].reorder = 0.05;
    cfg.dir[1].reorder_delay_ns = 5 * MS;
    r = make(&cfg);
    push_seq(r, FA_RELAY_S2C, N, 1 * MS);
    assert_int_equal(drain(r, UINT64_MAX, out, N), N);
    st = fa_relay_stats(r, FA_RELAY_S2C);
    assert_true(fabs((double)st->reordered - N * 0.05) < 5 * sd);
    for (int i = 0; i < N; i++) {
        uint64_t idx = payload_index(out[i].data);
        uint64_t d = out[i].release - (T0 + idx * MS);
        assert_true(d == 20 * MS || d == 25 * MS);
        if (d == 25 * MS) {
            held++;
            /* Held back 5 ms with packets 1 ms apart: overtaken (unless it
             * is among the very last, with nobody behind it). */
            if (idx < N - 5)
                assert_true(idx < max_seen);
        }
        if (idx > max_seen)
            max_seen = idx;
    }
    assert_int_equal(held, st->reordered);
    fa_relay_del(r);
}

static int popcount_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += __builtin_popcount((unsigned)(a[i] ^ b[i]));
    return c;
}

/* Corruption flips exactly the configured number of bits in the chosen
 * fraction and leaves the other packets intact. */
static void test_corruption(void **state)
{
    enum { N = 20000, L = 48 };
    fa_relay_config cfg;
    fa_relay *r;
    uint8_t b[L];
    size_t changed = 0;
    double sd = sqrt(N * 0.03 * 0.97);
    fa_relay_pkt *p;

    fa_relay_config_default(&cfg);
    cfg.dir[0].corrupt = 0.03;
    cfg.dir[0].corrupt_bits = 3;
    r = make(&cfg);
    for (int i = 0; i < N; i++) {
        memset(b, (uint8_t)i, L);
        assert_int_equal(fa_relay_push(r, 0, T0 + (uint64_t)i, b, L, 0), 1);
        p = fa_relay_pop(r, T0 + (uint64_t)i);
        assert_non_null(p);
        int d = popcount_diff(p->data, b, L);
        assert_true(d == 0 || d == 3);
        changed += d != 0;
        fa_relay_pkt_free(r, p);
    }
    assert_int_equal(changed, fa_relay_stats(r, 0)->corrupted);
    assert_true(fabs((double)changed - N * 0.03) < 5 * sd);
    fa_relay_del(r);

    /* All packets, one bit, and the bit positions cover the whole packet. */
    fa_relay_config_default(&cfg);
    cfg.dir[0].corrupt = 1.0;
    r = make(&cfg);
    {
        int hit[L * 8] = {0}, covered = 0;
        for (int i = 0; i < 4000; i++) {
            memset(b, 0, L);
            fa_relay_push(r, 0, T0, b, L, 0);
            p = fa_relay_pop(r, T0);
            assert_int_equal(popcount_diff(p->data, b, L), 1);
            for (int k = 0; k < L * 8; k++)
                if (p->data[k / 8] & (1u << (k % 8)))
                    hit[k] = 1;
            fa_relay_pkt_free(r, p);
        }
        for (int k = 0; k < L * 8; k++)
            covered += hit[k];
        assert_int_equal(covered, L * 8);
    }
    /* A one-byte packet cannot lose more than its 8 bits, nor hang. */
    cfg.dir[0].corrupt_bits = 20;
    fa_relay_del(r);
    r = make(&cfg);
    b[0] = 0;
    fa_relay_push(r, 0, T0, b, 1, 0);
    p = fa_relay_pop(r, T0);
    assert_int_equal(p->data[0], 0xff);
    fa_relay_pkt_free(r, p);
    fa_relay_del(r);
}

static void test_duplication(void **state)
{
    enum { N = 20000 };
    fa_relay_config cfg;
    fa_relay *r;
    static out_pkt out[2 * N];
    size_t n;
    double sd = sqrt(N * 0.1 * 0.9);
    const fa_relay_dir_stats *st;

    fa_relay_config_default(&cfg);
    cfg.dir[0].duplicate = 0.1;
    r = make(&cfg);
    push_seq(r, 0, N, 1000);
    n = drain(r, UINT64_MAX, out, 2 * N);
    st = fa_relay_stats(r, 0);
    assert_int_equal(n, N + st->duplicated);
    assert_int_equal(st->out, n);
    assert_true(fabs((double)st->duplicated - N * 0.1) < 5 * sd);
    /* A duplicate follows its original with the same payload. */
    for (size_t i = 1, dups = 0; i < n; i++) {
        if (payload_index(out[i].data) == payload_index(out[i - 1].data))
            dups++;
        if (i == n - 1)
            assert_int_equal(dups, st->duplicated);
    }
    fa_relay_del(r);
}

/* Token bucket: offered 2 MB/s into a 1 MB/s link with a 50 kB queue.  The
 * output never beats rate * t + burst, the link stays busy (output close to
 * the rate), the queue never holds more than its limit, and the excess is
 * dropped at the tail. */
static void test_rate_limit(void **state)
{
    enum { N = 4000, L = 1000 };
    const uint64_t rate = 1000000, burst = 4000, qlimit = 50000;
    fa_relay_config cfg;
    fa_relay *r;
    uint8_t b[L];
    uint64_t out_bytes = 0, max_wait = 0, first_release = 0, last_release = 0;
    fa_relay_pkt *p;
    const fa_relay_dir_stats *st;

    memset(b, 0, L);
    fa_relay_config_default(&cfg);
    cfg.dir[0].rate = rate;
    cfg.dir[0].rate_burst = burst;
    cfg.dir[0].queue_limit = qlimit;
    cfg.dir[0].delay_ns = 10 * MS;
    r = make(&cfg);
    for (int i = 0; i < N; i++) {
        uint64_t now = T0 + (uint64_t)i * 500000; /* 1000 B every 0.5 ms = 2 MB/s */
        fa_relay_push(r, 0, now, b, L, (uint64_t)now);
        while ((p = fa_relay_pop(r, now)) != NULL) {
            uint64_t dep = p->release_ns - 10 * MS; /* when it left the queue */
            uint64_t wait = dep - p->tag;
            if (!first_release)
                first_release = p->release_ns;
            last_release = p->release_ns;
            out_bytes += p->len;
            max_wait = wait > max_wait ? wait : max_wait;
            /* Cumulative output bounded by the bucket. */
            assert_true((double)out_bytes <=
                        (double)burst + (double)rate * (double)(dep - T0) / 1e9 + 1.0);
            fa_relay_pkt_free(r, p);
        }
    }
    while ((p = fa_relay_pop(r, UINT64_MAX)) != NULL) {
        out_bytes += p->len;
        last_release = p->release_ns;
        fa_relay_pkt_free(r, p);
    }
    st = fa_relay_stats(r, 0);
    /* Waiting in the queue is bounded by limit / rate (50 ms). */
    assert_true(max_wait <= qlimit * SEC / rate + 1 * MS);
    assert_true(max_wait >= 40 * MS); /* and the queue did fill */
    /* The link ran at its rate: ~2 s of output at 1 MB/s. */
    {
        double secs = (double)(last_release - first_release) / 1e9;
        double achieved = (double)out_bytes / secs;
        assert_true(achieved > 0.97 * rate && achieved < 1.03 * rate);
    }
    assert_true(st->dropped_queue > N / 2 - 100 && st->dropped_queue < N / 2);
    assert_int_equal(st->out + st->dropped_queue, N);
    fa_relay_del(r);

    /* Below the rate nothing is dropped and nothing waits beyond one packet. */
    r = make(&cfg);
    for (int i = 0; i < 1000; i++) {
        uint64_t now = T0 + (uint64_t)i * 2 * MS; /* 0.5 MB/s */
        fa_relay_push(r, 0, now, b, L, 0);
        p = fa_relay_pop(r, now + 10 * MS);
        assert_non_null(p);
        assert_int_equal(p->release_ns, now + 10 * MS);
        fa_relay_pkt_free(r, p);
    }
    assert_int_equal(fa_relay_stats(r, 0)->dropped_queue, 0);
    fa_relay_del(r);
}

/* Blackhole: exactly the packets arriving in [start, start + duration) are
 * dropped, in the configured direction only. */
static void test_blackhole_window(void **state)
{
    enum { N = 3000 };
    fa_relay_config cfg;
    fa_relay *r;
    fa_error err;
    uint8_t b[8];

    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-blackhole", "1.0:0.5", &err), 1);
    r = make(&cfg);
    for (int i = 0; i < N; i++) {
        uint64_t t = T0 + (uint64_t)i * MS;
        int in_window = i >= 1000 && i < 1500;
        payload(b, (uint64_t)i);
        assert_int_equal(fa_relay_push(r, FA_RELAY_C2S, t, b, 8, 0), in_window ? 0 : 1);
        assert_int_equal(fa_relay_push(r, FA_RELAY_S2C, t, b, 8, 0), 1);
        /* The edges of the window, to the nanosecond. */
        if (i == 999)
            assert_int_equal(fa_relay_push(r, 0, T0 + SEC - 1, b, 8, 0), 1);
        if (i == 1499)
            assert_int_equal(fa_relay_push(r, 0, T0 + 1500 * MS - 1, b, 8, 0), 0);
    }
    assert_int_equal(fa_relay_stats(r, 0)->dropped_blackhole, 501);
    assert_int_equal(fa_relay_stats(r, 1)->dropped_blackhole, 0);
    /* A new origin moves the window ("--t0 first-packet"). */
    fa_relay_set_t0(r, T0 + 10 * SEC);
    assert_int_equal(fa_relay_push(r, 0, T0 + 11 * SEC, b, 8, 0), 0);
    assert_int_equal(fa_relay_push(r, 0, T0 + 10 * SEC, b, 8, 0), 1);
    assert_int_equal(fa_relay_push(r, 0, T0 + 5 * SEC, b, 8, 0), 1); /* before t0 */
    fa_relay_del(r);

    /* Windows added at run time (the edge's SIGUSR2), relative to t0. */
    fa_relay_config_default(&cfg);
    r = make(&cfg);
    assert_int_equal(fa_relay_blackhole_add(r, 2, 0, SEC), FA_ERR_INVAL);
    assert_int_equal(fa_relay_blackhole_add(r, FA_RELAY_S2C, 3 * SEC, SEC), 0);
    assert_int_equal(fa_relay_push(r, 0, T0 + 3 * SEC, b, 8, 0), 1);
    assert_int_equal(fa_relay_push(r, 1, T0 + 3 * SEC, b, 8, 0), 0);
    for (int i = 1; i < FA_RELAY_MAX_BLACKHOLES; i++)
        assert_int_equal(fa_relay_blackhole_add(r, -1, 5 * SEC, MS), 0);
    assert_int_equal(fa_relay_push(r, 0, T0 + 5 * SEC, b, 8, 0), 0);
    /* s2c is full; c2s is not, but a window for both goes nowhere. */
    assert_int_equal(fa_relay_blackhole_add(r, -1, 7 * SEC, SEC), FA_ERR_RANGE);
    assert_int_equal(fa_relay_push(r, 0, T0 + 7 * SEC, b, 8, 0), 1);
    assert_int_equal(fa_relay_blackhole_add(r, FA_RELAY_C2S, 7 * SEC, SEC), 0);
    assert_int_equal(fa_relay_push(r, 0, T0 + 7 * SEC, b, 8, 0), 0);
    assert_int_equal(fa_relay_t0(r), T0);
    fa_relay_del(r);

    /* Two windows, both directions. */
    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "blackhole", "0:10ms", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "blackhole", "2:1", &err), 1);
    r = make(&cfg);
    assert_int_equal(fa_relay_push(r, 1, T0, b, 8, 0), 0);
    assert_int_equal(fa_relay_push(r, 1, T0 + 10 * MS, b, 8, 0), 1);
    assert_int_equal(fa_relay_push(r, 0, T0 + 2500 * MS, b, 8, 0), 0);
    assert_int_equal(fa_relay_push(r, 1, T0 + 3 * SEC, b, 8, 0), 1);
    fa_relay_del(r);
}

/* Same seed and input: the same output, byte for byte and nanosecond for
 * nanosecond; another seed: another output.  Switching on corruption does
 * not move the losses. */
static void run_mix(uint64_t seed, int with_corrupt, out_pkt *out, size_t *n, uint64_t *lost)
{
    fa_relay_config cfg;
    fa_relay *r;
    fa_error err;

    fa_relay_config_default(&cfg);
    cfg.seed = seed;
    assert_int_equal(fa_relay_profile_apply(&cfg, "wan220", &err), 0);
    assert_int_equal(fa_relay_option_parse(&cfg, "duplicate", "1%", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "rate", "2M", &err), 1);
    if (with_corrupt)
        assert_int_equal(fa_relay_option_parse(&cfg, "corrupt", "5%", &err), 1);
    r = make(&cfg);
    push_seq(r, FA_RELAY_C2S, 3000, 300000);
    *n = drain(r, UINT64_MAX, out, 4000);
    *lost = fa_relay_stats(r, 0)->dropped_burst;
    fa_relay_del(r);
}

static void test_determinism(void **state)
{
    static out_pkt a[4000], b[4000];
    size_t na, nb;
    uint64_t la, lb;
    int same = 1;

    run_mix(42, 0, a, &na, &la);
    run_mix(42, 0, b, &nb, &lb);
    assert_int_equal(na, nb);
    assert_int_equal(la, lb);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(a[i].release, b[i].release);
        assert_memory_equal(a[i].data, b[i].data, 8);
    }
    run_mix(43, 0, b, &nb, &lb);
    if (na == nb)
        for (size_t i = 0; i < na && same; i++)
            same = a[i].release == b[i].release && !memcmp(a[i].data, b[i].data, 8);
    assert_false(na == nb && same);
    run_mix(42, 1, b, &nb, &lb);
    assert_int_equal(la, lb);
}

static void test_max_buffer(void **state)
{
    fa_relay_config cfg;
    fa_relay *r;
    static uint8_t b[FA_RELAY_MAX_DATAGRAM];

    fa_relay_config_default(&cfg);
    cfg.max_buffer = 4 * FA_RELAY_MAX_DATAGRAM;
    cfg.dir[0].delay_ns = SEC;
    r = make(&cfg);
    for (int i = 0; i < 6; i++)
        fa_relay_push(r, 0, T0, b, sizeof(b), 0);
    assert_int_equal(fa_relay_queued(r), 4);
    assert_int_equal(fa_relay_queued_bytes(r), 4 * sizeof(b));
    assert_int_equal(fa_relay_stats(r, 0)->dropped_buffer, 2);
    assert_int_equal(drain(r, T0 + SEC, NULL, 0), 4);
    assert_int_equal(fa_relay_push(r, 0, T0 + SEC, b, sizeof(b), 0), 1); /* room again */
    fa_relay_count_edge_drop(r, 0, sizeof(b));
    assert_int_equal(fa_relay_stats(r, 0)->dropped_edge, 1);
    assert_int_equal(fa_relay_stats(r, 0)->out, 3);
    {
        char line[2048];
        fa_relay_stats_format(r, line, sizeof(line));
        assert_non_null(strstr(line, "c2s_in=7 c2s_out=3 c2s_dropped=3 "));
        assert_non_null(strstr(line, "c2s_dropped_buffer=2"));
        assert_non_null(strstr(line, " s2c_in=0 "));
        fa_relay_stats_format(r, line, 10); /* truncates, terminates */
        assert_int_equal(strlen(line), 9);
    }
    fa_relay_del(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_perfect_pipe),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_loss_rate),
        cmocka_unit_test(test_gilbert_elliott_bursts),
        cmocka_unit_test(test_delay_jitter_bounds),
        cmocka_unit_test(test_reordering),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_duplication),
        cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_blackhole_window),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_max_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
