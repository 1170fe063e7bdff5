/* audit_log.c - the append-only, verifiable audit log file (see audit_log.h). */
#include "audit/audit_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <zlib.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "audit/privacy_audit.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"

#define HLEN FA_MERKLE_HASH_LEN
#define HDR_LEN 16
#define FORMAT_VERSION 1
#define FRAME_OVERHEAD 8
#define MAX_NOTE (64u * 1024) /* largest checkpoint frame we write or read */

static const char log_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 'a', 'u', 'd', 'i', 't'};
static const char ckpt_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 'c', 'k', 'p', 't', 's'};
static const char tree_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 't', 'r', 'e', 'e', 0};

struct fa_audit_log {
    pthread_mutex_t mu;
    char *path, *ckpt_path, *tree_path;
    int fd, ckpt_fd, tree_fd;
    int readonly, nosync, broken;
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
    uint8_t latest_root[HLEN];

    /* The last record, for the ordering and model-chain rules. */
    int have_last, last_admin;
    uint64_t last_round, last_new_version;
    uint32_t last_attempt;
    uint8_t last_new_model[HLEN];
};

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t frame_crc(const uint8_t *len_be, const uint8_t *payload, uint32_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, len_be, 4);
    c = crc32(c, payload, len);
    return (uint32_t)c;
}

/* Writes a frame (length | payload | crc) into out (room for len + 8). */
static void frame_encode(uint8_t *out, const uint8_t *payload, uint32_t len)
{
    put_be32(out, len);
    memcpy(out + 4, payload, len);
    put_be32(out + 4 + len, frame_crc(out, payload, len));
}

static char *path_with(const char *path, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", path, suffix);
    return s;
}

static int write_all_at(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int read_all_at(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = 0; /* short file */
            return -1;
        }
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int sync_fd(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

static void make_header(uint8_t hdr[HDR_LEN], const char magic[12])
{
    memcpy(hdr, magic, 12);
    put_be32(hdr + 12, FORMAT_VERSION);
}

static int header_ok(const uint8_t hdr[HDR_LEN], const char magic[12])
{
    return memcmp(hdr, magic, 12) == 0 && get_be32(hdr + 12) == FORMAT_VERSION;
}

/* ---------------------------------------------------------------------------
 * Sequential frame reader
 * ------------------------------------------------------------------------- */

struct rd {
    int fd;
    uint8_t *buf;
    size_t cap, pos, len; /* valid bytes buf[pos .. pos+len) */
    uint64_t off;         /* file offset of buf[pos] */
    uint64_t file_size;
};

static int rd_init(struct rd *r, int fd, uint64_t start, uint64_t file_size)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->cap = 64u * 1024; /* grows for larger frames */
    r->buf = malloc(r->cap);
    r->off = start;
    r->file_size = file_size;
    return r->buf ? 0 : -1;
}

static void rd_free(struct rd *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Makes min(n, bytes left in the file) bytes available at r->buf + r->pos.
 * Returns the count available, or -1 on an I/O error or out of memory. */
static long rd_fill(struct rd *r, size_t n)
{
    uint64_t left = r->file_size > r->off ? r->file_size - r->off : 0;
    if (n > left)
        n = (size_t)left;
    if (r->len >= n)
        return (long)n;
    if (n > r->cap) {
        size_t cap = r->cap;
        uint8_t *b;
        while (cap < n)
            cap *= 2;
        b = malloc(cap);
        if (!b)
            return -1;
        memcpy(b, r->buf + r->pos, r->len);
        free(r->buf);
        r->buf = b;
        r->cap = cap;
        r->pos = 0;
    } else if (r->pos + n > r->cap) {
        memmove(r->buf, r->buf + r->pos, r->len);
        r->pos = 0;
    }
    while (r->len < n) {
        size_t want = r->cap - r->pos - r->len;
        ssize_t got = pread(r->fd, r->buf + r->pos + r->len, want, (off_t)(r->off + r->len));
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0)
            break; /* the file shrank under us */
        r->len += (size_t)got;
    }
    return (long)(r->len < n ? r->len : n);
}

static void rd_skip(struct rd *r, size_t n)
{
    r->pos += n;
    r->len -= n;
    r->off += n;
}

enum frame_status {
    FRAME_OK,
    FRAME_EOF,    /* clean end of file */
    FRAME_TORN,   /* the file ends inside the frame */
    FRAME_BADLEN, /* a length of 0 or over the limit */
    FRAME_BADCRC, /* checksum mismatch (the payload is still returned) */
    FRAME_IOERR,
};

/* Reads the next frame.  On FRAME_OK and FRAME_BADCRC, *payload and *len point
 * into the reader (valid until the next call) and the frame is consumed. */
static enum frame_status rd_frame(struct rd *r, uint32_t max_len, const uint8_t **payload,
                                  uint32_t *len, uint64_t *frame_off)
{
    long got;
    uint32_t n;
    const uint8_t *p;

    *frame_off = r->off;
    got = rd_fill(r, 4);
    if (got < 0)
        return FRAME_IOERR;
    if (got == 0)
        return FRAME_EOF;
    if (got < 4)
        return FRAME_TORN;
    n = get_be32(r->buf + r->pos);
    if ((uint64_t)n + FRAME_OVERHEAD > r->file_size - r->off)
        return FRAME_TORN;
    if (n == 0 || n > max_len)
        return FRAME_BADLEN;
    got = rd_fill(r, (size_t)n + FRAME_OVERHEAD);
    if (got < 0)
        return FRAME_IOERR;
    if ((size_t)got < (size_t)n + FRAME_OVERHEAD)
        return FRAME_TORN;
    p = r->buf + r->pos;
    *payload = p + 4;
    *len = n;
    rd_skip(r, (size_t)n + FRAME_OVERHEAD);
    return get_be32(p + 4 + n) == frame_crc(p, p + 4, n) ? FRAME_OK : FRAME_BADCRC;
}

/* ---------------------------------------------------------------------------
 * Record rules
 * ------------------------------------------------------------------------- */

static int sorted_unique(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!v[i] || !v[i][0] || strlen(v[i]) > 255)
            return 0;
        if (i > 0 && strcmp(v[i - 1], v[i]) >= 0)
            return 0;
    }
    return 1;
}

static int in_sorted(char **v, size_t n, const char *s)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v[mid], s);
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int fa_audit_record_check(const Fedagg__AuditRecord *r, char *why, size_t why_len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        return FA_ERR_INVAL;                                                                       \
    } while (0)
    if (r->version != 1)
        BAD("record version %u is not 1", r->version);
    if (!r->federation_id || !r->federation_id[0] || strlen(r->federation_id) > 255)
        BAD("federation_id is empty or longer than 255 bytes");
    if (r->admin) {
        static const char *const actions[] = {"pause", "resume", "abort", "drain", "admit"};
        const Fedagg__AdminAction *a = r->admin;
        int known = 0;
        for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
            known |= a->action && !strcmp(a->action, actions[i]);
        if (!known)
            BAD("operator action '%s' is not one of pause, resume, abort, drain, admit",
                a->action ? a->action : "");
        if (!a->operator_ || !a->operator_[0])
            BAD("operator action %s names no operator", a->action);
        if ((!strcmp(a->action, "drain") || !strcmp(a->action, "admit")) &&
            (!a->region || !a->region[0]))
            BAD("operator action %s names no region", a->action);
        if (r->n_participants || r->n_commitments || r->n_dropped)
            BAD("an operator action has participants");
        if (r->prev_version != r->new_version || r->prev_model_sha256.len != 32 ||
            r->new_model_sha256.len != 32 ||
            memcmp(r->prev_model_sha256.data, r->new_model_sha256.data, 32) != 0)
            BAD("an operator action changes the model");
        return 0;
    }
    if (r->config_digest.len != 32)
        BAD("config_digest has %zu bytes, not 32", r->config_digest.len);
    if (r->prev_model_sha256.len != 32)
        BAD("prev_model_sha256 has %zu bytes, not 32", r->prev_model_sha256.len);
    if (r->new_model_sha256.len != 32)
        BAD("new_model_sha256 has %zu bytes, not 32", r->new_model_sha256.len);
    if (r->n_participants == 0)
        BAD("no participants");
    if (!sorted_unique(r->participants, r->n_participants))
        BAD("participants are not sorted and unique (or one is empty)");
    if (!sorted_unique(r->dropped, r->n_dropped))
        BAD("dropped regions are not sorted and unique (or one is empty)");
    for (size_t i = 0; i < r->n_dropped; i++)
        if (in_sorted(r->participants, r->n_participants, r->dropped[i]))
            BAD("region %s is both a participant and dropped", r->dropped[i]);
    if (r->threshold > r->n_participants)
        BAD("%zu participants, fewer than the threshold %u", r->n_participants, r->threshold);
    if (r->commit_unix_ms < r->start_unix_ms)
        BAD("commit time before start time");
    if (r->n_commitments != r->n_participants)
        BAD("%zu commitments for %zu participants", r->n_commitments, r->n_participants);
    for (size_t i = 0; i < r->n_commitments; i++) {
        const Fedagg__RegionCommitment *c = r->commitments[i];
        if (!c->region || strcmp(c->region, r->participants[i]) != 0)
            BAD("commitment %zu is for region %s, not participant %s", i,
                c->region ? c->region : "(none)", r->participants[i]);
        if (c->upload_sha256.len != 32)
            BAD("region %s: upload_sha256 has %zu bytes, not 32", c->region, c->upload_sha256.len);
        /* No signature: the region uploaded, then dropped out before the
         * consistency check (Bonawitz et al. round 3), so it never signed;
         * its update is in the sum all the same. */
        if (c->signature.len != FA_ED25519_SIG_LEN && c->signature.len != 0)
            BAD("region %s: signature has %zu bytes, not 64 (or none)", c->region,
                c->signature.len);
    }
    if (r->tensor_table_digest.len != 0 && r->tensor_table_digest.len != 32)
        BAD("tensor_table_digest has %zu bytes, not 32", r->tensor_table_digest.len);
    if (r->quantization && r->quantization->ranges_sha256.len != 0 &&
        r->quantization->ranges_sha256.len != 32)
        BAD("quantization.ranges_sha256 has %zu bytes, not 32",
            r->quantization->ranges_sha256.len);
    for (size_t i = 0; i < r->n_evaluations; i++)
        if (r->evaluations[i]->signature.len != FA_ED25519_SIG_LEN)
            BAD("evaluation %zu: signature has %zu bytes, not 64", i,
                r->evaluations[i]->signature.len);
    return 0;
#undef BAD
}

/* The rules between consecutive records.  prev == NULL-state when have == 0.
 * Records are ordered by (round, attempt, kind) with an operator's action
 * (kind 0, of the round in flight) before the aggregation of that round and
 * attempt (kind 1); aggregations come strictly after the record before them,
 * actions at or after it (several actions may fall in one attempt). */
static int record_follows(int have, uint64_t round, uint32_t attempt, int prev_admin,
                          uint64_t new_version, const uint8_t *new_model,
                          const Fedagg__AuditRecord *r, char *why, size_t why_len)
{
    int kind = r->admin ? 0 : 1, pkind = prev_admin ? 0 : 1;
    int later = r->round != round       ? r->round > round
                : r->attempt != attempt ? r->attempt > attempt
                                        : (r->admin ? kind >= pkind : kind > pkind);

    if (!have)
        return 0;
    if (!later) {
        snprintf(why, why_len,
                 "round %" PRIu64 " attempt %u does not come after round %" PRIu64
                 " attempt %u of the record before it (a duplicated or reordered record?)",
                 r->round, r->attempt, round, attempt);
        return FA_ERR_INVAL;
    }
    if (r->prev_version != new_version || memcmp(r->prev_model_sha256.data, new_model, HLEN) != 0) {
        snprintf(why, why_len,
                 "previous model (version %" PRIu64 ") is not the new model (version %" PRIu64
                 ") of the record before it (a record removed or reordered?)",
                 r->prev_version, new_version);
        return FA_ERR_INVAL;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Node store
 * ------------------------------------------------------------------------- */

static int node_get(void *ctx, unsigned level, uint64_t index, uint8_t out[HLEN])
{
    fa_audit_log *log = ctx;
    uint64_t pos;

    if (level >= 64 || index > (UINT64_MAX >> level) - 1 || ((index + 1) << level) > log->n)
        return FA_ERR_RANGE;
    pos = fa_merkle_node_pos(level, index);
    if (log->mem && pos >= log->mem_base) {
        if (pos - log->mem_base >= log->mem_count)
            return FA_ERR_RANGE;
        memcpy(out, log->mem + (pos - log->mem_base) * HLEN, HLEN);
        return 0;
    }
    if (read_all_at(log->tree_fd, out, HLEN, HDR_LEN + pos * HLEN) != 0)
        return FA_ERR_IO;
    return 0;
}

static int mem_push(fa_audit_log *log, const uint8_t *h)
{
    if (log->mem_count == log->mem_cap) {
        uint64_t cap = log->mem_cap ? log->mem_cap * 2 : 1024;
        uint8_t *m = realloc(log->mem, cap * HLEN);
        if (!m)
            return -1;
        log->mem = m;
        log->mem_cap = cap;
    }
    memcpy(log->mem + log->mem_count * HLEN, h, HLEN);
    log->mem_count++;
    return 0;
}

static int off_reserve(fa_audit_log *log, uint64_t more)
{
    if (log->n + more > log->off_cap) {
        size_t cap = log->off_cap ? log->off_cap : 1024;
        uint64_t *o;
        while (cap < log->n + more)
            cap *= 2;
        o = realloc(log->off, cap * sizeof(*o));
        if (!o)
            return -1;
        log->off = o;
        log->off_cap = cap;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Open
 * ------------------------------------------------------------------------- */

static void log_free(fa_audit_log *log)
{
    if (!log)
        return;
    if (log->fd >= 0)
        close(log->fd);
    if (log->ckpt_fd >= 0)
        close(log->ckpt_fd);
    if (log->tree_fd >= 0)
        close(log->tree_fd);
    free(log->path);
    free(log->ckpt_path);
    free(log->tree_path);
    free(log->off);
    free(log->mem);
    free(log->latest);
    pthread_mutex_destroy(&log->mu);
    free(log);
}

void fa_audit_log_close(fa_audit_log *log)
{
    log_free(log);
}

static int file_size(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *size = (uint64_t)st.st_size;
    return 0;
}

/* Creates the three files of an empty log (writer).  The log header goes
 * last: a log file with a valid header always has its companions. */
static int create_files(fa_audit_log *log, fa_error *err)
{
    uint8_t hdr[HDR_LEN];

    make_header(hdr, ckpt_magic);
    if (ftruncate(log->ckpt_fd, 0) != 0 || write_all_at(log->ckpt_fd, hdr, HDR_LEN, 0) != 0 ||
        (!log->nosync && sync_fd(log->ckpt_fd) != 0))
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->ckpt_path, strerror(errno));
    make_header(hdr, tree_magic);
    if (ftruncate(log->tree_fd, 0) != 0 || write_all_at(log->tree_fd, hdr, HDR_LEN, 0) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
    make_header(hdr, log_magic);
    if (ftruncate(log->fd, 0) != 0 || write_all_at(log->fd, hdr, HDR_LEN, 0) != 0 ||
        (!log->nosync && sync_fd(log->fd) != 0))
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->path, strerror(errno));
    if (!log->nosync && fa_file_sync_dir(log->path, err) != 0)
        return FA_ERR_IO;
    log->log_end = HDR_LEN;
    log->ckpt_end = HDR_LEN;
    return 0;
}

/* Scans the checkpoints file: finds the last complete frame, cuts (writer) or
 * reports a torn tail, loads and checks the latest checkpoint. */
static int scan_checkpoints(fa_audit_log *log, const fa_note_verifier *v, fa_audit_open_report *rep,
                            fa_error *err)
{
    uint64_t size, last_off = 0, k = 0;
    uint32_t last_len = 0;
    uint8_t hdr[HDR_LEN];
    struct rd r;
    fa_checkpoint cp;
    int rc = 0;

    if (file_size(log->ckpt_fd, &size) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->ckpt_path, strerror(errno));
    if (size < HDR_LEN || read_all_at(log->ckpt_fd, hdr, HDR_LEN, 0) != 0 ||
        !header_ok(hdr, ckpt_magic))
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: not a fedagg checkpoints file (bad header)",
                         log->ckpt_path);
    if (rd_init(&r, log->ckpt_fd, HDR_LEN, size) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        enum frame_status st = rd_frame(&r, MAX_NOTE, &p, &len, &off);
        if (st == FRAME_OK) {
            last_off = off;
            last_len = len;
            k++;
            continue;
        }
        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->ckpt_path, strerror(errno));
            goto out;
        }
        if (st == FRAME_TORN || (st == FRAME_BADCRC && r.off == size)) {
            /* A crash while the last checkpoint was written. */
            rep->torn_checkpoint_bytes = size - off;
            if (!log->readonly) {
                if (ftruncate(log->ckpt_fd, (off_t)off) != 0 ||
                    (!log->nosync && sync_fd(log->ckpt_fd) != 0)) {
                    rc = fa_errorf(err, FA_ERR_IO, "%s: truncate: %s", log->ckpt_path,
                                   strerror(errno));
                    goto out;
                }
                fa_log(FA_LOG_WARN, "audit: cut off a torn checkpoint",
                       "file=%s offset=%" PRIu64 " bytes=%" PRIu64, log->ckpt_path, off,
                       size - off);
            }
            size = off;
            break;
        }
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: checkpoint %" PRIu64 " at offset %" PRIu64 ": %s (run `fedagg audit "
                       "verify` for details)",
                       log->ckpt_path, k, off,
                       st == FRAME_BADLEN ? "invalid length" : "checksum mismatch");
        goto out;
    }
    log->ckpt_end = size;
    if (k == 0) {
        log->signed_size = 0;
        goto out;
    }
    log->latest = malloc((size_t)last_len + 1);
    if (!log->latest) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (read_all_at(log->ckpt_fd, log->latest, last_len, last_off + 4) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->ckpt_path, strerror(errno));
        goto out;
    }
    log->latest[last_len] = 0;
    log->latest_len = last_len;
    rc = fa_checkpoint_parse(log->latest, last_len, &cp, err);
    if (rc == 0 && log->origin[0] && strcmp(cp.origin, log->origin) != 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "%s: the log's origin is \"%s\", not \"%s\" (a different log, or "
                       "audit.origin changed?)",
                       log->path, cp.origin, log->origin);
        goto out;
    }
    if (rc == 0 && v)
        rc = fa_checkpoint_open(log->latest, last_len, v, &cp, err);
    if (rc < 0) {
        fa_error_prefix(err, rc, "%s: latest checkpoint", log->ckpt_path);
        goto out;
    }
    snprintf(log->origin, sizeof(log->origin), "%s", cp.origin);
    log->signed_size = cp.size;
    memcpy(log->latest_root, cp.root, HLEN);
out:
    rd_free(&r);
    return rc;
}

/* Where scan_log puts the nodes it computes. */
struct tree_sink {
    uint64_t stored; /* nodes in the tree file at open */
    uint64_t pos;    /* next node position */
    int stale;       /* from `from` on, the file is not trusted */
    uint64_t from;
    struct rd r;   /* reads the stored nodes in order */
    uint8_t *wbuf; /* writer: buffered rewrite */
    size_t wlen;
    uint64_t wpos;
};

static int sink_flush(fa_audit_log *log, struct tree_sink *t)
{
    if (t->wlen == 0)
        return 0;
    if (write_all_at(log->tree_fd, t->wbuf, t->wlen * HLEN, HDR_LEN + t->wpos * HLEN) != 0)
        return -1;
    t->wpos += t->wlen;
    t->wlen = 0;
    return 0;
}

static int sink_node(fa_audit_log *log, struct tree_sink *t, const uint8_t *h)
{
    if (!t->stale && t->pos < t->stored) {
        long got = rd_fill(&t->r, HLEN);
        if (got == HLEN && memcmp(t->r.buf + t->r.pos, h, HLEN) == 0) {
            rd_skip(&t->r, HLEN);
            t->pos++;
            return 0;
        }
    }
    if (!t->stale) {
        t->stale = 1;
        t->from = t->pos;
        t->wpos = t->pos;
        if (!log->readonly && !t->wbuf && !(t->wbuf = malloc(4096 * HLEN)))
            return -1;
        if (log->readonly)
            log->mem_base = t->pos;
    }
    t->pos++;
    if (log->readonly)
        return mem_push(log, h);
    memcpy(t->wbuf + t->wlen * HLEN, h, HLEN);
    if (++t->wlen == 4096)
        return sink_flush(log, t);
    return 0;
}

/* Scans the log: checksums, offsets, the tree (checked against LOG.tree and
 * the latest checkpoint), the last record; cuts or reports a torn tail. */
static int scan_log(fa_audit_log *log, fa_audit_open_report *rep, fa_error *err)
{
    uint8_t want_root[HLEN], root[HLEN], hdr[HDR_LEN], done[64 * HLEN];
    uint64_t size, tree_size = 0;
    struct tree_sink t;
    struct rd r;
    int rc = 0, have_want = log->latest != NULL;
    uint8_t *last = NULL;
    uint32_t last_len = 0;

    memcpy(want_root, log->latest_root, HLEN);
    fa_merkle_frontier_init(&log->fr);
    memset(&t, 0, sizeof(t));
    if (file_size(log->fd, &size) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->path, strerror(errno));
    if (file_size(log->tree_fd, &tree_size) == 0 && tree_size >= HDR_LEN &&
        read_all_at(log->tree_fd, hdr, HDR_LEN, 0) == 0 && header_ok(hdr, tree_magic))
        t.stored = (tree_size - HDR_LEN) / HLEN;
    else if (!log->readonly) {
        make_header(hdr, tree_magic);
        if (write_all_at(log->tree_fd, hdr, HDR_LEN, 0) != 0)
            return fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
    }
    if (rd_init(&r, log->fd, HDR_LEN, size) != 0 ||
        rd_init(&t.r, log->tree_fd, HDR_LEN, HDR_LEN + t.stored * HLEN) != 0) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (have_want && log->signed_size == 0) {
        fa_merkle_empty_root(root);
        if (memcmp(root, want_root, HLEN) != 0) {
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: the latest checkpoint signs an empty tree with a wrong root",
                           log->ckpt_path);
            goto out;
        }
    }
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        unsigned k;
        enum frame_status st = rd_frame(&r, FA_AUDIT_MAX_RECORD, &p, &len, &off);

        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->path, strerror(errno));
            goto out;
        }
        if (st != FRAME_OK) {
            int at_end = st == FRAME_TORN || (st == FRAME_BADCRC && r.off == size);
            if (at_end && log->n >= log->signed_size) {
                /* A crash while the last record was written: it was never
                 * committed (no checkpoint covers it). */
                rep->torn_log_bytes = size - off;
                if (!log->readonly) {
                    if (ftruncate(log->fd, (off_t)off) != 0 ||
                        (!log->nosync && sync_fd(log->fd) != 0)) {
                        rc = fa_errorf(err, FA_ERR_IO, "%s: truncate: %s", log->path,
                                       strerror(errno));
                        goto out;
                    }
                    fa_log(FA_LOG_WARN, "audit: cut off a torn record",
                           "file=%s record=%" PRIu64 " offset=%" PRIu64 " bytes=%" PRIu64,
                           log->path, log->n, off, size - off);
                }
                size = off;
                break;
            }
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: record %" PRIu64 " at offset %" PRIu64
                           ": %s; the log is damaged (run `fedagg audit verify` for details)",
                           log->path, log->n, off,
                           st == FRAME_BADLEN ? "invalid length"
                           : st == FRAME_TORN ? "the file ends inside it, but a signed checkpoint "
                                                "covers it"
                                              : "checksum mismatch");
            goto out;
        }
        if (off_reserve(log, 1) != 0) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out;
        }
        log->off[log->n++] = off;
        fa_merkle_leaf_hash(p, len, done);
        fa_merkle_frontier_push(&log->fr, done, done, &k);
        for (unsigned i = 0; i < k; i++)
            if (sink_node(log, &t, done + i * HLEN) != 0) {
                rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
                goto out;
            }
        if (have_want && log->n == log->signed_size) {
            fa_merkle_frontier_root(&log->fr, root);
            if (memcmp(root, want_root, HLEN) != 0) {
                rc = fa_errorf(err, FA_ERR_CORRUPT,
                               "%s: records 0..%" PRIu64 " do not match the latest signed "
                               "checkpoint (tree size %" PRIu64
                               "); the log was changed (run `fedagg audit verify` to find the "
                               "record)",
                               log->path, log->n - 1, log->signed_size);
                goto out;
            }
        }
        last_len = len;
    }
    if (log->n < log->signed_size) {
        rc =
            fa_errorf(err, FA_ERR_CORRUPT,
                      "%s: the log has %" PRIu64 " records but the latest checkpoint signs %" PRIu64
                      ": records %" PRIu64 "..%" PRIu64 " are missing (truncated or deleted)",
                      log->path, log->n, log->signed_size, log->n, log->signed_size - 1);
        goto out;
    }
    log->log_end = size;

    /* The tree file: finish the rewrite, drop nodes beyond the log. */
    if (t.stale || t.stored != t.pos) {
        rep->tree_rebuilt = 1;
        if (!log->readonly) {
            if (sink_flush(log, &t) != 0 ||
                ftruncate(log->tree_fd, (off_t)(HDR_LEN + t.pos * HLEN)) != 0) {
                rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
                goto out;
            }
            if (t.stale && t.from < t.stored)
                fa_log(FA_LOG_WARN, "audit: tree file was stale and was rebuilt",
                       "file=%s from_node=%" PRIu64, log->tree_path, t.from);
        } else if (!t.stale) {
            log->mem_base = t.pos; /* only extra nodes: nothing to hold */
        }
    }

    /* The last record, for the rules of the next append. */
    if (log->n > 0) {
        Fedagg__AuditRecord *rec;
        last = malloc(last_len);
        if (!last) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (read_all_at(log->fd, last, last_len, log->off[log->n - 1] + 4) != 0) {
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->path, strerror(errno));
            goto out;
        }
        rec = fedagg__audit_record__unpack(NULL, last_len, last);
        if (rec) {
            log->have_last = 1;
            log->last_admin = rec->admin != NULL;
            log->last_round = rec->round;
            log->last_attempt = rec->attempt;
            log->last_new_version = rec->new_version;
            if (rec->new_model_sha256.len == HLEN)
                memcpy(log->last_new_model, rec->new_model_sha256.data, HLEN);
            fedagg__audit_record__free_unpacked(rec, NULL);
        } else if (!log->readonly) {
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 " is not an AuditRecord",
                           log->path, log->n - 1);
            goto out;
        }
    }
out:
    free(last);
    free(t.wbuf);
    rd_free(&t.r);
    rd_free(&r);
    return rc;
}

static int commit_checkpoint(fa_audit_log *log, fa_error *err);

static int open_common(fa_audit_log **out, const char *path, const fa_note_signer *signer,
                       const char *origin, const fa_note_verifier *v, unsigned flags,
                       fa_audit_open_report *report, fa_error *err)
{
    fa_audit_log *log;
    fa_audit_open_report dummy;
    fa_note_verifier own;
    uint64_t size = 0;
    int rc = 0, oflags;
    uint8_t hdr[HDR_LEN];

    *out = NULL;
    if (!report)
        report = &dummy;
    memset(report, 0, sizeof(*report));
    log = calloc(1, sizeof(*log));
    if (!log)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&log->mu, NULL);
    log->fd = log->ckpt_fd = log->tree_fd = -1;
    log->readonly = signer == NULL;
    log->nosync = (flags & FA_AUDIT_LOG_NOSYNC) != 0;
    log->signer = signer;
    log->path = strdup(path);
    log->ckpt_path = path_with(path, ".checkpoints");
    log->tree_path = path_with(path, ".tree");
    if (!log->path || !log->ckpt_path || !log->tree_path) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (signer) {
        const char *o = origin && origin[0] ? origin : fa_note_signer_name(signer);
        if (strcmp(o, fa_note_signer_name(signer)) != 0 || !fa_note_name_valid(o)) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "origin \"%s\" must be a valid key name and the signer's name (\"%s\")",
                           o, fa_note_signer_name(signer));
            goto fail;
        }
        snprintf(log->origin, sizeof(log->origin), "%s", o);
        memset(&own, 0, sizeof(own));
        snprintf(own.name, sizeof(own.name), "%s", o);
        memcpy(own.pk, fa_note_signer_public_key(signer), FA_ED25519_PK_LEN);
        v = &own;
    }

    oflags = log->readonly ? O_RDONLY : O_RDWR | O_CREAT;
    log->fd = open(path, oflags | O_CLOEXEC, 0644);
    if (log->fd < 0) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto fail;
    }
    if (!log->readonly && flock(log->fd, LOCK_EX | LOCK_NB) != 0) {
        rc = fa_errorf(err, FA_ERR_STATE, "%s: another process has the audit log open for writing",
                       path);
        goto fail;
    }
    if (file_size(log->fd, &size) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    /* The companions are created only with a new log; a missing checkpoints
     * file of an existing log is damage, not something to recreate. */
    log->ckpt_fd =
        open(log->ckpt_path, (size < HDR_LEN ? oflags : oflags & ~O_CREAT) | O_CLOEXEC, 0644);
    if (log->ckpt_fd < 0 && errno == ENOENT && size >= HDR_LEN) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: missing (the checkpoints of %s)", log->ckpt_path,
                       path);
        goto fail;
    }
    log->tree_fd = open(log->tree_path, oflags | O_CLOEXEC, 0644);
    if (log->ckpt_fd < 0 && !(log->readonly && errno == ENOENT && size < HDR_LEN)) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_CORRUPT : FA_ERR_IO,
                       "%s: %s (the log's checkpoints)", log->ckpt_path, strerror(errno));
        goto fail;
    }
    if (log->tree_fd < 0 && !log->readonly) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
        goto fail;
    }

    if (size < HDR_LEN) {
        /* New log, or one whose creation was cut short (its header is written
         * last, so nothing can have been committed). */
        if (log->readonly) {
            rc = fa_errorf(err, size == 0 ? FA_ERR_NOTFOUND : FA_ERR_CORRUPT, "%s: %s", path,
                           size == 0 ? "empty file, not an audit log yet" : "incomplete header");
            goto fail;
        }
        rc = create_files(log, err);
        if (rc < 0)
            goto fail;
        report->created = 1;
        fa_merkle_frontier_init(&log->fr);
        rc = commit_checkpoint(log, err);
        if (rc < 0)
            goto fail;
        fa_log(FA_LOG_INFO, "audit: created log", "file=%s origin=%s", path, log->origin);
        *out = log;
        return 0;
    }
    if (read_all_at(log->fd, hdr, HDR_LEN, 0) != 0 || !header_ok(hdr, log_magic)) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: not a fedagg audit log (bad header)", path);
        goto fail;
    }
    if (log->tree_fd < 0) {
        /* read-only without a tree file: every node in memory */
        log->tree_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    rc = scan_checkpoints(log, v, report, err);
    if (rc < 0)
        goto fail;
    rc = scan_log(log, report, err);
    if (rc < 0)
        goto fail;
    report->records = log->n;
    if (log->n > log->signed_size || !log->latest) {
        report->unsigned_records = log->n - log->signed_size;
        if (!log->readonly && report->unsigned_records > 1 && !(flags & FA_AUDIT_LOG_RESIGN_TAIL)) {
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: records %" PRIu64 "..%" PRIu64 " are not covered by the latest "
                           "checkpoint (tree size %" PRIu64 "); a crash during one append leaves "
                           "at most one such record: were checkpoints removed? (run `fedagg audit "
                           "verify`)",
                           path, log->signed_size, log->n - 1, log->signed_size);
            goto fail;
        }
        if (!log->readonly) {
            rc = commit_checkpoint(log, err);
            if (rc < 0)
                goto fail;
            if (report->unsigned_records)
                fa_log(FA_LOG_WARN, "audit: signed records appended before a crash",
                       "file=%s records=%" PRIu64 " tree_size=%" PRIu64, path,
                       report->unsigned_records, log->n);
        }
    }
    *out = log;
    return 0;
fail:
    log_free(log);
    return rc;
}

int fa_audit_log_open(fa_audit_log **out, const char *path, const fa_note_signer *signer,
                      const char *origin, unsigned flags, fa_audit_open_report *report,
                      fa_error *err)
{
    if (!signer)
        return fa_errorf(err, FA_ERR_INVAL, "a signing key is needed to open the log for writing");
    return open_common(out, path, signer, origin, NULL, flags, report, err);
}

int fa_audit_log_open_readonly(fa_audit_log **out, const char *path, const fa_note_verifier *v,
                               fa_audit_open_report *report, fa_error *err)
{
    return open_common(out, path, NULL, NULL, v, 0, report, err);
}

/* ---------------------------------------------------------------------------
 * Append
 * ------------------------------------------------------------------------- */

/* Signs the checkpoint of the current tree and appends it (fsync unless
 * nosync).  On failure the checkpoints file is as before. */
static int commit_checkpoint(fa_audit_log *log, fa_error *err)
{
    fa_checkpoint cp;
    char *note = NULL;
    size_t len = 0;
    uint8_t *frame;
    int rc;

    memset(&cp, 0, sizeof(cp));
    snprintf(cp.origin, sizeof(cp.origin), "%s", log->origin);
    cp.size = log->n;
    fa_merkle_frontier_root(&log->fr, cp.root);
    rc = fa_checkpoint_sign(log->signer, &cp, &note, &len, err);
    if (rc < 0)
        return rc;
    frame = malloc(len + FRAME_OVERHEAD);
    if (!frame) {
        free(note);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    frame_encode(frame, (const uint8_t *)note, (uint32_t)len);
    if (write_all_at(log->ckpt_fd, frame, len + FRAME_OVERHEAD, log->ckpt_end) != 0 ||
        (!log->nosync && sync_fd(log->ckpt_fd) != 0)) {
        int e = errno;
        if (ftruncate(log->ckpt_fd, (off_t)log->ckpt_end) != 0)
            log->broken = 1;
        free(frame);
        free(note);
        return fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->ckpt_path, strerror(e));
    }
    free(frame);
    log->ckpt_end += len + FRAME_OVERHEAD;
    free(log->latest);
    log->latest = note;
    log->latest_len = len;
    log->signed_size = log->n;
    return 0;
}

void fa_audit_append_result_free(fa_audit_append_result *res)
{
    if (res) {
        free(res->checkpoint);
        res->checkpoint = NULL;
    }
}

static int append_locked(fa_audit_log *log, const uint8_t *const *recs, const size_t *lens,
                         size_t n, fa_audit_append_result *res, fa_error *err)
{
    char why[300];
    size_t total = 0, pos = 0;
    uint8_t *buf = NULL, *nodes = NULL;
    uint64_t old_n = log->n, old_log_end = log->log_end, nnodes = 0;
    fa_merkle_frontier old_fr;
    int have = log->have_last, admin = log->last_admin, rc = 0, wrote = 0;
    uint64_t round = log->last_round, newv = log->last_new_version;
    uint32_t attempt = log->last_attempt;
    uint8_t model[HLEN];

    if (res)
        memset(res, 0, sizeof(*res));
    if (log->readonly)
        return fa_errorf(err, FA_ERR_STATE, "%s: opened read-only", log->path);
    if (log->broken)
        return fa_errorf(err, FA_ERR_STATE,
                         "%s: an earlier failed append could not be undone; reopen the log",
                         log->path);
    if (n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "no record to append");
    memcpy(model, log->last_new_model, HLEN);

    /* Check every record before touching the disk. */
    for (size_t i = 0; i < n; i++) {
        Fedagg__AuditRecord *r;
        uint64_t r_round;
        uint32_t r_attempt;
        if (lens[i] == 0 || lens[i] > FA_AUDIT_MAX_RECORD)
            return fa_errorf(err, FA_ERR_TOOBIG, "audit record of %zu bytes (limit %u)", lens[i],
                             FA_AUDIT_MAX_RECORD);
        r = fedagg__audit_record__unpack(NULL, lens[i], recs[i]);
        if (!r)
            return fa_errorf(err, FA_ERR_INVAL, "record %zu of the batch is not an AuditRecord", i);
        r_round = r->round;
        r_attempt = r->attempt;
        rc = fa_audit_record_check(r, why, sizeof(why));
        if (rc == 0)
            rc = record_follows(have, round, attempt, admin, newv, model, r, why, sizeof(why));
        if (rc == 0) {
            have = 1;
            admin = r->admin != NULL;
            round = r->round;
            attempt = r->attempt;
            newv = r->new_version;
            memcpy(model, r->new_model_sha256.data, HLEN);
        }
        fedagg__audit_record__free_unpacked(r, NULL);
        if (rc < 0)
            return fa_errorf(err, FA_ERR_INVAL,
                             "audit record of round %" PRIu64 " attempt %u refused: %s", r_round,
                             r_attempt, why);
        total += lens[i] + FRAME_OVERHEAD;
    }
    if (off_reserve(log, n) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    buf = malloc(total);
    nodes = malloc((n + 64) * 2 * HLEN);
    if (!buf || !nodes) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        frame_encode(buf + pos, recs[i], (uint32_t)lens[i]);
        pos += lens[i] + FRAME_OVERHEAD;
    }

    /* 1. the records */
    memcpy(&old_fr, &log->fr, sizeof(old_fr));
    wrote = 1;
    if (write_all_at(log->fd, buf, total, log->log_end) != 0 ||
        (!log->nosync && sync_fd(log->fd) != 0)) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->path, strerror(errno));
        goto out;
    }
    /* 2. the tree nodes they complete */
    pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t leaf[HLEN];
        unsigned k;
        fa_merkle_leaf_hash(recs[i], lens[i], leaf);
        fa_merkle_frontier_push(&log->fr, leaf, nodes + nnodes * HLEN, &k);
        nnodes += k;
        log->off[log->n + i] = log->log_end + pos;
        pos += lens[i] + FRAME_OVERHEAD;
    }
    if (write_all_at(log->tree_fd, nodes, nnodes * HLEN,
                     HDR_LEN + fa_merkle_node_count(old_n) * HLEN) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->tree_path, strerror(errno));
        goto out;
    }
    log->n += n;
    log->log_end += total;
    /* 3. the signed checkpoint: the commit point */
    rc = commit_checkpoint(log, err);
    if (rc < 0)
        goto out;
    log->have_last = 1;
    log->last_admin = admin;
    log->last_round = round;
    log->last_attempt = attempt;
    log->last_new_version = newv;
    memcpy(log->last_new_model, model, HLEN);

    if (res) {
        res->index = log->n - 1;
        res->tree_size = log->n;
        fa_merkle_frontier_root(&log->fr, res->root);
        res->checkpoint = strdup(log->latest);
        res->checkpoint_len = log->latest_len;
        if (!res->checkpoint) {
            rc = 0; /* committed; only the copy failed */
            fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out_ok;
        }
        fa_merkle_inclusion_proof(node_get, log, res->index, res->tree_size, res->proof,
                                  &res->proof_len);
    }
out_ok:
    wrote = 0;
out:
    if (rc < 0 && wrote) {
        /* Undo: nothing of this append stays on disk. */
        log->n = old_n;
        log->log_end = old_log_end;
        memcpy(&log->fr, &old_fr, sizeof(old_fr));
        if (ftruncate(log->fd, (off_t)old_log_end) != 0 ||
            ftruncate(log->tree_fd, (off_t)(HDR_LEN + fa_merkle_node_count(old_n) * HLEN)) != 0 ||
            (!log->nosync && sync_fd(log->fd) != 0))
            log->broken = 1;
    }
    free(buf);
    free(nodes);
    return rc;
}

int fa_audit_log_append_encoded(fa_audit_log *log, const uint8_t *const *recs, const size_t *lens,
                                size_t n, fa_audit_append_result *res, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    rc = append_locked(log, recs, lens, n, res, err);
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_append(fa_audit_log *log, const Fedagg__AuditRecord *rec,
                        fa_audit_append_result *res, fa_error *err)
{
    size_t len = fedagg__audit_record__get_packed_size(rec);
    uint8_t *buf;
    int rc;

    if (len == 0 || len > FA_AUDIT_MAX_RECORD)
        return fa_errorf(err, FA_ERR_TOOBIG, "audit record of %zu bytes (limit %u)", len,
                         FA_AUDIT_MAX_RECORD);
    buf = malloc(len);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fedagg__audit_record__pack(rec, buf);
    rc = fa_audit_log_append_encoded(log, (const uint8_t *const *)&buf, &len, 1, res, err);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------- */

uint64_t fa_audit_log_size(fa_audit_log *log)
{
    uint64_t n;
    pthread_mutex_lock(&log->mu);
    n = log->n;
    pthread_mutex_unlock(&log->mu);
    return n;
}

uint64_t fa_audit_log_signed_size(fa_audit_log *log)
{
    uint64_t n;
    pthread_mutex_lock(&log->mu);
    n = log->signed_size;
    pthread_mutex_unlock(&log->mu);
    return n;
}

int fa_audit_log_checkpoint(fa_audit_log *log, char **note, size_t *len, fa_error *err)
{
    int rc = 0;
    *note = NULL;
    pthread_mutex_lock(&log->mu);
    if (!log->latest)
        rc = fa_errorf(err, FA_ERR_NOTFOUND, "%s: no checkpoint signed yet", log->path);
    else if (!(*note = strdup(log->latest)))
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    else if (len)
        *len = log->latest_len;
    pthread_mutex_unlock(&log->mu);
    return rc;
}

static int read_locked(fa_audit_log *log, uint64_t index, uint8_t **rec, size_t *len, fa_error *err)
{
    uint8_t head[4], tail[4];
    uint32_t n;
    uint64_t off;

    *rec = NULL;
    if (index >= log->n)
        return fa_errorf(err, FA_ERR_RANGE,
                         "record %" PRIu64 " is beyond the log (%" PRIu64 " records)", index,
                         log->n);
    off = log->off[index];
    if (read_all_at(log->fd, head, 4, off) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->path, strerror(errno));
    n = get_be32(head);
    if (n == 0 || n > FA_AUDIT_MAX_RECORD)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 ": invalid length", log->path,
                         index);
    *rec = malloc(n);
    if (!*rec)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if (read_all_at(log->fd, *rec, n, off + 4) != 0 || read_all_at(log->fd, tail, 4, off + 4 + n)) {
        free(*rec);
        *rec = NULL;
        return fa_errorf(err, FA_ERR_IO, "%s: read: %s", log->path, strerror(errno));
    }
    if (get_be32(tail) != frame_crc(head, *rec, n)) {
        free(*rec);
        *rec = NULL;
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 ": checksum mismatch",
                         log->path, index);
    }
    *len = n;
    return 0;
}

int fa_audit_log_read(fa_audit_log *log, uint64_t index, uint8_t **rec, size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    rc = read_locked(log, index, rec, len, err);
    pthread_mutex_unlock(&log->mu);
    return rc;
}

static Fedagg__AuditRecord *decode_locked(fa_audit_log *log, uint64_t index, fa_error *err)
{
    uint8_t *buf;
    size_t len;
    Fedagg__AuditRecord *r;
    if (read_locked(log, index, &buf, &len, err) != 0)
        return NULL;
    r = fedagg__audit_record__unpack(NULL, len, buf);
    free(buf);
    if (!r)
        fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 " is not an AuditRecord", log->path,
                  index);
    return r;
}

int fa_audit_log_find(fa_audit_log *log, uint64_t round, const char *region, uint64_t *index,
                      fa_error *err)
{
    uint64_t lo = 0, hi;
    int rc = FA_ERR_NOTFOUND;

    pthread_mutex_lock(&log->mu);
    hi = log->n;
    /* first record with a round > `round` */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        Fedagg__AuditRecord *r = decode_locked(log, mid, err);
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        if (r->round <= round)
            lo = mid + 1;
        else
            hi = mid;
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    while (lo > 0) {
        Fedagg__AuditRecord *r = decode_locked(log, lo - 1, err);
        int found;
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        if (r->round != round) {
            fedagg__audit_record__free_unpacked(r, NULL);
            break;
        }
        found = in_sorted(r->participants, r->n_participants, region) ||
                in_sorted(r->dropped, r->n_dropped, region);
        fedagg__audit_record__free_unpacked(r, NULL);
        lo--;
        if (found) {
            *index = lo;
            rc = 0;
            goto out;
        }
    }
    fa_errorf(err, FA_ERR_NOTFOUND,
              "%s: no record of round %" PRIu64 " in which region %s took part", log->path, round,
              region);
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_root(fa_audit_log *log, uint64_t size, uint8_t root[HLEN], fa_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&log->mu);
    if (size > log->n)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "tree size %" PRIu64 " is beyond the log (%" PRIu64 " records)", size,
                       log->n);
    else if (size == log->n)
        fa_merkle_frontier_root(&log->fr, root);
    else if (size == 0)
        fa_merkle_empty_root(root);
    else if ((rc = fa_merkle_range_root(node_get, log, 0, size, root)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_inclusion_proof(fa_audit_log *log, uint64_t index, uint64_t size, uint8_t *proof,
                                 size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    if (size > log->n || index >= size)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no record %" PRIu64 " in a tree of %" PRIu64 " (the log has %" PRIu64 ")",
                       index, size, log->n);
    else if ((rc = fa_merkle_inclusion_proof(node_get, log, index, size, proof, len)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_consistency_proof(fa_audit_log *log, uint64_t old_size, uint64_t size,
                                   uint8_t *proof, size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    if (size > log->n || old_size > size)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no consistency proof from %" PRIu64 " to %" PRIu64 " records (the log has "
                       "%" PRIu64 ")",
                       old_size, size, log->n);
    else if ((rc = fa_merkle_consistency_proof(node_get, log, old_size, size, proof, len)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_prove(fa_audit_log *log, uint64_t index, char **bundle, size_t *len, fa_error *err)
{
    fa_proof_bundle b;
    int rc;

    *bundle = NULL;
    memset(&b, 0, sizeof(b));
    pthread_mutex_lock(&log->mu);
    if (!log->latest || index >= log->signed_size) {
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "record %" PRIu64
                       " is not covered by a signed checkpoint (tree size %" PRIu64 ")",
                       index, log->signed_size);
        goto out;
    }
    rc = read_locked(log, index, &b.record, &b.record_len, err);
    if (rc < 0)
        goto out;
    rc = fa_merkle_inclusion_proof(node_get, log, index, log->signed_size, b.proof, &b.proof_len);
    if (rc < 0) {
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
        goto out;
    }
    b.index = index;
    b.checkpoint = log->latest;
    b.checkpoint_len = log->latest_len;
    rc = fa_proof_bundle_format(&b, bundle, len, err);
    b.checkpoint = NULL;
out:
    pthread_mutex_unlock(&log->mu);
    fa_proof_bundle_free(&b);
    return rc;
}

int fa_audit_log_find_version(fa_audit_log *log, uint64_t version, uint64_t *index, fa_error *err)
{
    uint64_t lo = 0, hi;
    int rc = 0;

    pthread_mutex_lock(&log->mu);
    hi = log->signed_size;
    /* first signed record with new_version > version (new versions never
     * decrease along the log) */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        Fedagg__AuditRecord *r = decode_locked(log, mid, err);
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        if (r->new_version <= version)
            lo = mid + 1;
        else
            hi = mid;
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    if (lo > 0) {
        Fedagg__AuditRecord *r = decode_locked(log, lo - 1, err);
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        rc = r->new_version == version ? 0 : FA_ERR_NOTFOUND;
        fedagg__audit_record__free_unpacked(r, NULL);
    } else {
        rc = FA_ERR_NOTFOUND;
    }
    if (rc == 0)
        *index = lo - 1;
    else
        fa_errorf(err, FA_ERR_NOTFOUND,
                  "%s: no signed record makes or keeps model version %" PRIu64 " (%" PRIu64
                  " signed records)",
                  log->path, version, log->signed_size);
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_prove_consistency(fa_audit_log *log, uint64_t old_size, uint64_t size, char **text,
                                   size_t *len, fa_error *err)
{
    uint8_t proof[FA_MERKLE_MAX_PROOF * HLEN];
    size_t n = 0, cap, off;
    char *out = NULL;
    int rc;

    *text = NULL;
    pthread_mutex_lock(&log->mu);
    if (size == UINT64_MAX)
        size = log->signed_size;
    if (size > log->signed_size || old_size > size) {
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no consistency proof from %" PRIu64 " to %" PRIu64
                       " records: the latest checkpoint signs %" PRIu64,
                       old_size, size, log->signed_size);
        goto out;
    }
    rc = fa_merkle_consistency_proof(node_get, log, old_size, size, proof, &n);
    if (rc < 0) {
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
        goto out;
    }
    cap = 96 + n * (6 + sodium_base64_ENCODED_LEN(HLEN, sodium_base64_VARIANT_ORIGINAL));
    out = malloc(cap);
    if (!out) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "consistency proof: out of memory");
        goto out;
    }
    off = (size_t)snprintf(out, cap,
                           "fedagg-audit-consistency v1\nold %" PRIu64 "\nsize %" PRIu64 "\n",
                           old_size, size);
    for (size_t i = 0; i < n; i++) {
        memcpy(out + off, "hash ", 5);
        off += 5;
        sodium_bin2base64(out + off, cap - off, proof + i * HLEN, HLEN,
                          sodium_base64_VARIANT_ORIGINAL);
        off += strlen(out + off);
        out[off++] = '\n';
    }
    out[off] = '\0';
    *text = out;
    *len = off;
    rc = 0;
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Full verification
 * ------------------------------------------------------------------------- */

struct vstate {
    const fa_audit_verify_opts *o;
    fa_audit_verify_result *res;
    fa_error *err;
    const char *path;
    fa_privacy_audit *privacy; /* the regions' privacy ledger, added up */
};

static void vreport(struct vstate *v, int sev, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void vreport(struct vstate *v, int sev, int64_t index, const char *fmt, ...)
{
    char msg[480];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (sev == FA_AUDIT_PROBLEM) {
        v->res->problems++;
        if (index < v->res->first_bad) {
            v->res->first_bad = index;
            if (index < 0)
                fa_errorf(v->err, FA_ERR_VERIFY, "%s: %s", v->path, msg);
            else
                fa_errorf(v->err, FA_ERR_VERIFY, "record %" PRId64 ": %s", index, msg);
        }
    }
    if (v->o->report)
        v->o->report(v->o->report_ctx, sev, index, msg);
}

/* Reads the checkpoints one by one, checking each on its own. */
struct ckcur {
    struct rd r;
    int ok;        /* reader usable */
    uint64_t k;    /* frames read */
    uint64_t prev; /* tree size of the last valid checkpoint */
    int have_prev;
    fa_checkpoint cp; /* the current valid checkpoint */
    char origin[FA_NOTE_NAME_MAX + 1];
    char *note;
};

static int64_t size_index(uint64_t size)
{
    return size == 0 ? -1 : (int64_t)(size - 1);
}

/* Loads the next valid checkpoint into c->cp; returns 1, or 0 at the end. */
static int ck_next(struct vstate *v, struct ckcur *c)
{
    while (c->ok) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off, k = c->k;
        /* Until the checkpoint is trusted, blame the record after the last
         * valid checkpoint (the first empty-tree checkpoint: the file). */
        int64_t at = c->have_prev ? (int64_t)c->prev : -1;
        fa_checkpoint cp;
        fa_error e;
        enum frame_status st = rd_frame(&c->r, MAX_NOTE, &p, &len, &off);

        if (st == FRAME_EOF) {
            c->ok = 0;
            return 0;
        }
        if (st == FRAME_IOERR || st == FRAME_TORN || st == FRAME_BADLEN) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " at offset %" PRIu64 " of %s.checkpoints: %s", k, off,
                    v->path,
                    st == FRAME_IOERR  ? strerror(errno)
                    : st == FRAME_TORN ? "incomplete, the file ends inside it (a torn write, or "
                                         "the file was truncated)"
                                       : "invalid length; the checkpoints after it cannot be read");
            c->ok = 0;
            return 0;
        }
        c->k++;
        memcpy(c->note, p, len);
        c->note[len] = 0;
        if (fa_checkpoint_parse(c->note, len, &cp, &e) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at, "checkpoint %" PRIu64 "%s: %s", k,
                    st == FRAME_BADCRC ? " (checksum mismatch)" : "", e.msg);
            continue;
        }
        if (st == FRAME_BADCRC) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 "?): checksum mismatch (it was "
                    "changed)",
                    k, cp.size);
            continue;
        }
        at = size_index(cp.size);
        if (c->origin[0] && strcmp(c->origin, cp.origin) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 "): origin \"%s\" differs from "
                    "\"%s\" of the checkpoints before it",
                    k, cp.size, cp.origin, c->origin);
            continue;
        }
        if (c->have_prev && cp.size <= c->prev) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 ") does not grow the tree of the "
                    "checkpoint before it (%" PRIu64 ")",
                    k, cp.size, c->prev);
            continue;
        }
        if (fa_checkpoint_open(c->note, len, v->o->key, &cp, &e) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at, "checkpoint %" PRIu64 " (tree size %" PRIu64 "): %s",
                    k, cp.size, e.msg);
            continue;
        }
        if (!c->origin[0])
            snprintf(c->origin, sizeof(c->origin), "%s", cp.origin);
        c->prev = cp.size;
        c->have_prev = 1;
        c->cp = cp;
        v->res->checkpoints++;
        return 1;
    }
    return 0;
}

static const uint8_t *region_key(const fa_audit_verify_opts *o, const char *region)
{
    for (size_t i = 0; i < o->nregion_keys; i++)
        if (strcmp(o->region_keys[i].region, region) == 0)
            return o->region_keys[i].pk;
    return NULL;
}

/* Checks one decoded record, its place after the one before it, and its
 * region signatures. */
struct vprev {
    int have, admin;
    uint64_t round, new_version;
    uint32_t attempt;
    uint8_t new_model[HLEN];
    char federation[256];
    int have_table;
    uint8_t table[HLEN];
};

/* The federated-evaluation statements of a record: each signed by the
 * region it names, about the model the round started from; and the means
 * the record publishes are those of the statements. */
static void verify_evaluations(struct vstate *v, int64_t at, const Fedagg__AuditRecord *r)
{
    double n = 0, sl = 0, wl = 0, sa = 0, wa = 0;
    size_t ok = 0;

    for (size_t k = 0; k < r->n_evaluations; k++) {
        const Fedagg__SignedEval *se = r->evaluations[k];
        Fedagg__EvalStatement *s =
            fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
        const uint8_t *pk;
        if (!s) {
            vreport(v, FA_AUDIT_PROBLEM, at, "evaluation %zu: the statement does not decode", k);
            continue;
        }
        if (!s->region || !s->federation_id || strcmp(s->federation_id, r->federation_id) ||
            s->model_version != r->prev_version || s->model_sha256.len != HLEN ||
            memcmp(s->model_sha256.data, r->prev_model_sha256.data, HLEN) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "evaluation %zu (region %s) is not of this record's previous model "
                    "(version %" PRIu64 " of federation %s)",
                    k, s->region ? s->region : "?", r->prev_version, r->federation_id);
        } else if (!(pk = region_key(v->o, s->region))) {
            v->res->region_unknown++;
        } else if (fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, se->statement.data,
                                                se->statement.len, se->signature.data) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "region %s: the signature of its evaluation report does not verify with its "
                    "key",
                    s->region);
        } else {
            v->res->eval_signatures++;
        }
        n += (double)s->num_examples;
        if (!isnan(s->loss)) {
            sl += (double)s->num_examples * s->loss;
            wl += (double)s->num_examples;
        }
        if (!isnan(s->accuracy)) {
            sa += (double)s->num_examples * s->accuracy;
            wa += (double)s->num_examples;
        }
        ok++;
        fedagg__eval_statement__free_unpacked(s, NULL);
    }
    if (r->federated_eval && ok) {
        const Fedagg__EvalSummary *m = r->federated_eval;
        double ml = wl > 0 ? sl / wl : NAN, ma = wa > 0 ? sa / wa : NAN;
        int same_l = isnan(ml) ? isnan(m->loss) : fabs(m->loss - ml) <= 1e-9 * (1 + fabs(ml));
        int same_a = isnan(ma) ? isnan(m->accuracy) : fabs(m->accuracy - ma) <= 1e-9;
        if (m->num_examples != (uint64_t)n || m->regions != ok || !same_l || !same_a)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "the federated evaluation means (n=%" PRIu64 " loss=%g accuracy=%g) are not "
                    "those of its %zu signed statements (n=%.0f loss=%g accuracy=%g)",
                    m->num_examples, m->loss, m->accuracy, ok, n, ml, ma);
    } else if (r->federated_eval && r->federated_eval->regions) {
        vreport(v, FA_AUDIT_PROBLEM, at,
                "a federated evaluation summary of %u regions without their statements",
                r->federated_eval->regions);
    }
}

static void verify_record(struct vstate *v, uint64_t i, const Fedagg__AuditRecord *r,
                          struct vprev *prev)
{
    char why[300];
    int64_t at = (int64_t)i;

    if (fa_audit_record_check(r, why, sizeof(why)) != 0) {
        vreport(v, FA_AUDIT_PROBLEM, at, "%s", why);
        return;
    }
    if (prev->federation[0] && strcmp(prev->federation, r->federation_id) != 0)
        vreport(v, FA_AUDIT_PROBLEM, at, "federation \"%s\" differs from \"%s\" of record 0",
                r->federation_id, prev->federation);
    if (record_follows(prev->have, prev->round, prev->attempt, prev->admin, prev->new_version,
                       prev->new_model, r, why, sizeof(why)) != 0)
        vreport(v, FA_AUDIT_PROBLEM, at, "%s", why);
    if (r->tensor_table_digest.len == HLEN) {
        if (prev->have_table && memcmp(prev->table, r->tensor_table_digest.data, HLEN) != 0)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "the model's tensor table differs from that of the records before it");
        prev->have_table = 1;
        memcpy(prev->table, r->tensor_table_digest.data, HLEN);
    }
    verify_evaluations(v, at, r);
    if (v->privacy)
        fa_privacy_audit_record(v->privacy, at, r);
    for (size_t k = 0; k < r->n_commitments; k++) {
        const Fedagg__RegionCommitment *c = r->commitments[k];
        const uint8_t *pk = region_key(v->o, c->region);
        if (!pk) {
            v->res->region_unknown++;
            continue;
        }
        if (c->signature.len == 0) {
            vreport(v, FA_AUDIT_NOTE, at,
                    "region %s: upload commitment unsigned (it dropped out after uploading, "
                    "before the consistency check; round %" PRIu64 " attempt %u)",
                    c->region, r->round, r->attempt);
            continue;
        }
        if (fa_secagg_commitment_verify(r->federation_id, r->round, r->attempt, c->region,
                                        c->upload_sha256.data, c->signature.data, pk) != 0)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "region %s: the signature of its upload commitment does not verify with its "
                    "key (round %" PRIu64 " attempt %u)",
                    c->region, r->round, r->attempt);
        else
            v->res->region_signatures++;
    }
    if (!prev->federation[0])
        snprintf(prev->federation, sizeof(prev->federation), "%s", r->federation_id);
    prev->have = 1;
    prev->admin = r->admin != NULL;
    prev->round = r->round;
    prev->attempt = r->attempt;
    prev->new_version = r->new_version;
    memcpy(prev->new_model, r->new_model_sha256.data, HLEN);
}

/* The privacy ledger's findings are the verification's. */
static void privacy_finding(void *ctx, int severity, int64_t index, const char *msg)
{
    vreport(ctx, severity, index, "%s", msg);
}

int fa_audit_verify(const char *path, const fa_audit_verify_opts *opts, fa_audit_verify_result *res,
                    fa_error *err)
{
    struct vstate v = {opts, res, err, path, NULL};
    struct ckcur c;
    struct rd r, tr;
    struct vprev prev;
    fa_merkle_frontier fr;
    uint8_t hdr[HDR_LEN], root[HLEN], done[64 * HLEN];
    uint64_t size = 0, tsize = 0, tstored = 0, tpos = 0, tstale_from = 0, matched = 0;
    uint64_t n = 0, root_bad = 0;
    int fd = -1, cfd = -1, tfd = -1, have_ck = 0, tstale = 0, have_tree = 0;
    char *cpath = NULL, *tpath = NULL;
    int rc = 0;

    memset(res, 0, sizeof(*res));
    memset(&c, 0, sizeof(c));
    memset(&prev, 0, sizeof(prev));
    memset(&r, 0, sizeof(r));
    memset(&tr, 0, sizeof(tr));
    res->first_bad = INT64_MAX;
    fa_error_clear(err);
    if (!opts || !opts->key)
        return fa_errorf(err, FA_ERR_INVAL, "the aggregator's public key is needed to verify");
    if (fa_privacy_audit_new(&v.privacy, opts->region_keys, opts->nregion_keys, privacy_finding,
                             &v, err) != 0)
        return FA_ERR_NOMEM;
    fa_merkle_frontier_init(&fr);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto out;
    }
    cpath = path_with(path, ".checkpoints");
    tpath = path_with(path, ".tree");
    c.note = malloc(MAX_NOTE + 1);
    if (!cpath || !tpath || !c.note) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (file_size(fd, &size) != 0 || rd_init(&r, fd, HDR_LEN, size) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (size < HDR_LEN || read_all_at(fd, hdr, HDR_LEN, 0) != 0 || !header_ok(hdr, log_magic)) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "not a fedagg audit log (bad file header)");
        goto done;
    }

    cfd = open(cpath, O_RDONLY | O_CLOEXEC);
    if (cfd < 0) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "%s: %s: no signed checkpoints to verify against", cpath,
                strerror(errno));
    } else if (file_size(cfd, &tsize) != 0 || tsize < HDR_LEN ||
               read_all_at(cfd, hdr, HDR_LEN, 0) != 0 || !header_ok(hdr, ckpt_magic)) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "%s: not a fedagg checkpoints file (bad header)", cpath);
    } else if (rd_init(&c.r, cfd, HDR_LEN, tsize) == 0) {
        c.ok = 1;
    } else {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    tfd = open(tpath, O_RDONLY | O_CLOEXEC);
    if (tfd >= 0 && file_size(tfd, &tsize) == 0 && tsize >= HDR_LEN &&
        read_all_at(tfd, hdr, HDR_LEN, 0) == 0 && header_ok(hdr, tree_magic) &&
        rd_init(&tr, tfd, HDR_LEN, tsize) == 0) {
        have_tree = 1;
        tstored = (tsize - HDR_LEN) / HLEN;
    }

    have_ck = ck_next(&v, &c);
    while (have_ck && c.cp.size == 0) {
        fa_merkle_empty_root(root);
        if (memcmp(root, c.cp.root, HLEN) != 0)
            vreport(&v, FA_AUDIT_PROBLEM, -1,
                    "checkpoint %" PRIu64 " signs an empty tree with a wrong root", c.k - 1);
        res->signed_size = 0;
        memcpy(res->root, c.cp.root, HLEN);
        have_ck = ck_next(&v, &c);
    }

    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        unsigned k;
        Fedagg__AuditRecord *rec;
        enum frame_status st = rd_frame(&r, FA_AUDIT_MAX_RECORD, &p, &len, &off);

        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (st == FRAME_TORN || st == FRAME_BADLEN) {
            vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n, "at offset %" PRIu64 ": %s", off,
                    st == FRAME_TORN
                        ? "incomplete, the file ends inside it (a torn write: the aggregator cuts "
                          "it off when it next opens the log; or the log was truncated)"
                        : "invalid length field; the records after it cannot be read");
            break;
        }
        if (st == FRAME_BADCRC)
            vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n,
                    "at offset %" PRIu64 ": checksum mismatch (the record was changed)", off);
        rec = fedagg__audit_record__unpack(NULL, len, p);
        if (!rec) {
            if (st == FRAME_OK)
                vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n, "not a valid AuditRecord (protobuf)");
        } else {
            verify_record(&v, n, rec, &prev);
            fedagg__audit_record__free_unpacked(rec, NULL);
        }

        fa_merkle_leaf_hash(p, len, done);
        fa_merkle_frontier_push(&fr, done, done, &k);
        for (unsigned j = 0; j < k; j++, tpos++) {
            if (!have_tree || tstale)
                continue;
            if (tpos >= tstored || rd_fill(&tr, HLEN) != HLEN ||
                memcmp(tr.buf + tr.pos, done + j * HLEN, HLEN) != 0) {
                tstale = 1;
                tstale_from = tpos;
            } else {
                rd_skip(&tr, HLEN);
            }
        }
        n++;
        res->records = n;
        while (have_ck && c.cp.size == n) {
            fa_merkle_frontier_root(&fr, root);
            if (memcmp(root, c.cp.root, HLEN) != 0) {
                if (root_bad++ == 0)
                    vreport(&v, FA_AUDIT_PROBLEM, (int64_t)matched,
                            "the tree of records 0..%" PRIu64 " does not match signed checkpoint "
                            "%" PRIu64 " (tree size %" PRIu64 ") although the one before matched "
                            "%" PRIu64 " records: record %" PRIu64 "%s was changed, removed, "
                            "inserted or reordered",
                            n - 1, c.k - 1, n, matched, matched,
                            matched + 1 < n ? " or a later one" : "");
            } else if (!root_bad) {
                matched = n;
            }
            res->signed_size = n;
            memcpy(res->root, c.cp.root, HLEN);
            have_ck = ck_next(&v, &c);
        }
    }

    if (have_ck) {
        uint64_t s = c.cp.size;
        while (ck_next(&v, &c))
            s = c.cp.size;
        vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n,
                "the log ends after %" PRIu64 " records but a checkpoint signs a tree of %" PRIu64
                ": records %" PRIu64 "..%" PRIu64 " are missing (truncated or deleted)",
                n, s, n, s - 1);
        res->signed_size = s;
        memcpy(res->root, c.cp.root, HLEN);
    } else if (n > res->signed_size) {
        vreport(&v, FA_AUDIT_PROBLEM, (int64_t)res->signed_size,
                "records %" PRIu64 "..%" PRIu64 " are not covered by any valid signed checkpoint "
                "(the aggregator stopped before signing them, or checkpoints were removed)",
                res->signed_size, n - 1);
    }
    if (root_bad > 1)
        vreport(&v, FA_AUDIT_NOTE, (int64_t)matched,
                "%" PRIu64 " later checkpoints do not match either (they cover the same records)",
                root_bad - 1);
    if (res->region_unknown)
        vreport(&v, FA_AUDIT_NOTE, -1,
                "%" PRIu64 " region commitment signatures were not checked: no key given for "
                "their region",
                res->region_unknown);
    /* A stale tree file is worth a note only when the records are sound (a
     * changed record makes it differ too). */
    if (have_tree && res->problems == 0 && (tstale || tstored != tpos))
        vreport(&v, FA_AUDIT_NOTE, -1,
                "%s differs from the records (from node %" PRIu64 " of %" PRIu64 "): a stale "
                "cache, rebuilt when the aggregator next opens the log",
                tpath, tstale ? tstale_from : (tpos < tstored ? tpos : tstored), tpos);
    snprintf(res->origin, sizeof(res->origin), "%s", c.origin);
done:
    rc = res->problems ? FA_ERR_VERIFY : 0;
out:
    if (v.privacy)
        for (size_t i = 0; i < fa_privacy_audit_count(v.privacy); i++)
            res->privacy_signatures += fa_privacy_audit_at(v.privacy, i)->verified;
    fa_privacy_audit_del(v.privacy);
    rd_free(&r);
    rd_free(&tr);
    rd_free(&c.r);
    free(c.note);
    free(cpath);
    free(tpath);
    if (fd >= 0)
        close(fd);
    if (cfd >= 0)
        close(cfd);
    if (tfd >= 0)
        close(tfd);
    return rc;
}
