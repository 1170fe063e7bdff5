/* `fedagg data split` and `fedagg data info`, run as a user runs them (the
 * binary from $FA_BIN): same seed, same shard bytes; the manifest agrees
 * with the shards; flag errors say what is wrong. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/data.h"

static char tmpdir[256], fedagg[512], images[512], labels[512];

static int setup(void **state)
{
    const char *bin = getenv("FA_BIN");
    snprintf(fedagg, sizeof(fedagg), "%s/fedagg", bin ? bin : "../bin");
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_data_cli.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    /* 1200 synthetic 5x5 images, 6 classes; pixel 0 holds the example's index mod 256 */
    fa_idx im = {3, {1200, 5, 5}, calloc(1200, 25), 1200 * 25}, lb = {1, {1200}, malloc(1200), 1200};
    for (uint32_t i = 0; i < 1200; i++) {
        im.data[i * 25] = (uint8_t)i;
        lb.data[i] = (uint8_t)(i % 6);
    }
    snprintf(images, sizeof(images), "%s/imgs.gz", tmpdir);
    snprintf(labels, sizeof(labels), "%s/labs.gz", tmpdir);
    int rc = fa_idx_write(images, &im, 1, NULL) || fa_idx_write(labels, &lb, 1, NULL);
    fa_idx_free(&im);
    fa_idx_free(&lb);
    return rc ? -1 : 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static int run(char **out, const char *fmt, ...)
{
    char args[2048], cmd[4096], *buf = calloc(1, 1 << 16);
    va_list ap;
    size_t len = 0, r;
    FILE *p;

    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", fedagg, args);
    p = popen(cmd, "r");
    assert_non_null(p);
    while ((r = fread(buf + len, 1, (1 << 16) - 1 - len, p)) > 0)
        len += r;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_split_cli(void **state)
{
    char *out, cmd[1200];

    if (access(fedagg, X_OK) != 0) {
        print_message("SKIPPED: %s not built\n", fedagg);
        skip();
    }
    for (int k = 1; k <= 2; k++) {
        assert_int_equal(run(&out, "data split --regions 3 --alpha 0.4 --seed 11 --out %s/s%d "
                                   "--images %s --labels %s --names eu,us,ap",
                             tmpdir, k, images, labels),
                         0);
        assert_non_null(strstr(out, "wrote 3 shards"));
        free(out);
    }
    snprintf(cmd, sizeof(cmd), "diff -r %s/s1 %s/s2 >/dev/null", tmpdir, tmpdir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run(&out, "data split --regions 3 --alpha 0.4 --seed 12 --out %s/s3 "
                               "--images %s --labels %s --names eu,us,ap",
                         tmpdir, images, labels),
                     0);
    free(out);
    snprintf(cmd, sizeof(cmd), "diff -r %s/s1 %s/s3 >/dev/null", tmpdir, tmpdir);
    assert_int_not_equal(system(cmd), 0);

    /* info on one shard matches its manifest entry */
    char mpath[600];
    snprintf(mpath, sizeof(mpath), "%s/s1/manifest.json", tmpdir);
    json_error_t je;
    json_t *m = json_load_file(mpath, 0, &je), *us = json_array_get(json_object_get(m, "shards"), 1);
    assert_non_null(us);
    assert_string_equal(json_string_value(json_object_get(us, "region")), "us");
    long long count = json_integer_value(json_object_get(us, "count"));
    assert_int_equal(run(&out, "data info --images %s/s1/us/train-images-idx3-ubyte.gz --labels "
                               "%s/s1/us/train-labels-idx1-ubyte.gz",
                         tmpdir, tmpdir),
                     0);
    char want[64];
    snprintf(want, sizeof(want), "examples: %lld\n", count);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "image: 5 x 5"));
    char hist[256] = "histogram:";
    for (size_t c = 0; c < 6; c++) {
        size_t l = strlen(hist);
        snprintf(hist + l, sizeof(hist) - l, " %lld",
                 json_integer_value(json_array_get(json_object_get(us, "histogram"), c)));
    }
    assert_non_null(strstr(out, hist));
    free(out);
    json_decref(m);
}

static void test_split_cli_errors(void **state)
{
    char *out;
    if (access(fedagg, X_OK) != 0)
        skip();
    assert_int_equal(run(&out, "data split --regions 3 --alpha 0.5 --out %s/e", tmpdir), 2);
    assert_non_null(strstr(out, "--regions, --alpha, --seed and --out are required"));
    free(out);
    assert_int_equal(run(&out, "data split --regions 3 --alpha -1 --seed 1 --out %s/e", tmpdir), 1);
    assert_non_null(strstr(out, "--alpha: '-1' is not a number > 0"));
    free(out);
    assert_int_equal(run(&out, "data split --regions 0 --alpha 1 --seed 1 --out %s/e", tmpdir), 1);
    free(out);
    assert_int_equal(run(&out, "data split --regions 3 --alpha 1 --seed 1 --out %s/e --images %s "
                               "--labels %s --names a,b",
                         tmpdir, images, labels),
                     1);
    assert_non_null(strstr(out, "--names lists 2 names for 3 regions"));
    free(out);
    /* images and labels swapped: the loader names the files */
    assert_int_equal(run(&out, "data split --regions 3 --alpha 1 --seed 1 --out %s/e --images %s "
                               "--labels %s",
                         tmpdir, labels, images),
                     1);
    assert_non_null(strstr(out, "labs.gz"));
    free(out);
    assert_int_equal(run(&out, "data info --images %s/none.gz --labels %s", tmpdir, labels), 1);
    assert_non_null(strstr(out, "none.gz: No such file"));
    free(out);
    assert_int_equal(run(&out, "data --help"), 0);
    assert_non_null(strstr(out, "Dirichlet"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_cli),
        cmocka_unit_test(test_split_cli_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
