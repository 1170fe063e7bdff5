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

    if (out_len > 255 * 32)
        return -1;
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
        return FA_ERR_NOMEM;
    }
    rc = fa_kdf_hkdf_sha256(out, out_len, (const uint8_t *)kdf_label, sizeof(kdf_label) - 1, ikm,
                            ikm_len, info.p, info.len);
    fa_wbuf_free(&info);
    return rc == 0 ? 0 : FA_ERR_INVAL;
}
