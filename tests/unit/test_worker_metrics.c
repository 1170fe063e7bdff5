/* Unit tests of worker/worker_metrics: the Prometheus text file, line by
 * line (HELP, TYPE, one sample with the region label for every metric; NaN
 * for what is not measured; label escaping), written atomically; and
 * accepted by `promtool check metrics` when promtool is installed (Debian
 * package prometheus; that test is skipped without it). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/worker_metrics.h"

static const char *names[] = {
    "fedagg_worker_rounds_total",     "fedagg_worker_round_failures_total",
    "fedagg_worker_bytes_up_total",   "fedagg_worker_bytes_down_total",
    "fedagg_worker_clipped_fraction", "fedagg_worker_clipped_coordinates",
    "fedagg_worker_update_l2_norm",   "fedagg_worker_local_loss",
    "fedagg_worker_eval_accuracy",    "fedagg_worker_eval_loss",
    "fedagg_worker_model_version",    "fedagg_worker_privacy_epsilon",
    "fedagg_worker_privacy_budget",   "fedagg_worker_privacy_exhausted",
};

static void sample(fa_worker_metrics *m)
{
    fa_worker_metrics_init(m);
    m->rounds_total = 7;
    m->round_failures_total = 2;
    m->bytes_up_total = 123456789012ull;
    m->bytes_down_total = 42;
    m->clipped_fraction = 0.015625;
    m->clipped_coordinates = 12;
    m->update_l2_norm = 3.5;
    m->local_loss = 0.25;
    m->eval_loss = 0.1;
    m->model_version = 8;
    m->privacy_epsilon = 2.5;
    m->privacy_budget = 3;
    m->privacy_exhausted = 1;
}

static void test_format(void **state)
{
    fa_worker_metrics m;
    char *text = NULL, want[256];
    size_t len = 0;

    sample(&m);
    assert_int_equal(fa_worker_metrics_format(&m, "eu-west", &text, &len, NULL), 0);
    assert_int_equal(strlen(text), len);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *type = strstr(names[i], "_total") ? "counter" : "gauge";
        snprintf(want, sizeof(want), "# HELP %s ", names[i]);
        assert_non_null(strstr(text, want));
        snprintf(want, sizeof(want), "# TYPE %s %s\n%s{region=\"eu-west\"} ", names[i], type,
                 names[i]);
        if (!strstr(text, want))
            fail_msg("no TYPE and sample of %s in:\n%s", names[i], text);
    }
    assert_non_null(strstr(text, "\nfedagg_worker_rounds_total{region=\"eu-west\"} 7\n"));
    assert_non_null(
        strstr(text, "\nfedagg_worker_bytes_up_total{region=\"eu-west\"} 123456789012\n"));
    assert_non_null(
        strstr(text, "\nfedagg_worker_clipped_fraction{region=\"eu-west\"} 0.015625\n"));
    assert_non_null(strstr(text, "\nfedagg_worker_model_version{region=\"eu-west\"} 8\n"));
    /* the shortest decimal that reads back */
    assert_non_null(strstr(text, "\nfedagg_worker_eval_loss{region=\"eu-west\"} 0.1\n"));
    /* not measured yet */
    assert_non_null(strstr(text, "\nfedagg_worker_eval_accuracy{region=\"eu-west\"} NaN\n"));
    assert_non_null(strstr(text, "\nfedagg_worker_privacy_epsilon{region=\"eu-west\"} 2.5\n"));
    assert_non_null(strstr(text, "\nfedagg_worker_privacy_exhausted{region=\"eu-west\"} 1\n"));
    assert_int_equal(text[len - 1], '\n');
    free(text);

    /* a label value is escaped */
    assert_int_equal(fa_worker_metrics_format(&m, "we\"ird\\re\ngion", &text, &len, NULL), 0);
    assert_non_null(strstr(text, "{region=\"we\\\"ird\\\\re\\ngion\"}"));
    free(text);
    assert_int_equal(fa_worker_metrics_format(&m, "", &text, &len, NULL), FA_ERR_INVAL);
}

static char dir[64];

static void test_write(void **state)
{
    fa_worker_metrics m;
    char path[128], bad[160], buf[8192];
    FILE *f;
    size_t n;
    fa_error err;

    snprintf(path, sizeof(path), "%s/worker.prom", dir);
    sample(&m);
    assert_int_equal(fa_worker_metrics_write(path, &m, "eu-west", &err), 0);
    m.rounds_total = 8;
    assert_int_equal(fa_worker_metrics_write(path, &m, "eu-west", &err), 0);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "fedagg_worker_rounds_total{region=\"eu-west\"} 8\n"));
    /* a directory that does not exist: the message names the file */
    snprintf(bad, sizeof(bad), "%s/missing/worker.prom", dir);
    assert_int_equal(fa_worker_metrics_write(bad, &m, "eu-west", &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, "metrics_file"));
    assert_non_null(strstr(err.msg, "worker.prom"));
}

static void test_promtool_accepts(void **state)
{
    fa_worker_metrics m;
    char path[128], cmd[300];
    fa_error err;

    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_worker_metrics: promtool not installed (Debian package "
                        "prometheus): its check is skipped\n");
        skip();
    }
    snprintf(path, sizeof(path), "%s/check.prom", dir);
    sample(&m);
    assert_int_equal(fa_worker_metrics_write(path, &m, "eu-west", &err), 0);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fa_test_metrics.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_promtool_accepts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
