/* identity.h - a region's long-term Ed25519 identity key: generation, the
 * key-file formats, signing.  Pure functions over bytes: the file I/O is the
 * caller's (tools/cmd_keygen.c, the worker, the aggregator's config loader).
 *
 * PREFIX.key (secret, mode 0600), text:
 *     # fedagg region identity key (Ed25519). Keep private.
 *     # public key: <base64 of the 32-byte public key>
 *     fedagg-ed25519-secret-v1 <base64 of the 32-byte secret seed>
 * PREFIX.pub: the base64 of the 32-byte public key and a newline, the format
 * of config.proto Region.identity_public_key (a file of the 32 raw bytes is
 * also accepted by fa_identity_parse_public).
 */
#ifndef FA_CRYPTO_IDENTITY_H
#define FA_CRYPTO_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "crypto/secagg.h"

#define FA_IDENTITY_SEED_BYTES 32
#define FA_IDENTITY_PK_BYTES 32
#define FA_IDENTITY_SIG_BYTES 64
/* Room for fa_identity_format_secret's text, NUL included. */
#define FA_IDENTITY_SECRET_TEXT_MAX 256
/* Room for fa_identity_format_public's text, NUL included. */
#define FA_IDENTITY_PUBLIC_TEXT_MAX 48

/* A new key: 32 random bytes from rng (NULL: libsodium) as the seed.
 * Returns 0 or the rng's error. */
int fa_identity_generate(uint8_t seed[FA_IDENTITY_SEED_BYTES], uint8_t pk[FA_IDENTITY_PK_BYTES],
                         const fa_secagg_rng *rng);

/* The public key of a seed (RFC 8032 5.1.5).  Returns 0 or FA_ERR_CRYPTO. */
int fa_identity_public_key(const uint8_t seed[FA_IDENTITY_SEED_BYTES],
                           uint8_t pk[FA_IDENTITY_PK_BYTES]);

/* The PREFIX.key text of a seed into out[FA_IDENTITY_SECRET_TEXT_MAX]
 * (NUL-terminated; it holds the secret: wipe it after use).  *len gets its
 * length.  Returns 0 or FA_ERR_CRYPTO. */
int fa_identity_format_secret(const uint8_t seed[FA_IDENTITY_SEED_BYTES], char *out, size_t *len);

/* Parses a PREFIX.key text (comments and blank lines allowed, one key line).
 * Returns 0 or FA_ERR_PARSE with the line at fault. */
int fa_identity_parse_secret(const uint8_t *text, size_t len, uint8_t seed[FA_IDENTITY_SEED_BYTES],
                             fa_error *err);

/* The PREFIX.pub text (base64 and a newline) into out[FA_IDENTITY_PUBLIC_TEXT_MAX]. */
void fa_identity_format_public(const uint8_t pk[FA_IDENTITY_PK_BYTES], char *out, size_t *len);

/* Parses a public key: base64 text (surrounding white space allowed) or
 * exactly 32 raw bytes.  Returns 0 or FA_ERR_PARSE. */
int fa_identity_parse_public(const uint8_t *data, size_t len, uint8_t pk[FA_IDENTITY_PK_BYTES],
                             fa_error *err);

/* Ed25519 detached signature of msg.  Returns 0 or FA_ERR_CRYPTO. */
int fa_identity_sign(const uint8_t seed[FA_IDENTITY_SEED_BYTES], const uint8_t *msg, size_t len,
                     uint8_t sig[FA_IDENTITY_SIG_BYTES]);

/* Returns 0 when sig is pk's signature of msg, FA_ERR_VERIFY otherwise. */
int fa_identity_verify(const uint8_t pk[FA_IDENTITY_PK_BYTES], const uint8_t *msg, size_t len,
                       const uint8_t sig[FA_IDENTITY_SIG_BYTES]);

/* Domain-separated statements (e.g. a region's federated-evaluation report,
 * fedagg.proto SignedEval): the signature covers domain || 0x00 || msg, so a
 * signature made for one kind of statement never verifies as another. */
#define FA_IDENTITY_DOMAIN_EVAL "fedagg-eval-v1"
/* A region's per-round privacy statement (fedagg.proto SignedPrivacy). */
#define FA_IDENTITY_DOMAIN_PRIVACY "fedagg-privacy-v1"
/* A region's accept or refuse of a federation's offer (fedagg.proto
 * SignedDecision, docs/service.md). */
#define FA_IDENTITY_DOMAIN_DECISION "fedagg-decision-v1"
/* A region's data statement of a round attempt (fedagg.proto
 * SignedDataStatement: its dataset and trainer by digest). */
#define FA_IDENTITY_DOMAIN_DATA "fedagg-data-v1"

/* Signs domain || 0x00 || msg.  Returns 0, FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_identity_sign_statement(const uint8_t seed[FA_IDENTITY_SEED_BYTES], const char *domain,
                               const uint8_t *msg, size_t len, uint8_t sig[FA_IDENTITY_SIG_BYTES]);

/* Returns 0 when sig is pk's signature of domain || 0x00 || msg,
 * FA_ERR_VERIFY otherwise (FA_ERR_NOMEM when out of memory). */
int fa_identity_verify_statement(const uint8_t pk[FA_IDENTITY_PK_BYTES], const char *domain,
                                 const uint8_t *msg, size_t len,
                                 const uint8_t sig[FA_IDENTITY_SIG_BYTES]);

#endif
