#include "common/fa_sha256.h"

#include <openssl/evp.h>

#include "common/fa_err.h"

int fa_sha256(uint8_t out[FA_SHA256_BYTES], const void *data, size_t len)
{
    uint8_t md[FA_SHA256_BYTES];
    unsigned n = 0;
    static const uint8_t empty[1];

    if (!out || (!data && len))
        return FA_ERR_INVAL;
    if (EVP_Digest(len ? data : empty, len, md, &n, EVP_sha256(), NULL) != 1 ||
        n != FA_SHA256_BYTES)
        return FA_ERR_CRYPTO;
    for (size_t i = 0; i < FA_SHA256_BYTES; i++)
        out[i] = md[i];
    return 0;
}

/* c->failed == FA_ERR_STATE before init and after final: not a failure of
 * the hash, but an update or final there is a caller's error. */
int fa_sha256_init(fa_sha256_ctx *c)
{
    if (!c)
        return FA_ERR_INVAL;
    c->failed = 0;
    if (!c->md && !(c->md = EVP_MD_CTX_new())) {
        c->failed = FA_ERR_NOMEM;
        return c->failed;
    }
    if (EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1)
        c->failed = FA_ERR_CRYPTO;
    return c->failed;
}

int fa_sha256_update(fa_sha256_ctx *c, const void *data, size_t len)
{
    if (!c)
        return FA_ERR_INVAL;
    if (!c->md)
        return FA_ERR_STATE;
    if (c->failed)
        return c->failed;
    if (!data && len)
        return c->failed = FA_ERR_INVAL;
    if (len && EVP_DigestUpdate(c->md, data, len) != 1)
        c->failed = FA_ERR_CRYPTO;
    return c->failed;
}

int fa_sha256_final(fa_sha256_ctx *c, uint8_t out[FA_SHA256_BYTES])
{
    uint8_t md[FA_SHA256_BYTES];
    unsigned n = 0;
    int rc;

    if (!c || !out)
        return FA_ERR_INVAL;
    if (!c->md)
        return FA_ERR_STATE;
    if (c->failed)
        return c->failed;
    rc = EVP_DigestFinal_ex(c->md, md, &n) == 1 && n == FA_SHA256_BYTES ? 0 : FA_ERR_CRYPTO;
    c->failed = rc ? rc : FA_ERR_STATE; /* ended: init starts another */
    if (rc)
        return rc;
    for (size_t i = 0; i < FA_SHA256_BYTES; i++)
        out[i] = md[i];
    return 0;
}

void fa_sha256_free(fa_sha256_ctx *c)
{
    if (!c)
        return;
    EVP_MD_CTX_free(c->md);
    c->md = NULL;
    c->failed = 0;
}
