/* skip_status.c - skips that show.  Linked into every unit test with
 * -Wl,--wrap=_skip,--wrap=_cmocka_run_group_tests (tests/CMakeLists.txt):
 * a test that cannot run here (no GPU, no interpreter with torch, a tool
 * not installed) calls cmocka's skip(); when any test of the binary skipped
 * and none failed, the binary exits 77, which ctest reports as skipped
 * (SKIP_RETURN_CODE), never as passed.  A failure still fails. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

void __real__skip(const char *const file, const int line);
int __real__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
void __wrap__skip(const char *const file, const int line);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);

static int skipped;

void __wrap__skip(const char *const file, const int line)
{
    skipped++;
    fprintf(stderr, "SKIP: %s:%d\n", file, line);
    __real__skip(file, line);
}

int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown)
{
    int failed = __real__cmocka_run_group_tests(group_name, tests, num_tests, group_setup,
                                                group_teardown);
    if (failed == 0 && skipped > 0) {
        fprintf(stderr,
                "%d test(s) skipped, the others passed: the binary reports itself skipped "
                "(exit 77)\n",
                skipped);
        return 77;
    }
    return failed;
}
