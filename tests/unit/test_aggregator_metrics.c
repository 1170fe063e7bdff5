/* Metrics registry rendering and the HTTP/1.1 endpoints on a real socket. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "aggregator/metrics.h"

static void test_render_counter_gauge_histogram(void **state)
{
    fa_metrics *m;
    char labels[128] = "", *text;
    size_t len;
    const double buckets[] = {0.1, 1, 10};

    assert_int_equal(fa_metrics_new(&m, NULL), 0);
    assert_int_equal(fa_metrics_define(m, "fedagg_rounds_total", FA_METRIC_COUNTER,
                                       "Rounds by outcome.", NULL, 0, NULL),
                     0);
    assert_int_equal(fa_metrics_define(m, "fedagg_model_version", FA_METRIC_GAUGE,
                                       "Current model version.", NULL, 0, NULL),
                     0);
    assert_int_equal(fa_metrics_define(m, "fedagg_round_seconds", FA_METRIC_HISTOGRAM,
                                       "Round duration.", buckets, 3, NULL),
                     0);
    /* redeclaring is a no-op; another type is an error */
    assert_int_equal(
        fa_metrics_define(m, "fedagg_rounds_total", FA_METRIC_COUNTER, "x", NULL, 0, NULL), 0);
    assert_int_equal(
        fa_metrics_define(m, "fedagg_rounds_total", FA_METRIC_GAUGE, "x", NULL, 0, NULL),
        FA_ERR_INVAL);
    assert_int_equal(fa_metrics_define(m, "bad name", FA_METRIC_GAUGE, "x", NULL, 0, NULL),
                     FA_ERR_INVAL);

    fa_metrics_label(labels, sizeof(labels), "outcome", "ok");
    fa_metrics_add(m, "fedagg_rounds_total", labels, 1);
    fa_metrics_add(m, "fedagg_rounds_total", labels, 2);
    fa_metrics_add(m, "fedagg_rounds_total", labels, -5); /* ignored: counters only rise */
    fa_metrics_set(m, "fedagg_model_version", NULL, 7);
    assert_int_equal(fa_metrics_define(m, "fedagg_expiry_seconds", FA_METRIC_GAUGE, "Expiry.",
                                       NULL, 0, NULL),
                     0);
    /* a Unix time ending in 0 once came out as 1.86744426e+09 (valid, but not what an
     * operator or a test comparing with `date +%s` reads) */
    fa_metrics_set(m, "fedagg_expiry_seconds", NULL, 1867444260);
    fa_metrics_set(m, "fedagg_rounds_total", labels, 100); /* ignored: not a gauge */
    fa_metrics_observe(m, "fedagg_round_seconds", NULL, 0.05);
    fa_metrics_observe(m, "fedagg_round_seconds", NULL, 5);
    fa_metrics_observe(m, "fedagg_round_seconds", NULL, 50);
    fa_metrics_add(m, "no_such_metric", NULL, 1);

    assert_int_equal(fa_metrics_render(m, &text, &len), 0);
    assert_int_equal(strlen(text), len);
    assert_non_null(strstr(text, "# TYPE fedagg_rounds_total counter\n"));
    assert_non_null(strstr(text, "fedagg_rounds_total{outcome=\"ok\"} 3\n"));
    assert_non_null(strstr(text, "fedagg_model_version 7\n"));
    assert_non_null(strstr(text, "fedagg_expiry_seconds 1867444260\n"));
    assert_non_null(strstr(text, "fedagg_round_seconds_bucket{le=\"0.1\"} 1\n"));
    assert_non_null(strstr(text, "fedagg_round_seconds_bucket{le=\"10\"} 2\n"));
    assert_non_null(strstr(text, "fedagg_round_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(text, "fedagg_round_seconds_sum 55.05\n"));
    assert_non_null(strstr(text, "fedagg_round_seconds_count 3\n"));
    assert_null(strstr(text, "no_such_metric"));
    free(text);
    fa_metrics_del(m);
}

static void test_label_escaping(void **state)
{
    char buf[64] = "";
    fa_metrics_label(buf, sizeof(buf), "region", "eu\"west\\1\n");
    fa_metrics_label(buf, sizeof(buf), "phase", "masked");
    assert_string_equal(buf, "region=\"eu\\\"west\\\\1\\n\",phase=\"masked\"");
}

static int ready_flag;
static int ready_fn(void *ctx, char *why, size_t n)
{
    if (!ready_flag)
        snprintf(why, n, "model store not loaded yet");
    return ready_flag;
}

static char *http_get(uint16_t port, const char *path)
{
    struct sockaddr_in a = {0};
    char req[256], *buf = calloc(1, 65536);
    size_t n = 0;
    ssize_t r;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    assert_true(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    while ((r = read(fd, buf + n, 65535 - n)) > 0)
        n += (size_t)r;
    close(fd);
    return buf;
}

static void test_http_endpoints(void **state)
{
    fa_metrics *m;
    fa_metrics_server *s;
    fa_error err;
    char *resp;

    assert_int_equal(fa_metrics_new(&m, NULL), 0);
    assert_int_equal(fa_metrics_define(m, "fedagg_up", FA_METRIC_GAUGE, "Up.", NULL, 0, NULL), 0);
    fa_metrics_set(m, "fedagg_up", NULL, 1);
    assert_int_equal(fa_metrics_server_start(&s, m, "bad-address", NULL, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "host:port"));
    assert_int_equal(fa_metrics_server_start(&s, m, "127.0.0.1:0", ready_fn, NULL, &err), 0);
    assert_true(fa_metrics_server_port(s) > 0);

    resp = http_get(fa_metrics_server_port(s), "/metrics");
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "text/plain; version=0.0.4"));
    assert_non_null(
        strstr(resp, "\r\n\r\n# HELP fedagg_up Up.\n# TYPE fedagg_up gauge\nfedagg_up 1\n"));
    free(resp);
    resp = http_get(fa_metrics_server_port(s), "/healthz");
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    free(resp);
    ready_flag = 0;
    resp = http_get(fa_metrics_server_port(s), "/readyz");
    assert_non_null(strstr(resp, "HTTP/1.1 503"));
    assert_non_null(strstr(resp, "model store not loaded yet"));
    free(resp);
    ready_flag = 1;
    resp = http_get(fa_metrics_server_port(s), "/readyz");
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    free(resp);
    resp = http_get(fa_metrics_server_port(s), "/nope");
    assert_non_null(strstr(resp, "HTTP/1.1 404"));
    free(resp);
    fa_metrics_server_stop(s);
    fa_metrics_del(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_counter_gauge_histogram),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_http_endpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
