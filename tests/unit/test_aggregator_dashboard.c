/* The dashboard page from status documents: what a person sees (rounds,
 * regions, points per version, deadline, paused), everything from the
 * document escaped, the document's missing parts shown as such, and the
 * two shapes of accuracy data (a "versions" array, or per-attempt fields). */
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

#include "aggregator/dashboard.h"
#include "aggregator/metrics.h"

#define NOW 1790000000000ull /* unix ms */

static char *render(const char *json)
{
    char *html = NULL;
    size_t len = 0;
    fa_error err = {0};
    int rc = fa_dashboard_render(json, strlen(json), NOW, &html, &len, &err);
    if (rc != 0)
        fail_msg("render failed: %s", err.msg);
    assert_int_equal(strlen(html), len);
    return html;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The status as the aggregator writes it: three regions, three rounds (one
 * aborted attempt), accuracies per version. */
static const char STATUS[] =
    "{\"federation_id\":\"demo\",\"round\":4,\"attempt\":1,\"phase\":\"masked\","
    "\"phase_deadline_unix_ms\":1790000012000,\"paused\":false,\"model_version\":3,"
    "\"eval_version\":3,\"eval_accuracy\":0.81,\"rounds_completed\":3,\"rounds_aborted\":1,"
    "\"audit_tree_size\":3,\"num_tensors\":6,\"num_params\":235146,"
    "\"storage\":{\"ok\":true,\"failures\":0,\"free_bytes\":53687091200},"
    "\"federated_eval\":{\"version\":3,\"regions\":3,\"num_examples\":3000,\"accuracy\":0.79},"
    "\"regions\":["
    "{\"id\":\"ap-south\",\"connected\":true,\"last_seen_ms_ago\":3000,\"drained\":false,"
    "\"rounds_participated\":3,\"dropouts\":0,\"bytes_received\":1610612736},"
    "{\"id\":\"eu-west\",\"connected\":true,\"last_seen_unix_ms\":1789999995000,"
    "\"drained\":true,\"drained_by\":\"alice\",\"rounds_participated\":2,\"dropouts\":1,"
    "\"bytes_received\":2048,\"privacy\":{\"epsilon\":1.5,\"delta\":1e-05,"
    "\"budget_epsilon\":8}},"
    "{\"id\":\"us-east\",\"connected\":false,\"last_seen_ms_ago\":null,\"drained\":false,"
    "\"rounds_participated\":3,\"dropouts\":0,\"bytes_received\":0}],"
    "\"rounds\":["
    "{\"round\":1,\"attempt\":1,\"outcome\":\"completed\",\"start_unix_ms\":1789999900000,"
    "\"end_unix_ms\":1789999910000,\"seconds\":10.0,\"phases\":{\"advertise\":1.0,"
    "\"shares\":1.0,\"masked\":6.0,\"consistency\":0.5,\"unmask\":0.5},"
    "\"participants\":[\"ap-south\",\"eu-west\",\"us-east\"],\"dropped\":[],\"version\":1},"
    "{\"round\":2,\"attempt\":1,\"outcome\":\"aborted\",\"reason\":\"1 of 3 regions below "
    "threshold 2\",\"start_unix_ms\":1789999910000,\"end_unix_ms\":1789999918000,"
    "\"seconds\":8.0,\"phases\":{\"advertise\":8.0},\"participants\":[],"
    "\"dropped\":[\"eu-west\"]},"
    "{\"round\":2,\"attempt\":2,\"outcome\":\"completed\",\"start_unix_ms\":1789999918000,"
    "\"end_unix_ms\":1789999930000,\"seconds\":12.0,\"phases\":{\"advertise\":2.0,"
    "\"shares\":1.0,\"masked\":7.0,\"consistency\":0.5,\"unmask\":0.5},"
    "\"participants\":[\"ap-south\",\"eu-west\",\"us-east\"],\"dropped\":[],\"version\":2},"
    "{\"round\":3,\"attempt\":1,\"outcome\":\"completed\",\"start_unix_ms\":1789999930000,"
    "\"end_unix_ms\":1789999941000,\"seconds\":11.0,\"phases\":{\"advertise\":1.5,"
    "\"shares\":1.0,\"masked\":7.0,\"consistency\":0.5,\"unmask\":0.5},"
    "\"participants\":[\"ap-south\",\"us-east\"],\"dropped\":[\"eu-west\"],\"version\":3}],"
    "\"versions\":["
    "{\"version\":0,\"global_accuracy\":0.1,\"central_accuracy\":null,"
    "\"federated_accuracy\":null,\"federated_regions\":0},"
    "{\"version\":1,\"global_accuracy\":0.62,\"central_accuracy\":null,"
    "\"federated_accuracy\":0.6,\"federated_regions\":3},"
    "{\"version\":2,\"global_accuracy\":0.74,\"central_accuracy\":null,"
    "\"federated_accuracy\":0.72,\"federated_regions\":3},"
    "{\"version\":3,\"global_accuracy\":0.81,\"central_accuracy\":null,"
    "\"federated_accuracy\":0.79,\"federated_regions\":3}],"
    "\"audit\":{\"tree_size\":3,\"signed_size\":3,\"root\":\"q83vEjRWeJA=\","
    "\"checkpoint\":\"fedagg.demo/federation\\n3\\nq83vEjRWeJA=\\n\\n\\u2014 fedagg.demo "
    "sig\\n\"}}";

static void test_what_a_person_sees(void **state)
{
    char *html = render(STATUS);

    assert_non_null(strstr(html, "<!DOCTYPE html>"));
    assert_non_null(strstr(html, "<span id=\"federation-id\">demo</span>"));
    assert_non_null(strstr(html, "id=\"round\">4</div><div class=\"sub\">attempt 1</div>"));
    assert_non_null(strstr(html, "<span class=\"phase\" id=\"phase\">masked</span>"));
    assert_non_null(strstr(html, "deadline in 12 s (2026-09-21 "));
    /* regions in document order, with their state and numbers */
    {
        const char *a = strstr(html, "<td class=\"region-id\">ap-south</td>");
        const char *e = strstr(html, "<td class=\"region-id\">eu-west</td>");
        const char *u = strstr(html, "<td class=\"region-id\">us-east</td>");
        assert_non_null(a);
        assert_non_null(e);
        assert_non_null(u);
        assert_true(a < e && e < u);
    }
    assert_non_null(strstr(html, "title=\"drained by alice\">drained</span>"));
    assert_non_null(strstr(html, ">3 s ago</td>"));
    assert_non_null(strstr(html, ">5 s ago</td>")); /* last_seen_unix_ms */
    assert_non_null(strstr(html, ">never</td>"));
    assert_non_null(strstr(html, "1.50 GiB"));
    assert_non_null(strstr(html, "&epsilon; 1.5 of 8"));
    assert_int_equal(count(html, "not reported"), 2);
    /* one point per version and series: 4 global, 3 federated, no central */
    assert_int_equal(count(html, "class=\"point\" data-series=\"global\""), 4);
    assert_int_equal(count(html, "class=\"point\" data-series=\"federated\""), 3);
    assert_int_equal(count(html, "data-series=\"central\""), 0);
    assert_non_null(
        strstr(html, "data-series=\"global\" data-version=\"3\" data-value=\"0.810000\""));
    /* the timeline: 4 attempts, the aborted one marked, phases as segments */
    assert_int_equal(count(html, "<rect class=\"aborted\" data-round=\"2\""), 1);
    assert_int_equal(count(html, "data-phase=\"masked\""), 3);
    assert_int_equal(count(html, "<td class=\"n round\">"), 4);
    assert_non_null(strstr(html, "1 of 3 regions below threshold 2"));
    assert_non_null(strstr(html, "global 81.00%, federated 79.00%"));
    /* the checkpoint, escaped text */
    assert_non_null(strstr(html, "<pre id=\"checkpoint\">fedagg.demo/federation\n3\n"));
    assert_non_null(strstr(html, "id=\"audit-tree-size\">3</span>"));
    assert_null(strstr(html, "id=\"paused\""));
    assert_null(strstr(html, "<script"));
    free(html);
}

static void test_strings_are_escaped(void **state)
{
    const char *doc =
        "{\"federation_id\":\"<script>alert(1)</script>\",\"phase\":\"a\\\"b\","
        "\"paused\":true,\"paused_by\":\"<b>mallory</b>\","
        "\"regions\":[{\"id\":\"x'><img src=y>\",\"connected\":true,\"drained\":true,"
        "\"drained_by\":\"\\\" onmouseover=\\\"z\"}],"
        "\"rounds\":[{\"round\":1,\"attempt\":1,\"outcome\":\"aborted<i>\",\"reason\":\"r&d\","
        "\"participants\":[\"<p>\"],\"dropped\":[]}],"
        "\"storage\":{\"ok\":false,\"reason\":\"disk <full>\"},"
        "\"audit\":{\"tree_size\":1,\"signed_size\":1,\"checkpoint\":\"</pre><script>\"}}";
    char *html = render(doc);

    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "<img"));
    assert_null(strstr(html, "<b>mallory"));
    assert_null(strstr(html, "<td><p>"));
    assert_non_null(strstr(html, "<td>&lt;p&gt;</td>"));
    assert_null(strstr(html, "<i>"));
    assert_null(strstr(html, "\" onmouseover"));
    assert_null(strstr(html, "</pre><"));
    assert_non_null(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert_non_null(strstr(html, "x&#39;&gt;&lt;img src=y&gt;"));
    assert_non_null(strstr(html, "Paused by &lt;b&gt;mallory&lt;/b&gt;"));
    assert_non_null(strstr(html, "r&amp;d"));
    assert_non_null(strstr(html, "Storage blocked: disk &lt;full&gt;"));
    free(html);
}

static void test_missing_parts_are_shown_as_such(void **state)
{
    char *html = render("{}");
    assert_non_null(strstr(html, "id=\"accuracy-empty\""));
    assert_non_null(strstr(html, "No regions in the status."));
    assert_non_null(strstr(html, "No round attempt has ended yet."));
    assert_non_null(strstr(html, "No signed checkpoint yet."));
    assert_non_null(strstr(html, "<span class=\"phase\" id=\"phase\">unknown</span>"));
    assert_null(strstr(html, "<svg id="));
    free(html);
}

/* The contract's other shape: accuracies on the attempts, no "versions";
 * a single version is centred, not divided by zero. */
static void test_accuracy_from_attempts(void **state)
{
    const char *doc =
        "{\"federation_id\":\"f\",\"rounds\":["
        "{\"round\":1,\"attempt\":1,\"outcome\":\"completed\",\"version\":1,"
        "\"global_accuracy\":0.5,\"federated_accuracy\":0.45,\"central_accuracy\":0.55},"
        "{\"round\":2,\"attempt\":1,\"outcome\":\"aborted\"},"
        "{\"round\":2,\"attempt\":2,\"outcome\":\"completed\",\"version\":2,"
        "\"central_accuracy\":0.6}]}";
    char *html = render(doc);
    assert_int_equal(count(html, "class=\"point\" data-series=\"global\""), 1);
    assert_int_equal(count(html, "class=\"point\" data-series=\"central\""), 2);
    assert_int_equal(count(html, "class=\"point\" data-series=\"federated\""), 1);
    assert_null(strstr(html, "nan"));
    assert_null(strstr(html, "inf"));
    assert_non_null(strstr(html, "global 50.00%, central 55.00%, federated 45.00%"));
    free(html);
    html = render("{\"eval_version\":7,\"eval_accuracy\":0.9}");
    assert_int_equal(count(html, "class=\"point\" data-series=\"global\" data-version=\"7\""), 1);
    assert_null(strstr(html, "nan"));
    free(html);
}

/* Distributed DP: the federation's account, once rounds are accounted, and
 * the settings before; no card without it. */
static void test_distributed_dp(void **state)
{
    char *html = render("{\"distributed_dp\":{\"noise_multiplier\":1.1,\"clip\":0.5,"
                        "\"min_regions\":3,\"ring_bits\":24,\"delta\":1e-05,"
                        "\"rounds_accounted\":12,\"epsilon_total\":3.21456,"
                        "\"noisy_contributions_last\":3}}");
    assert_non_null(strstr(html, "id=\"distributed-dp\">\u03b5 3.215</div>"));
    assert_non_null(strstr(html, "at \u03b4 1e-05 after 12 rounds (the last with 3 regions&#39; "
                                 "noise); noise multiplier 1.1, clip 0.5"));
    free(html);
    html = render("{\"distributed_dp\":{\"noise_multiplier\":1.1,\"clip\":0.5,"
                  "\"min_regions\":3,\"rounds_accounted\":0}}");
    assert_non_null(strstr(html, "id=\"distributed-dp\">no round yet</div>"));
    assert_non_null(strstr(html, "noise multiplier 1.1, clip 0.5, 3 regions&#39; noise"));
    free(html);
    html = render(STATUS);
    assert_null(strstr(html, "distributed-dp"));
    free(html);
}

/* Released models: the last promoted version and the channels, a run of
 * rejections; no card without a gate or a channel. */
static void test_released_model(void **state)
{
    char *html = render("{\"governance\":{\"policy\":{\"metric\":\"accuracy\"},"
                        "\"last_promoted\":7,\"channels\":[{\"channel\":\"production\","
                        "\"version\":5},{\"channel\":\"staging\",\"version\":7}],"
                        "\"rejections_in_a_row\":2,\"promotions\":6,\"rejections\":3}}");
    (void)state;
    assert_non_null(strstr(html, "id=\"released\">v7</div>"));
    assert_non_null(strstr(html, "production v5, staging v7; 2 rejected in a row"));
    free(html);
    html = render("{\"governance\":{\"policy\":{\"metric\":\"loss\"},\"last_promoted\":null,"
                  "\"channels\":[],\"rejections_in_a_row\":0,\"promotions\":0,"
                  "\"rejections\":0}}");
    assert_non_null(strstr(html, "id=\"released\">none yet</div>"));
    assert_non_null(strstr(html, "0 promoted, 0 rejected"));
    free(html);
    html = render("{\"governance\":{\"policy\":null,\"channels\":[]}}");
    assert_null(strstr(html, "id=\"released\""));
    free(html);
}

/* A long federation: 200 attempts, the chart draws the last 60, the table 20. */
static void test_long_history(void **state)
{
    size_t cap = 1 << 20, len = 0;
    char *doc = malloc(cap), *html;
    len += (size_t)snprintf(doc + len, cap - len, "{\"rounds\":[");
    for (int i = 1; i <= 200; i++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "%s{\"round\":%d,\"attempt\":1,\"outcome\":\"completed\","
                                "\"seconds\":%d.5,\"phases\":{\"masked\":%d.0},\"version\":%d}",
                                i > 1 ? "," : "", i, i % 7, i % 7, i);
    len += (size_t)snprintf(doc + len, cap - len, "],\"versions\":[");
    for (int i = 0; i <= 200; i++)
        len += (size_t)snprintf(doc + len, cap - len, "%s{\"version\":%d,\"global_accuracy\":%f}",
                                i ? "," : "", i, 0.1 + 0.8 * i / 200.0);
    snprintf(doc + len, cap - len, "]}");
    html = render(doc);
    assert_int_equal(count(html, "class=\"point\" data-series=\"global\""), 201);
    /* rounds 141..200, less the 8 multiples of 7 whose masked phase is 0 s */
    assert_int_equal(count(html, "data-phase=\"masked\""), 52);
    assert_int_equal(count(html, "<td class=\"n round\">"), FA_DASHBOARD_TABLE_ROWS);
    assert_non_null(strstr(html, "<td class=\"n round\">200</td>"));
    assert_null(strstr(html, "<td class=\"n round\">180</td>"));
    assert_non_null(strstr(html, "The latest 20 of 200 attempts"));
    free(html);
    free(doc);
}

/* A service's page: its federations in one table, each one's panels below
 * with ids of its own, the states and reasons shown. */
static void test_service_page(void **state)
{
    static const char head[] =
        "{\"service\":{\"federations\":2,\"states\":{\"running\":1,\"paused\":0,"
        "\"finished\":0,\"stopped\":1,\"archived\":0}},\"federations\":[";
    char *doc, *html;
    size_t n;
    (void)state;

    n = strlen(head) + 2 * strlen(STATUS) + 512;
    doc = malloc(n);
    assert_non_null(doc);
    /* the demo status twice: the second as another federation, stopped */
    snprintf(doc, n,
             "%s%.*s,\"id\":\"demo\",\"team\":\"vision\",\"state\":\"running\","
             "\"state_reason\":\"\",\"default\":true},"
             "%.*s,\"id\":\"x<y\",\"team\":\"nlp\",\"state\":\"stopped\","
             "\"state_reason\":\"storage: disk full\",\"default\":false}]}",
             head, (int)strlen(STATUS) - 1, STATUS, (int)strlen(STATUS) - 1, STATUS);
    html = render(doc);
    assert_non_null(strstr(html, "<h1>fedagg service</h1>"));
    assert_non_null(strstr(html, "2 federations: 1 running, 0 paused, 0 finished, 1 stopped"));
    assert_non_null(strstr(html, "<table id=\"federations\">"));
    assert_non_null(strstr(html, "<a href=\"#f0\">demo</a> <span class=\"sub\">(default)"));
    assert_non_null(strstr(html, "<a href=\"#f1\">x&lt;y</a>"));
    assert_non_null(strstr(html, "<span class=\"state state-stopped\">stopped</span> storage: "
                                 "disk full"));
    assert_non_null(strstr(html, "<td class=\"n\">81.00%</td><td class=\"n\">2 / 3</td>"));
    /* each federation's panels, ids of its own, none twice */
    assert_non_null(strstr(html, "<div class=\"federation\" id=\"f1\"><h2>Federation x&lt;y"));
    assert_non_null(strstr(html, "id=\"f0-regions\""));
    assert_non_null(strstr(html, "id=\"f1-regions\""));
    assert_non_null(strstr(html, "id=\"f1-accuracy-chart\""));
    assert_null(strstr(html, "id=\"regions\""));
    free(html);
    free(doc);
}

static void test_bad_documents_refused(void **state)
{
    char *html = (char *)1;
    size_t len = 1;
    fa_error err = {0};
    assert_int_equal(fa_dashboard_render("{\"round\":", 9, NOW, &html, &len, &err), FA_ERR_PARSE);
    assert_null(html);
    assert_non_null(strstr(err.msg, "line 1"));
    assert_int_equal(fa_dashboard_render("[1,2]", 5, NOW, &html, &len, &err), FA_ERR_PARSE);
    assert_int_equal(fa_dashboard_render_unavailable("starting <now>", &html, &len, &err), 0);
    assert_non_null(strstr(html, "starting &lt;now&gt;"));
    assert_non_null(strstr(html, "http-equiv=\"refresh\""));
    free(html);
}

/* GET path on 127.0.0.1:port with an optional Authorization header value;
 * the whole response (status line, headers, body). */
static char *http_get(uint16_t port, const char *path, const char *auth)
{
    struct sockaddr_in a = {0};
    size_t cap = 1 << 20, n = 0;
    char req[512], *buf = calloc(1, cap);
    ssize_t r;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: close\r\n\r\n",
             path, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    assert_true(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    while ((r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    return buf;
}

/* Served by the metrics server: off until enabled, the snapshot as a page,
 * basic authentication for the page only. */
static void test_served_on_the_metrics_port(void **state)
{
    fa_metrics *m;
    fa_metrics_server *s;
    fa_error err;
    uint16_t port;
    char *resp;

    assert_int_equal(fa_metrics_new(&m, NULL), 0);
    assert_int_equal(fa_metrics_server_start(&s, m, "127.0.0.1:0", NULL, NULL, &err), 0);
    port = fa_metrics_server_port(s);
    resp = http_get(port, "/dashboard", NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 404"));
    free(resp);

    assert_int_equal(fa_metrics_server_dashboard(s, "ops", NULL, &err), FA_ERR_INVAL);
    assert_int_equal(fa_metrics_server_dashboard(s, NULL, NULL, &err), 0);
    resp = http_get(port, "/", NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 302"));
    assert_non_null(strstr(resp, "Location: /dashboard"));
    free(resp);
    resp = http_get(port, "/dashboard", NULL); /* no snapshot yet */
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "id=\"unavailable\""));
    free(resp);
    assert_int_equal(fa_metrics_server_set_status(s, STATUS, strlen(STATUS)), 0);
    resp = http_get(port, "/dashboard", NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "Content-Type: text/html; charset=utf-8"));
    assert_non_null(strstr(resp, "Content-Security-Policy: default-src 'none'"));
    assert_non_null(strstr(resp, "<td class=\"region-id\">us-east</td>"));
    free(resp);
    /* a snapshot that is not JSON: the page says so, the server goes on */
    assert_int_equal(fa_metrics_server_set_status(s, "{oops", 5), 0);
    resp = http_get(port, "/dashboard", NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "status JSON at line 1"));
    free(resp);
    assert_int_equal(fa_metrics_server_set_status(s, STATUS, strlen(STATUS)), 0);

    /* ops:s3cret is b3BzOnMzY3JldA== */
    assert_int_equal(fa_metrics_server_dashboard(s, "ops", "s3cret", &err), 0);
    resp = http_get(port, "/dashboard", NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 401"));
    assert_non_null(strstr(resp, "WWW-Authenticate: Basic realm=\"fedagg dashboard\""));
    assert_null(strstr(resp, "region-id"));
    free(resp);
    resp = http_get(port, "/dashboard", "Basic b3BzOnMzY3JldEE="); /* ops:s3cretA */
    assert_non_null(strstr(resp, "HTTP/1.1 401"));
    free(resp);
    resp = http_get(port, "/dashboard", "Basic b3BzOg=="); /* ops: */
    assert_non_null(strstr(resp, "HTTP/1.1 401"));
    free(resp);
    resp = http_get(port, "/dashboard", "Basic !!!");
    assert_non_null(strstr(resp, "HTTP/1.1 401"));
    free(resp);
    resp = http_get(port, "/dashboard", "Basic b3BzOnMzY3JldA==");
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "<td class=\"region-id\">eu-west</td>"));
    free(resp);
    resp = http_get(port, "/metrics", NULL); /* Prometheus needs no password */
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    free(resp);
    fa_metrics_server_stop(s);
    fa_metrics_del(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_a_person_sees),
        cmocka_unit_test(test_strings_are_escaped),
        cmocka_unit_test(test_missing_parts_are_shown_as_such),
        cmocka_unit_test(test_accuracy_from_attempts),
        cmocka_unit_test(test_distributed_dp),
        cmocka_unit_test(test_released_model),
        cmocka_unit_test(test_long_history),
        cmocka_unit_test(test_service_page),
        cmocka_unit_test(test_bad_documents_refused),
        cmocka_unit_test(test_served_on_the_metrics_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
