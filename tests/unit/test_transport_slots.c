/* test_transport_slots.c - the server against peers that hold what others
 * need: half-open handshakes that answer Retry (from one address and from
 * many), too many connections from one address or one identity,
 * certificates of the CA that are no members or are revoked (a CRL made
 * by certtool, reloaded while the server runs), and a CONNECTION_CLOSE
 * whose reason forges a log line.  Each attack runs while fresh regions
 * connect; they must get in, within a bound far below what the attacks
 * cost before the defences (seconds, or never).  The attackers are
 * tests/tools/hostile. */
#include "test_transport_util.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "hostile.h"

static int setup(void **state)
{
    tp_log_level(FA_LOG_ERROR);
    tp_gen_init();
    return tp_setup_pki();
}

static int teardown(void **state)
{
    tp_teardown_pki();
    return 0;
}

static fa_h3_client *client_as(const tp_server *t, const char *who, uint32_t timeout_ms)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_error err = {0};
    char crt[64], key[64];
    snprintf(crt, sizeof(crt), "client-%s.crt", who);
    snprintf(key, sizeof(key), "client-%s.key", who);
    tp_client_config(&cfg, t, crt, key);
    cfg.connect_timeout_ms = timeout_ms;
    cfg.connect_attempts = 1;
    if (fa_h3_client_new(&c, &cfg, &err) != 0)
        fail_msg("client: %s", err.msg);
    return c;
}

static int get_status(fa_h3_client *c, const char *path, uint32_t timeout_ms, fa_error *err)
{
    fa_h3_client_req req;
    fa_h3_response resp;
    int rv, status;
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = path;
    req.timeout_ms = timeout_ms;
    rv = fa_h3_client_request(c, &req, &resp, err);
    if (rv != 0)
        return rv;
    status = resp.status;
    fa_h3_response_free(&resp);
    return status;
}

/* ------------------------------------------------- half-open handshakes */

struct flood_arg {
    fa_hq_flood *f;
    atomic_int stop;
};

static void *flood_thread(void *arg)
{
    struct flood_arg *a = arg;
    while (!atomic_load(&a->stop))
        fa_hq_flood_run(a->f, 100);
    return NULL;
}

/* 300 handshakes from one address and 300 more from 30 others, each
 * answering Retry and never finishing, renewed as the server drops them,
 * against a server of 256 connections: six fresh regions connect one after
 * the other all the same, each at its first attempt.  Without the slots
 * (one cap for every connection, handshakes living 10 s) the flood holds
 * all 256 and the fresh regions are refused. */
static void test_halfopen_flood_does_not_lock_out(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_hq_flood *one = NULL, *many = NULL;
    struct flood_arg a1 = {0}, a2 = {0};
    pthread_t t1, t2;
    const char *binds[30];
    char addrs[30][16];
    fa_error err = {0};
    fa_hq_flood_stats s1, s2;
    fa_h3_server_stats st;

    tp_server_config(&cfg);
    cfg.max_connections = 256; /* the flood is larger: it could take all of them */
    cfg.max_handshakes = 64;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    for (int i = 0; i < 30; i++) {
        snprintf(addrs[i], sizeof(addrs[i]), "127.0.1.%d", i + 1);
        binds[i] = addrs[i];
    }
    binds[0] = addrs[0];
    {
        const char *b = "127.0.0.2";
        assert_int_equal(
            fa_hq_flood_new(&one, srv.server_addr, tp_path("ca.crt"), &b, 1, 300, 2500, &err), 0);
    }
    assert_int_equal(
        fa_hq_flood_new(&many, srv.server_addr, tp_path("ca.crt"), binds, 30, 300, 2500, &err), 0);
    a1.f = one;
    a2.f = many;
    assert_int_equal(pthread_create(&t1, NULL, flood_thread, &a1), 0);
    assert_int_equal(pthread_create(&t2, NULL, flood_thread, &a2), 0);
    usleep(1500 * 1000); /* let the flood fill what it can */

    for (int i = 0; i < 6; i++) {
        fa_h3_client *c = client_as(&srv, i % 2 ? "eu-west" : "us-east", 3000);
        int rv = get_status(c, "/gen/100", 5000, &err);
        if (rv != 200)
            fail_msg("fresh region %d under the flood: %s", i, rv < 0 ? err.msg : "not 200");
        fa_h3_client_del(c);
        usleep(200 * 1000);
    }
    st = tp_server_stats(srv.srv);
    atomic_store(&a1.stop, 1);
    atomic_store(&a2.stop, 1);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    fa_hq_flood_get_stats(one, &s1);
    fa_hq_flood_get_stats(many, &s2);
    fa_hq_flood_del(one);
    fa_hq_flood_del(many);
    /* the flood did what it says: it answered Retries, the server took
     * its handshakes and dropped them to make room */
    assert_true(s1.retries > 0 && s2.retries > 0);
    assert_true(s1.answered > 0 && s2.answered > 0);
    assert_true(st.retries_sent > 0);
    assert_true(st.handshakes_evicted > 0);
    assert_true(st.current_handshakes <= 64);
    tp_server_stop(&srv);
}

/* A handshake that never finishes is dropped at handshake_timeout_ms. */
static void test_halfopen_times_out(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_hq_flood *f = NULL;
    fa_error err = {0};
    fa_h3_server_stats st;

    tp_server_config(&cfg);
    cfg.handshake_timeout_ms = 500;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    assert_int_equal(fa_hq_flood_new(&f, srv.server_addr, tp_path("ca.crt"), NULL, 0, 3, 0, &err),
                     0);
    fa_hq_flood_run(f, 300);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.current_handshakes, 3);
    fa_hq_flood_run(f, 1500);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.current_handshakes, 0);
    assert_int_equal(st.current_connections, 0);
    assert_int_equal(st.handshakes_timed_out, 3);
    fa_hq_flood_del(f);
    tp_server_stop(&srv);
}

/* ----------------------------------------------------- per address */

static void test_connections_per_address(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client *c[4];
    fa_error err = {0};
    fa_h3_server_stats st;
    int rv;

    tp_server_config(&cfg);
    cfg.max_connections_per_address = 3;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    for (int i = 0; i < 3; i++) {
        c[i] = client_as(&srv, "eu-west", 3000);
        assert_int_equal(get_status(c[i], "/gen/10", 5000, &err), 200);
    }
    c[3] = client_as(&srv, "us-east", 3000);
    rv = fa_h3_client_connect(c[3], 3000, &err);
    assert_int_not_equal(rv, 0);
    assert_int_not_equal(rv, FA_ERR_TLS); /* a full server, not a bad certificate */
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.refused_address, 1);
    /* one leaves: room again */
    fa_h3_client_del(c[0]);
    for (int i = 0; i < 100 && tp_server_stats(srv.srv).current_connections > 2; i++)
        usleep(20000);
    assert_int_equal(get_status(c[3], "/gen/10", 5000, &err), 200);
    for (int i = 1; i < 4; i++)
        fa_h3_client_del(c[i]);
    tp_server_stop(&srv);
}

/* ---------------------------------------------------- per identity */

struct poll_arg {
    fa_h3_client *c;
    int status;
};

static void *long_poll(void *arg)
{
    struct poll_arg *p = arg;
    fa_error err;
    p->status = get_status(p->c, "/wait?ms=2500", 10000, &err);
    return NULL;
}

/* One identity may hold max_connections_per_identity connections: an idle
 * one gives way to a new one (a region that restarted); when all are busy
 * the new one is refused in a way the client retries (not a TLS error),
 * and other regions are not affected. */
static void test_connections_per_identity(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client *a, *b, *c, *other;
    struct poll_arg pa, pb;
    pthread_t ta, tb;
    fa_error err = {0};
    fa_h3_server_stats st;
    fa_h3_client_stats cs;
    int rv;

    tp_server_config(&cfg);
    cfg.max_connections_per_identity = 2;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    a = client_as(&srv, "eu-west", 3000);
    b = client_as(&srv, "eu-west", 3000);
    c = client_as(&srv, "eu-west", 3000);
    assert_int_equal(get_status(a, "/gen/10", 5000, &err), 200);
    assert_int_equal(get_status(b, "/gen/10", 5000, &err), 200);
    /* idle a gives way to c */
    assert_int_equal(get_status(c, "/gen/10", 5000, &err), 200);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.evicted_identity, 1);
    assert_int_equal(st.current_connections, 2);
    /* a reconnects when it needs to (and b, now the oldest idle, gives way) */
    assert_int_equal(get_status(a, "/gen/10", 5000, &err), 200);
    fa_h3_client_get_stats(a, &cs);
    assert_int_equal(cs.connects, 2);

    /* two long-polls hold both; a third connection is refused */
    pa.c = a;
    pb.c = c;
    assert_int_equal(pthread_create(&ta, NULL, long_poll, &pa), 0);
    assert_int_equal(pthread_create(&tb, NULL, long_poll, &pb), 0);
    usleep(500 * 1000);
    rv = fa_h3_client_connect(b, 3000, &err);
    assert_int_equal(rv, FA_ERR_QUIC);
    assert_non_null(strstr(err.msg, "0x2")); /* CONNECTION_REFUSED */
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.refused_identity, 1);
    /* another region is not affected */
    other = client_as(&srv, "us-east", 3000);
    assert_int_equal(get_status(other, "/gen/10", 5000, &err), 200);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(pa.status, 200);
    assert_int_equal(pb.status, 200);
    fa_h3_client_del(a);
    fa_h3_client_del(b);
    fa_h3_client_del(c);
    fa_h3_client_del(other);
    tp_server_stop(&srv);
}

/* The admit hook's share: a region in two federations (two workers) may
 * hold twice max_connections_per_identity, busy; a third is refused. */
static int admit_share_two(void *arg, int role, const char *name, char *why, size_t cap)
{
    (void)arg, (void)role, (void)why, (void)cap;
    return !strcmp(name, "eu-west") ? 2 : 1;
}

static void test_identity_share(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client *a, *b, *c;
    struct poll_arg pa, pb;
    pthread_t ta, tb;
    fa_error err = {0};
    fa_h3_server_stats st;

    (void)state;
    tp_server_config(&cfg);
    cfg.max_connections_per_identity = 1;
    cfg.admit = admit_share_two;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    a = client_as(&srv, "eu-west", 3000);
    b = client_as(&srv, "eu-west", 3000);
    c = client_as(&srv, "eu-west", 3000);
    pa.c = a;
    pb.c = b;
    assert_int_equal(pthread_create(&ta, NULL, long_poll, &pa), 0);
    usleep(300 * 1000);
    assert_int_equal(pthread_create(&tb, NULL, long_poll, &pb), 0);
    usleep(500 * 1000);
    assert_int_equal(fa_h3_client_connect(c, 3000, &err), FA_ERR_QUIC);
    assert_non_null(strstr(err.msg, "0x2")); /* CONNECTION_REFUSED */
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(pa.status, 200); /* both held at once: the share of two */
    assert_int_equal(pb.status, 200);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.refused_identity, 1);
    assert_int_equal(st.evicted_identity, 0);
    fa_h3_client_del(a);
    fa_h3_client_del(b);
    fa_h3_client_del(c);
    tp_server_stop(&srv);
}

/* ---------------------------------------------------- membership */

static int admit_eu_west_only(void *arg, int role, const char *name, char *why, size_t cap)
{
    (void)arg;
    if (role == FA_H3_ROLE_REGION && !strcmp(name, "eu-west"))
        return 1;
    snprintf(why, cap, "names %s '%s', which is not a member",
             role == FA_H3_ROLE_OPERATOR ? "operator" : "region", name);
    return 0;
}

/* A certificate of the CA whose region is no member is refused in the
 * handshake, before it holds anything beyond it. */
static void test_non_member_refused_at_handshake(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client *in, *out;
    fa_error err = {0};
    fa_h3_server_stats st;
    int rv;

    tp_server_config(&cfg);
    cfg.admit = admit_eu_west_only;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    out = client_as(&srv, "us-east", 3000);
    rv = fa_h3_client_connect(out, 3000, &err);
    assert_int_equal(rv, FA_ERR_TLS);
    in = client_as(&srv, "eu-west", 3000);
    assert_int_equal(get_status(in, "/gen/10", 5000, &err), 200);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.refused_admit, 1);
    assert_int_equal(st.current_connections, 1);
    fa_h3_client_del(in);
    fa_h3_client_del(out);
    tp_server_stop(&srv);
}

/* ---------------------------------------------------- revocation */

/* A CRL of the test CA made by certtool, revoking the certificate in
 * revoke (NULL: none), written to path by rename (as an operator would). */
static void make_crl(const char *path, const char *ca_key, const char *ca_crt, const char *revoke,
                     int number)
{
    char cmd[2048], tmpl[300], tmp[300];
    FILE *f;
    snprintf(tmpl, sizeof(tmpl), "%s/crl.tmpl", tp_dir);
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    f = fopen(tmpl, "w");
    assert_non_null(f);
    fprintf(f, "crl_next_update = 30\ncrl_number = %d\n", number);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "certtool --generate-crl --load-ca-privkey '%s' --load-ca-certificate '%s' %s%s%s "
             "--template '%s' --outfile '%s' >/dev/null 2>&1 && mv '%s' '%s'",
             ca_key, ca_crt, revoke ? "--load-certificate '" : "", revoke ? revoke : "",
             revoke ? "'" : "", tmpl, tmp, tmp, path);
    if (system(cmd) != 0)
        fail_msg("certtool failed: %s", cmd);
}

static void test_crl_refuses_and_reloads(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client *eu, *us;
    fa_error err = {0};
    fa_h3_server_stats st;
    char crl[300];
    int rv;

    if (system("command -v certtool >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test: certtool (gnutls-bin) is not installed\n");
        skip();
    }
    snprintf(crl, sizeof(crl), "%s/ca.crl", tp_dir);
    make_crl(crl, tp_path("ca.key"), tp_path("ca.crt"), NULL, 1);
    tp_server_config(&cfg);
    cfg.crl_file = crl;
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    eu = client_as(&srv, "eu-west", 3000);
    us = client_as(&srv, "us-east", 3000);
    assert_int_equal(get_status(eu, "/gen/10", 5000, &err), 200);
    assert_int_equal(get_status(us, "/gen/10", 5000, &err), 200);

    /* eu-west revoked: the server reads the new file within its second's
     * poll, closes eu-west's connection and refuses its handshakes */
    make_crl(crl, tp_path("ca.key"), tp_path("ca.crt"), tp_path("client-eu-west.crt"), 2);
    for (int i = 0; i < 300 && tp_server_stats(srv.srv).closed_revoked == 0; i++)
        usleep(10000);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.closed_revoked, 1);
    assert_int_equal(st.crl_loads, 1);
    rv = get_status(eu, "/gen/10", 5000, &err);
    assert_int_equal(rv, FA_ERR_TLS);
    assert_int_equal(get_status(us, "/gen/10", 5000, &err), 200);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.refused_revoked, 1);

    /* a CRL signed by another CA is not taken: the previous one stays */
    make_crl(crl, tp_path("test/other-ca.key"), tp_path("test/other-ca.crt"), NULL, 3);
    fa_h3_server_reload(srv.srv);
    usleep(300 * 1000);
    assert_int_equal(get_status(eu, "/gen/10", 5000, &err), FA_ERR_TLS);
    st = tp_server_stats(srv.srv);
    assert_int_equal(st.crl_loads, 1);

    /* a forced reload of a good CRL that revokes nothing lets eu-west in */
    make_crl(crl, tp_path("ca.key"), tp_path("ca.crt"), NULL, 4);
    fa_h3_server_reload(srv.srv);
    for (int i = 0; i < 300 && tp_server_stats(srv.srv).crl_loads < 2; i++)
        usleep(10000);
    assert_int_equal(get_status(eu, "/gen/10", 5000, &err), 200);
    fa_h3_client_del(eu);
    fa_h3_client_del(us);
    tp_server_stop(&srv);
}

/* A CRL file that does not load stops the server at start. */
static void test_bad_crl_at_start(void **state)
{
    fa_h3_server_config cfg;
    fa_h3_server *s = NULL;
    fa_error err = {0};
    char path[300];
    FILE *f;

    snprintf(path, sizeof(path), "%s/junk.crl", tp_dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a CRL\n", f);
    fclose(f);
    tp_server_config(&cfg);
    cfg.crl_file = path;
    assert_int_equal(fa_h3_server_new(&s, &cfg, &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "junk.crl"));
    snprintf(path, sizeof(path), "%s/none.crl", tp_dir);
    cfg.crl_file = path;
    assert_int_equal(fa_h3_server_new(&s, &cfg, &err), FA_ERR_IO);
    assert_null(s);
}

/* --------------------------------------------- a forged log line */

/* One datagram sequence without any certificate: a CONNECTION_CLOSE whose
 * reason holds a newline and a forged line.  The server's log keeps it in
 * its one line, escaped. */
static void test_close_reason_cannot_forge_a_line(void **state)
{
    static const char reason[] = "bye\nts=2026-01-01T00:00:00.000Z level=error msg=\"forged\"\xff";
    fa_h3_server_config cfg;
    tp_server srv;
    fa_error err = {0};
    char path[300], buf[65536], *line;
    int fd, saved;
    ssize_t n;
    size_t len = 0;

    snprintf(path, sizeof(path), "%s/server.log", tp_dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    fa_log_set_level(FA_LOG_WARN);
    tp_server_config(&cfg);
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    assert_int_equal(fa_hq_close_with_reason(srv.server_addr, tp_path("ca.crt"),
                                             (const uint8_t *)reason, sizeof(reason) - 1, 3000,
                                             &err),
                     0);
    for (int i = 0; i < 100 && tp_server_stats(srv.srv).handshakes_failed == 0; i++)
        usleep(10000);
    tp_server_stop(&srv);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    tp_log_level(FA_LOG_ERROR);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    line = strstr(buf, "msg=\"handshake refused by the client\"");
    if (!line)
        fail_msg("no refusal logged: %s", buf);
    /* every line is the server's own: none starts with the forged one */
    for (char *p = buf; (p = strchr(p, '\n')) && p[1]; p++)
        assert_true(strncmp(p + 1, "ts=2026-01-01", 13) != 0);
    assert_true(strncmp(buf, "ts=2026-01-01", 13) != 0);
    assert_non_null(strstr(line, "bye\\nts=2026-01-01T00:00:00.000Z level=error "
                                 "msg=\\\"forged\\\"\\xff\"\n"));
}

/* ------------------------------------------- the buffer budget */

/* POST /buffer: keeps the body in memory as a handler of whole messages
 * does, reserving it from the budget first; refused with 429 (the
 * identity's share) or 503 (the server's budget), as aggregator/api.c. */
struct buf_req {
    uint8_t *p;
    size_t len, cap;
    int refused;
};

static int on_buf_request(fa_h3_request *req, void *arg)
{
    struct buf_req *b = calloc(1, sizeof(*b));
    if (!b)
        return -1;
    fa_h3_request_set_data(req, b);
    return 0;
}

static int on_buf_body(fa_h3_request *req, const uint8_t *d, size_t n, void *arg)
{
    struct buf_req *b = fa_h3_request_get_data(req);
    if (b->refused)
        return 0;
    if (b->len + n > b->cap) {
        size_t ncap = b->cap ? 2 * b->cap : 65536;
        uint8_t *np;
        int rv;
        while (ncap < b->len + n)
            ncap *= 2;
        rv = fa_h3_request_reserve(req, ncap - b->cap);
        if (rv != 0) {
            b->refused = 1;
            free(b->p);
            b->p = NULL;
            fa_h3_request_release(req, UINT64_MAX);
            (void)fa_h3_respond(req, rv == FA_ERR_NOSPACE ? 429 : 503, NULL, 0, "over budget", 11);
            fa_h3_request_set_max_body(req, 0);
            return 0;
        }
        np = realloc(b->p, ncap);
        if (!np)
            return FA_ERR_NOMEM;
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}

static void on_buf_end(fa_h3_request *req, void *arg)
{
    struct buf_req *b = fa_h3_request_get_data(req);
    if (!b->refused)
        (void)fa_h3_respond(req, 200, NULL, 0, "kept", 4);
}

static void on_buf_close(fa_h3_request *req, int err, void *arg)
{
    struct buf_req *b = fa_h3_request_get_data(req);
    free(b->p);
    free(b);
}

/* A server with the /buffer route only, its loop on a thread. */
static void start_buffer_server(tp_server *srv, const fa_h3_server_config *cfg,
                                const fa_h3_handler *h)
{
    fa_error err = {0};
    memset(srv, 0, sizeof(*srv));
    assert_int_equal(fa_h3_server_new(&srv->srv, cfg, &err), 0);
    assert_int_equal(fa_h3_server_route(srv->srv, "POST", "/buffer", h, NULL), 0);
    srv->port = fa_h3_server_port(srv->srv);
    snprintf(srv->server_addr, sizeof(srv->server_addr), "127.0.0.1:%d", srv->port);
    assert_int_equal(pthread_create(&srv->th, NULL, tp_server_thread, srv), 0);
}

/* 48 streams from one region, each sending 4 MiB of a body it never
 * finishes: the server holds at most the region's share (16 MiB here) and
 * the floor of each stream, answers the rest 429, and another region's
 * upload goes through, as does a small message of the same region. */
static void test_streams_held_within_budget(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_handler h = {on_buf_request, on_buf_body, on_buf_end, on_buf_close};
    fa_hq_streams *att = NULL;
    fa_hq_streams_stats as;
    fa_h3_server_stats st;
    fa_h3_client *other;
    fa_h3_response resp;
    fa_error err = {0};
    tp_gen g = {0, 3u << 20, 0};
    fa_h3_client_req req;

    tp_server_config(&cfg);
    cfg.max_buffered_bytes_per_identity = 16u << 20;
    cfg.max_buffered_bytes = 40u << 20;
    cfg.quic.idle_timeout_ms = 2000; /* the attacker vanishes without a word */
    start_buffer_server(&srv, &cfg, &h);
    assert_int_equal(fa_hq_streams_new(&att, srv.server_addr, "localhost", tp_path("ca.crt"),
                                       tp_path("client-eu-west.crt"), tp_path("client-eu-west.key"),
                                       5000, &err),
                     0);
    assert_int_equal(fa_hq_streams_open(att, "/buffer", 48, 4u << 20), 48);
    fa_hq_streams_run(att, 3000);
    st = tp_server_stats(srv.srv);
    fa_hq_streams_get_stats(att, &as);
    /* its share, and the floor of each of its requests */
    assert_true(st.buffered_peak <= (16u << 20) + 48 * FA_H3_RESERVE_FLOOR);
    assert_true(st.buffer_refused_identity > 0);
    assert_true(as.status_429 > 0);
    assert_int_equal(as.status_2xx, 0);
    assert_false(as.dead);
    /* another region, while the first still holds its share */
    other = client_as(&srv, "us-east", 3000);
    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/buffer";
    req.body_read = tp_gen_read;
    req.body_arg = &g;
    req.body_length = (int64_t)g.len;
    req.timeout_ms = 10000;
    assert_int_equal(fa_h3_client_request(other, &req, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    st = tp_server_stats(srv.srv);
    assert_true(st.buffered_peak <= (16u << 20) + 48 * FA_H3_RESERVE_FLOOR + (4u << 20));
    fa_h3_client_del(other);
    /* the attacking region's own small message fits in its floor */
    other = client_as(&srv, "eu-west", 3000);
    g.off = 0;
    g.len = 4000;
    req.body_length = (int64_t)g.len;
    assert_int_equal(fa_h3_client_request(other, &req, &resp, &err), 0);
    assert_int_equal(resp.status, 200);
    fa_h3_response_free(&resp);
    fa_h3_client_del(other);
    /* the attacker gone (silently: its connection ends at the idle
     * timeout), every byte is given back */
    fa_hq_streams_del(att);
    for (int i = 0; i < 500 && tp_server_stats(srv.srv).buffered_bytes; i++)
        usleep(10000);
    assert_int_equal(tp_server_stats(srv.srv).buffered_bytes, 0);
    tp_server_stop(&srv);
}

/* The server's whole budget: a second identity beyond it gets 503. */
static void test_server_budget_503(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_handler h = {on_buf_request, on_buf_body, on_buf_end, on_buf_close};
    fa_hq_streams *a = NULL, *b = NULL;
    fa_hq_streams_stats sa, sb;
    fa_error err = {0};

    tp_server_config(&cfg);
    cfg.max_buffered_bytes_per_identity = 8u << 20;
    cfg.max_buffered_bytes = 8u << 20;
    start_buffer_server(&srv, &cfg, &h);
    assert_int_equal(fa_hq_streams_new(&a, srv.server_addr, "localhost", tp_path("ca.crt"),
                                       tp_path("client-eu-west.crt"), tp_path("client-eu-west.key"),
                                       5000, &err),
                     0);
    assert_int_equal(fa_hq_streams_new(&b, srv.server_addr, "localhost", tp_path("ca.crt"),
                                       tp_path("client-us-east.crt"), tp_path("client-us-east.key"),
                                       5000, &err),
                     0);
    fa_hq_streams_open(a, "/buffer", 2, 3u << 20);
    fa_hq_streams_run(a, 1000);
    fa_hq_streams_open(b, "/buffer", 2, 3u << 20);
    fa_hq_streams_run(b, 1000);
    fa_hq_streams_get_stats(a, &sa);
    fa_hq_streams_get_stats(b, &sb);
    assert_true(sb.status_503 > 0);
    assert_true(tp_server_stats(srv.srv).buffered_peak <= (8u << 20));
    fa_hq_streams_del(a);
    fa_hq_streams_del(b);
    tp_server_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_halfopen_flood_does_not_lock_out),
        cmocka_unit_test(test_halfopen_times_out),
        cmocka_unit_test(test_connections_per_address),
        cmocka_unit_test(test_connections_per_identity),
        cmocka_unit_test(test_identity_share),
        cmocka_unit_test(test_non_member_refused_at_handshake),
        cmocka_unit_test(test_crl_refuses_and_reloads),
        cmocka_unit_test(test_bad_crl_at_start),
        cmocka_unit_test(test_close_reason_cannot_forge_a_line),
        cmocka_unit_test(test_streams_held_within_budget),
        cmocka_unit_test(test_server_budget_503),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
