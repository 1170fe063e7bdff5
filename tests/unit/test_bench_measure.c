/* Unit tests of benchmarks/measure.c, the fedagg-bench subcommands' clocks
 * and statistics (compiled in here: it belongs to no library). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "benchmarks/measure.c"

static void test_median(void **state)
{
    double odd[] = {3, 1, 2}, even[] = {4, 1, 3, 2}, one[] = {7};
    double holes[] = {NAN, 5, INFINITY, 1, -INFINITY, 3};
    double none[] = {NAN, INFINITY};

    assert_true(fa_bench_median(odd, 3) == 2);
    assert_true(fa_bench_median(even, 4) == 2.5);
    assert_true(fa_bench_median(one, 1) == 7);
    assert_true(fa_bench_median(holes, 6) == 3); /* the finite values only */
    assert_true(isnan(fa_bench_median(none, 2)));
    assert_true(isnan(fa_bench_median(odd, 0)));
    /* the input is not reordered */
    assert_true(odd[0] == 3 && odd[1] == 1 && odd[2] == 2);
}

static void test_cmp_and_clocks(void **state)
{
    double v[] = {2.5, -1, 0, 2.5, 1e300, -1e-300};
    qsort(v, 6, sizeof(double), fa_bench_cmp_double);
    for (int i = 1; i < 6; i++)
        assert_true(v[i - 1] <= v[i]);
    double a = 1, b = 2;
    assert_int_equal(fa_bench_cmp_double(&a, &b), -1);
    assert_int_equal(fa_bench_cmp_double(&b, &a), 1);
    assert_int_equal(fa_bench_cmp_double(&a, &a), 0);

    double t0 = fa_bench_now_s(), c0 = fa_bench_thread_cpu_s();
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++)
        x += i;
    assert_true(fa_bench_now_s() > t0);
    assert_true(fa_bench_thread_cpu_s() > c0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_cmp_and_clocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
