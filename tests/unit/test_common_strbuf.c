/* Unit tests of common/fa_strbuf.c: appends, formatting past the small
 * stack buffer, and growth that keeps every byte. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/fa_strbuf.h"

static void test_empty_has_no_data(void **state)
{
    fa_strbuf b = {0};
    (void)state;
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    fa_strbuf_put(&b, "", 0);
    assert_non_null(b.data); /* an empty append still gives a string */
    assert_string_equal(b.data, "");
    free(b.data);
}

static void test_put_puts_printf(void **state)
{
    fa_strbuf b = {0};
    (void)state;
    fa_strbuf_puts(&b, "round ");
    fa_strbuf_printf(&b, "%d of %s", 3, "ten");
    fa_strbuf_put(&b, "!?", 1);
    assert_string_equal(b.data, "round 3 of ten!");
    assert_int_equal(b.len, strlen("round 3 of ten!"));
    assert_false(b.oom);
    free(b.data);
}

static void test_long_printf_and_growth(void **state)
{
    fa_strbuf b = {0};
    char *big = malloc(5000);
    (void)state;
    memset(big, 'x', 4999);
    big[4999] = '\0';
    for (int i = 0; i < 100; i++)
        fa_strbuf_printf(&b, "[%d:%s]", i, i == 50 ? big : "");
    assert_false(b.oom);
    assert_int_equal(strlen(b.data), b.len);
    assert_non_null(strstr(b.data, "[49:][50:xxxx"));
    assert_non_null(strstr(b.data, "xxxx][51:]"));
    assert_true(b.cap > b.len);
    free(big);
    free(b.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_has_no_data),
        cmocka_unit_test(test_put_puts_printf),
        cmocka_unit_test(test_long_printf_and_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
