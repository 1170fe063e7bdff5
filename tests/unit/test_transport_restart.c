/* A server that crashes under a client's long-poll and is replaced by a new
 * one on the same port with the same static secret (docs/history.md, Recovery):
 * the client's keep-alive PINGs reach the new server, which knows no
 * connection and answers with a stateless reset the client can verify; the
 * request fails over at once and the new server answers it.  Without the
 * PINGs the client learns only at its idle timeout.  A download cut short is
 * reported, never sent again behind the caller's back.  And the reset
 * itself: packets down to 22 bytes (a PING is 40) get one, one byte
 * shorter. */
#include "test_transport_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/fa_time.h"
#include "transport/h3_internal.h"

static const uint8_t secret[32] = "fedagg test static secret 32 by";

static int setup(void **state)
{
    tp_gen_init();
    return tp_setup_pki();
}

static int teardown(void **state)
{
    tp_teardown_pki();
    return 0;
}

/* The replacement's /wait answers at once, so the retry is told apart. */
static int on_wait_now(fa_h3_request *req, void *arg)
{
    return fa_h3_respond(req, 200, NULL, 0, "restarted", 9);
}

static void server_config(fa_h3_server_config *cfg, const char *listen, uint32_t idle_ms)
{
    tp_server_config(cfg);
    cfg->listen = listen;
    cfg->quic.idle_timeout_ms = idle_ms;
    memcpy(cfg->static_secret, secret, sizeof(secret));
    cfg->has_static_secret = 1;
}

static void start_replacement(tp_server *t, int port, uint32_t idle_ms)
{
    fa_h3_server_config cfg;
    fa_h3_handler h = {.on_request = on_wait_now};
    fa_error err = {0};
    char listen[64];
    int rv;

    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    server_config(&cfg, listen, idle_ms);
    memset(t, 0, sizeof(*t));
    rv = fa_h3_server_new(&t->srv, &cfg, &err);
    if (rv != 0)
        fail_msg("replacement server: %s", fa_error_msg(&err, rv));
    assert_int_equal(fa_h3_server_route(t->srv, "GET", "/wait", &h, NULL), 0);
    t->port = fa_h3_server_port(t->srv);
    snprintf(t->server_addr, sizeof(t->server_addr), "127.0.0.1:%d", t->port);
    assert_int_equal(pthread_create(&t->th, NULL, tp_server_thread, t), 0);
}

/* On the loop: forget every connection without a word to the peers, as a
 * SIGKILL does, then leave the loop. */
static void crash_task(fa_h3_server *srv, void *arg)
{
    fa_h3_server_forget_all(srv);
    fa_h3_server_stop(srv);
}

static void crash(tp_server *t)
{
    assert_int_equal(fa_h3_server_post(t->srv, crash_task, NULL), 0);
    pthread_join(t->th, NULL);
    fa_h3_server_del(t->srv); /* the port is free again */
    t->srv = NULL;
}

/* Stops t's loop, then reads its counters (final once the loop has left:
 * read while it runs, a reset the client has already acted on may not be
 * counted yet) and frees it. */
static void stop_with_stats(tp_server *t, fa_h3_server_stats *st)
{
    fa_h3_server_stop(t->srv);
    pthread_join(t->th, NULL);
    fa_h3_server_get_stats(t->srv, st);
    fa_h3_server_del(t->srv);
    t->srv = NULL;
}

typedef struct poll_arg {
    const tp_server *s;
    uint32_t idle_ms, keepalive_ms;
    int rv, status;
    char body[32];
    double done_at;
    fa_h3_client_stats st;
} poll_arg;

static void *long_poll(void *arg)
{
    poll_arg *a = arg;
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};

    tp_client_config(&cfg, a->s, "client-eu-west.crt", "client-eu-west.key");
    cfg.quic.idle_timeout_ms = a->idle_ms;
    cfg.keepalive_ms = a->keepalive_ms;
    a->rv = fa_h3_client_new(&c, &cfg, &err);
    if (a->rv != 0)
        return NULL;
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = "/wait?ms=60000";
    req.timeout_ms = 90000;
    req.idempotent = 1;
    a->rv = fa_h3_client_request(c, &req, &resp, &err);
    a->done_at = fa_time_mono_s();
    if (a->rv == 0) {
        a->status = resp.status;
        snprintf(a->body, sizeof(a->body), "%s", resp.body ? (char *)resp.body : "");
    } else {
        fprintf(stderr, "test: long-poll: %s\n", fa_error_msg(&err, a->rv));
    }
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &a->st);
    fa_h3_client_del(c);
    return NULL;
}

/* Runs a long-poll, crashes its server 300 ms in, starts the replacement and
 * returns the seconds from the replacement's start to the response. */
static double restart_under_long_poll(uint32_t idle_ms, uint32_t keepalive_ms,
                                      fa_h3_server_stats *st)
{
    fa_h3_server_config cfg;
    tp_server a, b;
    poll_arg pa;
    pthread_t th;
    double t0;

    server_config(&cfg, "127.0.0.1:0", idle_ms);
    assert_int_equal(tp_server_start(&a, &cfg), 0);
    memset(&pa, 0, sizeof(pa));
    pa.s = &a;
    pa.idle_ms = idle_ms;
    pa.keepalive_ms = keepalive_ms;
    assert_int_equal(pthread_create(&th, NULL, long_poll, &pa), 0);
    for (int i = 0; i < 500 && atomic_load(&tp_last.requests) < 1; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&tp_last.requests), 1); /* the long-poll waits on a */
    usleep(300000);
    crash(&a);
    start_replacement(&b, a.port, idle_ms);
    t0 = fa_time_mono_s();
    pthread_join(th, NULL);
    assert_int_equal(pa.rv, 0);
    assert_int_equal(pa.status, 200);
    assert_string_equal(pa.body, "restarted"); /* answered by the new server */
    assert_int_equal(pa.st.connects, 2);
    stop_with_stats(&b, st);
    return pa.done_at - t0;
}

static void test_long_poll_fails_over_to_restarted_server_at_once(void **state)
{
    fa_h3_server_stats st;
    /* the default idle timeout (a minute) and PINGs every second */
    double took = restart_under_long_poll(60000, 1000, &st);
    fprintf(stderr, "test: long-poll answered by the restarted server %.2f s after its start\n",
            took);
    assert_true(st.stateless_resets_sent >= 1);
    assert_true(took < 5.0); /* about one keep-alive interval; 60 s before */
}

static void test_without_pings_only_the_idle_timeout_tells(void **state)
{
    fa_h3_server_stats st;
    /* PINGs off, a 1.5 s idle timeout: the client learns when it expires,
     * about 1.5 s after the server's last packet (no sooner) */
    double took = restart_under_long_poll(1500, 0, &st);
    fprintf(stderr, "test: without PINGs: answered %.2f s after the restart\n", took);
    assert_true(took >= 0.9);
    assert_int_equal(st.stateless_resets_sent, 0);
}

/* A download under way when the server dies: its first bytes already went
 * to on_body, so the client must not send it again by itself (the body would
 * arrive twice, the first bytes concatenated with the whole); it reports the
 * loss at once, and the caller starts over on a fresh connection. */
#define STALL_FIRST 1000

static ssize_t stall_read(void *arg, uint8_t *buf, size_t cap)
{
    int *sent = arg;
    if (*sent)
        return FA_ERR_AGAIN; /* never resumed: the rest never comes */
    *sent = 1;
    memset(buf, 'm', cap < STALL_FIRST ? cap : STALL_FIRST);
    return cap < STALL_FIRST ? (ssize_t)cap : STALL_FIRST;
}

static void stall_done(void *arg, int err)
{
    free(arg);
}

static int on_stall(fa_h3_request *req, void *arg)
{
    int *sent = calloc(1, sizeof(*sent));
    if (!sent)
        return -1;
    atomic_fetch_add(&tp_last.requests, 1);
    if (fa_h3_respond_stream(req, 200, NULL, 0, 1 << 20, stall_read, stall_done, sent) != 0) {
        free(sent);
        return -1;
    }
    return 0;
}

static int count_body(void *arg, const uint8_t *data, size_t len)
{
    *(uint64_t *)arg += len;
    return 0;
}

typedef struct dl_arg {
    const tp_server *s;
    int rv;
    uint64_t got;
    double done_at;
    fa_h3_client_stats st;
} dl_arg;

static void *download(void *arg)
{
    dl_arg *a = arg;
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};

    tp_client_config(&cfg, a->s, "client-eu-west.crt", "client-eu-west.key");
    a->rv = fa_h3_client_new(&c, &cfg, &err);
    if (a->rv != 0)
        return NULL;
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = "/stall";
    req.timeout_ms = 60000;
    req.idempotent = 1; /* even so: bytes went to on_body */
    req.on_body = count_body;
    req.on_body_arg = &a->got;
    a->rv = fa_h3_client_request(c, &req, &resp, &err);
    a->done_at = fa_time_mono_s();
    fa_h3_response_free(&resp);
    fa_h3_client_get_stats(c, &a->st);
    fa_h3_client_del(c);
    return NULL;
}

static void test_download_cut_by_restart_is_not_resent(void **state)
{
    fa_h3_server_config cfg;
    fa_h3_handler h = {.on_request = on_stall};
    fa_h3_server_stats st;
    fa_error err = {0};
    tp_server a, b;
    dl_arg da;
    pthread_t th;
    double t0;

    server_config(&cfg, "127.0.0.1:0", 60000);
    memset(&a, 0, sizeof(a));
    memset(&tp_last, 0, sizeof(tp_last));
    assert_int_equal(fa_h3_server_new(&a.srv, &cfg, &err), 0);
    assert_int_equal(fa_h3_server_route(a.srv, "GET", "/stall", &h, NULL), 0);
    a.port = fa_h3_server_port(a.srv);
    snprintf(a.server_addr, sizeof(a.server_addr), "127.0.0.1:%d", a.port);
    assert_int_equal(pthread_create(&a.th, NULL, tp_server_thread, &a), 0);
    memset(&da, 0, sizeof(da));
    da.s = &a;
    assert_int_equal(pthread_create(&th, NULL, download, &da), 0);
    for (int i = 0; i < 500 && atomic_load(&tp_last.requests) < 1; i++)
        usleep(10000);
    usleep(300000); /* the first bytes have arrived */
    crash(&a);
    start_replacement(&b, a.port, 60000);
    t0 = fa_time_mono_s();
    pthread_join(th, NULL);
    assert_int_equal(da.rv, FA_ERR_QUIC);  /* reported, not hidden */
    assert_int_equal(da.got, STALL_FIRST); /* each byte once */
    assert_int_equal(da.st.connects, 1);   /* not sent again */
    assert_true(da.done_at - t0 < 5.0);    /* at the reset, not the idle timeout */
    stop_with_stats(&b, &st);
    assert_true(st.stateless_resets_sent >= 1);
}

/* ------------------------------------------------ the reset, byte by byte */

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

static ssize_t raw_roundtrip(int fd, int port, const uint8_t *p, size_t n, uint8_t *buf, size_t cap,
                             int ms)
{
    struct sockaddr_in a;
    struct pollfd pf = {fd, POLLIN, 0};
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(sendto(fd, p, n, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)n);
    if (poll(&pf, 1, ms) != 1)
        return -1;
    return recv(fd, buf, cap, 0);
}

/* The token at the end of the server's answer to a short packet of n bytes
 * for an unknown CID; checks the answer's size and form. */
static void reset_token(int fd, int port, const uint8_t *pkt, size_t n, uint8_t *token)
{
    uint8_t buf[2000];
    ssize_t r = raw_roundtrip(fd, port, pkt, n, buf, sizeof(buf), 2000);
    size_t want = n - 1 < 128 ? n - 1 : 128; /* smaller: no loop (10.3.3) */
    if (r != (ssize_t)want)
        fail_msg("a %zu-byte packet: a %zd-byte reply, want %zu", n, r, want);
    assert_int_equal(buf[0] & 0xc0, 0x40); /* looks like a short-header packet */
    memcpy(token, buf + r - NGTCP2_STATELESS_RESET_TOKENLEN, NGTCP2_STATELESS_RESET_TOKENLEN);
}

static void test_stateless_reset_for_short_packets(void **state)
{
    fa_h3_server_config cfg;
    tp_server s;
    int fd = raw_socket();
    uint8_t pkt[200], buf[64], tok[NGTCP2_STATELESS_RESET_TOKENLEN];
    uint8_t tok1[NGTCP2_STATELESS_RESET_TOKENLEN], tok2[NGTCP2_STATELESS_RESET_TOKENLEN];
    static const size_t sizes[] = {22, 40, 43, 44, 100, 180};

    memset(pkt, 0, sizeof(pkt));
    pkt[0] = 0x40; /* short header, fixed bit */
    memset(pkt + 1, 0x5a, 18);
    for (size_t i = 19; i < sizeof(pkt); i++)
        pkt[i] = (uint8_t)(i * 7);
    server_config(&cfg, "127.0.0.1:0", 60000);
    assert_int_equal(tp_server_start(&s, &cfg), 0);
    /* every size from the smallest that leaves room for a smaller reset,
     * through a keep-alive PING's 40 bytes, gets one; the token is a
     * function of the CID (and the secret) only */
    reset_token(fd, s.port, pkt, sizes[0], tok1);
    for (size_t i = 1; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        reset_token(fd, s.port, pkt, sizes[i], tok);
        assert_memory_equal(tok, tok1, sizeof(tok));
    }
    /* 21 bytes: a reset would be as long as the packet (two servers could
     * answer each other forever) */
    assert_int_equal(raw_roundtrip(fd, s.port, pkt, 21, buf, sizeof(buf), 300), -1);
    tp_server_stop(&s);

    /* a restarted server (same secret) gives the same token: the client
     * that holds it believes the reset; another secret gives another */
    assert_int_equal(tp_server_start(&s, &cfg), 0);
    reset_token(fd, s.port, pkt, 40, tok);
    assert_memory_equal(tok, tok1, sizeof(tok));
    tp_server_stop(&s);
    cfg.static_secret[0] ^= 1;
    assert_int_equal(tp_server_start(&s, &cfg), 0);
    reset_token(fd, s.port, pkt, 40, tok2);
    assert_memory_not_equal(tok2, tok1, sizeof(tok2));
    tp_server_stop(&s);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stateless_reset_for_short_packets),
        cmocka_unit_test(test_long_poll_fails_over_to_restarted_server_at_once),
        cmocka_unit_test(test_without_pings_only_the_idle_timeout_tells),
        cmocka_unit_test(test_download_cut_by_restart_is_not_resent),
    };
    tp_log_level(FA_LOG_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown);
}
