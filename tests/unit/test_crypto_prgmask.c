/* The mask generator against OpenSSL's AES-128-CTR, called here directly,
 * on every implementation this CPU runs (OpenSSL's EVP and the VAES kernels,
 * crypto/mask_prg_vaes_internal.h; one the CPU lacks is skipped): keystream words in
 * pieces of any length, seeks, IVs whose low 64 bits wrap; and fa_mask_prg_mask
 * (the masking hot loop) against a word-by-word reference: random mask
 * counts and signs, odd lengths, in place or from a separate input, and a
 * block split over several calls.  main says how to run one path's tests. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/fa_err.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/secagg.h"

static const char *const impls[] = {"openssl", "vaes256", "vaes512"};

/* n keystream words of key at counter block iv, by OpenSSL directly. */
static void evp_words(const uint8_t key[16], const uint8_t iv[16], uint32_t *out, size_t n)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    uint8_t *zeros = calloc(n ? n : 1, 4);
    int outl = 0;
    assert_non_null(ctx);
    assert_non_null(zeros);
    assert_int_equal(EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), NULL, key, iv), 1);
    assert_int_equal(EVP_EncryptUpdate(ctx, (uint8_t *)out, &outl, zeros, (int)(n * 4)), 1);
    assert_int_equal(outl, (int)(n * 4));
    EVP_CIPHER_CTX_free(ctx);
    free(zeros);
}

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)rs;
}

static void check_case(size_t count, size_t n, int in_place, size_t split)
{
    fa_mask_prg *g = calloc(count ? count : 1, sizeof(*g));
    int *sign = calloc(count ? count : 1, sizeof(int));
    uint32_t *base = malloc((n + 1) * 4), *acc = malloc((n + 1) * 4), *want = malloc((n + 1) * 4);
    uint32_t *scratch = malloc(FA_MASK_PRG_BLOCK_WORDS * 4), *ks = malloc((n + 1) * 4);
    uint8_t key[FA_MASK_PRG_KEY_BYTES];
    const uint8_t iv0[16] = {0};

    for (size_t j = 0; j < n; j++)
        base[j] = want[j] = rnd();
    for (size_t i = 0; i < count; i++) {
        for (size_t b = 0; b < sizeof(key); b++)
            key[b] = (uint8_t)rnd();
        assert_int_equal(fa_mask_prg_init(&g[i], key, 0), 0);
        sign[i] = (rnd() & 1) ? 1 : -1;
        /* the reference: word by word, from OpenSSL */
        evp_words(key, iv0, ks, n);
        for (size_t j = 0; j < n; j++)
            want[j] += sign[i] < 0 ? (uint32_t)-ks[j] : ks[j];
    }
    /* fa_mask_prg_mask in pieces of at most `split` words (each <= one block) */
    if (in_place)
        memcpy(acc, base, n * 4);
    for (size_t off = 0; off < n;) {
        size_t m = n - off < split ? n - off : split;
        assert_int_equal(fa_mask_prg_mask(g, sign, count, in_place ? acc + off : base + off,
                                          acc + off, m, scratch),
                         0);
        off += m;
    }
    assert_memory_equal(acc, want, n * 4);
    for (size_t i = 0; i < count; i++)
        fa_mask_prg_free(&g[i]);
    free(g);
    free(sign);
    free(base);
    free(acc);
    free(want);
    free(scratch);
    free(ks);
}

/* Selects impls[*state] for the test, or skips it where this CPU lacks it. */
static int use_impl(void **state)
{
    const char *name = impls[(size_t)(uintptr_t)*state];
    int rc = fa_mask_prg_use(name);
    if (rc == FA_ERR_UNSUPPORTED)
        return 1;
    assert_int_equal(rc, 0);
    assert_string_equal(fa_mask_prg_impl(), name);
    return 0;
}

static void test_keystream(void **state)
{
    static const size_t pieces[] = {1,  2,  3,  4,  5,  7,   8,   15,   16,  17,
                                    31, 33, 63, 64, 65, 127, 129, 1000, 4096};
    enum { N = 3 * FA_MASK_PRG_BLOCK_WORDS + 123 };
    uint32_t *want = malloc((N + 256) * 4), *got = malloc((N + 256) * 4); /* a seek reads past N */
    uint8_t key[FA_MASK_PRG_KEY_BYTES], iv[16];

    if (use_impl(state)) {
        free(want);
        free(got);
        skip();
    }
    for (int t = 0; t < 60; t++) {
        fa_mask_prg g;
        for (size_t b = 0; b < sizeof(key); b++)
            key[b] = (uint8_t)rnd();
        for (size_t b = 0; b < sizeof(iv); b++)
            iv[b] = (uint8_t)rnd();
        if (t % 3 == 1) /* the low 64 bits wrap inside the run: the carry reaches hi */
            memset(iv + 8, 0xff, 7), iv[15] = (uint8_t)(0xff - (rnd() % 40));
        if (t % 3 == 2) /* all 128 bits wrap */
            memset(iv, 0xff, 15), iv[15] = (uint8_t)(0xff - (rnd() % 40));
        evp_words(key, iv, want, N);
        assert_int_equal(fa_mask_prg_init_iv(&g, key, iv), 0);
        for (size_t off = 0; off < N;) {
            size_t m = pieces[rnd() % (sizeof(pieces) / sizeof(pieces[0]))];
            m = m < N - off ? m : N - off;
            assert_int_equal(fa_mask_prg_words(&g, got + off, m), 0);
            off += m;
        }
        assert_memory_equal(got, want, N * 4);
        /* a seek to any block restarts there (counter = word / 4, IV ignored) */
        for (int s = 0; s < 4; s++) {
            uint64_t w = 4 * (uint64_t)(rnd() % (N / 4));
            uint8_t z[16] = {0};
            size_t m = 1 + rnd() % 200;
            assert_int_equal(fa_mask_prg_seek(&g, w), 0);
            assert_int_equal(fa_mask_prg_words(&g, got, m), 0);
            evp_words(key, z, want, (size_t)w + m);
            assert_memory_equal(got, want + w, m * 4);
            assert_int_equal(fa_mask_prg_words(&g, got, 5), 0); /* and goes on from there */
            evp_words(key, z, want, (size_t)w + m + 5);
            assert_memory_equal(got, want + w + m, 5 * 4);
        }
        assert_int_equal(fa_mask_prg_seek(&g, 6), FA_ERR_INVAL);
        fa_mask_prg_free(&g);
        fa_mask_prg_free(&g); /* a freed generator frees as a no-op */
    }
    free(want);
    free(got);
}

static void test_against_reference(void **state)
{
    static const size_t lens[] = {1, 3, 4, 17, 1023, 1024, 1025, 4096, 4097, 10007};
    static const size_t counts[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 17};
    if (use_impl(state))
        skip();
    for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++)
        for (size_t b = 0; b < sizeof(counts) / sizeof(counts[0]); b++)
            for (int in_place = 0; in_place < 2; in_place++)
                check_case(counts[b], lens[a], in_place, FA_MASK_PRG_BLOCK_WORDS);
}

static void test_split_calls(void **state)
{
    if (use_impl(state))
        skip();
    /* a block handed over in uneven pieces gives the same words */
    check_case(5, 9000, 1, 333);
    check_case(4, 9000, 0, 1);
    check_case(6, 4096 * 3, 1, 4095);
    check_case(8, 20000, 0, 4093);
}

/* Generators keyed under different implementations in one fa_mask_prg_mask call
 * (never in the product, where the choice is made once) still add up. */
static void test_mixed_impls(void **state)
{
    enum { N = 5000 };
    fa_mask_prg g[3];
    int sign[3] = {1, -1, 1};
    uint32_t *acc = calloc(N, 4), *want = calloc(N, 4), *ks = malloc(N * 4),
             *scratch = malloc(FA_MASK_PRG_BLOCK_WORDS * 4);
    uint8_t key[3][FA_MASK_PRG_KEY_BYTES];
    const uint8_t iv0[16] = {0};
    (void)state;
    for (int i = 0; i < 3; i++) {
        for (size_t b = 0; b < FA_MASK_PRG_KEY_BYTES; b++)
            key[i][b] = (uint8_t)rnd();
        assert_int_equal(fa_mask_prg_use(i == 1 ? "openssl" : "auto"), 0);
        assert_int_equal(fa_mask_prg_init(&g[i], key[i], 0), 0);
        evp_words(key[i], iv0, ks, N);
        for (size_t j = 0; j < N; j++)
            want[j] += sign[i] < 0 ? (uint32_t)-ks[j] : ks[j];
    }
    for (size_t off = 0; off < N; off += FA_MASK_PRG_BLOCK_WORDS)
        assert_int_equal(
            fa_mask_prg_mask(g, sign, 3, acc + off, acc + off,
                             N - off < FA_MASK_PRG_BLOCK_WORDS ? N - off : FA_MASK_PRG_BLOCK_WORDS,
                             scratch),
            0);
    assert_memory_equal(acc, want, N * 4);
    for (int i = 0; i < 3; i++)
        fa_mask_prg_free(&g[i]);
    free(acc);
    free(want);
    free(ks);
    free(scratch);
}

static void test_use_names(void **state)
{
    (void)state;
    assert_int_equal(fa_mask_prg_use("aes-ni"), FA_ERR_INVAL);
    assert_int_equal(fa_mask_prg_use(NULL), FA_ERR_INVAL);
    assert_int_equal(fa_mask_prg_use("openssl"), 0);
    assert_string_equal(fa_mask_prg_impl(), "openssl");
    assert_int_equal(fa_mask_prg_use("auto"), 0);
    assert_string_equal(fa_mask_prg_impl(), fa_mask_prg_best());
    print_message("mask generator on this CPU: %s\n", fa_mask_prg_impl());
}

/* The daemons' FEDAGG_MASK_PRG: unset or empty leaves auto; a name sets
 * it; anything else, or a path this CPU lacks, is refused by name. */
static void test_env(void **state)
{
    fa_error err;
    (void)state;
    unsetenv("FEDAGG_MASK_PRG");
    assert_int_equal(fa_secagg_mask_prg_from_env(&err), 0);
    assert_string_equal(fa_secagg_mask_prg(), fa_mask_prg_best());
    setenv("FEDAGG_MASK_PRG", "", 1);
    assert_int_equal(fa_secagg_mask_prg_from_env(&err), 0);
    setenv("FEDAGG_MASK_PRG", "openssl", 1);
    assert_int_equal(fa_secagg_mask_prg_from_env(&err), 0);
    assert_string_equal(fa_secagg_mask_prg(), "openssl");
    setenv("FEDAGG_MASK_PRG", "aes-ni", 1);
    fa_error_clear(&err);
    assert_int_equal(fa_secagg_mask_prg_from_env(&err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "FEDAGG_MASK_PRG=aes-ni"));
    assert_string_equal(fa_secagg_mask_prg(), "openssl"); /* unchanged */
    setenv("FEDAGG_MASK_PRG", "vaes512", 1);
    fa_error_clear(&err);
    if (strcmp(fa_mask_prg_best(), "vaes512") != 0) {
        assert_int_equal(fa_secagg_mask_prg_from_env(&err), FA_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "this CPU cannot run it"));
    } else {
        assert_int_equal(fa_secagg_mask_prg_from_env(&err), 0);
    }
    unsetenv("FEDAGG_MASK_PRG");
    assert_int_equal(fa_mask_prg_use("auto"), 0);
}

/* Whether the arguments name `what` (with no argument, everything runs). */
static int named(int argc, char **argv, const char *what)
{
    for (int a = 1; a < argc; a++)
        if (!strcmp(argv[a], what))
            return 1;
    return argc < 2;
}

/* Which tests run: with no argument all of them; with arguments, the
 * per-path tests of each path named and, for "shared", the tests across
 * paths.  ctest runs it once per VAES path and once for OpenSSL's and the
 * shared tests (tests/CMakeLists.txt), so that a path this CPU lacks shows
 * as one skipped entry while the others show as passed. */
int main(int argc, char **argv)
{
    static const struct CMUnitTest per_impl[] = {
        cmocka_unit_test(test_keystream),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_split_calls),
    };
    static const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_mixed_impls),
        cmocka_unit_test(test_use_names),
        cmocka_unit_test(test_env),
    };
    enum {
        NIMPL = sizeof(impls) / sizeof(impls[0]),
        NPER = sizeof(per_impl) / sizeof(per_impl[0]),
        NSHARED = sizeof(shared) / sizeof(shared[0]),
    };
    struct CMUnitTest tests[NIMPL * NPER + NSHARED];
    size_t n = 0;

    for (int a = 1; a < argc; a++) {
        int known = !strcmp(argv[a], "shared");
        for (size_t i = 0; i < NIMPL; i++)
            known |= !strcmp(argv[a], impls[i]);
        if (!known) {
            fprintf(stderr,
                    "test_crypto_prgmask: unknown argument '%s' (openssl, vaes256, "
                    "vaes512 or shared)\n",
                    argv[a]);
            return 2;
        }
    }
    for (size_t i = 0; i < NIMPL; i++)
        for (size_t t = 0; named(argc, argv, impls[i]) && t < NPER; t++) {
            tests[n] = per_impl[t];
            tests[n++].initial_state = (void *)(uintptr_t)i; /* use_impl's index */
        }
    for (size_t t = 0; named(argc, argv, "shared") && t < NSHARED; t++)
        tests[n++] = shared[t];
    return _cmocka_run_group_tests("test_crypto_prgmask", tests, n, NULL, NULL);
}
