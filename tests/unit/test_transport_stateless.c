/* Unit tests of transport/stateless.c, the server's replies that need no
 * connection, on a fixed random source and a synthetic clock; the packets
 * are checked with ngtcp2's own parsers and token verifiers (RFC 9000 6,
 * 8.1.2, 10.3, 17.2). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <ngtcp2/ngtcp2_crypto.h>

#include "transport/stateless_internal.h"

static uint8_t next_byte;
static void fixed_rand(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = next_byte++;
}

static const uint8_t key[32] = "stateless test key, 32 bytes ..";

static void initial_hd(ngtcp2_pkt_hd *hd)
{
    static const uint8_t dcid[8] = {1, 2, 3, 4, 5, 6, 7, 8}, scid[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    memset(hd, 0, sizeof(*hd));
    hd->version = NGTCP2_PROTO_VER_V1;
    hd->type = NGTCP2_PKT_INITIAL;
    hd->flags = NGTCP2_PKT_FLAG_LONG_FORM;
    ngtcp2_cid_init(&hd->dcid, dcid, sizeof(dcid));
    ngtcp2_cid_init(&hd->scid, scid, sizeof(scid));
}

static void client_addr(struct sockaddr_in *a, uint16_t port)
{
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(0x7f000001);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void test_version_negotiation(void **state)
{
    static const uint8_t d[4] = {0xd1, 0xd2, 0xd3, 0xd4}, s[3] = {0x51, 0x52, 0x53};
    ngtcp2_version_cid vc = {
        .version = 0xbabababa, .dcid = d, .dcidlen = 4, .scid = s, .scidlen = 3};
    uint8_t out[256];
    ngtcp2_ssize n = fa_stateless_version_negotiation(out, sizeof(out), &vc, fixed_rand);

    /* long form, version 0, the client's CIDs swapped, then our versions */
    assert_int_equal(n, 1 + 4 + 1 + 3 + 1 + 4 + 8);
    assert_true(out[0] & 0x80);
    assert_int_equal(be32(out + 1), 0);
    assert_int_equal(out[5], 3);
    assert_memory_equal(out + 6, s, 3);
    assert_int_equal(out[9], 4);
    assert_memory_equal(out + 10, d, 4);
    assert_int_equal(be32(out + 14), NGTCP2_PROTO_VER_V1);
    assert_int_equal(be32(out + 18), 0x1a2a3a4a); /* reserved, exercises the client (6.3) */
    /* too small a buffer: nothing to send */
    assert_true(fa_stateless_version_negotiation(out, 10, &vc, fixed_rand) < 0);
}

static void test_retry(void **state)
{
    ngtcp2_pkt_hd hd, rhd;
    struct sockaddr_in from, other;
    uint8_t out[1500];
    ngtcp2_cid scid, ocid;
    const uint64_t now = 1700000000ull * NGTCP2_SECONDS;
    size_t off, tokenlen;
    ngtcp2_ssize n;

    initial_hd(&hd);
    client_addr(&from, 4433);
    client_addr(&other, 4434);
    next_byte = 0x40;
    n = fa_stateless_retry(out, sizeof(out), key, &hd, (struct sockaddr *)&from, sizeof(from), 1200,
                           now, fixed_rand);
    assert_true(n > 0);
    assert_true(ngtcp2_pkt_decode_hd_long(&rhd, out, (size_t)n) > 0);
    assert_int_equal(rhd.type, NGTCP2_PKT_RETRY);
    assert_true(ngtcp2_cid_eq(&rhd.dcid, &hd.scid));
    /* the new server CID: FA_STATELESS_CIDLEN bytes of the random source */
    assert_int_equal(rhd.scid.datalen, FA_STATELESS_CIDLEN);
    assert_int_equal(rhd.scid.data[0], 0x40);
    assert_int_equal(rhd.scid.data[FA_STATELESS_CIDLEN - 1], 0x40 + FA_STATELESS_CIDLEN - 1);
    scid = rhd.scid;
    /* the token lies between the header and the 16-byte integrity tag */
    off = 1 + 4 + 1 + hd.scid.datalen + 1 + scid.datalen;
    tokenlen = (size_t)n - off - 16;
    assert_int_equal(ngtcp2_crypto_verify_retry_token(
                         &ocid, out + off, tokenlen, key, 32, hd.version, (struct sockaddr *)&from,
                         sizeof(from), &scid, 10 * NGTCP2_SECONDS, now + NGTCP2_SECONDS),
                     0);
    assert_true(ngtcp2_cid_eq(&ocid, &hd.dcid));
    /* another address, another key, too late: refused (8.1.3) */
    assert_int_not_equal(ngtcp2_crypto_verify_retry_token(&ocid, out + off, tokenlen, key, 32,
                                                          hd.version, (struct sockaddr *)&other,
                                                          sizeof(other), &scid, 10 * NGTCP2_SECONDS,
                                                          now),
                         0);
    assert_int_not_equal(
        ngtcp2_crypto_verify_retry_token(
            &ocid, out + off, tokenlen, (const uint8_t *)"another key, 32 bytes long .....", 32,
            hd.version, (struct sockaddr *)&from, sizeof(from), &scid, 10 * NGTCP2_SECONDS, now),
        0);
    assert_int_not_equal(ngtcp2_crypto_verify_retry_token(&ocid, out + off, tokenlen, key, 32,
                                                          hd.version, (struct sockaddr *)&from,
                                                          sizeof(from), &scid, 10 * NGTCP2_SECONDS,
                                                          now + 11 * NGTCP2_SECONDS),
                         0);
    /* amplification (8.1): at most three times what was received */
    n = fa_stateless_retry(out, sizeof(out), key, &hd, (struct sockaddr *)&from, sizeof(from), 30,
                           now, fixed_rand);
    assert_true(n < 0);
}

static void test_initial_close(void **state)
{
    ngtcp2_pkt_hd hd, rhd;
    uint8_t out[1500];
    ngtcp2_ssize n;

    initial_hd(&hd);
    n = fa_stateless_initial_close(out, sizeof(out), &hd, NGTCP2_CONNECTION_REFUSED);
    assert_true(n > 0);
    assert_true(ngtcp2_pkt_decode_hd_long(&rhd, out, (size_t)n) > 0);
    assert_int_equal(rhd.type, NGTCP2_PKT_INITIAL);
    assert_true(ngtcp2_cid_eq(&rhd.dcid, &hd.scid));
    assert_true(ngtcp2_cid_eq(&rhd.scid, &hd.dcid));
}

static void test_stateless_reset(void **state)
{
    fa_stateless_limit lim = {0};
    uint8_t dcid[FA_STATELESS_CIDLEN], out[1500], want[NGTCP2_STATELESS_RESET_TOKENLEN];
    ngtcp2_cid cid;
    uint64_t now = 5 * NGTCP2_SECONDS;
    ngtcp2_ssize n;

    memset(dcid, 0x33, sizeof(dcid));
    ngtcp2_cid_init(&cid, dcid, sizeof(dcid));
    assert_int_equal(ngtcp2_crypto_generate_stateless_reset_token(want, key, 32, &cid), 0);

    /* a keep-alive PING of 40 bytes gets 39; a big packet gets 128 */
    n = fa_stateless_reset(out, sizeof(out), &lim, now, key, dcid, sizeof(dcid), 40, fixed_rand);
    assert_int_equal(n, 39);
    assert_int_equal(out[0] & 0xc0, 0x40); /* short header, fixed bit */
    assert_memory_equal(out + n - 16, want, 16);
    n = fa_stateless_reset(out, sizeof(out), &lim, now, key, dcid, sizeof(dcid), 1200, fixed_rand);
    assert_int_equal(n, 128);
    assert_memory_equal(out + n - 16, want, 16);
    /* the smallest: 22 bytes in, 21 out */
    n = fa_stateless_reset(out, sizeof(out), &lim, now, key, dcid, sizeof(dcid), 22, fixed_rand);
    assert_int_equal(n, 21);
    /* none: too short to answer without a loop, or not one of our CIDs */
    assert_int_equal(
        fa_stateless_reset(out, sizeof(out), &lim, now, key, dcid, sizeof(dcid), 21, fixed_rand),
        0);
    assert_int_equal(
        fa_stateless_reset(out, sizeof(out), &lim, now, key, dcid, 8, 1200, fixed_rand), 0);
    assert_int_equal(lim.sent, 3); /* those two were not counted */
}

static void test_reset_rate(void **state)
{
    fa_stateless_limit lim = {0};
    uint8_t dcid[FA_STATELESS_CIDLEN] = {0}, out[256];
    uint64_t t0 = 100 * NGTCP2_SECONDS;
    int sent = 0;

    for (int i = 0; i < 1000; i++)
        sent +=
            fa_stateless_reset(out, sizeof(out), &lim, t0 + (uint64_t)i * NGTCP2_MILLISECONDS / 2,
                               key, dcid, sizeof(dcid), 100, fixed_rand) > 0;
    assert_int_equal(sent, FA_STATELESS_RESETS_PER_SECOND); /* within one second */
    /* a new window once a second has passed */
    assert_true(fa_stateless_reset(out, sizeof(out), &lim, t0 + 2 * NGTCP2_SECONDS, key, dcid,
                                   sizeof(dcid), 100, fixed_rand) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_negotiation), cmocka_unit_test(test_retry),
        cmocka_unit_test(test_initial_close),       cmocka_unit_test(test_stateless_reset),
        cmocka_unit_test(test_reset_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
