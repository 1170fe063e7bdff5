/* tls.c - GnuTLS for QUIC: credentials, sessions, and the verification of
 * the peer's certificate that decides who may talk to the aggregator.
 *
 * TLS 1.3 only (RFC 9001 4.2), ALPN "h3" mandatory (RFC 9114 3.1), no early
 * data (a replayed 0-RTT request could change state twice), and a peer
 * certificate that must chain to the federation CA: the server requires one
 * from every client (mutual TLS).  GnuTLS requests the client certificate
 * but verifies nothing by itself; verify_peer() below runs inside the
 * handshake, checks chain, validity period, key purpose, revocation (the
 * CRLs of crl_file) and (on the client) the server name, and records why a
 * certificate was refused so that the server can log one clear line.  On
 * the server it also reads the certificate's identity and role
 * (fa_tls_peer_identity: a region's or an operator's), which the server's
 * admit hook then accepts or refuses and its handlers see through
 * fa_h3_request_peer_role().
 */
#include "transport/h3_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"

/* AES-128-GCM first: with AES-NI it is the cheapest AEAD per byte. */
static const char PRIORITY[] = "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                               "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
                               "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1";

static const char REGION_URI_PREFIX[] = "fedagg://region/";
static void crl_list_free(gnutls_x509_crl_t *l, unsigned n);
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
    {
        gnutls_datum_t pem = {NULL, 0};
        rv = gnutls_load_file(ca_file, &pem);
        if (rv >= 0) {
            rv = gnutls_x509_crt_list_import2(&t->cas, &t->ncas, &pem, GNUTLS_X509_FMT_PEM, 0);
            gnutls_free(pem.data);
        }
        if (rv < 0) {
            fa_errorf(err, FA_ERR_TLS, "TLS: CA file %s: %s", ca_file, gnutls_strerror(rv));
            goto fail;
        }
    }
    rv = gnutls_priority_init(&t->prio, PRIORITY, &errpos);
    if (rv < 0) {
        fa_errorf(err, FA_ERR_TLS, "TLS: priority string at '%s': %s", errpos ? errpos : "?",
                  gnutls_strerror(rv));
        goto fail;
    }
    return 0;
fail:
    fa_tls_ctx_free(t);
    return FA_ERR_TLS;
}

void fa_tls_ctx_free(fa_tls_ctx *t)
{
    if (t->prio)
        gnutls_priority_deinit(t->prio);
    if (t->cred)
        gnutls_certificate_free_credentials(t->cred);
    for (unsigned i = 0; i < t->ncas; i++)
        gnutls_x509_crt_deinit(t->cas[i]);
    gnutls_free(t->cas);
    crl_list_free(t->crls, t->ncrls);
    free(t->crl_file);
    memset(t, 0, sizeof(*t));
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

/* A region id or an operator name: 1 to 63 of a-z, 0-9 and '-', the
 * rule of the config's region ids (proto/config.proto), so that every
 * name a certificate can give is one the config can name, and none can
 * carry a space, a quote or a control character into a log or a path. */
static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > FA_TLS_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* The SAN at index i, whole whatever its length, into a fresh buffer
 * (NUL-terminated; *len its length).  Returns its GNUTLS_SAN_* type,
 * GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE after the last, or another
 * negative GnuTLS code. */
static int san_get(gnutls_x509_crt_t crt, unsigned i, char **out, size_t *len)
{
    size_t sz = 0;
    unsigned crit;
    char *buf;
    int rv = gnutls_x509_crt_get_subject_alt_name(crt, i, NULL, &sz, &crit);

    *out = NULL;
    if (rv != GNUTLS_E_SHORT_MEMORY_BUFFER)
        return rv < 0 ? rv : GNUTLS_E_INTERNAL_ERROR;
    if (sz > FA_TLS_SAN_MAX)
        return GNUTLS_E_X509_CERTIFICATE_ERROR;
    buf = malloc(sz + 1);
    if (!buf)
        return GNUTLS_E_MEMORY_ERROR;
    rv = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &sz, &crit);
    if (rv < 0) {
        free(buf);
        return rv;
    }
    buf[sz] = '\0';
    *out = buf;
    *len = sz;
    return rv;
}

int fa_tls_peer_identity(gnutls_x509_crt_t crt, char *out, size_t cap, int *role, char *why,
                         size_t whycap)
{
    char first[FA_TLS_NAME_MAX + 1] = "", cn[256];
    int n_uris = 0, first_role = FA_H3_ROLE_NONE, rv;
    size_t sz;

    for (unsigned i = 0;; i++) {
        char *san = NULL;
        size_t len = 0;
        const char *name;
        int kind;

        rv = san_get(crt, i, &san, &len);
        if (rv == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
            break;
        if (rv < 0) {
            snprintf(why, whycap, "has a subject alternative name (#%u) that cannot be read: %s", i,
                     rv == GNUTLS_E_X509_CERTIFICATE_ERROR ? "longer than 64 KiB"
                                                           : gnutls_strerror(rv));
            return -1;
        }
        if (rv != GNUTLS_SAN_URI || len < 7 || strncasecmp(san, "fedagg:", 7) != 0) {
            free(san); /* another name (DNS, e-mail, another scheme): not an identity */
            continue;
        }
        /* every URI of our scheme counts, well-formed or not: a name that
         * only this parser would skip could mean something to another */
        n_uris++;
        if (strlen(san) != len) {
            kind = -1; /* an embedded NUL */
        } else if (strncmp(san, REGION_URI_PREFIX, sizeof(REGION_URI_PREFIX) - 1) == 0) {
            kind = FA_H3_ROLE_REGION;
        } else if (strncmp(san, OPERATOR_URI_PREFIX, sizeof(OPERATOR_URI_PREFIX) - 1) == 0) {
            kind = FA_H3_ROLE_OPERATOR;
        } else {
            kind = -1;
        }
        name = kind == FA_H3_ROLE_REGION     ? san + sizeof(REGION_URI_PREFIX) - 1
               : kind == FA_H3_ROLE_OPERATOR ? san + sizeof(OPERATOR_URI_PREFIX) - 1
                                             : NULL;
        if (kind < 0 || !name_ok(name, strlen(name))) {
            snprintf(why, whycap,
                     "has a SAN URI of the fedagg scheme that is not fedagg://region/<id> or "
                     "fedagg://operator/<name> with 1 to 63 of a-z, 0-9 and '-' (%zu bytes: "
                     "%.40s%s)",
                     len, san, len > 40 ? "..." : "");
            free(san);
            return -1;
        }
        if (n_uris == 1) {
            snprintf(first, sizeof(first), "%s", name);
            first_role = kind;
        } else {
            snprintf(why, whycap,
                     "names more than one identity (fedagg://%s/%s and fedagg://%s/%s): a "
                     "certificate names exactly one region or one operator",
                     first_role == FA_H3_ROLE_REGION ? "region" : "operator", first,
                     kind == FA_H3_ROLE_REGION ? "region" : "operator", name);
            free(san);
            return -1;
        }
        free(san);
    }
    if (n_uris == 1) {
        snprintf(out, cap, "%s", first);
        *role = first_role;
        return 0;
    }
    /* No fedagg URI: the subject's CN names a region, as certificates made
     * before the SAN URIs do.  Only when that cannot be ambiguous: exactly
     * one CN, and a valid region id (an operator's certificate from
     * deploy/pki.sh has CN=operator:NAME, which is none). */
    sz = sizeof(cn) - 1;
    rv = gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, cn, &sz);
    if (rv == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE) {
        snprintf(why, whycap,
                 "names no identity (want SAN URI fedagg://region/<id> or "
                 "fedagg://operator/<name>; a CN alone names a region)");
        return -1;
    }
    if (rv < 0) {
        snprintf(why, whycap, "has a subject CN that cannot be read: %s", gnutls_strerror(rv));
        return -1;
    }
    {
        char second[8];
        size_t sz2 = sizeof(second);
        int rv2 =
            gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 1, 0, second, &sz2);
        if (rv2 != GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE) {
            snprintf(why, whycap,
                     "has no fedagg:// SAN URI and more than one CN: which region it names is "
                     "ambiguous (add SAN URI fedagg://region/<id>)");
            return -1;
        }
    }
    if (strlen(cn) != sz || !name_ok(cn, sz)) {
        snprintf(why, whycap,
                 "has no fedagg:// SAN URI and its CN is not a region id (1 to 63 of a-z, 0-9 "
                 "and '-'): add SAN URI fedagg://region/<id> or fedagg://operator/<name>");
        return -1;
    }
    snprintf(out, cap, "%s", cn);
    *role = FA_H3_ROLE_REGION;
    return 0;
}

/* ------------------------------------------------------------ revocation */

static void crl_list_free(gnutls_x509_crl_t *l, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crl_deinit(l[i]);
    gnutls_free(l);
}

/* Reads file (PEM with one CRL or more, or DER) into a list, refusing a
 * CRL that no CA of t issued: a revocation list is only as good as its
 * signature (RFC 5280 6.3.3 (f)). */
static int crl_read(fa_tls_ctx *t, const char *file, gnutls_x509_crl_t **out, unsigned *nout,
                    fa_error *err)
{
    gnutls_datum_t data = {NULL, 0};
    gnutls_x509_crl_t *list = NULL;
    unsigned n = 0;
    time_t now = time(NULL);
    int rv;

    *out = NULL;
    *nout = 0;
    rv = gnutls_load_file(file, &data);
    if (rv < 0)
        return fa_errorf(err, FA_ERR_IO, "CRL file %s: cannot read it (%s)", file,
                         gnutls_strerror(rv));
    rv = gnutls_x509_crl_list_import2(&list, &n, &data, GNUTLS_X509_FMT_PEM, 0);
    if (rv < 0 || n == 0)
        rv = gnutls_x509_crl_list_import2(&list, &n, &data, GNUTLS_X509_FMT_DER, 0);
    gnutls_free(data.data);
    if (rv < 0 || n == 0)
        return fa_errorf(err, FA_ERR_PARSE, "CRL file %s: no CRL in it (PEM or DER): %s", file,
                         rv < 0 ? gnutls_strerror(rv) : "empty");
    for (unsigned i = 0; i < n; i++) {
        unsigned status = 0;
        time_t next;
        rv = gnutls_x509_crl_verify(list[i], t->cas, t->ncas, 0, &status);
        if (rv < 0 || status != 0) {
            crl_list_free(list, n);
            return fa_errorf(err, FA_ERR_VERIFY,
                             "CRL file %s: CRL #%u is not signed by the federation CA (%s)", file,
                             i + 1, rv < 0 ? gnutls_strerror(rv) : "bad signature or issuer");
        }
        next = gnutls_x509_crl_get_next_update(list[i]);
        if (next != (time_t)-1 && next < now)
            fa_log(FA_LOG_WARN, "CRL past its next update: still used, publish a new one",
                   "file=%s crl=%u next_update=%lld", file, i + 1, (long long)next);
    }
    *out = list;
    *nout = n;
    return 0;
}

int fa_tls_crl_poll(fa_tls_ctx *t, int force, fa_error *err)
{
    struct stat st;
    gnutls_x509_crl_t *list;
    unsigned n;
    int rv;

    if (!t->crl_file)
        return 0;
    if (stat(t->crl_file, &st) != 0)
        return fa_errorf(err, FA_ERR_IO, "CRL file %s: %s", t->crl_file, strerror(errno));
    if (!force && st.st_mtim.tv_sec == t->crl_mtime.tv_sec &&
        st.st_mtim.tv_nsec == t->crl_mtime.tv_nsec && st.st_size == t->crl_size &&
        st.st_ino == t->crl_ino)
        return 0;
    /* remembered even when the file is bad, so that one bad version is
     * reported once, not at every poll */
    t->crl_mtime = st.st_mtim;
    t->crl_size = st.st_size;
    t->crl_ino = st.st_ino;
    rv = crl_read(t, t->crl_file, &list, &n, err);
    if (rv != 0)
        return rv; /* the previous list stays */
    crl_list_free(t->crls, t->ncrls);
    t->crls = list;
    t->ncrls = n;
    t->crl_loads++;
    return 1;
}

int fa_tls_crl_set(fa_tls_ctx *t, const char *file, fa_error *err)
{
    int rv;
    if (!file || !*file)
        return 0;
    t->crl_file = strdup(file);
    if (!t->crl_file)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    rv = fa_tls_crl_poll(t, 1, err);
    return rv < 0 ? rv : 0;
}

int fa_tls_crt_revoked(const fa_tls_ctx *t, gnutls_x509_crt_t crt, char *why, size_t cap)
{
    uint8_t serial[40];
    char hex[2 * sizeof(serial) + 1];
    size_t sl = sizeof(serial);
    int rv;

    if (!t->ncrls)
        return 0;
    rv = gnutls_x509_crt_check_revocation(crt, t->crls, t->ncrls);
    if (rv == 0)
        return 0;
    if (gnutls_x509_crt_get_serial(crt, serial, &sl) == 0)
        fa_hex_encode(hex, sizeof(hex), serial, sl);
    else
        snprintf(hex, sizeof(hex), "?");
    if (rv < 0)
        snprintf(why, cap, "cannot be checked against the CRL: %s", gnutls_strerror(rv));
    else
        snprintf(why, cap, "is revoked (serial %s, in the CRL %s)", hex,
                 t->crl_file ? t->crl_file : "");
    return 1;
}

int fa_tls_session_revoked(const fa_tls_ctx *t, gnutls_session_t s, char *why, size_t cap)
{
    unsigned n = 0;
    const gnutls_datum_t *certs;
    gnutls_x509_crt_t crt;
    int rv = 0;

    if (!t->ncrls || !s)
        return 0;
    certs = gnutls_certificate_get_peers(s, &n);
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0)
        return 0;
    if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) == 0)
        rv = fa_tls_crt_revoked(t, crt, why, cap);
    gnutls_x509_crt_deinit(crt);
    return rv;
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
    char subj[300], why[400];
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
        qc->refusal = FA_REFUSED_CERT;
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    if (status != 0) {
        gnutls_datum_t out = {NULL, 0};
        char st[200] = "not trusted";
        if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
            size_t l;
            snprintf(st, sizeof(st), "%.*s", (int)out.size, (const char *)out.data);
            gnutls_free(out.data);
            l = strlen(st);
            while (l && (st[l - 1] == ' ' || st[l - 1] == '.'))
                st[--l] = '\0';
        }
        if ((status & GNUTLS_CERT_UNEXPECTED_OWNER) && qc->server_name)
            snprintf(qc->verify_fail, sizeof(qc->verify_fail),
                     "server certificate%s does not match the name '%s': %s", subj, qc->server_name,
                     st);
        else
            snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate%s refused: %s",
                     qc->is_server ? "client" : "server", subj, st);
        qc->refusal = FA_REFUSED_CERT;
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    certs = gnutls_certificate_get_peers(s, &n);
    if (!certs || n == 0 || gnutls_x509_crt_init(&crt) < 0) {
        snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate: none presented",
                 qc->is_server ? "client" : "server");
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    rv = gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER);
    qc->refusal = FA_REFUSED_CERT;
    if (rv < 0) {
        snprintf(why, sizeof(why), "cannot be parsed");
    } else if (qc->tlsctx && fa_tls_crt_revoked(qc->tlsctx, crt, why, sizeof(why))) {
        qc->refusal = FA_REFUSED_REVOKED;
        rv = -1;
    } else if (!qc->is_server) {
        /* the server's name was checked above; its certificate names no
         * region or operator */
        snprintf(qc->peer_id, sizeof(qc->peer_id), "%s", qc->server_name ? qc->server_name : "");
    } else if (fa_tls_peer_identity(crt, qc->peer_id, sizeof(qc->peer_id), &qc->peer_role, why,
                                    sizeof(why)) != 0) {
        rv = -1;
    } else if (qc->ops && qc->ops->peer_admit && !qc->ops->peer_admit(qc, why, sizeof(why))) {
        qc->refusal = FA_REFUSED_ADMIT;
        rv = -1;
    }
    gnutls_x509_crt_deinit(crt);
    if (rv < 0) {
        snprintf(qc->verify_fail, sizeof(qc->verify_fail), "%s certificate%s %s",
                 qc->is_server ? "client" : "server", subj, why);
        qc->peer_role = FA_H3_ROLE_NONE;
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    qc->refusal = FA_REFUSED_NONE;
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
    qc->tlsctx = t;
    return 0;
fail:
    gnutls_deinit(s);
    return fa_errorf(err, FA_ERR_TLS, "TLS session setup: %s", gnutls_strerror(rv));
}
