/* Server behaviour: routing, limits (413 keeps the connection), back-pressure,
 * deferred responses and keep-alive, cross-thread hand-off, aborted
 * requests, Retry and NEW_TOKEN, connection limits, version negotiation,
 * stateless reset, junk datagrams, graceful drain. */
#include "test_transport_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define STREAM_WINDOW (256u << 10)

static tp_server srv;

static int setup(void **state)
{
    fa_h3_server_config cfg;
    tp_gen_init();
    if (tp_setup_pki() != 0)
        return -1;
    tp_server_config(&cfg);
    cfg.quic.max_stream_window = STREAM_WINDOW;
    cfg.quic.max_connection_window = 4 * STREAM_WINDOW;
    cfg.max_body_bytes = 4u << 20;
    return tp_server_start(&srv, &cfg);
}

static int teardown(void **state)
{
    tp_server_stop(&srv);
    tp_teardown_pki();
    return 0;
}

static fa_h3_client *client_for(const tp_server *t, fa_h3_client_config *cfgout)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_error err = {0};
    int rv;
    tp_client_config(&cfg, t, "client-eu-west.crt", "client-eu-west.key");
    if (cfgout)
        cfg = *cfgout;
    rv = fa_h3_client_new(&c, &cfg, &err);
    if (rv != 0)
        fail_msg("client: %s", fa_error_msg(&err, rv));
    return c;
}

static int do_req(fa_h3_client *c, const char *method, const char *path, const void *body,
                  size_t len, tp_gen *g, int64_t glen, uint32_t timeout_ms, fa_h3_response *resp,
                  fa_error *err)
{
    fa_h3_client_req req;
    memset(&req, 0, sizeof(req));
    req.method = method;
    req.path = path;
    req.body = body;
    req.body_len = len;
    if (g) {
        req.body_read = tp_gen_read;
        req.body_arg = g;
        req.body_length = glen;
    }
    req.timeout_ms = timeout_ms ? timeout_ms : 20000;
    return fa_h3_client_request(c, &req, resp, err);
}

static void wait_until(atomic_int *v, int want)
{
    for (int i = 0; i < 1000 && atomic_load(v) < want; i++)
        usleep(10000);
    assert_true(atomic_load(v) >= want);
}

/* ------------------------------------------------------------------ */

static void test_routes_status_query_headers(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_header h = {"X-Test", "hello"};

    assert_int_equal(do_req(c, "GET", "/nothing/here", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 404);
    fa_h3_response_free(&resp);
    assert_int_equal(do_req(c, "PUT", "/upload", "x", 1, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 405);
    fa_h3_response_free(&resp);

    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/upload?round=3&attempt=1";
    req.headers = &h;
    req.nheaders = 1;
    req.body = "abc";
    req.body_len = 3;
    assert_int_equal(fa_h3_client_request(c, &req, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    assert_string_equal(tp_last.query, "round=3&attempt=1");
    assert_string_equal(tp_last.xhdr, "hello");
    assert_string_equal(tp_last.method, "POST");
    assert_non_null(fa_h3_response_header(&resp, "Content-Length"));
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
}

/* HEAD is GET without the body (RFC 9110 9.3.2): the GET route answers,
 * with the headers (Content-Length included) GET would send and no body;
 * errors too come without one; and the connection carries on. */
static void test_head_answers_headers_only(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    int released = atomic_load(&tp_ref_released);

    assert_int_equal(do_req(c, "HEAD", "/gen/100000", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    assert_string_equal(fa_h3_response_header(&resp, "content-length"), "100000");
    assert_int_equal(resp.body_received, 0);
    fa_h3_response_free(&resp);
    assert_int_equal(do_req(c, "HEAD", "/ref/5000", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    assert_string_equal(fa_h3_response_header(&resp, "content-length"), "5000");
    assert_int_equal(resp.body_received, 0);
    fa_h3_response_free(&resp);
    /* refusals: a POST-only path, no path at all */
    assert_int_equal(do_req(c, "HEAD", "/upload", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 405);
    assert_int_equal(resp.body_received, 0);
    fa_h3_response_free(&resp);
    assert_int_equal(do_req(c, "HEAD", "/nothing", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 404);
    assert_int_equal(resp.body_received, 0);
    fa_h3_response_free(&resp);
    /* the same connection serves the GET after them */
    tp_download(c, 1000);
    /* the handler's buffer of the HEAD was released all the same (once the
     * client acknowledged the stream's end, which it does while it waits
     * for a later response) */
    for (int i = 0; i < 500 && atomic_load(&tp_ref_released) == released; i++)
        usleep(2000);
    assert_int_equal(atomic_load(&tp_ref_released), released + 1);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
}

/* A malformed message (here a request body longer than its
 * content-length) is an error of its stream (RFC 9114 4.1.2): that
 * request fails, the connection carries the next one.  The same rule
 * keeps a client's connection when a server sends a body after HEAD. */
static void test_malformed_message_resets_only_its_stream(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    tp_gen g = {0, 10, 0};
    int rv;

    rv = do_req(c, "POST", "/upload", NULL, 0, &g, 5, 5000, &resp, &err);
    assert_int_not_equal(rv, 0);
    assert_int_not_equal(rv, FA_ERR_TIMEOUT);
    tp_upload(c, 1000);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
}

static void test_413_keeps_connection_usable(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    tp_gen g = {0, 8u << 20, 0};
    tp_gen g2 = {0, 12u << 20, 0};

    /* declared too large: refused at the headers */
    assert_int_equal(do_req(c, "POST", "/upload", NULL, 0, &g, (int64_t)g.len, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 413);
    fa_h3_response_free(&resp);
    /* no length declared: refused once the body passes the limit */
    assert_int_equal(do_req(c, "POST", "/upload", NULL, 0, &g2, -1, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 413);
    assert_true(g2.off < g2.len); /* the client stopped sending */
    fa_h3_response_free(&resp);
    wait_until(&tp_last.closes, 1);
    assert_int_equal(atomic_load(&tp_last.close_err), FA_ERR_TOOBIG);
    /* the same connection carries the next request */
    assert_int_equal(do_req(c, "POST", "/upload", "ok", 2, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
}

/* The server application holds every byte's credit: the client can put no
 * more than one stream window on the wire until the credit comes back. */
static atomic_ullong held_peak;
static void *hold_observer(void *arg)
{
    fa_h3_server *s = arg;
    uint64_t last = 0;
    int stable = 0;
    for (int i = 0; i < 2000 && stable < 50; i++) {
        uint64_t b = atomic_load(&tp_last.body_bytes);
        if (b > 0 && b == last)
            stable++;
        else
            stable = 0;
        last = b;
        usleep(10000);
    }
    atomic_store(&held_peak, last);
    fa_h3_server_post(s, tp_release_task, NULL);
    return NULL;
}

static void test_backpressure_holds_sender_to_window(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    tp_gen g = {0, 3u << 20, 0};
    pthread_t th;
    char want[65], expect[128];

    atomic_store(&tp_last.body_bytes, 0);
    pthread_create(&th, NULL, hold_observer, srv.srv);
    assert_int_equal(do_req(c, "POST", "/hold", NULL, 0, &g, (int64_t)g.len, 60000, &resp, &err),
                     0);
    pthread_join(th, NULL);
    assert_int_equal(resp.status, 200);
    /* while the application held the credit, at most one window arrived */
    assert_true(atomic_load(&held_peak) > 0);
    assert_true(atomic_load(&held_peak) <= STREAM_WINDOW);
    /* and once released, the rest flowed and arrived intact */
    tp_gen_sha(g.len, want);
    snprintf(expect, sizeof(expect), "%" PRIu64 " %s", g.len, want);
    assert_string_equal((char *)resp.body, expect);
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
}

static void test_long_poll_outlives_idle_timeout(void **state)
{
    fa_h3_server_config cfg;
    fa_h3_client_config ccfg;
    tp_server s2;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};

    tp_server_config(&cfg);
    cfg.quic.idle_timeout_ms = 600;
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    tp_client_config(&ccfg, &s2, "client-eu-west.crt", "client-eu-west.key");
    ccfg.quic.idle_timeout_ms = 600;
    c = client_for(&s2, &ccfg);
    /* a deferred response 4 idle timeouts later: keep-alive PINGs carry it */
    assert_int_equal(do_req(c, "GET", "/wait?ms=2400", NULL, 0, NULL, 0, 20000, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    assert_string_equal((char *)resp.body, "waited");
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
    tp_server_stop(&s2);
}

/* A deferred request answered by a task another thread posts to the loop. */
static fa_h3_request *parked;
static atomic_int parked_ready;
static int on_park(fa_h3_request *req, void *arg)
{
    parked = req;
    atomic_store(&parked_ready, 1);
    return 0;
}
static void answer_parked(fa_h3_server *s, void *arg)
{
    (void)fa_h3_respond(parked, 202, NULL, 0, arg, strlen(arg));
    parked = NULL;
}
static void *worker_thread(void *arg)
{
    while (!atomic_load(&parked_ready))
        usleep(1000);
    fa_h3_server_post(arg, answer_parked, "from another thread");
    return NULL;
}

static void test_deferred_answer_from_other_thread(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_handler park = {.on_request = on_park};
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};
    pthread_t th;

    tp_server_config(&cfg);
    assert_int_equal(fa_h3_server_new(&s2.srv, &cfg, &err), 0);
    assert_int_equal(fa_h3_server_route(s2.srv, "*", "/park", &park, NULL), 0);
    s2.port = fa_h3_server_port(s2.srv);
    snprintf(s2.server_addr, sizeof(s2.server_addr), "127.0.0.1:%d", s2.port);
    pthread_create(&s2.th, NULL, tp_server_thread, &s2);
    pthread_create(&th, NULL, worker_thread, s2.srv);
    c = client_for(&s2, NULL);
    assert_int_equal(do_req(c, "GET", "/park", NULL, 0, NULL, 0, 20000, &resp, &err), 0);
    pthread_join(th, NULL);
    assert_int_equal(resp.status, 202);
    assert_string_equal((char *)resp.body, "from another thread");
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
    tp_server_stop(&s2);
}

static void test_client_timeout_aborts_request_on_server(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    int closes = atomic_load(&tp_last.closes);

    assert_int_equal(do_req(c, "GET", "/wait?ms=10000", NULL, 0, NULL, 0, 300, &resp, &err),
                     FA_ERR_TIMEOUT);
    /* the server's handler learns the request was abandoned */
    wait_until(&tp_last.closes, closes + 1);
    assert_int_equal(atomic_load(&tp_last.close_err), FA_ERR_CANCELLED);
    /* and the connection goes on */
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_string_equal((char *)resp.body, "eu-west");
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
}

static void test_upload_aborted_midway(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    tp_gen g = {0, 3u << 20, 1u << 20}; /* the source fails after 1 MiB */
    int closes = atomic_load(&tp_last.closes);

    assert_int_equal(do_req(c, "POST", "/upload", NULL, 0, &g, (int64_t)g.len, 0, &resp, &err),
                     FA_ERR_IO);
    wait_until(&tp_last.closes, closes + 1);
    /* the handler is told, so it can drop the partial upload */
    assert_int_equal(atomic_load(&tp_last.close_err), FA_ERR_CANCELLED);
    assert_true(atomic_load(&tp_last.body_bytes) < g.len);
    fa_h3_client_del(c);
}

static void test_response_source_failure_resets_stream(void **state)
{
    fa_h3_client *c = client_for(&srv, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    int rv = do_req(c, "GET", "/gen/5000000?fail=1048576", NULL, 0, NULL, 0, 0, &resp, &err);
    assert_int_equal(rv, FA_ERR_HTTP);
    assert_non_null(strstr(err.msg, "stream closed by the server"));
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
}

static void test_retry_then_new_token(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    fa_h3_server_stats ss;

    tp_server_config(&cfg);
    cfg.retry = FA_H3_RETRY_ALWAYS;
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    c = client_for(&s2, NULL);
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.retry_seen, 1); /* address validated by a Retry round trip */
    fa_h3_client_close(c);
    /* the next connection presents the NEW_TOKEN it got: no Retry */
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.retry_seen, 0);
    fa_h3_client_del(c);
    ss = tp_server_stats(s2.srv);
    assert_int_equal(ss.retries_sent, 1);
    tp_server_stop(&s2);
}

static void test_connection_limit(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_client *a, *b;
    fa_h3_response resp;
    fa_error err = {0};
    int rv;

    tp_server_config(&cfg);
    cfg.max_connections = 1;
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    a = client_for(&s2, NULL);
    b = client_for(&s2, NULL);
    assert_int_equal(do_req(a, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    rv = do_req(b, "GET", "/whoami", NULL, 0, NULL, 0, 3000, &resp, &err);
    assert_int_equal(rv, FA_ERR_QUIC);
    assert_non_null(strstr(err.msg, "0x2")); /* CONNECTION_REFUSED (RFC 9000 20.1) */
    fa_h3_client_close(a);
    usleep(100000);
    assert_int_equal(do_req(b, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_del(a);
    fa_h3_client_del(b);
    tp_server_stop(&s2);
}

/* ------------------------------------------------- raw datagrams */

static int raw_socket(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void raw_send(int fd, int port, const uint8_t *p, size_t n)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(sendto(fd, p, n, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)n);
}

static ssize_t raw_recv(int fd, uint8_t *buf, size_t cap, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return -1;
    return recv(fd, buf, cap, 0);
}

static void test_version_negotiation_reset_and_junk(void **state)
{
    int fd = raw_socket();
    uint8_t pkt[1400], buf[2000];
    ssize_t n;
    fa_h3_server_stats st;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};
    uint32_t seed = 12345;

    /* an Initial-sized long-header packet of an unknown version */
    memset(pkt, 0, sizeof(pkt));
    pkt[0] = 0xc0;
    pkt[1] = 0xba;
    pkt[2] = 0xba;
    pkt[3] = 0xba;
    pkt[4] = 0xba;
    pkt[5] = 8;
    memset(pkt + 6, 0x11, 8);
    pkt[14] = 8;
    memset(pkt + 15, 0x22, 8);
    raw_send(fd, srv.port, pkt, 1200);
    n = raw_recv(fd, buf, sizeof(buf), 3000);
    assert_true(n > 7);
    assert_true(buf[0] & 0x80);                  /* long header */
    assert_memory_equal(buf + 1, "\0\0\0\0", 4); /* version 0: VN (RFC 9000 17.2.1) */
    assert_int_equal(buf[5], 8);
    assert_memory_equal(buf + 6, pkt + 15, 8); /* DCID = our SCID */

    /* a short-header packet for a connection the server does not know:
     * a stateless reset, smaller than what provoked it */
    pkt[0] = 0x40;
    memset(pkt + 1, 0x33, 18);
    for (int i = 19; i < 100; i++)
        pkt[i] = (uint8_t)i;
    raw_send(fd, srv.port, pkt, 100);
    n = raw_recv(fd, buf, sizeof(buf), 3000);
    assert_true(n >= 21 && n < 100);
    assert_int_equal(buf[0] & 0xc0, 0x40);

    /* junk of every size: dropped without harm */
    for (int i = 0; i < 300; i++) {
        size_t len = 1 + (seed % 1400);
        for (size_t j = 0; j < len; j++) {
            seed = seed * 1103515245u + 12345u;
            pkt[j] = (uint8_t)(seed >> 16);
        }
        if (i % 3 == 0)
            pkt[0] |= 0x80; /* long header, random version */
        raw_send(fd, srv.port, pkt, len);
    }
    close(fd);
    c = client_for(&srv, NULL);
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
    st = tp_server_stats(srv.srv);
    assert_true(st.version_negotiations_sent >= 1);
    assert_true(st.stateless_resets_sent >= 1);
    assert_true(st.datagrams_dropped > 0);
}

static void test_retry_above_load_threshold(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_client *a, *b;
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;

    tp_server_config(&cfg);
    cfg.retry = FA_H3_RETRY_ABOVE_LOAD;
    cfg.retry_load_threshold = 1;
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    a = client_for(&s2, NULL);
    b = client_for(&s2, NULL);
    /* below the threshold: straight in */
    assert_int_equal(do_req(a, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(a, &st);
    assert_int_equal(st.retry_seen, 0);
    /* one connection open = at the threshold: the next one is validated */
    assert_int_equal(do_req(b, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(b, &st);
    assert_int_equal(st.retry_seen, 1);
    fa_h3_client_del(a);
    fa_h3_client_del(b);
    tp_server_stop(&s2);
}

static atomic_int ticks;
static void on_tick(fa_h3_server *s, void *arg)
{
    atomic_fetch_add(&ticks, 1);
}

static void test_periodic_tick_and_qlog(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_client_config ccfg;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};
    char dir[400], cmd[600];
    FILE *p;
    int files = 0;

    snprintf(dir, sizeof(dir), "%s/qlog", tp_dir);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    tp_server_config(&cfg);
    cfg.tick_ms = 20;
    cfg.on_tick = on_tick;
    cfg.quic.qlog_dir = dir;
    atomic_store(&ticks, 0);
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    tp_client_config(&ccfg, &s2, "client-eu-west.crt", "client-eu-west.key");
    ccfg.quic.qlog_dir = dir;
    c = client_for(&s2, &ccfg);
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
    wait_until(&ticks, 3); /* the application's deadlines get their tick */
    tp_server_stop(&s2);
    /* one qlog per connection and side, with events in it */
    snprintf(cmd, sizeof(cmd), "find '%s' -name '*.sqlog' -size +1k | wc -l", dir);
    p = popen(cmd, "r");
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%d", &files), 1);
    pclose(p);
    assert_int_equal(files, 2);
}

/* The server comes up late: the client's first handshake attempts fail,
 * back-off and jitter, then it gets in. */
typedef struct late_arg {
    tp_server *s;
    int port;
} late_arg;

static void *late_server(void *arg)
{
    late_arg *a = arg;
    fa_h3_server_config cfg;
    char listen[64];
    usleep(700000);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", a->port);
    tp_server_config(&cfg);
    cfg.listen = listen;
    if (tp_server_start(a->s, &cfg) != 0)
        a->port = -1;
    return NULL;
}

static void test_reconnect_backoff_until_server_appears(void **state)
{
    tp_server s2;
    late_arg la;
    pthread_t th;
    fa_h3_client_config ccfg;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};
    fa_h3_client_stats st;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a;
    socklen_t l = sizeof(a);

    /* a port that is free now */
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    close(fd);
    la.s = &s2;
    la.port = ntohs(a.sin_port);
    memset(&s2, 0, sizeof(s2));
    snprintf(s2.server_addr, sizeof(s2.server_addr), "127.0.0.1:%d", la.port);
    pthread_create(&th, NULL, late_server, &la);
    tp_client_config(&ccfg, &s2, "client-eu-west.crt", "client-eu-west.key");
    ccfg.connect_timeout_ms = 250;
    ccfg.reconnect_initial_ms = 100;
    ccfg.reconnect_max_ms = 400;
    ccfg.connect_attempts = 20;
    c = client_for(&s2, &ccfg);
    assert_int_equal(do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 20000, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    pthread_join(th, NULL);
    assert_int_equal(la.port > 0, 1);
    fa_h3_client_get_stats(c, &st);
    assert_true(st.connect_failures >= 1);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
    tp_server_stop(&s2);
}

/* ------------------------------------------------------------ drain */

typedef struct req_thread_arg {
    tp_server *s;
    int rv, status;
} req_thread_arg;

static void *long_request(void *arg)
{
    req_thread_arg *a = arg;
    fa_h3_client *c = client_for(a->s, NULL);
    fa_h3_response resp;
    fa_error err = {0};
    a->rv = do_req(c, "GET", "/wait?ms=1500", NULL, 0, NULL, 0, 20000, &resp, &err);
    a->status = resp.status;
    fa_h3_response_free(&resp);
    fa_h3_client_del(c);
    return NULL;
}

static void test_drain_finishes_in_flight_and_refuses_new(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    req_thread_arg a;
    pthread_t th;
    fa_h3_client_config ccfg;
    fa_h3_client *late;
    fa_h3_response resp;
    fa_error err = {0};
    int rv;

    tp_server_config(&cfg);
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    memset(&a, 0, sizeof(a));
    a.s = &s2;
    pthread_create(&th, NULL, long_request, &a);
    wait_until(&tp_last.requests, 1); /* the long-poll is in flight */
    fa_h3_server_drain(s2.srv);
    /* a newcomer is refused while the drain runs */
    tp_client_config(&ccfg, &s2, "client-eu-west.crt", "client-eu-west.key");
    late = client_for(&s2, &ccfg);
    rv = do_req(late, "GET", "/whoami", NULL, 0, NULL, 0, 3000, &resp, &err);
    assert_int_not_equal(rv, 0);
    fa_h3_client_del(late);
    /* the request in flight completes, then the loop returns by itself */
    pthread_join(th, NULL);
    assert_int_equal(a.rv, 0);
    assert_int_equal(a.status, 200);
    pthread_join(s2.th, NULL);
    assert_int_equal(s2.rc, 0);
    fa_h3_server_del(s2.srv);
}

/* A drain ends a request answered in full that its client has not yet
 * acknowledged (a client stopped before the server never will) only as
 * it closes the connection: the client's late acknowledgement must find
 * the request still there, or the connection closed (run under ASan). */
static void test_drain_ends_answered_requests_as_it_closes(void **state)
{
    fa_h3_server_config cfg;
    tp_server s2;
    fa_h3_client *c;
    fa_h3_response resp;
    fa_error err = {0};

    (void)state;
    tp_server_config(&cfg);
    assert_int_equal(tp_server_start(&s2, &cfg), 0);
    c = client_for(&s2, NULL);
    assert_int_equal(do_req(c, "GET", "/gen/100000", NULL, 0, NULL, 0, 0, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    /* the client is silent now: the end of that response may be unacknowledged */
    fa_h3_server_drain(s2.srv);
    usleep(30 * 1000);
    /* it speaks again (acknowledgements first), inside the drain */
    (void)do_req(c, "GET", "/whoami", NULL, 0, NULL, 0, 2000, &resp, &err);
    fa_h3_response_free(&resp);
    pthread_join(s2.th, NULL);
    assert_int_equal(s2.rc, 0);
    fa_h3_client_del(c);
    fa_h3_server_del(s2.srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_status_query_headers),
        cmocka_unit_test(test_head_answers_headers_only),
        cmocka_unit_test(test_malformed_message_resets_only_its_stream),
        cmocka_unit_test(test_413_keeps_connection_usable),
        cmocka_unit_test(test_backpressure_holds_sender_to_window),
        cmocka_unit_test(test_long_poll_outlives_idle_timeout),
        cmocka_unit_test(test_deferred_answer_from_other_thread),
        cmocka_unit_test(test_client_timeout_aborts_request_on_server),
        cmocka_unit_test(test_upload_aborted_midway),
        cmocka_unit_test(test_response_source_failure_resets_stream),
        cmocka_unit_test(test_retry_then_new_token),
        cmocka_unit_test(test_connection_limit),
        cmocka_unit_test(test_version_negotiation_reset_and_junk),
        cmocka_unit_test(test_retry_above_load_threshold),
        cmocka_unit_test(test_periodic_tick_and_qlog),
        cmocka_unit_test(test_reconnect_backoff_until_server_appears),
        cmocka_unit_test(test_drain_finishes_in_flight_and_refuses_new),
        cmocka_unit_test(test_drain_ends_answered_requests_as_it_closes),
    };
    tp_log_level(FA_LOG_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
