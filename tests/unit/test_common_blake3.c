/* BLAKE3: the published test vectors' inputs (byte i is i mod 251) at
 * lengths across the 1 KiB chunks and the 64 KiB runs of the incremental
 * context, hashed whole and fed in pieces of every kind; the expected
 * hashes are those of an independent implementation (the b3sum tool,
 * BLAKE3's Rust crate), the first three as in the BLAKE3 repository's
 * test_vectors.json.  And the context's errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_blake3.h"
#include "common/fa_err.h"

static const struct {
    size_t len;
    const char *hex;
} vectors[] = {
    {0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
    {1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
    {1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
    {1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
    {1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444"},
    {2048, "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a"},
    {2049, "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030"},
    {3072, "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2"},
    {3073, "7124b49501012f81cc7f11ca069ec9226cecb8a2c850cfe644e327d22d3e1cd3"},
    {4096, "015094013f57a5277b59d8475c0501042c0b642e531b0a1c8f58d2163229e969"},
    {4097, "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995"},
    {8192, "aae792484c8efe4f19e2ca7d371d8c467ffb10748d8a5a1ae579948f718a2a63"},
    {8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b"},
    {16384, "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4"},
    {31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47"},
    {65535, "de7d0f4c044c56f56e0c5f7ab247be9491c4520e8688f0f0d25406f46fdfbd03"},
    {65536, "68d647e619a930e7b1082f74f334b0c65a315725569bdc123f0ee11881717bfe"},
    {65537, "7c99f9840a73dfcb6e5bfe4ff6d1558acab7e015640790c26411818bdbe17eca"},
    {102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"},
    {1048583, "89541f1047f7a56806fe16efda4c2cdc45f141c838e413019f0124189fa55232"},
};
#define NV (sizeof(vectors) / sizeof(vectors[0]))
#define MAXLEN 1048583

static uint8_t *pattern(void)
{
    uint8_t *p = malloc(MAXLEN);
    assert_non_null(p);
    for (size_t i = 0; i < MAXLEN; i++)
        p[i] = (uint8_t)(i % 251);
    return p;
}

static void assert_hex(const uint8_t d[FA_BLAKE3_BYTES], const char *hex, size_t len)
{
    char got[2 * FA_BLAKE3_BYTES + 1];
    for (size_t i = 0; i < FA_BLAKE3_BYTES; i++)
        snprintf(got + 2 * i, 3, "%02x", d[i]);
    if (strcmp(got, hex) != 0)
        fail_msg("length %zu: BLAKE3 %s, expected %s", len, got, hex);
}

static void test_one_shot(void **state)
{
    uint8_t *p = pattern(), d[FA_BLAKE3_BYTES];
    for (size_t v = 0; v < NV; v++) {
        assert_int_equal(fa_blake3(d, vectors[v].len ? p : NULL, vectors[v].len), 0);
        assert_hex(d, vectors[v].hex, vectors[v].len);
    }
    assert_int_equal(fa_blake3(NULL, p, 1), FA_ERR_INVAL);
    assert_int_equal(fa_blake3(d, NULL, 1), FA_ERR_INVAL);
    free(p);
}

/* Pieces of a fixed size (1 byte to twice a run), and of pseudo-random
 * sizes that mix small pieces with long ones, so that long pieces arrive
 * both with nothing held and with a part run held. */
static void test_incremental(void **state)
{
    static const size_t sizes[] = {1,    7,    1000, 1024,          4864,           9728,
                                   65535, 65536, 65537, 2 * FA_BLAKE3_RUN, 3 * FA_BLAKE3_RUN + 5};
    uint8_t *p = pattern(), d[FA_BLAKE3_BYTES];
    fa_blake3_ctx h = {0};
    uint32_t x = 2463534242u;

    for (size_t v = 0; v < NV; v++) {
        size_t len = vectors[v].len;
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            if (sizes[s] == 1 && len > 70000)
                continue; /* a million one-byte updates add nothing */
            assert_int_equal(fa_blake3_init(&h), 0);
            for (size_t o = 0; o < len; o += sizes[s])
                assert_int_equal(
                    fa_blake3_update(&h, p + o, len - o < sizes[s] ? len - o : sizes[s]), 0);
            assert_int_equal(fa_blake3_final(&h, d), 0);
            assert_hex(d, vectors[v].hex, len);
        }
        for (int rep = 0; rep < 4; rep++) {
            assert_int_equal(fa_blake3_init(&h), 0);
            for (size_t o = 0; o < len;) {
                size_t k;
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                k = x % 4 == 0 ? x % (3 * FA_BLAKE3_RUN) : x % 5000;
                if (k > len - o)
                    k = len - o;
                assert_int_equal(fa_blake3_update(&h, p + o, k), 0);
                o += k;
            }
            assert_int_equal(fa_blake3_final(&h, d), 0);
            assert_hex(d, vectors[v].hex, len);
        }
    }
    fa_blake3_free(&h);
    free(p);
}

static void test_context_errors(void **state)
{
    fa_blake3_ctx h = {0};
    uint8_t d[FA_BLAKE3_BYTES];
    assert_int_equal(fa_blake3_update(&h, "a", 1), FA_ERR_STATE); /* before init */
    assert_int_equal(fa_blake3_final(&h, d), FA_ERR_STATE);
    assert_int_equal(fa_blake3_init(NULL), FA_ERR_INVAL);
    assert_int_equal(fa_blake3_init(&h), 0);
    assert_int_equal(fa_blake3_update(&h, NULL, 0), 0);
    assert_int_equal(fa_blake3_update(&h, NULL, 1), FA_ERR_INVAL);
    assert_int_equal(fa_blake3_update(&h, "a", 1), FA_ERR_INVAL); /* sticky */
    assert_int_equal(fa_blake3_final(&h, d), FA_ERR_INVAL);
    assert_int_equal(fa_blake3_init(&h), 0); /* init starts again */
    assert_int_equal(fa_blake3_final(&h, d), 0);
    assert_hex(d, vectors[0].hex, 0);
    assert_int_equal(fa_blake3_update(&h, "a", 1), FA_ERR_STATE); /* ended */
    assert_int_equal(fa_blake3_final(&h, d), FA_ERR_STATE);
    fa_blake3_free(&h);
    fa_blake3_free(&h);
    assert_null(h.st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_shot),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_context_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
