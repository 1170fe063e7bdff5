/* Mutual TLS: who gets in, who does not, and what they are told.
 * Certificates come from deploy/pki.sh --test-extras. */
#include "test_transport_util.h"

static tp_server srv;

static int setup(void **state)
{
    fa_h3_server_config cfg;
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

/* The role and name the server saw in the last whoami(). */
static char seen_role[32], seen_name[128];

/* GET /whoami with the given client certificate; returns the request's code
 * and fills body (the region the server saw) and msg (the error). */
static int whoami(const char *cert, const char *key, const char *server_name, char *body,
                  size_t cap, char *msg, size_t msgcap)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    int rv;

    tp_client_config(&cfg, &srv, cert, key);
    if (server_name)
        cfg.server_name = server_name;
    rv = fa_h3_client_new(&c, &cfg, &err);
    if (rv != 0) {
        snprintf(msg, msgcap, "%s", fa_error_msg(&err, rv));
        return rv;
    }
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = "/whoami";
    req.timeout_ms = 10000;
    rv = fa_h3_client_request(c, &req, &resp, &err);
    body[0] = '\0';
    msg[0] = '\0';
    if (rv == 0) {
        const char *role = fa_h3_response_header(&resp, "fedagg-test-role");
        const char *name = fa_h3_response_header(&resp, "fedagg-test-name");
        snprintf(body, cap, "%.*s", (int)resp.body_len, resp.body ? (char *)resp.body : "");
        snprintf(seen_role, sizeof(seen_role), "%s", role ? role : "(none)");
        snprintf(seen_name, sizeof(seen_name), "%s", name ? name : "(none)");
        assert_int_equal(resp.status, 200);
        fa_h3_response_free(&resp);
    } else {
        snprintf(msg, msgcap, "%s", fa_error_msg(&err, rv));
    }
    fa_h3_client_del(c);
    return rv;
}

static uint64_t failed_handshakes(void)
{
    return tp_server_stats(srv.srv).handshakes_failed;
}

static void test_region_identity_from_san_uri(void **state)
{
    char body[128], msg[512];
    assert_int_equal(whoami("client-eu-west.crt", "client-eu-west.key", NULL, body, sizeof(body),
                            msg, sizeof(msg)),
                     0);
    assert_string_equal(body, "eu-west");
    assert_int_equal(whoami("client-us-east.crt", "client-us-east.key", NULL, body, sizeof(body),
                            msg, sizeof(msg)),
                     0);
    assert_string_equal(body, "us-east");
}

static void test_identity_falls_back_to_cn(void **state)
{
    char body[128], msg[512];
    assert_int_equal(whoami("test/client-cn-only.crt", "test/client-cn-only.key", NULL, body,
                            sizeof(body), msg, sizeof(msg)),
                     0);
    assert_string_equal(body, "eu-west");
    /* a region the transport does not know still gets in: refusing unknown
     * regions is the aggregator's decision, made on this identity */
    assert_int_equal(whoami("test/client-unknown.crt", "test/client-unknown.key", NULL, body,
                            sizeof(body), msg, sizeof(msg)),
                     0);
    assert_string_equal(body, "unknown-region");
}

static void test_operator_role_from_san_uri(void **state)
{
    char body[128], msg[512];
    assert_int_equal(whoami("operator-alice.crt", "operator-alice.key", NULL, body, sizeof(body),
                            msg, sizeof(msg)),
                     0);
    assert_string_equal(seen_role, "operator");
    assert_string_equal(seen_name, "alice");
    assert_string_equal(body, ""); /* no region */
    /* an operator named like a region is still no region */
    assert_int_equal(whoami("operator-eu-west.crt", "operator-eu-west.key", NULL, body,
                            sizeof(body), msg, sizeof(msg)),
                     0);
    assert_string_equal(seen_role, "operator");
    assert_string_equal(seen_name, "eu-west");
    assert_string_equal(body, "");
    /* region certificates keep their role, with or without the SAN URI */
    assert_int_equal(whoami("client-us-east.crt", "client-us-east.key", NULL, body, sizeof(body),
                            msg, sizeof(msg)),
                     0);
    assert_string_equal(seen_role, "region");
    assert_string_equal(seen_name, "us-east");
    assert_string_equal(body, "us-east");
    assert_int_equal(whoami("test/client-cn-only.crt", "test/client-cn-only.key", NULL, body,
                            sizeof(body), msg, sizeof(msg)),
                     0);
    assert_string_equal(seen_role, "region");
    assert_string_equal(body, "eu-west");
}

static void expect_refused(const char *cert, const char *key, const char *name,
                           const char *want_in_msg)
{
    char body[128], msg[512];
    uint64_t before = failed_handshakes();
    int rv = whoami(cert, key, name, body, sizeof(body), msg, sizeof(msg));
    if (rv != FA_ERR_TLS)
        fail_msg("expected a TLS refusal, got %d (%s): %s", rv, fa_strerror(rv), msg);
    if (!strstr(msg, want_in_msg))
        fail_msg("message '%s' does not say '%s'", msg, want_in_msg);
    if (name == NULL) {
        /* the server refused (and logged) it; give its loop a moment */
        for (int i = 0; i < 100 && failed_handshakes() == before; i++)
            usleep(10000);
        assert_true(failed_handshakes() > before);
    }
}

static void test_certificate_with_two_roles_refused(void **state)
{
    expect_refused("test/client-two-roles.crt", "test/client-two-roles.key", NULL,
                   "refused the TLS handshake");
}

static void test_no_client_certificate_refused(void **state)
{
    expect_refused(NULL, NULL, NULL, "certificate_required");
}

static void test_certificate_from_other_ca_refused(void **state)
{
    expect_refused("test/client-other-ca.crt", "test/client-other-ca.key", NULL,
                   "refused the TLS handshake");
}

static void test_expired_certificate_refused(void **state)
{
    expect_refused("test/client-expired.crt", "test/client-expired.key", NULL,
                   "refused the TLS handshake");
}

static void test_server_name_mismatch_refused(void **state)
{
    /* the client checks the aggregator's name: "localhost" is in the
     * certificate, "aggregator.example" is not */
    expect_refused("client-eu-west.crt", "client-eu-west.key", "aggregator.example",
                   "does not match the name 'aggregator.example'");
}

static void test_server_cert_from_wrong_name(void **state)
{
    /* a second server with a certificate for wrong.invalid */
    fa_h3_server_config cfg;
    tp_server other;
    char body[128], msg[512];
    fa_h3_client_config ccfg;
    fa_h3_client *c = NULL;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    int rv;

    tp_server_config(&cfg);
    cfg.cert_file = tp_path("test/server-wrong-name.crt");
    cfg.key_file = tp_path("test/server-wrong-name.key");
    assert_int_equal(tp_server_start(&other, &cfg), 0);
    tp_client_config(&ccfg, &other, "client-eu-west.crt", "client-eu-west.key");
    assert_int_equal(fa_h3_client_new(&c, &ccfg, &err), 0);
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = "/whoami";
    req.timeout_ms = 10000;
    rv = fa_h3_client_request(c, &req, &resp, &err);
    assert_int_equal(rv, FA_ERR_TLS);
    assert_non_null(strstr(err.msg, "does not match the name 'localhost'"));
    fa_h3_client_del(c);
    tp_server_stop(&other);
    (void)body;
    (void)msg;
}

static void test_bad_files_refused_at_setup(void **state)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_h3_server_config scfg;
    fa_h3_server *s = NULL;
    fa_error err = {0};
    char path[600];

    tp_client_config(&cfg, &srv, "client-eu-west.crt", "client-eu-west.key");
    cfg.ca_file = "/nonexistent/ca.crt";
    assert_int_equal(fa_h3_client_new(&c, &cfg, &err), FA_ERR_TLS);
    assert_non_null(strstr(err.msg, "/nonexistent/ca.crt"));
    /* a key readable by others is refused before any handshake */
    snprintf(path, sizeof(path), "chmod 644 '%s'", tp_path("client-us-east.key"));
    assert_int_equal(system(path), 0);
    tp_client_config(&cfg, &srv, "client-us-east.crt", "client-us-east.key");
    assert_int_equal(fa_h3_client_new(&c, &cfg, &err), FA_ERR_AUTH);
    snprintf(path, sizeof(path), "chmod 600 '%s'", tp_path("client-us-east.key"));
    assert_int_equal(system(path), 0);
    /* a server without a CA cannot verify clients */
    tp_server_config(&scfg);
    scfg.ca_file = NULL;
    assert_int_equal(fa_h3_server_new(&s, &scfg, &err), FA_ERR_INVAL);
    assert_null(s);
    scfg.ca_file = tp_path("ca.crt");
    scfg.listen = "not-an-address";
    assert_int_equal(fa_h3_server_new(&s, &scfg, &err), FA_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_identity_from_san_uri),
        cmocka_unit_test(test_identity_falls_back_to_cn),
        cmocka_unit_test(test_operator_role_from_san_uri),
        cmocka_unit_test(test_certificate_with_two_roles_refused),
        cmocka_unit_test(test_no_client_certificate_refused),
        cmocka_unit_test(test_certificate_from_other_ca_refused),
        cmocka_unit_test(test_expired_certificate_refused),
        cmocka_unit_test(test_server_name_mismatch_refused),
        cmocka_unit_test(test_server_cert_from_wrong_name),
        cmocka_unit_test(test_bad_files_refused_at_setup),
    };
    tp_log_level(FA_LOG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
