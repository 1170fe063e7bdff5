/* Unit tests of worker/trainer_result: the results an external trainer
 * reports (results file, "done" message), every field optional but well
 * formed when present; the privacy object of a round under differential
 * privacy. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "worker/trainer_result.h"

static int parse(fa_trainer_result *r, const char *s, fa_error *err)
{
    fa_error_clear(err);
    return fa_trainer_result_parse(r, s, strlen(s), "results.json", err);
}

static void test_full_and_empty(void **state)
{
    fa_trainer_result r;
    fa_error err;

    assert_int_equal(parse(&r,
                           "{\"num_examples\": 20000, \"metrics\": {\"loss\": 0.41, \"lr\": 1e-3}, "
                           "\"eval\": {\"num_examples\": 2000, \"loss\": 0.52, \"accuracy\": 0.83, "
                           "\"metrics\": {\"f1\": 0.7}}, \"future_field\": [1]}",
                           &err),
                     0);
    assert_int_equal(r.num_examples, 20000);
    assert_int_equal(r.metrics.n, 2);
    assert_true(fa_trainer_metric(&r.metrics, "lr") == 1e-3);
    assert_true(isnan(fa_trainer_metric(&r.metrics, "nope")));
    assert_true(r.eval.present);
    assert_int_equal(r.eval.num_examples, 2000);
    assert_true(r.eval.loss == 0.52 && r.eval.accuracy == 0.83);
    assert_true(fa_trainer_metric(&r.eval.metrics, "f1") == 0.7);

    /* nothing at all is fine here (the caller decides what a task needs) */
    assert_int_equal(parse(&r, "{}", &err), 0);
    assert_int_equal(r.num_examples, 0);
    assert_false(r.eval.present);
    assert_true(isnan(r.eval.loss) && isnan(r.eval.accuracy));
    /* nulls are absent; a real with an integral value counts */
    assert_int_equal(parse(&r, "{\"num_examples\": 12.0, \"metrics\": null, \"eval\": null}", &err),
                     0);
    assert_int_equal(r.num_examples, 12);
    assert_int_equal(parse(&r, "{\"eval\": {\"num_examples\": 3}}", &err), 0);
    assert_true(r.eval.present && isnan(r.eval.accuracy));
    assert_false(r.privacy.present);
}

static void test_privacy(void **state)
{
    fa_trainer_result r;
    fa_error err;

    assert_int_equal(parse(&r,
                           "{\"num_examples\": 100, \"privacy\": {\"mechanism\": \"dp-sgd\", "
                           "\"noise_multiplier\": 1.1, \"sampling_rate\": 0.0128, \"steps\": 79, "
                           "\"clip\": 1.0, \"epsilon\": 0.93, \"delta\": 1e-5, "
                           "\"accountant\": \"opacus-rdp\", \"later\": 1}}",
                           &err),
                     0);
    assert_true(r.privacy.present);
    assert_string_equal(r.privacy.mechanism, "dp-sgd");
    assert_true(r.privacy.noise_multiplier == 1.1 && r.privacy.sampling_rate == 0.0128);
    assert_int_equal(r.privacy.steps, 79);
    assert_true(r.privacy.clip == 1.0 && r.privacy.epsilon == 0.93 && r.privacy.delta == 1e-5);
    assert_string_equal(r.privacy.accountant, "opacus-rdp");
    /* only the mechanism is required here; the rest absent is NaN / 0 / "" */
    assert_int_equal(parse(&r, "{\"privacy\": {\"mechanism\": \"x\", \"epsilon\": null}}", &err), 0);
    assert_true(r.privacy.present && isnan(r.privacy.noise_multiplier) &&
                isnan(r.privacy.epsilon) && isnan(r.privacy.delta) && isnan(r.privacy.clip) &&
                isnan(r.privacy.sampling_rate));
    assert_int_equal(r.privacy.steps, 0);
    assert_string_equal(r.privacy.accountant, "");
    assert_int_equal(parse(&r, "{\"privacy\": null}", &err), 0);
    assert_false(r.privacy.present);
}

static void test_refusals(void **state)
{
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"", "results.json:"},
        {"[1]", "not a JSON object"},
        {"{\"num_examples\": 0}", "\"num_examples\" must be an integer >= 1"},
        {"{\"num_examples\": -3}", "\"num_examples\""},
        {"{\"num_examples\": 2.5}", "\"num_examples\""},
        {"{\"num_examples\": \"12\"}", "\"num_examples\""},
        {"{\"metrics\": [1]}", "\"metrics\" must be an object"},
        {"{\"metrics\": {\"loss\": \"low\"}}", "metric \"loss\" in \"metrics\""},
        {"{\"metrics\": {\"\": 1}}", "1 to 63 bytes"},
        {"{\"eval\": 3}", "\"eval\" must be an object"},
        {"{\"eval\": {\"loss\": 1}}", "eval.num_examples"},
        {"{\"eval\": {\"num_examples\": 3, \"loss\": \"x\"}}", "eval.loss"},
        {"{\"eval\": {\"num_examples\": 3, \"accuracy\": -0.1}}", "eval.accuracy"},
        {"{\"eval\": {\"num_examples\": 3, \"metrics\": {\"a\": true}}}", "eval.metrics"},
        {"{\"num_examples\": 1, \"num_examples\": 2}", "duplicate"},
        {"{\"privacy\": 1}", "\"privacy\" must be an object"},
        {"{\"privacy\": {}}", "privacy.mechanism"},
        {"{\"privacy\": {\"mechanism\": \"\"}}", "privacy.mechanism"},
        {"{\"privacy\": {\"mechanism\": 3}}", "privacy.mechanism"},
        {"{\"privacy\": {\"mechanism\": \"a\\u0000b\"}}", "not allowed"}, /* by jansson */
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"noise_multiplier\": -1}}",
         "privacy.noise_multiplier"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"sampling_rate\": 0}}",
         "privacy.sampling_rate"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"sampling_rate\": 1.5}}",
         "privacy.sampling_rate"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"steps\": 0}}", "privacy.steps"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"steps\": 2.5}}", "privacy.steps"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"clip\": 0}}", "privacy.clip"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"epsilon\": -0.5}}", "privacy.epsilon"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"epsilon\": \"low\"}}", "privacy.epsilon"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"delta\": 1}}", "privacy.delta"},
        {"{\"privacy\": {\"mechanism\": \"dp-sgd\", \"accountant\": 7}}", "privacy.accountant"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fa_trainer_result r;
        fa_error err;
        int rc = parse(&r, cases[i].text, &err);
        if (rc != FA_ERR_PARSE || !strstr(err.msg, cases[i].needle) ||
            !strstr(err.msg, "results.json"))
            fail_msg("%s: got %d (%s), expected \"%s\"", cases[i].text, rc, err.msg,
                     cases[i].needle);
    }
    {
        /* more metrics than are taken */
        char text[4096];
        size_t n = (size_t)snprintf(text, sizeof(text), "{\"metrics\": {");
        fa_trainer_result r;
        fa_error err;
        for (int i = 0; i <= FA_TRAINER_MAX_METRICS; i++)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\"m%d\": %d", i ? ", " : "", i, i);
        snprintf(text + n, sizeof(text) - n, "}}");
        assert_int_equal(parse(&r, text, &err), FA_ERR_PARSE);
        assert_non_null(strstr(err.msg, "at most 32"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_and_empty),
        cmocka_unit_test(test_privacy),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
