/* Allocation failures under the aggregator's decoders of a region's signed
 * statements, protobuf from the network: evaluation reports
 * (aggregator/eval_reports.h, POST /v1/evaluations) and privacy statements
 * (aggregator/privacy_ledger.h, POST /v1/privacy).  Every allocation
 * failing in turn (support/fail_alloc.h) must give an error with a
 * message, free everything, leave what was taken as it was, and never
 * crash.  The statements are the seeds of fuzz_aggregator_evalreports and
 * fuzz_aggregator_privacy, signed with their test key. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/eval_reports.h"
#include "aggregator/privacy_ledger.h"
#include "common/fa_file.h"
#include "tests/unit/support/fail_alloc.h"

struct input {
    uint8_t *data;
    size_t len;
    fa_eval_reports_member m;
    fa_failalloc_ref ref;
};

static void load(struct input *in, const char *dir, const char *seed)
{
    uint8_t s[32], sk[64];
    char path[4096];
    fa_error err;
    const char *src = getenv("FA_SRC");

    memset(in, 0, sizeof(*in));
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/%s/%s", src ? src : "..", dir, seed);
    if (fa_file_read_all(path, &in->data, &in->len, 1 << 20, &err) != 0)
        fail_msg("%s", err.msg);
    memset(s, 7, sizeof(s)); /* the corpus's test key */
    crypto_sign_seed_keypair(in->m.pk, sk, s);
    in->m.id = "eu-west";
}

/* A federation of one region taking its report of version 3, twice (a
 * retry is the same report), and summing it. */
static int submit(struct input *in, fa_error *err)
{
    fa_eval_reports *e = NULL;
    fa_eval_summary s;
    uint8_t sha[32];
    int rc = fa_eval_reports_new(&e, "fuzz", &in->m, 1, 0, err);

    memset(sha, 0xab, sizeof(sha));
    if (rc == 0) {
        fa_eval_reports_begin(e, 3, sha);
        rc = fa_eval_reports_submit(e, "eu-west", in->data, in->len, err);
        /* a refused report changes nothing */
        if (rc != 0 && fa_eval_reports_count(e) != 0)
            rc = fa_errorf(err, FA_ERR_STATE, "test: a refused report was counted");
    }
    if (rc == 0)
        rc = fa_eval_reports_submit(e, "eu-west", in->data, in->len, err);
    if (rc == 0 && fa_eval_reports_count(e) != 1)
        rc = fa_errorf(err, FA_ERR_STATE, "test: the retry counted twice");
    if (rc == 0)
        fa_eval_reports_summary(e, &s);
    fa_eval_reports_del(e);
    return rc;
}

static int accepted(void *arg, fa_error *err)
{
    return submit(arg, err);
}

static int refused(void *arg, fa_error *err)
{
    struct input *in = arg;
    return fa_failalloc_same(&in->ref, submit(in, err), err);
}

static void test_reports(void **state)
{
    struct input in;
    (void)state;

    /* protobuf-c reports a failed allocation as an undecodable message */
    load(&in, "aggregator_evalreports", "ok");
    fa_failalloc_check("report", accepted, &in, FA_ERR_PARSE);
    free(in.data);
    load(&in, "aggregator_evalreports", "badacc");
    fa_failalloc_check("report with a bad accuracy", refused, &in, FA_ERR_PARSE);
    free(in.data);
}

/* A privacy statement of round 3 attempt 1, twice (a retry is the same
 * statement). */
static int privacy(struct input *in, fa_error *err)
{
    fa_privacy_ledger *l = NULL;
    int rc = fa_privacy_ledger_new(&l, "fuzz", &in->m, 1, err);

    if (rc == 0) {
        fa_privacy_ledger_begin(l, 3, 1);
        rc = fa_privacy_ledger_submit(l, "eu-west", in->data, in->len, err);
        if (rc != 0 && fa_privacy_ledger_count(l) != 0)
            rc = fa_errorf(err, FA_ERR_STATE, "test: a refused statement was counted");
    }
    if (rc == 0)
        rc = fa_privacy_ledger_submit(l, "eu-west", in->data, in->len, err);
    if (rc == 0 && fa_privacy_ledger_count(l) != 1)
        rc = fa_errorf(err, FA_ERR_STATE, "test: the retry counted twice");
    fa_privacy_ledger_del(l);
    return rc;
}

static int privacy_accepted(void *arg, fa_error *err)
{
    return privacy(arg, err);
}

static int privacy_refused(void *arg, fa_error *err)
{
    struct input *in = arg;
    return fa_failalloc_same(&in->ref, privacy(in, err), err);
}

static void test_privacy(void **state)
{
    struct input in;
    (void)state;

    load(&in, "aggregator_privacy", "ok");
    fa_failalloc_check("privacy statement", privacy_accepted, &in, FA_ERR_PARSE);
    free(in.data);
    load(&in, "aggregator_privacy", "otherattempt");
    fa_failalloc_check("privacy statement of another attempt", privacy_refused, &in, FA_ERR_PARSE);
    free(in.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reports),
                                       cmocka_unit_test(test_privacy)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
