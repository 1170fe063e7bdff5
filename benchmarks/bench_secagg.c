/* bench_secagg.c - `fedagg-bench secagg`: secure aggregation end to end
 * (docs/secure-aggregation.md).
 *
 *   what=round          a whole in-process round, n = 16 clients, d = 10^7
 *                       floats, 0 % and 25 % dropouts (the dropouts leave
 *                       after sending their shares, so their pairwise masks
 *                       must be rebuilt and removed): every client's
 *                       encode + mask + pack + hash and every server step,
 *                       next to a plain weighted sum of the same inputs
 *   what=server_sum     the server's share of that round: the masked chunks
 *                       added into the running sum (unpack, journal,
 *                       SHA-256), next to a memcpy of the same bytes
 *   what=server_unmask  the unmask close: secrets rebuilt and every mask
 *                       expanded out of the sum, next to a memcpy of as many
 *                       bytes as the masks have
 *   what=wire           bytes a client sends and receives per parameter
 *                       (every message of a real round, d = 10^6) for
 *                       b in {8, 12, 16} and n in {3, 16}, next to 4 bytes
 *                       of float32
 *   what=share_decode   rebuilding one secret from m shares of which e =
 *                       (m - t) / 2 are bad (t = m/2 + 1, every byte of
 *                       them wrong), as the unmask close does when a region
 *                       reveals bad shares (Berlekamp-Welch decoding), next
 *                       to combining t good shares (the usual case), for
 *                       m in {16, 64, 255}
 * Times are CPU seconds of the process, all its threads together (the
 * machine may be shared; the round runs on one thread but for the unmask
 * close, which uses one per core: server_unmask also gives its wall time),
 * best of --reps.
 * Never fails for being slow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_time.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg.h"
#include "crypto/shamir_internal.h"
#include "tests/unit/test_crypto_harness.h"

const char fa_bench_secagg_help[] =
    "secure aggregation: in-process round n=16 d=1e7 (0%, 25% dropout) vs plain sum; server sum "
    "and unmask vs memcpy; share decoding vs combining; wire bytes per parameter";

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHUNK (1u << 20)

struct timing {
    double total, server_sum, server_unmask, server_unmask_wall;
    uint64_t upload_bytes;
    size_t survivors, dropouts;
    uint64_t sent[FA_SECAGG_MAX_CLIENTS], received[FA_SECAGG_MAX_CLIENTS];
};

#define CK(expr)                                                                                   \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "fedagg-bench secagg: %s: %s\n", #expr, fa_error_msg(&err, rc_));      \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* One round; clients i with drop[i] leave after round 1. */
static int run_round(const th_fed *f, const fa_secagg_config *cfg, float *const *x, const double *w,
                     const int *drop, float *avg, struct timing *tm)
{
    size_t n = f->n;
    fa_secagg_server *s = NULL;
    fa_secagg_client *c[FA_SECAGG_MAX_CLIENTS] = {0};
    th_rng rr;
    fa_secagg_rng rng = {th_rng_fill, &rr};
    uint8_t *m = NULL, *r = NULL, *buf = malloc(CHUNK);
    size_t len, rlen, got;
    double t0, t, tw;
    fa_error err;
    int ok = -1;

    memset(tm, 0, sizeof(*tm));
    fa_error_clear(&err);
    th_rng_init(&rr, 5);
    t0 = cpu_now();
    CK(fa_secagg_server_new(&s, cfg, f->members, n, &err));
    for (size_t i = 0; i < n; i++) {
        CK(fa_secagg_client_new(&c[i], cfg, f->seeds[i], f->ids[i], f->members, n, &rng, &err));
        CK(fa_secagg_client_advertise(c[i], &m, &len, &err));
        CK(fa_secagg_server_advertise(s, f->ids[i], m, len, 1, &err));
        tm->sent[i] += len;
        free(m);
        m = NULL;
    }
    CK(fa_secagg_server_close(s, 2, &err));
    CK(fa_secagg_server_peer_list(s, &r, &rlen, &err));
    for (size_t i = 0; i < n; i++) {
        CK(fa_secagg_client_peer_list(c[i], r, rlen, 3, &err));
        tm->received[i] += rlen;
        CK(fa_secagg_client_share_keys(c[i], &m, &len, &err));
        CK(fa_secagg_server_share_keys(s, f->ids[i], m, len, 3, &err));
        tm->sent[i] += len;
        free(m);
        m = NULL;
    }
    free(r);
    r = NULL;
    CK(fa_secagg_server_close(s, 4, &err));
    for (size_t i = 0; i < n; i++) {
        if (drop[i])
            continue;
        CK(fa_secagg_server_shares_for(s, f->ids[i], &r, &rlen, &err));
        CK(fa_secagg_client_shares(c[i], r, rlen, 5, &err));
        tm->received[i] += rlen;
        free(r);
        r = NULL;
        CK(fa_secagg_client_set_input_f32(c[i], x[i], (size_t)cfg->vector_len - 1, w[i], &err));
        t = cpu_now();
        CK(fa_secagg_server_masked_begin(s, f->ids[i], 6, &err));
        tm->server_sum += cpu_now() - t;
        for (;;) {
            CK(fa_secagg_client_masked_next(c[i], buf, CHUNK, &got, &err));
            if (got == 0)
                break;
            t = cpu_now();
            CK(fa_secagg_server_masked_chunk(s, f->ids[i], buf, got, 6, &err));
            tm->server_sum += cpu_now() - t;
            tm->sent[i] += got;
            tm->upload_bytes += got;
        }
        t = cpu_now();
        CK(fa_secagg_server_masked_end(s, f->ids[i], 6, &err));
        tm->server_sum += cpu_now() - t;
    }
    CK(fa_secagg_server_close(s, 7, &err));
    CK(fa_secagg_server_survivor_list(s, &r, &rlen, &err));
    for (size_t i = 0; i < n; i++) {
        if (drop[i])
            continue;
        CK(fa_secagg_client_survivors(c[i], r, rlen, 8, &m, &len, &err));
        tm->received[i] += rlen;
        CK(fa_secagg_server_consistency(s, f->ids[i], m, len, 8, &err));
        tm->sent[i] += len;
        free(m);
        m = NULL;
    }
    free(r);
    r = NULL;
    CK(fa_secagg_server_close(s, 9, &err));
    CK(fa_secagg_server_survivor_signatures(s, &r, &rlen, &err));
    for (size_t i = 0; i < n; i++) {
        if (drop[i])
            continue;
        CK(fa_secagg_client_signatures(c[i], r, rlen, 10, &m, &len, &err));
        tm->received[i] += rlen;
        CK(fa_secagg_server_unmask(s, f->ids[i], m, len, 10, &err));
        tm->sent[i] += len;
        free(m);
        m = NULL;
    }
    t = cpu_now();
    tw = fa_time_mono_s();
    CK(fa_secagg_server_close(s, 11, &err));
    tm->server_unmask = cpu_now() - t;
    tm->server_unmask_wall = fa_time_mono_s() - tw;
    CK(fa_secagg_server_result_f32(s, avg, (size_t)cfg->vector_len - 1, NULL, &err));
    tm->total = cpu_now() - t0;
    tm->survivors = fa_secagg_server_survivor_count(s);
    tm->dropouts = fa_secagg_server_dropout_count(s);
    ok = 0;
out:
    free(m);
    free(r);
    free(buf);
    for (size_t i = 0; i < n; i++)
        fa_secagg_client_del(c[i]);
    fa_secagg_server_del(s);
    return ok;
}

/* The anchor: the same weighted average without any protection, with the
 * same vectorisation as our loops (chunks + per-ISA clones). */
FA_CLONES
static void axpy(float *restrict y, const float *restrict x, float a, uint64_t d)
{
    uint64_t j = 0;
    for (; j + FA_CHUNK <= d; j += FA_CHUNK)
        for (uint64_t k = 0; k < FA_CHUNK; k++)
            y[j + k] += a * x[j + k];
    for (; j < d; j++)
        y[j] += a * x[j];
}

FA_CLONES
static void scale(float *y, float a, uint64_t d)
{
    uint64_t j = 0;
    for (; j + FA_CHUNK <= d; j += FA_CHUNK)
        for (uint64_t k = 0; k < FA_CHUNK; k++)
            y[j + k] *= a;
    for (; j < d; j++)
        y[j] *= a;
}

static double plain_seconds(float *const *x, const double *w, const int *drop, size_t n, uint64_t d,
                            float *avg)
{
    double t0 = cpu_now(), wsum = 0;
    memset(avg, 0, d * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (drop[i])
            continue;
        wsum += w[i];
        axpy(avg, x[i], (float)w[i], d);
    }
    scale(avg, (float)(1.0 / wsum), d);
    return cpu_now() - t0;
}

static double memcpy_seconds(uint64_t bytes)
{
    uint8_t *a = malloc(CHUNK), *b = malloc(CHUNK);
    double t0;
    memset(a, 1, CHUNK);
    memset(b, 2, CHUNK);
    t0 = cpu_now();
    for (uint64_t done = 0; done < bytes; done += CHUNK) {
        memcpy(b, a, CHUNK);
        a[done % CHUNK] ^= b[(done / CHUNK) % CHUNK]; /* keep the copies */
    }
    t0 = cpu_now() - t0;
    free(a);
    free(b);
    return t0;
}

static int bench_rounds(size_t n, uint64_t d, int reps)
{
    th_fed f;
    th_rng rr;
    fa_secagg_config cfg;
    float **x = calloc(n, sizeof(*x)), *avg = malloc(d * sizeof(float)),
          *ref = malloc(d * sizeof(float));
    double w[FA_SECAGG_MAX_CLIENTS];
    const double fractions[] = {0.0, 0.25};

    th_fed_init(&f, n, 16);
    th_rng_init(&rr, 17);
    cfg = th_cfg((uint32_t)(n / 2 + 1), 0, d + 1, 0);
    cfg.quant.bits = 16;
    cfg.ring_bits = fa_secagg_ring_bits_for(16, (uint32_t)n);
    cfg.quant.clip_mode = FA_SECAGG_CLIP_BOTH;
    cfg.quant.clip_l2_norm = 100.0;
    cfg.quant.clip_value = 0.05;
    for (size_t i = 0; i < n; i++) {
        uint32_t *bits = malloc(d * 4);
        x[i] = malloc(d * sizeof(float));
        if (!x[i] || !bits)
            return 1;
        th_rng_fill(&rr, bits, d * 4);
        for (uint64_t j = 0; j < d; j++)
            x[i][j] = (float)((int32_t)bits[j]) * 0x1p-37f; /* about +-0.0156 */
        free(bits);
        w[i] = 0.5 + 0.5 * (double)th_below(&rr, 1000) / 1000.0;
    }
    for (size_t fi = 0; fi < sizeof(fractions) / sizeof(fractions[0]); fi++) {
        int drop[FA_SECAGG_MAX_CLIENTS] = {0};
        size_t ndrop = (size_t)(fractions[fi] * (double)n + 0.5);
        struct timing best, tm;
        double t_plain = -1, t_mc_sum = -1, t_mc_unmask = -1, maxerr = 0;
        uint64_t mask_bytes;
        for (size_t i = 0; i < ndrop; i++)
            drop[n - 1 - 2 * i] = 1; /* spread over the id order */
        memset(&best, 0, sizeof(best));
        for (int rep = 0; rep < reps; rep++) {
            double tp;
            if (run_round(&f, &cfg, x, w, drop, avg, &tm) != 0)
                return 1;
            tp = plain_seconds(x, w, drop, n, d, ref);
            if (rep == 0 || tm.total < best.total)
                best.total = tm.total;
            if (rep == 0 || tm.server_sum < best.server_sum)
                best.server_sum = tm.server_sum;
            if (rep == 0 || tm.server_unmask < best.server_unmask)
                best.server_unmask = tm.server_unmask;
            if (rep == 0 || tm.server_unmask_wall < best.server_unmask_wall)
                best.server_unmask_wall = tm.server_unmask_wall;
            best.upload_bytes = tm.upload_bytes;
            best.survivors = tm.survivors;
            best.dropouts = tm.dropouts;
            if (t_plain < 0 || tp < t_plain)
                t_plain = tp;
        }
        /* the secure average is the plain one up to the quantisation */
        for (uint64_t j = 0; j < d; j++) {
            double e = avg[j] > ref[j] ? avg[j] - ref[j] : ref[j] - avg[j];
            maxerr = e > maxerr ? e : maxerr;
        }
        /* self masks of the survivors + one pairwise mask per (dropout, survivor) */
        mask_bytes = 4 * (d + 1) * (best.survivors + best.dropouts * best.survivors);
        for (int rep = 0; rep < reps; rep++) {
            double a = memcpy_seconds(best.upload_bytes), b = memcpy_seconds(mask_bytes);
            t_mc_sum = t_mc_sum < 0 || a < t_mc_sum ? a : t_mc_sum;
            t_mc_unmask = t_mc_unmask < 0 || b < t_mc_unmask ? b : t_mc_unmask;
        }
        printf("{\"bench\":\"secagg\",\"what\":\"round\",\"n\":%zu,\"d\":%llu,\"dropout\":%.2f,"
               "\"survivors\":%zu,\"quant_bits\":16,\"ring_bits\":%u,\"cpu_seconds\":%.3f,"
               "\"ref\":\"plain_weighted_sum\",\"ref_cpu_seconds\":%.4f,\"ratio\":%.1f,"
               "\"max_abs_error\":%.2e}\n",
               n, (unsigned long long)d, fractions[fi], best.survivors, cfg.ring_bits, best.total,
               t_plain, best.total / t_plain, maxerr);
        printf(
            "{\"bench\":\"secagg\",\"what\":\"server_sum\",\"n\":%zu,\"d\":%llu,\"dropout\":%.2f,"
            "\"bytes\":%llu,\"cpu_seconds\":%.4f,\"gbytes_per_s\":%.3f,\"ref\":\"memcpy\","
            "\"ref_gbytes_per_s\":%.3f,\"ratio\":%.3f}\n",
            n, (unsigned long long)d, fractions[fi], (unsigned long long)best.upload_bytes,
            best.server_sum, best.upload_bytes / best.server_sum / 1e9,
            best.upload_bytes / t_mc_sum / 1e9, t_mc_sum / best.server_sum);
        printf("{\"bench\":\"secagg\",\"what\":\"server_unmask\",\"n\":%zu,\"d\":%llu,"
               "\"dropout\":%.2f,\"masks\":%zu,\"mask_bytes\":%llu,\"cpu_seconds\":%.4f,"
               "\"wall_seconds\":%.4f,\"cores\":%ld,"
               "\"gbytes_per_s\":%.3f,\"ref\":\"memcpy\",\"ref_gbytes_per_s\":%.3f,"
               "\"ratio\":%.3f}\n",
               n, (unsigned long long)d, fractions[fi],
               best.survivors + best.dropouts * best.survivors, (unsigned long long)mask_bytes,
               best.server_unmask, best.server_unmask_wall, sysconf(_SC_NPROCESSORS_ONLN),
               mask_bytes / best.server_unmask / 1e9, mask_bytes / t_mc_unmask / 1e9,
               t_mc_unmask / best.server_unmask);
        fflush(stdout);
    }
    for (size_t i = 0; i < n; i++)
        free(x[i]);
    free(x);
    free(avg);
    free(ref);
    return 0;
}

static int bench_wire(uint64_t d)
{
    const uint32_t bits[] = {8, 12, 16};
    const size_t ns[] = {3, 16};
    for (size_t a = 0; a < 3; a++) {
        for (size_t b = 0; b < 2; b++) {
            size_t n = ns[b];
            th_fed f;
            th_rng rr;
            fa_secagg_config cfg;
            struct timing tm;
            int drop[FA_SECAGG_MAX_CLIENTS] = {0};
            float **x = calloc(n, sizeof(*x)), *avg = malloc(d * sizeof(float));
            double w[FA_SECAGG_MAX_CLIENTS], up = 0, down = 0;
            th_fed_init(&f, n, 30 + n);
            th_rng_init(&rr, 31);
            cfg = th_cfg((uint32_t)(n / 2 + 1), 0, d + 1, 0);
            cfg.quant.bits = bits[a];
            cfg.ring_bits = fa_secagg_ring_bits_for(bits[a], (uint32_t)n);
            for (size_t i = 0; i < n; i++) {
                x[i] = calloc(d, sizeof(float));
                w[i] = 1.0;
            }
            if (run_round(&f, &cfg, x, w, drop, avg, &tm) != 0)
                return 1;
            for (size_t i = 0; i < n; i++) {
                up += (double)tm.sent[i];
                down += (double)tm.received[i];
            }
            up /= (double)n * (double)d;
            down /= (double)n * (double)d;
            printf("{\"bench\":\"secagg\",\"what\":\"wire\",\"quant_bits\":%u,\"n\":%zu,"
                   "\"ring_bits\":%u,\"d\":%llu,\"upload_bytes_per_param\":%.4f,"
                   "\"download_bytes_per_param\":%.6f,\"ref\":\"float32\","
                   "\"ref_bytes_per_param\":4,\"ratio\":%.3f}\n",
                   bits[a], n, cfg.ring_bits, (unsigned long long)d, up, down, up / 4.0);
            fflush(stdout);
            for (size_t i = 0; i < n; i++)
                free(x[i]);
            free(x);
            free(avg);
        }
    }
    return 0;
}

/* what=share_decode: the slow path of a secret with bad shares against
 * the usual one, CPU seconds per secret, best of reps. */
static int bench_decode(int reps)
{
    static const size_t ms[] = {16, 64, 255};
    for (size_t c = 0; c < sizeof(ms) / sizeof(ms[0]); c++) {
        size_t m = ms[c], t = m / 2 + 1, e = (m - t) / 2;
        uint8_t secret[32], got[32], xs[255], wrong[255], *shares = malloc(m * 32);
        double best = 1e30, anchor = 1e30;
        int iters = m > 100 ? 1 : 20;
        th_rng r;
        fa_secagg_rng rng = {th_rng_fill, &r};
        if (!shares)
            return 1;
        th_rng_init(&r, 4242 + m);
        th_rng_fill(&r, secret, 32);
        for (size_t i = 0; i < m; i++)
            xs[i] = (uint8_t)(i + 1);
        if (fa_shamir_split(secret, (unsigned)t, xs, m, shares, &rng) != 0) {
            free(shares);
            return 1;
        }
        for (size_t i = 0; i < e; i++) /* the first e holders lie in every byte */
            for (int b = 0; b < 32; b++)
                shares[32 * i + b] ^= (uint8_t)(b + 1);
        for (int rep = 0; rep < reps; rep++) {
            double t0 = cpu_now(), t1;
            for (int k = 0; k < iters; k++)
                if (fa_shamir_decode(got, xs, shares, m, t, wrong) != 0 ||
                    memcmp(got, secret, 32) != 0) {
                    fprintf(stderr, "fedagg-bench secagg: share_decode m=%zu failed\n", m);
                    free(shares);
                    return 1;
                }
            t1 = cpu_now();
            if ((t1 - t0) / iters < best)
                best = (t1 - t0) / iters;
            t0 = cpu_now();
            for (int k = 0; k < iters * 20; k++)
                fa_shamir_combine(got, xs + e, shares + 32 * e, t);
            t1 = cpu_now();
            if ((t1 - t0) / (iters * 20) < anchor)
                anchor = (t1 - t0) / (iters * 20);
        }
        printf("{\"bench\":\"secagg\",\"what\":\"share_decode\",\"m\":%zu,\"t\":%zu,"
               "\"bad\":%zu,\"seconds\":%.6f,\"ref\":\"shamir_combine_t\",\"ref_seconds\":%.6f,"
               "\"ratio\":%.1f}\n",
               m, t, e, best, anchor, anchor > 0 ? best / anchor : 0.0);
        fflush(stdout);
        free(shares);
    }
    return 0;
}

int fa_bench_secagg(int argc, char **argv)
{
    uint64_t d = 10000000, wire_d = 1000000;
    size_t n = 16;
    int reps = 2, only_wire = 0, only_decode = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--d") && i + 1 < argc)
            d = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--wire-only"))
            only_wire = 1;
        else if (!strcmp(argv[i], "--decode-only"))
            only_decode = 1;
        else {
            fprintf(stderr,
                    "usage: fedagg-bench secagg [--d N] [--n N] [--reps R] [--wire-only] "
                    "[--decode-only]\n%s\n",
                    fa_bench_secagg_help);
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (n < 2 || n > FA_SECAGG_MAX_CLIENTS || d < 8 || reps < 1)
        return 2;
    if (only_decode)
        return bench_decode(reps);
    if (!only_wire && bench_rounds(n, d, reps) != 0)
        return 1;
    if (bench_decode(reps) != 0)
        return 1;
    return bench_wire(wire_d);
}
