/* fa_hkdf.c - see fa_hkdf.h. */
#include "common/fa_hkdf.h"

#include <string.h>

#include <sodium.h>

#include "common/fa_err.h"

int fa_hkdf_sha256(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                   const uint8_t *ikm, size_t ikm_len, const uint8_t *info, size_t info_len)
{
    static const uint8_t zero_salt[32];
    uint8_t prk[32], t[32];
    crypto_auth_hmacsha256_state st;
    size_t done = 0;
    uint8_t counter = 1;
    int rc = 0;

    if (!out || out_len == 0 || out_len > FA_HKDF_SHA256_MAX_OUT || (!ikm && ikm_len) ||
        (!info && info_len))
        return FA_ERR_INVAL;
    if (!salt || salt_len == 0) {
        salt = zero_salt;
        salt_len = sizeof(zero_salt);
    }
    /* Extract: PRK = HMAC(salt, IKM) */
    if (crypto_auth_hmacsha256_init(&st, salt, salt_len) != 0 ||
        crypto_auth_hmacsha256_update(&st, ikm, ikm_len) != 0 ||
        crypto_auth_hmacsha256_final(&st, prk) != 0)
        rc = FA_ERR_CRYPTO;
    /* Expand: T(i) = HMAC(PRK, T(i-1) || info || i) */
    while (rc == 0 && done < out_len) {
        size_t n = out_len - done < 32 ? out_len - done : 32;
        if (crypto_auth_hmacsha256_init(&st, prk, sizeof(prk)) != 0 ||
            (counter > 1 && crypto_auth_hmacsha256_update(&st, t, sizeof(t)) != 0) ||
            crypto_auth_hmacsha256_update(&st, info, info_len) != 0 ||
            crypto_auth_hmacsha256_update(&st, &counter, 1) != 0 ||
            crypto_auth_hmacsha256_final(&st, t) != 0) {
            rc = FA_ERR_CRYPTO;
            break;
        }
        memcpy(out + done, t, n);
        done += n;
        counter++;
    }
    if (rc != 0)
        sodium_memzero(out, out_len); /* never a partial key */
    sodium_memzero(prk, sizeof(prk));
    sodium_memzero(t, sizeof(t));
    sodium_memzero(&st, sizeof(st));
    return rc;
}
