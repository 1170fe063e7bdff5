/* test_common_hkdf.c - HKDF-SHA256 against RFC 5869 appendix A, and its
 * refusals (which leave the output untouched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/fa_err.h"
#include "common/fa_hex.h"
#include "common/fa_hkdf.h"

/* RFC 5869 A.1, test case 1. */
static void test_rfc5869_case1(void **state)
{
    uint8_t ikm[22], salt[13], info[10], okm[42], want[42];
    memset(ikm, 0x0b, sizeof(ikm));
    for (int i = 0; i < 13; i++)
        salt[i] = (uint8_t)i;
    for (int i = 0; i < 10; i++)
        info[i] = (uint8_t)(0xf0 + i);
    assert_int_equal(
        fa_hex_decode(want, 42,
                      "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
                      "34007208d5b887185865",
                      84),
        0);
    assert_int_equal(fa_hkdf_sha256(okm, 42, salt, 13, ikm, 22, info, 10), 0);
    assert_memory_equal(okm, want, 42);
}

/* RFC 5869 A.3: no salt, no info. */
static void test_rfc5869_case3(void **state)
{
    uint8_t ikm[22], okm[42], want[42];
    memset(ikm, 0x0b, sizeof(ikm));
    assert_int_equal(
        fa_hex_decode(want, 42,
                      "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
                      "9d201395faa4b61a96c8",
                      84),
        0);
    assert_int_equal(fa_hkdf_sha256(okm, 42, NULL, 0, ikm, 22, NULL, 0), 0);
    assert_memory_equal(okm, want, 42);
}

static void test_refusals_leave_output(void **state)
{
    uint8_t ikm[16] = {1}, out[32], canary[32];
    memset(canary, 0x5a, sizeof(canary));
    memcpy(out, canary, sizeof(out));
    assert_int_equal(fa_hkdf_sha256(out, 0, NULL, 0, ikm, 16, NULL, 0), FA_ERR_INVAL);
    assert_int_equal(fa_hkdf_sha256(NULL, 32, NULL, 0, ikm, 16, NULL, 0), FA_ERR_INVAL);
    assert_int_equal(fa_hkdf_sha256(out, FA_HKDF_SHA256_MAX_OUT + 1, NULL, 0, ikm, 16, NULL, 0),
                     FA_ERR_INVAL);
    assert_int_equal(fa_hkdf_sha256(out, 32, NULL, 0, NULL, 16, NULL, 0), FA_ERR_INVAL);
    assert_int_equal(fa_hkdf_sha256(out, 32, NULL, 0, ikm, 16, NULL, 3), FA_ERR_INVAL);
    assert_memory_equal(out, canary, sizeof(out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc5869_case1),
        cmocka_unit_test(test_rfc5869_case3),
        cmocka_unit_test(test_refusals_leave_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
