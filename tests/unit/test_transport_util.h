/* test_transport_util.h - shared pieces of the transport unit tests: a test
 * PKI from deploy/pki.sh, a server running its loop on a thread with the test
 * routes, deterministic body content, SHA-256.  Included by the
 * test_transport_*.c files (each is its own executable). */
#ifndef TEST_TRANSPORT_UTIL_H
#define TEST_TRANSPORT_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "transport/h3.h"

/* Quiet logs unless FEDAGG_LOG_LEVEL asks for more (debugging a test). */
static inline void tp_log_level(int dflt)
{
    int l = fa_log_level_parse(getenv("FEDAGG_LOG_LEVEL"));
    fa_log_set_level(l >= 0 ? l : dflt);
}

/* ------------------------------------------------------------------ PKI */

static char tp_dir[256];
static char tp_pki[300];

/* The source tree: $FA_SRC (ctest sets it), else from this file's path. */
static inline const char *tp_src(void)
{
    static char buf[512];
    const char *s = getenv("FA_SRC"), *p;
    if (s && *s)
        return s;
    snprintf(buf, sizeof(buf), "%s", __FILE__);
    p = strstr(buf, "/tests/unit/");
    if (p)
        buf[p - buf] = '\0';
    else
        snprintf(buf, sizeof(buf), ".");
    return buf;
}

/* Makes the PKI (deploy/pki.sh --test-extras) in a fresh temp dir. */
static inline int tp_setup_pki(void)
{
    char cmd[1024];
    snprintf(tp_dir, sizeof(tp_dir), "/tmp/fa_test_transport.XXXXXX");
    if (!mkdtemp(tp_dir))
        return -1;
    snprintf(tp_pki, sizeof(tp_pki), "%s/pki", tp_dir);
    snprintf(cmd, sizeof(cmd),
             "bash '%s/deploy/pki.sh' '%s' --regions eu-west,us-east --operators alice,eu-west "
             "--test-extras >/dev/null 2>&1",
             tp_src(), tp_pki);
    if (system(cmd) != 0) {
        fprintf(stderr, "test: %s failed\n", cmd);
        return -1;
    }
    return 0;
}

static inline void tp_teardown_pki(void)
{
    char cmd[400];
    if (!tp_dir[0])
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test: cannot remove %s\n", tp_dir);
}

/* Path of a PKI file, e.g. tp_path("ca.crt") or tp_path("test/client-expired.key"). */
static inline const char *tp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 512, "%s/%s", tp_pki, name);
    return b;
}

/* --------------------------------------------------------- body content */

/* Deterministic content: a 1 MiB pseudo-random block, repeated with a
 * per-MiB rotation. */
static uint8_t tp_block[1 << 20];

static inline void tp_gen_init(void)
{
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < sizeof(tp_block); i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(tp_block + i, &x, 8);
    }
}

static inline void tp_gen_fill(uint64_t off, uint8_t *buf, size_t len)
{
    const size_t mib = (size_t)1 << 20;
    while (len) {
        size_t pos = (size_t)(off & (mib - 1));
        size_t start = (pos + (size_t)(off >> 20) * 4099u) & (mib - 1);
        size_t n = mib - pos;
        if (n > mib - start)
            n = mib - start;
        if (n > len)
            n = len;
        memcpy(buf, tp_block + start, n);
        buf += n;
        off += n;
        len -= n;
    }
}

/* The hex of h's digest into out (the hash freed), or "sha256-failed",
 * which no expected digest matches (the server thread cannot assert). */
static inline void tp_digest_hex(fa_sha256_ctx *h, char out[65])
{
    uint8_t dig[32];
    if (fa_sha256_final(h, dig) == 0)
        fa_hex_encode(out, 65, dig, 32);
    else
        snprintf(out, 65, "sha256-failed");
    fa_sha256_free(h);
}

/* SHA-256 (hex) of the first len bytes of the generated content. */
static inline void tp_gen_sha(uint64_t len, char out[65])
{
    static uint8_t buf[1 << 20];
    fa_sha256_ctx md = {0};
    uint64_t off = 0;
    fa_sha256_init(&md);
    while (off < len) {
        size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
        tp_gen_fill(off, buf, n);
        fa_sha256_update(&md, buf, n);
        off += n;
    }
    tp_digest_hex(&md, out);
}

/* Pull source of generated content (client uploads, server downloads). */
typedef struct tp_gen {
    uint64_t off, len;
    uint64_t fail_at; /* nonzero: fail with FA_ERR_IO once off reaches it */
} tp_gen;

static inline ssize_t tp_gen_read(void *arg, uint8_t *buf, size_t cap)
{
    tp_gen *g = arg;
    size_t n = cap;
    if (g->fail_at && g->off >= g->fail_at)
        return FA_ERR_IO;
    if (g->off >= g->len)
        return 0;
    if (n > g->len - g->off)
        n = (size_t)(g->len - g->off);
    tp_gen_fill(g->off, buf, n);
    g->off += n;
    return (ssize_t)n;
}

/* SHA-256 sink for response bodies. */
typedef struct tp_sink {
    fa_sha256_ctx md;
    uint64_t bytes;
} tp_sink;

static inline int tp_sink_body(void *arg, const uint8_t *data, size_t len)
{
    tp_sink *s = arg;
    fa_sha256_update(&s->md, data, len);
    s->bytes += len;
    return 0;
}

static inline void tp_sink_init(tp_sink *s)
{
    s->md = (fa_sha256_ctx){0};
    fa_sha256_init(&s->md);
    s->bytes = 0;
}

static inline void tp_sink_final(tp_sink *s, char out[65])
{
    tp_digest_hex(&s->md, out);
}

/* -------------------------------------------------------- test server */

/* What the handlers saw, for assertions (written on the loop thread, read
 * after the request returned on the client). */
typedef struct tp_seen {
    atomic_int closes, close_err, requests;
    atomic_ullong body_bytes;
    char peer[128];
    char method[16];
    char query[128];
    char xhdr[128];
} tp_seen;

static tp_seen tp_last;

static inline uint64_t tp_parse_u64(const char *s)
{
    return s ? strtoull(s, NULL, 10) : 0;
}

static inline void tp_gen_done(void *arg, int err)
{
    free(arg);
}

static inline int tp_on_gen(fa_h3_request *req, void *arg)
{
    tp_gen *g = calloc(1, sizeof(*g));
    const char *q = fa_h3_request_query(req);
    if (!g)
        return -1;
    g->len = tp_parse_u64(fa_h3_request_path(req) + strlen("/gen/"));
    if (strncmp(q, "fail=", 5) == 0)
        g->fail_at = tp_parse_u64(q + 5);
    if (fa_h3_respond_stream(req, 200, NULL, 0, (int64_t)g->len, tp_gen_read, tp_gen_done, g) !=
        0) {
        free(g);
        return -1;
    }
    return 0;
}

/* GET /ref/<n>: the same content from one buffer the handler owns, sent
 * without a copy (fa_h3_respond_ref) and freed by the release callback. */
static atomic_int tp_ref_released;
static inline void tp_ref_release(void *arg)
{
    free(arg);
    atomic_fetch_add(&tp_ref_released, 1);
}

static inline int tp_on_ref(fa_h3_request *req, void *arg)
{
    uint64_t n = tp_parse_u64(fa_h3_request_path(req) + strlen("/ref/"));
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -1;
    tp_gen_fill(0, buf, n);
    if (fa_h3_respond_ref(req, 200, NULL, 0, buf, n, tp_ref_release, buf) != 0) {
        free(buf);
        return -1;
    }
    return 0;
}

/* POST /upload: hashes the body as it streams; answers "<bytes> <sha256>".
 * POST /hold: holds all credit until a task posted by the test releases it. */
typedef struct tp_up {
    fa_sha256_ctx md;
    uint64_t bytes, held;
    int hold, ended;
} tp_up;

static fa_h3_request *tp_held_req; /* /hold: the request holding credit */

static inline void tp_up_answer(fa_h3_request *req, tp_up *u)
{
    char hx[65], body[128];
    tp_digest_hex(&u->md, hx);
    snprintf(body, sizeof(body), "%" PRIu64 " %s", u->bytes, hx);
    (void)fa_h3_respond(req, 200, NULL, 0, body, strlen(body));
}

static inline int tp_on_upload(fa_h3_request *req, void *arg)
{
    tp_up *u = calloc(1, sizeof(*u));
    const char *x;
    if (!u)
        return -1;
    fa_sha256_init(&u->md);
    u->hold = arg != NULL;
    if (u->hold)
        tp_held_req = req;
    fa_h3_request_set_data(req, u);
    atomic_fetch_add(&tp_last.requests, 1);
    snprintf(tp_last.peer, sizeof(tp_last.peer), "%s", fa_h3_request_peer(req));
    snprintf(tp_last.method, sizeof(tp_last.method), "%s", fa_h3_request_method(req));
    snprintf(tp_last.query, sizeof(tp_last.query), "%s", fa_h3_request_query(req));
    x = fa_h3_request_header(req, "X-Test");
    snprintf(tp_last.xhdr, sizeof(tp_last.xhdr), "%s", x ? x : "");
    return 0;
}

static inline int tp_on_upload_body(fa_h3_request *req, const uint8_t *d, size_t n, void *arg)
{
    tp_up *u = fa_h3_request_get_data(req);
    fa_sha256_update(&u->md, d, n);
    u->bytes += n;
    atomic_store(&tp_last.body_bytes, u->bytes);
    if (u->hold) {
        u->held += n;
        return FA_H3_HOLD;
    }
    return 0;
}

static inline void tp_on_upload_end(fa_h3_request *req, void *arg)
{
    tp_up *u = fa_h3_request_get_data(req);
    u->ended = 1;
    if (!u->hold || !u->held)
        tp_up_answer(req, u);
}

static inline void tp_on_upload_close(fa_h3_request *req, int err, void *arg)
{
    tp_up *u = fa_h3_request_get_data(req);
    if (tp_held_req == req)
        tp_held_req = NULL;
    atomic_store(&tp_last.close_err, err);
    atomic_fetch_add(&tp_last.closes, 1);
    if (u) {
        fa_sha256_free(&u->md);
        free(u);
    }
}

/* Loop-thread task: the /hold request gives back all its credit. */
static inline void tp_release_task(fa_h3_server *srv, void *arg)
{
    fa_h3_request *req = tp_held_req;
    tp_up *u;
    if (!req)
        return;
    u = fa_h3_request_get_data(req);
    u->hold = 0;
    fa_h3_request_consume(req, (size_t)u->held);
    u->held = 0;
    if (u->ended)
        tp_up_answer(req, u);
}

/* GET /wait?ms=N: a deferred response (long-poll) answered by a timer. */
static inline void tp_wait_fire(fa_h3_server *srv, void *arg)
{
    fa_h3_request *req = arg;
    int64_t *t = fa_h3_request_get_data(req);
    *t = -1;
    (void)fa_h3_respond(req, 200, NULL, 0, "waited", 6);
}

static inline int tp_on_wait(fa_h3_request *req, void *arg)
{
    const char *q = strstr(fa_h3_request_query(req), "ms=");
    int64_t *t = malloc(sizeof(*t));
    if (!t)
        return -1;
    fa_h3_request_set_data(req, t);
    *t = fa_h3_server_timer(fa_h3_request_server(req), q ? tp_parse_u64(q + 3) : 1000, tp_wait_fire,
                            req);
    atomic_fetch_add(&tp_last.requests, 1);
    return 0;
}

static inline void tp_on_wait_close(fa_h3_request *req, int err, void *arg)
{
    int64_t *t = fa_h3_request_get_data(req);
    if (t && *t >= 0)
        fa_h3_server_timer_cancel(fa_h3_request_server(req), *t);
    free(t);
    atomic_store(&tp_last.close_err, err);
    atomic_fetch_add(&tp_last.closes, 1);
}

/* The body is the region (fa_h3_request_peer); the headers say the role
 * and the name whatever the role. */
static inline int tp_on_whoami(fa_h3_request *req, void *arg)
{
    const char *p = fa_h3_request_peer(req);
    int role = fa_h3_request_peer_role(req);
    fa_h3_header h[] = {{"fedagg-test-role", role == FA_H3_ROLE_OPERATOR ? "operator"
                                             : role == FA_H3_ROLE_REGION ? "region"
                                                                         : "none"},
                        {"fedagg-test-name", fa_h3_request_peer_name(req)}};
    return fa_h3_respond(req, 200, h, 2, p, strlen(p));
}

typedef struct tp_server {
    fa_h3_server *srv;
    pthread_t th;
    int port;
    int rc;
    char server_addr[64];
} tp_server;

static inline void *tp_server_thread(void *arg)
{
    tp_server *t = arg;
    fa_error err;
    t->rc = fa_h3_server_run(t->srv, &err);
    return NULL;
}

static inline void tp_server_config(fa_h3_server_config *cfg)
{
    fa_h3_server_config_default(cfg);
    cfg->listen = "127.0.0.1:0";
    cfg->cert_file = tp_path("server.crt");
    cfg->key_file = tp_path("server.key");
    cfg->ca_file = tp_path("ca.crt");
}

/* Starts a server with the test routes, its loop on a thread. */
static inline int tp_server_start(tp_server *t, const fa_h3_server_config *cfg)
{
    fa_error err;
    fa_h3_handler gen = {.on_request = tp_on_gen};
    fa_h3_handler ref = {.on_request = tp_on_ref};
    fa_h3_handler up = {.on_request = tp_on_upload,
                        .on_body = tp_on_upload_body,
                        .on_body_end = tp_on_upload_end,
                        .on_close = tp_on_upload_close};
    fa_h3_handler wait = {.on_request = tp_on_wait, .on_close = tp_on_wait_close};
    fa_h3_handler who = {.on_request = tp_on_whoami};
    int rv;

    memset(t, 0, sizeof(*t));
    memset(&tp_last, 0, sizeof(tp_last));
    rv = fa_h3_server_new(&t->srv, cfg, &err);
    if (rv != 0) {
        fprintf(stderr, "test: server: %s\n", fa_error_msg(&err, rv));
        return rv;
    }
    fa_h3_server_route(t->srv, "GET", "/gen/", &gen, NULL);
    fa_h3_server_route(t->srv, "GET", "/ref/", &ref, NULL);
    fa_h3_server_route(t->srv, "POST", "/upload", &up, NULL);
    fa_h3_server_route(t->srv, "POST", "/hold", &up, (void *)1);
    fa_h3_server_route(t->srv, "GET", "/wait", &wait, NULL);
    fa_h3_server_route(t->srv, "GET", "/whoami", &who, NULL);
    t->port = fa_h3_server_port(t->srv);
    snprintf(t->server_addr, sizeof(t->server_addr), "127.0.0.1:%d", t->port);
    if (pthread_create(&t->th, NULL, tp_server_thread, t) != 0) {
        fa_h3_server_del(t->srv);
        return -1;
    }
    return 0;
}

/* The server's statistics while its loop runs, read on the loop thread
 * (fa_h3_server_get_stats is the loop's: it walks the connections). */
struct tp_stats_req {
    fa_h3_server_stats st;
    atomic_int ready;
};

static inline void tp_stats_task(fa_h3_server *s, void *arg)
{
    struct tp_stats_req *r = arg;
    fa_h3_server_get_stats(s, &r->st);
    atomic_store(&r->ready, 1);
}

static inline fa_h3_server_stats tp_server_stats(fa_h3_server *s)
{
    struct tp_stats_req r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(fa_h3_server_post(s, tp_stats_task, &r), 0);
    for (int i = 0; i < 2500 && !atomic_load(&r.ready); i++)
        usleep(2000);
    assert_true(atomic_load(&r.ready));
    return r.st;
}

static inline void tp_server_stop(tp_server *t)
{
    if (!t->srv)
        return;
    fa_h3_server_stop(t->srv);
    pthread_join(t->th, NULL);
    fa_h3_server_del(t->srv);
    t->srv = NULL;
}

/* A client of region `who` ("eu-west", or a test/ certificate base name). */
static inline void tp_client_config(fa_h3_client_config *cfg, const tp_server *t, const char *cert,
                                    const char *key)
{
    fa_h3_client_config_default(cfg);
    cfg->server = t->server_addr;
    cfg->server_name = "localhost";
    cfg->ca_file = tp_path("ca.crt");
    cfg->cert_file = cert ? tp_path(cert) : NULL;
    cfg->key_file = key ? tp_path(key) : NULL;
    cfg->connect_attempts = 1;
    cfg->connect_timeout_ms = 5000;
}

/* GET PREFIX<n> (the routes /gen/ and /ref/ answer n generated bytes): the
 * body's SHA-256 against the generator's, its length and Content-Length. */
static inline void tp_download_path(fa_h3_client *c, const char *prefix, uint64_t n)
{
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    tp_sink sink;
    char path[64], got[65], want[65];
    int rv;

    snprintf(path, sizeof(path), "%s%" PRIu64, prefix, n);
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = path;
    req.timeout_ms = 120000;
    tp_sink_init(&sink);
    req.on_body = tp_sink_body;
    req.on_body_arg = &sink;
    rv = fa_h3_client_request(c, &req, &resp, &err);
    if (rv != 0)
        fail_msg("GET %s: %s", path, fa_error_msg(&err, rv));
    tp_sink_final(&sink, got);
    tp_gen_sha(n, want);
    assert_int_equal(resp.status, 200);
    assert_int_equal(sink.bytes, n);
    assert_int_equal(resp.body_received, n);
    assert_string_equal(got, want);
    assert_string_equal(fa_h3_response_header(&resp, "content-length") ? "ok" : "missing", "ok");
    fa_h3_response_free(&resp);
}

static inline void tp_download(fa_h3_client *c, uint64_t n)
{
    tp_download_path(c, "/gen/", n);
}

/* POST /upload of n generated bytes: the server answers with the length and
 * SHA-256 of what it received, which must be ours. */
static inline void tp_upload(fa_h3_client *c, uint64_t n)
{
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    tp_gen g = {0, n, 0};
    char want[65], expect[128];
    int rv;

    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/upload";
    req.body_read = tp_gen_read;
    req.body_arg = &g;
    req.body_length = (int64_t)n;
    req.timeout_ms = 120000;
    rv = fa_h3_client_request(c, &req, &resp, &err);
    if (rv != 0)
        fail_msg("POST /upload: %s", fa_error_msg(&err, rv));
    tp_gen_sha(n, want);
    snprintf(expect, sizeof(expect), "%" PRIu64 " %s", n, want);
    assert_int_equal(resp.status, 200);
    assert_non_null(resp.body);
    /* the server's SHA-256 of what it received equals ours of what we sent */
    assert_string_equal((char *)resp.body, expect);
    fa_h3_response_free(&resp);
}

#endif
