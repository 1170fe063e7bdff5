/* AES-128-CTR on VAES, the keystream applied in registers.  See
 * crypto/mask_prg_vaes_internal.h.
 *
 * Layout of the counter.  CTR block i is the 16-byte big-endian number
 * (hi:lo) + i.  A 128-bit lane holding the 64-bit integers lo and hi in that
 * order (little-endian, as the CPU adds them) becomes that big-endian block
 * when its 16 bytes are reversed (one vpshufb), so the counters of a vector
 * are kept as integers, stepped with one 64-bit add per lane, and reversed
 * before AES.  The add does not carry from lo into hi: the driver never
 * hands a kernel a run of blocks across lo's wrap (it splits the run there;
 * at 16 bytes a block that is 2^68 bytes of one mask, so only a test's IV
 * ever gets there).
 *
 * The kernels keep eight vectors of counters in flight (VAES has a latency
 * of several cycles and two or more issue a cycle), so eight vectors of
 * blocks are encrypted before any is applied. */
#include "crypto/mask_prg_vaes_internal.h"

#include <openssl/crypto.h>

#if FA_MASK_PRG_HAVE_VAES

#include <cpuid.h>
#include <immintrin.h>

#define FA_VAES_LANES 8 /* vectors in flight */

/* CPUID and XGETBV directly: compilers differ in which feature names
 * __builtin_cpu_supports knows (Clang 14 has no "vaes").  A feature counts
 * only when the kernel saves its registers (XCR0). */
__attribute__((target("xsave"))) int fa_mask_prg_vaes_width(void)
{
    unsigned a, b, c, d, b7, c7;
    unsigned long long xcr0;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return FA_VAES_NONE;
    if (!(c & bit_AES) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return FA_VAES_NONE;
    xcr0 = _xgetbv(0);
    if ((xcr0 & 0x6) != 0x6) /* SSE and AVX state */
        return FA_VAES_NONE;
    if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d))
        return FA_VAES_NONE;
    if (!(c7 & bit_VAES))
        return FA_VAES_NONE;
    if ((b7 & bit_AVX512F) && (b7 & bit_AVX512BW) && (xcr0 & 0xe0) == 0xe0) /* opmask, ZMM */
        return FA_VAES_512;
    if (b7 & bit_AVX2)
        return FA_VAES_256;
    return FA_VAES_NONE;
}

/* ---- the key schedule (FIPS 197, 5.2) and single blocks, on AES-NI ------- */

__attribute__((target("aes,sse2"))) static __m128i expand_step(__m128i k, __m128i assist)
{
    assist = _mm_shuffle_epi32(assist, 0xff);
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    return _mm_xor_si128(k, assist);
}

__attribute__((target("aes,sse2"))) void fa_mask_prg_vaes_key(struct fa_mask_prg_vaes *v, int width,
                                                              const uint8_t key[16],
                                                              const uint8_t iv[16])
{
    __m128i k[11];
    uint64_t hi = 0, lo = 0;

    k[0] = _mm_loadu_si128((const __m128i *)key);
    /* aeskeygenassist takes its round constant as an immediate */
#define FA_EXPAND(i, rcon) k[i] = expand_step(k[i - 1], _mm_aeskeygenassist_si128(k[i - 1], rcon))
    FA_EXPAND(1, 0x01);
    FA_EXPAND(2, 0x02);
    FA_EXPAND(3, 0x04);
    FA_EXPAND(4, 0x08);
    FA_EXPAND(5, 0x10);
    FA_EXPAND(6, 0x20);
    FA_EXPAND(7, 0x40);
    FA_EXPAND(8, 0x80);
    FA_EXPAND(9, 0x1b);
    FA_EXPAND(10, 0x36);
#undef FA_EXPAND
    for (int r = 0; r < 11; r++)
        for (int q = 0; q < 4; q++)
            _mm_store_si128((__m128i *)(v->rk[r] + 16 * q), k[r]);
    OPENSSL_cleanse(k, sizeof(k));
    for (int i = 0; i < 8; i++) {
        hi = hi << 8 | iv[i];
        lo = lo << 8 | iv[8 + i];
    }
    v->width = width;
    fa_mask_prg_vaes_seek(v, hi, lo);
}

void fa_mask_prg_vaes_seek(struct fa_mask_prg_vaes *v, uint64_t hi, uint64_t lo)
{
    v->hi = hi;
    v->lo = lo;
    v->nheld = 0;
    OPENSSL_cleanse(v->held, sizeof(v->held));
}

void fa_mask_prg_vaes_wipe(struct fa_mask_prg_vaes *v)
{
    OPENSSL_cleanse(v, sizeof(*v));
}

/* The next block of keystream into ks (four words); the counter steps with
 * its carry into hi. */
__attribute__((target("aes,ssse3"))) static void one_block(struct fa_mask_prg_vaes *v,
                                                           uint32_t ks[4])
{
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m128i s = _mm_shuffle_epi8(_mm_set_epi64x((long long)v->hi, (long long)v->lo), rev);
    s = _mm_xor_si128(s, _mm_load_si128((const __m128i *)v->rk[0]));
    for (int r = 1; r < 10; r++)
        s = _mm_aesenc_si128(s, _mm_load_si128((const __m128i *)v->rk[r]));
    s = _mm_aesenclast_si128(s, _mm_load_si128((const __m128i *)v->rk[10]));
    _mm_storeu_si128((__m128i *)ks, s);
    if (++v->lo == 0)
        v->hi++;
}

/* ---- the kernels: nb blocks (a multiple of 4) from hi:lo, no wrap of lo --- */

/* One vector of keystream applied by OP (a constant in every instance). */
#define FA_APPLY(W, OP, base, out, s)                                                              \
    do {                                                                                           \
        if ((OP) == FA_VAES_STORE)                                                                 \
            _mm##W##_storeu_si##W((void *)(out), (s));                                             \
        else if ((OP) == FA_VAES_ADD)                                                              \
            _mm##W##_storeu_si##W(                                                                 \
                (void *)(out),                                                                     \
                _mm##W##_add_epi32(_mm##W##_loadu_si##W((const void *)(base)), (s)));              \
        else                                                                                       \
            _mm##W##_storeu_si##W(                                                                 \
                (void *)(out),                                                                     \
                _mm##W##_sub_epi32(_mm##W##_loadu_si##W((const void *)(base)), (s)));              \
    } while (0)

#define FA_REV16 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0

#define FA_TARGET_512 "avx512f,avx512bw,vaes,aes"
#define FA_TARGET_256 "avx2,vaes,aes"

__attribute__((target(FA_TARGET_512), always_inline)) static inline void
kernel512(const struct fa_mask_prg_vaes *v, const int op, const uint32_t *base, uint32_t *out,
          size_t nb)
{
    const __m512i rev = _mm512_broadcast_i32x4(_mm_setr_epi8(FA_REV16));
    const __m512i four = _mm512_setr_epi64(4, 0, 4, 0, 4, 0, 4, 0);
    const uint64_t lo = v->lo;
    const long long hi = (long long)v->hi;
    __m512i c = _mm512_setr_epi64((long long)lo, hi, (long long)(lo + 1), hi, (long long)(lo + 2),
                                  hi, (long long)(lo + 3), hi);
    size_t j = 0; /* words done */
#define FA_K(r) _mm512_load_si512((const void *)v->rk[r])
    for (; nb >= 4 * FA_VAES_LANES; nb -= 4 * FA_VAES_LANES, j += 16 * FA_VAES_LANES) {
        __m512i s[FA_VAES_LANES];
#pragma GCC unroll 8
        for (int i = 0; i < FA_VAES_LANES; i++) {
            s[i] = _mm512_xor_si512(_mm512_shuffle_epi8(c, rev), FA_K(0));
            c = _mm512_add_epi64(c, four);
        }
#pragma GCC unroll 9
        for (int r = 1; r < 10; r++)
#pragma GCC unroll 8
            for (int i = 0; i < FA_VAES_LANES; i++)
                s[i] = _mm512_aesenc_epi128(s[i], FA_K(r));
#pragma GCC unroll 8
        for (int i = 0; i < FA_VAES_LANES; i++) {
            s[i] = _mm512_aesenclast_epi128(s[i], FA_K(10));
            FA_APPLY(512, op, base + j + 16 * i, out + j + 16 * i, s[i]);
        }
    }
    for (; nb >= 4; nb -= 4, j += 16) {
        __m512i s = _mm512_xor_si512(_mm512_shuffle_epi8(c, rev), FA_K(0));
        c = _mm512_add_epi64(c, four);
        for (int r = 1; r < 10; r++)
            s = _mm512_aesenc_epi128(s, FA_K(r));
        s = _mm512_aesenclast_epi128(s, FA_K(10));
        FA_APPLY(512, op, base + j, out + j, s);
    }
#undef FA_K
}

/* Two blocks a vector.  Sixteen registers do not hold the eleven keys and
 * eight vectors in flight: the keys are read from v as memory operands. */
__attribute__((target(FA_TARGET_256), always_inline)) static inline void
kernel256(const struct fa_mask_prg_vaes *v, const int op, const uint32_t *base, uint32_t *out,
          size_t nb)
{
    const __m256i rev = _mm256_setr_epi8(FA_REV16, FA_REV16);
    const __m256i two = _mm256_setr_epi64x(2, 0, 2, 0);
    const uint64_t lo = v->lo;
    const long long hi = (long long)v->hi;
    __m256i c = _mm256_setr_epi64x((long long)lo, hi, (long long)(lo + 1), hi);
    size_t j = 0;
#define FA_K(r) _mm256_load_si256((const __m256i *)v->rk[r])

    for (; nb >= 2 * FA_VAES_LANES; nb -= 2 * FA_VAES_LANES, j += 8 * FA_VAES_LANES) {
        __m256i s[FA_VAES_LANES];
#pragma GCC unroll 8
        for (int i = 0; i < FA_VAES_LANES; i++) {
            s[i] = _mm256_xor_si256(_mm256_shuffle_epi8(c, rev), FA_K(0));
            c = _mm256_add_epi64(c, two);
        }
#pragma GCC unroll 9
        for (int r = 1; r < 10; r++)
#pragma GCC unroll 8
            for (int i = 0; i < FA_VAES_LANES; i++)
                s[i] = _mm256_aesenc_epi128(s[i], FA_K(r));
#pragma GCC unroll 8
        for (int i = 0; i < FA_VAES_LANES; i++) {
            s[i] = _mm256_aesenclast_epi128(s[i], FA_K(10));
            FA_APPLY(256, op, base + j + 8 * i, out + j + 8 * i, s[i]);
        }
    }
    for (; nb >= 2; nb -= 2, j += 8) {
        __m256i s = _mm256_xor_si256(_mm256_shuffle_epi8(c, rev), FA_K(0));
        c = _mm256_add_epi64(c, two);
        for (int r = 1; r < 10; r++)
            s = _mm256_aesenc_epi128(s, FA_K(r));
        s = _mm256_aesenclast_epi128(s, FA_K(10));
        FA_APPLY(256, op, base + j, out + j, s);
    }
#undef FA_K
}

/* One instance per width and op, the op folded in. */
#define FA_KERNEL_FN(W, NAME, OP)                                                                  \
    __attribute__((noinline, target(FA_TARGET_##W))) static void kernel##W##_##NAME(               \
        const struct fa_mask_prg_vaes *v, const uint32_t *base, uint32_t *out, size_t nb)          \
    {                                                                                              \
        kernel##W(v, OP, base, out, nb);                                                           \
    }
FA_KERNEL_FN(512, store, FA_VAES_STORE)
FA_KERNEL_FN(512, add, FA_VAES_ADD)
FA_KERNEL_FN(512, sub, FA_VAES_SUB)
FA_KERNEL_FN(256, store, FA_VAES_STORE)
FA_KERNEL_FN(256, add, FA_VAES_ADD)
FA_KERNEL_FN(256, sub, FA_VAES_SUB)
#undef FA_KERNEL_FN

typedef void (*kernel_fn)(const struct fa_mask_prg_vaes *, const uint32_t *, uint32_t *, size_t);

static uint32_t apply_word(enum fa_vaes_op op, uint32_t base, uint32_t ks)
{
    return op == FA_VAES_STORE ? ks : op == FA_VAES_ADD ? base + ks : base - ks;
}

/* Runs of four blocks and more go to the kernel; anything less (the start
 * or end of a call off a block boundary, the last blocks before lo wraps)
 * goes one block at a time through held, which keeps what a call leaves of
 * its last block for the next. */
void fa_mask_prg_vaes_run(struct fa_mask_prg_vaes *v, enum fa_vaes_op op, const uint32_t *base,
                          uint32_t *out, size_t n)
{
    static const kernel_fn k512[3] = {kernel512_store, kernel512_add, kernel512_sub},
                           k256[3] = {kernel256_store, kernel256_add, kernel256_sub};
    const kernel_fn kernel = (v->width == FA_VAES_512 ? k512 : k256)[op];
    size_t j = 0;

    if (op == FA_VAES_STORE)
        base = out; /* read by nothing; keeps the pointer arithmetic below defined */
    for (;;) {
        uint64_t room, nb;
        size_t take;
        for (; v->nheld > 0 && j < n; j++, v->nheld--)
            out[j] = apply_word(op, base[j], v->held[4 - v->nheld]);
        if (j == n)
            return;
        nb = (n - j) / 4;
        room = v->lo == 0 ? UINT64_MAX : 0 - v->lo; /* blocks up to lo's wrap: 2^64 - lo */
        take = (size_t)(nb < room ? nb : room) & ~(size_t)3;
        if (take == 0) {
            one_block(v, v->held);
            v->nheld = 4;
            continue;
        }
        kernel(v, base + j, out + j, take);
        v->lo += take;
        if (v->lo == 0)
            v->hi++;
        j += 4 * take;
    }
}

#endif /* FA_MASK_PRG_HAVE_VAES */
