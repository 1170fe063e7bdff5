/* tls.c - GnuTLS for QUIC: credentials, sessions, and the verification of
 * the peer's certificate that decides who may talk to the aggregator.
 *
 * TLS 1.3 only (RFC 9001 4.2), ALPN "h3" mandatory (RFC 9114 3.1), no early
 * data (a replayed 0-RTT request could change state twice), and a peer
 * certificate that must chain to the federation CA: the server requires one
 * from every client (mutual TLS).  GnuTLS requests the client certificate
 * but verifies nothing by itself; verify_peer() below runs inside the
 * handshake, checks chain, validity period, key purpose and (on the client)
 * the server name, and records why a certificate was refused so that the
 * server can log one clear line.  It also reads the certificate's role
 * (peer_identity: a region's or an operator's), which the server's handlers
 * see through fa_h3_request_peer_role().
 */
#include "transport/h3_internal.h"

#include <arpa/inet.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fa_file.h"

/* AES-128-GCM first: with AES-NI it is the cheapest AEAD per byte. */
static const char PRIORITY[] = "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                               "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
                               "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1";

static const char REGION_URI_PREFIX[] = "fedagg://region/";
static const char OPERATOR_URI_PREFIX[] = "fedagg://operator/";

int fa_tls_ctx_init(fa_tls_ctx *t, int server, const char *cert_file, const char *key_file,
                    const char *ca_file, fa_error *err)
{
    int rv;
    const char *errpos = NULL;

    memset(t, 0, sizeof(*t));
    t->server = server;
    if (!ca_file || !*ca_file)
        return fa_errorf(err, FA_ERR_INVAL, "TLS: a CA file is required (ca_file)");
    if ((cert_file && *cert_file) != (key_file && *key_file))
        return fa_errorf(err, FA_ERR_INVAL, "TLS: cert_file and key_file go together");
    if (server && !(cert_file && *cert_file))
        return fa_errorf(err, FA_ERR_INVAL, "TLS: the server needs cert_file and key_file");
    if (key_file && *key_file) {
        rv = fa_file_check_private(key_file, err);
        if (rv != 0)
            return rv;
    }
    rv = gnutls_certificate_allocate_credentials(&t->cred);
    if (rv < 0)
        return fa_errorf(err, FA_ERR_NOMEM, "TLS: %s", gnutls_strerror(rv));
    if (cert_file && *cert_file) {
        rv =
            gnutls_certificate_set_x509_key_file(t->cred, cert_file, key_file, GNUTLS_X509_FMT_PEM);
        if (rv < 0) {
            fa_errorf(err, FA_ERR_TLS, "TLS: cannot load certificate %s with key %s: %s", cert_file,
                      key_file, gnutls_strerror(rv));
            goto fail;
        }
    }
    rv = gnutls_certificate_set_x509_trust_file(t->cred, ca_file, GNUTLS_X509_FMT_PEM);
    if (rv <= 0) {
        fa_errorf(err, FA_ERR_TLS, "TLS: CA file %s: %s", ca_file,
                  rv == 0 ? "no certificate in it" : gnutls_strerror(rv));
        goto fail;
    }
    rv = gnutls_priority_init(&t->prio, PRIORITY, &errpos);
    if (rv < 0) {
        fa_errorf(err, FA_ERR_TLS, "TLS: priority string at '%s': %s", errpos ? errpos : "?",
                  gnutls_strerror(rv));
        goto fail;
    }
    return 0;
fail:
    gnutls_certificate_free_credentials(t->cred);
    t->cred = NULL;
    return FA_ERR_TLS;
}

void fa_tls_ctx_free(fa_tls_ctx *t)
{
    if (t->prio)
        gnutls_priority_deinit(t->prio);
    if (t->cred)
        gnutls_certificate_free_credentials(t->cred);
    t->prio = NULL;
    t->cred = NULL;
}

const char *fa_tls_alert_name(uint8_t alert)
{
    /* RFC 8446 6 names: "bad_certificate", "certificate_required"... */
    static __thread char buf[64];
    const char *n = gnutls_alert_get_strname((gnutls_alert_description_t)alert);
    size_t i = 0;
    if (!n)
        return "unknown_alert";
    if (strncmp(n, "GNUTLS_A_", 9) == 0)
        n += 9;
    for (; n[i] && i + 1 < sizeof(buf); i++)
        buf[i] = (char)(n[i] >= 'A' && n[i] <= 'Z' ? n[i] + 32 : n[i]);
    buf[i] = '\0';
    return buf;
}

/* Printable identity: 1..127 bytes of printable ASCII. */
static int identity_ok(const char *s, size_t n)
{
    if (n == 0 || n > 127)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

/* The name after a fedagg:// URI prefix: printable, no '/'. */
static int uri_name(const char *uri, const char *prefix, size_t plen, char *out, size_t cap)
{
    const char *id;
    if (strncmp(uri, prefix, plen) != 0)
        return 0;
    id = uri + plen;
    if (!identity_ok(id, strlen(id)) || strchr(id, '/'))
        return -1;
    snprintf(out, cap, "%s", id);
    return 1;
}

/* The peer's identity and role.  A SAN URI fedagg://operator/<name> makes
 * an operator (the admin API), fedagg://region/<id> a region; without
 * either, the CN names a region (certificates made before the SAN URIs).
 * A certificate naming both a region and an operator is refused: one key
 * must not be able to act as both.  Returns 0, or -1 with *why set. */
static int peer_identity(gnutls_x509_crt_t crt, char *out, size_t cap, int *role, const char **why)
{
    char buf[512], region[128] = "", oper[128] = "";
    size_t sz;
    unsigned crit;

    *why = "names no identity (want SAN URI fedagg://region/<id>, "
           "fedagg://operator/<name> or a CN)";
    for (unsigned i = 0;; i++) {
        int rv;
        sz = sizeof(buf) - 1;
        rv = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &sz, &crit);
        if (rv == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
            break;
        if (rv < 0 || rv != GNUTLS_SAN_URI)
            continue;
        buf[sz] = '\0';
        /* The first URI of each kind counts, as the first region URI always did. */
        if (!region[0]) {
            rv = uri_name(buf, REGION_URI_PREFIX, sizeof(REGION_URI_PREFIX) - 1, region,
                          sizeof(region));
            if (rv < 0) {
                *why = "has a malformed SAN URI fedagg://region/<id>";
                return -1;
            }
            if (rv > 0)
                continue;
        }
        if (!oper[0]) {
            rv = uri_name(buf, OPERATOR_URI_PREFIX, sizeof(OPERATOR_URI_PREFIX) - 1, oper,
                          sizeof(oper));
            if (rv < 0) {
                *why = "has a malformed SAN URI fedagg://operator/<name>";
                return -1;
            }
        }
    }
    if (region[0] && oper[0]) {
        *why = "names both a region and an operator (SAN URIs fedagg://region/ and "
               "fedagg://operator/): issue one certificate per role";
        return -1;
    }
    if (oper[0]) {
        snprintf(out, cap, "%s", oper);
        *role = FA_H3_ROLE_OPERATOR;
        return 0;
    }
    if (region[0]) {
        snprintf(out, cap, "%s", region);
        *role = FA_H3_ROLE_REGION;
        return 0;
    }
    sz = sizeof(buf) - 1;
    if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &sz) == 0) {
        buf[sz] = '\0';
        if (identity_ok(buf, sz)) {
            snprintf(out, cap, "%s", buf);
            *role = FA_H3_ROLE_REGION;
            return 0;
        }
    }
    return -1;
}

static void describe_cert(gnutls_session_t s, char *buf, size_t cap)
{
    unsigned n = 0;
    const gnutls_datum_t *certs = gnutls_certificate_get_peers(s, &n);
    gnutls_x509_crt_t crt;
    gnutls_datum_t dn = {NULL, 0};

    buf[0] = '\0';
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0)
        return;
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0 &&
        gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
        snprintf(buf, cap, " (subject %.*s)", (int)dn.size, (const char *)dn.data);
        gnutls_free(dn.data);
    }
    gnutls_x509_crt_deinit(crt);
}

/* Runs inside the handshake when the peer's Certificate has arrived. */
static int verify_peer(gnutls_session_t s)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
    fa_qconn *qc = ref->user_data;
    gnutls_typed_vdata_st vdata[2];
    unsigned nv = 0, status = 0, n = 0;
    const gnutls_datum_t *certs;
    gnutls_x509_crt_t crt;
    const char *no_id = "";
    char subj[300];
    int rv;

    vdata[nv].type = GNUTLS_DT_KEY_PURPOSE_OID;
    vdata[nv].data =
        (unsigned char *)(qc->is_server ? GNUTLS_KP_TLS_WWW_CLIENT : GNUTLS_KP_TLS_WWW_SERVER);
    vdata[nv].size = 0;
    nv++;
    if (!qc->is_server && qc->server_name) {
        vdata[nv].type = GNUTLS_DT_DNS_HOSTNAME;
        vdata[nv].data = (unsigned char *)qc->server_name;
        vdata[nv].size = 0;
        nv++;
    }
    describe_cert(s, subj, sizeof(subj));
    rv = gnutls_certificate_verify_peers(s, vdata, nv, &status);
    if (rv < 0) {
        snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate: %s",
                 qc->is_server ? "client" : "server",
                 rv == GNUTLS_E_NO_CERTIFICATE_FOUND ? "none presented" : gnutls_strerror(rv));
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    if (status != 0) {
        gnutls_datum_t out = {NULL, 0};
        char why[200] = "not trusted";
        if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
            size_t l;
            snprintf(why, sizeof(why), "%.*s", (int)out.size, (const char *)out.data);
            gnutls_free(out.data);
            l = strlen(why);
            while (l && (why[l - 1] == ' ' || why[l - 1] == '.'))
                why[--l] = '\0';
        }
        if ((status & GNUTLS_CERT_UNEXPECTED_OWNER) && qc->server_name)
            snprintf(qc->verify_fail, sizeof(qc->verify_fail),
                     "server certificate%s does not match the name '%s': %s", subj, qc->server_name,
                     why);
        else
            snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate%s refused: %s",
                     qc->is_server ? "client" : "server", subj, why);
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    certs = gnutls_certificate_get_peers(s, &n);
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0) {
        snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate: none presented",
                 qc->is_server ? "client" : "server");
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    rv = gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER);
    if (rv < 0 ||
        peer_identity(crt, qc->peer_id, sizeof(qc->peer_id), &qc->peer_role, &no_id) != 0) {
        snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate%s %s",
                 qc->is_server ? "client" : "server", subj, rv < 0 ? "cannot be parsed" : no_id);
        gnutls_x509_crt_deinit(crt);
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    gnutls_x509_crt_deinit(crt);
    qc->verified = 1;
    return 0;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((fa_qconn *)ref->user_data)->conn;
}

static int inet_pton_any(const char *s, unsigned char *buf16)
{
    return inet_pton(AF_INET, s, buf16) == 1 || inet_pton(AF_INET6, s, buf16) == 1;
}

int fa_tls_session_new(fa_tls_ctx *t, fa_qconn *qc, const char *server_name, fa_error *err)
{
    gnutls_session_t s;
    gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    int rv;

    rv = gnutls_init(&s, (t->server ? GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET : GNUTLS_CLIENT) |
                             GNUTLS_NO_END_OF_EARLY_DATA);
    if (rv < 0)
        return fa_errorf(err, FA_ERR_TLS, "gnutls_init: %s", gnutls_strerror(rv));
    rv = gnutls_priority_set(s, t->prio);
    if (rv < 0)
        goto fail;
    rv = t->server ? ngtcp2_crypto_gnutls_configure_server_session(s)
                   : ngtcp2_crypto_gnutls_configure_client_session(s);
    if (rv != 0) {
        rv = GNUTLS_E_INTERNAL_ERROR;
        goto fail;
    }
    qc->conn_ref.get_conn = get_conn;
    qc->conn_ref.user_data = qc;
    gnutls_session_set_ptr(s, &qc->conn_ref);
    rv = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->cred);
    if (rv < 0)
        goto fail;
    rv = gnutls_alpn_set_protocols(
        s, &alpn, 1, GNUTLS_ALPN_MANDATORY | (t->server ? GNUTLS_ALPN_SERVER_PRECEDENCE : 0));
    if (rv < 0)
        goto fail;
    if (t->server) {
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
        /* Do not list our CA in the CertificateRequest: a client then sends
         * the certificate it has, even one from another CA, and the refusal
         * names the real problem instead of "no certificate". */
        gnutls_certificate_send_x509_rdn_sequence(s, 1);
    } else if (server_name && *server_name) {
        /* SNI carries DNS names only (RFC 6066 3), never address literals */
        unsigned char tmp[16];
        if (inet_pton_any(server_name, tmp) == 0) {
            rv = gnutls_server_name_set(s, GNUTLS_NAME_DNS, server_name, strlen(server_name));
            if (rv < 0)
                goto fail;
        }
    }
    gnutls_session_set_verify_function(s, verify_peer);
    qc->tls = s;
    return 0;
fail:
    gnutls_deinit(s);
    return fa_errorf(err, FA_ERR_TLS, "TLS session setup: %s", gnutls_strerror(rv));
}
