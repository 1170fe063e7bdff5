/* CRC-32C: the published check values, the CPU's instruction against the
 * table at every length and alignment, and incremental use. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/fa_crc32c.h"

static void test_check_values(void **state)
{
    static const uint8_t zeros[32];
    uint8_t ones[32], inc[32], dec[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++) {
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    /* "123456789" (the CRC catalogue's check), and RFC 3720 B.4's vectors */
    assert_int_equal(fa_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(fa_crc32c_portable(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(fa_crc32c(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(fa_crc32c(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(fa_crc32c(0, inc, 32), 0x46DD794Eu);
    assert_int_equal(fa_crc32c(0, dec, 32), 0x113FDB5Cu);
    assert_int_equal(fa_crc32c(0, NULL, 0), 0);
}

static void test_instruction_is_the_table(void **state)
{
    enum { N = 4096 };
    uint8_t *buf = malloc(N + 8);
    uint32_t x = 12345;
    assert_non_null(buf);
    for (size_t i = 0; i < N + 8; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 300; len++)
            assert_int_equal(fa_crc32c(0, buf + off, len), fa_crc32c_portable(0, buf + off, len));
    assert_int_equal(fa_crc32c(7, buf + 3, N), fa_crc32c_portable(7, buf + 3, N));
    free(buf);
}

static void test_incremental(void **state)
{
    const char *s = "the sum of the regions' updates, and nothing else";
    size_t n = strlen(s);
    uint32_t whole = fa_crc32c(0, s, n);
    for (size_t cut = 0; cut <= n; cut++) {
        assert_int_equal(fa_crc32c(fa_crc32c(0, s, cut), s + cut, n - cut), whole);
        assert_int_equal(fa_crc32c_portable(fa_crc32c_portable(0, s, cut), s + cut, n - cut),
                         whole);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_values),
        cmocka_unit_test(test_instruction_is_the_table),
        cmocka_unit_test(test_incremental),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
