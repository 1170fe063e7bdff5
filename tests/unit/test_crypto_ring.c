/* The ring Z_{2^k} on the wire (bit-packing at k bits per coordinate) and
 * the fixed-point codec: clipping, scaling, unbiased stochastic rounding,
 * decoding of sums. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/codec_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg.h"
#include "test_crypto_harness.h"

/* The packed layout, bit by bit, against a slow reference. */
static void reference_pack(uint8_t *out, const uint32_t *in, size_t n, unsigned k)
{
    memset(out, 0, fa_ring_packed_bytes(n, k));
    for (size_t i = 0; i < n; i++)
        for (unsigned b = 0; b < k; b++)
            if ((in[i] >> b) & 1) {
                uint64_t bit = (uint64_t)i * k + b;
                out[bit / 8] |= (uint8_t)(1u << (bit % 8));
            }
}

static void test_pack_every_k(void **state)
{
    th_rng r;
    uint32_t in[70], back[70], acc[70];
    uint8_t got[70 * 4 + 8], want[70 * 4 + 8];
    th_rng_init(&r, 1);
    for (unsigned k = 1; k <= 32; k++) {
        uint32_t mask = fa_ring_mask(k);
        for (size_t n = 0; n <= 70; n++) {
            size_t bytes = (size_t)fa_ring_packed_bytes(n, k);
            assert_int_equal(bytes, (n * k + 7) / 8);
            th_rng_fill(&r, in, sizeof(in));
            memset(got, 0xee, sizeof(got));
            fa_ring_pack(got, in, n, k);
            reference_pack(want, in, n, k);
            assert_memory_equal(got, want, bytes);
            assert_int_equal(got[bytes], 0xee); /* nothing written past the end */
            fa_ring_unpack(back, got, n, k);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(back[i], in[i] & mask);
            /* unpack_add / sub */
            for (size_t i = 0; i < n; i++)
                acc[i] = (uint32_t)(i * 1000003u);
            fa_ring_unpack_add(acc, got, n, k, 1);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(acc[i], (uint32_t)(i * 1000003u) + (in[i] & mask));
            fa_ring_unpack_add(acc, got, n, k, -1);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(acc[i], (uint32_t)(i * 1000003u));
        }
    }
}

/* Packing a long vector in blocks of multiples of 8 coordinates gives the
 * same bytes as packing it at once (how the client streams). */
static void test_pack_blocks(void **state)
{
    enum { N = 10007 };
    th_rng r;
    uint32_t *in = malloc(N * 4);
    uint8_t *one = malloc(N * 4), *blocks = malloc(N * 4);
    th_rng_init(&r, 2);
    th_rng_fill(&r, in, N * 4);
    for (unsigned k = 3; k <= 32; k += 7) {
        size_t off = 0, pos = 0;
        fa_ring_pack(one, in, N, k);
        while (pos < N) {
            size_t m = N - pos < 8 * 37 ? N - pos : 8 * 37;
            fa_ring_pack(blocks + off, in + pos, m, k);
            off += (size_t)fa_ring_packed_bytes(m, k);
            pos += m;
        }
        assert_int_equal(off, fa_ring_packed_bytes(N, k));
        assert_memory_equal(one, blocks, off);
    }
    free(in);
    free(one);
    free(blocks);
}

static void test_signed_and_ring_bits(void **state)
{
    assert_int_equal(fa_ring_signed(0x7ff, 12), 2047);
    assert_int_equal(fa_ring_signed(0x800, 12), -2048);
    assert_int_equal(fa_ring_signed(0xfff, 12), -1);
    assert_int_equal(fa_ring_signed(0xfffff000u | 5, 12), 5); /* high bits ignored */
    assert_int_equal(fa_ring_signed(0xffffffffu, 32), -1);
    assert_int_equal(fa_ring_signed(1, 1), -1);
    assert_int_equal(fa_secagg_ring_bits_for(16, 1), 16);
    assert_int_equal(fa_secagg_ring_bits_for(16, 2), 17);
    assert_int_equal(fa_secagg_ring_bits_for(16, 3), 18);
    assert_int_equal(fa_secagg_ring_bits_for(16, 4), 18);
    assert_int_equal(fa_secagg_ring_bits_for(16, 5), 19);
    assert_int_equal(fa_secagg_ring_bits_for(8, 255), 16);
    assert_int_equal(fa_secagg_ring_bits_for(24, 255), 32);
    assert_int_equal(fa_secagg_ring_bits_for(24, 256), 32);
    assert_int_equal(fa_secagg_ring_bits_for(24, 257), 0);
    assert_int_equal(fa_secagg_ring_bits_for(0, 3), 0);
    assert_int_equal(fa_secagg_masked_bytes(10, 12), 15);
    assert_int_equal(fa_secagg_masked_bytes(8, 12), 12);
}

static fa_codec codec_for(unsigned bits, double clip, double pre, double weight)
{
    fa_codec c;
    c.qmax = (int32_t)((1u << (bits - 1)) - 1);
    c.limit = clip;
    c.pre = pre;
    c.mul = weight * c.qmax / clip;
    return c;
}

/* decode(encode(x)) is within one quantisation step of clip(x). */
static void test_codec_one_step(void **state)
{
    enum { N = 4096 };
    th_rng r;
    float x[N];
    uint32_t rnd[N], q[N];
    th_rng_init(&r, 3);
    for (unsigned bits = 2; bits <= 24; bits += 2) {
        fa_codec c = codec_for(bits, 1.5, 1.0, 1.0);
        double step = 1.5 / c.qmax;
        unsigned k = fa_secagg_ring_bits_for(bits, 1);
        for (int i = 0; i < N; i++)
            x[i] = (float)(((double)th_rand(&r) / 4294967296.0 - 0.5) * 4.0); /* [-2, 2) */
        x[0] = 1.5f;
        x[1] = -1.5f;
        x[2] = 0.0f;
        th_rng_fill(&r, rnd, sizeof(rnd));
        fa_codec_encode(&c, x, N, rnd, q);
        for (int i = 0; i < N; i++) {
            double clipped = x[i] > 1.5 ? 1.5 : x[i] < -1.5 ? -1.5 : x[i];
            double back = (double)fa_ring_signed(q[i] & fa_ring_mask(k), k) * step;
            assert_true(fabs(back - clipped) <= step * (1 + 1e-9));
            assert_true(llabs((long long)(int32_t)q[i]) <= c.qmax);
        }
        assert_int_equal((int32_t)q[2], 0); /* 0 + u, u < 1, floors to 0 */
    }
}

/* Stochastic rounding is unbiased: the mean of many roundings of the same
 * value converges to it (far below one step). */
static void test_codec_unbiased(void **state)
{
    enum { N = 200000 };
    th_rng r;
    float *x = malloc(N * sizeof(float));
    uint32_t *rnd = malloc(N * 4), *q = malloc(N * 4);
    const float values[] = {0.3f, -0.71f, 0.0049f, 0.999f};
    fa_codec c = codec_for(4, 1.0, 1.0, 1.0); /* coarse: 7 steps per side */
    th_rng_init(&r, 4);
    for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
        double mean = 0;
        for (int i = 0; i < N; i++)
            x[i] = values[v];
        th_rng_fill(&r, rnd, N * 4);
        fa_codec_encode(&c, x, N, rnd, q);
        for (int i = 0; i < N; i++)
            mean += (double)(int32_t)q[i];
        mean = mean / N / c.qmax;
        /* step 1/7; standard error of the mean < 0.5/7/sqrt(N) ~ 1.6e-4 */
        assert_true(fabs(mean - values[v]) < 1.5e-3);
    }
    free(x);
    free(rnd);
    free(q);
}

/* L2 clipping and the weight: the codec of a client scales the whole vector
 * to the L2 bound, then clamps, then multiplies by the weight. */
static void test_codec_l2_and_weight(void **state)
{
    float x[4] = {3.0f, 4.0f, 0.0f, 0.0f}; /* norm 5 */
    uint32_t rnd[4] = {0, 0, 0, 0}, q[4];
    fa_codec c;
    assert_true(fabs(fa_codec_l2_norm(x, 4) - 5.0) < 1e-12);
    /* clip to norm 1: (0.6, 0.8); 16 bits, range [-1, 1]; weight 0.5 */
    c = codec_for(16, 1.0, 1.0 / 5.0, 0.5);
    fa_codec_encode(&c, x, 4, rnd, q);
    assert_int_equal((int32_t)q[0], (int32_t)floor(0.3 * 32767));
    assert_int_equal((int32_t)q[1], (int32_t)floor(0.4 * 32767));
    assert_int_equal(fa_codec_round(0.25 * 32767, 0, 32767), (int32_t)floor(0.25 * 32767));
    assert_int_equal(fa_codec_round(1.0 * 32767, 0xffffffffu, 32767), 32767);
    assert_int_equal(fa_codec_round(-5e9, 0, 32767), -32767);
}

/* The norm in pieces (fa_codec_l2), as the input binding's pass takes it:
 * bit for bit the norm of the whole, for pieces of several lengths (all
 * but the last a multiple of 16) and odd tails; the sum of squares of
 * 3 and 4 in pieces is 5. */
static void test_codec_l2_in_pieces(void **state)
{
    const size_t lens[] = {0, 1, 15, 16, 17, 4095, 4096, 4097, 100003};
    const size_t pieces[] = {16, 48, 4096};
    float *x = malloc(100003 * sizeof(float));
    uint32_t r = 12345;
    assert_non_null(x);
    for (size_t i = 0; i < 100003; i++) {
        r = r * 1103515245u + 12345u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(1 + i % 7);
    }
    for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++)
        for (size_t b = 0; b < sizeof(pieces) / sizeof(pieces[0]); b++) {
            fa_codec_l2 acc = {{0}, 0};
            double whole = fa_codec_l2_norm(x, lens[a]), got;
            for (size_t i = 0; i < lens[a]; i += pieces[b])
                fa_codec_l2_add(&acc, x + i, lens[a] - i < pieces[b] ? lens[a] - i : pieces[b]);
            got = fa_codec_l2_done(&acc);
            assert_memory_equal(&got, &whole, sizeof(double));
        }
    {
        float y[2] = {3.0f, 4.0f};
        fa_codec_l2 acc = {{0}, 0};
        fa_codec_l2_add(&acc, y, 1);
        fa_codec_l2_add(&acc, y + 1, 1);
        assert_true(fabs(fa_codec_l2_done(&acc) - 5.0) < 1e-12);
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_every_k),         cmocka_unit_test(test_pack_blocks),
        cmocka_unit_test(test_signed_and_ring_bits), cmocka_unit_test(test_codec_one_step),
        cmocka_unit_test(test_codec_unbiased),       cmocka_unit_test(test_codec_l2_and_weight),
        cmocka_unit_test(test_codec_l2_in_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
