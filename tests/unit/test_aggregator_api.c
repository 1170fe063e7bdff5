/* Unit tests of the API's strict numbers and of what its error messages
 * let a peer read (aggregator/api.h); the paths themselves are probed on a
 * running aggregator by tests/integration/it_fed_routes.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "aggregator/api.h"

static int num(const char *s, uint64_t max, uint64_t *v)
{
    return fa_api_parse_number(s, strlen(s), max, v);
}

static void test_numbers(void **state)
{
    static const char *const bad[] = {"",
                                      "-1",
                                      "+5",
                                      " 1",
                                      "1 ",
                                      "00",
                                      "01",
                                      "0x1",
                                      "1e3",
                                      "1.0",
                                      "٣",
                                      "18446744073709551616",
                                      "99999999999999999999999"};
    uint64_t v = 7;
    (void)state;

    assert_int_equal(num("0", 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(num("10", 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(num("9007199254740991", FA_API_MAX_NUMBER, &v), 0);
    assert_int_equal(v, FA_API_MAX_NUMBER);
    assert_int_equal(num("18446744073709551615", UINT64_MAX, &v), 0);
    assert_int_equal(v, UINT64_MAX);
    v = 7;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (num(bad[i], UINT64_MAX, &v) != FA_ERR_PARSE)
            fail_msg("'%s' taken as a number", bad[i]);
    assert_int_equal(v, 7); /* untouched */
    assert_int_equal(num("11", 10, &v), FA_ERR_RANGE);
    assert_int_equal(num("9007199254740992", FA_API_MAX_NUMBER, &v), FA_ERR_RANGE);
    assert_int_equal(num("18446744073709551615", FA_API_MAX_NUMBER, &v), FA_ERR_RANGE);
    /* only the length given is read */
    assert_int_equal(fa_api_parse_number("12/0/advertise", 2, 100, &v), 0);
    assert_int_equal(v, 12);
}

static void test_public_message(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"audit: read /var/lib/fedagg/audit.log: Success", "audit: read <path>: Success"},
        /* a path with a space leaks its tail, never its beginning */
        {"cannot open '/srv/x y/state' (No such file)",
         "cannot open '<path> y/state' (No such file)"},
        {"storage /data has 1.0 MiB free", "storage <path> has 1.0 MiB free"},
        {"file=/a/b,c", "file=<path>,c"},
        {"use /v1/models/latest or a version number", "use /v1/models/latest or a version number"},
        {"a/b and x / y", "a/b and x / y"},
        {"", ""},
    };
    char out[128];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fa_api_public_message(out, sizeof(out), cases[i].in);
        assert_string_equal(out, cases[i].out);
    }
    /* truncated, always terminated */
    fa_api_public_message(out, 8, "storage /data/is/long has no room");
    assert_string_equal(out, "storage");
    fa_api_public_message(out, 12, "storage /data/is/long has no room");
    assert_string_equal(out, "storage <pa");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_public_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
