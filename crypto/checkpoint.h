/* checkpoint.h - the signed statements of the audit log (docs/architecture.md, The audit log):
 *
 *  - C2SP signed notes (https://c2sp.org/signed-note) with Ed25519 keys, as
 *    golang.org/x/mod/sumdb/note writes and reads them:
 *        <text ending in \n>
 *        \n
 *        — <key name> <base64(key id (4 bytes, big-endian) || signature)>\n
 *    key id = SHA-256(key name || 0x0A || 0x01 || public key)[0:4], the
 *    signature covers the text including its final newline.
 *  - C2SP checkpoints (https://c2sp.org/tlog-checkpoint): a note whose text is
 *    "<origin>\n<tree size>\n<base64 root hash>\n".  Our key name is the origin.
 *  - Proof bundles: one text file holding an audit record, its inclusion proof
 *    and the checkpoint it is proven against (`fedagg audit prove`), which a
 *    region checks offline (`fedagg audit check-proof`).
 *
 * One file each: note.c (fa_note_*), checkpoint.c (fa_checkpoint_*),
 * proof_bundle.c (fa_proof_bundle_*).  A region's upload commitment, also
 * recorded in the audit log, is crypto/secagg.h's fa_secagg_commitment_*.
 *
 * Pure code: parsing and formatting of bytes, Ed25519 by libsodium; no I/O.
 * Secret keys live in sodium_malloc'ed memory and are wiped on every path.
 */
#ifndef FA_CHECKPOINT_H
#define FA_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "crypto/merkle.h"

#define FA_ED25519_PK_LEN 32
#define FA_ED25519_SEED_LEN 32
#define FA_ED25519_SK_LEN 64 /* libsodium layout: seed || public key */
#define FA_ED25519_SIG_LEN 64
#define FA_NOTE_NAME_MAX 255       /* longest key name / origin we accept, bytes */
#define FA_NOTE_MAX_LEN (1u << 20) /* largest note we parse */
#define FA_NOTE_MAX_SIGNATURES 100 /* as golang.org/x/mod/sumdb/note */

/* ---------------------------------------------------------------------------
 * Keys
 * ------------------------------------------------------------------------- */

/* Key id of an Ed25519 key under a name: the first 4 bytes, big-endian, of
 * SHA-256(name || 0x0A || 0x01 || pk). */
uint32_t fa_note_key_id(const char *name, const uint8_t pk[FA_ED25519_PK_LEN]);

/* Whether name is a valid key name: 1..FA_NOTE_NAME_MAX bytes of UTF-8 with
 * no space, no control character and no '+'. */
int fa_note_name_valid(const char *name);

/* A signing key with its name.  Opaque; the secret is in sodium_malloc'ed memory. */
typedef struct fa_note_signer fa_note_signer;

/* Makes a signer from key material: a 32-byte Ed25519 seed or a 64-byte
 * libsodium secret key (seed || public key; the public half is checked).
 * Returns 0, FA_ERR_INVAL (bad name, length or inconsistent key) or FA_ERR_NOMEM. */
int fa_note_signer_new(fa_note_signer **out, const char *name, const uint8_t *key, size_t key_len,
                       fa_error *err);

/* Makes a signer from the bytes of a key file, any of:
 *   - a `fedagg keygen` PREFIX.key file (crypto/identity.h);
 *   - 32 raw bytes (seed) or 64 raw bytes (libsodium secret key);
 *   - the same as base64 or hex text (surrounding whitespace ignored);
 *   - a Go sumdb/note signer key "PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>"
 *     (its id is checked; its name is used when name is NULL or empty).
 * name (the origin) is required for the other forms.  The input is not
 * modified; callers wipe it.  Returns 0, FA_ERR_PARSE, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_note_signer_parse(fa_note_signer **out, const char *name, const uint8_t *data, size_t len,
                         fa_error *err);

/* Wipes and frees.  NULL is a no-op. */
void fa_note_signer_del(fa_note_signer *s);

const char *fa_note_signer_name(const fa_note_signer *s);
const uint8_t *fa_note_signer_public_key(const fa_note_signer *s);
uint32_t fa_note_signer_key_id(const fa_note_signer *s);

/* A public key that verifies notes.  When name is empty, a signature line of
 * any name whose key id matches fa_note_key_id(that name, pk) is this key's. */
typedef struct fa_note_verifier {
    char name[FA_NOTE_NAME_MAX + 1];
    uint8_t pk[FA_ED25519_PK_LEN];
} fa_note_verifier;

/* Parses public key bytes: 32 raw bytes, base64 or hex of them, or a Go
 * sumdb/note verifier key "<name>+<hex id>+<base64(0x01 || pk)>" (sets the
 * name; the id is checked).  Returns 0 or FA_ERR_PARSE. */
int fa_note_verifier_parse(fa_note_verifier *out, const uint8_t *data, size_t len, fa_error *err);

/* Writes the Go sumdb/note verifier key "<name>+<8 hex id>+<base64(0x01||pk)>"
 * into buf.  Returns 0, FA_ERR_INVAL (bad name) or FA_ERR_TOOBIG. */
int fa_note_vkey_format(const char *name, const uint8_t pk[FA_ED25519_PK_LEN], char *buf,
                        size_t cap, fa_error *err);

/* ---------------------------------------------------------------------------
 * Signed notes
 * ------------------------------------------------------------------------- */

/* Signs text (which must end in '\n', be valid UTF-8 without control
 * characters other than '\n', and contain no blank line) and returns the
 * signed note, malloc'ed and NUL-terminated, in *out (*out_len without the
 * NUL).  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_note_sign(const fa_note_signer *s, const char *text, size_t text_len, char **out,
                 size_t *out_len, fa_error *err);

/* Parses a signed note and verifies it with v: the note must be well formed
 * (as golang.org/x/mod/sumdb/note Open requires), carry a signature line of
 * v's key, and that signature must verify.  Lines of other keys (witness
 * cosignatures) are ignored.  On success *text_len is the length of the
 * signed text (from the start of msg, including its final newline).
 * Returns 0, FA_ERR_PARSE (malformed), FA_ERR_NOTFOUND (no signature by
 * this key) or FA_ERR_VERIFY (bad signature). */
int fa_note_open(const char *msg, size_t len, const fa_note_verifier *v, size_t *text_len,
                 fa_error *err);

/* ---------------------------------------------------------------------------
 * Checkpoints
 * ------------------------------------------------------------------------- */

typedef struct fa_checkpoint {
    char origin[FA_NOTE_NAME_MAX + 1];
    uint64_t size;                    /* tree size */
    uint8_t root[FA_MERKLE_HASH_LEN]; /* MTH of the first `size` records */
} fa_checkpoint;

/* Signs the checkpoint (origin, size, root) with s; the note is malloc'ed
 * into *out.  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_checkpoint_sign(const fa_note_signer *s, const fa_checkpoint *cp, char **out,
                       size_t *out_len, fa_error *err);

/* Parses the body of a checkpoint note WITHOUT checking its signature (to
 * show it, or to find its origin).  Extension lines are accepted and
 * ignored.  Returns 0 or FA_ERR_PARSE. */
int fa_checkpoint_parse(const char *note, size_t len, fa_checkpoint *out, fa_error *err);

/* fa_note_open + fa_checkpoint_parse: a checkpoint signed by v.  When v has
 * no name, the signature line must carry the checkpoint's origin as its key
 * name.  Returns 0, FA_ERR_PARSE, FA_ERR_NOTFOUND or FA_ERR_VERIFY. */
int fa_checkpoint_open(const char *note, size_t len, const fa_note_verifier *v, fa_checkpoint *out,
                       fa_error *err);

/* A consistency proof (RFC 9162 2.1.4) between the trees of old_size and
 * size records, as text: what GET /v1/audit/consistency serves, and what a
 * region checks before it trusts a larger checkpoint than the one it holds.
 *
 *   fedagg-audit-consistency v1
 *   old <old_size>
 *   size <size>
 *   hash <base64 of a proof hash>        (0..FA_MERKLE_MAX_PROOF lines, RFC 9162 order)
 *
 * fa_checkpoint_consistency_format writes the n hashes of proof (n *
 * FA_MERKLE_HASH_LEN bytes) so, into *text (malloc'ed, NUL-terminated; *len
 * without the NUL).  Returns 0, FA_ERR_INVAL (n > FA_MERKLE_MAX_PROOF) or
 * FA_ERR_NOMEM. */
int fa_checkpoint_consistency_format(uint64_t old_size, uint64_t size, const uint8_t *proof,
                                     size_t n, char **text, size_t *len, fa_error *err);

/* Parses such text (len bytes, from a peer: any bytes) into proof (room for
 * FA_MERKLE_MAX_PROOF hashes) and *n, the hashes it holds; a final empty
 * line is allowed.  Checking the proof is fa_merkle_verify_consistency's.
 * Returns 0, FA_ERR_PARSE (malformed: the message names the line) or
 * FA_ERR_RANGE (a proof between other sizes than old_size and size: the
 * message names both). */
int fa_checkpoint_consistency_parse(const char *text, size_t len, uint64_t old_size, uint64_t size,
                                    uint8_t *proof, size_t *n, fa_error *err);

/* ---------------------------------------------------------------------------
 * Proof bundles
 *
 *   fedagg-audit-proof v1
 *   index <leaf index>
 *   record <base64 of the record's protobuf bytes>
 *   hash <base64 of an inclusion proof hash>        (0..64 lines, leaf upwards)
 *   <blank line>
 *   <the checkpoint note, verbatim>
 * ------------------------------------------------------------------------- */

#define FA_PROOF_BUNDLE_MAX_RECORD (1u << 20)

typedef struct fa_proof_bundle {
    uint64_t index;
    uint8_t *record; /* malloc'ed */
    size_t record_len;
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN]; /* (proof_len, 32) */
    size_t proof_len;
    char *checkpoint; /* malloc'ed, NUL-terminated */
    size_t checkpoint_len;
} fa_proof_bundle;

/* Formats b as text, malloc'ed and NUL-terminated, into *out.  Returns 0,
 * FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_proof_bundle_format(const fa_proof_bundle *b, char **out, size_t *out_len, fa_error *err);

/* Parses a bundle (no verification) into b, which the caller frees with
 * fa_proof_bundle_free even on failure.  Returns 0, FA_ERR_PARSE,
 * FA_ERR_TOOBIG or FA_ERR_NOMEM. */
int fa_proof_bundle_parse(const char *data, size_t len, fa_proof_bundle *b, fa_error *err);

/* Verifies that the checkpoint is signed by v and that the record is leaf
 * `index` of the checkpoint's tree.  Fills *cp.  Returns 0, FA_ERR_PARSE,
 * FA_ERR_NOTFOUND or FA_ERR_VERIFY. */
int fa_proof_bundle_verify(const fa_proof_bundle *b, const fa_note_verifier *v, fa_checkpoint *cp,
                           fa_error *err);

void fa_proof_bundle_free(fa_proof_bundle *b);

#endif
