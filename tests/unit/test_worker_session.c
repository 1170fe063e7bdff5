/* Unit tests of the long-lived trainer: the sans-I/O line protocol
 * (worker/trainer_proto.h) on a synthetic clock, then the session
 * (worker/trainer_session.h) with real processes (tests/worker/
 * fake_session.py) that serve, die, hang, never connect, break the
 * protocol, give a round up or ignore the shutdown. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_time.h"
#include "worker/trainer_process.h"
#include "worker/trainer_proto.h"
#include "worker/trainer_session.h"

#define PY "/usr/bin/python3"

static char tmpdir[256], script[1024];

static int have_python(void)
{
    return access(PY, X_OK) == 0;
}

/* ---------------------------------------------------------------------- */
/* The protocol, sans I/O                                                  */
/* ---------------------------------------------------------------------- */

static int feed_str(fa_trainer_proto *p, const char *s, fa_trainer_event *ev, fa_error *err)
{
    int rc = fa_trainer_proto_feed(p, s, strlen(s), err);
    if (rc == 0)
        rc = fa_trainer_proto_next(p, ev, err);
    return rc;
}

static fa_trainer_proto *idle_proto(void)
{
    fa_trainer_proto *p = NULL;
    fa_trainer_event ev;
    assert_int_equal(fa_trainer_proto_new(&p, 1000, 5000, NULL), 0);
    assert_int_equal(feed_str(p, "{\"type\": \"hello\", \"protocol\": 1}\n", &ev, NULL), 0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_HELLO);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_IDLE);
    return p;
}

static void start_round(fa_trainer_proto *p, const char *task, uint64_t round, uint64_t now)
{
    fa_trainer_round_msg m = {task, round, 6, "eu-west", "/s/in.safetensors", "/s/out.safetensors"};
    char *line = NULL;
    size_t len = 0;
    assert_int_equal(fa_trainer_proto_round(p, &m, now, 60000, &line, &len, NULL), 0);
    free(line);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_BUSY);
}

static void test_proto_round_trip(void **state)
{
    fa_trainer_proto *p = NULL;
    fa_trainer_event ev;
    fa_trainer_round_msg m = {
        "train", 7, 6, "eu-west", "/s/in \"x\".safetensors", "/s/out.safetensors"};
    json_t *o;
    char *line = NULL;
    size_t len = 0;

    assert_int_equal(fa_trainer_proto_new(&p, 1000, 5000, NULL), 0);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_AWAIT_HELLO);
    assert_int_equal(fa_trainer_proto_deadline(p), 6000);
    /* a hello in pieces: nothing until its newline */
    assert_int_equal(feed_str(p, "{\"type\": \"hel", &ev, NULL), 0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_NONE);
    assert_int_equal(feed_str(p, "lo\", \"protocol\": 1}\r\n", &ev, NULL), 0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_HELLO);
    assert_int_equal(fa_trainer_proto_deadline(p), UINT64_MAX);

    assert_int_equal(fa_trainer_proto_round(p, &m, 2000, 30000, &line, &len, NULL), 0);
    assert_int_equal(line[len - 1], '\n');
    assert_int_equal(strlen(line), len);
    o = json_loadb(line, len, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "type")), "round");
    assert_string_equal(json_string_value(json_object_get(o, "task")), "train");
    assert_int_equal(json_integer_value(json_object_get(o, "round")), 7);
    assert_int_equal(json_integer_value(json_object_get(o, "version")), 6);
    assert_string_equal(json_string_value(json_object_get(o, "region")), "eu-west");
    assert_string_equal(json_string_value(json_object_get(o, "input")), "/s/in \"x\".safetensors");
    assert_string_equal(json_string_value(json_object_get(o, "output")), "/s/out.safetensors");
    json_decref(o);
    free(line);
    assert_int_equal(fa_trainer_proto_deadline(p), 32000);
    assert_int_equal(fa_trainer_proto_round_id(p), 7);

    /* empty lines are tolerated; the answer may come with the next line */
    assert_int_equal(feed_str(p,
                              "\n{\"type\": \"done\", \"round\": 7, \"num_examples\": 20000, "
                              "\"metrics\": {\"loss\": 0.41}, \"eval\": {\"num_examples\": 2000, "
                              "\"loss\": 0.52, \"accuracy\": 0.83}}\n",
                              &ev, NULL),
                     0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_DONE);
    assert_int_equal(ev.round, 7);
    assert_int_equal(ev.result.num_examples, 20000);
    assert_true(fa_trainer_metric(&ev.result.metrics, "loss") == 0.41);
    assert_true(ev.result.eval.present && ev.result.eval.num_examples == 2000);
    assert_true(ev.result.eval.accuracy == 0.83);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_IDLE);

    assert_int_equal(fa_trainer_proto_shutdown(p, &line, &len, NULL), 0);
    assert_string_equal(line, "{\"type\":\"shutdown\"}\n");
    free(line);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_SHUTDOWN);
    assert_int_equal(fa_trainer_proto_feed(p, "x", 1, NULL), FA_ERR_STATE);
    fa_trainer_proto_del(p);
}

static void test_proto_refusals(void **state)
{
    static const struct {
        int setup; /* 0 await hello, 1 idle, 2 busy with a train round 7, 3 busy evaluate 7 */
        const char *line, *needle;
    } cases[] = {
        {0, "{\"type\": \"done\", \"round\": 1, \"num_examples\": 1}\n", "before its hello"},
        {0, "hello\n", "not JSON"},
        {0, "{\"type\": \"hello\", \"protocol\": 1} trailing\n", "not JSON"},
        {0, "[1, 2]\n", "not an object"},
        {0, "{\"round\": 1}\n", "without a string \"type\""},
        {0, "{\"type\": 3}\n", "without a string \"type\""},
        {0, "{\"type\": \"hello\", \"protocol\": 2}\n",
         "asks for protocol 2; this worker speaks protocol 1"},
        {0, "{\"type\": \"hello\"}\n", "names no protocol"},
        {0, "{\"type\": \"hello\", \"type\": \"hello\", \"protocol\": 1}\n", "not JSON"},
        {1, "{\"type\": \"hello\", \"protocol\": 1}\n", "hello twice"},
        {1, "{\"type\": \"done\", \"round\": 7, \"num_examples\": 1}\n", "no round in flight"},
        {2, "{\"type\": \"progress\", \"round\": 7}\n", "unknown type \"progress\""},
        {2, "{\"type\": \"done\", \"round\": 8, \"num_examples\": 1}\n", "is for round 8"},
        {2, "{\"type\": \"done\", \"num_examples\": 1}\n", "no integer \"round\""},
        {2, "{\"type\": \"error\", \"round\": 6, \"message\": \"x\"}\n", "is for round 6"},
        {2, "{\"type\": \"done\", \"round\": 7}\n", "no \"num_examples\""},
        {2, "{\"type\": \"done\", \"round\": 7, \"num_examples\": 0}\n", "num_examples"},
        {2, "{\"type\": \"done\", \"round\": 7, \"num_examples\": 2.5}\n", "num_examples"},
        {2,
         "{\"type\": \"done\", \"round\": 7, \"num_examples\": 5, \"metrics\": {\"a\": \"b\"}}\n",
         "metric \"a\""},
        {2, "{\"type\": \"done\", \"round\": 7, \"num_examples\": 5, \"eval\": {\"loss\": 1}}\n",
         "eval.num_examples"},
        {3,
         "{\"type\": \"done\", \"round\": 7, \"eval\": {\"num_examples\": 3, \"accuracy\": 1.5}}\n",
         "eval.accuracy"},
        {2, "{\"type\": \"done\", \"round\": 7, \"num_examples\": 5}\xff\n", "not JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fa_trainer_proto *p = NULL;
        fa_trainer_event ev;
        fa_error err;
        int rc;
        if (cases[i].setup == 0)
            assert_int_equal(fa_trainer_proto_new(&p, 0, 1000, NULL), 0);
        else
            p = idle_proto();
        if (cases[i].setup >= 2)
            start_round(p, cases[i].setup == 2 ? "train" : "evaluate", 7, 0);
        fa_error_clear(&err);
        rc = feed_str(p, cases[i].line, &ev, &err);
        if (rc != FA_ERR_PROTOCOL || !strstr(err.msg, cases[i].needle))
            fail_msg("case %zu: got %d (%s), expected a protocol error with \"%s\"", i, rc, err.msg,
                     cases[i].needle);
        assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_BROKEN);
        /* broken for good */
        assert_int_equal(fa_trainer_proto_next(p, &ev, NULL), FA_ERR_STATE);
        assert_int_equal(fa_trainer_proto_shutdown(p, &(char *){NULL}, &(size_t){0}, NULL),
                         FA_ERR_STATE);
        fa_trainer_proto_del(p);
    }
}

/* Lines of exactly FA_TRAINER_MAX_LINE bytes pass; one byte more does not,
 * whether it arrives whole or in pieces (refused as soon as it is known to
 * be too long, before its end). */
static void test_proto_line_limit(void **state)
{
    const char *head = "{\"type\": \"hello\", \"protocol\": 1}";
    size_t n = FA_TRAINER_MAX_LINE;
    char *line = malloc(n + 2);
    fa_trainer_proto *p = NULL;
    fa_trainer_event ev;
    fa_error err;

    assert_non_null(line);
    memset(line, ' ', n);
    memcpy(line, head, strlen(head));
    line[n] = '\n';
    assert_int_equal(fa_trainer_proto_new(&p, 0, 1000, NULL), 0);
    for (size_t off = 0; off <= n; off += 65536) {
        size_t k = n + 1 - off < 65536 ? n + 1 - off : 65536;
        assert_int_equal(fa_trainer_proto_feed(p, line + off, k, NULL), 0);
    }
    assert_int_equal(fa_trainer_proto_next(p, &ev, NULL), 0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_HELLO);
    fa_trainer_proto_del(p);

    /* one more byte, in pieces: refused before the newline arrives */
    memset(line, 'x', n + 1);
    assert_int_equal(fa_trainer_proto_new(&p, 0, 1000, NULL), 0);
    assert_int_equal(fa_trainer_proto_feed(p, line, n, NULL), 0);
    assert_int_equal(fa_trainer_proto_feed(p, line, 1, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "longer than 1048576 bytes"));
    fa_trainer_proto_del(p);

    /* whole, with its newline, in one piece */
    line[n + 1] = '\n';
    assert_int_equal(fa_trainer_proto_new(&p, 0, 1000, NULL), 0);
    assert_int_equal(fa_trainer_proto_feed(p, line, n + 2, NULL), 0);
    assert_int_equal(fa_trainer_proto_next(p, &ev, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "longer than"));
    fa_trainer_proto_del(p);
    free(line);
}

static void test_proto_timeouts(void **state)
{
    fa_trainer_proto *p = NULL;
    fa_error err;

    assert_int_equal(fa_trainer_proto_new(&p, 1000, 5000, NULL), 0);
    assert_int_equal(fa_trainer_proto_check_time(p, 5999, &err), 0);
    assert_int_equal(fa_trainer_proto_check_time(p, 6000, &err), FA_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "start_timeout_s=5"));
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_BROKEN);
    fa_trainer_proto_del(p);

    p = idle_proto();
    /* idle: nothing is due */
    assert_int_equal(fa_trainer_proto_check_time(p, UINT64_MAX - 1, &err), 0);
    start_round(p, "train", 9, 10000);
    assert_int_equal(fa_trainer_proto_check_time(p, 69999, &err), 0);
    assert_int_equal(fa_trainer_proto_check_time(p, 70000, &err), FA_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "round 9"));
    assert_non_null(strstr(err.msg, "timeout_s=60"));
    fa_trainer_proto_del(p);
}

static void test_proto_error_and_evaluate(void **state)
{
    fa_trainer_proto *p = idle_proto();
    fa_trainer_round_msg m = {"evaluate", 4, 3, NULL, "/s/in", NULL};
    fa_trainer_event ev;
    char *line = NULL;
    size_t len = 0;
    json_t *o;

    start_round(p, "train", 3, 0);
    assert_int_equal(
        feed_str(p, "{\"type\": \"error\", \"round\": 3, \"message\": \"out of\\nmemory\"}\n", &ev,
                 NULL),
        0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_ERROR);
    assert_string_equal(ev.message, "out of memory"); /* control characters made harmless */
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_IDLE);

    /* evaluate: no output, no region; a done without num_examples is fine */
    assert_int_equal(fa_trainer_proto_round(p, &m, 0, 1000, &line, &len, NULL), 0);
    o = json_loadb(line, len, 0, NULL);
    assert_non_null(o);
    assert_null(json_object_get(o, "output"));
    assert_null(json_object_get(o, "region"));
    json_decref(o);
    free(line);
    assert_int_equal(feed_str(p,
                              "{\"type\": \"done\", \"round\": 4, \"eval\": {\"num_examples\": 9, "
                              "\"accuracy\": 0.5}}\n",
                              &ev, NULL),
                     0);
    assert_int_equal(ev.kind, FA_TRAINER_EV_DONE);
    assert_true(ev.result.eval.present && ev.result.eval.num_examples == 9);
    assert_true(isnan(ev.result.eval.loss));

    /* not idle; not UTF-8 */
    start_round(p, "train", 5, 0);
    assert_int_equal(fa_trainer_proto_round(p, &m, 0, 1000, &line, &len, NULL), FA_ERR_STATE);
    fa_trainer_proto_del(p);
    p = idle_proto();
    m.input = "/s/\xff";
    assert_int_equal(fa_trainer_proto_round(p, &m, 0, 1000, &line, &len, NULL), FA_ERR_INVAL);
    assert_int_equal(fa_trainer_proto_state(p), FA_TRAINER_IDLE);
    fa_trainer_proto_del(p);
}

/* ---------------------------------------------------------------------- */
/* The session, with processes                                             */
/* ---------------------------------------------------------------------- */

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
    {
        const char *p = strrchr(buf, ')');
        return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
    }
}

static void assert_dies(long pid)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    assert_true(pid > 0);
    for (int i = 0; i < 100 && pid_alive((pid_t)pid); i++)
        nanosleep(&ts, NULL);
    assert_false(pid_alive((pid_t)pid));
}

static char scratch[300], logpath[340], statefile[340], markfile[340];
static char env_state[400], env_mark[400];

static fa_trainer_session *session(const char *behaviour, uint32_t start_s, uint32_t timeout_s,
                                   const volatile sig_atomic_t *cancel)
{
    char *argv[] = {PY, script, (char *)behaviour, NULL};
    char *env[] = {env_state, env_mark};
    fa_trainer_session_opts o;
    fa_trainer_session *s = NULL;

    memset(&o, 0, sizeof(o));
    o.argv = argv;
    o.env = env;
    o.n_env = 2;
    o.workdir = tmpdir;
    o.scratch_dir = scratch;
    o.log_path = logpath;
    o.start_timeout_s = start_s;
    o.timeout_s = timeout_s;
    o.kill_grace_ms = 300;
    o.cancel = cancel;
    assert_int_equal(fa_trainer_session_new(&s, &o, NULL), 0);
    return s;
}

static int round_of(fa_trainer_session *s, const char *task, uint64_t r, fa_trainer_result *res,
                    fa_error *err)
{
    fa_trainer_round_msg m = {
        task, r, r - 1, "eu-west", "/nowhere/in.safetensors", "/nowhere/out.safetensors"};
    fa_error_clear(err);
    return fa_trainer_session_round(s, &m, res, err);
}

static void test_session_serves(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    long pid;
    FILE *f;
    char got[32] = "";

    if (!have_python())
        skip();
    unlink(markfile);
    s = session("ok", 30, 30, NULL);
    assert_int_equal(fa_trainer_session_pid(s), -1); /* started by the first round */
    assert_int_equal(round_of(s, "train", 3, &res, &err), 0);
    assert_int_equal(res.num_examples, 4);
    assert_true(fa_trainer_metric(&res.metrics, "round") == 3);
    pid = fa_trainer_session_pid(s);
    assert_true(pid > 0);
    assert_int_equal(round_of(s, "train", 4, &res, &err), 0);
    assert_int_equal(res.num_examples, 5);
    assert_int_equal(round_of(s, "evaluate", 5, &res, &err), 0);
    assert_true(res.eval.present && res.eval.accuracy == 0.4);
    assert_int_equal(fa_trainer_session_pid(s), pid);
    assert_int_equal(fa_trainer_session_starts(s), 1);
    fa_trainer_session_del(s);
    assert_dies(pid);
    /* it was asked to shut down, and did so by itself */
    f = fopen(markfile, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof(got), f));
    fclose(f);
    assert_string_equal(got, "shutdown");
    /* the socket is gone */
    {
        char sock[400];
        snprintf(sock, sizeof(sock), "%s/trainer.sock", scratch);
        assert_int_not_equal(access(sock, F_OK), 0);
    }
}

static void test_session_split_answer(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    if (!have_python())
        skip();
    s = session("split", 30, 30, NULL);
    assert_int_equal(round_of(s, "train", 1, &res, &err), 0);
    assert_int_equal(res.num_examples, 2);
    assert_int_equal(round_of(s, "train", 2, &res, &err), 0);
    assert_int_equal(res.num_examples, 3);
    fa_trainer_session_del(s);
}

/* A trainer that dies costs one round: the next one starts it again. */
static void test_session_restart_after_death(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    long pid;

    if (!have_python())
        skip();
    unlink(statefile);
    s = session("die_once", 30, 30, NULL);
    assert_int_equal(round_of(s, "train", 1, &res, &err), FA_ERR_CHILD);
    assert_non_null(strstr(err.msg, "exited with status 3 during round 1"));
    assert_non_null(strstr(err.msg, "fake_session.py die_once"));    /* the command */
    assert_non_null(strstr(err.msg, "dying on purpose in round 1")); /* its log's tail */
    assert_int_equal(fa_trainer_session_pid(s), -1);
    assert_int_equal(round_of(s, "train", 2, &res, &err), 0);
    assert_int_equal(res.num_examples, 3);
    assert_int_equal(fa_trainer_session_starts(s), 2);
    pid = fa_trainer_session_pid(s);
    fa_trainer_session_del(s);
    assert_dies(pid);
}

static void test_session_start_failures(void **state)
{
    static const struct {
        const char *behaviour;
        int code;
        const char *needle, *needle2;
    } cases[] = {
        {"noconnect", FA_ERR_TIMEOUT, "say hello within start_timeout_s=1", "starting"},
        {"nohello", FA_ERR_TIMEOUT, "say hello within start_timeout_s=1", NULL},
        {"exit_early", FA_ERR_CHILD, "exited with status 4 before saying hello",
         "cannot load the data set"},
        {"badproto", FA_ERR_PROTOCOL, "speaks protocol 1", NULL},
    };
    if (!have_python())
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fa_trainer_session *s = session(cases[i].behaviour, 1, 30, NULL);
        fa_trainer_result res;
        fa_error err;
        int rc = round_of(s, "train", 1, &res, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].needle) ||
            (cases[i].needle2 && !strstr(err.msg, cases[i].needle2)))
            fail_msg("%s: got %d (%s)", cases[i].behaviour, rc, err.msg);
        assert_int_equal(fa_trainer_session_pid(s), -1);
        fa_trainer_session_del(s);
    }
}

static void test_session_round_failures(void **state)
{
    static const struct {
        const char *behaviour;
        int code;
        const char *needle;
    } cases[] = {
        {"hang", FA_ERR_TIMEOUT, "did not answer round 1 within timeout_s=1"},
        {"garbage", FA_ERR_PROTOCOL, "not JSON"},
        {"array", FA_ERR_PROTOCOL, "not an object"},
        {"unknown", FA_ERR_PROTOCOL, "unknown type \"progress\""},
        {"longline", FA_ERR_PROTOCOL, "longer than 1048576 bytes"},
        {"wronground", FA_ERR_PROTOCOL, "is for round 2"},
        {"close", FA_ERR_CHILD, "closed its connection during round 1"},
    };
    if (!have_python())
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fa_trainer_session *s = session(cases[i].behaviour, 30, 1, NULL);
        fa_trainer_result res;
        fa_error err;
        int rc;
        /* started (and connected) before the round is handed over */
        rc = round_of(s, "train", 1, &res, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].needle) ||
            !strstr(err.msg, "long-lived trainer `"))
            fail_msg("%s: got %d (%s)", cases[i].behaviour, rc, err.msg);
        /* stopped: the next round starts a new one */
        assert_int_equal(fa_trainer_session_pid(s), -1);
        assert_int_equal(fa_trainer_session_starts(s), 1);
        {
            /* its whole group is gone: no process runs the script any more */
            char cmd[600];
            snprintf(cmd, sizeof(cmd), "pgrep -f 'fake_session.py %s$' >/dev/null",
                     cases[i].behaviour);
            for (int k = 0; k < 40 && system(cmd) == 0; k++)
                nanosleep(&(struct timespec){0, 50000000}, NULL);
            assert_int_not_equal(system(cmd), 0);
        }
        fa_trainer_session_del(s);
    }
}

/* "error": the trainer gives one round up and stays for the next. */
static void test_session_error_message(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    long pid;

    if (!have_python())
        skip();
    s = session("error", 30, 30, NULL);
    assert_int_equal(round_of(s, "train", 1, &res, &err), FA_ERR_CHILD);
    assert_non_null(strstr(err.msg, "gave round 1 up: CUDA out of memory at step 3"));
    pid = fa_trainer_session_pid(s);
    assert_true(pid > 0);
    assert_int_equal(round_of(s, "train", 2, &res, &err), 0);
    assert_int_equal(fa_trainer_session_pid(s), pid);
    assert_int_equal(fa_trainer_session_starts(s), 1);
    fa_trainer_session_del(s);
    assert_dies(pid);
}

/* A trainer that ignores both the shutdown and SIGTERM gets SIGKILL. */
static void test_session_stubborn_is_killed(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    long pid;
    double t0;

    if (!have_python())
        skip();
    s = session("stubborn", 30, 30, NULL);
    assert_int_equal(round_of(s, "train", 1, &res, &err), 0);
    pid = fa_trainer_session_pid(s);
    t0 = fa_time_mono_s();
    fa_trainer_session_del(s);
    /* shutdown, then SIGTERM after 300 ms, then SIGKILL after 300 more */
    assert_true(fa_time_mono_s() - t0 >= 0.55);
    assert_true(fa_time_mono_s() - t0 < 5);
    assert_dies(pid);
}

static volatile sig_atomic_t cancel_flag;

static void on_alarm(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

/* The worker's signal flag stops a round in flight, and the trainer. */
static void test_session_cancel(void **state)
{
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    double t0;

    if (!have_python())
        skip();
    cancel_flag = 0;
    s = session("hang", 30, 600, &cancel_flag);
    signal(SIGALRM, on_alarm);
    alarm(2);
    t0 = fa_time_mono_s();
    assert_int_equal(round_of(s, "train", 1, &res, &err), FA_ERR_CANCELLED);
    assert_true(fa_time_mono_s() - t0 < 10);
    assert_non_null(strstr(err.msg, "stopped during round 1"));
    assert_int_equal(fa_trainer_session_pid(s), -1);
    assert_int_not_equal(system("pgrep -f 'fake_session.py hang$' >/dev/null"), 0);
    fa_trainer_session_del(s);
    signal(SIGALRM, SIG_DFL);
}

/* A scratch directory too long for a socket address: the socket goes to a
 * private directory under /tmp instead, removed at the end. */
static void test_session_long_path(void **state)
{
    char longdir[300];
    fa_trainer_session *s;
    fa_trainer_result res;
    fa_error err;
    char saved[300];

    if (!have_python())
        skip();
    snprintf(longdir, sizeof(longdir), "%s/%s", tmpdir,
             "a-scratch-directory-whose-name-is-long-enough-that-a-socket-in-it-does-not-fit-"
             "in-sun-path");
    assert_int_equal(mkdir(longdir, 0700), 0);
    memcpy(saved, scratch, sizeof(saved));
    snprintf(scratch, sizeof(scratch), "%s", longdir);
    s = session("ok", 30, 30, NULL);
    memcpy(scratch, saved, sizeof(saved));
    assert_int_equal(round_of(s, "train", 1, &res, &err), 0);
    assert_int_equal(res.num_examples, 2);
    fa_trainer_session_del(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proto_round_trip),
        cmocka_unit_test(test_proto_refusals),
        cmocka_unit_test(test_proto_line_limit),
        cmocka_unit_test(test_proto_timeouts),
        cmocka_unit_test(test_proto_error_and_evaluate),
        cmocka_unit_test(test_session_serves),
        cmocka_unit_test(test_session_split_answer),
        cmocka_unit_test(test_session_restart_after_death),
        cmocka_unit_test(test_session_start_failures),
        cmocka_unit_test(test_session_round_failures),
        cmocka_unit_test(test_session_error_message),
        cmocka_unit_test(test_session_stubborn_is_killed),
        cmocka_unit_test(test_session_cancel),
        cmocka_unit_test(test_session_long_path),
    };
    const char *src = getenv("FA_SRC");
    int rc;

    if (src) {
        snprintf(script, sizeof(script), "%s/tests/worker/fake_session.py", src);
    } else {
        const char *cut = strstr(__FILE__, "tests/unit/");
        snprintf(script, sizeof(script), "%.*stests/worker/fake_session.py",
                 cut ? (int)(cut - __FILE__) : 0, __FILE__);
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_session.XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    snprintf(scratch, sizeof(scratch), "%s", tmpdir);
    snprintf(logpath, sizeof(logpath), "%s/trainer.log", tmpdir);
    snprintf(statefile, sizeof(statefile), "%s/died", tmpdir);
    snprintf(markfile, sizeof(markfile), "%s/mark", tmpdir);
    snprintf(env_state, sizeof(env_state), "FAKE_STATE=%s", statefile);
    snprintf(env_mark, sizeof(env_mark), "FAKE_MARK=%s", markfile);
    if (!have_python())
        fprintf(stderr, "test_worker_session: " PY " not found; the session runs are skipped\n");
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_worker_session: could not remove %s\n", tmpdir);
    }
    return rc;
}
