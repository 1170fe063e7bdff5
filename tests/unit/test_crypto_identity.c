/* Identity keys: the PREFIX.key and PREFIX.pub formats of `fedagg keygen`,
 * their parsers' refusals, and the signed upload commitment. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "test_crypto_harness.h"

static void test_secret_roundtrip(void **state)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    uint8_t seed[32], pk[32], back[32], pk2[32];
    char text[FA_IDENTITY_SECRET_TEXT_MAX], pub[FA_IDENTITY_PUBLIC_TEXT_MAX];
    size_t len, plen;
    th_rng_init(&r, 1);
    assert_int_equal(fa_identity_generate(seed, pk, &rng), 0);
    assert_int_equal(fa_identity_format_secret(seed, text, &len), 0);
    assert_int_equal(strlen(text), len);
    assert_non_null(strstr(text, "fedagg-ed25519-secret-v1 "));
    assert_int_equal(fa_identity_parse_secret((uint8_t *)text, len, back, NULL), 0);
    assert_memory_equal(seed, back, 32);
    fa_identity_format_public(pk, pub, &plen);
    assert_int_equal(plen, 45); /* 44 base64 characters and a newline */
    assert_int_equal(pub[44], '\n');
    assert_non_null(strstr(text, "# public key: "));
    assert_int_equal(strncmp(strstr(text, "# public key: ") + 14, pub, 44), 0);
    assert_int_equal(fa_identity_parse_public((uint8_t *)pub, plen, pk2, NULL), 0);
    assert_memory_equal(pk, pk2, 32);
    /* 32 raw bytes are accepted too */
    assert_int_equal(fa_identity_parse_public(pk, 32, pk2, NULL), 0);
    assert_memory_equal(pk, pk2, 32);
}

static void test_secret_refusals(void **state)
{
    uint8_t seed[32];
    fa_error err;
    const char *bad[] = {
        "",
        "# only a comment\n",
        "fedagg-ed25519-secret-v1\n",
        "fedagg-ed25519-secret-v1 AAAA\n",
        "fedagg-ed25519-secret-v1 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n",
        "fedagg-ed25519-secret-v2 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
        ("fedagg-ed25519-secret-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" /* two keys */
         "fedagg-ed25519-secret-v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"),
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", /* a .pub file given as the key */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fa_error_clear(&err);
        assert_int_equal(
            fa_identity_parse_secret((const uint8_t *)bad[i], strlen(bad[i]), seed, &err),
            FA_ERR_PARSE);
        assert_non_null(strstr(err.msg, "identity key"));
    }
    fa_error_clear(&err);
    assert_int_equal(fa_identity_parse_secret((const uint8_t *)bad[6], strlen(bad[6]), seed, &err),
                     FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "line 2"));
    /* comments, blank lines and CRLF are fine */
    {
        const char *ok = "\r\n# c\r\n  fedagg-ed25519-secret-v1   "
                         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=  \r\n\n";
        assert_int_equal(fa_identity_parse_secret((const uint8_t *)ok, strlen(ok), seed, NULL), 0);
    }
}

static void test_public_refusals(void **state)
{
    uint8_t pk[32];
    const char *bad[] = {"", "abc", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(
            fa_identity_parse_public((const uint8_t *)bad[i], strlen(bad[i]), pk, NULL),
            FA_ERR_PARSE);
}

/* The audit log's commitment: verifies only for exactly its federation,
 * round, attempt, region and digest. */
static void test_commitment(void **state)
{
    th_fed f;
    th_run run;
    fa_secagg_config cfg = th_cfg(2, 20, 100, 0);
    struct {
        const char *fed;
        uint64_t round;
        uint32_t attempt;
        const char *id;
        int flip;
    } bad[] = {{"other", 7, 1, NULL, 0},
               {NULL, 8, 1, NULL, 0},
               {NULL, 7, 2, NULL, 0},
               {NULL, 7, 1, "region-001", 0},
               {NULL, 7, 1, NULL, 1}};
    uint32_t in0[100] = {1}, in1[100] = {2};
    const uint32_t *ring[2] = {in0, in1};
    const char *id;
    uint8_t sha[32], sig[64];
    int signed_, alg;

    th_fed_init(&f, 2, 1);
    memset(&run, 0, sizeof(run));
    run.ring = ring;
    run.seed = 3;
    assert_int_equal(th_round(&f, &cfg, &run), 0);
    assert_int_equal(fa_secagg_server_commitment(run.server, 0, &id, &alg, sha, sig, &signed_), 0);
    assert_string_equal(id, "region-000");
    assert_int_equal(signed_, 1);
    assert_int_equal(alg, FA_SECAGG_UPLOAD_BLAKE3);
    assert_int_equal(fa_secagg_commitment_verify("test-federation", 7, 1, id, alg, sha, sig,
                                                 f.members[0].identity_pk),
                     0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t s2[32];
        memcpy(s2, sha, 32);
        s2[0] ^= (uint8_t)bad[i].flip;
        assert_int_equal(fa_secagg_commitment_verify(bad[i].fed ? bad[i].fed : "test-federation",
                                                     bad[i].round, bad[i].attempt,
                                                     bad[i].id ? bad[i].id : id, alg, s2, sig,
                                                     f.members[0].identity_pk),
                         FA_ERR_VERIFY);
    }
    assert_int_equal(fa_secagg_server_commitment(run.server, 2, &id, &alg, sha, sig, &signed_),
                     FA_ERR_NOTFOUND);
    th_run_free(&run);
}

/* A statement signature covers its domain: it verifies only as what it was
 * signed as, and not after any change to the message. */
static void test_statement(void **state)
{
    uint8_t seed[32], pk[32], sig[64], sig2[64];
    const uint8_t msg[] = "version 3: accuracy 0.8123";
    (void)state;
    assert_int_equal(fa_identity_generate(seed, pk, NULL), 0);
    assert_int_equal(fa_identity_sign_statement(seed, FA_IDENTITY_DOMAIN_EVAL, msg, sizeof(msg),
                                                sig),
                     0);
    assert_int_equal(
        fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, msg, sizeof(msg), sig), 0);
    assert_int_equal(fa_identity_verify_statement(pk, "fedagg-other-v1", msg, sizeof(msg), sig),
                     FA_ERR_VERIFY);
    /* Not a plain signature of the message either. */
    assert_int_equal(fa_identity_verify(pk, msg, sizeof(msg), sig), FA_ERR_VERIFY);
    assert_int_equal(fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, msg,
                                                  sizeof(msg) - 1, sig),
                     FA_ERR_VERIFY);
    /* Ed25519 is deterministic: the same statement, the same bytes. */
    assert_int_equal(fa_identity_sign_statement(seed, FA_IDENTITY_DOMAIN_EVAL, msg, sizeof(msg),
                                                sig2),
                     0);
    assert_memory_equal(sig, sig2, 64);
    sig[10] ^= 1;
    assert_int_equal(
        fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, msg, sizeof(msg), sig),
        FA_ERR_VERIFY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_roundtrip),
        cmocka_unit_test(test_secret_refusals),
        cmocka_unit_test(test_public_refusals),
        cmocka_unit_test(test_commitment),
        cmocka_unit_test(test_statement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
