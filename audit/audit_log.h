/* audit_log.h - the aggregator's append-only, verifiable audit log (docs/architecture.md).
 *
 * One record (proto/audit.proto AuditRecord) per aggregation.  Three files:
 *
 *   LOG              "fedagg-audit" u32 version (16 bytes), then frames
 *                      u32 length | record (protobuf) | u32 CRC-32 of (length | record)
 *                    (big-endian).  Record i is leaf i of an RFC 9162 Merkle tree.
 *   LOG.checkpoints  "fedagg-ckpts" u32 version, then frames of the same shape
 *                    holding every C2SP checkpoint the aggregator signed, in
 *                    order: one after each append (tree size = records so far).
 *   LOG.tree         "fedagg-tree\0" u32 version, then the 32-byte hashes of the
 *                    perfect subtrees in post-order (crypto/merkle.h
 *                    fa_merkle_node_pos), so that an append writes O(1)
 *                    amortised nodes and a proof reads O(log n).  Derived data:
 *                    recomputed and checked on every open, rebuilt when stale.
 *
 * Commit protocol of an append: write the record frame, fsync the log, write
 * the new nodes, sign the checkpoint of the new tree, write its frame, fsync
 * the checkpoints file.  A record is committed once its checkpoint is on disk.
 * On open a torn last frame of either file (a crash mid-write) is reported
 * and cut off; a complete record after the last checkpoint (a crash between
 * the two writes) is kept and a checkpoint is signed for it.  Anything
 * else that does not check out (a checksum, a committed record missing, a
 * root that does not match the latest checkpoint) makes open fail with
 * FA_ERR_CORRUPT naming the record; nothing is silently accepted.
 *
 * Record rules (checked on append and by fa_audit_verify): version 1; a
 * federation id; (round, attempt) strictly increasing along the log; digests
 * of 32 bytes; participants and dropped sorted, unique and disjoint; one
 * commitment per participant in the same order, each with a 32-byte upload
 * hash and a 64-byte signature (or none, for a region that dropped out after
 * uploading, before it signed); the previous model (version, digest) of a
 * record equal to the new model of the record before it.
 *
 * A fa_audit_log is safe to use from several threads (one mutex).  Only one
 * process may open a log for writing (flock).
 */
#ifndef FA_AUDIT_LOG_H
#define FA_AUDIT_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "audit.pb-c.h"
#include "common/fa_err.h"
#include "crypto/checkpoint.h"
#include "crypto/merkle.h"

#define FA_AUDIT_MAX_RECORD (1u << 20) /* largest record, bytes */

typedef struct fa_audit_log fa_audit_log;

/* fa_audit_log_open flags */
#define FA_AUDIT_LOG_NOSYNC 0x1u /* no fsync: tests, benchmarks, bulk imports */
/* Sign every complete record found after the latest checkpoint, not only the
 * single one a crash during one append can leave: for resuming a bulk import
 * (fa_audit_log_append_encoded of many records) that was interrupted.  Without
 * it, more than one unsigned record makes open fail: that is what removing
 * checkpoints would look like, and the aggregator must not sign records it
 * did not just write. */
#define FA_AUDIT_LOG_RESIGN_TAIL 0x2u

/* What open found and repaired (all zero for a clean log). */
typedef struct fa_audit_open_report {
    uint64_t records;        /* records in the log after open */
    uint64_t torn_log_bytes; /* bytes of a torn last record cut off (read-only: found) */
    uint64_t torn_checkpoint_bytes;
    uint64_t unsigned_records; /* records after the last checkpoint (writer: now signed) */
    int tree_rebuilt;          /* LOG.tree was missing or stale and was rebuilt */
    int created;               /* a new, empty log was created */
} fa_audit_open_report;

/* Opens (creating when absent) the log at path for appending, signing
 * checkpoints with signer (borrowed: it must outlive the log) under origin
 * (the checkpoints' first line and key name; when NULL the signer's name).
 * Recovers from a crash as described above; report (may be NULL) says what
 * was done.  Returns 0, or FA_ERR_IO, FA_ERR_NOMEM, FA_ERR_STATE (another
 * process has the log open for writing), FA_ERR_INVAL (origin differs from
 * the log's), FA_ERR_VERIFY (latest checkpoint not signed by this key) or
 * FA_ERR_CORRUPT (with the record index in the message). */
int fa_audit_log_open(fa_audit_log **out, const char *path, const fa_note_signer *signer,
                      const char *origin, unsigned flags, fa_audit_open_report *report,
                      fa_error *err);

/* Opens an existing log read-only: nothing on disk is changed; torn tails and
 * unsigned records are only reported; a stale tree is rebuilt in memory.
 * When v is not NULL the latest checkpoint's signature is checked.  Returns
 * the codes of fa_audit_log_open, and FA_ERR_NOTFOUND when there is no log. */
int fa_audit_log_open_readonly(fa_audit_log **out, const char *path, const fa_note_verifier *v,
                               fa_audit_open_report *report, fa_error *err);

/* Closes the files and frees.  NULL is a no-op. */
void fa_audit_log_close(fa_audit_log *log);

/* What an append returns: the record's leaf index, the new tree, its signed
 * checkpoint and the record's inclusion proof in that tree. */
typedef struct fa_audit_append_result {
    uint64_t index;
    uint64_t tree_size;
    uint8_t root[FA_MERKLE_HASH_LEN];
    char *checkpoint; /* malloc'ed signed note, NUL-terminated */
    size_t checkpoint_len;
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN]; /* (proof_len, 32) */
    size_t proof_len;
} fa_audit_append_result;

void fa_audit_append_result_free(fa_audit_append_result *res);

/* Appends one record and commits it (see the protocol above); res (may be
 * NULL) receives the result, which the caller frees.  On failure nothing is
 * left on disk.  Returns 0, FA_ERR_INVAL (a record rule broken: the message
 * says which), FA_ERR_TOOBIG, FA_ERR_STATE (read-only log, or a previous
 * failure could not be undone), FA_ERR_CORRUPT (the files were damaged
 * while open: fa_audit_log_check), FA_ERR_IO or FA_ERR_NOMEM. */
int fa_audit_log_append(fa_audit_log *log, const Fedagg__AuditRecord *rec,
                        fa_audit_append_result *res, fa_error *err);

/* The same for records already encoded, n of them committed together under
 * one checkpoint and one fsync of each file.  Each is decoded once and held to
 * the record rules before anything is written, and its bytes are stored as
 * given (the leaf hash covers them): the aggregator appends the bytes it built
 * (aggregator/fed_record.c), bulk imports and benchmarks many at once.  res
 * describes the last one. */
int fa_audit_log_append_encoded(fa_audit_log *log, const uint8_t *const *recs, const size_t *lens,
                                size_t n, fa_audit_append_result *res, fa_error *err);

/* Damage while the log is open: the files cut short, overwritten or
 * appended to by something else.  fa_audit_log_check compares, cheaply
 * (two fstat and two 16-byte reads), each file's size and header with what
 * this process wrote; every append runs it first, and a read that finds a
 * file ending early or a checksum wrong counts too (FA_ERR_CORRUPT, never
 * "read: Success").  Once damaged, the log refuses every append with
 * FA_ERR_CORRUPT: the aggregator stops opening rounds, and an operator
 * recovers with `fedagg audit repair` (fa_audit_log_repair).
 * fa_audit_log_check returns 0, FA_ERR_CORRUPT or FA_ERR_IO (fstat);
 * fa_audit_log_damaged says whether damage was found, and why (the first
 * finding, into why[0..n)). */
int fa_audit_log_check(fa_audit_log *log, fa_error *err);
int fa_audit_log_damaged(fa_audit_log *log, char *why, size_t n);

/* What fa_audit_log_repair found and did. */
typedef struct fa_audit_repair_report {
    int intact;                 /* the log opens as it is: nothing was done */
    char damage[512];           /* why it did not open */
    uint64_t records_found;     /* whole records with good checksums, from the start */
    uint64_t checkpoints_found; /* whole checkpoint frames, from the start */
    uint64_t records_kept;      /* the records the kept checkpoint signs */
    uint64_t records_signed;    /* (the same: every kept record is signed) */
    uint64_t checkpoints_kept;
    char suffix[32]; /* ".damaged-<unix time>": where the old files are */
    int moved;       /* how many of the three files were kept so */
} fa_audit_repair_report;

/* Recovers a log that no longer opens (a file cut short, a damaged frame,
 * checkpoints removed) to its last signed checkpoint that the records left
 * still match: the records it signs and the checkpoints up to it are kept,
 * byte for byte; what follows is not.  Nothing is deleted: LOG,
 * LOG.checkpoints and LOG.tree stay, as they were, under the names
 * LOG<suffix> (".damaged-<unix time>"), and the repaired files take the
 * original names atomically (a crash leaves the old or the new file under
 * each name).  Only checkpoints that v verifies are kept.  A log that opens
 * is left alone (rep->intact).  With dry_run nothing is written: rep says
 * what would be kept.  Not while an aggregator has the log open.  Returns
 * 0, FA_ERR_INVAL (v NULL), FA_ERR_NOTFOUND (no log), FA_ERR_CORRUPT
 * (nothing can be kept: no checkpoint by v matches the records), FA_ERR_IO,
 * FA_ERR_NOMEM, or an error of opening the log other than damage. */
int fa_audit_log_repair(const char *path, const fa_note_verifier *v, int dry_run,
                        fa_audit_repair_report *rep, fa_error *err);

/* Records in the log, and how many of them the latest checkpoint covers. */
uint64_t fa_audit_log_size(fa_audit_log *log);
uint64_t fa_audit_log_signed_size(fa_audit_log *log);

/* The latest signed checkpoint (malloc'ed into *note).  Returns 0,
 * FA_ERR_NOTFOUND (none yet), FA_ERR_IO or FA_ERR_NOMEM. */
int fa_audit_log_checkpoint(fa_audit_log *log, char **note, size_t *len, fa_error *err);

/* The encoded record at index (malloc'ed into *rec), its checksum checked.
 * Returns 0, FA_ERR_RANGE, FA_ERR_CORRUPT, FA_ERR_IO or FA_ERR_NOMEM. */
int fa_audit_log_read(fa_audit_log *log, uint64_t index, uint8_t **rec, size_t *len, fa_error *err);

/* The index of the latest record of `round` in which `region` took part (as a
 * participant, or as a dropped region).  Records are in round order, so this
 * decodes O(log n) records.  Returns 0 or FA_ERR_NOTFOUND. */
int fa_audit_log_find(fa_audit_log *log, uint64_t round, const char *region, uint64_t *index,
                      fa_error *err);

/* Root of the tree of the first `size` records.  Returns 0 or FA_ERR_RANGE. */
int fa_audit_log_root(fa_audit_log *log, uint64_t size, uint8_t root[FA_MERKLE_HASH_LEN],
                      fa_error *err);

/* Inclusion proof of record index in the tree of `size` records, and
 * consistency proof between the trees of old_size and size records, into
 * proof (room for FA_MERKLE_MAX_PROOF hashes).  Return 0, FA_ERR_RANGE
 * (beyond the log), FA_ERR_IO. */
int fa_audit_log_inclusion_proof(fa_audit_log *log, uint64_t index, uint64_t size, uint8_t *proof,
                                 size_t *len, fa_error *err);
int fa_audit_log_consistency_proof(fa_audit_log *log, uint64_t old_size, uint64_t size,
                                   uint8_t *proof, size_t *len, fa_error *err);

/* A proof bundle (crypto/checkpoint.h) for record index against the latest
 * checkpoint, formatted as text (malloc'ed).  Returns 0, FA_ERR_RANGE (the
 * record is not covered by a checkpoint yet) or the errors above. */
int fa_audit_log_prove(fa_audit_log *log, uint64_t index, char **bundle, size_t *len,
                       fa_error *err);

/* The index of the last signed record whose new model is `version` (the
 * aggregation that made it, or an operator's action after it, which keeps
 * it): what a region proves the model it downloaded against.  Versions
 * never decrease along the log, so this decodes O(log n) records.  Returns
 * 0, FA_ERR_NOTFOUND (no signed record of that version: version 0 in an
 * empty log, a version not recorded yet) or FA_ERR_CORRUPT. */
int fa_audit_log_find_version(fa_audit_log *log, uint64_t version, uint64_t *index, fa_error *err);

/* The consistency proof (RFC 9162 2.1.4) between the trees of old_size and
 * size records, size at most the latest checkpoint's (UINT64_MAX: that
 * one), as text (malloc'ed, NUL-terminated):
 *
 *   fedagg-audit-consistency v1
 *   old <old_size>
 *   size <size>
 *   hash <base64 of a proof hash>        (0..64 lines, RFC 9162 order)
 *
 * so that a region holding the checkpoint of old_size can check that the
 * log only grew (worker/round_client.h).  The text is
 * crypto/checkpoint.h's fa_checkpoint_consistency_format, which the region
 * reads with fa_checkpoint_consistency_parse.  Returns 0, FA_ERR_RANGE
 * (old_size > size, or size beyond the latest checkpoint), FA_ERR_IO or
 * FA_ERR_NOMEM. */
int fa_audit_log_prove_consistency(fa_audit_log *log, uint64_t old_size, uint64_t size, char **text,
                                   size_t *len, fa_error *err);

/* Checks one decoded record against the record rules that need no other
 * record.  Returns 0, or FA_ERR_INVAL with what is wrong in why. */
int fa_audit_record_check(const Fedagg__AuditRecord *rec, char *why, size_t why_len);

/* 1 when the record is an action between aggregations rather than one: an
 * operator's (admin), a region's decision, a service log's lifecycle
 * record, or a governance record (audit/audit_gov.h: a promotion decision,
 * a rollback, a channel move).  Such records carry no participants and may
 * share the (round, attempt) of the record before them. */
int fa_audit_record_is_action(const Fedagg__AuditRecord *rec);

/* ---------------------------------------------------------------------------
 * Full verification (fedagg audit verify): reads the three files without
 * changing them and checks every frame and checksum, every record against
 * the record rules, every region commitment signature whose region key is
 * given, every checkpoint's signature, and every checkpoint's root against
 * the tree recomputed from the records.
 * ------------------------------------------------------------------------- */

typedef struct fa_audit_region_key {
    const char *region;
    uint8_t pk[FA_ED25519_PK_LEN];
} fa_audit_region_key;

enum { FA_AUDIT_NOTE = 0, FA_AUDIT_PROBLEM = 1 };

/* The key of region among keys, or NULL (a NULL region included). */
const uint8_t *fa_audit_region_key_find(const fa_audit_region_key *keys, size_t n,
                                        const char *region);

/* The hash of commitment c's upload_digest: crypto/secagg.h's
 * FA_SECAGG_UPLOAD_BLAKE3 or FA_SECAGG_UPLOAD_SHA256 (records made before
 * secagg.proto version 4), or -1 for a value this fedagg does not know; and
 * its name for people ("blake3", "sha256", "unknown"). */
int fa_audit_upload_alg(const Fedagg__RegionCommitment *c);
const char *fa_audit_upload_alg_name(const Fedagg__RegionCommitment *c);

/* The signature of a region's upload commitment c of record r, checked with
 * the region's identity key pk (crypto/secagg.h fa_secagg_commitment_verify
 * over federation, round, attempt, region and upload digest, labelled by
 * its hash): the one check
 * behind fedagg audit verify and audit check-proof.  Returns 0 (it
 * verifies), FA_ERR_NOTFOUND (unsigned: the region dropped out after
 * uploading, before the consistency check) or FA_ERR_VERIFY (it does not
 * verify, or the hash or signature has the wrong length). */
int fa_audit_commitment_check(const Fedagg__AuditRecord *r, const Fedagg__RegionCommitment *c,
                              const uint8_t pk[FA_ED25519_PK_LEN]);

typedef struct fa_audit_verify_opts {
    const fa_note_verifier *key;            /* the aggregator's key; required */
    const fa_audit_region_key *region_keys; /* may be NULL */
    size_t nregion_keys;
    /* Called for every finding: FA_AUDIT_PROBLEM (verification fails) or
     * FA_AUDIT_NOTE (worth saying, not a failure); index is the record at
     * fault, -1 for the file as a whole.  May be NULL. */
    void (*report)(void *ctx, int severity, int64_t index, const char *msg);
    void *report_ctx;
} fa_audit_verify_opts;

typedef struct fa_audit_verify_result {
    uint64_t records;           /* records read */
    uint64_t checkpoints;       /* checkpoints read */
    uint64_t signed_size;       /* tree size of the latest valid checkpoint */
    uint64_t region_signatures; /* region commitment signatures verified */
    uint64_t eval_signatures;   /* federated-evaluation statements verified */
    uint64_t privacy_signatures; /* privacy statements verified */
    uint64_t data_signatures;    /* data statements verified (audit/audit_gov.h) */
    uint64_t decisions;          /* promotion decisions recomputed */
    uint64_t region_unknown;    /* commitments of regions with no key given */
    uint64_t problems;
    int64_t first_bad; /* lowest record index at fault; -1 for the file
                          header; INT64_MAX when all is well */
    char origin[FA_NOTE_NAME_MAX + 1];
    uint8_t root[FA_MERKLE_HASH_LEN]; /* root of the latest valid checkpoint */
} fa_audit_verify_result;

/* Returns 0 when everything verifies, FA_ERR_VERIFY when a problem was found
 * (err holds the first one, res->first_bad its record), FA_ERR_NOTFOUND,
 * FA_ERR_IO or FA_ERR_NOMEM when the log cannot be read at all. */
int fa_audit_verify(const char *path, const fa_audit_verify_opts *opts, fa_audit_verify_result *res,
                    fa_error *err);

#endif
