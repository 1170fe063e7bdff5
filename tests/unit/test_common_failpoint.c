/* Unit tests of common/fa_failpoint: the test switches work in a build with
 * test hooks (cmake -DFEDAGG_TEST_HOOKS=ON, as `make check` builds), and a
 * build without them (a release; `make sanitize` builds one) has none: the
 * variables do nothing, the daemons say so at start-up, and the code of the
 * switches is not in the daemons at all.  Each build runs the half that is
 * its own and checks the other half's opposite, so that every assertion
 * can fail in one of the two builds CI makes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fa_failpoint.h"
#include "common/fa_file.h"

static void set_all_switches(void)
{
    setenv("FEDAGG_FAILPOINTS", "worker-before-masked=exit,fed-serve-other-model=eu-west", 1);
    setenv("FEDAGG_DEBUG_DUMP_DIR", "/tmp", 1);
    setenv("FEDAGG_TEST_SIGTERM_AT_STEP", "3", 1);
}

static int unset_all_switches(void **state)
{
    (void)state;
    unsetenv("FEDAGG_FAILPOINTS");
    unsetenv("FEDAGG_DEBUG_DUMP_DIR");
    unsetenv("FEDAGG_TEST_SIGTERM_AT_STEP");
    return 0;
}

/* fa_failpoint_value: names matched whole, values after '=', read at
 * every call (a test may change the variable between cases). */
static void test_values(void **state)
{
    char buf[16];
    (void)state;

    setenv("FEDAGG_FAILPOINTS", "a,bb=1,c=exit,long=0123456789abcdefXYZ", 1);
#ifdef FA_TEST_HOOKS
    assert_string_equal(fa_failpoint_value("a", buf, sizeof(buf)), "");
    assert_string_equal(fa_failpoint_value("bb", buf, sizeof(buf)), "1");
    assert_string_equal(fa_failpoint_value("c", buf, sizeof(buf)), "exit");
    assert_string_equal(fa_failpoint_value("long", buf, sizeof(buf)), "0123456789abcde");
    assert_null(fa_failpoint_value("b", buf, sizeof(buf)));
    assert_null(fa_failpoint_value("bbb", buf, sizeof(buf)));
    assert_null(fa_failpoint_value("a", buf, 0));
    setenv("FEDAGG_FAILPOINTS", "bb=2", 1);
    assert_string_equal(fa_failpoint_value("bb", buf, sizeof(buf)), "2");
    assert_null(fa_failpoint_value("a", buf, sizeof(buf)));
#else
    assert_null(fa_failpoint_value("a", buf, sizeof(buf)));
    assert_null(fa_failpoint_value("bb", buf, sizeof(buf)));
    assert_null(fa_failpoint_value("c", buf, sizeof(buf)));
#endif
}

/* fa_failpoint with `exit`: the process ends with 137 where the hooks are
 * compiled in, and goes on where they are not. */
static void test_exit_action(void **state)
{
    int status = 0;
    pid_t pid;
    (void)state;

    setenv("FEDAGG_FAILPOINTS", "other,here=exit", 1);
    fa_failpoint("not-named"); /* never stops */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fa_failpoint("here");
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), FA_TEST_HOOKS_COMPILED ? 137 : 0);
}

/* The start-up warning: one per switch set, only without the hooks. */
static void test_warn_env(void **state)
{
    (void)state;
    unset_all_switches(NULL);
    assert_int_equal(fa_test_hooks_warn_env("test"), 0);
    set_all_switches();
    assert_int_equal(fa_test_hooks_warn_env("test"), FA_TEST_HOOKS_COMPILED ? 0 : 3);
}

/* The daemons, as built: with every switch set, one started with a config
 * that does not exist warns of each (a release) or of none (a test build),
 * and --version says which it is. */
static void test_daemons_say_so(void **state)
{
    const char *bin = getenv("FA_BIN");
    static const char *const daemons[] = {"fedagg-aggregator", "fedagg-worker"};
    (void)state;

    if (!bin)
        skip();
    set_all_switches();
    for (size_t i = 0; i < 2; i++) {
        char cmd[4400], out[8192];
        size_t n;
        FILE *p;
        snprintf(cmd, sizeof(cmd), "'%s/%s' --version 2>&1; '%s/%s' --config /nonexistent/x 2>&1",
                 bin, daemons[i], bin, daemons[i]);
        p = popen(cmd, "r");
        assert_non_null(p);
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = '\0';
        pclose(p);
        if (FA_TEST_HOOKS_COMPILED) {
            assert_non_null(strstr(out, "test hooks compiled in"));
            assert_null(strstr(out, "test switch ignored"));
        } else {
            assert_null(strstr(out, "test hooks compiled in"));
            assert_non_null(strstr(out, "variable=FEDAGG_FAILPOINTS"));
            assert_non_null(strstr(out, "variable=FEDAGG_DEBUG_DUMP_DIR"));
            assert_non_null(strstr(out, "variable=FEDAGG_TEST_SIGTERM_AT_STEP"));
        }
    }
}

/* The code of the switches is in a test build's daemons and not in a
 * release's: their log messages are looked for in the executables. */
static void test_code_absent_from_release(void **state)
{
    const char *bin = getenv("FA_BIN");
    static const struct {
        const char *daemon, *text;
    } marks[] = {
        {"fedagg-aggregator", "failpoint reached"},
        {"fedagg-aggregator", "TEST SWITCH: serving a region another model"},
        {"fedagg-aggregator", "sum-r%"},
        {"fedagg-worker", "failpoint reached"},
        {"fedagg-worker", "debug dump of the quantised update written"},
        {"fedagg-worker", "debug dump of the trained delta written"},
        {"fedagg-worker", "TEST SWITCH: damaged the held model"},
    };
    (void)state;

    if (!bin)
        skip();
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
        char path[4200];
        uint8_t *data = NULL;
        size_t len = 0;
        fa_error err;
        snprintf(path, sizeof(path), "%s/%s", bin, marks[i].daemon);
        assert_int_equal(fa_file_read_all(path, &data, &len, (size_t)1 << 30, &err), 0);
        if ((memmem(data, len, marks[i].text, strlen(marks[i].text)) != NULL) !=
            FA_TEST_HOOKS_COMPILED)
            fail_msg("%s: '%s' %s", marks[i].daemon, marks[i].text,
                     FA_TEST_HOOKS_COMPILED ? "missing from a build with test hooks"
                                            : "present in a build without test hooks");
        free(data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_values, unset_all_switches),
        cmocka_unit_test_teardown(test_exit_action, unset_all_switches),
        cmocka_unit_test_teardown(test_warn_env, unset_all_switches),
        cmocka_unit_test_teardown(test_daemons_say_so, unset_all_switches),
        cmocka_unit_test_teardown(test_code_absent_from_release, unset_all_switches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
