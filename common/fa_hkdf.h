/* fa_hkdf.h - HKDF-SHA256 (RFC 5869), the one key-derivation function of
 * the tree: secure aggregation derives its keys with it (crypto/kdf.h adds
 * the domain separation), the transport its stateless-reset and token
 * keys.  Over libsodium's HMAC-SHA256.
 */
#ifndef FA_HKDF_H
#define FA_HKDF_H

#include <stddef.h>
#include <stdint.h>

/* Largest output: 255 blocks of the hash (RFC 5869 2.3). */
#define FA_HKDF_SHA256_MAX_OUT (255 * 32)

/* HKDF-Extract(salt, ikm) then HKDF-Expand(prk, info, out_len) into out.
 * salt NULL or empty means 32 zero bytes (RFC 5869 2.2); info may be NULL
 * when info_len is 0.  The intermediate key is wiped.
 * Returns 0, FA_ERR_INVAL (out NULL, out_len 0 or above
 * FA_HKDF_SHA256_MAX_OUT, ikm or info NULL with a length: out is then
 * untouched) or FA_ERR_CRYPTO (HMAC-SHA256 failed: out is then all zero,
 * never a partial key). */
int fa_hkdf_sha256(uint8_t *out, size_t out_len, const uint8_t *salt, size_t salt_len,
                   const uint8_t *ikm, size_t ikm_len, const uint8_t *info, size_t info_len);

#endif
