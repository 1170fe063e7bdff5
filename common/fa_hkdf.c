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

    if (!out || out_len == 0 || out_len > FA_HKDF_SHA256_MAX_OUT || (!ikm && ikm_len) ||
        (!info && info_len))
        return FA_ERR_INVAL;
    if (!salt || salt_len == 0) {
        salt = zero_salt;
        salt_len = sizeof(zero_salt);
    }
    /* Extract: PRK = HMAC(salt, IKM) */
    crypto_auth_hmacsha256_init(&st, salt, salt_len);
    crypto_auth_hmacsha256_update(&st, ikm, ikm_len);
    crypto_auth_hmacsha256_final(&st, prk);
    /* Expand: T(i) = HMAC(PRK, T(i-1) || info || i) */
    while (done < out_len) {
        size_t n = out_len - done < 32 ? out_len - done : 32;
        crypto_auth_hmacsha256_init(&st, prk, sizeof(prk));
        if (counter > 1)
            crypto_auth_hmacsha256_update(&st, t, sizeof(t));
        crypto_auth_hmacsha256_update(&st, info, info_len);
        crypto_auth_hmacsha256_update(&st, &counter, 1);
        crypto_auth_hmacsha256_final(&st, t);
        memcpy(out + done, t, n);
        done += n;
        counter++;
    }
    sodium_memzero(prk, sizeof(prk));
    sodium_memzero(t, sizeof(t));
    sodium_memzero(&st, sizeof(st));
    return 0;
}
