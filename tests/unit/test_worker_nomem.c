/* Allocation failures under the long-lived trainer's line protocol
 * (worker/trainer_proto.h), which parses what a trainer process writes to
 * its socket: every allocation failing in turn (support/fail_alloc.h) must
 * give an error with a message, free everything, and never crash.  The
 * trainer's lines are the seeds of fuzz_worker_trainerproto. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "tests/unit/support/fail_alloc.h"
#include "worker/trainer_proto.h"

struct input {
    uint8_t *data; /* a seed: its first byte chose the fuzzer's mode */
    size_t len;
    fa_failalloc_ref ref;
};

static void load(struct input *in, const char *seed)
{
    char path[4096];
    fa_error err;
    const char *src = getenv("FA_SRC");
    memset(in, 0, sizeof(*in));
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/worker_trainerproto/%s", src ? src : "..",
             seed);
    if (fa_file_read_all(path, &in->data, &in->len, 1 << 20, &err) != 0)
        fail_msg("%s", err.msg);
}

/* The trainer's hello, a round handed over, then the seed's lines as the
 * trainer's answer; every event taken.  Returns the first refusal. */
static int session(struct input *in, fa_error *err)
{
    static const char hello[] = "{\"type\": \"hello\", \"protocol\": 1}\n";
    fa_trainer_round_msg m = {"train", 7, 6, "eu-west", "/in", "/out"};
    fa_trainer_proto *p = NULL;
    fa_trainer_event ev;
    char *line = NULL;
    size_t len;
    int rc = fa_trainer_proto_new(&p, 0, 1000, err);

    if (rc == 0)
        rc = fa_trainer_proto_feed(p, hello, sizeof(hello) - 1, err);
    if (rc == 0)
        rc = fa_trainer_proto_next(p, &ev, err);
    if (rc == 0 && ev.kind != FA_TRAINER_EV_HELLO)
        rc = fa_errorf(err, FA_ERR_STATE, "test: no hello event");
    if (rc == 0)
        rc = fa_trainer_proto_round(p, &m, 0, 1000, &line, &len, err);
    free(line);
    if (rc == 0)
        rc = fa_trainer_proto_feed(p, in->data + 1, in->len - 1, err);
    while (rc == 0) {
        rc = fa_trainer_proto_next(p, &ev, err);
        if (rc == 0 && ev.kind == FA_TRAINER_EV_NONE)
            break;
    }
    if (rc == 0)
        rc = fa_trainer_proto_shutdown(p, &line, &len, err);
    if (rc == 0)
        free(line);
    fa_trainer_proto_del(p);
    return rc;
}

static int accepted(void *arg, fa_error *err)
{
    return session(arg, err);
}

static int refused(void *arg, fa_error *err)
{
    struct input *in = arg;
    return fa_failalloc_same(&in->ref, session(in, err), err);
}

static void test_protocol(void **state)
{
    static const char *const good[] = {"done", "error"};
    static const char *const bad[] = {"badversion", "otherround", "twohello"};
    struct input in;
    (void)state;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        load(&in, good[i]);
        /* jansson reports some failed allocations of its lexer as syntax
         * errors (common/fa_json.h): the protocol's FA_ERR_PROTOCOL is
         * taken for those */
        fa_failalloc_check(good[i], accepted, &in, FA_ERR_PROTOCOL);
        free(in.data);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        load(&in, bad[i]);
        fa_failalloc_check(bad[i], refused, &in, FA_ERR_PROTOCOL);
        free(in.data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_protocol)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
