/* kdf_internal.h - key derivation with domain separation (internal to crypto/).
 *
 * The one way every secure-aggregation key is derived from a secret, with
 * HKDF-SHA256 (common/fa_hkdf.h): the HKDF info names the purpose, the
 * federation, the round, the attempt and the one or two client ids in
 * canonical (bytewise sorted) order, so that no key is ever valid for
 * another purpose, federation, round, attempt or pair of clients.
 */
#ifndef FA_CRYPTO_KDF_INTERNAL_H
#define FA_CRYPTO_KDF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_hkdf.h" /* fa_hkdf_sha256 */

/* Purposes (they are part of every derived key's HKDF info). */
#define FA_KDF_PAIR_MASK "pair-mask"         /* s_uv -> AES-128 key of the pairwise mask */
#define FA_KDF_SHARE_ENC "share-enc"         /* c agreement -> XChaCha20-Poly1305 key */
#define FA_KDF_SELF_MASK "self-mask"         /* b_u -> AES-128 key of the self mask */
#define FA_KDF_ROUNDING "rounding"           /* rounding seed -> AES-128 key */
#define FA_KDF_CLIENT_STATE "client-state"   /* identity seed -> saved-state key */
#define FA_KDF_INPUT_BINDING "input-binding" /* rounding seed -> Poly1305 key of the input */

/* HKDF-SHA256 with salt "fedagg/secagg/v1" and info
 *   "fedagg/secagg/v1" || lp(purpose) || lp(federation) || u64 round ||
 *   u32 attempt || lp(min(id_a, id_b)) || lp(max(id_a, id_b))
 * (lp = u32 little-endian length prefix; id_b may be NULL for a key of one
 * client).  Returns 0, or fa_hkdf_sha256's errors, or FA_ERR_NOMEM (the
 * info string could not be built); out is then all zero. */
int fa_kdf_derive(uint8_t *out, size_t out_len, const uint8_t *ikm, size_t ikm_len,
                  const char *purpose, const char *federation, uint64_t round, uint32_t attempt,
                  const char *id_a, const char *id_b);

#endif
