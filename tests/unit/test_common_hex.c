/* Unit tests of common/fa_hex and common/fa_endian: round trips, lowercase
 * out, either case in, refusals that leave the output untouched. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/fa_endian.h"
#include "common/fa_err.h"
#include "common/fa_hex.h"

static void test_encode(void **state)
{
    const uint8_t b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff};
    char hex[FA_HEX_LEN(sizeof(b))];

    assert_ptr_equal(fa_hex_encode(hex, sizeof(hex), b, sizeof(b)), hex);
    assert_string_equal(hex, "00017f80abcdefff");
    assert_string_equal(fa_hex_encode(hex, sizeof(hex), b, 0), "");
    /* too small: whole bytes only, always terminated (as snprintf) */
    assert_string_equal(fa_hex_encode(hex, 6, b, sizeof(b)), "0001");
    assert_string_equal(fa_hex_encode(hex, 5, b, sizeof(b)), "0001");
    assert_string_equal(fa_hex_encode(hex, 2, b, sizeof(b)), "");
    hex[0] = 'x';
    fa_hex_encode(hex, 0, b, sizeof(b));
    assert_int_equal(hex[0], 'x');
}

static void test_round_trip(void **state)
{
    uint8_t all[256], back[256];
    char hex[FA_HEX_LEN(256)];

    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    fa_hex_encode(hex, sizeof(hex), all, sizeof(all));
    assert_int_equal(strlen(hex), 512);
    assert_int_equal(fa_hex_decode(back, sizeof(back), hex, 512), 0);
    assert_memory_equal(back, all, sizeof(all));
    /* upper case is read too */
    assert_int_equal(fa_hex_decode(back, 4, "DEADbeef", 8), 0);
    assert_int_equal(back[0], 0xde);
    assert_int_equal(back[3], 0xef);
    assert_int_equal(fa_hex_decode(back, 0, "", 0), 0);
}

static void test_refusals(void **state)
{
    uint8_t out[4];
    static const char *bad[] = {"0g00aaaa", "00 0aaaa", "0x00aaaa", "-1000000", "0000aa\n0"};

    memset(out, 0x5a, sizeof(out));
    assert_int_equal(fa_hex_decode(out, 4, "0000aa", 6), FA_ERR_PARSE);    /* short */
    assert_int_equal(fa_hex_decode(out, 4, "0000aaaa0", 9), FA_ERR_PARSE); /* odd, long */
    assert_int_equal(fa_hex_decode(out, 4, "0000aaaa00", 10), FA_ERR_PARSE);
    assert_int_equal(fa_hex_decode(out, 3, "0000aaa", 7), FA_ERR_PARSE);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(fa_hex_decode(out, 4, bad[i], 8), FA_ERR_PARSE);
    /* an embedded NUL is not a digit */
    assert_int_equal(fa_hex_decode(out, 4, "0000\0aaa", 8), FA_ERR_PARSE);
    for (int i = 0; i < 4; i++)
        assert_int_equal(out[i], 0x5a);
    assert_int_equal(fa_hex_digit('f'), 15);
    assert_int_equal(fa_hex_digit('F'), 15);
    assert_int_equal(fa_hex_digit('g'), -1);
    assert_int_equal(fa_hex_digit(0xe9), -1);
}

static void test_endian(void **state)
{
    uint8_t b[8];

    fa_le_put_u16(b, 0x0102);
    assert_memory_equal(b, "\x02\x01", 2);
    assert_int_equal(fa_le_get_u16(b), 0x0102);
    fa_le_put_u32(b, 0x01020304u);
    assert_memory_equal(b, "\x04\x03\x02\x01", 4);
    assert_int_equal(fa_le_get_u32(b), 0x01020304u);
    fa_le_put_u64(b, 0x0102030405060708ull);
    assert_memory_equal(b, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
    assert_true(fa_le_get_u64(b) == 0x0102030405060708ull);
    /* the high bits survive (no sign extension through int) */
    fa_le_put_u64(b, UINT64_MAX - 1);
    assert_true(fa_le_get_u64(b) == UINT64_MAX - 1);
    assert_true(fa_le_get_u32(b + 4) == UINT32_MAX);
    assert_int_equal(fa_le_get_u16(b), 0xfffe);
    /* unaligned */
    uint8_t u[9] = {0};
    fa_le_put_u64(u + 1, 0x8000000000000001ull);
    assert_true(fa_le_get_u64(u + 1) == 0x8000000000000001ull);
    assert_int_equal(u[0], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_endian),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
