/* The storage gate: back-off doubling to its maximum, one log line per
 * back-off, reopening. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "aggregator/storage_gate.h"

static void test_backoff(void **state)
{
    fa_storage_gate g;
    uint64_t now = 1000;
    int logged = 0;
    (void)state;

    fa_storage_gate_init(&g);
    assert_false(g.blocked);
    assert_false(fa_storage_gate_due(&g, now));
    assert_true(fa_storage_gate_fail(&g, now, "disk full"));
    assert_true(g.blocked);
    assert_int_equal(g.backoff_ms, 1000);
    assert_false(fa_storage_gate_due(&g, now + 999));
    assert_true(fa_storage_gate_due(&g, now + 1000));
    /* Each later failure doubles the back-off up to 60 s; only changes log. */
    for (int i = 0; i < 20; i++) {
        now = g.next_ms;
        logged += fa_storage_gate_fail(&g, now, "disk full");
    }
    assert_int_equal(g.backoff_ms, FA_STORAGE_BACKOFF_MAX_MS);
    assert_int_equal(logged, 6); /* 2, 4, 8, 16, 32, 60 s */
    assert_int_equal(g.failures, 21);
    assert_string_equal(g.reason, "disk full");
    /* Space came back: open, back-off reset, the total kept. */
    assert_true(fa_storage_gate_ok(&g));
    assert_false(g.blocked);
    assert_int_equal(g.total, 21);
    assert_false(fa_storage_gate_ok(&g));
    assert_true(fa_storage_gate_fail(&g, now, "I/O error"));
    assert_int_equal(g.backoff_ms, 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_backoff)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
