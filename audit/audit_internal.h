/* audit_internal.h - what the files of the audit log share: the file
 * layout (audit_log.h), struct fa_audit_log, the frame codec and reader,
 * the record rules' ordering check.  Nothing outside audit/ includes it. */
#ifndef FA_AUDIT_INTERNAL_H
#define FA_AUDIT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/audit_log.h"
#include "crypto/identity.h"

#define FA_AUDIT_HLEN FA_MERKLE_HASH_LEN
#define FA_AUDIT_HDR_LEN 16
#define FA_AUDIT_FORMAT_VERSION 1
#define FA_AUDIT_FRAME_OVERHEAD 8
#define FA_AUDIT_MAX_NOTE (64u * 1024) /* largest checkpoint frame we write or read */

/* The 12-byte magics of LOG, LOG.checkpoints and LOG.tree. */
extern const char fa_audit_log_magic[12];
extern const char fa_audit_ckpt_magic[12];
extern const char fa_audit_tree_magic[12];

struct fa_audit_log {
    pthread_mutex_t mu;
    char *path, *ckpt_path, *tree_path;
    int fd, ckpt_fd, tree_fd;
    int readonly, nosync, broken;
    /* The files are not what this process wrote (fa_audit_log_check, or a
     * read that found a file cut short): appends are refused from then on. */
    int damaged;
    char damage[512];
    const fa_note_signer *signer;
    char origin[FA_NOTE_NAME_MAX + 1];

    uint64_t n;    /* records */
    uint64_t *off; /* (n) frame offsets in the log */
    size_t off_cap;
    uint64_t log_end; /* byte offsets where the next frame goes */
    uint64_t ckpt_end;
    fa_merkle_frontier fr;

    /* Nodes at positions >= mem_base live in mem (read-only open with a
     * stale tree file); below it, in the tree file. */
    uint8_t *mem;
    uint64_t mem_base, mem_count, mem_cap;

    char *latest; /* latest checkpoint note */
    size_t latest_len;
    uint64_t signed_size;
    uint8_t latest_root[FA_AUDIT_HLEN];

    /* The last record, for the ordering and model-chain rules. */
    int have_last, last_admin;
    uint64_t last_round, last_new_version;
    uint32_t last_attempt;
    uint8_t last_new_model[FA_AUDIT_HLEN];
};

/* The sequential frame reader (audit_frame.c). */
struct fa_audit_rd {
    int fd;
    uint8_t *buf;
    size_t cap, pos, len; /* valid bytes buf[pos .. pos+len) */
    uint64_t off;         /* file offset of buf[pos] */
    uint64_t file_size;
};

enum fa_audit_frame_status {
    FRAME_OK,
    FRAME_EOF,    /* clean end of file */
    FRAME_TORN,   /* the file ends inside the frame */
    FRAME_BADLEN, /* a length of 0 or over the limit */
    FRAME_BADCRC, /* checksum mismatch (the payload is still returned) */
    FRAME_IOERR,
};

/* ---- audit_frame.c ---- */
uint32_t fa_audit_get_be32(const uint8_t *p);
uint32_t fa_audit_frame_crc(const uint8_t *len_be, const uint8_t *payload, uint32_t len);
/* Writes a frame (length | payload | crc) into out (room for len + 8). */
void fa_audit_frame_encode(uint8_t *out, const uint8_t *payload, uint32_t len);
char *fa_audit_path_with(const char *path, const char *suffix);
int fa_audit_write_all_at(int fd, const void *buf, size_t len, uint64_t off);
/* 0, or -1 with errno set (0: the file ended before len bytes). */
int fa_audit_read_all_at(int fd, void *buf, size_t len, uint64_t off);
/* The error of a failed fa_audit_read_all_at of path: FA_ERR_CORRUPT for a
 * file that ends early (cut short: never a "read: Success"), else FA_ERR_IO
 * with errno's text.  Returns the code. */
int fa_audit_read_failed(fa_error *err, const char *path);
int fa_audit_file_size(int fd, uint64_t *size);
int fa_audit_sync_fd(int fd);
void fa_audit_make_header(uint8_t hdr[FA_AUDIT_HDR_LEN], const char magic[12]);
int fa_audit_header_ok(const uint8_t hdr[FA_AUDIT_HDR_LEN], const char magic[12]);
/* ---------------------------------------------------------------------------
 * Sequential frame reader
 * ------------------------------------------------------------------------- */
int fa_audit_rd_init(struct fa_audit_rd *r, int fd, uint64_t start, uint64_t file_size);
void fa_audit_rd_free(struct fa_audit_rd *r);
/* Makes min(n, bytes left in the file) bytes available at r->buf + r->pos.
 * Returns the count available, or -1 on an I/O error or out of memory. */
long fa_audit_rd_fill(struct fa_audit_rd *r, size_t n);
void fa_audit_rd_skip(struct fa_audit_rd *r, size_t n);
/* Reads the next frame.  On FRAME_OK and FRAME_BADCRC, *payload and *len point
 * into the reader (valid until the next call) and the frame is consumed. */
enum fa_audit_frame_status fa_audit_rd_frame(struct fa_audit_rd *r, uint32_t max_len,
                                             const uint8_t **payload, uint32_t *len,
                                             uint64_t *frame_off);

/* ---- audit_record.c ---- */
int fa_audit_in_sorted(char **v, size_t n, const char *s);
/* The rules between consecutive records.  prev == NULL-state when have == 0.
 * Records are ordered by (round, attempt, kind) with an operator's action
 * (kind 0, of the round in flight) before the aggregation of that round and
 * attempt (kind 1); aggregations come strictly after the record before them,
 * actions at or after it (several actions may fall in one attempt). */
int fa_audit_record_follows(int have, uint64_t round, uint32_t attempt, int prev_admin,
                            uint64_t new_version, const uint8_t *new_model,
                            const Fedagg__AuditRecord *r, char *why, size_t why_len);

/* ---- audit_log.c ---- */
/* ---------------------------------------------------------------------------
 * Node store
 * ------------------------------------------------------------------------- */
int fa_audit_node_get(void *ctx, unsigned level, uint64_t index, uint8_t out[FA_AUDIT_HLEN]);

#endif
