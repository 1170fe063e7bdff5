#include "crypto/kdf_internal.h"

#include <string.h>

#include <sodium.h>

#include "common/fa_err.h"
#include "crypto/wire.h"

static const char kdf_label[] = "fedagg/secagg/v1";

int fa_kdf_hkdf_sha256(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                       const uint8_t *ikm, size_t ikm_len, const uint8_t *info, size_t info_len)
{
    static const uint8_t zero_salt[32];
    uint8_t prk[32], t[32];
    crypto_auth_hmacsha256_state st;
    size_t done = 0;
    uint8_t counter = 1;
    int rc = 0;

    if (out_len > 255 * 32)
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
        sodium_memzero(out, out_len);
    sodium_memzero(prk, sizeof(prk));
    sodium_memzero(t, sizeof(t));
    sodium_memzero(&st, sizeof(st));
    return rc;
}

int fa_kdf_derive(uint8_t *out, size_t out_len, const uint8_t *ikm, size_t ikm_len,
                  const char *purpose, const char *federation, uint64_t round, uint32_t attempt,
                  const char *id_a, const char *id_b)
{
    fa_wbuf info;
    int rc;

    fa_wbuf_init(&info, 0);
    fa_wbuf_raw(&info, kdf_label, sizeof(kdf_label) - 1);
    fa_wbuf_str(&info, purpose);
    fa_wbuf_str(&info, federation);
    fa_wbuf_u64(&info, round);
    fa_wbuf_u32(&info, attempt);
    if (id_b && strcmp(id_b, id_a) < 0) {
        const char *tmp = id_a;
        id_a = id_b;
        id_b = tmp;
    }
    fa_wbuf_str(&info, id_a);
    fa_wbuf_str(&info, id_b ? id_b : "");
    if (info.failed) {
        fa_wbuf_free(&info);
        sodium_memzero(out, out_len);
        return FA_ERR_NOMEM;
    }
    rc = fa_kdf_hkdf_sha256(out, out_len, (const uint8_t *)kdf_label, sizeof(kdf_label) - 1, ikm,
                            ikm_len, info.p, info.len);
    fa_wbuf_free(&info);
    return rc;
}
