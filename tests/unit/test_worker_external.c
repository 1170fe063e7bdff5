/* Unit tests of worker/external_trainer on any model (tests/worker/
 * test_model.h: F32, BF16, F16, F64 federated tensors, F32, I64 and BOOL
 * ones that are not): a real command (tests/worker/fake_trainer.py, Python
 * standard library only) trains one round; then every refusal of the
 * contract (missing, extra, reshaped, retyped tensor; NaN/Inf in a
 * federated tensor; bad results), the one-shot process behaviours
 * (non-zero exit, timeout and cancel kill the process group, stragglers
 * of a successful command are killed, a torchrun-like launcher is waited
 * for), the region's kept local tensors (FedBN), the evaluate task and the
 * long-lived mode. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.pb-c.h"
#include "model/tensors.h"
#include "tests/worker/test_model.h"
#include "worker/external_trainer.h"

#define PY "/usr/bin/python3"

static char tmpdir[256];
static char script[1024], launcher[1024];
static char model_path[300], scratch[300];
static fa_safetensors *gst;
static fa_tensors *gtable;
static float gfed[TM_D], delta[TM_D];

static int have_python(void)
{
    return access(PY, X_OK) == 0;
}

static void source_path(char *buf, size_t n, const char *rel)
{
    const char *src = getenv("FA_SRC");
    if (src) {
        snprintf(buf, n, "%s/%s", src, rel);
    } else {
        /* not under ctest: next to this source file */
        const char *cut = strstr(__FILE__, "tests/unit/");
        snprintf(buf, n, "%.*s%s", cut ? (int)(cut - __FILE__) : 0, __FILE__, rel);
    }
}

static int setup(void **state)
{
    source_path(script, sizeof(script), "tests/worker/fake_trainer.py");
    source_path(launcher, sizeof(launcher), "tests/worker/fake_torchrun.py");
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_external.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(model_path, sizeof(model_path), "%s/global.safetensors", tmpdir);
    snprintf(scratch, sizeof(scratch), "%s/scratch", tmpdir);
    if (tm_write(model_path, NULL, 0) != 0 || fa_st_open(&gst, model_path, NULL) != 0 ||
        fa_tensors_from_st(&gtable, gst, NULL) != 0 || fa_tensors_fed_numel(gtable) != TM_D ||
        fa_tensors_read_fed(gtable, gst, gfed, TM_D, 1, "test", NULL) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    fa_st_del(gst);
    fa_tensors_del(gtable);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void model(fa_external_model *m)
{
    memset(m, 0, sizeof(*m));
    m->table = gtable;
    m->st = gst;
    m->fed = gfed;
    m->version = 3;
    m->round = 17;
}

static void opts(fa_external_opts *o, const char *const *argv, size_t argc)
{
    fa_external_opts_default(o);
    o->argv = argv;
    o->argc = argc;
    o->timeout_s = 60;
    o->kill_grace_ms = 500;
    o->scratch_dir = scratch;
    o->workdir = tmpdir;
    o->region = "eu-west";
}

/* One round with options o; delta is pre-filled with 7. */
static int run_opts(fa_external_opts *o, fa_external_result *res, fa_error *err)
{
    fa_external_trainer *x = NULL;
    fa_external_model m;
    int rc;

    model(&m);
    for (int i = 0; i < TM_D; i++)
        delta[i] = 7.0f;
    fa_error_clear(err);
    rc = fa_external_trainer_new(&x, o, err);
    if (rc == 0)
        rc = fa_external_trainer_train(x, &m, delta, res, err);
    fa_external_trainer_del(x);
    return rc;
}

/* fake_trainer.py MODE {input} {output} {result}, one-shot. */
static void mode_opts(fa_external_opts *o, const char *argv[6], const char *mode)
{
    argv[0] = PY;
    argv[1] = script;
    argv[2] = mode;
    argv[3] = "{input}";
    argv[4] = "{output}";
    argv[5] = "{result}";
    opts(o, argv, 6);
}

static int run_mode(const char *mode, const char *const *env, size_t n_env, fa_external_result *res,
                    fa_error *err)
{
    const char *argv[6];
    fa_external_opts o;
    mode_opts(&o, argv, mode);
    o.env = env;
    o.n_env = n_env;
    return run_opts(&o, res, err);
}

static void assert_delta_untouched(void)
{
    for (int i = 0; i < TM_D; i++)
        assert_true(delta[i] == 7.0f);
}

/* w' = 0.5 w + 0.25 on every floating tensor: delta = 0.25 - 0.5 w, exact. */
static void assert_delta_ok(void)
{
    for (int i = 0; i < TM_D; i++)
        if (delta[i] != 0.25f - 0.5f * gfed[i])
            fail_msg("delta[%d] = %g, expected %g", i, delta[i], 0.25f - 0.5f * gfed[i]);
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

static int read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    return pid;
}

static void assert_dies(pid_t pid)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    assert_true(pid > 0);
    for (int i = 0; i < 100 && pid_alive(pid); i++)
        nanosleep(&ts, NULL);
    assert_false(pid_alive(pid));
}

static void test_ok_round(void **state)
{
    const char *env[] = {"FAKE_REQUIRE_ENV=1", "FAKE_TOKEN=s3cret=ok", "FAKE_EXAMPLES=4321"};
    fa_external_result res;
    fa_safetensors *in = NULL;
    char in_path[400];
    fa_error err;

    if (!have_python())
        skip();
    assert_int_equal(run_mode("ok", env, 3, &res, &err), 0);
    assert_int_equal(res.r.num_examples, 4321);
    assert_int_equal(res.exit_status, 0);
    assert_delta_ok();
    /* the results file's metrics and the evaluation of the input */
    assert_true(fa_trainer_metric(&res.r.metrics, "loss") == 0.5);
    assert_true(res.r.eval.present);
    assert_int_equal(res.r.eval.num_examples, 10);
    assert_true(res.r.eval.loss == 0.75 && res.r.eval.accuracy == 0.625);
    assert_true(fa_trainer_metric(&res.r.eval.metrics, "f1") == 0.5);

    /* The input: every tensor in its own dtype, and the contract's metadata. */
    snprintf(in_path, sizeof(in_path), "%s/" FA_EXTERNAL_INPUT, scratch);
    assert_int_equal(fa_st_open(&in, in_path, &err), 0);
    assert_int_equal(fa_tensors_check(gtable, in, "the input", &err), 0);
    assert_string_equal(fa_st_metadata_get(in, "fedagg.round"), "17");
    assert_string_equal(fa_st_metadata_get(in, "fedagg.version"), "3");
    assert_string_equal(fa_st_metadata_get(in, "fedagg.region"), "eu-west");
    assert_string_equal(fa_st_metadata_get(in, "format"), "pt");
    assert_non_null(strstr(fa_st_metadata_get(in, FA_TENSORS_META_KEY), "\"head.bias\""));
    assert_null(strstr(fa_st_metadata_get(in, FA_TENSORS_META_KEY), "bn."));
    fa_st_del(in);

    /* The next round that writes nothing must not pick up this output. */
    assert_int_equal(run_mode("nooutput", NULL, 0, &res, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "wrote no output"));
    assert_delta_untouched();
}

/* Tensors are matched by name: any order; integer tensors may change. */
static void test_reorder_and_legacy(void **state)
{
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    assert_int_equal(run_mode("reorder", NULL, 0, &res, &err), 0);
    assert_delta_ok();
    /* an older trainer: no results file, num_examples in __metadata__ */
    assert_int_equal(run_mode("legacy", NULL, 0, &res, &err), 0);
    assert_int_equal(res.r.num_examples, 1234);
    assert_false(res.r.eval.present);
    assert_delta_ok();
    /* a NaN in a tensor that is not federated is the trainer's business */
    assert_int_equal(run_mode("nanlocal", NULL, 0, &res, &err), 0);
    assert_delta_ok();
}

static void test_exit_status(void **state)
{
    fa_external_result res;
    fa_error err;
    if (!have_python())
        skip();
    assert_int_equal(run_mode("exit1", NULL, 0, &res, &err), FA_ERR_CHILD);
    assert_int_equal(res.exit_status, 1);
    assert_non_null(strstr(err.msg, "exited with status 1"));
    /* the tail of its output explains why */
    assert_non_null(strstr(err.msg, "simulated failure (CUDA out of memory)"));
    assert_delta_untouched();
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
    char pidfile[300], envpid[340];
    const char *env[1];
    fa_external_opts o;
    fa_external_result res;
    fa_error err;

    snprintf(pidfile, sizeof(pidfile), "%s/child.pid", tmpdir);
    snprintf(envpid, sizeof(envpid), "FAKE_PIDFILE=%s", pidfile);
    env[0] = envpid;
    opts(&o, argv, 5);
    o.env = env;
    o.n_env = 1;
    o.timeout_s = 3;
    assert_int_equal(run_opts(&o, &res, &err), FA_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "timeout_s=3"));
    assert_non_null(strstr(err.msg, "killed"));
    assert_delta_untouched();
    /* the trainer's own child (same process group) is gone too */
    assert_dies(read_pid(pidfile));
    unlink(pidfile);
}

/* A signal to the worker (its stop flag) stops a running trainer at once. */
static void test_cancel(void **state)
{
    static volatile sig_atomic_t stop = 1;
    const char *argv[] = {"sh", "-c", "sleep 300"};
    fa_external_opts o;
    fa_external_result res;
    fa_error err;

    opts(&o, argv, 3);
    o.cancel = &stop;
    assert_int_equal(run_opts(&o, &res, &err), FA_ERR_CANCELLED);
    assert_non_null(strstr(err.msg, "shutting down"));
    assert_true(res.seconds < 5);
    assert_delta_untouched();
}

/* A command that succeeds but leaves a child running (a data loader, a
 * forgotten background job): the round counts, and the child is killed
 * once the command has exited. */
static void test_stragglers_killed(void **state)
{
    char cmd[2400], pidfile[300];
    const char *argv[] = {"sh", "-c", cmd};
    fa_external_opts o;
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    snprintf(pidfile, sizeof(pidfile), "%s/straggler.pid", tmpdir);
    snprintf(cmd, sizeof(cmd), "sleep 300 & echo $! > %s; exec %s %s ok", pidfile, PY, script);
    opts(&o, argv, 3);
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_delta_ok();
    assert_dies(read_pid(pidfile));
    unlink(pidfile);
}

/* torchrun's shape: a launcher that starts ranks with the environment
 * passed through and waits for all of them; rank 0 writes the output, the
 * slower rank 1 only reads the input.  The worker waits for the launcher,
 * so the slow rank has finished (and written its mark) when it returns. */
static void test_launcher_waits_for_ranks(void **state)
{
    const char *argv[] = {PY, launcher, "2", script, "ok"};
    char mark[300], envmark[340], mark1[320];
    const char *env[3];
    fa_external_opts o;
    fa_external_result res;
    fa_error err;
    FILE *f;
    char got[64] = "";

    if (!have_python())
        skip();
    snprintf(mark, sizeof(mark), "%s/rank", tmpdir);
    snprintf(envmark, sizeof(envmark), "FAKE_RANK_MARK=%s", mark);
    snprintf(mark1, sizeof(mark1), "%s.1", mark);
    env[0] = envmark;
    env[1] = "FAKE_RANK_SLEEP=1";
    env[2] = "FAKE_TOKEN=passed-through";
    opts(&o, argv, 5);
    o.env = env;
    o.n_env = 3;
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_delta_ok();
    assert_true(res.seconds >= 1.0);
    f = fopen(mark1, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof(got), f));
    fclose(f);
    assert_string_equal(got, "passed-through");
    unlink(mark1);
}

/* The real torchrun, when it works here (skipped otherwise). */
/* The real torchrun with 2 ranks (through the Python kit's launcher, which
 * mends Debian 12's torchrun: torch 1.13 on Python 3.11). */
static void test_real_torchrun(void **state)
{
    const char *argv[] = {PY, "-m", "fedagg.torchrun", "--standalone", "--nproc_per_node=2",
                          script, "ok"};
    char mark[300], envmark[340], mark1[320], pypath[1100], kit[1024];
    const char *env[2];
    fa_external_opts o;
    fa_external_result res;
    fa_error err;

    if (!have_python() || system(PY " -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_real_torchrun: no %s with torch (python3-torch); skipped\n", PY);
        skip();
    }
    source_path(kit, sizeof(kit), "python");
    snprintf(pypath, sizeof(pypath), "PYTHONPATH=%s", kit);
    snprintf(mark, sizeof(mark), "%s/trank", tmpdir);
    snprintf(envmark, sizeof(envmark), "FAKE_RANK_MARK=%s", mark);
    snprintf(mark1, sizeof(mark1), "%s.1", mark);
    env[0] = envmark;
    env[1] = pypath;
    opts(&o, argv, 7);
    o.env = env;
    o.n_env = 2;
    o.timeout_s = 120;
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_delta_ok();
    assert_int_equal(access(mark1, F_OK), 0); /* rank 1 ran too */
}

static void test_refusals(void **state)
{
    static const struct {
        const char *mode;
        int code;
        const char *needle, *needle2;
    } cases[] = {
        {"badshape", FA_ERR_INVAL, "tensor 'encoder.weight' has shape [3, 4]", "[4, 3]"},
        {"baddtype", FA_ERR_INVAL, "tensor 'encoder.bias' is F32", "BF16"},
        {"extra", FA_ERR_INVAL, "extra tensor 'extra.weight'", NULL},
        {"missing", FA_ERR_INVAL, "missing tensor 'head.bias'", NULL},
        {"nan", FA_ERR_RANGE, "tensor 'head.weight'", "element 5 is NaN"},
        {"inf", FA_ERR_RANGE, "tensor 'encoder.weight'", "element 2"},
        {"nometa", FA_ERR_NOTFOUND, "num_examples", NULL},
        {"badmeta", FA_ERR_PARSE, "\"many\"", NULL},
        {"badresult", FA_ERR_PARSE, FA_EXTERNAL_RESULT, NULL},
        {"zero", FA_ERR_PARSE, "num_examples", NULL},
        {"garbage", FA_ERR_PARSE, "external trainer output", NULL},
    };
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run_mode(cases[i].mode, NULL, 0, &res, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].needle) ||
            (cases[i].needle2 && !strstr(err.msg, cases[i].needle2)))
            fail_msg("mode %s: got %d (%s), expected %d with \"%s\"", cases[i].mode, rc, err.msg,
                     cases[i].code, cases[i].needle);
        assert_delta_untouched();
    }
}

static float local_rm0(const char *path)
{
    fa_safetensors *st = NULL;
    float rm[4] = {NAN, NAN, NAN, NAN};
    if (fa_st_open(&st, path, NULL) == 0) {
        const fa_st_tensor *t = fa_st_find(st, "bn.running_mean");
        if (!t || fa_st_read_f32(st, t, rm, 4, NULL) != 0)
            rm[0] = NAN;
        fa_st_del(st);
    }
    return rm[0];
}

/* LOCAL_KEEP: the region's own values of the tensors that are not
 * federated go into its next round (FedBN); LOCAL_USE_GLOBAL: the published
 * ones.  fake_trainer.py reports the first value of each input tensor. */
static void test_local_tensors(void **state)
{
    const char *argv[6], *argv2[6];
    static const uint64_t shape[1] = {5};
    static const float five[5] = {9, 9, 9, 9, 9};
    fa_st_view stale = {"bn.running_mean", FA_ST_F32, 1, shape, five, NULL, NULL};
    char local[400];
    fa_external_opts o, fail;
    fa_external_result res;
    fa_safetensors *st = NULL;
    fa_error err;

    if (!have_python())
        skip();
    snprintf(local, sizeof(local), "%s/" FA_LOCAL_TENSORS_FILE, tmpdir);
    unlink(local);
    mode_opts(&o, argv, "ok");
    o.local_path = local;
    /* round 1: nothing kept yet, the published values */
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.running_mean") == 0.125);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.num_batches_tracked") == 7);
    /* kept: exactly the tensors that are not federated, as trained */
    assert_int_equal(fa_st_open(&st, local, &err), 0);
    assert_int_equal(fa_st_count(st), 3);
    assert_null(fa_st_find(st, "head.bias"));
    assert_non_null(fa_st_find(st, "bn.num_batches_tracked"));
    assert_non_null(fa_st_find(st, "mask"));
    fa_st_del(st);
    assert_true(local_rm0(local) == 0.3125f);
    /* round 2 starts from them; the federated tensors are the global's */
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.running_mean") == 0.3125);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.num_batches_tracked") == 8);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_mask") == 0);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_head.bias") == 1.5);
    assert_delta_ok();
    assert_true(local_rm0(local) == 0.40625f);
    /* a failed round leaves them as they were */
    mode_opts(&fail, argv2, "exit1");
    fail.local_path = local;
    assert_int_equal(run_opts(&fail, &res, &err), FA_ERR_CHILD);
    assert_true(local_rm0(local) == 0.40625f);
    /* LOCAL_USE_GLOBAL: the published values even with the file there */
    o.local_path = NULL;
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.running_mean") == 0.125);
    assert_true(local_rm0(local) == 0.40625f);
    /* a kept file that no longer fits the model is not used, and replaced */
    assert_int_equal(fa_st_save(local, 0600, &stale, 1, NULL, 0, &err), 0);
    o.local_path = local;
    assert_int_equal(run_opts(&o, &res, &err), 0);
    assert_true(fa_trainer_metric(&res.r.metrics, "seen_bn.running_mean") == 0.125);
    assert_true(local_rm0(local) == 0.3125f);
    unlink(local);
}

/* The evaluate task: FEDAGG_TASK=evaluate, no output, the results' eval. */
static void test_evaluate(void **state)
{
    const char *argv[6];
    fa_external_opts o;
    fa_external_trainer *x = NULL;
    fa_external_model m;
    fa_external_result res;
    fa_error err;

    if (!have_python())
        skip();
    mode_opts(&o, argv, "garbage"); /* evaluating never writes or reads an output */
    model(&m);
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), 0);
    assert_int_equal(fa_external_trainer_evaluate(x, &m, &res, &err), 0);
    assert_true(res.r.eval.present);
    assert_int_equal(res.r.eval.num_examples, 10);
    assert_true(res.r.eval.accuracy == 0.625);
    fa_external_trainer_del(x);

    /* a trainer that reports no evaluation */
    {
        const char *sh[] = {"sh", "-c", "echo '{\"num_examples\": 3}' > \"$FEDAGG_RESULT\""};
        opts(&o, sh, 3);
        assert_int_equal(fa_external_trainer_new(&x, &o, &err), 0);
        assert_int_equal(fa_external_trainer_evaluate(x, &m, &res, &err), FA_ERR_NOTFOUND);
        assert_non_null(strstr(err.msg, "no \"eval\""));
        fa_external_trainer_del(x);
    }
}

/* Long-lived: one process for every task; shut down (and gone) at the end. */
static void test_long_lived(void **state)
{
    const char *argv[] = {PY, script, "serve"};
    fa_external_opts o;
    fa_external_trainer *x = NULL;
    fa_external_model m;
    fa_external_result res;
    fa_error err;
    long pid = 0;

    if (!have_python())
        skip();
    opts(&o, argv, 3);
    o.long_lived = 1;
    o.start_timeout_s = 30;
    model(&m);
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), 0);
    assert_int_equal(fa_external_trainer_pid(x), 0);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < TM_D; i++)
            delta[i] = 7.0f;
        m.round = 17 + (uint64_t)r;
        if (fa_external_trainer_train(x, &m, delta, &res, &err) != 0)
            fail_msg("round %d: %s", r, err.msg);
        assert_int_equal(res.r.num_examples, 1234);
        assert_true(res.r.eval.present);
        assert_delta_ok();
        if (r == 0)
            pid = fa_external_trainer_pid(x);
        assert_true(pid > 0);
        assert_int_equal(fa_external_trainer_pid(x), pid); /* the same process */
    }
    assert_int_equal(fa_external_trainer_evaluate(x, &m, &res, &err), 0);
    assert_true(res.r.eval.accuracy == 0.625);
    assert_int_equal(fa_external_trainer_pid(x), pid);
    fa_external_trainer_del(x);
    assert_dies((pid_t)pid);
}

static void test_bad_options(void **state)
{
    const char *nocmd[] = {"/nonexistent/trainer", "{input}"};
    const char *bad_env[] = {"NOEQUALS"};
    fa_external_opts o;
    fa_external_trainer *x = NULL;
    fa_external_model m;
    fa_error err;

    opts(&o, NULL, 0);
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "command is empty"));
    o.argv = nocmd;
    o.argc = 2;
    o.timeout_s = 0;
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "timeout_s"));
    o.timeout_s = 5;
    o.long_lived = 1;
    o.start_timeout_s = 0;
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "start_timeout_s"));
    o.long_lived = 0;
    o.env = bad_env;
    o.n_env = 1;
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "env[0]"));
    o.n_env = 0;
    assert_int_equal(fa_external_trainer_new(&x, &o, &err), 0);
    model(&m);
    assert_int_equal(fa_external_trainer_train(x, &m, delta, NULL, &err), FA_ERR_CHILD);
    assert_non_null(strstr(err.msg, "could not be started"));
    fa_external_trainer_del(x);
}

static void test_opts_from_proto(void **state)
{
    Fedagg__ExternalTrainer pb = FEDAGG__EXTERNAL_TRAINER__INIT;
    char *cmd[] = {"python3", "train.py"};
    char *env[] = {"A=1", "B"};
    fa_external_opts o;
    fa_error err;

    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 1, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "trainer.external.command"));
    pb.n_command = 2;
    pb.command = cmd;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 1, &err), 0);
    assert_int_equal(o.timeout_s, 3600);
    assert_int_equal(o.start_timeout_s, 600);
    assert_int_equal(o.long_lived, 0);
    assert_string_equal(o.scratch_dir, "/var/lib/fedagg/external");
    assert_string_equal(o.workdir, "/var/lib/fedagg");
    assert_string_equal(o.local_path, "/var/lib/fedagg/" FA_LOCAL_TENSORS_FILE);
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 0, &err), 0);
    assert_null(o.local_path);
    pb.workdir = "jobs";
    pb.mode = FEDAGG__TRAINER_MODE__TRAINER_LONG_LIVED;
    pb.start_timeout_s = 42;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 0, &err), 0);
    assert_string_equal(o.workdir, "/var/lib/fedagg/jobs");
    assert_int_equal(o.long_lived, 1);
    assert_int_equal(o.start_timeout_s, 42);
    pb.start_timeout_s = 0;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 0, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "start_timeout_s"));
    pb.start_timeout_s = 1;
    pb.n_env = 2;
    pb.env = env;
    assert_int_equal(fa_external_opts_from_proto(&o, &pb, "/var/lib/fedagg", 0, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "trainer.external.env[1]"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_round),
        cmocka_unit_test(test_reorder_and_legacy),
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_timeout_kills_group),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_stragglers_killed),
        cmocka_unit_test(test_launcher_waits_for_ranks),
        cmocka_unit_test(test_real_torchrun),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_local_tensors),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_long_lived),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_opts_from_proto),
    };
    if (!have_python())
        fprintf(stderr, "test_worker_external: " PY " not found; the trainer runs are skipped\n");
    return cmocka_run_group_tests(tests, setup, teardown);
}
