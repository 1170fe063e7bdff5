#include "crypto/mask_prg_internal.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/fa_err.h"
#include "crypto/mask_prg_vaes_internal.h"
#include "crypto/ring_internal.h"

/* Words per sub-block of the VAES path's masking loop (16 KiB). */
#define FA_MASK_PRG_VAES_SUB_WORDS 4096

/* Plaintext of the keystream: CTR mode XORs it in, so zeros give the stream. */
static const uint8_t prg_zeros[FA_MASK_PRG_BLOCK_WORDS * 4];

static void counter_iv(uint8_t iv[16], uint64_t word)
{
    uint64_t block = word / 4;
    memset(iv, 0, 16);
    for (int i = 0; i < 8; i++)
        iv[15 - i] = (uint8_t)(block >> (8 * i)); /* big-endian 128-bit counter */
}

/* ---- which implementation ------------------------------------------------ */

/* FA_VAES_NONE (OpenSSL), FA_VAES_256 or FA_VAES_512; -1 until chosen. */
static int prg_width = -1;

static int prg_auto_width(void)
{
#if FA_MASK_PRG_HAVE_VAES
    return fa_mask_prg_vaes_width();
#else
    return FA_VAES_NONE;
#endif
}

static int prg_current_width(void)
{
    int w = __atomic_load_n(&prg_width, __ATOMIC_ACQUIRE);
    if (w < 0) { /* every thread that races here picks the same */
        w = prg_auto_width();
        __atomic_store_n(&prg_width, w, __ATOMIC_RELEASE);
    }
    return w;
}

int fa_mask_prg_use(const char *name)
{
    int want, have = prg_auto_width();
    if (!name)
        return FA_ERR_INVAL;
    if (strcmp(name, "auto") == 0)
        want = have;
    else if (strcmp(name, "openssl") == 0)
        want = FA_VAES_NONE;
    else if (strcmp(name, "vaes256") == 0)
        want = FA_VAES_256;
    else if (strcmp(name, "vaes512") == 0)
        want = FA_VAES_512;
    else
        return FA_ERR_INVAL;
    /* a CPU with the 512-bit path runs the 256-bit one too */
    if (want > have)
        return FA_ERR_UNSUPPORTED;
    __atomic_store_n(&prg_width, want, __ATOMIC_RELEASE);
    return 0;
}

static const char *width_name(int width)
{
    switch (width) {
    case FA_VAES_512: return "vaes512";
    case FA_VAES_256: return "vaes256";
    default: return "openssl";
    }
}

const char *fa_mask_prg_impl(void)
{
    return width_name(prg_current_width());
}

const char *fa_mask_prg_best(void)
{
    return width_name(prg_auto_width());
}

/* ---- keying, seeking, words ---------------------------------------------- */

int fa_mask_prg_init(fa_mask_prg *g, const uint8_t key[FA_MASK_PRG_KEY_BYTES], uint64_t word)
{
    uint8_t iv[16];
    g->ctx = NULL;
    g->vaes = NULL;
    if (word % 4)
        return FA_ERR_INVAL;
    counter_iv(iv, word);
    return fa_mask_prg_init_iv(g, key, iv);
}

int fa_mask_prg_init_iv(fa_mask_prg *g, const uint8_t key[FA_MASK_PRG_KEY_BYTES],
                        const uint8_t iv[16])
{
    EVP_CIPHER_CTX *ctx;
    int width = prg_current_width();

    g->ctx = NULL;
    g->vaes = NULL;
#if FA_MASK_PRG_HAVE_VAES
    if (width != FA_VAES_NONE) {
        void *p = NULL;
        if (posix_memalign(&p, 64, sizeof(struct fa_mask_prg_vaes)) != 0)
            return FA_ERR_NOMEM;
        g->vaes = p;
        fa_mask_prg_vaes_key(g->vaes, width, key, iv);
        return 0;
    }
#else
    (void)width;
#endif
    ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return FA_ERR_NOMEM;
    if (EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), NULL, key, iv) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return FA_ERR_CRYPTO;
    }
    g->ctx = ctx;
    return 0;
}

int fa_mask_prg_seek(fa_mask_prg *g, uint64_t word)
{
    uint8_t iv[16];
    if (word % 4 || (!g->ctx && !g->vaes))
        return FA_ERR_INVAL;
#if FA_MASK_PRG_HAVE_VAES
    if (g->vaes) {
        fa_mask_prg_vaes_seek(g->vaes, 0, word / 4);
        return 0;
    }
#endif
    counter_iv(iv, word);
    /* NULL cipher and key keep the key schedule; only the counter changes. */
    return EVP_EncryptInit_ex(g->ctx, NULL, NULL, NULL, iv) == 1 ? 0 : FA_ERR_CRYPTO;
}

void fa_mask_prg_free(fa_mask_prg *g)
{
    if (!g)
        return;
    if (g->ctx) {
        EVP_CIPHER_CTX_free(g->ctx); /* cleanses the key schedule */
        g->ctx = NULL;
    }
#if FA_MASK_PRG_HAVE_VAES
    if (g->vaes) {
        fa_mask_prg_vaes_wipe(g->vaes);
        free(g->vaes);
        g->vaes = NULL;
    }
#endif
}

int fa_mask_prg_words(fa_mask_prg *g, uint32_t *out, size_t n)
{
    int outl = 0;
    if (n > FA_MASK_PRG_BLOCK_WORDS)
        return FA_ERR_INVAL;
    if (n == 0)
        return 0;
#if FA_MASK_PRG_HAVE_VAES
    if (g->vaes) {
        fa_mask_prg_vaes_run(g->vaes, FA_VAES_STORE, NULL, out, n);
        return 0;
    }
#endif
    if (EVP_EncryptUpdate(g->ctx, (uint8_t *)out, &outl, prg_zeros, (int)(n * 4)) != 1 ||
        outl != (int)(n * 4))
        return FA_ERR_CRYPTO;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n; i++)
        out[i] = __builtin_bswap32(out[i]);
#endif
    return 0;
}

/* ---- the masking loop ------------------------------------------------------
 *
 * Masking is AES-bound: the add is a few instructions per word, the
 * keystream ~0.3 cycles per byte.  What costs beyond AES is memory traffic,
 * so the loop is arranged around it:
 *  - Keystreams of up to FA_MASK_PRG_GROUP generators for one sub-block of
 *    FA_MASK_PRG_SUB_WORDS words are generated into the scratch block, then added
 *    to the accumulator in ONE pass (mask_add below): one load and store of
 *    acc per group instead of one per generator.  The scratch (16 KiB), the
 *    accumulator's sub-block (4 KiB), the input's (4 KiB) and the zero
 *    plaintext (4 KiB) together stay in a 32 KiB L1.  (Measured: 4 KiB
 *    sub-blocks beat 2, 8 and 16 KiB ones, although each EVP call costs
 *    ~2.5 % more than at 16 KiB; the old 16 KiB blocks with an add pass per
 *    mask filled a 48 KiB L1.)
 *  - The first group reads the input (base) and writes acc: no separate copy
 *    of the input into acc.
 *  - The input's next sub-block is prefetched in slices while AES runs, so
 *    it is in L1 (not DRAM, ~10 % of the loop at n = 4 without) when the
 *    add needs it.
 *  - The AVX-512 clone (FA_CLONES) stays: an AVX2-only build of this loop
 *    was 1-2 % slower next to OpenSSL's AES on this code's test machine.
 * Keystreams are not generated straight into acc: CTR mode XORs the
 * keystream into its input, and XOR is not addition mod 2^32. */

/* acc = base + (ks_0 + ... + ks_{P-1}) - (ks_P + ... + ks_{K-1}) for K
 * keystreams at ks + k * FA_MASK_PRG_SUB_WORDS, the first P added and the rest
 * subtracted: one add or subtract per keystream and word.  (Applying each
 * sign in the loop, as -x = (x ^ 0xffffffff) + 1, took twice the vector
 * operations, and 512-bit ones issue on two ports only: the pass was
 * ALU-bound.)  K and P are compile-time constants of each instance below.
 * INPLACE reads acc as base.  Fixed-size FA_CHUNK inner loops so that -O2
 * vectorises (see crypto/ring_internal.h). */
static inline __attribute__((always_inline)) void
mask_add(uint32_t *restrict acc, const uint32_t *restrict base, const uint32_t *restrict ks,
         size_t n, const unsigned K, const unsigned P, const int INPLACE)
{
    const uint32_t *restrict k0 = ks, *restrict k1 = ks + FA_MASK_PRG_SUB_WORDS,
                             *restrict k2 = ks + 2 * FA_MASK_PRG_SUB_WORDS,
                             *restrict k3 = ks + 3 * FA_MASK_PRG_SUB_WORDS;
#define FA_KS(x, j) ((x) < K ? ((x) < P ? k##x[j] : -k##x[j]) : 0)
#define FA_MASK_WORD(j)                                                                            \
    ((INPLACE ? acc[j] : base[j]) + FA_KS(0, j) + FA_KS(1, j) + FA_KS(2, j) + FA_KS(3, j))
    size_t i = 0;
    for (; i + FA_CHUNK <= n; i += FA_CHUNK)
        for (size_t j = i; j < i + FA_CHUNK; j++)
            acc[j] = FA_MASK_WORD(j);
    for (; i < n; i++)
        acc[i] = FA_MASK_WORD(i);
#undef FA_MASK_WORD
#undef FA_KS
}

typedef void (*mask_add_fn)(uint32_t *restrict, const uint32_t *restrict, const uint32_t *restrict,
                            size_t);

#define FA_MASK_ADD_FN(K, P)                                                                       \
    FA_CLONES static void mask_add_##K##_##P(uint32_t *restrict acc,                               \
                                             const uint32_t *restrict base,                        \
                                             const uint32_t *restrict ks, size_t n)                \
    {                                                                                              \
        mask_add(acc, base, ks, n, K, P, 0);                                                       \
    }                                                                                              \
    FA_CLONES static void mask_add_inplace_##K##_##P(uint32_t *restrict acc,                       \
                                                     const uint32_t *restrict base,                \
                                                     const uint32_t *restrict ks, size_t n)        \
    {                                                                                              \
        (void)base;                                                                                \
        mask_add(acc, NULL, ks, n, K, P, 1);                                                       \
    }
FA_MASK_ADD_FN(1, 0)
FA_MASK_ADD_FN(1, 1)
FA_MASK_ADD_FN(2, 0)
FA_MASK_ADD_FN(2, 1)
FA_MASK_ADD_FN(2, 2)
FA_MASK_ADD_FN(3, 0)
FA_MASK_ADD_FN(3, 1)
FA_MASK_ADD_FN(3, 2)
FA_MASK_ADD_FN(3, 3)
FA_MASK_ADD_FN(4, 0)
FA_MASK_ADD_FN(4, 1)
FA_MASK_ADD_FN(4, 2)
FA_MASK_ADD_FN(4, 3)
FA_MASK_ADD_FN(4, 4)
#if FA_MASK_PRG_GROUP != 4
#error "mask_add is written for FA_MASK_PRG_GROUP == 4"
#endif

/* [in place][K keystreams][P of them added] */
static const mask_add_fn mask_add_table[2][FA_MASK_PRG_GROUP + 1][FA_MASK_PRG_GROUP + 1] = {
    {
        {NULL},
        {mask_add_1_0, mask_add_1_1},
        {mask_add_2_0, mask_add_2_1, mask_add_2_2},
        {mask_add_3_0, mask_add_3_1, mask_add_3_2, mask_add_3_3},
        {mask_add_4_0, mask_add_4_1, mask_add_4_2, mask_add_4_3, mask_add_4_4},
    },
    {
        {NULL},
        {mask_add_inplace_1_0, mask_add_inplace_1_1},
        {mask_add_inplace_2_0, mask_add_inplace_2_1, mask_add_inplace_2_2},
        {mask_add_inplace_3_0, mask_add_inplace_3_1, mask_add_inplace_3_2, mask_add_inplace_3_3},
        {mask_add_inplace_4_0, mask_add_inplace_4_1, mask_add_inplace_4_2, mask_add_inplace_4_3,
         mask_add_inplace_4_4},
    },
};

#if FA_MASK_PRG_HAVE_VAES
/* fa_mask_prg_mask on the VAES path: each generator's keystream goes into acc
 * from registers, one sub-block at a time, so acc's sub-block stays in L1
 * through every mask, and no scratch block is written or read. */
static void mask_vaes(fa_mask_prg *g, const int *sign, size_t count, const uint32_t *base,
                      uint32_t *acc, size_t n)
{
    const size_t lines = FA_MASK_PRG_VAES_SUB_WORDS * sizeof(uint32_t) / 64;
    const size_t slice = (lines + count - 1) / count;

    for (size_t off = 0; off < n; off += FA_MASK_PRG_VAES_SUB_WORDS) {
        const size_t m =
            n - off < FA_MASK_PRG_VAES_SUB_WORDS ? n - off : FA_MASK_PRG_VAES_SUB_WORDS;
        const char *next =
            (const char *)((uintptr_t)(base + off) + FA_MASK_PRG_VAES_SUB_WORDS * sizeof(uint32_t));
        for (size_t i = 0; i < count; i++) {
            for (size_t l = i * slice; l < (i + 1) * slice && l < lines; l++)
                __builtin_prefetch(next + 64 * l, 0, 3);
            fa_mask_prg_vaes_run(g[i].vaes, sign[i] < 0 ? FA_VAES_SUB : FA_VAES_ADD,
                                 i == 0 ? base + off : acc + off, acc + off, m);
        }
    }
}
#endif

int fa_mask_prg_mask(fa_mask_prg *g, const int *sign, size_t count, const uint32_t *base,
                     uint32_t *acc, size_t n, uint32_t *scratch)
{
    /* A sub-block of input is `lines` cache lines, prefetched `slice` per
     * AES call (no division in the loop: it shows in the timings). */
    const size_t lines = FA_MASK_PRG_SUB_WORDS * sizeof(uint32_t) / 64;
    const size_t slice = count ? (lines + count - 1) / count : 0;
    int rc;

    if (count == 0) {
        if (base != acc)
            memcpy(acc, base, n * sizeof(uint32_t));
        return 0;
    }
#if FA_MASK_PRG_HAVE_VAES
    {
        size_t keyed = 0;
        while (keyed < count && g[keyed].vaes)
            keyed++;
        if (keyed == count) {
            mask_vaes(g, sign, count, base, acc, n);
            return 0;
        }
        /* generators keyed under different implementations (a test that
         * switched): word by word through fa_mask_prg_words below */
    }
#endif
    for (size_t off = 0; off < n; off += FA_MASK_PRG_SUB_WORDS) {
        const size_t m = n - off < FA_MASK_PRG_SUB_WORDS ? n - off : FA_MASK_PRG_SUB_WORDS;
        /* The input's next sub-block.  Past the end of this call it is what
         * a caller streaming through a long input passes next; elsewhere a
         * wasted prefetch, harmless (a prefetch never faults).  Computed as
         * an integer: a pointer past the end of base would be undefined. */
        const char *next =
            (const char *)((uintptr_t)(base + off) + FA_MASK_PRG_SUB_WORDS * sizeof(uint32_t));
        size_t calls = 0;
        unsigned k_n = 0, k_add = 0;
        int first = 1;
        /* The added masks first, then the subtracted ones (the sum does not
         * depend on the order), so that each group is P adds then K - P
         * subtracts, which mask_add does without applying a sign per word. */
        for (int sub = 0; sub < 2; sub++) {
            for (size_t i = 0; i < count; i++) {
                if ((sign[i] < 0) != sub)
                    continue;
                for (size_t l = calls * slice; l < (calls + 1) * slice && l < lines; l++)
                    __builtin_prefetch(next + 64 * l, 0, 3);
                calls++;
                if ((rc = fa_mask_prg_words(&g[i], scratch + k_n * FA_MASK_PRG_SUB_WORDS, m)) != 0)
                    return rc;
                k_add += !sub;
                if (++k_n == FA_MASK_PRG_GROUP || calls == count) {
                    const int inplace = !first || base == acc;
                    mask_add_table[inplace][k_n][k_add](acc + off, inplace ? NULL : base + off,
                                                        scratch, m);
                    first = 0;
                    k_n = k_add = 0;
                }
            }
        }
    }
    return 0;
}

int fa_mask_prg_apply(fa_mask_prg *g, uint32_t *acc, size_t n, int sign, uint32_t *scratch)
{
    return fa_mask_prg_mask(g, &sign, 1, acc, acc, n, scratch);
}
