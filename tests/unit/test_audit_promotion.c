/* The promotion rule (audit/promotion.h): evidence from statements, the
 * baselines, the tolerance at its boundary, the quorum, the directions,
 * the actions, and the rule's record form. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "audit/promotion.h"

static fa_promo_policy policy(const char *metric)
{
    Fedagg__PromotionPolicy cfg = FEDAGG__PROMOTION_POLICY__INIT;
    fa_promo_policy p;
    fa_error err;
    cfg.metric = (char *)metric;
    cfg.tolerance = 0.01;
    cfg.min_regions = 2;
    cfg.baseline_window = 5;
    assert_int_equal(fa_promo_policy_from_config(&p, &cfg, &err), 0);
    return p;
}

static fa_promo_evidence ev(double v, uint32_t regions)
{
    fa_promo_evidence e = {v, regions, 100u * regions};
    return e;
}

static void test_first_candidate_sets_the_baseline(void **state)
{
    fa_promo_policy p = policy("accuracy");
    fa_promo_evidence e = ev(0.42, 2);
    fa_promo_verdict v;
    (void)state;
    fa_promo_decide(&p, &e, NULL, 0, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
    assert_int_equal(v.has_baseline, 0);
    assert_int_equal(v.action, FA_PROMO_ACT_NONE);
    assert_non_null(strstr(v.reason, "first baseline"));
}

static void test_tolerance_boundary(void **state)
{
    fa_promo_policy p = policy("accuracy");
    fa_promo_entry h[] = {{3, 0.80}};
    fa_promo_evidence in = ev(0.80 - 0.01, 3), out = ev(nextafter(0.80 - 0.01, 0), 3);
    fa_promo_verdict v;
    (void)state;
    /* exactly the tolerance below: promoted */
    fa_promo_decide(&p, &in, h, 1, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
    assert_int_equal(v.has_baseline, 1);
    assert_int_equal(v.baseline_version, 3);
    /* the next double below it: rejected, rolled back (the default) */
    fa_promo_decide(&p, &out, h, 1, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_REJECTED);
    assert_int_equal(v.action, FA_PROMO_ACT_ROLLBACK);
    assert_non_null(strstr(v.reason, "the last promoted, version 3"));
    assert_non_null(strstr(v.reason, "accuracy"));
}

static void test_quorum_waits_then_expires(void **state)
{
    fa_promo_policy p = policy("accuracy");
    fa_promo_entry h[] = {{1, 0.5}};
    fa_promo_evidence one = ev(0.1, 1), none = ev(NAN, 0);
    fa_promo_verdict v;
    (void)state;
    fa_promo_decide(&p, &one, h, 1, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_WAIT);
    fa_promo_decide(&p, &one, h, 1, 1, &v);
    assert_int_equal(v.outcome, FA_PROMO_EXPIRED);
    assert_int_equal(v.action, FA_PROMO_ACT_NONE);
    assert_non_null(strstr(v.reason, "1 of the 2"));
    /* no figure at all, even without a baseline: never promoted blind */
    fa_promo_decide(&p, &none, NULL, 0, 1, &v);
    assert_int_equal(v.outcome, FA_PROMO_EXPIRED);
}

static void test_best_of_last_window(void **state)
{
    fa_promo_policy p = policy("accuracy");
    /* a slow drift: each promoted one tolerance below the one before */
    fa_promo_entry h[] = {{1, 0.90}, {2, 0.70}, {3, 0.895}, {4, 0.886}, {5, 0.877}};
    fa_promo_evidence e = ev(0.868, 2);
    fa_promo_verdict v;
    (void)state;
    fa_promo_decide(&p, &e, h, 5, 0, &v); /* last promoted: 0.877 - 0.01 */
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
    p.best_of_last = 1;
    p.window = 0; /* all: 0.90 */
    fa_promo_decide(&p, &e, h, 5, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_REJECTED);
    assert_int_equal(v.baseline_version, 1);
    assert_true(v.baseline == 0.90);
    p.window = 4; /* versions 2..5: 0.895 */
    fa_promo_decide(&p, &e, h, 5, 0, &v);
    assert_int_equal(v.baseline_version, 3);
    assert_int_equal(v.outcome, FA_PROMO_REJECTED);
    p.window = 2; /* versions 4, 5: 0.886 */
    fa_promo_decide(&p, &e, h, 5, 0, &v);
    assert_int_equal(v.baseline_version, 4);
    assert_int_equal(v.outcome, FA_PROMO_REJECTED);
    p.window = 1; /* the last one: as BASELINE_LAST_PROMOTED */
    fa_promo_decide(&p, &e, h, 5, 0, &v);
    assert_int_equal(v.baseline_version, 5);
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
}

static void test_lower_is_better(void **state)
{
    fa_promo_policy p = policy("val_loss");
    fa_promo_entry h[] = {{2, 0.50}, {3, 0.40}};
    fa_promo_evidence worse = ev(0.42, 2), ok = ev(0.41, 2);
    fa_promo_verdict v;
    (void)state;
    assert_int_equal(p.higher_is_better, 0); /* DIRECTION_AUTO from the name */
    p.best_of_last = 1;
    fa_promo_decide(&p, &ok, h, 2, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
    assert_int_equal(v.baseline_version, 3);
    fa_promo_decide(&p, &worse, h, 2, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_REJECTED);
    assert_non_null(strstr(v.reason, ">"));
    p.on_regression = FA_PROMO_PAUSE;
    fa_promo_decide(&p, &worse, h, 2, 0, &v);
    assert_int_equal(v.action, FA_PROMO_ACT_PAUSE);
    p.on_regression = FA_PROMO_KEEP;
    fa_promo_decide(&p, &worse, h, 2, 0, &v);
    assert_int_equal(v.action, FA_PROMO_ACT_KEEP);
}

static void test_evidence_from_statements(void **state)
{
    Fedagg__EvalStatement a = FEDAGG__EVAL_STATEMENT__INIT, b = FEDAGG__EVAL_STATEMENT__INIT,
                          c = FEDAGG__EVAL_STATEMENT__INIT;
    Fedagg__NamedValue f1 = FEDAGG__NAMED_VALUE__INIT, *mv[] = {&f1};
    const Fedagg__EvalStatement *s[] = {&a, &b, &c};
    fa_promo_policy acc = policy("accuracy"), f1p = policy("f1");
    fa_promo_evidence e;
    (void)state;
    a.num_examples = 100;
    a.accuracy = 0.9;
    a.loss = 0.3;
    b.num_examples = 300;
    b.accuracy = 0.5;
    b.loss = NAN;
    c.num_examples = 50;
    c.accuracy = NAN; /* this region did not measure accuracy */
    c.loss = 1.0;
    f1.name = "f1";
    f1.value = 0.7;
    c.n_metrics = 1;
    c.metrics = mv;
    fa_promo_evidence_federated(&acc, s, 3, &e);
    assert_int_equal(e.regions, 2);
    assert_int_equal(e.examples, 400);
    assert_true(fabs(e.value - (100 * 0.9 + 300 * 0.5) / 400) < 1e-15);
    fa_promo_evidence_federated(&f1p, s, 3, &e);
    assert_int_equal(e.regions, 1);
    assert_true(e.value == 0.7);
    assert_int_equal(f1p.higher_is_better, 1);
    {
        fa_promo_policy l = policy("loss");
        fa_promo_evidence_federated(&l, s, 3, &e);
        assert_int_equal(e.regions, 2);
        assert_true(fabs(e.value - (100 * 0.3 + 50 * 1.0) / 150) < 1e-15);
        assert_int_equal(l.higher_is_better, 0);
    }
    {
        fa_promo_policy missing = policy("auc");
        fa_promo_evidence_federated(&missing, s, 3, &e);
        assert_int_equal(e.regions, 0);
        assert_true(isnan(e.value));
    }
}

static void test_central_source(void **state)
{
    Fedagg__EvalSummary c = FEDAGG__EVAL_SUMMARY__INIT;
    fa_promo_policy p = policy("accuracy");
    fa_promo_evidence e;
    fa_promo_verdict v;
    (void)state;
    p.central = 1;
    p.min_regions = 1;
    fa_promo_evidence_central(&p, NULL, &e);
    fa_promo_decide(&p, &e, NULL, 0, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_WAIT);
    assert_non_null(strstr(v.reason, "evaluator"));
    c.accuracy = 0.61;
    c.num_examples = 10000;
    fa_promo_evidence_central(&p, &c, &e);
    assert_int_equal(e.regions, 1);
    assert_int_equal(e.examples, 10000);
    fa_promo_decide(&p, &e, NULL, 0, 0, &v);
    assert_int_equal(v.outcome, FA_PROMO_PROMOTED);
}

static void test_rule_record_form(void **state)
{
    fa_promo_policy p = policy("accuracy"), q;
    Fedagg__PromotionRule r;
    fa_error err;
    (void)state;
    p.best_of_last = 1;
    p.window = 3;
    p.on_regression = FA_PROMO_PAUSE;
    fa_promo_policy_to_pb(&p, &r);
    assert_string_equal(r.baseline, "best-of-last");
    assert_string_equal(r.on_regression, "pause");
    assert_int_equal(fa_promo_policy_from_pb(&q, &r, &err), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    r.on_regression = "shrug";
    assert_int_equal(fa_promo_policy_from_pb(&q, &r, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "shrug"));
    fa_promo_policy_to_pb(&p, &r);
    r.tolerance = -1;
    assert_int_equal(fa_promo_policy_from_pb(&q, &r, &err), FA_ERR_INVAL);
    r.tolerance = 0.01;
    r.metric = "bad name";
    assert_int_equal(fa_promo_policy_from_pb(&q, &r, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "bad name"));
    assert_int_equal(fa_promo_policy_from_pb(&q, NULL, &err), FA_ERR_INVAL);
}

static void test_names(void **state)
{
    (void)state;
    for (int i = 0; i <= FA_PROMO_EXPIRED; i++)
        assert_int_equal(fa_promo_outcome_parse(fa_promo_outcome_name(i)), i);
    for (int i = 0; i <= FA_PROMO_ACT_KEEP; i++)
        assert_int_equal(fa_promo_action_parse(fa_promo_action_name(i)), i);
    assert_int_equal(fa_promo_outcome_parse("maybe"), -1);
    assert_int_equal(fa_promo_outcome_parse(NULL), -1);
    assert_int_equal(fa_promo_lower_is_better("loss"), 1);
    assert_int_equal(fa_promo_lower_is_better("top1_error"), 1);
    assert_int_equal(fa_promo_lower_is_better("accuracy"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_candidate_sets_the_baseline),
        cmocka_unit_test(test_tolerance_boundary),
        cmocka_unit_test(test_quorum_waits_then_expires),
        cmocka_unit_test(test_best_of_last_window),
        cmocka_unit_test(test_lower_is_better),
        cmocka_unit_test(test_evidence_from_statements),
        cmocka_unit_test(test_central_source),
        cmocka_unit_test(test_rule_record_form),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
