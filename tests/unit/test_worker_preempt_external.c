/* Unit tests of preemption with an external trainer (worker/
 * external_trainer.h, docs/trainer-contract.md "Preemption"): when the
 * worker is told to stop (its SIGTERM, here the cancel flag), the trainer's
 * process group gets SIGTERM at once and preempt_grace_ms to save its state
 * and exit before SIGKILL, in one-shot and in long-lived mode (the socket
 * still open meanwhile); a trainer that overstays the grace is killed; and
 * a restarted task gets the same input file, byte for byte, and the same
 * round and version.  The trainer is a small Python script (standard
 * library) written by the test. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_time.h"
#include "model/tensors.h"
#include "tests/worker/test_model.h"
#include "worker/external_trainer.h"

#define PY "/usr/bin/python3"

static char tmpdir[256], script[300], model_path[300], scratch[300], mark[300], started[300];
static fa_safetensors *gst;
static fa_tensors *gtable;
static float gfed[TM_D], delta[TM_D];

/* Training forever; on SIGTERM: $SAVE_S seconds of "saving", then the
 * marker (the input's SHA-256, round and version) and exit 0.  One-shot, or
 * long-lived ("serve": hello, then a round it never finishes). */
static const char trainer_py[] =
    "import hashlib, json, os, signal, socket, sys, time\n"
    "def digest():\n"
    "    return hashlib.sha256(open(os.environ['FEDAGG_INPUT'], 'rb').read()).hexdigest()\n"
    "task = {}\n"
    "def on_term(sig, frame):\n"
    "    time.sleep(float(os.environ['SAVE_S']))\n"
    "    with open(os.environ['MARK'] + '.tmp', 'w') as f:\n"
    "        json.dump(task, f)\n"
    "    os.rename(os.environ['MARK'] + '.tmp', os.environ['MARK'])\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, on_term)\n"
    "if sys.argv[1] == 'serve':\n"
    "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "    s.connect(os.environ['FEDAGG_SOCKET'])\n"
    "    s.sendall(b'{\"type\": \"hello\", \"protocol\": 1}\\n')\n"
    "    line = b''\n"
    "    while not line.endswith(b'\\n'):\n"
    "        line += s.recv(65536)\n"
    "    m = json.loads(line)\n"
    "    task.update(round=m['round'], version=m['version'])\n"
    "else:\n"
    "    task.update(round=int(os.environ['FEDAGG_ROUND']),\n"
    "                version=int(os.environ['FEDAGG_VERSION']))\n"
    "task['input'] = digest()\n"
    "open(os.environ['STARTED'], 'w').close()\n"
    "while True:\n"
    "    time.sleep(0.05)\n";

static int setup(void **state)
{
    FILE *f;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_preempt_ext.XXXXXX");
    if (access(PY, X_OK) != 0 || !mkdtemp(tmpdir))
        return 0; /* each test skips */
    snprintf(script, sizeof(script), "%s/trainer.py", tmpdir);
    snprintf(model_path, sizeof(model_path), "%s/global.safetensors", tmpdir);
    snprintf(scratch, sizeof(scratch), "%s/scratch", tmpdir);
    snprintf(mark, sizeof(mark), "%s/saved.json", tmpdir);
    snprintf(started, sizeof(started), "%s/started", tmpdir);
    f = fopen(script, "w");
    if (!f || fputs(trainer_py, f) < 0 || fclose(f) != 0)
        return -1;
    if (tm_write(model_path, NULL, 0) != 0 || fa_st_open(&gst, model_path, NULL) != 0 ||
        fa_tensors_from_st(&gtable, gst, NULL) != 0 ||
        fa_tensors_read_fed(gtable, gst, gfed, TM_D, 1, "test", NULL) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    fa_st_del(gst);
    fa_tensors_del(gtable);
    if (!tmpdir[0] || strstr(tmpdir, "XXXXXX"))
        return 0;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Sets the cancel flag once the trainer has started (as the worker's
 * SIGTERM handler would), and notes when. */
typedef struct canceller {
    volatile sig_atomic_t stop;
    double at;
} canceller;

static void *cancel_when_started(void *p)
{
    canceller *c = p;
    for (int i = 0; i < 600 && access(started, F_OK) != 0; i++)
        usleep(50000);
    c->at = fa_time_mono_s();
    c->stop = 1;
    return NULL;
}

/* One train task with the trainer in mode ("once" or "serve") taking save_s
 * to save, under a grace of grace_ms; returns its code, the error, how long
 * the stop took, and the marker's contents ("" when none). */
static int run_preempted(const char *mode, const char *save_s, uint32_t grace_ms, fa_error *err,
                         double *stop_s, char *saved, size_t n)
{
    const char *argv[] = {PY, script, mode};
    char env_mark[400], env_started[400], env_save[64];
    const char *env[3] = {env_mark, env_started, env_save};
    fa_external_opts o;
    fa_external_trainer *x = NULL;
    fa_external_model m;
    canceller c = {0};
    pthread_t th;
    FILE *f;
    int rc;

    unlink(mark);
    unlink(started);
    snprintf(env_mark, sizeof(env_mark), "MARK=%s", mark);
    snprintf(env_started, sizeof(env_started), "STARTED=%s", started);
    snprintf(env_save, sizeof(env_save), "SAVE_S=%s", save_s);
    fa_external_opts_default(&o);
    o.argv = argv;
    o.argc = 3;
    o.env = env;
    o.n_env = 3;
    o.timeout_s = 60;
    o.kill_grace_ms = 100; /* the timeout's grace: not the one a preemption gets */
    o.preempt_grace_ms = grace_ms;
    o.long_lived = !strcmp(mode, "serve");
    o.scratch_dir = scratch;
    o.workdir = tmpdir;
    o.region = "eu-west";
    o.cancel = &c.stop;
    memset(&m, 0, sizeof(m));
    m.table = gtable;
    m.st = gst;
    m.fed = gfed;
    m.version = 3;
    m.round = 17;
    fa_error_clear(err);
    assert_int_equal(fa_external_trainer_new(&x, &o, err), 0);
    assert_int_equal(pthread_create(&th, NULL, cancel_when_started, &c), 0);
    rc = fa_external_trainer_train(x, &m, delta, NULL, err);
    *stop_s = fa_time_mono_s() - c.at;
    pthread_join(th, NULL);
    fa_external_trainer_del(x);
    saved[0] = '\0';
    f = fopen(mark, "r");
    if (f) {
        size_t got = fread(saved, 1, n - 1, f);
        saved[got] = '\0';
        fclose(f);
    }
    return rc;
}

static void test_sigterm_forwarded_with_the_grace(void **state)
{
    const char *modes[] = {"once", "serve"};
    char first[512], saved[512];
    double took;
    fa_error err;

    if (access(script, R_OK) != 0)
        skip();
    for (int i = 0; i < 2; i++) {
        /* 1.5 s to save, 10 s of grace: saved, exited 0, no SIGKILL; far
         * longer than kill_grace_ms (0.1 s) */
        assert_int_equal(run_preempted(modes[i], "1.5", 10000, &err, &took, first, sizeof(first)),
                         FA_ERR_CANCELLED);
        if (!strstr(first, "\"round\": 17, \"version\": 3"))
            fail_msg("%s: no state saved on SIGTERM (marker \"%s\"): %s", modes[i], first, err.msg);
        assert_true(took >= 1.4 && took < 8.0);
        if (i == 0)
            assert_non_null(strstr(err.msg, "exited with status 0"));
        /* The restarted task: same input, byte for byte, round and version. */
        assert_int_equal(run_preempted(modes[i], "0", 10000, &err, &took, saved, sizeof(saved)),
                         FA_ERR_CANCELLED);
        assert_string_equal(first, saved);

        /* 3 s to save, 0.5 s of grace: SIGKILLed, nothing saved */
        assert_int_equal(run_preempted(modes[i], "3", 500, &err, &took, saved, sizeof(saved)),
                         FA_ERR_CANCELLED);
        assert_string_equal(saved, "");
        assert_true(took >= 0.4 && took < 2.5);
        if (i == 0)
            assert_non_null(strstr(err.msg, "killed by signal 9"));
        print_message("%s: SIGTERM forwarded, the grace kept; the restart got the same input\n",
                      modes[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_forwarded_with_the_grace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
