/* Unit tests of common/fa_sha256: FIPS 180-2 / RFC 6234 known answers, the
 * incremental hash against the one-shot, and failures of OpenSSL (injected
 * through -Wl,--wrap, see tests/CMakeLists.txt) returned as FA_ERR_CRYPTO
 * with the output left untouched. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_err.h"
#include "common/fa_hex.h"
#include "common/fa_sha256.h"

/* Which OpenSSL call fails next: 0 none, 1 init, 2 update, 3 final, 4 one-shot. */
static int fail_at;

int __real_EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl);
int __real_EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt);
int __real_EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s);
int __real_EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size,
                      const EVP_MD *type, ENGINE *impl);

int __wrap_EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl)
{
    return fail_at == 1 ? 0 : __real_EVP_DigestInit_ex(ctx, type, impl);
}

int __wrap_EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt)
{
    return fail_at == 2 ? 0 : __real_EVP_DigestUpdate(ctx, d, cnt);
}

int __wrap_EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s)
{
    if (fail_at == 3) {
        memset(md, 0, 32); /* a failing library may well write zeros */
        return 0;
    }
    return __real_EVP_DigestFinal_ex(ctx, md, s);
}

int __wrap_EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size,
                      const EVP_MD *type, ENGINE *impl)
{
    if (fail_at == 4) {
        memset(md, 0, 32);
        return 0;
    }
    return __real_EVP_Digest(data, count, md, size, type, impl);
}

static void assert_digest(const uint8_t d[32], const char *want)
{
    char hex[FA_HEX_LEN(32)];
    assert_string_equal(fa_hex_encode(hex, sizeof(hex), d, 32), want);
}

/* FIPS 180-2 appendix B.1-B.3, RFC 6234 section 8.5 (TEST4 and the empty string). */
static const char abc[] = "abc";
static const char two_block[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
static const char test4[] = "0123456701234567012345670123456701234567012345670123456701234567";
#define KAT_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define KAT_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define KAT_TWO "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
#define KAT_MILLION "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
#define KAT_TEST4 "594847328451bdfa85056225462cc1d867d877fb388df0ce35f25ab5562bfbb5"

static void test_oneshot_kat(void **state)
{
    uint8_t d[32];
    char *million = malloc(1000000);
    assert_non_null(million);
    memset(million, 'a', 1000000);

    assert_int_equal(fa_sha256(d, NULL, 0), 0);
    assert_digest(d, KAT_EMPTY);
    assert_int_equal(fa_sha256(d, abc, 3), 0);
    assert_digest(d, KAT_ABC);
    assert_int_equal(fa_sha256(d, two_block, strlen(two_block)), 0);
    assert_digest(d, KAT_TWO);
    assert_int_equal(fa_sha256(d, million, 1000000), 0);
    assert_digest(d, KAT_MILLION);
    free(million);
}

static void test_incremental_kat(void **state)
{
    fa_sha256_ctx h = {0};
    uint8_t d[32];

    /* 10^6 'a' in 1000 pieces of 1000, as FIPS 180-2 B.3 */
    char piece[1000];
    memset(piece, 'a', sizeof(piece));
    assert_int_equal(fa_sha256_init(&h), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(fa_sha256_update(&h, piece, sizeof(piece)), 0);
    assert_int_equal(fa_sha256_final(&h, d), 0);
    assert_digest(d, KAT_MILLION);

    /* RFC 6234 TEST4: the 64-byte string ten times; re-init reuses the context */
    assert_int_equal(fa_sha256_init(&h), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(fa_sha256_update(&h, test4, 64), 0);
    assert_int_equal(fa_sha256_final(&h, d), 0);
    assert_digest(d, KAT_TEST4);

    /* byte by byte across the block boundary; empty updates change nothing */
    assert_int_equal(fa_sha256_init(&h), 0);
    for (size_t i = 0; i < strlen(two_block); i++) {
        assert_int_equal(fa_sha256_update(&h, two_block + i, 1), 0);
        assert_int_equal(fa_sha256_update(&h, NULL, 0), 0);
    }
    assert_int_equal(fa_sha256_final(&h, d), 0);
    assert_digest(d, KAT_TWO);
    fa_sha256_free(&h);
    fa_sha256_free(&h); /* idempotent */
    fa_sha256_free(NULL);
}

static void test_misuse(void **state)
{
    fa_sha256_ctx h = {0};
    uint8_t d[32];

    assert_int_equal(fa_sha256(NULL, abc, 3), FA_ERR_INVAL);
    assert_int_equal(fa_sha256(d, NULL, 1), FA_ERR_INVAL);
    assert_int_equal(fa_sha256_init(NULL), FA_ERR_INVAL);
    assert_int_equal(fa_sha256_update(&h, abc, 3), FA_ERR_STATE); /* never init'ed */
    assert_int_equal(fa_sha256_final(&h, d), FA_ERR_STATE);

    assert_int_equal(fa_sha256_init(&h), 0);
    assert_int_equal(fa_sha256_update(&h, abc, 3), 0);
    assert_int_equal(fa_sha256_final(&h, d), 0);
    assert_digest(d, KAT_ABC);
    /* after final: an update or a second final is refused, d untouched */
    memset(d, 0xaa, sizeof(d));
    assert_int_equal(fa_sha256_update(&h, abc, 3), FA_ERR_STATE);
    assert_int_equal(fa_sha256_final(&h, d), FA_ERR_STATE);
    for (int i = 0; i < 32; i++)
        assert_int_equal(d[i], 0xaa);

    /* a NULL buffer with a length poisons the hash */
    assert_int_equal(fa_sha256_init(&h), 0);
    assert_int_equal(fa_sha256_update(&h, NULL, 5), FA_ERR_INVAL);
    assert_int_equal(fa_sha256_update(&h, abc, 3), FA_ERR_INVAL);
    assert_int_equal(fa_sha256_final(&h, d), FA_ERR_INVAL);
    assert_int_equal(d[0], 0xaa);
    fa_sha256_free(&h);
}

/* Each OpenSSL failure comes back as FA_ERR_CRYPTO and leaves the output as
 * it was: never a digest of zeros. */
static void test_library_failures(void **state)
{
    fa_sha256_ctx h = {0};
    uint8_t d[32];

    for (int at = 1; at <= 4; at++) {
        memset(d, 0xaa, sizeof(d));
        fail_at = at;
        if (at == 4) {
            assert_int_equal(fa_sha256(d, abc, 3), FA_ERR_CRYPTO);
        } else {
            int rc = fa_sha256_init(&h);
            assert_int_equal(rc, at == 1 ? FA_ERR_CRYPTO : 0);
            rc = fa_sha256_update(&h, abc, 3);
            assert_int_equal(rc, at <= 2 ? FA_ERR_CRYPTO : 0);
            /* sticky: a later good update does not clear it */
            fail_at = at == 3 ? 3 : 0;
            assert_int_equal(fa_sha256_update(&h, abc, 3), at <= 2 ? FA_ERR_CRYPTO : 0);
            assert_int_equal(fa_sha256_final(&h, d), FA_ERR_CRYPTO);
        }
        for (int i = 0; i < 32; i++)
            assert_int_equal(d[i], 0xaa);
        fail_at = 0;
        /* and the next hash works again */
        assert_int_equal(fa_sha256_init(&h), 0);
        assert_int_equal(fa_sha256_update(&h, abc, 3), 0);
        assert_int_equal(fa_sha256_final(&h, d), 0);
        assert_digest(d, KAT_ABC);
    }
    fa_sha256_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oneshot_kat),
        cmocka_unit_test(test_incremental_kat),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_library_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
