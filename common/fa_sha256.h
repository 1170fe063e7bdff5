/* fa_sha256.h - SHA-256 (FIPS 180-4), one-shot and incremental.
 *
 * The one SHA-256 of the tree: OpenSSL's EVP underneath (about six times
 * faster than libsodium's portable code on the x86 machines we run on,
 * since it uses the SHA extensions).  Every failure of the library is
 * returned as FA_ERR_CRYPTO and the output is then left untouched: a digest
 * of zeros is never passed off as a hash.
 */
#ifndef FA_SHA256_H
#define FA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define FA_SHA256_BYTES 32

/* out = SHA-256(data[0..len)).  data may be NULL when len is 0.
 * Returns 0, or FA_ERR_INVAL (out NULL, or data NULL with len > 0),
 * FA_ERR_CRYPTO (OpenSSL failed; out untouched). */
int fa_sha256(uint8_t out[FA_SHA256_BYTES], const void *data, size_t len);

struct evp_md_ctx_st;

/* An incremental hash, embedded by its owner:
 *
 *   fa_sha256_ctx h;
 *   fa_sha256_init(&h);            // or check its return at once
 *   fa_sha256_update(&h, a, alen);
 *   fa_sha256_update(&h, b, blen);
 *   rc = fa_sha256_final(&h, out); // reports any failure since init
 *   fa_sha256_free(&h);
 *
 * A failure is sticky: after one, update and final return FA_ERR_CRYPTO
 * (final without writing out) until the next init, so a caller may check
 * only final's return. */
typedef struct fa_sha256_ctx {
    struct evp_md_ctx_st *md; /* owned; NULL before init and after free */
    int failed;               /* 0, or the first error since init */
} fa_sha256_ctx;

/* Starts a new hash in c (reusing its OpenSSL context when it has one).
 * c need not have been initialised before, except that a c holding a
 * context must be passed to fa_sha256_free first or re-initialised.
 * Returns 0, or FA_ERR_INVAL (c NULL), FA_ERR_NOMEM, FA_ERR_CRYPTO. */
int fa_sha256_init(fa_sha256_ctx *c);

/* Hashes data[0..len) into c.  Returns 0, or FA_ERR_INVAL (data NULL with
 * len > 0: also made sticky), FA_ERR_STATE (not initialised, or after
 * final), or the sticky error. */
int fa_sha256_update(fa_sha256_ctx *c, const void *data, size_t len);

/* Writes the digest to out and ends the hash (init starts another).
 * Returns 0, or the sticky error / FA_ERR_CRYPTO / FA_ERR_STATE, in which
 * case out is untouched. */
int fa_sha256_final(fa_sha256_ctx *c, uint8_t out[FA_SHA256_BYTES]);

/* Frees c's OpenSSL context; c may then be init'ed again.  NULL and a
 * zeroed c are no-ops. */
void fa_sha256_free(fa_sha256_ctx *c);

#endif
