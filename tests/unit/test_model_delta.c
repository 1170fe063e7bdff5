/* Unit tests of model/delta: the block codec at 8 and 4 bits against values
 * worked by hand (exact steps, rounding to nearest even, clamping, zero and
 * non-finite blocks, F32/BF16/F16/F64), the 4-bit layout (two steps a byte,
 * low nibble first, odd tails) byte for byte, the reconstruction of a whole
 * file at both widths byte for byte against the file written directly, and
 * every refusal of a bad delta (wrong base, truncated file, header that
 * does not match, wrong sizes or layout, bad scales, steps no width
 * writes, a nonzero padding nibble, foreign tensors, other bits) with its
 * message, none of which leaves an output file behind. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_safetensors.h"
#include "model/delta.h"
#include "model/tensors.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_delta.XXXXXX");
    return mkdtemp(tmpdir) && sodium_init() >= 0 ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* ---- the codec ------------------------------------------------------------ */

static void test_codec_f32_exact(void **state)
{
    /* differences that are whole multiples of max/127: steps exact */
    float base[256], target[256], out[256], scale[1];
    int8_t q[256];
    (void)state;
    for (int i = 0; i < 256; i++) {
        base[i] = 1.0f;
        target[i] = 1.0f + (float)((i % 255) - 127) * 0.5f; /* -63.5 .. 63.5 */
    }
    fa_delta_encode(FA_ST_F32, base, target, 256, 256, 8, q, scale);
    assert_true(scale[0] == 0.5f);
    for (int i = 0; i < 256; i++)
        assert_int_equal(q[i], (i % 255) - 127);
    fa_delta_apply(FA_ST_F32, base, q, scale, 256, 256, out);
    for (int i = 0; i < 256; i++)
        assert_true(out[i] == target[i]);
}

static void test_codec_rounding_and_blocks(void **state)
{
    /* two blocks of 16: the first's max |d| 12.7 (scale 0.1), the second all zero */
    float base[32] = {0}, target[32] = {0}, scale[2], out[32];
    int8_t q[32];
    (void)state;
    target[0] = 12.7f;
    target[1] = 0.05f;  /* 0.5 steps (a hair under or over in float): 0 or 1, never 2 */
    target[2] = -0.26f; /* -2.6 steps: -3 */
    target[3] = 0.14f;  /* 1.4: 1 */
    target[4] = NAN;    /* not finite: step 0, no effect on the scale */
    target[5] = INFINITY;  /* not finite either way */
    target[6] = -INFINITY;
    fa_delta_encode(FA_ST_F32, base, target, 32, 16, 8, q, scale);
    assert_true(fabsf(scale[0] - 0.1f) < 1e-7f);
    assert_int_equal(q[5], 0);
    assert_int_equal(q[6], 0);
    assert_true(scale[1] == 0.0f);
    assert_int_equal(q[0], 127);
    assert_true(q[1] == 0 || q[1] == 1);
    assert_int_equal(q[2], -3);
    assert_int_equal(q[3], 1);
    assert_int_equal(q[4], 0);
    for (int i = 16; i < 32; i++)
        assert_int_equal(q[i], 0);
    fa_delta_apply(FA_ST_F32, base, q, scale, 32, 16, out);
    assert_true(out[0] == (float)127 * scale[0]);
    assert_true(out[2] == (float)-3 * scale[0]);
    for (int i = 16; i < 32; i++)
        assert_true(out[i] == 0.0f);
    /* a partial last block (n not a multiple of the block) */
    float t2[20], b2[20] = {0}, s2[2], o2[20];
    int8_t q2[20];
    for (int i = 0; i < 20; i++)
        t2[i] = (float)i;
    fa_delta_encode(FA_ST_F32, b2, t2, 20, 16, 8, q2, s2);
    assert_true(fabsf(s2[0] - 15.0f / 127.0f) < 1e-6f);
    assert_true(fabsf(s2[1] - 19.0f / 127.0f) < 1e-6f);
    fa_delta_apply(FA_ST_F32, b2, q2, s2, 20, 16, o2);
    for (int i = 0; i < 20; i++)
        assert_true(fabsf(o2[i] - t2[i]) <= (i < 16 ? s2[0] : s2[1]) / 2 + 1e-6f);
}

/* The same at 4 bits: steps in [-7, 7], scale max / 7. */
static void test_codec_4bit(void **state)
{
    float base[32] = {0}, target[32] = {0}, scale[2], out[32];
    int8_t q[32];
    (void)state;
    /* the first block: whole multiples of 0.5 (max 3.5 = 7 steps): exact */
    for (int i = 0; i < 15; i++)
        target[i] = (float)(i - 7) * 0.5f; /* -3.5 .. 3.5 */
    target[15] = NAN;                      /* step 0, no effect on the scale */
    /* the second: max 0.7 (scale 0.1); 0.25 is 2.5 steps, 0.35 3.5, -0.64 -6.4 */
    target[16] = 0.7f;
    target[17] = 0.25f;
    target[18] = 0.35f;
    target[19] = -0.64f;
    target[20] = -0.7f;
    fa_delta_encode(FA_ST_F32, base, target, 32, 16, 4, q, scale);
    assert_true(scale[0] == 0.5f);
    for (int i = 0; i < 15; i++)
        assert_int_equal(q[i], i - 7);
    assert_int_equal(q[15], 0);
    assert_true(fabsf(scale[1] - 0.1f) < 1e-7f);
    assert_int_equal(q[16], 7);
    assert_true(q[17] == 2 || q[17] == 3); /* a tie only if 0.25 / 0.1 is exactly 2.5 in float */
    assert_true(q[18] == 3 || q[18] == 4);
    assert_int_equal(q[19], -6);
    assert_int_equal(q[20], -7);
    for (int i = 0; i < 32; i++)
        assert_true(q[i] >= -7 && q[i] <= 7);
    fa_delta_apply(FA_ST_F32, base, q, scale, 32, 16, out);
    for (int i = 0; i < 15; i++)
        assert_true(out[i] == target[i]);
    assert_true(out[16] == (float)7 * scale[1]);
    assert_true(out[19] == (float)-6 * scale[1]);
    /* a ties-to-even case made exact: scale 1 (max 7), 2.5 -> 2 and 3.5 -> 4 */
    {
        float t3[16] = {7.0f, 2.5f, 3.5f, -2.5f, -0.5f, 1.5f}, b3[16] = {0}, s3[1];
        int8_t q3[16];
        fa_delta_encode(FA_ST_F32, b3, t3, 16, 16, 4, q3, s3);
        assert_true(s3[0] == 1.0f);
        assert_int_equal(q3[1], 2);
        assert_int_equal(q3[2], 4);
        assert_int_equal(q3[3], -2);
        assert_int_equal(q3[4], 0);
        assert_int_equal(q3[5], 2);
    }
}

/* BF16, F16 and F64 at both widths: the result is the dtype rounding of
 * f32(base) + q*s, recomputed here independently; the error against the
 * target is within half a step plus the dtype's rounding. */
static void test_codec_dtypes(void **state)
{
    const fa_st_dtype dts[] = {FA_ST_BF16, FA_ST_F16, FA_ST_F64};
    (void)state;
    for (size_t k = 0; k < 6; k++) {
        const fa_st_dtype dt = dts[k % 3];
        const unsigned bits = k < 3 ? 8 : 4;
        const size_t es = fa_st_dtype_size(dt);
        float w[512], target[512], back[512], scale[2], sum[512];
        uint8_t base[512 * 8], out[512 * 8], want[512 * 8];
        int8_t q[512];
        for (int i = 0; i < 512; i++)
            w[i] = sinf((float)i) * 0.5f;
        fa_tensors_from_f32(dt, w, base, 512);
        fa_tensors_to_f32(dt, base, w, 512);
        for (int i = 0; i < 512; i++)
            target[i] = w[i] + cosf((float)i * 0.7f) * 0.01f;
        fa_delta_encode(dt, base, target, 512, 256, bits, q, scale);
        fa_delta_apply(dt, base, q, scale, 512, 256, out);
        for (int i = 0; i < 512; i++) {
            float step = (float)q[i] * scale[i / 256];
            assert_true(q[i] >= -fa_delta_qmax(bits) && q[i] <= fa_delta_qmax(bits));
            sum[i] = w[i] + step;
        }
        fa_tensors_from_f32(dt, sum, want, 512);
        assert_memory_equal(out, want, 512 * es);
        fa_tensors_to_f32(dt, out, back, 512);
        for (int i = 0; i < 512; i++) {
            float ulp = dt == FA_ST_BF16 ? fabsf(target[i]) / 128 : fabsf(target[i]) / 1024;
            assert_true(fabsf(back[i] - target[i]) <= scale[i / 256] / 2 + ulp + 1e-6f);
        }
    }
}

static void test_block_ok(void **state)
{
    (void)state;
    assert_true(fa_delta_block_ok(16) && fa_delta_block_ok(256) && fa_delta_block_ok(65536));
    assert_false(fa_delta_block_ok(0) || fa_delta_block_ok(8) || fa_delta_block_ok(300) ||
                 fa_delta_block_ok(131072));
    assert_int_equal(fa_delta_blocks(1000, 256), 4);
    assert_int_equal(fa_delta_blocks(1024, 256), 4);
    assert_int_equal(fa_delta_blocks(1, 256), 1);
    assert_true(fa_delta_bits_ok(4) && fa_delta_bits_ok(8));
    assert_false(fa_delta_bits_ok(0) || fa_delta_bits_ok(2) || fa_delta_bits_ok(5) ||
                 fa_delta_bits_ok(7) || fa_delta_bits_ok(16) || fa_delta_bits_ok(1ull << 34));
    assert_int_equal(fa_delta_qmax(8), 127);
    assert_int_equal(fa_delta_qmax(4), 7);
    assert_int_equal(fa_delta_q_bytes(1000, 8), 1000);
    assert_int_equal(fa_delta_q_bytes(1000, 4), 500);
    assert_int_equal(fa_delta_q_bytes(7, 4), 4);
    assert_int_equal(fa_delta_q_bytes(1, 4), 1);
    assert_int_equal(fa_delta_q_bytes(0, 4), 0);
}

/* ---- the 4-bit layout ----------------------------------------------------- */

static void test_pack_4bit_known_bytes(void **state)
{
    /* low nibble first, two's complement; an odd count pads with nibble 0 */
    static const int8_t q[] = {1, -1, -7, 7, 0, 3, -3};
    static const uint8_t want[] = {0xf1, 0x79, 0x30, 0x0d};
    uint8_t got[4];
    int8_t back[7];
    size_t bad = 99;
    (void)state;
    fa_delta_pack(4, q, 7, got);
    assert_memory_equal(got, want, 4);
    assert_int_equal(fa_delta_unpack(4, want, 7, back, &bad), 0);
    assert_memory_equal(back, q, 7);
    /* 6 steps: the same bytes but the last, no padding */
    fa_delta_pack(4, q, 6, got);
    assert_memory_equal(got, want, 3);
    /* 8 bits: a byte a step, as int8 */
    {
        uint8_t g8[7];
        fa_delta_pack(8, q, 7, g8);
        assert_int_equal(g8[0], 0x01);
        assert_int_equal(g8[1], 0xff);
        assert_int_equal(g8[2], 0xf9);
        assert_int_equal(g8[6], 0xfd);
    }
}

static void test_pack_unpack_every_pair(void **state)
{
    /* every pair of 4-bit steps, and every odd tail, back exactly */
    int8_t q[15 * 15 * 2 + 1], back[15 * 15 * 2 + 1];
    uint8_t packed[256];
    size_t n = 0, bad;
    (void)state;
    for (int a = -7; a <= 7; a++)
        for (int b = -7; b <= 7; b++)
            q[n++] = (int8_t)a, q[n++] = (int8_t)b;
    for (int tail = -7; tail <= 7; tail++) {
        q[n] = (int8_t)tail;
        fa_delta_pack(4, q, n + 1, packed);
        assert_int_equal(fa_delta_unpack(4, packed, n + 1, back, &bad), 0);
        assert_memory_equal(back, q, n + 1);
        assert_int_equal(packed[n / 2] >> 4, 0); /* the padding nibble */
    }
    fa_delta_pack(4, q, n, packed);
    assert_int_equal(fa_delta_unpack(4, packed, n, back, &bad), 0);
    assert_memory_equal(back, q, n);
    /* 8 bits: every step of the width */
    for (int v = -127; v <= 127; v++)
        q[v + 127] = (int8_t)v;
    fa_delta_pack(8, q, 255, packed);
    assert_int_equal(fa_delta_unpack(8, packed, 255, back, &bad), 0);
    assert_memory_equal(back, q, 255);
}

static void test_unpack_refusals(void **state)
{
    uint8_t in[4] = {0x11, 0x11, 0x11, 0x01};
    int8_t q[8];
    size_t bad;
    (void)state;
    /* nibble 8 (-8, never written): the index of its step */
    in[1] = 0x81; /* step 3 */
    bad = 99;
    assert_int_equal(fa_delta_unpack(4, in, 7, q, &bad), FA_ERR_PARSE);
    assert_int_equal(bad, 3);
    in[1] = 0x18; /* step 2 */
    assert_int_equal(fa_delta_unpack(4, in, 7, q, &bad), FA_ERR_PARSE);
    assert_int_equal(bad, 2);
    in[1] = 0x11;
    /* the padding nibble of an odd count: index n */
    in[3] = 0x11;
    assert_int_equal(fa_delta_unpack(4, in, 7, q, &bad), FA_ERR_PARSE);
    assert_int_equal(bad, 7);
    /* ...which is a step of an even count */
    assert_int_equal(fa_delta_unpack(4, in, 8, q, &bad), 0);
    assert_int_equal(q[7], 1);
    /* a nibble 8 in the padding: the padding */
    in[3] = 0x81;
    assert_int_equal(fa_delta_unpack(4, in, 7, q, &bad), FA_ERR_PARSE);
    assert_int_equal(bad, 7);
    /* 8 bits: -128 */
    in[3] = 0x80;
    assert_int_equal(fa_delta_unpack(8, in, 4, q, &bad), FA_ERR_PARSE);
    assert_int_equal(bad, 3);
    assert_int_equal(fa_delta_unpack(8, in, 3, q, &bad), 0);
}

/* ---- whole files ---------------------------------------------------------- */

#define NW 1000 /* w: F32 [1000], quantised */
#define NB 300  /* b: BF16 [3, 100], quantised */
#define NO 7    /* o: F16 [7], quantised: an odd count, less than a block */
/* n: I64 [1], copied from the base; c: I32 [2], federated integer, raw */

struct fixture {
    unsigned bits;
    float w0[NW], w1[NW];
    uint16_t b0[NB], b1[NB], o0[NO], o1[NO];
    int64_t n;
    int32_t c0[2], c1[2];
    int8_t qw[NW], qb[NB], qo[NO];
    float sw[4], sb[2], so[1];
    uint8_t *hdr;
    size_t hdr_len;
    uint64_t size;
    char base[300], want[300], delta[300], out[300];
    char base_hex[65];
};

static const uint64_t shp_w[1] = {NW}, shp_b[2] = {3, 100}, shp_o[1] = {NO}, shp_n[1] = {1},
                      shp_c[1] = {2};

static void model_views(fa_st_view v[5], const float *w, const uint16_t *b, const uint16_t *o,
                        const int64_t *n, const int32_t *c)
{
    v[0] = (fa_st_view){.name = "w", .dtype = FA_ST_F32, .ndim = 1, .shape = shp_w, .data = w};
    v[1] = (fa_st_view){.name = "b", .dtype = FA_ST_BF16, .ndim = 2, .shape = shp_b, .data = b};
    v[2] = (fa_st_view){.name = "o", .dtype = FA_ST_F16, .ndim = 1, .shape = shp_o, .data = o};
    v[3] = (fa_st_view){.name = "n", .dtype = FA_ST_I64, .ndim = 1, .shape = shp_n, .data = n};
    v[4] = (fa_st_view){.name = "c", .dtype = FA_ST_I32, .ndim = 1, .shape = shp_c, .data = c};
}

/* The delta file of fx, with an optional change to its pieces. */
struct delta_edit {
    const char *drop;     /* a tensor left out */
    const char *extra;    /* a tensor added (U8 [1]) */
    uint64_t qw_len;      /* 0: the steps' bytes of NW elements */
    int qw_dtype;         /* 0: the width's (I8, U8); else this dtype + 1 */
    uint64_t sw_len;      /* 0: 4 */
    float bad_scale;      /* set as sw[1] when nonzero */
    const char *bits;     /* fx's when NULL */
    const char *base_hex; /* fx's when NULL */
    int header_len_off;   /* added to the header's length prefix */
    const char *poke;     /* a q tensor ("q.w", "q.o") of which byte poke_at ... */
    uint64_t poke_at;
    uint8_t poke_value; /* ... is set to this */
};

static void write_delta(struct fixture *fx, const struct delta_edit *e)
{
    static const struct delta_edit none = {0};
    const fa_st_dtype qdt = fx->bits == 4 ? FA_ST_U8 : FA_ST_I8;
    fa_st_view v[10];
    uint64_t hshape[1] = {fx->hdr_len}, qs[1], ss[1], bs[1] = {2}, os[1] = {1}, one[1] = {1};
    uint64_t qbs[1] = {fa_delta_q_bytes(NB, fx->bits)}, qos[1] = {fa_delta_q_bytes(NO, fx->bits)};
    uint8_t *hdr = malloc(fx->hdr_len), xb = 0, qw[NW + 8] = {0}, qb[NB], qo[NO];
    float sw[8];
    size_t n = 0;
    char size_s[32], bits_s[8], block_s[16] = "256";
    fa_error err;

    if (!e)
        e = &none;
    memcpy(hdr, fx->hdr, fx->hdr_len);
    if (e->header_len_off) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | hdr[i];
        len += (uint64_t)(int64_t)e->header_len_off;
        for (int i = 0; i < 8; i++)
            hdr[i] = (uint8_t)(len >> (8 * i));
    }
    fa_delta_pack(fx->bits, fx->qw, NW, qw);
    fa_delta_pack(fx->bits, fx->qb, NB, qb);
    fa_delta_pack(fx->bits, fx->qo, NO, qo);
    if (e->poke)
        (!strcmp(e->poke, "q.w") ? qw : qo)[e->poke_at] = e->poke_value;
    memcpy(sw, fx->sw, sizeof(fx->sw));
    if (e->bad_scale != 0)
        sw[1] = e->bad_scale;
    qs[0] = e->qw_len ? e->qw_len : fa_delta_q_bytes(NW, fx->bits);
    ss[0] = e->sw_len ? e->sw_len : 4;
    const struct {
        const char *name;
        fa_st_dtype dt;
        const uint64_t *shape;
        const void *data;
    } all[] = {{FA_DELTA_HEADER_TENSOR, FA_ST_U8, hshape, hdr},
               {"q.w", e->qw_dtype ? (fa_st_dtype)(e->qw_dtype - 1) : qdt, qs, qw},
               {"s.w", FA_ST_F32, ss, sw},
               {"q.b", qdt, qbs, qb},
               {"s.b", FA_ST_F32, bs, fx->sb},
               {"q.o", qdt, qos, qo},
               {"s.o", FA_ST_F32, os, fx->so},
               {"r.c", FA_ST_I32, shp_c, fx->c1}};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (e->drop && !strcmp(e->drop, all[i].name))
            continue;
        v[n++] = (fa_st_view){.name = all[i].name,
                              .dtype = all[i].dt,
                              .ndim = 1,
                              .shape = all[i].shape,
                              .data = all[i].data};
    }
    if (e->extra)
        v[n++] =
            (fa_st_view){.name = e->extra, .dtype = FA_ST_U8, .ndim = 1, .shape = one, .data = &xb};
    snprintf(size_s, sizeof(size_s), "%llu", (unsigned long long)fx->size);
    snprintf(bits_s, sizeof(bits_s), "%u", fx->bits);
    const char *meta[] = {FA_DELTA_META_FORMAT, "1",
                          FA_DELTA_META_FROM,   "3",
                          FA_DELTA_META_TO,     "4",
                          FA_DELTA_META_BASE,   e->base_hex ? e->base_hex : fx->base_hex,
                          FA_DELTA_META_BITS,   e->bits ? e->bits : bits_s,
                          FA_DELTA_META_BLOCK,  block_s,
                          FA_DELTA_META_SIZE,   size_s};
    fa_error_clear(&err);
    assert_int_equal(fa_st_save(fx->delta, 0644, v, n, meta, 7, &err), 0);
    free(hdr);
}

static void fixture_make(struct fixture *fx, unsigned bits)
{
    fa_st_view v[5];
    fa_st_writer *w = NULL;
    const uint8_t *h;
    float bf[NB], bt[NB], of[NO], ot[NO];
    uint8_t sha[32];
    const char *meta0[] = {"fedagg.version", "3"}, *meta1[] = {"fedagg.version", "4"};
    fa_error err;

    memset(fx, 0, sizeof(*fx));
    fx->bits = bits;
    path_of(fx->base, sizeof(fx->base), "base.safetensors");
    path_of(fx->want, sizeof(fx->want), "want.safetensors");
    path_of(fx->delta, sizeof(fx->delta), "delta.safetensors");
    path_of(fx->out, sizeof(fx->out), "out.safetensors");
    unlink(fx->out);
    for (int i = 0; i < NW; i++) {
        fx->w0[i] = sinf((float)i * 0.1f);
        fx->w1[i] = fx->w0[i] + 0.02f * cosf((float)i * 0.37f) * (i < 256 ? 10.0f : 1.0f);
    }
    for (int i = 0; i < NB; i++)
        bf[i] = cosf((float)i * 0.05f);
    fa_tensors_from_f32(FA_ST_BF16, bf, fx->b0, NB);
    fa_tensors_to_f32(FA_ST_BF16, fx->b0, bf, NB);
    for (int i = 0; i < NB; i++)
        bt[i] = bf[i] + 0.03f * sinf((float)i);
    for (int i = 0; i < NO; i++)
        of[i] = 0.25f * (float)i - 1.0f;
    fa_tensors_from_f32(FA_ST_F16, of, fx->o0, NO);
    fa_tensors_to_f32(FA_ST_F16, fx->o0, of, NO);
    for (int i = 0; i < NO; i++)
        ot[i] = of[i] - 0.01f * (float)(i * i); /* the largest step is the last, the odd one */
    fx->n = 42;
    fx->c0[0] = 1, fx->c0[1] = 2, fx->c1[0] = 5, fx->c1[1] = -7;
    fa_delta_encode(FA_ST_F32, fx->w0, fx->w1, NW, 256, bits, fx->qw, fx->sw);
    fa_delta_encode(FA_ST_BF16, fx->b0, bt, NB, 256, bits, fx->qb, fx->sb);
    fa_delta_encode(FA_ST_F16, fx->o0, ot, NO, 256, bits, fx->qo, fx->so);
    assert_int_equal(fx->qo[NO - 1], -fa_delta_qmax(bits));
    /* the new model, directly: the reconstruction's values */
    float w1[NW];
    fa_delta_apply(FA_ST_F32, fx->w0, fx->qw, fx->sw, NW, 256, w1);
    fa_delta_apply(FA_ST_BF16, fx->b0, fx->qb, fx->sb, NB, 256, fx->b1);
    fa_delta_apply(FA_ST_F16, fx->o0, fx->qo, fx->so, NO, 256, fx->o1);
    fa_error_clear(&err);
    model_views(v, fx->w0, fx->b0, fx->o0, &fx->n, fx->c0);
    assert_int_equal(fa_st_save(fx->base, 0644, v, 5, meta0, 1, &err), 0);
    model_views(v, w1, fx->b1, fx->o1, &fx->n, fx->c1);
    assert_int_equal(fa_st_save(fx->want, 0644, v, 5, meta1, 1, &err), 0);
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fa_st_writer_add(w, v[i].name, v[i].dtype, v[i].ndim, v[i].shape, &err),
                         0);
    assert_int_equal(fa_st_writer_metadata(w, meta1[0], meta1[1], &err), 0);
    assert_int_equal(fa_st_writer_header(w, &h, &fx->hdr_len, &err), 0);
    fx->hdr = malloc(fx->hdr_len);
    memcpy(fx->hdr, h, fx->hdr_len);
    fx->size = fa_st_writer_total_size(w);
    fa_st_writer_del(w);
    assert_int_equal(fa_delta_file_sha256(fx->base, sha, NULL, &err), 0);
    fa_hex_encode(fx->base_hex, sizeof(fx->base_hex), sha, 32);
}

static void fixture_free(struct fixture *fx)
{
    free(fx->hdr);
}

static uint64_t file_size(const char *path)
{
    uint8_t sha[32];
    uint64_t n = 0;
    fa_error err;
    fa_error_clear(&err);
    assert_int_equal(fa_delta_file_sha256(path, sha, &n, &err), 0);
    return n;
}

/* At the width *state points to (8 or 4 bits). */
static void test_reconstruct_byte_for_byte(void **state)
{
    const unsigned bits = *(const unsigned *)*state;
    struct fixture *fx = calloc(1, sizeof(*fx));
    uint8_t sha[32], want_sha[32];
    uint8_t *a = NULL, *b = NULL;
    size_t al, bl;
    fa_delta_info info;
    fa_error err;

    fixture_make(fx, bits);
    write_delta(fx, NULL);
    fa_error_clear(&err);
    assert_int_equal(fa_delta_reconstruct(fx->base, fx->delta, fx->out, sha, &info, &err), 0);
    assert_int_equal(fa_file_read_all(fx->out, &a, &al, 1 << 24, &err), 0);
    assert_int_equal(fa_file_read_all(fx->want, &b, &bl, 1 << 24, &err), 0);
    assert_int_equal(al, bl);
    assert_memory_equal(a, b, al);
    assert_int_equal(fa_delta_file_sha256(fx->want, want_sha, NULL, &err), 0);
    assert_memory_equal(sha, want_sha, 32);
    assert_int_equal(info.from, 3);
    assert_int_equal(info.to, 4);
    assert_int_equal(info.bits, bits);
    assert_int_equal(info.block, 256);
    assert_int_equal(info.size, bl);
    assert_int_equal(info.quantised, NW + NB + NO);
    /* the steps' bytes: one a step at 8 bits, half at 4 (4 of 7 for o) */
    {
        fa_safetensors *d = NULL;
        const fa_st_tensor *t;
        assert_int_equal(fa_st_open(&d, fx->delta, &err), 0);
        t = fa_st_find(d, "q.o");
        assert_int_equal(t->end - t->begin, bits == 4 ? 4 : 7);
        t = fa_st_find(d, "q.w");
        assert_int_equal(t->end - t->begin, bits == 4 ? NW / 2 : NW);
        fa_st_del(d);
    }
    assert_true(file_size(fx->delta) < bl);
    free(a);
    free(b);
    fixture_free(fx);
    free(fx);
}

/* The 4-bit delta of the same model is the 8-bit one less half its steps. */
static void test_4bit_half_the_steps(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    uint64_t d8, d4;
    (void)state;
    fixture_make(fx, 8);
    write_delta(fx, NULL);
    d8 = file_size(fx->delta);
    fixture_free(fx);
    fixture_make(fx, 4);
    write_delta(fx, NULL);
    d4 = file_size(fx->delta);
    /* the header's JSON differs by the dtypes, shapes and offsets (a few bytes) */
    assert_true(d8 - d4 >= NW / 2 + NB / 2 + 3 - 16 && d8 - d4 <= NW / 2 + NB / 2 + 3 + 16);
    fixture_free(fx);
    free(fx);
}

/* One refusal: the code, a phrase of the message, and no output file. */
static void expect_refusal(struct fixture *fx, const struct delta_edit *e, int code,
                           const char *phrase)
{
    uint8_t sha[32];
    fa_error err;
    int rc;

    if (e)
        write_delta(fx, e);
    unlink(fx->out);
    fa_error_clear(&err);
    rc = fa_delta_reconstruct(fx->base, fx->delta, fx->out, sha, NULL, &err);
    if (rc != code || !strstr(err.msg, phrase))
        fail_msg("want %s with '%s', got %s: %s", fa_strerror(code), phrase, fa_strerror(rc),
                 err.msg);
    assert_int_equal(access(fx->out, F_OK), -1);
}

static void test_refusals(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    (void)state;
    fixture_make(fx, 8);

    /* against another model than the one held */
    expect_refusal(fx,
                   &(struct delta_edit){.base_hex = "00000000000000000000000000000000000000000000"
                                                    "00000000000000000000"},
                   FA_ERR_VERIFY, "the delta applies to the model with SHA-256 0000");
    /* sizes */
    expect_refusal(fx, &(struct delta_edit){.qw_len = NW - 1}, FA_ERR_PARSE,
                   "q.w is I8 of 999 elements; 1000 I8 wanted (8-bit steps of the tensor's 1000)");
    expect_refusal(fx, &(struct delta_edit){.sw_len = 3}, FA_ERR_PARSE,
                   "s.w is F32 of 3 elements; 4 F32 scales wanted");
    expect_refusal(fx, &(struct delta_edit){.drop = "s.b"}, FA_ERR_PARSE,
                   "tensor 'b' needs both q.b and s.b");
    expect_refusal(fx, &(struct delta_edit){.extra = "q.zzz"}, FA_ERR_PARSE,
                   "tensor 'q.zzz' belongs to no tensor of the model");
    /* values */
    expect_refusal(fx, &(struct delta_edit){.bad_scale = NAN}, FA_ERR_PARSE, "s.w: scale 1 is nan");
    expect_refusal(fx, &(struct delta_edit){.bad_scale = -1.0f}, FA_ERR_PARSE,
                   "s.w: scale 1 is -1");
    expect_refusal(fx, &(struct delta_edit){.poke = "q.w", .poke_at = 600, .poke_value = 0x80},
                   FA_ERR_PARSE,
                   "delta.safetensors: q.w: step 600 is -128 (8-bit steps are in "
                   "[-127, 127])");
    expect_refusal(fx, &(struct delta_edit){.bits = "5"}, FA_ERR_UNSUPPORTED,
                   "a delta of 5 bits (4 and 8 are read)");
    expect_refusal(fx, &(struct delta_edit){.bits = "16"}, FA_ERR_UNSUPPORTED,
                   "a delta of 16 bits (4 and 8 are read)");
    /* 8-bit steps in a file that says 4 */
    expect_refusal(fx, &(struct delta_edit){.bits = "4"}, FA_ERR_PARSE,
                   "q.w is I8 of 1000 elements; 500 U8 wanted (4-bit steps of the tensor's 1000)");
    /* the header does not match what it carries */
    expect_refusal(fx, &(struct delta_edit){.header_len_off = -8}, FA_ERR_PARSE,
                   "header bytes but holds");
    expect_refusal(fx, &(struct delta_edit){.drop = FA_DELTA_HEADER_TENSOR}, FA_ERR_PARSE,
                   "tensor 'fedagg.header' missing");
    /* a truncated delta file */
    write_delta(fx, NULL);
    {
        uint8_t *d = NULL;
        size_t dl;
        fa_error err;
        fa_error_clear(&err);
        assert_int_equal(fa_file_read_all(fx->delta, &d, &dl, 1 << 24, &err), 0);
        assert_int_equal(fa_file_write_atomic(fx->delta, d, dl - 100, 0644, &err), 0);
        free(d);
    }
    expect_refusal(fx, NULL, FA_ERR_PARSE, "delta.safetensors");
    /* a base that is not a model of this table (the digest names it first) */
    write_delta(fx, NULL);
    {
        fa_st_view v[1];
        fa_error err;
        uint8_t sha[32];
        fa_error_clear(&err);
        v[0] = (fa_st_view){
            .name = "w", .dtype = FA_ST_F32, .ndim = 1, .shape = shp_w, .data = fx->w0};
        assert_int_equal(fa_st_save(fx->base, 0644, v, 1, NULL, 0, &err), 0);
        assert_int_equal(fa_delta_file_sha256(fx->base, sha, NULL, &err), 0);
        fa_hex_encode(fx->base_hex, sizeof(fx->base_hex), sha, 32);
    }
    expect_refusal(fx, &(struct delta_edit){0}, FA_ERR_PARSE, "the base");
    fixture_free(fx);
    free(fx);
}

/* What only the 4-bit layout can get wrong. */
static void test_refusals_4bit(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    (void)state;
    fixture_make(fx, 4);

    /* one byte short of the packed steps, one over, or the 8-bit count */
    expect_refusal(fx, &(struct delta_edit){.qw_len = NW / 2 - 1}, FA_ERR_PARSE,
                   "q.w is U8 of 499 elements; 500 U8 wanted (4-bit steps of the tensor's 1000)");
    expect_refusal(fx, &(struct delta_edit){.qw_len = NW / 2 + 1}, FA_ERR_PARSE,
                   "q.w is U8 of 501 elements; 500 U8 wanted");
    expect_refusal(fx, &(struct delta_edit){.qw_len = NW}, FA_ERR_PARSE,
                   "q.w is U8 of 1000 elements; 500 U8 wanted");
    /* the right bytes as I8 */
    expect_refusal(fx, &(struct delta_edit){.qw_dtype = FA_ST_I8 + 1}, FA_ERR_PARSE,
                   "q.w is I8 of 500 elements; 500 U8 wanted");
    /* nibble 8 (-8): low and high nibble of byte 300 are steps 600 and 601 */
    expect_refusal(fx, &(struct delta_edit){.poke = "q.w", .poke_at = 300, .poke_value = 0x08},
                   FA_ERR_PARSE,
                   "delta.safetensors: q.w: step 600 is -8 (4-bit steps are in [-7, 7])");
    expect_refusal(fx, &(struct delta_edit){.poke = "q.w", .poke_at = 300, .poke_value = 0x80},
                   FA_ERR_PARSE, "q.w: step 601 is -8");
    /* o's 7 steps: byte 3 holds step 6 and the padding */
    expect_refusal(fx,
                   &(struct delta_edit){.poke = "q.o",
                                        .poke_at = 3,
                                        .poke_value = (uint8_t)(0x10 | (fx->qo[6] & 0x0f))},
                   FA_ERR_PARSE, "q.o: the padding nibble after the last of 7 steps is not 0");
    expect_refusal(fx, &(struct delta_edit){.poke = "q.o", .poke_at = 3, .poke_value = 0x08},
                   FA_ERR_PARSE, "q.o: step 6 is -8");
    /* packed steps in a file that says 8 */
    expect_refusal(fx, &(struct delta_edit){.bits = "8"}, FA_ERR_PARSE,
                   "q.w is U8 of 500 elements; 1000 I8 wanted (8-bit steps of the tensor's 1000)");
    /* and the file as written still rebuilds */
    write_delta(fx, NULL);
    {
        uint8_t sha[32];
        fa_error err;
        fa_error_clear(&err);
        assert_int_equal(fa_delta_reconstruct(fx->base, fx->delta, fx->out, sha, NULL, &err), 0);
    }
    fixture_free(fx);
    free(fx);
}

int main(void)
{
    static const unsigned bits8 = 8, bits4 = 4;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_f32_exact),
        cmocka_unit_test(test_codec_rounding_and_blocks),
        cmocka_unit_test(test_codec_4bit),
        cmocka_unit_test(test_codec_dtypes),
        cmocka_unit_test(test_block_ok),
        cmocka_unit_test(test_pack_4bit_known_bytes),
        cmocka_unit_test(test_pack_unpack_every_pair),
        cmocka_unit_test(test_unpack_refusals),
        cmocka_unit_test_prestate(test_reconstruct_byte_for_byte, (void *)&bits8),
        cmocka_unit_test_prestate(test_reconstruct_byte_for_byte, (void *)&bits4),
        cmocka_unit_test(test_4bit_half_the_steps),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refusals_4bit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
