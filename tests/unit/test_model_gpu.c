/* CPU vs GPU: the cuBLAS backend computes the same logits, loss, gradients
 * and SGD trajectory as the OpenBLAS one, to float rounding.  Without a GPU
 * (or without CUDA in the build) the comparison is skipped with a message
 * saying why, and what a GPU request returns instead is checked. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"
#include "model/rng.h"
#include "model/train.h"

static fa_mlp *make(int backend, fa_error *err, int *rc)
{
    fa_mlp_config c;
    fa_mlp_opts o;
    fa_mlp *m = NULL;
    fa_mlp_config_default(&c);
    fa_mlp_opts_default(&o);
    o.backend = backend;
    o.max_batch = 128;
    *rc = fa_mlp_new(&m, &c, &o, err);
    return m;
}

static void test_gpu_request_without_device(void **state)
{
    fa_error err;
    int rc;

    if (fa_mlp_gpu_count() > 0)
        skip();
    fa_mlp *m = make(FA_MLP_GPU, &err, &rc);
    assert_null(m);
#ifdef FA_HAVE_CUDA
    assert_int_equal(rc, FA_ERR_NODEVICE);
    assert_non_null(strstr(err.msg, "no GPU device"));
#else
    assert_int_equal(rc, FA_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no CUDA support"));
#endif
    print_message("GPU request without a device: %s\n", err.msg);
    /* AUTO falls back to the CPU */
    m = make(FA_MLP_AUTO, &err, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(fa_mlp_backend(m), FA_MLP_CPU);
    fa_mlp_del(m);
}

static int close_enough(const float *a, const float *b, size_t n, double rel, double abs_tol,
                        const char *what)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > abs_tol + rel * fabs(a[i])) {
            print_error("%s[%zu]: cpu %.9g gpu %.9g\n", what, i, (double)a[i], (double)b[i]);
            return 0;
        }
        worst = d > worst ? d : worst;
    }
    print_message("%s: %zu values, max |cpu - gpu| %.2e\n", what, n, worst);
    return 1;
}

static void test_cpu_gpu_same_math(void **state)
{
    fa_error err;
    int rc;

    if (fa_mlp_gpu_count() == 0) {
        print_message("SKIPPED: no GPU device (cudaGetDeviceCount found none, or the build has "
                      "no CUDA): CPU vs GPU comparison not run\n");
        skip();
    }
    fa_mlp *cpu = make(FA_MLP_CPU, &err, &rc), *gpu = make(FA_MLP_GPU, &err, &rc);
    if (!gpu)
        fail_msg("GPU backend: %s", err.msg);
    assert_string_equal(fa_mlp_backend_name(gpu), "gpu-cublas");
    const fa_mlp_layout *l = fa_mlp_layout_of(cpu);
    const size_t np = l->n_params, B = 100;
    float *x = malloc(B * 784 * 4), *lc = malloc(B * 10 * 4), *lg = malloc(B * 10 * 4);
    float *gc = malloc(np * 4), *gg = malloc(np * 4), *pc = malloc(np * 4), *pg = malloc(np * 4);
    uint8_t y[100];
    fa_mlp_stats sc, sg;
    fa_rng r;

    fa_rng_seed(&r, 5, 0);
    for (size_t i = 0; i < B * 784; i++)
        x[i] = (float)fa_rng_uniform(&r);
    for (size_t i = 0; i < B; i++)
        y[i] = (uint8_t)fa_rng_below(&r, 10);
    assert_int_equal(fa_mlp_init(cpu, 9, &err), 0);
    assert_int_equal(fa_mlp_init(gpu, 9, &err), 0);

    assert_int_equal(fa_mlp_forward(cpu, x, y, B, lc, &sc, &err), 0);
    assert_int_equal(fa_mlp_forward(gpu, x, y, B, lg, &sg, &err), 0);
    assert_true(close_enough(lc, lg, B * 10, 1e-4, 1e-4, "logits"));
    assert_true(fabs(sc.loss_sum - sg.loss_sum) < 1e-3 * fabs(sc.loss_sum));

    /* 5 SGD steps with momentum and weight decay */
    fa_sgd opt = {0.05f, 0.9f, 1e-4f};
    for (int step = 0; step < 5; step++) {
        assert_int_equal(fa_mlp_forward_backward(cpu, x, y, B, B, &sc, &err), 0);
        assert_int_equal(fa_mlp_forward_backward(gpu, x, y, B, B, &sg, &err), 0);
        if (step == 0) {
            int on_device = 0;
            assert_non_null(fa_mlp_grads(gpu, &on_device));
            assert_int_equal(on_device, 1);
            assert_non_null(fa_mlp_cuda_stream(gpu));
            assert_int_equal(fa_mlp_grads_to_host(cpu, gc, &err), 0);
            assert_int_equal(fa_mlp_grads_to_host(gpu, gg, &err), 0);
            assert_true(close_enough(gc, gg, np, 1e-3, 1e-6, "gradients"));
        }
        assert_int_equal(fa_mlp_sgd_step(cpu, &opt, &err), 0);
        assert_int_equal(fa_mlp_sgd_step(gpu, &opt, &err), 0);
    }
    assert_int_equal(fa_mlp_get_params(cpu, pc, &err), 0);
    assert_int_equal(fa_mlp_get_params(gpu, pg, &err), 0);
    assert_true(close_enough(pc, pg, np, 1e-3, 1e-5, "parameters after 5 steps"));

    /* An empty part gives zero gradients on the GPU too. */
    assert_int_equal(fa_mlp_forward_backward(gpu, x, y, 0, B, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(gpu, gg, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(gg[i] == 0.0f);

    /* Evaluation agrees. */
    fa_dataset d = {(uint32_t)B, 784, x, y};
    fa_mlp_eval ec, eg;
    assert_int_equal(fa_mlp_evaluate(cpu, &d, &ec, &err), 0);
    assert_int_equal(fa_mlp_evaluate(gpu, &d, &eg, &err), 0);
    assert_true(fabs(ec.mean_loss - eg.mean_loss) < 1e-3 * fabs(ec.mean_loss));
    assert_true(fabs(ec.accuracy - eg.accuracy) <= 0.02);

    free(x);
    free(lc);
    free(lg);
    free(gc);
    free(gg);
    free(pc);
    free(pg);
    fa_mlp_del(cpu);
    fa_mlp_del(gpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_request_without_device),
        cmocka_unit_test(test_cpu_gpu_same_math),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
