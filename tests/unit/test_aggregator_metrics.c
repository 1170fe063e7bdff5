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

#include <pthread.h>
#include <stdatomic.h>
#include <sys/time.h>

#include "aggregator/metrics.h"
#include "hostile.h"

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
    assert_int_equal(
        fa_metrics_define(m, "fedagg_expiry_seconds", FA_METRIC_GAUGE, "Expiry.", NULL, 0, NULL),
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

/* GET path from 127.0.0.1 with a bound: the status code, or -1 when no
 * answer came within timeout_ms. */
static int http_status(uint16_t port, const char *path, int timeout_ms)
{
    struct sockaddr_in a = {0};
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    char req[256], buf[512];
    size_t n = 0;
    ssize_t r;
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;

    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
        if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
            while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
                n += (size_t)r;
            buf[n] = '\0';
            if (n > 12 && !strncmp(buf, "HTTP/1.1 ", 9))
                status = atoi(buf + 9);
        }
    }
    close(fd);
    return status;
}

struct flood_arg {
    fa_ht_flood *f[101];
    int n;
    atomic_int stop;
};

static void *flood_thread(void *arg)
{
    struct flood_arg *a = arg;
    while (!atomic_load(&a->stop))
        for (int i = 0; i < a->n; i++)
            fa_ht_flood_run(a->f[i], 20);
    return NULL;
}

/* About 1,000 idle connections held against the port once kept /healthz
 * from answering for as long as they were held (in Kubernetes, the
 * liveness probe would restart a healthy aggregator).  Here 1,000 from one
 * address and 1,000 more from 100 others, each sending a request it never
 * finishes and coming back whenever the server lets one go: every probe
 * from the kubelet's own address is answered, within a bound far below a
 * probe's timeout. */
static void test_idle_flood_cannot_starve_health(void **state)
{
    fa_metrics *m;
    fa_metrics_server *s;
    fa_metrics_server_stats st;
    struct flood_arg a;
    pthread_t th;
    fa_error err;
    char addr[32], from[32];

    assert_int_equal(fa_metrics_new(&m, NULL), 0);
    assert_int_equal(fa_metrics_server_start(&s, m, "127.0.0.1:0", ready_fn, NULL, &err), 0);
    ready_flag = 1;
    memset(&a, 0, sizeof(a));
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", fa_metrics_server_port(s));
    assert_int_equal(
        fa_ht_flood_new(&a.f[a.n++], addr, "127.0.0.2", 1000, "GET /metrics HTTP/1.1\r\n", &err),
        0);
    for (int i = 1; i <= 100; i++) {
        snprintf(from, sizeof(from), "127.0.3.%d", i);
        assert_int_equal(
            fa_ht_flood_new(&a.f[a.n++], addr, from, 10, "GET /metrics HTTP/1.1\r\n", &err), 0);
    }
    assert_int_equal(pthread_create(&th, NULL, flood_thread, &a), 0);
    usleep(500 * 1000);
    for (int i = 0; i < 20; i++) {
        int h = http_status(fa_metrics_server_port(s), i % 2 ? "/readyz" : "/healthz", 3000);
        if (h != 200)
            fail_msg("probe %d under the flood: %d", i, h);
        usleep(100 * 1000);
    }
    fa_metrics_server_get_stats(s, &st);
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    {
        uint64_t opened = 0;
        for (int i = 0; i < a.n; i++) {
            opened += fa_ht_flood_opened(a.f[i]);
            fa_ht_flood_del(a.f[i]);
        }
        /* the flood did what it says: far more connections than the port keeps */
        assert_true(opened > 1500);
    }
    assert_true(st.connections <= 256);
    assert_true(st.evicted > 0);
    fa_metrics_server_stop(s);
    fa_metrics_del(m);
}

/* With protect_metrics, /metrics wants the dashboard's password too;
 * /healthz and /readyz never do. */
static void test_metrics_behind_password(void **state)
{
    fa_metrics *m;
    fa_metrics_server *s;
    fa_error err;
    char *resp;

    assert_int_equal(fa_metrics_new(&m, NULL), 0);
    assert_int_equal(fa_metrics_server_start(&s, m, "127.0.0.1:0", NULL, NULL, &err), 0);
    assert_int_equal(fa_metrics_server_protect_metrics(s, 1, &err), FA_ERR_INVAL);
    assert_int_equal(fa_metrics_server_dashboard(s, "ops", "secret", &err), 0);
    assert_int_equal(fa_metrics_server_protect_metrics(s, 1, &err), 0);
    resp = http_get(fa_metrics_server_port(s), "/metrics");
    assert_non_null(strstr(resp, "HTTP/1.1 401"));
    free(resp);
    assert_int_equal(http_status(fa_metrics_server_port(s), "/healthz", 3000), 200);
    assert_int_equal(http_status(fa_metrics_server_port(s), "/readyz", 3000), 200);
    {
        /* ops:secret */
        struct sockaddr_in a = {0};
        char req[256], buf[4096] = "";
        size_t n = 0;
        ssize_t r;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        a.sin_family = AF_INET;
        a.sin_port = htons(fa_metrics_server_port(s));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        snprintf(req, sizeof(req),
                 "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic b3BzOnNlY3JldA==\r\n"
                 "Connection: close\r\n\r\n");
        assert_true(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
        while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
            n += (size_t)r;
        close(fd);
        assert_non_null(strstr(buf, "HTTP/1.1 200"));
    }
    assert_int_equal(fa_metrics_server_protect_metrics(s, 0, &err), 0);
    assert_int_equal(http_status(fa_metrics_server_port(s), "/metrics", 3000), 200);
    fa_metrics_server_stop(s);
    fa_metrics_del(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_counter_gauge_histogram),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_http_endpoints),
        cmocka_unit_test(test_idle_flood_cannot_starve_health),
        cmocka_unit_test(test_metrics_behind_password),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
