/* test_transport_identity.c - the identity a client certificate gives
 * (fa_tls_peer_identity), on certificates made here with openssl and
 * signed by the test CA: one fedagg URI names a region or an operator; an
 * ambiguous one (two fedagg URIs, a long one beside a short one, another
 * form of the scheme, several CNs) is refused with a reason; the CN alone
 * names a region only when it is one valid id. */
#include "test_transport_util.h"

#include <gnutls/x509.h>

#include "transport/h3_internal.h"

static int setup(void **state)
{
    tp_log_level(FA_LOG_ERROR);
    return tp_setup_pki();
}

static int teardown(void **state)
{
    tp_teardown_pki();
    return 0;
}

/* A certificate of the test CA with subject subj and, when san is not
 * NULL, that subjectAltName; written as <dir>/<name>.crt and .key. */
static void make_cert(const char *name, const char *subj, const char *san)
{
    char cmd[4096], ext[300];
    FILE *f;

    snprintf(ext, sizeof(ext), "%s/%s.ext", tp_dir, name);
    f = fopen(ext, "w");
    assert_non_null(f);
    fprintf(f, "[e]\nbasicConstraints = critical, CA:FALSE\nkeyUsage = critical, "
               "digitalSignature\nextendedKeyUsage = clientAuth\n");
    if (san)
        fprintf(f, "subjectAltName = %s\n", san);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout '%s.key' -subj '%s' -out '%s.csr' >/dev/null 2>&1 && chmod 600 '%s.key' && "
             "openssl x509 -req -in '%s.csr' -CA '%s' -CAkey '%s' -set_serial 0x%08x -days 30 "
             "-extfile '%s' -extensions e -out '%s.crt' >/dev/null 2>&1",
             tp_dir, name, subj, name, name, name, tp_path("ca.crt"), tp_path("ca.key"),
             (unsigned)rand(), ext, name);
    if (system(cmd) != 0)
        fail_msg("openssl failed: %s", cmd);
}

/* fa_tls_peer_identity of <dir>/<name>.crt: 0 with role and id, or -1
 * with why. */
static int identity_of(const char *name, char *id, size_t idcap, int *role, char *why,
                       size_t whycap)
{
    char path[300];
    gnutls_datum_t pem = {NULL, 0};
    gnutls_x509_crt_t crt;
    int rv;

    snprintf(path, sizeof(path), "%s/%s.crt", tp_dir, name);
    assert_int_equal(gnutls_load_file(path, &pem), 0);
    assert_int_equal(gnutls_x509_crt_init(&crt), 0);
    assert_int_equal(gnutls_x509_crt_import(crt, &pem, GNUTLS_X509_FMT_PEM), 0);
    gnutls_free(pem.data);
    why[0] = '\0';
    rv = fa_tls_peer_identity(crt, id, idcap, role, why, whycap);
    gnutls_x509_crt_deinit(crt);
    return rv;
}

static void expect_identity(const char *name, int want_role, const char *want_id)
{
    char id[128], why[512];
    int role = 0;
    if (identity_of(name, id, sizeof(id), &role, why, sizeof(why)) != 0)
        fail_msg("%s refused: %s", name, why);
    assert_int_equal(role, want_role);
    assert_string_equal(id, want_id);
}

static void expect_refused(const char *name, const char *want_in_why)
{
    char id[128], why[512];
    int role = 0;
    if (identity_of(name, id, sizeof(id), &role, why, sizeof(why)) == 0)
        fail_msg("%s accepted as %s '%s'", name,
                 role == FA_H3_ROLE_OPERATOR ? "operator" : "region", id);
    if (!strstr(why, want_in_why))
        fail_msg("%s: reason '%s' does not say '%s'", name, why, want_in_why);
}

static char long_name[700];

static void test_one_uri_names_the_identity(void **state)
{
    make_cert("region", "/O=t/CN=whatever", "URI:fedagg://region/eu-west");
    expect_identity("region", FA_H3_ROLE_REGION, "eu-west");
    make_cert("operator", "/O=t/CN=operator:alice", "URI:fedagg://operator/alice");
    expect_identity("operator", FA_H3_ROLE_OPERATOR, "alice");
    /* other names, however long, are no identity and do not hide one:
     * every SAN is read whole (one of 512 bytes or more was skipped) */
    memset(long_name, 'a', 600);
    long_name[600] = '\0';
    {
        char san[800];
        snprintf(san, sizeof(san), "URI:https://example.invalid/%s,URI:fedagg://region/eu-west",
                 long_name);
        make_cert("long-other", "/O=t/CN=x", san);
        expect_identity("long-other", FA_H3_ROLE_REGION, "eu-west");
    }
}

/* The way past the refusal of a certificate that is both region and
 * operator: an operator URI of 512 bytes or more, which the parser
 * skipped.  Now read, and refused. */
static void test_long_uri_beside_a_region_refused(void **state)
{
    char san[800];
    memset(long_name, 'a', 600);
    long_name[600] = '\0';
    snprintf(san, sizeof(san), "URI:fedagg://region/eu-west,URI:fedagg://operator/%s", long_name);
    make_cert("long-operator", "/O=t/CN=eu-west", san);
    expect_refused("long-operator", "not fedagg://region/<id> or fedagg://operator/<name>");
    snprintf(san, sizeof(san), "URI:fedagg://operator/%s,URI:fedagg://region/eu-west", long_name);
    make_cert("long-first", "/O=t/CN=eu-west", san);
    expect_refused("long-first", "(618 bytes: fedagg://operator/aaaaaaaaaaaaaaaaaaaaaa...)");
}

static void test_two_identities_refused(void **state)
{
    make_cert("two-regions", "/O=t/CN=eu-west",
              "URI:fedagg://region/eu-west,URI:fedagg://region/us-east");
    expect_refused("two-regions", "names more than one identity (fedagg://region/eu-west and "
                                  "fedagg://region/us-east)");
    make_cert("same-twice", "/O=t/CN=eu-west",
              "URI:fedagg://region/eu-west,URI:fedagg://region/eu-west");
    expect_refused("same-twice", "more than one identity");
    make_cert("both-roles", "/O=t/CN=eu-west",
              "URI:fedagg://operator/alice,URI:fedagg://region/eu-west");
    expect_refused("both-roles", "exactly one region or one operator");
}

static void test_other_forms_of_the_scheme_refused(void **state)
{
    /* URI schemes are case-insensitive (RFC 3986 3.1): FEDAGG: is ours */
    make_cert("upper", "/O=t/CN=eu-west",
              "URI:FEDAGG://operator/alice,URI:fedagg://region/eu-west");
    expect_refused("upper", "SAN URI of the fedagg scheme");
    make_cert("admin", "/O=t/CN=eu-west", "URI:fedagg://admin/alice");
    expect_refused("admin", "SAN URI of the fedagg scheme");
    make_cert("bad-id", "/O=t/CN=eu-west", "URI:fedagg://region/EU.west");
    expect_refused("bad-id", "1 to 63 of a-z, 0-9 and '-'");
    make_cert("slash", "/O=t/CN=eu-west", "URI:fedagg://region/eu-west/x");
    expect_refused("slash", "SAN URI of the fedagg scheme");
    make_cert("empty", "/O=t/CN=eu-west", "URI:fedagg://region/");
    expect_refused("empty", "SAN URI of the fedagg scheme");
}

/* Certificates made before the SAN URIs name their region by CN: still
 * taken when that cannot be ambiguous. */
static void test_cn_fallback_only_when_unambiguous(void **state)
{
    make_cert("cn-only", "/O=t/OU=region/CN=eu-west", NULL);
    expect_identity("cn-only", FA_H3_ROLE_REGION, "eu-west");
    make_cert("cn-dns", "/O=t/CN=us-east", "DNS:us-east.example.invalid");
    expect_identity("cn-dns", FA_H3_ROLE_REGION, "us-east");
    make_cert("two-cns", "/O=t/CN=eu-west/CN=us-east", NULL);
    expect_refused("two-cns", "more than one CN");
    make_cert("cn-operator", "/O=t/CN=operator:alice", NULL);
    expect_refused("cn-operator", "CN is not a region id");
    make_cert("cn-spaces", "/O=t/CN=eu west", NULL);
    expect_refused("cn-spaces", "CN is not a region id");
    make_cert("no-cn", "/O=t/OU=region", NULL);
    expect_refused("no-cn", "names no identity");
}

/* The refusal happens in the handshake, and says why. */
static void test_ambiguous_refused_in_handshake(void **state)
{
    fa_h3_server_config cfg;
    tp_server srv;
    fa_h3_client_config cc;
    fa_h3_client *c;
    fa_error err = {0};
    char crt[300], key[300];
    int rv;

    tp_server_config(&cfg);
    assert_int_equal(tp_server_start(&srv, &cfg), 0);
    snprintf(crt, sizeof(crt), "%s/two-regions.crt", tp_dir);
    snprintf(key, sizeof(key), "%s/two-regions.key", tp_dir);
    tp_client_config(&cc, &srv, NULL, NULL);
    cc.cert_file = crt;
    cc.key_file = key;
    assert_int_equal(fa_h3_client_new(&c, &cc, &err), 0);
    rv = fa_h3_client_connect(c, 3000, &err);
    assert_int_equal(rv, FA_ERR_TLS);
    assert_int_equal(tp_server_stats(srv.srv).current_connections, 0);
    fa_h3_client_del(c);
    tp_server_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_uri_names_the_identity),
        cmocka_unit_test(test_long_uri_beside_a_region_refused),
        cmocka_unit_test(test_two_identities_refused),
        cmocka_unit_test(test_other_forms_of_the_scheme_refused),
        cmocka_unit_test(test_cn_fallback_only_when_unambiguous),
        cmocka_unit_test(test_ambiguous_refused_in_handshake),
    };
    srand((unsigned)time(NULL));
    return cmocka_run_group_tests(tests, setup, teardown);
}
