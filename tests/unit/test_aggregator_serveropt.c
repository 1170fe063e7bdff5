/* Server optimizers against a double-precision transcription of Reddi et al.
 * 2021, Algorithm 2 (and FedAvgM), over several steps of random deltas. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/server_opt.h"

#define D 257
#define STEPS 12

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0;
}

static void reference(int kind, const struct fa_server_opt_params *p, double *x, double *m,
                      double *v, const double *g)
{
    for (int i = 0; i < D; i++) {
        double g2 = g[i] * g[i];
        switch (kind) {
        case FA_SERVER_OPT_FEDAVG: x[i] += p->learning_rate * g[i]; break;
        case FA_SERVER_OPT_FEDAVGM:
            m[i] = p->momentum * m[i] + g[i];
            x[i] += p->learning_rate * m[i];
            break;
        default:
            m[i] = p->beta1 * m[i] + (1 - p->beta1) * g[i];
            if (kind == FA_SERVER_OPT_FEDADAM)
                v[i] = p->beta2 * v[i] + (1 - p->beta2) * g2;
            else if (kind == FA_SERVER_OPT_FEDYOGI)
                v[i] = v[i] - (1 - p->beta2) * g2 * (v[i] > g2 ? 1 : v[i] < g2 ? -1 : 0);
            else
                v[i] = v[i] + g2;
            x[i] += p->learning_rate * m[i] / (sqrt(v[i]) + p->tau);
        }
    }
}

static void check_kind(int kind)
{
    struct fa_server_opt_params p = {kind, 0.03, 0.9, 0.9, 0.99, 1e-3};
    fa_server_opt *o;
    float w[D], delta[D], before[2][D], *next[2] = {malloc(D * sizeof(float)),
                                                    malloc(D * sizeof(float))};
    double x[D], m[D] = {0}, v[D], g[D];
    uint64_t seed = 42 + (uint64_t)kind;
    size_t ns;

    if (kind == FA_SERVER_OPT_FEDAVG)
        p.learning_rate = 1.0;
    assert_int_equal(fa_server_opt_new(&o, &p, D, NULL), 0);
    for (int i = 0; i < D; i++) {
        x[i] = urand(&seed);
        w[i] = (float)x[i];
        v[i] = p.tau * p.tau;
    }
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < D; i++) {
            /* scale varies per step so Yogi's sign flips both ways */
            g[i] = urand(&seed) * (s % 3 == 0 ? 1e-4 : 0.1);
            delta[i] = (float)g[i];
            g[i] = delta[i];
        }
        reference(kind, &p, x, m, v, g);
        if (s % 2 == 0) {
            fa_server_opt_step(o, w, delta);
            continue;
        }
        /* every other step in two halves: the state stays as it was until
         * adopted (a failed commit undoes nothing but w) */
        ns = fa_server_opt_state_count(o);
        for (size_t k = 0; k < ns; k++)
            memcpy(before[k], fa_server_opt_state(o, k), sizeof(before[k]));
        fa_server_opt_step_to(o, w, delta, next);
        for (size_t k = 0; k < ns; k++)
            assert_memory_equal(before[k], fa_server_opt_state(o, k), sizeof(before[k]));
        assert_int_equal(fa_server_opt_steps(o), (uint64_t)s);
        fa_server_opt_adopt(o, next);
        assert_int_equal(fa_server_opt_steps(o), (uint64_t)s + 1);
        for (size_t k = 0; k < ns; k++)
            assert_memory_equal(before[k], next[k], sizeof(before[k])); /* handed back */
    }
    for (int i = 0; i < D; i++)
        assert_true(fabs(w[i] - x[i]) <= 1e-4 * (1 + fabs(x[i])));
    assert_int_equal(fa_server_opt_steps(o), STEPS);
    fa_server_opt_del(o);
    free(next[0]);
    free(next[1]);
}

static void test_fedavg(void **state)
{
    check_kind(FA_SERVER_OPT_FEDAVG);
}
static void test_fedavgm(void **state)
{
    check_kind(FA_SERVER_OPT_FEDAVGM);
}
static void test_fedadam(void **state)
{
    check_kind(FA_SERVER_OPT_FEDADAM);
}
static void test_fedyogi(void **state)
{
    check_kind(FA_SERVER_OPT_FEDYOGI);
}
static void test_fedadagrad(void **state)
{
    check_kind(FA_SERVER_OPT_FEDADAGRAD);
}

static void test_fedavg_lr1_is_plain_average(void **state)
{
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDAVG, 1.0, 0, 0, 0, 0};
    fa_server_opt *o;
    float w[3] = {1, 2, 3}, d[3] = {0.5f, -2, 0};
    assert_int_equal(fa_server_opt_new(&o, &p, 3, NULL), 0);
    fa_server_opt_step(o, w, d);
    assert_true(w[0] == 1.5f && w[1] == 0.0f && w[2] == 3.0f);
    assert_int_equal(fa_server_opt_state_count(o), 0);
    fa_server_opt_del(o);
}

static void test_state_restore_continues_identically(void **state)
{
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDADAM, 0.01, 0, 0.9, 0.99, 1e-3};
    fa_server_opt *a, *b;
    float wa[D], wb[D], d[D];
    uint64_t seed = 7;

    assert_int_equal(fa_server_opt_new(&a, &p, D, NULL), 0);
    for (int i = 0; i < D; i++)
        wa[i] = (float)urand(&seed);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < D; i++)
            d[i] = (float)urand(&seed) * 0.01f;
        fa_server_opt_step(a, wa, d);
    }
    /* "restart": a fresh optimizer given a's state */
    assert_int_equal(fa_server_opt_new(&b, &p, D, NULL), 0);
    assert_int_equal(fa_server_opt_state_count(b), 2);
    assert_string_equal(fa_server_opt_state_name(b, 1), "v");
    for (size_t k = 0; k < 2; k++)
        memcpy(fa_server_opt_state(b, k), fa_server_opt_state(a, k), sizeof(float) * D);
    fa_server_opt_set_steps(b, fa_server_opt_steps(a));
    memcpy(wb, wa, sizeof(wa));
    for (int i = 0; i < D; i++)
        d[i] = (float)urand(&seed) * 0.01f;
    fa_server_opt_step(a, wa, d);
    fa_server_opt_step(b, wb, d);
    assert_memory_equal(wa, wb, sizeof(wa));
    assert_int_equal(fa_server_opt_steps(b), 4);
    fa_server_opt_del(a);
    fa_server_opt_del(b);
}

static void test_rejects_bad_hyperparameters(void **state)
{
    fa_server_opt *o = NULL;
    fa_error err;
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDADAM, 0.01, 0, 0.9, 1.0, 1e-3};

    assert_int_equal(fa_server_opt_new(&o, &p, 4, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "beta2"));
    assert_null(o);
    p.beta2 = 0.99;
    p.tau = 0;
    assert_int_equal(fa_server_opt_new(&o, &p, 4, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "tau"));
    p.tau = 1e-3;
    p.learning_rate = -1;
    assert_int_equal(fa_server_opt_new(&o, &p, 4, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "learning_rate"));
    p.learning_rate = 0.1;
    p.kind = 99;
    assert_int_equal(fa_server_opt_new(&o, &p, 4, &err), FA_ERR_INVAL);
    fa_server_opt_del(NULL);
}

static void test_describe(void **state)
{
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDYOGI, 0.01, 0, 0.9, 0.99, 0.001};
    fa_server_opt *o;
    char buf[128];
    assert_int_equal(fa_server_opt_new(&o, &p, 1, NULL), 0);
    fa_server_opt_describe(o, buf, sizeof(buf));
    assert_string_equal(buf, "fedyogi lr=0.01 beta1=0.9 beta2=0.99 tau=0.001");
    fa_server_opt_del(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fedavg),
        cmocka_unit_test(test_fedavgm),
        cmocka_unit_test(test_fedadam),
        cmocka_unit_test(test_fedyogi),
        cmocka_unit_test(test_fedadagrad),
        cmocka_unit_test(test_fedavg_lr1_is_plain_average),
        cmocka_unit_test(test_state_restore_continues_identically),
        cmocka_unit_test(test_rejects_bad_hyperparameters),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
