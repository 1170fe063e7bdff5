/* Datagram sizes (transport/h3.h max_udp_payload, h3_internal.h
 * fa_qconn_dgram): the plan from the option and the route MTU, the kernel's
 * route MTU itself, and on the wire: path-sized datagrams on loopback (and in
 * qlog), Internet-sized ones when pinned (the peer obeys our announced
 * limit), and a path that silently drops large datagrams (an in-test
 * forwarder) still carrying whole transfers. */
#include "test_transport_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "transport/h3_internal.h"

static tp_server srv;

static int setup(void **state)
{
    fa_h3_server_config cfg;
    tp_gen_init();
    if (tp_setup_pki() != 0)
        return -1;
    tp_server_config(&cfg);
    return tp_server_start(&srv, &cfg);
}

static int teardown(void **state)
{
    tp_server_stop(&srv);
    tp_teardown_pki();
    return 0;
}

/* ------------------------------------------------------------- the plan */

static void plan(fa_qconn_dgram_plan *p, uint32_t opt, unsigned route_mtu)
{
    memset(p, 0xa5, sizeof(*p));
    fa_qconn_dgram_plan_make(p, opt, route_mtu, 28, FA_UDP_MAX_PAYLOAD_V4);
}

static void test_plan_auto(void **state)
{
    fa_qconn_dgram_plan p;

    /* loopback: IP_MTU says 65535 (the device's 65536 capped), IPv4 caps
     * the payload at 65535 - 28 */
    plan(&p, 0, 65535);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 65507);
    assert_int_equal(p.advertise, 65507);
    /* an ACK per such datagram or two: 8 of them would be more than a
     * congestion window holds (every ACK would wait max_ack_delay) */
    assert_int_equal(p.ack_thresh, 2);
    /* IPv6 loopback: 65536 - 48 */
    fa_qconn_dgram_plan_make(&p, 0, 65536, 48, FA_UDP_MAX_PAYLOAD_V6);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 65488);
    /* a 9000-byte jumbo-frame LAN: the boundary is included */
    plan(&p, 0, 9000);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 8972);
    assert_int_equal(p.advertise, 8972);
    assert_int_equal(p.ack_thresh, 7); /* ~64 KB */
    /* just below: standard discovery, announcing what the route carries */
    plan(&p, 0, 8999);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 8971);
    /* Ethernet */
    plan(&p, 0, 1500);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 1472);
    assert_int_equal(p.ack_thresh, 8); /* 8 packets of 1452 bytes */
    /* a route below QUIC's minimum still announces 1200 (RFC 9000 18.2) */
    plan(&p, 0, 1000);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.advertise, 1200);
    /* unknown route: ngtcp2's defaults */
    plan(&p, 0, 0);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 65527);
}

static void test_plan_explicit(void **state)
{
    fa_qconn_dgram_plan p;

    /* Internet-sized on loopback: discovery up to 1452, announced */
    plan(&p, 1452, 65535);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 1452);
    plan(&p, 1300, 65535);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1300);
    assert_int_equal(p.advertise, 1300);
    /* below QUIC's minimum: 1200 */
    plan(&p, 1, 65535);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1200);
    assert_int_equal(p.advertise, 1200);
    /* a jumbo size on a route that takes it, or whose MTU is unknown */
    plan(&p, 8952, 65535);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 8952);
    assert_int_equal(p.advertise, 8952);
    plan(&p, 8952, 0);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 8952);
    /* ... on a route that does not (the kernel would refuse them): a
     * jumbo-frame route's own size, else as auto */
    plan(&p, 65000, 9000);
    assert_int_equal(p.path_sized, 1);
    assert_int_equal(p.max_tx, 8972);
    assert_int_equal(p.advertise, 8972);
    plan(&p, 8952, 4000);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 3972);
    plan(&p, 8952, 1500);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1452);
    assert_int_equal(p.advertise, 1472);
    /* a pinned Internet size holds whatever the route */
    plan(&p, 1400, 1000);
    assert_int_equal(p.path_sized, 0);
    assert_int_equal(p.max_tx, 1400);
    assert_int_equal(p.advertise, 1400);
    /* beyond what one datagram can carry */
    plan(&p, 100000, 65535);
    assert_int_equal(p.max_tx, 65507);
    plan(&p, 100000, 0);
    assert_int_equal(p.max_tx, 65507);
}

static void test_route_mtu(void **state)
{
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
    struct sockaddr_storage un;
    unsigned mtu;

    memset(&in4, 0, sizeof(in4));
    in4.sin_family = AF_INET;
    in4.sin_port = htons(9);
    in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Linux gives lo a 65536-byte MTU by default */
    mtu = fa_udp_route_mtu((struct sockaddr *)&in4, sizeof(in4));
    assert_true(mtu >= FA_QCONN_BIG_MTU);
    assert_int_equal(fa_udp_header_len((struct sockaddr *)&in4), 28);

    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(9);
    in6.sin6_addr = in6addr_loopback;
    assert_int_equal(fa_udp_header_len((struct sockaddr *)&in6), 48);
    /* an IPv4-mapped peer has IPv4 headers */
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
    assert_int_equal(fa_udp_header_len((struct sockaddr *)&in6), 28);

    /* not an IP address: unknown */
    memset(&un, 0, sizeof(un));
    un.ss_family = AF_UNIX;
    assert_int_equal(fa_udp_route_mtu((struct sockaddr *)&un, sizeof(un)), 0);
}

/* The IPv6 loopback's MTU: a machine (or container) without an IPv6
 * loopback route cannot tell, and the test shows as skipped there. */
static void test_route_mtu_ipv6(void **state)
{
    struct sockaddr_in6 in6;
    unsigned mtu;

    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(9);
    in6.sin6_addr = in6addr_loopback;
    mtu = fa_udp_route_mtu((struct sockaddr *)&in6, sizeof(in6));
    if (mtu == 0) {
        fprintf(stderr, "test: no IPv6 loopback route here\n");
        skip();
    }
    assert_true(mtu >= FA_QCONN_BIG_MTU);
}

/* ---------------------------------------------------------- on the wire */

static fa_h3_client *client_to(const char *addr, uint32_t udp_payload, const char *qlog_dir)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_error err = {0};
    int rv;
    tp_client_config(&cfg, &srv, "client-eu-west.crt", "client-eu-west.key");
    if (addr)
        cfg.server = addr;
    cfg.quic.max_udp_payload = udp_payload;
    cfg.quic.qlog_dir = qlog_dir;
    rv = fa_h3_client_new(&c, &cfg, &err);
    if (rv != 0)
        fail_msg("client: %s", fa_error_msg(&err, rv));
    return c;
}


/* The server's statistics, read on its loop thread. */
static fa_h3_server_stats server_stats(void)
{
    return tp_server_stats(srv.srv);
}

/* Does the qlog file in dir record our max_udp_payload_size and a sent
 * packet longer than min_len? */
static void check_qlog(const char *dir, unsigned advertised, size_t min_len)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600], want[64], *buf;
    int files = 0, has_param = 0;
    size_t longest = 0;

    assert_non_null(d);
    snprintf(want, sizeof(want), "\"max_udp_payload_size\":%u", advertised);
    buf = malloc(64u << 20);
    assert_non_null(buf);
    while ((e = readdir(d)) != NULL) {
        FILE *f;
        size_t n;
        if (!strstr(e->d_name, ".sqlog"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        f = fopen(path, "r");
        assert_non_null(f);
        n = fread(buf, 1, (64u << 20) - 1, f);
        fclose(f);
        buf[n] = '\0';
        files++;
        has_param |= strstr(buf, want) != NULL;
        for (char *p = buf; (p = strstr(p, "transport:packet_sent")) != NULL; p++) {
            char *r = strstr(p, "\"raw\":{\"length\":"), *nl = strchr(p, '\n');
            if (r && (!nl || r < nl)) {
                size_t len = strtoull(r + 16, NULL, 10);
                if (len > longest)
                    longest = len;
            }
        }
    }
    closedir(d);
    free(buf);
    assert_int_equal(files, 1);
    assert_true(has_param);
    assert_true(longest >= min_len);
}

static void test_loopback_path_sized_both_ways(void **state)
{
    char qdir[400];
    fa_h3_client *c;
    fa_h3_client_stats st;
    fa_h3_server_stats ss;

    snprintf(qdir, sizeof(qdir), "%s/qlog-auto", tp_dir);
    assert_int_equal(mkdir(qdir, 0700), 0);
    c = client_to(NULL, 0, qdir);
    tp_download(c, 4u << 20);
    tp_upload(c, 4u << 20);
    fa_h3_client_get_stats(c, &st);
    ss = server_stats();
    /* both ends sized their datagrams from the loopback route ... */
    assert_true(st.route_mtu >= FA_QCONN_BIG_MTU);
    assert_int_equal(st.udp_payload, st.route_mtu - 28 < 65507 ? st.route_mtu - 28 : 65507);
    /* ... and sent them: the download came in datagrams of 60 KB and more,
     * and the upload went out in them */
    assert_true(st.largest_datagram_received >= 60000);
    assert_true(st.largest_datagram_sent >= 60000);
    assert_true(ss.largest_datagram_received >= 60000);
    assert_true(ss.largest_datagram_sent >= 60000);
    fa_h3_client_del(c);
    /* qlog: our transport parameter, and packets that large */
    check_qlog(qdir, st.udp_payload, 60000);
}

/* A blocking client stops reading between requests: the server's last
 * packets go unacknowledged and its PTOs fire, as on a path that drops
 * large datagrams, until the client reads again and acknowledges them:
 * then the server's datagrams are large again, with no fall-back left. */
static void test_stalled_peer_is_no_black_hole(void **state)
{
    fa_h3_client *c = client_to(NULL, 0, NULL);
    fa_h3_server_stats before, ss;
    fa_h3_client_stats st;

    tp_download(c, 4u << 20);
    before = server_stats();
    usleep(300 * 1000); /* several of the server's PTOs on loopback */
    tp_download(c, 4u << 20);
    ss = server_stats();
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(ss.datagram_fallbacks, before.datagram_fallbacks);
    assert_true(st.largest_datagram_received >= 60000);
    assert_int_equal(st.connects, 1);
    fa_h3_client_del(c);
}

static void test_pinned_internet_sized(void **state)
{
    fa_h3_client *c = client_to(NULL, 1452, NULL);
    fa_h3_client_stats st;

    tp_download(c, 4u << 20);
    tp_upload(c, 4u << 20);
    fa_h3_client_get_stats(c, &st);
    /* we sent at most 1452 bytes (discovery), and the path-sized server
     * obeyed the 1452 we announced */
    assert_true(st.udp_payload >= 1200 && st.udp_payload <= 1452);
    assert_true(st.largest_datagram_sent <= 1452);
    assert_true(st.largest_datagram_received <= 1452);
    assert_true(st.largest_datagram_received >= 1200);
    assert_int_equal(st.datagram_fallbacks, 0);
    fa_h3_client_del(c);
}

/* ---------------------------------------------- a path with a black hole */

/* A UDP forwarder between one client and the server that silently drops
 * every datagram longer than `limit` in both directions, as a path whose
 * MTU is smaller than the route claims and whose ICMP is filtered. */
typedef struct blackhole_fwd {
    int front, back; /* client side (bound), server side (connected) */
    int port;
    size_t limit;
    atomic_int stop;
    atomic_ullong dropped, passed;
    pthread_t th;
} blackhole_fwd;

static void *fwd_thread(void *arg)
{
    blackhole_fwd *f = arg;
    static uint8_t buf[65536];
    struct sockaddr_storage client;
    socklen_t clen = 0;

    while (!atomic_load(&f->stop)) {
        struct pollfd p[2] = {{f->front, POLLIN, 0}, {f->back, POLLIN, 0}};
        if (poll(p, 2, 20) <= 0)
            continue;
        if (p[0].revents & POLLIN) {
            struct sockaddr_storage from;
            socklen_t fl = sizeof(from);
            ssize_t n = recvfrom(f->front, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
            if (n >= 0) {
                memcpy(&client, &from, fl);
                clen = fl;
                if ((size_t)n > f->limit)
                    atomic_fetch_add(&f->dropped, 1);
                else if (send(f->back, buf, (size_t)n, 0) >= 0)
                    atomic_fetch_add(&f->passed, 1);
            }
        }
        if (p[1].revents & POLLIN) {
            ssize_t n = recv(f->back, buf, sizeof(buf), 0);
            if (n >= 0 && clen) {
                if ((size_t)n > f->limit)
                    atomic_fetch_add(&f->dropped, 1);
                else if (sendto(f->front, buf, (size_t)n, 0, (struct sockaddr *)&client, clen) >= 0)
                    atomic_fetch_add(&f->passed, 1);
            }
        }
    }
    return NULL;
}

static void fwd_start(blackhole_fwd *f, int server_port, size_t limit)
{
    struct sockaddr_in a;
    socklen_t l = sizeof(a);
    int big = 8 << 20;

    memset(f, 0, sizeof(*f));
    f->limit = limit;
    f->front = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    f->back = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(f->front >= 0 && f->back >= 0);
    setsockopt(f->front, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    setsockopt(f->back, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->front, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(f->front, (struct sockaddr *)&a, &l), 0);
    f->port = ntohs(a.sin_port);
    a.sin_port = htons((uint16_t)server_port);
    assert_int_equal(connect(f->back, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(pthread_create(&f->th, NULL, fwd_thread, f), 0);
}

static void fwd_stop(blackhole_fwd *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->front);
    close(f->back);
}

static void test_black_hole_for_large_datagrams(void **state)
{
    blackhole_fwd f;
    char addr[64];
    fa_h3_client *c;
    fa_h3_client_stats st;
    fa_h3_server_stats before = server_stats(), ss;

    fwd_start(&f, srv.port, 1500 - 28);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f.port);
    /* both ends see a loopback route, so both go path-sized after the
     * handshake (1200-byte datagrams, which pass) */
    c = client_to(addr, 0, NULL);
    tp_download(c, 4u << 20);
    tp_upload(c, 4u << 20);
    fa_h3_client_get_stats(c, &st);
    ss = server_stats();
    /* the large datagrams vanished, each side's PTO fell back to 1200-byte
     * ones, and the transfers arrived whole (SHA-256 above) */
    assert_true(atomic_load(&f.dropped) > 0);
    assert_true(ss.datagram_fallbacks > before.datagram_fallbacks);
    assert_true(st.datagram_fallbacks >= 1);
    /* after the low period the sender tries large datagrams again, loses
     * them again, and falls back for longer; the transfer still completes */
    usleep(1100 * 1000);
    tp_download(c, 4u << 20);
    ss = server_stats();
    assert_true(ss.datagram_fallbacks >= before.datagram_fallbacks + 2);
    fa_h3_client_del(c);
    fwd_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_auto),
        cmocka_unit_test(test_plan_explicit),
        cmocka_unit_test(test_route_mtu),
        cmocka_unit_test(test_route_mtu_ipv6),
        cmocka_unit_test(test_loopback_path_sized_both_ways),
        cmocka_unit_test(test_stalled_peer_is_no_black_hole),
        cmocka_unit_test(test_pinned_internet_sized),
        cmocka_unit_test(test_black_hole_for_large_datagrams),
    };
    tp_log_level(FA_LOG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
