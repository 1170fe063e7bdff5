/* Training on one region's shard of Fashion-MNIST (as `fedagg data split`
 * makes it: Dirichlet label skew, alpha 0.5, 4 regions) improves accuracy on
 * the public test set over the initial model within a few hundred steps;
 * the round's delta, saved and loaded as safetensors, reproduces the model. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp.h"
#include "model/train.h"
#include "worker/data.h"

static void test_train_on_one_shard(void **state)
{
    char dir[256], images[512], labels[512], cmd[300], model[512];
    fa_data shard, test;
    fa_split_opts so;
    fa_mlp_config c;
    fa_mlp_opts mo;
    fa_mlp *m;
    fa_train_opts to;
    fa_train_result res;
    fa_mlp_eval before, after;
    fa_error err;
    int rc;

    rc = fa_data_load_fashion_mnist(&test, 1, &err);
    if (rc == FA_ERR_NOTFOUND) {
        print_message("SKIPPED: %s\n", err.msg);
        skip();
    }
    assert_int_equal(rc, 0);

    snprintf(dir, sizeof(dir), "/tmp/fa_test_shard.XXXXXX");
    assert_non_null(mkdtemp(dir));
    fa_split_opts_default(&so);
    so.regions = 4;
    so.alpha = 0.5;
    so.seed = 3;
    assert_int_equal(fa_split_files(FA_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz",
                                    FA_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz", dir, &so,
                                    NULL, &err),
                     0);
    /* the worker of region 1 opens only its own shard */
    snprintf(images, sizeof(images), "%s/region-1/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof(labels), "%s/region-1/train-labels-idx1-ubyte.gz", dir);
    assert_int_equal(fa_data_load(&shard, images, labels, &err), 0);
    uint32_t hist[10] = {0};
    for (uint32_t i = 0; i < shard.ds.n; i++)
        hist[shard.y[i]]++;
    print_message("region-1 shard: %u examples, labels [%u %u %u %u %u %u %u %u %u %u]\n",
                  shard.ds.n, hist[0], hist[1], hist[2], hist[3], hist[4], hist[5], hist[6],
                  hist[7], hist[8], hist[9]);

    fa_mlp_config_default(&c);
    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    mo.max_batch = 64;
    assert_int_equal(fa_mlp_new(&m, &c, &mo, &err), 0);
    const size_t np = fa_mlp_layout_of(m)->n_params;
    float *global = malloc(np * 4), *delta = malloc(np * 4), *back = malloc(np * 4);
    fa_mlp_init_he(fa_mlp_layout_of(m), global, 1);
    assert_int_equal(fa_mlp_set_params(m, global, &err), 0);
    assert_int_equal(fa_mlp_evaluate(m, &test.ds, &before, &err), 0);

    fa_train_opts_default(&to);
    to.epochs = 0;
    to.steps = 300;
    to.batch_size = 64;
    to.sgd.lr = 0.05f;
    to.sgd.momentum = 0.9f;
    assert_int_equal(fa_train_local_round(m, global, &shard.ds, &to, delta, &res, &err), 0);
    assert_int_equal(fa_mlp_evaluate(m, &test.ds, &after, &err), 0);
    print_message("test accuracy %.4f -> %.4f, loss %.3f -> %.3f after %llu steps on %llu "
                  "examples\n",
                  before.accuracy, after.accuracy, before.mean_loss, after.mean_loss,
                  (unsigned long long)res.steps, (unsigned long long)res.num_examples);
    assert_int_equal(res.steps, 300);
    assert_true(after.accuracy > before.accuracy + 0.25);
    assert_true(after.mean_loss < before.mean_loss);

    /* global + delta, through safetensors, is the trained model */
    for (size_t i = 0; i < np; i++)
        back[i] = global[i] + delta[i];
    snprintf(model, sizeof(model), "%s/local.safetensors", dir);
    assert_int_equal(fa_mlp_save(model, 0644, fa_mlp_layout_of(m), back, NULL, 0, &err), 0);
    memset(back, 0, np * 4);
    assert_int_equal(fa_mlp_load(model, fa_mlp_layout_of(m), back, &err), 0);
    assert_int_equal(fa_mlp_set_params(m, back, &err), 0);
    fa_mlp_eval again;
    assert_int_equal(fa_mlp_evaluate(m, &test.ds, &again, &err), 0);
    assert_true(again.accuracy > before.accuracy + 0.25);

    free(global);
    free(delta);
    free(back);
    fa_mlp_del(m);
    fa_data_free(&shard);
    fa_data_free(&test);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_on_one_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
