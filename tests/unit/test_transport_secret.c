/* test_transport_secret.c - the server's static secret file and the keys
 * derived from it: exactly 32 raw bytes or 64 hex digits and one line end,
 * nothing looser; the keys are HKDF-SHA256 of the secret, checked against
 * OpenSSL's HKDF as an independent oracle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "common/fa_err.h"
#include "common/fa_hex.h"
#include "transport/server_internal.h"

static char dir[64];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fa_test_secret.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes len bytes to dir/name with mode; returns the path. */
static const char *put(const char *name, const void *data, size_t len, mode_t mode)
{
    static char path[128];
    int fd;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static const char HEX[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

static void test_hex_and_raw_accepted(void **state)
{
    uint8_t want[32], got[32];
    char text[80];
    fa_error err;

    for (int i = 0; i < 32; i++)
        want[i] = (uint8_t)i;
    /* hex alone, with "\n", with "\r\n", upper case */
    assert_int_equal(fa_h3_load_static_secret(put("a", HEX, 64, 0600), 0, got, &err), 0);
    assert_memory_equal(got, want, 32);
    snprintf(text, sizeof(text), "%s\n", HEX);
    assert_int_equal(fa_h3_load_static_secret(put("b", text, 65, 0600), 0, got, &err), 0);
    assert_memory_equal(got, want, 32);
    snprintf(text, sizeof(text), "%s\r\n", HEX);
    assert_int_equal(fa_h3_load_static_secret(put("c", text, 66, 0600), 0, got, &err), 0);
    assert_memory_equal(got, want, 32);
    for (int i = 0; i < 64; i++)
        text[i] = (char)(HEX[i] >= 'a' ? HEX[i] - 32 : HEX[i]);
    assert_int_equal(fa_h3_load_static_secret(put("d", text, 64, 0400), 0, got, &err), 0);
    assert_memory_equal(got, want, 32);

    /* 32 raw bytes whose last is a newline byte: the raw secret, all of it */
    want[31] = '\n';
    want[30] = '\r';
    assert_int_equal(fa_h3_load_static_secret(put("raw", want, 32, 0600), 0, got, &err), 0);
    assert_memory_equal(got, want, 32);
}

/* What strtoul took: leading space, signs, a stray byte; and what is not
 * a secret at all. */
static void test_loose_text_refused(void **state)
{
    static const char *bad[] = {
        " 1", "+f", "-1", "0x", "g0", "1 ", "\n0",
    };
    uint8_t got[32], canary[32];
    char text[80];
    fa_error err;

    memset(canary, 0xa5, sizeof(canary));
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        /* the two characters replace digits 10 and 11 of a good secret */
        memcpy(text, HEX, 64);
        memcpy(text + 10, bad[b], 2);
        memcpy(got, canary, 32);
        assert_int_equal(fa_h3_load_static_secret(put("bad", text, 64, 0600), 0, got, &err),
                         FA_ERR_PARSE);
        assert_memory_equal(got, canary, 32); /* untouched */
        assert_non_null(strstr(err.msg, "hex"));
    }
    /* two line ends, a missing digit, a digit too many, nothing */
    snprintf(text, sizeof(text), "%s\n\n", HEX);
    assert_int_equal(fa_h3_load_static_secret(put("e", text, 66, 0600), 0, got, &err),
                     FA_ERR_PARSE);
    assert_int_equal(fa_h3_load_static_secret(put("f", HEX, 63, 0600), 0, got, &err), FA_ERR_PARSE);
    snprintf(text, sizeof(text), "%s0", HEX);
    assert_int_equal(fa_h3_load_static_secret(put("g", text, 65, 0600), 0, got, &err),
                     FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "got 65 bytes"));
    assert_int_equal(fa_h3_load_static_secret(put("h", "", 0, 0600), 0, got, &err), FA_ERR_PARSE);
    /* 31 raw bytes plus a newline is neither */
    assert_int_equal(fa_h3_load_static_secret(put("i", HEX, 31, 0600), 0, got, &err), FA_ERR_PARSE);
}

static void test_private_mode_and_create(void **state)
{
    uint8_t a[32], b[32];
    char path[128];
    struct stat st;
    fa_error err;

    assert_int_not_equal(fa_h3_load_static_secret(put("open", HEX, 64, 0644), 0, a, &err), 0);
    snprintf(path, sizeof(path), "%s/new.secret", dir);
    assert_int_equal(fa_h3_load_static_secret(path, 0, a, &err), FA_ERR_NOTFOUND);
    assert_int_equal(fa_h3_load_static_secret(path, 1, a, &err), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 65);
    assert_int_equal(fa_h3_load_static_secret(path, 1, b, &err), 0);
    assert_memory_equal(a, b, 32);
}

/* OpenSSL's HKDF, the oracle. */
static void openssl_hkdf(uint8_t out[32], const uint8_t secret[32], const char *salt,
                         const char *info)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t len = 32;
    assert_non_null(ctx);
    assert_int_equal(EVP_PKEY_derive_init(ctx), 1);
    assert_int_equal(EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()), 1);
    assert_int_equal(
        EVP_PKEY_CTX_set1_hkdf_salt(ctx, (const unsigned char *)salt, (int)strlen(salt)), 1);
    assert_int_equal(EVP_PKEY_CTX_set1_hkdf_key(ctx, secret, 32), 1);
    assert_int_equal(
        EVP_PKEY_CTX_add1_hkdf_info(ctx, (const unsigned char *)info, (int)strlen(info)), 1);
    assert_int_equal(EVP_PKEY_derive(ctx, out, &len), 1);
    assert_int_equal(len, 32);
    EVP_PKEY_CTX_free(ctx);
}

static void test_keys_are_hkdf_of_the_secret(void **state)
{
    static fa_h3_server s; /* only its key fields are used */
    uint8_t secret[32], reset[32], token[32];
    fa_error err;

    for (int i = 0; i < 32; i++)
        secret[i] = (uint8_t)(0xc0 + i);
    assert_int_equal(fa_srv_derive_keys(&s, secret, &err), 0);
    openssl_hkdf(reset, secret, "fedagg/quic/v2", "stateless-reset");
    openssl_hkdf(token, secret, "fedagg/quic/v2", "address-token");
    assert_memory_equal(s.reset_key, reset, 32);
    assert_memory_equal(s.token_key, token, 32);
    assert_memory_not_equal(s.reset_key, s.token_key, 32);
    /* one bit of the secret changes both keys */
    secret[7] ^= 1;
    assert_int_equal(fa_srv_derive_keys(&s, secret, &err), 0);
    assert_memory_not_equal(s.reset_key, reset, 32);
    assert_memory_not_equal(s.token_key, token, 32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hex_and_raw_accepted),
        cmocka_unit_test(test_loose_text_refused),
        cmocka_unit_test(test_private_mode_and_create),
        cmocka_unit_test(test_keys_are_hkdf_of_the_secret),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
