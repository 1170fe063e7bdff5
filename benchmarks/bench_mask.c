/* bench_mask.c - `fedagg-bench mask`: the client's masking throughput
 * (docs/secure-aggregation.md; its target: docs/history.md).
 *
 * For d = 2^24 coordinates and n in {4, 16} clients (one self mask and n - 1
 * pairwise masks, so 4 * d * n mask bytes), next to the raw AES-128-CTR
 * keystream of OpenSSL EVP over the same number of bytes in the same
 * process:
 *   what=mask_expand    the masking step alone, as the client runs it for a
 *                       ring input: fa_mask_prg_mask over each FA_MASK_PRG_BLOCK_WORDS
 *                       block, from the input into the accumulator, with
 *                       the client's buffers (sodium_malloc) and signs; on
 *                       the generator this CPU gets (mask_prg: vaes512,
 *                       vaes256 or openssl, crypto/mask_prg_internal.h) and, when
 *                       that is a VAES one, a second line on OpenSSL's EVP
 *   what=masked_stream  fa_secagg_client_masked_next end to end from a
 *                       pre-quantised input: masks, k-bit packing, BLAKE3
 *   what=masked_stream_f32  the same from floats: clip, stochastic rounding
 *   what=upload_digest  the commitment hash of the masked stream (d
 *                       coordinates of k bits, fed in the packed blocks the
 *                       client produces): BLAKE3 (common/fa_blake3.h)
 *                       next to the SHA-256 of secagg.proto version 3
 *                       (OpenSSL), bytes hashed per second, ratio = ours / SHA-256
 * Each timing is the best of several runs, in thread CPU seconds (the
 * machine may be shared; on an idle one this is the wall time): --reps
 * rounds of three mask_expand runs (the cheap one) and one of each stream,
 * each run of ours right after a run of the anchor; each line's anchor
 * figure is the best of the anchor runs paired with that line's, so both
 * sides of a ratio had the same number of tries at the same moments.  Mask
 * bytes per second; ratio = ours / AES (target >= 0.8 for mask_expand),
 * and ratio_pair_median, the median of the per-pair ratios (steadier on a
 * loaded machine).  Never fails for being slow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "benchmarks/measure.h"
#include "common/fa_blake3.h"
#include "common/fa_sha256.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg.h"
#include "tests/unit/test_crypto_harness.h"

const char fa_bench_mask_help[] =
    "client masking throughput (mask bytes/s) next to raw OpenSSL AES-128-CTR; d=2^24, n=4,16";

/* Every time below is thread CPU time (fa_bench_thread_cpu_s): this
 * machine is shared, and CPU time is what our code and its anchor cost,
 * whoever else is running.  On an idle machine it is the wall time. */

/* Raw keystream: AES-128-CTR over zeros, in the same 16 KiB blocks. */
static double aes_seconds(uint64_t bytes)
{
    static uint8_t zeros[FA_MASK_PRG_BLOCK_WORDS * 4];
    uint8_t *out = malloc(sizeof(zeros)), key[16] = {1}, iv[16] = {0};
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    double t0;
    int outl;
    EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), NULL, key, iv);
    t0 = fa_bench_thread_cpu_s();
    for (uint64_t done = 0; done < bytes; done += sizeof(zeros))
        EVP_EncryptUpdate(ctx, out, &outl, zeros, (int)sizeof(zeros));
    t0 = fa_bench_thread_cpu_s() - t0;
    EVP_CIPHER_CTX_free(ctx);
    free(out);
    return t0;
}

/* A client of an n-client federation brought to the masked phase. */
static fa_secagg_client *client_ready(size_t n, const fa_secagg_config *cfg, th_fed *f, th_rng *rr)
{
    fa_secagg_rng rng = {th_rng_fill, rr};
    fa_secagg_server *s = NULL;
    fa_secagg_client *c[FA_SECAGG_MAX_CLIENTS] = {0}, *keep = NULL;
    uint8_t *m, *r;
    size_t len, rlen;
    if (fa_secagg_server_new(&s, cfg, f->members, n, NULL) != 0)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (fa_secagg_client_new(&c[i], cfg, f->seeds[i], f->ids[i], f->members, n, &rng, NULL) ||
            fa_secagg_client_advertise(c[i], &m, &len, NULL) ||
            fa_secagg_server_advertise(s, f->ids[i], m, len, 1, NULL))
            goto out;
        free(m);
    }
    if (fa_secagg_server_close(s, 2, NULL) || fa_secagg_server_peer_list(s, &r, &rlen, NULL))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (fa_secagg_client_peer_list(c[i], r, rlen, 3, NULL) ||
            fa_secagg_client_share_keys(c[i], &m, &len, NULL) ||
            fa_secagg_server_share_keys(s, f->ids[i], m, len, 3, NULL))
            goto out;
        free(m);
    }
    free(r);
    if (fa_secagg_server_close(s, 4, NULL) ||
        fa_secagg_server_shares_for(s, f->ids[0], &r, &rlen, NULL) ||
        fa_secagg_client_shares(c[0], r, rlen, 5, NULL))
        goto out;
    free(r);
    keep = c[0];
    c[0] = NULL;
out:
    for (size_t i = 0; i < n; i++)
        fa_secagg_client_del(c[i]);
    fa_secagg_server_del(s);
    return keep;
}

static double stream_seconds(fa_secagg_client *c, uint8_t *buf, size_t cap)
{
    size_t got;
    double t0 = fa_bench_thread_cpu_s();
    fa_secagg_client_masked_rewind(c, NULL);
    do {
        if (fa_secagg_client_masked_next(c, buf, cap, &got, NULL) != 0)
            return -1;
    } while (got > 0);
    return fa_bench_thread_cpu_s() - t0;
}

/* The runs of one line: each of ours right after one of the anchor. */
#define MAX_PAIRS 256
struct pairs {
    double ours, ref;        /* best times, -1 until a run succeeded */
    double ratio[MAX_PAIRS]; /* anchor time / our time, per pair (the first MAX_PAIRS) */
    int n;
};

static void pair_add(struct pairs *p, double ref, double ours)
{
    if (ref > 0 && (p->ref < 0 || ref < p->ref))
        p->ref = ref;
    if (ours > 0 && (p->ours < 0 || ours < p->ours))
        p->ours = ours;
    if (ref > 0 && ours > 0 && p->n < MAX_PAIRS)
        p->ratio[p->n++] = ref / ours;
}

/* ratio = our best / the anchor's best; ratio_pair_median = the median over
 * pairs of (anchor time / our time), the two runs of a pair being
 * back to back: it drifts less with the load of a shared machine than a
 * ratio of two minima taken at different moments. */
static void line(const char *what, const char *input, const char *impl, uint64_t d, size_t n,
                 uint32_t k, double mask_bytes, struct pairs *p)
{
    double gbs = mask_bytes / p->ours / 1e9, ref = mask_bytes / p->ref / 1e9, med = 0;
    if (p->n > 0) {
        qsort(p->ratio, (size_t)p->n, sizeof(double), fa_bench_cmp_double);
        med = p->n % 2 ? p->ratio[p->n / 2] : 0.5 * (p->ratio[p->n / 2 - 1] + p->ratio[p->n / 2]);
    }
    printf("{\"bench\":\"mask\",\"what\":\"%s\",\"input\":\"%s\",\"mask_prg\":\"%s\","
           "\"d\":%llu,\"n\":%zu,\"ring_bits\":%u,\"mask_bytes\":%.0f,\"cpu_seconds\":%.4f,"
           "\"gbytes_per_s\":%.3f,\"ref\":\"openssl_aes128ctr\",\"ref_gbytes_per_s\":%.3f,"
           "\"ratio\":%.3f,\"pairs\":%d,\"ratio_pair_median\":%.3f}\n",
           what, input, impl, (unsigned long long)d, n, k, mask_bytes, p->ours, gbs, ref, gbs / ref,
           p->n, med);
    fflush(stdout);
}

/* The masked stream's commitment: `bytes` of packed stream hashed in the
 * client's blocks of FA_MASK_PRG_BLOCK_WORDS coordinates (`piece` bytes). */
static double digest_seconds(const uint8_t *p, size_t bytes, size_t piece, int blake3)
{
    fa_blake3_ctx b = {0};
    fa_sha256_ctx s = {0};
    uint8_t out[32];
    double t0 = fa_bench_thread_cpu_s();
    int rc = blake3 ? fa_blake3_init(&b) : fa_sha256_init(&s);
    for (size_t o = 0; rc == 0 && o < bytes; o += piece) {
        size_t n = bytes - o < piece ? bytes - o : piece;
        rc = blake3 ? fa_blake3_update(&b, p + o, n) : fa_sha256_update(&s, p + o, n);
    }
    if (rc == 0)
        rc = blake3 ? fa_blake3_final(&b, out) : fa_sha256_final(&s, out);
    t0 = fa_bench_thread_cpu_s() - t0;
    fa_blake3_free(&b);
    fa_sha256_free(&s);
    return rc == 0 ? t0 : -1;
}

static void digest_line(uint64_t d, uint32_t k, int reps)
{
    size_t bytes = (size_t)fa_secagg_masked_bytes(d, k);
    size_t piece = (size_t)fa_ring_packed_bytes(FA_MASK_PRG_BLOCK_WORDS, k);
    uint8_t *p = malloc(bytes ? bytes : 1);
    double best_b = -1, best_s = -1;
    th_rng rr;
    if (!p)
        return;
    th_rng_init(&rr, 77);
    th_rng_fill(&rr, p, bytes);
    for (int r = 0; r < 3 * reps; r++) {
        double s = digest_seconds(p, bytes, piece, 0), b = digest_seconds(p, bytes, piece, 1);
        if (s > 0 && (best_s < 0 || s < best_s))
            best_s = s;
        if (b > 0 && (best_b < 0 || b < best_b))
            best_b = b;
    }
    free(p);
    if (best_b <= 0 || best_s <= 0) {
        fprintf(stderr, "fedagg-bench mask: upload_digest: a hash failed; not measured\n");
        return;
    }
    printf("{\"bench\":\"mask\",\"what\":\"upload_digest\",\"d\":%llu,\"ring_bits\":%u,"
           "\"bytes\":%zu,\"piece_bytes\":%zu,\"hash\":\"blake3\",\"cpu_seconds\":%.4f,"
           "\"gbytes_per_s\":%.3f,\"ref\":\"openssl_sha256\",\"ref_cpu_seconds\":%.4f,"
           "\"ref_gbytes_per_s\":%.3f,\"ratio\":%.3f}\n",
           (unsigned long long)d, k, bytes, piece, best_b, bytes / best_b / 1e9, best_s,
           bytes / best_s / 1e9, best_s / best_b);
    fflush(stdout);
}

int fa_bench_mask(int argc, char **argv)
{
    uint64_t d = (uint64_t)1 << 24;
    size_t ns[8] = {4, 16}, nn = 2;
    int reps = 3;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--d") && i + 1 < argc) {
            d = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            char *p = argv[++i];
            nn = 0;
            while (*p && nn < 8) {
                ns[nn++] = strtoul(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: fedagg-bench mask [--d N] [--n 4,16] [--reps R]\n%s\n",
                    fa_bench_mask_help);
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (d < 8 || reps < 1)
        return 2;
    for (size_t c = 0; c < nn; c++) {
        size_t n = ns[c];
        th_fed f;
        th_rng rr;
        fa_secagg_config cfg;
        fa_secagg_client *cl, *cl2;
        uint32_t *in = malloc(d * 4);
        float *xf = malloc((d - 1) * sizeof(float));
        size_t cap = 1 << 20;
        uint8_t *buf = malloc(cap);
        double mask_bytes = 4.0 * (double)d * (double)n;
        struct pairs *pe = calloc(4, sizeof(*pe)), *pr = pe + 1, *pf = pe + 2, *po = pe + 3;
        /* the generator this CPU gets, and OpenSSL's EVP path beside it when
         * that is another (crypto/mask_prg_internal.h) */
        const char *impl = fa_mask_prg_impl();
        const int other = strcmp(impl, "openssl") != 0;
        uint32_t k;

        if (n < 2 || n > FA_SECAGG_MAX_CLIENTS || !in || !xf || !buf || !pe)
            return 2;
        for (int i = 0; i < 4; i++)
            pe[i].ours = pe[i].ref = -1;
        th_fed_init(&f, n, n);
        th_rng_init(&rr, n);
        cfg = th_cfg((uint32_t)(n / 2 + 1), 0, d, 0);
        cfg.quant.bits = 16;
        cfg.ring_bits = k = fa_secagg_ring_bits_for(16, (uint32_t)n);
        th_rng_fill(&rr, in, d * 4);
        for (uint64_t i = 0; i + 1 < d; i++)
            xf[i] = (float)((int32_t)in[i]) * 0x1p-33f;
        cl = client_ready(n, &cfg, &f, &rr);
        if (!cl) {
            fprintf(stderr, "fedagg-bench mask: setting up %zu clients failed\n", n);
            return 1;
        }
        /* a second client for the float input (each is bound to one input) */
        cl2 = client_ready(n, &cfg, &f, &rr);
        if (!cl2 || fa_secagg_client_set_input_ring(cl, in, d, NULL) != 0 ||
            fa_secagg_client_set_input_f32(cl2, xf, d - 1, 0.75, NULL) != 0)
            return 1;
        for (int r = 0; r < reps; r++) {
            double a;
            for (int e = 0; e < 3; e++) {
                a = aes_seconds((uint64_t)mask_bytes);
                pair_add(pe, a, fa_bench_mask_seconds(in, d, n));
                if (other) {
                    a = aes_seconds((uint64_t)mask_bytes);
                    fa_mask_prg_use("openssl");
                    pair_add(po, a, fa_bench_mask_seconds(in, d, n));
                    fa_mask_prg_use(impl);
                }
            }
            a = aes_seconds((uint64_t)mask_bytes);
            pair_add(pr, a, stream_seconds(cl, buf, cap));
            a = aes_seconds((uint64_t)mask_bytes);
            pair_add(pf, a, stream_seconds(cl2, buf, cap));
        }
        fa_secagg_client_del(cl);
        fa_secagg_client_del(cl2);
        line("mask_expand", "ring", impl, d, n, k, mask_bytes, pe);
        if (other)
            line("mask_expand", "ring", "openssl", d, n, k, mask_bytes, po);
        line("masked_stream", "ring", impl, d, n, k, mask_bytes, pr);
        line("masked_stream_f32", "f32", impl, d, n, k, mask_bytes, pf);
        free(pe);
        free(in);
        free(xf);
        free(buf);
        if (c == 0)
            digest_line(d, k, reps);
    }
    return 0;
}
