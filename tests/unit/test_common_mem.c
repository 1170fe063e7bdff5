/* fa_copy_cold: every byte copied, none outside the destination touched,
 * at every alignment of both ends and lengths around each of its paths
 * (the short copy, the head to a 16-byte boundary, 64-byte blocks, the
 * tail). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/fa_mem.h"

#define GUARD 64

static void test_copy_cold_exact(void **state)
{
    static const size_t lens[] = {0,   1,   15,  16,  17,  63,   64,   65,    255,
                                  256, 257, 319, 320, 321, 1000, 4097, 65549, 1 << 20};
    const size_t max = (size_t)1 << 20;
    uint8_t *src = malloc(max + 3 * GUARD), *dst = malloc(max + 3 * GUARD);
    (void)state;

    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < max + 3 * GUARD; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 8) * 7 + 1);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (size_t so = 0; so < 17; so++) {
            for (size_t dof = 0; dof < 17; dof++) {
                const size_t n = lens[l], end = GUARD + dof + n;
                if (n >= 4096 && (so % 8 || dof % 4)) /* the long ones at a few alignments */
                    continue;
                memset(dst, 0xA5, end + GUARD);
                fa_copy_cold(dst + GUARD + dof, src + GUARD + so, n);
                if (n > 0)
                    assert_memory_equal(dst + GUARD + dof, src + GUARD + so, n);
                for (size_t g = 0; g < GUARD + dof; g++)
                    assert_int_equal(dst[g], 0xA5);
                for (size_t g = end; g < end + GUARD; g++)
                    assert_int_equal(dst[g], 0xA5);
            }
        }
    }
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_cold_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
