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

/* Steps the optimizer over STEPS random deltas against the reference, the
 * state kept by the test as the aggregator keeps it in files: every other
 * step in chunks of odd sizes (a chunked step gives the same bits), and
 * each output alone. */
static void check_kind(int kind)
{
    struct fa_server_opt_params p = {kind, 0.03, 0.9, 0.9, 0.99, 1e-3};
    fa_server_opt *o;
    float w[D], w_alone[D], delta[D], st[2][D], nx[2][D], alone[2][D];
    double x[D], m[D] = {0}, v[D], g[D];
    uint64_t seed = 42 + (uint64_t)kind;
    size_t ns;

    if (kind == FA_SERVER_OPT_FEDAVG)
        p.learning_rate = 1.0;
    assert_int_equal(fa_server_opt_new(&o, &p, NULL), 0);
    ns = fa_server_opt_state_count(o);
    for (size_t k = 0; k < ns; k++)
        fa_server_opt_state_init(o, k, st[k], D);
    for (int i = 0; i < D; i++) {
        x[i] = urand(&seed);
        w[i] = (float)x[i];
        v[i] = p.tau * p.tau;
        if (ns > 1)
            assert_true(st[1][i] == (float)(p.tau * p.tau) && st[0][i] == 0.0f);
    }
    for (int s = 0; s < STEPS; s++) {
        const float *state[2] = {st[0], st[1]};
        for (int i = 0; i < D; i++) {
            /* scale varies per step so Yogi's sign flips both ways */
            g[i] = urand(&seed) * (s % 3 == 0 ? 1e-4 : 0.1);
            delta[i] = (float)g[i];
            g[i] = delta[i];
        }
        reference(kind, &p, x, m, v, g);
        /* each output alone, from the same state: the same bits */
        memcpy(w_alone, w, sizeof(w));
        fa_server_opt_step(o, D, w_alone, delta, state, NULL);
        for (size_t k = 0; k < ns; k++) {
            float *only[2] = {NULL, NULL};
            only[k] = alone[k];
            fa_server_opt_step(o, D, NULL, delta, state, only);
        }
        if (s % 2 == 0) {
            float *next[2] = {nx[0], nx[1]}; /* whole */
            fa_server_opt_step(o, D, w, delta, state, next);
            memcpy(st, nx, sizeof(st));
        } else {
            for (size_t off = 0, n = 1; off < D; off += n, n = n * 3 + 2) {
                const float *sc[2] = {st[0] + off, st[1] + off};
                float *nc[2] = {nx[0] + off, nx[1] + off};
                if (n > D - off)
                    n = D - off;
                fa_server_opt_step(o, n, w + off, delta + off, sc, nc);
            }
            memcpy(st, nx, sizeof(st));
        }
        assert_memory_equal(w, w_alone, sizeof(w));
        for (size_t k = 0; k < ns; k++)
            assert_memory_equal(st[k], alone[k], sizeof(st[k]));
    }
    for (int i = 0; i < D; i++)
        assert_true(fabs(w[i] - x[i]) <= 1e-4 * (1 + fabs(x[i])));
    fa_server_opt_del(o);
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
    const float *none[2] = {NULL, NULL};
    fa_server_opt *o;
    float w[3] = {1, 2, 3}, d[3] = {0.5f, -2, 0};
    assert_int_equal(fa_server_opt_new(&o, &p, NULL), 0);
    fa_server_opt_step(o, 3, w, d, none, NULL);
    assert_true(w[0] == 1.5f && w[1] == 0.0f && w[2] == 3.0f);
    assert_int_equal(fa_server_opt_state_count(o), 0);
    fa_server_opt_del(o);
}

static void test_state_names(void **state)
{
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDADAM, 0.01, 0, 0.9, 0.99, 1e-3};
    fa_server_opt *o;

    assert_int_equal(fa_server_opt_new(&o, &p, NULL), 0);
    assert_int_equal(fa_server_opt_state_count(o), 2);
    assert_string_equal(fa_server_opt_state_name(o, 0), "m");
    assert_string_equal(fa_server_opt_state_name(o, 1), "v");
    assert_null(fa_server_opt_state_name(o, 2));
    fa_server_opt_del(o);
    p.kind = FA_SERVER_OPT_FEDAVGM;
    p.momentum = 0.5;
    assert_int_equal(fa_server_opt_new(&o, &p, NULL), 0);
    assert_int_equal(fa_server_opt_state_count(o), 1);
    assert_null(fa_server_opt_state_name(o, 1));
    fa_server_opt_del(o);
}

static void test_rejects_bad_hyperparameters(void **state)
{
    fa_server_opt *o = NULL;
    fa_error err;
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDADAM, 0.01, 0, 0.9, 1.0, 1e-3};

    assert_int_equal(fa_server_opt_new(&o, &p, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "beta2"));
    assert_null(o);
    p.beta2 = 0.99;
    p.tau = 0;
    assert_int_equal(fa_server_opt_new(&o, &p, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "tau"));
    p.tau = 1e-3;
    p.learning_rate = -1;
    assert_int_equal(fa_server_opt_new(&o, &p, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "learning_rate"));
    p.learning_rate = 0.1;
    p.kind = 99;
    assert_int_equal(fa_server_opt_new(&o, &p, &err), FA_ERR_INVAL);
    fa_server_opt_del(NULL);
}

static void test_describe(void **state)
{
    struct fa_server_opt_params p = {FA_SERVER_OPT_FEDYOGI, 0.01, 0, 0.9, 0.99, 0.001};
    fa_server_opt *o;
    char buf[128];
    assert_int_equal(fa_server_opt_new(&o, &p, NULL), 0);
    fa_server_opt_describe(o, buf, sizeof(buf));
    assert_string_equal(buf, "fedyogi lr=0.01 beta1=0.9 beta2=0.99 tau=0.001");
    fa_server_opt_del(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fedavg),      cmocka_unit_test(test_fedavgm),
        cmocka_unit_test(test_fedadam),     cmocka_unit_test(test_fedyogi),
        cmocka_unit_test(test_fedadagrad),  cmocka_unit_test(test_fedavg_lr1_is_plain_average),
        cmocka_unit_test(test_state_names), cmocka_unit_test(test_rejects_bad_hyperparameters),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
