#include "crypto/identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/secagg_internal.h"

static const char secret_tag[] = "fedagg-ed25519-secret-v1";

int fa_identity_generate(uint8_t seed[FA_IDENTITY_SEED_BYTES], uint8_t pk[FA_IDENTITY_PK_BYTES],
                         const fa_secagg_rng *rng)
{
    int rc;
    if (sodium_init() < 0)
        return FA_ERR_CRYPTO;
    rc = fa_secagg_rng_fill(rng, seed, FA_IDENTITY_SEED_BYTES);
    if (rc != 0)
        return rc;
    return fa_identity_public_key(seed, pk);
}

int fa_identity_public_key(const uint8_t seed[FA_IDENTITY_SEED_BYTES],
                           uint8_t pk[FA_IDENTITY_PK_BYTES])
{
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    int rc = crypto_sign_seed_keypair(pk, sk, seed) == 0 ? 0 : FA_ERR_CRYPTO;
    sodium_memzero(sk, sizeof(sk));
    return rc;
}

int fa_identity_format_secret(const uint8_t seed[FA_IDENTITY_SEED_BYTES], char *out, size_t *len)
{
    uint8_t pk[FA_IDENTITY_PK_BYTES];
    char pk64[FA_IDENTITY_PUBLIC_TEXT_MAX], seed64[FA_IDENTITY_PUBLIC_TEXT_MAX];
    int n;

    if (fa_identity_public_key(seed, pk) != 0)
        return FA_ERR_CRYPTO;
    sodium_bin2base64(pk64, sizeof(pk64), pk, sizeof(pk), sodium_base64_VARIANT_ORIGINAL);
    sodium_bin2base64(seed64, sizeof(seed64), seed, FA_IDENTITY_SEED_BYTES,
                      sodium_base64_VARIANT_ORIGINAL);
    n = snprintf(out, FA_IDENTITY_SECRET_TEXT_MAX,
                 "# fedagg region identity key (Ed25519). Keep private.\n"
                 "# public key: %s\n"
                 "%s %s\n",
                 pk64, secret_tag, seed64);
    sodium_memzero(seed64, sizeof(seed64));
    if (n < 0 || n >= FA_IDENTITY_SECRET_TEXT_MAX) {
        sodium_memzero(out, FA_IDENTITY_SECRET_TEXT_MAX);
        return FA_ERR_CRYPTO;
    }
    *len = (size_t)n;
    return 0;
}

static int is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* base64 of exactly 32 bytes from text[0..len) (no surrounding space). */
static int decode32(const uint8_t *text, size_t len, uint8_t out[32])
{
    char buf[64];
    size_t bin_len = 0;
    const char *end = NULL;
    int rc;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    rc = sodium_base642bin(out, 32, buf, len, NULL, &bin_len, &end, sodium_base64_VARIANT_ORIGINAL);
    if (rc == 0 && (bin_len != 32 || end != buf + len))
        rc = -1;
    sodium_memzero(buf, sizeof(buf));
    return rc;
}

int fa_identity_parse_secret(const uint8_t *text, size_t len, uint8_t seed[FA_IDENTITY_SEED_BYTES],
                             fa_error *err)
{
    size_t pos = 0, tag = sizeof(secret_tag) - 1;
    int line = 0, found = 0;

    while (pos < len) {
        size_t end = pos, a, b;
        line++;
        while (end < len && text[end] != '\n')
            end++;
        a = pos;
        b = end;
        pos = end + 1;
        while (a < b && is_space(text[a]))
            a++;
        while (b > a && is_space(text[b - 1]))
            b--;
        if (a == b || text[a] == '#')
            continue;
        if (found)
            return fa_errorf(err, FA_ERR_PARSE, "identity key: line %d: a second key line", line);
        if (b - a <= tag || memcmp(text + a, secret_tag, tag) != 0 || !is_space(text[a + tag]))
            return fa_errorf(err, FA_ERR_PARSE,
                             "identity key: line %d: expected '%s <base64 seed>' (is this a "
                             "fedagg keygen .key file?)",
                             line, secret_tag);
        a += tag;
        while (a < b && is_space(text[a]))
            a++;
        if (decode32(text + a, b - a, seed) != 0) {
            sodium_memzero(seed, FA_IDENTITY_SEED_BYTES);
            return fa_errorf(err, FA_ERR_PARSE,
                             "identity key: line %d: the seed is not the base64 of 32 bytes", line);
        }
        found = 1;
    }
    if (!found)
        return fa_errorf(err, FA_ERR_PARSE, "identity key: no '%s' line", secret_tag);
    return 0;
}

void fa_identity_format_public(const uint8_t pk[FA_IDENTITY_PK_BYTES], char *out, size_t *len)
{
    sodium_bin2base64(out, FA_IDENTITY_PUBLIC_TEXT_MAX - 1, pk, FA_IDENTITY_PK_BYTES,
                      sodium_base64_VARIANT_ORIGINAL);
    *len = strlen(out);
    out[(*len)++] = '\n';
    out[*len] = '\0';
}

int fa_identity_parse_public(const uint8_t *data, size_t len, uint8_t pk[FA_IDENTITY_PK_BYTES],
                             fa_error *err)
{
    size_t a = 0, b = len;
    while (a < b && is_space(data[a]))
        a++;
    while (b > a && is_space(data[b - 1]))
        b--;
    if (decode32(data + a, b - a, pk) == 0)
        return 0;
    if (len == FA_IDENTITY_PK_BYTES) {
        memcpy(pk, data, FA_IDENTITY_PK_BYTES);
        return 0;
    }
    return fa_errorf(err, FA_ERR_PARSE,
                     "identity public key: expected the base64 of 32 bytes (44 characters) or "
                     "32 raw bytes, got %zu bytes",
                     len);
}

int fa_identity_sign(const uint8_t seed[FA_IDENTITY_SEED_BYTES], const uint8_t *msg, size_t len,
                     uint8_t sig[FA_IDENTITY_SIG_BYTES])
{
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    int rc = FA_ERR_CRYPTO;

    /* a stack copy wiped on return: signing is too frequent for a
     * sodium_malloc (two system calls) each time */
    if (crypto_sign_seed_keypair(pk, sk, seed) == 0 &&
        crypto_sign_detached(sig, NULL, msg, len, sk) == 0)
        rc = 0;
    sodium_memzero(sk, sizeof(sk));
    return rc;
}

int fa_identity_verify(const uint8_t pk[FA_IDENTITY_PK_BYTES], const uint8_t *msg, size_t len,
                       const uint8_t sig[FA_IDENTITY_SIG_BYTES])
{
    return crypto_sign_verify_detached(sig, msg, len, pk) == 0 ? 0 : FA_ERR_VERIFY;
}

/* domain || 0x00 || msg, malloc'ed. */
static uint8_t *statement_bytes(const char *domain, const uint8_t *msg, size_t len, size_t *n)
{
    size_t dl = strlen(domain);
    uint8_t *b = malloc(dl + 1 + len);
    if (!b)
        return NULL;
    memcpy(b, domain, dl);
    b[dl] = 0;
    if (len)
        memcpy(b + dl + 1, msg, len);
    *n = dl + 1 + len;
    return b;
}

int fa_identity_sign_statement(const uint8_t seed[FA_IDENTITY_SEED_BYTES], const char *domain,
                               const uint8_t *msg, size_t len, uint8_t sig[FA_IDENTITY_SIG_BYTES])
{
    size_t n;
    uint8_t *b = statement_bytes(domain, msg, len, &n);
    int rc;

    if (!b)
        return FA_ERR_NOMEM;
    rc = fa_identity_sign(seed, b, n, sig);
    free(b);
    return rc;
}

int fa_identity_verify_statement(const uint8_t pk[FA_IDENTITY_PK_BYTES], const char *domain,
                                 const uint8_t *msg, size_t len,
                                 const uint8_t sig[FA_IDENTITY_SIG_BYTES])
{
    size_t n;
    uint8_t *b = statement_bytes(domain, msg, len, &n);
    int rc;

    if (!b)
        return FA_ERR_NOMEM;
    rc = fa_identity_verify(pk, b, n, sig);
    free(b);
    return rc;
}
