/* Unit tests of worker/external_trainer: a real command (tests/worker/
 * fake_trainer.py, Python standard library only) trains one "round"; then
 * every failure mode: non-zero exit, timeout (the process group dies),
 * missing, malformed or mismatched output, bad metadata, NaN. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.pb-c.h"
#include "model/mlp.h"
#include "worker/external_trainer.h"

static char tmpdir[256];
static char script[1024];
static fa_mlp_layout layout;
static float *global, *delta;

static int have_python(void)
{
    const char *path = getenv("PATH");
    char buf[1024];
    if (!path)
        return 0;
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(buf, sizeof(buf), "%.*s/python3", (int)len, path);
        if (access(buf, X_OK) == 0)
            return 1;
        path += len + (end ? 1 : 0);
    }
    return 0;
}

static int setup(void **state)
{
    const char *src = getenv("FA_SRC");
    fa_mlp_config mc;
    const uint32_t hidden[1] = {8};

    if (src) {
        snprintf(script, sizeof(script), "%s/tests/worker/fake_trainer.py", src);
    } else {
        /* not under ctest: the script sits next to this source file */
        const char *cut = strstr(__FILE__, "tests/unit/");
        snprintf(script, sizeof(script), "%.*stests/worker/fake_trainer.py",
                 cut ? (int)(cut - __FILE__) : 0, __FILE__);
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_external.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    if (fa_mlp_config_make(&mc, 20, hidden, 1, 3, NULL) != 0 ||
        fa_mlp_layout_init(&layout, &mc, NULL) != 0)
        return -1;
    global = malloc(layout.n_params * sizeof(float));
    delta = malloc(layout.n_params * sizeof(float));
    fa_mlp_init_he(&layout, global, 5);
    for (size_t i = 0; i < layout.n_params; i++)
        global[i] += 0.01f * (float)(i % 7); /* non-zero biases too */
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    free(global);
    free(delta);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs fake_trainer.py MODE with a timeout; delta is pre-filled with 7. */
static int run_mode(const char *mode, uint32_t timeout_s, fa_external_result *res, fa_error *err,
                    const char *const *env, size_t n_env)
{
    const char *argv[] = {"python3", script, mode, "{input}", "{output}"};
    fa_external_opts o;
    char scratch[300];

    fa_external_opts_default(&o);
    snprintf(scratch, sizeof(scratch), "%s/scratch", tmpdir);
    o.argv = argv;
    o.argc = 5;
    o.env = env;
    o.n_env = n_env;
    o.timeout_s = timeout_s;
    o.kill_grace_ms = 500;
    o.scratch_dir = scratch;
    o.workdir = tmpdir;
    o.round = 17;
    o.region = "eu-west";
    for (size_t i = 0; i < layout.n_params; i++)
        delta[i] = 7.0f;
    fa_error_clear(err);
    return fa_external_round(&o, &layout, global, delta, res, err);
}

static void assert_delta_untouched(void)
{
    for (size_t i = 0; i < layout.n_params; i++)
        assert_true(delta[i] == 7.0f);
}

static void test_ok_round(void **state)
{
    const char *env[] = {"FAKE_REQUIRE_ENV=1", "FAKE_TOKEN=s3cret=ok", "FAKE_EXAMPLES=4321"};
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    assert_int_equal(run_mode("ok", 60, &res, &err, env, 3), 0);
    assert_int_equal(res.num_examples, 4321);
    assert_int_equal(res.exit_status, 0);
    /* w' = 0.5 w + 0.25, so delta = 0.25 - 0.5 w */
    for (size_t i = 0; i < layout.n_params; i++)
        if (fabsf(delta[i] - (0.25f - 0.5f * global[i])) > 1e-6f)
            fail_msg("delta[%zu] = %g, expected %g", i, delta[i], 0.25f - 0.5f * global[i]);

    /* The next round that writes nothing must not pick up this output. */
    assert_int_equal(run_mode("nooutput", 60, &res, &err, NULL, 0), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "wrote no output"));
    assert_delta_untouched();
}

static void test_exit_status(void **state)
{
    fa_external_result res;
    fa_error err;
    if (!have_python())
        skip();
    assert_int_equal(run_mode("exit1", 60, &res, &err, NULL, 0), FA_ERR_CHILD);
    assert_int_equal(res.exit_status, 1);
    assert_non_null(strstr(err.msg, "exited with status 1"));
    /* the tail of its output explains why */
    assert_non_null(strstr(err.msg, "simulated failure (CUDA out of memory)"));
    assert_delta_untouched();
}

static int pid_alive(pid_t pid)
{
    char path[64], buf[256];
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(buf, sizeof(buf), f)) {
        fclose(f);
        return 0;
    }
    fclose(f);
    /* a zombie waiting for a reaper is dead for our purpose */
    {
        const char *p = strrchr(buf, ')');
        return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
    }
}

/* A trainer that starts a helper in its process group and hangs.  A shell
 * (not Python) so that it reaches the hang well within the timeout even on a
 * loaded machine. */
static void test_timeout_kills_group(void **state)
{
    const char *argv[] = {"sh", "-c",
                          ("sleep 300 & echo $! > \"$FAKE_PIDFILE.tmp\"; "
                           "mv \"$FAKE_PIDFILE.tmp\" \"$FAKE_PIDFILE\"; wait"),
                          "{input}", "{output}"};
    char pidfile[300], envpid[340], scratch[300];
    const char *env[1];
    fa_external_opts o;
    fa_external_result res;
    fa_error err;
    FILE *f;
    int pid = 0;
    struct timespec ts = {0, 50 * 1000 * 1000};

    snprintf(pidfile, sizeof(pidfile), "%s/child.pid", tmpdir);
    snprintf(envpid, sizeof(envpid), "FAKE_PIDFILE=%s", pidfile);
    snprintf(scratch, sizeof(scratch), "%s/scratch", tmpdir);
    env[0] = envpid;
    fa_external_opts_default(&o);
    o.argv = argv;
    o.argc = 5;
    o.env = env;
    o.n_env = 1;
    o.timeout_s = 3;
    o.kill_grace_ms = 500;
    o.scratch_dir = scratch;
    for (size_t i = 0; i < layout.n_params; i++)
        delta[i] = 7.0f;
    assert_int_equal(fa_external_round(&o, &layout, global, delta, &res, &err), FA_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "timeout_s=3"));
    assert_non_null(strstr(err.msg, "killed"));
    assert_delta_untouched();
    /* the trainer's own child (same process group) is gone too */
    f = fopen(pidfile, "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    assert_true(pid > 0);
    for (int i = 0; i < 100 && pid_alive(pid); i++)
        nanosleep(&ts, NULL);
    assert_false(pid_alive(pid));
}

static void test_bad_outputs(void **state)
{
    static const struct {
        const char *mode;
        int code;
        const char *needle;
    } cases[] = {
        {"badshape", FA_ERR_INVAL, "fc1.weight"},
        {"baddtype", FA_ERR_INVAL, "fc1.bias"},
        {"extra", FA_ERR_INVAL, "fc9.weight"},
        {"missing", FA_ERR_INVAL, "fc1.bias"},
        {"nometa", FA_ERR_NOTFOUND, "num_examples"},
        {"badmeta", FA_ERR_PARSE, "\"many\""},
        {"zero", FA_ERR_PARSE, "num_examples"},
        {"nan", FA_ERR_INVAL, "NaN"},
        {"garbage", FA_ERR_PARSE, "external trainer output"},
    };
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run_mode(cases[i].mode, 60, &res, &err, NULL, 0);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].needle))
            fail_msg("mode %s: got %d (%s), expected %d with \"%s\"", cases[i].mode, rc, err.msg,
                     cases[i].code, cases[i].needle);
        assert_delta_untouched();
    }
}

static void test_bad_options(void **state)
{
    const char *nocmd[] = {"/nonexistent/trainer", "{input}"};
    const char *bad_env[] = {"NOEQUALS"};
    fa_external_opts o;
    fa_error err;
    char scratch[300];

    snprintf(scratch, sizeof(scratch), "%s/scratch2", tmpdir);
    fa_external_opts_default(&o);
    o.scratch_dir = scratch;
    assert_int_equal(fa_external_round(&o, &layout, global, delta, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "command is empty"));
    o.argv = nocmd;
    o.argc = 2;
    assert_int_equal(fa_external_round(&o, &layout, global, delta, NULL, &err), FA_ERR_CHILD);
    assert_non_null(strstr(err.msg, "could not be started"));
    o.timeout_s = 0;
    assert_int_equal(fa_external_round(&o, &layout, global, delta, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "timeout_s"));
    o.timeout_s = 5;
    o.env = bad_env;
    o.n_env = 1;
    assert_int_equal(fa_external_round(&o, &layout, global, delta, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "env[0]"));
}

static void test_opts_from_proto(void **state)
{
    Fedagg__ExternalTrainer pb = FEDAGG__EXTERNAL_TRAINER__INIT;
    char *cmd[] = {"python3", "train.py"};
    char *env[] = {"A=1", "B"};
    fa_external_opts o;
    fa_error err;

    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "trainer.external.command"));
    pb.n_command = 2;
    pb.command = cmd;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", &err), 0);
    assert_int_equal(o.timeout_s, 3600);
    assert_string_equal(o.scratch_dir, "/var/lib/fedagg/external");
    assert_string_equal(o.workdir, "/var/lib/fedagg");
    pb.workdir = "jobs";
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", &err), 0);
    assert_string_equal(o.workdir, "/var/lib/fedagg/jobs");
    pb.n_env = 2;
    pb.env = env;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "trainer.external.env[1]"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_round),
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_bad_outputs),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_opts_from_proto),
    };
    if (!have_python())
        fprintf(stderr, "test_worker_external: python3 not found in PATH; the trainer runs are skipped\n");
    return cmocka_run_group_tests(tests, setup, teardown);
}
