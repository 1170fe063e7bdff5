/* Unit tests of worker/eval_report: the packed SignedEval verifies under
 * the region's public key in the evaluation domain only, carries exactly
 * the statement's fields (NaN for what was not measured), and malformed
 * reports are refused before anything is signed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/identity.h"
#include "fedagg.pb-c.h"
#include "worker/eval_report.h"

static uint8_t seed[FA_IDENTITY_SEED_BYTES], pk[FA_IDENTITY_PK_BYTES];

static void report(fa_eval_report *r)
{
    static const char *names[2] = {"f1", "top5"};
    static const double values[2] = {0.5, 0.875};
    memset(r, 0, sizeof(*r));
    r->federation_id = "demo";
    r->region = "eu-west";
    r->version = 12;
    for (int i = 0; i < 32; i++)
        r->model_sha256[i] = (uint8_t)(i * 7);
    r->num_examples = 2000;
    r->loss = 0.52;
    r->accuracy = 0.83;
    r->metric_names = names;
    r->metric_values = values;
    r->n_metrics = 2;
    r->unix_ms = 1764600000000ull;
}

static void test_signed_and_complete(void **state)
{
    fa_eval_report r;
    uint8_t *blob = NULL;
    size_t len = 0;
    Fedagg__SignedEval *se;
    Fedagg__EvalStatement *st;

    report(&r);
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, NULL), 0);
    se = fedagg__signed_eval__unpack(NULL, len, blob);
    assert_non_null(se);
    assert_int_equal(se->signature.len, FA_IDENTITY_SIG_BYTES);
    assert_int_equal(fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, se->statement.data,
                                                  se->statement.len, se->signature.data),
                     0);
    /* a signature for another kind of statement, or a plain one, is not this */
    assert_int_equal(fa_identity_verify_statement(pk, "fedagg-other-v1", se->statement.data,
                                                  se->statement.len, se->signature.data),
                     FA_ERR_VERIFY);
    assert_int_equal(
        fa_identity_verify(pk, se->statement.data, se->statement.len, se->signature.data),
        FA_ERR_VERIFY);
    /* a byte changed in the statement breaks it */
    se->statement.data[3] ^= 1;
    assert_int_equal(fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, se->statement.data,
                                                  se->statement.len, se->signature.data),
                     FA_ERR_VERIFY);
    se->statement.data[3] ^= 1;

    st = fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
    assert_non_null(st);
    assert_string_equal(st->federation_id, "demo");
    assert_string_equal(st->region, "eu-west");
    assert_int_equal(st->model_version, 12);
    assert_int_equal(st->model_sha256.len, 32);
    assert_memory_equal(st->model_sha256.data, r.model_sha256, 32);
    assert_int_equal(st->num_examples, 2000);
    assert_true(st->loss == 0.52 && st->accuracy == 0.83);
    assert_int_equal(st->n_metrics, 2);
    assert_string_equal(st->metrics[1]->name, "top5");
    assert_true(st->metrics[1]->value == 0.875);
    assert_int_equal(st->unix_ms, 1764600000000ull);
    fedagg__eval_statement__free_unpacked(st, NULL);
    fedagg__signed_eval__free_unpacked(se, NULL);
    free(blob);

    /* not measured: NaN, and no metrics */
    report(&r);
    r.accuracy = NAN;
    r.loss = NAN;
    r.n_metrics = 0;
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, NULL), 0);
    se = fedagg__signed_eval__unpack(NULL, len, blob);
    st = fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
    assert_true(isnan(st->accuracy) && isnan(st->loss));
    assert_int_equal(st->n_metrics, 0);
    fedagg__eval_statement__free_unpacked(st, NULL);
    fedagg__signed_eval__free_unpacked(se, NULL);
    free(blob);
}

static void test_refusals(void **state)
{
    static const char *empty[1] = {""};
    static const double one[1] = {1};
    fa_eval_report r;
    uint8_t *blob = (uint8_t *)"sentinel";
    size_t len = 5;
    fa_error err;

    report(&r);
    r.num_examples = 0;
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, &err), FA_ERR_INVAL);
    assert_null(blob);
    assert_int_equal(len, 0);
    assert_non_null(strstr(err.msg, "num_examples"));
    report(&r);
    r.accuracy = 1.5;
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "accuracy 1.5"));
    report(&r);
    r.loss = INFINITY;
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "loss"));
    report(&r);
    r.region = "";
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, &err), FA_ERR_INVAL);
    report(&r);
    r.metric_names = empty;
    r.metric_values = one;
    r.n_metrics = 1;
    assert_int_equal(fa_eval_report_sign(&r, seed, &blob, &len, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "no name"));
}

static int setup(void **state)
{
    for (int i = 0; i < FA_IDENTITY_SEED_BYTES; i++)
        seed[i] = (uint8_t)(0x40 + i);
    return fa_identity_public_key(seed, pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signed_and_complete),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
